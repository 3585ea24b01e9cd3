/* print_options_lua.c: accel.set_printoptions / accel.get_printoptions,
 * torch's print options, kept per Lua state (in its registry) and read by
 * tostring(t). set_printoptions{...} changes the fields it names, after
 * its profile ("default", "short", "full") if one is given; sci_mode is set
 * on every call (nil: chosen per tensor), as torch.set_printoptions does. */
#include "lua_util.h"
#include <lauxlib.h>
#include <math.h>
#include <string.h>

#define REGISTRY_KEY "accel.PrintOptions"

void lu_print_options(lua_State *L, PrintOptions *o) {
    lua_getfield(L, LUA_REGISTRYINDEX, REGISTRY_KEY);
    const PrintOptions *stored = lua_touserdata(L, -1);
    *o = stored ? *stored : print_options_default();
    lua_pop(L, 1);
}

static PrintOptions *stored_options(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, REGISTRY_KEY);
    PrintOptions *o = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (o) return o;
    o = lua_newuserdata(L, sizeof *o);
    *o = print_options_default();
    lua_setfield(L, LUA_REGISTRYINDEX, REGISTRY_KEY);
    return o;
}

/* key of the options at idx: false when nil, else *v = its value, a whole
 * number >= min (threshold may also be math.huge) */
static bool count_option(lua_State *L, int idx, const char *key, double min, double *v) {
    lua_getfield(L, idx, key);
    if (lua_isnil(L, -1)) return lua_pop(L, 1), false;
    double x = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : NAN;
    bool ok = x >= min && (x == floor(x) || isinf(x));
    if (!ok || (isinf(x) && strcmp(key, "threshold") != 0))
        lu_error(L, "set_printoptions: %s must be an integer >= %g%s, got %s", key, min,
                 strcmp(key, "threshold") == 0 ? " (or math.huge)" : "",
                 lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1));
    lua_pop(L, 1);
    *v = x;
    return true;
}

static void apply_profile(lua_State *L, PrintOptions *o, const char *profile) {
    *o = print_options_default();
    if (strcmp(profile, "short") == 0) o->precision = 2, o->edgeitems = 2;
    else if (strcmp(profile, "full") == 0) o->threshold = INFINITY;
    else if (strcmp(profile, "default") != 0)
        lu_error(L, "set_printoptions: profile must be \"default\", \"short\" or \"full\", got \"%s\"", profile);
}

/* accel.set_printoptions({precision =, threshold =, edgeitems =, linewidth =, profile =, sci_mode =}) */
int lu_set_printoptions(lua_State *L) {
    if (!lua_isnoneornil(L, 1)) luaL_checktype(L, 1, LUA_TTABLE);
    else lua_newtable(L), lua_replace(L, 1);
    lu_check_opts(L, 1, "set_printoptions", "precision threshold edgeitems linewidth profile sci_mode");
    lu_check_no_more_args(L, 2);
    PrintOptions o;
    lu_print_options(L, &o);
    lua_getfield(L, 1, "profile");
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TSTRING) lu_error(L, "set_printoptions: profile must be a string, got %s", luaL_typename(L, -1));
        apply_profile(L, &o, lua_tostring(L, -1));
    }
    lua_pop(L, 1);
    double v;
    if (count_option(L, 1, "precision", 0, &v)) o.precision = v > 100 ? 100 : (int)v;
    if (count_option(L, 1, "threshold", 0, &v)) o.threshold = v;
    if (count_option(L, 1, "edgeitems", 1, &v)) o.edgeitems = v > 1e9 ? 1000000000 : (int)v;
    if (count_option(L, 1, "linewidth", 1, &v)) o.linewidth = v > 1e9 ? 1000000000 : (int)v;
    lua_getfield(L, 1, "sci_mode");
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
        lu_error(L, "set_printoptions: sci_mode must be true, false or nil, got %s", luaL_typename(L, -1));
    o.sci_mode = lua_isnil(L, -1) ? -1 : lua_toboolean(L, -1);
    lua_pop(L, 1);
    *stored_options(L) = o;
    return 0;
}

/* accel.get_printoptions(): {precision =, threshold =, edgeitems =, linewidth =, sci_mode =} */
int lu_get_printoptions(lua_State *L) {
    lu_check_no_more_args(L, 1);
    PrintOptions o;
    lu_print_options(L, &o);
    lua_createtable(L, 0, 5);
    lua_pushinteger(L, o.precision), lua_setfield(L, -2, "precision");
    if (isinf(o.threshold)) lua_pushnumber(L, o.threshold);
    else lua_pushinteger(L, (lua_Integer)o.threshold);
    lua_setfield(L, -2, "threshold");
    lua_pushinteger(L, o.edgeitems), lua_setfield(L, -2, "edgeitems");
    lua_pushinteger(L, o.linewidth), lua_setfield(L, -2, "linewidth");
    if (o.sci_mode >= 0) lua_pushboolean(L, o.sci_mode), lua_setfield(L, -2, "sci_mode");
    return 1;
}
