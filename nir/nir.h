/* NIR import: a .nir file (HDF5, ../docs/nir.md) → a tree of groups and datasets (h5read.c, the
 * only file that needs libhdf5) → a checked graph of NIR nodes (graph.c) → an equivalent .snn model
 * text and its weights (to_snn.c), which the frontend then compiles like any .snn file. The
 * discretisation NIR leaves open (dt, Euler or exact decay, reset kind and timing) is chosen by
 * NirImportOptions and written into the generated neuron definitions, so it is explicit in the IR.
 * Nothing here prints: every function reports one sentence through an error buffer. */
#ifndef SNN_NIR_H
#define SNN_NIR_H

#include "runtime/tensor_io.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    NIR_MAX_RANK = 8,
    NIR_MAX_DEPTH = 16,          /* nested graphs */
    NIR_MAX_NODES = 10000,       /* nodes in one file, all graphs together */
};
#define NIR_MAX_NUMEL ((int64_t)1 << 30) /* elements of one dataset; larger claims are errors */

/* ---- the file as a tree (h5read.c builds it from HDF5; tests and the fuzz target build it by
 * hand) ---- */
typedef enum { NIR_GROUP, NIR_NUMBERS, NIR_STRINGS, NIR_OTHER } NirObjKind;

typedef struct NirObj NirObj;
struct NirObj {
    char *name;
    NirObjKind kind;
    NirObj *kids; /* NIR_GROUP: its members, sorted by name */
    int nkids;
    bool is_int;  /* NIR_NUMBERS: stored as integers */
    int rank;     /* datasets: 0 for a scalar */
    int64_t dims[NIR_MAX_RANK];
    int64_t numel;
    double *num;  /* NIR_NUMBERS: numel values */
    char **str;   /* NIR_STRINGS: numel strings */
};

void nir_obj_free(NirObj *o); /* frees what o owns (not o itself) */
const NirObj *nir_obj_find(const NirObj *group, const char *name);

/* tree_text.c: a tree from text, one dataset per line ("node/nodes/lif/tau f 4 1e-3 1e-3 1e-3
 * 1e-3"; kinds s, f, i; dimensions "-" or "2x3"): .nir files for tests and the fuzz target */
bool nir_tree_parse(const char *text, size_t len, NirObj *root, char *err, size_t errlen);

/* h5read.c: the whole file; false with one sentence in err. Without libhdf5 in the build it says so. */
bool nir_h5_read(const char *path, NirObj *root, char *err, size_t errlen);
bool nir_h5_available(void);

/* ---- the graph (graph.c) ---- */
#define NIR_KINDS(X)                                                                              \
    X(INPUT, "Input") X(OUTPUT, "Output") X(AFFINE, "Affine") X(LINEAR, "Linear")                 \
    X(SCALE, "Scale") X(CONV1D, "Conv1d") X(CONV2D, "Conv2d") X(SUMPOOL2D, "SumPool2d")           \
    X(AVGPOOL2D, "AvgPool2d") X(FLATTEN, "Flatten") X(DELAY, "Delay") X(THRESHOLD, "Threshold")   \
    X(I, "I") X(IF, "IF") X(LI, "LI") X(LIF, "LIF") X(CUBALI, "CubaLI") X(CUBALIF, "CubaLIF")

typedef enum {
#define X(k, s) NK_##k,
    NIR_KINDS(X)
#undef X
    NK_COUNT
} NirKind;
const char *nir_kind_name(NirKind k);

typedef struct NirNode {
    char *name;          /* dotted path from the top graph: "rec.lif" */
    NirKind kind;
    const NirObj *group; /* its fields */
    bool is_top;         /* an Input/Output of the top-level graph (a model input/output) */
    int nin;             /* incoming edges (their sum is the node's input) */
    int *in;             /* source node indices */
} NirNode;

typedef struct NirGraph {
    char *version;       /* the file's "version" ("" when absent) */
    NirNode *nodes;
    int nnodes;
} NirGraph;

/* The top graph of root (the file) flattened: nested graphs' nodes named "sub.node", an edge into
 * a nested graph goes to its one Input node, an edge out of it leaves from its one Output node.
 * Checks what the structure needs (types known, edges name existing nodes, depth and size
 * limits); fields are checked by to_snn. path is for messages. */
bool nir_graph_build(const NirObj *root, const char *path, NirGraph *g, char *err, size_t errlen);
void nir_graph_free(NirGraph *g);

/* ---- translation to the language (to_snn.c) ---- */
typedef enum { NIR_EULER, NIR_EXACT } NirIntegrator;
typedef enum { NIR_RESET_VALUE, NIR_RESET_SUBTRACT } NirReset;

enum {
    NIR_GIVEN_DT = 1, NIR_GIVEN_IMPULSES = 2, NIR_GIVEN_INTEGRATOR = 4, NIR_GIVEN_RESET = 8,
    NIR_GIVEN_RESET_STEP = 16, NIR_GIVEN_TIMESTEPS = 32, NIR_GIVEN_SPIKE_INPUTS = 64,
    NIR_GIVEN_FRAMEWORK = 128,
};

