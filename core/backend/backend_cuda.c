/* backend_cuda.c: the CUDA backend's glue: the Backend table over
 * kernels/cuda, linked into the CUDA build only (make CUDA=1). Plain C: it
 * calls the kc_* kernels' C API, never the CUDA runtime itself.
 *
 *  - Devices: backend_for() (backend_cpu.c) asks cuda_backend_select(N)
 *    for cuda:N; that makes N this thread's current GPU (cudaSetDevice, as
 *    PyTorch's device guard) and returns the one table, whose entries work
 *    on the current GPU. Each GPU gets, on first use, a compute stream
 *    (non-blocking), a cuBLASLt context with a 32 MiB workspace and 16 bytes
 *    of scratch for values the host reads back.
 *  - Memory: the caching allocator (kernels/cuda/alloc.cu) per GPU, blocks
 *    tied to the compute stream; host copies through its pinned staging
 *    buffer (to_host and from_host block until the copy is done, so the
 *    host buffer is free on return). host_ptr is NULL.
 *  - Streams and events are real CUDA streams and events.
 *  - Errors: entries returning int report a failure as an accel error
 *    ("cuda:N: file:line: call: message"). The void entries cannot return
 *    one: their first failure is kept (sticky) and reported by the next
 *    synchronize, to_host or event_sync, as CUDA itself reports failures of
 *    queued work at the next synchronisation.
 *  - GEMM: float32 through cuBLASLt (TF32 only when allowed, as PyTorch's
 *    torch.backends.cuda.matmul.allow_tf32, default off), bf16 inputs with
 *    a float32 output and float32 accumulation, float64 in float64; fp8
 *    (fp8_gemm) through cuBLASLt's fp8 GEMM on compute capability 8.9+
 *    (an error naming the GPU's capability below that), declining the
 *    operands it does not take (K not a multiple of 16, N of 4, both e5m2);
 *    gemm_batched as cuBLASLt's strided batches.
 *  - Attention (float32) is composed from these entries by
 *    attention_gemm.c: score blocks from batched cuBLASLt GEMMs, the
 *    softmax kernels between them.
 *  - float64 slow paths: cross-entropy, attention, conv (also bf16) and the
 *    optimizer steps have float32 GPU kernels only; their float64 (and bf16
 *    conv) cases copy the operands to the host, run the CPU backend's entry
 *    and copy the results back (correct, slow; float64 training on a GPU
 *    is rare). Every other entry runs on the GPU for every dtype it takes.
 * docs/gpu.md has what ran on a GPU. */
#include "backend.h"
#include "attention_gemm.h"
#include "../../kernels/cuda/kernels_cuda.h"
#include "../../kernels/cuda/cuda_check.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_MAX_DEVICES 64
#define GEMM_WORKSPACE ((size_t)32 << 20)

typedef struct {
    int ready;
    void *stream;
    KcGemmCtx *gemm;
    void *scratch; /* 16 bytes: norm_pow's double, cross-entropy's bad row */
} CudaDev;

static CudaDev devs[CUDA_MAX_DEVICES];
static int n_devices = -1; /* -1: not asked yet */
static char no_device_why[256];
static int allow_tf32;
static _Thread_local int cur; /* this thread's current GPU */
static _Thread_local char sticky[512];

extern const Backend backend_cuda;

static CudaDev *D(void) { return &devs[cur]; }
static void *S(void) { return devs[cur].stream; }

/* ---- errors ---- */

/* rc != 0 from a kc_* call: an accel error naming the GPU; returns -1. */
static int fail(int rc) { return rc ? accel_fail_int("cuda:%d: %s", cur, cuda_last_error()) : 0; }

/* A void entry's failure (rc != 0): kept until the next synchronisation. */
static void note(int rc) {
    if (rc && !sticky[0]) snprintf(sticky, sizeof sticky, "cuda:%d: %s", cur, cuda_last_error());
}

