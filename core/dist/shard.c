/* shard.c: the sharding engine (see shard.h): unit layout and flat
 * buffers, parameter views, the stage 2-3 gradient hook and ordered
 * reduce-scatters, stage 3 gathers / releases, creation and teardown. The
 * optimizer step, clipping, unscaling and full tensors are shard_step.c. */
#include "shard_impl.h"
#include "../autograd.h"
#include "ddp.h"
#include "../ops.h"
#include <stdlib.h>
#include <string.h>

/* ---- layout arithmetic ---- */

int64_t shard_len(int64_t numel, int world) { return (numel + world - 1) / world; }

int64_t shard_overlap(int64_t off, int64_t len, int64_t shard, int rank, int64_t *from) {
    int64_t lo = (int64_t)rank * shard, hi = lo + shard;
    int64_t b = off > lo ? off : lo, end = off + len < hi ? off + len : hi;
    *from = b - off;
    return end > b ? end - b : 0;
}

int shard_segments(int n, const int64_t *offsets, const int64_t *numels, int64_t shard, int rank, ShardSeg *out) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        int64_t from, len = shard_overlap(offsets[i], numels[i], shard, rank, &from);
        if (len == 0) continue;
        out[k++] = (ShardSeg){.slot = i, .at = offsets[i] + from - (int64_t)rank * shard, .from = from, .len = len};
    }
    return k;
}

static ShardEngine *live_head;
static uint64_t live_ids;

static ShardEngine *find_live(uint64_t id) {
    for (ShardEngine *e = live_head; e; e = e->live_next)
        if (e->id == id) return e;
    return NULL;
}

static void note_error(ShardEngine *e, const char *msg) {
    if (!e->error) e->error = strdup(msg);
}

/* The first error noted during backward, raised once. */
static int raise_noted(ShardEngine *e) {
    if (!e->error) return 0;
    accel_fail("%s", e->error);
    free(e->error);
    e->error = NULL;
    return -1;
}

/* ---- the order log (tests) ---- */

int shard_trace_start(ShardEngine *e, int cap) {
    free(e->trace);
    e->trace = cap > 0 ? accel_malloc(sizeof(ShardEvent) * (size_t)cap) : NULL;
    e->ntrace = 0;
    e->trace_cap = e->trace ? cap : 0;
    return cap > 0 && !e->trace ? -1 : 0;
}

const ShardEvent *shard_trace(const ShardEngine *e, int *n) {
    *n = e->ntrace;
    return e->trace;
}

static void trace(ShardEngine *e, ShardEventKind kind, int u) {
    if (e->ntrace < e->trace_cap) e->trace[e->ntrace++] = (ShardEvent){kind, u};
}

/* ---- gathered / released parameter memory ---- */

static void holder_free(void *data, size_t nbytes, void *ud) {
    Holder *h = ud;
    (void)data, (void)nbytes;
    tensor_release(h->flat);
    free(h);
}

bool shard_storage_released(const Storage *s) {
    return s && s->borrowed && s->on_free == holder_free && s->data == NULL;
}

/* The unit's buffer becomes flat (NULL: released). */
static void set_flat(Unit *un, Tensor *flat) {
    tensor_release(un->holder->flat);
    un->holder->flat = flat;
    un->view->data = flat ? tensor_data(flat) : NULL;
    un->view->nbytes = flat ? (size_t)flat->numel * sizeof(float) : 0;
}

/* A gathered buffer becomes the unit's (rc: the gather's result; on a
 * failure the buffer is dropped). */
static int adopt(ShardEngine *e, Unit *un, Tensor *flat, int rc) {
    if (rc) {
        tensor_release(flat);
        return -1;
    }
    set_flat(un, flat);
    e->st.gathers++;
    return 0;
}

/* Completes unit un's prefetch: its buffer becomes the unit's. */
static int finish_prefetch(ShardEngine *e, Unit *un) {
    int rc = dist_wait(un->gwork);
    dist_work_free(un->gwork);
    un->gwork = NULL;
    Tensor *flat = un->next_flat;
    un->next_flat = NULL;
    return adopt(e, un, flat, rc);
}

