/* dist_nccl.c: the "nccl" communicator backend (dist_nccl.h): NCCL
 * collectives on device buffers, compiled only in the CUDA build.
 *
 * Bootstrap: rank 0 of the host group makes ncclGetUniqueId and every rank
 * receives it through the group's dist_broadcast_bytes (MPI in a launched
 * job), then ncclCommInitRank(size, id, rank) on this process's GPU.
 * Streams: each communicator has its own non-blocking stream. A collective
 * records an event on the compute stream and makes its stream wait for it
 * (so it reads finished data), enqueues the NCCL call, then records `done`
 * on its stream. Blocking calls make the compute stream wait for `done` at
 * once; non-blocking ones hand out a request whose wait does that (the
 * host does not block, as torch's Work.wait() on CUDA tensors) and whose
 * test asks cudaEventQuery. Host code that reads the result synchronises
 * through the backend's copies, as for any kernel output.
 * Types: float32/64, bf16, fp16, int32/64 natively (NCCL reduces bf16 / fp16
 * in their own type, one rounding per addition as our MPI ops); bool and
 * uint8 as uint8 with max for sum/max and min for min (logical or / and);
 * fp8 as bytes (gather and broadcast only; dist.c refuses reductions).
 * all_gather_v is a group of one broadcast per rank (NCCL has no gatherv).
 * Errors: every CUDA / NCCL call is checked (cuda_check.h: file:line and
 * the library's message) and becomes "OP: nccl: MESSAGE". */
#include "dist_nccl.h"
#include "../backend/backend.h"
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kernels/cuda/cuda_check.h"

typedef struct NcclComm {
    DistComm base; /* first: the generic layer sees a DistComm */
    DistComm *group;
    ncclComm_t comm;
    cudaStream_t stream, compute;
    cudaEvent_t ready;
    int device;
    int *barrier_buf; /* one int on the device */
    struct NcclComm *next;
} NcclComm;

struct DistReq {
    cudaEvent_t done;
};

static NcclComm *comms; /* every communicator made, for reuse and shutdown */

static NcclComm *nc(DistComm *c) { return (NcclComm *)c; }

/* A cuda_check failure in `what`, as an accel error. */
static int fail(const char *what) { return accel_fail_int("%s: nccl: %s", what, cuda_last_error()); }

static ncclDataType_t nccl_type(DType dt) {
    switch (dt) {
    case DT_F32: return ncclFloat32;
    case DT_F64: return ncclFloat64;
    case DT_BF16: return ncclBfloat16;
    case DT_F16: return ncclFloat16;
    case DT_I64: return ncclInt64;
    case DT_I32: return ncclInt32;
    default: return ncclUint8; /* u8, bool, fp8 (bytes) */
    }
}

static ncclRedOp_t nccl_op(DType dt, DistOp op) {
    if (dt == DT_BOOL || dt == DT_U8) return op == DIST_MIN ? ncclMin : (dt == DT_BOOL || op == DIST_MAX) ? ncclMax : ncclSum;
    return op == DIST_MAX ? ncclMax : op == DIST_MIN ? ncclMin : ncclSum;
}

/* ---- ordering against compute ---- */

static int enter(NcclComm *c) {
    cuda_check(cudaSetDevice(c->device));
    cuda_check(cudaEventRecord(c->ready, c->compute));
    cuda_check(cudaStreamWaitEvent(c->stream, c->ready, 0));
    return 0;
}

/* After the NCCL calls: blocking (req NULL) orders compute after them now. */
static int leave(NcclComm *c, DistReq **req) {
    cudaEvent_t done;
    cuda_check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(done, c->stream);
    if (e == cudaSuccess && !req) e = cudaStreamWaitEvent(c->compute, done, 0);
    if (e != cudaSuccess || !req) {
        cudaEventDestroy(done);
        cuda_check(e);
        return 0;
    }
    DistReq *r = malloc(sizeof *r);
    if (!r) {
        cudaEventDestroy(done);
        return cuda_fail("host out of memory for a request");
    }
    r->done = done;
    *req = r;
    return 0;
}

static int n_wait(DistComm *c, DistReq *r, const char *what) {
    cudaError_t e = cudaStreamWaitEvent(nc(c)->compute, r->done, 0);
    cudaEventDestroy(r->done);
    free(r);
    if (e != cudaSuccess) return accel_fail_int("%s: nccl: %s", what, cudaGetErrorString(e));
    return 0;
}

