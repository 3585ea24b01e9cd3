/* autograd_lua.c: grad-mode control from Lua (accel.no_grad(fn) and its
 * <close> handle form, enable_grad, set_grad_enabled, is_grad_enabled,
 * inference_mode) and
 * the C side of custom autograd functions (accel._C.attach_custom, one or
 * several outputs), whose backward calls back into Lua, backward from several
 * roots (_C.backward_many) and recording without saving (_C.set_keep_saved,
 * for activation checkpointing). */
#include "lua_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* fn (at `at`) with its arguments above it, under grad mode `on` and
 * inference mode `inf` (core/autograd.h: nothing records while it is on);
 * both are restored whatever happens (checked first: a bad argument changes
 * nothing). A callable table (a module) is called as a function. */
static int call_in_grad_mode(lua_State *L, const char *name, int at, bool on, bool inf) {
    if (!lua_isfunction(L, at) && !luaL_getmetafield(L, at, "__call"))
        return lu_error(L, "%s: expected a function (or a callable table) to run, got %s", name, luaL_typename(L, at));
    if (!lua_isfunction(L, at)) lua_pop(L, 1);
    bool prev = ag_set_grad_enabled(on), prev_inf = ag_set_inference_mode(inf);
    int rc = lua_pcall(L, lua_gettop(L) - at, LUA_MULTRET, 0);
    ag_set_grad_enabled(prev);
    ag_set_inference_mode(prev_inf);
    if (rc != LUA_OK) return lua_error(L);
    return lua_gettop(L) - at + 1;
}

/* no_grad(fn, ...) / enable_grad(fn, ...) / inference_mode(fn, ...) (fn at
 * `at`): fn's results. Without fn: a handle whose close (h:close(), or
 * __close at the end of a <close> variable's scope) restores the previous
 * modes. */
static int with_grad_mode(lua_State *L, const char *name, int at, bool on, bool inf) {
    if (!lua_isnoneornil(L, at)) return call_in_grad_mode(L, name, at, on, inf);
    lua_createtable(L, 0, 2);
    lua_pushboolean(L, ag_set_inference_mode(inf));
    lua_setfield(L, -2, "prev_inference");
    lua_pushboolean(L, ag_set_grad_enabled(on));
    lua_setfield(L, -2, "prev");
    luaL_setmetatable(L, "accel.GradMode");
    return 1;
}

/* The grad-mode functions other than inference_mode leave inference mode
 * as it is, as in PyTorch. */
static int l_no_grad(lua_State *L) { return with_grad_mode(L, "no_grad", 1, false, ag_inference_mode()); }
static int l_enable_grad(lua_State *L) { return with_grad_mode(L, "enable_grad", 1, true, ag_inference_mode()); }

/* inference_mode([mode = true], [fn, ...]): as torch.inference_mode(mode):
 * mode false turns inference mode off and grad mode on. */
static int l_inference_mode(lua_State *L) {
    bool mode = lua_isboolean(L, 1) ? lua_toboolean(L, 1) : true;
    return with_grad_mode(L, "inference_mode", lua_isboolean(L, 1) ? 2 : 1, !mode, mode);
}

/* h:close() / __close: the first call restores the modes, later ones do nothing */
static int grad_mode_close(lua_State *L) {
    if (!lua_istable(L, 1))
        return lu_error(L, "close: call it as h:close(), not h.close() (the grad-mode handle must come first; got %s)",
                        luaL_typename(L, 1));
    lua_getfield(L, 1, "closed");
    if (lua_toboolean(L, -1)) return 0;
    lua_pushboolean(L, 1);
    lua_setfield(L, 1, "closed");
    lua_getfield(L, 1, "prev");
    ag_set_grad_enabled(lua_toboolean(L, -1));
    lua_getfield(L, 1, "prev_inference");
    ag_set_inference_mode(lua_toboolean(L, -1));
    return 0;
}

/* set_grad_enabled(mode) -> the previous mode; set_grad_enabled(mode, fn, ...)
 * -> fn's results, run under mode (as torch's context manager form) */
static int l_set_grad_enabled(lua_State *L) {
    if (!lua_isboolean(L, 1))
        return lu_error(L, "set_grad_enabled: expected a boolean mode, got %s", luaL_typename(L, 1));
    bool on = lua_toboolean(L, 1);
    if (!lua_isnoneornil(L, 2)) return call_in_grad_mode(L, "set_grad_enabled", 2, on, ag_inference_mode());
    lua_pushboolean(L, ag_set_grad_enabled(on));
    return 1;
}

