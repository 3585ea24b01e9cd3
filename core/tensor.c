/* tensor.c: storage and tensor lifetime, metadata, creation, and strided
 * copies. Views live in view.c, printing in format.c. */
#include "tensor.h"
#include "backend/backend.h"
#include "autograd.h"
#include "backend/iter.h"
#include "pool.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static size_t live_bytes, peak_live_bytes;
static ObjPool tensor_pool = {NULL, sizeof(Tensor)};
static ObjPool storage_pool = {NULL, sizeof(Storage)};

Tensor *tensor_header_alloc(void) {
    Tensor *t = pool_alloc(&tensor_pool);
    if (!t) return accel_fail("out of memory allocating a tensor header");
    return t;
}

void tensor_header_free(Tensor *t) { pool_free(&tensor_pool, t); }

size_t tensor_live_bytes(void) { return live_bytes; }
size_t tensor_peak_live_bytes(void) { return peak_live_bytes; }
void tensor_reset_peak_live_bytes(void) { peak_live_bytes = live_bytes; }

Storage *storage_new(size_t nbytes, Device dev) {
    const Backend *be = backend_for(dev);
    if (!be) return NULL;
    Storage *s = pool_alloc(&storage_pool);
    if (!s) return accel_fail("out of memory allocating a storage");
    accel_clear_error();
    s->data = be->alloc(nbytes);
    if (!s->data) {
        pool_free(&storage_pool, s);
        if (accel_has_error()) { /* the backend said why (a bad setting, say) */
            char why[512];
            snprintf(why, sizeof why, "%s", accel_last_error());
            return accel_fail("cannot allocate %zu bytes on %s: %s", nbytes, be->name, why);
        }
        return accel_fail("out of memory: cannot allocate %zu bytes on %s", nbytes, be->name);
    }
    s->nbytes = nbytes;
    s->refcount = 1;
    s->device = dev;
    s->version = 0;
    s->borrowed = false;
    s->on_free = NULL;
    s->free_ud = NULL;
    live_bytes += nbytes;
    if (live_bytes > peak_live_bytes) peak_live_bytes = live_bytes;
    return s;
}

Storage *storage_wrap(void *data, size_t nbytes, Device dev, void (*on_free)(void *, size_t, void *), void *ud) {
    Storage *s = pool_alloc(&storage_pool);
    if (!s) return accel_fail("out of memory allocating a storage");
    *s = (Storage){.data = data, .nbytes = nbytes, .refcount = 1, .device = dev, .borrowed = true,
                   .on_free = on_free, .free_ud = ud};
    return s;
}

void storage_release(Storage *s) {
    if (!s || --s->refcount > 0) return;
    if (s->borrowed) {
        if (s->on_free) s->on_free(s->data, s->nbytes, s->free_ud);
    } else {
        backend_for(s->device)->free(s->data, s->nbytes);
        live_bytes -= s->nbytes;
    }
    pool_free(&storage_pool, s);
}

Tensor *tensor_retain(Tensor *t) {
    if (t) t->refcount++;
    return t;
}

void tensor_release(Tensor *t) {
    if (!t || --t->refcount > 0) return;
    storage_release(t->storage);
    tensor_release(t->grad);
    if (t->hooks || t->ag_sum || t->grad_fn) ag_tensor_freed(t);
    if (t->grad_fn) ag_node_release(t->grad_fn);
    tensor_header_free(t);
}

int64_t size_mul(int64_t a, int64_t b) {
    int64_t r;
    return a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) ? -1 : r;
}

int64_t size_add(int64_t a, int64_t b) {
    int64_t r;
    return a < 0 || b < 0 || __builtin_add_overflow(a, b, &r) ? -1 : r;
}

/* The product of the sizes with zeros counted as 1 (the largest contiguous
 * stride times its size), -1 as size_mul; *has_zero tells if one was 0. */
