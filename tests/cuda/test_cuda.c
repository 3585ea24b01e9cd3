/* test_cuda.c: the CUDA build's test binary (make CUDA=1 / make cuda-ci).
 * Everywhere: the kernels' scalar functions (scalar_ops.cuh, compiled for
 * the host by host_ops.cu) against the CPU kernels for every binary and
 * unary op and unary derivative over values with signs, zeros, NaN and
 * infinities (bit for bit for the exact ops, to a few ulps for the
 * transcendental ones, whose vectorised CPU forms differ).
 * Without a GPU (this is how CI runs it) it checks device discovery's
 * no-GPU answer (0 devices and the reason) and that a device call fails
 * with a clear CUDA error naming our file:line instead of crashing, then
 * counts the GPU checks as skipped. With a GPU (scripts/gpu-check.sh) it
 * runs each kernel family on fresh random inputs, device outputs poisoned
 * first, against the CPU kernels (kernels/cpu) and the host codecs:
 * casts bit for bit, Adam bit for bit, the RNG equal to core/rng.c, the
 * rest within float32 tolerances.
 * ACCEL_EXPECT_GPU=1 makes "no GPU" a failure (the GPU machine).
 * Last line "N passed, N failed[, N skipped]". */
#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm_layout.h"
#include "core/ops.h"
#include "core/dist/dist_nccl.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int n_pass, n_fail, n_skip;
#define CHECK(cond) check(!!(cond), __LINE__, #cond)
static void check(int ok, int line, const char *what) {
    if (ok) n_pass++;
    else n_fail++, printf("test_cuda.c:%d: FAIL %s\n", line, what);
}

/* ---------------- without a GPU ---------------- */

static int driver_present(void) { return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0; }

static void test_no_gpu_path(void) {
    char why[256];
    int n = cuda_device_count(why, sizeof why);
    CHECK(n == 0);
    printf("cuda_device_count: 0 (%s)\n", why);
    CHECK(strstr(why, "cudaGetDeviceCount") != NULL);
    CHECK(strstr(why, "no usable NVIDIA driver") || strstr(why, "no CUDA GPU was found"));
    /* a device call fails cleanly with the runtime's error at our file:line, not "out of memory" */
    void *p = (void *)1;
    cuda_clear_error();
    CHECK(kc_malloc(0, 4096, NULL, &p) == -1 && p == NULL);
    printf("kc_malloc without a GPU: %s\n", cuda_last_error());
    CHECK(strstr(cuda_last_error(), "alloc.cu:") != NULL && strstr(cuda_last_error(), "cudaError") != NULL);
    CHECK(strstr(cuda_last_error(), "out of memory") == NULL);
    KcIter it = {.ndim = 1, .shape = {4}, .st = {{1}}};
    cuda_clear_error();
    CHECK(kc_fill(&it, (void *)16, DT_F32, 1.0, NULL) == -1);
    CHECK(strstr(cuda_last_error(), "elementwise.cu:") != NULL);
    /* NCCL on a one-process job: refused with the reason, nothing cached */
    DistComm *world = dist_world();
    CHECK(world != NULL && dist_nccl_comm(world, 0) == NULL);
    printf("dist_nccl_comm without a GPU: %s\n", accel_last_error());
    CHECK(strstr(accel_last_error(), "nccl init on cuda:0 (rank 0 of 1)") && strstr(accel_last_error(), "cudaError"));
    CHECK(dist_nccl_shutdown() == 0);
}

/* ---------------- helpers ---------------- */

static unsigned rs = 1234;
static float frand(void) { return rs = rs * 1103515245u + 12345u, ((rs >> 8) & 0xffff) / 32768.0f - 1.0f; }

static float *rand_f32(int64_t n, float scale) {
    float *x = malloc(sizeof *x * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = frand() * scale;
    return x;
}
/* |got - want| <= tol (|want| + 1) everywhere */
static int close_f32(const float *got, const float *want, int64_t n, double tol) {
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= tol * (fabs(want[i]) + 1))) {
            printf("  [%lld] got %.9g want %.9g\n", (long long)i, got[i], want[i]);
            return 0;
        }
    return 1;
}
/* ---------------- the kernels' scalar semantics, on the host ---------------- */
/* host_ops.cu: scalar_ops.cuh compiled for the host */
float hk_binop_f32(int op, float x, float y);
double hk_binop_f64(int op, double x, double y);
int64_t hk_binop_i64(int op, int64_t x, int64_t y);
float hk_unop_f32(int op, float x, float p1, float p2);
double hk_unop_f64(int op, double x, double p1, double p2);
int64_t hk_unop_i64(int op, int64_t x, int64_t lo, int64_t hi);
float hk_grad_f32(int op, float x, float y, float gy, float p1, float p2);
double hk_grad_f64(int op, double x, double y, double gy, double p1, double p2);

static const double VALS[] = {-3.5, -2, -1, -0.0, 0, 0.25, 0.5, 1, 2.5, 3, 7, 1e-3, 40, -40, NAN, INFINITY, -INFINITY};
#define NV ((int)(sizeof VALS / sizeof VALS[0]))

/* equal (NaN equals NaN), or within tol relative to max(|want|, 1) when tol > 0 */
static int same(double got, double want, double tol) {
    if (got != got || want != want) return got != got && want != want;
    if (got == want) return 1;
    return tol > 0 && fabs(got - want) <= tol * fmax(fabs(want), 1.0);
}

