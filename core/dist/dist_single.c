/* dist_single.c: the "single" communicator backend: one process, so every
 * collective is the identity (in-place ops) or a copy (in -> out), and every
 * operation completes at once (requests are always NULL). A split is a
 * one-process communicator again. */
#include "dist.h"
#include <stdlib.h>
#include <string.h>

static int copy_elems(const void *in, void *out, int64_t n, DType dt, DistReq **req) {
    if (req) *req = NULL;
    if (in != out && n > 0) memmove(out, in, (size_t)n * dtype_size(dt));
    return 0;
}

static int s_all_reduce(DistComm *c, void *buf, int64_t n, DType dt, DistOp op, DistReq **req) {
    (void)c, (void)op;
    return copy_elems(buf, buf, n, dt, req);
}

static int s_reduce_scatter(DistComm *c, const void *in, void *out, int64_t n, DType dt, DistOp op, DistReq **req) {
    (void)c, (void)op;
    return copy_elems(in, out, n, dt, req);
}

static int s_all_gather(DistComm *c, const void *in, void *out, int64_t n, DType dt, DistReq **req) {
    (void)c;
    return copy_elems(in, out, n, dt, req);
}

static int s_all_gather_v(DistComm *c, const void *in, void *out, const int64_t *counts, DType dt, DistReq **req) {
    (void)c;
    return copy_elems(in, out, counts[0], dt, req);
}

static int s_broadcast(DistComm *c, void *buf, int64_t n, DType dt, int root, DistReq **req) {
    (void)c, (void)root;
    return copy_elems(buf, buf, n, dt, req);
}

static int s_barrier(DistComm *c, DistReq **req) {
    (void)c;
    if (req) *req = NULL;
    return 0;
}

static int s_wait(DistComm *c, DistReq *r, const char *what) {
    (void)c, (void)r, (void)what;
    return 0;
}

static int s_test(DistComm *c, DistReq *r, int *done, const char *what) {
    (void)c, (void)r, (void)what;
    *done = 1;
    return 0;
}

static void s_abort(DistComm *c, int code) {
    (void)c;
    exit(code);
}

static int s_finalize(DistComm *c) {
    (void)c;
    return 0;
}

/* The only process forms a communicator of its own, whatever the color. */
static int s_split(DistComm *parent, int color, int key, DistComm *out) {
    (void)parent, (void)color, (void)key;
    out->rank = 0;
    out->size = 1;
    return 0;
}

static int s_comm_free(DistComm *c) {
    (void)c;
    return 0;
}

static const DistBackendOps single_ops = {
    .name = "single",
    .all_reduce = s_all_reduce,
    .reduce_scatter = s_reduce_scatter,
    .all_gather = s_all_gather,
    .all_gather_v = s_all_gather_v,
    .broadcast = s_broadcast,
    .barrier = s_barrier,
    .wait = s_wait,
    .test = s_test,
    .abort = s_abort,
    .finalize = s_finalize,
    .split = s_split,
    .comm_free = s_comm_free,
};

void dist_single_init(DistComm *c) {
    c->ops = &single_ops;
    c->rank = 0;
    c->size = 1;
    c->local_rank = 0;
    c->local_size = 1;
}
