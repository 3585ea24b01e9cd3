/* backend_cpu.c: the CPU backend's glue: the Backend table over
 * kernels/cpu. It is the only file above kernels/cpu that calls a k_*
 * kernel. Dtype dispatch (f32 / f64 / i64 compute dtypes) and the splitting
 * of n-d elementwise launches into innermost runs (iter_run, spread over
 * the OpenMP team) happen here. Device pointers are host pointers, so the
 * host copies are memcpy and host_ptr is the identity; there is one
 * stream and every call completes before it returns, so streams and
 * events are no-ops. Memory comes from the caching allocator (alloc_cpu.c). */
#include "backend.h"
#include "backend_cpu.h"
#include "../../kernels/cpu/kernels.h"
#include "../../kernels/cpu/isa.h"
#include <stdio.h>
#include <string.h>

/* ---- host copies, streams ---- */

static int cpu_to_host(void *host, const void *dev, size_t nbytes) {
    if (nbytes) memcpy(host, dev, nbytes);
    return 0;
}

static int cpu_from_host(void *dev, const void *host, size_t nbytes) {
    if (nbytes) memcpy(dev, host, nbytes);
    return 0;
}

static void *cpu_host_ptr(void *dev) { return dev; }

static void cpu_zero(void *dev, size_t nbytes) {
    if (nbytes) memset(dev, 0, nbytes);
}

static char cpu_stream_token; /* the one stream / event handle */
static void *cpu_stream_current(void) { return &cpu_stream_token; }
static int cpu_noop(void) { return 0; }
static void *cpu_event_new(void) { return &cpu_stream_token; }
static void cpu_event_free(void *ev) { (void)ev; }
static int cpu_event_op(void *ev) { return ev == &cpu_stream_token ? 0 : -1; }

/* ---- elementwise: n-d launches split into runs ---- */

typedef struct {
    int op;
    DType cdt, dt2;
    double p1, p2;
} RunCtx;

static inline void bin_kernel(KBinOp op, DType cdt, int64_t n, char **p, const int64_t *st) {
    if (cdt == DT_F32) k_binary_f32(op, n, (float *)p[1], st[1], (float *)p[2], st[2], p[0], st[0]);
    else if (cdt == DT_F64) k_binary_f64(op, n, (double *)p[1], st[1], (double *)p[2], st[2], p[0], st[0]);
    else k_binary_i64(op, n, (int64_t *)p[1], st[1], (int64_t *)p[2], st[2], p[0], st[0]);
}

static void bin_run(void *ctx, int64_t n, char **p, const int64_t *st) {
    const RunCtx *c = ctx;
    bin_kernel((KBinOp)c->op, c->cdt, n, p, st);
}

static inline void un_kernel(KUnOp op, DType cdt, int64_t n, char **p, const int64_t *st, double p1, double p2) {
    if (cdt == DT_F32) k_unary_f32(op, n, (float *)p[1], st[1], (float *)p[0], st[0], p1, p2);
    else if (cdt == DT_F64) k_unary_f64(op, n, (double *)p[1], st[1], (double *)p[0], st[0], p1, p2);
    else k_unary_i64(op, n, (int64_t *)p[1], st[1], (int64_t *)p[0], st[0], p1, p2);
}

static void un_run(void *ctx, int64_t n, char **p, const int64_t *st) {
    const RunCtx *c = ctx;
    un_kernel((KUnOp)c->op, c->cdt, n, p, st, c->p1, c->p2);
}

static void where_run(void *ctx, int64_t n, char **p, const int64_t *st) {
    const StridedIter *it = ctx;
    k_where(n, (const uint8_t *)p[1], st[1], p[2], st[2], p[3], st[3], p[0], st[0], it->elsize[0]);
}

static void copy_run(void *ctx, int64_t n, char **p, const int64_t *st) {
    const RunCtx *c = ctx;
    k_cast(n, p[1], c->dt2, st[1], p[0], c->cdt, st[0]);
}

static void fill_run(void *ctx, int64_t n, char **p, const int64_t *st) {
    const RunCtx *c = ctx;
    k_fill(n, p[0], c->cdt, st[0], c->p1);
}

typedef void (*IterRunFn)(void *ctx, int64_t n, char **ptrs, const int64_t *strides);

