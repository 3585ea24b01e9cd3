/* cuda_check.h: error handling for every call into CUDA, cuBLASLt and NCCL
 * (llm.c's cudaCheck / cublasCheck style, but returning instead of exiting).
 * A failed call stores "FILE:LINE: CALL: library message (code name)" in a
 * thread-local buffer (cuda_last_error) and makes the enclosing function
 * return -1. cudaErrorMemoryAllocation's message is CUDA's "out of memory",
 * which the caching allocator also uses for its own refusals, so Lua's
 * find_executable_batch_size recognises both. Usable from C and CUDA C++. */
#ifndef ACCEL_CUDA_CHECK_H
#define ACCEL_CUDA_CHECK_H

#ifdef __cplusplus
extern "C" {
#endif

/* The message of the last failure on this thread ("" when none). */
const char *cuda_last_error(void);
/* Stores "file:line: " + the formatted message; returns -1. */
int cuda_set_error(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void cuda_clear_error(void);

#ifdef __cplusplus
}
#endif

#define cuda_fail(...) cuda_set_error(__FILE__, __LINE__, __VA_ARGS__)

#define cuda_check(call)                                                                              \
    do {                                                                                              \
        cudaError_t e_ = (call);                                                                      \
        if (e_ != cudaSuccess)                                                                        \
            return cuda_fail("%s: %s (%s)", #call, cudaGetErrorString(e_), cudaGetErrorName(e_));     \
    } while (0)

/* After a kernel launch: launch configuration errors are reported at once. */
#define cuda_check_launch() cuda_check(cudaGetLastError())

#define cublas_check(call)                                                                            \
    do {                                                                                              \
        cublasStatus_t s_ = (call);                                                                   \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                              \
            return cuda_fail("%s: %s (%s)", #call, cublasLtGetStatusString(s_), cublasLtGetStatusName(s_)); \
    } while (0)

#define nccl_check(call)                                                                              \
    do {                                                                                              \
        ncclResult_t r_ = (call);                                                                     \
        if (r_ != ncclSuccess) return cuda_fail("%s: %s", #call, ncclGetErrorString(r_));           \
    } while (0)

#endif
