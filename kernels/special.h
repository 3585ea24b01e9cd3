/* special.h: digamma and trigamma in double, shared by the CPU kernels and
 * the CUDA kernels (DT_HD: __host__ __device__ under nvcc). Both shift x up
 * to 10 or more with their recurrences and finish with the asymptotic
 * (Bernoulli-number) series; x < 0 (digamma) or x < 1/2 (trigamma) goes
 * through the reflection formulas. Values at the poles follow PyTorch:
 * digamma(+-0) = -+inf, digamma(negative integer) = NaN, trigamma of a
 * non-positive integer = inf. Float inputs are computed in double and
 * rounded once. */
#ifndef ACCEL_SPECIAL_H
#define ACCEL_SPECIAL_H

#include <math.h>
#include "dtype.h" /* DT_HD */

#define SPECIAL_PI 3.14159265358979323846

/* psi(x) = d/dx log|Gamma(x)| */
static inline DT_HD double k_digamma(double x) {
    if (x == 0) return copysign(INFINITY, -x);
    double shift = 0;
    if (x < 0) {
        if (x == floor(x)) return NAN;
        /* psi(x) = psi(1 - x) - pi / tan(pi x) */
        shift = -SPECIAL_PI / tan(SPECIAL_PI * x);
        x = 1 - x;
    }
    for (; x < 10; x += 1) shift -= 1 / x; /* psi(x) = psi(x + 1) - 1 / x */
    double z = 1 / (x * x);
    /* ln x - 1/(2x) - sum B_2k / (2k x^2k), k = 1..7 */
    double tail = z * (1.0 / 12 - z * (1.0 / 120 - z * (1.0 / 252 - z * (1.0 / 240 - z * (1.0 / 132 -
                  z * (691.0 / 32760 - z * (1.0 / 12)))))));
    return shift + log(x) - 0.5 / x - tail;
}

/* psi'(x), the derivative of digamma */
static inline DT_HD double k_trigamma(double x) {
    double shift = 0, sign = 1;
    if (x < 0.5) {
        /* psi'(x) = pi^2 / sin^2(pi x) - psi'(1 - x) */
        double s = sin(SPECIAL_PI * x);
        shift = SPECIAL_PI * SPECIAL_PI / (s * s);
        sign = -1;
        x = 1 - x;
    }
    double acc = 0;
    for (; x < 10; x += 1) acc += 1 / (x * x); /* psi'(x) = psi'(x + 1) + 1 / x^2 */
    double z = 1 / (x * x);
    /* 1/x + 1/(2x^2) + sum B_2k / x^(2k+1), k = 1..7 */
    double series = 1 / x + 0.5 * z + z / x * (1.0 / 6 - z * (1.0 / 30 - z * (1.0 / 42 - z * (1.0 / 30 - z * (5.0 / 66 -
                    z * (691.0 / 2730 - z * (7.0 / 6)))))));
    return shift + sign * (acc + series);
}

#endif
