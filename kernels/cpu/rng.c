/* rng.c (kernels/cpu): the CPU's random fills (KRngFill, kernels/kops.h).
 * The stream (seed, offset) is read in order on the calling thread, word
 * after word (kernels/philox.h's PhiloxStream), as core/rng.c's top comment
 * specifies, so the result never depends on the number of threads and is
 * element for element what philox.h's per-element draws (the CUDA
 * kernels') give. Each element goes through dtype_store from double. */
#include "kernels.h"
#include "../philox.h"

static double next_uniform(PhiloxStream *s, int bits) {
    if (bits > 32) return (double)(philox_next64(s) >> (64 - bits)) * ldexp(1.0, -bits);
    return (double)(philox_next32(s) >> (32 - bits)) * ldexp(1.0, -bits);
}

static void fill_uniform(PhiloxStream *s, char *p, DType dt, int64_t n, double lo, double hi, int bits) {
    size_t es = dtype_size(dt);
    for (int64_t i = 0; i < n; i++) dtype_store(p + i * (int64_t)es, dt, lo + next_uniform(s, bits) * (hi - lo));
}

static void fill_normal(PhiloxStream *s, char *p, DType dt, int64_t n, double mean, double std) {
    size_t es = dtype_size(dt);
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = (double)((philox_next64(s) >> 11) + 1) * 0x1p-53, u2 = (double)(philox_next64(s) >> 11) * 0x1p-53;
        double r = sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
        dtype_store(p + i * (int64_t)es, dt, mean + std * r * cos(th));
        if (i + 1 < n) dtype_store(p + (i + 1) * (int64_t)es, dt, mean + std * r * sin(th));
    }
}

static void fill_bernoulli(PhiloxStream *s, char *p, DType dt, int64_t n, double prob) {
    int bits = rng_bernoulli_bits(dt);
    double keep = prob < 1.0 ? 1.0 / (1.0 - prob) : 0.0;
    size_t es = dtype_size(dt);
    for (int64_t i = 0; i < n; i++) dtype_store(p + i * (int64_t)es, dt, next_uniform(s, bits) >= prob ? keep : 0.0);
}

static void fill_randint(PhiloxStream *s, char *p, DType dt, int64_t n, int64_t lo, uint64_t range) {
    size_t es = dtype_size(dt);
    for (int64_t i = 0; i < n; i++)
        dtype_store_i64(p + i * (int64_t)es, dt, (int64_t)((uint64_t)lo + philox_scale64(philox_next64(s), range)));
}

void k_rng_fill(const KRngFill *r, DType dt, int64_t n, void *out) {
    PhiloxStream s = philox_stream_at(r->seed, r->offset);
    switch (r->dist) {
    case KRNG_UNIFORM: fill_uniform(&s, out, dt, n, r->a, r->b, rng_uniform_bits(dt)); break;
    case KRNG_NORMAL: fill_normal(&s, out, dt, n, r->a, r->b); break;
    case KRNG_BERNOULLI: fill_bernoulli(&s, out, dt, n, r->a); break;
    default: fill_randint(&s, out, dt, n, r->lo, r->range); break;
    }
}
