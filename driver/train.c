/* train.c: snnc --train. Surrogate-gradient BPTT on the reference interpreter (ir/interp_grad.c):
 * batches drawn in an order keyed by --seed and the epoch, the loss on the model's first output
 * (runtime/train.c, as PyTorch), one optimiser step per batch, the test set after each epoch, and
 * the weights written (whole, or the old file left as it was) after every epoch, so a run cut
 * short keeps what its finished epochs trained. */
#include "driver/train.h"

#include "codegen/kir.h"
#include "driver/build.h"
#include "driver/explain.h"
#include "driver/load.h"
#include "driver/plot.h"
#include "runtime/pool.h"
#include "codegen/cuda/build.h"
#include "codegen/cuda/cuda_gen.h"
#include "runtime/cuda_driver.h"
#include "runtime/cuda_exec.h"
#include "runtime/layout.h"
#include "runtime/model_parts.h"
#include "runtime/tensor_io.h"
#ifdef SNN_HAVE_LLVM
#include "codegen/llvm/cg_llvm.h"
#endif
#include "runtime/bigmem.h"
#include "runtime/clock.h"
#include "runtime/philox.h"
#include "runtime/train.h"

#include <math.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct Batch {
    RtLossSpec loss;
    const float *labels; /* this batch's */
    float **outputs;
    int out;   /* the output the loss reads (--loss-output; default the first) */
    int64_t k; /* classes: that output's numel */
    int64_t batch;
    double loss_sum;
    int64_t correct;
    bool bad_label, bad_loss; /* a label no class; a loss not finite (the outputs are not) */
} Batch;

static void
loss_grad(void *ctx, int64_t first, int nb, float **og)
{
    Batch *b = ctx;
    int64_t row = b->k * (rt_loss_per_step(b->loss.kind) ? b->loss.T : 1);
    double l = rt_loss_spec(&b->loss, b->outputs[b->out] + first * row, b->labels + first, nb, b->k,
                            b->batch, og[b->out], &b->correct);
    for (int i = 0; i < nb; i++) {
        float y = b->labels[first + i];
        b->bad_label |= !(y >= 0 && y < (float)b->k && y == floorf(y));
    }
    b->bad_loss |= !isfinite(l);
    b->loss_sum += l;
}

static const char *
loss_name(RtLoss k)
{
    static const char *const names[RT_LOSS_COUNT_] = {"mse", "ce", "ce_rate", "mse_count",
                                                      "mse_membrane"};
    return names[k];
}

/* the output the loss reads: --loss-output's, else the first; -1 after reporting */
static int
loss_output(const Module *m, const Options *o)
{
    if (!o->loss_output) return m->noutputs > 0 ? 0 : -1;
    for (int k = 0; k < m->noutputs; k++) {
        const char *name = m->nodes[m->outputs[k]].name;
        if (name && strcmp(name, o->loss_output) == 0) return k;
    }
    fprintf(stderr, "%s: error: --loss-output: '%s' is not an output of model '%s' (its outputs:",
            o->path, o->loss_output, m->name ? m->name : "?");
    for (int k = 0; k < m->noutputs; k++)
        fprintf(stderr, "%s %s", k ? "," : "", m->nodes[m->outputs[k]].name);
    fputs(")\n", stderr);
    return -1;
}

/* The model can be trained: every neuron layer differentiable, the output the loss reads class
 * scores [B, K]. False after reporting. */
static bool
check_trainable(const Module *m, const Options *o)
{
    bool ok = true;
    for (ValueId v = 0; v < m->nnodes; v++) {
        const Node *n = &m->nodes[v];
        char why[512];
        SurrogateFn sg;
        if (n->op == OP_NEURON && !neuron_surrogate(m->neurons[n->neuron], &sg, why, sizeof why)) {
            diag_error(n->loc, "layer '%s' (%s) cannot be trained: %s", n->name ? n->name : "?",
                       m->neurons[n->neuron]->name, why);
            ok = false;
        }
    }
    bool has_delay = false;
    for (ValueId v = 0; v < m->nnodes; v++)
        has_delay |= m->nodes[v].op == OP_DELAY;
    for (ValueId v = 0; v < m->nnodes && has_delay; v++)
        if (m->nodes[v].op == OP_BATCHNORM) {
            diag_error(m->nodes[v].loc,
                       "batchnorm '%s' cannot be trained in a recurrent model (prev/delay): its "
                       "batch statistics need every step of its input first",
                       node_layer_name(m, &m->nodes[v]));
            ok = false;
        }
    if (m->noutputs == 0) {
        diag_error(m->loc, "model '%s' has no output to train on", m->name ? m->name : "?");
        return false;
    }
    int lo = loss_output(m, o);
    if (lo < 0) return false;
    const Node *out = &m->nodes[m->outputs[lo]];
    bool per_step = rt_loss_per_step((RtLoss)o->loss);
    if (out->type.has_time != per_step || type_numel(&out->type) < 2) {
        if (per_step)
            diag_error(out->loc,
                       "--train --loss=%s reads class scores of every step [B, T, K] from %s; "
                       "'%s' is %s (a sequence output gives them, e.g. output spikes = "
                       "sequence(s); --loss-output names another)",
                       loss_name((RtLoss)o->loss),
                       o->loss_output ? "--loss-output" : "the first output",
                       out->name ? out->name : "?",
                       out->type.has_time ? "a single value a step" : "not a sequence");
        else
            diag_error(
                out->loc,
                "--train --loss=%s reads class scores [B, K] from %s; '%s' is %s (a count, "
                "mean, max or last readout gives them; --loss-output names another)",
                loss_name((RtLoss)o->loss), o->loss_output ? "--loss-output" : "the first output",
                out->name ? out->name : "?", out->type.has_time ? "a sequence" : "a single value");
        return false;
    }
    return ok;
}

/* the training and test samples: --data's two splits, or --input with --labels */
typedef struct Sets {
    Data train;
    /* Fashion-MNIST: the pixels kept as the bytes they are (a quarter of the memory; read so,
     * never widened whole: rt_fmnist_load_bytes), each batch widened as the reader widens them,
     * byte / 255.0f (Data.inputs unused) */
    uint8_t *bytes, *tbytes;
    bool is_fmnist;
    RtTensor img, lab, timg, tlab, labels_file;
    int64_t ntest;
    const float *test_labels;
} Sets;

static bool
load_sets(const Module *m, const Options *o, Sets *s)
{
    char err[1200];
    memset(s, 0, sizeof *s);
    if (!o->data) {
        if (!load_inputs(m, o, &s->train)) return false;
        RtReadLimit lim = {0, o->limit > 0 ? o->limit : 0, NULL};
        if (rt_npy_read(o->labels, &lim, &s->labels_file, err, sizeof err)) {
            diag_reader_error(o->labels, err);
            return false;
        }
        if (s->labels_file.numel != s->train.n) {
            diag_file_error(o->labels, "has %lld labels for %lld samples",
                            (long long)s->labels_file.numel, (long long)s->train.n);
            return false;
        }
        s->train.labels = s->labels_file.data;
        return true;
    }
    const char *dir = NULL;
    if (strncmp(o->data, "fashion-mnist", 13) == 0 && (o->data[13] == 0 || o->data[13] == ':'))
        dir = o->data[13] == ':' && o->data[14] ? o->data + 14 : NULL;
    else
        usage_error("unknown data set '%s' (available: fashion-mnist[:DIR])", o->data);
    const Node *n = &m->nodes[m->inputs[0]];
    if (m->ninputs != 1 || n->is_per_step_input || type_numel(&n->type) != 784) {
        diag_error(n->loc, "--data fashion-mnist needs a model with one static input of 784 values "
                           "(e.g. input image : f32[1, 28, 28])");
        return false;
    }
    /* the images --limit and --test-limit keep, no more */
    if (rt_fmnist_load_bytes(dir, 1, o->limit > 0 ? o->limit : 0, &s->img, &s->bytes, &s->lab,
                             err, sizeof err) ||
        rt_fmnist_load_bytes(dir, 0, o->test_limit > 0 ? o->test_limit : 0, &s->timg, &s->tbytes,
                             &s->tlab, err, sizeof err)) {
        diag_reader_error(NULL, err);
        return false;
    }
    Data *d = &s->train;
    s->is_fmnist = true;
    d->n = s->img.dims[0];
    if (o->limit > 0 && o->limit < d->n) d->n = o->limit;
    d->ninputs = 1;
    d->inputs = xcalloc(1, sizeof *d->inputs);
    d->numel = xcalloc(1, sizeof *d->numel);
    d->numel[0] = 784;
    d->labels = s->lab.data;
    s->ntest = s->timg.dims[0];
    if (o->test_limit >= 0 && o->test_limit < s->ntest) s->ntest = o->test_limit;
    s->test_labels = s->tlab.data;
    return true;
}

/* sample s of input i into row b of the batch array */
static void
gather(const Sets *sets, int i, int64_t s, float *row)
{
    const Data *d = &sets->train;
    size_t n = (size_t)d->numel[i];
    if (sets->bytes) {
        const uint8_t *p = sets->bytes + (size_t)s * n;
        for (size_t k = 0; k < n; k++)
            row[k] = (float)p[k] / 255.0f;
    } else {
        memcpy(row, d->inputs[i] + (size_t)s * n, n * sizeof(float));
    }
}

