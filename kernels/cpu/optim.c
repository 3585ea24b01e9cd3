/* optim.c: optimizer updates over flat f32 / f64 buffers (PyTorch's
 * formulas, operation by operation, so results track torch's to the bit in
 * most elements), and the sum of |x|^p that gradient-norm clipping needs.
 * fma(a, b, c) = a b + c rounded once: torch's add(x, alpha=) and addcmul
 * kernels fuse exactly these, its addcdiv does not.
 *
 * SGD, per element (momentum buffer b):
 *   d = maximize ? -g : g;  d = fma(p, wd, d)                   (wd != 0)
 *   b = first step ? d : fma(d, 1 - dampening, b momentum)      (momentum != 0)
 *   d = nesterov ? fma(b, momentum, d) : b                      (momentum != 0)
 *   p = fma(d, -lr, p)
 * Adam / AdamW, per element:
 *   d = maximize ? -g : g;  Adam: d = fma(p, wd, d);  AdamW: p = p (1 - lr wd)
 *   m = fma(d, 1 - b1, m b1);  v = fma((1 - b2) d, d, v b2);  amsgrad: vmax = max(vmax, v)
 *   p = p + (-lr / bc1) m / (sqrt(v or vmax) / sqrt(bc2) + eps),  bcK = 1 - bK^step
 * Scalars are formed in double and rounded once to the buffer's type; the
 * elementwise work runs in that type. Buffers must not overlap. Work is cut
 * into fixed chunks (OpenMP above KERNEL_PAR_MIN), so results never depend
 * on the thread count. */
#include <math.h>
#include "simd.h"
#include "kernels.h"

#define CHUNK 8192        /* elements per update task */
#define NORM_CHUNK 65536  /* elements per partial norm, at least */
#define LANES 16          /* independent accumulators: vectorises without reassociating */

static inline int64_t chunk_len(int64_t n, int64_t lo, int64_t chunk) { return n - lo < chunk ? n - lo : chunk; }

/* ================================ SGD ================================ */

#define DEF_SGD(SUF, T, FMA)                                                                     \
    static void sgd_run_##SUF(int64_t n, T *restrict p, const T *restrict g, T *restrict buf,   \
                              int init, const KSgdArgs *a) {                                     \
        const T wd = (T)a->weight_decay, mom = (T)a->momentum, damp1 = (T)(1 - a->dampening);   \
        const T neg_lr = (T)(-a->lr);                                                            \
        for (int64_t i = 0; i < n; i++) {                                                        \
            T d = a->maximize ? -g[i] : g[i];                                                    \
            if (a->weight_decay != 0) d = FMA(p[i], wd, d);                                      \
            if (buf) {                                                                           \
                const T b = init ? d : FMA(d, damp1, buf[i] * mom);                              \
                buf[i] = b;                                                                      \
                d = a->nesterov ? FMA(b, mom, d) : b;                                            \
            }                                                                                    \
            p[i] = FMA(d, neg_lr, p[i]);                                                         \
        }                                                                                        \
    }                                                                                            \
    void k_sgd_##SUF(int64_t n, T *p, const T *g, T *buf, int buf_init, const KSgdArgs *a) {    \
        if (n <= 0) return;                                                                      \
        T *b = a->momentum != 0 ? buf : NULL;                                                    \
        KERNEL_FOR(c, (n + CHUNK - 1) / CHUNK, n, {                                              \
            const int64_t lo = c * CHUNK;                                                        \
            sgd_run_##SUF(chunk_len(n, lo, CHUNK), p + lo, g + lo, b ? b + lo : NULL, buf_init, a); \
        });                                                                                      \
    }

DEF_SGD(f32, float, fmaf)
DEF_SGD(f64, double, fma)

/* ============================ Adam / AdamW ============================ */

/* Per-call constants in the buffer's type. gsign -1 for maximize; l2 is
 * Adam's weight decay on the gradient (0 for AdamW), decay AdamW's factor
 * on the parameter (1 for Adam). */
