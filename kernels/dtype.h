/* dtype.h: element types shared by every layer, and scalar conversions
 * between them (bf16, fp16 and the two fp8 formats are stored as bits and
 * converted with round-to-nearest-even). Pure C, header-only, no state. */
#ifndef ACCEL_DTYPE_H
#define ACCEL_DTYPE_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <math.h>

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

static inline size_t dtype_size(DType dt) {
    static const size_t sz[DT_COUNT] = {4, 8, 2, 2, 1, 1, 8, 4, 1, 1};
    return sz[dt];
}

static inline int dtype_is_float(DType dt) { return dt <= DT_F8E5M2; }

/* ---- bf16 ---- */
static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

/* ---- generic small-float codec: 1 sign bit, E exponent bits, M mantissa bits ----
 * ieee_inf: the format has infinities (fp16, e5m2); e4m3 ("fn") has none and
 * uses only S.1111.111 as NaN, saturating nothing (out of range -> NaN, as
 * PyTorch's conversion does for float8_e4m3fn). */
static inline float smallfloat_decode(uint32_t bits, int E, int M, int ieee_inf) {
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

static inline uint32_t smallfloat_encode(float f, int E, int M, int ieee_inf) {
    uint32_t sign = signbit(f) ? 1u : 0u;
    uint32_t s = sign << (E + M);
    int bias = (1 << (E - 1)) - 1;
    uint32_t maxexp = (1u << E) - 1u;
    if (isnan(f)) return s | (maxexp << M) | ((1u << M) - 1u);
    float a = fabsf(f);
    /* largest finite value */
    float maxv = ieee_inf ? ldexpf((float)((2u << M) - 1u), (int)maxexp - 1 - bias - M)
                          : ldexpf((float)((2u << M) - 2u), (int)maxexp - bias - M);
    if (isinf(a)) return ieee_inf ? (s | (maxexp << M)) : (s | (maxexp << M) | ((1u << M) - 1u));
    int e;
    frexpf(a, &e); /* a = m * 2^e, m in [0.5,1) */
    int unbiased = e - 1;
    int minexp = 1 - bias;
    if (unbiased < minexp) unbiased = minexp;
    /* quantum at this exponent */
    float q = ldexpf(1.0f, unbiased - M);
    float r = nearbyintf(a / q); /* default rounding mode: nearest even */
    float v = r * q;
    if (v > maxv) {
        /* round-to-nearest overflow: values up to maxv + half ulp round to maxv in RNE */
        if (ieee_inf) return s | (maxexp << M);
        return s | (maxexp << M) | ((1u << M) - 1u); /* e4m3fn: NaN */
    }
    if (v == 0.0f) return s;
    int ev;
    float mv = frexpf(v, &ev);
    (void)mv;
    int ue = ev - 1;
    if (ue < minexp) { /* subnormal */
        uint32_t man = (uint32_t)(v / ldexpf(1.0f, minexp - M));
        return s | man;
    }
    uint32_t man = (uint32_t)(ldexpf(v, M - ue)) - (1u << M);
    return s | ((uint32_t)(ue + bias) << M) | man;
}

static inline float f16_to_f32(uint16_t h) { return smallfloat_decode(h, 5, 10, 1); }
static inline uint16_t f32_to_f16(float f) { return (uint16_t)smallfloat_encode(f, 5, 10, 1); }
static inline float f8e4m3_to_f32(uint8_t b) { return smallfloat_decode(b, 4, 3, 0); }
static inline uint8_t f32_to_f8e4m3(float f) { return (uint8_t)smallfloat_encode(f, 4, 3, 0); }
static inline float f8e5m2_to_f32(uint8_t b) { return smallfloat_decode(b, 5, 2, 1); }
static inline uint8_t f32_to_f8e5m2(float f) { return (uint8_t)smallfloat_encode(f, 5, 2, 1); }

/* Read element i (already offset pointer) of any dtype as double. */
static inline double dtype_load(const void *p, DType dt) {
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

/* Integer read without going through double (exact for all int64). */
static inline int64_t dtype_load_i64(const void *p, DType dt) {
    switch (dt) {
    case DT_I64: return *(const int64_t *)p;
    case DT_I32: return *(const int32_t *)p;
    case DT_U8: return *(const uint8_t *)p;
    case DT_BOOL: return *(const uint8_t *)p ? 1 : 0;
    default: return (int64_t)dtype_load(p, dt);
    }
}

static inline void dtype_store(void *p, DType dt, double v) {
    switch (dt) {
    case DT_F32: *(float *)p = (float)v; break;
    case DT_F64: *(double *)p = v; break;
    case DT_BF16: *(uint16_t *)p = f32_to_bf16((float)v); break;
    case DT_F16: *(uint16_t *)p = f32_to_f16((float)v); break;
    case DT_F8E4M3: *(uint8_t *)p = f32_to_f8e4m3((float)v); break;
    case DT_F8E5M2: *(uint8_t *)p = f32_to_f8e5m2((float)v); break;
    case DT_I64: *(int64_t *)p = (int64_t)v; break;
    case DT_I32: *(int32_t *)p = (int32_t)v; break;
    case DT_U8: *(uint8_t *)p = (uint8_t)(int64_t)v; break;
    case DT_BOOL: *(uint8_t *)p = v != 0.0; break;
    default: break;
    }
}

static inline void dtype_store_i64(void *p, DType dt, int64_t v) {
    switch (dt) {
    case DT_I64: *(int64_t *)p = v; break;
    case DT_I32: *(int32_t *)p = (int32_t)v; break;
    case DT_U8: *(uint8_t *)p = (uint8_t)v; break;
    case DT_BOOL: *(uint8_t *)p = v != 0; break;
    default: dtype_store(p, dt, (double)v); break;
    }
}

#endif