int shard_unit_gather(ShardEngine *e, int u) {
    Unit *un = &e->units[u];
    if (un->gwork) return finish_prefetch(e, un);
    if (un->holder->flat) return 0;
    Tensor *flat = flat_f32(e, un->padded, false);
    if (!flat) return -1;
    trace(e, SHARD_EV_GATHER, u);
    return adopt(e, un, flat, dist_all_gather(e->comm, flat, un->master));
}

/* Starts unit u's all-gather into next_flat (not when gathered or under way). */
static int issue_prefetch(ShardEngine *e, int u) {
    Unit *un = &e->units[u];
    if (un->holder->flat || un->gwork) return 0;
    if (!(un->next_flat = flat_f32(e, un->padded, false))) return -1;
    trace(e, SHARD_EV_GATHER, u);
    un->gwork = dist_iall_gather(e->comm, un->next_flat, un->master);
    if (!un->gwork) {
        tensor_release(un->next_flat);
        un->next_flat = NULL;
        return -1;
    }
    e->st.prefetches++;
    return 0;
}

int shard_unit_prefetch(ShardEngine *e, int u) {
    Unit *un = &e->units[u];
    if (!e->shard_params || (e->active && un->pending == 0)) return 0;
    return issue_prefetch(e, u);
}

/* MPI advances the prefetches in flight only inside MPI calls. */
static int progress(ShardEngine *e) { return e->shard_params ? dist_progress(e->comm) : 0; }

void shard_forward_begin(ShardEngine *e) { e->last_fwd = -1; }

/* Records u as following the unit before it; with forward prefetch starts
 * the unit that followed u in the previous forward. */
int shard_unit_forward(ShardEngine *e, int u) {
    Unit *un = &e->units[u];
    int next = un->fwd_next;
    un->fwd_prev = e->last_fwd;
    if (e->last_fwd >= 0) e->units[e->last_fwd].fwd_next = u;
    e->last_fwd = u;
    trace(e, SHARD_EV_FORWARD, u);
    if (shard_unit_gather(e, u)) return -1;
    if (e->shard_params && e->fwd_prefetch && next >= 0 && next != u) {
        uint64_t before = e->st.prefetches;
        if (issue_prefetch(e, next)) return -1;
        e->st.forward_prefetches += e->st.prefetches - before;
    }
    return progress(e);
}

int shard_unit_release(ShardEngine *e, int u) {
    Unit *un = &e->units[u];
    if (!e->shard_params) return 0;
    if (un->gwork && finish_prefetch(e, un)) return -1;
    if (!un->holder->flat) return 0;
    set_flat(un, NULL);
    e->st.releases++;
    trace(e, SHARD_EV_RELEASE, u);
    return progress(e);
}

bool shard_unit_gathered(const ShardEngine *e, int u) { return e->units[u].holder->flat != NULL; }

void shard_release_all(ShardEngine *e) {
    for (int u = 0; u < e->nu; u++) shard_unit_release(e, u);
}

/* ---- building a unit ---- */

static void contiguous_strides(Tensor *p) {
    int64_t s = 1;
    for (int d = p->ndim - 1; d >= 0; d--) {
        p->stride[d] = s;
        s *= p->shape[d];
    }
}

/* p's values into its slice of flat. */
static int pack_param(Tensor *flat, Tensor *p, int64_t off) {
    int64_t stride[TENSOR_MAX_DIMS], s = 1;
    for (int d = p->ndim - 1; d >= 0; d--) stride[d] = s, s *= p->shape[d];
    Tensor *slice = tensor_as_strided(flat, p->shape, stride, p->ndim, off);
    if (!slice) return -1;
    int rc = tensor_copy_(slice, p);
    tensor_release(slice);
    return rc;
}

