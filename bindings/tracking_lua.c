/* tracking_lua.c: accel._C helpers for the trackers and the progress bar
 * (bindings/lua/accel/tracking.lua, progress.lua): the few things Lua's
 * standard library cannot do. CRC-32C for TFRecord framing, fsync of an open
 * Lua file, isatty and the terminal's width, wall-clock time, the host
 * name and mkdir -p; and (http_lua.c) the HTTP requests of the MLflow
 * tracker. */
#include "http_lua.h"
#include "lua_util.h"
#include "../core/io/crc32c.h"

#include <errno.h>
#include "lua_compat.h"
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* crc32c(s [, crc]) -> CRC-32C of the string s (continuing from crc) */
static int c_crc32c(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    uint32_t crc = (uint32_t)luaL_optinteger(L, 2, 0);
    lua_pushinteger(L, (lua_Integer)crc32c(crc, s, n));
    return 1;
}

/* masked_crc32c(s) -> TFRecord's masked CRC-32C of s */
static int c_masked_crc32c(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    lua_pushinteger(L, (lua_Integer)crc32c_mask(crc32c(0, s, n)));
    return 1;
}

/* The FILE* of an open Lua file handle at idx (an error if closed). */
static FILE *check_file(lua_State *L, int idx, const char *op) {
    luaL_Stream *p = luaL_testudata(L, idx, LUA_FILEHANDLE);
    if (!p) lu_error(L, "%s: expected an open Lua file, got %s", op, luaL_typename(L, idx));
    if (!lua_compat_stream_file(p)) lu_error(L, "%s: the file is closed", op);
    return p->f;
}

/* fsync(file): flushes Lua's buffer and asks the kernel to write the file to disk */
static int c_fsync(lua_State *L) {
    FILE *f = check_file(L, 1, "fsync");
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) return lu_error(L, "fsync: %s", strerror(errno));
    return 0;
}

/* isatty(file | fd) -> whether it is a terminal */
static int c_isatty(lua_State *L) {
    int fd = lua_isinteger(L, 1) ? (int)lua_tointeger(L, 1) : fileno(check_file(L, 1, "isatty"));
    lua_pushboolean(L, isatty(fd));
    return 1;
}

/* terminal_width(file) -> columns of the terminal it writes to, or nil */
static int c_terminal_width(lua_State *L) {
    struct winsize ws;
    if (ioctl(fileno(check_file(L, 1, "terminal_width")), TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0) return 0;
    lua_pushinteger(L, ws.ws_col);
    return 1;
}

/* wall_time() -> seconds since the Unix epoch, with fractions */
static int c_wall_time(lua_State *L) { return lu_push_clock(L, CLOCK_REALTIME); }

static int c_hostname(lua_State *L) {
    char name[256];
    if (gethostname(name, sizeof name) != 0) return lu_error(L, "hostname: %s", strerror(errno));
    name[sizeof name - 1] = '\0';
    lua_pushstring(L, name);
    return 1;
}

/* mkdirs(path): creates path and its missing parents (mkdir -p) */
static int c_mkdirs(lua_State *L) {
    size_t n;
    const char *path = luaL_checklstring(L, 1, &n);
    if (n == 0) return 0;
    char *p = lua_newuserdata(L, n + 1); /* scratch copy, freed by the GC */
    memcpy(p, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char c = p[i];
        p[i] = '\0';
        struct stat st;
        if (mkdir(p, 0777) != 0 && (errno != EEXIST || stat(p, &st) != 0 || !S_ISDIR(st.st_mode)))
            return lu_error(L, "mkdirs: cannot create directory '%s': %s", p,
                            errno == EEXIST ? "a file of that name exists" : strerror(errno));
        p[i] = c;
    }
    return 0;
}

void lu_open_tracking(lua_State *L, int m) {
    static const luaL_Reg fns[] = {{"crc32c", c_crc32c}, {"masked_crc32c", c_masked_crc32c}, {"fsync", c_fsync},
                                   {"isatty", c_isatty}, {"terminal_width", c_terminal_width}, {"wall_time", c_wall_time}, {"hostname", c_hostname},
                                   {"mkdirs", c_mkdirs}, {NULL, NULL}};
    lu_register_c(L, m, fns);
    lu_open_http(L, m);
}
