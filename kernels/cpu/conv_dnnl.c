/* conv_dnnl.c: float32 2-D convolution through oneDNN's convolution
 * primitives (forward, backward data, backward weights + bias), the fast
 * path of conv.c. Tensors stay NCHW / OIHW for the caller; each primitive
 * is created with "any" layouts so oneDNN picks its blocked JIT kernels, and
 * the plain <-> blocked reorders run around it in scratch buffers. Primitives
 * and reorders are built once per (geometry, direction) and kept in a small
 * LRU cache; the blocked copies live in one scratch buffer kept between
 * calls, and the two backward directions share the blocked output gradient.
 * A geometry that oneDNN would only serve with its reference or GEMM-based
 * implementation is refused (returns nonzero), so conv.c's own im2col +
 * GEMM path takes it. */
#include <dnnl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "conv_dnnl.h"
#include "lru.h"

enum { DIR_FWD, DIR_BWD_DATA, DIR_BWD_WEIGHTS };
enum { OP_SRC, OP_WEI, OP_DST, OP_COUNT }; /* or their diffs */

/* One tensor argument: the caller's plain layout and the primitive's. */
typedef struct {
    int arg, out;                 /* DNNL_ARG_* of the convolution; written by it */
    dnnl_memory_t user, inner;    /* inner == user when the layouts match */
    dnnl_primitive_t reorder;     /* user -> inner (inputs) or inner -> user (outputs) */
    size_t bytes;                 /* of inner when it has its own buffer */
} Operand;

typedef struct {
    KConv2d g;
    int dir, bias; /* key */
    int used;
    uint64_t last;
    dnnl_primitive_t prim; /* NULL: refused, use the fallback */
    Operand op[OP_COUNT];
    dnnl_memory_t bias_mem;
} ConvSlot;

#define CONV_SLOTS 16
static ConvSlot slots[CONV_SLOTS];
static uint64_t lru_clock;
static dnnl_engine_t engine;
static dnnl_stream_t stream;
static pthread_mutex_t conv_lock = PTHREAD_MUTEX_INITIALIZER;

static int engine_ready(void) {
    if (!engine && dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) engine = NULL;
    if (engine && !stream && dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success)
        stream = NULL;
    return engine && stream;
}

static void slot_release(ConvSlot *s) {
    if (s->prim) dnnl_primitive_destroy(s->prim);
    for (int k = 0; k < OP_COUNT; k++) {
        Operand *o = &s->op[k];
        if (o->reorder) dnnl_primitive_destroy(o->reorder);
        if (o->inner && o->inner != o->user) dnnl_memory_destroy(o->inner);
        if (o->user) dnnl_memory_destroy(o->user);
    }
    if (s->bias_mem) dnnl_memory_destroy(s->bias_mem);
    memset(s, 0, sizeof *s);
}

/* ---------------- descriptors ---------------- */

typedef struct {
    dnnl_memory_desc_t plain[OP_COUNT], any[OP_COUNT], bias;
    dnnl_dims_t strides, dilates, pad_l, pad_r;
} ConvDescs;

static int descs_init(const KConv2d *g, ConvDescs *d) {
    const int grouped = g->groups > 1;
    dnnl_dims_t src = {g->N, g->C, g->H, g->W}, dst = {g->N, g->O, g->OH, g->OW}, bias = {g->O};
    dnnl_dims_t wei = {g->O, g->C / g->groups, g->KH, g->KW};
    dnnl_dims_t gwei = {g->groups, g->O / g->groups, g->C / g->groups, g->KH, g->KW};
    const int wnd = grouped ? 5 : 4;
    const int64_t *wdims = grouped ? gwei : wei;
    const dnnl_format_tag_t wtag = grouped ? dnnl_goihw : dnnl_oihw;
    int ok = dnnl_memory_desc_init_by_tag(&d->plain[OP_SRC], 4, src, dnnl_f32, dnnl_nchw) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&d->plain[OP_WEI], wnd, wdims, dnnl_f32, wtag) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&d->plain[OP_DST], 4, dst, dnnl_f32, dnnl_nchw) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&d->any[OP_SRC], 4, src, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&d->any[OP_WEI], wnd, wdims, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&d->any[OP_DST], 4, dst, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&d->bias, 1, bias, dnnl_f32, dnnl_a) == dnnl_success;
    /* oneDNN wants (in + pad_l + pad_r - reach) / stride + 1 == out; any
     * right padding in [needed, needed + stride) gives the same windows. */
    const int64_t reach_h = (g->KH - 1) * g->dh + 1, reach_w = (g->KW - 1) * g->dw + 1;
    const int64_t rh = (g->OH - 1) * g->sh + reach_h - g->H - g->ph, rw = (g->OW - 1) * g->sw + reach_w - g->W - g->pw;
    d->strides[0] = g->sh, d->strides[1] = g->sw;
    d->dilates[0] = g->dh - 1, d->dilates[1] = g->dw - 1;
    d->pad_l[0] = g->ph, d->pad_l[1] = g->pw;
    d->pad_r[0] = rh > 0 ? rh : 0, d->pad_r[1] = rw > 0 ? rw : 0;
    return ok ? 0 : -1;
}

