/* attention.c: fused scaled-dot-product attention, forward and backward,
 * flash-style: the (L, S) score matrix is never formed. Each task takes a
 * block of BR query rows and walks the keys in chunks of at most KC
 * (causal: only up to the block's last row, so the masked upper triangle
 * is skipped, not computed and thrown away), keeping a running row max m,
 * sum l and unnormalised output acc (online softmax):
 *
 *   s = scale q k^T (chunk);  m' = max(m, max s);  p = e^(s - m')
 *   l = l e^(m - m') + sum p;  acc = acc e^(m - m') + p v;  ...  o = acc / l
 *
 * and saves lse = m + log l per row for backward, which recomputes
 * p = e^(s - lse) chunk by chunk (flash-attention 2):
 *
 *   dv += p^T do;  dp = do v^T;  ds = p (dp - rowsum(do o)) scale
 *   dq += ds k;    dk += ds^T q
 *
 * The tile products go through k_gemm_* (oneDNN / OpenBLAS), so this file
 * holds no GEMM of its own, only the softmax bookkeeping between them.
 * Causal masking is top-left aligned (query i sees keys 0..i), as
 * PyTorch's is_causal. Forward tasks are (batch-head, query block) pairs,
 * backward tasks whole batch-heads (their dk / dv accumulate over all query
 * blocks), spread over the OpenMP team for f32; f64 (for gradient checks)
 * runs serially. Scratch is one malloc per thread per call. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"
#include "vmath.h"

#define BR 64  /* query rows per block */
#define KC 256 /* keys per chunk, at most */

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Offset of (batch b, head h) in a tensor with batch/head strides st[0..1]. */
static inline int64_t bh_off(const int64_t st[3], const KAttn *a, int64_t bh) {
    return (bh / a->H) * st[0] + (bh % a->H) * st[1];
}

/* ---- row helpers: p[j] = e^(p[j] - m), returns the sum; max of a row ---- */

static float exp_sub_sum_f32(float *p, int64_t n, float m) {
    const __m256 vm = _mm256_set1_ps(m);
    __m256 acc = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 e = vm_exp_ps(_mm256_sub_ps(_mm256_loadu_ps(p + j), vm));
        _mm256_storeu_ps(p + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    float s = vm_hsum_ps(acc);
    for (; j < n; j++) s += p[j] = vm_exp_f32(p[j] - m);
    return s;
}

static double exp_sub_sum_f64(double *p, int64_t n, double m) {
    double s = 0;
    for (int64_t j = 0; j < n; j++) s += p[j] = exp(p[j] - m);
    return s;
}

static float row_max_f32(const float *p, int64_t n) {
    __m256 mv = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(p + j));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float m = _mm_cvtss_f32(h);
    for (; j < n; j++) m = p[j] > m ? p[j] : m;
    return m;
}

static double row_max_f64(const double *p, int64_t n) {
    double m = -INFINITY;
    for (int64_t j = 0; j < n; j++) m = p[j] > m ? p[j] : m;
    return m;
}

static inline double exp_f64(double x) { return exp(x); }
static inline float exp_f32(float x) { return vm_exp_f32(x); }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline double log_f64(double x) { return log(x); }
static inline float log_f32(float x) { return logf(x); }

