/* conv.c: 2-D convolution over NCHW tensors: forward, and the gradients of
 * the input, the weight and the bias.
 *
 * float32 goes to oneDNN's convolution primitives (conv_dnnl.c) where they
 * pay for their blocked-layout reorders (dnnl_suits below); the rest,
 * float64, and bf16 inputs (autocast) take this file's im2col + GEMM path,
 * one (image, group) at a time:
 *   col (Cg*KH*KW, OH*OW) gathers each output position's receptive field,
 *   y_n,g (Og, OH*OW)    = W_g (Og, Cg*KH*KW) @ col            (forward)
 *   col                  = W_g^T @ gy_n,g, then col2im adds it  (input grad)
 *   gW_g                += gy_n,g @ col^T                       (weight grad)
 * so the output lands in NCHW with no transposes, and each GEMM works on a
 * column buffer that fits in cache. The bias rides in the same GEMMs: a row
 * of ones under col, the bias as an extra column of W (forward) or of gW
 * (its gradient), so it costs no pass of its own; where that cannot apply
 * (1x1 kernels, bf16) it is filled in before the GEMM, and its gradient is
 * gy_n @ ones. A 1x1 kernel with stride 1 and no padding skips im2col (the
 * image is its own column matrix). Images are spread over OpenMP threads
 * when there are several images and enough work, each thread with its own
 * column buffer (oneDNN's GEMM then runs single-threaded inside the team);
 * otherwise the images run in order and the GEMM threads itself.
 *
 * Dtypes: F32 (dnnl_sgemm), F64 (OpenBLAS dgemm), and BF16 inputs with F32
 * accumulation and F32 results (k_gemm_bf16), for autocast. Padding is given
 * for the top/left edges only: OH/OW fix how far the windows reach, so any
 * bottom/right padding (PyTorch's asymmetric "same") needs no parameter. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "conv_dnnl.h"

/* ---------------- per-dtype parts ---------------- */

typedef struct {
    size_t isz, asz; /* input element size, accumulator / output element size */
    DType adt;       /* accumulator dtype */
    void (*im2col)(const KConv2d *g, const void *x, void *col);
    void (*col2im)(const KConv2d *g, const void *col, void *x); /* adds, acc type */
    void (*fill_rows)(void *y, int64_t rows, int64_t cols, const void *vals);
} ConvType;

/* Output positions ow whose input column ow*sw + off lies in [0, W):
 * [*lo, *hi), clamped to [0, OW). */
static void valid_span(int64_t off, int64_t sw, int64_t W, int64_t OW, int64_t *lo, int64_t *hi) {
    int64_t l = off >= 0 ? 0 : (-off + sw - 1) / sw;
    int64_t h = W - off <= 0 ? 0 : (W - 1 - off) / sw + 1;
    *lo = l < OW ? l : OW;
    *hi = h < OW ? (h > *lo ? h : *lo) : OW;
}

/* im2col over one image-group x (Cg, H, W) into col (Cg*KH*KW, OH*OW);
 * col2im is its adjoint (adds col back into x). */
#define DEF_IM2COL(S, T)                                                                       \
    static void im2col_##S(const KConv2d *g, const void *xv, void *colv) {                     \
        const T *x = xv;                                                                       \
        T *col = colv;                                                                         \
        const int64_t Cg = g->C / g->groups, P = g->OH * g->OW;                                \
        for (int64_t c = 0; c < Cg; c++)                                                       \
            for (int64_t kh = 0; kh < g->KH; kh++)                                             \
                for (int64_t kw = 0; kw < g->KW; kw++) {                                       \
                    T *row = col + ((c * g->KH + kh) * g->KW + kw) * P;                        \
                    const int64_t off = kw * g->dw - g->pw;                                    \
                    int64_t lo, hi;                                                            \
                    valid_span(off, g->sw, g->W, g->OW, &lo, &hi);                             \
                    for (int64_t oh = 0; oh < g->OH; oh++) {                                   \
                        T *d = row + oh * g->OW;                                               \
                        const int64_t ih = oh * g->sh - g->ph + kh * g->dh;                    \
                        if (ih < 0 || ih >= g->H) {                                            \
                            memset(d, 0, sizeof(T) * (size_t)g->OW);                           \
                            continue;                                                          \
                        }                                                                      \
                        const T *s = x + (c * g->H + ih) * g->W;                               \
                        for (int64_t ow = 0; ow < lo; ow++) d[ow] = 0;                         \
                        if (g->sw == 1) /* short rows: a loop beats memcpy's call */           \
                            for (int64_t ow = lo; ow < hi; ow++) d[ow] = s[ow + off];          \
                        else                                                                   \
                            for (int64_t ow = lo; ow < hi; ow++) d[ow] = s[ow * g->sw + off];  \
                        for (int64_t ow = hi; ow < g->OW; ow++) d[ow] = 0;                     \
                    }                                                                          \
                }                                                                              \
    }