static void note_accel(int rc) {
    if (rc && !sticky[0]) snprintf(sticky, sizeof sticky, "%s", accel_last_error());
}

static int report(void) {
    if (!sticky[0]) return 0;
    int rc = accel_fail_int("%s", sticky);
    sticky[0] = 0;
    return rc;
}

/* ---- devices ---- */

int cuda_backend_count(char *why, size_t n) {
    if (n_devices < 0) n_devices = cuda_device_count(no_device_why, sizeof no_device_why);
    if (why && n) snprintf(why, n, "%s", no_device_why);
    return n_devices;
}

static int dev_init(CudaDev *d, int index) {
    if (kc_stream_create(index, &d->stream) || kc_gemm_ctx_create(&d->gemm, GEMM_WORKSPACE)) return fail(-1);
    kc_gemm_allow_tf32(d->gemm, allow_tf32);
    if (kc_malloc(index, 16, d->stream, &d->scratch)) return fail(-1);
    d->ready = 1;
    return 0;
}

const Backend *cuda_backend_select(int index) {
    const int n = cuda_backend_count(NULL, 0);
    if (n == 0) return accel_fail("device cuda:%d is not available: %s", index, no_device_why);
    if (index < 0 || index >= n || index >= CUDA_MAX_DEVICES)
        return accel_fail("device cuda:%d does not exist: this machine has %d CUDA device%s (cuda:0 to cuda:%d)", index,
                          n, n == 1 ? "" : "s", n - 1);
    CudaDev *d = &devs[index];
    if ((index != cur || !d->ready) && kc_set_device(index)) return fail(-1), NULL;
    cur = index;
    if (!d->ready && dev_init(d, index)) return NULL;
    return &backend_cuda;
}

void cuda_backend_set_allow_tf32(int on) {
    allow_tf32 = on != 0;
    for (int i = 0; i < CUDA_MAX_DEVICES; i++)
        if (devs[i].ready) kc_gemm_allow_tf32(devs[i].gemm, allow_tf32);
}

int cuda_backend_get_allow_tf32(void) { return allow_tf32; }

int cuda_backend_capability(int index, int *major, int *minor) {
    if (!cuda_backend_select(index)) return -1;
    return fail(kc_device_capability(index, major, minor));
}

int cuda_backend_memory(int index, BackendMemOp op, BackendMemStats *out) {
    if (op == BACKEND_MEM_EMPTY_CACHE && (index < 0 || index >= CUDA_MAX_DEVICES || !devs[index].ready))
        return 0; /* a GPU this process has not used: nothing cached */
    if (!cuda_backend_select(index)) return -1;
    if (op == BACKEND_MEM_RESET_PEAK) return fail(kc_reset_peak_stats(index));
    if (op == BACKEND_MEM_EMPTY_CACHE) {
        kc_empty_cache(index);
        return 0;
    }
    CacheStats st;
    if (fail(kc_memory_stats(index, &st))) return -1;
    *out = (BackendMemStats){st.allocated, st.allocated_peak, st.reserved, st.reserved_peak, st.num_allocs,
                             st.num_frees, st.num_ooms};
    return 0;
}

/* ---- memory, host copies ---- */

static void *cu_alloc(size_t nbytes) {
    void *p = NULL;
    if (kc_malloc(cur, nbytes ? nbytes : 1, S(), &p)) return fail(-1), NULL;
    return p;
}

static void cu_free(void *p, size_t nbytes) {
    (void)nbytes;
    note(kc_free(cur, p));
}

static size_t cu_cached_bytes(void) {
    CacheStats st;
    if (kc_memory_stats(cur, &st)) return 0;
    return (size_t)(st.reserved - st.allocated);
}

static void cu_empty_cache(void) { kc_empty_cache(cur); }

static int cu_to_host(void *host, const void *dev, size_t nbytes) {
    if (report()) return -1;
    return fail(kc_copy_to_host(cur, host, dev, nbytes, S()));
}