/* ops whose result the CPU and the GPU must give bit for bit */
static int unary_exact(KUnOp op) {
    switch (op) {
    case KU_NEG: case KU_RELU: case KU_ABS: case KU_SQUARE: case KU_RECIP: case KU_SIGN: case KU_CLAMP:
    case KU_FLOOR: case KU_CEIL: case KU_ROUND: case KU_TRUNC: case KU_LEAKY_RELU: case KU_NOT: case KU_SQRT:
        return 1;
    default: return 0;
    }
}

static void unary_params(KUnOp op, double *p1, double *p2) {
    *p1 = op == KU_CLAMP ? -1 : op == KU_POW ? 1.7 : op == KU_RPOW ? 2 : op == KU_LEAKY_RELU ? 0.1 : 0;
    *p2 = op == KU_CLAMP ? 2 : 0;
}

static void test_binary_semantics(void) {
    int bad32 = 0, bad64 = 0, badi = 0;
    for (int op = 0; op < KB_COUNT; op++)
        for (int i = 0; i < NV; i++)
            for (int j = 0; j < NV; j++) {
                const float x = (float)VALS[i], y = (float)VALS[j];
                const double xd = VALS[i], yd = VALS[j];
                union { float f; double d; int64_t i; uint8_t b; } o32 = {0}, o64 = {0}, oi = {0};
                k_binary_f32(op, 1, &x, 1, &y, 1, &o32, 1);
                k_binary_f64(op, 1, &xd, 1, &yd, 1, &o64, 1);
                const int cmp = kbin_is_compare(op), fl = !kbin_is_bitwise(op); /* bitwise: integers only */
                bad32 += fl && !same(hk_binop_f32(op, x, y), cmp ? o32.b : o32.f, 0);
                bad64 += fl && !same(hk_binop_f64(op, xd, yd), cmp ? o64.b : o64.d, 0);
                if (isfinite(xd) && isfinite(yd)) {
                    const int64_t xi = (int64_t)(xd * 3), yi = (int64_t)(yd * 3);
                    k_binary_i64(op, 1, &xi, 1, &yi, 1, &oi, 1);
                    badi += hk_binop_i64(op, xi, yi) != (cmp ? oi.b : oi.i);
                }
            }
    CHECK(bad32 == 0);
    CHECK(bad64 == 0);
    CHECK(badi == 0);
    if (bad32 + bad64 + badi) printf("  binary mismatches: f32 %d, f64 %d, i64 %d\n", bad32, bad64, badi);
}

static void test_unary_semantics(void) {
    int bad32 = 0, bad64 = 0, badi = 0;
    static const double pows[] = {2, 3, 1, 0.5, -1, -0.5, -2, 1.7};
    for (int op = 0; op < KU_COUNT; op++)
        for (int pk = 0; pk < (op == KU_POW ? 8 : op == KU_BNOT ? 0 : 1); pk++) /* bitwise not: integers only */
            for (int i = 0; i < NV; i++) {
                double p1, p2;
                unary_params(op, &p1, &p2);
                if (op == KU_POW) p1 = pows[pk];
                const float x = (float)VALS[i];
                const double xd = VALS[i];
                float o32;
                double o64;
                k_unary_f32(op, 1, &x, 1, &o32, 1, p1, p2);
                k_unary_f64(op, 1, &xd, 1, &o64, 1, p1, p2);
                const int exact = unary_exact(op);
                if (!same(hk_unop_f32(op, x, (float)p1, (float)p2), o32, exact ? 0 : 1e-6)) {
                    if (bad32++ < 5) printf("  unary f32 op %d x %g: %.9g vs cpu %.9g\n", op, x, hk_unop_f32(op, x, (float)p1, (float)p2), o32);
                }
                bad64 += !same(hk_unop_f64(op, xd, p1, p2), o64, exact ? 0 : 1e-14);
            }
    static const KUnOp int_ops[] = {KU_NEG, KU_ABS, KU_SQUARE, KU_SIGN, KU_CLAMP, KU_RELU, KU_NOT, KU_BNOT};
    for (int k = 0; k < 8; k++)
        for (int64_t x = -9; x <= 9; x++) {
            int64_t o;
            k_unary_i64(int_ops[k], 1, &x, 1, &o, 1, -3.5, 4.2); /* int bounds: -3 and 4 */
            badi += hk_unop_i64(int_ops[k], x, -3, 4) != o;
        }
    for (int64_t x = -9; x <= 9; x++) { /* min > max: max wins, as torch's min(max(x, min), max) */
        int64_t o;
        k_unary_i64(KU_CLAMP, 1, &x, 1, &o, 1, 4.2, -3.5); /* int bounds: 5 and -4 */
        badi += hk_unop_i64(KU_CLAMP, x, 5, -4) != o || o != -4;
    }
    for (int i = 0; i < NV; i++) { /* a NaN bound gives NaN */
        const float x = (float)VALS[i];
        float o32;
        k_unary_f32(KU_CLAMP, 1, &x, 1, &o32, 1, NAN, 2);
        bad32 += !same(hk_unop_f32(KU_CLAMP, x, NAN, 2), o32, 0) || o32 == o32;
    }
    CHECK(bad32 == 0);
    CHECK(bad64 == 0);
    CHECK(badi == 0);
}

