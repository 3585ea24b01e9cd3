/* backend_sim.c: the simulated device "sim", a backend that behaves like
 * a GPU where it matters for the seam, built into every build for tests.
 *
 *  - Memory is not host-addressable. Storage lives in a private region R
 *    the backend reaches itself; what alloc returns are handles in a
 *    second region H of the same size, mapped PROT_NONE, at the same
 *    offset (handle = H + (real - R)). A handle dereferenced anywhere
 *    outside this file faults (SIGSEGV); interior pointers (views, byte
 *    offsets) translate by the same constant. host_ptr is NULL, so the
 *    host-access API stages through to_host / from_host. A pointer given
 *    to an entry that is not a handle (an operand left on another device)
 *    aborts on the submitting thread with a message.
 *  - Work runs asynchronously, in submission order, on one worker thread
 *    (the device's one stream). Every entry copies its arguments into a
 *    task and returns; the host waits only in synchronize, event_sync,
 *    to_host and the entries that return a host value (cross_entropy_fwd's
 *    bad row, norm_pow). from_host copies the host bytes into the task, so
 *    the caller's buffer is free on return, as cudaMemcpyAsync from
 *    pinned staging would be. Failures of queued work (a GEMM library
 *    error) are sticky: the next synchronize / to_host reports them.
 *  - Each entry is the CPU backend's (backend_cpu.c) on translated pointers,
 *    except fp8_gemm, which the CPU lacks: sim stands in for the CUDA
 *    backend's native fp8 GEMM, taking and declining the operands cuBLASLt
 *    takes and declines (backend_cuda.c), and computing what the core's
 *    emulation computes (decode, the CPU's float32 GEMM, one scale pass),
 *    so both of the core's fp8 paths run and are compared on every machine.
 *  - The allocator keeps its bookkeeping out of band (free lists of
 *    malloc'd nodes), never in device memory, so freeing a block that
 *    queued work still uses is safe: reuse is ordered after that work on
 *    the one stream, as with a CUDA caching allocator.
 * Single host thread: alloc/free and submissions come from the interpreter
 * thread, like the CPU allocator. */
#include "backend.h"
#include "backend_cpu.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/mman.h>
#include <unistd.h>

#define SIM_SPAN ((size_t)64 << 30)     /* virtual size of each region */
#define SIM_COMMIT ((size_t)64 << 20)   /* R is made read-write in steps of this */
#define SIM_BUCKETS 1024

/* ---------------- memory ---------------- */

typedef struct FreeNode {
    struct FreeNode *next;
    size_t off, nbytes;
} FreeNode;

static char *real_base, *handle_base;
static size_t top, committed, cached, live, cap;
static FreeNode *buckets[SIM_BUCKETS];

/* The device's memory size: ACCEL_LUA_SIM_MEMORY (bytes), else the
 * machine's physical memory, at most SIM_SPAN. Past it an allocation fails
 * (the caller's "out of memory"), as cudaMalloc does, instead of the kernel
 * killing the process when the pages are touched. */
static int sim_capacity(size_t *out) {
    const char *s = getenv("ACCEL_LUA_SIM_MEMORY");
    unsigned long long v = 0;
    if (s && *s) {
        char *end;
        v = strtoull(s, &end, 10);
        if (*s < '0' || *s > '9' || *end || v == 0 || v == ULLONG_MAX)
            return accel_fail_int("sim: ACCEL_LUA_SIM_MEMORY=%s is not a number of bytes > 0", s);
    } else {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        v = pages > 0 && page > 0 ? (unsigned long long)pages * (unsigned long long)page : SIM_SPAN;
    }
    *out = v < SIM_SPAN ? (size_t)v : SIM_SPAN;
    return 0;
}

