/* A NIR graph → a .snn model and its weights. Each node becomes one binding; its input is the sum of
 * the nodes with an edge into it. Cycles are broken by a one-step delay on the edge that closes them
 * (depth-first from the inputs): that edge reads prev(source), visible in the text and the IR.
 * NIR's continuous-time neurons become neuron definitions written here, with the discretisation
 * chosen by NirImportOptions folded into their parameters (decay and gain per step, rounded to
 * float32 like the frameworks' parameter tensors), so the equations a user reads are the ones run:
 *   euler   v <- (1 - dt/tau) v + (dt/tau) r I + (dt/tau) v_leak
 *   exact   v <- e^(-dt/tau) v + (1 - e^(-dt/tau)) (r I + v_leak)
 * Exporters that write r = tau/dt (and w_in = tau_syn/dt), snnTorch's convention, mean an input
 * gain of exactly 1 under Euler; that is detected per node, and tau = dt/(1 - beta) computed in
 * float32 is inverted exactly, so beta is the exporter's own float. */
#include "nir/nir.h"
#include "ir/ir.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Buf {
    char *s;
    size_t len, cap;
    bool is_oom;
} Buf;

static void
put(Buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || b->is_oom) {
        va_end(ap2);
        return;
    }
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + (size_t)n + 1)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->is_oom = true;
            va_end(ap2);
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    b->len += (size_t)n;
}

/* s as a string of the language ("..." with \" \\ \n escaped): whatever a file names, the
 * parser reads back as the same bytes, never as code */
static void
put_quoted(Buf *b, const char *s)
{
    put(b, "\"");
    for (; *s; s++) {
        switch (*s) {
        case '"': put(b, "\\\""); break;
        case '\\': put(b, "\\\\"); break;
        case '\n': put(b, "\\n"); break;
        default: put(b, "%c", *s);
        }
    }
    put(b, "\"");
}

/* a number as the language reads it back exactly */
static const char *
num(char *buf, size_t n, double x)
{
    print_double(buf, n, x);
    return buf;
}

typedef struct Shape {
    int rank;
    int64_t dims[NIR_MAX_RANK];
} Shape;

static int64_t
shape_numel(const Shape *s)
{
    int64_t n = 1;
    for (int d = 0; d < s->rank; d++)
        n *= s->dims[d];
    return n;
}

static bool
shape_eq(const Shape *a, const Shape *b)
{
    if (a->rank != b->rank) return false;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return true;
}

