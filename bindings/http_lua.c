/* http_lua.c: accel._C.http_request, one blocking HTTP(S) request through
 * libcurl, for the trackers that talk to a server (the MLflow tracker in
 * bindings/lua/accel/tracking.lua).
 *
 *   status, body = _C.http_request(method, url, body_or_nil, headers_or_nil, timeout_s)
 *   nil, message = ...   when no HTTP answer came (refused, DNS, timeout, TLS)
 *
 * headers: a list of "Name: value" strings. timeout_s bounds the whole
 * request (connect included), so a dead or hung server cannot stall the
 * caller. The transport failure message names the method, the URL and
 * curl's own explanation; argument errors raise with the user's file:line.
 * Only http:// and https:// URLs are followed (no redirects to other
 * protocols); answers above MAX_BODY bytes are refused. */
#include "http_lua.h"
#include "lua_util.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#define HTTP_MT "accel.HttpRequest"
#define MAX_BODY ((size_t)256 << 20)

/* The state of one request, in a userdata so that a Lua error raised while
 * it is set up still frees it (through __gc). */
typedef struct {
    CURL *curl;
    struct curl_slist *headers;
    char *body;
    size_t len, cap;
    int too_big;
    char err[CURL_ERROR_SIZE];
} HttpReq;

static int req_gc(lua_State *L) {
    HttpReq *r = luaL_checkudata(L, 1, HTTP_MT);
    if (r->curl) curl_easy_cleanup(r->curl);
    curl_slist_free_all(r->headers);
    free(r->body);
    r->curl = NULL;
    r->headers = NULL;
    r->body = NULL;
    return 0;
}

/* CURLOPT_WRITEFUNCTION: appends to r->body (returning less than asked
 * makes curl stop with CURLE_WRITE_ERROR). */
static size_t on_data(char *data, size_t size, size_t n, void *user) {
    HttpReq *r = user;
    size_t add = size * n;
    if (add > MAX_BODY - r->len) {
        r->too_big = 1;
        return 0;
    }
    if (r->len + add > r->cap) {
        size_t cap = r->cap ? r->cap : 4096;
        while (cap < r->len + add) cap *= 2;
        char *p = realloc(r->body, cap);
        if (!p) return 0;
        r->body = p;
        r->cap = cap;
    }
    memcpy(r->body + r->len, data, add);
    r->len += add;
    return add;
}

static void check_opt(lua_State *L, CURLcode rc, const char *what) {
    if (rc != CURLE_OK) lu_error(L, "http_request: cannot set %s: %s", what, curl_easy_strerror(rc));
}

/* The headers list at idx (strings) into r->headers. */
static void set_headers(lua_State *L, HttpReq *r, int idx) {
    if (lua_isnoneornil(L, idx)) return;
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
    for (lua_Integer i = 1; i <= n; i++) {
        const char *h = lua_rawgeti(L, idx, i) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        if (!h)
            lu_error(L, "http_request: header %lld must be a string \"Name: value\"", (long long)i);
        struct curl_slist *next = curl_slist_append(r->headers, h);
        if (!next) lu_error(L, "http_request: out of memory adding a header");
        r->headers = next;
        lua_pop(L, 1);
    }
    check_opt(L, curl_easy_setopt(r->curl, CURLOPT_HTTPHEADER, r->headers), "the headers");
}

/* Method and request body. */
static void set_method(lua_State *L, HttpReq *r, const char *method, int body_idx) {
    if (!lua_isnoneornil(L, body_idx)) {
        size_t n;
        const char *body = luaL_checklstring(L, body_idx, &n);
        check_opt(L, curl_easy_setopt(r->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)n), "the body size");
        check_opt(L, curl_easy_setopt(r->curl, CURLOPT_COPYPOSTFIELDS, body), "the body");
    }
    if (strcmp(method, "GET") == 0 && lua_isnoneornil(L, body_idx))
        check_opt(L, curl_easy_setopt(r->curl, CURLOPT_HTTPGET, 1L), "GET");
    else if (strcmp(method, "POST") != 0)
        check_opt(L, curl_easy_setopt(r->curl, CURLOPT_CUSTOMREQUEST, method), "the method");
}

