/* Structural checks of a module (operands exist, arity and attribute ranges, recurrence only through
 * delay, readouts only as outputs, unique layer names) and the step order of its nodes. Shapes are
 * infer.c's business. Runs after the frontend and after every pass under --verify-each. */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

static bool
is_readout(Op op)
{
    return op == OP_COUNT || op == OP_MEAN || op == OP_LAST || op == OP_MAX || op == OP_SEQUENCE;
}

/* Depth-first postorder over same-step edges, visiting nodes and operands in index order (so the order
 * is deterministic and equal to the node order whenever that is already valid). The operand of a delay
 * is read from earlier steps, so that edge does not order the nodes. Nodes on a same-step cycle are left
 * out: the return value is then less than nnodes. Iterative: fuzzed IR may chain many nodes. */
int
ir_topo_order(const Module *m, ValueId *order)
{
    int n = m->nnodes, count = 0;
    unsigned char *mark = calloc((size_t)n + 1, 1); /* 0 new, 1 on stack, 2 done, 3 on a cycle */
    int *stack = malloc(((size_t)n + 1) * sizeof *stack);
    int *next = calloc((size_t)n + 1, sizeof *next); /* next operand to visit */
    if (!mark || !stack || !next)
        die("out of memory");
    for (int root = 0; root < n; root++) {
        if (mark[root])
            continue;
        int sp = 0;
        stack[sp++] = root;
        mark[root] = 1;
        while (sp > 0) {
            int v = stack[sp - 1];
            const Node *nd = &m->nodes[v];
            int nargs = nd->op == OP_DELAY ? 0 : nd->nargs;
            if (next[v] < nargs) {
                int u = nd->args[next[v]++];
                if (u < 0 || u >= n)
                    continue;
                if (mark[u] == 0) {
                    mark[u] = 1;
                    stack[sp++] = u;
                } else if (mark[u] == 1 || mark[u] == 3) {
                    mark[v] = 3; /* cycle through u */
                }
                continue;
            }
            sp--;
            bool on_cycle = mark[v] == 3;
            for (int a = 0; a < nargs && !on_cycle; a++)
                on_cycle = nd->args[a] >= 0 && nd->args[a] < n && mark[nd->args[a]] == 3;
            mark[v] = on_cycle ? 3 : 2;
            if (!on_cycle)
                order[count++] = v;
        }
    }
    free(next);
    free(stack);
    free(mark);
    return count;
}

void
ir_fill_static(const Module *m, const ValueId *order, bool *is_static)
{
    for (int k = 0; k < m->nnodes; k++) {
        const Node *n = &m->nodes[order[k]];
        bool s = false;
        switch (n->op) {
        case OP_INPUT: s = !n->is_per_step_input; break;
        case OP_DENSE:
        case OP_CONV2D:
        case OP_CONV1D:
        case OP_MAXPOOL2D:
        case OP_AVGPOOL2D:
        case OP_SUMPOOL2D:
        case OP_FLATTEN:
        case OP_BATCHNORM:
        case OP_ADD:
        case OP_SUB:
        case OP_MUL:
        case OP_SCALE:
            s = true;
            for (int a = 0; a < n->nargs; a++)
                s = s && is_static[n->args[a]];
            break;
        default: break; /* stateful, random or time-indexed */
        }
        is_static[order[k]] = s;
    }
}

