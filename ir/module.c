/* Building a module: nodes, neuron definitions and the lookups over them; the ops and types tables.
 * Nothing here checks semantics: infer.c and verify.c do. */
#include "ir/ir.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const char *const dtype_names[DT_COUNT_] = {"f32", "f16", "bf16", "spike", "i8"};

const char *
dtype_name(DType t)
{
    return (unsigned)t < DT_COUNT_ ? dtype_names[t] : "?";
}

bool
dtype_from_name(const char *s, DType *out)
{
    for (int i = 0; i < DT_COUNT_; i++)
        if (strcmp(s, dtype_names[i]) == 0) {
            *out = (DType)i;
            return true;
        }
    return false;
}

int64_t
type_numel(const Type *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++)
        n *= t->dims[i];
    return n;
}

bool
type_equal(const Type *a, const Type *b)
{
    if (a->dtype != b->dtype || a->has_time != b->has_time || a->is_weight != b->is_weight ||
        a->rank != b->rank)
        return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i])
            return false;
    return true;
}

char *
type_str(const Type *t, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "%s[%s%s", dtype_name(t->dtype), t->has_time ? "T, " : "",
                                t->is_weight ? "" : "B");
    for (int i = 0; i < t->rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", t->is_weight && i == 0 ? "" : ", ",
                              (long long)t->dims[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
    return buf;
}

/* ---- the ops table, parsed once from ops.def's attribute and weight strings ---- */
static OpInfo op_infos[OP_COUNT_];
static bool op_infos_ready;

static const struct {
    const char *name, *alias, *attrs, *weights, *sem, *backward;
    int nargs;
    bool loop;
} op_rows[OP_COUNT_] = {
#define OP(id, name, alias, nargs, attrs, weights, sem, loop, backward)                            \
    {name, alias, attrs, weights, sem, backward, nargs, loop},
#include "ir/ops.def"
#undef OP
};

/* "kernel:i2 stride:i2=1 name:s=" → AttrSpecs. The table is ours, so malformed rows are bugs. */
static void
parse_attr_schema(OpInfo *oi, const char *schema)
{
    const char *p = schema;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        if (oi->nattrs == IR_MAX_ATTRS)
            die("ops.def: too many attributes for %s", oi->name);
        AttrSpec *a = &oi->attrs[oi->nattrs++];
        const char *colon = strchr(p, ':');
        if (!colon)
            die("ops.def: bad attribute schema '%s'", schema);
        char *name = strndup(p, (size_t)(colon - p));
        a->name = name;
        p = colon + 1;
        if (strncmp(p, "i2", 2) == 0) {
            a->kind = AK_INT2;
            p += 2;
        } else {
            switch (*p) {
            case 'i': a->kind = AK_INT; break;
            case 'f': a->kind = AK_FLOAT; break;
            case 'b': a->kind = AK_BOOL; break;
            case 's': a->kind = AK_STR; break;
            default: die("ops.def: bad attribute kind in '%s'", schema);
            }
            p++;
        }
        if (*p == '=') {
            p++;
            const char *end = p;
            while (*end && *end != ' ')
                end++;
            char *val = strndup(p, (size_t)(end - p));
            a->has_default = true;
            switch (a->kind) {
            case AK_INT:
            case AK_INT2: a->i[0] = a->i[1] = strtoll(val, NULL, 10); break;
            case AK_FLOAT: a->f = strtod(val, NULL); break;
            case AK_BOOL: a->i[0] = strcmp(val, "true") == 0; break;
            case AK_STR: a->s = strdup(val); break;
            }
            free(val);
            p = end;
        }
    }
}

