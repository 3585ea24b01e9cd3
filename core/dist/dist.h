/* dist.h: the communicator (DESIGN §4): collectives over the processes of
 * one job, usable from C without Lua. One interface, several backends, each
 * a struct of function pointers over raw buffers (like backend.h):
 *   "single"  one process: every collective is the identity (or a copy);
 *   "mpi"     OpenMPI, host buffers (dist_mpi.c; how jobs are launched is
 *             described at its top).
 * Tensors on a device whose memory the host cannot address (sim, cuda) are
 * staged: the input is copied to a host buffer when the call starts (the
 * copy waits for the device's queued work), the backend works on host
 * buffers, and the result is copied back to the device when the call
 * completes (queued in stream order, so later work on the tensor sees it).
 * A backend that takes device memory itself (takes_device, the NCCL path)
 * gets the device pointers instead. avg's division runs on the tensor's
 * device through its backend.
 * The tensor-level functions below validate their arguments (one device,
 * contiguous, dtypes, equal sizes), count every call per kind, watch every
 * call with the watchdog (dist_watchdog.c), check that every rank called
 * the same collective with the same dtype, shape, op and root (one small
 * all_gather of a fixed-size header; a mismatch fails on every rank with
 * the same message naming the ranks, e.g. "all_reduce: rank 0 has float32
 * [2, 3], rank 1 has float32 [3, 2]") and then call the backend. The check
 * is blocking, also for the non-blocking forms.
 *
 * Semantics shared by all backends:
 * - ranks are 0-based; the world is every process of the job, and
 *   sub-communicators (dist_split, below) are groups of its processes;
 * - reductions: sum, avg, max, min. avg = sum, then divided by the number of
 *   processes (floating dtypes only). bool: sum and max are logical or, min
 *   is logical and. bf16 / f16 are carried as raw 16-bit values and reduced
 *   by our own MPI operations that widen each pair to float32 and round the
 *   result back (one rounding per addition, as NCCL does). float8 tensors
 *   can be gathered and broadcast but not reduced (cast them first);
 * - all_gather concatenates along the first dim in rank order (a 0-dim
 *   input gives a [world] tensor); all_gather_v does the same with a first
 *   dim that may differ per rank (the other dims must agree);
 * - reduce_scatter: input [world * d0, ...] -> this rank's [d0, ...] slice
 *   of the reduction;
 * - non-blocking forms return a DistWork to wait on; the buffers stay
 *   referenced until it completes; every collective must be issued in the
 *   same order on every rank (MPI's rule);
 * - counts are element counts; MPI carries at most 2^31-1 per call.
 * Functions that can fail return -1 / NULL with accel_last_error() set. */
#ifndef ACCEL_DIST_H
#define ACCEL_DIST_H

#include <stdint.h>
#include "../tensor.h"

typedef enum { DIST_SUM = 0, DIST_AVG, DIST_MAX, DIST_MIN, DIST_OP_COUNT } DistOp;

/* Collective kinds, for the per-kind call counters and the watchdog. */
typedef enum {
    DK_ALL_REDUCE = 0,
    DK_REDUCE_SCATTER,
    DK_ALL_GATHER,
    DK_ALL_GATHER_V,
    DK_BROADCAST,
    DK_BARRIER,
    DK_ALL_GATHER_BYTES,
    DK_BROADCAST_BYTES,
    DK_COUNT
} DistKind;

typedef struct DistComm DistComm;
typedef struct DistReq DistReq; /* a backend's operation in flight */

/* A backend. Buffers are raw memory of the backend's device; n counts
 * elements. Each operation is blocking when req is NULL; otherwise it starts
 * the operation and stores a request in *req (or NULL when it finished at
 * once). Reductions never see DIST_AVG (the generic layer sums, then
 * scales), nor fp8 dtypes. wait/test complete and free the request. */
