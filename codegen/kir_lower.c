/* Graph IR → kernel IR with the first, simple schedule: one buffer per value that needs memory, one
 * kernel per stateless op run once over all T·B rows (static values over B only), one kernel per neuron
 * layer fused over time (state in locals), step kernels for recurrent regions, readouts reducing over
 * time into the caller's sample-major outputs. Rounding follows ir/interp.c's F32 mode exactly (layer
 * accumulators in f64, rounded once; neuron arithmetic in f32 with parameter-only subexpressions
 * folded in double): the evaluator's results must equal the interpreter's bit for bit. */
#include "codegen/kir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- builders ---- */

static KExpr *
kx_new(KProgram *p, KxKind kind, KType t)
{
    KExpr *e = arena_alloc(&p->arena, sizeof *e);
    e->kind = kind;
    e->type = t;
    return e;
}

KExpr *
kx_const(KProgram *p, KType t, double v)
{
    KExpr *e = kx_new(p, KX_CONST, t);
    e->num = t == KT_F32 ? (double)(float)v : v;
    return e;
}

KExpr *
kx_kind(KProgram *p, KxKind kind)
{
    return kx_new(p, kind, KT_I64);
}

KExpr *
kx_var(KProgram *p, const Kernel *k, int var)
{
    if (var < 0 || var >= k->nlocals)
        die("kir: local %d out of range", var);
    KExpr *e = kx_new(p, KX_VAR, k->locals[var].type);
    e->var = var;
    return e;
}

KExpr *
kx_load(KProgram *p, int buf, KExpr *index)
{
    if (buf < 0 || buf >= p->nbufs)
        die("kir: buffer %d out of range", buf);
    KExpr *e = kx_new(p, KX_LOAD, ktype_value(p->bufs[buf].type));
    e->buf = buf;
    e->a = index;
    return e;
}

/* the byte (KLOAD_BYTES, a u8) or the 8 bytes (KLOAD_WORD, an i64) from byte `index` of bit
 * buffer buf */
static KExpr *
kx_load_bits(KProgram *p, int buf, KExpr *index, int how)
{
    KExpr *e = kx_load(p, buf, index);
    if (!ktype_bits(p->bufs[buf].type))
        die("kir: byte load from %s buffer '%s'", ktype_name(p->bufs[buf].type), p->bufs[buf].name);
    e->op = how;
    e->type = how == KLOAD_WORD ? KT_I64 : KT_U8; /* bytes of pairs too: not an element's i8 */
    return e;
}

KExpr *
kx_un(KProgram *p, KUn op, KExpr *a)
{
    KExpr *e = kx_new(p, KX_UN, op == KU_NOT ? KT_BOOL : a->type);
    e->op = op;
    e->a = a;
    return e;
}

static bool
is_const(const KExpr *e, double v)
{
    return e->kind == KX_CONST && e->num == v;
}

KExpr *
kx_bin(KProgram *p, KBin op, KExpr *a, KExpr *b)
{
    if (a->type != b->type)
        die("kir: %s of %s and %s", kbin_str(op), ktype_name(a->type), ktype_name(b->type));
    /* index arithmetic reads better folded; float arithmetic is never rewritten */
    if (a->type == KT_I64) {
        if (a->kind == KX_CONST && b->kind == KX_CONST && op <= KB_REM && op != KB_MIN &&
            op != KB_MAX && op != KB_POW && !(op >= KB_DIV && b->num == 0)) {
            int64_t x = (int64_t)a->num, y = (int64_t)b->num, r = 0;
            bool is_over = false;
            switch (op) {
            case KB_ADD: is_over = __builtin_add_overflow(x, y, &r); break;
            case KB_SUB: is_over = __builtin_sub_overflow(x, y, &r); break;
            case KB_MUL: is_over = __builtin_mul_overflow(x, y, &r); break;
            case KB_DIV: r = x / y; break;
            case KB_REM: r = x % y; break;
            default: unreachable();
            }
            /* a constant holds integers exactly up to 2^53: larger results stay operations */
            if (!is_over && r >= -(INT64_C(1) << 53) && r <= INT64_C(1) << 53)
                return kx_const(p, KT_I64, (double)r);
        }
        if (a->kind == KX_CONST && b->kind == KX_CONST && op >= KB_LT && op <= KB_NE) {
            double x = a->num, y = b->num;
            bool r = op == KB_LT ? x < y : op == KB_LE ? x <= y : op == KB_GT ? x > y
                   : op == KB_GE ? x >= y : op == KB_EQ ? x == y : x != y;
            return kx_const(p, KT_BOOL, r);
        }
        if (op == KB_ADD && is_const(a, 0))
            return b;
        if ((op == KB_ADD || op == KB_SUB) && is_const(b, 0))
            return a;
        if (op == KB_MUL && (is_const(a, 0) || is_const(b, 0)))
            return kx_const(p, KT_I64, 0);
        if (op == KB_MUL && is_const(a, 1))
            return b;
        if ((op == KB_MUL || op == KB_DIV) && is_const(b, 1))
            return a;
        if (op == KB_REM && is_const(b, 1))
            return kx_const(p, KT_I64, 0);
    }
    if (a->type == KT_BOOL && op == KB_AND && (a->kind == KX_CONST || b->kind == KX_CONST)) {
        const KExpr *k = a->kind == KX_CONST ? a : b;
        return k->num != 0 ? (k == a ? b : a) : kx_const(p, KT_BOOL, 0);
    }
    KType t = op >= KB_LT ? KT_BOOL : a->type;
    KExpr *e = kx_new(p, KX_BIN, t);
    e->op = op;
    e->a = a;
    e->b = b;
    return e;
}

KExpr *
kx_select(KProgram *p, KExpr *c, KExpr *a, KExpr *b)
{
    if (c->type != KT_BOOL || a->type != b->type)
        die("kir: select of %s ? %s : %s", ktype_name(c->type), ktype_name(a->type),
            ktype_name(b->type));
    KExpr *e = kx_new(p, KX_SELECT, a->type);
    e->a = c;
    e->b = a;
    e->c = b;
    return e;
}

KExpr *
kx_cast(KProgram *p, KType t, KExpr *a)
{
    if (a->type == t)
        return a;
    if (a->kind == KX_CONST && t != KT_BOOL && a->type != KT_F32 && a->type != KT_F64)
        return kx_const(p, t, a->num); /* integer constants convert exactly */
    KExpr *e = kx_new(p, KX_CAST, t);
    e->a = a;
    return e;
}

bool
kir_by_sample(const KProgram *p, int first, int end)
{
    for (int k = first; k < end; k++)
        if (!p->kernels[k].is_step || p->kernels[k].sample_iters <= 0) return false;
    return end > first;
}

int64_t
ksize_eval(KSize s, int64_t batch)
{
    return s.per_batch * batch + s.fixed;
}

void
kir_free(KProgram *p)
{
    if (!p)
        return;
    arena_free(&p->arena);
    free(p);
}

/* ---- lowering state ---- */

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
} VStore;

/* where a statement goes: a growable array of statements (capacity: the next power of two) */
typedef struct Cur {
    KStmt ***arr;
    int *n;
} Cur;

typedef struct Lower {
    KProgram *p;
    const Module *m;
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
    int capkernels, caplocals;
} Lower;


static void
push_stmt(Arena *a, KStmt ***arr, int *n, KStmt *s)
{
    if (*n == 0)
        *arr = arena_alloc(a, 4 * sizeof **arr);
    else if (*n >= 4 && (*n & (*n - 1)) == 0)
        *arr = arena_grow(a, *arr, (size_t)*n * sizeof **arr, (size_t)*n * 2 * sizeof **arr);
    (*arr)[(*n)++] = s;
}

static KStmt *
put(Lower *lw, Cur c, KStmt *s)
{
    push_stmt(&lw->p->arena, c.arr, c.n, s);
    return s;
}

static Cur
top(Lower *lw)
{
    return (Cur){&lw->k.body, &lw->k.nbody};
}

static Cur
body(KStmt *s)
{
    return (Cur){&s->body, &s->nbody};
}

static Cur
els(KStmt *s)
{
    return (Cur){&s->els, &s->nels};
}

static KStmt *
st_new(Lower *lw, KsKind kind)
{
    KStmt *s = arena_alloc(&lw->p->arena, sizeof *s);
    s->kind = kind;
    s->var = -1;
    s->buf = -1;
    return s;
}

static int
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

static KExpr *
var(Lower *lw, int v)
{
    return kx_var(lw->p, &lw->k, v);
}

static KExpr *
ci(Lower *lw, int64_t v)
{
    return kx_const(lw->p, KT_I64, (double)v);
}

static KExpr *
bin(Lower *lw, KBin op, KExpr *a, KExpr *b)
{
    return kx_bin(lw->p, op, a, b);
}

static KExpr *
to(Lower *lw, KType t, KExpr *e)
{
    return kx_cast(lw->p, t, e);
}

/* for var in [lo, hi) */
static KStmt *
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
static KStmt *
loop(Lower *lw, Cur c, const char *name, KExpr *hi, bool is_parallel, KExpr **var_out)
{
    int v = local(lw, name, KT_I64);
    *var_out = var(lw, v);
    return s_for(lw, c, v, ci(lw, 0), hi, is_parallel);
}

static void
s_assign(Lower *lw, Cur c, int v, KExpr *e)
{
    KStmt *s = st_new(lw, KS_ASSIGN);
    s->var = v;
    s->a = to(lw, lw->k.locals[v].type, e);
    put(lw, c, s);
}

static void
s_store(Lower *lw, Cur c, int buf, KExpr *index, KExpr *e)
{
    KStmt *s = st_new(lw, KS_STORE);
    s->buf = buf;
    s->index = index;
    s->a = to(lw, ktype_value(lw->p->bufs[buf].type), e);
    put(lw, c, s);
}

static KStmt *
s_if(Lower *lw, Cur c, KExpr *cond)
{
    KStmt *s = st_new(lw, KS_IF);
    s->a = to(lw, KT_BOOL, cond);
    return put(lw, c, s);
}

static int
add_buf(Lower *lw, const char *name, KType t, KSize size, KBufKind kind, int io, ValueId v)
{
    KProgram *p = lw->p;
    /* buffers are added before any kernel refers to them by index, in a few rounds: grow by one */
    p->bufs = arena_grow(&p->arena, p->bufs, (size_t)p->nbufs * sizeof *p->bufs,
                         (size_t)(p->nbufs + 1) * sizeof *p->bufs);
    p->bufs[p->nbufs] = (KBuf){.name = arena_strdup(&p->arena, name), .type = t, .size = size,
                               .kind = kind, .io = io, .value = v};
    return p->nbufs++;
}

/* a layer's per-row scratch (accumulators, spike lists, term lists): every element a kernel reads
 * it stored earlier in the same row, so nothing zeroes it before a run (kir_eval starts it as
 * garbage: a false claim changes outputs) */
static int
scratch_buf(Lower *lw, const char *name, KType t, int64_t elems)
{
    int b = add_buf(lw, name, t, (KSize){elems, 0}, KB_TEMP, -1, -1);
    lw->p->bufs[b].is_written_first = true;
    return b;
}

static const char *
value_name(Lower *lw, ValueId v)
{
    char buf[32];
    return arena_strdup(&lw->p->arena, kir_value_name(lw->p, v, buf, sizeof buf));
}

static void
begin_kernel(Lower *lw, ValueId v, const char *what, bool is_step)
{
    const Node *n = &lw->m->nodes[v];
    memset(&lw->k, 0, sizeof lw->k);
    lw->caplocals = 0;
    lw->k.name = arena_printf(&lw->p->arena, "%s_%s", node_op_name(lw->m, n), value_name(lw, v));
    lw->k.what = what;
    lw->k.is_step = is_step;
    lw->k.nodes = arena_alloc(&lw->p->arena, sizeof *lw->k.nodes);
    lw->k.nodes[0] = v;
    lw->k.nnodes = 1;
}

/* the kernel of neuron layer scan fused into its user v: "s = IF(b) into p = maxpool2d(s): how" */
static void
begin_fused_kernel(Lower *lw, ValueId scan, ValueId v, const char *how)
{
    const Module *m = lw->m;
    const Node *sn = &m->nodes[scan];
    begin_kernel(lw, scan,
                 arena_printf(&lw->p->arena, "%s = %s(%s) into %s = %s(%s): %s",
                              value_name(lw, scan), node_op_name(m, sn),
                              value_name(lw, sn->args[0]), value_name(lw, v),
                              node_op_name(m, &m->nodes[v]), value_name(lw, scan), how),
                 false);
}

/* Kernel.sample_iters of a step kernel: every step lowering runs its parallel loop over samples in
 * order (rows b, neurons b*n + j, pooled elements b*per + q, ...), so a loop over [0, a*B) gives a;
 * a row-tiled loop ((B + 2) / 3 tiles of three rows) gives 0 */
static int64_t
sample_iters(const Kernel *k)
{
    if (!k->is_step || k->nbody != 1 || !k->body[0]) return 0;
    const KStmt *s = k->body[0];
    if (s->kind != KS_FOR || !s->is_parallel || s->lo->kind != KX_CONST || s->lo->num != 0)
        return 0;
    const KExpr *h = s->hi;
    if (h->kind == KX_BATCH) return 1;
    if (h->kind != KX_BIN || h->op != KB_MUL) return 0;
    const KExpr *c = h->a->kind == KX_BATCH ? h->b : h->b->kind == KX_BATCH ? h->a : NULL;
    return c && c->kind == KX_CONST && c->num >= 1 ? (int64_t)c->num : 0;
}

static void
end_kernel(Lower *lw)
{
    KProgram *p = lw->p;
    lw->k.sample_iters = sample_iters(&lw->k);
    /* the layers summed in this scan (LY_SUMMED) join its description */
    for (int k = 0; k < lw->k.nnodes; k++) {
        ValueId v = lw->k.nodes[k];
        if (lw->vs[v].layout != LY_SUMMED) continue;
        const Node *n = &lw->m->nodes[v];
        lw->k.what = arena_printf(&p->arena, "%s; %s = %s(%s) summed in each thread %s", lw->k.what,
                                  value_name(lw, v), node_op_name(lw->m, n),
                                  value_name(lw, n->args[0]),
                                  lw->is_static[v] ? "once, before the steps" : "at every step");
    }
    if (p->nkernels == lw->capkernels) {
        int cap = lw->capkernels ? 2 * lw->capkernels : 16;
        p->kernels = arena_grow(&p->arena, p->kernels, (size_t)lw->capkernels * sizeof *p->kernels,
                                (size_t)cap * sizeof *p->kernels);
        lw->capkernels = cap;
    }
    p->kernels[p->nkernels++] = lw->k;
    memset(&lw->k, 0, sizeof lw->k);
}

static KType
ktype_of(DType dt)
{
    switch (dt) {
    case DT_SPIKE: return KT_U8;
    case DT_I8: return KT_I8;
    default: return KT_F32; /* f16 and bf16 values are computed in float, as the interpreter does */
    }
}

/* ---- addressing values ----
 * A position names one element of a value at one step by whichever of these the kernel has:
 * t (step; NULL in a static kernel), b (sample), i (element), r = t*B + b, j = b*jn + i. Missing
 * ones are derived with / and % (their operands are never negative). */
