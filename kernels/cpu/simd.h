/* simd.h: the x86 intrinsics the CPU kernels use (AVX2, FMA, F16C). Each
 * kernel file is compiled twice (Makefile: KERNEL_VARIANTS), for
 * x86-64-v3, where these are the CPU's own instructions (immintrin.h), and
 * for the baseline x86-64 (SSE2 only), where SIMDe (Debian's libsimde-dev)
 * implements the same _mm256_* functions with SSE2 and scalar code, so one
 * source serves both; kernel_dispatch.c picks the variant at load time. */
#ifndef ACCEL_KERNELS_SIMD_H
#define ACCEL_KERNELS_SIMD_H

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#else
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx2.h>
#include <simde/x86/f16c.h>
#include <simde/x86/fma.h>
/* constants SIMDe 0.7 has only under its own prefix */
#ifndef _MM_FROUND_NO_EXC
#define _MM_FROUND_NO_EXC SIMDE_MM_FROUND_NO_EXC
#endif
#endif

#endif
