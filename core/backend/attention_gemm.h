/* attention_gemm.h: scaled-dot-product attention composed from a backend's
 * own GEMM, softmax, reduction and elementwise entries (attention_gemm.c),
 * for a backend whose library GEMM outruns a hand-written fused kernel
 * (CUDA: cuBLASLt). Same contract as Backend.attention_fwd / _bwd
 * (backend.h; KAttn in kernels/kops.h), float32 only. scratch_elems caps
 * each of the score-sized scratch buffers (floats; 0: the default, 32 Mi);
 * tests pass small values to split the batch-heads into several groups. */
#ifndef ACCEL_ATTENTION_GEMM_H
#define ACCEL_ATTENTION_GEMM_H

#include "backend.h"

int attention_gemm_fwd(const Backend *be, const KAttn *a, const void *q, const void *k, const void *v, void *o,
                       void *lse, int64_t scratch_elems);
int attention_gemm_bwd(const Backend *be, const KAttn *a, const void *q, const void *k, const void *v,
                       const void *lse, const void *go, void *gq, void *gk, void *gv, int64_t scratch_elems);

#endif
