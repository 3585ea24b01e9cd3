/* isa.c: kernel_isa() names the kernel build in use. Like every file of
 * the kernels it is compiled once per variant, so the copy that the
 * dispatcher picked is the one that answers. */
#include "cpu/isa.h"

const char *kernel_isa(void) {
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    return "x86-64-v3 (AVX2, FMA, F16C)";
#else
    return "x86-64 (baseline, SSE2)";
#endif
}
