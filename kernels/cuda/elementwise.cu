/* elementwise.cu: binary, unary, cast, fill and where over n-d strided
 * operands (KcIter: one launch per op, any broadcasting), and the fused
 * unary backward over contiguous buffers. The scalar semantics are the CPU
 * kernels' (kernels/cpu/elementwise.c): NaN-propagating max/min, Python
 * floor division and remainder, wrapping int64 arithmetic with x / 0 = 0,
 * round half to even, exact and tanh GELU. Compute type: double when an
 * operand is float64, float when one is another float type, else int64. */
#include "common.cuh"

#define GELU_K 0.7978845608028654
#define GELU_C 0.044715
#define INV_SQRT_2PI 0.3989422804014327
#define TWO_OVER_SQRT_PI 1.1283791670955126

/* ---- scalar ops ---- */

template <typename T> __device__ T k_floordiv(T x, T y) {
    if (y == 0) return x / y;
    T mod = fmod(x, y), div = (x - mod) / y;
    if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1;
    if (div == 0) return copysign((T)0, x / y);
    T fl = floor(div);
    return div - fl > (T)0.5 ? fl + 1 : fl;
}
template <typename T> __device__ T k_remainder(T x, T y) {
    T mod = fmod(x, y);
    if (mod != 0 && ((y < 0) != (mod < 0))) mod += y;
    return mod;
}
__device__ int64_t i_neg(int64_t x) { return (int64_t)(0 - (uint64_t)x); }
__device__ int64_t k_floordiv(int64_t x, int64_t y) {
    if (y == 0) return 0;
    if (y == -1) return i_neg(x);
    int64_t q = x / y;
    return (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q;
}
__device__ int64_t k_remainder(int64_t x, int64_t y) {
    if (y == 0 || y == -1) return 0;
    int64_t r = x % y;
    return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r;
}
__device__ int64_t k_pow(int64_t x, int64_t y) {
    if (y < 0) return x == 1 ? 1 : x == -1 ? ((y & 1) ? -1 : 1) : 0;
    uint64_t r = 1, b = (uint64_t)x;
    for (; y; y >>= 1, b *= b)
        if (y & 1) r *= b;
    return (int64_t)r;
}
template <typename T> __device__ T k_pow(T x, T y) { return pow(x, y); }
template <typename T> __device__ T k_add(T x, T y) { return x + y; }
__device__ int64_t k_add(int64_t x, int64_t y) { return (int64_t)((uint64_t)x + (uint64_t)y); }
template <typename T> __device__ T k_sub(T x, T y) { return x - y; }
__device__ int64_t k_sub(int64_t x, int64_t y) { return (int64_t)((uint64_t)x - (uint64_t)y); }
template <typename T> __device__ T k_mul(T x, T y) { return x * y; }
__device__ int64_t k_mul(int64_t x, int64_t y) { return (int64_t)((uint64_t)x * (uint64_t)y); }
template <typename T> __device__ T k_div(T x, T y) { return x / y; }
__device__ int64_t k_div(int64_t x, int64_t y) { return y == 0 ? 0 : y == -1 ? i_neg(x) : x / y; }

template <typename T> __device__ T binop(KBinOp op, T x, T y) {
    switch (op) {
    case KB_ADD: return k_add(x, y);
    case KB_SUB: return k_sub(x, y);
    case KB_MUL: return k_mul(x, y);
    case KB_DIV: return k_div(x, y);
    case KB_POW: return k_pow(x, y);
    case KB_MAX: return x != x || x > y ? x : y;
    case KB_MIN: return x != x || x < y ? x : y;
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
    default: return 0;
    }
}

template <typename T> __device__ T sigmoid(T x) { return (T)1 / ((T)1 + exp(-x)); }
template <typename T> __device__ T gelu_tanh(T x) {
    T u = (T)GELU_K * (x + (T)GELU_C * x * x * x);
    return x / ((T)1 + exp((T)-2 * u));
}

template <typename T> __device__ T unop(KUnOp op, T x, T q1, T q2) {
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
    case KU_SIGN: return x != x ? x : (T)((x > 0) - (x < 0));
    case KU_CLAMP: { T t = x < q1 ? q1 : x; return t > q2 ? q2 : t; }
    case KU_POW: return q1 == 2 ? x * x : q1 == 0.5 ? sqrt(x) : q1 == -1 ? (T)1 / x : pow(x, q1);
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
    default: return x;
    }
}

/* int64: the CPU's subset (NEG ABS SQUARE SIGN CLAMP RELU NOT); bounds pre-rounded. */
__device__ int64_t unop(KUnOp op, int64_t x, int64_t lo, int64_t hi) {
    switch (op) {
    case KU_NEG: return i_neg(x);
    case KU_ABS: return x < 0 ? i_neg(x) : x;
    case KU_SQUARE: return k_mul(x, x);
    case KU_SIGN: return (x > 0) - (x < 0);
    case KU_CLAMP: return x < lo ? lo : x > hi ? hi : x;
    case KU_RELU: return x < 0 ? 0 : x;
    case KU_NOT: return x == 0;
    default: return x;
    }
}

