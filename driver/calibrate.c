/* calibrate.c: --precision=fp16|bf16|mixed with calibration inputs. The storage of every dense and
 * conv weight (Node.wstore) and output (Node.astore; --narrow picks which of the two) is chosen,
 * or checked, by running the model on the calibration samples with the reference interpreter in
 * float32 (the arithmetic every compiled backend has; narrowed weights and outputs have the same
 * values everywhere, so what the interpreter sees is what they compute) and comparing every spike
 * of every layer, and every output element, with the model as given.
 *   fp16, bf16: every tensor narrowed; the report gives the agreement measured.
 *   mixed:      each tensor in turn (layers in order, a layer's weight, then its output) is tried
 *               in f16 on top of those kept so far, and kept only when no spike and no output of
 *               any sample changes (or, with --tolerance, at most that fraction of them: the
 *               changes of everything kept so far against the model as given).
 *   With --tolerance, fp16 and bf16 fail when they change more than that.
 * The spikes are read through a calibration copy of the module (module_clone, its marks cleared
 * with module_clear_marks, an extra `sequence` output per spiking layer: module_add_output).
 * --events=auto reads the inputs of spike-fed dense and conv layers through the same kind of copy
 * and measures how often they are nonzero (events_calibrate). */
#include "driver/calibrate.h"

#include "passes/pass.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* what one configuration changed against the baseline */
typedef struct Diff {
    int64_t spikes, spikes_changed;   /* elements of the spike sequences */
    int64_t outputs, outputs_changed; /* elements of the model's own outputs */
    int first_layer;                  /* the first spiking layer (index into Cal.layer) that changed */
} Diff;

typedef struct Cal {
    const Module *m;
    Module *cm;          /* the calibration copy */
    int nlayers;         /* values read: cm's outputs [nout, nout + nlayers) */
    ValueId *layer;      /* their nodes in m (spiking layers; for events, layers' inputs) */
    int nout;            /* m's outputs */
    int nrecorded;       /* of which the last are --record's, not compared */
    int64_t *per;        /* cm output j: floats per sample */
    float **base;        /* baseline outputs, all samples */
    float **cur;         /* one batch */
    float **orig;        /* m's weights as bound, per weight (before any rounding here) */
    int *w_of;           /* cm's weight j is m's weight w_of[j] (the copy orders nodes anew) */
    const float *const *inputs;
    const int64_t *numel;
    int64_t n;
    int batch;
} Cal;

/* c->cm: the calibration copy of c->m reading the c->nlayers values c->layer, with weights of its
 * own mapped to m's (c->w_of; m's as bound kept in c->orig) and room for every output of every
 * sample (c->base) and of one batch (c->cur). False after reporting an error. */
static bool
open_copy(Cal *c)
{
    const Module *m = c->m;
    /* a copy without marks (the interpreter has no use for them; storage is what is tried) and
     * with an output for each value read */
    c->cm = module_clone(m);
    module_clear_marks(c->cm);
    for (int i = 0; i < c->nlayers; i++) {
        char name[32];
        snprintf(name, sizeof name, "calibration_%d", i);
        module_add_output(c->cm, c->layer[i], name);
    }
    c->nout = m->noutputs;
    int no = c->cm->noutputs;
    c->per = xcalloc((size_t)no + 1, sizeof *c->per);
    c->base = xcalloc((size_t)no + 1, sizeof *c->base);
    c->cur = xcalloc((size_t)no + 1, sizeof *c->cur);
    c->orig = xcalloc((size_t)m->nweights + 1, sizeof *c->orig);
    c->w_of = xcalloc((size_t)m->nweights + 1, sizeof *c->w_of);
    for (int j = 0; j < no; j++) {
        const Node *n = &c->cm->nodes[c->cm->outputs[j]];
        c->per[j] = type_numel(&n->type) * (n->type.has_time ? c->cm->timesteps : 1);
        c->base[j] = malloc((size_t)(c->per[j] * c->n + 1) * sizeof(float));
        c->cur[j] = malloc((size_t)(c->per[j] * c->batch + 1) * sizeof(float));
        if (!c->base[j] || !c->cur[j]) die("out of memory for calibration outputs");
    }
    for (int i = 0; i < m->nweights; i++) {
        size_t bytes = (size_t)(m->weights[i].numel + 1) * sizeof(float);
        c->orig[i] = xmalloc(bytes);
        memcpy(c->orig[i], m->weights[i].data, (size_t)m->weights[i].numel * sizeof(float));
    }
    for (int j = 0; j < m->nweights; j++) {
        int i = module_find_weight(m, c->cm->weights[j].name);
        if (i < 0 || m->weights[i].numel != c->cm->weights[j].numel)
            die("calibration: weight '%s' of the copy is not the model's", c->cm->weights[j].name);
        c->w_of[j] = i;
        c->cm->weights[j].data = arena_alloc(&c->cm->arena, (size_t)(m->weights[i].numel + 1) *
                                                                sizeof(float));
    }
    return true;
}