static void test_unary_grad_semantics(void) {
    static const KUnOp ops[] = {KU_NEG, KU_RELU, KU_GELU, KU_GELU_TANH, KU_SILU, KU_TANH, KU_SIGMOID, KU_EXP,
                                KU_LOG, KU_SQRT, KU_RSQRT, KU_ABS, KU_CLAMP, KU_POW, KU_LEAKY_RELU, KU_SQUARE,
                                KU_RECIP, KU_SIN, KU_COS, KU_LOG1P, KU_EXPM1, KU_ERF, KU_TAN, KU_ASIN,
                                KU_ACOS, KU_ATAN, KU_SINH, KU_COSH, KU_ASINH, KU_ACOSH, KU_ATANH, KU_LOG2, KU_LOG10,
                                KU_ERFC, KU_LGAMMA, KU_DIGAMMA};
    int bad32 = 0, bad64 = 0;
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        for (int i = 0; i < NV; i++) {
            double p1, p2;
            unary_params(ops[k], &p1, &p2);
            const float x = (float)VALS[i], gy = 0.75f;
            const double xd = VALS[i], gyd = 0.75;
            float y, g32;
            double yd, g64;
            k_unary_f32(ops[k], 1, &x, 1, &y, 1, p1, p2);
            k_unary_f64(ops[k], 1, &xd, 1, &yd, 1, p1, p2);
            k_unary_backward_f32(ops[k], 1, &x, &y, &gy, &g32, p1, p2);
            k_unary_backward_f64(ops[k], 1, &xd, &yd, &gyd, &g64, p1, p2);
            bad32 += !same(hk_grad_f32(ops[k], x, y, gy, (float)p1, (float)p2), g32, 1e-6);
            bad64 += !same(hk_grad_f64(ops[k], xd, yd, gyd, p1, p2), g64, 1e-14);
        }
    CHECK(bad32 == 0);
    CHECK(bad64 == 0);
}

void hk_offsets(const KcIter *it, int64_t lin, int nops, int64_t off[4]);

/* The n-d offsets of the elementwise kernels against nested loops: shape
 * (2, 3, 4), an output, a permuted input and a broadcast one. */
static void test_iter_offsets(void) {
    const KcIter it = {.ndim = 3, .shape = {2, 3, 4}, .st = {{12, 4, 1}, {1, 8, 2}, {4, 0, 1}}};
    int bad = 0;
    for (int64_t i = 0; i < 2; i++)
        for (int64_t j = 0; j < 3; j++)
            for (int64_t l = 0; l < 4; l++) {
                int64_t off[4];
                hk_offsets(&it, (i * 3 + j) * 4 + l, 3, off);
                for (int k = 0; k < 3; k++) bad += off[k] != i * it.st[k][0] + j * it.st[k][1] + l * it.st[k][2];
            }
    CHECK(bad == 0);
    const KcIter scalar = {.ndim = 0};
    int64_t off[4] = {9, 9, 9, 9};
    hk_offsets(&scalar, 0, 3, off);
    CHECK(off[0] == 0 && off[1] == 0 && off[2] == 0);
}

/* element (r, c) of op(X) for a column-major matrix m */
static float lt_elem(const float *x, const KcLtMat *m, int64_t r, int64_t c) {
    return m->trans ? x[c + r * m->ld] : x[r + c * m->ld];
}

/* What cuBLASLt computes from kc_gemm_layout's description (a column-major
 * reference), against the CPU's row-major k_gemm_f32, for every ta / tb
 * and padded strides. */
static void test_gemm_layout(void) {
    const int64_t M = 5, N = 7, K = 3;
    int bad = 0;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            const int64_t lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 1, ldc = N + 3;
            float *A = rand_f32((ta ? K : M) * lda, 1), *B = rand_f32((tb ? N : K) * ldb, 1);
            float C[5 * 10] = {0}, D[5 * 10] = {0};
            k_gemm_f32(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
            const KcLtLayout l = kc_gemm_layout(ta, tb, M, N, K, lda, ldb, ldc);
            const int64_t opk = l.first.trans ? (int64_t)l.first.rows : (int64_t)l.first.cols;
            bad += opk != K || (int64_t)l.out.rows != N || (int64_t)l.out.cols != M;
            for (int64_t i = 0; i < N; i++)
                for (int64_t j = 0; j < M; j++) {
                    double s = 0;
                    for (int64_t k = 0; k < K; k++) s += (double)lt_elem(B, &l.first, i, k) * lt_elem(A, &l.second, k, j);
                    D[i + j * l.out.ld] = (float)s;
                }
            bad += !close_f32(D, C, 5 * 10, 1e-5);
            free(A), free(B);
        }
    CHECK(bad == 0);
}

/* ---------------- with a GPU ---------------- */

static void *dev(size_t bytes) {
    void *p = NULL;
    if (kc_malloc(0, bytes, NULL, &p)) printf("kc_malloc: %s\n", cuda_last_error()), exit(1);
    return p;
}
static void *dev_from(const void *h, size_t bytes) {
    void *p = dev(bytes);
    if (kc_copy_to_device(0, p, h, bytes, NULL)) printf("copy: %s\n", cuda_last_error()), exit(1);
    return p;
}
/* a device buffer full of NaN bytes (0xff), so unwritten outputs show */
static void *dev_poisoned(size_t bytes) {
    void *h = malloc(bytes), *p;
    memset(h, 0xff, bytes);
    p = dev_from(h, bytes);
    free(h);
    return p;
}
static void to_host(void *h, const void *d, size_t bytes) {
    if (kc_copy_to_host(0, h, d, bytes, NULL)) printf("copy: %s\n", cuda_last_error()), exit(1);
}
static float *fetch_f32(const void *d, int64_t n) {
    float *h = malloc(sizeof *h * (size_t)n);
    to_host(h, d, sizeof *h * (size_t)n);
    return h;
}

