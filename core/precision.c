/* precision.c: the autocast policy (see precision.h). */
#include "precision.h"

static __thread DType autocast_dtype = DT_F32;

DType precision_autocast(void) { return autocast_dtype; }

DType precision_set_autocast(DType dt) {
    DType prev = autocast_dtype;
    autocast_dtype = dt;
    return prev;
}

/* A 2-D matrix stored transposed (a weight used as w:t(), HF's Conv1D) is
 * cast in its storage order and handed back transposed: a contiguous,
 * vectorised cast instead of a strided one, and GEMM takes the layout as
 * a flag. */
static bool transposed_2d(const Tensor *t) {
    return t->ndim == 2 && t->stride[0] == 1 && t->stride[1] == t->shape[0] && t->shape[0] > 1 && t->shape[1] > 1;
}

bool precision_autocast_eligible(DType dt) { return dt == DT_F32 || dt == DT_F16 || dt == DT_BF16; }

Tensor *precision_autocast_input(Tensor *t) {
    if (autocast_dtype == DT_F32 || !precision_autocast_eligible(t->dtype) || t->dtype == autocast_dtype)
        return tensor_retain(t);
    if (!transposed_2d(t)) return tensor_to_dtype(t, autocast_dtype);
    Tensor *s = tensor_transpose(t, 0, 1), *c = s ? tensor_to_dtype(s, autocast_dtype) : NULL;
    Tensor *r = c ? tensor_transpose(c, 0, 1) : NULL;
    tensor_release(s);
    tensor_release(c);
    return r;
}

Tensor *precision_fp32_input(Tensor *t) {
    if (autocast_dtype == DT_F32 || (t->dtype != DT_BF16 && t->dtype != DT_F16)) return tensor_retain(t);
    return tensor_to_dtype(t, DT_F32);
}
