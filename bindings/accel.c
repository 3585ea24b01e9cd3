/* accel.c: luaopen_accel: the `accel` module table: dtypes, devices,
 * tensor creation, free functions (matmul, cat, stack, where, save, load,
 * manual_seed, clock, num_threads), and lazy loading of the embedded Lua
 * library (accel.nn, accel.optim, ...) on first access. */
#include "accel.h"
#include "embedded.h"
#include "lua_util.h"
#include "../core/backend/backend.h"
#include "../core/io/safetensors.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* ---- creation ---- */

typedef struct {
    DType dt;
    Device dev;
    bool requires_grad;
} CreateOpts;

static CreateOpts create_opts(lua_State *L, int idx, DType def) {
    CreateOpts o = {def, lu_default_device(L), false};
    if (!lu_is_opts(L, idx)) {
        if (!lua_isnone(L, idx) && !lua_isnil(L, idx))
            lu_error(L, "bad argument #%d (options table {dtype=, device=, requires_grad=} expected, got %s)", idx, luaL_typename(L, idx));
        return o;
    }
    lu_check_call_opts(L, idx, "dtype device requires_grad");
    o.dt = (DType)lu_opt_dtype(L, idx, "dtype", def);
    o.dev = lu_opt_device(L, idx, "device");
    o.requires_grad = lu_opt_bool(L, idx, "requires_grad", false);
    return o;
}

static int finish(lua_State *L, Tensor *t, const CreateOpts *o) {
    if (t && (t->device.type != o->dev.type || t->device.index != o->dev.index)) { /* made on the host (RNG, ranges) */
        Tensor *m = tensor_to_device(t, o->dev);
        tensor_release(t);
        t = m;
    }
    if (!t) return lu_core_error(L);
    if (o->requires_grad) {
        if (!dtype_is_float(t->dtype)) {
            tensor_release(t);
            return lu_error(L, "only floating point tensors can require gradients (got %s)", dtype_name(o->dt));
        }
        t->requires_grad = true;
    }
    lu_push_tensor(L, t);
    return 1;
}

/* A tensor of the shape filled with v, the shape checked first so that an
 * impossible one is an error naming op (zeros, ones, full, empty). */
static int filled(lua_State *L, const char *op, const int64_t *shape, int nd, double v, const CreateOpts *o) {
    if (shape_check(op, shape, nd, (int)o->dt) < 0) return lu_core_error(L);
    return finish(L, tensor_full(shape, nd, v, o->dt, o->dev), o);
}

static int l_full_shape(lua_State *L, const char *op, double v, bool has_value) {
    int64_t shape[TENSOR_MAX_DIMS];
    int next, nd = lu_sizes(L, 1, shape, &next);
    if (has_value) {
        if (!lua_isnumber(L, next) && !lua_isboolean(L, next)) return lu_error(L, "full: fill value expected after the size");
        v = lua_isboolean(L, next) ? lua_toboolean(L, next) : lua_tonumber(L, next);
        DType def = lua_isboolean(L, next) ? DT_BOOL : lua_isinteger(L, next) ? DT_I64 : DT_F32;
        CreateOpts o = create_opts(L, next + 1, def);
        if (o.dt == DT_I64 && lu_is_wide_integer(L, next)) { /* exactly, not through a double */
            if (filled(L, op, shape, nd, 0, &o) < 0) return -1;
            Tensor *s = lu_int64_scalar(L, next, o.dev);
            int rc = tensor_copy_(lu_check_tensor(L, -1), s);
            tensor_release(s);
            return rc < 0 ? lu_core_error(L) : 1;
        }
        lu_check_fill_value(L, v, o.dt, op);
        return filled(L, op, shape, nd, v, &o);
    }
    CreateOpts o = create_opts(L, next, DT_F32);
    return filled(L, op, shape, nd, v, &o);
}

static int l_zeros(lua_State *L) { return l_full_shape(L, "zeros", 0, false); }
static int l_ones(lua_State *L) { return l_full_shape(L, "ones", 1, false); }
static int l_full(lua_State *L) { return l_full_shape(L, "full", 0, true); }
static int l_empty(lua_State *L) { return l_full_shape(L, "empty", 0, false); }

static int random_shape(lua_State *L, bool normal) {
    int64_t shape[TENSOR_MAX_DIMS];
    int next, nd = lu_sizes(L, 1, shape, &next);
    CreateOpts o = create_opts(L, next, DT_F32);
    if (!dtype_is_float(o.dt)) return lu_error(L, "%s: dtype must be floating point, got %s", normal ? "randn" : "rand", dtype_name(o.dt));
    return finish(L, normal ? rng_randn_on(shape, nd, o.dt, o.dev) : rng_rand_on(shape, nd, o.dt, o.dev), &o);
}

static int l_rand(lua_State *L) { return random_shape(L, false); }
static int l_randn(lua_State *L) { return random_shape(L, true); }

/* randint(low, high, size) or randint(high, size) */
static int l_randint(lua_State *L) {
    lua_Integer lo = 0, hi;
    int pos;
    if (lua_type(L, 2) == LUA_TNUMBER) lo = luaL_checkinteger(L, 1), hi = luaL_checkinteger(L, 2), pos = 3;
    else hi = luaL_checkinteger(L, 1), pos = 2;
    int64_t shape[TENSOR_MAX_DIMS];
    int next, nd = lu_sizes(L, pos, shape, &next);
    CreateOpts o = create_opts(L, next, DT_I64);
    int64_t min, max;
    dtype_int_range(o.dt, &min, &max);
    bool low_out = lo < min || lo > max;
    if (lo < hi && (low_out || hi - 1 < min || hi - 1 > max)) /* both ends exact values of the dtype */
        lu_error(L, "randint: %s = %lld is out of bounds for %s, which holds every integer exactly only in [%lld, %lld]",
                 low_out ? "low" : "high - 1", (long long)(low_out ? lo : hi - 1), dtype_name(o.dt), (long long)min,
                 (long long)max);
    return finish(L, rng_randint_on(lo, hi, shape, nd, o.dt, o.dev), &o);
}

