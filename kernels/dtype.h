/* dtype.h: element types shared by every layer, and scalar conversions
 * between them (bf16, fp16 and the two fp8 formats are stored as bits and
 * converted with round-to-nearest-even). Pure C, header-only, no state.
 * fp8 out of range, as PyTorch 2.x casts (bit for bit, checked against a
 * PyTorch fixture): float8_e4m3fn saturates to +-448 (+-inf too), NaN stays
 * NaN; float8_e5m2 overflows to +-inf and keeps inf. The fp8 recipe
 * (core/fp8.c) saturates both (e5m2 to +-57344). See the codec below. */
#ifndef ACCEL_DTYPE_H
#define ACCEL_DTYPE_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <math.h>

/* DT_HD marks the scalar codecs __host__ __device__ under nvcc, so the CUDA
 * kernels run the very same conversions as the CPU (bit for bit); plain C
 * compilers see nothing. */
#ifdef __CUDACC__
#define DT_HD __host__ __device__
#else
#define DT_HD
#endif

typedef enum {
    DT_F32 = 0,
    DT_F64,
    DT_BF16,
    DT_F16,
    DT_F8E4M3,
    DT_F8E5M2,
    DT_I64,
    DT_I32,
    DT_U8,
    DT_BOOL,
    DT_COUNT
} DType;

static inline DT_HD size_t dtype_size(DType dt) {
    static const size_t sz[DT_COUNT] = {4, 8, 2, 2, 1, 1, 8, 4, 1, 1};
    return sz[dt];
}

static inline DT_HD int dtype_is_float(DType dt) { return dt <= DT_F8E5M2; }

/* ---- bf16 ---- */
static inline DT_HD float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline DT_HD uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

/* ---- generic small-float codec: 1 sign bit, E exponent bits, M mantissa bits ----
 * Round to nearest even. Flags: SF_IEEE_INF: the format has infinities and
 * NaNs in its top exponent (fp16, e5m2); without it (e4m3fn, "finite") the
 * top exponent holds normal numbers and only S.1111.111 is NaN.
 * SF_SATURATE: a value beyond the largest finite one (after rounding), and
 * +-inf, become +-max instead of +-inf (or NaN). NaN stays NaN, its sign kept.
 *
 * The casts PyTorch 2.x makes (tests/fixtures/fp8_casts.safetensors, made by
 * scripts/fixtures/make_fp8_fixtures.py, decides; docs/fp8.md):
 *  - float32 -> float8_e4m3fn saturates: everything >= 448 (and +inf) gives
 *    448, the same as x.clamp(-448, 448).to(float8_e4m3fn);
 *  - float32 -> float8_e5m2 rounds past 57344 + half an ulp to inf and keeps
 *    inf (IEEE overflow); f32_to_f8e5m2_sat is the saturating cast of the fp8
 *    training recipe (clamp to +-57344 first, as Transformer Engine's SATFINITE
 *    conversion); e4m3fn's recipe cast is the plain one. */
enum { SF_IEEE_INF = 1, SF_SATURATE = 2 };

static inline DT_HD float smallfloat_decode(uint32_t bits, int E, int M, int ieee_inf) {
    uint32_t sign = bits >> (E + M) & 1u;
    uint32_t exp = (bits >> M) & ((1u << E) - 1u);
    uint32_t man = bits & ((1u << M) - 1u);
    int bias = (1 << (E - 1)) - 1;
    float v;
    if (exp == 0) {
        v = ldexpf((float)man, 1 - bias - M);
    } else if (ieee_inf && exp == (1u << E) - 1u) {
        v = man ? NAN : INFINITY;
    } else if (!ieee_inf && exp == (1u << E) - 1u && man == (1u << M) - 1u) {
        v = NAN;
    } else {
        v = ldexpf((float)(man | (1u << M)), (int)exp - bias - M);
    }
    return sign ? -v : v;
}

/* Bits (sign cleared) of the largest finite value, of +inf, of NaN. */
static inline DT_HD uint32_t smallfloat_max_bits(int E, int M, int flags) {
    uint32_t maxexp = (1u << E) - 1u;
    return (flags & SF_IEEE_INF) ? (((maxexp - 1u) << M) | ((1u << M) - 1u)) : ((maxexp << M) | ((1u << M) - 2u));
}
static inline DT_HD uint32_t smallfloat_overflow_bits(int E, int M, int flags) {
    if (flags & SF_SATURATE) return smallfloat_max_bits(E, M, flags);
    uint32_t maxexp = (1u << E) - 1u;
    return (flags & SF_IEEE_INF) ? (maxexp << M) : ((maxexp << M) | ((1u << M) - 1u));
}

static inline DT_HD uint32_t smallfloat_encode(float f, int E, int M, int flags) {
    uint32_t s = (signbit(f) ? 1u : 0u) << (E + M);
    int bias = (1 << (E - 1)) - 1;
    if (isnan(f)) return s | ((1u << E) - 1u) << M | ((1u << M) - 1u);
    float a = fabsf(f);
    float maxv = smallfloat_decode(smallfloat_max_bits(E, M, flags), E, M, flags & SF_IEEE_INF);
    if (isinf(a)) return s | smallfloat_overflow_bits(E, M, flags);
    int e;
    frexpf(a, &e); /* a = m * 2^e, m in [0.5,1) */
    int minexp = 1 - bias;
    int unbiased = e - 1 < minexp ? minexp : e - 1;
    float q = ldexpf(1.0f, unbiased - M);    /* the quantum at this exponent */
    float v = nearbyintf(a / q) * q;         /* default rounding mode: nearest even */
    if (v > maxv) return s | smallfloat_overflow_bits(E, M, flags);
    if (v == 0.0f) return s;
    int ev;
    frexpf(v, &ev);
    int ue = ev - 1;
    if (ue < minexp) return s | (uint32_t)(v / ldexpf(1.0f, minexp - M)); /* subnormal */
    uint32_t man = (uint32_t)(ldexpf(v, M - ue)) - (1u << M);
    return s | ((uint32_t)(ue + bias) << M) | man;
}