/* The primitive descriptor of one direction (NULL if oneDNN has none). */
static dnnl_primitive_desc_t make_pd(const ConvDescs *d, int dir, int bias, const_dnnl_primitive_desc_t hint) {
    dnnl_convolution_desc_t cd;
    dnnl_status_t st;
    const dnnl_memory_desc_t *b = bias ? &d->bias : NULL;
    if (dir == DIR_FWD)
        st = dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct,
                                                        &d->any[OP_SRC], &d->any[OP_WEI], b, &d->any[OP_DST],
                                                        d->strides, d->dilates, d->pad_l, d->pad_r);
    else if (dir == DIR_BWD_DATA)
        st = dnnl_dilated_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, &d->any[OP_SRC],
                                                              &d->any[OP_WEI], &d->any[OP_DST], d->strides,
                                                              d->dilates, d->pad_l, d->pad_r);
    else
        st = dnnl_dilated_convolution_backward_weights_desc_init(&cd, dnnl_convolution_direct, &d->any[OP_SRC],
                                                                 &d->any[OP_WEI], b, &d->any[OP_DST], d->strides,
                                                                 d->dilates, d->pad_l, d->pad_r);
    dnnl_primitive_desc_t pd = NULL;
    if (st != dnnl_success || dnnl_primitive_desc_create(&pd, &cd, NULL, engine, hint) != dnnl_success) return NULL;
    return pd;
}

/* A direct JIT kernel ("jit:avx2", "jit_1x1:...", "brgconv:avx512_core",
 * "brdgmm_dw:...")? The reference ("ref:any") and im2col + GEMM ("gemm:jit",
 * "x64:gemm:jit") implementations are no faster than conv.c's own path. */
static int fast_impl(const_dnnl_primitive_desc_t pd) {
    const char *name = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) != dnnl_success || !name) return 0;
    return strncmp(name, "ref", 3) != 0 && strncmp(name, "gemm", 4) != 0 && !strstr(name, "gemm:jit");
}

/* Operand k of a slot: the plain user memory, and the primitive's own with a
 * reorder between them when the layouts differ. */
static int operand_init(Operand *o, const dnnl_memory_desc_t *plain, const dnnl_memory_desc_t *inner, int arg, int out) {
    o->arg = arg, o->out = out;
    if (dnnl_memory_create(&o->user, plain, engine, DNNL_MEMORY_NONE) != dnnl_success) return -1;
    if (dnnl_memory_desc_equal(plain, inner)) {
        o->inner = o->user;
        return 0;
    }
    o->bytes = dnnl_memory_desc_get_size(inner);
    dnnl_primitive_desc_t rpd = NULL;
    int ok = dnnl_memory_create(&o->inner, inner, engine, DNNL_MEMORY_NONE) == dnnl_success &&
             (out ? dnnl_reorder_primitive_desc_create(&rpd, inner, engine, plain, engine, NULL)
                  : dnnl_reorder_primitive_desc_create(&rpd, plain, engine, inner, engine, NULL)) == dnnl_success &&
             dnnl_primitive_create(&o->reorder, rpd) == dnnl_success;
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    return ok ? 0 : -1;
}

