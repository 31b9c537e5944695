/* The kernel IR: what both code generators print. A program is a set of typed buffers and a schedule of
 * kernels; a kernel is a loop nest whose statements are scalar expressions over buffers and locals.
 * It is lowered once from the (fused) graph IR (codegen/kir_lower.c); the LLVM and CUDA generators and
 * the kernel-IR evaluator (codegen/kir_eval.c, the check that lowering is right) all read this header.
 * Everything lives in the program's arena. Sizes are affine in the run-time batch B: a*B + c. */
#ifndef SNN_KIR_H
#define SNN_KIR_H

#include "ir/ir.h"

/* element types: the rows of runtime/elem_types.def (shared with the runtime's RtElem) */
typedef enum {
#define ELEM(id, name, bytes, bits, value) KT_##id,
#include "runtime/elem_types.def"
#undef ELEM
} KType;
/* the type of a loaded element: f32 for the 16-bit storage types, u8 for bits, i8 for bit pairs,
 * else the type */
static inline KType
ktype_value(KType t)
{
    switch (t) {
#define ELEM(id, name, bytes, bits, value) case KT_##id: return KT_##value;
#include "runtime/elem_types.def"
#undef ELEM
    }
    return t;
}
/* bits per element of a bit-packed storage type (KT_BIT 1, KT_BIT2 2); 0 for every other type */
static inline int
ktype_bits(KType t)
{
    switch (t) {
#define ELEM(id, name, bytes, bits, value) case KT_##id: return bits;
#include "runtime/elem_types.def"
#undef ELEM
    }
    return 0;
}
const char *ktype_name(KType t);
size_t ktype_size(KType t); /* bytes of an element in memory (KT_BIT: 1, a byte of 8: kbytes) */
/* bytes that `elements` elements of type t take (bits: rounded up to whole bytes) */
int64_t kbytes(KType t, int64_t elements);

/* a*B + c: a size or a bound that depends on the batch */
typedef struct KSize {
    int64_t per_batch;
    int64_t fixed;
} KSize;

typedef enum {
    KB_INPUT,  /* caller's input io: sample-major, as files are ([B, ...] or [B, T, ...]) */
    KB_OUTPUT, /* caller's output io: sample-major */
    KB_WEIGHT, /* Module.weights[weight], read-only */
    KB_TEMP,   /* activations and state: lives in the session arena */
} KBufKind;

typedef struct KBuf {
    const char *name;
    KType type;
    KSize size; /* elements */
    KBufKind kind;
    int io;     /* KB_INPUT/KB_OUTPUT: index into Module.inputs / outputs; KB_WEIGHT: weight index */
    ValueId value; /* the graph value it holds, or -1 */
    /* KB_WEIGHT: nperm 0 = the weight as stored; otherwise the buffer holds the weight transposed
     * (NumPy's transpose made contiguous): buffer dims are weight dims[perm[0]], dims[perm[1]], ...
     * (nperm == the weight's rank). split > 0: the weight's first dimension is split into
     * [dims[0] / split][split] first (split divides it), and perm has rank + 1 entries over those
     * dims (runtime/layout.h rt_split_dims). Whoever binds weights packs them (runtime/layout.h).
     */
    int nperm;
    int perm[IR_MAX_RANK + 1];
    int64_t split;
    /* KB_WEIGHT, 16-bit: stored narrower only because every value was exact there (Node.
     * wstore_exact), so weights loaded later must be exact too */
    bool is_exact;
    /* KB_TEMP: every element the run uses is stored before it is loaded, so the binders need not
     * zero it before a run (the kernel IR's temporaries otherwise start at zero) */
    bool is_written_first;
    /* KB_TEMP of a KTARGET_GPU program: a spike-count buffer that keeps totals across runs (each
     * run adds to it); a run starts it at zero like any temporary, but a session zeroes it only
     * when it starts and when its counts are reset, and reads it only when they are asked for */
    bool is_accumulator;
    /* is_accumulator: the most one iteration of a kernel's parallel loop adds to it with KS_COUNT
     * (a neuron's T steps, a pooled window's T*K); the CUDA C counts an iteration in 32 bits where
     * this fits them */
    int64_t count_max;
    /* KB_TEMP: 0, a region of the arena of its own; k > 0, the region it shares with the other
     * buffers of slot k, none of which is in use while it is (the memory plan: kir_lower.c
     * plan_memory; runtime/layout.h rt_arena_layout places the regions) */
    int slot;
    /* slot > 0: the slots it covers from there, laid out one after another (a buffer larger than
     * any one region free for its lifetime: kir_memory.c); 0 or 1: its slot's region alone */
    int span;
} KBuf;