static int sim_reserve(void) {
    if (real_base) return 0;
    size_t capacity = 0;
    if (sim_capacity(&capacity) < 0) return -1; /* checked first: a bad setting reserves nothing */
    void *r = mmap(NULL, SIM_SPAN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *h = r == MAP_FAILED ? MAP_FAILED : mmap(NULL, SIM_SPAN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (h == MAP_FAILED) {
        if (r != MAP_FAILED) munmap(r, SIM_SPAN);
        return accel_fail_int("sim: cannot reserve %zu bytes of address space", SIM_SPAN);
    }
    real_base = r, handle_base = h;
    cap = capacity;
    return 0;
}

/* The backend's own address for a handle (NULL stays NULL). */
static void *real(const void *handle) {
    return handle ? real_base + ((const char *)handle - handle_base) : NULL;
}

int backend_sim_is_handle(const void *p) {
    return handle_base && (const char *)p >= handle_base && (const char *)p < handle_base + SIM_SPAN;
}

/* A pointer handed to an entry that is not one of our handles is host (or
 * another device's) memory: a mixed-device bug above the backend. Caught on
 * the submitting thread, so the stack shows the culprit. */
static void expect_handle(const void *p, const char *entry) {
    if (!p || backend_sim_is_handle(p)) return;
    fprintf(stderr, "sim: %s was given %p, which is not sim memory (an operand on another device)\n", entry, p);
    abort();
}

static void sim_empty_cache(void);

static size_t bucket_of(size_t n) { return (n / 32 * 2654435761u) % SIM_BUCKETS; }

static void *sim_alloc(size_t nbytes) {
    if (sim_reserve() < 0) return NULL;
    size_t n = alloc_round_size(nbytes);
    for (FreeNode **pp = &buckets[bucket_of(n)]; *pp; pp = &(*pp)->next) {
        if ((*pp)->nbytes != n) continue;
        FreeNode *f = *pp;
        size_t off = f->off;
        *pp = f->next;
        free(f);
        cached -= n, live += n;
        return handle_base + off;
    }
    if (n > cap - live || n > SIM_SPAN - top) return NULL;
    if (n > cap - live - cached) sim_empty_cache(); /* as CUDA's caching allocator, before it gives up */
    if (top + n > committed) {
        size_t want = (top + n + SIM_COMMIT - 1) / SIM_COMMIT * SIM_COMMIT;
        if (want > SIM_SPAN) want = SIM_SPAN;
        if (mprotect(real_base + committed, want - committed, PROT_READ | PROT_WRITE) != 0) return NULL;
        committed = want;
    }
    size_t off = top;
    top += n, live += n;
    return handle_base + off;
}

static void sim_free(void *p, size_t nbytes) {
    if (!p) return;
    FreeNode *f = malloc(sizeof *f);
    if (!f) return; /* the block is lost to reuse, nothing else */
    f->off = (size_t)((char *)p - handle_base);
    f->nbytes = alloc_round_size(nbytes);
    size_t k = bucket_of(f->nbytes);
    f->next = buckets[k];
    buckets[k] = f;
    cached += f->nbytes, live -= f->nbytes;
}

static size_t sim_cached_bytes(void) { return cached; }

/* ---------------- the worker: one stream ---------------- */

typedef struct Task {
    struct Task *next;
    void (*run)(void *args);
    /* args follow, max-aligned */
} Task;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv_work = PTHREAD_COND_INITIALIZER, cv_done = PTHREAD_COND_INITIALIZER;
static Task *head, *tail;
static uint64_t submitted, completed;
static int started, held; /* held: the worker starts nothing (tests) */
static _Atomic int sticky_error; /* set by the worker, read by the host */

static int backend_sim_synchronize(void);

static void *worker(void *unused) {
    (void)unused;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (!head || held) pthread_cond_wait(&cv_work, &mu);
        Task *t = head;
        head = t->next;
        if (!head) tail = NULL;
        pthread_mutex_unlock(&mu);
        t->run((char *)t + sizeof(Task));
        free(t);
        pthread_mutex_lock(&mu);
        completed++;
        pthread_cond_broadcast(&cv_done);
    }
    return NULL;
}

/* fork: the child has no worker thread; it starts its own on its next
 * submission and runs what was still queued at the fork (a task running at
 * that moment is the parent's: the child counts it done, possibly half
 * applied, so fork after a synchronize). The queue lock is held across the
 * fork so the child's copy is consistent. */
static void fork_prepare(void) { pthread_mutex_lock(&mu); }
static void fork_parent(void) { pthread_mutex_unlock(&mu); }
static void fork_child(void) {
    uint64_t queued = 0;
    for (Task *t = head; t; t = t->next) queued++;
    completed = submitted - queued;
    started = 0;
    pthread_mutex_unlock(&mu);
}

/* exit: the queued work finishes before the libraries the kernels use
 * (oneDNN's JIT code, OpenBLAS's threads, libgomp) are torn down; a task
 * still running then would crash in them. Exit handlers run in reverse
 * order of registration, so one a library registers later (oneDNN does on
 * first use) runs before this one: the Lua state's close drains first
 * (backend_synchronize_all, bindings/accel.c); this covers an exit
 * without it (os.exit(code) without close, a C program). */
static void drain_at_exit(void) {
    if (started && !held) (void)backend_sim_synchronize();
}

static void start_worker(void) {
    static int atfork_done, atexit_done;
    if (!atfork_done && pthread_atfork(fork_prepare, fork_parent, fork_child) == 0) atfork_done = 1;
    if (!atexit_done && atexit(drain_at_exit) == 0) atexit_done = 1;
    pthread_t th;
    pthread_attr_t at;
    if (pthread_attr_init(&at) == 0 && pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED) == 0 &&
        pthread_create(&th, &at, worker, NULL) == 0)
        started = 1;
    pthread_attr_destroy(&at);
}

