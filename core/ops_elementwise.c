/* ops_elementwise.c: broadcasting binary ops, unary math, where /
 * masked_fill and differentiable casts, with PyTorch's type promotion and
 * their backward rules. Arithmetic runs in a compute dtype (f32, f64 or
 * i64); other dtypes are converted on the way in and out. */
#include "ops.h"
#include "backend/backend.h"
#include "backend/iter.h"
#include "profile.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const bin_names[KB_COUNT] = {"add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne",
                                                "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
                                                "floor_divide", "remainder", "fmod", "atan2", "bitwise_and",
                                                "bitwise_or", "bitwise_xor", "bitwise_left_shift",
                                                "bitwise_right_shift"};
static const char *const un_names[KU_COUNT] = {"neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu",
                                               "gelu", "gelu", "silu", "abs", "sin", "cos", "square", "reciprocal",
                                               "sign", "clamp", "pow", "pow", "log1p", "expm1", "floor", "ceil",
                                               "round", "trunc", "erf", "leaky_relu", "logical_not", "tan", "asin",
                                               "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log2",
                                               "log10", "erfc", "lgamma", "digamma", "bitwise_not"};

const char *kbin_name(KBinOp op) { return bin_names[op]; }
const char *kun_name(KUnOp op) { return un_names[op]; }

static DType compute_dtype(DType dt) {
    if (dt == DT_F64) return DT_F64;
    return dtype_is_float(dt) ? DT_F32 : DT_I64;
}

/* Result dtype of a binary op on tensors a, b. */
static DType binary_result_dtype(KBinOp op, const Tensor *a, const Tensor *b) {
    if (kbin_is_compare(op)) return DT_BOOL;
    DType r = tensor_result_dtype(a, b);
    if ((op == KB_DIV || op == KB_ATAN2) && !dtype_is_float(r)) return dtype_default_float();
    return r;
}

/* t itself if already of dtype dt, else a contiguous converted copy (no autograd). */
static Tensor *as_dtype_plain(Tensor *t, DType dt) {
    if (t->dtype == dt) return tensor_retain(t);
    Tensor *c = tensor_empty(t->shape, t->ndim, dt, t->device);
    if (c) tensor_copy_strided(c, t);
    return c;
}

/* as_dtype_plain, taking over the caller's reference to t (NULL passes through). */
static Tensor *as_dtype_plain_owned(Tensor *t, DType dt) {
    if (!t || t->dtype == dt) return t;
    Tensor *c = as_dtype_plain(t, dt);
    tensor_release(t);
    return c;
}

static int check_same_device(Tensor *a, Tensor *b, const char *op) { return tensor_check_device(op, a, b); }

/* PyTorch reads a 0-dim CPU tensor in an op on another device as a scalar
 * (`x_cuda * torch.tensor(0.5)`): t moved to dev when it is one (a recorded
 * copy: its gradient returns to the CPU), else t itself; a new reference. */
static Tensor *cpu_scalar_to(Tensor *t, Device dev) {
    if (!t || t->ndim != 0 || t->device.type != DEV_CPU || dev.type == DEV_CPU) return t ? tensor_retain(t) : NULL;
    return tensor_to(t, dev);
}

/* The device of the first operand not on the CPU (the CPU when none). */
static Device op_device(Tensor *const *ts, int n) {
    for (int k = 0; k < n; k++)
        if (ts[k] && ts[k]->device.type != DEV_CPU) return ts[k]->device;
    return (Device){DEV_CPU, 0};
}

/* out = a op b over out's shape; a, b already of compute dtype cdt; out of
 * cdt (or bool for comparisons). */
/* Stride for a one-run fast path: 1 for a contiguous operand covering all
 * n elements, 0 for a single broadcast element, -1 for anything else. */
static int64_t run_stride(const Tensor *t, int64_t n) {
    if (t->numel == n && tensor_is_contiguous(t)) return 1;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] != 1 && t->stride[d] != 0) return -1;
    return 0; /* one element, possibly expanded */
}

static void binary_into(KBinOp op, DType cdt, Tensor *out, Tensor *a, Tensor *b) {
    int64_t sa = run_stride(a, out->numel), sb = run_stride(b, out->numel);
    StridedIter it;
    bool one_run = sa >= 0 && sb >= 0 && tensor_is_contiguous(out);
    iter_launch(&it, out, (const Tensor *[]){a, b}, 2, one_run ? (const int64_t[]){sa, sb} : NULL);
    backend_for(out->device)->binary(op, cdt, &it);
}

/* Integer floor division, remainder and fmod by zero are errors, as
 * PyTorch's ZeroDivisionError (a float division gives inf / nan instead); b
 * is the divisor in its compute dtype, n the number of quotients (none, an
 * empty result, divides nothing: then no divisor is refused, as torch).
 * 0 or -1. */
static int check_int_divisor(KBinOp op, Tensor *b, int64_t n) {
    if ((op != KB_FLOORDIV && op != KB_REMAINDER && op != KB_FMOD) || dtype_is_float(b->dtype) || n == 0) return 0;
    Tensor *z = op_binary_scalar(KB_EQ, b, 0, true, false);
    Tensor *any = z ? op_reduce(KR_MAX, z, NULL, 0, false) : NULL;
    int rc = !any ? -1 : tensor_item(any) != 0 ? accel_fail_int("%s: integer division by zero (ZeroDivisionError)",
                                                               kbin_name(op)) : 0;
    tensor_release(z);
    tensor_release(any);
    return rc;
}

/* t as an operand of op in compute dtype cdt. When the operands' common dtype
 * is bf16 / fp16, an operand of another dtype (a number, a 0-dim float32
 * tensor) is first rounded to it, as torch casts to the common dtype: a bf16
 * tensor then equals 0.1 (its own rounding of 0.1). mul and div are the
 * exception, as in torch: they scale by the number's full value. Likewise
 * an integer operand of a uint8 / int32 op wraps into that dtype first
 * (uint8 // -2 divides by 254; true division and pow take the full value). */
static Tensor *operand_in(KBinOp op, Tensor *t, DType common, DType cdt) {
    bool half = (common == DT_BF16 || common == DT_F16) && op != KB_MUL && op != KB_DIV && op != KB_FLOORDIV;
    bool narrow_int = (common == DT_U8 || common == DT_I32) && op != KB_DIV && op != KB_POW;
    if ((!half && !narrow_int) || t->dtype == common) return as_dtype_plain(t, cdt);
    return as_dtype_plain_owned(as_dtype_plain(t, common), cdt);
}

