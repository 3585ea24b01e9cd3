/* reduce.cu: sum / mean / prod / max / min and arg-max / arg-min over the
 * middle dim of a contiguous (outer, n, inner) view. inner == 1: one block
 * per output row, a tree over the row; inner > 1 with many outputs: one
 * thread per output element walking n (reads coalesce over inner); with
 * few outputs (a bias gradient: (1, tokens, width)) a block per 32 columns
 * whose RC_ROWS thread rows split n, so the walk is RC_ROWS times shorter. Accumulation: float32 for
 * bf16 / fp16, double for float32 (as the CPU's k_reduce_f32) and float64,
 * int64 for integers. max /
 * min and the arg forms propagate NaN (the first NaN wins), ties take the
 * first index, as the CPU. */
#include "common.cuh"

template <typename T> struct Acc {
    KRedOp op;
    __device__ T ident() const {
        return op == KR_PROD ? (T)1 : op == KR_MAX ? lowest() : op == KR_MIN ? highest() : (T)0;
    }
    __device__ static T lowest() { return (T)-INFINITY; }
    __device__ static T highest() { return (T)INFINITY; }
    __device__ T combine(T a, T b) const {
        switch (op) {
        case KR_PROD: return a * b;
        case KR_MAX: return a != a || a > b ? a : b;
        case KR_MIN: return a != a || a < b ? a : b;
        default: return a + b;
        }
    }
};
template <> __device__ int64_t Acc<int64_t>::lowest() { return INT64_MIN; }
template <> __device__ int64_t Acc<int64_t>::highest() { return INT64_MAX; }

template <typename T> __device__ T shfl(T v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }

