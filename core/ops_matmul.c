/* ops_matmul.c: matmul with PyTorch's 1-D / 2-D / batched broadcasting
 * rules, and linear (x @ w^T + b) as one GEMM with the bias as C. Operands
 * are handed to GEMM with transpose flags and leading dimensions taken from
 * their strides, so transposed views cost no copy. Batched products whose
 * right side is shared fold the batch into M (one GEMM). */
#include "ops.h"
#include "backend/backend.h"
#include "backend/iter.h"
#include "precision.h"
#include "profile.h"
#include <string.h>

/* A 2-D matrix as GEMM sees it. */
typedef struct {
    int trans;
    int64_t ld;
} MatLayout;

/* Layout of the last two dims of t, or -1 if neither row- nor column-major. */
static int mat_layout(const Tensor *t, MatLayout *m) {
    int64_t R = t->shape[t->ndim - 2], C = t->shape[t->ndim - 1];
    int64_t s0 = t->stride[t->ndim - 2], s1 = t->stride[t->ndim - 1];
    if ((s1 == 1 || C == 1) && (s0 >= (C > 1 ? C : 1) || R == 1)) {
        m->trans = 0, m->ld = R == 1 ? (C > 1 ? C : 1) : s0;
        return 0;
    }
    if ((s0 == 1 || R == 1) && (s1 >= (R > 1 ? R : 1) || C == 1)) {
        m->trans = 1, m->ld = C == 1 ? (R > 1 ? R : 1) : s1;
        return 0;
    }
    return -1;
}

static DType gemm_dtype(DType a, DType b) {
    if (a == DT_BF16 && b == DT_BF16) return DT_BF16;
    DType p = dtype_promote(a, b);
    return p == DT_F64 || !dtype_is_float(p) ? DT_F64 : DT_F32;
}

/* Operand prepared for GEMM: right dtype and a usable layout (copy if not). */
static Tensor *gemm_operand(Tensor *t, DType cdt, MatLayout *m) {
    Tensor *c = tensor_to_dtype(t, cdt);
    if (!c) return NULL;
    if (mat_layout(c, m) == 0) return c;
    Tensor *d = tensor_contiguous(c);
    tensor_release(c);
    if (d) mat_layout(d, m);
    return d;
}

static int64_t batch_offset(const Tensor *t, const int64_t *bshape, int bnd, int64_t b) {
    int64_t off = 0;
    int lead = bnd - (t->ndim - 2);
    for (int d = bnd - 1; d >= 0; d--) {
        int64_t i = b % bshape[d];
        b /= bshape[d];
        int td = d - lead;
        if (td >= 0 && t->shape[td] != 1) off += i * t->stride[td];
    }
    return off;
}

/* out (batch, M, N) of dtype f32/f64 = a (..., M, K) @ b (..., K, N), no autograd. */
static int matmul_into(Tensor *out, Tensor *a, Tensor *b, const int64_t *bshape, int bnd, double beta) {
    DType cdt = gemm_dtype(a->dtype, b->dtype);
    MatLayout la, lb;
    Tensor *ca = gemm_operand(a, cdt, &la), *cb = ca ? gemm_operand(b, cdt, &lb) : NULL;
    int rc = cb ? 0 : -1;
    int64_t M = a->shape[a->ndim - 2], K = a->shape[a->ndim - 1], N = b->shape[b->ndim - 1];
    int64_t nb = shape_numel(bshape, bnd);
    const Backend *be = backend_for(out->device);
    size_t ea = dtype_size(cdt), eo = dtype_size(out->dtype);
    for (int64_t i = 0; rc == 0 && i < nb; i++) {
        const char *pa = (const char *)tensor_data(ca) + batch_offset(ca, bshape, bnd, i) * (int64_t)ea;
        const char *pb = (const char *)tensor_data(cb) + batch_offset(cb, bshape, bnd, i) * (int64_t)ea;
        char *po = (char *)tensor_data(out) + i * M * N * (int64_t)eo;
        if (be->gemm(cdt, la.trans, lb.trans, M, N, K, 1.0, pa, la.ld, pb, lb.ld, beta, po, N) != 0)
            rc = accel_fail_int("matmul: the GEMM library call failed (M=%lld N=%lld K=%lld, %s)", (long long)M,
                                (long long)N, (long long)K, dtype_name(cdt));
    }
    tensor_release(ca);
    tensor_release(cb);
    return rc;
}

