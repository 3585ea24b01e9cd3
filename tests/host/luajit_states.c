/* luajit_states.c: under LuaJIT accel keeps one entry per open state that
 * loaded it (docs/luajit.md), at most 16 at once; a closed state's entry
 * is freed for the next one. Opens 16 states together, then a 17th (refused,
 * with the limit named), closes them all, then opens 40 more one after
 * another (each must load accel and compute). Every state gets its own
 * allocator data (accel names a LuaJIT state by it), so no state reuses a
 * closed one's by chance. Run: ./luajit_states DIR (DIR holds LuaJIT's
 * accel.so); prints one line per phase. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>

#define OPEN_AT_ONCE 16
#define ONE_AFTER_ANOTHER 40

static void *state_alloc(void *ud, void *p, size_t old, size_t n) {
    (void)ud, (void)old;
    if (n == 0) {
        free(p);
        return NULL;
    }
    return realloc(p, n);
}

static const char *const USE = "local accel = require('accel') return accel.ones(3):sum():item()";

/* A new state with accel.so's folder on package.cpath, and whether USE ran
 * there (the error, when it did not, on stdout). */
static lua_State *open_and_use(const char *dir, int *ok) {
    static char allocator_data[OPEN_AT_ONCE + 1 + ONE_AFTER_ANOTHER];
    static int n_opened;
    lua_State *L = lua_newstate(state_alloc, &allocator_data[n_opened++]);
    luaL_openlibs(L);
    lua_getglobal(L, "package");
    lua_pushfstring(L, "%s/?.so", dir);
    lua_setfield(L, -2, "cpath");
    lua_pop(L, 1);
    *ok = luaL_dostring(L, USE) == LUA_OK && lua_tonumber(L, -1) == 3;
    if (!*ok) printf("error: %s\n", lua_tostring(L, -1));
    return L;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    lua_State *open[OPEN_AT_ONCE];
    int ok, all = 1;
    for (int i = 0; i < OPEN_AT_ONCE; i++) {
        open[i] = open_and_use(dir, &ok);
        all &= ok;
    }
    printf("%d states open at once: %s\n", OPEN_AT_ONCE, all ? "ok" : "failed");
    lua_State *extra = open_and_use(dir, &ok);
    printf("one more while they are open: %s\n", ok ? "loaded" : "refused");
    lua_close(extra);
    for (int i = 0; i < OPEN_AT_ONCE; i++) lua_close(open[i]);
    int loaded = 0;
    for (int i = 0; i < ONE_AFTER_ANOTHER; i++) {
        lua_State *L = open_and_use(dir, &ok);
        loaded += ok;
        lua_close(L);
    }
    printf("after closing them, %d states one after another: %d loaded\n", ONE_AFTER_ANOTHER, loaded);
    return 0;
}
