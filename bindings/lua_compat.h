/* lua_compat.h: the Lua headers for every C file that talks to Lua, and the
 * few Lua 5.4 C API names the bindings use that LuaJIT 2.1 (`make
 * LUA=luajit`, docs/luajit.md) lacks or defines differently. With Lua 5.4
 * it only includes the headers and names the interpreter (nothing else
 * changes); with LuaJIT it fills the gaps below.
 *
 * Numbers: LuaJIT has one number type (a double). A number "is an
 * integer" (lua_isinteger, lua_tointegerx, luaL_checkinteger) when its
 * value is integral and inside int64, so 2.0 counts as an integer there,
 * unlike in 5.4; a non-integral number given where an integer is needed
 * raises Lua 5.4's "number has no integer representation". An integer
 * pushed to Lua beyond +-2^53 (where doubles skip integers) raises an
 * error naming the value instead of being silently rounded.
 *
 * Per-state data of the bindings (Lua 5.4's extra space) and the main
 * thread have LuaJIT replacements in bindings/lua_util.c. */
#ifndef ACCEL_LUA_COMPAT_H
#define ACCEL_LUA_COMPAT_H

#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>

#if LUA_VERSION_NUM >= 504

#define ACCEL_LUA_RELEASE LUA_RELEASE

/* lua_pushfstring's conversion of a lua_Integer: "%" LUA_FMT_INT with LUA_FMT_INT_ARG(x). */
#define LUA_FMT_INT "I"
#define LUA_FMT_INT_ARG(x) ((LUA_INTEGER)(x))

/* Integers up to this magnitude reach Lua exactly. */
#define LUA_COMPAT_EXACT_INT INT64_MAX

/* The FILE* of a Lua file handle, NULL once it is closed. */
static inline FILE *lua_compat_stream_file(luaL_Stream *p) { return p->closef ? p->f : NULL; }

/* Pushes the state's main thread. */
static inline void lua_compat_push_mainthread(lua_State *L) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
}

#else /* LuaJIT 2.1 (the Lua 5.1 API and some 5.2 additions) */

#include <luajit.h>

#define ACCEL_LUA_RELEASE LUAJIT_VERSION

/* LuaJIT's lua_pushfstring has no %I; %f writes an integral number without a fraction. */
#define LUA_FMT_INT "f"
#define LUA_FMT_INT_ARG(x) ((lua_Number)(x))

#define LUA_COMPAT_EXACT_INT ((int64_t)1 << 53)

typedef uint64_t lua_Unsigned;

/* The head of LuaJIT's io file userdata ("FILE*"): the FILE, NULL once closed. */
typedef struct luaL_Stream {
    FILE *f;
} luaL_Stream;
static inline FILE *lua_compat_stream_file(luaL_Stream *p) { return p->f; }

/* LuaJIT has no registry slot for it: the bindings store it at load time
 * (lua_compat_init). */
#define LUA_COMPAT_MAINTHREAD "accel.mainthread"
static inline void lua_compat_push_mainthread(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_COMPAT_MAINTHREAD);
}

#define luaL_checkversion(L) ((void)(L))
#define lua_rawlen(L, i) lua_objlen(L, (i))

/* lua_gc(L, what[, data]): 5.4 takes the data arguments as varargs. */
#define LUA_COMPAT_GC(L, what, data, ...) (lua_gc)(L, what, data)
#define lua_gc(...) LUA_COMPAT_GC(__VA_ARGS__, 0, 0)

/* 5.3+ getters return the type of the value they push. */
#define lua_getfield(L, i, k) (lua_getfield(L, (i), (k)), lua_type(L, -1))
#define lua_rawgeti(L, i, n) (lua_rawgeti(L, (i), (int)(n)), lua_type(L, -1))
#define lua_rawget(L, i) (lua_rawget(L, (i)), lua_type(L, -1))
#define lua_gettable(L, i) (lua_gettable(L, (i)), lua_type(L, -1))
#undef lua_getglobal
#define lua_getglobal(L, s) lua_getfield(L, LUA_GLOBALSINDEX, (s))
#undef luaL_getmetatable
#define luaL_getmetatable(L, n) lua_getfield(L, LUA_REGISTRYINDEX, (n))

static inline int lua_absindex(lua_State *L, int i) {
    return (i > 0 || i <= LUA_REGISTRYINDEX) ? i : lua_gettop(L) + i + 1;
}

static inline int lua_rawgetp(lua_State *L, int t, const void *p) {
    t = lua_absindex(L, t);
    lua_pushlightuserdata(L, (void *)p);
    return lua_rawget(L, t);
}

static inline void lua_rawsetp(lua_State *L, int t, const void *p) {
    t = lua_absindex(L, t);
    lua_pushlightuserdata(L, (void *)p);
    lua_insert(L, -2);
    lua_rawset(L, t);
}

