/* record.h: --record, --record-file and --plot of a run (driver/record.c): the layers and states
 * a run keeps, added to the module as `sequence` outputs before the passes, so every backend
 * computes them as it computes any output; written sample-major to an .npz and drawn as SVG
 * (driver/plot.c). */
#ifndef SNN_DRIVER_RECORD_H
#define SNN_DRIVER_RECORD_H

#include "driver/files.h"
#include "driver/options.h"
#include "runtime/tensor_io.h"

/* one recorded name of --record */
typedef struct RecordItem {
    char *name;    /* as given: "s1", or "s1.v" for layer s1's state v */
    char *ir_name; /* the output's name in the IR: rec_s1, rec_s1__v */
    char *layer;   /* the layer's name ("s1") and what it is ("LIF", "dense") for titles */
    char *kind;
    ValueId value;    /* the node recorded, in the module as loaded */
    bool is_state;    /* a neuron layer's state variable (a trace), else the layer's values */
    bool is_spikes;   /* the values are spikes (0/1, or -1/0/1: dtype RT_I8) */
    RtDType dtype;    /* in the file: RT_U8 spikes, RT_I8 bipolar spikes, RT_F32 */
    double threshold; /* is_state: the value the neuron fires at (`fire v >= v_th`), else NAN */
    const char *threshold_name;
    int rank; /* the shape of one sample at one step */
    int64_t dims[IR_MAX_RANK];
    int64_t numel;
} RecordItem;

typedef struct Recording {
    RecordItem *items;
    int nitems;
    int first_output; /* items[i] is the module's output first_output + i */
} Recording;

/* --record's names checked against m (each a named layer with a value per step, or LAYER.VAR a
 * state of a neuron layer) into r; false after an error naming the model's layers. Nothing
 * is added to m yet. */
bool record_plan(const Module *m, const Options *o, Recording *r);
/* the files r and --plot will write, for the check that no output overwrites an input */
void record_files(const Options *o, const Recording *r, FileList *l);
/* an output `rec_NAME = sequence(value)` per item (a state(layer, "var") probe for states), after
 * the model's own outputs */
void record_add_outputs(Module *m, Recording *r);
/* after the run: outs[first_output + i] holds n samples of items[i] (floats, [n][T][numel]):
 * --record-file written whole, the --plot files drawn. False after reporting. */
bool record_finish(const Module *m, const Options *o, const Recording *r, float *const *outs,
                   int64_t n);
void record_free(Recording *r);

#endif
