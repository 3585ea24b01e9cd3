/* kops.h: the op vocabulary every backend shares: the elementwise,
 * unary and reduction op codes and the parameter blocks of the fused ops
 * (optimizer steps, convolution, pooling, attention, random fills), and the
 * fp8 formats. Neutral ground: the core, the backend interface
 * (core/backend/backend.h) and each backend's kernels include it; no backend
 * defines these itself. Sizes and strides are in elements. */
#ifndef ACCEL_KOPS_H
#define ACCEL_KOPS_H

#include <math.h>
#include <stdint.h>
#include "dtype.h" /* DT_HD */

typedef enum {
    KB_ADD, KB_SUB, KB_MUL, KB_DIV, KB_POW, KB_MAX, KB_MIN,
    KB_EQ, KB_NE, KB_LT, KB_LE, KB_GT, KB_GE, /* comparisons: output uint8 0/1 */
    KB_AND, KB_OR, KB_XOR,                    /* logical (nonzero = true), output uint8 */
    KB_FLOORDIV, KB_REMAINDER,                /* Python semantics (floor) */
    KB_FMOD,                                  /* C's fmod: truncated, the dividend's sign */
    KB_ATAN2,                                 /* atan2(x, y): the angle of the point (y, x) */
    KB_BAND, KB_BOR, KB_BXOR,                 /* bitwise, integers only (the core maps two bools to AND / OR / XOR) */
    KB_SHL, KB_SHR,                           /* x << y (0 for y < 0 or >= 64), x >> y arithmetic (sign for such y) */
    KB_COUNT
} KBinOp;

static inline int kbin_is_compare(KBinOp op) { return op >= KB_EQ && op <= KB_XOR; }
static inline int kbin_is_bitwise(KBinOp op) { return op >= KB_BAND && op <= KB_SHR; }

/* The gradient-norm reduction's (sum |x|^p, or max / min |x| for p = +-INF)
 * start, and two partial results s, v combined (a NaN sticks); shared by
 * the kernels and the core's combination of per-tensor / per-rank parts. */
static inline DT_HD double knorm_identity(double p) { return p == -INFINITY ? INFINITY : 0; }
static inline double knorm_combine(double s, double v, double p) {
    if (p == INFINITY) return (v > s || v != v) ? v : s;
    if (p == -INFINITY) return (v < s || v != v) ? v : s;
    return s + v;
}

/* The integer bitwise ops of KB_BAND .. KB_SHR on int64 (shared by the CPU
 * and CUDA kernels and their tests; shifts by y outside [0, 64) saturate as
 * PyTorch's: 0 for <<, the sign for >>). */
static inline DT_HD int64_t kbits_i64(KBinOp op, int64_t x, int64_t y) {
    switch (op) {
    case KB_BAND: return x & y;
    case KB_BOR: return x | y;
    case KB_BXOR: return x ^ y;
    case KB_SHL: return y < 0 || y >= 64 ? 0 : (int64_t)((uint64_t)x << y);
    case KB_SHR: return y < 0 || y >= 64 ? (x < 0 ? -1 : 0) : x >> y;
    default: return 0;
    }
}

typedef enum {
    KU_NEG, KU_EXP, KU_LOG, KU_SQRT, KU_RSQRT, KU_TANH, KU_SIGMOID, KU_RELU,
    KU_GELU,      /* exact: 0.5 x (1 + erf(x / sqrt 2)) */
    KU_GELU_TANH, /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    KU_SILU, KU_ABS, KU_SIN, KU_COS, KU_SQUARE, KU_RECIP, KU_SIGN,
    KU_CLAMP,     /* p1 = min (or -INF), p2 = max (or +INF) */
    KU_POW,       /* x ^ p1 */
    KU_RPOW,      /* p1 ^ x */
    KU_LOG1P, KU_EXPM1, KU_FLOOR, KU_CEIL, KU_ROUND, KU_TRUNC, KU_ERF,
    KU_LEAKY_RELU, /* slope p1 */
    KU_NOT,        /* logical not: output value 1 where x == 0 */
    KU_TAN, KU_ASIN, KU_ACOS, KU_ATAN, KU_SINH, KU_COSH, KU_ASINH, KU_ACOSH, KU_ATANH, KU_LOG2, KU_LOG10,
    KU_ERFC, KU_LGAMMA, KU_DIGAMMA, /* special.h: digamma (and trigamma, its derivative) */
    KU_BNOT,       /* ~x, integers only (the core maps a bool to NOT) */
    KU_COUNT
} KUnOp;

/* x is contiguous with logical shape (outer, n, inner); reduce over n.
 * out has (outer, inner). SUM accumulates in double for f32 (so fp32 sums
 * are as good as pairwise); MEAN = SUM / n; PROD; MAX/MIN propagate NaN. */