static void
init_op_infos(void)
{
    for (int i = 0; i < OP_COUNT_; i++) {
        OpInfo *oi = &op_infos[i];
        oi->name = op_rows[i].name;
        oi->alias = op_rows[i].alias;
        oi->semantics = op_rows[i].sem;
        oi->backward = op_rows[i].backward;
        oi->grad_in_loop = op_rows[i].loop;
        oi->nargs = op_rows[i].nargs;
        parse_attr_schema(oi, op_rows[i].attrs);
        const char *p = op_rows[i].weights;
        while (*p) {
            while (*p == ' ')
                p++;
            const char *end = p;
            while (*end && *end != ' ')
                end++;
            if (end == p)
                break;
            bool opt = end[-1] == '?', state = end[-1] == '!';
            oi->weight_optional[oi->nweights] = opt;
            oi->weight_is_state[oi->nweights] = state;
            oi->weights[oi->nweights++] = strndup(p, (size_t)(end - p) - opt - state);
            p = end;
        }
    }
    op_infos_ready = true;
}

const OpInfo *
op_info(Op op)
{
    if (!op_infos_ready)
        init_op_infos();
    if ((unsigned)op >= OP_COUNT_)
        die("bad op %d", (int)op);
    return &op_infos[op];
}

bool
op_lookup(const char *name, Op *out)
{
    for (int i = 0; i < OP_COUNT_; i++) {
        const OpInfo *oi = op_info((Op)i);
        if (strcmp(oi->name, name) == 0 || (oi->alias[0] && strcmp(oi->alias, name) == 0)) {
            *out = (Op)i;
            return true;
        }
    }
    return false;
}

int
op_attr_index(Op op, const char *name)
{
    const OpInfo *oi = op_info(op);
    for (int i = 0; i < oi->nattrs; i++)
        if (strcmp(oi->attrs[i].name, name) == 0)
            return i;
    return -1;
}

void
ops_print_help(FILE *f)
{
    static const char *const kinds[] = {"int", "float", "bool", "string", "int or pair"};
    for (int i = 0; i < OP_COUNT_; i++) {
        const OpInfo *oi = op_info((Op)i);
        fprintf(f, "%s", oi->name);
        if (oi->alias[0])
            fprintf(f, " (alias %s)", oi->alias);
        fprintf(f, ": %d operand%s\n  %s\n", oi->nargs, oi->nargs == 1 ? "" : "s", oi->semantics);
        fprintf(f, "  backward: %s%s\n", oi->backward ? oi->backward : "none (not differentiated)",
                oi->backward && oi->grad_in_loop ? " (compiled, inside a recurrence too)" : "");
        for (int a = 0; a < oi->nattrs; a++)
            fprintf(f, "  %s: %s%s\n", oi->attrs[a].name, kinds[oi->attrs[a].kind],
                    oi->attrs[a].has_default ? "" : " (required)");
        for (int w = 0; w < oi->nweights; w++)
            fprintf(f, "  weight <name>.%s%s%s\n", oi->weights[w],
                    oi->weight_optional[w] ? " (when bias = true)" : "",
                    oi->weight_is_state[w] ? " (a state the op updates, not trained)" : "");
    }
}

/* ---- neuron expression tables ---- */
static const struct {
    const char *name;
    int arity;
} nfuncs[NF_COUNT_] = {
#define NFUNC(id, name, arity, sem) {name, arity},
#include "ir/nfuncs.def"
#undef NFUNC
};

const char *
nfunc_name(NFunc f)
{
    return nfuncs[f].name;
}

int
nfunc_arity(NFunc f)
{
    return nfuncs[f].arity;
}

bool
nfunc_lookup(const char *name, NFunc *out)
{
    for (int i = 0; i < NF_COUNT_; i++)
        if (strcmp(nfuncs[i].name, name) == 0) {
            *out = (NFunc)i;
            return true;
        }
    return false;
}

const char *
nxbin_str(NxBin op)
{
    static const char *const s[] = {"+", "-", "*", "/", "<", "<=", ">", ">=", "==", "!=", "&&", "||"};
    return s[op];
}

NExpr *
nexpr_new(Arena *a, NxKind kind)
{
    NExpr *e = arena_alloc(a, sizeof *e);
    e->kind = kind;
    return e;
}

