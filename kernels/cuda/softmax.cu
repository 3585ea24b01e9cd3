/* softmax.cu: softmax / log-softmax forward and backward over the middle
 * dim of a contiguous (outer, n, inner) view, and the fused cross-entropy
 * forward and backward over (N, C) logits (C up to GPT-2's 50 257 and
 * beyond). inner > 1: one thread per column, three passes (max, sum,
 * write). inner == 1 (the last dim, the common case): one block per row; the row
 * max and sum of exponentials come from one online pass (running max m and
 * sum s rescaled when m grows, merged across threads the same way), then
 * one pass writes (x - max) - log(sum), or e^(x - max) / sum, as the CPU:
 * subtracting a rounded log-sum-exp instead would lose the digits of large
 * logits. Statistics in float32 (double for float64 inputs). */
#include "common.cuh"

#define ROW_THREADS 512

template <typename T> struct MaxSum {
    T m, s;
};

template <typename T> __device__ MaxSum<T> ms_merge(MaxSum<T> a, MaxSum<T> b) {
    if (b.m == (T)-INFINITY) return a;
    if (a.m == (T)-INFINITY) return b;
    const T m = a.m > b.m ? a.m : b.m;
    return {m, a.s * exp(a.m - m) + b.s * exp(b.m - m)};
}

/* The row's (max, sum exp(x - max)) for every thread of the block. */
template <typename T> __device__ MaxSum<T> row_max_sum(const void *x, DType dt, int64_t base, int64_t n) {
    __shared__ T sm[32], ss[32];
    MaxSum<T> a = {(T)-INFINITY, (T)0};
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) a = ms_merge(a, MaxSum<T>{kc_load<T>(x, dt, base + j), (T)1});
    for (int o = 16; o > 0; o >>= 1)
        a = ms_merge(a, MaxSum<T>{__shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o)});
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sm[threadIdx.x >> 5] = a.m, ss[threadIdx.x >> 5] = a.s;
    __syncthreads();
    MaxSum<T> r = {(T)-INFINITY, (T)0};
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) r = ms_merge(r, MaxSum<T>{sm[w], ss[w]});
    return r;
}

template <typename T> __device__ T row_sum(T v) {
    __shared__ T scratch[32];
    return kc_block_reduce<T, KcSum<T>>(v, scratch, (T)0);
}

template <typename T> __global__ void softmax_fwd(int log_, const void *x, DType dt, int64_t n, void *y) {
    const int64_t base = (int64_t)blockIdx.x * n;
    const MaxSum<T> r = row_max_sum<T>(x, dt, base, n);
    const T ls = log(r.s);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const T v = kc_load<T>(x, dt, base + j) - r.m; /* exact near the max: large logits keep their digits */
        kc_store(y, dt, base + j, log_ ? v - ls : exp(v) / r.s);
    }
}

/* softmax: gx = y (gy - sum gy y); log_softmax: gx = gy - exp(y) sum gy */
template <typename T> __global__ void softmax_bwd(int log_, const void *y, const void *gy, DType dt, int64_t n, void *gx) {
    const int64_t base = (int64_t)blockIdx.x * n;
    T part = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        part += log_ ? kc_load<T>(gy, dt, base + j) : kc_load<T>(gy, dt, base + j) * kc_load<T>(y, dt, base + j);
    const T s = row_sum(part);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const T yj = kc_load<T>(y, dt, base + j), gj = kc_load<T>(gy, dt, base + j);
        kc_store(gx, dt, base + j, log_ ? gj - exp(yj) * s : yj * (gj - s));
    }
}

/* inner > 1: one thread per (outer, inner) column, three passes over n */
template <typename T>
__global__ void softmax_fwd_cols(int log_, const void *x, DType dt, int64_t outer, int64_t n, int64_t inner, void *y) {
    KC_GRID_STRIDE(e, outer * inner) {
        const int64_t base = (e / inner) * n * inner + e % inner;
        T m = -INFINITY, s = 0;
        for (int64_t j = 0; j < n; j++) {
            const T v = kc_load<T>(x, dt, base + j * inner);
            m = v > m || v != v ? v : m;
        }
        for (int64_t j = 0; j < n; j++) s += exp(kc_load<T>(x, dt, base + j * inner) - m);
        const T ls = log(s);
        for (int64_t j = 0; j < n; j++) {
            const T v = kc_load<T>(x, dt, base + j * inner) - m;
            kc_store(y, dt, base + j * inner, log_ ? v - ls : exp(v) / s);
        }
    }
}

template <typename T>
__global__ void softmax_bwd_cols(int log_, const void *y, const void *gy, DType dt, int64_t outer, int64_t n,
                                 int64_t inner, void *gx) {
    KC_GRID_STRIDE(e, outer * inner) {
        const int64_t base = (e / inner) * n * inner + e % inner;
        T s = 0;
        for (int64_t j = 0; j < n; j++) {
            const T g = kc_load<T>(gy, dt, base + j * inner);
            s += log_ ? g : g * kc_load<T>(y, dt, base + j * inner);
        }
        for (int64_t j = 0; j < n; j++) {
            const T yj = kc_load<T>(y, dt, base + j * inner), gj = kc_load<T>(gy, dt, base + j * inner);
            kc_store(gx, dt, base + j * inner, log_ ? gj - exp(yj) * s : yj * (gj - s));
        }
    }
}