#define DEF_ADAM_CONSTS(SUF, T, SQRT, FMA)                                                       \
    typedef struct {                                                                             \
        T gsign, l2, decay, b1, one_b1, b2, one_b2, neg_step_size, sqrt_bc2, eps;                \
    } AdamConsts_##SUF;                                                                          \
    static AdamConsts_##SUF adam_consts_##SUF(const KAdamArgs *a) {                              \
        const double bc1 = 1 - pow(a->beta1, (double)a->step), bc2 = 1 - pow(a->beta2, (double)a->step); \
        return (AdamConsts_##SUF){                                                               \
            .gsign = (T)(a->maximize ? -1 : 1),                                                  \
            .l2 = (T)(a->decoupled ? 0 : a->weight_decay),                                       \
            .decay = (T)(a->decoupled ? 1 - a->lr * a->weight_decay : 1),                        \
            .b1 = (T)a->beta1, .one_b1 = (T)(1 - a->beta1),                                      \
            .b2 = (T)a->beta2, .one_b2 = (T)(1 - a->beta2),                                      \
            .neg_step_size = (T)(-(a->lr / bc1)), .sqrt_bc2 = (T)sqrt(bc2), .eps = (T)a->eps,    \
        };                                                                                       \
    }                                                                                            \
    /* One element; the f32 AVX loop does the same operations in the same order. */              \
    static inline void adam_one_##SUF(T *p, T g, T *m, T *v, T *vmax, const AdamConsts_##SUF *c) { \
        const T pi = *p * c->decay;                                                              \
        g = g * c->gsign;                                                                        \
        if (c->l2 != 0) g = FMA(*p, c->l2, g);                                                   \
        const T mi = FMA(g, c->one_b1, *m * c->b1);                                              \
        const T vi = FMA(c->one_b2 * g, g, *v * c->b2);                                          \
        *m = mi;                                                                                 \
        *v = vi;                                                                                 \
        T vd = vi;                                                                               \
        if (vmax) *vmax = vd = *vmax > vi ? *vmax : vi;                                          \
        *p = pi + c->neg_step_size * mi / (SQRT(vd) / c->sqrt_bc2 + c->eps);                     \
    }

DEF_ADAM_CONSTS(f32, float, sqrtf, fmaf)
DEF_ADAM_CONSTS(f64, double, sqrt, fma)

/* Explicit AVX, so the vector loop does exactly adam_one's operations. */
static void adam_run_f32(int64_t n, float *restrict p, const float *restrict g, float *restrict m,
                         float *restrict v, float *restrict vmax, const AdamConsts_f32 *c) {
    const __m256 gsign = _mm256_set1_ps(c->gsign), l2 = _mm256_set1_ps(c->l2);
    const __m256 b1 = _mm256_set1_ps(c->b1), ob1 = _mm256_set1_ps(c->one_b1);
    const __m256 b2 = _mm256_set1_ps(c->b2), ob2 = _mm256_set1_ps(c->one_b2);
    const __m256 decay = _mm256_set1_ps(c->decay), nstep = _mm256_set1_ps(c->neg_step_size);
    const __m256 sbc2 = _mm256_set1_ps(c->sqrt_bc2), eps = _mm256_set1_ps(c->eps);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 p0 = _mm256_loadu_ps(p + i), pi = _mm256_mul_ps(p0, decay);
        __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), gsign);
        if (c->l2 != 0) gi = _mm256_fmadd_ps(p0, l2, gi);
        const __m256 mi = _mm256_fmadd_ps(gi, ob1, _mm256_mul_ps(_mm256_loadu_ps(m + i), b1));
        const __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(ob2, gi), gi, _mm256_mul_ps(_mm256_loadu_ps(v + i), b2));
        __m256 vd = vi;
        if (vmax) {
            vd = _mm256_max_ps(_mm256_loadu_ps(vmax + i), vi); /* a > b ? a : b, as adam_one */
            _mm256_storeu_ps(vmax + i, vd);
        }
        const __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vd), sbc2), eps);
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        _mm256_storeu_ps(p + i, _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(nstep, mi), den)));
    }
    for (; i < n; i++) adam_one_f32(p + i, g[i], m + i, v + i, vmax ? vmax + i : NULL, c);
}

