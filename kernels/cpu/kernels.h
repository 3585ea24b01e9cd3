/* kernels.h: the CPU compute kernels. Pure compute over raw pointers, sizes,
 * strides (in elements) and dtypes: no Lua, no autograd, no allocation that
 * outlives a call, no error reporting (callers validate shapes and indices
 * first). Three compute dtypes carry arithmetic: f32, f64, i64; the
 * caller casts other dtypes to one of these.
 *
 * Threads: OpenMP above a size threshold (KERNEL_PAR_MIN elements of work);
 * kernel_set_threads() sets the OpenMP team, never more than the machine's
 * cores; OpenBLAS stays single-threaded and is split over that team. */
#ifndef ACCEL_KERNELS_CPU_H
#define ACCEL_KERNELS_CPU_H

#include <stdint.h>
#include "../dtype.h"
#include "../kops.h"

#define KERNEL_PAR_MIN 32768

void kernel_set_threads(int n); /* n <= 0: number of cores */
int kernel_get_threads(void);

/* ---------------- elementwise: one strided 1-D run ---------------- */
/* Callers loop over outer dimensions; a stride of 0 broadcasts. When all
 * strides are 1 the kernel takes a vectorisable contiguous path. */

/* o[i*so] = a[i*sa] op b[i*sb]; for comparisons o is uint8_t*. */
void k_binary_f32(KBinOp op, int64_t n, const float *a, int64_t sa, const float *b, int64_t sb, void *o, int64_t so);
void k_binary_f64(KBinOp op, int64_t n, const double *a, int64_t sa, const double *b, int64_t sb, void *o, int64_t so);
void k_binary_i64(KBinOp op, int64_t n, const int64_t *a, int64_t sa, const int64_t *b, int64_t sb, void *o, int64_t so);

/* o[i*so] = f(a[i*sa]; p1, p2). */
void k_unary_f32(KUnOp op, int64_t n, const float *a, int64_t sa, float *o, int64_t so, double p1, double p2);
void k_unary_f64(KUnOp op, int64_t n, const double *a, int64_t sa, double *o, int64_t so, double p1, double p2);
void k_unary_i64(KUnOp op, int64_t n, const int64_t *a, int64_t sa, int64_t *o, int64_t so, double p1, double p2); /* NEG ABS SQUARE SIGN CLAMP RELU NOT only */

/* Fused backward of a unary op, contiguous: gx = gy * f'(x). x is the
 * input, y the saved output (either may be unused by a given op). Ops:
 * RELU, GELU, GELU_TANH, SILU, TANH(y), SIGMOID(y), EXP(y), LOG(x),
 * SQRT(y), RSQRT(y), ABS(x), CLAMP(x; p1,p2), POW(x; p1), LEAKY_RELU(x; p1),
 * SQUARE(x), RECIP(y), SIN(x), COS(x), LOG1P(x), EXPM1(y), ERF(x), NEG. */
void k_unary_backward_f32(KUnOp op, int64_t n, const float *x, const float *y, const float *gy, float *gx, double p1, double p2);
void k_unary_backward_f64(KUnOp op, int64_t n, const double *x, const double *y, const double *gy, double *gx, double p1, double p2);

/* where: o = c ? a : b, all strided 1-D runs; elsize in bytes (1,2,4,8). */
void k_where(int64_t n, const uint8_t *c, int64_t sc, const void *a, int64_t sa, const void *b, int64_t sb, void *o, int64_t so, size_t elsize);

/* ---------------- copies and casts ---------------- */
/* o[i*so] = (dst dtype) a[i*sa]; same dtype is a plain strided copy. */
void k_cast(int64_t n, const void *a, DType adt, int64_t sa, void *o, DType odt, int64_t so);
/* o[i*so] = v for every i (v converted to odt). */
void k_fill(int64_t n, void *o, DType odt, int64_t so, double v);

/* ---------------- reductions over a (outer, n, inner) contiguous view ----- */
void k_reduce_f32(KRedOp op, const float *x, int64_t outer, int64_t n, int64_t inner, float *out);
void k_reduce_f64(KRedOp op, const double *x, int64_t outer, int64_t n, int64_t inner, double *out);
void k_reduce_i64(KRedOp op, const int64_t *x, int64_t outer, int64_t n, int64_t inner, int64_t *out); /* SUM PROD MAX MIN */
/* values and first index of the max (want_max=1) or min; idx is 0-based. */
void k_argreduce_f32(int want_max, const float *x, int64_t outer, int64_t n, int64_t inner, float *vals, int64_t *idx);
void k_argreduce_f64(int want_max, const double *x, int64_t outer, int64_t n, int64_t inner, double *vals, int64_t *idx);
void k_argreduce_i64(int want_max, const int64_t *x, int64_t outer, int64_t n, int64_t inner, int64_t *vals, int64_t *idx);
/* variance with Bessel-style correction (divide by n - correction), two-pass. */
void k_var_f32(const float *x, int64_t outer, int64_t n, int64_t inner, double correction, float *out);
void k_var_f64(const double *x, int64_t outer, int64_t n, int64_t inner, double correction, double *out);

