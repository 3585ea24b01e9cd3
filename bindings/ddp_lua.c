/* ddp_lua.c: DDP's gradient reducer (core/dist/ddp.h) as a Lua userdata,
 * created by accel._C.ddp_reducer(params, bucket_cap_mb, align, find_unused)
 * on the job's communicator. The Lua face is accel.ddp (bindings/lua/accel/
 * ddp.lua), which checks options; the Accelerator drives it. Methods:
 *   r:set_sync(on), r:sync(), r:active(), r:finalize()
 *   r:shadow()       -> a joined rank's part of the others' step (ddp_shadow_step)
 *   r:buckets()      -> list of {dtype, numel, padded, params = {i, ...}, offsets = {...}}
 *                       (params 1-based positions in the list given; offsets 0-based elements)
 *   r:bucket(b)      -> bucket b's flat buffer (a tensor sharing its memory)
 *   r:slice(i)       -> parameter i's slice of its bucket, shaped like it
 *   r:stats()        -> {syncs, hook_calls, early_launches, late_launches, missing}
 *   r:close()        -> removes the hooks and frees the buffers (also done by the GC) */
#include "lua_util.h"
#include "../core/dist/ddp.h"
#include <stdio.h>

#define REDUCER_MT "accel.ddp.Reducer"

typedef struct {
    DdpReducer *r; /* NULL once closed */
} ReducerUD;

static DdpReducer *check_reducer(lua_State *L) {
    ReducerUD *u = luaL_checkudata(L, 1, REDUCER_MT);
    if (!u->r) lu_error(L, "ddp: the reducer was closed");
    return u->r;
}

/* ddp_reducer(params, bucket_cap_mb, align, find_unused, finalize_in_backward) */
static int l_reducer(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    double cap = luaL_optnumber(L, 2, 25.0);
    lua_Integer align = luaL_optinteger(L, 3, 1);
    bool find_unused = lua_toboolean(L, 4), finalize_in_backward = lua_toboolean(L, 5);
    int n = (int)luaL_len(L, 1);
    Tensor **ps = lua_newuserdatauv(L, sizeof(Tensor *) * (size_t)(n > 0 ? n : 1), 0);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1);
        ps[i] = lu_to_tensor(L, -1);
        if (!ps[i]) lu_error(L, "ddp: parameter %d must be a tensor, got %s", i + 1, luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    DistComm *c = dist_world();
    if (!c) return lu_core_error(L);
    ReducerUD *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->r = NULL;
    luaL_setmetatable(L, REDUCER_MT);
    DdpOptions o = {.bucket_cap_mb = cap, .align = align, .find_unused = find_unused,
                    .finalize_at_pass_end = finalize_in_backward};
    u->r = ddp_reducer_new(c, ps, n, &o);
    if (!u->r) return lu_core_error(L);
    return 1;
}

static int r_set_sync(lua_State *L) {
    ddp_set_sync(check_reducer(L), lua_toboolean(L, 2));
    return 0;
}

static int r_sync(lua_State *L) {
    lua_pushboolean(L, ddp_sync(check_reducer(L)));
    return 1;
}

static int r_active(lua_State *L) {
    lua_pushboolean(L, ddp_active(check_reducer(L)));
    return 1;
}

static int r_finalize(lua_State *L) {
    if (ddp_finalize(check_reducer(L))) return lu_core_error(L);
    return 0;
}

static int r_shadow(lua_State *L) {
    if (ddp_shadow_step(check_reducer(L))) return lu_core_error(L);
    return 0;
}

static void set_int(lua_State *L, const char *k, lua_Integer v) {
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

static int r_buckets(lua_State *L) {
    DdpReducer *r = check_reducer(L);
    int nb = ddp_num_buckets(r);
    lua_createtable(L, nb, 0);
    for (int b = 0; b < nb; b++) {
        DdpBucketInfo bi;
        ddp_bucket_info(r, b, &bi);
        lua_createtable(L, 0, 5);
        lu_push_dtype(L, bi.dtype);
        lua_setfield(L, -2, "dtype");
        set_int(L, "numel", bi.numel);
        set_int(L, "padded", bi.padded);
        lua_createtable(L, bi.n_params, 0);
        for (int k = 0; k < bi.n_params; k++) {
            lua_pushinteger(L, bi.params[k] + 1);
            lua_rawseti(L, -2, k + 1);
        }
        lua_setfield(L, -2, "params");
        lua_createtable(L, bi.n_params, 0);
        for (int k = 0; k < bi.n_params; k++) {
            lua_pushinteger(L, bi.offsets[k]);
            lua_rawseti(L, -2, k + 1);
        }
        lua_setfield(L, -2, "offsets");
        lua_rawseti(L, -2, b + 1);
    }
    return 1;
}

/* Argument 2 as a 0-based index into `count` things called `what`. */
static int check_index(lua_State *L, int count, const char *what) {
    lua_Integer i = luaL_checkinteger(L, 2);
    if (i < 1 || i > count) lu_error(L, "ddp: %s %lld does not exist (1..%d)", what, (long long)i, count);
    return (int)i - 1;
}

static int r_bucket(lua_State *L) {
    DdpReducer *r = check_reducer(L);
    int b = check_index(L, ddp_num_buckets(r), "bucket");
    DdpBucketInfo bi;
    ddp_bucket_info(r, b, &bi);
    lu_push_tensor(L, tensor_detach(bi.flat));
    return 1;
}

static int r_slice(lua_State *L) {
    DdpReducer *r = check_reducer(L);
    lu_push_tensor(L, tensor_detach(ddp_slice(r, check_index(L, ddp_num_params(r), "parameter"))));
    return 1;
}

static int r_stats(lua_State *L) {
    DdpStats st;
    ddp_stats(check_reducer(L), &st);
    lua_createtable(L, 0, 5);
    set_int(L, "syncs", (lua_Integer)st.syncs);
    set_int(L, "hook_calls", (lua_Integer)st.hook_calls);
    set_int(L, "early_launches", (lua_Integer)st.early_launches);
    set_int(L, "late_launches", (lua_Integer)st.late_launches);
    set_int(L, "missing", (lua_Integer)st.missing);
    return 1;
}

static int r_close(lua_State *L) {
    ReducerUD *u = luaL_checkudata(L, 1, REDUCER_MT);
    ddp_reducer_free(u->r);
    u->r = NULL;
    return 0;
}

static int r_tostring(lua_State *L) {
    ReducerUD *u = luaL_checkudata(L, 1, REDUCER_MT);
    if (!u->r) lua_pushliteral(L, "accel.ddp.Reducer(closed)");
    else lua_pushfstring(L, "accel.ddp.Reducer(%d parameters, %d buckets)", ddp_num_params(u->r), ddp_num_buckets(u->r));
    return 1;
}

void lu_open_ddp(lua_State *L, int m) {
    static const luaL_Reg methods[] = {{"set_sync", r_set_sync}, {"sync", r_sync},       {"active", r_active},
                                       {"finalize", r_finalize}, {"buckets", r_buckets}, {"bucket", r_bucket},
                                       {"slice", r_slice},       {"stats", r_stats},     {"close", r_close},
                                       {"shadow", r_shadow},
                                       {NULL, NULL}};
    lu_new_class(L, REDUCER_MT, methods, r_close, r_tostring);
    lua_getfield(L, m, "_C");
    lua_pushcfunction(L, l_reducer);
    lua_setfield(L, -2, "ddp_reducer");
    lua_pop(L, 1);
}
