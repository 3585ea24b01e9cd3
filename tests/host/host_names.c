/* host_names.c: a host built with -Wl,-E (as docs/embedding.md says) that
 * defines functions with names accel or its libraries use: zlib's crc32,
 * and accel's internal crc32c, tensor_new, cuda_backend_count,
 * dist_nccl_for_tensor. accel must use its own (and zlib's) anyway: a
 * checkpoint saved and loaded, the CRC-32 and CRC-32C check values of
 * "123456789" (cbf43926, e3069283), no CUDA device made up by the host's
 * cuda_backend_count. Run: ./host_names DIR (DIR
 * holds accel.so); prints the script's lines, "error: ..." on failure. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

unsigned long crc32(unsigned long crc, const unsigned char *data, unsigned len) {
    (void)data, (void)len;
    return crc ^ 0x5a5a5a5aUL;
}
uint32_t crc32c(uint32_t crc, const void *data, size_t n) {
    (void)data, (void)n;
    return crc ^ 1u;
}
void *tensor_new(void) { return NULL; }
int cuda_backend_count(char *why, size_t n) {
    (void)why, (void)n;
    return 4;
}
void *dist_nccl_for_tensor(void *group, const void *t) {
    (void)t;
    return group;
}

static const char *const SCRIPT =
    "local accel = require('accel')\n"
    "local dir = os.tmpname(); os.remove(dir)\n"
    "local acc = accel.Accelerator{cpu = true}\n"
    "local model = acc:prepare(accel.nn.Linear(3, 2))\n"
    "acc:save_state(dir)\n"
    "acc:load_state(dir)\n"
    "accel._C.fs_remove_tree(dir)\n"
    "print('checkpoint saved and loaded')\n"
    "print('cuda available', accel.cuda.is_available(), accel.device_count('cuda'))\n"
    "print(('crc32c %x'):format(accel._C.crc32c('123456789')))\n"
    "local f = io.open(dir, 'wb'); f:write('123456789'); f:close()\n"
    "print(('crc32 of a file %x'):format(accel._C.fs_crc32(dir)))\n"
    "os.remove(dir)\n";

int main(int argc, char **argv) {
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lua_getglobal(L, "package");
    lua_pushfstring(L, "%s/?.so", argc > 1 ? argv[1] : ".");
    lua_setfield(L, -2, "cpath");
    lua_pop(L, 1);
    int rc = luaL_dostring(L, SCRIPT);
    if (rc != LUA_OK) printf("error: %s\n", lua_tostring(L, -1));
    lua_close(L);
    return rc == LUA_OK ? 0 : 1;
}
