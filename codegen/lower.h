/* lower.h: the lowering's private interface, shared by kir_lower.c, lower_base.c, lower_layers.c,
 * lower_conv.c, lower_neuron.c and kir_memory.c (as QBE's files share all.h): the lowering state,
 * positions, statement builders (inline) and the functions one lowering file calls in another. */
#ifndef SNN_CODEGEN_LOWER_H
#define SNN_CODEGEN_LOWER_H

#include "codegen/kir.h"

#include <string.h>

typedef enum {
    LY_NONE,        /* no memory: readouts (they write outputs) */
    LY_FULL,        /* KB_TEMP [T][B][numel] */
    LY_STATIC,      /* KB_TEMP [B][numel]: the same at every step */
    LY_INPUT,       /* KB_INPUT [B][numel], static */
    LY_INPUT_STEP,  /* KB_INPUT [B][T][numel] */
    LY_INLINE,      /* no memory: an elementwise value evaluated where it is loaded (fused) */
    LY_SUMMED,      /* no memory: a dense or conv layer summed in the scan that loads it (GPU,
                     * Node.is_scan_epilogue), its statements put at Lower.pre */
} Layout;

typedef struct VStore {
    Layout layout;
    int buf;
    int64_t numel;
    /* LY_FULL [C][H][W] stored window by window for the pooled scan that alone reads it (CPU,
     * kir_lower.c plan_windows): element (ch, h, w) of a row at
     * ((h % win_kh)*win_kw + w % win_kw)*numel/K + (ch*H/win_kh + h/win_kh)*W/win_kw + w/win_kw
     * (K = win_kh*win_kw), so each of the window's K neurons is a contiguous plane; 0: NCHW */
    int win_kh, win_kw;
    /* LY_FULL or LY_STATIC (its gradient's layout) but kept in no buffer (buf -1): vload
     * recomputes it where it is read (a training step's batchnorm: kir_lower.c bn_recomputed) */
    bool is_recomputed;
} VStore;

/* where a statement goes: a growable array of statements (capacity: the next power of two) */
typedef struct Cur {
    KStmt ***arr;
    int *n;
} Cur;

struct Pos;

typedef struct Lower {
    KProgram *p;
    const Module *m;
    Arena scratch;   /* what only the lowering needs (per-node tables, the schedule), freed by
                      * kir_lower_for at its end; the program's own memory is p->arena */
    int T;
    KType acc; /* tiles and the sums they spill to: KT_F64, or KT_F32 under `accumulate f32` */
    VStore *vs;      /* per node */
    bool *is_static; /* per node: ir_fill_static */
    int *region;     /* per node: recurrent component id, or -1 */
    uint32_t *stream;
    Kernel k;        /* the kernel being built */
    ValueId epilogue; /* the batchnorm the layer being lowered computes as it stores, or -1 */
    bool is_epilogue_by_row; /* ... applied to whole rows afterwards (CPU conv: batchnorm_row) */
    Cur pre; /* where a scan's input load puts the sums of a layer summed in it (LY_SUMMED) */
    /* a fused batchnorm's channel terms computed before a scan's t loop (batchnorm_hoist), which
     * batchnorm_expr reads instead of loading them at every step; or NULL */
    const Node *hoisted_bn;
    int hoisted_terms[4];
    int capkernels, caplocals;
    /* how vload computes a value that has no memory where it is read: the one recursion of the
     * lowering (a consumer lowers its fused producer inline), set by kir_lower_for so that
     * lower_base.c depends on no lowering of a layer */
    struct KExpr *(*inline_value)(struct Lower *lw, ValueId v, struct Pos *ps);  /* LY_INLINE */
    struct KExpr *(*summed_value)(struct Lower *lw, ValueId v, struct Pos *ps);  /* LY_SUMMED */
    KTrain *train; /* lowering a training step (kir_lower_train): batchnorm on batch statistics */
} Lower;

/* ---- kernel groups ----
 * One kernel each, planned from the marks before any is lowered (plan_groups in kir_lower.c) and
 * lowered by its variant's function (kir_groups.def). */
typedef struct KGroup {
    KGroupKind kind;
    KGroupKind layer;  /* KG_EPILOGUE: how its dense or conv layer is computed (tiled, events, flat) */
    ValueId root;      /* the value the kernel stores: the layer, the batchnorm of an epilogue, the
                        * pooling of a pooled scan, the readout or output */
    ValueId member;    /* the layer of an epilogue, the scan of a pooled scan or scan+readout; or -1 */
    ValueId summed;    /* a dense or conv layer its scan sums as it loads its input (GPU), or -1 */
    int output;        /* KG_SCAN_READOUT, KG_READOUT, KG_OUTPUT: the output's index; else -1 */
    bool is_step;      /* in a step loop (a recurrent region, or the step schedule) */
} KGroup;

