/* tensor_lua.c: the Tensor userdata's metatable: operators, properties
 * (shape, dtype, device, grad, requires_grad, ...), and methods with Lua's
 * 1-based dims. Each method parses its arguments, calls one core op and
 * raises the core's error (op, shapes, dtypes) at the caller's file:line. */
#include "lua_util.h"
#include "../core/backend/backend.h"
#include "../core/backend/iter.h"
#include "../core/precision.h"
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SELF lu_check_self(L)

static int ret(lua_State *L, Tensor *t) {
    lu_push_tensor(L, t);
    return 1;
}

static int ret_rc(lua_State *L, int rc) {
    if (rc < 0) lu_core_error(L);
    lua_settop(L, 1);
    return 1;
}

/* ---- binary ops ---- */

static double scalar_arg(lua_State *L, int idx, const char *op) {
    if (lua_isboolean(L, idx)) return lua_toboolean(L, idx);
    if (!lua_isnumber(L, idx) || lua_type(L, idx) == LUA_TSTRING)
        lu_error(L, "%s: bad argument #%d (tensor or number expected, got %s)", op, idx, luaL_typename(L, idx));
    return lua_tonumber(L, idx);
}

static bool int_scalar(lua_State *L, int idx) { return lua_isinteger(L, idx) || lua_isboolean(L, idx); }

/* A Lua boolean operand at idx, beside the tensor like, replaced by a 0-dim
 * bool tensor: as torch's bool scalar it is of the lowest category and never
 * widens like's dtype (bool_t + true is bool, int_t * false int64). */
static void bool_operand(lua_State *L, int idx, const Tensor *like) {
    if (!like || !lua_isboolean(L, idx)) return;
    lu_push_tensor(L, lu_tensor_or_scalar(L, idx, like));
    lua_replace(L, idx);
}

/* A Lua integer at idx beyond +-2^53 beside an integer or bool tensor like,
 * replaced by an exact 0-dim int64 tensor (a number operand passes through
 * a double, which would round it; torch keeps the integer); true when it was. */
static bool wide_int_operand(lua_State *L, int idx, const Tensor *like) {
    if (!like || dtype_is_float(like->dtype) || !lu_is_wide_integer(L, idx)) return false;
    lu_push_tensor(L, lu_int64_scalar(L, idx, like->device));
    lua_replace(L, idx);
    return true;
}

/* Either operand a Lua boolean beside a tensor: as a bool tensor */
static void bool_operands(lua_State *L, int ia, int ib) {
    bool_operand(L, ia, lu_to_tensor(L, ib));
    bool_operand(L, ib, lu_to_tensor(L, ia));
}

static Tensor *binary(lua_State *L, KBinOp op, int ia, int ib) {
    bool_operands(L, ia, ib);
    wide_int_operand(L, ib, lu_to_tensor(L, ia));
    wide_int_operand(L, ia, lu_to_tensor(L, ib));
    Tensor *a = lu_to_tensor(L, ia), *b = lu_to_tensor(L, ib);
    if (a && b) return op_binary(op, a, b);
    if (a) return op_binary_scalar(op, a, scalar_arg(L, ib, kbin_name(op)), int_scalar(L, ib), false);
    if (b) return op_binary_scalar(op, b, scalar_arg(L, ia, kbin_name(op)), int_scalar(L, ia), true);
    lu_error(L, "%s: tensor expected", kbin_name(op));
    return NULL;
}

/* The other operand of a binary method (argument 2) and its options
 * (argument 3): add / sub take {alpha =} (other * alpha, as torch; a
 * tensor is scaled, a number multiplied), div {rounding_mode =}, the rest
 * none. */
typedef struct {
    Tensor *t; /* the other tensor (owned when scaled), or NULL for a number */
    bool owned;
    double v;  /* the number */
    bool is_int;
    int rounding; /* div: 0 none, 1 "floor", 2 "trunc" */
    int result_dtype; /* >= 0: the dtype the result is rounded to (t is a bf16 / fp16 operand scaled in float32) */
    bool number_lhs;  /* the number is the left operand (number op self) */
} Other;

/* Both operands integral (an integer / bool tensor, an integer tensor or number) */
static bool integral_operands(const Tensor *self, const Other *o) {
    return !dtype_is_float(self->dtype) && (o->t ? !dtype_is_float(o->t->dtype) : o->is_int);
}

/* {alpha =} of add / sub: a number, or a boolean (1 / 0) as torch takes it. */
static double alpha_arg(lua_State *L) {
    if (lu_is_opts(L, 3)) {
        lua_getfield(L, 3, "alpha");
        int is_bool = lua_isboolean(L, -1), v = lua_toboolean(L, -1);
        lua_pop(L, 1);
        if (is_bool) return v;
    }
    return lu_opt_number(L, 3, "alpha", 1.0);
}

static Other other_arg(lua_State *L, KBinOp op, Tensor *self) {
    bool_operand(L, 2, self);
    wide_int_operand(L, 2, self);
    Other o = {lu_to_tensor(L, 2), false, 0, false, 0, -1, false};
    bool scaled = op == KB_ADD || op == KB_SUB;
    lu_check_call_opts(L, 3, scaled ? "alpha" : op == KB_DIV ? "rounding_mode" : "");
    if (!lua_isnoneornil(L, 3) && !lu_is_opts(L, 3))
        lu_arg_type_error(L, 3, scaled ? "the options table ({alpha = ...})" : op == KB_DIV ? "the options table ({rounding_mode = ...})" : "absent (it takes one operand)");
    lu_check_no_more_after_opts(L, 3);
    if (!o.t) o.v = scalar_arg(L, 2, kbin_name(op)), o.is_int = int_scalar(L, 2);
    if (op == KB_DIV && lu_is_opts(L, 3)) {
        lua_getfield(L, 3, "rounding_mode");
        const char *m = lua_isnil(L, -1) ? NULL : lua_tostring(L, -1);
        if (!lua_isnil(L, -1) && (!m || (strcmp(m, "floor") != 0 && strcmp(m, "trunc") != 0)))
            lu_error(L, "div: expected rounding_mode to be one of nil, 'trunc', or 'floor' but found '%s'",
                     m ? m : luaL_typename(L, -1));
        o.rounding = !m ? 0 : m[0] == 'f' ? 1 : 2;
        lua_pop(L, 1);
    }
    double alpha = scaled ? alpha_arg(L) : 1.0;
    if (alpha != floor(alpha) && integral_operands(self, &o))
        lu_error(L, "%s: For integral input tensors, argument alpha must not be a floating point number.",
                 kbin_name(op));
    if (self->dtype == DT_BOOL && (!o.t || o.t->dtype == DT_BOOL)) alpha = alpha != 0; /* torch: alpha as a bool */
    if (alpha == 1.0) return o;
    if (o.t && op_check_bool_operands(op, self->dtype, o.t->dtype) < 0) lu_core_error(L); /* before bool * alpha is int */
    if (!o.t) {
        o.v *= alpha;
        o.is_int = o.is_int && alpha == floor(alpha);
        return o;
    }
    /* as torch: alpha * other is computed in the result dtype, other
     * converted to it first (so a narrower operand neither wraps nor
     * rounds: int64 + uint8{200} * 2 is 400); self + alpha * other of
     * bf16 / fp16 in float32 from the operands in the half dtype (see
     * binary_other), rounded once, alpha first rounded to the half dtype */
    DType rd = tensor_result_dtype(self, o.t);
    bool half = rd == DT_BF16 || rd == DT_F16;
    alpha = dtype_round_half(rd, alpha);
    Tensor *w = tensor_to_dtype(o.t, rd);
    if (half) w = tensor_to_dtype_owned(w, DT_F32);
    o.t = w ? op_binary_scalar(KB_MUL, w, alpha, alpha == floor(alpha), false) : NULL;
    tensor_release(w);
    if (!o.t) lu_core_error(L);
    o.owned = true;
    o.result_dtype = half || rd == DT_BOOL ? (int)rd : -1; /* bool + bool * alpha stays bool, as torch's */
    return o;
}

/* self op other (a tensor or a number), or number op self */
static Tensor *apply_other(KBinOp op, Tensor *self, const Other *o) {
    return o->t ? op_binary(op, self, o->t) : op_binary_scalar(op, self, o->v, o->is_int, o->number_lhs);
}

/* torch.div(a, b, rounding_mode = "trunc"): the quotient rounded toward
 * zero; integers stay integers (exactly: floor division plus one where it
 * rounded a negative inexact quotient down). */
static Tensor *trunc_div(Tensor *self, const Other *o) {
    if (!integral_operands(self, o)) {
        Tensor *q = apply_other(KB_DIV, self, o), *t = q ? op_unary(KU_TRUNC, q, 0, 0) : NULL;
        tensor_release(q);
        return t;
    }
    Tensor *q = apply_other(KB_FLOORDIV, self, o), *r = q ? apply_other(KB_REMAINDER, self, o) : NULL;
    Tensor *neg = r ? op_binary_scalar(KB_LT, q, 0, true, false) : NULL;
    Tensor *inexact = neg ? op_binary_scalar(KB_NE, r, 0, true, false) : NULL;
    Tensor *fix = inexact ? op_binary(KB_AND, neg, inexact) : NULL;
    Tensor *out = fix ? op_binary(KB_ADD, q, fix) : NULL;
    tensor_release(q), tensor_release(r), tensor_release(neg), tensor_release(inexact), tensor_release(fix);
    return out;
}

/* self op other, with div's rounding mode, rounded to the result dtype
 * (self converted to it first, as torch: an int64 or a 0-dim float32
 * self beside a scaled bf16 other is rounded to bf16) */
static Tensor *binary_other(KBinOp op, Tensor *self, const Other *o) {
    if (o->result_dtype < 0)
        return o->rounding == 2 ? trunc_div(self, o) : apply_other(o->rounding == 1 ? KB_FLOORDIV : op, self, o);
    Tensor *s = tensor_to_dtype(self, (DType)o->result_dtype), *r = s ? apply_other(op, s, o) : NULL;
    tensor_release(s);
    return tensor_to_dtype_owned(r, (DType)o->result_dtype);
}

/* accel.sub(1, t), accel.pow(2, t): torch's arithmetic functions also take
 * a number first (as 1 - t, 2 ^ t) */
static bool number_first(lua_State *L) { return lua_type(L, 1) == LUA_TNUMBER && lu_is_tensor(L, 2); }

static bool takes_number_first(KBinOp op) { return op <= KB_DIV || op == KB_FLOORDIV || op == KB_REMAINDER; }

/* number op t, with the options of t's method (alpha scales t). As torch,
 * the number is a 0-dim tensor of t's kind, rounded to a bf16 / fp16 t's
 * dtype also for mul and div (t * number scales by its full value). An
 * integer beside an integer tensor is a wrapped scalar, as in 2 * t: it
 * keeps t's dtype also when t is 0-dim (accel.mul(2, int32 0-dim) is int32)
 * and wraps into a uint8 / int32 one as torch (accel.sub(300, uint8 5) is 39). */
static Tensor *number_op(lua_State *L, KBinOp op) {
    Tensor *t = lu_check_tensor(L, 2);
    Other o = other_arg(L, op, t); /* may raise: before n exists */
    Tensor *r;
    if (lua_isinteger(L, 1) && !lu_is_wide_integer(L, 1) && !dtype_is_float(t->dtype) && t->dtype != DT_BOOL) {
        Other n = {.v = (double)lua_tointeger(L, 1), .is_int = true, .rounding = o.rounding,
                   .result_dtype = o.result_dtype, .number_lhs = true};
        r = binary_other(op, o.t, &n);
    } else {
        Tensor *n = lu_tensor_or_scalar(L, 1, t);
        r = binary_other(op, n, &o);
        tensor_release(n);
    }
    if (o.owned) tensor_release(o.t);
    return r;
}

static int binary_method(lua_State *L) {
    KBinOp op = (KBinOp)lua_tointeger(L, lua_upvalueindex(1));
    if (takes_number_first(op) && number_first(L)) return ret(L, number_op(L, op));
    Tensor *self = SELF; /* first: t.add(x) is the method-call error */
    Other o = other_arg(L, op, self);
    Tensor *r = binary_other(op, self, &o);
    if (o.owned) tensor_release(o.t);
    return ret(L, r);
}

static int binary_method_(lua_State *L) {
    KBinOp op = (KBinOp)lua_tointeger(L, lua_upvalueindex(1));
    Tensor *a = SELF;
    Other o = other_arg(L, op, a);
    if (o.rounding == 2) {
        if (o.owned) tensor_release(o.t);
        return lu_error(L, "div_: rounding_mode = 'trunc' in place is not supported; use t = t:div(other, "
                           "{rounding_mode = 'trunc'})");
    }
    if (o.rounding == 1) op = KB_FLOORDIV;
    int rc = o.t ? op_binary_(op, a, o.t) : op_binary_scalar_(op, a, o.v, o.is_int);
    if (o.owned) tensor_release(o.t);
    return ret_rc(L, rc);
}

static int mm_add(lua_State *L) { return ret(L, binary(L, KB_ADD, 1, 2)); }
static int mm_sub(lua_State *L) { return ret(L, binary(L, KB_SUB, 1, 2)); }
static int mm_mul(lua_State *L) { return ret(L, binary(L, KB_MUL, 1, 2)); }
static int mm_div(lua_State *L) { return ret(L, binary(L, KB_DIV, 1, 2)); }
static int mm_idiv(lua_State *L) { return ret(L, binary(L, KB_FLOORDIV, 1, 2)); }
static int mm_mod(lua_State *L) { return ret(L, binary(L, KB_REMAINDER, 1, 2)); }
static int mm_unm(lua_State *L) { return ret(L, op_unary(KU_NEG, SELF, 0, 0)); }
/* Lua 5.4's & | ~ << >> and unary ~, as PyTorch's operators: bitwise on
 * integers, logical on bools */
static int mm_band(lua_State *L) { return ret(L, binary(L, KB_BAND, 1, 2)); }
static int mm_bor(lua_State *L) { return ret(L, binary(L, KB_BOR, 1, 2)); }
static int mm_bxor(lua_State *L) { return ret(L, binary(L, KB_BXOR, 1, 2)); }
static int mm_shl(lua_State *L) { return ret(L, binary(L, KB_SHL, 1, 2)); }
static int mm_shr(lua_State *L) { return ret(L, binary(L, KB_SHR, 1, 2)); }
static int mm_bnot(lua_State *L) { return ret(L, op_unary(KU_BNOT, SELF, 0, 0)); }

/* t:isnan(), t:isinf(), t:isfinite(): bool tensors, as torch's (x ~= x is
 * NaN; |x| == inf is inf; x - x == 0 only where x is finite). */
static int t_isnan(lua_State *L) {
    Tensor *self = SELF;
    lu_check_no_more_args(L, 2);
    return ret(L, op_binary(KB_NE, self, self));
}

/* isinf / isfinite of an integer or bool tensor: all v, as torch's (bool
 * has neither abs nor sub) */
