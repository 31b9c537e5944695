/* train.h: the arithmetic of training that is not the network: losses with their gradients, and
 * optimiser updates, each computed as PyTorch computes it in float32 on the CPU (the same
 * operations in the same order; a Python float meeting a float32 tensor is rounded to float32
 * first). Pure functions over caller-owned arrays: nothing here allocates, prints or exits. */
#ifndef SNN_RUNTIME_TRAIN_H
#define SNN_RUNTIME_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    RT_LOSS_MSE, /* F.mse_loss(out, one_hot(label)), mean over batch x classes (SpikingJelly's,
                    on firing rates) */
    RT_LOSS_CE,  /* F.cross_entropy(out, label), mean over the batch (logits: counts, membranes);
                    snnTorch's ce_count_loss on spike counts */
    /* snnTorch's (snntorch.functional), on outputs of every step ([n][T][k]) or counts: */
    RT_LOSS_CE_RATE,      /* ce_rate_loss: the mean over steps of each step's cross-entropy */
    RT_LOSS_MSE_COUNT,    /* mse_count_loss: MSE of the counts to int(T on) / int(T off), / T */
    RT_LOSS_MSE_MEMBRANE, /* mse_membrane_loss: the mean over steps of each step's MSE to on/off */
    RT_LOSS_COUNT_
} RtLoss;

/* A loss with what snnTorch's need: T (the steps of a per-step output) and the targets
 * (mse_count: the correct and incorrect rates; mse_membrane: the on and off targets) */
typedef struct RtLossSpec {
    RtLoss kind;
    int T;
    double on, off;
} RtLossSpec;

/* whether the loss reads an output of every step ([B][T][K]) */
bool rt_loss_per_step(RtLoss kind);
/* rt_loss for any spec; per-step outputs are [n][T][k] (grad too), and a row's class is the
 * argmax of its sum over steps */
double rt_loss_spec(const RtLossSpec *s, const float *out, const float *labels, int64_t n,
                    int64_t k, int64_t batch, float *grad, int64_t *correct);

/* The loss of rows out[0..n) ([n][k] scores, labels[i] in 0..k-1) of a batch of `batch` rows:
 * returns the sum over these rows of their share of the batch's mean loss (so the shares of a
 * batch's groups of rows add up to its loss), writes dLoss/dout into grad ([n][k]) and adds the
 * rows whose first maximum is the label to *correct. A label outside 0..k-1 gives NaN. */
double rt_loss(RtLoss kind, const float *out, const float *labels, int64_t n, int64_t k,
               int64_t batch, float *grad, int64_t *correct);

typedef enum { RT_OPT_SGD, RT_OPT_ADAM, RT_OPT_ADAMW } RtOptimizer;

typedef struct RtOptConfig {
    RtOptimizer kind;
    double lr;
    double momentum, dampening; /* SGD */
    bool nesterov;              /* SGD: needs momentum > 0 and dampening 0 */
    double beta1, beta2, eps;   /* Adam, AdamW */
    double weight_decay;        /* L2 (SGD, Adam) or decoupled (AdamW) */
} RtOptConfig;

/* PyTorch's defaults for kind (SGD lr 1e-3; Adam lr 1e-3, betas 0.9/0.999, eps 1e-8; AdamW the
 * same with weight decay 1e-2) */
RtOptConfig rt_opt_defaults(RtOptimizer kind);

/* One update of n parameters p with gradients g: m and v the optimiser's state for them (SGD's
 * momentum buffer in m, v unused; Adam's exp_avg and exp_avg_sq), zeroed before the first step;
 * step: the update's number, from 1 (the same for every tensor of a step). Like torch.optim's
 * single-tensor (for-loop) implementation. Elementwise: any split of [0, n) into calls (threads)
 * gives the same bits. Vectorised for AVX-512 or AVX2+FMA where the CPU has them, the same bits
 * as rt_opt_step_baseline (the code for the baseline ISA; tests/unit/test_opt compares them). */
void rt_opt_step(const RtOptConfig *c, int64_t step, float *p, const float *g, float *m, float *v,
                 int64_t n);
void rt_opt_step_baseline(const RtOptConfig *c, int64_t step, float *p, const float *g, float *m,
                          float *v, int64_t n);

/* The learning rate of epoch e (from 0) of E under a cosine schedule (CosineAnnealingLR with
 * T_max = E, eta_min 0, stepped per epoch), computed as PyTorch's recursive form does */
double rt_cosine_lr(double lr0, int64_t e, int64_t E);
/* ... under a step schedule (StepLR: times gamma every step_size epochs), as PyTorch's recursive
 * form (one multiplication per decay, in double) */
double rt_step_lr(double lr0, int64_t e, int64_t step_size, double gamma);
/* torch.nn.utils.clip_grad_norm_ over the n[k] floats of g[k], k < ng: the global 2-norm (each
 * tensor's norm, then the norm of those, in double), and where max_norm / (norm + 1e-6) is
 * below 1 every gradient multiplied by it (rounded to float); returns the norm before */
double rt_clip_grad_norm(float *const *g, const int64_t *n, int ng, double max_norm);
/* PyTorch's running statistics of a batchnorm after a training batch from the batch's mean (as
 * rounded to float) and biased variance per channel: momentum 0.1, the variance unbiased by
 * cnt / (cnt - 1) (cnt: the values per channel), in double, stored to float */
void rt_bn_update_running(float *rm, float *rv, const float *mean, const double *var, int64_t C,
                          double cnt);

struct RtPool;
/* rt_opt_step split over a thread pool's threads (elementwise: the same bits however split; a
 * NULL pool or a small n runs on the caller) */
void rt_opt_step_pool(struct RtPool *pool, const RtOptConfig *c, int64_t step, float *p,
                      const float *g, float *m, float *v, int64_t n);

#endif