static const char *
shape_str(char *buf, size_t n, const Shape *s)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < s->rank && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)s->dims[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* the neuron definitions a model may need: one per kind and reset variant */
typedef enum {
    NV_SAME_VALUE,
    NV_SAME_SUB,
    NV_NEXT_VALUE,  /* reset before the next step's update (snnTorch Leaky, "zero") */
    NV_NEXT_SUB,
    NV_NEXT_AFTER,  /* reset after the next step's update, dropping its input (snnTorch RLeaky,
                       Synaptic and RSynaptic, "zero") */
    NV_SAME_SUB_REDO, /* snnTorch reset_delay=False, "subtract": the previous step's membrane,
                         if still above v_th, is reduced before the spike test, and the reset
                         then undone where no spike follows */
    NV_MULTI,       /* Sinabs: spikes = trunc(v / v_th) per step (MultiSpike), v -= spikes v_th;
                       IF clamped below at -v_th (its min_v_mem on import) */
    NV_GE,          /* SpikingJelly: fire at v >= v_th, hard reset; LIF charged with
                       decay_input=True: v + (r I - (v - v_leak)) / tau */
    NV_GE_NODECAY,  /* SpikingJelly LIF with decay_input=False: v - (v - v_leak) / tau + I */
    NV_SPYX,        /* Spyx: the spike tested on the membrane before the update, v_th subtracted
                       in that update (a CubaLIF: before its decay) */
    NV_COUNT
} NeuronVariant;

/* ---- framework presets ---- */
typedef struct Preset {
    const char *name;      /* what --framework takes */
    const char *checked;   /* the framework version its equations were read from and tested */
    double dt;
    NirIntegrator integrator;
    NirReset reset;
    bool reset_next, impulses;
    const char *what;      /* the neuron semantics it adds, for notes and --help */
} Preset;

static const Preset presets[NIR_FW_COUNT] = {
    [NIR_FW_NONE] = {"none", "NIR 1.0", 0, NIR_EULER, NIR_RESET_VALUE, false, false,
                     "NIR's own reading: forward Euler, reset to v_reset in the step that fires"},
    [NIR_FW_SNNTORCH] = {"snntorch", "snnTorch 1.0.0", 1e-4, NIR_EULER, NIR_RESET_SUBTRACT, true,
                         false,
                         "export_to_nir's dt = 1e-4 (r = tau/dt: v <- beta v + I), the defaults "
                         "reset_mechanism=\"subtract\" and reset_delay=True; a LIF on a cycle is "
                         "RLeaky, a CubaLIF Synaptic; --reset=value for \"zero\" (RLeaky, "
                         "Synaptic, RSynaptic zeroed after the next update), --reset-step=same "
                         "for reset_delay=False"},
    [NIR_FW_NORSE] = {"norse", "Norse 1.1.0", 1e-6, NIR_EULER, NIR_RESET_VALUE, false, true,
                      "to_nir writes tau = dt/tau_inv with dt = 1e-3, so dt = 1e-6 recovers "
                      "dt/tau = 1e-3 tau_inv; IF and the synaptic current take inputs as impulses "
                      "(v += I, i += I); reset to v_reset in the step that fires"},
    [NIR_FW_SINABS] = {"sinabs", "Sinabs 3.1.3", 1.0, NIR_EXACT, NIR_RESET_SUBTRACT, false, true,
                       "tau in steps (dt = 1), decay exp(-1/tau) and an input gain of r "
                       "(from_nir's norm_input=False); several spikes per step (MultiSpike: "
                       "trunc(v / v_th) for v > 0), v_th subtracted per spike in the same step, "
                       "IF clamped below at -v_th (from_nir's min_v_mem)"},
    [NIR_FW_SPIKINGJELLY] = {"spikingjelly", "SpikingJelly 2.0.0", 1e-4, NIR_EULER,
                             NIR_RESET_VALUE, false, false,
                             "export_to_nir's dt = 1e-4 (IF r = 1/dt, LIF tau = tau_steps dt and "
                             "r = 1 for decay_input=True or tau_steps for False); fire at "
                             "v >= v_th, hard reset in the same step, SpikingJelly's order of "
                             "operations"},
    [NIR_FW_SPYX] = {"spyx", "Spyx at 38374e96 (source read; not run here)", 1.0, NIR_EULER,
                     NIR_RESET_SUBTRACT, false, false,
                     "from_nir's dt = 1: beta = 1 - dt/tau, an input gain of 1 (r and w_in "
                     "ignored, as Spyx does); the spike is tested on the membrane before the "
                     "update and v_th subtracted in that update (a CubaLIF subtracts before its "
                     "decay)"},
    [NIR_FW_LAVA_DL] = {"lava-dl", "the NIR project's lava-dl scripts at 7232ada6 (source read; "
                        "not run here)", 1e-4, NIR_EULER, NIR_RESET_VALUE, false, false,
                        "dt = 1e-4, decays dt/tau (r = tau/dt, w_in = tau_syn/dt: gains of 1), "
                        "fire at v >= v_th, reset to 0 in the same step, the current kept; in "
                        "float32, where Loihi's fixed point rounds each decay to 12 bits"},
};

NirFramework
nir_framework_parse(const char *s)
{
    for (int f = 0; f < NIR_FW_COUNT; f++) {
        const char *a = presets[f].name, *b = s;
        for (; *a && *b; a++, b++) {
            char cb = *b >= 'A' && *b <= 'Z' ? (char)(*b - 'A' + 'a') : *b == '_' ? '-' : *b;
            if (cb != *a) break;
        }
        if (!*a && !*b) return (NirFramework)f;
    }
    return NIR_FW_COUNT;
}

const char *
nir_framework_name(NirFramework f)
{
    return f >= 0 && f < NIR_FW_COUNT ? presets[f].name : "?";
}

const char *
nir_framework_summary(NirFramework f)
{
    return f >= 0 && f < NIR_FW_COUNT ? presets[f].what : "?";
}

const char *
nir_framework_list(void)
{
    return "snntorch|norse|sinabs|spikingjelly|spyx|lava-dl|none";
}

/* the options a preset fills: those neither the user nor the file states */
void
nir_apply_preset(NirImportOptions *o)
{
    if (o->framework <= NIR_FW_NONE || o->framework >= NIR_FW_COUNT) return;
    const Preset *p = &presets[o->framework];
    unsigned set = o->given | o->stored;
    if (!(set & NIR_GIVEN_DT)) o->dt = p->dt;
    if (!(set & NIR_GIVEN_INTEGRATOR)) o->integrator = p->integrator;
    if (!(set & NIR_GIVEN_RESET)) o->reset = p->reset;
    if (!(set & NIR_GIVEN_RESET_STEP)) o->reset_next = p->reset_next;
    if (!(set & NIR_GIVEN_IMPULSES)) o->impulses = p->impulses;
}

typedef struct Ctx {
    const NirGraph *g;
    const char *path;
    const NirImportOptions *o;
    char *err;
    size_t errlen;
    char **ident;      /* per node: its binding name in the text (NULL: none of its own) */
    char **ref;        /* per node: what a reader writes to use its value */
    Shape *shape;      /* per node: its per-sample output shape */
    int *order;        /* nodes in definition order */
    int norder;
    bool *is_back;     /* per node i, per incoming edge j: in[j] -> i closes a cycle (flattened) */
    bool *is_back_src; /* per node: the source of such an edge (so it needs a name of its own) */
    int *back_base;
    bool used[NK_COUNT][NV_COUNT];
    bool *in_cycle;    /* per node: on a cycle of the graph (a LIF there is snnTorch's RLeaky) */
    int nrleaky, nsynaptic_zero; /* LIF and CubaLIF layers given NV_NEXT_AFTER, for the notes */
    int nredo;         /* layers given NV_SAME_SUB_REDO */
    int nr_one, ntau_steps, ntau_tiny, nspiking; /* what the parameters look like, for the
                                                    suggestion of a --framework */
    Buf warnings;      /* layers that cannot fire (notes prefixed "warning: ") */
    Buf *texts;        /* per node: its statements */
    Buf *out;          /* where emit_node writes: texts[the node being emitted] */
    int *state;        /* per node: 0 not emitted, 1 being emitted, 2 emitted (shape known) */
    bool *is_used_early; /* per node: read before it was emitted (so it needs its own name) */
    RtTensor *tensors;
    int ntensors, captensors;
    Buf notes;
    int ngain_one, ngain_other; /* nodes where r = tau/dt held (gain 1) or did not */
    double dt;
} Ctx;

static bool
fail(Ctx *c, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rt_io_error(c->err, c->errlen, c->path, "%s", msg);
    return false;
}

static bool
node_fail(Ctx *c, int id, const char *field, const char *fmt, ...)
{
    char msg[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const NirNode *n = &c->g->nodes[id];
    if (field)
        return fail(c, "node '%s' (%s): field '%s': %s", n->name, nir_kind_name(n->kind), field, msg);
    return fail(c, "node '%s' (%s): %s", n->name, nir_kind_name(n->kind), msg);
}

/* ---- fields ---- */

static const NirObj *
numbers(Ctx *c, int id, const char *field, bool is_required, bool *ok)
{
    const NirObj *f = nir_obj_find(c->g->nodes[id].group, field);
    if (!f) {
        if (is_required) *ok = node_fail(c, id, field, "missing");
        return NULL;
    }
    if (f->kind != NIR_NUMBERS) {
        *ok = node_fail(c, id, field, "expected numbers, found %s",
                        f->kind == NIR_STRINGS ? "strings" : f->kind == NIR_GROUP ? "a group"
                                                                                   : "another type");
        return NULL;
    }
    for (int64_t i = 0; i < f->numel; i++)
        if (!isfinite(f->num[i])) {
            *ok = node_fail(c, id, field, "element %lld is %g (not finite)", (long long)i, f->num[i]);
            return NULL;
        }
    return f;
}

/* one value per layer: a scalar, or an array whose elements are all equal and whose shape is the
 * layer's (or has one element) */
static bool
uniform(Ctx *c, int id, const char *field, const Shape *layer, bool is_required, double def,
        double *out)
{
    bool ok = true;
    const NirObj *f = numbers(c, id, field, is_required, &ok);
    if (!ok) return false;
    if (!f) {
        *out = def;
        return true;
    }
    if (f->numel == 0) return node_fail(c, id, field, "empty");
    if (f->numel != 1 && layer && f->numel != shape_numel(layer)) {
        char a[128];
        return node_fail(c, id, field, "%lld values for a layer of shape %s", (long long)f->numel,
                         shape_str(a, sizeof a, layer));
    }
    for (int64_t i = 1; i < f->numel; i++)
        if (f->num[i] != f->num[0])
            return node_fail(c, id, field,
                             "values differ across neurons (%g at 0, %g at %lld); snnc's neuron "
                             "parameters are one value per layer", f->num[0], f->num[i],
                             (long long)i);
    *out = f->num[0];
    return true;
}

/* an int or a pair (an array of 1 or 2 integers, or a scalar) */
static bool
pair(Ctx *c, int id, const char *field, bool is_required, int64_t def, int64_t out[2], int64_t lo)
{
    bool ok = true;
    const NirObj *f = numbers(c, id, field, is_required, &ok);
    if (!ok) return false;
    if (!f) {
        out[0] = out[1] = def;
        return true;
    }
    if (f->numel != 1 && f->numel != 2)
        return node_fail(c, id, field, "expected one or two integers, found %lld values",
                         (long long)f->numel);
    for (int k = 0; k < 2; k++) {
        double v = f->num[f->numel == 2 ? k : 0];
        if (v != floor(v) || v < (double)lo || v > 1e9)
            return node_fail(c, id, field, "%g is not an integer in [%lld, 1e9]", v, (long long)lo);
        out[k] = (int64_t)v;
    }
    return true;
}

static bool
add_tensor(Ctx *c, int id, const char *slot, const NirObj *f)
{
    if (c->ntensors == c->captensors) {
        int cap = c->captensors ? 2 * c->captensors : 16;
        RtTensor *t = realloc(c->tensors, (size_t)cap * sizeof *t);
        if (!t) return fail(c, "out of memory");
        c->tensors = t;
        c->captensors = cap;
    }
    char name[1024];
    snprintf(name, sizeof name, "%s.%s", c->g->nodes[id].name, slot);
    RtTensor *t = &c->tensors[c->ntensors];
    char msg[256];
    bool is_vector = strcmp(slot, "bias") == 0; /* [out] however the file shapes it */
    if (rt_tensor_init(t, name, is_vector ? 1 : f->rank, is_vector ? &f->numel : f->dims, msg,
                       sizeof msg) != 0)
        return node_fail(c, id, slot, "%s", msg);
    c->ntensors++;
    for (int64_t i = 0; i < f->numel; i++) {
        t->data[i] = (float)f->num[i];
        if (!isfinite(t->data[i]))
            return node_fail(c, id, slot, "element %lld is %g, outside float32's range",
                             (long long)i, f->num[i]);
    }
    return true;
}

/* ---- shapes of nodes ---- */

/* the shape of an Input (field `shape`, or NIR 0.x's `input_type` group) or the checked shape of
 * an Output */
static bool
io_shape(Ctx *c, int id, Shape *s, bool *is_given)
{
    const NirObj *grp = c->g->nodes[id].group;
    const NirObj *f = nir_obj_find(grp, "shape");
    const char *field = "shape";
    if (!f) {
        const NirObj *t = nir_obj_find(grp, c->g->nodes[id].kind == NK_INPUT ? "input_type"
                                                                                : "output_type");
        field = c->g->nodes[id].kind == NK_INPUT ? "input_type" : "output_type";
        if (t && t->kind == NIR_GROUP && t->nkids == 1) f = &t->kids[0];
        else if (t && t->kind == NIR_NUMBERS) f = t;
    }
    *is_given = f != NULL;
    if (!f) return true;
    if (f->kind != NIR_NUMBERS || f->rank > 1)
        return node_fail(c, id, field, "expected a list of dimensions");
    if (f->numel < 1 || f->numel > IR_MAX_RANK)
        return node_fail(c, id, field, "%lld dimensions (1 to %d)", (long long)f->numel, IR_MAX_RANK);
    s->rank = (int)f->numel;
    int64_t total = 1;
    for (int d = 0; d < s->rank; d++) {
        double v = f->num[d];
        if (v != floor(v) || v < 1 || v > 1e9)
            return node_fail(c, id, field, "dimension %d is %g (a positive integer expected)", d, v);
        s->dims[d] = (int64_t)v;
        total *= s->dims[d];
        if (total > ((int64_t)1 << 31)) return node_fail(c, id, field, "more than 2^31 elements");
    }
    return true;
}

static int64_t
conv_out(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil)
{
    int64_t span = in + 2 * pad - dil * (k - 1) - 1;
    return span < 0 ? 0 : span / stride + 1; /* 0: the window does not fit */
}

/* ---- neuron parameters ---- */

static double
f32(double x)
{
    return (double)(float)x;
}

/* decay and gain per step for time constant tau and input gain r */
static void
discretise(Ctx *c, double tau, double r, double *decay, double *gain, bool *is_conv)
{
    double dt = c->dt;
    *is_conv = false;
    if (c->o->framework == NIR_FW_SINABS && c->o->integrator == NIR_EXACT) {
        /* Sinabs: alpha = exp(-1/tau) of a float32 tau, in float32; the input added as it is
         * (from_nir's norm_input=False) */
        *decay = f32(exp(f32(-dt / tau)));
        *gain = f32(r);
        *is_conv = true;
        return;
    }
    if (c->o->integrator == NIR_EXACT) {
        double d = exp(-dt / tau);
        *decay = f32(d);
        *gain = f32((1.0 - d) * r);
        return;
    }
    *decay = f32(1.0 - dt / tau);
    *gain = f32(dt / tau * r);
    /* the exporters' convention: r = tau/dt in float32, i.e. v <- beta v + I; Spyx writes r =
     * beta and reads an input gain of 1 whatever r says */
    if (c->o->framework == NIR_FW_SPYX || (float)r == (float)(tau / dt) ||
        fabs(r - tau / dt) <= 1e-6 * fabs(tau / dt)) {
        *is_conv = true;
        *gain = 1.0;
        /* tau = dt / (1 - beta) was computed in float32: find that beta */
        float b0 = (float)(1.0 - dt / tau);
        float b = b0;
        for (int k = 0; k < 8; k++) {
            float cand = b0;
            for (int s = 0; s < k / 2 + 1 && k; s++)
                cand = nextafterf(cand, k % 2 ? 2.0f : -2.0f);
            if ((float)(dt / (double)(1.0f - cand)) == (float)tau) {
                b = cand;
                break;
            }
        }
        *decay = (double)b;
    }
}

/* the float32 values a layer is written with must be finite (a huge r or a tiny tau overflow) */
static bool
finite32(Ctx *c, int id, int n, const double *v, const char *const *what)
{
    for (int i = 0; i < n; i++)
        if (!isfinite((float)v[i]))
            return node_fail(c, id, NULL, "its %s is %g, outside float32's range (check --dt and "
                             "the node's parameters)", what[i], v[i]);
    return true;
}

/* ---- emitting ---- */

static void
note(Ctx *c, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    put(&c->notes, "%s\n", msg);
}

/* The reset variant of neuron node id. A reset to a value at the next step (snnTorch's
 * reset_mechanism="zero") comes in two forms in snnTorch: Leaky zeroes the membrane before the
 * update, so the step after a spike keeps its input; RLeaky, Synaptic and RSynaptic zero it after
 * the update, dropping that input. NIR cannot tell Leaky from RLeaky: a LIF on a cycle of the
 * graph is read as RLeaky (its export is a subgraph with a recurrent edge), any other as Leaky; a
 * CubaLIF is Synaptic either way. */
static NeuronVariant
variant(Ctx *c, int id)
{
    bool sub = c->o->reset == NIR_RESET_SUBTRACT;
    NirKind k = c->g->nodes[id].kind;
    switch (c->o->framework) {
    case NIR_FW_SINABS:
        if (k != NK_CUBALIF) return NV_MULTI;
        break;
    case NIR_FW_SPIKINGJELLY:
        if (!sub && !c->o->reset_next) return NV_GE;
        break;
    case NIR_FW_LAVA_DL: /* Loihi's CUBA neuron (IF, CubaLIF) fires at >=; Lava's LIF at > */
        if (!sub && !c->o->reset_next && k != NK_LIF) return NV_GE;
        break;
    case NIR_FW_SPYX:
        if (sub && !c->o->reset_next) return NV_SPYX;
        break;
    case NIR_FW_SNNTORCH:
        if (sub && !c->o->reset_next) {
            c->nredo++;
            return NV_SAME_SUB_REDO;
        }
        break;
    default: break;
    }
    if (!c->o->reset_next) return sub ? NV_SAME_SUB : NV_SAME_VALUE;
    if (sub) return NV_NEXT_SUB;
    if (k == NK_CUBALIF) {
        c->nsynaptic_zero++;
        return NV_NEXT_AFTER;
    }
    if (k == NK_LIF && c->in_cycle && c->in_cycle[id]) {
        c->nrleaky++;
        return NV_NEXT_AFTER;
    }
    return NV_NEXT_VALUE;
}

/* the largest |current| the inputs of node id can carry when every value feeding them is at most 1
 * in magnitude: the sum over its sources of max_o (sum |W[o, :]| + |b[o]|); false when a source is
 * not a weighted layer (nothing is claimed then) */
static bool
input_bound(Ctx *c, int id, double *bound)
{
    const NirNode *n = &c->g->nodes[id];
    *bound = 0;
    if (n->nin == 0) return false;
    for (int j = 0; j < n->nin; j++) {
        const NirNode *src = &c->g->nodes[n->in[j]];
        if (src->kind != NK_AFFINE && src->kind != NK_LINEAR && src->kind != NK_CONV1D &&
            src->kind != NK_CONV2D)
            return false;
        const NirObj *w = nir_obj_find(src->group, "weight");
        const NirObj *b = nir_obj_find(src->group, "bias");
        if (!w || w->kind != NIR_NUMBERS || w->rank < 1 || w->dims[0] < 1) return false;
        int64_t out = w->dims[0], per = w->numel / out;
        double best = 0;
        for (int64_t o = 0; o < out; o++) {
            double sum = 0;
            for (int64_t k = 0; k < per; k++)
                sum += fabs(w->num[o * per + k]);
            if (b && b->kind == NIR_NUMBERS && b->numel == out) sum += fabs(b->num[o]);
            else if (b && b->kind == NIR_NUMBERS && b->numel == 1) sum += fabs(b->num[0]);
            if (sum > best) best = sum;
        }
        *bound += best;
    }
    return true;
}

/* What spiking node id's parameters look like (for the --framework suggestion), and a warning
 * when, with every value feeding its input at most 1 in magnitude, its membrane cannot reach
 * v_th within the model's T steps (an input gain of dt r read for a graph whose exporter meant
 * impulses leaves a whole network silent). sgain 0: no synaptic current. */
static void
observe(Ctx *c, int id, double r, double tau, double gain, double decay, double sgain,
        double sdecay, double th)
{
    c->nspiking++;
    if (r == 1) c->nr_one++;
    if (tau >= 1) c->ntau_steps++;
    else if (tau > 0 && tau < 1e-4) c->ntau_tiny++;
    double bound;
    if (th <= 0 || !input_bound(c, id, &bound)) return;
    double i = 0, v = 0, top = 0;
    double d = fmin(fabs(decay), 1), sd = fmin(fabs(sdecay), 1);
    for (int t = 0; t < c->o->timesteps && top <= th; t++) {
        if (sgain != 0) {
            i = sd * i + fabs(sgain) * bound;
            v = d * v + fabs(gain) * i;
        } else {
            v = d * v + fabs(gain) * bound;
        }
        if (v > top) top = v;
    }
    if (top > th) return;
    char gb[64], tb[64];
    put(&c->warnings, "warning: layer '%s' (%s) cannot fire: even with every value feeding it at "
        "most 1 in magnitude, its membrane stays below v_th = %s in %d steps (input gain %s",
        c->g->nodes[id].name, nir_kind_name(c->g->nodes[id].kind), num(tb, sizeof tb, f32(th)),
        c->o->timesteps, num(gb, sizeof gb, f32(gain)));
    if (!c->o->impulses && c->o->integrator == NIR_EULER && c->g->nodes[id].kind == NK_IF)
        put(&c->warnings, " = dt r, dt = %g s", c->dt);
    put(&c->warnings, "); Norse and Sinabs graphs take each step's input as an impulse, "
        "Spyx's with a gain of 1: --framework=norse|sinabs|spyx, or --impulses\n");
}

static const char *const variant_suffix[NV_COUNT] = {
    "", "_sub", "_next", "_sub_next", "_next_after", "_sub_redo", "_multi", "_ge", "_ge_nodecay",
    "_spyx"};

/* the input expression of node id: its sources summed (a back edge reads the source's previous
 * step) */
static void
input_expr(Ctx *c, int id, Buf *b)
{
    const NirNode *n = &c->g->nodes[id];
    for (int j = 0; j < n->nin; j++) {
        int src = n->in[j];
        bool is_back = c->is_back[c->back_base[id] + j] && c->g->nodes[id].kind != NK_DELAY;
        /* a back edge's source is bound later, under its own name (is_back_src); so is a node read
         * while it is still being emitted */
        if (c->state[src] != 2) c->is_used_early[src] = true;
        put(b, "%s%s%s%s", j ? " + " : "", is_back ? "prev(" : "",
            c->is_back[c->back_base[id] + j] || c->state[src] != 2 ? c->ident[src] : c->ref[src],
            is_back ? ")" : "");
    }
}

/* the shape of node id's input (all sources agree; back edges are checked at the end) */
static bool
input_shape(Ctx *c, int id, Shape *s)
{
    const NirNode *n = &c->g->nodes[id];
    bool is_set = false;
    for (int j = 0; j < n->nin; j++) {
        if (c->state[n->in[j]] != 2) continue; /* its shape is checked once it is known */
        const Shape *t = &c->shape[n->in[j]];
        if (!is_set) {
            *s = *t;
            is_set = true;
        } else if (!shape_eq(s, t)) {
            char a[128], b2[128];
            return node_fail(c, id, NULL, "its inputs differ in shape: %s from '%s', %s from '%s'",
                             shape_str(a, sizeof a, s), c->g->nodes[n->in[0]].name,
                             shape_str(b2, sizeof b2, t), c->g->nodes[n->in[j]].name);
        }
    }
    if (!is_set)
        return node_fail(c, id, NULL, "its input's shape depends on itself (a cycle with nothing "
                                      "feeding it from outside)");
    return true;
}

static bool
set_ident(Ctx *c, int id)
{
    c->ref[id] = c->ident[id];
    return true;
}

/* a node that passes its input through: reuse the source's name when there is one source */
static bool
pass_through(Ctx *c, int id, const Shape *in)
{
    const NirNode *n = &c->g->nodes[id];
    c->shape[id] = *in;
    if (n->nin == 1 && !c->is_back[c->back_base[id]] && !c->is_back_src[id] &&
        !c->is_used_early[id]) {
        c->ref[id] = c->ref[n->in[0]];
        return true;
    }
    /* a sum: bound to its own name (add of the sources) */
    Buf e = {0};
    input_expr(c, id, &e);
    put(c->out, "  %s = %s\n", c->ident[id], e.s ? e.s : "");
    free(e.s);
    return set_ident(c, id);
}

/* Conv1d (nsp 1: [C, L]) and Conv2d (nsp 2: [C, H, W]): PyTorch's fields, checked against the
 * input's shape */
static bool
emit_conv(Ctx *c, int id, const Shape *in, const char *x, int nsp)
{
    const NirNode *n = &c->g->nodes[id];
    bool ok = true;
    const NirObj *w = numbers(c, id, "weight", true, &ok);
    if (!ok) return false;
    bool is_shaped = w->rank == 2 + nsp;
    for (int d = 0; is_shaped && d < w->rank; d++)
        is_shaped = w->dims[d] >= 1;
    if (!is_shaped)
        return node_fail(c, id, "weight", "expected [out, in/groups, %s], found rank %d",
                         nsp == 1 ? "k" : "kh, kw", w->rank);
    const int64_t *k = w->dims + 2; /* nsp kernel sizes */
    int64_t stride[2], dil[2], pad[2], groups[2];
    if (!(pair(c, id, "stride", false, 1, stride, 1) && pair(c, id, "dilation", false, 1, dil, 1) &&
          pair(c, id, "groups", false, 1, groups, 1)))
        return false;
    const NirObj *p = nir_obj_find(n->group, "padding");
    if (p && p->kind == NIR_STRINGS && p->numel == 1) {
        bool is_same = strcmp(p->str[0], "same") == 0;
        for (int d = 0; d < nsp; d++)
            is_same = is_same && (dil[d] * (k[d] - 1)) % 2 == 0 && stride[d] == 1;
        if (strcmp(p->str[0], "valid") != 0 && !is_same)
            return node_fail(c, id, "padding", "'%s' is not supported here (\"valid\", or \"same\" "
                             "with stride 1 and an odd dilated kernel)", p->str[0]);
        for (int d = 0; d < 2; d++)
            pad[d] = is_same ? dil[d < nsp ? d : 0] * (k[d < nsp ? d : 0] - 1) / 2 : 0;
    } else if (!pair(c, id, "padding", false, 0, pad, 0)) {
        return false;
    }
    if (nsp == 1 && (stride[0] != stride[1] || dil[0] != dil[1] || pad[0] != pad[1] ||
                     groups[0] != groups[1]))
        return node_fail(c, id, NULL, "stride, padding, dilation and groups of a 1-D convolution "
                                      "are one number each");
    char a[128];
    if (in->rank != 1 + nsp)
        return node_fail(c, id, NULL, "its input has shape %s; a %d-D convolution reads %s",
                         shape_str(a, sizeof a, in), nsp, nsp == 1 ? "[C, L]" : "[C, H, W]");
    int64_t cin = in->dims[0];
    if (cin % groups[0] != 0 || w->dims[0] % groups[0] != 0 || w->dims[1] * groups[0] != cin)
        return node_fail(c, id, "weight", "[%lld, %lld, ...] with groups = %lld for %lld input "
                         "channels", (long long)w->dims[0], (long long)w->dims[1],
                         (long long)groups[0], (long long)cin);
    Shape out = {1 + nsp, {w->dims[0]}};
    for (int d = 0; d < nsp; d++) {
        out.dims[1 + d] = conv_out(in->dims[1 + d], k[d], stride[d], pad[d], dil[d]);
        if (out.dims[1 + d] < 1)
            return node_fail(c, id, "weight", "the kernel does not fit the input %s",
                             shape_str(a, sizeof a, in));
    }
    const NirObj *bias = numbers(c, id, "bias", false, &ok);
    if (!ok) return false;
    bool has_bias = bias && bias->numel > 0;
    if (has_bias && bias->numel != w->dims[0])
        return node_fail(c, id, "bias", "%lld values for %lld output channels",
                         (long long)bias->numel, (long long)w->dims[0]);
    if (!add_tensor(c, id, "weight", w) || (has_bias && !add_tensor(c, id, "bias", bias)))
        return false;
    c->shape[id] = out;
    if (nsp == 1)
        put(c->out, "  %s = conv1d(%s, %lld, kernel = %lld, stride = %lld, pad = %lld, dilation = "
            "%lld", c->ident[id], x, (long long)w->dims[0], (long long)k[0], (long long)stride[0],
            (long long)pad[0], (long long)dil[0]);
    else
        put(c->out, "  %s = conv2d(%s, %lld, kernel = (%lld, %lld), stride = (%lld, %lld), pad = "
            "(%lld, %lld), dilation = (%lld, %lld)", c->ident[id], x, (long long)w->dims[0],
            (long long)k[0], (long long)k[1], (long long)stride[0], (long long)stride[1],
            (long long)pad[0], (long long)pad[1], (long long)dil[0], (long long)dil[1]);
    put(c->out, ", groups = %lld, bias = %s, name = ", (long long)groups[0],
        has_bias ? "true" : "false");
    put_quoted(c->out, n->name);
    put(c->out, ")\n");
    return set_ident(c, id);
}

static bool
emit_node(Ctx *c, int id)
{
    const NirNode *n = &c->g->nodes[id];
    char nb[64];
    Shape in = {0};
    bool is_model_input = n->kind == NK_INPUT && n->is_top;
    if (!is_model_input && !input_shape(c, id, &in)) return false;
    Buf e = {0};
    if (!is_model_input) input_expr(c, id, &e);
    const char *x = e.s ? e.s : "";
    bool ok = true;
    switch (n->kind) {
    case NK_INPUT: {
        bool is_given;
        Shape s = {0};
        if (!io_shape(c, id, &s, &is_given)) return false;
        if (!n->is_top) {
            ok = pass_through(c, id, &in);
            if (ok && is_given && shape_numel(&s) != shape_numel(&in)) {
                char a[128], b2[128];
                ok = node_fail(c, id, "shape", "%s, but its input is %s", shape_str(a, sizeof a, &s),
                               shape_str(b2, sizeof b2, &in));
            }
            break;
        }
        if (!is_given) return node_fail(c, id, "shape", "missing");
        c->shape[id] = s;
        char a[128];
        shape_str(a, sizeof a, &s);
        put(c->out, "  input %s : %s[T, %s\n", c->ident[id], c->o->spike_inputs ? "spike" : "f32",
            a + 1);
        set_ident(c, id);
        break;
    }
    case NK_OUTPUT: {
        bool is_given;
        Shape s = {0};
        if (!(ok = io_shape(c, id, &s, &is_given))) break;
        if (is_given && shape_numel(&s) != shape_numel(&in)) {
            char a[128], b2[128];
            ok = node_fail(c, id, "shape", "%s, but its input is %s", shape_str(a, sizeof a, &s),
                           shape_str(b2, sizeof b2, &in));
            break;
        }
        if (!n->is_top) {
            ok = pass_through(c, id, &in);
            break;
        }
        c->shape[id] = in;
        put(c->out, "  output %s = sequence(%s)\n", c->ident[id], x);
        break;
    }
    case NK_AFFINE:
    case NK_LINEAR: {
        const NirObj *w = numbers(c, id, "weight", true, &ok);
        if (!ok) break;
        if (w->rank != 2 || w->dims[0] < 1 || w->dims[1] < 1) {
            ok = node_fail(c, id, "weight", "expected [out, in], found rank %d", w->rank);
            break;
        }
        if (w->dims[1] != shape_numel(&in)) {
            char a[128];
            ok = node_fail(c, id, "weight", "[%lld, %lld] for an input of shape %s (%lld values)",
                           (long long)w->dims[0], (long long)w->dims[1], shape_str(a, sizeof a, &in),
                           (long long)shape_numel(&in));
            break;
        }
        const NirObj *bias = n->kind == NK_AFFINE ? numbers(c, id, "bias", true, &ok) : NULL;
        if (!ok) break;
        if (bias && bias->numel != w->dims[0]) {
            ok = node_fail(c, id, "bias", "%lld values for %lld outputs", (long long)bias->numel,
                           (long long)w->dims[0]);
            break;
        }
        ok = add_tensor(c, id, "weight", w) && (!bias || add_tensor(c, id, "bias", bias));
        c->shape[id] = (Shape){1, {w->dims[0]}};
        put(c->out, "  %s = dense(%s, %lld, bias = %s, name = ", c->ident[id], x,
            (long long)w->dims[0], bias ? "true" : "false");
        put_quoted(c->out, n->name);
        put(c->out, ")\n");
        set_ident(c, id);
        break;
    }
    case NK_SCALE: {
        double k;
        if (!(ok = uniform(c, id, "scale", &in, true, 0, &k) &&
                   finite32(c, id, 1, &k, (const char *const[]){"scale"})))
            break;
        c->shape[id] = in;
        put(c->out, "  %s = scale(%s, %s)\n", c->ident[id], x, num(nb, sizeof nb, f32(k)));
        set_ident(c, id);
        break;
    }
    case NK_CONV1D:
    case NK_CONV2D: ok = emit_conv(c, id, &in, x, n->kind == NK_CONV1D ? 1 : 2); break;
    case NK_SUMPOOL2D:
    case NK_AVGPOOL2D: {
        int64_t k[2], stride[2], pad[2];
        if (!(ok = pair(c, id, "kernel_size", true, 0, k, 1) &&
                   pair(c, id, "stride", false, 0, stride, 1) &&
                   pair(c, id, "padding", false, 0, pad, 0)))
            break;
        if (!nir_obj_find(n->group, "stride")) stride[0] = k[0], stride[1] = k[1];
        char a[128];
        if (in.rank != 3) {
            ok = node_fail(c, id, NULL, "its input has shape %s; 2-D pooling reads [C, H, W]",
                           shape_str(a, sizeof a, &in));
            break;
        }
        int64_t oh = conv_out(in.dims[1], k[0], stride[0], pad[0], 1);
        int64_t ow = conv_out(in.dims[2], k[1], stride[1], pad[1], 1);
        if (oh < 1 || ow < 1 || pad[0] * 2 > k[0] || pad[1] * 2 > k[1]) {
            ok = node_fail(c, id, "kernel_size", "a %lldx%lld window (padding %lld, %lld) does not "
                           "fit the input %s", (long long)k[0], (long long)k[1], (long long)pad[0],
                           (long long)pad[1], shape_str(a, sizeof a, &in));
            break;
        }
        c->shape[id] = (Shape){3, {in.dims[0], oh, ow}};
        put(c->out, "  %s = %s(%s, (%lld, %lld), stride = (%lld, %lld), pad = (%lld, %lld))\n",
            c->ident[id], n->kind == NK_SUMPOOL2D ? "sumpool2d" : "avgpool2d", x, (long long)k[0],
            (long long)k[1], (long long)stride[0], (long long)stride[1], (long long)pad[0],
            (long long)pad[1]);
        set_ident(c, id);
        break;
    }
    case NK_FLATTEN: {
        double sd = 0, ed = -1;
        if (!(ok = uniform(c, id, "start_dim", NULL, false, 0, &sd) &&
                   uniform(c, id, "end_dim", NULL, false, -1, &ed)))
            break;
        int64_t s0 = (int64_t)sd < 0 ? (int64_t)sd + in.rank : (int64_t)sd;
        int64_t e0 = (int64_t)ed < 0 ? (int64_t)ed + in.rank : (int64_t)ed;
        if (sd != floor(sd) || ed != floor(ed) || s0 < 0 || e0 >= in.rank || s0 > e0) {
            ok = node_fail(c, id, "start_dim", "dimensions %g to %g of a rank-%d input", sd, ed,
                           in.rank);
            break;
        }
        if (in.rank - (e0 - s0) != 1 && s0 != e0) {
            ok = node_fail(c, id, "start_dim", "flattening dimensions %lld to %lld of a rank-%d "
                           "input leaves %lld dimensions; snnc flattens whole samples only",
                           (long long)s0, (long long)e0, in.rank, (long long)(in.rank - (e0 - s0)));
            break;
        }
        if (s0 == e0 || in.rank == 1) {
            ok = pass_through(c, id, &in);
            break;
        }
        c->shape[id] = (Shape){1, {shape_numel(&in)}};
        put(c->out, "  %s = flatten(%s)\n", c->ident[id], x);
        set_ident(c, id);
        break;
    }
    case NK_DELAY: {
        double d;
        if (!(ok = uniform(c, id, "delay", &in, true, 0, &d))) break;
        double steps = d / c->dt;
        double k = nearbyint(steps);
        if (k < 0 || fabs(steps - k) > 1e-6 * (k > 1 ? k : 1) || k > 1e6 || (k == 0 && d > 0)) {
            ok = node_fail(c, id, "delay", "%g s is not a whole number of steps of dt = %g s", d,
                           c->dt);
            break;
        }
        c->shape[id] = in;
        if (k == 0) {
            ok = pass_through(c, id, &in);
            break;
        }
        put(c->out, "  %s = delay(%s, steps = %lld)\n", c->ident[id], x, (long long)k);
        set_ident(c, id);
        break;
    }
    case NK_THRESHOLD: {
        double th;
        if (!(ok = uniform(c, id, "threshold", &in, true, 0, &th) &&
                   finite32(c, id, 1, &th, (const char *const[]){"threshold"})))
            break;
        c->used[NK_THRESHOLD][0] = true;
        c->shape[id] = in;
        put(c->out, "  %s = NIR_Threshold(%s, v_th = %s)\n", c->ident[id], x,
            num(nb, sizeof nb, f32(th)));
        set_ident(c, id);
        break;
    }
    case NK_I:
    case NK_IF: {
        double r, th = 0, vr = 0;
        if (!(ok = uniform(c, id, "r", &in, true, 0, &r))) break;
        if (n->kind == NK_IF && !(ok = uniform(c, id, "v_threshold", &in, true, 0, &th) &&
                                       uniform(c, id, "v_reset", &in, false, 0, &vr)))
            break;
        double gain = c->o->impulses ? f32(r) : f32(c->dt * r);
        if (!c->o->impulses && (float)r == (float)(1.0 / c->dt)) gain = 1.0; /* r = 1/dt */
        if (c->o->framework == NIR_FW_SPYX) gain = 1.0; /* Spyx reads IF without r */
        if (c->o->framework == NIR_FW_LAVA_DL && n->kind == NK_IF) {
            /* the lava-dl script: threshold r v_th, the input added as it is */
            th = f32(th * r);
            gain = 1.0;
        }
        if (!(ok = finite32(c, id, 3, (const double[]){gain, th, vr},
                            (const char *const[]){"input gain", "v_threshold", "v_reset"})))
            break;
        c->shape[id] = in;
        if (n->kind == NK_I) {
            c->used[NK_I][0] = true;
            put(c->out, "  %s = NIR_I(%s, gain = %s)\n", c->ident[id], x, num(nb, sizeof nb, gain));
        } else {
            NeuronVariant v = variant(c, id);
            c->used[NK_IF][v] = true;
            char b1[64], b2[64];
            if (v == NV_MULTI)
                put(c->out, "  %s = NIR_IF%s(%s, gain = %s, v_th = %s, v_min = %s)\n", c->ident[id],
                    variant_suffix[v], x, num(nb, sizeof nb, gain), num(b1, sizeof b1, f32(th)),
                    num(b2, sizeof b2, -f32(th)));
            else
                put(c->out, "  %s = NIR_IF%s(%s, gain = %s, v_th = %s, v_reset = %s)\n",
                    c->ident[id], variant_suffix[v], x, num(nb, sizeof nb, gain),
                    num(b1, sizeof b1, f32(th)), num(b2, sizeof b2, f32(vr)));
            observe(c, id, r, 0, gain, 1.0, 0, 0, th);
        }
        set_ident(c, id);
        break;
    }
    case NK_LI:
    case NK_LIF: {
        double tau, r, vl, th = 0, vr = 0;
        if (!(ok = uniform(c, id, "tau", &in, true, 0, &tau) &&
                   uniform(c, id, "r", &in, true, 0, &r) &&
                   uniform(c, id, "v_leak", &in, false, 0, &vl)))
            break;
        if (n->kind == NK_LIF && !(ok = uniform(c, id, "v_threshold", &in, true, 0, &th) &&
                                        uniform(c, id, "v_reset", &in, false, 0, &vr)))
            break;
        if (tau <= 0) {
            ok = node_fail(c, id, "tau", "%g (a time constant must be positive)", tau);
            break;
        }
        double decay, gain;
        bool is_conv;
        discretise(c, tau, r, &decay, &gain, &is_conv);
        if (!(ok = finite32(c, id, 5, (const double[]){decay, gain, vl, th, vr},
                            (const char *const[]){"decay", "input gain", "v_leak", "v_threshold",
                                                  "v_reset"})))
            break;
        if (is_conv) c->ngain_one++; else c->ngain_other++;
        c->shape[id] = in;
        char b0[64], b1[64], b2[64], b3[64];
        if (n->kind == NK_LI) {
            c->used[NK_LI][0] = true;
            put(c->out, "  %s = NIR_LI(%s, decay = %s, gain = %s, v_leak = %s)\n", c->ident[id], x,
                num(nb, sizeof nb, decay), num(b0, sizeof b0, gain), num(b1, sizeof b1, f32(vl)));
        } else {
            NeuronVariant v = variant(c, id);
            /* SpikingJelly's LIF divides by tau in steps: decay_input=True writes r = 1,
             * decay_input=False r = tau/dt */
            double steps = f32(tau / c->dt);
            if (v == NV_GE && c->o->framework == NIR_FW_SPIKINGJELLY) {
                if (is_conv) v = NV_GE_NODECAY;
                gain = is_conv ? 1.0 : f32(r);
            }
            c->used[NK_LIF][v] = true;
            if (v == NV_MULTI)
                put(c->out, "  %s = NIR_LIF%s(%s, decay = %s, gain = %s, v_leak = %s, v_th = %s)\n",
                    c->ident[id], variant_suffix[v], x, num(nb, sizeof nb, decay),
                    num(b0, sizeof b0, gain), num(b1, sizeof b1, f32(vl)),
                    num(b2, sizeof b2, f32(th)));
            else
                put(c->out, "  %s = NIR_LIF%s(%s, %s = %s, gain = %s, v_leak = %s, v_th = %s, "
                    "v_reset = %s)\n", c->ident[id], variant_suffix[v], x,
                    v == NV_GE || v == NV_GE_NODECAY ? "tau" : "decay",
                    num(nb, sizeof nb, v == NV_GE || v == NV_GE_NODECAY ? steps : decay),
                    num(b0, sizeof b0, gain), num(b1, sizeof b1, f32(vl)),
                    num(b2, sizeof b2, f32(th)), num(b3, sizeof b3, f32(vr)));
            observe(c, id, r, tau, gain, decay, 0, 1.0, th);
        }
        set_ident(c, id);
        break;
    }
    case NK_CUBALI:
    case NK_CUBALIF: {
        double ts, tm, r, vl, win, th = 0, vr = 0;
        if (!(ok = uniform(c, id, "tau_syn", &in, true, 0, &ts) &&
                   uniform(c, id, "tau_mem", &in, true, 0, &tm) &&
                   uniform(c, id, "r", &in, true, 0, &r) &&
                   uniform(c, id, "v_leak", &in, false, 0, &vl) &&
                   uniform(c, id, "w_in", &in, false, 1, &win)))
            break;
        if (n->kind == NK_CUBALIF && !(ok = uniform(c, id, "v_threshold", &in, true, 0, &th) &&
                                            uniform(c, id, "v_reset", &in, false, 0, &vr)))
            break;
        if (ts <= 0 || tm <= 0) {
            ok = node_fail(c, id, ts <= 0 ? "tau_syn" : "tau_mem", "%g (a time constant must be "
                           "positive)", ts <= 0 ? ts : tm);
            break;
        }
        double sdecay, sgain, decay, gain;
        bool is_sconv, is_conv;
        discretise(c, ts, win, &sdecay, &sgain, &is_sconv);
        if (c->o->impulses) sgain = f32(win), is_sconv = true;
        if (c->o->framework == NIR_FW_SPYX) sgain = 1.0; /* Spyx reads CubaLIF without w_in */
        discretise(c, tm, r, &decay, &gain, &is_conv);
        if (!(ok = finite32(c, id, 7, (const double[]){sdecay, sgain, decay, gain, vl, th, vr},
                            (const char *const[]){"synaptic decay", "synaptic input gain", "decay",
                                                  "input gain", "v_leak", "v_threshold",
                                                  "v_reset"})))
            break;
        if (is_conv && is_sconv) c->ngain_one++; else c->ngain_other++;
        c->shape[id] = in;
        char b0[64], b1[64], b2[64], b3[64], b4[64], b5[64];
        NeuronVariant v = n->kind == NK_CUBALI ? 0 : variant(c, id);
        c->used[n->kind][v] = true;
        put(c->out, "  %s = NIR_%s%s(%s, syn_decay = %s, syn_gain = %s, decay = %s, gain = %s, "
            "v_leak = %s", c->ident[id], n->kind == NK_CUBALI ? "CubaLI" : "CubaLIF",
            variant_suffix[v], x, num(nb, sizeof nb, sdecay), num(b0, sizeof b0, sgain),
            num(b1, sizeof b1, decay), num(b2, sizeof b2, gain), num(b3, sizeof b3, f32(vl)));
        if (n->kind == NK_CUBALIF) {
            put(c->out, ", v_th = %s, v_reset = %s", num(b4, sizeof b4, f32(th)),
                num(b5, sizeof b5, f32(vr)));
            observe(c, id, r, tm, gain, decay, sgain, sdecay, th);
        }
        put(c->out, ")\n");
        set_ident(c, id);
        break;
    }
    case NK_COUNT: unreachable();
    }
    free(e.s);
    return ok;
}

/* the variants a spiking kind has */
static bool
has_variant(NirKind k, NeuronVariant v)
{
    if (k == NK_LIF) return true;
    if (k == NK_IF) return v != NV_GE_NODECAY;
    if (k == NK_CUBALIF) return v != NV_MULTI && v != NV_GE_NODECAY;
    return v == NV_SAME_VALUE;
}

/* one spiking neuron definition: kind k (IF, LIF, CubaLIF) with variant v */
static void
emit_spiking(Buf *b, NirKind k, NeuronVariant v)
{
    static const char *const doc[NV_COUNT] = {
        "reset to v_reset in the step it fires",
        "reset by subtracting v_th in the step it fires",
        "reset to v_reset at the start of the next step (snnTorch's reset_mechanism=\"zero\")",
        "reset by subtracting v_th in the next step's update (snnTorch's reset_mechanism=\"subtract\")",
        ("reset to v_reset after the next step's update, its input dropped (snnTorch's RLeaky, "
         "Synaptic and RSynaptic with reset_mechanism=\"zero\")"),
        ("snnTorch's reset_delay=False with reset_mechanism=\"subtract\": a membrane still above "
         "v_th is reduced before the spike test, the reset undone where no spike follows, v_th "
         "subtracted where one does"),
        ("Sinabs: trunc(v / v_th) spikes per step for v > 0 (MultiSpike; the layer emits the "
         "count), v_th subtracted per spike (MembraneSubtract)"),
        "SpikingJelly: spike when v >= v_th, reset to v_reset in the step it fires",
        "SpikingJelly (decay_input=False): spike when v >= v_th, reset to v_reset in the step it fires",
        ("Spyx: the spike is tested on the membrane before the update and v_th subtracted in "
         "that update"),
    };
    const char *name = k == NK_IF ? "IF" : k == NK_LIF ? "LIF" : "CubaLIF";
    const char *eq = k == NK_IF ? "dv/dt = r I"
                     : k == NK_LIF ? "tau dv/dt = (v_leak - v) + r I"
                                   : "tau_syn di/dt = -i + w_in I; tau_mem dv/dt = (v_leak - v) + r i";
    bool is_sj = v == NV_GE || v == NV_GE_NODECAY;
    const char *params;
    if (k == NK_IF)
        params = v == NV_MULTI ? "gain = 1.0, v_th = 1.0, v_min = -1.0"
                               : "gain = 1.0, v_th = 1.0, v_reset = 0.0";
    else if (k == NK_LIF)
        params = v == NV_MULTI ? "decay = 0.9, gain = 1.0, v_leak = 0.0, v_th = 1.0"
                 : is_sj       ? "tau = 2.0, gain = 1.0, v_leak = 0.0, v_th = 1.0, v_reset = 0.0"
                               : "decay = 0.9, gain = 1.0, v_leak = 0.0, v_th = 1.0, v_reset = 0.0";
    else
        params = "syn_decay = 0.9, syn_gain = 1.0, decay = 0.9, gain = 1.0, v_leak = 0.0, "
                 "v_th = 1.0, v_reset = 0.0";
    const char *states = k == NK_IF ? "  state v = 0.0\n"
                         : k == NK_LIF ? "  state v = v_leak\n"
                                       : "  state i = 0.0\n  state v = v_leak\n";
    const char *update;
    if (k == NK_IF)
        update = "  v = v + gain * I\n";
    else if (k == NK_LIF)
        update = v == NV_GE           ? "  v = v + (gain * I - (v - v_leak)) / tau\n"
                 : v == NV_GE_NODECAY ? "  v = v - (v - v_leak) / tau + gain * I\n"
                                      : "  v = decay * v + gain * I + (1 - decay) * v_leak\n";
    else
        update = "  i = syn_decay * i + syn_gain * I\n"
                 "  v = decay * v + gain * i + (1 - decay) * v_leak\n";
    const char *pre = "", *post = "";
    switch (v) {
    case NV_SAME_VALUE: post = "  fire v > v_th\n  reset v = v_reset\n"; break;
    case NV_SAME_SUB: post = "  fire v > v_th\n  reset v -= v_th\n"; break;
    case NV_NEXT_VALUE: pre = "  reset v = v_reset\n"; post = "  fire v > v_th\n"; break;
    case NV_NEXT_SUB: post = "  reset v -= v_th\n  fire v > v_th\n"; break;
    case NV_NEXT_AFTER: post = "  reset v = v_reset\n  fire v > v_th\n"; break;
    case NV_SAME_SUB_REDO:
        pre = "  let was_over = v > v_th\n";
        post = "  v = v - was_over * v_th\n  fire v > v_th\n  v = v - (spike - was_over) * v_th\n";
        break;
    case NV_MULTI:
        post = k == NK_IF ? "  let n = v > 0 ? floor(v / v_th) : 0\n  v = v - n * v_th\n"
                            "  v = max(v - v_min, 0) + v_min\n  output n\n"
                          : "  let n = v > 0 ? floor(v / v_th) : 0\n  v = v - n * v_th\n"
                            "  output n\n";
        break;
    case NV_GE:
    case NV_GE_NODECAY: post = "  fire v >= v_th\n  reset v = v_reset\n"; break;
    case NV_SPYX:
        if (k == NK_CUBALIF) pre = "  fire v > v_th\n  reset v -= v_th\n";
        else pre = "  fire v > v_th\n", post = "  reset v -= v_th\n";
        break;
    case NV_COUNT: unreachable();
    }
    put(b, "# NIR %s: %s, %s\nneuron NIR_%s%s(%s) {\n%s%s%s%s}\n\n", name, eq, doc[v], name,
        variant_suffix[v], params, states, pre, update, post);
}

/* the neuron definitions, each with the reset the options chose */
static void
emit_neurons(Ctx *c, Buf *b)
{
    if (c->used[NK_THRESHOLD][0])
        put(b, "# NIR Threshold: a spike where the input exceeds v_th (no state)\n"
               "neuron NIR_Threshold(v_th = 1.0) {\n  fire I > v_th\n}\n\n");
    if (c->used[NK_I][0])
        put(b, "# NIR I: dv/dt = r I, gain = dt r\nneuron NIR_I(gain = 1.0) {\n  state v = 0.0\n"
               "  v = v + gain * I\n  output v\n}\n\n");
    if (c->used[NK_LI][0])
        put(b, "# NIR LI: tau dv/dt = (v_leak - v) + r I\nneuron NIR_LI(decay = 0.9, gain = 1.0, "
               "v_leak = 0.0) {\n  state v = v_leak\n  v = decay * v + gain * I + (1 - decay) * "
               "v_leak\n  output v\n}\n\n");
    if (c->used[NK_CUBALI][0])
        put(b, "# NIR CubaLI: tau_syn di/dt = -i + w_in I; tau_mem dv/dt = (v_leak - v) + r i\n"
               "neuron NIR_CubaLI(syn_decay = 0.9, syn_gain = 1.0, decay = 0.9, gain = 1.0, "
               "v_leak = 0.0) {\n  state i = 0.0\n  state v = v_leak\n  i = syn_decay * i + "
               "syn_gain * I\n  v = decay * v + gain * i + (1 - decay) * v_leak\n  output v\n}\n\n");
    static const NirKind spiking[] = {NK_IF, NK_LIF, NK_CUBALIF};
    for (int v = 0; v < NV_COUNT; v++)
        for (int j = 0; j < 3; j++)
            if (c->used[spiking[j]][v] && has_variant(spiking[j], (NeuronVariant)v))
                emit_spiking(b, spiking[j], (NeuronVariant)v);
}

char *
nir_neuron_library(void)
{
    Ctx c = {0};
    for (int k = 0; k < NK_COUNT; k++)
        for (int v = 0; v < NV_COUNT; v++)
            c.used[k][v] = true;
    Buf t = {0};
    emit_neurons(&c, &t);
    put(&t, "model nir_neurons {\n  timesteps 1\n  input x : f32[T, 1]\n");
    static const char *const names[] = {"Threshold", "I", "LI", "CubaLI", "IF", "LIF", "CubaLIF"};
    static const NirKind kinds[] = {NK_THRESHOLD, NK_I, NK_LI, NK_CUBALI, NK_IF, NK_LIF, NK_CUBALIF};
    int k = 0;
    for (int i = 0; i < 7; i++)
        for (int v = 0; v < (i < 4 ? 1 : NV_COUNT); v++)
            if (has_variant(kinds[i], (NeuronVariant)v))
                put(&t, "  output o%d = sequence(NIR_%s%s(x))\n", k++, names[i], variant_suffix[v]);
    put(&t, "}\n");
    if (t.is_oom) die("out of memory");
    return t.s;
}

/* ---- names and order ---- */

static bool
is_reserved(const char *s)
{
    static const char *const words[] = {
        "include", "neuron", "model", "state", "let", "fire", "reset", "refractory", "output",
        "surrogate", "timesteps", "weights", "seed", "schedule", "fuse", "input", "loc", "true",
        "false", "and", "or", "not", "down", "I", "spike", "T", "B", "memory", "accumulate", NULL};
    for (int i = 0; words[i]; i++)
        if (strcmp(s, words[i]) == 0) return true;
    return strncmp(s, "NIR_", 4) == 0;
}

static bool
make_idents(Ctx *c)
{
    int n = c->g->nnodes;
    for (int i = 0; i < n; i++) {
        const char *name = c->g->nodes[i].name;
        size_t len = strlen(name);
        char *s = malloc(len + 16);
        if (!s) return fail(c, "out of memory");
        size_t k = 0;
        if (!((name[0] >= 'A' && name[0] <= 'Z') || (name[0] >= 'a' && name[0] <= 'z') ||
              name[0] == '_'))
            s[k++] = 'n', s[k++] = '_';
        for (size_t j = 0; j < len; j++) {
            char ch = name[j];
            bool is_ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                         (ch >= '0' && ch <= '9') || ch == '_';
            s[k++] = is_ok ? ch : '_';
        }
        s[k] = 0;
        if (is_reserved(s)) s[k++] = '_', s[k] = 0;
        /* unique: a suffix _2, _3... */
        size_t base = k;
        for (int tries = 2;; tries++) {
            bool is_taken = false;
            for (int j = 0; j < i && !is_taken; j++)
                is_taken = strcmp(c->ident[j], s) == 0;
            if (!is_taken) break;
            snprintf(s + base, 16, "_%d", tries);
        }
        c->ident[i] = s;
    }
    return true;
}

/* c->in_cycle: the nodes on a cycle of the graph, its strongly connected components of two nodes
 * or more (and nodes with an edge to themselves), by Kosaraju's two depth-first passes, iterative:
 * finishing order on the graph, then components on the reversed graph in reverse finishing order */
static bool
find_cycles(Ctx *c)
{
    const NirGraph *g = c->g;
    int n = g->nnodes, nedges = 0;
    for (int i = 0; i < n; i++)
        nedges += g->nodes[i].nin;
    c->in_cycle = calloc((size_t)n + 1, sizeof *c->in_cycle);
    int *sbase = calloc((size_t)n + 2, sizeof *sbase), *succ = malloc(((size_t)nedges + 1) * sizeof *succ);
    int *order = malloc(((size_t)n + 1) * sizeof *order), *comp = malloc(((size_t)n + 1) * sizeof *comp);
    int *stack = malloc(((size_t)n + 1) * sizeof *stack), *pos = calloc((size_t)n + 1, sizeof *pos);
    int *size = calloc((size_t)n + 1, sizeof *size);
    bool ok = c->in_cycle && sbase && succ && order && comp && stack && pos && size;
    if (ok) {
        /* successors of each node (src -> i for every input src of i) */
        for (int i = 0; i < n; i++)
            for (int j = 0; j < g->nodes[i].nin; j++)
                sbase[g->nodes[i].in[j] + 1]++;
        for (int i = 0; i < n; i++)
            sbase[i + 1] += sbase[i];
        for (int i = 0; i < n; i++)
            for (int j = 0; j < g->nodes[i].nin; j++)
                succ[sbase[g->nodes[i].in[j]] + pos[g->nodes[i].in[j]]++] = i;
        /* pass 1: finishing order */
        int norder = 0;
        for (int i = 0; i < n; i++)
            comp[i] = -1, pos[i] = 0;
        for (int root = 0; root < n; root++) {
            if (comp[root] != -1) continue;
            int sp = 0;
            stack[sp++] = root;
            comp[root] = -2; /* visited */
            while (sp) {
                int u = stack[sp - 1];
                if (pos[u] < sbase[u + 1] - sbase[u]) {
                    int v = succ[sbase[u] + pos[u]++];
                    if (comp[v] == -1) comp[v] = -2, stack[sp++] = v;
                } else {
                    order[norder++] = u;
                    sp--;
                }
            }
        }
        /* pass 2: on the reversed graph (a node's inputs are its successors there) */
        for (int i = 0; i < n; i++)
            comp[i] = -1;
        for (int k = n - 1; k >= 0; k--) {
            int root = order[k];
            if (comp[root] != -1) continue;
            int sp = 0;
            stack[sp++] = root;
            comp[root] = root;
            while (sp) {
                int u = stack[--sp];
                size[root]++;
                for (int j = 0; j < g->nodes[u].nin; j++) {
                    int v = g->nodes[u].in[j];
                    if (comp[v] == -1) comp[v] = root, stack[sp++] = v;
                }
            }
        }
        for (int i = 0; i < n; i++) {
            c->in_cycle[i] = size[comp[i]] > 1;
            for (int j = 0; j < g->nodes[i].nin; j++)
                if (g->nodes[i].in[j] == i) c->in_cycle[i] = true;
        }
    }
    free(sbase);
    free(succ);
    free(order);
    free(comp);
    free(stack);
    free(pos);
    free(size);
    return ok ? true : fail(c, "out of memory");
}

/* depth-first from the model's inputs along the edges: an edge into a node on the current path
 * closes a cycle and becomes a delay; then the nodes in an order where every other edge points
 * forward */
static bool
schedule(Ctx *c)
{
    const NirGraph *g = c->g;
    int n = g->nnodes, nedges = 0;
    c->back_base = calloc((size_t)n + 1, sizeof *c->back_base);
    for (int i = 0; i < n && c->back_base; i++) {
        c->back_base[i] = nedges;
        nedges += g->nodes[i].nin;
    }
    if (!c->back_base) return fail(c, "out of memory");
    c->back_base[n] = nedges;
    c->is_back = calloc((size_t)nedges + 1, sizeof *c->is_back);
    c->is_back_src = calloc((size_t)n + 1, sizeof *c->is_back_src);
    /* successors: (dst, edge index) lists */
    int *nsucc = calloc((size_t)n + 1, sizeof *nsucc), *sbase = calloc((size_t)n + 1, sizeof *sbase);
    int *succ = malloc(((size_t)nedges + 1) * sizeof *succ);
    int *state = calloc((size_t)n, sizeof *state); /* 0 new, 1 on path, 2 done */
    int *stack = malloc(((size_t)n + 1) * sizeof *stack), *pos = calloc((size_t)n + 1, sizeof *pos);
    int *indeg = calloc((size_t)n + 1, sizeof *indeg);
    int *edst = malloc(((size_t)nedges + 1) * sizeof *edst); /* edge → its destination */
    int *pri = malloc(((size_t)n + 1) * sizeof *pri);         /* Kahn's preference */
    bool ok = c->is_back && c->is_back_src && nsucc && sbase && succ && state && stack && pos &&
              indeg && edst && pri;
    if (ok) {
        for (int i = 0; i < n; i++)
            for (int j = 0; j < g->nodes[i].nin; j++)
                edst[c->back_base[i] + j] = i;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < g->nodes[i].nin; j++)
                nsucc[g->nodes[i].in[j]]++;
        for (int i = 0, s = 0; i < n; i++) {
            sbase[i] = s;
            s += nsucc[i];
            nsucc[i] = 0;
        }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < g->nodes[i].nin; j++) {
                int src = g->nodes[i].in[j];
                succ[sbase[src] + nsucc[src]++] = c->back_base[i] + j;
            }
        /* a Delay of a positive time reads its input's past: its input edge needs no order (the
         * language's delay may name a value defined later) and breaks any cycle through it */
        for (int i = 0; i < n; i++) {
            const NirObj *d = nir_obj_find(g->nodes[i].group, "delay");
            bool is_positive = d && d->kind == NIR_NUMBERS && d->numel > 0 && d->num[0] > 0;
            for (int j = 0; g->nodes[i].kind == NK_DELAY && is_positive && j < g->nodes[i].nin; j++)
                c->is_back[c->back_base[i] + j] = true;
        }
        for (int pass = 0; pass < 2; pass++)
            for (int root = 0; root < n; root++) {
                bool is_start = pass == 0 ? g->nodes[root].is_top && g->nodes[root].kind == NK_INPUT
                                          : true;
                if (!is_start || state[root]) continue;
                int sp = 0;
                stack[sp++] = root;
                state[root] = 1;
                pos[root] = 0;
                while (sp) {
                    int u = stack[sp - 1];
                    if (pos[u] == nsucc[u]) {
                        state[u] = 2;
                        sp--;
                        continue;
                    }
                    int e = succ[sbase[u] + pos[u]++];
                    int v = edst[e];
                    if (c->is_back[e]) continue; /* into a Delay */
                    if (state[v] == 1) {
                        c->is_back[e] = true;
                    } else if (state[v] == 0) {
                        state[v] = 1;
                        pos[v] = 0;
                        stack[sp++] = v;
                    }
                }
            }
        /* A synapse (affine, linear, scale, conv, pooling, flatten) with one input that closes a
         * cycle takes the delay on its input instead: it then acts on the previous step's spikes
         * (at the first step on zeros, so a bias counts from the start), as snnTorch's recurrent
         * layers compute it. Its one input is its only way into the cycle, so no cycle remains. */
        for (int i = 0; i < n; i++)
            for (int j = 0; j < g->nodes[i].nin; j++) {
                int e = c->back_base[i] + j;
                if (!c->is_back[e] || g->nodes[i].kind == NK_DELAY) continue;
                for (int u = g->nodes[i].in[j], hops = 0; hops < n; hops++) {
                    NirKind k = g->nodes[u].kind;
                    bool is_synapse = k == NK_AFFINE || k == NK_LINEAR || k == NK_SCALE ||
                                      k == NK_CONV2D || k == NK_SUMPOOL2D || k == NK_AVGPOOL2D ||
                                      k == NK_FLATTEN;
                    int ue = c->back_base[u];
                    if (!is_synapse || g->nodes[u].nin != 1 || c->is_back[ue]) break;
                    c->is_back[e] = false;
                    c->is_back[ue] = true;
                    e = ue;
                    u = g->nodes[u].in[0];
                }
            }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < g->nodes[i].nin; j++)
                if (c->is_back[c->back_base[i] + j]) c->is_back_src[g->nodes[i].in[j]] = true;
        /* Kahn over the forward edges, taking first the ready node a walk along every edge from
         * the inputs reaches first (so the text reads in the direction data flows) */
        int npri = 0;
        for (int i = 0; i < n; i++)
            pri[i] = -1;
        for (int pass = 0; pass < 2; pass++)
            for (int root = 0; root < n; root++) {
                bool is_start = pass == 1 || (g->nodes[root].is_top && g->nodes[root].kind == NK_INPUT);
                if (!is_start || pri[root] >= 0) continue;
                int sp = 0;
                stack[sp++] = root;
                pri[root] = npri++;
                pos[root] = 0;
                while (sp) {
                    int u = stack[sp - 1];
                    if (pos[u] == nsucc[u]) {
                        sp--;
                        continue;
                    }
                    int v = edst[succ[sbase[u] + pos[u]++]];
                    if (pri[v] < 0) {
                        pri[v] = npri++;
                        pos[v] = 0;
                        stack[sp++] = v;
                    }
                }
            }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < g->nodes[i].nin; j++)
                indeg[i] += !c->is_back[c->back_base[i] + j];
        c->order = malloc(((size_t)n + 1) * sizeof *c->order);
        ok = c->order != NULL;
        int *ready = stack, nready = 0;
        for (int i = 0; ok && i < n; i++)
            if (indeg[i] == 0) ready[nready++] = i;
        while (ok && nready) {
            int best = 0;
            for (int k = 1; k < nready; k++)
                if (pri[ready[k]] < pri[ready[best]]) best = k;
            int u = ready[best];
            ready[best] = ready[--nready];
            c->order[c->norder++] = u;
            for (int k = 0; k < nsucc[u]; k++) {
                int e = succ[sbase[u] + k];
                if (c->is_back[e]) continue;
                int v = edst[e];
                if (--indeg[v] == 0) ready[nready++] = v;
            }
        }
    }
    free(nsucc);
    free(sbase);
    free(succ);
    free(state);
    free(stack);
    free(pos);
    free(indeg);
    free(edst);
    free(pri);
    if (!ok) return fail(c, "out of memory");
    if (c->norder != n) return fail(c, "internal: cycle left after breaking back edges");
    return true;
}