/* Compute a op b into a fresh tensor of dtype rd and shape (shape, nd). */
static Tensor *binary_compute(KBinOp op, Tensor *a, Tensor *b, DType rd, const int64_t *shape, int nd) {
    DType in_dt = dtype_promote(a->dtype, b->dtype);
    DType cdt = compute_dtype(kbin_is_compare(op) ? in_dt : (op == KB_DIV || op == KB_ATAN2 ? rd : in_dt));
    if (op == KB_POW && dtype_is_float(rd)) cdt = compute_dtype(rd);
    DType odt = kbin_is_compare(op) ? DT_BOOL : cdt;
    if (shape_check(kbin_name(op), shape, nd, (int)odt) < 0) return NULL; /* e.g. huge expanded operands */
    DType common = tensor_result_dtype(a, b); /* torch casts the operands to it */
    Tensor *ca = operand_in(op, a, common, cdt), *cb = ca ? operand_in(op, b, common, cdt) : NULL;
    bool ok = cb && check_int_divisor(op, cb, shape_numel(shape, nd)) == 0;
    Tensor *out = ok ? tensor_empty(shape, nd, odt, a->device) : NULL;
    if (out) binary_into(op, cdt, out, ca, cb);
    tensor_release(ca);
    tensor_release(cb);
    return as_dtype_plain_owned(out, rd);
}

/* ---- binary backward ---- */

static Tensor *mul(Tensor *a, Tensor *b) { return op_binary(KB_MUL, a, b); }
static Tensor *divide(Tensor *a, Tensor *b) { return op_binary(KB_DIV, a, b); }

/* The whole quotient remainder (floor) or fmod (trunc) takes b times from a. */
static Tensor *quotient(KBinOp op, Tensor *a, Tensor *b) {
    if (op == KB_REMAINDER) return op_binary(KB_FLOORDIV, a, b);
    Tensor *q = divide(a, b), *t = q ? op_unary(KU_TRUNC, q, 0, 0) : NULL;
    tensor_release(q);
    return t;
}

/* g * b * a^(b-1), and 0 where b is 0 (torch's pow_backward_self: a^0 is
 * the constant 1, even at a = 0, where the product is 0 * inf). */
static Tensor *pow_grad_base(Tensor *g, Tensor *a, Tensor *b) {
    Tensor *bm1 = op_binary_scalar(KB_SUB, b, 1, true, false);
    Tensor *p = bm1 ? op_binary(KB_POW, a, bm1) : NULL, *q = p ? mul(p, b) : NULL, *gq = q ? mul(g, q) : NULL;
    Tensor *b0 = gq ? op_binary_scalar(KB_EQ, b, 0, true, false) : NULL;
    Tensor *r = b0 ? op_masked_fill(gq, b0, 0.0) : NULL;
    tensor_release(bm1), tensor_release(p), tensor_release(q), tensor_release(gq), tensor_release(b0);
    return r;
}

/* g * out * log(a), and 0 where a is 0 and b >= 0 (torch's
 * pow_backward_exponent: there 0^b is 0 or 1, not out * log(0)). */
static Tensor *pow_grad_exponent(Tensor *g, Tensor *a, Tensor *b, Tensor *out) {
    Tensor *la = op_unary(KU_LOG, a, 0, 0), *q = la ? mul(out, la) : NULL;
    Tensor *a0 = q ? op_binary_scalar(KB_EQ, a, 0, true, false) : NULL;
    Tensor *bp = a0 ? op_binary_scalar(KB_GE, b, 0, true, false) : NULL;
    Tensor *m = bp ? op_binary(KB_AND, a0, bp) : NULL, *q0 = m ? op_masked_fill(q, m, 0.0) : NULL;
    Tensor *r = q0 ? mul(g, q0) : NULL;
    tensor_release(la), tensor_release(q), tensor_release(a0), tensor_release(bp), tensor_release(m), tensor_release(q0);
    return r;
}

/* g * keep, and 0 where a `lost` b (maximum / minimum backward) */
static Tensor *minmax_share(Tensor *g, Tensor *keep, Tensor *a, Tensor *b, KBinOp lost) {
    Tensor *l = op_binary(lost, a, b), *k = l ? op_masked_fill(keep, l, 0.0) : NULL;
    Tensor *r = k ? mul(g, k) : NULL;
    tensor_release(l), tensor_release(k);
    return r;
}

/* atan2(a, b)'s gradients as torch's atan2_backward: g b r and g (-a) r with
 * r = 1 / (a^2 + b^2), r set to 0 where it is inf (the origin, or a^2 + b^2
 * underflowing), so 0 there rather than NaN. ga / gb NULL: not wanted. */
static int atan2_grads(Tensor *g, Tensor *a, Tensor *b, Tensor **ga, Tensor **gb) {
    Tensor *aa = mul(a, a), *bb = aa ? mul(b, b) : NULL, *r2 = bb ? op_binary(KB_ADD, aa, bb) : NULL;
    Tensor *ri = r2 ? op_unary(KU_RECIP, r2, 0, 0) : NULL;
    Tensor *inf = ri ? op_binary_scalar(KB_EQ, ri, INFINITY, false, false) : NULL;
    Tensor *r = inf ? op_masked_fill(ri, inf, 0.0) : NULL;
    Tensor *gbv = r && ga ? mul(g, b) : NULL, *na = r && gb ? op_unary(KU_NEG, a, 0, 0) : NULL;
    Tensor *gna = na ? mul(g, na) : NULL;
    if (gbv) *ga = mul(gbv, r);
    if (gna) *gb = mul(gna, r);
    tensor_release(aa), tensor_release(bb), tensor_release(r2), tensor_release(ri), tensor_release(inf);
    tensor_release(r), tensor_release(gbv), tensor_release(na), tensor_release(gna);
    return (ga && !*ga) || (gb && !*gb) ? -1 : 0;
}