static int64_t stride_span(const int64_t *shape, int ndim, bool *has_zero) {
    int64_t p = 1;
    *has_zero = false;
    for (int i = 0; i < ndim; i++) {
        *has_zero |= shape[i] == 0;
        p = size_mul(p, shape[i] ? shape[i] : 1); /* stays -1 once it overflows */
    }
    return p;
}

int64_t shape_numel(const int64_t *shape, int ndim) {
    bool zero;
    int64_t p = stride_span(shape, ndim, &zero);
    return p < 0 ? -1 : zero ? 0 : p;
}

int64_t shape_check(const char *op, const int64_t *shape, int ndim, int dtype) {
    char s[200];
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) {
            shape_str(shape, ndim, s, sizeof s);
            return accel_fail_int("%s: negative dimension %lld in shape %s", op, (long long)shape[i], s);
        }
    bool zero;
    int64_t p = stride_span(shape, ndim, &zero), n = zero ? 0 : p;
    if (p >= 0 && (dtype < 0 || size_mul(n, (int64_t)dtype_size((DType)dtype)) >= 0)) return n;
    shape_str(shape, ndim, s, sizeof s);
    if (p >= 0)
        return accel_fail_int("%s: shape %s of %s needs more than 2^63 bytes", op, s, dtype_name((DType)dtype));
    if (zero)
        return accel_fail_int("%s: shape %s is refused: its nonzero sizes multiply to more than 2^63, so its strides "
                              "would overflow (even though it has no elements)", op, s);
    return accel_fail_int("%s: shape %s has more than 2^63 elements", op, s);
}

/* As torch: the strides of size-1 dims do not matter, and a tensor without
 * elements is contiguous whatever its strides. */
bool tensor_is_contiguous(const Tensor *t) {
    if (t->numel == 0) return true;
    int64_t expect = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->stride[d] != expect) return false;
        expect *= t->shape[d];
    }
    return true;
}

/* PyTorch's names (torch.float8_e4m3fn: the e4m3 variant without infinities). */
static const char *const dtype_names[DT_COUNT] = {"float32", "float64", "bfloat16", "float16", "float8_e4m3fn",
                                                  "float8_e5m2", "int64", "int32", "uint8", "bool"};

const char *dtype_name(DType dt) { return dt < DT_COUNT ? dtype_names[dt] : "?"; }

void dtype_int_range(DType dt, int64_t *lo, int64_t *hi) {
    static const int digits[] = {24, 53, 8, 11, 4, 3}; /* F32 F64 BF16 F16 F8E4M3 F8E5M2: mantissa bits + 1 */
    if (dtype_is_float(dt)) *hi = (int64_t)1 << digits[dt], *lo = -*hi;
    else if (dt == DT_I64) *lo = INT64_MIN, *hi = INT64_MAX;
    else if (dt == DT_I32) *lo = INT32_MIN, *hi = INT32_MAX;
    else *lo = 0, *hi = dt == DT_U8 ? 255 : 1;
}

int dtype_from_name(const char *name) {
    static const struct { const char *alias; DType dt; } aliases[] = {
        {"float", DT_F32}, {"fp32", DT_F32}, {"f32", DT_F32}, {"double", DT_F64}, {"fp64", DT_F64},
        {"f64", DT_F64}, {"bf16", DT_BF16}, {"half", DT_F16}, {"fp16", DT_F16}, {"f16", DT_F16},
        {"float8_e4m3", DT_F8E4M3}, {"fp8", DT_F8E4M3}, {"e4m3", DT_F8E4M3}, {"e5m2", DT_F8E5M2},
        {"long", DT_I64}, {"int", DT_I32}, {"byte", DT_U8},
    };
    const char *n = strncmp(name, "accel.", 6) == 0 ? name + 6 : strncmp(name, "torch.", 6) == 0 ? name + 6 : name;
    for (int i = 0; i < DT_COUNT; i++)
        if (strcasecmp(n, dtype_names[i]) == 0) return i;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcasecmp(n, aliases[i].alias) == 0) return (int)aliases[i].dt;
    return -1;
}

/* Promotion categories: bool < integer < float. Within floats the wider
 * wins; bf16 with f16 gives f32 (as PyTorch); fp8 with anything float gives
 * the other; within ints the wider wins, uint8 with a signed int gives that. */
