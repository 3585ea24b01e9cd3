/* alloc_cache.h: the caching allocator's bookkeeping, plain C over an
 * injected raw allocator (cudaMalloc / cudaFree in alloc.cu, a fake in the
 * host tests), one CacheAlloc per device. PyTorch's CUDACachingAllocator is
 * the model, simplified:
 *  - request sizes round up to 512 bytes;
 *  - requests up to 1 MiB ("small") are cut from 2 MiB segments, larger
 *    ones get a segment of their size rounded up to 2 MiB;
 *  - a free block is reused by the smallest free block of the same pool and
 *    stream that fits (best fit); the rest is split off as a new free block
 *    when at least 512 bytes (small pool) or more than 1 MiB (large pool)
 *    remain;
 *  - a freed block merges with free neighbours of its segment;
 *  - blocks belong to the stream they were allocated on and are reused only
 *    by that stream (work queued on one stream may still be reading them);
 *  - when the raw allocator fails, every wholly free segment is released
 *    and the request tried once more; a second failure is an error
 *    "CUDA out of memory. Tried to allocate ..." (cuda_last_error);
 *  - cache_empty releases every wholly free segment (torch.cuda.empty_cache).
 * Not thread-safe: the caller holds one lock per device. */
#ifndef ACCEL_CUDA_ALLOC_CACHE_H
#define ACCEL_CUDA_ALLOC_CACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CACHE_ROUND 512u
#define CACHE_SMALL_MAX (1u << 20)     /* requests up to this come from small segments */
#define CACHE_SMALL_SEGMENT (2u << 20) /* the size of a small segment */
#define CACHE_LARGE_ROUND (2u << 20)   /* large segments round up to this */
#define CACHE_BUCKETS 1024

/* The raw allocator: alloc returns 0 and *p; 1 when the device is out of
 * memory (the cache then releases what it holds, retries, and reports "CUDA
 * out of memory"); -1 on any other failure, with cuda_last_error set, which
 * the cache passes on (no driver, a broken context: not out of memory). */
typedef struct {
    void *ctx;
    int (*alloc)(void *ctx, size_t size, void **p);
    void (*free)(void *ctx, void *p);
} CacheRaw;

typedef struct {
    uint64_t allocated, allocated_peak; /* bytes in blocks handed out (rounded sizes) */
    uint64_t reserved, reserved_peak;   /* bytes in segments held from the raw allocator */
    uint64_t requested;                 /* bytes asked for, unrounded, now in use */
    uint64_t num_allocs, num_frees, num_segments, num_raw_allocs, num_raw_frees, num_ooms;
} CacheStats;

typedef struct CacheBlock CacheBlock;

typedef struct {
    CacheRaw raw;
    int device;
    CacheBlock *free_list[2];          /* [small, large], free blocks by ascending size */
    CacheBlock *used[CACHE_BUCKETS];   /* blocks handed out, hashed by address */
    CacheBlock *segments;              /* the first block of every segment */
    CacheStats stats;
} CacheAlloc;

void cache_init(CacheAlloc *a, CacheRaw raw, int device);
/* size 0 gives NULL and succeeds. Returns 0, or -1 with cuda_last_error. */
int cache_alloc(CacheAlloc *a, size_t size, uintptr_t stream, void **p);
/* p must come from cache_alloc (NULL is ignored); -1 with an error otherwise. */
int cache_free(CacheAlloc *a, void *p);
/* Gives every wholly free segment back to the raw allocator. */
void cache_empty(CacheAlloc *a);
/* Frees every segment, also those still in use (the device is going away). */
void cache_destroy(CacheAlloc *a);
CacheStats cache_stats(const CacheAlloc *a);
void cache_reset_peaks(CacheAlloc *a);
/* The size a request is rounded to (for tests and memory_summary). */
size_t cache_round_size(size_t size);

#ifdef __cplusplus
}
#endif

#endif