static int cu_from_host(void *dev, const void *host, size_t nbytes) {
    return fail(kc_copy_to_device(cur, dev, host, nbytes, S()));
}

static void *cu_host_ptr(void *dev) {
    (void)dev;
    return NULL;
}

static void cu_zero(void *dev, size_t nbytes) { note(kc_memset_zero(dev, nbytes, S())); }

/* ---- streams, events ---- */

static void *cu_stream_current(void) { return S(); }

static int cu_synchronize(void) {
    if (fail(kc_stream_synchronize(S()))) return -1;
    return report();
}

static void *cu_event_new(void) {
    void *ev = NULL;
    if (kc_event_create(&ev)) return fail(-1), NULL;
    return ev;
}

static void cu_event_free(void *ev) { note(kc_event_destroy(ev)); }
static int cu_event_record(void *ev) { return fail(kc_event_record(ev, S())); }
static int cu_event_wait(void *ev) { return fail(kc_stream_wait_event(S(), ev)); }

static int cu_event_sync(void *ev) {
    if (fail(kc_event_synchronize(ev))) return -1;
    return report();
}

/* ---- elementwise: a StridedIter becomes a KcIter (same limits: 8 dims) ---- */

/* Operand k of the launch goes to slot map[k] of the KcIter. */
static KcIter kc_iter(const StridedIter *it, const int *map) {
    KcIter k;
    k.ndim = it->ndim;
    for (int d = 0; d < it->ndim; d++) {
        k.shape[d] = it->shape[d];
        for (int o = 0; o < it->nops; o++) k.st[map[o]][d] = it->stride[o][d];
    }
    return k;
}

static const int in_order[4] = {0, 1, 2, 3};

static void cu_binary(KBinOp op, DType cdt, StridedIter *it) {
    const KcIter k = kc_iter(it, in_order);
    const DType odt = kbin_is_compare(op) ? DT_BOOL : cdt;
    note(kc_binary(op, &k, it->base[1], cdt, it->base[2], cdt, it->base[0], odt, S()));
}

static void cu_unary(KUnOp op, DType cdt, StridedIter *it, double p1, double p2) {
    const KcIter k = kc_iter(it, in_order);
    note(kc_unary(op, &k, it->base[1], cdt, it->base[0], cdt, p1, p2, S()));
}

static void cu_unary_backward(KUnOp op, DType cdt, int64_t n, const void *x, const void *y, const void *gy, void *gx,
                              double p1, double p2) {
    note(kc_unary_backward(op, n, x, y, gy, gx, cdt, p1, p2, S()));
}

/* where's operands are (out, cond, a, b); kc_where's slots (out, a, b, cond).
 * It moves bytes, so any dtype of the element size stands for the rest. */
static void cu_where(StridedIter *it) {
    static const int map[4] = {0, 3, 1, 2};
    const KcIter k = kc_iter(it, map);
    const size_t es = it->elsize[0];
    const DType dt = es == 1 ? DT_U8 : es == 2 ? DT_BF16 : es == 4 ? DT_F32 : DT_F64;
    note(kc_where(&k, it->base[1], it->base[2], it->base[3], it->base[0], dt, S()));
}

static void cu_copy(StridedIter *it, DType odt, DType adt) {
    const KcIter k = kc_iter(it, in_order);
    note(kc_cast(&k, it->base[1], adt, it->base[0], odt, S()));
}

static void cu_fill(StridedIter *it, DType dt, double v) {
    const KcIter k = kc_iter(it, in_order);
    note(kc_fill(&k, it->base[0], dt, v, S()));
}

