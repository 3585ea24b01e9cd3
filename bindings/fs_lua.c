/* fs_lua.c: accel._C file-system helpers for the checkpoint code (Lua has
 * no directory listing, fsync by path or atomic directory swap): atomic text
 * writes, rename / atomic exchange, recursive remove, listing, stat / size,
 * the target of a symbolic link, crc32
 * of a file (zlib), fsync of a file or directory by path, getpid and
 * sleep_ms (mkdirs and isatty live in tracking_lua.c). Failures raise
 * "op: path: reason" errors, except fs_stat / fs_listdir, which return
 * nil, reason (absence is an answer). */
#include "lua_util.h"
#include "../core/io/replace.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

static int fail(lua_State *L, const char *op, const char *path) {
    return lu_error(L, "%s: %s: %s", op, path, strerror(errno));
}

/* fsync a file or directory by path; 0 or -1 with errno. */
static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* The directory part of path ("." when it has none) into buf. */
static const char *parent_dir(const char *path, char *buf, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) return ".";
    size_t len = slash == path ? 1 : (size_t)(slash - path);
    if (len >= n) len = n - 1;
    memcpy(buf, path, len);
    buf[len] = 0;
    return buf;
}

static int write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += k, n -= (size_t)k;
    }
    return 0;
}

/* fs_write(path, data): "<path>.tmp.<pid>", fsync, rename, fsync the directory. */
static int c_fs_write(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    size_t n;
    const char *data = luaL_checklstring(L, 2, &n);
    char tmp[4096], dir[4096];
    const char *kind = io_not_replaceable(path);
    if (kind) return lu_error(L, "write: %s is %s; a whole new file is written and renamed into place, so only a "
                                 "regular file can be replaced", path, kind);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return fail(L, "write", tmp);
    if (write_all(fd, data, n) < 0 || fsync(fd) < 0) {
        int e = errno;
        close(fd), unlink(tmp);
        errno = e;
        return fail(L, "write", tmp);
    }
    if (close(fd) < 0) return unlink(tmp), fail(L, "write", tmp);
    if (rename(tmp, path) < 0) return unlink(tmp), fail(L, "rename", path);
    if (fsync_path(parent_dir(path, dir, sizeof dir)) < 0) return fail(L, "fsync", dir);
    return 0;
}

static int c_fs_rename(lua_State *L) {
    const char *a = luaL_checkstring(L, 1), *b = luaL_checkstring(L, 2);
    if (rename(a, b) < 0) return lu_error(L, "rename: %s -> %s: %s", a, b, strerror(errno));
    return 0;
}

/* fs_link(a, b): b becomes another name of a's file (a symbolic link is
 * linked itself, not followed). */
static int c_fs_link(lua_State *L) {
    const char *a = luaL_checkstring(L, 1), *b = luaL_checkstring(L, 2);
    if (linkat(AT_FDCWD, a, AT_FDCWD, b, 0) < 0) return lu_error(L, "link: %s -> %s: %s", a, b, strerror(errno));
    return 0;
}

/* fs_exchange(a, b) -> true when both paths were swapped atomically,
 * false when the file system cannot (the caller falls back to renames). */
