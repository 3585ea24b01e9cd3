/* cuda_lua.c: CUDA discovery and settings for Lua, in every build (a CPU
 * build answers "no CUDA", saying why; accel.device_count is accel.c's):
 *   accel.cuda.is_available()       at least one usable GPU
 *   accel.cuda.device_count()
 *   accel.cuda.is_built()           this accel-lua has the CUDA backend
 *   accel.cuda.unavailable_reason() why there is no GPU (nil when there is one)
 *   accel.cuda.get_device_capability([device]) major, minor (as PyTorch's
 *                                   tuple; device an index, "cuda:N" or a
 *                                   device, default 0)
 *   accel.cuda.memory_stats([device]) the caching allocator's counters under
 *                                   torch.cuda.memory_stats' key names;
 *                                   memory_allocated, max_memory_allocated,
 *                                   memory_reserved, max_memory_reserved,
 *                                   reset_peak_memory_stats, empty_cache
 *   accel.backends.cuda.matmul.allow_tf32   read / assign, as PyTorch's
 *                                   torch.backends.cuda.matmul.allow_tf32 (default false)
 * Any other name is an error listing these. The counts come from
 * core/backend/backend.h (backend_cuda_count). */
#include "lua_util.h"
#include "core/backend/backend.h"
#include <string.h>

static int l_is_available(lua_State *L) { return lua_pushboolean(L, backend_cuda_count(NULL, 0) > 0), 1; }
static int l_cuda_count(lua_State *L) { return lua_pushinteger(L, backend_cuda_count(NULL, 0)), 1; }
static int l_is_built(lua_State *L) { return lua_pushboolean(L, backend_cuda_built()), 1; }

static int l_unavailable_reason(lua_State *L) {
    char why[256];
    if (backend_cuda_count(why, sizeof why) > 0) lua_pushnil(L);
    else lua_pushstring(L, why);
    return 1;
}

/* The GPU index of argument 1 (an index, "cuda:N" or a device; default 0). */
static int gpu_arg(lua_State *L, const char *fn) {
    if (lua_isinteger(L, 1)) return (int)lua_tointeger(L, 1);
    if (lua_isnoneornil(L, 1)) return 0;
    Device d = lu_check_device(L, 1);
    char name[32];
    if (d.type != DEV_CUDA)
        return lu_error(L, "accel.cuda.%s: %s is not a CUDA device", fn, device_str(d, name, sizeof name));
    return d.index;
}

static int l_capability(lua_State *L) {
    int major = 0, minor = 0;
    if (backend_cuda_capability(gpu_arg(L, "get_device_capability"), &major, &minor) != 0) return lu_core_error(L);
    lua_pushinteger(L, major);
    lua_pushinteger(L, minor);
    return 2;
}

static BackendMemStats mem_stats(lua_State *L, const char *fn) {
    BackendMemStats st = {0};
    if (backend_cuda_memory(gpu_arg(L, fn), BACKEND_MEM_READ, &st) != 0) lu_core_error(L);
    return st;
}

static void set_count(lua_State *L, const char *key, uint64_t v) {
    lua_pushinteger(L, (lua_Integer)v);
    lua_setfield(L, -2, key);
}

static int l_memory_stats(lua_State *L) {
    BackendMemStats st = mem_stats(L, "memory_stats");
    lua_createtable(L, 0, 7);
    set_count(L, "allocated_bytes.all.current", st.allocated);
    set_count(L, "allocated_bytes.all.peak", st.allocated_peak);
    set_count(L, "reserved_bytes.all.current", st.reserved);
    set_count(L, "reserved_bytes.all.peak", st.reserved_peak);
    set_count(L, "allocation.all.allocated", st.num_allocs);
    set_count(L, "allocation.all.freed", st.num_frees);
    set_count(L, "num_ooms", st.num_ooms);
    return 1;
}

