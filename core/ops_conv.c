/* ops_conv.c: 2-D convolution and max pooling (NCHW, PyTorch semantics),
 * with shape checks and autograd, over the kernels of kernels/cpu/conv.c and
 * pool.c.
 *
 * Decisions where PyTorch leaves room or differs:
 *  - Input, weight and bias must share a dtype (under autocast all three
 *    are cast to the autocast dtype, as torch); the bias is added in the
 *    float32 accumulator. float32 / float64 compute as themselves, bfloat16
 *    runs its GEMMs in bf16 with float32 accumulation, other float dtypes
 *    compute in float32; the result has the input's dtype.
 *  - Padding may be asymmetric (pad_lo = top/left, pad_hi = bottom/right)
 *    through op_conv2d_padded, which is how padding="same" with an even
 *    reach pads (the extra row/column goes bottom/right, as PyTorch does).
 *  - The backward passes are not themselves differentiable (no double
 *    backward through conv2d / max_pool2d).
 *  - max_pool2d indices are int64 flat positions h*W + w within each input
 *    plane, as PyTorch's return_indices; for its own backward it keeps a
 *    uint8 position within the window instead (8x less memory traffic). */
#include "ops.h"
#include "backend/backend.h"
#include "precision.h"
#include "profile.h"
#include <string.h>

/* The kernels' dtype for a float input dtype, and their accumulator dtype. */
static DType conv_kernel_dtype(DType dt) { return dt == DT_F64 || dt == DT_BF16 ? dt : DT_F32; }
static DType conv_acc_dtype(DType kdt) { return kdt == DT_F64 ? DT_F64 : DT_F32; }

/* ---------------- conv2d ---------------- */

/* How far a window of k taps with dilation d reaches, d * (k - 1) + 1; -1
 * when k < 1 or it passes 2^63. */
static int64_t window_reach(int64_t k, int64_t d) { return k < 1 ? -1 : size_add(size_mul(d, k - 1), 1); }

/* The geometry of x (N, C, H, W) * w (O, C/groups, KH, KW), after the checks. */
typedef struct {
    KConv2d g;
    int64_t pad_lo[2], pad_hi[2];
} ConvSpec;

static int conv_check_params(const int64_t stride[2], const int64_t lo[2], const int64_t hi[2], const int64_t dil[2],
                             int64_t groups) {
    if (stride[0] < 1 || stride[1] < 1)
        return accel_fail_int("conv2d: stride must be positive, got (%lld, %lld)", (long long)stride[0], (long long)stride[1]);
    if (lo[0] < 0 || lo[1] < 0 || hi[0] < 0 || hi[1] < 0)
        return accel_fail_int("conv2d: padding must be non-negative, got (%lld, %lld)", (long long)(lo[0] < 0 ? lo[0] : hi[0]),
                              (long long)(lo[1] < 0 ? lo[1] : hi[1]));
    if (dil[0] < 1 || dil[1] < 1)
        return accel_fail_int("conv2d: dilation must be positive, got (%lld, %lld)", (long long)dil[0], (long long)dil[1]);
    if (groups < 1) return accel_fail_int("conv2d: groups must be a positive integer, got %lld", (long long)groups);
    return 0;
}

