/* dispatch.h: the run-time choice between the two builds of each CPU
 * kernel (Makefile: KERNEL_VARIANTS). DISPATCH(f) makes f a GNU ifunc:
 * when the program or accel.so is loaded, the dynamic linker calls f's
 * resolver once, which returns f_v3 (the copy compiled for x86-64-v3:
 * AVX2, FMA, F16C) on a CPU that has x86-64-v3, else f_base (the baseline
 * x86-64 copy), and every call of f goes there from then on. The
 * signatures do not matter to the linker, so every kernel is declared here
 * as void(void); nothing calls them through these declarations. */
#ifndef ACCEL_KERNELS_DISPATCH_H
#define ACCEL_KERNELS_DISPATCH_H

typedef void kernel_fn(void);

/* Resolvers run before constructors: __builtin_cpu_init must come first.
 * gcc (12) knows the level's name; clang 14 (make fuzz) only some of its
 * features, of which AVX2 + FMA + BMI2 imply the rest on every real CPU. */
static inline int kernel_cpu_has_v3(void) {
    __builtin_cpu_init();
#ifdef __clang__
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("bmi2");
#else
    return __builtin_cpu_supports("x86-64-v3");
#endif
}

#define DISPATCH(f)                                                                    \
    kernel_fn f##_v3, f##_base;                                                        \
    __attribute__((used)) static kernel_fn *f##_resolve(void) {                       \
        return kernel_cpu_has_v3() ? f##_v3 : f##_base;                                \
    }                                                                                  \
    void f(void) __attribute__((ifunc(#f "_resolve")));

#endif
