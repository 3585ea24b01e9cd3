/* main.c: the accel-lua program. Dispatches CLI subcommands (see
 * subcommands.c); otherwise behaves like the standalone `lua` interpreter:
 *   accel-lua [options] [script [args]]
 * with -e, -l, -i, -v, -E, -W, -, --, the global `arg` table, LUA_INIT,
 * a REPL on a terminal, and exit status 1 when anything failed. One option
 * more than lua: `-m mod [args]` runs module mod's file (found on
 * package.path, as require finds it) as the script, like `python -m`;
 * arg[0] is that file. `accel-lua launch -m` runs ranks this way. A first
 * word that looks like a command name but is neither a subcommand nor a
 * file is refused (exit 2), naming the closest subcommand ("unknown
 * command 'lauch', did you mean launch?"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bindings/lua_compat.h"

#include "host/host.h"
#include "host/subcommands.h"

/* What the command line asked for (first pass over argv). */
typedef struct {
    int argc;
    char **argv;
    int script;      /* argv index of the script; 0 = none */
    int interactive; /* -i */
    int version;     /* -v (also set by -i) */
    int has_exec;    /* some -e was given */
    int no_env;      /* -E */
    int help;        /* -h / --help */
    const char *module; /* -m mod: the module run as the script */
} HostArgs;

static void print_usage(FILE *out) {
    fprintf(out,
            "usage: %s [options] [script [args]]\n"
            "Available options are:\n"
            "  -e stat   execute string 'stat'\n"
            "  -i        enter interactive mode after executing 'script'\n"
            "  -l mod    require library 'mod' into global 'mod'\n"
            "  -l g=mod  require library 'mod' into global 'g'\n"
            "  -m mod    run module 'mod' (found on package.path) as the script\n"
            "  -v        show version information\n"
            "  -E        ignore environment variables\n"
            "  -W        turn warnings on\n"
            "  -h        show this help\n"
            "  --        stop handling options\n"
            "  -         stop handling options and execute stdin\n",
            ACCEL_LUA_NAME);
    host_print_subcommands(out);
}

static int usage_error(const char *fmt, const char *opt) {
    fprintf(stderr, "%s: ", ACCEL_LUA_NAME);
    fprintf(stderr, fmt, opt);
    fputc('\n', stderr);
    print_usage(stderr);
    return 0;
}

/* Options taking a value (-e, -l): attached ("-eX") or the next argument. */
static int takes_value(HostArgs *a, int *i) {
    if (a->argv[*i][2] != '\0') return 1;
    if (*i + 1 >= a->argc || a->argv[*i + 1][0] == '-')
        return usage_error("'%s' needs argument", a->argv[*i]);
    (*i)++;
    return 1;
}

/* Handles option argv[*i]; returns 0 on a bad option. */
static int parse_option(HostArgs *a, int *i) {
    const char *opt = a->argv[*i];
    int bare = opt[2] == '\0';
    switch (opt[1]) {
    case 'i': if (!bare) break; a->interactive = a->version = 1; return 1;
    case 'v': if (!bare) break; a->version = 1; return 1;
    case 'E': if (!bare) break; a->no_env = 1; return 1;
    case 'W': if (!bare) break; return 1;
    case 'h': if (!bare) break; a->help = 1; return 1;
    case 'e': a->has_exec = 1; return takes_value(a, i);
    case 'l': return takes_value(a, i);
    case '-': if (strcmp(opt, "--help") == 0) { a->help = 1; return 1; } break;
    default: break;
    }
    return usage_error("unrecognized option '%s'", opt);
}

/* -m mod / -mmod: the module is the script; options end there. */
static int module_option(HostArgs *a, int i) {
    const char *s = a->argv[i];
    if (s[2] == '\0' && i + 1 >= a->argc) return usage_error("'%s' needs argument", s);
    a->module = s[2] != '\0' ? s + 2 : a->argv[i + 1];
    a->script = s[2] != '\0' ? i : i + 1;
    return 1;
}