DEF_IM2COL(f32, float)
DEF_IM2COL(f64, double)
DEF_IM2COL(bf16, uint16_t)

#define DEF_COL2IM(S, T)                                                                       \
    static void col2im_##S(const KConv2d *g, const void *colv, void *xv) {                     \
        const T *col = colv;                                                                   \
        T *x = xv;                                                                             \
        const int64_t Cg = g->C / g->groups, P = g->OH * g->OW;                                \
        for (int64_t c = 0; c < Cg; c++)                                                       \
            for (int64_t kh = 0; kh < g->KH; kh++)                                             \
                for (int64_t kw = 0; kw < g->KW; kw++) {                                       \
                    const T *row = col + ((c * g->KH + kh) * g->KW + kw) * P;                  \
                    const int64_t off = kw * g->dw - g->pw;                                    \
                    int64_t lo, hi;                                                            \
                    valid_span(off, g->sw, g->W, g->OW, &lo, &hi);                             \
                    for (int64_t oh = 0; oh < g->OH; oh++) {                                   \
                        const int64_t ih = oh * g->sh - g->ph + kh * g->dh;                    \
                        if (ih < 0 || ih >= g->H) continue;                                    \
                        const T *s = row + oh * g->OW;                                         \
                        T *d = x + (c * g->H + ih) * g->W;                                     \
                        if (g->sw == 1)                                                        \
                            for (int64_t ow = lo; ow < hi; ow++) d[ow + off] += s[ow];         \
                        else                                                                   \
                            for (int64_t ow = lo; ow < hi; ow++) d[ow * g->sw + off] += s[ow]; \
                    }                                                                          \
                }                                                                              \
    }
DEF_COL2IM(f32, float)
DEF_COL2IM(f64, double)

/* y (rows, cols) row r = vals[r]. */
#define DEF_FILL_ROWS(S, T)                                                                    \
    static void fill_rows_##S(void *yv, int64_t rows, int64_t cols, const void *valsv) {       \
        T *y = yv;                                                                             \
        const T *vals = valsv;                                                                 \
        for (int64_t r = 0; r < rows; r++)                                                     \
            for (int64_t j = 0; j < cols; j++) y[r * cols + j] = vals[r];                      \
    }
DEF_FILL_ROWS(f32, float)
DEF_FILL_ROWS(f64, double)

static const ConvType conv_f32 = {4, 4, DT_F32, im2col_f32, col2im_f32, fill_rows_f32};
static const ConvType conv_f64 = {8, 8, DT_F64, im2col_f64, col2im_f64, fill_rows_f64};
static const ConvType conv_bf16 = {2, 4, DT_F32, im2col_bf16, col2im_f32, fill_rows_f32};

static const ConvType *conv_type(DType dt) {
    return dt == DT_F64 ? &conv_f64 : dt == DT_BF16 ? &conv_bf16 : &conv_f32;
}

/* C (acc) = op(A) @ op(B) + beta C, A and B in the input dtype dt. */
static int gemm(DType dt, int ta, int tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                const void *B, int64_t ldb, int beta, void *C, int64_t ldc) {
    if (dt == DT_F64) return k_gemm_f64(ta, tb, M, N, K, 1.0, A, lda, B, ldb, beta, C, ldc);
    if (dt == DT_BF16) return k_gemm_bf16(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, (float)beta, C, ldc);
    return k_gemm_f32(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, (float)beta, C, ldc);
}

/* ---------------- geometry helpers ---------------- */

typedef struct {
    int64_t Cg, Og, K, P, HW; /* channels and filters per group, GEMM depth, output / input plane */
    int direct;               /* 1x1, stride 1, no padding: the image is the column matrix */
    int fold;                 /* the bias rides in the GEMM: a row of ones under col, a column b next to W */
    int64_t K1;               /* K + fold */
} ConvDims;

