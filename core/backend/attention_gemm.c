/* attention_gemm.c: scaled-dot-product attention from a backend's own
 * entries (attention_gemm.h). For a group of batch-heads at a time (as
 * many (L, S) score blocks as the scratch cap holds) the scores are formed
 * in device scratch, where the CPU's flash-style kernel streams them:
 *
 *   forward   s = scale q k^T, -inf where j > i when causal (top-left, as
 *             PyTorch's is_causal);  lp = log_softmax(s);
 *             lse = max_j s - max_j lp  (= m + log l, from two exact maxima);
 *             o = exp(lp) v
 *   backward  p = exp(s - lse);  dv = p^T do;  dp = do v^T;
 *             ds = p (dp - rowsum(dp p))  (the softmax_backward entry);
 *             dq = scale ds k;  dk = scale ds^T q
 *
 * In a group, the batch-heads of one batch index make one strided-batched
 * GEMM per product (gemm_batched: an operand steps by its head stride, a
 * scratch block by L S), or a loop over gemm where the backend has no
 * batched entry. Scratch is one allocation per call, freed in stream
 * order (queued work that still reads it runs first). */
#include "attention_gemm.h"
#include <math.h>
#include <stdlib.h>

#define DEFAULT_SCRATCH ((int64_t)1 << 25)

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* A float32 matrix per batch-head (b, h): it starts b sb + h sh - first
 * elements after p, its rows ld apart. */
typedef struct {
    char *p;
    int64_t sb, sh, ld, first;
} Mat;

static Mat operand(const void *p, const int64_t st[3]) { return (Mat){(char *)p, st[0], st[1], st[2], 0}; }

/* Block bh - p0 of a scratch buffer of (rows, cols) blocks. */
static Mat block(void *p, const KAttn *a, int64_t rows, int64_t cols, int64_t p0) {
    const int64_t n = rows * cols;
    return (Mat){(char *)p, a->H * n, n, cols, p0 * n};
}

static void *at(Mat m, int64_t b, int64_t h) { return m.p + 4 * (b * m.sb + h * m.sh - m.first); }

/* C_bh = alpha op(A_bh) op(B_bh) for bh in [p0, p0 + n): one call per batch
 * index (its heads as one strided batch). */
static int gemm_group(const Backend *be, const KAttn *a, int64_t p0, int64_t n, int ta, int tb, int64_t M, int64_t N,
                      int64_t K, double alpha, Mat A, Mat B, Mat C) {
    for (int64_t bh = p0; bh < p0 + n;) {
        const int64_t b = bh / a->H, h = bh % a->H, run = min64(a->H - h, p0 + n - bh);
        int rc = 0;
        if (be->gemm_batched)
            rc = be->gemm_batched(DT_F32, ta, tb, M, N, K, alpha, at(A, b, h), A.ld, A.sh, at(B, b, h), B.ld, B.sh,
                                  0.0, at(C, b, h), C.ld, C.sh, run);
        for (int64_t i = 0; !be->gemm_batched && rc == 0 && i < run; i++)
            rc = be->gemm(DT_F32, ta, tb, M, N, K, alpha, at(A, b, h + i), A.ld, at(B, b, h + i), B.ld, 0.0,
                          at(C, b, h + i), C.ld);
        if (rc != 0) return rc;
        bh += run;
    }
    return 0;
}

/* Device scratch of one call: score-sized buffers s, x (and y), a float per
 * row of a group, and for causal calls the (L, S) mask j > i and a -inf. */
typedef struct {
    char *mem;
    size_t bytes;
    int64_t group; /* batch-heads per group */
    char *s, *x, *y, *rows, *neg_inf, *mask;
} Scratch;

/* The mask from 0, 1, ... n - 1 as floats on the device: mask = col > row. */
static int make_mask(const Backend *be, const KAttn *a, Scratch *sc, char *iota) {
    const int64_t n = a->L > a->S ? a->L : a->S;
    float *h = malloc(sizeof(float) * (size_t)(n + 1));
    if (!h) return -1;
    for (int64_t i = 0; i < n; i++) h[i] = (float)i;
    h[n] = -INFINITY;
    int rc = be->from_host(iota, h, sizeof(float) * (size_t)(n + 1));
    free(h);
    sc->neg_inf = iota + 4 * n;
    StridedIter it;
    iter_init(&it, 2, (int64_t[]){a->L, a->S});
    iter_add(&it, sc->mask, (int64_t[]){a->S, 1}, 1);
    iter_add(&it, iota, (int64_t[]){0, 1}, 4); /* column j */
    iter_add(&it, iota, (int64_t[]){1, 0}, 4); /* row i */
    if (rc == 0) be->binary(KB_GT, DT_F32, &it);
    return rc;
}