DType dtype_promote(DType a, DType b) {
    if (a == b) return a;
    int fa = dtype_is_float(a), fb = dtype_is_float(b);
    if (fa && !fb) return a;
    if (fb && !fa) return b;
    if (fa && fb) {
        if (a == DT_F64 || b == DT_F64) return DT_F64;
        if (a == DT_F32 || b == DT_F32) return DT_F32;
        bool a8 = a == DT_F8E4M3 || a == DT_F8E5M2, b8 = b == DT_F8E4M3 || b == DT_F8E5M2;
        if (a8 && !b8) return b;
        if (b8 && !a8) return a;
        return DT_F32; /* bf16+f16, e4m3+e5m2 */
    }
    if (a == DT_BOOL) return b;
    if (b == DT_BOOL) return a;
    if (a == DT_I64 || b == DT_I64) return DT_I64;
    if (a == DT_I32 || b == DT_I32) return DT_I32;
    return DT_U8;
}

static int dtype_category(DType dt) { return dt == DT_BOOL ? 0 : dtype_is_float(dt) ? 2 : 1; }

DType tensor_result_dtype(const Tensor *a, const Tensor *b) {
    if ((a->ndim == 0) != (b->ndim == 0)) {
        const Tensor *zero = a->ndim == 0 ? a : b, *dimmed = a->ndim == 0 ? b : a;
        if (dtype_category(zero->dtype) <= dtype_category(dimmed->dtype)) return dimmed->dtype;
    }
    return dtype_promote(a->dtype, b->dtype);
}

DType dtype_default_float(void) { return DT_F32; }

const char *device_str(Device d, char *buf, size_t n) {
    if (d.type == DEV_CPU) snprintf(buf, n, "cpu");
    else if (d.type == DEV_SIM) snprintf(buf, n, "sim");
    else snprintf(buf, n, "cuda:%d", d.index);
    return buf;
}

/* "cpu", "sim", "cuda", each optionally ":N" (as torch.device's strings).
 * cpu and sim have one device, index 0; cuda takes any N >= 0. */
int device_parse(const char *s, Device *out) {
    static const struct { const char *name; DeviceType type; bool one; } types[] = {
        {"cpu", DEV_CPU, true}, {"sim", DEV_SIM, true}, {"cuda", DEV_CUDA, false}};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        size_t n = strlen(types[k].name);
        if (strncmp(s, types[k].name, n) != 0 || (s[n] != '\0' && s[n] != ':')) continue;
        if (s[n] == '\0') {
            *out = (Device){types[k].type, 0};
            return 0;
        }
        const char *p = s + n + 1;
        long long idx = 0;
        bool digits = *p != '\0';
        for (const char *q = p; *q; q++) digits = digits && *q >= '0' && *q <= '9';
        if (!digits || strlen(p) > 9 || (p[0] == '0' && p[1])) break; /* "cuda:", "cuda:-1", "cuda:01": unknown */
        idx = strtoll(p, NULL, 10);
        if (types[k].one && idx != 0)
            return accel_fail_int("device '%s': %s has one device, index 0 (got index %lld)", s, types[k].name, idx);
        *out = (Device){types[k].type, (int)idx};
        return 0;
    }
    return accel_fail_int("unknown device '%s' (expected \"cpu\", \"cuda\", \"cuda:N\" or \"sim\")", s);
}

int shape_str(const int64_t *shape, int ndim, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n) k += (size_t)snprintf(buf + k, n - k, "]");
    return (int)k;
}

const char *tensor_shape_str(const Tensor *t) {
    static __thread char bufs[4][160];
    static __thread int next;
    char *b = bufs[next++ & 3];
    shape_str(t->shape, t->ndim, b, 160);
    return b;
}

/* ---- creation ---- */

