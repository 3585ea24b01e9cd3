/* elementwise.c: strided 1-D elementwise kernels: binary ops (stride 0
 * broadcasts), unary ops and their fused backward, where, casts and fills.
 *
 * Each op table (BIN_OPS, UN_OPS) is written once and expanded into two loop
 * shapes, contiguous and generic-stride: the op is chosen once (switch), then
 * one tight loop runs. gcc vectorises the contiguous loops; a broadcast
 * scalar operand is replicated into a small block so it takes them too.
 * In-place use (o == a) is allowed, so no restrict here: gcc adds a runtime
 * overlap check instead. Runs of KERNEL_PAR_MIN elements or more are cut
 * into CHUNK pieces for OpenMP. */
#include <math.h>
#include <string.h>
#include "simd.h"
#include "kernels.h"
#include "vmath.h"
#include "special.h"

#define CHUNK 8192
/* serial bodies: one copy, shared by the inline and the OpenMP call sites */
#define NOINLINE __attribute__((noinline))
/* Generic-stride loops only ever see strides the callers did not route to
 * the contiguous loops: versioning them for stride 1 is dead code (and most
 * of this file's compile time). */
#define STRIDED_FN __attribute__((noinline, optimize("no-version-loops-for-strides")))

/* Run the statement on [lo, lo + len) pieces covering [0, n): inline as one
 * piece for small n, CHUNK-sized pieces across the OpenMP team otherwise. */
#define EW_CHUNKS(n, lo, len, ...)                                          \
    do {                                                                    \
        if ((n) < KERNEL_PAR_MIN) {                                         \
            const int64_t lo = 0, len = (n);                                \
            __VA_ARGS__;                                                    \
        } else {                                                            \
            KERNEL_FOR(c_, ((n) + CHUNK - 1) / CHUNK, (n), {                \
                const int64_t lo = c_ * CHUNK;                              \
                const int64_t len = (n) - lo < CHUNK ? (n) - lo : CHUNK;    \
                __VA_ARGS__; });                                            \
        }                                                                   \
    } while (0)

/* Raw element types for dtype-agnostic moves (may_alias: the bits belong to
 * floats as often as to integers). */
typedef uint16_t __attribute__((may_alias)) u16a;
typedef uint32_t __attribute__((may_alias)) u32a;
typedef uint64_t __attribute__((may_alias)) u64a;

/* ======================= scalar semantics ======================= */

#define GELU_K 0.7978845608028654   /* sqrt(2/pi) */
#define GELU_C 0.044715
#define INV_SQRT_2PI 0.3989422804014327
#define TWO_OVER_SQRT_PI 1.1283791670955126
#define LN_2 0.69314718055994530942
#define LN_10 2.30258509299404568402

/* NaN-propagating max/min (torch.maximum / minimum). */
/* NaN from either side wins; on a tie (0 and -0) x, as torch.maximum / minimum */
#define MAX_NAN(x, y) ((y) != (y) || (y) > (x) ? (y) : (x))
#define MIN_NAN(x, y) ((y) != (y) || (y) < (x) ? (y) : (x))

/* Float arithmetic, Python-style floor division and remainder, and the
 * derivative helpers, instantiated for float (S=f32) and double (S=f64). */
#define DEF_FLOAT_SCALARS(S, T, MS)                                         \
    static inline T add_##S(T x, T y) { return x + y; }                     \
    static inline T sub_##S(T x, T y) { return x - y; }                     \
    static inline T mul_##S(T x, T y) { return x * y; }                     \
    static inline T div_##S(T x, T y) { return x / y; }                     \
    static inline T pow_##S(T x, T y) { return pow##MS(x, y); }             \
    /* Python's float //: fmod-based, exact where floor(x / y) is not */    \
    static inline T floordiv_##S(T x, T y) {                                \
        if (y == 0) return x / y;                                           \
        T mod = fmod##MS(x, y), div = (x - mod) / y;                        \
        if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1;                   \
        if (div == 0) return copysign##MS(0, x / y);                        \
        T fl = floor##MS(div);                                              \
        return div - fl > (T)0.5 ? fl + 1 : fl;                             \
    }                                                                       \
    static inline T remainder_##S(T x, T y) {                               \
        T mod = fmod##MS(x, y);                                             \
        if (mod != 0 && ((y < 0) != (mod < 0))) mod += y;                   \
        return mod;                                                         \
    }                                                                       \
    static inline T fmod_##S(T x, T y) { return fmod##MS(x, y); }           \
    static inline T atan2_##S(T x, T y) { return atan2##MS(x, y); }         \
    static inline T sign_##S(T x) {                                         \
        return (T)((x > 0) - (x < 0)); /* NaN -> 0, as torch */             \
    }                                                                       \
    /* min(max(x, lo), hi) as torch: hi wins over lo; a NaN bound gives NaN */ \
    static inline T clamp_##S(T x, T lo, T hi) {                            \
        T t = x < lo || lo != lo ? lo : x;                                  \
        return t > hi || hi != hi ? hi : t;                                 \
    }                                                                       \
    /* whether clamp's gradient reaches x: strictly inside the bounds, as   \
     * torch 2.x's, never at NaN; a bound at its own side's infinity is a  \
     * missing one (torch's one-sided clamp checks only the bound given:   \
     * clamp(max) passes x = -inf's gradient; an explicit infinite bound,  \
     * which torch checks, is the one difference) */                        \
    static inline int clamp_passes_##S(T x, T lo, T hi) {                   \
        return x == x && (x > lo || lo == -(T)INFINITY) && (x < hi || hi == (T)INFINITY); \
    }                                                                       \
    static inline T sigmoid_##S(T x) { return (T)1 / ((T)1 + exp##MS(-x)); } \
    /* lgamma_r: lgamma without the global signgam (threads) */             \
    static inline T lgamma_##S(T x) {                                       \
        int sign;                                                           \
        return lgamma##MS##_r(x, &sign);                                    \
    }                                                                       \
    static inline T gelu_##S(T x) {                                         \
        return (T)0.5 * x * ((T)1 + erf##MS(x * (T)M_SQRT1_2));             \
    }                                                                       \
    /* 0.5 (1 + tanh u) = 1 / (1 + e^-2u): one exp, vectorised for f32 */ \
    static inline T gelu_tanh_##S(T x) {                                    \
        T u = (T)GELU_K * (x + (T)GELU_C * x * x * x);                      \
        return x / ((T)1 + VEXP_##S((T)-2 * u));                            \
    }                                                                       \
    /* d/dx gelu = Phi(x) + x phi(x) */                                     \
    static inline T gelu_grad_##S(T x) {                                    \
        T cdf = (T)0.5 * ((T)1 + erf##MS(x * (T)M_SQRT1_2));                \
        return cdf + x * (T)INV_SQRT_2PI * exp##MS((T)-0.5 * x * x);        \
    }                                                                       \
    /* s = 0.5 (1 + tanh u); d/dx x s = s + 2 x s (1 - s) du/dx */        \
    static inline T gelu_tanh_grad_##S(T x) {                               \
        T u = (T)GELU_K * (x + (T)GELU_C * x * x * x);                      \
        T s = (T)1 / ((T)1 + VEXP_##S((T)-2 * u));                          \
        T du = (T)GELU_K * ((T)1 + (T)(3 * GELU_C) * x * x);                \
        return s + (T)2 * x * s * ((T)1 - s) * du;                          \
    }                                                                       \
    static inline T silu_grad_##S(T x) {                                    \
        T s = sigmoid_##S(x);                                               \
        return s * ((T)1 + x * ((T)1 - s));                                 \
    }

