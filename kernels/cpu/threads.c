/* threads.c: one knob for the two thread pools the CPU kernels use, the
 * OpenMP team (our loops and oneDNN) and OpenBLAS's own pool (f64 GEMM). */
#include <omp.h>
#include <cblas.h>
#include "kernels.h"

static int core_count(void) {
    int c = omp_get_num_procs(); /* respects the process affinity mask */
    return c > 0 ? c : 1;
}

/* n <= 0 means all cores; otherwise clamped to [1, cores]. */
void kernel_set_threads(int n) {
    int cores = core_count();
    if (n <= 0 || n > cores) n = cores;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int kernel_get_threads(void) { return omp_get_max_threads(); }
