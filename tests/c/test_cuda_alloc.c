/* test_cuda_alloc.c: the CUDA caching allocator's bookkeeping
 * (kernels/cuda/alloc_cache.c) on the CPU, over a fake raw allocator that
 * hands out addresses of an imaginary device with a fixed capacity and
 * counts its calls. Expected values follow from the policy in
 * alloc_cache.h (rounding, segment sizes, best fit, splitting thresholds,
 * per-stream reuse, release-and-retry on out of memory), worked out by
 * hand. A random run checks the invariants (live blocks disjoint, inside
 * held segments, statistics equal to the sums). Last line
 * "N passed, N failed". */
#include "kernels/cuda/alloc_cache.h"
#include "kernels/cuda/cuda_check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define MiB ((size_t)1 << 20)

/* ---- the fake device: a bump pointer over [BASE, BASE + cap), segments
 * remembered so frees can be checked and capacity given back ---- */
#define BASE ((uintptr_t)1 << 40)
#define MAX_SEG 4096
typedef struct {
    size_t cap, used;
    uintptr_t next;
    uintptr_t seg_at[MAX_SEG];
    size_t seg_size[MAX_SEG];
    int nseg, allocs, frees, bad_frees;
} Fake;

static int fake_alloc(void *ctx, size_t size, void **p) {
    Fake *f = ctx;
    if (f->used + size > f->cap || f->nseg == MAX_SEG) return 1;
    f->seg_at[f->nseg] = f->next, f->seg_size[f->nseg++] = size;
    *p = (void *)f->next;
    f->next += size;
    f->used += size;
    f->allocs++;
    return 0;
}

static void fake_free(void *ctx, void *p) {
    Fake *f = ctx;
    for (int i = 0; i < f->nseg; i++)
        if (f->seg_at[i] == (uintptr_t)p) {
            f->used -= f->seg_size[i];
            f->seg_at[i] = f->seg_at[--f->nseg], f->seg_size[i] = f->seg_size[f->nseg];
            f->frees++;
            return;
        }
    f->bad_frees++;
}

static void setup(CacheAlloc *a, Fake *f, size_t cap) {
    memset(f, 0, sizeof *f);
    f->cap = cap, f->next = BASE;
    cache_init(a, (CacheRaw){f, fake_alloc, fake_free}, 3);
}

static void *get(CacheAlloc *a, size_t n, uintptr_t stream) {
    void *p = NULL;
    return cache_alloc(a, n, stream, &p) ? NULL : p;
}

static void test_rounding(void) {
    CHECK(cache_round_size(1) == 512);
    CHECK(cache_round_size(512) == 512);
    CHECK(cache_round_size(513) == 1024);
    CHECK(cache_round_size(0) == 512);
}

static void test_small_split_merge(void) {
    CacheAlloc a;
    Fake f;
    setup(&a, &f, 64 * MiB);
    char *p = get(&a, 1000, 0), *q = get(&a, 1000, 0);
    CHECK(p == (char *)BASE);         /* the first block of a 2 MiB segment */
    CHECK(q == p + 1024);             /* cut from the same segment's rest */
    CHECK(f.allocs == 1 && a.stats.reserved == 2 * MiB);
    CHECK(a.stats.allocated == 2048 && a.stats.requested == 2000);
    CHECK(cache_free(&a, p) == 0 && cache_free(&a, q) == 0);
    CHECK(a.stats.allocated == 0 && a.stats.requested == 0);
    /* both merged back: one free 2 MiB block, so a full 1 MiB fits at the start */
    char *r = get(&a, MiB, 0);
    CHECK(r == p && f.allocs == 1);
    CHECK(get(&a, MiB, 0) == p + MiB); /* the rest, exactly 1 MiB */
    CHECK(f.allocs == 1);
    cache_destroy(&a);
    CHECK(f.frees == 1 && f.used == 0 && f.bad_frees == 0);
}