/* ---- addressing values ----
 * A position names one element of a value at one step by whichever of these the kernel has:
 * t (step; NULL in a static kernel), b (sample), i (element), r = t*B + b, j = b*jn + i. Missing
 * ones are derived with / and % (their operands are never negative). */
typedef struct Pos {
    KExpr *t, *b, *i, *r, *j;
    int64_t jn;
    KExpr *ch; /* the element's channel (index along dim 0) where the kernel knows it, or NULL */
} Pos;

/* ---- row contexts of stateless kernels ----
 * batched: for r in 0..T*B parallel (t = r / B, b = r % B); static: for b in 0..B parallel (no t);
 * step: for b in 0..B parallel, t = the schedule's step. */
typedef enum { CTX_BATCHED, CTX_STATIC, CTX_STEP } Ctx;

/* ---- dense and conv2d ----
 * Layers sum in f64 and round to f32 once (ir/interp.c). Their inner loops run over output
 * neurons or channels, which transposed weight buffers (KBuf.perm) hold contiguously, into tiles
 * (kir.h): rows of f64 accumulators that the CPU backend keeps in vector registers, multiplied
 * and added with one rounding (exact: a product of two floats is exact in double).
 *   dense, weight [out][in] -> [in][out], or packed [out/nt][in][nt] where tiles of nt divide out:
 *     real-valued input: a register-blocked GEMM, one parallel loop over (output tile, row block)
 *       pairs; DENSE_MR rows times DENSE_NT outputs accumulate over k (innermost) from the bias,
 *       each weight vector loaded once for the block, the tile's panel packed contiguous (a
 *       transposed panel's rows, a power of two apart, fell into few cache sets). Terms in k
 *       order: the interpreter's sum.
 *     spikes, at most DENSE_SPIKE_TILE outputs: over bits (marked events, packed by pack-spikes),
 *       a row at a time, all outputs in one tile, each set bit's weight row added as the row's
 *       words are scanned; over bytes, the same blocks as real inputs with all outputs in one
 *       tile, every input added (fma_nz: a zero adds 0 * w, which leaves a sum that never holds -0
 *       as it was, so no test and no branch).
 *     spikes, more outputs: event-driven. 0/1 spikes of a batched or static layer are grouped by
 *       input neuron over a block of EVENT_RB rows (every row of T*B, all steps and samples): one
 *       word per input neuron k says which rows of the block spiked on it; then, per tile of
 *       EVENT_NT outputs, k runs over the inputs once and each row that spiked on k adds the same
 *       weight vector W[k][tile] (in L1 since the previous row's add) into its accumulators
 *       (EVENT_RB tiles in L1). A weight row is read once per block instead of once per spike,
 *       and only for the inputs that spiked in the block (listed first). The parallel loop runs
 *       over (chunk of EVENT_CHUNK outputs, row block), chunk outer, so the blocks a thread
 *       takes reuse one chunk's weights from the last-level cache; the weight is packed by
 *       chunk, [O/chunk][K][chunk]. A block of at most EVENT_FEW_RB rows (batch 1: T rows)
 *       goes input by input instead, each spike adding the chunk's whole contiguous weight row
 *       into accumulators in L1: the rows nobody spiked on are skipped whole. Other
 *       spikes (bit pairs, a layer in a step loop): one scan of the input per row, each spike
 *       adding its weight row into the row's accumulators in memory, tile by tile. Terms in k
 *       order either way.
 *   conv2d, weight [out][in/g][kh][kw] -> [in/g][kh][kw][out] (over spikes with one group and
 *     whole tiles: packed [out/nt][in][kh][kw][nt], Conv.packed), output NCHW as before (a tile is
 *     stored channel by channel, OH*OW apart):
 *     real-valued input: per channel tile (outer: its weights stay in cache), per output pixel,
 *       a tile gathers over (c, kh, kw) in the interpreter's order; padding is skipped by bounds
 *       checks, never added. The pixels of a row whose taps all lie inside the input go in
 *       blocks of CONV_NP (2 without AVX-512: lower_wide_vectors), one tile each, sharing every
 *       weight vector load (one pixel alone streams the layer's weights from L2 per pixel).
 *     spikes: per row, the spiking channels of every input pixel (count and list, in channel
 *       order); per output pixel, where all of a group's channels fit one tile (CONV_NT, or
 *       CONV_NT_WIDE with AVX-512), each tap's listed channels summed straight from the list in
 *       (kh, kw, c) order (a bit spike adds its weight row: no multiply); else its terms gathered
 *       from its taps' lists into one list of (weight row, input) pairs, in the same order, over
 *       which every channel tile runs one loop. This is the one reordered sum: spike terms are
 *       weights (times 0/1 or +-1), whose f64 sum is exact, so order-free, unless n terms span
 *       more than about 2^(29 - log2 n) in magnitude; and even then the f32 result changes only
 *       if the last f64 bit moves it across an f32 rounding boundary.
 *   GPU (KG_FLAT): one thread per output element, summed in the interpreter's order, zeros of
 *     spikes skipped; outside a step loop also in register tiles (dense GPU_DENSE_MR rows x
 *     GPU_DENSE_NT outputs, conv GPU_CONV_NP pixels x GPU_CONV_NT channels a thread, the same
 *     order), a second kernel of the layer that runs instead where it has GPU_FILL_THREADS
 *     threads (lower_layers.c, "GPU").
 * Block sizes fit AVX2's sixteen 256-bit registers (4 f64 lanes each): a dense block holds
 * DENSE_MR * DENSE_NT / 4 = 12 accumulators, a weight vector and the broadcast inputs; a conv
 * tile 8 accumulators. */
