/* dist.c: the communicator's generic layer (see dist.h): choosing and
 * initialising the world's backend, checking tensors, the per-kind call
 * counters, blocking and non-blocking calls (DistWork), avg as sum then
 * divide, byte-string helpers, and the end of the job.
 *
 * Decisions:
 * - initialisation is lazy (first dist_world call), so a script that never
 *   communicates never loads MPI's runtime; MPI_Init_thread runs only when
 *   a launcher started more than one process (or ACCEL_LUA_DIST_BACKEND=mpi).
 *   Ranks started by `accel-lua launch` also start it when they exit without
 *   having done so (host/rank.c), so that ranks waiting in MPI start-up for
 *   them do not wait forever;
 * - the end of an MPI job: an exit handler (glibc's on_exit, which sees the
 *   exit status) finalises MPI when the process exits with status 0, after
 *   waiting for collectives still in flight; any other status calls
 *   MPI_Abort, so a rank that failed ends the whole job at once instead of
 *   leaving the others blocked in their next collective;
 * - a DistWork freed while in flight (e.g. its Lua handle collected) is
 *   kept, with its buffers, until its completion is observed (by
 *   dist_progress or at exit), since MPI may still write into them;
 * - avg divides by the number of processes after the sum (x / size, as
 *   PyTorch's `t / world_size`), in float32 for bf16 / f16, on the
 *   tensor's device through its backend (an elementwise op, not autograd);
 * - device tensors (dist.h): a tensor the backend cannot take is staged
 *   after the agreement check, so a mismatch costs no copies: the input is
 *   copied to the host when the call starts (to_host waits for the
 *   device's queued work) and the output back when the call completes
 *   (from_host is queued in stream order); a non-blocking call owns its
 *   staging buffers until then. The staging is sized from the tensors,
 *   not pinned or cached (a CUDA build may pool pinned buffers here);
 * - agreement: before its data moves, every collective exchanges a small
 *   fixed-size header (kind, op, root, dtype, shape) with an all_gather and
 *   compares it across ranks, so a mismatch is one error, the same on every
 *   rank, naming the ranks and what each has, instead of MPI_ERR_TRUNCATE on
 *   one rank and a wrong result on another. The *_agreed forms skip it for
 *   buffers whose layout the ranks agreed on once (DDP buckets, checked at
 *   reducer creation), except in debug mode (ACCEL_LUA_DEBUG_MODE or
 *   ACCELERATE_DEBUG_MODE true), where every collective is checked. */
#include "dist.h"
#include "../autograd.h"
#include "../ops.h"
#include <stdbool.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- names ---- */

static const char *const kind_names[DK_COUNT] = {"all_reduce", "reduce_scatter", "all_gather", "all_gather_v",
                                                 "broadcast", "barrier", "all_gather_bytes", "broadcast_bytes"};
static const char *const op_names[DIST_OP_COUNT] = {"sum", "avg", "max", "min"};

const char *dist_kind_name(DistKind k) { return (unsigned)k < DK_COUNT ? kind_names[k] : "?"; }
const char *dist_op_name(DistOp op) { return (unsigned)op < DIST_OP_COUNT ? op_names[op] : "?"; }

int dist_op_parse(const char *s) {
    for (int i = 0; i < DIST_OP_COUNT; i++)
        if (strcmp(s, op_names[i]) == 0) return i;
    return strcmp(s, "mean") == 0 ? DIST_AVG : -1;
}

/* ---- counters ---- */

static DistStats stats;

void dist_stats(DistStats *out) { *out = stats; }
void dist_comm_stats(const DistComm *c, DistStats *out) { *out = c->stats; }

/* The process's counter and c's; the result numbers the call on c. */
static uint64_t count_call(DistComm *c, DistKind k, size_t bytes) {
    stats.bytes[k] += bytes;
    stats.calls[k]++;
    c->stats.bytes[k] += bytes;
    return ++c->stats.calls[k];
}

/* ---- the world ---- */

static DistComm world = {.label = "world"};
static int world_state; /* 0 not initialised, 1 ready, -1 failed */
static char world_err[512];
static pid_t world_pid;

static int env_int(const char *name, int *out) {
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    *out = atoi(s);
    return 1;
}

int dist_launched_size(int *rank, int *local_rank) {
    int n = 1, r = 0, lr = 0;
    if (env_int("OMPI_COMM_WORLD_SIZE", &n)) { /* mpirun */
        env_int("OMPI_COMM_WORLD_RANK", &r);
        env_int("OMPI_COMM_WORLD_LOCAL_RANK", &lr);
    } else if (getenv("SLURM_PROCID") && env_int("SLURM_STEP_NUM_TASKS", &n)) { /* srun (not a batch script) */
        env_int("SLURM_PROCID", &r);
        env_int("SLURM_LOCALID", &lr);
    }
    if (rank) *rank = r;
    if (local_rank) *local_rank = lr;
    return n > 1 ? n : 1;
}

int dist_is_initialized(void) { return world_state > 0; }

/* Every communicator's counters from zero. */
void dist_reset_stats(void) {
    memset(&stats, 0, sizeof stats);
    memset(&world.stats, 0, sizeof world.stats);
    for (DistComm *c = world.next_child; c; c = c->next_child) memset(&c->stats, 0, sizeof c->stats);
}

static void finish_job(void);

