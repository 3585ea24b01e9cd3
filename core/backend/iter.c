/* iter.c: strided multi-operand iteration (see iter.h). Runs shorter than
 * a kernel's own parallel threshold are spread over the OpenMP team when
 * there are many of them (a broadcast bias row, a column slice): each run
 * is independent and the callbacks are pure kernel calls. */
#include "iter.h"
#include "../../kernels/cpu/kernels.h"
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

/* Drop size-1 dims and merge dims contiguous for every operand. */
static void iter_coalesce(StridedIter *it) {
    int nd = 0;
    for (int d = 0; d < it->ndim; d++) {
        if (it->shape[d] == 1) continue;
        if (nd > 0) {
            bool merge = true;
            for (int k = 0; k < it->nops; k++)
                if (it->stride[k][nd - 1] != it->stride[k][d] * it->shape[d]) merge = false;
            if (merge) {
                it->shape[nd - 1] *= it->shape[d];
                for (int k = 0; k < it->nops; k++) it->stride[k][nd - 1] = it->stride[k][d];
                continue;
            }
        }
        it->shape[nd] = it->shape[d];
        for (int k = 0; k < it->nops; k++) it->stride[k][nd] = it->stride[k][d];
        nd++;
    }
    it->ndim = nd;
}

void iter_run(StridedIter *it, IterRunFn fn, void *ctx) {
    for (int d = 0; d < it->ndim; d++)
        if (it->shape[d] == 0) return;
    iter_coalesce(it);
    char *ptrs[ITER_MAX_OPS];
    int64_t inner[ITER_MAX_OPS];
    if (it->ndim == 0) {
        for (int k = 0; k < it->nops; k++) ptrs[k] = it->base[k], inner[k] = 0;
        fn(ctx, 1, ptrs, inner);
        return;
    }
    int last = it->ndim - 1;
    int64_t n = it->shape[last];
    for (int k = 0; k < it->nops; k++) inner[k] = it->stride[k][last];
    int64_t runs = 1;
    for (int d = 0; d < last; d++) runs *= it->shape[d];
    if (runs > 1 && n < KERNEL_PAR_MIN && runs * n >= KERNEL_PAR_MIN) {
        KERNEL_FOR(r, runs, runs * n, {
            char *pr[ITER_MAX_OPS];
            for (int k = 0; k < it->nops; k++) pr[k] = it->base[k];
            for (int64_t d = last - 1, rest = r; d >= 0; d--) {
                const int64_t i = rest % it->shape[d];
                rest /= it->shape[d];
                for (int k = 0; k < it->nops; k++) pr[k] += i * it->stride[k][d] * (int64_t)it->elsize[k];
            }
            fn(ctx, n, pr, inner);
        });
        return;
    }
    int64_t idx[TENSOR_MAX_DIMS] = {0};
    for (;;) {
        for (int k = 0; k < it->nops; k++) {
            char *p = it->base[k];
            for (int d = 0; d < last; d++) p += idx[d] * it->stride[k][d] * (int64_t)it->elsize[k];
            ptrs[k] = p;
        }
        fn(ctx, n, ptrs, inner);
        int d = last - 1;
        while (d >= 0 && ++idx[d] == it->shape[d]) idx[d--] = 0;
        if (d < 0) break;
    }
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