/* ---- modules ---- */
Module *
module_new(void)
{
    Module *m = calloc(1, sizeof *m);
    if (!m)
        die("out of memory");
    m->seed = 0;
    return m;
}

void
module_free(Module *m)
{
    if (!m)
        return;
    arena_free(&m->arena);
    free(m);
}

Module *
module_clone(const Module *m)
{
    Module *c = module_new();
    Arena *a = &c->arena;
    Arena keep = c->arena;
    *c = *m;
    c->arena = keep;
    c->capnodes = m->nnodes;
    c->nodes = arena_alloc(a, ((size_t)m->nnodes + 1) * sizeof *c->nodes);
    if (m->nnodes) memcpy(c->nodes, m->nodes, (size_t)m->nnodes * sizeof *c->nodes);
    for (int v = 0; v < m->nnodes; v++) {
        const Node *n = &m->nodes[v];
        int np = n->op == OP_NEURON && n->neuron >= 0 ? m->neurons[n->neuron]->nparams : 0;
        if (np && n->params) {
            c->nodes[v].params = arena_alloc(a, (size_t)np * sizeof *n->params);
            memcpy(c->nodes[v].params, n->params, (size_t)np * sizeof *n->params);
        }
    }
    c->capneurons = m->nneurons;
    c->neurons = arena_alloc(a, ((size_t)m->nneurons + 1) * sizeof *c->neurons);
    if (m->nneurons) memcpy(c->neurons, m->neurons, (size_t)m->nneurons * sizeof *c->neurons);
    c->weights = arena_alloc(a, ((size_t)m->nweights + 1) * sizeof *c->weights);
    /* (memcpy from NULL is undefined even for 0 bytes: a model without weights has none) */
    if (m->nweights) memcpy(c->weights, m->weights, (size_t)m->nweights * sizeof *c->weights);
    c->inputs = arena_alloc(a, ((size_t)m->ninputs + 1) * sizeof *c->inputs);
    if (m->ninputs) memcpy(c->inputs, m->inputs, (size_t)m->ninputs * sizeof *c->inputs);
    c->outputs = arena_alloc(a, ((size_t)m->noutputs + 1) * sizeof *c->outputs);
    if (m->noutputs) memcpy(c->outputs, m->outputs, (size_t)m->noutputs * sizeof *c->outputs);
    return c;
}

ValueId
module_add_output(Module *m, ValueId v, const char *name)
{
    Type t = m->nodes[v].type;
    ValueId s = module_add_node(m, OP_SEQUENCE, m->nodes[v].loc);
    Node *n = &m->nodes[s];
    n->nargs = 1;
    n->args[0] = v;
    n->type = t;
    n->type.has_time = true;
    n->is_output = true;
    n->name = arena_strdup(&m->arena, name);
    m->outputs = arena_grow(&m->arena, m->outputs, (size_t)m->noutputs * sizeof *m->outputs,
                            ((size_t)m->noutputs + 1) * sizeof *m->outputs);
    m->outputs[m->noutputs++] = s;
    return s;
}

ValueId
module_add_node(Module *m, Op op, Loc loc)
{
    if (m->nnodes == m->capnodes) {
        int cap = m->capnodes ? 2 * m->capnodes : 32;
        m->nodes = arena_grow(&m->arena, m->nodes, (size_t)m->capnodes * sizeof *m->nodes,
                              (size_t)cap * sizeof *m->nodes);
        m->capnodes = cap;
    }
    Node *n = &m->nodes[m->nnodes];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->loc = loc;
    n->neuron = -1;
    n->first_weight = -1;
    n->fused_into = -1;
    const OpInfo *oi = op_info(op);
    for (int i = 0; i < oi->nattrs; i++) {
        n->attrs[i].i[0] = oi->attrs[i].i[0];
        n->attrs[i].i[1] = oi->attrs[i].i[1];
        n->attrs[i].f = oi->attrs[i].f;
        n->attrs[i].s = oi->attrs[i].s;
    }
    for (int i = 0; i < IR_MAX_ARGS; i++)
        n->args[i] = -1;
    return m->nnodes++;
}

