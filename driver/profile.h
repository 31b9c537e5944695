/* profile.h: --run --profile on the CPU (profile.c). The program's kernels compiled one by one (a
 * run of step kernels together: their steps interleave) and run in order on one binding, each
 * timed; at the end a table per kernel: seconds, share, the dense and conv layers' multiply-adds
 * as GFLOP/s (every input counted, spikes or not: the dense equivalent) and the bytes of the
 * buffers it touches as GB/s, so a tuner sets each kernel against the host's FMA peak and copy
 * bandwidth (bench/cpu/kernels.py does). The same outputs and spike counts as the plain run. */
#ifndef SNN_DRIVER_PROFILE_H
#define SNN_DRIVER_PROFILE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "codegen/kir.h"

typedef struct Profile Profile;

/* p (lowered for the CPU, from m) compiled unit by unit, with a pool of `threads`; NULL with err */
Profile *profile_open(const Module *m, const KProgram *p, int threads, char *err, size_t errlen);
/* one batch: as kir_eval (spike counts added to counts, m->nnodes entries, or NULL) */
bool profile_run(Profile *pf, int batch, int64_t base, const float *const *in, float *const *out,
                 double *counts, char *err, size_t errlen);
/* the table (json: one JSON array instead, for --report=json), over the batches run so far */
void profile_print(const Profile *pf, FILE *f, bool json);
void profile_free(Profile *pf); /* NULL is fine */

#endif