/* Can a (..., M, K) be seen as one (rows, K) matrix without copying? */
static bool foldable(const Tensor *a) {
    int nd = a->ndim;
    if (a->stride[nd - 1] != 1 && a->shape[nd - 1] != 1) return false;
    int64_t expect = a->stride[nd - 2];
    if (expect < a->shape[nd - 1]) return false;
    for (int d = nd - 2; d >= 1; d--) {
        expect *= a->shape[d];
        if (a->shape[d - 1] != 1 && a->stride[d - 1] != expect) return false;
    }
    return true;
}

/* a @ b, and with bias (broadcast over the rows; may be NULL) the GEMM
 * accumulates onto the bias copied into the output (beta = 1), so adding it
 * costs a write pass, not a separate read-modify-write one. */
static Tensor *mm_forward(Tensor *a, Tensor *b, Tensor *bias) {
    int64_t K = a->shape[a->ndim - 1];
    if (b->shape[b->ndim - 2] != K)
        return accel_fail("matmul: shapes %s and %s cannot be multiplied (%lld != %lld)", tensor_shape_str(a),
                          tensor_shape_str(b), (long long)K, (long long)b->shape[b->ndim - 2]);
    int64_t bshape[TENSOR_MAX_DIMS];
    int bnd;
    if (broadcast_shapes(a->shape, a->ndim - 2, b->shape, b->ndim - 2, bshape, &bnd, "matmul") < 0) return NULL;
    int64_t M = a->shape[a->ndim - 2], N = b->shape[b->ndim - 1];
    int64_t oshape[TENSOR_MAX_DIMS];
    memcpy(oshape, bshape, sizeof(int64_t) * (size_t)bnd);
    oshape[bnd] = M, oshape[bnd + 1] = N;
    DType cdt = gemm_dtype(a->dtype, b->dtype), acc = cdt == DT_F64 ? DT_F64 : DT_F32;
    DType rd = dtype_promote(a->dtype, b->dtype);
    if (shape_check("matmul", oshape, bnd + 2, (int)acc) < 0) return NULL;
    Tensor *out = tensor_empty(oshape, bnd + 2, acc, a->device);
    if (!out) return NULL;
    const double beta = bias ? 1.0 : 0.0;
    if (bias && tensor_copy_(out, bias) < 0) {
        tensor_release(out);
        return NULL;
    }
    int rc;
    bool shared_b = b->ndim == 2 || shape_numel(b->shape, b->ndim - 2) == 1;
    if (shared_b && a->ndim > 2 && foldable(a) && shape_numel(a->shape, a->ndim - 2) == shape_numel(bshape, bnd)) {
        Tensor a2 = *a, b2 = *b; /* headers only: fold the batch into M (not numel / K: K may be 0) */
        a2.ndim = 2, a2.shape[0] = shape_numel(a->shape, a->ndim - 1), a2.shape[1] = K;
        a2.stride[0] = a->stride[a->ndim - 2], a2.stride[1] = a->stride[a->ndim - 1];
        a2.requires_grad = false, a2.grad_fn = NULL;
        b2.ndim = 2, b2.shape[0] = K, b2.shape[1] = N;
        b2.stride[0] = b->stride[b->ndim - 2], b2.stride[1] = b->stride[b->ndim - 1];
        b2.requires_grad = false, b2.grad_fn = NULL;
        rc = matmul_into(out, &a2, &b2, NULL, 0, beta);
    } else {
        rc = matmul_into(out, a, b, bshape, bnd, beta);
    }
    if (rc < 0) {
        tensor_release(out);
        return NULL;
    }
    return tensor_to_dtype_owned(out, rd);
}

/* The operands a backward needs: a for b's gradient, b for a's (as torch,
 * an operand is saved only when the other one needs a gradient). */
static void save_operands(AGNode *n, Tensor *a, Tensor *b) {
    ag_save(n, ag_input_needs_grad(n, 1) ? a : NULL);
    ag_save(n, ag_input_needs_grad(n, 0) ? b : NULL);
}

static int saved_operands(AGNode *n, Tensor **a, Tensor **b) {
    *a = ag_input_needs_grad(n, 1) ? ag_saved(n, 0) : NULL;
    *b = ag_input_needs_grad(n, 0) ? ag_saved(n, 1) : NULL;
    return (ag_input_needs_grad(n, 1) && !*a) || (ag_input_needs_grad(n, 0) && !*b) ? -1 : 0;
}

/* The number of rows of shape folded to 2-D (all dims but the last; 1 for
 * a vector): explicit, since a -1 cannot be inferred when a dim is 0. */
