/* peak.c: the machine's float32 FMA peak, for scripts/bench/run.sh's
 * "fraction of peak" column. Each OpenMP thread runs 10 independent chains
 * of 8-lane fused multiply-adds (enough to cover the FMA latency on two
 * pipes) in registers; the best of 60 short timed runs per thread,
 * summed over threads. Prints "RESULT peak threads=<n> gflops=<GFLOP/s>".
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

#define FMA(x) x = _mm256_fmadd_ps(x, b, c)

/* n rounds of 10 independent 8-lane FMA chains, all in registers (no calls
 * inside: the chains would be spilled around them); returns a lane of the
 * sum so the work is not dead. */
static __attribute__((noinline)) float chains(long n, float seed) {
    __m256 a0 = _mm256_set1_ps(seed), a1 = _mm256_set1_ps(seed + 0.01f), a2 = _mm256_set1_ps(seed + 0.02f),
           a3 = _mm256_set1_ps(seed + 0.03f), a4 = _mm256_set1_ps(seed + 0.04f), a5 = _mm256_set1_ps(seed + 0.05f),
           a6 = _mm256_set1_ps(seed + 0.06f), a7 = _mm256_set1_ps(seed + 0.07f), a8 = _mm256_set1_ps(seed + 0.08f),
           a9 = _mm256_set1_ps(seed + 0.09f);
    const __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-4f);
    for (long i = 0; i < n; i++) {
        FMA(a0), FMA(a1), FMA(a2), FMA(a3), FMA(a4), FMA(a5), FMA(a6), FMA(a7), FMA(a8), FMA(a9);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(_mm256_add_ps(a6, a7), _mm256_add_ps(a8, a9))));
    return _mm256_cvtss_f32(s);
}

/* GFLOP/s of this thread: best of 60 short runs (short, so that on a shared
 * machine some run gets the core to itself). */
static double thread_peak(void) {
    const long n = 2000000;
    double best = 0;
    float sink = 0;
    for (int r = 0; r < 60; r++) {
        double t = now();
        sink += chains(n, 0.1f + 1e-3f * (float)r);
        t = now() - t;
        const double gf = n * 10.0 * 16 / t / 1e9; /* 10 chains x 8 lanes x (mul + add) */
        if (gf > best) best = gf;
    }
    return sink == 12345.0f ? 0 : best;
}

int main(void) {
    double total = 0;
#pragma omp parallel reduction(+ : total)
    total += thread_peak();
    printf("RESULT peak threads=%d gflops=%.1f\n", omp_get_max_threads(), total);
    return 0;
}
