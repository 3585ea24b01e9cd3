/* alloc_cpu.c: the CPU caching allocator. Freed blocks go to per-size free
 * lists instead of back to malloc, so a steady training loop reuses the same
 * blocks every step (no malloc per op, no page faults from mmap/munmap of
 * large buffers). Sizes are rounded to classes (64 B steps up to 512 B,
 * then 8 classes per power of two), blocks are 64-byte aligned. The cache is
 * bounded; on allocation failure it is emptied and the allocation retried.
 * Single-threaded by design: tensors are created on the interpreter thread
 * only (kernels' OpenMP threads never allocate storage). */
#include "backend.h"
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

static void *cpu_alloc(size_t nbytes) {
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
        backend_cpu.empty_cache();
        p = aligned_alloc(64, n);
    }
    return p;
}

static void cpu_free(void *p, size_t nbytes) {
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

static size_t cpu_cached_bytes(void) { return cached; }

static void cpu_empty_cache(void) {
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

static void cpu_binary(KBinOp op, DType cdt, int64_t n, const void *a, int64_t sa, const void *b, int64_t sb, void *o, int64_t so) {
    if (cdt == DT_F32) k_binary_f32(op, n, a, sa, b, sb, o, so);
    else if (cdt == DT_F64) k_binary_f64(op, n, a, sa, b, sb, o, so);
    else k_binary_i64(op, n, a, sa, b, sb, o, so);
}

static void cpu_unary(KUnOp op, DType cdt, int64_t n, const void *a, int64_t sa, void *o, int64_t so, double p1, double p2) {
    if (cdt == DT_F32) k_unary_f32(op, n, a, sa, o, so, p1, p2);
    else if (cdt == DT_F64) k_unary_f64(op, n, a, sa, o, so, p1, p2);
    else k_unary_i64(op, n, a, sa, o, so, p1, p2);
}

static int cpu_gemm(DType dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A, int64_t lda,
                    const void *B, int64_t ldb, double beta, void *C, int64_t ldc) {
    switch (dt) {
    case DT_F32: return k_gemm_f32(ta, tb, M, N, K, (float)alpha, A, lda, B, ldb, (float)beta, C, ldc);
    case DT_F64: return k_gemm_f64(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    case DT_BF16: return k_gemm_bf16(ta, tb, M, N, K, (float)alpha, A, lda, B, ldb, (float)beta, C, ldc);
    default: return -1;
    }
}

const Backend backend_cpu = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .cached_bytes = cpu_cached_bytes,
    .empty_cache = cpu_empty_cache,
    .binary = cpu_binary,
    .unary = cpu_unary,
    .cast = k_cast,
    .gemm = cpu_gemm,
};

const Backend *backend_for(Device d) {
    if (d.type == DEV_CPU) return &backend_cpu;
    return accel_fail("device cuda:%d is not available: this build has no CUDA backend (build with make CUDA=1 on a machine with a GPU)", d.index);
}
