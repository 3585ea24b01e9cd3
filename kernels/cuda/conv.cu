/* conv.cu: 2-D convolution, NCHW, as im2col + cuBLASLt GEMM (KConv2d as
 * k_conv2d_*). Per image n and group g (Cg = C / groups input channels,
 * Og = O / groups outputs, CK = Cg * KH * KW):
 *   col (CK, OH*OW) = im2col(x[n, group g])          (zeros in the padding)
 *   y[n, g] (Og, OH*OW) = w[g] (Og, CK) @ col, + b per output channel
 * backward, from gy:
 *   gb[o] = sum over n, oh, ow of gy;   gw[g] = sum_n gy[n, g] @ col^T
 *   colgrad = w[g]^T @ gy[n, g];        gx = col2im(colgrad) (atomic adds)
 * float32 only. The column buffer is a temporary from the caching
 * allocator on the current device and stream (freed at the end of the
 * call; the stream orders its reuse). */
#include "common.cuh"

__global__ void im2col_kernel(KConv2d g, const float *x, int64_t c0, float *col) {
    const int64_t ohw = g.OH * g.OW, kk = g.KH * g.KW, cg = g.C / g.groups;
    KC_GRID_STRIDE(e, cg * kk * ohw) {
        const int64_t r = e / ohw, p = e % ohw, c = r / kk, kh = (r % kk) / g.KW, kw = r % g.KW;
        const int64_t ih = (p / g.OW) * g.sh - g.ph + kh * g.dh, iw = (p % g.OW) * g.sw - g.pw + kw * g.dw;
        col[e] = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W ? x[((c0 + c) * g.H + ih) * g.W + iw] : 0.0f;
    }
}

__global__ void col2im_kernel(KConv2d g, const float *col, int64_t c0, float *gx) {
    const int64_t ohw = g.OH * g.OW, kk = g.KH * g.KW, cg = g.C / g.groups;
    KC_GRID_STRIDE(e, cg * kk * ohw) {
        const int64_t r = e / ohw, p = e % ohw, c = r / kk, kh = (r % kk) / g.KW, kw = r % g.KW;
        const int64_t ih = (p / g.OW) * g.sh - g.ph + kh * g.dh, iw = (p % g.OW) * g.sw - g.pw + kw * g.dw;
        if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) atomicAdd(gx + ((c0 + c) * g.H + ih) * g.W + iw, col[e]);
    }
}

/* y (N, O, OHW) += b[o] */
__global__ void add_bias_kernel(float *y, const float *b, int64_t O, int64_t ohw, int64_t total) {
    KC_GRID_STRIDE(e, total) y[e] += b[(e / ohw) % O];
}

/* gb[o] = sum of gy over n and the plane; one thread per o */
__global__ void bias_grad_kernel(const float *gy, int64_t N, int64_t O, int64_t ohw, float *gb) {
    KC_GRID_STRIDE(o, O) {
        float s = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t p = 0; p < ohw; p++) s += gy[(n * O + o) * ohw + p];
        gb[o] = s;
    }
}

typedef struct {
    KcGemmCtx *ctx;
    const KConv2d *g;
    int device;
    void *stream;
    float *col;
    int64_t ohw, ck, cg, og;
} Conv;

static int conv_begin(Conv *c, KcGemmCtx *ctx, DType dt, const KConv2d *g, void *stream) {
    if (dt != DT_F32) return cuda_fail("conv2d: dtype %d not supported on CUDA (float32)", (int)dt);
    *c = (Conv){ctx, g, 0, stream, NULL, g->OH * g->OW, g->C / g->groups * g->KH * g->KW, g->C / g->groups,
                g->O / g->groups};
    cuda_check(cudaGetDevice(&c->device));
    return kc_malloc(c->device, sizeof(float) * (size_t)(c->ck * c->ohw), stream, (void **)&c->col);
}

static int conv_end(Conv *c, int rc) {
    if (kc_free(c->device, c->col) && rc == 0) return -1;
    return rc;
}

static int im2col(Conv *c, const float *x, int64_t n, int64_t gi) {
    const KConv2d *g = c->g;
    im2col_kernel<<<kc_blocks(c->ck * c->ohw), KC_THREADS, 0, kc_stream(c->stream)>>>(*g, x + n * g->C * g->H * g->W,
                                                                                    gi * c->cg, c->col);
    cuda_check_launch();
    return 0;
}

