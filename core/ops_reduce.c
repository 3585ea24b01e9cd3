/* ops_reduce.c: sum / mean / prod / amax / amin over any set of dims,
 * max / min with indices along one dim, argmax, and composite var / std /
 * norm, with their backward rules. A single reduced dim of a contiguous
 * tensor is reduced in place as (outer, n, inner); several dims are moved
 * last first. */
#include "ops.h"
#include "backend/backend.h"
#include "profile.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const red_names[KR_COUNT] = {"sum", "mean", "prod", "amax", "amin"};

typedef struct {
    bool mask[TENSOR_MAX_DIMS];
    int nred;
    int64_t n;                         /* elements reduced per output */
    int64_t keep_shape[TENSOR_MAX_DIMS]; /* keepdim shape */
    int64_t out_shape[TENSOR_MAX_DIMS];
    int out_nd;
} RedDims;

static int red_dims(Tensor *a, const int *dims, int ndims, bool keepdim, RedDims *r, const char *op) {
    memset(r, 0, sizeof *r);
    for (int k = 0; k < ndims; k++) {
        int d = tensor_wrap_dim(a, dims[k], op);
        if (d < 0) return -1;
        if (a->ndim == 0) continue;
        if (r->mask[d]) return accel_fail_int("%s: dim %d appears more than once", op, d + 1);
        r->mask[d] = true;
    }
    if (ndims == 0)
        for (int d = 0; d < a->ndim; d++) r->mask[d] = true;
    r->n = 1;
    for (int d = 0; d < a->ndim; d++) {
        r->keep_shape[d] = r->mask[d] ? 1 : a->shape[d];
        if (r->mask[d]) r->n *= a->shape[d], r->nred++;
        if (!r->mask[d] || keepdim) r->out_shape[r->out_nd++] = r->keep_shape[d];
    }
    return 0;
}

/* View of a (contiguous copy if needed) as (outer, n, inner) for the reduced dims. */
static Tensor *red_layout(Tensor *a, const RedDims *r, int64_t *outer, int64_t *inner) {
    int first = -1, last = -1;
    for (int d = 0; d < a->ndim; d++)
        if (r->mask[d]) last = d, first = first < 0 ? d : first;
    bool adjacent = first < 0 || last - first + 1 == r->nred;
    Tensor *c;
    if (adjacent) {
        c = tensor_contiguous(a);
        *outer = 1, *inner = 1;
        for (int d = 0; d < first; d++) *outer *= a->shape[d];
        for (int d = last + 1; d < a->ndim && first >= 0; d++) *inner *= a->shape[d];
        if (first < 0) *outer = a->numel, *inner = 1;
    } else {
        int perm[TENSOR_MAX_DIMS], k = 0;
        for (int d = 0; d < a->ndim; d++)
            if (!r->mask[d]) perm[k++] = d;
        for (int d = 0; d < a->ndim; d++)
            if (r->mask[d]) perm[k++] = d;
        Tensor *p = tensor_permute(a, perm, a->ndim);
        c = p ? tensor_contiguous(p) : NULL;
        tensor_release(p);
        /* the kept dims' product, not numel / n: an empty reduced dim
         * (n == 0) still leaves one output per kept position */
        *outer = 1, *inner = 1;
        for (int d = 0; d < a->ndim; d++)
            if (!r->mask[d]) *outer *= a->shape[d];
    }
    return c;
}

static DType reduce_result_dtype(KRedOp op, DType dt) {
    if ((op == KR_SUM || op == KR_PROD) && !dtype_is_float(dt)) return DT_I64;
    return dt;
}

/* a with each reduced dim along which it is constant (stride 0, as expand
 * makes) narrowed to size 1; *r2 describes the rest and *times is how many
 * elements per output were dropped (1 when none). The mean, amax and amin
 * of the rest are a's and its sum times *times is a's, so a huge expanded
 * tensor reduces without being copied out. prod keeps every element (x^n is
 * not what the running product rounds to). */