static int bw_binary(AGNode *n, Tensor *g, Tensor **gin) {
    KBinOp op = (KBinOp)n->i[0];
    Tensor *a = n->i[1] >= 0 ? ag_saved(n, (int)n->i[1]) : NULL;
    Tensor *b = n->i[2] >= 0 ? ag_saved(n, (int)n->i[2]) : NULL;
    Tensor *out = n->i[3] >= 0 ? ag_saved(n, (int)n->i[3]) : NULL;
    if ((n->i[1] >= 0 && !a) || (n->i[2] >= 0 && !b) || (n->i[3] >= 0 && !out)) return -1;
    bool ga = ag_input_needs_grad(n, 0), gb = ag_input_needs_grad(n, 1);
    switch (op) {
    case KB_ADD:
        gin[0] = ga ? tensor_retain(g) : NULL;
        gin[1] = gb ? tensor_retain(g) : NULL;
        break;
    case KB_SUB:
        gin[0] = ga ? tensor_retain(g) : NULL;
        gin[1] = gb ? op_unary(KU_NEG, g, 0, 0) : NULL;
        break;
    case KB_MUL:
        gin[0] = ga ? mul(g, b) : NULL;
        gin[1] = gb ? mul(g, a) : NULL;
        break;
    case KB_DIV:
        gin[0] = ga ? divide(g, b) : NULL;
        if (gb) { /* -g * out / b */
            Tensor *t = mul(g, out), *u = t ? divide(t, b) : NULL;
            gin[1] = u ? op_unary(KU_NEG, u, 0, 0) : NULL;
            tensor_release(t);
            tensor_release(u);
        }
        break;
    case KB_POW:
        gin[0] = ga ? pow_grad_base(g, a, b) : NULL;
        gin[1] = gb ? pow_grad_exponent(g, a, b, out) : NULL;
        break;
    case KB_MAX:
    case KB_MIN: { /* torch: g, halved at ties, 0 for the input that lost (NaN loses to nothing) */
        Tensor *tie = op_binary(KB_EQ, a, b), *tf = tie ? op_cast(tie, g->dtype) : NULL;
        Tensor *half = tf ? op_binary_scalar(KB_MUL, tf, 0.5, false, false) : NULL;
        Tensor *keep = half ? op_binary_scalar(KB_SUB, half, 1, true, true) : NULL; /* 1 - tie / 2 */
        bool gt_loses_a = op == KB_MIN; /* a > b: a lost a minimum, b a maximum */
        if (keep && ga) gin[0] = minmax_share(g, keep, a, b, gt_loses_a ? KB_GT : KB_LT);
        if (keep && gb) gin[1] = minmax_share(g, keep, a, b, gt_loses_a ? KB_LT : KB_GT);
        tensor_release(tie), tensor_release(tf), tensor_release(half), tensor_release(keep);
        break;
    }
    case KB_FLOORDIV: /* piecewise constant: zero gradients, as torch's div(rounding_mode = "floor") */
        gin[0] = ga ? tensor_zeros(g->shape, g->ndim, g->dtype, g->device) : NULL;
        gin[1] = gb ? tensor_zeros(g->shape, g->ndim, g->dtype, g->device) : NULL;
        break;
    case KB_REMAINDER: /* a - floor(a / b) * b: g and -g * floor(a / b) */
    case KB_FMOD:      /* a - trunc(a / b) * b: g and -g * trunc(a / b) */
        gin[0] = ga ? tensor_retain(g) : NULL;
        if (gb) {
            Tensor *q = quotient(op, a, b), *t = q ? mul(g, q) : NULL;
            gin[1] = t ? op_unary(KU_NEG, t, 0, 0) : NULL;
            tensor_release(q), tensor_release(t);
        }
        break;
    case KB_ATAN2:
        if (atan2_grads(g, a, b, ga ? &gin[0] : NULL, gb ? &gin[1] : NULL) < 0) return -1;
        break;
    default:
        return accel_fail_int("%s is not differentiable", kbin_name(op));
    }
    if ((ga && !gin[0]) || (gb && !gin[1])) return -1;
    return 0;
}

static bool is_differentiable_binary(KBinOp op) {
    return op <= KB_MIN || op == KB_FLOORDIV || op == KB_REMAINDER || op == KB_FMOD || op == KB_ATAN2;
}

static void record_binary(KBinOp op, Tensor *out, Tensor *a, Tensor *b) {
    Tensor *in[2] = {a, b};
    if (!is_differentiable_binary(op)) return;
    AGNode *n = ag_record(kbin_name(op), bw_binary, out, in, 2);
    if (!n) return;
    bool ga = a->requires_grad, gb = b->requires_grad;
    bool rem_b = (op == KB_REMAINDER || op == KB_FMOD) && gb;
    bool need_a = (op == KB_MUL && gb) || op == KB_POW || op == KB_MAX || op == KB_MIN || rem_b || op == KB_ATAN2;
    bool need_b = (op == KB_MUL && ga) || op == KB_DIV || op == KB_POW || op == KB_MAX || op == KB_MIN || rem_b ||
                  op == KB_ATAN2;
    bool need_out = (op == KB_DIV && gb) || (op == KB_POW && gb);
    n->i[0] = op;
    n->i[1] = n->i[2] = n->i[3] = -1;
    if (need_a) n->i[1] = n->n_saved, ag_save(n, a);
    if (need_b) n->i[2] = n->n_saved, ag_save(n, b);
    if (need_out) n->i[3] = n->n_saved, ag_save(n, out);
}

/* torch refuses `-` on bool tensors (a mask is inverted with logical_not),
 * and floor division, remainder, fmod and pow of two bools. */
int op_check_bool_operands(KBinOp op, DType a, DType b) {
    bool no_bool = op == KB_FLOORDIV || op == KB_REMAINDER || op == KB_FMOD || op == KB_POW;
    if (no_bool && a == DT_BOOL && b == DT_BOOL)
        return accel_fail_int("%s: not implemented for 'Bool' (two bool tensors, as PyTorch); convert one with :long() first",
                              kbin_name(op));
    if (op != KB_SUB || (a != DT_BOOL && b != DT_BOOL)) return 0;
    if (a == DT_BOOL && b == DT_BOOL)
        return accel_fail_int("sub: Subtraction, the `-` operator, with two bool tensors is not supported. Use "
                              "logical_xor() instead.");
    return accel_fail_int("sub: Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying "
                          "to invert a mask, use logical_not() instead.");
}

/* Bitwise ops take integer and bool operands (PyTorch: "bitwise_and_cpu"
 * not implemented for 'Float'); on two bools and, or and xor are the
 * logical ops (a bool result), shifts are refused. *op becomes the op to
 * run. 0 or -1. */
static int bitwise_operands(KBinOp *op, DType a, DType b) {
    if (!kbin_is_bitwise(*op)) return 0;
    if (dtype_is_float(a) || dtype_is_float(b))
        return accel_fail_int("%s: not implemented for %s (integer and bool tensors only)", kbin_name(*op),
                              dtype_name(dtype_is_float(a) ? a : b));
    if (a != DT_BOOL || b != DT_BOOL) return 0;
    if (*op == KB_SHL || *op == KB_SHR)
        return accel_fail_int("%s: not implemented for 'Bool' (two bool tensors, as PyTorch)", kbin_name(*op));
    *op = *op == KB_BAND ? KB_AND : *op == KB_BOR ? KB_OR : KB_XOR;
    return 0;
}