static void at_exit(int status, void *arg) {
    (void)arg;
    if (world_state <= 0 || getpid() != world_pid) return; /* not initialised, or a forked child */
    if (status != 0) {
        fprintf(stderr, "accel-lua: rank %d: exiting with status %d; ending the job\n", world.rank, status);
        dist_abort(&world, status);
    }
    dist_watch_finished(&world); /* a rank still waiting for this one fails now, saying why */
    for (DistComm *c = world.next_child; c; c = c->next_child) dist_watch_finished(c);
    finish_job();
}

/* ---- debug mode ---- */

static bool debug_mode;

/* name's value as a boolean (Accelerate's str_to_bool spellings) into *out;
 * unset leaves *out; anything else is an error. */
static int env_flag(const char *name, bool *out) {
    static const char *const yes[] = {"1", "true", "yes", "y", "t", "on"}, *const no[] = {"0", "false", "no", "n", "f", "off"};
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        if (strcasecmp(s, yes[i]) == 0) return *out = true, 0;
        if (strcasecmp(s, no[i]) == 0) return *out = false, 0;
    }
    return accel_fail_int("dist init: %s=%s is not a boolean (true/false, 1/0, yes/no, on/off)", name, s);
}

int dist_debug_mode(void) { return debug_mode; }

static int read_settings(void) {
    debug_mode = false;
    if (env_flag("ACCELERATE_DEBUG_MODE", &debug_mode) || env_flag("ACCEL_LUA_DEBUG_MODE", &debug_mode)) return -1;
    return dist_env_timeout() < 0 ? -1 : 0;
}

static int world_init(void) {
    if (read_settings()) return -1;
    int n = dist_launched_size(NULL, NULL);
    int use_mpi = n > 1;
    const char *forced = getenv("ACCEL_LUA_DIST_BACKEND");
    if (forced && *forced) {
        if (strcmp(forced, "single") != 0 && strcmp(forced, "mpi") != 0)
            return accel_fail_int("dist init: ACCEL_LUA_DIST_BACKEND=%s is not a backend (single, mpi)", forced);
        use_mpi = strcmp(forced, "mpi") == 0;
    }
    if (!use_mpi) {
        dist_single_init(&world);
        return 0;
    }
    if (dist_mpi_init(&world, n)) return -1;
    world_pid = getpid();
    on_exit(at_exit, NULL);
    return dist_watchdog_start(&world);
}

DistComm *dist_world(void) {
    if (world_state > 0) return &world;
    if (world_state < 0) return accel_fail("%s", world_err);
    if (world_init() == 0) {
        world_state = 1;
        return &world;
    }
    snprintf(world_err, sizeof world_err, "%s", accel_last_error());
    world_state = -1;
    return NULL;
}

void dist_abort(DistComm *c, int code) {
    c->ops->abort(c, code);
    exit(code);
}

/* ---- one collective call ---- */

typedef struct {
    DistKind kind;
    DType dt;
    DistOp op;             /* reductions; avg is summed by the backend, then divided */
    int root;
    int64_t n;             /* the backend's element count */
    const int64_t *counts; /* all_gather_v: elements per rank */
    void *out;
    const void *in;
    const Tensor *shape;   /* what the ranks must agree on (NULL: kind, op and root only) */
    bool agreed;           /* the layout was agreed beforehand: no header exchange outside debug mode */
    Tensor *dst;           /* tensor calls: the output (in place: the tensor), else NULL */
    const Tensor *src;     /* the input when it is not dst */
    void *stage_in, *stage_out; /* host staging of a device tensor (owned; the same buffer in place) */
} Coll;

static int launch(DistComm *c, const Coll *a, DistReq **req) {
    DistOp op = a->op == DIST_AVG ? DIST_SUM : a->op;
    switch (a->kind) {
    case DK_ALL_REDUCE: return c->ops->all_reduce(c, a->out, a->n, a->dt, op, req);
    case DK_REDUCE_SCATTER: return c->ops->reduce_scatter(c, a->in, a->out, a->n, a->dt, op, req);
    case DK_ALL_GATHER: return c->ops->all_gather(c, a->in, a->out, a->n, a->dt, req);
    case DK_ALL_GATHER_V: return c->ops->all_gather_v(c, a->in, a->out, a->counts, a->dt, req);
    case DK_BROADCAST: return c->ops->broadcast(c, a->out, a->n, a->dt, a->root, req);
    default: return c->ops->barrier(c, req);
    }
}

/* avg: t /= size on t's device (its backend's division: in t's dtype for
 * float32 / float64, in float32 rounded back for bf16 / f16, as PyTorch's
 * `t / world_size`). Not an autograd op. */
static int divide(Tensor *t, int size) {
    if (size == 1) return 0;
    bool prev = ag_set_grad_enabled(false);
    int rc = op_binary_scalar_(KB_DIV, t, size, true);
    ag_set_grad_enabled(prev);
    return rc;
}

/* ---- device tensors: direct or staged (see dist.h) ---- */

/* Whether c's backend reads and writes t's memory itself. */
static bool direct(const DistComm *c, const Tensor *t) {
    return tensor_host_ptr(t) || (c->ops->takes_device && c->ops->takes_device(c, t->device));
}

static void unstage(Coll *a) {
    if (a->stage_out != a->stage_in) free(a->stage_out);
    free(a->stage_in);
    a->stage_in = a->stage_out = NULL;
}

