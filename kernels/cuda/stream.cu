/* stream.cu: streams, events and device-to-device copies for the device
 * interface's ordering entries (a current stream per device, record / wait /
 * synchronise). Handles are cudaStream_t / cudaEvent_t passed as void *. */
#include "common.cuh"

extern "C" int kc_set_device(int device) {
    cuda_check(cudaSetDevice(device));
    return 0;
}

extern "C" int kc_stream_create(int device, void **stream) {
    cudaStream_t s;
    cuda_check(cudaSetDevice(device));
    cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *stream = s;
    return 0;
}

extern "C" int kc_stream_destroy(void *stream) {
    cuda_check(cudaStreamDestroy(kc_stream(stream)));
    return 0;
}

extern "C" int kc_stream_synchronize(void *stream) {
    cuda_check(cudaStreamSynchronize(kc_stream(stream)));
    return 0;
}

extern "C" int kc_event_create(void **event) {
    cudaEvent_t e;
    cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *event = e;
    return 0;
}

extern "C" int kc_event_destroy(void *event) {
    cuda_check(cudaEventDestroy((cudaEvent_t)event));
    return 0;
}

extern "C" int kc_event_record(void *event, void *stream) {
    cuda_check(cudaEventRecord((cudaEvent_t)event, kc_stream(stream)));
    return 0;
}

/* `stream` waits (on the device) for the work before the event's record. */
extern "C" int kc_stream_wait_event(void *stream, void *event) {
    cuda_check(cudaStreamWaitEvent(kc_stream(stream), (cudaEvent_t)event, 0));
    return 0;
}

extern "C" int kc_event_synchronize(void *event) {
    cuda_check(cudaEventSynchronize((cudaEvent_t)event));
    return 0;
}

/* n bytes, contiguous, on one device or between two (peer copy). */
extern "C" int kc_copy_device(void *dst, const void *src, size_t n, void *stream) {
    if (n == 0) return 0;
    cuda_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, kc_stream(stream)));
    return 0;
}

extern "C" int kc_memset_zero(void *dst, size_t n, void *stream) {
    if (n == 0) return 0;
    cuda_check(cudaMemsetAsync(dst, 0, n, kc_stream(stream)));
    return 0;
}