/* Queue run(copy of args); runs inline (still in order) if the worker or
 * the task cannot be had, after the work before it. */
static void submit(void (*run)(void *), const void *args, size_t size) {
    if (!started) start_worker();
    Task *t = started ? malloc(sizeof(Task) + size) : NULL;
    if (!t) {
        backend_sim_synchronize();
        void *copy = malloc(size ? size : 1);
        if (!copy) {
            sticky_error = 1;
            return;
        }
        memcpy(copy, args, size);
        run(copy);
        free(copy);
        return;
    }
    t->next = NULL;
    t->run = run;
    memcpy((char *)t + sizeof(Task), args, size);
    pthread_mutex_lock(&mu);
    if (tail) tail->next = t;
    else head = t;
    tail = t;
    submitted++;
    pthread_cond_signal(&cv_work);
    pthread_mutex_unlock(&mu);
}

static void wait_for(uint64_t seq) {
    pthread_mutex_lock(&mu);
    while (completed < seq) pthread_cond_wait(&cv_done, &mu);
    pthread_mutex_unlock(&mu);
}

static int backend_sim_synchronize(void) {
    pthread_mutex_lock(&mu);
    uint64_t seq = submitted;
    pthread_mutex_unlock(&mu);
    wait_for(seq);
    int rc = sticky_error ? accel_fail_int("sim: queued work failed (out of memory or a library error)") : 0;
    sticky_error = 0;
    return rc;
}

static void sim_empty_cache(void) {
    backend_sim_synchronize(); /* nothing queued may still use a cached block */
    for (int i = 0; i < SIM_BUCKETS; i++) {
        for (FreeNode *f = buckets[i], *next; f; f = next) {
            next = f->next;
            madvise(real(handle_base + f->off), f->nbytes, MADV_DONTNEED); /* contents are garbage anyway */
            free(f);
        }
        buckets[i] = NULL;
    }
    cached = 0;
    /* the address range stays reserved; blocks are reallocated from top */
}

/* ---------------- host copies, streams, events ---------------- */

typedef struct {
    void *dev;
    size_t nbytes;
    /* bytes follow */
} CopyIn;

static void run_copy_in(void *a) {
    CopyIn *c = a;
    memcpy(real(c->dev), c + 1, c->nbytes);
}

static int sim_from_host(void *dev, const void *host, size_t nbytes) {
    if (!nbytes) return 0;
    CopyIn *c = malloc(sizeof *c + nbytes);
    if (!c) return accel_fail_int("sim: out of memory staging %zu bytes", nbytes);
    c->dev = dev, c->nbytes = nbytes;
    memcpy(c + 1, host, nbytes);
    submit(run_copy_in, c, sizeof *c + nbytes);
    free(c);
    return 0;
}

static int sim_to_host(void *host, const void *dev, size_t nbytes) {
    if (backend_sim_synchronize() < 0) return -1;
    if (nbytes) memcpy(host, real(dev), nbytes);
    return 0;
}

static void *sim_host_ptr(void *dev) {
    (void)dev;
    return NULL;
}

typedef struct {
    void *dev;
    size_t nbytes;
} ZeroArgs;
static void run_zero(void *a) {
    ZeroArgs *z = a;
    memset(real(z->dev), 0, z->nbytes);
}
static void sim_zero(void *dev, size_t nbytes) {
    if (nbytes) submit(run_zero, &(ZeroArgs){dev, nbytes}, sizeof(ZeroArgs));
}

static char sim_stream_token;
static void *sim_stream_current(void) { return &sim_stream_token; }
static int sim_sync(void) { return backend_sim_synchronize(); }
static void *sim_event_new(void) { return calloc(1, sizeof(uint64_t)); }
static void sim_event_free(void *ev) { free(ev); }
static int sim_event_record(void *ev) {
    pthread_mutex_lock(&mu);
    *(uint64_t *)ev = submitted;
    pthread_mutex_unlock(&mu);
    return 0;
}
static int sim_event_wait(void *ev) { /* one stream: already ordered after ev */
    (void)ev;
    return 0;
}
static int sim_event_sync(void *ev) {
    wait_for(*(uint64_t *)ev);
    return 0;
}

/* ---------------- compute entries: queue the CPU backend's ---------------- */

