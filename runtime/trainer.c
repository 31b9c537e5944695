/* trainer.c: the training half of model.so's C ABI (snn.h, ABI 3): a trainer runs the compiled
 * training step a library built with `snnc --train model.snn -o model.so` carries (the
 * snnk_train_fwd and snnk_train_bwd halves of the program kir_lower_train makes, described by the
 * train_* records: runtime/model_parts.c), with the loss, the running statistics and the optimiser
 * of runtime/train.c between and after them: the same arithmetic, in the same order, as `snnc
 * --train --backend=cpu`, so the same bits. Nothing here prints or exits. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/bigmem.h"
#include "runtime/layout.h"
#include "runtime/model_parts.h"
#include "runtime/pool.h"
#include "runtime/snn.h"
#include "runtime/tensor_io.h"
#include "runtime/train.h"

struct snn_trainer {
    const snn_model *m;
    int max_batch, batch; /* batch: the last forward's (0: none yet) */
    RtOptConfig opt;
    RtLossSpec loss;
    int loss_output;
    double clip;
    int64_t steps;
    RtPool *pool;
    pthread_mutex_t lock;
    float **w;         /* [nweights] the weights, float32, the model's layout */
    float **state;     /* [nweights] the optimiser's two tensors, 2 * numel each */
    bool *is_stat;     /* [nweights] batchnorm running statistics: not trained */
    float **zero_grad; /* [nweights] zeros where no gradient flows */
    void **bufs;       /* [ntrain_bufs] what the code gets */
    bool *owned;       /* [ntrain_bufs] */
    unsigned char *arena; /* the temporaries, placed by the program's memory plan */
    float **out;       /* [noutputs] the forward's outputs, max_batch rows */
    bool has_weights;
    bool *w_set; /* [nweights] set by snn_trainer_set_weight before has_weights */
};

void
snn_train_config_default(snn_train_config *c)
{
    rt_clear_error();
    if (!c) return;
    RtOptConfig d = rt_opt_defaults(RT_OPT_ADAM);
    memset(c, 0, sizeof *c);
    c->loss = SNN_LOSS_MSE;
    c->optimizer = SNN_OPT_ADAM;
    c->lr = d.lr;
    c->beta1 = d.beta1;
    c->beta2 = d.beta2;
    c->eps = d.eps;
    c->loss_on = 1;
}

int
snn_model_trainable(const snn_model *m)
{
    rt_clear_error();
    return m && m->ntrain_bufs > 0 && m->train_fwd && m->train_bwd;
}