static void
free_sets(Sets *s)
{
    if (s->is_fmnist) {
        free(s->train.inputs);
        free(s->train.numel);
    } else {
        data_free(&s->train);
    }
    free(s->bytes);
    free(s->tbytes);
    free(s->img.data);
    free(s->lab.data);
    free(s->timg.data);
    free(s->tlab.data);
    free(s->labels_file.data);
}

/* the order of epoch e: 0..n-1, or a Fisher-Yates shuffle keyed by (seed, epoch) */
static void
epoch_order(int64_t *order, int64_t n, uint64_t seed, int64_t e, bool shuffle)
{
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    if (!shuffle) return;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j =
            (int64_t)(rt_uniform(seed, 0x5348u, (uint32_t)e, (uint64_t)i) * (double)(i + 1));
        if (j > i) j = i;
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* row i's class: the argmax of its scores, or of their sum over T steps (a [B][T][k] output) */
static int64_t argmax(const float *row, int64_t k);
static int64_t
class_of(const float *out, int64_t i, int64_t k, int T)
{
    if (!T) return argmax(out + i * k, k);
    int64_t best = 0;
    double best_sum = -INFINITY;
    for (int64_t j = 0; j < k; j++) {
        double sum = 0;
        for (int t = 0; t < T; t++)
            sum += out[(i * T + t) * k + j];
        if (sum > best_sum) best_sum = sum, best = j;
    }
    return best;
}

static int64_t
argmax(const float *row, int64_t k)
{
    int64_t best = 0;
    for (int64_t j = 1; j < k; j++)
        if (row[j] > row[best]) best = j;
    return best;
}

static int64_t input_numel(const Module *m, int i);

/* the gradients g (one float array per weight) as f32 safetensors under the weights' names, and
 * the inputs' of the batch (nb samples of each in ig) as INPUT.grad, [nb, (T,) dims] */
static bool
write_grads(const Module *m, float *const *g, float *const *ig, int nb, const char *path)
{
    RtTensor *ts = weights_as_tensors(m);
    ts = xrealloc(ts, ((size_t)m->nweights + (size_t)m->ninputs + 1) * sizeof *ts);
    for (int w = 0; w < m->nweights; w++)
        ts[w].data = g[w];
    for (int i = 0; i < m->ninputs; i++) {
        const Node *n = &m->nodes[m->inputs[i]];
        RtTensor *t = &ts[m->nweights + i];
        memset(t, 0, sizeof *t);
        t->name = arena_printf((Arena *)&m->arena, "%s.grad", n->name);
        t->dtype = RT_F32;
        t->dims[t->rank++] = nb;
        if (n->is_per_step_input) t->dims[t->rank++] = m->timesteps;
        for (int d = 0; d < n->type.rank && t->rank < RT_MAX_RANK; d++)
            t->dims[t->rank++] = n->type.dims[d];
        t->numel = nb * input_numel(m, i);
        t->data = ig[i];
    }
    char msg[512];
    bool ok =
        rt_safetensors_write(path, ts, m->nweights + m->ninputs, RT_F32, msg, sizeof msg) == 0;
    if (!ok) diag_reader_error(path, msg);
    free(ts);
    return ok;
}

/* ---- checkpoints ---- */

char *
train_checkpoint_path(const char *dir, int64_t n)
{
    size_t len = strlen(dir) + 48;
    char *p = xmalloc(len);
    snprintf(p, len, "%s/epoch-%lld.safetensors", dir, (long long)n);
    return p;
}

/* Where training stands, as float32 numbers (the safetensors writer's): integers in 16-bit pieces,
 * each exact in a float */
enum { CK_VERSION, CK_EPOCHS, CK_STEP, CK_OPTIMIZER, CK_BATCH, CK_SAMPLES, CK_SEED, CK_SHUFFLE,
       CK_FIELDS };
enum { CK_PIECES = 4 }; /* 64 bits */
static const char ck_name[] = "__snnc_train";

static void
ck_put(float *f, int field, uint64_t v)
{
    for (int k = 0; k < CK_PIECES; k++)
        f[field * CK_PIECES + k] = (float)((v >> (16 * k)) & 0xffff);
}

static uint64_t
ck_get(const float *f, int field)
{
    uint64_t v = 0;
    for (int k = 0; k < CK_PIECES; k++)
        v |= (uint64_t)f[field * CK_PIECES + k] << (16 * k);
    return v;
}

/* the tensor name of weight w's optimiser state k (0: momentum or exp_avg, 1: exp_avg_sq) */
static char *
state_name(const Module *m, int w, int k)
{
    size_t len = strlen(m->weights[w].name) + 16;
    char *n = xmalloc(len);
    snprintf(n, len, "%s.__opt%d", m->weights[w].name, k);
    return n;
}

/* DIR/epoch-N.safetensors: the weights, each trained weight's optimiser state, and where
 * training stands; written whole, or the old file left as it was */
static bool
write_checkpoint(const Module *m, const Options *o, float *const *state, int64_t epochs,
                 int64_t step, int64_t nsamples, uint64_t seed)
{
    if (mkdir(o->checkpoint, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "snnc: error: --checkpoint: cannot make directory '%s': %s\n",
                o->checkpoint, strerror(errno));
        return false;
    }
    int nw = m->nweights;
    RtTensor *w = weights_as_tensors(m);
    RtTensor *ts = xcalloc((size_t)(3 * nw + 1), sizeof *ts);
    int n = 0;
    for (int i = 0; i < nw; i++)
        ts[n++] = w[i];
    for (int i = 0; i < nw; i++)
        for (int k = 0; k < 2; k++) {
            ts[n] = w[i];
            ts[n].name = state_name(m, i, k);
            ts[n++].data = state[i] + (size_t)k * (size_t)w[i].numel;
        }
    float info[CK_FIELDS * CK_PIECES];
    ck_put(info, CK_VERSION, 1);
    ck_put(info, CK_EPOCHS, (uint64_t)epochs);
    ck_put(info, CK_STEP, (uint64_t)step);
    ck_put(info, CK_OPTIMIZER, (uint64_t)o->optimizer);
    ck_put(info, CK_BATCH, (uint64_t)o->batch);
    ck_put(info, CK_SAMPLES, (uint64_t)nsamples);
    ck_put(info, CK_SEED, seed);
    ck_put(info, CK_SHUFFLE, !o->no_shuffle);
    ts[n] = (RtTensor){(char *)ck_name, RT_F32, 1, {CK_FIELDS * CK_PIECES}, CK_FIELDS * CK_PIECES,
                       info};
    n++;
    char *path = train_checkpoint_path(o->checkpoint, epochs);
    char msg[512];
    bool ok = rt_safetensors_write(path, ts, n, RT_F32, msg, sizeof msg) == 0;
    if (!ok) diag_reader_error(path, msg);
    for (int i = nw; i < n - 1; i++)
        free(ts[i].name);
    free(path);
    free(ts);
    free(w);
    return ok;
}

/* --resume: the checkpoint's weights bound, its optimiser state into state, *epochs and *step
 * where it stood; the run's settings must be the checkpoint's (else the continuation would not
 * be the run it stopped). False after reporting. */
static bool
read_checkpoint(Module *m, const Options *o, float **state, int64_t *epochs, int64_t *step,
                int64_t nsamples, uint64_t seed)
{
    RtTensorSet set = {0};
    char err[1024];
    if (rt_safetensors_read(o->resume, NULL, &set, err, sizeof err)) {
        diag_reader_error(o->resume, err);
        return false;
    }
    bool ok = true;
    const RtTensor *info = rt_tensorset_find(&set, ck_name);
    if (!info || info->numel != CK_FIELDS * CK_PIECES || ck_get(info->data, CK_VERSION) != 1) {
        diag_file_error(o->resume, "is not a checkpoint of snnc --train (--checkpoint writes them)");
        ok = false;
    }
    const char *differs = NULL;
    if (ok) {
        if (ck_get(info->data, CK_OPTIMIZER) != (uint64_t)o->optimizer) differs = "--optimizer";
        else if (ck_get(info->data, CK_BATCH) != (uint64_t)o->batch) differs = "--batch";
        else if (ck_get(info->data, CK_SAMPLES) != (uint64_t)nsamples) differs = "the samples (--limit)";
        else if (ck_get(info->data, CK_SEED) != seed) differs = "--seed";
        else if (ck_get(info->data, CK_SHUFFLE) != (uint64_t)!o->no_shuffle) differs = "--no-shuffle";
    }
    if (differs) {
        diag_file_error(o->resume, "was written with another %s than this run's: resume with the "
                                   "settings it was trained with",
                        differs);
        ok = false;
    }
    /* the weights: the tensors named as the model's (the rest is the optimiser's) */
    RtTensorSet ws = {xcalloc((size_t)set.ntensors + 1, sizeof(RtTensor)), 0};
    for (int i = 0; ok && i < set.ntensors; i++)
        if (set.tensors[i].name && module_find_weight(m, set.tensors[i].name) >= 0)
            ws.tensors[ws.ntensors++] = set.tensors[i];
    ok = ok && weights_bind_set(m, &ws, o->resume);
    for (int w = 0; ok && w < m->nweights; w++)
        for (int k = 0; k < 2 && ok; k++) {
            char *name = state_name(m, w, k);
            const RtTensor *t = rt_tensorset_find(&set, name);
            if (!t || t->numel != m->weights[w].numel) {
                diag_file_error(o->resume, "has no optimiser state '%s' of %lld values", name,
                                (long long)m->weights[w].numel);
                ok = false;
            } else {
                memcpy(state[w] + (size_t)k * (size_t)t->numel, t->data,
                       (size_t)t->numel * sizeof(float));
            }
            free(name);
        }
    if (ok) {
        *epochs = (int64_t)ck_get(info->data, CK_EPOCHS);
        *step = (int64_t)ck_get(info->data, CK_STEP);
    }
    free(ws.tensors);
    rt_tensorset_free(&set);
    return ok;
}

static double
peak_rss_mb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : 0;
}

