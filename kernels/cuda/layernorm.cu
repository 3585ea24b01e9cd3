/* layernorm.cu: layer norm over the last dim C of contiguous rows, forward
 * (y = (x - mean) rstd w + b, mean and rstd saved) and backward (gx
 * overwritten; gw, gb accumulated: gw += sum over rows of gy xhat, gb +=
 * sum of gy). Statistics and the gw / gb sums are float32, float64 for
 * float64 inputs. One block per row, two-pass statistics (mean, then the
 * centred sum of squares, as the CPU), arithmetic in float32 (double for
 * float64). The gw / gb sums run in a fixed order, without atomics, so a
 * backward gives the same bits every time (a resumed or recomputed step
 * equals the first): each LNP_CHUNK rows of 32 columns make one partial
 * (LNP_ROWS thread rows, combined in order), then one thread per column
 * adds its partials in chunk order. */
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

/* xhat = (x - mean) rstd, g = gy w:  gx = rstd (g - mean(g) - xhat mean(g xhat)). */
template <typename T>
__global__ void ln_bwd(const void *x, const void *w, const T *mean, const T *rstd, const void *gy, DType dt,
                       int64_t C, void *gx) {
    const int64_t row = blockIdx.x, base = row * C;
    const T mu = mean[row], r = rstd[row];
    T s1 = 0, s2 = 0;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
        const T xh = (kc_load<T>(x, dt, base + j) - mu) * r, gyj = kc_load<T>(gy, dt, base + j);
        const T g = w ? gyj * kc_load<T>(w, dt, j) : gyj;
        s1 += g, s2 += g * xh;
    }
    const T m1 = ln_sum(s1) / (T)C, m2 = ln_sum(s2) / (T)C;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
        const T xh = (kc_load<T>(x, dt, base + j) - mu) * r, gyj = kc_load<T>(gy, dt, base + j);
        const T g = w ? gyj * kc_load<T>(w, dt, j) : gyj;
        kc_store(gx, dt, base + j, r * (g - m1 - xh * m2));
    }
}

#define LNP_ROWS 16  /* thread rows of a partial-sum block */
#define LNP_CHUNK 64 /* rows per partial */

/* part_w / part_b (chunks, C): the sums of gy xhat and gy over chunk c's
 * rows, for the 32 columns of block x. */
template <typename T>
__global__ void ln_param_partial(const void *x, const T *mean, const T *rstd, const void *gy, DType dt, int64_t rows,
                                 int64_t C, T *part_w, T *part_b) {
    __shared__ T sw[LNP_ROWS][32], sb[LNP_ROWS][32];
    const int64_t j = (int64_t)blockIdx.x * 32 + threadIdx.x, c = blockIdx.y;
    const int64_t end = (c + 1) * LNP_CHUNK < rows ? (c + 1) * LNP_CHUNK : rows;
    T pw = 0, pb = 0;
    for (int64_t r = c * LNP_CHUNK + threadIdx.y; j < C && r < end; r += LNP_ROWS) {
        const T gyj = kc_load<T>(gy, dt, r * C + j);
        pw += gyj * ((kc_load<T>(x, dt, r * C + j) - mean[r]) * rstd[r]), pb += gyj;
    }
    sw[threadIdx.y][threadIdx.x] = pw, sb[threadIdx.y][threadIdx.x] = pb;
    __syncthreads();
    if (threadIdx.y != 0 || j >= C) return;
    for (int k = 1; k < LNP_ROWS; k++) pw += sw[k][threadIdx.x], pb += sb[k][threadIdx.x];
    part_w[c * C + j] = pw, part_b[c * C + j] = pb;
}

/* gw[j] += sum over chunks of part_w[., j] (in chunk order); gb likewise. */
template <typename T>
__global__ void ln_param_final(const T *part_w, const T *part_b, int64_t chunks, int64_t C, T *gw, T *gb) {
    KC_GRID_STRIDE(j, C) {
        T sw = 0, sb = 0;
        for (int64_t c = 0; c < chunks; c++) sw += part_w[c * C + j], sb += part_b[c * C + j];
        if (gw) gw[j] += sw;
        if (gb) gb[j] += sb;
    }
}

template <typename T>
static int ln_param_grads(const void *x, const T *mean, const T *rstd, const void *gy, DType dt, int64_t rows,
                          int64_t C, T *gw, T *gb, cudaStream_t s) {
    const int64_t chunks = (rows + LNP_CHUNK - 1) / LNP_CHUNK;
    if (chunks > 65535) return cuda_fail("layer_norm backward: %lld rows exceed one launch", (long long)rows);
    int dev = 0;
    T *part = NULL;
    cuda_check(cudaGetDevice(&dev));
    if (kc_malloc(dev, sizeof(T) * (size_t)(2 * chunks * C), s, (void **)&part)) return -1;
    ln_param_partial<T><<<dim3((unsigned)((C + 31) / 32), (unsigned)chunks), dim3(32, LNP_ROWS), 0, s>>>(
        x, mean, rstd, gy, dt, rows, C, part, part + chunks * C);
    ln_param_final<T><<<kc_blocks(C), KC_THREADS, 0, s>>>(part, part + chunks * C, chunks, C, gw, gb);
    const cudaError_t launched = cudaGetLastError();
    if (kc_free(dev, part)) return -1;
    cuda_check(launched);
    return 0;
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
                                                              gx);
    else
        ln_bwd<float><<<(unsigned)rows, LN_THREADS, 0, s>>>(x, w, (const float *)mean, (const float *)rstd, gy, dt, C, gx);
    cuda_check_launch();
    if (!gw && !gb) return 0;
    if (dt == DT_F64)
        return ln_param_grads<double>(x, (const double *)mean, (const double *)rstd, gy, dt, rows, C, (double *)gw,
                                      (double *)gb, s);
    return ln_param_grads<float>(x, (const float *)mean, (const float *)rstd, gy, dt, rows, C, (float *)gw,
                                 (float *)gb, s);
}
