/* gemm.cu: GEMM through cuBLASLt, row-major as the CPU's k_gemm_*:
 * C (M, N) = alpha op(A) op(B) + beta C, op(A) (M, K), op(B) (K, N), ta / tb
 * nonzero when A is stored (K, M) / B stored (N, K), lda etc. the row
 * strides. cuBLASLt is column-major, so the call computes C^T = op(B)^T
 * op(A)^T (gemm_layout.h, checked on the host by test_cuda).
 * Types: float32 in and out (compute CUBLAS_COMPUTE_32F, or _32F_FAST_TF32
 * when allow_tf32 is on, as torch.backends.cuda.matmul.allow_tf32; PyTorch's
 * default is off), bf16 / fp16 in with bf16 / fp16 or float32 out and
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

static int gemm_describe(KcGemmCtx *ctx, GemmDescs *d, int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                         int64_t ldb, int64_t ldc, cudaDataType_t in, cudaDataType_t out, KcEpilogue epi,
                         const void *bias) {
    const cublasComputeType_t ct =
        in == CUDA_R_32F && ctx->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const KcLtLayout l = kc_gemm_layout(ta, tb, M, N, K, lda, ldb, ldc);
    cublas_check(cublasLtMatmulDescCreate(&d->op, ct, CUDA_R_32F));
    const cublasOperation_t opa = l.first.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = l.second.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasLtEpilogue_t e = lt_epilogue(epi);
    cublas_check(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    cublas_check(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    cublas_check(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    if (bias) cublas_check(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    cublas_check(cublasLtMatrixLayoutCreate(&d->a, in, l.first.rows, l.first.cols, l.first.ld));
    cublas_check(cublasLtMatrixLayoutCreate(&d->b, in, l.second.rows, l.second.cols, l.second.ld));
    cublas_check(cublasLtMatrixLayoutCreate(&d->c, out, l.out.rows, l.out.cols, l.out.ld));
    cublas_check(cublasLtMatmulPreferenceCreate(&d->pref));
    cublas_check(cublasLtMatmulPreferenceSetAttribute(d->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &ctx->workspace_bytes, sizeof ctx->workspace_bytes));
    return 0;
}

static int gemm_run(KcGemmCtx *ctx, GemmDescs *d, float alpha, const void *A, const void *B, float beta, void *C,
                    cudaStream_t s) {
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    cublas_check(cublasLtMatmulAlgoGetHeuristic(ctx->lt, d->op, d->a, d->b, d->c, d->c, d->pref, 1, &h, &found));
    if (found == 0) return cuda_fail("gemm: cuBLASLt has no algorithm for this shape / type / epilogue");
    cublas_check(cublasLtMatmul(ctx->lt, d->op, &alpha, B, d->a, A, d->b, &beta, C, d->c, C, d->c, &h.algo,
                                ctx->workspace, ctx->workspace_bytes, s));
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
    GemmDescs d = {};
    int rc = gemm_describe(ctx, &d, ta, tb, M, N, K, lda, ldb, ldc, in, out, epi, bias);
    if (rc == 0) rc = gemm_run(ctx, &d, alpha, A, B, beta, C, kc_stream(stream));
    gemm_free(&d);
    return rc;
}