static int conv_fwd_run(Conv *c, const float *x, const float *w, const float *b, float *y) {
    const KConv2d *g = c->g;
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t gi = 0; gi < g->groups; gi++) {
            if (im2col(c, x, n, gi)) return -1;
            if (kc_gemm(c->ctx, 0, 0, c->og, c->ohw, c->ck, 1.0f, w + gi * c->og * c->ck, c->ck, c->col, c->ohw, 0.0f,
                        y + (n * g->O + gi * c->og) * c->ohw, c->ohw, DT_F32, DT_F32, KC_EPI_NONE, NULL, c->stream))
                return -1;
        }
    if (!b) return 0;
    const int64_t total = g->N * g->O * c->ohw;
    add_bias_kernel<<<kc_blocks(total), KC_THREADS, 0, kc_stream(c->stream)>>>(y, b, g->O, c->ohw, total);
    cuda_check_launch();
    return 0;
}

extern "C" int kc_conv2d_fwd(KcGemmCtx *ctx, DType dt, const KConv2d *g, const void *x, const void *w, const void *b,
                             void *y, void *stream) {
    Conv c;
    if (conv_begin(&c, ctx, dt, g, stream)) return -1;
    return conv_end(&c, conv_fwd_run(&c, (const float *)x, (const float *)w, (const float *)b, (float *)y));
}

/* gw[g] (+)= gy[n, g] @ col^T; gx[n] += col2im(w[g]^T @ gy[n, g]) */
static int conv_bwd_image(Conv *c, int64_t n, int64_t gi, const float *x, const float *w, const float *gy, float *gx,
                          float *gw) {
    const KConv2d *g = c->g;
    const float *gyg = gy + (n * g->O + gi * c->og) * c->ohw;
    if (gw) {
        if (im2col(c, x, n, gi)) return -1;
        if (kc_gemm(c->ctx, 0, 1, c->og, c->ck, c->ohw, 1.0f, gyg, c->ohw, c->col, c->ohw, n ? 1.0f : 0.0f,
                    gw + gi * c->og * c->ck, c->ck, DT_F32, DT_F32, KC_EPI_NONE, NULL, c->stream))
            return -1;
    }
    if (!gx) return 0;
    if (kc_gemm(c->ctx, 1, 0, c->ck, c->ohw, c->og, 1.0f, w + gi * c->og * c->ck, c->ck, gyg, c->ohw, 0.0f, c->col,
                c->ohw, DT_F32, DT_F32, KC_EPI_NONE, NULL, c->stream))
        return -1;
    col2im_kernel<<<kc_blocks(c->ck * c->ohw), KC_THREADS, 0, kc_stream(c->stream)>>>(*g, c->col, gi * c->cg,
                                                                                    gx + n * g->C * g->H * g->W);
    cuda_check_launch();
    return 0;
}

static int conv_bwd_run(Conv *c, const float *x, const float *w, const float *gy, float *gx, float *gw, float *gb) {
    const KConv2d *g = c->g;
    cudaStream_t s = kc_stream(c->stream);
    if (gx) cuda_check(cudaMemsetAsync(gx, 0, sizeof(float) * (size_t)(g->N * g->C * g->H * g->W), s));
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t gi = 0; gi < g->groups; gi++)
            if (conv_bwd_image(c, n, gi, x, w, gy, gx, gw)) return -1;
    if (!gb) return 0;
    bias_grad_kernel<<<kc_blocks(g->O), KC_THREADS, 0, s>>>(gy, g->N, g->O, c->ohw, gb);
    cuda_check_launch();
    return 0;
}

extern "C" int kc_conv2d_bwd(KcGemmCtx *ctx, DType dt, const KConv2d *g, const void *x, const void *w, const void *gy,
                             void *gx, void *gw, void *gb, void *stream) {
    Conv c;
    if (conv_begin(&c, ctx, dt, g, stream)) return -1;
    return conv_end(&c, conv_bwd_run(&c, (const float *)x, (const float *)w, (const float *)gy, (float *)gx,
                                     (float *)gw, (float *)gb));
}
