/* fold_batchnorm.c: a batchnorm that no neuron layer computes in its scan (the fuse pass does so
 * only where the scan is pooled) gets no kernel of its own: the conv or dense layer before it
 * computes it in its epilogue, `fuse c into b`: the values the layer stores are read back while
 * they are in cache and normalised in place (lower_conv.c: a conv's rows on the CPU, a dense
 * layer's tiles, a GPU thread's value), in the batchnorm kernel's arithmetic (double, from the
 * stored f32 value), so the result is the same bits and the layer's output never makes a round
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
        if ((!op_is_conv(m->nodes[c].op) && m->nodes[c].op != OP_DENSE) ||
            m->nodes[c].fused_into >= 0 ||
            ir_fusion_problem(m, c, v))
            continue;
        m->nodes[c].fused_into = v;
        m->nodes[c].fused_loc = (Loc){0};
        *changed = true;
    }
    return true;
}