static int rows_ok(int64_t rows) {
    if (rows > INT32_MAX) return cuda_fail("softmax: %lld rows exceed one launch", (long long)rows);
    return 0;
}

extern "C" int kc_softmax(int log_, const void *x, DType dt, int64_t outer, int64_t n, int64_t inner, void *y,
                          void *stream) {
    if (outer * inner == 0 || n == 0) return 0;
    cudaStream_t s = kc_stream(stream);
    const int f64 = dt == DT_F64;
    if (inner > 1 && f64) softmax_fwd_cols<double><<<kc_blocks(outer * inner), KC_THREADS, 0, s>>>(log_, x, dt, outer, n, inner, y);
    else if (inner > 1) softmax_fwd_cols<float><<<kc_blocks(outer * inner), KC_THREADS, 0, s>>>(log_, x, dt, outer, n, inner, y);
    else if (rows_ok(outer)) return -1;
    else if (f64) softmax_fwd<double><<<(unsigned)outer, ROW_THREADS, 0, s>>>(log_, x, dt, n, y);
    else softmax_fwd<float><<<(unsigned)outer, ROW_THREADS, 0, s>>>(log_, x, dt, n, y);
    cuda_check_launch();
    return 0;
}

extern "C" int kc_softmax_backward(int log_, const void *y, const void *gy, DType dt, int64_t outer, int64_t n,
                                   int64_t inner, void *gx, void *stream) {
    if (outer * inner == 0 || n == 0) return 0;
    cudaStream_t s = kc_stream(stream);
    const int f64 = dt == DT_F64;
    const unsigned cb = kc_blocks(outer * inner);
    if (inner > 1 && f64) softmax_bwd_cols<double><<<cb, KC_THREADS, 0, s>>>(log_, y, gy, dt, outer, n, inner, gx);
    else if (inner > 1) softmax_bwd_cols<float><<<cb, KC_THREADS, 0, s>>>(log_, y, gy, dt, outer, n, inner, gx);
    else if (rows_ok(outer)) return -1;
    else if (f64) softmax_bwd<double><<<(unsigned)outer, ROW_THREADS, 0, s>>>(log_, y, gy, dt, n, gx);
    else softmax_bwd<float><<<(unsigned)outer, ROW_THREADS, 0, s>>>(log_, y, gy, dt, n, gx);
    cuda_check_launch();
    return 0;
}

/* ---- cross-entropy: loss_i = (1-ls)(lse_i - x_i[t_i]) + ls (lse_i - mean_c x_ic) ---- */

__device__ void note_bad_row(int64_t *bad, int64_t row) {
    unsigned long long *p = (unsigned long long *)bad, cur = *p;
    while ((long long)cur == -1 || (long long)cur > row) {
        const unsigned long long prev = atomicCAS(p, cur, (unsigned long long)row);
        if (prev == cur) break;
        cur = prev;
    }
}

__global__ void ce_fwd(const void *x, DType dt, int64_t C, const int64_t *target, int64_t ignore, float ls, float *loss,
                       float *lse, int64_t *bad) {
    const int64_t row = blockIdx.x, base = row * C, t = target[row];
    const MaxSum<float> r = row_max_sum<float>(x, dt, base, C);
    float part = 0;
    if (ls != 0.0f)
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) part += kc_load<float>(x, dt, base + j);
    const float sum = row_sum(part);
    if (threadIdx.x != 0) return;
    const float l = r.m + logf(r.s);
    lse[row] = l;
    if (t == ignore) {
        loss[row] = 0.0f;
        return;
    }
    if (t < 0 || t >= C) {
        note_bad_row(bad, row);
        return;
    }
    loss[row] = (1.0f - ls) * (l - kc_load<float>(x, dt, base + t)) + ls * (l - sum / (float)C);
}

__global__ void ce_bwd(const void *x, DType dt, const float *lse, int64_t C, const int64_t *target, int64_t ignore,
                       float ls, const float *g, void *gx) {
    const int64_t row = blockIdx.x, base = row * C, t = target[row];
    const float gi = g[row], l = lse[row], smooth = ls / (float)C;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
        const float p = expf(kc_load<float>(x, dt, base + j) - l);
        kc_store(gx, dt, base + j, t == ignore ? 0.0f : gi * (p - (j == t ? 1.0f - ls : 0.0f) - smooth)); /* ignored rows: 0 */
    }
}

extern "C" int kc_cross_entropy_fwd(const void *x, DType dt, int64_t N, int64_t C, const int64_t *target,
                                    int64_t ignore_index, double label_smoothing, float *loss, float *lse, int64_t *bad,
                                    void *stream) {
    if (N == 0) return 0;
    if (rows_ok(N)) return -1;
    ce_fwd<<<(unsigned)N, ROW_THREADS, 0, kc_stream(stream)>>>(x, dt, C, target, ignore_index, (float)label_smoothing,
                                                              loss, lse, bad);
    cuda_check_launch();
    return 0;
}

extern "C" int kc_cross_entropy_bwd(const void *x, DType dt, const float *lse, int64_t N, int64_t C,
                                    const int64_t *target, int64_t ignore_index, double label_smoothing, const float *g,
                                    void *gx, void *stream) {
    if (N == 0) return 0;
    if (rows_ok(N)) return -1;
    ce_bwd<<<(unsigned)N, ROW_THREADS, 0, kc_stream(stream)>>>(x, dt, lse, C, target, ignore_index,
                                                              (float)label_smoothing, g, gx);
    cuda_check_launch();
    return 0;
}