static Tensor *tensor_alloc_header(const int64_t *shape, int ndim, DType dt, Device dev) {
    if (ndim > TENSOR_MAX_DIMS) return accel_fail("tensors have at most %d dims, got %d", TENSOR_MAX_DIMS, ndim);
    int64_t numel = shape_check("cannot create a tensor", shape, ndim, (int)dt); /* ops name themselves first */
    if (numel < 0) return NULL;
    Tensor *t = tensor_header_alloc();
    if (!t) return NULL;
    t->refcount = 1;
    t->dtype = dt;
    t->device = dev;
    t->ndim = ndim;
    int64_t st = 1; /* cannot overflow: shape_check bounds the last product */
    for (int d = ndim - 1; d >= 0; d--) {
        t->shape[d] = shape[d];
        t->stride[d] = st;
        st *= shape[d] ? shape[d] : 1;
    }
    t->numel = numel;
    return t;
}

Tensor *tensor_empty(const int64_t *shape, int ndim, DType dt, Device dev) {
    Tensor *t = tensor_alloc_header(shape, ndim, dt, dev);
    if (!t) return NULL;
    t->storage = storage_new((size_t)t->numel * dtype_size(dt), dev);
    if (!t->storage) {
        tensor_header_free(t);
        return NULL;
    }
    return t;
}

Tensor *tensor_full(const int64_t *shape, int ndim, double v, DType dt, Device dev) {
    Tensor *t = tensor_empty(shape, ndim, dt, dev);
    if (t) tensor_fill_(t, v);
    return t;
}

Tensor *tensor_zeros(const int64_t *shape, int ndim, DType dt, Device dev) {
    Tensor *t = tensor_empty(shape, ndim, dt, dev);
    if (t) backend_for(dev)->zero(t->storage->data, t->storage->nbytes);
    return t;
}

Tensor *tensor_scalar(double v, DType dt) { return tensor_full(NULL, 0, v, dt, (Device){DEV_CPU, 0}); }

Tensor *tensor_empty_like(const Tensor *t) { return tensor_empty(t->shape, t->ndim, t->dtype, t->device); }

Tensor *tensor_from_data(const void *data, const int64_t *shape, int ndim, DType dt) {
    Tensor *t = tensor_empty(shape, ndim, dt, (Device){DEV_CPU, 0});
    if (t && t->numel && tensor_from_host(t, data) < 0) {
        tensor_release(t);
        return NULL;
    }
    return t;
}

/* A float arange's n values into p, bit for bit PyTorch's CPU kernel (its
 * AVX2 code, which CPUs with AVX2 or AVX-512 run). It computes in the
 * accumulate type (float for float16 / bfloat16, else double). Value i is
 * the fused multiply-add start + i step, except in the first n rounded down
 * to a multiple of 64 bytes: those come as 32-byte vectors of L lanes, and
 * value b + k of the vector starting at b (k < L) is start + b step rounded
 * to dt, plus k step (fused; bfloat16 adds the rounded product k step).
 * Beyond 32768 values torch splits the range among its threads, each with
 * its own vectors: there its values can differ. The float8 dtypes (torch
 * has no such arange) take start + i step. */
static void arange_fill_float(char *p, DType dt, double start, double step, int64_t n) {
    size_t es = dtype_size(dt);
    bool half = dt == DT_F16 || dt == DT_BF16; /* accumulates in float */
    int64_t lanes = half || dt == DT_F32 || dt == DT_F64 ? 32 / (int64_t)es : 1;
    int64_t vec_end = lanes > 1 ? n / (2 * lanes) * (2 * lanes) : 0;
    float start_f = (float)start, step_f = (float)step;
    for (int64_t i = 0; i < n; i++) {
        int64_t k = i < vec_end ? i % lanes : 0, b = i - k;
        double v = half ? fmaf(step_f, (float)b, start_f) : fma(step, (double)b, start);
        if (k > 0) {
            double r; /* the vector's first value, rounded to dt */
            dtype_store(&r, dt, v);
            v = dtype_load(&r, dt);
            if (dt == DT_BF16) v = (float)v + (float)k * step_f;
            else v = half ? fmaf((float)k, step_f, (float)v) : fma((double)k, step, v);
        }
        dtype_store(p + i * (int64_t)es, dt, v);
    }
}