static int l_randperm(lua_State *L) {
    CreateOpts o = create_opts(L, 2, DT_I64);
    return finish(L, rng_randperm(luaL_checkinteger(L, 1), o.dt), &o);
}

/* zeros_like(t, [opts]) etc.; the upvalue selects the fill. */
static int l_like(lua_State *L) {
    Tensor *t = lu_check_tensor(L, 1);
    int kind = (int)lua_tointeger(L, lua_upvalueindex(1)); /* 0 zeros 1 ones 2 full 3 rand 4 randn 5 empty */
    int oi = kind == 2 ? 3 : 2;
    CreateOpts o = create_opts(L, oi, t->dtype);
    if (!lu_is_opts(L, oi) || (lua_getfield(L, oi, "device"), lua_isnil(L, -1))) o.dev = t->device;
    Tensor *r;
    switch (kind) {
    case 2: {
        double v = lua_isboolean(L, 2) ? lua_toboolean(L, 2) : luaL_checknumber(L, 2); /* as full */
        lu_check_fill_value(L, v, o.dt, "full_like");
        r = tensor_full(t->shape, t->ndim, v, o.dt, o.dev);
        break;
    }
    case 3: r = rng_rand_on(t->shape, t->ndim, o.dt, o.dev); break;
    case 4: r = rng_randn_on(t->shape, t->ndim, o.dt, o.dev); break;
    default: r = tensor_full(t->shape, t->ndim, kind == 1 ? 1.0 : 0.0, o.dt, o.dev); break;
    }
    return finish(L, r, &o);
}

/* arange / linspace make no bool tensors (as PyTorch) */
static void check_range_dtype(lua_State *L, const char *op, DType dt) {
    if (dt == DT_BOOL) lu_error(L, "%s: not implemented for dtype bool (as PyTorch); make the range in int64 and :bool() it", op);
}

static int l_arange(lua_State *L) {
    int n = 0;
    double v[3] = {0, 0, 1};
    bool all_int = true;
    while (n < 3 && lua_type(L, n + 1) == LUA_TNUMBER) {
        all_int = all_int && lua_isinteger(L, n + 1);
        v[n] = lua_tonumber(L, n + 1);
        n++;
    }
    if (n == 0) return lu_error(L, "arange: expected arange(end), arange(start, end) or arange(start, end, step)");
    double start = n == 1 ? 0 : v[0], end = n == 1 ? v[0] : v[1], step = n == 3 ? v[2] : 1;
    CreateOpts o = create_opts(L, n + 1, all_int ? DT_I64 : DT_F32);
    check_range_dtype(L, "arange", o.dt);
    return finish(L, tensor_arange(start, end, step, o.dt), &o);
}

static int l_linspace(lua_State *L) {
    CreateOpts o = create_opts(L, 4, DT_F32);
    check_range_dtype(L, "linspace", o.dt);
    return finish(L, tensor_linspace(luaL_checknumber(L, 1), luaL_checknumber(L, 2), luaL_checkinteger(L, 3), o.dt), &o);
}

/* ---- accel.tensor(data, opts) ---- */

typedef struct {
    int64_t shape[TENSOR_MAX_DIMS];
    int ndim;
    bool any_float, any_bool, any_int;
    int tensor_dt;  /* the promoted dtype of one-element tensor entries, -1: none */
    bool leaf_seen; /* the depth is fixed: no later list may nest deeper */
    int64_t at[TENSOR_MAX_DIMS]; /* the index being scanned at each depth, for errors */
} DataInfo;

/* Pushes and returns "data[2][1]": where the list being scanned at depth is. */
static const char *data_path(lua_State *L, const DataInfo *info, int depth) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, "data");
    for (int d = 0; d < depth; d++) {
        lua_pushfstring(L, "[%" LUA_FMT_INT "]", LUA_FMT_INT_ARG(info->at[d]));
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    return lua_tostring(L, -1);
}

/* Pushes and returns the key at (absolute) index k as an error shows it. */
static const char *key_name(lua_State *L, int k) {
    if (lua_type(L, k) == LUA_TSTRING) return lua_pushfstring(L, "\"%s\"", lua_tostring(L, k));
    if (lua_type(L, k) != LUA_TNUMBER) return lua_pushfstring(L, "of type %s", luaL_typename(L, k));
    lua_pushvalue(L, k); /* a copy: tostring must not change the key next() continues from */
    return lua_tostring(L, -1);
}

/* Raises unless the key at (absolute) index k of a list of length n is one
 * of 1..n (string keys, 0 of a 0-based loop, entries past a hole: as
 * PyTorch's "Could not infer dtype of dict", data must be plain lists). */
static int64_t list_key(lua_State *L, int k, int64_t n, const DataInfo *info, int depth) {
    if (lua_isinteger(L, k) && lua_tointeger(L, k) >= 1 && lua_tointeger(L, k) <= n) return lua_tointeger(L, k);
    const char *key = key_name(L, k);
    lu_error(L, "tensor: %s has key %s; nested lists must be indexed 1..n with no holes (this list has length %lld)",
             data_path(L, info, depth), key, (long long)n);
    return 0;
}

