/* index.cu: gather and index_select over contiguous (outer, n, inner)
 * views (element moves of any size), and their adjoints scatter_add /
 * index_add with atomic adds (float32, float64). Embedding forward is
 * index_select with outer = 1 (rows of the table), its backward index_add.
 * Indices are validated by the caller. Shapes:
 *   gather:       out(o, j, i) = x(o, idx(o, j, i), i),  idx (outer, m, inner)
 *   index_select: out(o, j, i) = x(o, idx[j], i),        idx (m) */
#include "common.cuh"

__device__ void move_elem(char *dst, const char *src, size_t es) {
    switch (es) {
    case 1: *dst = *src; break;
    case 2: *(uint16_t *)dst = *(const uint16_t *)src; break;
    case 4: *(uint32_t *)dst = *(const uint32_t *)src; break;
    case 8: *(uint64_t *)dst = *(const uint64_t *)src; break;
    default: for (size_t k = 0; k < es; k++) dst[k] = src[k];
    }
}

/* out element e = (o, j, i) of (outer, m, inner); source row from idx. */
__global__ void select_kernel(int per_elem_idx, const char *x, int64_t n, int64_t m, int64_t inner, int64_t total,
                              const int64_t *idx, char *out, size_t es) {
    KC_GRID_STRIDE(e, total) {
        const int64_t i = e % inner, j = (e / inner) % m, o = e / (inner * m);
        const int64_t src = idx[per_elem_idx ? e : j];
        move_elem(out + e * (int64_t)es, x + ((o * n + src) * inner + i) * (int64_t)es, es);
    }
}

template <typename T>
__global__ void add_kernel(int per_elem_idx, T *gx, int64_t n, int64_t m, int64_t inner, int64_t total,
                           const int64_t *idx, const T *gout) {
    KC_GRID_STRIDE(e, total) {
        const int64_t i = e % inner, j = (e / inner) % m, o = e / (inner * m);
        atomicAdd(gx + (o * n + idx[per_elem_idx ? e : j]) * inner + i, gout[e]);
    }
}

static int launch_select(int per_elem, const void *x, int64_t outer, int64_t n, int64_t inner, const int64_t *idx,
                         int64_t m, void *out, size_t es, void *stream) {
    const int64_t total = outer * m * inner;
    if (total == 0) return 0;
    select_kernel<<<kc_blocks(total), KC_THREADS, 0, kc_stream(stream)>>>(per_elem, (const char *)x, n, m, inner, total,
                                                                        idx, (char *)out, es);
    cuda_check_launch();
    return 0;
}

static int launch_add(int per_elem, DType dt, void *gx, int64_t outer, int64_t n, int64_t inner, const int64_t *idx,
                      int64_t m, const void *gout, void *stream) {
    const int64_t total = outer * m * inner;
    if (total == 0) return 0;
    cudaStream_t s = kc_stream(stream);
    if (dt == DT_F32)
        add_kernel<float><<<kc_blocks(total), KC_THREADS, 0, s>>>(per_elem, (float *)gx, n, m, inner, total, idx,
                                                                 (const float *)gout);
    else if (dt == DT_F64)
        add_kernel<double><<<kc_blocks(total), KC_THREADS, 0, s>>>(per_elem, (double *)gx, n, m, inner, total, idx,
                                                                  (const double *)gout);
    else
        return cuda_fail("index add: dtype %d not supported (float32, float64)", (int)dt);
    cuda_check_launch();
    return 0;
}

extern "C" int kc_gather(const void *x, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m,
                         void *out, size_t elsize, void *stream) {
    return launch_select(1, x, outer, n, inner, idx, m, out, elsize, stream);
}

extern "C" int kc_index_select(const void *x, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m,
                               void *out, size_t elsize, void *stream) {
    return launch_select(0, x, outer, n, inner, idx, m, out, elsize, stream);
}

extern "C" int kc_scatter_add(DType dt, void *gx, int64_t outer, int64_t n, int64_t inner, const int64_t *idx,
                              int64_t m, const void *gout, void *stream) {
    return launch_add(1, dt, gx, outer, n, inner, idx, m, gout, stream);
}

extern "C" int kc_index_add(DType dt, void *gx, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m,
                            const void *gout, void *stream) {
    return launch_add(0, dt, gx, outer, n, inner, idx, m, gout, stream);
}
