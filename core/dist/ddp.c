/* ddp.c: DDP's gradient reducer (see ddp.h): bucket layout, the gradient
 * hook, bucket launches in index order, finalize, and the default
 * all_reduce (avg) + copy-back reduction. */
#include "ddp.h"
#include "../autograd.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    DdpReducer *r;
    Tensor *param;
    Tensor *slice; /* the parameter's part of its bucket, shaped like it */
    int bucket;
    int64_t offset;
    bool ready; /* slice filled for this step */
} Slot;

typedef struct {
    Tensor *flat;
    int n;
    int *params;
    int64_t *offsets;
    int64_t numel;
    DType dtype;
    int pending; /* slices still to fill this step */
    DistWork *work;
} Bucket;

struct DdpReducer {
    DistComm *comm;
    int n, nb;
    Slot *slots;
    Bucket *buckets;
    DdpReduceOps ops;
    bool sync, active, find_unused, finalize_at_pass_end;
    uint32_t pass; /* the backward pass that started this step */
    int next;      /* the next bucket to start */
    Tensor *used;  /* find_unused: [n] uint8, "has a gradient", max over ranks */
    uint8_t *used_host; /* its values on the host (this rank's before, every rank's after the reduction) */
    DistWork *used_work;
    char *error; /* the first failure during backward, raised by finalize */
    DdpStats stats;
};

static const DdpReduceOps default_ops = {ddp_start_allreduce, ddp_copy_back, NULL};

/* ---- errors noted inside the hook (which cannot fail) ---- */

static void note_error(DdpReducer *r, const char *msg) {
    if (!r->error) r->error = strdup(msg);
}

/* ---- layout ---- */

/* The first bucket of each dtype (the last parameters, whose gradients
 * backward makes first) is capped lower, as PyTorch's DDP does (1 MiB), so
 * that its all-reduce starts early in backward instead of waiting for a
 * quarter of a large model's gradients. */
#define DDP_FIRST_BUCKET_BYTES (1024.0 * 1024.0)

/* Assigns each parameter its bucket and offset (reverse registration
 * order, one open bucket per dtype, cap in bytes, the first one per dtype
 * at most DDP_FIRST_BUCKET_BYTES); returns the number of buckets and fills
 * numel[] / dtype[] per bucket. */
static int plan(DdpReducer *r, double cap, int64_t *numel, DType *dtype) {
    int open[DT_COUNT], nb = 0;
    bool first[DT_COUNT];
    for (int d = 0; d < DT_COUNT; d++) open[d] = -1, first[d] = true;
    for (int i = r->n - 1; i >= 0; i--) {
        Tensor *p = r->slots[i].param;
        size_t es = dtype_size(p->dtype);
        int b = open[p->dtype];
        double limit = first[p->dtype] && cap > DDP_FIRST_BUCKET_BYTES ? DDP_FIRST_BUCKET_BYTES : cap;
        if (b >= 0 && numel[b] > 0 && (double)(numel[b] + p->numel) * (double)es > limit) {
            b = -1;
            first[p->dtype] = false;
        }
        if (b < 0) {
            b = open[p->dtype] = nb++;
            numel[b] = 0;
            dtype[b] = p->dtype;
        }
        r->slots[i].bucket = b;
        r->slots[i].offset = numel[b];
        numel[b] += p->numel;
    }
    return nb;
}

static Tensor *slice_of(Tensor *flat, const Tensor *p, int64_t offset) {
    int64_t stride[TENSOR_MAX_DIMS], s = 1;
    for (int d = p->ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= p->shape[d];
    }
    return tensor_as_strided(flat, p->shape, stride, p->ndim, offset);
}