/* ---------------- softmax family over (outer, n, inner) ---------------- */
/* Numerically stable (max subtracted). log=1: log_softmax. */
void k_softmax_f32(int log, const float *x, int64_t outer, int64_t n, int64_t inner, float *y);
void k_softmax_f64(int log, const double *x, int64_t outer, int64_t n, int64_t inner, double *y);
/* softmax:     gx = y * (gy - sum(gy * y));  log_softmax: gx = gy - exp(y) * sum(gy) */
void k_softmax_backward_f32(int log, const float *y, const float *gy, int64_t outer, int64_t n, int64_t inner, float *gx);
void k_softmax_backward_f64(int log, const double *y, const double *gy, int64_t outer, int64_t n, int64_t inner, double *gx);

/* ---------------- cross-entropy, fused, logits (N, C) contiguous -------- */
/* Per-row loss as PyTorch's cross_entropy with reduction='none':
 *   loss_i = (1-ls) * (lse_i - x_i[t_i]) + ls * (lse_i - mean_c x_ic)
 * rows whose target == ignore_index get loss 0 and are not counted.
 * lse (N) is saved for backward. Returns -1 when all targets are valid,
 * else the first row whose target is out of [0, C) and != ignore_index
 * (nothing else is then guaranteed). */
int64_t k_cross_entropy_fwd_f32(const float *x, int64_t N, int64_t C, const int64_t *target, int64_t ignore_index, double label_smoothing, float *loss, float *lse);
int64_t k_cross_entropy_fwd_f64(const double *x, int64_t N, int64_t C, const int64_t *target, int64_t ignore_index, double label_smoothing, double *loss, double *lse);
/* gx_ic = g_i * (softmax_ic - (1-ls) [c == t_i] - ls / C); ignored rows get 0. */
void k_cross_entropy_bwd_f32(const float *x, const float *lse, int64_t N, int64_t C, const int64_t *target, int64_t ignore_index, double label_smoothing, const float *g, float *gx);
void k_cross_entropy_bwd_f64(const double *x, const double *lse, int64_t N, int64_t C, const int64_t *target, int64_t ignore_index, double label_smoothing, const double *g, double *gx);

/* ---------------- layer norm over the last dim C, rows contiguous -------- */
/* y = (x - mean) * rstd * w + b; w, b may be NULL. mean, rstd (rows) saved. */
void k_layernorm_fwd_f32(const float *x, const float *w, const float *b, int64_t rows, int64_t C, double eps, float *y, float *mean, float *rstd);
/* gx overwritten; gw, gb accumulated (+=) when not NULL. */
void k_layernorm_bwd_f32(const float *x, const float *w, const float *mean, const float *rstd, const float *gy, int64_t rows, int64_t C, float *gx, float *gw, float *gb);
void k_layernorm_fwd_f64(const double *x, const double *w, const double *b, int64_t rows, int64_t C, double eps, double *y, double *mean, double *rstd);
void k_layernorm_bwd_f64(const double *x, const double *w, const double *mean, const double *rstd, const double *gy, int64_t rows, int64_t C, double *gx, double *gw, double *gb);

/* ---------------- GEMM, row-major ---------------- */
/* C = alpha * op(A) @ op(B) + beta * C; op(A) is (M,K), op(B) is (K,N).
 * ta/tb nonzero: A is stored (K,M) / B stored (N,K). lda etc. are row
 * strides of the stored matrices. f32 through dnnl_sgemm (under ~1 MFLOP
 * OpenBLAS cblas_sgemm, which needs no JIT at start-up), f64 through
 * cblas_dgemm, bf16 (inputs bf16 bits, output f32) through oneDNN's matmul
 * primitive. Returns 0, or nonzero if the library call failed. */
