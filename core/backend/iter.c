/* iter.c: building n-d launch descriptions (StridedIter, see iter.h) and
 * broadcasting shapes. Walking a description in runs is the CPU backend's
 * business (backend_cpu.c), so nothing here depends on a backend. */
#include "iter.h"
#include <stdio.h>

void iter_init(StridedIter *it, int ndim, const int64_t *shape) {
    it->nops = 0;
    it->ndim = ndim;
    for (int d = 0; d < ndim; d++) it->shape[d] = shape[d];
}

void iter_add(StridedIter *it, void *base, const int64_t *stride, size_t elsize) {
    int k = it->nops++;
    it->base[k] = base;
    it->elsize[k] = elsize;
    for (int d = 0; d < it->ndim; d++) it->stride[k][d] = it->shape[d] == 1 ? 0 : stride[d];
}

void iter_add_tensor(StridedIter *it, const Tensor *t) {
    int64_t st[TENSOR_MAX_DIMS];
    int off = it->ndim - t->ndim;
    for (int d = 0; d < it->ndim; d++) {
        int td = d - off;
        st[d] = (td < 0 || t->shape[td] == 1) ? 0 : t->stride[td];
    }
    iter_add(it, tensor_data(t), st, dtype_size(t->dtype));
}

int broadcast_shapes(const int64_t *a, int na, const int64_t *b, int nb, int64_t *out, int *nout, const char *op) {
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t da = i < n - na ? 1 : a[i - (n - na)];
        int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
        if (da != db && da != 1 && db != 1) {
            char sa[128], sb[128];
            shape_str(a, na, sa, sizeof sa);
            shape_str(b, nb, sb, sizeof sb);
            return accel_fail_int("%s: shapes %s and %s cannot be broadcast (dim %d: %lld vs %lld)", op, sa, sb, i + 1,
                                  (long long)da, (long long)db);
        }
        out[i] = da == 1 ? db : da;
    }
    *nout = n;
    return shape_check(op, out, n, SHAPE_NO_DTYPE) < 0 ? -1 : 0;
}
