/* pack_spikes.c: spike tensors stored as bits. A 0/1 spike value that only event-driven layers read
 * (conv and dense layers marked `events`, directly or through flatten views; a narrow dense
 * layer's register tile then walks each row's spikes) is stored 1 bit per spike instead of a byte,
 * `layout v : bits`: lossless, 8 times less memory for the tensor, and the reading layer lists its
 * spiking inputs 64 at a time, skipping words without a spike (lower_layers.c: a count of trailing
 * zeros per spike). Its producer (a neuron scan, a pooled scan, a pooling, a delay) stores 8
 * neighbouring spikes as one byte from its SIMD lanes. A -1/0/1 value (a neuron with fire down) is
 * stored 2 bits per spike (kir.h KT_BIT2: the low bit of each pair "a spike", the high one its
 * sign), 4 times less memory; its readers list the low bits the same way and load each spike's
 * sign. Any other reader would have to extract single bits, so such values stay bytes; so does the
 * GPU, whose threads write one neuron each and would contend for bytes (the statement does not
 * change its kernels). Runs after events, whose marks it reads, and fuse (a value fused into
 * another kernel has no memory to pack). */
#include "passes/pass.h"

/* every reader of v, looking through flatten views, is an event-driven layer */
static bool
read_by_events_only(const Module *m, ValueId v, int depth)
{
    bool has_reader = false;
    for (ValueId u = 0; u < m->nnodes; u++) {
        const Node *n = &m->nodes[u];
        for (int k = 0; k < n->nargs; k++) {
            if (n->args[k] != v) continue;
            has_reader = true;
            if (n->op == OP_FLATTEN) {
                if (n->is_output || depth > 8 || !read_by_events_only(m, u, depth + 1))
                    return false;
            } else if (!n->is_events || !node_can_list_events(m, n) || k != 0) {
                return false;
            }
        }
    }
    return has_reader;
}

bool
pass_pack_spikes(Module *m, bool *changed)
{
    for (ValueId v = 0; v < m->nnodes; v++) {
        Node *n = &m->nodes[v];
        if (n->layout != SPIKES_BYTES || n->layout_loc.line > 0 || ir_layout_problem(m, v) ||
            !read_by_events_only(m, v, 0))
            continue;
        n->layout = SPIKES_BITS;
        *changed = true;
    }
    return true;
}