static void test_casts(void) {
    enum { N = 256 + 6 };
    float x[N];
    for (int i = 0; i < 256; i++) x[i] = f8e4m3_to_f32((uint8_t)i) * 1.0625f; /* between codes */
    const float extra[6] = {448.0f, 500.0f, 1e6f, INFINITY, -INFINITY, 60000.0f};
    memcpy(x + 256, extra, sizeof extra);
    const DType outs[4] = {DT_F8E4M3, DT_F8E5M2, DT_BF16, DT_F16};
    void *dx = dev_from(x, sizeof x);
    KcIter it = {.ndim = 1, .shape = {N}, .st = {{1}, {1}}};
    for (int k = 0; k < 4; k++) {
        size_t es = dtype_size(outs[k]);
        void *dy = dev_poisoned(es * N);
        char got[2 * N], want[2 * N];
        CHECK(kc_cast(&it, dx, DT_F32, dy, outs[k], NULL) == 0);
        to_host(got, dy, es * N);
        for (int i = 0; i < N; i++) dtype_store(want + i * es, outs[k], x[i]);
        CHECK(memcmp(got, want, es * N) == 0);
        kc_free(0, dy);
    }
    kc_free(0, dx);
}

static void test_binary_broadcast(void) {
    float *a = rand_f32(15, 3), *b = rand_f32(20, 3), want[60];
    KcIter it = {.ndim = 3, .shape = {3, 4, 5}, .st = {{20, 5, 1}, {5, 0, 1}, {0, 5, 1}}};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 5; k++) want[i * 20 + j * 5 + k] = a[i * 5 + k] * b[j * 5 + k];
    void *da = dev_from(a, 60), *db = dev_from(b, 80), *dy = dev_poisoned(240);
    CHECK(kc_binary(KB_MUL, &it, da, DT_F32, db, DT_F32, dy, DT_F32, NULL) == 0);
    float *got = fetch_f32(dy, 60);
    CHECK(close_f32(got, want, 60, 0));
    free(a), free(b), free(got);
    kc_free(0, da), kc_free(0, db), kc_free(0, dy);
}

static void test_cross_entropy(void) {
    const int64_t N = 4, C = 50257;
    float *x = rand_f32(N * C, 8), loss[4], lse[4], g[4] = {1, 0.5f, 2, 1};
    int64_t t[4] = {0, 50256, -100, 777}, bad = -1;
    CHECK(k_cross_entropy_fwd_f32(x, N, C, t, -100, 0.1, loss, lse) == -1);
    void *dx = dev_from(x, sizeof *x * N * C), *dt = dev_from(t, sizeof t), *dl = dev_poisoned(16), *dlse = dev_poisoned(16);
    void *dbad = dev_from(&bad, 8), *dg = dev_from(g, 16), *dgx = dev_poisoned(sizeof *x * N * C);
    CHECK(kc_cross_entropy_fwd(dx, DT_F32, N, C, dt, -100, 0.1, dl, dlse, dbad, NULL) == 0);
    float *gl = fetch_f32(dl, N), *glse = fetch_f32(dlse, N);
    to_host(&bad, dbad, 8);
    CHECK(bad == -1 && close_f32(gl, loss, N, 1e-5) && close_f32(glse, lse, N, 1e-5));
    float *gx = malloc(sizeof *gx * N * C);
    k_cross_entropy_bwd_f32(x, lse, N, C, t, -100, 0.1, g, gx);
    CHECK(kc_cross_entropy_bwd(dx, DT_F32, dlse, N, C, dt, -100, 0.1, dg, dgx, NULL) == 0);
    float *ggx = fetch_f32(dgx, N * C);
    CHECK(close_f32(ggx, gx, N * C, 1e-5));
    free(x), free(gl), free(glse), free(gx), free(ggx);
    kc_free(0, dx), kc_free(0, dt), kc_free(0, dl), kc_free(0, dlse), kc_free(0, dbad), kc_free(0, dg), kc_free(0, dgx);
}

/* softmax and log-softmax, forward and backward, over the last dim and a middle one */
static void test_softmax(void) {
    static const int64_t shapes[2][3] = {{5, 1000, 1}, {3, 20, 7}};
    int ok = 1;
    for (int k = 0; k < 2; k++)
        for (int lg = 0; lg < 2; lg++) {
            const int64_t o = shapes[k][0], n = shapes[k][1], in = shapes[k][2], tot = o * n * in;
            float *x = rand_f32(tot, 4), *gy = rand_f32(tot, 1), *y = malloc(4 * tot), *gx = malloc(4 * tot);
            k_softmax_f32(lg, x, o, n, in, y);
            k_softmax_backward_f32(lg, y, gy, o, n, in, gx);
            void *dx = dev_from(x, 4 * tot), *dgy = dev_from(gy, 4 * tot), *dy = dev_poisoned(4 * tot), *dgx = dev_poisoned(4 * tot);
            ok &= kc_softmax(lg, dx, DT_F32, o, n, in, dy, NULL) == 0;
            float *gy_ = fetch_f32(dy, tot);
            ok &= close_f32(gy_, y, tot, 1e-5);
            void *dyc = dev_from(y, 4 * tot); /* backward from the CPU's y */
            ok &= kc_softmax_backward(lg, dyc, dgy, DT_F32, o, n, in, dgx, NULL) == 0;
            float *ggx = fetch_f32(dgx, tot);
            ok &= close_f32(ggx, gx, tot, 1e-5);
            free(x), free(gy), free(y), free(gx), free(gy_), free(ggx);
            kc_free(0, dx), kc_free(0, dgy), kc_free(0, dy), kc_free(0, dgx), kc_free(0, dyc);
        }
    CHECK(ok);
}