#define R(p) real(p)

/* n-d launches: the description's bases are handles. */
typedef struct {
    StridedIter it;
    int op;
    DType d1, d2;
    double p1, p2;
} NdArgs;

static void nd_translate(StridedIter *it) {
    for (int k = 0; k < it->nops; k++) it->base[k] = R(it->base[k]);
}
static void run_binary(void *a) {
    NdArgs *x = a;
    nd_translate(&x->it);
    backend_cpu.binary((KBinOp)x->op, x->d1, &x->it);
}
static void run_unary(void *a) {
    NdArgs *x = a;
    nd_translate(&x->it);
    backend_cpu.unary((KUnOp)x->op, x->d1, &x->it, x->p1, x->p2);
}
static void run_where(void *a) {
    NdArgs *x = a;
    nd_translate(&x->it);
    backend_cpu.where(&x->it);
}
static void run_copy(void *a) {
    NdArgs *x = a;
    nd_translate(&x->it);
    backend_cpu.copy(&x->it, x->d1, x->d2);
}
static void run_fill(void *a) {
    NdArgs *x = a;
    nd_translate(&x->it);
    backend_cpu.fill(&x->it, x->d1, x->p1);
}
static void expect_nd(const StridedIter *it, const char *entry) {
    for (int k = 0; k < it->nops; k++) expect_handle(it->base[k], entry);
}
static void sim_binary(KBinOp op, DType cdt, StridedIter *it) {
    expect_nd(it, "binary");
    submit(run_binary, &(NdArgs){.it = *it, .op = op, .d1 = cdt}, sizeof(NdArgs));
}
static void sim_unary(KUnOp op, DType cdt, StridedIter *it, double p1, double p2) {
    expect_nd(it, "unary");
    submit(run_unary, &(NdArgs){.it = *it, .op = op, .d1 = cdt, .p1 = p1, .p2 = p2}, sizeof(NdArgs));
}
static void sim_where(StridedIter *it) {
    expect_nd(it, "where");
    submit(run_where, &(NdArgs){.it = *it}, sizeof(NdArgs));
}
static void sim_copy(StridedIter *it, DType odt, DType adt) {
    expect_nd(it, "copy");
    submit(run_copy, &(NdArgs){.it = *it, .d1 = odt, .d2 = adt}, sizeof(NdArgs));
}
static void sim_fill(StridedIter *it, DType dt, double v) {
    expect_nd(it, "fill");
    submit(run_fill, &(NdArgs){.it = *it, .d1 = dt, .p1 = v}, sizeof(NdArgs));
}

/* Every other entry: an argument block of scalars, handles and parameter
 * structs (copied by value), and a runner that translates the handles. */
typedef struct {
    int i0, i1;
    DType dt;
    int64_t n[6];
    double f[3];
    void *p[10];
    size_t es;
    union {
        KSgdArgs sgd;
        KAdamArgs adam;
        KConv2d conv;
        KPool2d pool;
        KAttn attn;
        KRngFill rng;
    } s;
    int64_t *ret_i;
    double *ret_f;
} Args;

static void submit_args(void (*run)(void *), const Args *a) {
    for (int k = 0; k < 10; k++) expect_handle(a->p[k], "an entry");
    submit(run, a, sizeof *a);
}

static void run_unary_backward(void *v) {
    Args *a = v;
    backend_cpu.unary_backward((KUnOp)a->i0, a->dt, a->n[0], R(a->p[0]), R(a->p[1]), R(a->p[2]), R(a->p[3]), a->f[0], a->f[1]);
}
static void sim_unary_backward(KUnOp op, DType cdt, int64_t n, const void *x, const void *y, const void *gy, void *gx,
                               double p1, double p2) {
    submit_args(run_unary_backward, &(Args){.i0 = op, .dt = cdt, .n = {n}, .p = {(void *)x, (void *)y, (void *)gy, gx},
                                            .f = {p1, p2}});
}

static void run_gemm(void *v) {
    Args *a = v;
    if (backend_cpu.gemm(a->dt, a->i0, a->i1, a->n[0], a->n[1], a->n[2], a->f[0], R(a->p[0]), a->n[3], R(a->p[1]),
                         a->n[4], a->f[1], R(a->p[2]), a->n[5]) != 0)
        sticky_error = 1;
}
static int sim_gemm(DType dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A, int64_t lda,
                    const void *Bm, int64_t ldb, double beta, void *C, int64_t ldc) {
    if (dt != DT_F32 && dt != DT_F64 && dt != DT_BF16) return -1;
    submit_args(run_gemm, &(Args){.dt = dt, .i0 = ta, .i1 = tb, .n = {M, N, K, lda, ldb, ldc}, .f = {alpha, beta},
                                  .p = {(void *)A, (void *)Bm, C}});
    return 0;
}

