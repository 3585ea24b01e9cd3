/* kernels_cuda.h: the CUDA compute kernels (DESIGN §1: pure compute over
 * raw device pointers, sizes, strides in elements and dtypes; no Lua, no
 * autograd, no allocation that outlives a call). The op enums and argument
 * structs are the CPU kernels' (kernels/cpu/kernels.h), so a backend entry
 * passes the same values to either device. Every function enqueues its work
 * on `stream` (a cudaStream_t; NULL: the legacy default stream) and returns
 * 0, or -1 with cuda_last_error() set (launch errors; errors of the work
 * itself surface at the next synchronisation). Inputs are validated by the
 * caller (shapes, index ranges), as for the CPU kernels.
 *
 * Arithmetic: float32, bf16, fp16 and fp8 compute in float32 (bf16 / fp16
 * reductions accumulate in float32), float64 in double, integers in int64;
 * dtype conversions are kernels/dtype.h's codecs, bit for bit the CPU's. */
#ifndef ACCEL_KERNELS_CUDA_H
#define ACCEL_KERNELS_CUDA_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "../cpu/kernels.h"
#include "alloc_cache.h"

#define KC_MAX_DIMS 8

/* An n-d elementwise launch: out[idx] = f(a[idx], b[idx]) over shape, with
 * per-operand strides in elements (stride 0 broadcasts): st[0] the output,
 * st[1] a, st[2] b (or the condition for where). ndim 0 is one element. */
typedef struct {
    int ndim;
    int64_t shape[KC_MAX_DIMS];
    int64_t st[4][KC_MAX_DIMS];
} KcIter;

/* ---- elementwise.cu ---- */
/* Comparisons and logical ops write 0/1 in odt (bool or uint8 normally). */
int kc_binary(KBinOp op, const KcIter *it, const void *a, DType adt, const void *b, DType bdt, void *o, DType odt,
              void *stream);
int kc_unary(KUnOp op, const KcIter *it, const void *a, DType adt, void *o, DType odt, double p1, double p2,
             void *stream);
/* Strided copy with conversion (same dtype: a plain copy), and fill. */
int kc_cast(const KcIter *it, const void *a, DType adt, void *o, DType odt, void *stream);
int kc_fill(const KcIter *it, void *o, DType odt, double v, void *stream);
/* o = c ? a : b; c is bool / uint8 (st[3]), a, b, o of dtype dt. */
int kc_where(const KcIter *it, const void *c, const void *a, const void *b, void *o, DType dt, void *stream);
/* Contiguous, gx = gy * f'(x) as k_unary_backward_*; dt float32, bf16, fp16 or float64. */
int kc_unary_backward(KUnOp op, int64_t n, const void *x, const void *y, const void *gy, void *gx, DType dt,
                      double p1, double p2, void *stream);

/* ---- reduce.cu: x contiguous (outer, n, inner), reduced over n ---- */
/* out (outer, inner) of x's dtype (int64 for integer sums). */
int kc_reduce(KRedOp op, const void *x, DType dt, int64_t outer, int64_t n, int64_t inner, void *out, void *stream);
/* First index of the max (want_max) or min; vals of x's dtype, idx int64. NaN wins. */
int kc_argreduce(int want_max, const void *x, DType dt, int64_t outer, int64_t n, int64_t inner, void *vals,
                 int64_t *idx, void *stream);

/* variance over n, divided by n - correction (out of x's float dtype). */
int kc_var(const void *x, DType dt, int64_t outer, int64_t n, int64_t inner, double correction, void *out,
           void *stream);
/* sum_i |x_i|^p into *out (one double in device memory), as k_norm_pow_*
 * (p = INFINITY: max |x_i|, NaN sticking; p = 0: count of nonzeros). */
int kc_norm_pow(const void *x, DType dt, int64_t n, double p, double *out, void *stream);

/* ---- softmax.cu: over n of a contiguous (outer, n, inner) view, as k_softmax_* ---- */
int kc_softmax(int log, const void *x, DType dt, int64_t outer, int64_t n, int64_t inner, void *y, void *stream);
int kc_softmax_backward(int log, const void *y, const void *gy, DType dt, int64_t outer, int64_t n, int64_t inner,
                        void *gx, void *stream);
/* logits x (N, C) of dt; target (N) int64; loss, lse (N) float32, as
 * k_cross_entropy_fwd_f32. bad (one int64 in device memory) receives the
 * first invalid row, or stays -1 (the caller sets it to -1 first). */
