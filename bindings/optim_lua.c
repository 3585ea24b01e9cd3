/* optim_lua.c: accel._C's optimizer entry points, used by accel.optim and
 * accel.nn.utils. One call updates a whole param group:
 *
 *   _C.sgd_step(who, params, grads, bufs, group)
 *   _C.adam_step(who, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs|nil, steps, group, decoupled)
 *   _C.total_norm(tensors, norm_type) -> number   (norm_type may be +-math.huge or negative)
 *   _C.has_grads(params) -> {bool...}             which parameters have a .grad
 *   _C.clear_grads(params)                        every .grad = nil
 *   _C.grads_total_norm(params, norm_type) -> number or nil (no gradients)
 *   _C.grads_mul_(params, factor)                 every .grad *= factor
 *
 * grads = nil means each parameter's own .grad. The optimizers pass nil and
 * the functions above exist so that a training step never makes Lua
 * userdata for the gradients: such a handle keeps its gradient alive until
 * the next full GC, that is through the next forward pass after
 * zero_grad() (GPT-2 shape: 0.5 GB at the peak).
 *
 * group is the param group table (PyTorch's keys): SGD reads lr, momentum,
 * dampening, weight_decay, nesterov, maximize; Adam reads lr, betas = {b1,
 * b2}, eps, weight_decay, maximize (decoupled: AdamW's weight decay).
 * Lists are indexed 1..#params; a nil gradient skips that parameter; a nil
 * state slot (of a parameter with a gradient) is created and stored into
 * the list, where the caller picks it up for its state table. `steps` holds
 * each parameter's step count after the increment. `who` prefixes errors. */
#include "lua_util.h"
#include "../core/optim.h"
#include "../core/ops.h"
#include <math.h>

/* Slots 1..n of the list at idx (nil -> NULL) in an array owned by a
 * userdata left on the stack. */
static Tensor **tensor_list(lua_State *L, int idx, int n, const char *who, const char *what) {
    idx = lua_absindex(L, idx);
    Tensor **a = lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof *a, 0);
    if (!lua_istable(L, idx)) lu_error(L, "%s: %s must be a list, got %s", who, what, luaL_typename(L, idx));
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, idx, i + 1);
        a[i] = lu_to_tensor(L, -1);
        if (!a[i] && !lua_isnil(L, -1))
            lu_error(L, "%s: %s[%d] must be a tensor, got %s", who, what, i + 1, luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    return a;
}

/* tensor_list where every item must be there (a parameter list). */
static Tensor **required_list(lua_State *L, int idx, int n, const char *who, const char *what) {
    Tensor **ts = tensor_list(L, idx, n, who, what);
    for (int i = 0; i < n; i++)
        if (!ts[i]) lu_error(L, "%s: %s[%d] is nil", who, what, i + 1);
    return ts;
}

/* The parameters' own gradients (NULL where none). */
static Tensor **grad_list(lua_State *L, int n, Tensor **params) {
    Tensor **g = lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof *g, 0);
    for (int i = 0; i < n; i++) g[i] = params[i]->grad;
    return g;
}

/* grads argument at idx: a list, or nil for the parameters' own. */
static Tensor **grads_arg(lua_State *L, int idx, int n, Tensor **params, const char *who) {
    return lua_isnil(L, idx) ? grad_list(L, n, params) : tensor_list(L, idx, n, who, "grads");
}

/* Hands the tensors the core created (slots that are nil in the list at
 * idx) to Lua by storing them into the list. */
static void store_created(lua_State *L, int idx, int n, Tensor **now) {
    for (int i = 0; i < n; i++) {
        if (!now[i]) continue;
        if (lua_rawgeti(L, idx, i + 1) == LUA_TNIL) {
            lu_push_tensor(L, now[i]);
            lua_rawseti(L, idx, i + 1);
        }
        lua_pop(L, 1);
    }
}

static double need_number(lua_State *L, int opts, const char *key, const char *who) {
    lua_getfield(L, opts, key);
    if (!lua_isnumber(L, -1)) lu_error(L, "%s: option '%s' must be a number, got %s", who, key, luaL_typename(L, -1));
    double v = lua_tonumber(L, -1);
    lua_pop(L, 1);
    return v;
}

static bool flag(lua_State *L, int opts, const char *key) {
    lua_getfield(L, opts, key);
    bool v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

static int params_count(lua_State *L, const char *who) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Unsigned n = lua_rawlen(L, 2);
    if (n > 0x7fffffff) lu_error(L, "%s: too many parameters", who);
    return (int)n;
}

static int c_sgd_step(lua_State *L) {
    const char *who = luaL_checkstring(L, 1);
    int n = params_count(L, who);
    luaL_checktype(L, 5, LUA_TTABLE);
    KSgdArgs a = {.lr = need_number(L, 5, "lr", who), .momentum = need_number(L, 5, "momentum", who),
                  .dampening = need_number(L, 5, "dampening", who),
                  .weight_decay = need_number(L, 5, "weight_decay", who),
                  .nesterov = flag(L, 5, "nesterov"), .maximize = flag(L, 5, "maximize")};
    Tensor **p = required_list(L, 2, n, who, "params"), **g = grads_arg(L, 3, n, p, who);
    Tensor **b = a.momentum != 0 ? tensor_list(L, 4, n, who, "momentum_buffers") : NULL;
    int rc = optim_sgd_step(who, n, p, g, b, &a);
    if (b) store_created(L, 4, n, b);
    if (rc < 0) lu_core_error(L);
    return 0;
}

