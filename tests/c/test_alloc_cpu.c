/* test_alloc_cpu.c: the CPU caching allocator's policy (core/backend/alloc_cpu.c):
 * a block freed and asked for again is the same block (cached); a step
 * that allocates and frees far more than the floor in blocks of distinct
 * sizes gets every block back from the cache the next time (a training
 * loop's steady state); large blocks of ever new sizes, one live at a time
 * (stage-3 sharding's gathered units), never leave more than the high-water
 * mark of live bytes plus 1/16 of it (or the 16 MiB floor) in live + cached,
 * and the process's resident memory (/proc/self/statm) stays within it.
 * Last line "N passed, N failed". */
#include "core/backend/backend_cpu.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#define MIB ((size_t)1 << 20)

/* Resident bytes of this process, 0 if unreadable. */
static size_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (!f) return 0;
    int got = fscanf(f, "%lu %lu", &size, &resident);
    fclose(f);
    return got == 2 ? resident * (size_t)sysconf(_SC_PAGESIZE) : 0;
}

static void test_reuse(void) {
    cpu_mem_empty_cache();
    void *a = cpu_mem_alloc(3 * MIB);
    CHECK(a != NULL);
    cpu_mem_free(a, 3 * MIB);
    CHECK(cpu_mem_cached_bytes() == 3 * MIB);
    void *b = cpu_mem_alloc(3 * MIB);
    CHECK(b == a && cpu_mem_cached_bytes() == 0);
    cpu_mem_free(b, 3 * MIB);
    cpu_mem_empty_cache();
    CHECK(cpu_mem_cached_bytes() == 0);
}

#define FLOOR (16 * MIB)
#define SLACK(n) ((n) / 16 > FLOOR ? (n) / 16 : FLOOR) /* the policy's slack over a high-water mark n */

/* 48 blocks of 5 to 6 MiB (240 MiB in all), touched, freed; twice: the
 * second pass is served from the cache alone. */
#define N_BLOCKS 48
static size_t block_size(int i) { return 5 * MIB + (size_t)i * (MIB / 50); }

static size_t steady_total; /* the step's bytes: the high-water mark it sets */

static void test_steady_state_reuse(void) {
    cpu_mem_empty_cache();
    void *p[N_BLOCKS];
    size_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t cached_before = cpu_mem_cached_bytes();
        for (int i = 0; i < N_BLOCKS; i++) {
            p[i] = cpu_mem_alloc(block_size(i));
            if (p[i]) memset(p[i], 1, block_size(i));
            if (pass == 0) total += alloc_round_size(block_size(i));
        }
        if (pass == 1) CHECK(cached_before == total && cpu_mem_cached_bytes() == 0); /* all from the cache */
        for (int i = 0; i < N_BLOCKS; i++) cpu_mem_free(p[i], block_size(i));
    }
    CHECK(total > 4 * FLOOR);
    CHECK(cpu_mem_cached_bytes() == total); /* within the high-water mark: kept */
    steady_total = total;
    cpu_mem_empty_cache();
}

/* One large block live at a time, each of a new size (2 to 39 MiB, ~6 GiB
 * over the loop; the step above set the high-water mark): live + cached
 * stays within that mark plus the slack, and RSS does not grow by the bytes
 * allocated. */
static void test_bounded_by_peak(void) {
    cpu_mem_empty_cache();
    size_t rss0 = rss_bytes(), worst = 0, sum = 0;
    int ok = 1;
    for (int i = 0; i < 300; i++) {
        size_t n = 2 * MIB + (size_t)i * (MIB / 8);
        void *q = cpu_mem_alloc(n);
        if (!q) { ok = 0; break; }
        memset(q, 1, n);
        sum += n;
        size_t held = cpu_mem_cached_bytes() + alloc_round_size(n);
        if (held > worst) worst = held;
        cpu_mem_free(q, n);
    }
    size_t rss1 = rss_bytes();
    CHECK(ok && sum > ((size_t)4 << 30));
    CHECK(steady_total > 0 && worst <= steady_total + SLACK(steady_total) + 8 * MIB);
    CHECK(rss0 > 0 && rss1 <= rss0 + steady_total + SLACK(steady_total) + 16 * MIB);
    cpu_mem_empty_cache();
}

/* A block past every earlier high-water mark: freed, it is kept (room);
 * a new, larger size then trims the cache to the slack of the new mark. */
static void test_floor_only(void) {
    cpu_mem_empty_cache();
    size_t big = (size_t)300 * MIB; /* past every earlier high-water mark */
    void *b = cpu_mem_alloc(big);
    CHECK(b != NULL);
    cpu_mem_free(b, big); /* room = high - live = the whole block: kept */
    CHECK(cpu_mem_cached_bytes() == alloc_round_size(big));
    void *c = cpu_mem_alloc(big + 64 * MIB); /* a new size past the mark: the cache is trimmed */
    CHECK(c != NULL && cpu_mem_cached_bytes() <= SLACK(big + 64 * MIB));
    CHECK(cpu_mem_cached_bytes() < alloc_round_size(big)); /* the old block went back */
    cpu_mem_free(c, big + 64 * MIB);
    cpu_mem_empty_cache();
}

int main(void) {
    test_reuse();
    test_steady_state_reuse();
    test_bounded_by_peak();
    test_floor_only();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
