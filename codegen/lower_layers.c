/* Lowering of stateless layers: elementwise values, dense (tiled, flat, event-driven),
 * pooling, batchnorm, Poisson encoders and delays. */
#include "codegen/lower.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- stateless ops ---- */

static Cur open_elements(Lower *lw, ValueId v, Pos *ps, int n, const int64_t *dims,
                         const char *const *names, KExpr **idx);

/* the kernel computes v as well (a value fused into it): --explain lists it */
void
kernel_add_node(Lower *lw, ValueId v)
{
    for (int k = 0; k < lw->k.nnodes; k++)
        if (lw->k.nodes[k] == v) return;
    lw->k.nodes = arena_grow(&lw->p->arena, lw->k.nodes, (size_t)lw->k.nnodes * sizeof *lw->k.nodes,
                             (size_t)(lw->k.nnodes + 1) * sizeof *lw->k.nodes);
    lw->k.nodes[lw->k.nnodes++] = v;
}

/* add, sub, mul, scale of the operands at ps, in f32 */
static KExpr *
elementwise_expr(Lower *lw, const Node *n, Pos *ps)
{
    KExpr *a = to(lw, KT_F32, vload(lw, n->args[0], ps));
    switch (n->op) {
    case OP_ADD: return bin(lw, KB_ADD, a, to(lw, KT_F32, vload(lw, n->args[1], ps)));
    case OP_SUB: return bin(lw, KB_SUB, a, to(lw, KT_F32, vload(lw, n->args[1], ps)));
    case OP_MUL: return bin(lw, KB_MUL, a, to(lw, KT_F32, vload(lw, n->args[1], ps)));
    case OP_SCALE: {
        /* a Python-float factor: rounded to float once; x / k keeps its division */
        float factor = (float)node_attr_f(n, "factor"), divisor = (float)node_attr_f(n, "divisor");
        KExpr *y = factor == 1 ? a : bin(lw, KB_MUL, kx_const(lw->p, KT_F32, factor), a);
        if (divisor != 1)
            y = bin(lw, KB_DIV, y, kx_const(lw->p, KT_F32, divisor));
        return y;
    }
    default: unreachable();
    }
}

/* the channel of element i of batchnorm value bn ([C, ...]: i / (numel / C)) */
static KExpr *
batchnorm_channel(Lower *lw, ValueId bn, KExpr *i)
{
    const Node *n = &lw->m->nodes[bn];
    int64_t C = n->type.rank > 0 ? n->type.dims[0] : 1;
    int64_t inner = C ? lw->vs[bn].numel / C : 0;
    return inner == 1 ? i : bin(lw, KB_DIV, i, ci(lw, inner));
}

/* a training step's batchnorm n (on the batch's statistics, kept in no buffer: kir_lower.c
 * bn_recomputed), or -1 */
static ValueId
batch_stats_bn(const Lower *lw, const Node *n)
{
    ValueId v = (ValueId)(n - lw->m->nodes);
    return lw->train && lw->train->bn_mean[v] >= 0 ? v : -1;
}

/* batchnorm n's terms of channel cc in f64: weight, bias, mean, sqrt(var + eps); in a training
 * step weight, bias, and the batch's mean and invstd as lower_batchnorm_batch stored them */
static void
batchnorm_term_exprs(Lower *lw, const Node *n, KExpr *cc, KExpr *w[4])
{
    ValueId tv = batch_stats_bn(lw, n);
    for (int s = 0; s < 4; s++) {
        int b = tv < 0 || s < 2 ? wbuf(lw, n, s)
                : s == 2        ? lw->train->bn_mean[tv]
                                : lw->train->bn_invstd[tv];
        w[s] = to(lw, KT_F64, kx_load(lw->p, b, cc));
    }
    if (tv < 0)
        w[3] = kx_un(lw->p, KU_SQRT,
                     bin(lw, KB_ADD, w[3], kx_const(lw->p, KT_F64, node_attr_f(n, "eps"))));
}

/* If x, a scan's input, is a batchnorm fused into it: its channel's terms (weight, bias,
 * mean, sqrt(var + eps), in f64) into locals at c, before the scan's t loop, which batchnorm_expr
 * then reads until the next call, instead of loading them for every step (and, in SIMD lanes over
 * several channels, gathering them); the same operations, so the same bits. x anything else:
 * nothing. A pooled scan's window neurons share the channel, and so the terms. */
void
batchnorm_hoist(Lower *lw, Cur c, ValueId x, const Pos *ps)
{
    const Node *n = &lw->m->nodes[x];
    lw->hoisted_bn = NULL;
    if (n->op != OP_BATCHNORM || (lw->vs[x].layout != LY_INLINE && !lw->vs[x].is_recomputed))
        return;
    Pos px = *ps;
    batchnorm_terms(lw, c, x, px.ch ? px.ch : batchnorm_channel(lw, x, pos_i(lw, &px)));
}

/* batchnorm bn's channel cc's terms into locals at c, which batchnorm_expr reads until
 * Lower.hoisted_bn is cleared (batchnorm_hoist; the CPU conv's epilogue, once per channel) */
void
batchnorm_terms(Lower *lw, Cur c, ValueId bn, KExpr *cc)
{
    const Node *n = &lw->m->nodes[bn];
    static const char *const names[4] = {"bn_w", "bn_b", "bn_mean", "bn_sd"};
    KExpr *w[4];
    batchnorm_term_exprs(lw, n, cc, w);
    for (int s = 0; s < 4; s++) {
        lw->hoisted_terms[s] = local(lw, names[s], KT_F64);
        s_assign(lw, c, lw->hoisted_terms[s], w[s]);
    }
    lw->hoisted_bn = n;
}

/* (x - mean) / sqrt(var + eps) * weight + bias of channel cc, in f64, rounded once; in a
 * training step on the batch's statistics, as lower_batchnorm_batch computes its values:
 * xhat = (f32)((x - mean) invstd), then (f32)(xhat weight + bias) */
KExpr *
batchnorm_expr(Lower *lw, const Node *n, KExpr *cc, KExpr *x)
{
    KExpr *w[4];
    if (lw->hoisted_bn == n)
        for (int s = 0; s < 4; s++)
            w[s] = var(lw, lw->hoisted_terms[s]);
    else
        batchnorm_term_exprs(lw, n, cc, w);
    if (batch_stats_bn(lw, n) >= 0) {
        KExpr *xh = to(lw, KT_F32, bin(lw, KB_MUL, bin(lw, KB_SUB, to(lw, KT_F64, x), w[2]), w[3]));
        return to(lw, KT_F32, bin(lw, KB_ADD, bin(lw, KB_MUL, to(lw, KT_F64, xh), w[0]), w[1]));
    }
    KExpr *y =
        bin(lw, KB_ADD,
            bin(lw, KB_MUL, bin(lw, KB_DIV, bin(lw, KB_SUB, to(lw, KT_F64, x), w[2]), w[3]), w[0]),
            w[1]);
    return to(lw, KT_F32, y);
}

/* a fused elementwise value at ps (LY_INLINE), computed where it is loaded */
KExpr *
pointwise_expr(Lower *lw, ValueId v, Pos *ps)
{
    const Node *n = &lw->m->nodes[v];
    kernel_add_node(lw, v);
    if (n->op != OP_BATCHNORM)
        return elementwise_expr(lw, n, ps);
    KExpr *cc = ps->ch ? ps->ch : batchnorm_channel(lw, v, pos_i(lw, ps));
    return batchnorm_expr(lw, n, cc, vload(lw, n->args[0], ps));
}

void
lower_elementwise(Lower *lw, ValueId v)
{
    const Node *n = &lw->m->nodes[v];
    Pos ps;
    KExpr *iv;
    Cur c = open_elements(lw, v, &ps, 1, (const int64_t[]){lw->vs[v].numel},
                          (const char *const[]){"i"}, &iv);
    ps.i = iv;
    vstore(lw, c, v, &ps, elementwise_expr(lw, n, &ps));
}

bool
is_spike_value(Lower *lw, ValueId v)
{
    DType dt = lw->m->nodes[v].type.dtype;
    return dt == DT_SPIKE || dt == DT_I8;
}

/* Layers fed by spikes accumulate event by event, as the interpreter does: each nonzero input adds
 * its weights into an f64 accumulator row (a KB_TEMP buffer, one row per kernel row, so rows stay
 * independent); every output still sums its terms in the same order. Returns the accumulator
 * buffer and sets *row to the row's first element. */
static int
acc_rows(Lower *lw, ValueId v, const Pos *ps, int64_t width, KExpr **row)
{
    bool is_batched = ctx_of(lw, v) == CTX_BATCHED;
    int buf = scratch_buf(lw, arena_printf(&lw->p->arena, "%s.acc", value_name(lw, v)), lw->acc,
                          width * (is_batched ? lw->T : 1));
    *row = bin(lw, KB_MUL, is_batched ? ps->r : ps->b, ci(lw, width));
    return buf;
}

/* lanes per tile: the counts above are for f64; float tiles (accumulate f32) hold twice as many in
 * the same registers */
int
tile_lanes(const Lower *lw, int n)
{
    return lw->acc == KT_F32 ? 2 * n : n;
}

/* the channels of a tile in a block of CONV_NP pixels (a real-valued conv, its backward's dL/dx)
 * whose outputs sum `terms` terms each: CONV_NP_NT, twice that with AVX-512's 32 registers where
 * the terms are many (16 accumulators, each pixel's broadcast serving four multiply-adds: the conv
 * SNN's training c2 0.51 -> 0.43 s and its dL/dx 0.56 -> 0.43 s a 10-batch run; its c1 over the
 * image, 9 terms an output, ran 0.015 -> 0.029 ms at batch 1) */
int
conv_block_lanes(const Lower *lw, int64_t terms)
{
    return tile_lanes(lw, CONV_NP_NT) * (lower_wide_vectors() && terms >= 32 ? 2 : 1);
}

bool
lower_wide_vectors(void)
{
    static int wide = -1; /* the lowering runs on one thread */
    if (wide < 0) {
        const char *env = getenv("SNN_VEC512");
        bool off = env && strcmp(env, "0") == 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        __builtin_cpu_init();
        wide = !off && __builtin_cpu_supports("avx512f");
#else
        (void)off;
        wide = 0;
#endif
    }
    return wide != 0;
}

