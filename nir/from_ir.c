/* A compiled model → a NIR graph (a NirObj tree that h5write.c stores). What NIR can express is
 * written as NIR's nodes; what it cannot is an error naming the layer and why. Neuron layers are
 * exported where their equations are one of NIR's under snnc's own reading of NIR (to_snn.c): the
 * neurons a .nir import generates (NIR_LIF, ...) and the prelude's snnTorch and SpikingJelly neurons,
 * with their time constants written for the chosen dt (v <- beta v + I as tau = dt/(1 - beta),
 * r = tau/dt, the exporters' convention). Reset kind and timing, which NIR cannot say per layer, are
 * reported as the import options that reproduce the model, and stored in the graph's metadata. */
#include "frontend/frontend.h"
#include "nir/nir.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Ex {
    const Module *m;
    double dt;
    bool impulses;       /* IF, I and synaptic gains written for --impulses readers */
    char *err;
    size_t errlen;
    char **names;        /* per node: its NIR node name (NULL: none) */
    int *num;            /* ir_value_numbers */
    NirObj *nodes;       /* the top graph's nodes group */
    char **edges;        /* pairs */
    int nedges, capedges;
    int reset_kind;      /* -1 not yet, else NirReset */
    int reset_next;      /* -1 not yet, else 0/1 */
    bool is_mixed;
    bool has_ge;         /* a neuron fires at v >= v_th: NIR's threshold is strict */
    NirFramework framework; /* the convention neurons are written in, stored for the reader */
    Module *ref;         /* the NIR_* neuron definitions as the importer writes them */
    char notes[2048];
} Ex;

static bool
fail(Ex *x, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(x->err, x->errlen, "%s", msg);
    return false;
}

static void
note(Ex *x, const char *fmt, ...)
{
    size_t k = strlen(x->notes);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->notes + k, sizeof x->notes - k, fmt, ap);
    va_end(ap);
    k = strlen(x->notes);
    if (k + 1 < sizeof x->notes) x->notes[k] = '\n', x->notes[k + 1] = 0;
}

/* ---- building the tree ---- */

static NirObj *
add_kid(NirObj *g, const char *name, NirObjKind kind)
{
    NirObj *kids = xrealloc(g->kids, (size_t)(g->nkids + 1) * sizeof *kids);
    g->kids = kids;
    NirObj *o = &kids[g->nkids++];
    memset(o, 0, sizeof *o);
    o->name = xstrdup(name);
    o->kind = kind;
    return o;
}

static void
put_string(NirObj *g, const char *name, const char *s)
{
    NirObj *o = add_kid(g, name, NIR_STRINGS);
    o->numel = 1;
    o->str = xmalloc(sizeof *o->str);
    o->str[0] = xstrdup(s);
}

static void
put_numbers(NirObj *g, const char *name, bool is_int, int rank, const int64_t *dims,
            const double *v)
{
    NirObj *o = add_kid(g, name, NIR_NUMBERS);
    o->is_int = is_int;
    o->rank = rank;
    o->numel = 1;
    for (int d = 0; d < rank; d++)
        o->dims[d] = dims[d], o->numel *= dims[d];
    o->num = xmalloc((size_t)(o->numel ? o->numel : 1) * sizeof *o->num);
    for (int64_t i = 0; i < o->numel; i++)
        o->num[i] = v[i];
}

static void
put_int(NirObj *g, const char *name, int64_t v)
{
    double d = (double)v;
    put_numbers(g, name, true, 0, NULL, &d);
}

static void
put_ints(NirObj *g, const char *name, int n, const int64_t *v)
{
    double d[IR_MAX_RANK + 2];
    for (int i = 0; i < n; i++)
        d[i] = (double)v[i];
    int64_t dims[1] = {n};
    put_numbers(g, name, true, 1, dims, d);
}

/* a parameter array shaped like the layer, every element v (rounded to float32) */
static void
put_param(NirObj *g, const char *name, const Type *t, double v)
{
    int64_t n = type_numel(t);
    double *d = xmalloc((size_t)(n ? n : 1) * sizeof *d);
    for (int64_t i = 0; i < n; i++)
        d[i] = (double)(float)v;
    put_numbers(g, name, false, t->rank, t->dims, d);
    free(d);
}