/* #obj with the __len metamethod (LuaJIT's # ignores it on tables). */
static inline lua_Integer luaL_len(lua_State *L, int i) {
    i = lua_absindex(L, i);
    if (!luaL_callmeta(L, i, "__len")) return (lua_Integer)lua_objlen(L, i);
    int ok = lua_type(L, -1) == LUA_TNUMBER;
    lua_Integer n = (lua_Integer)lua_tonumber(L, -1);
    lua_pop(L, 1);
    if (!ok) luaL_error(L, "object length is not an integer");
    return n;
}

static inline int luaL_getsubtable(lua_State *L, int i, const char *name) {
    if (lua_getfield(L, i, name) == LUA_TTABLE) return 1;
    lua_pop(L, 1);
    i = lua_absindex(L, i);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, i, name);
    return 0;
}
#define LUA_PRELOAD_TABLE "_PRELOAD" /* LuaJIT's registry._PRELOAD is package.preload */

/* require-like: package.loaded[modname] or openf(modname), left on the stack. */
static inline void luaL_requiref(lua_State *L, const char *modname, lua_CFunction openf, int glb) {
    luaL_getsubtable(L, LUA_REGISTRYINDEX, "_LOADED");
    if (lua_getfield(L, -1, modname) == LUA_TNIL || !lua_toboolean(L, -1)) {
        lua_pop(L, 1);
        lua_pushcfunction(L, openf);
        lua_pushstring(L, modname);
        lua_call(L, 1, 1);
        lua_pushvalue(L, -1);
        lua_setfield(L, -3, modname);
    }
    lua_remove(L, -2);
    if (glb) {
        lua_pushvalue(L, -1);
        lua_setglobal(L, modname);
    }
}

/* ---- integers ---- */

#define LUA_COMPAT_TWO63 9223372036854775808.0

static inline int lua_compat_num_is_int(lua_Number x) {
    return x >= -LUA_COMPAT_TWO63 && x < LUA_COMPAT_TWO63 && (lua_Number)(int64_t)x == x;
}

static inline int lua_isinteger(lua_State *L, int i) {
    return lua_type(L, i) == LUA_TNUMBER && lua_compat_num_is_int(lua_tonumber(L, i));
}

/* As 5.4: numbers and numeric strings with an integral value; else 0, *isnum = 0. */
static inline lua_Integer lua_compat_tointegerx(lua_State *L, int i, int *isnum) {
    int ok = lua_isnumber(L, i);
    lua_Number x = ok ? lua_tonumber(L, i) : 0;
    ok = ok && lua_compat_num_is_int(x);
    if (isnum) *isnum = ok;
    return ok ? (lua_Integer)x : 0;
}
#define lua_tointegerx(L, i, isnum) lua_compat_tointegerx(L, (i), (isnum))
#define lua_tointeger(L, i) lua_compat_tointegerx(L, (i), NULL)

static inline lua_Integer lua_compat_checkinteger(lua_State *L, int arg) {
    int ok;
    lua_Integer v = lua_compat_tointegerx(L, arg, &ok);
    if (ok) return v;
    if (lua_isnumber(L, arg)) luaL_argerror(L, arg, "number has no integer representation");
    luaL_typerror(L, arg, "number");
    return 0;
}
#define luaL_checkinteger(L, arg) lua_compat_checkinteger(L, (arg))
#define luaL_optinteger(L, arg, d) (lua_isnoneornil(L, (arg)) ? (lua_Integer)(d) : lua_compat_checkinteger(L, (arg)))

/* lua_pushinteger that raises "op: integer N does not fit a LuaJIT number"
 * at the user's line beyond +-2^53 (bindings/lua_util.c). */
void lua_compat_pushinteger(lua_State *L, lua_Integer n);
#define lua_pushinteger(L, n) lua_compat_pushinteger(L, (lua_Integer)(n))

/* ---- userdata user values: kept in the userdata's environment table ---- */

static inline void *lua_newuserdatauv(lua_State *L, size_t size, int nuv) {
    void *p = lua_newuserdata(L, size);
    if (nuv > 0) {
        lua_createtable(L, nuv, 0);
        lua_setfenv(L, -2);
    }
    return p;
}

/* The environment on top is a user value table, not the default one
 * (the globals) of a userdata made without user values. */
static inline int lua_compat_has_uservalues(lua_State *L) {
    return lua_istable(L, -1) && !lua_rawequal(L, -1, LUA_GLOBALSINDEX) && !lua_rawequal(L, -1, LUA_ENVIRONINDEX);
}

static inline int lua_setiuservalue(lua_State *L, int idx, int n) {
    idx = lua_absindex(L, idx);
    lua_getfenv(L, idx);
    if (!lua_compat_has_uservalues(L)) {
        lua_pop(L, 2);
        return 0;
    }
    lua_insert(L, -2);
    lua_rawseti(L, -2, n);
    lua_pop(L, 1);
    return 1;
}

static inline int lua_getiuservalue(lua_State *L, int idx, int n) {
    lua_getfenv(L, idx);
    if (!lua_compat_has_uservalues(L)) {
        lua_pop(L, 1);
        lua_pushnil(L);
        return LUA_TNONE;
    }
    lua_rawgeti(L, -1, n);
    lua_remove(L, -2);
    return lua_type(L, -1);
}

#endif /* LuaJIT */

#endif