static int scratch_new(const Backend *be, const KAttn *a, int nbuf, int64_t cap, Scratch *sc) {
    const int64_t ls = a->L * a->S, bh = a->B * a->H, iota = (a->L > a->S ? a->L : a->S) + 1;
    sc->group = ls > 0 ? min64(bh, cap / ls) : bh;
    if (sc->group > a->H) sc->group -= sc->group % a->H; /* whole batch indices: fewer GEMM calls */
    if (sc->group < 1) sc->group = 1;
    const int64_t blocks = sc->group * ls, rows = sc->group * a->L;
    const int64_t floats = nbuf * blocks + rows + (a->causal ? iota : 0);
    sc->bytes = (size_t)(4 * floats + (a->causal ? ls : 0));
    sc->mem = be->alloc(sc->bytes ? sc->bytes : 1);
    if (!sc->mem) return -1;
    sc->s = sc->mem, sc->x = sc->s + 4 * blocks, sc->y = nbuf > 2 ? sc->x + 4 * blocks : NULL;
    sc->rows = sc->mem + 4 * nbuf * blocks;
    sc->mask = sc->rows + 4 * rows + 4 * (a->causal ? iota : 0);
    if (a->causal && make_mask(be, a, sc, sc->rows + 4 * rows) != 0) {
        be->free(sc->mem, sc->bytes);
        return -1;
    }
    return 0;
}

/* out = a op b over n contiguous floats (out may be a). */
static void run_binary(const Backend *be, KBinOp op, int64_t n, void *out, void *x, void *y) {
    StridedIter it;
    iter_init(&it, 1, &n);
    iter_add(&it, out, (int64_t[]){1}, 4), iter_add(&it, x, (int64_t[]){1}, 4), iter_add(&it, y, (int64_t[]){1}, 4);
    be->binary(op, DT_F32, &it);
}

static void run_exp(const Backend *be, int64_t n, void *x) {
    StridedIter it;
    iter_init(&it, 1, &n);
    iter_add(&it, x, (int64_t[]){1}, 4), iter_add(&it, x, (int64_t[]){1}, 4);
    be->unary(KU_EXP, DT_F32, &it, 0, 0);
}

/* The group's n score blocks s = scale q k^T, masked when causal. */
static int scores(const Backend *be, const KAttn *a, const Scratch *sc, int64_t p0, int64_t n, const void *q,
                  const void *k) {
    int rc = gemm_group(be, a, p0, n, 0, 1, a->L, a->S, a->D, a->scale, operand(q, a->sq), operand(k, a->sk),
                        block(sc->s, a, a->L, a->S, p0));
    if (rc != 0 || !a->causal) return rc;
    const int64_t ls = a->L * a->S;
    StridedIter it; /* s = mask ? -inf : s */
    iter_init(&it, 3, (int64_t[]){n, a->L, a->S});
    iter_add(&it, sc->s, (int64_t[]){ls, a->S, 1}, 4);
    iter_add(&it, sc->mask, (int64_t[]){0, a->S, 1}, 1);
    iter_add(&it, sc->neg_inf, (int64_t[]){0, 0, 0}, 4);
    iter_add(&it, sc->s, (int64_t[]){ls, a->S, 1}, 4);
    be->where(&it);
    return 0;
}

static int forward_group(const Backend *be, const KAttn *a, const Scratch *sc, int64_t p0, int64_t n, const void *q,
                         const void *k, const void *v, void *o, void *lse) {
    const int64_t rows = n * a->L;
    char *lse_g = (char *)lse + 4 * p0 * a->L;
    int rc = scores(be, a, sc, p0, n, q, k);
    if (rc != 0) return rc;
    be->softmax(1, DT_F32, sc->s, rows, a->S, 1, sc->x);
    be->reduce(KR_MAX, DT_F32, sc->s, rows, a->S, 1, lse_g);
    be->reduce(KR_MAX, DT_F32, sc->x, rows, a->S, 1, sc->rows);
    run_binary(be, KB_SUB, rows, lse_g, lse_g, sc->rows);
    run_exp(be, rows * a->S, sc->x);
    return gemm_group(be, a, p0, n, 0, 0, a->L, a->Dv, a->S, 1.0, block(sc->x, a, a->L, a->S, p0), operand(v, a->sv),
                      operand(o, a->so));
}

