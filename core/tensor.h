/* tensor.h: the core runtime's tensor: a refcounted, strided view over a
 * refcounted storage, with dtype, device and autograd fields. Usable from C
 * without Lua. Functions that can fail return NULL (or -1) and leave a
 * message in accel_last_error(); returned Tensor* are new references that
 * the caller releases with tensor_release(). */
#ifndef ACCEL_TENSOR_H
#define ACCEL_TENSOR_H

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include "../kernels/dtype.h"
#include "error.h"

#define TENSOR_MAX_DIMS 8

typedef enum { DEV_CPU = 0, DEV_CUDA = 1, DEV_SIM = 2 } DeviceType; /* sim: the simulated device (backend_sim.c) */
typedef struct {
    DeviceType type;
    int index;
} Device;

/* Whether a and b are the same device (type and index). */
static inline bool device_same(Device a, Device b) { return a.type == b.type && a.index == b.index; }

typedef struct Storage {
    void *data;
    size_t nbytes;
    int refcount;
    Device device;
    int64_t version;  /* bumped by every in-place write; checked by autograd */
    bool borrowed;    /* data not owned (e.g. mmap of a file); not freed */
    void (*on_free)(void *data, size_t nbytes, void *ud); /* for borrowed */
    void *free_ud;
} Storage;

struct AGNode;

typedef struct Tensor {
    int refcount;
    DType dtype;
    Device device;
    int ndim;
    int64_t numel;
    int64_t offset; /* in elements */
    int64_t shape[TENSOR_MAX_DIMS];
    int64_t stride[TENSOR_MAX_DIMS]; /* in elements */
    Storage *storage;
    bool requires_grad;
    bool is_view;          /* shares storage with a tensor that existed before */
    struct Tensor *grad;   /* accumulated gradient (leaves) */
    struct AGNode *grad_fn;
    /* Called once per backward pass, after this leaf's LAST gradient
     * contribution of that pass has been accumulated into .grad (a leaf
     * used twice, e.g. a tied weight, gets one call); not called when the
     * pass brought it no gradient. See autograd.c. */
    void (*grad_hook)(struct Tensor *self, void *ud);
    void *grad_hook_ud;
    /* engine scratch for hooked leaves: the pass that counted them, the
     * contributions still to come in it, whether one arrived */
    uint32_t ag_pass;
    int32_t ag_pending;
    bool ag_got;
    /* tensor hooks of a leaf (ag_hook_add; a non-leaf's are on its
     * grad_fn), and its gradient summed over the edges of a pass until
     * they run on it */
    struct AGHook *hooks;
    struct Tensor *ag_sum;
} Tensor;

/* ---- storage and lifetime ---- */
Storage *storage_new(size_t nbytes, Device dev);
Storage *storage_wrap(void *data, size_t nbytes, Device dev, void (*on_free)(void *, size_t, void *), void *ud);
void storage_release(Storage *s);
Tensor *tensor_retain(Tensor *t);
void tensor_release(Tensor *t);
size_t tensor_live_bytes(void); /* bytes of storage currently alive */
size_t tensor_peak_live_bytes(void);     /* the most alive at once since start or the last reset */
void tensor_reset_peak_live_bytes(void); /* peak := live now */
Tensor *tensor_header_alloc(void); /* zeroed header from the pool, NULL with error */
void tensor_header_free(Tensor *t);

/* ---- metadata helpers ---- */
/* t's first element as a *device* pointer: hand it to backend entries
 * (backend.h); never dereference it on the host (see host access below). */
static inline void *tensor_data(const Tensor *t) {
    return (char *)t->storage->data + t->offset * (int64_t)dtype_size(t->dtype);
}
bool tensor_is_contiguous(const Tensor *t);
const char *dtype_name(DType dt);       /* "float32" */
int dtype_from_name(const char *name);  /* accepts float32/float/fp32/f32/bf16/... ; -1 if unknown */
/* [*lo, *hi]: the widest run of integers dt holds, each exactly (a float's
 * +-2^(mantissa bits + 1): float16 [-2048, 2048]) */
void dtype_int_range(DType dt, int64_t *lo, int64_t *hi);
DType dtype_promote(DType a, DType b);
/* The dtype of an op on tensors a and b, as torch's result_type: a 0-dim
 * tensor beside a dimensioned one counts only when its category (bool <
 * integer < floating) is higher (bf16 tensor * f32 scalar tensor: bf16). */
DType tensor_result_dtype(const Tensor *a, const Tensor *b);
DType dtype_default_float(void);
const char *device_str(Device d, char *buf, size_t n);
int device_parse(const char *s, Device *out);
/* 0 when b is NULL or on a's device, else -1 with "<op>: tensors are on
 * different devices (<a's> and <b's>)". */
