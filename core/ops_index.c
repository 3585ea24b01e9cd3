/* ops_index.c: gather, index_select, embedding, cat, stack and tril/triu,
 * with index validation (0-based index values; errors name the bad index)
 * and backward rules. */
#include "ops.h"
#include "backend/backend.h"
#include "profile.h"
#include <stdlib.h>
#include <string.h>

static void outer_inner(const Tensor *t, int dim, int64_t *outer, int64_t *inner) {
    *outer = *inner = 1;
    for (int d = 0; d < dim; d++) *outer *= t->shape[d];
    for (int d = dim + 1; d < t->ndim; d++) *inner *= t->shape[d];
}

/* Contiguous int64 copy of idx (int64 or int32, as torch) with every value
 * checked against [0, n). Negative values are errors, as in PyTorch's
 * gather / index_select / embedding (index tensors hold data, not Lua
 * positions). */
static Tensor *checked_index(Tensor *idx, int64_t n, const char *op) {
    if (idx->dtype != DT_I64 && idx->dtype != DT_I32)
        return accel_fail("%s: expected dtype int32 or int64 for index, got %s", op, dtype_name(idx->dtype));
    bool prev = ag_set_grad_enabled(false);
    Tensor *c = tensor_empty(idx->shape, idx->ndim, DT_I64, idx->device);
    ag_set_grad_enabled(prev);
    if (!c) return NULL;
    tensor_copy_strided(c, idx);
    HostMap m; /* indices are checked on the host */
    const int64_t *p = tensor_host_map(c, HOST_READ, &m);
    for (int64_t i = 0; p && i < c->numel; i++) {
        if (p[i] < 0 || p[i] >= n) {
            int64_t bad = p[i];
            tensor_host_unmap(&m);
            tensor_release(c);
            return accel_fail("%s: index %lld is out of range for a dimension of size %lld (index values are 0-based)", op,
                              (long long)bad, (long long)n);
        }
    }
    if (!p || tensor_host_unmap(&m) < 0) {
        tensor_release(c);
        return NULL;
    }
    return c;
}

static Tensor *contig(Tensor *t) {
    bool prev = ag_set_grad_enabled(false);
    Tensor *c = tensor_contiguous(t);
    ag_set_grad_enabled(prev);
    return c;
}

/* z += src at the int64 indices idx along dim, per element (k_scatter_add:
 * idx and src of one shape) or per slice along dim (k_index_add: idx 1-D);
 * z and src contiguous, of z's dtype (float32 or float64). The index
 * matches z except along dim, so both share z's outer / inner extents. */
static void add_at(Tensor *z, int dim, const Tensor *idx, const Tensor *src, bool per_element) {
    int64_t outer, inner;
    outer_inner(z, dim, &outer, &inner);
    const Backend *b = backend_for(z->device);
    if (per_element)
        b->scatter_add(z->dtype, tensor_data(z), outer, z->shape[dim], inner, tensor_data(idx), idx->shape[dim], tensor_data(src));
    else
        b->index_add(z->dtype, tensor_data(z), outer, z->shape[dim], inner, tensor_data(idx), idx->numel, tensor_data(src));
}

/* ---- gradients of gather and index_select ---- */

/* The input's gradient: zeros with g added at the saved indices, per
 * element (gather) or per slice along dim (index_select). */
static int bw_add_at_index(AGNode *n, Tensor *g, Tensor **gin, bool per_element) {
    Tensor *idx = ag_saved(n, 0);
    if (!idx) return -1;
    int dim = (int)n->i[0];
    DType acc = grad_accum_dtype(g->dtype);
    Tensor *z = tensor_zeros(n->edges[0].shape, n->edges[0].ndim, acc, g->device);
    Tensor *gc = z ? tensor_contiguous_as(g, acc) : NULL;
    if (gc) add_at(z, dim, idx, gc, per_element);
    tensor_release(gc);
    gin[0] = gc ? tensor_to_dtype_owned(z, g->dtype) : NULL;
    if (!gc) tensor_release(z);
    return gin[0] ? 0 : -1;
}

static int bw_gather(AGNode *n, Tensor *g, Tensor **gin) { return bw_add_at_index(n, g, gin, true); }
static int bw_index_select(AGNode *n, Tensor *g, Tensor **gin) { return bw_add_at_index(n, g, gin, false); }

/* ---- gather ---- */

/* t, or a 0-dim t as one element: torch's gather / scatter count a 0-dim
 * index (and src) as 1-dim against a 1-dim input (scatter_(0, tensor(5), 1)) */
