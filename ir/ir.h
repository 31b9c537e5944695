/* The graph IR: a model is an array of nodes (ops over time-indexed tensors [T, B, ...]) referenced by
 * integer handles, neuron definitions (small programs of scalar equations), and weight slots.
 * This header is the IR's whole public surface: one block of prototypes per .c file in ir/.
 * Nodes are never freed one by one: everything lives in the module's arena. */
#ifndef SNN_IR_H
#define SNN_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- arena.c: bump allocation; a module and everything in it is freed at once ---- */
typedef struct ArenaBlock ArenaBlock;
typedef struct Arena {
    ArenaBlock *head;
} Arena;
void *arena_alloc(Arena *a, size_t size);             /* zeroed, 16-byte aligned, never NULL (dies on OOM) */
void *arena_grow(Arena *a, void *old, size_t oldsize, size_t newsize);
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void arena_free(Arena *a);

/* ---- diag.c: user diagnostics "file:line:col: error: msg", source line and caret; internal bugs ---- */
typedef struct Loc {
    const char *file; /* interned by diag_add_source; NULL = no location */
    int line, col;    /* 1-based; 0 = unknown */
} Loc;

void diag_add_source(const char *file, const char *text); /* remember a file's text to quote its lines */
const char *diag_intern(const char *file);                 /* a stable copy of a file name */
void diag_error(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void diag_warning(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void diag_note(Loc loc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void diag_file_error(const char *file, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A runtime reader's message ("PATH: what is wrong") as "PATH: error: what is wrong". With path NULL
 * the file is taken from the message itself. */
void diag_reader_error(const char *path, const char *msg);

/* printf into a caller's message buffer (err, errlen; NULL or 0: nothing), for the code that
 * returns its errors instead of printing them */
void diag_format(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int diag_error_count(void);
/* Lines of a generated file that stand for parts of another file (an imported NIR graph's nodes):
 * a message at such a line of `file` is reported at `origin_file` and what fn(ctx, line) names
 * ("node 'fc1' (Affine)"), the generated line quoted after it; fn returns NULL for other lines.
 * One mapping at a time; fn NULL clears it. */
typedef const char *(*DiagOriginFn)(void *ctx, int line);
void diag_set_origin(const char *file, const char *origin_file, DiagOriginFn fn, void *ctx);
void diag_set_stream(FILE *f); /* default stderr */
void diag_reset(void);         /* forget sources and counts (tests, fuzzing) */
_Noreturn void die_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define die(...) die_at(__FILE__, __LINE__, __VA_ARGS__)
#define unreachable() die_at(__FILE__, __LINE__, "unreachable")
/* diag.c: allocation for the compiler, fatal when memory runs out (the runtime never uses it) */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

/* ---- types ---- */
typedef enum {
    DT_F32,   /* "f32" */
    DT_F16,   /* "f16" */
    DT_BF16,  /* "bf16" */
    DT_SPIKE, /* "spike": 0 or 1 */
    DT_I8,    /* "i8": bipolar spikes -1, 0, +1 */
    DT_COUNT_
} DType;
const char *dtype_name(DType t);
bool dtype_from_name(const char *s, DType *out);

#define IR_MAX_RANK 6
typedef struct Type {
    DType dtype;
    bool has_time; /* leading T: [T, B, ...]; readouts other than sequence drop it: [B, ...] */
    bool is_weight; /* a weight's shape, no T and no B: f32[out, in] (grad_weight's) */
    int rank;      /* rank of one sample (dims after T and B) */
    int64_t dims[IR_MAX_RANK];
} Type;
int64_t type_numel(const Type *t); /* elements of one sample at one step */
bool type_equal(const Type *a, const Type *b);
/* "f32[T, B, 256]"; written into buf (at least 96 bytes); returns buf */
char *type_str(const Type *t, char *buf, size_t n);

/* ---- ops (ops.def) ---- */
typedef enum {
#define OP(id, name, alias, nargs, attrs, weights, sem, loop, backward) OP_##id,
#include "ir/ops.def"
#undef OP
    OP_COUNT_
} Op;

typedef enum { AK_INT, AK_FLOAT, AK_BOOL, AK_STR, AK_INT2 } AttrKind;
typedef struct AttrSpec {
    const char *name;
    AttrKind kind;
    bool has_default;
    /* default, valid when has_default */
    int64_t i[2];
    double f;
    const char *s;
} AttrSpec;

#define IR_MAX_ATTRS 10
#define IR_MAX_WEIGHTS 4
typedef struct OpInfo {
    const char *name, *alias, *semantics;
    int nargs;
    int nattrs;
    AttrSpec attrs[IR_MAX_ATTRS];
    int nweights;
    const char *weights[IR_MAX_WEIGHTS];
    bool weight_optional[IR_MAX_WEIGHTS]; /* "bias?": only when the bias attribute is true */
    bool weight_is_state[IR_MAX_WEIGHTS]; /* "running_mean!": updated by the op, not trained */
    /* its gradient rule (what its backward step gives its operands and weights from dL/dy), or
     * NULL: not differentiated; grad_in_loop: compiled training differentiates it inside a
     * recurrence too */
    const char *backward;
    bool grad_in_loop;
} OpInfo;
const OpInfo *op_info(Op op);
bool op_lookup(const char *name, Op *out); /* name or alias */
int op_attr_index(Op op, const char *name);  /* -1 if none */
void ops_print_help(FILE *f);              /* --help-ops */

typedef struct AttrVal {
    int64_t i[2]; /* AK_INT uses i[0]; AK_BOOL i[0] 0/1; AK_INT2 both */
    double f;
    const char *s; /* AK_STR, arena-owned */
} AttrVal;

/* ---- neuron definitions: scalar programs run once per neuron per step ---- */
typedef enum {
    NX_NUM,    /* num */
    NX_PARAM,  /* idx: parameter */
    NX_STATE,  /* idx: state variable (current value) */
    NX_LOCAL,  /* idx: let-bound local */
    NX_INPUT,  /* I: the input current at this step */
    NX_SPIKE,  /* spike: this step's spike after fire, the previous step's before */
    NX_NEG,    /* -a */
    NX_NOT,    /* !a */
    NX_BIN,    /* a op b; op is a NxBin */
    NX_COND,   /* a ? b : c */
    NX_CALL,   /* fn(args) over nfuncs.def */
} NxKind;

typedef enum {
    NB_ADD, NB_SUB, NB_MUL, NB_DIV,
    NB_LT, NB_LE, NB_GT, NB_GE, NB_EQ, NB_NE,
    NB_AND, NB_OR,
} NxBin;
const char *nxbin_str(NxBin op); /* "+", ">=", "&&", ... */

typedef enum {
#define NFUNC(id, name, arity, sem) NF_##id,
#include "ir/nfuncs.def"
#undef NFUNC
    NF_COUNT_
} NFunc;
const char *nfunc_name(NFunc f);
int nfunc_arity(NFunc f);
bool nfunc_lookup(const char *name, NFunc *out);

typedef struct NExpr NExpr;
struct NExpr {
    NxKind kind;
    int op;   /* NxBin for NX_BIN, NFunc for NX_CALL */
    int idx;  /* NX_PARAM, NX_STATE, NX_LOCAL */
    double num;
    int nargs;
    NExpr *args[3]; /* operands: NEG/NOT 1, BIN 2, COND 3, CALL arity */
};

typedef enum {
    NS_ASSIGN,     /* state[var] = e, or local[var] = e when is_local ("let") */
    NS_FIRE,       /* spike = e != 0 ? +1 : 0 */
    NS_FIRE_DOWN,  /* if spike == 0 and e != 0: spike = -1  (bipolar neurons) */
    NS_RESET_TO,   /* if spike != 0: state[var] = e   (hard reset) */
    NS_RESET_SUB,  /* state[var] = state[var] - spike * e   (soft / subtract reset) */
    NS_REFRACTORY, /* if spike != 0: refractory counter = e steps */
    NS_OUTPUT,     /* the layer's output this step = e (default: spike) */
} NsKind;

typedef struct NStmt {
    NsKind kind;
    int var;
    bool is_local;
    NExpr *e;
    Loc loc;
} NStmt;

typedef struct NParam {
    const char *name;
    double def;
} NParam;

typedef struct NState {
    const char *name;
    NExpr *init; /* over parameters only */
} NState;

typedef struct Surrogate {
    const char *name; /* NULL: none given */
    int nargs;
    const char *arg_names[4];
    double arg_values[4];
} Surrogate;

typedef struct NeuronDef {
    const char *name;
    Loc loc;
    int nparams;
    NParam *params;
    int nstates;
    NState *states;
    int nlocals;
    const char **locals;
    int nstmts;
    NStmt *stmts;
    Surrogate surrogate;
    /* derived by neuron_analyse (verify.c) */
    bool is_bipolar;     /* has fire down */
    bool has_output;     /* output e given: the layer emits f32 values instead of spikes */
    bool has_refractory; /* keeps a refractory counter */
    bool reset_is_next;  /* a reset statement sits before fire: it uses the previous step's spike */
} NeuronDef;

/* surrogate.c: the surrogate gradients of `fire` (surrogates.def), for training */
typedef enum {
#define SURROGATE(id, name, params, fw, deriv) SG_##id,
#include "ir/surrogates.def"
#undef SURROGATE
    SG_COUNT_
} SurrogateId;
typedef struct SurrogateFn {
    SurrogateId id;
    double args[3];    /* the row's params, in its order, defaults filled in */
    bool detach_reset; /* no gradient through the spike where a reset uses it */
} SurrogateFn;
/* A neuron's surrogate statement resolved against the table; false with the reason in err (no
 * surrogate, an unknown name or argument) */
bool surrogate_resolve(const Surrogate *s, SurrogateFn *out, char *err, size_t errlen);
const char *surrogate_name(SurrogateId id);
const char *surrogate_known(void); /* "known: sigmoid, atan, ..." */
void surrogates_help(FILE *f);     /* one line per surrogate: signature, framework, derivative */
/* d spike / du times grad, u = the fired comparison's left side minus its right (H - threshold),
 * rounded like float32 PyTorch per operation when is_f32 */
double surrogate_grad(const SurrogateFn *s, double grad, double u, bool is_f32);
/* the smooth function whose derivative surrogate_grad is (in double): the spike's stand-in when a
 * network is made smooth to check gradients by finite differences */
double surrogate_primitive(const SurrogateFn *s, double u);
/* The surrogate a neuron's `fire` is differentiated with (sg->id SG_STRAIGHT and unused when it
 * never fires), or false with why it cannot be differentiated in err: a refractory period, -1
 * spikes, a fire condition that is not one comparison, no or an unknown surrogate. */
bool neuron_surrogate(const NeuronDef *nd, SurrogateFn *sg, char *err, size_t errlen);

/* ---- nodes and the module ---- */
typedef int32_t ValueId; /* index into Module.nodes; -1 = none */
#define IR_MAX_ARGS 3

/* The storage of a layer's weight (Node.wstore): WSTORE_F32 as given; WSTORE_F16 (IEEE binary16)
 * and WSTORE_BF16 (bfloat16) each value rounded to nearest, ties to even (runtime/f16.h). */
typedef enum { WSTORE_F32, WSTORE_F16, WSTORE_BF16 } WeightStore;
/* How a spike value's elements are stored (Node.layout): SPIKES_BYTES one byte each; SPIKES_BITS
 * as few bits as the values need (lossless): 0/1 spikes one bit each, element e in bit e % 8 of
 * byte e / 8; -1/0/1 spikes (DT_I8) two bits each, element e in bits 2(e % 4) and 2(e % 4) + 1 of
 * byte e / 4, two's complement. */
typedef enum { SPIKES_BYTES, SPIKES_BITS } SpikeLayout;
typedef struct Node {
    Op op;
    const char *name; /* value name ("fc1"); NULL: printed as %N */
    int nargs;
    ValueId args[IR_MAX_ARGS];
    AttrVal attrs[IR_MAX_ATTRS]; /* one per op_info(op)->attrs, in table order */
    int neuron;                  /* OP_NEURON: index into Module.neurons */
    double *params;              /* OP_NEURON: one per neuron parameter */
    /* OP_NEURON: bit i set: parameter i is learned (written `p = learn(x)`): a weight of one
     * element named LAYER.p (PyTorch's name for SpikingJelly's PLIF w, snnTorch's learn_beta and
     * learn_threshold), params[i] its initial value; compiled code reads it at run time */
    uint32_t learned;
    Type type;                   /* inferred; OP_INPUT: declared (has_time = per-step input) */
    bool is_output;
    bool is_per_step_input;      /* OP_INPUT declared with a leading T */
    int first_weight;            /* index into Module.weights; nweights slots follow */
    int nweights;
    /* computed inside the kernel of this node (its only user), with no buffer of its own: printed
     * `fuse a into b`, chosen by the fuse pass; -1 = its own kernel (ir_fusion_problem says what
     * may be fused) */
    ValueId fused_into;
    Loc fused_loc; /* the `fuse` statement that asked for it (line 0: a pass chose it) */
    /* a dense or conv layer reading spikes that sums only its nonzero inputs, event by event,
     * on the CPU: per row a list of the inputs that spiked, and only their weight rows added
     * (printed `events a`, chosen by the events pass; otherwise the kernel for real inputs,
     * which visits every input and skips the zero products) */
    bool is_events;
    Loc events_loc; /* the `events` statement (line 0: a pass chose it) */
    /* the fraction of a dense or conv layer's input elements that were nonzero on the
     * calibration samples (`snnc --events=auto`; not part of the IR text): the events pass leaves
     * a layer at or past the rate where summing densely measured faster unmarked */
    bool has_input_rate;
    double input_rate;
    /* how a dense or conv layer's weight (its first weight slot; a bias stays f32) is stored
     * (printed `weights a : f16`, chosen by --precision): its values are the float weight rounded
     * to that type, everywhere (weights_bind rounds them, the interpreter computes with them),
     * and compiled code keeps and loads 2 bytes per weight */
    WeightStore wstore;
    Loc wstore_loc; /* the `weights` statement (line 0: --precision chose it) */
    /* the narrow-weights pass: store the weight in 16 bits if every value bound to it is exact
     * there (weights_round_stored decides when weights are bound, f16 before bf16: the same
     * numbers in half the bytes); wstore_exact: it did, so the values stay the given ones and
     * weights loaded at run time must be exact in that type too (the runtime refuses others) */
    bool wstore_auto, wstore_exact;
    /* how a dense or conv layer's output is stored (printed `activations a : f16`, chosen by
     * --precision): each value the layer computes (its f32 sum) is rounded to that type, in the
     * interpreter as in compiled code, and a buffer holding it keeps 2 bytes per element
     * (ir_activation_problem says where it may be given) */
    WeightStore astore;
    Loc astore_loc; /* the `activations` statement (line 0: --precision chose it) */
    /* how a spike value with memory of its own is stored (printed `layout a : bits`, chosen by
     * the pack-spikes pass): 1 bit per spike (2 for -1/0/1 spikes) instead of a byte, on the
     * CPU (ir_layout_problem
     * says where it may be given; the GPU keeps bytes) */
    SpikeLayout layout;
    Loc layout_loc; /* the `layout` statement (line 0: a pass chose it) */
    /* a dense or conv layer whose only reader is a neuron scan (directly or through a batchnorm
     * fused into the scan) that the GPU computes inside that scan, the scan as its epilogue: each
     * neuron's thread sums its input for step t and steps at once, state in registers, and the
     * layer has no buffer and no kernel (printed `epilogue a`, chosen by the scan-epilogue pass;
     * ir_epilogue_problem says where; the CPU keeps its tiles and event lists) */
    bool is_scan_epilogue;
    Loc epilogue_loc; /* the `epilogue` statement (line 0: a pass chose it) */
    Loc loc;
} Node;

typedef struct Weight {
    const char *name; /* "fc1.weight" */
    ValueId node;
    int slot;  /* index into op_info(op)->weights (-1: a learned parameter) */
    int param; /* a neuron's learned parameter: its index (slot -1) */
    int rank;
    int64_t dims[IR_MAX_RANK];
    int64_t numel;
    float *data;      /* NULL until bound (weights_bind) */
} Weight;

/* How the T steps are scheduled (an IR attribute, printed as `schedule layer`):
 * SCHEDULE_STEP   every layer one step at a time, in a loop over t (what lowering does with no
 *                 pass run: nothing fused across time, state kept in buffers between steps);
 * SCHEDULE_LAYER  chosen by the time-batch pass: stateless layers outside recurrent cycles run
 *                 once over all T*B rows, each neuron layer's T steps in one kernel with its state
 *                 in registers, recurrent cycles (through delays) in a step loop. */
typedef enum { SCHEDULE_STEP, SCHEDULE_LAYER } Schedule;

/* Where temporaries live (an IR attribute, printed as `memory reuse`): MEMORY_SEPARATE each in its
 * own region of the arena; MEMORY_REUSE (the memory-plan pass) temporaries whose lifetimes in the
 * kernel schedule do not overlap share a region (KBuf.slot). */
typedef enum { MEMORY_SEPARATE, MEMORY_REUSE } MemoryPlan;

/* How dense and convolution layers sum (an IR attribute, printed as `accumulate exact` when not
 * the default):
 * ACC_F32, the default, in float with a fused multiply-add per term, as float32 frameworks do, in
 * an order fixed by the model (dense: from the bias, input by input; conv: taps (kh, kw) outer,
 * input channels inner, then the bias), which every backend and the interpreter's float32 mode
 * follow, so they agree bit for bit; ACC_EXACT in double, rounded once to float (a sum of float
 * products in double is exact unless its terms span more than ~29 binades, so the order hardly
 * matters), at half the SIMD lanes. First in the enum: a zeroed Module sums in float. */
typedef enum { ACC_F32, ACC_EXACT } Accumulate;

/* One setting of a model's `train { ... }` block: a --train option the model gives (the command
 * line overrides it). frontend/lower.c checks the key and the value's kind; driver/train.c
 * applies them. */
typedef struct TrainItem {
    const char *key;  /* epochs, batch, loss, optimizer, lr, ... (frontend/lower.c train_keys) */
    const char *word; /* a word value (adam, cosine, true, an output's name), or NULL: num */
    double num;
    bool is_int;
    Loc loc;
} TrainItem;

typedef struct Module {
    Arena arena;
    const char *name;
    Loc loc;
    int timesteps;
    Schedule schedule;
    MemoryPlan memory;
    Accumulate accumulate;
    /* the weights' storage is the user's (snnc --precision given): narrow-weights leaves them */
    bool is_precision_stated;
    /* the passes choose for the GPU (snnc --device=cuda): the driver's, never printed; the fuse
     * pass leaves a conv's batchnorm to fold-batchnorm on the CPU only (passes/fuse.c) */
    bool is_for_gpu;
    /* lowered for training and its testing on the CPU (driver/train.c): the driver's, never
     * printed. The optimiser rewrites the weights every step, so a large dense layer reads its
     * weight as stored, [out][in], the very array the optimiser updates, rather than a packed
     * copy remade after every step (codegen/lower_layers.c lower_dense_stored) */
    bool is_weights_in_place;
    /* lowered for training with the events pass left out (-O0, --disable-pass=events): a spike-fed
     * conv sums every input, zeros too, rather than its spike lists (codegen/kir_lower.c
     * layer_kind); the driver's, never printed */
    bool is_train_dense;
    const char *weights_path; /* absolute, or NULL: seeded initialisation */
    const char **files;       /* the files read to build it: the main file (unless it came as
                                 text), then its includes; what no output may overwrite */
    int nfiles;
    int64_t seed;
    TrainItem *train; /* the train { ... } block's settings, in order */
    int ntrain;
    bool has_train; /* the model has a train block (perhaps empty) */
    Node *nodes;
    int nnodes, capnodes;
    NeuronDef **neurons;
    int nneurons, capneurons;
    Weight *weights;
    int nweights;
    ValueId *inputs;
    int ninputs;
    ValueId *outputs;
    int noutputs;
} Module;

/* module.c: building */
Module *module_new(void);
void module_free(Module *m);
ValueId module_add_node(Module *m, Op op, Loc loc); /* attrs set to their defaults */
/* A copy of m whose nodes, neuron parameters, weights table, inputs and outputs are its own (its
 * marks, outputs and weight data may change); names, neuron definitions and strings are m's, so m
 * must outlive it. */
Module *module_clone(const Module *m);
/* an output `name = sequence(v)` (typed: v's type at every step); returns its node */
ValueId module_add_output(Module *m, ValueId v, const char *name);
Node *module_node(Module *m, ValueId v);
int module_add_neuron(Module *m, NeuronDef *nd);   /* returns its index; nd must live in m->arena */
int module_find_neuron(const Module *m, const char *name);
ValueId module_find_value(const Module *m, const char *name);
int module_find_weight(const Module *m, const char *name);
const char *wstore_name(WeightStore s); /* "f32", "f16", "bf16" */
const char *spike_layout_name(SpikeLayout l); /* "bytes", "bits" */
/* neuron layer n learns its parameter i */
static inline bool
node_learns(const Node *n, int i)
{
    return i >= 0 && i < 32 && (n->learned >> i & 1u);
}
/* the weight of neuron layer n's learned parameter i, or -1 (not learned) */
int node_param_weight(const Module *m, const Node *n, int i);
/* what a weight is to its layer: the op's slot name ("weight", "bias", ...) or, for a learned
 * neuron parameter, the parameter's name */
const char *weight_slot_name(const Module *m, const Weight *w);
/* trained by an optimiser (a layer's weights, a neuron's learnable parameters), not a state its
 * op updates itself (ops.def "!": batchnorm's running statistics) */
bool weight_is_trained(const Module *m, const Weight *w);
/* the index into Module.weights of the weight Node.wstore applies to, or -1 (not a dense or conv
 * layer) */
int node_stored_weight(const Module *m, const Node *n);
/* The CPU sums layer n event by event, from per-row lists of the inputs that spiked: n is marked
 * (Node.is_events), reads spikes, and is a conv or a dense layer; a narrow one (at most 32
 * outputs, node_is_narrow_dense) walks the spikes of each row in one register tile, and only
 * where its input is stored as bits (over bytes it adds every input in that tile, rows in
 * blocks). The lowering and the schedule decide by it; pack-spikes packs spikes for readers that
 * are marked and node_can_list_events. */
bool node_lists_events(const Module *m, const Node *n);
/* a dense layer of at most 32 outputs (codegen's DENSE_SPIKE_TILE: all of them in one tile) */
bool node_is_narrow_dense(const Node *n);
/* the value v is a view of through flattens (v itself if it is not a flatten): what holds its
 * memory */
ValueId through_flattens(const Module *m, ValueId v);
/* The same without the mark: n would list events if marked (what --events=auto measures). */
bool node_can_list_events(const Module *m, const Node *n);
/* The layer name that prefixes a node's weights ("fc1"): its name attribute. */
const char *node_layer_name(const Module *m, const Node *n);
/* A node's attribute by its ops.def name (the name must exist for the op: a wrong name is a bug). */
int64_t node_attr_i(const Node *n, const char *name, int k);
double node_attr_f(const Node *n, const char *name);
/* The geometry of a conv2d node, as PyTorch's Conv2d: input [C, H, W], output [O, OH, OW], kernel,
 * stride, pad, dilation (each H then W), groups G, and Cg = C / G, Og = O / G per group. */
typedef struct ConvGeom {
    int64_t C, H, W, O, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW, G, Cg, Og;
} ConvGeom;
ConvGeom conv_geom(const Module *m, const Node *n); /* conv1d: a conv2d of height 1 */
/* A training step sums the weight gradient of a conv with fewer weights than this each row's sum
 * first (over the output pixels, in order), then the rows' in order; a larger conv's in one run
 * over rows and pixels. Every backend sums so (interp_grad.c, codegen/lower_grad.c): a few
 * weights summing every row in one run leave a GPU a few hundred threads (the conv net's first
 * layer: 1,152, 9.3 ms of its step on an H200); rows first give it a thread per row and weight. */
enum { CONV_DW_ROWS_FIRST_BELOW = 32768 };
static inline bool
conv_dw_rows_first(const ConvGeom *g)
{
    return g->O * g->Cg * g->KH * g->KW < CONV_DW_ROWS_FIRST_BELOW;
}
static inline bool
op_is_conv(Op op)
{
    return op == OP_CONV2D || op == OP_CONV1D;
}
/* How messages name a node's op: the neuron's name for neuron layers ("LIF"), else the op ("dense"). */
const char *node_op_name(const Module *m, const Node *n);
NExpr *nexpr_new(Arena *a, NxKind kind);

/* infer.c: shapes, dtypes and weight slots; a type annotation on a node is checked against it.
 * Returns false after reporting errors. Fills m->weights (names and shapes, data NULL). */
bool ir_infer(Module *m);

/* verify.c: structural invariants (operands defined, arity, attributes in range, recurrence only
 * through delay, readouts only feeding outputs, neuron programs well formed). Returns false after
 * reporting errors. neuron_analyse fills the derived flags of a NeuronDef. */
bool ir_verify(Module *m);

/* grad.c: reverse mode over the graph IR. A train-step module is a forward module followed by its
 * backward: `grad(x)` nodes (dL/dx in f32, x's shape), one per value the loss's gradient flows
 * through to a weight (or an input), each after the grad nodes of its value's readers, in the
 * order the backward completes them; x's backward step (its operands' and weights' gradients)
 * runs where grad(x) stands, and a `grad_weight` node after it per trained weight of x gives that
 * weight's gradient as a value (f32, the weight's shape: Type.is_weight). ir_grad makes one from a
 * forward module (a copy: m must outlive it; inputs: the inputs' gradients too); module_nforward
 * counts the forward's nodes (the backward's come last: op_is_backward); module_drop_backward
 * leaves the forward; ir_grad_needs sets, over the forward in topo (ir_topo_order's) order,
 * needs_w[v] (v depends on a weight) and needs[v] (v gets a gradient). ir_verify checks the grad
 * nodes' rules. */
Module *ir_grad(const Module *m, bool inputs);
static inline bool
op_is_backward(Op op)
{
    return op == OP_GRAD || op == OP_GRAD_WEIGHT;
}
int module_nforward(const Module *m);
void module_drop_backward(Module *m);
void ir_grad_needs(const Module *m, const ValueId *topo, bool inputs, bool *needs_w, bool *needs);
/* Why value a cannot be computed inside the kernel of b (`fuse a into b`), or NULL when it can:
 * b is a's only user and either a is elementwise (batchnorm, add, sub, mul, scale) and b reads it
 * element by element (a neuron layer or another elementwise op), or a is a neuron layer outside
 * recurrent cycles, in the layer-by-layer schedule, and b is its readout (count, mean, last, max,
 * sequence) or pools its 0/1 spikes in whole, non-overlapping windows of at most 16 (stride =
 * kernel, no padding, sizes divisible). */
const char *ir_fusion_problem(const Module *m, ValueId a, ValueId b);
/* Why value v's spikes cannot be stored as bits (`layout v : bits`), or NULL when they can: v is a
 * 0/1 or -1/0/1 spike value with memory of its own (not a model input or output, not a flatten,
 * which is a view of its operand, not computed inside another kernel) and a multiple of 8 elements
 * per sample (4 for -1/0/1, two bits each), so that a byte never holds two samples' (or two
 * steps') spikes. */
const char *ir_layout_problem(const Module *m, ValueId v);
/* Why dense or conv layer v cannot be summed in the scan that reads it (Node.is_scan_epilogue),
 * or NULL: it must have its own kernel now (not an output, not fused into a batchnorm), and one
 * reader, a neuron layer outside recurrent cycles in the layer-by-layer schedule, or a batchnorm
 * fused into one. */
const char *ir_epilogue_problem(const Module *m, ValueId v);
/* Why value v's output may not be stored narrower (Node.astore), or NULL: only a dense or conv
 * layer's, and not one computed into its batchnorm's buffer (fold-batchnorm). */
const char *ir_activation_problem(const Module *m, ValueId v);
/* marks.c: schedule decisions as one table (fuse, events, epilogue, weights, activations, layout):
 * what the parser reads, the printer writes, the verifier checks, --help-marks lists and
 * module_clear_marks clears. A mark's value on a node: 0 none; MF_NODE 1; MF_INTO the target + 1;
 * MF_TYPE the index of its word (words[0] is the default, 0). */
typedef enum {
    MARK_FUSE, MARK_EVENTS, MARK_EPILOGUE, MARK_WEIGHTS, MARK_ACTIVATIONS, MARK_LAYOUT, MARK_COUNT
} MarkKind;
typedef enum {
    MF_NODE, /* `events a` */
    MF_INTO, /* `fuse a into b` */
    MF_TYPE, /* `weights a : f16` */
} MarkForm;
enum { MARK_TARGET_CPU, MARK_TARGET_GPU }; /* the values of KTarget (codegen/kir.h) */
typedef struct MarkInfo {
    const char *keyword;
    MarkForm form;
    const char *const *words; /* MF_TYPE: the values it takes, NULL-terminated */
    const char *set_by;       /* which pass or option sets it */
    const char *doc;          /* what it means (--help-marks) */
    const char *twice;        /* the message when a model states it twice for a value ('%s') */
    const char *bad_word;     /* MF_TYPE: the message for another word ('%s' value, '%s' word) */
    int (*get)(const Node *n);
    void (*set)(Node *n, int value);
    Loc *(*loc)(Node *n);     /* the statement that gave it (line 0: a pass or option) */
    /* the verifier's check of a marked node: false with the message in msg */
    bool (*check)(const Module *m, ValueId v, char *msg, size_t len);
    /* why a target does not do it, or NULL (NULL function: every target does) */
    const char *(*unhonoured)(const Module *m, ValueId v, int target);
    bool print_stated_default; /* printed at its default when a statement gave it */
} MarkInfo;
const MarkInfo *mark_info(MarkKind k);
int mark_find(const char *keyword, MarkForm form); /* a MarkKind, or -1 */
bool mark_is_printed(const Node *n, MarkKind k);
void module_clear_marks(Module *m);
/* a note (at the mark's statement) for each mark target (MARK_TARGET_*) does not do, only those a
 * statement gave when only_stated; returns how many */
int marks_unhonoured(const Module *m, int target, bool only_stated);
void marks_help(FILE *f); /* --help-marks */
/* Every `fuse` of a typed module can be done (ir_fusion_problem); false after reporting the first
 * that cannot, at its fuse statement. */
bool ir_verify_fusions(const Module *m);
bool neuron_analyse(NeuronDef *nd);
/* Nodes in an order where every operand except delay inputs comes first; returns count (== nnodes) */
int ir_topo_order(const Module *m, ValueId *order);
/* The recurrent regions (strongly connected components through delays, a self-loop included):
 * region[v] a component number, -1 for a node in none; out: every node, operands first (except
 * through a delay inside a region), each region contiguous, within a region topo's order (Tarjan
 * over the condensation). Returns the count. */
int ir_schedule_order(const Module *m, const ValueId *topo, int *region, ValueId *out);
/* whether a delay reads a node at or after itself in order (ir_topo_order's): recurrence */
bool ir_has_recurrence(const Module *m, const ValueId *order);
/* is_static[v]: v is the same at every step (a static input, or stateless per-step layers over static
 * values only), so backends compute it once per sample instead of T times. order: ir_topo_order's. */
void ir_fill_static(const Module *m, const ValueId *order, bool *is_static);

/* print.c: the textual IR. Deterministic and canonical: print(parse(print(m))) == print(m). */
void ir_print(FILE *f, const Module *m);
char *ir_print_to_string(const Module *m);
/* The number the printer gives each value (num[v], m->nnodes entries): its position in the printed
 * order; an anonymous value prints as %N. Kernel and layer names of anonymous values use it too
 * (vN), so --explain and the IR dumps agree. */
void ir_value_numbers(const Module *m, int *num); /* malloc'ed */
void neuron_print(FILE *f, const NeuronDef *nd);
void nexpr_print(FILE *f, const NeuronDef *nd, const NExpr *e);
/* Double formatting used everywhere a number is printed: shortest text that reads back exactly. */
void print_double(char *buf, size_t n, double x);

/* weights.c: bind weight data from a safetensors file (checking names, shapes, dtypes: missing, extra,
 * mis-shaped are errors) or from the seeded PyTorch-default initialisation. */
bool weights_bind(Module *m, const char *override_path);
/* The most a weights file for m is read for (rt_weights_file_limit), why pointing into why. */
struct RtReadLimit;
void weights_read_limit(const Module *m, struct RtReadLimit *lim, char *why, size_t len);
/* round every weight whose layer stores it narrower (Node.wstore) to that type's values; the
 * binders call it, and whoever changes wstore after binding. First, a layer the narrow-weights
 * pass marked (Node.wstore_auto) is stored in f16, else bf16, where every bound value is exact
 * there, else f32. A weight past the narrower type's range (f16's 65504) would become infinite:
 * an error naming it (weights_check_store), false. */
bool weights_round_stored(Module *m);
/* The smallest weight (f32 bytes) the narrow-weights pass marks for lossless 16-bit storage */
enum { NARROW_EXACT_MIN_BYTES = 512 << 10 };
/* How many of w's finite values stored in s would not be (their count; *first the first) */
int64_t weights_overflow(const Weight *w, WeightStore s, int64_t *first);
/* The weight of layer v stored in s keeps every value finite, else an error at v; false */
bool weights_check_store(const Module *m, ValueId v, WeightStore s);
/* the same from tensors in memory (an imported model's); path names them in messages */
struct RtTensorSet;
bool weights_bind_set(Module *m, const struct RtTensorSet *set, const char *path);
/* The module's weights as tensors viewing their data (name and data borrowed, dtype f32), for
 * writers; free the array only. */
struct RtTensor;
struct RtTensor *weights_as_tensors(const Module *m);

/* nexpr.c: the arithmetic of neuron equations, shared by the interpreter and every lowering.
 * is_f32: round like float32 (float functions on float arguments); otherwise double. */
int nexpr_arity(const NExpr *e);
double nexpr_apply_bin(NxBin op, double a, double b, bool is_f32);
double nexpr_apply_call(NFunc f, const double *a, bool is_f32);
/* a parameter-only expression in double (dies on state, input, spike or local references) */
double nexpr_fold(const NExpr *e, const double *params);

/* interp.c: the reference interpreter (the semantic oracle every backend is tested against). */
typedef enum { INTERP_F64, INTERP_F32 } InterpPrecision;
typedef struct InterpRun InterpRun;
typedef struct InterpOptions {
    InterpPrecision precision;
    int64_t seed;            /* -1: the module's seed */
    /* every `fire` gives the surrogate's primitive of its comparison instead of 0 or 1, and a
     * reset to a value mixes as S e + (1 - S) v: a smooth network whose true gradient is the
     * surrogate gradient (the finite-difference checks of interp_grad; f64) */
    bool smooth_spikes;
    /* batchnorm normalises with the batch's own statistics, per channel over every step, sample
     * and position (PyTorch's training mode over SpikingJelly's [T*B, C, ...]; a static value
     * counts T times), and interp_grad updates running_mean and running_var in place (momentum
     * 0.1, the variance unbiased) once per call; the batch is then one pass (all of it in memory)
     */
    bool batch_stats;
} InterpOptions;
/* One batch: inputs[i] holds B samples of input i in the file layout (sample-major: [B, (T,) ...]);
 * outputs[j] receives B samples of output j ([B, ...] or [B, T, ...] for sequence).
 * sample_base is the global index of the batch's first sample (Poisson draws are keyed by it, so results
 * do not depend on the batch size). spike_counts[layer] accumulates spikes per neuron-layer node
 * (indexed by ValueId, length nnodes; may be NULL). Returns false with a message in err on failure. */
bool interp_run(const Module *m, const InterpOptions *opt, int batch, int64_t sample_base,
                const float *const *inputs, float *const *outputs, double *spike_counts, char *err,
                size_t errlen);

/* interp_grad.c: the reference backward pass, surrogate-gradient backpropagation through time:
 * the oracle gradient every training backend is checked against. It runs the forward pass as
 * interp_run does (outputs written the same), keeping every step; after each pass over a group
 * of samples, out_grad(ctx, first, nb, og) fills og[k] with dLoss/d(output k) for samples
 * first..first+nb-1 of the batch (output k's layout, zeroed before the call; their outputs are
 * already written), and the pass runs backwards: reverse time, reverse topological order, each
 * neuron layer differentiated by reverse mode over its own program with `fire` through its
 * surrogate (surrogates.def). input_grads[i] (NULL entries or array: skipped) receives the
 * gradient of input i in its file layout, summed over steps for a static input;
 * weight_grads[w] (one per m->weights, PyTorch's layout) has the batch's gradient ADDED to it.
 * Sums are in double; with INTERP_F32 every value is rounded to float32 as PyTorch's float32
 * autograd rounds it. False with the reason in err (a neuron that cannot be differentiated: no
 * surrogate, a refractory period, -1 spikes). */
typedef void (*InterpOutGradFn)(void *ctx, int64_t first, int nb, float **og);
bool interp_grad(const Module *m, const InterpOptions *opt, int batch, int64_t sample_base,
                 const float *const *inputs, float *const *outputs, InterpOutGradFn out_grad,
                 void *ctx, double *const *input_grads, double *const *weight_grads, char *err,
                 size_t errlen);

#endif