/* The unit's parameters (engine order), offsets and shard segments. */
static int plan_unit(ShardEngine *e, int u) {
    Unit *un = &e->units[u];
    for (int i = 0; i < e->n; i++) un->n += e->unit_of[i] == u;
    if (un->n == 0) return accel_fail_int("shard: wrap unit %d has no parameters", u + 1);
    un->params = accel_malloc(sizeof(int) * (size_t)un->n);
    un->offsets = accel_malloc(sizeof(int64_t) * (size_t)un->n);
    int64_t *numels = accel_malloc(sizeof(int64_t) * (size_t)un->n);
    un->segs = accel_malloc(sizeof(ShardSeg) * (size_t)un->n);
    if (!un->params || !un->offsets || !numels || !un->segs) return free(numels), -1;
    int k = 0;
    for (int i = 0; i < e->n; i++) {
        if (e->unit_of[i] != u) continue;
        un->params[k] = i;
        un->offsets[k] = un->numel;
        numels[k++] = e->params[i]->numel;
        un->numel += e->params[i]->numel;
    }
    un->fwd_prev = un->fwd_next = -1;
    un->shard = shard_len(un->numel, e->world);
    un->padded = un->shard * e->world;
    un->nseg = shard_segments(un->n, un->offsets, numels, un->shard, e->rank, un->segs);
    free(numels);
    if (un->padded > INT32_MAX)
        return accel_fail_int("shard: wrap unit %d holds %lld elements, more than one collective carries (2^31-1); "
                              "wrap smaller units", u + 1, (long long)un->padded);
    return 0;
}

/* The parameters become views into the unit's storage. */
static void repoint(ShardEngine *e, Unit *un) {
    for (int k = 0; k < un->n; k++) {
        Tensor *p = e->params[un->params[k]];
        storage_release(p->storage);
        p->storage = un->view;
        un->view->refcount++;
        p->offset = un->offsets[k];
        contiguous_strides(p);
    }
}

static int build_unit(ShardEngine *e, int u, bool broadcast) {
    Unit *un = &e->units[u];
    if (plan_unit(e, u)) return -1;
    Tensor *flat = flat_f32(e, un->padded, true);
    if (!flat) return -1;
    int rc = 0;
    for (int k = 0; k < un->n && rc == 0; k++) rc = pack_param(flat, e->params[un->params[k]], un->offsets[k]);
    if (rc == 0 && broadcast) rc = dist_broadcast(e->comm, flat, 0);
    if (rc == 0 && broadcast && e->cross) rc = dist_broadcast(e->cross, flat, 0);
    un->master = rc == 0 ? flat_f32(e, un->shard, false) : NULL;
    un->holder = un->master ? calloc(1, sizeof *un->holder) : NULL;
    if (un->holder) un->view = storage_wrap(tensor_data(flat), (size_t)flat->numel * sizeof(float), flat->device,
                                            holder_free, un->holder);
    if (!un->view) {
        tensor_release(flat);
        free(un->holder);
        un->holder = NULL;
        return rc == 0 && un->master ? accel_fail_int("out of memory building shard unit %d", u + 1) : -1;
    }
    un->holder->flat = flat;
    if (shard_copy(un->master, 0, flat, (int64_t)e->rank * un->shard, un->shard)) return -1;
    repoint(e, un);
    return shard_unit_release(e, u);
}

/* ---- stage 2-3: the gradient hook and the reductions ---- */

static int finish_pass(ShardEngine *e, bool release);
static void reap(ShardEngine *e);

/* Reduce-scatters the unit's gradient: straight into the gradient shard
 * when that holds nothing yet (made here: zero_grad frees it), else into a
 * temporary added at settle. */
static int start_reduction(ShardEngine *e, Unit *un) {
    un->launched = true;
    if (!un->grad_dirty && !un->grad && !(un->grad = flat_f32(e, un->shard, false))) return -1;
    if (un->grad_dirty && !(un->gtmp = flat_f32(e, un->shard, false))) return -1;
    un->work = dist_ireduce_scatter(e->comm, un->gtmp ? un->gtmp : un->grad, un->gfull, DIST_AVG);
    un->grad_dirty = true;
    e->st.reductions++;
    return un->work ? 0 : -1;
}

/* Starts every complete unit's reduction, in decreasing unit order. */
static void launch_ready(ShardEngine *e, bool early) {
    while (e->next >= 0 && e->units[e->next].pending == 0) {
        if (start_reduction(e, &e->units[e->next])) note_error(e, accel_last_error());
        if (early) e->st.early++;
        e->next--;
    }
}

