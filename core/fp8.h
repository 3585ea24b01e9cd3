/* fp8.h: the kernels of the fp8 training recipe (delayed per-tensor
 * scaling, as Transformer Engine's DelayedScaling): the amax of a tensor,
 * the scaled saturating cast to e4m3fn / e5m2, the scale update from an
 * amax, and the scaled matmul of two fp8 operands with float32
 * accumulation. These are an exact emulation on every device (the operands
 * are decoded exactly and multiplied by the float32 GEMM of their device's
 * backend; the casts are the backend's fp8 entries, run on the device); a
 * device backend with native fp8 GEMMs fills the backend's fp8_gemm entry
 * (the CUDA backend: cuBLASLt's fp8 GEMM, compute capability 8.9+), which
 * then runs the products it accepts on that device. */
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
 * float32-accumulated product of the exactly decoded codes. Runs on the
 * device's native fp8 GEMM (the backend's fp8_gemm entry, with the
 * operands made K-major) when it has one that accepts the operands, else
 * emulated; *native (may be NULL) says which. */
Tensor *fp8_scaled_mm(Tensor *a, float a_scale_inv, Tensor *b, float b_scale_inv, bool *native);

#endif