Node *
module_node(Module *m, ValueId v)
{
    if (v < 0 || v >= m->nnodes)
        die("bad value id %d", (int)v);
    return &m->nodes[v];
}

int
module_add_neuron(Module *m, NeuronDef *nd)
{
    if (m->nneurons == m->capneurons) {
        int cap = m->capneurons ? 2 * m->capneurons : 16;
        m->neurons = arena_grow(&m->arena, m->neurons, (size_t)m->capneurons * sizeof *m->neurons,
                                (size_t)cap * sizeof *m->neurons);
        m->capneurons = cap;
    }
    m->neurons[m->nneurons] = nd;
    return m->nneurons++;
}

int
module_find_neuron(const Module *m, const char *name)
{
    for (int i = m->nneurons - 1; i >= 0; i--)
        if (strcmp(m->neurons[i]->name, name) == 0)
            return i;
    return -1;
}

ValueId
module_find_value(const Module *m, const char *name)
{
    for (int i = 0; i < m->nnodes; i++)
        if (m->nodes[i].name && strcmp(m->nodes[i].name, name) == 0)
            return i;
    return -1;
}

int
module_find_weight(const Module *m, const char *name)
{
    for (int i = 0; i < m->nweights; i++)
        if (strcmp(m->weights[i].name, name) == 0)
            return i;
    return -1;
}

const char *
wstore_name(WeightStore s)
{
    return s == WSTORE_F16 ? "f16" : s == WSTORE_BF16 ? "bf16" : "f32";
}

/* ---- recurrent regions ---- */

/* Tarjan's strongly connected components over all edges (delay edges included), iteratively. */
typedef struct Scc {
    const Module *m;
    int *index, *low, *comp, *stack, nstack, counter, ncomp;
    bool *on_stack;
    int **users;
    int *nusers;
    int *vs, *pos; /* the explicit DFS stack: (node, next user position) */
} Scc;

static void
scc_visit(Scc *s, int root)
{
    int *vs = s->vs, *pos = s->pos;
    int depth = 0;
    vs[0] = root;
    pos[0] = 0;
    s->index[root] = s->low[root] = s->counter++;
    s->stack[s->nstack++] = root;
    s->on_stack[root] = true;
    while (depth >= 0) {
        int v = vs[depth];
        if (pos[depth] < s->nusers[v]) {
            int w = s->users[v][pos[depth]++];
            if (s->index[w] < 0) {
                s->index[w] = s->low[w] = s->counter++;
                s->stack[s->nstack++] = w;
                s->on_stack[w] = true;
                depth++;
                vs[depth] = w;
                pos[depth] = 0;
            } else if (s->on_stack[w] && s->index[w] < s->low[v]) {
                s->low[v] = s->index[w];
            }
            continue;
        }
        if (s->low[v] == s->index[v]) {
            int w;
            do {
                w = s->stack[--s->nstack];
                s->on_stack[w] = false;
                s->comp[w] = s->ncomp;
            } while (w != v);
            s->ncomp++;
        }
        depth--;
        if (depth >= 0 && s->low[v] < s->low[vs[depth]]) s->low[vs[depth]] = s->low[v];
    }
}