enum {
    DENSE_MR = 3,          /* real-valued input: rows per register block ... */
    DENSE_MR_WIDE = 6,     /* ... with AVX-512's 32 registers (lower_wide_vectors) */
    SPIKE_MR = 3,          /* spike input: rows per register block */
    DENSE_NT = 16,         /* outputs per dense tile */
    DENSE_SPIKE_TILE = 32, /* most outputs a spike-fed dense layer keeps in one tile */
    SCATTER_NT = 32,       /* lanes per step of the event-driven dense scatter */
    CONV_NT = 32,          /* channels per conv tile */
    CONV_NT_WIDE = 64,     /* ... of a spike-fed conv with AVX-512's 32 registers: 8 chains */
    CONV_NP = 4,           /* real-valued input: output pixels per register block (at most) ... */
    CONV_NP_NT = 16,       /* ... of this many channels each (f64 lanes: two AVX-512 registers;
                            * twice as many with AVX-512: conv_block_lanes) */
    /* GPU (KG_FLAT) tiles: what one thread sums in registers (kir.h tiles of float or double) */
    GPU_DENSE_MR = 4,              /* dense: rows per thread */
    GPU_DENSE_NT = 4,              /* dense: neighbouring outputs per thread */
    GPU_DENSE_TILED_MIN = 32,      /* dense: fewer outputs, one thread per output only */
    GPU_CONV_NP = 4,               /* conv: neighbouring output pixels per thread */
    GPU_CONV_NT = 8,               /* conv: output channels per thread */
    GPU_CONV_TILED_MIN_TERMS = 32, /* conv: fewer terms an output, one thread per output only */
    GPU_FILL_THREADS = 131072, /* tiles run where they have this many threads or more: about what
                                * an H100/H200 holds at once (132 SMs, 768-2048 threads each) */
    EVENT_RB = 64,             /* rows whose spikes are grouped by input neuron (bits of a word) */
    EVENT_NT = 32,             /* outputs per tile of the grouped events (f64 lanes) */
    EVENT_CHUNK = 512,         /* outputs per parallel chunk of the grouped events */
    EVENT_FEW_RB = 8,          /* ... blocks of at most this many rows go input by input */
};

/* body(o0, lanes) for the tiles of [0, n): a loop over the full tiles of nt lanes, then the
 * n % nt left over */
typedef void TileBody(Lower *lw, Cur c, KExpr *o0, int lanes, const void *ctx);

/* The spikes of K elements (a whole number of bytes) of the row of bit-stored value x at ps from
 * element `first` (on a byte, as is the row's first): 64 bits at a time (8 bytes, unaligned), then
 * the row's last bytes one at a time; in each word its set bits, lowest first, each found with a
 * count of trailing zeros and cleared (no branch per bit: a spike train defeats branch prediction;
 * a loop per byte mispredicted its exit often enough to lose to bytes at 21% spikes). Bit pairs
 * (-1/0/1) keep only the low bit of each pair, set for both signs, and halve its position.
 * body(k) runs for element k of the row, a spike (1, or for pairs 1 or -1: body loads it), in
 * element order. */
