/* rewrite.c: changing a module's node graph in place, for the passes. Nodes live in one array
 * referenced by index (ValueId), so removing some renumbers the others: operands, inputs and
 * outputs are remapped, then ir_infer rebuilds the weight table (names, shapes, first_weight) and
 * ir_verify checks the result. Weights must not be bound yet: inference forgets their data. */
#include <stdlib.h>

#include "passes/pass.h"

bool
module_remove_nodes(Module *m, const bool *keep)
{
    for (int w = 0; w < m->nweights; w++)
        if (m->weights[w].data || !keep[m->weights[w].node])
            die("module_remove_nodes: a layer with weights (bound or not) is not removed");
    ValueId *to = xmalloc(((size_t)m->nnodes + 1) * sizeof *to);
    int n = 0;
    for (ValueId v = 0; v < m->nnodes; v++)
        to[v] = keep[v] ? n++ : -1;
    for (ValueId v = 0; v < m->nnodes; v++) {
        if (!keep[v]) continue;
        Node nd = m->nodes[v];
        for (int a = 0; a < nd.nargs; a++) {
            if (to[nd.args[a]] < 0) die("module_remove_nodes: node %d uses removed node %d", v, nd.args[a]);
            nd.args[a] = to[nd.args[a]];
        }
        if (nd.fused_into >= 0) nd.fused_into = to[nd.fused_into];
        m->nodes[to[v]] = nd;
    }
    m->nnodes = n;
    for (int i = 0; i < m->ninputs; i++)
        m->inputs[i] = to[m->inputs[i]];
    for (int i = 0; i < m->noutputs; i++)
        m->outputs[i] = to[m->outputs[i]];
    free(to);
    return ir_infer(m) && ir_verify(m) && ir_verify_fusions(m);
}

void
module_replace_uses(Module *m, ValueId from, ValueId to)
{
    for (ValueId v = 0; v < m->nnodes; v++)
        for (int a = 0; a < m->nodes[v].nargs; a++)
            if (m->nodes[v].args[a] == from) m->nodes[v].args[a] = to;
    for (int i = 0; i < m->noutputs; i++)
        if (m->outputs[i] == from) m->outputs[i] = to;
    /* from has no users left: nothing can be computed inside it, nor it inside anything */
    for (ValueId v = 0; v < m->nnodes; v++)
        if (m->nodes[v].fused_into == from) m->nodes[v].fused_into = -1;
    m->nodes[from].fused_into = -1;
}
