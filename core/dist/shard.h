/* shard.h: the sharding engine (ZeRO stages 1-3 / FSDP, DESIGN §4), usable
 * from C without Lua, on the communicator of core/dist/dist.h. One engine wraps
 * a model's float32 parameters (all on one device: every flat buffer,
 * shard and optimizer state is made there, and the engine touches values
 * only through that device's backend: copies, adds, scales, the fused
 * optimizer entries, norm_pow; collectives stage through the host as
 * dist.h says) and does its optimizer's step.
 *
 * Stage: ONE integer, ShardOptions.stage, read in one place
 * (shard_stage_flags turns it into "gradients sharded" / "parameters
 * sharded"; the engine and accel.shard ask those):
 *   1  optimizer state sharded. Gradients are averaged as DDP does (a
 *      DdpReducer of core/dist/ddp.h: bucket all_reduces started during
 *      backward, .grad holds the full average afterwards); each rank
 *      updates its shard reading its part of .grad; the parameters are
 *      all-gathered after the step.
 *   2  + gradients sharded: each wrap unit's gradient is packed into a
 *      flat buffer as backward produces it, reduce-scattered (avg) as soon
 *      as the unit is complete (non-blocking, in a fixed unit order on
 *      every rank) and added into this rank's gradient shard; the flat
 *      buffer is freed and .grad is set to nil (the gradient lives only in
 *      the shards: read it through the engine).
 *   3  + parameters sharded: between uses a unit's parameters have no
 *      memory (storage data NULL, see shard_storage_released);
 *      shard_unit_gather all-gathers the unit (before its forward, and
 *      again before its backward through shard_pre_backward's identity
 *      node), shard_unit_release frees the full buffer; during backward a
 *      unit is released as soon as all its parameters reported their
 *      gradient.
 *
 * Layout: parameters are grouped into wrap units (unit_of[i]); each unit
 * is one flat float32 buffer, parameters in the order given, padded to
 * padded = world * ceil(numel / world) elements; rank r owns elements
 * [r * shard, (r + 1) * shard) with shard = padded / world. A rank's slice
 * may cross several parameters: it is cut into segments (ShardSeg), one per
 * parameter it touches, so per-parameter hyper-parameters (param groups)
 * and step counts apply. The model's parameter tensors become views into
 * their unit's buffer (one Storage per unit, whose data the engine swaps).
 * Padding elements are never stepped and stay zero.
 *
 * Per rank the engine holds, per unit: the float32 master shard of the
 * parameters, the optimizer state shards (Adam: exp_avg, exp_avg_sq,
 * [max_exp_avg_sq]; SGD: momentum_buffer), stage >= 2 the gradient shard
 * (made by the unit's first reduction after zero_grad, freed by zero_grad,
 * as FSDP's sharded gradients with set_to_none: during a backward only the
 * units already reduced hold one), and stages 1-2 the full parameter
 * buffer (stage 3 only while gathered).
 *
 * Accumulation (shard_set_sync(false) on non-final micro-steps): stage 1
 * communicates nothing and .grad accumulates locally (as DDP's no_sync);
 * stages 2-3 reduce-scatter every backward and add into the gradient shard
 * (as DeepSpeed ZeRO-2/3), so nothing full-size is held between
 * micro-steps; there set_sync has no effect.
 *
 * offload_optimizer: the optimizer shards and their step on the host. On
 * the CPU they are there already: the flag is recorded and the copy plan
 * (shard_host_view) is the identity. On another device the flag is
 * recorded too, but the shards and their step stay on the device (moving
 * them to the host is not implemented yet; docs/distributed-devices.md).
 *
 * HYBRID_SHARD (FSDP's HYBRID_SHARD = stage 3, HYBRID_SHARD_ZERO2 =
 * stage 2): shard inside a machine, replicate across machines. The engine
 * is made on the node communicator (dist_node_comm: everything above is
 * per machine: the layout pads to the node size, gathers and
 * reduce-scatters stay inside the machine) with ShardOptions.replicate =
 * the cross-node communicator (dist_cross_node_comm: the ranks holding the
 * same shard on the other machines). Additions: at creation the
 * parameters are broadcast inside the node, then across nodes (so every
 * rank starts from world rank 0's); after a synchronising backward
 * (set_sync(true), the default) each gradient shard, already averaged in
 * the node, is all-reduced (avg) across nodes, so it holds the global
 * average; non-synchronising micro-steps (set_sync(false)) keep the node's
 * sum and leave the cross-node reduction to the synchronising one. Every
 * machine then steps identical shards identically; clipping and the inf
 * check reduce over the node (its shards already hold the global values).
 * Stage 1 is refused with replicate. shard_hybrid_comms makes the pair.
 *
 * Prefetch (stage 3; FSDP's forward_prefetch / backward_prefetch =
 * BACKWARD_PRE, DeepSpeed's stage3_prefetch_bucket_size): the all-gather
 * of the next unit is started (dist_iall_gather) while the current one
 * computes, and completed when that unit's own gather is asked for.
 * Backward: when unit u's backward starts (its pre-backward node), the
 * unit whose forward ran just before u's is started. Forward: when unit
 * u's forward starts, the unit that followed u in the previous forward
 * (the order is recorded each forward, as FSDP does; none in the first)
 * is started. At most two units are gathered at a time (the one computing
 * and the next), plus the root. MPI advances a non-blocking collective
 * only inside MPI calls: the engine calls dist_progress at each unit
 * boundary and gradient hook. Gathers carry the same bytes either way, so
 * results are bitwise the same with and without prefetch.
 *
 * Functions that can fail return -1 / NULL with accel_last_error() set. */
