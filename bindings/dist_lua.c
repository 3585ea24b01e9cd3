/* dist_lua.c: the communicator (core/dist/dist.h) in accel._C as dist_*
 * functions, and the handle userdata of non-blocking collectives
 * (accel.dist.Work: wait, test / is_completed). The Lua face users call is
 * accel.dist (bindings/lua/accel/dist.lua), which checks options and names.
 * Ranks are 0-based values, as in PyTorch and Accelerate. Each function
 * initialises the communicator on first use. Groups (accel.dist.Group:
 * sub-communicators, core/dist/dist.h dist_split): dist_group("node" |
 * "cross_node"), dist_split([group,] color, key); every collective, and
 * dist_counters, takes a group as an optional FIRST argument. */
#include "lua_util.h"
#include "../core/dist/dist.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORK_MT "accel.dist.Work"
#define GROUP_MT "accel.dist.Group"

typedef struct {
    DistWork *w;
} WorkUD;

typedef struct {
    DistComm *c; /* NULL once freed */
    bool owned;  /* from dist_split (freed by free / the GC) */
} GroupUD;

/* The group at idx (a sub-communicator), or NULL when idx holds none. */
static GroupUD *group_at(lua_State *L, int idx) { return luaL_testudata(L, idx, GROUP_MT); }

/* The communicator of a call: a Group as the first argument (removed from
 * the stack, so the others keep their positions), else the world. */
static DistComm *comm(lua_State *L) {
    GroupUD *g = group_at(L, 1);
    if (g) {
        if (!g->c) lu_error(L, "dist: the group was freed");
        DistComm *c = g->c;
        lua_remove(L, 1);
        return c;
    }
    DistComm *c = dist_world();
    if (!c) lu_core_error(L);
    return c;
}

static DistOp check_op(lua_State *L, int idx, const char *what) {
    const char *s = luaL_optstring(L, idx, "sum");
    int op = dist_op_parse(s);
    if (op < 0) lu_error(L, "%s: unknown reduction '%s' (sum, avg, mean, max, min)", what, s);
    return (DistOp)op;
}

/* A tensor argument read by a collective: contiguous (a non-contiguous one
 * is replaced at idx by a contiguous copy that Lua owns). */
static Tensor *input(lua_State *L, int idx) {
    Tensor *t = lu_check_tensor(L, idx);
    if (tensor_is_contiguous(t)) return t;
    lu_push_tensor(L, tensor_contiguous(t));
    lua_replace(L, idx);
    return lu_check_tensor(L, idx);
}

/* Pushes the output: the tensor at idx (not 0, not nil) or a new one of this shape. */
static Tensor *push_output(lua_State *L, int idx, const Tensor *in, const int64_t *shape, int nd) {
    if (idx == 0 || lua_isnil(L, idx)) lu_push_tensor(L, tensor_empty(shape, nd, in->dtype, in->device));
    else lua_pushvalue(L, idx);
    return lu_check_tensor(L, -1);
}

/* Scratch memory owned by Lua (freed by the GC even after an error). */
static void *scratch(lua_State *L, size_t n) { return lua_newuserdatauv(L, n ? n : 1, 0); }

/* Pushes a Work handle for w whose results are the `nres` values on top of
 * the stack (they become its user values, returned by wait). */
static int push_work(lua_State *L, DistWork *w, int nres) {
    if (!w) return lu_core_error(L);
    WorkUD *u = lua_newuserdatauv(L, sizeof *u, 2);
    u->w = w;
    luaL_setmetatable(L, WORK_MT);
    for (int i = 1; i <= nres; i++) {
        lua_pushvalue(L, i - nres - 2);
        lua_setiuservalue(L, -2, i);
    }
    return 1;
}

/* ---- process group ---- */

static int l_init(lua_State *L) {
    lua_pushstring(L, comm(L)->ops->name);
    return 1;
}

static void set_int(lua_State *L, const char *key, lua_Integer v) {
    lua_pushinteger(L, v);
    lua_setfield(L, -2, key);
}

static void set_str(lua_State *L, const char *key, const char *v) {
    lua_pushstring(L, v);
    lua_setfield(L, -2, key);
}

static int l_info(lua_State *L) {
    DistComm *c = comm(L);
    lua_createtable(L, 0, 5);
    set_str(L, "backend", c->ops->name);
    set_int(L, "rank", c->rank);
    set_int(L, "world_size", c->size);
    set_int(L, "local_rank", c->local_rank);
    set_int(L, "local_world_size", c->local_size);
    return 1;
}

