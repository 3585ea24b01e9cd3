/* safetensors_lua.c: safetensors files one tensor at a time (core/io/safetensors.h),
 * for checkpoints that must never hold a whole model twice in memory:
 *   accel._C.st_open(path) -> f;  f:entries() -> {{name, dtype = "F32", shape}, ...} (header order)
 *     f:read(name [, first, count]) -> the tensor, or its elements [first, first + count) as 1-D
 *     f:close()
 *   accel._C.st_writer(path, {name = spec}, {meta}) -> w   (header from the specs' dtypes and
 *     shapes, names in byte order as accel.save writes them; a spec is a tensor, possibly a
 *     released parameter, or {dtype = "F32", shape = {...}}, which allocates nothing)
 *     w:names() -> the order in which w:put(t) takes the tensors;  w:finish();  w:abort() */
#include "lua_util.h"
#include "../core/io/safetensors.h"
#include <stdlib.h>
#include <string.h>

#define FILE_MT "accel.SafetensorsFile"
#define WRITER_MT "accel.SafetensorsWriter"

static const char *const dtype_tags[DT_COUNT] = {"F32", "F64", "BF16", "F16", "F8_E4M3", "F8_E5M2", "I64", "I32", "U8", "BOOL"};

typedef struct {
    SafetensorsFile *f; /* NULL once closed */
} FileUD;

typedef struct {
    SafetensorsWriter *w; /* NULL once finished or aborted */
} WriterUD;

static SafetensorsFile *check_file(lua_State *L) {
    FileUD *u = luaL_checkudata(L, 1, FILE_MT);
    if (!u->f) lu_error(L, "safetensors: the file was closed");
    return u->f;
}

static int l_open(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    FileUD *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->f = NULL;
    luaL_setmetatable(L, FILE_MT);
    if (!(u->f = safetensors_open(path))) return lu_core_error(L);
    return 1;
}

static int f_entries(lua_State *L) {
    SafetensorsFile *f = check_file(L);
    int n = safetensors_count(f);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        const char *name;
        DType dt;
        int ndim;
        const int64_t *shape;
        safetensors_entry(f, i, &name, &dt, &ndim, &shape);
        lua_createtable(L, 0, 3);
        lua_pushstring(L, name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, dtype_tags[dt]);
        lua_setfield(L, -2, "dtype");
        lua_createtable(L, ndim, 0);
        for (int d = 0; d < ndim; d++) lua_pushinteger(L, shape[d]), lua_rawseti(L, -2, d + 1);
        lua_setfield(L, -2, "shape");
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int f_read(lua_State *L) {
    SafetensorsFile *f = check_file(L);
    const char *name = luaL_checkstring(L, 2);
    int i = safetensors_find(f, name);
    if (i < 0) return lu_error(L, "safetensors: the file has no tensor '%s'", name);
    int64_t first = lua_isnoneornil(L, 3) ? 0 : (int64_t)luaL_checkinteger(L, 3);
    int64_t count = lua_isnoneornil(L, 4) ? -1 : (int64_t)luaL_checkinteger(L, 4);
    if (count < -1) return lu_error(L, "safetensors: count must be >= 0, got %lld", (long long)count);
    lu_push_tensor(L, safetensors_read(f, i, first, count));
    return 1;
}

static int f_close(lua_State *L) {
    FileUD *u = luaL_checkudata(L, 1, FILE_MT);
    safetensors_close(u->f);
    u->f = NULL;
    return 0;
}

static int f_tostring(lua_State *L) {
    FileUD *u = luaL_checkudata(L, 1, FILE_MT);
    lua_pushstring(L, u->f ? "accel.SafetensorsFile" : "accel.SafetensorsFile(closed)");
    return 1;
}

/* ---- writer ---- */

/* The spec at the top of the stack: the tensor itself, or a header-only
 * Tensor made from {dtype = "F32", shape = {...}} in *slot. */
static Tensor *spec_of(lua_State *L, const char *name, Tensor *slot) {
    Tensor *t = lu_tensor_meta(L, -1);
    if (t) return t;
    memset(slot, 0, sizeof *slot);
    lua_getfield(L, -1, "dtype");
    const char *tag = lua_tostring(L, -1);
    int dt = -1;
    for (int k = 0; tag && k < DT_COUNT; k++)
        if (strcmp(tag, dtype_tags[k]) == 0) dt = k;
    lua_pop(L, 1);
    if (dt < 0) lu_error(L, "safetensors: '%s': dtype must be one of F32, F64, BF16, ..., got %s", name, tag ? tag : "nil");
    lua_getfield(L, -1, "shape");
    if (!lua_istable(L, -1)) lu_error(L, "safetensors: '%s': shape must be a list", name);
    int nd = (int)lua_rawlen(L, -1);
    if (nd > TENSOR_MAX_DIMS) lu_error(L, "safetensors: '%s': at most %d dims", name, TENSOR_MAX_DIMS);
    slot->dtype = (DType)dt, slot->device = (Device){DEV_CPU, 0}, slot->ndim = nd, slot->numel = 1;
    for (int d = 0; d < nd; d++) {
        lua_rawgeti(L, -1, d + 1);
        lua_Integer v = lua_tointeger(L, -1);
        if (v < 0 || !lua_isinteger(L, -1)) lu_error(L, "safetensors: '%s': shape entries must be integers >= 0", name);
        slot->shape[d] = v, slot->numel *= v;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return slot;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The names of table idx (string keys, tensor values), sorted, in a userdata kept on the stack. */
static const char **spec_names(lua_State *L, int idx, int *n) {
    int count = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) != LUA_TSTRING) lu_error(L, "safetensors: tensor names must be strings");
        if (!lu_tensor_meta(L, -1) && !lua_istable(L, -1))
            lu_error(L, "safetensors: '%s' is neither a tensor nor {dtype, shape}", lua_tostring(L, -2));
        count++;
        lua_pop(L, 1);
    }
    const char **names = lua_newuserdatauv(L, sizeof(char *) * (size_t)(count ? count : 1), 0);
    int k = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        names[k++] = lua_tostring(L, -2);
        lua_pop(L, 1);
    }
    qsort(names, (size_t)count, sizeof *names, cmp_name);
    *n = count;
    return names;
}

