/* peak.c: the machine's float32 FMA peak, for scripts/bench/run.sh's
 * "fraction of peak" column. Each OpenMP thread runs 10 independent chains
 * of fused multiply-adds (enough to cover the FMA latency on two pipes) in
 * registers, 16-lane AVX-512 where the CPU has it (read at run time), else
 * 8-lane AVX2; the best of 60 short timed runs per thread, summed over
 * threads. Prints "RESULT peak threads=<n> gflops=<GFLOP/s> lanes=<8|16>".
 *
 *   gcc -O2 -march=x86-64-v3 -fopenmp -o /tmp/bench_peak scripts/bench/peak.c
 *   OMP_NUM_THREADS=2 /tmp/bench_peak */
#define _POSIX_C_SOURCE 199309L
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* NAME(n, seed): n rounds of 10 independent FMA chains of type V, all in
 * registers (no calls inside: the chains would be spilled around them);
 * returns a lane of the sum so the work is not dead. */
#define CHAINS(NAME, TARGET, V, SET1, FMADD, ADD, FIRST)                                                          \
    static __attribute__((noinline, target(TARGET))) float NAME(long n, float seed) {                              \
        V a[10];                                                                                                 \
        for (int k = 0; k < 10; k++) a[k] = SET1(seed + 0.01f * (float)k);                                       \
        const V b = SET1(0.999f), c = SET1(1e-4f);                                                                 \
        for (long i = 0; i < n; i++) {                                                                            \
            a[0] = FMADD(a[0], b, c), a[1] = FMADD(a[1], b, c), a[2] = FMADD(a[2], b, c);                         \
            a[3] = FMADD(a[3], b, c), a[4] = FMADD(a[4], b, c), a[5] = FMADD(a[5], b, c);                         \
            a[6] = FMADD(a[6], b, c), a[7] = FMADD(a[7], b, c), a[8] = FMADD(a[8], b, c);                         \
            a[9] = FMADD(a[9], b, c);                                                                            \
        }                                                                                                        \
        V s = a[0];                                                                                              \
        for (int k = 1; k < 10; k++) s = ADD(s, a[k]);                                                           \
        return FIRST(s);                                                                                         \
    }

CHAINS(chains8, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_cvtss_f32)
CHAINS(chains16, "avx512f", __m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_cvtss_f32)

/* The widest FMA this CPU runs. */
static int lanes(void) { return __builtin_cpu_supports("avx512f") ? 16 : 8; }

/* GFLOP/s of this thread: best of 60 short runs (short, so that on a shared
 * machine some run gets the core to itself). */
static double thread_peak(void) {
    const long n = 2000000;
    double best = 0;
    float sink = 0;
    const int w = lanes();
    for (int r = 0; r < 60; r++) {
        double t = now();
        sink += (w == 16 ? chains16 : chains8)(n, 0.1f + 1e-3f * (float)r);
        t = now() - t;
        const double gf = n * 10.0 * w * 2 / t / 1e9; /* 10 chains x w lanes x (mul + add) */
        if (gf > best) best = gf;
    }
    return sink == 12345.0f ? 0 : best;
}

int main(void) {
    double total = 0;
#pragma omp parallel reduction(+ : total)
    total += thread_peak();
    printf("RESULT peak threads=%d gflops=%.1f lanes=%d\n", omp_get_max_threads(), total, lanes());
    return 0;
}