bool
has_bias(const Node *n)
{
    return (int)node_attr_i(n, "bias", 0) != 0;
}

/* weight slot `slot` of n, held transposed by perm (each weight belongs to one node, so it has
 * one layout) */
int
wbuf_transposed(Lower *lw, const Node *n, int slot, int rank, const int *perm)
{
    int b = wbuf(lw, n, slot);
    KBuf *kb = &lw->p->bufs[b];
    if (lw->m->weights[kb->io].rank != rank)
        die("kir: weight '%s' of rank %d, not %d", kb->name, lw->m->weights[kb->io].rank, rank);
    kb->nperm = rank;
    memcpy(kb->perm, perm, (size_t)rank * sizeof *perm);
    return b;
}

/* weight slot `slot` of dense layer n ([O][K]) in tiles of nt outputs, [O/nt][K][nt] (nt divides
 * O): a tile's weights for consecutive inputs are contiguous, so walking k streams them */
static int
wbuf_tiled(Lower *lw, const Node *n, int slot, int64_t nt)
{
    int b = wbuf_transposed(lw, n, slot, 2, (const int[]){0, 1});
    KBuf *kb = &lw->p->bufs[b];
    kb->nperm = 3;
    memcpy(kb->perm, (const int[]){0, 2, 1}, 3 * sizeof *kb->perm);
    kb->split = nt;
    return b;
}

/* the rows of a stateless kernel (see open_rows) and the position of one */
KExpr *
rows_of(Lower *lw, ValueId v)
{
    KExpr *B = kx_kind(lw->p, KX_BATCH);
    return ctx_of(lw, v) == CTX_BATCHED ? bin(lw, KB_MUL, ci(lw, lw->T), B) : B;
}

Pos
row_pos(Lower *lw, ValueId v, KExpr *row, KExpr *i)
{
    Pos ps;
    memset(&ps, 0, sizeof ps);
    Ctx c = ctx_of(lw, v);
    if (c == CTX_BATCHED) {
        ps.r = row;
    } else {
        ps.b = row;
        if (c == CTX_STEP)
            ps.t = kx_kind(lw->p, KX_STEP);
    }
    ps.i = i;
    return ps;
}

/* the row variable open_rows made */
KExpr *
row_of(const Pos *ps)
{
    return ps->r ? ps->r : ps->b;
}

/* The rows of v and, inside them, loops over the element indices dims[0..n) (outermost first):
 * on the CPU the row loop is parallel and the others nested inside it; on the GPU one parallel
 * loop walks every (row, index...) tuple, a thread per element, the last index fastest. Sets the
 * row position *ps (element unset) and idx[d]; returns where the per-element statements go. */
static Cur
open_elements(Lower *lw, ValueId v, Pos *ps, int n, const int64_t *dims, const char *const *names,
              KExpr **idx)
{
    if (lw->p->target != KTARGET_GPU) {
        Cur c = open_rows(lw, v, ps);
        for (int d = 0; d < n; d++)
            c = body(loop(lw, c, names[d], ci(lw, dims[d]), false, &idx[d]));
        return c;
    }
    int64_t per_row = 1;
    for (int d = 0; d < n; d++)
        per_row *= dims[d];
    KExpr *q;
    Cur c = body(loop(lw, top(lw), "q", bin(lw, KB_MUL, rows_of(lw, v), ci(lw, per_row)), true, &q));
    int64_t inner = 1;
    for (int d = n - 1; d >= 0; d--) {
        int iv = local(lw, names[d], KT_I64);
        KExpr *e = inner == 1 ? q : bin(lw, KB_DIV, q, ci(lw, inner));
        s_assign(lw, c, iv, bin(lw, KB_REM, e, ci(lw, dims[d])));
        idx[d] = var(lw, iv);
        inner *= dims[d];
    }
    int rv = local(lw, "r", KT_I64);
    s_assign(lw, c, rv, bin(lw, KB_DIV, q, ci(lw, per_row)));
    *ps = row_pos(lw, v, var(lw, rv), NULL);
    return c;
}

KStmt *
s_tile(Lower *lw, Cur c, KsKind kind, int t, int buf, KExpr *index, KExpr *a)
{
    KStmt *s = st_new(lw, kind);
    s->var = t;
    s->buf = buf;
    s->index = index;
    s->a = a ? to(lw, lw->k.locals[t].type, a) : NULL;
    s->stride = 1;
    return put(lw, c, s);
}

/* t = +0 + bias[o0 + l], or +0 without a bias: a sum starts at +0, so a -0 bias gives +0 (as
 * PyTorch's x W^T + b does) and no tile ever holds -0, which lets a code generator add the zero
 * terms of a spike tile instead of testing for them (kir.h KS_VFMA) */
static void
tile_init(Lower *lw, Cur c, int t, int bias, KExpr *o0)
{
    s_tile(lw, c, KS_VSET, t, -1, NULL, kx_const(lw->p, KT_F64, 0));
    if (bias >= 0) tile_fma(lw, c, t, kx_const(lw->p, KT_F64, 1), bias, o0, false);
}

/* t += a * w[index + l] */
void
tile_fma(Lower *lw, Cur c, int t, KExpr *a, int w, KExpr *index, bool is_sparse)
{
    s_tile(lw, c, KS_VFMA, t, w, index, a)->is_sparse = is_sparse;
}

/* value v at (row position ps with i = the first lane's element) + l*stride = t */
void
tile_store(Lower *lw, Cur c, ValueId v, Pos *ps, int64_t stride, int t)
{
    KStmt *s = s_tile(lw, c, KS_VSTORE, t, lw->vs[v].buf, vindex(lw, v, ps), NULL);
    s->stride = stride;
    if (lw->epilogue < 0 || lw->is_epilogue_by_row) return;
    /* the batchnorm fused into this layer (fold-batchnorm), applied to each value just stored,
     * read back while it is in cache: a dense layer's lanes are neighbouring outputs (a loop the
     * compiler vectorises), the GPU's tiles one value */
    KExpr *l;
    KStmt *fl = loop(lw, c, "l", ci(lw, lw->k.locals[t].lanes), false, &l);
    Pos pe = *ps;
    pe.i = bin(lw, KB_ADD, ps->i, bin(lw, KB_MUL, l, ci(lw, stride)));
    ValueId bn = lw->epilogue;
    vstore(lw, body(fl), bn, &pe,
           batchnorm_expr(lw, &lw->m->nodes[bn], batchnorm_channel(lw, bn, pe.i),
                          vload(lw, bn, &pe)));
}

void
for_tiles(Lower *lw, Cur c, int64_t n, int nt, TileBody *fn, const void *ctx)
{
    int64_t nfull = n / nt, tail = n % nt;
    if (nfull == 1) {
        fn(lw, c, ci(lw, 0), nt, ctx);
    } else if (nfull > 1) {
        KExpr *ot;
        KStmt *f = loop(lw, c, "ot", ci(lw, nfull), false, &ot);
        fn(lw, body(f), bin(lw, KB_MUL, ot, ci(lw, nt)), nt, ctx);
    }
    if (tail)
        fn(lw, c, ci(lw, nfull * nt), (int)tail, ctx);
}

/* ---- dense ---- */

typedef struct Dense {
    ValueId v, x;
    int64_t K, O;
    int w, bias;    /* weight [K][O]; bias or -1 */
    bool is_sparse; /* x is spikes: zeros are skipped */
    int mr;         /* rows per block */
    KExpr *r0, *R;  /* the block's first row; rows */
    int64_t packed; /* > 0: the weight is packed in tiles of this many outputs, [O/nt][K][nt] */
} Dense;

/* m rows from r0 times the outputs [o0, o0 + lanes): tiles from the bias, k innermost */
static void
dense_micro(Lower *lw, Cur c, const Dense *d, KExpr *r0, int m, KExpr *o0, int lanes)
{
    _Static_assert(SPIKE_MR <= DENSE_MR, "a block's tiles: the most rows of any block");
    int t[GPU_DENSE_MR > DENSE_MR_WIDE ? GPU_DENSE_MR : DENSE_MR_WIDE];
    for (int i = 0; i < m; i++) {
        t[i] = tile(lw, "acc", lanes);
        tile_init(lw, c, t[i], d->bias, o0);
    }
    KExpr *k;
    KStmt *fk = loop(lw, c, "k", ci(lw, d->K), false, &k);
    /* W[k][o0 + l], or packed in tiles W[o0 / nt][k][l], at o0 * K + k * nt (o0 a tile's first) */
    KExpr *wi = d->packed ? bin(lw, KB_ADD, bin(lw, KB_MUL, o0, ci(lw, d->K)),
                                bin(lw, KB_MUL, k, ci(lw, d->packed)))
                          : bin(lw, KB_ADD, bin(lw, KB_MUL, k, ci(lw, d->O)), o0);
    for (int i = 0; i < m; i++) {
        Pos px = row_pos(lw, d->v, bin(lw, KB_ADD, r0, ci(lw, i)), k);
        tile_fma(lw, body(fk), t[i], to(lw, KT_F64, vload(lw, d->x, &px)), d->w, wi,
                 d->is_sparse);
    }
    for (int i = 0; i < m; i++) {
        Pos py = row_pos(lw, d->v, bin(lw, KB_ADD, r0, ci(lw, i)), o0);
        tile_store(lw, c, d->v, &py, 1, t[i]);
    }
}

/* one (output tile, row block): DENSE_MR rows at once, or a short last block row by row */
static void
dense_block(Lower *lw, Cur c, KExpr *o0, int lanes, const void *ctx)
{
    const Dense *d = ctx;
    KStmt *full =
        s_if(lw, c, bin(lw, KB_LE, bin(lw, KB_ADD, d->r0, ci(lw, d->mr)), d->R));
    dense_micro(lw, body(full), d, d->r0, d->mr, o0, lanes);
    int rv = local(lw, "r", KT_I64);
    KStmt *fr = s_for(lw, els(full), rv, d->r0, d->R, false);
    dense_micro(lw, body(fr), d, var(lw, rv), 1, o0, lanes);
}