static Tensor *binary_on_one_device(KBinOp op, Tensor *a, Tensor *b) {
    PROF_SCOPE(kbin_name(op), PROF_FORWARD, a, b);
    const char *name = kbin_name(op);
    if (bitwise_operands(&op, a->dtype, b->dtype) < 0) return NULL;
    if (check_same_device(a, b, name) < 0 || op_check_bool_operands(op, a->dtype, b->dtype) < 0) return NULL;
    int64_t shape[TENSOR_MAX_DIMS];
    int nd;
    if (broadcast_shapes(a->shape, a->ndim, b->shape, b->ndim, shape, &nd, name) < 0) return NULL;
    DType rd = binary_result_dtype(op, a, b);
    Tensor *out = binary_compute(op, a, b, rd, shape, nd);
    if (out) record_binary(op, out, a, b);
    return out;
}

Tensor *op_binary(KBinOp op, Tensor *a, Tensor *b) {
    Device dev = op_device((Tensor *[]){a, b}, 2);
    Tensor *ma = cpu_scalar_to(a, dev), *mb = ma ? cpu_scalar_to(b, dev) : NULL;
    Tensor *out = mb ? binary_on_one_device(op, ma, mb) : NULL;
    tensor_release(ma);
    tensor_release(mb);
    return out;
}

/* Wrapped Python-style numbers: an int scalar keeps an integer or float
 * tensor's dtype (bool becomes int64); a float scalar makes an integer tensor
 * float32. Comparisons give bool; true division of integers gives float32. */
static DType scalar_result_dtype(KBinOp op, DType a, bool is_int) {
    if (kbin_is_compare(op)) return DT_BOOL;
    if (dtype_is_float(a)) return a;
    if (!is_int || op == KB_DIV || op == KB_ATAN2) return dtype_default_float();
    return a == DT_BOOL ? DT_I64 : a;
}

/* The scalar as a 0-dim tensor of the compute dtype (binary_compute rounds
 * it to a bf16 / fp16 tensor's dtype where torch does: see operand_in). */
static Tensor *scalar_operand(KBinOp op, const Tensor *a, double s, bool is_int) {
    DType base = kbin_is_compare(op) ? (dtype_is_float(a->dtype) ? a->dtype : (is_int ? DT_I64 : DT_F32))
                                     : scalar_result_dtype(op, a->dtype, is_int);
    Tensor *st = tensor_full(NULL, 0, s, compute_dtype(base), a->device);
    bool wraps = (a->dtype == DT_U8 || a->dtype == DT_I32) && is_int && op != KB_DIV && op != KB_POW;
    return wraps ? tensor_to_dtype_owned(st, a->dtype) : st; /* as torch: uint8 // -2 divides by 254 */
}

Tensor *op_binary_scalar(KBinOp op, Tensor *a, double s, bool is_int, bool scalar_lhs) {
    PROF_SCOPE(kbin_name(op), PROF_FORWARD, a, NULL);
    if (bitwise_operands(&op, a->dtype, is_int ? DT_I64 : DT_F32) < 0) return NULL;
    if (op_check_bool_operands(op, a->dtype, DT_I64) < 0) return NULL;
    Tensor *st = scalar_operand(op, a, s, is_int);
    if (!st) return NULL;
    Tensor *x = scalar_lhs ? st : a, *y = scalar_lhs ? a : st;
    Tensor *out = binary_compute(op, x, y, scalar_result_dtype(op, a->dtype, is_int), a->shape, a->ndim);
    if (out) record_binary(op, out, x, y);
    tensor_release(st);
    return out;
}

/* ---- in place ---- */

/* Called when an in-place op has to record a graph (a or the other operand
 * requires grad). A view is refused also when only the other operand
 * requires grad: the history would attach to the view, not to its base, and
 * gradients through the base would be lost silently. */
static int check_inplace_grad(Tensor *a, const char *op) {
    if (!ag_grad_enabled()) return 0;
    if (a->requires_grad && !a->grad_fn)
        return accel_fail_int("%s_: a leaf tensor that requires grad (shape %s) cannot be modified in place; use "
                              "accel.no_grad or an out-of-place op", op, tensor_shape_str(a));
    if (a->is_view)
        return accel_fail_int("%s_: in-place modification of a view (shape %s) is not supported when gradients are "
                              "recorded; use the out-of-place op", op, tensor_shape_str(a));
    return 0;
}

/* Replace a's values with r's and take over r's history (in-place with autograd). */
static int rebase(Tensor *a, Tensor *r) {
    bool prev = ag_set_grad_enabled(false);
    int rc = tensor_copy_(a, r);
    ag_set_grad_enabled(prev);
    if (rc < 0) return -1;
    if (r->grad_fn) {
        ag_set_grad_fn(a, r->grad_fn);
        a->requires_grad = true;
    }
    return 0;
}

/* Float results fit float outputs, integer results integer outputs. */
/* tensor_check_writable for the in-place op `op`_ (named as the user called it) */
static int check_writable_inplace(Tensor *a, const char *op) {
    char name[48];
    snprintf(name, sizeof name, "%s_", op);
    return tensor_check_writable(a, name);
}

static int check_inplace_dtype(Tensor *a, DType rd, const char *op) {
    if (rd == a->dtype || (dtype_is_float(a->dtype) && dtype_is_float(rd)) ||
        (!dtype_is_float(a->dtype) && a->dtype != DT_BOOL && !dtype_is_float(rd)))
        return 0;
    return accel_fail_int("%s_: result type %s can't be cast to the in-place output's type %s", op, dtype_name(rd),
                          dtype_name(a->dtype));
}

static int binary_inplace_on_one_device(KBinOp op, Tensor *a, Tensor *b);

/* In place: b may be a 0-dim CPU tensor whatever a's device (read as a
 * scalar, as PyTorch does); a itself stays where it is. */
int op_binary_(KBinOp op, Tensor *a, Tensor *b) {
    Tensor *mb = cpu_scalar_to(b, a->device);
    int rc = mb ? binary_inplace_on_one_device(op, a, mb) : -1;
    tensor_release(mb);
    return rc;
}

