/* test_philox.c: kernels/philox.h, the per-element random draws the CUDA
 * RNG kernels run, against Random123's published Philox4x32-10 answers and
 * against the CPU generator (core/rng.c) element by element: rand in every
 * float dtype, randn, randint and the dropout mask, from several (seed,
 * offset) states, and the offsets each operation leaves behind. The header
 * is compiled here by the host compiler; the GPU compiles the same code.
 * Last line "N passed, N failed". */
#include "core/ops.h"
#include "kernels/philox.h"
#include <stdio.h>

#include "check.h"

/* Random123's kat_vectors, philox4x32 with 10 rounds. */
static void test_known_answers(void) {
    static const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                       {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                       {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
    static const uint32_t key[3][2] = {{0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
    static const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                        {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                        {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        philox4x32_10_block(ctr[t], key[t], out);
        CHECK(out[0] == want[t][0] && out[1] == want[t][1] && out[2] == want[t][2] && out[3] == want[t][3]);
    }
}

static uint64_t offset_now(void) {
    uint64_t s[2];
    rng_get_state(s);
    return s[1];
}

static int uniform_bits_of(DType dt) { return dt == DT_F64 ? 53 : dt == DT_BF16 ? 8 : dt == DT_F16 ? 11 : 24; }

/* element i of t holds exactly v stored in dt */
static int elem_is(const Tensor *t, int64_t i, DType dt, double v) {
    char want[8];
    dtype_store(want, dt, v);
    return memcmp((char *)tensor_data(t) + i * (int64_t)dtype_size(dt), want, dtype_size(dt)) == 0;
}

/* rand of n elements at (seed, offset) equals rng_uniform_at for every element. */
static void check_rand(uint64_t seed, uint64_t offset, int64_t n, DType dt) {
    uint64_t st[2] = {seed, offset};
    rng_set_state(st);
    Tensor *t = rng_rand(&n, 1, dt);
    int same = t != NULL;
    for (int64_t i = 0; same && i < n; i++)
        same = elem_is(t, i, dt, rng_uniform_at(seed, offset, (uint64_t)i, uniform_bits_of(dt)));
    CHECK(same);
    CHECK(offset_now() == offset + rng_blocks_uniform((uint64_t)n, uniform_bits_of(dt)));
    tensor_release(t);
}

static void check_randn(uint64_t seed, uint64_t offset, int64_t n, DType dt) {
    uint64_t st[2] = {seed, offset};
    rng_set_state(st);
    Tensor *t = rng_randn(&n, 1, dt);
    int same = t != NULL;
    for (int64_t i = 0; same && i < n; i++) {
        double pair[2];
        rng_normal_pair_at(seed, offset, (uint64_t)i / 2, pair);
        same = elem_is(t, i, dt, pair[i % 2]);
    }
    CHECK(same);
    CHECK(offset_now() == offset + rng_blocks_normal((uint64_t)n));
    tensor_release(t);
}

static void check_randint(uint64_t seed, uint64_t offset, int64_t n, int64_t lo, int64_t hi) {
    uint64_t st[2] = {seed, offset};
    rng_set_state(st);
    Tensor *t = rng_randint(lo, hi, &n, 1, DT_I64);
    int same = t != NULL;
    for (int64_t i = 0; same && i < n; i++)
        same = ((int64_t *)tensor_data(t))[i] == rng_randint_at(seed, offset, (uint64_t)i, lo, (uint64_t)(hi - lo));
    CHECK(same);
    CHECK(offset_now() == offset + rng_blocks_randint((uint64_t)n));
    tensor_release(t);
}

static void check_dropout_mask(uint64_t seed, uint64_t offset, int64_t n, double p) {
    uint64_t st[2] = {seed, offset};
    Tensor *t = tensor_empty(&n, 1, DT_F32, (Device){DEV_CPU, 0});
    rng_set_state(st);
    int same = t && rng_bernoulli_mask_(t, p) == 0;
    for (int64_t i = 0; same && i < n; i++) {
        float want = rng_uniform_at(seed, offset, (uint64_t)i, 24) >= p ? (float)(1.0 / (1.0 - p)) : 0.0f;
        same = ((float *)tensor_data(t))[i] == want;
    }
    CHECK(same);
    CHECK(offset_now() == offset + rng_blocks_uniform((uint64_t)n, 24));
    tensor_release(t);
}

int main(void) {
    test_known_answers();
    static const uint64_t seeds[] = {0, 42, 0x123456789abcdefull};
    static const uint64_t offsets[] = {0, 7, 0xffffffffull}; /* the last crosses into the counter's high word */
    static const DType dts[] = {DT_F32, DT_F64, DT_BF16, DT_F16};
    for (int s = 0; s < 3; s++)
        for (int o = 0; o < 3; o++) {
            for (int d = 0; d < 4; d++) check_rand(seeds[s], offsets[o], 1001, dts[d]);
            check_randn(seeds[s], offsets[o], 999, DT_F32);
            check_randn(seeds[s], offsets[o], 1000, DT_F64);
            check_randint(seeds[s], offsets[o], 777, -5, 1000003);
            check_dropout_mask(seeds[s], offsets[o], 1003, 0.3);
        }
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
