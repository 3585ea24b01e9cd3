/* accel.h: the Lua face of the runtime. luaopen_accel builds the `accel`
 * module (also loadable as build/accel.so from any Lua 5.4). */
#ifndef ACCEL_BINDINGS_H
#define ACCEL_BINDINGS_H

#include "lua_compat.h"

int luaopen_accel(lua_State *L);

#endif