int kc_cross_entropy_fwd(const void *x, DType dt, int64_t N, int64_t C, const int64_t *target, int64_t ignore_index,
                         double label_smoothing, float *loss, float *lse, int64_t *bad, void *stream);
/* gx (N, C) of dt from g (N) float32. */
int kc_cross_entropy_bwd(const void *x, DType dt, const float *lse, int64_t N, int64_t C, const int64_t *target,
                         int64_t ignore_index, double label_smoothing, const float *g, void *gx, void *stream);

/* ---- layernorm.cu: rows of C, contiguous; w, b (C) of dt or NULL; mean,
 * rstd (rows) and gw, gb (C) float32, float64 when dt is float64 ---- */
int kc_layernorm_fwd(const void *x, const void *w, const void *b, DType dt, int64_t rows, int64_t C, double eps,
                     void *y, void *mean, void *rstd, void *stream);
/* gx (rows, C) of dt overwritten; gw, gb accumulated (+=) when not NULL. */
int kc_layernorm_bwd(const void *x, const void *w, const void *mean, const void *rstd, const void *gy, DType dt,
                     int64_t rows, int64_t C, void *gx, void *gw, void *gb, void *stream);

/* ---- index.cu: (outer, n, inner) views as k_gather / k_index_select ---- */
int kc_gather(const void *x, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m, void *out,
              size_t elsize, void *stream);
int kc_index_select(const void *x, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m, void *out,
                    size_t elsize, void *stream);
/* += adjoints with atomic adds; dt float32 or float64. Embedding backward is
 * kc_index_add with outer = 1, n = vocabulary, inner = width. */
int kc_scatter_add(DType dt, void *gx, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m,
                   const void *gout, void *stream);
int kc_index_add(DType dt, void *gx, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m,
                 const void *gout, void *stream);

/* ---- pool.cu: KPool2d as k_max_pool2d_*; float32 or float64 ---- */
int kc_max_pool2d_fwd(DType dt, const KPool2d *g, const void *x, void *y, int64_t *idx, uint8_t *code, void *stream);
/* gx (NC, H, W) zeroed, then gy added where each maximum was (idx, else code). */
int kc_max_pool2d_bwd(DType dt, const KPool2d *g, const void *gy, const int64_t *idx, const uint8_t *code, void *gx,
                      void *stream);

/* ---- optim.cu: flat float32 buffers, kernels/cpu/optim.c's formulas ---- */
int kc_sgd_f32(int64_t n, float *p, const float *g, float *buf, int buf_init, const KSgdArgs *a, void *stream);
int kc_adam_f32(int64_t n, float *p, const float *g, float *m, float *v, float *vmax, const KAdamArgs *a,
                void *stream);

/* ---- fp8.cu: the recipe's casts over n contiguous float32 elements, as
 * k_fp8_*: q = saturate(fl32(x * scale)) (q may be NULL), *amax (one
 * device float, may be NULL) = max |x| or NaN; out = fl32(decode(q) * s) ---- */
int kc_fp8_quantize(KFp8Fmt fmt, int64_t n, const float *x, float scale, uint8_t *q, float *amax, void *stream);
int kc_fp8_dequantize(KFp8Fmt fmt, int64_t n, const uint8_t *q, float scale_inv, float *out, void *stream);

/* ---- rng.cu: contiguous o of n elements from the stream (seed, offset),
 * element by element kernels/philox.h (= core/rng.c's values). The caller
 * advances its offset by the rng_blocks_* count for n. ---- */
int kc_rng_uniform(void *o, DType dt, int64_t n, uint64_t seed, uint64_t offset, double lo, double hi, void *stream);
int kc_rng_normal(void *o, DType dt, int64_t n, uint64_t seed, uint64_t offset, double mean, double std,
                  void *stream);
int kc_rng_bernoulli_mask(void *o, DType dt, int64_t n, uint64_t seed, uint64_t offset, double p, void *stream);
int kc_rng_randint(void *o, DType dt, int64_t n, uint64_t seed, uint64_t offset, int64_t lo, uint64_t range,
                   void *stream);

/* ---- gemm.cu: cuBLASLt, row-major as k_gemm_*; see the file ---- */
typedef enum { KC_EPI_NONE = 0, KC_EPI_BIAS, KC_EPI_GELU, KC_EPI_BIAS_GELU } KcEpilogue;
typedef struct KcGemmCtx KcGemmCtx; /* one per device: handle and workspace */
int kc_gemm_ctx_create(KcGemmCtx **ctx, size_t workspace_bytes);
void kc_gemm_ctx_destroy(KcGemmCtx *ctx);
/* torch.backends.cuda.matmul.allow_tf32 (default off, as PyTorch). */
void kc_gemm_allow_tf32(KcGemmCtx *ctx, int on);
/* C (M, N, ldc) = alpha op(A) op(B) + beta C [+ bias (N)] [then GELU-tanh];
 * A, B of in_dt (float32, bf16, fp16), C of out_dt (in_dt or float32), bias
 * of out_dt; accumulation in float32. */