#ifndef ACCEL_SHARD_H
#define ACCEL_SHARD_H

#include <stdbool.h>
#include <stdint.h>
#include "dist.h"
#include "../tensor.h"
#include "../../kernels/kops.h"

/* ---- layout arithmetic (pure) ---- */

typedef struct {
    int slot;     /* position of the parameter in its unit */
    int64_t at;   /* first element in the rank's shard */
    int64_t from; /* first element in the parameter */
    int64_t len;
} ShardSeg;

/* ceil(numel / world): each rank's shard length (world >= 1). */
int64_t shard_len(int64_t numel, int world);
/* Elements of [off, off + len) that fall in rank's shard [rank*shard,
 * (rank+1)*shard): the first one's index relative to off in *from, and the
 * count (0 if none) as the result. */
int64_t shard_overlap(int64_t off, int64_t len, int64_t shard, int rank, int64_t *from);
/* The segments of rank's shard over n parameters at offsets[] with
 * numels[] (increasing offsets); out has room for n; returns the count. */
int shard_segments(int n, const int64_t *offsets, const int64_t *numels, int64_t shard, int rank, ShardSeg *out);

/* ---- the engine ---- */

typedef struct ShardEngine ShardEngine;

typedef struct {
    int stage;                /* 1, 2 or 3 */
    double bucket_cap_mb;     /* stage 1's DDP buckets (<= 0: 25) */
    bool offload_optimizer;   /* see above */
    bool broadcast;           /* rank 0's parameters to every rank at creation */
    bool backward_prefetch;   /* stage 3: gather the next unit while one runs backward */
    bool forward_prefetch;    /* stage 3: gather the next unit while one runs forward (see Prefetch) */
    DistComm *replicate;      /* HYBRID (stages 2-3): see below; NULL: none */
} ShardOptions;

typedef enum { SHARD_SGD = 0, SHARD_ADAM = 1 } ShardOptKind;

/* One parameter's hyper-parameters for a step (from its param group). */
typedef struct {
    ShardOptKind kind;
    KSgdArgs sgd;
    KAdamArgs adam; /* .step is ignored: the engine counts per parameter */
    bool amsgrad;
} ShardHyper;