static Tensor *drop_constant_dims(Tensor *a, KRedOp op, const RedDims *r, RedDims *r2, int64_t *times) {
    *r2 = *r, *times = 1;
    Tensor *v = tensor_retain(a);
    for (int d = 0; v && op != KR_PROD && d < a->ndim; d++) {
        if (!r->mask[d] || a->stride[d] != 0 || a->shape[d] <= 1) continue;
        Tensor *n = tensor_narrow(v, d, 0, 1);
        tensor_release(v);
        v = n;
        *times *= a->shape[d]; /* divides r->n, which fits */
        r2->n /= a->shape[d];
    }
    return v;
}

/* out *= times in place (out of a compute dtype), for a sum of `times`
 * equal parts, on the device: one correctly rounded product per element
 * (times is exact as an f32 below 2^24 and as an f64 below 2^53). */
static int scale_sum(Tensor *out, int64_t times) {
    if (times <= 1) return 0;
    Tensor *s = tensor_full(NULL, 0, (double)times, out->dtype, out->device);
    if (!s) return -1;
    StridedIter it;
    iter_init_run(&it, out->numel);
    iter_add_run(&it, out, 1);
    iter_add_run(&it, out, 1);
    iter_add_run(&it, s, 0);
    backend_for(out->device)->binary(KB_MUL, out->dtype, &it);
    tensor_release(s);
    return 0;
}

/* Forward without autograd. */
static Tensor *reduce_compute(KRedOp op, Tensor *a, const RedDims *rin, const char *name) {
    DType rd = reduce_result_dtype(op, a->dtype);
    DType cdt = rd == DT_F64 ? DT_F64 : dtype_is_float(rd) ? DT_F32 : DT_I64;
    bool prev = ag_set_grad_enabled(false);
    RedDims rs, *r = &rs;
    int64_t times;
    Tensor *na = drop_constant_dims(a, op, rin, r, &times);
    Tensor *ca = na ? tensor_to_dtype(na, cdt) : NULL;
    int64_t outer = 0, inner = 0;
    Tensor *c = ca ? red_layout(ca, r, &outer, &inner) : NULL;
    Tensor *out = c ? tensor_empty(r->out_shape, r->out_nd, cdt, a->device) : NULL;
    ag_set_grad_enabled(prev);
    tensor_release(na), tensor_release(ca);
    if (out && r->n == 0 && (op == KR_MAX || op == KR_MIN)) {
        tensor_release(c), tensor_release(out);
        return accel_fail("%s: cannot reduce over a zero-size dimension (shape %s)", name, tensor_shape_str(a));
    }
    if (out) {
        backend_for(out->device)->reduce(op, cdt, tensor_data(c), outer, r->n, inner, tensor_data(out));
        if (op == KR_SUM && scale_sum(out, times) < 0) tensor_release(out), out = NULL;
    }
    tensor_release(c);
    return tensor_to_dtype_owned(out, rd);
}

/* g reshaped to the keepdim shape and expanded to the input's shape. */
static Tensor *expand_back(Tensor *g, const AGNode *n) {
    int nd = n->edges[0].ndim;
    int64_t keep[TENSOR_MAX_DIMS];
    if (g->numel == 1 && g->ndim <= nd) /* full reduction: broadcast g directly */
        return tensor_expand(g, n->edges[0].shape, nd);
    for (int d = 0; d < nd; d++) keep[d] = n->i[d] ? 1 : n->edges[0].shape[d];
    Tensor *k = tensor_reshape(g, keep, nd);
    Tensor *e = k ? tensor_expand(k, n->edges[0].shape, nd) : NULL;
    tensor_release(k);
    return e;
}

/* Full max() / min() (torch's evenly_distribute_backward): a NaN result
 * takes its gradient at the NaN positions, so *mask (1 where a equals the
 * result) gains 1 where both a and the result are NaN. */
