/* common.cuh: device helpers shared by the kernels/cuda sources: loads and
 * stores of any dtype through kernels/dtype.h's codecs (so conversions are
 * the CPU's, bit for bit), n-d strided offsets, block reductions, launch
 * sizes. Header-only, CUDA C++. */
#ifndef ACCEL_CUDA_COMMON_CUH
#define ACCEL_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <math.h>
#include "kernels_cuda.h"
#include "cuda_check.h"

#define KC_THREADS 256

static inline cudaStream_t kc_stream(void *s) { return (cudaStream_t)s; }

/* Grid for n elements, at most 65535 * 8 blocks (grid-stride loops cover the rest). */
static inline unsigned kc_blocks(int64_t n) {
    int64_t b = (n + KC_THREADS - 1) / KC_THREADS;
    return (unsigned)(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}

#define KC_GRID_STRIDE(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* ---- dtype loads and stores (element i of p) ---- */
template <typename C> __device__ __forceinline__ C kc_load(const void *p, DType dt, int64_t i);
template <> __device__ __forceinline__ float kc_load<float>(const void *p, DType dt, int64_t i) {
    switch (dt) {
    case DT_F32: return ((const float *)p)[i];
    case DT_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    case DT_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    default: return (float)dtype_load((const char *)p + i * (int64_t)dtype_size(dt), dt);
    }
}
template <> __device__ __forceinline__ double kc_load<double>(const void *p, DType dt, int64_t i) {
    return dt == DT_F64 ? ((const double *)p)[i] : dtype_load((const char *)p + i * (int64_t)dtype_size(dt), dt);
}
template <> __device__ __forceinline__ int64_t kc_load<int64_t>(const void *p, DType dt, int64_t i) {
    return dtype_load_i64((const char *)p + i * (int64_t)dtype_size(dt), dt);
}

__device__ __forceinline__ void kc_store(void *p, DType dt, int64_t i, float v) {
    switch (dt) {
    case DT_F32: ((float *)p)[i] = v; return;
    case DT_BF16: ((uint16_t *)p)[i] = f32_to_bf16(v); return;
    case DT_F16: ((uint16_t *)p)[i] = f32_to_f16(v); return;
    default: dtype_store((char *)p + i * (int64_t)dtype_size(dt), dt, (double)v);
    }
}
__device__ __forceinline__ void kc_store(void *p, DType dt, int64_t i, double v) {
    if (dt == DT_F64) ((double *)p)[i] = v;
    else dtype_store((char *)p + i * (int64_t)dtype_size(dt), dt, v);
}
__device__ __forceinline__ void kc_store(void *p, DType dt, int64_t i, int64_t v) {
    dtype_store_i64((char *)p + i * (int64_t)dtype_size(dt), dt, v);
}

/* ---- n-d offsets: element `lin` (row-major over shape) of operand k ---- */
__host__ __device__ __forceinline__ void kc_offsets(const KcIter &it, int64_t lin, int nops, int64_t off[4]) {
    for (int k = 0; k < nops; k++) off[k] = 0;
    for (int d = it.ndim - 1; d >= 0; d--) {
        const int64_t s = it.shape[d], c = lin % s;
        lin /= s;
        for (int k = 0; k < nops; k++) off[k] += c * it.st[k][d];
    }
}

static inline int64_t kc_numel(const KcIter *it) {
    int64_t n = 1;
    for (int d = 0; d < it->ndim; d++) n *= it->shape[d];
    return n;
}

/* ---- block reductions (blockDim.x a multiple of 32, <= 1024) ---- */
template <typename T> struct KcSum {
    __device__ static T op(T a, T b) { return a + b; }
};
template <typename T> struct KcMax {
    __device__ static T op(T a, T b) { return a != a || a > b ? a : b; } /* NaN propagates */
};

template <typename T, typename R> __device__ T kc_warp_reduce(T v) {
    for (int o = 16; o > 0; o >>= 1) v = R::op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Every thread gets the block's reduction; `scratch` holds 32 values;
 * ident is R's identity (0 for sums, -inf for max). */
template <typename T, typename R> __device__ T kc_block_reduce(T v, T *scratch, T ident) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = kc_warp_reduce<T, R>(v);
    __syncthreads(); /* scratch may still be read by a previous call */
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nw ? scratch[lane] : ident;
    return kc_warp_reduce<T, R>(v);
}

#endif
