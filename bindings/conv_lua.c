/* conv_lua.c: accel._C.conv2d and accel._C.max_pool2d, the C side of
 * accel.nn.functional's conv2d / max_pool2d / avg_pool2d. Window parameters
 * arrive as an integer or an {h, w} pair; conv2d's padding may also be
 * "valid", "same" (stride 1 only; an odd total goes bottom/right, as in
 * PyTorch) or four values {top, bottom, left, right}. */
#include "lua_util.h"
#include <string.h>

/* An integer (or integral float) at the stack top, else a clear error. */
static int64_t int_at_top(lua_State *L, const char *op, const char *name) {
    int ok = 0;
    lua_Integer v = lua_tointegerx(L, -1, &ok);
    if (!ok) lu_error(L, "%s: %s must be an integer or a list of integers, got a %s", op, name, luaL_typename(L, -1));
    lua_pop(L, 1);
    return (int64_t)v;
}

/* An integer (repeated n times) or a list of exactly n (or of alt, when
 * alt is not 0) integers at idx into out; nil gives def. Returns the count
 * read (every entry of out up to it is set). */
static int int_list(lua_State *L, int idx, const char *op, const char *name, int n, int alt, int64_t def, int64_t *out) {
    if (lua_isnoneornil(L, idx)) {
        for (int i = 0; i < n; i++) out[i] = def;
        return n;
    }
    if (!lua_istable(L, idx)) {
        lua_pushvalue(L, idx);
        int64_t v = int_at_top(L, op, name);
        for (int i = 0; i < n; i++) out[i] = v;
        return n;
    }
    int len = (int)lua_rawlen(L, idx); /* 0 for {} and for a table of named fields ({kernel_size = 2}) */
    if (len != n && (alt == 0 || len != alt)) {
        const char *got = len == 0 ? "a table with no list entries" : lua_pushfstring(L, "a list of %d", len);
        if (alt) lu_error(L, "%s: %s must be an integer or a list of %d or %d integers, got %s", op, name, n, alt, got);
        lu_error(L, "%s: %s must be an integer or a pair {h, w}, got %s", op, name, got);
    }
    for (int i = 0; i < len; i++) {
        lua_rawgeti(L, idx, i + 1);
        out[i] = int_at_top(L, op, name);
    }
    return len;
}

/* conv2d padding at idx: pad_lo (top, left), pad_hi (bottom, right). */
static void conv_padding(lua_State *L, int idx, const Tensor *w, const int64_t stride[2], const int64_t dil[2],
                         int64_t lo[2], int64_t hi[2]) {
    if (lua_type(L, idx) == LUA_TSTRING) {
        const char *s = lua_tostring(L, idx);
        if (strcmp(s, "valid") == 0) {
            lo[0] = lo[1] = hi[0] = hi[1] = 0;
            return;
        }
        if (strcmp(s, "same") != 0) lu_error(L, "conv2d: padding must be \"valid\", \"same\" or integers, got \"%s\"", s);
        if (stride[0] != 1 || stride[1] != 1) lu_error(L, "conv2d: padding=\"same\" is not supported for strided convolutions");
        if (w->ndim != 4) return; /* op_conv2d reports the weight's shape */
        for (int d = 0; d < 2; d++) {
            if (dil[d] < 1 || w->shape[2 + d] < 1) return; /* op_conv2d reports them */
            int64_t total = size_mul(dil[d], w->shape[2 + d] - 1);
            if (total < 0) lu_error(L, "conv2d: padding=\"same\" with dilation %lld is past 2^63", (long long)dil[d]);
            lo[d] = total / 2, hi[d] = total - total / 2;
        }
        return;
    }
    int64_t p[4];
    if (int_list(L, idx, "conv2d", "padding", 2, 4, 0, p) == 2) {
        lo[0] = hi[0] = p[0], lo[1] = hi[1] = p[1];
    } else {
        lo[0] = p[0], hi[0] = p[1], lo[1] = p[2], hi[1] = p[3];
    }
}

/* conv2d(input, weight, bias|nil, stride, padding, dilation, groups) */
static int c_conv2d(lua_State *L) {
    Tensor *x = lu_check_tensor(L, 1), *w = lu_check_tensor(L, 2);
    Tensor *b = lua_isnoneornil(L, 3) ? NULL : lu_check_tensor(L, 3);
    int64_t stride[2], dil[2], lo[2], hi[2], groups = 1;
    int_list(L, 4, "conv2d", "stride", 2, 0, 1, stride);
    int_list(L, 6, "conv2d", "dilation", 2, 0, 1, dil);
    conv_padding(L, 5, w, stride, dil, lo, hi);
    int_list(L, 7, "conv2d", "groups", 1, 0, 1, &groups);
    lu_push_tensor(L, op_conv2d_padded(x, w, b, stride, lo, hi, dil, groups));
    return 1;
}

/* max_pool2d(input, kernel_size, stride|nil, padding, dilation, ceil_mode, return_indices) */
static int c_max_pool2d(lua_State *L) {
    Tensor *x = lu_check_tensor(L, 1);
    int64_t k[2], s[2], p[2], d[2];
    if (lua_isnoneornil(L, 2)) lu_error(L, "max_pool2d: kernel_size is required");
    int_list(L, 2, "max_pool2d", "kernel_size", 2, 0, 1, k);
    int_list(L, 3, "max_pool2d", "stride", 2, 0, 1, s);
    if (lua_isnoneornil(L, 3)) memcpy(s, k, sizeof s); /* stride defaults to kernel_size */
    int_list(L, 4, "max_pool2d", "padding", 2, 0, 0, p);
    int_list(L, 5, "max_pool2d", "dilation", 2, 0, 1, d);
    const bool want_idx = lua_toboolean(L, 7);
    Tensor *idx = NULL;
    Tensor *y = op_max_pool2d(x, k, s, p, d, lua_toboolean(L, 6), want_idx ? &idx : NULL);
    lu_push_tensor(L, y);
    if (!want_idx) return 1;
    lu_push_tensor(L, idx);
    return 2;
}

void lu_open_conv(lua_State *L, int m) {
    static const luaL_Reg fns[] = {{"conv2d", c_conv2d}, {"max_pool2d", c_max_pool2d}, {NULL, NULL}};
    lu_register_c(L, m, fns);
}
