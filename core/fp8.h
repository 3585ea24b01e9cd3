/* fp8.h: the kernels of the fp8 training recipe (delayed per-tensor
 * scaling, as Transformer Engine's DelayedScaling): the amax of a tensor,
 * the scaled saturating cast to e4m3fn / e5m2, the scale update from an
 * amax, and the scaled matmul of two fp8 operands with float32
 * accumulation. These are an exact emulation on every device (the operands
 * are decoded exactly and multiplied by the float32 GEMM of their device's
 * backend; the casts are the backend's fp8 entries, run on the device); a device
 * backend with native fp8 GEMMs registers its own scaled matmul through
 * fp8_set_device_scaled_mm (the CUDA backend's cuBLASLt fp8 GEMM, sm_89+),
 * which then replaces the emulated product on that device. */
#ifndef ACCEL_FP8_H
#define ACCEL_FP8_H

#include "tensor.h"

/* The largest finite value of an fp8 dtype (448 / 57344); 0 for others. */
double fp8_max(DType fmt);

/* max |x| over a float tensor (0 when empty; NaN when x holds a NaN). */
int fp8_amax(Tensor *x, double *amax);

/* codes = saturate(fl32(x * scale)) as fmt (DT_F8E4M3 or DT_F8E5M2): the
 * product rounded to float32 first, out of range and +-inf to +-max, NaN
 * stays NaN. Also gives x's amax (before scaling) when amax != NULL. New,
 * contiguous, the shape of x; NULL with an error. */
Tensor *fp8_quantize(Tensor *x, float scale, DType fmt, double *amax);

/* fl32(decode(q) * scale_inv) as float32 (q: float8_e4m3fn / float8_e5m2,
 * any strides): new, contiguous, the shape of q; NULL with an error. */
Tensor *fp8_dequantize(Tensor *q, float scale_inv);

/* The delayed-scaling update: scale = fl32(fp8_max(fmt) / amax) / 2^margin
 * when amax is finite and > 0, else prev (kept); scale_inv = fl32(1 / scale). */
void fp8_update_scale(double amax, DType fmt, int margin, float prev, float *scale, float *scale_inv);

/* a (M, K) @ b (K, N), both fp8 codes (any strides, either format), as
 * float32: fl32(acc * fl32(a_scale_inv * b_scale_inv)) where acc is the
 * float32-accumulated product of the exactly decoded codes. */
Tensor *fp8_scaled_mm(Tensor *a, float a_scale_inv, Tensor *b, float b_scale_inv);

/* The hook a device backend fills in (same contract as fp8_scaled_mm,
 * operands on that device); NULL unregisters. */
typedef Tensor *(*Fp8ScaledMm)(Tensor *a, float a_scale_inv, Tensor *b, float b_scale_inv);
void fp8_set_device_scaled_mm(DeviceType type, Fp8ScaledMm fn);

#endif