static void
put_weight(Ex *x, NirObj *g, const char *field, const Node *n, int slot)
{
    const Weight *w = &x->m->weights[n->first_weight + slot];
    double *d = xmalloc((size_t)(w->numel ? w->numel : 1) * sizeof *d);
    for (int64_t i = 0; i < w->numel; i++)
        d[i] = w->data[i];
    put_numbers(g, field, false, w->rank, w->dims, d);
    free(d);
}

/* a convolution's weight and bias (zeros when it has none: NIR readers want one) */
static void
put_conv_weights(Ex *x, NirObj *g, const Node *n)
{
    put_weight(x, g, "weight", n, 0);
    if (node_attr_i(n, "bias", 0)) {
        put_weight(x, g, "bias", n, 1);
        return;
    }
    const Weight *w = &x->m->weights[n->first_weight];
    double *z = xcalloc((size_t)w->dims[0] + 1, sizeof *z);
    put_numbers(g, "bias", false, 1, w->dims, z);
    free(z);
}

static void
edge(Ex *x, const char *src, const char *dst)
{
    if (x->nedges + 1 > x->capedges) {
        x->capedges = x->capedges ? 2 * x->capedges : 32;
        x->edges = xrealloc(x->edges, (size_t)x->capedges * 2 * sizeof *x->edges);
    }
    x->edges[2 * x->nedges] = xstrdup(src);
    x->edges[2 * x->nedges + 1] = xstrdup(dst);
    x->nedges++;
}

/* ---- names ---- */

static bool
is_taken(Ex *x, const char *s)
{
    for (int i = 0; i < x->m->nnodes; i++)
        if (x->names[i] && strcmp(x->names[i], s) == 0) return true;
    return false;
}

static const char *
name_of(Ex *x, ValueId v)
{
    if (x->names[v]) return x->names[v];
    const Node *n = &x->m->nodes[v];
    char buf[512];
    if (n->nweights)
        snprintf(buf, sizeof buf, "%s", node_layer_name(x->m, n));
    else if (n->name)
        snprintf(buf, sizeof buf, "%s", n->name);
    else
        snprintf(buf, sizeof buf, "v%d", x->num[v]);
    size_t k = strlen(buf);
    for (int i = 2; is_taken(x, buf); i++)
        snprintf(buf + k, sizeof buf - k, "_%d", i);
    x->names[v] = xstrdup(buf);
    return x->names[v];
}

/* ---- neurons ---- */

static double
param(const Module *m, const Node *n, const char *name)
{
    const NeuronDef *nd = m->neurons[n->neuron];
    for (int i = 0; i < nd->nparams; i++)
        if (strcmp(nd->params[i].name, name) == 0) {
            /* a learned parameter: its weight's value */
            int w = node_param_weight(m, n, i);
            return w >= 0 && m->weights[w].data ? m->weights[w].data[0] : n->params[i];
        }
    die("neuron %s has no parameter %s", nd->name, name);
}

static char *
neuron_text(const NeuronDef *nd)
{
    char *s = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&s, &len);
    if (!f) die("out of memory");
    neuron_print(f, nd);
    fclose(f);
    return s;
}

/* the NIR_* neurons the importer writes, in a module of their own, to compare definitions with */
static bool
load_reference(Ex *x)
{
    if (x->ref) return true;
    char *text = nir_neuron_library();
    x->ref = fe_load_text("<nir neurons>", text, strlen(text), NULL);
    free(text);
    if (!x->ref) die("the NIR neuron definitions do not compile");
    return true;
}

/* is nd, named like one of the importer's neurons, that neuron as the importer writes it? */
static bool
is_import_neuron(Ex *x, const NeuronDef *nd)
{
    load_reference(x);
    int i = module_find_neuron(x->ref, nd->name);
    if (i < 0) return false;
    char *a = neuron_text(nd), *b = neuron_text(x->ref->neurons[i]);
    bool same = strcmp(a, b) == 0;
    free(a);
    free(b);
    return same;
}

static void
want_reset(Ex *x, NirReset kind, bool is_next)
{
    if ((x->reset_kind >= 0 && x->reset_kind != (int)kind) ||
        (x->reset_next >= 0 && x->reset_next != (int)is_next))
        x->is_mixed = true;
    x->reset_kind = (int)kind;
    x->reset_next = is_next;
}

/* tau and r for a per-step decay and input gain: Euler at dt (tau = dt/(1 - decay), r such that
 * dt/tau r = gain) */
