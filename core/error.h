/* error.h: how the core runtime reports failure without Lua. A failing
 * function records a message in a thread-local buffer and returns NULL or -1;
 * the Lua bindings turn the message into a Lua error with the script's
 * file:line. */
#ifndef ACCEL_ERROR_H
#define ACCEL_ERROR_H

#include <stddef.h>

/* Record a printf-style message; returns NULL so callers can `return accel_fail(...)`. */
void *accel_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Same, returning -1. */
int accel_fail_int(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *accel_last_error(void);
/* Whether a message is recorded (since the last accel_clear_error). */
int accel_has_error(void);
void accel_clear_error(void);

/* Allocation that reports failure as an error instead of crashing. */
void *accel_malloc(size_t n);
void *accel_calloc(size_t n, size_t m);

#endif