static void
close_copy(Cal *c)
{
    for (int j = 0; c->base && j < c->cm->noutputs; j++) {
        free(c->base[j]);
        free(c->cur[j]);
    }
    for (int i = 0; c->orig && i < c->m->nweights; i++)
        free(c->orig[i]);
    free(c->per);
    free(c->base);
    free(c->cur);
    free(c->orig);
    free(c->w_of);
    free(c->layer);
    module_free(c->cm);
}

/* cm's weights: m's as bound, rounded where store[v] says, and its layers' outputs stored as
 * astore[v] says (both indexed by m's nodes; a layer of the copy is found through its weights) */
static void
set_weights(Cal *c, const WeightStore *store, const WeightStore *astore)
{
    for (int j = 0; j < c->cm->nweights; j++) {
        Weight *w = &c->cm->weights[j];
        int i = c->w_of[j];
        memcpy(w->data, c->orig[i], (size_t)w->numel * sizeof(float));
        c->cm->nodes[w->node].wstore = store[c->m->weights[i].node];
        c->cm->nodes[w->node].astore = astore[c->m->weights[i].node];
    }
    weights_round_stored(c->cm);
}

/* run every sample; into base (is_base) or compared with it into d */
static bool
run_all(Cal *c, bool is_base, Diff *d)
{
    InterpOptions io = {INTERP_F32, -1, false, false};
    const float **in = xmalloc(((size_t)c->cm->ninputs + 1) * sizeof *in);
    float **out = xmalloc(((size_t)c->cm->noutputs + 1) * sizeof *out);
    memset(d, 0, sizeof *d);
    d->first_layer = -1;
    char err[512];
    bool ok = true;
    for (int64_t s = 0; s < c->n && ok; s += c->batch) {
        int b = (int)(c->n - s < c->batch ? c->n - s : c->batch);
        for (int k = 0; k < c->cm->ninputs; k++)
            in[k] = c->inputs[k] + s * c->numel[k];
        for (int j = 0; j < c->cm->noutputs; j++)
            out[j] = is_base ? c->base[j] + s * c->per[j] : c->cur[j];
        if (!interp_run(c->cm, &io, b, s, in, out, NULL, err, sizeof err)) {
            fprintf(stderr, "snnc: error: calibration: %s\n", err);
            ok = false;
            break;
        }
        if (is_base) continue;
        for (int j = 0; j < c->cm->noutputs; j++) {
            if (j >= c->nout - c->nrecorded && j < c->nout) continue;
            const float *ref = c->base[j] + s * c->per[j];
            int64_t changed = 0, total = (int64_t)b * c->per[j];
            for (int64_t i = 0; i < total; i++)
                changed += memcmp(&ref[i], &c->cur[j][i], sizeof(float)) != 0;
            bool is_spikes = j >= c->nout;
            *(is_spikes ? &d->spikes : &d->outputs) += total;
            *(is_spikes ? &d->spikes_changed : &d->outputs_changed) += changed;
            if (is_spikes && changed && (d->first_layer < 0 || j - c->nout < d->first_layer))
                d->first_layer = j - c->nout;
        }
    }
    free(in);
    free(out);
    return ok;
}

