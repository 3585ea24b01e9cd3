/* backend.h: the device seam. A backend is a struct of function pointers
 * (memory, host<->device copies, streams and events, and every compute
 * family the core uses); the core reaches compute and device memory only
 * through it, the way ggml's backends do (ggml-backend-impl.h: buffer,
 * backend and device interfaces behind one table each).
 *
 * DESIGN
 *  - Pointers handed to an entry are *device* pointers: what the backend's
 *    alloc returned, plus byte offsets. The core never dereferences them;
 *    reading or writing values from the host goes through to_host /
 *    from_host (or host_ptr, a zero-copy map where the memory is
 *    host-addressable, as on the CPU). tensor.h's host-access API
 *    (tensor_host_read / tensor_host_write) is the one place that does this.
 *  - Shapes and strides are in elements. Elementwise entries (binary,
 *    unary, where, copy, fill) take an n-d launch description, a
 *    StridedIter (iter.h: shape, each operand's base and strides, operand 0
 *    the output; stride 0 broadcasts); a GPU backend launches one kernel
 *    over it, the CPU backend splits it into innermost runs (iter_run).
 *    The callee may reorder/merge the description's dims (it is consumed).
 *    Row-wise families (reductions, softmax, norms, indexing) take a
 *    contiguous (outer, n, inner) view.
 *  - Dtype dispatch is the backend's business: entries take the compute
 *    dtype (cdt: F32, F64, or I64 where an entry supports integers) and
 *    the backend chooses its kernel. The op codes and parameter blocks are
 *    in kernels/kops.h, shared by all backends.
 *  - Work is queued in stream order on the device's current stream. The
 *    host waits only in synchronize, event_sync and to_host. On the CPU
 *    every call runs to completion before it returns (streams are no-ops).
 *  - Errors: entries that can fail return nonzero (memory, a library);
 *    argument checking is done by the core before the call.
 *
 * ADDING A DEVICE
 *  1. Give it a DeviceType in tensor.h and a name in device_str/parse.
 *  2. Write a folder with its kernels and one glue file that fills a
 *     `const Backend backend_<dev>` with every entry below (a missing
 *     entry is a bug, except the optional fp8_gemm and gemm_batched: tests/c/test_backend.c
 *     checks each one against the CPU backend or a reference on random
 *     inputs, odd sizes and strides: `build/test_backend <dev>`).
 *  3. Return it from backend_for() (backend_cpu.c) for its DeviceType.
 *  Nothing in the ops changes. */
#ifndef ACCEL_BACKEND_H
#define ACCEL_BACKEND_H

#include "../tensor.h"
#include "iter.h"
#include "../../kernels/kops.h"