static bool
check_attrs(const Module *m, const Node *n)
{
    const OpInfo *oi = op_info(n->op);
    for (int i = 0; i < oi->nattrs; i++) {
        const AttrSpec *s = &oi->attrs[i];
        const AttrVal *v = &n->attrs[i];
        int64_t lo = 0;
        const char *what = NULL;
        if (strcmp(s->name, "out") == 0 || strcmp(s->name, "kernel") == 0 ||
            strcmp(s->name, "dilation") == 0 || strcmp(s->name, "groups") == 0 ||
            strcmp(s->name, "steps") == 0)
            lo = 1, what = "at least 1";
        else if (strcmp(s->name, "stride") == 0)
            lo = op_is_conv(n->op) ? 1 : 0, what = op_is_conv(n->op) ? "at least 1" : "0 (= kernel) or more";
        else if (strcmp(s->name, "pad") == 0)
            lo = 0, what = "0 or more";
        if (what) {
            int k = s->kind == AK_INT2 ? 2 : 1;
            for (int j = 0; j < k; j++) {
                if (v->i[j] < lo) {
                    diag_error(n->loc, "%s: %s must be %s (got %lld)", oi->name, s->name, what,
                               (long long)v->i[j]);
                    return false;
                }
                if (v->i[j] > (1 << 30)) {
                    diag_error(n->loc, "%s: %s = %lld is too large (at most 2^30)", oi->name, s->name,
                               (long long)v->i[j]);
                    return false;
                }
            }
        }
        if ((strcmp(s->name, "seed") == 0 || strcmp(s->name, "stream") == 0) &&
            (v->i[0] < -1 || v->i[0] > ((int64_t)1 << 53))) {
            diag_error(n->loc, "%s: %s must be -1 (the default) or from 0 to 2^53", oi->name, s->name);
            return false;
        }
        if (strcmp(s->name, "divisor") == 0 && !(v->f != 0)) {
            diag_error(n->loc, "%s: divisor must not be zero", oi->name);
            return false;
        }
        if (strcmp(s->name, "eps") == 0 && !(v->f > 0)) {
            diag_error(n->loc, "%s: eps must be positive", oi->name);
            return false;
        }
        if (n->op == OP_DELAY && v->i[0] >= m->timesteps) {
            /* legal but always zero: most likely a mistake */
            diag_warning(n->loc, "delay of %lld steps in a model of %d timesteps is always zero",
                         (long long)v->i[0], m->timesteps);
        }
    }
    return true;
}

/* does a path of operand edges lead from `from` to `to` (to reads from, at some remove)? */
static bool
reaches(const Module *m, ValueId from, ValueId to)
{
    bool *seen = calloc((size_t)m->nnodes + 1, sizeof *seen);
    ValueId *work = malloc(((size_t)m->nnodes + 1) * sizeof *work);
    if (!seen || !work)
        die("out of memory");
    int nwork = 0;
    bool found = false;
    work[nwork++] = from;
    seen[from] = true;
    while (nwork > 0 && !found) {
        ValueId u = work[--nwork];
        for (ValueId v = 0; v < m->nnodes && !found; v++)
            for (int a = 0; a < m->nodes[v].nargs; a++)
                if (m->nodes[v].args[a] == u) {
                    found = v == to;
                    if (!seen[v]) {
                        seen[v] = true;
                        work[nwork++] = v;
                    }
                }
    }
    free(seen);
    free(work);
    return found;
}

static bool
is_pointwise(Op op)
{
    return op == OP_BATCHNORM || op == OP_ADD || op == OP_SUB || op == OP_MUL || op == OP_SCALE;
}

const char *
ir_layout_problem(const Module *m, ValueId v)
{
    const Node *n = &m->nodes[v];
    bool is_bipolar = n->type.dtype == DT_I8;
    if (n->type.dtype != DT_SPIKE && !is_bipolar)
        return "it is not a spike value (0/1, or -1/0/1)";
    if (n->op == OP_INPUT || n->is_output)
        return "a model input or output is stored as the caller holds it";
    if (n->op == OP_FLATTEN)
        return "a flatten is a view of its operand, which holds the memory";
    if (n->fused_into >= 0)
        return "it is computed inside the kernel of the value it is fused into, without memory";
    if (type_numel(&n->type) % (is_bipolar ? 4 : 8) != 0)
        return is_bipolar ? "its elements per sample are not a multiple of 4 (a byte would hold "
                            "the spikes of two samples or steps)"
                          : "its elements per sample are not a multiple of 8 (a byte would hold "
                            "the spikes of two samples or steps)";
    return NULL;
}

