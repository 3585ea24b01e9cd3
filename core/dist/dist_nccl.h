/* dist_nccl.h: the "nccl" communicator backend (dist_nccl.c, CUDA builds
 * only): collectives over device buffers of one GPU per process, behind
 * the same DistBackendOps as "mpi"; and the choice of communicator for a
 * tensor (dist_device.c, every build). */
#ifndef ACCEL_DIST_NCCL_H
#define ACCEL_DIST_NCCL_H

#include "dist.h"

/* The NCCL communicator of `group` (a host communicator, e.g. dist_world():
 * it bootstraps NCCL's unique id with dist_broadcast_bytes from its rank 0),
 * on GPU `device` (this process's cuda:N). Made on the first call (a
 * collective call of every rank of the group), cached after: one NCCL
 * communicator per process group. NULL with the error on failure. */
DistComm *dist_nccl_comm(DistComm *group, int device);
/* The stream (a cudaStream_t) whose work every collective waits for before
 * it starts and which waits for the collective's end (NULL: the legacy
 * default stream). The backend's current compute stream. */
void dist_nccl_set_compute_stream(DistComm *c, void *stream);
/* The communicator that collectives on t use within group (dist_device.c,
 * every build): for a CUDA tensor in a CUDA build with group->size > 1,
 * the NCCL communicator of group on t's GPU (made on first use: every rank
 * of the group must call); otherwise group itself. NULL with the error
 * when NCCL cannot start. */
DistComm *dist_comm_for_tensor(DistComm *group, const Tensor *t);
/* Its CUDA half (dist_nccl.c, CUDA build only). */
DistComm *dist_nccl_for_tensor(DistComm *group, const Tensor *t);
/* Tears down every cached NCCL communicator (before the host one). */
int dist_nccl_shutdown(void);

#endif
