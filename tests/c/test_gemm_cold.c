/* test_gemm_cold.c: the first f32 GEMM of a fresh process is cheap. The
 * small products a small model runs (the seed MLP's: 32x128x20 and
 * 32x64x128 with B transposed, and its backward shapes) must not pay a
 * library's one-time JIT initialisation (oneDNN's sgemm spends ~25 ms of
 * CPU on its first call, whatever the shape; kernels/cpu/gemm.c sends such
 * products to OpenBLAS). Measured as the calling thread's CPU time, which
 * other processes on a loaded machine do not inflate; each first call must
 * stay under COLD_LIMIT_MS. This program must make no other GEMM before
 * these. The results are checked too (against a float64 loop). Last line
 * "N passed, N failed". */
#include "kernels/cpu/kernels.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"

#define COLD_LIMIT_MS 8.0

static double thread_cpu_ms(void) {
    struct timespec t;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return NAN;
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

/* max |C - op(A) op(B)| relative to sum |a b|, by a float64 loop */
static double rel_error(int ta, int tb, int M, int N, int K, const float *A, const float *B,
                        const float *C) {
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, sa = 0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[k * M + i] : A[i * K + k], b = tb ? B[j * K + k] : B[k * N + j];
                s += a * b, sa += fabs(a * b);
            }
            double e = fabs(C[i * N + j] - s) / (sa + 1e-30);
            if (e > worst) worst = e;
        }
    return worst;
}

static void first_call(int ta, int tb, int M, int N, int K) {
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
    float *C = malloc(sizeof(float) * M * N);
    if (!A || !B || !C) {
        CHECK(!"out of memory");
        free(A), free(B), free(C);
        return;
    }
    for (int i = 0; i < M * K; i++) A[i] = (float)((i * 37 % 101) - 50) / 50.0f;
    for (int i = 0; i < K * N; i++) B[i] = (float)((i * 53 % 97) - 48) / 48.0f;
    const double t0 = thread_cpu_ms();
    int rc = k_gemm_f32(ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, 0.0f, C, N);
    const double ms = thread_cpu_ms() - t0;
    printf("first k_gemm_f32 ta=%d tb=%d %dx%dx%d: %.3f ms of CPU\n", ta, tb, M, N, K, ms);
    CHECK(rc == 0);
    CHECK(ms < COLD_LIMIT_MS);
    CHECK(rel_error(ta, tb, M, N, K, A, B, C) < 1e-5);
    free(A), free(B), free(C);
}

int main(void) {
    first_call(0, 1, 32, 128, 20); /* Linear(20, 128) forward, batch 32 */
    first_call(0, 1, 32, 64, 128); /* Linear(128, 64) forward */
    first_call(1, 0, 64, 128, 32); /* its weight gradient */
    first_call(0, 0, 32, 128, 64); /* its input gradient */
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