static int l_writer(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    int n;
    const char **names = spec_names(L, 2, &n); /* stack 4 (3 is the metadata) */
    Tensor **specs = lua_newuserdatauv(L, sizeof(Tensor *) * (size_t)(n ? n : 1), 0);
    Tensor *slots = lua_newuserdatauv(L, sizeof(Tensor) * (size_t)(n ? n : 1), 0);
    lua_createtable(L, n, 0); /* the order, kept with the writer */
    for (int i = 0; i < n; i++) {
        lua_getfield(L, 2, names[i]);
        specs[i] = spec_of(L, names[i], &slots[i]);
        lua_pop(L, 1);
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -2, i + 1);
    }
    const char **mk, **mv;
    int nm = lu_string_map(L, 3, &mk, &mv, "safetensors");
    WriterUD *u = lua_newuserdatauv(L, sizeof *u, 1);
    u->w = NULL;
    luaL_setmetatable(L, WRITER_MT);
    lua_pushvalue(L, -3); /* the order (below the metadata's arrays) */
    lua_setiuservalue(L, -2, 1);
    if (!(u->w = safetensors_writer_open(path, names, specs, n, mk, mv, nm))) return lu_core_error(L);
    return 1;
}

static SafetensorsWriter *check_writer(lua_State *L) {
    WriterUD *u = luaL_checkudata(L, 1, WRITER_MT);
    if (!u->w) lu_error(L, "safetensors: the writer was finished or aborted");
    return u->w;
}

static int w_names(lua_State *L) {
    luaL_checkudata(L, 1, WRITER_MT);
    lua_getiuservalue(L, 1, 1);
    return 1;
}

static int w_put(lua_State *L) {
    WriterUD *u = luaL_checkudata(L, 1, WRITER_MT);
    if (safetensors_writer_put(check_writer(L), lu_check_tensor(L, 2)) < 0) {
        safetensors_writer_abort(u->w);
        u->w = NULL;
        return lu_core_error(L);
    }
    return 0;
}

static int w_finish(lua_State *L) {
    WriterUD *u = luaL_checkudata(L, 1, WRITER_MT);
    int rc = safetensors_writer_finish(check_writer(L));
    u->w = NULL;
    return rc < 0 ? lu_core_error(L) : 0;
}

static int w_abort(lua_State *L) {
    WriterUD *u = luaL_checkudata(L, 1, WRITER_MT);
    safetensors_writer_abort(u->w);
    u->w = NULL;
    return 0;
}

static int w_tostring(lua_State *L) {
    lua_pushstring(L, "accel.SafetensorsWriter");
    return 1;
}

void lu_open_safetensors(lua_State *L, int m) {
    static const luaL_Reg file_methods[] = {{"entries", f_entries}, {"read", f_read}, {"close", f_close}, {NULL, NULL}};
    lu_new_class(L, FILE_MT, file_methods, f_close, f_tostring);
    static const luaL_Reg writer_methods[] = {
        {"names", w_names}, {"put", w_put}, {"finish", w_finish}, {"abort", w_abort}, {NULL, NULL}};
    lu_new_class(L, WRITER_MT, writer_methods, w_abort, w_tostring);
    static const luaL_Reg fns[] = {{"st_open", l_open}, {"st_writer", l_writer}, {NULL, NULL}};
    lu_register_c(L, m, fns);
}