/* The backend's buffers for a tensor call, after the ranks agreed: the
 * tensors' own memory, or host copies (the input's values; the output's
 * room). */
static int bind_buffers(DistComm *c, Coll *a) {
    const Tensor *in = a->src ? a->src : a->dst;
    if (!a->dst) return 0;
    if (direct(c, a->dst)) {
        void *h = tensor_host_ptr(a->dst);
        a->out = h ? h : tensor_data(a->dst);
        a->in = a->src ? (tensor_host_ptr(a->src) ? tensor_host_ptr(a->src) : tensor_data(a->src)) : a->out;
        return 0;
    }
    size_t nin = (size_t)in->numel * dtype_size(in->dtype), nout = (size_t)a->dst->numel * dtype_size(a->dst->dtype);
    a->stage_in = accel_malloc(nin ? nin : 1);
    if (!a->stage_in || tensor_to_host(in, a->stage_in)) return unstage(a), -1;
    a->stage_out = a->src ? accel_malloc(nout ? nout : 1) : a->stage_in;
    if (!a->stage_out) return unstage(a), -1;
    a->in = a->stage_in;
    a->out = a->stage_out;
    return 0;
}

/* After the backend completed with rc: a staged output back to its device,
 * then avg's division. */
static int finish(DistComm *c, Coll *a, int rc) {
    if (rc == 0 && a->stage_out && tensor_from_host(a->dst, a->stage_out)) rc = -1;
    unstage(a);
    if (rc == 0 && a->dst && a->op == DIST_AVG && (a->kind == DK_ALL_REDUCE || a->kind == DK_REDUCE_SCATTER))
        rc = divide(a->dst, c->size);
    return rc;
}

/* A blocking call, watched as NAME #SEQ. */
static int run(DistComm *c, Coll *a, const char *name, uint64_t seq) {
    DistTrack t;
    dist_watch_begin(&t, c, name, seq);
    int rc = launch(c, a, NULL);
    dist_watch_end(&t);
    return finish(c, a, rc);
}

/* ---- non-blocking calls ---- */

struct DistWork {
    DistComm *comm;
    DistReq *req;
    DistTrack track;
    Coll call;
    Tensor *out, *in; /* referenced until completion (out until freed) */
    int state;        /* 0 in flight, 1 done, -1 failed */
    int orphan;       /* freed by its owner while in flight */
    char *err;
    DistWork *prev, *next; /* the works in flight */
};

static DistWork *live;

static void unlink_live(DistWork *w) {
    if (w->prev) w->prev->next = w->next;
    else live = w->next;
    if (w->next) w->next->prev = w->prev;
    w->prev = w->next = NULL;
}

static void work_destroy(DistWork *w) {
    tensor_release(w->out);
    tensor_release(w->in);
    free(w->err);
    free(w);
}

/* Records the outcome of a work whose request is gone. */
static int complete(DistWork *w, int rc) {
    dist_watch_end(&w->track);
    unlink_live(w);
    rc = finish(w->comm, &w->call, rc);
    w->state = rc ? -1 : 1;
    if (rc) w->err = strdup(accel_last_error());
    if (w->out && !rc) tensor_bump_version(w->out);
    tensor_release(w->in);
    w->in = NULL;
    if (w->orphan) work_destroy(w);
    return rc;
}

/* A staged call's buffers move into the work (freed at its completion). */
static DistWork *start(DistComm *c, Coll *a, Tensor *out, Tensor *in, uint64_t seq) {
    DistWork *w = accel_calloc(1, sizeof *w);
    if (!w) return unstage(a), NULL;
    w->comm = c;
    w->call = *a;
    w->call.counts = NULL; /* the backend copied them */
    dist_watch_begin(&w->track, c, dist_kind_name(a->kind), seq);
    if (launch(c, a, &w->req)) {
        dist_watch_end(&w->track);
        unstage(&w->call);
        free(w);
        return NULL;
    }
    w->out = out ? tensor_retain(out) : NULL;
    w->in = in && in != out ? tensor_retain(in) : NULL;
    w->next = live;
    if (live) live->prev = w;
    live = w;
    if (!w->req) complete(w, 0);
    return w;
}

static int failed(DistWork *w) { return accel_fail_int("%s", w->err ? w->err : "collective failed"); }

int dist_wait(DistWork *w) {
    if (w->state) return w->state > 0 ? 0 : failed(w);
    int rc = w->comm->ops->wait(w->comm, w->req, w->track.name);
    w->req = NULL;
    return complete(w, rc);
}

int dist_test(DistWork *w) {
    if (w->state) return w->state > 0 ? 1 : failed(w);
    int done = 0, rc = w->comm->ops->test(w->comm, w->req, &done, w->track.name);
    if (rc || done) {
        w->req = NULL;
        return complete(w, rc) ? -1 : 1;
    }
    return 0;
}

void dist_work_free(DistWork *w) {
    if (!w) return;
    if (w->state == 0 && dist_test(w) == 0) {
        w->orphan = 1;
        return;
    }
    work_destroy(w);
}

int dist_progress(DistComm *c) {
    int rc = 0;
    for (DistWork *w = live, *next; w; w = next) {
        next = w->next;
        if (w->comm == c && dist_test(w) < 0) rc = -1;
    }
    return rc;
}

static void free_children(void);