const char *
ir_fusion_problem(const Module *m, ValueId a, ValueId b)
{
    if (b < 0 || b >= m->nnodes || a == b)
        return "it names no other value";
    const Node *na = &m->nodes[a], *nb = &m->nodes[b];
    bool is_used = false;
    for (int k = 0; k < nb->nargs; k++)
        is_used = is_used || nb->args[k] == a;
    if (!is_used)
        return "the second value does not read the first";
    if (na->is_output || na->op == OP_INPUT)
        return "the first value is a model input or output, which needs its own memory";
    for (ValueId v = 0; v < m->nnodes; v++)
        for (int k = 0; k < m->nodes[v].nargs; k++)
            if (v != b && m->nodes[v].args[k] == a)
                return "the first value has other users";
    if (op_is_conv(na->op) || na->op == OP_DENSE) {
        if (nb->op != OP_BATCHNORM)
            return "a conv or dense layer is fused only into the batchnorm that reads it (its "
                   "epilogue)";
        if (nb->fused_into >= 0)
            return "the batchnorm is computed inside another kernel, so it has no buffer for the "
                   "conv to store into";
        if (na->astore != WSTORE_F32)
            return "the layer's output is stored in 16 bits (activations), in a buffer of its own";
        return NULL;
    }
    if (is_pointwise(na->op)) {
        for (ValueId v = 0; v < m->nnodes; v++)
            if (m->nodes[v].fused_into == a &&
                (op_is_conv(m->nodes[v].op) || m->nodes[v].op == OP_DENSE))
                return "a conv or dense layer is fused into this batchnorm, whose kernel it "
                       "becomes";
        if (nb->op != OP_NEURON && !is_pointwise(nb->op))
            return "an elementwise value is fused only into a neuron layer or another elementwise "
                   "op";
        return NULL;
    }
    if (na->op != OP_NEURON)
        return "only elementwise ops (batchnorm, add, sub, mul, scale), neuron layers and conv or "
               "dense layers (into their batchnorm) are fused";
    bool is_readout = nb->op == OP_COUNT || nb->op == OP_MEAN || nb->op == OP_LAST ||
                      nb->op == OP_MAX || nb->op == OP_SEQUENCE;
    if (!is_readout && nb->op != OP_MAXPOOL2D && nb->op != OP_AVGPOOL2D &&
        nb->op != OP_SUMPOOL2D)
        return "a neuron layer is fused only into the pooling or the readout that reads it";
    if (m->schedule != SCHEDULE_LAYER)
        return "a neuron layer is fused into its pooling or readout only in the layer-by-layer "
               "schedule (schedule layer)";
    if (reaches(m, a, a))
        return "the neuron layer is in a recurrent cycle (it runs step by step)";
    if (is_readout) return NULL;
    if (na->type.dtype != DT_SPIKE)
        return "the neuron layer does not emit 0/1 spikes";
    const Type *t = &na->type;
    if (t->rank != 3)
        return "the pooled value is not [C, H, W]";
    for (int d = 0; d < 2; d++) {
        int64_t k = node_attr_i(nb, "kernel", d), st = node_attr_i(nb, "stride", d);
        if ((st != 0 && st != k) || node_attr_i(nb, "pad", d) != 0 || k < 1 ||
            t->dims[1 + d] % k != 0)
            return "the pooling windows overlap, pad or leave neurons out (stride must equal the "
                   "kernel, without padding, dividing the size)";
    }
    if (node_attr_i(nb, "kernel", 0) * node_attr_i(nb, "kernel", 1) > 16)
        return "the pooling window holds more than 16 neurons (each is scanned with its own state)";
    return NULL;
}

const char *
ir_epilogue_problem(const Module *m, ValueId v)
{
    const Node *n = &m->nodes[v];
    if (n->op != OP_DENSE && !op_is_conv(n->op))
        return "only a dense or conv layer is summed in the scan that reads it";
    if (n->is_output)
        return "it is a model output, which needs its own memory";
    if (n->fused_into >= 0)
        return "it is computed inside another kernel already";
    ValueId user = -1;
    for (ValueId u = 0; u < m->nnodes; u++)
        for (int k = 0; k < m->nodes[u].nargs; k++)
            if (m->nodes[u].args[k] == v) {
                if (user >= 0)
                    return "it has more than one reader";
                user = u;
            }
    if (user < 0)
        return "nothing reads it";
    /* the scan, and the value it takes as input: v, or the batchnorm of v fused into it */
    ValueId scan = user, in = v;
    if (m->nodes[user].op == OP_BATCHNORM) {
        scan = m->nodes[user].fused_into;
        in = user;
    }
    if (scan < 0 || m->nodes[scan].op != OP_NEURON || m->nodes[scan].args[0] != in)
        return "its reader is not a neuron layer (or a batchnorm fused into one) taking it as "
               "input";
    if (m->schedule != SCHEDULE_LAYER)
        return "scans run over T only in the layer-by-layer schedule (schedule layer)";
    if (reaches(m, scan, scan))
        return "the neuron layer is in a recurrent cycle (it runs step by step)";
    return NULL;
}

