/* dist_mpi.c: the "mpi" communicator backend: OpenMPI (built against
 * Debian's libopenmpi-dev 4.1 headers; libmpi.so.40 is loaded at run time,
 * see below), CPU buffers, on a duplicate of MPI_COMM_WORLD whose
 * error handler is MPI_ERRORS_RETURN, so every MPI call is checked by
 * mpi_check and a failure becomes an error naming the collective, our
 * file:line and MPI's error string.
 *
 * Launching (what was found to work on Debian 12 in a container, as root):
 *   mpirun --allow-run-as-root --oversubscribe -np 3 accel-lua train.lua
 * - as root, mpirun refuses to start without --allow-run-as-root (or the
 *   environment OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1);
 * - more ranks than cores need --oversubscribe (OpenMPI then also yields
 *   the CPU while polling);
 * - no btl options were needed here: shared memory (vader) with its CMA
 *   single-copy path works for 16 MB messages. Containers that forbid
 *   process_vm_readv (Docker's default seccomp profile without
 *   CAP_SYS_PTRACE) fail large messages; add
 *   `--mca btl_vader_single_copy_mechanism none` there (or set
 *   OMPI_MCA_btl_vader_single_copy_mechanism=none);
 * - Slurm: `srun --mpi=pmix -n N accel-lua train.lua` (Debian's OpenMPI is
 *   built with Slurm and external PMIx support). Without PMI wiring every
 *   task would come up as a one-process job; dist_mpi_init detects that
 *   (MPI's size differs from SLURM_STEP_NUM_TASKS) and says so.
 *
 * Threads: MPI_Init_thread asks for MPI_THREAD_MULTIPLE so the watchdog
 * thread may call MPI_Abort while the interpreter thread is blocked inside
 * a collective; with a lower level the watchdog ends the process with
 * _exit instead, and mpirun then ends the job.
 *
 * bf16 / f16: carried as MPI_UINT16_T; sum, max and min are our own
 * commutative MPI_Ops that widen each pair to float32 and round back.
 * bool is MPI_UINT8_T with max for sum/max and min for min. float8 is
 * carried as bytes (gather / broadcast only; dist.c refuses reductions).
 *
 * Non-blocking collectives are progressed by MPI only inside MPI calls
 * (OpenMPI has no asynchronous progress thread for them here): callers that
 * overlap communication with compute call dist_progress now and then. */
#include "dist.h"
#include <mpi.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- libmpi, loaded when a job first needs it ----
 * The program does not link libmpi: a plain `accel-lua script.lua` never
 * maps OpenMPI's libraries (they cost ~2 ms of start-up). dist_mpi_init
 * dlopens libmpi.so.40 (or $ACCEL_LUA_LIBMPI) with RTLD_GLOBAL, which
 * OpenMPI's plugins also need, and resolves the functions below plus the
 * predefined handles, which OpenMPI's mpi.h names as addresses of globals
 * (MPI_COMM_WORLD is &ompi_mpi_comm_world): OMPI_PREDEFINED_GLOBAL is
 * redefined to read them from the table. Same ABI as linking against it. */
#define MPI_FUNCS(X)                                                                                         \
    X(Init_thread) X(Initialized) X(Query_thread) X(Finalized) X(Finalize) X(Abort) X(Comm_set_errhandler)    \
    X(Comm_dup) X(Comm_free) X(Comm_rank) X(Comm_size) X(Comm_split_type) X(Comm_split) X(Error_string)       \
    X(Op_create) X(Op_free) X(Allreduce) X(Iallreduce) X(Reduce_scatter_block) X(Ireduce_scatter_block)      \
    X(Allgather) X(Iallgather) X(Allgatherv) X(Iallgatherv) X(Bcast) X(Ibcast) X(Barrier) X(Ibarrier) X(Wait)  \
    X(Test)
#define MPI_GLOBALS(X)                                                                                       \
    X(ompi_mpi_comm_world) X(ompi_mpi_float) X(ompi_mpi_double) X(ompi_mpi_uint16_t) X(ompi_mpi_int64_t)     \
    X(ompi_mpi_int32_t) X(ompi_mpi_uint8_t) X(ompi_mpi_op_sum) X(ompi_mpi_op_max) X(ompi_mpi_op_min)          \
    X(ompi_mpi_errors_return) X(ompi_mpi_info_null) X(ompi_request_null)

#define FN_FIELD(f) __typeof__(MPI_##f) *f;
#define GLOBAL_FIELD(g) void *g;
static struct {
    MPI_FUNCS(FN_FIELD)
    MPI_GLOBALS(GLOBAL_FIELD)
} lib;

#undef OMPI_PREDEFINED_GLOBAL
#define OMPI_PREDEFINED_GLOBAL(type, global) ((type)lib.global)