static int l_is_initialized(lua_State *L) {
    lua_pushboolean(L, dist_is_initialized());
    return 1;
}

/* size, rank, local_rank as the launcher announced them (no MPI call). */
static int l_launched(lua_State *L) {
    int rank, local;
    lua_pushinteger(L, dist_launched_size(&rank, &local));
    lua_pushinteger(L, rank);
    lua_pushinteger(L, local);
    return 3;
}

/* ---- collectives: (args..., async) ---- */

static int l_all_reduce(lua_State *L) {
    DistComm *c = comm(L);
    Tensor *t = lu_check_tensor(L, 1);
    DistOp op = check_op(L, 2, "all_reduce");
    lua_settop(L, 3);
    if (lua_toboolean(L, 3)) {
        lua_pushvalue(L, 1);
        return push_work(L, dist_iall_reduce(c, t, op), 1);
    }
    if (dist_all_reduce(c, t, op)) return lu_core_error(L);
    lua_pushvalue(L, 1);
    return 1;
}

static int l_broadcast(lua_State *L) {
    DistComm *c = comm(L);
    Tensor *t = lu_check_tensor(L, 1);
    int root = (int)luaL_optinteger(L, 2, 0);
    lua_settop(L, 3);
    if (lua_toboolean(L, 3)) {
        lua_pushvalue(L, 1);
        return push_work(L, dist_ibroadcast(c, t, root), 1);
    }
    if (dist_broadcast(c, t, root)) return lu_core_error(L);
    lua_pushvalue(L, 1);
    return 1;
}

/* reduce_scatter(input, op, out|nil, async) */
static int l_reduce_scatter(lua_State *L) {
    DistComm *c = comm(L);
    DistOp op = check_op(L, 2, "reduce_scatter");
    lua_settop(L, 4);
    if (!lua_isnil(L, 3)) lu_check_tensor(L, 3);
    Tensor *in = input(L, 1);
    int64_t shape[TENSOR_MAX_DIMS];
    int nd;
    if (dist_reduce_scatter_shape(c, in, shape, &nd)) return lu_core_error(L);
    Tensor *out = push_output(L, 3, in, shape, nd);
    if (lua_toboolean(L, 4)) return push_work(L, dist_ireduce_scatter(c, out, in, op), 1);
    return dist_reduce_scatter(c, out, in, op) ? lu_core_error(L) : 1;
}

/* all_gather(input, out|nil, async) */
static int l_all_gather(lua_State *L) {
    DistComm *c = comm(L);
    lua_settop(L, 3);
    if (!lua_isnil(L, 2)) lu_check_tensor(L, 2);
    Tensor *in = input(L, 1);
    int64_t shape[TENSOR_MAX_DIMS];
    int nd;
    dist_all_gather_shape(c, in, shape, &nd);
    Tensor *out = push_output(L, 2, in, shape, nd);
    if (lua_toboolean(L, 3)) return push_work(L, dist_iall_gather(c, out, in), 1);
    return dist_all_gather(c, out, in) ? lu_core_error(L) : 1;
}

/* all_gather_v(input, async) -> out, counts (first-dim lengths, rank order) */
static int l_all_gather_v(lua_State *L) {
    DistComm *c = comm(L);
    lua_settop(L, 2);
    Tensor *in = input(L, 1);
    int64_t shape[TENSOR_MAX_DIMS], *counts = scratch(L, sizeof(int64_t) * (size_t)c->size);
    int nd;
    if (dist_gather_lengths(c, in, counts) || dist_all_gather_v_shape(c, in, counts, shape, &nd))
        return lu_core_error(L);
    Tensor *out = push_output(L, 0, in, shape, nd);
    lua_createtable(L, c->size, 0);
    for (int i = 0; i < c->size; i++) {
        lua_pushinteger(L, counts[i]);
        lua_rawseti(L, -2, i + 1);
    }
    if (lua_toboolean(L, 2)) return push_work(L, dist_iall_gather_v(c, out, in, counts), 2);
    return dist_all_gather_v(c, out, in, counts) ? lu_core_error(L) : 2;
}

static int l_barrier(lua_State *L) {
    DistComm *c = comm(L);
    if (lua_toboolean(L, 1)) return push_work(L, dist_ibarrier(c), 0);
    if (dist_barrier(c)) return lu_core_error(L);
    return 0;
}