/* ---- the engine: the interpreter, or the compiled training step ---- */

/* What runs a training step: interp_grad, or the program kir_lower_train makes, evaluated
 * (--backend=kir, the check of its lowering) or compiled by LLVM (--backend=cpu): its forward
 * kernels, the loss gradient written into its buffers, its backward kernels, on one binding made
 * for the largest batch and kept (the batch arrays' addresses never change). */
typedef struct Engine {
    bool is_interp, is_llvm;
    double t_forward, t_loss, t_backward; /* seconds this epoch (--report=json "phases") */
    Module *tm;                           /* the train-step module (ir_grad) p is lowered from */
    KProgram *p;
    KTrain tr;
    /* views of p: its forward and backward kernels, and with --grads the kernels only the
     * inputs' gradients need */
    KProgram fwd, bwd, bwd_in;
    KBinding *bd;
    /* with batchnorm: the inference program testing runs (running statistics), its binding (the
     * same batch arrays) */
    KProgram *inf;
    KBinding *bdi;
    RtPool *pool;
    /* --device=cuda: the same program as CUDA C (cuda_gen), its image, a model made of them and
     * an executor holding the device's copy of every buffer; bd stays the host's, the truth
     * for inputs, outputs, loss gradients, weights and their gradients (engine_run copies) */
    bool is_cuda;
    CudaBuild cb_cuda;
    snn_model *cm;
    RtCudaExec *cx;
    /* and the optimiser there (dev_opt: without --clip-grad-norm, whose global norm the host
     * takes): per weight its f32 master copy and optimiser state in device memory (dw[w] 0: not
     * trained) and, where no gradient flows, a zero one; the host's weights and state are brought
     * back (engine_sync) before testing and writing. host_grads: this step's weight gradients come
     * back to the host too (--grads) */
    bool dev_opt, host_grads;
    uint64_t *dw, *dstate, *dzero;
    /* with batchnorm, testing runs there too: the inference program for the GPU (running
     * statistics), its build and executor */
    KProgram *infg;
    CudaBuild cb_inf;
    snn_model *cmi;
    RtCudaExec *cxi;
#ifdef SNN_HAVE_LLVM
    CgLlvm *cf, *cb, *cbi, *ci;
    /* SNN_TRAIN_PROFILE=1: every kernel of p compiled alone and timed (seconds in kt), the
     * table printed to stderr at the end */
    CgLlvm **ck;
    double *kt;
#endif
} Engine;

/* PyTorch's running statistics after a training batch, from the batch's (as interp_grad.c's
 * batchnorm_update_running): momentum 0.1, the variance unbiased over every step, sample and
 * position (a static value counted T times), in double, stored to float */
static void
update_running_stats(Engine *e, const Module *m, int nb)
{
    for (ValueId v = 0; v < m->nnodes; v++) {
        if (e->tr.bn_mean[v] < 0) continue;
        const Node *n = &m->nodes[v];
        int64_t C = n->type.rank > 0 ? n->type.dims[0] : 1;
        int64_t inner = C ? type_numel(&n->type) / C : 0;
        double cnt = (double)m->timesteps * nb * (double)inner;
        rt_bn_update_running(m->weights[n->first_weight + 2].data,
                             m->weights[n->first_weight + 3].data, e->bd->mem[e->tr.bn_mean[v]],
                             e->bd->mem[e->tr.bn_var[v]], C, cnt);
    }
}

/* --device=cuda: program p as CUDA C for the device's architecture (with the training step's
 * own kernels after it: cuda_gen_train_source), a model made of its description, image and the
 * module's weights, and an executor on the device holding them (packed as the program's buffers
 * say); false after reporting */
static bool
cuda_open(KProgram *p, const Module *m, const Options *o, bool is_train, CudaBuild *cb,
          snn_model **cm, RtCudaExec **cx)
{
    char err[1024], name[256];
    int major, minor;
    if (!rt_cuda_device_arch(o->cuda_ordinal, &major, &minor, name, sizeof name, err, sizeof err) ||
        !cuda_nvrtc_load(err, sizeof err)) {
        fprintf(stderr, "snnc: error: --device=cuda: %s\n", err);
        return false;
    }
    char arch[32];
    snprintf(arch, sizeof arch, "sm_%d%d", major, minor);
    char *src = is_train ? cuda_gen_train_source(p) : cuda_gen_source(p);
    const char *dump = getenv("SNN_TRAIN_CUDA_SOURCE"); /* the step's CUDA C, to read */
    if (dump && *dump && is_train) {
        FILE *f = fopen(dump, "w");
        if (f) {
            fputs(src, f);
            fclose(f);
        }
    }
    if (!cuda_build_begin(cb, p, src, m->name ? m->name : "model")) return false;
    CudaImage *img = cuda_build_add(cb, arch, true);
    if (!img) {
        fprintf(stderr, "snnc: error: the %s's CUDA code for %s (%s) could not be built\n",
                is_train ? "training step" : "testing program", name, arch);
        return false;
    }
    /* training counts no spikes: the description names no counted layer (the kernels' per-sample
     * counters stay temporaries) */
    int nstats = p->nstats;
    p->nstats = is_train ? 0 : nstats;
    char *kernels = cuda_gen_describe(p);
    size_t rlen = strlen(kernels) + 128;
    char *records = xmalloc(rlen);
    snprintf(records, rlen, "%scuda_image cubin %s 0 %zu\n", kernels, arch, img->size);
    char *meta = kir_describe_with(p, "cuda", records);
    p->nstats = nstats;
    free(kernels);
    free(records);
    RtTensor *ts = weights_as_tensors(m);
    unsigned char *wbytes = NULL;
    size_t wlen = 0;
    bool ok = rt_safetensors_encode(ts, m->nweights, RT_F32, &wbytes, &wlen, err, sizeof err) == 0;
    if (!ok) fprintf(stderr, "snnc: error: encoding the weights: %s\n", err);
    snn_status st = SNN_OK;
    if (ok && (st = rt_model_create(meta, NULL, wbytes, wlen, img->data, img->size, cm)) != SNN_OK)
        fprintf(stderr, "snnc: error: the %s's CUDA model: %s\n",
                is_train ? "training step" : "testing program", snn_last_error());
    ok = ok && st == SNN_OK;
    free(meta);
    free(wbytes);
    free(ts);
    if (ok && (*cm)->ncuda_bufs != p->nbufs)
        die("--device=cuda: the CUDA model has %d buffers, the program %d", (*cm)->ncuda_bufs,
            p->nbufs);
    if (ok &&
        (st = rt_cuda_exec_create(*cm, o->cuda_ordinal, o->batch, cx, err, sizeof err)) != SNN_OK) {
        fprintf(stderr, "snnc: error: --device=cuda: %s\n", err);
        ok = false;
    }
    return ok;
}

/* program p's weight buffers, packed from the module's weights as they are now, to executor x */
static bool
cuda_upload_weights(const KProgram *p, RtCudaExec *x, char *err, size_t errlen)
{
    void **mem = xcalloc((size_t)p->nbufs + 1, sizeof *mem),
         **packed = xcalloc((size_t)p->nbufs + 1, sizeof *packed);
    bool ok = true;
    for (int b = 0; ok && b < p->nbufs; b++)
        if (p->bufs[b].kind == KB_WEIGHT)
            ok = (mem[b] = (void *)kir_bind_weight(p, b, &packed[b], err, errlen)) != NULL;
    ok = ok && rt_cuda_exec_set_weights(x, mem, err, errlen) == SNN_OK;
    for (int b = 0; b < p->nbufs; b++)
        free(packed[b]);
    free(packed);
    free(mem);
    return ok;
}

/* the training step, and with batchnorm the testing program, on the device */
static bool
engine_open_cuda(Engine *e, Module *m, const Options *o, bool has_bn)
{
    char err[512];
    e->is_cuda = true;
    if (!cuda_open(e->p, m, o, true, &e->cb_cuda, &e->cm, &e->cx)) return false;
    if (rt_cuda_exec_set_weights(e->cx, e->bd->mem, err, sizeof err) != SNN_OK) {
        fprintf(stderr, "snnc: error: --device=cuda: the weights: %s\n", err);
        return false;
    }
    if (!has_bn) return true; /* testing runs the training program's forward */
    /* its temporaries share memory where their lifetimes allow */
    m->memory = MEMORY_REUSE;
    e->infg = kir_lower_for(m, KTARGET_GPU);
    m->memory = MEMORY_SEPARATE;
    if (!e->infg) {
        fprintf(stderr, "snnc: error: the inference program for testing: not lowered\n");
        return false;
    }
    return cuda_open(e->infg, m, o, false, &e->cb_inf, &e->cmi, &e->cxi);
}

/* the module's gradient of weight w on the device: the program's buffer, or zeros */
static uint64_t
device_grad(Engine *e, int w)
{
    return e->tr.weight_grad[w] >= 0 ? rt_cuda_exec_addr(e->cx, e->tr.weight_grad[w]) : e->dzero[w];
}

