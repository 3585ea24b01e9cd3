/* idx.c: IDX files (the MNIST family: MNIST, Fashion-MNIST, KMNIST, ...),
 * plain or gzip-compressed (see datafiles.h).
 *
 * Layout: two zero bytes, a type code (0x08 uint8, 0x09 int8, 0x0B int16,
 * 0x0C int32, 0x0D float32, 0x0E float64), the number of dims, each dim as a
 * big-endian uint32, then the elements big-endian in row-major order. Files
 * are read through zlib, which passes plain files through unchanged; a file
 * is gzipped when it starts with the gzip magic 1f 8b. */
#include "datafiles.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

typedef struct {
    gzFile gz;
    const char *path;
    int64_t file_size; /* bytes on disk (compressed, for a gzipped file) */
} Src;

/* The most bytes a deflate stream inflates to per compressed byte (RFC
 * 1951's longest match per shortest code: about 1032:1). */
#define GZIP_MAX_RATIO 1032

static const struct {
    uint8_t code;
    int size;
    DType dt;
    const char *name;
} idx_types[] = {
    {0x08, 1, DT_U8, "uint8"},     {0x09, 1, DT_I32, "int8"},      {0x0B, 2, DT_I32, "int16"},
    {0x0C, 4, DT_I32, "int32"},    {0x0D, 4, DT_F32, "float32"},   {0x0E, 8, DT_F64, "float64"},
};

/* -1 naming the error the last read of s met, if any, else 0: a gzip
 * stream cut before its end (what the file's `what` needed was all there:
 * the missing part is the gzip trailer), one whose data fail the check
 * stored with them (zlib inflates ahead, so this shows on whichever read
 * comes first, often the header's), or a read error. */
static int read_error(Src *s, const char *what) {
    int zerr = Z_OK;
    const char *msg = gzerror(s->gz, &zerr);
    size_t np = strlen(s->path);
    if (strncmp(msg, s->path, np) == 0 && strncmp(msg + np, ": ", 2) == 0) msg += np + 2; /* zlib names the path */
    if (zerr == Z_OK) return 0;
    if (zerr == Z_DATA_ERROR) return accel_fail_int("read_idx: %s is a corrupt gzip file (zlib: %s)", s->path, msg);
    if (zerr == Z_BUF_ERROR)
        return accel_fail_int("read_idx: %s is truncated: the gzip stream ends before its end-of-stream marker", s->path);
    return accel_fail_int("read_idx: %s: cannot read the %s: %s", s->path, what, zerr == Z_ERRNO ? strerror(errno) : msg);
}

/* Read exactly n bytes (the file's `what`); 0, or -1 naming the problem. */
static int src_read(Src *s, void *dst, size_t n, const char *what) {
    size_t got = 0;
    int zerr = Z_OK;
    while (got < n) {
        unsigned chunk = n - got > (1u << 30) ? 1u << 30 : (unsigned)(n - got);
        int r = gzread(s->gz, (char *)dst + got, chunk);
        if (r <= 0) {
            gzerror(s->gz, &zerr);
            if (r < 0 && zerr != Z_BUF_ERROR) return read_error(s, what);
            break;
        }
        got += (size_t)r;
    }
    if (got == n) return 0;
    return accel_fail_int("read_idx: %s is truncated: the %s needs %zu bytes but only %zu are left%s", s->path, what, n,
                          got, zerr == Z_BUF_ERROR ? " (the gzip stream ends early)" : "");
}

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* Does the file hold as many bytes as the header's shape needs? Checked
 * before anything is allocated: the shape must be possible at all, and the
 * bytes it needs must fit in the rest of the file (a gzipped file in its
 * compressed size times the largest deflate ratio). 0 or -1. */
static int check_size(const Src *s, int type, const int64_t *shape, int ndim) {
    char op[600], shp[200];
    snprintf(op, sizeof op, "read_idx: %s", s->path);
    int64_t n = shape_check(op, shape, ndim, (int)idx_types[type].dt);
    int64_t need = size_mul(n, idx_types[type].size), header = 4 + 4 * (int64_t)ndim;
    if (n < 0) return -1;
    shape_str(shape, ndim, shp, sizeof shp);
    if (gzdirect(s->gz)) {
        if (need > s->file_size - header)
            return accel_fail_int("read_idx: %s is truncated: the header declares %lld %s elements, shape %s (%lld "
                                  "bytes), but the file has %lld bytes after the header", s->path, (long long)n,
                                  idx_types[type].name, shp, (long long)need, (long long)(s->file_size - header));
    } else if (need / GZIP_MAX_RATIO > s->file_size) {
        return accel_fail_int("read_idx: %s is truncated or corrupt: the header declares %lld %s elements, shape %s (%lld "
                              "bytes), more than its %lld compressed bytes can hold", s->path, (long long)n,
                              idx_types[type].name, shp, (long long)need, (long long)s->file_size);
    }
    return 0;
}

