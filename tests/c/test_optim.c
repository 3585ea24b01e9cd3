/* test_optim.c: C tests of the optimizer kernels (kernels/cpu/optim.c) and
 * the multi-tensor steps of core/optim.c. The kernels are compared with
 * float64 loops written here from PyTorch's update formulas (float64
 * kernels must agree to the bit: same operations, same fused multiply-adds;
 * float32 to float32 rounding); results must not depend on the thread count
 * or on whether an element falls in the vector loop or its scalar tail. The
 * core steps are checked for state creation, version bumps, non-contiguous
 * parameters and errors that leave everything untouched.
 * Last line "N passed, N failed". */
#include "core/optim.h"
#include "core/ops.h"
#include "kernels/cpu/kernels.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_pass, n_fail;

#define CHECK(cond) check(!!(cond), __LINE__, #cond)

static void check(int ok, int line, const char *what) {
    if (ok) {
        n_pass++;
        return;
    }
    n_fail++;
    printf("test_optim.c:%d: FAIL %s\n", line, what);
}

/* got (f32 or f64 by `f32`) vs want: |d| <= rtol max(|want|, 0.01) (rtol 0:
 * bitwise); the floor covers values that cancel to near zero. */
static void check_vec(int line, const char *what, int f32, const void *got, const double *want, int64_t n,
                      double rtol) {
    for (int64_t i = 0; i < n; i++) {
        double g = f32 ? ((const float *)got)[i] : ((const double *)got)[i];
        int ok = rtol == 0 ? g == want[i] : fabs(g - want[i]) <= rtol * fmax(fabs(want[i]), 0.01);
        if (!ok) {
            n_fail++;
            printf("test_optim.c:%d: FAIL %s: [%lld] got %.17g want %.17g\n", line, what, (long long)i, g, want[i]);
            return;
        }
    }
    n_pass++;
}

static unsigned seed = 12345;
static double uni(double lo, double hi) {
    seed = seed * 1103515245u + 12345u;
    return lo + (hi - lo) * ((seed >> 8) & 0xffffff) / 16777216.0;
}

#define NEW(T, n) ((T *)calloc((size_t)(n), sizeof(T)))

/* ---------------- SGD ---------------- */

/* PyTorch's SGD on doubles (one element), the reference */
static void sgd_ref(double *p, double g, double *b, int first, const KSgdArgs *a) {
    double d = a->maximize ? -g : g;
    if (a->weight_decay != 0) d = fma(*p, a->weight_decay, d);
    if (a->momentum != 0) {
        *b = first ? d : fma(d, 1 - a->dampening, *b * a->momentum);
        d = a->nesterov ? fma(*b, a->momentum, d) : *b;
    }
    *p = fma(d, -a->lr, *p);
}

static void sgd_case(int64_t n, KSgdArgs a, const char *label) {
    double *p = NEW(double, n), *b = NEW(double, n), *g = NEW(double, n);
    double *rp = NEW(double, n), *rb = NEW(double, n);
    float *pf = NEW(float, n), *bf = NEW(float, n), *gf = NEW(float, n);
    double *rpf = NEW(double, n), *rbf = NEW(double, n); /* f32 reference, in double */
    for (int64_t i = 0; i < n; i++) rp[i] = p[i] = uni(-1, 1), rpf[i] = pf[i] = (float)p[i];
    for (int step = 0; step < 3; step++) {
        for (int64_t i = 0; i < n; i++) g[i] = uni(-1, 1), gf[i] = (float)g[i];
        k_sgd_f64(n, p, g, a.momentum != 0 ? b : NULL, step == 0, &a);
        k_sgd_f32(n, pf, gf, a.momentum != 0 ? bf : NULL, step == 0, &a);
        for (int64_t i = 0; i < n; i++) {
            sgd_ref(rp + i, g[i], rb + i, step == 0, &a);
            sgd_ref(rpf + i, gf[i], rbf + i, step == 0, &a);
        }
    }
    char what[160];
    snprintf(what, sizeof what, "sgd %s n=%lld f64", label, (long long)n);
    check_vec(__LINE__, what, 0, p, rp, n, 0);
    if (a.momentum != 0) check_vec(__LINE__, what, 0, b, rb, n, 0);
    snprintf(what, sizeof what, "sgd %s n=%lld f32", label, (long long)n);
    check_vec(__LINE__, what, 1, pf, rpf, n, 1e-5);
    free(p), free(b), free(g), free(rp), free(rb), free(pf), free(bf), free(gf), free(rpf), free(rbf);
}