static void begin_pass(ShardEngine *e, uint32_t pass) {
    e->active = true;
    e->pass = pass;
    e->next = e->nu - 1;
    for (int i = 0; i < e->n; i++) e->reported[i] = false;
    for (int u = 0; u < e->nu; u++) e->units[u].pending = e->units[u].n, e->units[u].launched = false;
}

/* Parameter i's gradient (zeros without one) into its unit's flat buffer;
 * .grad is dropped. */
static int take_grad(ShardEngine *e, int i, int64_t off) {
    Unit *un = &e->units[e->unit_of[i]];
    Tensor *p = e->params[i], *g = p->grad;
    if (!un->gfull && !(un->gfull = flat_f32(e, un->padded, true))) return -1;
    e->reported[i] = true;
    un->pending--;
    if (!g) return 0;
    e->has_grad[i] = 1;
    int rc = g->numel != p->numel ? accel_fail_int("shard: the gradient of a parameter of shape %s has shape %s",
                                                   tensor_shape_str(p), tensor_shape_str(g))
                                  : pack_param(un->gfull, g, off);
    tensor_release(g);
    p->grad = NULL;
    return rc;
}

int64_t shard_offset_of(const ShardEngine *e, int i) {
    const Unit *un = &e->units[e->unit_of[i]];
    for (int k = 0; k < un->n; k++)
        if (un->params[k] == i) return un->offsets[k];
    return 0;
}

static void on_grad(Tensor *p, void *ud) {
    Hook *h = ud;
    ShardEngine *e = h->e;
    uint32_t pass = ag_backward_pass();
    (void)p;
    if (e->active && pass != e->pass && finish_pass(e, false)) note_error(e, accel_last_error());
    if (!e->active) begin_pass(e, pass);
    if (e->reported[h->i]) return;
    if (take_grad(e, h->i, shard_offset_of(e, h->i))) note_error(e, accel_last_error());
    int u = e->unit_of[h->i];
    if (e->units[u].pending == 0) shard_unit_release(e, u);
    launch_ready(e, true);
    if (dist_progress(e->comm)) note_error(e, accel_last_error());
    reap(e);
}

/* Waits for unit un's reduction (if one is in flight), adds it into the
 * gradient shard (on its device) and frees the full buffer. */
static int settle_unit(Unit *un) {
    if (!un->work) return 0;
    int rc = dist_wait(un->work);
    dist_work_free(un->work);
    un->work = NULL;
    if (rc == 0 && un->gtmp) rc = op_binary_(KB_ADD, un->grad, un->gtmp);
    tensor_release(un->gtmp);
    tensor_release(un->gfull);
    un->gtmp = un->gfull = NULL;
    return rc;
}

/* At most SHARD_IN_FLIGHT reductions stay in flight during backward (the
 * full gradient buffers they hold bound the memory); finished ones are
 * settled at once. */
#define SHARD_IN_FLIGHT 2

static void reap(ShardEngine *e) {
    int in_flight = 0;
    for (int u = e->nu - 1; u > e->next; u--) {
        Unit *un = &e->units[u];
        if (un->work && dist_test(un->work) != 0 && settle_unit(un)) note_error(e, accel_last_error());
        in_flight += un->work != NULL;
    }
    for (int u = e->nu - 1; u > e->next && in_flight > SHARD_IN_FLIGHT; u--) {
        if (!e->units[u].work) continue;
        if (settle_unit(&e->units[u])) note_error(e, accel_last_error());
        in_flight--;
    }
}

/* Parameters that got no gradient in the pass contribute .grad or zeros. */
static void fill_missing(ShardEngine *e) {
    for (int i = 0; i < e->n; i++)
        if (!e->reported[i] && take_grad(e, i, shard_offset_of(e, i))) note_error(e, accel_last_error());
}

/* HYBRID: every gradient shard averaged over the other machines' copies. */
static int reduce_replicas(ShardEngine *e) {
    for (int u = 0; u < e->nu; u++)
        if (dist_all_reduce(e->cross, e->units[u].grad, DIST_AVG)) return -1;
    return 0;
}