typedef void SpikeBody(Lower *lw, Cur c, KExpr *k, void *ctx);

typedef struct Conv {
    ValueId v, x;
    ConvGeom d;  /* sizes, kernel, stride, pad, dilation, groups */
    int w, bias; /* weight [Cg][KH][KW][O]; bias or -1 */
    int list, count; /* spike lists: buffers, or -1 */
    int tap_w, tap_x;  /* an output pixel's terms: weight rows, inputs */
    Pos ps;            /* the row */
    Pos ps1;           /* paired rows (flags >= 0): the second row, step t + 1 of ps's sample */
    int flags;         /* paired rows: per listed entry, bit 0 spiked in ps's row, bit 1 in ps1's */
    KExpr *g;          /* group */
    KExpr *oh, *ow, *nterms, *terms; /* the output pixel, its term count and first term */
    KExpr *row_oh;                   /* paired rows' sums: the one output row, else NULL */
    int nt;                          /* spikes: channels per tile */
    int64_t packed; /* > 0: the weight is packed in tiles of this many channels (spikes, G == 1):
                     * [O/nt][Cg][KH][KW][nt] */
} Conv;

/* ---- statement builders ---- */

static inline void
push_stmt(Arena *a, KStmt ***arr, int *n, KStmt *s)
{
    if (*n == 0)
        *arr = arena_alloc(a, 4 * sizeof **arr);
    else if (*n >= 4 && (*n & (*n - 1)) == 0)
        *arr = arena_grow(a, *arr, (size_t)*n * sizeof **arr, (size_t)*n * 2 * sizeof **arr);
    (*arr)[(*n)++] = s;
}

static inline KStmt *
put(Lower *lw, Cur c, KStmt *s)
{
    push_stmt(&lw->p->arena, c.arr, c.n, s);
    return s;
}

static inline Cur
top(Lower *lw)
{
    return (Cur){&lw->k.body, &lw->k.nbody};
}

static inline Cur
body(KStmt *s)
{
    return (Cur){&s->body, &s->nbody};
}

static inline Cur
els(KStmt *s)
{
    return (Cur){&s->els, &s->nels};
}

static inline KStmt *
st_new(Lower *lw, KsKind kind)
{
    KStmt *s = arena_alloc(&lw->p->arena, sizeof *s);
    s->kind = kind;
    s->var = -1;
    s->buf = -1;
    return s;
}

static inline int
local(Lower *lw, const char *name, KType t)
{
    Kernel *k = &lw->k;
    if (k->nlocals == lw->caplocals) {
        int cap = lw->caplocals ? 2 * lw->caplocals : 16;
        k->locals = arena_grow(&lw->p->arena, k->locals, (size_t)lw->caplocals * sizeof *k->locals,
                               (size_t)cap * sizeof *k->locals);
        lw->caplocals = cap;
    }
    k->locals[k->nlocals] = (KLocal){arena_strdup(&lw->p->arena, name), t, 0};
    return k->nlocals++;
}

static inline KExpr *
var(Lower *lw, int v)
{
    return kx_var(lw->p, &lw->k, v);
}

static inline KExpr *
ci(Lower *lw, int64_t v)
{
    return kx_const(lw->p, KT_I64, (double)v);
}

static inline KExpr *
bin(Lower *lw, KBin op, KExpr *a, KExpr *b)
{
    return kx_bin(lw->p, op, a, b);
}

static inline KExpr *
to(Lower *lw, KType t, KExpr *e)
{
    return kx_cast(lw->p, t, e);
}

/* for var in [lo, hi) */
static inline KStmt *
s_for(Lower *lw, Cur c, int v, KExpr *lo, KExpr *hi, bool is_parallel)
{
    KStmt *s = st_new(lw, KS_FOR);
    s->var = v;
    s->lo = lo;
    s->hi = hi;
    s->is_parallel = is_parallel;
    return put(lw, c, s);
}

/* a new loop variable and its loop over [0, hi) */
static inline KStmt *
loop(Lower *lw, Cur c, const char *name, KExpr *hi, bool is_parallel, KExpr **var_out)
{
    int v = local(lw, name, KT_I64);
    *var_out = var(lw, v);
    return s_for(lw, c, v, ci(lw, 0), hi, is_parallel);
}

static inline void
s_assign(Lower *lw, Cur c, int v, KExpr *e)
{
    KStmt *s = st_new(lw, KS_ASSIGN);
    s->var = v;
    s->a = to(lw, lw->k.locals[v].type, e);
    put(lw, c, s);
}

