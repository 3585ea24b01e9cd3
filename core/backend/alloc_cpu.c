/* alloc_cpu.c: the CPU caching allocator. Freed blocks go to per-size free
 * lists instead of back to the system, so a steady training loop reuses the
 * same blocks every step (no malloc per op, no page faults from fresh
 * pages). Sizes are rounded to classes (64 B steps up to 512 B, then 8
 * classes per power of two), blocks are 64-byte aligned.
 *
 * Policy (what the cache may keep):
 *  - blocks of ALLOC_MMAP_MIN (1 MiB) and more are mapped with mmap and,
 *    when not cached, unmapped at once, so their pages leave the process's
 *    RSS (malloc would keep them in its heap, or raise its mmap threshold
 *    and keep the next ones); smaller blocks come from aligned_alloc;
 *  - the cache holds at most cpu_mem_cache_cap() bytes: the room between
 *    the bytes live now and the most ever live at once (the high-water
 *    mark), plus a slack of 1/CACHE_SLACK_DIV (1/16) of that mark, or
 *    CACHE_FLOOR (16 MiB) when that is larger. So live + cached never
 *    exceeds 1.0625x the high-water mark (or the mark plus the floor): the
 *    process's tensor memory stays near its peak of live bytes, while a
 *    training loop's steady-state blocks (the same sizes every step) are
 *    reused. The slack is for the sizes a step holds in the cache at its
 *    peak for use in another phase: a GPT-2-124M step on one process needs
 *    ~18 % over its live peak to take every block from the cache. With
 *    1/16 it faults ~0.9 GB of fresh pages per step (~0.4 GB with 1/4),
 *    which cost it little on a Zen 5 VM (system time 4.2-4.5 s against
 *    3.5-4.3 s for 3 steps after 1 warm-up, step times within their
 *    noise), while its peak RSS fell from 2.91 to 2.60 GB; a stage-3
 *    sharded rank of the same model on 2 processes peaks at 2 064 MiB
 *    (slack 1/8: 2 179, 1/32: 1 999; its tensors at 1 834). Transparent
 *    huge pages for the large blocks were measured too and left out: they
 *    made fresh blocks cheaper in a loop that recycles them, but a
 *    one-process GPT-2 step spent 27 % of its samples zeroing cold huge
 *    pages (clear_page), 11 % slower in all.
 *    A freed block that does not fit goes back to the system; a new
 *    block from the system that leaves the cache over the cap evicts cached
 *    blocks (the distinct sizes of stage-3 sharding's gathered units, used
 *    once per pass, cannot pile up beyond the peak).
 * On allocation failure the cache is emptied and the allocation retried.
 * Single-threaded by design: tensors are created on the interpreter thread
 * only (kernels' OpenMP threads never allocate storage). */
#include "backend_cpu.h"
#include "../tensor.h"
#include <stdlib.h>
#include <sys/mman.h>

#define NBUCKETS 1024
#define CACHE_FLOOR ((size_t)16 << 20)
#define CACHE_SLACK_DIV 16
#define ALLOC_MMAP_MIN ((size_t)1 << 20)

typedef struct FreeBlock {
    struct FreeBlock *next;
    size_t nbytes;
} FreeBlock;

static FreeBlock *buckets[NBUCKETS];
static size_t cached, live, high; /* high: the most bytes ever live at once */

size_t alloc_round_size(size_t n) {
    if (n <= 512) return n ? (n + 63) & ~(size_t)63 : 64; /* aligned_alloc needs a multiple of 64 */
    int hb = 63 - __builtin_clzll((unsigned long long)n);
    size_t step = (size_t)1 << (hb - 3);
    return (n + step - 1) & ~(step - 1);
}

static size_t bucket_of(size_t n) { return (n / 32 * 2654435761u) % NBUCKETS; }

size_t cpu_mem_cache_cap(void) {
    size_t room = (high > live ? high - live : 0) + high / CACHE_SLACK_DIV;
    return room > CACHE_FLOOR ? room : CACHE_FLOOR;
}

/* A fresh block of n (rounded) bytes from the system, NULL if none. */
static void *system_alloc(size_t n) {
    if (n < ALLOC_MMAP_MIN) return aligned_alloc(64, n);
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void system_free(void *p, size_t n) {
    if (n < ALLOC_MMAP_MIN) free(p);
    else if (munmap(p, n) != 0) abort(); /* only for a block system_alloc did not map: memory corruption */
}

/* Returns cached blocks to the system until at most keep bytes stay cached. */
static void release_cached(size_t keep) {
    for (int i = 0; i < NBUCKETS && cached > keep; i++) {
        while (buckets[i] && cached > keep) {
            FreeBlock *b = buckets[i];
            buckets[i] = b->next;
            cached -= b->nbytes;
            system_free(b, b->nbytes);
        }
    }
}

void *cpu_mem_alloc(size_t nbytes) {
    size_t n = alloc_round_size(nbytes);
    FreeBlock **pp = &buckets[bucket_of(n)];
    for (FreeBlock *b = *pp; b; pp = &b->next, b = b->next) {
        if (b->nbytes == n) {
            *pp = b->next;
            cached -= n;
            live += n;
            return b;
        }
    }
    void *p = system_alloc(n);
    if (!p) {
        cpu_mem_empty_cache();
        p = system_alloc(n);
    }
    if (!p) return NULL;
    live += n;
    if (live > high) high = live;
    release_cached(cpu_mem_cache_cap()); /* the new block may leave the cache over the cap */
    return p;
}

void cpu_mem_free(void *p, size_t nbytes) {
    if (!p) return;
    size_t n = alloc_round_size(nbytes);
    live -= n;
    if (cached + n > cpu_mem_cache_cap()) {
        system_free(p, n);
        return;
    }
    FreeBlock *b = p;
    b->nbytes = n;
    size_t k = bucket_of(n);
    b->next = buckets[k];
    buckets[k] = b;
    cached += n;
}

size_t cpu_mem_cached_bytes(void) { return cached; }

void cpu_mem_empty_cache(void) { release_cached(0); }

#if defined(__SANITIZE_ADDRESS__)
/* Sanitizer builds: LeakSanitizer does not scan mmap'ed blocks, so it
 * cannot follow a free list through one and would report the cached blocks
 * behind it as leaks; the cache is emptied at exit, before its check (an
 * atexit handler registered after the sanitizer's runs before it). */
__attribute__((constructor)) static void empty_cache_at_exit(void) { atexit(cpu_mem_empty_cache); }
#endif