static int integral_const(lua_State *L, const Tensor *self, bool v) {
    return ret(L, tensor_full(self->shape, self->ndim, v, DT_BOOL, self->device));
}

static int t_isinf(lua_State *L) {
    Tensor *self = SELF;
    lu_check_no_more_args(L, 2);
    if (!dtype_is_float(self->dtype)) return integral_const(L, self, false);
    Tensor *m = op_unary(KU_ABS, self, 0, 0);
    Tensor *out = m ? op_binary_scalar(KB_EQ, m, INFINITY, false, false) : NULL;
    tensor_release(m);
    return ret(L, out);
}

static int t_isfinite(lua_State *L) {
    Tensor *self = SELF;
    lu_check_no_more_args(L, 2);
    if (!dtype_is_float(self->dtype)) return integral_const(L, self, true);
    Tensor *d = op_binary(KB_SUB, self, self);
    Tensor *out = d ? op_binary_scalar(KB_EQ, d, 0, true, false) : NULL;
    tensor_release(d);
    return ret(L, out);
}

/* a ^ b: scalar exponents use the unary kernels (exact backward). Integer
 * tensors use the binary kernel with PyTorch's promotion (int ^ int stays
 * integer, int ^ float is float32); the unary kernels are float-only. */
/* An integer tensor to a negative integer power: an error, as torch. */
static void check_int_power(lua_State *L, const Tensor *a, int ib) {
    if (!dtype_is_float(a->dtype) && lua_isinteger(L, ib) && lua_tointeger(L, ib) < 0)
        lu_error(L, "pow: Integers to negative integer powers are not allowed (the tensor is %s)",
                 dtype_name(a->dtype));
}

static Tensor *power(lua_State *L, int ia, int ib) {
    bool_operands(L, ia, ib);
    Tensor *a = lu_to_tensor(L, ia), *b = lu_to_tensor(L, ib);
    if (a && !b) {
        check_int_power(L, a, ib);
        if (!dtype_is_float(a->dtype)) return op_binary_scalar(KB_POW, a, scalar_arg(L, ib, "pow"), int_scalar(L, ib), false);
        return op_unary(KU_POW, a, scalar_arg(L, ib, "pow"), 0);
    }
    if (b && !a) {
        if (!dtype_is_float(b->dtype)) return op_binary_scalar(KB_POW, b, scalar_arg(L, ia, "pow"), int_scalar(L, ia), true);
        return op_unary(KU_RPOW, b, scalar_arg(L, ia, "pow"), 0);
    }
    if (!a) lu_error(L, "pow: tensor expected, got %s and %s", luaL_typename(L, ia), luaL_typename(L, ib));
    return op_binary(KB_POW, a, b);
}

static int mm_pow(lua_State *L) { return ret(L, power(L, 1, 2)); }
static int t_pow(lua_State *L) {
    if (!number_first(L)) (void)SELF; /* accel.pow(2, t) is 2 ^ t, as torch.pow */
    lu_check_no_more_args(L, 3);
    return ret(L, power(L, 1, 2));
}

static int t_pow_(lua_State *L) {
    Tensor *a = SELF;
    lu_check_no_more_args(L, 3);
    bool_operand(L, 2, a);
    Tensor *b = lu_to_tensor(L, 2);
    if (!b) check_int_power(L, a, 2);
    if (!b && !dtype_is_float(a->dtype)) return ret_rc(L, op_binary_scalar_(KB_POW, a, scalar_arg(L, 2, "pow_"), int_scalar(L, 2)));
    return ret_rc(L, b ? op_binary_(KB_POW, a, b) : op_unary_(KU_POW, a, scalar_arg(L, 2, "pow_"), 0));
}

/* ---- unary ops ---- */

static void unary_params(lua_State *L, KUnOp op, double *p1, double *p2) {
    *p1 = 0, *p2 = 0;
    lu_check_call_opts(L, 2, op == KU_LEAKY_RELU ? "negative_slope" : op == KU_GELU || op == KU_GELU_TANH ? "approximate" : "");
    if (op == KU_CLAMP) {
        *p1 = lua_isnoneornil(L, 2) ? -INFINITY : scalar_arg(L, 2, "clamp");
        *p2 = lua_isnoneornil(L, 3) ? INFINITY : scalar_arg(L, 3, "clamp");
        if (lua_isnoneornil(L, 2) && lua_isnoneornil(L, 3)) lu_error(L, "clamp: at least one of min and max must be given");
    } else if (op == KU_LEAKY_RELU) {
        *p1 = lua_isnumber(L, 2) ? lua_tonumber(L, 2) : lu_opt_number(L, 2, "negative_slope", 0.01);
    }
    if (op != KU_CLAMP) lu_check_no_more_args(L, op == KU_LEAKY_RELU || lu_is_opts(L, 2) ? 3 : 2);
}

static KUnOp unary_op(lua_State *L) {
    KUnOp op = (KUnOp)lua_tointeger(L, lua_upvalueindex(1));
    if (op == KU_GELU && lu_is_opts(L, 2)) {
        lua_getfield(L, 2, "approximate");
        if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TSTRING)
            lu_error(L, "gelu: approximate must be a string (\"none\" or \"tanh\"), got %s", luaL_typename(L, -1));
        const char *a = lua_tostring(L, -1);
        if (a && strcmp(a, "tanh") == 0) op = KU_GELU_TANH;
        else if (a && strcmp(a, "none") != 0) lu_error(L, "gelu: approximate must be \"none\" or \"tanh\", got \"%s\"", a);
        lua_pop(L, 1);
    }
    return op;
}

/* clamp({min =, max =}) as clamp(min, max): the bounds (numbers or
 * tensors) become arguments 2 and 3; nothing may follow them. */
static void clamp_options(lua_State *L) {
    if (!lu_is_opts(L, 2)) {
        lu_check_no_more_args(L, 4);
        return;
    }
    lu_check_call_opts(L, 2, "min max");
    lu_check_no_more_args(L, 3);
    lua_settop(L, 2);
    lua_getfield(L, 2, "min");
    lua_getfield(L, 2, "max");
    lua_remove(L, 2);
}

/* clamp(min, max) with a tensor bound (torch.clamp's Tensor overload,
 * op_clamp_tensors); nil: no bound.
 * in_place: for clamp_, which copies the result into self afterwards; when
 * autograd records, the comparisons then read a clone of self (so the
 * backward of maximum / minimum finds what it saved unmodified, as torch
 * saves self for an in-place op). */
static Tensor *clamp_tensors(lua_State *L, Tensor *self, bool in_place) {
    for (int i = 2; i <= 3; i++) /* checked before anything is made: an error leaks nothing */
        if (!lua_isnoneornil(L, i) && !lu_is_tensor(L, i) && lua_type(L, i) != LUA_TNUMBER)
            lu_error(L, "clamp: min and max must be tensors, numbers or nil, got %s", luaL_typename(L, i));
    Tensor *lo = lua_isnoneornil(L, 2) ? NULL : lu_tensor_or_scalar(L, 2, self);
    Tensor *hi = lua_isnoneornil(L, 3) ? NULL : lu_tensor_or_scalar(L, 3, self);
    Tensor *recorded[3] = {self, lo ? lo : self, hi ? hi : self};
    Tensor *src = in_place && ag_needs_grad(recorded, 3) ? tensor_clone(self) : tensor_retain(self);
    Tensor *out = src ? op_clamp_tensors(src, lo, hi) : NULL;
    tensor_release(src), tensor_release(lo), tensor_release(hi);
    return out;
}

/* Whether a clamp bound is a Lua float (1.5, 1.0): PyTorch promotes an
 * integer tensor clamped by a Python float to the default float dtype. */
static bool clamp_float_bound(lua_State *L) {
    bool any = false;
    for (int i = 2; i <= 3; i++) any = any || (lua_type(L, i) == LUA_TNUMBER && !lua_isinteger(L, i));
    return any;
}

/* The dtype t:clamp(min, max) with number bounds computes in, as torch's
 * result type: a float bound makes an integer tensor float32, an integer
 * bound a bool tensor int64. */
static DType clamp_dtype(lua_State *L, const Tensor *self) {
    if (dtype_is_float(self->dtype)) return self->dtype;
    if (clamp_float_bound(L)) return dtype_default_float();
    return self->dtype == DT_BOOL && (lua_isinteger(L, 2) || lua_isinteger(L, 3)) ? DT_I64 : self->dtype;
}

/* t:round({decimals = d}): true and d when decimals is given (an integer) */
static bool round_decimals_arg(lua_State *L, KUnOp op, int *decimals) {
    if (op != KU_ROUND || !lu_is_opts(L, 2)) return false;
    lu_check_call_opts(L, 2, "decimals");
    lu_check_no_more_args(L, 3);
    lua_getfield(L, 2, "decimals");
    if (lua_isnil(L, -1)) return lua_pop(L, 1), false;
    double d = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : NAN;
    if (!(d == floor(d) && fabs(d) <= 1000))
        lu_error(L, "round: decimals must be an integer (|decimals| <= 1000), got %s",
                 lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1));
    lua_pop(L, 1);
    *decimals = (int)d;
    return true;
}

static int t_copy_(lua_State *L);
static bool overwrite_check(lua_State *L, Tensor *t, bool src_grad, const char *op);

/* clamp's number bounds must suit the result dtype, as torch's: a floating
 * one must hold them ("value cannot be converted to type c10::Half without
 * overflow"); an integer one takes a min below or a max above its range
 * (they clamp nothing) but refuses a min above it or a max below it
 * (uint8 clamp({max = -1}) would clamp to a wrapped 255) */
static void check_clamp_bounds(lua_State *L, DType rd, const char *op) {
    int64_t lo, hi;
    dtype_int_range(rd, &lo, &hi);
    for (int i = 2; i <= 3; i++) {
        if (lua_type(L, i) != LUA_TNUMBER) continue;
        double v = lua_tonumber(L, i);
        if (dtype_is_float(rd)) lu_check_fill_value(L, v, rd, op);
        else if (rd != DT_BOOL && (i == 2 ? v > (double)hi : v < (double)lo))
            lu_error(L, "%s: %s value %.17g is outside the representable range of %s (%lld to %lld)", op,
                     i == 2 ? "min" : "max", v, dtype_name(rd), (long long)lo, (long long)hi);
    }
}

static int unary_method(lua_State *L) {
    Tensor *self = SELF;
    KUnOp op = unary_op(L);
    int decimals;
    if (round_decimals_arg(L, op, &decimals)) return ret(L, op_round_decimals(self, decimals));
    if (op == KU_CLAMP) clamp_options(L);
    if (op == KU_CLAMP && (lu_is_tensor(L, 2) || lu_is_tensor(L, 3))) return ret(L, clamp_tensors(L, self, false));
    double p1, p2;
    unary_params(L, op, &p1, &p2);
    if (op == KU_CLAMP) check_clamp_bounds(L, clamp_dtype(L, self), "clamp");
    if (op == KU_CLAMP && clamp_dtype(L, self) != self->dtype) {
        Tensor *f = tensor_to_dtype(self, clamp_dtype(L, self));
        Tensor *r = f ? op_unary(op, f, p1, p2) : NULL;
        tensor_release(f);
        return ret(L, r);
    }
    return ret(L, op_unary(op, self, p1, p2));
}

static int unary_method_(lua_State *L) {
    Tensor *self = SELF;
    KUnOp op = unary_op(L);
    int decimals;
    if (round_decimals_arg(L, op, &decimals)) { /* t:copy_(t:round({decimals = d})) */
        overwrite_check(L, self, false, "round_");
        Tensor *out = op_round_decimals(self, decimals);
        lua_settop(L, 1);
        lu_push_tensor(L, out); /* owned by the stack from here */
        return t_copy_(L);
    }
    if (op == KU_CLAMP) clamp_options(L);
    if (op == KU_CLAMP && (lu_is_tensor(L, 2) || lu_is_tensor(L, 3))) { /* t:copy_(t:clamp(lo, hi)) */
        Tensor *out = clamp_tensors(L, self, true);
        lua_settop(L, 1);
        lu_push_tensor(L, out); /* owned by the stack from here */
        if (out && !tensor_same_shape(out, self))
            return lu_error(L, "clamp_: output with shape %s doesn't match the broadcast shape %s (as PyTorch)",
                            tensor_shape_str(self), tensor_shape_str(out));
        if (out && dtype_is_float(out->dtype) && !dtype_is_float(self->dtype))
            return lu_error(L, "clamp_: result type %s can't be cast to the in-place output's type %s (as PyTorch)",
                            dtype_name(out->dtype), dtype_name(self->dtype));
        return t_copy_(L);
    }
    double p1, p2;
    unary_params(L, op, &p1, &p2);
    if (op == KU_CLAMP) check_clamp_bounds(L, clamp_dtype(L, self), "clamp_");
    if (op == KU_CLAMP && clamp_dtype(L, self) != self->dtype)
        return lu_error(L, "clamp_: %s bound makes the result %s, which cannot be written into this %s "
                           "tensor in place (as PyTorch); use t:clamp(...)%s",
                        clamp_float_bound(L) ? "a float" : "an integer", dtype_name(clamp_dtype(L, self)),
                        dtype_name(self->dtype), clamp_float_bound(L) ? " or integer bounds" : "");
    return ret_rc(L, op_unary_(op, self, p1, p2));
}

/* ---- reductions ---- */

/* The stack index of the trailing options table of a method call, or 0. */
static int trailing_opts(lua_State *L) {
    int top = lua_gettop(L);
    return top >= 2 && lu_is_opts(L, top) ? top : 0;
}

/* A reduction's dims given positionally (argument 2: a dim or a list; nil
 * followed by more arguments: every dim) into dims / *n; returns the next
 * argument's index. */
static int positional_dims(lua_State *L, int *dims, int *n) {
    if (lua_isnil(L, 2) && lua_gettop(L) >= 3) return 3; /* t:sum(nil, keepdim): all dims */
    if (!(lua_type(L, 2) == LUA_TNUMBER || (lua_istable(L, 2) && !lu_is_opts(L, 2)))) return 2;
    *n = lu_dims(L, 2, dims); /* a float dim is an error there, as torch's */
    return 3;
}

/* {dim =} of the options table at opts (when it is one) into dims / *n. */
static void option_dims(lua_State *L, int opts, int *dims, int *n) {
    if (!lu_is_opts(L, opts)) return;
    lua_getfield(L, opts, "dim");
    if (!lua_isnil(L, -1)) *n = lu_dims(L, lua_gettop(L), dims);
    lua_pop(L, 1);
}

/* After a reduction's dims and keepdim only its options table may follow:
 * torch refuses t.sum(0, 1) (keepdim must be a bool), t.sum("1") and a
 * positional dtype (keyword-only) rather than dropping them. */
static void check_reduce_tail(lua_State *L, int idx) {
    if (!lua_isnoneornil(L, idx) && !lu_is_opts(L, idx))
        lu_arg_type_error(L, idx, idx == 2 ? "a dim, a list of dims or an options table"
                                  : lu_is_dtype(L, idx) ? "the options table (a dtype goes in it: {dtype = ...})"
                                  : idx == 3 ? "a boolean keepdim (several dims go in one list: {1, 2})"
                                             : "the options table");
    lu_check_no_more_after_opts(L, idx);
}

