/* lua_util.c: tensor userdata, error positions, argument parsing, dtype and
 * device objects, GC accounting (see lua_util.h). */
#include "lua_util.h"
#include "../core/backend/backend.h"
#include "../core/dist/shard.h"
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lu_at_close(lua_State *L, const char *key, lua_CFunction fn) {
    lua_newuserdatauv(L, 1, 0);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, fn);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, key);
}

/* ---- errors ---- */

void lu_user_site(lua_State *L, char *buf, size_t n) {
    lua_Debug ar;
    buf[0] = 0;
    for (int level = 1; lua_getstack(L, level, &ar); level++) {
        lua_getinfo(L, "Sl", &ar);
        if (ar.currentline > 0 && strncmp(ar.source, "=[accel]", 8) != 0) {
            snprintf(buf, n, "%s:%d", ar.short_src, ar.currentline);
            return;
        }
    }
}

static void push_user_where(lua_State *L) {
    char site[LUA_IDSIZE + 24];
    lu_user_site(L, site, sizeof site);
    if (site[0]) lua_pushfstring(L, "%s: ", site);
    else lua_pushliteral(L, "");
}

/* C printf formats (%lld, %g, ...), not lua_pushfstring's small subset. */
int lu_error(lua_State *L, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    push_user_where(L);
    lua_pushstring(L, msg);
    lua_concat(L, 2);
    return lua_error(L);
}

int lu_core_error(lua_State *L) { return lu_error(L, "%s", accel_last_error()); }

/* ---- per-state binding data, reached through the state's extra space ---- */

#if LUA_VERSION_NUM >= 504
/* A thread's extra space is a copy of the main thread's, made when the
 * thread is created: a coroutine created before require("accel"), or the
 * main thread after a require inside a coroutine, holds NULL there, and
 * finds the state in the registry (then keeps it in its own extra space). */
LuState *lu_state(lua_State *L) {
    LuState **slot = (LuState **)lua_getextraspace(L);
    if (*slot) return *slot;
    lua_getfield(L, LUA_REGISTRYINDEX, "accel.state");
    *slot = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return *slot;
}

static void set_state(lua_State *L, LuState *st) { *(LuState **)lua_getextraspace(L) = st; }
static void release_slot_on_close(lua_State *L) { (void)L; }
#else
/* LuaJIT has no extra space. Every thread of a state shares its
 * allocator's user data, so that pointer names the state: a short table
 * of (allocator data, LuState) pairs, one entry per open state that loaded
 * the bindings. The LuState's finalizer, run when its state closes, marks
 * its entry free for the next state (the entry still answers lookups until
 * then: the state's other finalizers run in the same lua_close). */
#define MAX_STATES 16
static struct {
    void *ud;
    LuState *st;
    bool closed;
} states[MAX_STATES];
static int n_states;

static void *state_key(lua_State *L) {
    void *ud;
    lua_getallocf(L, &ud);
    return ud;
}

LuState *lu_state(lua_State *L) {
    void *ud = state_key(L);
    for (int i = n_states - 1; i >= 0; i--)
        if (states[i].ud == ud) return states[i].st;
    return NULL;
}

/* The entry of this allocator data, else a closed state's, else a new one
 * (MAX_STATES: none left). */
static int find_slot(void *ud) {
    int i = 0, closed = MAX_STATES;
    for (; i < n_states && states[i].ud != ud; i++)
        if (states[i].closed && closed == MAX_STATES) closed = i;
    return i < n_states ? i : closed < MAX_STATES ? closed : n_states;
}

static void set_state(lua_State *L, LuState *st) {
    void *ud = state_key(L);
    int i = find_slot(ud);
    if (i == MAX_STATES)
        luaL_error(L, "accel: more than %d Lua states that loaded the bindings are open at once", MAX_STATES);
    if (i == n_states) n_states++;
    states[i].ud = ud;
    states[i].st = st;
    states[i].closed = false;
    if (lua_pushthread(L)) lua_setfield(L, LUA_REGISTRYINDEX, LUA_COMPAT_MAINTHREAD);
    else lua_pop(L, 1);
}

/* __gc of a LuState: its state is closing (or a later require replaced it). */
static int state_gc(lua_State *L) {
    LuState *st = lua_touserdata(L, 1);
    for (int i = 0; i < n_states; i++)
        if (states[i].st == st) states[i].closed = true;
    return 0;
}