int kc_gemm(KcGemmCtx *ctx, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A, int64_t lda,
            const void *B, int64_t ldb, float beta, void *C, int64_t ldc, DType in_dt, DType out_dt,
            KcEpilogue epi, const void *bias, void *stream);

/* A strided batch of kc_gemm products (C float32): product i on A + i sa,
 * B + i sb, C + i sc (elements; operands may interleave). */
int kc_gemm_batched(KcGemmCtx *ctx, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                    int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb, float beta, void *C, int64_t ldc,
                    int64_t sc, int64_t batch, DType in_dt, void *stream);

/* float64: C = alpha op(A) op(B) + beta C, all float64, accumulation in float64. */
int kc_gemm_f64(KcGemmCtx *ctx, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A,
                int64_t lda, const void *B, int64_t ldb, double beta, void *C, int64_t ldc, void *stream);

/* fp8 (compute capability 8.9+, else an error saying so): C (M, N) =
 * alpha a_scale b_scale A (M, K) @ B^T with B stored (N, K), A / B e4m3 or
 * e5m2 (not both e5m2), alpha a host float, the scales one device float
 * each or NULL (1), C bf16 / fp16 / float32, bias (N) of C's dtype or NULL,
 * row strides of A and B multiples of 16. */
int kc_gemm_fp8(KcGemmCtx *ctx, int64_t M, int64_t N, int64_t K, float alpha, const void *A, DType a_dt, int64_t lda,
                const void *B, DType b_dt, int64_t ldb, const float *a_scale, const float *b_scale, void *C,
                DType out_dt, int64_t ldc, const void *bias, void *stream);

/* ---- conv.cu: KConv2d as k_conv2d_*, im2col + kc_gemm, float32 ---- */
int kc_conv2d_fwd(KcGemmCtx *ctx, DType dt, const KConv2d *g, const void *x, const void *w, const void *b, void *y,
                  void *stream); /* b may be NULL */
/* gx, gw, gb overwritten; NULL for those not wanted. */
int kc_conv2d_bwd(KcGemmCtx *ctx, DType dt, const KConv2d *g, const void *x, const void *w, const void *gy, void *gx,
                  void *gw, void *gb, void *stream);

/* ---- device.cu ---- */
/* The number of usable GPUs; 0 with the reason in why (no driver, no
 * device, driver too old for this runtime). */
int cuda_device_count(char *why, size_t n);
/* The compute capability of GPU device (8.0 A100, 8.9 Ada, 9.0 H100 / H200). */
int kc_device_capability(int device, int *major, int *minor);

/* ---- stream.cu: ordering (handles are cudaStream_t / cudaEvent_t) ---- */
int kc_set_device(int device);
int kc_stream_create(int device, void **stream);
int kc_stream_destroy(void *stream);
int kc_stream_synchronize(void *stream);
int kc_event_create(void **event);
int kc_event_destroy(void *event);
int kc_event_record(void *event, void *stream);
int kc_stream_wait_event(void *stream, void *event);
int kc_event_synchronize(void *event);
int kc_copy_device(void *dst, const void *src, size_t n, void *stream);
/* n bytes of device memory set to 0, in stream order. */
int kc_memset_zero(void *dst, size_t n, void *stream);

/* ---- alloc.cu: the caching allocator per device (alloc_cache.h) ---- */
int kc_malloc(int device, size_t size, void *stream, void **p);
int kc_free(int device, void *p);
void kc_empty_cache(int device);
/* torch.cuda.memory_stats-like counters (alloc_cache.h), and the peak reset. */
int kc_memory_stats(int device, CacheStats *out);
int kc_reset_peak_stats(int device);
/* Pinned host staging: copies between host memory and device memory pass
 * through a page-locked buffer grown on demand (one per device), so they
 * run at full bus speed; both block until the copy is done. */
int kc_copy_to_device(int device, void *dst, const void *src, size_t n, void *stream);
int kc_copy_to_host(int device, void *dst, const void *src, size_t n, void *stream);

#ifdef __cplusplus
}
#endif

#endif
