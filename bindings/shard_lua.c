/* shard_lua.c: the sharding engine (core/dist/shard.h) as a Lua userdata, made
 * by accel._C.shard_engine(params, unit_of, opts) on the job's
 * communicator (unit_of[i]: 1-based unit of params[i]; opts: stage,
 * bucket_cap_mb, offload_optimizer, broadcast, backward_prefetch, forward_prefetch, hybrid:
 * on the node communicator, replicated over the cross-node one, see
 * core/dist/shard.h). The Lua face is accel.shard
 * (bindings/lua/accel/shard.lua), which builds units from a wrap policy and
 * checks options. Methods (units, parameters 1-based):
 *   e:set_sync(on), e:finalize(), e:zero_grad([set_to_none = true]), e:gather_all()
 *   e:step(kind, group_of, groups)   kind "sgd" | "adam" | "adamw"; group_of[i]: the
 *                                    index into groups (param-group tables) of parameter i
 *   e:clip_grad_norm(max_norm, p, error_if_nonfinite) -> total norm;  e:unscale(factor) -> found_inf
 *   e:gather(u), e:release(u), e:gathered(u), e:pre_backward(u, t) -> t', e:prefetch(u)
 *   e:forward_begin(), e:before_forward(u)   (a model's forward, see shard_unit_forward)
 *   e:full_tensor(i, which) -> parameter i (which 0) or its state slot `which`, in full
 *   e:load_full(i, which, t), e:set_kind(kind), e:set_steps(i, n)   (loading, local)
 *   e:units() -> {{numel, padded, shard, params = {i...}, offsets = {...}}, ...}
 *   e:shard(u, which) -> this rank's shard (which -1 gradient, 0 master, 1.. state) or nil
 *   e:state_names() -> {"exp_avg", ...};  e:steps(i);  e:info();  e:stats();  e:close() */
#include "lua_util.h"
#include "../core/dist/shard.h"
#include <math.h>
#include <string.h>

#define ENGINE_MT "accel.shard.Engine"

typedef struct {
    ShardEngine *e; /* NULL once closed */
} EngineUD;

static ShardEngine *check_engine(lua_State *L) {
    EngineUD *u = luaL_checkudata(L, 1, ENGINE_MT);
    if (!u->e) lu_error(L, "shard: the engine was closed");
    return u->e;
}

