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

/* the backward's rules (ir_verify): after the forward, each of a forward value, one a value, no
 * forward node reading one, and each after the grad nodes of its value's readers in the same step
 * (a delay's operand is read at an earlier step: inside a recurrence the steps go backwards
 * together, in the order of its grad nodes) */
static bool
verify_backward(const Module *m)
{
    int nf = 0; /* the forward's nodes: those before the first grad node */
    while (nf < m->nnodes && !op_is_backward(m->nodes[nf].op))
        nf++;
    int *at = xmalloc(((size_t)m->nnodes + 1) * sizeof *at); /* v's grad node, or -1 */
    for (ValueId v = 0; v < m->nnodes; v++)
        at[v] = -1;
    bool ok = true;
    for (ValueId v = 0; v < m->nnodes && ok; v++) {
        const Node *n = &m->nodes[v];
        bool has_marks = n->fused_into >= 0 || n->is_events || n->layout != SPIKES_BYTES ||
                         n->is_scan_epilogue || n->wstore != WSTORE_F32 || n->astore != WSTORE_F32;
        if (n->op == OP_GRAD_WEIGHT) {
            const Node *g = &m->nodes[n->args[0]];
            if (g->op != OP_GRAD) {
                diag_error(n->loc,
                           "grad_weight reads '%s', not a gradient (grad): a weight's gradient is "
                           "given by the backward step at its layer's grad node",
                           g->name ? g->name : node_op_name(m, g));
                ok = false;
            } else if (has_marks) {
                diag_error(n->loc, "a gradient takes no marks (fuse, events, layout, ...): they "
                                   "are the forward's");
                ok = false;
            } else if (n->is_output) {
                diag_error(n->loc, "a gradient cannot be a model output");
                ok = false;
            } else if (n->args[0] > v) {
                diag_error(n->loc, "grad_weight comes before the grad node it reads");
                ok = false;
            }
            continue;
        }
        if (n->op != OP_GRAD) {
            for (int a = 0; a < n->nargs && ok; a++)
                if (op_is_backward(m->nodes[n->args[a]].op)) {
                    diag_error(n->loc,
                               "%s reads '%s', a gradient (grad): the forward reads forward "
                               "values only",
                               node_op_name(m, n),
                               m->nodes[n->args[a]].name ? m->nodes[n->args[a]].name : "grad");
                    ok = false;
                }
            if (ok && n->fused_into >= nf) {
                diag_error(n->loc,
                           "%s is fused into a gradient: marks (fuse, events, layout, ...) "
                           "are the forward's",
                           node_op_name(m, n));
                ok = false;
            }
            if (ok && v >= nf) {
                diag_error(n->loc,
                           "%s follows a grad node: a train-step module's backward (its grad "
                           "nodes) comes after its whole forward",
                           node_op_name(m, n));
                ok = false;
            }
            continue;
        }
        ValueId x = n->args[0];
        const char *xn = node_layer_name(m, &m->nodes[x]);
        if (has_marks) {
            diag_error(n->loc,
                       "a gradient takes no marks (fuse, events, layout, ...): they are the "
                       "forward's");
            ok = false;
        } else if (op_is_backward(m->nodes[x].op)) {
            diag_error(n->loc, "grad reads '%s', a gradient: it is the gradient of a forward value",
                       xn);
            ok = false;
        } else if (at[x] >= 0) {
            diag_error(n->loc, "'%s' has two gradients (grad nodes)", xn);
            diag_note(m->nodes[at[x]].loc, "the first");
            ok = false;
        } else if (n->is_output) {
            diag_error(n->loc, "a gradient cannot be a model output");
            ok = false;
        }
        at[x] = v;
    }
    /* every reader's gradient first: a reader r of x (not through a delay) with a grad node
     * after x's */
    for (ValueId r = 0; r < nf && ok; r++) {
        const Node *rn = &m->nodes[r];
        if (rn->op == OP_DELAY || at[r] < 0) continue;
        for (int a = 0; a < rn->nargs && ok; a++) {
            ValueId x = rn->args[a];
            if (at[x] >= 0 && at[x] < at[r]) {
                diag_error(m->nodes[at[x]].loc,
                           "the gradient of '%s' comes before that of '%s', which reads it: a "
                           "value's gradient is complete only after its readers' backward steps",
                           node_layer_name(m, &m->nodes[x]), node_layer_name(m, rn));
                ok = false;
            }
        }
    }
    free(at);
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
            if (is_readout(m->nodes[u].op) && n->op != OP_GRAD) {
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
        /* (a neuron layer's name is optional: none, and its value's name is its layer's) */
        if (ok && ai >= 0 && n->attrs[ai].s && n->attrs[ai].s[0]) {
            for (int u = 0; u < v; u++) {
                int bi = op_attr_index(m->nodes[u].op, "name");
                if (bi >= 0 && m->nodes[u].attrs[bi].s &&
                    strcmp(m->nodes[u].attrs[bi].s, n->attrs[ai].s) == 0) {
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
    return ok && verify_backward(m);
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
