/* strbuf.c: the growable text buffer of strbuf.h. */
#include "strbuf.h"
#include <stdlib.h>
#include <string.h>

void strbuf_put(StrBuf *b, const char *bytes, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 128;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->len, bytes, n);
    b->len += n;
    b->p[b->len] = 0;
}

void strbuf_puts(StrBuf *b, const char *text) { strbuf_put(b, text, strlen(text)); }
