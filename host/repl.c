/* repl.c: the interactive read-eval-print loop, as lua5.4's: prompts "> "
 * and ">> " (or the globals _PROMPT / _PROMPT2), each line first tried as
 * "return <line>" so expressions print their values (with the global
 * print: several results tab-separated, a tensor as PyTorch prints it),
 * incomplete statements continued on the next lines, errors printed as
 * lua5.4 prints them there (the message and traceback, no program name).
 *
 * On a terminal, lines are read with GNU readline (line editing, up-arrow
 * history, as lua5.4 built with readline); each complete entry, a
 * multi-line statement as one, goes into the history. Unlike lua5.4
 * (which keeps none), the history is kept across sessions as Python's REPL
 * keeps ~/.python_history: in $ACCEL_LUA_HISTORY, else ~/.accel_lua_history
 * (the last 1000 entries; ACCEL_LUA_HISTORY="" keeps none), written when
 * the loop ends and also when the program exits inside it (os.exit(), as
 * Python saves it at exit()). When stdin is not a terminal (accel-lua -i <
 * file), lines are read plainly with getline and nothing is saved. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

#include "bindings/lua_compat.h"

#include "host/host.h"

#define HISTORY_MAX 1000

static int use_readline; /* stdin is a terminal */
static char history_file[4096]; /* where the history is saved; "" for nowhere */
static pid_t history_pid;        /* the process that read it (not a forked child) */

/* Lua 5.4 ends such a message in "near <eof>", LuaJIT in "near '<eof>'". */
#if LUA_VERSION_NUM >= 504
#define EOF_MARK "<eof>"
#else
#define EOF_MARK "'<eof>'"
#endif
#define EOF_MARK_LEN (sizeof(EOF_MARK) - 1)

static const char *prompt_for(lua_State *L, int first) {
    lua_getglobal(L, first ? "_PROMPT" : "_PROMPT2");
    const char *p = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    lua_pop(L, 1); /* the string stays alive in the global */
    return p != NULL ? p : (first ? "> " : ">> ");
}

/* Prints the prompt and pushes the next line without its newline;
 * returns 0 (pushing nothing) at end of input. */
static int push_line(lua_State *L, int first) {
    if (use_readline) {
        char *line = readline(prompt_for(L, first));
        if (line == NULL) return 0;
        lua_pushstring(L, line);
        free(line);
        return 1;
    }
    fputs(prompt_for(L, first), stdout);
    fflush(stdout);
    char *buf = NULL;
    size_t cap = 0;
    ssize_t n = getline(&buf, &cap, stdin);
    if (n < 0) {
        free(buf);
        return 0;
    }
    if (n > 0 && buf[n - 1] == '\n') n--;
    lua_pushlstring(L, buf, (size_t)n);
    free(buf);
    return 1;
}

/* One complete entry (a line, or a statement of several) into the history. */
static void save_entry(const char *entry) {
    if (use_readline && entry != NULL && entry[0] != '\0') add_history(entry);
}

/* A syntax error at end of input means the statement is unfinished. */
static int is_incomplete(lua_State *L, int status) {
    if (status != LUA_ERRSYNTAX) return 0;
    size_t len;
    const char *msg = lua_tolstring(L, -1, &len);
    return len >= EOF_MARK_LEN && strcmp(msg + len - EOF_MARK_LEN, EOF_MARK) == 0;
}

/* Line on top: tries "return <line>"; on success replaces the line by
 * the compiled function, otherwise leaves the stack as it was. */
static int try_as_expression(lua_State *L) {
    const char *code = lua_pushfstring(L, "return %s", lua_tostring(L, -1));
    int status = luaL_loadbuffer(L, code, strlen(code), "=stdin");
    if (status == LUA_OK) {
        save_entry(lua_tostring(L, -3));
        lua_remove(L, -2); /* the "return" code */
        lua_remove(L, -2); /* the line */
    } else {
        lua_pop(L, 2);
    }
    return status;
}

/* Code on top: compiles it, reading more lines while it is incomplete.
 * Replaces the code by the function or the error message. */