/* ---- dense over its weight as stored (Module.is_weights_in_place) ----
 * y^T = W x^T with W [O][K] as stored: a first kernel writes x^T [K][R] (f32, the rows of the
 * layer's context); then one parallel loop over (block of outputs, tile of rows): each output's
 * tile runs over neighbouring rows, its weight W[o][k] one broadcast, each x^T vector loaded once
 * for the block's outputs. Every y[r][o] still sums from its bias in k order (the interpreter's
 * bits); a spike's zeros are added (0 * w leaves a sum that never holds -0 as it was). Stored to
 * y with a stride of O. Chosen for weights of at least STORED_MIN_BYTES, where a packed copy
 * would cost memory and a repack after every optimiser step. */
enum {
    STORED_MIN_BYTES = 1 << 22,
    STORED_MO = 4,      /* outputs a block ... */
    STORED_MO_WIDE = 6, /* ... with AVX-512's 32 registers */
};

static bool
dense_as_stored(const Lower *lw, ValueId v)
{
    const Module *m = lw->m;
    const Node *n = &m->nodes[v];
    return m->is_weights_in_place && lw->p->target != KTARGET_GPU && lw->epilogue < 0 &&
           !is_bits((Lower *)lw, n->args[0]) &&
           m->weights[n->first_weight].numel * 4 >= STORED_MIN_BYTES;
}

/* m outputs from o0 times the rows [r0, r0 + lanes): tiles over rows */
static void
dense_stored_block(Lower *lw, Cur c, ValueId v, int w, int bias, int xt, KExpr *o0, int m,
                   KExpr *r0, int lanes)
{
    int64_t K = lw->vs[lw->m->nodes[v].args[0]].numel, O = lw->vs[v].numel;
    int t[STORED_MO_WIDE];
    for (int i = 0; i < m; i++) {
        t[i] = tile(lw, "acc", lanes);
        KExpr *start = kx_const(lw->p, KT_F64, 0);
        if (bias >= 0)
            start = bin(lw, KB_ADD, to(lw, lw->acc, start),
                        to(lw, lw->acc, kx_load(lw->p, bias, bin(lw, KB_ADD, o0, ci(lw, i)))));
        s_tile(lw, c, KS_VSET, t[i], -1, NULL, start);
    }
    KExpr *k;
    KStmt *fk = loop(lw, c, "k", ci(lw, K), false, &k);
    KExpr *xi = bin(lw, KB_ADD, bin(lw, KB_MUL, k, rows_of(lw, v)), r0);
    for (int i = 0; i < m; i++) {
        KExpr *wi = bin(lw, KB_ADD, bin(lw, KB_MUL, bin(lw, KB_ADD, o0, ci(lw, i)), ci(lw, K)), k);
        tile_fma(lw, body(fk), t[i], to(lw, KT_F64, kx_load(lw->p, w, wi)), xt, xi, false);
    }
    for (int i = 0; i < m; i++) {
        Pos py = row_pos(lw, v, r0, bin(lw, KB_ADD, o0, ci(lw, i)));
        tile_store(lw, c, v, &py, O, t[i]);
    }
}

/* the block's outputs over every row: tiles of `lanes` rows, then the rows left one by one */
static void
dense_stored_rows(Lower *lw, Cur c, ValueId v, int w, int bias, int xt, KExpr *o0, int m,
                  KExpr *rt, int lanes)
{
    KExpr *r0 = bin(lw, KB_MUL, rt, ci(lw, lanes)), *R = rows_of(lw, v);
    KStmt *full = s_if(lw, c, bin(lw, KB_LE, bin(lw, KB_ADD, r0, ci(lw, lanes)), R));
    dense_stored_block(lw, body(full), v, w, bias, xt, o0, m, r0, lanes);
    int rv = local(lw, "r", KT_I64);
    KStmt *fr = s_for(lw, els(full), rv, r0, R, false);
    dense_stored_block(lw, body(fr), v, w, bias, xt, o0, m, var(lw, rv), 1);
}

static void
lower_dense_stored(Lower *lw, ValueId v)
{
    const Node *n = &lw->m->nodes[v];
    ValueId x = n->args[0];
    int64_t K = lw->vs[x].numel, O = lw->vs[v].numel;
    bool is_batched = ctx_of(lw, v) == CTX_BATCHED;
    const char *name = value_name(lw, v);
    int xt = scratch_buf_sized(lw, arena_printf(&lw->p->arena, "%s.xt", name), KT_F32,
                               (KSize){K * (is_batched ? lw->T : 1), 0});
    KExpr *R = rows_of(lw, v);
    /* x^T: a thread's inputs k, their rows in order */
    lw->k.name = arena_printf(&lw->p->arena, "transpose_%s", name);
    lw->k.what = arena_printf(&lw->p->arena, "%s's input transposed, [K][rows] in f32, for its "
                              "product over the weight as stored", name);
    KExpr *k, *r;
    KStmt *fk = loop(lw, top(lw), "k", ci(lw, K), true, &k);
    KStmt *fr = loop(lw, body(fk), "r", R, false, &r);
    Pos px = row_pos(lw, v, r, k);
    s_store(lw, body(fr), xt, bin(lw, KB_ADD, bin(lw, KB_MUL, k, R), r),
            to(lw, KT_F32, vload(lw, x, &px)));
    gpu_next_kernel(lw, arena_printf(&lw->p->arena, "dense_%s", name));
    lw->k.what = "dense over its weight as stored, [O][K]: blocks of outputs times tiles of rows "
                 "in parallel, each output from its bias, inputs in order";
    int w = wbuf(lw, n, 0), bias = has_bias(n) ? wbuf(lw, n, 1) : -1;
    bool wide = lower_wide_vectors();
    int mo = wide ? STORED_MO_WIDE : STORED_MO;
    int lanes = tile_lanes(lw, DENSE_NT) * (wide ? 2 : 1);
    int64_t nfull = O / mo, tail = O % mo;
    KExpr *nrt = bin(lw, KB_DIV, bin(lw, KB_ADD, R, ci(lw, lanes - 1)), ci(lw, lanes));
    KExpr *q;
    KStmt *fq = loop(lw, top(lw), "q", bin(lw, KB_MUL, ci(lw, nfull + (tail > 0)), nrt), true, &q);
    Cur c = body(fq);
    int ob = local(lw, "ob", KT_I64), rt = local(lw, "rt", KT_I64);
    s_assign(lw, c, ob, bin(lw, KB_DIV, q, nrt));
    s_assign(lw, c, rt, bin(lw, KB_REM, q, nrt));
    KExpr *o0 = bin(lw, KB_MUL, var(lw, ob), ci(lw, mo));
    if (!tail) {
        dense_stored_rows(lw, c, v, w, bias, xt, o0, mo, var(lw, rt), lanes);
        return;
    }
    KStmt *i = s_if(lw, c, bin(lw, KB_LT, var(lw, ob), ci(lw, nfull)));
    if (nfull) dense_stored_rows(lw, body(i), v, w, bias, xt, o0, mo, var(lw, rt), lanes);
    dense_stored_rows(lw, els(i), v, w, bias, xt, ci(lw, nfull * mo), (int)tail, var(lw, rt),
                      lanes);
}

/* y[r][o] = (f32)(bias[o] + sum_k x[r][k] W[o][k]) with the sum in k order, as the interpreter;
 * one parallel loop over (output tile, row block) pairs, the output tile outer so that a
 * thread's chunk of pairs reuses one panel of weights [K][DENSE_NT] from cache. */
void
lower_dense(Lower *lw, ValueId v)
{
    if (dense_as_stored(lw, v)) {
        lower_dense_stored(lw, v);
        return;
    }
    const Node *n = &lw->m->nodes[v];
    Dense d = {v, n->args[0], lw->vs[n->args[0]].numel, lw->vs[v].numel, 0, -1,
               is_spike_value(lw, n->args[0]), 0, NULL, NULL, 0};
    /* spikes into few outputs: all outputs in one tile (a wide layer over spikes comes here
     * only when not marked events: then tiled like real inputs, zeros still skipped) */
    bool is_one_tile = d.is_sparse && d.O <= DENSE_SPIKE_TILE;
    d.mr = is_one_tile ? SPIKE_MR : lower_wide_vectors() ? DENSE_MR_WIDE : DENSE_MR;
    d.bias = has_bias(n) ? wbuf(lw, n, 1) : -1;
    /* with AVX-512 over real inputs, tiles of twice DENSE_NT: 6 rows x 4 registers, each row's
     * broadcast serving four multiply-adds (the MLP's fc1: 420-438 -> 437-455 GFLOP/s at batch 256,
     * 120 -> 200 at batch 1, its latency 0.0041 -> 0.0027-0.0029 ms) */
    int wide_nt = tile_lanes(lw, DENSE_NT) * (lower_wide_vectors() && !d.is_sparse ? 2 : 1);
    int nt = d.O < wide_nt || is_one_tile ? (int)d.O : wide_nt;
    /* whole tiles: each packed contiguous, [O/nt][K][nt], so a block's k walk streams its panel;
     * transposed [K][O], a panel's rows were O*4 bytes apart, a power of two on most layers, and
     * fell into a few cache sets (fc1 of the MLP: 784 rows 1 KB apart, 10% slower) */
    if (!is_one_tile && nt < d.O && d.O % nt == 0) {
        d.w = wbuf_tiled(lw, n, 0, nt);
        d.packed = nt;
    } else {
        d.w = wbuf_transposed(lw, n, 0, 2, (const int[]){1, 0});
    }
    int64_t nfull = d.O / nt, tail = d.O % nt, ntiles = nfull + (tail > 0);
    d.R = rows_of(lw, v);
    KExpr *nrb = bin(lw, KB_DIV, bin(lw, KB_ADD, d.R, ci(lw, d.mr - 1)), ci(lw, d.mr));
    KExpr *q;
    KStmt *fq = loop(lw, top(lw), "q", bin(lw, KB_MUL, ci(lw, ntiles), nrb), true, &q);
    Cur c = body(fq);
    int ot = local(lw, "ot", KT_I64), r0 = local(lw, "r0", KT_I64);
    s_assign(lw, c, ot, bin(lw, KB_DIV, q, nrb));
    s_assign(lw, c, r0, bin(lw, KB_MUL, bin(lw, KB_REM, q, nrb), ci(lw, d.mr)));
    d.r0 = var(lw, r0);
    KExpr *o0 = bin(lw, KB_MUL, var(lw, ot), ci(lw, nt));
    if (!tail) {
        dense_block(lw, c, o0, nt, &d);
        return;
    }
    KStmt *i = s_if(lw, c, bin(lw, KB_LT, var(lw, ot), ci(lw, nfull)));
    dense_block(lw, body(i), o0, nt, &d);
    dense_block(lw, els(i), ci(lw, nfull * nt), (int)tail, &d);
}

