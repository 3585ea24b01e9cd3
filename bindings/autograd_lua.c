/* autograd_lua.c: grad-mode control from Lua (accel.no_grad(fn) and its
 * <close> handle form, enable_grad, set_grad_enabled, is_grad_enabled) and
 * the C side of custom autograd functions (accel._C.attach_custom), whose
 * backward calls back into Lua. */
#include "lua_util.h"
#include <stdlib.h>

/* Run fn (at index 1) with grad mode `on`, restoring it afterwards even on
 * error; returns fn's results. Without fn: a handle whose __close restores. */
static int with_grad_mode(lua_State *L, bool on) {
    bool prev = ag_set_grad_enabled(on);
    if (lua_isnoneornil(L, 1)) {
        lua_createtable(L, 0, 1);
        lua_pushboolean(L, prev);
        lua_setfield(L, -2, "prev");
        luaL_setmetatable(L, "accel.GradMode");
        return 1;
    }
    luaL_checktype(L, 1, LUA_TFUNCTION);
    /* fn at 1, its arguments above: the call consumes the whole stack */
    int rc = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
    ag_set_grad_enabled(prev);
    if (rc != LUA_OK) return lua_error(L);
    return lua_gettop(L);
}

static int l_no_grad(lua_State *L) { return with_grad_mode(L, false); }
static int l_enable_grad(lua_State *L) { return with_grad_mode(L, true); }

static int grad_mode_close(lua_State *L) {
    lua_getfield(L, 1, "prev");
    ag_set_grad_enabled(lua_toboolean(L, -1));
    return 0;
}

static int l_set_grad_enabled(lua_State *L) {
    lua_pushboolean(L, ag_set_grad_enabled(lua_toboolean(L, 1)));
    return 1;
}

static int l_is_grad_enabled(lua_State *L) {
    lua_pushboolean(L, ag_grad_enabled());
    return 1;
}

/* ---- custom functions ---- */

/* A node's Lua backward runs on the thread that called backward (set by
 * lu_run_backward), not on the one that ran forward: that may be a
 * coroutine that has finished and been collected since. c->L is the main
 * thread, which lives as long as the state (used when backward was entered
 * from C, and to release the registry reference). */
typedef struct {
    lua_State *L;
    int fn_ref;
} LuaBackward;

static __thread lua_State *backward_L;

int lu_run_backward(lua_State *L, Tensor *root, Tensor *grad) {
    lua_State *prev = backward_L;
    backward_L = L;
    int rc = ag_backward(root, grad);
    backward_L = prev;
    return rc;
}

static void lua_backward_destroy(AGNode *n) {
    LuaBackward *c = n->ctx;
    luaL_unref(c->L, LUA_REGISTRYINDEX, c->fn_ref);
    free(c);
}

/* Calls the Lua backward with the output gradient; it returns one gradient
 * (tensor or nil) per input. */
static int lua_backward_run(AGNode *n, Tensor *g, Tensor **gin) {
    LuaBackward *c = n->ctx;
    lua_State *L = backward_L ? backward_L : c->L;
    if (!lua_checkstack(L, n->n_in + 4)) return accel_fail_int("custom Function backward: Lua stack overflow");
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->fn_ref);
    lu_push_tensor(L, tensor_retain(g));
    if (lua_pcall(L, 1, n->n_in, 0) != LUA_OK) {
        accel_fail("custom Function backward failed: %s", lua_tostring(L, -1));
        lua_settop(L, top);
        return -1;
    }
    for (int k = 0; k < n->n_in; k++) {
        int idx = top + 1 + k;
        if (lua_isnil(L, idx)) continue;
        TensorUD *u = luaL_testudata(L, idx, TENSOR_MT);
        if (!u || !u->t) {
            accel_fail("custom Function backward must return a tensor or nil for input %d, got %s", k + 1, luaL_typename(L, idx));
            lua_settop(L, top);
            return -1;
        }
        gin[k] = tensor_retain(u->t);
    }
    lua_settop(L, top);
    return 0;
}

/* _C.attach_custom(output, {inputs...}, backward_fn) -> output with history */
static int l_attach_custom(lua_State *L) {
    Tensor *out = lu_check_tensor(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    int n = (int)lua_rawlen(L, 2);
    Tensor **ins = lua_newuserdatauv(L, sizeof(Tensor *) * (size_t)(n ? n : 1), 0);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 2, i + 1);
        ins[i] = lu_to_tensor(L, -1);
        lua_pop(L, 1);
    }
    Tensor *r = tensor_detach(out);
    if (!r) return lu_core_error(L);
    AGNode *node = ag_record("CustomFunction", lua_backward_run, r, ins, n);
    if (node) {
        LuaBackward *c = malloc(sizeof *c);
        if (!c) {
            tensor_release(r);
            return lu_error(L, "out of memory");
        }
        lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
        c->L = lua_tothread(L, -1);
        lua_pop(L, 1);
        lua_pushvalue(L, 3);
        c->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
        node->ctx = c;
        node->destroy_ctx = lua_backward_destroy;
    }
    lu_push_tensor(L, r);
    return 1;
}

void lu_open_autograd(lua_State *L, int m) {
    luaL_newmetatable(L, "accel.GradMode");
    lua_pushcfunction(L, grad_mode_close);
    lua_setfield(L, -2, "__close");
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {{"no_grad", l_no_grad}, {"enable_grad", l_enable_grad},
                                   {"set_grad_enabled", l_set_grad_enabled}, {"is_grad_enabled", l_is_grad_enabled},
                                   {NULL, NULL}};
    lua_pushvalue(L, m);
    luaL_setfuncs(L, fns, 0);
    lua_pop(L, 1);
    static const luaL_Reg c_fns[] = {{"attach_custom", l_attach_custom}, {NULL, NULL}};
    lu_register_c(L, m, c_fns);
}