static int l_is_grad_enabled(lua_State *L) {
    lu_check_no_more_args(L, 1);
    lua_pushboolean(L, ag_grad_mode());
    return 1;
}

static int l_is_inference_mode_enabled(lua_State *L) {
    lu_check_no_more_args(L, 1);
    lua_pushboolean(L, ag_inference_mode());
    return 1;
}

/* ---- custom functions ---- */

/* A node's Lua backward runs on the thread that called backward (set by
 * lu_run_backward), not on the one that ran forward: that may be a
 * coroutine that has finished and been collected since. c->L is the main
 * thread, which lives as long as the state (used when backward was entered
 * from C, and to release the registry reference).
 *
 * Several outputs (attach_custom given a list): the custom node's own
 * output is a hidden scalar; each real output gets a one-input "slot" node
 * on it whose backward_acc files its gradient into grads[slot] and hands
 * the engine a marker, so the custom node runs once, after every output's
 * gradient is complete, and its Lua backward receives one gradient (or nil)
 * per output. */
typedef struct {
    lua_State *L;
    int fn_ref;
    int n_out;        /* 0: one output, whose gradient is the node's own */
    char name[40];    /* the nodes' name in error messages */
    Tensor *grads[];  /* n_out accumulated output gradients */
} LuaBackward;

static __thread lua_State *backward_L;

/* The registry key of an error value that is not a string, raised by a
 * custom Function's backward (a table, say): the pass fails with a message,
 * and the value itself is raised again when the pass returns to Lua, as
 * PyTorch passes a backward's exception through unchanged. */
#define BACKWARD_ERROR_KEY "accel.backward_error"

/* Raise the error of a failed backward pass: the value kept under
 * BACKWARD_ERROR_KEY, else the core's message. */
static int raise_backward_error(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, BACKWARD_ERROR_KEY);
    if (lua_isnil(L, -1)) return lu_core_error(L);
    lua_pushnil(L);
    lua_setfield(L, LUA_REGISTRYINDEX, BACKWARD_ERROR_KEY);
    return lua_error(L);
}

/* One backward pass, with L as the state the custom nodes call into and
 * retain_graph on for the pass: from roots[0] (grads[0] may be NULL: a
 * one-element root gets 1) or, when many, from n roots at once (grads[k]
 * for roots[k], all given). A failure is raised (raise_backward_error). */
static int run_backward_pass(lua_State *L, Tensor **roots, Tensor **grads, int n, bool many, bool retain_graph) {
    lua_State *prev = backward_L;
    backward_L = L;
    bool prev_retain = ag_set_retain_graph(retain_graph);
    int rc = many ? ag_backward_many(roots, grads, n) : ag_backward(roots[0], grads[0]);
    ag_set_retain_graph(prev_retain);
    backward_L = prev;
    return rc < 0 ? raise_backward_error(L) : 0;
}

/* A Lua function called during backward (what: "backward", "hook") raised
 * the error on top of L: the pass fails with a message; an error value that
 * is not a string is kept to be raised again when the pass returns to Lua
 * (raise_backward_error). Restores the stack to top; returns -1. */
static int fail_from_lua(lua_State *L, const char *name, const char *what, int top) {
    if (lua_type(L, -1) == LUA_TSTRING || lua_type(L, -1) == LUA_TNUMBER) {
        accel_fail("%s %s failed: %s", name, what, lua_tostring(L, -1));
    } else {
        accel_fail("%s %s failed: %s", name, what, luaL_typename(L, -1));
        lua_setfield(L, LUA_REGISTRYINDEX, BACKWARD_ERROR_KEY);
    }
    lua_settop(L, top);
    return -1;
}

void lu_run_backward(lua_State *L, Tensor *root, Tensor *grad, bool retain_graph) {
    run_backward_pass(L, &root, &grad, 1, false, retain_graph);
}

static void release_grads(LuaBackward *c) {
    for (int k = 0; k < c->n_out; k++) {
        tensor_release(c->grads[k]);
        c->grads[k] = NULL;
    }
}

static void lua_backward_destroy(AGNode *n) {
    LuaBackward *c = n->ctx;
    luaL_unref(c->L, LUA_REGISTRYINDEX, c->fn_ref);
    release_grads(c);
    free(c);
}

