/* scalar_ops.cuh: the elementwise scalar semantics of the CUDA kernels
 * (kernels/cpu/elementwise.c's, op for op): NaN-propagating max/min, Python
 * floor division and remainder, C's fmod, wrapping int64 arithmetic with x / 0 = 0,
 * round half to even, exact and tanh GELU, and the unary derivatives.
 * KC_HD = __host__ __device__, so the host test (tests/cuda/host_ops.cu)
 * compiles the very same functions and compares them with the CPU kernels. */
#ifndef ACCEL_CUDA_SCALAR_OPS_CUH
#define ACCEL_CUDA_SCALAR_OPS_CUH

#include <math.h>
#include <stdint.h>
#include "kernels_cuda.h"
#include "special.h"

#define KC_HD __host__ __device__

#define GELU_K 0.7978845608028654
#define GELU_C 0.044715
#define INV_SQRT_2PI 0.3989422804014327
#define TWO_OVER_SQRT_PI 1.1283791670955126
#define LN_2 0.69314718055994530942
#define LN_10 2.30258509299404568402

/* ---- scalar ops ---- */

template <typename T> KC_HD T k_floordiv(T x, T y) {
    if (y == 0) return x / y;
    T mod = fmod(x, y), div = (x - mod) / y;
    if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1;
    if (div == 0) return copysign((T)0, x / y);
    T fl = floor(div);
    return div - fl > (T)0.5 ? fl + 1 : fl;
}
template <typename T> KC_HD T k_remainder(T x, T y) {
    T mod = fmod(x, y);
    if (mod != 0 && ((y < 0) != (mod < 0))) mod += y;
    return mod;
}
static inline KC_HD int64_t i_neg(int64_t x) { return (int64_t)(0 - (uint64_t)x); }
static inline KC_HD int64_t k_floordiv(int64_t x, int64_t y) {
    if (y == 0) return 0;
    if (y == -1) return i_neg(x);
    int64_t q = x / y;
    return (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q;
}
static inline KC_HD int64_t k_remainder(int64_t x, int64_t y) {
    if (y == 0 || y == -1) return 0;
    int64_t r = x % y;
    return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r;
}
template <typename T> KC_HD T k_fmod(T x, T y) { return fmod(x, y); }
static inline KC_HD int64_t k_fmod(int64_t x, int64_t y) { return y == 0 || y == -1 ? 0 : x % y; }
template <typename T> KC_HD T k_atan2(T x, T y) { return atan2(x, y); }
static inline KC_HD int64_t k_atan2(int64_t x, int64_t y) { return (int64_t)atan2((double)x, (double)y); }
static inline KC_HD int64_t k_pow(int64_t x, int64_t y) {
    if (y < 0) return x == 1 ? 1 : x == -1 ? ((y & 1) ? -1 : 1) : 0;
    uint64_t r = 1, b = (uint64_t)x;
    for (; y; y >>= 1, b *= b)
        if (y & 1) r *= b;
    return (int64_t)r;
}
template <typename T> KC_HD T k_pow(T x, T y) { return pow(x, y); }
template <typename T> KC_HD T k_add(T x, T y) { return x + y; }
static inline KC_HD int64_t k_add(int64_t x, int64_t y) { return (int64_t)((uint64_t)x + (uint64_t)y); }
template <typename T> KC_HD T k_sub(T x, T y) { return x - y; }
static inline KC_HD int64_t k_sub(int64_t x, int64_t y) { return (int64_t)((uint64_t)x - (uint64_t)y); }
template <typename T> KC_HD T k_mul(T x, T y) { return x * y; }
static inline KC_HD int64_t k_mul(int64_t x, int64_t y) { return (int64_t)((uint64_t)x * (uint64_t)y); }
template <typename T> KC_HD T k_div(T x, T y) { return x / y; }
static inline KC_HD int64_t k_div(int64_t x, int64_t y) { return y == 0 ? 0 : y == -1 ? i_neg(x) : x / y; }

/* Bitwise ops: int64 only (the core refuses float operands; a float
 * instantiation gives 0). */
template <typename T> KC_HD T k_bits(KBinOp, T, T) { return (T)0; }
static inline KC_HD int64_t k_bits(KBinOp op, int64_t x, int64_t y) { return kbits_i64(op, x, y); }

template <typename T> KC_HD T binop(KBinOp op, T x, T y) {
    switch (op) {
    case KB_ADD: return k_add(x, y);
    case KB_SUB: return k_sub(x, y);
    case KB_MUL: return k_mul(x, y);
    case KB_DIV: return k_div(x, y);
    case KB_POW: return k_pow(x, y);
    case KB_MAX: return y != y || y > x ? y : x; /* NaN wins; a tie (0, -0) gives x */
    case KB_MIN: return y != y || y < x ? y : x;
    case KB_EQ: return x == y;
    case KB_NE: return x != y;
    case KB_LT: return x < y;
    case KB_LE: return x <= y;
    case KB_GT: return x > y;
    case KB_GE: return x >= y;
    case KB_AND: return (x != 0) & (y != 0);
    case KB_OR: return (x != 0) | (y != 0);
    case KB_XOR: return (x != 0) ^ (y != 0);
    case KB_FLOORDIV: return k_floordiv(x, y);
    case KB_REMAINDER: return k_remainder(x, y);
    case KB_FMOD: return k_fmod(x, y);
    case KB_ATAN2: return k_atan2(x, y);
    case KB_BAND: case KB_BOR: case KB_BXOR: case KB_SHL: case KB_SHR: return k_bits(op, x, y);
    default: return 0;
    }
}

template <typename T> KC_HD T sigmoid(T x) { return (T)1 / ((T)1 + exp(-x)); }
template <typename T> KC_HD T gelu_tanh(T x) {
    T u = (T)GELU_K * (x + (T)GELU_C * x * x * x);
    return x / ((T)1 + exp((T)-2 * u));
}

template <typename T> KC_HD T unop(KUnOp op, T x, T q1, T q2) {
    switch (op) {
    case KU_NEG: return -x;
    case KU_EXP: return exp(x);
    case KU_LOG: return log(x);
    case KU_SQRT: return sqrt(x);
    case KU_RSQRT: return (T)1 / sqrt(x);
    case KU_TANH: return tanh(x);
    case KU_SIGMOID: return sigmoid(x);
    case KU_RELU: return x < 0 ? (T)0 : x;
    case KU_GELU: return (T)0.5 * x * ((T)1 + erf(x * (T)0.70710678118654752440));
    case KU_GELU_TANH: return gelu_tanh(x);
    case KU_SILU: return x * sigmoid(x);
    case KU_ABS: return fabs(x);
    case KU_SIN: return sin(x);
    case KU_COS: return cos(x);
    case KU_SQUARE: return x * x;
    case KU_RECIP: return (T)1 / x;
    case KU_SIGN: return (T)((x > 0) - (x < 0)); /* NaN -> 0, as torch */
    case KU_CLAMP: { T t = x < q1 || q1 != q1 ? q1 : x; return t > q2 || q2 != q2 ? q2 : t; } /* NaN bound: NaN */
    case KU_POW: /* the CPU's cheap forms of the common exponents */
        return q1 == 2 ? x * x : q1 == 3 ? x * x * x : q1 == 1 ? x : q1 == (T)0.5 ? sqrt(x) : q1 == -1 ? (T)1 / x
             : q1 == (T)-0.5 ? (T)1 / sqrt(x) : q1 == -2 ? (T)1 / (x * x) : pow(x, q1);
    case KU_RPOW: return pow(q1, x);
    case KU_LOG1P: return log1p(x);
    case KU_EXPM1: return expm1(x);
    case KU_FLOOR: return floor(x);
    case KU_CEIL: return ceil(x);
    case KU_ROUND: return rint(x); /* half to even */
    case KU_TRUNC: return trunc(x);
    case KU_ERF: return erf(x);
    case KU_LEAKY_RELU: return x < 0 ? x * q1 : x;
    case KU_NOT: return x == 0 ? (T)1 : (T)0;
    case KU_TAN: return tan(x);
    case KU_ASIN: return asin(x);
    case KU_ACOS: return acos(x);
    case KU_ATAN: return atan(x);
    case KU_SINH: return sinh(x);
    case KU_COSH: return cosh(x);
    case KU_ASINH: return asinh(x);
    case KU_ACOSH: return acosh(x);
    case KU_ATANH: return atanh(x);
    case KU_LOG2: return log2(x);
    case KU_LOG10: return log10(x);
    case KU_ERFC: return erfc(x);
    case KU_LGAMMA: return lgamma(x);
    case KU_DIGAMMA: return (T)k_digamma(x);
    default: return x;
    }
}

/* int64: the CPU's subset (NEG ABS SQUARE SIGN CLAMP RELU NOT BNOT); bounds pre-rounded. */
static inline KC_HD int64_t unop(KUnOp op, int64_t x, int64_t lo, int64_t hi) {
    switch (op) {
    case KU_NEG: return i_neg(x);
    case KU_ABS: return x < 0 ? i_neg(x) : x;
    case KU_SQUARE: return k_mul(x, x);
    case KU_SIGN: return (x > 0) - (x < 0);
    case KU_CLAMP: { int64_t t = x < lo ? lo : x; return t > hi ? hi : t; } /* hi wins over lo */
    case KU_RELU: return x < 0 ? 0 : x;
    case KU_NOT: return x == 0;
    case KU_BNOT: return ~x;
    default: return x;
    }
}

/* ---- unary backward: gx = gy f'(x), y the saved output ---- */

template <typename T> KC_HD T unary_grad(KUnOp op, T x, T y, T gy, T q1, T q2) {
    switch (op) {
    case KU_NEG: return -gy;
    case KU_RELU: return y <= 0 ? (T)0 : gy; /* from the output, as torch's threshold_backward: NaN passes gy */
    case KU_GELU: {
        T cdf = (T)0.5 * ((T)1 + erf(x * (T)0.70710678118654752440));
        return gy * (cdf + x * (T)INV_SQRT_2PI * exp((T)-0.5 * x * x));
    }
    case KU_GELU_TANH: {
        T u = (T)GELU_K * (x + (T)GELU_C * x * x * x);
        T s = (T)1 / ((T)1 + exp((T)-2 * u));
        T du = (T)GELU_K * ((T)1 + (T)(3 * GELU_C) * x * x);
        return gy * (s + (T)2 * x * s * ((T)1 - s) * du);
    }
    case KU_SILU: { T s = sigmoid(x); return gy * (s * ((T)1 + x * ((T)1 - s))); }
    case KU_TANH: return gy * ((T)1 - y * y);
    case KU_SIGMOID: return gy * y * ((T)1 - y);
    case KU_EXP: return gy * y;
    case KU_LOG: return gy / x;
    case KU_SQRT: return gy / ((T)2 * y);
    case KU_RSQRT: return (T)-0.5 * gy * y * y * y;
    case KU_ABS: return gy * (x > 0 ? (T)1 : x < 0 ? (T)-1 : (T)0); /* gy * sgn(x): NaN for an inf / NaN gy at 0 */
    case KU_CLAMP: /* strictly inside, never at NaN; an infinite bound on its own side is a missing one (cpu clamp_passes) */
        return x == x && (x > q1 || q1 == -(T)INFINITY) && (x < q2 || q2 == (T)INFINITY) ? gy : (T)0;
    case KU_POW: return q1 == 0 ? (T)0 : q1 == 2 ? (T)2 * x * gy : gy * q1 * pow(x, q1 - (T)1);
    case KU_LEAKY_RELU: return x > 0 ? gy : gy * q1;
    case KU_SQUARE: return (T)2 * x * gy;
    case KU_RECIP: return -gy * y * y;
    case KU_SIN: return gy * cos(x);
    case KU_COS: return -gy * sin(x);
    case KU_LOG1P: return gy / ((T)1 + x);
    case KU_EXPM1: return gy * (y + (T)1);
    case KU_ERF: return gy * (T)TWO_OVER_SQRT_PI * exp(-x * x);
    case KU_TAN: return gy * ((T)1 + y * y);
    case KU_ASIN: return gy / sqrt((T)1 - x * x);
    case KU_ACOS: return -gy / sqrt((T)1 - x * x);
    case KU_ATAN: return gy / ((T)1 + x * x);
    case KU_SINH: return gy * cosh(x);
    case KU_COSH: return gy * sinh(x);
    case KU_ASINH: return gy / sqrt(x * x + (T)1);
    case KU_ACOSH: return gy / sqrt(x * x - (T)1);
    case KU_ATANH: return gy / ((T)1 - x * x);
    case KU_LOG2: return gy / (x * (T)LN_2);
    case KU_LOG10: return gy / (x * (T)LN_10);
    case KU_ERFC: return -gy * (T)TWO_OVER_SQRT_PI * exp(-x * x);
    case KU_LGAMMA: return gy * (T)k_digamma(x);
    case KU_DIGAMMA: return gy * (T)k_trigamma(x);
    default: return 0;
    }
}

#endif