typedef struct DistBackendOps {
    const char *name;
    int (*all_reduce)(DistComm *c, void *buf, int64_t n, DType dt, DistOp op, DistReq **req);
    /* in: [size * n], out: [n] */
    int (*reduce_scatter)(DistComm *c, const void *in, void *out, int64_t n, DType dt, DistOp op, DistReq **req);
    /* in: [n], out: [size * n] */
    int (*all_gather)(DistComm *c, const void *in, void *out, int64_t n, DType dt, DistReq **req);
    /* in: [counts[rank]], out: [sum(counts)], counts: [size] */
    int (*all_gather_v)(DistComm *c, const void *in, void *out, const int64_t *counts, DType dt, DistReq **req);
    int (*broadcast)(DistComm *c, void *buf, int64_t n, DType dt, int root, DistReq **req);
    int (*barrier)(DistComm *c, DistReq **req);
    int (*wait)(DistComm *c, DistReq *r, const char *what);
    int (*test)(DistComm *c, DistReq *r, int *done, const char *what); /* frees r once done */
    void (*abort)(DistComm *c, int code);                             /* ends the whole job */
    int (*finalize)(DistComm *c);
    /* Optional (NULL: the backend cannot split). split: collective over
     * parent; fills out's rank, size and impl (ops and the rest are the
     * generic layer's). comm_free: releases a split's impl. */
    int (*split)(DistComm *parent, int color, int key, DistComm *out);
    int (*comm_free)(DistComm *c);
    /* Optional: whether the backend takes memory of device d directly
     * (device pointers; it orders itself after the device's queued work, as
     * dist_nccl.c does with events on the compute stream). NULL, or 0 for
     * d: the generic layer stages d's tensors through host buffers. Memory
     * the host can address (the CPU) is always handed over directly. */
    int (*takes_device)(const DistComm *c, Device d);
} DistBackendOps;


typedef struct {
    uint64_t calls[DK_COUNT]; /* blocking and non-blocking alike */
    uint64_t bytes[DK_COUNT]; /* bytes this rank contributed */
} DistStats;

typedef struct DistWatchSlots DistWatchSlots; /* dist_watchdog.c */

struct DistComm {
    const DistBackendOps *ops;
    int rank, size;             /* in this communicator (the world: in the job) */
    int local_rank, local_size; /* this process on its machine, in the job (a sub-communicator keeps the world's) */
    /* Set by the generic layer: */
    const char *label;          /* "world", "node", "cross-node" or "split" (messages) */
    int *world_ranks;           /* [size]: each member's world rank; NULL for the world */
    void *impl;                 /* the backend's handle (mpi: a heap MPI_Comm) */
    DistStats stats;            /* this communicator's calls */
    uint64_t entered;           /* collectives entered on it (the watchdog's order) */
    DistWatchSlots *watch;      /* the watchdog's slots shared by its members on a machine */
    DistComm *node, *cross;     /* the world's cached dist_node_comm / dist_cross_node_comm */
    DistComm *next_child;       /* the world's list of sub-communicators (freed at exit) */
};

/* ---- the job's communicator ---- */

/* The world communicator, initialised on the first call: the "mpi" backend
 * when this process was started by mpirun (OMPI_COMM_WORLD_SIZE > 1) or by
 * Slurm's srun (SLURM_STEP_NUM_TASKS > 1), else "single".
 * ACCEL_LUA_DIST_BACKEND=single|mpi overrides the choice. NULL on failure
 * (the same error on every later call). */
DistComm *dist_world(void);
int dist_is_initialized(void);
/* The number of processes the launcher started (from its environment), and
 * this process's rank and local rank; no MPI call, cheap. */
int dist_launched_size(int *rank, int *local_rank);
/* Ends the whole job from this rank (MPI_Abort; exit in one process). */
void dist_abort(DistComm *c, int code) __attribute__((noreturn));

