/* data_lua.c: accel._C functions behind accel.data (bindings/lua/accel/data):
 * the loader's per-epoch permutation drawn without touching the global
 * generator, the default seed drawn from it, its batches' indices, and the
 * file readers of core/io/datafiles.h (IDX, CSV, llm.c token files). */
#include "lua_util.h"
#include "../core/io/datafiles.h"
#include <string.h>

/* Blocks of the Philox stream between two epochs' permutations: epoch e of
 * seed s shuffles with the stream (s, e * 2^40), so epochs never share
 * draws for data sets below 2^41 samples. */
#define EPOCH_BLOCKS ((uint64_t)1 << 40)

static const Device CPU = {DEV_CPU, 0};

/* data_randperm(n, seed, epoch) -> int64 permutation of 0..n-1 */
static int c_randperm(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1), seed = luaL_checkinteger(L, 2), epoch = luaL_checkinteger(L, 3);
    if (epoch < 0 || epoch >= ((lua_Integer)1 << 24)) return lu_error(L, "DataLoader: epoch must be in [0, 2^24), got %lld", (long long)epoch);
    lu_push_tensor(L, rng_randperm_at((uint64_t)seed, (uint64_t)epoch * EPOCH_BLOCKS, n, DT_I64));
    return 1;
}

/* data_draw_seed() -> an integer in [0, 2^53) from the global generator:
 * what LuaJIT's numbers hold exactly, under Lua 5.4 too, so that a script
 * shuffles in the same order under either interpreter */
static int c_draw_seed(lua_State *L) {
    int64_t one = 1;
    Tensor *t = rng_randint(0, (int64_t)1 << 53, &one, 1, DT_I64);
    if (!t) return lu_core_error(L);
    int64_t v = 0;
    int rc = tensor_to_host(t, &v); /* exact: a double would round it */
    tensor_release(t);
    if (rc < 0) return lu_core_error(L);
    lua_pushinteger(L, v);
    return 1;
}

/* data_batch_indices(order, start, len, n) -> a new int64 (len) tensor on
 * the host: positions start .. start + len - 1 of an epoch's order, taken
 * modulo n (a padded batch wraps to the start); order: the epoch's
 * permutation (int64, n), or nil for 0 .. n-1, never built. One call per
 * batch, exact for every int64 (arange goes through doubles). */
static int c_batch_indices(lua_State *L) {
    Tensor *order = lua_isnil(L, 1) ? NULL : lu_check_tensor(L, 1);
    lua_Integer start = luaL_checkinteger(L, 2), len = luaL_checkinteger(L, 3), n = luaL_checkinteger(L, 4);
    if (start < 0 || len < 1 || n < 1 || (order && (order->dtype != DT_I64 || order->ndim != 1 || order->shape[0] != n)))
        return lu_error(L, "DataLoader: no batch of %lld positions from %lld in an order of %lld", (long long)len,
                        (long long)start, (long long)n);
    int64_t count = len;
    Tensor *o = order ? tensor_contiguous(order) : NULL, *t = order && !o ? NULL : tensor_empty(&count, 1, DT_I64, CPU);
    HostMap mo, mt;
    const int64_t *src = o ? tensor_host_map(o, HOST_READ, &mo) : NULL;
    int64_t *dst = t && (src || !o) ? tensor_host_map(t, HOST_WRITE, &mt) : NULL;
    for (int64_t k = 0, p = start % n; dst && k < count; k++, p = p + 1 == n ? 0 : p + 1) dst[k] = src ? src[p] : p;
    if (src) tensor_host_unmap(&mo);
    tensor_release(o);
    if (dst) t = tensor_host_finish(t, &mt);
    else tensor_release(t), t = NULL;
    lu_push_tensor(L, t);
    return 1;
}

static int c_read_idx(lua_State *L) {
    lu_push_tensor(L, idx_read(luaL_checkstring(L, 1)));
    return 1;
}

