/* test_kernels.c: unit tests of the CPU kernels (kernels/cpu) and the scalar
 * dtype converters (kernels/dtype.h). Every kernel is compared with a naive
 * float64 reference written here (closed forms, plain loops, central finite
 * differences), never with the kernel itself. Each CHECK / CHECK_CLOSE is one
 * counted check; failures print file:line and the first bad element. The
 * last line is "N passed, N failed"; exit status 1 if any failed.
 *
 *   ./test_kernels          run the tests
 *   ./test_kernels bench    also print GEMM GFLOP/s and small-op timings */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <immintrin.h>
#include "cpu/kernels.h"
#include "cpu/vmath.h"

/* ======================= harness ======================= */

static int n_pass, n_fail;

static void check_true(int ok, const char *file, int line, const char *expr) {
    if (ok) {
        n_pass++;
        return;
    }
    n_fail++;
    printf("%s:%d: FAIL %s\n", file, line, expr);
}
#define CHECK(cond) check_true(!!(cond), __FILE__, __LINE__, #cond)

/* printf into a rotating static buffer, for check labels */
static const char *fmt(const char *f, ...) {
    static char buf[8][160];
    static int k;
    char *b = buf[k++ & 7];
    va_list ap;
    va_start(ap, f);
    vsnprintf(b, sizeof buf[0], f, ap);
    va_end(ap);
    return b;
}

/* |got - want| <= atol + rtol |want|; NaN must match NaN, inf must match. */
static int near(double got, double want, double rtol, double atol) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs(got - want) <= atol + rtol * fabs(want);
}