static void scan_data(lua_State *L, int idx, int depth, DataInfo *info);

/* The entries of the list at idx (of length n), visited with next() so that
 * any key outside 1..n is seen; n keys in 1..n mean no holes. */
static void scan_entries(lua_State *L, int idx, int64_t n, int depth, DataInfo *info) {
    int64_t count = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        int64_t i = list_key(L, lua_gettop(L) - 1, n, info, depth);
        if (lua_type(L, -1) == LUA_TTABLE && depth + 1 == info->ndim && count > 0)
            lu_error(L, "tensor: ragged nested lists (element %lld at depth %d is a list)", (long long)i, depth + 1);
        info->at[depth] = i;
        scan_data(L, lua_gettop(L), depth + 1, info);
        lua_pop(L, 1);
        count++;
    }
    for (int64_t i = 1; count < n && i <= n; i++) /* a hole: name the first */
        if (lua_rawgeti(L, idx, i) == LUA_TNIL)
            lu_error(L, "tensor: %s has no entry at index %lld; nested lists must be indexed 1..n with no holes",
                     data_path(L, info, depth), (long long)i);
        else lua_pop(L, 1);
}

/* A one-element tensor entry at idx: pushes its value (item) and returns
 * it, as torch.tensor takes 0-d tensors in its data; NULL for any other
 * value. A tensor of more elements is PyTorch's error. */
static Tensor *push_tensor_entry(lua_State *L, int idx) {
    Tensor *t = lu_to_tensor(L, idx);
    if (!t) return NULL;
    if (t->numel != 1)
        lu_error(L, "tensor: only one-element tensors can be entries of the data, got one of shape %s",
                 tensor_shape_str(t));
    lua_getfield(L, idx, "item");
    lua_pushvalue(L, idx);
    lua_call(L, 1, 1);
    return t;
}

static void scan_data(lua_State *L, int idx, int depth, DataInfo *info) {
    Tensor *entry = push_tensor_entry(L, idx);
    if (entry) { /* its value's place; its dtype, not its value's kind, for the result's (as torch infers it) */
        const bool any_float = info->any_float, any_int = info->any_int, any_bool = info->any_bool;
        scan_data(L, lua_gettop(L), depth, info);
        lua_pop(L, 1);
        info->any_float = any_float, info->any_int = any_int, info->any_bool = any_bool;
        info->tensor_dt = info->tensor_dt < 0 ? (int)entry->dtype : (int)dtype_promote((DType)info->tensor_dt, entry->dtype);
        return;
    }
    int t = lua_type(L, idx);
    if (t == LUA_TNUMBER || t == LUA_TBOOLEAN) {
        if (depth != info->ndim) lu_error(L, "tensor: nested lists have inconsistent depth");
        info->leaf_seen = true;
        if (t == LUA_TBOOLEAN) info->any_bool = true;
        else if (lua_isinteger(L, idx)) info->any_int = true;
        else info->any_float = true;
        return;
    }
    if (t != LUA_TTABLE) lu_error(L, "tensor: data must be numbers, booleans or nested lists of them, got %s", luaL_typename(L, idx));
    int64_t n = (int64_t)lua_rawlen(L, idx);
    if (depth >= TENSOR_MAX_DIMS) lu_error(L, "tensor: too many nesting levels");
    if (depth == info->ndim) {
        if (info->leaf_seen) lu_error(L, "tensor: nested lists have inconsistent depth");
        info->shape[depth] = n;
        info->ndim = depth + 1;
    } else if (depth > info->ndim || info->shape[depth] != n) {
        lu_error(L, "tensor: expected a list of length %lld at depth %d, got %lld (ragged nested lists)",
                 (long long)info->shape[depth], depth + 1, (long long)n);
    }
    scan_entries(L, idx, n, depth, info);
}

static void fill_data(lua_State *L, int idx, char **p, DType dt) {
    if (push_tensor_entry(L, idx)) {
        fill_data(L, lua_gettop(L), p, dt);
        lua_pop(L, 1);
        return;
    }
    if (lua_type(L, idx) != LUA_TTABLE) {
        if (lua_isboolean(L, idx)) dtype_store_i64(*p, dt, lua_toboolean(L, idx));
        else if (dtype_is_float(dt)) dtype_store(*p, dt, lua_tonumber(L, idx)); /* as torch: out of range -> inf */
        else if (lua_isinteger(L, idx)) { /* any Lua integer fits int64 */
            if (dt != DT_I64) lu_check_fill_value(L, (double)lua_tointeger(L, idx), dt, "tensor");
            dtype_store_i64(*p, dt, lua_tointeger(L, idx));
        } else {
            lu_check_fill_value(L, lua_tonumber(L, idx), dt, "tensor");
            dtype_store(*p, dt, lua_tonumber(L, idx));
        }
        *p += dtype_size(dt);
        return;
    }
    int64_t n = (int64_t)lua_rawlen(L, idx);
    for (int64_t i = 1; i <= n; i++) {
        lua_rawgeti(L, idx, i);
        fill_data(L, lua_gettop(L), p, dt);
        lua_pop(L, 1);
    }
}