typedef struct Backend {
    const char *name;

    /* ---- memory ---- */
    void *(*alloc)(size_t nbytes); /* NULL on failure */
    void (*free)(void *p, size_t nbytes);
    size_t (*cached_bytes)(void);
    void (*empty_cache)(void);

    /* ---- host <-> device (nbytes at device pointer dev) ---- */
    int (*to_host)(void *host, const void *dev, size_t nbytes);   /* waits for queued work first */
    int (*from_host)(void *dev, const void *host, size_t nbytes); /* host buffer reusable on return */
    /* A host address for device memory (zero-copy map), or NULL when the
     * memory is not host-addressable (then copy). */
    void *(*host_ptr)(void *dev);
    void (*zero)(void *dev, size_t nbytes); /* all bytes 0 (a fresh tensor's zeros) */

    /* ---- streams and events (handles are the backend's) ---- */
    void *(*stream_current)(void);
    int (*synchronize)(void);               /* host waits for all queued work */
    void *(*event_new)(void);               /* NULL on failure */
    void (*event_free)(void *ev);
    int (*event_record)(void *ev);          /* mark the current stream's position */
    int (*event_wait)(void *ev);            /* current stream waits for ev (host does not) */
    int (*event_sync)(void *ev);            /* host waits for ev */

    /* ---- elementwise, n-d (see DESIGN) ---- */
    void (*binary)(KBinOp op, DType cdt, StridedIter *it);                  /* out, a, b; compare ops: out bool */
    void (*unary)(KUnOp op, DType cdt, StridedIter *it, double p1, double p2); /* out, a */
    /* gx = gy * f'(x) (y: the saved output), contiguous n elements, cdt F32/F64 */
    void (*unary_backward)(KUnOp op, DType cdt, int64_t n, const void *x, const void *y, const void *gy, void *gx,
                           double p1, double p2);
    void (*where)(StridedIter *it);                                        /* out, cond (bool), a, b; any dtype */
    void (*copy)(StridedIter *it, DType odt, DType adt);                   /* out, a; converting cast or copy */
    void (*fill)(StridedIter *it, DType dt, double v);                     /* out */

    /* ---- GEMM, row-major: C = alpha op(A) op(B) + beta C (dt F32, F64, BF16->F32) ---- */
    int (*gemm)(DType dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A, int64_t lda,
                const void *B, int64_t ldb, double beta, void *C, int64_t ldc);
    /* Optional (NULL: callers loop over gemm): `batch` products of dt F32 or
     * BF16->F32 at once, product i on A + i sa, B + i sb, C + i sc
     * (strides in elements; the operands of different products may
     * interleave, as the heads of one (B, L, H, D) tensor do). */
    int (*gemm_batched)(DType dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A,
                        int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb, double beta, void *C,
                        int64_t ldc, int64_t sc, int64_t batch);

    /* ---- reductions over a contiguous (outer, n, inner) view ---- */
    void (*reduce)(KRedOp op, DType cdt, const void *x, int64_t outer, int64_t n, int64_t inner, void *out);
    void (*argreduce)(int want_max, DType cdt, const void *x, int64_t outer, int64_t n, int64_t inner, void *vals,
                      int64_t *idx);

    /* ---- softmax / log-softmax / cross-entropy (cdt F32/F64) ---- */
    void (*softmax)(int log, DType cdt, const void *x, int64_t outer, int64_t n, int64_t inner, void *y);
    void (*softmax_backward)(int log, DType cdt, const void *y, const void *gy, int64_t outer, int64_t n, int64_t inner,
                             void *gx);
    /* returns -1, or the first row with an invalid target */
    int64_t (*cross_entropy_fwd)(DType cdt, const void *x, int64_t N, int64_t C, const int64_t *target,
                                 int64_t ignore_index, double label_smoothing, void *loss, void *lse);
    void (*cross_entropy_bwd)(DType cdt, const void *x, const void *lse, int64_t N, int64_t C, const int64_t *target,
                              int64_t ignore_index, double label_smoothing, const void *g, void *gx);

    /* ---- layer norm over the last dim C (w, b, gw, gb may be NULL) ---- */
    void (*layernorm_fwd)(DType cdt, const void *x, const void *w, const void *b, int64_t rows, int64_t C, double eps,
                          void *y, void *mean, void *rstd);
    void (*layernorm_bwd)(DType cdt, const void *x, const void *w, const void *mean, const void *rstd, const void *gy,
                          int64_t rows, int64_t C, void *gx, void *gw, void *gb);

    /* ---- indexing over contiguous (outer, n, inner) views ---- */
    void (*gather)(const void *x, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m, void *out,
                   size_t elsize);
    void (*index_select)(const void *x, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m,
                         void *out, size_t elsize);
    void (*scatter_add)(DType cdt, void *gx, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m,
                        const void *gout);
    void (*index_add)(DType cdt, void *gx, int64_t outer, int64_t n, int64_t inner, const int64_t *idx, int64_t m,
                      const void *gout);

    /* ---- optimizer updates over flat buffers (cdt F32/F64) ---- */
    void (*sgd)(DType cdt, int64_t n, void *p, const void *g, void *buf, int buf_init, const KSgdArgs *a);
    void (*adam)(DType cdt, int64_t n, void *p, const void *g, void *m, void *v, void *vmax, const KAdamArgs *a);
    double (*norm_pow)(DType cdt, int64_t n, const void *x, double p); /* sum |x|^p; waits (a host value) */

    /* ---- convolution, pooling, attention (return nonzero on failure) ---- */
    int (*conv2d_fwd)(DType dt, const KConv2d *g, const void *x, const void *w, const void *b, void *y);
    int (*conv2d_bwd)(DType dt, const KConv2d *g, const void *x, const void *w, const void *gy, void *gx, void *gw,
                      void *gb);
    void (*max_pool2d_fwd)(DType cdt, const KPool2d *g, const void *x, void *y, int64_t *idx, uint8_t *code);
    void (*max_pool2d_bwd)(DType cdt, const KPool2d *g, const void *gy, const int64_t *idx, const uint8_t *code,
                           void *gx);
    int (*attention_fwd)(DType cdt, const KAttn *a, const void *q, const void *k, const void *v, void *o, void *lse);
    int (*attention_bwd)(DType cdt, const KAttn *a, const void *q, const void *k, const void *v, const void *o,
                         const void *lse, const void *go, void *gq, void *gk, void *gv);

    /* ---- fp8 recipe casts over n contiguous float32 elements ---- */
    /* q = saturate(fl32(x * scale)) as fmt (+-inf and out of range to +-max,
     * NaN stays NaN); q may be NULL (amax only). amax, when not NULL: one
     * device float, max |x| (0 for n = 0, NaN when x holds a NaN). */
    void (*fp8_quantize)(KFp8Fmt fmt, int64_t n, const float *x, float scale, uint8_t *q, float *amax);
    void (*fp8_dequantize)(KFp8Fmt fmt, int64_t n, const uint8_t *q, float scale_inv, float *out); /* fl32(code * s) */
    /* The one optional entry (NULL: the core emulates every fp8 product):
     * a native fp8 GEMM. C (M, N) float32 = fl32(acc * scale), acc the
     * float32-accumulated product of A (M, K) and B^T, A (M, K) and B
     * (N, K) contiguous row-major codes of formats fa / fb (both K-major,
     * as cuBLASLt's fp8 GEMMs need). Returns 0 when done, 1 when it takes
     * no such operands (shape, format pair: the core then emulates), -1 on
     * failure with an error set. */
    int (*fp8_gemm)(KFp8Fmt fa, KFp8Fmt fb, int64_t M, int64_t N, int64_t K, const uint8_t *A, const uint8_t *B,
                    float scale, float *C);
    /* ---- random fills: n contiguous elements of dt at out from the
     * stream r->(seed, offset) (kernels/kops.h; the caller advances its
     * offset by krng_blocks). The CPU and sim draw rng.c's stream in
     * order; CUDA computes each element from philox.h, the same values
     * except normal draws, which may differ in the last bits of float64
     * (the device's log / cos). Returns nonzero on failure. ---- */
    int (*rng_fill)(const KRngFill *r, DType dt, int64_t n, void *out);
} Backend;