/* Field key of the table at idx: a number (def when nil). */
static double opt_number(lua_State *L, int idx, const char *key, double def) {
    int t = lua_getfield(L, idx, key);
    double v = def;
    if (t != LUA_TNIL) {
        if (!lua_isnumber(L, -1)) lu_error(L, "shard: option '%s' must be a number, got %s", key, luaL_typename(L, -1));
        v = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

static bool opt_bool(lua_State *L, int idx, const char *key) {
    lua_getfield(L, idx, key);
    bool v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* List item i (1-based) of the table at idx as an integer in [lo, hi]. */
static int list_int(lua_State *L, int idx, int i, int lo, int hi, const char *what) {
    lua_rawgeti(L, idx, i);
    lua_Integer v = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : lo - 1;
    lua_pop(L, 1);
    if (v < lo || v > hi) lu_error(L, "shard: %s[%d] must be an integer in %d..%d", what, i, lo, hi);
    return (int)v;
}

/* shard_engine(params, unit_of, opts) */
static int l_engine(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    int n = (int)lua_rawlen(L, 1), nu = 0;
    if ((int)lua_rawlen(L, 2) != n) lu_error(L, "shard: unit_of must have one entry per parameter");
    Tensor **ps = lua_newuserdatauv(L, sizeof(Tensor *) * (size_t)(n > 0 ? n : 1), 0);
    int *unit_of = lua_newuserdatauv(L, sizeof(int) * (size_t)(n > 0 ? n : 1), 0);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1);
        ps[i] = lu_to_tensor(L, -1);
        if (!ps[i]) lu_error(L, "shard: parameter %d must be a tensor, got %s", i + 1, luaL_typename(L, -1));
        lua_pop(L, 1);
        unit_of[i] = list_int(L, 2, i + 1, 1, n, "unit_of") - 1;
        if (unit_of[i] + 1 > nu) nu = unit_of[i] + 1;
    }
    ShardOptions o = {.stage = (int)opt_number(L, 3, "stage", 0), .bucket_cap_mb = opt_number(L, 3, "bucket_cap_mb", 25),
                      .offload_optimizer = opt_bool(L, 3, "offload_optimizer"), .broadcast = opt_bool(L, 3, "broadcast"),
                      .backward_prefetch = opt_bool(L, 3, "backward_prefetch"),
                      .forward_prefetch = opt_bool(L, 3, "forward_prefetch")};
    DistComm *c = dist_world();
    if (!c || (opt_bool(L, 3, "hybrid") && shard_hybrid_comms(c, &c, &o.replicate))) return lu_core_error(L);
    EngineUD *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->e = NULL;
    luaL_setmetatable(L, ENGINE_MT);
    u->e = shard_engine_new(c, ps, n, unit_of, nu, &o);
    if (!u->e) return lu_core_error(L);
    return 1;
}

static int rc_or_error(lua_State *L, int rc) {
    if (rc) return lu_core_error(L);
    return 0;
}

static int e_set_sync(lua_State *L) {
    shard_set_sync(check_engine(L), lua_toboolean(L, 2));
    return 0;
}

static int e_finalize(lua_State *L) { return rc_or_error(L, shard_finalize(check_engine(L))); }
static int e_zero_grad(lua_State *L) {
    return rc_or_error(L, shard_zero_grad(check_engine(L), lua_isnone(L, 2) || lua_toboolean(L, 2)));
}
static int e_gather_all(lua_State *L) { return rc_or_error(L, shard_gather_all(check_engine(L))); }

/* groups[g].betas[k] */
static double group_beta(lua_State *L, int group, int k, double def) {
    if (lua_getfield(L, group, "betas") != LUA_TTABLE) {
        lua_pop(L, 1);
        return def;
    }
    lua_rawgeti(L, -1, k);
    double v = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : def;
    lua_pop(L, 2);
    return v;
}

/* The hyper-parameters of the group table at idx. */
static ShardHyper group_hyper(lua_State *L, int idx, const char *kind) {
    ShardHyper h = {.kind = strcmp(kind, "sgd") == 0 ? SHARD_SGD : SHARD_ADAM, .amsgrad = opt_bool(L, idx, "amsgrad")};
    double lr = opt_number(L, idx, "lr", 1e-3), wd = opt_number(L, idx, "weight_decay", 0);
    int maximize = opt_bool(L, idx, "maximize");
    h.sgd = (KSgdArgs){.lr = lr, .momentum = opt_number(L, idx, "momentum", 0),
                       .dampening = opt_number(L, idx, "dampening", 0), .weight_decay = wd,
                       .nesterov = opt_bool(L, idx, "nesterov"), .maximize = maximize};
    h.adam = (KAdamArgs){.lr = lr, .beta1 = group_beta(L, idx, 1, 0.9), .beta2 = group_beta(L, idx, 2, 0.999),
                         .eps = opt_number(L, idx, "eps", 1e-8), .weight_decay = wd,
                         .decoupled = lu_opt_bool(L, idx, "decoupled_weight_decay", strcmp(kind, "adamw") == 0),
                         .maximize = maximize};
    return h;
}

/* e:step(kind, group_of, groups) */
static int e_step(lua_State *L) {
    ShardEngine *e = check_engine(L);
    const char *kind = luaL_checkstring(L, 2);
    if (strcmp(kind, "sgd") && strcmp(kind, "adam") && strcmp(kind, "adamw"))
        lu_error(L, "shard: optimizer kind must be sgd, adam or adamw, got '%s'", kind);
    luaL_checktype(L, 3, LUA_TTABLE);
    luaL_checktype(L, 4, LUA_TTABLE);
    int n = shard_num_params(e), ng = (int)lua_rawlen(L, 4);
    ShardHyper *h = lua_newuserdatauv(L, sizeof *h * (size_t)n, 0);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 4, list_int(L, 3, i + 1, 1, ng, "group_of"));
        if (!lua_istable(L, -1)) lu_error(L, "shard: param group of parameter %d must be a table", i + 1);
        h[i] = group_hyper(L, lua_gettop(L), kind);
        lua_pop(L, 1);
    }
    return rc_or_error(L, shard_step(e, h));
}

static int e_clip(lua_State *L) {
    ShardEngine *e = check_engine(L);
    double max_norm = luaL_checknumber(L, 2), p = luaL_optnumber(L, 3, 2.0), total = 0;
    if (shard_clip_grad_norm(e, max_norm, p, lua_toboolean(L, 4), &total)) return lu_core_error(L);
    lua_pushnumber(L, total);
    return 1;
}

static int e_unscale(lua_State *L) {
    ShardEngine *e = check_engine(L);
    bool found = false;
    if (shard_unscale(e, luaL_checknumber(L, 2), &found)) return lu_core_error(L);
    lua_pushboolean(L, found);
    return 1;
}

static int e_clamp_grads(lua_State *L) {
    return rc_or_error(L, shard_clamp_grads(check_engine(L), luaL_checknumber(L, 2)));
}

