/* test_conv.c: unit tests of the convolution and max-pooling kernels
 * (kernels/cpu/conv.c) against naive float64 loops written here straight
 * from the definitions (each output is a sum over its window; the gradients
 * are the same sums read the other way round). Covers stride, padding
 * (including the implicit bottom/right padding of an asymmetric "same"),
 * dilation, groups, the 1x1 direct path, the threaded path, bf16 inputs.
 * Last line "N passed, N failed".
 *
 *   ./test_conv          run the tests
 *   ./test_conv bench    also time the Fashion-MNIST CNN's two conv layers */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cpu/kernels.h"

static int n_pass, n_fail;

static void check(int ok, const char *what, int line) {
    if (ok) n_pass++;
    else {
        n_fail++;
        printf("test_conv.c:%d: FAIL %s\n", line, what);
    }
}

static double frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 32768.0 - 1.0;
}

static const char *dt_name(DType dt) { return dt == DT_F64 ? "f64" : dt == DT_BF16 ? "bf16" : "f32"; }

/* ---------------- naive references (double) ---------------- */

/* input position (ih, iw) of output (oh, ow), tap (kh, kw); 0 when outside */
static int tap(const KConv2d *g, int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t *ih, int64_t *iw) {
    *ih = oh * g->sh - g->ph + kh * g->dh, *iw = ow * g->sw - g->pw + kw * g->dw;
    return *ih >= 0 && *ih < g->H && *iw >= 0 && *iw < g->W;
}

/* Visits every (n, o, oh, ow, c, kh, kw) product term with its flat indices. */
#define FOR_TERMS(g, BODY)                                                                          \
    for (int64_t n = 0; n < g->N; n++)                                                              \
        for (int64_t o = 0; o < g->O; o++)                                                          \
            for (int64_t oh = 0; oh < g->OH; oh++)                                                  \
                for (int64_t ow = 0; ow < g->OW; ow++)                                              \
                    for (int64_t cl = 0; cl < g->C / g->groups; cl++)                               \
                        for (int64_t kh = 0; kh < g->KH; kh++)                                      \
                            for (int64_t kw = 0; kw < g->KW; kw++) {                                \
                                int64_t ih, iw;                                                     \
                                if (!tap(g, oh, ow, kh, kw, &ih, &iw)) continue;                    \
                                const int64_t c = o / (g->O / g->groups) * (g->C / g->groups) + cl; \
                                const int64_t xi = ((n * g->C + c) * g->H + ih) * g->W + iw;        \
                                const int64_t wi = ((o * (g->C / g->groups) + cl) * g->KH + kh) * g->KW + kw; \
                                const int64_t yi = ((n * g->O + o) * g->OH + oh) * g->OW + ow;      \
                                BODY;                                                               \
                            }

static void ref_conv(const KConv2d *g, const double *x, const double *w, const double *b, double *y,
                     const double *gy, double *gx, double *gw, double *gb) {
    int64_t ny = g->N * g->O * g->OH * g->OW;
    for (int64_t i = 0; i < ny; i++) y[i] = b ? b[(i / (g->OH * g->OW)) % g->O] : 0;
    memset(gx, 0, sizeof(double) * (size_t)(g->N * g->C * g->H * g->W));
    memset(gw, 0, sizeof(double) * (size_t)(g->O * g->C / g->groups * g->KH * g->KW));
    memset(gb, 0, sizeof(double) * (size_t)g->O);
    for (int64_t i = 0; i < ny; i++) gb[(i / (g->OH * g->OW)) % g->O] += gy[i];
    FOR_TERMS(g, {
        y[yi] += x[xi] * w[wi];
        gx[xi] += w[wi] * gy[yi];
        gw[wi] += x[xi] * gy[yi];
    });
}

/* ---------------- conv cases ---------------- */

typedef struct {
    int64_t N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw, groups, extra_h, extra_w; /* extra: bottom/right pad */
} Case;