Tensor *tensor_arange(double start, double end, double step, DType dt) {
    if (step == 0) return accel_fail("arange: step must be nonzero");
    if (!isfinite(step)) return accel_fail("arange: step must be finite but got %g", step);
    /* as PyTorch: a step pointing away from end is an error, not an empty
     * range (arange(2, 1, 2)); end == start is an empty range */
    if (step > 0 ? end < start : end > start)
        return accel_fail("arange: upper bound and lower bound inconsistent with step sign (start %g, end %g, step %g)",
                          start, end, step);
    double count = ceil((end - start) / step);
    if (isnan(count)) return accel_fail("arange: start %g, end %g and step %g do not give a number of elements", start, end, step);
    if (!(count < 0x1p63))
        return accel_fail("arange: start %g, end %g, step %g give %g elements, more than 2^63", start, end, step, count);
    int64_t n = (int64_t)count;
    if (shape_check("arange", &n, 1, (int)dt) < 0) return NULL;
    Tensor *t = tensor_empty(&n, 1, dt, (Device){DEV_CPU, 0});
    HostMap m;
    char *p = t ? tensor_host_map(t, HOST_WRITE, &m) : NULL;
    if (!p) {
        tensor_release(t);
        return NULL;
    }
    size_t es = dtype_size(dt);
    if (dtype_is_float(dt)) arange_fill_float(p, dt, start, step, n);
    else
        for (int64_t i = 0; i < n; i++) dtype_store_i64(p + i * es, dt, (int64_t)start + i * (int64_t)step);
    return tensor_host_finish(t, &m);
}

/* linspace's steps (> 1) values into p, bit for bit PyTorch's CPU kernel:
 * symmetric (the second half counts back from end), each value one fused
 * multiply-add; a float dtype below float64 rounds the ends to itself and
 * computes the step and values in float, float64 in double, and an
 * integer dtype converts the ends to itself first (truncated; uint8 wraps
 * a negative end) and computes in double. */
static void linspace_fill(char *p, DType dt, double start, double end, int64_t steps) {
    size_t es = dtype_size(dt);
    int64_t half = steps / 2;
    bool in_float = dtype_is_float(dt) && dt != DT_F64;
    double sd, ed; /* the ends rounded to dt: 8 bytes hold any dtype's value */
    dtype_store(&sd, dt, start), dtype_store(&ed, dt, end);
    if (!dtype_is_float(dt)) start = dtype_load(&sd, dt), end = dtype_load(&ed, dt);
    float s = in_float ? (float)dtype_load(&sd, dt) : 0, e = in_float ? (float)dtype_load(&ed, dt) : 0;
    float step_f = (e - s) / (float)(steps - 1);
    double step = (end - start) / (double)(steps - 1);
    for (int64_t i = 0; i < steps; i++) {
        double v;
        if (in_float) v = i < half ? fmaf(step_f, (float)i, s) : fmaf(-step_f, (float)(steps - 1 - i), e);
        else v = i < half ? fma(step, (double)i, start) : fma(-step, (double)(steps - 1 - i), end);
        dtype_store(p + i * (int64_t)es, dt, v);
    }
}

/* Whether an end of an integer linspace overflows dt, as PyTorch's
 * conversion of the end checks it: an end below dt's lowest value or not
 * below its largest + 1 is an error (255.9 truncates to uint8's 255, -0.5
 * is refused); a whole negative uint8 end down to -255 wraps (-1 -> 255),
 * as torch's integer ends and accel's whole fill values. NaN overflows. */
static bool int_end_overflows(DType dt, double v) {
    const double top = dt == DT_U8 ? 256.0 : dt == DT_I32 ? 0x1p31 : 0x1p63;
    const double low = dt == DT_U8 ? (v == floor(v) ? -255.0 : 0.0) : -top;
    return !(v >= low && v < top);
}

