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
#include "kernels.h"

#define CHUNK 8192

typedef struct {
    float decay, b1, one_b1, b2, one_b2, step_size, sqrt_bc2, eps;
} AdamWConsts;

/* no-math-errno: sqrtf then vectorises (nothing reads errno). */
__attribute__((optimize("no-math-errno")))
static void adamw_run(int64_t n, float *restrict p, const float *restrict g, float *restrict m,
                      float *restrict v, const AdamWConsts *k) {
    const AdamWConsts c = *k;
    for (int64_t i = 0; i < n; i++) {
        const float gi = g[i];
        const float mi = c.b1 * m[i] + c.one_b1 * gi;
        const float vi = c.b2 * v[i] + c.one_b2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * c.decay - c.step_size * (mi / (sqrtf(vi) / c.sqrt_bc2 + c.eps));
    }
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
