/* cmd_merge.c: `accel-lua merge-weights CHECKPOINT_DIR OUTPUT [--model N]`:
 * the full model weights of a sharded save_state folder as one safetensors
 * file. The work is Lua (accel.shard_checkpoint.main, which also prints
 * the usage for --help); this file runs it in a fresh state and returns
 * its exit status. */
#include "bindings/lua_compat.h"

#include "host/host.h"
#include "host/subcommands.h"

/* Lua side: require the module and call main(args) -> exit status. */
static int run_merge(lua_State *L) {
    int argc = (int)lua_tointeger(L, 1);
    char **argv = lua_touserdata(L, 2);
    host_push_module_main(L, "accel.shard_checkpoint", argc, argv);
    lua_call(L, 1, 1);
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
    if (rc == 0 && argc == 2 && host_is_help(argv[1]))
        printf("\nExample:\n  accel-lua merge-weights ckpt/checkpoint_3 merged/\n");
    return rc;
}
