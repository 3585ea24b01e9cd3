/* elementwise.cu: binary, unary, cast, fill and where over n-d strided
 * operands (KcIter: one launch per op, any broadcasting), and the fused
 * unary backward over contiguous buffers. The scalar semantics are in
 * scalar_ops.cuh (the CPU kernels', tested on the host). Compute type: double when an
 * operand is float64, float when one is another float type, else int64. */
#include "common.cuh"
#include "scalar_ops.cuh"

/* ---- kernels ---- */

template <typename C>
__global__ void binary_kernel(KBinOp op, KcIter it, int64_t n, const void *a, DType adt, const void *b, DType bdt,
                              void *o, DType odt) {
    KC_GRID_STRIDE(i, n) {
        int64_t off[4];
        kc_offsets(it, i, 3, off);
        kc_store(o, odt, off[0], binop<C>(op, kc_load<C>(a, adt, off[1]), kc_load<C>(b, bdt, off[2])));
    }
}

template <typename C>
__global__ void unary_kernel(KUnOp op, KcIter it, int64_t n, const void *a, DType adt, void *o, DType odt, C q1, C q2) {
    KC_GRID_STRIDE(i, n) {
        int64_t off[4];
        kc_offsets(it, i, 2, off);
        kc_store(o, odt, off[0], unop(op, kc_load<C>(a, adt, off[1]), q1, q2));
    }
}

/* A cast moves through the widest type of its pair (int64 <-> int64 exactly). */
template <typename C>
__global__ void cast_kernel(KcIter it, int64_t n, const void *a, DType adt, void *o, DType odt) {
    KC_GRID_STRIDE(i, n) {
        int64_t off[4];
        kc_offsets(it, i, 2, off);
        kc_store(o, odt, off[0], kc_load<C>(a, adt, off[1]));
    }
}

__global__ void fill_kernel(KcIter it, int64_t n, void *o, DType odt, double v, int64_t vi, int is_int) {
    KC_GRID_STRIDE(i, n) {
        int64_t off[4];
        kc_offsets(it, i, 1, off);
        if (is_int) kc_store(o, odt, off[0], vi);
        else kc_store(o, odt, off[0], v);
    }
}

__global__ void where_kernel(KcIter it, int64_t n, const uint8_t *c, const char *a, const char *b, char *o,
                             size_t es) {
    KC_GRID_STRIDE(i, n) {
        int64_t off[4];
        kc_offsets(it, i, 4, off);
        const char *src = c[off[3]] ? a + off[1] * (int64_t)es : b + off[2] * (int64_t)es;
        for (size_t k = 0; k < es; k++) o[off[0] * (int64_t)es + (int64_t)k] = src[k];
    }
}

/* ---- host entries ---- */

enum { CT_FLOAT, CT_DOUBLE, CT_INT };
static int compute_type(DType a, DType b) {
    if (a == DT_F64 || b == DT_F64) return CT_DOUBLE;
    if (dtype_is_float(a) || dtype_is_float(b)) return CT_FLOAT;
    return CT_INT;
}

extern "C" int kc_binary(KBinOp op, const KcIter *it, const void *a, DType adt, const void *b, DType bdt, void *o,
                         DType odt, void *stream) {
    const int64_t n = kc_numel(it);
    if (n == 0) return 0;
    cudaStream_t s = kc_stream(stream);
    switch (compute_type(adt, bdt)) {
    case CT_DOUBLE: binary_kernel<double><<<kc_blocks(n), KC_THREADS, 0, s>>>(op, *it, n, a, adt, b, bdt, o, odt); break;
    case CT_FLOAT: binary_kernel<float><<<kc_blocks(n), KC_THREADS, 0, s>>>(op, *it, n, a, adt, b, bdt, o, odt); break;
    default: binary_kernel<int64_t><<<kc_blocks(n), KC_THREADS, 0, s>>>(op, *it, n, a, adt, b, bdt, o, odt); break;
    }
    cuda_check_launch();
    return 0;
}

/* The tightest int64 inside [p1, p2] (the CPU's i64_bound). */
static int64_t i64_bound(double v, int upper) {
    if (v != v) return upper ? INT64_MAX : INT64_MIN;
    v = upper ? floor(v) : ceil(v);
    if (v <= -9223372036854775808.0) return INT64_MIN;
    if (v >= 9223372036854775808.0) return INT64_MAX;
    return (int64_t)v;
}