static void add_nan_positions(Tensor **mask, Tensor *a, Tensor *result) {
    Tensor *na = op_binary(KB_NE, a, a), *nr = na ? op_binary(KB_NE, result, result) : NULL;
    Tensor *both = nr ? op_binary(KB_MUL, na, nr) : NULL, *bf = both ? tensor_to_dtype(both, (*mask)->dtype) : NULL;
    Tensor *sum = bf ? op_binary(KB_ADD, *mask, bf) : NULL;
    tensor_release(na), tensor_release(nr), tensor_release(both), tensor_release(bf);
    tensor_release(*mask);
    *mask = sum;
}

static int bw_reduce(AGNode *n, Tensor *g, Tensor **gin) {
    KRedOp op = (KRedOp)n->p[0];
    Tensor *e = expand_back(g, n);
    if (!e) return -1;
    if (op == KR_SUM) {
        gin[0] = e;
        return 0;
    }
    if (op == KR_MEAN) {
        gin[0] = op_binary_scalar(KB_DIV, e, n->p[1], false, false);
        tensor_release(e);
        return gin[0] ? 0 : -1;
    }
    Tensor *a = ag_saved(n, 0), *out = ag_saved(n, 1);
    if (!a || !out) {
        tensor_release(e);
        return -1;
    }
    Tensor *oe = expand_back(out, n), *res = NULL;
    if (op == KR_PROD) {
        /* g * (product of the other elements of the slice). That is out / a
         * when the slice has no zero; with zeros, divide the product of the
         * nonzero elements instead and zero every position whose others
         * include a zero (so a lone zero gets the product of the rest). */
        int dims[TENSOR_MAX_DIMS], nd = 0;
        for (int d = 0; d < a->ndim; d++)
            if (n->i[d]) dims[nd++] = d;
        Tensor *z = op_binary_scalar(KB_EQ, a, 0, true, false);
        Tensor *zf = z ? tensor_to_dtype(z, g->dtype) : NULL;
        Tensor *a1 = zf ? op_masked_fill(a, z, 1.0) : NULL;
        Tensor *p1 = a1 ? op_reduce(KR_PROD, a1, dims, nd, true) : NULL;
        Tensor *q = p1 ? op_binary(KB_DIV, p1, a1) : NULL;
        Tensor *cnt = q ? op_reduce(KR_SUM, zf, dims, nd, true) : NULL;
        Tensor *oz = cnt ? op_binary(KB_SUB, cnt, zf) : NULL;
        Tensor *kill = oz ? op_binary_scalar(KB_GT, oz, 0.5, false, false) : NULL;
        Tensor *others = kill ? op_masked_fill(q, kill, 0.0) : NULL;
        res = others ? op_binary(KB_MUL, e, others) : NULL;
        tensor_release(z), tensor_release(zf), tensor_release(a1), tensor_release(p1), tensor_release(q);
        tensor_release(cnt), tensor_release(oz), tensor_release(kill), tensor_release(others);
    } else {
        /* g / count at the positions equal to the result. amax / amin (torch's
         * scale_grad_by_count) multiply by the mask, so an inf or NaN g is NaN
         * elsewhere too; full max() / min() (evenly_distribute_backward) fill
         * the mask into zeros, so 0 elsewhere whatever g is. */
        bool full = n->p[2] != 0;
        Tensor *m = oe ? op_binary(KB_EQ, a, oe) : NULL, *mf = m ? tensor_to_dtype(m, g->dtype) : NULL;
        if (mf && full) add_nan_positions(&mf, a, oe);
        int dims[TENSOR_MAX_DIMS], nd = 0;
        for (int d = 0; d < a->ndim; d++)
            if (n->i[d]) dims[nd++] = d;
        Tensor *cnt = mf ? op_reduce(KR_SUM, mf, dims, nd, true) : NULL;
        Tensor *q = cnt ? op_binary(KB_DIV, e, cnt) : NULL;
        Tensor *off = q && full ? op_binary_scalar(KB_EQ, mf, 0, true, false) : NULL;
        res = off ? op_masked_fill(q, off, 0.0) : q && !full ? op_binary(KB_MUL, q, mf) : NULL;
        tensor_release(m), tensor_release(mf), tensor_release(cnt), tensor_release(q), tensor_release(off);
    }
    tensor_release(oe);
    tensor_release(e);
    gin[0] = res;
    return res ? 0 : -1;
}