/* Buffers, slices and per-bucket parameter lists (slice order). */
static int build(DdpReducer *r, const int64_t *numel, const DType *dtype, int64_t align) {
    for (int b = 0; b < r->nb; b++) {
        Bucket *bk = &r->buckets[b];
        int64_t padded = align > 1 ? (numel[b] + align - 1) / align * align : numel[b];
        if (padded > INT_MAX)
            return accel_fail_int("ddp: bucket %d holds %lld elements, more than one collective carries (2^31-1); "
                                  "lower bucket_cap_mb", b, (long long)padded);
        bk->numel = numel[b];
        bk->dtype = dtype[b];
        bk->flat = tensor_zeros(&padded, 1, dtype[b], r->slots[0].param->device);
        if (!bk->flat) return -1;
    }
    for (int i = r->n - 1; i >= 0; i--) {
        Slot *s = &r->slots[i];
        Bucket *bk = &r->buckets[s->bucket];
        if (!bk->params) {
            int count = 0;
            for (int j = 0; j < r->n; j++) count += r->slots[j].bucket == s->bucket;
            bk->params = accel_malloc(sizeof(int) * (size_t)count);
            bk->offsets = accel_malloc(sizeof(int64_t) * (size_t)count);
            if (!bk->params || !bk->offsets) return -1;
        }
        bk->params[bk->n] = i;
        bk->offsets[bk->n++] = s->offset;
        s->slice = slice_of(bk->flat, s->param, s->offset);
        if (!s->slice) return -1;
    }
    return 0;
}

/* ---- the hook and the launches ---- */

/* The parameter's current gradient (zeros without one) into its slice. */
static int fill(Slot *s) {
    Tensor *g = s->param->grad;
    if (!g) return tensor_fill_(s->slice, 0.0);
    if (g->numel != s->slice->numel)
        return accel_fail_int("ddp: the gradient of a parameter of shape %s has shape %s", tensor_shape_str(s->param),
                              tensor_shape_str(g));
    if (g->dtype == s->slice->dtype && tensor_is_contiguous(g)) {
        tensor_copy_flat(s->slice, g);
        return 0;
    }
    return tensor_copy_(s->slice, g);
}

static void mark_ready(DdpReducer *r, Slot *s) {
    s->ready = true;
    r->buckets[s->bucket].pending--;
}

/* Starts every bucket whose slices are all filled, in index order. */
static void launch_ready(DdpReducer *r, bool late) {
    while (r->next < r->nb && r->buckets[r->next].pending == 0) {
        Bucket *bk = &r->buckets[r->next];
        bk->work = r->ops.start(r, r->next, r->ops.ud);
        if (!bk->work) note_error(r, accel_last_error());
        if (late) r->stats.late_launches++;
        else r->stats.early_launches++;
        r->next++;
    }
}

static int finish_step_at_pass_end(void *ud) { return ddp_finalize(ud); }

static void begin_step(DdpReducer *r, uint32_t pass) {
    if (r->finalize_at_pass_end && ag_queue_pass_end(finish_step_at_pass_end, r)) note_error(r, accel_last_error());
    r->active = true;
    r->pass = pass;
    r->next = 0;
    for (int i = 0; i < r->n; i++) r->slots[i].ready = false;
    for (int b = 0; b < r->nb; b++) r->buckets[b].pending = r->buckets[b].n;
}

/* Tensor.grad_hook: the parameter's gradient of this pass is complete. */
static void on_grad(Tensor *p, void *ud) {
    Slot *s = ud;
    DdpReducer *r = s->r;
    (void)p;
    if (!r->sync) return;
    uint32_t pass = ag_backward_pass();
    if (!r->active) begin_step(r, pass);
    else if (pass != r->pass) {
        note_error(r, "ddp: the model's parameters received gradients from two backward passes in one synchronising "
                      "step; gradients are synchronised once per backward: call accelerator:backward(loss) once per "
                      "forward, sum the losses first, or run the other passes under accelerator:no_sync(model, fn)");
        return;
    }
    if (s->ready) return;
    if (fill(s)) note_error(r, accel_last_error());
    mark_ready(r, s);
    r->stats.hook_calls++;
    launch_ready(r, false);
    if (dist_progress(r->comm)) note_error(r, accel_last_error());
}

/* ---- the default reduction ---- */

DistWork *ddp_start_allreduce(DdpReducer *r, int b, void *ud) {
    (void)ud;
    return dist_iall_reduce_agreed(r->comm, r->buckets[b].flat, DIST_AVG);
}

static bool used_anywhere(const DdpReducer *r, int i) {
    return !r->used || r->used_host[i] != 0;
}

/* The bucket's slices back into .grad (a new .grad where there was none). */
int ddp_copy_back(DdpReducer *r, int b, void *ud) {
    (void)ud;
    Bucket *bk = &r->buckets[b];
    for (int k = 0; k < bk->n; k++) {
        Slot *s = &r->slots[bk->params[k]];
        Tensor *g = s->param->grad;
        if (!used_anywhere(r, bk->params[k])) continue;
        if (!g && !s->param->requires_grad) continue; /* frozen after the reducer was made */
        if (!g) {
            g = tensor_empty(s->param->shape, s->param->ndim, s->param->dtype, s->param->device);
            if (!g) return -1;
            s->param->grad = g;
        }
        if (g->dtype == bk->dtype && tensor_is_contiguous(g)) {
            tensor_copy_flat(g, s->slice);
            tensor_bump_version(g);
        } else if (tensor_copy_(g, s->slice)) {
            return -1;
        }
    }
    return 0;
}

