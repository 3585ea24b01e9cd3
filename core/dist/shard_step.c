/* shard_step.c: the sharding engine's work on this rank's shards (see
 * shard.h): reading the gradient of a shard, clipping, unscaling, the
 * optimizer step with the fused kernels per parameter segment, the
 * parameters' all-gather after it, and full tensors in and out. */
#include "shard_impl.h"
#include "../backend/backend.h"
#include "../ops.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Stages 1-2 after a step: the new parameters from every rank's shard. */
static int regather(ShardEngine *e) {
    for (int u = 0; u < e->nu; u++) {
        Unit *un = &e->units[u];
        if (dist_all_gather(e->comm, un->holder->flat, un->master)) return -1;
        un->view->version++;
    }
    return 0;
}

/* ---- gradients of this rank's shard ---- */

/* The gradient of segment s of unit un (NULL: the parameter has none). */
static const float *seg_grad(ShardEngine *e, Unit *un, const ShardSeg *s) {
    if (e->shard_grads) return e->has_grads ? fdata(un->grad) + s->at : NULL;
    Tensor *g = e->params[un->params[s->slot]]->grad;
    return g ? (const float *)tensor_data(g) + s->from : NULL;
}

/* Stage 1 reads .grad: float32, contiguous, the parameter's size. */
static int check_grads(ShardEngine *e) {
    for (int i = 0; e->ddp && i < e->n; i++) {
        Tensor *g = e->params[i]->grad;
        if (g && (g->dtype != DT_F32 || !tensor_is_contiguous(g) || g->numel != e->params[i]->numel))
            return accel_fail_int("shard: parameter %d's .grad must be a contiguous float32 tensor of its shape, got "
                                  "%s %s", i + 1, dtype_name(g->dtype), tensor_shape_str(g));
    }
    return 0;
}

/* Sum of |g|^p (p = INFINITY: max |g|, -INFINITY: min |g|) over this
 * rank's shard; *count: the elements it saw. */
static double local_norm_pow(ShardEngine *e, double p, double *count) {
    double acc = knorm_identity(p);
    *count = 0;
    for (int u = 0; u < e->nu; u++) {
        Unit *un = &e->units[u];
        for (int k = 0; k < un->nseg; k++) {
            const float *g = seg_grad(e, un, &un->segs[k]);
            if (!g) continue;
            double v = backend_for(un->master->device)->norm_pow(DT_F32, un->segs[k].len, g, p);
            acc = knorm_combine(acc, v, p);
            *count += (double)un->segs[k].len;
        }
    }
    return acc;
}

/* v[0..n) reduced over the ranks with op, in place. */
static int all_reduce_doubles(ShardEngine *e, double *v, int64_t n, DistOp op) {
    Tensor *t = tensor_empty(&n, 1, DT_F64, (Device){DEV_CPU, 0});
    int rc = !t || tensor_from_host(t, v) || dist_all_reduce(e->comm, t, op) || tensor_to_host(t, v) ? -1 : 0;
    tensor_release(t);
    return rc;
}

/* The p-norm of every gradient element across the ranks, from one
 * all-reduce of {this rank's partial, its element count} (max / min for p
 * = +-INFINITY, else a sum; the count negated under min, so that it stays
 * nonzero where any rank saw an element). No element at all: 0, as
 * PyTorch's total norm of no gradients (for p < 0 too). */
static int global_norm(ShardEngine *e, double p, double *total) {
    DistOp op = p == INFINITY ? DIST_MAX : p == -INFINITY ? DIST_MIN : DIST_SUM;
    double v[2];
    v[0] = local_norm_pow(e, p, &v[1]);
    if (op == DIST_MIN) v[1] = -v[1];
    if (all_reduce_doubles(e, v, 2, op)) return -1;
    *total = v[1] == 0 ? 0 : isinf(p) || p == 0 ? v[0] : pow(v[0], 1.0 / p);
    return 0;
}

/* g = g op (float)s in place, on every gradient this rank holds: stage 1's
 * full .grad, or the gradient shards of stages 2-3 (their padding is 0 and
 * stays 0 under a multiply or a clamp to [-v, v]). */