static void test_layernorm(void) {
    const int64_t R = 7, C = 768;
    float *x = rand_f32(R * C, 2), *w = rand_f32(C, 1), *b = rand_f32(C, 1), *y = malloc(4 * R * C), mean[7], rstd[7];
    k_layernorm_fwd_f32(x, w, b, R, C, 1e-5, y, mean, rstd);
    void *dx = dev_from(x, 4 * R * C), *dw = dev_from(w, 4 * C), *db = dev_from(b, 4 * C);
    void *dy = dev_poisoned(4 * R * C), *dm = dev_poisoned(4 * R), *dr = dev_poisoned(4 * R);
    CHECK(kc_layernorm_fwd(dx, dw, db, DT_F32, R, C, 1e-5, dy, dm, dr, NULL) == 0);
    float *gy = fetch_f32(dy, R * C), *gr = fetch_f32(dr, R);
    CHECK(close_f32(gy, y, R * C, 1e-5) && close_f32(gr, rstd, R, 1e-5));
    /* backward from the CPU's statistics; gw, gb accumulate onto zeros */
    float *g = rand_f32(R * C, 1), *gx = malloc(4 * R * C), *gw = calloc(C, 4), *gb = calloc(C, 4);
    k_layernorm_bwd_f32(x, w, mean, rstd, g, R, C, gx, gw, gb);
    void *dg = dev_from(g, 4 * R * C), *dmc = dev_from(mean, 4 * R), *drc = dev_from(rstd, 4 * R);
    float *zeros = calloc(C, 4);
    void *dgx = dev_poisoned(4 * R * C), *dgw = dev_from(zeros, 4 * C), *dgb = dev_from(zeros, 4 * C);
    CHECK(kc_layernorm_bwd(dx, dw, dmc, drc, dg, DT_F32, R, C, dgx, dgw, dgb, NULL) == 0);
    float *ggx = fetch_f32(dgx, R * C), *ggw = fetch_f32(dgw, C), *ggb = fetch_f32(dgb, C);
    CHECK(close_f32(ggx, gx, R * C, 1e-4) && close_f32(ggw, gw, C, 1e-4) && close_f32(ggb, gb, C, 1e-4));
    free(x), free(w), free(b), free(y), free(gy), free(gr), free(g), free(gx), free(gw), free(gb), free(zeros);
    free(ggx), free(ggw), free(ggb);
    kc_free(0, dx), kc_free(0, dw), kc_free(0, db), kc_free(0, dy), kc_free(0, dm), kc_free(0, dr);
    kc_free(0, dg), kc_free(0, dmc), kc_free(0, drc), kc_free(0, dgx), kc_free(0, dgw), kc_free(0, dgb);
}

static void test_adam_bitwise(void) {
    const int64_t n = 10007;
    float *p = rand_f32(n, 1), *g = rand_f32(n, 1), *m = rand_f32(n, 0.1f), *v = rand_f32(n, 0.1f);
    for (int64_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    void *dp = dev_from(p, 4 * n), *dg = dev_from(g, 4 * n), *dm = dev_from(m, 4 * n), *dv = dev_from(v, 4 * n);
    const KAdamArgs a = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01, .decoupled = 1, .step = 3};
    k_adam_f32(n, p, g, m, v, NULL, &a);
    CHECK(kc_adam_f32(n, dp, dg, dm, dv, NULL, &a, NULL) == 0);
    float *gp = fetch_f32(dp, n), *gm = fetch_f32(dm, n);
    CHECK(memcmp(gp, p, 4 * n) == 0 && memcmp(gm, m, 4 * n) == 0);
    free(p), free(g), free(m), free(v), free(gp), free(gm);
    kc_free(0, dp), kc_free(0, dg), kc_free(0, dm), kc_free(0, dv);
}

static void test_rng_matches_cpu(void) {
    int64_t n = 1001;
    uint64_t st[2] = {42, 7};
    rng_set_state(st);
    Tensor *t = rng_rand(&n, 1, DT_F32);
    void *d = dev_poisoned(4 * n);
    CHECK(t && kc_rng_uniform(d, DT_F32, n, 42, 7, 0.0, 1.0, NULL) == 0);
    float *got = fetch_f32(d, n);
    CHECK(t && memcmp(got, tensor_data(t), 4 * n) == 0);
    tensor_release(t), free(got), kc_free(0, d);
}