/* every trained weight's master copy and optimiser state to the device (dev_opt) */
static bool
engine_opt_begin(Engine *e, const Module *m, const RtOptConfig *c, float *const *state, char *err,
                 size_t errlen)
{
    int nw = m->nweights;
    e->dw = xcalloc((size_t)nw + 1, sizeof *e->dw);
    e->dstate = xcalloc((size_t)nw + 1, sizeof *e->dstate);
    e->dzero = xcalloc((size_t)nw + 1, sizeof *e->dzero);
    int nstate = c->kind == RT_OPT_SGD ? (c->momentum != 0) : 2;
    for (int w = 0; w < nw; w++) {
        const Weight *wt = &m->weights[w];
        if (!weight_is_trained(m, wt)) continue;
        size_t bytes = (size_t)wt->numel * sizeof(float);
        if (rt_cuda_exec_alloc(e->cx, bytes, &e->dw[w], err, errlen) != SNN_OK ||
            rt_cuda_exec_copy_addr(e->cx, e->dw[w], wt->data, bytes, true, err, errlen) != SNN_OK)
            return false;
        if (nstate &&
            (rt_cuda_exec_alloc(e->cx, nstate * bytes, &e->dstate[w], err, errlen) != SNN_OK ||
             rt_cuda_exec_copy_addr(e->cx, e->dstate[w], state[w], nstate * bytes, true, err,
                                    errlen) != SNN_OK))
            return false;
        if (e->tr.weight_grad[w] < 0 &&
            rt_cuda_exec_alloc(e->cx, bytes, &e->dzero[w], err, errlen) != SNN_OK)
            return false;
    }
    return true;
}

static long long
f32_bits(double x)
{
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (long long)u;
}

/* one update of every trained weight on the device (runtime/train.c's, the same bits), then the
 * program's packed copies of each made again from it there */
static bool
engine_opt_device(Engine *e, const Module *m, const RtOptConfig *c, int64_t step, char *err,
                  size_t errlen)
{
    for (int w = 0; w < m->nweights; w++) {
        if (!e->dw[w]) continue;
        const Weight *wt = &m->weights[w];
        uint64_t p = e->dw[w], g = device_grad(e, w), st = e->dstate[w];
        uint64_t st2 = st ? st + (uint64_t)wt->numel * sizeof(float) : 0;
        long long n = wt->numel, a[10];
        snn_status s;
        if (c->kind == RT_OPT_SGD) {
            long long flags = (c->weight_decay != 0) | (c->momentum != 0) << 1 |
                              (c->nesterov ? 4 : 0) | (step == 1 ? 8 : 0);
            a[0] = f32_bits(c->lr), a[1] = f32_bits(c->weight_decay), a[2] = f32_bits(c->momentum);
            a[3] = f32_bits(1 - c->dampening), a[4] = flags;
            void *params[] = {&p, &g, &st, &n, &a[0], &a[1], &a[2], &a[3], &a[4]};
            s = rt_cuda_exec_launch(e->cx, "snn_train_sgd", n, params, err, errlen);
        } else {
            double bc1 = 1 - pow(c->beta1, (double)step), bc2 = 1 - pow(c->beta2, (double)step);
            bool decoupled = c->kind == RT_OPT_ADAMW && c->weight_decay != 0;
            bool l2 = c->kind == RT_OPT_ADAM && c->weight_decay != 0;
            a[0] = f32_bits(c->lr / bc1), a[1] = f32_bits((float)sqrt(bc2));
            a[2] = f32_bits(1 - c->beta1), a[3] = f32_bits(c->beta2), a[4] = f32_bits(1 - c->beta2);
            a[5] = f32_bits(c->eps), a[6] = f32_bits(l2 ? c->weight_decay : 0);
            a[7] = f32_bits(decoupled ? 1 - c->lr * c->weight_decay : 1);
            a[8] = (l2 ? 1 : 0) | (decoupled ? 2 : 0);
            void *params[] = {&p,    &g,    &st,   &st2,  &n,    &a[0], &a[1],
                              &a[2], &a[3], &a[4], &a[5], &a[6], &a[7], &a[8]};
            s = rt_cuda_exec_launch(e->cx, "snn_train_adam", n, params, err, errlen);
        }
        if (s != SNN_OK) return false;
        /* the buffers the program reads it from: a copy, or packed (runtime/layout.h) */
        for (int b = 0; b < e->p->nbufs; b++) {
            const KBuf *kb = &e->p->bufs[b];
            if (kb->kind != KB_WEIGHT || kb->io != w) continue;
            if (kb->type != KT_F32) die("--device=cuda: weight buffer '%s' is not f32", kb->name);
            int64_t dims[IR_MAX_RANK + 1], st_[IR_MAX_RANK + 1];
            long long d[5] = {1, 1, 1, 1, 1}, ss[5] = {0, 0, 0, 0, 0}, rank = 1;
            if (!kb->nperm) {
                d[0] = n, ss[0] = 1;
            } else {
                rank = rt_split_dims(wt->rank, wt->dims, kb->split, dims);
                if (rank > 5) die("--device=cuda: weight buffer '%s' of rank %lld", kb->name, rank);
                int64_t stride = 1;
                for (int k = (int)rank - 1; k >= 0; k--) {
                    st_[k] = stride;
                    stride *= dims[k];
                }
                for (int k = 0; k < rank; k++)
                    d[k] = dims[kb->perm[k]], ss[k] = st_[kb->perm[k]];
            }
            uint64_t dst = rt_cuda_exec_addr(e->cx, b);
            void *params[] = {&dst,  &p,    &n,     &rank,  &d[0],  &d[1],  &d[2],
                              &d[3], &d[4], &ss[0], &ss[1], &ss[2], &ss[3], &ss[4]};
            if (rt_cuda_exec_launch(e->cx, "snn_train_repack", n, params, err, errlen) != SNN_OK)
                return false;
        }
    }
    return true;
}

/* the device's weights and optimiser state back into the module's weights and state[] */
static bool
engine_sync(Engine *e, const Module *m, const RtOptConfig *c, float *const *state, char *err,
            size_t errlen)
{
    if (!e->dev_opt) return true;
    int nstate = c->kind == RT_OPT_SGD ? (c->momentum != 0) : 2;
    for (int w = 0; w < m->nweights; w++) {
        if (!e->dw[w]) continue;
        const Weight *wt = &m->weights[w];
        size_t bytes = (size_t)wt->numel * sizeof(float);
        if (rt_cuda_exec_copy_addr(e->cx, e->dw[w], wt->data, bytes, false, err, errlen) !=
                SNN_OK ||
            (nstate && rt_cuda_exec_copy_addr(e->cx, e->dstate[w], state[w], nstate * bytes, false,
                                              err, errlen) != SNN_OK))
            return false;
    }
    /* the host binding's packed copies follow (the CPU's view of them, for whoever reads them) */
    return kir_rebind_weights(e->p, e->bd, e->pool ? rt_pool_rt(e->pool) : NULL, err, errlen);
}

/* copies between the host's binding and the device: buffer b at batch nb */
static bool
cuda_copy(Engine *e, int b, int nb, bool to_device, char *err, size_t errlen)
{
    if (b < 0) return true;
    const KBuf *kb = &e->p->bufs[b];
    size_t bytes = (size_t)kbytes(kb->type, ksize_eval(kb->size, nb));
    return rt_cuda_exec_copy(e->cx, b, e->bd->mem[b], bytes, to_device, err, errlen) == SNN_OK;
}

/* view v of the training program on the device: what the host wrote that it reads goes in (the
 * inputs before the forward, the loss gradients before the backward), its kernels run, what the
 * host reads comes back (outputs and batch statistics, weight or input gradients) */
static bool
cuda_run(Engine *e, const KProgram *v, int nb, int64_t base, char *err, size_t errlen)
{
    const Module *m = e->p->m;
    bool is_fwd = v == &e->fwd, ok = true;
    int first = v == &e->bwd ? e->tr.nforward : v == &e->bwd_in ? e->tr.ninput_first : 0;
    for (int b = 0; ok && is_fwd && b < e->p->nbufs; b++)
        if (e->p->bufs[b].kind == KB_INPUT) ok = cuda_copy(e, b, nb, true, err, errlen);
    for (int k = 0; ok && v == &e->bwd && k < m->noutputs; k++)
        ok = cuda_copy(e, e->tr.out_grad[k], nb, true, err, errlen);
    ok = ok && rt_cuda_exec_run_kernels(e->cx, first, first + v->nkernels, nb, base, is_fwd, err,
                                        errlen) == SNN_OK;
    for (int b = 0; ok && is_fwd && b < e->p->nbufs; b++)
        if (e->p->bufs[b].kind == KB_OUTPUT) ok = cuda_copy(e, b, nb, false, err, errlen);
    for (ValueId u = 0; ok && is_fwd && u < m->nnodes; u++)
        ok = cuda_copy(e, e->tr.bn_mean[u], nb, false, err, errlen) &&
             cuda_copy(e, e->tr.bn_var[u], nb, false, err, errlen);
    for (int w = 0; ok && v == &e->bwd && (!e->dev_opt || e->host_grads) && w < m->nweights; w++)
        ok = cuda_copy(e, e->tr.weight_grad[w], nb, false, err, errlen);
    for (int i = 0; ok && v == &e->bwd_in && i < m->ninputs; i++)
        ok = cuda_copy(e, e->tr.input_grad[i], nb, false, err, errlen);
    return ok;
}