int attention_gemm_fwd(const Backend *be, const KAttn *a, const void *q, const void *k, const void *v, void *o,
                       void *lse, int64_t scratch_elems) {
    const int64_t bh = a->B * a->H;
    if (bh == 0 || a->L == 0) return 0;
    Scratch sc;
    if (scratch_new(be, a, 2, scratch_elems > 0 ? scratch_elems : DEFAULT_SCRATCH, &sc) != 0) return -1;
    int rc = 0;
    for (int64_t p0 = 0; rc == 0 && p0 < bh; p0 += sc.group)
        rc = forward_group(be, a, &sc, p0, min64(sc.group, bh - p0), q, k, v, o, lse);
    be->free(sc.mem, sc.bytes);
    return rc;
}

/* s = exp(s - lse) over the group's blocks: the probabilities. */
static void probabilities(const Backend *be, const KAttn *a, const Scratch *sc, int64_t n, const void *lse_g) {
    const int64_t ls = a->L * a->S;
    StridedIter it;
    iter_init(&it, 3, (int64_t[]){n, a->L, a->S});
    iter_add(&it, sc->s, (int64_t[]){ls, a->S, 1}, 4);
    iter_add(&it, sc->s, (int64_t[]){ls, a->S, 1}, 4);
    iter_add(&it, (void *)lse_g, (int64_t[]){a->L, 1, 0}, 4);
    be->binary(KB_SUB, DT_F32, &it);
    run_exp(be, n * ls, sc->s);
}

static int backward_group(const Backend *be, const KAttn *a, const Scratch *sc, int64_t p0, int64_t n, const void *q,
                          const void *k, const void *v, const void *lse, const void *go, void *gq, void *gk,
                          void *gv) {
    const int64_t L = a->L, S = a->S;
    int rc = scores(be, a, sc, p0, n, q, k);
    if (rc != 0) return rc;
    probabilities(be, a, sc, n, (const char *)lse + 4 * p0 * L);
    const Mat p = block(sc->s, a, L, S, p0), dp = block(sc->x, a, L, S, p0), ds = block(sc->y, a, L, S, p0);
    const Mat mgo = operand(go, a->sgo);
    rc = gemm_group(be, a, p0, n, 1, 0, S, a->Dv, L, 1.0, p, mgo, operand(gv, a->sgv));
    if (rc == 0) rc = gemm_group(be, a, p0, n, 0, 1, L, S, a->Dv, 1.0, mgo, operand(v, a->sv), dp);
    if (rc != 0) return rc;
    be->softmax_backward(0, DT_F32, sc->s, sc->x, n * L, S, 1, sc->y);
    rc = gemm_group(be, a, p0, n, 0, 0, L, a->D, S, a->scale, ds, operand(k, a->sk), operand(gq, a->sgq));
    if (rc == 0) rc = gemm_group(be, a, p0, n, 1, 0, S, a->D, L, a->scale, ds, operand(q, a->sq), operand(gk, a->sgk));
    return rc;
}

/* Zeros into a (B, H, rows, cols) operand with batch / head / row strides st. */
static void fill_zero(const Backend *be, const KAttn *a, void *p, const int64_t st[3], int64_t rows, int64_t cols) {
    StridedIter it;
    iter_init(&it, 4, (int64_t[]){a->B, a->H, rows, cols});
    iter_add(&it, p, (int64_t[]){st[0], st[1], st[2], 1}, 4);
    be->fill(&it, DT_F32, 0.0);
}

int attention_gemm_bwd(const Backend *be, const KAttn *a, const void *q, const void *k, const void *v,
                       const void *lse, const void *go, void *gq, void *gk, void *gv, int64_t scratch_elems) {
    const int64_t bh = a->B * a->H;
    if (bh == 0) return 0;
    if (a->L == 0) { /* no query sees a key */
        fill_zero(be, a, gk, a->sgk, a->S, a->D), fill_zero(be, a, gv, a->sgv, a->S, a->Dv);
        return 0;
    }
    Scratch sc;
    if (scratch_new(be, a, 3, scratch_elems > 0 ? scratch_elems : DEFAULT_SCRATCH, &sc) != 0) return -1;
    int rc = 0;
    for (int64_t p0 = 0; rc == 0 && p0 < bh; p0 += sc.group)
        rc = backward_group(be, a, &sc, p0, min64(sc.group, bh - p0), q, k, v, lse, go, gq, gk, gv);
    be->free(sc.mem, sc.bytes);
    return rc;
}
