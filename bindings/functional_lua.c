/* functional_lua.c: accel._C, the fused nn ops that accel.nn.functional
 * (Lua) wraps with PyTorch's names and options: linear, cross_entropy,
 * layer_norm, embedding, softmax, dropout; and diagonal's and unfold's views. Dims here
 * are Lua's (1-based). */
#include "lua_util.h"
#include "../core/precision.h"
#include <string.h>

static int push(lua_State *L, Tensor *t) {
    lu_push_tensor(L, t);
    return 1;
}

static Tensor *opt_tensor(lua_State *L, int idx) { return lua_isnoneornil(L, idx) ? NULL : lu_check_tensor(L, idx); }

static int c_linear(lua_State *L) { return push(L, op_linear(lu_check_tensor(L, 1), lu_check_tensor(L, 2), opt_tensor(L, 3))); }

/* cross_entropy(input, target, ignore_index, label_smoothing, reduction) */
static int c_cross_entropy(lua_State *L) {
    const char *red = luaL_optstring(L, 5, "mean");
    int r = strcmp(red, "none") == 0 ? 0 : strcmp(red, "mean") == 0 ? 1 : strcmp(red, "sum") == 0 ? 2 : -1;
    if (r < 0) return lu_error(L, "cross_entropy: reduction must be \"mean\", \"sum\" or \"none\", got \"%s\"", red);
    return push(L, op_cross_entropy(lu_check_tensor(L, 1), lu_check_tensor(L, 2), luaL_optinteger(L, 3, -100),
                                    luaL_optnumber(L, 4, 0.0), r));
}

/* layer_norm(input, normalized_shape, weight, bias, eps) */
static int c_layer_norm(lua_State *L) {
    int64_t shape[TENSOR_MAX_DIMS];
    int next, nd = lu_shape(L, 2, shape, &next);
    return push(L, op_layer_norm(lu_check_tensor(L, 1), shape, nd, opt_tensor(L, 3), opt_tensor(L, 4), luaL_optnumber(L, 5, 1e-5)));
}

static int c_embedding(lua_State *L) { return push(L, op_embedding(lu_check_tensor(L, 1), lu_check_tensor(L, 2))); }

static int c_softmax(lua_State *L) { return push(L, op_softmax(lu_check_tensor(L, 1), lu_dim(L, 2), lua_toboolean(L, 3))); }

/* dropout(input, p): input * mask, mask kept with probability 1-p and scaled by 1/(1-p) */
static int c_dropout(lua_State *L) {
    Tensor *x = lu_check_tensor(L, 1);
    double p = luaL_checknumber(L, 2);
    if (p < 0 || p > 1) return lu_error(L, "dropout: probability has to be between 0 and 1, got %g", p);
    if (!dtype_is_float(x->dtype)) return lu_error(L, "dropout: input must be floating point, got %s", dtype_name(x->dtype));
    Tensor *mask = tensor_empty(x->shape, x->ndim, x->dtype, x->device);
    if (!mask || rng_bernoulli_mask_(mask, p) < 0) {
        tensor_release(mask);
        return lu_core_error(L);
    }
    Tensor *r = op_binary(KB_MUL, x, mask);
    tensor_release(mask);
    return push(L, r);
}

/* set_autocast(dtype | nil) -> previous dtype or nil; bf16 / fp16 only */
static int c_set_autocast(lua_State *L) {
    DType dt = DT_F32;
    if (!lua_isnoneornil(L, 1)) {
        dt = (DType)lu_check_dtype(L, 1);
        if (dt != DT_BF16 && dt != DT_F16 && dt != DT_F32)
            return lu_error(L, "autocast: dtype must be bfloat16 or float16, got %s", dtype_name(dt));
    }
    DType prev = precision_set_autocast(dt);
    if (prev == DT_F32) lua_pushnil(L);
    else lu_push_dtype(L, prev);
    return 1;
}

/* diagonal(t, offset, dim1, dim2): the view (dims 1-based) */
static int c_diagonal(lua_State *L) {
    return push(L, tensor_diagonal(lu_check_tensor(L, 1), luaL_checkinteger(L, 2), lu_dim(L, 3), lu_dim(L, 4)));
}

/* unfold(t, dim, size, step): the view (dim 1-based) */
static int c_unfold(lua_State *L) {
    return push(L, tensor_unfold(lu_check_tensor(L, 1), lu_dim(L, 2), luaL_checkinteger(L, 3), luaL_checkinteger(L, 4)));
}

/* raise(msg): a Lua error at the user's file:line (first frame outside the library) */
static int c_raise(lua_State *L) { return lu_error(L, "%s", luaL_checkstring(L, 1)); }

void lu_open_functions(lua_State *L, int m) {
    static const luaL_Reg fns[] = {{"linear", c_linear}, {"cross_entropy", c_cross_entropy}, {"layer_norm", c_layer_norm},
                                   {"embedding", c_embedding}, {"softmax", c_softmax}, {"dropout", c_dropout},
                                   {"set_autocast", c_set_autocast}, {"raise", c_raise}, {"diagonal", c_diagonal}, {"unfold", c_unfold},
                                   {NULL, NULL}};
    lu_register_c(L, m, fns);
}
