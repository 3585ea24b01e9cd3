/* host.c: a C application that trains with accel inside its own Lua states
 * (docs/embedding.md). Two states, one after the other, each loading accel
 * through require (accel.so on package.cpath); the host also defines a
 * crc32c of its own, which must not replace accel's. Build and run:
 *   cc -I/usr/include/lua5.4 examples/embed/host.c -o host -llua5.4 -Wl,-E
 *   ./host build              (the folder holding accel.so)
 * Prints one line per state and exits 0 when both trained. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>

/* The host's own function of a name accel uses internally. */
uint32_t crc32c(uint32_t crc, const void *data, size_t n) {
    (void)data, (void)n;
    return crc ^ 0xdeadbeefu;
}

static const char *const TRAIN =
    "local accel = require('accel')\n"
    "local nn, optim = accel.nn, accel.optim\n"
    "accel.set_seed(0)\n"
    "local model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))\n"
    "local opt = optim.AdamW(model:parameters(), {lr = 1e-2})\n"
    "local x, y = accel.randn(64, 4), accel.randint(0, 2, {64})\n"
    "local first, last\n"
    "for step = 1, 50 do\n"
    "  opt:zero_grad()\n"
    "  local loss = nn.functional.cross_entropy(model(x), y)\n"
    "  loss:backward()\n"
    "  opt:step()\n"
    "  first, last = first or loss:item(), loss:item()\n"
    "end\n"
    "assert(accel._C.crc32c('123456789') == 0xE3069283, 'the host replaced accel.crc32c')\n"
    "return first, last\n";

/* One state: load accel, train, close (tensors and all freed by lua_close). */
static int train_in_new_state(const char *cpath, int n) {
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lua_getglobal(L, "package");
    lua_pushfstring(L, "%s/?.so", cpath);
    lua_setfield(L, -2, "cpath");
    lua_pop(L, 1);
    int rc = luaL_dostring(L, TRAIN);
    if (rc == LUA_OK) printf("state %d: loss %.4f -> %.4f\n", n, lua_tonumber(L, -2), lua_tonumber(L, -1));
    else fprintf(stderr, "state %d: %s\n", n, lua_tostring(L, -1));
    lua_close(L);
    return rc == LUA_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *cpath = argc > 1 ? argv[1] : ".";
    return train_in_new_state(cpath, 1) || train_in_new_state(cpath, 2);
}