static int load_statement(lua_State *L) {
    for (;;) {
        size_t len;
        const char *code = lua_tolstring(L, -1, &len);
        int status = luaL_loadbuffer(L, code, len, "=stdin");
        if (!is_incomplete(L, status) || !push_line(L, 0)) {
            save_entry(lua_tostring(L, -2));
            lua_remove(L, -2);
            return status;
        }
        lua_remove(L, -2); /* the error message */
        lua_pushliteral(L, "\n");
        lua_insert(L, -2);
        lua_concat(L, 3);
    }
}

/* Line on top: Lua 5.4's REPL reads a first line "= expr" as "return expr". */
static void equals_as_return(lua_State *L) {
    const char *line = lua_tostring(L, -1);
    if (line[0] != '=') return;
    lua_pushfstring(L, "return %s", line + 1);
    lua_remove(L, -2);
}

/* Reads and compiles one entry; returns -1 at end of input. */
static int read_entry(lua_State *L) {
    if (!push_line(L, 1)) return -1;
    equals_as_return(L);
    if (try_as_expression(L) == LUA_OK) return LUA_OK;
    return load_statement(L);
}

/* An error inside the loop, printed as lua5.4's REPL prints it: the
 * message alone, without the "accel-lua: " that errors of scripts, -e and
 * -l carry (host_report); "rank R: " first in a rank of a job. Pops it. */
static void report(lua_State *L, int status) {
    if (status == LUA_OK) return;
    const char *msg = lua_tostring(L, -1);
    if (msg == NULL) msg = "(error object is not a string)";
    int rank = host_rank();
    fflush(stdout);
    if (rank >= 0)
        fprintf(stderr, "rank %d: %s\n", rank, msg);
    else
        fprintf(stderr, "%s\n", msg);
    fflush(stderr);
    lua_pop(L, 1);
}

/* Prints the values above base with the global `print`. */
static void print_results(lua_State *L, int base) {
    int n = lua_gettop(L) - base;
    if (n <= 0) return;
    luaL_checkstack(L, LUA_MINSTACK, "too many results to print");
    lua_getglobal(L, "print");
    lua_insert(L, base + 1);
    if (lua_pcall(L, n, 0, 0) != LUA_OK) {
        lua_pushfstring(L, "error calling 'print' (%s)", lua_tostring(L, -1));
        lua_remove(L, -2);
        report(L, LUA_ERRRUN);
    }
}

/* The history file (see the top comment) into history_file, or "". */
static void set_history_file(void) {
    const char *env = getenv("ACCEL_LUA_HISTORY"), *home = getenv("HOME");
    int n = 0;
    if (env != NULL)
        n = snprintf(history_file, sizeof history_file, "%s", env);
    else if (home != NULL && home[0] != '\0')
        n = snprintf(history_file, sizeof history_file, "%s/.accel_lua_history", home);
    if (n <= 0 || (size_t)n >= sizeof history_file) history_file[0] = '\0';
}

/* Writes the history back (the last HISTORY_MAX entries), once: at the
 * loop's end, or at exit() (os.exit inside the loop), in the REPL's own
 * process. */
static void save_history(void) {
    if (history_file[0] == '\0' || getpid() != history_pid) return;
    if (write_history(history_file) != 0 || history_truncate_file(history_file, HISTORY_MAX) != 0)
        fprintf(stderr, "%s: cannot write the REPL history %s\n", ACCEL_LUA_NAME, history_file);
    history_file[0] = '\0';
}

/* Readline set up on a terminal, with the saved history read in. */
static void start_line_editing(void) {
    static int at_exit_set;
    use_readline = isatty(STDIN_FILENO);
    if (!use_readline) return;
    rl_readline_name = ACCEL_LUA_NAME; /* for $if accel-lua in ~/.inputrc */
    set_history_file();
    if (history_file[0] == '\0') return;
    read_history(history_file); /* a missing file is no error */
    history_pid = getpid();
    if (!at_exit_set) at_exit_set = atexit(save_history) == 0;
}

void host_repl(lua_State *L) {
    int base = lua_gettop(L);
    int status;
    start_line_editing();
    while ((status = read_entry(L)) != -1) {
        if (status == LUA_OK) status = host_docall(L, 0, LUA_MULTRET);
        if (status == LUA_OK)
            print_results(L, base);
        else
            report(L, status);
        lua_settop(L, base);
    }
    lua_settop(L, base);
    save_history();
    fputc('\n', stdout);
    fflush(stdout);
}