typedef struct {
    int units, params;
    uint64_t steps, reductions, early, gathers, releases, prefetches;
    uint64_t forward_prefetches; /* of prefetches: those started during a forward */
} ShardStats;

/* params: n distinct float32 leaves that require grad, on one device; unit_of[i] in
 * [0, n_units) (every unit non-empty). Unit order matters twice: stage 2-3
 * reductions start in decreasing unit index (put the unit used first in
 * forward first, e.g. the root unit at 0). Installs gradient hooks. */
ShardEngine *shard_engine_new(DistComm *c, Tensor **params, int n, const int *unit_of, int n_units,
                              const ShardOptions *o);
/* Removes the hooks and frees the shards (not collective: waits only for
 * its own work in flight). Stage 3 parameters stay released unless
 * shard_gather_all ran first. */
void shard_engine_free(ShardEngine *e);
/* Collective: finalizes and gathers every unit (before closing, so the
 * model keeps its full parameters). */
int shard_gather_all(ShardEngine *e);

/* HYBRID's communicators from the world (collective): *node and *cross
 * (owned by the world). Errors: one machine only (HYBRID needs several;
 * ACCEL_LUA_TEST_RANKS_PER_NODE fakes machines for tests), or machines
 * with different numbers of processes. */
int shard_hybrid_comms(DistComm *world, DistComm **node, DistComm **cross);
/* HYBRID: this rank's replica (cross-node rank) and their number; 0 and 1 otherwise. */
int shard_replicas(const ShardEngine *e, int *replica);

/* The one reading of the stage: 1, 2 or 3, else -1 with an error. */
int shard_stage_flags(int stage, bool *grads_sharded, bool *params_sharded);
int shard_stage(const ShardEngine *e);
void shard_set_sync(ShardEngine *e, bool on);
/* Completes the reduction of the backward passes since the last call; 0
 * when there is none. Call after backward, before reading gradients. */
int shard_finalize(ShardEngine *e);
/* The optimizer step on this rank's shards (h[i] for parameter i), then
 * stages 1-2 all-gather the parameters. Skipped (0) without gradients
 * since the last shard_zero_grad. */
int shard_step(ShardEngine *e, const ShardHyper *h);
/* Stage 1: .grad = nil (set_to_none) or zeroed in place; stages 2-3: the
 * gradient shards are freed either way (the next backward's reduce-scatters
 * make them again). */
int shard_zero_grad(ShardEngine *e, bool set_to_none);
/* Total p-norm of the gradient (one all_reduce of the shards' partial
 * sums; p = INFINITY: max) into *total; gradients scaled by
 * max_norm / (total + 1e-6) when that is below 1 (PyTorch's rule).
 * error_if_nonfinite: a non-finite total is an error, nothing scaled. */
int shard_clip_grad_norm(ShardEngine *e, double max_norm, double p, bool error_if_nonfinite, double *total);
/* Gradients multiplied by factor; *found_inf: whether any rank's shard
 * holds an inf / NaN (one all_reduce, the same answer on every rank). */
int shard_unscale(ShardEngine *e, double factor, bool *found_inf);
/* clip_grad_value_: every gradient element clamped to [-v, v] (as torch's
 * clamp: max with -v, then min with v), each rank its own shard. */
int shard_clamp_grads(ShardEngine *e, double v);

/* stage 3. A model's forward: shard_forward_begin, then for each unit
 * shard_unit_forward (records the forward order, gathers) ... its forward
 * ... shard_unit_release. */
void shard_forward_begin(ShardEngine *e);
int shard_unit_forward(ShardEngine *e, int u);
int shard_unit_gather(ShardEngine *e, int u); /* completes a prefetch of u if one is under way */
/* Starts gathering u without waiting (not when gathered, under way, or
 * its gradient of this backward is complete). */
