/* fp8.c: the fp8 recipe's kernels (see fp8.h), on every device. The casts
 * and the amax are the backend's fp8_quantize / fp8_dequantize entries
 * (core/backend/backend.h), run on the tensor's device; only the amax, a
 * host value, comes back through the host-access API. The matmul decodes
 * the codes to float32 on the operands' device (exact: every fp8 value is
 * a float32), runs the ordinary float32 GEMM with autocast off and applies
 * the combined scale once, all through the backend. Where the device's
 * backend has a native fp8 GEMM (its fp8_gemm entry), the product runs
 * there instead, on K-major copies of the codes, unless the entry declines
 * those operands. */
#include "fp8.h"
#include "error.h"
#include "ops.h"
#include "precision.h"
#include "backend/backend.h"

double fp8_max(DType fmt) {
    if (fmt == DT_F8E4M3) return 448.0;
    if (fmt == DT_F8E5M2) return 57344.0;
    return 0.0;
}

static int check_fmt(DType fmt, const char *op) {
    if (fmt == DT_F8E4M3 || fmt == DT_F8E5M2) return 0;
    return accel_fail_int("%s: format must be float8_e4m3fn or float8_e5m2, got %s", op, dtype_name(fmt));
}

static KFp8Fmt kfmt(DType fmt) { return fmt == DT_F8E4M3 ? KF8_E4M3FN : KF8_E5M2; }

/* x as a contiguous float32 tensor on its device (new reference), or NULL
 * with an error. */
static Tensor *f32_input(Tensor *x, const char *op) {
    if (!dtype_is_float(x->dtype)) return accel_fail("%s: input must be a float tensor, got %s", op, dtype_name(x->dtype));
    return tensor_contiguous_as(x, DT_F32);
}

/* The quantize entry over x (q: the codes' tensor, or NULL for the amax
 * alone); *amax read back through the host-access API when asked. */
static int run_quantize(Tensor *c, float scale, DType fmt, Tensor *q, double *amax) {
    Tensor *a = amax ? tensor_empty(NULL, 0, DT_F32, c->device) : NULL;
    if (amax && !a) return -1;
    backend_for(c->device)->fp8_quantize(kfmt(fmt), c->numel, tensor_data(c), scale, q ? tensor_data(q) : NULL,
                                         a ? tensor_data(a) : NULL);
    if (a) *amax = tensor_item(a);
    tensor_release(a);
    return 0;
}

int fp8_amax(Tensor *x, double *amax) {
    Tensor *c = f32_input(x, "fp8 amax");
    int rc = c ? run_quantize(c, 1.0f, DT_F8E4M3, NULL, amax) : -1;
    tensor_release(c);
    return rc;
}

Tensor *fp8_quantize(Tensor *x, float scale, DType fmt, double *amax) {
    if (check_fmt(fmt, "fp8 quantize") < 0) return NULL;
    Tensor *c = f32_input(x, "fp8 quantize");
    Tensor *q = c ? tensor_empty(c->shape, c->ndim, fmt, c->device) : NULL;
    if (q && run_quantize(c, scale, fmt, q, amax) < 0) {
        tensor_release(q);
        q = NULL;
    }
    tensor_release(c);
    return q;
}

Tensor *fp8_dequantize(Tensor *q, float scale_inv) {
    if (check_fmt(q->dtype, "fp8 dequantize") < 0) return NULL;
    Tensor *c = tensor_contiguous_as(q, q->dtype);
    Tensor *out = c ? tensor_empty(c->shape, c->ndim, DT_F32, c->device) : NULL;
    if (out) backend_for(c->device)->fp8_dequantize(kfmt(q->dtype), c->numel, tensor_data(c), scale_inv, tensor_data(out));
    tensor_release(c);
    return out;
}

void fp8_update_scale(double amax, DType fmt, int margin, float prev, float *scale, float *scale_inv) {
    float s = prev;
    if (isfinite(amax) && amax > 0.0) s = ldexpf((float)(fp8_max(fmt) / (double)(float)amax), -margin);
    *scale = s;
    *scale_inv = 1.0f / s;
}

static int check_mm_operand(const Tensor *t, const char *name) {
    if (t->ndim != 2) return accel_fail_int("fp8 scaled_mm: %s must be 2-D, got shape %s", name, tensor_shape_str(t));
    return check_fmt(t->dtype, "fp8 scaled_mm");
}

/* The emulation: decode, float32 GEMM (autocast off), one scale pass. */
static Tensor *emulated_scaled_mm(Tensor *a, float a_scale_inv, Tensor *b, float b_scale_inv) {
    Tensor *da = tensor_contiguous_as(a, DT_F32), *db = da ? tensor_contiguous_as(b, DT_F32) : NULL;
    DType prev = precision_set_autocast(DT_F32);
    Tensor *c = db ? op_matmul(da, db) : NULL;
    precision_set_autocast(prev);
    tensor_release(da);
    tensor_release(db);
    if (!c) return NULL;
    float s = a_scale_inv * b_scale_inv; /* fl32(acc * s): s and acc are float32, the product is rounded once */
    if (op_binary_scalar_(KB_MUL, c, (double)s, false) < 0) {
        tensor_release(c);
        return NULL;
    }
    return c;
}

/* The backend's fp8_gemm over a (M, K) and b^T (N, K) made contiguous:
 * *c the float32 product, or NULL with *c unset when the entry declined
 * (returns 0) or failed (returns -1, an error set). */
static int native_scaled_mm(const Backend *be, Tensor *a, Tensor *b, float scale, Tensor **c) {
    Tensor *ka = tensor_contiguous(a), *bt = ka ? tensor_transpose(b, 0, 1) : NULL;
    Tensor *kb = bt ? tensor_contiguous(bt) : NULL;
    int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1], shape[2] = {M, N};
    Tensor *out = kb ? tensor_empty(shape, 2, DT_F32, a->device) : NULL;
    int rc = out ? be->fp8_gemm(kfmt(a->dtype), kfmt(b->dtype), M, N, K, tensor_data(ka), tensor_data(kb), scale,
                                tensor_data(out))
                 : -1;
    tensor_release(ka), tensor_release(bt), tensor_release(kb);
    if (rc == 0) *c = out;
    else tensor_release(out);
    return rc < 0 ? -1 : 0;
}

Tensor *fp8_scaled_mm(Tensor *a, float a_scale_inv, Tensor *b, float b_scale_inv, bool *native) {
    if (native) *native = false;
    if (check_mm_operand(a, "a") < 0 || check_mm_operand(b, "b") < 0) return NULL;
    if (a->shape[1] != b->shape[0])
        return accel_fail("fp8 scaled_mm: shapes %s and %s cannot be multiplied (%lld != %lld)", tensor_shape_str(a),
                          tensor_shape_str(b), (long long)a->shape[1], (long long)b->shape[0]);
    if (tensor_check_device("fp8 scaled_mm", a, b) < 0) return NULL;
    const Backend *be = backend_for(a->device);
    if (!be) return NULL;
    Tensor *c = NULL;
    if (be->fp8_gemm && native_scaled_mm(be, a, b, a_scale_inv * b_scale_inv, &c) < 0) return NULL;
    if (native) *native = c != NULL;
    return c ? c : emulated_scaled_mm(a, a_scale_inv, b, b_scale_inv);
}