static int cu_gemm(DType dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A, int64_t lda,
                   const void *B, int64_t ldb, double beta, void *C, int64_t ldc) {
    if (dt == DT_F64) return fail(kc_gemm_f64(D()->gemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, S()));
    if (dt != DT_F32 && dt != DT_BF16) return accel_fail_int("gemm: dtype %s not supported on cuda", dtype_name(dt));
    return fail(kc_gemm(D()->gemm, ta, tb, M, N, K, (float)alpha, A, lda, B, ldb, (float)beta, C, ldc, dt, DT_F32,
                        KC_EPI_NONE, NULL, S()));
}

static int cu_gemm_batched(DType dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A,
                           int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb, double beta, void *C,
                           int64_t ldc, int64_t sc, int64_t batch) {
    if (dt != DT_F32 && dt != DT_BF16)
        return accel_fail_int("gemm_batched: dtype %s not supported on cuda (float32, bfloat16)", dtype_name(dt));
    return fail(kc_gemm_batched(D()->gemm, ta, tb, M, N, K, (float)alpha, A, lda, sa, B, ldb, sb, (float)beta, C, ldc,
                                sc, batch, dt, S()));
}

/* ---- the host round trip of the float64 slow paths ---- */

typedef struct {
    void *dev;     /* NULL: an absent optional operand */
    size_t nbytes;
    int written;   /* copied back after the call */
    void *host;
} Staged;

/* Every operand to a host copy (outputs too: some entries accumulate). */
static int stage_in(Staged *s, int n) {
    for (int i = 0; i < n; i++) s[i].host = NULL;
    for (int i = 0; i < n; i++) {
        if (!s[i].dev) continue;
        s[i].host = malloc(s[i].nbytes ? s[i].nbytes : 1);
        if (!s[i].host) return accel_fail_int("cuda: host out of memory staging %zu bytes", s[i].nbytes);
        if (kc_copy_to_host(cur, s[i].host, s[i].dev, s[i].nbytes, S())) return fail(-1);
    }
    return 0;
}

/* The written operands back to the device (when rc is 0); frees the copies. */
static int stage_out(Staged *s, int n, int rc) {
    for (int i = 0; i < n; i++) {
        if (rc == 0 && s[i].host && s[i].written && kc_copy_to_device(cur, s[i].dev, s[i].host, s[i].nbytes, S()))
            rc = fail(-1);
        free(s[i].host);
    }
    return rc;
}

#define IN(p, nb) {(void *)(p), (nb), 0, NULL}
#define OUT(p, nb) {(void *)(p), (nb), 1, NULL}
#define H(s, i) ((s)[i].host)

/* ---- row-wise families ---- */

static void cu_reduce(KRedOp op, DType cdt, const void *x, int64_t outer, int64_t n, int64_t inner, void *out) {
    note(kc_reduce(op, x, cdt, outer, n, inner, out, S()));
}

static void cu_argreduce(int want_max, DType cdt, const void *x, int64_t outer, int64_t n, int64_t inner, void *vals,
                         int64_t *idx) {
    note(kc_argreduce(want_max, x, cdt, outer, n, inner, vals, idx, S()));
}

static void cu_softmax(int log, DType cdt, const void *x, int64_t outer, int64_t n, int64_t inner, void *y) {
    note(kc_softmax(log, x, cdt, outer, n, inner, y, S()));
}

static void cu_softmax_backward(int log, DType cdt, const void *y, const void *gy, int64_t outer, int64_t n,
                                int64_t inner, void *gx) {
    note(kc_softmax_backward(log, y, gy, cdt, outer, n, inner, gx, S()));
}

static int64_t ce_fwd_host(const void *x, int64_t N, int64_t C, const int64_t *t, int64_t ignore, double ls,
                           void *loss, void *lse) {
    const size_t row = sizeof(double) * (size_t)N;
    Staged s[] = {IN(x, row * (size_t)C), IN(t, sizeof(int64_t) * (size_t)N), OUT(loss, row), OUT(lse, row)};
    int64_t bad = -1;
    int rc = stage_in(s, 4);
    if (rc == 0) bad = backend_cpu.cross_entropy_fwd(DT_F64, H(s, 0), N, C, H(s, 1), ignore, ls, H(s, 2), H(s, 3));
    note_accel(stage_out(s, 4, rc));
    return bad;
}

