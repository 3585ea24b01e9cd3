/* pool.c: 2-D max pooling over (planes, H, W): the values, and where each
 * maximum sits in two forms, either or both: the flat position h*W + w in
 * its plane (int64, PyTorch's return_indices), or its position kh*KW + kw in
 * the window (uint8, 8x less memory traffic, all the backward needs); and
 * the backward scatter through either. Ties keep the first maximum in window
 * order (rows, then columns); NaN wins as in PyTorch (the last NaN seen);
 * padding never wins (the caller guarantees every window holds an input
 * element). Planes are spread over OpenMP threads above the size threshold.
 * The common 2x2 / stride 2 window without padding has its own loops
 * (AVX2 for float32), branch-free since random data would mispredict. */
#include "simd.h"
#include <math.h>
#include <string.h>
#include "kernels.h"

/* The 2x2 / stride 2 row for float32 with AVX2, 8 output columns at a time:
 * the even / odd columns of both input rows, the same select chain as
 * row_2x2 below, int32 index arithmetic widened to int64. */
static inline __m256 even_lanes(__m256 lo, __m256 hi) {
    __m256 t = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}
static inline __m256 odd_lanes(__m256 lo, __m256 hi) {
    __m256 t = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}
/* v wins over best: v > best or v is NaN */
static inline __m256 wins(__m256 v, __m256 best) {
    return _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}
