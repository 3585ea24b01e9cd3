/* alloc_cache.c: the caching allocator's free lists, splitting, merging and
 * statistics (alloc_cache.h says the policy). No CUDA here: the segments
 * come from the injected raw allocator. */
#include "alloc_cache.h"
#include "cuda_check.h"
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

struct CacheBlock {
    char *ptr;
    size_t size;       /* rounded */
    size_t requested;  /* what the caller asked for (0 when free) */
    uintptr_t stream;
    int pool;          /* 0 small, 1 large */
    int is_free;
    CacheBlock *prev, *next;          /* neighbours in the segment, by address */
    CacheBlock *list_next;            /* free list or used bucket */
    CacheBlock *seg_next;             /* segment list (first blocks only) */
};

size_t cache_round_size(size_t size) {
    if (size == 0) return CACHE_ROUND;
    return (size + CACHE_ROUND - 1) / CACHE_ROUND * CACHE_ROUND;
}

static size_t segment_size(size_t rounded) {
    if (rounded <= CACHE_SMALL_MAX) return CACHE_SMALL_SEGMENT;
    return (rounded + CACHE_LARGE_ROUND - 1) / CACHE_LARGE_ROUND * CACHE_LARGE_ROUND;
}

void cache_init(CacheAlloc *a, CacheRaw raw, int device) {
    memset(a, 0, sizeof *a);
    a->raw = raw;
    a->device = device;
}

static size_t bucket_of(const void *p) { return ((uintptr_t)p >> 9) % CACHE_BUCKETS; }

/* ---- lists ---- */

static void free_insert(CacheAlloc *a, CacheBlock *b) {
    CacheBlock **at = &a->free_list[b->pool];
    while (*at && ((*at)->size < b->size || ((*at)->size == b->size && (*at)->ptr < b->ptr))) at = &(*at)->list_next;
    b->list_next = *at;
    *at = b;
    b->is_free = 1;
}

static void free_remove(CacheAlloc *a, CacheBlock *b) {
    CacheBlock **at = &a->free_list[b->pool];
    while (*at != b) at = &(*at)->list_next;
    *at = b->list_next;
    b->list_next = NULL;
    b->is_free = 0;
}

static void used_insert(CacheAlloc *a, CacheBlock *b) {
    CacheBlock **head = &a->used[bucket_of(b->ptr)];
    b->list_next = *head;
    *head = b;
}

static CacheBlock *used_take(CacheAlloc *a, const void *p) {
    for (CacheBlock **at = &a->used[bucket_of(p)]; *at; at = &(*at)->list_next)
        if ((*at)->ptr == p) {
            CacheBlock *b = *at;
            *at = b->list_next;
            b->list_next = NULL;
            return b;
        }
    return NULL;
}

/* ---- segments ---- */

static void segment_unlink(CacheAlloc *a, CacheBlock *first) {
    CacheBlock **at = &a->segments;
    while (*at != first) at = &(*at)->seg_next;
    *at = first->seg_next;
}

/* Releases every segment that is one free block; returns the bytes freed. */
static size_t release_free_segments(CacheAlloc *a) {
    size_t freed = 0;
    for (CacheBlock *s = a->segments, *nx; s; s = nx) {
        nx = s->seg_next;
        if (!s->is_free || s->next) continue;
        free_remove(a, s);
        segment_unlink(a, s);
        a->raw.free(a->raw.ctx, s->ptr);
        a->stats.reserved -= s->size;
        a->stats.num_segments--;
        a->stats.num_raw_frees++;
        freed += s->size;
        free(s);
    }
    return freed;
}

/* A new segment for a request, on the free list: 0, 1 when the device is
 * out of memory (after releasing the cache once), -1 on another failure. */
static int new_segment(CacheAlloc *a, size_t rounded, uintptr_t stream, CacheBlock **out) {
    size_t sz = segment_size(rounded);
    CacheBlock *b = calloc(1, sizeof *b);
    if (!b) return cuda_fail("caching allocator: host out of memory for bookkeeping");
    void *p = NULL;
    int rc = a->raw.alloc(a->raw.ctx, sz, &p);
    if (rc > 0 && release_free_segments(a) > 0) rc = a->raw.alloc(a->raw.ctx, sz, &p);
    if (rc) {
        free(b);
        return rc;
    }
    *b = (CacheBlock){.ptr = p, .size = sz, .stream = stream, .pool = rounded > CACHE_SMALL_MAX};
    b->seg_next = a->segments;
    a->segments = b;
    a->stats.reserved += sz;
    if (a->stats.reserved > a->stats.reserved_peak) a->stats.reserved_peak = a->stats.reserved;
    a->stats.num_segments++;
    a->stats.num_raw_allocs++;
    free_insert(a, b);
    *out = b;
    return 0;
}