static double
percent_equal(int64_t changed, int64_t total)
{
    return total ? 100.0 * (double)(total - changed) / (double)total : 100.0;
}

static const char *
layer_name(const Module *m, ValueId v)
{
    return m->nodes[v].name ? m->nodes[v].name : node_op_name(m, &m->nodes[v]);
}

static void
report_diff(const Cal *c, const char *what, const Diff *d)
{
    fprintf(stderr, "  %s: spikes %.4f%% equal (%lld of %lld changed), outputs %.4f%% equal",
            what, percent_equal(d->spikes_changed, d->spikes), (long long)d->spikes_changed,
            (long long)d->spikes, percent_equal(d->outputs_changed, d->outputs));
    if (d->first_layer >= 0)
        fprintf(stderr, "; first changed layer %s", layer_name(c->m, c->layer[d->first_layer]));
    fputc('\n', stderr);
}

static int64_t
weight_bytes(const Module *m, const WeightStore *store)
{
    int64_t bytes = 0;
    for (int i = 0; i < m->nweights; i++) {
        const Node *n = &m->nodes[m->weights[i].node];
        bool is_16 = node_stored_weight(m, n) == i && store[m->weights[i].node] != WSTORE_F32;
        bytes += m->weights[i].numel * (is_16 ? 2 : 4);
    }
    return bytes;
}

/* dense and conv layers whose output is stored narrower (all: every dense and conv layer) */
static int
narrow_outputs(const Module *m, const WeightStore *astore, int *all)
{
    int n = 0;
    *all = 0;
    for (ValueId v = 0; v < m->nnodes; v++) {
        if (m->nodes[v].op != OP_DENSE && !op_is_conv(m->nodes[v].op)) continue;
        ++*all;
        n += astore[v] != WSTORE_F32;
    }
    return n;
}

/* layer v's weight, and its output, that --precision may narrow: unstated in the model, and
 * asked for (--narrow) */
static bool
is_free_weight(const Module *m, ValueId v, const PrecisionRequest *rq)
{
    const Node *n = &m->nodes[v];
    return rq->weights && node_stored_weight(m, n) >= 0 && n->wstore_loc.line == 0;
}

/* mixed: a weight past the narrower type's range stays f32 (stored narrower it would hold inf) */
static bool
fits(const Module *m, ValueId v, WeightStore s)
{
    int64_t first;
    return weights_overflow(&m->weights[node_stored_weight(m, &m->nodes[v])], s, &first) == 0;
}

static bool
is_free_output(const Module *m, ValueId v, const PrecisionRequest *rq)
{
    return rq->activations && m->nodes[v].astore_loc.line == 0 && !ir_activation_problem(m, v);
}

/* the changes d measured are within the fractions --tolerance allows */
static bool
within(const Diff *d, const PrecisionRequest *rq)
{
    return (double)d->spikes_changed <= rq->tolerance * (double)d->spikes &&
           (double)d->outputs_changed <= rq->tolerance_outputs * (double)d->outputs;
}

/* mixed: tensor slot[v] of layer v in f16 on top of what is kept; kept only within --tolerance
 * (by default: if nothing changes) */
static bool
try_narrow(Cal *c, const PrecisionRequest *rq, WeightStore *store, WeightStore *astore,
           WeightStore *slot, const char *what)
{
    Diff d;
    *slot = rq->narrow;
    set_weights(c, store, astore);
    bool ok = run_all(c, false, &d);
    bool keep = ok && within(&d, rq);
    if (!keep) *slot = WSTORE_F32;
    if (ok && !rq->quiet) {
        char line[200];
        snprintf(line, sizeof line, "%s %s %s", what, wstore_name(rq->narrow),
                 keep ? "kept" : "refused");
        report_diff(c, line, &d);
    }
    return ok;
}

