/* test_backend.c: backend conformance, in the way of ggml's
 * test-backend-ops: every entry of the Backend interface (core/backend/backend.h),
 * for every dtype it supports, on random inputs with odd sizes, strided and
 * broadcast operands, run on the backend under test (device memory, reached
 * only through from_host / to_host) and compared with a reference.
 *
 * References: naive loops written here (elementwise ops through contiguous
 * host gathers fed to the CPU kernels one run at a time, GEMM, reductions,
 * arg-reductions, softmax, gather / index_select, fill, copy/cast), so the
 * CPU backend's own n-d run splitting is checked too; outputs an entry
 * must overwrite start poisoned on the device (poisoned()), fp8 casts
 * and amax through kernels/dtype.h's codec); the fused families
 * (norms, cross-entropy, optimizers, conv / pool, attention, backward
 * kernels) are compared with the CPU backend; random fills with
 * kernels/philox.h's per-element draws (the stream computed element by
 * element, independent of the CPU's in-order reader) and, on every backend
 * but CUDA, with the CPU backend's bytes, which is what a device
 * backend must match (their CPU kernels have their own tests:
 * test_kernels, test_conv, test_optim).
 *
 *   build/test_backend [NAME...]    default: every backend of this build
 *   build/cuda/test_backend cuda    the CUDA backend (on a machine with a GPU)
 * Last line "N passed, N failed". */
#include "core/backend/backend.h"
#include "core/backend/attention_gemm.h"
#include "kernels/philox.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_pass, n_fail;
static const Backend *B;                  /* under test */
static const Backend *const R = &backend_cpu; /* reference: host memory */
static uint64_t seed = 0x9e3779b97f4a7c15ull;

static void result(int ok, const char *what, DType dt) {
    if (ok) {
        n_pass++;
        return;
    }
    n_fail++;
    printf("test_backend [%s] FAIL %s (%s)\n", B->name, what, dtype_name(dt));
}

static double urand(void) { /* xorshift64*, [0, 1) */
    seed ^= seed >> 12, seed ^= seed << 25, seed ^= seed >> 27;
    return (double)((seed * 2685821657736338717ull) >> 11) * 0x1p-53;
}

/* ---- buffers: h host staging, r the reference's copy, d the device's ---- */

typedef struct {
    DType dt;
    int64_t n;
    size_t nbytes;
    char *h, *r;
    void *d;
} Buf;

static Buf buf_new(DType dt, int64_t n) {
    Buf b = {.dt = dt, .n = n, .nbytes = (size_t)n * dtype_size(dt)};
    b.h = calloc(1, b.nbytes + 16);
    b.r = calloc(1, b.nbytes + 16);
    b.d = B->alloc(b.nbytes ? b.nbytes : 1);
    if (!b.h || !b.r || !b.d) {
        fprintf(stderr, "test_backend: out of memory\n");
        exit(1);
    }
    return b;
}

static void buf_upload(Buf *b) {
    memcpy(b->r, b->h, b->nbytes);
    if (B->from_host(b->d, b->h, b->nbytes) != 0) result(0, "from_host", b->dt);
}

/* Random values in [lo, hi) (integers for integer dtypes). */
static Buf in(DType dt, int64_t n, double lo, double hi) {
    Buf b = buf_new(dt, n);
    for (int64_t i = 0; i < n; i++) {
        double v = lo + (hi - lo) * urand();
        dtype_store(b.h + i * (int64_t)dtype_size(dt), dt, dtype_is_float(dt) ? v : floor(v));
    }
    buf_upload(&b);
    return b;
}

/* An output (or accumulator) starting at zero on both sides. */
static Buf out(DType dt, int64_t n) {
    Buf b = buf_new(dt, n);
    buf_upload(&b);
    return b;
}

/* An output the entry must overwrite: the device's copy starts as 0xA5
 * bytes (a NaN-free poison: an element the entry leaves unwritten cannot
 * match the reference); the reference computes every element itself. */
static Buf poisoned(DType dt, int64_t n) {
    Buf b = buf_new(dt, n);
    memset(b.h, 0xA5, b.nbytes);
    buf_upload(&b);
    return b;
}

static void buf_free(Buf *b) {
    free(b->h), free(b->r);
    B->free(b->d, b->nbytes ? b->nbytes : 1);
}

static double tol_of(DType dt) { return dt == DT_F64 ? 1e-11 : dt == DT_F32 ? 2e-5 : dt == DT_BF16 ? 1e-2 : 0; }

/* The device's values (fetched into h) against the reference's r. */
static void check_buf(Buf *b, double tol, const char *what) {
    if (B->to_host(b->h, b->d, b->nbytes) != 0) {
        result(0, "to_host", b->dt);
        return;
    }
    int ok = 1;
    for (int64_t i = 0; ok && i < b->n; i++) {
        double x = dtype_load(b->h + i * (int64_t)dtype_size(b->dt), b->dt);
        double y = dtype_load(b->r + i * (int64_t)dtype_size(b->dt), b->dt);
        ok = (isnan(x) && isnan(y)) || x == y || fabs(x - y) <= tol * (1 + fabs(y));
        if (!ok) printf("  %s[%lld]: got %.17g, want %.17g\n", what, (long long)i, x, y);
    }
    result(ok, what, b->dt);
}

static char *at(const Buf *b, int64_t i) { return b->r + i * (int64_t)dtype_size(b->dt); }

/* ---- n-d elementwise: logical shape (3, 5, 7), odd strides ---- */

enum { D0 = 3, D1 = 5, D2 = 7, NE = D0 * D1 * D2 };
static const int64_t shape3[3] = {D0, D1, D2};
static const int64_t st_out[3] = {D1 * D2, D2, 1};      /* contiguous */
static const int64_t st_perm[3] = {1, D0, D0 * D1};     /* stored transposed */
static const int64_t st_bcast[3] = {D2, 0, 1};          /* (3, 1, 7) broadcast along dim 1 */
static const int64_t st_row[3] = {0, 0, 1};             /* one row of 7 */


/* Logical element i's offset under strides st. */
static int64_t off_of(const int64_t *st, int64_t i) {
    return (i / (D1 * D2)) * st[0] + (i / D2 % D1) * st[1] + (i % D2) * st[2];
}

/* b's reference values gathered to logical order (a contiguous host copy). */
static char *gather(const Buf *b, const int64_t *st) {
    size_t es = dtype_size(b->dt);
    char *g = malloc(NE * es);
    for (int64_t i = 0; i < NE; i++) memcpy(g + i * (int64_t)es, b->r + off_of(st, i) * (int64_t)es, es);
    return g;
}