/* A reduction named name (in errors and the graph); nan_split marks full
 * max() / min(), whose gradient goes to the NaN positions of a NaN result. */
static Tensor *reduce_named(KRedOp op, Tensor *a, const int *dims, int ndims, bool keepdim, const char *name,
                            bool nan_split) {
    PROF_SCOPE(name, PROF_FORWARD, a, NULL);
    if (op == KR_MEAN && !dtype_is_float(a->dtype))
        return accel_fail("mean: input dtype must be floating point, got %s (convert with :float())", dtype_name(a->dtype));
    RedDims r;
    if (red_dims(a, dims, ndims, keepdim, &r, name) < 0) return NULL;
    Tensor *out = reduce_compute(op, a, &r, name);
    AGNode *n = out ? ag_record(name, bw_reduce, out, &a, 1) : NULL;
    if (n) {
        /* PyTorch's node names: sum(dim) is SumBackward1 (sum() SumBackward0), max() MaxBackward1 */
        if (nan_split) n->name = op == KR_MAX ? "MaxBackward1" : "MinBackward1";
        else if (ndims > 0 && (op == KR_SUM || op == KR_MEAN || op == KR_PROD))
            n->name = op == KR_SUM ? "SumBackward1" : op == KR_MEAN ? "MeanBackward1" : "ProdBackward1";
        n->p[0] = op;
        n->p[1] = (double)r.n;
        n->p[2] = nan_split;
        for (int d = 0; d < a->ndim; d++) n->i[d] = r.mask[d];
        if (op == KR_PROD || op == KR_MAX || op == KR_MIN) ag_save(n, a), ag_save(n, out);
    }
    return out;
}

Tensor *op_reduce(KRedOp op, Tensor *a, const int *dims, int ndims, bool keepdim) {
    return reduce_named(op, a, dims, ndims, keepdim, red_names[op], false);
}

Tensor *op_max_all(Tensor *a, bool want_max) {
    return reduce_named(want_max ? KR_MAX : KR_MIN, a, NULL, 0, false, want_max ? "max" : "min", true);
}

/* ---- max / min along one dim, with indices ---- */

static int bw_max_dim(AGNode *n, Tensor *g, Tensor **gin) {
    Tensor *idx = ag_saved(n, 0);
    if (!idx) return -1;
    int dim = (int)n->p[0];
    DType acc = grad_accum_dtype(g->dtype);
    Tensor *z = tensor_zeros(n->edges[0].shape, n->edges[0].ndim, acc, g->device);
    int64_t keep[TENSOR_MAX_DIMS];
    memcpy(keep, n->edges[0].shape, sizeof keep);
    keep[dim] = 1;
    Tensor *gk = z ? tensor_reshape(g, keep, n->edges[0].ndim) : NULL, *gc = gk ? tensor_contiguous_as(gk, acc) : NULL;
    if (gc) {
        int64_t outer = 1, inner = 1;
        for (int d = 0; d < dim; d++) outer *= keep[d];
        for (int d = dim + 1; d < n->edges[0].ndim; d++) inner *= keep[d];
        backend_for(z->device)->scatter_add(acc, tensor_data(z), outer, n->edges[0].shape[dim], inner, tensor_data(idx), 1, tensor_data(gc));
    }
    tensor_release(gk), tensor_release(gc);
    gin[0] = gc ? tensor_to_dtype_owned(z, g->dtype) : NULL;
    if (!gc) tensor_release(z);
    return gin[0] ? 0 : -1;
}