static inline void
s_store(Lower *lw, Cur c, int buf, KExpr *index, KExpr *e)
{
    KStmt *s = st_new(lw, KS_STORE);
    s->buf = buf;
    s->index = index;
    s->a = to(lw, ktype_value(lw->p->bufs[buf].type), e);
    put(lw, c, s);
}

static inline KStmt *
s_if(Lower *lw, Cur c, KExpr *cond)
{
    KStmt *s = st_new(lw, KS_IF);
    s->a = to(lw, KT_BOOL, cond);
    return put(lw, c, s);
}

/* a tile local of `lanes` f64 values */
static inline int
tile(Lower *lw, const char *name, int lanes)
{
    int t = local(lw, name, lw->acc);
    lw->k.locals[t].lanes = lanes;
    return t;
}

/* lower_base.c */
int add_buf(Lower *lw, const char *name, KType t, KSize size, KBufKind kind, int io, ValueId v);
int scratch_buf(Lower *lw, const char *name, KType t, int64_t elems);
int scratch_buf_sized(Lower *lw, const char *name, KType t, KSize size);
const char *value_name(Lower *lw, ValueId v);
void begin_kernel(Lower *lw, ValueId v, const char *what, bool is_step);
void begin_fused_kernel(Lower *lw, ValueId scan, ValueId v, const char *how);
void end_kernel(Lower *lw);
KType ktype_of(DType dt);
KExpr *pos_t(Lower *lw, Pos *ps);
KExpr *pos_b(Lower *lw, Pos *ps);
KExpr *pos_i(Lower *lw, Pos *ps);
KExpr *vindex(Lower *lw, ValueId v, Pos *ps);
KExpr *vload(Lower *lw, ValueId v, Pos *ps);
void vstore(Lower *lw, Cur c, ValueId v, Pos *ps, KExpr *e);
int wbuf(Lower *lw, const Node *n, int slot);
Ctx ctx_of(Lower *lw, ValueId v);
const char *ctx_what(Ctx c);
Cur open_rows(Lower *lw, ValueId v, Pos *ps);
const char *describe(Lower *lw, ValueId v, const char *how);
/* the one node that reads v, as its first operand and nowhere else, or -1 */
ValueId value_only_reader(const Module *m, ValueId v);

/* lower_layers.c */
void kernel_add_node(Lower *lw, ValueId v);
void batchnorm_hoist(Lower *lw, Cur c, ValueId x, const Pos *ps);
void batchnorm_terms(Lower *lw, Cur c, ValueId bn, KExpr *cc);
KExpr *batchnorm_expr(Lower *lw, const Node *n, KExpr *cc, KExpr *x);
KExpr *pointwise_expr(Lower *lw, ValueId v, Pos *ps);
void lower_elementwise(Lower *lw, ValueId v);
bool is_spike_value(Lower *lw, ValueId v);
int tile_lanes(const Lower *lw, int n);
/* whether this host's vector registers are AVX-512's (32 of 512 bits: register blocks may be
 * twice as large) unless SNN_VEC512=0 says not to use them: block sizes only, never what a sum
 * adds or in which order */
int conv_block_lanes(const Lower *lw, int64_t terms);
bool lower_wide_vectors(void);
bool has_bias(const Node *n);
int wbuf_transposed(Lower *lw, const Node *n, int slot, int rank, const int *perm);
KExpr *rows_of(Lower *lw, ValueId v);
Pos row_pos(Lower *lw, ValueId v, KExpr *row, KExpr *i);
KExpr *row_of(const Pos *ps);
KStmt *s_tile(Lower *lw, Cur c, KsKind kind, int t, int buf, KExpr *index, KExpr *a);
void tile_fma(Lower *lw, Cur c, int t, KExpr *a, int w, KExpr *index, bool is_sparse);
void tile_store(Lower *lw, Cur c, ValueId v, Pos *ps, int64_t stride, int t);
void for_tiles(Lower *lw, Cur c, int64_t n, int nt, TileBody *fn, const void *ctx);
void lower_dense(Lower *lw, ValueId v);
void dense_sum(Lower *lw, Cur c, ValueId v, const Pos *row, KExpr *o, int t);
void lower_dense_flat(Lower *lw, ValueId v);
KExpr *gpu_tiles_on(Lower *lw, KExpr *threads);
void gpu_twin_kernel(Lower *lw);
/* the same with the next kernel's name (a kernel's further parts: lower_grad.c's batchnorm) */
void gpu_next_kernel(Lower *lw, const char *name);
int bits_of(Lower *lw, ValueId v);
bool is_bits(Lower *lw, ValueId v);
void for_bit_spikes(Lower *lw, Cur c, ValueId x, const Pos *ps, KExpr *first, int64_t K,
                    SpikeBody *fn, void *ctx);