/* The first invalid target row comes back through the scratch int64. */
static int64_t cu_ce_fwd(DType cdt, const void *x, int64_t N, int64_t C, const int64_t *t, int64_t ignore, double ls,
                         void *loss, void *lse) {
    if (cdt == DT_F64) return ce_fwd_host(x, N, C, t, ignore, ls, loss, lse);
    int64_t bad = -1;
    int rc = kc_copy_to_device(cur, D()->scratch, &bad, sizeof bad, S());
    if (rc == 0) rc = kc_cross_entropy_fwd(x, cdt, N, C, t, ignore, ls, loss, lse, D()->scratch, S());
    if (rc == 0) rc = kc_copy_to_host(cur, &bad, D()->scratch, sizeof bad, S());
    note(rc);
    return bad;
}

static void cu_ce_bwd(DType cdt, const void *x, const void *lse, int64_t N, int64_t C, const int64_t *t,
                      int64_t ignore, double ls, const void *g, void *gx) {
    if (cdt != DT_F64) {
        note(kc_cross_entropy_bwd(x, cdt, lse, N, C, t, ignore, ls, g, gx, S()));
        return;
    }
    const size_t row = sizeof(double) * (size_t)N;
    Staged s[] = {IN(x, row * (size_t)C), IN(lse, row), IN(t, sizeof(int64_t) * (size_t)N), IN(g, row),
                  OUT(gx, row * (size_t)C)};
    int rc = stage_in(s, 5);
    if (rc == 0) backend_cpu.cross_entropy_bwd(DT_F64, H(s, 0), H(s, 1), N, C, H(s, 2), ignore, ls, H(s, 3), H(s, 4));
    note_accel(stage_out(s, 5, rc));
}

static void cu_ln_fwd(DType cdt, const void *x, const void *w, const void *b, int64_t rows, int64_t C, double eps,
                      void *y, void *mean, void *rstd) {
    note(kc_layernorm_fwd(x, w, b, cdt, rows, C, eps, y, mean, rstd, S()));
}

static void cu_ln_bwd(DType cdt, const void *x, const void *w, const void *mean, const void *rstd, const void *gy,
                      int64_t rows, int64_t C, void *gx, void *gw, void *gb) {
    note(kc_layernorm_bwd(x, w, mean, rstd, gy, cdt, rows, C, gx, gw, gb, S()));
}

/* ---- indexing ---- */

static void cu_gather(const void *x, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m, void *out,
                      size_t elsize) {
    note(kc_gather(x, outer, n, inner, idx, m, out, elsize, S()));
}

static void cu_index_select(const void *x, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m,
                            void *out, size_t elsize) {
    note(kc_index_select(x, outer, n, inner, idx, m, out, elsize, S()));
}

static void cu_scatter_add(DType cdt, void *gx, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m,
                           const void *gout) {
    note(kc_scatter_add(cdt, gx, outer, n, inner, idx, m, gout, S()));
}

static void cu_index_add(DType cdt, void *gx, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m,
                         const void *gout) {
    note(kc_index_add(cdt, gx, outer, n, inner, idx, m, gout, S()));
}

/* ---- optimizers ---- */

static void cu_sgd(DType cdt, int64_t n, void *p, const void *g, void *buf, int init, const KSgdArgs *a) {
    if (cdt != DT_F64) {
        note(kc_sgd_f32(n, p, g, buf, init, a, S()));
        return;
    }
    const size_t nb = sizeof(double) * (size_t)n;
    Staged s[] = {OUT(p, nb), IN(g, nb), OUT(buf, nb)};
    int rc = stage_in(s, 3);
    if (rc == 0) backend_cpu.sgd(DT_F64, n, H(s, 0), H(s, 1), H(s, 2), init, a);
    note_accel(stage_out(s, 3, rc));
}

