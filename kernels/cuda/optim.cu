/* optim.cu: fused SGD and Adam / AdamW over flat float32 buffers, one thread
 * per element, the exact operation sequence of kernels/cpu/optim.c (same
 * fused multiply-adds, scalars formed in double on the host and rounded
 * once to float32), so a GPU step equals the CPU step bit for bit where
 * division and sqrt round correctly (nvcc's default -prec-div=true
 * -prec-sqrt=true; fmaf is exact on both). A product the CPU rounds before
 * adding it is written __fmul_rn, never fused into the addition whatever
 * the build's -fmad (the Makefile's -fmad=false; nvcc's default fuses). */
#include "common.cuh"

typedef struct {
    float wd, mom, damp1, neg_lr;
    int use_wd, maximize, nesterov, has_buf, init;
} SgdK;

__global__ void sgd_kernel(int64_t n, float *p, const float *g, float *buf, SgdK k) {
    KC_GRID_STRIDE(i, n) {
        float d = k.maximize ? -g[i] : g[i];
        if (k.use_wd) d = fmaf(p[i], k.wd, d);
        if (k.has_buf) {
            const float b = k.init ? d : fmaf(d, k.damp1, buf[i] * k.mom);
            buf[i] = b;
            d = k.nesterov ? fmaf(b, k.mom, d) : b;
        }
        p[i] = fmaf(d, k.neg_lr, p[i]);
    }
}

extern "C" int kc_sgd_f32(int64_t n, float *p, const float *g, float *buf, int buf_init, const KSgdArgs *a,
                          void *stream) {
    if (n <= 0) return 0;
    const SgdK k = {(float)a->weight_decay, (float)a->momentum, (float)(1 - a->dampening), (float)(-a->lr),
                    a->weight_decay != 0, a->maximize, a->nesterov, a->momentum != 0 && buf, buf_init};
    sgd_kernel<<<kc_blocks(n), KC_THREADS, 0, kc_stream(stream)>>>(n, p, g, buf, k);
    cuda_check_launch();
    return 0;
}

typedef struct {
    float gsign, l2, decay, b1, one_b1, b2, one_b2, neg_step_size, sqrt_bc2, eps;
} AdamK;

__global__ void adam_kernel(int64_t n, float *p, const float *g, float *m, float *v, float *vmax, AdamK c) {
    KC_GRID_STRIDE(i, n) {
        const float pi = __fmul_rn(p[i], c.decay); /* rounded as the CPU's: never fused into the add below */
        float gi = g[i] * c.gsign;
        if (c.l2 != 0) gi = fmaf(p[i], c.l2, gi);
        const float mi = fmaf(gi, c.one_b1, m[i] * c.b1);
        const float vi = fmaf(c.one_b2 * gi, gi, v[i] * c.b2);
        m[i] = mi;
        v[i] = vi;
        float vd = vi;
        if (vmax) vmax[i] = vd = vmax[i] > vi ? vmax[i] : vi;
        p[i] = pi + c.neg_step_size * mi / (sqrtf(vd) / c.sqrt_bc2 + c.eps);
    }
}

extern "C" int kc_adam_f32(int64_t n, float *p, const float *g, float *m, float *v, float *vmax, const KAdamArgs *a,
                           void *stream) {
    if (n <= 0) return 0;
    const double bc1 = 1 - pow(a->beta1, (double)a->step), bc2 = 1 - pow(a->beta2, (double)a->step);
    const AdamK c = {(float)(a->maximize ? -1 : 1), (float)(a->decoupled ? 0 : a->weight_decay),
                     (float)(a->decoupled ? 1 - a->lr * a->weight_decay : 1), (float)a->beta1, (float)(1 - a->beta1),
                     (float)a->beta2, (float)(1 - a->beta2), (float)(-(a->lr / bc1)), (float)sqrt(bc2),
                     (float)a->eps};
    adam_kernel<<<kc_blocks(n), KC_THREADS, 0, kc_stream(stream)>>>(n, p, g, m, v, vmax, c);
    cuda_check_launch();
    return 0;
}