extern "C" int kc_unary(KUnOp op, const KcIter *it, const void *a, DType adt, void *o, DType odt, double p1,
                        double p2, void *stream) {
    const int64_t n = kc_numel(it);
    if (n == 0) return 0;
    cudaStream_t s = kc_stream(stream);
    switch (compute_type(adt, adt)) {
    case CT_DOUBLE:
        unary_kernel<double><<<kc_blocks(n), KC_THREADS, 0, s>>>(op, *it, n, a, adt, o, odt, p1, p2);
        break;
    case CT_FLOAT:
        unary_kernel<float><<<kc_blocks(n), KC_THREADS, 0, s>>>(op, *it, n, a, adt, o, odt, (float)p1, (float)p2);
        break;
    default:
        unary_kernel<int64_t><<<kc_blocks(n), KC_THREADS, 0, s>>>(op, *it, n, a, adt, o, odt, i64_bound(p1, 0),
                                                                  i64_bound(p2, 1));
        break;
    }
    cuda_check_launch();
    return 0;
}

extern "C" int kc_cast(const KcIter *it, const void *a, DType adt, void *o, DType odt, void *stream) {
    const int64_t n = kc_numel(it);
    if (n == 0) return 0;
    cudaStream_t s = kc_stream(stream);
    if (!dtype_is_float(adt) && !dtype_is_float(odt))
        cast_kernel<int64_t><<<kc_blocks(n), KC_THREADS, 0, s>>>(*it, n, a, adt, o, odt);
    else if (adt == DT_F64 || odt == DT_F64 || !dtype_is_float(adt) || !dtype_is_float(odt))
        cast_kernel<double><<<kc_blocks(n), KC_THREADS, 0, s>>>(*it, n, a, adt, o, odt);
    else
        cast_kernel<float><<<kc_blocks(n), KC_THREADS, 0, s>>>(*it, n, a, adt, o, odt);
    cuda_check_launch();
    return 0;
}

extern "C" int kc_fill(const KcIter *it, void *o, DType odt, double v, void *stream) {
    const int64_t n = kc_numel(it);
    if (n == 0) return 0;
    const int is_int = !dtype_is_float(odt);
    fill_kernel<<<kc_blocks(n), KC_THREADS, 0, kc_stream(stream)>>>(*it, n, o, odt, v, is_int ? (int64_t)v : 0, is_int);
    cuda_check_launch();
    return 0;
}

extern "C" int kc_where(const KcIter *it, const void *c, const void *a, const void *b, void *o, DType dt, void *stream) {
    const int64_t n = kc_numel(it);
    if (n == 0) return 0;
    where_kernel<<<kc_blocks(n), KC_THREADS, 0, kc_stream(stream)>>>(*it, n, (const uint8_t *)c, (const char *)a,
                                                                   (const char *)b, (char *)o, dtype_size(dt));
    cuda_check_launch();
    return 0;
}

template <typename T>
__global__ void unary_bwd_kernel(KUnOp op, int64_t n, const void *x, const void *y, const void *gy, void *gx, DType dt,
                                 T q1, T q2) {
    KC_GRID_STRIDE(i, n) {
        const T xi = x ? kc_load<T>(x, dt, i) : (T)0, yi = y ? kc_load<T>(y, dt, i) : (T)0;
        kc_store(gx, dt, i, unary_grad(op, xi, yi, kc_load<T>(gy, dt, i), q1, q2));
    }
}

extern "C" int kc_unary_backward(KUnOp op, int64_t n, const void *x, const void *y, const void *gy, void *gx, DType dt,
                                 double p1, double p2, void *stream) {
    if (n <= 0) return 0;
    if (!dtype_is_float(dt)) return cuda_fail("unary backward: dtype %d is not a float type", (int)dt);
    cudaStream_t s = kc_stream(stream);
    if (dt == DT_F64)
        unary_bwd_kernel<double><<<kc_blocks(n), KC_THREADS, 0, s>>>(op, n, x, y, gy, gx, dt, p1, p2);
    else
        unary_bwd_kernel<float><<<kc_blocks(n), KC_THREADS, 0, s>>>(op, n, x, y, gy, gx, dt, (float)p1, (float)p2);
    cuda_check_launch();
    return 0;
}
