/* alloc.cu: device memory for the CUDA backend: one caching allocator per
 * device (alloc_cache.c's bookkeeping over cudaMalloc / cudaFree, made on
 * the device's first use, one lock each), and pinned host staging buffers
 * for host <-> device copies (one per device, grown on demand up to
 * STAGE_MAX; larger copies go through it in pieces). */
#include "common.cuh"
#include "alloc_cache.h"
#include <pthread.h>
#include <string.h>

#define MAX_DEVICES 64
#define STAGE_MAX ((size_t)64 << 20)

typedef struct {
    pthread_mutex_t lock;
    int ready;
    CacheAlloc cache;
    void *stage;
    size_t stage_size;
} DeviceMem;

static DeviceMem devs[MAX_DEVICES];
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

/* Makes `device` current; *prev receives the device to restore. */
static int on_device(int device, int *prev) {
    cuda_check(cudaGetDevice(prev));
    if (*prev != device) cuda_check(cudaSetDevice(device));
    return 0;
}

static int raw_alloc(void *ctx, size_t size, void **p) {
    int dev = (int)(intptr_t)ctx, prev = 0;
    if (on_device(dev, &prev)) return -1;
    const cudaError_t e = cudaMalloc(p, size);
    if (prev != dev) cudaSetDevice(prev);
    if (e == cudaSuccess) return 0;
    cudaGetLastError(); /* clear the last-error slot (out of memory is not sticky) */
    if (e == cudaErrorMemoryAllocation) return 1;
    return cuda_fail("cudaMalloc(%zu bytes) on cuda:%d: %s (%s)", size, dev, cudaGetErrorString(e), cudaGetErrorName(e));
}

static void raw_free(void *ctx, void *p) {
    int dev = (int)(intptr_t)ctx, prev = 0;
    if (on_device(dev, &prev)) return;
    cudaFree(p);
    if (prev != dev) cudaSetDevice(prev);
}

static DeviceMem *device_mem(int device) {
    if (device < 0 || device >= MAX_DEVICES) return cuda_fail("cuda:%d: device index out of range", device), nullptr;
    DeviceMem *d = &devs[device];
    pthread_mutex_lock(&init_lock);
    if (!d->ready) {
        pthread_mutex_init(&d->lock, NULL);
        cache_init(&d->cache, CacheRaw{(void *)(intptr_t)device, raw_alloc, raw_free}, device);
        d->ready = 1;
    }
    pthread_mutex_unlock(&init_lock);
    return d;
}

extern "C" int kc_malloc(int device, size_t size, void *stream, void **p) {
    DeviceMem *d = device_mem(device);
    if (!d) return -1;
    pthread_mutex_lock(&d->lock);
    const int rc = cache_alloc(&d->cache, size, (uintptr_t)stream, p);
    pthread_mutex_unlock(&d->lock);
    return rc;
}

extern "C" int kc_free(int device, void *p) {
    DeviceMem *d = device_mem(device);
    if (!d) return -1;
    pthread_mutex_lock(&d->lock);
    const int rc = cache_free(&d->cache, p);
    pthread_mutex_unlock(&d->lock);
    return rc;
}

extern "C" void kc_empty_cache(int device) {
    DeviceMem *d = device_mem(device);
    if (!d) return;
    pthread_mutex_lock(&d->lock);
    cache_empty(&d->cache);
    pthread_mutex_unlock(&d->lock);
}

extern "C" int kc_memory_stats(int device, CacheStats *out) {
    DeviceMem *d = device_mem(device);
    if (!d) return -1;
    pthread_mutex_lock(&d->lock);
    *out = cache_stats(&d->cache);
    pthread_mutex_unlock(&d->lock);
    return 0;
}

extern "C" int kc_reset_peak_stats(int device) {
    DeviceMem *d = device_mem(device);
    if (!d) return -1;
    pthread_mutex_lock(&d->lock);
    cache_reset_peaks(&d->cache);
    pthread_mutex_unlock(&d->lock);
    return 0;
}

/* ---- pinned staging (the device's lock held) ---- */

static int stage_reserve(DeviceMem *d, size_t want) {
    if (want > STAGE_MAX) want = STAGE_MAX;
    if (d->stage_size >= want) return 0;
    if (d->stage) cuda_check(cudaFreeHost(d->stage));
    d->stage = NULL, d->stage_size = 0;
    cuda_check(cudaHostAlloc(&d->stage, want, cudaHostAllocPortable));
    d->stage_size = want;
    return 0;
}

static int stage_copy(DeviceMem *d, char *dst, const char *src, size_t n, int to_device, cudaStream_t s) {
    if (stage_reserve(d, n)) return -1;
    for (size_t at = 0; at < n; at += d->stage_size) {
        const size_t len = n - at < d->stage_size ? n - at : d->stage_size;
        if (to_device) {
            memcpy(d->stage, src + at, len);
            cuda_check(cudaMemcpyAsync(dst + at, d->stage, len, cudaMemcpyHostToDevice, s));
            cuda_check(cudaStreamSynchronize(s));
        } else {
            cuda_check(cudaMemcpyAsync(d->stage, src + at, len, cudaMemcpyDeviceToHost, s));
            cuda_check(cudaStreamSynchronize(s));
            memcpy(dst + at, d->stage, len);
        }
    }
    return 0;
}

static int staged(int device, void *dst, const void *src, size_t n, int to_device, void *stream) {
    if (n == 0) return 0;
    DeviceMem *d = device_mem(device);
    if (!d) return -1;
    pthread_mutex_lock(&d->lock);
    const int rc = stage_copy(d, (char *)dst, (const char *)src, n, to_device, kc_stream(stream));
    pthread_mutex_unlock(&d->lock);
    return rc;
}

extern "C" int kc_copy_to_device(int device, void *dst, const void *src, size_t n, void *stream) {
    return staged(device, dst, src, n, 1, stream);
}

extern "C" int kc_copy_to_host(int device, void *dst, const void *src, size_t n, void *stream) {
    return staged(device, dst, src, n, 0, stream);
}