static int binary_inplace_on_one_device(KBinOp op, Tensor *a, Tensor *b) {
    PROF_SCOPE(kbin_name(op), PROF_INPLACE, a, b);
    const char *name = kbin_name(op);
    if (bitwise_operands(&op, a->dtype, b->dtype) < 0) return -1;
    if (check_same_device(a, b, name) < 0 || op_check_bool_operands(op, a->dtype, b->dtype) < 0) return -1;
    int64_t shape[TENSOR_MAX_DIMS];
    int nd;
    if (broadcast_shapes(a->shape, a->ndim, b->shape, b->ndim, shape, &nd, name) < 0) return -1;
    if (nd != a->ndim || shape_numel(shape, nd) != a->numel)
        return accel_fail_int("%s_: output with shape %s doesn't match the broadcast shape of %s and %s", name,
                              tensor_shape_str(a), tensor_shape_str(a), tensor_shape_str(b));
    if (check_inplace_dtype(a, binary_result_dtype(op, a, b), name) < 0 || check_writable_inplace(a, name) < 0) return -1;
    if (tensor_partial_overlap(a, b)) { /* b reads what a writes: work from a copy of b */
        Tensor *copy = tensor_clone(b);
        int rc = copy ? op_binary_(op, a, copy) : -1;
        tensor_release(copy);
        return rc;
    }
    if (ag_needs_grad((Tensor *[]){a, b}, 2)) {
        if (check_inplace_grad(a, name) < 0) return -1;
        /* ops whose backward reads a's old value get a copy of it: a itself
         * is about to be overwritten (PyTorch saves the original self too) */
        bool saves_a = op == KB_MUL || op == KB_POW || op == KB_MAX || op == KB_MIN || op == KB_REMAINDER || op == KB_FMOD;
        Tensor *src = saves_a ? tensor_clone(a) : tensor_retain(a);
        Tensor *r = src ? op_binary(op, src, b) : NULL;
        int rc = r ? rebase(a, r) : -1;
        tensor_release(r);
        tensor_release(src);
        return rc;
    }
    DType cdt = compute_dtype(a->dtype);
    if (a->dtype == cdt && !kbin_is_compare(op)) {
        Tensor *cb = as_dtype_plain(b, cdt);
        if (!cb || check_int_divisor(op, cb, a->numel) < 0) return tensor_release(cb), -1;
        binary_into(op, cdt, a, a, cb);
        tensor_release(cb);
        tensor_bump_version(a);
        return 0;
    }
    Tensor *r = binary_compute(op, a, b, a->dtype, a->shape, a->ndim);
    int rc = r ? tensor_copy_(a, r) : -1;
    tensor_release(r);
    return rc;
}

int op_binary_scalar_(KBinOp op, Tensor *a, double s, bool is_int) { /* profiled as the op_binary_ it calls */
    if (check_inplace_dtype(a, scalar_result_dtype(op, a->dtype, is_int), kbin_name(op)) < 0) return -1;
    Tensor *st = scalar_operand(op, a, s, is_int);
    if (!st) return -1;
    int rc = op_binary_(op, a, st);
    tensor_release(st);
    return rc;
}

/* ---- unary ---- */

static bool unary_keeps_int(KUnOp op) {
    return op == KU_NEG || op == KU_ABS || op == KU_SQUARE || op == KU_SIGN || op == KU_CLAMP || op == KU_RELU ||
           op == KU_NOT || op == KU_BNOT;
}

/* bitwise_not: integers (~x) and bools (logical not, as PyTorch's ~mask);
 * *op becomes the op to run. 0 or -1. */
static int bitwise_not_operand(KUnOp *op, DType dt, const char *suffix) {
    if (*op != KU_BNOT) return 0;
    if (dtype_is_float(dt))
        return accel_fail_int("bitwise_not%s: not implemented for %s (integer and bool tensors only)", suffix,
                              dtype_name(dt));
    if (dt == DT_BOOL) *op = KU_NOT;
    return 0;
}

static bool unary_uses_output(KUnOp op) {
    return op == KU_TANH || op == KU_SIGMOID || op == KU_EXP || op == KU_SQRT || op == KU_RSQRT || op == KU_RECIP ||
           op == KU_EXPM1 || op == KU_RPOW || op == KU_RELU || op == KU_TAN;
}

/* Saves nothing for backward: its gradient needs neither input nor output. */
static bool unary_saves_nothing(KUnOp op) { return op == KU_NEG; }

/* Piecewise constant: recorded with a zero gradient, as torch's SignBackward0, RoundBackward0, ... */
static bool unary_zero_grad(KUnOp op) {
    return op == KU_SIGN || op == KU_FLOOR || op == KU_CEIL || op == KU_ROUND || op == KU_TRUNC;
}

static void unary_into(KUnOp op, DType cdt, Tensor *out, Tensor *a, double p1, double p2) {
    StridedIter it;
    bool one_run = tensor_is_contiguous(a) && tensor_is_contiguous(out);
    iter_launch(&it, out, (const Tensor *[]){a}, 1, one_run ? (const int64_t[]){1} : NULL);
    backend_for(out->device)->unary(op, cdt, &it, p1, p2);
}

static Tensor *contig_of(Tensor *t, DType dt) {
    Tensor *c = as_dtype_plain(t, dt);
    if (!c || tensor_is_contiguous(c)) return c;
    Tensor *d = tensor_empty(c->shape, c->ndim, dt, c->device);
    if (d) tensor_copy_strided(d, c);
    tensor_release(c);
    return d;
}

static int bw_unary_zero(AGNode *n, Tensor *g, Tensor **gin) {
    (void)n;
    gin[0] = tensor_zeros(g->shape, g->ndim, g->dtype, g->device);
    return gin[0] ? 0 : -1;
}

static int bw_unary(AGNode *n, Tensor *g, Tensor **gin) {
    KUnOp op = (KUnOp)n->i[0];
    if (unary_saves_nothing(op)) return (gin[0] = op_unary(op, g, 0, 0)) ? 0 : -1;
    Tensor *saved = ag_saved(n, 0);
    if (!saved) return -1;
    if (op == KU_RPOW) { /* d/dx c^x = c^x log(c); saved is the output c^x */
        Tensor *t = op_binary_scalar(KB_MUL, saved, log(n->p[0]), false, false);
        /* torch: 0 where c = 0 and x >= 0, which is where 0^x <= 1 (0 or 1) */
        bool base0 = n->p[0] == 0;
        Tensor *m = t && base0 ? op_binary_scalar(KB_LE, saved, 1, true, false) : NULL;
        Tensor *t0 = !base0 ? tensor_retain(t) : m ? op_masked_fill(t, m, 0.0) : NULL;
        gin[0] = t0 ? op_binary(KB_MUL, g, t0) : NULL;
        tensor_release(t), tensor_release(m), tensor_release(t0);
        return gin[0] ? 0 : -1;
    }
    DType cdt = g->dtype == DT_F64 ? DT_F64 : DT_F32;
    Tensor *s = contig_of(saved, cdt), *gc = s ? contig_of(g, cdt) : NULL;
    Tensor *gx = gc ? tensor_empty(gc->shape, gc->ndim, cdt, gc->device) : NULL;
    if (gx) {
        const void *x = unary_uses_output(op) ? NULL : tensor_data(s), *y = unary_uses_output(op) ? tensor_data(s) : NULL;
        backend_for(gx->device)->unary_backward(op, cdt, gx->numel, x, y, tensor_data(gc), tensor_data(gx), n->p[0], n->p[1]);
    }
    tensor_release(s);
    tensor_release(gc);
    gin[0] = gx;
    return gx ? 0 : -1;
}