typedef enum {
    KX_CONST,  /* num (in type) */
    KX_BATCH,  /* B, the run-time batch size (i64) */
    KX_STEP,   /* t of the enclosing step loop of the schedule (i64); only in step kernels */
    KX_VAR,    /* var: a loop variable or a local (Kernel.locals[var]) */
    KX_LOAD,   /* buf[a]; op KLOAD_BYTES (a KT_BIT buffer): byte a, elements 8a..8a+7 (element
                * 8a + l in bit l), as u8; op KLOAD_WORD: the 8 bytes from byte a, elements
                * 8a..8a+63 (element 8a + l in bit l), as i64; so a reader skips zeros at once.
                * Of a KT_BIT2 buffer, likewise the byte or 8 bytes from byte a: elements 4a..,
                * element 4a + l in bits 2l and 2l + 1. */
    KX_UN,     /* op a (KUn) */
    KX_BIN,    /* a op b (KBin) */
    KX_SELECT, /* a ? b : c */
    KX_CAST,   /* (type) a; float → float rounds to nearest, float → int truncates */
    KX_UNIFORM, /* Philox uniform float in [0,1): key (seed), counter (stream, a = step, b = index) */
    KX_SAMPLE_BASE, /* the global index of the batch's first sample (i64), a run-time argument like B:
                     * Poisson draws are keyed by global sample index (sample_base + b) * numel + i */
} KxKind;

/* Semantics every reader must keep (the evaluator kir_eval.c is the reference):
 * - f32 operations round to float after every operation (+ - * / sqrt correctly rounded; exp, log,
 *   tanh, pow are the double functions of the float operands rounded once, ir/fmath.h; KU_SIGMOID on
 *   f32 is 1.0f / (1.0f + f32_exp(-x)) in float arithmetic). f64 operations are double (sqrt, exp,
 *   ...).
 * - KB_MIN/KB_MAX propagate NaN like torch.minimum/maximum: isnan(a) || isnan(b) ? NaN :
 *   (a < b ? a : b) for min (a > b ? a : b for max); -0.0 and +0.0 are not ordered (b wins ties).
 * - KB_DIV and KB_REM on i64 are C's truncating / and %; operands are never negative in lowered code
 *   (the CPU backend divides unsigned: a shift and a mask by a power of two).
 * - Comparisons, KB_AND, KB_OR and KU_NOT give KT_BOOL; KB_AND/KB_OR/KU_NOT take bool operands.
 *   KX_CAST from bool gives 0 or 1; to bool means != 0. float → integer truncates toward zero.
 * - KX_SELECT may evaluate both operands (they have no side effects); a load that may be out of
 *   bounds is always guarded by a KS_IF, never by a select.
 * - KX_UNIFORM: rt_uniform(seed, stream, (uint32_t)a, (uint64_t)b) of runtime/philox.h; a and b are
 *   i64, the result f32.
 * - Expression trees may share subtrees: treat every KExpr as immutable. */

enum { KLOAD_ELEMENT, KLOAD_BYTES, KLOAD_WORD }; /* KExpr.op of KX_LOAD */
/* KU_CTZ (trailing zero bits; 64 for 0) and KU_POPCOUNT (one bits) take and give i64;
 * KU_ROUND_F16 and KU_ROUND_BF16 take and give f32: the value a store to a KT_F16 (KT_BF16)
 * buffer would keep, widened back (a layer output stored narrower, kept in a register) */
typedef enum {
#define KUN(id, spelling) KU_##id,
#include "codegen/kir_ops.def"
#undef KUN
} KUn;
/* REM, BITAND, BITOR and SHL: i64 only (BITAND: the bits both operands have; BITOR: the bits
 * either has; SHL: a shifted left by b, 0 <= b < 64) */
typedef enum {
#define KBIN(id, spelling) KB_##id,
#include "codegen/kir_ops.def"
#undef KBIN
} KBin;