/* got elements of type 'f' float, 'd' double, 'i' int64, 'u' uint8. */
static double elem(char type, const void *p, int64_t i) {
    switch (type) {
    case 'f': return ((const float *)p)[i];
    case 'd': return ((const double *)p)[i];
    case 'i': return (double)((const int64_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

static void check_close(const char *file, int line, const char *what, char type,
                        const void *got, const double *want, int64_t n, double rtol,
                        double atol) {
    for (int64_t i = 0; i < n; i++) {
        double g = elem(type, got, i);
        if (!near(g, want[i], rtol, atol)) {
            n_fail++;
            printf("%s:%d: FAIL %s: [%lld] got %.17g want %.17g\n", file, line, what,
                   (long long)i, g, want[i]);
            return;
        }
    }
    n_pass++;
}
#define TYPECHAR(p)                                                         \
    _Generic((p), float *: 'f', const float *: 'f', double *: 'd',          \
             const double *: 'd', int64_t *: 'i', const int64_t *: 'i',     \
             uint8_t *: 'u', const uint8_t *: 'u')
#define CHECK_CLOSE(what, got, want, n, rtol, atol)                         \
    check_close(__FILE__, __LINE__, (what), TYPECHAR(got), (got), (want), (n), (rtol), (atol))

static void check_eq_i64(const char *file, int line, const char *what, const int64_t *got,
                         const int64_t *want, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            n_fail++;
            printf("%s:%d: FAIL %s: [%lld] got %lld want %lld\n", file, line, what,
                   (long long)i, (long long)got[i], (long long)want[i]);
            return;
        }
    n_pass++;
}
#define CHECK_EQ_I64(what, got, want, n) check_eq_i64(__FILE__, __LINE__, (what), (got), (want), (n))

/* ---- deterministic random numbers ---- */
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) { /* [0, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}
static double uni(double lo, double hi) { return lo + (hi - lo) * urand(); }
static int64_t irand(int64_t lo, int64_t hi) { return lo + (int64_t)(urand() * (double)(hi - lo + 1)); }

static void *xmalloc(size_t n) {
    void *p = calloc(n ? n : 1, 1); /* zeroed: no uninitialised reads */
    if (!p) {
        printf("out of memory\n");
        exit(2);
    }
    return p;
}
#define NEW(T, n) ((T *)xmalloc(sizeof(T) * (size_t)(n)))

static float *rand_f(int64_t n, double lo, double hi) {
    float *x = NEW(float, n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)uni(lo, hi);
    return x;
}
static double *rand_d(int64_t n, double lo, double hi) {
    double *x = NEW(double, n);
    for (int64_t i = 0; i < n; i++) x[i] = uni(lo, hi);
    return x;
}
static double *to_d(const float *x, int64_t n) {
    double *y = NEW(double, n);
    for (int64_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

/* ======================= dtype.h converters ======================= */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_bf16(void) {
    CHECK(f32_to_bf16(1.0f) == 0x3F80);
    CHECK(f32_to_bf16(-2.0f) == 0xC000);
    CHECK(f32_to_bf16(-0.0f) == 0x8000);
    CHECK(bf16_to_f32(0x3F80) == 1.0f);
    CHECK(f32_to_bf16(1.0f + 0x1p-8f) == 0x3F80);             /* tie -> even */
    CHECK(f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3F82);         /* tie -> even (up) */
    CHECK(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3F81);  /* above tie */
    CHECK(f32_to_bf16(INFINITY) == 0x7F80);
    CHECK(f32_to_bf16(3.4028235e38f) == 0x7F80);              /* rounds to inf */
    CHECK(isnan(bf16_to_f32(f32_to_bf16(NAN))));
    CHECK(isnan(bf16_to_f32(f32_to_bf16(bits_f32(0x7F800001))))); /* sNaN stays NaN */
    int ok = 1; /* every non-NaN bf16 survives a round trip */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = bf16_to_f32((uint16_t)h);
        if (!isnan(f) && f32_to_bf16(f) != h) ok = 0;
    }
    CHECK(ok);
    /* k_cast's 8-lane runs give the scalar codec's bits: every bf16, and f32
     * bit patterns striding through all exponents (ties, NaNs, inf, denormals) */
    enum { NB = 65536 + 7 };
    uint16_t *h = NEW(uint16_t, NB), *h2 = NEW(uint16_t, NB);
    float *f = NEW(float, NB);
    for (int i = 0; i < NB; i++) h[i] = (uint16_t)(i * 1u);
    k_cast(NB, h, DT_BF16, 1, f, DT_F32, 1);
    int same = 1;
    for (int i = 0; i < NB; i++) same &= memcmp(&f[i], &(float){bf16_to_f32(h[i])}, 4) == 0;
    CHECK(same);
    same = 1;
    for (uint32_t base = 0; base < 64; base++) { /* high halves: all 65536 (inf, NaN, denormals); low: ties or hashed */
        for (int i = 0; i < NB; i++) {
            const uint32_t lo = i % 4 == 0 ? 0x8000u : ((uint32_t)i * 7919u + base * 104729u) & 0xffffu;
            const uint32_t u = (((uint32_t)i + base * 1021u) & 0xffffu) << 16 | lo;
            memcpy(&f[i], &u, 4);
        }
        k_cast(NB, f, DT_F32, 1, h2, DT_BF16, 1);
        for (int i = 0; i < NB; i++) same &= h2[i] == f32_to_bf16(f[i]);
    }
    CHECK(same);
    free(h), free(h2), free(f);
}

static void test_f16(void) {
    CHECK(f32_to_f16(1.0f) == 0x3C00);
    CHECK(f32_to_f16(65504.0f) == 0x7BFF);
    CHECK(f32_to_f16(65519.0f) == 0x7BFF); /* below the tie: max */
    CHECK(f32_to_f16(65520.0f) == 0x7C00); /* tie, rounds to inf */
    CHECK(f32_to_f16(-2.0f) == 0xC000);
    CHECK(f32_to_f16(0x1p-24f) == 0x0001);        /* smallest subnormal */
    CHECK(f32_to_f16(0x1p-25f) == 0x0000);        /* tie -> even (0) */
    CHECK(f32_to_f16(3 * 0x1p-25f) == 0x0002);    /* tie -> even (2) */
    CHECK(f32_to_f16(1.0f + 0x1p-11f) == 0x3C00); /* tie -> even */
    CHECK(f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3C02);
    CHECK(f32_to_f16(INFINITY) == 0x7C00);
    CHECK(f16_to_f32(0x7BFF) == 65504.0f);
    CHECK(f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(isnan(f16_to_f32(f32_to_f16(NAN))));
    /* against the F16C hardware conversion: all 65536 codes decoded, and a
     * sweep of f32 bit patterns encoded (NaN only needs to stay NaN) */
    int dec_ok = 1, enc_ok = 1;
    for (uint32_t h = 0; h < 65536; h++) {
        float a = f16_to_f32((uint16_t)h), b = _cvtsh_ss((uint16_t)h);
        if (isnan(b) ? !isnan(a) : f32_bits(a) != f32_bits(b)) dec_ok = 0;
    }
    for (uint64_t u = 0; u < 0x100000000ull; u += 4093) {
        float f = bits_f32((uint32_t)u);
        uint16_t a = f32_to_f16(f), b = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
        if (isnan(f) ? !isnan(f16_to_f32(a)) : a != b) enc_ok = 0;
    }
    CHECK(dec_ok);
    CHECK(enc_ok);
}

/* Every non-NaN code of an 8-bit format round-trips. */
static int fp8_roundtrip(float (*dec)(uint8_t), uint8_t (*enc)(float)) {
    for (int b = 0; b < 256; b++) {
        float f = dec((uint8_t)b);
        if (!isnan(f) && enc(f) != b) return 0;
    }
    return 1;
}

static void test_fp8(void) {
    /* e4m3fn: bias 7, no infinities, S.1111.111 = NaN, max 448 */
    CHECK(f32_to_f8e4m3(448.0f) == 0x7E);
    CHECK(f32_to_f8e4m3(-448.0f) == 0xFE);
    CHECK(f32_to_f8e4m3(1.0f) == 0x38);
    CHECK(f32_to_f8e4m3(464.0f) == 0x7E);      /* tie between 448 and (NaN) 480 */
    CHECK(f32_to_f8e4m3(480.0f) == 0x7E);      /* out of range saturates, as PyTorch 2.x */
    CHECK(f32_to_f8e4m3(-INFINITY) == 0xFE);   /* inf too */
    CHECK(f32_to_f8e4m3(NAN) == 0x7F);
    CHECK(f32_to_f8e5m2(61441.0f) == 0x7C);    /* e5m2 overflows to inf */
    CHECK(f32_to_f8e5m2_sat(61441.0f) == 0x7B); /* the recipe's cast saturates */
    CHECK(f32_to_f8e5m2_sat(-INFINITY) == 0xFB);
    CHECK(f32_to_f8e4m3(1.0625f) == 0x38);     /* tie -> even */
    CHECK(f32_to_f8e4m3(1.1875f) == 0x3A);     /* tie -> even (up) */
    CHECK(f32_to_f8e4m3(0x1p-9f) == 0x01);     /* smallest subnormal */
    CHECK(f32_to_f8e4m3(0x1p-10f) == 0x00);    /* tie -> even (0) */
    CHECK(f8e4m3_to_f32(0x7E) == 448.0f);
    CHECK(f8e4m3_to_f32(0x08) == 0x1p-6f);     /* smallest normal */
    CHECK(isnan(f8e4m3_to_f32(0x7F)));
    CHECK(fp8_roundtrip(f8e4m3_to_f32, f32_to_f8e4m3));
    /* e5m2: bias 15, IEEE-like with infinities, max 57344 */
    CHECK(f32_to_f8e5m2(57344.0f) == 0x7B);
    CHECK(f32_to_f8e5m2(61439.0f) == 0x7B);
    CHECK(f32_to_f8e5m2(61440.0f) == 0x7C);    /* tie -> even = inf */
    CHECK(f32_to_f8e5m2(1.0f) == 0x3C);
    CHECK(f32_to_f8e5m2(1.125f) == 0x3C);      /* tie -> even */
    CHECK(f32_to_f8e5m2(1.375f) == 0x3E);      /* tie -> even (up) */
    CHECK(f32_to_f8e5m2(0x1p-16f) == 0x01);
    CHECK(f32_to_f8e5m2(-INFINITY) == 0xFC);
    CHECK(f8e5m2_to_f32(0x7B) == 57344.0f);
    CHECK(isinf(f8e5m2_to_f32(0x7C)));
    CHECK(isnan(f8e5m2_to_f32(0x7E)));
    CHECK(fp8_roundtrip(f8e5m2_to_f32, f32_to_f8e5m2));
}

/* ======================= casts, fill, where ======================= */

static void test_cast(void) {
    enum { N = 40037 }; /* above KERNEL_PAR_MIN: chunked, parallel */
    float *a = rand_f(N, -70000, 70000);
    a[5] = NAN, a[6] = INFINITY, a[7] = -0.0f, a[8] = 65520.0f, a[9] = 1e-6f;
    uint16_t *h = NEW(uint16_t, N), *bf = NEW(uint16_t, N);
    double *d = NEW(double, N), *want = NEW(double, N);
    float *back = NEW(float, N);

    k_cast(N, a, DT_F32, 1, d, DT_F64, 1);
    for (int i = 0; i < N; i++) want[i] = a[i];
    CHECK_CLOSE("cast f32->f64", d, want, N, 0, 0);

    k_cast(N, a, DT_F32, 1, bf, DT_BF16, 1);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= isnan(a[i]) ? isnan(bf16_to_f32(bf[i])) : bf[i] == f32_to_bf16(a[i]);
    CHECK(ok);
    k_cast(N, bf, DT_BF16, 1, back, DT_F32, 1);
    for (int i = 0; i < N; i++) want[i] = bf16_to_f32(bf[i]);
    CHECK_CLOSE("cast bf16->f32", back, want, N, 0, 0);

    k_cast(N, a, DT_F32, 1, h, DT_F16, 1); /* F16C path vs dtype.h */
    ok = 1;
    for (int i = 0; i < N; i++) ok &= isnan(a[i]) ? isnan(f16_to_f32(h[i])) : h[i] == f32_to_f16(a[i]);
    CHECK(ok);
    k_cast(N, h, DT_F16, 1, back, DT_F32, 1);
    for (int i = 0; i < N; i++) want[i] = f16_to_f32(h[i]);
    CHECK_CLOSE("cast f16->f32", back, want, N, 0, 0);

    /* strided: every 3rd of a into every 2nd slot of an f64 buffer */
    for (int i = 0; i < 2 * 100; i++) d[i] = -1;
    k_cast(100, a, DT_F32, 3, d, DT_F64, 2);
    ok = 1;
    for (int i = 0; i < 100; i++) ok &= (d[2 * i] == a[3 * i] || isnan(a[3 * i])) && d[2 * i + 1] == -1;
    CHECK(ok);

    /* float -> int as PyTorch on x86: truncates toward zero; NaN, inf and out of range -> the minimum,
       uint8 the int64 result's low byte (PyTorch 2.15: x.to(int64 / int32 / uint8)) */
    double src[6] = {NAN, 1e30, -1e30, -2.7, 2.7, 9007199254740993.0};
    int64_t got[6], exp6[6] = {INT64_MIN, INT64_MIN, INT64_MIN, -2, 2, 9007199254740992};
    k_cast(6, src, DT_F64, 1, got, DT_I64, 1);
    CHECK_EQ_I64("cast f64->i64", got, exp6, 6);
    float fsrc[5] = {NAN, INFINITY, 3e9f, -1.5f, 300.7f};
    int32_t gi32[5];
    uint8_t gu8[5];
    k_cast(5, fsrc, DT_F32, 1, gi32, DT_I32, 1);
    CHECK(gi32[0] == INT32_MIN && gi32[1] == INT32_MIN && gi32[2] == INT32_MIN && gi32[3] == -1 && gi32[4] == 300);
    k_cast(5, fsrc, DT_F32, 1, gu8, DT_U8, 1);
    CHECK(gu8[0] == 0 && gu8[1] == 0 && gu8[2] == 0 && gu8[3] == 255 && gu8[4] == 44);
    /* int -> int exact through the generic path */
    int64_t big[2] = {INT64_MAX, -5};
    int32_t i32[2];
    uint8_t u8[2];
    k_cast(2, big, DT_I64, 1, i32, DT_I32, 1);
    CHECK(i32[0] == -1 && i32[1] == -5);
    k_cast(2, big, DT_I64, 1, u8, DT_U8, 1);
    CHECK(u8[0] == 255 && u8[1] == 251);
    /* to bool: nonzero (NaN included) is true */
    float fb[4] = {0.0f, -0.0f, NAN, 0.5f};
    uint8_t b4[4];
    k_cast(4, fb, DT_F32, 1, b4, DT_BOOL, 1);
    CHECK(b4[0] == 0 && b4[1] == 0 && b4[2] == 1 && b4[3] == 1);
    /* fp8 via the generic path */
    double f8src[3] = {448.0, 57344.0, -1.0};
    uint8_t e4[3], e5[3];
    k_cast(3, f8src, DT_F64, 1, e4, DT_F8E4M3, 1);
    k_cast(3, f8src, DT_F64, 1, e5, DT_F8E5M2, 1);
    CHECK(e4[0] == 0x7E && e4[1] == 0x7E && e4[2] == 0xB8);
    CHECK(e5[0] == 0x5F && e5[1] == 0x7B && e5[2] == 0xBC);
    /* same dtype: plain strided copy */
    int64_t seq[10], cp[5];
    for (int i = 0; i < 10; i++) seq[i] = i * 11;
    k_cast(5, seq, DT_I64, 2, cp, DT_I64, 1);
    CHECK(cp[0] == 0 && cp[1] == 22 && cp[4] == 88);
    free(a), free(h), free(bf), free(d), free(want), free(back);
}

static void test_fill(void) {
    float f[10];
    for (int i = 0; i < 10; i++) f[i] = -1;
    k_fill(5, f, DT_F32, 2, 2.5);
    CHECK(f[0] == 2.5f && f[1] == -1 && f[8] == 2.5f && f[9] == -1);
    uint16_t b[3];
    k_fill(3, b, DT_BF16, 1, 1.0);
    CHECK(b[0] == 0x3F80 && b[2] == 0x3F80);
    k_fill(3, b, DT_F16, 1, 65504.0);
    CHECK(b[1] == 0x7BFF);
    int64_t q[3];
    k_fill(3, q, DT_I64, 1, -3.0);
    CHECK(q[0] == -3 && q[2] == -3);
    uint8_t u[3];
    k_fill(3, u, DT_BOOL, 1, 2.0);
    CHECK(u[0] == 1 && u[2] == 1);
    enum { N = 100000 };
    double *big = NEW(double, N), *want = NEW(double, N);
    k_fill(N, big, DT_F64, 1, -7.25);
    for (int i = 0; i < N; i++) want[i] = -7.25;
    CHECK_CLOSE("fill f64 big", big, want, N, 0, 0);
    free(big), free(want);
}

static void test_where(void) {
    enum { N = 50001 };
    uint8_t *c = NEW(uint8_t, N);
    float *a = rand_f(N, -1, 1), *b = rand_f(N, -1, 1), *o = NEW(float, N);
    double *want = NEW(double, N);
    for (int i = 0; i < N; i++) c[i] = urand() < 0.5;
    k_where(N, c, 1, a, 1, b, 1, o, 1, 4);
    for (int i = 0; i < N; i++) want[i] = c[i] ? a[i] : b[i];
    CHECK_CLOSE("where f32 contiguous", o, want, N, 0, 0);
    /* broadcast a scalar a (stride 0), strided b and o */
    k_where(100, c, 1, a, 0, b, 2, o, 3, 4);
    for (int i = 0; i < 100; i++) want[i] = c[i] ? a[0] : b[2 * i];
    int ok = 1;
    for (int i = 0; i < 100; i++) ok &= o[3 * i] == want[i];
    CHECK(ok);
    /* 1-, 2- and 8-byte elements */
    uint8_t a1[4] = {1, 2, 3, 4}, b1[4] = {9, 9, 9, 9}, o1[4], c4[4] = {1, 0, 0, 1};
    k_where(4, c4, 1, a1, 1, b1, 1, o1, 1, 1);
    CHECK(o1[0] == 1 && o1[1] == 9 && o1[2] == 9 && o1[3] == 4);
    uint16_t a2[4] = {1, 2, 3, 4}, b2[4] = {9, 9, 9, 9}, o2[4];
    k_where(4, c4, 1, a2, 1, b2, 1, o2, 1, 2);
    CHECK(o2[0] == 1 && o2[1] == 9 && o2[3] == 4);
    int64_t a8[4] = {INT64_MIN, 2, 3, INT64_MAX}, b8[1] = {7}, o8[4];
    k_where(4, c4, 1, a8, 1, b8, 0, o8, 1, 8);
    CHECK(o8[0] == INT64_MIN && o8[1] == 7 && o8[2] == 7 && o8[3] == INT64_MAX);
    free(c), free(a), free(b), free(o), free(want);
}

/* ======================= binary ======================= */

static const char *bin_name[KB_COUNT] = {"add", "sub", "mul", "div", "pow", "max", "min",
                                         "eq", "ne", "lt", "le", "gt", "ge", "and", "or",
                                         "xor", "floordiv", "remainder", "fmod", "atan2", "band", "bor",
                                         "bxor", "shl", "shr"};

/* Reference in double; floor division / remainder from the exact quotient
 * (long double) so the test does not share the kernels' fmod algorithm. */
static double ref_binary(KBinOp op, double x, double y) {
    switch (op) {
    case KB_ADD: return x + y;
    case KB_SUB: return x - y;
    case KB_MUL: return x * y;
    case KB_DIV: return x / y;
    case KB_POW: return pow(x, y);
    case KB_MAX: return isnan(x) || isnan(y) ? NAN : x > y ? x : y;
    case KB_MIN: return isnan(x) || isnan(y) ? NAN : x < y ? x : y;
    case KB_EQ: return x == y;
    case KB_NE: return x != y;
    case KB_LT: return x < y;
    case KB_LE: return x <= y;
    case KB_GT: return x > y;
    case KB_GE: return x >= y;
    case KB_AND: return x != 0 && y != 0;
    case KB_OR: return x != 0 || y != 0;
    case KB_XOR: return (x != 0) != (y != 0);
    case KB_FLOORDIV: return (double)floorl((long double)x / (long double)y);
    case KB_REMAINDER: return (double)((long double)x - (long double)y * floorl((long double)x / y));
    case KB_FMOD: return (double)((long double)x - (long double)y * truncl((long double)x / y));
    case KB_ATAN2: return (double)atan2l((long double)x, (long double)y);
    default: return NAN;
    }
}

/* Inputs exercising op: positive bases for pow, few exact ties for cmp. */
static void binary_inputs(KBinOp op, int64_t n, float *a, float *b) {
    for (int64_t i = 0; i < n; i++) {
        a[i] = (float)uni(-10, 10), b[i] = (float)uni(-10, 10);
        if (op == KB_POW) a[i] = (float)uni(0.1, 4), b[i] = (float)uni(-3, 3);
        if (fabsf(b[i]) < 0.05f) b[i] = 0.5f;
        if (i % 7 == 0) b[i] = a[i];          /* equal pairs for comparisons */
        if (i % 11 == 0) a[i] = 0;            /* zeros for the logical ops */
    }
}

/* One op over 4 stride patterns: contiguous, b broadcast, a broadcast, strided. */
static void binary_case_f32(KBinOp op, int64_t n) {
    float *a = NEW(float, 3 * n), *b = NEW(float, 3 * n);
    binary_inputs(op, 3 * n, a, b);
    const int cmp = kbin_is_compare(op);
    void *o = xmalloc((size_t)(3 * n) * 8);
    double *want = NEW(double, n), *got = NEW(double, n);
    const double rtol = op == KB_POW ? 2e-6 : 1e-6;
    struct { int64_t sa, sb, so; } pat[4] = {{1, 1, 1}, {1, 0, 1}, {0, 1, 1}, {2, 3, 2}};
    for (int p = 0; p < 4; p++) {
        k_binary_f32(op, n, a, pat[p].sa, b, pat[p].sb, o, pat[p].so);
        for (int64_t i = 0; i < n; i++) {
            want[i] = ref_binary(op, a[i * pat[p].sa], b[i * pat[p].sb]);
            if (!cmp && op != KB_FLOORDIV && op != KB_REMAINDER && op != KB_FMOD) want[i] = (float)want[i];
            got[i] = cmp ? ((uint8_t *)o)[i * pat[p].so] : ((float *)o)[i * pat[p].so];
        }
        CHECK_CLOSE(fmt("binary f32 %s pattern %d", bin_name[op], p), got, want, n, rtol, 0);
    }
    free(a), free(b), free(o), free(want), free(got);
}

static void binary_case_f64(KBinOp op, int64_t n) {
    float *af = NEW(float, n), *bf = NEW(float, n);
    binary_inputs(op, n, af, bf);
    double *a = to_d(af, n), *b = to_d(bf, n), *want = NEW(double, n), *got = NEW(double, n);
    const int cmp = kbin_is_compare(op);
    void *o = xmalloc((size_t)n * 8);
    k_binary_f64(op, n, a, 1, b, 1, o, 1);
    for (int64_t i = 0; i < n; i++) {
        want[i] = ref_binary(op, a[i], b[i]);
        got[i] = cmp ? ((uint8_t *)o)[i] : ((double *)o)[i];
    }
    CHECK_CLOSE(fmt("binary f64 %s", bin_name[op]), got, want, n, 1e-14, 0);
    k_binary_f64(op, n, a, 0, b, 1, o, 1); /* a broadcast */
    for (int64_t i = 0; i < n; i++) {
        want[i] = ref_binary(op, a[0], b[i]);
        got[i] = cmp ? ((uint8_t *)o)[i] : ((double *)o)[i];
    }
    CHECK_CLOSE(fmt("binary f64 %s a broadcast", bin_name[op]), got, want, n, 1e-14, 0);
    free(af), free(bf), free(a), free(b), free(o), free(want), free(got);
}

/* int64 reference: truncating DIV, floor // and %, exact small powers;
 * bitwise ops by C's operators, shifts outside [0, 64) as PyTorch's (0 for
 * <<, the sign for >>) and << through uint64 (no signed overflow). */
static int64_t ref_binary_i64(KBinOp op, int64_t x, int64_t y) {
    switch (op) {
    case KB_BAND: return x & y;
    case KB_BOR: return x | y;
    case KB_BXOR: return x ^ y;
    case KB_SHL: return y < 0 || y > 63 ? 0 : (int64_t)((uint64_t)x << y);
    case KB_SHR: return y < 0 || y > 63 ? (x < 0 ? -1 : 0) : (x < 0 ? ~(~x >> y) : x >> y);
    case KB_DIV: return (int64_t)trunc((double)x / (double)y);
    case KB_FLOORDIV: return (int64_t)floor((double)x / (double)y);
    case KB_REMAINDER: return x - y * (int64_t)floor((double)x / (double)y);
    case KB_FMOD: return x - y * (int64_t)trunc((double)x / (double)y);
    case KB_POW: return (int64_t)llround(pow((double)x, (double)y));
    default: return (int64_t)ref_binary(op, (double)x, (double)y);
    }
}

static void binary_case_i64(KBinOp op, int64_t n) {
    int64_t *a = NEW(int64_t, n), *b = NEW(int64_t, n), *o = NEW(int64_t, 2 * n);
    int64_t *want = NEW(int64_t, n), *got = NEW(int64_t, n);
    for (int64_t i = 0; i < n; i++) {
        a[i] = irand(-1000, 1000), b[i] = irand(-50, 50);
        if (op == KB_POW) a[i] = irand(-9, 9), b[i] = irand(0, 12);
        if (b[i] == 0 && op != KB_POW) b[i] = 3;
        if (i % 7 == 0 && op != KB_POW) b[i] = a[i] ? a[i] : 1;
        if (op == KB_SHL || op == KB_SHR) b[i] = irand(-3, 70); /* past 63 and negative too */
    }
    const int cmp = kbin_is_compare(op);
    /* contiguous, then b broadcast into a strided output (o[2i]) */
    for (int p = 0; p < 2; p++) {
        const int64_t sb = p ? 0 : 1, so = p ? 2 : 1;
        k_binary_i64(op, n, a, 1, b, sb, o, so);
        for (int64_t i = 0; i < n; i++) {
            want[i] = ref_binary_i64(op, a[i], b[i * sb]);
            got[i] = cmp ? ((uint8_t *)o)[i * so] : o[i * so];
        }
        CHECK_EQ_I64(fmt("binary i64 %s pattern %d", bin_name[op], p), got, want, n);
    }
    free(a), free(b), free(o), free(want), free(got);
}

static void test_binary(void) {
    for (int op = 0; op < KB_COUNT; op++) {
        if (!kbin_is_bitwise((KBinOp)op)) { /* integers only: the core refuses float operands */
            binary_case_f32((KBinOp)op, 1000);
            binary_case_f64((KBinOp)op, 1000);
        }
        binary_case_i64((KBinOp)op, 1000);
    }
    binary_case_f32(KB_ADD, 100003); /* parallel chunks, all patterns */
    binary_case_f32(KB_GE, 100003);
    /* NaN propagation of max / min, either side */
    float a[4] = {NAN, 1, NAN, 2}, b[4] = {1, NAN, NAN, 1}, o[4];
    k_binary_f32(KB_MAX, 4, a, 1, b, 1, o, 1);
    CHECK(isnan(o[0]) && isnan(o[1]) && isnan(o[2]) && o[3] == 2);
    k_binary_f32(KB_MIN, 4, a, 1, b, 1, o, 1);
    CHECK(isnan(o[0]) && isnan(o[1]) && isnan(o[2]) && o[3] == 1);
    /* Python semantics of // and % */
    double x[5] = {7.0, -7.0, 7.0, 5.5, -7.0}, y[5] = {0.1, 2.0, -2.0, -2.0, -2.0}, r[5];
    k_binary_f64(KB_FLOORDIV, 5, x, 1, y, 1, r, 1);
    CHECK(r[0] == 69.0 && r[1] == -4.0 && r[2] == -4.0 && r[3] == -3.0 && r[4] == 3.0);
    k_binary_f64(KB_REMAINDER, 5, x, 1, y, 1, r, 1);
    CHECK(fabs(r[0] - fmod(7.0, 0.1)) < 1e-15 && r[1] == 1.0 && r[2] == -1.0 && r[3] == -0.5 &&
          r[4] == -1.0);
    int64_t ix[4] = {-7, 7, INT64_MAX, INT64_MIN}, iy[4] = {2, -2, 1, -1}, io[4];
    k_binary_i64(KB_FLOORDIV, 2, ix, 1, iy, 1, io, 1);
    CHECK(io[0] == -4 && io[1] == -4);
    k_binary_i64(KB_REMAINDER, 2, ix, 1, iy, 1, io, 1);
    CHECK(io[0] == 1 && io[1] == -1);
    k_binary_i64(KB_ADD, 1, ix + 2, 1, iy + 2, 1, io, 1); /* wraps, no UB */
    CHECK(io[0] == INT64_MIN);
    k_binary_i64(KB_DIV, 1, ix + 3, 1, iy + 3, 1, io, 1);
    CHECK(io[0] == INT64_MIN);
    int64_t zero = 0;
    k_binary_i64(KB_DIV, 1, ix, 1, &zero, 1, io, 1); /* no trap: 0 */
    CHECK(io[0] == 0);
}

/* ======================= unary ======================= */

static const char *un_name[KU_COUNT] = {
    "neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "gelu_tanh",
    "silu", "abs", "sin", "cos", "square", "recip", "sign", "clamp", "pow", "rpow", "log1p",
    "expm1", "floor", "ceil", "round", "trunc", "erf", "leaky_relu", "not", "tan", "asin",
    "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10", "erfc", "lgamma",
    "digamma", "bnot"};

/* digamma by differences of long double lgamma, independent of special.h's
 * series: five points, h = 1e-4 of the distance d to the nearest pole (at
 * most 1), so the truncation ~(h / d)^4 and the rounding ~1e-19 / h stay
 * far below double's precision */
static double ref_digamma(double x) {
    double d = x > 0 ? x : fabs(x - nearbyint(x));
    const long double h = 1e-4L * (long double)fmin(d, 1), X = x;
    return (double)((-lgammal(X + 2 * h) + 8 * lgammal(X + h) - 8 * lgammal(X - h) + lgammal(X - 2 * h)) / (12 * h));
}

static double ref_unary(KUnOp op, double x, double p1, double p2) {
    const double k = sqrt(2 / M_PI);
    switch (op) {
    case KU_NEG: return -x;
    case KU_EXP: return exp(x);
    case KU_LOG: return log(x);
    case KU_SQRT: return sqrt(x);
    case KU_RSQRT: return pow(x, -0.5);
    case KU_TANH: return tanh(x);
    case KU_SIGMOID: return 0.5 * (1 + tanh(x / 2));
    case KU_RELU: return x > 0 ? x : 0;
    case KU_GELU: return 0.5 * x * erfc(-x / sqrt(2));
    case KU_GELU_TANH: return 0.5 * x * (1 + tanh(k * (x + 0.044715 * x * x * x)));
    case KU_SILU: return x * 0.5 * (1 + tanh(x / 2));
    case KU_ABS: return x < 0 ? -x : x;
    case KU_SIN: return sin(x);
    case KU_COS: return cos(x);
    case KU_SQUARE: return x * x;
    case KU_RECIP: return 1 / x;
    case KU_SIGN: return isnan(x) ? x : x > 0 ? 1 : x < 0 ? -1 : 0;
    case KU_CLAMP: return fmin(fmax(x, p1), p2);
    case KU_POW: return pow(x, p1);
    case KU_RPOW: return pow(p1, x);
    case KU_LOG1P: return log1p(x);
    case KU_EXPM1: return expm1(x);
    case KU_FLOOR: return floor(x);
    case KU_CEIL: return ceil(x);
    case KU_ROUND: return x - remainder(x, 1.0); /* IEEE remainder: ties to even */
    case KU_TRUNC: return trunc(x);
    case KU_ERF: return erf(x);
    case KU_LEAKY_RELU: return x > 0 ? x : p1 * x;
    case KU_NOT: return x == 0;
    case KU_TAN: return sin(x) / cos(x);
    case KU_ASIN: return atan2(x, sqrt(1 - x * x));
    case KU_ACOS: return atan2(sqrt(1 - x * x), x);
    case KU_ATAN: return atan2(x, 1);
    case KU_SINH: return (exp(x) - exp(-x)) / 2;
    case KU_COSH: return (exp(x) + exp(-x)) / 2;
    case KU_ASINH: return x < 0 ? -log(-x + sqrt(x * x + 1)) : log(x + sqrt(x * x + 1));
    case KU_ACOSH: return log(x + sqrt(x * x - 1));
    case KU_ATANH: return 0.5 * (log1p(x) - log1p(-x));
    case KU_LOG2: return log(x) / log(2.0);
    case KU_LOG10: return log(x) / log(10.0);
    case KU_ERFC: return erfc(x);
    case KU_LGAMMA: return lgamma(x);
    case KU_DIGAMMA: return ref_digamma(x);
    default: return NAN;
    }
}

/* Domain of op's test inputs. */
static double unary_input(KUnOp op) {
    switch (op) {
    case KU_LOG: case KU_SQRT: case KU_RSQRT: return uni(0.05, 5);
    case KU_LOG1P: return uni(-0.9, 5);
    case KU_LOG2: case KU_LOG10: return uni(0.05, 5);
    case KU_ASIN: case KU_ACOS: case KU_ATANH: return uni(-0.95, 0.95);
    case KU_ACOSH: return uni(1.05, 5);
    case KU_TAN: return uni(-1.4, 1.4);
    case KU_LGAMMA: case KU_DIGAMMA: return urand() < 0.2 ? -floor(uni(0, 4)) - uni(0.1, 0.9) : uni(0.1, 12);
    case KU_RECIP: return urand() < 0.5 ? uni(-4, -0.1) : uni(0.1, 4);
    case KU_ROUND: return floor(uni(-8, 8)) + (urand() < 0.3 ? 0.5 : urand());
    case KU_NOT: return urand() < 0.3 ? 0 : uni(-3, 3);
    default: return uni(-4, 4);
    }
}

static void unary_case(KUnOp op, double p1, double p2, int positive) {
    enum { N = 777 };
    float *af = NEW(float, 2 * N), *of = NEW(float, 3 * N);
    double *ad = NEW(double, 2 * N), *od = NEW(double, 3 * N), *want = NEW(double, N);
    double *got = NEW(double, N);
    for (int i = 0; i < 2 * N; i++) {
        af[i] = (float)(positive ? uni(0.1, 3) : unary_input(op));
        ad[i] = af[i];
    }
    /* f32, contiguous then strided (input stride 2, output stride 3) */
    k_unary_f32(op, N, af, 1, of, 1, p1, p2);
    for (int i = 0; i < N; i++) want[i] = ref_unary(op, af[i], (float)p1, (float)p2);
    CHECK_CLOSE(fmt("unary f32 %s(%g)", un_name[op], p1), of, want, N, 3e-6, 1e-6);
    k_unary_f32(op, N, af, 2, of, 3, p1, p2);
    for (int i = 0; i < N; i++) {
        want[i] = ref_unary(op, af[2 * i], (float)p1, (float)p2);
        got[i] = of[3 * i];
    }
    CHECK_CLOSE(fmt("unary f32 strided %s(%g)", un_name[op], p1), got, want, N, 3e-6, 1e-6);
    k_unary_f64(op, N, ad, 2, od, 3, p1, p2);
    for (int i = 0; i < N; i++) {
        want[i] = ref_unary(op, ad[2 * i], p1, p2);
        got[i] = od[3 * i];
    }
    /* digamma crosses 0 at 1.4616...: its sums cancel to a few ulps of ~2 there */
    double atol64 = op == KU_DIGAMMA ? 1e-14 : 1e-15;
    CHECK_CLOSE(fmt("unary f64 strided %s(%g)", un_name[op], p1), got, want, N, 1e-13, atol64);
    free(af), free(of), free(ad), free(od), free(want), free(got);
}

static void test_unary(void) {
    for (int op = 0; op < KU_COUNT; op++) {
        if (op == KU_CLAMP || op == KU_POW || op == KU_RPOW || op == KU_LEAKY_RELU) continue;
        if (op == KU_BNOT) continue; /* integers only: checked below */
        unary_case((KUnOp)op, 0, 0, 0);
    }
    unary_case(KU_CLAMP, -0.5, 0.7, 0);
    unary_case(KU_CLAMP, -INFINITY, 1.5, 0);
    unary_case(KU_LEAKY_RELU, 0.01, 0, 0);
    unary_case(KU_RPOW, 2.5, 0, 0);
    const double pows[] = {2, 3, 1, 0.5, -1, -0.5, -2, 1.7, 0};
    for (size_t i = 0; i < sizeof pows / sizeof *pows; i++) unary_case(KU_POW, pows[i], 0, 1);
    /* special values */
    float s[6] = {0.5f, 1.5f, 2.5f, -0.5f, -2.5f, NAN}, r[6];
    k_unary_f32(KU_ROUND, 6, s, 1, r, 1, 0, 0);
    CHECK(r[0] == 0 && r[1] == 2 && r[2] == 2 && r[3] == 0 && signbit(r[3]) && r[4] == -2 && isnan(r[5]));
    k_unary_f32(KU_RELU, 6, s, 1, r, 1, 0, 0);
    CHECK(isnan(r[5]) && r[3] == 0);
    k_unary_f32(KU_SIGN, 6, s, 1, r, 1, 0, 0); /* sign(NaN) = 0, as torch 2.15 */
    CHECK(r[0] == 1 && r[3] == -1 && r[5] == 0);
    float big[2] = {-1000, 1000};
    k_unary_f32(KU_SIGMOID, 2, big, 1, r, 1, 0, 0);
    CHECK(r[0] == 0 && r[1] == 1);
    k_unary_f32(KU_SILU, 2, big, 1, r, 1, 0, 0);
    CHECK(r[0] == 0 && r[1] == 1000);
    /* int64 ops */
    int64_t a[6] = {-5, 0, 7, INT64_MIN, 3, -1}, o[6];
    int64_t w_neg[6] = {5, 0, -7, INT64_MIN, -3, 1}, w_abs[6] = {5, 0, 7, INT64_MIN, 3, 1};
    int64_t w_sq[6] = {25, 0, 49, 0, 9, 1}, w_sign[6] = {-1, 0, 1, -1, 1, -1};
    int64_t w_clamp[6] = {-3, 0, 4, -3, 3, -1}, w_relu[6] = {0, 0, 7, 0, 3, 0};
    int64_t w_not[6] = {0, 1, 0, 0, 0, 0}, w_hi[6] = {-5, 0, 5, INT64_MIN, 3, -1};
    k_unary_i64(KU_NEG, 6, a, 1, o, 1, 0, 0), CHECK_EQ_I64("i64 neg", o, w_neg, 6);
    k_unary_i64(KU_ABS, 6, a, 1, o, 1, 0, 0), CHECK_EQ_I64("i64 abs", o, w_abs, 6);
    k_unary_i64(KU_SQUARE, 6, a, 1, o, 1, 0, 0), CHECK_EQ_I64("i64 square", o, w_sq, 6);
    k_unary_i64(KU_SIGN, 6, a, 1, o, 1, 0, 0), CHECK_EQ_I64("i64 sign", o, w_sign, 6);
    k_unary_i64(KU_CLAMP, 6, a, 1, o, 1, -3.5, 4.2), CHECK_EQ_I64("i64 clamp", o, w_clamp, 6);
    k_unary_i64(KU_CLAMP, 6, a, 1, o, 1, -INFINITY, 5), CHECK_EQ_I64("i64 clamp hi", o, w_hi, 6);
    k_unary_i64(KU_RELU, 6, a, 1, o, 1, 0, 0), CHECK_EQ_I64("i64 relu", o, w_relu, 6);
    k_unary_i64(KU_NOT, 6, a, 1, o, 1, 0, 0), CHECK_EQ_I64("i64 not", o, w_not, 6);
    int64_t w_bnot[6] = {4, -1, -8, INT64_MAX, -4, 0}; /* ~x = -x - 1 */
    k_unary_i64(KU_BNOT, 6, a, 1, o, 1, 0, 0), CHECK_EQ_I64("i64 bitwise not", o, w_bnot, 6);
    /* big run: parallel chunks, in place */
    enum { N = 70001 };
    double *x = rand_d(N, -3, 3), *want = NEW(double, N);
    for (int i = 0; i < N; i++) want[i] = tanh(x[i]);
    k_unary_f64(KU_TANH, N, x, 1, x, 1, 0, 0);
    CHECK_CLOSE("unary f64 tanh in place, big", x, want, N, 1e-15, 1e-16);
    free(x), free(want);
}

/* gx = gy f'(x) against a central difference of the reference; y = f(x). */
static void unary_backward_case(KUnOp op, double p1, int positive) {
    enum { N = 501 };
    const double kinks[3] = {0, p1, 0}; /* keep away from non-smooth points */
    double *x = NEW(double, N), *y = NEW(double, N), *gy = rand_d(N, -2, 2);
    double *gx = NEW(double, N), *want = NEW(double, N);
    float *xf = NEW(float, N), *yf = NEW(float, N), *gyf = NEW(float, N), *gxf = NEW(float, N);
    const double p2 = op == KU_CLAMP ? 0.8 : 0;
    for (int i = 0; i < N; i++) {
        double v = positive ? uni(0.2, 3) : unary_input(op);
        for (int k = 0; k < 3; k++)
            if (fabs(v - kinks[k]) < 1e-3 || fabs(v - p2) < 1e-3) v += 0.01;
        xf[i] = (float)v, x[i] = xf[i];
        y[i] = ref_unary(op, x[i], p1, p2), yf[i] = (float)y[i], gyf[i] = (float)gy[i];
        gy[i] = gyf[i];
        const double h = 1e-6 * fmax(1, fabs(x[i]));
        want[i] = gy[i] * (ref_unary(op, x[i] + h, p1, p2) - ref_unary(op, x[i] - h, p1, p2)) / (2 * h);
    }
    k_unary_backward_f64(op, N, x, y, gy, gx, p1, p2);
    CHECK_CLOSE(fmt("unary backward f64 %s", un_name[op]), gx, want, N, 1e-6, 1e-7);
    k_unary_backward_f32(op, N, xf, yf, gyf, gxf, p1, p2);
    CHECK_CLOSE(fmt("unary backward f32 %s", un_name[op]), gxf, want, N, 2e-5, 2e-5);
    free(x), free(y), free(gy), free(gx), free(want), free(xf), free(yf), free(gyf), free(gxf);
}

static void test_unary_backward(void) {
    const KUnOp ops[] = {KU_RELU, KU_GELU, KU_GELU_TANH, KU_SILU, KU_TANH, KU_SIGMOID,
                         KU_EXP, KU_LOG, KU_SQRT, KU_RSQRT, KU_ABS, KU_SQUARE, KU_RECIP,
                         KU_SIN, KU_COS, KU_LOG1P, KU_EXPM1, KU_ERF, KU_NEG, KU_TAN, KU_ASIN,
                         KU_ACOS, KU_ATAN, KU_SINH, KU_COSH, KU_ASINH, KU_ACOSH, KU_ATANH, KU_LOG2, KU_LOG10,
                         KU_ERFC, KU_LGAMMA, KU_DIGAMMA};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) unary_backward_case(ops[i], 0, 0);
    unary_backward_case(KU_CLAMP, -0.5, 0);
    unary_backward_case(KU_LEAKY_RELU, 0.1, 0);
    unary_backward_case(KU_POW, 2.5, 1);
    unary_backward_case(KU_POW, 2, 0);
    unary_backward_case(KU_POW, -1.5, 1);
    /* NULL for the unused operand is fine */
    float gy[3] = {1, 2, 3}, y[3] = {0.5f, 0.5f, 0.5f}, gx[3];
    k_unary_backward_f32(KU_SIGMOID, 3, NULL, y, gy, gx, 0, 0);
    CHECK(gx[0] == 0.25f && gx[2] == 0.75f);
    k_unary_backward_f32(KU_NEG, 3, NULL, NULL, gy, gx, 0, 0);
    CHECK(gx[1] == -2);
}

/* ======================= reductions ======================= */

typedef struct { int64_t outer, n, inner; } Shape;

static const Shape red_shapes[] = {
    {3, 37, 1}, {2, 300, 5}, {4, 1, 7}, {1, 100000, 1}, {1, 3000, 300}, {64, 700, 1},
    {3, 5, 1000}, {2, 0, 3},
};
#define N_RED_SHAPES (sizeof red_shapes / sizeof *red_shapes)

/* reference reduce of x(o, :, i) */
static double ref_reduce(KRedOp op, const double *x, Shape s, int64_t o, int64_t i) {
    long double acc = op == KR_PROD ? 1 : op == KR_MAX ? -INFINITY : op == KR_MIN ? INFINITY : 0;
    for (int64_t j = 0; j < s.n; j++) {
        double v = x[(o * s.n + j) * s.inner + i];
        if (op == KR_SUM || op == KR_MEAN) acc += v;
        else if (op == KR_PROD) acc *= v;
        else if (isnan(v) || isnan((double)acc)) acc = NAN;
        else if (op == KR_MAX) acc = v > acc ? v : acc;
        else acc = v < acc ? v : acc;
    }
    return op == KR_MEAN ? (double)(acc / s.n) : (double)acc;
}

static void reduce_case(KRedOp op, Shape s, int with_nan) {
    const int64_t total = s.outer * s.n * s.inner, nout = s.outer * s.inner;
    float *xf = NEW(float, total), *of = NEW(float, nout);
    double *xd = NEW(double, total), *od = NEW(double, nout), *want = NEW(double, nout);
    for (int64_t i = 0; i < total; i++) {
        xf[i] = (float)(op == KR_PROD ? 1 + uni(-0.002, 0.002) : uni(-1, 1));
        xd[i] = xf[i];
    }
    if (with_nan && total > 3) xf[total / 2] = NAN, xd[total / 2] = NAN;
    const char *nm[] = {"sum", "mean", "prod", "max", "min"};
    const char *label = fmt("reduce %s (%lld,%lld,%lld)%s", nm[op], (long long)s.outer,
                            (long long)s.n, (long long)s.inner, with_nan ? " nan" : "");
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) want[o * s.inner + i] = ref_reduce(op, xd, s, o, i);
    k_reduce_f64(op, xd, s.outer, s.n, s.inner, od);
    CHECK_CLOSE(fmt("%s f64", label), od, want, nout, 1e-12, 1e-12);
    for (int64_t i = 0; i < nout; i++) want[i] = (float)want[i]; /* f32 sums are double inside */
    k_reduce_f32(op, xf, s.outer, s.n, s.inner, of);
    CHECK_CLOSE(fmt("%s f32", label), of, want, nout, op == KR_PROD ? 2e-6 : 1e-7, 1e-9);
    free(xf), free(of), free(xd), free(od), free(want);
}

static void test_reduce(void) {
    for (size_t k = 0; k < N_RED_SHAPES; k++)
        for (int op = 0; op < KR_COUNT; op++) reduce_case((KRedOp)op, red_shapes[k], 0);
    reduce_case(KR_MAX, red_shapes[0], 1);
    reduce_case(KR_MIN, red_shapes[1], 1);
    reduce_case(KR_MAX, red_shapes[3], 1);
    reduce_case(KR_SUM, red_shapes[4], 1);
    /* f32 sums are accumulated in double: 1e8 + many ones is exact */
    enum { N = 40000 };
    float *x = NEW(float, N), out;
    for (int i = 0; i < N; i++) x[i] = 1;
    x[0] = 1e8f;
    k_reduce_f32(KR_SUM, x, 1, N, 1, &out);
    CHECK(out == 100039999.0f || out == (float)100039999.0);
    free(x);
    /* int64 */
    int64_t xi[12] = {5, -3, 9, 9, 2, 7, INT64_MAX, 1, 0, -8, 4, 4}, oi[4];
    int64_t w_sum_rows[2] = {5 - 3 + 9 + 9 + 2 + 7, INT64_MIN}; /* INT64_MAX + 1 wraps */
    k_reduce_i64(KR_SUM, xi, 2, 6, 1, oi);
    CHECK_EQ_I64("i64 sum rows (wrapping)", oi, w_sum_rows, 2);
    int64_t w_max_cols[2] = {INT64_MAX, 9}, w_min_cols[2] = {0, -8};
    k_reduce_i64(KR_MAX, xi, 1, 6, 2, oi);
    CHECK_EQ_I64("i64 max cols", oi, w_max_cols, 2);
    k_reduce_i64(KR_MIN, xi, 1, 6, 2, oi);
    CHECK_EQ_I64("i64 min cols", oi, w_min_cols, 2);
    int64_t pr[4] = {3, -2, 5, 7}, w_prod[1] = {-210};
    k_reduce_i64(KR_PROD, pr, 1, 4, 1, oi);
    CHECK_EQ_I64("i64 prod", oi, w_prod, 1);
}

/* reference arg of x(o, :, i): first extreme, first NaN wins */
static void ref_arg(int want_max, const double *x, Shape s, int64_t o, int64_t i, double *v,
                    int64_t *at) {
    *v = x[o * s.n * s.inner + i], *at = 0;
    for (int64_t j = 0; j < s.n; j++) {
        double u = x[(o * s.n + j) * s.inner + i];
        if (isnan(u)) {
            *v = u, *at = j;
            return;
        }
        if (want_max ? u > *v : u < *v) *v = u, *at = j;
    }
}

static void argreduce_case(int want_max, Shape s) {
    const int64_t total = s.outer * s.n * s.inner, nout = s.outer * s.inner;
    float *xf = NEW(float, total), *vf = NEW(float, nout);
    double *xd = NEW(double, total), *vd = NEW(double, nout), *wv = NEW(double, nout);
    int64_t *xi = NEW(int64_t, total), *vi = NEW(int64_t, nout), *ix = NEW(int64_t, nout);
    int64_t *wi = NEW(int64_t, nout);
    for (int64_t i = 0; i < total; i++) {
        xi[i] = irand(-20, 20); /* many ties: first index must win */
        xd[i] = (double)xi[i], xf[i] = (float)xi[i];
    }
    if (total > 10) xd[7] = NAN, xf[7] = NAN, xd[total - 2] = NAN, xf[total - 2] = NAN;
    const char *label = fmt("arg%s (%lld,%lld,%lld)", want_max ? "max" : "min",
                            (long long)s.outer, (long long)s.n, (long long)s.inner);
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++)
            ref_arg(want_max, xd, s, o, i, &wv[o * s.inner + i], &wi[o * s.inner + i]);
    k_argreduce_f64(want_max, xd, s.outer, s.n, s.inner, vd, ix);
    CHECK_CLOSE(fmt("%s f64 vals", label), vd, wv, nout, 0, 0);
    CHECK_EQ_I64(fmt("%s f64 idx", label), ix, wi, nout);
    k_argreduce_f32(want_max, xf, s.outer, s.n, s.inner, vf, ix);
    CHECK_CLOSE(fmt("%s f32 vals", label), vf, wv, nout, 0, 0);
    CHECK_EQ_I64(fmt("%s f32 idx", label), ix, wi, nout);
    /* int64: same data without the NaNs */
    for (int64_t i = 0; i < total; i++) xd[i] = (double)xi[i];
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++)
            ref_arg(want_max, xd, s, o, i, &wv[o * s.inner + i], &wi[o * s.inner + i]);
    k_argreduce_i64(want_max, xi, s.outer, s.n, s.inner, vi, ix);
    CHECK_CLOSE(fmt("%s i64 vals", label), vi, wv, nout, 0, 0);
    CHECK_EQ_I64(fmt("%s i64 idx", label), ix, wi, nout);
    free(xf), free(vf), free(xd), free(vd), free(wv), free(xi), free(vi), free(ix), free(wi);
}

