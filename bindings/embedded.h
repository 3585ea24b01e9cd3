/* embedded.h: the Lua library (the .lua files under bindings/lua/) compiled into the
 * binary. The definition is generated at build time by scripts/embed-lua.lua
 * into build/gen/embedded_lua.c. */
#ifndef ACCEL_BINDINGS_EMBEDDED_H
#define ACCEL_BINDINGS_EMBEDDED_H

#include "lua_compat.h"

/* Registers package.preload[name] for every embedded module, e.g.
 * bindings/lua/accel/nn.lua -> "accel.nn" (accel/x/init.lua -> "accel.x").
 * Each loader compiles the source (text only, chunk name
 * "=[accel] <name>") and calls it with the module name. Call once from
 * luaopen_accel; needs the package library to be open. */
void accel_preload_embedded(lua_State *L);

#endif