static int c_fs_exchange(lua_State *L) {
    const char *a = luaL_checkstring(L, 1), *b = luaL_checkstring(L, 2);
#ifdef SYS_renameat2
    if (syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0) {
        lua_pushboolean(L, 1);
        return 1;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
        return lu_error(L, "rename: %s <-> %s: %s", a, b, strerror(errno));
#else
    (void)a, (void)b;
#endif
    lua_pushboolean(L, 0);
    return 1;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

/* fs_remove_tree(path): rm -rf (no error when path does not exist) */
static int c_fs_remove_tree(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    struct stat st;
    if (lstat(path, &st) < 0) {
        if (errno == ENOENT) return 0;
        return fail(L, "remove", path);
    }
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) < 0) return fail(L, "remove", path);
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* fs_listdir(path) -> sorted list of names (no "." / ".."), or nil, reason */
static int c_fs_listdir(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    DIR *d = opendir(path);
    if (!d) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", path, strerror(errno));
        return 2;
    }
    size_t n = 0, cap = 16;
    char **names = malloc(cap * sizeof *names);
    struct dirent *e;
    while (names && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (n == cap) {
            char **p = realloc(names, (cap *= 2) * sizeof *names);
            if (!p) break;
            names = p;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (names) qsort(names, n, sizeof *names, cmp_names);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_pushstring(L, names[i] ? names[i] : "");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
        free(names[i]);
    }
    free(names);
    return 1;
}

/* fs_stat(path, [nofollow]) -> "file"|"dir"|"other", size in bytes; or nil, reason */
static int c_fs_stat(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    bool nofollow = lua_toboolean(L, 2); /* fs_stat(path, true): a symbolic link is "other" */
    struct stat st;
    if ((nofollow ? lstat(path, &st) : stat(path, &st)) < 0) {
        lua_pushnil(L);
        lua_pushstring(L, strerror(errno));
        return 2;
    }
    lua_pushstring(L, S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "dir" : "other");
    lua_pushinteger(L, (lua_Integer)st.st_size);
    return 2;
}

/* fs_link_target(path) -> the absolute path a symbolic link resolves to, or
 * nil when path is not a link (or dangles) */
static int c_fs_link_target(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    struct stat st;
    char *full = lstat(path, &st) == 0 && S_ISLNK(st.st_mode) ? realpath(path, NULL) : NULL;
    if (!full) return lua_pushnil(L), 1;
    lua_pushstring(L, full);
    free(full);
    return 1;
}

/* file_size(path) -> size in bytes, or nil when path does not exist */
static int c_file_size(lua_State *L) {
    struct stat st;
    if (stat(luaL_checkstring(L, 1), &st) < 0) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushinteger(L, (lua_Integer)st.st_size);
    return 1;
}

/* fs_crc32(path) -> crc32 (zlib's, as an integer), size in bytes. Called as
 * crc32_z: a host built with -Wl,-E that defines a crc32 of its own would
 * take the place of zlib's crc32 here (docs/embedding.md). */
static int c_fs_crc32(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    FILE *f = fopen(path, "rb");
    if (!f) return fail(L, "crc32", path);
    static __thread unsigned char buf[1 << 16];
    uLong crc = crc32_z(0L, Z_NULL, 0);
    lua_Integer size = 0;
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) {
        crc = crc32_z(crc, buf, k);
        size += (lua_Integer)k;
    }
    int err = ferror(f);
    fclose(f);
    if (err) return lu_error(L, "crc32: %s: read error", path);
    lua_pushinteger(L, (lua_Integer)crc);
    lua_pushinteger(L, size);
    return 2;
}

/* fs_fsync(path): flush a file or a directory (its entries) to disk */
static int c_fs_fsync(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    if (fsync_path(path) < 0) return fail(L, "fsync", path);
    return 0;
}

static int c_getpid(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)getpid());
    return 1;
}

static int c_sleep_ms(lua_State *L) {
    double ms = luaL_checknumber(L, 1);
    if (ms <= 0) return 0;
    struct timespec ts = {(time_t)(ms / 1000), (long)((ms - (double)(time_t)(ms / 1000) * 1000) * 1e6)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
    return 0;
}

void lu_open_fs(lua_State *L, int m) {
    static const luaL_Reg fns[] = {{"fs_write", c_fs_write}, {"fs_rename", c_fs_rename}, {"fs_link", c_fs_link},
                                   {"fs_exchange", c_fs_exchange}, {"fs_remove_tree", c_fs_remove_tree},
                                   {"fs_listdir", c_fs_listdir}, {"fs_stat", c_fs_stat}, {"fs_link_target", c_fs_link_target},
                                   {"file_size", c_file_size}, {"fs_crc32", c_fs_crc32},
                                   {"fs_fsync", c_fs_fsync}, {"getpid", c_getpid},
                                   {"sleep_ms", c_sleep_ms}, {NULL, NULL}};
    lu_register_c(L, m, fns);
}
