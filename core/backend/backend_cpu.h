/* backend_cpu.h: the CPU backend's private pieces: its caching allocator
 * (alloc_cpu.c), used by the table in backend_cpu.c. */
#ifndef ACCEL_BACKEND_CPU_H
#define ACCEL_BACKEND_CPU_H

#include <stddef.h>

void *cpu_mem_alloc(size_t nbytes);
void cpu_mem_free(void *p, size_t nbytes);
size_t cpu_mem_cached_bytes(void);
size_t cpu_mem_cache_cap(void); /* the most the cache keeps now (alloc_cpu.c's policy) */
void cpu_mem_empty_cache(void);
size_t alloc_round_size(size_t n); /* the size classes, shared with the sim backend */

#endif