/* The backend serving a device, or NULL (with an error) if this build has none. */
const Backend *backend_for(Device d);
/* The backend registered under a name ("cpu"), or NULL. */
const Backend *backend_by_name(const char *name);
/* How many devices of a type there are: cpu and sim 1, cuda the GPUs its
 * backend sees (0 in a build without one). */
int backend_device_count(DeviceType t);
extern const Backend backend_cpu;
extern const Backend backend_sim; /* the simulated device (backend_sim.c) */
/* Testing hooks of the sim backend: whether p is one of its handles (which
 * fault if dereferenced); hold (1) / release (0) its worker; read device
 * memory the way a missing synchronisation would (without waiting). */
int backend_sim_is_handle(const void *p);
void backend_sim_debug_hold(int on);
void backend_sim_debug_peek(void *host, const void *dev, size_t nbytes);
/* CUDA (backend_cuda.c, linked into the CUDA build only): whether this
 * build has it; the number of usable GPUs (0, with the reason in why: not
 * a CUDA build, no driver, no GPU); torch.backends.cuda.matmul.allow_tf32
 * (default off; a no-op without CUDA). */
int backend_cuda_built(void);
int backend_cuda_count(char *why, size_t n);
void backend_cuda_set_allow_tf32(int on);
int backend_cuda_get_allow_tf32(void);
/* GPU index's compute capability; -1 with an error where there is no such GPU. */
int backend_cuda_capability(int index, int *major, int *minor);
/* GPU index's caching allocator (torch.cuda.memory_stats' counters):
 * bytes handed out to tensors and held from the driver, now and at their
 * peak, and the calls. READ fills *out, RESET_PEAK resets the peaks,
 * EMPTY_CACHE gives every wholly free segment back (nothing for a GPU this
 * process has not used). -1 with an error where there is no such GPU. */
typedef struct {
    uint64_t allocated, allocated_peak, reserved, reserved_peak, num_allocs, num_frees, num_ooms;
} BackendMemStats;
typedef enum { BACKEND_MEM_READ, BACKEND_MEM_RESET_PEAK, BACKEND_MEM_EMPTY_CACHE } BackendMemOp;
int backend_cuda_memory(int index, BackendMemOp op, BackendMemStats *out);
/* Every device's queued work done (the host waits); -1 with the first
 * error. Called when the interpreter closes (bindings/accel.c), so no
 * queued kernel still runs while the process's libraries unload. */
int backend_synchronize_all(void);
/* The CPU backend's thread team (n <= 0: number of cores). */
void backend_set_threads(int n);
int backend_get_threads(void);
/* Which build of the CPU kernels this process runs (picked at load time from
 * the CPU's features): "x86-64-v3 (AVX2, FMA, F16C)" or the baseline. */
const char *backend_cpu_kernels(void);

#endif
