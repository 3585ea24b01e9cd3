/* view.c: views that share storage (view, reshape, transpose, permute,
 * narrow, select, unsqueeze, squeeze, expand, as_strided, flatten) plus
 * contiguous / clone / detach / dtype casts, with their backward rules. */
#include "tensor.h"
#include "autograd.h"
#include "ops.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tensor_wrap_dim(const Tensor *t, int dim, const char *op) {
    int n = t->ndim ? t->ndim : 1;
    if (dim < -n || dim >= n)
        return accel_fail_int("%s: dimension %d out of range for a %d-dim tensor of shape %s (valid: 1..%d or -%d..-1)",
                              op, dim >= 0 ? dim + 1 : dim, t->ndim, tensor_shape_str(t), n, n);
    return dim < 0 ? dim + n : dim;
}

/* A new header over t's storage. Views that can make a larger shape than
 * t's (expand, as_strided) check it first (shape_check). */
static Tensor *make_view(Tensor *t, const int64_t *shape, const int64_t *stride, int ndim, int64_t offset) {
    if (ndim > TENSOR_MAX_DIMS) return accel_fail("tensors have at most %d dims", TENSOR_MAX_DIMS);
    Tensor *v = tensor_header_alloc();
    if (!v) return NULL;
    v->refcount = 1;
    v->dtype = t->dtype;
    v->device = t->device;
    v->ndim = ndim;
    memcpy(v->shape, shape, sizeof(int64_t) * (size_t)ndim);
    memcpy(v->stride, stride, sizeof(int64_t) * (size_t)ndim);
    v->numel = shape_numel(shape, ndim);
    v->offset = offset;
    v->storage = t->storage;
    v->storage->refcount++;
    v->is_view = true;
    return v;
}

/* ---- backward rules ---- */

static int bw_reshape(AGNode *n, Tensor *g, Tensor **gin) {
    gin[0] = tensor_reshape(g, n->edges[0].shape, n->edges[0].ndim);
    return gin[0] ? 0 : -1;
}

static int bw_identity(AGNode *n, Tensor *g, Tensor **gin) {
    (void)n;
    gin[0] = tensor_retain(g);
    return 0;
}

static int bw_transpose(AGNode *n, Tensor *g, Tensor **gin) {
    gin[0] = tensor_transpose(g, (int)n->i[0], (int)n->i[1]);
    return gin[0] ? 0 : -1;
}

static int bw_permute(AGNode *n, Tensor *g, Tensor **gin) {
    int inv[TENSOR_MAX_DIMS];
    for (int d = 0; d < g->ndim; d++) inv[n->i[d]] = d;
    gin[0] = tensor_permute(g, inv, g->ndim);
    return gin[0] ? 0 : -1;
}

/* narrow (i[2] = 0) and select (i[2] = 1): scatter g into zeros of the input shape. */
static int bw_narrow(AGNode *n, Tensor *g, Tensor **gin) {
    Tensor *z = tensor_zeros(n->edges[0].shape, n->edges[0].ndim, g->dtype, g->device);
    if (!z) return -1;
    Tensor *part = n->i[2] ? tensor_select(z, (int)n->i[0], n->i[1]) : tensor_narrow(z, (int)n->i[0], n->i[1], n->i[3]);
    if (!part || tensor_copy_(part, g) < 0) {
        tensor_release(part);
        tensor_release(z);
        return -1;
    }
    tensor_release(part);
    gin[0] = z;
    return 0;
}

/* The same, added straight into the producer's gradient *acc (see
 * AGAccumulateFn): a split into k parts writes k slices of one tensor. */
static int acc_narrow(AGNode *n, Tensor *g, Tensor **acc) {
    const AGEdge *e = &n->edges[0];
    Tensor *a = *acc;
    const bool fresh = !a;
    if (fresh || !ag_sole_owner(a) || a->dtype != e->dtype) { /* a buffer of our own: zeros, or a copy */
        Tensor *z = fresh ? tensor_zeros(e->shape, e->ndim, e->dtype, g->device) : tensor_empty(e->shape, e->ndim, e->dtype, g->device);
        if (!z || (!fresh && tensor_copy_(z, a) < 0)) {
            tensor_release(z);
            return -1;
        }
        tensor_release(a);
        *acc = a = z;
    }
    Tensor *part = n->i[2] ? tensor_select(a, (int)n->i[0], n->i[1]) : tensor_narrow(a, (int)n->i[0], n->i[1], n->i[3]);
    int rc = !part ? -1 : fresh ? tensor_copy_(part, g) : op_binary_(KB_ADD, part, g);
    tensor_release(part);
    return rc;
}