int tensor_check_device(const char *op, const Tensor *a, const Tensor *b);
int shape_str(const int64_t *shape, int ndim, char *buf, size_t n); /* "[2, 3]" */
const char *tensor_shape_str(const Tensor *t); /* thread-local rotating buffers */

/* ---- checked size arithmetic ----
 * Every size, stride, element count and byte count is computed with these,
 * so none can wrap. The invariant they keep: for every tensor, the product
 * of its sizes with zeros counted as 1 (what its contiguous strides need)
 * fits in int64, and so does its element count times the element size. */
/* a * b and a + b of non-negative sizes; -1 when either is negative or the
 * result does not fit in int64 (so -1 never passes for a size). */
int64_t size_mul(int64_t a, int64_t b);
int64_t size_add(int64_t a, int64_t b);
/* Elements of a shape; -1 when a size is negative or the sizes (zeros
 * counted as 1) multiply past INT64_MAX. */
int64_t shape_numel(const int64_t *shape, int ndim);
/* shape_numel with the error "<op>: shape [..] has more than 2^63 elements"
 * (or names the negative size); with elsize > 0 also checks that the bytes,
 * numel * elsize, fit in int64 ("<op>: shape [..] of <dtype> needs more
 * than 2^63 bytes"). -1 on error. */
int64_t shape_check(const char *op, const int64_t *shape, int ndim, int dtype);
#define SHAPE_NO_DTYPE (-1)

/* ---- creation ---- */
Tensor *tensor_empty(const int64_t *shape, int ndim, DType dt, Device dev);
Tensor *tensor_zeros(const int64_t *shape, int ndim, DType dt, Device dev);
Tensor *tensor_full(const int64_t *shape, int ndim, double v, DType dt, Device dev);
Tensor *tensor_scalar(double v, DType dt); /* 0-dim on cpu */
Tensor *tensor_from_data(const void *data, const int64_t *shape, int ndim, DType dt);
Tensor *tensor_arange(double start, double end, double step, DType dt);
Tensor *tensor_linspace(double start, double end, int64_t steps, DType dt);
Tensor *tensor_empty_like(const Tensor *t);

/* ---- views (share storage; autograd-aware) ---- */
Tensor *tensor_view(Tensor *t, const int64_t *shape, int ndim);    /* one -1 allowed */
Tensor *tensor_reshape(Tensor *t, const int64_t *shape, int ndim); /* view when possible, else copy */
Tensor *tensor_transpose(Tensor *t, int d0, int d1);               /* dims 0-based, negatives allowed */
Tensor *tensor_permute(Tensor *t, const int *dims, int n);
Tensor *tensor_narrow(Tensor *t, int dim, int64_t start, int64_t length); /* start 0-based */
Tensor *tensor_select(Tensor *t, int dim, int64_t index);                 /* index 0-based */
Tensor *tensor_unsqueeze(Tensor *t, int dim);
Tensor *tensor_squeeze(Tensor *t, int dim); /* dim = TENSOR_ALL_DIMS: all size-1 dims */
Tensor *tensor_expand(Tensor *t, const int64_t *shape, int ndim); /* -1 keeps */
Tensor *tensor_as_strided(Tensor *t, const int64_t *shape, const int64_t *stride, int ndim, int64_t offset);
/* The (d1, d2) diagonal as a view, a new last dim (dims 0-based, negatives
 * allowed; offset > 0 above the main diagonal), as torch.diagonal. */
Tensor *tensor_diagonal(Tensor *t, int64_t offset, int d1, int d2);
/* The windows of size along dim, every step, as a view (torch.Tensor.unfold):
 * dim becomes the window count, a last dim of size is added. */
Tensor *tensor_unfold(Tensor *t, int dim, int64_t size, int64_t step);
Tensor *tensor_contiguous(Tensor *t); /* returns t itself (retained) when already contiguous */
Tensor *tensor_clone(Tensor *t);
Tensor *tensor_detach(Tensor *t); /* shares storage, no grad */
Tensor *tensor_flatten(Tensor *t, int start, int end);
#define TENSOR_ALL_DIMS (-1000)

/* Normalise a 0-based dim that may be negative; -1 with an error if out of range. */
int tensor_wrap_dim(const Tensor *t, int dim, const char *op);

/* ---- copies and casts ---- */
Tensor *tensor_to_dtype(Tensor *t, DType dt); /* returns t retained if same dtype */
/* t converted to dt, taking over the caller's reference to t (NULL passes through). */
Tensor *tensor_to_dtype_owned(Tensor *t, DType dt);
/* A contiguous copy of t in dtype dt (t itself when it already is one),
 * outside the graph: a kernel's operand. */