/* Status 0 at exit: complete what is in flight, then finalise. */
static void finish_job(void) {
    while (live) {
        DistWork *w = live;
        int orphan = w->orphan;
        if (dist_wait(w) && !orphan) fprintf(stderr, "accel-lua: rank %d: at exit: %s\n", world.rank, accel_last_error());
    }
    free_children();
    dist_watchdog_stop();
    if (world.ops->finalize(&world)) fprintf(stderr, "accel-lua: rank %d: at exit: %s\n", world.rank, accel_last_error());
}

/* ---- argument checks ---- */

static int check_tensor(const Tensor *t, const char *what) {
    if (!t) return accel_fail_int("%s: tensor expected", what);
    if (!tensor_is_contiguous(t)) return accel_fail_int("%s: tensor of shape %s must be contiguous (call :contiguous())", what, tensor_shape_str(t));
    return 0;
}

static int check_reduce(const Tensor *t, DistOp op, const char *what) {
    if ((int)op < 0 || op >= DIST_OP_COUNT) return accel_fail_int("%s: unknown reduction %d", what, (int)op);
    if (t->dtype == DT_F8E4M3 || t->dtype == DT_F8E5M2)
        return accel_fail_int("%s: %s tensors cannot be reduced (cast to float32 or bfloat16 first)", what, dtype_name(t->dtype));
    if (op == DIST_AVG && !dtype_is_float(t->dtype))
        return accel_fail_int("%s: avg needs a floating point tensor, got %s (use sum)", what, dtype_name(t->dtype));
    return 0;
}

/* out must be a distinct contiguous tensor of in's dtype and device with this shape. */
static int check_out(const Tensor *out, const Tensor *in, const int64_t *shape, int ndim, const char *what) {
    if (check_tensor(out, what) || tensor_check_device(what, in, out)) return -1;
    if (out->dtype != in->dtype)
        return accel_fail_int("%s: output dtype %s differs from the input's %s", what, dtype_name(out->dtype), dtype_name(in->dtype));
    if (shape_numel(shape, ndim) != out->numel) {
        char want[128];
        shape_str(shape, ndim, want, sizeof want);
        return accel_fail_int("%s: output of shape %s expected, got %s", what, want, tensor_shape_str(out));
    }
    if (out->storage == in->storage) return accel_fail_int("%s: the output must not share memory with the input", what);
    return 0;
}

static int check_root(DistComm *c, int root, const char *what) {
    if (root < 0 || root >= c->size)
        return accel_fail_int("%s: source rank %d does not exist (ranks 0..%d)", what, root, c->size - 1);
    return 0;
}

/* ---- agreement between ranks (see the top) ----
 * The header: kind, op (reductions), root (broadcasts), dtype, ndim, dims
 * (-1 where it does not apply). Every rank compares every other rank's
 * header with rank 0's, so all of them report the same first difference. */

enum { H_KIND, H_OP, H_ROOT, H_DTYPE, H_NDIM, H_DIMS, H_LEN = H_DIMS + TENSOR_MAX_DIMS };

static void fill_header(DistKind kind, const Coll *a, int64_t *h) {
    for (int i = 0; i < H_LEN; i++) h[i] = -1;
    h[H_KIND] = kind;
    if (kind == DK_ALL_REDUCE || kind == DK_REDUCE_SCATTER) h[H_OP] = a->op;
    if (kind == DK_BROADCAST || kind == DK_BROADCAST_BYTES) h[H_ROOT] = a->root;
    if (!a->shape) return;
    h[H_DTYPE] = a->shape->dtype;
    h[H_NDIM] = a->shape->ndim;
    for (int d = 0; d < a->shape->ndim; d++) h[H_DIMS + d] = a->shape->shape[d];
}

static int header_ndim(const int64_t *h) { return h[H_NDIM] < 0 || h[H_NDIM] > TENSOR_MAX_DIMS ? 0 : (int)h[H_NDIM]; }

void dist_desc_str(const int64_t *d, char *buf, size_t n) {
    char sh[160];
    shape_str(d + 2, d[1] < 0 || d[1] > TENSOR_MAX_DIMS ? 0 : (int)d[1], sh, sizeof sh);
    snprintf(buf, n, "%s %s", (unsigned)d[0] < DT_COUNT ? dtype_name((DType)d[0]) : "?", sh);
}

static void header_str(const int64_t *h, char *buf, size_t n) { dist_desc_str(h + H_DTYPE, buf, n); }

/* all_gather_v lets the first dim differ. */
static bool same_shape(const int64_t *a, const int64_t *b) {
    if (a[H_DTYPE] != b[H_DTYPE] || a[H_NDIM] != b[H_NDIM]) return false;
    for (int d = a[H_KIND] == DK_ALL_GATHER_V ? 1 : 0; d < header_ndim(a); d++)
        if (a[H_DIMS + d] != b[H_DIMS + d]) return false;
    return true;
}

/* " on the node communicator" off the world, else "". */
static void where_str(const DistComm *c, char *buf, size_t n) {
    if (!c->world_ranks) buf[0] = 0;
    else snprintf(buf, n, " on the %s communicator", c->label);
}

/* The collective's name and, off the world, its communicator. */
static void what_str(const DistComm *c, const char *kind, char *buf, size_t n) {
    char where[64];
    where_str(c, where, sizeof where);
    snprintf(buf, n, "%s%s", kind, where);
}

