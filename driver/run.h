/* run.h: --run (driver/run.c). */
#ifndef SNN_DRIVER_RUN_H
#define SNN_DRIVER_RUN_H

#include "driver/options.h"

/* m (weights bound) on the inputs of o with its backend, reported; an exit status */
int run(Module *m, const Options *o);

#endif
