/* rng.c: the process-wide random number generator ("random" in ops.h).
 *
 * Generator: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy
 * as 1, 2, 3", SC'11), counter based. Key = the 64-bit seed (low word first);
 * the 128-bit counter is (block index low, block index high, 0, 0). Each
 * block gives four 32-bit words w0..w3. The whole state is (seed, offset),
 * offset = the number of blocks consumed so far; rng_seed(s) sets (s, 0),
 * and the seed is 0 until rng_seed is called. Every operation starts on a
 * fresh block and rounds its consumption up to whole blocks, so (seed,
 * offset) reproduces any later value exactly. Values are generated
 * sequentially (or, on a GPU, element by element at the fixed word
 * positions kernels/philox.h gives): the result never depends on the number
 * of threads.
 *
 * Where the draws happen: the state (seed, offset) lives here, on the host;
 * a fill hands it by value to the tensor's backend (the rng_fill entry,
 * kernels/kops.h's KRngFill), which draws on its device, and the host then
 * advances the offset by the blocks the fill consumes (krng_blocks). So a
 * tensor filled on "sim" holds the CPU's values bit for bit, and the CUDA
 * backend's values equal them except for the last bits of float64 normal
 * draws (the device's libm). randperm is a sequential shuffle: it draws
 * here and its result reaches the device through the host-access API.
 *
 * Draws, in stream order (words w0, w1, w2, w3 of block 0, then block 1, ...):
 *  - a 32-bit draw is the next word; a 64-bit draw is the next two words,
 *    the first as the high half;
 *  - uniform u in [0, 1): float64 tensors take a 64-bit draw x and use
 *    (x >> 11) * 2^-53; float32 tensors take a 32-bit draw w and use
 *    (w >> 8) * 2^-24; narrower floats take the top bits their precision
 *    holds exactly (bfloat16 8, float16 11, float8_e4m3 4, float8_e5m2 3)
 *    so a rounded value never reaches 1. uniform_(lo, hi) stores
 *    lo + u * (hi - lo) computed in double;
 *  - normal: Box-Muller in double over pairs of 64-bit draws a, b:
 *    u1 = ((a >> 11) + 1) * 2^-53 in (0, 1], u2 = (b >> 11) * 2^-53,
 *    r = sqrt(-2 ln u1); elements 2k and 2k+1 are mean + std * r cos(2 pi u2)
 *    and mean + std * r sin(2 pi u2) (an odd count drops the last sine);
 *  - randint(lo, hi): one 64-bit draw x per element, lo + floor(x * (hi - lo)
 *    / 2^64) (Lemire's multiply-shift without rejection; the bias is below
 *    (hi - lo) / 2^64);
 *  - randperm(n): Fisher-Yates from the identity: for i = n-1 down to 1,
 *    j = floor(x * (i + 1) / 2^64) for the next 64-bit draw x, swap i and j;
 *    rng_randperm_at(seed, offset, n) draws the same way from the stream
 *    (seed, offset) and leaves the global state alone (DataLoader shuffling);
 *  - bernoulli_mask_(p): the element's 32-bit (64-bit for float64) uniform u
 *    as above; element = u >= p ? 1 / (1 - p) : 0, so it is kept with
 *    probability 1 - p. */
#include "ops.h"
#include "backend/backend.h"
#include "philox.h"
#include <stdlib.h>

static uint64_t rng_seed_value = 0;
static uint64_t rng_offset = 0;

/* Philox4x32-10 and the in-order stream are kernels/philox.h's, the code
 * the backends' fills run too. */

/* ---------------- state ---------------- */

void rng_seed(uint64_t seed) {
    rng_seed_value = seed;
    rng_offset = 0;
}

uint64_t rng_get_seed(void) { return rng_seed_value; }

void rng_get_state(uint64_t state[2]) {
    state[0] = rng_seed_value;
    state[1] = rng_offset;
}

void rng_set_state(const uint64_t state[2]) {
    rng_seed_value = state[0];
    rng_offset = state[1];
}

/* ---------------- filling ---------------- */

/* Fill t in row-major order, through a contiguous temporary when needed.
 * The draws are the backend's (its rng_fill entry, from the state (seed,
 * offset) by value); the host only advances the offset. */
static int fill_tensor(Tensor *t, KRngFill r) {
    Tensor *c = tensor_is_contiguous(t) ? t : tensor_empty(t->shape, t->ndim, t->dtype, t->device);
    if (!c) return -1;
    r.seed = rng_seed_value, r.offset = rng_offset;
    if (c->numel && backend_for(c->device)->rng_fill(&r, c->dtype, c->numel, tensor_data(c)) != 0) {
        if (c != t) tensor_release(c);
        return -1;
    }
    rng_offset += krng_blocks(&r, c->dtype, (uint64_t)c->numel);
    if (c != t) {
        tensor_copy_strided(t, c);
        tensor_release(c);
    }
    tensor_bump_version(t);
    return 0;
}

static int check_float_target(const Tensor *t, const char *op) {
    if (!dtype_is_float(t->dtype))
        return accel_fail_int("%s: expected a floating point tensor, got %s", op, dtype_name(t->dtype));
    if (t->requires_grad && !t->grad_fn && ag_grad_enabled())
        return accel_fail_int("%s: a leaf tensor that requires grad cannot be modified in place (use accel.no_grad)", op);
    return 0;
}

static Tensor *new_random(const int64_t *shape, int ndim, DType dt, Device dev, const char *op) {
    if (ndim < 0 || ndim > TENSOR_MAX_DIMS) return accel_fail("%s: expected 0 to %d dims, got %d", op, TENSOR_MAX_DIMS, ndim);
    if (shape_check(op, shape, ndim, (int)dt) < 0) return NULL;
    return tensor_empty(shape, ndim, dt, dev);
}