/* fold needs a column buffer (not direct) whose dtype is the accumulator's */
static ConvDims conv_dims(const KConv2d *g, const ConvType *t, int bias) {
    ConvDims d;
    d.Cg = g->C / g->groups, d.Og = g->O / g->groups;
    d.K = d.Cg * g->KH * g->KW, d.P = g->OH * g->OW, d.HW = g->H * g->W;
    d.direct = g->KH == 1 && g->KW == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0 &&
               g->OH == g->H && g->OW == g->W;
    d.fold = bias && !d.direct && t->isz == t->asz;
    d.K1 = d.K + d.fold;
    return d;
}

/* Spread images over threads? Only with several images and enough work. */
static int conv_threads(const KConv2d *g, const ConvDims *d) {
    int nt = omp_get_max_threads();
    if (nt <= 1 || g->N < 2 || omp_in_parallel()) return 1;
    if (g->N * g->O * d->P * d->K < (int64_t)KERNEL_PAR_MIN * 64) return 1;
    return nt < g->N ? nt : (int)g->N;
}

/* A (K1, P) column buffer of element size esz; the fold row is ones. */
static void *col_alloc(const ConvType *t, const ConvDims *d, size_t esz) {
    char *col = malloc((size_t)(d->K1 * d->P) * esz + 64);
    if (col && d->fold) k_fill(d->P, col + d->K * d->P * (int64_t)esz, t->adt, 1, 1.0);
    return col;
}

/* The column matrix of image-group xg: xg itself when direct, else col. */
static const void *columns(const ConvType *t, const KConv2d *g, const ConvDims *d, const void *xg, void *col) {
    if (d->direct) return xg;
    t->im2col(g, xg, col);
    return col;
}

/* ---------------- forward ---------------- */

/* w is (O, K1): with fold, each row ends with its bias */
static int fwd_image(DType dt, const KConv2d *g, const ConvDims *d, const char *x, const char *w, const char *b,
                     char *y, void *col) {
    const ConvType *t = conv_type(dt);
    const int fill = b && !d->fold;
    int rc = 0;
    for (int64_t gr = 0; gr < g->groups && rc == 0; gr++) {
        const void *B = columns(t, g, d, x + gr * d->Cg * d->HW * (int64_t)t->isz, col);
        char *yg = y + gr * d->Og * d->P * (int64_t)t->asz;
        if (fill) t->fill_rows(yg, d->Og, d->P, b + gr * d->Og * (int64_t)t->asz);
        rc = gemm(dt, 0, 0, d->Og, d->P, d->K1, w + gr * d->Og * d->K1 * (int64_t)t->isz, d->K1, B, d->P, fill, yg,
                  d->P);
    }
    return rc;
}

/* [W | b]: (O, K + 1), same element size */
static char *weight_with_bias(const ConvDims *d, int64_t O, const char *w, const char *b, size_t esz) {
    char *wb = malloc((size_t)(O * d->K1) * esz);
    for (int64_t o = 0; wb && o < O; o++) {
        memcpy(wb + o * d->K1 * (int64_t)esz, w + o * d->K * (int64_t)esz, (size_t)d->K * esz);
        memcpy(wb + (o * d->K1 + d->K) * (int64_t)esz, b + o * (int64_t)esz, esz);
    }
    return wb;
}

static int im2col_fwd(DType dt, const KConv2d *g, const void *x, const void *w, const void *b, void *y) {
    const ConvType *t = conv_type(dt);
    const ConvDims d = conv_dims(g, t, b != NULL);
    const int64_t xs = g->C * d.HW * (int64_t)t->isz, ys = g->O * d.P * (int64_t)t->asz;
    char *wb = d.fold ? weight_with_bias(&d, g->O, w, b, t->isz) : NULL;
    if (d.fold && !wb) return 1;
    int rc = 0, nt = conv_threads(g, &d);
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : rc)
    {
        void *col = d.direct ? NULL : col_alloc(t, &d, t->isz);
        if (!d.direct && !col) rc = 1;
        else {
#pragma omp for schedule(static)
            for (int64_t n = 0; n < g->N; n++)
                rc |= fwd_image(dt, g, &d, (const char *)x + n * xs, wb ? wb : w, b, (char *)y + n * ys, col);
        }
        free(col);
    }
    free(wb);
    return rc;
}

