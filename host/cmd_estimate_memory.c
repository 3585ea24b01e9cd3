/* cmd_estimate_memory.c: `accel-lua estimate-memory ...`, the per-rank
 * memory estimate of a training run (parameters, gradients, optimizer
 * state, activations measured with one forward/backward). The work is Lua
 * (bindings/lua/accel/estimate_memory.lua: its main(args, machine) parses
 * the flags, measures, prints the table and returns the exit status); this
 * file makes the Lua state as a script run gets it (accel loaded, the
 * generational GC a script runs under, so the measured garbage is a
 * script's), and hands over argv and the CPU facts of host/sysinfo.c. */
#include <stdio.h>
#include <stdlib.h>

#include "bindings/lua_compat.h"

#include "host/host.h"
#include "host/subcommands.h"

#define WHO "accel-lua estimate-memory"

/* The machine table given to main: cpu model, logical CPUs, physical cores. */
static void push_machine(lua_State *L) {
    char model[256];
    host_cpu_model(model, sizeof model);
    lua_createtable(L, 0, 3);
    lua_pushstring(L, model);
    lua_setfield(L, -2, "cpu");
    lua_pushinteger(L, host_logical_cpus());
    lua_setfield(L, -2, "logical_cpus");
    lua_pushinteger(L, host_physical_cores());
    lua_setfield(L, -2, "physical_cores");
}

/* Protected: require the module, call main(argv[1..], machine); pushes the status. */
static int protected_estimate(lua_State *L) {
    int argc = (int)lua_tointeger(L, 1);
    char **argv = lua_touserdata(L, 2);
    host_open_libs(L);
    lua_gc(L, LUA_GCRESTART, 0);
#ifdef LUA_GCGEN
    lua_gc(L, LUA_GCGEN, 0, 0); /* as main.c runs scripts */
#endif
    host_push_module_main(L, "accel.estimate_memory", argc, argv);
    push_machine(L);
    lua_call(L, 2, 1);
    return 1;
}

int cmd_estimate_memory(int argc, char **argv) {
    lua_State *L = host_new_state(WHO);
    if (L == NULL) return EXIT_FAILURE;
    lua_pushcfunction(L, protected_estimate);
    lua_pushinteger(L, argc);
    lua_pushlightuserdata(L, argv);
    int status = host_docall(L, 2, 1);
    int rc = status == LUA_OK ? (int)lua_tointeger(L, -1) : EXIT_FAILURE;
    host_report(L, status); /* only internal errors: main reports its own */
    lua_close(L);
    return rc;
}