/* Drop size-1 dims and merge dims contiguous for every operand. */
static void iter_coalesce(StridedIter *it) {
    int nd = 0;
    for (int d = 0; d < it->ndim; d++) {
        if (it->shape[d] == 1) continue;
        if (nd > 0) {
            bool merge = true;
            for (int k = 0; k < it->nops; k++)
                if (it->stride[k][nd - 1] != it->stride[k][d] * it->shape[d]) merge = false;
            if (merge) {
                it->shape[nd - 1] *= it->shape[d];
                for (int k = 0; k < it->nops; k++) it->stride[k][nd - 1] = it->stride[k][d];
                continue;
            }
        }
        it->shape[nd] = it->shape[d];
        for (int k = 0; k < it->nops; k++) it->stride[k][nd] = it->stride[k][d];
        nd++;
    }
    it->ndim = nd;
}

/* Calls fn once per innermost run of it. Runs shorter than a kernel's own
 * parallel threshold are spread over the OpenMP team when there are many
 * of them (a broadcast bias row, a column slice): each run is independent
 * and the callbacks are pure kernel calls. */
static void iter_run(StridedIter *it, IterRunFn fn, void *ctx) {
    for (int d = 0; d < it->ndim; d++)
        if (it->shape[d] == 0) return;
    iter_coalesce(it);
    char *ptrs[ITER_MAX_OPS];
    int64_t inner[ITER_MAX_OPS];
    if (it->ndim == 0) {
        for (int k = 0; k < it->nops; k++) ptrs[k] = it->base[k], inner[k] = 0;
        fn(ctx, 1, ptrs, inner);
        return;
    }
    int last = it->ndim - 1;
    int64_t n = it->shape[last];
    for (int k = 0; k < it->nops; k++) inner[k] = it->stride[k][last];
    int64_t runs = 1;
    for (int d = 0; d < last; d++) runs *= it->shape[d];
    if (runs > 1 && n < KERNEL_PAR_MIN && runs * n >= KERNEL_PAR_MIN) {
        KERNEL_FOR(r, runs, runs * n, {
            char *pr[ITER_MAX_OPS];
            for (int k = 0; k < it->nops; k++) pr[k] = it->base[k];
            for (int64_t d = last - 1, rest = r; d >= 0; d--) {
                const int64_t i = rest % it->shape[d];
                rest /= it->shape[d];
                for (int k = 0; k < it->nops; k++) pr[k] += i * it->stride[k][d] * (int64_t)it->elsize[k];
            }
            fn(ctx, n, pr, inner);
        });
        return;
    }
    int64_t idx[TENSOR_MAX_DIMS] = {0};
    for (;;) {
        for (int k = 0; k < it->nops; k++) {
            char *p = it->base[k];
            for (int d = 0; d < last; d++) p += idx[d] * it->stride[k][d] * (int64_t)it->elsize[k];
            ptrs[k] = p;
        }
        fn(ctx, n, ptrs, inner);
        int d = last - 1;
        while (d >= 0 && ++idx[d] == it->shape[d]) idx[d--] = 0;
        if (d < 0) break;
    }
}

/* One run (the common contiguous case) goes straight to the kernel. */
static void run_nd(StridedIter *it, IterRunFn fn, const void *ctx) {
    if (it->ndim == 1) {
        int64_t st[ITER_MAX_OPS];
        for (int k = 0; k < it->nops; k++) st[k] = it->stride[k][0];
        if (it->shape[0] > 0) fn((void *)ctx, it->shape[0], it->base, st);
        return;
    }
    iter_run(it, fn, (void *)ctx);
}

/* The one-run case (contiguous or broadcast scalar operands) calls the kernel directly. */
static void cpu_binary(KBinOp op, DType cdt, StridedIter *it) {
    if (it->ndim == 1 && it->shape[0] > 0) {
        const int64_t st[3] = {it->stride[0][0], it->stride[1][0], it->stride[2][0]};
        bin_kernel(op, cdt, it->shape[0], it->base, st);
        return;
    }
    run_nd(it, bin_run, &(RunCtx){.op = op, .cdt = cdt});
}

static void cpu_unary(KUnOp op, DType cdt, StridedIter *it, double p1, double p2) {
    if (it->ndim == 1 && it->shape[0] > 0) {
        const int64_t st[2] = {it->stride[0][0], it->stride[1][0]};
        un_kernel(op, cdt, it->shape[0], it->base, st, p1, p2);
        return;
    }
    run_nd(it, un_run, &(RunCtx){.op = op, .cdt = cdt, .p1 = p1, .p2 = p2});
}