static int l_tensor(lua_State *L) {
    Tensor *src = lu_to_tensor(L, 1);
    if (src) {
        CreateOpts o = create_opts(L, 2, src->dtype);
        if (!lu_is_opts(L, 2) || (lua_getfield(L, 2, "device"), lua_isnil(L, -1))) o.dev = src->device; /* as torch.tensor(t) */
        bool prev = ag_set_grad_enabled(false);
        Tensor *c = tensor_empty(src->shape, src->ndim, o.dt, src->device);
        if (c) tensor_copy_strided(c, src);
        ag_set_grad_enabled(prev);
        return finish(L, c, &o);
    }
    DataInfo info = {.tensor_dt = -1};
    scan_data(L, 1, 0, &info);
    DType def = info.any_float ? DT_F32 : info.any_int ? DT_I64 : info.any_bool ? DT_BOOL : DT_F32;
    if (info.tensor_dt >= 0) /* the entries' dtype wins over the numbers' kind, promoted with it */
        def = (info.any_float || info.any_int || info.any_bool) ? dtype_promote((DType)info.tensor_dt, def)
                                                                : (DType)info.tensor_dt;
    CreateOpts o = create_opts(L, 2, def);
    Tensor *t = tensor_empty(info.shape, info.ndim, o.dt, o.dev);
    if (!t) return lu_core_error(L);
    lu_push_tensor(L, t); /* owned by Lua while filling, so errors do not leak */
    /* staged in a Lua-owned host buffer (collected if filling raises), then copied to the device */
    char *host = lua_newuserdatauv(L, (size_t)t->numel * dtype_size(o.dt) + 1, 0), *p = host;
    fill_data(L, 1, &p, o.dt);
    if (tensor_from_host(t, host) < 0) return lu_core_error(L);
    lua_pop(L, 1);
    if (o.requires_grad) {
        if (!dtype_is_float(o.dt)) return lu_error(L, "only floating point tensors can require gradients (got %s)", dtype_name(o.dt));
        t->requires_grad = true;
    }
    return 1;
}

/* ---- free functions ---- */

static int l_matmul(lua_State *L) {
    lu_check_no_more_args(L, 3); /* torch's out= is not provided: refused, not dropped */
    lu_push_tensor(L, op_matmul(lu_check_tensor(L, 1), lu_check_tensor(L, 2)));
    return 1;
}

/* A Lua list of tensors at idx into a malloc'd array (borrowed pointers). */
static Tensor **tensor_list(lua_State *L, int idx, int *n, const char *op) {
    if (!lua_istable(L, idx)) lu_error(L, "%s: expected a list of tensors, got %s", op, luaL_typename(L, idx));
    *n = (int)lua_rawlen(L, idx);
    Tensor **ts = lua_newuserdatauv(L, sizeof(Tensor *) * (size_t)(*n > 0 ? *n : 1), 0); /* GC-owned scratch */
    for (int i = 0; i < *n; i++) {
        lua_rawgeti(L, idx, i + 1);
        ts[i] = lu_to_tensor(L, -1);
        if (!ts[i]) lu_error(L, "%s: item %d of the list is a %s, not a tensor", op, i + 1, luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    return ts;
}

/* name(list, [dim = 1]) or (list, {dim =}): joins a list of tensors along
 * dim (op_cat / op_stack). */
static int join_tensors(lua_State *L, const char *name, Tensor *(*join)(Tensor **, int, int)) {
    int n;
    lu_check_no_more_args(L, 3);
    lu_dim_keyword(L, 2, "dim");
    int dim = lua_isnoneornil(L, 2) ? 0 : lu_dim(L, 2);
    Tensor **ts = tensor_list(L, 1, &n, name);
    lu_push_tensor(L, join(ts, n, dim));
    return 1;
}

static int l_cat(lua_State *L) { return join_tensors(L, "cat", op_cat); }

static int l_stack(lua_State *L) { return join_tensors(L, "stack", op_stack); }

static int l_where(lua_State *L) {
    if (lua_gettop(L) == 1) { /* torch.where(condition): condition:nonzero({as_tuple = true}), one index per dim */
        lu_check_tensor(L, 1);
        lua_getfield(L, 1, "nonzero");
        lua_pushvalue(L, 1);
        lua_createtable(L, 0, 1);
        lua_pushboolean(L, 1);
        lua_setfield(L, -2, "as_tuple");
        lua_call(L, 2, LUA_MULTRET);
        return lua_gettop(L) - 1;
    }
    lu_check_no_more_args(L, 4);
    lu_push_tensor(L, lu_where(L, lu_check_tensor(L, 1), 2, 3));
    return 1;
}

/* accel.manual_seed(seed), as torch.manual_seed (accel.set_seed, in
 * accel.utils, adds Accelerate's device_specific). */
static int l_manual_seed(lua_State *L) {
    if (lua_gettop(L) > 1)
        return lu_error(L, "manual_seed: expected only the seed, got %d arguments (accel.set_seed takes "
                           "device_specific)", lua_gettop(L));
    lua_Integer s = luaL_checkinteger(L, 1);
    rng_seed((uint64_t)s);
    lua_getglobal(L, "math");
    if (lua_istable(L, -1)) { /* seed Lua's own generator too, like Accelerate seeds random/numpy */
        lua_getfield(L, -1, "randomseed");
        lua_pushinteger(L, s);
        lua_call(L, 1, 0);
    }
    return 0;
}

static int l_initial_seed(lua_State *L) {
    lu_check_no_more_args(L, 1);
    lua_pushinteger(L, (lua_Integer)rng_get_seed());
    return 1;
}

static int l_rng_state(lua_State *L) {
    lu_check_no_more_args(L, 1);
    uint64_t st[2];
    rng_get_state(st);
    lua_pushinteger(L, (lua_Integer)st[0]);
    lua_pushinteger(L, (lua_Integer)st[1]);
    return 2;
}

static int l_set_rng_state(lua_State *L) {
    uint64_t st[2] = {(uint64_t)luaL_checkinteger(L, 1), (uint64_t)luaL_checkinteger(L, 2)};
    rng_set_state(st);
    return 0;
}

static int l_clock(lua_State *L) {
    lu_check_no_more_args(L, 1);
    return lu_push_clock(L, CLOCK_MONOTONIC);
}

/* accel.num_threads([n]): n >= 1 (torch.set_num_threads refuses less);
 * more than the cores are capped to them */
static int l_num_threads(lua_State *L) {
    lu_check_no_more_args(L, 2);
    if (!lua_isnoneornil(L, 1)) {
        lua_Integer n = luaL_checkinteger(L, 1);
        if (n < 1) return lu_error(L, "num_threads: expects a positive integer, got %lld", (long long)n);
        backend_set_threads(n > INT_MAX ? INT_MAX : (int)n);
    }
    lua_pushinteger(L, backend_get_threads());
    return 1;
}

static int l_is_tensor(lua_State *L) {
    lua_pushboolean(L, lu_is_tensor(L, 1));
    return 1;
}

/* The host allocator's figures take no device: a GPU's are accel.cuda's. */
static void check_no_args(lua_State *L, const char *fn) {
    if (lua_gettop(L) > 0)
        lu_error(L, "accel.%s() takes no arguments (it reports the host's tensors; for a GPU use accel.cuda.%s), got %s",
                  fn, fn, luaL_typename(L, 1));
}

static int l_memory(lua_State *L) {
    check_no_args(L, "memory_stats");
    lua_pushinteger(L, (lua_Integer)tensor_live_bytes());
    lua_pushinteger(L, (lua_Integer)backend_cpu.cached_bytes());
    lua_pushinteger(L, (lua_Integer)tensor_peak_live_bytes());
    return 3;
}

static int l_reset_peak_memory_stats(lua_State *L) {
    check_no_args(L, "reset_peak_memory_stats");
    tensor_reset_peak_live_bytes();
    return 0;
}

/* _C.gc_tensor_bytes_pushed(): the tensor bytes handed to Lua so far, the
 * measure of the collector's full-collection cycle (lu_gc_account). */
static int c_gc_tensor_bytes_pushed(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)lu_state(L)->gc_pushed);
    return 1;
}