bool
precision_calibrate(Module *m, const PrecisionRequest *rq)
{
    Cal c = {.m = m,
             .inputs = rq->inputs,
             .numel = rq->numel,
             .n = rq->n,
             .batch = rq->batch,
             .nrecorded = rq->nrecorded};
    c.layer = xmalloc(((size_t)m->nnodes + 1) * sizeof *c.layer);
    for (ValueId v = 0; v < m->nnodes; v++) {
        const Node *n = &m->nodes[v];
        if (n->op == OP_NEURON && (n->type.dtype == DT_SPIKE || n->type.dtype == DT_I8))
            c.layer[c.nlayers++] = v;
    }
    if (!open_copy(&c)) {
        close_copy(&c);
        return false;
    }
    WeightStore *store = xcalloc((size_t)m->nnodes + 1, sizeof *store);
    WeightStore *astore = xcalloc((size_t)m->nnodes + 1, sizeof *astore);
    /* the baseline: the model as given (storage written in the model stays) */
    for (ValueId v = 0; v < m->nnodes; v++) {
        store[v] = m->nodes[v].wstore;
        astore[v] = m->nodes[v].astore;
    }
    set_weights(&c, store, astore);
    bool ok = run_all(&c, true, &(Diff){0});
    if (ok && !rq->quiet)
        fprintf(stderr, "snnc: precision %s: calibrating on %lld samples (%d spiking layers, the "
                        "interpreter in float32)\n",
                rq->mode, (long long)c.n, c.nlayers);
    int64_t wbytes = weight_bytes(m, store);
    if (ok && rq->is_mixed) {
        for (ValueId v = 0; v < m->nnodes && ok; v++) {
            char what[160];
            snprintf(what, sizeof what, "%s weights", layer_name(m, v));
            if (is_free_weight(m, v, rq) && fits(m, v, rq->narrow))
                ok = try_narrow(&c, rq, store, astore, &store[v], what);
            snprintf(what, sizeof what, "%s activations", layer_name(m, v));
            if (ok && is_free_output(m, v, rq))
                ok = try_narrow(&c, rq, store, astore, &astore[v], what);
        }
    } else if (ok) {
        for (ValueId v = 0; v < m->nnodes; v++) {
            if (is_free_weight(m, v, rq)) {
                store[v] = rq->narrow;
                ok = weights_check_store(m, v, rq->narrow) && ok; /* fp16, bf16: said, not done */
            }
            if (is_free_output(m, v, rq)) astore[v] = rq->narrow;
        }
    }
    if (ok && !rq->is_mixed) {
        set_weights(&c, store, astore);
        Diff d;
        ok = run_all(&c, false, &d);
        if (ok && !rq->quiet) {
            char what[64];
            snprintf(what, sizeof what, "every %s %s",
                     !rq->activations ? "weight" : !rq->weights ? "layer output" : "tensor",
                     wstore_name(rq->narrow));
            report_diff(&c, what, &d);
        }
        if (ok && rq->has_tolerance && !within(&d, rq)) {
            fprintf(stderr, "snnc: error: precision %s changes %.6g of the spikes and %.6g of the "
                            "outputs on the calibration samples, more than --tolerance=%g,%g\n",
                    rq->mode, d.spikes ? (double)d.spikes_changed / (double)d.spikes : 0.0,
                    d.outputs ? (double)d.outputs_changed / (double)d.outputs : 0.0,
                    rq->tolerance, rq->tolerance_outputs);
            ok = false;
        }
    }
    if (ok) {
        for (ValueId v = 0; v < m->nnodes; v++) {
            m->nodes[v].wstore = store[v];
            m->nodes[v].astore = astore[v];
        }
        ok = weights_round_stored(m);
        if (ok && !rq->quiet) {
            if (rq->weights)
                fprintf(stderr, "snnc: precision %s: weights %.2f MB -> %.2f MB\n", rq->mode,
                        (double)wbytes / 1e6, (double)weight_bytes(m, store) / 1e6);
            int all, n = narrow_outputs(m, astore, &all);
            if (rq->activations)
                fprintf(stderr, "snnc: precision %s: outputs of %d of %d dense and conv layers in 16 "
                                "bits (--explain gives the arena)\n", rq->mode, n, all);
        }
    }
    free(store);
    free(astore);
    close_copy(&c);
    return ok;
}