static void
ctx_free(Ctx *c)
{
    int n = c->g->nnodes;
    for (int i = 0; c->ident && i < n; i++)
        free(c->ident[i]);
    free(c->ident);
    free(c->ref);
    free(c->shape);
    free(c->order);
    free(c->is_back);
    free(c->is_back_src);
    free(c->back_base);
    for (int i = 0; c->texts && i < n; i++)
        free(c->texts[i].s);
    free(c->texts);
    free(c->state);
    free(c->is_used_early);
    free(c->in_cycle);
    free(c->notes.s);
    free(c->warnings.s);
}

static char *
model_name(const char *path, const char *given)
{
    const char *base = given;
    char buf[256];
    if (!base) {
        const char *slash = strrchr(path, '/');
        base = slash ? slash + 1 : path;
        snprintf(buf, sizeof buf, "%s", base);
        char *dot = strrchr(buf, '.');
        if (dot && dot != buf) *dot = 0;
        base = buf;
    }
    size_t len = strlen(base);
    char *s = malloc(len + 4);
    if (!s) return NULL;
    size_t k = 0;
    if (!((base[0] >= 'A' && base[0] <= 'Z') || (base[0] >= 'a' && base[0] <= 'z') || base[0] == '_'))
        s[k++] = 'm', s[k++] = '_';
    for (size_t j = 0; j < len; j++) {
        char ch = base[j];
        bool is_ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                     (ch >= '0' && ch <= '9') || ch == '_';
        s[k++] = is_ok ? ch : '_';
    }
    s[k] = 0;
    if (is_reserved(s)) s[k++] = '_', s[k] = 0;
    return s;
}