/* output o of dense layer v in the row at *row, into the one-lane tile t: from the bias, summed
 * in k order (the interpreter's), zeros skipped for spikes */
void
dense_sum(Lower *lw, Cur c, ValueId v, const Pos *row, KExpr *o, int t)
{
    const Node *n = &lw->m->nodes[v];
    ValueId x = n->args[0];
    int64_t K = lw->vs[x].numel, O = lw->vs[v].numel;
    int w = wbuf_transposed(lw, n, 0, 2, (const int[]){1, 0});
    tile_init(lw, c, t, has_bias(n) ? wbuf(lw, n, 1) : -1, o);
    KExpr *k;
    KStmt *fk = loop(lw, c, "k", ci(lw, K), false, &k);
    Pos px = *row;
    px.i = k;
    tile_fma(lw, body(fk), t, to(lw, KT_F64, vload(lw, x, &px)), w,
             bin(lw, KB_ADD, bin(lw, KB_MUL, k, ci(lw, O)), o), is_spike_value(lw, x));
}

/* ---- GPU (KG_FLAT): a layer as two kernels, one of which runs ----
 * One thread per output element fills the GPU at any batch; register tiles (a thread summing
 * several rows, pixels or outputs, each weight and input loaded once for all of them) do a third of
 * the loads but have a tenth of the threads or fewer, too few at small batches (H200, trained conv
 * SNN, bench/gpu/ab.sh: the conv2d 128->128 layer at batch 256 13.99 -> 4.93 ms with tiles, batch-1
 * latency of the net 0.54 -> 0.87 ms). So a layer outside a step loop is lowered twice: the tiled
 * kernel's parallel loop runs over its threads where they number GPU_FILL_THREADS or more, else
 * over nothing, and the one-thread-per-output kernel after it over the rest. The runtime skips a
 * kernel whose loop is empty (work 0). Both sum each output's terms in the same order: the same
 * bits. */

/* 1 where the tiled kernel's threads fill the GPU, else 0: (threads >= F) as an integer, which
 * the runtime's work expressions have (runtime/cuda_abi.h). (An arithmetic form, n / F + 2^40
 * over 2^40 + 1, made ptxas spill in the one-thread-per-output conv, 20 bytes a thread.)
 * SNN_GPU_FILL_THREADS (tests, tuning) sets F: 1 runs tiles at every batch. */
KExpr *
gpu_tiles_on(Lower *lw, KExpr *threads)
{
    int64_t fill = GPU_FILL_THREADS;
    const char *env = getenv("SNN_GPU_FILL_THREADS");
    if (env && *env) {
        char *end;
        long long x = strtoll(env, &end, 10);
        if (*end == '\0' && x >= 1 && x <= ((int64_t)1 << 50)) fill = x;
    }
    return to(lw, KT_I64, bin(lw, KB_GE, threads, ci(lw, fill)));
}

/* ends the tiled kernel and begins its one-thread-per-output twin: the same nodes, description
 * and context (the caller ends it) */
void
gpu_twin_kernel(Lower *lw)
{
    gpu_next_kernel(lw, arena_printf(&lw->p->arena, "%s_flat", lw->k.name));
}

void
gpu_next_kernel(Lower *lw, const char *name)
{
    Kernel k = lw->k;
    end_kernel(lw);
    memset(&lw->k, 0, sizeof lw->k);
    lw->caplocals = 0;
    lw->k.name = name;
    lw->k.what = k.what;
    lw->k.is_step = k.is_step;
    lw->k.nodes = arena_alloc(&lw->p->arena, (size_t)k.nnodes * sizeof *lw->k.nodes);
    memcpy(lw->k.nodes, k.nodes, (size_t)k.nnodes * sizeof *k.nodes);
    lw->k.nnodes = k.nnodes;
}

/* a parallel loop over [0, n * on) (on: 0 or 1, or NULL for n) */
static KStmt *
gpu_loop(Lower *lw, KExpr *n, KExpr *on, KExpr **q)
{
    return loop(lw, top(lw), "q", on ? bin(lw, KB_MUL, n, on) : n, true, q);
}

/* GPU: one thread per output element (row, o), a one-lane tile (dense_sum), zeros of spikes
 * skipped (the warp's threads share the row: one test for all). Consecutive threads take
 * consecutive outputs, so their weight loads from W^T [K][O] coalesce and the input row is one
 * broadcast. Runs over [0, R*O * (1 - on)). */
static void
dense_gpu_flat(Lower *lw, ValueId v, KExpr *on)
{
    int64_t O = lw->vs[v].numel;
    KExpr *q;
    KStmt *fq = gpu_loop(lw, bin(lw, KB_MUL, rows_of(lw, v), ci(lw, O)),
                         on ? bin(lw, KB_SUB, ci(lw, 1), on) : NULL, &q);
    Cur c = body(fq);
    int ov = local(lw, "o", KT_I64), rv = local(lw, "r", KT_I64);
    s_assign(lw, c, ov, bin(lw, KB_REM, q, ci(lw, O)));
    s_assign(lw, c, rv, bin(lw, KB_DIV, q, ci(lw, O)));
    KExpr *o = var(lw, ov), *r = var(lw, rv);
    int t = tile(lw, "acc", 1);
    Pos row = row_pos(lw, v, r, NULL);
    dense_sum(lw, c, v, &row, o, t);
    Pos py = row_pos(lw, v, r, o);
    tile_store(lw, c, v, &py, 1, t);
}

/* GPU tiles: a thread per (block of GPU_DENSE_MR rows, tile of GPU_DENSE_NT outputs), the output
 * tile fastest: a warp's threads load neighbouring weights of W^T [K][O] (coalesced) and the same
 * input rows (one broadcast each), and each weight loaded serves every row of the block. Every
 * output summed from its bias in k order; zeros added, not tested for (dense_micro: a sum from +0
 * never holds -0, so 0 * w leaves it as it was), so the block's terms share one weight load (H200:
 * the conv SNN's 6272->2048 layer at batch 256, 3.88 -> 2.48 ms). */
static void
dense_gpu_tiles(Lower *lw, ValueId v)
{
    const Node *n = &lw->m->nodes[v];
    Dense d = {v,
               n->args[0],
               lw->vs[n->args[0]].numel,
               lw->vs[v].numel,
               0,
               -1,
               false,
               GPU_DENSE_MR,
               NULL,
               NULL,
               0};
    d.bias = has_bias(n) ? wbuf(lw, n, 1) : -1;
    d.w = wbuf_transposed(lw, n, 0, 2, (const int[]){1, 0});
    int nt = GPU_DENSE_NT;
    int64_t nfull = d.O / nt, tail = d.O % nt, ntiles = nfull + (tail > 0);
    d.R = rows_of(lw, v);
    KExpr *nrb = bin(lw, KB_DIV, bin(lw, KB_ADD, d.R, ci(lw, d.mr - 1)), ci(lw, d.mr));
    KExpr *threads = bin(lw, KB_MUL, nrb, ci(lw, ntiles));
    KExpr *on = gpu_tiles_on(lw, threads);
    KExpr *q;
    KStmt *fq = gpu_loop(lw, threads, on, &q);
    Cur c = body(fq);
    int ot = local(lw, "ot", KT_I64), r0 = local(lw, "r0", KT_I64);
    s_assign(lw, c, ot, bin(lw, KB_REM, q, ci(lw, ntiles)));
    s_assign(lw, c, r0, bin(lw, KB_MUL, bin(lw, KB_DIV, q, ci(lw, ntiles)), ci(lw, d.mr)));
    d.r0 = var(lw, r0);
    KExpr *o0 = bin(lw, KB_MUL, var(lw, ot), ci(lw, nt));
    if (!tail) {
        dense_block(lw, c, o0, nt, &d);
    } else {
        KStmt *i = s_if(lw, c, bin(lw, KB_LT, var(lw, ot), ci(lw, nfull)));
        dense_block(lw, body(i), o0, nt, &d);
        dense_block(lw, els(i), ci(lw, nfull * nt), (int)tail, &d);
    }
    gpu_twin_kernel(lw);
    dense_gpu_flat(lw, v, on);
}

/* GPU: tiles and their one-thread-per-output twin where tiles can pay (a layer outside a step loop
 * with GPU_DENSE_TILED_MIN outputs or more), else one thread per output */
void
lower_dense_flat(Lower *lw, ValueId v)
{
    if (ctx_of(lw, v) != CTX_STEP && lw->vs[v].numel >= GPU_DENSE_TILED_MIN)
        dense_gpu_tiles(lw, v);
    else
        dense_gpu_flat(lw, v, NULL);
}

typedef struct Scatter {
    int acc, w, bias;
    KExpr *row, *k, *x; /* acc row's first element; k and x (in the event loop) */
    int64_t O;
    /* a bit-pair input (-1/0/1): the value x and its row position, from which scatter_spike
     * loads each listed spike's sign into local xv */
    ValueId xval;
    const Pos *xpos;
    int xv;
} Scatter;

static void
scatter_init(Lower *lw, Cur c, KExpr *o0, int lanes, const void *ctx)
{
    const Scatter *s = ctx;
    int t = tile(lw, "acc", lanes);
    tile_init(lw, c, t, s->bias, o0);
    s_tile(lw, c, KS_VSTORE, t, s->acc, bin(lw, KB_ADD, s->row, o0), NULL);
}

static void
scatter_add(Lower *lw, Cur c, KExpr *o0, int lanes, const void *ctx)
{
    const Scatter *s = ctx;
    int t = tile(lw, "acc", lanes);
    KExpr *ai = bin(lw, KB_ADD, s->row, o0);
    s_tile(lw, c, KS_VLOAD, t, s->acc, ai, NULL);
    tile_fma(lw, c, t, s->x, s->w, bin(lw, KB_ADD, bin(lw, KB_MUL, s->k, ci(lw, s->O)), o0), false);
    s_tile(lw, c, KS_VSTORE, t, s->acc, ai, NULL);
}