static void run_reduce(void *v) {
    Args *a = v;
    backend_cpu.reduce((KRedOp)a->i0, a->dt, R(a->p[0]), a->n[0], a->n[1], a->n[2], R(a->p[1]));
}
static void sim_reduce(KRedOp op, DType cdt, const void *x, int64_t outer, int64_t n, int64_t inner, void *out) {
    submit_args(run_reduce, &(Args){.i0 = op, .dt = cdt, .n = {outer, n, inner}, .p = {(void *)x, out}});
}

static void run_argreduce(void *v) {
    Args *a = v;
    backend_cpu.argreduce(a->i0, a->dt, R(a->p[0]), a->n[0], a->n[1], a->n[2], R(a->p[1]), R(a->p[2]));
}
static void sim_argreduce(int want_max, DType cdt, const void *x, int64_t outer, int64_t n, int64_t inner, void *vals,
                          int64_t *idx) {
    submit_args(run_argreduce, &(Args){.i0 = want_max, .dt = cdt, .n = {outer, n, inner}, .p = {(void *)x, vals, idx}});
}

static void run_softmax(void *v) {
    Args *a = v;
    backend_cpu.softmax(a->i0, a->dt, R(a->p[0]), a->n[0], a->n[1], a->n[2], R(a->p[1]));
}
static void sim_softmax(int log, DType cdt, const void *x, int64_t outer, int64_t n, int64_t inner, void *y) {
    submit_args(run_softmax, &(Args){.i0 = log, .dt = cdt, .n = {outer, n, inner}, .p = {(void *)x, y}});
}

static void run_softmax_backward(void *v) {
    Args *a = v;
    backend_cpu.softmax_backward(a->i0, a->dt, R(a->p[0]), R(a->p[1]), a->n[0], a->n[1], a->n[2], R(a->p[2]));
}
static void sim_softmax_backward(int log, DType cdt, const void *y, const void *gy, int64_t outer, int64_t n,
                                 int64_t inner, void *gx) {
    submit_args(run_softmax_backward, &(Args){.i0 = log, .dt = cdt, .n = {outer, n, inner}, .p = {(void *)y, (void *)gy, gx}});
}

static void run_ce_fwd(void *v) {
    Args *a = v;
    *a->ret_i = backend_cpu.cross_entropy_fwd(a->dt, R(a->p[0]), a->n[0], a->n[1], R(a->p[1]), a->n[2], a->f[0],
                                              R(a->p[2]), R(a->p[3]));
}
static int64_t sim_ce_fwd(DType cdt, const void *x, int64_t N, int64_t C, const int64_t *t, int64_t ignore, double ls,
                          void *loss, void *lse) {
    int64_t bad = -1; /* a host value: wait for it */
    submit_args(run_ce_fwd, &(Args){.dt = cdt, .n = {N, C, ignore}, .f = {ls}, .p = {(void *)x, (void *)t, loss, lse},
                                    .ret_i = &bad});
    backend_sim_synchronize();
    return bad;
}

static void run_ce_bwd(void *v) {
    Args *a = v;
    backend_cpu.cross_entropy_bwd(a->dt, R(a->p[0]), R(a->p[1]), a->n[0], a->n[1], R(a->p[2]), a->n[2], a->f[0],
                                  R(a->p[3]), R(a->p[4]));
}
static void sim_ce_bwd(DType cdt, const void *x, const void *lse, int64_t N, int64_t C, const int64_t *t,
                       int64_t ignore, double ls, const void *g, void *gx) {
    submit_args(run_ce_bwd, &(Args){.dt = cdt, .n = {N, C, ignore}, .f = {ls},
                                    .p = {(void *)x, (void *)lse, (void *)t, (void *)g, gx}});
}

static void run_ln_fwd(void *v) {
    Args *a = v;
    backend_cpu.layernorm_fwd(a->dt, R(a->p[0]), R(a->p[1]), R(a->p[2]), a->n[0], a->n[1], a->f[0], R(a->p[3]),
                              R(a->p[4]), R(a->p[5]));
}
static void sim_ln_fwd(DType cdt, const void *x, const void *w, const void *b, int64_t rows, int64_t C, double eps,
                       void *y, void *mean, void *rstd) {
    submit_args(run_ln_fwd, &(Args){.dt = cdt, .n = {rows, C}, .f = {eps},
                                    .p = {(void *)x, (void *)w, (void *)b, y, mean, rstd}});
}

