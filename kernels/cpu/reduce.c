/* reduce.c: reductions over the middle dim of a contiguous (outer, n, inner)
 * view: sum / mean / prod / max / min, argmax / argmin, variance.
 *
 * Two layouts: inner == 1 reduces contiguous rows (LANES independent
 * accumulators so the loop vectorises without reassociating a single sum);
 * inner > 1 reduces columns, BLK of them at a time, one accumulator per
 * column (contiguous, vectorised over the block). f32 sums accumulate in
 * double. When there are few tasks (rows or column blocks) but long n, n is
 * split into a fixed number of pieces (independent of the thread count, so
 * results are reproducible) whose partials are combined in order. */
#include <stdlib.h>
#include "kernels.h"

#define LANES 16 /* independent accumulators for a contiguous row */
#define BLK 256  /* columns per task when inner > 1 */
#define NOINLINE __attribute__((noinline)) /* one copy for serial + OpenMP */

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* floor(n * s / S) for 0 <= s <= S without forming n * s (n may be near 2^63). */
static inline int64_t split_at(int64_t n, int64_t s, int64_t S) { return n / S * s + n % S * s / S; }

/* Pieces to split n into for `tasks` tasks: 1 unless the call is big and
 * has too few tasks to feed the threads. Depends on shapes only. */
static int64_t red_splits(int64_t tasks, int64_t n, int64_t work) {
    if (work < KERNEL_PAR_MIN || tasks >= 32) return 1;
    int64_t s = min64(64 / tasks, n / 64);
    return s > 1 ? s : 1;
}

/* ---- one reduction op: INIT value, STEP(acc, v), accumulator type A ---- */
#define SUM_STEP(acc, v) ((acc) + (v))
#define PROD_STEP(acc, v) ((acc) * (v))
#define MAX_STEP(acc, v) ((v) > (acc) || (v) != (v) ? (v) : (acc)) /* NaN sticks */
#define MIN_STEP(acc, v) ((v) < (acc) || (v) != (v) ? (v) : (acc))

/* NAME##_run(x, outer, n, inner, out, mean): out = FIN(reduce) where FIN
 * divides by n when mean is set. */
#define DEF_REDUCE(NAME, T, A, INIT, STEP)                                  \
    /* row: n contiguous elements */                                        \
    static inline A NAME##_row(const T *restrict x, int64_t n) {            \
        A acc[LANES];                                                       \
        for (int k = 0; k < LANES; k++) acc[k] = (INIT);                    \
        int64_t i = 0;                                                      \
        for (; i + LANES <= n; i += LANES)                                  \
            for (int k = 0; k < LANES; k++) acc[k] = STEP(acc[k], (A)x[i + k]); \
        A r = (INIT);                                                       \
        for (int k = 0; k < LANES; k++) r = STEP(r, acc[k]);                \
        for (; i < n; i++) r = STEP(r, (A)x[i]);                            \
        return r;                                                           \
    }                                                                       \
    /* cols: w columns of n rows, row stride `inner` */                     \
    static inline void NAME##_cols(const T *restrict x, int64_t n, int64_t inner, \
                                   int64_t w, A *restrict acc) {            \
        for (int64_t k = 0; k < w; k++) acc[k] = (INIT);                    \
        for (int64_t j = 0; j < n; j++) {                                   \
            const T *restrict r = x + j * inner;                            \
            for (int64_t k = 0; k < w; k++) acc[k] = STEP(acc[k], (A)r[k]); \
        }                                                                   \
    }                                                                       \
    /* task t (a row, or a block of BLK columns) over rows [lo, hi) of n */ \
    static NOINLINE void NAME##_task(const T *x, int64_t n, int64_t inner,  \
                                   int64_t nb, int64_t t, int64_t lo,       \
                                   int64_t hi, A *acc) {                    \
        if (inner == 1) {                                                   \
            acc[0] = NAME##_row(x + t * n + lo, hi - lo);                   \
        } else {                                                            \
            const int64_t o = t / nb, c0 = (t % nb) * BLK;                  \
            NAME##_cols(x + (o * n + lo) * inner + c0, hi - lo, inner,      \
                        min64(BLK, inner - c0), acc);                       \
        }                                                                   \
    }                                                                       \
    static inline void NAME##_store(T *out, int64_t n, int64_t inner,       \
                                    int64_t nb, int64_t t, const A *acc,    \
                                    int mean) {                             \
        const int64_t o = inner == 1 ? t : t / nb;                          \
        const int64_t c0 = inner == 1 ? 0 : (t % nb) * BLK;                 \
        const int64_t w = inner == 1 ? 1 : min64(BLK, inner - c0);          \
        T *dst = out + o * inner + c0;                                      \
        for (int64_t k = 0; k < w; k++)                                     \
            dst[k] = mean ? (T)(acc[k] / (A)n) : (T)acc[k];                 \
    }                                                                       \
    static void NAME##_run(const T *x, int64_t outer, int64_t n,            \
                           int64_t inner, T *out, int mean) {               \
        const int64_t nb = inner == 1 ? 1 : (inner + BLK - 1) / BLK;        \
        const int64_t W = inner == 1 ? 1 : BLK, tasks = outer * nb;         \
        const int64_t work = outer * n * inner;                             \
        int64_t S = red_splits(tasks, n, work);                             \
        A *part = S > 1 ? malloc((size_t)(tasks * S * W) * sizeof(A)) : NULL; \
        if (!part) S = 1;                                                   \
        if (S == 1) {                                                       \
            KERNEL_FOR(t, tasks, work, {                                    \
                A acc[BLK];                                                 \
                NAME##_task(x, n, inner, nb, t, 0, n, acc);                 \
                NAME##_store(out, n, inner, nb, t, acc, mean);              \
            });                                                             \
            return;                                                         \
        }                                                                   \
        KERNEL_FOR(u, tasks * S, work, {                                    \
            const int64_t t = u / S, s = u % S;                             \
            NAME##_task(x, n, inner, nb, t, split_at(n, s, S),             \
                        split_at(n, s + 1, S),                              \
                        part + u * W);                                      \
        });                                                                 \
        for (int64_t t = 0; t < tasks; t++) {                               \
            A acc[BLK];                                                     \
            const A *p = part + t * S * W;                                  \
            for (int64_t k = 0; k < W; k++) acc[k] = p[k];                  \
            for (int64_t s = 1; s < S; s++)                                 \
                for (int64_t k = 0; k < W; k++)                             \
                    acc[k] = STEP(acc[k], p[s * W + k]);                    \
            NAME##_store(out, n, inner, nb, t, acc, mean);                  \
        }                                                                   \
        free(part);                                                         \
    }