static int mismatch(const DistComm *c, const int64_t *h0, const int64_t *hq, int q) {
    char what[96], where[64], r0[48], rq[48];
    what_str(c, dist_kind_name((DistKind)h0[H_KIND]), what, sizeof what);
    where_str(c, where, sizeof where);
    dist_rank_str(c, 0, r0, sizeof r0);
    dist_rank_str(c, q, rq, sizeof rq);
    if (hq[H_KIND] != h0[H_KIND])
        return accel_fail_int("collective mismatch%s: %s called %s, %s called %s (every rank must issue the same "
                              "collectives in the same order)", where, r0,
                              dist_kind_name((DistKind)h0[H_KIND]), rq, dist_kind_name((DistKind)hq[H_KIND]));
    if (hq[H_OP] != h0[H_OP])
        return accel_fail_int("%s: %s reduces with %s, %s with %s", what, r0, dist_op_name((DistOp)h0[H_OP]), rq,
                              dist_op_name((DistOp)hq[H_OP]));
    if (hq[H_ROOT] != h0[H_ROOT])
        return accel_fail_int("%s: %s broadcasts from rank %lld, %s from rank %lld", what, r0, (long long)h0[H_ROOT],
                              rq, (long long)hq[H_ROOT]);
    char s0[192], sq[192];
    header_str(h0, s0, sizeof s0);
    header_str(hq, sq, sizeof sq);
    return accel_fail_int("%s: %s has %s, %s has %s%s", what, r0, s0, rq, sq,
                          h0[H_KIND] == DK_ALL_GATHER_V ? " (the dtype and every dim but the first must agree)" : "");
}

static int compare(DistComm *c, const int64_t *all) {
    for (int q = 1; q < c->size; q++) {
        const int64_t *hq = all + (size_t)q * H_LEN;
        if (hq[H_KIND] != all[H_KIND] || hq[H_OP] != all[H_OP] || hq[H_ROOT] != all[H_ROOT] || !same_shape(all, hq))
            return mismatch(c, all, hq, q);
    }
    return 0;
}

/* Every rank's header ([size * H_LEN], malloc'd), checked; NULL on a
 * mismatch or a failure. Watched as the collective NAME #SEQ. */
static int64_t *exchange(DistComm *c, DistKind kind, const Coll *a, uint64_t seq) {
    int64_t h[H_LEN], *all = accel_malloc(sizeof(int64_t) * H_LEN * (size_t)c->size);
    if (!all) return NULL;
    fill_header(kind, a, h);
    Coll x = {.kind = DK_ALL_GATHER, .dt = DT_I64, .n = H_LEN, .out = all, .in = h};
    if (run(c, &x, dist_kind_name(kind), seq) == 0 && compare(c, all) == 0) return all;
    free(all);
    return NULL;
}

static int agree(DistComm *c, DistKind kind, const Coll *a, uint64_t seq) {
    int64_t *all = exchange(c, kind, a, seq);
    if (!all) return -1;
    free(all);
    return 0;
}

/* ---- output shapes ---- */

int dist_all_gather_shape(DistComm *c, const Tensor *in, int64_t *shape, int *ndim) {
    if (in->ndim == 0) {
        shape[0] = c->size;
        *ndim = 1;
        return 0;
    }
    memcpy(shape, in->shape, sizeof(int64_t) * (size_t)in->ndim);
    shape[0] *= c->size;
    *ndim = in->ndim;
    return 0;
}

int dist_reduce_scatter_shape(DistComm *c, const Tensor *in, int64_t *shape, int *ndim) {
    if (in->ndim == 0 || in->shape[0] % c->size != 0)
        return accel_fail_int("reduce_scatter: the first dim of the input (shape %s) must be divisible by the %d processes",
                              tensor_shape_str(in), c->size);
    memcpy(shape, in->shape, sizeof(int64_t) * (size_t)in->ndim);
    shape[0] /= c->size;
    *ndim = in->ndim;
    return 0;
}

int dist_all_gather_v_shape(DistComm *c, const Tensor *in, const int64_t *counts, int64_t *shape, int *ndim) {
    if (in->ndim == 0) return accel_fail_int("all_gather_v: input must have at least one dim (got a 0-dim tensor; use all_gather)");
    memcpy(shape, in->shape, sizeof(int64_t) * (size_t)in->ndim);
    shape[0] = 0;
    for (int i = 0; i < c->size; i++) shape[0] += counts[i];
    *ndim = in->ndim;
    return 0;
}

/* ---- blocking and non-blocking collectives on tensors ----
 * Each prep_* checks its arguments and fills the call; the public pairs
 * then run it blocking or start it. */

static int prep_all_reduce(Tensor *t, DistOp op, Coll *a) {
    const char *what = "all_reduce";
    if (check_tensor(t, what) || check_reduce(t, op, what)) return -1;
    *a = (Coll){.kind = DK_ALL_REDUCE, .dt = t->dtype, .op = op, .n = t->numel, .dst = t, .shape = t};
    return 0;
}