/* ---- CSV: csv_open, then csv_read of the fields the Lua side resolved ---- */

#define CSV_MT "accel.CsvFile"

static CsvFile **check_csv(lua_State *L, int idx) { return luaL_checkudata(L, idx, CSV_MT); }

static int csv_gc(lua_State *L) {
    CsvFile **box = check_csv(L, 1);
    csv_close(*box);
    *box = NULL;
    return 0;
}

/* csv_open(path, delimiter, header) -> handle, column count, names (list) or nil */
static int c_csv_open(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    size_t dl;
    const char *delim = luaL_checklstring(L, 2, &dl);
    if (dl != 1) return lu_error(L, "CSV: delimiter must be one character, got \"%s\"", delim);
    bool header = lua_toboolean(L, 3); /* (read before the box is pushed) */
    CsvFile **box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = NULL;
    luaL_getmetatable(L, CSV_MT);
    lua_setmetatable(L, -2); /* from here on __gc closes the file whatever happens */
    if (!(*box = csv_open(path, delim[0], header))) return lu_core_error(L);
    int ncols = csv_columns(*box);
    lua_pushinteger(L, ncols);
    if (!csv_column_name(*box, 0)) {
        lua_pushnil(L);
        return 3;
    }
    lua_createtable(L, ncols, 0);
    for (int i = 0; i < ncols; i++) {
        lua_pushstring(L, csv_column_name(*box, i));
        lua_rawseti(L, -2, i + 1);
    }
    return 3;
}

/* csv_read(handle, fields) -> one tensor per field, and closes the handle.
 * fields[i] = {cols = {0-based column, ...}, dtype = dtype, vector = bool}. */