/* Completes the pass; release: stage 3 frees every unit afterwards (not
 * when a new pass starts, whose units may be gathered already). */
static int finish_pass(ShardEngine *e, bool release) {
    if (e->ddp) return ddp_finalize(e->ddp);
    if (!e->active) return 0;
    e->active = false; /* a hook during the waits below starts a new pass */
    fill_missing(e);
    launch_ready(e, false);
    int rc = 0;
    for (int u = e->nu - 1; u >= 0; u--)
        if (settle_unit(&e->units[u]) && rc == 0) rc = -1;
    if (rc == 0 && e->cross && e->sync) rc = reduce_replicas(e);
    if (rc) note_error(e, accel_last_error());
    if (release && e->shard_params) shard_release_all(e);
    e->has_grads = true;
    return raise_noted(e);
}

int shard_finalize(ShardEngine *e) { return finish_pass(e, true); }

int shard_gather_all(ShardEngine *e) {
    if (shard_finalize(e)) return -1;
    for (int u = 0; u < e->nu; u++)
        if (shard_unit_gather(e, u)) return -1;
    return 0;
}

/* ---- stage 3: gather before backward ---- */

/* Before unit u's backward: gather it; with prefetch, start gathering the
 * unit whose forward ran before u's (whose backward comes next). */
static int pre_backward_fn(AGNode *n, Tensor *gout, Tensor **gin) {
    ShardEngine *e = find_live((uint64_t)n->i[0]);
    int u = (int)n->i[1];
    if (e) trace(e, SHARD_EV_BACKWARD, u);
    if (e && shard_unit_gather(e, u)) return -1;
    if (e && e->prefetch && e->units[u].fwd_prev >= 0 && shard_unit_prefetch(e, e->units[u].fwd_prev)) return -1;
    gin[0] = tensor_retain(gout);
    return 0;
}

Tensor *shard_pre_backward(ShardEngine *e, int u, Tensor *out) {
    if (!ag_grad_enabled() || !out->requires_grad || !e->shard_params) return tensor_retain(out);
    Tensor *r = tensor_detach(out);
    if (!r) return NULL;
    AGNode *node = ag_record("ShardPreBackward", pre_backward_fn, r, &out, 1);
    if (node) {
        node->i[0] = (int64_t)e->id;
        node->i[1] = u;
    }
    return r;
}

/* ---- creation and teardown ---- */

static int check_params(Tensor **params, int n, const int *unit_of, int n_units) {
    for (int i = 0; i < n; i++) {
        Tensor *p = params[i];
        if (p->dtype != DT_F32 || p->grad_fn || !p->requires_grad)
            return accel_fail_int("shard: parameter %d must be a float32 leaf that requires grad, got %s", i + 1,
                                  dtype_name(p->dtype));
        if (!device_same(p->device, params[0]->device)) {
            char d0[32], di[32];
            return accel_fail_int("shard: parameter %d is on %s, parameter 1 on %s (the engine's parameters must be on "
                                  "one device)", i + 1, device_str(p->device, di, sizeof di),
                                  device_str(params[0]->device, d0, sizeof d0));
        }
        if (p->grad_hook) return accel_fail_int("shard: parameter %d is already hooked (by DDP or another engine)", i + 1);
        if (unit_of[i] < 0 || unit_of[i] >= n_units)
            return accel_fail_int("shard: parameter %d's unit %d is not in 1..%d", i + 1, unit_of[i] + 1, n_units);
        for (int j = 0; j < i; j++)
            if (params[j] == p) return accel_fail_int("shard: parameter %d is parameter %d again", i + 1, j + 1);
    }
    return 0;
}

int shard_stage_flags(int stage, bool *grads, bool *params) {
    if (stage < 1 || stage > 3)
        return accel_fail_int("shard: stage must be 1, 2 or 3, got %d (stage 0 is plain DDP)", stage);
    *grads = stage >= 2;
    *params = stage >= 3;
    return 0;
}

