/* conv_dnnl.h: the oneDNN fast path of the float32 convolution kernels
 * (conv_dnnl.c), for conv.c only. Same tensors and geometry as the k_conv2d_*
 * functions in kernels.h; each returns 0 when it computed the result, or
 * nonzero when oneDNN has no fast kernel for this geometry (or failed), in
 * which case the outputs are unspecified and the caller computes them itself. */
#ifndef ACCEL_CONV_DNNL_H
#define ACCEL_CONV_DNNL_H

#include "kernels.h"

int conv_dnnl_fwd(const KConv2d *g, const float *x, const float *w, const float *b, float *y); /* b may be NULL */
/* gx, gw, gb as k_conv2d_bwd (NULL: not wanted; gb only with gw). */
int conv_dnnl_bwd(const KConv2d *g, const float *x, const float *w, const float *gy, float *gx, float *gw, float *gb);

#endif