static void cpu_where(StridedIter *it) { run_nd(it, where_run, it); }

static void cpu_copy(StridedIter *it, DType odt, DType adt) { run_nd(it, copy_run, &(RunCtx){.cdt = odt, .dt2 = adt}); }

static void cpu_fill(StridedIter *it, DType dt, double v) { run_nd(it, fill_run, &(RunCtx){.cdt = dt, .p1 = v}); }

static void cpu_unary_backward(KUnOp op, DType cdt, int64_t n, const void *x, const void *y, const void *gy, void *gx,
                               double p1, double p2) {
    if (cdt == DT_F32) k_unary_backward_f32(op, n, x, y, gy, gx, p1, p2);
    else k_unary_backward_f64(op, n, x, y, gy, gx, p1, p2);
}

static int cpu_gemm(DType dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A, int64_t lda,
                    const void *B, int64_t ldb, double beta, void *C, int64_t ldc) {
    switch (dt) {
    case DT_F32: return k_gemm_f32(ta, tb, M, N, K, (float)alpha, A, lda, B, ldb, (float)beta, C, ldc);
    case DT_F64: return k_gemm_f64(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    case DT_BF16: return k_gemm_bf16(ta, tb, M, N, K, (float)alpha, A, lda, B, ldb, (float)beta, C, ldc);
    default: return -1;
    }
}

/* ---- row-wise families ---- */

static void cpu_reduce(KRedOp op, DType cdt, const void *x, int64_t outer, int64_t n, int64_t inner, void *out) {
    if (cdt == DT_F32) k_reduce_f32(op, x, outer, n, inner, out);
    else if (cdt == DT_F64) k_reduce_f64(op, x, outer, n, inner, out);
    else k_reduce_i64(op, x, outer, n, inner, out);
}

static void cpu_argreduce(int want_max, DType cdt, const void *x, int64_t outer, int64_t n, int64_t inner, void *vals,
                          int64_t *idx) {
    if (cdt == DT_F32) k_argreduce_f32(want_max, x, outer, n, inner, vals, idx);
    else if (cdt == DT_F64) k_argreduce_f64(want_max, x, outer, n, inner, vals, idx);
    else k_argreduce_i64(want_max, x, outer, n, inner, vals, idx);
}

static void cpu_softmax(int log, DType cdt, const void *x, int64_t outer, int64_t n, int64_t inner, void *y) {
    if (cdt == DT_F32) k_softmax_f32(log, x, outer, n, inner, y);
    else k_softmax_f64(log, x, outer, n, inner, y);
}

static void cpu_softmax_backward(int log, DType cdt, const void *y, const void *gy, int64_t outer, int64_t n,
                                 int64_t inner, void *gx) {
    if (cdt == DT_F32) k_softmax_backward_f32(log, y, gy, outer, n, inner, gx);
    else k_softmax_backward_f64(log, y, gy, outer, n, inner, gx);
}

static int64_t cpu_ce_fwd(DType cdt, const void *x, int64_t N, int64_t C, const int64_t *t, int64_t ignore, double ls,
                          void *loss, void *lse) {
    if (cdt == DT_F32) return k_cross_entropy_fwd_f32(x, N, C, t, ignore, ls, loss, lse);
    return k_cross_entropy_fwd_f64(x, N, C, t, ignore, ls, loss, lse);
}

static void cpu_ce_bwd(DType cdt, const void *x, const void *lse, int64_t N, int64_t C, const int64_t *t,
                       int64_t ignore, double ls, const void *g, void *gx) {
    if (cdt == DT_F32) k_cross_entropy_bwd_f32(x, lse, N, C, t, ignore, ls, g, gx);
    else k_cross_entropy_bwd_f64(x, lse, N, C, t, ignore, ls, g, gx);
}

static void cpu_ln_fwd(DType cdt, const void *x, const void *w, const void *b, int64_t rows, int64_t C, double eps,
                       void *y, void *mean, void *rstd) {
    if (cdt == DT_F32) k_layernorm_fwd_f32(x, w, b, rows, C, eps, y, mean, rstd);
    else k_layernorm_fwd_f64(x, w, b, rows, C, eps, y, mean, rstd);
}

static void cpu_ln_bwd(DType cdt, const void *x, const void *w, const void *mean, const void *rstd, const void *gy,
                       int64_t rows, int64_t C, void *gx, void *gw, void *gb) {
    if (cdt == DT_F32) k_layernorm_bwd_f32(x, w, mean, rstd, gy, rows, C, gx, gw, gb);
    else k_layernorm_bwd_f64(x, w, mean, rstd, gy, rows, C, gx, gw, gb);
}

/* ---- optimizers ---- */

static void cpu_sgd(DType cdt, int64_t n, void *p, const void *g, void *buf, int init, const KSgdArgs *a) {
    if (cdt == DT_F32) k_sgd_f32(n, p, g, buf, init, a);
    else k_sgd_f64(n, p, g, buf, init, a);
}

static void cpu_adam(DType cdt, int64_t n, void *p, const void *g, void *m, void *v, void *vmax, const KAdamArgs *a) {
    if (cdt == DT_F32) k_adam_f32(n, p, g, m, v, vmax, a);
    else k_adam_f64(n, p, g, m, v, vmax, a);
}

static double cpu_norm_pow(DType cdt, int64_t n, const void *x, double p) {
    return cdt == DT_F32 ? k_norm_pow_f32(n, x, p) : k_norm_pow_f64(n, x, p);
}

/* ---- pooling, attention ---- */

static void cpu_pool_fwd(DType cdt, const KPool2d *g, const void *x, void *y, int64_t *idx, uint8_t *code) {
    if (cdt == DT_F64) k_max_pool2d_fwd_f64(g, x, y, idx, code);
    else k_max_pool2d_fwd_f32(g, x, y, idx, code);
}

static void cpu_pool_bwd(DType cdt, const KPool2d *g, const void *gy, const int64_t *idx, const uint8_t *code, void *gx) {
    if (cdt == DT_F64) k_max_pool2d_bwd_f64(g, gy, idx, code, gx);
    else k_max_pool2d_bwd_f32(g, gy, idx, code, gx);
}

static int cpu_attn_fwd(DType cdt, const KAttn *a, const void *q, const void *k, const void *v, void *o, void *lse) {
    if (cdt == DT_F64) return k_attention_fwd_f64(a, q, k, v, o, lse);
    return k_attention_fwd_f32(a, q, k, v, o, lse);
}

static int cpu_attn_bwd(DType cdt, const KAttn *a, const void *q, const void *k, const void *v, const void *o,
                        const void *lse, const void *go, void *gq, void *gk, void *gv) {
    if (cdt == DT_F64) return k_attention_bwd_f64(a, q, k, v, o, lse, go, gq, gk, gv);
    return k_attention_bwd_f32(a, q, k, v, o, lse, go, gq, gk, gv);
}

static void cpu_fp8_quantize(KFp8Fmt fmt, int64_t n, const float *x, float scale, uint8_t *q, float *amax) {
    if (q) k_fp8_quantize_f32(fmt, n, x, scale, q);
    if (amax) *amax = k_fp8_amax_f32(n, x);
}

static int cpu_rng_fill(const KRngFill *r, DType dt, int64_t n, void *out) {
    k_rng_fill(r, dt, n, out);
    return 0;
}

const Backend backend_cpu = {
    .name = "cpu",
    .alloc = cpu_mem_alloc,
    .free = cpu_mem_free,
    .cached_bytes = cpu_mem_cached_bytes,
    .empty_cache = cpu_mem_empty_cache,
    .to_host = cpu_to_host,
    .from_host = cpu_from_host,
    .host_ptr = cpu_host_ptr,
    .zero = cpu_zero,
    .stream_current = cpu_stream_current,
    .synchronize = cpu_noop,
    .event_new = cpu_event_new,
    .event_free = cpu_event_free,
    .event_record = cpu_event_op,
    .event_wait = cpu_event_op,
    .event_sync = cpu_event_op,
    .binary = cpu_binary,
    .unary = cpu_unary,
    .unary_backward = cpu_unary_backward,
    .where = cpu_where,
    .copy = cpu_copy,
    .fill = cpu_fill,
    .gemm = cpu_gemm,
    .reduce = cpu_reduce,
    .argreduce = cpu_argreduce,
    .softmax = cpu_softmax,
    .softmax_backward = cpu_softmax_backward,
    .cross_entropy_fwd = cpu_ce_fwd,
    .cross_entropy_bwd = cpu_ce_bwd,
    .layernorm_fwd = cpu_ln_fwd,
    .layernorm_bwd = cpu_ln_bwd,
    .gather = k_gather,
    .index_select = k_index_select,
    .scatter_add = k_scatter_add,
    .index_add = k_index_add,
    .sgd = cpu_sgd,
    .adam = cpu_adam,
    .norm_pow = cpu_norm_pow,
    .conv2d_fwd = k_conv2d_fwd,
    .conv2d_bwd = k_conv2d_bwd,
    .max_pool2d_fwd = cpu_pool_fwd,
    .max_pool2d_bwd = cpu_pool_bwd,
    .attention_fwd = cpu_attn_fwd,
    .attention_bwd = cpu_attn_bwd,
    .fp8_quantize = cpu_fp8_quantize,
    .fp8_dequantize = k_fp8_dequantize_f32,
    .rng_fill = cpu_rng_fill,
};

/* The CUDA backend (backend_cuda.c) is linked into the CUDA build only;
 * elsewhere these weak references stay NULL and cuda:N is refused. Hidden:
 * only a definition linked into the same program or accel.so fills them,
 * never a host's function of the same name (docs/embedding.md). */
extern const Backend *cuda_backend_select(int index) __attribute__((weak, visibility("hidden")));
extern int cuda_backend_count(char *why, size_t n) __attribute__((weak, visibility("hidden")));
extern void cuda_backend_set_allow_tf32(int on) __attribute__((weak, visibility("hidden")));
extern int cuda_backend_get_allow_tf32(void) __attribute__((weak, visibility("hidden")));
extern int cuda_backend_capability(int index, int *major, int *minor) __attribute__((weak, visibility("hidden")));
extern int cuda_backend_memory(int index, BackendMemOp op, BackendMemStats *out) __attribute__((weak, visibility("hidden")));

#define NO_CUDA_BUILD "this accel-lua is built without CUDA (make CUDA=1)"

const Backend *backend_for(Device d) {
    if (d.type == DEV_CPU) return &backend_cpu;
    if (d.type == DEV_SIM) return &backend_sim;
    if (cuda_backend_select) return cuda_backend_select(d.index);
    return accel_fail("device cuda:%d is not available: " NO_CUDA_BUILD, d.index);
}

/* Every backend of this build. */
static const Backend *const all_backends[] = {&backend_cpu, &backend_sim};
#define N_BACKENDS (sizeof all_backends / sizeof all_backends[0])

const Backend *backend_by_name(const char *name) {
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (strcmp(name, all_backends[i]->name) == 0) return all_backends[i];
    if (strcmp(name, "cuda") == 0) return backend_for((Device){DEV_CUDA, 0});
    return accel_fail("no backend named '%s' (cpu, sim, cuda)", name);
}

int backend_cuda_built(void) { return cuda_backend_select != NULL; }

int backend_cuda_count(char *why, size_t n) {
    if (cuda_backend_count) return cuda_backend_count(why, n);
    if (why && n) snprintf(why, n, NO_CUDA_BUILD);
    return 0;
}

int backend_device_count(DeviceType t) {
    if (t == DEV_CPU || t == DEV_SIM) return 1;
    return t == DEV_CUDA ? backend_cuda_count(NULL, 0) : 0;
}

/* Waits for the queued work of the host-side backends (the CUDA backend's
 * streams are synchronised by its own exit path). */
int backend_synchronize_all(void) {
    int rc = 0;
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (all_backends[i]->synchronize() != 0) rc = -1;
    return rc;
}

void backend_cuda_set_allow_tf32(int on) {
    if (cuda_backend_set_allow_tf32) cuda_backend_set_allow_tf32(on);
}

int backend_cuda_get_allow_tf32(void) { return cuda_backend_get_allow_tf32 ? cuda_backend_get_allow_tf32() : 0; }

int backend_cuda_capability(int index, int *major, int *minor) {
    if (cuda_backend_capability) return cuda_backend_capability(index, major, minor);
    return accel_fail_int("device cuda:%d is not available: " NO_CUDA_BUILD, index);
}

int backend_cuda_memory(int index, BackendMemOp op, BackendMemStats *out) {
    if (cuda_backend_memory) return cuda_backend_memory(index, op, out);
    return accel_fail_int("device cuda:%d is not available: " NO_CUDA_BUILD, index);
}

void backend_set_threads(int n) { kernel_set_threads(n); }
int backend_get_threads(void) { return kernel_get_threads(); }
const char *backend_cpu_kernels(void) { return kernel_isa(); }