typedef struct Pos {
    KExpr *t, *b, *i, *r, *j;
    int64_t jn;
    KExpr *ch; /* the element's channel (index along dim 0) where the kernel knows it, or NULL */
} Pos;

static KExpr *
pos_t(Lower *lw, Pos *ps)
{
    if (!ps->t && ps->r)
        ps->t = bin(lw, KB_DIV, ps->r, kx_kind(lw->p, KX_BATCH));
    if (!ps->t)
        die("kir: position without a step");
    return ps->t;
}

static KExpr *
pos_b(Lower *lw, Pos *ps)
{
    if (!ps->b && ps->r)
        ps->b = bin(lw, KB_REM, ps->r, kx_kind(lw->p, KX_BATCH));
    if (!ps->b && ps->j)
        ps->b = bin(lw, KB_DIV, ps->j, ci(lw, ps->jn));
    if (!ps->b)
        die("kir: position without a sample");
    return ps->b;
}

static KExpr *
pos_i(Lower *lw, Pos *ps)
{
    if (!ps->i && ps->j)
        ps->i = bin(lw, KB_REM, ps->j, ci(lw, ps->jn));
    if (!ps->i)
        die("kir: position without an element");
    return ps->i;
}

/* the element index of value v at ps in its buffer */
static KExpr *
vindex(Lower *lw, ValueId v, Pos *ps)
{
    const VStore *s = &lw->vs[v];
    KExpr *n = ci(lw, s->numel), *B = kx_kind(lw->p, KX_BATCH);
    switch (s->layout) {
    case LY_FULL:
        if (ps->r && ps->i)
            return bin(lw, KB_ADD, bin(lw, KB_MUL, ps->r, n), ps->i);
        if (ps->j && ps->jn == s->numel && ps->t)
            return bin(lw, KB_ADD, bin(lw, KB_MUL, ps->t, bin(lw, KB_MUL, B, n)), ps->j);
        if (ps->r)
            return bin(lw, KB_ADD, bin(lw, KB_MUL, ps->r, n), pos_i(lw, ps));
        return bin(lw, KB_ADD,
                   bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, pos_t(lw, ps), B), pos_b(lw, ps)),
                       n),
                   pos_i(lw, ps));
    case LY_STATIC:
    case LY_INPUT:
        if (ps->j && ps->jn == s->numel)
            return ps->j;
        return bin(lw, KB_ADD, bin(lw, KB_MUL, pos_b(lw, ps), n), pos_i(lw, ps));
    case LY_INPUT_STEP: {
        KExpr *bt = bin(lw, KB_ADD, bin(lw, KB_MUL, pos_b(lw, ps), ci(lw, lw->T)), pos_t(lw, ps));
        return bin(lw, KB_ADD, bin(lw, KB_MUL, bt, n), pos_i(lw, ps));
    }
    case LY_NONE:
    case LY_INLINE:
    case LY_SUMMED: break;
    }
    die("kir: value %d has no memory", (int)v);
}

static KExpr *pointwise_expr(Lower *lw, ValueId v, Pos *ps);
static KExpr *summed_value(Lower *lw, ValueId v, Pos *ps);

static KExpr *
vload(Lower *lw, ValueId v, Pos *ps)
{
    if (lw->vs[v].layout == LY_INLINE)
        return pointwise_expr(lw, v, ps);
    if (lw->vs[v].layout == LY_SUMMED)
        return summed_value(lw, v, ps);
    return kx_load(lw->p, lw->vs[v].buf, vindex(lw, v, ps));
}

static void
vstore(Lower *lw, Cur c, ValueId v, Pos *ps, KExpr *e)
{
    s_store(lw, c, lw->vs[v].buf, vindex(lw, v, ps), e);
}


static int
wbuf(Lower *lw, const Node *n, int slot)
{
    /* weight buffers are the first nweights buffers, in Module.weights order */
    return n->first_weight + slot;
}

/* ---- row contexts of stateless kernels ----
 * batched: for r in 0..T*B parallel (t = r / B, b = r % B); static: for b in 0..B parallel (no t);
 * step: for b in 0..B parallel, t = the schedule's step. */
typedef enum { CTX_BATCHED, CTX_STATIC, CTX_STEP } Ctx;

static Ctx
ctx_of(Lower *lw, ValueId v)
{
    /* step by step (no time-batch pass), even values that are the same at every step are
     * computed at every step: nothing is hoisted out of the time loop */
    if (lw->m->schedule == SCHEDULE_STEP && lw->region[v] >= 0) return CTX_STEP;
    return lw->is_static[v] ? CTX_STATIC : lw->region[v] >= 0 ? CTX_STEP : CTX_BATCHED;
}

static const char *
ctx_what(Ctx c)
{
    switch (c) {
    case CTX_BATCHED: return "layer by layer over T*B rows";
    case CTX_STATIC: return "static (the same every step): once over B rows";
    case CTX_STEP: return "step kernel (in the step loop): B rows at step t";
    }
    unreachable();
}

static Cur
open_rows(Lower *lw, ValueId v, Pos *ps)
{
    Ctx c = ctx_of(lw, v);
    KExpr *B = kx_kind(lw->p, KX_BATCH), *rv;
    memset(ps, 0, sizeof *ps);
    if (c == CTX_BATCHED) {
        KStmt *f = loop(lw, top(lw), "r", bin(lw, KB_MUL, ci(lw, lw->T), B), true, &rv);
        ps->r = rv;
        return body(f);
    }
    KStmt *f = loop(lw, top(lw), "b", B, true, &rv);
    ps->b = rv;
    if (c == CTX_STEP)
        ps->t = kx_kind(lw->p, KX_STEP);
    return body(f);
}

static const char *
describe(Lower *lw, ValueId v, const char *how)
{
    const Node *n = &lw->m->nodes[v];
    char args[256] = "";
    for (int a = 0; a < n->nargs; a++) {
        size_t k = strlen(args);
        snprintf(args + k, sizeof args - k, "%s%s", a ? ", " : "", value_name(lw, n->args[a]));
    }
    return arena_printf(&lw->p->arena, "%s = %s(%s): %s", value_name(lw, v), node_op_name(lw->m, n),
                        args, how);
}

/* ---- stateless ops ---- */

static Cur open_elements(Lower *lw, ValueId v, Pos *ps, int n, const int64_t *dims,
                         const char *const *names, KExpr **idx);

/* the kernel computes v as well (a value fused into it): --explain lists it */
static void
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

/* (x - mean) / sqrt(var + eps) * weight + bias of channel cc, in f64, rounded once */
static KExpr *
batchnorm_expr(Lower *lw, const Node *n, KExpr *cc, KExpr *x)
{
    KExpr *w[4];
    for (int s = 0; s < 4; s++)
        w[s] = to(lw, KT_F64, kx_load(lw->p, wbuf(lw, n, s), cc));
    KExpr *sd = kx_un(lw->p, KU_SQRT,
                      bin(lw, KB_ADD, w[3], kx_const(lw->p, KT_F64, node_attr_f(n, "eps"))));
    KExpr *y = bin(lw, KB_ADD,
                   bin(lw, KB_MUL, bin(lw, KB_DIV, bin(lw, KB_SUB, to(lw, KT_F64, x), w[2]), sd),
                       w[0]),
                   w[1]);
    return to(lw, KT_F32, y);
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

/* a fused elementwise value at ps (LY_INLINE), computed where it is loaded */
static KExpr *
pointwise_expr(Lower *lw, ValueId v, Pos *ps)
{
    const Node *n = &lw->m->nodes[v];
    kernel_add_node(lw, v);
    if (n->op != OP_BATCHNORM)
        return elementwise_expr(lw, n, ps);
    KExpr *cc = ps->ch ? ps->ch : batchnorm_channel(lw, v, pos_i(lw, ps));
    return batchnorm_expr(lw, n, cc, vload(lw, n->args[0], ps));
}

static void
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

static bool
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

/* ---- dense and conv2d ----
 * Layers sum in f64 and round to f32 once (ir/interp.c). Their inner loops run over output
 * neurons or channels, which transposed weight buffers (KBuf.perm) hold contiguously, into tiles
 * (kir.h): rows of f64 accumulators that the CPU backend keeps in vector registers, multiplied
 * and added with one rounding (exact: a product of two floats is exact in double).
 *   dense, weight [out][in] -> [in][out]:
 *     real-valued input: a register-blocked GEMM, one parallel loop over (output tile, row block)
 *       pairs; DENSE_MR rows times DENSE_NT outputs accumulate over k (innermost) from the bias,
 *       each weight vector loaded once for the block. Terms in k order: the interpreter's sum.
 *     spikes, at most DENSE_SPIKE_TILE outputs: the same blocks with all outputs in one tile,
 *       zero inputs skipped lane-wise (fma_nz, no branch to mispredict on dense spike trains).
 *     spikes, more outputs: event-driven, one scan of the input per row; each spike adds its
 *       contiguous weight row into the row's f64 accumulators in memory (L1-resident), tile by
 *       tile. Terms in k order.
 *   conv2d, weight [out][in/g][kh][kw] -> [in/g][kh][kw][out], output NCHW as before (a tile is
 *     stored channel by channel, OH*OW apart):
 *     real-valued input: per channel tile (outer: its weights stay in cache), per output pixel,
 *       a tile gathers over (c, kh, kw) in the interpreter's order; padding is skipped by bounds
 *       checks, never added.
 *     spikes: per row, the spiking channels of every input pixel (count and list, in channel
 *       order); per output pixel, its terms gathered from its taps' lists into one list of
 *       (weight row, input) pairs, in (kh, kw, c) order; then every channel tile runs one loop
 *       over that list. This is the one reordered sum: spike terms are weights (times 0/1 or
 *       +-1), whose f64 sum is exact, so order-free, unless n terms span more than about
 *       2^(29 - log2 n) in magnitude; and even then the f32 result changes only if the last f64
 *       bit moves it across an f32 rounding boundary.
 * Block sizes fit AVX2's sixteen 256-bit registers (4 f64 lanes each): a dense block holds
 * DENSE_MR * DENSE_NT / 4 = 12 accumulators, a weight vector and the broadcast inputs; a conv
 * tile 8 accumulators. */
enum {
    DENSE_MR = 3,          /* real-valued input: rows per register block */
    SPIKE_MR = 3,          /* spike input: rows per register block */
    DENSE_NT = 16,         /* outputs per dense tile */
    DENSE_SPIKE_TILE = 32, /* most outputs a spike-fed dense layer keeps in one tile */
    SCATTER_NT = 32,       /* lanes per step of the event-driven dense scatter */
    CONV_NT = 32,          /* channels per conv tile */
};

/* lanes per tile: the counts above are for f64; float tiles (accumulate f32) hold twice as many in
 * the same registers */
static int
tile_lanes(const Lower *lw, int n)
{
    return lw->acc == KT_F32 ? 2 * n : n;
}

static bool
has_bias(const Node *n)
{
    return (int)node_attr_i(n, "bias", 0) != 0;
}

/* weight slot `slot` of n, held transposed by perm (each weight belongs to one node, so it has
 * one layout) */
static int
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

/* the rows of a stateless kernel (see open_rows) and the position of one */
static KExpr *
rows_of(Lower *lw, ValueId v)
{
    KExpr *B = kx_kind(lw->p, KX_BATCH);
    return ctx_of(lw, v) == CTX_BATCHED ? bin(lw, KB_MUL, ci(lw, lw->T), B) : B;
}

static Pos
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
static KExpr *
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

/* a tile local of `lanes` f64 values */
static int
tile(Lower *lw, const char *name, int lanes)
{
    int t = local(lw, name, lw->acc);
    lw->k.locals[t].lanes = lanes;
    return t;
}

static KStmt *
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

/* t = bias[o0 + l] (f64), or 0 without a bias */
static void
tile_init(Lower *lw, Cur c, int t, int bias, KExpr *o0)
{
    if (bias >= 0)
        s_tile(lw, c, KS_VLOAD, t, bias, o0, NULL);
    else
        s_tile(lw, c, KS_VSET, t, -1, NULL, kx_const(lw->p, KT_F64, 0));
}

/* t += a * w[index + l] */
static void
tile_fma(Lower *lw, Cur c, int t, KExpr *a, int w, KExpr *index, bool is_sparse)
{
    s_tile(lw, c, KS_VFMA, t, w, index, a)->is_sparse = is_sparse;
}

/* value v at (row position ps with i = the first lane's element) + l*stride = t */
static void
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

/* body(o0, lanes) for the tiles of [0, n): a loop over the full tiles of nt lanes, then the
 * n % nt left over */
typedef void TileBody(Lower *lw, Cur c, KExpr *o0, int lanes, const void *ctx);

static void
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
} Dense;

