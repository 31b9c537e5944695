/* Lowering state shared by every lowering file: kernels and buffers being built, statement
 * builders, positions of values (addressing), loads and stores of values, row contexts. */
#include "codegen/lower.h"

#include <stdlib.h>
#include <string.h>

/* ---- lowering state ---- */

int
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
int
scratch_buf(Lower *lw, const char *name, KType t, int64_t elems)
{
    return scratch_buf_sized(lw, name, t, (KSize){elems, 0});
}

int
scratch_buf_sized(Lower *lw, const char *name, KType t, KSize size)
{
    int b = add_buf(lw, name, t, size, KB_TEMP, -1, -1);
    lw->p->bufs[b].is_written_first = true;
    return b;
}

const char *
value_name(Lower *lw, ValueId v)
{
    char buf[32];
    return arena_strdup(&lw->p->arena, kir_value_name(lw->p, v, buf, sizeof buf));
}

void
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
void
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

void
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

KType
ktype_of(DType dt)
{
    switch (dt) {
    case DT_SPIKE: return KT_U8;
    case DT_I8: return KT_I8;
    default: return KT_F32; /* f16 and bf16 values are computed in float, as the interpreter does */
    }
}

KExpr *
pos_t(Lower *lw, Pos *ps)
{
    if (!ps->t && ps->r)
        ps->t = bin(lw, KB_DIV, ps->r, kx_kind(lw->p, KX_BATCH));
    if (!ps->t)
        die("kir: position without a step");
    return ps->t;
}

KExpr *
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

KExpr *
pos_i(Lower *lw, Pos *ps)
{
    if (!ps->i && ps->j)
        ps->i = bin(lw, KB_REM, ps->j, ci(lw, ps->jn));
    if (!ps->i)
        die("kir: position without an element");
    return ps->i;
}

/* the element index of value v at ps in its buffer */
KExpr *
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

KExpr *
vload(Lower *lw, ValueId v, Pos *ps)
{
    if (lw->vs[v].layout == LY_INLINE || lw->vs[v].is_recomputed)
        return lw->inline_value(lw, v, ps);
    if (lw->vs[v].layout == LY_SUMMED)
        return lw->summed_value(lw, v, ps);
    return kx_load(lw->p, lw->vs[v].buf, vindex(lw, v, ps));
}

void
vstore(Lower *lw, Cur c, ValueId v, Pos *ps, KExpr *e)
{
    s_store(lw, c, lw->vs[v].buf, vindex(lw, v, ps), e);
}

int
wbuf(Lower *lw, const Node *n, int slot)
{
    /* weight buffers are the first nweights buffers, in Module.weights order */
    return n->first_weight + slot;
}

Ctx
ctx_of(Lower *lw, ValueId v)
{
    /* step by step (no time-batch pass), even values that are the same at every step are
     * computed at every step: nothing is hoisted out of the time loop */
    if (lw->m->schedule == SCHEDULE_STEP && lw->region[v] >= 0) return CTX_STEP;
    return lw->is_static[v] ? CTX_STATIC : lw->region[v] >= 0 ? CTX_STEP : CTX_BATCHED;
}

const char *
ctx_what(Ctx c)
{
    switch (c) {
    case CTX_BATCHED: return "layer by layer over T*B rows";
    case CTX_STATIC: return "static (the same every step): once over B rows";
    case CTX_STEP: return "step kernel (in the step loop): B rows at step t";
    }
    unreachable();
}

Cur
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

const char *
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

ValueId
value_only_reader(const Module *m, ValueId v)
{
    ValueId user = -1;
    for (ValueId u = 0; u < m->nnodes; u++)
        for (int k = 0; k < m->nodes[u].nargs; k++)
            if (m->nodes[u].args[k] == v) {
                if (user >= 0 || k != 0) return -1;
                user = u;
            }
    return user;
}
