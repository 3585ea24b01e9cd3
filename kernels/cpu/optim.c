/* optim.c: optimizer updates over flat f32 buffers.
 *
 * AdamW (PyTorch semantics, decoupled weight decay), per element:
 *   p *= 1 - lr wd
 *   m  = b1 m + (1 - b1) g
 *   v  = b2 v + (1 - b2) g^2
 *   p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps),  bcK = 1 - bK^step
 * Scalars are formed in double, the elementwise work runs in f32. p, g, m, v
 * must not overlap. */
#include <math.h>
#include <immintrin.h>
#include "kernels.h"

#define CHUNK 8192

typedef struct {
    float decay, b1, one_b1, b2, one_b2, step_size, sqrt_bc2, eps;
} AdamWConsts;

/* One element; the AVX loop below does the same operations in the same order,
 * so results do not depend on where a chunk's vector part ends. */
static inline void adamw_one(float *p, float g, float *m, float *v, const AdamWConsts *c) {
    const float mi = c->b1 * *m + c->one_b1 * g;
    const float vi = c->b2 * *v + c->one_b2 * g * g;
    *m = mi;
    *v = vi;
    *p = *p * c->decay - c->step_size * (mi / (sqrtf(vi) / c->sqrt_bc2 + c->eps));
}

/* Explicit AVX: without -fno-math-errno gcc will not vectorise sqrtf. */
static void adamw_run(int64_t n, float *restrict p, const float *restrict g, float *restrict m,
                      float *restrict v, const AdamWConsts *c) {
    const __m256 b1 = _mm256_set1_ps(c->b1), ob1 = _mm256_set1_ps(c->one_b1);
    const __m256 b2 = _mm256_set1_ps(c->b2), ob2 = _mm256_set1_ps(c->one_b2);
    const __m256 decay = _mm256_set1_ps(c->decay), step = _mm256_set1_ps(c->step_size);
    const __m256 sbc2 = _mm256_set1_ps(c->sqrt_bc2), eps = _mm256_set1_ps(c->eps);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 gi = _mm256_loadu_ps(g + i);
        const __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)),
                                        _mm256_mul_ps(ob1, gi));
        const __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)),
                                        _mm256_mul_ps(_mm256_mul_ps(ob2, gi), gi));
        const __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), sbc2), eps);
        const __m256 upd = _mm256_mul_ps(step, _mm256_div_ps(mi, den));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        _mm256_storeu_ps(p + i, _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(p + i), decay), upd));
    }
    for (; i < n; i++) adamw_one(p + i, g[i], m + i, v + i, c);
}

void k_adamw_f32(int64_t n, float *p, const float *g, float *m, float *v, double lr,
                 double beta1, double beta2, double eps, double weight_decay, int64_t step) {
    if (n <= 0) return;
    const double bc1 = 1 - pow(beta1, (double)step), bc2 = 1 - pow(beta2, (double)step);
    const AdamWConsts k = {
        .decay = (float)(1 - lr * weight_decay),
        .b1 = (float)beta1, .one_b1 = (float)(1 - beta1),
        .b2 = (float)beta2, .one_b2 = (float)(1 - beta2),
        .step_size = (float)(lr / bc1), .sqrt_bc2 = (float)sqrt(bc2), .eps = (float)eps,
    };
    KERNEL_FOR(c, (n + CHUNK - 1) / CHUNK, n, {
        const int64_t lo = c * CHUNK, len = n - lo < CHUNK ? n - lo : CHUNK;
        adamw_run(len, p + lo, g + lo, m + lo, v + lo, &k);
    });
}