static int l_empty_cache(lua_State *L) {
    check_no_args(L, "empty_cache");
    backend_cpu.empty_cache();
    return 0;
}

/* ---- files ---- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* A file named as torch.save's files are (model.pth, m.pt, pytorch_model.bin)
 * gets safetensors bytes, which torch.load refuses: warned once per process. */
static void warn_torch_name(const char *path) {
    static const char *const suffixes[] = {".pt", ".pth", ".bin", ".pkl", ".ckpt"};
    static int warned;
    size_t len = strlen(path);
    for (size_t i = 0; !warned && i < sizeof suffixes / sizeof suffixes[0]; i++) {
        size_t n = strlen(suffixes[i]);
        if (len <= n || strcasecmp(path + len - n, suffixes[i]) != 0) continue;
        fprintf(stderr, "accel-lua: warning: %s is written as safetensors, not in torch.save's format: torch.load "
                        "cannot read it; name it .safetensors (Python: safetensors.torch.load_file reads it)\n", path);
        warned = 1;
    }
}

/* accel.save({name = tensor, ...}, path, [metadata {str = str}]) ; names written sorted */
static int l_save(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    const char *path = luaL_checkstring(L, 2);
    int n = 0, count = 0;
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING) return lu_error(L, "accel.save: keys must be strings (tensor names), got %s", luaL_typename(L, -2));
        if (!lu_is_tensor(L, -1)) return lu_error(L, "accel.save: value for '%s' is a %s, not a tensor", lua_tostring(L, -2), luaL_typename(L, -1));
        count++;
        lua_pop(L, 1);
    }
    const char **names = lua_newuserdatauv(L, sizeof(char *) * (size_t)(count ? count : 1), 0);
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        names[n++] = lua_tostring(L, -2);
        lua_pop(L, 1);
    }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    Tensor **ts = lua_newuserdatauv(L, sizeof(Tensor *) * (size_t)(n ? n : 1), 0);
    for (int i = 0; i < n; i++) {
        lua_getfield(L, 1, names[i]);
        ts[i] = lu_check_tensor(L, -1);
        lua_pop(L, 1);
    }
    const char **mk, **mv;
    int nm = lu_string_map(L, 3, &mk, &mv, "accel.save");
    if (safetensors_save(path, names, ts, n, mk, mv, nm) < 0) lu_core_error(L);
    warn_torch_name(path);
    return 0;
}

/* accel.load's options ({device = d}, as safetensors' load_file(device=)):
 * the device the tensors go to; the cpu by default, whatever the default
 * device is (safetensors and torch.load do the same). */
static Device load_device(lua_State *L, int idx) {
    Device d = {DEV_CPU, 0};
    if (lua_isnoneornil(L, idx)) return d;
    if (!lu_is_opts(L, idx)) lu_error(L, "accel.load: options must be a table {device = ...}, got %s", luaL_typename(L, idx));
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) != LUA_TSTRING || strcmp(lua_tostring(L, -2), "device") != 0)
            lu_error(L, "accel.load: unknown option '%s' (expected device)",
                     lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : luaL_typename(L, -2));
        d = lu_check_device(L, lua_gettop(L));
        lua_pop(L, 1);
    }
    if (!backend_for(d)) lu_core_error(L);
    return d;
}

