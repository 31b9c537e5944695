/* dce.c: dead-code elimination. A node is live when an output depends on it (through operands,
 * delays included), when it is an input, or when it has weights: inputs and weights are the
 * model's interface (a caller passes every input, a weights file holds every layer's tensors, and
 * an IR dump must still load the file made for its source). Everything else is removed. */
#include "passes/pass.h"

bool
pass_dce(Module *m, bool *changed)
{
    Arena scratch = {0}; /* this pass's tables, freed at its end */
    bool *live = arena_alloc(&scratch, ((size_t)m->nnodes + 1) * sizeof *live);
    ValueId *work = arena_alloc(&scratch, ((size_t)m->nnodes + 1) * sizeof *work);
    int nwork = 0;
    for (int i = 0; i < m->noutputs; i++)
        if (!live[m->outputs[i]]) live[work[nwork++] = m->outputs[i]] = true;
    for (int i = 0; i < m->ninputs; i++)
        live[m->inputs[i]] = true;
    for (ValueId v = 0; v < m->nnodes; v++)
        if (m->nodes[v].nweights > 0 && !live[v]) live[work[nwork++] = v] = true;
    while (nwork > 0) {
        const Node *n = &m->nodes[work[--nwork]];
        for (int a = 0; a < n->nargs; a++)
            if (!live[n->args[a]]) live[work[nwork++] = n->args[a]] = true;
    }
    int dead = 0;
    for (ValueId v = 0; v < m->nnodes; v++)
        dead += !live[v];
    bool ok = true;
    if (dead) ok = module_remove_nodes(m, live);
    *changed = dead > 0;
    arena_free(&scratch);
    return ok;
}
