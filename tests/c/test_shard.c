/* test_shard.c: C tests of the sharding engine's layout arithmetic
 * (core/dist/shard.c: shard lengths, padding, the part of a parameter in a
 * rank's shard, the segments of a rank's shard) against values worked out
 * by hand and an element-by-element recount, plus the engine on the
 * one-process communicator: parameters become views of their unit's
 * buffer, stage 3 releases and gathers them with their values kept, and an
 * SGD step on the shards equals p - lr * g; stage 2 through autograd
 * (sum(x @ W) has dW[i][j] = sum_k x[k][i]): .grad is nil after backward,
 * the gradient shard holds dW, accumulated over two backward passes;
 * stage 3 prefetch through the engine's order log: with prefetch on, each
 * unit's gather is issued before the previous unit's compute ends (release),
 * in forward and in backward; off, not; the parameters bitwise the same.
 * Last line "N passed, N failed". */
#include "core/dist/shard.h"
#include "core/autograd.h"
#include "core/ops.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static bool seg_is(const ShardSeg *s, int slot, int64_t at, int64_t from, int64_t len) {
    return s->slot == slot && s->at == at && s->from == from && s->len == len;
}

/* ---- hand-worked layouts ---- */

static void test_lengths(void) {
    CHECK(shard_len(205, 1) == 205);
    CHECK(shard_len(205, 2) == 103); /* padded 206: one zero */
    CHECK(shard_len(205, 3) == 69);  /* padded 207: two zeros */
    CHECK(shard_len(6, 3) == 2);
    CHECK(shard_len(1, 4) == 1); /* ranks 1..3 own only padding */
    int64_t from = -1;
    CHECK(shard_overlap(100, 10, 103, 0, &from) == 3 && from == 0);
    CHECK(shard_overlap(100, 10, 103, 1, &from) == 7 && from == 3);
    CHECK(shard_overlap(0, 5, 2, 3, &from) == 0);
}

/* The test model of shard_test.lua: 49 + 70 + 70 + 16 = 205 elements on 3
 * ranks (shard 69, padded 207). */
static void test_segments_by_hand(void) {
    const int64_t offsets[] = {0, 49, 119, 189}, numels[] = {49, 70, 70, 16};
    ShardSeg s[4];
    CHECK(shard_segments(4, offsets, numels, 69, 0, s) == 2);
    CHECK(seg_is(&s[0], 0, 0, 0, 49) && seg_is(&s[1], 1, 49, 0, 20));
    CHECK(shard_segments(4, offsets, numels, 69, 1, s) == 2);
    CHECK(seg_is(&s[0], 1, 0, 20, 50) && seg_is(&s[1], 2, 50, 0, 19));
    CHECK(shard_segments(4, offsets, numels, 69, 2, s) == 2);
    CHECK(seg_is(&s[0], 2, 0, 19, 51) && seg_is(&s[1], 3, 51, 0, 16)); /* 67 used, 2 padding */
}

/* ---- every element in exactly one rank's shard, at the right place ---- */

static void test_cover(int world, int n, const int64_t *numels) {
    int64_t offsets[16], total = 0;
    for (int i = 0; i < n; i++) offsets[i] = total, total += numels[i];
    int64_t shard = shard_len(total, world);
    int *seen = calloc((size_t)(total > 0 ? total : 1), sizeof(int));
    bool ok = shard * world >= total && shard * world - total < world;
    for (int r = 0; r < world; r++) {
        ShardSeg s[16];
        int k = shard_segments(n, offsets, numels, shard, r, s);
        for (int j = 0; j < k; j++) {
            ok = ok && s[j].at >= 0 && s[j].at + s[j].len <= shard && s[j].from + s[j].len <= numels[s[j].slot];
            for (int64_t e = 0; e < s[j].len; e++) {
                int64_t flat = (int64_t)r * shard + s[j].at + e; /* its place in the unit's buffer */
                ok = ok && flat == offsets[s[j].slot] + s[j].from + e;
                if (flat < total) seen[flat]++;
            }
        }
    }
    for (int64_t e = 0; e < total; e++) ok = ok && seen[e] == 1;
    free(seen);
    if (!ok) printf("test_shard.c: cover failed for world %d, %d parameters\n", world, n);
    CHECK(ok);
}