typedef struct KExpr KExpr;
struct KExpr {
    KxKind kind;
    KType type; /* result type */
    int op;     /* KUn / KBin */
    int var;    /* KX_VAR */
    int buf;    /* KX_LOAD */
    double num; /* KX_CONST (integers exact up to 2^53) */
    uint64_t seed;
    uint32_t stream; /* KX_UNIFORM */
    KExpr *a, *b, *c;
};

typedef enum {
    KS_FOR, /* for var in [lo, hi): body; is_parallel: iterations are independent (threads/blocks)
             */
    KS_ASSIGN, /* locals[var] = a */
    KS_STORE,  /* buf[index] = a */
    KS_IF,     /* if a: body else els */
    /* Tile statements: var is a tile local (KLocal.lanes = n > 0), l runs over [0, n). */
    KS_VSET,     /* var[l] = a (f64) */
    KS_VLOAD,    /* var[l] = f64(buf[index + l]) (buf f32, f64, f16, bf16, or spikes: u8, i8) */
    KS_VFMA,     /* var[l] = fma(a, f64(buf[index + l]), var[l]) (a f64; buf as KS_VLOAD's);
                  * is_sparse: var is left as it is where a == 0 (spike inputs skip zeros). Where
                  * var is not -0, the element finite and a an integer value, skipping and adding
                  * a zero term give the same bits (acc + 0*w == acc; integer times float is exact,
                  * so no sum rounds to -0 on the way), and a code generator may add it */
    KS_VSTORE,   /* buf[index + l*stride] = (buf type) var[l] (buf f32, f64, f16 or bf16) */
    KS_COUNT,    /* buf[0] += a: an i64 total (a spike count) that parallel iterations add to; the
                  * order of the additions is free (integers), so a GPU thread sums its own in a
                  * register and a block adds its threads' sum once (cuda_gen.c) */
    KS_PREFETCH, /* a hint: buf[index] (in bounds) will be read soon; computes nothing, so a code
                  * generator may ignore it (kir_eval checks the index; the CPU asks for the
                  * cache line; the GPU ignores it) */
} KsKind;

/* Tiles are how dense and convolution layers keep a row of accumulators in registers: a tile is a
 * local of `lanes` values of its type (f64; f32 under `accumulate f32`, where KS_VFMA is fmaf and
 * loads and stores convert to and from float) that only the KS_V* statements read and write,
 * whole (one exception: a KX_VAR of a one-lane tile reads its lane; the GPU lowering sums a layer
 * in the scan that reads it so, and the LLVM generator, which never sees it, refuses it), so a
 * code generator can hold it in vector registers across the loop around them (the
 * lowering picks lane counts and blockings that fit a register file). KS_VFMA rounds once, like
 * C's fma(): where a and the buffer element are both float values (layers: the input and the
 * weight), the product is exact in double and fma(a, w, acc) == acc + a*w, so tiles accumulate
 * exactly as the interpreter's scalar loops do. Every lane's load is in bounds whatever a is. */

typedef struct KStmt KStmt;
struct KStmt {
    KsKind kind;
    int var;
    int buf;
    KExpr *lo, *hi; /* KS_FOR */
    KExpr *index;   /* KS_STORE, KS_VLOAD, KS_VFMA, KS_VSTORE (the first lane's element),
                     * KS_PREFETCH */
    KExpr *a;       /* KS_ASSIGN, KS_STORE value, KS_IF condition (bool), KS_VSET/KS_VFMA (f64) */
    int64_t stride; /* KS_VSTORE: elements between lanes (>= 1) */
    bool is_parallel;
    /* KS_FOR, is_parallel: the iterations are elements (neurons, pooled elements), and neighbouring
     * iterations mostly touch neighbouring memory; a CPU code generator may run several side by
     * side in SIMD lanes. A hint: every kernel is correct either way. */
    bool is_lanes;
    bool is_sparse; /* KS_VFMA */
    int nbody, nels;
    KStmt **body, **els;
};

typedef struct KLocal {
    const char *name;
    KType type;
    int lanes; /* 0: a scalar; > 0: a tile of `lanes` f64 values (type KT_F64), KS_V* only */
} KLocal;

/* what a kernel computes and how (kir_groups.def) */
typedef enum {
#define KGROUP(id, name, fn, what) KG_##id,
#include "codegen/kir_groups.def"
#undef KGROUP
} KGroupKind;
const char *kgroup_name(KGroupKind g);
const char *kgroup_what(KGroupKind g);

