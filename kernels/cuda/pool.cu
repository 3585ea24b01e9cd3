/* pool.cu: 2-D max pooling over (planes, H, W), the CPU's semantics
 * (kernels/cpu/pool.c): one thread per output element; ties keep the first
 * maximum in window order, NaN wins (the last NaN seen), padding never
 * wins; idx (int64, h*W + w in the plane) and code (uint8, kh*KW + kw in
 * the window) are written when not NULL. Backward: gx = 0, then atomic adds
 * of gy at the recorded positions (idx, else code). float32 and float64. */
#include "common.cuh"

template <typename T>
__global__ void max_pool_fwd(KPool2d g, const T *x, T *y, int64_t *idx, uint8_t *code) {
    const int64_t ohw = g.OH * g.OW;
    KC_GRID_STRIDE(e, g.NC * ohw) {
        const int64_t pl = e / ohw, oh = (e % ohw) / g.OW, ow = e % g.OW;
        const T *xp = x + pl * g.H * g.W;
        T best = -(T)INFINITY;
        int64_t at = -1, c = 0;
        for (int64_t kh = 0; kh < g.KH; kh++) {
            const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
            if (ih < 0 || ih >= g.H) continue;
            for (int64_t kw = 0; kw < g.KW; kw++) {
                const int64_t iw = ow * g.sw - g.pw + kw * g.dw;
                if (iw < 0 || iw >= g.W) continue;
                const T v = xp[ih * g.W + iw];
                if (at < 0 || v > best || v != v) best = v, at = ih * g.W + iw, c = kh * g.KW + kw;
            }
        }
        y[e] = best;
        if (idx) idx[e] = at < 0 ? 0 : at;
        if (code) code[e] = (uint8_t)c;
    }
}

template <typename T>
__global__ void max_pool_bwd(KPool2d g, const T *gy, const int64_t *idx, const uint8_t *code, T *gx) {
    const int64_t ohw = g.OH * g.OW;
    KC_GRID_STRIDE(e, g.NC * ohw) {
        const int64_t pl = e / ohw, oh = (e % ohw) / g.OW, ow = e % g.OW;
        const int64_t c = idx ? 0 : code[e];
        const int64_t at = idx ? idx[e]
                               : (oh * g.sh - g.ph + c / g.KW * g.dh) * g.W + ow * g.sw - g.pw + c % g.KW * g.dw;
        atomicAdd(gx + pl * g.H * g.W + at, gy[e]);
    }
}

extern "C" int kc_max_pool2d_fwd(DType dt, const KPool2d *g, const void *x, void *y, int64_t *idx, uint8_t *code,
                                 void *stream) {
    const int64_t n = g->NC * g->OH * g->OW;
    if (n == 0) return 0;
    cudaStream_t s = kc_stream(stream);
    if (dt == DT_F32) max_pool_fwd<float><<<kc_blocks(n), KC_THREADS, 0, s>>>(*g, (const float *)x, (float *)y, idx, code);
    else if (dt == DT_F64) max_pool_fwd<double><<<kc_blocks(n), KC_THREADS, 0, s>>>(*g, (const double *)x, (double *)y, idx, code);
    else return cuda_fail("max_pool2d: dtype %d not supported (float32, float64)", (int)dt);
    cuda_check_launch();
    return 0;
}

extern "C" int kc_max_pool2d_bwd(DType dt, const KPool2d *g, const void *gy, const int64_t *idx, const uint8_t *code,
                                 void *gx, void *stream) {
    if (dt != DT_F32 && dt != DT_F64) return cuda_fail("max_pool2d backward: dtype %d not supported", (int)dt);
    cudaStream_t s = kc_stream(stream);
    cuda_check(cudaMemsetAsync(gx, 0, (size_t)(g->NC * g->H * g->W) * dtype_size(dt), s));
    const int64_t n = g->NC * g->OH * g->OW;
    if (n == 0) return 0;
    if (dt == DT_F32) max_pool_bwd<float><<<kc_blocks(n), KC_THREADS, 0, s>>>(*g, (const float *)gy, idx, code, (float *)gx);
    else max_pool_bwd<double><<<kc_blocks(n), KC_THREADS, 0, s>>>(*g, (const double *)gy, idx, code, (double *)gx);
    cuda_check_launch();
    return 0;
}
