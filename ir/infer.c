/* Shape and dtype inference, and the weight slots every layer needs (names and shapes, no data).
 * Recurrence makes a value's shape depend on itself through a delay, so inference runs to a fixed point:
 * rules that can give a result from partial operands (dense, add) do so, and a final pass rechecks every
 * node with all operands known. Reports shape errors at the node's location. */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

typedef struct Infer {
    Module *m;
    bool *known;
    bool final; /* every operand is known: check everything and create weights */
} Infer;

static char *
tstr(const Type *t, char *buf)
{
    return type_str(t, buf, 128);
}

static const char *
vname(const Module *m, ValueId v)
{
    const Node *n = &m->nodes[v];
    return n->name ? n->name : op_info(n->op)->name;
}

static void
set_type(Node *n, DType dt, bool has_time, int rank, const int64_t *dims)
{
    n->type.dtype = dt;
    n->type.has_time = has_time;
    n->type.rank = rank;
    memcpy(n->type.dims, dims, (size_t)rank * sizeof *dims);
}

static bool
add_weight(Infer *in, ValueId v, int slot, int rank, const int64_t *dims)
{
    Module *m = in->m;
    Node *n = &m->nodes[v];
    const OpInfo *oi = op_info(n->op);
    if (n->first_weight < 0)
        n->first_weight = m->nweights;
    Weight w = {0};
    /* slot < 0: neuron parameter -1 - slot, learned */
    const char *what =
        slot >= 0 ? oi->weights[slot] : m->neurons[n->neuron]->params[-1 - slot].name;
    w.name = arena_printf(&m->arena, "%s.%s", node_layer_name(m, n), what);
    w.node = v;
    w.slot = slot < 0 ? -1 : slot;
    w.param = slot < 0 ? -1 - slot : 0;
    w.rank = rank;
    w.numel = 1;
    for (int i = 0; i < rank; i++) {
        w.dims[i] = dims[i];
        w.numel *= dims[i];
    }
    if (w.numel > ((int64_t)1 << 34)) {
        diag_error(n->loc, "%s: weight '%s' would have %lld elements", oi->name, w.name,
                   (long long)w.numel);
        return false;
    }
    m->weights = arena_grow(&m->arena, m->weights, (size_t)m->nweights * sizeof *m->weights,
                            (size_t)(m->nweights + 1) * sizeof *m->weights);
    m->weights[m->nweights++] = w;
    n->nweights++;
    return true;
}

static int64_t
pool_out(int64_t h, int64_t k, int64_t s, int64_t p, int64_t d)
{
    int64_t span = d * (k - 1) + 1;
    if (h + 2 * p < span)
        return 0;
    return (h + 2 * p - span) / s + 1;
}

static bool
spatial(Infer *in, Node *n, const Type *x, const char *what)
{
    if (x->rank != 3) {
        char b[128];
        diag_error(n->loc, "%s expects samples of shape [C, H, W], got %s", what, tstr(x, b));
        return false;
    }
    return true;
}

/* Every sample of every value stays below 2^31 elements, so sizes never overflow downstream. */
static bool
numel_in_range(const Module *m, ValueId v)
{
    const Type *t = &m->nodes[v].type;
    int64_t numel = 1;
    for (int i = 0; i < t->rank; i++) {
        if (t->dims[i] > ((int64_t)1 << 31) || (numel *= t->dims[i]) > ((int64_t)1 << 31)) {
            diag_error(m->nodes[v].loc, "'%s' would have more than 2^31 elements per sample and step",
                       vname(m, v));
            return false;
        }
    }
    return true;
}