Tensor *tensor_linspace(double start, double end, int64_t steps, DType dt) {
    if (steps < 0) return accel_fail("linspace: number of steps must be non-negative, got %lld", (long long)steps);
    if (!dtype_is_float(dt))
        for (int k = 0; k < 2; k++)
            if (int_end_overflows(dt, k ? end : start))
                return accel_fail("linspace: value cannot be converted to type %s without overflow (%s %.17g)",
                                  dtype_name(dt), k ? "end" : "start", k ? end : start);
    if (shape_check("linspace", &steps, 1, (int)dt) < 0) return NULL;
    Tensor *t = tensor_empty(&steps, 1, dt, (Device){DEV_CPU, 0});
    HostMap m;
    char *p = t ? tensor_host_map(t, HOST_WRITE, &m) : NULL;
    if (!p) {
        tensor_release(t);
        return NULL;
    }
    if (steps == 1) dtype_store(p, dt, start);
    else linspace_fill(p, dt, start, end, steps);
    return tensor_host_finish(t, &m);
}

/* ---- copies ---- */

void tensor_copy_strided(Tensor *dst, const Tensor *src) {
    StridedIter it;
    bool one_run = src->numel == dst->numel && tensor_is_contiguous(src) && tensor_is_contiguous(dst);
    iter_launch(&it, dst, (const Tensor *[]){src}, 1, one_run ? (const int64_t[]){1} : NULL);
    backend_for(dst->device)->copy(&it, dst->dtype, src->dtype);
}

bool tensor_same_shape(const Tensor *a, const Tensor *b) {
    return a->ndim == b->ndim && memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

bool tensor_partial_overlap(const Tensor *dst, const Tensor *src) {
    return src->storage == dst->storage && src->numel > 1 &&
           !(src->offset == dst->offset && tensor_same_shape(src, dst) &&
             memcmp(src->stride, dst->stride, sizeof(int64_t) * (size_t)src->ndim) == 0);
}

bool tensor_is_writable(const Tensor *t) {
    for (int d = 0; d < t->ndim && t->numel > 0; d++) /* no elements: nothing is written twice */
        if (t->stride[d] == 0 && t->shape[d] > 1) return false;
    return true;
}

int tensor_check_writable(const Tensor *t, const char *op) {
    if (!tensor_is_writable(t))
        return accel_fail_int("%s: unsupported operation: more than one element of the written-to tensor (shape "
                              "%s, an expanded view) refers to a single memory location; clone() it first", op,
                              tensor_shape_str(t));
    return 0;
}

int tensor_copy_(Tensor *dst, Tensor *src) {
    if (tensor_check_writable(dst, "copy_") < 0) return -1;
    int64_t bs[TENSOR_MAX_DIMS];
    int nb;
    if (broadcast_shapes(dst->shape, dst->ndim, src->shape, src->ndim, bs, &nb, "copy_") < 0) return -1;
    if (nb != dst->ndim || shape_numel(bs, nb) != dst->numel)
        return accel_fail_int("copy_: source shape %s cannot be broadcast to destination shape %s", tensor_shape_str(src),
                              tensor_shape_str(dst));
    bool across = !device_same(dst->device, src->device);
    if (across || tensor_partial_overlap(dst, src)) {
        /* overlapping copy, or one from another device (staged through the host): go through a temporary */
        Tensor *tmp = across ? tensor_to_device(src, dst->device) : tensor_clone(src);
        if (!tmp) return -1;
        tensor_copy_strided(dst, tmp);
        tensor_release(tmp);
    } else {
        tensor_copy_strided(dst, src);
    }
    tensor_bump_version(dst);
    return 0;
}

/* An expanded view (stride 0) may be filled, as PyTorch's fill_ allows:
 * the elements that share a location all get the same value. */
int tensor_fill_(Tensor *t, double v) {
    StridedIter it;
    iter_launch(&it, t, NULL, 0, tensor_is_contiguous(t) ? (const int64_t[]){0} : NULL);
    backend_for(t->device)->fill(&it, t->dtype, v);
    tensor_bump_version(t);
    return 0;
}