static int each_grad(ShardEngine *e, KBinOp op, double s) {
    for (int i = 0; e->ddp && i < e->n; i++)
        if (e->params[i]->grad && op_binary_scalar_(op, e->params[i]->grad, (float)s, false)) return -1;
    for (int u = 0; e->shard_grads && u < e->nu; u++)
        if (e->units[u].grad && op_binary_scalar_(op, e->units[u].grad, (float)s, false)) return -1;
    return 0;
}

static int scale_grads(ShardEngine *e, double factor) { return each_grad(e, KB_MUL, factor); }

static int ready_grads(ShardEngine *e) {
    if (shard_finalize(e)) return -1;
    return check_grads(e);
}

/* p as Python prints a float (2.0, 0.5, inf), for messages like PyTorch's. */
typedef struct { char s[32]; } PyFloat;
static PyFloat py_float(double p) {
    PyFloat f;
    snprintf(f.s, sizeof f.s, "%g", p);
    if (isfinite(p) && !strpbrk(f.s, ".e")) strcat(f.s, ".0");
    return f;
}

int shard_clip_grad_norm(ShardEngine *e, double max_norm, double p, bool error_if_nonfinite, double *total) {
    if (ready_grads(e) || global_norm(e, p, total)) return -1;
    if (error_if_nonfinite && !isfinite(*total))
        return accel_fail_int("clip_grad_norm_: The total norm of order %s for gradients from `parameters` is "
                              "non-finite, so it cannot be clipped. To disable this error and scale the gradients by "
                              "the non-finite norm anyway, set `error_if_nonfinite=false`", py_float(p).s);
    float coef = (float)max_norm / ((float)*total + 1e-6f); /* in float32, as clip_grad_norm_ on float32 grads */
    return coef < 1 ? scale_grads(e, coef) : 0;
}

int shard_clamp_grads(ShardEngine *e, double v) {
    return ready_grads(e) || each_grad(e, KB_MAX, -v) || each_grad(e, KB_MIN, v) ? -1 : 0;
}

int shard_unscale(ShardEngine *e, double factor, bool *found_inf) {
    if (ready_grads(e) || scale_grads(e, factor)) return -1;
    double seen, bad = isfinite(local_norm_pow(e, INFINITY, &seen)) ? 0 : 1;
    if (all_reduce_doubles(e, &bad, 1, DIST_MAX)) return -1;
    *found_inf = bad != 0;
    return 0;
}

/* ---- the optimizer step ---- */

/* State slot names by optimizer kind (SHARD_SGD, SHARD_ADAM). */
static const char *const STATE_NAMES[2][N_STATE] = {{"momentum_buffer", NULL, NULL},
                                                    {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}};

const char *shard_state_name(const ShardEngine *e, int which) {
    if (which == 0) return "param";
    if (!e->kind_set || which < 1 || which > N_STATE || !e->units[0].state[which - 1]) return NULL;
    return STATE_NAMES[e->kind == SHARD_ADAM][which - 1];
}

/* How many state slots parameters with hyper-parameters h need. */
static int slots_needed(const ShardEngine *e, const ShardHyper *h) {
    int need = 0;
    for (int i = 0; i < e->n; i++) {
        int k = h[i].kind == SHARD_ADAM ? (h[i].amsgrad ? 3 : 2) : (h[i].sgd.momentum != 0 ? 1 : 0);
        if (k > need) need = k;
    }
    return need;
}

int shard_set_kind(ShardEngine *e, ShardOptKind kind) {
    if (e->kind_set && kind != e->kind) return accel_fail_int("shard: the optimizer kind changed between steps");
    e->kind = kind;
    e->kind_set = true;
    return 0;
}

/* State slots 0..need-1 of every unit (zeros where new). */
static int ensure_slots(ShardEngine *e, int need) {
    for (int u = 0; u < e->nu; u++)
        for (int s = 0; s < need; s++)
            if (!e->units[u].state[s] && !(e->units[u].state[s] = flat_f32(e, e->units[u].shard, true))) return -1;
    return 0;
}

static int prepare_state(ShardEngine *e, const ShardHyper *h) {
    for (int i = 0; i < e->n; i++)
        if (h[i].kind != h[0].kind) return accel_fail_int("shard: every parameter must use the same optimizer");
    if (shard_set_kind(e, h[0].kind)) return -1;
    return ensure_slots(e, slots_needed(e, h));
}

