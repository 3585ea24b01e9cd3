/* iter.h: the backend interface's n-d launch description (backend.h): one
 * (broadcast) shape and, per operand, a base device pointer and strides in
 * elements. The core fills it; the backend runs it (the CPU backend splits
 * it into innermost runs, backend_cpu.c). */
#ifndef ACCEL_ITER_H
#define ACCEL_ITER_H

#include "../tensor.h"

#define ITER_MAX_OPS 4

typedef struct {
    int nops, ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    int64_t stride[ITER_MAX_OPS][TENSOR_MAX_DIMS]; /* elements */
    size_t elsize[ITER_MAX_OPS];
    char *base[ITER_MAX_OPS];
} StridedIter;

/* strides[k] may be broadcast (0) strides. */
void iter_init(StridedIter *it, int ndim, const int64_t *shape);
void iter_add(StridedIter *it, void *base, const int64_t *stride, size_t elsize);
/* Add a tensor operand broadcast to the iterator's shape (trailing alignment). */
void iter_add_tensor(StridedIter *it, const Tensor *t);
/* A one-dim description of n elements (the common contiguous case; cheap). */
static inline void iter_init_run(StridedIter *it, int64_t n) {
    it->nops = 0;
    it->ndim = 1;
    it->shape[0] = n;
}
/* Add t's data as a one-stride run (1: contiguous, 0: one element broadcast)
 * to a one-dim description. */
static inline void iter_add_run(StridedIter *it, const Tensor *t, int64_t stride) {
    int k = it->nops++;
    it->base[k] = tensor_data(t);
    it->elsize[k] = dtype_size(t->dtype);
    it->stride[k][0] = it->shape[0] == 1 ? 0 : stride;
}
/* The launch description for out and ins[0..nin) broadcast to out's shape:
 * one run when run_st gives each input's run stride (1: contiguous, 0: one
 * element; out contiguous), else the n-d description. */
static inline void iter_launch(StridedIter *it, const Tensor *out, const Tensor *const *ins, int nin,
                               const int64_t *run_st) {
    if (run_st) {
        iter_init_run(it, out->numel);
        iter_add_run(it, out, 1);
        for (int k = 0; k < nin; k++) iter_add_run(it, ins[k], run_st[k]);
        return;
    }
    iter_init(it, out->ndim, out->shape);
    iter_add_tensor(it, out);
    for (int k = 0; k < nin; k++) iter_add_tensor(it, ins[k]);
}

/* Broadcast shapes a and b into out; -1 with an error naming op on mismatch. */
int broadcast_shapes(const int64_t *a, int na, const int64_t *b, int nb, int64_t *out, int *nout, const char *op);

#endif
