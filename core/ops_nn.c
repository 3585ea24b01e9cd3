/* ops_nn.c: softmax / log_softmax, fused cross-entropy and layer norm
 * (forward + backward through the fused kernels), in float32 or float64;
 * other float dtypes compute in float32. */
#include "ops.h"
#include "backend/backend.h"
#include "profile.h"
#include <string.h>

static DType nn_compute_dtype(DType dt) { return dt == DT_F64 ? DT_F64 : DT_F32; }

static void outer_inner(const Tensor *t, int dim, int64_t *outer, int64_t *inner) {
    *outer = *inner = 1;
    for (int d = 0; d < dim; d++) *outer *= t->shape[d];
    for (int d = dim + 1; d < t->ndim; d++) *inner *= t->shape[d];
}

static int bw_softmax(AGNode *n, Tensor *g, Tensor **gin) {
    Tensor *y = ag_saved(n, 0);
    if (!y) return -1;
    Tensor *gc = tensor_contiguous_as(g, y->dtype);
    Tensor *gx = gc ? tensor_empty_like(y) : NULL;
    if (gx) {
        int64_t outer, inner;
        outer_inner(y, (int)n->i[0], &outer, &inner);
        int64_t len = y->ndim ? y->shape[n->i[0]] : 1;
        backend_for(y->device)->softmax_backward((int)n->i[1], y->dtype, tensor_data(y), tensor_data(gc), outer, len, inner,
                                                 tensor_data(gx));
    }
    tensor_release(gc);
    gin[0] = gx;
    return gx ? 0 : -1;
}

Tensor *op_softmax(Tensor *a, int dim, bool log) {
    PROF_SCOPE(log ? "log_softmax" : "softmax", PROF_FORWARD, a, NULL);
    const char *name = log ? "log_softmax" : "softmax";
    if (!dtype_is_float(a->dtype)) return accel_fail("%s: input dtype must be floating point, got %s", name, dtype_name(a->dtype));
    if ((dim = tensor_wrap_dim(a, dim, name)) < 0) return NULL;
    DType cdt = nn_compute_dtype(a->dtype);
    Tensor *x = tensor_contiguous_as(a, cdt), *y = x ? tensor_empty_like(x) : NULL;
    if (y) {
        int64_t outer, inner;
        outer_inner(x, dim, &outer, &inner);
        int64_t len = x->ndim ? x->shape[dim] : 1;
        backend_for(x->device)->softmax(log, cdt, tensor_data(x), outer, len, inner, tensor_data(y));
        AGNode *n = ag_record(name, bw_softmax, y, &a, 1);
        if (n) {
            n->i[0] = dim, n->i[1] = log;
            ag_save(n, y);
        }
    }
    tensor_release(x);
    if (y && y->dtype != a->dtype) {
        Tensor *r = tensor_to_dtype(y, a->dtype);
        tensor_release(y);
        y = r;
    }
    return y;
}

/* ---- cross-entropy ---- */

/* Whether the saved logits are the last reference to their storage (the
 * usual case in a training step once the forward's Lua handles are
 * collected): nothing else can see them, and the node drops them right
 * after its backward, so the gradient may be written over them, one (N, C)
 * buffer less at the peak (200 MB for GPT-2's 50 257 classes at 1024
 * tokens). The kernel reads each element before writing it. */
static bool logits_reusable(const Tensor *x, const Tensor *gc) {
    return x->refcount == 1 && x->storage->refcount == 1 && tensor_is_contiguous(x) && x->storage != gc->storage;
}

static int bw_cross_entropy(AGNode *n, Tensor *g, Tensor **gin) {
    Tensor *x = ag_saved(n, 0), *lse = ag_saved(n, 1), *t = ag_saved(n, 2);
    if (!x || !lse || !t) return -1;
    Tensor *gc = tensor_contiguous_as(g, x->dtype);
    Tensor *gx = !gc ? NULL : logits_reusable(x, gc) ? tensor_detach(x) : tensor_empty_like(x);
    if (gx) {
        int64_t N = x->shape[0], C = x->shape[1];
        backend_for(x->device)->cross_entropy_bwd(x->dtype, tensor_data(x), tensor_data(lse), N, C, tensor_data(t), n->i[0],
                                                  n->p[0], tensor_data(gc), tensor_data(gx));
    }
    tensor_release(gc);
    gin[0] = gx;
    return gx ? 0 : -1;
}