static void test_covers(void) {
    const int64_t a[] = {49, 70, 70, 16}, b[] = {1}, c[] = {5, 1, 1, 7, 3, 11}, d[] = {2, 2};
    for (int w = 1; w <= 7; w++) {
        test_cover(w, 4, a);
        test_cover(w, 1, b);
        test_cover(w, 6, c);
        test_cover(w, 2, d);
    }
}

/* ---- the engine on one process ---- */

static Tensor *param(int64_t r, int64_t c, float base) {
    int64_t shape[2] = {r, c};
    Tensor *t = tensor_empty(shape, 2, DT_F32, (Device){DEV_CPU, 0});
    float *d = tensor_data(t);
    for (int64_t i = 0; i < r * c; i++) d[i] = base + (float)i;
    t->requires_grad = true;
    return t;
}

static void test_engine_stage3(DistComm *c) {
    Tensor *ps[2] = {param(2, 3, 1), param(1, 5, 100)};
    int unit_of[2] = {0, 0};
    ShardOptions o = {.stage = 3};
    ShardEngine *e = shard_engine_new(c, ps, 2, unit_of, 1, &o);
    CHECK(e != NULL);
    if (!e) return;
    CHECK(shard_storage_released(ps[0]->storage) && ps[0]->storage == ps[1]->storage);
    CHECK(shard_unit_gather(e, 0) == 0 && !shard_storage_released(ps[0]->storage));
    float *a = tensor_data(ps[0]), *b = tensor_data(ps[1]);
    CHECK(b == a + 6 && a[5] == 6.0f && b[0] == 100.0f && b[4] == 104.0f);
    CHECK(shard_unit_release(e, 0) == 0 && ps[0]->storage->data == NULL);
    shard_engine_free(e);
    tensor_release(ps[0]);
    tensor_release(ps[1]);
}

static void test_engine_sgd(DistComm *c) {
    Tensor *ps[2] = {param(2, 2, 1), param(3, 1, 10)};
    int unit_of[2] = {0, 1};
    ShardOptions o = {.stage = 1};
    ShardEngine *e = shard_engine_new(c, ps, 2, unit_of, 2, &o);
    CHECK(e != NULL && shard_num_units(e) == 2);
    if (!e) return;
    for (int i = 0; i < 2; i++) {
        ps[i]->grad = tensor_full(ps[i]->shape, ps[i]->ndim, 0.5 * (i + 1), DT_F32, (Device){DEV_CPU, 0});
    }
    ShardHyper h[2];
    for (int i = 0; i < 2; i++) h[i] = (ShardHyper){.kind = SHARD_SGD, .sgd = {.lr = 0.1}};
    CHECK(shard_step(e, h) == 0);
    const float *a = tensor_data(ps[0]), *b = tensor_data(ps[1]);
    CHECK(a[0] == 1.0f - 0.1f * 0.5f && a[3] == 4.0f - 0.1f * 0.5f && b[2] == 12.0f - 0.1f * 1.0f);
    CHECK(shard_param_steps(e, 0) == 1 && shard_param_steps(e, 1) == 1);
    double total = 0;
    CHECK(shard_clip_grad_norm(e, 1e9, 2.0, false, &total) == 0 && fabs(total - sqrt(4 * 0.25 + 3 * 1.0)) < 1e-9);
    shard_engine_free(e);
    tensor_release(ps[0]);
    tensor_release(ps[1]);
}

/* sum over all elements of x @ w: d/dw[i][j] = sum_k x[k][i]. */
static int backward_sum_xw(Tensor *x, Tensor *w) {
    Tensor *y = op_matmul(x, w);
    int dims[2] = {0, 1};
    Tensor *l = y ? op_reduce(KR_SUM, y, dims, 2, false) : NULL;
    int rc = l ? ag_backward(l, NULL) : -1;
    tensor_release(l);
    tensor_release(y);
    return rc;
}