static void set_common(lua_State *L, HttpReq *r, const char *url, double timeout) {
    long ms = (long)(timeout * 1000.0);
    if (ms < 1) ms = 1;
    check_opt(L, curl_easy_setopt(r->curl, CURLOPT_URL, url), "the URL");
    check_opt(L, curl_easy_setopt(r->curl, CURLOPT_PROTOCOLS_STR, "http,https"), "the protocols");
    check_opt(L, curl_easy_setopt(r->curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https"), "the redirect protocols");
    check_opt(L, curl_easy_setopt(r->curl, CURLOPT_NOSIGNAL, 1L), "NOSIGNAL");
    check_opt(L, curl_easy_setopt(r->curl, CURLOPT_TIMEOUT_MS, ms), "the timeout");
    check_opt(L, curl_easy_setopt(r->curl, CURLOPT_CONNECTTIMEOUT_MS, ms), "the connect timeout");
    check_opt(L, curl_easy_setopt(r->curl, CURLOPT_ERRORBUFFER, r->err), "the error buffer");
    check_opt(L, curl_easy_setopt(r->curl, CURLOPT_WRITEFUNCTION, on_data), "the write callback");
    check_opt(L, curl_easy_setopt(r->curl, CURLOPT_WRITEDATA, r), "the write data");
}

/* nil, "METHOD URL: what went wrong" for a request without an HTTP answer. */
static int push_failure(lua_State *L, HttpReq *r, const char *method, const char *url, CURLcode rc, double timeout) {
    lua_pushnil(L);
    if (r->too_big)
        lua_pushfstring(L, "%s %s: the answer is larger than %d MiB", method, url, (int)(MAX_BODY >> 20));
    else if (rc == CURLE_OPERATION_TIMEDOUT)
        lua_pushfstring(L, "%s %s: no answer within %f s (%s)", method, url, timeout, r->err[0] ? r->err : curl_easy_strerror(rc));
    else
        lua_pushfstring(L, "%s %s: %s (%s)", method, url, curl_easy_strerror(rc), r->err[0] ? r->err : "no details");
    return 2;
}

/* curl_global_init on the first request (a program that never talks HTTP
 * never loads TLS), curl_global_cleanup when the Lua state closes (the
 * __gc of a registry value). */
#define HTTP_GLOBAL "accel.http.global"

static int global_gc(lua_State *L) {
    (void)L;
    curl_global_cleanup();
    return 0;
}

static void global_init(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, HTTP_GLOBAL) != LUA_TNIL) {
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);
    CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
    if (rc != CURLE_OK) lu_error(L, "http_request: curl_global_init failed: %s", curl_easy_strerror(rc));
    lu_at_close(L, HTTP_GLOBAL, global_gc);
}

/* http_request(method, url, body, headers, timeout_s) -> status, body | nil, message */
static int c_http_request(lua_State *L) {
    const char *method = luaL_checkstring(L, 1);
    const char *url = luaL_checkstring(L, 2);
    double timeout = luaL_checknumber(L, 5);
    if (!(timeout > 0) || timeout > 86400) lu_error(L, "http_request: timeout must be in (0, 86400] seconds, got %g", timeout);
    global_init(L);
    HttpReq *r = lua_newuserdatauv(L, sizeof *r, 0);
    memset(r, 0, sizeof *r);
    luaL_setmetatable(L, HTTP_MT);
    r->curl = curl_easy_init();
    if (!r->curl) lu_error(L, "http_request: curl_easy_init failed");
    set_common(L, r, url, timeout);
    set_method(L, r, method, 3);
    set_headers(L, r, 4);
    CURLcode rc = curl_easy_perform(r->curl);
    if (rc != CURLE_OK) return push_failure(L, r, method, url, rc, timeout);
    long status = 0;
    check_opt(L, curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &status), "(reading) the status");
    lua_pushinteger(L, status);
    lua_pushlstring(L, r->body ? r->body : "", r->len);
    return 2;
}

void lu_open_http(lua_State *L, int m) {
    luaL_newmetatable(L, HTTP_MT);
    lua_pushcfunction(L, req_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {{"http_request", c_http_request}, {NULL, NULL}};
    lu_register_c(L, m, fns);
}
