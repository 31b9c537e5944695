/* fold_batchnorm.c: a batchnorm that no neuron layer computes in its scan (the fuse pass does so
 * only where the scan is pooled) gets no kernel of its own: the conv layer before it computes it
 * in its epilogue, `fuse c into b`: each output value the conv's tile stores is read back while
 * it is in cache and normalised in place, in the batchnorm kernel's arithmetic (double, from the
 * stored f32 value), so the result is the same bits and the conv's output never makes a round
 * trip through memory. The weights are not folded (scaling them by gamma/sqrt(var + eps) would
 * change the bits of every conv output, which PyTorch's eval-mode batchnorm does not). Runs after
 * fuse, whose choice it respects. */
#include "passes/pass.h"

bool
pass_fold_batchnorm(Module *m, bool *changed)
{
    for (ValueId v = 0; v < m->nnodes; v++) {
        const Node *n = &m->nodes[v];
        if (n->op != OP_BATCHNORM || n->fused_into >= 0) continue;
        ValueId c = n->args[0];
        if (!op_is_conv(m->nodes[c].op) || m->nodes[c].fused_into >= 0 ||
            ir_fusion_problem(m, c, v))
            continue;
        m->nodes[c].fused_into = v;
        m->nodes[c].fused_loc = (Loc){0};
        *changed = true;
    }
    return true;
}