static Tensor *as_one_dim(Tensor *t) {
    return t->ndim == 0 ? tensor_reshape(t, (int64_t[]){1}, 1) : tensor_retain(t);
}

/* op(a, dim, index, src) with a 0-dim index and src seen as 1-dim (a 1-dim);
 * out_0d: the result back to 0-dim (gather's takes the index's shape) */
static Tensor *with_one_dim_index(Tensor *(*op)(Tensor *, int, Tensor *, Tensor *), Tensor *a, int dim, Tensor *index,
                                  Tensor *src, bool out_0d) {
    Tensor *i1 = as_one_dim(index), *s1 = src && i1 ? as_one_dim(src) : NULL;
    Tensor *r = i1 && (s1 || !src) ? op(a, dim, i1, s1) : NULL;
    tensor_release(i1);
    tensor_release(s1);
    if (!r || !out_0d) return r;
    Tensor *r0 = tensor_reshape(r, (int64_t[]){1}, 0); /* (the shape array is not read) */
    tensor_release(r);
    return r0;
}

static Tensor *gather_of(Tensor *a, int dim, Tensor *index, Tensor *unused) {
    (void)unused;
    return op_gather(a, dim, index);
}

Tensor *op_gather(Tensor *a, int dim, Tensor *index) {
    PROF_SCOPE("gather", PROF_FORWARD, a, index);
    if (a->ndim == 1 && index->ndim == 0) return with_one_dim_index(gather_of, a, dim, index, NULL, true);
    if (tensor_check_device("gather", a, index) < 0) return NULL;
    if ((dim = tensor_wrap_dim(a, dim, "gather")) < 0) return NULL;
    if (index->ndim != a->ndim)
        return accel_fail("gather: index (shape %s) must have as many dims as the input (shape %s)", tensor_shape_str(index), tensor_shape_str(a));
    bool smaller = false;
    for (int d = 0; d < a->ndim; d++) {
        if (d != dim && index->shape[d] > a->shape[d])
            return accel_fail("gather: index shape %s must not be larger than input shape %s except in dim %d",
                              tensor_shape_str(index), tensor_shape_str(a), dim + 1);
        smaller = smaller || (d != dim && index->shape[d] < a->shape[d]);
    }
    if (smaller) { /* torch reads the leading part of the other dims: gather from that view */
        Tensor *v = tensor_retain(a);
        for (int d = 0; v && d < a->ndim; d++) {
            if (d == dim || index->shape[d] == a->shape[d]) continue;
            Tensor *nv = tensor_narrow(v, d, 0, index->shape[d]);
            tensor_release(v);
            v = nv;
        }
        Tensor *out = v ? op_gather(v, dim, index) : NULL;
        tensor_release(v);
        return out;
    }
    Tensor *idx = checked_index(index, a->ndim ? a->shape[dim] : 1, "gather");
    Tensor *x = idx ? contig(a) : NULL, *out = x ? tensor_empty(index->shape, index->ndim, a->dtype, a->device) : NULL;
    if (out) {
        int64_t outer, inner;
        outer_inner(a, dim, &outer, &inner);
        backend_for(x->device)->gather(tensor_data(x), outer, a->ndim ? a->shape[dim] : 1, inner, tensor_data(idx), index->ndim ? index->shape[dim] : 1,
                 tensor_data(out), dtype_size(a->dtype));
        AGNode *n = ag_record("gather", bw_gather, out, &a, 1);
        if (n) n->i[0] = dim, ag_save(n, idx);
    }
    tensor_release(idx), tensor_release(x);
    return out;
}

/* ---- index_select / embedding ---- */

static Tensor *index_select_as(Tensor *a, int dim, Tensor *index, const char *op);

/* index_select of a 0-dim tensor, as torch: one index (0) picks its value */
static Tensor *index_select_scalar(Tensor *a, int dim, Tensor *index) {
    if (tensor_wrap_dim(a, dim, "index_select") < 0) return NULL;
    if (index->numel != 1)
        return accel_fail("index_select: index to a 0-dim tensor can have only 1 value, got %lld value(s)",
                          (long long)index->numel);
    Tensor *v = tensor_reshape(a, (int64_t[]){1}, 1), *r = v ? index_select_as(v, 0, index, "index_select") : NULL;
    Tensor *out = r ? tensor_reshape(r, NULL, 0) : NULL;
    tensor_release(v), tensor_release(r);
    return out;
}