int
ir_schedule_order(const Module *m, const ValueId *topo, int *region, ValueId *out)
{
    Arena scratch = {0}, *a = &scratch;
    int n = m->nnodes;
    size_t nn = (size_t)(n > 0 ? n : 0) + 1;
    Scc s = {0};
    s.m = m;
    s.index = arena_alloc(a, nn * sizeof(int));
    s.low = arena_alloc(a, nn * sizeof(int));
    s.comp = arena_alloc(a, nn * sizeof(int));
    s.stack = arena_alloc(a, nn * sizeof(int));
    s.vs = arena_alloc(a, nn * sizeof(int));
    s.pos = arena_alloc(a, nn * sizeof(int));
    s.on_stack = arena_alloc(a, nn * sizeof(bool));
    s.users = arena_alloc(a, nn * sizeof(int *));
    s.nusers = arena_alloc(a, nn * sizeof(int));
    /* each node's users: counted, then filled */
    for (int v = 0; v < n; v++)
        for (int k = 0; k < m->nodes[v].nargs; k++)
            s.nusers[m->nodes[v].args[k]]++;
    for (int v = 0; v < n; v++) {
        s.users[v] = arena_alloc(a, ((size_t)s.nusers[v] + 1) * sizeof(int));
        s.nusers[v] = 0;
        s.index[v] = -1;
    }
    for (int v = 0; v < n; v++)
        for (int k = 0; k < m->nodes[v].nargs; k++) {
            int u = m->nodes[v].args[k];
            s.users[u][s.nusers[u]++] = v;
        }
    for (int k = 0; k < n; k++)
        if (s.index[topo[k]] < 0) scc_visit(&s, topo[k]);
    /* size of each component; self loops make a one-node component recurrent too */
    int *size = arena_alloc(a, ((size_t)s.ncomp + 1) * sizeof(int));
    bool *rec = arena_alloc(a, ((size_t)s.ncomp + 1) * sizeof(bool));
    for (int v = 0; v < n; v++) {
        size[s.comp[v]]++;
        for (int k = 0; k < m->nodes[v].nargs; k++)
            if (m->nodes[v].args[k] == v) rec[s.comp[v]] = true;
    }
    for (int v = 0; v < n; v++)
        region[v] = rec[s.comp[v]] || size[s.comp[v]] > 1 ? s.comp[v] : -1;
    /* Tarjan numbers components in reverse topological order of the condensation: the last found
     * comes first. Within a component, the graph's topological order. */
    int cnt = 0;
    for (int c = s.ncomp - 1; c >= 0; c--)
        for (int k = 0; k < n; k++)
            if (s.comp[topo[k]] == c) out[cnt++] = topo[k];
    arena_free(a);
    return cnt;
}

bool
ir_has_recurrence(const Module *m, const ValueId *order)
{
    int *pos = xmalloc(((size_t)m->nnodes + 1) * sizeof *pos);
    for (int k = 0; k < m->nnodes; k++)
        pos[order[k]] = k;
    bool has = false;
    for (ValueId v = 0; v < m->nnodes && !has; v++)
        has = m->nodes[v].op == OP_DELAY && pos[m->nodes[v].args[0]] >= pos[v];
    free(pos);
    return has;
}

ValueId
through_flattens(const Module *m, ValueId v)
{
    while (m->nodes[v].op == OP_FLATTEN)
        v = m->nodes[v].args[0];
    return v;
}

bool
node_lists_events(const Module *m, const Node *n)
{
    if (!n->is_events || !node_can_list_events(m, n)) return false;
    return !node_is_narrow_dense(n) ||
           m->nodes[through_flattens(m, n->args[0])].layout == SPIKES_BITS;
}

bool
node_is_narrow_dense(const Node *n)
{
    return n->op == OP_DENSE && type_numel(&n->type) <= 32;
}

bool
node_can_list_events(const Module *m, const Node *n)
{
    if ((n->op != OP_DENSE && !op_is_conv(n->op)) || n->nargs < 1) return false;
    DType in = m->nodes[n->args[0]].type.dtype;
    if (in != DT_SPIKE && in != DT_I8) return false;
    return op_is_conv(n->op) || n->op == OP_DENSE;
}

const char *
spike_layout_name(SpikeLayout l)
{
    return l == SPIKES_BITS ? "bits" : "bytes";
}

