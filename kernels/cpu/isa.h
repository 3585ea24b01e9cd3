/* isa.h: which build of the CPU kernels this process runs (Makefile:
 * KERNEL_VARIANTS; the choice is made once, when the program or accel.so
 * is loaded, from the CPU's features). */
#ifndef ACCEL_KERNELS_ISA_H
#define ACCEL_KERNELS_ISA_H

/* "x86-64-v3 (AVX2, FMA, F16C)" or "x86-64 (baseline, SSE2)". */
const char *kernel_isa(void);

#endif