static int count_lines(const char *s, size_t len);
static bool map_lines(const Ctx *c, int first, NirImport *im);

bool
nir_to_snn(const NirGraph *g, const char *path, const NirImportOptions *o, NirImport *out,
           char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    NirImportOptions preset = *o;
    nir_apply_preset(&preset);
    o = &preset;
    Ctx c = {.g = g, .path = path, .o = o, .err = err, .errlen = errlen};
    c.dt = o->dt > 0 ? o->dt : 1e-4;
    if (o->timesteps < 1)
        return fail(&c, "a NIR graph does not say how many timesteps to run: give --timesteps=N");
    int n = g->nnodes;
    c.ident = calloc((size_t)n + 1, sizeof *c.ident);
    c.ref = calloc((size_t)n + 1, sizeof *c.ref);
    c.shape = calloc((size_t)n + 1, sizeof *c.shape);
    bool ok = c.ident && c.ref && c.shape ? true : fail(&c, "out of memory");
    ok = ok && make_idents(&c) && schedule(&c) && find_cycles(&c);
    if (ok) {
        c.texts = calloc((size_t)n + 1, sizeof *c.texts);
        c.state = calloc((size_t)n + 1, sizeof *c.state);
        c.is_used_early = calloc((size_t)n + 1, sizeof *c.is_used_early);
        if (!c.texts || !c.state || !c.is_used_early) ok = fail(&c, "out of memory");
    }
    /* Each node once one of its inputs has a known shape (the model's inputs first), in definition
     * order, until all are done: a node in a cycle may need a source defined after it (read by
     * name; its shape is checked below) */
    for (bool is_progress = true; ok && is_progress;) {
        is_progress = false;
        for (int k = 0; ok && k < c.norder; k++) {
            int id = c.order[k];
            const NirNode *nd = &g->nodes[id];
            bool is_ready = nd->kind == NK_INPUT && nd->is_top;
            for (int j = 0; !is_ready && j < nd->nin; j++)
                is_ready = c.state[nd->in[j]] == 2;
            if (c.state[id] == 2 || !is_ready) continue;
            c.out = &c.texts[id];
            ok = emit_node(&c, id);
            c.state[id] = 2;
            is_progress = true;
        }
    }
    for (int i = 0; ok && i < n; i++)
        if (c.state[i] != 2)
            ok = node_fail(&c, i, NULL, "its input's shape depends on itself (a cycle with nothing "
                                        "feeding it from outside)");
    /* every edge, now that every shape is known (input_shape compared those known at the time) */
    for (int i = 0; ok && i < n; i++)
        if (g->nodes[i].nin) {
            Shape want;
            ok = input_shape(&c, i, &want);
            for (int j = 0; ok && j < g->nodes[i].nin; j++) {
                const Shape *s = &c.shape[g->nodes[i].in[j]];
                if (!shape_eq(s, &want)) {
                    char a[128], b[128];
                    ok = node_fail(&c, i, NULL, "its inputs differ in shape: %s from '%s', %s from "
                                   "'%s'", shape_str(a, sizeof a, &want),
                                   g->nodes[g->nodes[i].in[0]].name, shape_str(b, sizeof b, s),
                                   g->nodes[g->nodes[i].in[j]].name);
                }
                int src = g->nodes[i].in[j];
                if (ok && (c.is_back[c.back_base[i] + j] || c.is_used_early[src]) &&
                    c.ref[src] != c.ident[src])
                    ok = node_fail(&c, i, NULL, "internal: a name read early was not bound");
            }
        }
    Buf body = {0};
    for (int k = 0; ok && k < c.norder; k++) {
        const Buf *b = &c.texts[c.order[k]];
        if (b->is_oom) ok = fail(&c, "out of memory");
        else if (b->s) put(&body, "%s", b->s);
    }
    char *name = ok ? model_name(path, o->model_name) : NULL;
    if (ok && !name) ok = fail(&c, "out of memory");
    if (ok) {
        Buf t = {0};
        const char *slash = strrchr(path, '/');
        char dtb[64];
        put(&t, "# Imported by snnc from the NIR graph %s%s%s%s.\n", slash ? slash + 1 : path,
            g->version[0] ? " (NIR " : "", g->version, g->version[0] ? ")" : "");
        put(&t, "# Discretisation: dt = %s s, %s integration, %s reset%s (snnc --dt, --integrator, "
            "--reset, --reset-step).\n", num(dtb, sizeof dtb, c.dt),
            o->integrator == NIR_EXACT ? "exact (exponential)" : "forward Euler",
            o->reset == NIR_RESET_SUBTRACT ? "subtract" : "to-value",
            o->reset_next ? " at the next step" : "");
        if (o->framework > NIR_FW_NONE)
            put(&t, "# Framework preset (--framework=%s): %s.\n", presets[o->framework].name,
                presets[o->framework].checked);
        if (o->impulses)
            put(&t, "# Impulse inputs (--impulses): IF and I add r I per step, a synaptic current "
                "w_in I.\n");
        put(&t, "# Neuron parameters per step, rounded to float32: decay (of v, and syn_decay of "
                "the synaptic current)\n# and gain (of the input) stand for NIR's tau, r and "
                "w_in.\n\n");
        emit_neurons(&c, &t);
        put(&t, "model %s {\n  timesteps %d\n", name, o->timesteps);
        if (o->weights_ref) {
            put(&t, "  weights ");
            put_quoted(&t, o->weights_ref);
            put(&t, "\n");
        }
        int body_line = count_lines(t.s, t.len); /* 0-based: the body's first line */
        put(&t, "%s}\n", body.s ? body.s : "");
        if (c.ngain_one)
            note(&c, "%d neuron layer(s) follow the exporters' convention r = tau/dt (and w_in = "
                     "tau_syn/dt) for dt = %s s: their input gain is exactly 1 (v <- beta v + I)",
                 c.ngain_one, dtb);
        if (c.ngain_other)
            note(&c, "%d neuron layer(s) do not follow r = tau/dt for dt = %s s: their gains are "
                     "computed from tau, r and w_in", c.ngain_other, dtb);
        if (c.nrleaky || c.nsynaptic_zero)
            note(&c, "reset to v_reset at the next step: %d LIF layer(s) on a cycle of the graph "
                     "read as snnTorch's RLeaky and %d CubaLIF layer(s) as Synaptic/RSynaptic: "
                     "the membrane is reset after the next step's update, dropping that step's "
                     "input (a LIF off any cycle is Leaky: reset before the update)",
                 c.nrleaky, c.nsynaptic_zero);
        if (c.nredo)
            note(&c, "%d layer(s) reset as snnTorch does with reset_delay=False and "
                     "reset_mechanism=\"subtract\" (--framework=snntorch --reset-step=same)",
                 c.nredo);
        if (o->framework > NIR_FW_NONE) {
            note(&c, "--framework=%s (%s): %s", presets[o->framework].name,
                 presets[o->framework].checked, presets[o->framework].what);
        } else if (c.nspiking) {
            note(&c, "no --framework: NIR's reading of the graph (%s, reset %s%s); a graph "
                     "exported by a framework runs as that framework ran it with "
                     "--framework=%s", o->integrator == NIR_EXACT ? "exact decays" : "forward Euler",
                 o->reset == NIR_RESET_SUBTRACT ? "by subtracting v_th" : "to v_reset",
                 o->reset_next ? " at the next step" : " in the step that fires",
                 nir_framework_list());
            /* what the parameters suggest */
            const char *hint = NULL;
            if (c.ngain_one && !c.ngain_other && c.dt == 1e-4 && !o->impulses)
                hint = "every neuron layer has r = tau/dt for dt = 1e-4, as snnTorch and "
                       "SpikingJelly write: --framework=snntorch (or spikingjelly)";
            else if (c.nr_one == c.nspiking && c.ntau_steps && !c.ntau_tiny)
                hint = "r = 1 and time constants of a step or more, as Sinabs writes (tau in "
                       "steps): --framework=sinabs";
            else if (c.nr_one == c.nspiking && c.ntau_tiny)
                hint = "r = 1 and time constants below 1e-4 s, as Norse 1.1.0 writes (tau = "
                       "dt/tau_inv): --framework=norse";
            else if (c.nr_one == c.nspiking && !o->impulses && c.warnings.len)
                hint = "r = 1 on neuron layers that cannot fire with an input gain of dt r: "
                       "--framework=norse or sinabs (inputs as impulses)";
            if (hint) note(&c, "the parameters look exported: %s", hint);
        }
        if (c.warnings.s) put(&c.notes, "%s", c.warnings.s);
        if (t.is_oom || body.is_oom || c.warnings.is_oom) {
            free(t.s);
            ok = fail(&c, "out of memory");
        } else {
            out->text = t.s;
            out->len = t.len;
            snprintf(out->notes, sizeof out->notes, "%s", c.notes.s ? c.notes.s : "");
            out->tensors = c.tensors;
            out->ntensors = c.ntensors;
            c.tensors = NULL;
            if (!map_lines(&c, body_line, out)) {
                nir_import_free(out);
                ok = fail(&c, "out of memory");
            }
        }
    }
    free(name);
    free(body.s);
    if (!ok) {
        for (int i = 0; i < c.ntensors; i++)
            rt_tensor_free(&c.tensors[i]);
        free(c.tensors);
    }
    ctx_free(&c);
    return ok;
}