/* ---- finalize ---- */

/* Waits for work w (NULL: failed to start) and frees it; 0 or -1. */
static int settle(DistWork *w) {
    if (!w) return -1;
    int rc = dist_wait(w);
    dist_work_free(w);
    return rc;
}

static int start_used_flags(DdpReducer *r) {
    for (int i = 0; i < r->n; i++) r->used_host[i] = r->slots[i].param->grad != NULL;
    if (tensor_from_host(r->used, r->used_host)) return -1;
    r->used_work = dist_iall_reduce_agreed(r->comm, r->used, DIST_MAX);
    return r->used_work ? 0 : -1;
}

int ddp_finalize(DdpReducer *r) {
    if (!r->active) return 0;
    for (int b = r->next; b < r->nb; b++) {
        Bucket *bk = &r->buckets[b];
        for (int k = 0; k < bk->n; k++) {
            Slot *s = &r->slots[bk->params[k]];
            if (s->ready) continue;
            if (fill(s)) note_error(r, accel_last_error());
            mark_ready(r, s);
            r->stats.missing++;
        }
    }
    launch_ready(r, true);
    if (r->used && (start_used_flags(r) || settle(r->used_work) || tensor_to_host(r->used, r->used_host)))
        note_error(r, accel_last_error());
    r->used_work = NULL;
    for (int b = 0; b < r->nb; b++) {
        Bucket *bk = &r->buckets[b];
        int failed = settle(bk->work);
        bk->work = NULL;
        if (failed || r->ops.finish(r, b, r->ops.ud)) note_error(r, accel_last_error());
    }
    r->active = false;
    r->stats.syncs++;
    if (!r->error) return 0;
    accel_fail_int("%s", r->error);
    free(r->error);
    r->error = NULL;
    return -1;
}

/* ---- join: a rank without data shadows a step ---- */

int ddp_shadow_step(DdpReducer *r) {
    if (r->active) return accel_fail_int("ddp: a joined rank cannot shadow a step while its own step is in progress");
    for (int b = 0; b < r->nb; b++) {
        Bucket *bk = &r->buckets[b];
        if (tensor_fill_(bk->flat, 0.0)) return -1;
        bk->work = r->ops.start(r, b, r->ops.ud);
        if (!bk->work) note_error(r, accel_last_error());
    }
    if (r->used) {
        tensor_fill_(r->used, 0.0);
        r->used_work = dist_iall_reduce_agreed(r->comm, r->used, DIST_MAX);
        if (settle(r->used_work)) note_error(r, accel_last_error());
        r->used_work = NULL;
    }
    for (int b = 0; b < r->nb; b++) {
        if (settle(r->buckets[b].work)) note_error(r, accel_last_error());
        r->buckets[b].work = NULL;
    }
    if (!r->error) return 0;
    accel_fail_int("%s", r->error);
    free(r->error);
    r->error = NULL;
    return -1;
}


/* ---- lifetime ---- */

static int install_hooks(DdpReducer *r) {
    for (int i = 0; i < r->n; i++) {
        Tensor *p = r->slots[i].param;
        if (p->grad_hook == on_grad)
            return accel_fail_int("ddp: parameter %d of shape %s is listed twice or already has a reducer", i + 1,
                                  tensor_shape_str(p));
        if (p->grad_hook)
            return accel_fail_int("ddp: parameter %d of shape %s already has a gradient hook", i + 1, tensor_shape_str(p));
        p->grad_hook = on_grad;
        p->grad_hook_ud = &r->slots[i];
    }
    return 0;
}