template <typename T> __device__ T block_combine(const Acc<T> &acc, T v, T *scratch) {
    for (int o = 16; o > 0; o >>= 1) v = acc.combine(v, shfl(v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    const int nw = blockDim.x >> 5;
    v = (int)threadIdx.x < nw ? scratch[threadIdx.x] : acc.ident();
    for (int o = 16; o > 0; o >>= 1) v = acc.combine(v, shfl(v, o));
    return v;
}

template <typename T>
__global__ void reduce_rows(KRedOp op, const void *x, DType dt, int64_t n, void *out, DType odt) {
    __shared__ T scratch[32];
    const Acc<T> acc{op};
    const int64_t row = blockIdx.x;
    T v = acc.ident();
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) v = acc.combine(v, kc_load<T>(x, dt, row * n + j));
    v = block_combine(acc, v, scratch);
    if (threadIdx.x == 0) kc_store(out, odt, row, op == KR_MEAN ? (T)(v / (T)n) : v);
}

template <typename T>
__global__ void reduce_cols(KRedOp op, const void *x, DType dt, int64_t outer, int64_t n, int64_t inner, void *out,
                            DType odt) {
    const Acc<T> acc{op};
    KC_GRID_STRIDE(e, outer * inner) {
        const int64_t o = e / inner, i = e % inner;
        T v = acc.ident();
        for (int64_t j = 0; j < n; j++) v = acc.combine(v, kc_load<T>(x, dt, (o * n + j) * inner + i));
        kc_store(out, odt, e, op == KR_MEAN ? (T)(v / (T)n) : v);
    }
}

#define RC_ROWS 16

/* out[o, i] over rows j of 32 columns i of one o: thread (c, r) combines rows
 * r, r + RC_ROWS, ... of column c, then row 0 combines the RC_ROWS partials. */
template <typename T>
__global__ void reduce_cols_tiled(KRedOp op, const void *x, DType dt, int64_t n, int64_t inner, void *out, DType odt) {
    __shared__ T part[RC_ROWS][32];
    const Acc<T> acc{op};
    const int64_t o = blockIdx.y, i = (int64_t)blockIdx.x * 32 + threadIdx.x;
    T v = acc.ident();
    if (i < inner)
        for (int64_t j = threadIdx.y; j < n; j += RC_ROWS) v = acc.combine(v, kc_load<T>(x, dt, (o * n + j) * inner + i));
    part[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.y != 0 || i >= inner) return;
    for (int r = 1; r < RC_ROWS; r++) v = acc.combine(v, part[r][threadIdx.x]);
    kc_store(out, odt, o * inner + i, op == KR_MEAN ? (T)(v / (T)n) : v);
}

template <typename T>
static void launch_reduce(KRedOp op, const void *x, DType dt, int64_t outer, int64_t n, int64_t inner, void *out,
                          DType odt, cudaStream_t s) {
    if (inner == 1 && outer <= INT32_MAX)
        reduce_rows<T><<<(unsigned)outer, KC_THREADS, 0, s>>>(op, x, dt, n, out, odt);
    else if (outer * inner < 65536 && n >= 4 * RC_ROWS)
        reduce_cols_tiled<T><<<dim3((unsigned)((inner + 31) / 32), (unsigned)outer), dim3(32, RC_ROWS), 0, s>>>(
            op, x, dt, n, inner, out, odt);
    else
        reduce_cols<T><<<kc_blocks(outer * inner), KC_THREADS, 0, s>>>(op, x, dt, outer, n, inner, out, odt);
}

extern "C" int kc_reduce(KRedOp op, const void *x, DType dt, int64_t outer, int64_t n, int64_t inner, void *out,
                         void *stream) {
    if (outer * inner == 0) return 0;
    cudaStream_t s = kc_stream(stream);
    if (dt == DT_F64 || dt == DT_F32) launch_reduce<double>(op, x, dt, outer, n, inner, out, dt, s); /* as the CPU */
    else if (dtype_is_float(dt)) launch_reduce<float>(op, x, dt, outer, n, inner, out, dt, s);
    else launch_reduce<int64_t>(op, x, dt, outer, n, inner, out, op == KR_SUM || op == KR_PROD ? DT_I64 : dt, s);
    cuda_check_launch();
    return 0;
}

/* ---- arg reductions: (value, index) pairs; a better value, or an equal one
 * at a lower index, wins; NaN beats everything ---- */

template <typename T> __device__ bool arg_better(int want_max, T a, int64_t ia, T b, int64_t ib) {
    const bool an = a != a, bn = b != b;
    if (an || bn) return an && (!bn || ia < ib);
    if (a == b) return ia < ib;
    return want_max ? a > b : a < b;
}

template <typename T>
__global__ void argreduce_kernel(int want_max, const void *x, DType dt, int64_t outer, int64_t n, int64_t inner,
                                 void *vals, int64_t *idx) {
    __shared__ T sv[KC_THREADS];
    __shared__ int64_t si[KC_THREADS];
    const int64_t e = blockIdx.x, o = e / inner, i = e % inner;
    T best = kc_load<T>(x, dt, o * n * inner + i);
    int64_t bi = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const T v = kc_load<T>(x, dt, (o * n + j) * inner + i);
        if (arg_better(want_max, v, j, best, bi)) best = v, bi = j;
    }
    sv[threadIdx.x] = best, si[threadIdx.x] = bi;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w && arg_better(want_max, sv[threadIdx.x + w], si[threadIdx.x + w], sv[threadIdx.x], si[threadIdx.x]))
            sv[threadIdx.x] = sv[threadIdx.x + w], si[threadIdx.x] = si[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (vals) kc_store(vals, dt, e, sv[0]);
        idx[e] = si[0];
    }
}

extern "C" int kc_argreduce(int want_max, const void *x, DType dt, int64_t outer, int64_t n, int64_t inner, void *vals,
                            int64_t *idx, void *stream) {
    const int64_t outs = outer * inner;
    if (outs == 0) return 0;
    if (n <= 0) return cuda_fail("argreduce: empty dim");
    if (outs > INT32_MAX) return cuda_fail("argreduce: %lld outputs exceed one launch", (long long)outs);
    cudaStream_t s = kc_stream(stream);
    if (dt == DT_F64)
        argreduce_kernel<double><<<(unsigned)outs, KC_THREADS, 0, s>>>(want_max, x, dt, outer, n, inner, vals, idx);
    else if (dtype_is_float(dt))
        argreduce_kernel<float><<<(unsigned)outs, KC_THREADS, 0, s>>>(want_max, x, dt, outer, n, inner, vals, idx);
    else
        argreduce_kernel<int64_t><<<(unsigned)outs, KC_THREADS, 0, s>>>(want_max, x, dt, outer, n, inner, vals, idx);
    cuda_check_launch();
    return 0;
}