/* Parses (dim|{dims}|nil, [keepdim bool|nil], [opts]) whose opts may hold
 * the keys listed (space-separated; dim and keepdim always); returns the
 * number of dims. */
static int reduce_args(lua_State *L, int *dims, bool *keepdim, const char *keys) {
    int n = 0;
    lu_check_call_opts(L, trailing_opts(L), keys);
    int opts = positional_dims(L, dims, &n);
    bool keep = false;
    if (lua_isboolean(L, opts)) keep = lua_toboolean(L, opts), opts++;
    else if (lua_isnil(L, opts) && opts < lua_gettop(L)) opts++; /* t:sum(dim, nil, {...}) */
    check_reduce_tail(L, opts);
    *keepdim = lu_opt_bool(L, opts, "keepdim", keep);
    option_dims(L, opts, dims, &n);
    return n;
}

/* sum / mean / prod take torch's {dtype =}: the input is cast to it first
 * and the result is of that dtype (an integer sum or product, which runs in
 * int64, wraps into it as PyTorch's does) */
static int reduce_method(lua_State *L) {
    Tensor *self = SELF;
    KRedOp op = (KRedOp)lua_tointeger(L, lua_upvalueindex(1));
    int dims[TENSOR_MAX_DIMS];
    bool keep;
    bool takes_dtype = op == KR_SUM || op == KR_MEAN || op == KR_PROD;
    int n = reduce_args(L, dims, &keep, takes_dtype ? "dim keepdim dtype" : "dim keepdim");
    int dt = takes_dtype ? lu_opt_dtype(L, trailing_opts(L), "dtype", -1) : -1;
    Tensor *a = op == KR_PROD ? precision_fp32_input(self) : tensor_retain(self); /* on autocast's float32 list */
    Tensor *cast = a && dt >= 0 ? op_cast(a, (DType)dt) : tensor_retain(a);
    Tensor *r = cast ? op_reduce(op, cast, dims, n, keep) : NULL;
    tensor_release(a), tensor_release(cast);
    return ret(L, dt >= 0 ? tensor_to_dtype_owned(r, (DType)dt) : r);
}

/* max/min: (), (dim[, keepdim]), (other tensor) */
static int maxmin(lua_State *L, bool want_max) {
    Tensor *a = SELF;
    if (lu_is_tensor(L, 2)) { /* torch.max(input, other): nothing more */
        lu_check_no_more_args(L, 3);
        return ret(L, op_binary(want_max ? KB_MAX : KB_MIN, a, lu_check_tensor(L, 2)));
    }
    if (lua_isnoneornil(L, 2) || lu_is_opts(L, 2)) {
        int dims[TENSOR_MAX_DIMS];
        bool keep;
        int n = reduce_args(L, dims, &keep, "dim keepdim");
        if (n == 0 && keep)
            return lu_error(L, "%s: keepdim needs a dim (t:%s(dim, true)); the reduction over every element is 0-d, as "
                               "PyTorch's", want_max ? "max" : "min", want_max ? "max" : "min");
        if (n == 0) return ret(L, op_max_all(a, want_max));
        lua_settop(L, 1);
        lua_pushinteger(L, dims[0] >= 0 ? dims[0] + 1 : dims[0]);
        lua_pushboolean(L, keep);
    }
    int dim = lu_dim(L, 2);
    lu_check_call_opts(L, trailing_opts(L), "keepdim");
    bool keep = lua_isboolean(L, 3) ? lua_toboolean(L, 3) : lu_opt_bool(L, 3, "keepdim", false);
    check_reduce_tail(L, lua_isboolean(L, 3) ? 4 : 3);
    Tensor *v = NULL, *ix = NULL;
    if (op_max_dim(a, dim, keep, want_max, &v, &ix) < 0) lu_core_error(L);
    lu_push_tensor(L, v);
    lu_push_tensor(L, ix);
    return 2;
}

static int t_max(lua_State *L) { return maxmin(L, true); }
static int t_min(lua_State *L) { return maxmin(L, false); }

static int argmaxmin(lua_State *L, bool want_max) {
    Tensor *a = SELF;
    bool all = lua_isnoneornil(L, 2) || lu_is_opts(L, 2);
    lu_check_call_opts(L, trailing_opts(L), "dim keepdim");
    int dim = 0;
    if (!all) dim = lu_dim(L, 2);
    int o = all && !(lua_isnil(L, 2) && !lua_isnone(L, 3)) ? 2 : 3; /* t:argmax(nil, keepdim) */
    bool keep = lua_isboolean(L, o) ? lua_toboolean(L, o) : lu_opt_bool(L, o, "keepdim", false);
    check_reduce_tail(L, lua_isboolean(L, o) ? o + 1 : o);
    if (all && lu_is_opts(L, 2)) {
        lua_getfield(L, 2, "dim");
        if (!lua_isnil(L, -1)) all = false, dim = lu_dim(L, lua_gettop(L));
        lua_pop(L, 1);
    }
    return ret(L, op_argmax(a, dim, keep, want_max, all));
}

static int t_argmax(lua_State *L) { return argmaxmin(L, true); }
static int t_argmin(lua_State *L) { return argmaxmin(L, false); }

/* unbiased_given: a positional unbiased came before opts */
static double correction_arg(lua_State *L, int opts, double c, const char *name, bool unbiased_given) {
    if (lu_is_opts(L, opts)) {
        lua_getfield(L, opts, "unbiased");
        if (lua_isboolean(L, -1)) c = lua_toboolean(L, -1) ? 1.0 : 0.0;
        lua_getfield(L, opts, "correction");
        if ((unbiased_given || !lua_isnil(L, -2)) && !lua_isnil(L, -1))
            lu_error(L, "%s: give unbiased or correction, not both (PyTorch refuses both too)", name);
        lua_pop(L, 2);
        c = lu_opt_number(L, opts, "correction", c);
    }
    return c;
}

/* t:var / t:std in torch's positional forms ([dim [, unbiased [, keepdim]]])
 * and (unbiased), then [{dim=, correction=, unbiased=, keepdim=}] */
static Tensor *variance(lua_State *L, bool want_std) {
    Tensor *self = SELF;
    int dims[TENSOR_MAX_DIMS], n = 0;
    double corr = 1.0;
    bool keep = false;
    lu_check_call_opts(L, trailing_opts(L), "dim keepdim correction unbiased");
    int pos = positional_dims(L, dims, &n);
    bool dim_given = pos == 3; /* a dim, a list or nil: (dim, unbiased, keepdim) follow */
    bool unbiased_given = lua_isboolean(L, pos);
    if (unbiased_given) corr = lua_toboolean(L, pos) ? 1.0 : 0.0, pos++;
    else if (dim_given && lua_isnil(L, pos) && pos < lua_gettop(L)) pos++; /* t:var(dim, nil, keepdim) */
    if (dim_given && lua_isboolean(L, pos)) keep = lua_toboolean(L, pos), pos++;
    check_reduce_tail(L, pos);
    option_dims(L, pos, dims, &n);
    keep = lu_opt_bool(L, pos, "keepdim", keep);
    corr = correction_arg(L, pos, corr, want_std ? "std" : "var", unbiased_given);
    return (want_std ? op_std : op_var)(self, dims, n, corr, keep);
}

static int t_var(lua_State *L) { return ret(L, variance(L, false)); }
static int t_std(lua_State *L) { return ret(L, variance(L, true)); }

/* t:norm([p], [dim], [opts]) */
static int t_norm(lua_State *L) {
    Tensor *a = SELF;
    double p = 2;
    int pos = 2; /* the first positional argument is always p, as torch's */
    if (lua_type(L, 2) == LUA_TNUMBER) {
        p = lua_tonumber(L, 2), pos = 3;
    } else if (lua_type(L, 2) == LUA_TSTRING) {
        const char *s = lua_tostring(L, 2);
        p = strcmp(s, "inf") == 0 ? INFINITY : strcmp(s, "-inf") == 0 ? -INFINITY : strcmp(s, "fro") == 0 ? 2 : NAN;
        if (isnan(p)) lu_error(L, "norm: unknown norm type '%s'", s);
        pos = 3;
    } else if (lua_isnil(L, 2) && lua_gettop(L) >= 3) {
        pos = 3; /* t:norm(nil, dim): the default p */
    }
    int dims[TENSOR_MAX_DIMS], n = 0;
    lu_check_call_opts(L, trailing_opts(L), "p dim keepdim dtype");
    if (lua_type(L, pos) == LUA_TNUMBER || (lua_istable(L, pos) && !lu_is_opts(L, pos))) n = lu_dims(L, pos, dims), pos++;
    else if (lua_isnil(L, pos) && pos < lua_gettop(L)) pos++; /* t:norm(p, nil, keepdim) */
    bool keep = lua_isboolean(L, pos) ? lua_toboolean(L, pos++) : false; /* t:norm(p, dim, keepdim) */
    if (pos == 2 && !lua_isnoneornil(L, 2) && !lu_is_opts(L, 2)) lu_arg_type_error(L, 2, "a norm type p (a number, 'fro' or 'inf')");
    check_reduce_tail(L, pos);
    keep = lu_opt_bool(L, pos, "keepdim", keep);
    if (lu_is_opts(L, pos)) {
        lua_getfield(L, pos, "p");
        bool p_twice = !lua_isnil(L, -1) && pos > 2 && !lua_isnil(L, 2);
        lua_pop(L, 1);
        if (p_twice) lu_error(L, "norm: got multiple values for argument 'p' (positional and {p =}), as PyTorch refuses");
        p = lu_opt_number(L, pos, "p", p);
        lua_getfield(L, pos, "dim");
        if (!lua_isnil(L, -1)) n = lu_dims(L, lua_gettop(L), dims);
        lua_pop(L, 1);
        int dt = lu_opt_dtype(L, pos, "dtype", (int)a->dtype); /* torch's: the input cast to it first */
        if (dt != (int)a->dtype) {
            if (!dtype_is_float((DType)dt)) lu_error(L, "norm: dtype must be a floating point dtype, got %s", dtype_name((DType)dt));
            Tensor *c = tensor_to_dtype(a, (DType)dt), *r = c ? op_norm(c, p, dims, n, keep) : NULL;
            tensor_release(c);
            return ret(L, r);
        }
    }
    return ret(L, op_norm(a, p, dims, n, keep));
}

/* ---- shape and views ---- */

static int shape_call(lua_State *L) {
    lua_settop(L, 1);
    return 1;
}

/* size == size or size == {2, 3}: equal lengths and entries (as torch.Size == tuple) */
static int shape_eq(lua_State *L) {
    bool eq = lua_istable(L, 1) && lua_istable(L, 2) && lua_rawlen(L, 1) == lua_rawlen(L, 2);
    for (lua_Integer i = 1; eq && i <= (lua_Integer)lua_rawlen(L, 1); i++) {
        lua_rawgeti(L, 1, i);
        lua_rawgeti(L, 2, i);
        eq = lua_rawequal(L, -1, -2) || (lua_isnumber(L, -1) && lua_isnumber(L, -2) && lua_tonumber(L, -1) == lua_tonumber(L, -2));
        lua_pop(L, 2);
    }
    lua_pushboolean(L, eq);
    return 1;
}

static int shape_tostring(lua_State *L) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, "accel.Size({");
    int n = (int)lua_rawlen(L, 1);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, 1, i);
        lua_pushfstring(L, "%s%" LUA_FMT_INT, i > 1 ? ", " : "", LUA_FMT_INT_ARG(lua_tointeger(L, -1)));
        luaL_addvalue(&b);
        lua_pop(L, 1);
    }
    luaL_addstring(&b, "})");
    luaL_pushresult(&b);
    return 1;
}

static void push_sizes(lua_State *L, const int64_t *shape, int nd) {
    lua_createtable(L, nd, 0);
    for (int d = 0; d < nd; d++) {
        lua_pushinteger(L, shape[d]);
        lua_rawseti(L, -2, d + 1);
    }
    luaL_setmetatable(L, "accel.Size");
}

static void push_shape(lua_State *L, const Tensor *t) { push_sizes(L, t->shape, t->ndim); }

/* accel.Size({2, 3}) (torch.Size([2, 3])): a size from a list of sizes, as t.shape prints */
int lu_size_new(lua_State *L) {
    int64_t shape[TENSOR_MAX_DIMS];
    int next = 1, nd = lua_istable(L, 1) ? lu_shape(L, 1, shape, &next) : 0;
    if (next != 2) return lu_error(L, "Size: expected a list of sizes, got %s", luaL_typename(L, 1));
    lu_check_no_more_args(L, 2);
    push_sizes(L, shape, nd);
    return 1;
}

/* The dim at idx for size(d) / stride(d): a 0-dim tensor has none (as torch). */
static int size_dim(lua_State *L, const Tensor *t, int idx, const char *op) {
    int d = lu_dim(L, idx);
    if (t->ndim == 0)
        lu_error(L, "%s: dimension %d specified, but the tensor is 0-dim (it has no dimensions)", op, d >= 0 ? d + 1 : d);
    d = tensor_wrap_dim(t, d, op);
    if (d < 0) lu_core_error(L);
    return d;
}

static int t_size(lua_State *L) {
    Tensor *t = lu_check_self_meta(L);
    lu_check_no_more_args(L, 3);
    if (lua_isnoneornil(L, 2)) {
        push_shape(L, t);
        return 1;
    }
    lua_pushinteger(L, t->shape[size_dim(L, t, 2, "size")]);
    return 1;
}

static int t_stride(lua_State *L) {
    Tensor *t = SELF;
    lu_check_no_more_args(L, 3);
    if (lua_isnoneornil(L, 2)) {
        lua_createtable(L, t->ndim, 0);
        for (int d = 0; d < t->ndim; d++) lua_pushinteger(L, t->stride[d]), lua_rawseti(L, -2, d + 1);
        return 1;
    }
    lua_pushinteger(L, t->stride[size_dim(L, t, 2, "stride")]);
    return 1;
}

static int t_dim(lua_State *L) {
    const Tensor *self = lu_check_self_meta(L);
    lu_check_no_more_args(L, 2);
    lua_pushinteger(L, self->ndim);
    return 1;
}

static int t_numel(lua_State *L) {
    const Tensor *self = lu_check_self_meta(L);
    lu_check_no_more_args(L, 2);
    lua_pushinteger(L, self->numel);
    return 1;
}

static int t_len(lua_State *L) {
    Tensor *t = SELF;
    if (t->ndim == 0) return lu_error(L, "len() of a 0-d tensor");
    lua_pushinteger(L, t->shape[0]);
    return 1;
}

typedef Tensor *(*ShapeFn)(Tensor *t, const int64_t *shape, int ndim);