/* Moves the n loaded (cpu) tensors to dev in place; on failure releases
 * them all and returns -1 with the error. */
static int move_loaded(Tensor **ts, int n, Device dev) {
    int rc = 0;
    for (int i = 0; i < n; i++) {
        Tensor *t = ts[i];
        ts[i] = rc == 0 ? tensor_to_device(t, dev) : NULL;
        if (!ts[i]) rc = -1;
        tensor_release(t);
    }
    for (int i = 0; rc < 0 && i < n; i++) tensor_release(ts[i]);
    return rc;
}

/* The metatable of accel.load's metadata table (accel._C.load_metadata). */
#define LOAD_METADATA "accel.SafetensorsMetadata"

/* accel.load(path, [{device =}]) -> {name = tensor}, {metadata} */
static int l_load(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    Device dev = load_device(L, 2);
    char **names = NULL, **mk = NULL, **mv = NULL;
    Tensor **ts = NULL;
    int n = 0, nm = 0;
    if (safetensors_load(path, &names, &ts, &n, &mk, &mv, &nm) < 0) lu_core_error(L);
    int rc = dev.type == DEV_CPU ? 0 : move_loaded(ts, n, dev); /* read on the host, then copied */
    if (rc == 0) {
        lua_createtable(L, 0, n);
        for (int i = 0; i < n; i++) {
            lu_push_tensor(L, ts[i]);
            lua_setfield(L, -2, names[i]);
        }
        lua_createtable(L, 0, nm);
        for (int i = 0; i < nm; i++) {
            lua_pushstring(L, mv[i]);
            lua_setfield(L, -2, mk[i]);
        }
        luaL_setmetatable(L, LOAD_METADATA); /* load_state_dict(accel.load(p)) tells it from options */
    }
    free(ts);
    safetensors_free_names(names, n);
    safetensors_free_names(mk, nm);
    safetensors_free_names(mv, nm);
    return rc == 0 ? 2 : lu_core_error(L);
}

/* ---- module ---- */

/* Top-level names that live in an embedded module: accel.Accelerator is
 * accel.accelerator's Accelerator, loaded on first use. */
static const struct { const char *name, *module; } exports[] = {
    {"Accelerator", "accel.accelerator"},
    {"DeepSpeedPlugin", "accel.accelerator"},
    {"load_checkpoint_in_model", "accel.utils"},
    {"FullyShardedDataParallelPlugin", "accel.accelerator"},
    {"ProjectConfiguration", "accel.accelerator"},
    {"PartialState", "accel.accelerator"},
    {"DistributedDataParallelKwargs", "accel.accelerator"},
    {"InitProcessGroupKwargs", "accel.accelerator"},
    {"GradScalerKwargs", "accel.accelerator"},
    {"AutocastKwargs", "accel.accelerator"},
    {"FP8RecipeKwargs", "accel.accelerator"},
    {"TERecipeKwargs", "accel.accelerator"},
    {"GradientAccumulationPlugin", "accel.accelerator"},
    {"DataLoaderConfiguration", "accel.accelerator"},
    {"find_executable_batch_size", "accel.accelerator"},
    {"LocalSGD", "accel.local_sgd"},
    {"set_seed", "accel.utils"},
    {"synchronize_rng_states", "accel.utils"},
    {"skip_first_batches", "accel.utils"},
    {"DistributedType", "accel.utils"},
    {"einsum", "accel.contract"},
    {"eye", "accel.creation"},
};

/* require(module) and return its field k (module itself when k is NULL). */
static int require_field(lua_State *L, const char *module, const char *k) {
    lua_getglobal(L, "require");
    lua_pushstring(L, module);
    lua_call(L, 1, 1);
    if (k) lua_getfield(L, -1, k);
    return 1;
}

/* torch names a script may use that accel-lua does not have: reading one
 * is an error naming it, not a nil to call. */
static const char *const not_provided_functions[] = {
    "fft", "special", "distributions", "compile", "jit", "Generator", "from_numpy", "complex", "polar",
    "set_default_dtype", "result_type", "promote_types", "can_cast", "trapz", "trapezoid",
    "cumulative_trapezoid", "histogram", "histogramdd", "cov", "corrcoef", "vander",
    "gcd", "lcm", "frexp", "ldexp", "copysign", "nextafter", "inverse", "det", "logdet", "slogdet", "pinverse", "svd",
    "qr", "lu", "cholesky", "matrix_power", "matrix_exp", "triangular_solve", "cholesky_solve", "lstsq", "eig",
    "chain_matmul", "renorm", "stft", "istft", "sparse_coo_tensor", "quantize_per_tensor", "int8", "int16",
    "uint16", "float8_e4m3fnuz", "complex64", "complex128", "cfloat", "cdouble", "combinations", "diag_embed",
    "seed", "autocast", "scatter_reduce", "index_put", "eig", "poisson", "binomial", "func", "vmap", "hann_window",
    "hamming_window", "blackman_window", "bartlett_window", "kaiser_window", "empty_strided",
    "use_deterministic_algorithms", "are_deterministic_algorithms_enabled", "conv1d", "conv2d", "conv3d", "dropout",
    "layer_norm", "batch_norm", "embedding", "max_pool1d", "max_pool2d", "avg_pool1d", "cosine_similarity",
    "pixel_shuffle", "i0", "polygamma", "igamma", "igammac", NULL};