/* bits per element of v's storage: 1 (0/1 spikes as bits), 2 (-1/0/1 as bit pairs), 0 (bytes or
 * wider, or no buffer) */
int
bits_of(Lower *lw, ValueId v)
{
    return lw->vs[v].buf >= 0 ? ktype_bits(lw->p->bufs[lw->vs[v].buf].type) : 0;
}

bool
is_bits(Lower *lw, ValueId v)
{
    return bits_of(lw, v) > 0;
}

/* for_bit_spikes, of one row (ps1 NULL) or of the union of two (for_bit_spikes_pair) */
static void
bit_spikes(Lower *lw, Cur c, ValueId x, const Pos *ps, const Pos *ps1, int flagv, KExpr *first,
           int64_t K, SpikeBody *fn, void *ctx)
{
    Pos p0 = *ps;
    p0.i = first;
    int bits = bits_of(lw, x);
    int64_t in_byte = 8 / bits; /* elements in a byte */
    KExpr *byte0 = bin(lw, KB_DIV, vindex(lw, x, &p0), ci(lw, in_byte)), *byte1 = NULL;
    if (ps1) {
        Pos p1 = *ps1;
        p1.i = first;
        byte1 = bin(lw, KB_DIV, vindex(lw, x, &p1), ci(lw, in_byte));
    }
    int wv = local(lw, "bits", KT_I64), nv = local(lw, "nset", KT_I64), lv = local(lw, "l", KT_I64);
    int w0v = ps1 ? local(lw, "bits0", KT_I64) : -1, w1v = ps1 ? local(lw, "bits1", KT_I64) : -1;
    for (int pass = 0; pass < 2; pass++) {
        int64_t per = pass == 0 ? 8 * in_byte : in_byte; /* elements per load */
        int64_t lo = pass == 0 ? 0 : K / (8 * in_byte) * 8, hi = pass == 0 ? K / per : K / in_byte;
        if (lo >= hi) continue;
        KExpr *w, *n;
        KStmt *fw = loop(lw, c, pass == 0 ? "w" : "kb", ci(lw, hi), false, &w);
        fw->lo = ci(lw, lo);
        int how = pass == 0 ? KLOAD_WORD : KLOAD_BYTES;
        KExpr *off = pass == 0 ? bin(lw, KB_MUL, w, ci(lw, 8)) : w;
        KExpr *word =
            to(lw, KT_I64, kx_load_bits(lw->p, lw->vs[x].buf, bin(lw, KB_ADD, byte0, off), how));
        if (bits == 2) /* the low bit of every pair: a spike of either sign (the mask
                        * 0x5555555555555555 as a product: constants are exact to 2^53 only) */
            word = bin(lw, KB_BITAND, word,
                       bin(lw, KB_MUL, ci(lw, 0x55555555), ci(lw, 0x100000001)));
        if (ps1) {
            s_assign(lw, body(fw), w0v, word);
            s_assign(lw, body(fw), w1v,
                     to(lw, KT_I64,
                        kx_load_bits(lw->p, lw->vs[x].buf, bin(lw, KB_ADD, byte1, off), how)));
            word = bin(lw, KB_BITOR, var(lw, w0v), var(lw, w1v));
        }
        s_assign(lw, body(fw), wv, word);
        s_assign(lw, body(fw), nv, kx_un(lw->p, KU_POPCOUNT, var(lw, wv)));
        KStmt *fn_ = loop(lw, body(fw), "n", var(lw, nv), false, &n);
        s_assign(lw, body(fn_), lv, kx_un(lw->p, KU_CTZ, var(lw, wv)));
        if (ps1) { /* (w0 has bit l) + 2 (w1 has it) */
            KExpr *bit = bin(lw, KB_SHL, ci(lw, 1), var(lw, lv));
            KExpr *in0 =
                to(lw, KT_I64, bin(lw, KB_NE, bin(lw, KB_BITAND, var(lw, w0v), bit), ci(lw, 0)));
            KExpr *in1 =
                to(lw, KT_I64, bin(lw, KB_NE, bin(lw, KB_BITAND, var(lw, w1v), bit), ci(lw, 0)));
            s_assign(lw, body(fn_), flagv, bin(lw, KB_ADD, in0, bin(lw, KB_MUL, in1, ci(lw, 2))));
        }
        s_assign(lw, body(fn_), wv,
                 bin(lw, KB_BITAND, var(lw, wv), bin(lw, KB_SUB, var(lw, wv), ci(lw, 1))));
        KExpr *l = bits == 2 ? bin(lw, KB_DIV, var(lw, lv), ci(lw, 2)) : var(lw, lv);
        fn(lw, body(fn_), bin(lw, KB_ADD, bin(lw, KB_MUL, w, ci(lw, per)), l), ctx);
    }
}

void
for_bit_spikes(Lower *lw, Cur c, ValueId x, const Pos *ps, KExpr *first, int64_t K, SpikeBody *fn,
               void *ctx)
{
    bit_spikes(lw, c, x, ps, NULL, -1, first, K, fn, ctx);
}

void
for_bit_spikes_pair(Lower *lw, Cur c, ValueId x, const Pos *ps, const Pos *ps1, int flagv,
                    KExpr *first, int64_t K, SpikeBody *fn, void *ctx)
{
    assert(bits_of(lw, x) == 1);
    bit_spikes(lw, c, x, ps, ps1, flagv, first, K, fn, ctx);
}

static void
scatter_spike(Lower *lw, Cur c, KExpr *k, void *ctx)
{
    Scatter *s = ctx;
    s->k = k;
    if (bits_of(lw, s->xval) == 2) {
        Pos px = *s->xpos;
        px.i = k;
        s_assign(lw, c, s->xv, to(lw, KT_F64, vload(lw, s->xval, &px)));
        s->x = var(lw, s->xv);
    }
    for_tiles(lw, c, s->O, SCATTER_NT, scatter_add, s);
}

/* the grouped events of a block of rows (lower_dense_by_input) */
typedef struct ByInput {
    ValueId v;
    int64_t K, O, nt; /* inputs, outputs, lanes per tile (the accumulator stride of a row) */
    int64_t P, chunk; /* tiled: outputs per packed tile of the weight (the chunk); chunk width */
    int w, bias, masks, acc, list;
    bool is_tiled;    /* w is [O/P][K][P] (wbuf_tiled), else [K][O] */
    KExpr *mb, *ab, *r0, *nr, *chunk0; /* mask, accumulator bases; first row, rows; chunk start */
    int mv, nv, iv; /* locals: the mask, its count, the row in the block */
    int kv, nkv;    /* locals: an input that spiked, how many did (list[mb + j], j < nk) */
} ByInput;

/* SpikeBody: input k spiked in row iv of the block: masks[mb + k] |= 1 << iv */
static void
by_input_mark(Lower *lw, Cur c, KExpr *k, void *ctx)
{
    const ByInput *g = ctx;
    KExpr *at = bin(lw, KB_ADD, g->mb, k);
    s_store(lw, c, g->masks, at,
            bin(lw, KB_BITOR, kx_load(lw->p, g->masks, at),
                bin(lw, KB_SHL, ci(lw, 1), var(lw, g->iv))));
}

/* Rows of the packed weight the walk over the inputs that spiked reaches PREFETCH_ROWS inputs
 * later (the last at the end): a layer at batch 1 reads its weight from memory for a few rows of
 * spikes (f3: 26 MB in f16), and the hardware prefetcher, seeing rows far apart, kept the walk at
 * about half the memory's pace (a replica: 3.0-3.6 -> 2.2-3.1 ms with the rows asked for 32 inputs
 * ahead). One prefetch per 64-byte line of the tile's row, and one for its last element (rows need
 * not start on a line). */
enum { PREFETCH_ROWS = 32 };

/* the element of W[k][o] in the weight packed [O/P][K][P] (o a tile's first output) */
static KExpr *
packed_row(Lower *lw, const ByInput *g, KExpr *o, KExpr *k)
{
    KExpr *at =
        bin(lw, KB_ADD, bin(lw, KB_MUL, bin(lw, KB_DIV, o, ci(lw, g->P)), ci(lw, g->K * g->P)),
            bin(lw, KB_MUL, k, ci(lw, g->P)));
    return bin(lw, KB_ADD, at, bin(lw, KB_REM, o, ci(lw, g->P)));
}

/* W[k][o0 ..] of the chunk's tile at o0 (o: chunk0 + o0) */
static KExpr *
weight_row(Lower *lw, const ByInput *g, KExpr *o, KExpr *k)
{
    return g->is_tiled ? packed_row(lw, g, o, k)
                       : bin(lw, KB_ADD, bin(lw, KB_MUL, k, ci(lw, g->O)), o);
}

static void
prefetch_rows(Lower *lw, Cur c, const ByInput *g, KExpr *o, KExpr *j, int64_t n)
{
    KExpr *jj = bin(lw, KB_MIN, bin(lw, KB_ADD, j, ci(lw, PREFETCH_ROWS)),
                    bin(lw, KB_SUB, var(lw, g->nkv), ci(lw, 1)));
    KExpr *row = packed_row(lw, g, o, kx_load(lw->p, g->list, bin(lw, KB_ADD, g->mb, jj)));
    int64_t per_line = 64 / (int64_t)ktype_size(lw->p->bufs[g->w].type);
    for (int64_t e = 0; e < n + per_line - 1; e += per_line) {
        KStmt *s = st_new(lw, KS_PREFETCH);
        s->buf = g->w;
        s->index = bin(lw, KB_ADD, row, ci(lw, e < n ? e : n - 1));
        put(lw, c, s);
    }
}

/* for each input that spiked in the block, in order (*k), each row of the block whose bit is
 * set (g->iv): the body; the weight rows of the tile at o (npre elements each) asked for
 * PREFETCH_ROWS inputs ahead, where npre > 0 */
