/* core_matmul.c: the C runtime without Lua (docs/embedding.md): tensors, an
 * op, its error, and the live-byte count back at zero. Build and run:
 *   cc -Icore examples/embed/core_matmul.c build/libaccel-core.a -o core_matmul \
 *      -fopenmp -ldnnl -lopenblas -lm -lz -ldl -lcurl
 *   ./core_matmul */
#include "error.h"
#include "ops.h"
#include "tensor.h"
#include <stdio.h>

int main(void) {
    int64_t shape_a[2] = {2, 3}, shape_b[2] = {3, 2};
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1};
    Tensor *A = tensor_from_data(a, shape_a, 2, DT_F32), *B = tensor_from_data(b, shape_b, 2, DT_F32);
    Tensor *C = A && B ? op_matmul(A, B) : NULL; /* (2,3) @ (3,2) -> (2,2) */
    if (!C) {
        fprintf(stderr, "%s\n", accel_last_error());
        return 1;
    }
    for (int i = 0; i < 4; i++) printf("%g ", tensor_get_flat(C, i));
    printf("\n");
    Tensor *bad = op_matmul(A, A); /* (2,3) @ (2,3): NULL and a message */
    printf("%s %s\n", bad ? "accepted" : "refused:", bad ? "" : accel_last_error());
    tensor_release(A), tensor_release(B), tensor_release(C);
    printf("live bytes %zu\n", tensor_live_bytes());
    return 0;
}