/* Returns 1 when n's type is set, 0 when it must wait for operands, -1 on error. */
static int
infer_node(Infer *in, ValueId v)
{
    Module *m = in->m;
    Node *n = &m->nodes[v];
    const OpInfo *oi = op_info(n->op);
    const Type *x = n->nargs > 0 && in->known[n->args[0]] ? &m->nodes[n->args[0]].type : NULL;
    const Type *y = n->nargs > 1 && in->known[n->args[1]] ? &m->nodes[n->args[1]].type : NULL;
    char b1[128], b2[128];
    int64_t dims[IR_MAX_RANK];
    switch (n->op) {
    case OP_INPUT:
        return 1;
    case OP_POISSON:
        if (!x)
            return 0;
        set_type(n, DT_SPIKE, true, x->rank, x->dims);
        return 1;
    case OP_DENSE: {
        int64_t out = n->attrs[0].i[0];
        set_type(n, DT_F32, true, 1, &out);
        if (!x)
            return in->final ? 0 : 1; /* the output shape needs no operand: recurrence through dense */
        if (in->final) {
            int64_t w[2] = {out, type_numel(x)};
            if (!add_weight(in, v, 0, 2, w))
                return -1;
            if (n->attrs[1].i[0] && !add_weight(in, v, 1, 1, &out))
                return -1;
        }
        return 1;
    }
    case OP_CONV2D: {
        if (!x)
            return 0;
        if (!spatial(in, n, x, "conv2d"))
            return -1;
        int64_t out = n->attrs[0].i[0], g = n->attrs[5].i[0];
        const int64_t *k = n->attrs[1].i, *s = n->attrs[2].i, *p = n->attrs[3].i, *d = n->attrs[4].i;
        if (x->dims[0] % g || out % g) {
            diag_error(n->loc, "conv2d: groups = %lld must divide the input channels (%lld) and out (%lld)",
                       (long long)g, (long long)x->dims[0], (long long)out);
            return -1;
        }
        dims[0] = out;
        dims[1] = pool_out(x->dims[1], k[0], s[0], p[0], d[0]);
        dims[2] = pool_out(x->dims[2], k[1], s[1], p[1], d[1]);
        if (dims[1] <= 0 || dims[2] <= 0) {
            diag_error(n->loc, "conv2d: a %lldx%lld kernel (dilation %lld) does not fit the %lldx%lld input "
                               "with padding %lld",
                       (long long)k[0], (long long)k[1], (long long)d[0], (long long)x->dims[1],
                       (long long)x->dims[2], (long long)p[0]);
            return -1;
        }
        set_type(n, DT_F32, true, 3, dims);
        if (in->final) {
            int64_t w[4] = {out, x->dims[0] / g, k[0], k[1]};
            if (!add_weight(in, v, 0, 4, w))
                return -1;
            if (n->attrs[6].i[0] && !add_weight(in, v, 1, 1, &out))
                return -1;
        }
        return 1;
    }
    case OP_CONV1D: {
        if (!x)
            return 0;
        if (x->rank != 2) {
            diag_error(n->loc, "conv1d expects samples of shape [C, L], got %s", tstr(x, b1));
            return -1;
        }
        int64_t out = node_attr_i(n, "out", 0), g = node_attr_i(n, "groups", 0);
        int64_t k = node_attr_i(n, "kernel", 0), s = node_attr_i(n, "stride", 0);
        int64_t p = node_attr_i(n, "pad", 0), d = node_attr_i(n, "dilation", 0);
        if (x->dims[0] % g || out % g) {
            diag_error(n->loc, "conv1d: groups = %lld must divide the input channels (%lld) and out (%lld)",
                       (long long)g, (long long)x->dims[0], (long long)out);
            return -1;
        }
        dims[0] = out;
        dims[1] = pool_out(x->dims[1], k, s, p, d);
        if (dims[1] <= 0) {
            diag_error(n->loc, "conv1d: a kernel of %lld (dilation %lld) does not fit the input of "
                               "length %lld with padding %lld",
                       (long long)k, (long long)d, (long long)x->dims[1], (long long)p);
            return -1;
        }
        set_type(n, DT_F32, true, 2, dims);
        if (in->final) {
            int64_t w[3] = {out, x->dims[0] / g, k};
            if (!add_weight(in, v, 0, 3, w))
                return -1;
            if (node_attr_i(n, "bias", 0) && !add_weight(in, v, 1, 1, &out))
                return -1;
        }
        return 1;
    }
    case OP_MAXPOOL2D:
    case OP_AVGPOOL2D:
    case OP_SUMPOOL2D: {
        if (!x)
            return 0;
        if (!spatial(in, n, x, oi->name))
            return -1;
        const int64_t *k = n->attrs[0].i, *p = n->attrs[2].i;
        int64_t s[2] = {n->attrs[1].i[0] ? n->attrs[1].i[0] : k[0],
                        n->attrs[1].i[1] ? n->attrs[1].i[1] : k[1]};
        if (2 * p[0] > k[0] || 2 * p[1] > k[1]) {
            diag_error(n->loc, "%s: padding must be at most half the kernel", oi->name);
            return -1;
        }
        dims[0] = x->dims[0];
        dims[1] = pool_out(x->dims[1], k[0], s[0], p[0], 1);
        dims[2] = pool_out(x->dims[2], k[1], s[1], p[1], 1);
        if (dims[1] <= 0 || dims[2] <= 0) {
            diag_error(n->loc, "%s: a %lldx%lld window does not fit the %lldx%lld input", oi->name,
                       (long long)k[0], (long long)k[1], (long long)x->dims[1], (long long)x->dims[2]);
            return -1;
        }
        /* max of spikes is a spike; sums and means are not */
        set_type(n, n->op == OP_MAXPOOL2D ? x->dtype : DT_F32, true, 3, dims);
        return 1;
    }
    case OP_FLATTEN:
        if (!x)
            return 0;
        dims[0] = type_numel(x);
        set_type(n, x->dtype, true, 1, dims);
        return 1;
    case OP_BATCHNORM:
        if (!x)
            return 0;
        if (x->rank < 1) {
            diag_error(n->loc, "batchnorm needs a channel dimension");
            return -1;
        }
        set_type(n, DT_F32, true, x->rank, x->dims);
        if (in->final)
            for (int s = 0; s < 4; s++)
                if (!add_weight(in, v, s, 1, &x->dims[0]))
                    return -1;
        return 1;
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
        if (x && y) {
            if (x->rank != y->rank || memcmp(x->dims, y->dims, (size_t)x->rank * sizeof *x->dims)) {
                diag_error(n->loc, "%s: shapes differ: '%s' is %s, '%s' is %s", oi->name,
                           vname(m, n->args[0]), tstr(x, b1), vname(m, n->args[1]), tstr(y, b2));
                return -1;
            }
        }
        if (!x)
            x = y;
        if (!x || (in->final && !y))
            return 0;
        set_type(n, DT_F32, true, x->rank, x->dims);
        return 1;
    case OP_SCALE:
        if (!x)
            return 0;
        set_type(n, DT_F32, true, x->rank, x->dims);
        return 1;
    case OP_DELAY:
        if (!x)
            return 0;
        set_type(n, x->dtype, true, x->rank, x->dims);
        return 1;
    case OP_NEURON: {
        if (!x)
            return 0;
        const NeuronDef *nd = m->neurons[n->neuron];
        DType dt = nd->has_output ? DT_F32 : nd->is_bipolar ? DT_I8 : DT_SPIKE;
        set_type(n, dt, true, x->rank, x->dims);
        for (int i = 0; i < nd->nparams && i < 32; i++)
            if (in->final && node_learns(n, i) && !add_weight(in, v, -1 - i, 0, NULL)) return -1;
        return 1;
    }
    case OP_STATE: {
        if (!x)
            return 0;
        const NeuronDef *nd = m->neurons[m->nodes[n->args[0]].neuron];
        bool found = false;
        for (int i = 0; i < nd->nstates && !found; i++)
            found = strcmp(nd->states[i].name, n->attrs[0].s) == 0;
        if (!found) {
            char list[256] = "";
            for (int i = 0; i < nd->nstates; i++) {
                size_t k = strlen(list);
                snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "", nd->states[i].name);
            }
            diag_error(n->loc, "neuron '%s' has no state '%s' (its states: %s)", nd->name,
                       n->attrs[0].s, nd->nstates ? list : "none");
            return -1;
        }
        set_type(n, DT_F32, true, x->rank, x->dims);
        return 1;
    }
    case OP_COUNT:
    case OP_MEAN:
    case OP_LAST:
    case OP_MAX:
    case OP_SEQUENCE:
        if (!x)
            return 0;
        set_type(n, n->op == OP_SEQUENCE || n->op == OP_LAST || n->op == OP_MAX ? x->dtype : DT_F32,
                 n->op == OP_SEQUENCE, x->rank, x->dims);
        return 1;
    case OP_GRAD: /* dL/dx: x's shape, in f32 */
        if (!x) return 0;
        set_type(n, DT_F32, x->has_time, x->rank, x->dims);
        return 1;
    case OP_GRAD_WEIGHT: { /* dL/dW: the weight's shape, in f32 (the weights exist in the final
                            * pass, made in node order: its layer's before it) */
        if (!x || !in->final) return x ? 1 : 0;
        const Node *g = &m->nodes[n->args[0]];
        const Node *f = g->op == OP_GRAD ? &m->nodes[g->args[0]] : NULL;
        const char *name = n->attrs[0].s ? n->attrs[0].s : "";
        for (int w = 0; f && w < f->nweights; w++) {
            const Weight *wt = &m->weights[f->first_weight + w];
            if (strcmp(wt->name, name) != 0) continue;
            if (!weight_is_trained(m, wt)) {
                diag_error(n->loc, "grad_weight: '%s' is a state its op updates, not trained",
                           name);
                return -1;
            }
            set_type(n, DT_F32, false, wt->rank, wt->dims);
            n->type.is_weight = true;
            return 1;
        }
        if (!f)
            diag_error(n->loc,
                       "grad_weight reads '%s', not a gradient (grad): a weight's gradient "
                       "is given by the backward step at its layer's grad node",
                       vname(m, n->args[0]));
        else
            diag_error(n->loc, "grad_weight: '%s' is not a weight of '%s'", name,
                       vname(m, g->args[0]));
        return -1;
    }
    case OP_COUNT_:
        break;
    }
    unreachable();
}