static void var_case(Shape s, double correction) {
    const int64_t total = s.outer * s.n * s.inner, nout = s.outer * s.inner;
    double *xd = rand_d(total, 3, 5), *od = NEW(double, nout), *want = NEW(double, nout);
    float *xf = NEW(float, total), *of = NEW(float, nout);
    for (int64_t i = 0; i < total; i++) xf[i] = (float)xd[i], xd[i] = xf[i];
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            long double m = 0, ss = 0;
            for (int64_t j = 0; j < s.n; j++) m += xd[(o * s.n + j) * s.inner + i];
            m /= s.n;
            for (int64_t j = 0; j < s.n; j++) {
                long double d = xd[(o * s.n + j) * s.inner + i] - m;
                ss += d * d;
            }
            want[o * s.inner + i] = (double)(ss / fmax(0, (double)s.n - correction));
        }
    const char *label = fmt("var corr %g (%lld,%lld,%lld)", correction, (long long)s.outer,
                            (long long)s.n, (long long)s.inner);
    k_var_f64(xd, s.outer, s.n, s.inner, correction, od);
    CHECK_CLOSE(fmt("%s f64", label), od, want, nout, 1e-12, 0);
    k_var_f32(xf, s.outer, s.n, s.inner, correction, of);
    CHECK_CLOSE(fmt("%s f32", label), of, want, nout, 1e-6, 0);
    free(xd), free(od), free(want), free(xf), free(of);
}

