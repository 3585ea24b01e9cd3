/* lru.h: the replacement rule of the kernels' small primitive caches
 * (conv_dnnl.c, gemm.c), whose slots each keep a used flag and the LRU
 * clock of their last use. */
#ifndef ACCEL_LRU_H
#define ACCEL_LRU_H

#include <stdint.h>

/* Whether a slot (used, last) is a better one to rebuild on a miss than the
 * victim chosen so far: a free slot beats a used one, then the least
 * recently used wins. */
static inline int lru_better_victim(int used, uint64_t last, int victim_used, uint64_t victim_last) {
    if (!used) return victim_used;
    return victim_used && last < victim_last;
}

#endif