Tensor *tensor_contiguous_as(Tensor *t, DType dt);
/* The dtype a gradient of dtype dt is accumulated in by the scatter /
 * index-add kernels: float64 stays, the half dtypes and float32 use float32
 * (the result is rounded back once). */
static inline DType grad_accum_dtype(DType dt) { return dt == DT_F64 ? DT_F64 : DT_F32; }
int tensor_copy_(Tensor *dst, Tensor *src);   /* broadcasting src to dst, casting */
/* Whether src reads memory that dst writes without being dst itself (the
 * same elements in the same layout): an in-place op must read a copy. */
bool tensor_partial_overlap(const Tensor *dst, const Tensor *src);
bool tensor_same_shape(const Tensor *a, const Tensor *b); /* same dims and sizes */
/* Whether every element of t has its own memory (not an expanded view). */
bool tensor_is_writable(const Tensor *t);
/* -1 (an error naming op, as torch's) when several elements of t share one
 * memory location (an expanded tensor): t cannot be written in place. */
int tensor_check_writable(const Tensor *t, const char *op);
int tensor_fill_(Tensor *t, double v);
/* Visit dst/src element runs: calls k_cast-like strided copy. Used by contiguous, copy_. */
void tensor_copy_strided(Tensor *dst, const Tensor *src);

/* ---- element access (host reads through the device's to_host) ---- */
double tensor_item(const Tensor *t);                 /* numel must be 1 (caller checks) */
double tensor_get_flat(const Tensor *t, int64_t i);  /* i-th element in logical row-major order */

/* ---- host access (host_access.c): the one road from host code to values ----
 * tensor_host_map gives a host pointer to t's first element, t's strides
 * applying: on the CPU the memory itself (no copy, after the device's
 * queued work), on a device whose memory the host cannot address a staging
 * copy of the storage from t's offset on, written back by
 * tensor_host_unmap when mode has HOST_WRITE. NULL with an error. */
enum { HOST_READ = 1, HOST_WRITE = 2, HOST_RW = 3 };
typedef struct {
    const Tensor *t;
    char *host;    /* what map returned */
    void *staging; /* NULL when host is the device memory itself */
    size_t nbytes;
    int mode;
} HostMap;
void *tensor_host_map(const Tensor *t, int mode, HostMap *m);
int tensor_host_unmap(HostMap *m); /* 0, or -1 with an error (write-back failed) */
/* For a tensor just created and filled through m: unmap, and return t, or
 * NULL (t released) when the write-back failed. */
Tensor *tensor_host_finish(Tensor *t, HostMap *m);
/* Element i (logical row-major order) of t, read through host, t's mapping. */
double tensor_host_load(const Tensor *t, const void *host, int64_t i);
int64_t tensor_host_load_i64(const Tensor *t, const void *host, int64_t i);
/* t's numel elements (t's dtype, row-major) to / from a host buffer. */
int tensor_to_host(const Tensor *t, void *dst);
int tensor_from_host(Tensor *t, const void *src);
/* t's data as a host address where the device's memory is host-addressable
 * (the CPU), else NULL: for consumers that take host buffers (MPI) and
 * refuse or stage otherwise. */
void *tensor_host_ptr(const Tensor *t);
/* A contiguous copy of t on device d, through the host (no autograd). */
Tensor *tensor_to_device(const Tensor *t, Device d);
/* t on device d: t itself (retained) when it is there, else tensor_to_device
 * recorded by autograd (ToCopyBackward: the gradient is moved back to t's
 * device), as PyTorch's t.to(device). */
Tensor *tensor_to(Tensor *t, Device d);
/* dst = src on the device: both contiguous, same dtype and numel. */
void tensor_copy_flat(Tensor *dst, const Tensor *src);

/* ---- printing: PyTorch-like "tensor([...])" into a malloc'd string ---- */
/* torch.set_printoptions' fields; print_options_default() is PyTorch's
 * "default" profile (precision 4, threshold 1000, edgeitems 3, linewidth 80,
 * sci_mode chosen per tensor). */
typedef struct {
    int precision;    /* digits after the point */
    double threshold; /* more elements than this: summarized (may be inf) */
    int edgeitems;    /* items kept at each end of a summarized dim */
    int linewidth;    /* characters per line, for wrapping */
    int sci_mode;     /* -1: chosen per tensor; 0: never; 1: always */
} PrintOptions;
PrintOptions print_options_default(void);
char *tensor_format(const Tensor *t); /* with print_options_default() */
char *tensor_format_with(const Tensor *t, const PrintOptions *o);

/* ---- in-place bookkeeping ---- */
static inline void tensor_bump_version(Tensor *t) { t->storage->version++; }

#endif
