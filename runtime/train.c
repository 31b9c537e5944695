/* train.c: losses and optimiser updates as PyTorch computes them (runtime/train.h). The order of
 * float operations follows torch.nn.functional and torch.optim's single-tensor loops; where
 * ATen's vectorised CPU kernels fuse a multiply and an add (add with alpha, lerp), fmaf does the
 * same. */
#include "runtime/train.h"

#include "runtime/pool.h"

#include <math.h>
#include <stdbool.h>

double
rt_loss(RtLoss kind, const float *out, const float *labels, int64_t n, int64_t k, int64_t batch,
        float *grad, int64_t *correct)
{
    double total = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *z = out + i * k;
        float *g = grad + i * k;
        double lf = labels[i];
        int64_t y = lf >= 0 && lf < (double)k && lf == floor(lf) ? (int64_t)lf : -1;
        if (y < 0) return NAN;
        int64_t best = 0;
        for (int64_t j = 1; j < k; j++)
            if (z[j] > z[best]) best = j;
        *correct += best == y;
        if (kind == RT_LOSS_MSE) {
            /* mean((z - onehot)^2) over batch * k; backward (z - y) * (2 / numel) */
            float norm = (float)(2.0 / ((double)batch * (double)k));
            for (int64_t j = 0; j < k; j++) {
                float d = z[j] - (j == y ? 1.0f : 0.0f);
                total += (double)d * d / ((double)batch * (double)k);
                g[j] = d * norm;
            }
        } else {
            /* log_softmax then nll, mean over the batch: (softmax - onehot) / batch */
            double mx = z[best], s = 0;
            for (int64_t j = 0; j < k; j++)
                s += exp((double)z[j] - mx);
            double lse = mx + log(s);
            total += (lse - z[y]) / (double)batch;
            for (int64_t j = 0; j < k; j++) {
                float p = (float)exp((double)z[j] - lse);
                g[j] = (p - (j == y ? 1.0f : 0.0f)) / (float)batch;
            }
        }
    }
    return total;
}

bool
rt_loss_per_step(RtLoss kind)
{
    return kind == RT_LOSS_CE_RATE || kind == RT_LOSS_MSE_MEMBRANE;
}

/* the class of label lf among k, or -1 */
static int64_t
label_class(float lf, int64_t k)
{
    return lf >= 0 && lf < (double)k && lf == floorf(lf) ? (int64_t)lf : -1;
}

double
rt_loss_spec(const RtLossSpec *s, const float *out, const float *labels, int64_t n, int64_t k,
             int64_t batch, float *grad, int64_t *correct)
{
    if (s->kind == RT_LOSS_MSE || s->kind == RT_LOSS_CE)
        return rt_loss(s->kind, out, labels, n, k, batch, grad, correct);
    int T = s->T > 0 ? s->T : 1;
    /* d(loss / T)/d(loss): autograd's DivBackward, 1 / T in float */
    float inv_t = 1.0f / (float)T;
    double total = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t y = label_class(labels[i], k);
        if (y < 0) return NAN;
        if (s->kind == RT_LOSS_MSE_COUNT) {
            /* MSELoss(count, target) / T: grad 2 / (B k) (count - target) (1 / T) */
            const float *z = out + i * k;
            float *g = grad + i * k;
            float on = (float)(int)(T * s->on), off = (float)(int)(T * s->off);
            float norm = (float)(2.0 / ((double)batch * (double)k));
            int64_t best = 0;
            for (int64_t j = 0; j < k; j++) {
                if (z[j] > z[best]) best = j;
                float d = z[j] - (j == y ? on : off);
                total += (double)d * d / ((double)batch * (double)k) / T;
                g[j] = norm * d * inv_t;
            }
            *correct += best == y;
            continue;
        }
        /* per step: [T][k] of row i; the class from the sum over steps */
        const float *zr = out + i * (int64_t)T * k;
        float *gr = grad + i * (int64_t)T * k;
        int64_t best = 0;
        double best_sum = -INFINITY;
        for (int64_t j = 0; j < k; j++) {
            double sum = 0;
            for (int t = 0; t < T; t++)
                sum += zr[t * k + j];
            if (sum > best_sum) best_sum = sum, best = j;
        }
        *correct += best == y;
        for (int t = 0; t < T; t++) {
            const float *z = zr + t * k;
            float *g = gr + t * k;
            if (s->kind == RT_LOSS_CE_RATE) {
                int64_t zb = 0;
                for (int64_t j = 1; j < k; j++)
                    if (z[j] > z[zb]) zb = j;
                double mx = z[zb], se = 0;
                for (int64_t j = 0; j < k; j++)
                    se += exp((double)z[j] - mx);
                double lse = mx + log(se);
                total += (lse - z[y]) / (double)batch / T;
                for (int64_t j = 0; j < k; j++) {
                    float p = (float)exp((double)z[j] - lse);
                    g[j] = (p - (j == y ? 1.0f : 0.0f)) / (float)batch * inv_t;
                }
            } else { /* mse_membrane */
                float on = (float)s->on, off = (float)s->off;
                float norm = (float)(2.0 / ((double)batch * (double)k));
                for (int64_t j = 0; j < k; j++) {
                    float d = z[j] - (j == y ? on : off);
                    total += (double)d * d / ((double)batch * (double)k) / T;
                    g[j] = norm * d * inv_t;
                }
            }
        }
    }
    return total;
}