static bool
engine_open(Engine *e, Module *m, const Options *o, float **bin, float **outs)
{
    memset(e, 0, sizeof *e);
    e->is_interp = strcmp(o->backend, "interp") == 0;
    char err[512];
    e->pool = rt_pool_new(o->threads, err, sizeof err); /* the optimiser's, and the CPU code's */
    if (!e->pool) {
        fprintf(stderr, "snnc: error: %s\n", err);
        return false;
    }
    if (e->is_interp) return true;
    m->schedule = SCHEDULE_LAYER; /* every layer over all its steps, each value in its buffer */
    m->memory = MEMORY_SEPARATE;
    /* --grads writes the inputs' gradients of the first batch too */
    bool on_gpu = strcmp(o->backend, "cuda") == 0;
    /* on the CPU, large dense layers read the weights the optimiser updates, as they are */
    m->is_weights_in_place = !on_gpu;
    m->is_train_dense = !passes_include(&o->passes, "events");
    /* the train-step module (ir_grad), lowered: its forward, then its backward in the order of
     * its grad nodes */
    e->tm = ir_grad(m, o->grads != NULL);
    if (!passes_dump_grad(&o->passes, m, e->tm)) return false;
    e->p = kir_lower_train_for(e->tm, on_gpu ? KTARGET_GPU : KTARGET_CPU, &e->tr, err, sizeof err);
    if (!e->p) {
        fprintf(stderr, "snnc: error: --backend=%s: %s; --backend=interp trains it\n", o->backend,
                err);
        return false;
    }
    e->fwd = *e->p;
    e->fwd.nkernels = e->tr.nforward;
    e->bwd = *e->p;
    e->bwd.kernels = e->p->kernels + e->tr.nforward;
    e->bwd.nkernels = e->tr.ninput_first - e->tr.nforward;
    e->bwd_in = *e->p;
    e->bwd_in.kernels = e->p->kernels + e->tr.ninput_first;
    e->bwd_in.nkernels = e->p->nkernels - e->tr.ninput_first;
    e->bd = kir_bind(e->p, o->batch, (const float *const *)bin, outs, err, sizeof err);
    if (!e->bd) {
        fprintf(stderr, "snnc: error: %s\n", err);
        return false;
    }
    bool has_bn = false;
    for (ValueId v = 0; v < m->nnodes; v++)
        has_bn |= e->tr.bn_mean[v] >= 0;
    if (has_bn && !on_gpu) {
        /* its temporaries share memory where their lifetimes allow (the training program's
         * plan is its own) */
        m->memory = MEMORY_REUSE;
        e->inf = kir_lower(m);
        m->memory = MEMORY_SEPARATE;
        /* in the step's arena: testing runs between steps, each run of either starts its
         * temporaries afresh (engine_run), and nothing of a step outlives it there */
        e->bdi = e->inf ? kir_bind_sharing(e->inf, o->batch, (const float *const *)bin, outs,
                                           e->bd, err, sizeof err)
                        : NULL;
        if (!e->bdi) {
            fprintf(stderr, "snnc: error: the inference program for testing: %s\n",
                    e->inf ? err : "not lowered");
            return false;
        }
        /* its packed weights are the training forward's (repacked after every update) */
        kir_share_weights(e->inf, e->bdi, e->p, e->bd);
    }
    if (on_gpu) return engine_open_cuda(e, m, o, has_bn);
    if (strcmp(o->backend, "cpu") == 0) {
#ifdef SNN_HAVE_LLVM
        e->is_llvm = true;
        e->cf = cg_llvm_compile(&e->fwd, err, sizeof err);
        if (e->cf) e->cb = cg_llvm_compile(&e->bwd, err, sizeof err);
        if (e->cb && o->grads) e->cbi = cg_llvm_compile(&e->bwd_in, err, sizeof err);
        if (e->cb && e->inf) e->ci = cg_llvm_compile(e->inf, err, sizeof err);
        if (!e->cb || (o->grads && !e->cbi) || (e->inf && !e->ci)) {
            fprintf(stderr, "snnc: error: compiling the training step: %s\n", err);
            return false;
        }
        const char *ll = getenv("SNN_TRAIN_LLVM"); /* the step's optimised LLVM IR, to read */
        if (ll && *ll) {
            char *text = cg_llvm_module_text(e->p, true, err, sizeof err);
            FILE *f = text ? fopen(ll, "w") : NULL;
            if (f) {
                fputs(text, f);
                fclose(f);
            }
            free(text);
        }
        const char *prof = getenv("SNN_TRAIN_PROFILE");
        if (prof && *prof && strcmp(prof, "0") != 0) {
            e->ck = xcalloc((size_t)e->p->nkernels, sizeof *e->ck);
            e->kt = xcalloc((size_t)e->p->nkernels, sizeof *e->kt);
            for (int k = 0; k < e->p->nkernels; k++) {
                KProgram one = *e->p;
                one.kernels = e->p->kernels + k;
                one.nkernels = 1;
                e->ck[k] = cg_llvm_compile(&one, err, sizeof err);
                if (!e->ck[k]) {
                    fprintf(stderr, "snnc: error: compiling kernel %d alone: %s\n", k, err);
                    return false;
                }
            }
        }
#endif
    }
    return true;
}

static void
engine_close(Engine *e)
{
    rt_cuda_exec_destroy(e->cx);
    rt_model_free(e->cm);
    e->cb_cuda.gp = NULL; /* e->p, freed below */
    cuda_build_free(&e->cb_cuda);
    rt_cuda_exec_destroy(e->cxi);
    rt_model_free(e->cmi);
    e->cb_inf.gp = NULL;
    cuda_build_free(&e->cb_inf);
    kir_free(e->infg);
    free(e->dw);
    free(e->dstate);
    free(e->dzero);
#ifdef SNN_HAVE_LLVM
    if (e->ck) {
        double total = 0;
        for (int k = 0; k < e->p->nkernels; k++)
            total += e->kt[k];
        fprintf(stderr,
                "SNN_TRAIN_PROFILE: seconds per kernel of the training step (all epochs)\n");
        for (int k = 0; k < e->p->nkernels; k++) {
            fprintf(stderr, "%9.3f %5.1f%%  %s\n", e->kt[k], total > 0 ? 100 * e->kt[k] / total : 0,
                    e->p->kernels[k].name);
            cg_llvm_free(e->ck[k]);
        }
        free(e->ck);
        free(e->kt);
    }
    cg_llvm_free(e->cf);
    cg_llvm_free(e->cb);
    cg_llvm_free(e->cbi);
    cg_llvm_free(e->ci);
#endif
    rt_pool_free(e->pool);
    kir_unbind(e->bd);
    kir_free(e->p);
    module_free(e->tm);
    kir_unbind(e->bdi);
    kir_free(e->inf);
}

/* where view v starts in the program */
static int
view_first(const Engine *e, const KProgram *v)
{
    return v == &e->bwd ? e->tr.nforward : v == &e->bwd_in ? e->tr.ninput_first : 0;
}

/* kernels of view v on the binding; before a forward, the temporaries that are not always
 * stored before loaded start at zero, as every run of a session's (runtime/session.c) */
static bool
engine_run(Engine *e, const KProgram *v, int nb, int64_t base, char *err, size_t errlen)
{
    if (e->is_cuda) return cuda_run(e, v, nb, base, err, errlen); /* the device zeroes its own */
    bool is_inf = v == e->inf;
    const KProgram *whole = is_inf ? e->inf : e->p;
    KBinding *bd = is_inf ? e->bdi : e->bd;
    if (v == &e->fwd || is_inf) kir_zero_temps(whole, bd, nb);
#ifdef SNN_HAVE_LLVM
    if (e->is_llvm && e->ck && !is_inf) {
        int first = view_first(e, v);
        for (int k = first; k < first + v->nkernels; k++) {
            double t0 = rt_now_seconds();
            ((SnnkEntryFn)(uintptr_t)cg_llvm_entry(e->ck[k]))(bd->mem, nb, base,
                                                              rt_pool_rt(e->pool));
            e->kt[k] += rt_now_seconds() - t0;
        }
        return true;
    }
    if (e->is_llvm) {
        CgLlvm *cg = is_inf ? e->ci : v == &e->fwd ? e->cf : v == &e->bwd ? e->cb : e->cbi;
        SnnkEntryFn entry = (SnnkEntryFn)(uintptr_t)cg_llvm_entry(cg);
        entry(bd->mem, nb, base, rt_pool_rt(e->pool));
        return true;
    }
#endif
    int first = view_first(e, v);
    return kir_eval_bound(whole, bd, nb, base, first, first + v->nkernels, NULL, err, errlen);
}

/* The forward alone (testing): the outputs of nb samples */
static bool
engine_forward(Engine *e, const Module *m, const InterpOptions *io, int nb, int64_t base,
               float **bin, float **outs, char *err, size_t errlen)
{
    if (e->is_interp) {
        InterpOptions ti = *io;
        ti.batch_stats = false; /* testing: batchnorm's running statistics */
        return interp_run(m, &ti, nb, base, (const float *const *)bin, outs, NULL, err, errlen);
    }
    if (e->cxi) {
        int64_t launches, graphs;
        return rt_cuda_exec_run(e->cxi, false, NULL, base, nb, (const void *const *)bin,
                                (void *const *)outs, false, &launches, &graphs, err,
                                errlen) == SNN_OK;
    }
    return engine_run(e, e->inf ? e->inf : &e->fwd, nb, base, err, errlen);
}

