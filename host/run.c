/* run.c: running Lua code inside the host. Protected calls with a
 * traceback message handler, Ctrl-C turned into a Lua error while code
 * runs, error reporting as "accel-lua: <message>" ("accel-lua: rank R:
 * <message>" in a rank of a multi-process job), and the helpers that
 * load files, strings and scripts. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "bindings/lua_compat.h"

#include "bindings/accel.h"
#include "host/host.h"

/* The state a Ctrl-C should interrupt (only set while host_docall runs). */
static lua_State *interrupt_target;

void host_print_version(void) {
    printf("%s %s (%s)\n", ACCEL_LUA_NAME, ACCEL_LUA_VERSION, ACCEL_LUA_RELEASE);
    fflush(stdout);
}

lua_State *host_new_state(const char *who) {
    lua_State *L = luaL_newstate();
    if (L == NULL) {
        fprintf(stderr, "%s: cannot create state: not enough memory\n", who);
        return NULL;
    }
    lua_gc(L, LUA_GCSTOP, 0); /* restarted once the libraries are open */
    return L;
}

void host_open_libs(lua_State *L) {
    luaL_openlibs(L);
    luaL_requiref(L, "accel", luaopen_accel, 1);
    lua_pop(L, 1);
    host_apply_threads(L);
}

/* Message handler: turns any error object into a string with a traceback;
 * an object whose __tostring gives a string is that string alone, as in
 * lua5.4. */
static int traceback_handler(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* Hook set from the signal handler: raises the error at the next Lua step. */
static void interrupt_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    luaL_error(L, "interrupted!");
}

/* lua_sethook is documented as safe to call from a signal handler. A second
 * Ctrl-C before Lua notices gets the default action (the process ends). */
static void on_sigint(int sig) {
    signal(sig, SIG_DFL);
    lua_sethook(interrupt_target, interrupt_hook,
                LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

static void set_sigint(void (*handler)(int), struct sigaction *old) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, old);
}

int host_pcall(lua_State *L, int narg, int nres) {
    int base = lua_gettop(L) - narg;
    lua_pushcfunction(L, traceback_handler);
    lua_insert(L, base);
    int status = lua_pcall(L, narg, nres, base);
    lua_remove(L, base);
    return status;
}

int host_docall(lua_State *L, int narg, int nres) {
    struct sigaction previous;
    lua_State *saved = interrupt_target;
    interrupt_target = L;
    set_sigint(on_sigint, &previous);
    int status = host_pcall(L, narg, nres);
    sigaction(SIGINT, &previous, NULL);
    interrupt_target = saved;
    return status;
}

int host_report(lua_State *L, int status) {
    if (status == LUA_OK) return status;
    const char *msg = lua_tostring(L, -1);
    if (msg == NULL) msg = "(error object is not a string)";
    int rank = host_rank();
    fflush(stdout);
    if (rank >= 0)
        fprintf(stderr, "%s: rank %d: %s\n", ACCEL_LUA_NAME, rank, msg);
    else
        fprintf(stderr, "%s: %s\n", ACCEL_LUA_NAME, msg);
    fflush(stderr);
    lua_pop(L, 1);
    return status;
}

/* Runs the chunk just loaded (if loading worked) and reports any error. */
static int run_loaded(lua_State *L, int status) {
    if (status == LUA_OK) status = host_docall(L, 0, 0);
    return host_report(L, status);
}

int host_dofile(lua_State *L, const char *name) {
    return run_loaded(L, luaL_loadfile(L, name));
}

int host_dostring(lua_State *L, const char *code, const char *chunkname) {
    return run_loaded(L, luaL_loadbuffer(L, code, strlen(code), chunkname));
}

/* Pushes arg[1..n] of the global `arg` table; returns n. */
static int push_script_args(lua_State *L) {
    if (lua_getglobal(L, "arg") != LUA_TTABLE)
        luaL_error(L, "'arg' is not a table");
    int n = (int)luaL_len(L, -1);
    luaL_checkstack(L, n + 3, "too many arguments to script");
    int table = lua_gettop(L);
    for (int i = 1; i <= n; i++) lua_rawgeti(L, table, i);
    lua_remove(L, table);
    return n;
}

int host_doscript(lua_State *L, const char *fname) {
    int status = luaL_loadfile(L, fname);
    if (status == LUA_OK) {
        int n = push_script_args(L);
        status = host_docall(L, n, 0);
    }
    return host_report(L, status);
}

void host_push_module_main(lua_State *L, const char *module, int argc, char **argv) {
    lua_getglobal(L, "require");
    lua_pushstring(L, module);
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "main");
    lua_remove(L, -2);
    lua_createtable(L, argc, 0);
    for (int i = 1; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i);
    }
}
