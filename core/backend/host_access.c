/* host_access.c: the host-access API of tensor.h: every host read or
 * write of tensor values above the backend goes through here, as explicit
 * device->host / host->device copies (backend.h to_host / from_host), or
 * as a zero-copy map where the backend says its memory is host-addressable
 * (host_ptr; the CPU). Staging copies cover the storage from the tensor's
 * offset to the storage's end, so any strided view is inside. */
#include "backend.h"
#include <stdlib.h>
#include <math.h>
#include <string.h>

int tensor_check_device(const char *op, const Tensor *a, const Tensor *b) {
    if (!b || device_same(a->device, b->device)) return 0;
    char da[32], db[32];
    return accel_fail_int("%s: tensors are on different devices (%s and %s)", op, device_str(a->device, da, sizeof da),
                          device_str(b->device, db, sizeof db));
}

void *tensor_host_ptr(const Tensor *t) {
    const Backend *be = backend_for(t->device);
    return be ? be->host_ptr(tensor_data(t)) : NULL;
}

void *tensor_host_map(const Tensor *t, int mode, HostMap *m) {
    *m = (HostMap){.t = t, .mode = mode};
    const Backend *be = backend_for(t->device);
    if (!be) return NULL;
    if (be->synchronize() != 0) return accel_fail("%s: waiting for the device's queued work failed", be->name);
    m->host = be->host_ptr(tensor_data(t));
    if (m->host) return m->host;
    size_t off = (size_t)t->offset * dtype_size(t->dtype);
    m->nbytes = t->storage->nbytes > off ? t->storage->nbytes - off : 0;
    m->staging = malloc(m->nbytes ? m->nbytes : 1);
    if (!m->staging) return accel_fail("out of memory staging %zu bytes from %s", m->nbytes, be->name);
    if (be->to_host(m->staging, tensor_data(t), m->nbytes) != 0) {
        free(m->staging);
        m->staging = NULL;
        return accel_fail("%s: copying %zu bytes to the host failed", be->name, m->nbytes);
    }
    return m->host = m->staging;
}

int tensor_host_unmap(HostMap *m) {
    if (!m->staging) return 0;
    int rc = 0;
    if (m->mode & HOST_WRITE) {
        const Backend *be = backend_for(m->t->device);
        if (!be || be->from_host(tensor_data(m->t), m->staging, m->nbytes) != 0)
            rc = accel_fail_int("copying %zu bytes from the host to the device failed", m->nbytes);
    }
    free(m->staging);
    m->staging = NULL;
    return rc;
}

Tensor *tensor_host_finish(Tensor *t, HostMap *m) {
    if (tensor_host_unmap(m) == 0) return t;
    tensor_release(t);
    return NULL;
}

static const char *elem_at(const Tensor *t, const void *host, int64_t i) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->shape[d]) * t->stride[d];
        i /= t->shape[d];
    }
    return (const char *)host + off * (int64_t)dtype_size(t->dtype);
}

double tensor_host_load(const Tensor *t, const void *host, int64_t i) { return dtype_load(elem_at(t, host, i), t->dtype); }

int64_t tensor_host_load_i64(const Tensor *t, const void *host, int64_t i) {
    return dtype_load_i64(elem_at(t, host, i), t->dtype);
}

double tensor_get_flat(const Tensor *t, int64_t i) {
    const Backend *be = backend_for(t->device);
    char buf[16];
    const char *dev = elem_at(t, tensor_data(t), i); /* device address arithmetic only */
    if (!be || be->to_host(buf, dev, dtype_size(t->dtype)) != 0) return NAN;
    return dtype_load(buf, t->dtype);
}

double tensor_item(const Tensor *t) { return tensor_get_flat(t, 0); }

int tensor_to_host(const Tensor *t, void *dst) {
    size_t nbytes = (size_t)t->numel * dtype_size(t->dtype);
    const Backend *be = backend_for(t->device);
    if (!be) return -1;
    if (t->numel == 0) return 0;
    if (tensor_is_contiguous(t)) {
        if (be->to_host(dst, tensor_data(t), nbytes) != 0)
            return accel_fail_int("%s: copying %zu bytes to the host failed", be->name, nbytes);
        return 0;
    }
    Tensor *c = tensor_empty(t->shape, t->ndim, t->dtype, t->device);
    if (!c) return -1;
    tensor_copy_strided(c, t);
    int rc = tensor_to_host(c, dst);
    tensor_release(c);
    return rc;
}

int tensor_from_host(Tensor *t, const void *src) {
    size_t nbytes = (size_t)t->numel * dtype_size(t->dtype);
    const Backend *be = backend_for(t->device);
    if (!be) return -1;
    if (t->numel == 0) return 0;
    if (!tensor_is_contiguous(t)) return accel_fail_int("tensor_from_host: the destination must be contiguous");
    if (be->from_host(tensor_data(t), src, nbytes) != 0)
        return accel_fail_int("%s: copying %zu bytes from the host failed", be->name, nbytes);
    tensor_bump_version(t);
    return 0;
}

Tensor *tensor_to_device(const Tensor *t, Device d) {
    Tensor *out = tensor_empty(t->shape, t->ndim, t->dtype, d);
    size_t nbytes = (size_t)t->numel * dtype_size(t->dtype);
    void *buf = out ? malloc(nbytes ? nbytes : 1) : NULL;
    if (out && !buf) accel_fail("out of memory staging %zu bytes between devices", nbytes);
    if (!buf || tensor_to_host(t, buf) < 0 || tensor_from_host(out, buf) < 0) {
        free(buf);
        tensor_release(out);
        return NULL;
    }
    free(buf);
    return out;
}

void tensor_copy_flat(Tensor *dst, const Tensor *src) {
    StridedIter it;
    iter_init_run(&it, dst->numel);
    iter_add_run(&it, dst, 1);
    iter_add_run(&it, src, 1);
    backend_for(dst->device)->copy(&it, dst->dtype, src->dtype);
}
