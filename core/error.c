/* error.c: thread-local error messages for the core runtime (see error.h). */
#include "error.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static __thread char err_buf[1024];

static void set_error(const char *fmt, va_list ap) {
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
}

void *accel_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(fmt, ap);
    va_end(ap);
    return NULL;
}

int accel_fail_int(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(fmt, ap);
    va_end(ap);
    return -1;
}

const char *accel_last_error(void) { return err_buf[0] ? err_buf : "unknown error"; }
int accel_has_error(void) { return err_buf[0] != 0; }
void accel_clear_error(void) { err_buf[0] = 0; }

void *accel_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) return accel_fail("out of memory allocating %zu bytes", n);
    return p;
}

void *accel_calloc(size_t n, size_t m) {
    void *p = calloc(n ? n : 1, m ? m : 1);
    if (!p) return accel_fail("out of memory allocating %zu x %zu bytes", n, m);
    return p;
}