/* The activations torch implements for floating dtypes only ("not
 * implemented for 'Long'"); suffix "_" names the in-place form. */
static int check_float_only(KUnOp op, DType dt, const char *suffix) {
    if (op == KU_RELU && dt == DT_BOOL) /* (torch's NotImplementedError) */
        return accel_fail_int("relu%s: Boolean inputs not supported for relu", suffix);
    bool float_only = op == KU_GELU || op == KU_GELU_TANH || op == KU_SILU || op == KU_LEAKY_RELU;
    if (!float_only || dtype_is_float(dt)) return 0;
    return accel_fail_int("%s%s: \"%s\" is not implemented for %s tensors (convert with :float())", kun_name(op), suffix,
                          kun_name(op), dtype_name(dt));
}

/* floor, ceil, round, trunc: the identity on integers (their dtype kept, as torch) */
static bool rounds_to_itself(KUnOp op, DType dt) {
    return !dtype_is_float(dt) && (op == KU_FLOOR || op == KU_CEIL || op == KU_ROUND || op == KU_TRUNC);
}

Tensor *op_unary(KUnOp op, Tensor *a, double p1, double p2) {
    PROF_SCOPE(kun_name(op), PROF_FORWARD, a, NULL);
    if (op == KU_NEG && a->dtype == DT_BOOL)
        return accel_fail("neg: Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
                          "invert a mask, use logical_not() instead.");
    if (op == KU_ABS && a->dtype == DT_BOOL) return accel_fail("abs: \"abs\" is not implemented for bool tensors");
    if (check_float_only(op, a->dtype, "") < 0 || bitwise_not_operand(&op, a->dtype, "") < 0) return NULL;
    if (rounds_to_itself(op, a->dtype)) return tensor_clone(a);
    DType rd = a->dtype;
    if (!dtype_is_float(rd) && !unary_keeps_int(op)) rd = dtype_default_float();
    if (op == KU_NOT) rd = DT_BOOL;
    if (op == KU_SQUARE && rd == DT_BOOL) rd = DT_I64; /* as torch: square is pow(2), of a bool int64 */
    if (op == KU_POW && !dtype_is_float(rd) && p1 != floor(p1)) rd = dtype_default_float();
    if (op == KU_POW) p1 = dtype_round_half(rd, p1); /* as torch: the exponent in the tensor's dtype */
    DType cdt = compute_dtype(rd == DT_BOOL ? a->dtype : rd);
    if (shape_check(kun_name(op), a->shape, a->ndim, (int)cdt) < 0) return NULL; /* e.g. a huge expanded input */
    Tensor *ca = as_dtype_plain(a, cdt);
    Tensor *out = ca ? tensor_empty(a->shape, a->ndim, cdt, a->device) : NULL;
    if (out) unary_into(op, cdt, out, ca, p1, p2);
    tensor_release(ca);
    out = as_dtype_plain_owned(out, rd);
    if (!out || op == KU_NOT || op == KU_BNOT) return out;
    AGNode *n = ag_record(kun_name(op), unary_zero_grad(op) ? bw_unary_zero : bw_unary, out, &a, 1);
    if (n && !unary_zero_grad(op)) {
        n->i[0] = op;
        n->p[0] = p1, n->p[1] = p2;
        if (!unary_saves_nothing(op)) ag_save(n, unary_uses_output(op) ? out : a);
    }
    return out;
}

int op_unary_(KUnOp op, Tensor *a, double p1, double p2) {
    PROF_SCOPE(kun_name(op), PROF_INPLACE, a, NULL);
    const char *name = kun_name(op);
    if (rounds_to_itself(op, a->dtype)) return 0;
    if (check_float_only(op, a->dtype, "_") < 0 || bitwise_not_operand(&op, a->dtype, "_") < 0) return -1;
    if (check_writable_inplace(a, name) < 0) return -1;
    if (!dtype_is_float(a->dtype) && !unary_keeps_int(op))
        return accel_fail_int("%s_: result type float can't be cast to the in-place output's type %s", name, dtype_name(a->dtype));
    if (ag_needs_grad(&a, 1)) {
        if (check_inplace_grad(a, name) < 0) return -1;
        /* the backward of ops that save their input reads a's old value: give
         * it a copy, since a is about to be overwritten */
        Tensor *src = unary_uses_output(op) || unary_saves_nothing(op) ? tensor_retain(a) : tensor_clone(a);
        Tensor *r = src ? op_unary(op, src, p1, p2) : NULL;
        int rc = r ? rebase(a, r) : -1;
        tensor_release(r);
        tensor_release(src);
        return rc;
    }
    DType cdt = compute_dtype(a->dtype);
    if (a->dtype == cdt) {
        unary_into(op, cdt, a, a, p1, p2);
        tensor_bump_version(a);
        return 0;
    }
    Tensor *r = op_unary(op, a, p1, p2);
    int rc = r ? tensor_copy_(a, r) : -1;
    tensor_release(r);
    return rc;
}

/* ---- clamp with tensor bounds ---- */

/* a op b and a op s (scalar_lhs: s op a), each taking its tensor arguments'
 * references, so gradient formulas nest; NULL in gives NULL out. */
static Tensor *take_op(KBinOp op, Tensor *a, Tensor *b) {
    Tensor *r = a && b ? op_binary(op, a, b) : NULL;
    tensor_release(a), tensor_release(b);
    return r;
}

static Tensor *take_op_scalar(KBinOp op, Tensor *a, double s, bool scalar_lhs) {
    Tensor *r = a ? op_binary_scalar(op, a, s, false, scalar_lhs) : NULL;
    tensor_release(a);
    return r;
}

/* [a op b] as 0 / 1 of dtype dt. */
static Tensor *indicator(KBinOp op, Tensor *a, Tensor *b, DType dt) {
    Tensor *m = op_binary(op, a, b), *f = m ? tensor_to_dtype(m, dt) : NULL;
    tensor_release(m);
    return f;
}