static int check_params(Tensor **params, int n) {
    if (n < 1) return accel_fail_int("ddp: no parameters that require grad");
    for (int i = 0; i < n; i++) {
        Tensor *p = params[i];
        if (!p->requires_grad || p->grad_fn)
            return accel_fail_int("ddp: parameter %d (shape %s) is not a leaf tensor that requires grad", i + 1,
                                  tensor_shape_str(p));
        if (!dtype_is_float(p->dtype) || p->dtype == DT_F8E4M3 || p->dtype == DT_F8E5M2)
            return accel_fail_int("ddp: parameter %d has dtype %s; gradients are reduced in float32, float64, bfloat16 "
                                  "or float16", i + 1, dtype_name(p->dtype));
        if (!device_same(p->device, params[0]->device))
            return accel_fail_int("ddp: parameters on different devices (parameter %d)", i + 1);
    }
    return 0;
}

/* ---- agreement on the layout (once, at creation) ---- */

/* Every rank's vals[n] into a malloc'd [size * n] (a checked all_gather). */
static int64_t *gather_i64(DistComm *c, const int64_t *vals, int64_t n) {
    Device cpu = {DEV_CPU, 0};
    int64_t total = n * c->size;
    Tensor *in = tensor_empty(&n, 1, DT_I64, cpu), *out = tensor_empty(&total, 1, DT_I64, cpu);
    int64_t *res = in && out ? accel_malloc(sizeof(int64_t) * (size_t)total) : NULL;
    if (res) {
        if (tensor_from_host(in, vals) || dist_all_gather(c, out, in) || tensor_to_host(out, res)) free(res), res = NULL;
    }
    tensor_release(in);
    tensor_release(out);
    return res;
}

#define PARAM_DESC (2 + TENSOR_MAX_DIMS) /* dtype, ndim, dims */

static int counts_differ(DdpReducer *r, const int64_t *all) {
    for (int q = 1; q < r->comm->size; q++) {
        if (all[2 * q] != all[0])
            return accel_fail_int("ddp: rank 0's model has %lld parameters that require grad, rank %d's has %lld (every "
                                  "rank must prepare the same model)", (long long)all[0], q, (long long)all[2 * q]);
        if (all[2 * q + 1] != all[1])
            return accel_fail_int("ddp: rank 0 packs the gradients into %lld buckets, rank %d into %lld (bucket_cap_mb "
                                  "must be the same on every rank)", (long long)all[1], q, (long long)all[2 * q + 1]);
    }
    return 0;
}

/* The first parameter, then bucket, whose description differs from rank 0's. */
static int layout_differs(DdpReducer *r, const int64_t *all, int64_t len) {
    char a[192], b[192];
    for (int i = 0; i < r->n; i++)
        for (int q = 1; q < r->comm->size; q++) {
            const int64_t *d0 = all + (int64_t)i * PARAM_DESC, *dq = d0 + q * len;
            if (memcmp(d0, dq, sizeof(int64_t) * PARAM_DESC) == 0) continue;
            dist_desc_str(d0, a, sizeof a);
            dist_desc_str(dq, b, sizeof b);
            return accel_fail_int("ddp: parameter %d (of the %d that require grad, in registration order) is %s on rank 0 "
                                  "but %s on rank %d (every rank must prepare the same model)", i + 1, r->n, a, b, q);
        }
    for (int k = 0; k < r->nb; k++)
        for (int q = 1; q < r->comm->size; q++) {
            int64_t at = (int64_t)r->n * PARAM_DESC + k;
            if (all[at] != all[at + q * len])
                return accel_fail_int("ddp: bucket %d holds %lld elements on rank 0, %lld on rank %d (bucket_cap_mb must be "
                                      "the same on every rank)", k + 1, (long long)all[at], (long long)all[at + q * len], q);
        }
    return 0;
}

/* Every rank has the same parameters (dtype, shape, order) and buckets. */
static int agree_layout(DdpReducer *r) {
    if (r->comm->size == 1) return 0;
    int64_t head[2] = {r->n, r->nb}, len = (int64_t)r->n * PARAM_DESC + r->nb;
    int64_t *all = gather_i64(r->comm, head, 2);
    int rc = !all || counts_differ(r, all) ? -1 : 0;
    free(all);
    int64_t *mine = rc ? NULL : accel_malloc(sizeof(int64_t) * (size_t)len);
    if (!mine) return -1;
    for (int i = 0; i < r->n; i++) {
        const Tensor *p = r->slots[i].param;
        int64_t *d = mine + (int64_t)i * PARAM_DESC;
        for (int k = 0; k < PARAM_DESC; k++) d[k] = k < 2 + p->ndim ? 0 : -1;
        d[0] = p->dtype;
        d[1] = p->ndim;
        memcpy(d + 2, p->shape, sizeof(int64_t) * (size_t)p->ndim);
    }
    for (int k = 0; k < r->nb; k++) mine[(int64_t)r->n * PARAM_DESC + k] = r->buckets[k].flat->numel;
    all = gather_i64(r->comm, mine, len);
    rc = !all || layout_differs(r, all, len) ? -1 : 0;
    free(all);
    free(mine);
    return rc;
}

