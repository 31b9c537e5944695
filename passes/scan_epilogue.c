/* scan_epilogue.c: on the GPU, a dense or conv layer read only by a neuron scan (directly, or
 * through a batchnorm fused into the scan) is summed inside that scan: the thread of each neuron
 * computes its input for step t (the layer's one-lane sum, the interpreter's order of terms),
 * steps the neuron at once and keeps its state in registers over all T steps; the layer's
 * output never goes to memory and its kernel disappears (`epilogue a`, Node.is_scan_epilogue;
 * ir_epilogue_problem says where). A static layer (the same at every step: the MLP's first
 * layer over its image) is summed once, before the steps. The sums and their order are the
 * unfused kernel's, so the bits are the same. The CPU keeps its register tiles and event lists,
 * which reuse each weight over many rows; the mark does not change its kernels.
 *
 * Level 3 (not the default -O2): it trades a kernel's parallelism over T*B*n outputs for B*n
 * threads that each sum T times, which should pay where the layer's output is large against
 * its sums and lose where B*n threads do not fill the GPU (batch 1); no GPU has measured it
 * yet. */
#include "passes/pass.h"

bool
pass_scan_epilogue(Module *m, bool *changed)
{
    for (ValueId v = 0; v < m->nnodes; v++) {
        Node *n = &m->nodes[v];
        if (n->is_scan_epilogue || ir_epilogue_problem(m, v)) continue;
        n->is_scan_epilogue = true;
        n->epilogue_loc = (Loc){0};
        *changed = true;
    }
    return true;
}
