/* ops_attention.c: scaled_dot_product_attention through the fused kernel
 * (kernels/cpu/attention.c), forward and backward, for q (B, H, L, D) or
 * (N, L, D), k / v with the same batch dims. Inputs are used in place when
 * their last dim is contiguous (q, k, v are usually strided views into one
 * qkv projection); float64 computes in float64, other float dtypes in
 * float32 and return their own dtype.
 *
 * Layout decision: a 4-D output (and the gradients of 4-D inputs) is
 * allocated as (B, L, H, Dv) and returned as its (B, H, L, Dv) transposed
 * view, as PyTorch's flash kernel does, so the usual
 * y:transpose(2, 3):contiguous():view(B, L, H * Dv) costs no copy. It is
 * not a view of anything the caller has seen (is_view stays false). */
#include "ops.h"
#include "backend/backend.h"
#include "profile.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    Tensor *lse; /* (B, H, L) row log-sum-exp, compute dtype */
    KAttn a;
} AttnCtx;

static void attn_ctx_destroy(AGNode *n) {
    AttnCtx *c = n->ctx;
    tensor_release(c->lse);
    free(c);
}

/* Batch / head / row strides of a 3-D or 4-D tensor as the kernel sees it. */
static void bhr_strides(const Tensor *t, int64_t st[3]) {
    if (t->ndim == 4) st[0] = t->stride[0], st[1] = t->stride[1], st[2] = t->stride[2];
    else st[0] = t->stride[0], st[1] = 0, st[2] = t->stride[1];
}

/* An empty (B, H, L, D) tensor stored as (B, L, H, D), or a contiguous
 * (B, L, D) one when nd == 3. */
static Tensor *heads_last(int nd, int64_t B, int64_t H, int64_t L, int64_t D, DType dt, Device dev) {
    if (nd == 3) return tensor_empty((int64_t[]){B, L, D}, 3, dt, dev);
    Tensor *base = tensor_empty((int64_t[]){B, L, H, D}, 4, dt, dev);
    Tensor *t = base ? tensor_transpose(base, 1, 2) : NULL;
    tensor_release(base);
    if (t) t->is_view = false; /* its only owner: the base is gone */
    return t;
}

/* Whether the last two dims of t (rows, cols) make a GEMM matrix: unit
 * column stride, rows not overlapping (a stride-0 broadcast row or column,
 * as from expand, is not one: the GEMMs refuse such a leading dimension). */
static bool gemm_rows_ok(const Tensor *t) {
    const int64_t rows = t->shape[t->ndim - 2], cols = t->shape[t->ndim - 1];
    if (cols > 1 && t->stride[t->ndim - 1] != 1) return false;
    return rows <= 1 || t->stride[t->ndim - 2] >= (cols > 1 ? cols : 1);
}

/* t in dtype dt laid out for the kernel's GEMMs (t itself when it already
 * is; batch and head strides may be anything, 0 included). */
static Tensor *kernel_operand(Tensor *t, DType dt) {
    bool prev = ag_set_grad_enabled(false);
    Tensor *c = tensor_to_dtype(t, dt), *r = c;
    if (c && !gemm_rows_ok(c)) {
        r = tensor_contiguous(c);
        tensor_release(c);
    }
    ag_set_grad_enabled(prev);
    return r;
}

static int bw_sdpa(AGNode *n, Tensor *g, Tensor **gin) {
    Tensor *q = ag_saved(n, 0), *k = ag_saved(n, 1), *v = ag_saved(n, 2), *o = ag_saved(n, 3);
    if (!q || !k || !v || !o) return -1;
    AttnCtx *c = n->ctx;
    KAttn a = c->a;
    Tensor *go = kernel_operand(g, q->dtype);
    Tensor *gq = go ? heads_last(q->ndim, a.B, a.H, a.L, a.D, q->dtype, q->device) : NULL;
    Tensor *gk = gq ? heads_last(k->ndim, a.B, a.H, a.S, a.D, q->dtype, q->device) : NULL;
    Tensor *gv = gk ? heads_last(v->ndim, a.B, a.H, a.S, a.Dv, q->dtype, q->device) : NULL;
    int rc = gv ? 0 : -1;
    if (rc == 0) {
        bhr_strides(go, a.sgo), bhr_strides(gq, a.sgq), bhr_strides(gk, a.sgk), bhr_strides(gv, a.sgv);
        int bad = backend_for(q->device)->attention_bwd(q->dtype, &a, tensor_data(q), tensor_data(k), tensor_data(v),
                                                        tensor_data(o), tensor_data(c->lse), tensor_data(go),
                                                        tensor_data(gq), tensor_data(gk), tensor_data(gv));
        if (bad) rc = accel_fail_int("scaled_dot_product_attention backward: out of memory or GEMM failure");
    }
    tensor_release(go);
    if (rc < 0) {
        tensor_release(gq), tensor_release(gk), tensor_release(gv);
        return -1;
    }
    gin[0] = gq, gin[1] = gk, gin[2] = gv;
    return 0;
}