/* ---------------- gradient of the input ---------------- */

static int bwd_data_image(DType dt, const KConv2d *g, const ConvDims *d, const char *gy, const char *w, char *gx,
                          void *col) {
    const ConvType *t = conv_type(dt);
    int rc = 0;
    if (!d->direct) memset(gx, 0, (size_t)(g->C * d->HW) * t->asz);
    for (int64_t gr = 0; gr < g->groups && rc == 0; gr++) {
        const char *wg = w + gr * d->Og * d->K * (int64_t)t->isz;
        const char *gyg = gy + gr * d->Og * d->P * (int64_t)t->isz;
        char *gxg = gx + gr * d->Cg * d->HW * (int64_t)t->asz;
        rc = gemm(dt, 1, 0, d->K, d->P, d->Og, wg, d->K, gyg, d->P, 0, d->direct ? (void *)gxg : col, d->P);
        if (rc == 0 && !d->direct) t->col2im(g, col, gxg);
    }
    return rc;
}

static int im2col_bwd_data(DType dt, const KConv2d *g, const void *gy, const void *w, void *gx) {
    const ConvType *t = conv_type(dt);
    const ConvDims d = conv_dims(g, t, 0);
    const int64_t xs = g->C * d.HW * (int64_t)t->asz, ys = g->O * d.P * (int64_t)t->isz;
    int rc = 0, nt = conv_threads(g, &d);
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : rc)
    {
        void *col = d.direct ? NULL : col_alloc(t, &d, t->asz);
        if (!d.direct && !col) rc = 1;
        else {
#pragma omp for schedule(static)
            for (int64_t n = 0; n < g->N; n++)
                rc |= bwd_data_image(dt, g, &d, (const char *)gy + n * ys, w, (char *)gx + n * xs, col);
        }
        free(col);
    }
    return rc;
}

/* ---------------- gradient of the weight (and, folded, the bias) ---------------- */

/* gwb (O, K1) += (or = when first) the contributions of image n. */
static int bwd_weight_image(DType dt, const KConv2d *g, const ConvDims *d, const char *x, const char *gy, char *gwb,
                            int first, void *col) {
    const ConvType *t = conv_type(dt);
    int rc = 0;
    for (int64_t gr = 0; gr < g->groups && rc == 0; gr++) {
        const void *B = columns(t, g, d, x + gr * d->Cg * d->HW * (int64_t)t->isz, col);
        rc = gemm(dt, 0, 1, d->Og, d->K1, d->P, gy + gr * d->Og * d->P * (int64_t)t->isz, d->P, B, d->P, !first,
                  gwb + gr * d->Og * d->K1 * (int64_t)t->asz, d->K1);
    }
    return rc;
}

/* part[i] += add[i] over n accumulator elements. */
static void acc_add(DType adt, void *part, const void *add, int64_t n) {
    if (adt == DT_F64) k_binary_f64(KB_ADD, n, part, 1, add, 1, part, 1);
    else k_binary_f32(KB_ADD, n, part, 1, add, 1, part, 1);
}

/* [gw | gb] (O, K + 1) -> gw (O, K), gb (O) */
static void split_bias(const ConvDims *d, int64_t O, const char *gwb, char *gw, char *gb, size_t esz) {
    for (int64_t o = 0; o < O; o++) {
        memcpy(gw + o * d->K * (int64_t)esz, gwb + o * d->K1 * (int64_t)esz, (size_t)d->K * esz);
        memcpy(gb + o * (int64_t)esz, gwb + (o * d->K1 + d->K) * (int64_t)esz, esz);
    }
}

/* gw, and gb when folded (returns whether it did gb). Thread 0 accumulates
 * into gw itself unless folding, the others into parts added at the end. */