static Tensor *record_view(Tensor *out, Tensor *t, const char *name, AGBackwardFn fn) {
    if (out) ag_record_view(name, fn, out, t);
    return out;
}

/* ---- views ---- */

static int infer_shape(const Tensor *t, const int64_t *shape, int ndim, int64_t *out, const char *op) {
    int infer = -1;
    int64_t known = 1;
    bool zero = false;
    if (ndim > TENSOR_MAX_DIMS) return accel_fail_int("%s: at most %d dims", op, TENSOR_MAX_DIMS);
    for (int i = 0; i < ndim; i++) {
        out[i] = shape[i];
        if (shape[i] == -1) {
            if (infer >= 0) return accel_fail_int("%s: only one dimension can be inferred (-1)", op);
            infer = i;
        } else if (shape[i] < 0) {
            return accel_fail_int("%s: invalid shape dimension %lld", op, (long long)shape[i]);
        } else {
            zero |= shape[i] == 0;
            if (known >= 0) known = size_mul(known, shape[i] ? shape[i] : 1);
        }
    }
    char req[160];
    shape_str(shape, ndim, req, sizeof req);
    if (known < 0 && infer < 0) return (int)shape_check(op, shape, ndim, SHAPE_NO_DTYPE); /* its words for the overflow */
    if (known < 0) return accel_fail_int("%s: shape %s has more than 2^63 elements", op, req);
    if (zero) known = 0;
    if (infer >= 0) {
        if (known == 0 || t->numel % known != 0) goto bad;
        out[infer] = t->numel / known;
    } else if (known != t->numel) {
        goto bad;
    }
    return 0;
bad:
    return accel_fail_int("%s: shape %s is invalid for input of shape %s (%lld elements)", op, req, tensor_shape_str(t),
                          (long long)t->numel);
}

/* Strides for viewing t as `shape` without copying, or false if impossible:
 * walk the old dims from the right in chunks that are contiguous among
 * themselves; each chunk must map onto whole new dims. */
static bool view_strides(const Tensor *t, const int64_t *shape, int ndim, int64_t *stride) {
    if (tensor_is_contiguous(t) || t->numel == 0) {
        int64_t st = 1;
        for (int d = ndim - 1; d >= 0; d--) {
            stride[d] = st;
            st *= shape[d] ? shape[d] : 1;
        }
        return true;
    }
    int vd = ndim - 1;
    int64_t base = t->stride[t->ndim - 1], tnum = 1, vnum = 1;
    for (int td = t->ndim - 1; td >= 0; td--) {
        tnum *= t->shape[td];
        if (td == 0 || (t->shape[td - 1] != 1 && t->stride[td - 1] != tnum * base)) {
            while (vd >= 0 && (vnum < tnum || shape[vd] == 1)) {
                stride[vd] = vnum * base;
                vnum *= shape[vd];
                vd--;
            }
            if (vnum != tnum) return false;
            if (td > 0) {
                base = t->stride[td - 1];
                tnum = vnum = 1;
            }
        }
    }
    return vd == -1;
}