static void slot_build(ConvSlot *s) {
    ConvDescs d;
    if (descs_init(&s->g, &d) < 0) return;
    /* backward primitives need the forward one as a hint */
    dnnl_primitive_desc_t fwd = make_pd(&d, DIR_FWD, s->bias, NULL);
    dnnl_primitive_desc_t pd = fwd && s->dir != DIR_FWD ? make_pd(&d, s->dir, s->bias, fwd) : fwd;
    int ok = pd && fast_impl(pd);
    static const int queries[3][OP_COUNT] = {
        {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md},
        {dnnl_query_diff_src_md, dnnl_query_weights_md, dnnl_query_diff_dst_md},
        {dnnl_query_src_md, dnnl_query_diff_weights_md, dnnl_query_diff_dst_md}};
    static const int args[3][OP_COUNT] = {{DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
                                          {DNNL_ARG_DIFF_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST},
                                          {DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_DST}};
    static const int outs[3] = {OP_DST, OP_SRC, OP_WEI};
    for (int k = 0; ok && k < OP_COUNT; k++) {
        const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, queries[s->dir][k], 0);
        ok = md && operand_init(&s->op[k], &d.plain[k], md, args[s->dir][k], k == outs[s->dir]) == 0;
    }
    if (ok && s->bias) ok = dnnl_memory_create(&s->bias_mem, &d.bias, engine, DNNL_MEMORY_NONE) == dnnl_success;
    ok = ok && dnnl_primitive_create(&s->prim, pd) == dnnl_success;
    if (pd && pd != fwd) dnnl_primitive_desc_destroy(pd);
    if (fwd) dnnl_primitive_desc_destroy(fwd);
    if (!ok) { /* keep the key, drop the parts: the slot now means "refused" */
        ConvSlot key = {.g = s->g, .dir = s->dir, .bias = s->bias, .used = 1, .last = s->last};
        slot_release(s);
        *s = key;
    }
}

static ConvSlot *slot_get(const KConv2d *g, int dir, int bias) {
    ConvSlot *victim = &slots[0];
    for (int i = 0; i < CONV_SLOTS; i++) {
        ConvSlot *s = &slots[i];
        if (s->used && s->dir == dir && s->bias == bias && memcmp(&s->g, g, sizeof *g) == 0) {
            s->last = ++lru_clock;
            return s;
        }
        if (lru_better_victim(s->used, s->last, victim->used, victim->last)) victim = s;
    }
    slot_release(victim);
    victim->g = *g, victim->dir = dir, victim->bias = bias, victim->used = 1, victim->last = ++lru_clock;
    slot_build(victim);
    return victim;
}

static int exec(dnnl_primitive_t p, int n, const dnnl_exec_arg_t *args) {
    return dnnl_primitive_execute(p, stream, n, args) != dnnl_success || dnnl_stream_wait(stream) != dnnl_success;
}

/* ---------------- running ---------------- */

/* Scratch for the blocked copies, kept between calls (no page faults on the
 * hot path) up to SCRATCH_KEEP bytes, allocated per call above that. */
#define SCRATCH_KEEP ((size_t)64 << 20)
static char *scratch_buf;
static size_t scratch_cap;

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

static char *scratch_get(size_t n) {
    if (n <= scratch_cap) return scratch_buf;
    if (n > SCRATCH_KEEP) return aligned_alloc(64, round64(n));
    free(scratch_buf);
    scratch_buf = aligned_alloc(64, round64(n));
    scratch_cap = scratch_buf ? n : 0;
    return scratch_buf;
}

static void scratch_put(char *p) {
    if (p != scratch_buf) free(p);
}

static size_t slot_scratch(const ConvSlot *s) {
    size_t n = 0;
    for (int k = 0; s && k < OP_COUNT; k++) n += s->op[k].reorder ? round64(s->op[k].bytes) : 0;
    return n;
}

/* The blocked copy of the output gradient made by the first backward slot
 * of a call, for the second to reuse when it wants the same layout. */
typedef struct {
    const dnnl_memory_desc_t *md;
    void *buf;
} BlockedGy;

/* Run a slot on the caller's plain buffers (ptr per operand, bias may be
 * NULL), its blocked copies in scratch (slot_scratch bytes). */
