/* alloc_cpu.c: the CPU caching allocator. Freed blocks go to per-size free
 * lists instead of back to malloc, so a steady training loop reuses the same
 * blocks every step (no malloc per op, no page faults from mmap/munmap of
 * large buffers). Sizes are rounded to classes (64 B steps up to 512 B,
 * then 8 classes per power of two), blocks are 64-byte aligned. The cache is
 * bounded; on allocation failure it is emptied and the allocation retried.
 * Single-threaded by design: tensors are created on the interpreter thread
 * only (kernels' OpenMP threads never allocate storage). */
#include "backend_cpu.h"
#include "../tensor.h"
#include <stdlib.h>

#define NBUCKETS 1024
#define CACHE_LIMIT ((size_t)4 << 30)

typedef struct FreeBlock {
    struct FreeBlock *next;
    size_t nbytes;
} FreeBlock;

static FreeBlock *buckets[NBUCKETS];
static size_t cached;

size_t alloc_round_size(size_t n) {
    if (n <= 512) return n ? (n + 63) & ~(size_t)63 : 64; /* aligned_alloc needs a multiple of 64 */
    int hb = 63 - __builtin_clzll((unsigned long long)n);
    size_t step = (size_t)1 << (hb - 3);
    return (n + step - 1) & ~(step - 1);
}

static size_t bucket_of(size_t n) { return (n / 32 * 2654435761u) % NBUCKETS; }

void *cpu_mem_alloc(size_t nbytes) {
    size_t n = alloc_round_size(nbytes);
    FreeBlock **pp = &buckets[bucket_of(n)];
    for (FreeBlock *b = *pp; b; pp = &b->next, b = b->next) {
        if (b->nbytes == n) {
            *pp = b->next;
            cached -= n;
            return b;
        }
    }
    void *p = aligned_alloc(64, n);
    if (!p) {
        cpu_mem_empty_cache();
        p = aligned_alloc(64, n);
    }
    return p;
}

void cpu_mem_free(void *p, size_t nbytes) {
    if (!p) return;
    size_t n = alloc_round_size(nbytes);
    if (cached + n > CACHE_LIMIT) {
        free(p);
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

void cpu_mem_empty_cache(void) {
    for (int i = 0; i < NBUCKETS; i++) {
        FreeBlock *b = buckets[i];
        while (b) {
            FreeBlock *next = b->next;
            free(b);
            b = next;
        }
        buckets[i] = NULL;
    }
    cached = 0;
}
