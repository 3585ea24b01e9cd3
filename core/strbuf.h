/* strbuf.h: a growable NUL-terminated byte buffer for building text (the
 * tensor printer in format.c, the safetensors JSON header). An allocation
 * failure sets oom and turns later writes into no-ops, so a builder checks
 * once at the end; the owner frees p. Start from StrBuf b = {0}. */
#ifndef ACCEL_STRBUF_H
#define ACCEL_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} StrBuf;

void strbuf_put(StrBuf *b, const char *bytes, size_t n); /* appends n bytes (NULs allowed) */
void strbuf_puts(StrBuf *b, const char *text);           /* appends a C string */

#endif
