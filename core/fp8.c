/* fp8.c: the fp8 recipe's kernels on the CPU (see fp8.h). The casts use
 * dtype.h's codec (f32_to_f8e4m3_sat / f32_to_f8e5m2_sat); the matmul
 * decodes the codes to float32 (exact: every fp8 value is a float32) and
 * runs the ordinary float32 GEMM with autocast off, then applies the
 * combined scale once. */
#include "fp8.h"
#include "error.h"
#include "ops.h"
#include "precision.h"

static Fp8ScaledMm device_mm[2];

double fp8_max(DType fmt) {
    if (fmt == DT_F8E4M3) return 448.0;
    if (fmt == DT_F8E5M2) return 57344.0;
    return 0.0;
}

static int check_fmt(DType fmt, const char *op) {
    if (fmt == DT_F8E4M3 || fmt == DT_F8E5M2) return 0;
    return accel_fail_int("%s: format must be float8_e4m3fn or float8_e5m2, got %s", op, dtype_name(fmt));
}

/* The error for fp8 work on a device whose backend registered no fp8 kernels. */
static void *no_device_fp8(const char *op, Device d) {
    return accel_fail("%s: fp8 on cuda:%d needs the CUDA fp8 backend (cuBLASLt fp8 GEMM, compute capability 8.9 or "
                      "newer), which this build does not register (fp8_set_device_scaled_mm)",
                      op, d.index);
}

/* x as a contiguous float32 CPU tensor (new reference), or NULL with an error. */
static Tensor *f32_input(Tensor *x, const char *op) {
    if (!dtype_is_float(x->dtype)) return accel_fail("%s: input must be a float tensor, got %s", op, dtype_name(x->dtype));
    if (x->device.type != DEV_CPU) return no_device_fp8(op, x->device);
    return tensor_contiguous_as(x, DT_F32);
}

/* max |v| of n floats, NaN if any is NaN. */
static double amax_of(const float *v, int64_t n) {
    float m = 0.0f;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(v[i]);
        nan |= isnan(a);
        m = a > m ? a : m;
    }
    return nan ? NAN : (double)m;
}

int fp8_amax(Tensor *x, double *amax) {
    Tensor *c = f32_input(x, "fp8 amax");
    if (!c) return -1;
    *amax = amax_of((const float *)tensor_data(c), c->numel);
    tensor_release(c);
    return 0;
}

Tensor *fp8_quantize(Tensor *x, float scale, DType fmt, double *amax) {
    if (check_fmt(fmt, "fp8 quantize") < 0) return NULL;
    Tensor *c = f32_input(x, "fp8 quantize");
    Tensor *q = c ? tensor_empty(c->shape, c->ndim, fmt, c->device) : NULL;
    if (q) {
        const float *v = (const float *)tensor_data(c);
        uint8_t *o = (uint8_t *)tensor_data(q);
        for (int64_t i = 0; i < c->numel; i++) {
            float s = v[i] * scale;
            o[i] = fmt == DT_F8E4M3 ? f32_to_f8e4m3_sat(s) : f32_to_f8e5m2_sat(s);
        }
        if (amax) *amax = amax_of(v, c->numel);
    }
    tensor_release(c);
    return q;
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

/* The CPU emulation: decode, float32 GEMM (autocast off), one scale pass. */
static Tensor *cpu_scaled_mm(Tensor *a, float a_scale_inv, Tensor *b, float b_scale_inv) {
    Tensor *da = tensor_contiguous_as(a, DT_F32), *db = da ? tensor_contiguous_as(b, DT_F32) : NULL;
    DType prev = precision_set_autocast(DT_F32);
    Tensor *c = db ? op_matmul(da, db) : NULL;
    precision_set_autocast(prev);
    tensor_release(da);
    tensor_release(db);
    if (!c) return NULL;
    float s = a_scale_inv * b_scale_inv;
    float *o = (float *)tensor_data(c);
    for (int64_t i = 0; i < c->numel; i++) o[i] *= s;
    return c;
}

Tensor *fp8_scaled_mm(Tensor *a, float a_scale_inv, Tensor *b, float b_scale_inv) {
    if (check_mm_operand(a, "a") < 0 || check_mm_operand(b, "b") < 0) return NULL;
    if (a->shape[1] != b->shape[0])
        return accel_fail("fp8 scaled_mm: shapes %s and %s cannot be multiplied (%lld != %lld)", tensor_shape_str(a),
                          tensor_shape_str(b), (long long)a->shape[1], (long long)b->shape[0]);
    if (a->device.type != b->device.type || a->device.index != b->device.index)
        return accel_fail("fp8 scaled_mm: operands are on different devices");
    if (a->device.type == DEV_CPU) return cpu_scaled_mm(a, a_scale_inv, b, b_scale_inv);
    if (device_mm[a->device.type]) return device_mm[a->device.type](a, a_scale_inv, b, b_scale_inv);
    return no_device_fp8("fp8 scaled_mm", a->device);
}

void fp8_set_device_scaled_mm(DeviceType type, Fp8ScaledMm fn) {
    if (type == DEV_CUDA) device_mm[DEV_CUDA] = fn;
}