const char *
nir_import_origin(void *ctx, int line)
{
    const NirImport *im = ctx;
    if (!im || line < 1 || line > im->nlines || !im->line_node) return NULL;
    int id = im->line_node[line - 1];
    return id >= 0 && id < im->nnodes ? im->node_what[id] : NULL;
}

static int
count_lines(const char *s, size_t len)
{
    int n = 0;
    for (size_t i = 0; s && i < len; i++)
        n += s[i] == '\n';
    return n;
}

/* im->line_node and im->node_what: which node each line of the text stands for (the body's lines,
 * starting at line first + 1, are the nodes' statements in definition order) */
static bool
map_lines(const Ctx *c, int first, NirImport *im)
{
    int n = c->g->nnodes;
    im->nlines = count_lines(im->text, im->len) + 1;
    im->line_node = malloc((size_t)im->nlines * sizeof *im->line_node);
    im->node_what = calloc((size_t)n + 1, sizeof *im->node_what);
    if (!im->line_node || !im->node_what) return false;
    im->nnodes = n;
    for (int i = 0; i < im->nlines; i++)
        im->line_node[i] = -1;
    for (int i = 0; i < n; i++) {
        const NirNode *nd = &c->g->nodes[i];
        size_t len = strlen(nd->name) + 32;
        if (!(im->node_what[i] = malloc(len))) return false;
        snprintf(im->node_what[i], len, "node '%s' (%s)", nd->name, nir_kind_name(nd->kind));
    }
    int line = first;
    for (int k = 0; k < c->norder; k++) {
        int id = c->order[k];
        int nl = count_lines(c->texts[id].s, c->texts[id].len);
        for (int j = 0; j < nl && line + j < im->nlines; j++)
            im->line_node[line + j] = id;
        line += nl;
    }
    return true;
}