/* ---- sub-communicators ----
 * dist_split: collective over parent (every member calls it, in the same
 * order as its other collectives): the members with the same color
 * (>= 0) form one new communicator, ranked by key (ties: by parent rank),
 * as MPI_Comm_split. The "single" backend returns a one-process
 * communicator. Every collective, its agreement check, the counters
 * (dist_comm_stats) and the watchdog work on a sub-communicator as on the
 * world; collectives on different communicators must still be issued in
 * the same order by the processes they share.
 * Ranks in messages: a sub-communicator's errors name its own ranks with
 * their world ranks, e.g. "all_reduce on the node communicator: rank 0
 * (world rank 2) has float32 [2], rank 1 (world rank 3) has float32 [3]";
 * the watchdog (whose "#N" counts the collectives of that communicator)
 * says "accel-lua: rank 2: collective all_reduce #3 on the node
 * communicator timed out after S s; not entered by rank 1 (world rank 3)
 * ..." (the waiting process by its world rank).
 * dist_node_comm(world): the processes on this machine (same host name),
 * ranked by world rank; dist_cross_node_comm(world): the processes with
 * this one's node rank on every machine, ranked by world rank (so cross
 * rank k is on the k-th machine in world order). Both are made once
 * (collective on the first call) and cached; the world owns them.
 * Testing knob: ACCEL_LUA_TEST_RANKS_PER_NODE=k (a positive integer that
 * divides the world size) makes dist_node_comm group consecutive world
 * ranks into "machines" of k ranks instead (ranks 0..k-1, k..2k-1, ...),
 * so multi-machine layouts can be tested on one computer.
 * dist_comm_free: a communicator from dist_split (not the world nor its
 * cached node / cross-node ones); local. Sub-communicators still alive
 * at exit are freed before the job is finalised.
 * dist_comm_world_rank: member q's world rank. */
DistComm *dist_split(DistComm *parent, int color, int key);
DistComm *dist_node_comm(DistComm *world);
DistComm *dist_cross_node_comm(DistComm *world);
int dist_comm_free(DistComm *c);
int dist_comm_world_rank(const DistComm *c, int q);
/* "rank 1 (world rank 3)" for a sub-communicator, "rank 1" for the world. */
void dist_rank_str(const DistComm *c, int q, char *buf, size_t n);
/* ACCEL_LUA_TEST_RANKS_PER_NODE: k, 0 when unset, -1 with an error when
 * it is not a positive integer dividing world_size. */
int dist_test_ranks_per_node(int world_size);

/* ---- collectives on tensors (any device; see the top) ---- */

int dist_all_reduce(DistComm *c, Tensor *t, DistOp op); /* in place */
int dist_reduce_scatter(DistComm *c, Tensor *out, Tensor *in, DistOp op);
int dist_all_gather(DistComm *c, Tensor *out, Tensor *in);
/* counts[size]: every rank's first-dim length, from dist_gather_lengths
 * (which is where the ranks' shapes are checked). */
int dist_all_gather_v(DistComm *c, Tensor *out, Tensor *in, const int64_t *counts);
int dist_broadcast(DistComm *c, Tensor *t, int root); /* in place */
int dist_barrier(DistComm *c);

/* Shapes of the outputs for an input shape; -1 with an error if not valid. */
int dist_all_gather_shape(DistComm *c, const Tensor *in, int64_t *shape, int *ndim);
int dist_reduce_scatter_shape(DistComm *c, const Tensor *in, int64_t *shape, int *ndim);
int dist_all_gather_v_shape(DistComm *c, const Tensor *in, const int64_t *counts, int64_t *shape, int *ndim);
/* Every rank's first-dim length of in into counts[size], after checking
 * that the ranks agree on the dtype and the other dims (counted as part of
 * all_gather_v). */
int dist_gather_lengths(DistComm *c, const Tensor *in, int64_t *counts);

/* Byte strings (serialised objects). all_gather: every rank gets all ranks'
 * strings concatenated in rank order, lens[size] their lengths; broadcast:
 * every rank gets root's string. Results are malloc'd (free()). */
char *dist_all_gather_bytes(DistComm *c, const void *data, size_t n, size_t *lens);
char *dist_broadcast_bytes(DistComm *c, const void *data, size_t n, int root, size_t *len);

/* ---- non-blocking forms ---- */

typedef struct DistWork DistWork;
DistWork *dist_iall_reduce(DistComm *c, Tensor *t, DistOp op);
/* The same for a buffer whose layout every rank agreed on beforehand (DDP
 * buckets, checked when the reducer is made): no header exchange, except in
 * debug mode. */
DistWork *dist_iall_reduce_agreed(DistComm *c, Tensor *t, DistOp op);
/* ACCEL_LUA_DEBUG_MODE (or Accelerate's ACCELERATE_DEBUG_MODE) is true:
 * the *_agreed collectives are checked too (read at initialisation). */