static void test_sgd(void) {
    const int64_t sizes[] = {13, 1000, 100003}; /* tail only, serial, parallel chunks */
    for (int k = 0; k < 3; k++) {
        int64_t n = sizes[k];
        sgd_case(n, (KSgdArgs){.lr = 0.1}, "plain");
        sgd_case(n, (KSgdArgs){.lr = 0.1, .momentum = 0.9, .dampening = 0.1}, "momentum");
        sgd_case(n, (KSgdArgs){.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = 1}, "nesterov");
        sgd_case(n, (KSgdArgs){.lr = 0.1, .momentum = 0.5, .weight_decay = 0.1, .maximize = 1}, "maximize");
    }
}

/* ---------------- Adam / AdamW ---------------- */

static void adam_ref(double *p, double g, double *m, double *v, double *vmax, const KAdamArgs *a) {
    const double bc1 = 1 - pow(a->beta1, (double)a->step), bc2 = 1 - pow(a->beta2, (double)a->step);
    if (a->maximize) g = -g;
    if (a->decoupled) *p = *p * (1 - a->lr * a->weight_decay);
    else if (a->weight_decay != 0) g = fma(*p, a->weight_decay, g);
    *m = fma(g, 1 - a->beta1, *m * a->beta1);
    *v = fma((1 - a->beta2) * g, g, *v * a->beta2);
    double vd = *v;
    if (vmax) *vmax = vd = *vmax > *v ? *vmax : *v;
    *p = *p + -(a->lr / bc1) * *m / (sqrt(vd) / sqrt(bc2) + a->eps);
}

static void adam_case(int64_t n, KAdamArgs a, int ams, const char *label) {
    double *p = NEW(double, n), *g = NEW(double, n), *m = NEW(double, n), *v = NEW(double, n), *x = NEW(double, n);
    double *rp = NEW(double, n), *rm = NEW(double, n), *rv = NEW(double, n), *rx = NEW(double, n);
    float *pf = NEW(float, n), *gf = NEW(float, n), *mf = NEW(float, n), *vf = NEW(float, n), *xf = NEW(float, n);
    double *rpf = NEW(double, n), *rmf = NEW(double, n), *rvf = NEW(double, n), *rxf = NEW(double, n);
    for (int64_t i = 0; i < n; i++) rp[i] = p[i] = uni(-1, 1), rpf[i] = pf[i] = (float)p[i];
    for (int step = 1; step <= 4; step++) {
        a.step = step;
        double scale = step == 3 ? 0.01 : 1; /* shrinking gradients: amsgrad's max matters */
        for (int64_t i = 0; i < n; i++) g[i] = uni(-1, 1) * scale, gf[i] = (float)g[i];
        k_adam_f64(n, p, g, m, v, ams ? x : NULL, &a);
        k_adam_f32(n, pf, gf, mf, vf, ams ? xf : NULL, &a);
        for (int64_t i = 0; i < n; i++) {
            adam_ref(rp + i, g[i], rm + i, rv + i, ams ? rx + i : NULL, &a);
            adam_ref(rpf + i, gf[i], rmf + i, rvf + i, ams ? rxf + i : NULL, &a);
        }
    }
    char what[160];
    snprintf(what, sizeof what, "adam %s n=%lld f64", label, (long long)n);
    check_vec(__LINE__, what, 0, p, rp, n, 0);
    check_vec(__LINE__, what, 0, m, rm, n, 0);
    check_vec(__LINE__, what, 0, v, rv, n, 0);
    if (ams) check_vec(__LINE__, what, 0, x, rx, n, 0);
    snprintf(what, sizeof what, "adam %s n=%lld f32", label, (long long)n);
    check_vec(__LINE__, what, 1, pf, rpf, n, 1e-5);
    check_vec(__LINE__, what, 1, mf, rmf, n, 1e-5);
    check_vec(__LINE__, what, 1, vf, rvf, n, 1e-5);
    free(p), free(g), free(m), free(v), free(x), free(rp), free(rm), free(rv), free(rx);
    free(pf), free(gf), free(mf), free(vf), free(xf), free(rpf), free(rmf), free(rvf), free(rxf);
}