static void test_reuse_best_fit(void) {
    CacheAlloc a;
    Fake f;
    setup(&a, &f, 64 * MiB);
    char *big = get(&a, 8 * MiB, 0), *mid = get(&a, 3 * MiB, 0);
    CHECK(f.allocs == 2 && a.stats.reserved == 12 * MiB); /* 3 MiB rounds to a 4 MiB segment */
    cache_free(&a, big);
    cache_free(&a, mid);
    /* 3 MiB again: best fit is the 4 MiB segment, not the 8 MiB one */
    CHECK(get(&a, 3 * MiB, 0) == mid && f.allocs == 2);
    /* 5 MiB from the 8 MiB block: split, the 3 MiB rest (> 1 MiB) reused next */
    CHECK(get(&a, 5 * MiB, 0) == big);
    CHECK(get(&a, 2 * MiB, 0) == big + 5 * MiB && f.allocs == 2);
    cache_destroy(&a);
}

static void test_large_no_split_below_threshold(void) {
    CacheAlloc a;
    Fake f;
    setup(&a, &f, 64 * MiB);
    char *p = get(&a, 3 * MiB, 0); /* 4 MiB segment, rest 1 MiB: not split */
    CHECK(a.stats.allocated == 4 * MiB);
    cache_free(&a, p);
    CHECK(a.stats.allocated == 0);
    cache_destroy(&a);
}

static void test_streams(void) {
    CacheAlloc a;
    Fake f;
    setup(&a, &f, 64 * MiB);
    char *p = get(&a, 4096, 1);
    cache_free(&a, p);
    char *q = get(&a, 4096, 2); /* stream 2 never gets stream 1's block */
    CHECK(q && q != p && f.allocs == 2);
    CHECK(get(&a, 4096, 1) == p && f.allocs == 2);
    cache_destroy(&a);
}

static void test_oom(void) {
    CacheAlloc a;
    Fake f;
    setup(&a, &f, 8 * MiB);
    char *p = get(&a, 6 * MiB, 1);
    cache_free(&a, p); /* cached, 6 of 8 MiB held */
    /* another stream: no fit, the raw allocation fails, the cache is released, the retry fits */
    char *q = get(&a, 4 * MiB, 2);
    CHECK(q != NULL && f.frees == 1 && a.stats.reserved == 4 * MiB);
    cuda_clear_error();
    void *r = (void *)1;
    CHECK(cache_alloc(&a, 6 * MiB, 2, &r) == -1 && r == NULL);
    CHECK(strstr(cuda_last_error(), "out of memory") != NULL);
    CHECK(strstr(cuda_last_error(), "Tried to allocate 6.00 MiB on cuda:3") != NULL);
    CHECK(a.stats.num_ooms == 1 && a.stats.allocated == 4 * MiB && a.stats.reserved == 4 * MiB);
    /* an absurd size is refused the same way, not wrapped around */
    CHECK(cache_alloc(&a, SIZE_MAX - 5, 0, &r) == -1 && strstr(cuda_last_error(), "out of memory"));
    cache_destroy(&a);
    CHECK(f.used == 0 && f.bad_frees == 0);
}

/* A raw failure that is not out of memory passes through with its own message. */
static int broken_alloc(void *ctx, size_t size, void **p) {
    (void)ctx, (void)size, (void)p;
    return cuda_fail("cudaMalloc: no usable NVIDIA driver (cudaErrorInsufficientDriver)");
}

static void test_raw_error(void) {
    CacheAlloc a;
    cache_init(&a, (CacheRaw){NULL, broken_alloc, fake_free}, 0);
    void *p = (void *)1;
    CHECK(cache_alloc(&a, 4096, 0, &p) == -1 && p == NULL);
    CHECK(strstr(cuda_last_error(), "cudaErrorInsufficientDriver") && !strstr(cuda_last_error(), "out of memory"));
    CHECK(a.stats.num_ooms == 0 && a.stats.reserved == 0);
}