/* Give the LuState at the top of the stack its finalizer. */
static void release_slot_on_close(lua_State *L) {
    lua_newtable(L);
    lua_pushcfunction(L, state_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
}
#endif

void lu_state_init(lua_State *L) {
    LuState *st = lua_newuserdatauv(L, sizeof *st, 0);
    memset(st, 0, sizeof *st);
    release_slot_on_close(L);
    lua_setfield(L, LUA_REGISTRYINDEX, "accel.state"); /* keeps it alive */
    luaL_getmetatable(L, TENSOR_MT);
    st->tensor_mt = lua_topointer(L, -1);
    lua_pop(L, 1);
    set_state(L, st);
}

/* ---- tensor userdata ---- */

/* The userdata at idx if it is a tensor (metatable compared by address). */
static TensorUD *test_tensor(lua_State *L, int idx) {
    void *p = lua_touserdata(L, idx);
    if (!p || !lua_getmetatable(L, idx)) return NULL;
    bool ok = lua_topointer(L, -1) == lu_state(L)->tensor_mt;
    lua_pop(L, 1);
    return ok ? p : NULL;
}

bool lu_is_tensor(lua_State *L, int idx) { return test_tensor(L, idx) != NULL; }

Tensor *lu_tensor_meta(lua_State *L, int idx) {
    TensorUD *u = test_tensor(L, idx);
    if (!u) return NULL;
    if (!u->t) lu_error(L, "tensor was freed (t:free() or <close>) and cannot be used");
    return u->t;
}

Tensor *lu_to_tensor(lua_State *L, int idx) {
    Tensor *t = lu_tensor_meta(L, idx);
    if (t && t->numel > 0 && shard_storage_released(t->storage))
        lu_error(L, "a tensor of shape %s cannot be used: " SHARD_RELEASED_MSG, tensor_shape_str(t));
    return t;
}

/* The name the running C function was called by ("sum" for t:sum()), or dflt. */
static const char *running_op(lua_State *L);

static const char *called_name(lua_State *L, const char *dflt) {
    const char *name = running_op(L);
    return name ? name : dflt;
}

Tensor *lu_check_tensor(lua_State *L, int idx) {
    Tensor *t = lu_to_tensor(L, idx);
    if (!t)
        lu_error(L, "bad argument #%d to '%s' (tensor expected, got %s)", idx, called_name(L, "?"),
                 luaL_typename(L, idx));
    return t;
}

static Tensor *self_or_error(lua_State *L, Tensor *t) {
    if (!t) {
        const char *m = called_name(L, "method");
        if (strcmp(m, "repeat") == 0) /* a Lua keyword: t:repeat(...) does not parse */
            lu_error(L, "Tensor.repeat: call it as t[\"repeat\"](t, ...) (repeat is a Lua keyword; the tensor itself "
                        "must come first, as in accel[\"repeat\"](t, ...); got %s)", luaL_typename(L, 1));
        lu_error(L, "Tensor.%s: call it as t:%s(...), not t.%s(...) (the tensor itself must come first, as in "
                    "accel.%s(t, ...); got %s)", m, m, m, m, luaL_typename(L, 1));
    }
    return t;
}

Tensor *lu_check_self(lua_State *L) { return self_or_error(L, lu_to_tensor(L, 1)); }

Tensor *lu_check_self_meta(lua_State *L) { return self_or_error(L, lu_tensor_meta(L, 1)); }

/* Tensor bytes drive the collector: every 256 KiB of them runs one step. In
 * generational mode (lua.c's and accel-lua's default) that is exactly one
 * minor collection, whatever the Lua heap's size (a step sized by the bytes
 * would add them to a debt scaled by the heap, so the heap's size would
 * decide how many calls make a minor collection, and with it which of a
 * step's tensors grow old: a loop's peak jumped between 9 and 20 MiB with
 * unrelated code size). Tensors that survive two minor collections turn
 * old, and only a major collection frees old objects, which Lua starts
 * when its own heap has grown, not on tensor bytes. So a full
 * collection is forced whenever the tensor bytes pushed since the last one
 * exceed both 64 MiB and the tensor bytes that were alive after it (the
 * same doubling rule as Lua's majors, applied to tensor memory). */
#define GC_FULL_MIN ((size_t)64 << 20)

static void gc_full(lua_State *L, LuState *st) {
    st->gc_debt = 0;
    st->gc_since_full = 0;
    lua_gc(L, LUA_GCCOLLECT);
    st->gc_full_base = tensor_live_bytes();
}

void lu_gc_account(lua_State *L, size_t n) {
    static const size_t step = 256 * 1024;
    LuState *st = lu_state(L);
    st->gc_debt += n;
    st->gc_since_full += n;
    st->gc_pushed += n;
    if (st->gc_since_full >= GC_FULL_MIN && st->gc_since_full >= st->gc_full_base) {
        gc_full(L, st);
        return;
    }
    if (st->gc_debt >= step) {
#if LUA_VERSION_NUM >= 504
        st->gc_debt = 0;
        lua_gc(L, LUA_GCSTEP, 0); /* one minor collection (generational mode) */
#else
        size_t kb = st->gc_debt / 1024; /* LuaJIT's incremental collector: work in proportion */
        st->gc_debt = 0;
        lua_gc(L, LUA_GCSTEP, (int)kb);
#endif
    }
}

/* When backward starts, most of the forward pass's tensors are referenced
 * twice: by the graph (saved for backward) and by Lua userdata that are
 * already garbage (locals of returned functions) but may be old (they lived
 * through the forward pass), so only a full collection frees them. Left to
 * the rule above, every activation would stay alive to the end of backward
 * next to the gradients being made (GPT-2 shape: 0.75 GB more at the peak),
 * and be freed at some point of the NEXT step, which then runs with two
 * steps' tensors in memory (more cache misses; with two processes sharing
 * the L3, both slow down) and whose allocations miss the caching allocator.
 * So backward starts with a full collection once the tensor bytes pushed
 * since the last one reach 64 MiB or GC_BACKWARD_RATIO times the Lua heap:
 * a full collection costs about a pass over the Lua heap, so it runs every
 * step where a step's tensors are large next to that heap (a small GPT:
 * ~40 MiB of tensors against ~1 MiB of heap) and every few dozen steps for
 * a tiny model, where it would cost more than the step. Each activation is
 * then freed as soon as the graph is done with it. */
#define GC_BACKWARD_RATIO 16
/* The heap counted at least this large: a script's heap is 0.07 MiB with
 * only accel loaded and about 1 MiB with an Accelerator's modules, and the
 * same loop should keep the same garbage (estimate-memory measures one). */
#define GC_HEAP_FLOOR ((size_t)2 << 20)

void lu_gc_before_backward(lua_State *L) {
    LuState *st = lu_state(L);
    size_t heap = (size_t)lua_gc(L, LUA_GCCOUNT) * 1024;
    if (heap < GC_HEAP_FLOOR) heap = GC_HEAP_FLOOR;
    if (st->gc_since_full >= GC_FULL_MIN || st->gc_since_full >= GC_BACKWARD_RATIO * heap) gc_full(L, st);
}

/* Activation checkpointing, after a checkpointed forward and after each
 * recompute's backward: their tensors are all garbage then, and freeing them
 * is the point. A full collection runs once the tensor bytes pushed since
 * the last one reach the Lua heap's size, so it costs at most about a pass
 * over as many bytes as the tensors it frees. */
void lu_gc_after_checkpoint(lua_State *L) {
    LuState *st = lu_state(L);
    if (st->gc_since_full >= (size_t)lua_gc(L, LUA_GCCOUNT) * 1024) gc_full(L, st);
}

void lu_push_tensor(lua_State *L, Tensor *t) {
    if (!t) lu_core_error(L);
    TensorUD *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->t = t;
    lua_rawgetp(L, LUA_REGISTRYINDEX, lu_state(L)->tensor_mt);
    lua_setmetatable(L, -2);
    lu_gc_account(L, sizeof(Tensor) + (t->is_view ? 0 : (size_t)t->numel * dtype_size(t->dtype)));
}

/* A weak table maps core tensors to their userdata, so t.grad == t.grad. */
void lu_push_existing(lua_State *L, Tensor *t) {
    lua_getfield(L, LUA_REGISTRYINDEX, "accel.twins");
    lua_rawgetp(L, -1, t);
    TensorUD *u = lua_touserdata(L, -1);
    if (u && u->t == t) {
        lua_remove(L, -2);
        return;
    }
    lua_pop(L, 1);
    lu_push_tensor(L, tensor_retain(t));
    lua_pushvalue(L, -1);
    lua_rawsetp(L, -3, t);
    lua_remove(L, -2);
}

/* ---- dims and shapes ---- */

/* Op names by function (registry table OP_NAMES): the names each accel C
 * function was registered under, so an error names the op as the user
 * wrote it (t.ndimension, an alias) or, when the call site does not show
 * it (pcall(accel.zeros, ...), local f = accel.zeros, a tail call), as it
 * was first registered. OP_NAMES[key] = {first name, [name] = true, ...}. */
#define OP_NAMES "accel.op_names"

/* Pushes the key of the function at fn in OP_NAMES: a C function without
 * upvalues by its address (LuaJIT makes a new closure at every push of
 * one, Lua 5.4 pushes the same value), any other function itself. */
static void push_op_key(lua_State *L, int fn) {
    union { lua_CFunction f; void *p; } c = {.f = lua_tocfunction(L, fn)};
    if (c.f && lua_getupvalue(L, fn, 1) == NULL) {
        lua_pushlightuserdata(L, c.p);
        return;
    }
    if (c.f) lua_pop(L, 1); /* the upvalue */
    lua_pushvalue(L, fn);
}

/* Pushes OP_NAMES[key of fn] (a table, made when missing and create). */
static bool push_op_names(lua_State *L, int fn, bool create) {
    fn = lua_absindex(L, fn);
    lua_getfield(L, LUA_REGISTRYINDEX, OP_NAMES);
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        if (!create) return false;
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, OP_NAMES);
    }
    push_op_key(L, fn);
    lua_rawget(L, -2);
    if (lua_istable(L, -1) || !create) {
        lua_remove(L, -2);
        if (lua_istable(L, -1)) return true;
        lua_pop(L, 1);
        return false;
    }
    lua_pop(L, 1);
    lua_newtable(L);
    push_op_key(L, fn);
    lua_pushvalue(L, -2);
    lua_rawset(L, -4); /* OP_NAMES[key] = the new table */
    lua_remove(L, -2);
    return true;
}