static KConv2d geometry(const Case *c) {
    KConv2d g = {.N = c->N, .C = c->C, .H = c->H, .W = c->W, .O = c->O, .KH = c->KH, .KW = c->KW,
                 .sh = c->sh, .sw = c->sw, .ph = c->ph, .pw = c->pw, .dh = c->dh, .dw = c->dw, .groups = c->groups};
    g.OH = (c->H + 2 * c->ph + c->extra_h - c->dh * (c->KH - 1) - 1) / c->sh + 1;
    g.OW = (c->W + 2 * c->pw + c->extra_w - c->dw * (c->KW - 1) - 1) / c->sw + 1;
    return g;
}

static double max_err(const double *ref, const void *got, DType dt, int64_t n) {
    double e = 0, scale = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double v = dt == DT_F64 ? ((const double *)got)[i] : ((const float *)got)[i];
        double d = fabs(v - ref[i]);
        if (!(d <= e)) e = d; /* NaN sticks */
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    }
    return e / scale; /* relative to the largest reference value */
}

/* Copy doubles into a buffer of dtype dt (bf16 rounds; ref keeps the rounded values). */
static void *to_dtype(double *ref, int64_t n, DType dt) {
    void *p = malloc((size_t)(n > 0 ? n : 1) * 8);
    for (int64_t i = 0; i < n; i++) {
        if (dt == DT_F64) ((double *)p)[i] = ref[i];
        else if (dt == DT_F32) ((float *)p)[i] = (float)ref[i];
        else {
            uint16_t h = f32_to_bf16((float)ref[i]);
            ((uint16_t *)p)[i] = h;
            ref[i] = bf16_to_f32(h);
        }
    }
    return p;
}

static double *random_doubles(int64_t n, unsigned *seed) {
    double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) p[i] = frand(seed);
    return p;
}

static void run_case(const Case *cs, DType dt, int line) {
    KConv2d g = geometry(cs);
    const int64_t nx = g.N * g.C * g.H * g.W, nw = g.O * g.C / g.groups * g.KH * g.KW, ny = g.N * g.O * g.OH * g.OW;
    unsigned seed = 7u + (unsigned)line;
    double *x = random_doubles(nx, &seed), *w = random_doubles(nw, &seed), *b = random_doubles(g.O, &seed);
    double *gy = random_doubles(ny, &seed);
    void *xd = to_dtype(x, nx, dt), *wd = to_dtype(w, nw, dt), *gyd = to_dtype(gy, ny, dt);
    DType adt = dt == DT_F64 ? DT_F64 : DT_F32;
    void *bd = to_dtype(b, g.O, adt);
    double *ry = malloc(sizeof(double) * (size_t)ny), *rgx = malloc(sizeof(double) * (size_t)nx);
    double *rgw = malloc(sizeof(double) * (size_t)nw), *rgb = malloc(sizeof(double) * (size_t)g.O);
    ref_conv(&g, x, w, b, ry, gy, rgx, rgw, rgb);
    void *y = malloc((size_t)ny * 8), *gx = malloc((size_t)nx * 8), *gw = malloc((size_t)nw * 8), *gb = malloc((size_t)g.O * 8);
    memset(gw, 0x7f, (size_t)nw * 8); /* garbage: the kernels must overwrite */
    memset(gb, 0x7f, (size_t)g.O * 8);
    int rc = k_conv2d_fwd(dt, &g, xd, wd, bd, y) | k_conv2d_bwd(dt, &g, xd, wd, gyd, gx, gw, gb);
    const double tol = dt == DT_F64 ? 1e-12 : 1e-5;
    char what[200];
    snprintf(what, sizeof what, "case at line %d (%s): kernels returned %d", line, dt_name(dt), rc);
    check(rc == 0, what, line);
    const char *names[4] = {"forward", "input grad", "weight grad", "bias grad"};
    double errs[4] = {max_err(ry, y, adt, ny), max_err(rgx, gx, adt, nx), max_err(rgw, gw, adt, nw), max_err(rgb, gb, adt, g.O)};
    for (int k = 0; k < 4; k++) {
        snprintf(what, sizeof what, "case at line %d (%s) %s: relative error %.3g > %g", line, dt_name(dt),
                 names[k], errs[k], tol);
        check(errs[k] <= tol, what, line);
    }
    /* each gradient alone (separate code paths: no shared blocked gy, bias without weight) */
    memset(gx, 0x7f, (size_t)nx * 8), memset(gw, 0x7f, (size_t)nw * 8), memset(gb, 0x7f, (size_t)g.O * 8);
    rc = k_conv2d_bwd(dt, &g, xd, wd, gyd, gx, NULL, NULL) | k_conv2d_bwd(dt, &g, xd, wd, gyd, NULL, gw, NULL) |
         k_conv2d_bwd(dt, &g, xd, wd, gyd, NULL, NULL, gb);
    double alone[3] = {max_err(rgx, gx, adt, nx), max_err(rgw, gw, adt, nw), max_err(rgb, gb, adt, g.O)};
    snprintf(what, sizeof what, "case at line %d (%s) gradients one at a time: rc %d, errors %.3g %.3g %.3g", line,
             dt_name(dt), rc, alone[0], alone[1], alone[2]);
    check(rc == 0 && alone[0] <= tol && alone[1] <= tol && alone[2] <= tol, what, line);
    /* forward without bias: y - b */
    k_conv2d_fwd(dt, &g, xd, wd, NULL, y);
    for (int64_t i = 0; i < ny; i++) ry[i] -= b[(i / (g.OH * g.OW)) % g.O];
    snprintf(what, sizeof what, "case at line %d (%s) forward without bias", line, dt_name(dt));
    check(max_err(ry, y, adt, ny) <= tol, what, line);
    free(x), free(w), free(b), free(gy), free(xd), free(wd), free(gyd), free(bd);
    free(ry), free(rgx), free(rgw), free(rgb), free(y), free(gx), free(gw), free(gb);
}