static int conv_check_tensors(const Tensor *x, const Tensor *w, const Tensor *b, int64_t groups) {
    if (x->ndim != 4)
        return accel_fail_int("conv2d: expected input of shape (N, C, H, W) or (C, H, W), got %s", tensor_shape_str(x));
    if (w->ndim != 4)
        return accel_fail_int("conv2d: weight must have shape (out_channels, in_channels / groups, kH, kW), got %s",
                              tensor_shape_str(w));
    if (!dtype_is_float(x->dtype) || !dtype_is_float(w->dtype))
        return accel_fail_int("conv2d: input and weight must be floating point, got %s and %s", dtype_name(x->dtype),
                              dtype_name(w->dtype));
    if (x->dtype != w->dtype)
        return accel_fail_int("conv2d: input (%s) and weight (%s) must have the same dtype", dtype_name(x->dtype),
                              dtype_name(w->dtype));
    if (b && b->dtype != x->dtype)
        return accel_fail_int("conv2d: bias (%s) must have the input's dtype (%s)", dtype_name(b->dtype),
                              dtype_name(x->dtype));
    if (x->device.type != w->device.type || (b && b->device.type != x->device.type))
        return accel_fail_int("conv2d: input, weight and bias must be on the same device");
    const int64_t C = x->shape[1], O = w->shape[0];
    if (C % groups != 0)
        return accel_fail_int("conv2d: input channels (%lld, input %s) are not divisible by groups (%lld)", (long long)C,
                              tensor_shape_str(x), (long long)groups);
    if (O % groups != 0)
        return accel_fail_int("conv2d: out_channels (%lld, weight %s) are not divisible by groups (%lld)", (long long)O,
                              tensor_shape_str(w), (long long)groups);
    if (size_mul(w->shape[1], groups) != C)
        return accel_fail_int("conv2d: weight %s with groups=%lld expects input with %lld channels, but input %s has %lld",
                              tensor_shape_str(w), (long long)groups, (long long)size_mul(w->shape[1], groups),
                              tensor_shape_str(x), (long long)C);
    if (b && (b->ndim != 1 || b->shape[0] != O))
        return accel_fail_int("conv2d: bias must have shape [%lld] (out_channels of weight %s), got %s", (long long)O,
                              tensor_shape_str(w), tensor_shape_str(b));
    return 0;
}

static int conv_spec(const Tensor *x, const Tensor *w, const int64_t stride[2], const int64_t lo[2], const int64_t hi[2],
                     const int64_t dil[2], int64_t groups, ConvSpec *s) {
    KConv2d *g = &s->g;
    *g = (KConv2d){.N = x->shape[0], .C = x->shape[1], .H = x->shape[2], .W = x->shape[3], .O = w->shape[0],
                   .KH = w->shape[2], .KW = w->shape[3], .sh = stride[0], .sw = stride[1], .ph = lo[0], .pw = lo[1],
                   .dh = dil[0], .dw = dil[1], .groups = groups};
    if (g->KH < 1 || g->KW < 1) /* (a zero-sized weight's window has no reach) */
        return accel_fail_int("conv2d: kernel size should be greater than zero, got weight %s", tensor_shape_str(w));
    const int64_t reach_h = window_reach(g->KH, g->dh), reach_w = window_reach(g->KW, g->dw);
    const int64_t ph = size_add(size_add(g->H, lo[0]), hi[0]), pw = size_add(size_add(g->W, lo[1]), hi[1]);
    if (reach_h < 0 || reach_w < 0 || ph < 0 || pw < 0)
        return accel_fail_int("conv2d: input %s with kernel (%lld x %lld), padding and dilation (%lld, %lld) spans more "
                              "than 2^63 positions", tensor_shape_str(x), (long long)g->KH, (long long)g->KW,
                              (long long)g->dh, (long long)g->dw);
    if (g->KH < 1 || g->KW < 1 || reach_h > ph || reach_w > pw)
        return accel_fail_int("conv2d: kernel (%lld x %lld, dilation (%lld, %lld)) is larger than the padded input "
                              "(%lld x %lld) of input %s",
                              (long long)g->KH, (long long)g->KW, (long long)g->dh, (long long)g->dw, (long long)ph,
                              (long long)pw, tensor_shape_str(x));
    g->OH = (ph - reach_h) / g->sh + 1;
    g->OW = (pw - reach_w) / g->sw + 1;
    /* the output, and the (C/groups * KH * KW + 1, OH * OW) column buffer of the kernels */
    const int64_t oshape[4] = {g->N, g->O, g->OH, g->OW};
    const int64_t col_rows = size_add(size_mul(g->C / groups, size_mul(g->KH, g->KW)), 1);
    if (shape_check("conv2d", oshape, 4, (int)DT_F64) < 0) return -1;
    if (size_mul(size_mul(col_rows, size_mul(g->OH, g->OW)), (int64_t)sizeof(double)) < 0)
        return accel_fail_int("conv2d: input %s with weight %s needs an im2col buffer of more than 2^63 bytes",
                              tensor_shape_str(x), tensor_shape_str(w));
    memcpy(s->pad_lo, lo, sizeof s->pad_lo);
    memcpy(s->pad_hi, hi, sizeof s->pad_hi);
    return 0;
}