static void test_gemm(void) {
    const int64_t M = 33, N = 65, K = 17;
    float *A = rand_f32(M * K, 1), *B = rand_f32(K * N, 1), *bias = rand_f32(N, 1), *C = calloc(M * N, 4);
    CHECK(k_gemm_f32(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N) == 0);
    for (int64_t i = 0; i < M * N; i++) C[i] += bias[i % N];
    KcGemmCtx *ctx = NULL;
    CHECK(kc_gemm_ctx_create(&ctx, 32u << 20) == 0);
    void *dA = dev_from(A, 4 * M * K), *dB = dev_from(B, 4 * K * N), *db = dev_from(bias, 4 * N), *dC = dev_poisoned(4 * M * N);
    int rc = ctx ? kc_gemm(ctx, 0, 0, M, N, K, 1.0f, dA, K, dB, N, 0.0f, dC, N, DT_F32, DT_F32, KC_EPI_BIAS, db, NULL) : -1;
    if (rc) printf("kc_gemm: %s\n", cuda_last_error());
    float *got = fetch_f32(dC, M * N);
    CHECK(rc == 0 && close_f32(got, C, M * N, 1e-5));
    kc_gemm_ctx_destroy(ctx);
    free(A), free(B), free(bias), free(C), free(got);
    kc_free(0, dA), kc_free(0, dB), kc_free(0, db), kc_free(0, dC);
}

/* fp8 products: quantised operands, a float64 reference of the same
 * decoded values times the scales; a GPU older than 8.9 must refuse clearly. */
static void test_gemm_fp8(void) {
    enum { M = 32, N = 48, K = 64 };
    uint8_t a[M * K], b[N * K];
    float want[M * N], mag[M * N];
    const float sa = 0.5f, sb = 2.0f;
    for (int i = 0; i < M * K; i++) a[i] = f32_to_f8e4m3(frand() * 4);
    for (int i = 0; i < N * K; i++) b[i] = f32_to_f8e4m3(frand() * 4);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double acc = 0, abs_sum = 0;
            for (int k = 0; k < K; k++) {
                const double t = (double)f8e4m3_to_f32(a[m * K + k]) * f8e4m3_to_f32(b[n * K + k]);
                acc += t, abs_sum += fabs(t);
            }
            want[m * N + n] = (float)(acc * sa * sb), mag[m * N + n] = (float)(abs_sum * sa * sb);
        }
    KcGemmCtx *ctx = NULL;
    CHECK(kc_gemm_ctx_create(&ctx, 32u << 20) == 0);
    void *da = dev_from(a, sizeof a), *db = dev_from(b, sizeof b), *dsa = dev_from(&sa, 4), *dsb = dev_from(&sb, 4);
    void *dc = dev_poisoned(sizeof want);
    int rc = kc_gemm_fp8(ctx, M, N, K, 1.0f, da, DT_F8E4M3, K, db, DT_F8E4M3, K, dsa, dsb, dc, DT_F32, N, NULL, NULL);
    if (rc) {
        printf("kc_gemm_fp8: %s\n", cuda_last_error());
        CHECK(strstr(cuda_last_error(), "compute capability 8.9 or newer") != NULL);
    } else {
        /* Hopper's fp8 tensor cores keep about 14 bits of the running sum
         * (DeepSeek-V3's report, section 3.3.2): 2^-13 of the sum of |terms| */
        float *got = fetch_f32(dc, M * N);
        int ok = 1;
        for (int i = 0; i < M * N; i++) ok = ok && fabsf(got[i] - want[i]) <= 0x1p-13f * mag[i] + 0x1p-23f * fabsf(want[i]);
        CHECK(ok);
        free(got);
    }
    kc_gemm_ctx_destroy(ctx);
    kc_free(0, da), kc_free(0, db), kc_free(0, dsa), kc_free(0, dsb), kc_free(0, dc);
}

/* Three products whose operands interleave, as the heads of a (B, L, H, D)
 * tensor: head h's (rows, cols) matrix at h cols with rows H cols apart.
 * Against a loop over the CPU GEMM. */
static void test_gemm_batched(void) {
    const int64_t M = 37, N = 29, K = 16, H = 3;
    float *A = rand_f32(M * H * K, 1), *B = rand_f32(N * H * K, 1), *C = calloc(M * H * N, 4);
    for (int64_t h = 0; h < H; h++) /* C_h = A_h B_h^T */
        CHECK(k_gemm_f32(0, 1, M, N, K, 1.0f, A + h * K, H * K, B + h * K, H * K, 0.0f, C + h * N, H * N) == 0);
    KcGemmCtx *ctx = NULL;
    CHECK(kc_gemm_ctx_create(&ctx, 32u << 20) == 0);
    void *dA = dev_from(A, 4 * M * H * K), *dB = dev_from(B, 4 * N * H * K), *dC = dev_poisoned(4 * M * H * N);
    int rc = ctx ? kc_gemm_batched(ctx, 0, 1, M, N, K, 1.0f, dA, H * K, K, dB, H * K, K, 0.0f, dC, H * N, N, H, DT_F32,
                                   NULL)
                 : -1;
    if (rc) printf("kc_gemm_batched: %s\n", cuda_last_error());
    float *got = fetch_f32(dC, M * H * N);
    CHECK(rc == 0 && close_f32(got, C, M * H * N, 1e-5));
    kc_gemm_ctx_destroy(ctx);
    kc_free(0, dA), kc_free(0, dB), kc_free(0, dC);
    free(A), free(B), free(C), free(got);
}

/* K = 0, no product: C = beta C. Poisoned (NaN) outputs become zeros for
 * beta 0 (kc_gemm, the interleaved batch, float64), C stays for beta 1 and
 * halves for beta 0.5. No operand is read (NULL). */