static int load_libmpi(void) {
    if (lib.Init_thread) return 0;
    const char *path = getenv("ACCEL_LUA_LIBMPI");
    if (!path || !*path) path = "libmpi.so.40";
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) return accel_fail_int("dist init: cannot load OpenMPI (%s); install libopenmpi3 or set ACCEL_LUA_LIBMPI", dlerror());
    const char *missing = NULL;
#define LOAD_FN(f) if (!(lib.f = (__typeof__(lib.f))dlsym(h, "MPI_" #f))) missing = "MPI_" #f;
#define LOAD_GLOBAL(g) if (!(lib.g = dlsym(h, #g))) missing = #g;
    MPI_GLOBALS(LOAD_GLOBAL)
    MPI_FUNCS(LOAD_FN)
    if (missing) {
        lib.Init_thread = NULL;
        return accel_fail_int("dist init: %s has no %s (an OpenMPI 4 or 5 libmpi.so.40 is needed)", path, missing);
    }
    return 0;
}

typedef struct {
    MPI_Comm comm;
    int thread_level;
    MPI_Op half_ops[2][3]; /* [bf16, f16][sum, max, min] */
} MpiState;

static MpiState mpi;

/* The communicator's MPI handle: the world's is mpi.comm, a split's a heap MPI_Comm. */
#define COMM(c) (*(MPI_Comm *)(c)->impl)

struct DistReq {
    MPI_Request r;
    int *counts; /* all_gather_v: counts[size] then displs[size]; live until completion */
};

static int mpi_fail(int rc, const char *what, const char *file, int line) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (lib.Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error code %d", rc);
    return accel_fail_int("%s: MPI error at %s:%d: %s", what, file, line, msg);
}

#define mpi_check(call, what)                                               \
    do {                                                                    \
        int rc_ = (call);                                                   \
        if (rc_ != MPI_SUCCESS) return mpi_fail(rc_, (what), __FILE__, __LINE__); \
    } while (0)

/* ---- dtypes and reduction ops ---- */

#define HALF_OP(NAME, LOAD, STORE, EXPR)                                      \
    static void NAME(void *in, void *inout, int *len, MPI_Datatype *dt) {     \
        (void)dt;                                                             \
        const uint16_t *a = in;                                               \
        uint16_t *b = inout;                                                  \
        for (int i = 0; i < *len; i++) {                                      \
            float x = LOAD(a[i]), y = LOAD(b[i]);                             \
            b[i] = STORE(EXPR);                                               \
        }                                                                     \
    }
HALF_OP(bf16_sum, bf16_to_f32, f32_to_bf16, x + y)
HALF_OP(bf16_max, bf16_to_f32, f32_to_bf16, x > y ? x : y)
HALF_OP(bf16_min, bf16_to_f32, f32_to_bf16, x < y ? x : y)
HALF_OP(f16_sum, f16_to_f32, f32_to_f16, x + y)
HALF_OP(f16_max, f16_to_f32, f32_to_f16, x > y ? x : y)
HALF_OP(f16_min, f16_to_f32, f32_to_f16, x < y ? x : y)

static MPI_Datatype mpi_type(DType dt) {
    switch (dt) {
    case DT_F32: return MPI_FLOAT;
    case DT_F64: return MPI_DOUBLE;
    case DT_BF16:
    case DT_F16: return MPI_UINT16_T;
    case DT_I64: return MPI_INT64_T;
    case DT_I32: return MPI_INT32_T;
    default: return MPI_UINT8_T; /* u8, bool, float8 */
    }
}

static MPI_Op mpi_op(DType dt, DistOp op) {
    int k = op == DIST_MAX ? 1 : op == DIST_MIN ? 2 : 0;
    if (dt == DT_BF16 || dt == DT_F16) return mpi.half_ops[dt == DT_F16][k];
    if (dt == DT_BOOL) return op == DIST_MIN ? MPI_MIN : MPI_MAX;
    return k == 1 ? MPI_MAX : k == 2 ? MPI_MIN : MPI_SUM;
}

static int create_ops(void) {
    MPI_User_function *fns[2][3] = {{bf16_sum, bf16_max, bf16_min}, {f16_sum, f16_max, f16_min}};
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 3; k++) mpi_check(lib.Op_create(fns[d][k], 1, &mpi.half_ops[d][k]), "dist init (MPI_Op_create)");
    return 0;
}

static int check_count(int64_t n, const char *what) {
    if (n > INT_MAX) return accel_fail_int("%s: %lld elements exceed MPI's count limit (2^31-1 per call)", what, (long long)n);
    return 0;
}

/* ---- requests ---- */

static DistReq *req_new(void) {
    DistReq *r = accel_calloc(1, sizeof *r);
    if (r) r->r = MPI_REQUEST_NULL;
    return r;
}

static void req_free(DistReq *r) {
    free(r->counts);
    free(r);
}