typedef struct Kernel {
    const char *name;
    KGroupKind group;     /* its variant (the kernel group it is the code of) */
    const char *what;     /* one line for --explain: which graph nodes it computes and how */
    int nlocals;          /* loop variables are locals too */
    KLocal *locals;
    int nbody;
    KStmt **body;
    bool is_step;         /* runs once per step inside a schedule step loop (reads KX_STEP) */
    /* is_step: a > 0 when its body is one parallel loop over [0, a*B) whose iteration i reads and
     * writes, of every per-sample buffer, only sample i / a's elements (at any step), so that a
     * step loop of such kernels can run each block of samples through all T steps on its own
     * (kir_by_sample); 0 otherwise */
    int64_t sample_iters;
    ValueId *nodes;       /* the graph nodes it computes */
    int nnodes;
} Kernel;

/* Spike statistics: neuron layer `value` (an OP_NEURON node without an output expression, the layers
 * interp_run counts) leaves its spike count of the batch, sum over t of |spike|, in KB_TEMP buffer
 * `buf`. The run functions add the sum of each buffer's elements to spike_counts[value].
 * KTARGET_CPU: one counter per neuron (per pooled window) and sample, u8 or i64 (kir_lower.c
 * spike_count_buffer), stored by the layer's kernel once after its t loop, or at every step in a
 * recurrent region. KTARGET_GPU: one i64 total (KSize {0, 1}), an accumulator
 * (KBuf.is_accumulator) that the layer's kernel adds the batch's count to with KS_COUNT, so a GPU
 * session reads it only when asked. */
typedef struct KStat {
    ValueId value;
    int buf;
} KStat;

/* The schedule: kernels in order; kernels with is_step run in the step loop t = 0..T-1, in order, and
 * consecutive step kernels share one loop (a recurrent region). */
/* What the lowering chooses kernels for: the same graph, the same results, different loop nests
 * (the CPU's register blocks and event lists; one GPU thread per output element). */
typedef enum { KTARGET_CPU, KTARGET_GPU } KTarget;

typedef struct KProgram {
    Arena arena;
    const Module *m;
    KTarget target;
    int timesteps;
    int64_t seed; /* the seed Poisson draws use where a node gives none (m->seed at lowering) */
    KBuf *bufs;
    int nbufs;
    Kernel *kernels;
    int nkernels;
    KStat *stats;
    int nstats;
    /* per graph node: the number the IR printer gives it (ir_value_numbers), so an anonymous value
     * is vN in kernel and layer names where the IR shows %N; NULL: the node's index */
    int *vnum;
    /* a training step: KS_VFMA adds its zero terms even where is_sparse (0 * w, as PyTorch's
     * training computes them and the interpreter's does): a weight may leave the finite range
     * while training, where skipping a zero and adding 0 * w differ (NaN); inference weights
     * are checked finite, so there the two agree and a code generator picks either */
    bool adds_zero_terms;
} KProgram;

/* The name of graph value v in kernel, buffer and layer names: its own, else vN (KProgram.vnum). */
const char *kir_value_name(const KProgram *p, ValueId v, char *buf, size_t n);

/* kir_lower.c: graph IR (verified, typed, weights bound or not) → kernel IR. Returns NULL after reporting
 * an error (none are expected for a verified module). */
KProgram *kir_lower(const Module *m); /* for KTARGET_CPU */
KProgram *kir_lower_for(const Module *m, KTarget target);
void kir_free(KProgram *p);
/* A training step in kernel IR (codegen/lower_grad.c): the forward lowered with every value in a
 * buffer of its own (the module must be in the layer-by-layer schedule, without fusion, event
 * lists, packed spikes or a memory plan: passes "time-batch" alone), then the backward, the
 * temporaries placed by a plan over both (plan_train_memory):
 * kernels [0, nforward) compute the outputs; the caller writes dLoss/d(output k) into buffer
 * out_grad[k] (f32, the output's layout for the batch), and kernels [nforward, nkernels) leave
 * each trained weight's gradient in buffer weight_grad[w] (f32, the weight's own layout; -1: no
 * gradient). The sums run in an order the interpreter's float32 backward (interp_grad) follows,
 * so the two give the same bits. */