/* m rows from r0 times the outputs [o0, o0 + lanes): tiles from the bias, k innermost */
static void
dense_micro(Lower *lw, Cur c, const Dense *d, KExpr *r0, int m, KExpr *o0, int lanes)
{
    int t[DENSE_MR > SPIKE_MR ? DENSE_MR : SPIKE_MR];
    for (int i = 0; i < m; i++) {
        t[i] = tile(lw, "acc", lanes);
        tile_init(lw, c, t[i], d->bias, o0);
    }
    KExpr *k;
    KStmt *fk = loop(lw, c, "k", ci(lw, d->K), false, &k);
    KExpr *wi = bin(lw, KB_ADD, bin(lw, KB_MUL, k, ci(lw, d->O)), o0);
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

/* y[r][o] = (f32)(bias[o] + sum_k x[r][k] W[o][k]) with the sum in k order, as the interpreter;
 * one parallel loop over (output tile, row block) pairs, the output tile outer so that a
 * thread's chunk of pairs reuses one panel of weights [K][DENSE_NT] from cache. */
static void
lower_dense(Lower *lw, ValueId v)
{
    const Node *n = &lw->m->nodes[v];
    Dense d = {v, n->args[0], lw->vs[n->args[0]].numel, lw->vs[v].numel, 0, -1,
               is_spike_value(lw, n->args[0]), 0, NULL, NULL};
    /* spikes into few outputs: all outputs in one tile (a wide layer over spikes comes here
     * only when not marked events: then tiled like real inputs, zeros still skipped) */
    bool is_one_tile = d.is_sparse && d.O <= DENSE_SPIKE_TILE;
    d.mr = is_one_tile ? SPIKE_MR : DENSE_MR;
    d.w = wbuf_transposed(lw, n, 0, 2, (const int[]){1, 0});
    d.bias = has_bias(n) ? wbuf(lw, n, 1) : -1;
    int nt = d.O < tile_lanes(lw, DENSE_NT) || is_one_tile ? (int)d.O : tile_lanes(lw, DENSE_NT);
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
static void
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

/* GPU: one thread per output element (row, o), a one-lane tile (dense_sum). Consecutive threads
 * take consecutive outputs, so their weight loads from W^T [K][O] coalesce and the input row is
 * one broadcast. */
static void
lower_dense_flat(Lower *lw, ValueId v)
{
    int64_t O = lw->vs[v].numel;
    KExpr *q;
    KStmt *fq = loop(lw, top(lw), "q", bin(lw, KB_MUL, rows_of(lw, v), ci(lw, O)), true, &q);
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
static int
bits_of(Lower *lw, ValueId v)
{
    return lw->vs[v].buf >= 0 ? ktype_bits(lw->p->bufs[lw->vs[v].buf].type) : 0;
}

static bool
is_bits(Lower *lw, ValueId v)
{
    return bits_of(lw, v) > 0;
}

/* The spikes of K elements (a whole number of bytes) of the row of bit-stored value x at ps from
 * element `first` (on a byte, as is the row's first): 64 bits at a time (8 bytes, unaligned), then
 * the row's last bytes one at a time; in each word its set bits, lowest first, each found with a
 * count of trailing zeros and cleared (no branch per bit: a spike train defeats branch prediction;
 * a loop per byte mispredicted its exit often enough to lose to bytes at 21% spikes). Bit pairs
 * (-1/0/1) keep only the low bit of each pair, set for both signs, and halve its position.
 * body(k) runs for element k of the row, a spike (1, or for pairs 1 or -1: body loads it), in
 * element order. */
typedef void SpikeBody(Lower *lw, Cur c, KExpr *k, void *ctx);

static void
for_bit_spikes(Lower *lw, Cur c, ValueId x, const Pos *ps, KExpr *first, int64_t K, SpikeBody *fn,
               void *ctx)
{
    Pos p0 = *ps;
    p0.i = first;
    int bits = bits_of(lw, x);
    int64_t in_byte = 8 / bits; /* elements in a byte */
    KExpr *byte0 = bin(lw, KB_DIV, vindex(lw, x, &p0), ci(lw, in_byte));
    int wv = local(lw, "bits", KT_I64), nv = local(lw, "nset", KT_I64), lv = local(lw, "l", KT_I64);
    for (int pass = 0; pass < 2; pass++) {
        int64_t per = pass == 0 ? 8 * in_byte : in_byte; /* elements per load */
        int64_t lo = pass == 0 ? 0 : K / (8 * in_byte) * 8, hi = pass == 0 ? K / per : K / in_byte;
        if (lo >= hi) continue;
        KExpr *w, *n;
        KStmt *fw = loop(lw, c, pass == 0 ? "w" : "kb", ci(lw, hi), false, &w);
        fw->lo = ci(lw, lo);
        KExpr *at = bin(lw, KB_ADD, byte0, pass == 0 ? bin(lw, KB_MUL, w, ci(lw, 8)) : w);
        KExpr *word = to(lw, KT_I64, kx_load_bits(lw->p, lw->vs[x].buf, at,
                                                  pass == 0 ? KLOAD_WORD : KLOAD_BYTES));
        if (bits == 2) /* the low bit of every pair: a spike of either sign (the mask
                        * 0x5555555555555555 as a product: constants are exact to 2^53 only) */
            word = bin(lw, KB_BITAND, word,
                       bin(lw, KB_MUL, ci(lw, 0x55555555), ci(lw, 0x100000001)));
        s_assign(lw, body(fw), wv, word);
        s_assign(lw, body(fw), nv, kx_un(lw->p, KU_POPCOUNT, var(lw, wv)));
        KStmt *fn_ = loop(lw, body(fw), "n", var(lw, nv), false, &n);
        s_assign(lw, body(fn_), lv, kx_un(lw->p, KU_CTZ, var(lw, wv)));
        s_assign(lw, body(fn_), wv,
                 bin(lw, KB_BITAND, var(lw, wv), bin(lw, KB_SUB, var(lw, wv), ci(lw, 1))));
        KExpr *l = bits == 2 ? bin(lw, KB_DIV, var(lw, lv), ci(lw, 2)) : var(lw, lv);
        fn(lw, body(fn_), bin(lw, KB_ADD, bin(lw, KB_MUL, w, ci(lw, per)), l), ctx);
    }
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

/* dense over spikes: acc[o] = bias[o], then for each k with x[k] != 0, acc[o] += x[k] W[o][k] */
static void
lower_dense_events(Lower *lw, ValueId v)
{
    const Node *n = &lw->m->nodes[v];
    ValueId x = n->args[0];
    int64_t K = lw->vs[x].numel, O = lw->vs[v].numel;
    int w = wbuf_transposed(lw, n, 0, 2, (const int[]){1, 0});
    int bias = has_bias(n) ? wbuf(lw, n, 1) : -1;
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

/* ---- conv2d ---- */

typedef struct Conv {
    ValueId v, x;
    ConvGeom d;  /* sizes, kernel, stride, pad, dilation, groups */
    int w, bias; /* weight [Cg][KH][KW][O]; bias or -1 */
    int list, count; /* spike lists: buffers, or -1 */
    int tap_w, tap_x;  /* an output pixel's terms: weight rows, inputs */
    Pos ps;            /* the row */
    KExpr *g;          /* group */
    KExpr *oh, *ow, *nterms, *terms; /* the output pixel, its term count and first term */
} Conv;

/* a dense layer as the target wants it: one thread per output on the GPU; on the CPU event by
 * event when marked and wide, else tiles */
static void
lower_dense_any(Lower *lw, ValueId v)
{
    const Node *n = &lw->m->nodes[v];
    if (lw->p->target == KTARGET_GPU)
        lower_dense_flat(lw, v);
    else if (node_lists_events(lw->m, n))
        lower_dense_events(lw, v);
    else
        lower_dense(lw, v);
}

static Conv
conv_geometry(Lower *lw, ValueId v)
{
    const Node *n = &lw->m->nodes[v];
    Conv cv;
    memset(&cv, 0, sizeof cv);
    cv.v = v;
    cv.x = n->args[0];
    cv.d = conv_geom(lw->m, n);
    /* W[o][cg][kh][kw] → [cg][kh][kw][o]: a row of output channels per (cg, kh, kw); one
     * channel's taps are neighbours, as neighbouring output pixels use them */
    if (n->op == OP_CONV1D) /* W[o][cg][k] → [cg][k][o], the same as [cg][1][k][o] */
        cv.w = wbuf_transposed(lw, n, 0, 3, (const int[]){1, 2, 0});
    else
        cv.w = wbuf_transposed(lw, n, 0, 4, (const int[]){1, 2, 3, 0});
    cv.bias = has_bias(n) ? wbuf(lw, n, 1) : -1;
    cv.list = cv.count = cv.tap_w = cv.tap_x = -1;
    return cv;
}

/* the input tap of output position (oh, ow): ih = oh*SH - PH + kh*DH; body runs if it is inside
 * (padding is skipped, never added); *ih and *iw are its locals */
static Cur
conv_taps(Lower *lw, Cur c, const Conv *cv, KExpr *oh, KExpr *ow, KExpr **kh, KExpr **kw,
          KExpr **ih, KExpr **iw)
{
    int ihv = local(lw, "ih", KT_I64), iwv = local(lw, "iw", KT_I64);
    KStmt *fkh = loop(lw, c, "kh", ci(lw, cv->d.KH), false, kh);
    s_assign(lw, body(fkh), ihv,
             bin(lw, KB_ADD, bin(lw, KB_SUB, bin(lw, KB_MUL, oh, ci(lw, cv->d.SH)), ci(lw, cv->d.PH)),
                 bin(lw, KB_MUL, *kh, ci(lw, cv->d.DH))));
    *ih = var(lw, ihv);
    KStmt *ifh = s_if(lw, body(fkh),
                      bin(lw, KB_AND, bin(lw, KB_GE, *ih, ci(lw, 0)),
                          bin(lw, KB_LT, *ih, ci(lw, cv->d.H))));
    KStmt *fkw = loop(lw, body(ifh), "kw", ci(lw, cv->d.KW), false, kw);
    s_assign(lw, body(fkw), iwv,
             bin(lw, KB_ADD, bin(lw, KB_SUB, bin(lw, KB_MUL, ow, ci(lw, cv->d.SW)), ci(lw, cv->d.PW)),
                 bin(lw, KB_MUL, *kw, ci(lw, cv->d.DW))));
    *iw = var(lw, iwv);
    KStmt *ifw = s_if(lw, body(fkw),
                      bin(lw, KB_AND, bin(lw, KB_GE, *iw, ci(lw, 0)),
                          bin(lw, KB_LT, *iw, ci(lw, cv->d.W))));
    return body(ifw);
}

/* x at channel (g*Cg + cg), pixel (ih, iw) of the row, as f64 */
static KExpr *
conv_input(Lower *lw, const Conv *cv, KExpr *cg, KExpr *ih, KExpr *iw)
{
    KExpr *chan = bin(lw, KB_ADD, bin(lw, KB_MUL, cv->g, ci(lw, cv->d.Cg)), cg);
    Pos px = cv->ps;
    px.i = bin(lw, KB_ADD,
               bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, chan, ci(lw, cv->d.H)), ih),
                   ci(lw, cv->d.W)),
               iw);
    return to(lw, KT_F64, vload(lw, cv->x, &px));
}

/* the element of W[o0 + l][cg][kh][kw] in [cg][kh][kw][o] (o0 counts from the group's first) */
static KExpr *
conv_weight(Lower *lw, const Conv *cv, KExpr *cg, KExpr *kh, KExpr *kw, KExpr *o0)
{
    KExpr *tap = bin(lw, KB_ADD,
                     bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, cg, ci(lw, cv->d.KH)), kh),
                         ci(lw, cv->d.KW)),
                     kw);
    return bin(lw, KB_ADD, bin(lw, KB_MUL, tap, ci(lw, cv->d.O)),
               bin(lw, KB_ADD, bin(lw, KB_MUL, cv->g, ci(lw, cv->d.Og)), o0));
}

/* the count of spiking channels at pixel q of group g, of this row */
static KExpr *
conv_count_index(Lower *lw, const Conv *cv, KExpr *q)
{
    KExpr *base = bin(lw, KB_MUL, row_of(&cv->ps), ci(lw, cv->d.G * cv->d.H * cv->d.W));
    return bin(lw, KB_ADD, base, bin(lw, KB_ADD, bin(lw, KB_MUL, cv->g, ci(lw, cv->d.H * cv->d.W)), q));
}

/* acc + bias of channels [o0, o0 + lanes) of group g (the interpreter's order: 1 * bias is
 * exact); returns the first channel's number */
static KExpr *
conv_bias(Lower *lw, Cur c, const Conv *cv, KExpr *o0, int t)
{
    KExpr *o = bin(lw, KB_ADD, bin(lw, KB_MUL, cv->g, ci(lw, cv->d.Og)), o0);
    if (cv->bias >= 0)
        tile_fma(lw, c, t, kx_const(lw->p, KT_F64, 1), cv->bias, o, false);
    return o;
}

/* acc + bias, stored to the output pixel (oh, ow) of channels [o0, o0 + lanes) of group g: one
 * channel apart is OH*OW elements apart (NCHW) */
static void
conv_store(Lower *lw, Cur c, const Conv *cv, KExpr *oh, KExpr *ow, KExpr *o0, int t)
{
    KExpr *o = conv_bias(lw, c, cv, o0, t);
    Pos py = cv->ps;
    py.i = bin(lw, KB_ADD, bin(lw, KB_MUL, o, ci(lw, cv->d.OH * cv->d.OW)),
               bin(lw, KB_ADD, bin(lw, KB_MUL, oh, ci(lw, cv->d.OW)), ow));
    tile_store(lw, c, cv->v, &py, cv->d.OH * cv->d.OW, t);
}

/* real-valued input: one tile of output channels [o0, o0 + lanes) of group g at every output
 * pixel, summed over (c, kh, kw) in the interpreter's order (the tile outer: its weights stay in
 * cache over the pixels) */
static void
conv_tile(Lower *lw, Cur c, KExpr *o0, int lanes, const void *ctx)
{
    const Conv *cv = ctx;
    KExpr *oh, *ow, *kh, *kw, *ih, *iw, *cg;
    KStmt *foh = loop(lw, c, "oh", ci(lw, cv->d.OH), false, &oh);
    KStmt *fow = loop(lw, body(foh), "ow", ci(lw, cv->d.OW), false, &ow);
    Cur px = body(fow);
    int t = tile(lw, "acc", lanes);
    s_tile(lw, px, KS_VSET, t, -1, NULL, kx_const(lw->p, KT_F64, 0));
    KStmt *fc = loop(lw, px, "c", ci(lw, cv->d.Cg), false, &cg);
    Cur in = conv_taps(lw, body(fc), cv, oh, ow, &kh, &kw, &ih, &iw);
    tile_fma(lw, in, t, conv_input(lw, cv, cg, ih, iw), cv->w, conv_weight(lw, cv, cg, kh, kw, o0),
             false);
    conv_store(lw, px, cv, oh, ow, o0, t);
}

/* spikes: one tile of the output pixel's channels over the pixel's term list */
static void
conv_term_tile(Lower *lw, Cur c, KExpr *o0, int lanes, const void *ctx)
{
    const Conv *cv = ctx;
    int t = tile(lw, "acc", lanes);
    s_tile(lw, c, KS_VSET, t, -1, NULL, kx_const(lw->p, KT_F64, 0));
    KExpr *j;
    KStmt *fj = loop(lw, c, "j", cv->nterms, false, &j);
    KExpr *ti = bin(lw, KB_ADD, cv->terms, j);
    tile_fma(lw, body(fj), t, kx_load(lw->p, cv->tap_x, ti), cv->w,
             bin(lw, KB_ADD, kx_load(lw->p, cv->tap_w, ti), o0), false);
    conv_store(lw, c, cv, cv->oh, cv->ow, o0, t);
}

/* spikes: per output pixel, its terms in (kh, kw, spiking c in channel order): the listed
 * channels of each tap's input pixel become (weight row, input value) pairs, which every channel
 * tile then sums in one loop (one short loop per tap and tile would cost a mispredicted exit
 * each) */
static void
conv_event_pixels(Lower *lw, Cur c, Conv *cv)
{
    KExpr *oh, *ow, *kh, *kw, *ih, *iw;
    KStmt *foh = loop(lw, c, "oh", ci(lw, cv->d.OH), false, &oh);
    KStmt *fow = loop(lw, body(foh), "ow", ci(lw, cv->d.OW), false, &ow);
    Cur px = body(fow);
    int nv = local(lw, "nterms", KT_I64), qv = local(lw, "qi", KT_I64);
    int cgv = local(lw, "cg", KT_I64);
    s_assign(lw, px, nv, ci(lw, 0));
    Cur in = conv_taps(lw, px, cv, oh, ow, &kh, &kw, &ih, &iw);
    s_assign(lw, in, qv,
             conv_count_index(lw, cv, bin(lw, KB_ADD, bin(lw, KB_MUL, ih, ci(lw, cv->d.W)), iw)));
    KExpr *e;
    KStmt *fe = loop(lw, in, "e", kx_load(lw->p, cv->count, var(lw, qv)), false, &e);
    s_assign(lw, body(fe), cgv,
             kx_load(lw->p, cv->list,
                     bin(lw, KB_ADD, bin(lw, KB_MUL, var(lw, qv), ci(lw, cv->d.Cg)), e)));
    KExpr *cg = var(lw, cgv), *ti = bin(lw, KB_ADD, cv->terms, var(lw, nv));
    /* a listed spike of bits is 1; of bit pairs, its sign is in the entry (conv_list_append);
     * else the input is loaded */
    KExpr *x = NULL;
    if (bits_of(lw, cv->x) == 1) {
        x = kx_const(lw->p, KT_F64, 1);
    } else if (bits_of(lw, cv->x) == 2) {
        KExpr *is_neg = bin(lw, KB_REM, var(lw, cgv), ci(lw, 2));
        x = to(lw, KT_F64, bin(lw, KB_SUB, ci(lw, 1), bin(lw, KB_MUL, ci(lw, 2), is_neg)));
        cg = bin(lw, KB_DIV, var(lw, cgv), ci(lw, 2));
    }
    s_store(lw, body(fe), cv->tap_w, ti, conv_weight(lw, cv, cg, kh, kw, ci(lw, 0)));
    s_store(lw, body(fe), cv->tap_x, ti, x ? x : conv_input(lw, cv, cg, ih, iw));
    s_assign(lw, body(fe), nv, bin(lw, KB_ADD, var(lw, nv), ci(lw, 1)));
    cv->oh = oh;
    cv->ow = ow;
    cv->nterms = var(lw, nv);
    for_tiles(lw, px, cv->d.Og, tile_lanes(lw, CONV_NT), conv_term_tile, cv);
}