void lu_name_op(lua_State *L, int fn, const char *name) {
    push_op_names(L, fn, true);
    if (lua_rawlen(L, -1) == 0) {
        lua_pushstring(L, name);
        lua_rawseti(L, -2, 1);
    }
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, name);
    lua_pop(L, 1);
}

void lu_name_ops(lua_State *L, int t, const luaL_Reg *fns) {
    t = lua_absindex(L, t);
    for (; fns->name != NULL; fns++) {
        lua_getfield(L, t, fns->name);
        if (lua_isfunction(L, -1)) lu_name_op(L, -1, fns->name);
        lua_pop(L, 1);
    }
}

/* The running C function's op name: as the call wrote it when that is one
 * of its registered names, else its first registered name, else what Lua
 * knows of the call (NULL when none). Registry strings stay alive. */
static const char *running_op(lua_State *L) {
    lua_Debug ar;
    if (!lua_getstack(L, 0, &ar) || !lua_getinfo(L, "nf", &ar)) return NULL;
    const char *name = ar.name;
    if (push_op_names(L, -1, false)) {
        bool written = false;
        if (ar.name) {
            lua_getfield(L, -1, ar.name);
            written = lua_toboolean(L, -1);
            lua_pop(L, 1);
        }
        lua_rawgeti(L, -1, 1);
        if (!written && lua_isstring(L, -1)) name = lua_tostring(L, -1);
        lua_pop(L, 2);
    }
    lua_pop(L, 1); /* the function */
    return name;
}