#define DEF_ATTENTION(X, T)                                                 \
    /* causal: -inf where key j0 + j is past query i0 + r */                \
    static void mask_##X(T *s, int64_t rows, int64_t kc, int64_t i0, int64_t j0) { \
        for (int64_t r = 0; r < rows; r++)                                  \
            for (int64_t j = max64(0, i0 + r + 1 - j0); j < kc; j++)        \
                s[r * kc + j] = -INFINITY;                                  \
    }                                                                       \
    /* forward of query rows [i0, i0 + rows) of batch-head bh */            \
    static int fwd_block_##X(const KAttn *a, const T *q, const T *k, const T *v, \
                             T *o, T *lse, int64_t bh, int64_t i0, T *sbuf, \
                             T *acc, T *m, T *l) {                          \
        const int64_t rows = min64(BR, a->L - i0), D = a->D, Dv = a->Dv;    \
        const T *qb = q + bh_off(a->sq, a, bh) + i0 * a->sq[2];             \
        const T *kb = k + bh_off(a->sk, a, bh), *vb = v + bh_off(a->sv, a, bh); \
        const int64_t send = a->causal ? min64(a->S, i0 + rows) : a->S;     \
        for (int64_t r = 0; r < rows; r++) m[r] = -INFINITY, l[r] = 0;      \
        memset(acc, 0, sizeof(T) * (size_t)(rows * Dv));                    \
        for (int64_t j0 = 0; j0 < send; j0 += KC) {                         \
            const int64_t kc = min64(KC, send - j0);                        \
            if (k_gemm_##X(0, 1, rows, kc, D, (T)a->scale, qb, a->sq[2],   \
                           kb + j0 * a->sk[2], a->sk[2], 0, sbuf, kc))      \
                return 1;                                                   \
            if (a->causal && j0 + kc > i0 + 1) mask_##X(sbuf, rows, kc, i0, j0); \
            for (int64_t r = 0; r < rows; r++) {                            \
                T *p = sbuf + r * kc;                                       \
                const T mx = row_max_##X(p, kc), mn = mx > m[r] ? mx : m[r]; \
                const T corr = m[r] == -INFINITY ? 0 : exp_##X(m[r] - mn);  \
                l[r] = l[r] * corr + exp_sub_sum_##X(p, kc, mn);            \
                m[r] = mn;                                                  \
                if (corr != 1)                                              \
                    for (int64_t d = 0; d < Dv; d++) acc[r * Dv + d] *= corr; \
            }                                                               \
            if (k_gemm_##X(0, 0, rows, Dv, kc, 1, sbuf, kc, vb + j0 * a->sv[2], \
                           a->sv[2], 1, acc, Dv))                           \
                return 1;                                                   \
        }                                                                   \
        T *ob = o + bh_off(a->so, a, bh) + i0 * a->so[2];                   \
        for (int64_t r = 0; r < rows; r++) {                                \
            const T inv = (T)1 / l[r];                                      \
            for (int64_t d = 0; d < Dv; d++) ob[r * a->so[2] + d] = acc[r * Dv + d] * inv; \
            lse[bh * a->L + i0 + r] = m[r] + log_##X(l[r]);                 \
        }                                                                   \
        return 0;                                                           \
    }                                                                       \
    /* backward of batch-head bh: dq, dk, dv overwritten */                 \
    static int bwd_head_##X(const KAttn *a, const T *q, const T *k, const T *v, \
                            const T *o, const T *lse, const T *go, T *gq,   \
                            T *gk, T *gv, int64_t bh, T *pbuf, T *dpbuf,    \
                            T *di) {                                        \
        const int64_t D = a->D, Dv = a->Dv;                                 \
        const T sc = (T)a->scale;                                           \
        const T *kb = k + bh_off(a->sk, a, bh), *vb = v + bh_off(a->sv, a, bh); \
        T *gkb = gk + bh_off(a->sgk, a, bh), *gvb = gv + bh_off(a->sgv, a, bh); \
        for (int64_t j = 0; j < a->S; j++) {                                \
            memset(gkb + j * a->sgk[2], 0, sizeof(T) * (size_t)D);          \
            memset(gvb + j * a->sgv[2], 0, sizeof(T) * (size_t)Dv);         \
        }                                                                   \
        for (int64_t i0 = 0; i0 < a->L; i0 += BR) {                         \
            const int64_t rows = min64(BR, a->L - i0);                      \
            const T *qb = q + bh_off(a->sq, a, bh) + i0 * a->sq[2];         \
            const T *ob = o + bh_off(a->so, a, bh) + i0 * a->so[2];         \
            const T *gob = go + bh_off(a->sgo, a, bh) + i0 * a->sgo[2];     \
            const T *lb = lse + bh * a->L + i0;                             \
            T *gqb = gq + bh_off(a->sgq, a, bh) + i0 * a->sgq[2];           \
            for (int64_t r = 0; r < rows; r++) {                            \
                T s = 0;                                                    \
                for (int64_t d = 0; d < Dv; d++)                            \
                    s += gob[r * a->sgo[2] + d] * ob[r * a->so[2] + d];     \
                di[r] = s;                                                  \
                memset(gqb + r * a->sgq[2], 0, sizeof(T) * (size_t)D);      \
            }                                                               \
            const int64_t send = a->causal ? min64(a->S, i0 + rows) : a->S; \
            for (int64_t j0 = 0; j0 < send; j0 += KC) {                     \
                const int64_t kc = min64(KC, send - j0);                    \
                const T *kj = kb + j0 * a->sk[2], *vj = vb + j0 * a->sv[2]; \
                int rc = k_gemm_##X(0, 1, rows, kc, D, sc, qb, a->sq[2], kj, a->sk[2], 0, pbuf, kc); \
                if (a->causal && j0 + kc > i0 + 1) mask_##X(pbuf, rows, kc, i0, j0); \
                for (int64_t r = 0; r < rows; r++)                          \
                    exp_sub_sum_##X(pbuf + r * kc, kc, lb[r]);              \
                rc |= k_gemm_##X(1, 0, kc, Dv, rows, 1, pbuf, kc, gob, a->sgo[2], 1, \
                                 gvb + j0 * a->sgv[2], a->sgv[2]);          \
                rc |= k_gemm_##X(0, 1, rows, kc, Dv, 1, gob, a->sgo[2], vj, a->sv[2], 0, dpbuf, kc); \
                if (rc) return 1;                                           \
                for (int64_t r = 0; r < rows; r++)                          \
                    for (int64_t j = 0; j < kc; j++)                        \
                        dpbuf[r * kc + j] = pbuf[r * kc + j] * (dpbuf[r * kc + j] - di[r]) * sc; \
                rc |= k_gemm_##X(0, 0, rows, D, kc, 1, dpbuf, kc, kj, a->sk[2], 1, gqb, a->sgq[2]); \
                rc |= k_gemm_##X(1, 0, kc, D, rows, 1, dpbuf, kc, qb, a->sq[2], 1, \
                                 gkb + j0 * a->sgk[2], a->sgk[2]);          \
                if (rc) return 1;                                           \
            }                                                               \
        }                                                                   \
        return 0;                                                           \
    }