const char *
ir_activation_problem(const Module *m, ValueId v)
{
    const Node *n = &m->nodes[v];
    if (n->op != OP_DENSE && !op_is_conv(n->op))
        return "only a dense or conv layer's output is stored narrower";
    if (n->fused_into >= 0)
        return "it is computed into its batchnorm's buffer (fused into it)";
    return NULL;
}

bool
ir_verify_fusions(const Module *m)
{
    bool ok = true;
    for (int v = 0; v < m->nnodes && ok; v++) {
        const Node *n = &m->nodes[v];
        if (!n->is_scan_epilogue)
            continue;
        const char *why = ir_epilogue_problem(m, v);
        if (why) {
            diag_error(n->epilogue_loc.line > 0 ? n->epilogue_loc : n->loc,
                       "epilogue: '%s' cannot be summed in its scan: %s",
                       n->name ? n->name : node_op_name(m, n), why);
            ok = false;
        }
    }
    for (int v = 0; v < m->nnodes && ok; v++) {
        const Node *n = &m->nodes[v];
        if (!n->is_events)
            continue;
        bool is_layer = n->op == OP_DENSE || op_is_conv(n->op);
        DType in = n->nargs ? m->nodes[n->args[0]].type.dtype : DT_F32;
        if (!is_layer || (in != DT_SPIKE && in != DT_I8)) {
            diag_error(n->events_loc.line > 0 ? n->events_loc : n->loc,
                       "events: '%s' is %s; only a dense or conv layer reading spikes sums event "
                       "by event", n->name ? n->name : node_op_name(m, n),
                       is_layer ? "a layer reading real values" : node_op_name(m, n));
            ok = false;
        }
    }
    for (int v = 0; v < m->nnodes && ok; v++) {
        const Node *n = &m->nodes[v];
        if (n->wstore == WSTORE_F32 || node_stored_weight(m, n) >= 0)
            continue;
        diag_error(n->wstore_loc.line > 0 ? n->wstore_loc : n->loc,
                   "weights: '%s' is %s; only a dense or conv layer's weight is stored as %s",
                   n->name ? n->name : node_op_name(m, n), node_op_name(m, n),
                   wstore_name(n->wstore));
        ok = false;
    }
    for (int v = 0; v < m->nnodes && ok; v++) {
        const Node *n = &m->nodes[v];
        const char *why = n->astore == WSTORE_F32 ? NULL : ir_activation_problem(m, v);
        if (why) {
            diag_error(n->astore_loc.line > 0 ? n->astore_loc : n->loc,
                       "activations: '%s' cannot be stored as %s: %s",
                       n->name ? n->name : node_op_name(m, n), wstore_name(n->astore), why);
            ok = false;
        }
    }
    for (int v = 0; v < m->nnodes && ok; v++) {
        const Node *n = &m->nodes[v];
        if (n->layout == SPIKES_BYTES && n->layout_loc.line == 0)
            continue;
        DType dt = n->type.dtype;
        const char *why = n->layout == SPIKES_BITS            ? ir_layout_problem(m, v)
                          : dt == DT_SPIKE || dt == DT_I8 ? NULL
                                                          : "it is not a spike value";
        if (why) {
            diag_error(n->layout_loc.line > 0 ? n->layout_loc : n->loc,
                       "layout: '%s' cannot be stored as %s: %s",
                       n->name ? n->name : node_op_name(m, n), spike_layout_name(n->layout), why);
            ok = false;
        }
    }
    for (int v = 0; v < m->nnodes && ok; v++) {
        const Node *n = &m->nodes[v];
        if (n->fused_into < 0)
            continue;
        const char *why = ir_fusion_problem(m, v, n->fused_into);
        if (why) {
            const char *nm = n->name ? n->name : node_op_name(m, n);
            const char *into = n->fused_into < m->nnodes && m->nodes[n->fused_into].name
                                   ? m->nodes[n->fused_into].name
                                   : "?";
            diag_error(n->fused_loc.line > 0 ? n->fused_loc : n->loc,
                       "cannot fuse '%s' into '%s': %s", nm, into, why);
            ok = false;
        }
    }
    return ok;
}