/* "name: " of the running C function when it is known. */
static const char *op_prefix(lua_State *L, char *buf, size_t n) {
    const char *name = running_op(L);
    buf[0] = 0;
    if (name) snprintf(buf, n, "%s: ", name);
    return buf;
}

#if LUA_VERSION_NUM < 504
void lua_compat_pushinteger(lua_State *L, lua_Integer n) {
    char op[64];
    if (n > LUA_COMPAT_EXACT_INT || n < -LUA_COMPAT_EXACT_INT)
        lu_error(L, "%sinteger %lld does not fit a LuaJIT number (doubles hold integers up to 2^53 exactly); "
                 "the Lua 5.4 build holds it", op_prefix(L, op, sizeof op), (long long)n);
    lua_pushnumber(L, (lua_Number)n);
}
#endif

int lu_dim_value(lua_State *L, lua_Integer d) {
    char op[64];
    if (d == 0) lu_error(L, "%sdimension 0 is invalid: dimensions are 1-based (negative counts from the end)", op_prefix(L, op, sizeof op));
    if (d > TENSOR_MAX_DIMS || d < -TENSOR_MAX_DIMS - 1) /* beyond any tensor (and beyond int) */
        lu_error(L, "%sdimension %lld is out of range (tensors have at most %d dims)", op_prefix(L, op, sizeof op),
                 (long long)d, TENSOR_MAX_DIMS);
    return d > 0 ? (int)(d - 1) : (int)d;
}

/* The position the user wrote for stack index idx: in t:f(x), x is argument #1. */
static int user_arg(lua_State *L, int idx) {
    lua_Debug ar;
    bool method = lua_getstack(L, 0, &ar) && lua_getinfo(L, "n", &ar) && ar.namewhat && strcmp(ar.namewhat, "method") == 0;
    return method ? idx - 1 : idx;
}

int lu_dim(lua_State *L, int idx) {
    char op[64];
    if (!lua_isinteger(L, idx))
        lu_error(L, "%sbad argument #%d (integer dimension expected, got %s)", op_prefix(L, op, sizeof op),
                 user_arg(L, idx), luaL_typename(L, idx));
    return lu_dim_value(L, lua_tointeger(L, idx));
}

int lu_opt_dim(lua_State *L, int idx, const char *key, int def) {
    char op[64];
    if (!lu_is_opts(L, idx)) return def;
    lua_getfield(L, idx, key);
    if (!lua_isnil(L, -1) && !lua_isinteger(L, -1))
        lu_error(L, "%soption '%s' must be an integer dimension, got %s", op_prefix(L, op, sizeof op), key,
                 lua_type(L, -1) == LUA_TNUMBER ? "a non-integer number" : luaL_typename(L, -1));
    int d = lua_isnil(L, -1) ? def : lu_dim_value(L, lua_tointeger(L, -1));
    lua_pop(L, 1);
    return d;
}

int lu_dims(lua_State *L, int idx, int *out) {
    char op[64];
    if (lua_isinteger(L, idx)) {
        out[0] = lu_dim(L, idx);
        return 1;
    }
    if (!lua_istable(L, idx))
        lu_error(L, "%sbad argument #%d (dimension or list of dimensions expected, got %s)", op_prefix(L, op, sizeof op),
                 user_arg(L, idx), luaL_typename(L, idx));
    int n = (int)lua_rawlen(L, idx);
    if (n > TENSOR_MAX_DIMS) lu_error(L, "too many dimensions (%d)", n);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, idx, i + 1);
        if (!lua_isinteger(L, -1)) lu_error(L, "dimension list entry %d is not an integer", i + 1);
        out[i] = lu_dim_value(L, lua_tointeger(L, -1));
        lua_pop(L, 1);
    }
    return n;
}

bool lu_to_int64(lua_State *L, int idx, int64_t *out) {
    if (lua_isinteger(L, idx)) return *out = lua_tointeger(L, idx), true;
    if (lua_type(L, idx) != LUA_TNUMBER) return false;
    lua_Number v = lua_tonumber(L, idx);
    if (!(v >= -0x1p63 && v < 0x1p63 && v == floor(v))) return false;
    *out = (int64_t)v;
    return true;
}

/* A size: a Lua integer, or a float with an integral value in int64's
 * range (2^32 is a float in Lua 5.4; 2^63 and 1e30 are not sizes). */
static int64_t check_size(lua_State *L, int idx, int pos) {
    int64_t v;
    if (lu_to_int64(L, idx, &v)) return v;
    if (lua_type(L, idx) == LUA_TNUMBER)
        lu_error(L, "size %d (%.17g) is not an integer in int64's range", pos, (double)lua_tonumber(L, idx));
    return lu_error(L, "size %d must be an integer, got %s", pos, luaL_typename(L, idx));
}