RtOptConfig
rt_opt_defaults(RtOptimizer kind)
{
    RtOptConfig c = {kind, 1e-3, 0, 0, false, 0.9, 0.999, 1e-8, kind == RT_OPT_ADAMW ? 1e-2 : 0};
    return c;
}

/* The update, twice: compiled for the baseline ISA, where fmaf is a library call, and for
 * AVX2+FMA, where it is one instruction the loops vectorise; the same bits either way (fmaf is
 * exact), chosen at run time. */
#define OPT_STEP_BODY                                                                              \
    float lr = (float)c->lr, wd = (float)c->weight_decay;                                          \
    if (c->kind == RT_OPT_SGD) {                                                                   \
        float mom = (float)c->momentum, damp1 = (float)(1 - c->dampening);                         \
        for (int64_t i = 0; i < n; i++) {                                                          \
            float d = g[i];                                                                        \
            if (c->weight_decay != 0) d = fmaf(p[i], wd, d); /* grad.add(param, alpha=wd) */       \
            if (c->momentum != 0) {                                                                \
                float *buf = &state[i];                                                            \
                *buf = step == 1 ? d : fmaf(d, damp1, *buf * mom);                                 \
                d = c->nesterov ? fmaf(*buf, mom, d) : *buf;                                       \
            }                                                                                      \
            p[i] = fmaf(d, -lr, p[i]); /* param.add_(grad, alpha=-lr) */                           \
        }                                                                                          \
        return;                                                                                    \
    }                                                                                              \
    float *restrict m = state, *restrict v = state2;                                               \
    double bc1 = 1 - pow(c->beta1, (double)step), bc2 = 1 - pow(c->beta2, (double)step);           \
    float step_size = (float)(c->lr / bc1), bc2_sqrt = (float)sqrt(bc2);                           \
    float w1 = (float)(1 - c->beta1), b2 = (float)c->beta2, w2 = (float)(1 - c->beta2);            \
    float eps = (float)c->eps;                                                                     \
    if (c->kind == RT_OPT_ADAMW && c->weight_decay != 0) {                                         \
        float keep = (float)(1 - c->lr * c->weight_decay);                                         \
        for (int64_t i = 0; i < n; i++)                                                            \
            p[i] *= keep;                                                                          \
    }                                                                                              \
    bool l2 = c->kind == RT_OPT_ADAM && c->weight_decay != 0;                                      \
    float wd2 = l2 ? wd : 0; /* + 0 * p: the same bits as no decay (g + 0 is g unless g is -0) */  \
    for (int64_t i = 0; i < n; i++) {                                                              \
        float d = l2 ? fmaf(p[i], wd2, g[i]) : g[i];                                               \
        m[i] = fmaf(w1, d - m[i], m[i]); /* exp_avg.lerp_(grad, 1 - beta1) */                      \
        float vi = v[i] * b2;                                                                      \
        float dd = w2 * d;                                                                         \
        v[i] = vi + dd * d; /* exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2) */           \
        float denom = sqrtf(v[i]) / bc2_sqrt + eps;                                                \
        float upd = -step_size * m[i];                                                             \
        p[i] = p[i] + upd / denom; /* param.addcdiv_(exp_avg, denom, -step_size) */                \
    }

/* a multiply and an add stay two roundings in both versions: GCC is told per function (its
 * optimize attribute), clang by its pragma (its default contracts within an expression). A loop
 * with sqrtf vectorises only when sqrtf needs not set errno: this file is compiled with
 * -fno-math-errno (runtime/CMakeLists.txt; v >= 0 or NaN, whose roots set no errno anyway, so the
 * bits are the same). Without it GCC kept Adam's loop scalar: 0.49 ms a step of 201k weights on
 * one thread, the baseline's pace. */
#if defined(__clang__)
#define OPT_FMA_ATTR __attribute__((target("avx2,fma")))
#define OPT_NO_CONTRACT _Pragma("clang fp contract(off)")
#else
#define OPT_FMA_ATTR                                                                               \
    __attribute__((target("avx2,fma"), optimize("O3", "tree-vectorize", "fp-contract=off")))
#define OPT_NO_CONTRACT
#endif