static int set_stage(ShardEngine *e, int stage) {
    e->stage = stage;
    return shard_stage_flags(stage, &e->shard_grads, &e->shard_params);
}

static int alloc_engine(ShardEngine *e, Tensor **params, int n, const int *unit_of, int n_units) {
    e->n = n;
    e->nu = n_units;
    e->params = accel_malloc(sizeof(Tensor *) * (size_t)n);
    e->unit_of = accel_malloc(sizeof(int) * (size_t)n);
    e->reported = calloc((size_t)n, sizeof(bool));
    e->has_grad = calloc((size_t)n, 1);
    e->steps = calloc((size_t)n, sizeof(int64_t));
    e->hooks = calloc((size_t)n, sizeof(Hook));
    e->units = calloc((size_t)n_units, sizeof(Unit));
    if (!e->params || !e->unit_of || !e->reported || !e->has_grad || !e->steps || !e->hooks || !e->units)
        return accel_fail_int("out of memory creating the shard engine");
    for (int i = 0; i < n; i++) e->params[i] = tensor_retain(params[i]), e->unit_of[i] = unit_of[i];
    return 0;
}

static int install_hooks(ShardEngine *e, double cap) {
    if (!e->shard_grads) {
        /* find_unused: a parameter without a gradient on every rank keeps .grad
         * nil and is not stepped, as under DDP (and stages 2-3) */
        DdpOptions o = {.bucket_cap_mb = cap, .align = 1, .find_unused = true, .finalize_at_pass_end = true};
        e->ddp = ddp_reducer_new(e->comm, e->params, e->n, &o);
        return e->ddp ? 0 : -1;
    }
    for (int i = 0; i < e->n; i++) {
        e->hooks[i] = (Hook){e, i};
        e->params[i]->grad_hook = on_grad;
        e->params[i]->grad_hook_ud = &e->hooks[i];
    }
    return 0;
}

ShardEngine *shard_engine_new(DistComm *c, Tensor **params, int n, const int *unit_of, int n_units,
                              const ShardOptions *o) {
    if (n < 1 || n_units < 1) return accel_fail("shard: the engine needs parameters and at least one wrap unit");
    if (check_params(params, n, unit_of, n_units)) return NULL;
    if (o->replicate && o->stage < 2)
        return accel_fail("shard: HYBRID sharding needs stage 2 (HYBRID_SHARD_ZERO2) or 3 (HYBRID_SHARD), got stage %d",
                          o->stage);
    ShardEngine *e = calloc(1, sizeof *e);
    if (!e) return accel_fail("out of memory creating the shard engine");
    e->comm = c;
    e->cross = o->replicate;
    e->rank = c->rank;
    e->world = c->size;
    e->dev = params[0]->device;
    e->offload = o->offload_optimizer;
    e->prefetch = o->backward_prefetch;
    e->fwd_prefetch = o->forward_prefetch;
    e->last_fwd = -1;
    e->sync = true;
    int rc = set_stage(e, o->stage);
    if (rc == 0) rc = alloc_engine(e, params, n, unit_of, n_units);
    for (int u = 0; rc == 0 && u < n_units; u++) rc = build_unit(e, u, o->broadcast);
    if (rc == 0) rc = install_hooks(e, o->bucket_cap_mb);
    if (rc) {
        shard_engine_free(e);
        return NULL;
    }
    e->id = ++live_ids;
    e->live_next = live_head;
    live_head = e;
    e->st.units = n_units;
    e->st.params = n;
    return e;
}

static void unlink_live(ShardEngine *e) {
    for (ShardEngine **p = &live_head; *p; p = &(*p)->live_next)
        if (*p == e) {
            *p = e->live_next;
            return;
        }
}

static void free_unit(Unit *un) {
    if (un->work) dist_wait(un->work);
    dist_work_free(un->work);
    if (un->gwork) dist_wait(un->gwork);
    dist_work_free(un->gwork);
    tensor_release(un->next_flat);
    tensor_release(un->gtmp);
    tensor_release(un->gfull);
    tensor_release(un->master);
    tensor_release(un->grad);
    for (int s = 0; s < N_STATE; s++) tensor_release(un->state[s]);
    if (un->view) storage_release(un->view);
    free(un->params);
    free(un->offsets);
    free(un->segs);
}