static float *state_at(Unit *un, int s, int64_t at) { return un->state[s] ? fdata(un->state[s]) + at : NULL; }

/* Whether parameter i takes part in this step: it has a gradient (stages
 * 2-3: one reached it on some rank since zero_grad, as DDP's .grad). */
static bool stepping(const ShardEngine *e, int i) {
    return e->shard_grads ? e->has_grad[i] != 0 : e->params[i]->grad != NULL;
}

/* Stages 2-3: has_grad made the same on every rank (max). */
static int agree_has_grad(ShardEngine *e) {
    if (!e->shard_grads) return 0;
    int64_t len = e->n;
    Tensor *t = tensor_empty(&len, 1, DT_U8, (Device){DEV_CPU, 0});
    int rc = !t || tensor_from_host(t, e->has_grad) || dist_all_reduce(e->comm, t, DIST_MAX) ||
             tensor_to_host(t, e->has_grad) ? -1 : 0;
    tensor_release(t);
    return rc;
}

static void step_segment(ShardEngine *e, Unit *un, const ShardSeg *s, const ShardHyper *h) {
    int i = un->params[s->slot];
    const float *g = seg_grad(e, un, s);
    if (!g || !stepping(e, i)) return;
    float *p = fdata(shard_host_view(e, un->master)) + s->at;
    if (h[i].kind == SHARD_ADAM) {
        KAdamArgs a = h[i].adam;
        a.step = e->steps[i] + 1;
        backend_for(un->master->device)->adam(DT_F32, s->len, p, g, state_at(un, 0, s->at), state_at(un, 1, s->at),
                                              h[i].amsgrad ? state_at(un, 2, s->at) : NULL, &a);
    } else {
        backend_for(un->master->device)->sgd(DT_F32, s->len, p, g, h[i].sgd.momentum != 0 ? state_at(un, 0, s->at) : NULL,
                                             e->steps[i] == 0, &h[i].sgd);
    }
}

int shard_step(ShardEngine *e, const ShardHyper *h) {
    if (ready_grads(e)) return -1;
    bool any = e->shard_grads && e->has_grads;
    for (int i = 0; !e->shard_grads && i < e->n; i++) any = any || e->params[i]->grad != NULL;
    if (!any) return 0;
    if (agree_has_grad(e) || prepare_state(e, h)) return -1;
    for (int u = 0; u < e->nu; u++)
        for (int k = 0; k < e->units[u].nseg; k++) step_segment(e, &e->units[u], &e->units[u].segs[k], h);
    for (int i = 0; i < e->n; i++) e->steps[i] += stepping(e, i);
    e->st.steps++;
    if (!e->shard_params) return regather(e);
    shard_release_all(e);
    for (int u = 0; u < e->nu; u++) e->units[u].view->version++;
    return 0;
}

int shard_zero_grad(ShardEngine *e, bool set_to_none) {
    if (shard_finalize(e)) return -1;
    for (int i = 0; e->ddp && i < e->n; i++) {
        if (!set_to_none && e->params[i]->grad) { /* stage 1 keeps the full .grad: zeroed in place */
            if (tensor_fill_(e->params[i]->grad, 0) < 0) return -1;
            continue;
        }
        tensor_release(e->params[i]->grad);
        e->params[i]->grad = NULL;
    }
    for (int u = 0; u < e->nu; u++) { /* stages 2-3: freed; the next reduction makes it again */
        tensor_release(e->units[u].grad);
        e->units[u].grad = NULL;
        e->units[u].grad_dirty = false;
    }
    memset(e->has_grad, 0, (size_t)e->n);
    e->has_grads = false;
    return 0;
}

/* ---- full tensors ---- */

Tensor *shard_unit_shard(const ShardEngine *e, int u, int which) {
    const Unit *un = &e->units[u];
    if (which == 0) return un->master;
    if (which == -1) return un->grad;
    return which >= 1 && which <= N_STATE ? un->state[which - 1] : NULL;
}

