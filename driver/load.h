/* load.h: what a run reads (driver/load.c): inputs, weights, NIR graphs. */
#ifndef SNN_DRIVER_LOAD_H
#define SNN_DRIVER_LOAD_H

#include "driver/options.h"
#include "runtime/tensor_io.h"

/* the samples of a run, per model input */
typedef struct Data {
    int64_t n;            /* samples */
    int ninputs;
    float **inputs;       /* per model input: n * per-sample numel */
    int64_t *numel;       /* per-sample numel of each input, in file layout */
    float *labels;        /* n, or NULL */
    RtTensor *owned;      /* tensors whose data the inputs point into */
    int nowned, capowned;
} Data;

/* --data or --input into d, each array checked against its input (shape, sample count, element
 * type); false after reporting. data_free even then. */
bool load_inputs(const Module *m, const Options *o, Data *d);
void data_free(Data *d);
/* The weights a model runs with: --weights, else an imported graph's, else the model's own. */
bool bind_weights(Module *m, const Options *o);
/* Binds the weights where the code made for m follows their values (the narrow-weights pass
 * marked a layer: weights_round_stored), so that dumps and --explain show what a build makes;
 * true where nothing needed binding. False after reporting. */
bool bind_weights_for_code(Module *m, const Options *o);
/* a NIR graph imported (nir/) and compiled by the frontend; *text_path the name of its text,
 * *weights_path where --emit=snn writes its weights (or NULL); NULL after reporting */
Module *load_nir(Options *o, NirImport *im, char **text_path, char **weights_path);
/* notes, one per line, as "FILE: note: ..." on stderr ("warning: " lines as warnings, even with
 * quiet) */
void print_notes(const char *file, const char *notes, bool quiet);

#endif
