/* precision.h: the autocast policy. While an autocast dtype (bf16 or fp16)
 * is set, matmul / linear / conv2d cast their float32 inputs to it (through
 * a differentiable cast, so gradients reach the float32 masters), run the
 * GEMM with float32 accumulation and return that dtype; the ops on torch's
 * float32 list widen half inputs to float32; every other op keeps its input
 * dtypes. Thread-local, like grad mode. */
#ifndef ACCEL_PRECISION_H
#define ACCEL_PRECISION_H

#include "tensor.h"

/* The autocast dtype, or DT_F32 when autocast is off. */
DType precision_autocast(void);
/* Set it (DT_F32 turns autocast off); returns the previous setting. */
DType precision_set_autocast(DType dt);
/* Whether autocast casts a tensor of dtype dt (as torch: float32 and the
 * half dtypes; float64 and integers are not). */
bool precision_autocast_eligible(DType dt);
/* t cast for an autocast GEMM (new reference; t itself when not applicable). */
Tensor *precision_autocast_input(Tensor *t);
/* t for an op on autocast's float32 list (prod): a bf16 / fp16 t widened
 * to float32 while autocast is on, as torch's CPU autocast (new reference;
 * t itself otherwise). The losses do the same in nn.functional. */
Tensor *precision_fp32_input(Tensor *t);

#endif