int lu_shape(lua_State *L, int idx, int64_t *shape, int *next) {
    int nd = 0;
    if (lu_is_dtype(L, idx)) /* accel.zeros(accel.int64): not an empty shape */
        lu_error(L, "bad argument #%d (a shape expected, got a dtype; it goes in the options: {dtype = ...})", idx);
    /* An accel.Size (t:size() / t.shape, empty for a 0-dim tensor) or an empty
     * {} followed by an options table is a shape, not options. */
    bool size_mt = false;
    if (lua_istable(L, idx) && lua_getmetatable(L, idx)) {
        luaL_getmetatable(L, "accel.Size");
        size_mt = lua_rawequal(L, -1, -2);
        lua_pop(L, 2);
    }
    bool empty = false; /* {}: the 0-dim shape (an options table has a key) */
    if (lua_istable(L, idx) && lu_is_opts(L, idx)) {
        lua_pushnil(L);
        empty = lua_next(L, idx) == 0;
        if (!empty) lua_pop(L, 2);
    }
    if (lua_istable(L, idx) && (size_mt || empty || !lu_is_opts(L, idx))) {
        int n = (int)lua_rawlen(L, idx);
        if (n > TENSOR_MAX_DIMS) lu_error(L, "shape has %d dims; at most %d are supported", n, TENSOR_MAX_DIMS);
        for (int i = 0; i < n; i++) {
            lua_rawgeti(L, idx, i + 1);
            shape[nd++] = check_size(L, -1, i + 1);
            lua_pop(L, 1);
        }
        *next = idx + 1;
        return nd;
    }
    while (lua_type(L, idx) == LUA_TNUMBER) {
        if (nd == TENSOR_MAX_DIMS) lu_error(L, "at most %d dims are supported", TENSOR_MAX_DIMS);
        shape[nd] = check_size(L, idx, nd + 1);
        nd++, idx++;
    }
    *next = idx;
    return nd;
}

bool lu_dtype_limits(DType dt, double *lo, double *hi) {
    switch (dt) {
    case DT_BOOL: *lo = 0, *hi = 1; return true;
    case DT_U8: *lo = 0, *hi = 255; return true;
    case DT_I32: *lo = -2147483648.0, *hi = 2147483647.0; return true;
    case DT_I64: *lo = -9223372036854775808.0, *hi = 9223372036854774784.0; return true; /* the largest double below 2^63 */
    case DT_F16: *lo = -65504.0, *hi = 65504.0; return true;
    case DT_BF16: *lo = -3.3895313892515355e38, *hi = 3.3895313892515355e38; return true;
    case DT_F32: *lo = -3.4028234663852886e38, *hi = 3.4028234663852886e38; return true;
    case DT_F8E4M3: *lo = -448.0, *hi = 448.0; return true;
    case DT_F8E5M2: *lo = -57344.0, *hi = 57344.0; return true;
    default: return false; /* float64 */
    }
}

void lu_check_fill_value(lua_State *L, double v, DType dt, const char *op) {
    double lo, hi;
    if (dt == DT_BOOL || !lu_dtype_limits(dt, &lo, &hi)) return;
    if (dt == DT_U8 && v == floor(v)) lo = -255; /* torch wraps whole negatives: -1 -> 255 */
    bool in_range = v >= lo && v <= hi;
    /* inf / nan are values of a float dtype (float8_e4m3fn has no inf) */
    if (dtype_is_float(dt) && (isnan(v) || (isinf(v) && dt != DT_F8E4M3))) in_range = true;
    if (!in_range && isnan(v)) lu_error(L, "%s: value nan cannot be converted to type %s without overflow", op, dtype_name(dt));
    if (!in_range)
        lu_error(L, "%s: value %.15g cannot be converted to type %s without overflow", op, v, dtype_name(dt));
}

int lu_sizes(lua_State *L, int idx, int64_t *shape, int *next) {
    int nd = lu_shape(L, idx, shape, next);
    /* an explicit nil where a size or the options could be (`zeros(4, cfg.hiden)`):
     * an error, not a shorter shape with the options after it dropped */
    if (lua_isnil(L, *next) && lua_gettop(L) >= *next)
        lu_error(L, "size %d is nil: sizes must be whole numbers (a misspelt field?)", nd + 1);
    return nd;
}

int lu_string_map(lua_State *L, int idx, const char ***keys, const char ***vals, const char *what) {
    idx = lua_absindex(L, idx);
    int n = 0;
    if (lua_istable(L, idx)) {
        lua_pushnil(L);
        while (lua_next(L, idx)) {
            if (lua_type(L, -2) != LUA_TSTRING)
                lu_error(L, "%s: metadata must map strings to strings (a %s key)", what, luaL_typename(L, -2));
            if (lua_type(L, -1) != LUA_TSTRING)
                lu_error(L, "%s: metadata must map strings to strings (%s is a %s)", what, lua_tostring(L, -2),
                         luaL_typename(L, -1));
            n++;
            lua_pop(L, 1);
        }
    }
    const char **arr = lua_newuserdatauv(L, sizeof(char *) * (size_t)(2 * n + 1), 0);
    *keys = arr, *vals = arr + n;
    if (n == 0) return 0;
    int k = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        arr[k] = lua_tostring(L, -2), arr[n + k] = lua_tostring(L, -1);
        k++;
        lua_pop(L, 1);
    }
    return n;
}