/* Push the output gradients: g, or each slot's (nil where none came). */
static void push_output_grads(lua_State *L, LuaBackward *c, Tensor *g) {
    if (!c->n_out) {
        lu_push_tensor(L, tensor_retain(g));
        return;
    }
    for (int k = 0; k < c->n_out; k++) {
        if (c->grads[k]) lu_push_tensor(L, c->grads[k]);
        else lua_pushnil(L);
        c->grads[k] = NULL; /* the Lua value owns it now */
    }
}

/* Calls the Lua backward with the output gradient(s); it returns one
 * gradient (tensor or nil) per input. */
static int lua_backward_run(AGNode *n, Tensor *g, Tensor **gin) {
    LuaBackward *c = n->ctx;
    lua_State *L = backward_L ? backward_L : c->L;
    if (!lua_checkstack(L, n->n_in + c->n_out + 4)) {
        release_grads(c);
        return accel_fail_int("%s backward: Lua stack overflow", c->name);
    }
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->fn_ref);
    push_output_grads(L, c, g);
    if (lua_pcall(L, c->n_out ? c->n_out : 1, n->n_in, 0) != LUA_OK) return fail_from_lua(L, c->name, "backward", top);
    for (int k = 0; k < n->n_in; k++) {
        int idx = top + 1 + k;
        if (lua_isnil(L, idx)) continue;
        TensorUD *u = luaL_testudata(L, idx, TENSOR_MT);
        if (!u || !u->t) {
            accel_fail("%s backward must return a tensor or nil for input %d, got %s", c->name, k + 1,
                       luaL_typename(L, idx));
            lua_settop(L, top);
            return -1;
        }
        gin[k] = tensor_retain(u->t);
    }
    lua_settop(L, top);
    return 0;
}

/* A slot node: its gradient joins grads[slot] of the custom node below. */
static int slot_acc(AGNode *n, Tensor *gout, Tensor **acc) {
    AGNode *custom = n->edges[0].fn;
    LuaBackward *c = custom->ctx;
    Tensor **g = &c->grads[n->i[0]];
    if (!*g) *g = tensor_retain(gout);
    else {
        Tensor *sum = op_binary(KB_ADD, *g, gout);
        if (!sum) return -1;
        tensor_release(*g);
        *g = sum;
    }
    if (!*acc) *acc = tensor_retain(gout); /* marker: the custom node has something to run on */
    return 0;
}

static int slot_backward(AGNode *n, Tensor *gout, Tensor **gin) {
    (void)gout, (void)gin;
    return accel_fail_int("%s: output slot run without its custom node", n->name);
}

/* The inputs list at idx as tensors (NULL for non-tensors), in a userdata
 * buffer left on the stack. */
static Tensor **check_inputs(lua_State *L, int idx, int *n) {
    *n = (int)lua_rawlen(L, idx);
    Tensor **ins = lua_newuserdatauv(L, sizeof(Tensor *) * (size_t)(*n ? *n : 1), 0);
    for (int i = 0; i < *n; i++) {
        lua_rawgeti(L, idx, i + 1);
        ins[i] = lu_to_tensor(L, -1);
        lua_pop(L, 1);
    }
    return ins;
}

static LuaBackward *new_ctx(lua_State *L, int fn_idx, int n_out, const char *name) {
    LuaBackward *c = calloc(1, sizeof *c + sizeof(Tensor *) * (size_t)n_out);
    if (!c) return NULL;
    lua_compat_push_mainthread(L);
    c->L = lua_tothread(L, -1);
    lua_pop(L, 1);
    lua_pushvalue(L, fn_idx);
    c->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    c->n_out = n_out;
    snprintf(c->name, sizeof c->name, "%s", name);
    return c;
}

/* Record the custom node on out (history-free) with the inputs; false when
 * nothing needs a gradient. Raises on out of memory. */
static bool record_custom(lua_State *L, Tensor *out, Tensor **ins, int n, int n_out, const char *name) {
    AGNode *node = ag_record("CustomFunction", lua_backward_run, out, ins, n);
    if (!node) return false;
    LuaBackward *c = new_ctx(L, 3, n_out, name);
    if (!c) return lu_error(L, "out of memory");
    node->ctx = c;
    node->destroy_ctx = lua_backward_destroy;
    node->name = c->name;
    return true;
}