#define VEXP_f32 vm_exp_f32 /* vmath.h: vectorisable */
#define VEXP_f64 exp
DEF_FLOAT_SCALARS(f32, float, f)
DEF_FLOAT_SCALARS(f64, double, )

/* int64: wrapping arithmetic (no UB); division by 0 gives 0 instead of a
 * trap, INT64_MIN / -1 wraps. DIV truncates (C / torch rounding_mode='trunc'). */
static inline int64_t wrap_neg(int64_t x) { return (int64_t)(0 - (uint64_t)x); }
static inline int64_t add_i64(int64_t x, int64_t y) { return (int64_t)((uint64_t)x + (uint64_t)y); }
static inline int64_t sub_i64(int64_t x, int64_t y) { return (int64_t)((uint64_t)x - (uint64_t)y); }
static inline int64_t mul_i64(int64_t x, int64_t y) { return (int64_t)((uint64_t)x * (uint64_t)y); }
static inline int64_t div_i64(int64_t x, int64_t y) {
    if (y == 0) return 0;
    return y == -1 ? wrap_neg(x) : x / y;
}
static inline int64_t floordiv_i64(int64_t x, int64_t y) {
    if (y == 0) return 0;
    if (y == -1) return wrap_neg(x);
    int64_t q = x / y;
    return (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q;
}
static inline int64_t remainder_i64(int64_t x, int64_t y) {
    if (y == 0 || y == -1) return 0;
    int64_t r = x % y;
    return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r;
}
static inline int64_t fmod_i64(int64_t x, int64_t y) { return y == 0 || y == -1 ? 0 : x % y; }
static inline int64_t atan2_i64(int64_t x, int64_t y) { return (int64_t)atan2((double)x, (double)y); } /* (the core computes atan2 in float) */
static inline int64_t clamp_i64(int64_t x, int64_t lo, int64_t hi) {
    int64_t t = x < lo ? lo : x; /* min(max(x, lo), hi): hi wins when lo > hi, as torch */
    return t > hi ? hi : t;
}
/* x^y by squaring; negative y gives the truncated real result. */
static inline int64_t pow_i64(int64_t x, int64_t y) {
    if (y < 0) return x == 1 ? 1 : x == -1 ? ((y & 1) ? -1 : 1) : 0;
    uint64_t r = 1, b = (uint64_t)x;
    for (; y; y >>= 1, b *= b)
        if (y & 1) r *= b;
    return (int64_t)r;
}

/* double -> int64 saturating, NaN -> 0 (integer clamp bounds never UB). */
static inline int64_t sat_i64(double v) {
    if (v != v) return 0;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    if (v >= 9223372036854775808.0) return INT64_MAX;
    return (int64_t)v;
}

/* ======================= binary ======================= */

/* The bitwise ops in the shared op table: int64 operands only (the core
 * refuses float ones); a float instantiation compiles to 0. */
static inline double no_bits(double x, double y) { return (void)x, (void)y, 0; }
static inline int64_t bits_and(int64_t x, int64_t y) { return kbits_i64(KB_BAND, x, y); }
static inline int64_t bits_or(int64_t x, int64_t y) { return kbits_i64(KB_BOR, x, y); }
static inline int64_t bits_xor(int64_t x, int64_t y) { return kbits_i64(KB_BXOR, x, y); }
static inline int64_t bits_shl(int64_t x, int64_t y) { return kbits_i64(KB_SHL, x, y); }
static inline int64_t bits_shr(int64_t x, int64_t y) { return kbits_i64(KB_SHR, x, y); }
#define BITS(f, x, y) _Generic((x), int64_t: f, default: no_bits)(x, y)

/* The op table is written once and expanded into two loop shapes:
 * LOOP(T, OT, EXPR) computes o = EXPR(x, y) with output element type OT. */
#define BIN_OPS(S, T, LOOP)                                                 \
    case KB_ADD: LOOP(T, T, add_##S(x, y)); break;                          \
    case KB_SUB: LOOP(T, T, sub_##S(x, y)); break;                          \
    case KB_MUL: LOOP(T, T, mul_##S(x, y)); break;                          \
    case KB_DIV: LOOP(T, T, div_##S(x, y)); break;                          \
    case KB_POW: LOOP(T, T, pow_##S(x, y)); break;                          \
    case KB_MAX: LOOP(T, T, MAX_NAN(x, y)); break;                          \
    case KB_MIN: LOOP(T, T, MIN_NAN(x, y)); break;                          \
    case KB_EQ: LOOP(T, uint8_t, x == y); break;                            \
    case KB_NE: LOOP(T, uint8_t, x != y); break;                            \
    case KB_LT: LOOP(T, uint8_t, x < y); break;                             \
    case KB_LE: LOOP(T, uint8_t, x <= y); break;                            \
    case KB_GT: LOOP(T, uint8_t, x > y); break;                             \
    case KB_GE: LOOP(T, uint8_t, x >= y); break;                            \
    case KB_AND: LOOP(T, uint8_t, (x != 0) & (y != 0)); break;              \
    case KB_OR: LOOP(T, uint8_t, (x != 0) | (y != 0)); break;               \
    case KB_XOR: LOOP(T, uint8_t, (x != 0) ^ (y != 0)); break;              \
    case KB_FLOORDIV: LOOP(T, T, floordiv_##S(x, y)); break;                \
    case KB_REMAINDER: LOOP(T, T, remainder_##S(x, y)); break;              \
    case KB_FMOD: LOOP(T, T, fmod_##S(x, y)); break;                        \
    case KB_ATAN2: LOOP(T, T, atan2_##S(x, y)); break;                      \
    case KB_BAND: LOOP(T, T, BITS(bits_and, x, y)); break;                  \
    case KB_BOR: LOOP(T, T, BITS(bits_or, x, y)); break;                    \
    case KB_BXOR: LOOP(T, T, BITS(bits_xor, x, y)); break;                  \
    case KB_SHL: LOOP(T, T, BITS(bits_shl, x, y)); break;                   \
    case KB_SHR: LOOP(T, T, BITS(bits_shr, x, y)); break;                   \
    default: break;

#define BIN_CONTIG(T, OT, EXPR)                                             \
    for (int64_t i = 0; i < n; i++) {                                       \
        const T x = a[i], y = b[i];                                         \
        ((OT *)o)[i] = (OT)(EXPR);                                          \
    }
#define BIN_STRIDED(T, OT, EXPR)                                            \
    for (int64_t i = 0; i < n; i++) {                                       \
        const T x = a[i * sa], y = b[i * sb];                               \
        ((OT *)o)[i * so] = (OT)(EXPR);                                     \
    }

#define BCAST 512 /* block of a broadcast scalar replicated for BIN_CONTIG */

#define DEF_BINARY(S, T)                                                    \
    static NOINLINE void bin_contig_##S(KBinOp op, int64_t n, const T *a,   \
                                        const T *b, void *o) {              \
        switch (op) { BIN_OPS(S, T, BIN_CONTIG) }                           \
    }                                                                       \
    static STRIDED_FN void bin_strided_##S(KBinOp op, int64_t n,            \
                                           const T *a, int64_t sa,          \
                                           const T *b, int64_t sb, void *o, \
                                           int64_t so) {                    \
        switch (op) { BIN_OPS(S, T, BIN_STRIDED) }                          \
    }                                                                       \
    /* One run. A broadcast scalar operand (stride 0 against stride 1) is   \
     * replicated into a block so the contiguous loops serve it too. */     \
    static void bin_##S(KBinOp op, int64_t n, const T *a, int64_t sa,       \
                        const T *b, int64_t sb, void *o, int64_t so) {      \
        if (so == 1 && sa == 1 && sb == 1) {                                \
            bin_contig_##S(op, n, a, b, o);                                 \
        } else if (so == 1 && ((sa == 0 && sb == 1) || (sa == 1 && sb == 0))) { \
            T rep[BCAST];                                                   \
            const T v = sa == 0 ? a[0] : b[0];                              \
            for (int64_t i = 0; i < n && i < BCAST; i++) rep[i] = v;        \
            const int64_t osz = kbin_is_compare(op) ? 1 : (int64_t)sizeof(T); \
            for (int64_t lo = 0; lo < n; lo += BCAST)                       \
                bin_contig_##S(op, n - lo < BCAST ? n - lo : BCAST,         \
                               sa ? a + lo : rep, sb ? b + lo : rep,        \
                               (char *)o + lo * osz);                       \
        } else {                                                            \
            bin_strided_##S(op, n, a, sa, b, sb, o, so);                    \
        }                                                                   \
    }                                                                       \
    void k_binary_##S(KBinOp op, int64_t n, const T *a, int64_t sa,         \
                      const T *b, int64_t sb, void *o, int64_t so) {        \
        if (n <= 0) return;                                                 \
        const int64_t osz = kbin_is_compare(op) ? 1 : (int64_t)sizeof(T);   \
        EW_CHUNKS(n, lo, len,                                               \
                  bin_##S(op, len, a + lo * sa, sa, b + lo * sb, sb,        \
                          (char *)o + lo * so * osz, so));                  \
    }

DEF_BINARY(f32, float)
DEF_BINARY(f64, double)
DEF_BINARY(i64, int64_t)

/* ======================= unary ======================= */

/* Op table (see BIN_OPS): LOOP(T, EXPR) computes o = EXPR(x); q1, q2 are
 * p1, p2 in T. POW picks a cheap form for the common exponents (as torch). */
#define UN_OPS(S, T, MS, LOOP)                                              \
    case KU_NEG: LOOP(T, -x); break;                                        \
    case KU_EXP: LOOP(T, exp##MS(x)); break;                                \
    case KU_LOG: LOOP(T, log##MS(x)); break;                                \
    case KU_SQRT: LOOP(T, sqrt##MS(x)); break;                              \
    case KU_RSQRT: LOOP(T, (T)1 / sqrt##MS(x)); break;                      \
    case KU_TANH: LOOP(T, tanh##MS(x)); break;                              \
    case KU_SIGMOID: LOOP(T, sigmoid_##S(x)); break;                        \
    case KU_RELU: LOOP(T, x < 0 ? (T)0 : x); break;                         \
    case KU_GELU: LOOP(T, gelu_##S(x)); break;                              \
    case KU_GELU_TANH: LOOP(T, gelu_tanh_##S(x)); break;                    \
    case KU_SILU: LOOP(T, x * sigmoid_##S(x)); break;                       \
    case KU_ABS: LOOP(T, fabs##MS(x)); break;                               \
    case KU_SIN: LOOP(T, sin##MS(x)); break;                                \
    case KU_COS: LOOP(T, cos##MS(x)); break;                                \
    case KU_SQUARE: LOOP(T, x * x); break;                                  \
    case KU_RECIP: LOOP(T, (T)1 / x); break;                                \
    case KU_SIGN: LOOP(T, sign_##S(x)); break;                              \
    case KU_CLAMP: LOOP(T, clamp_##S(x, q1, q2)); break;                    \
    case KU_POW:                                                            \
        if (p1 == 2) LOOP(T, x * x)                                         \
        else if (p1 == 3) LOOP(T, x * x * x)                                \
        else if (p1 == 1) LOOP(T, x)                                        \
        else if (p1 == 0.5) LOOP(T, sqrt##MS(x))                            \
        else if (p1 == -1) LOOP(T, (T)1 / x)                                \
        else if (p1 == -0.5) LOOP(T, (T)1 / sqrt##MS(x))                    \
        else if (p1 == -2) LOOP(T, (T)1 / (x * x))                          \
        else LOOP(T, pow##MS(x, q1))                                        \
        break;                                                              \
    case KU_RPOW: LOOP(T, pow##MS(q1, x)); break;                           \
    case KU_LOG1P: LOOP(T, log1p##MS(x)); break;                            \
    case KU_EXPM1: LOOP(T, expm1##MS(x)); break;                            \
    case KU_FLOOR: LOOP(T, floor##MS(x)); break;                            \
    case KU_CEIL: LOOP(T, ceil##MS(x)); break;                              \
    case KU_ROUND: LOOP(T, nearbyint##MS(x)); break; /* half to even */     \
    case KU_TRUNC: LOOP(T, trunc##MS(x)); break;                            \
    case KU_ERF: LOOP(T, erf##MS(x)); break;                                \
    case KU_LEAKY_RELU: LOOP(T, x < 0 ? x * q1 : x); break;                 \
    case KU_NOT: LOOP(T, x == 0 ? (T)1 : (T)0); break;                      \
    case KU_TAN: LOOP(T, tan##MS(x)); break;                                \
    case KU_ASIN: LOOP(T, asin##MS(x)); break;                              \
    case KU_ACOS: LOOP(T, acos##MS(x)); break;                              \
    case KU_ATAN: LOOP(T, atan##MS(x)); break;                              \
    case KU_SINH: LOOP(T, sinh##MS(x)); break;                              \
    case KU_COSH: LOOP(T, cosh##MS(x)); break;                              \
    case KU_ASINH: LOOP(T, asinh##MS(x)); break;                            \
    case KU_ACOSH: LOOP(T, acosh##MS(x)); break;                            \
    case KU_ATANH: LOOP(T, atanh##MS(x)); break;                            \
    case KU_LOG2: LOOP(T, log2##MS(x)); break;                              \
    case KU_LOG10: LOOP(T, log10##MS(x)); break;                            \
    case KU_ERFC: LOOP(T, erfc##MS(x)); break;                              \
    case KU_LGAMMA: LOOP(T, lgamma_##S(x)); break;                          \
    case KU_DIGAMMA: LOOP(T, k_digamma(x)); break;                          \
    default: break;

#define UN_CONTIG(T, EXPR)                                                  \
    for (int64_t i = 0; i < n; i++) {                                       \
        const T x = a[i];                                                   \
        o[i] = (T)(EXPR);                                                   \
    }
#define UN_STRIDED(T, EXPR)                                                 \
    for (int64_t i = 0; i < n; i++) {                                       \
        const T x = a[i * sa];                                              \
        o[i * so] = (T)(EXPR);                                              \
    }

/* sqrt (or 1/sqrt) of a contiguous run. Without -fno-math-errno gcc keeps
 * sqrt's errno branch and will not vectorise it, hence explicit AVX. */
#define DEF_SQRT_RUN(S, T, MS, VT, W, PS)                                   \
    static void sqrt_run_##S(int64_t n, const T *a, T *o, int recip) {      \
        const VT one = _mm256_set1_##PS(1);                                 \
        int64_t i = 0;                                                      \
        for (; i + W <= n; i += W) {                                        \
            const VT r = _mm256_sqrt_##PS(_mm256_loadu_##PS(a + i));        \
            _mm256_storeu_##PS(o + i, recip ? _mm256_div_##PS(one, r) : r); \
        }                                                                   \
        for (; i < n; i++) o[i] = recip ? (T)1 / sqrt##MS(a[i]) : sqrt##MS(a[i]); \
    }
DEF_SQRT_RUN(f32, float, f, __m256, 8, ps)
DEF_SQRT_RUN(f64, double, , __m256d, 4, pd)

/* tanh-GELU on 8 lanes (f32): s = 0.5 (1 + tanh u) = 1 / (1 + e^-2u),
 * u = K (x + C x^3); forward y = x s, backward gx = gy (s + 2 x s (1-s) u'). */
static inline __m256 gelu_tanh_s_ps(__m256 x) {
    const __m256 x2 = _mm256_mul_ps(x, x);
    const __m256 u = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps((float)GELU_K), x),
                                   _mm256_fmadd_ps(_mm256_set1_ps((float)GELU_C), x2, _mm256_set1_ps(1)));
    const __m256 e = vm_exp_ps(_mm256_mul_ps(_mm256_set1_ps(-2), u));
    return _mm256_div_ps(_mm256_set1_ps(1), _mm256_add_ps(_mm256_set1_ps(1), e));
}
static inline __m256 gelu_tanh_ps(__m256 x) { return _mm256_mul_ps(x, gelu_tanh_s_ps(x)); }
static inline __m256 gelu_tanh_grad_ps(__m256 x) {
    const __m256 one = _mm256_set1_ps(1), s = gelu_tanh_s_ps(x);
    const __m256 du = _mm256_mul_ps(_mm256_set1_ps((float)GELU_K),
                                    _mm256_fmadd_ps(_mm256_set1_ps((float)(3 * GELU_C)), _mm256_mul_ps(x, x), one));
    const __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(x, x), s), _mm256_sub_ps(one, s));
    return _mm256_fmadd_ps(t, du, s);
}
static void gelu_tanh_run_f32(int64_t n, const float *a, float *o) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, gelu_tanh_ps(_mm256_loadu_ps(a + i)));
    if (i < n) vm_store_partial_ps(o + i, n - i, gelu_tanh_ps(vm_load_partial_ps(a + i, n - i, 0)));
}
static void gelu_tanh_bwd_run_f32(int64_t n, const float *x, const float *gy, float *gx) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(gx + i, _mm256_mul_ps(_mm256_loadu_ps(gy + i), gelu_tanh_grad_ps(_mm256_loadu_ps(x + i))));
    if (i < n)
        vm_store_partial_ps(gx + i, n - i, _mm256_mul_ps(vm_load_partial_ps(gy + i, n - i, 0),
                                                         gelu_tanh_grad_ps(vm_load_partial_ps(x + i, n - i, 0))));
}
/* Ops with a hand-vectorised contiguous run (f32 only): 1 when handled. */
#define FAST_UN_f32(op, n, a, o) ((op) == KU_GELU_TANH ? (gelu_tanh_run_f32(n, a, o), 1) : 0)
#define FAST_UN_f64(op, n, a, o) 0
#define FAST_UB_f32(op, n, x, gy, gx) ((op) == KU_GELU_TANH ? (gelu_tanh_bwd_run_f32(n, x, gy, gx), 1) : 0)
#define FAST_UB_f64(op, n, x, gy, gx) 0

#define DEF_UNARY(S, T, MS)                                                 \
    static NOINLINE void un_contig_##S(KUnOp op, int64_t n, const T *a, T *o, \
                                       double p1, double p2) {              \
        const T q1 = (T)p1, q2 = (T)p2;                                     \
        if (op == KU_SQRT || op == KU_RSQRT) {                              \
            sqrt_run_##S(n, a, o, op == KU_RSQRT);                          \
            return;                                                         \
        }                                                                   \
        if (FAST_UN_##S(op, n, a, o)) return;                               \
        switch (op) { UN_OPS(S, T, MS, UN_CONTIG) }                         \
    }                                                                       \
    static STRIDED_FN void un_strided_##S(KUnOp op, int64_t n, const T *a,  \
                                          int64_t sa, T *o, int64_t so,     \
                                          double p1, double p2) {           \
        const T q1 = (T)p1, q2 = (T)p2;                                     \
        switch (op) { UN_OPS(S, T, MS, UN_STRIDED) }                        \
    }                                                                       \
    static void un_##S(KUnOp op, int64_t n, const T *a, int64_t sa, T *o,   \
                       int64_t so, double p1, double p2) {                  \
        if (sa == 1 && so == 1) un_contig_##S(op, n, a, o, p1, p2);         \
        else un_strided_##S(op, n, a, sa, o, so, p1, p2);                   \
    }                                                                       \
    void k_unary_##S(KUnOp op, int64_t n, const T *a, int64_t sa, T *o,     \
                     int64_t so, double p1, double p2) {                    \
        if (n <= 0) return;                                                 \
        EW_CHUNKS(n, lo, len,                                               \
                  un_##S(op, len, a + lo * sa, sa, o + lo * so, so, p1, p2)); \
    }

DEF_UNARY(f32, float, f)
DEF_UNARY(f64, double, )

/* Integer clamp bound: the tightest int64 inside [p1, p2]. */
static int64_t i64_bound(double v, int upper) {
    if (v != v) return upper ? INT64_MAX : INT64_MIN;
    return sat_i64(upper ? floor(v) : ceil(v));
}

#define UN_OPS_I64(LOOP)                                                    \
    case KU_NEG: LOOP(int64_t, wrap_neg(x)); break;                         \
    case KU_ABS: LOOP(int64_t, x < 0 ? wrap_neg(x) : x); break;             \
    case KU_SQUARE: LOOP(int64_t, mul_i64(x, x)); break;                    \
    case KU_SIGN: LOOP(int64_t, (x > 0) - (x < 0)); break;                  \
    case KU_CLAMP: LOOP(int64_t, clamp_i64(x, lo, hi)); break;              \
    case KU_RELU: LOOP(int64_t, x < 0 ? 0 : x); break;                      \
    case KU_NOT: LOOP(int64_t, x == 0); break;                              \
    case KU_BNOT: LOOP(int64_t, ~x); break;                                 \
    default: break;

static void un_i64(KUnOp op, int64_t n, const int64_t *a, int64_t sa, int64_t *o, int64_t so,
                   double p1, double p2) {
    const int64_t lo = i64_bound(p1, 0), hi = i64_bound(p2, 1);
    if (sa == 1 && so == 1) {
        switch (op) { UN_OPS_I64(UN_CONTIG) }
    } else {
        switch (op) { UN_OPS_I64(UN_STRIDED) }
    }
}

void k_unary_i64(KUnOp op, int64_t n, const int64_t *a, int64_t sa, int64_t *o,
                 int64_t so, double p1, double p2) {
    if (n <= 0) return;
    EW_CHUNKS(n, lo, len, un_i64(op, len, a + lo * sa, sa, o + lo * so, so, p1, p2));
}

/* ======================= unary backward (contiguous) ======================= */

/* gx[i] = EXPR; EXPR reads x[i], y[i], gy[i] (only what the op needs). */
#define UB_RUN(T, EXPR)                                                     \
    do {                                                                    \
        for (int64_t i = 0; i < n; i++) gx[i] = (T)(EXPR);                  \
    } while (0)

#define DEF_UNARY_BWD(S, T, MS)                                             \
    static NOINLINE void ub_##S(KUnOp op, int64_t n, const T *x,            \
                                const T *y, const T *gy, T *gx, double p1,  \
                                double p2) {                                \
        const T q1 = (T)p1, q2 = (T)p2;                                     \
        if (FAST_UB_##S(op, n, x, gy, gx)) return;                          \
        switch (op) {                                                       \
        case KU_NEG: UB_RUN(T, -gy[i]); break;                              \
        case KU_RELU: UB_RUN(T, y[i] <= 0 ? (T)0 : gy[i]); break;           \
        case KU_GELU: UB_RUN(T, gy[i] * gelu_grad_##S(x[i])); break;        \
        case KU_GELU_TANH: UB_RUN(T, gy[i] * gelu_tanh_grad_##S(x[i])); break; \
        case KU_SILU: UB_RUN(T, gy[i] * silu_grad_##S(x[i])); break;        \
        case KU_TANH: UB_RUN(T, gy[i] * ((T)1 - y[i] * y[i])); break;       \
        case KU_SIGMOID: UB_RUN(T, gy[i] * y[i] * ((T)1 - y[i])); break;    \
        case KU_EXP: UB_RUN(T, gy[i] * y[i]); break;                        \
        case KU_LOG: UB_RUN(T, gy[i] / x[i]); break;                        \
        case KU_SQRT: UB_RUN(T, gy[i] / ((T)2 * y[i])); break;              \
        case KU_RSQRT: UB_RUN(T, (T)-0.5 * gy[i] * y[i] * y[i] * y[i]); break; \
        case KU_ABS: /* gy * sgn(x) (torch's): NaN for an inf / NaN gy at 0 */ \
            UB_RUN(T, gy[i] * (x[i] > 0 ? (T)1 : x[i] < 0 ? (T)-1 : (T)0)); break; \
        case KU_CLAMP:                                                      \
            UB_RUN(T, clamp_passes_##S(x[i], q1, q2) ? gy[i] : (T)0); break; \
        case KU_POW:                                                        \
            if (p1 == 0) UB_RUN(T, (T)0);                                   \
            else if (p1 == 2) UB_RUN(T, (T)2 * x[i] * gy[i]);               \
            else UB_RUN(T, gy[i] * q1 * pow##MS(x[i], q1 - (T)1));          \
            break;                                                          \
        case KU_LEAKY_RELU: UB_RUN(T, x[i] > 0 ? gy[i] : gy[i] * q1); break; \
        case KU_SQUARE: UB_RUN(T, (T)2 * x[i] * gy[i]); break;              \
        case KU_RECIP: UB_RUN(T, -gy[i] * y[i] * y[i]); break;              \
        case KU_SIN: UB_RUN(T, gy[i] * cos##MS(x[i])); break;               \
        case KU_COS: UB_RUN(T, -gy[i] * sin##MS(x[i])); break;              \
        case KU_LOG1P: UB_RUN(T, gy[i] / ((T)1 + x[i])); break;             \
        case KU_EXPM1: UB_RUN(T, gy[i] * (y[i] + (T)1)); break;             \
        case KU_ERF:                                                        \
            UB_RUN(T, gy[i] * (T)TWO_OVER_SQRT_PI * exp##MS(-x[i] * x[i])); break; \
        case KU_TAN: UB_RUN(T, gy[i] * ((T)1 + y[i] * y[i])); break;        \
        case KU_ASIN: UB_RUN(T, gy[i] / sqrt##MS((T)1 - x[i] * x[i])); break; \
        case KU_ACOS: UB_RUN(T, -gy[i] / sqrt##MS((T)1 - x[i] * x[i])); break; \
        case KU_ATAN: UB_RUN(T, gy[i] / ((T)1 + x[i] * x[i])); break;       \
        case KU_SINH: UB_RUN(T, gy[i] * cosh##MS(x[i])); break;             \
        case KU_COSH: UB_RUN(T, gy[i] * sinh##MS(x[i])); break;             \
        case KU_ASINH: UB_RUN(T, gy[i] / sqrt##MS(x[i] * x[i] + (T)1)); break; \
        case KU_ACOSH: UB_RUN(T, gy[i] / sqrt##MS(x[i] * x[i] - (T)1)); break; \
        case KU_ATANH: UB_RUN(T, gy[i] / ((T)1 - x[i] * x[i])); break;      \
        case KU_LOG2: UB_RUN(T, gy[i] / (x[i] * (T)LN_2)); break;           \
        case KU_LOG10: UB_RUN(T, gy[i] / (x[i] * (T)LN_10)); break;         \
        case KU_ERFC:                                                       \
            UB_RUN(T, -gy[i] * (T)TWO_OVER_SQRT_PI * exp##MS(-x[i] * x[i])); break; \
        case KU_LGAMMA: UB_RUN(T, gy[i] * (T)k_digamma(x[i])); break;       \
        case KU_DIGAMMA: UB_RUN(T, gy[i] * (T)k_trigamma(x[i])); break;     \
        default: (void)q2; break;                                           \
        }                                                                   \
    }                                                                       \
    void k_unary_backward_##S(KUnOp op, int64_t n, const T *x, const T *y,  \
                              const T *gy, T *gx, double p1, double p2) {   \
        if (n <= 0) return;                                                 \
        EW_CHUNKS(n, lo, len,                                               \
                  ub_##S(op, len, x ? x + lo : NULL, y ? y + lo : NULL,     \
                         gy + lo, gx + lo, p1, p2));                        \
    }

DEF_UNARY_BWD(f32, float, f)
DEF_UNARY_BWD(f64, double, )

/* ======================= where ======================= */

#define WHERE_RUN(U)                                                        \
    do {                                                                    \
        const U *aa = a, *bb = b;                                           \
        U *oo = o;                                                          \
        if (sc == 1 && sa == 1 && sb == 1 && so == 1) {                     \
            for (int64_t i = 0; i < n; i++) oo[i] = c[i] ? aa[i] : bb[i];   \
        } else {                                                            \
            for (int64_t i = 0; i < n; i++)                                 \
                oo[i * so] = c[i * sc] ? aa[i * sa] : bb[i * sb];           \
        }                                                                   \
    } while (0)

static NOINLINE void where_run(int64_t n, const uint8_t *c, int64_t sc, const void *a,
                               int64_t sa, const void *b, int64_t sb, void *o, int64_t so,
                               size_t es) {
    switch (es) {
    case 1: WHERE_RUN(uint8_t); break;
    case 2: WHERE_RUN(u16a); break;
    case 4: WHERE_RUN(u32a); break;
    case 8: WHERE_RUN(u64a); break;
    default: break;
    }
}

void k_where(int64_t n, const uint8_t *c, int64_t sc, const void *a, int64_t sa,
             const void *b, int64_t sb, void *o, int64_t so, size_t elsize) {
    if (n <= 0) return;
    const int64_t es = (int64_t)elsize;
    EW_CHUNKS(n, lo, len,
              where_run(len, c + lo * sc, sc, (const char *)a + lo * sa * es, sa,
                        (const char *)b + lo * sb * es, sb, (char *)o + lo * so * es, so,
                        elsize));
}

/* ======================= copies and casts ======================= */

#define COPY_RUN(U)                                                         \
    do {                                                                    \
        const U *aa = a;                                                    \
        U *oo = o;                                                          \
        for (int64_t i = 0; i < n; i++) oo[i * so] = aa[i * sa];            \
    } while (0)

/* Same-dtype strided copy of es-byte elements. */
static void copy_run(int64_t n, const void *a, int64_t sa, void *o, int64_t so, size_t es) {
    if (sa == 1 && so == 1) {
        memmove(o, a, (size_t)n * es);
        return;
    }
    switch (es) {
    case 1: COPY_RUN(uint8_t); break;
    case 2: COPY_RUN(u16a); break;
    case 4: COPY_RUN(u32a); break;
    case 8: COPY_RUN(u64a); break;
    default: break;
    }
}

/* d = EXPR(v) with v of source type ST, d of destination type DT_. */
#define CAST_RUN(ST, DT_, EXPR)                                             \
    do {                                                                    \
        const ST *s_ = a;                                                   \
        DT_ *d_ = o;                                                        \
        if (sa == 1 && so == 1) {                                           \
            for (int64_t i = 0; i < n; i++) {                               \
                const ST v = s_[i];                                         \
                d_[i] = (EXPR);                                             \
            }                                                               \
        } else {                                                            \
            for (int64_t i = 0; i < n; i++) {                               \
                const ST v = s_[i * sa];                                    \
                d_[i * so] = (EXPR);                                        \
            }                                                               \
        }                                                                   \
    } while (0)

/* f32 <-> f16 through the F16C instructions (x86-64-v3), RNE. */
static void f32_to_f16_run(int64_t n, const float *a, int64_t sa, uint16_t *o, int64_t so) {
#ifdef __F16C__
    int64_t i = 0;
    if (sa == 1 && so == 1)
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)(o + i),
                             _mm256_cvtps_ph(_mm256_loadu_ps(a + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) o[i * so] = _cvtss_sh(a[i * sa], _MM_FROUND_TO_NEAREST_INT);
#else
    CAST_RUN(float, uint16_t, f32_to_f16(v));
#endif
}

static void f16_to_f32_run(int64_t n, const uint16_t *a, int64_t sa, float *o, int64_t so) {
#ifdef __F16C__
    int64_t i = 0;
    if (sa == 1 && so == 1)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(o + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i))));
    for (; i < n; i++) o[i * so] = _cvtsh_ss(a[i * sa]);
#else
    CAST_RUN(uint16_t, float, f16_to_f32(v));
#endif
}

/* f32 <-> bf16 on 8 lanes (the scalar codecs of dtype.h for tails and
 * strided runs): bf16 -> f32 is a 16-bit shift; f32 -> bf16 rounds to
 * nearest even, NaN kept quiet. */
static inline __m128i f32_to_bf16_8(__m256 f) {
    const __m256i u = _mm256_castps_si256(f);
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)),
                         _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i v = _mm256_blendv_epi8(r, q, nan); /* 8 x u32, each < 2^16 */
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08));
}

static void f32_to_bf16_run(int64_t n, const float *a, int64_t sa, uint16_t *o, int64_t so) {
    int64_t i = 0;
    if (sa == 1 && so == 1)
        for (; i + 8 <= n; i += 8) _mm_storeu_si128((__m128i *)(o + i), f32_to_bf16_8(_mm256_loadu_ps(a + i)));
    for (; i < n; i++) o[i * so] = f32_to_bf16(a[i * sa]);
}

static void bf16_to_f32_run(int64_t n, const uint16_t *a, int64_t sa, float *o, int64_t so) {
    int64_t i = 0;
    if (sa == 1 && so == 1)
        for (; i + 8 <= n; i += 8) {
            const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(a + i)));
            _mm256_storeu_ps(o + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
        }
    for (; i < n; i++) o[i * so] = bf16_to_f32(a[i * sa]);
}

/* Any pair through double (float -> integer as PyTorch on x86: dtype.h's
 * float_to_i64); integer-to-integer stays exact (then wraps, as C). */
static void cast_generic(int64_t n, const void *a, DType adt, int64_t sa, void *o, DType odt,
                         int64_t so) {
    const int64_t as = (int64_t)dtype_size(adt) * sa, os = (int64_t)dtype_size(odt) * so;
    const int a_int = !dtype_is_float(adt), o_int = !dtype_is_float(odt) && odt != DT_BOOL;
    for (int64_t i = 0; i < n; i++) {
        const char *pa = (const char *)a + i * as;
        char *po = (char *)o + i * os;
        if (o_int && a_int)
            dtype_store_i64(po, odt, dtype_load_i64(pa, adt));
        else
            dtype_store(po, odt, dtype_load(pa, adt));
    }
}

#define PAIR(x, y) ((int)(x) * (int)DT_COUNT + (int)(y))

static NOINLINE void cast_run(int64_t n, const void *a, DType adt, int64_t sa, void *o,
                              DType odt, int64_t so) {
    if (adt == odt) {
        copy_run(n, a, sa, o, so, dtype_size(adt));
        return;
    }
    switch (PAIR(adt, odt)) {
    case PAIR(DT_F32, DT_F64): CAST_RUN(float, double, (double)v); break;
    case PAIR(DT_F64, DT_F32): CAST_RUN(double, float, (float)v); break;
    case PAIR(DT_F32, DT_BF16): f32_to_bf16_run(n, a, sa, o, so); break;
    case PAIR(DT_BF16, DT_F32): bf16_to_f32_run(n, a, sa, o, so); break;
    case PAIR(DT_F32, DT_F16): f32_to_f16_run(n, a, sa, o, so); break;
    case PAIR(DT_F16, DT_F32): f16_to_f32_run(n, a, sa, o, so); break;
    case PAIR(DT_I64, DT_F32): CAST_RUN(int64_t, float, (float)v); break;
    case PAIR(DT_I64, DT_F64): CAST_RUN(int64_t, double, (double)v); break;
    case PAIR(DT_F32, DT_I64): CAST_RUN(float, int64_t, float_to_i64(v)); break;
    case PAIR(DT_F64, DT_I64): CAST_RUN(double, int64_t, float_to_i64(v)); break;
    case PAIR(DT_I32, DT_I64): CAST_RUN(int32_t, int64_t, (int64_t)v); break;
    case PAIR(DT_I64, DT_I32): CAST_RUN(int64_t, int32_t, (int32_t)v); break;
    case PAIR(DT_BOOL, DT_F32): CAST_RUN(uint8_t, float, v ? 1.0f : 0.0f); break;
    case PAIR(DT_U8, DT_F32): CAST_RUN(uint8_t, float, (float)v); break;
    default: cast_generic(n, a, adt, sa, o, odt, so); break;
    }
}

void k_cast(int64_t n, const void *a, DType adt, int64_t sa, void *o, DType odt, int64_t so) {
    if (n <= 0) return;
    const int64_t as = (int64_t)dtype_size(adt), os = (int64_t)dtype_size(odt);
    EW_CHUNKS(n, lo, len,
              cast_run(len, (const char *)a + lo * sa * as, adt, sa, (char *)o + lo * so * os,
                       odt, so));
}

/* ======================= fill ======================= */

#define FILL_RUN(U)                                                         \
    do {                                                                    \
        U *oo = o;                                                          \
        const U v = (U)bits;                                                \
        if (so == 1) for (int64_t i = 0; i < n; i++) oo[i] = v;             \
        else for (int64_t i = 0; i < n; i++) oo[i * so] = v;                \
    } while (0)

static void fill_run(int64_t n, void *o, int64_t so, size_t es, uint64_t bits) {
    switch (es) {
    case 1: FILL_RUN(uint8_t); break;
    case 2: FILL_RUN(u16a); break;
    case 4: FILL_RUN(u32a); break;
    case 8: FILL_RUN(u64a); break;
    default: break;
    }
}

void k_fill(int64_t n, void *o, DType odt, int64_t so, double v) {
    if (n <= 0) return;
    /* the element's bytes, little-endian in the low end of u */
    union { uint64_t u; double d; float f; int64_t i; int32_t i32; uint16_t h; uint8_t b; } e;
    e.u = 0;
    cast_run(1, &v, DT_F64, 1, &e, odt, 1);
    const uint64_t bits = e.u;
    const int64_t es = (int64_t)dtype_size(odt);
    EW_CHUNKS(n, lo, len, fill_run(len, (char *)o + lo * so * es, so, (size_t)es, bits));
}