static int im2col_bwd_weight(DType dt, const KConv2d *g, const void *x, const void *gy, void *gw, void *gb, int *rc_out) {
    const ConvType *t = conv_type(dt);
    const ConvDims d = conv_dims(g, t, gb != NULL);
    const int64_t xs = g->C * d.HW * (int64_t)t->isz, ys = g->O * d.P * (int64_t)t->isz, wn = g->O * d.K1;
    char *gwb = d.fold ? malloc((size_t)wn * t->asz) : gw;
    int rc = !gwb, nt = conv_threads(g, &d);
    if (rc == 0 && g->N == 0) memset(gwb, 0, (size_t)wn * t->asz);
    if (rc == 0 && g->N > 0) {
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : rc)
        {
            const int me = omp_get_thread_num();
            void *col = d.direct ? NULL : col_alloc(t, &d, t->isz);
            void *part = me == 0 ? gwb : malloc((size_t)wn * t->asz);
            int first = 1;
            if ((!d.direct && !col) || !part) rc = 1;
            else {
#pragma omp for schedule(static)
                for (int64_t n = 0; n < g->N; n++) {
                    rc |= bwd_weight_image(dt, g, &d, (const char *)x + n * xs, (const char *)gy + n * ys, part,
                                           first, col);
                    first = 0;
                }
            }
            if (me == 0 && first) memset(gwb, 0, (size_t)wn * t->asz); /* got no image */
#pragma omp barrier
            if (me != 0 && part && !first) {
#pragma omp critical(conv_bwd_weight)
                acc_add(t->adt, gwb, part, wn);
            }
            if (me != 0) free(part);
            free(col);
        }
    }
    if (rc == 0 && d.fold) split_bias(&d, g->O, gwb, gw, gb, t->asz);
    if (d.fold) free(gwb);
    *rc_out = rc;
    return d.fold;
}

/* ---------------- gradient of the bias ---------------- */

static int im2col_bwd_bias(DType dt, const KConv2d *g, const void *gy, void *gb) {
    const ConvType *t = conv_type(dt);
    const int64_t P = g->OH * g->OW, ys = g->O * P * (int64_t)t->isz;
    void *ones = malloc((size_t)(P > 0 ? P : 1) * t->isz);
    if (!ones) return 1;
    k_fill(P, ones, dt, 1, 1.0);
    int rc = 0;
    if (g->N == 0 || P == 0) memset(gb, 0, (size_t)g->O * t->asz);
    for (int64_t n = 0; n < g->N && P > 0 && rc == 0; n++)
        rc = gemm(dt, 0, 0, g->O, 1, P, (const char *)gy + n * ys, P, ones, 1, n > 0, gb, 1);
    free(ones);
    return rc;
}

/* ---------------- entry points ---------------- */

static int use_dnnl = 1;

/* Where oneDNN's primitives beat im2col here (measured on the CNN shapes,
 * AVX2, one thread): not for 1x1 kernels that need no im2col (the reorders
 * to blocked layouts cost more than they save), not for few input channels
 * per group (a first layer: oneDNN pads them to 8), yes for depthwise. */
static int dnnl_suits(const KConv2d *g) {
    const int64_t Cg = g->C / g->groups;
    if (!use_dnnl || conv_dims(g, &conv_f32, 0).direct) return 0;
    if (Cg == 1 && g->groups > 1) return 1;
    return Cg >= 8;
}

int k_conv2d_use_dnnl(int on) {
    int prev = use_dnnl;
    use_dnnl = on;
    return prev;
}

int k_conv2d_fwd(DType dt, const KConv2d *g, const void *x, const void *w, const void *b, void *y) {
    if (dt == DT_F32 && dnnl_suits(g) && conv_dnnl_fwd(g, x, w, b, y) == 0) return 0;
    return im2col_fwd(dt, g, x, w, b, y);
}

int k_conv2d_bwd(DType dt, const KConv2d *g, const void *x, const void *w, const void *gy, void *gx, void *gw,
                 void *gb) {
    if (dt == DT_F32 && (gx || gw) && dnnl_suits(g) && conv_dnnl_bwd(g, x, w, gy, gx, gw, gw ? gb : NULL) == 0) {
        if (gb && !gw) return im2col_bwd_bias(dt, g, gy, gb);
        return 0;
    }
    int rc = 0, rw = 0, bias_done = 0;
    if (gx) rc |= im2col_bwd_data(dt, g, gy, w, gx);
    if (gw) bias_done = im2col_bwd_weight(dt, g, x, gy, gw, gb, &rw);
    if (gb && !bias_done) rc |= im2col_bwd_bias(dt, g, gy, gb);
    return rc | rw;
}