static void test_gemm_empty_k(void) {
    enum { M = 3, N = 5, H = 2 };
    float zero[H * M * N] = {0}, one[M * N], half[M * N];
    double zero64[M * N] = {0}, got64[M * N];
    for (int i = 0; i < M * N; i++) one[i] = 1.0f, half[i] = 0.5f;
    KcGemmCtx *ctx = NULL;
    CHECK(kc_gemm_ctx_create(&ctx, 32u << 20) == 0);
    void *dz = dev_poisoned(sizeof one), *dbatch = dev_poisoned(sizeof zero), *d64 = dev_poisoned(sizeof zero64);
    void *d1 = dev_from(one, sizeof one), *dh = dev_from(one, sizeof one);
    const float beta[3] = {0.0f, 1.0f, 0.5f};
    void *const c[3] = {dz, d1, dh};
    for (int i = 0; i < 3; i++)
        CHECK(kc_gemm(ctx, 0, 0, M, N, 0, 1.0f, NULL, 1, NULL, N, beta[i], c[i], N, DT_F32, DT_F32, KC_EPI_NONE, NULL,
                      NULL) == 0);
    CHECK(kc_gemm_batched(ctx, 0, 1, M, N, 0, 1.0f, NULL, 1, 0, NULL, 1, 0, 0.0f, dbatch, H * N, N, H, DT_F32, NULL) == 0);
    CHECK(kc_gemm_f64(ctx, 0, 0, M, N, 0, 1.0, NULL, 1, NULL, N, 0.0, d64, N, NULL) == 0);
    float *z = fetch_f32(dz, M * N), *b = fetch_f32(dbatch, H * M * N), *o = fetch_f32(d1, M * N), *h = fetch_f32(dh, M * N);
    to_host(got64, d64, sizeof got64);
    CHECK(memcmp(z, zero, sizeof one) == 0 && memcmp(b, zero, sizeof zero) == 0);
    CHECK(memcmp(o, one, sizeof one) == 0 && memcmp(h, half, sizeof half) == 0);
    CHECK(memcmp(got64, zero64, sizeof zero64) == 0);
    kc_gemm_ctx_destroy(ctx);
    free(z), free(b), free(o), free(h);
    kc_free(0, dz), kc_free(0, dbatch), kc_free(0, d64), kc_free(0, d1), kc_free(0, dh);
}

static void test_reduce(void) {
    const int64_t outer = 3, n = 1000, inner = 7;
    float *x = rand_f32(outer * n * inner, 1), want[21];
    k_reduce_f32(KR_SUM, x, outer, n, inner, want);
    void *dx = dev_from(x, 4 * outer * n * inner), *dy = dev_poisoned(4 * 21);
    CHECK(kc_reduce(KR_SUM, dx, DT_F32, outer, n, inner, dy, NULL) == 0);
    float *got = fetch_f32(dy, 21);
    CHECK(close_f32(got, want, 21, 1e-5));
    free(x), free(got), kc_free(0, dx), kc_free(0, dy);
}

static void test_norm(void) {
    const int64_t n = 100003;
    float *x = rand_f32(n, 3);
    void *dx = dev_from(x, 4 * n), *dout = dev_poisoned(8);
    static const double ps[6] = {2, 1, INFINITY, 0, -INFINITY, -1.5};
    int ok = 1;
    for (int k = 0; k < 6; k++) {
        double got = NAN, want = k_norm_pow_f32(n, x, ps[k]);
        ok &= kc_norm_pow(dx, DT_F32, n, ps[k], dout, NULL) == 0;
        to_host(&got, dout, 8);
        ok &= fabs(got - want) <= 1e-12 * fmax(want, 1);
    }
    double empty = 0; /* no element: min's start, inf */
    ok &= kc_norm_pow(dx, DT_F32, 0, -INFINITY, dout, NULL) == 0;
    to_host(&empty, dout, 8);
    CHECK(ok && empty == INFINITY);
    free(x), kc_free(0, dx), kc_free(0, dout);
}