static int64_t lead_rows(const int64_t *shape, int ndim) {
    int64_t rows = 1;
    for (int d = 0; d < ndim - 1; d++) rows *= shape[d];
    return rows;
}

static int bw_mm(AGNode *n, Tensor *g, Tensor **gin) {
    Tensor *a, *b;
    if (saved_operands(n, &a, &b) < 0) return -1;
    if (ag_input_needs_grad(n, 0)) { /* g @ b^T */
        Tensor *bt = tensor_transpose(b, -1, -2);
        gin[0] = bt ? op_matmul(g, bt) : NULL;
        tensor_release(bt);
        if (!gin[0]) return -1;
    }
    if (ag_input_needs_grad(n, 1)) { /* a^T @ g, folding a batch that b was shared across */
        Tensor *x = a, *gg = g, *xf = NULL, *gf = NULL;
        if (n->edges[1].ndim == 2 && a->ndim > 2) {
            xf = tensor_reshape(a, (int64_t[]){lead_rows(a->shape, a->ndim), a->shape[a->ndim - 1]}, 2);
            gf = tensor_reshape(g, (int64_t[]){lead_rows(g->shape, g->ndim), g->shape[g->ndim - 1]}, 2);
            x = xf, gg = gf;
        }
        Tensor *at = x ? tensor_transpose(x, -1, -2) : NULL;
        gin[1] = at && gg ? op_matmul(at, gg) : NULL;
        tensor_release(at), tensor_release(xf), tensor_release(gf);
        if (!gin[1]) return -1;
    }
    return 0;
}

static Tensor *mm_nd(Tensor *a, Tensor *b) {
    Tensor *out = mm_forward(a, b, NULL);
    AGNode *n = out ? ag_record("mm", bw_mm, out, (Tensor *[]){a, b}, 2) : NULL;
    if (n) save_operands(n, a, b);
    return out;
}

/* As torch: operands of different dtypes are an error (under autocast they
 * were cast to one dtype before this, unless one is not autocast's: the
 * hint to run under autocast only where that would help). */
static int check_same_dtype(const char *op, const Tensor *a, const Tensor *b) {
    if (!b || a->dtype == b->dtype) return 0;
    bool autocast_helps = precision_autocast() == DT_F32 && precision_autocast_eligible(a->dtype) &&
                          precision_autocast_eligible(b->dtype);
    return accel_fail_int("%s: expected both operands to have the same dtype, got %s and %s (convert one with :to()%s)",
                          op, dtype_name(a->dtype), dtype_name(b->dtype),
                          autocast_helps ? ", or run under autocast" : "");
}

static Tensor *matmul_impl(Tensor *a, Tensor *b) {
    if (check_same_dtype("matmul", a, b) < 0) return NULL;
    if (a->ndim == 0 || b->ndim == 0)
        return accel_fail("matmul: both arguments need at least 1 dimension, got shapes %s and %s", tensor_shape_str(a),
                          tensor_shape_str(b));
    if (tensor_check_device("matmul", a, b) < 0) return NULL;
    int64_t ka = a->shape[a->ndim - 1], kb = b->shape[b->ndim == 1 ? 0 : b->ndim - 2];
    if (ka != kb) /* checked here so the message shows the caller's shapes, not the unsqueezed ones */
        return accel_fail("matmul: shapes %s and %s cannot be multiplied (%lld != %lld)", tensor_shape_str(a),
                          tensor_shape_str(b), (long long)ka, (long long)kb);
    Tensor *a2 = a->ndim == 1 ? tensor_unsqueeze(a, 0) : tensor_retain(a);
    Tensor *b2 = b->ndim == 1 ? tensor_unsqueeze(b, 1) : tensor_retain(b);
    Tensor *r = a2 && b2 ? mm_nd(a2, b2) : NULL;
    tensor_release(a2);
    tensor_release(b2);
    if (r && b->ndim == 1) {
        Tensor *s = tensor_squeeze(r, -1);
        tensor_release(r);
        r = s;
    }
    if (r && a->ndim == 1) {
        Tensor *s = tensor_squeeze(r, r->ndim == 1 ? 0 : -2);
        tensor_release(r);
        r = s;
    }
    return r;
}

/* ---- linear ---- */