static void test_argreduce_var(void) {
    const Shape shapes[] = {{3, 37, 1}, {2, 300, 5}, {4, 1, 7}, {1, 50000, 1}, {2, 40, 600}};
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        argreduce_case(1, shapes[k]);
        argreduce_case(0, shapes[k]);
        var_case(shapes[k], 1);
        var_case(shapes[k], 0);
    }
    double one = 3.0, v;
    k_var_f64(&one, 1, 1, 1, 1, &v); /* n - correction = 0: NaN as torch */
    CHECK(isnan(v));
}

/* ======================= softmax ======================= */

/* reference (log_)softmax of x(o, :, i) written to y(o, :, i) */
static void ref_softmax(int lg, const double *x, Shape s, double *y) {
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            const double *xr = x + o * s.n * s.inner + i;
            double *yr = y + o * s.n * s.inner + i;
            double m = -INFINITY, z = 0;
            for (int64_t j = 0; j < s.n; j++) m = fmax(m, xr[j * s.inner]);
            for (int64_t j = 0; j < s.n; j++) z += exp(xr[j * s.inner] - m);
            for (int64_t j = 0; j < s.n; j++)
                yr[j * s.inner] = lg ? xr[j * s.inner] - m - log(z) : exp(xr[j * s.inner] - m) / z;
        }
}