static Cur
spiked_rows(Lower *lw, Cur c, const ByInput *g, KExpr *o, int64_t npre, KExpr **k)
{
    KExpr *jk, *j;
    KStmt *fk = loop(lw, c, "jk", var(lw, g->nkv), false, &jk);
    if (npre > 0) prefetch_rows(lw, body(fk), g, o, jk, npre);
    s_assign(lw, body(fk), g->kv, kx_load(lw->p, g->list, bin(lw, KB_ADD, g->mb, jk)));
    *k = var(lw, g->kv);
    s_assign(lw, body(fk), g->mv, kx_load(lw->p, g->masks, bin(lw, KB_ADD, g->mb, *k)));
    s_assign(lw, body(fk), g->nv, kx_un(lw->p, KU_POPCOUNT, var(lw, g->mv)));
    KStmt *fj = loop(lw, body(fk), "j", var(lw, g->nv), false, &j);
    Cur in = body(fj);
    s_assign(lw, in, g->iv, kx_un(lw->p, KU_CTZ, var(lw, g->mv)));
    s_assign(lw, in, g->mv,
             bin(lw, KB_BITAND, var(lw, g->mv), bin(lw, KB_SUB, var(lw, g->mv), ci(lw, 1))));
    return in;
}

/* one tile of outputs [chunk0 + o0, + lanes) of the block: accumulators from the bias; for each
 * input k that spiked, in order, the rows whose bit is set add W[k][tile]; then stored, row by
 * row */
static void
by_input_tile(Lower *lw, Cur c, KExpr *o0, int lanes, const void *ctx)
{
    const ByInput *g = ctx;
    KExpr *o = bin(lw, KB_ADD, g->chunk0, o0), *i;
    int t = tile(lw, "acc", lanes);
    KStmt *fi = loop(lw, c, "i", g->nr, false, &i);
    tile_init(lw, body(fi), t, g->bias, o);
    s_tile(lw, body(fi), KS_VSTORE, t, g->acc,
           bin(lw, KB_ADD, g->ab, bin(lw, KB_MUL, i, ci(lw, g->nt))), NULL);
    KExpr *k;
    Cur in = spiked_rows(lw, c, g, o, g->is_tiled ? lanes : 0, &k);
    KExpr *ai = bin(lw, KB_ADD, g->ab, bin(lw, KB_MUL, var(lw, g->iv), ci(lw, g->nt)));
    s_tile(lw, in, KS_VLOAD, t, g->acc, ai, NULL);
    tile_fma(lw, in, t, kx_const(lw->p, KT_F64, 1), g->w, weight_row(lw, g, o, k), false);
    s_tile(lw, in, KS_VSTORE, t, g->acc, ai, NULL);
    KStmt *fs = loop(lw, c, "i", g->nr, false, &i);
    s_tile(lw, body(fs), KS_VLOAD, t, g->acc,
           bin(lw, KB_ADD, g->ab, bin(lw, KB_MUL, i, ci(lw, g->nt))), NULL);
    Pos py = row_pos(lw, g->v, bin(lw, KB_ADD, g->r0, i), o);
    tile_store(lw, body(fs), g->v, &py, 1, t);
}

/* A block of few rows (batch 1: T rows) spikes on few inputs, and a tile at a time would read a
 * short piece of each one's weight row per tile: pieces too close together for the memory to skip
 * the rows between. So the walk goes input by input instead, each row that spiked adding the
 * chunk's whole contiguous weight row (P outputs: the rows no row spiked on are skipped whole),
 * into accumulators of the chunk's width in L1, the same acc buffer (EVENT_RB * nt values a block
 * = few_rows(g) * chunk). Every output still sums its terms in input order. */
static int64_t
few_rows(const ByInput *g)
{
    int64_t n = EVENT_RB * g->nt / g->chunk;
    return n < EVENT_FEW_RB ? n : EVENT_FEW_RB;
}

typedef enum { FEW_INIT, FEW_ADD, FEW_STORE } FewPhase;

typedef struct FewTile {
    const ByInput *g;
    FewPhase phase;
    KExpr *i, *k; /* the row in the block; the input */
} FewTile;

static void
few_rows_tile(Lower *lw, Cur c, KExpr *o0, int lanes, const void *ctx)
{
    const FewTile *f = ctx;
    const ByInput *g = f->g;
    KExpr *o = bin(lw, KB_ADD, g->chunk0, o0);
    KExpr *ai =
        bin(lw, KB_ADD, g->ab, bin(lw, KB_ADD, bin(lw, KB_MUL, f->i, ci(lw, g->chunk)), o0));
    int t = tile(lw, "acc", lanes);
    if (f->phase == FEW_INIT) {
        tile_init(lw, c, t, g->bias, o);
        s_tile(lw, c, KS_VSTORE, t, g->acc, ai, NULL);
        return;
    }
    s_tile(lw, c, KS_VLOAD, t, g->acc, ai, NULL);
    if (f->phase == FEW_ADD) {
        tile_fma(lw, c, t, kx_const(lw->p, KT_F64, 1), g->w, weight_row(lw, g, o, f->k), false);
        s_tile(lw, c, KS_VSTORE, t, g->acc, ai, NULL);
        return;
    }
    Pos py = row_pos(lw, g->v, bin(lw, KB_ADD, g->r0, f->i), o);
    tile_store(lw, c, g->v, &py, 1, t);
}

/* the block's rows over the chunk of width cw, input by input (few_rows) */
static void
few_rows_chunk(Lower *lw, Cur c, const ByInput *g, int64_t cw)
{
    KExpr *i;
    int nt = (int)(g->nt < cw ? g->nt : cw);
    FewTile f = {g, FEW_INIT, NULL, NULL};
    KStmt *fi = loop(lw, c, "i", g->nr, false, &i);
    f.i = i;
    for_tiles(lw, body(fi), cw, nt, few_rows_tile, &f);
    Cur in = spiked_rows(lw, c, g, g->chunk0, g->is_tiled && g->P == g->chunk ? cw : 0, &f.k);
    f.phase = FEW_ADD;
    f.i = var(lw, g->iv);
    for_tiles(lw, in, cw, nt, few_rows_tile, &f);
    KStmt *fs = loop(lw, c, "i", g->nr, false, &i);
    f.phase = FEW_STORE;
    f.i = i;
    for_tiles(lw, body(fs), cw, nt, few_rows_tile, &f);
}

/* the chunk's tiles (the last chunk may be shorter): input by input where the block has few
 * rows, else tile by tile */
static void
by_input_chunk(Lower *lw, Cur c, ByInput *g, int64_t cw)
{
    Cur tiles = c;
    if (few_rows(g) > 0) {
        KStmt *is_few = s_if(lw, c, bin(lw, KB_LE, g->nr, ci(lw, few_rows(g))));
        few_rows_chunk(lw, body(is_few), g, cw);
        tiles = els(is_few);
    }
    for_tiles(lw, tiles, cw, (int)(g->nt < cw ? g->nt : cw), by_input_tile, g);
}

/* dense over 0/1 spikes, grouped by input neuron over blocks of EVENT_RB rows (lower.h) */
static void
lower_dense_by_input(Lower *lw, ValueId v, int bias)
{
    const Node *n = &lw->m->nodes[v];
    ValueId x = n->args[0];
    int64_t O = lw->vs[v].numel, nt = tile_lanes(lw, EVENT_NT);
    int64_t chunk = O <= EVENT_CHUNK ? O : EVENT_CHUNK, nc = (O + chunk - 1) / chunk;
    /* packed by chunk where the chunks are whole (a chunk's weight row contiguous: few_rows),
     * else by tile */
    int64_t P = O % chunk == 0 && chunk % nt == 0 ? chunk : nt;
    bool is_tiled = O % P == 0;
    int w = is_tiled ? wbuf_tiled(lw, n, 0, P) : wbuf_transposed(lw, n, 0, 2, (const int[]){1, 0});
    ByInput g = {.v = v,
                 .K = lw->vs[x].numel,
                 .O = O,
                 .nt = nt,
                 .P = P,
                 .chunk = chunk,
                 .w = w,
                 .bias = bias,
                 .masks = -1,
                 .acc = -1,
                 .list = -1,
                 .is_tiled = is_tiled,
                 .mv = local(lw, "m", KT_I64),
                 .nv = local(lw, "nset", KT_I64),
                 .iv = local(lw, "i", KT_I64),
                 .kv = local(lw, "k", KT_I64),
                 .nkv = local(lw, "nk", KT_I64)};
    /* the blocks of a batch of B: at most per_row * B / EVENT_RB + 1 */
    int64_t per_row = ctx_of(lw, v) == CTX_BATCHED ? lw->T : 1;
    const char *vn = value_name(lw, v);
    int64_t mask_words = nc * g.K, acc_elems = nc * EVENT_RB * g.nt;
    KSize mask_size = {(mask_words * per_row + EVENT_RB - 1) / EVENT_RB, mask_words};
    g.masks = scratch_buf_sized(lw, arena_printf(&lw->p->arena, "%s.by_input", vn), KT_I64,
                                mask_size);
    g.list = scratch_buf_sized(lw, arena_printf(&lw->p->arena, "%s.inputs", vn), KT_I64, mask_size);
    g.acc = scratch_buf_sized(lw, arena_printf(&lw->p->arena, "%s.acc", vn), lw->acc,
                              (KSize){(acc_elems * per_row + EVENT_RB - 1) / EVENT_RB, acc_elems});
    KExpr *R = rows_of(lw, v);
    KExpr *nrb = bin(lw, KB_DIV, bin(lw, KB_ADD, R, ci(lw, EVENT_RB - 1)), ci(lw, EVENT_RB));
    KExpr *q, *k, *i;
    KStmt *fq = loop(lw, top(lw), "q", bin(lw, KB_MUL, ci(lw, nc), nrb), true, &q);
    Cur c = body(fq);
    int ocv = local(lw, "oc", KT_I64), r0v = local(lw, "r0", KT_I64), nrv = local(lw, "nr", KT_I64);
    s_assign(lw, c, ocv, bin(lw, KB_DIV, q, nrb));
    s_assign(lw, c, r0v, bin(lw, KB_MUL, bin(lw, KB_REM, q, nrb), ci(lw, EVENT_RB)));
    s_assign(lw, c, nrv, bin(lw, KB_MIN, ci(lw, EVENT_RB), bin(lw, KB_SUB, R, var(lw, r0v))));
    g.r0 = var(lw, r0v);
    g.nr = var(lw, nrv);
    g.mb = bin(lw, KB_MUL, q, ci(lw, g.K));
    g.ab = bin(lw, KB_MUL, q, ci(lw, EVENT_RB * g.nt));
    /* which rows of the block spiked on each input */
    KStmt *fz = loop(lw, c, "k", ci(lw, g.K), false, &k);
    s_store(lw, body(fz), g.masks, bin(lw, KB_ADD, g.mb, k), ci(lw, 0));
    KStmt *fi = loop(lw, c, "i", g.nr, false, &i);
    s_assign(lw, body(fi), g.iv, i);
    Pos ps = row_pos(lw, v, bin(lw, KB_ADD, g.r0, i), NULL);
    if (is_bits(lw, x)) {
        for_bit_spikes(lw, body(fi), x, &ps, ci(lw, 0), g.K, by_input_mark, &g);
    } else {
        KStmt *fk = loop(lw, body(fi), "k", ci(lw, g.K), false, &k);
        Pos px = ps;
        px.i = k;
        KStmt *nz = s_if(lw, body(fk), bin(lw, KB_NE, to(lw, KT_F64, vload(lw, x, &px)),
                                           kx_const(lw->p, KT_F64, 0)));
        by_input_mark(lw, body(nz), k, &g);
    }
    /* the inputs that spiked in some row of the block, in order (stored at every input, counted
     * where its mask is set: no branch; the tiles then skip the others and their weight rows) */
    s_assign(lw, c, g.nkv, ci(lw, 0));
    KStmt *fl = loop(lw, c, "k", ci(lw, g.K), false, &k);
    s_store(lw, body(fl), g.list, bin(lw, KB_ADD, g.mb, var(lw, g.nkv)), k);
    s_assign(lw, body(fl), g.nkv,
             bin(lw, KB_ADD, var(lw, g.nkv),
                 to(lw, KT_I64,
                    bin(lw, KB_NE, kx_load(lw->p, g.masks, bin(lw, KB_ADD, g.mb, k)), ci(lw, 0)))));
    /* the chunk's tiles (the last chunk may be shorter) */
    g.chunk0 = bin(lw, KB_MUL, var(lw, ocv), ci(lw, chunk));
    if (g.O % chunk == 0) {
        by_input_chunk(lw, c, &g, chunk);
        return;
    }
    KStmt *full = s_if(lw, c, bin(lw, KB_LT, var(lw, ocv), ci(lw, nc - 1)));
    by_input_chunk(lw, body(full), &g, chunk);
    by_input_chunk(lw, els(full), &g, g.O - (nc - 1) * chunk);
}