static void run_ln_bwd(void *v) {
    Args *a = v;
    backend_cpu.layernorm_bwd(a->dt, R(a->p[0]), R(a->p[1]), R(a->p[2]), R(a->p[3]), R(a->p[4]), a->n[0], a->n[1],
                              R(a->p[5]), R(a->p[6]), R(a->p[7]));
}
static void sim_ln_bwd(DType cdt, const void *x, const void *w, const void *mean, const void *rstd, const void *gy,
                       int64_t rows, int64_t C, void *gx, void *gw, void *gb) {
    submit_args(run_ln_bwd, &(Args){.dt = cdt, .n = {rows, C},
                                    .p = {(void *)x, (void *)w, (void *)mean, (void *)rstd, (void *)gy, gx, gw, gb}});
}

static void run_gather(void *v) {
    Args *a = v;
    (a->i0 ? backend_cpu.index_select : backend_cpu.gather)(R(a->p[0]), a->n[0], a->n[1], a->n[2], R(a->p[1]), a->n[3],
                                                            R(a->p[2]), a->es);
}
static void sim_gather(const void *x, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m, void *out,
                       size_t es) {
    submit_args(run_gather, &(Args){.i0 = 0, .n = {outer, n, inner, m}, .p = {(void *)x, (void *)idx, out}, .es = es});
}
static void sim_index_select(const void *x, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m,
                             void *out, size_t es) {
    submit_args(run_gather, &(Args){.i0 = 1, .n = {outer, n, inner, m}, .p = {(void *)x, (void *)idx, out}, .es = es});
}

static void run_scatter(void *v) {
    Args *a = v;
    (a->i0 ? backend_cpu.index_add : backend_cpu.scatter_add)(a->dt, R(a->p[0]), a->n[0], a->n[1], a->n[2], R(a->p[1]),
                                                              a->n[3], R(a->p[2]));
}
static void sim_scatter_add(DType cdt, void *gx, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m,
                            const void *gout) {
    submit_args(run_scatter, &(Args){.i0 = 0, .dt = cdt, .n = {outer, n, inner, m}, .p = {gx, (void *)idx, (void *)gout}});
}
static void sim_index_add(DType cdt, void *gx, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m,
                          const void *gout) {
    submit_args(run_scatter, &(Args){.i0 = 1, .dt = cdt, .n = {outer, n, inner, m}, .p = {gx, (void *)idx, (void *)gout}});
}

static void run_sgd(void *v) {
    Args *a = v;
    backend_cpu.sgd(a->dt, a->n[0], R(a->p[0]), R(a->p[1]), R(a->p[2]), a->i0, &a->s.sgd);
}
static void sim_sgd(DType cdt, int64_t n, void *p, const void *g, void *buf, int init, const KSgdArgs *s) {
    submit_args(run_sgd, &(Args){.dt = cdt, .n = {n}, .p = {p, (void *)g, buf}, .i0 = init, .s.sgd = *s});
}

static void run_adam(void *v) {
    Args *a = v;
    backend_cpu.adam(a->dt, a->n[0], R(a->p[0]), R(a->p[1]), R(a->p[2]), R(a->p[3]), R(a->p[4]), &a->s.adam);
}
static void sim_adam(DType cdt, int64_t n, void *p, const void *g, void *m, void *v, void *vmax, const KAdamArgs *s) {
    submit_args(run_adam, &(Args){.dt = cdt, .n = {n}, .p = {p, (void *)g, m, v, vmax}, .s.adam = *s});
}

static void run_norm_pow(void *v) {
    Args *a = v;
    *a->ret_f = backend_cpu.norm_pow(a->dt, a->n[0], R(a->p[0]), a->f[0]);
}
static double sim_norm_pow(DType cdt, int64_t n, const void *x, double p) {
    double r = 0; /* a host value: wait for it */
    submit_args(run_norm_pow, &(Args){.dt = cdt, .n = {n}, .p = {(void *)x}, .f = {p}, .ret_f = &r});
    backend_sim_synchronize();
    return r;
}

static void run_conv_fwd(void *v) {
    Args *a = v;
    if (backend_cpu.conv2d_fwd(a->dt, &a->s.conv, R(a->p[0]), R(a->p[1]), R(a->p[2]), R(a->p[3])) != 0) sticky_error = 1;
}
static int sim_conv_fwd(DType dt, const KConv2d *g, const void *x, const void *w, const void *b, void *y) {
    submit_args(run_conv_fwd, &(Args){.dt = dt, .s.conv = *g, .p = {(void *)x, (void *)w, (void *)b, y}});
    return 0;
}