static void test_var_pool(void) {
    const int64_t outer = 3, n = 50, inner = 4;
    float *x = rand_f32(outer * n * inner, 2), want[12];
    k_var_f32(x, outer, n, inner, 1.0, want);
    void *dx = dev_from(x, 4 * outer * n * inner), *dv = dev_poisoned(4 * 12);
    CHECK(kc_var(dx, DT_F32, outer, n, inner, 1.0, dv, NULL) == 0);
    float *got = fetch_f32(dv, 12);
    CHECK(close_f32(got, want, 12, 1e-5));
    /* 3x3 windows, stride 2, padding 1 over (6, 9, 11) planes */
    const KPool2d g = {.NC = 6, .H = 9, .W = 11, .OH = 5, .OW = 6, .KH = 3, .KW = 3, .sh = 2, .sw = 2, .ph = 1, .pw = 1, .dh = 1, .dw = 1};
    const int64_t nx = 6 * 9 * 11, ny = 6 * 5 * 6;
    float *px = rand_f32(nx, 1), *py = malloc(4 * ny), *gy = rand_f32(ny, 1), *gx = malloc(4 * nx);
    uint8_t *code = malloc((size_t)ny), *gcode = malloc((size_t)ny);
    k_max_pool2d_fwd_f32(&g, px, py, NULL, code);
    k_max_pool2d_bwd_f32(&g, gy, NULL, code, gx);
    void *dpx = dev_from(px, 4 * nx), *dpy = dev_poisoned(4 * ny), *dcode = dev_poisoned((size_t)ny);
    void *dgy = dev_from(gy, 4 * ny), *dgx = dev_poisoned(4 * nx);
    CHECK(kc_max_pool2d_fwd(DT_F32, &g, dpx, dpy, NULL, dcode, NULL) == 0);
    CHECK(kc_max_pool2d_bwd(DT_F32, &g, dgy, NULL, dcode, dgx, NULL) == 0);
    float *gpy = fetch_f32(dpy, ny), *ggx = fetch_f32(dgx, nx);
    to_host(gcode, dcode, (size_t)ny);
    CHECK(memcmp(gpy, py, 4 * ny) == 0 && memcmp(gcode, code, (size_t)ny) == 0 && close_f32(ggx, gx, nx, 1e-6));
    free(x), free(got), free(px), free(py), free(gy), free(gx), free(code), free(gcode), free(gpy), free(ggx);
    kc_free(0, dx), kc_free(0, dv), kc_free(0, dpx), kc_free(0, dpy), kc_free(0, dcode), kc_free(0, dgy), kc_free(0, dgx);
}

static void test_conv(void) {
    const KConv2d g = {.N = 2, .C = 4, .H = 7, .W = 8, .O = 6, .KH = 3, .KW = 3, .OH = 4, .OW = 8,
                       .sh = 2, .sw = 1, .ph = 1, .pw = 1, .dh = 1, .dw = 1, .groups = 2};
    const int64_t nx = 2 * 4 * 7 * 8, nw = 6 * 2 * 9, ny = 2 * 6 * 4 * 8;
    float *x = rand_f32(nx, 1), *w = rand_f32(nw, 1), *b = rand_f32(6, 1), *gy = rand_f32(ny, 1);
    float *y = malloc(4 * ny), *gx = malloc(4 * nx), *gw = malloc(4 * nw), gb[6];
    CHECK(k_conv2d_fwd(DT_F32, &g, x, w, b, y) == 0 && k_conv2d_bwd(DT_F32, &g, x, w, gy, gx, gw, gb) == 0);
    KcGemmCtx *ctx = NULL;
    CHECK(kc_gemm_ctx_create(&ctx, 32u << 20) == 0);
    void *dx = dev_from(x, 4 * nx), *dw = dev_from(w, 4 * nw), *db = dev_from(b, 24), *dgy = dev_from(gy, 4 * ny);
    void *dy = dev_poisoned(4 * ny), *dgx = dev_poisoned(4 * nx), *dgw = dev_poisoned(4 * nw), *dgb = dev_poisoned(24);
    CHECK(ctx && kc_conv2d_fwd(ctx, DT_F32, &g, dx, dw, db, dy, NULL) == 0);
    CHECK(ctx && kc_conv2d_bwd(ctx, DT_F32, &g, dx, dw, dgy, dgx, dgw, dgb, NULL) == 0);
    float *r[4] = {fetch_f32(dy, ny), fetch_f32(dgx, nx), fetch_f32(dgw, nw), fetch_f32(dgb, 6)};
    CHECK(close_f32(r[0], y, ny, 1e-5) && close_f32(r[1], gx, nx, 1e-5));
    CHECK(close_f32(r[2], gw, nw, 1e-5) && close_f32(r[3], gb, 6, 1e-5));
    kc_gemm_ctx_destroy(ctx);
    void *bufs[8] = {dx, dw, db, dgy, dy, dgx, dgw, dgb};
    for (int i = 0; i < 8; i++) kc_free(0, bufs[i]);
    for (int i = 0; i < 4; i++) free(r[i]);
    free(x), free(w), free(b), free(gy), free(y), free(gx), free(gw);
}

static void test_oom_message(void) {
    void *p = NULL;
    CHECK(kc_malloc(0, (size_t)1 << 50, NULL, &p) == -1 && strstr(cuda_last_error(), "out of memory"));
}

static void gpu_tests(void) {
    test_casts();
    test_binary_broadcast();
    test_cross_entropy();
    test_softmax();
    test_layernorm();
    test_adam_bitwise();
    test_rng_matches_cpu();
    test_gemm();
    test_gemm_fp8();
    test_gemm_batched();
    test_gemm_empty_k();
    test_reduce();
    test_norm();
    test_var_pool();
    test_conv();
    test_oom_message();
}
#define GPU_TESTS 16

int main(void) {
    char why[256];
    const char *expect = getenv("ACCEL_EXPECT_GPU");
    test_binary_semantics();
    test_unary_semantics();
    test_unary_grad_semantics();
    test_iter_offsets();
    test_gemm_layout();
    int n = cuda_device_count(why, sizeof why);
    if (n == 0) {
        CHECK(!(expect && strcmp(expect, "1") == 0)); /* the GPU machine must see its GPU */
        if (!driver_present()) test_no_gpu_path();
        printf("no GPU (%s): %d GPU checks skipped\n", why, GPU_TESTS);
        n_skip += GPU_TESTS;
    } else {
        printf("%d GPU(s)\n", n);
        gpu_tests();
    }
    printf("%d passed, %d failed, %d skipped\n", n_pass, n_fail, n_skip);
    return n_fail != 0;
}