static void
continuous(double dt, double decay, double gain, double *tau, double *r)
{
    *tau = (double)(float)(dt / (double)(float)(1.0 - decay));
    *r = (double)(float)(gain * *tau / dt);
}

/* Sinabs's convention (--framework=sinabs): decay = exp(-dt/tau) in float32 and r the input
 * gain; the float32 tau whose decay the importer computes back exactly, where one exists */
static void
continuous_sinabs(double dt, double decay, double gain, double *tau, double *r)
{
    *r = (double)(float)gain;
    if (!(decay > 0)) { /* exp(-dt/tau) rounds to 0 in float32 for any tau below dt/104 */
        *tau = (double)(float)(dt / 200);
        return;
    }
    float t0 = (float)(-dt / log(decay)), best = t0;
    for (int k = 0; k < 64; k++) {
        float cand = t0;
        for (int s = 0; s < k / 2 + 1 && k; s++)
            cand = nextafterf(cand, k % 2 ? INFINITY : 0.0f);
        if ((float)exp((double)(float)(-dt / (double)cand)) == (float)decay) {
            best = cand;
            break;
        }
    }
    *tau = best;
}

/* the framework whose NIR_* neurons the model uses (the importer writes them only for one),
 * or NIR_FW_NONE */
static NirFramework
detect_framework(const Module *m)
{
    static const struct {
        const char *suffix;
        NirFramework f;
    } marks[] = {{"_multi", NIR_FW_SINABS}, {"_ge", NIR_FW_SPIKINGJELLY},
                 {"_ge_nodecay", NIR_FW_SPIKINGJELLY}, {"_sub_redo", NIR_FW_SNNTORCH},
                 {"_spyx", NIR_FW_SPYX}};
    for (int i = 0; i < m->nneurons; i++) {
        const char *name = m->neurons[i]->name;
        if (strncmp(name, "NIR_", 4) != 0) continue;
        size_t len = strlen(name);
        for (size_t j = 0; j < sizeof marks / sizeof marks[0]; j++) {
            size_t sl = strlen(marks[j].suffix);
            if (len > sl && strcmp(name + len - sl, marks[j].suffix) == 0) return marks[j].f;
        }
    }
    return NIR_FW_NONE;
}

/* every number a node was written with fits float32: a huge gain makes r overflow */
static bool
finite_fields(Ex *x, ValueId v, const NirObj *g)
{
    for (int i = 0; i < g->nkids; i++) {
        const NirObj *k = &g->kids[i];
        for (int64_t j = 0; k->kind == NIR_NUMBERS && j < k->numel; j++)
            if (!isfinite(k->num[j]))
                return fail(x, "layer '%s': its NIR %s does not fit float32 (NIR stores float32)",
                            name_of(x, v), k->name);
    }
    return true;
}