static int prep_reduce_scatter(DistComm *c, Tensor *out, Tensor *in, DistOp op, Coll *a) {
    const char *what = "reduce_scatter";
    int64_t shape[TENSOR_MAX_DIMS];
    int nd;
    if (check_tensor(in, what) || check_reduce(in, op, what) || dist_reduce_scatter_shape(c, in, shape, &nd) ||
        check_out(out, in, shape, nd, what))
        return -1;
    *a = (Coll){.kind = DK_REDUCE_SCATTER, .dt = in->dtype, .op = op, .n = out->numel, .dst = out, .src = in, .shape = in};
    return 0;
}

static int prep_all_gather(DistComm *c, Tensor *out, Tensor *in, Coll *a) {
    const char *what = "all_gather";
    int64_t shape[TENSOR_MAX_DIMS];
    int nd;
    if (check_tensor(in, what) || dist_all_gather_shape(c, in, shape, &nd) || check_out(out, in, shape, nd, what)) return -1;
    *a = (Coll){.kind = DK_ALL_GATHER, .dt = in->dtype, .n = in->numel, .dst = out, .src = in, .shape = in};
    return 0;
}

/* counts (first-dim lengths) -> elements per rank in el[size]. */
static int prep_all_gather_v(DistComm *c, Tensor *out, Tensor *in, const int64_t *counts, int64_t *el, Coll *a) {
    const char *what = "all_gather_v";
    int64_t shape[TENSOR_MAX_DIMS];
    int nd;
    if (check_tensor(in, what) || dist_all_gather_v_shape(c, in, counts, shape, &nd) || check_out(out, in, shape, nd, what))
        return -1;
    if (counts[c->rank] != in->shape[0])
        return accel_fail_int("%s: this rank's count %lld differs from its input's first dim %lld", what,
                              (long long)counts[c->rank], (long long)in->shape[0]);
    int64_t row = shape_numel(in->shape + 1, in->ndim - 1);
    for (int i = 0; i < c->size; i++) {
        if (counts[i] < 0) return accel_fail_int("%s: negative count %lld for rank %d", what, (long long)counts[i], i);
        el[i] = counts[i] * row;
    }
    /* the ranks agreed in dist_gather_lengths, which gave the counts */
    *a = (Coll){.kind = DK_ALL_GATHER_V, .dt = in->dtype, .n = in->numel, .counts = el, .dst = out, .src = in, .shape = in,
                .agreed = true};
    return 0;
}

static int prep_broadcast(DistComm *c, Tensor *t, int root, Coll *a) {
    const char *what = "broadcast";
    if (check_tensor(t, what) || check_root(c, root, what)) return -1;
    *a = (Coll){.kind = DK_BROADCAST, .dt = t->dtype, .root = root, .n = t->numel, .dst = t, .shape = t};
    return 0;
}

static size_t call_bytes(const Coll *a) { return (size_t)a->n * dtype_size(a->dt); }

static int must_agree(const Coll *a) { return !a->agreed || debug_mode; }

/* Blocking: agree, bind the buffers, run, then mark the output written. */
static int run_tensor(DistComm *c, Coll *a, Tensor *out) {
    uint64_t seq = count_call(c, a->kind, call_bytes(a));
    if ((must_agree(a) && agree(c, a->kind, a, seq)) || bind_buffers(c, a)) return -1;
    int rc = run(c, a, dist_kind_name(a->kind), seq);
    if (rc == 0 && out) tensor_bump_version(out);
    return rc;
}

static DistWork *start_tensor(DistComm *c, Coll *a, Tensor *out, Tensor *in) {
    uint64_t seq = count_call(c, a->kind, call_bytes(a));
    if ((must_agree(a) && agree(c, a->kind, a, seq)) || bind_buffers(c, a)) return NULL;
    return start(c, a, out, in, seq);
}

int dist_all_reduce(DistComm *c, Tensor *t, DistOp op) {
    Coll a;
    return prep_all_reduce(t, op, &a) ? -1 : run_tensor(c, &a, t);
}

DistWork *dist_iall_reduce(DistComm *c, Tensor *t, DistOp op) {
    Coll a;
    return prep_all_reduce(t, op, &a) ? NULL : start_tensor(c, &a, t, NULL);
}

DistWork *dist_iall_reduce_agreed(DistComm *c, Tensor *t, DistOp op) {
    Coll a;
    if (prep_all_reduce(t, op, &a)) return NULL;
    a.agreed = true;
    return start_tensor(c, &a, t, NULL);
}

int dist_reduce_scatter(DistComm *c, Tensor *out, Tensor *in, DistOp op) {
    Coll a;
    return prep_reduce_scatter(c, out, in, op, &a) ? -1 : run_tensor(c, &a, out);
}

DistWork *dist_ireduce_scatter(DistComm *c, Tensor *out, Tensor *in, DistOp op) {
    Coll a;
    return prep_reduce_scatter(c, out, in, op, &a) ? NULL : start_tensor(c, &a, out, in);
}

int dist_all_gather(DistComm *c, Tensor *out, Tensor *in) {
    Coll a;
    return prep_all_gather(c, out, in, &a) ? -1 : run_tensor(c, &a, out);
}

DistWork *dist_iall_gather(DistComm *c, Tensor *out, Tensor *in) {
    Coll a;
    return prep_all_gather(c, out, in, &a) ? NULL : start_tensor(c, &a, out, in);
}

int dist_all_gather_v(DistComm *c, Tensor *out, Tensor *in, const int64_t *counts) {
    int64_t *el = accel_malloc(sizeof(int64_t) * (size_t)c->size);
    Coll a;
    int rc = !el || prep_all_gather_v(c, out, in, counts, el, &a) ? -1 : run_tensor(c, &a, out);
    free(el);
    return rc;
}

