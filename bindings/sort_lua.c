/* sort_lua.c: accel._C.argsort_last(t, descending): the int64 permutation
 * that sorts each row of t along its last dim. The tensor methods sort,
 * argsort and topk (accel.tensor_methods) move the dim to sort last, call
 * this, and gather the values with the indices (so values keep autograd).
 * Order as PyTorch's: NaN sorts above every number (last ascending, first
 * descending); equal keys keep their positions (a stable sort), which is
 * also what PyTorch's stable = true gives. Integers compare as int64, the
 * rest as doubles (every float dtype converts exactly). */
#include "lua_util.h"
#include "../kernels/dtype.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double f;   /* the key of a float dtype */
    int64_t i;  /* the key of an integer / bool dtype */
    int64_t at; /* the position in the row */
} SortKey;

/* -1 / 0 / 1 for a ascending before / equal to / after b, NaN the largest */
static int cmp_float(double a, double b) {
    bool na = isnan(a), nb = isnan(b);
    if (na || nb) return na - nb;
    return (a > b) - (a < b);
}

static int by_key(const SortKey *a, const SortKey *b, bool is_float, bool descending) {
    int c = is_float ? cmp_float(a->f, b->f) : (a->i > b->i) - (a->i < b->i);
    if (descending) c = -c;
    return c ? c : (a->at > b->at) - (a->at < b->at); /* ties: by position (stable) */
}

static int asc_float(const void *a, const void *b) { return by_key(a, b, true, false); }
static int desc_float(const void *a, const void *b) { return by_key(a, b, true, true); }
static int asc_int(const void *a, const void *b) { return by_key(a, b, false, false); }
static int desc_int(const void *a, const void *b) { return by_key(a, b, false, true); }

/* Sorts rows x n host values of dtype dt into out (int64 positions). */
static int argsort_rows(const char *host, DType dt, int64_t rows, int64_t n, bool descending, int64_t *out) {
    bool is_float = dtype_is_float(dt);
    int (*cmp)(const void *, const void *) = is_float ? (descending ? desc_float : asc_float)
                                                      : (descending ? desc_int : asc_int);
    SortKey *keys = malloc((size_t)(n > 0 ? n : 1) * sizeof *keys);
    if (!keys) return -1;
    size_t es = dtype_size(dt);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < n; j++) {
            const char *p = host + (size_t)(r * n + j) * es;
            keys[j].at = j;
            if (is_float) keys[j].f = dtype_load(p, dt);
            else keys[j].i = dtype_load_i64(p, dt);
        }
        qsort(keys, (size_t)n, sizeof *keys, cmp);
        for (int64_t j = 0; j < n; j++) out[r * n + j] = keys[j].at;
    }
    free(keys);
    return 0;
}

/* argsort_last(t, descending) -> int64 tensor of t's shape and device */
static int c_argsort_last(lua_State *L) {
    Tensor *t = lu_check_tensor(L, 1);
    bool descending = lua_toboolean(L, 2);
    int64_t n = t->ndim ? t->shape[t->ndim - 1] : 1;
    int64_t rows = n ? t->numel / n : 0;
    char *host = lua_newuserdatauv(L, (size_t)t->numel * dtype_size(t->dtype) + 1, 0);
    int64_t *pos = lua_newuserdatauv(L, (size_t)t->numel * sizeof(int64_t) + 1, 0);
    if (tensor_to_host(t, host) < 0) return lu_core_error(L);
    if (argsort_rows(host, t->dtype, rows, n, descending, pos) < 0)
        return lu_error(L, "argsort: out of memory sorting rows of %lld elements", (long long)n);
    Tensor *r = tensor_empty(t->shape, t->ndim, DT_I64, t->device);
    if (!r || tensor_from_host(r, pos) < 0) {
        tensor_release(r);
        return lu_core_error(L);
    }
    lu_push_tensor(L, r);
    return 1;
}

void lu_open_sort(lua_State *L, int m) {
    lu_register_c(L, m, (const luaL_Reg[]){{"argsort_last", c_argsort_last}, {NULL, NULL}});
}