static int l_memory_allocated(lua_State *L) {
    return lua_pushinteger(L, (lua_Integer)mem_stats(L, "memory_allocated").allocated), 1;
}
static int l_max_memory_allocated(lua_State *L) {
    return lua_pushinteger(L, (lua_Integer)mem_stats(L, "max_memory_allocated").allocated_peak), 1;
}
static int l_memory_reserved(lua_State *L) {
    return lua_pushinteger(L, (lua_Integer)mem_stats(L, "memory_reserved").reserved), 1;
}
static int l_max_memory_reserved(lua_State *L) {
    return lua_pushinteger(L, (lua_Integer)mem_stats(L, "max_memory_reserved").reserved_peak), 1;
}

static int l_reset_peak(lua_State *L) {
    if (backend_cuda_memory(gpu_arg(L, "reset_peak_memory_stats"), BACKEND_MEM_RESET_PEAK, NULL) != 0)
        return lu_core_error(L);
    return 0;
}

/* torch.cuda.empty_cache(): every GPU this process has used. */
static int l_cuda_empty_cache(lua_State *L) {
    for (int i = 0; i < backend_cuda_count(NULL, 0); i++)
        if (backend_cuda_memory(i, BACKEND_MEM_EMPTY_CACHE, NULL) != 0) return lu_core_error(L);
    return 0;
}

static void check_key(lua_State *L) {
    const char *k = luaL_checkstring(L, 2);
    if (strcmp(k, "allow_tf32") != 0)
        lu_error(L, "accel.backends.cuda.matmul has no setting '%s' (only allow_tf32)", k);
}

static int l_matmul_index(lua_State *L) {
    check_key(L);
    return lua_pushboolean(L, backend_cuda_get_allow_tf32()), 1;
}

static int l_matmul_newindex(lua_State *L) {
    check_key(L);
    if (!lua_isboolean(L, 3))
        return lu_error(L, "accel.backends.cuda.matmul.allow_tf32: boolean expected, got %s", luaL_typename(L, 3));
    backend_cuda_set_allow_tf32(lua_toboolean(L, 3));
    return 0;
}

/* accel.backends.cuda.matmul: an empty proxy whose metatable reads and sets the flag. */
static void push_backends(lua_State *L) {
    lua_createtable(L, 0, 1);     /* backends */
    lua_createtable(L, 0, 1);     /* backends.cuda */
    lua_newtable(L);              /* backends.cuda.matmul */
    lua_createtable(L, 0, 2);
    lua_pushcfunction(L, l_matmul_index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_matmul_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_setmetatable(L, -2);
    lua_setfield(L, -2, "matmul");
    lua_setfield(L, -2, "cuda");
}

/* Reading a name accel.cuda lacks (torch.cuda.synchronize, set_device, ...)
 * is one error listing what it has, not a nil to call. */
static int l_cuda_missing(lua_State *L) {
    const char *k = lua_tostring(L, 2);
    return lu_error(L, "accel.cuda.%s does not exist here; accel.cuda has is_available, device_count, is_built, "
                       "unavailable_reason, get_device_capability, memory_stats, memory_allocated, "
                       "max_memory_allocated, memory_reserved, max_memory_reserved, reset_peak_memory_stats, "
                       "empty_cache (devices: accel.device, accel.set_default_device)",
                    k ? k : luaL_typename(L, 2));
}

void lu_open_cuda(lua_State *L, int module_idx) {
    static const luaL_Reg cuda[] = {{"is_available", l_is_available}, {"device_count", l_cuda_count},
                                    {"is_built", l_is_built}, {"unavailable_reason", l_unavailable_reason},
                                    {"get_device_capability", l_capability}, {"memory_stats", l_memory_stats},
                                    {"memory_allocated", l_memory_allocated},
                                    {"max_memory_allocated", l_max_memory_allocated},
                                    {"memory_reserved", l_memory_reserved},
                                    {"max_memory_reserved", l_max_memory_reserved},
                                    {"reset_peak_memory_stats", l_reset_peak}, {"empty_cache", l_cuda_empty_cache},
                                    {NULL, NULL}};
    luaL_newlib(L, cuda);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, l_cuda_missing);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, -2);
    lua_setfield(L, module_idx, "cuda");
    push_backends(L);
    lua_setfield(L, module_idx, "backends");
}