static int bw_linear(AGNode *n, Tensor *g, Tensor **gin) {
    Tensor *x, *w;
    if (saved_operands(n, &x, &w) < 0) return -1;
    int64_t in = n->edges[1].shape[1], out = n->edges[1].shape[0];
    int64_t rows = lead_rows(n->edges[0].shape, n->edges[0].ndim);
    Tensor *g2 = tensor_reshape(g, (int64_t[]){rows, out}, 2);
    if (!g2) return -1;
    int rc = 0;
    if (ag_input_needs_grad(n, 0)) { /* g @ w, shaped like x */
        Tensor *gx = op_matmul(g2, w);
        gin[0] = gx ? tensor_reshape(gx, n->edges[0].shape, n->edges[0].ndim) : NULL;
        tensor_release(gx);
        rc |= gin[0] ? 0 : -1;
    }
    if (rc == 0 && ag_input_needs_grad(n, 1)) { /* g^T @ x */
        Tensor *x2 = tensor_reshape(x, (int64_t[]){rows, in}, 2), *gt = tensor_transpose(g2, 0, 1);
        gin[1] = x2 && gt ? op_matmul(gt, x2) : NULL;
        tensor_release(x2), tensor_release(gt);
        rc |= gin[1] ? 0 : -1;
    }
    if (rc == 0 && n->n_in > 2 && ag_input_needs_grad(n, 2)) {
        gin[2] = op_reduce(KR_SUM, g2, (int[]){0}, 1, false);
        rc |= gin[2] ? 0 : -1;
    }
    tensor_release(g2);
    return rc;
}

static Tensor *linear_impl(Tensor *x, Tensor *w, Tensor *b) {
    if (tensor_check_device("linear", x, w) < 0 || tensor_check_device("linear", x, b) < 0) return NULL;
    if (check_same_dtype("linear", x, w) < 0) return NULL; /* the bias is added in the accumulation dtype */
    if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
        return accel_fail("linear: input of shape %s does not match weight of shape %s (expected (..., %lld))",
                          tensor_shape_str(x), tensor_shape_str(w), w->ndim == 2 ? (long long)w->shape[1] : -1LL);
    int64_t out_f = w->shape[0];
    if (b && (b->ndim != 1 || b->shape[0] != out_f))
        return accel_fail("linear: bias of shape %s does not match weight of shape %s", tensor_shape_str(b), tensor_shape_str(w));
    bool prev = ag_set_grad_enabled(false);
    Tensor *wt = tensor_transpose(w, 0, 1);
    Tensor *y = NULL;
    if (wt && x->ndim == 1) { /* (in) @ (in, out): matmul's vector rules, then the bias */
        y = op_matmul(x, wt);
        if (y && b && op_binary_(KB_ADD, y, b) < 0) tensor_release(y), y = NULL;
    } else if (wt) {
        y = mm_forward(x, wt, b);
    }
    tensor_release(wt);
    ag_set_grad_enabled(prev);
    Tensor *ins[3] = {x, w, b};
    AGNode *n = y ? ag_record("linear", bw_linear, y, ins, b ? 3 : 2) : NULL;
    if (n) save_operands(n, x, w);
    return y;
}

/* ---- entry points: autocast applies to the operands ---- */

/* Run fn on a, b and c (the bias, may be NULL) cast for autocast (a plain
 * call when autocast is off): as torch, the bias is rounded to the autocast
 * dtype too, and its gradient flows back through the cast. */
static Tensor *with_autocast(Tensor *(*fn)(Tensor *, Tensor *, Tensor *), Tensor *a, Tensor *b, Tensor *c) {
    if (precision_autocast() == DT_F32) return fn(a, b, c);
    Tensor *ca = precision_autocast_input(a), *cb = ca ? precision_autocast_input(b) : NULL;
    Tensor *cc = cb && c ? precision_autocast_input(c) : NULL;
    Tensor *r = cb && (cc || !c) ? fn(ca, cb, cc) : NULL;
    tensor_release(ca);
    tensor_release(cb);
    tensor_release(cc);
    return r;
}

static Tensor *matmul_2(Tensor *a, Tensor *b, Tensor *unused) {
    (void)unused;
    return matmul_impl(a, b);
}

Tensor *op_matmul(Tensor *a, Tensor *b) {
    PROF_SCOPE("matmul", PROF_FORWARD, a, b);
    return with_autocast(matmul_2, a, b, NULL);
}

Tensor *op_linear(Tensor *x, Tensor *w, Tensor *b) {
    PROF_SCOPE("linear", PROF_FORWARD, x, w);
    return with_autocast(linear_impl, x, w, b);
}
