/* memory_plan.c: let temporaries share memory (ir.h MEMORY_REUSE, printed `memory reuse`). The
 * plan itself needs the kernel schedule, so the lowering makes it (kir_memory.c: plan_memory): each
 * temporary's lifetime is the span of kernels that use it (a step loop counts as a whole, a buffer
 * zeroed before the run starts at the run's start, spike counts end after it), and buffers whose
 * lifetimes do not overlap get one region of the arena, largest first. The arithmetic is untouched;
 * what shrinks is the arena (snnc --explain prints it with and without the plan). */
#include "passes/pass.h"

bool
pass_memory_plan(Module *m, bool *changed)
{
    *changed = m->memory != MEMORY_REUSE;
    m->memory = MEMORY_REUSE;
    return true;
}