static void
opt_step_base(const RtOptConfig *c, int64_t step, float *restrict p, const float *restrict g,
              float *restrict state, float *restrict state2,
              int64_t n){OPT_NO_CONTRACT OPT_STEP_BODY}

#if defined(__x86_64__) && defined(__GNUC__)
OPT_FMA_ATTR
    static void opt_step_fma(const RtOptConfig *c, int64_t step, float *restrict p,
                             const float *restrict g, float *restrict state, float *restrict state2,
                             int64_t n){OPT_NO_CONTRACT OPT_STEP_BODY}

/* and for AVX-512, whose 16 lanes halve the square roots and divisions (Adam's two per weight
 * bound the step): the same operations, so the same bits */
#if defined(__clang__)
#define OPT_AVX512_ATTR __attribute__((target("avx512f,avx2,fma")))
#else
#define OPT_AVX512_ATTR                                                                            \
    __attribute__((target("avx512f,avx2,fma"), optimize("O3", "tree-vectorize", "fp-contract=off")))
#endif
OPT_AVX512_ATTR static void opt_step_avx512(const RtOptConfig *c, int64_t step, float *restrict p,
                                            const float *restrict g, float *restrict state,
                                            float *restrict state2, int64_t n)
{
    OPT_NO_CONTRACT
    OPT_STEP_BODY
}
#endif

void
rt_opt_step(const RtOptConfig *c, int64_t step, float *p, const float *g, float *m, float *v,
            int64_t n)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) {
        opt_step_avx512(c, step, p, g, m, v, n);
        return;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        opt_step_fma(c, step, p, g, m, v, n);
        return;
    }
#endif
    opt_step_base(c, step, p, g, m, v, n);
}

void
rt_opt_step_baseline(const RtOptConfig *c, int64_t step, float *p, const float *g, float *m,
                     float *v, int64_t n)
{
    opt_step_base(c, step, p, g, m, v, n);
}

void
rt_bn_update_running(float *rm, float *rv, const float *mean, const double *var, int64_t C,
                     double cnt)
{
    for (int64_t c = 0; c < C; c++) {
        double unbiased = cnt > 1 ? var[c] * cnt / (cnt - 1) : var[c];
        rm[c] = (float)(0.1 * (double)mean[c] + 0.9 * (double)rm[c]);
        rv[c] = (float)(0.1 * unbiased + 0.9 * (double)rv[c]);
    }
}

typedef struct OptJob {
    const RtOptConfig *c;
    int64_t step;
    float *p, *m, *v;
    const float *g;
} OptJob;

static void
opt_chunk(void **bufs, int64_t batch, int64_t step, int64_t sample_base, int64_t lo, int64_t hi)
{
    (void)batch, (void)step, (void)sample_base;
    const OptJob *j = bufs[0];
    rt_opt_step(j->c, j->step, j->p + lo, j->g + lo, j->m + lo, j->v + lo, hi - lo);
}

void
rt_opt_step_pool(struct RtPool *pool, const RtOptConfig *c, int64_t step, float *p, const float *g,
                 float *m, float *v, int64_t n)
{
    if (!pool || n < 65536) {
        rt_opt_step(c, step, p, g, m, v, n);
        return;
    }
    OptJob j = {c, step, p, m, v, g};
    void *bufs[1] = {&j};
    SnnkRt *rt = rt_pool_rt(pool);
    rt->parallel_for(rt, opt_chunk, bufs, 0, 0, 0, 0, n);
}

double
rt_step_lr(double lr0, int64_t e, int64_t step_size, double gamma)
{
    double lr = lr0;
    for (int64_t t = 1; step_size > 0 && t <= e; t++)
        if (t % step_size == 0) lr *= gamma;
    return lr;
}

double
rt_clip_grad_norm(float *const *g, const int64_t *n, int ng, double max_norm)
{
    double total = 0;
    for (int k = 0; k < ng; k++) {
        double s = 0;
        for (int64_t i = 0; i < n[k]; i++)
            s += (double)g[k][i] * g[k][i];
        total += s; /* the norm of the norms: the square root of the sum of their squares */
    }
    double norm = sqrt(total);
    float coef = (float)(max_norm / (norm + 1e-6));
    if (coef < 1.0f)
        for (int k = 0; k < ng; k++)
            for (int64_t i = 0; i < n[k]; i++)
                g[k][i] *= coef;
    return norm;
}

double
rt_cosine_lr(double lr0, int64_t e, int64_t E)
{
    double lr = lr0;
    if (E <= 0) return lr0;
    for (int64_t t = 1; t <= e; t++) {
        if ((t - 1 - E) % (2 * E) == 0)
            lr = lr + lr0 * (1 - cos(M_PI / (double)E)) / 2;
        else
            lr = (1 + cos(M_PI * (double)t / (double)E)) /
                 (1 + cos(M_PI * (double)(t - 1) / (double)E)) * lr;
    }
    return lr;
}