/* t:view(shape...) and the like: fn(t, the shape given) */
static int to_shape(lua_State *L, ShapeFn fn, const char *op) {
    Tensor *self = SELF;
    if (lua_gettop(L) < 2) return lu_error(L, "%s: expected a shape (sizes, or a list of them; {} for 0-dim)", op);
    int64_t shape[TENSOR_MAX_DIMS];
    int next, nd = lu_sizes(L, 2, shape, &next);
    if (lua_gettop(L) >= next)
        return lu_error(L, "%s: bad argument #%d (%s): expected sizes (numbers) or one list of them", op, next - 1,
                        luaL_typename(L, next));
    return ret(L, fn(self, shape, nd));
}

/* t:view_as(other) and the like: fn(t, other's shape) */
static int to_shape_of(lua_State *L, ShapeFn fn) {
    Tensor *self = SELF, *o = lu_check_tensor(L, 2);
    lu_check_no_more_args(L, 3);
    return ret(L, fn(self, o->shape, o->ndim));
}

static int t_view(lua_State *L) { return to_shape(L, tensor_view, "view"); }
static int t_reshape(lua_State *L) { return to_shape(L, tensor_reshape, "reshape"); }
static int t_view_as(lua_State *L) { return to_shape_of(L, tensor_reshape); }
static int t_expand(lua_State *L) { return to_shape(L, tensor_expand, "expand"); }
static int t_expand_as(lua_State *L) { return to_shape_of(L, tensor_expand); }

/* ---- repeat / tile / repeat_interleave: expand + reshape, index_select ---- */

/* t with a new dim of size r inserted at `at` (0-based) and merged with its
 * neighbour: into dim at (at + 1 after the insert: r copies of the whole dim,
 * as repeat) or into dim at - 1 (r copies of each slice, as
 * repeat_interleave). Autograd through unsqueeze, expand and reshape;
 * consumes t. */
static Tensor *repeat_dim(Tensor *t, int at, int64_t r, bool whole) {
    Tensor *u = t ? tensor_unsqueeze(t, at) : NULL;
    tensor_release(t);
    if (!u) return NULL;
    int64_t shape[TENSOR_MAX_DIMS];
    memcpy(shape, u->shape, sizeof(int64_t) * (size_t)u->ndim);
    shape[at] = r;
    Tensor *e = tensor_expand(u, shape, u->ndim);
    tensor_release(u);
    if (!e) return NULL;
    int lo = whole ? at : at - 1;
    shape[lo] *= shape[lo + 1];
    memmove(shape + lo + 1, shape + lo + 2, sizeof(int64_t) * (size_t)(e->ndim - lo - 2));
    Tensor *out = tensor_reshape(e, shape, e->ndim - 1);
    tensor_release(e);
    return out;
}

/* As torch, repeat and repeat_interleave return new memory: a result that
 * is still a view of the input (every count 1, or a size-1 dim) is copied. */
static int ret_copy(lua_State *L, Tensor *r) {
    if (r && r->is_view) {
        Tensor *c = tensor_clone(r);
        tensor_release(r);
        r = c;
    }
    return ret(L, r);
}

/* t["repeat"](t, sizes) and t:tile(sizes): tile pads the sizes with leading
 * 1s to t's dims, repeat needs at least as many sizes as dims. */
static int repeat_like(lua_State *L, bool tile) {
    const char *op = tile ? "tile" : "repeat";
    Tensor *self = SELF;
    int64_t reps[TENSOR_MAX_DIMS], shape[TENSOR_MAX_DIMS];
    int next, n = lu_sizes(L, 2, reps, &next);
    if (lua_gettop(L) >= next)
        return lu_error(L, "%s: bad argument #%d (%s): expected sizes (numbers) or one list of them", op, next - 1,
                        luaL_typename(L, next));
    if (tile && n < self->ndim) {
        int pad = self->ndim - n;
        memmove(reps + pad, reps, sizeof(int64_t) * (size_t)n);
        for (int i = 0; i < pad; i++) reps[i] = 1;
        n = self->ndim;
    }
    if (n < self->ndim)
        return lu_error(L, "%s: Number of dimensions of repeat dims can not be smaller than number of dimensions of "
                           "tensor (%d sizes for shape %s)", op, n, tensor_shape_str(self));
    if (n >= TENSOR_MAX_DIMS) return lu_error(L, "%s: %d dims; at most %d are supported", op, n, TENSOR_MAX_DIMS - 1);
    char out[256] = "";
    for (int i = 0, lead = n - self->ndim; i < n; i++) {
        shape[i] = i < lead ? 1 : self->shape[i - lead];
        snprintf(out + strlen(out), sizeof out - strlen(out), "%s%lld", i ? ", " : "", (long long)(shape[i] * reps[i]));
    }
    for (int i = 0; i < n; i++)
        if (reps[i] < 0)
            return lu_error(L, "%s: Trying to create tensor with negative dimension %lld: [%s]", op,
                            (long long)(shape[i] * reps[i]), out);
    Tensor *r = tensor_reshape(self, shape, n); /* a view with the leading 1s */
    for (int d = 0; d < n && r; d++)
        if (reps[d] != 1) r = repeat_dim(r, d, reps[d], true);
    return ret_copy(L, r);
}

static int t_repeat(lua_State *L) { return repeat_like(L, false); }
static int t_tile(lua_State *L) { return repeat_like(L, true); }

/* repeat_interleave's index for the repeats tensor rep (integer, 0-dim or
 * 1-dim with len entries or one) over a dim of size len: i repeated rep[i]
 * times, int64 on device dev. Checks rep before allocating. */
static Tensor *interleave_index(lua_State *L, Tensor *rep, int64_t len, Device dev) {
    if (dtype_is_float(rep->dtype) || rep->dtype == DT_BOOL)
        lu_error(L, "repeat_interleave: repeats must be an integer tensor, got %s", dtype_name(rep->dtype));
    if (rep->ndim > 1) lu_error(L, "repeat_interleave: repeats must be 0-dim or 1-dim tensor");
    if (rep->numel != 1 && rep->numel != len)
        lu_error(L, "repeat_interleave: repeats must have the same size as input along dim, but got repeats.size(0) = "
                    "%lld and input.size(0) = %lld", (long long)rep->numel, (long long)len);
    int64_t total = 0;
    for (int64_t i = 0; i < rep->numel; i++) {
        int64_t k = (int64_t)tensor_get_flat(rep, i);
        if (k < 0) lu_error(L, "repeat_interleave: repeats can not be negative");
        total += rep->numel == 1 ? k * len : k;
    }
    Tensor *idx = tensor_empty((int64_t[]){total}, 1, DT_I64, (Device){.type = DEV_CPU});
    if (!idx) return NULL;
    int64_t *p = tensor_data(idx), at = 0;
    for (int64_t i = 0; i < len; i++)
        for (int64_t k = (int64_t)tensor_get_flat(rep, rep->numel == 1 ? 0 : i); k > 0; k--) p[at++] = i;
    if (dev.type == DEV_CPU) return idx;
    Tensor *moved = tensor_to_device(idx, dev);
    tensor_release(idx);
    return moved;
}

/* t:repeat_interleave(repeats, [dim]) or (repeats, {dim =}): each slice
 * along dim repeated (without dim: of t flattened); repeats a whole number
 * or an integer tensor. t:repeat_interleave() of a 1-dim integer t is the
 * index [1 x t[1], 2 x t[2], ...] counted from 0 (torch.repeat_interleave(repeats)). */
static int t_repeat_interleave(lua_State *L) {
    Tensor *self = SELF;
    if (lua_isnoneornil(L, 2)) {
        lu_check_no_more_args(L, 3);
        if (self->ndim != 1) return lu_error(L, "repeat_interleave: repeats must be 0-dim or 1-dim tensor");
        return ret(L, interleave_index(L, self, self->shape[0], self->device));
    }
    int opts = lu_dim_keyword(L, 3, "dim");
    lu_check_no_more_args(L, opts ? opts + 1 : 4);
    bool flat = lua_isnoneornil(L, 3);
    int d = flat ? 0 : tensor_wrap_dim(self, lu_dim(L, 3), "repeat_interleave");
    if (d < 0) return lu_core_error(L);
    int64_t len = flat ? self->numel : self->ndim ? self->shape[d] : 1;
    Tensor *rep = lu_to_tensor(L, 2), *idx = NULL;
    int isint = 0;
    lua_Integer k = rep ? 0 : lua_tointegerx(L, 2, &isint);
    if (rep) {
        if (!(idx = interleave_index(L, rep, len, self->device))) return lu_core_error(L);
    } else if (!isint) {
        return lu_error(L, "repeat_interleave: repeats must be a whole number or an integer tensor, got %s",
                        lua_type(L, 2) == LUA_TNUMBER ? "a non-integer number" : luaL_typename(L, 2));
    } else if (k < 0) {
        return lu_error(L, "repeat_interleave: Repeats must be non-negative");
    }
    Tensor *t = flat || self->ndim == 0 ? tensor_reshape(self, (int64_t[]){-1}, 1) : tensor_retain(self), *r;
    if (idx) {
        r = t ? op_index_select(t, d, idx) : NULL;
        tensor_release(t);
        tensor_release(idx);
    } else {
        r = repeat_dim(t, d + 1, k, false);
    }
    return ret_copy(L, r);
}

static int t_transpose(lua_State *L) {
    Tensor *self = SELF; /* first: t.transpose(...) is a method-call error */
    lu_check_no_more_args(L, 4);
    return ret(L, tensor_transpose(self, lu_dim(L, 2), lu_dim(L, 3)));
}

static int t_t(lua_State *L) {
    Tensor *t = SELF;
    lu_check_no_more_args(L, 2);
    if (t->ndim > 2) return lu_error(L, "t: expects a tensor with <= 2 dims, got shape %s", tensor_shape_str(t));
    /* 0-D and 1-D: returned as is, but as a view that keeps the graph */
    return ret(L, ag_name_node(t->ndim < 2 ? tensor_transpose(t, 0, 0) : tensor_transpose(t, 0, 1), "TBackward0"));
}

static int t_permute(lua_State *L) {
    int dims[TENSOR_MAX_DIMS], n;
    if (lua_istable(L, 2)) {
        n = lu_dims(L, 2, dims);
        lu_check_no_more_args(L, 3);
    } else {
        n = lua_gettop(L) - 1;
        if (n > TENSOR_MAX_DIMS) return lu_error(L, "permute: too many dims");
        for (int i = 0; i < n; i++) dims[i] = lu_dim(L, i + 2);
    }
    return ret(L, tensor_permute(SELF, dims, n));
}

static int t_narrow(lua_State *L) {
    Tensor *self = SELF;
    lu_check_no_more_args(L, 5);
    lua_Integer start = luaL_checkinteger(L, 3);
    if (start == 0) return lu_error(L, "narrow: start 0 is invalid: positions are 1-based");
    int d = self->ndim ? tensor_wrap_dim(self, lu_dim(L, 2), "narrow") : 0;
    if (d < 0) lu_core_error(L);
    lua_Integer size = self->ndim ? self->shape[d] : 0;
    if (self->ndim && (start < -size || start > size + 1))
        return lu_error(L, "narrow: start %lld is out of range for dimension %d of size %lld (valid: 1..%lld or -%lld..-1)",
                        (long long)start, d + 1, (long long)size, (long long)size + 1, (long long)size);
    return ret(L, tensor_narrow(self, lu_dim(L, 2), start > 0 ? start - 1 : start, luaL_checkinteger(L, 4)));
}

static int t_select(lua_State *L) {
    Tensor *self = SELF;
    lu_check_no_more_args(L, 4);
    lua_Integer i = luaL_checkinteger(L, 3);
    if (i == 0) return lu_error(L, "select: index 0 is invalid: positions are 1-based (negative counts from the end)");
    return ret(L, tensor_select(self, lu_dim(L, 2), i > 0 ? i - 1 : i));
}

/* t:t_(), t:squeeze_(...), t:unsqueeze_(d), t:transpose_(a, b) (also
 * swapaxes_ / swapdims_; upvalue 2): the view the out-of-place method
 * (upvalue 1) makes becomes t itself, as PyTorch's in-place view ops change t's shape
 * and strides. t stays a base if it was one; views taken before keep their
 * own shape. A leaf that requires grad is refused, as in PyTorch. */
static int inplace_view(lua_State *L) {
    Tensor *self = SELF;
    const char *view = lua_tostring(L, lua_upvalueindex(1)), *name = lua_tostring(L, lua_upvalueindex(2));
    if (self->requires_grad && !self->grad_fn && ag_grad_enabled())
        return lu_error(L, "%s: a leaf tensor that requires grad cannot be changed in place (as PyTorch: a leaf "
                           "Variable that requires grad is being used in an in-place operation); use t = t:%s(...)",
                        name, view);
    const int n = lua_gettop(L);
    lua_getfield(L, LUA_REGISTRYINDEX, "accel.TensorMethods");
    lua_getfield(L, -1, view);
    for (int i = 1; i <= n; i++) lua_pushvalue(L, i);
    lua_call(L, n, 1);
    Tensor *v = tensor_retain(lu_check_tensor(L, -1));
    v->is_view = self->is_view;
    TensorUD *u = lua_touserdata(L, 1);
    tensor_release(u->t);
    u->t = v;
    lua_settop(L, 1);
    return 1;
}

/* t:unsqueeze(dim) or ({dim =}) */
static int t_unsqueeze(lua_State *L) {
    Tensor *self = SELF; /* first: t.unsqueeze(...) is a method-call error */
    lu_check_no_more_args(L, 3);
    lu_dim_keyword(L, 2, "dim");
    return ret(L, tensor_unsqueeze(self, lu_dim(L, 2)));
}

/* squeeze([dim | {dims}]) or ({dim = dim | {dims}}): torch 2.x also takes a list of dims */
static bool empty_table(lua_State *L, int idx) {
    if (!lua_istable(L, idx)) return false;
    lua_pushnil(L);
    if (!lua_next(L, idx)) return true;
    lua_pop(L, 2);
    return false;
}

static int t_squeeze(lua_State *L) {
    Tensor *self = SELF;
    lu_check_no_more_args(L, 3);
    if (!empty_table(L, 2)) lu_dim_keyword(L, 2, "dim"); /* {}: no dims (torch's dim=()), not an options table */
    if (!lua_istable(L, 2)) return ret(L, tensor_squeeze(self, lua_isnoneornil(L, 2) ? TENSOR_ALL_DIMS : lu_dim(L, 2)));
    int dims[TENSOR_MAX_DIMS], n = lu_dims(L, 2, dims);
    bool size1[TENSOR_MAX_DIMS] = {false};
    for (int i = 0; i < n; i++) {
        int d = tensor_wrap_dim(self, dims[i], "squeeze");
        if (d < 0) lu_core_error(L);
        size1[d] = self->ndim > 0 && self->shape[d] == 1;
    }
    Tensor *r = tensor_retain(self);
    for (int d = self->ndim - 1; d >= 0 && r; d--) /* from the last, so earlier dims keep their place */
        if (size1[d]) {
            Tensor *s = tensor_squeeze(r, d);
            tensor_release(r);
            r = s;
        }
    return ret(L, r);
}

/* A dim given as argument pos (before the options table at opts) or as
 * the option key; def when neither is. */