static void cu_adam(DType cdt, int64_t n, void *p, const void *g, void *m, void *v, void *vmax, const KAdamArgs *a) {
    if (cdt != DT_F64) {
        note(kc_adam_f32(n, p, g, m, v, vmax, a, S()));
        return;
    }
    const size_t nb = sizeof(double) * (size_t)n;
    Staged s[] = {OUT(p, nb), IN(g, nb), OUT(m, nb), OUT(v, nb), OUT(vmax, nb)};
    int rc = stage_in(s, 5);
    if (rc == 0) backend_cpu.adam(DT_F64, n, H(s, 0), H(s, 1), H(s, 2), H(s, 3), H(s, 4), a);
    note_accel(stage_out(s, 5, rc));
}

/* A host value: waits for the GPU (NaN, with the error kept, on failure). */
static double cu_norm_pow(DType cdt, int64_t n, const void *x, double p) {
    double v = NAN;
    int rc = kc_norm_pow(x, cdt, n, p, D()->scratch, S());
    if (rc == 0) rc = kc_copy_to_host(cur, &v, D()->scratch, sizeof v, S());
    note(rc);
    return rc ? NAN : v;
}

/* ---- convolution, pooling, attention ---- */

/* The conv operands' bytes: x, w, gy of dt; b, y, gx, gw, gb of the output
 * dtype (float32 for bf16 inputs, as the CPU's). */
typedef struct {
    size_t x, w, gy, ox, ow, b, y;
} ConvBytes;

static ConvBytes conv_bytes(DType dt, const KConv2d *g) {
    const size_t es = dtype_size(dt), os = dtype_size(dt == DT_BF16 ? DT_F32 : dt);
    const size_t nx = (size_t)(g->N * g->C * g->H * g->W), nw = (size_t)(g->O * (g->C / g->groups) * g->KH * g->KW);
    const size_t ny = (size_t)(g->N * g->O * g->OH * g->OW);
    return (ConvBytes){es * nx, es * nw, es * ny, os * nx, os * nw, os * (size_t)g->O, os * ny};
}

static int cu_conv_fwd(DType dt, const KConv2d *g, const void *x, const void *w, const void *b, void *y) {
    if (dt == DT_F32) return fail(kc_conv2d_fwd(D()->gemm, dt, g, x, w, b, y, S()));
    const ConvBytes nb = conv_bytes(dt, g);
    Staged s[] = {IN(x, nb.x), IN(w, nb.w), IN(b, nb.b), OUT(y, nb.y)};
    int rc = stage_in(s, 4);
    if (rc == 0) rc = backend_cpu.conv2d_fwd(dt, g, H(s, 0), H(s, 1), H(s, 2), H(s, 3));
    return stage_out(s, 4, rc);
}

static int cu_conv_bwd(DType dt, const KConv2d *g, const void *x, const void *w, const void *gy, void *gx, void *gw,
                       void *gb) {
    if (dt == DT_F32) return fail(kc_conv2d_bwd(D()->gemm, dt, g, x, w, gy, gx, gw, gb, S()));
    const ConvBytes nb = conv_bytes(dt, g);
    Staged s[] = {IN(x, nb.x), IN(w, nb.w), IN(gy, nb.gy), OUT(gx, nb.ox), OUT(gw, nb.ow), OUT(gb, nb.b)};
    int rc = stage_in(s, 6);
    if (rc == 0) rc = backend_cpu.conv2d_bwd(dt, g, H(s, 0), H(s, 1), H(s, 2), H(s, 3), H(s, 4), H(s, 5));
    return stage_out(s, 6, rc);
}