/* index_select; `op` names it in errors (embedding uses it too) */
static Tensor *index_select_as(Tensor *a, int dim, Tensor *index, const char *op) {
    if (tensor_check_device(op, a, index) < 0) return NULL;
    if (a->ndim == 0) return index_select_scalar(a, dim, index);
    if ((dim = tensor_wrap_dim(a, dim, "index_select")) < 0) return NULL;
    if (index->ndim > 1) return accel_fail("index_select: index must be 1-D, got shape %s", tensor_shape_str(index));
    int64_t shape[TENSOR_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[dim] = index->numel;
    if (shape_check("index_select", shape, a->ndim, (int)a->dtype) < 0) return NULL;
    Tensor *idx = checked_index(index, a->shape[dim], op);
    Tensor *x = idx ? contig(a) : NULL;
    Tensor *out = x ? tensor_empty(shape, a->ndim, a->dtype, a->device) : NULL;
    if (out) {
        int64_t outer, inner;
        outer_inner(a, dim, &outer, &inner);
        backend_for(x->device)->index_select(tensor_data(x), outer, a->shape[dim], inner, tensor_data(idx), index->numel, tensor_data(out), dtype_size(a->dtype));
        AGNode *n = ag_record("index_select", bw_index_select, out, &a, 1);
        if (n) n->i[0] = dim, ag_save(n, idx);
    }
    tensor_release(idx), tensor_release(x);
    return out;
}

Tensor *op_index_select(Tensor *a, int dim, Tensor *index) {
    PROF_SCOPE("index_select", PROF_FORWARD, a, index);
    return index_select_as(a, dim, index, "index_select");
}

Tensor *op_embedding(Tensor *weight, Tensor *index) {
    PROF_SCOPE("embedding", PROF_FORWARD, weight, index);
    if (tensor_check_device("embedding", weight, index) < 0) return NULL;
    if (weight->ndim != 2) return accel_fail("embedding: weight must be 2-D (num_embeddings, dim), got %s", tensor_shape_str(weight));
    if (index->ndim == TENSOR_MAX_DIMS) return accel_fail("embedding: index has %d dims; at most %d are supported", index->ndim, TENSOR_MAX_DIMS - 1);
    int64_t shape[TENSOR_MAX_DIMS];
    memcpy(shape, index->shape, sizeof(int64_t) * (size_t)index->ndim);
    shape[index->ndim] = weight->shape[1];
    if (shape_check("embedding", shape, index->ndim + 1, (int)weight->dtype) < 0) return NULL;
    Tensor *flat = tensor_reshape(index, (int64_t[]){-1}, 1);
    Tensor *rows = flat ? index_select_as(weight, 0, flat, "embedding") : NULL;
    tensor_release(flat);
    if (!rows) return NULL;
    Tensor *r = tensor_reshape(rows, shape, index->ndim + 1);
    tensor_release(rows);
    return r;
}

/* ---- scatter_add / index_add (out of place) ---- */

/* The gradient of both: self's passes through; src's is g read back at the
 * saved indices (gather for scatter_add, index_select for index_add). */
static int bw_add_into(AGNode *n, Tensor *g, Tensor **gin, bool per_element) {
    Tensor *idx = ag_saved(n, 0);
    if (!idx) return -1;
    int dim = (int)n->i[0];
    if (ag_input_needs_grad(n, 0) && !(gin[0] = tensor_retain(g))) return -1;
    if (ag_input_needs_grad(n, 1)) {
        gin[1] = per_element ? op_gather(g, dim, idx) : op_index_select(g, dim, idx);
        if (!gin[1]) return -1;
    }
    return 0;
}

static int bw_scatter_add(AGNode *n, Tensor *g, Tensor **gin) { return bw_add_into(n, g, gin, true); }
static int bw_index_add(AGNode *n, Tensor *g, Tensor **gin) { return bw_add_into(n, g, gin, false); }

/* a + src added at idx (checked, int64, contiguous) along dim: per element
 * (scatter) or per slice. Accumulates in float32 (float64 for float64 and
 * integers, exact up to 2^53) and rounds once to a's dtype. */
static Tensor *add_at_index(const char *op, Tensor *a, int dim, Tensor *idx, Tensor *src, bool per_element) {
    DType acc = a->dtype == DT_F64 || !dtype_is_float(a->dtype) ? DT_F64 : DT_F32;
    bool prev = ag_set_grad_enabled(false);
    Tensor *z = tensor_empty(a->shape, a->ndim, acc, a->device);
    if (z) tensor_copy_strided(z, a);
    Tensor *s = z ? tensor_contiguous_as(src, acc) : NULL;
    ag_set_grad_enabled(prev);
    if (!s) {
        tensor_release(z);
        return NULL;
    }
    add_at(z, dim, idx, s, per_element);
    tensor_release(s);
    Tensor *out = tensor_to_dtype_owned(z, a->dtype);
    if (!out) return NULL;
    Tensor *ins[2] = {a, src};
    AGNode *n = ag_record(op, per_element ? bw_scatter_add : bw_index_add, out, ins, 2);
    if (n) n->i[0] = dim, ag_save(n, idx);
    return out;
}

/* The checks both share: devices, dtypes, a dim of a with dims. */
static int check_add_into(const char *op, Tensor *a, int *dim, Tensor *index, Tensor *src) {
    if (tensor_check_device(op, a, index) < 0 || tensor_check_device(op, a, src) < 0) return -1;
    if (a->ndim == 0) return accel_fail_int("%s: expects at least a 1-dimensional tensor", op);
    if ((*dim = tensor_wrap_dim(a, *dim, op)) < 0) return -1;
    if (src->dtype != a->dtype)
        return accel_fail_int("%s: Expected self.dtype to be equal to src.dtype (%s and %s)", op, dtype_name(a->dtype),
                              dtype_name(src->dtype));
    return 0;
}

/* t with zeros appended along dim d up to size n (differentiable: cat) */
static Tensor *pad_with_zeros(Tensor *t, int d, int64_t n) {
    int64_t shape[TENSOR_MAX_DIMS];
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    shape[d] = n - t->shape[d];
    Tensor *z = tensor_zeros(shape, t->ndim, t->dtype, t->device);
    Tensor *parts[2] = {t, z};
    Tensor *out = z ? op_cat(parts, 2, d) : NULL;
    tensor_release(z);
    return out;
}

/* torch's scatter_add also takes an index smaller than src in any dim and
 * smaller than a in the dims but dim: src is cut to the index's shape, then
 * both are padded with zeros up to a's size in those dims (adding 0 at
 * position 0 changes nothing). On success *index and *src are new
 * references and 0 is returned; 1: the shapes do not fit; -1: an error. */
static int fit_smaller_index(Tensor *a, int dim, Tensor **index, Tensor **src) {
    Tensor *ix = *index, *s = *src;
    if (ix->ndim != a->ndim || s->ndim != a->ndim) return 1;
    for (int d = 0; d < a->ndim; d++)
        if (ix->shape[d] > s->shape[d] || (d != dim && ix->shape[d] > a->shape[d])) return 1;
    ix = tensor_retain(ix), s = tensor_retain(s);
    for (int d = 0; d < a->ndim && ix && s; d++) {
        if (s->shape[d] > ix->shape[d]) {
            Tensor *cut = tensor_narrow(s, d, 0, ix->shape[d]);
            tensor_release(s), s = cut;
        }
        if (s && d != dim && ix->shape[d] < a->shape[d]) {
            Tensor *pi = pad_with_zeros(ix, d, a->shape[d]), *ps = pad_with_zeros(s, d, a->shape[d]);
            tensor_release(ix), tensor_release(s);
            ix = pi, s = ps;
        }
    }
    if (!ix || !s) {
        tensor_release(ix), tensor_release(s);
        return -1;
    }
    *index = ix, *src = s;
    return 0;
}

/* out = a, then out[..., index[j][i], ...] += src[j][i] along dim; index
 * of a's shape except along dim, src of index's shape (a smaller index
 * fits as torch's: fit_smaller_index) */
Tensor *op_scatter_add(Tensor *a, int dim, Tensor *index, Tensor *src) {
    PROF_SCOPE("scatter_add", PROF_FORWARD, a, src);
    if (a->ndim == 1 && (index->ndim == 0 || src->ndim == 0))
        return with_one_dim_index(op_scatter_add, a, dim, index, src, false);
    if (check_add_into("scatter_add", a, &dim, index, src) < 0) return NULL;
    if (index->ndim != a->ndim)
        return accel_fail("scatter_add: index (shape %s) must have as many dims as the input (shape %s)",
                          tensor_shape_str(index), tensor_shape_str(a));
    bool same = index->ndim == a->ndim && src->ndim == a->ndim;
    for (int d = 0; same && d < a->ndim; d++)
        same = src->shape[d] == index->shape[d] && (d == dim || index->shape[d] == a->shape[d]);
    if (!same) {
        int fit = fit_smaller_index(a, dim, &index, &src);
        if (fit < 0) return NULL;
        if (fit > 0)
            return accel_fail("scatter_add: index (shape %s) must be no larger than src (shape %s), and no larger than "
                              "the input (shape %s) apart from dim %d", tensor_shape_str(index), tensor_shape_str(src),
                              tensor_shape_str(a), dim + 1);
        Tensor *out = op_scatter_add(a, dim, index, src);
        tensor_release(index), tensor_release(src);
        return out;
    }
    Tensor *idx = checked_index(index, a->shape[dim], "scatter_add");
    Tensor *out = idx ? add_at_index("scatter_add", a, dim, idx, src, true) : NULL;
    tensor_release(idx);
    return out;
}

/* out = a, then out's slice index[j] along dim += source's slice j */
Tensor *op_index_add(Tensor *a, int dim, Tensor *index, Tensor *source) {
    PROF_SCOPE("index_add", PROF_FORWARD, a, source);
    if (check_add_into("index_add", a, &dim, index, source) < 0) return NULL;
    if (index->ndim > 1) return accel_fail("index_add: index must be 1-D, got shape %s", tensor_shape_str(index));
    bool same = source->ndim == a->ndim;
    for (int d = 0; same && d < a->ndim; d++) same = source->shape[d] == (d == dim ? index->numel : a->shape[d]);
    if (!same)
        return accel_fail("index_add: source (shape %s) must have the input's shape (%s) with %lld in dim %d (the index "
                          "length)", tensor_shape_str(source), tensor_shape_str(a), (long long)index->numel, dim + 1);
    Tensor *idx = checked_index(index, a->shape[dim], "index_add");
    Tensor *out = idx ? add_at_index("index_add", a, dim, idx, source, false) : NULL;
    tensor_release(idx);
    return out;
}

/* ---- cat / stack ---- */

static int bw_cat(AGNode *n, Tensor *g, Tensor **gin) {
    int dim = (int)n->i[0];
    int64_t start = 0;
    for (int k = 0; k < n->n_in; k++) {
        int64_t len = n->edges[k].ndim ? n->edges[k].shape[dim] : 0;
        if (ag_input_needs_grad(n, k) && !(gin[k] = tensor_narrow(g, dim, start, len))) return -1;
        start += len;
    }
    return 0;
}

static bool legacy_empty(const Tensor *t) { return t->ndim == 1 && t->shape[0] == 0; }

/* cat of the tensors that are not 1-D and empty (torch skips those, so
 * `acc = cat({acc, x})` can start from an empty tensor); their dtypes still
 * count. NULL with *skipped false when there is nothing to skip. */
static Tensor *cat_skipping_empty(Tensor **ts, int n, int dim, bool *skipped) {
    int m = 0;
    for (int k = 0; k < n; k++) m += !legacy_empty(ts[k]);
    *skipped = m > 0 && m < n;
    if (!*skipped) return NULL;
    Tensor **kept = malloc(sizeof(Tensor *) * (size_t)m);
    if (!kept) return accel_fail("out of memory");
    DType dt = ts[0]->dtype;
    for (int k = 0, j = 0; k < n; k++) {
        dt = dtype_promote(dt, ts[k]->dtype);
        if (!legacy_empty(ts[k])) kept[j++] = ts[k];
    }
    Tensor *out = op_cat(kept, m, dim);
    free(kept);
    if (out && out->dtype != dt) {
        Tensor *cast = op_cast(out, dt);
        tensor_release(out);
        out = cast;
    }
    return out;
}

Tensor *op_cat(Tensor **ts, int n, int dim) {
    PROF_SCOPE("cat", PROF_FORWARD, n > 0 ? ts[0] : NULL, NULL);
    if (n == 0) return accel_fail("cat: expected a non-empty list of tensors");
    bool skipped;
    Tensor *without_empty = cat_skipping_empty(ts, n, dim, &skipped);
    if (skipped) return without_empty;
    Tensor *ref = ts[0];
    if (ref->ndim == 0) return accel_fail("cat: zero-dimensional tensor (item 1) cannot be concatenated");
    if ((dim = tensor_wrap_dim(ref, dim, "cat")) < 0) return NULL;
    int64_t shape[TENSOR_MAX_DIMS];
    memcpy(shape, ref->shape, sizeof shape);
    shape[dim] = 0;
    DType dt = ref->dtype;
    for (int k = 0; k < n; k++) {
        Tensor *t = ts[k];
        if (tensor_check_device("cat", ref, t) < 0) return NULL;
        bool ok = t->ndim == ref->ndim;
        for (int d = 0; ok && d < t->ndim; d++) ok = d == dim || t->shape[d] == ref->shape[d];
        if (!ok)
            return accel_fail("cat: tensor %d has shape %s, which does not match tensor 1's shape %s except in dim %d", k + 1,
                              tensor_shape_str(t), tensor_shape_str(ref), dim + 1);
        if ((shape[dim] = size_add(shape[dim], t->shape[dim])) < 0)
            return accel_fail("cat: the sizes of dim %d add up to more than 2^63 (at tensor %d of %d)", dim + 1, k + 1, n);
        dt = dtype_promote(dt, t->dtype);
    }
    if (shape_check("cat", shape, ref->ndim, (int)dt) < 0) return NULL;
    Tensor *out = tensor_empty(shape, ref->ndim, dt, ref->device);
    if (!out) return NULL;
    bool prev = ag_set_grad_enabled(false);
    int64_t start = 0;
    for (int k = 0; k < n && out; k++) {
        Tensor *part = tensor_narrow(out, dim, start, ts[k]->shape[dim]);
        if (part) tensor_copy_strided(part, ts[k]);
        else tensor_release(out), out = NULL;
        tensor_release(part);
        start += ts[k]->shape[dim];
    }
    ag_set_grad_enabled(prev);
    AGNode *node = out ? ag_record("cat", bw_cat, out, ts, n) : NULL;
    if (node) node->i[0] = dim;
    return out;
}

Tensor *op_stack(Tensor **ts, int n, int dim) {
    PROF_SCOPE("stack", PROF_FORWARD, n > 0 ? ts[0] : NULL, NULL);
    if (n == 0) return accel_fail("stack: expected a non-empty list of tensors");
    int nd = ts[0]->ndim + 1;
    if (dim < -nd || dim >= nd) return accel_fail("stack: dim %d out of range for %d-dim result", dim >= 0 ? dim + 1 : dim, nd);
    if (nd > TENSOR_MAX_DIMS) return accel_fail("stack: the result would have %d dims; at most %d are supported", nd, TENSOR_MAX_DIMS);
    int64_t shape[TENSOR_MAX_DIMS];
    for (int d = 0, k = 0; d < nd; d++) shape[d] = d == (dim < 0 ? dim + nd : dim) ? n : ts[0]->shape[k++];
    if (shape_check("stack", shape, nd, (int)ts[0]->dtype) < 0) return NULL;
    Tensor *local[64];
    Tensor **us = n <= 64 ? local : accel_calloc((size_t)n, sizeof *us);
    if (!us) return NULL;
    int made = 0;
    Tensor *out = NULL;
    for (; made < n; made++) {
        if (!tensor_same_shape(ts[made], ts[0])) {
            accel_fail("stack: expects each tensor to be equal size, but got %s at entry 1 and %s at entry %d",
                       tensor_shape_str(ts[0]), tensor_shape_str(ts[made]), made + 1);
            break;
        }
        if (!(us[made] = tensor_unsqueeze(ts[made], dim))) break;
    }
    if (made == n) out = op_cat(us, n, dim);
    for (int k = 0; k < made; k++) tensor_release(us[k]);
    if (us != local) free(us);
    return out;
}

/* ---- tril / triu ---- */

static Tensor *tri_mask(const Tensor *a, int64_t k, bool upper) {
    int64_t R = a->shape[a->ndim - 2], C = a->shape[a->ndim - 1];
    int64_t shape[2] = {R, C};
    Tensor *m = tensor_empty(shape, 2, DT_BOOL, a->device);
    HostMap hm;
    uint8_t *p = m ? tensor_host_map(m, HOST_WRITE, &hm) : NULL;
    if (!p) {
        tensor_release(m);
        return NULL;
    }
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) p[i * C + j] = upper ? (j - i < k) : (j - i > k); /* true = zeroed */
    return tensor_host_finish(m, &hm);
}

Tensor *op_tril(Tensor *a, int64_t k, bool upper) {
    PROF_SCOPE(upper ? "triu" : "tril", PROF_FORWARD, a, NULL);
    if (a->ndim < 2) return accel_fail("%s: input must have at least 2 dims, got shape %s", upper ? "triu" : "tril", tensor_shape_str(a));
    Tensor *m = tri_mask(a, k, upper);
    Tensor *r = m ? op_masked_fill(a, m, 0.0) : NULL;
    tensor_release(m);
    return r;
}
