/* gemm.cu: GEMM through cuBLASLt, row-major as the CPU's k_gemm_*:
 * C (M, N) = alpha op(A) op(B) + beta C, op(A) (M, K), op(B) (K, N), ta / tb
 * nonzero when A is stored (K, M) / B stored (N, K), lda etc. the row
 * strides. cuBLASLt is column-major, so the call computes C^T = op(B)^T
 * op(A)^T (gemm_layout.h, checked on the host by test_cuda).
 * Types: float32 in and out (compute CUBLAS_COMPUTE_32F, or _32F_FAST_TF32
 * when allow_tf32 is on, as torch.backends.cuda.matmul.allow_tf32; PyTorch's
 * default is off), float64 (kc_gemm_f64: CUBLAS_COMPUTE_64F), bf16 / fp16 in with bf16 / fp16 or float32 out and
 * float32 accumulation. Epilogues: bias (N) added to every row, then GELU
 * (cuBLASLt's GELU is the tanh approximation: gelu(x, approximate="tanh")).
 * The algorithm comes from cuBLASLt's heuristic for the context's workspace. */
#include "common.cuh"
#include "gemm_layout.h"
#include <cublasLt.h>
#include <stdlib.h>

struct KcGemmCtx {
    cublasLtHandle_t lt;
    void *workspace;
    size_t workspace_bytes;
    int allow_tf32;
};

extern "C" int kc_gemm_ctx_create(KcGemmCtx **out, size_t workspace_bytes) {
    *out = NULL;
    KcGemmCtx *c = (KcGemmCtx *)calloc(1, sizeof *c);
    if (!c) return cuda_fail("gemm: host out of memory");
    c->workspace_bytes = workspace_bytes;
    cublasStatus_t st = cublasLtCreate(&c->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        free(c);
        cublas_check(st);
    }
    cudaError_t e = workspace_bytes ? cudaMalloc(&c->workspace, workspace_bytes) : cudaSuccess;
    if (e != cudaSuccess) {
        cublasLtDestroy(c->lt);
        free(c);
        cuda_check(e);
    }
    *out = c;
    return 0;
}

extern "C" void kc_gemm_ctx_destroy(KcGemmCtx *c) {
    if (!c) return;
    if (c->workspace) cudaFree(c->workspace);
    cublasLtDestroy(c->lt);
    free(c);
}

extern "C" void kc_gemm_allow_tf32(KcGemmCtx *c, int on) { c->allow_tf32 = on; }

static int cuda_type(DType dt, cudaDataType_t *t) {
    switch (dt) {
    case DT_F32: *t = CUDA_R_32F; return 0;
    case DT_BF16: *t = CUDA_R_16BF; return 0;
    case DT_F16: *t = CUDA_R_16F; return 0;
    default: return cuda_fail("gemm: dtype %d not supported (float32, bfloat16, float16)", (int)dt);
    }
}

static cublasLtEpilogue_t lt_epilogue(KcEpilogue e) {
    switch (e) {
    case KC_EPI_BIAS: return CUBLASLT_EPILOGUE_BIAS;
    case KC_EPI_GELU: return CUBLASLT_EPILOGUE_GELU;
    case KC_EPI_BIAS_GELU: return CUBLASLT_EPILOGUE_GELU_BIAS;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
    }
}

/* The descriptors of one call; released by gemm_free whatever happened. */
typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulPreference_t pref;
} GemmDescs;

static void gemm_free(GemmDescs *d) {
    if (d->pref) cublasLtMatmulPreferenceDestroy(d->pref);
    if (d->c) cublasLtMatrixLayoutDestroy(d->c);
    if (d->b) cublasLtMatrixLayoutDestroy(d->b);
    if (d->a) cublasLtMatrixLayoutDestroy(d->a);
    if (d->op) cublasLtMatmulDescDestroy(d->op);
}

