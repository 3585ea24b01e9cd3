/* philox.h: Philox4x32-10 and the per-element draws of the random
 * generator (core/rng.c's top comment is the specification), written once
 * for the host and CUDA devices (DT_HD). rng.c draws sequentially from a
 * stream of 32-bit words: word w of the stream (seed, offset) is word w % 4
 * of block offset + w / 4, block b = Philox4x32-10(counter (b low, b high,
 * 0, 0), key (seed low, seed high)). Every draw of element i sits at a fixed
 * word position, so a GPU computes element i on its own thread and gets
 * rng.c's value:
 *   uniform, 32-bit (float32 and narrower): word i;
 *   uniform, 64-bit (float64), randint:     words 2i (high half), 2i + 1;
 *   normal, the pair (2k, 2k + 1):          the 4 words of block offset + k.
 * An operation over n elements consumes rng_blocks_*(n) blocks (rng.c rounds
 * up to whole blocks). Integer draws and uniforms are identical bit for bit
 * everywhere; normal draws use the platform's log / sqrt / cos / sin in
 * double (glibc on the host, CUDA's libdevice on a GPU, which differ by at
 * most an ulp or two in double: float32 results then almost always agree
 * exactly, float64 within a few ulps). */
#ifndef ACCEL_PHILOX_H
#define ACCEL_PHILOX_H

#include "dtype.h"
#include "kops.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* out = Philox4x32-10(counter c, key k). */
static inline DT_HD void philox4x32_10_block(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r) k0 += PHILOX_W0, k1 += PHILOX_W1;
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0, c1 = (uint32_t)p1, c2 = n2, c3 = (uint32_t)p0;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* The four words of stream block `block` for `seed`. */
static inline DT_HD void philox_stream_block(uint64_t seed, uint64_t block, uint32_t out[4]) {
    const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), 0, 0};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    philox4x32_10_block(ctr, key, out);
}

static inline DT_HD uint32_t philox_word(uint64_t seed, uint64_t offset, uint64_t w) {
    uint32_t b[4];
    philox_stream_block(seed, offset + w / 4, b);
    return b[w % 4];
}

static inline DT_HD uint64_t philox_draw64(uint64_t seed, uint64_t offset, uint64_t i) {
    return (uint64_t)philox_word(seed, offset, 2 * i) << 32 | philox_word(seed, offset, 2 * i + 1);
}

/* floor(x * range / 2^64) */
static inline DT_HD uint64_t philox_scale64(uint64_t x, uint64_t range) {
#ifdef __CUDA_ARCH__
    return __umul64hi(x, range);
#else
    return (uint64_t)(((unsigned __int128)x * range) >> 64);
#endif
}

/* The bits of a uniform draw that a dtype holds exactly (rng.c). */
static inline DT_HD int rng_uniform_bits(DType dt) {
    switch (dt) {
    case DT_F64: return 53;
    case DT_BF16: return 8;
    case DT_F16: return 11;
    case DT_F8E4M3: return 4;
    case DT_F8E5M2: return 3;
    default: return 24;
    }
}

/* ---- element i of each draw (bits: the uniform's precision, rng.c) ---- */

static inline DT_HD double rng_uniform_at(uint64_t seed, uint64_t offset, uint64_t i, int bits) {
    if (bits > 32) return (double)(philox_draw64(seed, offset, i) >> (64 - bits)) * ldexp(1.0, -bits);
    return (double)(philox_word(seed, offset, i) >> (32 - bits)) * ldexp(1.0, -bits);
}

/* Elements 2k (cosine) and 2k + 1 (sine) of a standard normal draw. */
static inline DT_HD void rng_normal_pair_at(uint64_t seed, uint64_t offset, uint64_t k, double out[2]) {
    uint32_t b[4];
    philox_stream_block(seed, offset + k, b);
    const uint64_t a = (uint64_t)b[0] << 32 | b[1], c = (uint64_t)b[2] << 32 | b[3];
    const double u1 = (double)((a >> 11) + 1) * 0x1p-53, u2 = (double)(c >> 11) * 0x1p-53;
    const double r = sqrt(-2.0 * log(u1)), th = 2.0 * 3.14159265358979323846 * u2;
    out[0] = r * cos(th);
    out[1] = r * sin(th);
}

static inline DT_HD int64_t rng_randint_at(uint64_t seed, uint64_t offset, uint64_t i, int64_t lo, uint64_t range) {
    return (int64_t)((uint64_t)lo + philox_scale64(philox_draw64(seed, offset, i), range));
}

/* Blocks consumed by an operation over n elements. */
static inline DT_HD uint64_t rng_blocks_words(uint64_t words) { return (words + 3) / 4; }
static inline DT_HD uint64_t rng_blocks_uniform(uint64_t n, int bits) { return rng_blocks_words(bits > 32 ? 2 * n : n); }
static inline DT_HD uint64_t rng_blocks_normal(uint64_t n) { return (n + 1) / 2; }
static inline DT_HD uint64_t rng_blocks_randint(uint64_t n) { return rng_blocks_words(2 * n); }

/* The uniform precision of a dropout mask (rng.c: 53 bits for float64, else 24). */
static inline DT_HD int rng_bernoulli_bits(DType dt) { return dt == DT_F64 ? 53 : 24; }

/* Blocks a KRngFill (kernels/kops.h) of n elements of dt consumes. */
static inline DT_HD uint64_t krng_blocks(const KRngFill *r, DType dt, uint64_t n) {
    switch (r->dist) {
    case KRNG_UNIFORM: return rng_blocks_uniform(n, rng_uniform_bits(dt));
    case KRNG_NORMAL: return rng_blocks_normal(n);
    case KRNG_BERNOULLI: return rng_blocks_uniform(n, rng_bernoulli_bits(dt));
    default: return rng_blocks_randint(n);
    }
}

/* ---- the stream read in order (the host's sequential draws) ---- */

typedef struct {
    uint32_t key[2];
    uint64_t block; /* next block to compute */
    uint32_t buf[4];
    int pos; /* next unused word of buf; 4 = empty */
} PhiloxStream;

static inline DT_HD PhiloxStream philox_stream_at(uint64_t seed, uint64_t offset) {
    PhiloxStream s = {{(uint32_t)seed, (uint32_t)(seed >> 32)}, offset, {0, 0, 0, 0}, 4};
    return s;
}

static inline DT_HD uint32_t philox_next32(PhiloxStream *s) {
    if (s->pos == 4) {
        const uint32_t ctr[4] = {(uint32_t)s->block, (uint32_t)(s->block >> 32), 0, 0};
        philox4x32_10_block(ctr, s->key, s->buf);
        s->block++;
        s->pos = 0;
    }
    return s->buf[s->pos++];
}

/* The next two words, the first as the high half. */
static inline DT_HD uint64_t philox_next64(PhiloxStream *s) {
    uint64_t hi = philox_next32(s);
    return hi << 32 | philox_next32(s);
}

#endif