/* Hands a started request to the caller, or fails (freeing it). */
static int req_started(DistReq *r, int rc, const char *what, DistReq **out) {
    if (rc != MPI_SUCCESS) {
        req_free(r);
        return mpi_fail(rc, what, __FILE__, __LINE__);
    }
    *out = r;
    return 0;
}

static int m_wait(DistComm *c, DistReq *r, const char *what) {
    (void)c;
    int rc = lib.Wait(&r->r, MPI_STATUS_IGNORE);
    req_free(r);
    mpi_check(rc, what);
    return 0;
}

static int m_test(DistComm *c, DistReq *r, int *done, const char *what) {
    (void)c;
    int rc = lib.Test(&r->r, done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || *done) req_free(r);
    mpi_check(rc, what);
    return 0;
}

/* ---- collectives ---- */

static int m_all_reduce(DistComm *c, void *buf, int64_t n, DType dt, DistOp op, DistReq **req) {
        if (check_count(n, "all_reduce")) return -1;
    MPI_Datatype t = mpi_type(dt);
    if (!req) {
        mpi_check(lib.Allreduce(MPI_IN_PLACE, buf, (int)n, t, mpi_op(dt, op), COMM(c)), "all_reduce");
        return 0;
    }
    DistReq *r = req_new();
    if (!r) return -1;
    return req_started(r, lib.Iallreduce(MPI_IN_PLACE, buf, (int)n, t, mpi_op(dt, op), COMM(c), &r->r), "all_reduce", req);
}

static int m_reduce_scatter(DistComm *c, const void *in, void *out, int64_t n, DType dt, DistOp op, DistReq **req) {
    if (check_count(n * c->size, "reduce_scatter")) return -1;
    MPI_Datatype t = mpi_type(dt);
    if (!req) {
        mpi_check(lib.Reduce_scatter_block(in, out, (int)n, t, mpi_op(dt, op), COMM(c)), "reduce_scatter");
        return 0;
    }
    DistReq *r = req_new();
    if (!r) return -1;
    return req_started(r, lib.Ireduce_scatter_block(in, out, (int)n, t, mpi_op(dt, op), COMM(c), &r->r), "reduce_scatter", req);
}

static int m_all_gather(DistComm *c, const void *in, void *out, int64_t n, DType dt, DistReq **req) {
    if (check_count(n * c->size, "all_gather")) return -1;
    MPI_Datatype t = mpi_type(dt);
    if (!req) {
        mpi_check(lib.Allgather(in, (int)n, t, out, (int)n, t, COMM(c)), "all_gather");
        return 0;
    }
    DistReq *r = req_new();
    if (!r) return -1;
    return req_started(r, lib.Iallgather(in, (int)n, t, out, (int)n, t, COMM(c), &r->r), "all_gather", req);
}

static int m_all_gather_v(DistComm *c, const void *in, void *out, const int64_t *counts, DType dt, DistReq **req) {
    int64_t total = 0;
    for (int i = 0; i < c->size; i++) total += counts[i];
    if (check_count(total, "all_gather_v")) return -1;
    DistReq *r = req_new();
    if (!r) return -1;
    if (!(r->counts = accel_malloc(2 * sizeof(int) * (size_t)c->size))) return req_free(r), -1;
    int *cnt = r->counts, *displs = r->counts + c->size;
    for (int i = 0, at = 0; i < c->size; at += cnt[i], i++) cnt[i] = (int)counts[i], displs[i] = at;
    MPI_Datatype t = mpi_type(dt);
    if (!req) {
        int rc = lib.Allgatherv(in, cnt[c->rank], t, out, cnt, displs, t, COMM(c));
        req_free(r);
        mpi_check(rc, "all_gather_v");
        return 0;
    }
    return req_started(r, lib.Iallgatherv(in, cnt[c->rank], t, out, cnt, displs, t, COMM(c), &r->r), "all_gather_v", req);
}

static int m_broadcast(DistComm *c, void *buf, int64_t n, DType dt, int root, DistReq **req) {
        if (check_count(n, "broadcast")) return -1;
    if (!req) {
        mpi_check(lib.Bcast(buf, (int)n, mpi_type(dt), root, COMM(c)), "broadcast");
        return 0;
    }
    DistReq *r = req_new();
    if (!r) return -1;
    return req_started(r, lib.Ibcast(buf, (int)n, mpi_type(dt), root, COMM(c), &r->r), "broadcast", req);
}

static int m_barrier(DistComm *c, DistReq **req) {
        if (!req) {
        mpi_check(lib.Barrier(COMM(c)), "barrier");
        return 0;
    }
    DistReq *r = req_new();
    if (!r) return -1;
    return req_started(r, lib.Ibarrier(COMM(c), &r->r), "barrier", req);
}

/* ---- lifetime ---- */