static int kernel_failed(const char *what, const KConv2d *g) {
    return accel_fail_int("conv2d: the %s kernel failed (out of memory or a oneDNN error) for input [%lld, %lld, %lld, %lld] "
                          "and weight [%lld, %lld, %lld, %lld]",
                          what, (long long)g->N, (long long)g->C, (long long)g->H, (long long)g->W, (long long)g->O,
                          (long long)(g->C / g->groups), (long long)g->KH, (long long)g->KW);
}

/* Saved: x, w (kernel dtype, contiguous). i[]: the KConv2d fields. */
_Static_assert(sizeof(KConv2d) <= sizeof(((AGNode *)0)->i), "KConv2d must fit in AGNode.i");
static void spec_store(AGNode *n, const KConv2d *g) {
    const int64_t v[16] = {g->N, g->C, g->H, g->W, g->O, g->KH, g->KW, g->OH, g->OW, g->sh, g->sw, g->ph, g->pw, g->dh, g->dw, g->groups};
    memcpy(n->i, v, sizeof v);
}

static KConv2d spec_load(const AGNode *n) {
    const int64_t *v = n->i;
    return (KConv2d){.N = v[0], .C = v[1], .H = v[2], .W = v[3], .O = v[4], .KH = v[5], .KW = v[6], .OH = v[7],
                     .OW = v[8], .sh = v[9], .sw = v[10], .ph = v[11], .pw = v[12], .dh = v[13], .dw = v[14], .groups = v[15]};
}

static int bw_conv2d(AGNode *n, Tensor *gout, Tensor **gin) {
    Tensor *x = ag_saved(n, 0), *w = ag_saved(n, 1);
    if (!x || !w) return -1;
    const KConv2d g = spec_load(n);
    const DType kdt = x->dtype, adt = conv_acc_dtype(kdt);
    const bool need_x = ag_input_needs_grad(n, 0), need_w = ag_input_needs_grad(n, 1);
    const bool need_b = n->n_in > 2 && ag_input_needs_grad(n, 2);
    Tensor *gy = tensor_contiguous_as(gout, kdt);
    Tensor *gx = gy && need_x ? tensor_empty(x->shape, 4, adt, x->device) : NULL;
    Tensor *gw = gy && need_w ? tensor_empty(w->shape, 4, adt, w->device) : NULL;
    Tensor *gb = gy && need_b ? tensor_empty(&g.O, 1, adt, w->device) : NULL;
    int rc = !gy || (need_x && !gx) || (need_w && !gw) || (need_b && !gb) ? -1 : 0;
    if (rc == 0 && backend_for(x->device)->conv2d_bwd(kdt, &g, tensor_data(x), tensor_data(w), tensor_data(gy),
                                                      gx ? tensor_data(gx) : NULL, gw ? tensor_data(gw) : NULL,
                                                      gb ? tensor_data(gb) : NULL) != 0)
        rc = kernel_failed("backward", &g);
    tensor_release(gy);
    if (rc < 0) {
        tensor_release(gx), tensor_release(gw), tensor_release(gb);
        return -1;
    }
    gin[0] = gx, gin[1] = gw;
    if (n->n_in > 2) gin[2] = gb;
    return 0;
}