static void softmax_case(int log, Shape s, double scale) {
    const int64_t total = s.outer * s.n * s.inner;
    double *xd = rand_d(total, -scale, scale), *yd = NEW(double, total), *want = NEW(double, total);
    float *xf = NEW(float, total), *yf = NEW(float, total);
    for (int64_t i = 0; i < total; i++) xf[i] = (float)xd[i], xd[i] = xf[i];
    ref_softmax(log, xd, s, want);
    const char *label = fmt("%s (%lld,%lld,%lld) scale %g", log ? "log_softmax" : "softmax",
                            (long long)s.outer, (long long)s.n, (long long)s.inner, scale);
    k_softmax_f64(log, xd, s.outer, s.n, s.inner, yd);
    CHECK_CLOSE(fmt("%s f64", label), yd, want, total, 1e-12, 1e-15);
    k_softmax_f32(log, xf, s.outer, s.n, s.inner, yf);
    CHECK_CLOSE(fmt("%s f32", label), yf, want, total, log ? 1e-6 : 2e-6, log ? 2e-6 : 1e-9);
    k_softmax_f32(log, xf, s.outer, s.n, s.inner, xf); /* in place */
    CHECK_CLOSE(fmt("%s f32 in place", label), xf, want, total, log ? 1e-6 : 2e-6, log ? 2e-6 : 1e-9);
    free(xd), free(yd), free(want), free(xf), free(yf);
}