int op_max_dim(Tensor *a, int dim, bool keepdim, bool want_max, Tensor **values, Tensor **indices) {
    PROF_SCOPE(want_max ? "max" : "min", PROF_FORWARD, a, NULL);
    const char *name = want_max ? "max" : "min";
    if ((dim = tensor_wrap_dim(a, dim, name)) < 0) return -1;
    if (a->ndim == 0) {
        *values = tensor_clone(a);
        *indices = tensor_zeros(NULL, 0, DT_I64, a->device);
        return 0;
    }
    if (a->shape[dim] == 0)
        return accel_fail_int("%s: cannot reduce over a zero-size dimension (shape %s)", name, tensor_shape_str(a));
    DType cdt = a->dtype == DT_F64 ? DT_F64 : dtype_is_float(a->dtype) ? DT_F32 : DT_I64;
    bool prev = ag_set_grad_enabled(false);
    Tensor *ca = tensor_to_dtype(a, cdt), *c = ca ? tensor_contiguous(ca) : NULL;
    ag_set_grad_enabled(prev);
    tensor_release(ca);
    if (!c) return -1;
    int64_t keep[TENSOR_MAX_DIMS], outer = 1, inner = 1;
    memcpy(keep, a->shape, sizeof keep);
    keep[dim] = 1;
    for (int d = 0; d < dim; d++) outer *= a->shape[d];
    for (int d = dim + 1; d < a->ndim; d++) inner *= a->shape[d];
    Tensor *v = tensor_empty(keep, a->ndim, cdt, a->device), *ix = tensor_empty(keep, a->ndim, DT_I64, a->device);
    if (!v || !ix) {
        tensor_release(c), tensor_release(v), tensor_release(ix);
        return -1;
    }
    backend_for(c->device)->argreduce(want_max, cdt, tensor_data(c), outer, a->shape[dim], inner, tensor_data(v),
                                      tensor_data(ix));
    tensor_release(c);
    if (v->dtype != a->dtype) {
        Tensor *v2 = tensor_to_dtype(v, a->dtype);
        tensor_release(v);
        v = v2;
    }
    AGNode *n = v ? ag_record(name, bw_max_dim, v, &a, 1) : NULL;
    if (n) {
        n->p[0] = dim;
        ag_save(n, ix);
    }
    if (v && !keepdim) {
        prev = ag_set_grad_enabled(ag_grad_enabled());
        Tensor *v2 = tensor_squeeze(v, dim), *i2 = tensor_squeeze(ix, dim);
        tensor_release(v), tensor_release(ix);
        v = v2, ix = i2;
        ag_name_node(v, name); /* the node PyTorch shows: MaxBackward0, not the squeeze's */
    }
    *values = v;
    *indices = ix;
    return v && ix ? 0 : -1;
}

Tensor *op_argmax(Tensor *a, int dim, bool keepdim, bool want_max, bool all) {
    PROF_SCOPE(want_max ? "argmax" : "argmin", PROF_FORWARD, a, NULL);
    Tensor *v = NULL, *ix = NULL;
    const char *op = want_max ? "argmax" : "argmin";
    if (!all && (dim = tensor_wrap_dim(a, dim, op)) < 0) return NULL;
    if (all && a->numel == 0) /* torch's messages */
        return accel_fail("%s: expected reduction dim to be specified for input.numel() == 0", op);
    if (!all && a->ndim && a->shape[dim] == 0)
        return accel_fail("%s: expected reduction dim %d to have non-zero size", op, dim + 1);
    bool prev = ag_set_grad_enabled(false);
    if (all) {
        Tensor *flat = tensor_reshape(a, (int64_t[]){-1}, 1);
        int rc = flat ? op_max_dim(flat, 0, false, want_max, &v, &ix) : -1;
        tensor_release(flat);
        if (rc == 0 && keepdim) {
            int64_t ones[TENSOR_MAX_DIMS] = {1, 1, 1, 1, 1, 1, 1, 1};
            Tensor *r = tensor_reshape(ix, ones, a->ndim);
            tensor_release(ix);
            ix = r;
        }
    } else {
        op_max_dim(a, dim, keepdim, want_max, &v, &ix);
    }
    ag_set_grad_enabled(prev);
    tensor_release(v);
    return ix;
}