typedef struct KTrain {
    int nforward;
    /* has_input_grads (a train module with inputs' grad nodes): input k's gradient in buffer
     * input_grad[k] (f32, the input's layout; -1: none), from kernels [nforward, nkernels); kernels
     * [ninput_first, nkernels) serve only those, so a step that wants none ends before them
     * (without: ninput_first == nkernels, input_grad all -1) */
    bool has_input_grads;
    int ninput_first;
    int *input_grad;
    int *out_grad;
    int *weight_grad;
    /* per node: a batchnorm's batch statistics, [C] each: the mean and 1 / sqrt(var + eps)
     * rounded to float, the biased variance in double (the caller updates the running ones from
     * them: mean and var), or -1 */
    int *bn_mean, *bn_invstd, *bn_var;
} KTrain;
/* The training program of tm, a train-step module (ir_grad: a forward module and its grad
 * nodes), its backward kernels in the grad nodes' order; the inputs' gradients where it has
 * them (KTrain.has_input_grads). NULL with the reason in err (grad_problem's, naming the layer).
 * tm must outlive the program. */
KProgram *kir_lower_train(const Module *tm, KTrain *tr, char *err, size_t errlen);
/* either, for a target: on KTARGET_GPU the layers' forward and backward kernels take the GPU's
 * shapes (a thread per output, sums in the same order: the same bits) */
KProgram *kir_lower_train_for(const Module *tm, KTarget target, KTrain *tr, char *err,
                              size_t errlen);
/* the same check alone: NULL when m can be trained by compiled code, else why (at *where) */
const char *kir_train_problem(const Module *m, ValueId *where);
int64_t ksize_eval(KSize s, int64_t batch);
/* Whether the step loop of kernels [first, end) may run sample by sample (every kernel has
 * sample_iters): each block of samples through all steps in turn, the blocks independent. The CPU
 * code runs it so (a parallel loop over samples instead of one per kernel and step), kir_eval
 * too, from the last sample to the first (any read of another sample's step shows). */
bool kir_by_sample(const KProgram *p, int first, int end);

/* kir_print.c: the textual kernel IR (--emit=kernel), deterministic. */
void kir_print(FILE *f, const KProgram *p);

/* kir_eval.c: run a program on the CPU by walking the IR (slow; the check that lowering is correct).
 * Same calling convention as interp_run: sample-major inputs and outputs, sample_base for Poisson keys,
 * spike_counts (NULL, or m->nnodes entries) accumulating the batch's spikes per counted neuron layer.
 * Weights come from p->m->weights[].data. Returns false with a message on failure. */
bool kir_eval(const KProgram *p, int batch, int64_t sample_base, const float *const *inputs,
              float *const *outputs, double *spike_counts, char *err, size_t errlen);
/* A program's buffers bound for one run of `batch` samples (the layout every executor keeps):
 * inputs and outputs the caller's arrays, weights the module's data (packed where the buffer says:
 * kir_bind_weight), the temporaries in one arena placed by the memory plan, those stored before
 * they are loaded filled with garbage (0xA5 bytes) and the rest zeroed. kir_eval runs on it; the
 * LLVM backend's tests call compiled code on it. */
typedef struct KBinding {
    void **mem;    /* per buffer */
    bool *owned;   /* per buffer: mem is a packed copy this binding frees */
    unsigned char *arena;
    size_t arena_bytes;
    bool arena_borrowed; /* arena is another binding's (kir_bind_sharing) */
    int nbufs;
} KBinding;
/* NULL with a message in err when a caller array is missing, a caller buffer is not f32 or a
 * weight cannot be bound */
KBinding *kir_bind(const KProgram *p, int batch, const float *const *inputs,
                   float *const *outputs, char *err, size_t errlen);
/* kir_bind with p's temporaries in the arena of `host` (another program's binding, which must
 * outlive it) where they fit, in an arena of their own where they do not: for two programs that
 * never run at the same time and never keep temporaries between runs (training's step and its
 * testing, whose runs each start their temporaries afresh) */
KBinding *kir_bind_sharing(const KProgram *p, int batch, const float *const *inputs,
                           float *const *outputs, const KBinding *host, char *err, size_t errlen);
