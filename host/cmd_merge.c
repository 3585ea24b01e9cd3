/* cmd_merge.c: `accel-lua merge-weights CHECKPOINT_DIR OUTPUT [--model N]`:
 * the full model weights of a sharded save_state folder as one safetensors
 * file. The work is Lua (accel.shard_checkpoint.main, which also reads
 * the flags and prints the help, with its example, for --help); this file
 * runs it in a fresh state and returns its exit status. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "bindings/lua_compat.h"

#include "host/host.h"
#include "host/subcommands.h"

/* The absolute path `p` names into out (PATH_MAX bytes): its longest
 * leading part that exists resolved by realpath (symbolic links, "..");
 * then the components that do not exist yet (an output the command would
 * create) appended, "." and ".." applied to the text. 0, or -1 when the
 * path is empty or too long or nothing of it resolves. */
static int resolve_path(const char *p, char *out) {
    size_t len = strlen(p);
    if (len == 0 || len >= PATH_MAX) return -1;
    char head[PATH_MAX];
    size_t k = len; /* p[0..k) goes to realpath, p[k..len) is appended */
    for (;;) {
        size_t h = k;
        while (h > 1 && p[h - 1] == '/') h--; /* trailing slashes off, a lone "/" kept */
        if (h == 0) strcpy(head, ".");
        else memcpy(head, p, h), head[h] = '\0';
        if (realpath(head, out)) break;
        if (h == 0 || (h == 1 && p[0] == '/')) return -1;
        for (k = h; k > 0 && p[k - 1] != '/'; k--) {} /* drop the last component */
    }
    size_t n = strlen(out);
    for (size_t i = k, j; i < len; i = j) {
        while (i < len && p[i] == '/') i++;
        for (j = i; j < len && p[j] != '/'; j++) {}
        size_t m = j - i;
        if (m == 0 || (m == 1 && p[i] == '.')) continue;
        if (m == 2 && p[i] == '.' && p[i + 1] == '.') {
            while (n > 1 && out[n - 1] != '/') n--;
            n = n > 1 ? n - 1 : 1;
        } else {
            if (n + 1 + m >= PATH_MAX) return -1;
            if (out[n - 1] != '/') out[n++] = '/';
            memcpy(out + n, p + i, m), n += m;
        }
        out[n] = '\0';
    }
    return 0;
}

/* host.resolve(path) -> the absolute resolved path (resolve_path), or nil. */
static int l_resolve(lua_State *L) {
    char out[PATH_MAX];
    if (resolve_path(luaL_checkstring(L, 1), out) < 0) lua_pushnil(L);
    else lua_pushstring(L, out);
    return 1;
}

/* Lua side: require the module and call main(args, host) -> exit status;
 * host holds what the module needs from C (resolve). */
static int run_merge(lua_State *L) {
    int argc = (int)lua_tointeger(L, 1);
    char **argv = lua_touserdata(L, 2);
    host_push_module_main(L, "accel.shard_checkpoint", argc, argv);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, l_resolve);
    lua_setfield(L, -2, "resolve");
    lua_call(L, 2, 1);
    return 1;
}

int cmd_merge_weights(int argc, char **argv) {
    lua_State *L = luaL_newstate();
    if (L == NULL) {
        fprintf(stderr, "accel-lua merge-weights: cannot create a Lua state (out of memory)\n");
        return 1;
    }
    host_open_libs(L);
    lua_pushcfunction(L, run_merge);
    lua_pushinteger(L, argc);
    lua_pushlightuserdata(L, argv);
    int status = host_report(L, host_docall(L, 2, 1));
    int rc = status == LUA_OK ? (int)lua_tointeger(L, -1) : 1;
    lua_close(L);
    return rc;
}
