/* cuda_lua.c: CUDA discovery and settings for Lua, in every build (a CPU
 * build answers "no CUDA", saying why; accel.device_count is accel.c's):
 *   accel.cuda.is_available()       at least one usable GPU
 *   accel.cuda.device_count()
 *   accel.cuda.is_built()           this accel-lua has the CUDA backend
 *   accel.cuda.unavailable_reason() why there is no GPU (nil when there is one)
 *   accel.backends.cuda.matmul.allow_tf32   read / assign, as PyTorch's
 *                                   torch.backends.cuda.matmul.allow_tf32 (default false)
 * The counts come from core/backend/backend.h (backend_cuda_count). */
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

void lu_open_cuda(lua_State *L, int module_idx) {
    static const luaL_Reg cuda[] = {{"is_available", l_is_available}, {"device_count", l_cuda_count},
                                    {"is_built", l_is_built}, {"unavailable_reason", l_unavailable_reason},
                                    {NULL, NULL}};
    luaL_newlib(L, cuda);
    lua_setfield(L, module_idx, "cuda");
    push_backends(L);
    lua_setfield(L, module_idx, "backends");
}