void kir_unbind(KBinding *b);
/* kernels [first, end) of p on a binding already made (kir_eval is kir_bind, all of them, and
 * kir_unbind): what a trainer runs in two halves, its loss gradient written in between */
bool kir_eval_bound(const KProgram *p, KBinding *bd, int batch, int64_t sample_base, int first,
                    int end, double *spike_counts, char *err, size_t errlen);
/* packs again the weights a binding holds packed copies of (after the module's weights changed:
 * an optimiser step); the others are the module's data itself. rt (or NULL): a thread pool's,
 * over which a packed f32 weight whose outermost dimension stays outermost is split. False with a
 * message. */
struct SnnkRt;
bool kir_rebind_weights(const KProgram *p, KBinding *bd, struct SnnkRt *rt, char *err,
                        size_t errlen);
/* zeroes, on a binding made earlier, the temporaries a run of `batch` samples expects to start at
 * zero (those not stored before they are loaded): before each run of a binding used again */
void kir_zero_temps(const KProgram *p, KBinding *bd, int batch);
/* bd's packed weight copies that binding fbd of program from holds alike (the same weight, type,
 * transpose and split) become fbd's, their own freed: two programs over one module's weights
 * (training and its testing) keep one copy. fbd must outlive bd; whoever repacks fbd repacks
 * them. Returns the bytes freed. */
size_t kir_share_weights(const KProgram *p, KBinding *bd, const KProgram *from,
                         const KBinding *fbd);
/* Add the spikes of the program's stats buffers (p->stats; mem[i] the memory of buffer i, of a batch
 * of `batch`) to spike_counts[value]: each buffer summed as integers, then added as a double (exact:
 * counts are integers). Shared by kir_eval and the compiled backends so that they count alike. */
void kir_add_spike_counts(const KProgram *p, int64_t batch, void *const *mem, double *spike_counts);

/* The memory weight buffer b binds to: the module's weight data itself (f32, nperm 0; *packed
 * NULL), or a malloc'ed copy packed by the buffer's transpose and narrowed to its type (f16, bf16:
 * runtime/layout.h rt_narrow16), returned and left in *packed for the caller to free. NULL with a
 * message in err if the weight is unbound or not of the program's size. */
const void *kir_bind_weight(const KProgram *p, int b, void **packed, char *err, size_t errlen);

/* kir_meta.c: the program described for model.so (the text runtime/session.c reads: inputs,
 * outputs, weights, counted layers, every buffer in order); malloc'ed. kir_describe: for the CPU
 * alone ("devices cpu"); kir_describe_with: the devices line given (comma-separated, "cpu,cuda")
 * and `records` (whole lines, "" for none: the CUDA records of runtime/cuda_abi.h) after the
 * buffers. */
char *kir_describe(const KProgram *p);
/* Its `layer` and `buf` records alone, each record name prefixed (the CUDA program's are cuda_layer
 * and cuda_buf: it is lowered for another target, with buffers of its own); malloc'ed. */
char *kir_describe_buffers(const KProgram *p, const char *prefix);
char *kir_describe_with(const KProgram *p, const char *devices, const char *records);
/* the train_* records of a training program (kir_lower_train's p and tr); malloc'ed */
char *kir_describe_train(const KProgram *p, const KTrain *tr);

/* builders (kir.c) */
KExpr *kx_const(KProgram *p, KType t, double v);
KExpr *kx_var(KProgram *p, const Kernel *k, int var);
KExpr *kx_load(KProgram *p, int buf, KExpr *index);
KExpr *kx_un(KProgram *p, KUn op, KExpr *a);
KExpr *kx_bin(KProgram *p, KBin op, KExpr *a, KExpr *b);
KExpr *kx_new(KProgram *p, KxKind kind, KType t);
KExpr *kx_load_bits(KProgram *p, int buf, KExpr *index, int how);
KExpr *kx_select(KProgram *p, KExpr *c, KExpr *a, KExpr *b);
KExpr *kx_cast(KProgram *p, KType t, KExpr *a);
KExpr *kx_kind(KProgram *p, KxKind kind); /* KX_BATCH, KX_STEP, KX_SAMPLE_BASE (i64) */
/* kir_print.c */
const char *kbin_str(KBin op); /* "+", "<=", "min", ... */
const char *kun_str(KUn op);   /* "-", "!", "exp", ... */

#endif