#define CASE(dt, ...) run_case(&(Case){__VA_ARGS__}, dt, __LINE__)

static void test_conv(void) {
    const DType dts[4] = {DT_F32, DT_F64, DT_BF16, DT_F32};
    for (int k = 0; k < 4; k++) {
        DType dt = dts[k];
        k_conv2d_use_dnnl(k < 3); /* the last round: float32 without oneDNN's primitives */
        /*        N  C  H  W  O KH KW sh sw ph pw dh dw  g eh ew */
        CASE(dt, 2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0);
        CASE(dt, 2, 3, 7, 6, 4, 3, 2, 2, 1, 0, 1, 1, 1, 1, 0, 0);  /* stride, asymmetric kernel */
        CASE(dt, 1, 2, 9, 8, 3, 3, 3, 2, 3, 2, 1, 2, 1, 1, 0, 0);  /* stride 3, dilation, big padding */
        CASE(dt, 2, 4, 6, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2, 0, 0);  /* groups */
        CASE(dt, 2, 4, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4, 0, 0);  /* depthwise */
        CASE(dt, 2, 4, 5, 7, 6, 1, 1, 1, 1, 0, 0, 1, 1, 2, 0, 0);  /* 1x1 direct path */
        CASE(dt, 2, 3, 5, 7, 2, 1, 1, 2, 2, 0, 0, 1, 1, 1, 0, 0);  /* 1x1 strided */
        CASE(dt, 1, 2, 6, 6, 2, 2, 4, 1, 1, 0, 1, 1, 1, 1, 1, 1);  /* asymmetric "same" (extra bottom/right) */
        CASE(dt, 2, 1, 5, 5, 3, 5, 5, 1, 1, 0, 0, 1, 1, 1, 0, 0);  /* kernel = input */
        CASE(dt, 1, 2, 4, 4, 2, 2, 2, 1, 1, 3, 3, 3, 3, 1, 0, 0);  /* padding beyond the kernel reach */
        CASE(dt, 0, 2, 4, 4, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0);  /* empty batch */
        CASE(dt, 2, 8, 6, 5, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0);  /* 8+ channels: oneDNN's primitives */
        CASE(dt, 2, 16, 9, 8, 8, 3, 2, 2, 3, 2, 1, 2, 1, 2, 1, 0); /* ... strided, dilated, grouped, asymmetric */
        CASE(dt, 2, 8, 6, 6, 16, 3, 3, 1, 1, 1, 1, 1, 1, 8, 0, 0); /* depthwise with multiplier 2 */
        CASE(dt, 3, 8, 7, 7, 8, 3, 3, 2, 2, 1, 1, 1, 1, 8, 0, 0);  /* depthwise, stride 2 */
    }
    k_conv2d_use_dnnl(1);
    /* the threaded path (images over threads) and the single-image path */
    int prev = omp_get_max_threads();
    omp_set_num_threads(2);
    CASE(DT_F32, 5, 16, 16, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0);
    CASE(DT_F64, 5, 16, 12, 12, 16, 3, 3, 2, 2, 1, 1, 1, 1, 2, 0, 0);
    CASE(DT_F32, 1, 16, 24, 24, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0);
    k_conv2d_use_dnnl(0);
    CASE(DT_F32, 5, 16, 16, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0);
    k_conv2d_use_dnnl(1);
    omp_set_num_threads(prev);
}

