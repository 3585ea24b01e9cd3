/* softmax.c: softmax / log_softmax over the middle dim of a contiguous
 * (outer, n, inner) view, their backward, and fused cross-entropy over
 * (N, C) logits. Max-subtracted, so huge logits are fine; sums accumulate in
 * double. Rows (inner == 1) or blocks of BLK columns are the parallel tasks.
 * y may alias x (in-place softmax): each element is read before written.
 *
 * float32 rows (softmax, cross-entropy forward and backward) run on AVX2
 * lanes with vmath.h's exp; a row is read from memory once per pass and a
 * 50257-wide row (200 KB) stays in L2 between its max and exp passes, so the
 * two-pass form costs no extra memory traffic. */
#include <math.h>
#include "kernels.h"
#include "vmath.h"

/* ---- float32 row helpers on 8 lanes ---- */

/* max of a contiguous row; NaN if any element is NaN */
static float row_max_v8(const float *x, int64_t n) {
    __m256 m = _mm256_set1_ps(-INFINITY), nan = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        m = _mm256_max_ps(m, v);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    float r = -INFINITY, buf[8];
    _mm256_storeu_ps(buf, m);
    for (int k = 0; k < 8; k++) r = buf[k] > r ? buf[k] : r;
    for (; i < n; i++) r = x[i] > r || x[i] != x[i] ? x[i] : r;
    return _mm256_movemask_ps(nan) ? NAN : r;
}

/* sum_i e^(x_i - m) accumulated in double; y (may be NULL or x) gets the terms */
static double exp_sum_v8(const float *x, int64_t n, float m, float *y) {
    const __m256 vm = _mm256_set1_ps(m);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = vm_exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        if (y) _mm256_storeu_ps(y + i, e);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double buf[4], s = 0;
    _mm256_storeu_pd(buf, _mm256_add_pd(s0, s1));
    for (int k = 0; k < 4; k++) s += buf[k];
    for (; i < n; i++) {
        const float e = vm_exp_f32(x[i] - m);
        if (y) y[i] = e;
        s += e;
    }
    return s;
}

static double row_sumexp_v8(const float *x, int64_t n, float m) { return exp_sum_v8(x, n, m, NULL); }

/* gx_i = g (e^(x_i - lse) - off) */
static void ce_grad_v8(const float *x, int64_t n, float lse, float off, float g, float *gx) {
    const __m256 vl = _mm256_set1_ps(lse), vo = _mm256_set1_ps(off), vg = _mm256_set1_ps(g);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = vm_exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vl));
        _mm256_storeu_ps(gx + i, _mm256_mul_ps(vg, _mm256_sub_ps(e, vo)));
    }
    for (; i < n; i++) gx[i] = g * (vm_exp_f32(x[i] - lse) - off);
}

/* The row helpers each dtype uses: the lanes above for f32, the generic
 * loops of DEF_SOFTMAX for f64. */
#define ROW_MAX_f32 row_max_v8
#define ROW_SUMEXP_f32 row_sumexp_v8
#define EXP_SUM_f32(x, n, m, y) exp_sum_v8(x, n, m, y)
#define CE_GRAD_f32 ce_grad_v8
#define ROW_MAX_f64 row_max_f64
#define ROW_SUMEXP_f64 row_sumexp_f64
#define EXP_SUM_f64(x, n, m, y) exp_sum_f64(x, n, m, y)
#define CE_GRAD_f64 ce_grad_f64
#define UNUSED_f32 __attribute__((unused))
#define UNUSED_f64

#define BLK 64    /* columns per task when inner > 1 */
#define LANES 8   /* independent accumulators for a row max */

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

#define MAX_NAN(m, v) ((v) > (m) || (v) != (v) ? (v) : (m)) /* NaN sticks */