/* The weights of the gradient to x, lo and hi, as torch 2.x's clamp
 * backward gives them (measured over every order of x, lo, hi with ties and
 * NaN; tests/lua/tensor_ops_spec.lua): with ordered = [lo < hi],
 *   x:  [!(x < lo)] [!(x > hi)] (1 - (ordered [x == lo] + ordered [x == hi]) / 2)
 *   lo: [lo <= hi] [x < lo] + ordered [x == lo] / 2
 *   hi: [lo <= hi] [x > hi] + [lo > hi] + ordered [x == hi] / 2
 * A tie with one bound splits the gradient; lo == hi gives it whole to x,
 * lo or hi by where x lies; lo > hi (the result is hi) to hi; a NaN x keeps
 * it (and hi too when lo > hi); a NaN bound gives x its share where x
 * lies within the other bound. */
enum { LT_LO, GT_HI, EQ_LO, EQ_HI, ORDERED, NOT_INVERTED, INVERTED, N_CLAMP_IND };

static int bw_clamp(AGNode *n, Tensor *g, Tensor **gin) {
    Tensor *x = ag_saved(n, 0), *lo = ag_saved(n, 1), *hi = ag_saved(n, 2);
    if (!x || !lo || !hi) return -1;
    static const KBinOp ops[N_CLAMP_IND] = {KB_LT, KB_GT, KB_EQ, KB_EQ, KB_LT, KB_LE, KB_GT};
    Tensor *lhs[N_CLAMP_IND] = {x, x, x, x, lo, lo, lo}, *rhs[N_CLAMP_IND] = {lo, hi, lo, hi, hi, hi, hi};
    Tensor *ind[N_CLAMP_IND] = {NULL};
    int rc = 0;
    for (int k = 0; k < N_CLAMP_IND && rc == 0; k++)
        if (!(ind[k] = indicator(ops[k], lhs[k], rhs[k], g->dtype))) rc = -1;
    Tensor *half_tie = rc ? NULL : take_op_scalar(KB_MUL, tensor_retain(ind[ORDERED]), 0.5, false), *w[3] = {NULL};
    if (half_tie && ag_input_needs_grad(n, 0)) {
        Tensor *inside = take_op(KB_MUL, take_op_scalar(KB_SUB, tensor_retain(ind[LT_LO]), 1, true),
                                 take_op_scalar(KB_SUB, tensor_retain(ind[GT_HI]), 1, true));
        Tensor *ties = take_op(KB_MUL, tensor_retain(half_tie),
                               take_op(KB_ADD, tensor_retain(ind[EQ_LO]), tensor_retain(ind[EQ_HI])));
        w[0] = take_op(KB_MUL, inside, take_op_scalar(KB_SUB, ties, 1, true));
    }
    if (half_tie && ag_input_needs_grad(n, 1))
        w[1] = take_op(KB_ADD, take_op(KB_MUL, tensor_retain(ind[NOT_INVERTED]), tensor_retain(ind[LT_LO])),
                       take_op(KB_MUL, tensor_retain(half_tie), tensor_retain(ind[EQ_LO])));
    if (half_tie && ag_input_needs_grad(n, 2))
        w[2] = take_op(KB_ADD, take_op(KB_MUL, tensor_retain(ind[NOT_INVERTED]), tensor_retain(ind[GT_HI])),
                       take_op(KB_ADD, tensor_retain(ind[INVERTED]),
                               take_op(KB_MUL, tensor_retain(half_tie), tensor_retain(ind[EQ_HI]))));
    for (int k = 0; k < 3; k++)
        if (ag_input_needs_grad(n, k) && !(gin[k] = w[k] ? op_binary(KB_MUL, g, w[k]) : NULL)) rc = -1;
    for (int k = 0; k < N_CLAMP_IND; k++) tensor_release(ind[k]);
    for (int k = 0; k < 3; k++) tensor_release(w[k]);
    tensor_release(half_tie);
    return rc;
}

Tensor *op_clamp_tensors(Tensor *x, Tensor *lo, Tensor *hi) {
    if (!lo || !hi) { /* one bound: maximum / minimum, whose gradients torch's clamp gives too */
        if (!lo && !hi) return accel_fail("clamp: at least one of min and max must be given");
        return op_binary(lo ? KB_MAX : KB_MIN, x, lo ? lo : hi);
    }
    bool was = ag_set_grad_enabled(false); /* the value: maximum, then minimum (NaN propagates) */
    Tensor *a = op_binary(KB_MAX, x, lo), *out = a ? op_binary(KB_MIN, a, hi) : NULL;
    ag_set_grad_enabled(was);
    tensor_release(a);
    AGNode *n = out ? ag_record("clamp", bw_clamp, out, (Tensor *[]){x, lo, hi}, 3) : NULL;
    if (n) ag_save(n, x), ag_save(n, lo), ag_save(n, hi);
    return out;
}

/* ---- where / masked_fill ---- */

static int bw_where(AGNode *n, Tensor *g, Tensor **gin) {
    Tensor *c = ag_saved(n, 0);
    if (!c) return -1;
    Tensor *z = tensor_zeros(NULL, 0, g->dtype, g->device);
    if (!z) return -1;
    if (ag_input_needs_grad(n, 1)) gin[1] = op_where(c, g, z);
    if (ag_input_needs_grad(n, 2)) gin[2] = op_where(c, z, g);
    tensor_release(z);
    return 0;
}

static Tensor *where_on_one_device(Tensor *cond, Tensor *a, Tensor *b);

/* Any of the three may be a 0-dim CPU tensor with the others elsewhere. */
Tensor *op_where(Tensor *cond, Tensor *a, Tensor *b) {
    Device dev = op_device((Tensor *[]){a, b, cond}, 3);
    Tensor *mc = cpu_scalar_to(cond, dev), *ma = mc ? cpu_scalar_to(a, dev) : NULL;
    Tensor *mb = ma ? cpu_scalar_to(b, dev) : NULL;
    Tensor *out = mb ? where_on_one_device(mc, ma, mb) : NULL;
    tensor_release(mc);
    tensor_release(ma);
    tensor_release(mb);
    return out;
}