/* ---- sum |x|^p for gradient-norm clipping (k_norm_pow_*): double
 * partials per block, combined with atomics into *out (device double);
 * p = INFINITY: max |x|, p = -INFINITY: min |x| (NaN sticks), p = 0: the
 * count of nonzeros ---- */

__device__ double norm_term(double a, double p) {
    return p == 0 ? (double)(a != 0) : p == 1 || isinf(p) ? a : p == 2 ? a * a : pow(a, p);
}

__device__ double norm_combine(double s, double v, double p) {
    if (p == INFINITY) return (v > s || v != v) && s == s ? v : s;
    if (p == -INFINITY) return (v < s || v != v) && s == s ? v : s;
    return s + v;
}

struct NormOp {
    double p;
    __device__ double combine(double a, double b) const { return norm_combine(a, b, p); }
};

__device__ void atomic_norm(double *out, double v, double p) {
    if (!isinf(p)) {
        atomicAdd(out, v);
        return;
    }
    unsigned long long *u = (unsigned long long *)out, cur = *u;
    for (;;) {
        const double c = __longlong_as_double((long long)cur), n = norm_combine(c, v, p);
        if (n == c || (n != n && c != c)) return;
        const unsigned long long prev = atomicCAS(u, cur, (unsigned long long)__double_as_longlong(n));
        if (prev == cur) return;
        cur = prev;
    }
}

__global__ void norm_kernel(const void *x, DType dt, int64_t n, double p, double *out) {
    __shared__ double scratch[32];
    const NormOp op{p};
    double s = knorm_identity(p);
    KC_GRID_STRIDE(i, n) s = op.combine(s, norm_term(fabs(kc_load<double>(x, dt, i)), p));
    for (int o = 16; o > 0; o >>= 1) s = op.combine(s, __shfl_xor_sync(0xffffffffu, s, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = knorm_identity(p);
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) t = op.combine(t, scratch[w]);
        atomic_norm(out, t, p);
    }
}

extern "C" int kc_norm_pow(const void *x, DType dt, int64_t n, double p, double *out, void *stream) {
    cudaStream_t s = kc_stream(stream);
    const double start = knorm_identity(p); /* (copied to a staging buffer before the call returns) */
    cuda_check(cudaMemcpyAsync(out, &start, sizeof *out, cudaMemcpyHostToDevice, s));
    if (n <= 0) return 0;
    norm_kernel<<<kc_blocks(n) < 1024 ? kc_blocks(n) : 1024, KC_THREADS, 0, s>>>(x, dt, n, p, out);
    cuda_check_launch();
    return 0;
}

/* ---- variance over n with a correction (divide by n - correction), two
 * passes in double, one thread per (outer, inner) output, as k_var_* ---- */
__global__ void var_kernel(const void *x, DType dt, int64_t outer, int64_t n, int64_t inner, double div, void *out) {
    KC_GRID_STRIDE(e, outer * inner) {
        const int64_t base = (e / inner) * n * inner + e % inner;
        double s = 0, ss = 0;
        for (int64_t j = 0; j < n; j++) s += kc_load<double>(x, dt, base + j * inner);
        const double mean = s / (double)n;
        for (int64_t j = 0; j < n; j++) {
            const double d = kc_load<double>(x, dt, base + j * inner) - mean;
            ss += d * d;
        }
        kc_store(out, dt, e, ss / div);
    }
}

extern "C" int kc_var(const void *x, DType dt, int64_t outer, int64_t n, int64_t inner, double correction, void *out,
                      void *stream) {
    if (outer * inner == 0) return 0;
    if (!dtype_is_float(dt)) return cuda_fail("var: dtype %d is not a float type", (int)dt);
    var_kernel<<<kc_blocks(outer * inner), KC_THREADS, 0, kc_stream(stream)>>>(x, dt, outer, n, inner,
                                                                             (double)n - correction, out);
    cuda_check_launch();
    return 0;
}