/* Header -> type index, shape; 0 or -1. */
static int read_header(Src *s, int *type, int64_t *shape, int *ndim) {
    uint8_t h[4], d[4 * TENSOR_MAX_DIMS];
    if (src_read(s, h, 4, "header") < 0) return -1;
    if (h[0] != 0 || h[1] != 0)
        return accel_fail_int("read_idx: %s is not an IDX file (it starts with bytes %02x %02x, expected 00 00)", s->path,
                              h[0], h[1]);
    *type = -1;
    for (int i = 0; i < (int)(sizeof idx_types / sizeof idx_types[0]); i++)
        if (idx_types[i].code == h[2]) *type = i;
    if (*type < 0)
        return accel_fail_int("read_idx: %s: unknown IDX element type 0x%02x (expected 0x08 uint8, 0x09 int8, 0x0B int16, "
                              "0x0C int32, 0x0D float32 or 0x0E float64)", s->path, h[2]);
    if (h[3] > TENSOR_MAX_DIMS)
        return accel_fail_int("read_idx: %s: the header declares %d dims; tensors have at most %d", s->path, h[3],
                              TENSOR_MAX_DIMS);
    *ndim = h[3];
    if (src_read(s, d, 4 * (size_t)*ndim, "dimension sizes") < 0) return -1;
    for (int i = 0; i < *ndim; i++) shape[i] = be32(d + 4 * i);
    return check_size(s, *type, shape, *ndim);
}

/* Big-endian elements of `size` bytes at p (t's host mapping) -> native
 * values of t's dtype, in place (widening runs backwards so it never
 * overwrites an element it has yet to read). */
static void decode(const Tensor *t, uint8_t *p, int size, bool is_signed) {
    int64_t n = t->numel;
    if (t->dtype == DT_U8) return;
    if (size == 1 || size == 2) {
        int32_t *out = (int32_t *)(void *)p;
        for (int64_t i = n - 1; i >= 0; i--) {
            const uint8_t *e = p + i * size;
            out[i] = size == 1 ? (is_signed ? (int8_t)e[0] : e[0]) : (int16_t)(uint16_t)(e[0] << 8 | e[1]);
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        uint8_t *e = p + i * size;
        for (int a = 0, b = size - 1; a < b; a++, b--) {
            uint8_t tmp = e[a];
            e[a] = e[b], e[b] = tmp;
        }
    }
}

/* The data after the header into p, t's host mapping, decoded. */
static int read_data(Src *s, Tensor *t, uint8_t *p, int type) {
    size_t nbytes = (size_t)t->numel * (size_t)idx_types[type].size;
    char what[200];
    snprintf(what, sizeof what, "data (%lld %s elements, shape %s)", (long long)t->numel, idx_types[type].name,
             tensor_shape_str(t));
    uint8_t extra;
    if (src_read(s, p, nbytes, what) < 0) return -1;
    if (gzread(s->gz, &extra, 1) > 0)
        return accel_fail_int("read_idx: %s has bytes after the %s its header declares", s->path, what);
    if (read_error(s, "end of the file") < 0) return -1;
    decode(t, p, idx_types[type].size, idx_types[type].code == 0x09);
    return 0;
}

static Tensor *read_body(Src *s) {
    int type = 0, ndim = 0;
    int64_t shape[TENSOR_MAX_DIMS];
    if (read_header(s, &type, shape, &ndim) < 0) return NULL;
    Tensor *t = tensor_empty(shape, ndim, idx_types[type].dt, (Device){DEV_CPU, 0});
    HostMap m;
    uint8_t *p = t ? tensor_host_map(t, HOST_WRITE, &m) : NULL;
    if (p && read_data(s, t, p, type) == 0) return tensor_host_finish(t, &m);
    if (p) tensor_host_unmap(&m);
    tensor_release(t);
    return NULL;
}

Tensor *idx_read(const char *path) {
    struct stat st;
    if (stat(path, &st) < 0) return accel_fail("read_idx: cannot open %s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return accel_fail("read_idx: %s is a directory, not an IDX file", path);
    Src s = {.gz = gzopen(path, "rb"), .path = path, .file_size = S_ISREG(st.st_mode) ? st.st_size : INT64_MAX};
    if (!s.gz) return accel_fail("read_idx: cannot open %s: %s", path, errno ? strerror(errno) : "out of memory");
    gzbuffer(s.gz, 1 << 18);
    Tensor *t = read_body(&s);
    gzclose(s.gz);
    return t;
}
