/* grad.c: reverse mode over the graph IR. ir_grad turns a forward module into a train-step
 * module: a copy of it followed by its backward, one `grad` node per value the loss's gradient
 * flows through to a weight (or, asked for, to an input), in the order the backward runs. The
 * node `grad(x)` is dL/dx, complete where it stands: every reader of x has had its backward step
 * (whose grad nodes come before it), so x's own step runs from it there, giving its operands'
 * gradients their share and its weights theirs: a `grad_weight` node per trained weight of x
 * follows its grad node, dL/dW in the weight's shape (the step's outputs, the optimiser's). Each
 * step's arithmetic is its op's, in codegen/lower_grad.c (compiled) and ir/interp_grad.c (the
 * oracle); this is what the backward is: which gradients exist and in which order they are
 * completed, checked by ir_verify and printed by --train --emit=ir. The compiled step is lowered
 * from this module (kir_lower_train), its backward kernels in its grad nodes' order. */
#include "ir/ir.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

int
module_nforward(const Module *m)
{
    int n = m->nnodes;
    while (n > 0 && op_is_backward(m->nodes[n - 1].op))
        n--;
    return n;
}

void
module_drop_backward(Module *m)
{
    m->nnodes = module_nforward(m);
}

void
ir_grad_needs(const Module *m, const ValueId *topo, bool inputs, bool *needs_w, bool *needs)
{
    int n = module_nforward(m);
    for (ValueId v = 0; v < n; v++)
        needs_w[v] = needs[v] = false;
    /* in topological order, again until nothing changes: a delay in a loop reads a node after it */
    for (bool changed = true; changed;) {
        changed = false;
        for (int k = 0; k < n; k++) {
            ValueId v = topo[k];
            const Node *nd = &m->nodes[v];
            bool w = op_info(nd->op)->nweights > 0 || (nd->op == OP_NEURON && nd->learned);
            for (int a = 0; a < nd->nargs; a++)
                w = w || needs_w[nd->args[a]];
            /* with the inputs' gradients: also what depends on an input but through a sampling */
            bool need = w || (inputs && nd->op == OP_INPUT);
            for (int a = 0; a < nd->nargs && nd->op != OP_POISSON; a++)
                need = need || needs[nd->args[a]];
            changed = changed || w != needs_w[v] || need != needs[v];
            needs_w[v] = w;
            needs[v] = need;
        }
    }
}

/* grad_NAME for a name (a value's; a weight's, its dots as _) where that is an identifier no value
 * has, else none (%N): a layer's name, and so its weights', is any string */
static const char *
grad_name(Module *t, const char *name)
{
    if (!name) return NULL;
    char *g = arena_printf(&t->arena, "grad_%s", name);
    for (char *c = g; *c; c++) {
        if (*c == '.') *c = '_';
        if (!(isalnum((unsigned char)*c) || *c == '_')) return NULL;
    }
    for (ValueId u = 0; u < t->nnodes; u++)
        if (t->nodes[u].name && strcmp(t->nodes[u].name, g) == 0) return NULL;
    return g;
}

Module *
ir_grad(const Module *m, bool inputs)
{
    int n = module_nforward(m);
    if (n != m->nnodes) die("ir_grad: the module has a backward already");
    size_t nn = (size_t)n + 1;
    ValueId *topo = xmalloc(nn * sizeof *topo), *sched = xmalloc(nn * sizeof *sched);
    int *region = xmalloc(nn * sizeof *region);
    bool *needs_w = xmalloc(nn * sizeof *needs_w), *needs = xmalloc(nn * sizeof *needs);
    if (ir_topo_order(m, topo) != n) die("ir_grad: the module has no step order");
    ir_schedule_order(m, topo, region, sched);
    ir_grad_needs(m, topo, inputs, needs_w, needs);
    /* with recurrence ir_schedule_order's order, each region contiguous (its steps go backwards
     * together), else the topological order: the interpreter's, reversed */
    bool has_region = false;
    for (ValueId v = 0; v < n; v++)
        has_region = has_region || region[v] >= 0;
    const ValueId *ord = has_region ? sched : topo;
    /* a copy in the layer-by-layer schedule with no marks: what the training program lowers (every
     * value in a buffer of its own), and what the printed module needs to read back (a fused value
     * would have a second reader, its grad node) */
    Module *t = module_clone(m);
    module_clear_marks(t);
    for (int k = n - 1; k >= 0; k--) {
        ValueId v = ord[k];
        if (!needs[v]) continue;
        ValueId gv = module_add_node(t, OP_GRAD, m->nodes[v].loc);
        Node *g = &t->nodes[gv];
        g->nargs = 1;
        g->args[0] = v;
        const Type *x = &m->nodes[v].type;
        g->type = *x; /* ir_infer's: x's shape, f32 */
        g->type.dtype = DT_F32;
        g->name = grad_name(t, m->nodes[v].name);
        /* the trained weights' gradients its backward step gives, as values */
        const Node *xn = &m->nodes[v];
        for (int w = 0; w < xn->nweights; w++) {
            const Weight *wt = &m->weights[xn->first_weight + w];
            if (!weight_is_trained(m, wt)) continue;
            ValueId wv = module_add_node(t, OP_GRAD_WEIGHT, m->nodes[v].loc);
            Node *gw = &t->nodes[wv];
            gw->nargs = 1;
            gw->args[0] = gv;
            gw->attrs[0].s = arena_strdup(&t->arena, wt->name);
            gw->type = (Type){.dtype = DT_F32, .is_weight = true, .rank = wt->rank};
            memcpy(gw->type.dims, wt->dims, (size_t)wt->rank * sizeof *wt->dims);
            gw->name = grad_name(t, wt->name);
        }
    }
    free(topo);
    free(sched);
    free(region);
    free(needs_w);
    free(needs);
    return t;
}