static void
trainer_free(snn_trainer *t)
{
    if (!t) return;
    const snn_model *m = t->m;
    rt_pool_free(t->pool);
    for (int i = 0; t->w && i < m->nweights; i++) {
        free(t->w[i]);
        free(t->state[i]);
        free(t->zero_grad[i]);
    }
    for (int b = 0; t->bufs && b < m->ntrain_bufs; b++)
        if (t->owned[b]) free(t->bufs[b]);
    free(t->arena);
    for (int k = 0; t->out && k < m->noutputs; k++)
        free(t->out[k]);
    free(t->w);
    free(t->state);
    free(t->is_stat);
    free(t->w_set);
    free(t->zero_grad);
    free(t->bufs);
    free(t->owned);
    free(t->out);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

void
snn_trainer_destroy(snn_trainer *t)
{
    rt_clear_error();
    trainer_free(t);
}

/* the program's packed copies of the weights (transposed buffers) made again from t->w; an
 * unpacked f32 weight buffer is t->w itself */
static void
repack(snn_trainer *t)
{
    const snn_model *m = t->m;
    for (int b = 0; b < m->ntrain_bufs; b++) {
        const RtBuf *kb = &m->train_bufs[b];
        if (kb->kind != RT_BUF_WEIGHT || !kb->nperm) continue;
        const snn_tensor_info *w = &m->weights[kb->io].info;
        int64_t dims[SNN_MAX_RANK + 1];
        int rank = rt_split_dims(w->rank, w->dims, kb->split, dims);
        rt_transpose_f32(t->w[kb->io], rank, dims, kb->perm, t->bufs[b]);
    }
}

/* every weight from a safetensors set (checked against the model first: nothing changes on
 * error) */
static snn_status
weights_from(snn_trainer *t, const RtTensorSet *set, const char *what)
{
    const snn_model *m = t->m;
    snn_status st = rt_weights_check(m, set, what); /* a checkpoint's extra tensors are fine */
    if (st != SNN_OK) return st;
    for (int i = 0; i < m->nweights; i++) {
        const RtTensor *x = rt_tensorset_find(set, m->weights[i].info.name);
        if (x->numel) memcpy(t->w[i], x->data, (size_t)x->numel * sizeof(float));
    }
    repack(t);
    t->has_weights = true;
    return SNN_OK;
}

static snn_status
load_bytes(snn_trainer *t, const void *data, size_t size, const char *what)
{
    RtTensorSet set;
    char msg[512];
    memset(&set, 0, sizeof set);
    if (rt_safetensors_parse(data, size, what, &set, msg, sizeof msg) != 0) {
        rt_tensorset_free(&set);
        return rt_fail(SNN_ERR_WEIGHTS, "%s", msg);
    }
    snn_status st = weights_from(t, &set, what);
    rt_tensorset_free(&set);
    return st;
}

static snn_status
config_check(const snn_model *m, const snn_train_config *c)
{
    if ((int)c->loss < 0 || (int)c->loss >= (int)RT_LOSS_COUNT_)
        return rt_fail(SNN_ERR_ARGUMENT, "snn_trainer_create: unknown loss %d", (int)c->loss);
    if (c->optimizer != SNN_OPT_ADAM && c->optimizer != SNN_OPT_ADAMW &&
        c->optimizer != SNN_OPT_SGD)
        return rt_fail(SNN_ERR_ARGUMENT, "snn_trainer_create: unknown optimizer %d",
                       (int)c->optimizer);
    if (c->loss_output < 0 || c->loss_output >= m->noutputs)
        return rt_fail(SNN_ERR_ARGUMENT,
                       "snn_trainer_create: loss_output %d out of range (the "
                       "model has %d outputs)",
                       c->loss_output, m->noutputs);
    const snn_tensor_info *o = &m->outputs[c->loss_output].info;
    bool per_step = rt_loss_per_step((RtLoss)c->loss);
    if (o->per_step != per_step || o->numel < 2 * (per_step ? m->timesteps : 1))
        return rt_fail(SNN_ERR_ARGUMENT,
                       "snn_trainer_create: output '%s' is not class scores "
                       "%s",
                       m->outputs[c->loss_output].name,
                       per_step ? "of every step [B, T, K] (a sequence output), which this loss "
                                  "reads"
                                : "[B, K] (a count, mean, max or last readout of 2 or more "
                                  "values)");
    if (!isfinite(c->loss_on) || !isfinite(c->loss_off))
        return rt_fail(SNN_ERR_ARGUMENT, "snn_trainer_create: loss_on and loss_off must be "
                                         "finite");
    double v[6] = {c->lr, c->momentum, c->weight_decay, c->beta1, c->beta2, c->eps};
    for (int i = 0; i < 6; i++)
        if (!(v[i] >= 0) || !isfinite(v[i]))
            return rt_fail(SNN_ERR_ARGUMENT, "snn_trainer_create: lr, momentum, weight_decay, "
                                             "betas and eps must be finite and not negative");
    if (!(c->clip_grad_norm >= 0) || !isfinite(c->clip_grad_norm))
        return rt_fail(SNN_ERR_ARGUMENT, "snn_trainer_create: clip_grad_norm must be finite and "
                                         "not negative");
    return SNN_OK;
}

snn_status
snn_trainer_create(const snn_model *m, const snn_train_config *c, int max_batch, int threads,
                   snn_trainer **out)
{
    rt_clear_error();
    if (out) *out = NULL;
    if (!m || !c || !out)
        return rt_fail(SNN_ERR_ARGUMENT, "snn_trainer_create: %s is NULL",
                       !m   ? "model"
                       : !c ? "config"
                            : "out");
    if (!snn_model_trainable(m))
        return rt_fail(SNN_ERR_STATE,
                       "model '%s' carries no training step: build it with "
                       "`snnc --train MODEL.snn -o MODEL.so`",
                       m->name);
    if (max_batch < 1 || max_batch > SNN_MAX_BATCH || threads < 0 || threads > SNN_MAX_THREADS)
        return rt_fail(SNN_ERR_ARGUMENT,
                       "snn_trainer_create: max_batch must be 1..%d and "
                       "threads 0..%d",
                       SNN_MAX_BATCH, SNN_MAX_THREADS);
    snn_status st = config_check(m, c);
    if (st != SNN_OK) return st;
    snn_trainer *t = calloc(1, sizeof *t);
    if (!t) return rt_fail(SNN_ERR_MEMORY, "out of memory for a trainer");
    pthread_mutex_init(&t->lock, NULL);
    t->m = m;
    t->max_batch = max_batch;
    t->loss = (RtLossSpec){(RtLoss)c->loss, m->timesteps, c->loss_on, c->loss_off};
    t->loss_output = c->loss_output;
    t->clip = c->clip_grad_norm;
    RtOptimizer kinds[] = {RT_OPT_ADAM, RT_OPT_ADAMW, RT_OPT_SGD};
    t->opt = rt_opt_defaults(kinds[c->optimizer]);
    t->opt.lr = c->lr;
    t->opt.momentum = c->momentum;
    t->opt.nesterov = c->nesterov != 0;
    t->opt.weight_decay = c->weight_decay;
    if (c->optimizer != SNN_OPT_SGD) {
        t->opt.beta1 = c->beta1;
        t->opt.beta2 = c->beta2;
        t->opt.eps = c->eps;
    }
    char msg[256];
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    t->pool = rt_pool_new(threads ? threads : online < 1 ? 1 : (int)online, msg, sizeof msg);
    int nw = m->nweights, nb = m->ntrain_bufs;
    t->w = calloc((size_t)nw + 1, sizeof *t->w);
    t->state = calloc((size_t)nw + 1, sizeof *t->state);
    t->is_stat = calloc((size_t)nw + 1, sizeof *t->is_stat);
    t->w_set = calloc((size_t)nw + 1, sizeof *t->w_set);
    t->zero_grad = calloc((size_t)nw + 1, sizeof *t->zero_grad);
    t->bufs = calloc((size_t)nb + 1, sizeof *t->bufs);
    t->owned = calloc((size_t)nb + 1, sizeof *t->owned);
    t->out = calloc((size_t)m->noutputs + 1, sizeof *t->out);
    bool ok = t->pool && t->w && t->state && t->is_stat && t->w_set && t->zero_grad && t->bufs &&
              t->owned && t->out;
    for (int i = 0; ok && i < nw; i++) {
        size_t n = (size_t)(m->weights[i].info.numel ? m->weights[i].info.numel : 1);
        t->w[i] = calloc(n, sizeof(float));
        t->state[i] = calloc(2 * n, sizeof(float));
        ok = t->w[i] && t->state[i];
        if (ok && m->train_weight_grad[i] < 0)
            ok = (t->zero_grad[i] = calloc(n, sizeof(float))) != NULL;
    }
    for (int i = 0; i < m->ntrain_bn; i++) {
        t->is_stat[m->train_bn[i].running_mean] = true;
        t->is_stat[m->train_bn[i].running_var] = true;
    }
    /* the temporaries in one arena (those of a slot share their region), packed weight copies
     * on their own */
    size_t *bytes = calloc((size_t)nb + 1, sizeof *bytes),
           *off = calloc((size_t)nb + 1, sizeof *off);
    int *slots = calloc((size_t)nb + 1, sizeof *slots),
        *spans = calloc((size_t)nb + 1, sizeof *spans);
    ok = ok && bytes && off && slots && spans;
    for (int b = 0; ok && b < nb; b++) {
        const RtBuf *kb = &m->train_bufs[b];
        bytes[b] = kb->kind == RT_BUF_TEMP ? rt_buf_bytes(kb, max_batch) : SIZE_MAX;
        slots[b] = kb->slot;
        spans[b] = kb->span;
    }
    if (ok) {
        size_t total = rt_arena_layout(nb, bytes, slots, spans, 64, off);
        ok = (t->arena = rt_big_alloc((total + 63) / 64 * 64 + 64)) != NULL;
    }
    for (int b = 0; ok && b < nb; b++) {
        const RtBuf *kb = &m->train_bufs[b];
        if (kb->kind == RT_BUF_INPUT || kb->kind == RT_BUF_OUTPUT) continue;
        if (kb->kind == RT_BUF_TEMP) {
            t->bufs[b] = t->arena + off[b];
            continue;
        }
        if (kb->kind == RT_BUF_WEIGHT && !kb->nperm) {
            t->bufs[b] = t->w[kb->io];
            continue;
        }
        size_t n = rt_buf_bytes(kb, max_batch);
        t->bufs[b] = rt_big_alloc((n + 63) / 64 * 64 + 64);
        t->owned[b] = true;
        ok = t->bufs[b] != NULL;
    }
    free(bytes);
    free(off);
    free(slots);
    free(spans);
    for (int k = 0; ok && k < m->noutputs; k++)
        ok = (t->out[k] = calloc((size_t)max_batch * (size_t)m->outputs[k].info.numel + 1,
                                 sizeof(float))) != NULL;
    if (!ok) {
        bool has_pool = t->pool != NULL;
        trainer_free(t);
        return rt_fail(SNN_ERR_MEMORY, "out of memory for a trainer of batch %d%s%s", max_batch,
                       has_pool ? "" : ": ", has_pool ? "" : msg);
    }
    if (m->weight_size) {
        st = load_bytes(t, m->weight_data, m->weight_size, "the library's weights");
        if (st != SNN_OK) {
            trainer_free(t);
            return st;
        }
    }
    *out = t;
    return SNN_OK;
}

/* the forward of a batch, outputs into t->out; the running statistics updated */
static snn_status
forward(snn_trainer *t, int64_t first_sample, int batch, const float *const *inputs)
{
    const snn_model *m = t->m;
    if (!t->has_weights)
        return rt_fail(SNN_ERR_STATE, "the trainer has no weights yet (the library carries none: "
                                      "snn_trainer_load_weights_file)");
    if (batch < 1 || batch > t->max_batch)
        return rt_fail(SNN_ERR_ARGUMENT, "batch %d out of range 1..%d", batch, t->max_batch);
    if (!inputs) return rt_fail(SNN_ERR_ARGUMENT, "inputs is NULL");
    for (int i = 0; i < m->ninputs; i++)
        if (!inputs[i]) return rt_fail(SNN_ERR_ARGUMENT, "input %d is NULL", i);
    for (int b = 0; b < m->ntrain_bufs; b++) {
        const RtBuf *kb = &m->train_bufs[b];
        if (kb->kind == RT_BUF_INPUT)
            t->bufs[b] = (void *)inputs[kb->io];
        else if (kb->kind == RT_BUF_OUTPUT)
            t->bufs[b] = t->out[kb->io];
        else if (kb->kind == RT_BUF_TEMP && kb->needs_zero)
            memset(t->bufs[b], 0, rt_buf_bytes(kb, batch));
    }
    m->train_fwd(t->bufs, batch, first_sample, rt_pool_rt(t->pool));
    for (int i = 0; i < m->ntrain_bn; i++) {
        const RtTrainBn *bn = &m->train_bn[i];
        rt_bn_update_running(t->w[bn->running_mean], t->w[bn->running_var], t->bufs[bn->mean],
                             t->bufs[bn->var], bn->C,
                             (double)m->timesteps * batch * (double)bn->inner);
    }
    t->batch = batch;
    return SNN_OK;
}

/* the backward of the last forward from the output gradients in the program's buffers */
static void
backward(snn_trainer *t)
{
    t->m->train_bwd(t->bufs, t->batch, 0, rt_pool_rt(t->pool));
}

static const float *
grad_of(const snn_trainer *t, int w)
{
    int b = t->m->train_weight_grad[w];
    return b >= 0 ? t->bufs[b] : t->zero_grad[w];
}

/* clip (as configured) and update every trained weight with g[w]; the packed copies follow */
static void
apply(snn_trainer *t, float *const *g)
{
    const snn_model *m = t->m;
    if (t->clip > 0) {
        float **cg = malloc(((size_t)m->nweights + 1) * sizeof *cg);
        int64_t *cn = malloc(((size_t)m->nweights + 1) * sizeof *cn);
        int ng = 0;
        for (int w = 0; cg && cn && w < m->nweights; w++)
            if (!t->is_stat[w]) {
                cg[ng] = g[w];
                cn[ng++] = m->weights[w].info.numel;
            }
        if (cg && cn) rt_clip_grad_norm(cg, cn, ng, t->clip);
        free(cg);
        free(cn);
    }
    t->steps++;
    for (int w = 0; w < m->nweights; w++) {
        if (t->is_stat[w]) continue;
        int64_t n = m->weights[w].info.numel;
        rt_opt_step_pool(t->pool, &t->opt, t->steps, t->w[w], g[w], t->state[w], t->state[w] + n,
                         n);
    }
    repack(t);
}

/* the gradients the last backward left, as an array the optimiser may scale */
static float **
kept_grads(snn_trainer *t)
{
    float **g = malloc(((size_t)t->m->nweights + 1) * sizeof *g);
    for (int w = 0; g && w < t->m->nweights; w++)
        g[w] = (float *)grad_of(t, w);
    return g;
}

snn_status
snn_train_step(snn_trainer *t, int64_t first_sample, int batch, const float *const *inputs,
               const float *labels, double *loss, int64_t *correct)
{
    rt_clear_error();
    if (!t || !labels)
        return rt_fail(SNN_ERR_ARGUMENT, "snn_train_step: %s is NULL", t ? "labels" : "trainer");
    pthread_mutex_lock(&t->lock);
    const snn_model *m = t->m;
    snn_status st = forward(t, first_sample, batch, inputs);
    if (st == SNN_OK) {
        int lo = t->loss_output;
        int64_t k = m->outputs[lo].info.numel, ok = 0;
        if (m->outputs[lo].info.per_step) k /= m->timesteps; /* classes: a step's values */
        for (int j = 0; j < m->noutputs; j++)
            memset(t->bufs[m->train_out_grad[j]], 0,
                   (size_t)batch * (size_t)m->outputs[j].info.numel * sizeof(float));
        double l = rt_loss_spec(&t->loss, t->out[lo], labels, batch, k, batch,
                                t->bufs[m->train_out_grad[lo]], &ok);
        if (isnan(l)) {
            st = rt_fail(SNN_ERR_ARGUMENT, "a label is not a class of 0..%lld", (long long)k - 1);
        } else {
            backward(t);
            float **g = kept_grads(t);
            if (!g) {
                st = rt_fail(SNN_ERR_MEMORY, "out of memory");
            } else {
                apply(t, g);
                free(g);
                if (loss) *loss = l;
                if (correct) *correct = ok;
            }
        }
    }
    pthread_mutex_unlock(&t->lock);
    return st;
}

snn_status
snn_train_forward(snn_trainer *t, int64_t first_sample, int batch, const float *const *inputs,
                  float *const *outputs)
{
    rt_clear_error();
    if (!t) return rt_fail(SNN_ERR_ARGUMENT, "snn_train_forward: trainer is NULL");
    pthread_mutex_lock(&t->lock);
    snn_status st = forward(t, first_sample, batch, inputs);
    for (int k = 0; st == SNN_OK && outputs && k < t->m->noutputs; k++)
        if (outputs[k])
            memcpy(outputs[k], t->out[k],
                   (size_t)batch * (size_t)t->m->outputs[k].info.numel * sizeof(float));
    pthread_mutex_unlock(&t->lock);
    return st;
}

/* whether input_grads asks for any input's gradient */
static bool
wants_inputs(const snn_model *m, float *const *input_grads)
{
    for (int i = 0; input_grads && i < m->ninputs; i++)
        if (input_grads[i]) return true;
    return false;
}

snn_status
snn_train_backward(snn_trainer *t, const float *const *output_grads, float *const *weight_grads)
{
    return snn_train_backward_inputs(t, output_grads, NULL, weight_grads);
}

snn_status
snn_train_backward_inputs(snn_trainer *t, const float *const *output_grads,
                          float *const *input_grads, float *const *weight_grads)
{
    rt_clear_error();
    if (!t || !output_grads)
        return rt_fail(SNN_ERR_ARGUMENT, "snn_train_backward: %s is NULL",
                       t ? "output_grads" : "trainer");
    pthread_mutex_lock(&t->lock);
    const snn_model *m = t->m;
    snn_status st = SNN_OK;
    bool inputs = wants_inputs(m, input_grads);
    if (!t->batch) {
        st = rt_fail(SNN_ERR_STATE, "snn_train_backward before any snn_train_forward");
    } else if (inputs && (!m->train_bwd_in || (m->ninputs && m->train_input_grad[0] == -2))) {
        st = rt_fail(SNN_ERR_STATE, "this library computes no input gradients (built by an older "
                                    "snnc: build it again with --train)");
    } else {
        for (int k = 0; k < m->noutputs; k++) {
            size_t n = (size_t)t->batch * (size_t)m->outputs[k].info.numel;
            float *dst = t->bufs[m->train_out_grad[k]];
            if (output_grads[k])
                memcpy(dst, output_grads[k], n * sizeof(float));
            else
                memset(dst, 0, n * sizeof(float));
        }
        backward(t);
        if (inputs) m->train_bwd_in(t->bufs, t->batch, 0, rt_pool_rt(t->pool));
        for (int i = 0; inputs && i < m->ninputs; i++) {
            if (!input_grads[i]) continue;
            size_t bytes = (size_t)t->batch * (size_t)m->inputs[i].info.numel * sizeof(float);
            int b = m->train_input_grad[i];
            if (b >= 0)
                memcpy(input_grads[i], t->bufs[b], bytes);
            else
                memset(input_grads[i], 0, bytes); /* none flows (a Poisson encoder samples it) */
        }
        for (int w = 0; weight_grads && w < m->nweights; w++)
            if (weight_grads[w])
                memcpy(weight_grads[w], grad_of(t, w),
                       (size_t)m->weights[w].info.numel * sizeof(float));
    }
    pthread_mutex_unlock(&t->lock);
    return st;
}

snn_status
snn_trainer_apply(snn_trainer *t, const float *const *weight_grads)
{
    rt_clear_error();
    if (!t) return rt_fail(SNN_ERR_ARGUMENT, "snn_trainer_apply: trainer is NULL");
    pthread_mutex_lock(&t->lock);
    const snn_model *m = t->m;
    snn_status st = SNN_OK;
    float **g = NULL;
    if (!weight_grads && !t->batch) {
        st = rt_fail(SNN_ERR_STATE, "snn_trainer_apply with no gradients: no backward yet");
    } else if (weight_grads) {
        /* the caller's arrays stay as they are: clipping scales a copy */
        g = calloc((size_t)m->nweights + 1, sizeof *g);
        for (int w = 0; g && w < m->nweights; w++) {
            size_t n = (size_t)m->weights[w].info.numel;
            g[w] = malloc((n ? n : 1) * sizeof(float));
            if (!g[w]) break;
            if (weight_grads[w])
                memcpy(g[w], weight_grads[w], n * sizeof(float));
            else
                memset(g[w], 0, n * sizeof(float));
        }
        bool ok = g != NULL;
        for (int w = 0; ok && w < m->nweights; w++)
            ok = g[w] != NULL;
        if (ok)
            apply(t, g);
        else
            st = rt_fail(SNN_ERR_MEMORY, "out of memory");
        for (int w = 0; g && w < m->nweights; w++)
            free(g[w]);
    } else {
        g = kept_grads(t);
        if (g)
            apply(t, g);
        else
            st = rt_fail(SNN_ERR_MEMORY, "out of memory");
    }
    free(g);
    pthread_mutex_unlock(&t->lock);
    return st;
}

snn_status
snn_trainer_set_lr(snn_trainer *t, double lr)
{
    rt_clear_error();
    if (!t || !(lr >= 0) || !isfinite(lr))
        return rt_fail(SNN_ERR_ARGUMENT, "snn_trainer_set_lr: %s",
                       t ? "lr must be finite and not negative" : "trainer is NULL");
    pthread_mutex_lock(&t->lock);
    t->opt.lr = lr;
    pthread_mutex_unlock(&t->lock);
    return SNN_OK;
}

int64_t
snn_trainer_steps(const snn_trainer *t)
{
    rt_clear_error();
    return t ? t->steps : -1;
}

snn_status
snn_trainer_get_weight(snn_trainer *t, int i, float *dst)
{
    rt_clear_error();
    if (!t || !dst)
        return rt_fail(SNN_ERR_ARGUMENT, "snn_trainer_get_weight: %s is NULL",
                       t ? "dst" : "trainer");
    if (i < 0 || i >= t->m->nweights)
        return rt_fail(SNN_ERR_ARGUMENT,
                       "snn_trainer_get_weight: index %d out of range (the "
                       "model has %d)",
                       i, t->m->nweights);
    pthread_mutex_lock(&t->lock);
    memcpy(dst, t->w[i], (size_t)t->m->weights[i].info.numel * sizeof(float));
    pthread_mutex_unlock(&t->lock);
    return SNN_OK;
}

snn_status
snn_trainer_set_weight(snn_trainer *t, int i, const float *src)
{
    rt_clear_error();
    if (!t || !src)
        return rt_fail(SNN_ERR_ARGUMENT, "snn_trainer_set_weight: %s is NULL",
                       t ? "src" : "trainer");
    if (i < 0 || i >= t->m->nweights)
        return rt_fail(SNN_ERR_ARGUMENT,
                       "snn_trainer_set_weight: index %d out of range (the model has %d)", i,
                       t->m->nweights);
    pthread_mutex_lock(&t->lock);
    memcpy(t->w[i], src, (size_t)t->m->weights[i].info.numel * sizeof(float));
    if (!t->has_weights) t->w_set[i] = true;
    bool all = true;
    for (int w = 0; w < t->m->nweights; w++)
        all = all && (t->has_weights || t->w_set[w]);
    t->has_weights = all; /* every weight given one by one counts as loaded */
    repack(t);
    pthread_mutex_unlock(&t->lock);
    return SNN_OK;
}

/* a weights file or checkpoint (three times the weights at most: weights and an optimiser's
 * two tensors each); what names it for messages */
static snn_status
read_set(const snn_trainer *t, const char *path, RtTensorSet *set, char *what, size_t whatlen)
{
    const snn_model *m = t->m;
    int64_t numel = 0;
    for (int i = 0; i < m->nweights; i++)
        numel += m->weights[i].info.numel;
    RtReadLimit lim = {3 * rt_weights_file_limit(numel, m->nweights), 0,
                       "the model's weights and an optimiser state"};
    char msg[1024];
    if (rt_safetensors_read(path, &lim, set, msg, sizeof msg) != 0)
        return rt_fail(SNN_ERR_IO, "%s", msg);
    snprintf(what, whatlen, "'%s'", path);
    return SNN_OK;
}

snn_status
snn_trainer_load_weights_file(snn_trainer *t, const char *path)
{
    rt_clear_error();
    if (!t || !path)
        return rt_fail(SNN_ERR_ARGUMENT, "snn_trainer_load_weights_file: %s is NULL",
                       t ? "path" : "trainer");
    RtTensorSet set;
    char what[600];
    snn_status st = read_set(t, path, &set, what, sizeof what);
    if (st != SNN_OK) return st;
    pthread_mutex_lock(&t->lock);
    st = weights_from(t, &set, what);
    pthread_mutex_unlock(&t->lock);
    rt_tensorset_free(&set);
    return st;
}

/* the weights (and with state, each one's optimiser tensors and the step count) as safetensors */
static snn_status
save(snn_trainer *t, const char *path, bool with_state)
{
    rt_clear_error();
    if (!t || !path)
        return rt_fail(SNN_ERR_ARGUMENT, "saving the trainer: %s is NULL", t ? "path" : "trainer");
    const snn_model *m = t->m;
    int nw = m->nweights, n = with_state ? 3 * nw + 1 : nw;
    RtTensor *ts = calloc((size_t)n + 1, sizeof *ts);
    char *names = calloc((size_t)n + 1, RT_MAX_NAME + 16);
    float steps[2];
    if (!ts || !names) {
        free(ts);
        free(names);
        return rt_fail(SNN_ERR_MEMORY, "out of memory saving the trainer");
    }
    pthread_mutex_lock(&t->lock);
    int k = 0;
    for (int w = 0; w < nw; w++) {
        const snn_tensor_info *info = &m->weights[w].info;
        for (int part = 0; part < (with_state ? 3 : 1); part++) {
            char *name = names + (size_t)k * (RT_MAX_NAME + 16);
            snprintf(name, RT_MAX_NAME + 16, part ? "%s.__opt%d" : "%s", info->name, part - 1);
            ts[k].name = name;
            ts[k].dtype = RT_F32;
            ts[k].rank = info->rank;
            memcpy(ts[k].dims, info->dims, sizeof info->dims[0] * (size_t)info->rank);
            ts[k].numel = info->numel;
            ts[k].data = part == 0 ? t->w[w] : t->state[w] + (part - 1) * info->numel;
            k++;
        }
    }
    if (with_state) {
        /* the step count as two 16-bit halves, exact in float */
        steps[0] = (float)(t->steps & 0xffff);
        steps[1] = (float)((t->steps >> 16) & 0xffff);
        ts[k] = (RtTensor){names + (size_t)k * (RT_MAX_NAME + 16), RT_F32, 1, {2}, 2, steps};
        snprintf(ts[k].name, RT_MAX_NAME + 16, "__snnc_steps");
        k++;
    }
    char msg[1024];
    int rc = rt_safetensors_write(path, ts, k, RT_F32, msg, sizeof msg);
    pthread_mutex_unlock(&t->lock);
    free(ts);
    free(names);
    return rc == 0 ? SNN_OK : rt_fail(SNN_ERR_IO, "%s", msg);
}

snn_status
snn_trainer_save_weights(snn_trainer *t, const char *path)
{
    return save(t, path, false);
}

snn_status
snn_trainer_save_checkpoint(snn_trainer *t, const char *path)
{
    return save(t, path, true);
}

snn_status
snn_trainer_load_checkpoint(snn_trainer *t, const char *path)
{
    rt_clear_error();
    if (!t || !path)
        return rt_fail(SNN_ERR_ARGUMENT, "snn_trainer_load_checkpoint: %s is NULL",
                       t ? "path" : "trainer");
    const snn_model *m = t->m;
    RtTensorSet set;
    char what[600], name[RT_MAX_NAME + 16];
    snn_status st = read_set(t, path, &set, what, sizeof what);
    if (st != SNN_OK) return st;
    const RtTensor *steps = rt_tensorset_find(&set, "__snnc_steps");
    if (!steps || steps->numel != 2)
        st = rt_fail(SNN_ERR_WEIGHTS, "%s is not a trainer checkpoint (no __snnc_steps)", what);
    for (int w = 0; st == SNN_OK && w < m->nweights; w++)
        for (int part = 0; st == SNN_OK && part < 2; part++) {
            snprintf(name, sizeof name, "%s.__opt%d", m->weights[w].info.name, part);
            const RtTensor *x = rt_tensorset_find(&set, name);
            if (!x || x->numel != m->weights[w].info.numel)
                st = rt_fail(SNN_ERR_WEIGHTS,
                             "%s has no optimiser tensor '%s' of the weight's "
                             "size",
                             what, name);
        }
    pthread_mutex_lock(&t->lock);
    if (st == SNN_OK) st = weights_from(t, &set, what);
    if (st == SNN_OK) {
        for (int w = 0; w < m->nweights; w++)
            for (int part = 0; part < 2; part++) {
                snprintf(name, sizeof name, "%s.__opt%d", m->weights[w].info.name, part);
                const RtTensor *x = rt_tensorset_find(&set, name);
                if (x->numel)
                    memcpy(t->state[w] + part * x->numel, x->data,
                           (size_t)x->numel * sizeof(float));
            }
        t->steps = (int64_t)steps->data[0] | (int64_t)steps->data[1] << 16;
    }
    pthread_mutex_unlock(&t->lock);
    rt_tensorset_free(&set);
    return st;
}

/* session.c: an inference session's weights from float32 arrays in the model's layout */
snn_status rt_session_set_weights(snn_session *s, const float *const *w);

snn_status
snn_session_copy_weights(snn_session *s, snn_trainer *t)
{
    rt_clear_error();
    if (!s || !t)
        return rt_fail(SNN_ERR_ARGUMENT, "snn_session_copy_weights: %s is NULL",
                       s ? "trainer" : "session");
    pthread_mutex_lock(&t->lock);
    snn_status st = rt_session_set_weights(s, (const float *const *)t->w);
    pthread_mutex_unlock(&t->lock);
    return st;
}
