/* layernorm.cu: layer norm over the last dim C of contiguous rows, forward
 * (y = (x - mean) rstd w + b, mean and rstd saved) and backward (gx
 * overwritten; gw, gb accumulated with atomic adds). Statistics and the
 * gw / gb sums are float32, float64 for float64 inputs. One block
 * per row, two-pass statistics (mean, then the centred sum of squares, as
 * the CPU), arithmetic in float32 (double for float64). */
#include "common.cuh"

#define LN_THREADS 256

template <typename T> __device__ T ln_sum(T v) {
    __shared__ T scratch[32];
    return kc_block_reduce<T, KcSum<T>>(v, scratch, (T)0);
}

template <typename T>
__global__ void ln_fwd(const void *x, const void *w, const void *b, DType dt, int64_t C, T eps, void *y, T *mean,
                       T *rstd) {
    const int64_t base = (int64_t)blockIdx.x * C;
    T s = 0;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) s += kc_load<T>(x, dt, base + j);
    const T mu = ln_sum(s) / (T)C;
    T q = 0;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
        const T d = kc_load<T>(x, dt, base + j) - mu;
        q += d * d;
    }
    const T r = (T)1 / sqrt(ln_sum(q) / (T)C + eps);
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
        T v = (kc_load<T>(x, dt, base + j) - mu) * r;
        if (w) v *= kc_load<T>(w, dt, j);
        if (b) v += kc_load<T>(b, dt, j);
        kc_store(y, dt, base + j, v);
    }
    if (threadIdx.x == 0) mean[blockIdx.x] = mu, rstd[blockIdx.x] = r;
}

/* xhat = (x - mean) rstd, g = gy w:  gx = rstd (g - mean(g) - xhat mean(g xhat));
 * gw += gy xhat, gb += gy. */
template <typename T>
__global__ void ln_bwd(const void *x, const void *w, const T *mean, const T *rstd, const void *gy, DType dt,
                       int64_t C, void *gx, T *gw, T *gb) {
    const int64_t row = blockIdx.x, base = row * C;
    const T mu = mean[row], r = rstd[row];
    T s1 = 0, s2 = 0;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
        const T xh = (kc_load<T>(x, dt, base + j) - mu) * r, gyj = kc_load<T>(gy, dt, base + j);
        const T g = w ? gyj * kc_load<T>(w, dt, j) : gyj;
        s1 += g, s2 += g * xh;
        if (gw) atomicAdd(gw + j, gyj * xh);
        if (gb) atomicAdd(gb + j, gyj);
    }
    const T m1 = ln_sum(s1) / (T)C, m2 = ln_sum(s2) / (T)C;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
        const T xh = (kc_load<T>(x, dt, base + j) - mu) * r, gyj = kc_load<T>(gy, dt, base + j);
        const T g = w ? gyj * kc_load<T>(w, dt, j) : gyj;
        kc_store(gx, dt, base + j, r * (g - m1 - xh * m2));
    }
}

static int ln_rows_ok(int64_t rows) {
    if (rows > INT32_MAX) return cuda_fail("layer_norm: %lld rows exceed one launch", (long long)rows);
    return 0;
}

extern "C" int kc_layernorm_fwd(const void *x, const void *w, const void *b, DType dt, int64_t rows, int64_t C,
                                double eps, void *y, void *mean, void *rstd, void *stream) {
    if (rows == 0) return 0;
    if (ln_rows_ok(rows)) return -1;
    cudaStream_t s = kc_stream(stream);
    if (dt == DT_F64)
        ln_fwd<double><<<(unsigned)rows, LN_THREADS, 0, s>>>(x, w, b, dt, C, eps, y, (double *)mean, (double *)rstd);
    else ln_fwd<float><<<(unsigned)rows, LN_THREADS, 0, s>>>(x, w, b, dt, C, (float)eps, y, (float *)mean, (float *)rstd);
    cuda_check_launch();
    return 0;
}

extern "C" int kc_layernorm_bwd(const void *x, const void *w, const void *mean, const void *rstd, const void *gy,
                                DType dt, int64_t rows, int64_t C, void *gx, void *gw, void *gb, void *stream) {
    if (rows == 0) return 0;
    if (ln_rows_ok(rows)) return -1;
    cudaStream_t s = kc_stream(stream);
    if (dt == DT_F64)
        ln_bwd<double><<<(unsigned)rows, LN_THREADS, 0, s>>>(x, w, (const double *)mean, (const double *)rstd, gy, dt, C,
                                                              gx, (double *)gw, (double *)gb);
    else
        ln_bwd<float><<<(unsigned)rows, LN_THREADS, 0, s>>>(x, w, (const float *)mean, (const float *)rstd, gy, dt, C, gx,
                                                             (float *)gw, (float *)gb);
    cuda_check_launch();
    return 0;
}
