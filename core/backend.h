/* backend.h: a device backend as a struct of function pointers (memory and
 * the compute families the core dispatches through). The CPU backend is
 * filled from kernels/cpu; a CUDA backend plugs in beside it (make CUDA=1)
 * without `if (cuda)` in the ops. */
#ifndef ACCEL_BACKEND_H
#define ACCEL_BACKEND_H

#include "tensor.h"
#include "../kernels/cpu/kernels.h"

typedef struct Backend {
    const char *name;
    void *(*alloc)(size_t nbytes);            /* NULL on failure */
    void (*free)(void *p, size_t nbytes);
    size_t (*cached_bytes)(void);
    void (*empty_cache)(void);
    /* compute families; cdt is the compute dtype (F32, F64 or I64) */
    void (*binary)(KBinOp op, DType cdt, int64_t n, const void *a, int64_t sa, const void *b, int64_t sb, void *o, int64_t so);
    void (*unary)(KUnOp op, DType cdt, int64_t n, const void *a, int64_t sa, void *o, int64_t so, double p1, double p2);
    void (*cast)(int64_t n, const void *a, DType adt, int64_t sa, void *o, DType odt, int64_t so);
    int (*gemm)(DType dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A, int64_t lda,
                const void *B, int64_t ldb, double beta, void *C, int64_t ldc);
} Backend;

/* The backend serving a device, or NULL (with an error) if this build has none. */
const Backend *backend_for(Device d);
extern const Backend backend_cpu;

#endif