bool
ir_infer(Module *m)
{
    int n = m->nnodes;
    ValueId *order = malloc(((size_t)n + 1) * sizeof *order);
    Infer in = {m, calloc((size_t)n + 1, sizeof(bool)), false};
    if (!order || !in.known)
        die("out of memory");
    if (ir_topo_order(m, order) != n)
        die("ir_infer on a module that does not verify");
    m->nweights = 0;
    m->weights = NULL;
    for (int i = 0; i < n; i++) {
        m->nodes[i].first_weight = -1;
        m->nodes[i].nweights = 0;
    }
    bool ok = true;
    int nknown = 0;
    for (int round = 0; ok && nknown < n; round++) {
        int before = nknown;
        for (int i = 0; i < n && ok; i++) {
            ValueId v = order[i];
            if (in.known[v])
                continue;
            int r = infer_node(&in, v);
            if (r < 0)
                ok = false;
            else if (r > 0) {
                in.known[v] = true;
                nknown++;
                ok = numel_in_range(m, v);
            }
        }
        if (ok && nknown == before) {
            for (int v = 0; v < n; v++)
                if (!in.known[v]) {
                    diag_error(m->nodes[v].loc,
                               "cannot infer the shape of '%s': its recurrence never reaches a "
                               "layer whose output shape is known",
                               vname(m, v));
                    break;
                }
            ok = false;
        }
    }
    if (ok) {
        /* every operand known: recheck each node and create its weights, in node order so weight
         * order follows the source */
        in.final = true;
        for (ValueId v = 0; v < n && ok; v++) {
            Type before = m->nodes[v].type;
            int r = infer_node(&in, v);
            if (r < 0)
                ok = false;
            else if (r == 0)
                die("inference lost a type");
            else if (m->nodes[v].op != OP_GRAD_WEIGHT && !type_equal(&before, &m->nodes[v].type)) {
                char b1[128], b2[128];
                diag_error(m->nodes[v].loc, "the recurrence through '%s' changes its shape from %s to %s",
                           vname(m, v), tstr(&before, b1), tstr(&m->nodes[v].type, b2));
                ok = false;
            }
        }
    }
    /* a train-step module: each trained weight of a grad node's value has one grad_weight */
    for (ValueId v = 0; v < n && ok; v++) {
        const Node *g = &m->nodes[v];
        if (g->op != OP_GRAD) continue;
        const Node *f = &m->nodes[g->args[0]];
        for (int w = 0; w < f->nweights && ok; w++) {
            const Weight *wt = &m->weights[f->first_weight + w];
            int count = 0;
            for (ValueId u = v + 1; u < n; u++)
                count += m->nodes[u].op == OP_GRAD_WEIGHT && m->nodes[u].args[0] == v &&
                         strcmp(m->nodes[u].attrs[0].s, wt->name) == 0;
            if (count != (weight_is_trained(m, wt) ? 1 : 0)) {
                diag_error(g->loc,
                           count ? "the gradient of weight '%s' is given twice (grad_weight)"
                                 : "the backward step at this grad node gives weight '%s' a "
                                   "gradient: a grad_weight node after it names it",
                           wt->name);
                ok = false;
            }
        }
    }
    free(order);
    free(in.known);
    return ok;
}