/* A full tensor of parameter i must be contiguous float32 of its numel. */
static int check_full(const ShardEngine *e, int i, const Tensor *t) {
    if (t->numel != e->params[i]->numel || t->dtype != DT_F32 || !tensor_is_contiguous(t))
        return accel_fail_int("shard: a full tensor of parameter %d must be contiguous float32 with %lld elements, got %s "
                              "%s", i + 1, (long long)e->params[i]->numel, dtype_name(t->dtype), tensor_shape_str(t));
    return 0;
}

int shard_full_tensor(ShardEngine *e, int i, int which, Tensor *out) {
    Tensor *p = e->params[i];
    if (check_full(e, i, out)) return -1;
    if (which == 0 && !e->shard_params) return shard_copy(out, 0, p, 0, p->numel);
    int u = e->unit_of[i];
    Tensor *src = shard_unit_shard(e, u, which);
    if (!src) return accel_fail_int("shard: parameter %d has no optimizer state %d yet (no step was taken)", i + 1, which);
    int64_t off = shard_offset_of(e, i), from, *counts = accel_malloc(sizeof(int64_t) * (size_t)e->world);
    if (!counts) return -1;
    int64_t mine = shard_overlap(off, p->numel, e->units[u].shard, e->rank, &from), one = 1, n = p->numel;
    Tensor *in = tensor_as_strided(src, &mine, &one, 1, off + from - (int64_t)e->rank * e->units[u].shard);
    Tensor *o = in ? tensor_as_strided(out, &n, &one, 1, out->offset) : NULL;
    /* the lengths come from the ranks' agreement (dist_gather_lengths), so a
     * rank that is in another collective is a mismatch error at once, not a
     * gather that waits for the watchdog */
    int rc = o ? (dist_gather_lengths(e->comm, in, counts) || dist_all_gather_v(e->comm, o, in, counts)) : -1;
    tensor_release(in);
    tensor_release(o);
    free(counts);
    return rc;
}

int shard_load_full(ShardEngine *e, int i, int which, const Tensor *full) {
    if (check_full(e, i, full)) return -1;
    if (which < 0 || which > N_STATE) return accel_fail_int("shard: there is no shard %d to load", which);
    if (which > 0 && !e->kind_set)
        return accel_fail_int("shard: loading optimizer state needs the optimizer kind (shard_set_kind) first");
    if (which > 0 && ensure_slots(e, which)) return -1;
    Unit *un = &e->units[e->unit_of[i]];
    int64_t off = shard_offset_of(e, i), from, len = shard_overlap(off, full->numel, un->shard, e->rank, &from);
    Tensor *dst = shard_unit_shard(e, e->unit_of[i], which);
    if (shard_copy(dst, off + from - (int64_t)e->rank * un->shard, full, from, len)) return -1;
    if (which == 0 && un->holder->flat) {
        if (shard_copy(un->holder->flat, off, full, 0, full->numel)) return -1;
        un->view->version++;
    }
    return 0;
}

void shard_set_param_steps(ShardEngine *e, int i, int64_t steps) { e->steps[i] = steps; }


/* ---- device-side copies (shard_impl.h) ---- */

int shard_copy(Tensor *dst, int64_t doff, const Tensor *src, int64_t soff, int64_t n) {
    if (n <= 0) return 0;
    char *d = (char *)fdata(dst) + doff * (int64_t)sizeof(float); /* device addresses: arithmetic only */
    char *s = (char *)tensor_data(src) + soff * (int64_t)sizeof(float);
    const Backend *bd = backend_for(dst->device), *bs = backend_for(src->device);
    if (!bd || !bs) return -1;
    if (bd == bs && dst->device.index == src->device.index) {
        StridedIter it = {.nops = 2, .ndim = 1, .shape = {n}, .stride = {{1}, {1}}, .elsize = {sizeof(float), sizeof(float)},
                          .base = {d, s}};
        bd->copy(&it, DT_F32, DT_F32);
        return 0;
    }
    size_t nbytes = (size_t)n * sizeof(float);
    void *buf = accel_malloc(nbytes); /* between devices: to_host waits for src's queued work */
    int rc = !buf ? -1 : bs->to_host(buf, s, nbytes) || bd->from_host(d, buf, nbytes)
                             ? accel_fail_int("shard: copying %zu bytes from %s to %s failed", nbytes, bs->name, bd->name)
                             : 0;
    free(buf);
    return rc;
}
