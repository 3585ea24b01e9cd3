/* rng.cu: random fills on the GPU with core/rng.c's numbers: element i is
 * computed on its own thread from (seed, offset) by kernels/philox.h, the
 * code the host tests check against rng.c (tests/c/test_philox.c). Output
 * contiguous, n elements; the caller advances its offset (rng_blocks_*).
 * lo + u (hi - lo) and mean + std z round the product first, as the CPU
 * does: __dmul_rn, never fused into the addition whatever the build's
 * -fmad (nvcc's default would fuse: a different last bit). */
#include "common.cuh"
#include "philox.h"

__global__ void uniform_kernel(void *o, DType dt, int64_t n, uint64_t seed, uint64_t off, double lo, double hi) {
    const int bits = rng_uniform_bits(dt);
    KC_GRID_STRIDE(i, n) kc_store(o, dt, i, lo + __dmul_rn(rng_uniform_at(seed, off, (uint64_t)i, bits), hi - lo));
}

__global__ void normal_kernel(void *o, DType dt, int64_t n, uint64_t seed, uint64_t off, double mean, double std) {
    KC_GRID_STRIDE(k, (n + 1) / 2) {
        double z[2];
        rng_normal_pair_at(seed, off, (uint64_t)k, z);
        kc_store(o, dt, 2 * k, mean + __dmul_rn(std, z[0]));
        if (2 * k + 1 < n) kc_store(o, dt, 2 * k + 1, mean + __dmul_rn(std, z[1]));
    }
}

__global__ void bernoulli_kernel(void *o, DType dt, int64_t n, uint64_t seed, uint64_t off, double p) {
    const int bits = rng_bernoulli_bits(dt);
    const double keep = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
    KC_GRID_STRIDE(i, n) kc_store(o, dt, i, rng_uniform_at(seed, off, (uint64_t)i, bits) >= p ? keep : 0.0);
}

__global__ void randint_kernel(void *o, DType dt, int64_t n, uint64_t seed, uint64_t off, int64_t lo, uint64_t range) {
    KC_GRID_STRIDE(i, n) kc_store(o, dt, i, rng_randint_at(seed, off, (uint64_t)i, lo, range));
}

#define RNG_LAUNCH(kernel, count, ...)                                                             \
    do {                                                                                           \
        if ((count) <= 0) return 0;                                                                \
        kernel<<<kc_blocks(count), KC_THREADS, 0, kc_stream(stream)>>>(__VA_ARGS__);              \
        cuda_check_launch();                                                                       \
        return 0;                                                                                  \
    } while (0)

extern "C" int kc_rng_uniform(void *o, DType dt, int64_t n, uint64_t seed, uint64_t offset, double lo, double hi,
                              void *stream) {
    RNG_LAUNCH(uniform_kernel, n, o, dt, n, seed, offset, lo, hi);
}

extern "C" int kc_rng_normal(void *o, DType dt, int64_t n, uint64_t seed, uint64_t offset, double mean, double std,
                             void *stream) {
    RNG_LAUNCH(normal_kernel, (n + 1) / 2, o, dt, n, seed, offset, mean, std);
}

extern "C" int kc_rng_bernoulli_mask(void *o, DType dt, int64_t n, uint64_t seed, uint64_t offset, double p,
                                     void *stream) {
    RNG_LAUNCH(bernoulli_kernel, n, o, dt, n, seed, offset, p);
}

extern "C" int kc_rng_randint(void *o, DType dt, int64_t n, uint64_t seed, uint64_t offset, int64_t lo,
                              uint64_t range, void *stream) {
    RNG_LAUNCH(randint_kernel, n, o, dt, n, seed, offset, lo, range);
}
