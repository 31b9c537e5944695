/* fuse.c: compute values inside the kernel of their only user, without a buffer of their own
 * (Node.fused_into, printed `fuse a into b`), as ir_fusion_problem allows: elementwise ops
 * (batchnorm, add, sub, mul, scale) are evaluated where the neuron layer or elementwise op that
 * reads them loads them; a spiking neuron layer followed by pooling in whole windows is scanned
 * window by window, storing only the pooled value; a neuron layer read only by its readout
 * computes the readout in its scan. Either way a value's round trip through memory disappears; the
 * arithmetic and its order stay the same. */
#include <stdlib.h>

#include "passes/pass.h"

/* On the CPU the batchnorm of a conv over real values (tiles) is left to fold-batchnorm, whose
 * epilogue normalises each tile's channels over the row's contiguous pixels while they are in
 * cache, a channel's square root once; in a pooled scan, whose SIMD lanes are pooling windows of
 * up to two channels, every neuron gathers its channel's four terms and takes the root. The conv
 * SNN's s1 scan: 0.047 -> 0.027 ms, c1 0.014 -> 0.020 ms, batch 1 0.67 -> 0.66 ms. Not after an
 * event-driven conv: its sums run by output row, whose 14-pixel channel runs normalised no faster
 * than the scan (c2: +0.024 ms, s2: -0.024 ms). Nor where --precision may store the conv's
 * output in 16 bits (folded, it has no buffer of its own), nor on the GPU, which sums such a conv
 * in the scan (-O3, scan-epilogue) through the batchnorm fused there. */
static bool
is_folded(const Module *m, ValueId bn)
{
    ValueId c = m->nodes[bn].args[0];
    return !m->is_for_gpu && !m->is_precision_stated && op_is_conv(m->nodes[c].op) &&
           m->nodes[c].fused_into < 0 && m->nodes[c].astore == WSTORE_F32 &&
           !node_lists_events(m, &m->nodes[c]) && !ir_fusion_problem(m, c, bn);
}

bool
pass_fuse(Module *m, bool *changed)
{
    Arena scratch = {0}; /* this pass's tables, freed at its end */
    int *nusers = arena_alloc(&scratch, ((size_t)m->nnodes + 1) * sizeof *nusers);
    ValueId *user = arena_alloc(&scratch, ((size_t)m->nnodes + 1) * sizeof *user);
    for (ValueId v = 0; v < m->nnodes; v++)
        for (int a = 0; a < m->nodes[v].nargs; a++) {
            ValueId u = m->nodes[v].args[a];
            /* add(x, x) reads x twice but has one user */
            if (nusers[u] == 0 || user[u] != v) {
                nusers[u]++;
                user[u] = v;
            }
        }
    *changed = false;
    /* neuron scans into pooling first: a batchnorm is fused into a neuron layer only when that
     * layer is pooled in its kernel, which knows each window's channel and computes the
     * batchnorm's per-channel terms once per window; anywhere else a batchnorm kernel of its own
     * is cheaper than a square root and a division per neuron */
    for (int round = 0; round < 2; round++)
        for (ValueId v = 0; v < m->nnodes; v++) {
            Node *n = &m->nodes[v];
            /* a conv into its batchnorm is fold-batchnorm's choice, after this pass's */
            /* a value whose layout is given keeps its memory (ir_layout_problem) */
            if (n->fused_into >= 0 || nusers[v] != 1 || (n->op == OP_NEURON) != (round == 0) ||
                n->layout != SPIKES_BYTES ||
                op_is_conv(n->op) || ir_fusion_problem(m, v, user[v]))
                continue;
            const Node *u = &m->nodes[user[v]];
            Op into = u->fused_into >= 0 ? m->nodes[u->fused_into].op : OP_INPUT;
            bool is_pooled = into == OP_MAXPOOL2D || into == OP_AVGPOOL2D || into == OP_SUMPOOL2D;
            if (n->op == OP_BATCHNORM && (u->op != OP_NEURON || !is_pooled || is_folded(m, v)))
                continue;
            n->fused_into = user[v];
            *changed = true;
        }
    arena_free(&scratch);
    return true;
}