DEF_REDUCE(sum_f32, float, double, 0, SUM_STEP)
DEF_REDUCE(prod_f32, float, double, 1, PROD_STEP)
DEF_REDUCE(max_f32, float, float, -INFINITY, MAX_STEP)
DEF_REDUCE(min_f32, float, float, INFINITY, MIN_STEP)
DEF_REDUCE(sum_f64, double, double, 0, SUM_STEP)
DEF_REDUCE(prod_f64, double, double, 1, PROD_STEP)
DEF_REDUCE(max_f64, double, double, -INFINITY, MAX_STEP)
DEF_REDUCE(min_f64, double, double, INFINITY, MIN_STEP)
/* int64 sums and products wrap (unsigned accumulators: no UB). */
DEF_REDUCE(sum_i64, int64_t, uint64_t, 0, SUM_STEP)
DEF_REDUCE(prod_i64, int64_t, uint64_t, 1, PROD_STEP)
DEF_REDUCE(max_i64, int64_t, int64_t, INT64_MIN, MAX_STEP)
DEF_REDUCE(min_i64, int64_t, int64_t, INT64_MAX, MIN_STEP)

#define DEF_REDUCE_API(S, T)                                                \
    void k_reduce_##S(KRedOp op, const T *x, int64_t outer, int64_t n,      \
                      int64_t inner, T *out) {                              \
        if (outer <= 0 || inner <= 0) return;                               \
        switch (op) {                                                       \
        case KR_SUM: sum_##S##_run(x, outer, n, inner, out, 0); break;      \
        case KR_MEAN: sum_##S##_run(x, outer, n, inner, out, 1); break;     \
        case KR_PROD: prod_##S##_run(x, outer, n, inner, out, 0); break;    \
        case KR_MAX: max_##S##_run(x, outer, n, inner, out, 0); break;      \
        case KR_MIN: min_##S##_run(x, outer, n, inner, out, 0); break;      \
        default: break;                                                     \
        }                                                                   \
    }

DEF_REDUCE_API(f32, float)
DEF_REDUCE_API(f64, double)

/* int64 MEAN (not in the contract) truncates: signed sum / n. */
void k_reduce_i64(KRedOp op, const int64_t *x, int64_t outer, int64_t n, int64_t inner,
                  int64_t *out) {
    if (outer <= 0 || inner <= 0) return;
    switch (op) {
    case KR_SUM: sum_i64_run(x, outer, n, inner, out, 0); break;
    case KR_MEAN:
        sum_i64_run(x, outer, n, inner, out, 0);
        for (int64_t i = 0; n > 0 && i < outer * inner; i++) out[i] /= n;
        break;
    case KR_PROD: prod_i64_run(x, outer, n, inner, out, 0); break;
    case KR_MAX: max_i64_run(x, outer, n, inner, out, 0); break;
    case KR_MIN: min_i64_run(x, outer, n, inner, out, 0); break;
    default: break;
    }
}

/* ---------------- argmax / argmin: first index; NaN counts as extreme ---- */

/* v beats best under comparison CMP; a NaN beats any number, nothing beats
 * a NaN, so the first NaN wins (as torch). */
#define ARG_BEATS(v, best, CMP) ((v)CMP(best) || ((v) != (v) && (best) == (best)))