/* the batchnorm fused into this conv (fold-batchnorm) on the CPU: over the row the conv has just
 * stored, while it is in cache, channel by channel (its terms the same for the channel's pixels)
 * over contiguous pixels (a loop the compiler can vectorise), in the batchnorm kernel's arithmetic
 * on the same f32 values. (Normalising each tile's lanes as they are stored, channels a pixel
 * apart, is a scalar loop; both measured at parity with the separate kernel on
 * bench/cpu/models/conv_bn.snn, where the convolutions dominate: the gain is the conv's buffer
 * and a launch per batchnorm.) */
static void
batchnorm_row(Lower *lw, Cur c, const Conv *cv)
{
    ValueId bn = lw->epilogue;
    int64_t HW = cv->d.OH * cv->d.OW;
    KExpr *ch, *i;
    KStmt *fc = loop(lw, c, "ch", ci(lw, cv->d.G * cv->d.Og), false, &ch);
    KStmt *fi = loop(lw, body(fc), "i", ci(lw, HW), false, &i);
    Pos pe = cv->ps;
    pe.i = bin(lw, KB_ADD, bin(lw, KB_MUL, ch, ci(lw, HW)), i);
    vstore(lw, body(fi), bn, &pe,
           batchnorm_expr(lw, &lw->m->nodes[bn], ch, vload(lw, bn, &pe)));
}

static void
conv_groups(Lower *lw, Cur c, Conv *cv)
{
    Cur row = c;
    if (cv->d.G > 1) {
        KStmt *fg = loop(lw, c, "g", ci(lw, cv->d.G), false, &cv->g);
        c = body(fg);
    } else {
        cv->g = ci(lw, 0);
    }
    if (cv->list < 0)
        for_tiles(lw, c, cv->d.Og, tile_lanes(lw, CONV_NT), conv_tile, cv);
    else
        conv_event_pixels(lw, c, cv);
    if (lw->is_epilogue_by_row) batchnorm_row(lw, row, cv);
}

/* PyTorch Conv2d gathered per output pixel and channel tile: acc = sum over c of the group, kh,
 * kw (the interpreter's order), then + bias, rounded once */
static void
lower_conv2d(Lower *lw, ValueId v)
{
    Conv cv = conv_geometry(lw, v);
    Cur c = open_rows(lw, v, &cv.ps);
    conv_groups(lw, c, &cv);
}

/* output (channel o of group cv->g, oh, ow) of the row at cv->ps into the one-lane tile t, without
 * the bias (conv_store adds it): summed over (c, kh, kw), the interpreter's order, zeros skipped
 * for spikes */
static void
conv_sum(Lower *lw, Cur c, const Conv *cv, KExpr *oh, KExpr *ow, KExpr *o, int t)
{
    KExpr *cg, *kh, *kw, *ih, *iw;
    s_tile(lw, c, KS_VSET, t, -1, NULL, kx_const(lw->p, KT_F64, 0));
    KStmt *fc = loop(lw, c, "c", ci(lw, cv->d.Cg), false, &cg);
    Cur in = conv_taps(lw, body(fc), cv, oh, ow, &kh, &kw, &ih, &iw);
    tile_fma(lw, in, t, conv_input(lw, cv, cg, ih, iw), cv->w, conv_weight(lw, cv, cg, kh, kw, o),
             is_spike_value(lw, cv->x));
}

/* GPU: one thread per output element (row, group, channel, oh, ow), ow fastest so that
 * neighbouring threads read neighbouring inputs and store neighbouring outputs; a one-lane tile
 * summed over (c, kh, kw), the interpreter's order, zeros skipped for spikes, then + bias. */
static void
lower_conv2d_flat(Lower *lw, ValueId v)
{
    Conv cv = conv_geometry(lw, v);
    const ConvGeom *d = &cv.d;
    int64_t per_row = d->G * d->Og * d->OH * d->OW;
    KExpr *q;
    KStmt *fq = loop(lw, top(lw), "q", bin(lw, KB_MUL, rows_of(lw, v), ci(lw, per_row)), true, &q);
    Cur c = body(fq);
    int owv = local(lw, "ow", KT_I64), ohv = local(lw, "oh", KT_I64);
    int ov = local(lw, "o", KT_I64), gv = local(lw, "g", KT_I64), rv = local(lw, "r", KT_I64);
    s_assign(lw, c, owv, bin(lw, KB_REM, q, ci(lw, d->OW)));
    s_assign(lw, c, ohv, bin(lw, KB_REM, bin(lw, KB_DIV, q, ci(lw, d->OW)), ci(lw, d->OH)));
    s_assign(lw, c, ov,
             bin(lw, KB_REM, bin(lw, KB_DIV, q, ci(lw, d->OW * d->OH)), ci(lw, d->Og)));
    s_assign(lw, c, gv,
             bin(lw, KB_REM, bin(lw, KB_DIV, q, ci(lw, d->OW * d->OH * d->Og)), ci(lw, d->G)));
    s_assign(lw, c, rv, bin(lw, KB_DIV, q, ci(lw, per_row)));
    cv.ps = row_pos(lw, v, var(lw, rv), NULL);
    cv.g = var(lw, gv);
    int t = tile(lw, "acc", 1);
    conv_sum(lw, c, &cv, var(lw, ohv), var(lw, owv), var(lw, ov), t);
    conv_store(lw, c, &cv, var(lw, ohv), var(lw, owv), var(lw, ov), t);
}

/* Layer v (dense or conv, LY_SUMMED) at the position ps of the scan that reads it: the one-lane
 * sum of lower_dense_flat / lower_conv2d_flat for that element (the same terms in the same
 * order, zeros skipped for spikes, then the conv's bias), its statements put at lw->pre, read as
 * the f32 the layer's store would round it to (and on to 16 bits where its output is stored so,
 * Node.astore). */
static KExpr *
summed_value(Lower *lw, ValueId v, Pos *ps)
{
    Cur c = lw->pre;
    if (!c.arr) die("kir: layer %d summed outside a scan", (int)v);
    kernel_add_node(lw, v);
    Pos row;
    memset(&row, 0, sizeof row);
    row.b = pos_b(lw, ps);
    if (!lw->is_static[v]) row.t = pos_t(lw, ps);
    KExpr *i = pos_i(lw, ps);
    int t = tile(lw, "acc", 1);
    if (lw->m->nodes[v].op == OP_DENSE) {
        dense_sum(lw, c, v, &row, i, t);
    } else {
        Conv cv = conv_geometry(lw, v);
        const ConvGeom *d = &cv.d;
        int64_t HW = d->OH * d->OW;
        int ohv = local(lw, "oh", KT_I64), ov = local(lw, "o", KT_I64), gv = local(lw, "g", KT_I64);
        s_assign(lw, c, ohv, bin(lw, KB_REM, bin(lw, KB_DIV, i, ci(lw, d->OW)), ci(lw, d->OH)));
        s_assign(lw, c, ov, bin(lw, KB_REM, bin(lw, KB_DIV, i, ci(lw, HW)), ci(lw, d->Og)));
        s_assign(lw, c, gv, bin(lw, KB_DIV, i, ci(lw, HW * d->Og)));
        cv.ps = row;
        cv.g = var(lw, gv);
        conv_sum(lw, c, &cv, var(lw, ohv), bin(lw, KB_REM, i, ci(lw, d->OW)), var(lw, ov), t);
        conv_bias(lw, c, &cv, var(lw, ov), t);
    }
    KExpr *y = to(lw, KT_F32, var(lw, t));
    WeightStore as = lw->m->nodes[v].astore;
    return as == WSTORE_F32 ? y : kx_un(lw->p, as == WSTORE_F16 ? KU_ROUND_F16 : KU_ROUND_BF16, y);
}

/* building a conv row's spike lists: the locals and sizes an append needs */
typedef struct ConvList {
    Conv *cv;
    int qv, nv;  /* count index, count */
    int64_t HW;
    int ev, chv; /* bit-stored input: the element, its channel */
    KExpr *cg;   /* ... read channel by channel: the channel in the group */
} ConvList;

/* channel cg of group cv->g spikes at input pixel q: list[g][q][count++] = cg; for an input of
 * bit pairs (-1/0/1) cg * 2 + (the spike is -1), its value loaded once here rather than at each
 * of its taps (conv_event_pixels decodes it) */
static void
conv_list_append(Lower *lw, Cur c, const ConvList *cl, KExpr *q, KExpr *cg)
{
    const Conv *cv = cl->cv;
    if (bits_of(lw, cv->x) == 2) {
        KExpr *chan = bin(lw, KB_ADD, bin(lw, KB_MUL, cv->g, ci(lw, cv->d.Cg)), cg);
        Pos px = cv->ps;
        px.i = bin(lw, KB_ADD, bin(lw, KB_MUL, chan, ci(lw, cl->HW)), q);
        KExpr *x = to(lw, KT_I64, vload(lw, cv->x, &px));
        KExpr *is_neg = bin(lw, KB_DIV, bin(lw, KB_SUB, ci(lw, 1), x), ci(lw, 2)); /* +1: 0, -1: 1 */
        cg = bin(lw, KB_ADD, bin(lw, KB_MUL, cg, ci(lw, 2)), is_neg);
    }
    s_assign(lw, c, cl->qv, conv_count_index(lw, cv, q));
    s_assign(lw, c, cl->nv, kx_load(lw->p, cv->count, var(lw, cl->qv)));
    s_store(lw, c, cv->list,
            bin(lw, KB_ADD, bin(lw, KB_MUL, var(lw, cl->qv), ci(lw, cv->d.Cg)), var(lw, cl->nv)), cg);
    s_store(lw, c, cv->count, var(lw, cl->qv), bin(lw, KB_ADD, var(lw, cl->nv), ci(lw, 1)));
}

/* SpikeBody of a bit-stored input read channel by channel: the element is the pixel */
static void
conv_list_pixel(Lower *lw, Cur c, KExpr *q, void *ctx)
{
    const ConvList *cl = ctx;
    conv_list_append(lw, c, cl, q, cl->cg);
}

/* SpikeBody of a bit-stored input: element e of the row is (channel, pixel) */
static void
conv_list_bit(Lower *lw, Cur c, KExpr *e, void *ctx)
{
    ConvList *cl = ctx;
    Conv *cv = cl->cv;
    s_assign(lw, c, cl->ev, e);
    s_assign(lw, c, cl->chv, bin(lw, KB_DIV, var(lw, cl->ev), ci(lw, cl->HW)));
    KExpr *ch = var(lw, cl->chv);
    cv->g = cv->d.G == 1 ? ci(lw, 0) : bin(lw, KB_DIV, ch, ci(lw, cv->d.Cg));
    conv_list_append(lw, c, cl, bin(lw, KB_REM, var(lw, cl->ev), ci(lw, cl->HW)),
                     cv->d.G == 1 ? ch : bin(lw, KB_REM, ch, ci(lw, cv->d.Cg)));
}

/* loops over the input channels of every group (cv->g, *cg) in order; returns their body */
static Cur
conv_channels(Lower *lw, Cur c, Conv *cv, KExpr **cg)
{
    if (cv->d.G == 1) {
        cv->g = ci(lw, 0);
    } else {
        KStmt *fg = loop(lw, c, "g", ci(lw, cv->d.G), false, &cv->g);
        c = body(fg);
    }
    return body(loop(lw, c, "c", ci(lw, cv->d.Cg), false, cg));
}

/* conv2d over spikes: each row first lists, for every input pixel and group, the channels that
 * spike there (count[g][q], list[g][q][n] = cg), then gathers each output pixel over its taps and
 * their listed channels only */
static void
lower_conv2d_events(Lower *lw, ValueId v)
{
    Conv cv = conv_geometry(lw, v);
    bool is_batched = ctx_of(lw, v) == CTX_BATCHED;
    int64_t HW = cv.d.H * cv.d.W, rows = is_batched ? lw->T : 1;
    const char *vn = value_name(lw, v);
    /* channel numbers in bytes where they fit (bit pairs: with the sign, twice the channel): the
     * list is as large as the input */
    int64_t entries = bits_of(lw, cv.x) == 2 ? 2 * cv.d.Cg : cv.d.Cg;
    cv.list = scratch_buf(lw, arena_printf(&lw->p->arena, "%s.spikes", vn),
                          entries <= 256 ? KT_U8 : KT_I64, cv.d.C * HW * rows);
    cv.count = scratch_buf(lw, arena_printf(&lw->p->arena, "%s.nspiking", vn), KT_I64,
                           cv.d.G * HW * rows);
    int64_t nterms = cv.d.KH * cv.d.KW * cv.d.Cg; /* at most, per output pixel */
    cv.tap_w = scratch_buf(lw, arena_printf(&lw->p->arena, "%s.term_w", vn), KT_I64, nterms * rows);
    cv.tap_x = scratch_buf(lw, arena_printf(&lw->p->arena, "%s.term_x", vn), lw->acc, nterms * rows);
    Cur c = open_rows(lw, v, &cv.ps);
    KExpr *row = row_of(&cv.ps), *z, *cg, *q;
    cv.terms = bin(lw, KB_MUL, row, ci(lw, nterms));
    KStmt *fz = loop(lw, c, "z", ci(lw, cv.d.G * HW), false, &z);
    s_store(lw, body(fz), cv.count, bin(lw, KB_ADD, bin(lw, KB_MUL, row, ci(lw, cv.d.G * HW)), z),
            ci(lw, 0));
    ConvList cl = {&cv, local(lw, "qi", KT_I64), local(lw, "n", KT_I64), HW, -1, -1, NULL};
    if (is_bits(lw, cv.x) && HW % (8 / bits_of(lw, cv.x)) == 0) {
        /* channel by channel (each starts on a byte): the pixel is the element, no division */
        Cur in = conv_channels(lw, c, &cv, &cg);
        cl.cg = cg;
        KExpr *chan = bin(lw, KB_ADD, bin(lw, KB_MUL, cv.g, ci(lw, cv.d.Cg)), cg);
        for_bit_spikes(lw, in, cv.x, &cv.ps, bin(lw, KB_MUL, chan, ci(lw, HW)), HW,
                       conv_list_pixel, &cl);
    } else if (is_bits(lw, cv.x)) {
        /* the row's spikes in element order: per pixel the channels still come in order */
        cl.ev = local(lw, "e", KT_I64);
        cl.chv = local(lw, "chan", KT_I64);
        for_bit_spikes(lw, c, cv.x, &cv.ps, ci(lw, 0), cv.d.C * HW, conv_list_bit, &cl);
    } else {
        KStmt *fq = loop(lw, conv_channels(lw, c, &cv, &cg), "q", ci(lw, HW), false, &q);
        int xv = local(lw, "x", KT_F64);
        Pos px = cv.ps;
        KExpr *chan = bin(lw, KB_ADD, bin(lw, KB_MUL, cv.g, ci(lw, cv.d.Cg)), cg);
        px.i = bin(lw, KB_ADD, bin(lw, KB_MUL, chan, ci(lw, HW)), q);
        s_assign(lw, body(fq), xv, to(lw, KT_F64, vload(lw, cv.x, &px)));
        KStmt *nz = s_if(lw, body(fq), bin(lw, KB_NE, var(lw, xv), kx_const(lw->p, KT_F64, 0)));
        conv_list_append(lw, body(nz), &cl, q, cg);
    }
    conv_groups(lw, c, &cv);
}