void
nir_import_free(NirImport *im)
{
    free(im->text);
    free(im->line_node);
    for (int i = 0; im->node_what && i < im->nnodes; i++)
        free(im->node_what[i]);
    free(im->node_what);
    for (int i = 0; i < im->ntensors; i++)
        rt_tensor_free(&im->tensors[i]);
    free(im->tensors);
    memset(im, 0, sizeof *im);
}

/* The options a graph written by snnc --emit=nir stores (node/metadata/snnc_import_options, e.g.
 * "--timesteps=10 --dt=0.0001 --reset=subtract --reset-step=next") for those the user did not
 * give; what was taken goes into taken, what was not understood into ignored. */
static void
stored_options(const NirObj *root, NirImportOptions *o, char *taken, size_t tlen, char *ignored,
               size_t ilen)
{
    taken[0] = ignored[0] = 0;
    const NirObj *meta = nir_obj_find(nir_obj_find(root, "node"), "metadata");
    /* an exporter's own key: metadata/framework = "snntorch", ... */
    const NirObj *fw = nir_obj_find(meta, "framework");
    if (fw && fw->kind == NIR_STRINGS && fw->numel == 1 && !(o->given & NIR_GIVEN_FRAMEWORK)) {
        NirFramework f = nir_framework_parse(fw->str[0]);
        if (f < NIR_FW_COUNT) {
            o->framework = f;
            o->stored |= NIR_GIVEN_FRAMEWORK;
            snprintf(taken, tlen, "framework = %s (metadata)", presets[f].name);
        } else {
            snprintf(ignored, ilen, "framework = '%.64s' (metadata; snnc knows %s)", fw->str[0],
                     nir_framework_list());
        }
    }
    const NirObj *f = nir_obj_find(meta, "snnc_import_options");
    if (!f || f->kind != NIR_STRINGS || f->numel != 1) return;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", f->str[0]);
    for (char *save = NULL, *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        const char *v = strchr(t, '=') ? strchr(t, '=') + 1 : "";
        unsigned bit = 0; /* the option's NIR_GIVEN_*: 0 when not understood */
        char *end = NULL;
        if (strncmp(t, "--timesteps=", 12) == 0) {
            long n = strtol(v, &end, 10);
            if (*v && !*end && n >= 1 && n <= 1 << 20) bit = NIR_GIVEN_TIMESTEPS;
            if (bit && !(o->given & bit)) o->timesteps = (int)n;
        } else if (strncmp(t, "--dt=", 5) == 0) {
            double d = strtod(v, &end);
            if (*v && !*end && d > 0 && isfinite(d)) bit = NIR_GIVEN_DT;
            if (bit && !(o->given & bit)) o->dt = d;
        } else if (strncmp(t, "--integrator=", 13) == 0) {
            if (strcmp(v, "euler") == 0 || strcmp(v, "exact") == 0) bit = NIR_GIVEN_INTEGRATOR;
            if (bit && !(o->given & bit)) o->integrator = v[1] == 'u' ? NIR_EULER : NIR_EXACT;
        } else if (strncmp(t, "--reset=", 8) == 0) {
            if (strcmp(v, "value") == 0 || strcmp(v, "subtract") == 0) bit = NIR_GIVEN_RESET;
            if (bit && !(o->given & bit))
                o->reset = v[0] == 'v' ? NIR_RESET_VALUE : NIR_RESET_SUBTRACT;
        } else if (strncmp(t, "--reset-step=", 13) == 0) {
            if (strcmp(v, "same") == 0 || strcmp(v, "next") == 0) bit = NIR_GIVEN_RESET_STEP;
            if (bit && !(o->given & bit)) o->reset_next = v[0] == 'n';
        } else if (strcmp(t, "--spike-inputs") == 0) {
            bit = NIR_GIVEN_SPIKE_INPUTS;
            if (!(o->given & bit)) o->spike_inputs = true;
        } else if (strcmp(t, "--impulses") == 0) {
            bit = NIR_GIVEN_IMPULSES;
            if (!(o->given & bit)) o->impulses = true;
        } else if (strncmp(t, "--framework=", 12) == 0) {
            NirFramework fwk = nir_framework_parse(v);
            if (fwk < NIR_FW_COUNT) bit = NIR_GIVEN_FRAMEWORK;
            if (bit && !(o->given & bit)) o->framework = fwk;
        }
        if (bit && !(o->given & bit)) o->stored |= bit;
        char *dst = !bit ? ignored : !(o->given & bit) ? taken : NULL;
        size_t len = dst == taken ? tlen : ilen, k = dst ? strlen(dst) : 0;
        if (dst && k + 1 < len) snprintf(dst + k, len - k, "%s%s", k ? " " : "", t);
    }
}

bool
nir_import_file(const char *path, const NirImportOptions *given, NirImport *out, char *err,
                size_t errlen)
{
    memset(out, 0, sizeof *out);
    NirObj root;
    if (!nir_h5_read(path, &root, err, errlen)) return false;
    NirImportOptions opts = *given, *o = &opts;
    char taken[512], ignored[512];
    stored_options(&root, o, taken, sizeof taken, ignored, sizeof ignored);
    NirGraph g;
    bool is_built = nir_graph_build(&root, path, &g, err, errlen);
    bool ok = is_built && nir_to_snn(&g, path, o, out, err, errlen);
    if (ok && (taken[0] || ignored[0])) {
        size_t k = strlen(out->notes);
        if (taken[0])
            k += (size_t)snprintf(out->notes + k, sizeof out->notes - k, "the file stores the "
                                  "options it was exported with; taken where not given: %s\n",
                                  taken);
        if (ignored[0] && k < sizeof out->notes)
            snprintf(out->notes + k, sizeof out->notes - k, "stored options not understood, "
                     "ignored: %s\n", ignored);
    }
    if (is_built) nir_graph_free(&g); /* also when the translation failed */
    nir_obj_free(&root);
    return ok;
}
