/* gemm.c: row-major GEMM, C (M,N) = alpha op(A) (M,K) @ op(B) (K,N) + beta C.
 *   f32:  oneDNN dnnl_sgemm; products under GEMM_SMALL_MAX_FLOP through
 *         OpenBLAS cblas_sgemm on the calling thread (see "Cold start")
 *   f64:  OpenBLAS cblas_dgemm
 *   bf16: (bf16 A, B -> f32 C) a oneDNN matmul primitive, cached per shape in
 *         a small LRU table; transposes are memory-descriptor strides, alpha a
 *         runtime output scale, beta a sum post-op (C pre-scaled when beta
 *         is not 0 or 1). Where this oneDNN build has no bf16 matmul for the
 *         CPU (2.6 needs AVX-512 for it) A and B are widened to f32, keeping
 *         their stored layout, and go through sgemm.
 * Transposes are never materialised: they become GEMM flags or strides.
 *
 * Threads: oneDNN spreads every sgemm over the whole OpenMP team, also one
 * of a few microseconds, where the fork / join costs more than it saves
 * (and on a loaded machine waking the second thread can take a scheduler
 * tick: milliseconds). Products under GEMM_PAR_MIN_FLOP run on the calling
 * thread alone.
 *
 * OpenBLAS (f64) never uses its own thread pool (set to one thread): its
 * products are cut into blocks of rows (or columns) of C, one
 * single-threaded OpenBLAS call per OpenMP thread, so one pool of threads
 * serves everything and never more threads than cores run. (OpenBLAS for
 * f32 products with A transposed, where oneDNN 2.6 is slowest here, was
 * tried: 30-60 % faster on those shapes alone with warm caches, no gain
 * inside a training step; so f32 above GEMM_SMALL_MAX_FLOP stays on oneDNN.)
 *
 * Cold start: oneDNN's sgemm generates its whole set of JIT kernels on the
 * first call of a process, whatever the shape (~25 ms of one core here,
 * about 700 warm steps of a small MLP), and the first step of every small
 * model paid it. OpenBLAS needs no JIT (its first call costs ~1 ms: buffer
 * set-up), and below about 1 MFLOP it is as fast as oneDNN warm: faster
 * when a side is tiny (N or K of a few: the logits layer), up to ~40 %
 * slower for A @ B^T of mid sizes; over a small MLP's step OpenBLAS comes
 * out slightly ahead (docs/bench-cold-start.md). So products under
 * GEMM_SMALL_MAX_FLOP never touch oneDNN, and a process whose products are
 * all small never pays its initialisation; the first large product does,
 * where ~25 ms is repaid. The route depends on the shape alone, so results
 * are the same from run to run and process to process. */
#include <dnnl.h>
#include <cblas.h>
#include <limits.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include "kernels.h"
#include "lru.h"

/* A stored matrix with a single row may carry any row stride (0 for a
 * broadcast); the libraries want ld >= cols, so give it the smallest legal
 * one. Returns -1 when a multi-row matrix has overlapping rows. */
static int64_t legal_ld(int64_t rows, int64_t cols, int64_t ld) {
    const int64_t min = cols > 1 ? cols : 1;
    if (rows <= 1) return ld >= min ? ld : min;
    return ld >= min ? ld : -1;
}

/* Fix the three leading dimensions in place; nonzero if one is unusable. */
static int legal_lds(int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t *lda,
                     int64_t *ldb, int64_t *ldc) {
    *lda = ta ? legal_ld(K, M, *lda) : legal_ld(M, K, *lda);
    *ldb = tb ? legal_ld(N, K, *ldb) : legal_ld(K, N, *ldb);
    *ldc = legal_ld(M, N, *ldc);
    return *lda < 0 || *ldb < 0 || *ldc < 0;
}

/* C = beta C over (M, N); beta == 0 writes zeros without reading C (BLAS). */
#define DEF_SCALE_C(S, T)                                                   \
    static void scale_c_##S(int64_t M, int64_t N, T beta, T *C, int64_t ldc) { \
        if (beta == 1) return;                                              \
        KERNEL_FOR(i, M, M * N, {                                           \
            T *row = C + i * ldc;                                           \
            if (beta == 0) for (int64_t j = 0; j < N; j++) row[j] = 0;      \
            else for (int64_t j = 0; j < N; j++) row[j] *= beta;            \
        });                                                                 \
    }
DEF_SCALE_C(f32, float)
DEF_SCALE_C(f64, double)

/* Degenerate shapes every path shares: 1 when the call is fully handled. */
#define TRIVIAL_GEMM(S)                                                     \
    do {                                                                    \
        if (M <= 0 || N <= 0) return 0;                                     \
        if (K <= 0) {                                                       \
            scale_c_##S(M, N, beta, C, ldc);                                \
            return 0;                                                       \
        }                                                                   \
    } while (0)

#define GEMM_PAR_MIN_FLOP (2.0 * 1024 * 1024)
#define GEMM_SMALL_MAX_FLOP (1.0 * 1024 * 1024)

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_one_thread(void) { openblas_set_num_threads(1); }

/* OpenBLAS's cblas takes int sizes. */
static int fits_int(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
    return M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX;
}