static void test_adam(void) {
    const int64_t sizes[] = {13, 1000, 100003};
    for (int k = 0; k < 3; k++) {
        int64_t n = sizes[k];
        KAdamArgs adam = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
        adam_case(n, adam, 0, "plain");
        KAdamArgs l2 = adam;
        l2.weight_decay = 0.1, l2.beta1 = 0.8, l2.beta2 = 0.99;
        adam_case(n, l2, 1, "l2 amsgrad");
        KAdamArgs w = adam;
        w.weight_decay = 0.01, w.decoupled = 1;
        adam_case(n, w, 0, "adamw");
        w.maximize = 1, w.eps = 1e-6;
        adam_case(n, w, 1, "adamw amsgrad maximize");
    }
}

/* An element gives the same result in the vector loop and in the tail, and
 * the result does not depend on the number of threads. */
static void test_adam_consistency(void) {
    const int64_t n = 3 * 8192 * 5 + 7; /* several chunks, a tail in the last */
    float *p[2], *m[2], *v[2], *x[2], *g = NEW(float, n);
    for (int64_t i = 0; i < n; i++) g[i] = (float)uni(-1, 1);
    g[n - 1] = g[0]; /* element 0 is in a vector, n-1 in the scalar tail */
    KAdamArgs a = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1, .step = 1};
    int threads = kernel_get_threads();
    for (int r = 0; r < 2; r++) {
        p[r] = NEW(float, n), m[r] = NEW(float, n), v[r] = NEW(float, n), x[r] = NEW(float, n);
        for (int64_t i = 0; i < n; i++) p[r][i] = 0.5f;
        kernel_set_threads(r == 0 ? 1 : 0);
        for (int s = 1; s <= 3; s++) {
            a.step = s;
            k_adam_f32(n, p[r], g, m[r], v[r], x[r], &a);
        }
    }
    kernel_set_threads(threads);
    CHECK(memcmp(p[0], p[1], (size_t)n * sizeof(float)) == 0);
    CHECK(memcmp(v[0], v[1], (size_t)n * sizeof(float)) == 0);
    CHECK(p[0][0] == p[0][n - 1] && m[0][0] == m[0][n - 1] && v[0][0] == v[0][n - 1]);
    double d = 1e9;
    k_sgd_f32(0, NULL, NULL, NULL, 1, &(KSgdArgs){.lr = 1}); /* n = 0: nothing touched */
    k_adam_f64(0, &d, &d, &d, &d, NULL, &a);
    CHECK(d == 1e9);
    for (int r = 0; r < 2; r++) free(p[r]), free(m[r]), free(v[r]), free(x[r]);
    free(g);
    /* the old AdamW entry point is k_adam_f32 with decoupled decay */
    float p1[9], p2[9], m1[9] = {0}, m2[9] = {0}, v1[9] = {0}, v2[9] = {0}, g9[9];
    for (int i = 0; i < 9; i++) p1[i] = p2[i] = (float)uni(-1, 1), g9[i] = (float)uni(-1, 1);
    k_adamw_f32(9, p1, g9, m1, v1, 1e-2, 0.9, 0.999, 1e-8, 0.1, 1);
    k_adam_f32(9, p2, g9, m2, v2, NULL,
               &(KAdamArgs){.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1,
                            .decoupled = 1, .step = 1});
    CHECK(memcmp(p1, p2, sizeof p1) == 0);
}

/* ---------------- norms ---------------- */