/* Argument idx as a 0-based index into `count` things called `what`. */
static int check_index(lua_State *L, int idx, int count, const char *what) {
    lua_Integer i = luaL_checkinteger(L, idx);
    if (i < 1 || i > count) lu_error(L, "shard: %s %lld does not exist (1..%d)", what, (long long)i, count);
    return (int)i - 1;
}

static int unit_arg(lua_State *L, ShardEngine *e) { return check_index(L, 2, shard_num_units(e), "unit"); }

static int e_gather(lua_State *L) {
    ShardEngine *e = check_engine(L);
    return rc_or_error(L, shard_unit_gather(e, unit_arg(L, e)));
}

static int e_release(lua_State *L) {
    ShardEngine *e = check_engine(L);
    return rc_or_error(L, shard_unit_release(e, unit_arg(L, e)));
}

static int e_prefetch(lua_State *L) {
    ShardEngine *e = check_engine(L);
    return rc_or_error(L, shard_unit_prefetch(e, unit_arg(L, e)));
}

static int e_forward_begin(lua_State *L) {
    shard_forward_begin(check_engine(L));
    return 0;
}

static int e_before_forward(lua_State *L) {
    ShardEngine *e = check_engine(L);
    return rc_or_error(L, shard_unit_forward(e, unit_arg(L, e)));
}

static int e_gathered(lua_State *L) {
    ShardEngine *e = check_engine(L);
    lua_pushboolean(L, shard_unit_gathered(e, unit_arg(L, e)));
    return 1;
}

static int e_pre_backward(lua_State *L) {
    ShardEngine *e = check_engine(L);
    int u = unit_arg(L, e);
    Tensor *r = shard_pre_backward(e, u, lu_check_tensor(L, 3));
    if (!r) return lu_core_error(L);
    lu_push_tensor(L, r);
    return 1;
}

static int e_full_tensor(lua_State *L) {
    ShardEngine *e = check_engine(L);
    int i = check_index(L, 2, shard_num_params(e), "parameter");
    int which = (int)luaL_optinteger(L, 3, 0);
    Tensor *p = shard_param(e, i);
    Tensor *out = tensor_empty(p->shape, p->ndim, DT_F32, p->device);
    if (!out) return lu_core_error(L);
    lu_push_tensor(L, out);
    return rc_or_error(L, shard_full_tensor(e, i, which, out)) + 1;
}

static int e_load_full(lua_State *L) {
    ShardEngine *e = check_engine(L);
    int i = check_index(L, 2, shard_num_params(e), "parameter");
    return rc_or_error(L, shard_load_full(e, i, (int)luaL_checkinteger(L, 3), lu_check_tensor(L, 4)));
}

static int e_set_kind(lua_State *L) {
    const char *kind = luaL_checkstring(L, 2);
    return rc_or_error(L, shard_set_kind(check_engine(L), strcmp(kind, "sgd") == 0 ? SHARD_SGD : SHARD_ADAM));
}

static int e_set_steps(lua_State *L) {
    ShardEngine *e = check_engine(L);
    int i = check_index(L, 2, shard_num_params(e), "parameter");
    lua_Integer n = luaL_checkinteger(L, 3);
    if (n < 0) lu_error(L, "shard: a step count must be >= 0, got %lld", (long long)n);
    shard_set_param_steps(e, i, n);
    return 0;
}