static void test_engine_stage2_autograd(DistComm *c) {
    Tensor *w = param(3, 2, 0.5f), *x = param(4, 3, -1.0f);
    x->requires_grad = false;
    int unit_of[1] = {0};
    ShardOptions o = {.stage = 2};
    ShardEngine *e = shard_engine_new(c, &w, 1, unit_of, 1, &o);
    CHECK(e != NULL);
    if (!e) return;
    CHECK(backward_sum_xw(x, w) == 0 && w->grad == NULL);
    CHECK(backward_sum_xw(x, w) == 0 && shard_finalize(e) == 0 && w->grad == NULL);
    const float *g = tensor_data(shard_unit_shard(e, 0, -1)), *xd = tensor_data(x);
    bool ok = true;
    for (int i = 0; i < 3; i++) {
        float col = 0; /* sum_k x[k][i], twice */
        for (int k = 0; k < 4; k++) col += xd[k * 3 + i];
        for (int j = 0; j < 2; j++) ok = ok && fabsf(g[i * 2 + j] - 2 * col) <= 1e-5f * fabsf(col);
    }
    CHECK(ok);
    ShardStats st;
    shard_stats(e, &st);
    CHECK(st.reductions == 2 && st.early == 2);
    shard_engine_free(e);
    tensor_release(w);
    tensor_release(x);
}

/* ---- stage 3 prefetch: the order log ---- */

#define PF_UNITS 3

/* One training step of y = x @ W1 @ W2 @ W3 (one unit each), summed, as
 * accel.shard's hooks drive a model: forward_begin; per unit
 * shard_unit_forward, its compute, the pre-backward identity, release;
 * backward; finalize; an SGD step. */
static int pf_step(ShardEngine *e, Tensor *x, Tensor **w) {
    Tensor *y = tensor_retain(x);
    shard_forward_begin(e);
    int rc = 0;
    for (int u = 0; u < PF_UNITS && rc == 0; u++) {
        Tensor *z = shard_unit_forward(e, u) == 0 ? op_matmul(y, w[u]) : NULL;
        Tensor *o = z ? shard_pre_backward(e, u, z) : NULL;
        rc = o && shard_unit_release(e, u) == 0 ? 0 : -1;
        tensor_release(z);
        tensor_release(y);
        y = o;
    }
    int dims[2] = {0, 1};
    Tensor *l = rc == 0 ? op_reduce(KR_SUM, y, dims, 2, false) : NULL;
    rc = l && ag_backward(l, NULL) == 0 && shard_finalize(e) == 0 ? 0 : -1;
    ShardHyper h[PF_UNITS];
    for (int i = 0; i < PF_UNITS; i++) h[i] = (ShardHyper){.kind = SHARD_SGD, .sgd = {.lr = 0.01}};
    if (rc == 0) rc = shard_step(e, h);
    tensor_release(l);
    tensor_release(y);
    return rc;
}

/* Index of the first event (kind, u) at or after from, in events [0, n); n if none. */
static int pf_find(const ShardEvent *ev, int n, int from, ShardEventKind kind, int u) {
    for (int k = from; k < n; k++)
        if (ev[k].kind == kind && ev[k].unit == u) return k;
    return n;
}

/* Whether each unit's gather was issued before the previous unit's compute
 * ended (its release): forward units 1, 2 after 0, 1; backward units 1, 0
 * after 2, 1. */
static bool pf_overlapped(const ShardEvent *ev, int n) {
    int bwd = pf_find(ev, n, 0, SHARD_EV_BACKWARD, PF_UNITS - 1);
    bool ok = bwd < n;
    for (int u = 1; u < PF_UNITS; u++)
        ok = ok && pf_find(ev, bwd, 0, SHARD_EV_GATHER, u) < pf_find(ev, bwd, 0, SHARD_EV_RELEASE, u - 1);
    for (int u = PF_UNITS - 2; u >= 0; u--)
        ok = ok && pf_find(ev, n, bwd, SHARD_EV_GATHER, u) < pf_find(ev, n, bwd, SHARD_EV_RELEASE, u + 1);
    return ok;
}

/* Two steps with prefetch on or off: the second step's order log, whether
 * it shows the overlap, and the parameters after it into out. */
