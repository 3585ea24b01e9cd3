/* test_alloc_cpu.c: the CPU caching allocator's policy (core/backend/alloc_cpu.c):
 * a block freed and asked for again is the same block (cached); freeing
 * many large blocks of distinct sizes (as stage-3 sharding's gathered
 * units) leaves at most the documented cap cached (64 MiB while little is
 * live), and the process's resident memory (/proc/self/statm) goes back
 * down to within that cap; with much live memory the cap is 1/64 of it.
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

/* 48 blocks of 5 to 6 MiB, touched, then freed. */
#define N_BLOCKS 48
static size_t block_size(int i) { return 5 * MIB + (size_t)i * (MIB / 50); }

static void test_cap_small_live(void) {
    cpu_mem_empty_cache();
    void *p[N_BLOCKS];
    size_t total = 0;
    for (int i = 0; i < N_BLOCKS; i++) {
        p[i] = cpu_mem_alloc(block_size(i));
        if (p[i]) memset(p[i], 1, block_size(i)), total += block_size(i);
    }
    CHECK(total > 4 * 64 * MIB); /* far more than the floor */
    size_t before = rss_bytes();
    for (int i = 0; i < N_BLOCKS; i++) cpu_mem_free(p[i], block_size(i));
    size_t after = rss_bytes();
    CHECK(cpu_mem_cached_bytes() <= 64 * MIB);
    CHECK(cpu_mem_cached_bytes() >= 32 * MIB); /* it still caches, up to the cap */
    CHECK(before > 0 && after + total - 64 * MIB - 8 * MIB <= before); /* the rest left RSS */
    cpu_mem_empty_cache();
}

/* 6 GiB live: the cap is 1/64 of it (96 MiB); blocks freed while it is
 * live stay under that. Mapped, never touched (no RSS). */
static void test_cap_tracks_live(void) {
    cpu_mem_empty_cache();
    size_t big = (size_t)6 << 30;
    void *hold = cpu_mem_alloc(big);
    CHECK(hold != NULL);
    CHECK(cpu_mem_cache_cap() >= big / 64 && cpu_mem_cache_cap() <= big / 64 + MIB);
    void *p[N_BLOCKS];
    for (int i = 0; i < N_BLOCKS; i++) p[i] = cpu_mem_alloc(block_size(i));
    for (int i = 0; i < N_BLOCKS; i++) cpu_mem_free(p[i], block_size(i));
    CHECK(cpu_mem_cached_bytes() <= big / 64 + 8 * MIB && cpu_mem_cached_bytes() > 64 * MIB);
    cpu_mem_free(hold, big);
    cpu_mem_empty_cache();
}

int main(void) {
    test_reuse();
    test_cap_small_live();
    test_cap_tracks_live();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