/* C through OpenBLAS, blocks of C's rows (or columns, when it has more of
 * those) spread over the OpenMP team, one single-threaded call each. */
#define DEF_BLAS_SPLIT(S, T, CBLAS)                                         \
    static void blas_split_##S(int ta, int tb, int64_t M, int64_t N, int64_t K, T alpha, \
                               const T *A, int64_t lda, const T *B, int64_t ldb, T beta, \
                               T *C, int64_t ldc) {                         \
        pthread_once(&blas_once, blas_one_thread);                          \
        const int by_rows = M >= N;                                         \
        const int64_t span = by_rows ? M : N;                               \
        int nt = omp_in_parallel() || 2.0 * M * N * K < GEMM_PAR_MIN_FLOP ? 1 : omp_get_max_threads(); \
        if (nt > span) nt = (int)span;                                      \
        _Pragma("omp parallel num_threads(nt) if (nt > 1)")                 \
        {                                                                   \
            const int t = omp_get_num_threads(), me = omp_get_thread_num(); \
            const int64_t lo = span * me / t, n = span * (me + 1) / t - lo; \
            const T *a = A, *b = B;                                         \
            T *c = C;                                                       \
            if (by_rows) a += ta ? lo : lo * lda, c += lo * ldc;            \
            else b += tb ? lo * ldb : lo, c += lo;                          \
            if (n > 0)                                                      \
                CBLAS(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, \
                      (int)(by_rows ? n : M), (int)(by_rows ? N : n), (int)K, alpha, a, (int)lda, b, \
                      (int)ldb, beta, c, (int)ldc);                         \
        }                                                                   \
    }
DEF_BLAS_SPLIT(f64, double, cblas_dgemm)

/* A small product on the calling thread through OpenBLAS (no JIT). */
static void gemm_small_f32(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                           const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                           float *C, int64_t ldc) {
    pthread_once(&blas_once, blas_one_thread);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

int k_gemm_f32(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
               int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    TRIVIAL_GEMM(f32);
    if (legal_lds(ta, tb, M, N, K, &lda, &ldb, &ldc)) return 1;
    if (2.0 * M * N * K < GEMM_SMALL_MAX_FLOP && fits_int(M, N, K, lda, ldb, ldc)) {
        gemm_small_f32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return 0;
    }
    const int team = omp_get_max_threads(), alone = team > 1 && 2.0 * M * N * K < GEMM_PAR_MIN_FLOP;
    if (alone) omp_set_num_threads(1);
    dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B,
                                  ldb, beta, C, ldc);
    if (alone) omp_set_num_threads(team);
    return st != dnnl_success;
}

