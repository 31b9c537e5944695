/* run.h: --run (driver/run.c). */
#ifndef SNN_DRIVER_RUN_H
#define SNN_DRIVER_RUN_H

#include "driver/options.h"
#include "driver/record.h"

/* m (weights bound) on the inputs of o with its backend, reported; rec's outputs (the last of m's)
 * kept for every sample and handed to record_finish; an exit status */
int run(Module *m, const Options *o, const Recording *rec);

#endif