/* (N, C) logits and (N) int64 targets -> per-row losses (N), differentiable. */
static Tensor *cross_entropy_rows(Tensor *logits2, Tensor *target1, int64_t ignore_index, double ls, int64_t *count) {
    DType cdt = nn_compute_dtype(logits2->dtype);
    Tensor *x = tensor_contiguous_as(logits2, cdt), *t = tensor_contiguous_as(target1, DT_I64);
    int64_t N = logits2->shape[0], C = logits2->shape[1];
    Tensor *loss = t ? tensor_empty(&N, 1, cdt, x->device) : NULL, *lse = loss ? tensor_empty(&N, 1, cdt, x->device) : NULL;
    Tensor *out = NULL;
    if (lse) {
        int64_t bad = backend_for(x->device)->cross_entropy_fwd(cdt, tensor_data(x), N, C, tensor_data(t), ignore_index, ls,
                                                                tensor_data(loss), tensor_data(lse));
        HostMap m; /* the targets, for the count of valid rows and the error */
        const int64_t *tp = tensor_host_map(t, HOST_READ, &m);
        if (tp && bad >= 0) {
            accel_fail("cross_entropy: target %lld is out of bounds for %lld classes (sample %lld; targets are 0-based "
                       "class indices)", (long long)tp[bad], (long long)C, (long long)bad + 1);
        } else if (tp) {
            *count = 0;
            for (int64_t i = 0; i < N; i++) *count += tp[i] != ignore_index;
        }
        if (tensor_host_unmap(&m) == 0 && tp && bad < 0) {
            out = tensor_retain(loss);
            AGNode *n = ag_record("cross_entropy", bw_cross_entropy, out, &logits2, 1);
            if (n) {
                n->i[0] = ignore_index, n->p[0] = ls;
                ag_save(n, x), ag_save(n, lse), ag_save(n, t);
            }
        }
    }
    tensor_release(x), tensor_release(t), tensor_release(loss), tensor_release(lse);
    return out;
}

/* Move the class dim (1) of (N, C, d...) last and flatten to (N*d..., C). */
static int flatten_classes(Tensor *logits, Tensor *target, Tensor **x2, Tensor **t1) {
    if (logits->ndim == 1) {
        *x2 = tensor_unsqueeze(logits, 0);
        *t1 = tensor_reshape(target, (int64_t[]){1}, 1);
    } else if (logits->ndim == 2) {
        *x2 = tensor_retain(logits);
        *t1 = tensor_retain(target);
    } else {
        int perm[TENSOR_MAX_DIMS], k = 0;
        perm[k++] = 0;
        for (int d = 2; d < logits->ndim; d++) perm[k++] = d;
        perm[k++] = 1;
        Tensor *p = tensor_permute(logits, perm, logits->ndim);
        *x2 = p ? tensor_reshape(p, (int64_t[]){-1, logits->shape[1]}, 2) : NULL;
        *t1 = tensor_reshape(target, (int64_t[]){-1}, 1);
        tensor_release(p);
    }
    return *x2 && *t1 ? 0 : -1;
}

static int check_ce_shapes(Tensor *logits, Tensor *target) {
    bool ok = logits->ndim >= 1 && target->ndim == (logits->ndim == 1 ? 0 : logits->ndim - 1);
    for (int d = 0, k = 0; ok && d < logits->ndim; d++) {
        if (d == 1 || logits->ndim == 1) continue;
        ok = target->shape[k++] == logits->shape[d];
    }
    if (ok) return 0;
    return accel_fail_int("cross_entropy: input of shape %s and target of shape %s do not match (expected input (N, C) "
                          "and target (N) of class indices)", tensor_shape_str(logits), tensor_shape_str(target));
}

