/* fp8_lua.c: accel._C's fp8 recipe kernels (core/fp8.h), used by
 * accel.fp8: fp8_quantize, fp8_dequantize, fp8_amax, fp8_update_scale, fp8_scaled_mm, and
 * fp8_bits (the bytes of a 1-byte tensor as another 1-byte dtype, as
 * PyTorch's t.view(torch.uint8)).
 * Scales travel as Lua numbers holding float32 values. */
#include "lua_util.h"
#include "../core/fp8.h"
#include <stdlib.h>
#include <string.h>

static DType check_fp8_dtype(lua_State *L, int idx) {
    DType dt = (DType)lu_check_dtype(L, idx);
    if (dt != DT_F8E4M3 && dt != DT_F8E5M2)
        lu_error(L, "fp8: format must be float8_e4m3fn or float8_e5m2, got %s", dtype_name(dt));
    return dt;
}

/* fp8_quantize(x, scale, dtype) -> codes, amax of x */
static int c_quantize(lua_State *L) {
    Tensor *x = lu_check_tensor(L, 1);
    float scale = (float)luaL_checknumber(L, 2);
    double amax = 0;
    Tensor *q = fp8_quantize(x, scale, check_fp8_dtype(L, 3), &amax);
    if (!q) return lu_core_error(L);
    lu_push_tensor(L, q);
    lua_pushnumber(L, amax);
    return 2;
}

/* fp8_dequantize(q, scale_inv) -> float32 decode(q) * scale_inv */
static int c_dequantize(lua_State *L) {
    Tensor *q = fp8_dequantize(lu_check_tensor(L, 1), (float)luaL_checknumber(L, 2));
    if (!q) return lu_core_error(L);
    lu_push_tensor(L, q);
    return 1;
}

/* fp8_amax(x) -> max |x| */
static int c_amax(lua_State *L) {
    double amax;
    if (fp8_amax(lu_check_tensor(L, 1), &amax) < 0) return lu_core_error(L);
    lua_pushnumber(L, amax);
    return 1;
}

/* fp8_update_scale(amax, dtype, margin, prev_scale) -> scale, scale_inv */
static int c_update_scale(lua_State *L) {
    double amax = luaL_checknumber(L, 1);
    DType dt = check_fp8_dtype(L, 2);
    lua_Integer margin = luaL_checkinteger(L, 3);
    if (margin < 0 || margin > 64) return lu_error(L, "fp8: margin must be an integer in 0..64, got %lld", (long long)margin);
    float scale, inv;
    fp8_update_scale(amax, dt, (int)margin, (float)luaL_checknumber(L, 4), &scale, &inv);
    lua_pushnumber(L, scale);
    lua_pushnumber(L, inv);
    return 2;
}

/* fp8_scaled_mm(a, a_scale_inv, b, b_scale_inv) -> float32 (M, N), and
 * whether the device's native fp8 GEMM ran it (false: emulated) */
static int c_scaled_mm(lua_State *L) {
    bool native = false;
    Tensor *r = fp8_scaled_mm(lu_check_tensor(L, 1), (float)luaL_checknumber(L, 2), lu_check_tensor(L, 3),
                              (float)luaL_checknumber(L, 4), &native);
    if (!r) return lu_core_error(L);
    lu_push_tensor(L, r);
    lua_pushboolean(L, native);
    return 2;
}

/* fp8_bits(t, dtype) -> a contiguous copy of t's bytes as dtype (uint8,
 * float8_e4m3fn, float8_e5m2; t one of them too) */
static int c_bits(lua_State *L) {
    Tensor *t = lu_check_tensor(L, 1);
    DType dt = (DType)lu_check_dtype(L, 2);
    if (dtype_size(t->dtype) != 1 || dtype_size(dt) != 1 || t->dtype == DT_BOOL || dt == DT_BOOL)
        return lu_error(L, "fp8_bits: needs uint8 / float8 dtypes, got %s -> %s", dtype_name(t->dtype), dtype_name(dt));
    /* the bytes travel through the host: read t's, write them as r's */
    Tensor *r = tensor_empty(t->shape, t->ndim, dt, t->device);
    void *buf = r ? malloc(t->numel ? (size_t)t->numel : 1) : NULL;
    if (r && !buf) accel_fail("fp8_bits: out of memory");
    int rc = buf ? tensor_to_host(t, buf) : -1;
    if (rc == 0) rc = tensor_from_host(r, buf);
    free(buf);
    if (rc < 0) {
        tensor_release(r);
        return lu_core_error(L);
    }
    lu_push_tensor(L, r);
    return 1;
}

void lu_open_fp8(lua_State *L, int m) {
    static const luaL_Reg fns[] = {{"fp8_quantize", c_quantize}, {"fp8_dequantize", c_dequantize}, {"fp8_amax", c_amax},
                                   {"fp8_update_scale", c_update_scale}, {"fp8_scaled_mm", c_scaled_mm},
                                   {"fp8_bits", c_bits},
                                   {NULL, NULL}};
    lu_register_c(L, m, fns);
}