/* x (N, C, H, W) and w of one dtype, already checked; b any float dtype or NULL. */
static Tensor *conv2d_forward(Tensor *xin, Tensor *win, Tensor *bin, const ConvSpec *s) {
    const DType kdt = conv_kernel_dtype(xin->dtype), adt = conv_acc_dtype(kdt);
    const KConv2d *g = &s->g;
    Tensor *x = tensor_contiguous_as(xin, kdt), *w = x ? tensor_contiguous_as(win, kdt) : NULL;
    Tensor *b = w && bin ? tensor_contiguous_as(bin, adt) : NULL;
    const int64_t oshape[4] = {g->N, g->O, g->OH, g->OW};
    Tensor *y = w && (b || !bin) ? tensor_empty(oshape, 4, adt, xin->device) : NULL;
    if (y && backend_for(y->device)->conv2d_fwd(kdt, g, tensor_data(x), tensor_data(w), b ? tensor_data(b) : NULL,
                                                tensor_data(y)) != 0) {
        kernel_failed("forward", g);
        tensor_release(y);
        y = NULL;
    }
    if (y) {
        Tensor *ins[3] = {xin, win, bin};
        AGNode *n = ag_record("conv2d", bw_conv2d, y, ins, bin ? 3 : 2);
        if (n) {
            spec_store(n, g);
            ag_save(n, x), ag_save(n, w);
        }
    }
    tensor_release(x), tensor_release(w), tensor_release(b);
    return y;
}

static Tensor *conv2d_impl(Tensor *x, Tensor *w, Tensor *b, const int64_t stride[2], const int64_t lo[2],
                           const int64_t hi[2], const int64_t dil[2], int64_t groups) {
    if (conv_check_params(stride, lo, hi, dil, groups) < 0) return NULL;
    if (x->ndim == 3) { /* unbatched (C, H, W) */
        Tensor *x4 = tensor_unsqueeze(x, 0);
        Tensor *y4 = x4 ? conv2d_impl(x4, w, b, stride, lo, hi, dil, groups) : NULL;
        Tensor *y = y4 ? tensor_squeeze(y4, 0) : NULL;
        tensor_release(x4), tensor_release(y4);
        return y;
    }
    ConvSpec s;
    if (conv_check_tensors(x, w, b, groups) < 0 || conv_spec(x, w, stride, lo, hi, dil, groups, &s) < 0) return NULL;
    return tensor_to_dtype_owned(conv2d_forward(x, w, b, &s), x->dtype);
}

Tensor *op_conv2d_padded(Tensor *x, Tensor *w, Tensor *b, const int64_t stride[2], const int64_t pad_lo[2],
                         const int64_t pad_hi[2], const int64_t dilation[2], int64_t groups) {
    PROF_SCOPE("conv2d", PROF_FORWARD, x, w);
    if (tensor_check_device("conv2d", x, w) < 0 || tensor_check_device("conv2d", x, b) < 0) return NULL;
    if (precision_autocast() == DT_F32) return conv2d_impl(x, w, b, stride, pad_lo, pad_hi, dilation, groups);
    Tensor *cx = precision_autocast_input(x), *cw = cx ? precision_autocast_input(w) : NULL;
    Tensor *cb = cw && b ? precision_autocast_input(b) : NULL; /* as torch, the bias is cast too */
    Tensor *y = cw && (cb || !b) ? conv2d_impl(cx, cw, cb, stride, pad_lo, pad_hi, dilation, groups) : NULL;
    tensor_release(cx), tensor_release(cw), tensor_release(cb);
    return y;
}

Tensor *op_conv2d(Tensor *x, Tensor *w, Tensor *b, const int64_t stride[2], const int64_t padding[2],
                  const int64_t dilation[2], int64_t groups) {
    return op_conv2d_padded(x, w, b, stride, padding, padding, dilation, groups);
}

/* ---------------- max_pool2d ---------------- */