/* ---- kernels ---- */

template <typename C>
__global__ void binary_kernel(KBinOp op, KcIter it, int64_t n, const void *a, DType adt, const void *b, DType bdt,
                              void *o, DType odt) {
    KC_GRID_STRIDE(i, n) {
        int64_t off[4];
        kc_offsets(it, i, 3, off);
        kc_store(o, odt, off[0], binop<C>(op, kc_load<C>(a, adt, off[1]), kc_load<C>(b, bdt, off[2])));
    }
}

template <typename C>
__global__ void unary_kernel(KUnOp op, KcIter it, int64_t n, const void *a, DType adt, void *o, DType odt, C q1, C q2) {
    KC_GRID_STRIDE(i, n) {
        int64_t off[4];
        kc_offsets(it, i, 2, off);
        kc_store(o, odt, off[0], unop(op, kc_load<C>(a, adt, off[1]), q1, q2));
    }
}

/* A cast moves through the widest type of its pair (int64 <-> int64 exactly). */
template <typename C>
__global__ void cast_kernel(KcIter it, int64_t n, const void *a, DType adt, void *o, DType odt) {
    KC_GRID_STRIDE(i, n) {
        int64_t off[4];
        kc_offsets(it, i, 2, off);
        kc_store(o, odt, off[0], kc_load<C>(a, adt, off[1]));
    }
}

__global__ void fill_kernel(KcIter it, int64_t n, void *o, DType odt, double v, int64_t vi, int is_int) {
    KC_GRID_STRIDE(i, n) {
        int64_t off[4];
        kc_offsets(it, i, 1, off);
        if (is_int) kc_store(o, odt, off[0], vi);
        else kc_store(o, odt, off[0], v);
    }
}

__global__ void where_kernel(KcIter it, int64_t n, const uint8_t *c, const char *a, const char *b, char *o,
                             size_t es) {
    KC_GRID_STRIDE(i, n) {
        int64_t off[4];
        kc_offsets(it, i, 4, off);
        const char *src = c[off[3]] ? a + off[1] * (int64_t)es : b + off[2] * (int64_t)es;
        for (size_t k = 0; k < es; k++) o[off[0] * (int64_t)es + (int64_t)k] = src[k];
    }
}

/* ---- host entries ---- */

enum { CT_FLOAT, CT_DOUBLE, CT_INT };
static int compute_type(DType a, DType b) {
    if (a == DT_F64 || b == DT_F64) return CT_DOUBLE;
    if (dtype_is_float(a) || dtype_is_float(b)) return CT_FLOAT;
    return CT_INT;
}

extern "C" int kc_binary(KBinOp op, const KcIter *it, const void *a, DType adt, const void *b, DType bdt, void *o,
                         DType odt, void *stream) {
    const int64_t n = kc_numel(it);
    if (n == 0) return 0;
    cudaStream_t s = kc_stream(stream);
    switch (compute_type(adt, bdt)) {
    case CT_DOUBLE: binary_kernel<double><<<kc_blocks(n), KC_THREADS, 0, s>>>(op, *it, n, a, adt, b, bdt, o, odt); break;
    case CT_FLOAT: binary_kernel<float><<<kc_blocks(n), KC_THREADS, 0, s>>>(op, *it, n, a, adt, b, bdt, o, odt); break;
    default: binary_kernel<int64_t><<<kc_blocks(n), KC_THREADS, 0, s>>>(op, *it, n, a, adt, b, bdt, o, odt); break;
    }
    cuda_check_launch();
    return 0;
}

/* The tightest int64 inside [p1, p2] (the CPU's i64_bound). */
static int64_t i64_bound(double v, int upper) {
    if (v != v) return upper ? INT64_MAX : INT64_MIN;
    v = upper ? floor(v) : ceil(v);
    if (v <= -9223372036854775808.0) return INT64_MIN;
    if (v >= 9223372036854775808.0) return INT64_MAX;
    return (int64_t)v;
}

extern "C" int kc_unary(KUnOp op, const KcIter *it, const void *a, DType adt, void *o, DType odt, double p1,
                        double p2, void *stream) {
    const int64_t n = kc_numel(it);
    if (n == 0) return 0;
    cudaStream_t s = kc_stream(stream);
    switch (compute_type(adt, adt)) {
    case CT_DOUBLE:
        unary_kernel<double><<<kc_blocks(n), KC_THREADS, 0, s>>>(op, *it, n, a, adt, o, odt, p1, p2);
        break;
    case CT_FLOAT:
        unary_kernel<float><<<kc_blocks(n), KC_THREADS, 0, s>>>(op, *it, n, a, adt, o, odt, (float)p1, (float)p2);
        break;
    default:
        unary_kernel<int64_t><<<kc_blocks(n), KC_THREADS, 0, s>>>(op, *it, n, a, adt, o, odt, i64_bound(p1, 0),
                                                                  i64_bound(p2, 1));
        break;
    }
    cuda_check_launch();
    return 0;
}

