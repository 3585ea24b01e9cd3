/* threads.c: the one thread knob of the CPU kernels. Everything parallel
 * runs on the OpenMP team (our loops, oneDNN, and the OpenBLAS products,
 * which gemm.c splits over the team); OpenBLAS's own pthread pool is kept
 * at one thread, so two pools never run at once and the compute threads
 * never outnumber the cores. */
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
    openblas_set_num_threads(1);
}

int kernel_get_threads(void) { return omp_get_max_threads(); }
