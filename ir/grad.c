/* grad.c: reverse mode over the graph IR. ir_grad turns a forward module into a train-step
 * module: a copy of it followed by its backward, one `grad` node per value the loss's gradient
 * flows through to a weight (or, asked for, to an input), in the order the backward runs. The
 * node `grad(x)` is dL/dx, complete where it stands: every reader of x has had its backward step
 * (whose grad nodes come before it), so x's own step runs from it there, giving its operands'
 * gradients their share and its weights theirs (WEIGHT.grad, the step's outputs). Each step's
 * arithmetic is its op's, in codegen/lower_grad.c (compiled) and ir/interp_grad.c (the oracle);
 * this is what the backward is: which gradients exist and in which order they are completed,
 * checked by ir_verify and printed by --train --emit=ir. The compiled step is lowered from this
 * module (kir_lower_train), its backward kernels in its grad nodes' order. */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

int
module_nforward(const Module *m)
{
    int n = m->nnodes;
    while (n > 0 && m->nodes[n - 1].op == OP_GRAD)
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

/* grad_NAME for a named value where no value has that name, else none (%N) */
static const char *
grad_name(Module *t, ValueId v)
{
    const char *name = t->nodes[v].name;
    if (!name) return NULL;
    char *g = arena_printf(&t->arena, "grad_%s", name);
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
        g->name = grad_name(t, v);
    }
    free(topo);
    free(sched);
    free(region);
    free(needs_w);
    free(needs);
    return t;
}