/* ---------------- max pooling ---------------- */

typedef struct {
    int64_t NC, H, W, KH, KW, sh, sw, ph, pw, dh, dw, ceil;
} PoolCase;

static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int ceil_mode) {
    int64_t span = in + 2 * p - d * (k - 1) - 1;
    int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (ceil_mode && (o - 1) * s >= in + p) o--;
    return o;
}

static void run_pool(const PoolCase *pc, int line) {
    KPool2d g = {.NC = pc->NC, .H = pc->H, .W = pc->W, .KH = pc->KH, .KW = pc->KW, .sh = pc->sh, .sw = pc->sw,
                 .ph = pc->ph, .pw = pc->pw, .dh = pc->dh, .dw = pc->dw};
    g.OH = pool_out(g.H, g.KH, g.sh, g.ph, g.dh, (int)pc->ceil);
    g.OW = pool_out(g.W, g.KW, g.sw, g.pw, g.dw, (int)pc->ceil);
    const int64_t nx = g.NC * g.H * g.W, ny = g.NC * g.OH * g.OW;
    unsigned seed = 99u + (unsigned)line;
    double *x = random_doubles(nx, &seed), *gy = random_doubles(ny, &seed);
    x[nx / 2] = NAN; /* NaN propagates to every window that holds it */
    float *xf = to_dtype(x, nx, DT_F32), *gyf = to_dtype(gy, ny, DT_F32);
    float *yf = malloc(sizeof(float) * (size_t)ny), *gxf = malloc(sizeof(float) * (size_t)nx);
    double *yd = malloc(sizeof(double) * (size_t)ny), *gxd = malloc(sizeof(double) * (size_t)nx);
    double *rgx = calloc((size_t)nx, sizeof(double));
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)ny), *idxd = malloc(sizeof(int64_t) * (size_t)ny);
    uint8_t *code = malloc((size_t)ny), *coded = malloc((size_t)ny);
    float *gxf2 = malloc(sizeof(float) * (size_t)nx);
    double *gxd2 = malloc(sizeof(double) * (size_t)nx);
    k_max_pool2d_fwd_f32(&g, xf, yf, idx, code);
    k_max_pool2d_fwd_f64(&g, x, yd, idxd, coded);
    k_max_pool2d_bwd_f32(&g, gyf, idx, NULL, gxf);
    k_max_pool2d_bwd_f64(&g, gy, idxd, NULL, gxd);
    k_max_pool2d_bwd_f32(&g, gyf, NULL, code, gxf2); /* through the window codes */
    k_max_pool2d_bwd_f64(&g, gy, NULL, coded, gxd2);
    int ok = 1;
    for (int64_t pl = 0; pl < g.NC; pl++)
        for (int64_t oh = 0; oh < g.OH; oh++)
            for (int64_t ow = 0; ow < g.OW; ow++) {
                double best = -INFINITY;
                int64_t at = -1, o = (pl * g.OH + oh) * g.OW + ow;
                for (int64_t kh = 0; kh < g.KH; kh++)
                    for (int64_t kw = 0; kw < g.KW; kw++) {
                        int64_t ih = oh * g.sh - g.ph + kh * g.dh, iw = ow * g.sw - g.pw + kw * g.dw;
                        if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
                        double v = x[(pl * g.H + ih) * g.W + iw];
                        if (isnan(best)) continue; /* the first NaN is enough for the value */
                        if (at < 0 || isnan(v) || v > best) best = v, at = ih * g.W + iw;
                    }
                int same = isnan(best) ? isnan(yf[o]) && isnan(yd[o]) : yf[o] == (float)best && yd[o] == best;
                if (!isnan(best)) same = same && idx[o] == at && idxd[o] == at;
                else same = same && isnan(x[pl * g.H * g.W + idx[o]]) && isnan(x[pl * g.H * g.W + idxd[o]]);
                ok = ok && same && at >= 0;
                if (at >= 0) rgx[pl * g.H * g.W + idxd[o]] += gy[o];
                /* the window code names the same element as the index */
                int64_t kh = code[o] / g.KW, kw = code[o] % g.KW;
                int64_t ih = oh * g.sh - g.ph + kh * g.dh, iw = ow * g.sw - g.pw + kw * g.dw;
                ok = ok && code[o] == coded[o] && ih * g.W + iw == idx[o];
            }
    char what[160];
    snprintf(what, sizeof what, "max_pool case at line %d: values / indices", line);
    check(ok, what, line);
    ok = 1;
    for (int64_t i = 0; i < nx; i++) ok = ok && fabs(gxd[i] - rgx[i]) < 1e-12 && fabs(gxf[i] - rgx[i]) < 1e-5;
    snprintf(what, sizeof what, "max_pool case at line %d: backward through indices", line);
    check(ok, what, line);
    ok = 1;
    for (int64_t i = 0; i < nx; i++) ok = ok && gxd2[i] == gxd[i] && gxf2[i] == gxf[i];
    snprintf(what, sizeof what, "max_pool case at line %d: backward through window codes", line);
    check(ok, what, line);
    free(x), free(gy), free(xf), free(gyf), free(yf), free(gxf), free(yd), free(gxd), free(rgx), free(idx), free(idxd);
    free(code), free(coded), free(gxf2), free(gxd2);
}