extern "C" int kc_cast(const KcIter *it, const void *a, DType adt, void *o, DType odt, void *stream) {
    const int64_t n = kc_numel(it);
    if (n == 0) return 0;
    cudaStream_t s = kc_stream(stream);
    if (!dtype_is_float(adt) && !dtype_is_float(odt))
        cast_kernel<int64_t><<<kc_blocks(n), KC_THREADS, 0, s>>>(*it, n, a, adt, o, odt);
    else if (adt == DT_F64 || odt == DT_F64 || !dtype_is_float(adt) || !dtype_is_float(odt))
        cast_kernel<double><<<kc_blocks(n), KC_THREADS, 0, s>>>(*it, n, a, adt, o, odt);
    else
        cast_kernel<float><<<kc_blocks(n), KC_THREADS, 0, s>>>(*it, n, a, adt, o, odt);
    cuda_check_launch();
    return 0;
}

extern "C" int kc_fill(const KcIter *it, void *o, DType odt, double v, void *stream) {
    const int64_t n = kc_numel(it);
    if (n == 0) return 0;
    const int is_int = !dtype_is_float(odt);
    fill_kernel<<<kc_blocks(n), KC_THREADS, 0, kc_stream(stream)>>>(*it, n, o, odt, v, is_int ? (int64_t)v : 0, is_int);
    cuda_check_launch();
    return 0;
}

extern "C" int kc_where(const KcIter *it, const void *c, const void *a, const void *b, void *o, DType dt, void *stream) {
    const int64_t n = kc_numel(it);
    if (n == 0) return 0;
    where_kernel<<<kc_blocks(n), KC_THREADS, 0, kc_stream(stream)>>>(*it, n, (const uint8_t *)c, (const char *)a,
                                                                   (const char *)b, (char *)o, dtype_size(dt));
    cuda_check_launch();
    return 0;
}

/* ---- unary backward ---- */

template <typename T> __device__ T unary_grad(KUnOp op, T x, T y, T gy, T q1) {
    switch (op) {
    case KU_NEG: return -gy;
    case KU_RELU: return x > 0 ? gy : (T)0;
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
    case KU_ABS: return x > 0 ? gy : x < 0 ? -gy : (T)0;
    case KU_POW: return q1 == 0 ? (T)0 : q1 == 2 ? (T)2 * x * gy : gy * q1 * pow(x, q1 - (T)1);
    case KU_LEAKY_RELU: return x > 0 ? gy : gy * q1;
    case KU_SQUARE: return (T)2 * x * gy;
    case KU_RECIP: return -gy * y * y;
    case KU_SIN: return gy * cos(x);
    case KU_COS: return -gy * sin(x);
    case KU_LOG1P: return gy / ((T)1 + x);
    case KU_EXPM1: return gy * (y + (T)1);
    case KU_ERF: return gy * (T)TWO_OVER_SQRT_PI * exp(-x * x);
    default: return 0;
    }
}

template <typename T>
__global__ void unary_bwd_kernel(KUnOp op, int64_t n, const void *x, const void *y, const void *gy, void *gx, DType dt,
                                 T q1, T q2) {
    KC_GRID_STRIDE(i, n) {
        const T xi = x ? kc_load<T>(x, dt, i) : (T)0, yi = y ? kc_load<T>(y, dt, i) : (T)0;
        T g = unary_grad(op, xi, yi, kc_load<T>(gy, dt, i), q1);
        if (op == KU_CLAMP) g = xi >= q1 && xi <= q2 ? kc_load<T>(gy, dt, i) : (T)0;
        kc_store(gx, dt, i, g);
    }
}

extern "C" int kc_unary_backward(KUnOp op, int64_t n, const void *x, const void *y, const void *gy, void *gx, DType dt,
                                 double p1, double p2, void *stream) {
    if (n <= 0) return 0;
    if (!dtype_is_float(dt)) return cuda_fail("unary backward: dtype %d is not a float type", (int)dt);
    cudaStream_t s = kc_stream(stream);
    if (dt == DT_F64)
        unary_bwd_kernel<double><<<kc_blocks(n), KC_THREADS, 0, s>>>(op, n, x, y, gy, gx, dt, p1, p2);
    else
        unary_bwd_kernel<float><<<kc_blocks(n), KC_THREADS, 0, s>>>(op, n, x, y, gy, gx, dt, (float)p1, (float)p2);
    cuda_check_launch();
    return 0;
}