static void run_conv_bwd(void *v) {
    Args *a = v;
    if (backend_cpu.conv2d_bwd(a->dt, &a->s.conv, R(a->p[0]), R(a->p[1]), R(a->p[2]), R(a->p[3]), R(a->p[4]),
                               R(a->p[5])) != 0)
        sticky_error = 1;
}
static int sim_conv_bwd(DType dt, const KConv2d *g, const void *x, const void *w, const void *gy, void *gx, void *gw,
                        void *gb) {
    submit_args(run_conv_bwd, &(Args){.dt = dt, .s.conv = *g, .p = {(void *)x, (void *)w, (void *)gy, gx, gw, gb}});
    return 0;
}

static void run_pool_fwd(void *v) {
    Args *a = v;
    backend_cpu.max_pool2d_fwd(a->dt, &a->s.pool, R(a->p[0]), R(a->p[1]), R(a->p[2]), R(a->p[3]));
}
static void sim_pool_fwd(DType cdt, const KPool2d *g, const void *x, void *y, int64_t *idx, uint8_t *code) {
    submit_args(run_pool_fwd, &(Args){.dt = cdt, .s.pool = *g, .p = {(void *)x, y, idx, code}});
}

static void run_pool_bwd(void *v) {
    Args *a = v;
    backend_cpu.max_pool2d_bwd(a->dt, &a->s.pool, R(a->p[0]), R(a->p[1]), R(a->p[2]), R(a->p[3]));
}
static void sim_pool_bwd(DType cdt, const KPool2d *g, const void *gy, const int64_t *idx, const uint8_t *code, void *gx) {
    submit_args(run_pool_bwd, &(Args){.dt = cdt, .s.pool = *g, .p = {(void *)gy, (void *)idx, (void *)code, gx}});
}

static void run_attn_fwd(void *v) {
    Args *a = v;
    if (backend_cpu.attention_fwd(a->dt, &a->s.attn, R(a->p[0]), R(a->p[1]), R(a->p[2]), R(a->p[3]), R(a->p[4])) != 0)
        sticky_error = 1;
}
static int sim_attn_fwd(DType cdt, const KAttn *at, const void *q, const void *k, const void *v, void *o, void *lse) {
    submit_args(run_attn_fwd, &(Args){.dt = cdt, .s.attn = *at, .p = {(void *)q, (void *)k, (void *)v, o, lse}});
    return 0;
}

static void run_attn_bwd(void *v) {
    Args *a = v;
    if (backend_cpu.attention_bwd(a->dt, &a->s.attn, R(a->p[0]), R(a->p[1]), R(a->p[2]), R(a->p[3]), R(a->p[4]),
                                  R(a->p[5]), R(a->p[6]), R(a->p[7]), R(a->p[8])) != 0)
        sticky_error = 1;
}
static int sim_attn_bwd(DType cdt, const KAttn *at, const void *q, const void *k, const void *v, const void *o,
                        const void *lse, const void *go, void *gq, void *gk, void *gv) {
    submit_args(run_attn_bwd, &(Args){.dt = cdt, .s.attn = *at,
                                      .p = {(void *)q, (void *)k, (void *)v, (void *)o, (void *)lse, (void *)go, gq, gk, gv}});
    return 0;
}

static void run_fp8_quantize(void *v) {
    Args *a = v;
    backend_cpu.fp8_quantize((KFp8Fmt)a->i0, a->n[0], R(a->p[0]), (float)a->f[0], R(a->p[1]), R(a->p[2]));
}
static void sim_fp8_quantize(KFp8Fmt fmt, int64_t n, const float *x, float scale, uint8_t *q, float *amax) {
    submit_args(run_fp8_quantize, &(Args){.i0 = fmt, .n = {n}, .f = {scale}, .p = {(void *)x, q, amax}});
}

static void run_fp8_dequantize(void *v) {
    Args *a = v;
    backend_cpu.fp8_dequantize((KFp8Fmt)a->i0, a->n[0], R(a->p[0]), (float)a->f[0], R(a->p[1]));
}
static void sim_fp8_dequantize(KFp8Fmt fmt, int64_t n, const uint8_t *q, float scale_inv, float *out) {
    submit_args(run_fp8_dequantize, &(Args){.i0 = fmt, .n = {n}, .f = {scale_inv}, .p = {(void *)q, out}});
}

/* A (M, K) and B (N, K) decoded, B transposed to (K, N), the CPU's float32
 * GEMM, then C * scale in float32: the core's emulated product, bit for bit. */