/* Several outputs: a list of detached outputs with slot nodes over a hidden
 * custom node (non-float outputs pass through without history). */
static int attach_many(lua_State *L, Tensor **ins, int n, const char *name) {
    int n_out = (int)lua_rawlen(L, 1);
    Tensor *hub = tensor_empty(NULL, 0, DT_F32, (Device){DEV_CPU, 0});
    if (!hub) return lu_core_error(L);
    lu_push_tensor(L, hub); /* released with the Lua value */
    bool recorded = record_custom(L, hub, ins, n, n_out, name);
    lua_createtable(L, n_out, 0);
    for (int k = 0; k < n_out; k++) {
        lua_rawgeti(L, 1, k + 1);
        Tensor *o = lu_check_tensor(L, -1);
        lua_pop(L, 1);
        Tensor *r = tensor_detach(o);
        if (!r) return lu_core_error(L);
        AGNode *slot = recorded ? ag_record("CustomFunction", slot_backward, r, &hub, 1) : NULL;
        if (slot) {
            slot->name = hub->grad_fn->name;
            slot->backward_acc = slot_acc;
            slot->i[0] = k;
        }
        lu_push_tensor(L, r);
        lua_rawseti(L, -2, k + 1);
    }
    return 1;
}

/* _C.attach_custom(output, {inputs...}, backward_fn [, name]) -> output with
 * history; with a list of outputs, the list of them (backward_fn then gets
 * one gradient or nil per output). */