/* max (NaN propagates, padding never wins), avg (count_include_pad) and sum pooling */
static void
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
static void
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
static void
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
static void
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

/* ---- neurons ---- */


/* what a neuron program's names are in the kernel */
typedef struct NLower {
    const NeuronDef *nd;
    const double *params;
    int *state; /* locals */
    int *let;
    int spike, input, out, refr;
} NLower;

typedef struct NT {
    KExpr *e;
    bool is_folded; /* a parameter-only subtree, folded (the interpreter's NX_NUM) */
} NT;

static KExpr *
as_bool(Lower *lw, KExpr *e)
{
    if (e->type == KT_BOOL)
        return e;
    return bin(lw, KB_NE, e, kx_const(lw->p, e->type, 0));
}

static KExpr *
as_f32(Lower *lw, KExpr *e)
{
    return to(lw, KT_F32, e);
}

/* NExpr → f32 or bool KExpr with the interpreter's F32-mode rounding */
static NT
nlower(Lower *lw, const NLower *nl, const NExpr *e)
{
    NT a[3];
    int na = nexpr_arity(e);
    bool all_folded = true;
    for (int i = 0; i < na; i++) {
        a[i] = nlower(lw, nl, e->args[i]);
        all_folded = all_folded && a[i].is_folded;
    }
    if (e->kind == NX_NUM || e->kind == NX_PARAM || (na > 0 && all_folded))
        return (NT){kx_const(lw->p, KT_F32, nexpr_fold(e, nl->params)), true};
    KProgram *p = lw->p;
    KExpr *r = NULL;
    switch (e->kind) {
    case NX_STATE: r = var(lw, nl->state[e->idx]); break;
    case NX_LOCAL: r = var(lw, nl->let[e->idx]); break;
    case NX_INPUT: r = var(lw, nl->input); break;
    case NX_SPIKE: r = var(lw, nl->spike); break;
    case NX_NEG: r = kx_un(p, KU_NEG, as_f32(lw, a[0].e)); break;
    case NX_NOT: r = kx_un(p, KU_NOT, as_bool(lw, a[0].e)); break;
    case NX_BIN: {
        NxBin op = (NxBin)e->op;
        if (op == NB_AND || op == NB_OR) {
            r = bin(lw, op == NB_AND ? KB_AND : KB_OR, as_bool(lw, a[0].e), as_bool(lw, a[1].e));
            break;
        }
        static const KBin map[] = {[NB_ADD] = KB_ADD, [NB_SUB] = KB_SUB, [NB_MUL] = KB_MUL,
                                   [NB_DIV] = KB_DIV, [NB_LT] = KB_LT,   [NB_LE] = KB_LE,
                                   [NB_GT] = KB_GT,   [NB_GE] = KB_GE,   [NB_EQ] = KB_EQ,
                                   [NB_NE] = KB_NE};
        r = bin(lw, map[op], as_f32(lw, a[0].e), as_f32(lw, a[1].e));
        break;
    }
    case NX_COND:
        /* a folded condition picks its branch now: no side effects, so the same result */
        if (a[0].is_folded) {
            r = a[0].e->num != 0 ? a[1].e : a[2].e;
            break;
        }
        if (a[1].e->type == KT_BOOL && a[2].e->type == KT_BOOL)
            r = kx_select(p, a[0].e->type == KT_BOOL ? a[0].e : as_bool(lw, a[0].e), a[1].e, a[2].e);
        else
            r = kx_select(p, as_bool(lw, a[0].e), as_f32(lw, a[1].e), as_f32(lw, a[2].e));
        break;
    case NX_CALL: {
        KExpr *x = na > 0 ? as_f32(lw, a[0].e) : NULL;
        switch ((NFunc)e->op) {
        case NF_EXP: r = kx_un(p, KU_EXP, x); break;
        case NF_LOG: r = kx_un(p, KU_LOG, x); break;
        case NF_SQRT: r = kx_un(p, KU_SQRT, x); break;
        case NF_TANH: r = kx_un(p, KU_TANH, x); break;
        case NF_SIGMOID: r = kx_un(p, KU_SIGMOID, x); break;
        case NF_ABS: r = kx_un(p, KU_ABS, x); break;
        case NF_FLOOR: r = kx_un(p, KU_FLOOR, x); break;
        case NF_MIN: r = bin(lw, KB_MIN, x, as_f32(lw, a[1].e)); break;
        case NF_MAX: r = bin(lw, KB_MAX, x, as_f32(lw, a[1].e)); break;
        case NF_POW: r = bin(lw, KB_POW, x, as_f32(lw, a[1].e)); break;
        case NF_CLAMP:
            r = bin(lw, KB_MIN, bin(lw, KB_MAX, x, as_f32(lw, a[1].e)), as_f32(lw, a[2].e));
            break;
        case NF_SELECT:
            if (a[0].is_folded)
                r = a[0].e->num != 0 ? as_f32(lw, a[1].e) : as_f32(lw, a[2].e);
            else
                r = kx_select(p, as_bool(lw, a[0].e), as_f32(lw, a[1].e), as_f32(lw, a[2].e));
            break;
        case NF_FLOAT32: r = x; break; /* kernels compute in float32 */
        case NF_COUNT_: unreachable();
        }
        break;
    }
    default: unreachable();
    }
    return (NT){r, false};
}

static KExpr *
nexpr(Lower *lw, const NLower *nl, const NExpr *e)
{
    return nlower(lw, nl, e).e;
}

/* floor(x) as a step count, saturated: NaN and negatives give 0 (the interpreter's rule) */
static KExpr *
refractory_steps(Lower *lw, KExpr *x)
{
    KProgram *p = lw->p;
    x = as_f32(lw, x);
    if (x->kind == KX_CONST) {
        double c = x->num;
        return ci(lw, !(c >= 1) ? 0 : c > 1e9 ? 1000000000 : (int64_t)floor(c));
    }
    KExpr *steps = kx_select(p, bin(lw, KB_GT, x, kx_const(p, KT_F32, 1e9)), ci(lw, 1000000000),
                             to(lw, KT_I64, kx_un(p, KU_FLOOR, x)));
    return kx_select(p, bin(lw, KB_GE, x, kx_const(p, KT_F32, 1)), steps, ci(lw, 0));
}

/* One step of the neuron program (the interpreter's eval_neuron for one neuron). */
static void
neuron_step(Lower *lw, Cur c, const NLower *nl)
{
    const NeuronDef *nd = nl->nd;
    KProgram *p = lw->p;
    KExpr *zero = kx_const(p, KT_F32, 0);
    const NExpr *output_e = NULL;
    for (int s = 0; s < nd->nstmts; s++)
        if (nd->stmts[s].kind == NS_OUTPUT)
            output_e = nd->stmts[s].e;
    if (nl->out >= 0)
        s_assign(lw, c, nl->out, zero);
    Cur run = c;
    if (nl->refr >= 0) {
        /* refractory: counter down, no spike, state held; the output expression still runs */
        KStmt *s = s_if(lw, c, bin(lw, KB_GT, var(lw, nl->refr), ci(lw, 0)));
        s_assign(lw, body(s), nl->refr, bin(lw, KB_SUB, var(lw, nl->refr), ci(lw, 1)));
        s_assign(lw, body(s), nl->spike, zero);
        if (output_e && nl->out >= 0)
            s_assign(lw, body(s), nl->out, nexpr(lw, nl, output_e));
        run = els(s);
    }
    for (int s = 0; s < nd->nstmts; s++) {
        const NStmt *st = &nd->stmts[s];
        int target = st->kind == NS_OUTPUT || st->kind == NS_FIRE || st->kind == NS_FIRE_DOWN ||
                             st->kind == NS_REFRACTORY
                         ? -1
                         : st->is_local ? nl->let[st->var] : nl->state[st->var];
        KExpr *spike = var(lw, nl->spike);
        KExpr *spiked = bin(lw, KB_NE, spike, zero);
        switch (st->kind) {
        case NS_ASSIGN: s_assign(lw, run, target, nexpr(lw, nl, st->e)); break;
        case NS_FIRE:
            s_assign(lw, run, nl->spike,
                     kx_select(p, as_bool(lw, nexpr(lw, nl, st->e)), kx_const(p, KT_F32, 1), zero));
            break;
        case NS_FIRE_DOWN:
            s_assign(lw, run, nl->spike,
                     kx_select(p,
                               bin(lw, KB_AND, bin(lw, KB_EQ, spike, zero),
                                   as_bool(lw, nexpr(lw, nl, st->e))),
                               kx_const(p, KT_F32, -1), spike));
            break;
        case NS_RESET_TO: {
            KStmt *i = s_if(lw, run, spiked);
            s_assign(lw, body(i), target, nexpr(lw, nl, st->e));
            break;
        }
        case NS_RESET_SUB:
            s_assign(lw, run, target,
                     bin(lw, KB_SUB, var(lw, target),
                         bin(lw, KB_MUL, spike, as_f32(lw, nexpr(lw, nl, st->e)))));
            break;
        case NS_REFRACTORY:
            if (nl->refr >= 0) {
                KStmt *i = s_if(lw, run, spiked);
                s_assign(lw, body(i), nl->refr, refractory_steps(lw, nexpr(lw, nl, st->e)));
            }
            break;
        case NS_OUTPUT:
            if (nl->out >= 0)
                s_assign(lw, run, nl->out, nexpr(lw, nl, st->e));
            break;
        }
    }
}

/* the state probes (OP_STATE users) of neuron v: their node and local */
static int
find_probes(Lower *lw, ValueId v, const NLower *nl, ValueId *probe, int *probe_local)
{
    const Module *m = lw->m;
    int n = 0;
    for (ValueId u = 0; u < m->nnodes; u++) {
        const Node *pn = &m->nodes[u];
        if (pn->op != OP_STATE || pn->args[0] != v)
            continue;
        const char *name = pn->attrs[op_attr_index(OP_STATE, "var")].s;
        int loc = -1;
        for (int k = 0; k < nl->nd->nstates && loc < 0; k++)
            if (strcmp(nl->nd->states[k].name, name) == 0)
                loc = nl->state[k];
        for (int k = 0; k < nl->nd->nlocals && loc < 0; k++)
            if (strcmp(nl->nd->locals[k], name) == 0)
                loc = nl->let[k];
        if (loc < 0)
            die("kir: state probe %d names no state of its neuron", (int)u);
        probe[n] = u;
        probe_local[n++] = loc;
    }
    return n;
}

/* Per-neuron spike counts of layer v for the firing rates (KProgram.stats): a local counter of
 * |spike| over the steps, stored to an i64 [B*n] buffer once after the t loop ft, or, in a recurrent
 * region (ft NULL), reloaded and stored at every step (zero at step 0). Counts are at most T, so the
 * sums the run functions take are exact in any order. */
/* 1 where a neuron spiked (its spike local is 0, 1 or -1: fire and fire down), else 0, as an i64:
 * a compare and a select (no float-to-integer conversion, which SIMD lanes do slowly) */
static KExpr *
spike_one(Lower *lw, KExpr *spike)
{
    return kx_select(lw->p, bin(lw, KB_NE, spike, kx_const(lw->p, KT_F32, 0)), ci(lw, 1), ci(lw, 0));
}

/* layer v's spike-count buffer (KStat: the run functions sum its elements). On the CPU, n counters
 * per sample, each counting at most max spikes per run: a byte where max fits one (an eighth of
 * the bytes written: the LIF layer's 8 MiB of int64 counters were a ninth of its traffic), else
 * int64. On the GPU one int64 total that every run adds to (KS_COUNT): a block adds its threads'
 * sum once, where per-neuron counters were 8 bytes read and written per neuron and run (26 MB of
 * the conv SNN's s1 at batch 64). */
static int
spike_count_buffer(Lower *lw, ValueId v, int64_t n, int64_t max)
{
    KProgram *p = lw->p;
    bool is_acc = p->target == KTARGET_GPU;
    KSize size = is_acc ? (KSize){0, 1} : (KSize){n, 0};
    int buf = add_buf(lw, arena_printf(&p->arena, "%s.nspikes", value_name(lw, v)),
                      !is_acc && max <= 255 ? KT_U8 : KT_I64, size, KB_TEMP, -1, -1);
    /* every neuron j stores its count; a recurrent region's step 0 starts from 0, not a load. On
     * the GPU the total starts from what the buffer holds: it accumulates across runs */
    p->bufs[buf].is_written_first = !is_acc;
    p->bufs[buf].is_accumulator = is_acc;
    p->bufs[buf].count_max = is_acc ? max : 0;
    p->stats = arena_grow(&p->arena, p->stats, (size_t)p->nstats * sizeof *p->stats,
                          (size_t)(p->nstats + 1) * sizeof *p->stats);
    p->stats[p->nstats++] = (KStat){v, buf};
    return buf;
}

/* the layer's count of one neuron (pooled window) into its counter buf: the CPU's per-neuron
 * counter j, the GPU's total */
static void
s_count(Lower *lw, Cur c, int buf, KExpr *j, KExpr *count)
{
    if (!lw->p->bufs[buf].is_accumulator) {
        s_store(lw, c, buf, j, count);
        return;
    }
    KStmt *s = st_new(lw, KS_COUNT);
    s->buf = buf;
    s->a = count;
    put(lw, c, s);
}