/* all_gather_bytes(s) -> list of every rank's string */
static int l_all_gather_bytes(lua_State *L) {
    DistComm *c = comm(L);
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    size_t *lens = scratch(L, sizeof(size_t) * (size_t)c->size);
    char *all = dist_all_gather_bytes(c, s, n, lens);
    if (!all) return lu_core_error(L);
    lua_createtable(L, c->size, 0);
    size_t at = 0;
    for (int i = 0; i < c->size; at += lens[i], i++) {
        lua_pushlstring(L, all + at, lens[i]);
        lua_rawseti(L, -2, i + 1);
    }
    free(all);
    return 1;
}

/* broadcast_bytes(s|nil, root) -> root's string (s is read on root only) */
static int l_broadcast_bytes(lua_State *L) {
    DistComm *c = comm(L);
    int root = (int)luaL_optinteger(L, 2, 0);
    size_t n = 0, len;
    const char *s = c->rank == root ? luaL_checklstring(L, 1, &n) : NULL;
    char *r = dist_broadcast_bytes(c, s, n, root, &len);
    if (!r) return lu_core_error(L);
    lua_pushlstring(L, r, len);
    free(r);
    return 1;
}

/* ---- counters, timeout, progress ---- */

static int l_counters(lua_State *L) {
    DistStats st;
    if (group_at(L, 1)) dist_comm_stats(comm(L), &st);
    else dist_stats(&st);
    for (int which = 0; which < 2; which++) {
        lua_createtable(L, 0, DK_COUNT + 1);
        uint64_t total = 0;
        for (int k = 0; k < DK_COUNT; k++) {
            uint64_t v = which ? st.bytes[k] : st.calls[k];
            total += v;
            lua_pushinteger(L, (lua_Integer)v);
            lua_setfield(L, -2, dist_kind_name((DistKind)k));
        }
        lua_pushinteger(L, (lua_Integer)total);
        lua_setfield(L, -2, "total");
    }
    return 2;
}

static int l_reset_counters(lua_State *L) {
    (void)L;
    dist_reset_stats();
    return 0;
}

static int l_set_timeout(lua_State *L) {
    dist_set_timeout(luaL_checknumber(L, 1));
    return 0;
}

static int l_get_timeout(lua_State *L) {
    lua_pushnumber(L, dist_get_timeout());
    return 1;
}

static int l_progress(lua_State *L) {
    if (dist_is_initialized() && dist_progress(comm(L))) return lu_core_error(L);
    return 0;
}

static int l_abort(lua_State *L) {
    int code = (int)luaL_optinteger(L, 1, 1);
    DistComm *c = comm(L);
    fflush(stdout);
    fprintf(stderr, "accel-lua: rank %d: dist.abort(%d): ending the job\n", c->rank, code);
    dist_abort(c, code);
}

/* ---- Work handles ---- */

static WorkUD *check_work(lua_State *L) { return luaL_checkudata(L, 1, WORK_MT); }

/* wait() -> the collective's results (the output tensor; all_gather_v: and the counts) */
static int w_wait(lua_State *L) {
    WorkUD *u = check_work(L);
    if (dist_wait(u->w)) return lu_core_error(L);
    int n = 0;
    while (n < 2 && lua_getiuservalue(L, 1, n + 1) != LUA_TNIL) n++;
    lua_settop(L, 1 + n);
    return n;
}

static int w_test(lua_State *L) {
    int r = dist_test(check_work(L)->w);
    if (r < 0) return lu_core_error(L);
    lua_pushboolean(L, r);
    return 1;
}

static int w_gc(lua_State *L) {
    WorkUD *u = check_work(L);
    dist_work_free(u->w);
    u->w = NULL;
    return 0;
}

static int w_tostring(lua_State *L) {
    WorkUD *u = check_work(L);
    lua_pushfstring(L, "accel.dist.Work(%p)", (void *)u->w);
    return 1;
}

/* ---- groups (sub-communicators) ---- */

static int push_group(lua_State *L, DistComm *c, bool owned) {
    if (!c) return lu_core_error(L);
    GroupUD *g = lua_newuserdatauv(L, sizeof *g, 0);
    *g = (GroupUD){c, owned};
    luaL_setmetatable(L, GROUP_MT);
    return 1;
}

/* dist_group("node" | "cross_node") -> the world's cached group */
static int l_group(lua_State *L) {
    const char *kind = luaL_checkstring(L, 1);
    DistComm *w = comm(L);
    if (strcmp(kind, "node") == 0) return push_group(L, dist_node_comm(w), false);
    if (strcmp(kind, "cross_node") == 0) return push_group(L, dist_cross_node_comm(w), false);
    return lu_error(L, "dist: unknown group '%s' (node, cross_node)", kind);
}