/* ---- composites: var, std, norm ---- */

/* The dtype var / std / norm compute in: bf16 / fp16 as float32 (their
 * squares overflow or underflow the half dtypes; torch accumulates them in
 * float32 too), the result rounded back once. */
static Tensor *widened(Tensor *a) {
    return a->dtype == DT_BF16 || a->dtype == DT_F16 ? tensor_to_dtype(a, DT_F32) : tensor_retain(a);
}

/* std = sqrt(var): g / (2 * std), and 0 where the std is 0 (PyTorch's
 * std_backward masks it), instead of the inf * 0 = NaN of the sqrt node. */
static int bw_std(AGNode *n, Tensor *g, Tensor **gin) {
    Tensor *out = ag_saved(n, 0);
    if (!out) return -1;
    Tensor *zero = op_binary_scalar(KB_EQ, out, 0, true, false);
    Tensor *q = zero ? op_binary(KB_DIV, g, out) : NULL;
    Tensor *h = q ? op_binary_scalar(KB_MUL, q, 0.5, false, false) : NULL;
    gin[0] = h ? op_masked_fill(h, zero, 0.0) : NULL;
    tensor_release(zero), tensor_release(q), tensor_release(h);
    return gin[0] ? 0 : -1;
}

static Tensor *std_of_var(Tensor *v) {
    bool prev = ag_set_grad_enabled(false);
    Tensor *r = op_unary(KU_SQRT, v, 0, 0);
    ag_set_grad_enabled(prev);
    AGNode *n = r ? ag_record("std", bw_std, r, &v, 1) : NULL;
    if (n) ag_save(n, r);
    return r;
}

/* var (std when want_std) of a float32 / float64 tensor */
static Tensor *var_compute(Tensor *a, const RedDims *r, const int *dims, int ndims, double correction, bool keepdim,
                           bool want_std) {
    Tensor *mean = op_reduce(KR_MEAN, a, dims, ndims, true);
    Tensor *d = mean ? op_binary(KB_SUB, a, mean) : NULL;
    Tensor *sq = d ? op_binary(KB_MUL, d, d) : NULL;
    Tensor *s = sq ? op_reduce(KR_SUM, sq, dims, ndims, keepdim) : NULL;
    double denom = (double)r->n - correction;
    Tensor *v = s ? op_binary_scalar(KB_DIV, s, denom > 0 ? denom : 0.0, false, false) : NULL;
    tensor_release(mean), tensor_release(d), tensor_release(sq), tensor_release(s);
    if (!want_std || !v) return v;
    Tensor *sd = std_of_var(v);
    tensor_release(v);
    return sd;
}

static Tensor *var_or_std(Tensor *a, const int *dims, int ndims, double correction, bool keepdim, bool want_std) {
    const char *name = want_std ? "std" : "var";
    if (!dtype_is_float(a->dtype)) return accel_fail("%s: input dtype must be floating point, got %s", name, dtype_name(a->dtype));
    RedDims r;
    if (red_dims(a, dims, ndims, keepdim, &r, name) < 0) return NULL;
    Tensor *w = widened(a);
    Tensor *v = w ? var_compute(w, &r, dims, ndims, correction, keepdim, want_std) : NULL;
    tensor_release(w);
    return tensor_to_dtype_owned(v, a->dtype);
}

Tensor *op_var(Tensor *a, const int *dims, int ndims, double correction, bool keepdim) {
    PROF_SCOPE("var", PROF_FORWARD, a, NULL);
    return var_or_std(a, dims, ndims, correction, keepdim, false);
}