void shard_engine_free(ShardEngine *e) {
    if (!e) return;
    unlink_live(e);
    ddp_reducer_free(e->ddp);
    for (int i = 0; e->params && i < e->n; i++) {
        if (!e->params[i]) continue;
        if (e->params[i]->grad_hook == on_grad) e->params[i]->grad_hook = NULL, e->params[i]->grad_hook_ud = NULL;
        tensor_release(e->params[i]);
    }
    for (int u = 0; e->units && u < e->nu; u++) free_unit(&e->units[u]);
    free(e->units);
    free(e->params);
    free(e->unit_of);
    free(e->reported);
    free(e->has_grad);
    free(e->steps);
    free(e->hooks);
    free(e->error);
    free(e->trace);
    free(e);
}

/* ---- accessors ---- */

int shard_stage(const ShardEngine *e) { return e->stage; }
void shard_set_sync(ShardEngine *e, bool on) {
    e->sync = on;
    if (e->ddp) ddp_set_sync(e->ddp, on);
}
int shard_num_units(const ShardEngine *e) { return e->nu; }
int shard_num_params(const ShardEngine *e) { return e->n; }
Tensor *shard_param(const ShardEngine *e, int i) { return e->params[i]; }
int64_t shard_param_steps(const ShardEngine *e, int i) { return e->steps[i]; }
int shard_rank(const ShardEngine *e) { return e->rank; }
int shard_world(const ShardEngine *e) { return e->world; }
int shard_replicas(const ShardEngine *e, int *replica) {
    *replica = e->cross ? e->cross->rank : 0;
    return e->cross ? e->cross->size : 1;
}
bool shard_offload(const ShardEngine *e) { return e->offload; }
void shard_stats(const ShardEngine *e, ShardStats *out) { *out = e->st; }
Tensor *shard_host_view(ShardEngine *e, Tensor *shard) {
    (void)e; /* offload plan: shards live on the host already in the CPU build */
    return shard;
}

void shard_unit_info(const ShardEngine *e, int u, int *n, const int **params, const int64_t **offsets, int64_t *numel,
                     int64_t *padded, int64_t *shard) {
    const Unit *un = &e->units[u];
    *n = un->n;
    *params = un->params;
    *offsets = un->offsets;
    *numel = un->numel;
    *padded = un->padded;
    *shard = un->shard;
}

/* ---- HYBRID's communicators ---- */

/* The largest and the smallest node size over the world (one all_reduce). */
static int node_sizes(DistComm *world, int size, int64_t *most, int64_t *least) {
    int64_t two = 2;
    Tensor *t = tensor_empty(&two, 1, DT_I64, (Device){DEV_CPU, 0});
    if (!t) return -1;
    int64_t v[2] = {size, -size};
    int rc = tensor_from_host(t, v) || dist_all_reduce(world, t, DIST_MAX) || tensor_to_host(t, v) ? -1 : 0;
    *most = v[0], *least = -v[1];
    tensor_release(t);
    return rc;
}

int shard_hybrid_comms(DistComm *world, DistComm **node, DistComm **cross) {
    *node = dist_node_comm(world);
    *cross = *node ? dist_cross_node_comm(world) : NULL;
    if (!*cross) return -1;
    if ((*node)->size == world->size)
        return accel_fail_int("shard: HYBRID_SHARD shards inside a machine and replicates across machines, but all %d "
                              "process(es) of this job run on one machine: use FULL_SHARD / SHARD_GRAD_OP there, or "
                              "launch on several machines (tests can fake machines of k ranks with "
                              "ACCEL_LUA_TEST_RANKS_PER_NODE=k)", world->size);
    int64_t most, least;
    if (node_sizes(world, (*node)->size, &most, &least)) return -1;
    if (most != least)
        return accel_fail_int("shard: HYBRID_SHARD needs the same number of processes on every machine; this job's "
                              "machines run between %lld and %lld", (long long)least, (long long)most);
    return 0;
}
