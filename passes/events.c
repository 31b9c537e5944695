/* events.c: event-driven accumulation. A dense or conv layer whose input is spikes (0/1, or -1/0/1)
 * sums on the CPU only the inputs that spiked: per row, the nonzero channels are listed and only
 * their weight rows added (kir_lower.c). Measured on the conv SNN's second convolution (1 thread,
 * 512 images): 0.78 s against 7.65 s at 6% input spikes, 5.36 s against 10.65 s at 36%
 * (docs/benchmarks.md), so every such layer is marked; a layer reading real values never is. The
 * sums are exact either way (the order of terms differs, the double sum does not). The GPU's
 * kernels are dense; the mark does not change them. */
#include "passes/pass.h"

bool
pass_events(Module *m, bool *changed)
{
    for (ValueId v = 0; v < m->nnodes; v++) {
        Node *n = &m->nodes[v];
        if (n->is_events || (n->op != OP_DENSE && !op_is_conv(n->op))) continue;
        DType in = m->nodes[n->args[0]].type.dtype;
        if (in != DT_SPIKE && in != DT_I8) continue;
        n->is_events = true;
        n->events_loc = (Loc){0};
        *changed = true;
    }
    return true;
}
