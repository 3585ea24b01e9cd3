/* precision.c: the autocast policy (see precision.h). */
#include "precision.h"

static __thread DType autocast_dtype = DT_F32;

DType precision_autocast(void) { return autocast_dtype; }

DType precision_set_autocast(DType dt) {
    DType prev = autocast_dtype;
    autocast_dtype = dt;
    return prev;
}

Tensor *precision_autocast_input(Tensor *t) {
    if (autocast_dtype == DT_F32 || t->dtype != DT_F32) return tensor_retain(t);
    return tensor_to_dtype(t, autocast_dtype);
}