/* a narrow layer's row: one register tile of all its outputs */
typedef struct RowTile {
    int t, w; /* the tile; the weight [K][O] */
    int64_t O;
    ValueId x;     /* the input, bits or bit pairs */
    const Pos *px; /* the row */
    int xv;        /* a bit pair's value */
} RowTile;

/* spike k of the row: its weight row into the tile (a bit is 1; a pair's value is loaded) */
static void
row_tile_spike(Lower *lw, Cur c, KExpr *k, void *ctx)
{
    const RowTile *r = ctx;
    KExpr *a = kx_const(lw->p, KT_F64, 1);
    if (bits_of(lw, r->x) == 2) {
        Pos px = *r->px;
        px.i = k;
        s_assign(lw, c, r->xv, to(lw, KT_F64, vload(lw, r->x, &px)));
        a = var(lw, r->xv);
    }
    tile_fma(lw, c, r->t, a, r->w, bin(lw, KB_MUL, k, ci(lw, r->O)), false);
}

/* A dense layer of at most DENSE_SPIKE_TILE outputs over bit-packed spikes: per row, all its
 * outputs in one register tile from the bias, the weight row of each spike added in input order
 * as the row's words are scanned (64 inputs a load, a count of trailing zeros per spike). Over
 * bytes, the dense tile tests nothing and adds every input (kir.h KS_VFMA); over bits, reading
 * every input would extract each bit (measured 1.5x slower than bytes on the MLP's fc2), so
 * only the spikes are visited: at the MLP's 20% a fifth of the adds. */
static void
lower_dense_row_tile(Lower *lw, ValueId v, int bias)
{
    const Node *n = &lw->m->nodes[v];
    ValueId x = n->args[0];
    int64_t K = lw->vs[x].numel, O = lw->vs[v].numel;
    Pos ps;
    Cur c = open_rows(lw, v, &ps);
    RowTile r = {tile(lw, "acc", (int)O),
                 wbuf_transposed(lw, n, 0, 2, (const int[]){1, 0}),
                 O,
                 x,
                 &ps,
                 bits_of(lw, x) == 2 ? local(lw, "x", KT_F64) : -1};
    tile_init(lw, c, r.t, bias, ci(lw, 0));
    for_bit_spikes(lw, c, x, &ps, ci(lw, 0), K, row_tile_spike, &r);
    Pos py = ps;
    py.i = ci(lw, 0);
    tile_store(lw, c, v, &py, 1, r.t);
}

/* dense over spikes: acc[o] = bias[o], then for each k with x[k] != 0, acc[o] += x[k] W[o][k] */
void
lower_dense_events(Lower *lw, ValueId v)
{
    const Node *n = &lw->m->nodes[v];
    ValueId x = n->args[0];
    int64_t K = lw->vs[x].numel, O = lw->vs[v].numel;
    int bias = has_bias(n) ? wbuf(lw, n, 1) : -1;
    if (node_is_narrow_dense(n)) { /* over bits (node_lists_events): a tile a row */
        lower_dense_row_tile(lw, v, bias);
        return;
    }
    if (ctx_of(lw, v) != CTX_STEP && bits_of(lw, x) != 2 &&
        lw->m->nodes[x].type.dtype == DT_SPIKE) {
        lower_dense_by_input(lw, v, bias);
        return;
    }
    int w = wbuf_transposed(lw, n, 0, 2, (const int[]){1, 0});
    Pos ps;
    Cur c = open_rows(lw, v, &ps);
    KExpr *k;
    int xv = local(lw, "x", KT_F64);
    KExpr *row;
    Scatter s = {acc_rows(lw, v, &ps, O, &row), w, bias, row, NULL, NULL, O, x, &ps, xv};
    for_tiles(lw, c, O, SCATTER_NT, scatter_init, &s);
    if (is_bits(lw, x)) {
        s.x = kx_const(lw->p, KT_F64, 1);
        for_bit_spikes(lw, c, x, &ps, ci(lw, 0), K, scatter_spike, &s);
    } else {
        KStmt *fk = loop(lw, c, "k", ci(lw, K), false, &k);
        Pos px = ps;
        px.i = k;
        s_assign(lw, body(fk), xv, to(lw, KT_F64, vload(lw, x, &px)));
        KStmt *nz = s_if(lw, body(fk), bin(lw, KB_NE, var(lw, xv), kx_const(lw->p, KT_F64, 0)));
        s.k = k;
        s.x = var(lw, xv);
        for_tiles(lw, body(nz), O, SCATTER_NT, scatter_add, &s);
    }
    KExpr *o;
    KStmt *fo = loop(lw, c, "o", ci(lw, O), false, &o);
    Pos py = ps;
    py.i = o;
    KExpr *y = kx_load(lw->p, s.acc, bin(lw, KB_ADD, row, o));
    if (lw->epilogue >= 0) /* fold-batchnorm: on the value as the layer would store it */
        y = batchnorm_expr(lw, &lw->m->nodes[lw->epilogue], o, to(lw, KT_F32, y));
    vstore(lw, body(fo), v, &py, y);
}

/* A training step's max pool over spikes (bytes) whose windows tile them, the pool their only
 * reader and nothing recurrent: the pool's kernel overwrites each window of its input with 1 at
 * the window's first maximum and 0 elsewhere (pool_max_marking), so that the backward
 * (lower_grad.c pool_grad_inline) tests one byte, its own, instead of loading the window's (a
 * byte gather x86 does one byte at a time). The mask's first maximum is the same element, so
 * every reader of the input after the pool (its backward, inline or its own kernel) finds the
 * same window maximum as in the spikes. */
bool
pool_masks_input(const Lower *lw, ValueId u)
{
    const Module *m = lw->m;
    const Node *n = &m->nodes[u];
    if (!lw->train || n->op != OP_MAXPOOL2D) return false;
    ValueId x = n->args[0];
    const Node *xn = &m->nodes[x];
    if (xn->op != OP_NEURON || xn->is_output || lw->region[x] >= 0 || xn->type.rank != 3 ||
        lw->vs[x].layout != LY_FULL || lw->vs[u].layout != LY_FULL || lw->vs[x].buf < 0 ||
        lw->p->bufs[lw->vs[x].buf].type != KT_U8)
        return false;
    for (int d = 0; d < 2; d++) { /* windows that tile the input: each element in exactly one */
        int64_t k = node_attr_i(n, "kernel", d), st = node_attr_i(n, "stride", d);
        if (k < 1 || (st != 0 && st != k) || node_attr_i(n, "pad", d) != 0 ||
            n->type.dims[1 + d] * k != xn->type.dims[1 + d])
            return false;
    }
    return node_attr_i(n, "kernel", 0) * node_attr_i(n, "kernel", 1) <= 16 &&
           value_only_reader(m, x) == u;
}

/* A training step's max pool whose input's windows it marks (pool_masks_input): per window (its
 * elements all inside, the windows tiling the input) the first maximum as the backward finds it
 * (the first x > best, or the first NaN), then 1 there and 0 at the window's other elements, in
 * place, and the maximum, which for spikes (bytes, never NaN) is the value the max loop finds */
