/* options.h: snnc's command line: the options (one table, driver/options.def, drives getopt and
 * --help), their checks, and the usage errors (one line on stderr, exit status 1). */
#ifndef SNN_DRIVER_OPTIONS_H
#define SNN_DRIVER_OPTIONS_H

#include "codegen/cuda/build.h"
#include "ir/ir.h"
#include "nir/nir.h"
#include "passes/pass.h"

#define SNNC_VERSION "0.1.0"

enum { MAX_INPUT_ARGS = 16 };

typedef struct Options {
    const char *path;
    const char *model;
    const char *emit;
    const char *out;
    bool run;
    const char *backend;
    InterpPrecision precision;
    const char *precision_mode; /* fp16, bf16, mixed: dense and conv weights stored narrower */
    bool has_precision;         /* --precision=fp32 (f32) or a mode: the storage is the user's */
    const char *outputs;        /* --outputs: the outputs to keep, comma-separated; NULL: all */
    WeightStore narrow;         /* WSTORE_F32 unless precision_mode */
    bool narrow_weights, narrow_activations; /* --narrow: what precision_mode narrows */
    bool has_narrow;
    int64_t calibrate;          /* calibration samples (of --data / --input) */
    double tolerance;           /* --tolerance: changed spikes allowed (fraction) */
    double tolerance_outputs;   /* ... and changed output elements */
    bool has_tolerance;
    int accumulate; /* -1: as the model says; else an Accumulate */
    bool events_auto; /* --events=auto: input rates on the calibration samples decide */
    const char *data;
    const char *input_args[MAX_INPUT_ARGS];
    int ninput_args;
    int batch;
    int64_t limit;
    int64_t seed;
    const char *output;
    const char *record;      /* --record: layers and LAYER.VAR states, comma-separated */
    const char *record_file; /* --record-file: where they go (.npz) */
    const char *plot;        /* --plot=DIR: SVG figures of the recordings, or of training */
    int64_t plot_sample;     /* --plot-sample: the sample the raster and traces show */
    bool has_plot_sample;
    bool report_json;
    bool profile; /* --profile: --run on the CPU, every kernel timed alone (driver/profile.c) */
    const char *weights;
    bool quiet;
    int opt_level;
    int threads; /* CPU backend: threads running each kernel (default: online CPUs) */
    bool no_embed_weights; /* model.so: leave the weights out */
    const char *cpu;       /* model.so / --emit=obj: LLVM CPU name; NULL = this machine's */
    PassOptions passes;    /* the pass pipeline: -O (opt_level), --passes, --print-ir-... */
    bool explain;          /* --explain: the schedule, buffers and launches at --batch */
    const char *device;    /* --device: cpu, cuda, cuda:N or auto (NULL: auto) */
    int cuda_ordinal;      /* N of cuda:N */
    const char *cuda_arch; /* --cuda-arch as given; NULL: the default */
    const char *archs[MAX_CUDA_ARCHS]; /* its entries (sm_NN, compute_NN), or "none" alone */
    int narchs;
    char arch_list[256];   /* where archs point */
    bool is_nir;           /* the model file is a NIR graph (.nir) */
    NirImportOptions nir;  /* --dt, --integrator, --reset, --reset-step, --timesteps */
    const NirImport *import; /* the imported graph's text and weights (is_nir) */
    /* --train and its settings */
    bool train;
    int64_t epochs;
    int loss;      /* RtLoss */
    int optimizer; /* RtOptimizer */
    double lr, momentum, weight_decay;
    bool nesterov, has_momentum, has_weight_decay, has_lr;
    bool cosine;
    bool train_library; /* --train -o MODEL.so: a library carrying the training step (no data) */
    /* which training settings the command line gave (a model's train block gives the others) */
    bool has_epochs, has_batch, has_loss, has_optimizer, has_schedule, step_schedule;
    int64_t step_size;        /* --schedule=step: epochs between decays (0: no step schedule) */
    double gamma;             /* --gamma */
    double clip_norm;         /* --clip-grad-norm, or 0 */
    double loss_on, loss_off; /* --loss-targets */
    bool has_loss_targets;
    bool has_gamma;
    const char *labels;
    bool no_shuffle;
    int64_t test_limit; /* -1: all */
    bool init;          /* --init: seeded default initialisation */
    const char *grads;  /* --grads: the first batch's gradients */
    const char *checkpoint; /* --checkpoint=DIR */
    const char *loss_output; /* --loss-output=NAME: the output the loss reads */
    const char *resume;     /* --resume=FILE */
} Options;


/* argv into o, checked as a whole; a usage error exits (--help, --version and --help-* print and
 * exit 0) */
void parse_options(int argc, char **argv, Options *o);
/* "snnc: error: ..." and the pointer to --help on stderr, exit status 1 */
_Noreturn void usage_error(const char *fmt, ...);
bool is_emit(const Options *o, const char *what);
/* whether the command builds a binary: model.so, its object, PTX or a cubin */
bool is_build(const Options *o);

#endif