/* A device launch over the (3, 5, 7) shape. */
static void nd_begin(StridedIter *it) { iter_init(it, 3, shape3); }
static void nd_add(StridedIter *it, Buf *b, const int64_t *st) { iter_add(it, b->d, st, dtype_size(b->dt)); }

/* One contiguous run over host pointers, for the reference. */
static void run_begin(StridedIter *it) { iter_init_run(it, NE); }
static void run_add(StridedIter *it, void *p, DType dt) {
    iter_add(it, p, (const int64_t[1]){1}, dtype_size(dt));
}

static const char *const bin_names[KB_COUNT] = {"add", "sub", "mul", "div", "pow", "max", "min", "eq", "ne", "lt", "le",
                                                "gt", "ge", "and", "or", "xor", "floordiv", "remainder", "fmod", "atan2",
                                                "bitwise_and", "bitwise_or", "bitwise_xor", "shl", "shr"};

static void test_binary(DType cdt) {
    for (int op = 0; op < KB_COUNT; op++) {
        if (cdt == DT_I64 && (op == KB_DIV || op == KB_POW || op == KB_ATAN2)) continue; /* the core computes these in float */
        if (cdt != DT_I64 && kbin_is_bitwise((KBinOp)op)) continue; /* integers only */
        DType odt = kbin_is_compare((KBinOp)op) ? DT_BOOL : cdt;
        Buf a = in(cdt, NE, -4, 4), b = in(cdt, D0 * D2, 1, 5), o = poisoned(odt, NE);
        StridedIter it;
        nd_begin(&it), nd_add(&it, &o, st_out), nd_add(&it, &a, st_perm), nd_add(&it, &b, st_bcast);
        B->binary((KBinOp)op, cdt, &it);
        char *ga = gather(&a, st_perm), *gb = gather(&b, st_bcast);
        run_begin(&it), run_add(&it, o.r, odt), run_add(&it, ga, cdt), run_add(&it, gb, cdt);
        R->binary((KBinOp)op, cdt, &it);
        char what[64];
        snprintf(what, sizeof what, "binary %s", bin_names[op]);
        check_buf(&o, tol_of(cdt), what);
        free(ga), free(gb);
        buf_free(&a), buf_free(&b), buf_free(&o);
    }
}

static void test_unary(DType cdt) {
    for (int op = 0; op < KU_COUNT; op++) {
        bool int_ok = op == KU_NEG || op == KU_ABS || op == KU_SQUARE || op == KU_SIGN || op == KU_CLAMP ||
                      op == KU_RELU || op == KU_NOT || op == KU_BNOT;
        if (cdt == DT_I64 && !int_ok) continue;
        if (cdt != DT_I64 && op == KU_BNOT) continue; /* integers only */
        bool positive = op == KU_LOG || op == KU_SQRT || op == KU_RSQRT || op == KU_POW || op == KU_LOG1P ||
                        op == KU_LOG2 || op == KU_LOG10;
        bool unit = op == KU_ASIN || op == KU_ACOS || op == KU_ATANH; /* their domain (-1, 1) */
        double lo = positive ? 0.1 : unit ? -0.9 : op == KU_ACOSH ? 1.1 : -3, hi = unit ? 0.9 : 3;
        Buf a = in(cdt, NE, lo, hi), o = poisoned(cdt, NE);
        double p1 = op == KU_CLAMP ? -1 : op == KU_RPOW ? 1.7 : op == KU_POW ? 2.5 : 0.1, p2 = 1.5;
        StridedIter it;
        nd_begin(&it), nd_add(&it, &o, st_out), nd_add(&it, &a, st_perm);
        B->unary((KUnOp)op, cdt, &it, p1, p2);
        char *ga = gather(&a, st_perm);
        run_begin(&it), run_add(&it, o.r, cdt), run_add(&it, ga, cdt);
        R->unary((KUnOp)op, cdt, &it, p1, p2);
        char what[64];
        snprintf(what, sizeof what, "unary %d", op);
        check_buf(&o, tol_of(cdt), what);
        free(ga);
        buf_free(&a), buf_free(&o);
    }
}

static void test_unary_backward(DType cdt) {
    static const KUnOp ops[] = {KU_RELU, KU_GELU, KU_GELU_TANH, KU_SILU, KU_TANH, KU_SIGMOID, KU_EXP, KU_LOG,
                                KU_SQRT, KU_ABS, KU_CLAMP, KU_POW, KU_SQUARE, KU_SIN, KU_ERF, KU_NEG,
                                KU_TAN, KU_ATAN, KU_COSH, KU_ASINH, KU_LOG10, KU_ERFC, KU_LGAMMA, KU_DIGAMMA};
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        Buf x = in(cdt, NE, 0.1, 3), y = in(cdt, NE, 0.1, 3), g = in(cdt, NE, -1, 1), o = poisoned(cdt, NE);
        R->unary_backward(ops[k], cdt, NE, x.r, y.r, g.r, o.r, 0.5, 2);
        B->unary_backward(ops[k], cdt, NE, x.d, y.d, g.d, o.d, 0.5, 2);
        check_buf(&o, tol_of(cdt), "unary_backward");
        buf_free(&x), buf_free(&y), buf_free(&g), buf_free(&o);
    }
}

static void test_where(DType dt) {
    Buf c = in(DT_BOOL, NE, 0, 2), a = in(dt, NE, -5, 5), b = in(dt, D2, -5, 5), o = poisoned(dt, NE);
    StridedIter it;
    nd_begin(&it), nd_add(&it, &o, st_out), nd_add(&it, &c, st_perm), nd_add(&it, &a, st_out), nd_add(&it, &b, st_row);
    B->where(&it);
    for (int64_t i = 0; i < NE; i++) {
        const Buf *src = *at(&c, off_of(st_perm, i)) ? &a : &b;
        memcpy(at(&o, i), at(src, off_of(src == &a ? st_out : st_row, i)), dtype_size(dt));
    }
    check_buf(&o, 0, "where");
    buf_free(&c), buf_free(&a), buf_free(&b), buf_free(&o);
}

static void test_copy(DType odt, DType adt) {
    Buf a = in(adt, NE, -100, 100), o = poisoned(odt, NE);
    StridedIter it;
    nd_begin(&it), nd_add(&it, &o, st_out), nd_add(&it, &a, st_perm);
    B->copy(&it, odt, adt);
    char *ga = gather(&a, st_perm);
    run_begin(&it), run_add(&it, o.r, odt), run_add(&it, ga, adt);
    R->copy(&it, odt, adt);
    check_buf(&o, 0, "copy");
    free(ga);
    buf_free(&a), buf_free(&o);
}