static int slot_run(ConvSlot *s, void *const ptr[OP_COUNT], void *bias, char *scratch, BlockedGy *gy) {
    int rc = 0;
    dnnl_exec_arg_t args[OP_COUNT + 1];
    for (int k = 0; k < OP_COUNT && rc == 0; k++) {
        Operand *o = &s->op[k];
        args[k] = (dnnl_exec_arg_t){o->arg, o->inner};
        rc = dnnl_memory_set_data_handle(o->user, ptr[k]) != dnnl_success;
        if (rc || !o->reorder) continue;
        const dnnl_memory_desc_t *md = NULL;
        const int is_gy = k == OP_DST && s->dir != DIR_FWD;
        rc = dnnl_memory_get_memory_desc(o->inner, &md) != dnnl_success;
        if (rc == 0 && is_gy && gy->buf && dnnl_memory_desc_equal(md, gy->md)) {
            rc = dnnl_memory_set_data_handle(o->inner, gy->buf) != dnnl_success;
            continue;
        }
        rc = rc || dnnl_memory_set_data_handle(o->inner, scratch) != dnnl_success;
        if (rc == 0 && is_gy) gy->md = md, gy->buf = scratch;
        scratch += round64(o->bytes);
        if (rc == 0 && !o->out)
            rc = exec(o->reorder, 2, (dnnl_exec_arg_t[]){{DNNL_ARG_FROM, o->user}, {DNNL_ARG_TO, o->inner}});
    }
    int nargs = OP_COUNT;
    if (rc == 0 && s->bias) {
        rc = dnnl_memory_set_data_handle(s->bias_mem, bias) != dnnl_success;
        args[nargs++] = (dnnl_exec_arg_t){s->dir == DIR_FWD ? DNNL_ARG_BIAS : DNNL_ARG_DIFF_BIAS, s->bias_mem};
    }
    rc = rc || exec(s->prim, nargs, args);
    for (int k = 0; rc == 0 && k < OP_COUNT; k++) {
        Operand *o = &s->op[k];
        if (o->reorder && o->out)
            rc = exec(o->reorder, 2, (dnnl_exec_arg_t[]){{DNNL_ARG_FROM, o->inner}, {DNNL_ARG_TO, o->user}});
    }
    return rc;
}

static int usable(const KConv2d *g) { return g->N > 0 && g->O > 0 && g->OH > 0 && g->OW > 0; }

int conv_dnnl_fwd(const KConv2d *g, const float *x, const float *w, const float *b, float *y) {
    if (!usable(g)) return 1;
    pthread_mutex_lock(&conv_lock);
    int rc = 1;
    ConvSlot *s = engine_ready() ? slot_get(g, DIR_FWD, b != NULL) : NULL;
    char *scratch = s && s->prim ? scratch_get(slot_scratch(s)) : NULL;
    if (scratch || (s && s->prim && slot_scratch(s) == 0)) {
        BlockedGy none = {0};
        rc = slot_run(s, (void *[]){(void *)x, (void *)w, y}, (void *)b, scratch, &none);
    }
    scratch_put(scratch);
    pthread_mutex_unlock(&conv_lock);
    return rc;
}

/* Both backward directions in one call, so they share the blocked gy. */
int conv_dnnl_bwd(const KConv2d *g, const float *x, const float *w, const float *gy, float *gx, float *gw, float *gb) {
    if (!usable(g) || (!gx && !gw)) return 1;
    pthread_mutex_lock(&conv_lock);
    int rc = 1;
    ConvSlot *sd = NULL, *sw = NULL;
    if (engine_ready()) {
        sd = gx ? slot_get(g, DIR_BWD_DATA, 0) : NULL;
        sw = gw ? slot_get(g, DIR_BWD_WEIGHTS, gb != NULL) : NULL;
    }
    const int ready = engine_ready() && (!gx || sd->prim) && (!gw || sw->prim);
    const size_t need = slot_scratch(sd) + slot_scratch(sw);
    char *scratch = ready && need ? scratch_get(need) : NULL;
    if (ready && (scratch || need == 0)) {
        BlockedGy shared = {0};
        rc = sd ? slot_run(sd, (void *[]){gx, (void *)w, (void *)gy}, NULL, scratch, &shared) : 0;
        if (rc == 0 && sw)
            rc = slot_run(sw, (void *[]){(void *)x, gw, (void *)gy}, gb, scratch + slot_scratch(sd), &shared);
    }
    scratch_put(scratch);
    pthread_mutex_unlock(&conv_lock);
    return rc;
}