/* backward against a central difference of L(x) = sum gy * f(x) */
static void softmax_backward_case(int log, Shape s) {
    const int64_t total = s.outer * s.n * s.inner;
    double *x = rand_d(total, -2, 2), *gy = rand_d(total, -1, 1), *y = NEW(double, total);
    double *gx = NEW(double, total), *want = NEW(double, total), *tmp = NEW(double, total);
    float *yf = NEW(float, total), *gyf = NEW(float, total), *gxf = NEW(float, total);
    ref_softmax(log, x, s, y);
    for (int64_t k = 0; k < total; k++) {
        const double h = 1e-5, x0 = x[k];
        double lp = 0, lm = 0;
        x[k] = x0 + h, ref_softmax(log, x, s, tmp);
        for (int64_t i = 0; i < total; i++) lp += gy[i] * tmp[i];
        x[k] = x0 - h, ref_softmax(log, x, s, tmp);
        for (int64_t i = 0; i < total; i++) lm += gy[i] * tmp[i];
        x[k] = x0;
        want[k] = (lp - lm) / (2 * h);
    }
    for (int64_t i = 0; i < total; i++) yf[i] = (float)y[i], gyf[i] = (float)gy[i];
    const char *label = fmt("%s backward (%lld,%lld,%lld)", log ? "log_softmax" : "softmax",
                            (long long)s.outer, (long long)s.n, (long long)s.inner);
    k_softmax_backward_f64(log, y, gy, s.outer, s.n, s.inner, gx);
    CHECK_CLOSE(fmt("%s f64", label), gx, want, total, 1e-6, 1e-8);
    k_softmax_backward_f32(log, yf, gyf, s.outer, s.n, s.inner, gxf);
    CHECK_CLOSE(fmt("%s f32", label), gxf, want, total, 1e-5, 1e-6);
    free(x), free(gy), free(y), free(gx), free(want), free(tmp), free(yf), free(gyf), free(gxf);
}

static void test_softmax(void) {
    const Shape shapes[] = {{4, 10, 1}, {3, 7, 5}, {2, 100, 70}, {64, 1000, 1}, {1, 50000, 1},
                            {2, 300, 130}};
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
        for (int log = 0; log < 2; log++) softmax_case(log, shapes[k], 5);
    softmax_case(0, shapes[1], 1e4); /* huge logits: max subtraction */
    softmax_case(1, shapes[0], 1e4);
    const Shape small[] = {{3, 6, 1}, {2, 5, 3}, {1, 4, 70}};
    for (size_t k = 0; k < sizeof small / sizeof *small; k++)
        for (int log = 0; log < 2; log++) softmax_backward_case(log, small[k]);
    float big[3] = {1e4f, 1e4f - 1, -1e4f}, y[3];
    k_softmax_f32(0, big, 1, 3, 1, y);
    CHECK(fabs(y[0] - 1 / (1 + exp(-1.0))) < 1e-6 && y[2] == 0 && !isnan(y[1]));
}

/* ======================= cross-entropy ======================= */

/* loss_i = -sum_c q_c log p_c, q = (1-ls) onehot(t) + ls / C (direct form) */
static double ref_ce_row(const double *x, int64_t C, int64_t t, double ls) {
    double m = -INFINITY, z = 0, loss = 0;
    for (int64_t c = 0; c < C; c++) m = fmax(m, x[c]);
    for (int64_t c = 0; c < C; c++) z += exp(x[c] - m);
    for (int64_t c = 0; c < C; c++) {
        double q = (c == t ? 1 - ls : 0) + ls / (double)C;
        loss -= q * (x[c] - m - log(z));
    }
    return loss;
}

static void cross_entropy_case(int64_t N, int64_t C, double ls, double scale) {
    const int64_t ignore = -100;
    double *x = rand_d(N * C, -scale, scale), *loss = NEW(double, N), *lse = NEW(double, N);
    double *want = NEW(double, N), *g = rand_d(N, 0.5, 1.5), *gx = NEW(double, N * C);
    double *gwant = NEW(double, N * C);
    float *xf = NEW(float, N * C), *lossf = NEW(float, N), *lsef = NEW(float, N);
    float *gf = NEW(float, N), *gxf = NEW(float, N * C);
    int64_t *t = NEW(int64_t, N);
    for (int64_t i = 0; i < N * C; i++) xf[i] = (float)x[i], x[i] = xf[i];
    for (int64_t i = 0; i < N; i++) {
        t[i] = i % 4 == 1 ? ignore : irand(0, C - 1);
        gf[i] = (float)g[i], g[i] = gf[i];
        want[i] = t[i] == ignore ? 0 : ref_ce_row(x + i * C, C, t[i], ls);
    }
    const char *label = fmt("cross_entropy N=%lld C=%lld ls=%g scale=%g", (long long)N,
                            (long long)C, ls, scale);
    CHECK(k_cross_entropy_fwd_f64(x, N, C, t, ignore, ls, loss, lse) == -1);
    CHECK_CLOSE(fmt("%s f64 loss", label), loss, want, N, 1e-12, 1e-12);
    CHECK(k_cross_entropy_fwd_f32(xf, N, C, t, ignore, ls, lossf, lsef) == -1);
    CHECK_CLOSE(fmt("%s f32 loss", label), lossf, want, N, 1e-5, 1e-5);
    /* backward vs central differences of sum_i g_i loss_i */
    for (int64_t i = 0; i < N; i++)
        for (int64_t c = 0; c < C; c++) {
            double *r = x + i * C, x0 = r[c], h = 1e-6 * fmax(1, fabs(x0));
            if (t[i] == ignore) {
                gwant[i * C + c] = 0;
                continue;
            }
            r[c] = x0 + h;
            double lp = ref_ce_row(r, C, t[i], ls);
            r[c] = x0 - h;
            double lm = ref_ce_row(r, C, t[i], ls);
            r[c] = x0;
            gwant[i * C + c] = g[i] * (lp - lm) / (2 * h);
        }
    k_cross_entropy_bwd_f64(x, lse, N, C, t, ignore, ls, g, gx);
    CHECK_CLOSE(fmt("%s f64 grad", label), gx, gwant, N * C, 1e-5, 1e-7);
    k_cross_entropy_bwd_f32(xf, lsef, N, C, t, ignore, ls, gf, gxf);
    CHECK_CLOSE(fmt("%s f32 grad", label), gxf, gwant, N * C, 1e-4, 2e-6);
    free(x), free(loss), free(lse), free(want), free(g), free(gx), free(gwant), free(xf);
    free(lossf), free(lsef), free(gf), free(gxf), free(t);
}

static void test_cross_entropy(void) {
    cross_entropy_case(6, 11, 0, 3);
    cross_entropy_case(6, 11, 0.1, 3);
    cross_entropy_case(5, 7, 0.2, 30);
    cross_entropy_case(64, 700, 0.1, 3); /* parallel rows */
    /* huge logits stay finite */
    float x[3] = {1e4f, -1e4f, 1e4f - 2}, loss, lse;
    int64_t t = 2;
    CHECK(k_cross_entropy_fwd_f32(x, 1, 3, &t, -100, 0, &loss, &lse) == -1);
    CHECK(fabs(loss - (2 + log1p(exp(-2.0)))) < 1e-4 && fabs(lse - 1e4f) < 1);
    /* bad targets: first one is reported; ignore_index is not bad */
    double xd[5 * 3] = {0};
    double ld[5], sd[5];
    int64_t bad[5] = {0, -1, 3, -7, 2};
    CHECK(k_cross_entropy_fwd_f64(xd, 5, 3, bad, -1, 0, ld, sd) == 2);
    int64_t ok[2] = {0, 2};
    CHECK(k_cross_entropy_fwd_f64(xd, 2, 3, ok, -1, 0, ld, sd) == -1);
}

/* ======================= layer norm ======================= */

static void ref_layernorm(const double *x, const double *w, const double *b, int64_t rows,
                          int64_t C, double eps, double *y) {
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * C;
        double m = 0, v = 0;
        for (int64_t c = 0; c < C; c++) m += xr[c];
        m /= C;
        for (int64_t c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
        v /= C;
        for (int64_t c = 0; c < C; c++)
            y[r * C + c] = (xr[c] - m) / sqrt(v + eps) * (w ? w[c] : 1) + (b ? b[c] : 0);
    }
}

/* central difference of L = sum gy * layernorm(...) wrt p[k] */
static double ln_fd(double *p, int64_t k, const double *x, const double *w, const double *b,
                    const double *gy, int64_t rows, int64_t C, double eps, double *tmp) {
    const double p0 = p[k], h = 1e-6;
    double lp = 0, lm = 0;
    p[k] = p0 + h, ref_layernorm(x, w, b, rows, C, eps, tmp);
    for (int64_t i = 0; i < rows * C; i++) lp += gy[i] * tmp[i];
    p[k] = p0 - h, ref_layernorm(x, w, b, rows, C, eps, tmp);
    for (int64_t i = 0; i < rows * C; i++) lm += gy[i] * tmp[i];
    p[k] = p0;
    return (lp - lm) / (2 * h);
}

static void layernorm_case(int64_t rows, int64_t C, int affine, int fd) {
    const double eps = 1e-5;
    const int64_t n = rows * C;
    double *x = rand_d(n, -2, 3), *gy = rand_d(n, -1, 1), *w = rand_d(C, 0.5, 1.5);
    double *b = rand_d(C, -0.5, 0.5), *y = NEW(double, n), *want = NEW(double, n);
    double *mean = NEW(double, rows), *rstd = NEW(double, rows), *gx = NEW(double, n);
    double *gw = NEW(double, C), *gb = NEW(double, C), *tmp = NEW(double, n);
    double *wgw = NEW(double, C), *wgb = NEW(double, C);
    float *xf = NEW(float, n), *gyf = NEW(float, n), *wf = NEW(float, C), *bf = NEW(float, C);
    float *yf = NEW(float, n), *meanf = NEW(float, rows), *rstdf = NEW(float, rows);
    float *gxf = NEW(float, n), *gwf = NEW(float, C), *gbf = NEW(float, C);
    for (int64_t i = 0; i < n; i++) xf[i] = (float)x[i], x[i] = xf[i], gyf[i] = (float)gy[i], gy[i] = gyf[i];
    for (int64_t c = 0; c < C; c++) wf[c] = (float)w[c], w[c] = wf[c], bf[c] = (float)b[c], b[c] = bf[c];
    const double *W = affine ? w : NULL, *B = affine ? b : NULL;
    const float *Wf = affine ? wf : NULL, *Bf = affine ? bf : NULL;
    const char *label = fmt("layernorm rows=%lld C=%lld%s", (long long)rows, (long long)C,
                            affine ? "" : " no affine");

    ref_layernorm(x, W, B, rows, C, eps, want);
    k_layernorm_fwd_f64(x, W, B, rows, C, eps, y, mean, rstd);
    CHECK_CLOSE(fmt("%s fwd f64", label), y, want, n, 1e-12, 1e-12);
    k_layernorm_fwd_f32(xf, Wf, Bf, rows, C, eps, yf, meanf, rstdf);
    CHECK_CLOSE(fmt("%s fwd f32", label), yf, want, n, 1e-5, 1e-5);
    CHECK_CLOSE(fmt("%s mean f32", label), meanf, mean, rows, 1e-6, 1e-6);
    CHECK_CLOSE(fmt("%s rstd f32", label), rstdf, rstd, rows, 1e-6, 0);

    /* wanted grads: finite differences (small) or the closed form (big) */
    double *wgx = NEW(double, n);
    for (int64_t c = 0; c < C; c++) wgw[c] = 0.5, wgb[c] = -0.25; /* accumulation base */
    if (fd) {
        for (int64_t k = 0; k < n; k++) wgx[k] = ln_fd(x, k, x, W, B, gy, rows, C, eps, tmp);
        for (int64_t c = 0; c < C && affine; c++) {
            wgw[c] += ln_fd(w, c, x, w, b, gy, rows, C, eps, tmp);
            wgb[c] += ln_fd(b, c, x, w, b, gy, rows, C, eps, tmp);
        }
    } else {
        for (int64_t r = 0; r < rows; r++) {
            double sd = 0, sdx = 0;
            for (int64_t c = 0; c < C; c++) {
                double xh = (x[r * C + c] - mean[r]) * rstd[r], d = gy[r * C + c] * (W ? W[c] : 1);
                sd += d, sdx += d * xh;
                wgw[c] += gy[r * C + c] * xh, wgb[c] += gy[r * C + c];
            }
            for (int64_t c = 0; c < C; c++) {
                double xh = (x[r * C + c] - mean[r]) * rstd[r], d = gy[r * C + c] * (W ? W[c] : 1);
                wgx[r * C + c] = rstd[r] * (d - sd / C - xh * sdx / C);
            }
        }
    }
    for (int64_t c = 0; c < C; c++) gw[c] = 0.5, gb[c] = -0.25, gwf[c] = 0.5f, gbf[c] = -0.25f;
    k_layernorm_bwd_f64(x, W, mean, rstd, gy, rows, C, gx, affine ? gw : NULL, affine ? gb : NULL);
    CHECK_CLOSE(fmt("%s bwd gx f64", label), gx, wgx, n, 1e-6, 1e-7);
    k_layernorm_bwd_f32(xf, Wf, meanf, rstdf, gyf, rows, C, gxf, affine ? gwf : NULL, affine ? gbf : NULL);
    CHECK_CLOSE(fmt("%s bwd gx f32", label), gxf, wgx, n, 1e-4, 2e-5);
    if (affine) {
        CHECK_CLOSE(fmt("%s bwd gw f64", label), gw, wgw, C, 1e-6, 1e-7);
        CHECK_CLOSE(fmt("%s bwd gb f64", label), gb, wgb, C, 1e-6, 1e-7);
        CHECK_CLOSE(fmt("%s bwd gw f32", label), gwf, wgw, C, 1e-4, 1e-4);
        CHECK_CLOSE(fmt("%s bwd gb f32", label), gbf, wgb, C, 1e-4, 1e-4);
    }
    free(x), free(gy), free(w), free(b), free(y), free(want), free(mean), free(rstd), free(gx);
    free(gw), free(gb), free(tmp), free(wgw), free(wgb), free(xf), free(gyf), free(wf), free(bf);
    free(yf), free(meanf), free(rstdf), free(gxf), free(gwf), free(gbf), free(wgx);
}