int
node_stored_weight(const Module *m, const Node *n)
{
    if ((n->op != OP_DENSE && !op_is_conv(n->op)) || n->nweights < 1 || n->first_weight < 0 ||
        n->first_weight >= m->nweights)
        return -1;
    return n->first_weight;
}

int
node_param_weight(const Module *m, const Node *n, int i)
{
    if (n->op != OP_NEURON || !node_learns(n, i) || n->first_weight < 0) return -1;
    /* the learned parameters' weights follow in parameter order */
    int w = n->first_weight + __builtin_popcount(n->learned & ((1u << i) - 1));
    return w < m->nweights && m->weights[w].slot < 0 && m->weights[w].param == i ? w : -1;
}

const char *
weight_slot_name(const Module *m, const Weight *w)
{
    const Node *n = &m->nodes[w->node];
    if (w->slot < 0) return m->neurons[n->neuron]->params[w->param].name;
    return op_info(n->op)->weights[w->slot];
}

bool
weight_is_trained(const Module *m, const Weight *w)
{
    return w->slot < 0 || !op_info(m->nodes[w->node].op)->weight_is_state[w->slot];
}

static int
attr_slot(const Node *n, const char *name)
{
    int a = op_attr_index(n->op, name);
    if (a < 0)
        die("op %s has no attribute '%s'", op_info(n->op)->name, name);
    return a;
}

int64_t
node_attr_i(const Node *n, const char *name, int k)
{
    return n->attrs[attr_slot(n, name)].i[k];
}

double
node_attr_f(const Node *n, const char *name)
{
    return n->attrs[attr_slot(n, name)].f;
}

const char *
node_op_name(const Module *m, const Node *n)
{
    if (n->op == OP_NEURON && n->neuron >= 0 && n->neuron < m->nneurons)
        return m->neurons[n->neuron]->name;
    return op_info(n->op)->name;
}

const char *
node_layer_name(const Module *m, const Node *n)
{
    int a = op_attr_index(n->op, "name");
    if (a >= 0 && n->attrs[a].s && n->attrs[a].s[0])
        return n->attrs[a].s;
    return n->name ? n->name : "?";
}

ConvGeom
conv_geom(const Module *m, const Node *n)
{
    const Type *xt = &m->nodes[n->args[0]].type;
    if (n->op == OP_CONV1D) {
        ConvGeom g = {
            .C = xt->dims[0], .H = 1, .W = xt->dims[1],
            .O = n->type.dims[0], .OH = 1, .OW = n->type.dims[1],
            .KH = 1, .KW = node_attr_i(n, "kernel", 0),
            .SH = 1, .SW = node_attr_i(n, "stride", 0),
            .PH = 0, .PW = node_attr_i(n, "pad", 0),
            .DH = 1, .DW = node_attr_i(n, "dilation", 0),
            .G = node_attr_i(n, "groups", 0),
        };
        g.Cg = g.G > 0 ? g.C / g.G : 0;
        g.Og = g.G > 0 ? g.O / g.G : 0;
        return g;
    }
    ConvGeom g = {
        .C = xt->dims[0],
        .H = xt->dims[1],
        .W = xt->dims[2],
        .O = n->type.dims[0],
        .OH = n->type.dims[1],
        .OW = n->type.dims[2],
        .KH = node_attr_i(n, "kernel", 0),
        .KW = node_attr_i(n, "kernel", 1),
        .SH = node_attr_i(n, "stride", 0),
        .SW = node_attr_i(n, "stride", 1),
        .PH = node_attr_i(n, "pad", 0),
        .PW = node_attr_i(n, "pad", 1),
        .DH = node_attr_i(n, "dilation", 0),
        .DW = node_attr_i(n, "dilation", 1),
        .G = node_attr_i(n, "groups", 0),
    };
    g.Cg = g.G > 0 ? g.C / g.G : 0;
    g.Og = g.G > 0 ? g.O / g.G : 0;
    return g;
}