static void
count_spikes(Lower *lw, ValueId v, Cur c, Cur step, KStmt *ft, KExpr *jv, KExpr *spike)
{
    KProgram *p = lw->p;
    int buf = spike_count_buffer(lw, v, lw->vs[v].numel, lw->T);
    if (p->bufs[buf].is_accumulator) {
        /* the GPU: each step's spike into the thread's sum (cuda_gen.c), nothing else live across
         * the steps (a count local of the neuron's made ptxas spill around the double division's
         * slow-path call in the conv SNN's pooled scans) */
        s_count(lw, step, buf, jv, spike_one(lw, spike));
        return;
    }
    int cnt = local(lw, "nspikes", KT_I64);
    if (ft) {
        /* before the t loop: c's last statement is ft */
        KStmt *init = st_new(lw, KS_ASSIGN);
        init->var = cnt;
        init->a = ci(lw, 0);
        (*c.arr)[*c.n - 1] = init;
        put(lw, c, ft);
    } else {
        KStmt *first = s_if(lw, c, bin(lw, KB_EQ, kx_kind(p, KX_STEP), ci(lw, 0)));
        s_assign(lw, body(first), cnt, ci(lw, 0));
        s_assign(lw, els(first), cnt, kx_load(p, buf, jv));
        /* the reload must come before the step's statements: move it to the front of c */
        KStmt **arr = *c.arr;
        memmove(arr + 1, arr, (size_t)(*c.n - 1) * sizeof *arr);
        arr[0] = first;
    }
    s_assign(lw, step, cnt, bin(lw, KB_ADD, var(lw, cnt), spike_one(lw, spike)));
    s_count(lw, c, buf, jv, var(lw, cnt));
}

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

static void
neuron_copy(Lower *lw, const Node *n, const char *suffix, NCopy *cp)
{
    KProgram *p = lw->p;
    const NeuronDef *nd = lw->m->neurons[n->neuron];
    NLower nl = {nd, n->params, NULL, NULL, -1, -1, -1, -1};
    if (!nl.params) {
        double *defaults = arena_alloc(&p->arena, (size_t)(nd->nparams + 1) * sizeof *defaults);
        for (int i = 0; i < nd->nparams; i++)
            defaults[i] = nd->params[i].def;
        nl.params = defaults;
    }
#define NAMED(x) (suffix[0] ? arena_printf(&p->arena, "%s%s", (x), suffix) : (x))
    nl.state = arena_alloc(&p->arena, (size_t)(nd->nstates + 1) * sizeof *nl.state);
    nl.let = arena_alloc(&p->arena, (size_t)(nd->nlocals + 1) * sizeof *nl.let);
    for (int k = 0; k < nd->nstates; k++)
        nl.state[k] = local(lw, NAMED(nd->states[k].name), KT_F32);
    for (int k = 0; k < nd->nlocals; k++)
        nl.let[k] = local(lw, NAMED(nd->locals[k]), KT_F32);
    nl.spike = local(lw, NAMED("spike"), KT_F32);
    bool has_refractory = nd->has_refractory, has_output = nd->has_output;
    for (int s = 0; s < nd->nstmts; s++) {
        has_refractory = has_refractory || nd->stmts[s].kind == NS_REFRACTORY;
        has_output = has_output || nd->stmts[s].kind == NS_OUTPUT;
    }
    if (has_refractory)
        nl.refr = local(lw, NAMED("refr"), KT_I64);
    if (has_output)
        nl.out = local(lw, NAMED("out"), KT_F32);
    nl.input = local(lw, NAMED("I"), KT_F32);
#undef NAMED
    int ncarry = nd->nstates + nd->nlocals + 1 + (has_refractory ? 1 : 0);
    int *carry = arena_alloc(&p->arena, (size_t)ncarry * sizeof *carry);
    KExpr **init = arena_alloc(&p->arena, (size_t)ncarry * sizeof *init);
    int nc = 0;
    for (int k = 0; k < nd->nstates; k++) {
        const NExpr *ie = nd->states[k].init;
        carry[nc] = nl.state[k];
        init[nc++] = kx_const(p, KT_F32, ie ? nexpr_fold(ie, nl.params) : 0.0);
    }
    for (int k = 0; k < nd->nlocals; k++) {
        carry[nc] = nl.let[k];
        init[nc++] = kx_const(p, KT_F32, 0);
    }
    carry[nc] = nl.spike;
    init[nc++] = kx_const(p, KT_F32, 0);
    if (has_refractory) {
        carry[nc] = nl.refr;
        init[nc++] = ci(lw, 0);
    }
    *cp = (NCopy){nl, ncarry, carry, init, has_output};
}

/* A neuron layer fused into the pooling that follows (fuse s into p; ir_fusion_problem: 0/1
 * spikes, whole windows, outside recurrence): parallel over the pooled elements (b, ch, oh, ow),
 * the window's K neurons scanned side by side, each with its own copy of the state, and at every
 * step only the pooled value stored: no spike tensor, no read-modify-write. The window's neurons
 * share ch, so a fused batchnorm's per-channel terms are computed once (Pos.ch). Spike counts are
 * kept per window (their sum is the layer's count). */
static void
lower_neuron_pooled(Lower *lw, ValueId v, ValueId pool)
{
    const Module *m = lw->m;
    const Node *n = &m->nodes[v], *pn = &m->nodes[pool];
    KProgram *p = lw->p;
    int64_t numel = lw->vs[v].numel, per = lw->vs[pool].numel;
    int64_t W = n->type.dims[2], OH = pn->type.dims[1], OW = pn->type.dims[2];
    int KH = (int)node_attr_i(pn, "kernel", 0), KW = (int)node_attr_i(pn, "kernel", 1), K = KH * KW;
    bool is_static_input = lw->is_static[n->args[0]];
    KExpr *jp;
    KStmt *fjp = loop(lw, top(lw), "jp", bin(lw, KB_MUL, kx_kind(p, KX_BATCH), ci(lw, per)), true,
                      &jp);
    fjp->is_lanes = true;
    Cur c = body(fjp);
    /* jp = ((b*C + ch)*OH + oh)*OW + ow; with whole windows (H = OH*KH, W = OW*KW) the window's
     * first neuron b*numel + ch*H*W + oh*KH*W + ow*KW is jp*KW + (jp / OW)*(KH - 1)*W: one
     * division (per lane, a scalar one) */
    int chv = local(lw, "ch", KT_I64), base = local(lw, "i0", KT_I64);
    int64_t C = n->type.dims[0];
    s_assign(lw, c, base,
             bin(lw, KB_ADD, bin(lw, KB_MUL, jp, ci(lw, KW)),
                 bin(lw, KB_MUL, bin(lw, KB_DIV, jp, ci(lw, OW)), ci(lw, (KH - 1) * W))));
    s_assign(lw, c, chv, bin(lw, KB_REM, bin(lw, KB_DIV, jp, ci(lw, OH * OW)), ci(lw, C)));
    /* one counter per window: the run functions sum every counter of the layer */
    int cbuf = spike_count_buffer(lw, v, per, (int64_t)lw->T * K);
    bool is_total = p->bufs[cbuf].is_accumulator; /* the GPU's: as in count_spikes */
    int cnt = is_total ? -1 : local(lw, "nspikes", KT_I64);
    if (!is_total) s_assign(lw, c, cnt, ci(lw, 0));
    NCopy *cp = arena_alloc(&p->arena, (size_t)K * sizeof *cp);
    int *jl = arena_alloc(&p->arena, (size_t)K * sizeof *jl);
    Pos *ps = arena_alloc(&p->arena, (size_t)K * sizeof *ps);
    for (int e = 0; e < K; e++) {
        const char *sfx = arena_printf(&p->arena, ".%d", e);
        neuron_copy(lw, n, sfx, &cp[e]);
        jl[e] = local(lw, arena_printf(&p->arena, "j%s", sfx), KT_I64);
        s_assign(lw, c, jl[e], bin(lw, KB_ADD, var(lw, base), ci(lw, (e / KW) * W + e % KW)));
        for (int k = 0; k < cp[e].ncarry; k++)
            s_assign(lw, c, cp[e].carry[k], cp[e].init[k]);
        memset(&ps[e], 0, sizeof ps[e]);
        ps[e].j = var(lw, jl[e]);
        ps[e].jn = numel;
        ps[e].ch = var(lw, chv);
        lw->pre = c;
        if (is_static_input)
            s_assign(lw, c, cp[e].nl.input, as_f32(lw, vload(lw, n->args[0], &ps[e])));
    }
    lw->pre = (Cur){NULL, NULL};
    KExpr *tv;
    Cur step = body(loop(lw, c, "t", ci(lw, lw->T), false, &tv));
    int pv = local(lw, "pooled", KT_F64);
    for (int e = 0; e < K; e++) {
        ps[e].t = tv;
        lw->pre = step;
        if (!is_static_input)
            s_assign(lw, step, cp[e].nl.input, as_f32(lw, vload(lw, n->args[0], &ps[e])));
        lw->pre = (Cur){NULL, NULL};
        neuron_step(lw, step, &cp[e].nl);
        KExpr *y = to(lw, KT_F64, var(lw, cp[e].nl.spike));
        /* max of 0/1 spikes; sums of at most K of them are exact */
        s_assign(lw, step, pv,
                 e == 0                       ? y
                 : pn->op == OP_MAXPOOL2D ? bin(lw, KB_MAX, var(lw, pv), y)
                                          : bin(lw, KB_ADD, var(lw, pv), y));
        KExpr *one = spike_one(lw, var(lw, cp[e].nl.spike));
        if (is_total)
            s_count(lw, step, cbuf, jp, one);
        else
            s_assign(lw, step, cnt, bin(lw, KB_ADD, var(lw, cnt), one));
    }
    KExpr *pooled = var(lw, pv);
    if (pn->op == OP_AVGPOOL2D)
        pooled = bin(lw, KB_DIV, pooled, kx_const(p, KT_F64, (double)K));
    Pos pp = {0};
    pp.t = tv;
    pp.j = jp;
    pp.jn = per;
    vstore(lw, step, pool, &pp, to(lw, KT_F32, pooled));
    if (!is_total) s_store(lw, c, cbuf, jp, var(lw, cnt));
    kernel_add_node(lw, pool);
}

/* The readout ro of neuron layer v (count, mean, last, max: reduced over t into obuf[j] = [B][n];
 * sequence: obuf[b][t][i]) from the scan's value at each step, as lower_readout and lower_sequence
 * compute it from the layer's buffer: the value through the buffer's element type, then f64. c is
 * the neuron's body, ft its t loop (c's last statement), step the loop's body; fused_readout_end
 * stores the reduced value once everything around the loop is in place. */
static int
fused_readout(Lower *lw, ValueId v, ValueId ro, int obuf, Cur c, Cur step, KStmt *ft, KExpr *jv,
              KExpr *value)
{
    KProgram *p = lw->p;
    const Node *rn = &lw->m->nodes[ro];
    int64_t numel = lw->vs[v].numel;
    KExpr *x = to(lw, KT_F64, to(lw, ktype_of(lw->m->nodes[v].type.dtype), value));
    KExpr *tv = var(lw, ft->var);
    if (rn->op == OP_SEQUENCE) {
        /* obuf[(b*T + t)*n + i] with b = j / n, i = j % n */
        KExpr *b = bin(lw, KB_DIV, jv, ci(lw, numel)), *i = bin(lw, KB_REM, jv, ci(lw, numel));
        KExpr *o = bin(lw, KB_ADD, bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, b, ci(lw, lw->T)), tv),
                                       ci(lw, numel)),
                       i);
        s_store(lw, step, obuf, o, to(lw, KT_F32, x));
        return -1;
    }
    int acc = local(lw, "acc", KT_F64), xv = local(lw, "x", KT_F64);
    /* before the t loop: c's last statement is ft */
    KStmt *init = st_new(lw, KS_ASSIGN);
    init->var = acc;
    init->a = kx_const(p, KT_F64, 0);
    (*c.arr)[*c.n - 1] = init;
    put(lw, c, ft);
    s_assign(lw, step, xv, x);
    KExpr *X = var(lw, xv), *A = var(lw, acc);
    switch (rn->op) {
    case OP_COUNT:
    case OP_MEAN: s_assign(lw, step, acc, bin(lw, KB_ADD, A, X)); break;
    case OP_LAST: s_assign(lw, step, acc, X); break;
    case OP_MAX: {
        KExpr *cond = bin(lw, KB_OR, bin(lw, KB_EQ, tv, ci(lw, 0)),
                          bin(lw, KB_OR, bin(lw, KB_GT, X, A), bin(lw, KB_NE, X, X)));
        s_assign(lw, body(s_if(lw, step, cond)), acc, X);
        break;
    }
    default: unreachable();
    }
    return acc;
}

/* after fused_readout (acc: what it returned) and anything else that goes around the t loop: the
 * reduced value out */
static void
fused_readout_end(Lower *lw, ValueId ro, int obuf, Cur c, KExpr *jv, int acc)
{
    const Node *rn = &lw->m->nodes[ro];
    if (acc < 0) return; /* a sequence: stored at every step */
    KExpr *y = var(lw, acc);
    if (rn->op == OP_MEAN)
        y = bin(lw, KB_DIV, y, kx_const(lw->p, KT_F64, lw->T));
    s_store(lw, c, obuf, jv, to(lw, KT_F32, y));
}

/* A neuron layer: parallel over the B*numel neurons. Outside a recurrent region the T steps run in
 * one loop with the state in locals; inside one, one step per launch with the state kept in
 * KB_TEMP buffers between steps (initialised at step 0). Fused into its readout (ro >= 0, fuse s
 * into out: never in a recurrent region), the scan computes the output obuf itself, reading each
 * step's value as the readout would read it from the layer's buffer (through the buffer's type). */
static void
lower_neuron(Lower *lw, ValueId v, ValueId ro, int obuf)
{
    const Module *m = lw->m;
    const Node *n = &m->nodes[v];
    KProgram *p = lw->p;
    int64_t numel = lw->vs[v].numel;
    bool is_step = lw->region[v] >= 0;
    bool is_static_input = !is_step && lw->is_static[n->args[0]];
    KExpr *bn = bin(lw, KB_MUL, kx_kind(p, KX_BATCH), ci(lw, numel)), *jv;
    KStmt *fj = loop(lw, top(lw), "j", bn, true, &jv);
    fj->is_lanes = true;
    Cur c = body(fj);
    NCopy cp;
    neuron_copy(lw, n, "", &cp);
    NLower nl = cp.nl;
    int ncarry = cp.ncarry, *carry = cp.carry;
    KExpr **init = cp.init;
    bool has_output = cp.has_output;

    ValueId *probe = arena_alloc(&p->arena, (size_t)m->nnodes * sizeof *probe);
    int *probe_local = arena_alloc(&p->arena, (size_t)m->nnodes * sizeof *probe_local);
    int nprobes = find_probes(lw, v, &nl, probe, probe_local);

    Pos ps = {0};
    ps.j = jv;
    ps.jn = numel;
    Cur step;
    KStmt *ft = NULL; /* the t loop (outside recurrent regions) */
    int *sbuf = NULL;
    if (is_step) {
        sbuf = arena_alloc(&p->arena, (size_t)ncarry * sizeof *sbuf);
        /* state buffers were added with the value's buffers (see plan_buffers) */
        for (int k = 0; k < ncarry; k++)
            sbuf[k] = lw->vs[v].buf + 1 + k;
        KStmt *first = s_if(lw, c, bin(lw, KB_EQ, kx_kind(p, KX_STEP), ci(lw, 0)));
        for (int k = 0; k < ncarry; k++) {
            s_assign(lw, body(first), carry[k], init[k]);
            s_assign(lw, els(first), carry[k], kx_load(p, sbuf[k], jv));
        }
        ps.t = kx_kind(p, KX_STEP);
        step = c;
    } else {
        for (int k = 0; k < ncarry; k++)
            s_assign(lw, c, carry[k], init[k]);
        /* an input that is the same at every step (a static value, or one computed from static
         * values where it is loaded) is loaded once, before the steps */
        lw->pre = c;
        if (is_static_input)
            s_assign(lw, c, nl.input, as_f32(lw, vload(lw, n->args[0], &ps)));
        KExpr *tv;
        ft = loop(lw, c, "t", ci(lw, lw->T), false, &tv);
        ps.t = tv;
        step = body(ft);
    }
    lw->pre = step;
    if (!is_static_input)
        s_assign(lw, step, nl.input, as_f32(lw, vload(lw, n->args[0], &ps)));
    lw->pre = (Cur){NULL, NULL};
    neuron_step(lw, step, &nl);
    KExpr *value = has_output ? var(lw, nl.out) : var(lw, nl.spike);
    int acc = -1;
    if (ro < 0)
        vstore(lw, step, v, &ps, value);
    else
        acc = fused_readout(lw, v, ro, obuf, c, step, ft, jv, value);
    for (int k = 0; k < nprobes; k++)
        vstore(lw, step, probe[k], &ps, var(lw, probe_local[k]));
    if (is_step)
        for (int k = 0; k < ncarry; k++)
            s_store(lw, c, sbuf[k], jv, var(lw, carry[k]));
    if (!has_output)
        count_spikes(lw, v, c, step, ft, jv, var(lw, nl.spike));
    if (ro >= 0)
        fused_readout_end(lw, ro, obuf, c, jv, acc);
    /* the kernel computes its probes too */
    for (int k = 0; k < nprobes; k++)
        kernel_add_node(lw, probe[k]);
}