static int n_test(DistComm *c, DistReq *r, int *done, const char *what) {
    cudaError_t e = cudaEventQuery(r->done);
    *done = e != cudaErrorNotReady;
    if (e == cudaErrorNotReady) return 0;
    if (e != cudaSuccess) {
        cudaEventDestroy(r->done);
        free(r);
        return accel_fail_int("%s: nccl: %s", what, cudaGetErrorString(e));
    }
    return n_wait(c, r, what);
}

/* ---- collectives: enter, NCCL call(s), leave ---- */

static int do_all_reduce(NcclComm *c, void *buf, int64_t n, DType dt, DistOp op, DistReq **req) {
    if (enter(c)) return -1;
    nccl_check(ncclAllReduce(buf, buf, (size_t)n, nccl_type(dt), nccl_op(dt, op), c->comm, c->stream));
    return leave(c, req);
}

static int n_all_reduce(DistComm *c, void *buf, int64_t n, DType dt, DistOp op, DistReq **req) {
    return do_all_reduce(nc(c), buf, n, dt, op, req) ? fail("all_reduce") : 0;
}

static int do_reduce_scatter(NcclComm *c, const void *in, void *out, int64_t n, DType dt, DistOp op, DistReq **req) {
    if (enter(c)) return -1;
    nccl_check(ncclReduceScatter(in, out, (size_t)n, nccl_type(dt), nccl_op(dt, op), c->comm, c->stream));
    return leave(c, req);
}

static int n_reduce_scatter(DistComm *c, const void *in, void *out, int64_t n, DType dt, DistOp op, DistReq **req) {
    return do_reduce_scatter(nc(c), in, out, n, dt, op, req) ? fail("reduce_scatter") : 0;
}

static int do_all_gather(NcclComm *c, const void *in, void *out, int64_t n, DType dt, DistReq **req) {
    if (enter(c)) return -1;
    nccl_check(ncclAllGather(in, out, (size_t)n, nccl_type(dt), c->comm, c->stream));
    return leave(c, req);
}

static int n_all_gather(DistComm *c, const void *in, void *out, int64_t n, DType dt, DistReq **req) {
    return do_all_gather(nc(c), in, out, n, dt, req) ? fail("all_gather") : 0;
}

static int do_all_gather_v(NcclComm *c, const void *in, void *out, const int64_t *counts, DType dt, DistReq **req) {
    if (enter(c)) return -1;
    const size_t es = dtype_size(dt);
    char *o = out;
    nccl_check(ncclGroupStart());
    for (int r = 0, at = 0; r < c->base.size; at += (int)counts[r], r++) {
        const void *src = r == c->base.rank ? in : o + (size_t)at * es;
        ncclResult_t rc = ncclBroadcast(src, o + (size_t)at * es, (size_t)counts[r], nccl_type(dt), r, c->comm, c->stream);
        if (rc != ncclSuccess) {
            ncclGroupEnd();
            nccl_check(rc);
        }
    }
    nccl_check(ncclGroupEnd());
    return leave(c, req);
}

static int n_all_gather_v(DistComm *c, const void *in, void *out, const int64_t *counts, DType dt, DistReq **req) {
    return do_all_gather_v(nc(c), in, out, counts, dt, req) ? fail("all_gather_v") : 0;
}

static int do_broadcast(NcclComm *c, void *buf, int64_t n, DType dt, int root, DistReq **req) {
    if (enter(c)) return -1;
    nccl_check(ncclBroadcast(buf, buf, (size_t)n, nccl_type(dt), root, c->comm, c->stream));
    return leave(c, req);
}

static int n_broadcast(DistComm *c, void *buf, int64_t n, DType dt, int root, DistReq **req) {
    return do_broadcast(nc(c), buf, n, dt, root, req) ? fail("broadcast") : 0;
}

/* An all-reduce of one device int; blocking barriers also wait on the host. */
static int do_barrier(NcclComm *c, DistReq **req) {
    if (do_all_reduce(c, c->barrier_buf, 1, DT_I32, DIST_SUM, req)) return -1;
    if (!req) cuda_check(cudaStreamSynchronize(c->stream));
    return 0;
}

static int n_barrier(DistComm *c, DistReq **req) { return do_barrier(nc(c), req) ? fail("barrier") : 0; }

/* ---- lifetime ---- */

static void n_abort(DistComm *c, int code) {
    ncclCommAbort(nc(c)->comm);
    DistComm *g = nc(c)->group;
    if (g && g->ops && g->ops->abort) g->ops->abort(g, code);
    _exit(code);
}

static void unlink_comm(NcclComm *c) {
    for (NcclComm **at = &comms; *at; at = &(*at)->next)
        if (*at == c) {
            *at = c->next;
            return;
        }
}