#define POOL(...) run_pool(&(PoolCase){__VA_ARGS__}, __LINE__)

static void test_pool(void) {
    /*  NC  H  W KH KW sh sw ph pw dh dw ceil */
    POOL(3, 8, 8, 2, 2, 2, 2, 0, 0, 1, 1, 0);
    POOL(3, 6, 37, 2, 2, 2, 2, 0, 0, 1, 1, 0); /* 2x2 vector path (16 columns) and its tail */
    POOL(2, 7, 9, 3, 2, 2, 1, 1, 1, 1, 1, 0);
    POOL(2, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1, 1); /* ceil_mode */
    POOL(2, 8, 6, 2, 3, 3, 2, 0, 1, 2, 2, 1); /* dilation + ceil */
    POOL(1, 5, 5, 5, 5, 1, 1, 2, 2, 1, 1, 0); /* padding half the kernel */
}

/* ---------------- bench ---------------- */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); /* CPU time: steadier on a shared machine */
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void bench_layer(const char *name, const Case *cs) {
    KConv2d g = geometry(cs);
    const int64_t nx = g.N * g.C * g.H * g.W, nw = g.O * g.C / g.groups * g.KH * g.KW, ny = g.N * g.O * g.OH * g.OW;
    float *x = calloc((size_t)nx, 4), *w = calloc((size_t)nw, 4), *b = calloc((size_t)g.O, 4);
    float *y = calloc((size_t)ny, 4), *gx = calloc((size_t)nx, 4), *gw = calloc((size_t)nw, 4);
    for (int64_t i = 0; i < nx; i++) x[i] = (float)(i % 13) * 0.1f;
    for (int64_t i = 0; i < nw; i++) w[i] = (float)(i % 7) * 0.1f;
    const double flop = 2.0 * ny * (double)(g.C / g.groups * g.KH * g.KW);
    double best[4] = {1e9, 1e9, 1e9, 1e9};
    for (int r = 0; r < 20; r++) {
        double t0 = now();
        k_conv2d_fwd(DT_F32, &g, x, w, b, y);
        double t1 = now();
        k_conv2d_bwd(DT_F32, &g, x, w, y, gx, NULL, NULL);
        double t2 = now();
        k_conv2d_bwd(DT_F32, &g, x, w, y, NULL, gw, NULL);
        double t3 = now();
        k_conv2d_bwd(DT_F32, &g, x, w, y, NULL, gw, b);
        double t4 = now();
        double t[4] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3};
        for (int k = 0; k < 4; k++) best[k] = t[k] < best[k] ? t[k] : best[k];
    }
    printf("%-28s fwd %.3f ms (%.1f GFLOP/s)  bwd_data %.3f ms (%.1f)  bwd_weight %.3f ms (%.1f)  +bias %.3f ms\n", name,
           best[0] * 1e3, flop / best[0] / 1e9, best[1] * 1e3, flop / best[1] / 1e9, best[2] * 1e3,
           flop / best[2] / 1e9, best[3] * 1e3);
    free(x), free(w), free(b), free(y), free(gx), free(gw);
}

