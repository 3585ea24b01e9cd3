/* dist_device.c: which communicator serves a collective on a tensor (the
 * NCCL choice, dist_nccl.h). CUDA tensors go to NCCL where the build has it
 * (dist_nccl.c defines dist_nccl_for_tensor; in a build without CUDA the
 * weak, hidden reference stays NULL, whatever the host defines) and the
 * group has other ranks; everything
 * else stays on the group's own backend (MPI or single, which stage
 * non-host tensors through the host). The generic layer (dist.c) calls this
 * before it prepares a collective. */
#include "dist_nccl.h"

extern DistComm *dist_nccl_for_tensor(DistComm *group, const Tensor *t) __attribute__((weak, visibility("hidden")));

DistComm *dist_comm_for_tensor(DistComm *group, const Tensor *t) {
    if (!group || !t || t->device.type != DEV_CUDA || group->size < 2 || !dist_nccl_for_tensor) return group;
    return dist_nccl_for_tensor(group, t);
}
