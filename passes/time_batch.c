/* time_batch.c: choose the layer-by-layer schedule (ir.h: SCHEDULE_LAYER). Without it the module
 * is lowered step by step: every layer that varies with t launched T times, each neuron's state
 * stored and reloaded between steps. With it, stateless layers outside recurrent cycles run once
 * over all T*B rows (a GEMM T times taller), values that are the same at every step once per
 * sample, each neuron layer's T steps in one kernel with the state in registers, and only
 * recurrent cycles (through delays) keep a step loop. The results are the same bits either way;
 * the lowering reads the attribute (codegen/kir_lower.c). */
#include "passes/pass.h"

bool
pass_time_batch(Module *m, bool *changed)
{
    *changed = m->schedule != SCHEDULE_LAYER;
    m->schedule = SCHEDULE_LAYER;
    return true;
}