static int l_attach_custom(lua_State *L) {
    bool many = lua_istable(L, 1);
    Tensor *out = many ? NULL : lu_check_tensor(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    const char *name = luaL_optstring(L, 4, "custom Function");
    lua_settop(L, 4);
    int n;
    Tensor **ins = check_inputs(L, 2, &n);
    if (many) return attach_many(L, ins, n, name);
    Tensor *r = tensor_detach(out);
    if (!r) return lu_core_error(L);
    lu_push_tensor(L, r);
    record_custom(L, r, ins, n, 0, name);
    return 1;
}

/* into[0..n) = the tensors of the list at idx */
static void tensors_of_list(lua_State *L, int idx, int n, Tensor **into) {
    for (int k = 0; k < n; k++) {
        lua_rawgeti(L, idx, k + 1);
        into[k] = lu_check_tensor(L, -1);
        lua_pop(L, 1);
    }
}

/* _C.backward_many({tensors...}, {grads...}, [retain_graph]): one backward from all of them */
static int l_backward_many(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    bool retain_graph = lua_toboolean(L, 3);
    lua_settop(L, 2); /* (the scratch userdata below goes at 3) */
    int n = (int)lua_rawlen(L, 1);
    if ((int)lua_rawlen(L, 2) != n)
        return lu_error(L, "backward: %d tensors but %d gradients", n, (int)lua_rawlen(L, 2));
    Tensor **v = lua_newuserdatauv(L, sizeof(Tensor *) * (size_t)(2 * n + 1), 0);
    tensors_of_list(L, 1, n, v);
    tensors_of_list(L, 2, n, v + n);
    lu_gc_before_backward(L);
    run_backward_pass(L, v, v + n, n, true, retain_graph);
    return 0;
}

/* _C.grad({roots...}, {grads...}, {inputs...}, [retain_graph], [shared]):
 * the gradients of the roots with respect to the inputs (ag_grad,
 * exclusive unless shared), a list with nil where none arrived (its n
 * field: the number of inputs) */
static int l_grad(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    bool retain_graph = lua_toboolean(L, 4), exclusive = !lua_toboolean(L, 5);
    lua_settop(L, 3); /* (the scratch userdata below goes at 4) */
    int n = (int)lua_rawlen(L, 1), m = (int)lua_rawlen(L, 3);
    if ((int)lua_rawlen(L, 2) != n) return lu_error(L, "grad: %d outputs but %d gradients", n, (int)lua_rawlen(L, 2));
    Tensor **v = lua_newuserdatauv(L, sizeof(Tensor *) * (size_t)(2 * n + 2 * m + 1), 0);
    Tensor **inputs = v + 2 * n, **out = v + 2 * n + m;
    tensors_of_list(L, 1, n, v);
    tensors_of_list(L, 2, n, v + n);
    tensors_of_list(L, 3, m, inputs);
    lu_gc_before_backward(L);
    lua_State *prev = backward_L;
    backward_L = L;
    bool prev_retain = ag_set_retain_graph(retain_graph);
    int rc = ag_grad(v, v + n, n, inputs, m, out, exclusive);
    ag_set_retain_graph(prev_retain);
    backward_L = prev;
    if (rc < 0) return raise_backward_error(L);
    lua_createtable(L, m, 1);
    for (int i = 0; i < m; i++) {
        if (!out[i]) continue;
        lu_push_existing(L, out[i]); /* (a gradient may be a tensor Lua holds: the user's grad_outputs) */
        tensor_release(out[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_pushinteger(L, m);
    lua_setfield(L, -2, "n");
    return 1;
}

/* _C.collect_garbage_tensors(): activation checkpointing's collection of
 * the tensors a checkpointed forward or recompute left (lu_gc_after_checkpoint) */
static int l_collect_garbage_tensors(lua_State *L) {
    lu_gc_after_checkpoint(L);
    return 0;
}

/* Add t to the result list (at -1) once, keyed in the set at -2. */
static void add_leaf(lua_State *L, Tensor *t) {
    if (lua_rawgetp(L, -2, t) != LUA_TNIL) {
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);
    lua_pushboolean(L, 1);
    lua_rawsetp(L, -3, t);
    lu_push_existing(L, t);
    lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
}

/* Push node n unless seen (set at -2); false when out of memory. */
static bool push_node(lua_State *L, AGNode *n, AGNode ***stack, int *len, int *cap) {
    if (lua_rawgetp(L, -2, n) != LUA_TNIL) {
        lua_pop(L, 1);
        return true;
    }
    lua_pop(L, 1);
    lua_pushboolean(L, 1);
    lua_rawsetp(L, -3, n);
    if (*len == *cap) {
        int c = *cap ? *cap * 2 : 64;
        AGNode **v = realloc(*stack, sizeof *v * (size_t)c);
        if (!v) return false;
        *stack = v, *cap = c;
    }
    (*stack)[(*len)++] = n;
    return true;
}

/* _C.graph_leaves({tensors...}) -> the leaves requiring grad that the
 * tensors' graphs reach through nodes recorded without saving (a
 * checkpointed forward's), each once: the parameters a checkpoint's
 * recompute will give gradients to. */
static int l_graph_leaves(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    lua_newtable(L); /* 2: seen nodes and leaves */
    lua_newtable(L); /* 3: the leaves */
    AGNode **stack = NULL;
    int len = 0, cap = 0;
    bool ok = true;
    for (int k = 1; ok && k <= (int)lua_rawlen(L, 1); k++) {
        lua_rawgeti(L, 1, k);
        Tensor *t = lu_to_tensor(L, -1);
        lua_pop(L, 1);
        if (!t || !t->requires_grad) continue;
        if (!t->grad_fn) add_leaf(L, t);
        else if (t->grad_fn->unsaved) ok = push_node(L, t->grad_fn, &stack, &len, &cap);
    }
    while (ok && len) {
        AGNode *n = stack[--len];
        for (int e = 0; ok && e < n->n_in; e++) {
            if (n->edges[e].leaf) add_leaf(L, n->edges[e].leaf);
            AGNode *p = n->edges[e].fn;
            if (p && p->unsaved) ok = push_node(L, p, &stack, &len, &cap);
        }
    }
    free(stack);
    if (!ok) return lu_error(L, "checkpoint: out of memory");
    return 1;
}

/* _C.retaining_graph() -> whether the backward running now keeps its graph
 * (retain_graph = true): a checkpoint keeps its inputs for the next one */
static int l_retaining_graph(lua_State *L) {
    lua_pushboolean(L, ag_retaining_graph());
    return 1;
}

/* _C.set_keep_saved(on) -> previous (see ag_set_keep_saved) */
static int l_set_keep_saved(lua_State *L) {
    lua_pushboolean(L, ag_set_keep_saved(lua_toboolean(L, 1)));
    return 1;
}

/* C.name_grad_fn(t, name): t's grad_fn takes PyTorch's node name for the op
 * the user called (F.mse_loss's last node is a mean: MseLossBackward0), as
 * printing shows it; name must be one of PyTorch's names listed here (the
 * node keeps a pointer to it). t without a grad_fn is left as it is. */
static int l_name_grad_fn(lua_State *L) {
    static const char *const names[] = {"NllLossBackward0", "NllLoss2DBackward0", "MseLossBackward0",
                                        "SmoothL1LossBackward0", "HuberLossBackward0", "BinaryCrossEntropyBackward0",
                                        "BinaryCrossEntropyWithLogitsBackward0", "EmbeddingBackward0",
                                        "AddBackward0", NULL};
    Tensor *t = lu_check_tensor(L, 1);
    const char *name = luaL_checkstring(L, 2);
    for (const char *const *n = names; *n; n++)
        if (strcmp(*n, name) == 0) {
            ag_name_node(t, *n);
            return 0;
        }
    return luaL_error(L, "name_grad_fn: %s is not a node name listed in bindings/autograd_lua.c", name);
}

/* ---- tensor hooks: t:register_hook(fn), t:retain_grad() ---- */

typedef struct {
    lua_State *L; /* the main thread (the hook runs on backward_L when set) */
    int fn_ref;
} LuaHook;

static void lua_hook_free(void *ud) {
    LuaHook *h = ud;
    luaL_unref(h->L, LUA_REGISTRYINDEX, h->fn_ref);
    free(h);
}

/* Call the hook's fn(t) (t pushed as a new reference, or as the tensor's
 * existing Lua value) with one result left on the stack of the state it ran
 * on; NULL with an error set (stack restored) when it failed. *top: the
 * stack's top before the call. */
static lua_State *call_hook(LuaHook *h, Tensor *t, bool existing, const char *name, int *top) {
    lua_State *L = backward_L ? backward_L : h->L;
    if (!lua_checkstack(L, 4)) return accel_fail("tensor hook: Lua stack overflow");
    *top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->fn_ref);
    if (existing) lu_push_existing(L, t);
    else lu_push_tensor(L, tensor_retain(t));
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) return fail_from_lua(L, name, "hook", *top), NULL;
    return L;
}

/* fn(grad): nil keeps the gradient, a tensor of its shape, dtype and device
 * replaces it (torch's checks). */
static int lua_hook_run(void *ud, Tensor **g) {
    int top = 0;
    lua_State *L = call_hook(ud, *g, false, "tensor", &top);
    if (!L) return -1;
    int rc = 0;
    if (!lua_isnil(L, -1)) {
        TensorUD *u = luaL_testudata(L, -1, TENSOR_MT);
        Tensor *r = u ? u->t : NULL;
        char was[32], got[32];
        if (!r)
            rc = accel_fail_int("tensor hook must return a tensor or nil, got %s", luaL_typename(L, -1));
        else if (!tensor_same_shape(r, *g))
            rc = accel_fail_int("tensor hook has changed the size of value: the gradient has shape %s, the hook "
                                "returned %s", tensor_shape_str(*g), tensor_shape_str(r));
        else if (r->dtype != (*g)->dtype)
            rc = accel_fail_int("tensor hook has changed the type of value (was %s got %s)", dtype_name((*g)->dtype),
                                dtype_name(r->dtype));
        else if (!device_same(r->device, (*g)->device))
            rc = accel_fail_int("tensor hook has changed the device of value (was %s got %s)",
                                device_str((*g)->device, was, sizeof was), device_str(r->device, got, sizeof got));
        else {
            tensor_release(*g);
            *g = tensor_retain(r);
        }
    }
    lua_settop(L, top);
    return rc;
}

#define HOOK_HANDLE_MT "accel.TensorHookHandle"

/* The handle keeps the list's owner alive: the node or the leaf. */
typedef struct {
    AGNode *node;
    Tensor *leaf;
    int id;
} HookHandle;

static int handle_remove(lua_State *L) {
    HookHandle *h = luaL_checkudata(L, 1, HOOK_HANDLE_MT);
    if (h->node || h->leaf) ag_hook_remove(h->node ? &h->node->hooks : &h->leaf->hooks, h->id);
    return 0;
}

static int handle_gc(lua_State *L) {
    HookHandle *h = luaL_checkudata(L, 1, HOOK_HANDLE_MT);
    if (h->node) ag_node_release(h->node);
    tensor_release(h->leaf);
    h->node = NULL, h->leaf = NULL;
    return 0;
}

static int handle_tostring(lua_State *L) {
    HookHandle *h = luaL_checkudata(L, 1, HOOK_HANDLE_MT);
    lua_pushfstring(L, "RemovableHandle(tensor hook %d)", h->id);
    return 1;
}

/* register_post_accumulate_grad_hook's fn(t), after t.grad was updated;
 * what it returns is ignored. */
static int lua_post_hook_run(void *ud, Tensor **leaf) {
    int top = 0;
    lua_State *L = call_hook(ud, *leaf, true, "post accumulate grad", &top);
    if (!L) return -1;
    lua_settop(L, top);
    return 0;
}

/* t:register_hook(fn) / t:register_post_accumulate_grad_hook(fn) (post)
 * -> a handle with :remove() */
static int add_lua_hook(lua_State *L, bool post) {
    Tensor *t = lu_check_self(L);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lu_check_no_more_args(L, 3);
    HookHandle *handle = lua_newuserdata(L, sizeof *handle);
    *handle = (HookHandle){NULL, NULL, 0};
    luaL_setmetatable(L, HOOK_HANDLE_MT);
    LuaHook *h = calloc(1, sizeof *h);
    if (!h) return lu_error(L, "register_hook: out of memory");
    lua_compat_push_mainthread(L);
    h->L = lua_tothread(L, -1);
    lua_pop(L, 1);
    lua_pushvalue(L, 2);
    h->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    int id = ag_hook_add(t, post ? lua_post_hook_run : lua_hook_run, lua_hook_free, h,
                         post ? AG_HOOK_POST : AG_HOOK_GRAD, NULL);
    if (id < 0) return lu_core_error(L);
    handle->id = id;
    if (t->grad_fn) handle->node = ag_node_retain(t->grad_fn);
    else handle->leaf = tensor_retain(t);
    return 1;
}

/* retain_grad's hook: t.grad = a copy of the gradient, or t.grad + it. */
static int retain_hook_run(void *ud, Tensor **g) {
    Tensor *t = ud;
    Tensor *kept = t->grad ? op_binary(KB_ADD, t->grad, *g) : tensor_clone(*g);
    if (!kept) return -1;
    tensor_release(t->grad);
    t->grad = kept;
    return 0;
}

/* t:retain_grad(): a leaf keeps its .grad anyway; twice is once. */
int lu_tensor_retain_grad(lua_State *L) {
    Tensor *t = lu_check_self(L);
    lu_check_no_more_args(L, 2);
    if (!t->requires_grad) return lu_error(L, "can't retain_grad on Tensor that has requires_grad=False");
    if (t->grad_fn && !ag_retains_grad(t) && ag_hook_add(t, retain_hook_run, NULL, t, AG_HOOK_LAST, t) < 0)
        return lu_core_error(L);
    return 0;
}

static void open_hook_handles(lua_State *L) {
    luaL_newmetatable(L, HOOK_HANDLE_MT);
    static const luaL_Reg mt[] = {{"__gc", handle_gc}, {"__tostring", handle_tostring}, {NULL, NULL}};
    luaL_setfuncs(L, mt, 0);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, handle_remove);
    lua_setfield(L, -2, "remove");
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
}

int lu_tensor_register_hook(lua_State *L) { return add_lua_hook(L, false); }
int lu_tensor_register_post_accumulate_grad_hook(lua_State *L) { return add_lua_hook(L, true); }

void lu_open_autograd(lua_State *L, int m) {
    open_hook_handles(L);
    luaL_newmetatable(L, "accel.GradMode");
    lua_pushcfunction(L, grad_mode_close);
    lua_setfield(L, -2, "__close");
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, grad_mode_close);
    lua_setfield(L, -2, "close");
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {{"no_grad", l_no_grad},
                                   {"enable_grad", l_enable_grad},
                                   {"set_grad_enabled", l_set_grad_enabled},
                                   {"is_grad_enabled", l_is_grad_enabled},
                                   {"inference_mode", l_inference_mode},
                                   {"is_inference_mode_enabled", l_is_inference_mode_enabled},
                                   {NULL, NULL}};
    lua_pushvalue(L, m);
    luaL_setfuncs(L, fns, 0);
    lua_pop(L, 1);
    static const luaL_Reg c_fns[] = {{"name_grad_fn", l_name_grad_fn},
                                     {"attach_custom", l_attach_custom}, {"backward_many", l_backward_many}, {"grad", l_grad}, {"retaining_graph", l_retaining_graph},
                                     {"set_keep_saved", l_set_keep_saved}, {"graph_leaves", l_graph_leaves},
                                     {"collect_garbage_tensors", l_collect_garbage_tensors}, {NULL, NULL}};
    lu_register_c(L, m, c_fns);
}
