/* optim.h: multi-tensor optimizer steps and the total norm of a tensor list
 * (gradient clipping), for the Lua optimizers and any C embedder.
 *
 * One call updates a whole parameter group: every tensor is checked first
 * (float32/float64, cpu, gradient and state shapes), so a bad group raises
 * an error before anything changes. Parameters are updated in place outside
 * autograd and their storage version is bumped, as are the state tensors'.
 * A state slot given as NULL is created here (zeros; SGD's momentum buffer
 * takes the first step's direction, as in PyTorch) and handed back as a new
 * reference in the same slot (also when the call then fails: the caller owns
 * whatever was created). `who` names the optimizer in errors; parameter i is
 * called "parameter i+1". Parameters whose gradient slot is NULL are skipped. */
#ifndef ACCEL_OPTIM_H
#define ACCEL_OPTIM_H

#include "tensor.h"
#include "../kernels/kops.h"

/* bufs may be NULL when a->momentum == 0. */
int optim_sgd_step(const char *who, int n, Tensor **params, Tensor **grads, Tensor **bufs, const KSgdArgs *a);
/* max_exp_avg_sq is NULL without amsgrad; steps[i] is parameter i's step
 * count after the increment (a->step is ignored). */
int optim_adam_step(const char *who, int n, Tensor **params, Tensor **grads, Tensor **exp_avg, Tensor **exp_avg_sq,
                    Tensor **max_exp_avg_sq, const int64_t *steps, const KAdamArgs *a);
/* PyTorch's total norm of ts[0..n): the p-norm of the tensors' p-norms, for
 * p != 0 that of all elements taken together (p = INFINITY: max |x|, p =
 * -INFINITY: min |x|, p < 0: (sum |x|^p)^(1/p), no tensor may be empty);
 * p = 0: the number of tensors with a nonzero element. In double; any float
 * dtype. who names the op in errors. */
int optim_total_norm(const char *who, int n, Tensor **ts, double p, double *out);

#endif