/* Accelerate's top-level names for engines accel-lua does not have
 * (docs/accelerate-names.md): reading one is an error naming it. */
static const char *const accelerate_not_provided[] = {
    "ProfileKwargs", "DummyOptim", "DummyScheduler", "TorchDynamoPlugin", "TorchTensorParallelPlugin",
    "MegatronLMPlugin", "ParallelismConfig", "AORecipeKwargs", "MSAMPRecipeKwargs", "DDPCommunicationHookType",
    "AcceleratorState", "notebook_launcher", "debug_launcher", "prepare_pippy", "init_empty_weights",
    "init_on_device", "dispatch_model", "cpu_offload", "disk_offload", "load_checkpoint_and_dispatch",
    "infer_auto_device_map", NULL};

/* accel.X for an unknown X: the embedded module accel.X if there is one
 * (cached in the table), else an exported name, a tensor method, a name of
 * accel.tensor_functions, an error for a torch name we do not have, else nil. */
static int module_index(lua_State *L) {
    const char *k = lua_tostring(L, 2);
    if (!k) return 0;
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "preload");
    lua_pushfstring(L, "accel.%s", k);
    const char *mod = lua_tostring(L, -1);
    if (lua_getfield(L, -2, mod) != LUA_TNIL) {
        require_field(L, mod, NULL);
        lua_pushvalue(L, 2);
        lua_pushvalue(L, -2);
        lua_rawset(L, 1);
        return 1;
    }
    for (size_t i = 0; i < sizeof exports / sizeof exports[0]; i++)
        if (strcmp(k, exports[i].name) == 0) return require_field(L, exports[i].module, k);
    /* torch's function forms: accel.exp(t), accel.sum(t, 2) are the tensor methods t:exp(), t:sum(2) */
    lua_getfield(L, LUA_REGISTRYINDEX, "accel.TensorMethods");
    if (lua_getfield(L, -1, k) == LUA_TFUNCTION) return 1;
    lua_pop(L, 1);
    if (lu_load_lua_tensor_methods(L) && lua_getfield(L, -1, k) == LUA_TFUNCTION) return 1;
    /* torch functions that are not methods: accel.meshgrid, accel.hstack, ... */
    require_field(L, "accel.tensor_functions", k);
    if (!lua_isnil(L, -1)) return 1;
    for (const char *const *n = accelerate_not_provided; *n; n++)
        if (strcmp(k, *n) == 0)
            return lu_error(L, "accel.%s is Accelerate's but not provided by accel-lua (docs/accelerate-names.md says "
                                 "what to use instead)", k);
    for (const char *const *n = not_provided_functions; *n; n++)
        if (strcmp(k, *n) == 0)
            return lu_error(L, "accel.%s is not provided by accel-lua (docs/api/accel.md lists the functions, "
                                 "docs/api/accel.md#not-provided what is missing)", k);
    return 0;
}

static int dtype_tostring(lua_State *L) {
    lua_getfield(L, 1, "name");
    lua_pushfstring(L, "accel.%s", lua_tostring(L, -1));
    return 1;
}

static void set_dtypes(lua_State *L) {
    static const char *const consts[DT_COUNT] = {"float32", "float64", "bfloat16", "float16", "float8_e4m3fn",
                                                 "float8_e5m2", "int64", "int32", "uint8", "bool"};
    luaL_newmetatable(L, "accel.dtype");
    lua_pushcfunction(L, dtype_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);
    lua_createtable(L, DT_COUNT, 0); /* registry list */
    for (int dt = 0; dt < DT_COUNT; dt++) {
        lua_createtable(L, 0, 4);
        lua_pushinteger(L, dt);
        lua_setfield(L, -2, "__dtype");
        lua_pushstring(L, dtype_name((DType)dt));
        lua_setfield(L, -2, "name");
        lua_pushboolean(L, dtype_is_float((DType)dt));
        lua_setfield(L, -2, "is_floating_point");
        lua_pushinteger(L, (lua_Integer)dtype_size((DType)dt));
        lua_setfield(L, -2, "itemsize");
        luaL_setmetatable(L, "accel.dtype");
        lua_pushvalue(L, -1);
        lua_setfield(L, -4, consts[dt]);
        if (dt == DT_F8E4M3) {
            lua_pushvalue(L, -1);
            lua_setfield(L, -4, "float8_e4m3");
        }
        lua_rawseti(L, -2, dt + 1);
    }
    lua_setfield(L, LUA_REGISTRYINDEX, "accel.dtypes");
    static const struct { const char *alias, *name; } aliases[] = {
        {"float", "float32"}, {"double", "float64"}, {"half", "float16"}, {"long", "int64"}, {"int", "int32"}};
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        lua_getfield(L, -1, aliases[i].name);
        lua_setfield(L, -2, aliases[i].alias);
    }
}

/* accel.set_default_device(d): where creation functions put tensors. */
static int l_set_default_device(lua_State *L) {
    lu_set_default_device(L, 1);
    return 0;
}

static int l_get_default_device(lua_State *L) {
    lu_check_no_more_args(L, 1);
    lu_push_device(L, lu_default_device(L));
    return 1;
}

/* accel.synchronize([device]): wait for the device's queued work. */
static int l_synchronize(lua_State *L) {
    Device d = lua_isnoneornil(L, 1) ? lu_default_device(L) : lu_check_device(L, 1);
    const Backend *be = backend_for(d);
    if (!be || be->synchronize() != 0) return lu_core_error(L);
    return 0;
}