static void test_fill(DType dt) {
    Buf o = in(dt, NE, 0, 3); /* fill through a strided view: every element written once */
    StridedIter it;
    nd_begin(&it), nd_add(&it, &o, st_perm);
    B->fill(&it, dt, 2.5);
    for (int64_t i = 0; i < NE; i++) dtype_store(at(&o, i), dt, 2.5);
    check_buf(&o, 0, "fill");
    B->zero(o.d, o.nbytes);
    memset(o.r, 0, o.nbytes);
    check_buf(&o, 0, "zero");
    buf_free(&o);
}

/* ---- GEMM against a naive double loop ---- */

/* c_i = 0.5 op(a_i) op(b_i) + 2 c_i on the reference copies, product i at
 * element offsets i sa, i sb, i sc. */
static void gemm_ref(DType dt, int ta, int tb, int64_t M, int64_t N, int64_t K, Buf *a, int64_t lda, int64_t sa, Buf *b,
                     int64_t ldb, int64_t sb, Buf *c, int64_t ldc, int64_t sc, int64_t batch) {
    DType odt = c->dt;
    for (int64_t p = 0; p < batch; p++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += dtype_load(at(a, p * sa + (ta ? k * lda + i : i * lda + k)), dt) *
                         dtype_load(at(b, p * sb + (tb ? j * ldb + k : k * ldb + j)), dt);
                char *cij = at(c, p * sc + i * ldc + j);
                dtype_store(cij, odt, 0.5 * s + 2.0 * dtype_load(cij, odt));
            }
}

/* gemm on padded rows; gemm_batched (where the backend has it) on three
 * products whose operands interleave, as the heads of a (B, L, H, D) tensor. */
static void test_gemm(DType dt) {
    const int64_t M = 5, N = 7, K = 3, pad = 2, nb = 3;
    DType odt = dt == DT_BF16 ? DT_F32 : dt;
    for (int batched = 0; batched < 2; batched++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                if (batched && (!B->gemm_batched || dt == DT_F64)) continue;
                const int64_t acols = ta ? M : K, bcols = tb ? K : N, n = batched ? nb : 1;
                const int64_t lda = batched ? nb * acols : acols + pad, ldb = batched ? nb * bcols : bcols + pad;
                const int64_t ldc = batched ? nb * N : N + pad;
                Buf a = in(dt, (ta ? K : M) * lda, -1, 1), b = in(dt, (tb ? N : K) * ldb, -1, 1);
                Buf c = in(odt, M * ldc, -1, 1);
                int rc = batched ? B->gemm_batched(dt, ta, tb, M, N, K, 0.5, a.d, lda, acols, b.d, ldb, bcols, 2.0,
                                                   c.d, ldc, N, nb)
                                 : B->gemm(dt, ta, tb, M, N, K, 0.5, a.d, lda, b.d, ldb, 2.0, c.d, ldc);
                gemm_ref(dt, ta, tb, M, N, K, &a, lda, acols, &b, ldb, bcols, &c, ldc, N, n);
                result(rc == 0, batched ? "gemm_batched returns 0" : "gemm returns 0", dt);
                check_buf(&c, dt == DT_F64 ? 1e-12 : 1e-5, batched ? "gemm_batched" : "gemm");
                buf_free(&a), buf_free(&b), buf_free(&c);
            }
}

/* ---- row-wise families over (outer, n, inner) = (3, 5, 7) ---- */

/* reduce op over (outer, n, inner) on the backend against a loop here. */
static void check_reduce(KRedOp op, DType cdt, int64_t outer, int64_t n, int64_t inner, const char *what) {
    Buf x = in(cdt, outer * n * inner, -2, 2), o = poisoned(cdt, outer * inner);
    B->reduce(op, cdt, x.d, outer, n, inner, o.d);
    for (int64_t a = 0; a < outer; a++)
        for (int64_t c = 0; c < inner; c++) {
            double s = op == KR_PROD ? 1 : op == KR_MAX ? -INFINITY : op == KR_MIN ? INFINITY : 0;
            for (int64_t j = 0; j < n; j++) {
                double v = dtype_load(at(&x, (a * n + j) * inner + c), cdt);
                s = op == KR_PROD ? s * v : op == KR_MAX ? fmax(s, v) : op == KR_MIN ? fmin(s, v) : s + v;
            }
            dtype_store(at(&o, a * inner + c), cdt, op == KR_MEAN ? s / n : s);
        }
    check_buf(&o, tol_of(cdt), what);
    buf_free(&x), buf_free(&o);
}

static void test_reduce(DType cdt) {
    for (int op = 0; op < KR_COUNT; op++) {
        if (cdt == DT_I64 && op == KR_MEAN) continue;
        check_reduce((KRedOp)op, cdt, D0, D1, D2, "reduce");
        if (op != KR_PROD) /* few outputs over long columns, as a bias gradient */
            check_reduce((KRedOp)op, cdt, 2, 300, 40, "reduce (2, 300, 40)");
        Buf x = in(cdt, NE, -2, 2);
        Buf v = poisoned(cdt, D0 * D2), ix = poisoned(DT_I64, D0 * D2);
        int want_max = op & 1;
        B->argreduce(want_max, cdt, x.d, D0, D1, D2, v.d, ix.d);
        for (int64_t a = 0; a < D0; a++)
            for (int64_t c = 0; c < D2; c++) {
                int64_t best = 0;
                for (int64_t j = 1; j < D1; j++) {
                    double vj = dtype_load(at(&x, (a * D1 + j) * D2 + c), cdt), vb = dtype_load(at(&x, (a * D1 + best) * D2 + c), cdt);
                    if (want_max ? vj > vb : vj < vb) best = j;
                }
                memcpy(at(&v, a * D2 + c), at(&x, (a * D1 + best) * D2 + c), dtype_size(cdt));
                ((int64_t *)ix.r)[a * D2 + c] = best;
            }
        check_buf(&v, 0, "argreduce values");
        check_buf(&ix, 0, "argreduce indices");
        buf_free(&x), buf_free(&v), buf_free(&ix);
    }
}