/* Soft targets: -sum(target * log_softmax(x)) over the class dim. */
static Tensor *cross_entropy_probs(Tensor *logits, Tensor *target, double ls) {
    int cdim = logits->ndim == 1 ? 0 : 1;
    if (!tensor_same_shape(target, logits))
        return accel_fail("cross_entropy: probability targets must have the input's shape %s, got %s",
                          tensor_shape_str(logits), tensor_shape_str(target));
    Tensor *t = tensor_retain(target);
    if (ls > 0) { /* t * (1 - ls) + ls / C */
        Tensor *a = op_binary_scalar(KB_MUL, target, 1 - ls, false, false);
        tensor_release(t);
        t = a ? op_binary_scalar(KB_ADD, a, ls / (double)logits->shape[cdim], false, false) : NULL;
        tensor_release(a);
    }
    Tensor *lp = t ? op_softmax(logits, cdim, true) : NULL, *m = lp ? op_binary(KB_MUL, lp, t) : NULL;
    Tensor *s = m ? op_reduce(KR_SUM, m, &cdim, 1, false) : NULL, *r = s ? op_unary(KU_NEG, s, 0, 0) : NULL;
    tensor_release(t), tensor_release(lp), tensor_release(m), tensor_release(s);
    return r;
}

Tensor *op_cross_entropy(Tensor *logits, Tensor *target, int64_t ignore_index, double ls, int reduction) {
    PROF_SCOPE("cross_entropy", PROF_FORWARD, logits, target);
    if (tensor_check_device("cross_entropy", logits, target) < 0) return NULL;
    if (!dtype_is_float(logits->dtype))
        return accel_fail("cross_entropy: input must be floating point, got %s", dtype_name(logits->dtype));
    if (ls < 0 || ls > 1) return accel_fail("cross_entropy: label_smoothing must be in [0, 1], got %g", ls);
    Tensor *rows = NULL;
    int64_t count = 0;
    if (dtype_is_float(target->dtype)) {
        rows = cross_entropy_probs(logits, target, ls);
        count = rows ? rows->numel : 0;
    } else {
        if (check_ce_shapes(logits, target) < 0) return NULL;
        Tensor *x2 = NULL, *t1 = NULL;
        if (flatten_classes(logits, target, &x2, &t1) == 0) rows = cross_entropy_rows(x2, t1, ignore_index, ls, &count);
        tensor_release(x2), tensor_release(t1);
        if (rows && reduction == 0 && logits->ndim != 2) { /* (N, C): rows already has target's shape */
            Tensor *r = tensor_reshape(rows, target->shape, target->ndim);
            tensor_release(rows);
            return r;
        }
    }
    if (!rows || reduction == 0) return rows;
    Tensor *s = op_reduce(KR_SUM, rows, NULL, 0, false);
    tensor_release(rows);
    if (!s || reduction == 2) return s;
    Tensor *m = op_binary_scalar(KB_DIV, s, (double)count, false, false);
    tensor_release(s);
    return m;
}

/* ---- layer norm ---- */

