/* optim.c: multi-tensor optimizer steps (SGD, Adam/AdamW) and the total
 * norm of a tensor list, over the fused kernels of kernels/cpu/optim.c.
 * Validation first (nothing changes when a group is bad), then state
 * allocation, then one kernel call per parameter. */
#include "optim.h"
#include "autograd.h"
#include "backend/backend.h"
#include <math.h>
#include <stdio.h>

static bool same_shape(const Tensor *a, const Tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

static int check_param(const char *who, int id, const Tensor *p, const Tensor *g) {
    char d1[32], d2[32];
    if (!tensor_is_writable(p)) { /* an expanded view: the step would write one element twice */
        char op[96];
        snprintf(op, sizeof op, "%s: parameter %d", who, id);
        return tensor_check_writable(p, op);
    }
    if (p->dtype != DT_F32 && p->dtype != DT_F64)
        return accel_fail_int("%s: parameter %d is %s; optimizers update float32 or float64 parameters (keep float32 "
                              "master weights)", who, id, dtype_name(p->dtype));
    if (!device_same(p->device, g->device))
        return accel_fail_int("%s: parameter %d is on %s but its gradient is on %s", who, id,
                              device_str(p->device, d1, sizeof d1), device_str(g->device, d2, sizeof d2));
    if (!dtype_is_float(g->dtype))
        return accel_fail_int("%s: the gradient of parameter %d is %s; gradients must be floating point", who, id,
                              dtype_name(g->dtype));
    if (!same_shape(p, g))
        return accel_fail_int("%s: parameter %d has shape %s but its gradient has shape %s", who, id,
                              tensor_shape_str(p), tensor_shape_str(g));
    return 0;
}

/* A state tensor must look exactly like its parameter (it may come from a
 * loaded state dict). NULL is fine: it gets created. */
static int check_state(const char *who, int id, const char *name, const Tensor *p, const Tensor *s) {
    if (!s) return 0;
    if (!same_shape(p, s))
        return accel_fail_int("%s: state '%s' of parameter %d has shape %s but the parameter has shape %s", who, name, id,
                              tensor_shape_str(s), tensor_shape_str(p));
    if (!device_same(p->device, s->device)) { /* e.g. the model moved by model:to() after a step: move the optimizer's state too */
        char ds[32], dp[32];
        return accel_fail_int("%s: state '%s' of parameter %d is on %s but the parameter is on %s", who, name, id,
                              device_str(s->device, ds, sizeof ds), device_str(p->device, dp, sizeof dp));
    }
    if (s->dtype != p->dtype || !tensor_is_contiguous(s))
        return accel_fail_int("%s: state '%s' of parameter %d must be a contiguous %s tensor (got %s%s)", who, name, id, dtype_name(p->dtype), dtype_name(s->dtype),
                              tensor_is_contiguous(s) ? "" : ", not contiguous");
    return 0;
}

/* Creates the NULL slots of states[0..n) (for parameters with a gradient)
 * as zeros shaped like their parameter. */
static int alloc_states(int n, Tensor **params, Tensor **grads, Tensor **states) {
    for (int i = 0; i < n; i++)
        if (grads[i] && !states[i] &&
            !(states[i] = tensor_zeros(params[i]->shape, params[i]->ndim, params[i]->dtype, params[i]->device)))
            return -1;
    return 0;
}

/* The parameter's elements as a contiguous buffer (p itself when it is
 * contiguous) and the gradient as a contiguous tensor of p's dtype. */
static int prepare(Tensor *p, Tensor *g, Tensor **pc, Tensor **gc) {
    bool prev = ag_set_grad_enabled(false);
    Tensor *g2 = tensor_to_dtype(g, p->dtype);
    *gc = g2 ? tensor_contiguous(g2) : NULL;
    tensor_release(g2);
    *pc = *gc ? tensor_contiguous(p) : NULL;
    ag_set_grad_enabled(prev);
    if (*pc) return 0;
    tensor_release(*gc);
    return -1;
}

/* Writes a contiguous working copy back into p and releases the temporaries. */
static void finish(Tensor *p, Tensor *pc, Tensor *gc) {
    if (pc != p) tensor_copy_strided(p, pc);
    tensor_bump_version(p);
    tensor_release(pc);
    tensor_release(gc);
}

static void bump(Tensor *s) {
    if (s) tensor_bump_version(s);
}

int optim_sgd_step(const char *who, int n, Tensor **params, Tensor **grads, Tensor **bufs, const KSgdArgs *a) {
    const bool mom = a->momentum != 0;
    if (mom && !bufs) return accel_fail_int("%s: momentum buffers missing", who);
    for (int i = 0; i < n; i++) {
        if (!grads[i]) continue;
        if (check_param(who, i + 1, params[i], grads[i]) < 0) return -1;
        if (mom && check_state(who, i + 1, "momentum_buffer", params[i], bufs[i]) < 0) return -1;
    }
    for (int i = 0; i < n; i++) {
        if (!grads[i]) continue;
        Tensor *p = params[i], *pc, *gc, *buf = NULL;
        const bool init = mom && !bufs[i];
        if (init && !(bufs[i] = tensor_empty(p->shape, p->ndim, p->dtype, p->device))) return -1;
        if (mom) buf = bufs[i];
        if (prepare(p, grads[i], &pc, &gc) < 0) return -1;
        backend_for(p->device)->sgd(p->dtype, p->numel, tensor_data(pc), tensor_data(gc), buf ? tensor_data(buf) : NULL,
                                    init, a);
        finish(p, pc, gc);
        bump(buf);
    }
    return 0;
}

int optim_adam_step(const char *who, int n, Tensor **params, Tensor **grads, Tensor **exp_avg, Tensor **exp_avg_sq,
                    Tensor **max_exp_avg_sq, const int64_t *steps, const KAdamArgs *a) {
    for (int i = 0; i < n; i++) {
        if (!grads[i]) continue;
        if (check_param(who, i + 1, params[i], grads[i]) < 0 ||
            check_state(who, i + 1, "exp_avg", params[i], exp_avg[i]) < 0 ||
            check_state(who, i + 1, "exp_avg_sq", params[i], exp_avg_sq[i]) < 0 ||
            (max_exp_avg_sq && check_state(who, i + 1, "max_exp_avg_sq", params[i], max_exp_avg_sq[i]) < 0))
            return -1;
        if (steps[i] < 1) return accel_fail_int("%s: step count of parameter %d must be >= 1, got %lld", who, i + 1,
                                                (long long)steps[i]);
    }
    if (alloc_states(n, params, grads, exp_avg) < 0 || alloc_states(n, params, grads, exp_avg_sq) < 0 ||
        (max_exp_avg_sq && alloc_states(n, params, grads, max_exp_avg_sq) < 0))
        return -1;
    for (int i = 0; i < n; i++) {
        if (!grads[i]) continue;
        Tensor *p = params[i], *pc, *gc, *vmax = max_exp_avg_sq ? max_exp_avg_sq[i] : NULL;
        if (prepare(p, grads[i], &pc, &gc) < 0) return -1;
        KAdamArgs ai = *a;
        ai.step = steps[i];
        backend_for(p->device)->adam(p->dtype, p->numel, tensor_data(pc), tensor_data(gc), tensor_data(exp_avg[i]),
                                     tensor_data(exp_avg_sq[i]), vmax ? tensor_data(vmax) : NULL, &ai);
        finish(p, pc, gc);
        bump(exp_avg[i]);
        bump(exp_avg_sq[i]);
        bump(vmax);
    }
    return 0;
}

/* sum |x|^p (or max / min |x|) of one tensor, through a contiguous f32/f64 copy
 * when it is neither. */
static int norm_one(Tensor *t, double p, double *out) {
    DType cdt = t->dtype == DT_F64 ? DT_F64 : DT_F32;
    bool prev = ag_set_grad_enabled(false);
    Tensor *c1 = tensor_to_dtype(t, cdt), *c = c1 ? tensor_contiguous(c1) : NULL;
    ag_set_grad_enabled(prev);
    tensor_release(c1);
    if (!c) return -1;
    *out = backend_for(c->device)->norm_pow(cdt, c->numel, tensor_data(c), p);
    tensor_release(c);
    return 0;
}

/* s = sum |x|^p of a tensor of dtype dt, its p-norm rounded to the dtype
 * it is computed in (float32 unless dt is float64) as PyTorch rounds each
 * tensor's norm before the norm of the norms; returned as its p-th power
 * (p < 0 too: an element 0 makes s inf, the norm 0 and the result inf). */
static double rounded_pow(DType dt, double s, double p) {
    if (dt == DT_F64 || p == 0 || isinf(p)) return s; /* a count, a max or a min: exact already */
    double norm = (float)(p == 1 ? s : p == 2 ? sqrt(s) : pow(s, 1 / p));
    return p == 1 ? norm : p == 2 ? norm * norm : pow(norm, p);
}

/* Why ts cannot have a p-norm (who names the op), 0 when they can: a
 * tensor that is not floating point; for p < 0, an empty one (as
 * PyTorch's vector_norm: a min or a sum of |x|^p has no identity then). */
static int total_norm_check(const char *who, int n, Tensor **ts, double p) {
    if (p != p) return accel_fail_int("%s: norm_type must be a number, got nan", who);
    for (int i = 0; i < n; i++) {
        if (!dtype_is_float(ts[i]->dtype))
            return accel_fail_int("%s: tensor %d is %s; norms need floating point tensors", who, i + 1,
                                  dtype_name(ts[i]->dtype));
        if (p < 0 && ts[i]->numel == 0)
            return accel_fail_int("%s: cannot compute the %g norm of an empty tensor (a negative norm_type has no "
                                  "identity, as in PyTorch)", who, p);
    }
    return 0;
}

int optim_total_norm(const char *who, int n, Tensor **ts, double p, double *out) {
    if (total_norm_check(who, n, ts, p)) return -1;
    *out = 0; /* no tensors: 0, as PyTorch (for p < 0 too) */
    if (n == 0) return 0;
    double acc = knorm_identity(p);
    for (int i = 0; i < n; i++) {
        double s;
        if (norm_one(ts[i], p, &s) < 0) return -1;
        s = rounded_pow(ts[i]->dtype, s, p);
        /* p = 0: PyTorch's 0-norm of the tensors' norms, a count of tensors */
        acc = knorm_combine(acc, p == 0 ? s != 0 : s, p);
    }
    *out = isinf(p) || p == 0 ? acc : p == 1 ? acc : p == 2 ? sqrt(acc) : pow(acc, 1 / p);
    return 0;
}