/* the neuron's carried locals in lower_neuron's order: states, lets, spike, refractory counter */
static int
neuron_ncarry(const NeuronDef *nd, bool *has_refractory)
{
    bool r = nd->has_refractory;
    for (int s = 0; s < nd->nstmts; s++)
        r = r || nd->stmts[s].kind == NS_REFRACTORY;
    *has_refractory = r;
    return nd->nstates + nd->nlocals + 1 + (r ? 1 : 0);
}

/* ---- readouts and outputs ---- */

static bool
is_step_readout(Op op)
{
    return op == OP_COUNT || op == OP_MEAN || op == OP_LAST || op == OP_MAX;
}

/* count/mean/last/max: acc over t in f64 (max and last keep the value), out[b][i] = (f32) acc */
static void
lower_readout(Lower *lw, ValueId v, int obuf)
{
    const Node *n = &lw->m->nodes[v];
    KProgram *p = lw->p;
    ValueId x = n->args[0];
    int64_t numel = lw->vs[x].numel;
    KExpr *jv, *tv;
    KStmt *fj = loop(lw, top(lw), "j", bin(lw, KB_MUL, kx_kind(p, KX_BATCH), ci(lw, numel)), true,
                     &jv);
    fj->is_lanes = true;
    int acc = local(lw, "acc", KT_F64);
    s_assign(lw, body(fj), acc, kx_const(p, KT_F64, 0));
    KStmt *ft = loop(lw, body(fj), "t", ci(lw, lw->T), false, &tv);
    Pos ps = {0};
    ps.j = jv;
    ps.jn = numel;
    ps.t = tv;
    int xv = local(lw, "x", KT_F64);
    s_assign(lw, body(ft), xv, to(lw, KT_F64, vload(lw, x, &ps)));
    KExpr *X = var(lw, xv), *A = var(lw, acc);
    switch (n->op) {
    case OP_COUNT:
    case OP_MEAN: s_assign(lw, body(ft), acc, bin(lw, KB_ADD, A, X)); break;
    case OP_LAST: s_assign(lw, body(ft), acc, X); break;
    case OP_MAX: {
        KExpr *c = bin(lw, KB_OR, bin(lw, KB_EQ, tv, ci(lw, 0)),
                       bin(lw, KB_OR, bin(lw, KB_GT, X, A), bin(lw, KB_NE, X, X)));
        KStmt *s = s_if(lw, body(ft), c);
        s_assign(lw, body(s), acc, X);
        break;
    }
    default: unreachable();
    }
    KExpr *y = var(lw, acc);
    if (n->op == OP_MEAN)
        y = bin(lw, KB_DIV, y, kx_const(p, KT_F64, lw->T));
    s_store(lw, body(fj), obuf, jv, to(lw, KT_F32, y));
}

/* out[b][t][i] = x at (t, b, i); without a time axis out[b][i] = x at the last step */
static void
lower_sequence(Lower *lw, ValueId x, int obuf, bool has_time)
{
    KProgram *p = lw->p;
    int64_t numel = lw->vs[x].numel;
    KExpr *bv, *tv, *iv;
    if (p->target == KTARGET_GPU) {
        /* a thread per output element: (b, t, i), i fastest */
        int64_t steps = has_time ? lw->T : 1;
        KExpr *q;
        Cur c = body(loop(lw, top(lw), "q",
                          bin(lw, KB_MUL, kx_kind(p, KX_BATCH), ci(lw, steps * numel)), true, &q));
        int iiv = local(lw, "i", KT_I64), tiv = local(lw, "t", KT_I64), biv = local(lw, "b", KT_I64);
        s_assign(lw, c, iiv, bin(lw, KB_REM, q, ci(lw, numel)));
        s_assign(lw, c, tiv, has_time ? bin(lw, KB_REM, bin(lw, KB_DIV, q, ci(lw, numel)), ci(lw, lw->T))
                                      : ci(lw, lw->T - 1));
        s_assign(lw, c, biv, bin(lw, KB_DIV, q, ci(lw, steps * numel)));
        Pos ps = {0};
        ps.b = var(lw, biv);
        ps.t = var(lw, tiv);
        ps.i = var(lw, iiv);
        s_store(lw, c, obuf, q, to(lw, KT_F32, vload(lw, x, &ps)));
        return;
    }
    KStmt *fb = loop(lw, top(lw), "b", kx_kind(p, KX_BATCH), true, &bv);
    Cur c = body(fb);
    Pos ps = {0};
    ps.b = bv;
    KExpr *o;
    if (has_time) {
        KStmt *ft = loop(lw, c, "t", ci(lw, lw->T), false, &tv);
        c = body(ft);
        ps.t = tv;
        o = bin(lw, KB_ADD, bin(lw, KB_MUL, bv, ci(lw, lw->T)), tv);
    } else {
        ps.t = ci(lw, lw->T - 1);
        o = bv;
    }
    KStmt *fi = loop(lw, c, "i", ci(lw, numel), false, &iv);
    ps.i = iv;
    s_store(lw, body(fi), obuf, bin(lw, KB_ADD, bin(lw, KB_MUL, o, ci(lw, numel)), iv),
            to(lw, KT_F32, vload(lw, x, &ps)));
}

/* ---- analysis: static values, recurrent regions, kernel order ---- */

/* Tarjan's strongly connected components over all edges (delay edges included), iteratively. */
typedef struct Scc {
    const Module *m;
    int *index, *low, *comp, *stack, nstack, counter, ncomp;
    bool *on_stack;
    int **users;
    int *nusers;
} Scc;

static void
scc_visit(Scc *s, int root)
{
    /* explicit DFS stack of (node, next user position) */
    size_t n = (size_t)(s->m->nnodes > 0 ? s->m->nnodes : 0) + 1;
    int *vs = malloc(n * sizeof *vs), *pos = malloc(n * sizeof *pos);
    if (!vs || !pos)
        die("out of memory");
    int depth = 0;
    vs[0] = root;
    pos[0] = 0;
    s->index[root] = s->low[root] = s->counter++;
    s->stack[s->nstack++] = root;
    s->on_stack[root] = true;
    while (depth >= 0) {
        int v = vs[depth];
        if (pos[depth] < s->nusers[v]) {
            int w = s->users[v][pos[depth]++];
            if (s->index[w] < 0) {
                s->index[w] = s->low[w] = s->counter++;
                s->stack[s->nstack++] = w;
                s->on_stack[w] = true;
                depth++;
                vs[depth] = w;
                pos[depth] = 0;
            } else if (s->on_stack[w] && s->index[w] < s->low[v]) {
                s->low[v] = s->index[w];
            }
            continue;
        }
        if (s->low[v] == s->index[v]) {
            int w;
            do {
                w = s->stack[--s->nstack];
                s->on_stack[w] = false;
                s->comp[w] = s->ncomp;
            } while (w != v);
            s->ncomp++;
        }
        depth--;
        if (depth >= 0 && s->low[v] < s->low[vs[depth]])
            s->low[vs[depth]] = s->low[v];
    }
    free(vs);
    free(pos);
}

/* Fills lw->region and writes the kernel order: operands first (except through a delay inside a
 * region), each recurrent region contiguous. Returns the count. */
static int
schedule_order(Lower *lw, const ValueId *topo, ValueId *out)
{
    const Module *m = lw->m;
    int n = m->nnodes;
    size_t nn = (size_t)(n > 0 ? n : 0) + 1;
    Scc s = {0};
    s.m = m;
    s.index = malloc(nn * sizeof(int));
    s.low = malloc(nn * sizeof(int));
    s.comp = malloc(nn * sizeof(int));
    s.stack = malloc(nn * sizeof(int));
    s.on_stack = calloc(nn, sizeof(bool));
    s.users = calloc(nn, sizeof(int *));
    s.nusers = calloc(nn, sizeof(int));
    int *rank = malloc(nn * sizeof(int));
    if (!s.index || !s.low || !s.comp || !s.stack || !s.on_stack || !s.users || !s.nusers || !rank)
        die("out of memory");
    for (int v = 0; v < n; v++) {
        s.index[v] = -1;
        for (int a = 0; a < m->nodes[v].nargs; a++) {
            int u = m->nodes[v].args[a];
            s.users[u] = realloc(s.users[u], (size_t)(s.nusers[u] + 1) * sizeof(int));
            if (!s.users[u])
                die("out of memory");
            s.users[u][s.nusers[u]++] = v;
        }
    }
    for (int k = 0; k < n; k++)
        rank[topo[k]] = k;
    for (int k = 0; k < n; k++)
        if (s.index[topo[k]] < 0)
            scc_visit(&s, topo[k]);
    /* size of each component; self loops make a one-node component recurrent too */
    int *size = calloc((size_t)s.ncomp + 1, sizeof(int));
    bool *rec = calloc((size_t)s.ncomp + 1, sizeof(bool));
    if (!size || !rec)
        die("out of memory");
    for (int v = 0; v < n; v++) {
        size[s.comp[v]]++;
        for (int a = 0; a < m->nodes[v].nargs; a++)
            if (m->nodes[v].args[a] == v)
                rec[s.comp[v]] = true;
    }
    for (int v = 0; v < n; v++)
        lw->region[v] = rec[s.comp[v]] || size[s.comp[v]] > 1 ? s.comp[v] : -1;
    /* not batched over time (no time-batch pass ran): every layer is a step kernel, one step at
     * a time, the neuron state in buffers between steps; a value that is the same at every step
     * keeps its one-step buffer and is recomputed into it */
    if (m->schedule == SCHEDULE_STEP)
        for (int v = 0; v < n; v++)
            lw->region[v] = s.ncomp;
    /* Tarjan numbers components in reverse topological order of the condensation: the last found
     * comes first. Within a component, the graph's topological order. */
    int cnt = 0;
    for (int c = s.ncomp - 1; c >= 0; c--)
        for (int k = 0; k < n; k++)
            if (s.comp[topo[k]] == c)
                out[cnt++] = topo[k];
    for (int v = 0; v < n; v++)
        free(s.users[v]);
    free(s.users);
    free(s.nusers);
    free(s.index);
    free(s.low);
    free(s.comp);
    free(s.stack);
    free(s.on_stack);
    free(size);
    free(rec);
    free(rank);
    return cnt;
}

/* ---- buffers ---- */

static void
plan_buffers(Lower *lw)
{
    const Module *m = lw->m;
    KProgram *p = lw->p;
    /* weights first: buffer index == weight index */
    for (int w = 0; w < m->nweights; w++) {
        const Node *n = &m->nodes[m->weights[w].node];
        KType t = node_stored_weight(m, n) != w ? KT_F32
                  : n->wstore == WSTORE_F16    ? KT_F16
                  : n->wstore == WSTORE_BF16   ? KT_BF16
                                               : KT_F32;
        add_buf(lw, m->weights[w].name, t, (KSize){0, m->weights[w].numel}, KB_WEIGHT, w, -1);
    }
    for (int k = 0; k < m->ninputs; k++) {
        ValueId v = m->inputs[k];
        const Node *n = &m->nodes[v];
        int64_t numel = type_numel(&n->type);
        VStore *s = &lw->vs[v];
        s->numel = numel;
        s->layout = n->is_per_step_input ? LY_INPUT_STEP : LY_INPUT;
        s->buf = add_buf(lw, value_name(lw, v), KT_F32,
                         (KSize){numel * (n->is_per_step_input ? lw->T : 1), 0}, KB_INPUT, k, v);
    }
    for (ValueId v = 0; v < m->nnodes; v++) {
        const Node *n = &m->nodes[v];
        VStore *s = &lw->vs[v];
        s->numel = type_numel(&n->type);
        if (n->op == OP_INPUT || n->op == OP_FLATTEN || is_step_readout(n->op) ||
            n->op == OP_SEQUENCE)
            continue; /* inputs: above; flatten: an alias (resolved in order below) */
        if (n->fused_into >= 0) {
            /* computed inside its user's kernel (ir_fusion_problem): elementwise values where
             * they are loaded, neuron scans into their pooling's buffer */
            s->layout = n->op == OP_NEURON ? LY_NONE : LY_INLINE;
            s->buf = -1;
            continue;
        }
        if (n->is_scan_epilogue && p->target == KTARGET_GPU) {
            s->layout = LY_SUMMED; /* in the scan that reads it (ir_epilogue_problem) */
            s->buf = -1;
            continue;
        }
        s->layout = lw->is_static[v] ? LY_STATIC : LY_FULL;
        int64_t per = s->numel * (lw->is_static[v] ? 1 : lw->T);
        /* spikes stored as bits (Node.layout) on the CPU; GPU threads write a neuron each */
        KType t = n->layout == SPIKES_BITS && p->target == KTARGET_CPU
                      ? (n->type.dtype == DT_I8 ? KT_BIT2 : KT_BIT)
                  : n->astore == WSTORE_F16                            ? KT_F16
                  : n->astore == WSTORE_BF16                           ? KT_BF16
                                                                       : ktype_of(n->type.dtype);
        s->buf = add_buf(lw, value_name(lw, v), t, (KSize){per, 0}, KB_TEMP, -1, v);
        if (n->op == OP_NEURON && lw->region[v] >= 0) {
            /* step kernels keep the neuron's state between steps: buffers value+1.. */
            const NeuronDef *nd = m->neurons[n->neuron];
            bool has_refractory;
            int ncarry = neuron_ncarry(nd, &has_refractory);
            const char *vn = value_name(lw, v);
            for (int k = 0; k < ncarry; k++) {
                const char *what = k < nd->nstates ? nd->states[k].name
                                   : k < nd->nstates + nd->nlocals
                                       ? nd->locals[k - nd->nstates]
                                   : k == nd->nstates + nd->nlocals ? "spike"
                                                                    : "refr";
                bool is_refr = has_refractory && k == ncarry - 1;
                int sb = add_buf(lw, arena_printf(&p->arena, "%s.%s", vn, what),
                                 is_refr ? KT_I64 : KT_F32, (KSize){s->numel, 0}, KB_TEMP, -1, -1);
                /* step 0 starts from the neuron's initial values, not a load, and every step
                 * stores every state: nothing needs zeroing before a run (lower_neuron) */
                p->bufs[sb].is_written_first = true;
            }
        }
    }
    /* a conv or dense layer fused into its batchnorm (fold-batchnorm) stores into the batchnorm's
     * buffer */
    for (ValueId v = 0; v < m->nnodes; v++)
        if ((op_is_conv(m->nodes[v].op) || m->nodes[v].op == OP_DENSE) &&
            m->nodes[v].fused_into >= 0)
            lw->vs[v] = lw->vs[m->nodes[v].fused_into];
}