static bool
export_neuron(Ex *x, ValueId v, NirObj *g)
{
    const Module *m = x->m;
    const Node *n = &m->nodes[v];
    const NeuronDef *nd = m->neurons[n->neuron];
    const Type *t = &n->type;
    const char *name = nd->name;
    bool is_prelude = nd->loc.file && strcmp(nd->loc.file, fe_prelude_name) == 0;
    double dt = x->dt, tau, r;
    if (strncmp(name, "NIR_", 4) == 0 && is_import_neuron(x, nd)) {
        const char *kind = name + 4;
        bool is_multi = strstr(kind, "_multi") != NULL, is_ge = strstr(kind, "_ge") != NULL;
        bool sub = strstr(kind, "_sub") != NULL || is_multi || strstr(kind, "_spyx") != NULL;
        bool next = strstr(kind, "_next") != NULL;
        if (is_ge) x->has_ge = true;
        if (strncmp(kind, "Threshold", 9) == 0) {
            put_string(g, "type", "Threshold");
            put_param(g, "threshold", t, param(m, n, "v_th"));
            return true;
        }
        /* I and IF, and an LI or LIF without leak (decay 1): NIR's integrators */
        bool is_integrator = kind[0] == 'I' && (kind[1] == 0 || kind[1] == 'F');
        bool is_cuba = strncmp(kind, "Cuba", 4) == 0;
        bool is_spiking = is_integrator ? kind[1] == 'F'
                                        : strncmp(kind, is_cuba ? "CubaLIF" : "LIF", is_cuba ? 7 : 3) == 0;
        if (is_multi && is_integrator && param(m, n, "v_min") != -param(m, n, "v_th"))
            return fail(x, "layer '%s': a Sinabs IAF whose min_v_mem is not -v_threshold (NIR "
                        "cannot say it; Sinabs reads -v_threshold)", name_of(x, v));
        /* SpikingJelly's LIF: tau in steps, decay_input=True (r = gain) or False (r = tau/dt) */
        if (is_ge && !is_integrator && !is_cuba) {
            bool is_nodecay = strstr(kind, "_nodecay") != NULL;
            double steps = param(m, n, "tau");
            if (is_nodecay && param(m, n, "gain") != 1)
                return fail(x, "layer '%s': SpikingJelly's decay_input=False LIF with an input "
                            "gain of %g (NIR's reading has 1)", name_of(x, v), param(m, n, "gain"));
            put_string(g, "type", "LIF");
            put_param(g, "tau", t, steps * dt);
            put_param(g, "r", t, is_nodecay ? steps : param(m, n, "gain"));
            put_param(g, "v_leak", t, param(m, n, "v_leak"));
            put_param(g, "v_threshold", t, param(m, n, "v_th"));
            put_param(g, "v_reset", t, param(m, n, "v_reset"));
            want_reset(x, NIR_RESET_VALUE, false);
            return true;
        }
        double decay = is_integrator ? 1.0 : param(m, n, "decay");
        if (is_integrator || (!is_cuba && decay == 1)) {
            put_string(g, "type", is_spiking ? "IF" : "I");
            put_param(g, "r", t, x->impulses ? param(m, n, "gain") : param(m, n, "gain") / dt);
            if (is_spiking) {
                put_param(g, "v_threshold", t, param(m, n, "v_th"));
                put_param(g, "v_reset", t, is_multi ? 0 : param(m, n, "v_reset"));
                want_reset(x, sub ? NIR_RESET_SUBTRACT : NIR_RESET_VALUE, next);
            }
            return true;
        }
        if (!(decay < 1) || !(decay > -1) || (is_cuba && !(param(m, n, "syn_decay") < 1))) {
            return fail(x, "layer '%s': a decay of %g per step has no positive time constant",
                        name_of(x, v), is_cuba && decay < 1 ? param(m, n, "syn_decay") : decay);
        }
        put_string(g, "type", is_cuba ? (is_spiking ? "CubaLIF" : "CubaLI") : (is_spiking ? "LIF" : "LI"));
        if (x->framework == NIR_FW_SINABS && !is_cuba)
            continuous_sinabs(dt, decay, param(m, n, "gain"), &tau, &r);
        else
            continuous(dt, decay, param(m, n, "gain"), &tau, &r);
        put_param(g, is_cuba ? "tau_mem" : "tau", t, tau);
        put_param(g, "r", t, r);
        put_param(g, "v_leak", t, param(m, n, "v_leak"));
        if (is_cuba) {
            double ts, win;
            continuous(dt, param(m, n, "syn_decay"), param(m, n, "syn_gain"), &ts, &win);
            if (x->impulses) win = param(m, n, "syn_gain");
            put_param(g, "tau_syn", t, ts);
            put_param(g, "w_in", t, win);
        }
        if (is_spiking) {
            put_param(g, "v_threshold", t, param(m, n, "v_th"));
            put_param(g, "v_reset", t, is_multi ? 0 : param(m, n, "v_reset"));
            want_reset(x, sub ? NIR_RESET_SUBTRACT : NIR_RESET_VALUE, next);
        }
        return true;
    }
    if (is_prelude && (strcmp(name, "Leaky") == 0 || strcmp(name, "LeakyZero") == 0)) {
        double beta = fmin(fmax(param(m, n, "beta"), 0), 1);
        continuous(dt, beta, 1.0, &tau, &r);
        put_string(g, "type", "LIF");
        put_param(g, "tau", t, tau);
        put_param(g, "r", t, r);
        put_param(g, "v_leak", t, 0);
        put_param(g, "v_threshold", t, param(m, n, "threshold"));
        put_param(g, "v_reset", t, 0);
        want_reset(x, name[5] ? NIR_RESET_VALUE : NIR_RESET_SUBTRACT, true);
        return true;
    }
    if (is_prelude && strcmp(name, "Synaptic") == 0) {
        double ts, win;
        continuous(dt, fmin(fmax(param(m, n, "alpha"), 0), 1), 1.0, &ts, &win);
        if (x->impulses) win = 1.0;
        continuous(dt, fmin(fmax(param(m, n, "beta"), 0), 1), 1.0, &tau, &r);
        put_string(g, "type", "CubaLIF");
        put_param(g, "tau_syn", t, ts);
        put_param(g, "w_in", t, win);
        put_param(g, "tau_mem", t, tau);
        put_param(g, "r", t, r);
        put_param(g, "v_leak", t, 0);
        put_param(g, "v_threshold", t, param(m, n, "threshold"));
        put_param(g, "v_reset", t, 0);
        want_reset(x, NIR_RESET_SUBTRACT, true);
        return true;
    }
    if (is_prelude && (strcmp(name, "IF") == 0 || strcmp(name, "IFSoft") == 0)) {
        bool soft = name[2] != 0;
        put_string(g, "type", "IF");
        put_param(g, "r", t, x->impulses ? 1.0 : 1.0 / dt);
        put_param(g, "v_threshold", t, param(m, n, "v_th"));
        put_param(g, "v_reset", t, soft ? 0 : param(m, n, "v_reset"));
        want_reset(x, soft ? NIR_RESET_SUBTRACT : NIR_RESET_VALUE, false);
        x->has_ge = true;
        return true;
    }
    if (is_prelude && (strcmp(name, "LIF") == 0 || strcmp(name, "LIFSoft") == 0 ||
                       strcmp(name, "LI") == 0)) {
        /* SpikingJelly: v += (I - (v - v_reset)) / tau (decay_input) or v - (v - v_reset)/tau + I:
         * NIR's Euler step with tau_nir = tau dt, v_leak = v_reset, r = 1 or tau */
        bool soft = strcmp(name, "LIFSoft") == 0, li = strcmp(name, "LI") == 0;
        double tau_s = param(m, n, "tau");
        bool decay_input = li || param(m, n, "decay_input") != 0;
        double v_reset = soft || li ? 0 : param(m, n, "v_reset");
        put_string(g, "type", li ? "LI" : "LIF");
        put_param(g, "tau", t, tau_s * dt);
        put_param(g, "r", t, decay_input ? 1.0 : tau_s);
        put_param(g, "v_leak", t, v_reset);
        if (!li) {
            put_param(g, "v_threshold", t, param(m, n, "v_th"));
            put_param(g, "v_reset", t, v_reset);
            want_reset(x, soft ? NIR_RESET_SUBTRACT : NIR_RESET_VALUE, false);
            x->has_ge = true;
        }
        return true;
    }
    return fail(x, "layer '%s': neuron %s has no NIR equivalent (NIR's neurons are I, IF, LI, LIF, "
                   "CubaLI, CubaLIF and Threshold; snnc exports the neurons a NIR import writes and "
                   "the prelude's IF, IFSoft, LIF, LIFSoft, LI, Leaky, LeakyZero and Synaptic)",
                name_of(x, v), name);
}