#define DEF_SOFTMAX(S, T, MS)                                               \
    /* NaN-propagating max of a contiguous row */                           \
    static UNUSED_##S T row_max_##S(const T *x, int64_t n) {                \
        T m[LANES];                                                         \
        for (int k = 0; k < LANES; k++) m[k] = -INFINITY;                   \
        int64_t i = 0;                                                      \
        for (; i + LANES <= n; i += LANES)                                  \
            for (int k = 0; k < LANES; k++) m[k] = MAX_NAN(m[k], x[i + k]); \
        T r = -INFINITY;                                                    \
        for (int k = 0; k < LANES; k++) r = MAX_NAN(r, m[k]);               \
        for (; i < n; i++) r = MAX_NAN(r, x[i]);                            \
        return r;                                                           \
    }                                                                       \
    /* sum_i exp(x_i - m) */                                                \
    static UNUSED_##S double exp_sum_##S(const T *x, int64_t n, T m, T *y) { \
        double s = 0;                                                       \
        for (int64_t i = 0; i < n; i++) {                                   \
            const T e = exp##MS(x[i] - m);                                  \
            if (y) y[i] = e;                                                \
            s += e;                                                         \
        }                                                                   \
        return s;                                                           \
    }                                                                       \
    static UNUSED_##S double row_sumexp_##S(const T *x, int64_t n, T m) {   \
        return exp_sum_##S(x, n, m, NULL);                                  \
    }                                                                       \
    static void softmax_row_##S(int is_log, const T *x, int64_t n, T *y) {  \
        const T m = ROW_MAX_##S(x, n);                                      \
        if (is_log) {                                                       \
            const T ls = (T)log(ROW_SUMEXP_##S(x, n, m));                   \
            for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) - ls;         \
            return;                                                         \
        }                                                                   \
        const double s = EXP_SUM_##S(x, n, m, y);                           \
        const T r = (T)(1.0 / s);                                           \
        for (int64_t i = 0; i < n; i++) y[i] *= r;                          \
    }                                                                       \
    /* w columns of n rows with row stride `inner` */                       \
    static void softmax_cols_##S(int is_log, const T *x, int64_t n,         \
                                 int64_t inner, int64_t w, T *y) {          \
        T m[BLK];                                                           \
        double s[BLK];                                                      \
        for (int64_t k = 0; k < w; k++) m[k] = -INFINITY, s[k] = 0;         \
        for (int64_t j = 0; j < n; j++)                                     \
            for (int64_t k = 0; k < w; k++) m[k] = MAX_NAN(m[k], x[j * inner + k]); \
        for (int64_t j = 0; j < n; j++)                                     \
            for (int64_t k = 0; k < w; k++) {                               \
                const T e = exp##MS(x[j * inner + k] - m[k]);               \
                if (!is_log) y[j * inner + k] = e;                          \
                s[k] += e;                                                  \
            }                                                               \
        if (is_log) {                                                       \
            T ls[BLK];                                                      \
            for (int64_t k = 0; k < w; k++) ls[k] = (T)log(s[k]);           \
            for (int64_t j = 0; j < n; j++)                                 \
                for (int64_t k = 0; k < w; k++)                             \
                    y[j * inner + k] = (x[j * inner + k] - m[k]) - ls[k];   \
        } else {                                                            \
            T r[BLK];                                                       \
            for (int64_t k = 0; k < w; k++) r[k] = (T)(1.0 / s[k]);         \
            for (int64_t j = 0; j < n; j++)                                 \
                for (int64_t k = 0; k < w; k++) y[j * inner + k] *= r[k];   \
        }                                                                   \
    }                                                                       \
    /* softmax: gx = y (gy - sum gy y); log: gx = gy - exp(y) sum gy */     \
    static void softmax_bwd_row_##S(int is_log, const T *y, const T *gy,    \
                                    int64_t n, T *gx) {                     \
        double d = 0;                                                       \
        if (is_log) {                                                       \
            for (int64_t i = 0; i < n; i++) d += gy[i];                     \
            const T dt = (T)d;                                              \
            for (int64_t i = 0; i < n; i++) gx[i] = gy[i] - exp##MS(y[i]) * dt; \
        } else {                                                            \
            for (int64_t i = 0; i < n; i++) d += (double)gy[i] * y[i];      \
            const T dt = (T)d;                                              \
            for (int64_t i = 0; i < n; i++) gx[i] = y[i] * (gy[i] - dt);    \
        }                                                                   \
    }                                                                       \
    static void softmax_bwd_cols_##S(int is_log, const T *y, const T *gy,   \
                                     int64_t n, int64_t inner, int64_t w,   \
                                     T *gx) {                               \
        double d[BLK];                                                      \
        T dt[BLK];                                                          \
        for (int64_t k = 0; k < w; k++) d[k] = 0;                           \
        for (int64_t j = 0; j < n; j++) {                                   \
            const T *yj = y + j * inner, *gj = gy + j * inner;              \
            if (is_log)                                                     \
                for (int64_t k = 0; k < w; k++) d[k] += gj[k];              \
            else                                                            \
                for (int64_t k = 0; k < w; k++) d[k] += (double)gj[k] * yj[k]; \
        }                                                                   \
        for (int64_t k = 0; k < w; k++) dt[k] = (T)d[k];                    \
        for (int64_t j = 0; j < n; j++) {                                   \
            const T *yj = y + j * inner, *gj = gy + j * inner;              \
            T *oj = gx + j * inner;                                         \
            if (is_log)                                                     \
                for (int64_t k = 0; k < w; k++) oj[k] = gj[k] - exp##MS(yj[k]) * dt[k]; \
            else                                                            \
                for (int64_t k = 0; k < w; k++) oj[k] = yj[k] * (gj[k] - dt[k]); \
        }                                                                   \
    }                                                                       \
    void k_softmax_##S(int is_log, const T *x, int64_t outer, int64_t n,    \
                       int64_t inner, T *y) {                               \
        if (n <= 0 || outer <= 0 || inner <= 0) return;                     \
        if (inner == 1) {                                                   \
            KERNEL_FOR(o, outer, outer * n, softmax_row_##S(is_log, x + o * n, n, y + o * n)); \
            return;                                                         \
        }                                                                   \
        const int64_t nb = (inner + BLK - 1) / BLK;                         \
        KERNEL_FOR(t, outer * nb, outer * n * inner, {                      \
            const int64_t off = (t / nb) * n * inner + (t % nb) * BLK;      \
            softmax_cols_##S(is_log, x + off, n, inner,                     \
                             min64(BLK, inner - (t % nb) * BLK), y + off);  \
        });                                                                 \
    }                                                                       \
    void k_softmax_backward_##S(int is_log, const T *y, const T *gy,        \
                                int64_t outer, int64_t n, int64_t inner,    \
                                T *gx) {                                    \
        if (n <= 0 || outer <= 0 || inner <= 0) return;                     \
        if (inner == 1) {                                                   \
            KERNEL_FOR(o, outer, outer * n,                                 \
                       softmax_bwd_row_##S(is_log, y + o * n, gy + o * n, n, gx + o * n)); \
            return;                                                         \
        }                                                                   \
        const int64_t nb = (inner + BLK - 1) / BLK;                         \
        KERNEL_FOR(t, outer * nb, outer * n * inner, {                      \
            const int64_t off = (t / nb) * n * inner + (t % nb) * BLK;      \
            softmax_bwd_cols_##S(is_log, y + off, gy + off, n, inner,       \
                                 min64(BLK, inner - (t % nb) * BLK), gx + off); \
        });                                                                 \
    }

