/* device.cu: GPU discovery. cuda_device_count answers 0, with the reason,
 * where there is no driver, no GPU, or a driver older than this runtime
 * (cudart reports these as error codes; nothing crashes), so a build with
 * CUDA still runs on a CPU-only machine and falls back to the CPU. */
#include "common.cuh"
#include <stdio.h>

extern "C" int cuda_device_count(char *why, size_t n) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (why && n) why[0] = 0;
    if (e == cudaSuccess && count > 0) return count;
    const char *what = e == cudaErrorNoDevice            ? "no CUDA GPU was found"
                       : e == cudaErrorInsufficientDriver ? "no usable NVIDIA driver (none installed, or older than this CUDA runtime)"
                       : e == cudaSuccess                 ? "no CUDA GPU was found"
                                                          : "the CUDA runtime could not start";
    if (why && n)
        snprintf(why, n, "%s (cudaGetDeviceCount: %s, %s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    cudaGetLastError(); /* clear the runtime's last-error slot (the error is not sticky) */
    return 0;
}

/* The compute capability (major.minor) of GPU device. */
extern "C" int kc_device_capability(int device, int *major, int *minor) {
    cuda_check(cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, device));
    cuda_check(cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, device));
    return 0;
}