/* test accuracy in batches of o->batch (the batch arrays reused), or -1 with no test set */
static double
test_accuracy(Engine *e, const Module *m, const Options *o, const InterpOptions *io, const Sets *s,
              float **bin, float **outs, char *err, size_t errlen)
{
    if (s->ntest <= 0) return -1;
    int lo = loss_output(m, o);
    int64_t k = type_numel(&m->nodes[m->outputs[lo]].type), correct = 0;
    /* the inference program's packed copies of the weights as they are now */
    bool ok = !e->inf ||
              kir_rebind_weights(e->inf, e->bdi, e->pool ? rt_pool_rt(e->pool) : NULL, err, errlen);
    /* on the GPU: the testing program's weights from the module's (running statistics too) */
    ok = ok && (!e->cxi || cuda_upload_weights(e->infg, e->cxi, err, errlen));
    for (int64_t first = 0; first < s->ntest && ok; first += o->batch) {
        int nb = (int)(s->ntest - first < o->batch ? s->ntest - first : o->batch);
        for (int64_t q = 0; q < (int64_t)nb * 784; q++)
            bin[0][q] = (float)s->tbytes[first * 784 + q] / 255.0f;
        ok = engine_forward(e, m, io, nb, first, bin, outs, err, errlen);
        for (int i = 0; ok && i < nb; i++)
            correct +=
                (double)class_of(outs[lo], i, k,
                                 m->nodes[m->outputs[lo]].type.has_time ? m->timesteps : 0) ==
                s->test_labels[first + i];
    }
    return ok ? (double)correct / (double)s->ntest : NAN;
}

/* floats of input i of one sample */
static int64_t
input_numel(const Module *m, int i)
{
    const Node *n = &m->nodes[m->inputs[i]];
    return type_numel(&n->type) * (n->is_per_step_input ? m->timesteps : 1);
}

/* One step: forward, loss gradient (b's), backward; g[w] then points at weight w's float32
 * gradient (the interpreter's double sums rounded into gf, or the compiled program's buffer;
 * zeros where none flows); gd, per weight, is the interpreter's (zeroed here after use). With ig
 * (per input, nb samples' floats), also the inputs' gradients into it. */
static bool
engine_step(Engine *e, const Module *m, const InterpOptions *io, int nb, int64_t base, float **bin,
            float **outs, Batch *b, double **gd, float **gf, float **g, float **ig, char *err,
            size_t errlen)
{
    if (e->is_interp) {
        double t0 = rt_now_seconds();
        double **igd = NULL;
        if (ig) {
            igd = xcalloc((size_t)m->ninputs + 1, sizeof *igd);
            for (int i = 0; i < m->ninputs; i++)
                igd[i] = xcalloc((size_t)nb * (size_t)input_numel(m, i) + 1, sizeof(double));
        }
        bool ok = interp_grad(m, io, nb, base, (const float *const *)bin, outs, loss_grad, b, igd,
                              gd, err, errlen);
        for (int i = 0; ig && i < m->ninputs; i++) {
            for (int64_t q = 0; q < nb * input_numel(m, i); q++)
                ig[i][q] = (float)igd[i][q];
            free(igd[i]);
        }
        free(igd);
        e->t_backward += rt_now_seconds() - t0; /* the interpreter's forward and backward */
        for (int w = 0; w < m->nweights; w++) {
            for (int64_t i = 0; i < m->weights[w].numel; i++) {
                gf[w][i] = (float)gd[w][i];
                gd[w][i] = 0;
            }
            g[w] = gf[w];
        }
        return ok;
    }
    double t0 = rt_now_seconds();
    if (!engine_run(e, &e->fwd, nb, base, err, errlen)) return false;
    double t1 = rt_now_seconds();
    float **og = xcalloc((size_t)m->noutputs, sizeof *og);
    for (int k = 0; k < m->noutputs; k++) {
        const Node *n = &m->nodes[m->outputs[k]];
        og[k] = e->bd->mem[e->tr.out_grad[k]];
        memset(og[k], 0,
               (size_t)nb * (size_t)type_numel(&n->type) * (n->type.has_time ? m->timesteps : 1) *
                   sizeof(float));
    }
    loss_grad(b, 0, nb, og);
    free(og);
    double t2 = rt_now_seconds();
    if (!engine_run(e, &e->bwd, nb, base, err, errlen)) return false;
    if (ig && !engine_run(e, &e->bwd_in, nb, base, err, errlen)) return false;
    for (int i = 0; ig && i < m->ninputs; i++) {
        size_t bytes = (size_t)nb * (size_t)input_numel(m, i) * sizeof(float);
        if (e->tr.input_grad[i] >= 0)
            memcpy(ig[i], e->bd->mem[e->tr.input_grad[i]], bytes);
        else
            memset(ig[i], 0, bytes);
    }
    double t3 = rt_now_seconds();
    e->t_forward += t1 - t0;
    e->t_loss += t2 - t1;
    e->t_backward += t3 - t2;
    update_running_stats(e, m, nb);
    for (int w = 0; w < m->nweights; w++)
        g[w] = e->tr.weight_grad[w] >= 0 ? e->bd->mem[e->tr.weight_grad[w]] : gf[w];
    return true;
}

/* after the optimiser changed the weights: the binding's packed copies follow */
static bool
engine_weights_changed(Engine *e, char *err, size_t errlen)
{
    if (e->is_interp) return true;
    if (!kir_rebind_weights(e->p, e->bd, e->pool ? rt_pool_rt(e->pool) : NULL, err, errlen))
        return false;
    return !e->is_cuda || rt_cuda_exec_set_weights(e->cx, e->bd->mem, err, errlen) == SNN_OK;
}

/* the host's optimiser over every trained weight (not batchnorm's running statistics), after
 * --clip-grad-norm's clipping of g, then the binding's packed copies (and a device's weights)
 * follow: *t_rebind gets the seconds of that */
static bool
engine_opt_host(Engine *e, Module *m, const Options *o, const RtOptConfig *c, int64_t step,
                float *const *g, float *const *state, float **clip_g, int64_t *clip_n,
                double *t_rebind, char *err, size_t errlen)
{
    int nw = m->nweights;
    if (o->clip_norm > 0) {
        int ng = 0;
        for (int w = 0; w < nw; w++) {
            const Weight *wt = &m->weights[w];
            if (weight_is_trained(m, wt)) {
                clip_g[ng] = g[w];
                clip_n[ng++] = wt->numel;
            }
        }
        rt_clip_grad_norm(clip_g, clip_n, ng, o->clip_norm);
    }
    for (int w = 0; w < nw; w++) {
        Weight *wt = &m->weights[w];
        if (!weight_is_trained(m, wt)) continue;
        rt_opt_step_pool(e->pool, c, step, wt->data, g[w], state[w], state[w] + wt->numel,
                         wt->numel);
    }
    double t0 = rt_now_seconds();
    bool ok = engine_weights_changed(e, err, errlen);
    *t_rebind = rt_now_seconds() - t0;
    return ok;
}

static bool apply_train_block(const Module *m, Options *o);