Tensor *op_std(Tensor *a, const int *dims, int ndims, double correction, bool keepdim) {
    PROF_SCOPE("std", PROF_FORWARD, a, NULL);
    return var_or_std(a, dims, ndims, correction, keepdim, true);
}

/* 2-norm: g * a / norm, and 0 where the norm is 0 (the subgradient PyTorch
 * uses), instead of the 0 * inf = NaN a sqrt(sum(a*a)) chain would give. */
static int bw_norm2(AGNode *n, Tensor *g, Tensor **gin) {
    Tensor *a = ag_saved(n, 0), *out = ag_saved(n, 1);
    if (!a || !out) return -1;
    Tensor *e = expand_back(g, n), *oe = e ? expand_back(out, n) : NULL;
    Tensor *zero = oe ? op_binary_scalar(KB_EQ, oe, 0, true, false) : NULL;
    Tensor *den = zero ? op_masked_fill(oe, zero, 1.0) : NULL;
    Tensor *w = den ? op_binary(KB_DIV, a, den) : NULL;
    Tensor *w0 = w ? op_masked_fill(w, zero, 0.0) : NULL;
    gin[0] = w0 ? op_binary(KB_MUL, e, w0) : NULL;
    tensor_release(e), tensor_release(oe), tensor_release(zero), tensor_release(den), tensor_release(w), tensor_release(w0);
    return gin[0] ? 0 : -1;
}

/* sgn(a) |a|^(p-1) (p < 2; 0 where a is 0 when p < 1) or a |a|^(p-2) (p >= 2),
 * the factor of torch's norm_backward that depends on a alone. */
static Tensor *norm_p_self_scaled(Tensor *a, double p) {
    Tensor *ab = op_unary(KU_ABS, a, 0, 0), *pw = ab ? op_unary(KU_POW, ab, p < 2 ? p - 1 : p - 2, 0) : NULL;
    Tensor *sg = pw && p < 2 ? op_unary(KU_SIGN, a, 0, 0) : NULL;
    Tensor *ss = pw ? op_binary(KB_MUL, p < 2 ? sg : a, pw) : NULL, *r = ss;
    if (ss && p < 1) { /* 0 * inf at a = 0 */
        Tensor *z = op_binary_scalar(KB_EQ, a, 0, true, false);
        r = z ? op_masked_fill(ss, z, 0.0) : NULL;
        tensor_release(z), tensor_release(ss);
    }
    tensor_release(ab), tensor_release(pw), tensor_release(sg);
    return r;
}

/* p-norm for p other than 0, 1, 2, inf, as torch's norm_backward:
 * p < 1: self_scaled g norm^(1-p); else self_scaled (g / norm^(p-1)), the
 * second factor 0 where the norm is 0 (so a zero vector gets 0, not NaN,
 * while an inf or NaN g still reaches every element). */
static int bw_norm_p(AGNode *n, Tensor *g, Tensor **gin) {
    double p = n->p[0];
    Tensor *a = ag_saved(n, 0), *out = ag_saved(n, 1);
    if (!a || !out) return -1;
    Tensor *e = expand_back(g, n), *oe = e ? expand_back(out, n) : NULL;
    Tensor *ss = oe ? norm_p_self_scaled(a, p) : NULL, *np = ss ? op_unary(KU_POW, oe, p < 1 ? 1 - p : p - 1, 0) : NULL;
    Tensor *res = NULL;
    if (np && p < 1) {
        Tensor *sg = op_binary(KB_MUL, ss, e);
        res = sg ? op_binary(KB_MUL, sg, np) : NULL;
        tensor_release(sg);
    } else if (np) {
        Tensor *scale = op_binary(KB_DIV, e, np), *zero = scale ? op_binary_scalar(KB_EQ, oe, 0, true, false) : NULL;
        Tensor *scale0 = zero ? op_masked_fill(scale, zero, 0.0) : NULL;
        res = scale0 ? op_binary(KB_MUL, ss, scale0) : NULL;
        tensor_release(scale), tensor_release(zero), tensor_release(scale0);
    }
    tensor_release(e), tensor_release(oe), tensor_release(ss), tensor_release(np);
    gin[0] = res;
    return res ? 0 : -1;
}

