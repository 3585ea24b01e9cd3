/* http_lua.h: registers accel._C.http_request (http_lua.c, libcurl); called
 * by lu_open_tracking, whose trackers are its only user. */
#ifndef ACCEL_HTTP_LUA_H
#define ACCEL_HTTP_LUA_H

#include "lua_compat.h"

void lu_open_http(lua_State *L, int module_idx);

#endif
