/* events.c: event-driven accumulation. A dense or conv layer whose input is spikes (0/1, or -1/0/1)
 * sums on the CPU only the inputs that spiked: per row, the nonzero channels are listed and only
 * their weight rows added (lower_layers.c, lower_conv.c). Every such layer is marked, unless
 * calibration
 * (--events=auto) measured its input firing at or past the rate where the dense kernel (every
 * input visited, zero products skipped) was faster: bench/cpu/events_rate.py, one spike-fed layer
 * at input rates 5-95%, reading a model input or a neuron's spikes (docs/benchmarks.md); the
 * benchmark networks' layers read 1-37% and never reach it. The same bits either way, float or
 * exact sums: both kernels add the same terms in the same order, the event lists skipping the zero
 * products. The GPU's kernels are dense; the mark does not change them. A training step has no
 * marks, but follows whether this pass would run: where it would, its convs over spikes sum their
 * spike lists on the CPU (Module.is_train_dense, codegen/kir_lower.c layer_kind). */
#include "passes/pass.h"

/* Whether n's input (through flattens) is a model input, whose floats the event lists compare one
 * by one, rather than spikes the model computes, which pack-spikes stores as bits when only event
 * lists read them (scanned 64 at a time: event lists stay ahead to higher rates). */
static bool
reads_model_input(const Module *m, const Node *n)
{
    return m->nodes[through_flattens(m, n->args[0])].op == OP_INPUT;
}

/* The input rate from which the dense kernel measured faster than event lists (this machine's
 * AVX2 cores, 2 threads; bench/cpu/events_rate*.json), 1.01 where event lists won at every rate
 * up to 95%. Reading a model input: a dense layer 0.70 with exact sums (events 1.05x at 60%, dense
 * 1.03x at 80%), 0.40 with float sums (parity at 40% in a first run, dense 1.28x at 60%); a conv
 * 0.90 exact (events 1.14x at 80%, parity at 95%), 0.50 float (parity at 40%, dense 1.10x at
 * 60%). Reading computed spikes (bits): a dense layer never exact (events 1.22x at 95%), 0.90
 * float (events 1.14x at 80%, dense 1.06x at 95%); a conv 0.90 exact (events 1.15x at 80%, dense
 * 1.16x at 95%), 0.70 float (events 1.17x at 60%, dense 1.25x at 80%). */
double
events_crossover(const Module *m, const Node *n)
{
    bool is_f32 = m->accumulate == ACC_F32, is_conv = op_is_conv(n->op);
    if (reads_model_input(m, n)) return is_conv ? (is_f32 ? 0.50 : 0.90) : (is_f32 ? 0.40 : 0.70);
    return is_conv ? (is_f32 ? 0.70 : 0.90) : (is_f32 ? 0.90 : 1.01);
}

bool
pass_events(Module *m, bool *changed)
{
    for (ValueId v = 0; v < m->nnodes; v++) {
        Node *n = &m->nodes[v];
        if (n->is_events || (n->op != OP_DENSE && !op_is_conv(n->op))) continue;
        DType in = m->nodes[n->args[0]].type.dtype;
        if (in != DT_SPIKE && in != DT_I8) continue;
        if (n->has_input_rate && n->input_rate >= events_crossover(m, n)) continue;
        n->is_events = true;
        n->events_loc = (Loc){0};
        *changed = true;
    }
    return true;
}