static void test_norm(void) {
    const int64_t n = 200003; /* several partial chunks */
    float *xf = NEW(float, n);
    double *xd = NEW(double, n);
    for (int64_t i = 0; i < n; i++) xd[i] = uni(-2, 2), xf[i] = (float)xd[i];
    xd[5] = xf[5] = 0;
    const double ps[] = {2, 1, 0, INFINITY, 3, -INFINITY};
    for (int k = 0; k < 6; k++) {
        double p = ps[k], want = p == -INFINITY ? INFINITY : 0;
        for (int64_t i = 0; i < n; i++) {
            double a = fabs((double)xf[i]);
            if (p == -INFINITY) want = a < want ? a : want;
            else if (isinf(p)) want = a > want ? a : want;
            else if (p == 0) want += a != 0;
            else want += pow(a, p);
        }
        double got = k_norm_pow_f32(n, xf, p);
        check_vec(__LINE__, "norm_pow f32", 0, &got, &want, 1, 1e-12);
        int threads = kernel_get_threads();
        kernel_set_threads(1);
        double one = k_norm_pow_f32(n, xf, p);
        kernel_set_threads(threads);
        CHECK(one == got);
    }
    double want2 = 0, want3 = 0, least = INFINITY;
    for (int64_t i = 0; i < 1000; i++) want2 += xd[i] * xd[i];
    for (int64_t i = 6; i < 1006; i++) want3 += pow(fabs(xd[i]), -1.5), least = fmin(least, fabs(xd[i]));
    double got2 = k_norm_pow_f64(1000, xd, 2), got3 = k_norm_pow_f64(1000, xd + 6, -1.5);
    check_vec(__LINE__, "norm_pow f64", 0, &got2, &want2, 1, 1e-13);
    check_vec(__LINE__, "norm_pow f64 p = -1.5", 0, &got3, &want3, 1, 1e-13);
    CHECK(k_norm_pow_f64(1000, xd + 6, -INFINITY) == least);
    CHECK(k_norm_pow_f32(n, xf, -1) == INFINITY); /* xf[5] is 0 */
    xf[n / 2] = NAN;
    CHECK(isnan(k_norm_pow_f32(n, xf, 2)));
    CHECK(isnan(k_norm_pow_f32(n, xf, INFINITY)));
    CHECK(isnan(k_norm_pow_f32(n, xf, -INFINITY)));
    CHECK(k_norm_pow_f32(0, xf, 2) == 0);
    CHECK(k_norm_pow_f32(0, xf, -INFINITY) == INFINITY);
    free(xf), free(xd);
}

/* ---------------- core multi-tensor steps ---------------- */

static Tensor *vec(int64_t n, DType dt, double v0, double dv) {
    Tensor *t = tensor_empty(&n, 1, dt, (Device){DEV_CPU, 0});
    for (int64_t i = 0; i < n; i++) {
        if (dt == DT_F32) ((float *)tensor_data(t))[i] = (float)(v0 + dv * i);
        else if (dt == DT_F64) ((double *)tensor_data(t))[i] = v0 + dv * i;
        else ((uint16_t *)tensor_data(t))[i] = f32_to_bf16((float)(v0 + dv * i));
    }
    return t;
}