/* ---- alloc / free ---- */

static CacheBlock *best_fit(CacheAlloc *a, int pool, size_t rounded, uintptr_t stream) {
    for (CacheBlock *b = a->free_list[pool]; b; b = b->list_next)
        if (b->size >= rounded && b->stream == stream) return b;
    return NULL;
}

/* Cuts b to `rounded` when enough is left over; the rest becomes free. */
static int split(CacheAlloc *a, CacheBlock *b, size_t rounded) {
    size_t rest = b->size - rounded;
    if (b->pool ? rest <= CACHE_SMALL_MAX : rest < CACHE_ROUND) return 0;
    CacheBlock *r = calloc(1, sizeof *r);
    if (!r) return cuda_fail("caching allocator: host out of memory for bookkeeping");
    *r = (CacheBlock){.ptr = b->ptr + rounded, .size = rest, .stream = b->stream, .pool = b->pool,
                      .prev = b, .next = b->next};
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = rounded;
    free_insert(a, r);
    return 0;
}

static void fmt_bytes(char *buf, size_t n, uint64_t v) {
    static const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double x = (double)v;
    int u = 0;
    while (x >= 1024 && u < 4) x /= 1024, u++;
    snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", x, unit[u]);
}

static int out_of_memory(CacheAlloc *a, size_t size) {
    char want[32], used[32], held[32];
    fmt_bytes(want, sizeof want, size);
    fmt_bytes(used, sizeof used, a->stats.allocated);
    fmt_bytes(held, sizeof held, a->stats.reserved);
    a->stats.num_ooms++;
    return cuda_fail("CUDA out of memory. Tried to allocate %s on cuda:%d (%s allocated by tensors, %s reserved "
                     "by the caching allocator)", want, a->device, used, held);
}

int cache_alloc(CacheAlloc *a, size_t size, uintptr_t stream, void **p) {
    *p = NULL;
    if (size == 0) return 0;
    if (size > SIZE_MAX - CACHE_LARGE_ROUND) return out_of_memory(a, size);
    size_t rounded = cache_round_size(size);
    int pool = rounded > CACHE_SMALL_MAX;
    CacheBlock *b = best_fit(a, pool, rounded, stream);
    if (!b) {
        int rc = new_segment(a, rounded, stream, &b);
        if (rc) return rc < 0 ? -1 : out_of_memory(a, size);
    }
    free_remove(a, b);
    if (split(a, b, rounded)) {
        free_insert(a, b);
        return -1;
    }
    b->requested = size;
    used_insert(a, b);
    a->stats.allocated += b->size;
    a->stats.requested += size;
    if (a->stats.allocated > a->stats.allocated_peak) a->stats.allocated_peak = a->stats.allocated;
    a->stats.num_allocs++;
    *p = b->ptr;
    return 0;
}

/* Folds b's free right neighbour into b. */
static void merge_next(CacheAlloc *a, CacheBlock *b) {
    CacheBlock *n = b->next;
    free_remove(a, n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    free(n);
}

int cache_free(CacheAlloc *a, void *p) {
    if (!p) return 0;
    CacheBlock *b = used_take(a, p);
    if (!b) return cuda_fail("caching allocator: %p was not allocated on cuda:%d (or was freed twice)", p, a->device);
    a->stats.allocated -= b->size;
    a->stats.requested -= b->requested;
    a->stats.num_frees++;
    b->requested = 0;
    if (b->next && b->next->is_free) merge_next(a, b);
    if (b->prev && b->prev->is_free) {
        CacheBlock *prev = b->prev;
        free_remove(a, prev);
        prev->size += b->size;
        prev->next = b->next;
        if (b->next) b->next->prev = prev;
        free(b);
        b = prev;
    }
    free_insert(a, b);
    return 0;
}

void cache_empty(CacheAlloc *a) { release_free_segments(a); }

void cache_destroy(CacheAlloc *a) {
    for (CacheBlock *s = a->segments, *nx; s; s = nx) {
        nx = s->seg_next;
        a->raw.free(a->raw.ctx, s->ptr);
        for (CacheBlock *b = s, *bn; b; b = bn) {
            bn = b->next;
            free(b);
        }
    }
    CacheRaw raw = a->raw;
    cache_init(a, raw, a->device);
}

CacheStats cache_stats(const CacheAlloc *a) { return a->stats; }

void cache_reset_peaks(CacheAlloc *a) {
    a->stats.allocated_peak = a->stats.allocated;
    a->stats.reserved_peak = a->stats.reserved;
}