int k_gemm_f64(int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const double *A,
               int64_t lda, const double *B, int64_t ldb, double beta, double *C, int64_t ldc) {
    TRIVIAL_GEMM(f64);
    if (legal_lds(ta, tb, M, N, K, &lda, &ldb, &ldc)) return 1;
    if (!fits_int(M, N, K, lda, ldb, ldc)) return 1;
    blas_split_f64(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return 0;
}

/* ---------------- bf16: cached oneDNN matmul primitives ---------------- */

#define MATMUL_SLOTS 16

typedef struct {
    int64_t M, N, K, lda, ldb, ldc;
    int ta, tb, acc;   /* key; acc: beta != 0 (sum post-op) */
    int used;
    uint64_t last;     /* LRU clock */
    dnnl_primitive_t prim;        /* NULL: no bf16 matmul, use the fallback */
    dnnl_memory_t a, b, c, scale; /* handles rebound on every call */
} MatmulSlot;

static MatmulSlot slots[MATMUL_SLOTS];
static uint64_t lru_clock;
static dnnl_engine_t engine;
static dnnl_stream_t stream;
static pthread_mutex_t matmul_lock = PTHREAD_MUTEX_INITIALIZER;

static int engine_ready(void) {
    if (!engine && dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
        engine = NULL;
        return 0;
    }
    if (!stream && dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
        stream = NULL;
        return 0;
    }
    return 1;
}

static void slot_release(MatmulSlot *s) {
    if (s->prim) dnnl_primitive_destroy(s->prim);
    if (s->a) dnnl_memory_destroy(s->a);
    if (s->b) dnnl_memory_destroy(s->b);
    if (s->c) dnnl_memory_destroy(s->c);
    if (s->scale) dnnl_memory_destroy(s->scale);
    *s = (MatmulSlot){0};
}

/* 2-D memory descriptor of a logical (rows, cols) matrix: stored as is with
 * row stride ld, or (trans) stored transposed, i.e. strides (1, ld). */
static void matrix_md(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, int64_t ld, int trans,
                      dnnl_data_type_t dt) {
    dnnl_dims_t dims = {rows, cols}, strides = {trans ? 1 : ld, trans ? ld : 1};
    dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

/* The primitive for s's key (s->prim stays NULL if oneDNN has none). */
static void slot_build(MatmulSlot *s) {
    dnnl_memory_desc_t ad, bd, cd, sd;
    matrix_md(&ad, s->M, s->K, s->lda, s->ta, dnnl_bf16);
    matrix_md(&bd, s->K, s->N, s->ldb, s->tb, dnnl_bf16);
    matrix_md(&cd, s->M, s->N, s->ldc, 0, dnnl_f32);
    dnnl_dims_t one = {1};
    dnnl_memory_desc_init_by_tag(&sd, 1, one, dnnl_f32, dnnl_a);

    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    const float runtime_scale = DNNL_RUNTIME_F32_VAL;
    int ok = dnnl_matmul_desc_init(&desc, &ad, &bd, NULL, &cd) == dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success &&
             dnnl_primitive_attr_set_output_scales(attr, 1, 0, &runtime_scale) == dnnl_success;
    if (ok && s->acc)
        ok = dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    ok = ok && dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL) == dnnl_success &&
         dnnl_primitive_create(&s->prim, pd) == dnnl_success &&
         dnnl_memory_create(&s->a, &ad, engine, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&s->b, &bd, engine, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&s->c, &cd, engine, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&s->scale, &sd, engine, DNNL_MEMORY_NONE) == dnnl_success;
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (!ok) { /* keep the key, drop the parts: the slot now means "fallback" */
        MatmulSlot key = *s;
        slot_release(s);
        key.prim = NULL, key.a = key.b = key.c = key.scale = NULL;
        *s = key;
    }
}

/* The slot for this key, built on a miss (evicting the least recently used). */
static MatmulSlot *slot_get(const MatmulSlot *key) {
    MatmulSlot *victim = &slots[0];
    for (int i = 0; i < MATMUL_SLOTS; i++) {
        MatmulSlot *s = &slots[i];
        if (s->used && s->M == key->M && s->N == key->N && s->K == key->K &&
            s->lda == key->lda && s->ldb == key->ldb && s->ldc == key->ldc &&
            s->ta == key->ta && s->tb == key->tb && s->acc == key->acc) {
            s->last = ++lru_clock;
            return s;
        }
        if (lru_better_victim(s->used, s->last, victim->used, victim->last)) victim = s;
    }
    slot_release(victim);
    *victim = *key;
    victim->used = 1;
    victim->last = ++lru_clock;
    slot_build(victim);
    return victim;
}

/* Run the cached primitive; C was pre-scaled so the sum post-op adds C. */
static int matmul_exec(MatmulSlot *s, float alpha, const uint16_t *A, const uint16_t *B, float *C) {
    int ok = dnnl_memory_set_data_handle(s->a, (void *)A) == dnnl_success &&
             dnnl_memory_set_data_handle(s->b, (void *)B) == dnnl_success &&
             dnnl_memory_set_data_handle(s->c, C) == dnnl_success &&
             dnnl_memory_set_data_handle(s->scale, &alpha) == dnnl_success;
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, s->a},
                               {DNNL_ARG_WEIGHTS, s->b},
                               {DNNL_ARG_DST, s->c},
                               {DNNL_ARG_ATTR_OUTPUT_SCALES, s->scale}};
    ok = ok && dnnl_primitive_execute(s->prim, stream, 4, args) == dnnl_success &&
         dnnl_stream_wait(stream) == dnnl_success;
    return !ok;
}

/* Widen a stored (rows, cols) bf16 matrix with row stride ld to compact f32. */
static void widen_bf16(const uint16_t *X, int64_t rows, int64_t cols, int64_t ld, float *out) {
    KERNEL_FOR(r, rows, rows * cols,
               k_cast(cols, X + r * ld, DT_BF16, 1, out + r * cols, DT_F32, 1));
}

/* bf16 through f32 sgemm, same transposes, compact copies of A and B. */
static int gemm_bf16_widened(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                             const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                             float beta, float *C, int64_t ldc) {
    const int64_t ra = ta ? K : M, ca = ta ? M : K, rb = tb ? N : K, cb = tb ? K : N;
    float *fa = malloc((size_t)(ra * ca + rb * cb) * sizeof(float));
    if (!fa) return 1;
    float *fb = fa + ra * ca;
    widen_bf16(A, ra, ca, lda, fa);
    widen_bf16(B, rb, cb, ldb, fb);
    int rc = k_gemm_f32(ta, tb, M, N, K, alpha, fa, ca, fb, cb, beta, C, ldc);
    free(fa);
    return rc;
}

int k_gemm_bf16(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
                int64_t lda, const uint16_t *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    TRIVIAL_GEMM(f32);
    if (legal_lds(ta, tb, M, N, K, &lda, &ldb, &ldc)) return 1;
    const MatmulSlot key = {.M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc,
                            .ta = !!ta, .tb = !!tb, .acc = beta != 0};
    pthread_mutex_lock(&matmul_lock);
    if (!engine_ready()) {
        pthread_mutex_unlock(&matmul_lock);
        return 1;
    }
    MatmulSlot *s = slot_get(&key);
    if (!s->prim) {
        pthread_mutex_unlock(&matmul_lock);
        return gemm_bf16_widened(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
    if (beta != 0) scale_c_f32(M, N, beta, C, ldc);
    int rc = matmul_exec(s, alpha, A, B, C);
    pthread_mutex_unlock(&matmul_lock);
    return rc;
}