int shard_unit_prefetch(ShardEngine *e, int u);
int shard_unit_release(ShardEngine *e, int u);
bool shard_unit_gathered(const ShardEngine *e, int u);
/* out unchanged, with an identity node whose backward gathers unit u
 * (new reference; out itself retained when it needs no gradient). */
Tensor *shard_pre_backward(ShardEngine *e, int u, Tensor *out);
/* The order log (for tests): shard_trace_start(e, cap) clears it and
 * records up to cap events from then on (cap 0: off, freed); shard_trace
 * returns the events recorded and their count. */
typedef enum {
    SHARD_EV_GATHER,   /* a gather of the unit was issued (blocking or a prefetch) */
    SHARD_EV_FORWARD,  /* the unit's forward starts (shard_unit_forward) */
    SHARD_EV_BACKWARD, /* the unit's backward starts (its pre-backward node) */
    SHARD_EV_RELEASE   /* its full parameters were freed (its compute ended) */
} ShardEventKind;
typedef struct {
    ShardEventKind kind;
    int unit;
} ShardEvent;
int shard_trace_start(ShardEngine *e, int cap);
const ShardEvent *shard_trace(const ShardEngine *e, int *n);
/* Whether s is a storage whose memory the engine released (stage 3). */
bool shard_storage_released(const Storage *s);
#define SHARD_RELEASED_MSG                                                                                            \
    "its memory is released: it is a parameter sharded by accel.shard (stage 3), held only during its wrap unit's "   \
    "forward and backward; read it through the engine (full_state_dict, gathered)"

/* Parameter i in full into out (its numel, float32, contiguous): a local
 * copy at stages 1-2; stage 3 one all_gather_v of the ranks' segments.
 * which: 0 the parameter, 1.. the optimizer state slots (shard_state_name). */
int shard_full_tensor(ShardEngine *e, int i, int which, Tensor *out);
/* "param" for 0, the name of state slot which ("exp_avg", ...), NULL past
 * the last slot created so far. */
const char *shard_state_name(const ShardEngine *e, int which);
/* The reverse, local (no communication): this rank's part of parameter i's
 * `which` (0 the parameter, 1.. a state slot, created as zeros if missing)
 * from a full tensor; at stages 1-2 (or a gathered stage-3 unit) which 0
 * also sets the full parameter. Every rank loading the same full tensors
 * reshards a checkpoint onto any number of ranks. */
int shard_load_full(ShardEngine *e, int i, int which, const Tensor *full);
/* The optimizer kind (fixed by the first step; set it to load state before). */
int shard_set_kind(ShardEngine *e, ShardOptKind kind);
void shard_set_param_steps(ShardEngine *e, int i, int64_t steps);

/* ---- layout and shards, for checkpoints ---- */
int shard_num_units(const ShardEngine *e);
int shard_num_params(const ShardEngine *e);
Tensor *shard_param(const ShardEngine *e, int i); /* borrowed */
/* Unit u: its parameters (engine indices), their offsets, numel, padded
 * and shard length. */
void shard_unit_info(const ShardEngine *e, int u, int *n, const int **params, const int64_t **offsets, int64_t *numel,
                     int64_t *padded, int64_t *shard);
/* This rank's shard of unit u: which 0 master, 1.. state (NULL: not
 * created yet), -1 gradient (stage >= 2; NULL after shard_zero_grad until
 * the unit's next reduction). Borrowed. */
Tensor *shard_unit_shard(const ShardEngine *e, int u, int which);
int64_t shard_param_steps(const ShardEngine *e, int i);
int shard_rank(const ShardEngine *e);
int shard_world(const ShardEngine *e);
bool shard_offload(const ShardEngine *e);
void shard_stats(const ShardEngine *e, ShardStats *out);
/* The host copy of a shard the optimizer steps (offload plan; identity on CPU). */
Tensor *shard_host_view(ShardEngine *e, Tensor *shard);

#endif
