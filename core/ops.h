/* ops.h: tensor operations of the core runtime, autograd-aware. Dims are
 * 0-based here (negatives count from the end); the Lua bindings convert from
 * Lua's 1-based positions. All return new references or NULL with an error
 * naming the op, shapes and dtypes. */
#ifndef ACCEL_OPS_H
#define ACCEL_OPS_H

#include "tensor.h"
#include "autograd.h"
#include "../kernels/kops.h"

/* ---- elementwise (ops_elementwise.c) ---- */
Tensor *op_binary(KBinOp op, Tensor *a, Tensor *b);
/* a op s (scalar_lhs: s op a). is_int: s came from a Lua integer. */
Tensor *op_binary_scalar(KBinOp op, Tensor *a, double s, bool is_int, bool scalar_lhs);
int op_binary_(KBinOp op, Tensor *a, Tensor *b);       /* a = a op b, in place */
int op_binary_scalar_(KBinOp op, Tensor *a, double s, bool is_int); /* a = a op s, in place */
Tensor *op_unary(KUnOp op, Tensor *a, double p1, double p2);
int op_unary_(KUnOp op, Tensor *a, double p1, double p2);
Tensor *op_where(Tensor *cond, Tensor *a, Tensor *b);
/* torch.clamp(x, min, max) with tensor bounds (NULL: none; broadcast; NaN propagates) */
Tensor *op_clamp_tensors(Tensor *x, Tensor *lo, Tensor *hi);
Tensor *op_masked_fill(Tensor *a, Tensor *mask, double v);
int op_masked_fill_(Tensor *a, Tensor *mask, double v);
Tensor *op_cast(Tensor *a, DType dt); /* differentiable dtype change */
Tensor *op_round_decimals(Tensor *x, int decimals); /* torch.round(x, decimals=d) */
const char *kbin_name(KBinOp op);
/* 0, or -1 with torch's error where op refuses a bool operand (sub) or two (floor_divide, remainder, fmod, pow) */
int op_check_bool_operands(KBinOp op, DType a, DType b);
const char *kun_name(KUnOp op);

/* ---- reductions (ops_reduce.c) ---- */
/* dims: list of 0-based dims; ndims 0 = all. */
Tensor *op_reduce(KRedOp op, Tensor *a, const int *dims, int ndims, bool keepdim);
Tensor *op_max_all(Tensor *a, bool want_max); /* t:max() / t:min(): a 0-d tensor */
/* max/min along one dim: values and indices. */
int op_max_dim(Tensor *a, int dim, bool keepdim, bool want_max, Tensor **values, Tensor **indices);
Tensor *op_argmax(Tensor *a, int dim, bool keepdim, bool want_max, bool all);
/* var, std and norm of bf16 / fp16 run in float32 and round once (as torch) */
Tensor *op_var(Tensor *a, const int *dims, int ndims, double correction, bool keepdim);
/* sqrt(var), with a gradient of 0 where it is 0 */
Tensor *op_std(Tensor *a, const int *dims, int ndims, double correction, bool keepdim);
Tensor *op_norm(Tensor *a, double p, const int *dims, int ndims, bool keepdim);

/* ---- linear algebra (ops_matmul.c) ---- */
Tensor *op_matmul(Tensor *a, Tensor *b);
Tensor *op_linear(Tensor *x, Tensor *w, Tensor *b); /* x @ w^T + b, b may be NULL */

/* ---- nn functions (ops_nn.c) ---- */
Tensor *op_softmax(Tensor *a, int dim, bool log);
/* reduction: 0 none, 1 mean, 2 sum */
Tensor *op_cross_entropy(Tensor *logits, Tensor *target, int64_t ignore_index, double label_smoothing, int reduction);
Tensor *op_layer_norm(Tensor *x, const int64_t *nshape, int nnd, Tensor *w, Tensor *b, double eps);

/* ---- indexing and shape (ops_index.c) ---- */
Tensor *op_gather(Tensor *a, int dim, Tensor *index);
Tensor *op_index_select(Tensor *a, int dim, Tensor *index);
Tensor *op_scatter_add(Tensor *a, int dim, Tensor *index, Tensor *src);   /* a with src added at index (per element) */
Tensor *op_index_add(Tensor *a, int dim, Tensor *index, Tensor *source);  /* a with source's slices added at index */
Tensor *op_cat(Tensor **ts, int n, int dim);
Tensor *op_stack(Tensor **ts, int n, int dim);
Tensor *op_tril(Tensor *a, int64_t k, bool upper);
Tensor *op_embedding(Tensor *weight, Tensor *index);

/* ---- random (rng.c) ---- */
void rng_seed(uint64_t seed);
uint64_t rng_get_seed(void);
void rng_get_state(uint64_t state[2]);
void rng_set_state(const uint64_t state[2]);
Tensor *rng_rand(const int64_t *shape, int ndim, DType dt);
Tensor *rng_randn(const int64_t *shape, int ndim, DType dt);
Tensor *rng_randint(int64_t lo, int64_t hi, const int64_t *shape, int ndim, DType dt);
/* The same, made and filled on dev (its backend's rng_fill; the values are
 * the CPU's, see rng.c). */
Tensor *rng_rand_on(const int64_t *shape, int ndim, DType dt, Device dev);
Tensor *rng_randn_on(const int64_t *shape, int ndim, DType dt, Device dev);
Tensor *rng_randint_on(int64_t lo, int64_t hi, const int64_t *shape, int ndim, DType dt, Device dev);
Tensor *rng_randperm(int64_t n, DType dt);
/* randperm from the stream (seed, offset blocks), global state untouched */
Tensor *rng_randperm_at(uint64_t seed, uint64_t offset, int64_t n, DType dt);
int rng_uniform_(Tensor *t, double lo, double hi);
int rng_normal_(Tensor *t, double mean, double std);
int rng_bernoulli_mask_(Tensor *t, double p); /* t = (u < 1-p) / (1-p): dropout mask */

/* ---- convolution and pooling, NCHW (ops_conv.c) ---- */
/* x (N, C, H, W) or unbatched (C, H, W), w (O, C/groups, kH, kW), b (O) or
 * NULL; stride, padding, dilation as (h, w) pairs. */
Tensor *op_conv2d(Tensor *x, Tensor *w, Tensor *b, const int64_t stride[2], const int64_t padding[2],
                  const int64_t dilation[2], int64_t groups);
/* The same with separate top/left (pad_lo) and bottom/right (pad_hi) padding. */
Tensor *op_conv2d_padded(Tensor *x, Tensor *w, Tensor *b, const int64_t stride[2], const int64_t pad_lo[2],
                         const int64_t pad_hi[2], const int64_t dilation[2], int64_t groups);
/* Max over each window; *indices (when indices is not NULL) receives the
 * int64 flat positions h*W + w of the maxima within their input planes. */
Tensor *op_max_pool2d(Tensor *x, const int64_t kernel[2], const int64_t stride[2], const int64_t padding[2],
                      const int64_t dilation[2], bool ceil_mode, Tensor **indices);

/* ---- fused attention (ops_attention.c) ---- */
/* softmax(scale q k^T [causal]) v for q (B, H, L, D) or (N, L, D), k, v with
 * the same batch dims; the (L, S) scores are never formed. */
Tensor *op_scaled_dot_product_attention(Tensor *q, Tensor *k, Tensor *v, double scale, bool causal);

#endif