/* group.betas[i] */
static double beta(lua_State *L, int group, int i, const char *who) {
    if (lua_getfield(L, group, "betas") != LUA_TTABLE) lu_error(L, "%s: option 'betas' must be a list of two numbers", who);
    lua_rawgeti(L, -1, i);
    if (!lua_isnumber(L, -1)) lu_error(L, "%s: option 'betas' must be a list of two numbers", who);
    double v = lua_tonumber(L, -1);
    lua_pop(L, 2);
    return v;
}

static int c_adam_step(lua_State *L) {
    const char *who = luaL_checkstring(L, 1);
    int n = params_count(L, who);
    luaL_checktype(L, 7, LUA_TTABLE);
    luaL_checktype(L, 8, LUA_TTABLE);
    KAdamArgs a = {.lr = need_number(L, 8, "lr", who), .beta1 = beta(L, 8, 1, who), .beta2 = beta(L, 8, 2, who),
                   .eps = need_number(L, 8, "eps", who), .weight_decay = need_number(L, 8, "weight_decay", who),
                   .decoupled = lua_toboolean(L, 9), .maximize = flag(L, 8, "maximize")};
    Tensor **p = required_list(L, 2, n, who, "params"), **g = grads_arg(L, 3, n, p, who);
    Tensor **m = tensor_list(L, 4, n, who, "exp_avgs"), **v = tensor_list(L, 5, n, who, "exp_avg_sqs");
    Tensor **vmax = lua_isnil(L, 6) ? NULL : tensor_list(L, 6, n, who, "max_exp_avg_sqs");
    int64_t *steps = lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof *steps, 0);
    for (int i = 0; i < n; i++) {
        steps[i] = 1;
        if (!g[i]) continue;
        lua_rawgeti(L, 7, i + 1);
        double s = lua_tonumber(L, -1);
        if (!lua_isnumber(L, -1) || s != floor(s)) lu_error(L, "%s: steps[%d] must be an integer", who, i + 1);
        steps[i] = (int64_t)s;
        lua_pop(L, 1);
    }
    int rc = optim_adam_step(who, n, p, g, m, v, vmax, steps, &a);
    store_created(L, 4, n, m);
    store_created(L, 5, n, v);
    if (vmax) store_created(L, 6, n, vmax);
    if (rc < 0) lu_core_error(L);
    return 0;
}

/* The list at arg 1 (named `what` in errors, its items `items`), every
 * slot a tensor. */
static Tensor **full_list(lua_State *L, const char *who, const char *what, const char *items, int *n) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Unsigned len = lua_rawlen(L, 1);
    if (len > 0x7fffffff) lu_error(L, "%s: too many %s", who, items);
    *n = (int)len;
    return required_list(L, 1, *n, who, what);
}

static Tensor **param_list(lua_State *L, const char *who, int *n) { return full_list(L, who, "params", "parameters", n); }

static int c_total_norm(lua_State *L) {
    int n;
    Tensor **ts = full_list(L, "total_norm", "tensors", "tensors", &n);
    double p = luaL_checknumber(L, 2), out;
    if (optim_total_norm("total_norm", n, ts, p, &out) < 0) lu_core_error(L);
    lua_pushnumber(L, out);
    return 1;
}

static int c_has_grads(lua_State *L) {
    int n;
    Tensor **p = param_list(L, "has_grads", &n);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushboolean(L, p[i]->grad != NULL);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int c_clear_grads(lua_State *L) {
    int n;
    Tensor **p = param_list(L, "clear_grads", &n);
    for (int i = 0; i < n; i++) {
        tensor_release(p[i]->grad);
        p[i]->grad = NULL;
    }
    return 0;
}

/* The gradients that exist, packed at the front; their count. */
static int present_grads(lua_State *L, const char *who, Tensor ***out) {
    int n, k = 0;
    Tensor **p = param_list(L, who, &n), **g = grad_list(L, n, p);
    for (int i = 0; i < n; i++)
        if (g[i]) g[k++] = g[i];
    *out = g;
    return k;
}

static int c_grads_total_norm(lua_State *L) {
    double p = luaL_checknumber(L, 2), out;
    Tensor **g;
    int k = present_grads(L, "clip_grad_norm_", &g);
    if (k == 0) return 0;
    if (optim_total_norm("clip_grad_norm_", k, g, p, &out) < 0) lu_core_error(L);
    lua_pushnumber(L, out);
    return 1;
}

static int c_grads_mul_(lua_State *L) {
    double f = luaL_checknumber(L, 2);
    Tensor **g;
    int k = present_grads(L, "clip_grad_norm_", &g);
    for (int i = 0; i < k; i++)
        if (op_binary_scalar_(KB_MUL, g[i], f, false) < 0) lu_core_error(L);
    return 0;
}

void lu_open_optim(lua_State *L, int m) {
    static const luaL_Reg fns[] = {{"sgd_step", c_sgd_step},
                                   {"adam_step", c_adam_step},
                                   {"total_norm", c_total_norm},
                                   {"has_grads", c_has_grads},
                                   {"clear_grads", c_clear_grads},
                                   {"grads_total_norm", c_grads_total_norm},
                                   {"grads_mul_", c_grads_mul_},
                                   {NULL, NULL}};
    lu_register_c(L, m, fns);
}