#define DEF_ARGREDUCE(S, T)                                                 \
    static void arg_row_##S(int want_max, const T *restrict x, int64_t n,   \
                            T *val, int64_t *idx) {                         \
        T best = x[0];                                                      \
        int64_t bi = 0;                                                     \
        if (want_max) {                                                     \
            for (int64_t i = 1; i < n; i++)                                 \
                if (ARG_BEATS(x[i], best, >)) best = x[i], bi = i;          \
        } else {                                                            \
            for (int64_t i = 1; i < n; i++)                                 \
                if (ARG_BEATS(x[i], best, <)) best = x[i], bi = i;          \
        }                                                                   \
        *val = best;                                                        \
        *idx = bi;                                                          \
    }                                                                       \
    /* w columns; results go straight to vals / idx (contiguous w) */       \
    static void arg_cols_##S(int want_max, const T *restrict x, int64_t n,  \
                             int64_t inner, int64_t w, T *restrict val,     \
                             int64_t *restrict idx) {                       \
        for (int64_t k = 0; k < w; k++) val[k] = x[k], idx[k] = 0;          \
        for (int64_t j = 1; j < n; j++) {                                   \
            const T *restrict r = x + j * inner;                            \
            if (want_max) {                                                 \
                for (int64_t k = 0; k < w; k++)                             \
                    if (ARG_BEATS(r[k], val[k], >)) val[k] = r[k], idx[k] = j; \
            } else {                                                        \
                for (int64_t k = 0; k < w; k++)                             \
                    if (ARG_BEATS(r[k], val[k], <)) val[k] = r[k], idx[k] = j; \
            }                                                               \
        }                                                                   \
    }                                                                       \
    void k_argreduce_##S(int want_max, const T *x, int64_t outer, int64_t n, \
                         int64_t inner, T *vals, int64_t *idx) {            \
        if (n <= 0 || outer <= 0 || inner <= 0) return;                     \
        const int64_t nb = (inner + BLK - 1) / BLK;                         \
        if (inner == 1) {                                                   \
            KERNEL_FOR(o, outer, outer * n,                                 \
                       arg_row_##S(want_max, x + o * n, n, vals + o, idx + o)); \
            return;                                                         \
        }                                                                   \
        KERNEL_FOR(t, outer * nb, outer * n * inner, {                      \
            const int64_t o = t / nb, c0 = (t % nb) * BLK;                  \
            arg_cols_##S(want_max, x + o * n * inner + c0, n, inner,        \
                         min64(BLK, inner - c0), vals + o * inner + c0,     \
                         idx + o * inner + c0);                             \
        });                                                                 \
    }

DEF_ARGREDUCE(f32, float)
DEF_ARGREDUCE(f64, double)
DEF_ARGREDUCE(i64, int64_t)

/* ---------------- variance: two passes (mean, then squared deviations) ---- */

#define DEF_VAR(S, T)                                                       \
    static double var_row_##S(const T *restrict x, int64_t n, double div) { \
        const double mean = sum_##S##_row(x, n) / (double)n;                \
        double acc[LANES] = {0};                                            \
        int64_t i = 0;                                                      \
        for (; i + LANES <= n; i += LANES)                                  \
            for (int k = 0; k < LANES; k++) {                               \
                const double d = (double)x[i + k] - mean;                   \
                acc[k] += d * d;                                            \
            }                                                               \
        double ss = 0;                                                      \
        for (int k = 0; k < LANES; k++) ss += acc[k];                       \
        for (; i < n; i++) ss += ((double)x[i] - mean) * ((double)x[i] - mean); \
        return ss / div;                                                    \
    }                                                                       \
    static void var_cols_##S(const T *restrict x, int64_t n, int64_t inner, \
                             int64_t w, double div, T *restrict out) {      \
        double mean[BLK], ss[BLK];                                          \
        sum_##S##_cols(x, n, inner, w, mean);                               \
        for (int64_t k = 0; k < w; k++) mean[k] /= (double)n, ss[k] = 0;    \
        for (int64_t j = 0; j < n; j++) {                                   \
            const T *restrict r = x + j * inner;                            \
            for (int64_t k = 0; k < w; k++) {                               \
                const double d = (double)r[k] - mean[k];                    \
                ss[k] += d * d;                                             \
            }                                                               \
        }                                                                   \
        for (int64_t k = 0; k < w; k++) out[k] = (T)(ss[k] / div);          \
    }                                                                       \
    void k_var_##S(const T *x, int64_t outer, int64_t n, int64_t inner,     \
                   double correction, T *out) {                             \
        if (outer <= 0 || inner <= 0) return;                               \
        double div = (double)n - correction;                                \
        if (div < 0) div = 0; /* as torch: clamp, giving inf / nan */       \
        const int64_t nb = (inner + BLK - 1) / BLK;                         \
        if (inner == 1) {                                                   \
            KERNEL_FOR(o, outer, outer * n,                                 \
                       out[o] = (T)var_row_##S(x + o * n, n, div));         \
            return;                                                         \
        }                                                                   \
        KERNEL_FOR(t, outer * nb, outer * n * inner, {                      \
            const int64_t o = t / nb, c0 = (t % nb) * BLK;                  \
            var_cols_##S(x + o * n * inner + c0, n, inner,                  \
                         min64(BLK, inner - c0), div, out + o * inner + c0); \
        });                                                                 \
    }

DEF_VAR(f32, float)
DEF_VAR(f64, double)
