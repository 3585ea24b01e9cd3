/* error.c: the thread-local error message behind cuda_check.h. Plain C (no
 * CUDA headers), so the caching allocator's host tests link it too. */
#include "cuda_check.h"
#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];

const char *cuda_last_error(void) { return last_error; }

void cuda_clear_error(void) { last_error[0] = 0; }

int cuda_set_error(const char *file, int line, const char *fmt, ...) {
    int at = snprintf(last_error, sizeof last_error, "%s:%d: ", file, line);
    if (at < 0 || (size_t)at >= sizeof last_error) at = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error + at, sizeof last_error - (size_t)at, fmt, ap);
    va_end(ap);
    return -1;
}