static int c_csv_read(lua_State *L) {
    CsvFile **box = check_csv(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    if (!*box) return lu_error(L, "CSV: this file was read already");
    int n = (int)luaL_len(L, 2), total = 0;
    if (n < 1) return lu_error(L, "CSV: no fields asked for");
    for (int i = 1; i <= n; i++) {
        if (lua_rawgeti(L, 2, i) != LUA_TTABLE || lua_getfield(L, -1, "cols") != LUA_TTABLE)
            return lu_error(L, "CSV: field %d: expected {cols = {...}, dtype = ...}", i);
        total += (int)luaL_len(L, -1);
        lua_pop(L, 2);
    }
    /* scratch as userdata: collected even when an error below jumps out */
    CsvField *fields = lua_newuserdatauv(L, (size_t)n * sizeof *fields, 0);
    int *cols = lua_newuserdatauv(L, (size_t)(total > 0 ? total : 1) * sizeof *cols, 0);
    Tensor **ts = lua_newuserdatauv(L, (size_t)n * sizeof *ts, 0);
    for (int i = 0, used = 0; i < n; i++) {
        lua_rawgeti(L, 2, i + 1);
        int spec = lua_gettop(L);
        lua_getfield(L, spec, "cols");
        int k = (int)luaL_len(L, -1);
        fields[i].cols = cols + used;
        fields[i].ncols = k;
        for (int j = 1; j <= k; j++) {
            lua_rawgeti(L, -1, j);
            int isnum = 0;
            lua_Integer c = lua_tointegerx(L, -1, &isnum);
            if (!isnum || c < 0 || c >= csv_columns(*box)) return lu_error(L, "CSV: field %d: bad column index", i + 1);
            cols[used++] = (int)c;
            lua_pop(L, 1);
        }
        lua_getfield(L, spec, "dtype");
        fields[i].dtype = (DType)lu_check_dtype(L, lua_gettop(L));
        lua_getfield(L, spec, "vector");
        fields[i].vector = lua_toboolean(L, -1);
        lua_settop(L, spec - 1);
    }
    int rc = csv_read_fields(*box, fields, n, ts);
    csv_close(*box);
    *box = NULL;
    if (rc < 0) return lu_core_error(L);
    luaL_checkstack(L, n, "CSV: too many fields");
    for (int i = 0; i < n; i++) lu_push_tensor(L, ts[i]);
    return n;
}

static int c_token_map(lua_State *L) {
    lu_push_tensor(L, tokenfile_map(luaL_checkstring(L, 1)));
    return 1;
}

/* The token tensor of token_map: uint8 (ntok, 2), contiguous. */
static Tensor *check_tokens(lua_State *L, int idx) {
    Tensor *t = lu_check_tensor(L, idx);
    if (t->dtype != DT_U8 || t->ndim != 2 || t->shape[1] != 2 || !tensor_is_contiguous(t) || t->device.type != DEV_CPU)
        lu_error(L, "TokenFile: expected the uint8 (ntok, 2) token tensor of a TokenFile, got %s %s", dtype_name(t->dtype),
                 tensor_shape_str(t));
    return t;
}

/* token_blocks(tokens, starts, T) -> x, y: int64 (B, T) with starts int64 (B) */
static int c_token_blocks(lua_State *L) {
    Tensor *tok = check_tokens(L, 1), *starts = lu_check_tensor(L, 2);
    lua_Integer T = luaL_checkinteger(L, 3);
    if (starts->dtype != DT_I64 || starts->ndim != 1) return lu_error(L, "TokenFile: block starts must be a 1-D int64 tensor");
    if (T < 0) return lu_error(L, "TokenFile: block length must be >= 0, got %lld", (long long)T);
    Tensor *s = tensor_contiguous(starts), *x = NULL, *y = NULL;
    HostMap m;
    const int64_t *hs = s ? tensor_host_map(s, HOST_READ, &m) : NULL;
    int rc = hs ? tokenfile_blocks(tok, hs, s->shape[0], T, &x, &y) : -1;
    if (hs) tensor_host_unmap(&m);
    tensor_release(s);
    if (rc < 0) return lu_core_error(L);
    lu_push_tensor(L, x);
    lu_push_tensor(L, y);
    return 2;
}

/* token_ids(tokens, start, count) -> int64 (count): ids [start, start + count), 0-based */
static int c_token_ids(lua_State *L) {
    Tensor *tok = check_tokens(L, 1);
    lua_Integer start = luaL_checkinteger(L, 2), count = luaL_checkinteger(L, 3);
    if (start < 0 || count < 0 || start > tok->shape[0] || count > tok->shape[0] - start) /* no start + count: it may overflow */
        return lu_error(L, "TokenFile: %lld tokens from token %lld are out of range (the file has %lld)", (long long)count,
                        (long long)((uint64_t)start + 1), (long long)tok->shape[0]);
    int64_t n = count;
    Tensor *t = tensor_empty(&n, 1, DT_I64, CPU);
    HostMap mt, md;
    const uint8_t *src = t ? tensor_host_map(tok, HOST_READ, &mt) : NULL;
    int64_t *dst = src ? tensor_host_map(t, HOST_WRITE, &md) : NULL;
    if (src && dst) {
        src += 2 * start;
        for (int64_t i = 0; i < n; i++) dst[i] = src[2 * i] | src[2 * i + 1] << 8;
    }
    if (src) tensor_host_unmap(&mt);
    if (dst) t = tensor_host_finish(t, &md);
    else tensor_release(t), t = NULL;
    lu_push_tensor(L, t);
    return 1;
}

void lu_open_data(lua_State *L, int m) {
    static const luaL_Reg fns[] = {{"data_randperm", c_randperm}, {"data_draw_seed", c_draw_seed},
                                   {"data_batch_indices", c_batch_indices},
                                   {"read_idx", c_read_idx},      {"csv_open", c_csv_open},
                                   {"csv_read", c_csv_read},
                                   {"token_map", c_token_map},    {"token_blocks", c_token_blocks},
                                   {"token_ids", c_token_ids},    {NULL, NULL}};
    lu_register_c(L, m, fns);
    luaL_newmetatable(L, CSV_MT);
    lua_pushcfunction(L, csv_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
}