static void set_int(lua_State *L, const char *k, lua_Integer v) {
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

static void push_unit(lua_State *L, ShardEngine *e, int u) {
    int n;
    const int *params;
    const int64_t *offsets;
    int64_t numel, padded, shard;
    shard_unit_info(e, u, &n, &params, &offsets, &numel, &padded, &shard);
    lua_createtable(L, 0, 5);
    set_int(L, "numel", numel);
    set_int(L, "padded", padded);
    set_int(L, "shard", shard);
    lua_createtable(L, n, 0);
    for (int k = 0; k < n; k++) lua_pushinteger(L, params[k] + 1), lua_rawseti(L, -2, k + 1);
    lua_setfield(L, -2, "params");
    lua_createtable(L, n, 0);
    for (int k = 0; k < n; k++) lua_pushinteger(L, offsets[k]), lua_rawseti(L, -2, k + 1);
    lua_setfield(L, -2, "offsets");
}

static int e_units(lua_State *L) {
    ShardEngine *e = check_engine(L);
    int nu = shard_num_units(e);
    lua_createtable(L, nu, 0);
    for (int u = 0; u < nu; u++) {
        push_unit(L, e, u);
        lua_rawseti(L, -2, u + 1);
    }
    return 1;
}

static int e_shard(lua_State *L) {
    ShardEngine *e = check_engine(L);
    Tensor *t = shard_unit_shard(e, unit_arg(L, e), (int)luaL_checkinteger(L, 3));
    if (!t) lua_pushnil(L);
    else lu_push_tensor(L, tensor_detach(t));
    return 1;
}

static int e_state_names(lua_State *L) {
    ShardEngine *e = check_engine(L);
    lua_newtable(L);
    for (int k = 1; shard_state_name(e, k); k++) {
        lua_pushstring(L, shard_state_name(e, k));
        lua_rawseti(L, -2, k);
    }
    return 1;
}

static int e_steps(lua_State *L) {
    ShardEngine *e = check_engine(L);
    lua_pushinteger(L, shard_param_steps(e, check_index(L, 2, shard_num_params(e), "parameter")));
    return 1;
}

static int e_info(lua_State *L) {
    ShardEngine *e = check_engine(L);
    lua_createtable(L, 0, 4);
    set_int(L, "stage", shard_stage(e));
    set_int(L, "rank", shard_rank(e));
    set_int(L, "world", shard_world(e));
    int replica, replicas = shard_replicas(e, &replica);
    set_int(L, "replica", replica);
    set_int(L, "replicas", replicas);
    lua_pushboolean(L, shard_offload(e));
    lua_setfield(L, -2, "offload_optimizer");
    return 1;
}

static int e_stats(lua_State *L) {
    ShardStats st;
    shard_stats(check_engine(L), &st);
    lua_createtable(L, 0, 8);
    set_int(L, "units", st.units);
    set_int(L, "params", st.params);
    set_int(L, "steps", (lua_Integer)st.steps);
    set_int(L, "reductions", (lua_Integer)st.reductions);
    set_int(L, "early", (lua_Integer)st.early);
    set_int(L, "gathers", (lua_Integer)st.gathers);
    set_int(L, "releases", (lua_Integer)st.releases);
    set_int(L, "prefetches", (lua_Integer)st.prefetches);
    set_int(L, "forward_prefetches", (lua_Integer)st.forward_prefetches);
    return 1;
}

static int e_close(lua_State *L) {
    EngineUD *u = luaL_checkudata(L, 1, ENGINE_MT);
    shard_engine_free(u->e);
    u->e = NULL;
    return 0;
}

static int e_tostring(lua_State *L) {
    EngineUD *u = luaL_checkudata(L, 1, ENGINE_MT);
    if (!u->e) lua_pushliteral(L, "accel.shard.Engine(closed)");
    else lua_pushfstring(L, "accel.shard.Engine(stage %d, %d parameters, %d units)", shard_stage(u->e),
                         shard_num_params(u->e), shard_num_units(u->e));
    return 1;
}

/* accel._C.shard_stage_flags(stage) -> grads_sharded, params_sharded */
static int l_stage_flags(lua_State *L) {
    bool grads = false, params = false;
    if (shard_stage_flags((int)luaL_checkinteger(L, 1), &grads, &params)) return lu_core_error(L);
    lua_pushboolean(L, grads);
    lua_pushboolean(L, params);
    return 2;
}

/* accel._C.shard_released(t): whether t's memory was released by an engine. */
static int l_released(lua_State *L) {
    TensorUD *u = luaL_checkudata(L, 1, TENSOR_MT);
    lua_pushboolean(L, u->t && shard_storage_released(u->t->storage));
    return 1;
}

void lu_open_shard(lua_State *L, int m) {
    static const luaL_Reg methods[] = {
        {"set_sync", e_set_sync}, {"finalize", e_finalize},       {"zero_grad", e_zero_grad},
        {"gather_all", e_gather_all}, {"step", e_step},           {"clip_grad_norm", e_clip},
        {"unscale", e_unscale},   {"clamp_grads", e_clamp_grads}, {"gather", e_gather}, {"release", e_release},
        {"gathered", e_gathered}, {"pre_backward", e_pre_backward}, {"full_tensor", e_full_tensor},
        {"units", e_units},       {"shard", e_shard},             {"state_names", e_state_names},
        {"steps", e_steps},       {"info", e_info},               {"stats", e_stats},
        {"prefetch", e_prefetch}, {"forward_begin", e_forward_begin}, {"before_forward", e_before_forward},
        {"load_full", e_load_full}, {"set_kind", e_set_kind}, {"set_steps", e_set_steps},
        {"close", e_close},       {NULL, NULL}};
    lu_new_class(L, ENGINE_MT, methods, e_close, e_tostring);
    static const luaL_Reg fns[] = {{"shard_engine", l_engine}, {"shard_released", l_released},
                                   {"shard_stage_flags", l_stage_flags}, {NULL, NULL}};
    lu_register_c(L, m, fns);
}