static void
pool_max_marking(Lower *lw, ValueId v, Cur c, const Pos *ps, KExpr *cc, KExpr *oh, KExpr *ow)
{
    const Node *n = &lw->m->nodes[v];
    ValueId x = n->args[0];
    const Type *xt = &lw->m->nodes[x].type;
    int64_t H = xt->dims[1], W = xt->dims[2], OH = n->type.dims[1], OW = n->type.dims[2];
    int64_t KH = H / OH, KW = W / OW;
    int best = local(lw, "best", KT_F32), arg = local(lw, "arg", KT_I64),
        xv = local(lw, "x", KT_F32);
    Pos pw[16];
    for (int64_t k = 0; k < KH * KW; k++) { /* at most 16 (pool_masks_input) */
        pw[k] = *ps;
        KExpr *ih = bin(lw, KB_ADD, bin(lw, KB_MUL, oh, ci(lw, KH)), ci(lw, k / KW));
        KExpr *iw = bin(lw, KB_ADD, bin(lw, KB_MUL, ow, ci(lw, KW)), ci(lw, k % KW));
        pw[k].i = bin(
            lw, KB_ADD,
            bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, cc, ci(lw, H)), ih), ci(lw, W)), iw);
        KExpr *xk = to(lw, KT_F32, vload(lw, x, &pw[k]));
        if (k == 0) {
            s_assign(lw, c, best, xk);
            s_assign(lw, c, arg, ci(lw, 0));
            continue;
        }
        s_assign(lw, c, xv, xk);
        KExpr *X = var(lw, xv), *B = var(lw, best);
        KExpr *better = bin(lw, KB_OR, bin(lw, KB_GT, X, B),
                            bin(lw, KB_AND, bin(lw, KB_NE, X, X), bin(lw, KB_EQ, B, B)));
        s_assign(lw, c, arg, kx_select(lw->p, better, ci(lw, k), var(lw, arg)));
        s_assign(lw, c, best, kx_select(lw->p, better, X, B));
    }
    for (int64_t k = 0; k < KH * KW; k++)
        vstore(lw, c, x, &pw[k],
               kx_select(lw->p, bin(lw, KB_EQ, var(lw, arg), ci(lw, k)), kx_const(lw->p, KT_F32, 1),
                         kx_const(lw->p, KT_F32, 0)));
    Pos py = *ps;
    py.i =
        bin(lw, KB_ADD,
            bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, cc, ci(lw, OH)), oh), ci(lw, OW)), ow);
    vstore(lw, c, v, &py, var(lw, best));
}

void
lower_pool(Lower *lw, ValueId v)
{
    const Node *n = &lw->m->nodes[v];
    ValueId x = n->args[0];
    const Type *xt = &lw->m->nodes[x].type;
    int64_t C = xt->dims[0], H = xt->dims[1], W = xt->dims[2];
    int64_t OH = n->type.dims[1], OW = n->type.dims[2];
    int64_t KH = (int)node_attr_i(n, "kernel", 0), KW = (int)node_attr_i(n, "kernel", 1);
    int64_t SH = (int)node_attr_i(n, "stride", 0), SW = (int)node_attr_i(n, "stride", 1);
    int64_t PH = (int)node_attr_i(n, "pad", 0), PW = (int)node_attr_i(n, "pad", 1);
    if (SH == 0)
        SH = KH;
    if (SW == 0)
        SW = KW;
    bool is_max = n->op == OP_MAXPOOL2D;
    Pos ps;
    KExpr *ix[3], *kh, *kw;
    Cur px_c = open_elements(lw, v, &ps, 3, (const int64_t[]){C, OH, OW},
                             (const char *const[]){"c", "oh", "ow"}, ix);
    KExpr *cc = ix[0], *oh = ix[1], *ow = ix[2];
    if (is_max && pool_masks_input(lw, v)) {
        pool_max_marking(lw, v, px_c, &ps, cc, oh, ow);
        return;
    }
    KType at = is_max ? KT_F32 : KT_F64;
    int acc = local(lw, "acc", at);
    s_assign(lw, px_c, acc, kx_const(lw->p, at, is_max ? -INFINITY : 0.0));
    KStmt *fkh = loop(lw, px_c, "kh", ci(lw, KH), false, &kh);
    int ih = local(lw, "ih", KT_I64), iw = local(lw, "iw", KT_I64);
    s_assign(lw, body(fkh), ih,
             bin(lw, KB_ADD, bin(lw, KB_SUB, bin(lw, KB_MUL, oh, ci(lw, SH)), ci(lw, PH)), kh));
    KStmt *ifh = s_if(lw, body(fkh),
                      bin(lw, KB_AND, bin(lw, KB_GE, var(lw, ih), ci(lw, 0)),
                          bin(lw, KB_LT, var(lw, ih), ci(lw, H))));
    KStmt *fkw = loop(lw, body(ifh), "kw", ci(lw, KW), false, &kw);
    s_assign(lw, body(fkw), iw,
             bin(lw, KB_ADD, bin(lw, KB_SUB, bin(lw, KB_MUL, ow, ci(lw, SW)), ci(lw, PW)), kw));
    KStmt *ifw = s_if(lw, body(fkw),
                      bin(lw, KB_AND, bin(lw, KB_GE, var(lw, iw), ci(lw, 0)),
                          bin(lw, KB_LT, var(lw, iw), ci(lw, W))));
    Pos px = ps;
    px.i = bin(lw, KB_ADD,
               bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, cc, ci(lw, H)), var(lw, ih)),
                   ci(lw, W)),
               var(lw, iw));
    int xv = local(lw, "x", at);
    s_assign(lw, body(ifw), xv, to(lw, at, vload(lw, x, &px)));
    if (is_max) {
        KExpr *X = var(lw, xv), *A = var(lw, acc);
        KStmt *upd = s_if(lw, body(ifw),
                          bin(lw, KB_OR, bin(lw, KB_GT, X, A), bin(lw, KB_NE, X, X)));
        s_assign(lw, body(upd), acc, X);
    } else {
        s_assign(lw, body(ifw), acc, bin(lw, KB_ADD, var(lw, acc), var(lw, xv)));
    }
    KExpr *y = var(lw, acc);
    if (n->op == OP_AVGPOOL2D)
        y = bin(lw, KB_DIV, y, kx_const(lw->p, KT_F64, (double)(KH * KW)));
    Pos py = ps;
    py.i = bin(lw, KB_ADD, bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, cc, ci(lw, OH)), oh),
                                ci(lw, OW)),
               ow);
    vstore(lw, px_c, v, &py, to(lw, KT_F32, y));
}

/* batchnorm over (c, i): batchnorm_expr */
void
lower_batchnorm(Lower *lw, ValueId v)
{
    const Node *n = &lw->m->nodes[v];
    int64_t C = n->type.rank > 0 ? n->type.dims[0] : 1;
    int64_t inner = C ? lw->vs[v].numel / C : 0;
    Pos ps;
    KExpr *ix[2];
    Cur c = open_elements(lw, v, &ps, 2, (const int64_t[]){C, inner},
                          (const char *const[]){"c", "i"}, ix);
    ps.i = bin(lw, KB_ADD, bin(lw, KB_MUL, ix[0], ci(lw, inner)), ix[1]);
    vstore(lw, c, v, &ps, batchnorm_expr(lw, n, ix[0], vload(lw, n->args[0], &ps)));
}

/* s = u < gain*x with u keyed by (seed, stream, t, (sample_base + b) * numel + i), compared in f32 */
void
lower_poisson(Lower *lw, ValueId v)
{
    const Node *n = &lw->m->nodes[v];
    int64_t numel = lw->vs[v].numel;
    Pos ps;
    KExpr *iv;
    Cur c = open_elements(lw, v, &ps, 1, (const int64_t[]){numel}, (const char *const[]){"i"}, &iv);
    ps.i = iv;
    int p = local(lw, "p", KT_F32);
    float gain = (float)node_attr_f(n, "gain");
    s_assign(lw, c, p,
             bin(lw, KB_MUL, kx_const(lw->p, KT_F32, gain),
                 to(lw, KT_F32, vload(lw, n->args[0], &ps))));
    int64_t node_seed = n->attrs[op_attr_index(OP_POISSON, "seed")].i[0];
    KExpr *u = kx_new(lw->p, KX_UNIFORM, KT_F32);
    u->seed = (uint64_t)(node_seed >= 0 ? node_seed : lw->m->seed);
    u->stream = lw->stream[v];
    u->a = pos_t(lw, &ps);
    u->b = bin(lw, KB_ADD,
               bin(lw, KB_MUL, bin(lw, KB_ADD, kx_kind(lw->p, KX_SAMPLE_BASE), pos_b(lw, &ps)),
                   ci(lw, numel)),
               iv);
    KExpr *P = var(lw, p), *one = kx_const(lw->p, KT_F32, 1), *zero = kx_const(lw->p, KT_F32, 0);
    /* p <= 0 (or NaN) never fires, p >= 1 always does: no draw for them */
    KExpr *y = kx_select(lw->p, kx_un(lw->p, KU_NOT, bin(lw, KB_GT, P, zero)), zero,
                         kx_select(lw->p, bin(lw, KB_GE, P, one), one,
                                   to(lw, KT_F32, bin(lw, KB_LT, u, P))));
    vstore(lw, c, v, &ps, y);
}

/* y[t] = x[t - steps], 0 before */
void
lower_delay(Lower *lw, ValueId v)
{
    const Node *n = &lw->m->nodes[v];
    int64_t steps = (int)node_attr_i(n, "steps", 0);
    KProgram *p = lw->p;
    Pos ps = {0}, px = {0};
    Cur c;
    if (p->target == KTARGET_CPU && lw->region[v] >= 0) {
        /* a CPU step kernel: one loop over the B*n elements at step t in SIMD lanes, so that 8
         * spikes of a bit buffer are one byte stored (rows with an element loop inside stored a
         * bit at a time: 23% of bench/cpu/recurrent.py's time) */
        int64_t numel = lw->vs[v].numel;
        KExpr *jv;
        KStmt *fj = loop(lw, top(lw), "j", bin(lw, KB_MUL, kx_kind(p, KX_BATCH), ci(lw, numel)),
                         true, &jv);
        fj->is_lanes = true;
        c = body(fj);
        ps.t = kx_kind(p, KX_STEP);
        ps.j = px.j = jv;
        ps.jn = px.jn = numel;
    } else {
        KExpr *iv;
        c = open_elements(lw, v, &ps, 1, (const int64_t[]){lw->vs[v].numel},
                          (const char *const[]){"i"}, &iv);
        ps.i = px.i = iv;
        px.b = pos_b(lw, &ps);
    }
    KExpr *t = pos_t(lw, &ps);
    KStmt *s = s_if(lw, c, bin(lw, KB_GE, t, ci(lw, steps)));
    px.t = bin(lw, KB_SUB, t, ci(lw, steps));
    KType ty = lw->p->bufs[lw->vs[v].buf].type;
    vstore(lw, body(s), v, &ps, to(lw, ty, vload(lw, n->args[0], &px)));
    vstore(lw, els(s), v, &ps, kx_const(lw->p, ty, 0));
}
