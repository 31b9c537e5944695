/* narrow_weights.c: lossless 16-bit weights. A dense or conv layer whose weight is large (at
 * least NARROW_EXACT_MIN_BYTES as f32, 512 KiB: about a core's L2, past which the layer waits on
 * its weight's bytes; the conv example's 576 KiB c2 ran 1.15-1.35x faster in f16, its 51 MB f3
 * 1.6x at batch 1, the MLP's 784 KiB fc1 over real inputs level) is marked (Node.wstore_auto)
 * where the model sums in float (--accumulate=f32, the default);
 * when weights are bound (weights_round_stored) it is stored in f16, else bf16, if every value is
 * exact there: the same numbers, so every sum and spike is the same, in half the bytes. Weights
 * trained and saved in 16 bits (the conv example's) take it; others keep f32. A layer whose storage
 * a `weights` statement gives is left alone, and so is every layer when --precision is given
 * (fp32 too: the storage is then the user's; Module.is_precision_stated). A library built this way
 * refuses weights loaded at run time that its 16 bits would change (SNN_ERR_WEIGHTS, naming the
 * tensor and
 * --disable-pass=narrow-weights). */
#include "passes/pass.h"

bool
pass_narrow_weights(Module *m, bool *changed)
{
    /* exact sums widen every 16-bit weight to f64 per term: the conv SNN 10-35% and the MLP
     * 30-50% slower measured with them (docs/benchmarks.md); float sums widen to f32 (8 lanes a
     * conversion) and gain */
    if (m->accumulate == ACC_EXACT || m->is_precision_stated) return true;
    for (ValueId v = 0; v < m->nnodes; v++) {
        Node *n = &m->nodes[v];
        int wi = node_stored_weight(m, n);
        if (wi < 0 || n->wstore_auto || n->wstore != WSTORE_F32 || n->wstore_loc.line > 0 ||
            m->weights[wi].numel < NARROW_EXACT_MIN_BYTES / 4)
            continue;
        n->wstore_auto = true;
        *changed = true;
    }
    return true;
}
