/* fp8.cu: the fp8 recipe's casts on the GPU, one thread per element through
 * kernels/dtype.h's codec (so the codes are the CPU's, bit for bit): the
 * scaled saturating encode to e4m3fn / e5m2, the scaled decode, and the
 * amax (max |x|, NaN if any is NaN). The amax is an atomicMax over the bit
 * patterns of |x|: for non-negative floats the unsigned order is the
 * numeric order, and every NaN pattern sits above +inf. */
#include "common.cuh"

__device__ __forceinline__ uint8_t fp8_encode(KFp8Fmt fmt, float f) {
    return fmt == KF8_E4M3FN ? f32_to_f8e4m3_sat(f) : f32_to_f8e5m2_sat(f);
}

__global__ void fp8_quantize_kernel(KFp8Fmt fmt, int64_t n, const float *x, float scale, uint8_t *q,
                                    unsigned *amax) {
    unsigned m = 0;
    KC_GRID_STRIDE(i, n) {
        const float v = x[i];
        if (q) q[i] = fp8_encode(fmt, v * scale);
        const unsigned b = __float_as_uint(fabsf(v));
        m = b > m ? b : m;
    }
    if (amax && m) atomicMax(amax, m);
}

__global__ void fp8_dequantize_kernel(KFp8Fmt fmt, int64_t n, const uint8_t *q, float scale_inv, float *out) {
    KC_GRID_STRIDE(i, n) out[i] = (fmt == KF8_E4M3FN ? f8e4m3_to_f32(q[i]) : f8e5m2_to_f32(q[i])) * scale_inv;
}

/* A NaN amax (any NaN pattern) made the canonical NaN, as the CPU's. */
__global__ void fp8_amax_canonical_kernel(unsigned *amax) {
    if (*amax > 0x7f800000u) *amax = 0x7fc00000u;
}

extern "C" int kc_fp8_quantize(KFp8Fmt fmt, int64_t n, const float *x, float scale, uint8_t *q, float *amax,
                               void *stream) {
    if (amax) cuda_check(cudaMemsetAsync(amax, 0, sizeof(float), kc_stream(stream)));
    if (n > 0) {
        fp8_quantize_kernel<<<kc_blocks(n), KC_THREADS, 0, kc_stream(stream)>>>(fmt, n, x, scale, q, (unsigned *)amax);
        cuda_check_launch();
    }
    if (amax) {
        fp8_amax_canonical_kernel<<<1, 1, 0, kc_stream(stream)>>>((unsigned *)amax);
        cuda_check_launch();
    }
    return 0;
}

extern "C" int kc_fp8_dequantize(KFp8Fmt fmt, int64_t n, const uint8_t *q, float scale_inv, float *out,
                                 void *stream) {
    if (n <= 0) return 0;
    fp8_dequantize_kernel<<<kc_blocks(n), KC_THREADS, 0, kc_stream(stream)>>>(fmt, n, q, scale_inv, out);
    cuda_check_launch();
    return 0;
}