/* ---------------- public ---------------- */

int rng_uniform_(Tensor *t, double lo, double hi) {
    if (check_float_target(t, "uniform_") < 0) return -1;
    if (!(lo <= hi)) return accel_fail_int("uniform_: expects a [from, to) range, but got from=%g > to=%g", lo, hi);
    return fill_tensor(t, (KRngFill){.dist = KRNG_UNIFORM, .a = lo, .b = hi});
}

int rng_normal_(Tensor *t, double mean, double std) {
    if (check_float_target(t, "normal_") < 0) return -1;
    if (!(std >= 0)) return accel_fail_int("normal_: std must be >= 0, got %g", std);
    return fill_tensor(t, (KRngFill){.dist = KRNG_NORMAL, .a = mean, .b = std});
}

int rng_bernoulli_mask_(Tensor *t, double p) {
    if (check_float_target(t, "bernoulli_mask_") < 0) return -1;
    if (!(p >= 0 && p <= 1)) return accel_fail_int("dropout probability has to be between 0 and 1, but got %g", p);
    return fill_tensor(t, (KRngFill){.dist = KRNG_BERNOULLI, .a = p});
}

static Tensor *random_float(const int64_t *shape, int ndim, DType dt, Device dev, const char *op, KRngFill r) {
    if (!dtype_is_float(dt)) return accel_fail("%s: expected a floating point dtype, got %s", op, dtype_name(dt));
    Tensor *t = new_random(shape, ndim, dt, dev, op);
    if (t && fill_tensor(t, r) < 0) {
        tensor_release(t);
        return NULL;
    }
    return t;
}

Tensor *rng_rand_on(const int64_t *shape, int ndim, DType dt, Device dev) {
    return random_float(shape, ndim, dt, dev, "rand", (KRngFill){.dist = KRNG_UNIFORM, .a = 0.0, .b = 1.0});
}

Tensor *rng_randn_on(const int64_t *shape, int ndim, DType dt, Device dev) {
    return random_float(shape, ndim, dt, dev, "randn", (KRngFill){.dist = KRNG_NORMAL, .a = 0.0, .b = 1.0});
}

Tensor *rng_randint_on(int64_t lo, int64_t hi, const int64_t *shape, int ndim, DType dt, Device dev) {
    if (lo >= hi)
        return accel_fail("randint: low (%lld) must be less than high (%lld)", (long long)lo, (long long)hi);
    if (dt == DT_BOOL && (lo < 0 || hi > 2))
        return accel_fail("randint: range [%lld, %lld) does not fit dtype bool", (long long)lo, (long long)hi);
    Tensor *t = new_random(shape, ndim, dt, dev, "randint");
    KRngFill r = {.dist = KRNG_RANDINT, .lo = lo, .range = (uint64_t)hi - (uint64_t)lo};
    if (t && fill_tensor(t, r) < 0) {
        tensor_release(t);
        return NULL;
    }
    return t;
}

static const Device host_cpu = {DEV_CPU, 0};
Tensor *rng_rand(const int64_t *shape, int ndim, DType dt) { return rng_rand_on(shape, ndim, dt, host_cpu); }
Tensor *rng_randn(const int64_t *shape, int ndim, DType dt) { return rng_randn_on(shape, ndim, dt, host_cpu); }
Tensor *rng_randint(int64_t lo, int64_t hi, const int64_t *shape, int ndim, DType dt) {
    return rng_randint_on(lo, hi, shape, ndim, dt, host_cpu);
}

/* Fisher-Yates over 0..n-1 with the draws of s (see the top comment). */
static Tensor *randperm_from(PhiloxStream *s, int64_t n, DType dt) {
    if (n < 0) return accel_fail("randperm: n must be non-negative, got %lld", (long long)n);
    int64_t lo, hi;
    dtype_int_range(dt, &lo, &hi);
    if (n - 1 > hi) /* as torch: no duplicates from rounding or wrapping */
        return accel_fail("randperm: n = %lld does not fit dtype %s, which holds each of 0..n-1 exactly only for n <= %lld",
                          (long long)n, dtype_name(dt), (long long)hi + 1);
    if (shape_check("randperm", &n, 1, (int)DT_I64) < 0) return NULL; /* the int64 work array */
    int64_t *perm = accel_malloc(sizeof *perm * (size_t)(n ? n : 1));
    if (!perm) return NULL;
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)philox_scale64(philox_next64(s), (uint64_t)i + 1);
        int64_t tmp = perm[i];
        perm[i] = perm[j], perm[j] = tmp;
    }
    Tensor *t = tensor_empty(&n, 1, dt, (Device){DEV_CPU, 0});
    HostMap m;
    char *p = t ? tensor_host_map(t, HOST_WRITE, &m) : NULL;
    if (p) {
        for (int64_t i = 0; i < n; i++) dtype_store_i64(p + i * (int64_t)dtype_size(dt), dt, perm[i]);
        t = tensor_host_finish(t, &m);
    } else {
        tensor_release(t);
        t = NULL;
    }
    free(perm);
    return t;
}

Tensor *rng_randperm(int64_t n, DType dt) {
    PhiloxStream s = philox_stream_at(rng_seed_value, rng_offset);
    Tensor *t = randperm_from(&s, n, dt);
    rng_offset = s.block; /* a partly used block counts as used */
    return t;
}

Tensor *rng_randperm_at(uint64_t seed, uint64_t offset, int64_t n, DType dt) {
    PhiloxStream s = philox_stream_at(seed, offset);
    return randperm_from(&s, n, dt);
}