static bool pf_run(DistComm *c, bool prefetch, float *out, uint64_t *fwd_prefetches) {
    Tensor *w[PF_UNITS], *x = param(2, 4, -1.0f);
    x->requires_grad = false;
    int unit_of[PF_UNITS];
    for (int u = 0; u < PF_UNITS; u++) w[u] = param(4, 4, 0.1f * (float)(u + 1)), unit_of[u] = u;
    for (int u = 0; u < PF_UNITS; u++) {
        float *d = tensor_data(w[u]);
        for (int k = 0; k < 16; k++) d[k] = 0.01f * (float)((k * 7 + u * 3) % 11) - 0.05f;
    }
    ShardOptions o = {.stage = 3, .forward_prefetch = prefetch, .backward_prefetch = prefetch};
    ShardEngine *e = shard_engine_new(c, w, PF_UNITS, unit_of, PF_UNITS, &o);
    bool ok = false;
    int n = 0;
    if (e && pf_step(e, x, w) == 0 && shard_trace_start(e, 256) == 0 && pf_step(e, x, w) == 0) {
        const ShardEvent *ev = shard_trace(e, &n);
        ok = pf_overlapped(ev, n);
        ShardStats st;
        shard_stats(e, &st);
        *fwd_prefetches = st.forward_prefetches;
        CHECK(shard_gather_all(e) == 0);
        for (int u = 0; u < PF_UNITS; u++) memcpy(out + 16 * u, tensor_data(w[u]), 16 * sizeof(float));
    }
    CHECK(e != NULL && n > 0 && n < 256);
    shard_engine_free(e);
    for (int u = 0; u < PF_UNITS; u++) tensor_release(w[u]);
    tensor_release(x);
    return ok;
}

static void test_engine_prefetch(DistComm *c) {
    float with[16 * PF_UNITS], without[16 * PF_UNITS];
    uint64_t fwd_on = 0, fwd_off = 0;
    CHECK(pf_run(c, true, with, &fwd_on));
    CHECK(!pf_run(c, false, without, &fwd_off)); /* the check sees the difference */
    CHECK(fwd_on == PF_UNITS - 1 && fwd_off == 0);
    CHECK(memcmp(with, without, sizeof with) == 0); /* bitwise the same parameters */
}

static void test_engine_errors(DistComm *c) {
    Tensor *p = param(2, 2, 0);
    int unit_of[1] = {0};
    ShardOptions bad = {.stage = 4};
    CHECK(shard_engine_new(c, &p, 1, unit_of, 1, &bad) == NULL && strstr(accel_last_error(), "stage must be 1, 2 or 3"));
    ShardOptions o = {.stage = 2};
    int out_of_range[1] = {3};
    CHECK(shard_engine_new(c, &p, 1, out_of_range, 1, &o) == NULL && strstr(accel_last_error(), "unit 4 is not in 1..1"));
    tensor_release(p);
}

/* One process: a split is a one-process communicator, the node / cross-node
 * ones too; HYBRID is refused (one machine), so is replicate at stage 1. */
static void test_hybrid_single(DistComm *c) {
    DistComm *s = dist_split(c, 3, 0), *node = NULL, *cross = NULL;
    CHECK(s && s->size == 1 && s->rank == 0 && dist_comm_world_rank(s, 0) == 0 && strcmp(s->label, "split") == 0);
    CHECK(dist_split(c, -1, 0) == NULL && strstr(accel_last_error(), "color must be >= 0"));
    CHECK(dist_comm_free(s) == 0);
    CHECK(dist_node_comm(c) && dist_node_comm(c)->size == 1 && dist_cross_node_comm(c)->size == 1);
    CHECK(dist_comm_free(dist_node_comm(c)) == -1 && strstr(accel_last_error(), "belongs to the job"));
    CHECK(shard_hybrid_comms(c, &node, &cross) == -1 && strstr(accel_last_error(), "run on one machine"));
    Tensor *p = param(2, 2, 0);
    int unit_of[1] = {0};
    ShardOptions o = {.stage = 1, .replicate = dist_cross_node_comm(c)};
    CHECK(shard_engine_new(c, &p, 1, unit_of, 1, &o) == NULL && strstr(accel_last_error(), "needs stage 2"));
    tensor_release(p);
}

int main(void) {
    test_lengths();
    test_segments_by_hand();
    test_covers();
    DistComm *c = dist_world();
    CHECK(c != NULL && c->size == 1);
    if (c && c->size == 1) {
        test_engine_stage3(c);
        test_engine_sgd(c);
        test_engine_stage2_autograd(c);
        test_engine_prefetch(c);
        test_engine_errors(c);
        test_hybrid_single(c);
    }
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