/* max_pool2d 2x2 / stride 2 over NC planes of n x n random values */
static void bench_pool(const char *name, int64_t NC, int64_t n) {
    KPool2d g = {.NC = NC, .H = n, .W = n, .OH = n / 2, .OW = n / 2, .KH = 2, .KW = 2, .sh = 2, .sw = 2, .dh = 1, .dw = 1};
    float *x = malloc(sizeof(float) * (size_t)(NC * n * n)), *y = malloc(sizeof(float) * (size_t)(NC * n * n / 4));
    uint8_t *code = malloc((size_t)(NC * n * n / 4));
    unsigned seed = 3;
    for (int64_t i = 0; i < NC * n * n; i++) x[i] = (float)frand(&seed); /* random: branches would mispredict */
    double bf = 1e9, bb = 1e9;
    for (int r = 0; r < 20; r++) {
        double t0 = now();
        k_max_pool2d_fwd_f32(&g, x, y, NULL, code); /* as in training: window codes */
        double t1 = now();
        k_max_pool2d_bwd_f32(&g, y, NULL, code, x);
        double t2 = now();
        bf = t1 - t0 < bf ? t1 - t0 : bf, bb = t2 - t1 < bb ? t2 - t1 : bb;
    }
    printf("%-28s fwd %.3f ms  bwd %.3f ms\n", name, bf * 1e3, bb * 1e3);
    free(x), free(y), free(code);
}

static void bench(void) {
    printf("threads %d (best of 20, thread CPU time)\n", omp_get_max_threads());
    for (int dnnl = 1; dnnl >= 0; dnnl--) {
        int prev = k_conv2d_use_dnnl(dnnl);
        printf("%s:\n", dnnl ? "default (oneDNN primitives where chosen)" : "im2col + GEMM only");
        bench_layer("conv1 64x1x28x28 -> 32, 3x3", &(Case){64, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0});
        bench_layer("conv2 64x32x14x14 -> 64, 3x3", &(Case){64, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0});
        bench_layer("conv 16x64x14x14 -> 64, 3x3", &(Case){16, 64, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0});
        bench_layer("depthwise 64x32x14x14, 3x3", &(Case){64, 32, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1, 1, 32, 0, 0});
        bench_layer("1x1 64x64x14x14 -> 64", &(Case){64, 64, 14, 14, 64, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0});
        k_conv2d_use_dnnl(prev);
    }
    bench_pool("max_pool 2x2 64x32x28x28", 64 * 32, 28);
    bench_pool("max_pool 2x2 64x64x14x14", 64 * 64, 14);
}

int main(int argc, char **argv) {
    test_conv();
    test_pool();
    if (argc > 1 && strcmp(argv[1], "bench") == 0) bench();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