static int bw_to_input_dtype(AGNode *n, Tensor *g, Tensor **gin) {
    (void)n;
    gin[0] = tensor_retain(g); /* the engine casts it to the float32 edge */
    return 0;
}

/* The float32 output cast to the inputs' dtype (bf16, fp16) in the same
 * heads-last layout, differentiable. */
static Tensor *cast_output(Tensor *out, DType dt, int nd, const KAttn *a) {
    Tensor *r = heads_last(nd, a->B, a->H, a->L, a->Dv, dt, out->device);
    if (!r) return NULL;
    tensor_copy_strided(r, out);
    ag_record("ToCopyBackward", bw_to_input_dtype, r, &out, 1);
    return r;
}

static int check_sdpa(const Tensor *q, const Tensor *k, const Tensor *v) {
    const int nd = q->ndim;
    bool ok = (nd == 3 || nd == 4) && k->ndim == nd && v->ndim == nd;
    for (int d = 0; ok && d < nd - 2; d++) ok = k->shape[d] == q->shape[d] && v->shape[d] == q->shape[d];
    ok = ok && k->shape[nd - 1] == q->shape[nd - 1] && v->shape[nd - 2] == k->shape[nd - 2];
    if (!ok)
        return accel_fail_int("scaled_dot_product_attention: expected q (B, H, L, D) or (N, L, D), k (.., S, D) and "
                              "v (.., S, Dv) with equal batch dims, got %s, %s and %s", tensor_shape_str(q),
                              tensor_shape_str(k), tensor_shape_str(v));
    if (!dtype_is_float(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype)
        return accel_fail_int("scaled_dot_product_attention: q, k, v must share one floating-point dtype, got %s, %s "
                              "and %s", dtype_name(q->dtype), dtype_name(k->dtype), dtype_name(v->dtype));
    if (k->shape[nd - 2] == 0) return accel_fail_int("scaled_dot_product_attention: needs at least one key (S = 0)");
    char dq[32], dk[32], dv[32];
    if (q->device.type != k->device.type || q->device.type != v->device.type)
        return accel_fail_int("scaled_dot_product_attention: q, k, v are on different devices (%s, %s and %s)",
                              device_str(q->device, dq, sizeof dq), device_str(k->device, dk, sizeof dk),
                              device_str(v->device, dv, sizeof dv));
    return 0;
}

Tensor *op_scaled_dot_product_attention(Tensor *qin, Tensor *kin, Tensor *vin, double scale, bool causal) {
    PROF_SCOPE("scaled_dot_product_attention", PROF_FORWARD, qin, kin);
    if (check_sdpa(qin, kin, vin) < 0) return NULL;
    const DType cdt = qin->dtype == DT_F64 ? DT_F64 : DT_F32;
    const int nd = qin->ndim;
    Tensor *q = kernel_operand(qin, cdt), *k = q ? kernel_operand(kin, cdt) : NULL, *v = k ? kernel_operand(vin, cdt) : NULL;
    KAttn a = {.B = qin->shape[0], .H = nd == 4 ? qin->shape[1] : 1, .L = qin->shape[nd - 2], .S = kin->shape[nd - 2],
               .D = qin->shape[nd - 1], .Dv = vin->shape[nd - 1], .scale = scale, .causal = causal};
    Tensor *o = v ? heads_last(nd, a.B, a.H, a.L, a.Dv, cdt, qin->device) : NULL;
    Tensor *lse = o ? tensor_empty((int64_t[]){a.B, a.H, a.L}, 3, cdt, qin->device) : NULL;
    AttnCtx *c = lse ? malloc(sizeof *c) : NULL;
    Tensor *out = NULL;
    if (lse && !c) accel_fail("scaled_dot_product_attention: out of memory");
    if (c) {
        bhr_strides(q, a.sq), bhr_strides(k, a.sk), bhr_strides(v, a.sv), bhr_strides(o, a.so);
        int bad = backend_for(q->device)->attention_fwd(cdt, &a, tensor_data(q), tensor_data(k), tensor_data(v),
                                                        tensor_data(o), tensor_data(lse));
        if (bad) accel_fail("scaled_dot_product_attention: out of memory or GEMM failure");
        else out = tensor_retain(o);
    }
    AGNode *n = out ? ag_record("scaled_dot_product_attention", bw_sdpa, out, (Tensor *[]){qin, kin, vin}, 3) : NULL;
    if (n) {
        c->lse = tensor_retain(lse), c->a = a;
        n->ctx = c, n->destroy_ctx = attn_ctx_destroy;
        ag_save(n, q), ag_save(n, k), ag_save(n, v), ag_save(n, o);
        c = NULL;
    }
    free(c);
    tensor_release(q), tensor_release(k), tensor_release(v), tensor_release(o), tensor_release(lse);
    if (out && out->dtype != qin->dtype) {
        Tensor *r = cast_output(out, qin->dtype, nd, &a);
        tensor_release(out);
        out = r;
    }
    return out;
}