int
train_emit_kernel(Module *m, const Options *o)
{
    Options merged = *o; /* --explain reports the optimiser the run would use */
    if (!apply_train_block(m, &merged)) return 1;
    o = &merged;
    module_clear_marks(m);
    m->schedule = SCHEDULE_LAYER;
    m->memory = MEMORY_SEPARATE;
    m->is_weights_in_place = strcmp(o->backend, "cuda") != 0; /* as engine_open */
    m->is_train_dense = !passes_include(&o->passes, "events");
    char err[512];
    KTrain tr;
    /* the train-step module: with --grads, the inputs' gradients too, as the run would have
     * them */
    Module *tm = ir_grad(m, o->grads != NULL);
    if (!passes_dump_grad(&o->passes, m, tm)) {
        module_free(tm);
        return 1;
    }
    bool is_ir = strcmp(o->emit ? o->emit : "", "ir") == 0;
    KProgram *p =
        is_ir ? NULL
              : kir_lower_train_for(tm, strcmp(o->backend, "cuda") == 0 ? KTARGET_GPU : KTARGET_CPU,
                                    &tr, err, sizeof err);
    if (!p && !is_ir) {
        fprintf(stderr, "snnc: error: --train --emit=kernel: %s\n", err);
        module_free(tm);
        return 1;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = o->out ? open_memstream(&text, &len) : stdout;
    if (!f) die("out of memory");
    if (is_ir) {
        ir_print(f, tm);
    } else if (o->explain) {
        /* the training step's buffers and memory at --batch, and what lives outside it */
        explain_print(f, p, o->batch);
        int64_t wbytes = 0;
        for (int w = 0; w < m->nweights; w++)
            wbytes += 4 * m->weights[w].numel;
        int nstate = o->optimizer == RT_OPT_SGD ? (o->momentum > 0) : 2;
        fprintf(f,
                "\noutside the program: the weights in f32 %.1f MiB, the optimiser's state "
                "(%s: %d tensor%s a weight) %.1f MiB; the step's buffers above include every "
                "value's every step, the gradients and the weights' packed copies\n",
                (double)wbytes / 1048576.0,
                o->optimizer == RT_OPT_SGD ? "sgd" : o->optimizer == RT_OPT_ADAM ? "adam" : "adamw",
                nstate, nstate == 1 ? "" : "s", (double)(nstate * wbytes) / 1048576.0);
    } else {
        fprintf(
            f,
            "# the training step: kernels 0..%d the forward; the caller writes the loss gradient "
            "into",
            tr.nforward - 1);
        for (int k = 0; k < m->noutputs; k++)
            fprintf(f, " @%s", p->bufs[tr.out_grad[k]].name);
        fprintf(f, "; kernels %d..%d the backward, leaving the weights' gradients in", tr.nforward,
                p->nkernels - 1);
        for (int w = 0; w < m->nweights; w++)
            if (tr.weight_grad[w] >= 0) fprintf(f, " @%s", p->bufs[tr.weight_grad[w]].name);
        fputs("\n", f);
        kir_print(f, p);
    }
    int rc = 0;
    if (f != stdout) {
        if (fclose(f) != 0) die("out of memory");
        if (rt_write_file(o->out, text, len, err, sizeof err) != 0) {
            diag_reader_error(o->out, err);
            rc = 1;
        }
        free(text);
    }
    kir_free(p);
    module_free(tm);
    return rc;
}

/* The model's train block under the command line: each setting the command line did not give
 * (frontend/lower.c checked the keys and values), then the checks of the settings together */
static bool
apply_train_block(const Module *m, Options *o)
{
    for (int i = 0; i < m->ntrain; i++) {
        const TrainItem *t = &m->train[i];
        const char *k = t->key, *w = t->word ? t->word : "";
        if (!strcmp(k, "epochs") && !o->has_epochs)
            o->epochs = (int64_t)t->num;
        else if (!strcmp(k, "batch") && !o->has_batch)
            o->batch = (int)t->num;
        else if (!strcmp(k, "loss") && !o->has_loss)
            o->loss = !strcmp(w, "ce") || !strcmp(w, "ce_count") ? RT_LOSS_CE
                      : !strcmp(w, "ce_rate")                    ? RT_LOSS_CE_RATE
                      : !strcmp(w, "mse_count")                  ? RT_LOSS_MSE_COUNT
                      : !strcmp(w, "mse_membrane")               ? RT_LOSS_MSE_MEMBRANE
                                                                 : RT_LOSS_MSE;
        else if (!strcmp(k, "loss_output") && !o->loss_output)
            o->loss_output = t->word;
        else if (!strcmp(k, "optimizer") && !o->has_optimizer)
            o->optimizer = !strcmp(w, "sgd")    ? RT_OPT_SGD
                           : !strcmp(w, "adam") ? RT_OPT_ADAM
                                                : RT_OPT_ADAMW;
        else if (!strcmp(k, "lr") && !o->has_lr)
            o->lr = t->num, o->has_lr = true;
        else if (!strcmp(k, "momentum") && !o->has_momentum)
            o->momentum = t->num, o->has_momentum = true;
        else if (!strcmp(k, "weight_decay") && !o->has_weight_decay)
            o->weight_decay = t->num, o->has_weight_decay = true;
        else if (!strcmp(k, "nesterov") && !o->nesterov)
            o->nesterov = !strcmp(w, "true");
        else if (!strcmp(k, "schedule") && !o->has_schedule) {
            o->cosine = !strcmp(w, "cosine");
            o->step_schedule = !strcmp(w, "step");
        } else if (!strcmp(k, "step_size") && !o->step_size)
            o->step_size = (int64_t)t->num;
        else if (!strcmp(k, "gamma") && !o->has_gamma)
            o->gamma = t->num, o->has_gamma = true;
        else if (!strcmp(k, "clip_grad_norm") && !(o->clip_norm > 0))
            o->clip_norm = t->num;
    }
    const char *why = NULL;
    if (o->step_schedule && !o->step_size)
        why = "--schedule=step needs --step-size=N";
    else if (!o->step_schedule && o->step_size)
        why = "--step-size is for --schedule=step";
    else if (!o->step_schedule && o->has_gamma)
        why = "--gamma is for --schedule=step";
    else if (o->nesterov && (o->optimizer != RT_OPT_SGD || !(o->momentum > 0)))
        why = "--nesterov is SGD with momentum: give --optimizer=sgd and --momentum";
    else if (o->has_momentum && o->momentum != 0 && o->optimizer != RT_OPT_SGD)
        why = "--momentum is for --optimizer=sgd";
    if (!why) return true;
    if (m->ntrain)
        diag_error(m->train[0].loc,
                   "%s (the command line together with the model's train "
                   "block, where each option is its name without the dashes: step_size, ...)",
                   why);
    else
        fprintf(stderr, "snnc: error: %s\n", why);
    return false;
}

/* the optimiser's state of every weight (2 floats an element) to zero */
static void
zero_states(const Module *m, float **state)
{
    for (int w = 0; w < m->nweights; w++)
        memset(state[w], 0,
               2 * (size_t)(m->weights[w].numel ? m->weights[w].numel : 1) * sizeof(float));
}

int
train(Module *m, const Options *o)
{
    Options merged = *o; /* the command line over the model's train block */
    if (!apply_train_block(m, &merged)) return 1;
    o = &merged;
    module_clear_marks(m); /* the weights train in f32, whatever storage the model states */
    if (o->init) {
        m->weights_path = NULL;
        if (o->seed >= 0) m->seed = o->seed;
    }
    if (!check_trainable(m, o)) return 1;
    /* the weights: PyTorch's initialisation (--init), the model's or --weights; a checkpoint's
     * come with it (--resume, below: the file is read once the run's settings are known) */
    if (!o->resume && !(o->init ? weights_bind(m, NULL) : bind_weights(m, o))) return 1;
    /* then --seed keys the Poisson encoders whose seed is the model's: the interpreter reads it
     * from its options, compiled code has it baked in from m->seed (a model with weights trained
     * its compiled step on its own seed with --seed given: random model 863) */
    if (o->seed >= 0) m->seed = o->seed;
    Sets sets;
    if (!load_sets(m, o, &sets)) {
        free_sets(&sets);
        return 1;
    }
    Data *d = &sets.train;
    int lo = loss_output(m, o);
    int64_t N = d->n, k = type_numel(&m->nodes[m->outputs[lo]].type);
    RtOptConfig cfg = rt_opt_defaults((RtOptimizer)o->optimizer);
    if (o->has_lr) cfg.lr = o->lr;
    cfg.momentum = o->momentum;
    cfg.nesterov = o->nesterov;
    if (o->has_weight_decay) cfg.weight_decay = o->weight_decay;
    uint64_t seed = (uint64_t)(o->seed >= 0 ? o->seed : m->seed);
    /* batchnorm trains on the batch's statistics and keeps running ones for testing */
    InterpOptions io = {o->precision, o->seed, false, true};

    /* per weight: the interpreter's gradient (double sums), the float gradient the optimiser reads
     * (the interpreter's rounded, or zeros where none flows), and the optimiser's state;
     * batchnorm statistics are not trained */
    int nw = m->nweights;
    double **gd = xcalloc((size_t)nw, sizeof *gd);
    float **gsrc = xcalloc((size_t)nw, sizeof *gsrc); /* this step's gradient of each weight */
    float **gf = xcalloc((size_t)nw, sizeof *gf), **state = xcalloc((size_t)nw, sizeof *state);
    for (int w = 0; w < nw; w++) {
        size_t n = (size_t)m->weights[w].numel;
        gd[w] = xcalloc(n ? n : 1, sizeof(double));
        gf[w] = xcalloc(n ? n : 1, sizeof(float));
        /* Adam's two moments (SGD's momentum): on huge pages where large, as the step's arena:
         * f3's 103 MB took 0.17 s of page faults in the conv net's first step on 4 KB pages.
         * Zeroed (so made resident) after the step is compiled, whose passes' memory would
         * otherwise stack on theirs: the conv net's peak RSS; a checkpoint's read before it. */
        state[w] = rt_big_alloc(2 * (n ? n : 1) * sizeof(float));
        if (!state[w]) die("out of memory");
    }
    float **bin = xcalloc((size_t)d->ninputs, sizeof *bin),
          **outs = xcalloc((size_t)m->noutputs, sizeof *outs);
    for (int i = 0; i < d->ninputs; i++)
        bin[i] = xmalloc((size_t)o->batch * (size_t)d->numel[i] * sizeof(float));
    for (int j = 0; j < m->noutputs; j++) {
        const Node *n = &m->nodes[m->outputs[j]];
        outs[j] = xmalloc((size_t)o->batch * (size_t)type_numel(&n->type) *
                          (size_t)(n->type.has_time ? m->timesteps : 1) * sizeof(float));
    }
    float *blabels = xmalloc((size_t)o->batch * sizeof(float));
    /* --grads: the first batch's input gradients */
    float **igrad = xcalloc((size_t)m->ninputs + 1, sizeof *igrad);
    for (int i = 0; o->grads && i < m->ninputs; i++)
        igrad[i] = xcalloc((size_t)o->batch * (size_t)input_numel(m, i) + 1, sizeof(float));
    float **clip_g = xcalloc((size_t)nw + 1, sizeof *clip_g);
    int64_t *clip_n = xcalloc((size_t)nw + 1, sizeof *clip_n);
    int64_t *order = xmalloc((size_t)(N ? N : 1) * sizeof *order);
    bool tty = isatty(2) && !o->quiet;
    int rc = 0;
    int64_t step = 0, start = 0;
    if (o->resume) zero_states(m, state);
    if (o->resume && !read_checkpoint(m, o, state, &start, &step, N, seed)) rc = 1;
    if (rc == 0 && start >= o->epochs) {
        fprintf(stderr, "snnc: error: %s: already %lld epochs trained; --epochs=%lld asks for no "
                        "more\n", o->resume, (long long)start, (long long)o->epochs);
        rc = 1;
    }
    Engine eng;
    memset(&eng, 0, sizeof eng);
    if (rc == 0 && !engine_open(&eng, m, o, bin, outs)) rc = 1;
#ifdef __GLIBC__
    /* what compiling the step freed (LLVM's passes) back to the system before the step's buffers
     * fill: the heap would keep it resident under the training's peak */
    malloc_trim(0);
#endif
    if (!o->resume) zero_states(m, state);
    char err[512];
    /* on the GPU the optimiser runs there too, but for --clip-grad-norm (the host takes the norm)
     */
    eng.dev_opt = rc == 0 && eng.is_cuda && !(o->clip_norm > 0);
    eng.host_grads = o->grads != NULL;
    if (eng.dev_opt && !engine_opt_begin(&eng, m, &cfg, state, err, sizeof err)) {
        fprintf(stderr, "snnc: error: --device=cuda: the weights to the device: %s\n", err);
        rc = 1;
    }
    if (!o->quiet && rc == 0)
        printf("training %s on %lld samples: %lld epoch%s, batch %d, %s, lr %g, loss %s, T = %d "
               "(%s, %s)\n",
               m->name ? m->name : "the model", (long long)N, (long long)o->epochs,
               o->epochs == 1 ? "" : "s", o->batch,
               cfg.kind == RT_OPT_SGD    ? "sgd"
               : cfg.kind == RT_OPT_ADAM ? "adam"
                                         : "adamw",
               cfg.lr, loss_name((RtLoss)o->loss), m->timesteps,
               eng.is_interp ? "reference interpreter"
               : eng.is_llvm ? "compiled for this CPU"
                             : "kernel-IR evaluator",
               o->precision == INTERP_F32 ? "float32" : "double");
    /* --report=json: one object, the last line of stdout, built up epoch by epoch */
    char *json = NULL;
    size_t json_len = 0;
    FILE *js = o->report_json ? open_memstream(&json, &json_len) : NULL;
    if (o->report_json && !js) die("out of memory");
    PlotCurves *curves = o->plot && rc == 0 ? plot_curves_new(o->plot, m->name) : NULL;
    if (o->plot && !curves) rc = 1;
    for (int64_t e = start; e < o->epochs && rc == 0; e++) {
        RtOptConfig ecfg = cfg;
        if (o->cosine) ecfg.lr = rt_cosine_lr(cfg.lr, e, o->epochs);
        if (o->step_size > 0) ecfg.lr = rt_step_lr(cfg.lr, e, o->step_size, o->gamma);
        epoch_order(order, N, seed, e, !o->no_shuffle);
        double t0 = rt_now_seconds(), loss_sum = 0, t_opt = 0, t_rebind = 0;
        eng.t_forward = eng.t_loss = eng.t_backward = 0;
        int64_t correct = 0, done = 0;
        for (int64_t first = 0; first < N && rc == 0; first += o->batch) {
            int nb = (int)(N - first < o->batch ? N - first : o->batch);
            for (int b = 0; b < nb; b++) {
                int64_t s = order[first + b];
                for (int i = 0; i < d->ninputs; i++)
                    gather(&sets, i, s, bin[i] + (size_t)b * (size_t)d->numel[i]);
                blabels[b] = d->labels[s];
            }
            Batch bt = {{(RtLoss)o->loss, m->timesteps, o->loss_on, o->loss_off},
                        blabels,
                        outs,
                        lo,
                        k,
                        nb,
                        0,
                        0,
                        false,
                        false};
            /* Poisson draws keyed by the epoch and position: fresh noise every epoch */
            if (!engine_step(&eng, m, &io, nb, e * N + first, bin, outs, &bt, gd, gf, gsrc,
                             step == 0 && o->grads ? igrad : NULL, err, sizeof err)) {
                fprintf(stderr, "snnc: error: %s\n", err);
                rc = 1;
                break;
            }
            if (bt.bad_label) {
                fprintf(stderr,
                        "snnc: error: a label in batch at sample %lld is not a class of "
                        "0..%lld\n",
                        (long long)first, (long long)(k - 1));
                rc = 1;
                break;
            }
            if (bt.bad_loss) {
                fprintf(stderr,
                        "snnc: error: the loss of the batch at sample %lld is not finite: output "
                        "'%s' holds infinite or NaN values (look at the inputs and weights)\n",
                        (long long)first, m->nodes[m->outputs[lo]].name);
                rc = 1;
                break;
            }
            step++;
            if (step == 1 && o->grads && !write_grads(m, gsrc, igrad, nb, o->grads)) {
                rc = 1;
                break;
            }
            double to0 = rt_now_seconds(), t_reb = 0;
            eng.host_grads = !eng.dev_opt;
            bool updated = eng.dev_opt ? engine_opt_device(&eng, m, &ecfg, step, err, sizeof err)
                                       : engine_opt_host(&eng, m, o, &ecfg, step, gsrc, state,
                                                         clip_g, clip_n, &t_reb, err, sizeof err);
            t_opt += rt_now_seconds() - to0 - t_reb;
            t_rebind += t_reb;
            if (!updated) {
                fprintf(stderr, "snnc: error: %s%s\n",
                        eng.dev_opt ? "--device=cuda: the optimiser: " : "", err);
                rc = 1;
                break;
            }
            loss_sum += bt.loss_sum * nb;
            correct += bt.correct;
            done += nb;
            if (tty) {
                double el = rt_now_seconds() - t0;
                fprintf(stderr,
                        "\repoch %lld/%lld  %lld/%lld  loss %.4f  accuracy %.4f  %.0f images/s ",
                        (long long)e + 1, (long long)o->epochs, (long long)done, (long long)N,
                        loss_sum / (double)done, (double)correct / (double)done,
                        el > 0 ? (double)done / el : 0);
            }
        }
        if (tty) fputc('\n', stderr);
        if (rc) break;
        double secs = rt_now_seconds() - t0;
        if (!engine_sync(&eng, m, &cfg, state, err, sizeof err)) {
            fprintf(stderr, "snnc: error: --device=cuda: the weights from the device: %s\n", err);
            rc = 1;
            break;
        }
        double acc = test_accuracy(&eng, m, o, &io, &sets, bin, outs, err, sizeof err);
        if (isnan(acc)) {
            fprintf(stderr, "snnc: error: testing: %s\n", err);
            rc = 1;
            break;
        }
        if (write_weights(m, o->out) != 0 ||
            (o->checkpoint && !write_checkpoint(m, o, state, e + 1, step, N, seed)) ||
            (curves && !plot_curves_add(curves, e + 1, loss_sum / (double)(done ? done : 1),
                                        (double)correct / (double)(done ? done : 1), acc))) {
            rc = 1;
            break;
        }
        double train_loss = loss_sum / (double)(done ? done : 1);
        double train_acc = (double)correct / (double)(done ? done : 1);
        if (!o->quiet) {
            printf("epoch %lld/%lld: loss %.6f, train accuracy %.4f", (long long)e + 1,
                   (long long)o->epochs, train_loss, train_acc);
            if (acc >= 0) printf(", test accuracy %.4f (%lld images)", acc, (long long)sets.ntest);
            printf(", %.0f images/s, %.1f s, lr %g; weights written to %s\n",
                   secs > 0 ? (double)done / secs : 0, secs, ecfg.lr, o->out);
            fflush(stdout);
        }
        if (js)
            fprintf(
                js,
                "%s{\"epoch\": %lld, \"loss\": %.9g, \"train_accuracy\": %.6f, "
                "\"test_accuracy\": %.6f, \"images_per_s\": %.1f, \"seconds\": %.3f, "
                "\"lr\": %.9g, \"peak_rss_mb\": %.1f, \"device_mb\": %.1f, "
                "\"phases\": {\"forward\": %.3f, "
                "\"loss\": %.3f, \"backward\": %.3f, \"optimiser\": %.3f, \"weights\": %.3f}}",
                e ? ", " : "", (long long)e + 1, train_loss, train_acc, acc,
                done / (secs > 0 ? secs : 1), secs, ecfg.lr, peak_rss_mb(),
                (double)(rt_cuda_exec_device_bytes(eng.cx) + rt_cuda_exec_device_bytes(eng.cxi)) /
                    (1 << 20),
                eng.t_forward, eng.t_loss, eng.t_backward, t_opt, t_rebind);
    }
    if (js) {
        fclose(js);
        printf("{\"epochs\": [%s], \"samples\": %lld, \"ok\": %s}\n", json, (long long)N,
               rc == 0 ? "true" : "false");
        free(json);
    }
    plot_curves_free(curves);
    for (int w = 0; w < nw; w++) {
        free(gd[w]);
        free(gf[w]);
        free(state[w]);
    }
    free(gd);
    free(gsrc);
    free(gf);
    free(state);
    for (int i = 0; i < d->ninputs; i++)
        free(bin[i]);
    free(bin);
    for (int j = 0; j < m->noutputs; j++)
        free(outs[j]);
    free(outs);
    free(blabels);
    for (int i = 0; i < m->ninputs; i++)
        free(igrad[i]);
    free(igrad);
    free(clip_g);
    free(clip_n);
    free(order);
    engine_close(&eng);
    free_sets(&sets);
    return rc;
}