/* An options table: a plain table (not a tensor, dtype or device) with no [1]. */
bool lu_is_opts(lua_State *L, int idx) {
    if (idx == 0 || lua_type(L, idx) != LUA_TTABLE || lu_is_dtype(L, idx) || lu_is_device(L, idx)) return false;
    bool seq = lua_rawgeti(L, idx, 1) != LUA_TNIL;
    lua_pop(L, 1);
    if (seq) return false;
    lua_pushnil(L);
    if (lua_next(L, idx) == 0) return true; /* {} */
    lua_pop(L, 2);
    return true;
}

/* Whether word is one of the space-separated words of list. */
static bool word_in(const char *word, const char *list) {
    size_t n = strlen(word);
    for (const char *p = list; *p;) {
        size_t m = strcspn(p, " ");
        if (m == n && strncmp(p, word, n) == 0) return true;
        p += m + (p[m] == ' ');
    }
    return false;
}

/* The first key of the options table at idx that is not in keys (pushed;
 * a non-string key as its type name), or false when there is none or no
 * options table (nothing pushed). */
static bool push_unknown_key(lua_State *L, int idx, const char *keys) {
    if (!lu_is_opts(L, idx)) return false; /* also idx 0 */
    idx = lua_absindex(L, idx);
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING || !word_in(lua_tostring(L, -1), keys)) {
            if (lua_type(L, -1) != LUA_TSTRING) lua_pushstring(L, luaL_typename(L, -1)), lua_replace(L, -2);
            return true;
        }
    }
    return false;
}

static int unknown_option(lua_State *L, const char *fn, const char *keys) {
    const char *k = lua_tostring(L, -1);
    if (*keys == '\0') return lu_error(L, "%s: unknown option '%s' (it takes no options)", fn, k);
    return lu_error(L, "%s: unknown option '%s' (options: %s)", fn, k, keys);
}

void lu_check_opts(lua_State *L, int idx, const char *fn, const char *keys) {
    if (push_unknown_key(L, idx, keys)) unknown_option(L, fn, keys);
}

/* The name is looked up only for the error: lua_getinfo is not free. */
void lu_check_call_opts(lua_State *L, int idx, const char *keys) {
    if (!push_unknown_key(L, idx, keys)) return;
    const char *fn = running_op(L);
    unknown_option(L, fn ? fn : "accel", keys);
}

void lu_check_no_more_args(lua_State *L, int idx) {
    for (int top = lua_gettop(L); idx <= top; idx++) {
        lu_check_call_opts(L, idx, ""); /* {foo = 1}: "unknown option 'foo'" */
        if (lua_isnil(L, idx) || lu_is_opts(L, idx)) continue;
        char op[64];
        lu_error(L, "%sunexpected argument #%d (%s): it takes no more arguments", op_prefix(L, op, sizeof op),
                 user_arg(L, idx), luaL_typename(L, idx));
    }
}

void lu_check_no_more_after_opts(lua_State *L, int idx) {
    lu_check_no_more_args(L, lu_is_opts(L, idx) ? idx + 1 : idx);
}

int lu_arg_type_error(lua_State *L, int idx, const char *what) {
    char op[64];
    return lu_error(L, "%sargument #%d should be %s, got %s", op_prefix(L, op, sizeof op), user_arg(L, idx), what,
                    lu_is_dtype(L, idx) ? "a dtype" : luaL_typename(L, idx));
}

int lu_dim_keyword(lua_State *L, int idx, const char *keys) {
    if (!lu_is_opts(L, idx)) return 0;
    lu_check_call_opts(L, idx, keys);
    lua_pushvalue(L, idx);
    lua_getfield(L, idx, "dim");
    lua_replace(L, idx);
    return lua_gettop(L);
}

bool lu_opt_bool(lua_State *L, int idx, const char *key, bool def) {
    if (!lu_is_opts(L, idx)) return def;
    lua_getfield(L, idx, key);
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1)) { /* torch's TypeError: "yes" or 1 is no flag */
        char op[64];
        lu_error(L, "%sargument '%s' must be a boolean, got %s", op_prefix(L, op, sizeof op), key, luaL_typename(L, -1));
    }
    bool v = lua_isnil(L, -1) ? def : lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