typedef enum { KR_SUM, KR_MEAN, KR_PROD, KR_MAX, KR_MIN, KR_COUNT } KRedOp;

/* The fp8 formats of the recipe's casts (backend fp8_quantize /
 * fp8_dequantize): e4m3fn (max 448, no inf) and e5m2 (max 57344). */
typedef enum { KF8_E4M3FN, KF8_E5M2 } KFp8Fmt;

/* Whether cuBLASLt's fp8 GEMM takes A (M, K) and B (N, K), both K-major,
 * with a float32 (M, N) output: row strides (K bytes, N floats) multiples
 * of 16 bytes, at most one e5m2 operand, no empty dimension. The backend
 * fp8_gemm entries take exactly these (CUDA; sim stands in for it). */
static inline int kfp8_gemm_takes(KFp8Fmt fa, KFp8Fmt fb, int64_t M, int64_t N, int64_t K) {
    return M > 0 && N > 0 && K > 0 && K % 16 == 0 && N % 4 == 0 && !(fa == KF8_E5M2 && fb == KF8_E5M2);
}

/* SGD and Adam/AdamW with all of PyTorch's options (formulas at the top of
 * optim.c). Scalars in double; elementwise work in the buffer's type. */
typedef struct {
    double lr, momentum, dampening, weight_decay;
    int nesterov, maximize;
} KSgdArgs;

typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    int decoupled; /* 1: AdamW (p *= 1 - lr wd); 0: Adam (g += wd p) */
    int maximize;
    int64_t step;  /* 1-based step count after the increment */
} KAdamArgs;

/* x (N, C, H, W), w (O, C/groups, KH, KW), b (O), y (N, O, OH, OW), all
 * contiguous. ph/pw pad the top/left edges; OH/OW (computed by the caller)
 * fix how far the windows reach, so bottom/right padding is implicit.
 * dt: F32, F64, or BF16 (x, w, gy in bf16; y, b, gx, gw, gb in f32).
 * Return 0, or nonzero when memory or the library failed. */
typedef struct {
    int64_t N, C, H, W, O, KH, KW, OH, OW;
    int64_t sh, sw, ph, pw, dh, dw, groups;
} KConv2d;

/* x (NC, H, W) -> y (NC, OH, OW), and where each maximum sits (either may be
 * NULL): idx, its flat position h*W + w in the plane (PyTorch's
 * return_indices), code, its position kh*KW + kw in the window (needs
 * KH*KW <= 256). NaN propagates. Padding must leave every window an input
 * element. Backward: gx = 0, then gx[plane][position] += gy, the position
 * from idx, or from code when idx is NULL. */
typedef struct {
    int64_t NC, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw;
} KPool2d;

/* q (B, H, L, D), k (B, H, S, D), v (B, H, S, Dv), o (B, H, L, Dv), each
 * with its own strides for the batch, head and row dims (st[0..2]) and a
 * contiguous last dim; gradients have their own strides too. lse (B, H, L)
 * contiguous: the row log-sum-exp the forward saves for backward.
 * o = softmax(scale q k^T [causal: key j > query i masked]) v, never
 * forming the (L, S) scores. Backward overwrites gq, gk, gv. Causal needs
 * S >= 1. Returns 0, or nonzero when memory or the GEMM library failed. */
typedef struct {
    int64_t B, H, L, S, D, Dv;
    int64_t sq[3], sk[3], sv[3], so[3];
    int64_t sgq[3], sgk[3], sgv[3], sgo[3];
    double scale;
    int causal;
} KAttn;

/* A random fill of n contiguous elements from the Philox stream (seed,
 * offset): offset is the first block the fill may use (core/rng.c's top
 * comment specifies each draw; kernels/philox.h gives element i of each,
 * and krng_blocks() the blocks a fill consumes, which the caller adds to
 * its offset). Parameters by distribution:
 *   KRNG_UNIFORM    lo + u (hi - lo), u in [0, 1): a = lo, b = hi
 *   KRNG_NORMAL     mean + std z:                  a = mean, b = std
 *   KRNG_BERNOULLI  u >= p ? 1 / (1 - p) : 0:      a = p (dropout masks)
 *   KRNG_RANDINT    lo + floor(x range / 2^64):    lo, range (any dtype)
 * The generator's state is only (seed, offset), passed by value, so a
 * backend may draw later (queued work) or per element (a GPU thread) and
 * still give the stream's values. */
typedef enum { KRNG_UNIFORM, KRNG_NORMAL, KRNG_BERNOULLI, KRNG_RANDINT, KRNG_COUNT } KRngDist;

typedef struct {
    KRngDist dist;
    uint64_t seed, offset;
    double a, b;
    int64_t lo;
    uint64_t range;
} KRngFill;

#endif