static inline DT_HD float f16_to_f32(uint16_t h) { return smallfloat_decode(h, 5, 10, 1); }
static inline DT_HD uint16_t f32_to_f16(float f) { return (uint16_t)smallfloat_encode(f, 5, 10, SF_IEEE_INF); }
static inline DT_HD float f8e4m3_to_f32(uint8_t b) { return smallfloat_decode(b, 4, 3, 0); }
static inline DT_HD uint8_t f32_to_f8e4m3(float f) { return (uint8_t)smallfloat_encode(f, 4, 3, SF_SATURATE); }
static inline DT_HD float f8e5m2_to_f32(uint8_t b) { return smallfloat_decode(b, 5, 2, 1); }
static inline DT_HD uint8_t f32_to_f8e5m2(float f) { return (uint8_t)smallfloat_encode(f, 5, 2, SF_IEEE_INF); }
/* The fp8 recipe's casts: out of range (and +-inf) -> +-max, NaN -> NaN. */
static inline DT_HD uint8_t f32_to_f8e4m3_sat(float f) { return f32_to_f8e4m3(f); }
static inline DT_HD uint8_t f32_to_f8e5m2_sat(float f) {
    return (uint8_t)smallfloat_encode(f, 5, 2, SF_IEEE_INF | SF_SATURATE);
}

/* Read element i (already offset pointer) of any dtype as double. */
static inline DT_HD double dtype_load(const void *p, DType dt) {
    switch (dt) {
    case DT_F32: return *(const float *)p;
    case DT_F64: return *(const double *)p;
    case DT_BF16: return bf16_to_f32(*(const uint16_t *)p);
    case DT_F16: return f16_to_f32(*(const uint16_t *)p);
    case DT_F8E4M3: return f8e4m3_to_f32(*(const uint8_t *)p);
    case DT_F8E5M2: return f8e5m2_to_f32(*(const uint8_t *)p);
    case DT_I64: return (double)*(const int64_t *)p;
    case DT_I32: return *(const int32_t *)p;
    case DT_U8: return *(const uint8_t *)p;
    case DT_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
    default: return 0;
    }
}

/* Float -> integer as PyTorch on x86 (cvttsd2si): truncated toward zero;
 * NaN, +-inf and values whose truncation leaves the destination's range
 * give its minimum (INT64_MIN, INT32_MIN); uint8 takes the low byte of the
 * int64 result (-1.5 -> 255, 300.7 -> 44, NaN / inf -> 0). */
static inline DT_HD int64_t float_to_i64(double v) {
    return v >= -9223372036854775808.0 && v < 9223372036854775808.0 ? (int64_t)v : INT64_MIN;
}
static inline DT_HD int32_t float_to_i32(double v) {
    return v > -2147483649.0 && v < 2147483648.0 ? (int32_t)v : INT32_MIN;
}

/* Integer read without going through double (exact for all int64). */
static inline DT_HD int64_t dtype_load_i64(const void *p, DType dt) {
    switch (dt) {
    case DT_I64: return *(const int64_t *)p;
    case DT_I32: return *(const int32_t *)p;
    case DT_U8: return *(const uint8_t *)p;
    case DT_BOOL: return *(const uint8_t *)p ? 1 : 0;
    default: return float_to_i64(dtype_load(p, dt));
    }
}

static inline DT_HD void dtype_store(void *p, DType dt, double v) {
    switch (dt) {
    case DT_F32: *(float *)p = (float)v; break;
    case DT_F64: *(double *)p = v; break;
    case DT_BF16: *(uint16_t *)p = f32_to_bf16((float)v); break;
    case DT_F16: *(uint16_t *)p = f32_to_f16((float)v); break;
    case DT_F8E4M3: *(uint8_t *)p = f32_to_f8e4m3((float)v); break;
    case DT_F8E5M2: *(uint8_t *)p = f32_to_f8e5m2((float)v); break;
    case DT_I64: *(int64_t *)p = float_to_i64(v); break;
    case DT_I32: *(int32_t *)p = float_to_i32(v); break;
    case DT_U8: *(uint8_t *)p = (uint8_t)float_to_i64(v); break;
    case DT_BOOL: *(uint8_t *)p = v != 0.0; break;
    default: break;
    }
}

/* v rounded to a bf16 / fp16 dt (any other dt: v itself), as torch rounds a
 * scalar meeting a half tensor */
static inline DT_HD double dtype_round_half(DType dt, double v) {
    uint16_t h;
    if (dt != DT_BF16 && dt != DT_F16) return v;
    dtype_store(&h, dt, v);
    return dtype_load(&h, dt);
}

static inline DT_HD void dtype_store_i64(void *p, DType dt, int64_t v) {
    switch (dt) {
    case DT_I64: *(int64_t *)p = v; break;
    case DT_I32: *(int32_t *)p = (int32_t)v; break;
    case DT_U8: *(uint8_t *)p = (uint8_t)v; break;
    case DT_BOOL: *(uint8_t *)p = v != 0; break;
    default: dtype_store(p, dt, (double)v); break;
    }
}

#endif