static void adam_run_f64(int64_t n, double *restrict p, const double *restrict g, double *restrict m,
                         double *restrict v, double *restrict vmax, const AdamConsts_f64 *c) {
    for (int64_t i = 0; i < n; i++) adam_one_f64(p + i, g[i], m + i, v + i, vmax ? vmax + i : NULL, c);
}

#define DEF_ADAM(SUF, T)                                                                         \
    void k_adam_##SUF(int64_t n, T *p, const T *g, T *m, T *v, T *vmax, const KAdamArgs *a) {   \
        if (n <= 0) return;                                                                      \
        const AdamConsts_##SUF k = adam_consts_##SUF(a);                                         \
        KERNEL_FOR(c, (n + CHUNK - 1) / CHUNK, n, {                                              \
            const int64_t lo = c * CHUNK;                                                        \
            adam_run_##SUF(chunk_len(n, lo, CHUNK), p + lo, g + lo, m + lo, v + lo,              \
                           vmax ? vmax + lo : NULL, &k);                                         \
        });                                                                                      \
    }

DEF_ADAM(f32, float)
DEF_ADAM(f64, double)

void k_adamw_f32(int64_t n, float *p, const float *g, float *m, float *v, double lr, double beta1, double beta2,
                 double eps, double weight_decay, int64_t step) {
    const KAdamArgs a = {.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay,
                         .decoupled = 1, .maximize = 0, .step = step};
    k_adam_f32(n, p, g, m, v, NULL, &a);
}

/* ============================ norms ============================ */

#define NORM_PARTS 256 /* at most this many partial sums, each of >= NORM_CHUNK elements */

/* sum |x|^p over one contiguous run, LANES accumulators in double; p = INF
 * gives max |x|, p = -INF min |x|, p = 0 the count of nonzeros. The
 * partition into parts depends on n only, so the result does not depend on
 * the thread count. */
#define DEF_NORM_RUN(SUF, T)                                                                     \
    static double norm_run_##SUF(int64_t n, const T *restrict x, double p) {                     \
        double acc[LANES] = {0};                                                                 \
        int64_t i = 0, nv = n - n % LANES;                                                       \
        if (p == 2) {                                                                            \
            for (; i < nv; i += LANES)                                                           \
                for (int k = 0; k < LANES; k++) acc[k] += (double)x[i + k] * (double)x[i + k];   \
        } else if (p == 1) {                                                                     \
            for (; i < nv; i += LANES)                                                           \
                for (int k = 0; k < LANES; k++) acc[k] += fabs((double)x[i + k]);                \
        }                                                                                        \
        double s = knorm_identity(p);                                                           \
        if (p == 1 || p == 2)                                                                    \
            for (int k = 0; k < LANES; k++) s += acc[k];                                         \
        for (; i < n; i++) {                                                                     \
            const double a = fabs((double)x[i]);                                                 \
            s = knorm_combine(s, p == 0 ? a != 0 : p == 1 || isinf(p) ? a : p == 2 ? a * a : pow(a, p), p); \
        }                                                                                        \
        return s;                                                                                \
    }                                                                                            \
    double k_norm_pow_##SUF(int64_t n, const T *x, double p) {                                   \
        if (n <= 0) return knorm_identity(p);                                                   \
        int64_t parts = (n + NORM_CHUNK - 1) / NORM_CHUNK;                                       \
        if (parts > NORM_PARTS) parts = NORM_PARTS;                                              \
        const int64_t len = (n + parts - 1) / parts;                                             \
        double part[NORM_PARTS], s = knorm_identity(p);                                         \
        KERNEL_FOR(c, parts, n, part[c] = norm_run_##SUF(chunk_len(n, c * len, len), x + c * len, p)); \
        for (int64_t c = 0; c < parts; c++) s = knorm_combine(s, part[c], p);                  \
        return s;                                                                                \
    }

DEF_NORM_RUN(f32, float)
DEF_NORM_RUN(f64, double)