/* ---- nodes ---- */

static const char *const op_no_nir[OP_COUNT_] = {
    [OP_POISSON] = "an encoder (NIR graphs start from the encoded input: export the model fed "
                   "with spikes)",
    [OP_MAXPOOL2D] = "max pooling (NIR has sum and average pooling only)",
    [OP_BATCHNORM] = "batch normalisation (fold it into the preceding layer's weights first)",
    [OP_MUL] = "an elementwise product of two values",
    [OP_STATE] = "a neuron's state variable as a value",
};

static bool
export_node(Ex *x, ValueId v)
{
    const Module *m = x->m;
    const Node *n = &m->nodes[v];
    if (op_no_nir[n->op])
        return fail(x, "layer '%s' (%s): NIR cannot express %s", name_of(x, v),
                    op_info(n->op)->name, op_no_nir[n->op]);
    switch (n->op) {
    case OP_COUNT: case OP_MEAN: case OP_LAST: case OP_MAX: case OP_SEQUENCE: {
        const char *src = name_of(x, n->args[0]);
        if (n->op != OP_SEQUENCE)
            note(x, "output '%s' = %s(%s) is written as a NIR Output of %s at every step (NIR "
                    "outputs are sequences; take the %s of them)", name_of(x, v),
                 op_info(n->op)->name, src, src, op_info(n->op)->name);
        NirObj *g = add_kid(x->nodes, name_of(x, v), NIR_GROUP);
        put_string(g, "type", "Output");
        const Type *t = &m->nodes[n->args[0]].type;
        put_ints(g, "shape", t->rank, t->dims);
        edge(x, src, name_of(x, v));
        return true;
    }
    default: break;
    }
    NirObj *g = add_kid(x->nodes, name_of(x, v), NIR_GROUP);
    const Type *in = n->nargs ? &m->nodes[n->args[0]].type : NULL;
    for (int a = 0; a < n->nargs; a++)
        if (n->op != OP_SUB || a == 0) edge(x, name_of(x, n->args[a]), name_of(x, v));
    switch (n->op) {
    case OP_INPUT:
        put_string(g, "type", "Input");
        put_ints(g, "shape", n->type.rank, n->type.dims);
        if (!n->is_per_step_input)
            note(x, "input '%s' is static in the model (the same at every step); a NIR Input is "
                    "per step: feed it the same value at each", name_of(x, v));
        return true;
    case OP_DENSE: {
        bool bias = node_attr_i(n, "bias", 0) != 0;
        put_string(g, "type", bias ? "Affine" : "Linear");
        put_weight(x, g, "weight", n, 0);
        if (bias) put_weight(x, g, "bias", n, 1);
        return true;
    }
    case OP_CONV2D: {
        put_string(g, "type", "Conv2d");
        put_conv_weights(x, g, n);
        int64_t p[2];
        for (int k = 0; k < 2; k++) p[k] = node_attr_i(n, "stride", k);
        put_ints(g, "stride", 2, p);
        for (int k = 0; k < 2; k++) p[k] = node_attr_i(n, "pad", k);
        put_ints(g, "padding", 2, p);
        for (int k = 0; k < 2; k++) p[k] = node_attr_i(n, "dilation", k);
        put_ints(g, "dilation", 2, p);
        put_int(g, "groups", node_attr_i(n, "groups", 0));
        put_ints(g, "input_shape", in->rank, in->dims);
        return true;
    }
    case OP_CONV1D: {
        put_string(g, "type", "Conv1d");
        put_conv_weights(x, g, n);
        int64_t one;
        one = node_attr_i(n, "stride", 0);
        put_ints(g, "stride", 1, &one);
        one = node_attr_i(n, "pad", 0);
        put_ints(g, "padding", 1, &one);
        one = node_attr_i(n, "dilation", 0);
        put_ints(g, "dilation", 1, &one);
        put_int(g, "groups", node_attr_i(n, "groups", 0));
        put_ints(g, "input_shape", in->rank, in->dims);
        return true;
    }
    case OP_AVGPOOL2D: case OP_SUMPOOL2D: {
        put_string(g, "type", n->op == OP_AVGPOOL2D ? "AvgPool2d" : "SumPool2d");
        int64_t k[2], s[2], p[2];
        for (int i = 0; i < 2; i++) {
            k[i] = node_attr_i(n, "kernel", i);
            s[i] = node_attr_i(n, "stride", i) ? node_attr_i(n, "stride", i) : k[i];
            p[i] = node_attr_i(n, "pad", i);
        }
        put_ints(g, "kernel_size", 2, k);
        put_ints(g, "stride", 2, s);
        put_ints(g, "padding", 2, p);
        return true;
    }
    case OP_FLATTEN:
        put_string(g, "type", "Flatten");
        put_int(g, "start_dim", 0);
        put_int(g, "end_dim", -1);
        put_ints(g, "input_type", in->rank, in->dims);
        return true;
    case OP_SCALE: {
        double f = node_attr_f(n, "factor"), d = node_attr_f(n, "divisor");
        if (d != 1)
            note(x, "'%s' = x / %g is written as a NIR Scale by %.9g: x * (1/k) may differ from x / k "
                    "in the last bit", name_of(x, v), d, f / d);
        put_string(g, "type", "Scale");
        put_param(g, "scale", &n->type, f / d);
        return true;
    }
    case OP_ADD: case OP_SUB:
        /* NIR sums a node's inputs: a Scale by 1 of both; sub negates its second through a
         * Scale by -1 */
        put_string(g, "type", "Scale");
        put_param(g, "scale", &n->type, 1.0);
        if (n->op == OP_SUB) {
            char neg[600];
            snprintf(neg, sizeof neg, "%s.negated", name_of(x, v));
            NirObj *ng = add_kid(x->nodes, neg, NIR_GROUP);
            put_string(ng, "type", "Scale");
            put_param(ng, "scale", &n->type, -1.0);
            edge(x, name_of(x, n->args[1]), neg);
            edge(x, neg, name_of(x, v));
        }
        return true;
    case OP_DELAY:
        put_string(g, "type", "Delay");
        put_param(g, "delay", &n->type, (double)node_attr_i(n, "steps", 0) * x->dt);
        return true;
    case OP_NEURON:
        return export_neuron(x, v, g) && finite_fields(x, v, g);
    default:
        return fail(x, "layer '%s' (%s): not expressible in NIR", name_of(x, v),
                    op_info(n->op)->name);
    }
}