static void test_layernorm(void) {
    layernorm_case(5, 37, 1, 1);
    layernorm_case(3, 16, 0, 1);
    layernorm_case(512, 96, 1, 0);  /* parallel pieces for gw / gb */
    layernorm_case(7, 6000, 1, 0);  /* few rows, long C */
}

/* ======================= GEMM ======================= */

/* C = alpha op(A) op(B) + beta C in double; bound[i] = |alpha| sum|a b| + |beta c|
 * scales the tolerance. A(r, c) with stride ld, trans swaps the roles. */
static void ref_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha,
                     const double *A, int64_t lda, const double *B, int64_t ldb, double beta,
                     const double *C0, int64_t ldc, double *C, double *bound) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0, sa = 0;
            for (int64_t k = 0; k < K; k++) {
                double a = ta ? A[k * lda + i] : A[i * lda + k];
                double b = tb ? B[j * ldb + k] : B[k * ldb + j];
                s += a * b, sa += fabs(a * b);
            }
            double c0 = beta != 0 ? C0[i * ldc + j] : 0;
            C[i * N + j] = alpha * s + beta * c0;
            bound[i * N + j] = fabs(alpha) * sa + fabs(beta * c0);
        }
}

/* 0 f32, 1 f64, 2 bf16 */
static void gemm_case(int kind, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha,
                      double beta, int pad) {
    const int64_t ra = ta ? K : M, ca = ta ? M : K, rb = tb ? N : K, cb = tb ? K : N;
    const int64_t lda = ca + pad, ldb = cb + pad, ldc = N + pad;
    double *A = rand_d(ra * lda, -1, 1), *B = rand_d(rb * ldb, -1, 1);
    double *C0 = rand_d(M * ldc, -1, 1), *want = NEW(double, M * N), *bound = NEW(double, M * N);
    float *Af = NEW(float, ra * lda), *Bf = NEW(float, rb * ldb), *Cf = NEW(float, M * ldc);
    uint16_t *Ah = NEW(uint16_t, ra * lda), *Bh = NEW(uint16_t, rb * ldb);
    double *Cd = NEW(double, M * ldc);
    for (int64_t i = 0; i < ra * lda; i++) {
        Ah[i] = f32_to_bf16((float)A[i]);
        Af[i] = kind == 2 ? bf16_to_f32(Ah[i]) : (float)A[i];
        if (kind != 1) A[i] = Af[i];
    }
    for (int64_t i = 0; i < rb * ldb; i++) {
        Bh[i] = f32_to_bf16((float)B[i]);
        Bf[i] = kind == 2 ? bf16_to_f32(Bh[i]) : (float)B[i];
        if (kind != 1) B[i] = Bf[i];
    }
    for (int64_t i = 0; i < M * ldc; i++) {
        Cf[i] = (float)C0[i];
        if (kind != 1) C0[i] = Cf[i];
        if (beta == 0) Cf[i] = NAN; /* beta == 0: C must not be read */
        Cd[i] = beta == 0 ? NAN : C0[i];
    }
    ref_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C0, ldc, want, bound);
    int rc;
    if (kind == 0) rc = k_gemm_f32(ta, tb, M, N, K, (float)alpha, Af, lda, Bf, ldb, (float)beta, Cf, ldc);
    else if (kind == 1) rc = k_gemm_f64(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cd, ldc);
    else rc = k_gemm_bf16(ta, tb, M, N, K, (float)alpha, Ah, lda, Bh, ldb, (float)beta, Cf, ldc);
    const char *names[3] = {"f32", "f64", "bf16"};
    const char *label = fmt("gemm %s ta=%d tb=%d M=%lld N=%lld K=%lld alpha=%g beta=%g",
                            names[kind], ta, tb, (long long)M, (long long)N, (long long)K,
                            alpha, beta);
    CHECK(rc == 0);
    const double rtol = kind == 0 ? 1e-5 : kind == 1 ? 1e-13 : 1e-2;
    int ok = 1;
    for (int64_t i = 0; i < M && ok; i++)
        for (int64_t j = 0; j < N && ok; j++) {
            double g = kind == 1 ? Cd[i * ldc + j] : Cf[i * ldc + j];
            if (!(fabs(g - want[i * N + j]) <= rtol * bound[i * N + j] + 1e-30)) {
                printf("%s:%d: FAIL %s: C[%lld,%lld] got %.9g want %.9g\n", __FILE__, __LINE__,
                       label, (long long)i, (long long)j, g, want[i * N + j]);
                ok = 0;
            }
        }
    /* the padding between rows of C is untouched */
    for (int64_t i = 0; i < M && ok; i++)
        for (int64_t j = N; j < ldc; j++) {
            double g = kind == 1 ? Cd[i * ldc + j] : Cf[i * ldc + j];
            double w = beta == 0 ? NAN : C0[i * ldc + j];
            if (!(isnan(w) ? isnan(g) : g == (kind == 1 ? w : (float)w))) {
                printf("%s:%d: FAIL %s: padding C[%lld,%lld] changed\n", __FILE__, __LINE__,
                       label, (long long)i, (long long)j);
                ok = 0;
                break;
            }
        }
    ok ? n_pass++ : n_fail++;
    free(A), free(B), free(C0), free(want), free(bound), free(Af), free(Bf), free(Cf);
    free(Ah), free(Bh), free(Cd);
}

static void test_gemm(void) {
    for (int kind = 0; kind < 3; kind++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                gemm_case(kind, ta, tb, 37, 29, 53, 0.7, 0, 3);
                gemm_case(kind, ta, tb, 37, 29, 53, 1, 0.3, 0);
                gemm_case(kind, ta, tb, 16, 8, 300, -1.5, 1, 5);
                gemm_case(kind, ta, tb, 1, 40, 7, 1, 0, 0);
                gemm_case(kind, ta, tb, 5, 1, 9, 1, 0.5, 2);
                gemm_case(kind, ta, tb, 130, 70, 90, 1, 0, 1);
                /* above the threading threshold: split over the team by rows, then by columns */
                gemm_case(kind, ta, tb, 301, 97, 80, 1, 0.5, 3);
                gemm_case(kind, ta, tb, 41, 530, 96, -1, 0, 2);
            }
    /* f32 products under ~1 MFLOP go through OpenBLAS, larger ones through
     * oneDNN (gemm.c): odd shapes on both sides of the boundary, and the
     * seed MLP's products (batch 32 and its last batch of 16) */
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gemm_case(0, ta, tb, 63, 65, 127, 0.7, 0.3, 1);  /* 1.04 MFLOP: small */
            gemm_case(0, ta, tb, 65, 63, 129, -1, 0, 2);     /* 1.06 MFLOP: large */
            gemm_case(0, ta, tb, 3, 1021, 171, 1, 1, 0);     /* 1.05 MFLOP: large */
            gemm_case(0, ta, tb, 1, 513, 1021, 1.5, 0, 3);   /* 1.05 MFLOP: large */
            gemm_case(0, ta, tb, 2, 3, 87000, 1, 0, 1);      /* long K, small */
        }
    static const int mlp[][5] = {{0, 1, 32, 128, 20}, {0, 1, 32, 64, 128}, {0, 1, 32, 3, 64},
                                 {0, 0, 32, 64, 3},   {1, 0, 3, 64, 32},   {0, 0, 32, 128, 64},
                                 {1, 0, 64, 128, 32}, {1, 0, 128, 20, 32}, {0, 1, 16, 128, 20},
                                 {1, 0, 128, 20, 16}};
    for (int i = 0; i < (int)(sizeof mlp / sizeof mlp[0]); i++)
        for (int beta = 0; beta < 2; beta++)
            gemm_case(0, mlp[i][0], mlp[i][1], mlp[i][2], mlp[i][3], mlp[i][4], 1, beta, 0);
    /* bf16 primitive cache: more shapes than slots, then repeats */
    for (int rep = 0; rep < 2; rep++)
        for (int k = 1; k <= 20; k++) gemm_case(2, k & 1, (k >> 1) & 1, k, 3 + k, 2 * k, 1, 0, 0);
    for (int kind = 0; kind < 3; kind++) gemm_case(kind, 0, 1, 3, 4, 0, 1, 0.5, 0); /* K = 0 */
    /* a single stored row may have any row stride (broadcast, lda = 0) */
    float a[3] = {1, 2, 3}, b[3 * 2] = {1, 0, 0, 1, 1, 1}, c[2];
    CHECK(k_gemm_f32(0, 0, 1, 2, 3, 1, a, 0, b, 2, 0, c, 2) == 0 && c[0] == 4 && c[1] == 5);
    uint16_t ah[3] = {0x3F80, 0x4000, 0x4040}, bh[6];
    for (int i = 0; i < 6; i++) bh[i] = f32_to_bf16(b[i]);
    CHECK(k_gemm_bf16(0, 0, 1, 2, 3, 1, ah, 0, bh, 2, 0, c, 0) == 0 && c[0] == 4 && c[1] == 5);
    /* overlapping rows are refused, not computed wrong */
    CHECK(k_gemm_f32(0, 0, 2, 2, 3, 1, a, 1, b, 2, 0, c, 2) != 0);
}

/* ======================= indexing ======================= */

