/* profile_lua.c: accel._C access to the core's op profiler (core/profile.h)
 * for accel.profiler: start / stop recording and read the events back as
 * Lua tables ready for a Chrome trace (times in microseconds since start). */
#include "lua_util.h"
#include <string.h>
#include "../core/profile.h"

static uint64_t started_ns;

/* profile_start(device_sync): clears the buffer and starts recording; with
 * device_sync each event's end waits for its device's queued work. */
static int c_profile_start(lua_State *L) {
    if (profile_active) return lu_error(L, "profile: the profiler is already recording (profile calls do not nest)");
    started_ns = profile_start(lua_toboolean(L, 1));
    return 0;
}

static int c_profile_stop(lua_State *L) {
    (void)L;
    profile_stop();
    return 0;
}

static void push_shapes(lua_State *L, const ProfEvent *e) {
    lua_createtable(L, e->n_inputs, 0);
    for (int k = 0; k < e->n_inputs; k++) {
        lua_createtable(L, e->ndim[k], 0);
        for (int d = 0; d < e->ndim[k]; d++) {
            lua_pushinteger(L, (lua_Integer)e->shape[k][d]);
            lua_rawseti(L, -2, d + 1);
        }
        lua_rawseti(L, -2, k + 1);
    }
}

static void push_event(lua_State *L, const ProfEvent *e, int with_shapes) {
    static const char *const suffix[] = {"", "_", "Backward"};
    static const char *const category[] = {"cpu_op", "cpu_op", "backward"};
    lua_createtable(L, 0, 6);
    const char *sfx = suffix[e->kind];
    size_t n = strlen(e->name), m = strlen(sfx);
    if (n >= m && m > 0 && strcmp(e->name + n - m, sfx) == 0) sfx = ""; /* a node named ...Backward already */
    lua_pushfstring(L, "%s%s", e->name, sfx);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, category[e->kind]);
    lua_setfield(L, -2, "cat");
    lua_pushnumber(L, (lua_Number)(int64_t)(e->start_ns - started_ns) / 1e3);
    lua_setfield(L, -2, "ts");
    lua_pushnumber(L, (lua_Number)(int64_t)(e->end_ns - e->start_ns) / 1e3);
    lua_setfield(L, -2, "dur");
    lua_pushinteger(L, e->tid);
    lua_setfield(L, -2, "tid");
    if (with_shapes) {
        push_shapes(L, e);
        lua_setfield(L, -2, "shapes");
    }
}

/* profile_events(with_shapes) -> list of {name, cat, ts, dur, tid[, shapes]}
 * in the order they ended, and the number of events dropped (buffer full).
 * Frees the buffer. */
static int c_profile_events(lua_State *L) {
    int with_shapes = lua_toboolean(L, 1);
    int64_t n, dropped;
    const ProfEvent *ev = profile_events(&n, &dropped);
    lua_createtable(L, (int)(n < (1 << 30) ? n : 0), 0);
    for (int64_t i = 0; i < n; i++) {
        push_event(L, &ev[i], with_shapes);
        lua_rawseti(L, -2, (lua_Integer)(i + 1));
    }
    lua_pushinteger(L, (lua_Integer)dropped);
    profile_free();
    return 2;
}

static int c_profile_active(lua_State *L) {
    lua_pushboolean(L, profile_active);
    return 1;
}

void lu_open_profile(lua_State *L, int m) {
    static const luaL_Reg fns[] = {{"profile_start", c_profile_start}, {"profile_stop", c_profile_stop},
                                   {"profile_events", c_profile_events}, {"profile_active", c_profile_active},
                                   {NULL, NULL}};
    lu_register_c(L, m, fns);
}
