/* fp8.c: the fp8 recipe's kernels (see fp8.h), an exact emulation that
 * runs on every device. The casts use dtype.h's codec (f32_to_f8e4m3_sat /
 * f32_to_f8e5m2_sat) on the host, through the host-access API (zero-copy
 * on the CPU; explicit host<->device copies elsewhere). The matmul decodes
 * the codes to float32 on the operands' device (exact: every fp8 value is
 * a float32), runs the ordinary float32 GEMM with autocast off and applies
 * the combined scale once, all through the backend. A device backend with
 * native fp8 GEMMs registers its own scaled matmul, which replaces the
 * emulation on that device. */
#include "fp8.h"
#include "error.h"
#include "ops.h"
#include "precision.h"

static Fp8ScaledMm device_mm[DEV_SIM + 1]; /* by DeviceType; none for the CPU */

double fp8_max(DType fmt) {
    if (fmt == DT_F8E4M3) return 448.0;
    if (fmt == DT_F8E5M2) return 57344.0;
    return 0.0;
}

static int check_fmt(DType fmt, const char *op) {
    if (fmt == DT_F8E4M3 || fmt == DT_F8E5M2) return 0;
    return accel_fail_int("%s: format must be float8_e4m3fn or float8_e5m2, got %s", op, dtype_name(fmt));
}

/* x as a contiguous float32 tensor on its device (new reference), mapped
 * for reading on the host (*v), or NULL with an error. */
static Tensor *f32_input(Tensor *x, const char *op, HostMap *m, const float **v) {
    if (!dtype_is_float(x->dtype)) return accel_fail("%s: input must be a float tensor, got %s", op, dtype_name(x->dtype));
    Tensor *c = tensor_contiguous_as(x, DT_F32);
    if (c && !(*v = tensor_host_map(c, HOST_READ, m))) {
        tensor_release(c);
        return NULL;
    }
    return c;
}

static void f32_input_done(Tensor *c, HostMap *m) {
    tensor_host_unmap(m); /* read-only: nothing to write back */
    tensor_release(c);
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
    HostMap m;
    const float *v = NULL;
    Tensor *c = f32_input(x, "fp8 amax", &m, &v);
    if (!c) return -1;
    *amax = amax_of(v, c->numel);
    f32_input_done(c, &m);
    return 0;
}

Tensor *fp8_quantize(Tensor *x, float scale, DType fmt, double *amax) {
    if (check_fmt(fmt, "fp8 quantize") < 0) return NULL;
    HostMap mc, mq;
    const float *v = NULL;
    Tensor *c = f32_input(x, "fp8 quantize", &mc, &v);
    Tensor *q = c ? tensor_empty(c->shape, c->ndim, fmt, c->device) : NULL;
    uint8_t *o = q ? tensor_host_map(q, HOST_WRITE, &mq) : NULL;
    if (o) {
        for (int64_t i = 0; i < c->numel; i++) {
            float s = v[i] * scale;
            o[i] = fmt == DT_F8E4M3 ? f32_to_f8e4m3_sat(s) : f32_to_f8e5m2_sat(s);
        }
        if (amax) *amax = amax_of(v, c->numel);
        q = tensor_host_finish(q, &mq);
    } else if (q) {
        tensor_release(q);
        q = NULL;
    }
    if (c) f32_input_done(c, &mc);
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

Tensor *fp8_scaled_mm(Tensor *a, float a_scale_inv, Tensor *b, float b_scale_inv) {
    if (check_mm_operand(a, "a") < 0 || check_mm_operand(b, "b") < 0) return NULL;
    if (a->shape[1] != b->shape[0])
        return accel_fail("fp8 scaled_mm: shapes %s and %s cannot be multiplied (%lld != %lld)", tensor_shape_str(a),
                          tensor_shape_str(b), (long long)a->shape[1], (long long)b->shape[0]);
    if (tensor_check_device("fp8 scaled_mm", a, b) < 0) return NULL;
    Fp8ScaledMm native = a->device.type == DEV_CPU ? NULL : device_mm[a->device.type];
    if (native) return native(a, a_scale_inv, b, b_scale_inv);
    return emulated_scaled_mm(a, a_scale_inv, b, b_scale_inv);
}

void fp8_set_device_scaled_mm(DeviceType type, Fp8ScaledMm fn) {
    if (type != DEV_CPU && (int)type >= 0 && (int)type <= (int)DEV_SIM) device_mm[type] = fn;
}
