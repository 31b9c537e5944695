/* calibrate.h: --precision=fp16|bf16|mixed, --narrow, --events=auto (driver/calibrate.c). */
#ifndef SNN_DRIVER_CALIBRATE_H
#define SNN_DRIVER_CALIBRATE_H

#include "ir/ir.h"

typedef struct PrecisionRequest {
    const char *mode;            /* "fp16", "bf16", "mixed": for the report */
    WeightStore narrow;          /* the 16-bit type tried */
    bool is_mixed;               /* keep it per tensor only where nothing changes */
    bool weights, activations;   /* which tensors: layers' weights (Node.wstore), their outputs
                                  * (Node.astore) */
    /* --tolerance: the changed spikes / spikes, and changed outputs / outputs, allowed: mixed
     * keeps a tensor within them; fp16 and bf16 fail past them when has_tolerance */
    double tolerance, tolerance_outputs;
    bool has_tolerance;
    const float *const *inputs;  /* calibration samples: inputs[k] holds n samples of input k */
    const int64_t *numel;        /* floats per sample of input k */
    int64_t n;
    int batch;
    bool quiet;
    int nrecorded; /* the last outputs are --record's: not compared (the model's own are) */
} PrecisionRequest;

/* Choose (mixed) or check (fp16, bf16) the storage of m's dense and conv weights and outputs on the
 * samples, set Node.wstore and Node.astore and round m's bound weights; storage the model states
 * stays as it is, and so do outputs that cannot be narrowed (ir_activation_problem). Prints what
 * it measured to stderr unless quiet. False after reporting an error. */
bool precision_calibrate(Module *m, const PrecisionRequest *rq);

/* fp16 or bf16 without calibration: every dense and conv weight (weights) and output (activations)
 * the model leaves unstated */
void precision_set_all(Module *m, WeightStore narrow, bool weights, bool activations);

/* --events=auto: measure, on the samples (the interpreter in float32), how often the input of each
 * dense and conv layer that would sum event by event is nonzero, and set Node.input_rate and
 * has_input_rate for the events pass (layers with an `events` statement keep it). m's weights
 * must be bound. Prints the rates and choices to stderr unless quiet. False after reporting an
 * error. */
bool events_calibrate(Module *m, const float *const *inputs, const int64_t *numel, int64_t n,
                      int batch, bool quiet);

#endif