int k_gemm_f32(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
int k_gemm_f64(int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const double *A, int64_t lda, const double *B, int64_t ldb, double beta, double *C, int64_t ldc);
int k_gemm_bf16(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* ---------------- indexing (contiguous (outer, n, inner) views) ---------- */
/* gather along the middle dim: out(o, j, i) = x(o, idx(o, j, i), i), idx has
 * shape (outer, m, inner); index_select: out(o, j, i) = x(o, idx[j], i).
 * elsize in bytes. Indices are pre-validated and non-negative. */
void k_gather(const void *x, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m, void *out, size_t elsize);
void k_index_select(const void *x, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m, void *out, size_t elsize);
/* Adjoint ops (accumulate +=) for backward, f32 and f64 (dt selects). */
void k_scatter_add(DType dt, void *gx, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m, const void *gout);
void k_index_add(DType dt, void *gx, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m, const void *gout);

/* ---------------- optimizer updates over flat f32 buffers ---------------- */
/* AdamW (decoupled weight decay; weight_decay=0 gives Adam without L2).
 * step is the 1-based step count after increment. */
void k_adamw_f32(int64_t n, float *p, const float *g, float *m, float *v, double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step);

/* buf: momentum buffer (ignored when momentum == 0, may then be NULL);
 * buf_init: first step, buf = d instead of the running average. */
void k_sgd_f32(int64_t n, float *p, const float *g, float *buf, int buf_init, const KSgdArgs *a);
void k_sgd_f64(int64_t n, double *p, const double *g, double *buf, int buf_init, const KSgdArgs *a);

/* vmax: amsgrad's running max of v, or NULL without amsgrad. */
void k_adam_f32(int64_t n, float *p, const float *g, float *m, float *v, float *vmax, const KAdamArgs *a);
void k_adam_f64(int64_t n, double *p, const double *g, double *m, double *v, double *vmax, const KAdamArgs *a);

/* sum_i |x_i|^p accumulated in double (p = INFINITY: max |x_i|, p =
 * -INFINITY: min |x_i|, NaN propagating; p = 0: count of nonzeros), for
 * gradient-norm clipping; knorm_identity(p) (kops.h) when n is 0. */
double k_norm_pow_f32(int64_t n, const float *x, double p);
double k_norm_pow_f64(int64_t n, const double *x, double p);

/* fp8.c: the fp8 recipe's casts over n contiguous elements.
 * quantize: q = saturate(fl32(x * scale)) in fmt (+-inf and out of range
 * to +-max, NaN stays NaN); dequantize: out = fl32(decode(q) * scale_inv);
 * amax: max |x| (0 when n is 0, NaN when x holds a NaN). */
void k_fp8_quantize_f32(KFp8Fmt fmt, int64_t n, const float *x, float scale, uint8_t *q);
void k_fp8_dequantize_f32(KFp8Fmt fmt, int64_t n, const uint8_t *q, float scale_inv, float *out);
float k_fp8_amax_f32(int64_t n, const float *x);

/* ---------------- random fills (rng.c) ---------------- */
/* n contiguous elements of dt at out from the stream (r->seed, r->offset),
 * read in order on this thread (core/rng.c's top comment). */
void k_rng_fill(const KRngFill *r, DType dt, int64_t n, void *out);

/* ---------------- 2-D convolution (conv.c) and max pooling (pool.c), NCHW -- */
int k_conv2d_fwd(DType dt, const KConv2d *g, const void *x, const void *w, const void *b, void *y); /* b may be NULL */
/* Gradients from gy: gx (input), gw (weight), gb (bias), each overwritten;
 * pass NULL for those not wanted (x is read only for gw). */
int k_conv2d_bwd(DType dt, const KConv2d *g, const void *x, const void *w, const void *gy, void *gx, void *gw, void *gb);
/* F32 uses oneDNN's convolution primitives where they have a JIT kernel,
 * else im2col + GEMM; off forces im2col (tests, benchmarks). Returns the
 * previous setting. */
int k_conv2d_use_dnnl(int on);
void k_max_pool2d_fwd_f32(const KPool2d *g, const float *x, float *y, int64_t *idx, uint8_t *code);
void k_max_pool2d_fwd_f64(const KPool2d *g, const double *x, double *y, int64_t *idx, uint8_t *code);
void k_max_pool2d_bwd_f32(const KPool2d *g, const float *gy, const int64_t *idx, const uint8_t *code, float *gx);
void k_max_pool2d_bwd_f64(const KPool2d *g, const double *gy, const int64_t *idx, const uint8_t *code, double *gx);

/* ---------------- fused scaled-dot-product attention (attention.c) -------- */
int k_attention_fwd_f32(const KAttn *a, const float *q, const float *k, const float *v, float *o, float *lse);
int k_attention_fwd_f64(const KAttn *a, const double *q, const double *k, const double *v, double *o, double *lse);
int k_attention_bwd_f32(const KAttn *a, const float *q, const float *k, const float *v, const float *o,
                        const float *lse, const float *go, float *gq, float *gk, float *gv);
int k_attention_bwd_f64(const KAttn *a, const double *q, const double *k, const double *v, const double *o,
                        const double *lse, const double *go, double *gq, double *gk, double *gv);

/* ---------------- implementation helper for the kernels/cpu sources ------ */
/* for (i = 0; i < count; i++) BODY, in an OpenMP team only when `work`
 * (elements touched) >= KERNEL_PAR_MIN, so small calls never pay for a
 * parallel region. BODY must not depend on iteration order. */
#define KERNEL_FOR(i, count, work, ...)                                   \
    do {                                                                  \
        const int64_t kf_count_ = (int64_t)(count);                       \
        if ((int64_t)(work) >= KERNEL_PAR_MIN && kf_count_ > 1) {         \
            _Pragma("omp parallel for schedule(static)")                  \
            for (int64_t i = 0; i < kf_count_; i++) { __VA_ARGS__; }      \
        } else {                                                          \
            for (int64_t i = 0; i < kf_count_; i++) { __VA_ARGS__; }      \
        }                                                                 \
    } while (0)

#endif