Tensor *tensor_view(Tensor *t, const int64_t *shape, int ndim) {
    int64_t s[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
    if (infer_shape(t, shape, ndim, s, "view") < 0) return NULL;
    if (!view_strides(t, s, ndim, st))
        return accel_fail("view: size is not compatible with the input's strides (shape %s); use reshape (or contiguous) instead",
                          tensor_shape_str(t));
    return record_view(make_view(t, s, st, ndim, t->offset), t, "ViewBackward", bw_reshape);
}

Tensor *tensor_reshape(Tensor *t, const int64_t *shape, int ndim) {
    int64_t s[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
    if (infer_shape(t, shape, ndim, s, "reshape") < 0) return NULL;
    if (view_strides(t, s, ndim, st))
        return record_view(make_view(t, s, st, ndim, t->offset), t, "ViewBackward", bw_reshape); /* PyTorch's: a view */
    Tensor *c = tensor_contiguous(t);
    if (!c) return NULL;
    Tensor *r = tensor_view(c, s, ndim);
    tensor_release(c);
    return r;
}

Tensor *tensor_flatten(Tensor *t, int start, int end) {
    if (t->ndim == 0) return tensor_reshape(t, (int64_t[]){1}, 1);
    if ((start = tensor_wrap_dim(t, start, "flatten")) < 0 || (end = tensor_wrap_dim(t, end, "flatten")) < 0) return NULL;
    if (start > end) return accel_fail("flatten: start dim must not come after end dim");
    int64_t s[TENSOR_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < start; d++) s[n++] = t->shape[d];
    int64_t m = 1;
    for (int d = start; d <= end; d++) m *= t->shape[d];
    s[n++] = m;
    for (int d = end + 1; d < t->ndim; d++) s[n++] = t->shape[d];
    return tensor_reshape(t, s, n);
}

Tensor *tensor_transpose(Tensor *t, int d0, int d1) {
    if (t->ndim == 0) return record_view(make_view(t, t->shape, t->stride, 0, t->offset), t, "TransposeBackward", bw_identity);
    if ((d0 = tensor_wrap_dim(t, d0, "transpose")) < 0 || (d1 = tensor_wrap_dim(t, d1, "transpose")) < 0) return NULL;
    int64_t s[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
    memcpy(s, t->shape, sizeof s);
    memcpy(st, t->stride, sizeof st);
    s[d0] = t->shape[d1], s[d1] = t->shape[d0];
    st[d0] = t->stride[d1], st[d1] = t->stride[d0];
    Tensor *v = make_view(t, s, st, t->ndim, t->offset);
    AGNode *n = v ? ag_record_view("TransposeBackward", bw_transpose, v, t) : NULL;
    if (n) n->i[0] = d0, n->i[1] = d1;
    return v;
}

Tensor *tensor_permute(Tensor *t, const int *dims, int nd) {
    if (nd != t->ndim) return accel_fail("permute: got %d dims for a %d-dim tensor of shape %s", nd, t->ndim, tensor_shape_str(t));
    int64_t s[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
    int seen[TENSOR_MAX_DIMS] = {0}, w[TENSOR_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        if ((w[i] = tensor_wrap_dim(t, dims[i], "permute")) < 0) return NULL;
        if (seen[w[i]]++) return accel_fail("permute: dimension %d repeated", w[i] + 1);
        s[i] = t->shape[w[i]];
        st[i] = t->stride[w[i]];
    }
    Tensor *v = make_view(t, s, st, nd, t->offset);
    AGNode *n = v ? ag_record_view("PermuteBackward", bw_permute, v, t) : NULL;
    if (n)
        for (int i = 0; i < nd; i++) n->i[i] = w[i];
    return v;
}

Tensor *tensor_narrow(Tensor *t, int dim, int64_t start, int64_t length) {
    if ((dim = tensor_wrap_dim(t, dim, "narrow")) < 0) return NULL;
    if (t->ndim == 0) return accel_fail("narrow: cannot narrow a 0-dim tensor");
    if (start < 0) start += t->shape[dim];
    if (start < 0 || length < 0 || start > t->shape[dim] || length > t->shape[dim] - start)
        return accel_fail("narrow: start %lld + length %lld exceeds dimension %d of size %lld (shape %s)",
                          (long long)start + 1, (long long)length, dim + 1, (long long)t->shape[dim], tensor_shape_str(t));
    int64_t s[TENSOR_MAX_DIMS];
    memcpy(s, t->shape, sizeof s);
    s[dim] = length;
    Tensor *v = make_view(t, s, t->stride, t->ndim, t->offset + start * t->stride[dim]);
    AGNode *n = v ? ag_record_view("SliceBackward", bw_narrow, v, t) : NULL;
    if (n) n->i[0] = dim, n->i[1] = start, n->i[2] = 0, n->i[3] = length, n->backward_acc = acc_narrow;
    return v;
}

Tensor *tensor_select(Tensor *t, int dim, int64_t index) {
    if (t->ndim == 0) return accel_fail("select: cannot index a 0-dim tensor");
    if ((dim = tensor_wrap_dim(t, dim, "select")) < 0) return NULL;
    int64_t size = t->shape[dim];
    if (index < -size || index >= size)
        return accel_fail("select: index %lld out of range for dimension %d of size %lld (shape %s)",
                          (long long)(index >= 0 ? index + 1 : index), dim + 1, (long long)size, tensor_shape_str(t));
    if (index < 0) index += size;
    int64_t s[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < t->ndim; d++)
        if (d != dim) s[k] = t->shape[d], st[k++] = t->stride[d];
    Tensor *v = make_view(t, s, st, t->ndim - 1, t->offset + index * t->stride[dim]);
    AGNode *n = v ? ag_record_view("SelectBackward", bw_narrow, v, t) : NULL;
    if (n) n->i[0] = dim, n->i[1] = index, n->i[2] = 1, n->backward_acc = acc_narrow;
    return v;
}

Tensor *tensor_unsqueeze(Tensor *t, int dim) {
    int n = t->ndim + 1;
    if (n > TENSOR_MAX_DIMS)
        return accel_fail("unsqueeze: a %d-dim tensor of shape %s cannot get another dim (at most %d)", t->ndim,
                          tensor_shape_str(t), TENSOR_MAX_DIMS);
    if (dim < -n || dim >= n)
        return accel_fail("unsqueeze: dimension %d out of range for a %d-dim tensor (valid: 1..%d or -%d..-1)",
                          dim >= 0 ? dim + 1 : dim, t->ndim, n, n);
    if (dim < 0) dim += n;
    int64_t s[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
    for (int d = 0, k = 0; d < n; d++) {
        if (d == dim) {
            s[d] = 1;
            st[d] = k < t->ndim ? t->stride[k] * t->shape[k] : 1;
        } else {
            s[d] = t->shape[k], st[d] = t->stride[k++];
        }
    }
    return record_view(make_view(t, s, st, n, t->offset), t, "UnsqueezeBackward", bw_reshape);
}

Tensor *tensor_squeeze(Tensor *t, int dim) {
    if (dim != TENSOR_ALL_DIMS && t->ndim > 0 && (dim = tensor_wrap_dim(t, dim, "squeeze")) < 0) return NULL;
    int64_t s[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < t->ndim; d++) {
        bool drop = t->shape[d] == 1 && (dim == TENSOR_ALL_DIMS || dim == d);
        if (!drop) s[k] = t->shape[d], st[k++] = t->stride[d];
    }
    return record_view(make_view(t, s, st, k, t->offset), t, "SqueezeBackward", bw_reshape);
}

Tensor *tensor_expand(Tensor *t, const int64_t *shape, int ndim) {
    if (ndim < t->ndim) return accel_fail("expand: the number of sizes (%d) must be at least the tensor's dims (%d, shape %s)", ndim, t->ndim, tensor_shape_str(t));
    int64_t s[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
    int off = ndim - t->ndim;
    for (int d = 0; d < ndim; d++) {
        int td = d - off;
        int64_t cur = td >= 0 ? t->shape[td] : 1;
        int64_t want = shape[d] == -1 && td >= 0 ? cur : shape[d];
        if (want < 0 || (cur != want && cur != 1)) {
            char req[160];
            shape_str(shape, ndim, req, sizeof req);
            return accel_fail("expand: cannot expand shape %s to %s (dim %d: %lld -> %lld)", tensor_shape_str(t), req, d + 1,
                              (long long)cur, (long long)want);
        }
        s[d] = want;
        st[d] = (td < 0 || cur != want) ? 0 : t->stride[td];
    }
    if (shape_check("expand", s, ndim, SHAPE_NO_DTYPE) < 0) return NULL;
    return record_view(make_view(t, s, st, ndim, t->offset), t, "ExpandBackward", bw_identity);
}

/* The (d1, d2) diagonal of t at offset as a view: t's other dims, then the
 * diagonal's length with stride stride[d1] + stride[d2]. Dims valid, distinct. */
static Tensor *diagonal_view(Tensor *t, int64_t offset, int d1, int d2) {
    int64_t rows = t->shape[d1] - (offset < 0 ? -offset : 0), cols = t->shape[d2] - (offset > 0 ? offset : 0);
    int64_t len = rows < cols ? rows : cols, s[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < t->ndim; d++)
        if (d != d1 && d != d2) s[k] = t->shape[d], st[k++] = t->stride[d];
    s[k] = len > 0 ? len : 0, st[k] = t->stride[d1] + t->stride[d2];
    int64_t start = len <= 0 ? 0 : offset >= 0 ? offset * t->stride[d2] : -offset * t->stride[d1];
    return make_view(t, s, st, k + 1, t->offset + start);
}

/* diagonal (i: offset, d1, d2): g onto that diagonal of zeros of the input's shape. */
static int bw_diagonal(AGNode *n, Tensor *g, Tensor **gin) {
    Tensor *z = tensor_zeros(n->edges[0].shape, n->edges[0].ndim, g->dtype, g->device);
    Tensor *d = z ? diagonal_view(z, n->i[0], (int)n->i[1], (int)n->i[2]) : NULL;
    int rc = d ? tensor_copy_(d, g) : -1;
    tensor_release(d);
    if (rc < 0) {
        tensor_release(z);
        return -1;
    }
    gin[0] = z;
    return 0;
}

Tensor *tensor_diagonal(Tensor *t, int64_t offset, int d1, int d2) {
    if (t->ndim < 2) return accel_fail("diagonal: expected a tensor of 2 or more dims, got shape %s", tensor_shape_str(t));
    if ((d1 = tensor_wrap_dim(t, d1, "diagonal")) < 0 || (d2 = tensor_wrap_dim(t, d2, "diagonal")) < 0) return NULL;
    if (d1 == d2) return accel_fail("diagonal: dimensions cannot be identical %d, %d", d1 + 1, d2 + 1);
    Tensor *v = diagonal_view(t, offset, d1, d2);
    AGNode *n = v ? ag_record_view("DiagonalBackward0", bw_diagonal, v, t) : NULL;
    if (n) n->i[0] = offset, n->i[1] = d1, n->i[2] = d2;
    return v;
}

/* unfold's view: dim becomes the window count (stride stride[dim] * step),
 * a last dim of size (stride stride[dim]). Arguments valid. */
static Tensor *unfold_view(Tensor *t, int dim, int64_t size, int64_t step) {
    int64_t s[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
    memcpy(s, t->shape, sizeof s);
    memcpy(st, t->stride, sizeof st);
    s[dim] = (t->shape[dim] - size) / step + 1, st[dim] = t->stride[dim] * step;
    s[t->ndim] = size, st[t->ndim] = t->stride[dim];
    return make_view(t, s, st, t->ndim + 1, t->offset);
}

/* unfold (i: dim, size, step): the windows' gradients added back at their
 * positions: index_add of g, its (count, size) made one dim, at
 * [w * step + j for each window w, each j < size]. */
static int bw_unfold(AGNode *n, Tensor *g, Tensor **gin) {
    int dim = (int)n->i[0], nd = n->edges[0].ndim;
    int64_t size = n->i[1], step = n->i[2], count = g->shape[dim];
    int perm[TENSOR_MAX_DIMS], k = 0;
    for (int d = 0; d < nd; d++) {
        perm[k++] = d;
        if (d == dim) perm[k++] = nd; /* the window's own dim right after the count */
    }
    int64_t flat[TENSOR_MAX_DIMS];
    memcpy(flat, n->edges[0].shape, sizeof flat);
    flat[dim] = count * size;
    Tensor *moved = tensor_permute(g, perm, nd + 1), *g2 = moved ? tensor_reshape(moved, flat, nd) : NULL;
    Tensor *idx = tensor_empty((int64_t[]){count * size}, 1, DT_I64, (Device){DEV_CPU, 0});
    if (idx)
        for (int64_t w = 0; w < count; w++)
            for (int64_t j = 0; j < size; j++) ((int64_t *)tensor_data(idx))[w * size + j] = w * step + j;
    Tensor *idx_dev = idx ? tensor_to(idx, g->device) : NULL;
    Tensor *z = g2 && idx_dev ? tensor_zeros(n->edges[0].shape, nd, g->dtype, g->device) : NULL;
    gin[0] = z ? op_index_add(z, dim, idx_dev, g2) : NULL;
    tensor_release(moved), tensor_release(g2), tensor_release(idx), tensor_release(idx_dev), tensor_release(z);
    return gin[0] ? 0 : -1;
}

Tensor *tensor_unfold(Tensor *t, int dim, int64_t size, int64_t step) {
    if (t->ndim == 0 || t->ndim >= TENSOR_MAX_DIMS)
        return accel_fail("unfold: expected a tensor of 1 to %d dims, got shape %s", TENSOR_MAX_DIMS - 1, tensor_shape_str(t));
    if ((dim = tensor_wrap_dim(t, dim, "unfold")) < 0) return NULL;
    if (size < 0 || size > t->shape[dim])
        return accel_fail("unfold: size %lld is larger than dim %d's size %lld", (long long)size, dim + 1,
                          (long long)t->shape[dim]);
    if (step < 1) return accel_fail("unfold: step must be a positive integer, got %lld", (long long)step);
    Tensor *v = unfold_view(t, dim, size, step);
    AGNode *n = v ? ag_record_view("UnfoldBackward0", bw_unfold, v, t) : NULL;
    if (n) n->i[0] = dim, n->i[1] = size, n->i[2] = step;
    return v;
}

Tensor *tensor_as_strided(Tensor *t, const int64_t *shape, const int64_t *stride, int ndim, int64_t offset) {
    if (ag_needs_grad(&t, 1)) return accel_fail("as_strided: not differentiable; call it on a detached tensor");
    int64_t maxoff = offset, numel = shape_check("as_strided", shape, ndim, SHAPE_NO_DTYPE);
    if (numel < 0) return NULL;
    if (offset < 0) return accel_fail("as_strided: negative storage offset %lld", (long long)offset);
    for (int d = 0; d < ndim; d++) {
        if (stride[d] < 0) return accel_fail("as_strided: negative stride %lld", (long long)stride[d]);
        if (shape[d] > 0) maxoff = size_add(maxoff, size_mul(shape[d] - 1, stride[d]));
    }
    const int64_t have = (int64_t)(t->storage->nbytes / dtype_size(t->dtype));
    if (numel > 0 && (maxoff < 0 || maxoff >= have))
        return accel_fail("as_strided: the view reaches past the storage's %lld elements", (long long)have);
    return make_view(t, shape, stride, ndim, offset);
}

/* ---- copies ---- */

static Tensor *copy_of(Tensor *t, DType dt, const char *name) {
    Tensor *c = tensor_empty(t->shape, t->ndim, dt, t->device);
    if (!c) return NULL;
    tensor_copy_strided(c, t);
    ag_record(name, bw_identity, c, &t, 1);
    return c;
}

/* The gradient of a move goes back to the source's device (n->i: its type, index). */
static int bw_to_device(AGNode *n, Tensor *g, Tensor **gin) {
    Device src = {(DeviceType)n->i[0], (int)n->i[1]};
    gin[0] = device_same(g->device, src) ? tensor_retain(g) : tensor_to_device(g, src);
    return gin[0] ? 0 : -1;
}

Tensor *tensor_to(Tensor *t, Device d) {
    if (device_same(t->device, d)) return tensor_retain(t);
    Tensor *c = tensor_to_device(t, d);
    AGNode *n = c ? ag_record("ToCopyBackward", bw_to_device, c, &t, 1) : NULL;
    if (n) n->i[0] = t->device.type, n->i[1] = t->device.index;
    return c;
}

Tensor *tensor_contiguous(Tensor *t) {
    if (tensor_is_contiguous(t)) return tensor_retain(t);
    return copy_of(t, t->dtype, "ContiguousBackward");
}

Tensor *tensor_clone(Tensor *t) { return copy_of(t, t->dtype, "CloneBackward"); }

Tensor *tensor_to_dtype(Tensor *t, DType dt) {
    if (t->dtype == dt) return tensor_retain(t);
    return copy_of(t, dt, "ToCopyBackward");
}

Tensor *tensor_to_dtype_owned(Tensor *t, DType dt) {
    if (!t || t->dtype == dt) return t;
    Tensor *c = tensor_to_dtype(t, dt);
    tensor_release(t);
    return c;
}

Tensor *tensor_contiguous_as(Tensor *t, DType dt) {
    bool prev = ag_set_grad_enabled(false);
    Tensor *c = tensor_to_dtype(t, dt), *d = c ? tensor_contiguous(c) : NULL;
    ag_set_grad_enabled(prev);
    tensor_release(c);
    return d;
}

Tensor *tensor_detach(Tensor *t) {
    Tensor *v = make_view(t, t->shape, t->stride, t->ndim, t->offset);
    if (v) v->is_view = t->is_view;
    return v;
}
