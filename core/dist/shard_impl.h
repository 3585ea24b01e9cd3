/* shard_impl.h: the sharding engine's private state, shared by shard.c
 * (layout, memory, hooks, reductions) and shard_step.c (the step and the
 * operations on shards). Not part of the engine's interface (shard.h). */
#ifndef ACCEL_SHARD_IMPL_H
#define ACCEL_SHARD_IMPL_H

#include "shard.h"
#include "ddp.h"

#define N_STATE 3

typedef struct {
    Tensor *flat; /* the unit's full buffer while gathered, else NULL */
} Holder;

typedef struct {
    int n;
    int *params;
    int64_t *offsets;
    int64_t numel, padded, shard;
    int nseg;
    ShardSeg *segs;
    Storage *view; /* the storage the unit's parameters view (data swapped) */
    Holder *holder;
    Tensor *master, *grad, *state[N_STATE];
    Tensor *gfull, *gtmp; /* stage >= 2, during one backward */
    DistWork *work;
    Tensor *next_flat; /* stage 3: a prefetch's buffer, gwork its all_gather */
    DistWork *gwork;
    int fwd_prev;      /* the unit whose forward started before this one's (-1: none) */
    int fwd_next;      /* the unit whose forward started after this one's, last forward (-1: none) */
    int pending;
    bool launched, grad_dirty; /* grad_dirty: the gradient shard holds a sum */
} Unit;

typedef struct {
    ShardEngine *e;
    int i;
} Hook;

struct ShardEngine {
    DistComm *comm;
    DistComm *cross; /* HYBRID: the replicas of this rank's shards on the other machines */
    int rank, world, stage;
    Device dev; /* the parameters' device: every flat buffer and shard lives there */
    bool shard_grads, shard_params, offload, prefetch, fwd_prefetch;
    int last_fwd; /* the unit whose forward started last in this forward (-1: none) */
    bool sync, active, has_grads, kind_set;
    ShardOptKind kind;
    int n, nu;
    Tensor **params;
    int *unit_of;
    bool *reported;
    uint8_t *has_grad; /* stages 2-3: a gradient reached parameter i since zero_grad (after a step's agreement: on any rank) */
    int64_t *steps;
    Hook *hooks;
    Unit *units;
    DdpReducer *ddp; /* stage 1 */
    uint32_t pass;
    int next; /* the next unit to reduce (counting down) */
    char *error;
    ShardStats st;
    ShardEvent *trace; /* the order log (shard_trace_start) */
    int ntrace, trace_cap;
    uint64_t id;
    ShardEngine *live_next;
};

/* t's data as a float32 device pointer: for backend entries (and address
 * arithmetic) only, never dereferenced here (the memory may be a device's). */
static inline float *fdata(Tensor *t) { return (float *)tensor_data(t); }

/* A float32 buffer of n elements on the engine's device. */
static inline Tensor *flat_f32(const ShardEngine *e, int64_t n, bool zero) {
    return zero ? tensor_zeros(&n, 1, DT_F32, e->dev) : tensor_empty(&n, 1, DT_F32, e->dev);
}

/* shard.c */
void shard_release_all(ShardEngine *e);          /* stage 3: every unit released */
int64_t shard_offset_of(const ShardEngine *e, int i); /* parameter i's offset in its unit */

/* shard_step.c: device-side helpers (every value moves through the backend). */
/* n float32 elements from src[soff..] to dst[doff..] (offsets relative to
 * each tensor's own); through a host buffer when the devices differ. */
int shard_copy(Tensor *dst, int64_t doff, const Tensor *src, int64_t soff, int64_t n);

#endif
