/* index.c: gather / index_select along the middle dim of contiguous
 * (outer, n, inner) views, and their adjoints scatter_add / index_add
 * (accumulating, f32 / f64). Indices are pre-validated, non-negative.
 *
 *   gather:       out(o, j, i) = x(o, idx(o, j, i), i)   idx (outer, m, inner)
 *   index_select: out(o, j, i) = x(o, idx[j], i)         idx (m)
 *   scatter_add:  gx(o, idx(o, j, i), i) += gout(o, j, i)
 *   index_add:    gx(o, idx[j], i)       += gout(o, j, i)
 *
 * The adjoints run tasks over (o, block of BLK columns i): distinct tasks
 * never touch the same gx element, and within a task j runs in order, so
 * duplicate indices accumulate deterministically without atomics. */
#include <string.h>
#include "kernels.h"

#define BLK 512 /* columns per adjoint task */

typedef uint16_t __attribute__((may_alias)) u16a;
typedef uint32_t __attribute__((may_alias)) u32a;
typedef uint64_t __attribute__((may_alias)) u64a;

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Switch once on the element size, then run BODY(U) with U the raw type. */
#define BY_ELSIZE(es, BODY)                                                 \
    do {                                                                    \
        switch (es) {                                                       \
        case 1: BODY(uint8_t); break;                                       \
        case 2: BODY(u16a); break;                                          \
        case 4: BODY(u32a); break;                                          \
        case 8: BODY(u64a); break;                                          \
        default: break;                                                     \
        }                                                                   \
    } while (0)

/* One (o, j) row of gather: out[i] = xs[ir[i] * inner + i]. */
static void gather_row(const void *xs, int64_t inner, const int64_t *ir, void *out, size_t es) {
#define GATHER_ROW(U)                                                       \
    for (int64_t i = 0; i < inner; i++) ((U *)out)[i] = ((const U *)xs)[ir[i] * inner + i]
    BY_ELSIZE(es, GATHER_ROW);
#undef GATHER_ROW
}

void k_gather(const void *x, int64_t outer, int64_t n, int64_t inner, const int64_t *idx,
              int64_t m, void *out, size_t elsize) {
    const int64_t es = (int64_t)elsize;
    KERNEL_FOR(t, outer * m, outer * m * inner, {
        const int64_t o = t / m;
        gather_row((const char *)x + o * n * inner * es, inner, idx + t * inner,
                   (char *)out + t * inner * es, elsize);
    });
}

/* inner == 1: out[j] = xs[idx[j]] for one o. */
static void select_elems(const void *xs, const int64_t *idx, int64_t m, void *out, size_t es) {
#define SELECT_ELEMS(U)                                                     \
    for (int64_t j = 0; j < m; j++) ((U *)out)[j] = ((const U *)xs)[idx[j]]
    BY_ELSIZE(es, SELECT_ELEMS);
#undef SELECT_ELEMS
}

void k_index_select(const void *x, int64_t outer, int64_t n, int64_t inner, const int64_t *idx,
                    int64_t m, void *out, size_t elsize) {
    const int64_t es = (int64_t)elsize, row = inner * es;
    if (inner == 1) {
        KERNEL_FOR(o, outer, outer * m,
                   select_elems((const char *)x + o * n * es, idx, m,
                                (char *)out + o * m * es, elsize));
        return;
    }
    KERNEL_FOR(t, outer * m, outer * m * inner, {
        const int64_t o = t / m, j = t % m;
        memcpy((char *)out + t * row, (const char *)x + (o * n + idx[j]) * row, (size_t)row);
    });
}

#define DEF_ADJOINTS(S, T)                                                  \
    /* task: columns [c0, c0 + w) of outer slice o */                       \
    static void scatter_add_task_##S(T *gx, int64_t n, int64_t inner,       \
                                     const int64_t *idx, int64_t m,         \
                                     const T *gout, int64_t o, int64_t c0,  \
                                     int64_t w) {                           \
        T *g = gx + o * n * inner + c0;                                     \
        for (int64_t j = 0; j < m; j++) {                                   \
            const int64_t q = (o * m + j) * inner + c0;                     \
            const int64_t *ir = idx + q;                                    \
            const T *src = gout + q;                                        \
            for (int64_t i = 0; i < w; i++) g[ir[i] * inner + i] += src[i]; \
        }                                                                   \
    }                                                                       \
    static void index_add_task_##S(T *gx, int64_t n, int64_t inner,         \
                                   const int64_t *idx, int64_t m,           \
                                   const T *gout, int64_t o, int64_t c0,    \
                                   int64_t w) {                             \
        for (int64_t j = 0; j < m; j++) {                                   \
            T *restrict g = gx + (o * n + idx[j]) * inner + c0;             \
            const T *restrict src = gout + (o * m + j) * inner + c0;        \
            for (int64_t i = 0; i < w; i++) g[i] += src[i];                 \
        }                                                                   \
    }                                                                       \
    /* run TASK over every (o, column block) */                             \
    static void adjoint_##S(int scatter, T *gx, int64_t outer, int64_t n,   \
                            int64_t inner, const int64_t *idx, int64_t m,   \
                            const T *gout) {                                \
        const int64_t nb = (inner + BLK - 1) / BLK;                         \
        KERNEL_FOR(t, outer * nb, outer * m * inner, {                      \
            const int64_t o = t / nb, c0 = (t % nb) * BLK;                  \
            const int64_t w = min64(BLK, inner - c0);                       \
            if (scatter) scatter_add_task_##S(gx, n, inner, idx, m, gout, o, c0, w); \
            else index_add_task_##S(gx, n, inner, idx, m, gout, o, c0, w);  \
        });                                                                 \
    }

DEF_ADJOINTS(f32, float)
DEF_ADJOINTS(f64, double)

static void adjoint(int scatter, DType dt, void *gx, int64_t outer, int64_t n, int64_t inner,
                    const int64_t *idx, int64_t m, const void *gout) {
    if (dt == DT_F32) adjoint_f32(scatter, gx, outer, n, inner, idx, m, gout);
    else if (dt == DT_F64) adjoint_f64(scatter, gx, outer, n, inner, idx, m, gout);
}

void k_scatter_add(DType dt, void *gx, int64_t outer, int64_t n, int64_t inner,
                   const int64_t *idx, int64_t m, const void *gout) {
    adjoint(1, dt, gx, outer, n, inner, idx, m, gout);
}

void k_index_add(DType dt, void *gx, int64_t outer, int64_t n, int64_t inner,
                 const int64_t *idx, int64_t m, const void *gout) {
    adjoint(0, dt, gx, outer, n, inner, idx, m, gout);
}