/* The output length, 0 when the window does not fit, -1 when the sizes pass 2^63. */
static int64_t pool_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
    const int64_t padded = size_add(in, size_mul(2, p)), reach = window_reach(k, d);
    if (padded < 0 || reach < 0) return -1;
    const int64_t span = padded - reach;
    if (span < 0) return 0;
    int64_t o = span / s + (ceil_mode && span % s != 0) + 1; /* ceil without span + s - 1 overflowing */
    if (ceil_mode && (o - 1) * s >= in + p) o--; /* the last window must start inside the input or left padding */
    return o;
}

static int pool_check(const Tensor *x, const int64_t k[2], const int64_t s[2], const int64_t p[2], const int64_t d[2]) {
    if (x->ndim != 3 && x->ndim != 4)
        return accel_fail_int("max_pool2d: expected input of shape (N, C, H, W) or (C, H, W), got %s", tensor_shape_str(x));
    if (x->dtype == DT_BOOL) return accel_fail_int("max_pool2d: input must be a number dtype, got bool (as PyTorch)");
    if (k[0] < 1 || k[1] < 1)
        return accel_fail_int("max_pool2d: kernel_size must be positive, got (%lld, %lld)", (long long)k[0], (long long)k[1]);
    if (s[0] < 1 || s[1] < 1)
        return accel_fail_int("max_pool2d: stride must be positive, got (%lld, %lld)", (long long)s[0], (long long)s[1]);
    if (d[0] < 1 || d[1] < 1)
        return accel_fail_int("max_pool2d: dilation must be positive, got (%lld, %lld)", (long long)d[0], (long long)d[1]);
    if (p[0] < 0 || p[1] < 0 || p[0] > k[0] / 2 || p[1] > k[1] / 2)
        return accel_fail_int("max_pool2d: padding (%lld, %lld) must be non-negative and at most half the kernel size "
                              "(%lld, %lld)",
                              (long long)p[0], (long long)p[1], (long long)k[0], (long long)k[1]);
    return 0;
}

/* Integer inputs are pooled in float64: exact for int32 / uint8, and for
 * int64 while every value's magnitude is below 2^53, which is checked. */
static int pool_int_check(const Tensor *x) {
    if (x->dtype != DT_I64 || x->numel == 0) return 0;
    Tensor *hi = op_reduce(KR_MAX, (Tensor *)x, NULL, 0, false), *lo = hi ? op_reduce(KR_MIN, (Tensor *)x, NULL, 0, false) : NULL;
    const double limit = 9007199254740992.0; /* 2^53: strictly below it, since 2^53 + 1 reads back as 2^53 */
    const bool ok = lo && tensor_item(hi) < limit && tensor_item(lo) > -limit;
    tensor_release(hi), tensor_release(lo);
    if (!ok && lo) return accel_fail_int("max_pool2d: int64 input holds values beyond +-2^53, which this build pools inexactly (magnitudes below 2^53 only)");
    return ok ? 0 : -1;
}

/* Saved: where the maxima sit, as window codes (uint8) or, for windows of
 * more than 256 elements, flat indices (int64). i[]: the KPool2d fields. */
_Static_assert(sizeof(KPool2d) <= sizeof(((AGNode *)0)->i), "KPool2d must fit in AGNode.i");
static int bw_max_pool2d(AGNode *n, Tensor *gout, Tensor **gin) {
    Tensor *where = ag_saved(n, 0);
    if (!where) return -1;
    KPool2d g;
    memcpy(&g, n->i, sizeof g);
    const bool codes = where->dtype == DT_U8;
    const int64_t *idx = codes ? NULL : tensor_data(where);
    const uint8_t *code = codes ? tensor_data(where) : NULL;
    const DType cdt = n->edges[0].dtype == DT_F64 ? DT_F64 : DT_F32;
    Tensor *gy = tensor_contiguous_as(gout, cdt);
    Tensor *gx = gy ? tensor_empty(n->edges[0].shape, n->edges[0].ndim, cdt, gy->device) : NULL;
    if (gx) backend_for(gx->device)->max_pool2d_bwd(cdt, &g, tensor_data(gy), idx, code, tensor_data(gx));
    tensor_release(gy);
    gin[0] = gx;
    return gx ? 0 : -1;
}