static void m_abort(DistComm *c, int code) {
    (void)c;
    fflush(stdout);
    fflush(stderr);
    if (mpi.thread_level >= MPI_THREAD_MULTIPLE) lib.Abort(MPI_COMM_WORLD, code);
    _exit(code);
}

static int m_finalize(DistComm *c) {
    (void)c;
    int done = 0;
    mpi_check(lib.Finalized(&done), "finalize (MPI_Finalized)");
    if (done) return 0;
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 3; k++) mpi_check(lib.Op_free(&mpi.half_ops[d][k]), "finalize (MPI_Op_free)");
    mpi_check(lib.Comm_free(&mpi.comm), "finalize (MPI_Comm_free)");
    mpi_check(lib.Finalize(), "finalize (MPI_Finalize)");
    return 0;
}

/* ---- sub-communicators ---- */

static int m_split(DistComm *parent, int color, int key, DistComm *out) {
    MPI_Comm *h = accel_malloc(sizeof *h);
    if (!h) return -1;
    int rc = lib.Comm_split(COMM(parent), color, key, h);
    if (rc != MPI_SUCCESS) {
        free(h);
        return mpi_fail(rc, "dist_split (MPI_Comm_split)", __FILE__, __LINE__);
    }
    out->impl = h;
    mpi_check(lib.Comm_set_errhandler(*h, MPI_ERRORS_RETURN), "dist_split (MPI_Comm_set_errhandler)");
    mpi_check(lib.Comm_rank(*h, &out->rank), "dist_split (MPI_Comm_rank)");
    mpi_check(lib.Comm_size(*h, &out->size), "dist_split (MPI_Comm_size)");
    return 0;
}

static int m_comm_free(DistComm *c) {
    MPI_Comm *h = c->impl;
    c->impl = NULL;
    int rc = lib.Comm_free(h);
    free(h);
    mpi_check(rc, "dist_comm_free (MPI_Comm_free)");
    return 0;
}

static const DistBackendOps mpi_ops = {
    .name = "mpi",
    .all_reduce = m_all_reduce,
    .reduce_scatter = m_reduce_scatter,
    .all_gather = m_all_gather,
    .all_gather_v = m_all_gather_v,
    .broadcast = m_broadcast,
    .barrier = m_barrier,
    .wait = m_wait,
    .test = m_test,
    .abort = m_abort,
    .finalize = m_finalize,
    .split = m_split,
    .comm_free = m_comm_free,
};

static int local_ranks(DistComm *c) {
    MPI_Comm node;
    mpi_check(lib.Comm_split_type(mpi.comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node), "dist init (local ranks)");
    int rc1 = lib.Comm_rank(node, &c->local_rank), rc2 = lib.Comm_size(node, &c->local_size);
    int rc3 = lib.Comm_free(&node);
    mpi_check(rc1, "dist init (local rank)");
    mpi_check(rc2, "dist init (local size)");
    mpi_check(rc3, "dist init (local ranks)");
    return 0;
}

int dist_mpi_init(DistComm *c, int expected) {
    int inited = 0;
    if (load_libmpi()) return -1;
    /* Non-blocking allreduce (DDP buckets): libnbc's default choice for an
     * in-place buffer is binomial, measured 2x slower than its Rabenseifner
     * (reduce-scatter + all-gather) on 25 MB between 2 ranks (28 -> 11-13 ms,
     * as fast as the blocking tuned allreduce). A user's setting wins. */
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
    mpi_check(lib.Initialized(&inited), "dist init (MPI_Initialized)");
    if (!inited) mpi_check(lib.Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &mpi.thread_level), "dist init (MPI_Init_thread)");
    else mpi_check(lib.Query_thread(&mpi.thread_level), "dist init (MPI_Query_thread)");
    mpi_check(lib.Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "dist init (MPI_Comm_set_errhandler)");
    mpi_check(lib.Comm_dup(MPI_COMM_WORLD, &mpi.comm), "dist init (MPI_Comm_dup)");
    mpi_check(lib.Comm_set_errhandler(mpi.comm, MPI_ERRORS_RETURN), "dist init (MPI_Comm_set_errhandler)");
    c->impl = &mpi.comm;
    mpi_check(lib.Comm_rank(mpi.comm, &c->rank), "dist init (MPI_Comm_rank)");
    mpi_check(lib.Comm_size(mpi.comm, &c->size), "dist init (MPI_Comm_size)");
    if (expected > 1 && c->size != expected)
        return accel_fail_int("dist init: the launcher started %d processes but MPI sees a job of %d; under Slurm run "
                              "`srun --mpi=pmix` (OpenMPI needs PMIx/PMI2 wiring to join the tasks)", expected, c->size);
    if (local_ranks(c) || create_ops()) return -1;
    c->ops = &mpi_ops;
    return 0;
}
