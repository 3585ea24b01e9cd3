/* attention.cu: flash-style causal / full scaled-dot-product attention,
 * forward and backward, one kernel each, never forming the (L, S) scores.
 * Layout as k_attention_* (KAttn): q (B, H, L, D), k (B, H, S, D),
 * v (B, H, S, Dv), o (B, H, L, Dv) with strides for batch, head, row and a
 * contiguous last dim; lse (B, H, L) float32 contiguous. dt float32 or
 * bf16; arithmetic and softmax statistics in float32.
 * Forward: one thread per query row, online softmax over the keys (running
 * max m, sum l, rescaled accumulator), o = acc / l, lse = m + log l.
 * Backward (blockIdx.z selects the role): z = 0, one thread per query row:
 *   Di = go_i . o_i,  p_ij = exp(scale q_i.k_j - lse_i),
 *   ds_ij = p_ij (go_i . v_j - Di),  gq_i = scale sum_j ds_ij k_j;
 * z = 1, one thread per key row: gv_j = sum_i p_ij go_i,
 *   gk_j = scale sum_i ds_ij q_i. Causal masks key j > query i.
 * Correctness first: rows live in per-thread arrays (local memory) and
 * every thread of a block reads the same key (or query) row at once, which
 * the cache broadcasts; the tiled tensor-core version replaces this later
 * behind the same signature. */
#include "common.cuh"

#define ATTN_THREADS 64

typedef struct {
    KAttn a;
    DType dt;
} AttnArgs;

__device__ __forceinline__ int64_t row_off(const int64_t st[3], int64_t b, int64_t h, int64_t r) {
    return b * st[0] + h * st[1] + r * st[2];
}

__device__ float dot_row(const float *x, const void *p, DType dt, int64_t off, int64_t n) {
    float s = 0;
    for (int64_t d = 0; d < n; d++) s += x[d] * kc_load<float>(p, dt, off + d);
    return s;
}

__global__ void attn_fwd_kernel(AttnArgs g, const void *q, const void *k, const void *v, void *o, float *lse) {
    const KAttn &a = g.a;
    const int64_t bh = blockIdx.y, b = bh / a.H, h = bh % a.H;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= a.L) return;
    float qi[KC_ATTN_MAX_D], acc[KC_ATTN_MAX_D];
    const float scale = (float)a.scale;
    for (int64_t d = 0; d < a.D; d++) qi[d] = kc_load<float>(q, g.dt, row_off(a.sq, b, h, i) + d);
    for (int64_t d = 0; d < a.Dv; d++) acc[d] = 0;
    float m = -INFINITY, l = 0;
    const int64_t end = a.causal ? (i + 1 < a.S ? i + 1 : a.S) : a.S;
    for (int64_t j = 0; j < end; j++) {
        const float s = scale * dot_row(qi, k, g.dt, row_off(a.sk, b, h, j), a.D);
        const float mn = s > m ? s : m, corr = expf(m - mn), p = expf(s - mn);
        const int64_t vo = row_off(a.sv, b, h, j);
        for (int64_t d = 0; d < a.Dv; d++) acc[d] = acc[d] * corr + p * kc_load<float>(v, g.dt, vo + d);
        l = l * corr + p;
        m = mn;
    }
    const int64_t oo = row_off(a.so, b, h, i);
    for (int64_t d = 0; d < a.Dv; d++) kc_store(o, g.dt, oo + d, l > 0 ? acc[d] / l : 0.0f);
    lse[bh * a.L + i] = l > 0 ? m + logf(l) : -INFINITY;
}

/* Di = go_i . o_i */
__device__ float row_delta(const AttnArgs &g, const void *go, const void *o, int64_t b, int64_t h, int64_t i) {
    const KAttn &a = g.a;
    float s = 0;
    const int64_t po = row_off(a.so, b, h, i), pg = row_off(a.sgo, b, h, i);
    for (int64_t d = 0; d < a.Dv; d++) s += kc_load<float>(go, g.dt, pg + d) * kc_load<float>(o, g.dt, po + d);
    return s;
}

__device__ void attn_bwd_query(const AttnArgs &g, int64_t b, int64_t h, int64_t i, const void *q, const void *k,
                               const void *v, const void *o, const float *lse, const void *go, void *gq) {
    const KAttn &a = g.a;
    float qi[KC_ATTN_MAX_D], goi[KC_ATTN_MAX_D], dq[KC_ATTN_MAX_D];
    const float scale = (float)a.scale, li = lse[(b * a.H + h) * a.L + i], Di = row_delta(g, go, o, b, h, i);
    for (int64_t d = 0; d < a.D; d++) qi[d] = kc_load<float>(q, g.dt, row_off(a.sq, b, h, i) + d), dq[d] = 0;
    for (int64_t d = 0; d < a.Dv; d++) goi[d] = kc_load<float>(go, g.dt, row_off(a.sgo, b, h, i) + d);
    const int64_t end = a.causal ? (i + 1 < a.S ? i + 1 : a.S) : a.S;
    for (int64_t j = 0; j < end; j++) {
        const int64_t ko = row_off(a.sk, b, h, j);
        const float p = expf(scale * dot_row(qi, k, g.dt, ko, a.D) - li);
        const float ds = p * (dot_row(goi, v, g.dt, row_off(a.sv, b, h, j), a.Dv) - Di);
        for (int64_t d = 0; d < a.D; d++) dq[d] += ds * kc_load<float>(k, g.dt, ko + d);
    }
    const int64_t out = row_off(a.sgq, b, h, i);
    for (int64_t d = 0; d < a.D; d++) kc_store(gq, g.dt, out + d, scale * dq[d]);
}