static void test_softmax(DType cdt) {
    for (int log_ = 0; log_ < 2; log_++) {
        Buf x = in(cdt, NE, -3, 3), y = poisoned(cdt, NE);
        B->softmax(log_, cdt, x.d, D0, D1, D2, y.d);
        for (int64_t a = 0; a < D0; a++)
            for (int64_t c = 0; c < D2; c++) {
                double m = -INFINITY, s = 0;
                for (int64_t j = 0; j < D1; j++) m = fmax(m, dtype_load(at(&x, (a * D1 + j) * D2 + c), cdt));
                for (int64_t j = 0; j < D1; j++) s += exp(dtype_load(at(&x, (a * D1 + j) * D2 + c), cdt) - m);
                for (int64_t j = 0; j < D1; j++) {
                    double e = dtype_load(at(&x, (a * D1 + j) * D2 + c), cdt) - m;
                    dtype_store(at(&y, (a * D1 + j) * D2 + c), cdt, log_ ? e - log(s) : exp(e) / s);
                }
            }
        check_buf(&y, tol_of(cdt), log_ ? "log_softmax" : "softmax");
        Buf g = in(cdt, NE, -1, 1), gx = poisoned(cdt, NE);
        R->softmax_backward(log_, cdt, y.r, g.r, D0, D1, D2, gx.r);
        B->softmax_backward(log_, cdt, y.d, g.d, D0, D1, D2, gx.d);
        check_buf(&gx, tol_of(cdt), "softmax_backward");
        buf_free(&x), buf_free(&y), buf_free(&g), buf_free(&gx);
    }
}

static void test_cross_entropy(DType cdt) {
    const int64_t N = 9, C = 13, ignore = -100;
    Buf x = in(cdt, N * C, -3, 3), t = in(DT_I64, N, 0, C), loss = poisoned(cdt, N), lse = poisoned(cdt, N);
    ((int64_t *)t.h)[4] = ignore;
    buf_upload(&t);
    int64_t r1 = R->cross_entropy_fwd(cdt, x.r, N, C, (int64_t *)t.r, ignore, 0.1, loss.r, lse.r);
    int64_t r2 = B->cross_entropy_fwd(cdt, x.d, N, C, t.d, ignore, 0.1, loss.d, lse.d);
    result(r1 == -1 && r2 == -1, "cross_entropy_fwd status", cdt);
    check_buf(&loss, tol_of(cdt), "cross_entropy loss");
    check_buf(&lse, tol_of(cdt), "cross_entropy lse");
    Buf g = in(cdt, N, 0, 1), gx = poisoned(cdt, N * C);
    R->cross_entropy_bwd(cdt, x.r, lse.r, N, C, (int64_t *)t.r, ignore, 0.1, g.r, gx.r);
    B->cross_entropy_bwd(cdt, x.d, lse.d, N, C, t.d, ignore, 0.1, g.d, gx.d);
    check_buf(&gx, tol_of(cdt), "cross_entropy_bwd");
    ((int64_t *)t.h)[2] = C + 3; /* an invalid target is reported, not read */
    buf_upload(&t);
    r2 = B->cross_entropy_fwd(cdt, x.d, N, C, t.d, ignore, 0.1, loss.d, lse.d);
    result(r2 == 2, "cross_entropy_fwd reports the bad row", cdt);
    buf_free(&x), buf_free(&t), buf_free(&loss), buf_free(&lse), buf_free(&g), buf_free(&gx);
}

static void test_layernorm(DType cdt) {
    const int64_t rows = 11, C = 9;
    for (int affine = 0; affine < 2; affine++) {
        Buf x = in(cdt, rows * C, -2, 2), w = in(cdt, C, 0.5, 1.5), b = in(cdt, C, -1, 1);
        Buf y = poisoned(cdt, rows * C), mean = poisoned(cdt, rows), rstd = poisoned(cdt, rows);
        R->layernorm_fwd(cdt, x.r, affine ? w.r : NULL, affine ? b.r : NULL, rows, C, 1e-5, y.r, mean.r, rstd.r);
        B->layernorm_fwd(cdt, x.d, affine ? w.d : NULL, affine ? b.d : NULL, rows, C, 1e-5, y.d, mean.d, rstd.d);
        check_buf(&y, tol_of(cdt), "layernorm_fwd y");
        check_buf(&rstd, tol_of(cdt), "layernorm_fwd rstd");
        Buf gy = in(cdt, rows * C, -1, 1), gx = poisoned(cdt, rows * C), gw = out(cdt, C), gb = out(cdt, C);
        R->layernorm_bwd(cdt, x.r, affine ? w.r : NULL, mean.r, rstd.r, gy.r, rows, C, gx.r, gw.r, gb.r);
        B->layernorm_bwd(cdt, x.d, affine ? w.d : NULL, mean.d, rstd.d, gy.d, rows, C, gx.d, gw.d, gb.d);
        check_buf(&gx, tol_of(cdt), "layernorm_bwd gx");
        check_buf(&gw, tol_of(cdt), "layernorm_bwd gw");
        check_buf(&gb, tol_of(cdt), "layernorm_bwd gb");
        buf_free(&x), buf_free(&w), buf_free(&b), buf_free(&y), buf_free(&mean), buf_free(&rstd);
        buf_free(&gy), buf_free(&gx), buf_free(&gw), buf_free(&gb);
    }
}

/* ---- indexing ---- */

static void test_index(DType dt) {
    const int64_t m = 4;
    size_t es = dtype_size(dt);
    Buf x = in(dt, NE, -9, 9), ig = in(DT_I64, D0 * m * D2, 0, D1), is = in(DT_I64, m, 0, D1);
    Buf og = poisoned(dt, D0 * m * D2), os = poisoned(dt, D0 * m * D2);
    B->gather(x.d, D0, D1, D2, ig.d, m, og.d, es);
    B->index_select(x.d, D0, D1, D2, is.d, m, os.d, es);
    for (int64_t a = 0; a < D0; a++)
        for (int64_t j = 0; j < m; j++)
            for (int64_t c = 0; c < D2; c++) {
                int64_t o = (a * m + j) * D2 + c;
                memcpy(at(&og, o), at(&x, (a * D1 + ((int64_t *)ig.r)[o]) * D2 + c), es);
                memcpy(at(&os, o), at(&x, (a * D1 + ((int64_t *)is.r)[j]) * D2 + c), es);
            }
    check_buf(&og, 0, "gather");
    check_buf(&os, 0, "index_select");
    if (dt == DT_F32 || dt == DT_F64) {
        Buf g1 = out(dt, NE), g2 = out(dt, NE), gout = in(dt, D0 * m * D2, -1, 1);
        R->scatter_add(dt, g1.r, D0, D1, D2, (int64_t *)ig.r, m, gout.r);
        B->scatter_add(dt, g1.d, D0, D1, D2, ig.d, m, gout.d);
        R->index_add(dt, g2.r, D0, D1, D2, (int64_t *)is.r, m, gout.r);
        B->index_add(dt, g2.d, D0, D1, D2, is.d, m, gout.d);
        check_buf(&g1, tol_of(dt), "scatter_add");
        check_buf(&g2, tol_of(dt), "index_add");
        buf_free(&g1), buf_free(&g2), buf_free(&gout);
    }
    buf_free(&x), buf_free(&ig), buf_free(&is), buf_free(&og), buf_free(&os);
}