int dist_debug_mode(void);
/* "float32 [2, 3]" from d = {dtype, ndim, dims[ndim]} (as exchanged between ranks). */
void dist_desc_str(const int64_t *d, char *buf, size_t n);
DistWork *dist_ireduce_scatter(DistComm *c, Tensor *out, Tensor *in, DistOp op);
DistWork *dist_iall_gather(DistComm *c, Tensor *out, Tensor *in);
DistWork *dist_iall_gather_v(DistComm *c, Tensor *out, Tensor *in, const int64_t *counts);
DistWork *dist_ibroadcast(DistComm *c, Tensor *t, int root);
DistWork *dist_ibarrier(DistComm *c);
int dist_wait(DistWork *w);         /* 0, or -1 with the error; again after completion: same result */
int dist_test(DistWork *w);         /* 1 done, 0 in flight, -1 failed; drives progress */
void dist_work_free(DistWork *w);   /* a work still in flight is kept until it completes at exit */
int dist_progress(DistComm *c);     /* tests every work in flight (MPI advances non-blocking
                                       collectives only inside MPI calls); -1 on an error */

/* ---- counters, names ---- */

void dist_stats(DistStats *out); /* every communicator of this process together */
/* One communicator's calls (the world's: only those on the world itself). */
void dist_comm_stats(const DistComm *c, DistStats *out);
void dist_reset_stats(void);
const char *dist_kind_name(DistKind k); /* "all_reduce", ... */
const char *dist_op_name(DistOp op);    /* "sum", ... */
int dist_op_parse(const char *s);       /* "sum" "avg"|"mean" "max" "min" -> DistOp, -1 if unknown */

/* ---- watchdog (dist_watchdog.c) ----
 * A collective in flight longer than the timeout (seconds; env
 * ACCEL_LUA_COLLECTIVE_TIMEOUT, default 300, a number >= 0 or an error when
 * the communicator starts; 0 disables) makes the watchdog thread print
 * "accel-lua: rank R: collective NAME #N timed out after S s; not entered by
 * rank Q (last in NAME #M, left it T s ago)" (the ranks of this machine that
 * never entered it, and what each did last) and end the job (dist_abort). A
 * non-blocking collective counts from when it was started until its
 * completion is observed. dist_set_timeout: seconds >= 0 (0: off). */
void dist_set_timeout(double seconds);
double dist_get_timeout(void);

/* ---- for backends and the generic layer ---- */

typedef struct DistTrack {
    DistComm *comm;
    const char *name;
    char site[128]; /* where the program called it ("train.lua:42"), or "" */
    uint64_t seq;
    uint64_t order; /* this rank's count of collectives entered on comm, this one included */
    double t0;
    struct DistTrack *prev, *next;
} DistTrack;
void dist_watch_begin(DistTrack *t, DistComm *c, const char *name, uint64_t seq);
/* The program's call site of the collective being started, written into
 * buf by fn(ctx, buf, n) on the calling thread (the Lua bindings: the
 * user's file:line); the watchdog names it. NULL: none. */
typedef void (*DistSiteFn)(void *ctx, char *buf, size_t n);
void dist_set_site_fn(DistSiteFn fn, void *ctx);
void *dist_site_ctx(void);
void dist_watch_end(DistTrack *t);
int dist_watchdog_start(DistComm *c); /* no-op if running */
void dist_watchdog_stop(void);
/* Collective over c: its shared slots (the world's: by dist_watchdog_start);
 * detach unmaps them. Without slots the messages name only the waiting rank. */
void dist_watch_attach(DistComm *c);
void dist_watch_detach(DistComm *c);
/* This rank's script has ended (normal exit, before MPI_Finalize): marked in
 * c's slot, so a rank waiting in a collective this one never entered fails
 * at once, saying so, instead of at the timeout. */
void dist_watch_finished(DistComm *c);
double dist_env_timeout(void); /* ACCEL_LUA_COLLECTIVE_TIMEOUT or the default; -1 with an error if malformed */

void dist_single_init(DistComm *c);
/* expected: the size the launcher announced (checked against MPI's). */
int dist_mpi_init(DistComm *c, int expected);

#endif