/* a_t / b_t: the types of our A and B (equal except for fp8). */
static int gemm_describe(KcGemmCtx *ctx, GemmDescs *d, int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                         int64_t ldb, int64_t ldc, cudaDataType_t a_t, cudaDataType_t b_t, cudaDataType_t out,
                         KcEpilogue epi, const void *bias) {
    const int f64 = a_t == CUDA_R_64F;
    const cublasComputeType_t ct = f64                                    ? CUBLAS_COMPUTE_64F
                                   : a_t == CUDA_R_32F && ctx->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                          : CUBLAS_COMPUTE_32F;
    const KcLtLayout l = kc_gemm_layout(ta, tb, M, N, K, lda, ldb, ldc);
    cublas_check(cublasLtMatmulDescCreate(&d->op, ct, f64 ? CUDA_R_64F : CUDA_R_32F));
    const cublasOperation_t opa = l.first.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = l.second.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasLtEpilogue_t e = lt_epilogue(epi);
    cublas_check(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    cublas_check(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    cublas_check(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    if (bias) cublas_check(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    cublas_check(cublasLtMatrixLayoutCreate(&d->a, b_t, l.first.rows, l.first.cols, l.first.ld));
    cublas_check(cublasLtMatrixLayoutCreate(&d->b, a_t, l.second.rows, l.second.cols, l.second.ld));
    cublas_check(cublasLtMatrixLayoutCreate(&d->c, out, l.out.rows, l.out.cols, l.out.ld));
    cublas_check(cublasLtMatmulPreferenceCreate(&d->pref));
    cublas_check(cublasLtMatmulPreferenceSetAttribute(d->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &ctx->workspace_bytes, sizeof ctx->workspace_bytes));
    return 0;
}

/* alpha, beta: host scalars of the scale type (double for float64, else float). */
static int gemm_run(KcGemmCtx *ctx, GemmDescs *d, const void *alpha, const void *A, const void *B, const void *beta,
                    void *C, cudaStream_t s) {
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    cublas_check(cublasLtMatmulAlgoGetHeuristic(ctx->lt, d->op, d->a, d->b, d->c, d->c, d->pref, 1, &h, &found));
    if (found == 0) return cuda_fail("gemm: cuBLASLt has no algorithm for this shape / type / epilogue");
    cublas_check(cublasLtMatmul(ctx->lt, d->op, alpha, B, d->a, A, d->b, beta, C, d->c, C, d->c, &h.algo,
                                ctx->workspace, ctx->workspace_bytes, s));
    return 0;
}

/* ---- K == 0: no product, C = beta C (cuBLAS has mishandled k = 0; torch
 * never hands it one either). beta == 0 writes zeros without reading C, as
 * BLAS, so an uninitialised output holds no leftover bytes or NaNs. ---- */

/* batch (M, N) matrices of dtype dt, row stride ldc, sc elements apart */
template <typename T>
__global__ void scale_c(int64_t M, int64_t N, int64_t ldc, int64_t sc, int64_t total, double beta, void *C, DType dt) {
    KC_GRID_STRIDE(e, total) {
        const int64_t i = e / (M * N) * sc + e / N % M * ldc + e % N;
        kc_store(C, dt, i, beta == 0 ? (T)0 : (T)(beta * kc_load<T>(C, dt, i)));
    }
}

static int gemm_empty_k(int64_t M, int64_t N, double beta, void *C, DType dt, int64_t ldc, int64_t sc, int64_t batch,
                        cudaStream_t s) {
    if (beta == 1) return 0;
    const int64_t total = batch * M * N;
    if (dt == DT_F64) scale_c<double><<<kc_blocks(total), KC_THREADS, 0, s>>>(M, N, ldc, sc, total, beta, C, dt);
    else scale_c<float><<<kc_blocks(total), KC_THREADS, 0, s>>>(M, N, ldc, sc, total, beta, C, dt);
    cuda_check_launch();
    return 0;
}

extern "C" int kc_gemm(KcGemmCtx *ctx, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                       int64_t lda, const void *B, int64_t ldb, float beta, void *C, int64_t ldc, DType in_dt,
                       DType out_dt, KcEpilogue epi, const void *bias, void *stream) {
    if (M == 0 || N == 0) return 0;
    cudaDataType_t in = CUDA_R_32F, out = CUDA_R_32F;
    if (cuda_type(in_dt, &in) || cuda_type(out_dt, &out)) return -1;
    if (in_dt == DT_F32 && out_dt != DT_F32) return cuda_fail("gemm: float32 inputs need a float32 output");
    if ((epi == KC_EPI_BIAS || epi == KC_EPI_BIAS_GELU) && !bias) return cuda_fail("gemm: bias epilogue without a bias");
    if (K == 0 && epi != KC_EPI_NONE)
        return cuda_fail("gemm: a bias / GELU epilogue with an empty inner dimension (K = 0) is not supported");
    if (K == 0) return gemm_empty_k(M, N, beta, C, out_dt, ldc, 0, 1, kc_stream(stream));
    GemmDescs d = {};
    int rc = gemm_describe(ctx, &d, ta, tb, M, N, K, lda, ldb, ldc, in, in, out, epi, bias);
    if (rc == 0) rc = gemm_run(ctx, &d, &alpha, A, B, &beta, C, kc_stream(stream));
    gemm_free(&d);
    return rc;
}

/* Strided batch: product i of the descriptors' matrices at A + i sa, B + i sb,
 * C + i sc (elements). cuBLASLt's A is our B (gemm_layout.h), so the
 * strides go to the swapped layouts. */
static int gemm_batch(GemmDescs *d, int64_t batch, int64_t sa, int64_t sb, int64_t sc) {
    if (batch > INT32_MAX) return cuda_fail("gemm: batch of %lld products is too large", (long long)batch);
    const int32_t n = (int32_t)batch;
    const cublasLtMatrixLayout_t lay[3] = {d->a, d->b, d->c};
    const int64_t stride[3] = {sb, sa, sc};
    for (int i = 0; i < 3; i++) {
        cublas_check(cublasLtMatrixLayoutSetAttribute(lay[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n));
        cublas_check(cublasLtMatrixLayoutSetAttribute(lay[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride[i],
                                                      sizeof stride[i]));
    }
    return 0;
}

extern "C" int kc_gemm_batched(KcGemmCtx *ctx, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                               const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb,
                               float beta, void *C, int64_t ldc, int64_t sc, int64_t batch, DType in_dt,
                               void *stream) {
    if (M == 0 || N == 0 || batch == 0) return 0;
    cudaDataType_t in = CUDA_R_32F;
    if (cuda_type(in_dt, &in)) return -1;
    if (K == 0) return gemm_empty_k(M, N, beta, C, DT_F32, ldc, sc, batch, kc_stream(stream));
    GemmDescs d = {};
    int rc = gemm_describe(ctx, &d, ta, tb, M, N, K, lda, ldb, ldc, in, in, CUDA_R_32F, KC_EPI_NONE, NULL);
    if (rc == 0) rc = gemm_batch(&d, batch, sa, sb, sc);
    if (rc == 0) rc = gemm_run(ctx, &d, &alpha, A, B, &beta, C, kc_stream(stream));
    gemm_free(&d);
    return rc;
}

/* float64 in and out, float64 accumulation (CUBLAS_COMPUTE_64F), no epilogue. */
extern "C" int kc_gemm_f64(KcGemmCtx *ctx, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha,
                           const void *A, int64_t lda, const void *B, int64_t ldb, double beta, void *C, int64_t ldc,
                           void *stream) {
    if (M == 0 || N == 0) return 0;
    if (K == 0) return gemm_empty_k(M, N, beta, C, DT_F64, ldc, 0, 1, kc_stream(stream));
    GemmDescs d = {};
    int rc = gemm_describe(ctx, &d, ta, tb, M, N, K, lda, ldb, ldc, CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, KC_EPI_NONE,
                           NULL);
    if (rc == 0) rc = gemm_run(ctx, &d, &alpha, A, B, &beta, C, kc_stream(stream));
    gemm_free(&d);
    return rc;
}

/* ---- fp8 (compute capability 8.9 and newer) ----
 * cuBLASLt's fp8 products need both operands K-major ("TN"): in row-major
 * terms A stored (M, K) and B stored (N, K), nn.Linear's layout; row strides
 * multiples of 16; at most one operand e5m2. The per-tensor scales are
 * device floats (NULL: 1), multiplied into the product with the host scalar
 * alpha: C = alpha (a_scale b_scale) A B^T [+ bias]. */
static int fp8_check(DType a_dt, DType b_dt, DType out_dt, int64_t lda, int64_t ldb) {
    int dev = 0, major = 0, minor = 0;
    cuda_check(cudaGetDevice(&dev));
    cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    cuda_check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (major * 10 + minor < 89)
        return cuda_fail("fp8 matmul needs a GPU of compute capability 8.9 or newer (Ada, Hopper); cuda:%d is %d.%d",
                         dev, major, minor);
    const int fp8a = a_dt == DT_F8E4M3 || a_dt == DT_F8E5M2, fp8b = b_dt == DT_F8E4M3 || b_dt == DT_F8E5M2;
    if (!fp8a || !fp8b || (a_dt == DT_F8E5M2 && b_dt == DT_F8E5M2))
        return cuda_fail("fp8 matmul: operands must be float8 (e4m3 / e5m2, not both e5m2), got dtypes %d and %d",
                         (int)a_dt, (int)b_dt);
    if (out_dt != DT_BF16 && out_dt != DT_F16 && out_dt != DT_F32)
        return cuda_fail("fp8 matmul: output dtype %d not supported (bfloat16, float16, float32)", (int)out_dt);
    if (lda % 16 || ldb % 16) return cuda_fail("fp8 matmul: row strides must be multiples of 16 (got %lld, %lld)",
                                               (long long)lda, (long long)ldb);
    return 0;
}

/* cuBLASLt's A is our B (gemm_layout.h): the scales swap too. A NULL scale
 * leaves cuBLASLt's default (none). */
static int fp8_scales(GemmDescs *d, const float *a_scale, const float *b_scale) {
    if (b_scale)
        cublas_check(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale, sizeof b_scale));
    if (a_scale)
        cublas_check(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale, sizeof a_scale));
    return 0;
}

static cudaDataType_t fp8_type(DType dt) { return dt == DT_F8E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3; }

extern "C" int kc_gemm_fp8(KcGemmCtx *ctx, int64_t M, int64_t N, int64_t K, float alpha, const void *A, DType a_dt,
                           int64_t lda, const void *B, DType b_dt, int64_t ldb, const float *a_scale,
                           const float *b_scale, void *C, DType out_dt, int64_t ldc, const void *bias, void *stream) {
    if (M == 0 || N == 0) return 0;
    cudaDataType_t out = CUDA_R_32F;
    if (fp8_check(a_dt, b_dt, out_dt, lda, ldb) || cuda_type(out_dt, &out)) return -1;
    if (K == 0 && bias) return cuda_fail("fp8 matmul: a bias with an empty inner dimension (K = 0) is not supported");
    if (K == 0) return gemm_empty_k(M, N, 0.0, C, out_dt, ldc, 0, 1, kc_stream(stream));
    GemmDescs d = {};
    int rc = gemm_describe(ctx, &d, 0, 1, M, N, K, lda, ldb, ldc, fp8_type(a_dt), fp8_type(b_dt), out,
                           bias ? KC_EPI_BIAS : KC_EPI_NONE, bias);
    if (rc == 0) rc = fp8_scales(&d, a_scale, b_scale);
    const float zero = 0.0f;
    if (rc == 0) rc = gemm_run(ctx, &d, &alpha, A, B, &zero, C, kc_stream(stream));
    gemm_free(&d);
    return rc;
}
