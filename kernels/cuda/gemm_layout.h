/* gemm_layout.h: how a row-major GEMM maps onto cuBLASLt's column-major
 * one (gemm.cu), as plain C so the host test checks the mapping with a
 * column-major reference. Row-major C (M, N) with row stride ldc is
 * column-major C^T (N, M) with leading dimension ldc, and
 * C^T = op(B)^T op(A)^T: cuBLASLt's first operand is our B, its second our
 * A. A row-major matrix stored (r, c) with row stride ld is column-major
 * (c, r) with leading dimension ld. */
#ifndef ACCEL_CUDA_GEMM_LAYOUT_H
#define ACCEL_CUDA_GEMM_LAYOUT_H

#include <stdint.h>

typedef struct {
    int trans;             /* cuBLASLt's op: 1 = transposed */
    uint64_t rows, cols;   /* the stored column-major matrix */
    int64_t ld;
} KcLtMat;

typedef struct {
    KcLtMat first, second, out; /* first = our B, second = our A, out = C^T */
} KcLtLayout;

/* ta: A stored (K, M) instead of (M, K); tb: B stored (N, K) instead of (K, N). */
static inline KcLtLayout kc_gemm_layout(int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                                        int64_t ldc) {
    KcLtLayout l;
    /* op(B)^T is (N, K): B stored (K, N) row-major = (N, K) column-major, no op;
     * B stored (N, K) row-major = (K, N) column-major, transposed */
    l.first = (KcLtMat){tb, (uint64_t)(tb ? K : N), (uint64_t)(tb ? N : K), ldb};
    /* op(A)^T is (K, M): A stored (M, K) = (K, M) column-major; stored (K, M) = (M, K), transposed */
    l.second = (KcLtMat){ta, (uint64_t)(ta ? M : K), (uint64_t)(ta ? K : M), lda};
    l.out = (KcLtMat){0, (uint64_t)N, (uint64_t)M, ldc};
    return l;
}

#endif
