/* layernorm.c: layer norm over the last dim C of contiguous (rows, C),
 * forward and backward. Row statistics are two-pass in double; rows are the
 * parallel tasks. Backward splits the rows into a fixed number of pieces
 * (shape-dependent only, so reproducible across thread counts) whose dw / db
 * partials, in double, are summed in order into gw / gb.
 *
 *   xhat = (x - mean) * rstd,  y = xhat * w + b
 *   gx   = rstd * (dxh - mean(dxh) - xhat * mean(dxh * xhat)),  dxh = gy * w
 *   gw  += sum_rows gy * xhat,  gb += sum_rows gy */
#include <stdlib.h>
#include <math.h>
#include "kernels.h"

#define LANES 8
#define MAX_PIECES 32     /* row pieces for the parallel backward */
#define STACK_PARTIAL 4096 /* doubles of dw/db partials kept on the stack */

#define DEF_LAYERNORM(S, T)                                                 \
    /* mean and 1/sqrt(var + eps) of one row, in double */                  \
    static void ln_stats_##S(const T *restrict x, int64_t C, double eps,    \
                             double *mean, double *rstd) {                  \
        double acc[LANES] = {0}, s = 0, ss = 0;                             \
        int64_t c = 0;                                                      \
        for (; c + LANES <= C; c += LANES)                                  \
            for (int k = 0; k < LANES; k++) acc[k] += x[c + k];             \
        for (int k = 0; k < LANES; k++) s += acc[k], acc[k] = 0;            \
        for (int64_t i = c; i < C; i++) s += x[i];                          \
        const double mu = s / (double)C;                                    \
        for (c = 0; c + LANES <= C; c += LANES)                             \
            for (int k = 0; k < LANES; k++) {                               \
                const double d = x[c + k] - mu;                             \
                acc[k] += d * d;                                            \
            }                                                               \
        for (int k = 0; k < LANES; k++) ss += acc[k];                       \
        for (int64_t i = c; i < C; i++) ss += (x[i] - mu) * (x[i] - mu);    \
        *mean = mu;                                                         \
        *rstd = 1.0 / sqrt(ss / (double)C + eps);                           \
    }                                                                       \
    static void ln_fwd_row_##S(const T *restrict x, const T *restrict w,    \
                               const T *restrict b, int64_t C, double eps,  \
                               T *restrict y, T *mean, T *rstd) {           \
        double mu, rs;                                                      \
        ln_stats_##S(x, C, eps, &mu, &rs);                                  \
        if (mean) *mean = (T)mu;                                            \
        if (rstd) *rstd = (T)rs;                                            \
        const T m = (T)mu, r = (T)rs;                                       \
        if (w && b) for (int64_t c = 0; c < C; c++) y[c] = (x[c] - m) * r * w[c] + b[c]; \
        else if (w) for (int64_t c = 0; c < C; c++) y[c] = (x[c] - m) * r * w[c]; \
        else if (b) for (int64_t c = 0; c < C; c++) y[c] = (x[c] - m) * r + b[c]; \
        else for (int64_t c = 0; c < C; c++) y[c] = (x[c] - m) * r;         \
    }                                                                       \
    void k_layernorm_fwd_##S(const T *x, const T *w, const T *b, int64_t rows, \
                             int64_t C, double eps, T *y, T *mean, T *rstd) { \
        if (C <= 0) return;                                                 \
        KERNEL_FOR(r, rows, rows * C,                                       \
                   ln_fwd_row_##S(x + r * C, w, b, C, eps, y + r * C,       \
                                  mean ? mean + r : NULL, rstd ? rstd + r : NULL)); \
    }                                                                       \
    /* gx of one row; adds gy * xhat to dw and gy to db when dw is set */   \
    static void ln_bwd_row_##S(const T *restrict x, const T *restrict w,    \
                               T mean, T rstd, const T *restrict gy,        \
                               int64_t C, T *restrict gx,                   \
                               double *restrict dw, double *restrict db) {  \
        double sd = 0, sdx = 0;                                             \
        for (int64_t c = 0; c < C; c++) {                                   \
            const T xh = (x[c] - mean) * rstd, d = w ? gy[c] * w[c] : gy[c]; \
            sd += d;                                                        \
            sdx += (double)d * xh;                                          \
        }                                                                   \
        const T md = (T)(sd / (double)C), mdx = (T)(sdx / (double)C);       \
        if (w) {                                                            \
            for (int64_t c = 0; c < C; c++) {                               \
                const T xh = (x[c] - mean) * rstd;                          \
                gx[c] = rstd * (gy[c] * w[c] - md - xh * mdx);              \
            }                                                               \
        } else {                                                            \
            for (int64_t c = 0; c < C; c++) {                               \
                const T xh = (x[c] - mean) * rstd;                          \
                gx[c] = rstd * (gy[c] - md - xh * mdx);                     \
            }                                                               \
        }                                                                   \
        if (!dw) return;                                                    \
        for (int64_t c = 0; c < C; c++) {                                   \
            dw[c] += (double)gy[c] * ((x[c] - mean) * rstd);                \
            db[c] += gy[c];                                                 \
        }                                                                   \
    }                                                                       \
    void k_layernorm_bwd_##S(const T *x, const T *w, const T *mean,         \
                             const T *rstd, const T *gy, int64_t rows,      \
                             int64_t C, T *gx, T *gw, T *gb) {              \
        if (C <= 0 || rows <= 0) return;                                    \
        const int64_t work = rows * C;                                      \
        const int want = gw || gb;                                          \
        int64_t P = work < KERNEL_PAR_MIN ? 1 : rows < MAX_PIECES ? rows : MAX_PIECES; \
        double stack[STACK_PARTIAL], *part = NULL;                          \
        if (want) {                                                         \
            const size_t need = (size_t)(P * 2 * C);                        \
            part = need <= STACK_PARTIAL ? stack : malloc(need * sizeof(double)); \
            if (part) for (size_t i = 0; i < need; i++) part[i] = 0;        \
        }                                                                   \
        KERNEL_FOR(p, P, work, {                                            \
            double *dw = part ? part + p * 2 * C : NULL;                    \
            for (int64_t r = rows * p / P; r < rows * (p + 1) / P; r++)     \
                ln_bwd_row_##S(x + r * C, w, mean[r], rstd[r], gy + r * C, C, \
                               gx + r * C, dw, dw ? dw + C : NULL);         \
        });                                                                 \
        if (want && !part) { /* out of memory: accumulate directly */       \
            for (int64_t r = 0; r < rows; r++)                              \
                for (int64_t c = 0; c < C; c++) {                           \
                    const T g = gy[r * C + c];                              \
                    if (gw) gw[c] += g * ((x[r * C + c] - mean[r]) * rstd[r]); \
                    if (gb) gb[c] += g;                                     \
                }                                                           \
        }                                                                   \
        if (!part) return;                                                  \
        for (int64_t c = 0; c < C; c++) {                                   \
            double sw = 0, sb = 0;                                          \
            for (int64_t p = 0; p < P; p++)                                 \
                sw += part[p * 2 * C + c], sb += part[p * 2 * C + C + c];   \
            if (gw) gw[c] += (T)sw;                                         \
            if (gb) gb[c] += (T)sb;                                         \
        }                                                                   \
        if (part != stack) free(part);                                      \
    }

DEF_LAYERNORM(f32, float)
DEF_LAYERNORM(f64, double)
