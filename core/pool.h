/* pool.h: free lists for the runtime's small fixed-size objects (tensor
 * headers, storages, autograd nodes), so the per-op path does not go to
 * malloc. Blocks are kept for reuse, never returned to the system; objects
 * are created on the interpreter thread only (kernels never allocate them). */
#ifndef ACCEL_POOL_H
#define ACCEL_POOL_H

#include <stdlib.h>
#include <string.h>

typedef struct {
    void *free_list;
    size_t size;
} ObjPool;

/* A zeroed block of pool->size bytes, or NULL when out of memory. */
static inline void *pool_alloc(ObjPool *p) {
    void *b = p->free_list;
    if (b) {
        p->free_list = *(void **)b;
        memset(b, 0, p->size);
        return b;
    }
    return calloc(1, p->size);
}

static inline void pool_free(ObjPool *p, void *b) {
    if (!b) return;
    *(void **)b = p->free_list;
    p->free_list = b;
}

#endif
