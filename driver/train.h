/* train.h: --train (driver/train.c). */
#ifndef SNN_DRIVER_TRAIN_H
#define SNN_DRIVER_TRAIN_H

#include "driver/options.h"

/* trains m's weights on the data of o and writes them to o->out after every epoch; an exit
 * status */
int train(Module *m, const Options *o);
/* --train --emit=kernel: the compiled training step's kernel IR (to -o or stdout); exit status */
int train_emit_kernel(Module *m, const Options *o);
/* DIR/epoch-N.safetensors, the checkpoint written after epoch n (malloc'ed) */
char *train_checkpoint_path(const char *dir, int64_t n);

#endif