static void test_index(void) {
    const int64_t outer = 3, n = 7, inner = 600, m = 5;
    double *x = rand_d(outer * n * inner, -1, 1), *out = NEW(double, outer * m * inner);
    double *want = NEW(double, outer * m * inner);
    int64_t *gi = NEW(int64_t, outer * m * inner), sel[5] = {6, 0, 3, 3, 6};
    for (int64_t i = 0; i < outer * m * inner; i++) gi[i] = irand(0, n - 1);
    /* gather (8-byte and 4-byte elements) */
    k_gather(x, outer, n, inner, gi, m, out, 8);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < m; j++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t q = (o * m + j) * inner + i;
                want[q] = x[(o * n + gi[q]) * inner + i];
            }
    CHECK_CLOSE("gather f64", out, want, outer * m * inner, 0, 0);
    float *xf = NEW(float, outer * n * inner), *of = NEW(float, outer * m * inner);
    for (int64_t i = 0; i < outer * n * inner; i++) xf[i] = (float)x[i];
    k_gather(xf, outer, n, inner, gi, m, of, 4);
    CHECK_CLOSE("gather f32", of, want, outer * m * inner, 1e-7, 0);
    /* index_select, inner > 1 and inner == 1; 2- and 1-byte elements */
    k_index_select(x, outer, n, inner, sel, m, out, 8);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < m; j++)
            for (int64_t i = 0; i < inner; i++)
                want[(o * m + j) * inner + i] = x[(o * n + sel[j]) * inner + i];
    CHECK_CLOSE("index_select f64", out, want, outer * m * inner, 0, 0);
    uint16_t h[2 * 7], ho[2 * 5];
    for (int i = 0; i < 14; i++) h[i] = (uint16_t)(100 + i);
    k_index_select(h, 2, 7, 1, sel, 5, ho, 2);
    CHECK(ho[0] == 106 && ho[1] == 100 && ho[3] == 103 && ho[5] == 113 && ho[9] == 113);
    uint8_t u[7] = {10, 11, 12, 13, 14, 15, 16}, uo[5];
    k_index_select(u, 1, 7, 1, sel, 5, uo, 1);
    CHECK(uo[0] == 16 && uo[1] == 10 && uo[2] == 13 && uo[4] == 16);
    /* scatter_add: adjoint of gather, duplicates accumulate */
    double *g = rand_d(outer * m * inner, -1, 1), *gx = rand_d(outer * n * inner, -1, 1);
    double *gwant = NEW(double, outer * n * inner);
    memcpy(gwant, gx, sizeof(double) * (size_t)(outer * n * inner));
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < m; j++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t q = (o * m + j) * inner + i;
                gwant[(o * n + gi[q]) * inner + i] += g[q];
            }
    k_scatter_add(DT_F64, gx, outer, n, inner, gi, m, g);
    CHECK_CLOSE("scatter_add f64", gx, gwant, outer * n * inner, 1e-15, 1e-15);
    float *gf = NEW(float, outer * m * inner), *gxf = NEW(float, outer * n * inner);
    for (int64_t i = 0; i < outer * m * inner; i++) gf[i] = (float)g[i], g[i] = gf[i];
    for (int64_t i = 0; i < outer * n * inner; i++) gxf[i] = 0, gwant[i] = 0;
    for (int64_t q = 0; q < outer * m * inner; q++) {
        int64_t o = q / (m * inner), i = q % inner;
        gwant[(o * n + gi[q]) * inner + i] += g[q];
    }
    k_scatter_add(DT_F32, gxf, outer, n, inner, gi, m, gf);
    CHECK_CLOSE("scatter_add f32", gxf, gwant, outer * n * inner, 1e-6, 1e-6);
    /* index_add: adjoint of index_select (sel has duplicates 3 and 6) */
    for (int64_t i = 0; i < outer * n * inner; i++) gx[i] = 1, gwant[i] = 1;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < m; j++)
            for (int64_t i = 0; i < inner; i++)
                gwant[(o * n + sel[j]) * inner + i] += g[(o * m + j) * inner + i];
    k_index_add(DT_F64, gx, outer, n, inner, sel, m, g);
    CHECK_CLOSE("index_add f64", gx, gwant, outer * n * inner, 1e-15, 1e-15);
    for (int64_t i = 0; i < outer * n * inner; i++) gxf[i] = 1;
    k_index_add(DT_F32, gxf, outer, n, inner, sel, m, gf);
    CHECK_CLOSE("index_add f32", gxf, gwant, outer * n * inner, 1e-6, 1e-6);
    /* embedding-style: (1, vocab, dim) rows, inner == 1 scatter */
    float emb[4] = {0}, ge[6] = {1, 2, 3, 4, 5, 6};
    int64_t ids[6] = {3, 1, 3, 0, 3, 1};
    k_scatter_add(DT_F32, emb, 1, 4, 1, ids, 6, ge);
    CHECK(emb[0] == 4 && emb[1] == 8 && emb[2] == 0 && emb[3] == 9);
    free(x), free(out), free(want), free(gi), free(xf), free(of), free(g), free(gx), free(gwant);
    free(gf), free(gxf);
}

/* ======================= AdamW ======================= */

static void adamw_case(int64_t n, double wd) {
    const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    float *p = rand_f(n, -1, 1), *m = NEW(float, n), *v = NEW(float, n), *g = NEW(float, n);
    double *pd = to_d(p, n), *md = NEW(double, n), *vd = NEW(double, n);
    for (int64_t i = 0; i < n; i++) m[i] = v[i] = 0, md[i] = vd[i] = 0;
    for (int64_t step = 1; step <= 3; step++) {
        for (int64_t i = 0; i < n; i++) g[i] = (float)uni(-1, 1);
        k_adamw_f32(n, p, g, m, v, lr, b1, b2, eps, wd, step);
        for (int64_t i = 0; i < n; i++) { /* scalar reference, straight from the formula */
            pd[i] *= 1 - lr * wd;
            md[i] = b1 * md[i] + (1 - b1) * g[i];
            vd[i] = b2 * vd[i] + (1 - b2) * (double)g[i] * g[i];
            double bc1 = 1 - pow(b1, (double)step), bc2 = 1 - pow(b2, (double)step);
            pd[i] -= lr / bc1 * md[i] / (sqrt(vd[i]) / sqrt(bc2) + eps);
        }
    }
    const char *label = fmt("adamw n=%lld wd=%g", (long long)n, wd);
    CHECK_CLOSE(fmt("%s p", label), p, pd, n, 1e-5, 1e-6);
    CHECK_CLOSE(fmt("%s m", label), m, md, n, 1e-5, 1e-7);
    CHECK_CLOSE(fmt("%s v", label), v, vd, n, 1e-5, 1e-9);
    free(p), free(m), free(v), free(g), free(pd), free(md), free(vd);
}

static void test_adamw(void) {
    adamw_case(1000, 0.01);
    adamw_case(100003, 0.1); /* parallel chunks */
    adamw_case(17, 0);
}

/* ======================= vmath (vectorised exp) ======================= */

/* vm_exp_f32 against libm's double exp: within 2 ulp of the float result
 * over the normal range, 0 below ln FLT_MIN, inf above ln FLT_MAX, NaN kept;
 * the 8-lane form gives the scalar form's bits. */
static void test_vmath(void) {
    int bad = 0, lanes_bad = 0;
    double worst = 0;
    for (int i = 0; i <= 400000; i++) {
        const float x = (float)(-87.0 + 175.5 * i / 400000.0);
        const double want = exp((double)x);
        const float got = vm_exp_f32(x);
        const double ulp = ldexp(1.0, ilogb(want) - 23);
        const double err = fabs(got - want) / ulp;
        if (want > FLT_MAX ? !isinf(got) : err > 2) bad++;
        if (want <= FLT_MAX && err > worst) worst = err;
    }
    for (int i = 0; i < 1000; i++) {
        float xs[8], ys[8];
        for (int k = 0; k < 8; k++) xs[k] = (float)(-90 + 0.0237 * (i * 8 + k));
        _mm256_storeu_ps(ys, vm_exp_ps(_mm256_loadu_ps(xs)));
        for (int k = 0; k < 8; k++) lanes_bad += memcmp(&ys[k], &(float){vm_exp_f32(xs[k])}, sizeof(float)) != 0;
    }
    CHECK(bad == 0);
    CHECK(worst <= 2);
    CHECK(lanes_bad == 0);
    CHECK(vm_exp_f32(0) == 1.0f);
    CHECK(vm_exp_f32(-88.0f) == 0.0f);
    CHECK(vm_exp_f32(-INFINITY) == 0.0f);
    CHECK(isinf(vm_exp_f32(89.0f)) && vm_exp_f32(INFINITY) == INFINITY);
    CHECK(isnan(vm_exp_f32(NAN)));
    CHECK(vm_exp_f32(88.7f) > 3.2e38f && !isinf(vm_exp_f32(88.7f))); /* n = 128: the split scale */
}

/* ======================= threads ======================= */

static void test_threads(void) {
    const int before = kernel_get_threads();
    kernel_set_threads(1);
    CHECK(kernel_get_threads() == 1);
    kernel_set_threads(1 << 20); /* clamped to the core count */
    const int cores = kernel_get_threads();
    CHECK(cores >= 1 && cores < (1 << 20));
    kernel_set_threads(0);
    CHECK(kernel_get_threads() == cores);
    kernel_set_threads(before);
}

/* ======================= benchmarks (not tests) ======================= */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void bench(void) {
    enum { S = 1024 };
    float *A = rand_f(S * S, -1, 1), *B = rand_f(S * S, -1, 1), *C = NEW(float, S * S);
    uint16_t *Ah = NEW(uint16_t, S * S), *Bh = NEW(uint16_t, S * S);
    for (int i = 0; i < S * S; i++) Ah[i] = f32_to_bf16(A[i]), Bh[i] = f32_to_bf16(B[i]);
    const double flop = 2.0 * S * S * S;
    for (int kind = 0; kind < 2; kind++) {
        double best = 1e30;
        for (int r = 0; r < 5; r++) {
            double t = now();
            if (kind == 0) k_gemm_f32(0, 0, S, S, S, 1, A, S, B, S, 0, C, S);
            else k_gemm_bf16(0, 0, S, S, S, 1, Ah, S, Bh, S, 0, C, S);
            t = now() - t;
            best = t < best ? t : best;
        }
        printf("bench gemm %s 1024^3, %d threads: %.1f GFLOP/s\n", kind ? "bf16" : "f32",
               kernel_get_threads(), flop / best * 1e-9);
    }
    float a[16], b[16], o[16];
    for (int i = 0; i < 16; i++) a[i] = (float)i, b[i] = 1;
    const int reps = 2000000;
    double t = now();
    for (int r = 0; r < reps; r++) {
        k_binary_f32(KB_ADD, 16, a, 1, b, 1, o, 1);
        __asm__ volatile("" ::: "memory");
    }
    printf("bench k_binary_f32 add n=16: %.1f ns/call\n", (now() - t) / reps * 1e9);
    t = now();
    for (int r = 0; r < reps; r++) {
        k_unary_f32(KU_RELU, 16, a, 1, o, 1, 0, 0);
        __asm__ volatile("" ::: "memory");
    }
    printf("bench k_unary_f32 relu n=16: %.1f ns/call\n", (now() - t) / reps * 1e9);
    enum { BIG = 1 << 22 };
    float *x = rand_f(BIG, -1, 1), *y = rand_f(BIG, -1, 1), *z = NEW(float, BIG);
    t = now();
    for (int r = 0; r < 20; r++) k_binary_f32(KB_ADD, BIG, x, 1, y, 1, z, 1);
    printf("bench k_binary_f32 add n=4M: %.2f ns/elem\n", (now() - t) / 20 / BIG * 1e9);
    t = now();
    for (int r = 0; r < 20; r++) k_binary_f32(KB_MAX, BIG, x, 1, y, 0, z, 1);
    printf("bench k_binary_f32 max (b broadcast) n=4M: %.2f ns/elem\n", (now() - t) / 20 / BIG * 1e9);
    float s;
    t = now();
    for (int r = 0; r < 20; r++) k_reduce_f32(KR_SUM, x, 1, BIG, 1, &s);
    printf("bench k_reduce_f32 sum n=4M: %.2f ns/elem\n", (now() - t) / 20 / BIG * 1e9);
    free(A), free(B), free(C), free(Ah), free(Bh), free(x), free(y), free(z);
}

int main(int argc, char **argv) {
    test_bf16();
    test_f16();
    test_fp8();
    test_cast();
    test_fill();
    test_where();
    test_binary();
    test_vmath();
    test_unary();
    test_unary_backward();
    test_reduce();
    test_argreduce_var();
    test_softmax();
    test_cross_entropy();
    test_layernorm();
    test_gemm();
    test_index();
    test_adamw();
    test_threads();
    if (argc > 1 && strcmp(argv[1], "bench") == 0) bench();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