static void test_empty_cache_and_stats(void) {
    CacheAlloc a;
    Fake f;
    setup(&a, &f, 64 * MiB);
    char *p = get(&a, 100, 0), *big = get(&a, 10 * MiB, 0);
    cache_free(&a, big);
    CHECK(a.stats.reserved_peak == 12 * MiB && a.stats.allocated_peak == 512 + 10 * MiB);
    cache_empty(&a); /* the 10 MiB segment goes, the one with p stays */
    CHECK(a.stats.reserved == 2 * MiB && f.frees == 1 && a.stats.num_segments == 1);
    cache_reset_peaks(&a);
    CHECK(a.stats.allocated_peak == 512 && a.stats.reserved_peak == 2 * MiB);
    CHECK(a.stats.num_allocs == 2 && a.stats.num_frees == 1);
    cache_free(&a, p);
    cache_empty(&a);
    CHECK(a.stats.reserved == 0 && f.used == 0 && f.allocs == f.frees);
    CHECK(get(&a, 0, 0) == NULL && a.stats.num_allocs == 2); /* size 0: NULL, nothing held */
}

static void test_bad_frees(void) {
    CacheAlloc a;
    Fake f;
    setup(&a, &f, 64 * MiB);
    char *p = get(&a, 100, 0);
    CHECK(cache_free(&a, p) == 0);
    CHECK(cache_free(&a, p) == -1 && strstr(cuda_last_error(), "freed twice"));
    CHECK(cache_free(&a, (char *)BASE + 12345) == -1);
    CHECK(cache_free(&a, NULL) == 0);
    CHECK(a.stats.num_frees == 1);
    cache_destroy(&a);
}

/* ---- random run ---- */
#define LIVE 200
static unsigned rnd_state = 42;
static unsigned rnd(void) { return rnd_state = rnd_state * 1103515245u + 12345u, rnd_state >> 8; }

static int inside_segments(const Fake *f, uintptr_t p, size_t n) {
    for (int i = 0; i < f->nseg; i++)
        if (p >= f->seg_at[i] && p + n <= f->seg_at[i] + f->seg_size[i]) return 1;
    return 0;
}

static int disjoint(char **ptr, size_t *sz, int n) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (ptr[i] && ptr[j] && ptr[i] < ptr[j] + sz[j] && ptr[j] < ptr[i] + sz[i]) return 0;
    return 1;
}

static void test_random(void) {
    CacheAlloc a;
    Fake f;
    setup(&a, &f, 512 * MiB);
    char *ptr[LIVE] = {0};
    size_t sz[LIVE] = {0};
    int ok_inside = 1, ok_sum = 1, ok_disjoint = 1, failures = 0;
    for (int it = 0; it < 20000; it++) {
        int k = (int)(rnd() % LIVE);
        if (ptr[k]) {
            if (cache_free(&a, ptr[k])) failures++;
            ptr[k] = NULL;
            continue;
        }
        size_t n = rnd() % 4 == 0 ? 1 + rnd() % (6 * MiB) : 1 + rnd() % 70000;
        if (!(ptr[k] = get(&a, n, rnd() % 2))) failures++;
        sz[k] = cache_round_size(n);
        if (!inside_segments(&f, (uintptr_t)ptr[k], n) || ((uintptr_t)ptr[k] & 511)) ok_inside = 0;
        if (it % 500 == 0) {
            uint64_t sum = 0;
            for (int i = 0; i < LIVE; i++) sum += ptr[i] ? sz[i] : 0;
            /* blocks may be handed out whole (not split): allocated >= the rounded sum */
            if (a.stats.allocated < sum || a.stats.allocated > a.stats.reserved) ok_sum = 0;
            if (!disjoint(ptr, sz, LIVE)) ok_disjoint = 0;
            cache_empty(&a);
        }
    }
    CHECK(failures == 0 && ok_inside && ok_sum && ok_disjoint);
    for (int i = 0; i < LIVE; i++) cache_free(&a, ptr[i]);
    CHECK(a.stats.allocated == 0 && a.stats.requested == 0);
    cache_empty(&a);
    CHECK(a.stats.reserved == 0 && f.used == 0 && f.allocs == f.frees && f.bad_frees == 0);
}

int main(void) {
    test_rounding();
    test_small_split_merge();
    test_reuse_best_fit();
    test_large_no_split_below_threshold();
    test_streams();
    test_oom();
    test_raw_error();
    test_empty_cache_and_stats();
    test_bad_frees();
    test_random();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