/* First pass: finds the script and the flags; returns 0 on bad usage. */
static int parse_args(HostArgs *a) {
    for (int i = 1; i < a->argc; i++) {
        const char *s = a->argv[i];
        if (s[0] != '-' || strcmp(s, "-") == 0) { a->script = i; return 1; }
        if (s[1] == 'm') return module_option(a, i);
        if (strcmp(s, "--") == 0) {
            if (i + 1 < a->argc) a->script = i + 1;
            return 1;
        }
        if (!parse_option(a, &i)) return 0;
    }
    return 1;
}

/* arg[0] = script (or program name), options at negative indices. */
static void create_arg_table(lua_State *L, const HostArgs *a) {
    int script = a->script;
    lua_createtable(L, a->argc - script - 1 > 0 ? a->argc - script - 1 : 0, script + 1);
    for (int i = 0; i < a->argc; i++) {
        lua_pushstring(L, a->argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
}

/* -l [g=]mod: global g (default: mod, as lua5.4 5.4.4 names it) = require(mod). */
static int do_library(lua_State *L, const char *spec) {
    const char *eq = strchr(spec, '=');
    const char *mod = eq ? eq + 1 : spec;
    size_t glen = eq ? (size_t)(eq - spec) : strlen(spec);
    lua_pushlstring(L, spec, glen);
    lua_getglobal(L, "require");
    lua_pushstring(L, mod);
    int status = host_docall(L, 1, 1);
    if (status == LUA_OK) lua_setglobal(L, lua_tostring(L, -2));
    host_report(L, status);
    lua_pop(L, 1);
    return status;
}

static const char *option_value(const HostArgs *a, int *i) {
    const char *opt = a->argv[*i];
    return opt[2] != '\0' ? opt + 2 : a->argv[++*i];
}

/* Second pass: runs -e, -l and -W in command-line order. */
static int run_options(lua_State *L, const HostArgs *a) {
    int last = a->script > 0 ? a->script : a->argc;
    for (int i = 1; i < last; i++) {
        const char *opt = a->argv[i];
        int status = LUA_OK;
        if (opt[1] == 'e')
            status = host_dostring(L, option_value(a, &i), "=(command line)");
        else if (opt[1] == 'l')
            status = do_library(L, option_value(a, &i));
#if LUA_VERSION_NUM >= 504
        else if (opt[1] == 'W')
            lua_warning(L, "@on", 0);
#endif
        if (status != LUA_OK) return 0;
    }
    return 1;
}

/* LUA_INIT_5_4 or LUA_INIT: "@file" runs a file, anything else is code. */
static int run_lua_init(lua_State *L) {
    const char *name = "=LUA_INIT_5_4";
    const char *init = getenv(name + 1);
    if (init == NULL) {
        name = "=LUA_INIT";
        init = getenv(name + 1);
    }
    if (init == NULL) return LUA_OK;
    if (init[0] == '@') return host_dofile(L, init + 1);
    return host_dostring(L, init, name);
}

/* The file of module a->module on package.path (pushed), with arg[0] set
 * to it. NULL (nothing pushed) after reporting "module 'x' not found" with
 * the places tried, one per line, as lua5.4 reports `-l x`; no traceback,
 * since no Lua code ran. */
static const char *find_module(lua_State *L, const HostArgs *a) {
    int top = lua_gettop(L);
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "searchpath");
    lua_pushstring(L, a->module);
    lua_getfield(L, -3, "path");
    lua_call(L, 2, 2);
    if (lua_isnil(L, -2)) {
        /* Lua 5.4 lists "no file 'a'\n\tno file 'b'", LuaJIT "\n\tno file 'a'..." */
        const char *tried = lua_tostring(L, -1);
        if (tried == NULL) tried = "";
        lua_pushfstring(L, "module '%s' not found (-m looks on package.path):%s%s", a->module,
                        tried[0] == '\0' || tried[0] == '\n' ? "" : "\n\t", tried);
        host_report(L, LUA_ERRRUN);
        lua_settop(L, top);
        return NULL;
    }
    lua_pop(L, 1);
    lua_remove(L, -2);
    lua_getglobal(L, "arg");
    lua_pushvalue(L, -2);
    lua_rawseti(L, -2, 0);
    lua_pop(L, 1);
    return lua_tostring(L, -1);
}

static int run_script(lua_State *L, const HostArgs *a) {
    if (a->module != NULL) {
        const char *file = find_module(L, a);
        return file != NULL && host_doscript(L, file) == LUA_OK;
    }
    const char *fname = a->argv[a->script];
    int from_stdin = strcmp(fname, "-") == 0 && strcmp(a->argv[a->script - 1], "--") != 0;
    return host_doscript(L, from_stdin ? NULL : fname) == LUA_OK;
}

/* With no script: REPL on a terminal, else run stdin as a chunk. */
static int run_default(lua_State *L, const HostArgs *a) {
    if (a->interactive) { host_repl(L); return 1; }
    if (a->script > 0 || a->has_exec || a->version) return 1;
    if (isatty(STDIN_FILENO)) {
        host_print_version();
        host_repl(L);
        return 1;
    }
    return host_dofile(L, NULL) == LUA_OK;
}

/* Everything that touches Lua, run in protected mode; pushes success. */
static int protected_main(lua_State *L) {
    const HostArgs *a = lua_touserdata(L, 1);
    luaL_checkversion(L);
    if (a->version) host_print_version();
    if (a->no_env) {
        lua_pushboolean(L, 1);
        lua_setfield(L, LUA_REGISTRYINDEX, "LUA_NOENV");
    }
    host_open_libs(L);
    create_arg_table(L, a);
    lua_gc(L, LUA_GCRESTART, 0);
#ifdef LUA_GCGEN
    lua_gc(L, LUA_GCGEN, 0, 0); /* what lua.c 5.4 does */
#endif
    int ok = (a->no_env || run_lua_init(L) == LUA_OK) && run_options(L, a) &&
             (a->script == 0 || run_script(L, a)) && run_default(L, a);
    lua_pushboolean(L, ok);
    return 1;
}

static int run_interpreter(HostArgs *a) {
    lua_State *L = host_new_state(ACCEL_LUA_NAME);
    if (L == NULL) return EXIT_FAILURE;
    lua_pushcfunction(L, protected_main);
    lua_pushlightuserdata(L, a);
    int status = host_pcall(L, 1, 1);
    int ok = status == LUA_OK && lua_toboolean(L, -1);
    host_report(L, status);
    if (!ok && host_rank() >= 0) {
        /* A failing rank leaves without closing the state (finalizers could
         * wait on collectives that peers will never join); the
         * communicator's exit handler aborts the MPI job on this status,
         * and mpirun ends the job on it in any case. */
        fflush(NULL);
        exit(EXIT_FAILURE);
    }
    lua_close(L);
    return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* A first word that looks like a command name (letters, digits, '-', '_';
 * no ".lua"), is none, and is no file either: says so (with the closest
 * command) and returns 1; otherwise 0 and the word is run as a script. */
static int unknown_command(const char *word) {
    size_t n = strlen(word);
    if (n == 0 || word[0] == '-' || strspn(word, "abcdefghijklmnopqrstuvwxyz"
                                                 "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != n)
        return 0;
    if (access(word, F_OK) == 0) return 0;
    const char *near = host_suggest_subcommand(word);
    if (near != NULL)
        fprintf(stderr, "%s: unknown command '%s', did you mean %s?\n", ACCEL_LUA_NAME, word, near);
    else
        fprintf(stderr, "%s: unknown command '%s', and no file of that name (see %s --help)\n",
                ACCEL_LUA_NAME, word, ACCEL_LUA_NAME);
    return 1;
}

int main(int argc, char **argv) {
    const HostSubcommand *cmd = argc > 1 ? host_find_subcommand(argv[1]) : NULL;
    if (cmd != NULL) return cmd->run(argc - 1, argv + 1);
    if (argc > 1 && unknown_command(argv[1])) return 2;
    HostArgs a = {.argc = argc, .argv = argv};
    if (argv[0] == NULL || !parse_args(&a)) return EXIT_FAILURE;
    host_join_pmix_job();
    host_export_rank_vars();
    if (host_setup_rank_logs() != 0) return EXIT_FAILURE;
    if (a.help) {
        print_usage(stdout);
        return EXIT_SUCCESS;
    }
    host_join_job_at_exit();
    return run_interpreter(&a);
}