/* ---- optimizers ---- */

static void test_optim(DType cdt) {
    const int64_t n = 37;
    KSgdArgs sa = {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01, .nesterov = 1};
    KAdamArgs aa = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1, .decoupled = 1, .step = 3};
    Buf p = in(cdt, n, -1, 1), g = in(cdt, n, -1, 1), buf = out(cdt, n);
    R->sgd(cdt, n, p.r, g.r, buf.r, 1, &sa);
    B->sgd(cdt, n, p.d, g.d, buf.d, 1, &sa);
    check_buf(&p, tol_of(cdt), "sgd p");
    check_buf(&buf, tol_of(cdt), "sgd momentum");
    Buf m = in(cdt, n, -1, 1), v = in(cdt, n, 0, 1), vmax = in(cdt, n, 0, 1);
    R->adam(cdt, n, p.r, g.r, m.r, v.r, vmax.r, &aa);
    B->adam(cdt, n, p.d, g.d, m.d, v.d, vmax.d, &aa);
    check_buf(&p, tol_of(cdt), "adam p");
    check_buf(&v, tol_of(cdt), "adam v");
    double np = B->norm_pow(cdt, n, g.d, 2.0), nr = R->norm_pow(cdt, n, g.r, 2.0);
    result(fabs(np - nr) <= 1e-9 * nr, "norm_pow", cdt);
    buf_free(&p), buf_free(&g), buf_free(&buf), buf_free(&m), buf_free(&v), buf_free(&vmax);
}

/* ---- fp8 casts (references: dtype.h's codec and max |x|, naive loops) ---- */

static const float fp8_specials[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 448.0f, -464.0f, 480.0f, 57344.0f,
                                     -61440.0f, 1e30f, 0x1p-9f, 0x1p-10f, 0x1.8p-10f, 0x1p-16f, 0x1.8p-17f, 1e-30f};
#define N_FP8_SPECIALS (int64_t)(sizeof fp8_specials / sizeof *fp8_specials)

/* n float32 values: the specials first (when nan_ok; else none), then
 * random signs and magnitudes 2^-20 .. 2^20 (saturating for either format). */
static Buf fp8_input(int64_t n, int nan_ok) {
    Buf b = buf_new(DT_F32, n);
    float *h = (float *)b.h;
    for (int64_t i = 0; i < n; i++)
        h[i] = nan_ok && i < N_FP8_SPECIALS ? fp8_specials[i]
                                            : (urand() < 0.5 ? -1.0f : 1.0f) * ldexpf((float)(1 + urand()), (int)(urand() * 41) - 20);
    buf_upload(&b);
    return b;
}

/* The value of code c in fmt (exact: every fp8 value is a float32). */
static double fp8_value(KFp8Fmt fmt, uint8_t c) { return fmt == KF8_E4M3FN ? f8e4m3_to_f32(c) : f8e5m2_to_f32(c); }

static uint8_t fp8_ref_code(KFp8Fmt fmt, float f) { return fmt == KF8_E4M3FN ? f32_to_f8e4m3_sat(f) : f32_to_f8e5m2_sat(f); }

static float fp8_ref_amax(const float *x, int64_t n) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(x[i])) return NAN;
        m = fmaxf(m, fabsf(x[i]));
    }
    return m;
}

/* The device's one amax float against want (NaN matches NaN). */
static void check_amax(const Buf *a, float want, const char *what) {
    float got = -1.0f;
    int ok = B->to_host(&got, a->d, sizeof got) == 0;
    result(ok && ((isnan(got) && isnan(want)) || got == want), what, DT_F32);
}

static void test_fp8_quantize(KFp8Fmt fmt, int64_t n, int nan_ok, float scale) {
    Buf x = fp8_input(n, nan_ok), q = poisoned(DT_U8, n), a = poisoned(DT_F32, 1), a2 = poisoned(DT_F32, 1);
    for (int64_t i = 0; i < n; i++) q.r[i] = (char)fp8_ref_code(fmt, ((float *)x.r)[i] * scale);
    B->fp8_quantize(fmt, n, x.d, scale, q.d, a.d);
    B->fp8_quantize(fmt, n, x.d, scale, NULL, a2.d); /* amax alone */
    const char *name = fmt == KF8_E4M3FN ? "fp8_quantize e4m3fn" : "fp8_quantize e5m2";
    check_buf(&q, 0, name);
    check_amax(&a, fp8_ref_amax((float *)x.r, n), "fp8_quantize amax");
    check_amax(&a2, fp8_ref_amax((float *)x.r, n), "fp8_quantize amax alone (q NULL)");
    buf_free(&x), buf_free(&q), buf_free(&a), buf_free(&a2);
}

/* Every code (n >= 256: codes i % 256, then random codes) decoded and scaled. */
static void test_fp8_dequantize(KFp8Fmt fmt, int64_t n, float scale_inv) {
    Buf q = buf_new(DT_U8, n), o = poisoned(DT_F32, n);
    for (int64_t i = 0; i < n; i++) q.h[i] = (char)(i < 256 ? i : (int64_t)(urand() * 256));
    buf_upload(&q);
    for (int64_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)q.r[i];
        ((float *)o.r)[i] = (float)fp8_value(fmt, c) * scale_inv;
    }
    B->fp8_dequantize(fmt, n, (uint8_t *)q.d, scale_inv, o.d);
    check_buf(&o, 0, fmt == KF8_E4M3FN ? "fp8_dequantize e4m3fn" : "fp8_dequantize e5m2");
    buf_free(&q), buf_free(&o);
}

/* The optional native fp8 GEMM: random non-NaN codes of every magnitude,
 * C against the float64 product of the decoded codes times the scale,
 * within float32 accumulation ((K + 1) 2^-24 sum |a||b| |scale| + 2^-23
 * |ref|); shapes it must decline come back 1. */