bool
nir_from_module(const Module *m, double dt, int impulses, NirFramework framework, NirObj *root,
                char *notes, size_t noteslen, char *err, size_t errlen)
{
    memset(root, 0, sizeof *root);
    root->kind = NIR_GROUP;
    root->name = xstrdup("");
    NirImportOptions preset = {.framework = framework ? framework : detect_framework(m)};
    nir_apply_preset(&preset);
    bool has_preset = preset.framework != NIR_FW_NONE;
    Ex x = {.m = m, .dt = dt > 0 ? dt : has_preset ? preset.dt : 1e-4,
            .impulses = impulses >= 0 ? impulses != 0 : has_preset && preset.impulses,
            .framework = preset.framework, .err = err, .errlen = errlen, .reset_kind = -1,
            .reset_next = -1};
    x.names = xcalloc((size_t)m->nnodes + 1, sizeof *x.names);
    x.num = xmalloc(((size_t)m->nnodes + 1) * sizeof *x.num);
    ir_value_numbers(m, x.num);
    put_string(root, "version", "1.0.8");
    NirObj *top = add_kid(root, "node", NIR_GROUP);
    put_string(top, "type", "NIRGraph");
    x.nodes = add_kid(top, "nodes", NIR_GROUP);
    /* names first: layers with weights keep their layer names, so round trips keep tensor names */
    for (ValueId v = 0; v < m->nnodes; v++)
        if (m->nodes[v].nweights) name_of(&x, v);
    bool ok = true;
    for (ValueId v = 0; ok && v < m->nnodes; v++)
        ok = export_node(&x, v);
    if (ok) {
        NirObj *e = add_kid(top, "edges", NIR_STRINGS);
        e->rank = 2;
        e->dims[0] = x.nedges;
        e->dims[1] = 2;
        e->numel = 2 * (int64_t)x.nedges;
        e->str = x.edges;
        x.edges = NULL;
        char opts[256];
        char dtb[64];
        print_double(dtb, sizeof dtb, x.dt);
        snprintf(opts, sizeof opts, "--timesteps=%d --dt=%s%s%s%s%s%s", m->timesteps, dtb,
                 x.reset_kind == NIR_RESET_SUBTRACT ? " --reset=subtract"
                 : x.reset_kind == NIR_RESET_VALUE && has_preset ? " --reset=value" : "",
                 x.reset_next == 1 ? " --reset-step=next"
                 : x.reset_next == 0 && has_preset ? " --reset-step=same" : "",
                 x.impulses ? " --impulses" : "", has_preset ? " --framework=" : "",
                 has_preset ? nir_framework_name(x.framework) : "");
        NirObj *meta = add_kid(top, "metadata", NIR_GROUP);
        put_string(meta, "snnc_import_options", opts);
        note(&x, "stored in the file, and taken by snnc when it reads it back as this model: %s",
             opts);
        if (x.is_mixed)
            note(&x, "the model's neuron layers reset in different ways; NIR cannot say which: "
                     "the options above reproduce the last one's");
        if (x.has_ge && x.framework != NIR_FW_SPIKINGJELLY && x.framework != NIR_FW_LAVA_DL)
            note(&x, "SpikingJelly's neurons fire at v >= v_th, NIR's at v > v_th: a membrane "
                     "exactly at the threshold no longer spikes");
    }
    snprintf(notes, noteslen, "%s", x.notes);
    for (int i = 0; i < m->nnodes; i++)
        free(x.names[i]);
    free(x.names);
    free(x.num);
    for (int i = 0; x.edges && i < 2 * x.nedges; i++)
        free(x.edges[i]);
    free(x.edges);
    module_free(x.ref);
    if (!ok) nir_obj_free(root);
    return ok;
}