/* lanes [0, n) of a mask, n in [0, 8] */
static inline __m256i first_lanes(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Where an output row's results go (either pointer may be NULL). */
typedef struct {
    int64_t *idx;
    uint8_t *code;
} ArgOut;

/* Output columns [ow, ow + n), n in [1, 8]. A row's last n < 8 columns read
 * past the row (into the next one) when the input has room (xend), else
 * with masked loads (slow on some CPUs), and store through small buffers. */
static inline void cols_2x2_avx2(const float *r0, const float *r1, const float *xend, int64_t W, int64_t oh,
                                 int64_t ow, int64_t n, float *yr, ArgOut out) {
    __m256 x0, x1, y0, y1;
    if (n == 8 || r1 + 2 * ow + 16 <= xend) {
        x0 = _mm256_loadu_ps(r0 + 2 * ow), x1 = _mm256_loadu_ps(r0 + 2 * ow + 8);
        y0 = _mm256_loadu_ps(r1 + 2 * ow), y1 = _mm256_loadu_ps(r1 + 2 * ow + 8);
    } else {
        const __m256i m0 = first_lanes(2 * n), m1 = first_lanes(2 * n - 8);
        x0 = _mm256_maskload_ps(r0 + 2 * ow, m0), x1 = _mm256_maskload_ps(r0 + 2 * ow + 8, m1);
        y0 = _mm256_maskload_ps(r1 + 2 * ow, m0), y1 = _mm256_maskload_ps(r1 + 2 * ow + 8, m1);
    }
    const __m256 a = even_lanes(x0, x1), b = odd_lanes(x0, x1), c = even_lanes(y0, y1), d = odd_lanes(y0, y1);
    const __m256i one = _mm256_set1_epi32(1);
    __m256 m = wins(b, a), best = _mm256_blendv_ps(a, b, m);
    __m256 k = _mm256_and_ps(m, _mm256_castsi256_ps(one)); /* window position 0..3, as int bits */
    m = wins(c, best), best = _mm256_blendv_ps(best, c, m);
    k = _mm256_blendv_ps(k, _mm256_castsi256_ps(_mm256_set1_epi32(2)), m);
    m = wins(d, best), best = _mm256_blendv_ps(best, d, m);
    k = _mm256_blendv_ps(k, _mm256_castsi256_ps(_mm256_set1_epi32(3)), m);
    float ybuf[8];
    _mm256_storeu_ps(n == 8 ? yr + ow : ybuf, best);
    if (n < 8) memcpy(yr + ow, ybuf, sizeof(float) * (size_t)n);
    const __m256i ki = _mm256_castps_si256(k);
    if (out.code) { /* 8 int32 lanes -> 8 bytes */
        const __m128i w16 = _mm_packus_epi32(_mm256_castsi256_si128(ki), _mm256_extracti128_si256(ki, 1));
        uint8_t cbuf[16];
        _mm_storeu_si128((__m128i *)cbuf, _mm_packus_epi16(w16, w16));
        memcpy(out.code + ow, cbuf, (size_t)n);
    }
    if (!out.idx) return;
    __m256i at = _mm256_add_epi32(_mm256_set1_epi32((int)(2 * oh * W + 2 * ow)), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    at = _mm256_add_epi32(at, _mm256_mullo_epi32(_mm256_srli_epi32(ki, 1), _mm256_set1_epi32((int)W)));
    at = _mm256_add_epi32(at, _mm256_and_si256(ki, one));
    int64_t ibuf[8], *dst = n == 8 ? out.idx + ow : ibuf;
    _mm256_storeu_si256((__m256i *)dst, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(at)));
    _mm256_storeu_si256((__m256i *)(dst + 4), _mm256_cvtepi32_epi64(_mm256_extracti128_si256(at, 1)));
    if (n < 8) memcpy(out.idx + ow, ibuf, sizeof(int64_t) * (size_t)n);
}
/* A whole output row; returns the columns done (all of them). */
static int64_t row_2x2_avx2(const float *r0, const float *r1, const float *xend, int64_t W, int64_t oh, int64_t OW,
                            float *yr, ArgOut out) {
    if (2 * (oh + 1) * W >= INT32_MAX) return 0; /* int32 index lanes */
    for (int64_t ow = 0; ow < OW; ow += 8) cols_2x2_avx2(r0, r1, xend, W, oh, ow, OW - ow < 8 ? OW - ow : 8, yr, out);
    return OW;
}
#define ROW_2X2_FAST_f32 row_2x2_avx2
#define ROW_2X2_FAST_f64(r0, r1, xend, W, oh, OW, yr, out) ((void)(xend), 0)

/* 2x2 windows, stride 2, no padding or dilation, all inside the plane */
static int is_2x2(const KPool2d *g) {
    return g->KH == 2 && g->KW == 2 && g->sh == 2 && g->sw == 2 && g->ph == 0 && g->pw == 0 && g->dh == 1 &&
           g->dw == 1 && 2 * g->OH <= g->H && 2 * g->OW <= g->W;
}

/* Element offset of window position c of output (oh, ow) in its plane. */
static inline int64_t code_offset(const KPool2d *g, int64_t oh, int64_t ow, int64_t c) {
    return (oh * g->sh - g->ph + c / g->KW * g->dh) * g->W + ow * g->sw - g->pw + c % g->KW * g->dw;
}

#define DEF_MAX_POOL(S, T, UT)                                                                     \
    /* any geometry: bounds-checked windows */                                                     \
    static void plane_any_##S(const KPool2d *g, const T *xp, T *yp, ArgOut out) {                  \
        for (int64_t oh = 0; oh < g->OH; oh++) {                                                   \
            const int64_t h0 = oh * g->sh - g->ph;                                                 \
            for (int64_t ow = 0; ow < g->OW; ow++) {                                               \
                const int64_t w0 = ow * g->sw - g->pw;                                             \
                T best = -(T)INFINITY;                                                             \
                int64_t at = -1, code = 0;                                                         \
                for (int64_t kh = 0; kh < g->KH; kh++) {                                           \
                    const int64_t ih = h0 + kh * g->dh;                                            \
                    if (ih < 0 || ih >= g->H) continue;                                            \
                    for (int64_t kw = 0; kw < g->KW; kw++) {                                       \
                        const int64_t iw = w0 + kw * g->dw;                                        \
                        if (iw < 0 || iw >= g->W) continue;                                        \
                        const T v = xp[ih * g->W + iw];                                            \
                        if (at < 0 || v > best || v != v)                                          \
                            best = v, at = ih * g->W + iw, code = kh * g->KW + kw;                 \
                    }                                                                              \
                }                                                                                  \
                const int64_t o = oh * g->OW + ow;                                                 \
                yp[o] = best;                                                                      \
                if (out.idx) out.idx[o] = at < 0 ? 0 : at;                                         \
                if (out.code) out.code[o] = (uint8_t)code;                                         \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* 2x2: output columns [from, OW) of output row oh, selects, not branches */                  \
    static void row_2x2_##S(const T *r0, const T *r1, int64_t W, int64_t oh, int64_t from,          \
                            int64_t OW, T *yr, ArgOut out) {                                       \
        for (int64_t ow = from; ow < OW; ow++) {                                                   \
            const T a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];        \
            const int tb = (b > a) | (b != b);                                                     \
            T best = tb ? b : a;                                                                   \
            int64_t k = tb;                                                                        \
            const int tc = (c > best) | (c != c);                                                  \
            best = tc ? c : best, k = tc ? 2 : k;                                                  \
            const int td = (d > best) | (d != d);                                                  \
            best = td ? d : best, k = td ? 3 : k;                                                  \
            yr[ow] = best;                                                                         \
            if (out.idx) out.idx[ow] = (2 * oh + (k >> 1)) * W + 2 * ow + (k & 1);                 \
            if (out.code) out.code[ow] = (uint8_t)k;                                               \
        }                                                                                          \
    }                                                                                              \
    static void plane_2x2_##S(const KPool2d *g, const T *xp, const T *xend, T *yp, ArgOut out) {   \
        for (int64_t oh = 0; oh < g->OH; oh++) {                                                   \
            const T *r0 = xp + 2 * oh * g->W;                                                      \
            const int64_t o = oh * g->OW;                                                          \
            ArgOut ro = {out.idx ? out.idx + o : NULL, out.code ? out.code + o : NULL};            \
            int64_t done = ROW_2X2_FAST_##S(r0, r0 + g->W, xend, g->W, oh, g->OW, yp + o, ro);     \
            row_2x2_##S(r0, r0 + g->W, g->W, oh, done, g->OW, yp + o, ro);                         \
        }                                                                                          \
    }                                                                                              \
    void k_max_pool2d_fwd_##S(const KPool2d *g, const T *x, T *y, int64_t *idx, uint8_t *code) {   \
        const int64_t HW = g->H * g->W, OHW = g->OH * g->OW;                                       \
        const int two = is_2x2(g);                                                                 \
        KERNEL_FOR(pl, g->NC, g->NC * OHW * g->KH * g->KW, {                                       \
            ArgOut out = {idx ? idx + pl * OHW : NULL, code ? code + pl * OHW : NULL};             \
            if (two) plane_2x2_##S(g, x + pl * HW, x + g->NC * HW, y + pl * OHW, out);             \
            else plane_any_##S(g, x + pl * HW, y + pl * OHW, out);                                 \
        });                                                                                        \
    }                                                                                              \
    /* 2x2 windows tiling the plane exactly: each input element gets its   \
     * window's gradient or 0, written once (no zeroing pass); bit masks,   \
     * not branches (nor v * 0, which would spread NaN) */                  \
    static void plane_bwd_2x2_##S(const KPool2d *g, const T *gq, const uint8_t *cq, T *gp) {       \
        const int64_t W = g->W;                                                                    \
        for (int64_t oh = 0; oh < g->OH; oh++) {                                                   \
            T *r0 = gp + 2 * oh * W, *r1 = r0 + W;                                                 \
            for (int64_t ow = 0; ow < g->OW; ow++) {                                               \
                const int64_t o = oh * g->OW + ow, k = cq[o];                                      \
                UT v;                                                                              \
                memcpy(&v, gq + o, sizeof v);                                                      \
                const UT e0 = v & -(UT)(k == 0), e1 = v & -(UT)(k == 1);                           \
                const UT e2 = v & -(UT)(k == 2), e3 = v & -(UT)(k == 3);                           \
                memcpy(r0 + 2 * ow, &e0, sizeof v), memcpy(r0 + 2 * ow + 1, &e1, sizeof v);        \
                memcpy(r1 + 2 * ow, &e2, sizeof v), memcpy(r1 + 2 * ow + 1, &e3, sizeof v);        \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    void k_max_pool2d_bwd_##S(const KPool2d *g, const T *gy, const int64_t *idx, const uint8_t *code, \
                              T *gx) {                                                             \
        const int64_t HW = g->H * g->W, OHW = g->OH * g->OW;                                       \
        const int tiled = !idx && is_2x2(g) && g->H == 2 * g->OH && g->W == 2 * g->OW;             \
        KERNEL_FOR(pl, g->NC, g->NC * (HW + OHW), {                                                \
            T *gp = gx + pl * HW;                                                                  \
            const T *gq = gy + pl * OHW;                                                           \
            if (tiled) {                                                                           \
                plane_bwd_2x2_##S(g, gq, code + pl * OHW, gp);                                     \
                continue;                                                                          \
            }                                                                                      \
            memset(gp, 0, sizeof(T) * (size_t)HW);                                                 \
            if (idx)                                                                               \
                for (int64_t o = 0; o < OHW; o++) gp[idx[pl * OHW + o]] += gq[o];                  \
            else                                                                                   \
                for (int64_t oh = 0; oh < g->OH; oh++)                                             \
                    for (int64_t ow = 0; ow < g->OW; ow++)                                         \
                        gp[code_offset(g, oh, ow, code[pl * OHW + oh * g->OW + ow])] +=            \
                            gq[oh * g->OW + ow];                                                   \
        });                                                                                        \
    }
DEF_MAX_POOL(f32, float, uint32_t)
DEF_MAX_POOL(f64, double, uint64_t)