static int do_finalize(NcclComm *c) {
    cuda_check(cudaSetDevice(c->device));
    nccl_check(ncclCommFinalize(c->comm));
    nccl_check(ncclCommDestroy(c->comm));
    cuda_check(cudaFree(c->barrier_buf));
    cuda_check(cudaEventDestroy(c->ready));
    cuda_check(cudaStreamDestroy(c->stream));
    return 0;
}

static int n_finalize(DistComm *c) {
    NcclComm *n = nc(c);
    unlink_comm(n);
    int rc = do_finalize(n);
    free(n);
    return rc ? fail("finalize") : 0;
}

/* The generic layer hands this GPU's tensors over as device pointers (no
 * host staging, dist.h); anything else is staged through the host. */
static int n_takes_device(const DistComm *c, Device d) {
    return d.type == DEV_CUDA && d.index == ((const NcclComm *)c)->device;
}

static const DistBackendOps nccl_ops = {
    .name = "nccl",
    .all_reduce = n_all_reduce,
    .reduce_scatter = n_reduce_scatter,
    .all_gather = n_all_gather,
    .all_gather_v = n_all_gather_v,
    .broadcast = n_broadcast,
    .barrier = n_barrier,
    .wait = n_wait,
    .test = n_test,
    .abort = n_abort,
    .finalize = n_finalize,
    .takes_device = n_takes_device,
};

/* ---- creation ---- */

/* The unique id from the group's rank 0, through the host communicator. */
static int bootstrap_id(DistComm *group, ncclUniqueId *id) {
    if (group->rank == 0) nccl_check(ncclGetUniqueId(id));
    size_t len = 0;
    char *got = dist_broadcast_bytes(group, id, sizeof *id, 0, &len);
    if (!got) return cuda_fail("broadcasting the NCCL unique id failed: %s", accel_last_error());
    if (len != sizeof *id) {
        free(got);
        return cuda_fail("the NCCL unique id from rank 0 has %zu bytes, expected %zu", len, sizeof *id);
    }
    memcpy(id, got, sizeof *id);
    free(got);
    return 0;
}

static int do_create(NcclComm *c, DistComm *group, int device) {
    ncclUniqueId id;
    cuda_check(cudaSetDevice(device));
    if (bootstrap_id(group, &id)) return -1;
    nccl_check(ncclCommInitRank(&c->comm, group->size, id, group->rank));
    cuda_check(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    cuda_check(cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming));
    cuda_check(cudaMalloc((void **)&c->barrier_buf, sizeof(int)));
    cuda_check(cudaMemset(c->barrier_buf, 0, sizeof(int)));
    return 0;
}

/* Undoes whatever do_create managed before it failed (errors ignored: the
 * first one is already reported). */
static void release_partial(NcclComm *c) {
    if (c->barrier_buf) cudaFree(c->barrier_buf);
    if (c->ready) cudaEventDestroy(c->ready);
    if (c->stream) cudaStreamDestroy(c->stream);
    if (c->comm) ncclCommDestroy(c->comm);
    free(c);
}

DistComm *dist_nccl_comm(DistComm *group, int device) {
    for (NcclComm *c = comms; c; c = c->next)
        if (c->group == group && c->device == device) return &c->base;
    NcclComm *c = accel_calloc(1, sizeof *c);
    if (!c) return NULL;
    c->base = (DistComm){.ops = &nccl_ops, .rank = group->rank, .size = group->size,
                         .local_rank = group->local_rank, .local_size = group->local_size};
    c->group = group, c->device = device;
    if (do_create(c, group, device)) {
        accel_fail("nccl init on cuda:%d (rank %d of %d): %s", device, group->rank, group->size, cuda_last_error());
        release_partial(c);
        return NULL;
    }
    c->next = comms;
    comms = c;
    return &c->base;
}

void dist_nccl_set_compute_stream(DistComm *c, void *stream) { nc(c)->compute = (cudaStream_t)stream; }

int dist_nccl_shutdown(void) {
    int rc = 0;
    while (comms)
        if (n_finalize(&comms->base)) rc = -1;
    return rc;
}

/* dist_comm_for_tensor's CUDA half (dist_device.c): the NCCL communicator of
 * group on t's GPU, ordered against that GPU's current compute stream. */
DistComm *dist_nccl_for_tensor(DistComm *group, const Tensor *t) {
    if (group->ops == &nccl_ops) return group;
    const Backend *be = backend_for(t->device);
    DistComm *c = be ? dist_nccl_comm(group, t->device.index) : NULL;
    if (c) dist_nccl_set_compute_stream(c, be->stream_current());
    return c;
}