DistWork *dist_iall_gather_v(DistComm *c, Tensor *out, Tensor *in, const int64_t *counts) {
    int64_t *el = accel_malloc(sizeof(int64_t) * (size_t)c->size);
    Coll a;
    DistWork *w = !el || prep_all_gather_v(c, out, in, counts, el, &a) ? NULL : start_tensor(c, &a, out, in);
    free(el);
    return w;
}

int dist_broadcast(DistComm *c, Tensor *t, int root) {
    Coll a;
    return prep_broadcast(c, t, root, &a) ? -1 : run_tensor(c, &a, t);
}

DistWork *dist_ibroadcast(DistComm *c, Tensor *t, int root) {
    Coll a;
    return prep_broadcast(c, t, root, &a) ? NULL : start_tensor(c, &a, t, NULL);
}

int dist_barrier(DistComm *c) {
    Coll a = {.kind = DK_BARRIER};
    return run_tensor(c, &a, NULL);
}

DistWork *dist_ibarrier(DistComm *c) {
    Coll a = {.kind = DK_BARRIER};
    return start_tensor(c, &a, NULL, NULL);
}

/* Part of all_gather_v (its agreement): watched under its name, counted with its data. */
int dist_gather_lengths(DistComm *c, const Tensor *in, int64_t *counts) {
    const char *what = dist_kind_name(DK_ALL_GATHER_V);
    if (check_tensor(in, what)) return -1;
    if (in->ndim == 0) return accel_fail_int("%s: input must have at least one dim (got a 0-dim tensor; use all_gather)", what);
    Coll a = {.kind = DK_ALL_GATHER_V, .dt = in->dtype, .shape = in};
    int64_t *all = exchange(c, DK_ALL_GATHER_V, &a, c->stats.calls[DK_ALL_GATHER_V] + 1);
    if (!all) return -1;
    for (int i = 0; i < c->size; i++) counts[i] = all[(size_t)i * H_LEN + H_DIMS];
    free(all);
    return 0;
}

/* ---- byte strings ---- */

char *dist_all_gather_bytes(DistComm *c, const void *data, size_t n, size_t *lens) {
    const char *what = dist_kind_name(DK_ALL_GATHER_BYTES);
    uint64_t seq = count_call(c, DK_ALL_GATHER_BYTES, n);
    Coll h = {.kind = DK_ALL_GATHER_BYTES};
    if (agree(c, h.kind, &h, seq)) return NULL;
    int64_t len = (int64_t)n, total = 0, *counts = accel_malloc(sizeof(int64_t) * (size_t)c->size);
    if (!counts) return NULL;
    Coll a = {.kind = DK_ALL_GATHER, .dt = DT_I64, .n = 1, .out = counts, .in = &len};
    char *out = NULL;
    if (run(c, &a, what, seq) == 0) {
        for (int i = 0; i < c->size; i++) total += counts[i], lens[i] = (size_t)counts[i];
        out = accel_malloc((size_t)total + 1);
    }
    Coll b = {.kind = DK_ALL_GATHER_V, .dt = DT_U8, .n = len, .counts = counts, .out = out, .in = n ? data : ""};
    if (out && run(c, &b, what, seq)) {
        free(out);
        out = NULL;
    }
    free(counts);
    if (out) out[total] = 0;
    return out;
}

char *dist_broadcast_bytes(DistComm *c, const void *data, size_t n, int root, size_t *len) {
    const char *what = dist_kind_name(DK_BROADCAST_BYTES);
    if (check_root(c, root, what)) return NULL;
    uint64_t seq = count_call(c, DK_BROADCAST_BYTES, c->rank == root ? n : 0);
    Coll h = {.kind = DK_BROADCAST_BYTES, .root = root};
    if (agree(c, h.kind, &h, seq)) return NULL;
    int64_t m = c->rank == root ? (int64_t)n : 0;
    Coll a = {.kind = DK_BROADCAST, .dt = DT_I64, .root = root, .n = 1, .out = &m};
    if (run(c, &a, what, seq)) return NULL;
    char *out = accel_malloc((size_t)m + 1);
    if (!out) return NULL;
    if (c->rank == root && n) memcpy(out, data, n);
    Coll b = {.kind = DK_BROADCAST, .dt = DT_U8, .root = root, .n = m, .out = out};
    if (run(c, &b, what, seq)) {
        free(out);
        return NULL;
    }
    out[m] = 0;
    *len = (size_t)m;
    return out;
}

/* ---- sub-communicators (see dist.h) ---- */

int dist_comm_world_rank(const DistComm *c, int q) { return c->world_ranks ? c->world_ranks[q] : q; }

void dist_rank_str(const DistComm *c, int q, char *buf, size_t n) {
    if (c->world_ranks) snprintf(buf, n, "rank %d (world rank %d)", q, c->world_ranks[q]);
    else snprintf(buf, n, "rank %d", q);
}