DdpReducer *ddp_reducer_new(DistComm *c, Tensor **params, int n, const DdpOptions *o) {
    if (check_params(params, n)) return NULL;
    DdpReducer *r = accel_calloc(1, sizeof *r);
    if (!r) return NULL;
    r->comm = c;
    r->n = n;
    r->ops = default_ops;
    r->sync = true;
    r->find_unused = o && o->find_unused;
    r->finalize_at_pass_end = o && o->finalize_at_pass_end;
    r->slots = accel_calloc((size_t)n, sizeof *r->slots);
    int64_t *numel = accel_malloc(sizeof(int64_t) * (size_t)n);
    DType *dtype = accel_malloc(sizeof(DType) * (size_t)n);
    int rc = !r->slots || !numel || !dtype ? -1 : 0;
    for (int i = 0; rc == 0 && i < n; i++) r->slots[i] = (Slot){.r = r, .param = tensor_retain(params[i]), .bucket = -1};
    if (rc == 0) {
        double mb = o && o->bucket_cap_mb > 0 ? o->bucket_cap_mb : 25.0;
        r->nb = plan(r, mb * 1024.0 * 1024.0, numel, dtype);
        r->buckets = accel_calloc((size_t)r->nb, sizeof *r->buckets);
        rc = !r->buckets || build(r, numel, dtype, o ? o->align : 1) ? -1 : 0;
    }
    if (rc == 0 && r->find_unused) {
        int64_t len = n;
        r->used = tensor_zeros(&len, 1, DT_U8, (Device){DEV_CPU, 0});
        r->used_host = accel_calloc((size_t)n, 1);
        if (!r->used || !r->used_host) rc = -1;
    }
    if (rc == 0) rc = agree_layout(r);
    if (rc == 0) rc = install_hooks(r);
    free(numel);
    free(dtype);
    if (rc == 0) return r;
    ddp_reducer_free(r);
    return NULL;
}

void ddp_reducer_free(DdpReducer *r) {
    if (!r) return;
    for (int b = 0; r->buckets && b < r->nb; b++) {
        Bucket *bk = &r->buckets[b];
        if (bk->work) settle(bk->work);
        tensor_release(bk->flat);
        free(bk->params);
        free(bk->offsets);
    }
    for (int i = 0; r->slots && i < r->n; i++) {
        Slot *s = &r->slots[i];
        if (!s->param) continue;
        if (s->param->grad_hook == on_grad && s->param->grad_hook_ud == s) {
            s->param->grad_hook = NULL;
            s->param->grad_hook_ud = NULL;
        }
        tensor_release(s->slice);
        tensor_release(s->param);
    }
    tensor_release(r->used);
    free(r->used_host);
    free(r->buckets);
    free(r->slots);
    free(r->error);
    free(r);
}

/* ---- accessors ---- */

void ddp_set_reduce_ops(DdpReducer *r, const DdpReduceOps *ops) { r->ops = ops ? *ops : default_ops; }
void ddp_set_sync(DdpReducer *r, bool on) { r->sync = on; }
bool ddp_sync(const DdpReducer *r) { return r->sync; }
bool ddp_active(const DdpReducer *r) { return r->active; }
int ddp_num_params(const DdpReducer *r) { return r->n; }
Tensor *ddp_param(const DdpReducer *r, int i) { return r->slots[i].param; }
int ddp_num_buckets(const DdpReducer *r) { return r->nb; }
Tensor *ddp_slice(const DdpReducer *r, int i) { return r->slots[i].slice; }
DistComm *ddp_comm(const DdpReducer *r) { return r->comm; }
void ddp_stats(const DdpReducer *r, DdpStats *out) { *out = r->stats; }

void ddp_bucket_info(const DdpReducer *r, int b, DdpBucketInfo *out) {
    const Bucket *bk = &r->buckets[b];
    *out = (DdpBucketInfo){.n_params = bk->n, .params = bk->params, .offsets = bk->offsets, .numel = bk->numel,
                           .padded = bk->flat->numel, .dtype = bk->dtype, .flat = bk->flat};
}
