/* attention_lua.c: accel._C.scaled_dot_product_attention(q, k, v, scale,
 * is_causal), the fused kernel behind F.scaled_dot_product_attention
 * (nn/functional.lua uses it when no attn_mask and no dropout are given). */
#include "lua_util.h"

static int c_sdpa(lua_State *L) {
    Tensor *q = lu_check_tensor(L, 1), *k = lu_check_tensor(L, 2), *v = lu_check_tensor(L, 3);
    double scale = luaL_checknumber(L, 4);
    lu_push_tensor(L, op_scaled_dot_product_attention(q, k, v, scale, lua_toboolean(L, 5)));
    return 1;
}

void lu_open_attention(lua_State *L, int m) {
    static const luaL_Reg fns[] = {{"scaled_dot_product_attention", c_sdpa}, {NULL, NULL}};
    lu_register_c(L, m, fns);
}