DEF_ATTENTION(f32, float)
DEF_ATTENTION(f64, double)

/* Threads for this call: the OpenMP team for f32 with enough work, else 1
 * (f64 is for gradient checks, whose GEMM library has its own pool). */
static int attn_threads(const KAttn *a, int f32, int64_t tasks) {
    const int64_t work = a->B * a->H * a->L * (a->causal ? (a->S + 1) / 2 : a->S) * (a->D + a->Dv);
    if (!f32 || tasks < 2 || work < KERNEL_PAR_MIN * 8 || omp_in_parallel()) return 1;
    const int nt = omp_get_max_threads();
    return nt < tasks ? nt : (int)tasks;
}

#define DEF_ENTRY(X, T, IS_F32)                                             \
    int k_attention_fwd_##X(const KAttn *a, const T *q, const T *k, const T *v, \
                            T *o, T *lse) {                                 \
        const int64_t nqb = (a->L + BR - 1) / BR, tasks = a->B * a->H * nqb; \
        const int64_t kmax = min64(KC, a->S);                               \
        int rc = 0, nt = attn_threads(a, IS_F32, tasks);                    \
        if (tasks == 0) return 0;                                           \
        _Pragma("omp parallel num_threads(nt) if (nt > 1) reduction(| : rc)") \
        {                                                                   \
            T *sbuf = malloc(sizeof(T) * (size_t)(BR * kmax + BR * a->Dv + 2 * BR)); \
            if (!sbuf) rc = 1;                                              \
            else {                                                          \
                T *acc = sbuf + BR * kmax, *m = acc + BR * a->Dv, *l = m + BR; \
                _Pragma("omp for schedule(dynamic, 1)")                     \
                for (int64_t t = 0; t < tasks; t++)                         \
                    rc |= fwd_block_##X(a, q, k, v, o, lse, t / nqb,        \
                                        (t % nqb) * BR, sbuf, acc, m, l);   \
            }                                                               \
            free(sbuf);                                                     \
        }                                                                   \
        return rc;                                                          \
    }                                                                       \
    int k_attention_bwd_##X(const KAttn *a, const T *q, const T *k, const T *v, \
                            const T *o, const T *lse, const T *go, T *gq,   \
                            T *gk, T *gv) {                                 \
        const int64_t tasks = a->B * a->H, kmax = min64(KC, a->S);          \
        int rc = 0, nt = attn_threads(a, IS_F32, tasks);                    \
        if (tasks == 0) return 0;                                           \
        _Pragma("omp parallel num_threads(nt) if (nt > 1) reduction(| : rc)") \
        {                                                                   \
            T *pbuf = malloc(sizeof(T) * (size_t)(2 * BR * kmax + BR));     \
            if (!pbuf) rc = 1;                                              \
            else {                                                          \
                _Pragma("omp for schedule(dynamic, 1)")                     \
                for (int64_t t = 0; t < tasks; t++)                         \
                    rc |= bwd_head_##X(a, q, k, v, o, lse, go, gq, gk, gv, t, pbuf, \
                                       pbuf + BR * kmax, pbuf + 2 * BR * kmax); \
            }                                                               \
            free(pbuf);                                                     \
        }                                                                   \
        return rc;                                                          \
    }

DEF_ENTRY(f32, float, 1)
DEF_ENTRY(f64, double, 0)