/* accel.device_count([type]): how many devices of a type ("cpu", "sim",
 * "cuda", or a device, which names its type) there are. Without one: of the
 * accelerator in use, as torch.accelerator.device_count: the default
 * device's type, or cuda when the default is the CPU (0 without a GPU). */
static int l_device_count(lua_State *L) {
    DeviceType t;
    if (lua_isnoneornil(L, 1)) {
        Device d = lu_default_device(L);
        t = d.type == DEV_CPU ? DEV_CUDA : d.type;
    } else {
        t = lu_check_device(L, 1).type;
    }
    lua_pushinteger(L, backend_device_count(t));
    return 1;
}

/* The state's last finaliser: every device finishes its queued work before
 * the process tears down the libraries the kernels run in (lua_close at the
 * end of a script, os.exit(code, true)). */
static int drain_devices(lua_State *L) {
    (void)L;
    if (backend_synchronize_all()) fprintf(stderr, "accel-lua: at exit: %s\n", accel_last_error());
    return 0;
}

static void set_exit_drain(lua_State *L) { lu_at_close(L, "accel.drain_devices", drain_devices); }

static const luaL_Reg functions[] = {
    {"tensor", l_tensor}, {"zeros", l_zeros}, {"ones", l_ones}, {"full", l_full}, {"empty", l_empty},
    {"rand", l_rand}, {"randn", l_randn}, {"randint", l_randint}, {"randperm", l_randperm}, {"arange", l_arange},
    {"linspace", l_linspace}, {"matmul", l_matmul}, {"cat", l_cat}, {"concat", l_cat}, {"stack", l_stack},
    {"where", l_where}, {"manual_seed", l_manual_seed}, {"initial_seed", l_initial_seed},
    {"get_rng_state", l_rng_state}, {"set_rng_state", l_set_rng_state}, {"clock", l_clock},
    {"num_threads", l_num_threads}, {"is_tensor", l_is_tensor}, {"memory_stats", l_memory},
    {"reset_peak_memory_stats", l_reset_peak_memory_stats},
    {"empty_cache", l_empty_cache}, {"save", l_save}, {"load", l_load}, {"device", lu_device_new}, {"Size", lu_size_new},
    {"set_default_device", l_set_default_device}, {"get_default_device", l_get_default_device},
    {"synchronize", l_synchronize}, {"device_count", l_device_count}, {"set_printoptions", lu_set_printoptions},
    {"get_printoptions", lu_get_printoptions}, {NULL, NULL}};

/* accel.so stays mapped once loaded (as lua.c leaves it mapped at exit):
 * its allocator caches, pools, threads (the collective watchdog) and exit
 * handlers are process-wide; a dlclose when the last Lua state closes would
 * leak the caches and leave the handlers pointing at unmapped code. */
static void pin_module(void) {
    Dl_info info;
    if (dladdr((void *)luaopen_accel, &info) && info.dli_fname) dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

/* The set of nn.Parameter tensors (weak keys: tensor -> true), made once
 * per state: _C.parameters for accel.nn, the registry's for printing
 * ("Parameter containing:"). */
static void push_parameter_set(lua_State *L) {
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, "accel.parameters");
}

int luaopen_accel(lua_State *L) {
    pin_module();
    accel_preload_embedded(L);
    set_exit_drain(L);
    lu_open_device(L);
    lu_open_tensor(L);
    lua_newtable(L);
    lua_setfield(L, LUA_REGISTRYINDEX, "accel.twins");
    lua_getfield(L, LUA_REGISTRYINDEX, "accel.twins");
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "v");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pop(L, 1);

    luaL_newlib(L, functions);
    int m = lua_gettop(L);
    lu_name_ops(L, m, functions);
    static const char *const likes[] = {"zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "empty_like"};
    for (int i = 0; i < 6; i++) {
        lua_pushinteger(L, i == 5 ? 0 : i);
        lua_pushcclosure(L, l_like, 1);
        lua_setfield(L, m, likes[i]);
    }
    set_dtypes(L);
    lua_newtable(L);
    luaL_newmetatable(L, LOAD_METADATA);
    lua_setfield(L, -2, "load_metadata");
    push_parameter_set(L);
    lua_setfield(L, -2, "parameters");
    lua_setfield(L, m, "_C");
    lu_register_c(L, m, (const luaL_Reg[]){{"gc_tensor_bytes_pushed", c_gc_tensor_bytes_pushed}, {NULL, NULL}});
    lu_open_autograd(L, m);
    lu_open_functions(L, m);
    lu_open_attention(L, m);
    lu_open_dist(L, m);
    lu_open_ddp(L, m);
    lu_open_shard(L, m);
    lu_open_safetensors(L, m);
    lu_open_conv(L, m);
    lu_open_data(L, m);
    lu_open_optim(L, m);
    lu_open_fs(L, m);
    lu_open_tracking(L, m);
    lu_open_profile(L, m);
    lu_open_fp8(L, m);
    lu_open_sort(L, m);
    lu_open_cuda(L, m);
    lua_getfield(L, m, "_C"); /* the method table, for accel.tensor_methods to extend */
    lua_getfield(L, LUA_REGISTRYINDEX, "accel.TensorMethods");
    lua_setfield(L, -2, "tensor_methods");
    lua_pop(L, 1);
    lua_pushliteral(L, "0.1.0");
    lua_setfield(L, m, "__version__");
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, module_index);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, m);
    return 1;
}
