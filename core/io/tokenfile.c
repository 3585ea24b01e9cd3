/* tokenfile.c: llm.c's token files (see datafiles.h), memory-mapped.
 *
 * Layout (llm.c, dev/data/data_common.py, "gpt-2" format): 256 little-endian
 * int32 words of header, word 0 the magic 20240520, word 1 the version 1,
 * word 2 the token count N; then N uint16 token ids, little-endian. The file
 * must be exactly 1024 + 2N bytes. The mapping is read-only and private; the
 * tensor's storage unmaps it when the last tensor viewing it is released. */
#include "datafiles.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOKEN_MAGIC 20240520
#define TOKEN_VERSION 1
#define HEADER_BYTES 1024

static void unmap(void *data, size_t nbytes, void *ud) {
    (void)ud;
    munmap(data, nbytes);
}

/* A contiguous uint8 (ntok, 2) tensor over the mapping s, after the header. */
static Tensor *token_tensor(Storage *s, int64_t ntok) {
    Tensor *t = tensor_header_alloc();
    if (!t) {
        storage_release(s);
        return NULL;
    }
    t->refcount = 1;
    t->dtype = DT_U8;
    t->device = s->device;
    t->ndim = 2;
    t->shape[0] = ntok, t->shape[1] = 2;
    t->stride[0] = 2, t->stride[1] = 1;
    t->numel = ntok * 2;
    t->offset = HEADER_BYTES;
    t->storage = s;
    return t;
}

static int check_header(const char *path, const int32_t *h, off_t size) {
    if (h[0] != TOKEN_MAGIC)
        return accel_fail_int("TokenFile: %s is not an llm.c token file (magic %d, expected %d)", path, h[0], TOKEN_MAGIC);
    if (h[1] != TOKEN_VERSION)
        return accel_fail_int("TokenFile: %s has version %d; only version %d (uint16 token ids) is supported", path, h[1],
                              TOKEN_VERSION);
    if (h[2] < 0) return accel_fail_int("TokenFile: %s: the header's token count is negative (%d)", path, h[2]);
    off_t want = HEADER_BYTES + 2 * (off_t)h[2];
    if (size != want)
        return accel_fail_int("TokenFile: %s %s: the header says %d tokens (%lld bytes with the header), the file has %lld "
                              "bytes", path, size < want ? "is truncated" : "is longer than its header says", h[2],
                              (long long)want, (long long)size);
    return 0;
}

Tensor *tokenfile_map(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return accel_fail("TokenFile: cannot open %s: %s", path, strerror(errno));
    struct stat st;
    int32_t h[3];
    Tensor *t = NULL;
    if (fstat(fd, &st) < 0) {
        accel_fail("TokenFile: cannot stat %s: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        accel_fail("TokenFile: %s is not a regular file", path);
    } else if (st.st_size < HEADER_BYTES) {
        accel_fail("TokenFile: %s is truncated: %lld bytes, shorter than the %d-byte header", path,
                   (long long)st.st_size, HEADER_BYTES);
    } else if (pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h) {
        accel_fail("TokenFile: cannot read the header of %s: %s", path, strerror(errno));
    } else if (check_header(path, h, st.st_size) == 0) {
        /* copy-on-write: a write into the tokens tensor changes this process's copy, never the file */
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        Storage *s = p == MAP_FAILED ? accel_fail("TokenFile: cannot map %s: %s", path, strerror(errno))
                                     : storage_wrap(p, (size_t)st.st_size, (Device){DEV_CPU, 0}, unmap, NULL);
        if (p != MAP_FAILED && !s) munmap(p, (size_t)st.st_size);
        if (s) t = token_tensor(s, h[2]);
    }
    close(fd);
    return t;
}

int tokenfile_blocks(const Tensor *tokens, const int64_t *starts, int64_t B, int64_t T, Tensor **x, Tensor **y) {
    int64_t ntok = tokens->shape[0];
    int64_t shape[2] = {B, T};
    if (shape_check("TokenFile", shape, 2, (int)DT_I64) < 0) return -1;
    for (int64_t b = 0; b < B; b++)
        if (starts[b] < 0 || size_add(starts[b], size_add(T, 1)) < 0 || starts[b] + T + 1 > ntok)
            return accel_fail_int("TokenFile: a block of %lld + 1 tokens at token %lld runs past the %lld tokens of the file",
                                  (long long)T, (long long)starts[b], (long long)ntok);
    *x = tensor_empty(shape, 2, DT_I64, (Device){DEV_CPU, 0});
    *y = *x ? tensor_empty(shape, 2, DT_I64, (Device){DEV_CPU, 0}) : NULL;
    if (!*y) {
        tensor_release(*x);
        return -1;
    }
    HostMap mt, mx, my;
    const uint8_t *ids = tensor_host_map(tokens, HOST_READ, &mt);
    int64_t *px = ids ? tensor_host_map(*x, HOST_WRITE, &mx) : NULL, *py = px ? tensor_host_map(*y, HOST_WRITE, &my) : NULL;
    for (int64_t b = 0; py && b < B; b++) {
        const uint8_t *src = ids + 2 * starts[b];
        for (int64_t i = 0; i < T; i++) {
            px[b * T + i] = src[2 * i] | src[2 * i + 1] << 8;
            py[b * T + i] = src[2 * i + 2] | src[2 * i + 3] << 8;
        }
    }
    int rc = py ? 0 : -1;
    if (py && tensor_host_unmap(&my) < 0) rc = -1;
    if (px && tensor_host_unmap(&mx) < 0) rc = -1;
    if (ids) tensor_host_unmap(&mt);
    if (rc < 0) {
        tensor_release(*x), tensor_release(*y);
        *x = *y = NULL;
    }
    return rc;
}
