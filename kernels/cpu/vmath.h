/* vmath.h: float32 exp on 8 AVX2 lanes, for the hot f32 loops (tanh-GELU,
 * softmax, cross-entropy) where glibc's scalar expf / tanhf would be called
 * once per element. float64 keeps libm.
 *
 * vm_exp_ps: Cody-Waite reduction x = n ln2 + r, |r| <= ln2 / 2, a degree-6
 * polynomial for e^r (Cephes' expf coefficients), then the exponent bits.
 * Within 2 ulp of expf over the normal range (tests/c/test_kernels.c
 * checks it); results below FLT_MIN flush to 0, above FLT_MAX give +inf,
 * NaN propagates. vm_exp_f32 is the same computation for one value, so
 * vector bodies and scalar tails agree bit for bit. */
#ifndef ACCEL_KERNELS_VMATH_H
#define ACCEL_KERNELS_VMATH_H

#include "simd.h"
#include <stdint.h>

static inline __m256 vm_exp_ps(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.33654f), hi = _mm256_set1_ps(88.72283f); /* ln FLT_MIN, ln FLT_MAX */
    const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc); /* ln2 in two parts */
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n for n in [-126, 128]: 2^(n - k) 2^k, k = 1 only for n = 128 */
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i k = _mm256_srli_epi32(_mm256_cmpgt_epi32(ni, _mm256_set1_epi32(127)), 31);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, k), bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, bias), 23));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
    y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

static inline float vm_exp_f32(float x) { return _mm256_cvtss_f32(vm_exp_ps(_mm256_set1_ps(x))); }

/* Horizontal sum of 8 lanes. */
static inline float vm_hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Lanes [0, n) of p (n < 8), the rest filled with v: tails through the vector code. */
static inline __m256 vm_load_partial_ps(const float *p, int64_t n, float v) {
    float buf[8];
    for (int k = 0; k < 8; k++) buf[k] = k < n ? p[k] : v;
    return _mm256_loadu_ps(buf);
}

static inline void vm_store_partial_ps(float *p, int64_t n, __m256 v) {
    float buf[8];
    _mm256_storeu_ps(buf, v);
    for (int k = 0; k < n; k++) p[k] = buf[k];
}

#endif