/* flatten is a view of its operand (same elements, same order): resolve in topological order */
static void
resolve_aliases(Lower *lw, const ValueId *topo)
{
    const Module *m = lw->m;
    for (int k = 0; k < m->nnodes; k++) {
        ValueId v = topo[k];
        const Node *n = &m->nodes[v];
        if (n->op != OP_FLATTEN)
            continue;
        int64_t numel = lw->vs[v].numel;
        lw->vs[v] = lw->vs[n->args[0]];
        lw->vs[v].numel = numel;
    }
}

/* ---- the memory plan (MEMORY_REUSE) ---- */

static void
uses_expr(const KExpr *e, int ki, int *first, int *last)
{
    if (!e) return;
    if (e->kind == KX_LOAD) {
        if (ki < first[e->buf]) first[e->buf] = ki;
        if (ki > last[e->buf]) last[e->buf] = ki;
    }
    uses_expr(e->a, ki, first, last);
    uses_expr(e->b, ki, first, last);
    uses_expr(e->c, ki, first, last);
}

static void
uses_stmts(KStmt *const *s, int n, int ki, int *first, int *last)
{
    for (int i = 0; i < n; i++) {
        const KStmt *st = s[i];
        if (st->kind == KS_STORE || st->kind == KS_VLOAD || st->kind == KS_VFMA ||
            st->kind == KS_VSTORE) {
            if (ki < first[st->buf]) first[st->buf] = ki;
            if (ki > last[st->buf]) last[st->buf] = ki;
        }
        uses_expr(st->lo, ki, first, last);
        uses_expr(st->hi, ki, first, last);
        uses_expr(st->index, ki, first, last);
        uses_expr(st->a, ki, first, last);
        uses_stmts(st->body, st->nbody, ki, first, last);
        uses_stmts(st->els, st->nels, ki, first, last);
    }
}

/* Temporaries whose lifetimes do not overlap share a slot (KBuf.slot). A lifetime is the span of
 * kernels that load or store the buffer, widened to a whole step loop it touches (the loop runs its
 * kernels T times in turn), to the start of the run for a buffer zeroed before it (not
 * written-first), to after the run for spike counts (read when it is over); GPU spike counts,
 * which keep totals across runs, never share. Largest first (at batch 64), each into the first slot
 * with no overlapping member: the greedy-by-size placement of inference engines. */
static void
plan_memory(KProgram *p)
{
    int nb = p->nbufs, nk = p->nkernels;
    int *first = malloc(((size_t)nb + 1) * sizeof *first), *last = malloc(((size_t)nb + 1) * sizeof *last);
    int *order = malloc(((size_t)nb + 1) * sizeof *order);
    if (!first || !last || !order) die("out of memory");
    for (int b = 0; b < nb; b++) {
        first[b] = INT32_MAX;
        last[b] = -1;
    }
    for (int k = 0; k < nk; k++)
        uses_stmts(p->kernels[k].body, p->kernels[k].nbody, k, first, last);
    for (int b = 0; b < nb; b++) {
        const KBuf *kb = &p->bufs[b];
        if (kb->kind != KB_TEMP || last[b] < 0) continue;
        if (!kb->is_written_first) first[b] = -1;
    }
    for (int i = 0; i < p->nstats; i++)
        last[p->stats[i].buf] = nk;
    for (int i = 0; i < nk;) {
        if (!p->kernels[i].is_step) {
            i++;
            continue;
        }
        int j = i;
        while (j < nk && p->kernels[j].is_step)
            j++;
        for (int b = 0; b < nb; b++)
            if (last[b] >= i && first[b] <= j - 1) {
                if (first[b] > i) first[b] = i;
                if (last[b] < j - 1) last[b] = j - 1;
            }
        i = j;
    }
    int n = 0;
    for (int b = 0; b < nb; b++)
        if (p->bufs[b].kind == KB_TEMP && !p->bufs[b].is_accumulator && last[b] >= 0)
            order[n++] = b;
    /* by bytes at batch 64, largest first; ties in buffer order (a stable insertion sort) */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0; j--) {
            const KBuf *x = &p->bufs[order[j]], *y = &p->bufs[order[j - 1]];
            int64_t bx = kbytes(x->type, ksize_eval(x->size, 64));
            int64_t by = kbytes(y->type, ksize_eval(y->size, 64));
            if (bx <= by) break;
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int nslots = 0;
    for (int i = 0; i < n; i++) {
        int b = order[i], slot = 0;
        for (int s = 1; s <= nslots && !slot; s++) {
            bool is_free = true;
            for (int k = 0; k < i && is_free; k++) {
                int o = order[k];
                if (p->bufs[o].slot == s && first[o] <= last[b] && first[b] <= last[o])
                    is_free = false;
            }
            if (is_free) slot = s;
        }
        p->bufs[b].slot = slot ? slot : ++nslots;
    }
    /* a slot of one buffer is memory of its own (0); the shared ones numbered from 1 in order */
    int *members = calloc((size_t)nslots + 2, sizeof *members), *renum = calloc((size_t)nslots + 2, sizeof *renum);
    if (!members || !renum) die("out of memory");
    for (int b = 0; b < nb; b++)
        members[p->bufs[b].slot]++;
    int nshared = 0;
    for (int b = 0; b < nb; b++) {
        int sl = p->bufs[b].slot;
        if (sl > 0 && members[sl] > 1 && !renum[sl]) renum[sl] = ++nshared;
        p->bufs[b].slot = sl > 0 && members[sl] > 1 ? renum[sl] : 0;
    }
    free(members);
    free(renum);
    free(first);
    free(last);
    free(order);
}

/* ---- entry point ---- */

KProgram *
kir_lower(const Module *m)
{
    return kir_lower_for(m, KTARGET_CPU);
}

KProgram *
kir_lower_for(const Module *m, KTarget target)
{
    KProgram *p = calloc(1, sizeof *p);
    if (!p)
        die("out of memory");
    p->m = m;
    p->target = target;
    p->timesteps = m->timesteps;
    p->seed = m->seed;
    Lower lw;
    memset(&lw, 0, sizeof lw);
    lw.p = p;
    lw.m = m;
    lw.T = m->timesteps;
    lw.epilogue = -1;
    p->vnum = arena_alloc(&p->arena, ((size_t)m->nnodes + 1) * sizeof *p->vnum);
    ir_value_numbers(m, p->vnum);
    lw.acc = m->accumulate == ACC_F32 ? KT_F32 : KT_F64;
    int n = m->nnodes;
    lw.vs = calloc((size_t)n + 1, sizeof *lw.vs);
    lw.is_static = calloc((size_t)n + 1, sizeof *lw.is_static);
    lw.region = calloc((size_t)n + 1, sizeof *lw.region);
    lw.stream = calloc((size_t)n + 1, sizeof *lw.stream);
    ValueId *topo = calloc((size_t)n + 1, sizeof *topo);
    ValueId *order = calloc((size_t)n + 1, sizeof *order);
    if (!lw.vs || !lw.is_static || !lw.region || !lw.stream || !topo || !order)
        die("out of memory");
    if (ir_topo_order(m, topo) != n) {
        diag_error(m->loc, "kernel IR: the model's nodes have no step order");
        goto fail;
    }
    uint32_t npoisson = 0;
    for (ValueId v = 0; v < n; v++)
        if (m->nodes[v].op == OP_POISSON) {
            int64_t s = m->nodes[v].attrs[op_attr_index(OP_POISSON, "stream")].i[0];
            lw.stream[v] = s >= 0 ? (uint32_t)s : npoisson;
            npoisson++;
        }
    ir_fill_static(lw.m, topo, lw.is_static);
    int norder = schedule_order(&lw, topo, order);
    plan_buffers(&lw);
    resolve_aliases(&lw, topo);

    for (int k = 0; k < norder; k++) {
        ValueId v = order[k];
        const Node *nd = &m->nodes[v];
        Ctx ctx = ctx_of(&lw, v);
        bool is_step = ctx == CTX_STEP;
        switch (nd->op) {
        case OP_INPUT:
        case OP_FLATTEN:
        case OP_STATE: /* no kernel: caller's memory, a view, filled by the neuron kernel */
        case OP_COUNT:
        case OP_MEAN:
        case OP_LAST:
        case OP_MAX:
        case OP_SEQUENCE: /* outputs, below */
            continue;
        default: break;
        }
        if (nd->fused_into >= 0 || lw.vs[v].layout == LY_SUMMED)
            continue; /* in its user's kernel */
        /* a conv or dense layer with this batchnorm in its epilogue (fold-batchnorm) */
        const Node *an = nd->nargs ? &m->nodes[nd->args[0]] : NULL;
        ValueId conv = nd->op == OP_BATCHNORM && an->fused_into == v &&
                               (op_is_conv(an->op) || an->op == OP_DENSE)
                           ? nd->args[0]
                           : -1;
        if (conv >= 0) {
            const Node *cn = &m->nodes[conv];
            begin_kernel(&lw, conv,
                         arena_printf(&p->arena, "%s = %s(%s) with %s = batchnorm(%s) applied as "
                                      "it stores: %s", value_name(&lw, conv),
                                      node_op_name(m, cn), value_name(&lw, cn->args[0]),
                                      value_name(&lw, v), value_name(&lw, conv), ctx_what(ctx)),
                         is_step);
            kernel_add_node(&lw, v);
            lw.epilogue = v;
            lw.is_epilogue_by_row = cn->op != OP_DENSE && p->target == KTARGET_CPU;
            if (cn->op == OP_DENSE)
                lower_dense_any(&lw, conv);
            else if (p->target == KTARGET_GPU)
                lower_conv2d_flat(&lw, conv);
            else if (node_lists_events(m, cn))
                lower_conv2d_events(&lw, conv);
            else
                lower_conv2d(&lw, conv);
            lw.epilogue = -1;
            lw.is_epilogue_by_row = false;
            end_kernel(&lw);
            p->bufs[lw.vs[v].buf].is_written_first = true;
            continue;
        }
        /* a neuron scan fused into this pooling (ir_fusion_problem: never a step kernel) */
        ValueId scan = (nd->op == OP_MAXPOOL2D || nd->op == OP_AVGPOOL2D ||
                        nd->op == OP_SUMPOOL2D) &&
                               m->nodes[nd->args[0]].fused_into == v
                           ? nd->args[0]
                           : -1;
        if (scan >= 0) {
            begin_fused_kernel(&lw, scan, v,
                               "neuron scan over T window by window, only the pooled spikes stored");
            lower_neuron_pooled(&lw, scan, v);
            end_kernel(&lw);
            p->bufs[lw.vs[v].buf].is_written_first = true;
            continue;
        }
        const char *what = nd->op != OP_NEURON ? ctx_what(ctx)
                           : is_step ? "neuron step (in the step loop): B*n neurons at step t, "
                                       "state in buffers between steps"
                                     : "neuron scan fused over T: B*n neurons, state in registers";
        begin_kernel(&lw, v, describe(&lw, v, what), is_step);
        switch (nd->op) {
        case OP_DENSE: lower_dense_any(&lw, v); break;
        case OP_CONV2D:
        case OP_CONV1D:
            if (p->target == KTARGET_GPU)
                lower_conv2d_flat(&lw, v);
            else if (node_lists_events(m, nd))
                lower_conv2d_events(&lw, v);
            else
                lower_conv2d(&lw, v);
            break;
        case OP_MAXPOOL2D:
        case OP_AVGPOOL2D:
        case OP_SUMPOOL2D: lower_pool(&lw, v); break;
        case OP_BATCHNORM: lower_batchnorm(&lw, v); break;
        case OP_ADD:
        case OP_SUB:
        case OP_MUL:
        case OP_SCALE: lower_elementwise(&lw, v); break;
        case OP_POISSON: lower_poisson(&lw, v); break;
        case OP_DELAY: lower_delay(&lw, v); break;
        case OP_NEURON: lower_neuron(&lw, v, -1, -1); break;
        default: unreachable();
        }
        end_kernel(&lw);
        /* every layer kernel stores every element of its value (each step's slice at its step, before
         * any kernel after it reads the slice), so its buffer need not be zeroed before a run;
         * kir_eval fills such buffers with garbage, which keeps this claim tested */
        const VStore *vs = &lw.vs[v];
        if ((vs->layout == LY_FULL || vs->layout == LY_STATIC) && vs->buf >= 0 &&
            p->bufs[vs->buf].kind == KB_TEMP)
            p->bufs[vs->buf].is_written_first = true;
    }
    /* outputs after everything: readouts reduce over t into the caller's sample-major arrays */
    for (int k = 0; k < m->noutputs; k++) {
        ValueId v = m->outputs[k];
        const Node *nd = &m->nodes[v];
        int64_t numel = type_numel(&nd->type);
        bool per_step = !is_step_readout(nd->op) && nd->type.has_time;
        int obuf = add_buf(&lw, value_name(&lw, v), KT_F32,
                           (KSize){numel * (per_step ? lw.T : 1), 0}, KB_OUTPUT, k, v);
        const char *how = is_step_readout(nd->op) ? "readout: reduce over T into [B][n]"
                          : per_step             ? "output: every step into [B][T][n]"
                                                 : "output: the last step into [B][n]";
        ValueId scan = nd->nargs == 1 && m->nodes[nd->args[0]].fused_into == v ? nd->args[0] : -1;
        if (scan >= 0) {
            /* a neuron layer fused into its readout (ir_fusion_problem) computes it */
            begin_fused_kernel(&lw, scan, v, "neuron scan over T, the readout computed in it");
            lower_neuron(&lw, scan, v, obuf);
            kernel_add_node(&lw, v);
            end_kernel(&lw);
            continue;
        }
        begin_kernel(&lw, v, describe(&lw, v, how), false);
        if (is_step_readout(nd->op))
            lower_readout(&lw, v, obuf);
        else if (nd->op == OP_SEQUENCE)
            lower_sequence(&lw, nd->args[0], obuf, true);
        else
            lower_sequence(&lw, v, obuf, per_step);
        end_kernel(&lw);
    }
    if (m->memory == MEMORY_REUSE)
        plan_memory(p);
    free(lw.vs);
    free(lw.is_static);
    free(lw.region);
    free(lw.stream);
    free(topo);
    free(order);
    return p;
fail:
    free(lw.vs);
    free(lw.is_static);
    free(lw.region);
    free(lw.stream);
    free(topo);
    free(order);
    kir_free(p);
    return NULL;
}