static void cu_pool_fwd(DType cdt, const KPool2d *g, const void *x, void *y, int64_t *idx, uint8_t *code) {
    note(kc_max_pool2d_fwd(cdt, g, x, y, idx, code, S()));
}

static void cu_pool_bwd(DType cdt, const KPool2d *g, const void *gy, const int64_t *idx, const uint8_t *code, void *gx) {
    note(kc_max_pool2d_bwd(cdt, g, gy, idx, code, gx, S()));
}

/* Bytes spanned by a (B, H, rows, D) operand with batch / head / row strides st. */
static size_t attn_span(const int64_t st[3], const KAttn *a, int64_t rows, int64_t d) {
    if (a->B == 0 || a->H == 0 || rows == 0) return 0;
    return sizeof(double) * (size_t)((a->B - 1) * st[0] + (a->H - 1) * st[1] + (rows - 1) * st[2] + d);
}

static int cu_attn_fwd(DType cdt, const KAttn *a, const void *q, const void *k, const void *v, void *o, void *lse) {
    if (cdt != DT_F64) return attention_gemm_fwd(&backend_cuda, a, q, k, v, o, lse, 0);
    Staged s[] = {IN(q, attn_span(a->sq, a, a->L, a->D)), IN(k, attn_span(a->sk, a, a->S, a->D)),
                  IN(v, attn_span(a->sv, a, a->S, a->Dv)), OUT(o, attn_span(a->so, a, a->L, a->Dv)),
                  OUT(lse, sizeof(double) * (size_t)(a->B * a->H * a->L))};
    int rc = stage_in(s, 5);
    if (rc == 0) rc = backend_cpu.attention_fwd(DT_F64, a, H(s, 0), H(s, 1), H(s, 2), H(s, 3), H(s, 4));
    return stage_out(s, 5, rc);
}

static int cu_attn_bwd(DType cdt, const KAttn *a, const void *q, const void *k, const void *v, const void *o,
                       const void *lse, const void *go, void *gq, void *gk, void *gv) {
    if (cdt != DT_F64) return attention_gemm_bwd(&backend_cuda, a, q, k, v, lse, go, gq, gk, gv, 0);
    Staged s[] = {IN(q, attn_span(a->sq, a, a->L, a->D)),    IN(k, attn_span(a->sk, a, a->S, a->D)),
                  IN(v, attn_span(a->sv, a, a->S, a->Dv)),   IN(o, attn_span(a->so, a, a->L, a->Dv)),
                  IN(lse, sizeof(double) * (size_t)(a->B * a->H * a->L)),
                  IN(go, attn_span(a->sgo, a, a->L, a->Dv)), OUT(gq, attn_span(a->sgq, a, a->L, a->D)),
                  OUT(gk, attn_span(a->sgk, a, a->S, a->D)), OUT(gv, attn_span(a->sgv, a, a->S, a->Dv))};
    int rc = stage_in(s, 9);
    if (rc == 0)
        rc = backend_cpu.attention_bwd(DT_F64, a, H(s, 0), H(s, 1), H(s, 2), H(s, 3), H(s, 4), H(s, 5), H(s, 6),
                                       H(s, 7), H(s, 8));
    return stage_out(s, 9, rc);
}

/* ---- fp8 ---- */

/* C = fl32(acc * scale) from K-major A (M, K) and B (N, K), for the
 * operands cuBLASLt's fp8 GEMM takes (kfp8_gemm_takes); others are declined
 * (1) and emulated by the core. The scale is cuBLASLt's host alpha (no
 * device scales), so nothing waits for the GPU and the product is scaled
 * once. */
static int cu_fp8_gemm(KFp8Fmt fa, KFp8Fmt fb, int64_t M, int64_t N, int64_t K, const uint8_t *A, const uint8_t *B,
                       float scale, float *C) {
    if (!kfp8_gemm_takes(fa, fb, M, N, K)) return 1;
    const DType da = fa == KF8_E4M3FN ? DT_F8E4M3 : DT_F8E5M2, db = fb == KF8_E4M3FN ? DT_F8E4M3 : DT_F8E5M2;
    return fail(kc_gemm_fp8(D()->gemm, M, N, K, scale, A, da, K, B, db, K, NULL, NULL, C, DT_F32, N, NULL, S()));
}