static int bw_layer_norm(AGNode *n, Tensor *g, Tensor **gin) {
    Tensor *x = ag_saved(n, 0), *mean = ag_saved(n, 1), *rstd = ag_saved(n, 2), *w = n->n_saved > 3 ? ag_saved(n, 3) : NULL;
    if (!x || !mean || !rstd || (n->n_saved > 3 && !w)) return -1;
    int64_t C = n->i[0], rows = C ? x->numel / C : 0;
    Tensor *gc = tensor_contiguous_as(g, x->dtype), *gx = gc ? tensor_empty_like(x) : NULL;
    bool gw_needed = n->n_in > 1 && ag_input_needs_grad(n, 1), gb_needed = n->n_in > 2 && ag_input_needs_grad(n, 2);
    /* weight/bias shaped as given (normalized_shape, C elements): a flat (C) gradient
     * would be taken for a broadcast one when normalized_shape ends in 1 */
    Tensor *gw = gx && gw_needed ? tensor_zeros(n->edges[1].shape, n->edges[1].ndim, x->dtype, x->device) : NULL;
    Tensor *gb = gx && gb_needed ? tensor_zeros(n->edges[2].shape, n->edges[2].ndim, x->dtype, x->device) : NULL;
    if (gx) {
        backend_for(x->device)->layernorm_bwd(x->dtype, tensor_data(x), w ? tensor_data(w) : NULL, tensor_data(mean),
                                              tensor_data(rstd), tensor_data(gc), rows, C, tensor_data(gx),
                                              gw ? tensor_data(gw) : NULL, gb ? tensor_data(gb) : NULL);
    }
    tensor_release(gc);
    gin[0] = gx;
    if (n->n_in > 1) gin[1] = gw;
    if (n->n_in > 2) gin[2] = gb;
    return gx ? 0 : -1;
}

Tensor *op_layer_norm(Tensor *xin, const int64_t *nshape, int nnd, Tensor *w, Tensor *b, double eps) {
    PROF_SCOPE("layer_norm", PROF_FORWARD, xin, w);
    if (tensor_check_device("layer_norm", xin, w) < 0 || tensor_check_device("layer_norm", xin, b) < 0) return NULL;
    bool ok = nnd >= 1 && nnd <= xin->ndim;
    for (int k = 0; ok && k < nnd; k++) ok = xin->shape[xin->ndim - nnd + k] == nshape[k];
    int64_t C = shape_numel(nshape, nnd);
    if (!ok) {
        char ns[160];
        shape_str(nshape, nnd, ns, sizeof ns);
        return accel_fail("layer_norm: normalized_shape %s does not match the last dims of input of shape %s", ns, tensor_shape_str(xin));
    }
    if ((w && w->numel != C) || (b && b->numel != C))
        return accel_fail("layer_norm: weight/bias must have %lld elements (got %s and %s)", (long long)C,
                          w ? tensor_shape_str(w) : "none", b ? tensor_shape_str(b) : "none");
    if (!dtype_is_float(xin->dtype)) return accel_fail("layer_norm: input must be floating point, got %s", dtype_name(xin->dtype));
    DType cdt = nn_compute_dtype(xin->dtype);
    Tensor *x = tensor_contiguous_as(xin, cdt), *wc = w ? tensor_contiguous_as(w, cdt) : NULL, *bc = b ? tensor_contiguous_as(b, cdt) : NULL;
    int64_t rows = C ? xin->numel / C : 0;
    Tensor *y = x ? tensor_empty_like(x) : NULL;
    Tensor *mean = y ? tensor_empty(&rows, 1, cdt, x->device) : NULL, *rstd = mean ? tensor_empty(&rows, 1, cdt, x->device) : NULL;
    if (rstd) {
        backend_for(x->device)->layernorm_fwd(cdt, tensor_data(x), wc ? tensor_data(wc) : NULL, bc ? tensor_data(bc) : NULL,
                                              rows, C, eps, tensor_data(y), tensor_data(mean), tensor_data(rstd));
        Tensor *ins[3] = {xin, w, b};
        AGNode *n = ag_record("layer_norm", bw_layer_norm, y, ins, b ? 3 : (w ? 2 : 1));
        if (n) {
            n->i[0] = C;
            ag_save(n, x), ag_save(n, mean), ag_save(n, rstd);
            if (wc) ag_save(n, wc);
        }
    } else {
        tensor_release(y);
        y = NULL;
    }
    tensor_release(x), tensor_release(wc), tensor_release(bc), tensor_release(mean), tensor_release(rstd);
    if (y && y->dtype != xin->dtype) {
        Tensor *r = tensor_to_dtype(y, xin->dtype);
        tensor_release(y);
        y = r;
    }
    return y;
}