DEF_SOFTMAX(f32, float, f)
DEF_SOFTMAX(f64, double, )

/* ---------------- cross-entropy over (N, C) logits ---------------- */

/* First row whose target is neither in [0, C) nor ignore_index, or -1. */
static int64_t ce_bad_target(const int64_t *target, int64_t N, int64_t C, int64_t ignore) {
    for (int64_t i = 0; i < N; i++)
        if (target[i] != ignore && (target[i] < 0 || target[i] >= C)) return i;
    return -1;
}

#define DEF_CROSS_ENTROPY(S, T, MS)                                         \
    /* loss of one row; *lse gets log-sum-exp of the row */                 \
    static double ce_row_##S(const T *x, int64_t C, int64_t t, int ignored, \
                             double ls, T *lse) {                           \
        const T m = ROW_MAX_##S(x, C);                                      \
        const double l = (double)m + log(ROW_SUMEXP_##S(x, C, m));          \
        *lse = (T)l;                                                        \
        if (ignored) return 0;                                              \
        double loss = (1 - ls) * (l - (double)x[t]);                        \
        if (ls != 0) {                                                      \
            double sx = 0;                                                  \
            for (int64_t c = 0; c < C; c++) sx += x[c];                     \
            loss += ls * (l - sx / (double)C);                              \
        }                                                                   \
        return loss;                                                        \
    }                                                                       \
    int64_t k_cross_entropy_fwd_##S(const T *x, int64_t N, int64_t C,       \
                                    const int64_t *target, int64_t ignore_index, \
                                    double label_smoothing, T *loss, T *lse) { \
        const int64_t bad = ce_bad_target(target, N, C, ignore_index);      \
        if (bad >= 0) return bad;                                           \
        if (C <= 0) return -1;                                              \
        KERNEL_FOR(i, N, N * C, {                                           \
            const int ign = target[i] == ignore_index;                      \
            loss[i] = (T)ce_row_##S(x + i * C, C, ign ? 0 : target[i], ign, \
                                    label_smoothing, lse + i);              \
        });                                                                 \
        return -1;                                                          \
    }                                                                       \
    /* gx_c = g (softmax_c - (1-ls) [c == t] - ls / C) */                   \
    static UNUSED_##S void ce_grad_##S(const T *x, int64_t C, T lse, T off, T g, T *gx) { \
        for (int64_t c = 0; c < C; c++) gx[c] = g * (exp##MS(x[c] - lse) - off); \
    }                                                                       \
    static void ce_bwd_row_##S(const T *x, T lse, int64_t C, int64_t t,     \
                               double ls, T g, T *gx) {                     \
        CE_GRAD_##S(x, C, lse, (T)(ls / (double)C), g, gx);                 \
        if (t >= 0 && t < C) gx[t] -= g * (T)(1 - ls);                      \
    }                                                                       \
    void k_cross_entropy_bwd_##S(const T *x, const T *lse, int64_t N, int64_t C, \
                                 const int64_t *target, int64_t ignore_index, \
                                 double label_smoothing, const T *g, T *gx) { \
        KERNEL_FOR(i, N, N * C, {                                           \
            if (target[i] == ignore_index) {                                \
                for (int64_t c = 0; c < C; c++) gx[i * C + c] = 0;          \
            } else {                                                        \
                ce_bwd_row_##S(x + i * C, lse[i], C, target[i],             \
                               label_smoothing, g[i], gx + i * C);          \
            }                                                               \
        });                                                                 \
    }

DEF_CROSS_ENTROPY(f32, float, f)
DEF_CROSS_ENTROPY(f64, double, )
