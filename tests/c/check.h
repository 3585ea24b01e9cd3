/* check.h: the C tests' pass/fail counting: CHECK(cond) counts a pass, or a
 * failure printed as file:line and the condition; the program ends with
 * check_summary()'s "N passed, N failed" line (scripts/run-tests.sh). */
#ifndef ACCEL_TESTS_CHECK_H
#define ACCEL_TESTS_CHECK_H

#include <stdio.h>

static int n_pass, n_fail;

#define CHECK(cond) check_at(!!(cond), __FILE__, __LINE__, #cond)

static inline void check_at(int ok, const char *file, int line, const char *what) {
    if (ok) n_pass++;
    else n_fail++, printf("%s:%d: FAIL %s\n", file, line, what);
}

#endif