double lu_opt_number(lua_State *L, int idx, const char *key, double def) {
    if (!lu_is_opts(L, idx)) return def;
    lua_getfield(L, idx, key);
    double v = def;
    if (!lua_isnil(L, -1)) {
        if (!lua_isnumber(L, -1)) lu_error(L, "option '%s' must be a number, got %s", key, luaL_typename(L, -1));
        v = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

/* ---- dtype and device objects ---- */

bool lu_is_dtype(lua_State *L, int idx) {
    if (lua_type(L, idx) != LUA_TTABLE) return false;
    bool is = lua_getfield(L, idx, "__dtype") == LUA_TNUMBER;
    lua_pop(L, 1);
    return is;
}

int lu_check_dtype(lua_State *L, int idx) {
    if (lu_is_dtype(L, idx)) {
        lua_getfield(L, idx, "__dtype");
        int dt = (int)lua_tointeger(L, -1);
        lua_pop(L, 1);
        return dt;
    }
    if (lua_type(L, idx) == LUA_TSTRING) {
        int dt = dtype_from_name(lua_tostring(L, idx));
        if (dt < 0) lu_error(L, "unknown dtype '%s' (expected e.g. accel.float32, \"float32\", \"bf16\")", lua_tostring(L, idx));
        return dt;
    }
    return lu_error(L, "dtype expected (accel.float32, ... or a name), got %s", luaL_typename(L, idx));
}

int lu_opt_dtype(lua_State *L, int idx, const char *key, int def) {
    if (!lu_is_opts(L, idx)) return def;
    lua_getfield(L, idx, key);
    int dt = lua_isnil(L, -1) ? def : lu_check_dtype(L, lua_gettop(L));
    lua_pop(L, 1);
    return dt;
}

void lu_push_dtype(lua_State *L, DType dt) {
    lua_getfield(L, LUA_REGISTRYINDEX, "accel.dtypes");
    lua_rawgeti(L, -1, (lua_Integer)dt + 1);
    lua_remove(L, -2);
}

bool lu_is_device(lua_State *L, int idx) { return luaL_testudata(L, idx, "accel.Device") != NULL; }

void lu_push_device(lua_State *L, Device d) {
    Device *u = lua_newuserdatauv(L, sizeof *u, 0);
    *u = d;
    luaL_setmetatable(L, "accel.Device");
}

Device lu_check_device(lua_State *L, int idx) {
    if (lu_is_device(L, idx)) return *(Device *)lua_touserdata(L, idx);
    Device d = {DEV_CPU, 0};
    if (lua_type(L, idx) != LUA_TSTRING) lu_error(L, "device expected (\"cpu\", \"cuda:0\" or accel.device(...)), got %s", luaL_typename(L, idx));
    if (device_parse(lua_tostring(L, idx), &d) < 0) lu_core_error(L);
    return d;
}

/* The device creation functions use when none is given: set by
 * accel.set_default_device, else ACCEL_LUA_DEVICE (read on first use), else
 * the CPU. */
static Device default_device;
static bool default_device_known;

Device lu_default_device(lua_State *L) {
    if (default_device_known) return default_device;
    const char *env = getenv("ACCEL_LUA_DEVICE");
    Device d = {DEV_CPU, 0};
    if (env && *env && (device_parse(env, &d) < 0 || !backend_for(d)))
        lu_error(L, "ACCEL_LUA_DEVICE=%s: %s", env, accel_last_error());
    default_device = d, default_device_known = true;
    return d;
}

void lu_set_default_device(lua_State *L, int idx) {
    if (lua_isnoneornil(L, idx)) { /* reset, as torch.set_default_device(None) */
        default_device_known = false;
        return;
    }
    Device d = lu_check_device(L, idx);
    if (!backend_for(d)) lu_core_error(L);
    default_device = d, default_device_known = true;
}

Device lu_opt_device(lua_State *L, int idx, const char *key) {
    Device d = lu_default_device(L);
    if (!lu_is_opts(L, idx)) return d;
    lua_getfield(L, idx, key);
    if (!lua_isnil(L, -1)) d = lu_check_device(L, lua_gettop(L));
    lua_pop(L, 1);
    if (d.type != DEV_CPU && !backend_for(d)) lu_core_error(L);
    return d;
}

void lu_check_tensor_or_scalar(lua_State *L, int idx) {
    char op[64];
    if (!lu_to_tensor(L, idx) && lua_type(L, idx) != LUA_TNUMBER && !lua_isboolean(L, idx))
        lu_error(L, "%sbad argument #%d (tensor or number expected, got %s)", op_prefix(L, op, sizeof op), idx,
                 luaL_typename(L, idx));
}

bool lu_is_wide_integer(lua_State *L, int idx) {
    if (!lua_isinteger(L, idx)) return false;
    lua_Integer v = lua_tointeger(L, idx);
    return v > ((lua_Integer)1 << 53) || v < -((lua_Integer)1 << 53);
}

Tensor *lu_int64_scalar(lua_State *L, int idx, Device d) {
    int64_t v = (int64_t)lua_tointeger(L, idx);
    Tensor *host = tensor_from_data(&v, NULL, 0, DT_I64);
    Tensor *s = host ? tensor_to(host, d) : NULL;
    tensor_release(host);
    if (!s) lu_core_error(L);
    return s;
}

Tensor *lu_tensor_or_scalar(lua_State *L, int idx, const Tensor *like) {
    lu_check_tensor_or_scalar(L, idx);
    Tensor *t = lu_to_tensor(L, idx);
    if (t) return tensor_retain(t);
    if (lu_is_wide_integer(L, idx) && !(like && dtype_is_float(like->dtype)))
        return lu_int64_scalar(L, idx, like ? like->device : lu_default_device(L));
    if (lua_type(L, idx) == LUA_TNUMBER) {
        DType dt = like && dtype_is_float(like->dtype) ? like->dtype : (lua_isinteger(L, idx) ? DT_I64 : DT_F32);
        Tensor *s = tensor_full(NULL, 0, lua_tonumber(L, idx), dt, like ? like->device : lu_default_device(L));
        if (!s) lu_core_error(L);
        return s;
    }
    return tensor_full(NULL, 0, lua_toboolean(L, idx), DT_BOOL, like ? like->device : lu_default_device(L));
}

/* The operand at idx of where beside the tensor like: an integer number
 * beside an integer tensor is a 0-dim tensor of like's dtype, which must
 * hold it (torch's "without overflow"; uint8 wraps -1 to 255), so that, as
 * torch's wrapped number, it never widens like's dtype even when like is
 * 0-dim too (where(c, 3, uint8 0-dim) is uint8). */
static bool where_int_operand(lua_State *L, int idx, const Tensor *like) {
    if (!like || !lua_isinteger(L, idx) || dtype_is_float(like->dtype) || like->dtype == DT_BOOL) return false;
    lu_check_fill_value(L, (double)lua_tointeger(L, idx), like->dtype, "where");
    return true;
}

static Tensor *where_operand(lua_State *L, int idx, const Tensor *like, bool as_like) {
    Tensor *t = lu_tensor_or_scalar(L, idx, like);
    return as_like && t ? tensor_to_dtype_owned(t, like->dtype) : t;
}

Tensor *lu_where(lua_State *L, Tensor *cond, int ia, int ib) {
    lu_check_tensor_or_scalar(L, ia);
    lu_check_tensor_or_scalar(L, ib);
    Tensor *like = lu_to_tensor(L, ia) ? lu_to_tensor(L, ia) : lu_to_tensor(L, ib);
    /* both operands checked before either is made: a refusal leaks nothing */
    bool a_int = where_int_operand(L, ia, like), b_int = where_int_operand(L, ib, like);
    Tensor *a = where_operand(L, ia, like, a_int);
    Tensor *b = a ? where_operand(L, ib, like, b_int) : NULL;
    Tensor *r = a && b ? op_where(cond, a, b) : NULL;
    tensor_release(a), tensor_release(b);
    if (!a || !b) lu_core_error(L);
    return r;
}

/* ---- device metatable ---- */

static int device_tostring(lua_State *L) {
    char buf[32];
    lua_pushstring(L, device_str(*(Device *)luaL_checkudata(L, 1, "accel.Device"), buf, sizeof buf));
    return 1;
}

static int device_eq(lua_State *L) {
    Device *a = luaL_testudata(L, 1, "accel.Device"), *b = luaL_testudata(L, 2, "accel.Device");
    lua_pushboolean(L, a && b && a->type == b->type && a->index == b->index);
    return 1;
}

static int device_index(lua_State *L) {
    Device *d = luaL_checkudata(L, 1, "accel.Device");
    const char *k = luaL_checkstring(L, 2);
    if (strcmp(k, "type") == 0) lua_pushstring(L, d->type == DEV_CPU ? "cpu" : d->type == DEV_SIM ? "sim" : "cuda");
    else if (strcmp(k, "index") == 0) lua_pushinteger(L, d->index);
    else lua_pushnil(L);
    return 1;
}

/* accel.device("cuda:N") or accel.device("cuda", N) (torch.device's two
 * forms) checks that the GPU exists (a clear error without one, or in a
 * build without CUDA). cpu and sim have one device, index 0. */
int lu_device_new(lua_State *L) {
    Device d = lu_check_device(L, 1);
    if (!lua_isnoneornil(L, 2)) {
        const char *s = lua_type(L, 1) == LUA_TSTRING ? lua_tostring(L, 1) : NULL;
        if (!s || strchr(s, ':'))
            lu_error(L, "accel.device(type, index): type must be a device type without an index "
                        "(\"cpu\", \"cuda\" or \"sim\") when an index is given, got %s",
                     s ? s : "a device object");
        double v = lua_type(L, 2) == LUA_TNUMBER ? lua_tonumber(L, 2) : -1;
        if (lua_type(L, 2) != LUA_TNUMBER || v < 0 || v != floor(v))
            lu_error(L, "accel.device(\"%s\", index): index must be an integer >= 0, got %s", s,
                     lua_type(L, 2) == LUA_TNUMBER ? lua_pushfstring(L, "%f", v) : luaL_typename(L, 2));
        if (v > INT_MAX) lu_error(L, "accel.device(\"%s\", %.0f): index too large", s, v);
        lua_Integer idx = (lua_Integer)v;
        if (idx > 0 && d.type != DEV_CUDA)
            lu_error(L, "accel.device(\"%s\", %lld): %s has one device, index 0", s, (long long)idx, s);
        d.index = (int)idx;
    }
    if (d.type == DEV_CUDA && !backend_for(d)) lu_core_error(L);
    lu_push_device(L, d);
    return 1;
}

void lu_open_device(lua_State *L) {
    static const luaL_Reg meta[] = {
        {"__tostring", device_tostring}, {"__eq", device_eq}, {"__index", device_index}, {NULL, NULL}};
    luaL_newmetatable(L, "accel.Device");
    luaL_setfuncs(L, meta, 0);
    lua_pop(L, 1);
}

int lu_push_clock(lua_State *L, clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
    return 1;
}

void lu_new_class(lua_State *L, const char *mt, const luaL_Reg *methods, lua_CFunction gc, lua_CFunction tostring) {
    const luaL_Reg meta[] = {{"__gc", gc}, {"__tostring", tostring}, {NULL, NULL}};
    luaL_newmetatable(L, mt);
    luaL_setfuncs(L, meta, 0);
    lua_newtable(L);
    luaL_setfuncs(L, methods, 0);
    lu_name_ops(L, -1, methods);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
}

/* Add fns to accel._C (the module at index m must already hold _C). */
void lu_register_c(lua_State *L, int m, const luaL_Reg *fns) {
    lua_getfield(L, m, "_C");
    luaL_setfuncs(L, fns, 0);
    lu_name_ops(L, -1, fns);
    lua_pop(L, 1);
}