static Buf fp8_codes(KFp8Fmt fmt, int64_t n) {
    Buf b = buf_new(DT_U8, n);
    for (int64_t i = 0; i < n; i++) {
        uint8_t c;
        do c = (uint8_t)(urand() * 256); while (isnan(fp8_value(fmt, c)) || isinf(fp8_value(fmt, c)));
        b.h[i] = (char)c;
    }
    buf_upload(&b);
    return b;
}

static void test_fp8_gemm_case(KFp8Fmt fa, KFp8Fmt fb, int64_t M, int64_t N, int64_t K, int want_rc) {
    Buf a = fp8_codes(fa, M * K), b = fp8_codes(fb, N * K), c = poisoned(DT_F32, M * N);
    const float scale = 0x1.3p-9f;
    int rc = B->fp8_gemm(fa, fb, M, N, K, (uint8_t *)a.d, (uint8_t *)b.d, scale, c.d);
    result(rc == want_rc, want_rc ? "fp8_gemm declines what it cannot take" : "fp8_gemm takes K % 16 == 0, N % 4 == 0",
           DT_F32);
    if (rc == 0 && B->to_host(c.h, c.d, c.nbytes) == 0) {
        /* float32 accumulation: (K + 1) ulps of the sum of |terms|; Hopper's
         * fp8 tensor cores keep about 14 bits of the running sum (measured by
         * DeepSeek-V3's report, section 3.3.2), so on cuda 2^-13 of it */
        const double acc_tol = strcmp(B->name, "cuda") == 0 ? 0x1p-13 : (double)(K + 1) * 0x1p-24;
        int ok = 1;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double ref = 0, mag = 0;
                for (int64_t k = 0; k < K; k++) {
                    double p = fp8_value(fa, (uint8_t)a.r[i * K + k]) * fp8_value(fb, (uint8_t)b.r[j * K + k]);
                    ref += p, mag += fabs(p);
                }
                ref *= scale, mag *= scale;
                double got = ((float *)c.h)[i * N + j];
                ok = ok && fabs(got - ref) <= acc_tol * mag + 0x1p-23 * fabs(ref);
            }
        result(ok, fa == fb ? "fp8_gemm e4m3 x e4m3 against float64" : "fp8_gemm mixed formats against float64", DT_F32);
    }
    buf_free(&a), buf_free(&b), buf_free(&c);
}

static void test_fp8_gemm(void) {
    if (!B->fp8_gemm) return; /* optional: the core emulates every product */
    test_fp8_gemm_case(KF8_E4M3FN, KF8_E4M3FN, 7, 12, 48, 0);
    test_fp8_gemm_case(KF8_E5M2, KF8_E4M3FN, 33, 20, 64, 0);
    test_fp8_gemm_case(KF8_E4M3FN, KF8_E5M2, 1, 4, 16, 0);
    test_fp8_gemm_case(KF8_E4M3FN, KF8_E4M3FN, 5, 8, 53, 1);  /* K not a multiple of 16 */
    test_fp8_gemm_case(KF8_E4M3FN, KF8_E4M3FN, 5, 6, 32, 1);  /* N not a multiple of 4 */
    test_fp8_gemm_case(KF8_E5M2, KF8_E5M2, 5, 8, 32, 1);      /* both e5m2 */
}

static void test_fp8(void) {
    static const int64_t sizes[] = {0, 1, 17, 1001, 70001}; /* 70001: past the CPU's parallel threshold */
    static const float scales[] = {1.0f, 0.37f, 0x1p10f};
    for (int f = 0; f < 2; f++) {
        KFp8Fmt fmt = f ? KF8_E5M2 : KF8_E4M3FN;
        for (int i = 0; i < 5; i++)
            for (int k = 0; k < 3; k++) test_fp8_quantize(fmt, sizes[i], (i + k) % 2, scales[k]);
        test_fp8_dequantize(fmt, 256, 1.0f);
        test_fp8_dequantize(fmt, 1001, 0.37f);
        test_fp8_dequantize(fmt, 70001, 0x1p-7f);
    }
}

/* ---- random fills: element i from kernels/philox.h ---- */

static double rng_ref(const KRngFill *r, DType dt, int64_t i) {
    double z[2];
    switch (r->dist) {
    case KRNG_UNIFORM: return r->a + rng_uniform_at(r->seed, r->offset, (uint64_t)i, rng_uniform_bits(dt)) * (r->b - r->a);
    case KRNG_NORMAL: rng_normal_pair_at(r->seed, r->offset, (uint64_t)i / 2, z); return r->a + r->b * z[i % 2];
    case KRNG_BERNOULLI:
        return rng_uniform_at(r->seed, r->offset, (uint64_t)i, rng_bernoulli_bits(dt)) >= r->a ? 1.0 / (1.0 - r->a) : 0.0;
    default: return (double)rng_randint_at(r->seed, r->offset, (uint64_t)i, r->lo, r->range);
    }
}

/* n elements of dt: the per-element reference (exact but for normal draws
 * with a mean / std, whose rounding order differs, and CUDA's libm), and the
 * CPU backend's bytes (every backend but CUDA: bit for bit). */
static void check_rng(KRngFill r, DType dt, int64_t n, const char *what) {
    const int cuda = strcmp(B->name, "cuda") == 0, normal = r.dist == KRNG_NORMAL;
    Buf o = poisoned(dt, n);
    for (int64_t i = 0; i < n; i++) {
        if (r.dist == KRNG_RANDINT) dtype_store_i64(at(&o, i), dt, (int64_t)rng_ref(&r, dt, i));
        else dtype_store(at(&o, i), dt, rng_ref(&r, dt, i));
    }
    result(B->rng_fill(&r, dt, n, o.d) == 0, what, dt);
    check_buf(&o, normal && (cuda || r.a != 0 || r.b != 1) ? tol_of(dt) : 0, what);
    if (!cuda || !normal) {
        char *cpu = calloc(1, o.nbytes + 1);
        result(cpu && R->rng_fill(&r, dt, n, cpu) == 0 && memcmp(cpu, o.h, o.nbytes) == 0, what, dt);
        free(cpu);
    }
    buf_free(&o);
}