static void run_fp8_gemm(void *v) {
    Args *a = v;
    int64_t M = a->n[0], N = a->n[1], K = a->n[2];
    float *fa = malloc(sizeof(float) * (size_t)(M * K)), *fb = malloc(sizeof(float) * (size_t)(N * K));
    float *fbt = malloc(sizeof(float) * (size_t)(K * N)), *c = R(a->p[2]);
    if (!fa || !fb || !fbt) {
        sticky_error = 1;
    } else {
        backend_cpu.fp8_dequantize((KFp8Fmt)a->i0, M * K, R(a->p[0]), 1.0f, fa);
        backend_cpu.fp8_dequantize((KFp8Fmt)a->i1, N * K, R(a->p[1]), 1.0f, fb);
        for (int64_t j = 0; j < N; j++)
            for (int64_t k = 0; k < K; k++) fbt[k * N + j] = fb[j * K + k];
        if (backend_cpu.gemm(DT_F32, 0, 0, M, N, K, 1.0, fa, K, fbt, N, 0.0, c, N) != 0) sticky_error = 1;
        const float scale = (float)a->f[0];
        for (int64_t i = 0; i < M * N; i++) c[i] = c[i] * scale;
    }
    free(fa), free(fb), free(fbt);
}
static int sim_fp8_gemm(KFp8Fmt fa, KFp8Fmt fb, int64_t M, int64_t N, int64_t K, const uint8_t *A, const uint8_t *B,
                        float scale, float *C) {
    if (!kfp8_gemm_takes(fa, fb, M, N, K)) return 1;
    submit_args(run_fp8_gemm, &(Args){.i0 = fa, .i1 = fb, .n = {M, N, K}, .f = {scale}, .p = {(void *)A, (void *)B, C}});
    return 0;
}

/* The stream's state travels by value, so drawing on the worker later
 * gives the values the CPU draws now. */
static void run_rng_fill(void *v) {
    Args *a = v;
    backend_cpu.rng_fill(&a->s.rng, a->dt, a->n[0], R(a->p[0]));
}
static int sim_rng_fill(const KRngFill *r, DType dt, int64_t n, void *out) {
    submit_args(run_rng_fill, &(Args){.dt = dt, .n = {n}, .p = {out}, .s.rng = *r});
    return 0;
}

/* ---------------- testing hooks ---------------- */

void backend_sim_debug_hold(int on) {
    pthread_mutex_lock(&mu);
    held = on;
    pthread_cond_broadcast(&cv_work);
    pthread_mutex_unlock(&mu);
}

/* to_host without its synchronisation: what a backend missing one would read. */
void backend_sim_debug_peek(void *host, const void *dev, size_t nbytes) { memcpy(host, real(dev), nbytes); }

const Backend backend_sim = {
    .name = "sim",
    .alloc = sim_alloc,
    .free = sim_free,
    .cached_bytes = sim_cached_bytes,
    .empty_cache = sim_empty_cache,
    .to_host = sim_to_host,
    .from_host = sim_from_host,
    .host_ptr = sim_host_ptr,
    .zero = sim_zero,
    .stream_current = sim_stream_current,
    .synchronize = sim_sync,
    .event_new = sim_event_new,
    .event_free = sim_event_free,
    .event_record = sim_event_record,
    .event_wait = sim_event_wait,
    .event_sync = sim_event_sync,
    .binary = sim_binary,
    .unary = sim_unary,
    .unary_backward = sim_unary_backward,
    .where = sim_where,
    .copy = sim_copy,
    .fill = sim_fill,
    .gemm = sim_gemm,
    .reduce = sim_reduce,
    .argreduce = sim_argreduce,
    .softmax = sim_softmax,
    .softmax_backward = sim_softmax_backward,
    .cross_entropy_fwd = sim_ce_fwd,
    .cross_entropy_bwd = sim_ce_bwd,
    .layernorm_fwd = sim_ln_fwd,
    .layernorm_bwd = sim_ln_bwd,
    .gather = sim_gather,
    .index_select = sim_index_select,
    .scatter_add = sim_scatter_add,
    .index_add = sim_index_add,
    .sgd = sim_sgd,
    .adam = sim_adam,
    .norm_pow = sim_norm_pow,
    .conv2d_fwd = sim_conv_fwd,
    .conv2d_bwd = sim_conv_bwd,
    .max_pool2d_fwd = sim_pool_fwd,
    .max_pool2d_bwd = sim_pool_bwd,
    .attention_fwd = sim_attn_fwd,
    .attention_bwd = sim_attn_bwd,
    .fp8_quantize = sim_fp8_quantize,
    .fp8_dequantize = sim_fp8_dequantize,
    .fp8_gemm = sim_fp8_gemm,
    .rng_fill = sim_rng_fill,
};