static void cu_fp8_quantize(KFp8Fmt fmt, int64_t n, const float *x, float scale, uint8_t *q, float *amax) {
    note(kc_fp8_quantize(fmt, n, x, scale, q, amax, S()));
}

static void cu_fp8_dequantize(KFp8Fmt fmt, int64_t n, const uint8_t *q, float scale_inv, float *out) {
    note(kc_fp8_dequantize(fmt, n, q, scale_inv, out, S()));
}

/* Random fills: one thread per element (pair, for normal) with
 * kernels/philox.h, so the values are the CPU's except that normal draws use
 * the device's log / sqrt / cos / sin (an ulp or two in double; float32
 * almost always equal). PyTorch's CUDA generator gives values unrelated to
 * its CPU one; ours keeps one stream for both. */
static int cu_rng_fill(const KRngFill *r, DType dt, int64_t n, void *out) {
    switch (r->dist) {
    case KRNG_UNIFORM: return fail(kc_rng_uniform(out, dt, n, r->seed, r->offset, r->a, r->b, S()));
    case KRNG_NORMAL: return fail(kc_rng_normal(out, dt, n, r->seed, r->offset, r->a, r->b, S()));
    case KRNG_BERNOULLI: return fail(kc_rng_bernoulli_mask(out, dt, n, r->seed, r->offset, r->a, S()));
    default: return fail(kc_rng_randint(out, dt, n, r->seed, r->offset, r->lo, r->range, S()));
    }
}

const Backend backend_cuda = {
    .name = "cuda",
    .alloc = cu_alloc,
    .free = cu_free,
    .cached_bytes = cu_cached_bytes,
    .empty_cache = cu_empty_cache,
    .to_host = cu_to_host,
    .from_host = cu_from_host,
    .host_ptr = cu_host_ptr,
    .zero = cu_zero,
    .stream_current = cu_stream_current,
    .synchronize = cu_synchronize,
    .event_new = cu_event_new,
    .event_free = cu_event_free,
    .event_record = cu_event_record,
    .event_wait = cu_event_wait,
    .event_sync = cu_event_sync,
    .binary = cu_binary,
    .unary = cu_unary,
    .unary_backward = cu_unary_backward,
    .where = cu_where,
    .copy = cu_copy,
    .fill = cu_fill,
    .gemm = cu_gemm,
    .gemm_batched = cu_gemm_batched,
    .reduce = cu_reduce,
    .argreduce = cu_argreduce,
    .softmax = cu_softmax,
    .softmax_backward = cu_softmax_backward,
    .cross_entropy_fwd = cu_ce_fwd,
    .cross_entropy_bwd = cu_ce_bwd,
    .layernorm_fwd = cu_ln_fwd,
    .layernorm_bwd = cu_ln_bwd,
    .gather = cu_gather,
    .index_select = cu_index_select,
    .scatter_add = cu_scatter_add,
    .index_add = cu_index_add,
    .sgd = cu_sgd,
    .adam = cu_adam,
    .norm_pow = cu_norm_pow,
    .conv2d_fwd = cu_conv_fwd,
    .conv2d_bwd = cu_conv_bwd,
    .max_pool2d_fwd = cu_pool_fwd,
    .max_pool2d_bwd = cu_pool_bwd,
    .attention_fwd = cu_attn_fwd,
    .attention_bwd = cu_attn_bwd,
    .fp8_quantize = cu_fp8_quantize,
    .fp8_dequantize = cu_fp8_dequantize,
    .fp8_gemm = cu_fp8_gemm,
    .rng_fill = cu_rng_fill,
};
