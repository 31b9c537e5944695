/* explain.h: the schedule explained for performance tuners (snnc --explain, explain.c): what each
 * kernel computes, how parallel it is and what it touches, every buffer's size, and the memory and
 * launches an inference costs, at one batch size. It reads the kernel IR and never changes it. */
#ifndef SNN_DRIVER_EXPLAIN_H
#define SNN_DRIVER_EXPLAIN_H

#include <stdint.h>
#include <stdio.h>

#include "codegen/kir.h"

/* p lowered for its target (kir_lower_for: p->target CPU or GPU); sizes given at `batch` samples.
 * Deterministic: the same program and batch print the same bytes. */
void explain_print(FILE *f, const KProgram *p, int64_t batch);

/* what kernel k touches: use[b] |= USE_READ where it loads from buffer b, USE_WRITE where it stores
 * (use: one entry per buffer of its program, zeroed by the caller) */
enum { USE_READ = 1, USE_WRITE = 2 };
void explain_kernel_use(const Kernel *k, unsigned char *use);

#endif
