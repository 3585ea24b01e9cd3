/* test_dist_device.c: the choice of communicator for a collective
 * (core/dist/dist_device.c). In this build (no CUDA, or the CUDA build's CPU
 * tests) every tensor stays on its group's backend: cpu and sim tensors
 * always, CUDA tensors because no NCCL is linked; a group of one never
 * needs NCCL. The NCCL side runs only on a GPU machine (docs/gpu.md). */
#include "check.h"
#include "core/dist/dist_nccl.h"

int main(void) {
    DistComm group = {.rank = 0, .size = 2}, alone = {.rank = 0, .size = 1};
    Tensor cpu = {.device = {DEV_CPU, 0}}, sim = {.device = {DEV_SIM, 0}}, gpu = {.device = {DEV_CUDA, 1}};
    CHECK(dist_comm_for_tensor(&group, &cpu) == &group);
    CHECK(dist_comm_for_tensor(&group, &sim) == &group);
    CHECK(dist_comm_for_tensor(&alone, &gpu) == &alone);
    CHECK(dist_comm_for_tensor(&group, &gpu) == &group); /* no NCCL in this binary */
    CHECK(dist_comm_for_tensor(NULL, &cpu) == NULL);
    CHECK(dist_comm_for_tensor(&group, NULL) == &group);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