/* The output shape of x pooled by g. */
static void pool_shape(const Tensor *x, const KPool2d *g, int64_t out[4]) {
    memcpy(out, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    out[x->ndim - 2] = g->OH, out[x->ndim - 1] = g->OW;
}

Tensor *op_max_pool2d(Tensor *xin, const int64_t kernel[2], const int64_t stride[2], const int64_t padding[2],
                      const int64_t dilation[2], bool ceil_mode, Tensor **indices) {
    PROF_SCOPE("max_pool2d", PROF_FORWARD, xin, NULL);
    if (indices) *indices = NULL;
    if (pool_check(xin, kernel, stride, padding, dilation) < 0 || pool_int_check(xin) < 0) return NULL;
    const int nd = xin->ndim;
    KPool2d g = {.H = xin->shape[nd - 2], .W = xin->shape[nd - 1], .KH = kernel[0], .KW = kernel[1], .sh = stride[0],
                 .sw = stride[1], .ph = padding[0], .pw = padding[1], .dh = dilation[0], .dw = dilation[1]};
    g.NC = shape_numel(xin->shape, nd - 2);
    g.OH = pool_out_size(g.H, g.KH, g.sh, g.ph, g.dh, ceil_mode);
    g.OW = pool_out_size(g.W, g.KW, g.sw, g.pw, g.dw, ceil_mode);
    if (g.OH < 0 || g.OW < 0)
        return accel_fail("max_pool2d: input %s with kernel (%lld, %lld) and dilation (%lld, %lld) spans more than 2^63 "
                          "positions", tensor_shape_str(xin), (long long)g.KH, (long long)g.KW, (long long)g.dh,
                          (long long)g.dw);
    if (g.OH < 1 || g.OW < 1)
        return accel_fail("max_pool2d: input %s is too small for kernel (%lld, %lld) with padding (%lld, %lld) and dilation "
                          "(%lld, %lld): the output would be %lld x %lld",
                          tensor_shape_str(xin), (long long)g.KH, (long long)g.KW, (long long)g.ph, (long long)g.pw,
                          (long long)g.dh, (long long)g.dw, (long long)g.OH, (long long)g.OW);
    const DType cdt = xin->dtype == DT_F64 || !dtype_is_float(xin->dtype) ? DT_F64 : DT_F32;
    int64_t oshape[4];
    pool_shape(xin, &g, oshape);
    /* backward needs codes (or, for huge windows, the flat indices) */
    const bool track = ag_needs_grad(&xin, 1), small = g.KH <= 256 && g.KW <= 256 && g.KH * g.KW <= 256;
    const bool want_idx = indices || (track && !small), want_code = track && small;
    Tensor *x = tensor_contiguous_as(xin, cdt), *y = x ? tensor_empty(oshape, nd, cdt, x->device) : NULL;
    Tensor *idx = y && want_idx ? tensor_empty(oshape, nd, DT_I64, x->device) : NULL;
    Tensor *code = y && want_code ? tensor_empty(oshape, nd, DT_U8, x->device) : NULL;
    if (y && (idx || !want_idx) && (code || !want_code)) {
        int64_t *ip = idx ? tensor_data(idx) : NULL;
        uint8_t *cp = code ? tensor_data(code) : NULL;
        backend_for(y->device)->max_pool2d_fwd(cdt, &g, tensor_data(x), tensor_data(y), ip, cp);
        AGNode *n = ag_record("max_pool2d", bw_max_pool2d, y, &xin, 1);
        if (n) {
            memcpy(n->i, &g, sizeof g);
            ag_save(n, code ? code : idx);
        }
    } else {
        tensor_release(y);
        y = NULL;
    }
    tensor_release(x), tensor_release(code);
    y = tensor_to_dtype_owned(y, xin->dtype);
    if (y && indices) *indices = tensor_retain(idx);
    tensor_release(idx);
    return y;
}
