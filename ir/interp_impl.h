/* The reference interpreter's insides, shared by its forward pass (interp.c) and its backward pass
 * (interp_grad.c); nothing outside ir/ includes this. */
#ifndef SNN_IR_INTERP_IMPL_H
#define SNN_IR_INTERP_IMPL_H

#include "ir/ir.h"

/* Samples per pass; a pass holds every node's value for its samples, so this bounds memory. */
enum { INTERP_CHUNK = 64 };

/* A neuron expression compiled for one layer: every subtree over parameters and numbers only is
 * folded into one NX_NUM (evaluated once in double, rounded to float once in F32 mode, like a
 * Python scalar in PyTorch), so what remains are operations on state, input, spike or locals. */
typedef struct CExpr CExpr;
struct CExpr {
    NxKind kind;
    int op, idx, nargs;
    double num;
    const CExpr *args[3];
};

typedef struct NeuronRun {
    const NeuronDef *nd;
    CExpr *pool;           /* the compiled expressions */
    const CExpr **stmt_e;  /* one per statement */
    const CExpr *output_e; /* the (last) output statement's expression, or NULL */
    double *init;          /* initial state values, one per state */
    bool has_output, has_refractory;
    /* per neuron j of the pass ([B][numel] flattened): */
    double *states; /* [j][nstates] */
    double *locals; /* [j][nlocals] */
    double *spike;  /* [j]: 0, +1 or -1 */
    int32_t *refr;  /* [j]: refractory steps left */
    /* Interp.keep_all: what each neuron held before each step t, for the backward pass:
     * [t][j][nstates], [t][j][nlocals], [t][j] */
    double *h_states, *h_locals, *h_spike;
    SurrogateFn sg; /* Interp.smooth: the fire statements' smooth stand-in */
} NeuronRun;

typedef struct NodeRun {
    int64_t numel;
    int hist;    /* steps kept: 1, or steps + 1 when a delay reads this value */
    double *buf; /* [hist][chunk][numel]; step t lives in slot t % hist */
    double *acc; /* count/mean/last/max readouts: [chunk][numel] */
    float *wt;   /* dense: W transposed [in][out]; conv: [C][kh][kw][out/groups] */
    NeuronRun *neuron;
    int input_index;     /* OP_INPUT: position in m->inputs */
    uint32_t stream;     /* OP_POISSON: ordinal among poisson nodes */
    int state_var;       /* OP_STATE: state index (>= 0) or -1 - local index */
    bool is_spike_input; /* dense/conv operand is a spike tensor: zero inputs are skipped (not
                          * under Interp.adds_zero_spikes) */
    double *bn_mean, *bn_invstd, *bn_var; /* Interp.batch_stats: a batchnorm's batch statistics
                                           * per channel */
    bool is_static; /* the same at every step (a static input and stateless ops over such
                     * values): computed at t = 0 only, then carried */
} NodeRun;

typedef struct Interp {
    const Module *m;
    bool is_f32;
    bool is_f32_sums; /* F32 mode of a module that says `accumulate f32` */
    int T;
    int64_t batch, sample_base;
    uint64_t seed;
    const float *const *inputs;
    float *const *outputs;
    int chunk;  /* samples a pass can hold */
    int nb;     /* samples in this pass */
    int64_t b0; /* first sample of this pass in the batch */
    ValueId *order;
    NodeRun *nodes;
    double *scratch; /* dense accumulators of one sample, conv ones of one pixel */
    char *err;
    size_t errlen;
    bool failed;
    /* every node keeps all T steps and every neuron its state before each step (interp_grad's
     * forward pass); otherwise a node keeps the steps its readers need */
    bool keep_all;
    bool smooth;      /* InterpOptions.smooth_spikes */
    bool batch_stats; /* InterpOptions.batch_stats */
    bool one_pass;    /* the whole batch in one pass (interp_grad's float32 order) */
    /* training (interp_grad): a zero spike's terms are added, 0 * w, as PyTorch's training
     * computes them and every compiled training step does (KProgram.adds_zero_terms); only a
     * weight that training left infinite or NaN tells the difference */
    bool adds_zero_spikes;
} Interp;

/* What one neuron sees while its statements run. */
typedef struct NCtx {
    double *st, *lc;
    double input, spike;
    bool is_f32;
} NCtx;

static inline double
ip_rnd(const Interp *ip, double x)
{
    return ip->is_f32 ? (double)(float)x : x;
}

/* The value of node v at step t: [nb][numel] */
static inline double *
ip_val(const Interp *ip, ValueId v, int t)
{
    const NodeRun *r = &ip->nodes[v];
    return r->buf + (size_t)(t % r->hist) * (size_t)ip->chunk * (size_t)r->numel;
}

static inline const Weight *
ip_weight(const Interp *ip, const Node *n, int slot)
{
    return &ip->m->weights[n->first_weight + slot];
}

/* the first failure's message into ip->err; later ones are dropped */
void interp_fail(Interp *ip, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* calloc of n * size bytes with overflow checked; NULL (and ip failed) on failure */
void *interp_alloc(Interp *ip, size_t n, size_t size);
/* Fill ip for a run of m (the fields interp_run sets) */
void interp_init(Interp *ip, const Module *m, const InterpOptions *opt, int batch,
                 int64_t sample_base, const float *const *inputs, float *const *outputs, char *err,
                 size_t errlen);
/* Per-node buffers, transposed weights and neuron programs; false (err set) on failure. */
bool interp_setup(Interp *ip);
void interp_teardown(Interp *ip);
void interp_reset_neuron(const Interp *ip, NodeRun *r);
double interp_ceval(const CExpr *e, const NCtx *c);
void interp_eval_node(Interp *ip, ValueId v, int t, double *spike_counts);
void interp_write_step_outputs(Interp *ip, int t);
void interp_write_final_outputs(Interp *ip);

#endif