static void test_rng(DType dt) {
    static const int64_t sizes[] = {1, 2, 37, 1001};
    const uint64_t seed = 0x123456789abcdefull, offset = 12345;
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        int64_t n = sizes[k];
        check_rng((KRngFill){.dist = KRNG_UNIFORM, .seed = seed, .offset = offset, .a = 0, .b = 1}, dt, n, "rng uniform");
        check_rng((KRngFill){.dist = KRNG_UNIFORM, .seed = 7, .a = -2, .b = 3}, dt, n, "rng uniform(-2, 3)");
        check_rng((KRngFill){.dist = KRNG_NORMAL, .seed = seed, .offset = offset, .a = 0, .b = 1}, dt, n, "rng normal");
        check_rng((KRngFill){.dist = KRNG_NORMAL, .seed = 7, .offset = 1, .a = 0.5, .b = 2}, dt, n, "rng normal(0.5, 2)");
        check_rng((KRngFill){.dist = KRNG_BERNOULLI, .seed = seed, .offset = offset, .a = 0.3}, dt, n, "rng bernoulli");
        check_rng((KRngFill){.dist = KRNG_RANDINT, .seed = seed, .offset = offset, .lo = -5, .range = 105}, dt, n,
                  "rng randint");
    }
}

/* ---- conv, pool, attention ---- */

static void test_conv(DType dt) {
    KConv2d c = {.N = 2, .C = 4, .H = 7, .W = 5, .O = 6, .KH = 3, .KW = 2, .sh = 2, .sw = 1, .ph = 1, .pw = 0,
                 .dh = 1, .dw = 2, .groups = 2};
    c.OH = (c.H + 2 * c.ph - c.dh * (c.KH - 1) - 1) / c.sh + 1;
    c.OW = (c.W + 2 * c.pw - c.dw * (c.KW - 1) - 1) / c.sw + 1;
    DType adt = dt == DT_BF16 ? DT_F32 : dt;
    Buf x = in(dt, c.N * c.C * c.H * c.W, -1, 1), w = in(dt, c.O * (c.C / c.groups) * c.KH * c.KW, -1, 1);
    Buf b = in(adt, c.O, -1, 1), y = poisoned(adt, c.N * c.O * c.OH * c.OW);
    int r1 = R->conv2d_fwd(dt, &c, x.r, w.r, b.r, y.r), r2 = B->conv2d_fwd(dt, &c, x.d, w.d, b.d, y.d);
    result(r1 == 0 && r2 == 0, "conv2d_fwd returns 0", dt);
    check_buf(&y, tol_of(dt), "conv2d_fwd");
    Buf gy = in(dt, y.n, -1, 1), gx = out(adt, x.n), gw = out(adt, w.n), gb = out(adt, b.n);
    r1 = R->conv2d_bwd(dt, &c, x.r, w.r, gy.r, gx.r, gw.r, gb.r);
    r2 = B->conv2d_bwd(dt, &c, x.d, w.d, gy.d, gx.d, gw.d, gb.d);
    result(r1 == 0 && r2 == 0, "conv2d_bwd returns 0", dt);
    check_buf(&gx, tol_of(dt), "conv2d_bwd gx");
    check_buf(&gw, tol_of(dt), "conv2d_bwd gw");
    check_buf(&gb, tol_of(dt), "conv2d_bwd gb");
    buf_free(&x), buf_free(&w), buf_free(&b), buf_free(&y), buf_free(&gy), buf_free(&gx), buf_free(&gw), buf_free(&gb);
}

static void test_pool(DType cdt) {
    KPool2d g = {.NC = 3, .H = 9, .W = 7, .KH = 3, .KW = 2, .sh = 2, .sw = 2, .ph = 1, .pw = 1, .dh = 1, .dw = 1};
    g.OH = (g.H + 2 * g.ph - g.dh * (g.KH - 1) - 1) / g.sh + 1;
    g.OW = (g.W + 2 * g.pw - g.dw * (g.KW - 1) - 1) / g.sw + 1;
    int64_t no = g.NC * g.OH * g.OW;
    Buf x = in(cdt, g.NC * g.H * g.W, -1, 1), y = poisoned(cdt, no), idx = poisoned(DT_I64, no), code = poisoned(DT_U8, no);
    R->max_pool2d_fwd(cdt, &g, x.r, y.r, (int64_t *)idx.r, (uint8_t *)code.r);
    B->max_pool2d_fwd(cdt, &g, x.d, y.d, idx.d, code.d);
    check_buf(&y, 0, "max_pool2d_fwd");
    check_buf(&idx, 0, "max_pool2d_fwd idx");
    check_buf(&code, 0, "max_pool2d_fwd code");
    Buf gy = in(cdt, no, -1, 1), gx = poisoned(cdt, x.n);
    R->max_pool2d_bwd(cdt, &g, gy.r, NULL, (uint8_t *)code.r, gx.r);
    B->max_pool2d_bwd(cdt, &g, gy.d, NULL, code.d, gx.d);
    check_buf(&gx, tol_of(cdt), "max_pool2d_bwd");
    buf_free(&x), buf_free(&y), buf_free(&idx), buf_free(&code), buf_free(&gy), buf_free(&gx);
}

/* Batch / head / row strides of a (B, H, rows, d) operand stored as
 * (B, H, rows, d), or heads-last as (B, rows, H, d) (one qkv projection's
 * views, the core's output layout); H == 0: a 3-D (B, rows, d) one. */
static void bhr(int64_t st[3], int64_t H, int64_t rows, int64_t d, int heads_last) {
    if (H == 0) st[0] = rows * d, st[1] = 0, st[2] = d;
    else if (heads_last) st[0] = rows * H * d, st[1] = d, st[2] = H * d;
    else st[0] = H * rows * d, st[1] = rows * d, st[2] = d;
}

static KAttn attn_case(int64_t Bn, int64_t H, int64_t L, int64_t S, int64_t D, int64_t Dv, int causal, int heads_last) {
    KAttn a = {.B = Bn, .H = H ? H : 1, .L = L, .S = S, .D = D, .Dv = Dv, .scale = 0.5, .causal = causal};
    bhr(a.sq, H, L, D, heads_last), bhr(a.sk, H, S, D, heads_last), bhr(a.sv, H, S, Dv, heads_last);
    bhr(a.so, H, L, Dv, heads_last);
    memcpy(a.sgq, a.sq, sizeof a.sq), memcpy(a.sgk, a.sk, sizeof a.sk), memcpy(a.sgv, a.sv, sizeof a.sv);
    memcpy(a.sgo, a.so, sizeof a.so);
    return a;
}

/* Forward and backward of case a on the backend under test, through its
 * attention entries (scratch < 0) or through attention_gemm on its other
 * entries with that scratch cap, against the CPU backend's fused kernel. */