bool
ir_verify(Module *m)
{
    bool ok = true;
    if (m->timesteps < 1) {
        diag_error(m->loc, "model '%s' needs at least one timestep", m->name ? m->name : "?");
        return false;
    }
    for (int v = 0; v < m->nnodes && ok; v++) {
        Node *n = &m->nodes[v];
        const OpInfo *oi = op_info(n->op);
        if (n->nargs != oi->nargs) {
            diag_error(n->loc, "%s takes %d operands, has %d", node_op_name(m, n), oi->nargs, n->nargs);
            ok = false;
            break;
        }
        for (int a = 0; a < n->nargs; a++) {
            ValueId u = n->args[a];
            if (u < 0 || u >= m->nnodes) {
                diag_error(n->loc, "%s: operand %d is undefined", oi->name, a + 1);
                ok = false;
                break;
            }
            if (is_readout(m->nodes[u].op)) {
                diag_error(n->loc,
                           "%s reads '%s', a readout; readouts (count, mean, last, max, sequence) can "
                           "only be model outputs",
                           node_op_name(m, n), m->nodes[u].name ? m->nodes[u].name : oi->name);
                ok = false;
                break;
            }
            if (n->op == OP_STATE && m->nodes[u].op != OP_NEURON) {
                diag_error(n->loc, "state() reads a neuron layer's state; its operand '%s' is not a "
                                   "neuron layer (it is %s)",
                           m->nodes[u].name ? m->nodes[u].name : "?", node_op_name(m, &m->nodes[u]));
                ok = false;
                break;
            }
        }
        if (!ok)
            break;
        if (n->op == OP_NEURON && (n->neuron < 0 || n->neuron >= m->nneurons))
            die("neuron node without a definition");
        if (is_readout(n->op) && !n->is_output) {
            diag_error(n->loc, "%s is a readout; readouts can only be model outputs", oi->name);
            ok = false;
            break;
        }
        ok = check_attrs(m, n);
        int ai = op_attr_index(n->op, "name");
        if (ok && ai >= 0) {
            for (int u = 0; u < v; u++) {
                int bi = op_attr_index(m->nodes[u].op, "name");
                if (bi >= 0 && strcmp(m->nodes[u].attrs[bi].s, n->attrs[ai].s) == 0) {
                    diag_error(n->loc, "layer name '%s' is used twice (weights are named after layers)",
                               n->attrs[ai].s);
                    diag_note(m->nodes[u].loc, "first used here");
                    ok = false;
                    break;
                }
            }
        }
        if (ok && n->name) {
            for (int u = 0; u < v; u++)
                if (m->nodes[u].name && strcmp(m->nodes[u].name, n->name) == 0) {
                    diag_error(n->loc, "value name '%s' is defined twice", n->name);
                    ok = false;
                    break;
                }
        }
    }
    if (!ok)
        return false;

    ValueId *order = malloc(((size_t)m->nnodes + 1) * sizeof *order);
    if (!order)
        die("out of memory");
    int count = ir_topo_order(m, order);
    if (count < m->nnodes) {
        /* report the first node left in a cycle */
        bool *placed = calloc((size_t)m->nnodes + 1, sizeof *placed);
        if (!placed)
            die("out of memory");
        for (int i = 0; i < count; i++)
            placed[order[i]] = true;
        for (int v = 0; v < m->nnodes; v++)
            if (!placed[v]) {
                const Node *n = &m->nodes[v];
                const char *nm = n->name ? n->name : op_info(n->op)->name;
                diag_error(n->loc,
                           "'%s' depends on itself within one step; a recurrent connection must read "
                           "the previous step: prev(%s)",
                           nm, nm);
                break;
            }
        free(placed);
        ok = false;
    }
    free(order);
    return ok;
}

bool
neuron_analyse(NeuronDef *nd)
{
    bool fired = false;
    nd->is_bipolar = nd->has_output = nd->has_refractory = nd->reset_is_next = false;
    for (int i = 0; i < nd->nstmts; i++) {
        const NStmt *s = &nd->stmts[i];
        switch (s->kind) {
        case NS_FIRE: fired = true; break;
        case NS_FIRE_DOWN: nd->is_bipolar = true; break;
        case NS_OUTPUT: nd->has_output = true; break;
        case NS_REFRACTORY: nd->has_refractory = true; break;
        case NS_RESET_TO:
        case NS_RESET_SUB:
            if (!fired)
                nd->reset_is_next = true;
            break;
        case NS_ASSIGN: break;
        }
        if (!s->e)
            return false;
    }
    return true;
}