int dist_test_ranks_per_node(int world_size) {
    const char *s = getenv("ACCEL_LUA_TEST_RANKS_PER_NODE");
    if (!s || !*s) return 0;
    char *end;
    long k = strtol(s, &end, 10);
    if (*end != 0 || k < 1 || k > world_size || world_size % k != 0)
        return accel_fail_int("ACCEL_LUA_TEST_RANKS_PER_NODE=%s: a testing knob that must be a positive integer "
                              "dividing the %d processes (it groups consecutive ranks into machines of that many)",
                              s, world_size);
    return (int)k;
}

/* Each member's world rank into c->world_ranks (one all_gather on c). */
static int learn_world_ranks(DistComm *c, int my_world_rank, uint64_t seq) {
    int32_t me = my_world_rank, *all = accel_malloc(sizeof(int32_t) * (size_t)c->size);
    if (!all) return -1;
    Coll a = {.kind = DK_ALL_GATHER, .dt = DT_I32, .n = 1, .out = all, .in = &me};
    if (run(c, &a, "split", seq)) return free(all), -1;
    c->world_ranks = accel_malloc(sizeof(int) * (size_t)c->size);
    if (!c->world_ranks) return free(all), -1;
    for (int q = 0; q < c->size; q++) c->world_ranks[q] = all[q];
    free(all);
    return 0;
}

static void destroy_comm(DistComm *c) {
    dist_watch_detach(c);
    if (c->impl && c->ops->comm_free && c->ops->comm_free(c))
        fprintf(stderr, "accel-lua: rank %d: %s\n", world.rank, accel_last_error());
    free(c->world_ranks);
    free(c);
}

static DistComm *split_as(DistComm *parent, int color, int key, const char *label) {
    static uint64_t splits;
    if (color < 0) return accel_fail("dist_split: color must be >= 0, got %d", color);
    if (!parent->ops->split) return accel_fail("dist_split: the %s backend cannot split a communicator", parent->ops->name);
    DistComm *c = accel_calloc(1, sizeof *c);
    if (!c) return NULL;
    DistTrack t;
    uint64_t seq = ++splits;
    dist_watch_begin(&t, parent, "split", seq);
    int rc = parent->ops->split(parent, color, key, c);
    dist_watch_end(&t);
    c->ops = parent->ops;
    c->label = label;
    c->local_rank = parent->local_rank;
    c->local_size = parent->local_size;
    if (rc || learn_world_ranks(c, dist_comm_world_rank(parent, parent->rank), seq)) {
        destroy_comm(c);
        return NULL;
    }
    dist_watch_attach(c);
    c->next_child = world.next_child;
    world.next_child = c;
    return c;
}

DistComm *dist_split(DistComm *parent, int color, int key) { return split_as(parent, color, key, "split"); }

/* The machine of each rank: the index of the first rank with its host
 * name (or of its group under ACCEL_LUA_TEST_RANKS_PER_NODE). */
static int node_color(DistComm *w, int *color) {
    int k = dist_test_ranks_per_node(w->size);
    if (k < 0) return -1;
    if (k > 0) {
        *color = w->rank / k;
        return 0;
    }
    char host[256] = {0};
    if (gethostname(host, sizeof host - 1)) return accel_fail_int("dist_node_comm: gethostname failed");
    size_t *lens = accel_malloc(sizeof(size_t) * (size_t)w->size), mine = strlen(host);
    char *all = lens ? dist_all_gather_bytes(w, host, mine, lens) : NULL;
    if (!all) return free(lens), -1;
    size_t at = 0;
    *color = w->rank;
    for (int q = 0; q < w->size; at += lens[q], q++)
        if (lens[q] == mine && memcmp(all + at, host, mine) == 0) {
            *color = q;
            break;
        }
    free(all);
    free(lens);
    return 0;
}

static int check_world(const DistComm *w, const char *what) {
    if (w->world_ranks) return accel_fail_int("%s: takes the world communicator, got the %s communicator", what, w->label);
    return 0;
}

DistComm *dist_node_comm(DistComm *w) {
    int color;
    if (w->node) return w->node;
    if (check_world(w, "dist_node_comm") || node_color(w, &color)) return NULL;
    w->node = split_as(w, color, w->rank, "node");
    return w->node;
}

DistComm *dist_cross_node_comm(DistComm *w) {
    if (w->cross) return w->cross;
    if (check_world(w, "dist_cross_node_comm")) return NULL;
    DistComm *node = dist_node_comm(w);
    if (!node) return NULL;
    w->cross = split_as(w, node->rank, w->rank, "cross-node");
    return w->cross;
}

/* Completes c's collectives in flight (MPI forbids freeing under them). */
static int drain(DistComm *c) {
    int rc = 0;
    for (DistWork *w = live, *next; w; w = next) {
        next = w->next;
        if (w->comm == c && dist_wait(w)) rc = -1;
    }
    return rc;
}

int dist_comm_free(DistComm *c) {
    if (!c) return 0;
    if (c == &world || c == world.node || c == world.cross)
        return accel_fail_int("dist_comm_free: the %s communicator belongs to the job (only dist_split's can be freed)",
                              c->label);
    DistComm **p = &world.next_child;
    while (*p && *p != c) p = &(*p)->next_child;
    if (!*p) return 0; /* freed already (at the end of the job) */
    int rc = drain(c);
    *p = c->next_child;
    destroy_comm(c);
    return rc;
}

static void free_children(void) {
    while (world.next_child) {
        DistComm *c = world.next_child;
        world.next_child = c->next_child;
        destroy_comm(c);
    }
    world.node = world.cross = NULL;
}