static Tensor *where_on_one_device(Tensor *cond, Tensor *a, Tensor *b) {
    PROF_SCOPE("where", PROF_FORWARD, a, b);
    if (cond->dtype != DT_BOOL && cond->dtype != DT_U8)
        return accel_fail("where: condition must be a bool tensor, got %s", dtype_name(cond->dtype));
    if (tensor_check_device("where", a, b) < 0 || tensor_check_device("where", a, cond) < 0) return NULL;
    int64_t s1[TENSOR_MAX_DIMS], s2[TENSOR_MAX_DIMS];
    int n1, n2;
    if (broadcast_shapes(a->shape, a->ndim, b->shape, b->ndim, s1, &n1, "where") < 0 ||
        broadcast_shapes(cond->shape, cond->ndim, s1, n1, s2, &n2, "where") < 0)
        return NULL;
    DType rd = tensor_result_dtype(a, b);
    Tensor *ca = as_dtype_plain(a, rd), *cb = ca ? as_dtype_plain(b, rd) : NULL;
    Tensor *out = cb ? tensor_empty(s2, n2, rd, a->device) : NULL;
    if (out) {
        StridedIter it;
        iter_launch(&it, out, (const Tensor *[]){cond, ca, cb}, 3, NULL);
        backend_for(out->device)->where(&it);
        AGNode *n = ag_record("where", bw_where, out, (Tensor *[]){NULL, a, b}, 3);
        if (n) ag_save(n, cond);
    }
    tensor_release(ca);
    tensor_release(cb);
    return out;
}

/* A bool mask that broadcasts with a (to shape / *nd), or -1 with op's error. */
static int check_mask(Tensor *a, Tensor *mask, const char *op, int64_t *shape, int *nd) {
    if (tensor_check_device(op, a, mask) < 0) return -1; /* (named here, not by the where it runs) */
    if (mask->dtype != DT_BOOL) return accel_fail_int("%s: mask must be a bool tensor, got %s", op, dtype_name(mask->dtype));
    return broadcast_shapes(mask->shape, mask->ndim, a->shape, a->ndim, shape, nd, op);
}

/* Out of place, mask and a broadcast together (as torch's masked_fill). */
Tensor *op_masked_fill(Tensor *a, Tensor *mask, double v) {
    PROF_SCOPE("masked_fill", PROF_FORWARD, a, mask);
    int64_t shape[TENSOR_MAX_DIMS];
    int nd;
    if (check_mask(a, mask, "masked_fill", shape, &nd) < 0) return NULL;
    Tensor *fill = tensor_full(NULL, 0, v, a->dtype, a->device);
    Tensor *out = fill ? op_where(mask, fill, a) : NULL;
    tensor_release(fill);
    return out;
}

/* masked_fill_ into an expanded view a (stride-0 dims of size > 1) that
 * needs no gradient, as PyTorch's (which warns it is deprecated): a
 * location several elements share is filled when any of them is masked.
 * Done on a's view with those dims cut to 1, which is writable, under the
 * mask (broadcast to a) reduced with any over them:
 * a (2 [stride 0], 3), mask (3) -> view (1, 3), mask (1, 3). */
static int masked_fill_expanded_(Tensor *a, Tensor *mask, double v) {
    int64_t shape[TENSOR_MAX_DIMS];
    int dims[TENSOR_MAX_DIMS], nd = 0;
    for (int d = 0; d < a->ndim; d++) {
        bool shared = a->stride[d] == 0 && a->shape[d] > 1;
        shape[d] = shared ? 1 : a->shape[d];
        if (shared) dims[nd++] = d;
    }
    Tensor *wide = tensor_expand(mask, a->shape, a->ndim);
    Tensor *hits = wide ? op_reduce(KR_SUM, wide, dims, nd, true) : NULL;
    Tensor *any = hits ? op_binary_scalar(KB_GT, hits, 0, true, false) : NULL;
    Tensor *cut = any ? tensor_as_strided(a, shape, a->stride, a->ndim, a->offset) : NULL;
    int rc = cut ? op_masked_fill_(cut, any, v) : -1;
    tensor_release(wide), tensor_release(hits), tensor_release(any), tensor_release(cut);
    return rc;
}

int op_masked_fill_(Tensor *a, Tensor *mask, double v) {
    int64_t shape[TENSOR_MAX_DIMS];
    int nd;
    if (check_mask(a, mask, "masked_fill_", shape, &nd) < 0) return -1;
    if (nd != a->ndim || shape_numel(shape, nd) != a->numel) {
        char bs[160];
        shape_str(shape, nd, bs, sizeof bs);
        return accel_fail_int("masked_fill_: output with shape %s doesn't match the broadcast shape %s (mask %s)",
                              tensor_shape_str(a), bs, tensor_shape_str(mask));
    }
    if (!tensor_is_writable(a)) { /* an expanded view; with a graph refused, as any view */
        if (!ag_needs_grad(&a, 1)) return masked_fill_expanded_(a, mask, v);
        return check_inplace_grad(a, "masked_fill") < 0 ? -1 : tensor_check_writable(a, "masked_fill_");
    }
    Tensor *r = op_masked_fill(a, mask, v);
    if (!r) return -1;
    int rc;
    if (ag_needs_grad(&a, 1)) rc = check_inplace_grad(a, "masked_fill") < 0 ? -1 : rebase(a, r);
    else rc = tensor_copy_(a, r);
    tensor_release(r);
    return rc;
}

Tensor *op_cast(Tensor *a, DType dt) {
    PROF_SCOPE("to", PROF_FORWARD, a, NULL);
    return tensor_to_dtype(a, dt);
}

/* round(x, decimals = d), as PyTorch: round(x * 10^d) / 10^d, or for d < 0
 * round(x / 10^-d) * 10^-d, with 10^|d| in the compute dtype (float32 for
 * the 16-bit floats, rounded once to x's dtype at the end). Integer tensors
 * are refused, as PyTorch's kernel refuses them. The gradient is zero. */
Tensor *op_round_decimals(Tensor *x, int decimals) {
    if (!dtype_is_float(x->dtype))
        return accel_fail("round: decimals needs a floating-point tensor, got %s (as PyTorch)", dtype_name(x->dtype));
    DType cdt = compute_dtype(x->dtype);
    Tensor *cx = cdt == x->dtype ? tensor_retain(x) : op_cast(x, cdt);
    double scale = pow(10.0, abs(decimals));
    Tensor *scaled = cx ? op_binary_scalar(decimals > 0 ? KB_MUL : KB_DIV, cx, scale, false, false) : NULL;
    Tensor *rounded = scaled ? op_unary(KU_ROUND, scaled, 0, 0) : NULL;
    Tensor *out = rounded ? op_binary_scalar(decimals > 0 ? KB_DIV : KB_MUL, rounded, scale, false, false) : NULL;
    tensor_release(cx), tensor_release(scaled), tensor_release(rounded);
    if (!out || cdt == x->dtype) return out;
    Tensor *back = op_cast(out, x->dtype);
    tensor_release(out);
    return back;
}