/* --framework: the framework (and version) whose conventions a graph is run with. NIR leaves the
 * discretisation open and each exporter fills it in its own way; a preset states one exporter's
 * (dt, integrator, reset kind and timing, impulses) and picks its neuron variants (snnTorch's
 * RLeaky/Synaptic zero reset and reset_delay=False, Sinabs's multi-spike neurons). Options the
 * user gives, then options the file stores, win over the preset. docs/nir.md has the table. */
typedef enum {
    NIR_FW_NONE,          /* NIR's own reading: the options' defaults */
    NIR_FW_SNNTORCH,
    NIR_FW_NORSE,
    NIR_FW_SINABS,
    NIR_FW_SPIKINGJELLY,
    NIR_FW_SPYX,
    NIR_FW_LAVA_DL,
    NIR_FW_COUNT
} NirFramework;

/* the framework named s ("snntorch", "lava-dl", ...; case-insensitive, '_' for '-'), or
 * NIR_FW_COUNT when none is */
NirFramework nir_framework_parse(const char *s);
const char *nir_framework_name(NirFramework f);   /* "snntorch" */
/* one line: the framework, the version checked and what its preset sets */
const char *nir_framework_summary(NirFramework f);
/* the names --framework takes, separated by '|' */
const char *nir_framework_list(void);

typedef struct NirImportOptions {
    double dt;                /* seconds per step; <= 0: recovered from the exporters' convention
                                 (r = tau/dt), else 1e-4 */
    NirIntegrator integrator; /* euler (default) or exact */
    NirReset reset;           /* value (default: the spec's v <- v_reset) or subtract */
    bool reset_next;          /* the reset acts at the next step's update (snnTorch) */
    bool spike_inputs;        /* the model's inputs are spikes (0/1): declared spike, so the
                                 layers reading them sum event by event */
    bool impulses;            /* IF, I and the synaptic current of CubaLI/CubaLIF take each step's
                                 input as an impulse (v += r I, i += w_in I: Norse) instead of a
                                 current integrated over dt */
    int timesteps;            /* T of the model (required) */
    NirFramework framework;   /* NIR_FW_NONE, or the preset that fills the options not given */
    unsigned given;           /* NIR_GIVEN_* of the options the user set: the file's stored
                                 options (snnc_import_options, written by --emit=nir) fill the
                                 others (nir_import_file) */
    unsigned stored;          /* NIR_GIVEN_* of the options the file stored (set by
                                 nir_import_file): a preset fills only what neither states */
    const char *model_name;   /* NULL: from the file name */
    const char *weights_ref;  /* NULL: no `weights` statement (the caller binds them) */
} NirImportOptions;

typedef struct NirImport {
    char *text;          /* the .snn model */
    size_t len;
    RtTensor *tensors;   /* its weights, named as the model names them */
    int ntensors;
    char notes[2048];    /* what was detected and chosen, one line each ("" if nothing) */
    int nlines;          /* lines of text */
    int *line_node;      /* per line (0-based): the node it stands for, or -1 */
    int nnodes;
    char **node_what;    /* per node: "node 'fc1' (Affine)" (escaped when printed) */
} NirImport;

/* what line (1-based) of im->text stands for, or NULL: a DiagOriginFn for ctx = im */
const char *nir_import_origin(void *im, int line);

bool nir_to_snn(const NirGraph *g, const char *path, const NirImportOptions *o, NirImport *out,
                char *err, size_t errlen);
void nir_import_free(NirImport *im);

/* the neuron definitions nir_to_snn writes (every kind and reset variant) in a model that uses
 * each: what --emit=nir compares a model's NIR_* neurons with (malloc'ed) */
char *nir_neuron_library(void);

/* ---- export (from_ir.c, h5write.c) ---- */
struct Module;
/* A module with bound weights → a NIR file's tree. dt: the step its neurons' time constants are
 * written for (<= 0: the framework's, else 1e-4); impulses: IF, I and synaptic gains written for
 * readers that take inputs as impulses (--impulses; < 0: the framework's, else not); framework:
 * the convention the neurons are written in and stored for the reader (--framework=), or
 * NIR_FW_NONE: the one the model's framework-specific NIR_* neurons imply, if any. notes gets
 * what the reader should know (one line each), err why it failed. */
bool nir_from_module(const struct Module *m, double dt, int impulses, NirFramework framework,
                     NirObj *root, char *notes, size_t noteslen, char *err, size_t errlen);
/* the options framework's preset sets, in o (o->framework names it; NIR_FW_NONE: nothing) */
void nir_apply_preset(NirImportOptions *o);
/* h5write.c: the tree as an HDF5 file (arrays gzip-compressed, strings variable-length UTF-8,
 * as nir.write stores them) */
bool nir_h5_write(const char *path, const NirObj *root, char *err, size_t errlen);

/* file → .snn text and weights in one call */
bool nir_import_file(const char *path, const NirImportOptions *o, NirImport *out, char *err,
                     size_t errlen);

#endif