void
precision_set_all(Module *m, WeightStore narrow, bool weights, bool activations)
{
    PrecisionRequest rq = {.weights = weights, .activations = activations};
    for (ValueId v = 0; v < m->nnodes; v++) {
        if (is_free_weight(m, v, &rq)) m->nodes[v].wstore = narrow;
        if (is_free_output(m, v, &rq)) m->nodes[v].astore = narrow;
    }
}

bool
events_calibrate(Module *m, const float *const *inputs, const int64_t *numel, int64_t n,
                 int batch, bool quiet)
{
    Cal c = {.m = m, .inputs = inputs, .numel = numel, .n = n, .batch = batch};
    c.layer = xmalloc(((size_t)m->nnodes + 1) * sizeof *c.layer);
    int *reads = xmalloc(((size_t)m->nnodes + 1) * sizeof *reads); /* layer v reads c.layer[i] */
    for (ValueId v = 0; v < m->nnodes; v++) {
        const Node *l = &m->nodes[v];
        reads[v] = -1;
        if (!node_can_list_events(m, l) || l->is_events) continue; /* `events` stated: it stays */
        int i = 0;
        while (i < c.nlayers && c.layer[i] != l->args[0])
            i++;
        if (i == c.nlayers) c.layer[c.nlayers++] = l->args[0];
        reads[v] = i;
    }
    if (c.nlayers == 0) {
        if (!quiet)
            fprintf(stderr, "snnc: events: no layer reads spikes into event lists; nothing to "
                            "calibrate\n");
        free(c.layer);
        free(reads);
        return true;
    }
    bool ok = open_copy(&c);
    WeightStore *store = xcalloc((size_t)m->nnodes + 1, sizeof *store);
    WeightStore *astore = xcalloc((size_t)m->nnodes + 1, sizeof *astore);
    double *rate = xcalloc((size_t)c.nlayers + 1, sizeof *rate);
    if (ok) {
        for (ValueId v = 0; v < m->nnodes; v++) {
            store[v] = m->nodes[v].wstore;
            astore[v] = m->nodes[v].astore;
        }
        set_weights(&c, store, astore);
        ok = run_all(&c, true, &(Diff){0});
    }
    for (int i = 0; ok && i < c.nlayers; i++) {
        const float *x = c.base[c.nout + i];
        int64_t total = c.per[c.nout + i] * c.n, nonzero = 0;
        for (int64_t k = 0; k < total; k++)
            nonzero += x[k] != 0;
        rate[i] = total ? (double)nonzero / (double)total : 0;
    }
    if (ok && !quiet)
        fprintf(stderr, "snnc: events: input firing rates on %lld calibration samples (the "
                        "interpreter in float32; %s sums):\n",
                (long long)c.n, m->accumulate == ACC_F32 ? "float" : "exact");
    for (ValueId v = 0; ok && v < m->nnodes; v++) {
        if (reads[v] < 0) continue;
        Node *l = &m->nodes[v];
        l->has_input_rate = true;
        l->input_rate = rate[reads[v]];
        double cross = events_crossover(m, l);
        char below[48] = "at any rate";
        if (cross <= 1) snprintf(below, sizeof below, "below %.0f%%", 100 * cross);
        if (!quiet)
            fprintf(stderr, "  %s (%s): %.2f%% of its inputs nonzero: %s (event lists %s)\n",
                    node_layer_name(m, l), node_op_name(m, l), 100 * l->input_rate,
                    l->input_rate >= cross ? "dense kernel" : "event lists", below);
    }
    free(store);
    free(astore);
    free(rate);
    free(reads);
    close_copy(&c);
    return ok;
}