static void check_attention(DType cdt, const KAttn *a, int64_t scratch, const char *what) {
    char name[96];
    const int64_t bh = a->B * a->H;
    Buf q = in(cdt, bh * a->L * a->D, -1, 1), k = in(cdt, bh * a->S * a->D, -1, 1), v = in(cdt, bh * a->S * a->Dv, -1, 1);
    Buf o = poisoned(cdt, bh * a->L * a->Dv), lse = poisoned(cdt, bh * a->L);
    int r1 = R->attention_fwd(cdt, a, q.r, k.r, v.r, o.r, lse.r);
    int r2 = scratch < 0 ? B->attention_fwd(cdt, a, q.d, k.d, v.d, o.d, lse.d)
                         : attention_gemm_fwd(B, a, q.d, k.d, v.d, o.d, lse.d, scratch);
    snprintf(name, sizeof name, "%s: forward returns 0", what), result(r1 == 0 && r2 == 0, name, cdt);
    snprintf(name, sizeof name, "%s: o", what), check_buf(&o, tol_of(cdt), name);
    snprintf(name, sizeof name, "%s: lse", what), check_buf(&lse, tol_of(cdt), name);
    Buf go = in(cdt, o.n, -1, 1), gq = poisoned(cdt, q.n), gk = poisoned(cdt, k.n), gv = poisoned(cdt, v.n);
    memset(gq.r, 0, gq.nbytes), memset(gk.r, 0, gk.nbytes), memset(gv.r, 0, gv.nbytes);
    r1 = R->attention_bwd(cdt, a, q.r, k.r, v.r, o.r, lse.r, go.r, gq.r, gk.r, gv.r);
    r2 = scratch < 0 ? B->attention_bwd(cdt, a, q.d, k.d, v.d, o.d, lse.d, go.d, gq.d, gk.d, gv.d)
                     : attention_gemm_bwd(B, a, q.d, k.d, v.d, lse.d, go.d, gq.d, gk.d, gv.d, scratch);
    snprintf(name, sizeof name, "%s: backward returns 0", what), result(r1 == 0 && r2 == 0, name, cdt);
    snprintf(name, sizeof name, "%s: gq", what), check_buf(&gq, tol_of(cdt), name);
    snprintf(name, sizeof name, "%s: gk", what), check_buf(&gk, tol_of(cdt), name);
    snprintf(name, sizeof name, "%s: gv", what), check_buf(&gv, tol_of(cdt), name);
    buf_free(&q), buf_free(&k), buf_free(&v), buf_free(&o), buf_free(&lse);
    buf_free(&go), buf_free(&gq), buf_free(&gk), buf_free(&gv);
}

static void test_attention(DType cdt) {
    for (int causal = 0; causal < 2; causal++) {
        KAttn a = attn_case(2, 3, 5, 7, 4, 3, causal, 0);
        check_attention(cdt, &a, -1, causal ? "attention causal" : "attention");
    }
}

/* attention_gemm over this backend's entries: heads-last and 3-D layouts,
 * causal with L > S and L < S, groups of batch-heads that split a batch
 * index (a scratch cap of two score blocks), no queries at all. */
static void test_attention_gemm(void) {
    KAttn a = attn_case(2, 3, 5, 7, 4, 3, 0, 0);
    check_attention(DT_F32, &a, 0, "attention_gemm");
    a = attn_case(2, 3, 9, 6, 8, 5, 1, 1);
    check_attention(DT_F32, &a, 2 * 9 * 6, "attention_gemm causal L > S, heads-last, groups of 2");
    a = attn_case(3, 2, 6, 9, 4, 4, 1, 1);
    check_attention(DT_F32, &a, 9 * 6 * 4, "attention_gemm causal L < S, heads-last, groups of 4");
    a = attn_case(3, 0, 7, 7, 5, 6, 1, 0);
    check_attention(DT_F32, &a, 0, "attention_gemm 3-D causal");
    a = attn_case(2, 2, 0, 4, 3, 3, 0, 1);
    check_attention(DT_F32, &a, 0, "attention_gemm without queries");
}

/* ---- memory, host copies, streams ---- */

static void test_memory_streams(void) {
    Buf a = in(DT_F32, 1001, -1, 1); /* from_host, then to_host of the same bytes */
    check_buf(&a, 0, "to_host(from_host(x))");
    void *h = B->host_ptr(a.d);
    result(h == NULL || memcmp(h, a.r, a.nbytes) == 0, "host_ptr is NULL or maps the memory", DT_F32);
    buf_free(&a);
    void *ev = B->event_new();
    result(ev && B->stream_current() != NULL, "event_new, stream_current", DT_F32);
    result(B->event_record(ev) == 0 && B->event_wait(ev) == 0 && B->event_sync(ev) == 0, "event record/wait/sync", DT_F32);
    B->event_free(ev);
    result(B->synchronize() == 0, "synchronize", DT_F32);
    result(B->cached_bytes() <= (size_t)1 << 40, "cached_bytes", DT_F32);
}

static void run_backend(const Backend *be) {
    B = be;
    static const DType fl[] = {DT_F32, DT_F64}, ar[] = {DT_F32, DT_F64, DT_I64};
    for (int i = 0; i < 3; i++) {
        test_binary(ar[i]);
        test_unary(ar[i]);
        test_reduce(ar[i]);
    }
    for (int i = 0; i < 2; i++) {
        DType dt = fl[i];
        test_unary_backward(dt), test_softmax(dt), test_cross_entropy(dt), test_layernorm(dt);
        test_optim(dt), test_pool(dt), test_attention(dt), test_conv(dt), test_gemm(dt);
        test_rng(dt);
    }
    test_attention_gemm();
    test_rng(DT_BF16), test_rng(DT_I64);
    test_conv(DT_BF16), test_gemm(DT_BF16);
    static const DType all[] = {DT_F32, DT_F64, DT_BF16, DT_F16, DT_I64, DT_I32, DT_U8, DT_BOOL};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        test_where(all[i]), test_fill(all[i]), test_index(all[i]);
        for (size_t j = 0; j < sizeof all / sizeof *all; j++) test_copy(all[i], all[j]);
    }
    test_fp8();
    test_fp8_gemm();
    test_memory_streams();
    B->empty_cache();
}

int main(int argc, char **argv) {
    static const char *const every[] = {"cpu", "sim"};
    int n = argc > 1 ? argc - 1 : (int)(sizeof every / sizeof *every);
    for (int i = 0; i < n; i++) {
        const char *name = argc > 1 ? argv[i + 1] : every[i];
        const Backend *be = backend_by_name(name);
        if (!be) {
            printf("test_backend: no backend %s: %s\n", name, accel_last_error());
            n_fail++;
            continue;
        }
        int before = n_pass;
        run_backend(be);
        printf("test_backend [%s]: %d checks passed\n", name, n_pass - before);
    }
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