/* for_bit_spikes over the union of two rows' bits (1 bit an element) at ps and ps1: fn runs once
 * per element that spiked in either, in order, with local flagv = 1 (ps only), 2 (ps1 only) or 3 */
void for_bit_spikes_pair(Lower *lw, Cur c, ValueId x, const Pos *ps, const Pos *ps1, int flagv,
                         KExpr *first, int64_t K, SpikeBody *fn, void *ctx);
void lower_dense_events(Lower *lw, ValueId v);
void lower_pool(Lower *lw, ValueId v);
/* In a training step: max pool u's forward kernel leaves in its input's buffer, for each window,
 * 1 at the window's first maximum and 0 elsewhere (the input being spikes that nothing else
 * reads), and the backward reads that instead of finding the maximum again */
bool pool_masks_input(const Lower *lw, ValueId u);
void lower_batchnorm(Lower *lw, ValueId v);
void lower_poisson(Lower *lw, ValueId v);
void lower_delay(Lower *lw, ValueId v);

/* lower_conv.c */
void lower_conv2d(Lower *lw, ValueId v);
void lower_conv2d_flat(Lower *lw, ValueId v);
KExpr *summed_value(Lower *lw, ValueId v, Pos *ps);
void lower_conv2d_events(Lower *lw, ValueId v);

/* lower_neuron.c */
/* what a neuron program's names are in the kernel */
typedef struct NLower {
    const NeuronDef *nd;
    const Node *node; /* the layer: its learned parameters are loads of their weights */
    const double *params;
    int *state; /* locals */
    int *let;
    int spike, input, out, refr;
} NLower;
/* One copy of a neuron program's locals (a pooled scan keeps one per window element; suffix
 * tells them apart in the kernel IR), the locals that carry from step to step and their initial
 * values: states, lets, spike, refractory counter. */
typedef struct NCopy {
    NLower nl;
    int ncarry;
    int *carry;
    KExpr **init;
    bool has_output;
} NCopy;
void neuron_copy(Lower *lw, const Node *n, const char *suffix, NCopy *cp);
/* NExpr -> f32 (or bool) KExpr with the interpreter's float32 rounding, parameters folded */
KExpr *nexpr(Lower *lw, const NLower *nl, const NExpr *e);
/* e depends on the layer's fixed parameters and numbers only (not a learned parameter) */
bool nexpr_is_fixed(const NLower *nl, const NExpr *e);
/* one step of the neuron program (the interpreter's eval_neuron for one neuron) */
void neuron_step(Lower *lw, Cur c, const NLower *nl);
void lower_neuron_pooled(Lower *lw, ValueId v, ValueId pool);
void lower_neuron(Lower *lw, ValueId v, ValueId ro, int obuf);
int neuron_ncarry(const NeuronDef *nd, bool *has_refractory);
bool is_step_readout(Op op);
void lower_readout(Lower *lw, ValueId v, int obuf);
void lower_sequence(Lower *lw, ValueId x, int obuf, bool has_time);

/* lower_grad.c */
/* Why compiled training cannot run module m yet (an op or neuron it does not differentiate), at
 * node *where; NULL when it can. m: a forward module or a train-step module (its forward checked);
 * the message lives in m's arena */
const char *grad_problem(const Module *m, ValueId *where);
/* the backward kernels of the forward lowered in lw (tm's forward), appended to its program in
 * the order of tm's grad nodes; tr filled */
void lower_grad(Lower *lw, const Module *tm, const ValueId *topo, const ValueId *sched, KTrain *tr);
void lower_batchnorm_batch(Lower *lw, ValueId v);

/* kir_memory.c */
void plan_memory(KProgram *p);
/* the same with lifetimes widened: buffer b from kernel first_at[b] and to kernel last_at[b] at
 * least (-1: as its uses say; either array NULL: none); a buffer no kernel uses keeps memory of
 * its own */
void plan_memory_with(KProgram *p, const int *first_at, const int *last_at);
/* lower_grad.c: the plan of a training program (kir_lower_train), over forward and backward */
void plan_train_memory(KProgram *p, const KTrain *tr);

#endif
