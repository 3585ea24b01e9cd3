/* fp8.c: the fp8 recipe's casts over contiguous float32 buffers: the
 * scaled saturating encode to e4m3fn / e5m2 (kernels/dtype.h's codec, so
 * the codes are bit for bit PyTorch's x.clamp(-max, max).to(fp8)), the
 * scaled decode, and the amax reduction (max |x|, NaN if any is NaN).
 * The CPU backend's fp8 entries (core/backend/backend_cpu.c) call these. */
#include "kernels.h"
#include <math.h>

#define FP8_CHUNK 4096 /* elements per amax part, at most FP8_PARTS parts */
#define FP8_PARTS 64

static inline uint8_t encode(KFp8Fmt fmt, float f) {
    return fmt == KF8_E4M3FN ? f32_to_f8e4m3_sat(f) : f32_to_f8e5m2_sat(f);
}

static inline float decode(KFp8Fmt fmt, uint8_t b) {
    return fmt == KF8_E4M3FN ? f8e4m3_to_f32(b) : f8e5m2_to_f32(b);
}

void k_fp8_quantize_f32(KFp8Fmt fmt, int64_t n, const float *x, float scale, uint8_t *q) {
    KERNEL_FOR(i, n, n, q[i] = encode(fmt, x[i] * scale));
}

void k_fp8_dequantize_f32(KFp8Fmt fmt, int64_t n, const uint8_t *q, float scale_inv, float *out) {
    KERNEL_FOR(i, n, n, out[i] = decode(fmt, q[i]) * scale_inv);
}

/* max |x| of one run; NaN when the run holds a NaN. */
static float amax_run(const float *x, int64_t n) {
    float m = 0.0f;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        nan |= isnan(a);
        m = a > m ? a : m;
    }
    return nan ? NAN : m;
}

float k_fp8_amax_f32(int64_t n, const float *x) {
    if (n <= 0) return 0.0f;
    int64_t parts = (n + FP8_CHUNK - 1) / FP8_CHUNK;
    if (parts > FP8_PARTS) parts = FP8_PARTS;
    const int64_t len = (n + parts - 1) / parts;
    float part[FP8_PARTS], m = 0.0f;
    int nan = 0;
    KERNEL_FOR(c, parts, n, part[c] = amax_run(x + c * len, c * len + len > n ? n - c * len : len));
    for (int64_t c = 0; c < parts; c++) {
        nan |= isnan(part[c]);
        m = part[c] > m ? part[c] : m;
    }
    return nan ? NAN : m;
}