__device__ void attn_bwd_key(const AttnArgs &g, int64_t b, int64_t h, int64_t j, const void *q, const void *k,
                             const void *v, const void *o, const float *lse, const void *go, void *gk, void *gv) {
    const KAttn &a = g.a;
    float kj[KC_ATTN_MAX_D], vj[KC_ATTN_MAX_D], dk[KC_ATTN_MAX_D], dv[KC_ATTN_MAX_D];
    const float scale = (float)a.scale;
    for (int64_t d = 0; d < a.D; d++) kj[d] = kc_load<float>(k, g.dt, row_off(a.sk, b, h, j) + d), dk[d] = 0;
    for (int64_t d = 0; d < a.Dv; d++) vj[d] = kc_load<float>(v, g.dt, row_off(a.sv, b, h, j) + d), dv[d] = 0;
    for (int64_t i = a.causal ? j : 0; i < a.L; i++) {
        const int64_t qo = row_off(a.sq, b, h, i), go_o = row_off(a.sgo, b, h, i);
        const float p = expf(scale * dot_row(kj, q, g.dt, qo, a.D) - lse[(b * a.H + h) * a.L + i]);
        const float ds = p * (dot_row(vj, go, g.dt, go_o, a.Dv) - row_delta(g, go, o, b, h, i));
        for (int64_t d = 0; d < a.Dv; d++) dv[d] += p * kc_load<float>(go, g.dt, go_o + d);
        for (int64_t d = 0; d < a.D; d++) dk[d] += ds * kc_load<float>(q, g.dt, qo + d);
    }
    const int64_t ok = row_off(a.sgk, b, h, j), ov = row_off(a.sgv, b, h, j);
    for (int64_t d = 0; d < a.D; d++) kc_store(gk, g.dt, ok + d, scale * dk[d]);
    for (int64_t d = 0; d < a.Dv; d++) kc_store(gv, g.dt, ov + d, dv[d]);
}

__global__ void attn_bwd_kernel(AttnArgs g, const void *q, const void *k, const void *v, const void *o,
                                const float *lse, const void *go, void *gq, void *gk, void *gv) {
    const int64_t bh = blockIdx.y, b = bh / g.a.H, h = bh % g.a.H;
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (blockIdx.z == 0 && r < g.a.L) attn_bwd_query(g, b, h, r, q, k, v, o, lse, go, gq);
    if (blockIdx.z == 1 && r < g.a.S) attn_bwd_key(g, b, h, r, q, k, v, o, lse, go, gk, gv);
}

static int attn_check(const KAttn *a, DType dt) {
    if (dt != DT_F32 && dt != DT_BF16) return cuda_fail("attention: dtype %d not supported (float32, bfloat16)", (int)dt);
    if (a->D > KC_ATTN_MAX_D || a->Dv > KC_ATTN_MAX_D)
        return cuda_fail("attention: head dims %lld / %lld exceed %d", (long long)a->D, (long long)a->Dv, KC_ATTN_MAX_D);
    if (a->B * a->H > 65535) return cuda_fail("attention: batch * heads = %lld exceeds 65535", (long long)(a->B * a->H));
    return 0;
}

extern "C" int kc_attention_fwd(const KAttn *a, DType dt, const void *q, const void *k, const void *v, void *o,
                                float *lse, void *stream) {
    if (a->B * a->H * a->L == 0) return 0;
    if (attn_check(a, dt)) return -1;
    const dim3 grid((unsigned)((a->L + ATTN_THREADS - 1) / ATTN_THREADS), (unsigned)(a->B * a->H));
    attn_fwd_kernel<<<grid, ATTN_THREADS, 0, kc_stream(stream)>>>(AttnArgs{*a, dt}, q, k, v, o, lse);
    cuda_check_launch();
    return 0;
}

extern "C" int kc_attention_bwd(const KAttn *a, DType dt, const void *q, const void *k, const void *v, const void *o,
                                const float *lse, const void *go, void *gq, void *gk, void *gv, void *stream) {
    if (a->B * a->H * (a->L > a->S ? a->L : a->S) == 0) return 0;
    if (attn_check(a, dt)) return -1;
    const int64_t rows = a->L > a->S ? a->L : a->S;
    const dim3 grid((unsigned)((rows + ATTN_THREADS - 1) / ATTN_THREADS), (unsigned)(a->B * a->H), 2);
    attn_bwd_kernel<<<grid, ATTN_THREADS, 0, kc_stream(stream)>>>(AttnArgs{*a, dt}, q, k, v, o, lse, go, gq, gk, gv);
    cuda_check_launch();
    return 0;
}