/* dist_split([group,] color, key) -> a new group of the members with this color */
static int l_split(lua_State *L) {
    DistComm *parent = comm(L);
    int color = (int)luaL_checkinteger(L, 1), key = (int)luaL_optinteger(L, 2, parent->rank);
    return push_group(L, dist_split(parent, color, key), true);
}

static GroupUD *check_group(lua_State *L) {
    GroupUD *g = luaL_checkudata(L, 1, GROUP_MT);
    if (!g->c) lu_error(L, "dist: the group was freed");
    return g;
}

/* g:info() -> {rank, size, label, world_ranks = {...}} */
static int g_info(lua_State *L) {
    DistComm *c = check_group(L)->c;
    lua_createtable(L, 0, 4);
    set_int(L, "rank", c->rank);
    set_int(L, "size", c->size);
    set_str(L, "label", c->label);
    lua_createtable(L, c->size, 0);
    for (int q = 0; q < c->size; q++) lua_pushinteger(L, dist_comm_world_rank(c, q)), lua_rawseti(L, -2, q + 1);
    lua_setfield(L, -2, "world_ranks");
    return 1;
}

static int g_free(lua_State *L) {
    GroupUD *g = luaL_checkudata(L, 1, GROUP_MT);
    DistComm *c = g->c;
    if (!c || !g->owned) return 0;
    g->c = NULL;
    return dist_comm_free(c) ? lu_core_error(L) : 0;
}

/* The GC: as free, an error only printed (a finaliser must not raise). */
static int g_gc(lua_State *L) {
    GroupUD *g = luaL_checkudata(L, 1, GROUP_MT);
    DistComm *c = g->c;
    g->c = NULL;
    if (c && g->owned && dist_comm_free(c)) fprintf(stderr, "accel-lua: freeing a dist group: %s\n", accel_last_error());
    return 0;
}

static int g_tostring(lua_State *L) {
    GroupUD *g = luaL_checkudata(L, 1, GROUP_MT);
    if (!g->c) lua_pushliteral(L, "accel.dist.Group(freed)");
    else lua_pushfstring(L, "accel.dist.Group(%s, rank %d of %d)", g->c->label, g->c->rank, g->c->size);
    return 1;
}

static void open_group(lua_State *L) {
    static const luaL_Reg methods[] = {{"info", g_info}, {"free", g_free}, {NULL, NULL}};
    lu_new_class(L, GROUP_MT, methods, g_gc, g_tostring);
}

static void open_work(lua_State *L) {
    static const luaL_Reg methods[] = {{"wait", w_wait}, {"test", w_test}, {"is_completed", w_test}, {NULL, NULL}};
    lu_new_class(L, WORK_MT, methods, w_gc, w_tostring);
}

/* The collective watchdog names where the program called a stalled
 * collective: the user's frame on the state's main thread (collectives run
 * on it; from a coroutine, this is where the main thread resumed it). */
static void call_site(void *main_thread, char *buf, size_t n) { lu_user_site(main_thread, buf, n); }

static int forget_call_site(lua_State *L) {
    lua_compat_push_mainthread(L);
    if (dist_site_ctx() == lua_tothread(L, -1)) dist_set_site_fn(NULL, NULL);
    lua_pop(L, 1);
    return 0;
}

/* Registers call_site for this state until it closes. */
static void open_call_site(lua_State *L) {
    lua_compat_push_mainthread(L);
    dist_set_site_fn(call_site, lua_tothread(L, -1));
    lua_pop(L, 1);
    lu_at_close(L, "accel.dist_call_site", forget_call_site);
}

void lu_open_dist(lua_State *L, int m) {
    static const luaL_Reg fns[] = {
        {"dist_init", l_init}, {"dist_info", l_info}, {"dist_is_initialized", l_is_initialized},
        {"dist_launched", l_launched}, {"dist_all_reduce", l_all_reduce}, {"dist_reduce_scatter", l_reduce_scatter},
        {"dist_all_gather", l_all_gather}, {"dist_all_gather_v", l_all_gather_v}, {"dist_broadcast", l_broadcast},
        {"dist_barrier", l_barrier}, {"dist_all_gather_bytes", l_all_gather_bytes},
        {"dist_broadcast_bytes", l_broadcast_bytes}, {"dist_counters", l_counters},
        {"dist_reset_counters", l_reset_counters}, {"dist_set_timeout", l_set_timeout},
        {"dist_get_timeout", l_get_timeout}, {"dist_progress", l_progress}, {"dist_abort", l_abort},
        {"dist_group", l_group}, {"dist_split", l_split}, {NULL, NULL}};
    open_work(L);
    open_group(L);
    open_call_site(L);
    lu_register_c(L, m, fns);
}