static int dim_arg_or_opt(lua_State *L, int pos, int opts, const char *key, int def) {
    if (pos >= opts || lua_isnil(L, pos)) return lu_opt_dim(L, opts, key, def);
    if (lu_opt_dim(L, opts, key, INT_MIN) != INT_MIN)
        lu_error(L, "flatten: got multiple values for %s (as an argument and as an option)", key);
    return lu_dim(L, pos);
}

/* t:flatten([start_dim], [end_dim]), then maybe {start_dim =, end_dim =} */
static int t_flatten(lua_State *L) {
    Tensor *self = SELF;
    int opts = 2;
    while (opts < 4 && !lua_isnone(L, opts) && !lu_is_opts(L, opts)) opts++;
    lu_check_call_opts(L, opts, "start_dim end_dim");
    lu_check_no_more_args(L, lu_is_opts(L, opts) ? opts + 1 : opts);
    int s = dim_arg_or_opt(L, 2, opts, "start_dim", 0), e = dim_arg_or_opt(L, 3, opts, "end_dim", -1);
    return ret(L, tensor_flatten(self, s, e));
}

/* contiguous / is_contiguous's {memory_format =}: tensors are row-major
 * only, so "contiguous_format" is the one format there is */
static void memory_format_arg(lua_State *L, const char *op, bool preserve_ok) {
    lu_check_call_opts(L, 2, "memory_format");
    lu_check_no_more_args(L, lu_is_opts(L, 2) ? 3 : 2);
    if (!lu_is_opts(L, 2) || lua_getfield(L, 2, "memory_format") == LUA_TNIL) return;
    const char *f = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : luaL_typename(L, -1);
    if (strcmp(f, "contiguous_format") != 0 && !(preserve_ok && strcmp(f, "preserve_format") == 0))
        lu_error(L, "%s: memory_format '%s' is not supported: tensors are row-major only (memory_format = "
                    "\"contiguous_format\"%s; channels_last is not provided)", op, f,
                 preserve_ok ? " or \"preserve_format\", the same here" : "");
    lua_pop(L, 1);
}

static void check_memory_format(lua_State *L, const char *op) { memory_format_arg(L, op, false); }

static int t_contiguous(lua_State *L) {
    Tensor *self = SELF;
    check_memory_format(L, "contiguous");
    return ret(L, tensor_contiguous(self));
}

static int t_is_contiguous(lua_State *L) {
    Tensor *self = SELF;
    check_memory_format(L, "is_contiguous");
    lua_pushboolean(L, tensor_is_contiguous(self));
    return 1;
}

static int t_clone(lua_State *L) {
    Tensor *self = SELF;
    memory_format_arg(L, "clone", true);
    return ret(L, tensor_clone(self));
}
static int t_detach(lua_State *L) {
    Tensor *self = SELF;
    lu_check_no_more_args(L, 2);
    return ret(L, tensor_detach(self));
}

static int t_detach_(lua_State *L) {
    Tensor *t = SELF;
    lu_check_no_more_args(L, 2);
    if (t->is_view) /* as torch, which would have to detach the base too */
        return lu_error(L, "detach_: can't detach views in-place (this tensor shares its base's storage); use "
                           "detach() instead");
    ag_set_grad_fn(t, NULL);
    t->requires_grad = false;
    lua_settop(L, 1);
    return 1;
}

/* The dim of split / chunk / unbind at idx: a number, {dim =} (torch's
 * keyword) or nothing (the first). */
static int cut_dim(lua_State *L, int idx) {
    lu_check_no_more_args(L, idx + 1);
    if (lu_is_opts(L, idx)) {
        lu_check_call_opts(L, idx, "dim");
        return lu_opt_dim(L, idx, "dim", 0);
    }
    return lua_isnoneornil(L, idx) ? 0 : lu_dim(L, idx);
}

/* split / chunk / unbind need a dimension to cut (torch: "expects at least a 1-dimensional tensor") */
static void check_has_dims(lua_State *L, const Tensor *t, const char *op) {
    if (t->ndim == 0) lu_error(L, "%s expects at least a 1-dimensional tensor", op);
}

/* t:scatter_add(dim, index, src): t with src added at index along dim */
static int t_scatter_add(lua_State *L) {
    Tensor *self = SELF;
    lu_check_no_more_args(L, 5);
    return ret(L, op_scatter_add(self, lu_dim(L, 2), lu_check_tensor(L, 3), lu_check_tensor(L, 4)));
}

/* t:index_add(dim, index, source, [{alpha = 1}]): t with alpha * source's
 * slices added at index along dim */
static int t_index_add(lua_State *L) {
    Tensor *self = SELF;
    lu_check_call_opts(L, 5, "alpha");
    lu_check_no_more_after_opts(L, 5);
    int dim = lu_dim(L, 2);
    Tensor *index = lu_check_tensor(L, 3), *source = lu_check_tensor(L, 4);
    double alpha = lu_opt_number(L, 5, "alpha", 1.0);
    if (alpha != floor(alpha) && !dtype_is_float(self->dtype))
        return lu_error(L, "index_add: For integral input tensors, argument alpha must not be a floating point number.");
    Tensor *scaled = alpha == 1.0 ? tensor_retain(source) : op_binary_scalar(KB_MUL, source, alpha, alpha == floor(alpha), false);
    Tensor *r = scaled ? op_index_add(self, dim, index, scaled) : NULL;
    tensor_release(scaled);
    return ret(L, r);
}

/* t:split({split_size =, dim =}), torch's keywords, as t:split(split_size, dim) */
static void split_keywords(lua_State *L) {
    if (!lu_is_opts(L, 2)) return;
    lu_check_call_opts(L, 2, "split_size dim");
    lu_check_no_more_args(L, 3);
    lua_settop(L, 2);
    lua_getfield(L, 2, "split_size");
    if (lua_isnil(L, -1)) lu_error(L, "split: split_size must be given (a size or a list of sizes)");
    lua_getfield(L, 2, "dim");
    lua_remove(L, 2); /* (t, split_size, dim) */
}

/* split(size | {sizes}, dim=1) -> list of views */
static int t_split(lua_State *L) {
    Tensor *t = SELF;
    check_has_dims(L, t, "split");
    split_keywords(L);
    int dim = cut_dim(L, 3);
    if ((dim = tensor_wrap_dim(t, dim, "split")) < 0) lu_core_error(L);
    int64_t len = t->shape[dim], start = 0;
    lua_newtable(L);
    int k = 1;
    if (lua_istable(L, 2)) {
        int n = (int)lua_rawlen(L, 2);
        int64_t total = 0;
        for (int i = 1; i <= n; i++) {
            lua_rawgeti(L, 2, i);
            int64_t sz;
            if (!lu_to_int64(L, -1, &sz))
                return lu_error(L, "split: size %d must be an integer, got %s", i, lu_is_tensor(L, -1) ? "tensor" :
                                lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1));
            lua_pop(L, 1);
            if (sz < 0) return lu_error(L, "split: size %d is negative (%lld)", i, (long long)sz);
            if (total >= 0) total = size_add(total, sz);
        }
        if (total < 0) return lu_error(L, "split: sizes sum to more than 2^63 but dimension %d has size %lld", dim + 1, (long long)len);
        if (total != len) return lu_error(L, "split: sizes sum to %lld but dimension %d has size %lld", (long long)total, dim + 1, (long long)len);
        for (int i = 1; i <= n; i++) {
            lua_rawgeti(L, 2, i);
            int64_t sz = 0;
            lu_to_int64(L, -1, &sz); /* checked above */
            lua_pop(L, 1);
            lu_push_tensor(L, ag_name_node(tensor_narrow(t, dim, start, sz), "SplitWithSizesBackward"));
            lua_rawseti(L, -2, k++);
            start += sz;
        }
        return 1;
    }
    int64_t sz = luaL_checkinteger(L, 2);
    if (sz < 0) return lu_error(L, "split: split_size must be positive, got %lld", (long long)sz);
    if (sz == 0 && len > 0) /* torch: 0 only for an empty dimension (one empty piece) */
        return lu_error(L, "split: split_size can only be 0 if dimension size is 0, but got dimension size of %lld",
                        (long long)len);
    for (;; start += sz) { /* pieces of sz, the last one shorter; one empty piece when len is 0 */
        lu_push_tensor(L, ag_name_node(tensor_narrow(t, dim, start, sz > len - start ? len - start : sz), "SplitBackward"));
        lua_rawseti(L, -2, k++);
        if (len - start <= sz) break;
    }
    return 1;
}

/* The most pieces chunk of an empty dimension and tensor_split (every piece
 * a tensor, even an empty one) make: 2^24, as accel.tensor_methods'
 * MAX_PIECES; more would only exhaust memory. */
#define MAX_PIECES (1 << 24)

static int t_chunk(lua_State *L) {
    Tensor *t = SELF;
    check_has_dims(L, t, "chunk");
    lua_Integer chunks = luaL_checkinteger(L, 2);
    if (chunks <= 0) return lu_error(L, "chunk: number of chunks must be positive, got %lld", (long long)chunks);
    int dim = cut_dim(L, 3);
    if ((dim = tensor_wrap_dim(t, dim, "chunk")) < 0) lu_core_error(L);
    if (t->shape[dim] == 0) { /* torch: `chunks` empty pieces */
        if (chunks > MAX_PIECES)
            return lu_error(L, "chunk: %lld empty pieces of an empty dimension are more than the %d this build makes",
                            (long long)chunks, MAX_PIECES);
        lua_createtable(L, (int)chunks, 0);
        for (lua_Integer i = 1; i <= chunks; i++) {
            lu_push_tensor(L, ag_name_node(tensor_narrow(t, dim, 0, 0), "SplitBackward"));
            lua_rawseti(L, -2, i);
        }
        return 1;
    }
    int64_t sz = t->shape[dim] / chunks + (t->shape[dim] % chunks != 0); /* ceil, without overflow */
    lua_settop(L, 1);
    lua_pushinteger(L, sz > 0 ? sz : 1);
    lua_pushinteger(L, dim + 1);
    return t_split(L);
}

