/* ddp.h: DistributedDataParallel's gradient reducer (DESIGN §4), usable
 * from C without Lua. A reducer owns flat bucket buffers over a model's
 * parameters and averages their gradients across the communicator's ranks,
 * overlapping the transfers with the rest of backward.
 *
 * Layout: parameters are assigned to buckets in REVERSE registration order
 * (backward produces the last layers' gradients first), one dtype per
 * bucket, a new bucket whenever the next parameter would take the current
 * one past bucket_cap_mb (a parameter larger than the cap gets a bucket of
 * its own); the first bucket of each dtype is capped at 1 MiB, as in
 * PyTorch's DDP, so its reduction starts early in backward. Each parameter owns the slice [offset, offset + numel) of its
 * bucket's flat buffer; the buffer's length is the used length rounded up
 * to a multiple of `align` (the padding stays zero), so a sharding engine
 * can reduce-scatter equal shards of it (align = world size).
 *
 * One synchronising backward:
 *  - each parameter's Tensor.grad_hook runs once, after the last gradient
 *    contribution of the pass (core/autograd.c); the hook copies .grad into
 *    the parameter's slice, and when every slice of a bucket is filled the
 *    bucket's reduction starts (non-blocking). Buckets start strictly in
 *    index order, so every rank issues the same collectives in the same
 *    order even when gradients arrive in another order; the hook also
 *    calls dist_progress so transfers in flight advance during backward;
 *  - ddp_finalize (at the end of that backward with finalize_at_pass_end,
 *    else when the caller calls it): fills the slices of parameters that got no gradient in
 *    this pass (their .grad from earlier accumulation steps, else zeros),
 *    starts the remaining buckets, waits for all of them in order and
 *    copies each averaged slice back into .grad (creating .grad where it was
 *    nil). .grad stays an ordinary tensor (not a view into the bucket), so
 *    zero_grad(set_to_none) and in-place edits behave as without DDP; the
 *    price is one copy in and one copy out per step.
 * With sync off (no_sync, non-final accumulation steps) the hook returns at
 * once: nothing is copied and nothing is communicated.
 *
 * The reduction of a bucket is pluggable (DdpReduceOps): the default starts
 * an in-place all_reduce (avg) of the flat buffer and copies it back; a
 * sharding engine can start a reduce_scatter into its shard instead and
 * keep only that.
 *
 * find_unused: after the buckets, one all_reduce (max) of a per-parameter
 * "had a gradient" flag per synchronising step; a parameter no rank used
 * keeps .grad = nil (as on one process). Without it, such a parameter gets
 * a zero gradient (every rank the same).
 *
 * Functions that can fail return -1 / NULL with accel_last_error() set. */
#ifndef ACCEL_DDP_H
#define ACCEL_DDP_H

#include <stdbool.h>
#include <stdint.h>
#include "dist.h"
#include "../tensor.h"

typedef struct DdpReducer DdpReducer;

typedef struct {
    double bucket_cap_mb; /* <= 0: 25 */
    int64_t align;        /* flat buffer lengths are multiples of it (<= 1: no padding) */
    bool find_unused;
    /* complete the step when the synchronising backward ends (ddp_finalize
     * queued with ag_queue_pass_end), as PyTorch's DDP: a bare
     * loss:backward() leaves averaged gradients, and two passes before one
     * step each add their average; false: the caller calls ddp_finalize */
    bool finalize_at_pass_end;
} DdpOptions;

typedef struct {
    int n_params;
    const int *params;      /* indices into the reducer's parameter list, in slice order */
    const int64_t *offsets; /* element offset of each parameter's slice */
    int64_t numel;          /* elements in use */
    int64_t padded;         /* the flat buffer's length */
    DType dtype;
    Tensor *flat;           /* borrowed */
} DdpBucketInfo;

/* The reduction of bucket b: start returns a DistWork (or NULL with an
 * error), finish runs after it completed (default: copy the slices back
 * into .grad). */
typedef struct {
    DistWork *(*start)(DdpReducer *r, int b, void *ud);
    int (*finish)(DdpReducer *r, int b, void *ud);
    void *ud;
} DdpReduceOps;

typedef struct {
    uint64_t syncs;           /* finalized synchronising steps */
    uint64_t hook_calls;      /* gradient hooks that filled a slice */
    uint64_t early_launches;  /* buckets started during backward */
    uint64_t late_launches;   /* buckets started by ddp_finalize */
    uint64_t missing;         /* slices filled at finalize (no gradient in the pass) */
} DdpStats;

/* params: n distinct leaf tensors that require grad, same device, in
 * registration order. Installs their grad_hooks (a parameter hooked by
 * another reducer is an error). Sync starts on. Collective: every rank
 * makes its reducer at the same point, and the ranks check that they agree
 * on the parameters (count, dtypes, shapes) and the buckets, or fail with
 * the first difference (bucket all-reduces are then not checked again,
 * except in debug mode, see dist.h). */
DdpReducer *ddp_reducer_new(DistComm *c, Tensor **params, int n, const DdpOptions *o);
/* Waits for reductions in flight, removes the hooks, frees everything. */
void ddp_reducer_free(DdpReducer *r);

void ddp_set_reduce_ops(DdpReducer *r, const DdpReduceOps *ops); /* NULL: the default */
void ddp_set_sync(DdpReducer *r, bool on);
bool ddp_sync(const DdpReducer *r);
/* True between the first hook of a synchronising backward and ddp_finalize. */
bool ddp_active(const DdpReducer *r);
/* Completes the step's reduction (see above); 0 without one in progress. */
int ddp_finalize(DdpReducer *r);
/* Join (uneven inputs): a rank that has no batch for this step takes part
 * in its collectives as the other ranks' ddp_finalize issues them (every
 * bucket's reduction in order, then the find_unused flags) with zeros, and
 * keeps nothing: avg then divides the others' sum by the whole world size
 * (PyTorch's divide_by_initial_world_size = True). Not during a step. */
int ddp_shadow_step(DdpReducer *r);

int ddp_num_params(const DdpReducer *r);
Tensor *ddp_param(const DdpReducer *r, int i); /* borrowed */
int ddp_num_buckets(const DdpReducer *r);
void ddp_bucket_info(const DdpReducer *r, int b, DdpBucketInfo *out);
/* Parameter i's slice of its bucket, shaped like the parameter (borrowed). */
Tensor *ddp_slice(const DdpReducer *r, int i);
DistComm *ddp_comm(const DdpReducer *r);
void ddp_stats(const DdpReducer *r, DdpStats *out);

/* The default reduction's pieces, for engines that wrap them. */
DistWork *ddp_start_allreduce(DdpReducer *r, int b, void *ud);
int ddp_copy_back(DdpReducer *r, int b, void *ud);

#endif