/* r = norm of a (computed without a graph) recorded with backward bw. */
static void record_norm(Tensor *a, Tensor *r, const RedDims *rd, AGBackwardFn bw, double p) {
    AGNode *n = ag_record("norm", bw, r, &a, 1);
    if (!n) return;
    n->p[0] = p;
    for (int d = 0; d < a->ndim; d++) n->i[d] = rd->mask[d];
    ag_save(n, a), ag_save(n, r);
}

static Tensor *norm_compute(Tensor *a, double p, const int *dims, int ndims, bool keepdim) {
    Tensor *ab = op_unary(KU_ABS, a, 0, 0), *r = NULL;
    if (!ab) return NULL;
    if (isinf(p)) {
        r = op_reduce(p > 0 ? KR_MAX : KR_MIN, ab, dims, ndims, keepdim);
    } else if (p == 1) {
        r = op_reduce(KR_SUM, ab, dims, ndims, keepdim);
    } else if (p == 2) {
        RedDims rd;
        if (red_dims(a, dims, ndims, keepdim, &rd, "norm") == 0) {
            bool prev = ag_set_grad_enabled(false);
            Tensor *sq = op_binary(KB_MUL, a, a), *s = sq ? op_reduce(KR_SUM, sq, dims, ndims, keepdim) : NULL;
            r = s ? op_unary(KU_SQRT, s, 0, 0) : NULL;
            ag_set_grad_enabled(prev);
            tensor_release(sq), tensor_release(s);
            if (r) record_norm(a, r, &rd, bw_norm2, p);
        }
    } else if (p == 0) { /* number of nonzero elements; gradient zero */
        Tensor *nz = op_binary_scalar(KB_NE, a, 0, true, false), *f = nz ? tensor_to_dtype(nz, a->dtype) : NULL;
        bool prev = ag_set_grad_enabled(false);
        Tensor *s = f ? op_reduce(KR_SUM, f, dims, ndims, keepdim) : NULL;
        ag_set_grad_enabled(prev);
        Tensor *all = s ? tensor_full(a->shape, a->ndim, 1, DT_BOOL, a->device) : NULL;
        r = all ? op_masked_fill(ab, all, 0.0) : NULL; /* zeros carrying a's graph (a NaN counts as nonzero) */
        tensor_release(all);
        Tensor *z = r ? op_reduce(KR_SUM, r, dims, ndims, keepdim) : NULL;
        tensor_release(r);
        r = z ? op_binary(KB_ADD, z, s) : NULL;
        tensor_release(nz), tensor_release(f), tensor_release(s), tensor_release(z);
    } else {
        RedDims rd;
        if (red_dims(a, dims, ndims, keepdim, &rd, "norm") == 0) {
            bool prev = ag_set_grad_enabled(false);
            Tensor *pw = op_unary(KU_POW, ab, p, 0), *s = pw ? op_reduce(KR_SUM, pw, dims, ndims, keepdim) : NULL;
            r = s ? op_unary(KU_POW, s, 1.0 / p, 0) : NULL;
            ag_set_grad_enabled(prev);
            tensor_release(pw), tensor_release(s);
            if (r) record_norm(a, r, &rd, bw_norm_p, p);
        }
    }
    tensor_release(ab);
    return r;
}

Tensor *op_norm(Tensor *a, double p, const int *dims, int ndims, bool keepdim) {
    PROF_SCOPE("norm", PROF_FORWARD, a, NULL);
    if (!dtype_is_float(a->dtype)) return accel_fail("norm: input dtype must be floating point, got %s", dtype_name(a->dtype));
    Tensor *w = widened(a), *r = w ? norm_compute(w, p, dims, ndims, keepdim) : NULL;
    tensor_release(w);
    return tensor_to_dtype_owned(r, a->dtype);
}