static int t_unbind(lua_State *L) {
    Tensor *t = SELF;
    check_has_dims(L, t, "unbind");
    int dim = cut_dim(L, 2);
    if ((dim = tensor_wrap_dim(t, dim, "unbind")) < 0) lu_core_error(L);
    lua_createtable(L, (int)t->shape[dim], 0);
    for (int64_t i = 0; i < t->shape[dim]; i++) {
        lu_push_tensor(L, ag_name_node(tensor_select(t, dim, i), "UnbindBackward"));
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* ---- values ---- */

/* t's values in row-major order, copied to a Lua-owned host buffer (pushed
 * on the stack, so a Lua error while using it frees it). */
static const char *host_values(lua_State *L, const Tensor *t) {
    char *buf = lua_newuserdatauv(L, (size_t)t->numel * dtype_size(t->dtype) + 1, 0);
    if (tensor_to_host(t, buf) < 0) lu_core_error(L);
    return buf;
}

/* Element i of host values of dtype dt: integer, boolean or float as the dtype is. */
static void push_value(lua_State *L, DType dt, const char *host, int64_t i) {
    const char *p = host + i * (int64_t)dtype_size(dt);
    if (dt == DT_BOOL) lua_pushboolean(L, *p != 0);
    else if (!dtype_is_float(dt)) lua_pushinteger(L, dtype_load_i64(p, dt));
    else lua_pushnumber(L, dtype_load(p, dt));
}

static double host_at(DType dt, const char *host, int64_t i) { return dtype_load(host + i * (int64_t)dtype_size(dt), dt); }

static int t_item(lua_State *L) {
    Tensor *t = SELF;
    lu_check_no_more_args(L, 2);
    if (t->numel != 1)
        return lu_error(L, "item: a tensor with %lld elements (shape %s) cannot be converted to a number", (long long)t->numel,
                        tensor_shape_str(t));
    push_value(L, t->dtype, host_values(L, t), 0);
    return 1;
}

static void push_list(lua_State *L, const Tensor *t, const char *host, int d, int64_t *flat) {
    if (d == t->ndim) {
        push_value(L, t->dtype, host, (*flat)++);
        return;
    }
    lua_createtable(L, (int)t->shape[d], 0);
    for (int64_t i = 0; i < t->shape[d]; i++) {
        push_list(L, t, host, d + 1, flat);
        lua_rawseti(L, -2, i + 1);
    }
}

static int t_tolist(lua_State *L) {
    int64_t flat = 0;
    Tensor *t = SELF;
    lu_check_no_more_args(L, 2);
    push_list(L, t, host_values(L, t), 0, &flat);
    return 1;
}

static int t_tostring(lua_State *L) {
    Tensor *self = SELF;
    lu_check_no_more_args(L, 2);
    PrintOptions o;
    lu_print_options(L, &o);
    char *s = tensor_format_with(self, &o);
    if (!s) return lu_core_error(L);
    lua_getfield(L, LUA_REGISTRYINDEX, "accel.parameters"); /* an nn.Parameter prints as PyTorch's */
    bool param = lua_istable(L, -1) && (lua_pushvalue(L, 1), lua_rawget(L, -2) == LUA_TBOOLEAN);
    lua_pushfstring(L, "%s%s", param ? "Parameter containing:\n" : "", s);
    free(s);
    return 1;
}

/* ---- dtype / device conversion ---- */

static const char *cast_method_name(DType dt);

static int to_dtype_upvalue(lua_State *L) {
    Tensor *self = SELF;
    DType dt = (DType)lua_tointeger(L, lua_upvalueindex(1));
    memory_format_arg(L, cast_method_name(dt), true);
    return ret(L, tensor_to_dtype(self, dt));
}

static bool looks_like_device(const char *s) {
    return strncmp(s, "cpu", 3) == 0 || strncmp(s, "cuda", 4) == 0 || strncmp(s, "sim", 3) == 0;
}

/* t on d (a copy through the host, recorded by autograd). */
static Tensor *move_to(lua_State *L, Tensor *t, Device d) {
    Tensor *m = tensor_to(t, d);
    if (!m) lu_core_error(L);
    return m;
}

/* t:to(dtype | device | tensor | {dtype=, device=}) */
static int t_to(lua_State *L) {
    Tensor *t = SELF;
    int dt = t->dtype;
    Device dev = t->device;
    bool copy = false; /* torch's copy = True: a new tensor even when nothing changes */
    for (int i = 2; i <= lua_gettop(L); i++) {
        if (lu_is_tensor(L, i)) {
            Tensor *o = lu_check_tensor(L, i);
            dt = o->dtype, dev = o->device;
        } else if (lu_is_dtype(L, i)) {
            dt = lu_check_dtype(L, i);
        } else if (lu_is_device(L, i)) {
            dev = *(Device *)lua_touserdata(L, i);
        } else if (lua_type(L, i) == LUA_TSTRING && looks_like_device(lua_tostring(L, i))) {
            if (device_parse(lua_tostring(L, i), &dev) < 0) lu_core_error(L);
        } else if (lua_type(L, i) == LUA_TSTRING) {
            dt = dtype_from_name(lua_tostring(L, i));
            if (dt < 0)
                lu_error(L, "to: '%s' is neither a dtype nor a device (expected a dtype such as \"float32\", or "
                            "a device \"cpu\", \"cuda\", \"cuda:N\" or \"sim\")", lua_tostring(L, i));
        } else if (lu_is_opts(L, i)) {
            lu_check_call_opts(L, i, "dtype device non_blocking copy");
            for (int k = 0; k < 2; k++) {
                const char *name = k == 0 ? "non_blocking" : "copy";
                lua_getfield(L, i, name);
                if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
                    lu_error(L, "to: option '%s' must be a boolean, got %s", name, luaL_typename(L, -1));
                if (k == 1) copy = lua_toboolean(L, -1);
                lua_pop(L, 1);
            }
            dt = lu_opt_dtype(L, i, "dtype", dt);
            lua_getfield(L, i, "device");
            if (!lua_isnil(L, -1)) dev = lu_opt_device(L, i, "device");
            lua_pop(L, 1);
        } else if (!lua_isnil(L, i)) {
            return lu_error(L, "to: expected a dtype, device, tensor or options table, got %s", luaL_typename(L, i));
        }
    }
    if (dt == (int)t->dtype && device_same(dev, t->device)) {
        if (copy) return ret(L, tensor_clone(t));
        lua_pushvalue(L, 1); /* nothing to do: the tensor itself, as PyTorch */
        return 1;
    }
    Tensor *m = move_to(L, t, dev);
    Tensor *r = tensor_to_dtype(m, (DType)dt);
    tensor_release(m);
    return ret(L, r);
}

/* t:cpu() / t:cuda([index]): t:to("cpu") / t:to("cuda[:index]"), as torch's */
static int t_cpu(lua_State *L) {
    (void)SELF;
    memory_format_arg(L, "cpu", true);
    lua_settop(L, 1);
    lua_pushliteral(L, "cpu");
    return t_to(L);
}
static int t_cuda(lua_State *L) {
    if (lua_isnoneornil(L, 2)) {
        lua_settop(L, 1);
        lua_pushliteral(L, "cuda");
    } else {
        lua_Integer i = luaL_checkinteger(L, 2);
        lua_settop(L, 1);
        lua_pushfstring(L, "cuda:%d", (int)i);
    }
    return t_to(L);
}

/* ---- autograd ---- */

/* A flag of backward: argument idx, or key of the options table at o (o > 0);
 * nil is false, anything else but a boolean an error naming it. */
static bool backward_flag(lua_State *L, int o, int idx, const char *key) {
    if (o) lua_getfield(L, o, key);
    else lua_pushvalue(L, idx);
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
        lu_error(L, "backward: argument '%s' must be a boolean, got %s", key, luaL_typename(L, -1));
    bool on = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return on;
}

/* t:backward([gradient], [retain_graph], [create_graph], [inputs]), the ones
 * after gradient (or all) also in an options table: torch's Tensor.backward.
 * create_graph = true and inputs are refused. */
static int t_backward(lua_State *L) {
    Tensor *t = SELF;
    int o = lu_to_tensor(L, 2) ? (lu_is_opts(L, 3) ? 3 : 0) : (lu_is_opts(L, 2) ? 2 : lu_is_opts(L, 3) ? 3 : 0);
    if (o) {
        lu_check_call_opts(L, o, o == 2 ? "gradient retain_graph create_graph inputs" : "retain_graph create_graph inputs");
        lu_check_no_more_args(L, o + 1);
    } else {
        lu_check_no_more_args(L, 6);
    }
    lua_settop(L, 5); /* the absent arguments nil; what is pushed below comes after them */
    if (o == 2) lua_getfield(L, 2, "gradient");
    else lua_pushvalue(L, 2);
    Tensor *g = lu_to_tensor(L, -1);
    if (!g && !lua_isnil(L, -1))
        return lu_error(L, "backward: the gradient (argument 1) must be a tensor or nil, got %s", luaL_typename(L, -1));
    bool retain = backward_flag(L, o, 3, "retain_graph");
    if (backward_flag(L, o, 4, "create_graph"))
        return lu_error(L, "backward: create_graph = true is not supported (no higher-order gradients)");
    if (o) lua_getfield(L, o, "inputs");
    else lua_pushvalue(L, 5);
    if (!lua_isnil(L, -1)) return lu_error(L, "backward: inputs is not supported (gradients reach every leaf)");
    lu_gc_before_backward(L);
    lu_run_backward(L, t, g, retain);
    return 0;
}

static int t_requires_grad_(lua_State *L) {
    Tensor *t = SELF;
    lu_check_no_more_args(L, 3);
    if (!lua_isnoneornil(L, 2) && !lua_isboolean(L, 2)) /* as torch: 0 / "false" are not booleans */
        return lu_error(L, "requires_grad_: argument 'requires_grad' must be a boolean, not %s", luaL_typename(L, 2));
    bool on = lua_isnoneornil(L, 2) ? true : lua_toboolean(L, 2);
    if (on && !dtype_is_float(t->dtype))
        return lu_error(L, "requires_grad_: only floating point tensors can require gradients (got %s)", dtype_name(t->dtype));
    if (!on && t->grad_fn)
        return lu_error(L, "requires_grad_: you can only change requires_grad of leaf tensors; use detach()");
    t->requires_grad = on;
    lua_settop(L, 1);
    return 1;
}

/* __close (a `local t <close>` leaving its scope; argument 2 is the error
 * object, if any) and, checked, t:free(). */
static int t_close(lua_State *L) {
    if (!lu_is_tensor(L, 1)) (void)SELF; /* the method-call error */
    TensorUD *u = lua_touserdata(L, 1);
    tensor_release(u->t);
    u->t = NULL;
    return 0;
}

static int t_free(lua_State *L) {
    if (lu_is_tensor(L, 1)) lu_check_no_more_args(L, 2);
    return t_close(L);
}

/* ---- in-place value ops ---- */

/* Overwrites (fill_, zero_, copy_, t[i] = v) under autograd: the written
 * values replace t's, so t's old history gets a zero gradient there and a
 * source that requires grad gets the gradient of where it was written (as
 * PyTorch's FillBackward / CopyBackwards / CopySlices). overwrite_begin runs
 * before the write and returns a tensor whose node says that (NULL when no
 * graph is involved); overwrite_end hands the node to t after the write.
 * Leaves that require grad and views are refused, as for the other
 * in-place ops. row >= 0: only t[row] (dim 1) is written. */
static bool overwrite_check(lua_State *L, Tensor *t, bool src_grad, const char *op) {
    if (!ag_grad_enabled() || (!t->requires_grad && !src_grad)) return false;
    if (t->requires_grad && !t->grad_fn)
        lu_error(L, "%s: a leaf tensor that requires grad (shape %s) cannot be modified in place; use accel.no_grad", op,
                 tensor_shape_str(t));
    if (t->is_view)
        lu_error(L, "%s: in-place write into a view (shape %s) is not supported when gradients are recorded; build the "
                 "result out of place (accel.cat, accel.stack, where) or use accel.no_grad / detach()", op, tensor_shape_str(t));
    return true;
}

/* Raises only from overwrite_check, before anything is allocated; returns
 * NULL with the core error set when building the history failed. */
static Tensor *overwrite_begin(Tensor *t, Tensor *src, int64_t row) {
    bool src_grad = src && src->requires_grad;
    Tensor *r = NULL;
    if (row < 0) { /* whole tensor: t * 0 (+ src) */
        Tensor *base = t->requires_grad ? op_binary_scalar(KB_MUL, t, 0, true, false) : tensor_retain(t);
        r = base && src_grad ? op_binary(KB_ADD, base, src) : tensor_retain(base);
        tensor_release(base);
    } else { /* cat(t[:row], src as a row, t[row+1:]) */
        Tensor *rowv = tensor_select(t, 0, row);
        Tensor *se = rowv && src ? tensor_expand(src, rowv->shape, rowv->ndim) : NULL;
        Tensor *su = se ? tensor_unsqueeze(se, 0) : NULL;
        Tensor *head = su ? tensor_narrow(t, 0, 0, row) : NULL;
        Tensor *tail = head ? tensor_narrow(t, 0, row + 1, t->shape[0] - row - 1) : NULL;
        if (tail) r = op_cat((Tensor *[]){head, su, tail}, 3, 0);
        tensor_release(rowv), tensor_release(se), tensor_release(su), tensor_release(head), tensor_release(tail);
    }
    return r;
}

static void overwrite_end(Tensor *t, Tensor *r) {
    if (!r) return;
    if (r->grad_fn) {
        ag_set_grad_fn(t, r->grad_fn);
        t->requires_grad = true;
    }
    tensor_release(r);
}

static void check_writable(lua_State *L, const Tensor *t, const char *op) {
    if (tensor_check_writable(t, op) < 0) lu_core_error(L);
}

static int fill_checked(lua_State *L, Tensor *t, double v, const char *op) {
    lu_check_fill_value(L, v, t->dtype, op);
    Tensor *r = NULL;
    if (overwrite_check(L, t, false, op) && !(r = overwrite_begin(t, NULL, -1))) return -1;
    int rc = tensor_fill_(t, v);
    overwrite_end(t, r);
    return rc;
}

static int t_zero_(lua_State *L) {
    Tensor *t = SELF;
    lu_check_no_more_args(L, 2);
    return ret_rc(L, fill_checked(L, t, 0, "zero_"));
}

static int t_fill_(lua_State *L) {
    Tensor *t = SELF;
    lu_check_no_more_args(L, 3);
    if (lu_is_tensor(L, 2)) {
        Tensor *v = lu_check_tensor(L, 2);
        if (v->numel != 1) return lu_error(L, "fill_: value tensor must have one element, got shape %s", tensor_shape_str(v));
        if (v->requires_grad && ag_grad_enabled()) { /* torch's fill_(v) passes v's gradient: a copy_ of v does */
            check_writable(L, t, "fill_");
            return t_copy_(L);
        }
        return ret_rc(L, fill_checked(L, t, tensor_item(v), "fill_"));
    }
    if (t->dtype == DT_I64 && wide_int_operand(L, 2, t)) return t_copy_(L); /* exactly, not through a double */
    return ret_rc(L, fill_checked(L, t, scalar_arg(L, 2, "fill_"), "fill_"));
}

/* t:copy_(src, [non_blocking]) or (src, {non_blocking =}): copies are
 * complete when copy_ returns, which honours either value */
static int t_copy_(lua_State *L) {
    Tensor *t = SELF, *src = lu_check_tensor(L, 2);
    lu_check_call_opts(L, 3, "non_blocking");
    lu_check_no_more_args(L, lua_isboolean(L, 3) || lu_is_opts(L, 3) ? 4 : 3);
    Tensor *r = NULL;
    if (overwrite_check(L, t, src->requires_grad, "copy_") && !(r = overwrite_begin(t, src, -1))) lu_core_error(L);
    int rc = tensor_copy_(t, src);
    if (rc < 0) tensor_release(r);
    else overwrite_end(t, r);
    return ret_rc(L, rc);
}

/* ---- comparisons and predicates ---- */

static int t_equal(lua_State *L) {
    Tensor *a = SELF, *b = lu_check_tensor(L, 2);
    lu_check_no_more_args(L, 3);
    if (tensor_check_device("equal", a, b) < 0) lu_core_error(L); /* as every binary op (torch.equal too) */
    bool eq = tensor_same_shape(a, b);
    const char *ha = eq ? host_values(L, a) : NULL, *hb = eq ? host_values(L, b) : NULL;
    for (int64_t i = 0; eq && i < a->numel; i++) eq = host_at(a->dtype, ha, i) == host_at(b->dtype, hb, i);
    lua_pushboolean(L, eq);
    return 1;
}

/* t broadcast to shape, contiguous, as host values (kept on the Lua stack) */
static const char *broadcast_host(lua_State *L, Tensor *t, const int64_t *shape, int nd) {
    Tensor *e = tensor_expand(t, shape, nd), *c = e ? tensor_contiguous(e) : NULL;
    tensor_release(e);
    if (!c) lu_core_error(L);
    lu_push_tensor(L, c); /* owns c until the call returns */
    return host_values(L, c);
}

/* t:allclose(other, [rtol=1e-5], [atol=1e-8], [equal_nan=false]) or {rtol=, atol=, equal_nan=}:
 * |t - other| <= atol + rtol * |other| everywhere, broadcasting as torch */
static int t_allclose(lua_State *L) {
    Tensor *a = SELF, *b = lu_check_tensor(L, 2);
    int opts = lu_is_opts(L, 3) ? 3 : 0;
    lu_check_call_opts(L, opts ? 3 : 6, "rtol atol equal_nan");
    double rtol = opts ? lu_opt_number(L, 3, "rtol", 1e-5) : luaL_optnumber(L, 3, 1e-5);
    double atol = opts ? lu_opt_number(L, 3, "atol", 1e-8) : luaL_optnumber(L, 4, 1e-8);
    bool equal_nan = opts ? lu_opt_bool(L, 3, "equal_nan", false) : lua_toboolean(L, 5);
    if (!(rtol >= 0) || !(atol >= 0))
        return lu_error(L, "allclose: %s must be greater than or equal to zero, got %g (as PyTorch)",
                        !(rtol >= 0) ? "rtol" : "atol", !(rtol >= 0) ? rtol : atol);
    if (tensor_check_device("allclose", a, b) < 0) lu_core_error(L);
    int64_t shape[TENSOR_MAX_DIMS];
    int nd;
    if (broadcast_shapes(a->shape, a->ndim, b->shape, b->ndim, shape, &nd, "allclose") < 0) lu_core_error(L);
    const char *ha = broadcast_host(L, a, shape, nd), *hb = broadcast_host(L, b, shape, nd);
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    bool ok = true;
    for (int64_t i = 0; ok && i < n; i++) {
        double x = host_at(a->dtype, ha, i), y = host_at(b->dtype, hb, i);
        ok = isinf(x) || isinf(y) ? x == y /* an infinity is close only to itself, as torch's */
                                  : fabs(x - y) <= atol + rtol * fabs(y) || (equal_nan && isnan(x) && isnan(y));
    }
    lua_pushboolean(L, ok);
    return 1;
}

/* any / all over dims (bool): any = some element nonzero, all = none zero */
static int any_all_dims(lua_State *L, Tensor *t, bool any, const int *dims, int n, bool keep) {
    Tensor *hit = op_binary_scalar(any ? KB_NE : KB_EQ, t, 0, true, false);
    Tensor *count = hit ? op_reduce(KR_SUM, hit, dims, n, keep) : NULL;
    Tensor *r = count ? op_binary_scalar(any ? KB_GT : KB_EQ, count, 0, true, false) : NULL;
    tensor_release(hit);
    tensor_release(count);
    return ret(L, r);
}

/* t:any([dim [, keepdim]]) / t:all(...), or {dim =, keepdim =} */
static int any_all(lua_State *L, bool any) {
    Tensor *t = SELF;
    int dims[TENSOR_MAX_DIMS];
    bool keep;
    int n = reduce_args(L, dims, &keep, "dim keepdim");
    if (n > 0 || keep) return any_all_dims(L, t, any, dims, n, keep);
    bool r = !any;
    const char *h = host_values(L, t);
    for (int64_t i = 0; i < t->numel; i++) {
        bool nz = host_at(t->dtype, h, i) != 0;
        if (any && nz) { r = true; break; }
        if (!any && !nz) { r = false; break; }
    }
    Tensor *o = tensor_full(NULL, 0, r, DT_BOOL, t->device);
    return ret(L, o);
}

static int t_any(lua_State *L) { return any_all(L, true); }
static int t_all(lua_State *L) { return any_all(L, false); }

/* ---- indexing ---- */

static int t_gather(lua_State *L) {
    Tensor *self = SELF; /* first: t.gather(...) is a method-call error */
    lu_check_no_more_args(L, 4);
    return ret(L, op_gather(self, lu_dim(L, 2), lu_check_tensor(L, 3)));
}
static int t_index_select(lua_State *L) {
    Tensor *self = SELF; /* first: t.index_select(...) is a method-call error */
    lu_check_no_more_args(L, 4);
    return ret(L, op_index_select(self, lu_dim(L, 2), lu_check_tensor(L, 3)));
}

/* masked_fill's value: a number or a 0-dim tensor (as torch; in place, one
 * that requires grad is refused rather than cut off from its gradient) */
static double fill_value(lua_State *L, int idx, const char *op) {
    Tensor *v = lu_to_tensor(L, idx);
    if (!v) return scalar_arg(L, idx, op);
    if (v->ndim != 0)
        lu_error(L, "%s only supports a 0-dimensional value tensor, but got tensor with %d dimension(s)", op, v->ndim);
    if (v->requires_grad && ag_grad_enabled())
        lu_error(L, "%s: a value tensor that requires grad is not supported in place; use t = t:masked_fill(mask, v) "
                    "or accel.where", op);
    return tensor_item(v);
}

/* masked_fill's value, checked against the tensor's dtype */
static double fill_value_for(lua_State *L, int idx, const Tensor *t, const char *op) {
    double v = fill_value(L, idx, op);
    lu_check_fill_value(L, v, t->dtype, op);
    return v;
}

static int t_masked_fill(lua_State *L) {
    Tensor *self = SELF; /* first: t.masked_fill(...) is a method-call error */
    lu_check_no_more_args(L, 4);
    bool wide = self->dtype == DT_I64 && wide_int_operand(L, 3, self); /* exactly, not through a double */
    Tensor *mask = lu_check_tensor(L, 2), *v = lu_to_tensor(L, 3);
    if (v && v->ndim == 0 && (v->requires_grad || wide)) {
        /* the value gets its gradient (or keeps every bit): where(mask, v, self) */
        Tensor *cv = v->dtype == self->dtype ? tensor_retain(v) : op_cast(v, self->dtype);
        Tensor *r = cv ? op_where(mask, cv, self) : NULL;
        tensor_release(cv);
        return ret(L, r);
    }
    return ret(L, op_masked_fill(self, mask, fill_value_for(L, 3, self, "masked_fill")));
}
static int t_masked_fill_(lua_State *L) {
    Tensor *self = SELF; /* first: t.masked_fill_(...) is a method-call error */
    lu_check_no_more_args(L, 4);
    return ret_rc(L, op_masked_fill_(self, lu_check_tensor(L, 2), fill_value_for(L, 3, self, "masked_fill_")));
}

static int t_where(lua_State *L) {
    (void)SELF; /* first: t.where(...) is a method-call error */
    lu_check_no_more_args(L, 4);
    return ret(L, lu_where(L, lu_check_tensor(L, 2), 1, 3));
}

/* t:tril([diagonal]) / t:triu([diagonal]), diagonal also as {diagonal =} */
static int tril_triu(lua_State *L, bool upper) {
    Tensor *self = SELF;
    bool opts = lu_is_opts(L, 2);
    lu_check_call_opts(L, 2, "diagonal");
    lu_check_no_more_args(L, 3);
    if (opts) lua_getfield(L, 2, "diagonal"), lua_replace(L, 2);
    if (!lua_isnoneornil(L, 2) && !lua_isinteger(L, 2))
        return lu_error(L, "%s: diagonal must be an integer, got %s", upper ? "triu" : "tril",
                        lua_type(L, 2) == LUA_TNUMBER ? "a non-integer number" : luaL_typename(L, 2));
    return ret(L, op_tril(self, luaL_optinteger(L, 2, 0), upper));
}
static int t_tril(lua_State *L) { return tril_triu(L, false); }
static int t_triu(lua_State *L) { return tril_triu(L, true); }

/* t:tril_() / t:triu_(): in place (a copy of the result written back) */
/* (as t:copy_(t:tril()): in-place rules and autograd history as copy_'s) */
static int tril_triu_(lua_State *L, bool upper) {
    check_writable(L, SELF, upper ? "triu_" : "tril_");
    tril_triu(L, upper);
    lua_copy(L, -1, 2); /* self, result */
    lua_settop(L, 2);
    return t_copy_(L);
}
static int t_tril_(lua_State *L) { return tril_triu_(L, false); }
static int t_triu_(lua_State *L) { return tril_triu_(L, true); }

static int t_matmul(lua_State *L) {
    Tensor *self = SELF; /* first: t.matmul(...) is a method-call error */
    lu_check_no_more_args(L, 3);
    return ret(L, op_matmul(self, lu_check_tensor(L, 2)));
}

/* t:softmax(dim, [dtype | {dtype =}]) or ({dim =, dtype =}): with dtype,
 * the input is cast first (as torch, whose dtype is also positional) */
static int softmax_method(lua_State *L, bool log) {
    Tensor *self = SELF; /* first: t.softmax(...) is a method-call error */
    lu_check_no_more_args(L, lu_is_opts(L, 2) ? 3 : 4);
    int opts = lu_dim_keyword(L, 2, "dim dtype");
    if (!opts) lu_check_call_opts(L, opts = 3, "dtype");
    int dim = lu_dim(L, 2);
    if (!lua_isnoneornil(L, 3) && !lu_is_opts(L, 3) && !lu_is_dtype(L, 3))
        lu_arg_type_error(L, 3, "a dtype or an options table");
    int dt = lu_is_dtype(L, 3) ? lu_check_dtype(L, 3) : lu_opt_dtype(L, opts, "dtype", -1);
    Tensor *x = dt >= 0 && (DType)dt != self->dtype ? tensor_to_dtype(self, (DType)dt) : tensor_retain(self);
    Tensor *r = x ? op_softmax(x, dim, log) : NULL;
    tensor_release(x);
    return ret(L, r);
}
static int t_softmax(lua_State *L) { return softmax_method(L, false); }
static int t_log_softmax(lua_State *L) { return softmax_method(L, true); }

static int t_type(lua_State *L) {
    Tensor *t = SELF;
    if (lua_isnoneornil(L, 2)) {
        lua_pushfstring(L, "accel.%s", dtype_name(t->dtype));
        return 1;
    }
    return ret(L, tensor_to_dtype(t, (DType)lu_check_dtype(L, 2)));
}

static int t_is_floating_point(lua_State *L) {
    Tensor *self = SELF;
    lu_check_no_more_args(L, 2);
    lua_pushboolean(L, dtype_is_float(self->dtype));
    return 1;
}

static int t_element_size(lua_State *L) {
    Tensor *self = SELF;
    lu_check_no_more_args(L, 2);
    lua_pushinteger(L, (lua_Integer)dtype_size(self->dtype));
    return 1;
}

/* ---- __index / __newindex ---- */

static int push_property(lua_State *L, Tensor *t, const char *k) {
    switch (k[0]) {
    case 's':
        if (strcmp(k, "shape") == 0) return push_shape(L, t), 1;
        break;
    case 'd':
        if (strcmp(k, "dtype") == 0) return lu_push_dtype(L, t->dtype), 1;
        if (strcmp(k, "device") == 0) return lu_push_device(L, t->device), 1;
        if (strcmp(k, "data") == 0) return ret(L, tensor_detach(t));
        break;
    case 'g':
        if (strcmp(k, "grad") == 0) {
            if (t->grad) lu_push_existing(L, t->grad);
            else lua_pushnil(L);
            return 1;
        }
        if (strcmp(k, "grad_fn") == 0) {
            if (t->grad_fn) lua_pushstring(L, t->grad_fn->name);
            else lua_pushnil(L);
            return 1;
        }
        break;
    case 'r':
        if (strcmp(k, "requires_grad") == 0) return lua_pushboolean(L, t->requires_grad), 1;
        if (strcmp(k, "retains_grad") == 0) return lua_pushboolean(L, ag_retains_grad(t)), 1;
        break;
    case 'i':
        if (strcmp(k, "is_leaf") == 0) return lua_pushboolean(L, t->grad_fn == NULL), 1;
        if (strcmp(k, "is_cuda") == 0) return lua_pushboolean(L, t->device.type == DEV_CUDA), 1;
        if (strcmp(k, "is_cpu") == 0) return lua_pushboolean(L, t->device.type == DEV_CPU), 1;
        if (strcmp(k, "itemsize") == 0) return lua_pushinteger(L, (lua_Integer)dtype_size(t->dtype)), 1;
        break;
    case 'n':
        if (strcmp(k, "ndim") == 0) return lua_pushinteger(L, t->ndim), 1;
        if (strcmp(k, "nbytes") == 0) /* numel * itemsize, as torch (the view's, not the storage's) */
            return lua_pushinteger(L, (lua_Integer)(t->numel * (int64_t)dtype_size(t->dtype))), 1;
        break;
    case '_': /* PyTorch's t._version: bumped by every in-place write to the storage */
        if (strcmp(k, "_version") == 0) return lua_pushinteger(L, (lua_Integer)t->storage->version), 1;
        break;
    case 'T':
        if (k[1] == 0) {
            int perm[TENSOR_MAX_DIMS];
            for (int d = 0; d < t->ndim; d++) perm[d] = t->ndim - 1 - d;
            return ret(L, tensor_permute(t, perm, t->ndim));
        }
        break;
    case 'H': /* real tensors: the conjugate transpose is the transpose */
        if (k[1] == 0) {
            if (t->ndim == 0) return ret(L, tensor_permute(t, (int[1]){0}, 0)); /* 0-D: itself */
            if (t->ndim != 2)
                return lu_error(L, "tensor.H is only supported on matrices (2-D tensors), got a %d-D tensor%s",
                                t->ndim, t->ndim > 2 ? "; for batches of matrices use tensor.mH" : "");
            return ret(L, tensor_transpose(t, 0, 1));
        }
        break;
    case 'm':
        if ((k[1] == 'T' || k[1] == 'H') && k[2] == 0) { /* mT, and mH (real tensors) */
            if (t->ndim == 0) return ret(L, tensor_permute(t, (int[1]){0}, 0)); /* 0-D: itself */
            if (t->ndim < 2)
                return lu_error(L, "tensor.%s is only supported on matrices or batches of matrices, got a 1-D tensor",
                                k);
            return ret(L, tensor_transpose(t, -2, -1));
        }
        break;
    }
    return 0;
}

static bool in_list(const char *const *list, const char *k) {
    for (int i = 0; list[i]; i++)
        if (strcmp(k, list[i]) == 0) return true;
    return false;
}

/* PyTorch tensor methods a script may call that accel-lua does not have:
 * reading one is an error naming it, not a nil to call. */
static const char *const not_provided_methods[] = {
    "scatter_reduce", "index_put", "index_put_", "to_sparse", "numpy", "as_strided", "pin_memory", "share_memory_", "apply_", "map_",
    "resize_", "resize_as_", "set_",
    "new", "storage", "untyped_storage", "data_ptr", "storage_offset", "fill_diagonal_", "inverse", "det",
    "logdet", "slogdet", "pinverse", "svd", "qr", "lu", "cholesky", "matrix_power", "matrix_exp",
    "triangular_solve", "cov", "corrcoef", "histogram", "renorm", "renorm_", "frexp", "ldexp", "copysign",
    "nextafter", "gcd", "lcm", "stft", "to_dense", "to_mkldnn", "is_pinned", "record_stream", "eig", "real", "imag",
    "diag_embed", "i0", "i0_", "polygamma", "polygamma_", "igamma", "igammac", "index_reduce",
    "index_reduce_", "new_empty_strided", NULL};

bool lu_load_lua_tensor_methods(lua_State *L) {
    bool loaded = lua_getfield(L, LUA_REGISTRYINDEX, "accel.TensorLuaMethods") != LUA_TNIL;
    lua_pop(L, 1);
    if (loaded) return false;
    lua_pushboolean(L, 1); /* first: a lookup while the module loads does not load it again */
    lua_setfield(L, LUA_REGISTRYINDEX, "accel.TensorLuaMethods");
    lua_getglobal(L, "require");
    lua_pushliteral(L, "accel.tensor_methods");
    lua_call(L, 1, 0);
    return true;
}

static int t_index(lua_State *L) {
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
    Tensor *t = lua_isinteger(L, 2) ? SELF : lu_tensor_meta(L, 1); /* properties: also of released parameters */
    if (!t) t = SELF;
    if (lua_isinteger(L, 2)) {
        lua_Integer i = lua_tointeger(L, 2);
        if (i == 0) return lu_error(L, "index 0 is invalid: positions are 1-based (t[1] is the first)");
        return ret(L, tensor_select(t, 0, i > 0 ? i - 1 : i));
    }
    if (lua_type(L, 2) == LUA_TTABLE)
        return lu_error(L, "t[{...}]: multi-dimensional indexing is not provided; a tensor is indexed by a 1-based "
                           "integer position (t[1]); for PyTorch's t[:, k] use t:select(2, k + 1), for t[:, a:b] "
                           "t:narrow(2, a + 1, b - a)");
    if (lua_type(L, 2) != LUA_TSTRING)
        return lu_error(L, "t[%s]: a tensor is indexed by a 1-based integer position (t[1]); with a tensor of "
                           "indices use t:index_select(dim, idx) or t:gather(dim, idx)",
                        lu_is_tensor(L, 2) ? "tensor" : luaL_typename(L, 2));
    if (push_property(L, t, lua_tostring(L, 2))) return 1;
    if (lu_load_lua_tensor_methods(L)) { /* the first name C does not have: the Lua methods join the table */
        lua_pushvalue(L, 2);
        if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
        lua_pop(L, 1);
    }
    if (in_list(not_provided_methods, lua_tostring(L, 2)))
        return lu_error(L, "Tensor.%s is not provided by accel-lua (docs/api/tensor.md lists the tensor methods, "
                           "docs/api/tensor.md#not-provided what is missing)", lua_tostring(L, 2));
    lua_pushnil(L);
    return 1;
}

static int t_newindex(lua_State *L) {
    Tensor *t = SELF;
    if (lua_isinteger(L, 2)) {
        lua_Integer i = lua_tointeger(L, 2);
        if (i == 0) return lu_error(L, "index 0 is invalid: positions are 1-based");
        if (ag_grad_enabled() && t->requires_grad && !t->grad_fn)
            return lu_error(L, "t[%lld] = ...: a leaf tensor that requires grad (shape %s) cannot be modified in place; "
                            "use accel.no_grad", (long long)i, tensor_shape_str(t));
        Tensor *s3 = lu_to_tensor(L, 3);
        lua_pushfstring(L, "t[%" LUA_FMT_INT "] = ...", LUA_FMT_INT_ARG(i));
        if (!s3 && lua_type(L, 3) != LUA_TNUMBER && !lua_isboolean(L, 3)) /* before the row view exists */
            return lu_error(L, "%s: the value must be a tensor or a number, got %s", lua_tostring(L, -1),
                            luaL_typename(L, 3));
        if (lua_type(L, 3) == LUA_TNUMBER) lu_check_fill_value(L, lua_tonumber(L, 3), t->dtype, lua_tostring(L, -1));
        bool hist = overwrite_check(L, t, s3 && s3->requires_grad, lua_tostring(L, -1));
        bool prev = ag_set_grad_enabled(false); /* the row view itself carries no history */
        Tensor *row = tensor_select(t, 0, i > 0 ? i - 1 : i);
        ag_set_grad_enabled(prev);
        if (!row) lu_core_error(L);
        Tensor *src = lu_tensor_or_scalar(L, 3, row);
        int lead = 0; /* leading size-1 dims beyond the row's dims are dropped, as torch's __setitem__ does */
        while (src && src->ndim - lead > row->ndim && src->shape[lead] == 1) lead++;
        if (src && lead > 0) {
            Tensor *fit = tensor_reshape(src, src->shape + lead, src->ndim - lead);
            tensor_release(src);
            src = fit;
        }
        if (!src) {
            tensor_release(row);
            lu_core_error(L);
        }
        Tensor *r = hist ? overwrite_begin(t, src, i > 0 ? i - 1 : i + t->shape[0]) : NULL;
        int rc = hist && !r ? -1 : tensor_copy_(row, src);
        tensor_release(row);
        tensor_release(src);
        if (rc < 0) {
            tensor_release(r);
            lu_core_error(L);
        }
        overwrite_end(t, r);
        return 0;
    }
    if (lua_type(L, 2) != LUA_TSTRING)
        return lu_error(L, "t[%s] = ...: a tensor is assigned by a 1-based integer position (t[1] = v); with a mask "
                           "use t:masked_fill_(mask, v) or t = accel.where(mask, v, t)",
                        lu_is_tensor(L, 2) ? "tensor" : luaL_typename(L, 2));
    const char *k = lua_tostring(L, 2);
    if (strcmp(k, "requires_grad") == 0) {
        if (!lua_isboolean(L, 3)) /* as torch's "requires_grad must be a bool" (nil is not false) */
            return lu_error(L, "t.requires_grad = %s: requires_grad must be a boolean", luaL_typename(L, 3));
        lua_settop(L, 3);
        lua_remove(L, 2);
        t_requires_grad_(L);
        return 0;
    }
    if (strcmp(k, "grad") == 0) {
        Tensor *g = lua_isnil(L, 3) ? NULL : lu_check_tensor(L, 3);
        if (g == t) /* as PyTorch: backward would accumulate into the values themselves */
            return lu_error(L, "t.grad = t: can't assign a tensor as its own grad (assign t:detach():clone())");
        if (g && (g->ndim != t->ndim || memcmp(g->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim) != 0))
            return lu_error(L, "assigned grad has shape %s but the tensor has shape %s", tensor_shape_str(g), tensor_shape_str(t));
        if (g && g->dtype != t->dtype)
            return lu_error(L, "assigned grad has dtype %s but the tensor is %s", dtype_name(g->dtype), dtype_name(t->dtype));
        if (g && !device_same(g->device, t->device)) {
            char gd[32], td[32];
            return lu_error(L, "assigned grad is on %s but the tensor is on %s", device_str(g->device, gd, sizeof gd),
                            device_str(t->device, td, sizeof td));
        }
        tensor_release(t->grad);
        t->grad = tensor_retain(g);
        return 0;
    }
    return lu_error(L, "cannot set field '%s' of a tensor", k);
}

static int t_gc(lua_State *L) {
    TensorUD *u = lua_touserdata(L, 1);
    tensor_release(u->t);
    u->t = NULL;
    return 0;
}

/* ---- registration ---- */

static const luaL_Reg methods[] = {
    {"pow", t_pow}, {"pow_", t_pow_}, {"sum", NULL}, {"max", t_max}, {"min", t_min}, {"argmax", t_argmax},
    {"argmin", t_argmin}, {"var", t_var}, {"std", t_std}, {"norm", t_norm}, {"size", t_size}, {"stride", t_stride},
    {"dim", t_dim}, {"ndimension", t_dim}, {"numel", t_numel}, {"nelement", t_numel}, {"view", t_view},
    {"reshape", t_reshape}, {"view_as", t_view_as}, {"reshape_as", t_view_as}, {"expand", t_expand},
    {"expand_as", t_expand_as}, {"repeat", t_repeat}, {"tile", t_tile},
    {"repeat_interleave", t_repeat_interleave}, {"scatter_add", t_scatter_add}, {"index_add", t_index_add}, {"transpose", t_transpose}, {"t", t_t}, {"permute", t_permute}, {"narrow", t_narrow},
    {"select", t_select}, {"unsqueeze", t_unsqueeze}, {"squeeze", t_squeeze}, {"flatten", t_flatten},
    {"contiguous", t_contiguous}, {"is_contiguous", t_is_contiguous}, {"clone", t_clone}, {"detach", t_detach},
    {"detach_", t_detach_}, {"split", t_split}, {"chunk", t_chunk}, {"unbind", t_unbind}, {"item", t_item},
    {"tolist", t_tolist}, {"to", t_to}, {"backward", t_backward}, {"requires_grad_", t_requires_grad_},
    {"register_hook", lu_tensor_register_hook}, {"retain_grad", lu_tensor_retain_grad},
    {"register_post_accumulate_grad_hook", lu_tensor_register_post_accumulate_grad_hook},
    {"free", t_free}, {"zero_", t_zero_}, {"fill_", t_fill_}, {"copy_", t_copy_}, {"equal", t_equal},
    {"allclose", t_allclose}, {"any", t_any}, {"all", t_all}, {"gather", t_gather}, {"index_select", t_index_select},
    {"masked_fill", t_masked_fill}, {"masked_fill_", t_masked_fill_}, {"where", t_where}, {"tril", t_tril},
    {"triu", t_triu}, {"tril_", t_tril_}, {"triu_", t_triu_}, {"matmul", t_matmul}, {"mm", t_matmul}, {"bmm", t_matmul}, {"softmax", t_softmax},
    {"log_softmax", t_log_softmax}, {"type", t_type}, {"is_floating_point", t_is_floating_point},
    {"element_size", t_element_size}, {"tostring", t_tostring}, {"isnan", t_isnan},
    {"isinf", t_isinf}, {"isfinite", t_isfinite}, {"cpu", t_cpu}, {"cuda", t_cuda}, {NULL, NULL}};

static const struct { const char *name; KBinOp op; bool inplace; } binary_methods[] = {
    {"add", KB_ADD, 1}, {"sub", KB_SUB, 1}, {"mul", KB_MUL, 1}, {"div", KB_DIV, 1}, {"maximum", KB_MAX, 0},
    {"minimum", KB_MIN, 0}, {"eq", KB_EQ, 0}, {"ne", KB_NE, 0}, {"lt", KB_LT, 0}, {"le", KB_LE, 0}, {"gt", KB_GT, 0},
    {"ge", KB_GE, 0}, {"logical_and", KB_AND, 0}, {"logical_or", KB_OR, 0}, {"logical_xor", KB_XOR, 0},
    {"floor_divide", KB_FLOORDIV, 1}, {"remainder", KB_REMAINDER, 1}, {"fmod", KB_FMOD, 1},
    {"subtract", KB_SUB, 0}, {"multiply", KB_MUL, 0}, {"divide", KB_DIV, 0}, {"true_divide", KB_DIV, 0},
    {"atan2", KB_ATAN2, 1}, {"arctan2", KB_ATAN2, 1}, {"bitwise_and", KB_BAND, 1}, {"bitwise_or", KB_BOR, 1},
    {"bitwise_xor", KB_BXOR, 1}, {"bitwise_left_shift", KB_SHL, 1}, {"bitwise_right_shift", KB_SHR, 1},
};

static const struct { const char *name; KUnOp op; } unary_methods[] = {
    {"neg", KU_NEG}, {"negative", KU_NEG}, {"exp", KU_EXP}, {"log", KU_LOG}, {"sqrt", KU_SQRT}, {"rsqrt", KU_RSQRT},
    {"tanh", KU_TANH}, {"sigmoid", KU_SIGMOID}, {"relu", KU_RELU}, {"gelu", KU_GELU}, {"silu", KU_SILU},
    {"abs", KU_ABS}, {"sin", KU_SIN}, {"cos", KU_COS}, {"square", KU_SQUARE}, {"reciprocal", KU_RECIP},
    {"sign", KU_SIGN}, {"clamp", KU_CLAMP}, {"clip", KU_CLAMP}, {"log1p", KU_LOG1P}, {"expm1", KU_EXPM1},
    {"floor", KU_FLOOR}, {"ceil", KU_CEIL}, {"round", KU_ROUND}, {"trunc", KU_TRUNC}, {"erf", KU_ERF},
    {"leaky_relu", KU_LEAKY_RELU}, {"logical_not", KU_NOT}, {"tan", KU_TAN}, {"asin", KU_ASIN}, {"arcsin", KU_ASIN},
    {"acos", KU_ACOS}, {"arccos", KU_ACOS}, {"atan", KU_ATAN}, {"arctan", KU_ATAN}, {"sinh", KU_SINH},
    {"cosh", KU_COSH}, {"asinh", KU_ASINH}, {"arcsinh", KU_ASINH}, {"acosh", KU_ACOSH}, {"arccosh", KU_ACOSH},
    {"atanh", KU_ATANH}, {"arctanh", KU_ATANH}, {"log2", KU_LOG2}, {"log10", KU_LOG10}, {"bitwise_not", KU_BNOT},
    {"erfc", KU_ERFC}, {"lgamma", KU_LGAMMA}, {"digamma", KU_DIGAMMA},
};

static const struct { const char *name; KRedOp op; } reduce_methods[] = {
    {"sum", KR_SUM}, {"mean", KR_MEAN}, {"prod", KR_PROD}, {"amax", KR_MAX}, {"amin", KR_MIN},
};

static const struct { const char *name; DType dt; } cast_methods[] = {
    {"float", DT_F32}, {"double", DT_F64}, {"half", DT_F16}, {"bfloat16", DT_BF16}, {"long", DT_I64},
    {"int", DT_I32}, {"bool", DT_BOOL}, {"byte", DT_U8},
};

static const char *cast_method_name(DType dt) {
    for (size_t i = 0; i < sizeof cast_methods / sizeof cast_methods[0]; i++)
        if (cast_methods[i].dt == dt) return cast_methods[i].name;
    return dtype_name(dt);
}

static void set_closure(lua_State *L, const char *name, lua_CFunction f, lua_Integer up) {
    lua_pushinteger(L, up);
    lua_pushcclosure(L, f, 1);
    lu_name_op(L, -1, name);
    lua_setfield(L, -2, name);
}

static void build_methods(lua_State *L) {
    lua_newtable(L);
    for (const luaL_Reg *r = methods; r->name; r++) {
        if (!r->func) continue;
        lua_pushcfunction(L, r->func);
        lu_name_op(L, -1, r->name);
        lua_setfield(L, -2, r->name);
    }
    char buf[64];
    for (size_t i = 0; i < sizeof binary_methods / sizeof binary_methods[0]; i++) {
        set_closure(L, binary_methods[i].name, binary_method, binary_methods[i].op);
        if (!binary_methods[i].inplace) continue;
        snprintf(buf, sizeof buf, "%s_", binary_methods[i].name);
        set_closure(L, buf, binary_method_, binary_methods[i].op);
    }
    for (size_t i = 0; i < sizeof unary_methods / sizeof unary_methods[0]; i++) {
        set_closure(L, unary_methods[i].name, unary_method, unary_methods[i].op);
        snprintf(buf, sizeof buf, "%s_", unary_methods[i].name);
        set_closure(L, buf, unary_method_, unary_methods[i].op);
    }
    for (size_t i = 0; i < sizeof reduce_methods / sizeof reduce_methods[0]; i++)
        set_closure(L, reduce_methods[i].name, reduce_method, reduce_methods[i].op);
    for (size_t i = 0; i < sizeof cast_methods / sizeof cast_methods[0]; i++)
        set_closure(L, cast_methods[i].name, to_dtype_upvalue, cast_methods[i].dt);
    static const char *const inplace_views[][2] = {{"t_", "t"}, {"squeeze_", "squeeze"}, {"unsqueeze_", "unsqueeze"},
                                                   {"transpose_", "transpose"}, {"swapaxes_", "transpose"},
                                                   {"swapdims_", "transpose"}};
    for (size_t i = 0; i < sizeof inplace_views / sizeof inplace_views[0]; i++) {
        lua_pushstring(L, inplace_views[i][1]);
        lua_pushstring(L, inplace_views[i][0]);
        lua_pushcclosure(L, inplace_view, 2);
        lu_name_op(L, -1, inplace_views[i][0]);
        lua_setfield(L, -2, inplace_views[i][0]);
    }
}

void lu_open_tensor(lua_State *L) {
    static const luaL_Reg size_meta[] = {{"__call", shape_call}, {"__tostring", shape_tostring}, {"__eq", shape_eq},
                                         {NULL, NULL}};
    luaL_newmetatable(L, "accel.Size");
    luaL_setfuncs(L, size_meta, 0);
    lua_pop(L, 1);

    luaL_newmetatable(L, TENSOR_MT);
    static const luaL_Reg meta[] = {
        {"__add", mm_add}, {"__sub", mm_sub}, {"__mul", mm_mul}, {"__div", mm_div}, {"__idiv", mm_idiv},
        {"__mod", mm_mod}, {"__pow", mm_pow}, {"__unm", mm_unm}, {"__band", mm_band}, {"__bor", mm_bor},
        {"__bxor", mm_bxor}, {"__shl", mm_shl}, {"__shr", mm_shr}, {"__bnot", mm_bnot}, {"__len", t_len}, {"__tostring", t_tostring},
        {"__gc", t_gc}, {"__close", t_close}, {"__newindex", t_newindex}, {NULL, NULL}};
    luaL_setfuncs(L, meta, 0);
    lua_pushliteral(L, "accel.Tensor");
    lua_setfield(L, -2, "__name");
    build_methods(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, "accel.TensorMethods");
    lua_pushcclosure(L, t_index, 1);
    lua_setfield(L, -2, "__index");
    lua_rawsetp(L, LUA_REGISTRYINDEX, lua_topointer(L, -1)); /* fast lookup by address */
    lu_state_init(L);
}