static void test_core_steps(void) {
    Tensor *p = vec(4, DT_F32, 1, 1), *q = vec(3, DT_F64, 0, 0), *g = vec(4, DT_F32, 1, 0), *h = vec(3, DT_F64, 1, 0);
    Tensor *params[2] = {p, q}, *grads[2] = {g, NULL}, *m[2] = {NULL, NULL}, *v[2] = {NULL, NULL};
    int64_t steps[2] = {1, 1}, ver = p->storage->version;
    KAdamArgs a = {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    CHECK(optim_adam_step("Adam", 2, params, grads, m, v, NULL, steps, &a) == 0);
    /* step 1 with g = 1: p -= lr * 1 / (1 + eps) */
    CHECK(fabs(((float *)tensor_data(p))[2] - (3 - 0.1)) < 1e-6);
    CHECK(m[0] && v[0] && !m[1] && !v[1]); /* created for p only; q had no gradient */
    CHECK(m[0]->dtype == DT_F32 && m[0]->numel == 4 && fabs(((float *)tensor_data(m[0]))[0] - 0.1) < 1e-7);
    CHECK(p->storage->version > ver);
    CHECK(((double *)tensor_data(q))[0] == 0);

    /* errors: nothing changes */
    float before = ((float *)tensor_data(p))[0];
    Tensor *bad = vec(4, DT_BF16, 0, 0), *gb = vec(4, DT_BF16, 1, 0);
    Tensor *p2[2] = {p, bad}, *g2[2] = {g, gb}, *m2[2] = {m[0], NULL}, *v2[2] = {v[0], NULL};
    int64_t st2[2] = {2, 1};
    CHECK(optim_adam_step("Adam", 2, p2, g2, m2, v2, NULL, st2, &a) < 0);
    CHECK(strstr(accel_last_error(), "Adam: parameter 2 is bfloat16") != NULL);
    CHECK(((float *)tensor_data(p))[0] == before && !m2[1]);
    Tensor *g3[2] = {g, h}, *p3[2] = {p, vec(2, DT_F64, 0, 0)};
    CHECK(optim_adam_step("AdamW", 2, p3, g3, m2, v2, NULL, st2, &a) < 0);
    CHECK(strstr(accel_last_error(), "AdamW: parameter 2 has shape [2] but its gradient has shape [3]") != NULL);
    Tensor *wrong = vec(3, DT_F32, 0, 0), *m4[1] = {wrong}, *v4[1] = {v[0]};
    CHECK(optim_adam_step("Adam", 1, params, grads, m4, v4, NULL, steps, &a) < 0);
    CHECK(strstr(accel_last_error(), "state 'exp_avg' of parameter 1 has shape [3] but the parameter has shape [4]"));
    CHECK(((float *)tensor_data(p))[0] == before);
    tensor_release(p3[1]);

    /* SGD: non-contiguous parameter, momentum buffer created as the first direction */
    int64_t shape[2] = {2, 3};
    Tensor *base = tensor_zeros(shape, 2, DT_F64, (Device){DEV_CPU, 0});
    Tensor *t = tensor_transpose(base, 0, 1), *gt = vec(6, DT_F64, 1, 1);
    Tensor *gv = tensor_view(gt, (int64_t[]){3, 2}, 2);
    Tensor *sp[1] = {t}, *sg[1] = {gv}, *sb[1] = {NULL};
    KSgdArgs s = {.lr = 0.5, .momentum = 0.9};
    CHECK(!tensor_is_contiguous(t));
    CHECK(optim_sgd_step("SGD", 1, sp, sg, sb, &s) == 0);
    /* t[i][j] = -0.5 * (1 + 2i + j), written through to base[j][i] */
    const double *bd = tensor_data(base);
    CHECK(bd[0] == -0.5 && bd[1] == -1.5 && bd[3] == -1.0 && bd[5] == -3.0);
    CHECK(sb[0] && ((double *)tensor_data(sb[0]))[5] == 6);
    CHECK(base->storage->version > 0);

    /* total norm over mixed dtypes: 3-4-5 and 12 -> 13 */
    Tensor *n1 = vec(2, DT_F32, 3, 1), *n2 = vec(1, DT_BF16, 12, 0), *ns[2] = {n1, n2};
    double out = 0;
    CHECK(optim_total_norm("t", 2, ns, 2, &out) == 0 && out == 13);
    CHECK(optim_total_norm("t", 2, ns, INFINITY, &out) == 0 && out == 12);
    CHECK(optim_total_norm("t", 2, ns, 1, &out) == 0 && out == 19);
    /* negative orders: min |x| = 3; 1 / (1/3 + 1/4 + 1/12) = 1.5 (the first norm, 12/7, rounded to float32) */
    CHECK(optim_total_norm("t", 2, ns, -INFINITY, &out) == 0 && out == 3);
    CHECK(optim_total_norm("t", 2, ns, -1, &out) == 0 && fabs(out - 1.5) < 1e-6);
    CHECK(optim_total_norm("t", 0, ns, -1, &out) == 0 && out == 0);
    CHECK(optim_total_norm("t", 2, ns, NAN, &out) < 0 && strstr(accel_last_error(), "t: norm_type must be a number"));

    Tensor *all[] = {p, q, g, h, m[0], v[0], bad, gb, wrong, base, t, gt, gv, sb[0], n1, n2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tensor_release(all[i]);
}

int main(void) {
    test_sgd();
    test_adam();
    test_adam_consistency();
    test_norm();
    test_core_steps();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail != 0;
}
