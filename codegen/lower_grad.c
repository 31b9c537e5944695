/* lower_grad.c: the backward pass of a training step in kernel IR (kir_lower_train), appended to
 * the forward the rest of the lowering made, whose every value has a buffer of its own holding all
 * its steps. Nodes in reverse topological order, each one kernel (a dense layer up to four).
 *
 * A readout turns the output's gradient (the caller's buffer out_grad[k]) into dL/dx at every
 * step. A neuron layer runs parallel over neurons: the forward again from the layer's input, each
 * step's states kept in a scratch buffer; then the steps in reverse, each run once more from its
 * kept states with every statement's inputs in locals, and its statements walked backwards
 * emitting the adjoint arithmetic: reverse mode over the neuron's own program, `fire` through its
 * surrogate (ir/surrogates.def), interp_grad's arithmetic operation for operation. A dense layer:
 * dL/dx = dL/dy W (tiles over inputs, outputs summed in order), dW = dy^T x (rows summed in order,
 * every term, as PyTorch's GEMM adds them), db the rows' sum.
 * Add, sub, mul and scale as the interpreter's.
 *
 * A value's gradient buffer has the value's layout (f32); its first contribution stores (+0 + the
 * contribution, as the interpreter's zeroed buffer adds), later ones load and add. */
#include "codegen/lower.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct G {
    Lower *lw;
    KTrain *tr;
    int *gbuf;     /* per node: the gradient's buffer, or -1 */
    bool *written; /* per node: holds a contribution already */
    bool *needs;   /* per node: a weight's gradient flows through it */
    /* per node: a neuron layer whose one reader is a pool tiling it: that pool, whose backward
     * the neuron's reads inline (no gradient buffer, no pool kernel), or -1 */
    ValueId *pool_of;
} G;

typedef struct PoolGeom PoolGeom;
static KExpr *pool_grad_inline(G *g, ValueId u, Cur c, Pos *px);

/* ---- what it differentiates ---- */

/* the ops with a backward (ops.def), inside a recurrence or anywhere, "a, b and c" */
static const char *
grad_ops(const Module *m, bool in_loop)
{
    char *list = arena_strdup((Arena *)&m->arena, "");
    int n = 0, k = 0;
    for (int i = 0; i < OP_COUNT_; i++)
        n += op_info((Op)i)->backward && (!in_loop || op_info((Op)i)->grad_in_loop);
    for (int i = 0; i < OP_COUNT_; i++) {
        const OpInfo *oi = op_info((Op)i);
        if (!oi->backward || (in_loop && !oi->grad_in_loop)) continue;
        k++;
        list = arena_printf((Arena *)&m->arena, "%s%s%s", list,
                            k == 1   ? ""
                            : k == n ? " and "
                                     : ", ",
                            oi->name);
    }
    return list;
}

const char *
grad_problem(const Module *m, ValueId *where)
{
    int nf = module_nforward(m); /* a train-step module's forward: its grad nodes follow */
    ValueId *order = xmalloc(((size_t)m->nnodes + 1) * sizeof *order);
    ValueId *sched = xmalloc(((size_t)m->nnodes + 1) * sizeof *sched);
    int *region = xmalloc(((size_t)m->nnodes + 1) * sizeof *region);
    bool has_order = ir_topo_order(m, order) == m->nnodes;
    for (ValueId v = 0; v < m->nnodes; v++)
        region[v] = -1;
    if (has_order) ir_schedule_order(m, order, region, sched);
    free(order);
    free(sched);
    for (ValueId v = 0; v < nf; v++) {
        const Node *n = &m->nodes[v];
        *where = v;
        Op op = n->op;
        if (region[v] >= 0 && !op_info(op)->grad_in_loop) {
            free(region);
            return arena_printf((Arena *)&m->arena,
                                "compiled training does not differentiate %s inside a "
                                "recurrence yet (there it does %s)",
                                node_op_name(m, n), grad_ops(m, true));
        }
    }
    free(region);
    for (ValueId v = 0; v < nf; v++) {
        const Node *n = &m->nodes[v];
        *where = v;
        if (!op_info(n->op)->backward)
            return arena_printf((Arena *)&m->arena,
                                "compiled training does not differentiate %s (it does %s)",
                                node_op_name(m, n), grad_ops(m, false));
        if (n->op == OP_NEURON) {
            SurrogateFn sg;
            char why[256];
            if (!neuron_surrogate(m->neurons[n->neuron], &sg, why, sizeof why))
                return arena_strdup((Arena *)&m->arena, why);
        }
        if ((n->op == OP_DENSE || op_is_conv(n->op)) && m->nodes[n->args[0]].type.dtype == DT_I8)
            return "compiled training does not differentiate -1/0/1 spikes";
        bool is_output = false;
        for (int k = 0; k < m->noutputs; k++)
            is_output |= m->outputs[k] == v;
        if (is_output && !is_step_readout(n->op) && n->op != OP_SEQUENCE && !n->type.has_time)
            return "compiled training does not differentiate an output of a static value yet";
    }
    *where = -1;
    return NULL;
}

/* the node whose buffer a flatten views */
static ValueId
root(const Lower *lw, ValueId v)
{
    return through_flattens(lw->m, v);
}

/* ---- gradient buffers ---- */

static KExpr *
zero(Lower *lw)
{
    return kx_const(lw->p, KT_F32, 0);
}

/* dL/dv at ps */
static KExpr *
gload(G *g, ValueId v, Pos *ps)
{
    Lower *lw = g->lw;
    ValueId r = root(lw, v);
    return kx_load(lw->p, g->gbuf[r], vindex(lw, r, ps));
}

/* dL/dv at ps += e: the first contribution stores +0 + e (what the interpreter's zeroed buffer
 * gets), later ones add to what is there. `first` says which this kernel is. */
static void
gadd(G *g, Cur c, ValueId v, Pos *ps, KExpr *e, bool first)
{
    Lower *lw = g->lw;
    ValueId r = root(lw, v);
    KExpr *old = first ? zero(lw) : kx_load(lw->p, g->gbuf[r], vindex(lw, r, ps));
    s_store(lw, c, g->gbuf[r], vindex(lw, r, ps), bin(lw, KB_ADD, old, e));
}

/* The parallel loop over every sample's `numel` elements in SIMD lanes (j = b * numel + i), at the
 * end of c: its body; *jv its index, *ps a position at it (no step yet) */
static Cur
sample_lanes(Lower *lw, Cur c, int64_t numel, KExpr **jv, Pos *ps)
{
    KStmt *f = loop(lw, c, "j", bin(lw, KB_MUL, kx_kind(lw->p, KX_BATCH), ci(lw, numel)), true, jv);
    f->is_lanes = true;
    *ps = (Pos){0};
    ps->j = *jv;
    ps->jn = numel;
    return body(f);
}

/* A static value's gradient is summed over the steps in a local, from the last step to the first
 * as the interpreter adds them into its one slot, starting from what its buffer holds (+0 for the
 * first contributor), then stored once: static_sum opens the local, static_store stores it. */
static int
static_sum(G *g, Cur c, ValueId x, Pos *ps, bool first, const char *name)
{
    int sum = local(g->lw, name, KT_F32);
    s_assign(g->lw, c, sum, first ? zero(g->lw) : gload(g, x, ps));
    return sum;
}

static void
static_store(G *g, Cur c, ValueId x, Pos *ps, int sum)
{
    Lower *lw = g->lw;
    ValueId r = root(lw, x);
    Pos p0 = *ps;
    p0.t = NULL;
    s_store(lw, c, g->gbuf[r], vindex(lw, r, &p0), var(lw, sum));
}

/* a loop over n steps from the last (u = 0 .. n-1, t = T-1-u) at the end of c: its body; *tv is t
 */
static Cur
steps_from_last(Lower *lw, Cur c, int64_t n, KExpr **tv)
{
    KExpr *uv;
    KStmt *fu = loop(lw, c, "u", ci(lw, n > 0 ? n : 0), false, &uv);
    int tl = local(lw, "t", KT_I64);
    s_assign(lw, body(fu), tl, bin(lw, KB_SUB, ci(lw, lw->T - 1), uv));
    *tv = var(lw, tl);
    return body(fu);
}

/* whether this kernel is v's first contributor (and from now on it is not) */
static bool
claim(G *g, ValueId v)
{
    ValueId r = root(g->lw, v);
    bool first = !g->written[r];
    g->written[r] = true;
    return first;
}

/* ---- readouts ---- */

/* element j = b*n + i of a [B][T][n] output at step t */
static KExpr *
seq_index(Lower *lw, KExpr *j, KExpr *t, int64_t n)
{
    KExpr *b = bin(lw, KB_DIV, j, ci(lw, n)), *i = bin(lw, KB_REM, j, ci(lw, n));
    return bin(lw, KB_ADD,
               bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, b, ci(lw, lw->T)), t), ci(lw, n)),
               i);
}

/* An output that is a value itself, every step of it ([B][T][n]): its gradient starts as the
 * output's, as the interpreter's slots do before any backward */
static void
grad_direct_output(G *g, ValueId v, int k)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    int64_t numel = lw->vs[root(lw, v)].numel;
    bool first = claim(g, v);
    begin_kernel(lw, v, describe(lw, v, "backward: the output's gradient, every step"), false);
    lw->k.name = arena_printf(&p->arena, "grad_out_%s", lw->k.name);
    KExpr *jv, *tv;
    Pos ps;
    Cur c = sample_lanes(lw, top(lw), numel, &jv, &ps);
    KStmt *ft = loop(lw, c, "t", ci(lw, lw->T), false, &tv);
    ps.t = tv;
    gadd(g, body(ft), v, &ps, kx_load(p, g->tr->out_grad[k], seq_index(lw, jv, tv, numel)), first);
    end_kernel(lw);
}

static void
grad_readout(G *g, ValueId v, int k)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Node *n = &lw->m->nodes[v];
    ValueId x = n->args[0];
    int64_t numel = lw->vs[root(lw, x)].numel;
    bool first = claim(g, x);
    begin_kernel(lw, v, describe(lw, v, "backward: dL/dx at every step from the output's gradient"),
                 false);
    lw->k.name = arena_printf(&p->arena, "grad_%s", lw->k.name);
    KExpr *jv, *tv;
    Pos ps;
    Cur cj = sample_lanes(lw, top(lw), numel, &jv, &ps);
    KExpr *og = kx_load(p, g->tr->out_grad[k], jv);
    /* a static value's gradient: every step's contribution summed (static_sum) */
    bool is_static = lw->is_static[root(lw, x)];
    int sum = is_static ? static_sum(g, cj, x, &ps, first, "d_x") : -1;
    /* last and max: to one step, the last or the first holding the maximum (torch.max's index;
     * a NaN is the maximum, the interpreter's rule) */
    KExpr *at = ci(lw, lw->T - 1);
    if (n->op == OP_MAX) {
        int best = local(lw, "best", KT_I64), bv = local(lw, "best_x", KT_F32);
        Pos p0 = ps;
        p0.t = ci(lw, 0);
        s_assign(lw, cj, best, ci(lw, 0));
        s_assign(lw, cj, bv, to(lw, KT_F32, vload(lw, x, &p0)));
        KExpr *sv;
        KStmt *fs = loop(lw, cj, "s", ci(lw, lw->T), false, &sv);
        Pos pss = ps;
        pss.t = sv;
        int xs = local(lw, "x_s", KT_F32);
        s_assign(lw, body(fs), xs, to(lw, KT_F32, vload(lw, x, &pss)));
        KExpr *is_nan = bin(lw, KB_NE, var(lw, xs), var(lw, xs)),
              *was_nan = bin(lw, KB_NE, var(lw, bv), var(lw, bv));
        KStmt *i = s_if(lw, body(fs),
                        bin(lw, KB_OR, bin(lw, KB_GT, var(lw, xs), var(lw, bv)),
                            bin(lw, KB_AND, is_nan, kx_un(p, KU_NOT, was_nan))));
        s_assign(lw, body(i), best, sv);
        s_assign(lw, body(i), bv, var(lw, xs));
        at = var(lw, best);
    }
    Cur c = is_static ? steps_from_last(lw, cj, lw->T, &tv)
                      : body(loop(lw, cj, "t", ci(lw, lw->T), false, &tv));
    ps.t = tv;
    KExpr *e = NULL;
    switch (n->op) {
    case OP_COUNT:
        e = og;
        break;
    case OP_MEAN:
        e = bin(lw, KB_DIV, og, kx_const(p, KT_F32, lw->T));
        break;
    case OP_LAST: /* at one step only (below) */
    case OP_MAX:
        e = og;
        break;
    case OP_SEQUENCE: /* the output's step t: [B][T][n] */
        e = kx_load(p, g->tr->out_grad[k], seq_index(lw, jv, tv, numel));
        break;
    default:
        unreachable();
    }
    bool one_step = n->op == OP_LAST || n->op == OP_MAX;
    if (is_static && one_step) {
        /* only that step's: the others add nothing */
        KStmt *i = s_if(lw, c, bin(lw, KB_EQ, tv, at));
        s_assign(lw, body(i), sum, bin(lw, KB_ADD, var(lw, sum), og));
    } else if (is_static) {
        s_assign(lw, c, sum, bin(lw, KB_ADD, var(lw, sum), e));
    } else if (one_step) {
        KStmt *i = s_if(lw, c, bin(lw, KB_EQ, tv, at));
        gadd(g, body(i), x, &ps, og, first);
        if (first) /* the other steps get +0 stored: the buffer is written whole */
            gadd(g, els(i), x, &ps, zero(lw), true);
    } else {
        gadd(g, c, x, &ps, e, first);
    }
    if (is_static) static_store(g, cj, x, &ps, sum);
    end_kernel(lw);
}

/* ---- neuron layers ---- */

/* The adjoint locals of one neuron step: states, lets, the spike variable, the input, and the
 * output expression's */
typedef struct Adj {
    int *st, *lc;
    int sp, in, out;
    int *pa; /* per parameter: a learned one's adjoint, summed in f64 (else -1) */
} Adj;

/* A(var) = A(var) + e */
static void
adj_add(Lower *lw, Cur c, int a, KExpr *e)
{
    s_assign(lw, c, a, bin(lw, KB_ADD, var(lw, a), e));
}

/* Emits A += a * d(e)/d(each variable), e read through nl (the locals holding the values before
 * the statement): interp_grad's backprop, the same operations in the same order. */
static void
backprop(Lower *lw, Cur c, const NLower *nl, const NExpr *e, KExpr *a, const Adj *A)
{
    KProgram *p = lw->p;
    if (nexpr_is_fixed(nl, e)) return;
    const NExpr *x0 = nexpr_arity(e) > 0 ? e->args[0] : NULL;
    const NExpr *x1 = nexpr_arity(e) > 1 ? e->args[1] : NULL;
    KExpr *f32one = kx_const(p, KT_F32, 1);
    switch (e->kind) {
    case NX_PARAM: /* learned (a fixed one returned above) */
        s_assign(lw, c, A->pa[e->idx], bin(lw, KB_ADD, var(lw, A->pa[e->idx]), to(lw, KT_F64, a)));
        return;
    case NX_STATE:
        adj_add(lw, c, A->st[e->idx], a);
        return;
    case NX_LOCAL:
        adj_add(lw, c, A->lc[e->idx], a);
        return;
    case NX_INPUT:
        adj_add(lw, c, A->in, a);
        return;
    case NX_SPIKE:
        adj_add(lw, c, A->sp, a);
        return;
    case NX_NEG:
        backprop(lw, c, nl, x0, kx_un(p, KU_NEG, a), A);
        return;
    case NX_NOT:
        return;
    case NX_BIN:
        switch ((NxBin)e->op) {
        case NB_ADD:
            backprop(lw, c, nl, x0, a, A);
            backprop(lw, c, nl, x1, a, A);
            return;
        case NB_SUB:
            backprop(lw, c, nl, x0, a, A);
            backprop(lw, c, nl, x1, kx_un(p, KU_NEG, a), A);
            return;
        case NB_MUL:
            backprop(lw, c, nl, x0, bin(lw, KB_MUL, a, nexpr(lw, nl, x1)), A);
            backprop(lw, c, nl, x1, bin(lw, KB_MUL, a, nexpr(lw, nl, x0)), A);
            return;
        case NB_DIV: {
            KExpr *y = nexpr(lw, nl, x1);
            backprop(lw, c, nl, x0, bin(lw, KB_DIV, a, y), A);
            if (!nexpr_is_fixed(nl, x1))
                backprop(lw, c, nl, x1,
                         bin(lw, KB_DIV, bin(lw, KB_MUL, kx_un(p, KU_NEG, a), nexpr(lw, nl, x0)),
                             bin(lw, KB_MUL, y, y)),
                         A);
            return;
        }
        default:
            return; /* comparisons and logic: piecewise constant */
        }
    case NX_COND: {
        if (nexpr_is_fixed(nl, x0)) {
            backprop(lw, c, nl, e->args[nexpr_fold(x0, nl->params) != 0 ? 1 : 2], a, A);
            return;
        }
        KStmt *i = s_if(lw, c, bin(lw, KB_NE, to(lw, KT_F32, nexpr(lw, nl, x0)), zero(lw)));
        backprop(lw, body(i), nl, e->args[1], a, A);
        backprop(lw, els(i), nl, e->args[2], a, A);
        return;
    }
    case NX_CALL: {
        KExpr *x = to(lw, KT_F32, nexpr(lw, nl, x0)), *z;
        switch ((NFunc)e->op) {
        case NF_EXP:
            backprop(lw, c, nl, x0, bin(lw, KB_MUL, a, nexpr(lw, nl, e)), A);
            return;
        case NF_LOG:
            backprop(lw, c, nl, x0, bin(lw, KB_DIV, a, x), A);
            return;
        case NF_SQRT:
            backprop(lw, c, nl, x0,
                     bin(lw, KB_DIV, a, bin(lw, KB_MUL, kx_const(p, KT_F32, 2), nexpr(lw, nl, e))),
                     A);
            return;
        case NF_TANH:
            z = nexpr(lw, nl, e);
            backprop(lw, c, nl, x0,
                     bin(lw, KB_MUL, a, bin(lw, KB_SUB, f32one, bin(lw, KB_MUL, z, z))), A);
            return;
        case NF_SIGMOID:
            z = nexpr(lw, nl, e);
            backprop(lw, c, nl, x0,
                     bin(lw, KB_MUL, bin(lw, KB_MUL, a, bin(lw, KB_SUB, f32one, z)), z), A);
            return;
        case NF_ABS: {
            KStmt *pos = s_if(lw, c, bin(lw, KB_GT, x, zero(lw)));
            backprop(lw, body(pos), nl, x0, a, A);
            KStmt *neg = s_if(lw, els(pos), bin(lw, KB_LT, x, zero(lw)));
            backprop(lw, body(neg), nl, x0, kx_un(p, KU_NEG, a), A);
            return;
        }
        case NF_FLOOR:
            return;
        case NF_MIN:
        case NF_MAX: {
            KExpr *y = to(lw, KT_F32, nexpr(lw, nl, x1));
            KStmt *i = s_if(lw, c, bin(lw, e->op == NF_MIN ? KB_LE : KB_GE, x, y));
            backprop(lw, body(i), nl, x0, a, A);
            backprop(lw, els(i), nl, x1, a, A);
            return;
        }
        case NF_POW: {
            KExpr *y = to(lw, KT_F32, nexpr(lw, nl, x1));
            backprop(lw, c, nl, x0,
                     bin(lw, KB_MUL, a,
                         bin(lw, KB_MUL, y, bin(lw, KB_POW, x, bin(lw, KB_SUB, y, f32one)))),
                     A);
            if (!nexpr_is_fixed(nl, x1))
                backprop(lw, c, nl, x1,
                         bin(lw, KB_MUL, a, bin(lw, KB_MUL, nexpr(lw, nl, e), kx_un(p, KU_LOG, x))),
                         A);
            return;
        }
        case NF_CLAMP: {
            KExpr *lo = to(lw, KT_F32, nexpr(lw, nl, x1)),
                  *hi = to(lw, KT_F32, nexpr(lw, nl, e->args[2]));
            KStmt *i = s_if(lw, c, bin(lw, KB_AND, bin(lw, KB_GE, x, lo), bin(lw, KB_LE, x, hi)));
            backprop(lw, body(i), nl, x0, a, A);
            return;
        }
        case NF_SELECT: {
            if (nexpr_is_fixed(nl, x0)) {
                backprop(lw, c, nl, e->args[nexpr_fold(x0, nl->params) != 0 ? 1 : 2], a, A);
                return;
            }
            KStmt *i = s_if(lw, c, bin(lw, KB_NE, x, zero(lw)));
            backprop(lw, body(i), nl, e->args[1], a, A);
            backprop(lw, els(i), nl, e->args[2], a, A);
            return;
        }
        case NF_FLOAT32:
            backprop(lw, c, nl, x0, a, A);
            return;
        case NF_COUNT_:
            break;
        }
        unreachable();
    }
    default:
        unreachable();
    }
}

/* g'(u) * grad in the surrogate's framework order: ir/surrogate.c's surrogate_grad, float32 */
static KExpr *
surrogate_expr(Lower *lw, const SurrogateFn *s, KExpr *grad, KExpr *u)
{
    KProgram *p = lw->p;
#define F(x) kx_const(p, KT_F32, (double)(float)(x))
#define MUL(a, b) bin(lw, KB_MUL, (a), (b))
#define ADD(a, b) bin(lw, KB_ADD, (a), (b))
#define DIV(a, b) bin(lw, KB_DIV, (a), (b))
    const double *a = s->args;
    KExpr *au = kx_un(p, KU_ABS, u), *one = F(1), *q;
    switch (s->id) {
    case SG_SIGMOID: {
        KExpr *sg = kx_un(p, KU_SIGMOID, MUL(u, F(a[0])));
        return MUL(MUL(MUL(grad, bin(lw, KB_SUB, one, sg)), sg), F(a[0]));
    }
    case SG_ATAN: {
        double h = a[0] / 2;
        KExpr *ax = MUL(F(M_PI * h), u);
        return MUL(MUL(DIV(one, ADD(one, MUL(ax, ax))), F(h)), grad);
    }
    case SG_PW_QUADRATIC:
        return kx_select(p, bin(lw, KB_GT, au, F(1.0 / a[0])), F(0),
                         MUL(grad, ADD(MUL(F(-(a[0] * a[0])), au), F(a[0]))));
    case SG_PW_EXP:
        return MUL(MUL(F(a[0] / 2), kx_un(p, KU_EXP, MUL(F(-a[0]), au))), grad);
    case SG_SOFT_SIGN:
        q = ADD(F(1.0 / a[0]), au);
        return DIV(grad, MUL(F(2 * a[0]), MUL(q, q)));
    case SG_SJ_SUPERSPIKE:
        q = ADD(au, one);
        return DIV(MUL(F(a[0]), grad), MUL(q, q));
    case SG_ERF: {
        KExpr *x = MUL(u, F(a[0]));
        return MUL(MUL(grad, kx_un(p, KU_EXP, kx_un(p, KU_NEG, MUL(x, x)))), F(a[0] / sqrt(M_PI)));
    }
    case SG_FAST_SIGMOID:
        q = ADD(MUL(F(a[0]), au), one);
        return DIV(grad, MUL(q, q));
    case SG_SUPERSPIKE:
        q = ADD(au, one);
        return DIV(grad, MUL(q, q));
    case SG_STRAIGHT:
        return grad;
    case SG_COUNT_:
        break;
    }
#undef F
#undef MUL
#undef ADD
#undef DIV
    unreachable();
}

/* a copy of nl whose variables are the given locals (a statement's inputs) */
static NLower
snapshot(const NLower *nl, int *st, int *lc, int sp)
{
    NLower s = *nl;
    s.state = st;
    s.let = lc;
    s.spike = sp;
    return s;
}

/* neurons per block of a neuron layer's kept states (a multiple of the SIMD width); at most
 * KEPT_IN_REGISTERS kept states a neuron (T times the carried ones) stay in locals instead */
enum { HIST_BLOCK = 16, KEPT_IN_REGISTERS = 16 };

static void grad_neuron_step(G *g, ValueId v, Cur c, const NCopy *cpp, const Adj *Ap, KExpr *t,
                             const int *keptv, int hist, KExpr *jv, int gsum, int a_out, bool first,
                             const SurrogateFn *sgp);

/* state k of neuron j before step t in the kept states: ((j / HIST_BLOCK) kept + t ncarry + k)
 * HIST_BLOCK + j % HIST_BLOCK, kept = T ncarry */
static KExpr *
hist_index(Lower *lw, KExpr *j, KExpr *t, int k, int64_t kept, int ncarry)
{
    KExpr *blk = bin(lw, KB_DIV, j, ci(lw, HIST_BLOCK)), *lane = bin(lw, KB_REM, j, ci(lw, HIST_BLOCK));
    KExpr *row = bin(lw, KB_ADD, bin(lw, KB_MUL, blk, ci(lw, kept)),
                     bin(lw, KB_ADD, bin(lw, KB_MUL, t, ci(lw, ncarry)), ci(lw, k)));
    return bin(lw, KB_ADD, bin(lw, KB_MUL, row, ci(lw, HIST_BLOCK)), lane);
}

/* the gradient of neuron layer v's learned parameter i: the neurons' shares (partial, f64, one
 * per neuron) summed in order, in double from +0, rounded to float once (interp_grad's order) */
static void
learned_grad(G *g, ValueId v, int i, int partial)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Module *m = lw->m;
    int w = node_param_weight(m, &m->nodes[v], i);
    int dw = add_buf(lw, arena_printf(&p->arena, "%s.grad", m->weights[w].name), KT_F32,
                     (KSize){0, 1}, KB_TEMP, -1, -1);
    p->bufs[dw].is_written_first = true;
    g->tr->weight_grad[w] = dw;
    begin_kernel(lw, v,
                 describe(lw, v,
                          "backward: a learned parameter's gradient, the neurons' shares "
                          "summed in order"),
                 false);
    lw->k.name = arena_printf(&p->arena, "grad_%s", m->weights[w].name);
    int sum = local(lw, "sum", KT_F64);
    s_assign(lw, top(lw), sum, kx_const(p, KT_F64, 0));
    KExpr *jv;
    KStmt *fj = loop(lw, top(lw), "j",
                     bin(lw, KB_MUL, kx_kind(p, KX_BATCH), ci(lw, lw->vs[v].numel)), false, &jv);
    s_assign(lw, body(fj), sum, bin(lw, KB_ADD, var(lw, sum), kx_load(p, partial, jv)));
    s_store(lw, top(lw), dw, ci(lw, 0), var(lw, sum));
    end_kernel(lw);
}

/* the forward of neuron j once more from the layer's input x, the states before each step stored
 * in hist (hist_index's layout) */
static void
kept_states(Lower *lw, Cur c, ValueId x, const NCopy *cp, KExpr *jv, int hist)
{
    int64_t kept = (int64_t)lw->T * cp->ncarry;
    for (int k = 0; k < cp->ncarry; k++)
        s_assign(lw, c, cp->carry[k], cp->init[k]);
    KExpr *sv;
    KStmt *fs = loop(lw, c, "s", ci(lw, lw->T), false, &sv);
    for (int k = 0; k < cp->ncarry; k++)
        s_store(lw, body(fs), hist, hist_index(lw, jv, sv, k, kept, cp->ncarry),
                var(lw, cp->carry[k]));
    Pos ps = {0};
    ps.j = jv;
    ps.jn = lw->vs[x].numel;
    ps.t = sv;
    s_assign(lw, body(fs), cp->nl.input, to(lw, KT_F32, vload(lw, x, &ps)));
    neuron_step(lw, body(fs), &cp->nl);
}

static void
grad_neuron(G *g, ValueId v)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Module *m = lw->m;
    const Node *n = &m->nodes[v];
    const NeuronDef *nd = m->neurons[n->neuron];
    ValueId x = n->args[0];
    int64_t numel = lw->vs[v].numel;
    int ns = nd->nstates, nl_ = nd->nlocals;
    bool is_static_x = lw->is_static[x], needs_x = g->needs[x];
    bool first = needs_x ? claim(g, x) : false;
    SurrogateFn sg;
    char why[8];
    neuron_surrogate(nd, &sg, why, sizeof why);
    begin_kernel(lw, v,
                 describe(lw, v,
                          "backward: the forward again from the layer's input (states "
                          "kept), then the steps in reverse, reverse mode over the "
                          "neuron's program"),
                 false);
    lw->k.name = arena_printf(&p->arena, "grad_%s", lw->k.name);
    KExpr *jv;
    Pos ps;
    Cur c = sample_lanes(lw, top(lw), numel, &jv, &ps);
    NCopy cp;
    neuron_copy(lw, n, "", &cp);
    NLower nl = cp.nl;
    /* the adjoints carried from step t + 1 to step t: states, lets, spike */
    Adj A = {arena_alloc(&p->arena, (size_t)(ns + 1) * sizeof(int)),
             arena_alloc(&p->arena, (size_t)(nl_ + 1) * sizeof(int)),
             -1,
             -1,
             -1,
             NULL};
    for (int k = 0; k < ns; k++) {
        A.st[k] = local(lw, arena_printf(&p->arena, "d_%s", nd->states[k].name), KT_F32);
        s_assign(lw, c, A.st[k], zero(lw));
    }
    for (int k = 0; k < nl_; k++) {
        A.lc[k] = local(lw, arena_printf(&p->arena, "d_%s", nd->locals[k]), KT_F32);
        s_assign(lw, c, A.lc[k], zero(lw));
    }
    A.sp = local(lw, "d_spike", KT_F32);
    s_assign(lw, c, A.sp, zero(lw));
    A.in = local(lw, "d_I", KT_F32);
    int a_out = local(lw, "d_out", KT_F32);
    /* learned parameters: each neuron's share over its steps, in f64, stored per neuron and
     * summed over the neurons in order by a kernel of its own (learned_grad) */
    A.pa = arena_alloc(&p->arena, (size_t)(nd->nparams + 1) * sizeof(int));
    int *partial = arena_alloc(&p->arena, (size_t)(nd->nparams + 1) * sizeof(int));
    for (int i = 0; i < nd->nparams; i++) {
        A.pa[i] = partial[i] = -1;
        if (!node_learns(n, i)) continue;
        A.pa[i] = local(lw, arena_printf(&p->arena, "d_%s", nd->params[i].name), KT_F64);
        s_assign(lw, c, A.pa[i], kx_const(p, KT_F64, 0));
        partial[i] = add_buf(
            lw, arena_printf(&p->arena, "%s.%s.partial", value_name(lw, v), nd->params[i].name),
            KT_F64, (KSize){numel, 0}, KB_TEMP, -1, -1);
        p->bufs[partial[i]].is_written_first = true;
    }
    /* a static input's gradient: every step's summed (static_sum) */
    int gsum = needs_x && is_static_x ? static_sum(g, c, x, &ps, first, "d_x") : -1;
    /* the forward once more, each step's states kept before it runs: in blocks of HIST_BLOCK
     * neurons, [B*numel / HIST_BLOCK][T][ncarry][HIST_BLOCK] (a block's neurons side by side, as
     * its SIMD lanes load them, and all its steps in one page: [T][ncarry][B*numel] put each
     * step of a lane vector a whole layer apart, a TLB miss per step and state) */
    int64_t kept = (int64_t)lw->T * cp.ncarry;
    /* few enough: kept in locals (registers), both loops over the steps unrolled; else in a
     * scratch buffer */
    bool in_regs = kept <= KEPT_IN_REGISTERS;
    int *keptv = NULL, hist = -1;
    if (in_regs) {
        keptv = arena_alloc(&p->arena, (size_t)(kept + 1) * sizeof *keptv);
        for (int64_t q = 0; q < kept; q++)
            keptv[q] = local(lw, arena_printf(&p->arena, "kept_%lld", (long long)q), KT_F32);
    } else {
        hist = scratch_buf_sized(lw, arena_printf(&p->arena, "%s.states", value_name(lw, v)),
                                 KT_F32, (KSize){kept * numel, kept * HIST_BLOCK});
    }
    if (in_regs) {
        for (int k = 0; k < cp.ncarry; k++)
            s_assign(lw, c, cp.carry[k], cp.init[k]);
        for (int s = 0; s < lw->T; s++) {
            for (int k = 0; k < cp.ncarry; k++)
                s_assign(lw, c, keptv[s * cp.ncarry + k], var(lw, cp.carry[k]));
            Pos pss = ps;
            pss.t = ci(lw, s);
            s_assign(lw, c, nl.input, to(lw, KT_F32, vload(lw, x, &pss)));
            neuron_step(lw, c, &nl);
        }
    } else {
        kept_states(lw, c, x, &cp, jv, hist);
    }
    /* steps t = T-1 .. 0 */
    for (int r = 0; r < (in_regs ? lw->T : 1); r++)
        grad_neuron_step(g, v, c, &cp, &A, in_regs ? ci(lw, lw->T - 1 - r) : NULL, keptv, hist, jv,
                         gsum, a_out, first, &sg);
    if (gsum >= 0) static_store(g, c, x, &ps, gsum);
    for (int i = 0; i < nd->nparams; i++)
        if (partial[i] >= 0) s_store(lw, c, partial[i], jv, var(lw, A.pa[i]));
    end_kernel(lw);
    for (int i = 0; i < nd->nparams; i++)
        if (partial[i] >= 0) learned_grad(g, v, i, partial[i]);
}

/* One step of a neuron layer's backward (grad_neuron) at step t, or (t NULL) the loop over the
 * steps in reverse: the states before the step from the kept ones (locals keptv, or the scratch
 * buffer hist), the step once more with its statements' inputs in locals, then its statements
 * walked backwards. */
static void
grad_neuron_step(G *g, ValueId v, Cur c, const NCopy *cpp, const Adj *Ap, KExpr *t,
                 const int *keptv, int hist, KExpr *jv, int gsum, int a_out, bool first,
                 const SurrogateFn *sgp)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Module *m = lw->m;
    const Node *n = &m->nodes[v];
    const NeuronDef *nd = m->neurons[n->neuron];
    ValueId x = n->args[0];
    int64_t numel = lw->vs[v].numel;
    int ns = nd->nstates, nl_ = nd->nlocals, nst = nd->nstmts;
    bool is_static_x = lw->is_static[x], needs_x = g->needs[x];
    NCopy cp = *cpp;
    NLower nl = cp.nl;
    Adj A = *Ap;
    SurrogateFn sg = *sgp;
    int64_t kept = (int64_t)lw->T * cp.ncarry;
    Pos ps = {0};
    ps.j = jv;
    ps.jn = numel;
    Cur cu = c;
    KExpr *tv = t;
    if (!t) {
        KExpr *uv;
        KStmt *fu = loop(lw, c, "u", ci(lw, lw->T), false, &uv);
        cu = body(fu);
        int tl = local(lw, "t", KT_I64);
        s_assign(lw, cu, tl, bin(lw, KB_SUB, ci(lw, lw->T - 1), uv));
        tv = var(lw, tl);
    }
    /* the states before step t, as the forward pass left them */
    for (int k = 0; k < cp.ncarry; k++)
        s_assign(lw, cu, cp.carry[k],
                 keptv ? var(lw, keptv[(int64_t)tv->num * cp.ncarry + k])
                       : kx_load(p, hist, hist_index(lw, jv, tv, k, kept, cp.ncarry)));
    /* step t, each statement's inputs kept */
    Pos pt = ps;
    pt.t = tv;
    s_assign(lw, cu, nl.input, to(lw, KT_F32, vload(lw, x, &pt)));
    NLower *snap = arena_alloc(&p->arena, (size_t)(nst + 1) * sizeof *snap);
    for (int s = 0; s < nst; s++) {
        int *st = arena_alloc(&p->arena, (size_t)(ns + 1) * sizeof *st);
        int *lc = arena_alloc(&p->arena, (size_t)(nl_ + 1) * sizeof *lc);
        for (int k = 0; k < ns; k++) {
            st[k] = local(lw, arena_printf(&p->arena, "%s_%d", nd->states[k].name, s), KT_F32);
            s_assign(lw, cu, st[k], var(lw, nl.state[k]));
        }
        for (int k = 0; k < nl_; k++) {
            lc[k] = local(lw, arena_printf(&p->arena, "%s_%d", nd->locals[k], s), KT_F32);
            s_assign(lw, cu, lc[k], var(lw, nl.let[k]));
        }
        int sp = local(lw, arena_printf(&p->arena, "spike_%d", s), KT_F32);
        s_assign(lw, cu, sp, var(lw, nl.spike));
        snap[s] = snapshot(&nl, st, lc, sp);
        /* the statement itself (neuron_step's arithmetic, one statement) */
        const NStmt *stm = &nd->stmts[s];
        int target = stm->is_local ? nl.let[stm->var] : nl.state[stm->var];
        switch (stm->kind) {
        case NS_ASSIGN:
            s_assign(lw, cu, target, nexpr(lw, &nl, stm->e));
            break;
        case NS_FIRE:
            s_assign(lw, cu, nl.spike,
                     kx_select(p, to(lw, KT_BOOL, nexpr(lw, &nl, stm->e)), kx_const(p, KT_F32, 1),
                               zero(lw)));
            break;
        case NS_RESET_TO: {
            KStmt *i = s_if(lw, cu, bin(lw, KB_NE, var(lw, nl.spike), zero(lw)));
            s_assign(lw, body(i), target, nexpr(lw, &nl, stm->e));
            break;
        }
        case NS_RESET_SUB:
            s_assign(
                lw, cu, target,
                bin(lw, KB_SUB, var(lw, target),
                    bin(lw, KB_MUL, var(lw, nl.spike), to(lw, KT_F32, nexpr(lw, &nl, stm->e)))));
            break;
        case NS_OUTPUT:
        case NS_REFRACTORY:
        case NS_FIRE_DOWN:
            break;
        }
    }
    /* the adjoints after the step: the layer's output gradient (the spike's, or the output
     * expression's), added as the interpreter adds it */
    KExpr *gy = g->pool_of[v] >= 0 ? pool_grad_inline(g, g->pool_of[v], cu, &pt) : gload(g, v, &pt);
    s_assign(lw, cu, A.in, zero(lw));
    if (cp.has_output)
        s_assign(lw, cu, a_out, gy);
    else
        adj_add(lw, cu, A.sp, gy);
    /* and the state probes' gradients, each to its variable after the step */
    for (ValueId u = 0; u < m->nnodes; u++) {
        const Node *pn = &m->nodes[u];
        if (pn->op != OP_STATE || pn->args[0] != v || g->gbuf[u] < 0) continue;
        const char *name = pn->attrs[op_attr_index(OP_STATE, "var")].s;
        int av = -1;
        for (int k = 0; k < ns && av < 0; k++)
            if (!strcmp(nd->states[k].name, name)) av = A.st[k];
        for (int k = 0; k < nl_ && av < 0; k++)
            if (!strcmp(nd->locals[k], name)) av = A.lc[k];
        if (av < 0) die("kir: state probe %d names no variable of its neuron", (int)u);
        adj_add(lw, cu, av, gload(g, u, &pt));
    }
    for (int s = nst - 1; s >= 0; s--) {
        const NStmt *stm = &nd->stmts[s];
        const NLower *sn = &snap[s];
        int av = stm->is_local ? A.lc[stm->var] : A.st[stm->var];
        switch (stm->kind) {
        case NS_ASSIGN: {
            int a = local(lw, arena_printf(&p->arena, "a_%d", s), KT_F32);
            s_assign(lw, cu, a, var(lw, av));
            s_assign(lw, cu, av, zero(lw));
            backprop(lw, cu, sn, stm->e, var(lw, a), &A);
            break;
        }
        case NS_FIRE: {
            int a = local(lw, arena_printf(&p->arena, "a_%d", s), KT_F32);
            s_assign(lw, cu, a, var(lw, A.sp));
            s_assign(lw, cu, A.sp, zero(lw));
            const NExpr *e = stm->e;
            bool up = e->op == NB_GE || e->op == NB_GT;
            KExpr *u = bin(lw, KB_SUB, to(lw, KT_F32, nexpr(lw, sn, e->args[0])),
                           to(lw, KT_F32, nexpr(lw, sn, e->args[1])));
            if (!up) u = kx_un(p, KU_NEG, u);
            int gu = local(lw, arena_printf(&p->arena, "gu_%d", s), KT_F32);
            s_assign(lw, cu, gu, surrogate_expr(lw, &sg, var(lw, a), u));
            KExpr *pos = var(lw, gu), *neg = kx_un(p, KU_NEG, var(lw, gu));
            backprop(lw, cu, sn, e->args[0], up ? pos : neg, &A);
            backprop(lw, cu, sn, e->args[1], up ? neg : pos, &A);
            break;
        }
        case NS_RESET_TO: {
            /* V = S e + (1 - S) H: dH = a (1 - S), de = a S, dS = a e - a H */
            int a = local(lw, arena_printf(&p->arena, "a_%d", s), KT_F32);
            s_assign(lw, cu, a, var(lw, av));
            KExpr *S = var(lw, sn->spike);
            KExpr *H = var(lw, stm->is_local ? sn->let[stm->var] : sn->state[stm->var]);
            KExpr *ev = to(lw, KT_F32, nexpr(lw, sn, stm->e));
            s_assign(lw, cu, av,
                     bin(lw, KB_MUL, var(lw, a), bin(lw, KB_SUB, kx_const(p, KT_F32, 1), S)));
            backprop(lw, cu, sn, stm->e, bin(lw, KB_MUL, var(lw, a), S), &A);
            if (!sg.detach_reset)
                adj_add(lw, cu, A.sp,
                        bin(lw, KB_SUB, bin(lw, KB_MUL, var(lw, a), ev),
                            bin(lw, KB_MUL, var(lw, a), H)));
            break;
        }
        case NS_RESET_SUB: {
            /* V = H - S e: dH = a, dS = -a e, de = -a S */
            int a = local(lw, arena_printf(&p->arena, "a_%d", s), KT_F32);
            s_assign(lw, cu, a, var(lw, av));
            KExpr *na = kx_un(p, KU_NEG, var(lw, a));
            if (!sg.detach_reset)
                adj_add(lw, cu, A.sp, bin(lw, KB_MUL, na, to(lw, KT_F32, nexpr(lw, sn, stm->e))));
            backprop(lw, cu, sn, stm->e, bin(lw, KB_MUL, na, var(lw, sn->spike)), &A);
            break;
        }
        case NS_OUTPUT: {
            int a = local(lw, arena_printf(&p->arena, "a_%d", s), KT_F32);
            s_assign(lw, cu, a, var(lw, a_out));
            s_assign(lw, cu, a_out, zero(lw));
            backprop(lw, cu, sn, stm->e, var(lw, a), &A);
            break;
        }
        case NS_REFRACTORY:
        case NS_FIRE_DOWN:
            break;
        }
    }
    if (needs_x) {
        if (is_static_x)
            s_assign(lw, cu, gsum, bin(lw, KB_ADD, var(lw, gsum), var(lw, A.in)));
        else
            gadd(g, cu, x, &pt, var(lw, A.in), first);
    }
}

/* ---- dense layers ---- */

/* the weight gradient's register block: inputs side by side, each a tile of DW_LANES outputs
 * (f32: 4 x 2 AVX2 registers of accumulators, the row's dy vector and the inputs' broadcasts) */
enum { DW_INPUTS = 4, DW_INPUTS_WIDE = 8, DW_LANES = 16 }; /* WIDE: with AVX-512 */
/* over spikes: outputs per block (at most; 4 without AVX-512), each a tile of DW_LANES inputs
 * sharing the row's widened spike vector (8 AVX-512 registers of accumulators) */
enum { DW_SPIKE_OUTPUTS = 8 };
/* dL/dx's register block: rows sharing each weight vector, each a tile of DW_LANES inputs */
enum { DX_ROWS = 8 }; /* at most; 4 without AVX-512 (dense_data_tile) */

typedef struct DenseGrad {
    G *g;
    int ni; /* inputs per block */
    ValueId v, x;
    int64_t K, O;
    int wrows; /* the weight as stored, [O][K] */
    Pos row;   /* the row (r or b) */
    KExpr *rows;
    bool first, is_sparse;
    int dw;
} DenseGrad;

/* dL/dx[r0 .. r0 + mr, i0 .. i0 + lanes) = (what it holds) + sum over o of dy[r, o] W[o, i]:
 * mr rows' tiles share each weight vector */
static void
dense_data_rows(Lower *lw, Cur c, const DenseGrad *d, KExpr *r0, int mr, KExpr *i0, int lanes)
{
    G *g = d->g;
    ValueId rx = root(lw, d->x);
    int t[DX_ROWS];
    KExpr *xi[DX_ROWS];
    for (int m = 0; m < mr; m++) {
        t[m] = tile(lw, "dx", lanes);
        Pos px = row_pos(lw, d->v, bin(lw, KB_ADD, r0, ci(lw, m)), i0);
        xi[m] = vindex(lw, rx, &px);
        if (d->first)
            s_tile(lw, c, KS_VSET, t[m], -1, NULL, kx_const(lw->p, KT_F64, 0));
        else
            s_tile(lw, c, KS_VLOAD, t[m], g->gbuf[rx], xi[m], NULL);
    }
    KExpr *o;
    KStmt *fo = loop(lw, c, "o", ci(lw, d->O), false, &o);
    KExpr *wi = bin(lw, KB_ADD, bin(lw, KB_MUL, o, ci(lw, d->K)), i0);
    for (int m = 0; m < mr; m++) {
        Pos py = row_pos(lw, d->v, bin(lw, KB_ADD, r0, ci(lw, m)), o);
        tile_fma(lw, body(fo), t[m], gload(g, d->v, &py), d->wrows, wi, false);
    }
    for (int m = 0; m < mr; m++)
        s_tile(lw, c, KS_VSTORE, t[m], g->gbuf[rx], xi[m], NULL);
}

/* the rows of one tile of inputs [i0, i0 + lanes): blocks of DX_ROWS, then those left over (the
 * tile's column of W stays in cache over all of them) */
static void
dense_data_tile(Lower *lw, Cur c, const DenseGrad *d, KExpr *i0, int lanes)
{
    KExpr *R = rows_of(lw, d->v), *rb, *rr;
    int mr = lower_wide_vectors() ? DX_ROWS : 4;
    KExpr *nblk = bin(lw, KB_DIV, R, ci(lw, mr));
    KStmt *fb = loop(lw, c, "rb", nblk, false, &rb);
    dense_data_rows(lw, body(fb), d, bin(lw, KB_MUL, rb, ci(lw, mr)), mr, i0, lanes);
    KStmt *fr = loop(lw, c, "rr", bin(lw, KB_REM, R, ci(lw, mr)), false, &rr);
    dense_data_rows(lw, body(fr), d, bin(lw, KB_ADD, bin(lw, KB_MUL, nblk, ci(lw, mr)), rr), 1, i0,
                    lanes);
}

/* a weight-gradient block: d->ni tiles of `lanes` from +0, and the loop over the rows in order
 * (its variable in *rv) */
static KStmt *
dw_tiles(Lower *lw, Cur c, const DenseGrad *d, int lanes, int *t, KExpr **rv)
{
    for (int k = 0; k < d->ni; k++) {
        t[k] = tile(lw, "dw", lanes);
        s_tile(lw, c, KS_VSET, t[k], -1, NULL, kx_const(lw->p, KT_F64, 0));
    }
    return loop(lw, c, "r", d->rows, false, rv);
}

/* dW[o0 .. o0 + lanes, i .. i + ni) = sum over rows of x[row, i] dy[row, o]: ni inputs side by
 * side, so that each row's dy vector, loaded once, feeds ni tiles */
static void
dense_weight_tile(Lower *lw, Cur c, KExpr *o0, int lanes, const void *ctx)
{
    const DenseGrad *d = ctx;
    G *g = d->g;
    int ni = d->ni, t[DW_INPUTS_WIDE];
    KExpr *rv;
    KStmt *fr = dw_tiles(lw, c, d, lanes, t, &rv);
    Pos py = row_pos(lw, d->v, rv, o0);
    ValueId rvv = root(lw, d->v);
    KExpr *gi = vindex(lw, rvv, &py);
    for (int k = 0; k < ni; k++) {
        Pos px = row_pos(lw, d->x, rv, bin(lw, KB_ADD, d->row.i, ci(lw, k)));
        tile_fma(lw, body(fr), t[k], to(lw, KT_F32, vload(lw, d->x, &px)), g->gbuf[rvv], gi, false);
    }
    for (int k = 0; k < ni; k++) {
        KExpr *i = bin(lw, KB_ADD, d->row.i, ci(lw, k));
        KStmt *st = s_tile(lw, c, KS_VSTORE, t[k], d->dw,
                           bin(lw, KB_ADD, bin(lw, KB_MUL, o0, ci(lw, d->K)), i), NULL);
        st->stride = d->K;
    }
}

/* The same sums with inputs as lanes, for spike inputs: dW[o .. o + ni, i0 .. i0 + lanes) = sum
 * over rows of dy[row, o] x[row, i] (the spikes' bytes widened in the tile loads): each row's
 * input vector, loaded once, feeds ni outputs' tiles; the dW rows are stored whole. Each
 * element's terms in the same order as dense_weight_tile's (a zero input adds +-0 to a sum that
 * is never -0: the same bits as skipping it). */
static void
dense_weight_tile_inputs(Lower *lw, Cur c, KExpr *i0, int lanes, const void *ctx)
{
    const DenseGrad *d = ctx;
    G *g = d->g;
    int ni = d->ni, t[DW_SPIKE_OUTPUTS];
    KExpr *rv;
    KStmt *fr = dw_tiles(lw, c, d, lanes, t, &rv);
    Pos px = row_pos(lw, d->x, rv, i0);
    ValueId rx = root(lw, d->x);
    KExpr *xi = vindex(lw, rx, &px);
    for (int k = 0; k < ni; k++) {
        Pos py = row_pos(lw, d->v, rv, bin(lw, KB_ADD, d->row.i, ci(lw, k)));
        tile_fma(lw, body(fr), t[k], gload(g, d->v, &py), lw->vs[rx].buf, xi, false);
    }
    for (int k = 0; k < ni; k++) {
        KExpr *o = bin(lw, KB_ADD, d->row.i, ci(lw, k));
        s_tile(lw, c, KS_VSTORE, t[k], d->dw, bin(lw, KB_ADD, bin(lw, KB_MUL, o, ci(lw, d->K)), i0),
               NULL);
    }
}

static void
dense_grad_init(G *g, ValueId v, DenseGrad *dg)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Module *m = lw->m;
    const Node *n = &m->nodes[v];
    ValueId x = n->args[0];
    DenseGrad d = {g,  1,   v,    x,     lw->vs[root(lw, x)].numel, lw->vs[v].numel,
                   -1, {0}, NULL, false, is_spike_value(lw, x),     -1};
    int w = n->first_weight;
    d.wrows = add_buf(lw, arena_printf(&p->arena, "%s.rows", m->weights[w].name), KT_F32,
                      (KSize){0, m->weights[w].numel}, KB_WEIGHT, w, -1);
    *dg = d;
}

static void dense_grad_weights(G *g, DenseGrad *dg);

/* ---- the GPU's shapes (KTARGET_GPU): a thread per element of the result, consecutive threads
 * on neighbouring elements, each element's terms in the CPU kernels' order (the same bits; a
 * one-lane tile is the CPU tile's lane). The CPU's tiles of 16-64 lanes over rows or channels
 * gave the GPU a few dozen threads, each with its tiles in local memory: the conv net's step
 * spent 2.7 s in the dW of its 128->128 conv, with 18 threads (H200). ---- */

static bool
on_gpu(const Lower *lw)
{
    return lw->p->target == KTARGET_GPU;
}

/* q's coordinates in an array of dims n[0..k) (the last fastest) into locals out[] */
static void
gpu_coords(Lower *lw, Cur c, KExpr *q, int k, const int64_t *n, KExpr **out)
{
    KExpr *rest = q;
    for (int d = k - 1; d >= 0; d--) {
        int v = local(lw, "i", KT_I64);
        s_assign(lw, c, v, d == 0 ? rest : bin(lw, KB_REM, rest, ci(lw, n[d])));
        out[d] = var(lw, v);
        if (d > 0) rest = bin(lw, KB_DIV, rest, ci(lw, n[d]));
    }
}

/* dL/dx[r, i] = (what it holds) + sum over o of dy[r, o] W[o, i]: a thread per (r, i), i
 * fastest (the warp's weight loads coalesce, its dy loads are one broadcast) */
static void
dense_data_gpu(Lower *lw, const DenseGrad *d)
{
    G *g = d->g;
    ValueId rx = root(lw, d->x);
    KExpr *q, *ri[2];
    KStmt *fq = loop(lw, top(lw), "q", bin(lw, KB_MUL, rows_of(lw, d->v), ci(lw, d->K)), true, &q);
    Cur c = body(fq);
    gpu_coords(lw, c, q, 2, (const int64_t[]){0, d->K}, ri);
    int t = tile(lw, "dx", 1);
    Pos px = row_pos(lw, d->v, ri[0], ri[1]);
    KExpr *xi = vindex(lw, rx, &px);
    if (d->first)
        s_tile(lw, c, KS_VSET, t, -1, NULL, kx_const(lw->p, KT_F64, 0));
    else
        s_tile(lw, c, KS_VLOAD, t, g->gbuf[rx], xi, NULL);
    KExpr *o;
    KStmt *fo = loop(lw, c, "o", ci(lw, d->O), false, &o);
    Pos py = row_pos(lw, d->v, ri[0], o);
    tile_fma(lw, body(fo), t, gload(g, d->v, &py), d->wrows,
             bin(lw, KB_ADD, bin(lw, KB_MUL, o, ci(lw, d->K)), ri[1]), false);
    s_tile(lw, c, KS_VSTORE, t, g->gbuf[rx], xi, NULL);
}

static void
grad_dense(G *g, ValueId v)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    ValueId x = lw->m->nodes[v].args[0];
    DenseGrad d;
    dense_grad_init(g, v, &d);
    const char *name = value_name(lw, v);
    /* with AVX-512, tiles of two registers: each row's broadcast dL/dy serves two multiply-adds */
    int nt = (lw->acc == KT_F32 ? DW_LANES : DW_LANES / 2) * (lower_wide_vectors() ? 2 : 1);
    /* dL/dx, where a weight's gradient flows through x */
    if (g->needs[x]) {
        if (lw->is_static[v] != lw->is_static[x])
            die("kir: dense gradient between a static and a per-step value");
        d.first = claim(g, x);
        begin_kernel(lw, v,
                     describe(lw, v,
                              on_gpu(lw) ? "backward: dL/dx = dL/dy W, a thread per input "
                                           "element, outputs in order"
                                         : "backward: dL/dx = dL/dy W, tiles of inputs in "
                                           "parallel, blocks of rows sharing each weight vector, "
                                           "outputs in order"),
                     false);
        lw->k.name = arena_printf(&p->arena, "grad_x_%s", name);
        if (on_gpu(lw)) {
            dense_data_gpu(lw, &d);
            end_kernel(lw);
            dense_grad_weights(g, &d);
            return;
        }
        int64_t nfull = d.K / nt, tail = d.K % nt;
        KExpr *it;
        KStmt *fi = loop(lw, top(lw), "it", ci(lw, nfull + (tail > 0)), true, &it);
        if (tail == 0) {
            dense_data_tile(lw, body(fi), &d, bin(lw, KB_MUL, it, ci(lw, nt)), nt);
        } else {
            KStmt *full = s_if(lw, body(fi), bin(lw, KB_LT, it, ci(lw, nfull)));
            if (nfull > 0) dense_data_tile(lw, body(full), &d, bin(lw, KB_MUL, it, ci(lw, nt)), nt);
            dense_data_tile(lw, els(full), &d, ci(lw, nfull * nt), (int)tail);
        }
        end_kernel(lw);
    }
    dense_grad_weights(g, &d);
}

/* dW and db over all the rows */
static void
dense_grad_weights(G *g, DenseGrad *dg)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Module *m = lw->m;
    DenseGrad d = *dg;
    ValueId v = d.v, x = d.x;
    const Node *n = &m->nodes[v];
    int w = n->first_weight;
    const char *name = value_name(lw, v);
    /* dW: parallel over inputs i, tiles of outputs, the rows in order */
    d.dw = add_buf(lw, arena_printf(&p->arena, "%s.grad", m->weights[w].name), KT_F32,
                   (KSize){0, m->weights[w].numel}, KB_TEMP, -1, -1);
    p->bufs[d.dw].is_written_first = true;
    g->tr->weight_grad[w] = d.dw;
    /* blocks of DW_INPUTS inputs (outputs, over spikes) in parallel, then those left over one at
     * a time */
    bool by_inputs = d.is_sparse && lw->vs[root(lw, x)].layout != LY_NONE;
    int64_t nout = by_inputs ? d.O : d.K; /* what the parallel loop runs over */
    int per = lower_wide_vectors() ? (by_inputs ? DW_SPIKE_OUTPUTS : DW_INPUTS_WIDE) : DW_INPUTS;
    int64_t nblocks = nout / per, done = nblocks * per;
    /* with AVX-512, tiles of two registers: each broadcast (an input, or over spikes a row's
     * dL/dy) serves two multiply-adds, as in conv_weight_kernel */
    int wl = (lw->acc == KT_F32 ? DW_LANES : DW_LANES / 2) * (lower_wide_vectors() ? 2 : 1);
    /* over spikes with whole tiles of inputs: the parallel loop runs over (block, input tile)
     * pairs, and the outputs left over make one block (a block of outputs alone left too few
     * iterations to share: a 10-class layer's one block of 8) */
    bool pairs = by_inputs && d.K % wl == 0;
    for (int part = 0; part < 2; part++) {
        int64_t n_iter = part == 0 ? nblocks : nout - done;
        if (n_iter == 0) continue;
        if (pairs) {
            int64_t ntl = d.K / wl;
            begin_kernel(lw, v,
                         describe(lw, v,
                                  part == 0 ? "backward: dW = dL/dy^T x over spikes, (block of "
                                              "outputs, tile of inputs) in parallel, rows in order"
                                            : "backward: dW over spikes, the outputs left over as "
                                              "one block, tiles of inputs in parallel"),
                         false);
            lw->k.name = arena_printf(&p->arena, "grad_w%s_%s", part ? "_tail" : "", name);
            KExpr *iv;
            KStmt *fi = loop(lw, top(lw), "ib", ci(lw, (part == 0 ? n_iter : 1) * ntl), true, &iv);
            KExpr *blk = bin(lw, KB_DIV, iv, ci(lw, ntl)), *it = bin(lw, KB_REM, iv, ci(lw, ntl));
            d.rows = rows_of(lw, v);
            memset(&d.row, 0, sizeof d.row);
            d.ni = part == 0 ? per : (int)n_iter;
            d.row.i = part == 0 ? bin(lw, KB_MUL, blk, ci(lw, per)) : ci(lw, done);
            dense_weight_tile_inputs(lw, body(fi), bin(lw, KB_MUL, it, ci(lw, wl)), wl, &d);
            end_kernel(lw);
            continue;
        }
        const char *how =
            by_inputs ? (part == 0 ? "backward: dW = dL/dy^T x over spikes, blocks of outputs in "
                                     "parallel, inputs as lanes, rows in order"
                                   : "backward: dW over spikes, the outputs left over")
                      : (part == 0 ? "backward: dW = dL/dy^T x, blocks of inputs in parallel, rows "
                                     "in order"
                                   : "backward: dW, the inputs left over");
        begin_kernel(lw, v, describe(lw, v, how), false);
        lw->k.name = arena_printf(&p->arena, "grad_w%s_%s", part ? "_tail" : "", name);
        KExpr *iv;
        KStmt *fi = loop(lw, top(lw), "ib", ci(lw, n_iter), true, &iv);
        d.rows = rows_of(lw, v);
        memset(&d.row, 0, sizeof d.row);
        d.ni = part == 0 ? per : 1;
        d.row.i = part == 0 ? bin(lw, KB_MUL, iv, ci(lw, per)) : bin(lw, KB_ADD, iv, ci(lw, done));
        if (by_inputs) /* d.row.i is then the block's first output */
            for_tiles(lw, body(fi), d.K, wl, dense_weight_tile_inputs, &d);
        else
            for_tiles(lw, body(fi), d.O, wl, dense_weight_tile, &d);
        end_kernel(lw);
    }
    /* db: the rows' sum per output */
    if (has_bias(n)) {
        int db = add_buf(lw, arena_printf(&p->arena, "%s.grad", m->weights[w + 1].name), KT_F32,
                         (KSize){0, m->weights[w + 1].numel}, KB_TEMP, -1, -1);
        p->bufs[db].is_written_first = true;
        g->tr->weight_grad[w + 1] = db;
        begin_kernel(lw, v, describe(lw, v, "backward: db = the sum of dL/dy over rows"), false);
        lw->k.name = arena_printf(&p->arena, "grad_b_%s", name);
        KExpr *ov, *rv;
        KStmt *fo = loop(lw, top(lw), "o", ci(lw, d.O), true, &ov);
        int sum = local(lw, "db", lw->acc); /* double under accumulate exact */
        s_assign(lw, body(fo), sum, kx_const(p, lw->acc, 0));
        KStmt *fr = loop(lw, body(fo), "r", rows_of(lw, v), false, &rv);
        Pos py = row_pos(lw, v, rv, ov);
        s_assign(lw, body(fr), sum, bin(lw, KB_ADD, var(lw, sum), to(lw, lw->acc, gload(g, v, &py))));
        s_store(lw, body(fo), db, ov, var(lw, sum));
        end_kernel(lw);
    }
}

/* ---- elementwise ---- */

/* the contribution of elementwise node v's dL/dy at ps to operand k's gradient (k 0: a, 1: b) */
static KExpr *
elementwise_term(G *g, ValueId v, int k, Pos *ps)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Node *n = &lw->m->nodes[v];
    KExpr *gy = gload(g, v, ps);
    switch (n->op) {
    case OP_ADD:
        return gy;
    case OP_SUB:
        return k == 0 ? gy : kx_un(p, KU_NEG, gy);
    case OP_MUL:
        return bin(lw, KB_MUL, gy, to(lw, KT_F32, vload(lw, n->args[1 - k], ps)));
    case OP_SCALE: {
        double factor = (double)(float)node_attr_f(n, "factor"),
               divisor = (double)(float)node_attr_f(n, "divisor");
        KExpr *e = gy;
        if (divisor != 1) e = bin(lw, KB_DIV, e, kx_const(p, KT_F32, divisor));
        if (factor != 1) e = bin(lw, KB_MUL, e, kx_const(p, KT_F32, factor));
        return e;
    }
    default:
        unreachable();
    }
}

/* Add, sub, mul and scale as the interpreter's: operands of v's own layout in one pass over its
 * elements (a before b: add(x, x) adds twice); a static operand of a per-step node gets every
 * step's terms summed in a pass of its own, from the last step to the first as the interpreter
 * adds them into its one slot */
static void
grad_elementwise(G *g, ValueId v)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Node *n = &lw->m->nodes[v];
    ValueId ops[2] = {n->args[0], n->nargs > 1 ? n->args[1] : -1};
    bool need[2] = {g->needs[ops[0]], ops[1] >= 0 && g->needs[ops[1]]};
    if (!need[0] && !need[1]) return;
    int64_t numel = lw->vs[v].numel;
    /* which operands sum over the steps (static, under a per-step node) */
    bool over_t[2] = {false, false};
    for (int k = 0; k < 2; k++)
        over_t[k] = need[k] && !lw->is_static[v] && lw->is_static[root(lw, ops[k])];
    bool same = need[0] && need[1] && root(lw, ops[0]) == root(lw, ops[1]);
    /* claims in the interpreter's order: a before b */
    bool first[2] = {need[0] ? claim(g, ops[0]) : false, need[1] ? claim(g, ops[1]) : false};
    if (same) first[1] = false;
    if ((need[0] && !over_t[0]) || (need[1] && !over_t[1])) {
        begin_kernel(lw, v, describe(lw, v, "backward: elementwise"), false);
        lw->k.name = arena_printf(&p->arena, "grad_%s", lw->k.name);
        KExpr *jv;
        KStmt *fj =
            loop(lw, top(lw), "j", bin(lw, KB_MUL, rows_of(lw, v), ci(lw, numel)), true, &jv);
        fj->is_lanes = true;
        Pos ps =
            row_pos(lw, v, bin(lw, KB_DIV, jv, ci(lw, numel)), bin(lw, KB_REM, jv, ci(lw, numel)));
        for (int k = 0; k < 2; k++)
            if (need[k] && !over_t[k])
                gadd(g, body(fj), ops[k], &ps, elementwise_term(g, v, k, &ps), first[k]);
        end_kernel(lw);
    }
    if (!over_t[0] && !over_t[1]) return;
    begin_kernel(lw, v, describe(lw, v, "backward: elementwise, a static operand's steps summed"),
                 false);
    lw->k.name = arena_printf(&p->arena, "grad_t_%s", lw->k.name);
    KExpr *jv, *tv;
    Pos p0;
    Cur cj = sample_lanes(lw, top(lw), numel, &jv, &p0);
    int sum[2] = {-1, -1};
    for (int k = 0; k < 2; k++)
        if (over_t[k] && !(k == 1 && same))
            sum[k] = static_sum(g, cj, ops[k], &p0, first[k], k ? "d_b" : "d_a");
    Cur cu = steps_from_last(lw, cj, lw->T, &tv);
    Pos pt = p0;
    pt.t = tv;
    for (int k = 0; k < 2; k++) {
        if (!over_t[k]) continue;
        int s_ = sum[k == 1 && same ? 0 : k];
        s_assign(lw, cu, s_, bin(lw, KB_ADD, var(lw, s_), elementwise_term(g, v, k, &pt)));
    }
    for (int k = 0; k < 2; k++)
        if (sum[k] >= 0) static_store(g, cj, ops[k], &p0, sum[k]);
    end_kernel(lw);
}

/* ---- batchnorm on the batch's statistics ---- */

/* GPU: a parallel loop over every element of per-channel value v ([rows][C][inner]), a thread
 * each, the position fastest; its row, channel and position in *r, *c, *i; the loop's body */
static Cur
gpu_elements(Lower *lw, ValueId v, int64_t C, int64_t inner, KExpr **r, KExpr **c, KExpr **i)
{
    KExpr *q, *x[3];
    KStmt *fq =
        loop(lw, top(lw), "q", bin(lw, KB_MUL, rows_of(lw, v), ci(lw, C * inner)), true, &q);
    gpu_coords(lw, body(fq), q, 3, (const int64_t[]){0, C, inner}, x);
    *r = x[0], *c = x[1], *i = x[2];
    return body(fq);
}

/* GPU: a parallel loop over the (row, channel) pairs of per-channel value v, a thread each, the
 * channel fastest; the row and channel in *r, *c, the pair's index in *q; the loop's body */
static Cur
gpu_row_channels(Lower *lw, ValueId v, int64_t C, KExpr **q, KExpr **r, KExpr **c)
{
    KExpr *x[2];
    KStmt *fq = loop(lw, top(lw), "q", bin(lw, KB_MUL, rows_of(lw, v), ci(lw, C)), true, q);
    gpu_coords(lw, body(fq), *q, 2, (const int64_t[]){0, C}, x);
    *r = x[0], *c = x[1];
    return body(fq);
}

/* the sums over rows in order of the rows' sums in part ([rows][C], double) for channel cv:
 * each of n sums (parts[k] the buffer of sum k, into locals sums[k]) */
static void
gpu_rows_total(Lower *lw, Cur c, ValueId v, int64_t C, KExpr *cv, int n, const int *parts,
               const int *sums)
{
    KExpr *rv;
    for (int k = 0; k < n; k++)
        s_assign(lw, c, sums[k], kx_const(lw->p, KT_F64, 0));
    KStmt *fr = loop(lw, c, "r", rows_of(lw, v), false, &rv);
    KExpr *at = bin(lw, KB_ADD, bin(lw, KB_MUL, rv, ci(lw, C)), cv);
    for (int k = 0; k < n; k++)
        s_assign(lw, body(fr), sums[k],
                 bin(lw, KB_ADD, var(lw, sums[k]), kx_load(lw->p, parts[k], at)));
}

/* a row's sum of x over channel cv's positions (x - mu squared with mu), from +0, into local
 * part; then, on the CPU, added to local total */
static void
bn_row_sum(Lower *lw, Cur c, ValueId x, int64_t inner, KExpr *rv, KExpr *cv, int mu, int part,
           int total)
{
    KExpr *iv;
    s_assign(lw, c, part, kx_const(lw->p, KT_F64, 0));
    KStmt *fi = loop(lw, c, "i", ci(lw, inner), false, &iv);
    Pos ps = row_pos(lw, x, rv, bin(lw, KB_ADD, bin(lw, KB_MUL, cv, ci(lw, inner)), iv));
    KExpr *e = to(lw, KT_F64, vload(lw, x, &ps));
    if (mu >= 0) {
        int d = local(lw, "d", KT_F64);
        s_assign(lw, body(fi), d, bin(lw, KB_SUB, e, var(lw, mu)));
        e = bin(lw, KB_MUL, var(lw, d), var(lw, d));
    }
    s_assign(lw, body(fi), part, bin(lw, KB_ADD, var(lw, part), e));
    if (total >= 0) s_assign(lw, c, total, bin(lw, KB_ADD, var(lw, total), var(lw, part)));
}

/* The training forward of batchnorm v: its statistics over every row (t*B + b, or B rows of a
 * static value) and position, in double as interp.c's batch_statistics (each row's sum over its
 * positions, then the rows' in order): the mean, the biased variance ((x - mean)^2 summed so)
 * and 1 / sqrt(var + eps); the mean and that rounded to float; then y = (float)((x - mean)
 * invstd) w + b, rounded once more. On the CPU one kernel, parallel over channels. On the GPU
 * five: the rows' sums a thread per row and channel, their totals a thread per channel, the same
 * for the variance, then the values a thread each (a thread per channel, summing in order, had
 * left 128 threads to sum 50,000 values each: 5.5 ms of the conv net's step on an H200). The
 * statistics stay in buffers (KTrain.bn_*): the backward reads them and the caller updates the
 * running ones. */
void
lower_batchnorm_batch(Lower *lw, ValueId v)
{
    KProgram *p = lw->p;
    const Node *n = &lw->m->nodes[v];
    ValueId x = n->args[0];
    int64_t C = n->type.rank > 0 ? n->type.dims[0] : 1, inner = C ? lw->vs[v].numel / C : 0;
    int64_t steps = lw->is_static[v] ? 1 : lw->T;
    const char *name = value_name(lw, v);
    KTrain *tr = lw->train;
    tr->bn_mean[v] =
        scratch_buf_sized(lw, arena_printf(&p->arena, "%s.mean", name), KT_F32, (KSize){0, C});
    tr->bn_invstd[v] =
        scratch_buf_sized(lw, arena_printf(&p->arena, "%s.invstd", name), KT_F32, (KSize){0, C});
    tr->bn_var[v] =
        scratch_buf_sized(lw, arena_printf(&p->arena, "%s.var", name), KT_F64, (KSize){0, C});
    lw->k.what = describe(lw, v,
                          "training: the batch's statistics per channel (each row's sum over the "
                          "positions, then the rows' in order, in double), then (x - mean) invstd "
                          "w + b");
    KExpr *cnt = to(lw, KT_F64, bin(lw, KB_MUL, rows_of(lw, v), ci(lw, inner)));
    KExpr *cv, *rv, *iv, *q;
    Cur c;
    int sum = -1, sq = -1, mu = -1;
    const char *kname = lw->k.name;
    if (on_gpu(lw)) {
        int rows_s = scratch_buf_sized(lw, arena_printf(&p->arena, "%s.row_sums", name), KT_F64,
                                       (KSize){steps * C, 0});
        int mu_s =
            scratch_buf_sized(lw, arena_printf(&p->arena, "%s.mu", name), KT_F64, (KSize){0, C});
        /* each row's sum; the mean; each row's (x - mean)^2; the variance */
        for (int pass = 0; pass < 2; pass++) {
            c = gpu_row_channels(lw, v, C, &q, &rv, &cv);
            int part = local(lw, "part", KT_F64);
            if (pass == 1) {
                mu = local(lw, "mu", KT_F64);
                s_assign(lw, c, mu, kx_load(p, mu_s, cv));
            }
            bn_row_sum(lw, c, x, inner, rv, cv, pass ? mu : -1, part, -1);
            s_store(lw, c, rows_s, q, var(lw, part));
            gpu_next_kernel(lw, arena_printf(&p->arena, "%s_%s", kname, pass ? "var" : "mean"));
            KStmt *fc = loop(lw, top(lw), "c", ci(lw, C), true, &cv);
            c = body(fc);
            int total = local(lw, pass ? "sq" : "sum", KT_F64);
            gpu_rows_total(lw, c, v, C, cv, 1, &rows_s, &total);
            if (pass == 0) {
                s_store(lw, c, mu_s, cv, bin(lw, KB_DIV, var(lw, total), cnt));
                gpu_next_kernel(lw, arena_printf(&p->arena, "%s_var_rows", kname));
            } else {
                sq = total;
                mu = local(lw, "mu", KT_F64);
                s_assign(lw, c, mu, kx_load(p, mu_s, cv));
            }
        }
    } else {
        KStmt *fc = loop(lw, top(lw), "c", ci(lw, C), true, &cv);
        c = body(fc);
        KExpr *f64zero = kx_const(p, KT_F64, 0);
        sum = local(lw, "sum", KT_F64), sq = local(lw, "sq", KT_F64), mu = local(lw, "mu", KT_F64);
        int part = local(lw, "part", KT_F64);
        s_assign(lw, c, sum, f64zero);
        KStmt *fr = loop(lw, c, "r", rows_of(lw, v), false, &rv);
        bn_row_sum(lw, body(fr), x, inner, rv, cv, -1, part, sum);
        s_assign(lw, c, mu, bin(lw, KB_DIV, var(lw, sum), cnt));
        s_assign(lw, c, sq, f64zero);
        fr = loop(lw, c, "r", rows_of(lw, v), false, &rv);
        bn_row_sum(lw, body(fr), x, inner, rv, cv, mu, part, sq);
    }
    KExpr *varc = bin(lw, KB_DIV, var(lw, sq), cnt);
    int mf = local(lw, "mean", KT_F64), is = local(lw, "invstd", KT_F64);
    s_assign(lw, c, mf, to(lw, KT_F64, to(lw, KT_F32, var(lw, mu))));
    s_assign(lw, c, is,
             to(lw, KT_F64,
                to(lw, KT_F32,
                   bin(lw, KB_DIV, kx_const(p, KT_F64, 1),
                       kx_un(p, KU_SQRT,
                             bin(lw, KB_ADD, varc, kx_const(p, KT_F64, node_attr_f(n, "eps"))))))));
    s_store(lw, c, tr->bn_mean[v], cv, var(lw, mf));
    s_store(lw, c, tr->bn_invstd[v], cv, var(lw, is));
    s_store(lw, c, tr->bn_var[v], cv, varc);
    /* kept in no buffer: its readers recompute each value from x, mean and invstd as below
     * (kir_lower.c bn_recomputed; lower_layers.c batchnorm_expr) */
    if (lw->vs[v].is_recomputed) return;
    if (on_gpu(lw)) {
        /* the values a thread each, mean and invstd read back as stored (the same values) */
        gpu_next_kernel(lw, arena_printf(&p->arena, "%s_values", kname));
        c = gpu_elements(lw, v, C, inner, &rv, &cv, &iv);
        mf = local(lw, "mean", KT_F64), is = local(lw, "invstd", KT_F64);
        s_assign(lw, c, mf, to(lw, KT_F64, kx_load(p, tr->bn_mean[v], cv)));
        s_assign(lw, c, is, to(lw, KT_F64, kx_load(p, tr->bn_invstd[v], cv)));
    } else {
        KStmt *fr = loop(lw, c, "r", rows_of(lw, v), false, &rv);
        KStmt *fi = loop(lw, body(fr), "i", ci(lw, inner), false, &iv);
        fi->is_lanes = true;
        c = body(fi);
    }
    KExpr *w = to(lw, KT_F64, kx_load(p, wbuf(lw, n, 0), cv));
    KExpr *b = to(lw, KT_F64, kx_load(p, wbuf(lw, n, 1), cv));
    Pos ps = row_pos(lw, v, rv, bin(lw, KB_ADD, bin(lw, KB_MUL, cv, ci(lw, inner)), iv));
    KExpr *xh = to(lw, KT_F32,
                   bin(lw, KB_MUL, bin(lw, KB_SUB, to(lw, KT_F64, vload(lw, x, &ps)), var(lw, mf)),
                       var(lw, is)));
    vstore(lw, c, v, &ps,
           to(lw, KT_F32, bin(lw, KB_ADD, bin(lw, KB_MUL, to(lw, KT_F64, xh), w), b)));
}

/* the backward's sums of row rv over channel cv's positions, from +0, into locals pg (dy) and pgx
 * (dy (x - mean) invstd) */
static void
bn_grad_row_sums(G *g, Cur c, ValueId v, int64_t inner, KExpr *rv, KExpr *cv, int mean, int is,
                 int pg, int pgx)
{
    Lower *lw = g->lw;
    ValueId x = lw->m->nodes[v].args[0];
    KExpr *iv, *f64zero = kx_const(lw->p, KT_F64, 0);
    s_assign(lw, c, pg, f64zero);
    s_assign(lw, c, pgx, f64zero);
    KStmt *fi = loop(lw, c, "i", ci(lw, inner), false, &iv);
    Pos ps = row_pos(lw, v, rv, bin(lw, KB_ADD, bin(lw, KB_MUL, cv, ci(lw, inner)), iv));
    int gy = local(lw, "gy", KT_F64);
    s_assign(lw, body(fi), gy, to(lw, KT_F64, gload(g, v, &ps)));
    s_assign(lw, body(fi), pg, bin(lw, KB_ADD, var(lw, pg), var(lw, gy)));
    KExpr *xc = bin(lw, KB_SUB, to(lw, KT_F64, vload(lw, x, &ps)), var(lw, mean));
    s_assign(lw, body(fi), pgx,
             bin(lw, KB_ADD, var(lw, pgx),
                 bin(lw, KB_MUL, bin(lw, KB_MUL, var(lw, gy), xc), var(lw, is))));
}

/* Its backward (interp_grad.c's batchnorm_backward_batch): sg = sum dy, sgx = sum dy (x - mean)
 * invstd in double (each row's sums over the positions, then the rows' in order); dw = sgx,
 * db = sg; dx = (float)(w invstd (dy - mg - xh mgx)) with mg, mgx the sums over the count (a
 * static value counted T times). On the CPU one kernel, parallel over channels; on the GPU the
 * rows' sums a thread per row and channel, the totals a thread per channel, then dL/dx a thread
 * per element. */
static void
grad_batchnorm(G *g, ValueId v)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Node *n = &lw->m->nodes[v];
    ValueId x = n->args[0];
    int64_t C = n->type.rank > 0 ? n->type.dims[0] : 1, inner = C ? lw->vs[v].numel / C : 0;
    int64_t steps = lw->is_static[v] ? 1 : lw->T;
    bool needs_x = g->needs[x], first = needs_x ? claim(g, x) : false;
    int w = n->first_weight;
    int dw = add_buf(lw, arena_printf(&p->arena, "%s.grad", lw->m->weights[w].name), KT_F32,
                     (KSize){0, C}, KB_TEMP, -1, -1);
    int db = add_buf(lw, arena_printf(&p->arena, "%s.grad", lw->m->weights[w + 1].name), KT_F32,
                     (KSize){0, C}, KB_TEMP, -1, -1);
    p->bufs[dw].is_written_first = p->bufs[db].is_written_first = true;
    g->tr->weight_grad[w] = dw;
    g->tr->weight_grad[w + 1] = db;
    const char *name = value_name(lw, v);
    begin_kernel(lw, v,
                 describe(lw, v,
                          "backward: the batch statistics' gradient per channel (each row's sums, "
                          "then the rows' in order, in double), then dL/dx"),
                 false);
    lw->k.name = arena_printf(&p->arena, "grad_%s", lw->k.name);
    const char *kname = lw->k.name;
    KExpr *cv, *rv, *iv, *q;
    KExpr *f64zero = kx_const(p, KT_F64, 0);
    int sg, sgx, mean, is;
    Cur c;
    int pg, pgx;
    if (on_gpu(lw)) {
        int rg = scratch_buf_sized(lw, arena_printf(&p->arena, "%s.row_sg", name), KT_F64,
                                   (KSize){steps * C, 0});
        int rgx = scratch_buf_sized(lw, arena_printf(&p->arena, "%s.row_sgx", name), KT_F64,
                                    (KSize){steps * C, 0});
        c = gpu_row_channels(lw, v, C, &q, &rv, &cv);
        mean = local(lw, "mean", KT_F64), is = local(lw, "invstd", KT_F64);
        pg = local(lw, "pg", KT_F64), pgx = local(lw, "pgx", KT_F64);
        s_assign(lw, c, mean, to(lw, KT_F64, kx_load(p, g->tr->bn_mean[v], cv)));
        s_assign(lw, c, is, to(lw, KT_F64, kx_load(p, g->tr->bn_invstd[v], cv)));
        bn_grad_row_sums(g, c, v, inner, rv, cv, mean, is, pg, pgx);
        s_store(lw, c, rg, q, var(lw, pg));
        s_store(lw, c, rgx, q, var(lw, pgx));
        gpu_next_kernel(lw, arena_printf(&p->arena, "%s_sums", kname));
        KStmt *fc = loop(lw, top(lw), "c", ci(lw, C), true, &cv);
        c = body(fc);
        sg = local(lw, "sg", KT_F64), sgx = local(lw, "sgx", KT_F64);
        gpu_rows_total(lw, c, v, C, cv, 2, (const int[]){rg, rgx}, (const int[]){sg, sgx});
    } else {
        KStmt *fc = loop(lw, top(lw), "c", ci(lw, C), true, &cv);
        c = body(fc);
        sg = local(lw, "sg", KT_F64), sgx = local(lw, "sgx", KT_F64);
        mean = local(lw, "mean", KT_F64), is = local(lw, "invstd", KT_F64);
        pg = local(lw, "pg", KT_F64), pgx = local(lw, "pgx", KT_F64);
        s_assign(lw, c, mean, to(lw, KT_F64, kx_load(p, g->tr->bn_mean[v], cv)));
        s_assign(lw, c, is, to(lw, KT_F64, kx_load(p, g->tr->bn_invstd[v], cv)));
        s_assign(lw, c, sg, f64zero);
        s_assign(lw, c, sgx, f64zero);
        KStmt *fr = loop(lw, c, "r", rows_of(lw, v), false, &rv);
        bn_grad_row_sums(g, body(fr), v, inner, rv, cv, mean, is, pg, pgx);
        s_assign(lw, body(fr), sg, bin(lw, KB_ADD, var(lw, sg), var(lw, pg)));
        s_assign(lw, body(fr), sgx, bin(lw, KB_ADD, var(lw, sgx), var(lw, pgx)));
    }
    s_store(lw, c, dw, cv, var(lw, sgx));
    s_store(lw, c, db, cv, var(lw, sg));
    if (needs_x && on_gpu(lw)) {
        /* dL/dx a thread per element: the sums (double) and the statistics read back as
         * stored */
        int ssg =
            scratch_buf_sized(lw, arena_printf(&p->arena, "%s.sg", name), KT_F64, (KSize){0, C});
        int ssgx =
            scratch_buf_sized(lw, arena_printf(&p->arena, "%s.sgx", name), KT_F64, (KSize){0, C});
        s_store(lw, c, ssg, cv, var(lw, sg));
        s_store(lw, c, ssgx, cv, var(lw, sgx));
        gpu_next_kernel(lw, arena_printf(&p->arena, "%s_dx", kname));
        c = gpu_elements(lw, v, C, inner, &rv, &cv, &iv);
        sg = local(lw, "sg", KT_F64), sgx = local(lw, "sgx", KT_F64);
        mean = local(lw, "mean", KT_F64), is = local(lw, "invstd", KT_F64);
        s_assign(lw, c, mean, to(lw, KT_F64, kx_load(p, g->tr->bn_mean[v], cv)));
        s_assign(lw, c, is, to(lw, KT_F64, kx_load(p, g->tr->bn_invstd[v], cv)));
        s_assign(lw, c, sg, kx_load(p, ssg, cv));
        s_assign(lw, c, sgx, kx_load(p, ssgx, cv));
    }
    if (needs_x) {
        double copies = lw->is_static[v] ? lw->T : 1;
        KExpr *cnt = bin(lw, KB_MUL, kx_const(p, KT_F64, copies),
                         to(lw, KT_F64, bin(lw, KB_MUL, rows_of(lw, v), ci(lw, inner))));
        int mg = local(lw, "mg", KT_F64), mgx = local(lw, "mgx", KT_F64);
        s_assign(lw, c, mg,
                 bin(lw, KB_DIV, bin(lw, KB_MUL, kx_const(p, KT_F64, copies), var(lw, sg)), cnt));
        s_assign(lw, c, mgx,
                 bin(lw, KB_DIV, bin(lw, KB_MUL, kx_const(p, KT_F64, copies), var(lw, sgx)), cnt));
        int wis = local(lw, "wis", KT_F64);
        s_assign(lw, c, wis,
                 bin(lw, KB_MUL, to(lw, KT_F64, kx_load(p, wbuf(lw, n, 0), cv)), var(lw, is)));
        if (!on_gpu(lw)) {
            KStmt *fr = loop(lw, c, "r", rows_of(lw, v), false, &rv);
            KStmt *fi = loop(lw, body(fr), "i", ci(lw, inner), false, &iv);
            fi->is_lanes = true;
            c = body(fi);
        }
        Pos ps = row_pos(lw, v, rv, bin(lw, KB_ADD, bin(lw, KB_MUL, cv, ci(lw, inner)), iv));
        KExpr *xh =
            bin(lw, KB_MUL, bin(lw, KB_SUB, to(lw, KT_F64, vload(lw, x, &ps)), var(lw, mean)),
                var(lw, is));
        KExpr *e =
            bin(lw, KB_MUL, var(lw, wis),
                bin(lw, KB_SUB, bin(lw, KB_SUB, to(lw, KT_F64, gload(g, v, &ps)), var(lw, mg)),
                    bin(lw, KB_MUL, xh, var(lw, mgx))));
        gadd(g, c, x, &ps, to(lw, KT_F32, e), first);
    }
    end_kernel(lw);
}

/* ---- pooling ---- */

struct PoolGeom {
    int64_t C, H, W, OH, OW, KH, KW, SH, SW, PH, PW;
};

/* windows that tile the input: each element in exactly one */
static bool
pool_tiles(const PoolGeom *q)
{
    return q->SH == q->KH && q->SW == q->KW && q->PH == 0 && q->PW == 0 && q->OH * q->KH == q->H &&
           q->OW * q->KW == q->W;
}

static PoolGeom
pool_geom(const Module *m, const Node *n)
{
    const Type *xt = &m->nodes[n->args[0]].type;
    PoolGeom q = {xt->dims[0],
                  xt->dims[1],
                  xt->dims[2],
                  n->type.dims[1],
                  n->type.dims[2],
                  node_attr_i(n, "kernel", 0),
                  node_attr_i(n, "kernel", 1),
                  node_attr_i(n, "stride", 0),
                  node_attr_i(n, "stride", 1),
                  node_attr_i(n, "pad", 0),
                  node_attr_i(n, "pad", 1)};
    if (q.SH == 0) q.SH = q.KH;
    if (q.SW == 0) q.SW = q.KW;
    return q;
}

/* The output coordinate whose window (or kernel) puts tap k on input coordinate in: out*S - P +
 * k*D = in; body runs if it exists and lies in [0, OUT), *out its value */
static Cur
tap_source(Lower *lw, Cur c, KExpr *in, KExpr *k, int64_t P, int64_t D, int64_t S, int64_t OUT,
           KExpr **out)
{
    int nv = local(lw, "num", KT_I64);
    s_assign(lw, c, nv,
             bin(lw, KB_SUB, bin(lw, KB_ADD, in, ci(lw, P)), bin(lw, KB_MUL, k, ci(lw, D))));
    KExpr *num = var(lw, nv);
    KExpr *cond =
        bin(lw, KB_AND, bin(lw, KB_GE, num, ci(lw, 0)), bin(lw, KB_LT, num, ci(lw, OUT * S)));
    KStmt *i = s_if(lw, c, cond);
    if (S == 1) {
        *out = num;
        return body(i);
    }
    KStmt *j = s_if(lw, body(i), bin(lw, KB_EQ, bin(lw, KB_REM, num, ci(lw, S)), ci(lw, 0)));
    *out = bin(lw, KB_DIV, num, ci(lw, S));
    return body(j);
}

/* Pool backward where the windows tile the input (stride = kernel, no padding, nothing left
 * over): each element is in one window, so each window gives its elements their gradient at once
 * (a max pool's to its first maximum only), the same sums as the gathered form */
static void
grad_pool_tiled(G *g, ValueId v, const PoolGeom *q, bool first)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Node *n = &lw->m->nodes[v];
    ValueId x = n->args[0], rx = root(lw, x);
    bool is_max = n->op == OP_MAXPOOL2D;
    KExpr *rv, *cc, *oh, *ow, *kh, *kw;
    KStmt *fr = loop(lw, top(lw), "r", rows_of(lw, v), true, &rv);
    KStmt *fcn = loop(lw, body(fr), "c", ci(lw, q->C), false, &cc);
    KStmt *fh = loop(lw, body(fcn), "oh", ci(lw, q->OH), false, &oh);
    KStmt *fw = loop(lw, body(fh), "ow", ci(lw, q->OW), false, &ow);
    Cur c = body(fw);
    Pos py = row_pos(
        lw, v, rv,
        bin(lw, KB_ADD,
            bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, cc, ci(lw, q->OH)), oh), ci(lw, q->OW)),
            ow));
    int gv = local(lw, "gv", KT_F32);
    KExpr *gy = gload(g, v, &py);
    if (n->op == OP_AVGPOOL2D)
        gy = to(lw, KT_F32,
                bin(lw, KB_DIV, to(lw, KT_F64, gy), kx_const(p, KT_F64, (double)(q->KH * q->KW))));
    s_assign(lw, c, gv, gy);
    /* the element at window tap (kh, kw) */
#define AT(kh_, kw_)                                                                               \
    row_pos(lw, x, rv,                                                                             \
            bin(lw, KB_ADD,                                                                        \
                bin(lw, KB_MUL,                                                                    \
                    bin(lw, KB_ADD, bin(lw, KB_MUL, cc, ci(lw, q->H)),                             \
                        bin(lw, KB_ADD, bin(lw, KB_MUL, oh, ci(lw, q->KH)), (kh_))),               \
                    ci(lw, q->W)),                                                                 \
                bin(lw, KB_ADD, bin(lw, KB_MUL, ow, ci(lw, q->KW)), (kw_))))
    int arg = -1;
    if (is_max) {
        int best = local(lw, "best", KT_F32), xv = local(lw, "xv", KT_F32);
        arg = local(lw, "arg", KT_I64);
        s_assign(lw, c, best, kx_const(p, KT_F32, -INFINITY));
        s_assign(lw, c, arg, ci(lw, -1));
        KStmt *fkh = loop(lw, c, "kh", ci(lw, q->KH), false, &kh);
        KStmt *fkw = loop(lw, body(fkh), "kw", ci(lw, q->KW), false, &kw);
        Pos pj = AT(kh, kw);
        s_assign(lw, body(fkw), xv, to(lw, KT_F32, vload(lw, x, &pj)));
        KExpr *better = bin(lw, KB_OR, bin(lw, KB_LT, var(lw, arg), ci(lw, 0)),
                            bin(lw, KB_OR, bin(lw, KB_GT, var(lw, xv), var(lw, best)),
                                bin(lw, KB_AND, bin(lw, KB_NE, var(lw, xv), var(lw, xv)),
                                    bin(lw, KB_EQ, var(lw, best), var(lw, best)))));
        KStmt *upd = s_if(lw, body(fkw), better);
        s_assign(lw, body(upd), best, var(lw, xv));
        s_assign(lw, body(upd), arg, bin(lw, KB_ADD, bin(lw, KB_MUL, kh, ci(lw, q->KW)), kw));
    }
    KStmt *fkh = loop(lw, c, "kh", ci(lw, q->KH), false, &kh);
    KStmt *fkw = loop(lw, body(fkh), "kw", ci(lw, q->KW), false, &kw);
    Pos pj = AT(kh, kw);
#undef AT
    KExpr *held = first ? zero(lw) : kx_load(p, g->gbuf[rx], vindex(lw, rx, &pj));
    KExpr *e = bin(lw, KB_ADD, held, var(lw, gv));
    if (is_max)
        e = kx_select(
            p,
            bin(lw, KB_EQ, var(lw, arg), bin(lw, KB_ADD, bin(lw, KB_MUL, kh, ci(lw, q->KW)), kw)),
            e, held);
    s_store(lw, body(fkw), g->gbuf[rx], vindex(lw, rx, &pj), e);
    end_kernel(lw);
}

/* dL/dx at px of a pool u's input x where the windows tile it (pool_of): what grad_pool's
 * kernel would have left there: +0 + dL/dy of its window (avg: divided by KH KW, rounded), a max
 * pool's only where the element is its window's first maximum (+0 elsewhere) */
static KExpr *
pool_grad_inline(G *g, ValueId u, Cur c, Pos *px)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Node *n = &lw->m->nodes[u];
    ValueId x = n->args[0];
    PoolGeom q = pool_geom(lw->m, n);
    int64_t numel = lw->vs[x].numel, onumel = lw->vs[u].numel;
    /* j = b numel + (c H + h) W + w */
    KExpr *b = bin(lw, KB_DIV, px->j, ci(lw, numel)), *i = bin(lw, KB_REM, px->j, ci(lw, numel));
    KExpr *cc = bin(lw, KB_DIV, i, ci(lw, q.H * q.W));
    KExpr *hw = bin(lw, KB_REM, i, ci(lw, q.H * q.W));
    KExpr *h = bin(lw, KB_DIV, hw, ci(lw, q.W)), *w = bin(lw, KB_REM, hw, ci(lw, q.W));
    KExpr *oh = bin(lw, KB_DIV, h, ci(lw, q.KH)), *ow = bin(lw, KB_DIV, w, ci(lw, q.KW));
    Pos py = *px;
    py.jn = onumel;
    py.j = bin(
        lw, KB_ADD, bin(lw, KB_MUL, b, ci(lw, onumel)),
        bin(lw, KB_ADD,
            bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, cc, ci(lw, q.OH)), oh), ci(lw, q.OW)),
            ow));
    KExpr *gy = gload(g, u, &py);
    if (n->op == OP_AVGPOOL2D)
        gy = to(lw, KT_F32,
                bin(lw, KB_DIV, to(lw, KT_F64, gy), kx_const(p, KT_F64, (double)(q.KH * q.KW))));
    KExpr *e = bin(lw, KB_ADD, zero(lw), gy);
    if (n->op != OP_MAXPOOL2D) return e;
    if (pool_masks_input(lw, u)) /* the forward marked the window's first maximum */
        return kx_select(p, bin(lw, KB_NE, to(lw, KT_F32, vload(lw, x, px)), zero(lw)), e,
                         zero(lw));
    /* the first maximum of the window, taps in (kh, kw) order: is it this element? */
    KExpr *base =
        bin(lw, KB_SUB, px->j,
            bin(lw, KB_ADD, bin(lw, KB_MUL, bin(lw, KB_REM, h, ci(lw, q.KH)), ci(lw, q.W)),
                bin(lw, KB_REM, w, ci(lw, q.KW))));
    int bestv = local(lw, "best", KT_F32), argv = local(lw, "arg", KT_I64);
    int xvv = local(lw, "xv", KT_F32);
    for (int64_t kh = 0; kh < q.KH; kh++)
        for (int64_t kw = 0; kw < q.KW; kw++) {
            Pos pj = *px;
            pj.j = bin(lw, KB_ADD, base, ci(lw, kh * q.W + kw));
            KExpr *k = ci(lw, kh * q.KW + kw);
            if (kh == 0 && kw == 0) {
                s_assign(lw, c, bestv, to(lw, KT_F32, vload(lw, x, &pj)));
                s_assign(lw, c, argv, k);
                continue;
            }
            s_assign(lw, c, xvv, to(lw, KT_F32, vload(lw, x, &pj)));
            KExpr *xv = var(lw, xvv), *best = var(lw, bestv);
            KExpr *better =
                bin(lw, KB_OR, bin(lw, KB_GT, xv, best),
                    bin(lw, KB_AND, bin(lw, KB_NE, xv, xv), bin(lw, KB_EQ, best, best)));
            s_assign(lw, c, argv, kx_select(p, better, k, var(lw, argv)));
            s_assign(lw, c, bestv, kx_select(p, better, xv, var(lw, bestv)));
        }
    KExpr *arg = var(lw, argv);
    KExpr *mine = bin(lw, KB_ADD, bin(lw, KB_MUL, bin(lw, KB_REM, h, ci(lw, q.KH)), ci(lw, q.KW)),
                      bin(lw, KB_REM, w, ci(lw, q.KW)));
    return kx_select(p, bin(lw, KB_EQ, arg, mine), e, zero(lw));
}

/* Pool backward, gathered (parallel over rows, each input element once): the windows holding the
 * element in increasing (oh, ow), the order in which interp_grad.c's scatter adds them; each
 * adds dL/dy (avg: divided by KH KW, rounded), a max pool's only where the element is its
 * window's first maximum (recomputed from the input) */
/* the gradient of row rv of pool v's input: each input element gathers dL/dy of its windows in
 * increasing (oh, ow) (a max pool's where it is the window's first maximum) onto what it holds
 * (first: from 0) */
static void
pool_grad_rows(G *g, ValueId v, const PoolGeom *q, Cur c0, KExpr *rv, bool first)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Node *n = &lw->m->nodes[v];
    ValueId x = n->args[0];
    bool is_max = n->op == OP_MAXPOOL2D;
    KExpr *cc, *ih, *iw, *a, *bb, *oh, *ow;
    KStmt *fcn = loop(lw, c0, "c", ci(lw, q->C), false, &cc);
    KStmt *fh = loop(lw, body(fcn), "ih", ci(lw, q->H), false, &ih);
    KStmt *fw = loop(lw, body(fh), "iw", ci(lw, q->W), false, &iw);
    Cur c = body(fw);
    KExpr *chan = bin(lw, KB_MUL, cc, ci(lw, q->H));
    Pos px = row_pos(lw, x, rv,
                     bin(lw, KB_ADD, bin(lw, KB_MUL, bin(lw, KB_ADD, chan, ih), ci(lw, q->W)), iw));
    int s = local(lw, "s", KT_F32);
    s_assign(lw, c, s, first ? zero(lw) : gload(g, x, &px));
    /* kh = KH-1-a: the windows in increasing oh */
    KStmt *fa = loop(lw, c, "a", ci(lw, q->KH), false, &a);
    Cur ca = tap_source(lw, body(fa), ih, bin(lw, KB_SUB, ci(lw, q->KH - 1), a), q->PH, 1, q->SH,
                        q->OH, &oh);
    KStmt *fb = loop(lw, ca, "b", ci(lw, q->KW), false, &bb);
    Cur cb = tap_source(lw, body(fb), iw, bin(lw, KB_SUB, ci(lw, q->KW - 1), bb), q->PW, 1, q->SW,
                        q->OW, &ow);
    int ohv = local(lw, "oh", KT_I64), owv = local(lw, "ow", KT_I64);
    s_assign(lw, cb, ohv, oh);
    s_assign(lw, cb, owv, ow);
    Pos py = row_pos(
        lw, v, rv,
        bin(lw, KB_ADD,
            bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, cc, ci(lw, q->OH)), var(lw, ohv)),
                ci(lw, q->OW)),
            var(lw, owv)));
    KExpr *gv = gload(g, v, &py);
    if (n->op == OP_AVGPOOL2D)
        gv = to(lw, KT_F32,
                bin(lw, KB_DIV, to(lw, KT_F64, gv), kx_const(p, KT_F64, (double)(q->KH * q->KW))));
    if (!is_max) {
        s_assign(lw, cb, s, bin(lw, KB_ADD, var(lw, s), gv));
    } else {
        /* the window's first maximum: its position (ah, aw) */
        int best = local(lw, "best", KT_F32), ah = local(lw, "ah", KT_I64),
            aw = local(lw, "aw", KT_I64);
        s_assign(lw, cb, best, kx_const(p, KT_F32, -INFINITY));
        s_assign(lw, cb, ah, ci(lw, -1));
        s_assign(lw, cb, aw, ci(lw, -1));
        KExpr *kh, *kw;
        int jh = local(lw, "jh", KT_I64), jw = local(lw, "jw", KT_I64);
        KStmt *fkh = loop(lw, cb, "kh", ci(lw, q->KH), false, &kh);
        s_assign(lw, body(fkh), jh,
                 bin(lw, KB_ADD,
                     bin(lw, KB_SUB, bin(lw, KB_MUL, var(lw, ohv), ci(lw, q->SH)), ci(lw, q->PH)),
                     kh));
        KStmt *ifh = s_if(lw, body(fkh),
                          bin(lw, KB_AND, bin(lw, KB_GE, var(lw, jh), ci(lw, 0)),
                              bin(lw, KB_LT, var(lw, jh), ci(lw, q->H))));
        KStmt *fkw = loop(lw, body(ifh), "kw", ci(lw, q->KW), false, &kw);
        s_assign(lw, body(fkw), jw,
                 bin(lw, KB_ADD,
                     bin(lw, KB_SUB, bin(lw, KB_MUL, var(lw, owv), ci(lw, q->SW)), ci(lw, q->PW)),
                     kw));
        KStmt *ifw = s_if(lw, body(fkw),
                          bin(lw, KB_AND, bin(lw, KB_GE, var(lw, jw), ci(lw, 0)),
                              bin(lw, KB_LT, var(lw, jw), ci(lw, q->W))));
        Pos pj = row_pos(lw, x, rv,
                         bin(lw, KB_ADD,
                             bin(lw, KB_MUL, bin(lw, KB_ADD, chan, var(lw, jh)), ci(lw, q->W)),
                             var(lw, jw)));
        int xv = local(lw, "xv", KT_F32);
        s_assign(lw, body(ifw), xv, to(lw, KT_F32, vload(lw, x, &pj)));
        /* arg < 0 || x > best || (isnan(x) && !isnan(best)): the first maximum, NaN the largest */
        KExpr *isnan_x = bin(lw, KB_NE, var(lw, xv), var(lw, xv));
        KExpr *isnum_best = bin(lw, KB_EQ, var(lw, best), var(lw, best));
        KExpr *better = bin(lw, KB_OR, bin(lw, KB_LT, var(lw, ah), ci(lw, 0)),
                            bin(lw, KB_OR, bin(lw, KB_GT, var(lw, xv), var(lw, best)),
                                bin(lw, KB_AND, isnan_x, isnum_best)));
        KStmt *upd = s_if(lw, body(ifw), better);
        s_assign(lw, body(upd), best, var(lw, xv));
        s_assign(lw, body(upd), ah, var(lw, jh));
        s_assign(lw, body(upd), aw, var(lw, jw));
        KStmt *hit =
            s_if(lw, cb,
                 bin(lw, KB_AND, bin(lw, KB_EQ, var(lw, ah), ih), bin(lw, KB_EQ, var(lw, aw), iw)));
        s_assign(lw, body(hit), s, bin(lw, KB_ADD, var(lw, s), gv));
    }
    ValueId rx = root(lw, x);
    s_store(lw, c, g->gbuf[rx], vindex(lw, rx, &px), var(lw, s));
}

static void
grad_pool(G *g, ValueId v)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Node *n = &lw->m->nodes[v];
    ValueId x = n->args[0];
    if (!g->needs[x] || g->pool_of[x] == v) return; /* x's backward reads this one's inline */
    PoolGeom q = pool_geom(lw->m, n);
    bool first = claim(g, x), is_max = n->op == OP_MAXPOOL2D;
    begin_kernel(lw, v,
                 describe(lw, v,
                          is_max ? "backward: each input gets dL/dy of the windows whose first "
                                   "maximum it is, gathered"
                                 : "backward: each input gets dL/dy of its windows, gathered"),
                 false);
    lw->k.name = arena_printf(&p->arena, "grad_%s", lw->k.name);
    KExpr *rv;
    if (pool_tiles(&q)) {
        grad_pool_tiled(g, v, &q, first);
        return;
    }
    KStmt *fr = loop(lw, top(lw), "r", rows_of(lw, v), true, &rv);
    pool_grad_rows(g, v, &q, body(fr), rv, first);
    end_kernel(lw);
}

/* ---- convolutions ---- */

/* rows of a block of the weight gradient: its partial sums stay in registers over these rows'
 * pixels, the rows' dL/dy (channels last) in cache; input channels a block (at most) times tiles
 * of output channels: 4 x one AVX2 register of floats, with AVX-512 6 x 4 registers (each input
 * value's broadcast serves four multiply-adds, each dL/dy vector six: the conv SNN's dW of c2
 * 0.85 s -> 0.43 s a 10-batch run against 8 x 1 register) */
enum { CONV_DW_ROWS = 8, CONV_DW_CH = 4, CONV_DW_CH_WIDE = 6 };

typedef struct ConvGrad {
    G *g;
    ValueId v, x;
    ConvGeom d;
    int wt;                     /* W as [kh][kw][o][cg] */
    int dyt;                    /* dL/dy channels last, [rows][OH*OW][O] */
    int dxs;                    /* dL/dx channels last, [rows][H*W][C] (conv_dxs), or -1 */
    bool direct;                /* dx: the tiles stored straight into x's gradient (its first
                                 * contributor, on the CPU), a lane a channel apart: no scratch */
    int acc;                    /* the weight gradient's partial sums, [items][Cg][lanes] */
    int rowacc;                 /* a small conv's (conv_dw_rows_first): a row's, the same shape;
                                 * else -1 */
    KExpr *r, *ih, *iw, *grp;   /* dx: the row, input pixel and group */
    KExpr *item, *kh, *kw, *o0; /* dW: the block's item, tap and first output channel */
    KExpr *xc0;                 /* dW: the first input channel of o0's group */
    int np;                     /* dx: input pixels per block (conv_data_tiles) */
} ConvGrad;

static int conv_dxs(Lower *lw, ConvGrad *cg);

/* dL/dy of output channel oa at output pixel (oh, ow) of the row cg->r: from the channels-last
 * copy where it is made (conv_dy_cl: the same values), else from the gradient itself */
static KExpr *
conv_dy(Lower *lw, const ConvGrad *cg, KExpr *oa, KExpr *oh, KExpr *ow)
{
    const ConvGeom *d = &cg->d;
    KExpr *opix = bin(lw, KB_ADD, bin(lw, KB_MUL, oh, ci(lw, d->OW)), ow);
    if (cg->dyt >= 0) {
        KExpr *row = bin(lw, KB_ADD, bin(lw, KB_MUL, cg->r, ci(lw, d->OH * d->OW)), opix);
        return kx_load(lw->p, cg->dyt, bin(lw, KB_ADD, bin(lw, KB_MUL, row, ci(lw, d->O)), oa));
    }
    Pos py = row_pos(lw, cg->v, cg->r,
                     bin(lw, KB_ADD, bin(lw, KB_MUL, oa, ci(lw, d->OH * d->OW)), opix));
    return gload(cg->g, cg->v, &py);
}

/* W[oa][c0 + l][kh][kw] in the taps-first copy, [KH][KW][O][Cg] */
static KExpr *
conv_tap_weight(Lower *lw, const ConvGeom *d, KExpr *kh, KExpr *kw, KExpr *oa, KExpr *c0)
{
    KExpr *tap = bin(lw, KB_ADD, bin(lw, KB_MUL, kh, ci(lw, d->KW)), kw);
    return bin(
        lw, KB_ADD,
        bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, tap, ci(lw, d->O)), oa), ci(lw, d->Cg)),
        c0);
}

/* tile t into the channels-last dL/dx scratch at (cg->r, cg->ih, iw), channels [c0, ..) of
 * group cg->grp */
static void
conv_dx_store(Lower *lw, Cur c, const ConvGrad *cg, KExpr *iw, KExpr *c0, int t)
{
    const ConvGeom *d = &cg->d;
    KExpr *px = bin(lw, KB_ADD, bin(lw, KB_MUL, cg->ih, ci(lw, d->W)), iw);
    if (cg->direct) {
        /* (a tile's sums start at +0 and never hold -0: the bits gadd's 0 + dx would store) */
        ValueId rx = root(lw, cg->x);
        KExpr *ch = bin(lw, KB_ADD, bin(lw, KB_MUL, cg->grp, ci(lw, d->Cg)), c0);
        Pos ps = row_pos(lw, cg->x, cg->r,
                         bin(lw, KB_ADD, bin(lw, KB_MUL, ch, ci(lw, d->H * d->W)), px));
        s_tile(lw, c, KS_VSTORE, t, cg->g->gbuf[rx], vindex(lw, rx, &ps), NULL)->stride =
            d->H * d->W;
        return;
    }
    s_tile(lw, c, KS_VSTORE, t, cg->dxs,
           bin(lw, KB_ADD,
               bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, cg->r, ci(lw, d->H * d->W)), px),
                   ci(lw, d->C)),
               bin(lw, KB_ADD, bin(lw, KB_MUL, cg->grp, ci(lw, d->Cg)), c0)),
           NULL);
}

/* dL/dx channels last at (r, ih, iw), channels [c0, c0 + lanes) = sum over taps (kh, kw) that
 * reach it, then output channels o in order, of dy[r, o, oh, ow] W[o, c, kh, kw], from +0 */
static void
conv_data_tile(Lower *lw, Cur c, KExpr *c0, int lanes, const void *ctx)
{
    const ConvGrad *cg = ctx;
    const ConvGeom *d = &cg->d;
    int t = tile(lw, "dx", lanes);
    s_tile(lw, c, KS_VSET, t, -1, NULL, kx_const(lw->p, KT_F64, 0));
    KExpr *kh, *kw, *oh, *ow, *o;
    KStmt *fkh = loop(lw, c, "kh", ci(lw, d->KH), false, &kh);
    Cur ch = tap_source(lw, body(fkh), cg->ih, kh, d->PH, d->DH, d->SH, d->OH, &oh);
    int ohv = local(lw, "oh", KT_I64);
    s_assign(lw, ch, ohv, oh);
    KStmt *fkw = loop(lw, ch, "kw", ci(lw, d->KW), false, &kw);
    Cur cw = tap_source(lw, body(fkw), cg->iw, kw, d->PW, d->DW, d->SW, d->OW, &ow);
    int owv = local(lw, "ow", KT_I64);
    s_assign(lw, cw, owv, ow);
    /* the group's output channels: g Og + o */
    KStmt *fo = loop(lw, cw, "o", ci(lw, d->Og), false, &o);
    KExpr *oa = bin(lw, KB_ADD, bin(lw, KB_MUL, cg->grp, ci(lw, d->Og)), o);
    tile_fma(lw, body(fo), t, conv_dy(lw, cg, oa, var(lw, ohv), var(lw, owv)), cg->wt,
             conv_tap_weight(lw, d, kh, kw, oa, c0), false);
    conv_dx_store(lw, c, cg, cg->iw, c0, t);
}

/* conv_data_tile for CONV_NP neighbouring input pixels (ih, iw .. iw + CONV_NP) of a stride-1,
 * dilation-1 conv that every tap column reaches inside the output: each weight vector loaded
 * once for all of them; each tile's terms in conv_data_tile's order */
static void
conv_data_tiles(Lower *lw, Cur c, KExpr *c0, int lanes, const void *ctx)
{
    const ConvGrad *cg = ctx;
    const ConvGeom *d = &cg->d;
    int np = cg->np, t[CONV_NP];
    for (int q = 0; q < np; q++) {
        t[q] = tile(lw, "dx", lanes);
        s_tile(lw, c, KS_VSET, t[q], -1, NULL, kx_const(lw->p, KT_F64, 0));
    }
    KExpr *kh, *kw, *oh, *o;
    KStmt *fkh = loop(lw, c, "kh", ci(lw, d->KH), false, &kh);
    Cur ch = tap_source(lw, body(fkh), cg->ih, kh, d->PH, d->DH, d->SH, d->OH, &oh);
    int ohv = local(lw, "oh", KT_I64);
    s_assign(lw, ch, ohv, oh);
    KStmt *fkw = loop(lw, ch, "kw", ci(lw, d->KW), false, &kw);
    int owv = local(lw, "ow", KT_I64); /* the first pixel's: iw + PW - kw */
    s_assign(lw, body(fkw), owv, bin(lw, KB_SUB, bin(lw, KB_ADD, cg->iw, ci(lw, d->PW)), kw));
    KStmt *fo = loop(lw, body(fkw), "o", ci(lw, d->Og), false, &o);
    KExpr *oa = bin(lw, KB_ADD, bin(lw, KB_MUL, cg->grp, ci(lw, d->Og)), o);
    KExpr *wi = conv_tap_weight(lw, d, kh, kw, oa, c0);
    for (int q = 0; q < np; q++)
        tile_fma(lw, body(fo), t[q],
                 conv_dy(lw, cg, oa, var(lw, ohv), bin(lw, KB_ADD, var(lw, owv), ci(lw, q))),
                 cg->wt, wi, false);
    for (int q = 0; q < np; q++)
        conv_dx_store(lw, c, cg, bin(lw, KB_ADD, cg->iw, ci(lw, q)), c0, t[q]);
}

/* dL/dx of a row's input pixels (ih, from .. from + n) one at a time */
static void
conv_data_run(Lower *lw, Cur c, ConvGrad *cg, int64_t from, int64_t n)
{
    if (n <= 0) return;
    KExpr *u;
    KStmt *fu = loop(lw, c, "iw", ci(lw, n), false, &u);
    cg->iw = from ? bin(lw, KB_ADD, u, ci(lw, from)) : u;
    for_tiles(lw, body(fu), cg->d.Cg, tile_lanes(lw, CONV_NT), conv_data_tile, cg);
}

/* dL/dx of input row ih of group cg->grp: where the conv has stride and dilation 1 across, the
 * pixels every tap column reaches inside the output (iw + PW - kw in [0, OW) for every kw) in
 * blocks of CONV_NP (2 without AVX-512: conv_data_tiles), the others one at a time */
static void
conv_data_row(Lower *lw, Cur c, ConvGrad *cg)
{
    const ConvGeom *d = &cg->d;
    int64_t lo = d->KW - 1 - d->PW, hi = d->OW - 1 - d->PW;
    if (lo < 0) lo = 0;
    if (hi > d->W - 1) hi = d->W - 1;
    int np = cg->np = lower_wide_vectors() ? CONV_NP : 2; /* AVX2's 16 registers: 2 pixels */
    int64_t nblk = d->SW == 1 && d->DW == 1 && hi >= lo ? (hi - lo + 1) / np : 0;
    if (nblk == 0) {
        conv_data_run(lw, c, cg, 0, d->W);
        return;
    }
    conv_data_run(lw, c, cg, 0, lo);
    KExpr *b;
    KStmt *fb = loop(lw, c, "ib", ci(lw, nblk), false, &b);
    cg->iw = bin(lw, KB_ADD, bin(lw, KB_MUL, b, ci(lw, np)), ci(lw, lo));
    /* dL/dx[c] sums over the taps and the group's output channels */
    for_tiles(lw, body(fb), d->Cg, conv_block_lanes(lw, d->Og * d->KH * d->KW), conv_data_tiles,
              cg);
    int64_t done = lo + nblk * np;
    conv_data_run(lw, c, cg, done, d->W - done);
}

/* the loops over the output pixels (oh, ow), in order, whose tap (kh, kw) lies inside the input:
 * their body, the input pixel in locals *ihv, *iwv, the output's in *oh, *ow */
static Cur
conv_tap_pixels(Lower *lw, Cur c, const ConvGeom *d, KExpr *kh, KExpr *kw, KExpr **oh, KExpr **ow,
                int *ihv, int *iwv)
{
    KStmt *foh = loop(lw, c, "oh", ci(lw, d->OH), false, oh);
    *ihv = local(lw, "ih", KT_I64), *iwv = local(lw, "iw", KT_I64);
    s_assign(lw, body(foh), *ihv,
             bin(lw, KB_ADD, bin(lw, KB_SUB, bin(lw, KB_MUL, *oh, ci(lw, d->SH)), ci(lw, d->PH)),
                 bin(lw, KB_MUL, kh, ci(lw, d->DH))));
    KStmt *ifh = s_if(lw, body(foh),
                      bin(lw, KB_AND, bin(lw, KB_GE, var(lw, *ihv), ci(lw, 0)),
                          bin(lw, KB_LT, var(lw, *ihv), ci(lw, d->H))));
    KStmt *fow = loop(lw, body(ifh), "ow", ci(lw, d->OW), false, ow);
    s_assign(lw, body(fow), *iwv,
             bin(lw, KB_ADD, bin(lw, KB_SUB, bin(lw, KB_MUL, *ow, ci(lw, d->SW)), ci(lw, d->PW)),
                 bin(lw, KB_MUL, kw, ci(lw, d->DW))));
    KStmt *ifw = s_if(lw, body(fow),
                      bin(lw, KB_AND, bin(lw, KB_GE, var(lw, *iwv), ci(lw, 0)),
                          bin(lw, KB_LT, var(lw, *iwv), ci(lw, d->W))));
    return body(ifw);
}

/* dW[o0 .. o0 + lanes, c .. c + ni, kh, kw] += the rows [r0, r0 + CONV_DW_ROWS) of the sum over
 * rows, oh, ow (in order, taps inside the input) of x[r, c, ih, iw] dy[r, o, oh, ow]: ni tiles
 * of partial sums in registers, loaded from and stored back to the block's buffer */
static void
conv_weight_block(Lower *lw, Cur c, const ConvGrad *cg, KExpr *c0, int ni, int lanes, KExpr *r0)
{
    const ConvGeom *d = &cg->d;
    int t[CONV_DW_CH_WIDE];
    KExpr *ai[CONV_DW_CH_WIDE];
    for (int k = 0; k < ni; k++) {
        t[k] = tile(lw, "dw", lanes);
        ai[k] = bin(lw, KB_MUL,
                    bin(lw, KB_ADD, bin(lw, KB_MUL, cg->item, ci(lw, d->Cg)),
                        bin(lw, KB_ADD, c0, ci(lw, k))),
                    ci(lw, lanes));
        s_tile(lw, c, KS_VLOAD, t[k], cg->acc, ai[k], NULL);
    }
    KExpr *rr, *oh, *ow;
    KStmt *fr = loop(lw, c, "rr", ci(lw, CONV_DW_ROWS), false, &rr);
    int rv = local(lw, "r", KT_I64);
    s_assign(lw, body(fr), rv, bin(lw, KB_ADD, r0, rr));
    KStmt *inr = s_if(lw, body(fr), bin(lw, KB_LT, var(lw, rv), rows_of(lw, cg->v)));
    /* a small conv: each row's sums from +0 (pt), added to the total through the row buffer
     * (fma(1, row, total): one rounding, as interp_grad.c's) */
    int pt[CONV_DW_CH_WIDE];
    for (int k = 0; k < ni; k++) {
        pt[k] = t[k];
        if (cg->rowacc < 0) continue;
        pt[k] = tile(lw, "dwr", lanes);
        s_tile(lw, body(inr), KS_VSET, pt[k], -1, NULL, kx_const(lw->p, KT_F64, 0));
    }
    int ihv, iwv;
    Cur cp = conv_tap_pixels(lw, body(inr), d, cg->kh, cg->kw, &oh, &ow, &ihv, &iwv);
    KExpr *pix = bin(lw, KB_ADD, bin(lw, KB_MUL, oh, ci(lw, d->OW)), ow);
    KExpr *yi = bin(lw, KB_ADD,
                    bin(lw, KB_MUL,
                        bin(lw, KB_ADD, bin(lw, KB_MUL, var(lw, rv), ci(lw, d->OH * d->OW)), pix),
                        ci(lw, d->O)),
                    cg->o0);
    for (int k = 0; k < ni; k++) {
        KExpr *chan = bin(lw, KB_ADD, cg->xc0, bin(lw, KB_ADD, c0, ci(lw, k)));
        Pos px = row_pos(
            lw, cg->x, var(lw, rv),
            bin(lw, KB_ADD,
                bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, chan, ci(lw, d->H)), var(lw, ihv)),
                    ci(lw, d->W)),
                var(lw, iwv)));
        tile_fma(lw, cp, pt[k], to(lw, KT_F32, vload(lw, cg->x, &px)), cg->dyt, yi, false);
    }
    for (int k = 0; cg->rowacc >= 0 && k < ni; k++) {
        s_tile(lw, body(inr), KS_VSTORE, pt[k], cg->rowacc, ai[k], NULL);
        tile_fma(lw, body(inr), t[k], kx_const(lw->p, KT_F64, 1), cg->rowacc, ai[k], false);
    }
    for (int k = 0; k < ni; k++)
        s_tile(lw, c, KS_VSTORE, t[k], cg->acc, ai[k], NULL);
}

/* the weight gradient's kernel for the output channels [o0, o0 + lanes) of `ntiles` tiles (in
 * parallel with the taps), or of the tail */
static void
conv_weight_kernel(G *g, ConvGrad *cg, int64_t ntiles, int64_t o_first, int lanes, int dw,
                   const char *how, const char *name)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const ConvGeom *d = &cg->d;
    int64_t taps = d->KH * d->KW, items = ntiles * taps;
    begin_kernel(lw, cg->v, describe(lw, cg->v, how), false);
    lw->k.name = arena_printf(&p->arena, "%s_%s", o_first ? "grad_w_tail" : "grad_w", name);
    cg->acc =
        scratch_buf_sized(lw, arena_printf(&p->arena, "%s.dw%s", name, o_first ? "_tail" : ""),
                          lw->acc, (KSize){0, items * d->Cg * lanes});
    cg->rowacc = conv_dw_rows_first(d)
                     ? scratch_buf_sized(
                           lw, arena_printf(&p->arena, "%s.dw_row%s", name, o_first ? "_tail" : ""),
                           lw->acc, (KSize){0, items * d->Cg * lanes})
                     : -1;
    KExpr *it;
    KStmt *fi = loop(lw, top(lw), "item", ci(lw, items), true, &it);
    Cur c = body(fi);
    cg->item = it;
    int khv = local(lw, "kh", KT_I64), kwv = local(lw, "kw", KT_I64), o0v = local(lw, "o0", KT_I64);
    KExpr *tapv = bin(lw, KB_REM, it, ci(lw, taps));
    s_assign(lw, c, khv, bin(lw, KB_DIV, tapv, ci(lw, d->KW)));
    s_assign(lw, c, kwv, bin(lw, KB_REM, tapv, ci(lw, d->KW)));
    s_assign(lw, c, o0v,
             bin(lw, KB_ADD, ci(lw, o_first),
                 bin(lw, KB_MUL, bin(lw, KB_DIV, it, ci(lw, taps)), ci(lw, lanes))));
    cg->kh = var(lw, khv);
    cg->kw = var(lw, kwv);
    cg->o0 = var(lw, o0v);
    /* the first input channel of the tile's group (a tile lies in one group) */
    cg->xc0 = d->G == 1 ? ci(lw, 0)
                        : bin(lw, KB_MUL, bin(lw, KB_DIV, cg->o0, ci(lw, d->Og)), ci(lw, d->Cg));
    KExpr *cc;
    int tz = tile(lw, "zero", lanes);
    s_tile(lw, c, KS_VSET, tz, -1, NULL, kx_const(p, KT_F64, 0));
    KStmt *fz = loop(lw, c, "c", ci(lw, d->Cg), false, &cc);
    s_tile(lw, body(fz), KS_VSTORE, tz, cg->acc,
           bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, it, ci(lw, d->Cg)), cc), ci(lw, lanes)),
           NULL);
    /* blocks of rows; in each, blocks of CONV_DW_CH channels, then those left over */
    KExpr *rb;
    KStmt *frb = loop(lw, c, "rb",
                      bin(lw, KB_DIV, bin(lw, KB_ADD, rows_of(lw, cg->v), ci(lw, CONV_DW_ROWS - 1)),
                          ci(lw, CONV_DW_ROWS)),
                      false, &rb);
    KExpr *r0 = bin(lw, KB_MUL, rb, ci(lw, CONV_DW_ROWS));
    int nch = lower_wide_vectors() ? CONV_DW_CH_WIDE : CONV_DW_CH;
    if (cg->rowacc >= 0) nch /= 2; /* its rows' tiles live beside the totals' */
    int64_t nblk = d->Cg / nch, done = nblk * nch;
    if (nblk > 0) {
        KExpr *cb;
        KStmt *fcb = loop(lw, body(frb), "cb", ci(lw, nblk), false, &cb);
        conv_weight_block(lw, body(fcb), cg, bin(lw, KB_MUL, cb, ci(lw, nch)), nch, lanes, r0);
    }
    if (done < d->Cg) {
        KExpr *cr;
        KStmt *fcr = loop(lw, body(frb), "cr", ci(lw, d->Cg - done), false, &cr);
        conv_weight_block(lw, body(fcr), cg, bin(lw, KB_ADD, cr, ci(lw, done)), 1, lanes, r0);
    }
    /* the sums into dW's own layout, [O][C][KH][KW] */
    KStmt *fs = loop(lw, c, "c", ci(lw, d->Cg), false, &cc);
    int ts = tile(lw, "sum", lanes);
    s_tile(lw, body(fs), KS_VLOAD, ts, cg->acc,
           bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, it, ci(lw, d->Cg)), cc), ci(lw, lanes)),
           NULL);
    KExpr *wi =
        bin(lw, KB_ADD,
            bin(lw, KB_MUL,
                bin(lw, KB_ADD,
                    bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, cg->o0, ci(lw, d->Cg)), cc),
                        ci(lw, d->KH)),
                    cg->kh),
                ci(lw, d->KW)),
            cg->kw);
    KStmt *st = s_tile(lw, body(fs), KS_VSTORE, ts, dw, wi, NULL);
    st->stride = d->Cg * d->KH * d->KW;
    end_kernel(lw);
}

/* dL/dx channels last, a thread per (row, input pixel, channel), channels fastest (the warp's
 * weight loads coalesce): conv_data_tile's sums, one lane each */
static void
conv_data_gpu(Lower *lw, ConvGrad *cg)
{
    const ConvGeom *d = &cg->d;
    cg->direct = false;
    conv_dxs(lw, cg);
    KExpr *q, *x[5];
    KStmt *fq = loop(lw, top(lw), "q",
                     bin(lw, KB_MUL, rows_of(lw, cg->v), ci(lw, d->H * d->W * d->C)), true, &q);
    Cur c = body(fq);
    gpu_coords(lw, c, q, 5, (const int64_t[]){0, d->H, d->W, d->G, d->Cg}, x);
    cg->r = x[0];
    cg->ih = x[1];
    cg->iw = x[2];
    cg->grp = x[3];
    conv_data_tile(lw, c, x[4], 1, cg);
}

/* input channels a thread of the GPU's conv dW takes (a divisor of Cg is used): each dL/dy value
 * loaded once for them. 1: with 4, the 128->128 conv's dW of the conv net's step took 11.0 ms
 * against 6.9 ms with 1 (H200, Nsight Compute; batch 64): the kernel waits on its loads, and a
 * quarter of the threads hid less of that than the loads saved */
enum { GPU_DW_CHANNELS = 1 };

/* dW[o, c, kh, kw] = the sum over rows, oh, ow (in order, taps inside the input) of
 * x[r, c, ih, iw] dy[r, o, oh, ow]: conv_weight_kernel's sums, a thread per output channel and
 * block of GPU_DW_CHANNELS input channels (fma(dy, x, s) is the CPU's fma(x, dy, s)), output
 * channels fastest (the warp's dL/dy loads, channels last, coalesce; its input loads are one
 * broadcast). A small conv (conv_dw_rows_first): a thread per row and weight block for the
 * rows' sums, into a buffer, then a thread per weight adding them in order. */
static void
conv_weight_gpu(G *g, ConvGrad *cg, int dw, const char *name)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const ConvGeom *d = &cg->d;
    bool rows_first = conv_dw_rows_first(d);
    int64_t nw = d->O * d->Cg * d->KH * d->KW, steps = lw->is_static[cg->v] ? 1 : lw->T;
    int nc = GPU_DW_CHANNELS;
    while (d->Cg % nc)
        nc--;
    begin_kernel(lw, cg->v,
                 describe(lw, cg->v,
                          rows_first ? "backward: dW, each row's sum over its pixels, a thread per "
                                       "row and weight block"
                                     : "backward: dW = the sum over rows and pixels of dy x, a "
                                       "thread per output channel and block of input channels, "
                                       "rows and pixels in order"),
                 false);
    lw->k.name = arena_printf(&p->arena, rows_first ? "grad_w_rows_%s" : "grad_w_%s", name);
    int rowbuf = rows_first ? scratch_buf_sized(lw, arena_printf(&p->arena, "%s.dw_rows", name),
                                                lw->acc, (KSize){steps * nw, 0})
                            : -1;
    KExpr *q, *x[5], *r;
    int64_t nblk = d->KH * d->KW * (d->Cg / nc) * d->O;
    KStmt *fq = loop(lw, top(lw), "q",
                     rows_first ? bin(lw, KB_MUL, rows_of(lw, cg->v), ci(lw, nblk)) : ci(lw, nblk),
                     true, &q);
    Cur c = body(fq);
    gpu_coords(lw, c, q, 5, (const int64_t[]){0, d->KH, d->KW, d->Cg / nc, d->O}, x);
    KExpr *kh = x[1], *kw = x[2], *c0 = bin(lw, KB_MUL, x[3], ci(lw, nc)), *o = x[4];
    KExpr *xc0 =
        d->G == 1 ? ci(lw, 0) : bin(lw, KB_MUL, bin(lw, KB_DIV, o, ci(lw, d->Og)), ci(lw, d->Cg));
    int t[GPU_DW_CHANNELS];
    for (int j = 0; j < nc; j++) {
        t[j] = tile(lw, "dw", 1);
        s_tile(lw, c, KS_VSET, t[j], -1, NULL, kx_const(p, KT_F64, 0));
    }
    Cur cr = c;
    if (rows_first) {
        r = x[0];
    } else {
        KStmt *fr = loop(lw, c, "r", rows_of(lw, cg->v), false, &r);
        cr = body(fr);
    }
    KExpr *oh, *ow;
    int ihv, iwv;
    Cur cp = conv_tap_pixels(lw, cr, d, kh, kw, &oh, &ow, &ihv, &iwv);
    KExpr *pix = bin(lw, KB_ADD, bin(lw, KB_MUL, oh, ci(lw, d->OW)), ow);
    KExpr *yi = bin(lw, KB_ADD,
                    bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, r, ci(lw, d->OH * d->OW)), pix),
                        ci(lw, d->O)),
                    o);
    int dy = local(lw, "dy", KT_F32);
    s_assign(lw, cp, dy, kx_load(p, cg->dyt, yi));
    KExpr *wi[GPU_DW_CHANNELS];
    for (int j = 0; j < nc; j++) {
        KExpr *cc = bin(lw, KB_ADD, c0, ci(lw, j));
        KExpr *chan = bin(lw, KB_ADD, xc0, cc);
        Pos px = row_pos(
            lw, cg->x, r,
            bin(lw, KB_ADD,
                bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, chan, ci(lw, d->H)), var(lw, ihv)),
                    ci(lw, d->W)),
                var(lw, iwv)));
        /* the term x dy: fma(dy, x, s), the same as the CPU's fma(x, dy, s) (an x computed
         * where it is read: the CPU's form) */
        if (lw->vs[cg->x].layout == LY_INLINE || lw->vs[cg->x].layout == LY_SUMMED)
            tile_fma(lw, cp, t[j], to(lw, KT_F32, vload(lw, cg->x, &px)), cg->dyt, yi, false);
        else
            tile_fma(lw, cp, t[j], to(lw, KT_F64, var(lw, dy)), lw->vs[cg->x].buf,
                     vindex(lw, cg->x, &px), false);
        wi[j] = bin(lw, KB_ADD,
                    bin(lw, KB_MUL,
                        bin(lw, KB_ADD,
                            bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, o, ci(lw, d->Cg)), cc),
                                ci(lw, d->KH)),
                            kh),
                        ci(lw, d->KW)),
                    kw);
    }
    for (int j = 0; j < nc; j++)
        s_tile(lw, c, KS_VSTORE, t[j], rows_first ? rowbuf : dw,
               rows_first ? bin(lw, KB_ADD, bin(lw, KB_MUL, r, ci(lw, nw)), wi[j]) : wi[j], NULL);
    if (rows_first) {
        /* each weight's total over the rows, in order (fma(1, row, total): one rounding) */
        gpu_next_kernel(lw, arena_printf(&p->arena, "grad_w_%s", name));
        KExpr *w, *rr;
        KStmt *fw = loop(lw, top(lw), "w", ci(lw, nw), true, &w);
        int ts = tile(lw, "dw", 1);
        s_tile(lw, body(fw), KS_VSET, ts, -1, NULL, kx_const(p, KT_F64, 0));
        KStmt *fr = loop(lw, body(fw), "r", rows_of(lw, cg->v), false, &rr);
        tile_fma(lw, body(fr), ts, kx_const(p, KT_F64, 1), rowbuf,
                 bin(lw, KB_ADD, bin(lw, KB_MUL, rr, ci(lw, nw)), w), false);
        s_tile(lw, body(fw), KS_VSTORE, ts, dw, w, NULL);
    }
    end_kernel(lw);
}

/* the conv's backward: geometry and names */
static void
conv_grad_init(G *g, ValueId v, ConvGrad *out)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Module *m = lw->m;
    const Node *n = &m->nodes[v];
    ConvGrad cg;
    memset(&cg, 0, sizeof cg);
    cg.g = g;
    cg.v = v;
    cg.x = n->args[0];
    cg.d = conv_geom(m, n);
    int w = n->first_weight;
    if (lw->is_static[v] != lw->is_static[cg.x])
        die("kir: conv gradient between a static and a per-step value");
    /* dL/dx: the transposed convolution, channels last (conv_dxs), then added into x's
     * gradient, or from the tiles straight into it */
    if (g->needs[cg.x]) {
        cg.wt = add_buf(lw, arena_printf(&p->arena, "%s.taps", m->weights[w].name), KT_F32,
                        (KSize){0, m->weights[w].numel}, KB_WEIGHT, w, -1);
        KBuf *kb = &p->bufs[cg.wt];
        /* [O][C][KH][KW] → [KH][KW][O][C]; conv1d's [O][C][K] → [K][O][C] */
        if (n->op == OP_CONV1D) {
            kb->nperm = 3;
            memcpy(kb->perm, (const int[]){2, 0, 1}, 3 * sizeof *kb->perm);
        } else {
            kb->nperm = 4;
            memcpy(kb->perm, (const int[]){2, 3, 0, 1}, 4 * sizeof *kb->perm);
        }
    }
    cg.dxs = -1; /* made where it is needed (conv_dxs) */
    cg.dyt = -1; /* made by conv_dy_cl */
    *out = cg;
}

/* dL/dy channels last (cg->dyt), for dL/dx's taps and the weight gradient's tiles of output
 * channels (on the GPU a thread per element): made before both, so that dL/dy itself is read by
 * this kernel alone and its memory is free for the rest of the layer's backward */
static void
conv_dy_cl(G *g, ConvGrad *cg)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    ValueId v = cg->v;
    const ConvGeom *d = &cg->d;
    const char *name = value_name(lw, v);
    int64_t P = d->OH * d->OW, steps = lw->is_static[v] ? 1 : lw->T;
    KExpr *rv, *ov, *pv;
    cg->dyt = scratch_buf_sized(lw, arena_printf(&p->arena, "%s.dy_cl", name), KT_F32,
                                (KSize){steps * P * d->O, 0});
    begin_kernel(lw, v, describe(lw, v, "backward: dL/dy channels last"), false);
    lw->k.name = arena_printf(&p->arena, "grad_cl_%s", name);
    Cur cl;
    if (on_gpu(lw)) {
        KExpr *q, *x[3];
        KStmt *fq =
            loop(lw, top(lw), "q", bin(lw, KB_MUL, rows_of(lw, v), ci(lw, d->O * P)), true, &q);
        gpu_coords(lw, body(fq), q, 3, (const int64_t[]){0, d->O, P}, x);
        rv = x[0], ov = x[1], pv = x[2];
        cl = body(fq);
    } else {
        KStmt *fr = loop(lw, top(lw), "r", rows_of(lw, v), true, &rv);
        KStmt *fo = loop(lw, body(fr), "o", ci(lw, d->O), false, &ov);
        KStmt *fp = loop(lw, body(fo), "p", ci(lw, P), false, &pv);
        cl = body(fp);
    }
    Pos py = row_pos(lw, v, rv, bin(lw, KB_ADD, bin(lw, KB_MUL, ov, ci(lw, P)), pv));
    s_store(lw, cl, cg->dyt,
            bin(lw, KB_ADD,
                bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, rv, ci(lw, P)), pv), ci(lw, d->O)),
                ov),
            gload(g, v, &py));
    end_kernel(lw);
}

/* the channels-last scratch of dL/dx, made the first time it is needed */
static int
conv_dxs(Lower *lw, ConvGrad *cg)
{
    if (cg->dxs < 0) {
        const ConvGeom *d = &cg->d;
        int64_t steps = lw->is_static[cg->v] ? 1 : lw->T;
        cg->dxs =
            scratch_buf_sized(lw, arena_printf(&lw->p->arena, "%s.dx", value_name(lw, cg->v)),
                              KT_F32, (KSize){steps * d->C * d->H * d->W, 0});
    }
    return cg->dxs;
}

/* dL/dx of row rv (the CPU's): each input row's channels in tiles over the taps and output
 * channels into the channels-last scratch, then added into x's gradient (first: stored), or
 * as x's first contributor stored there straight from the tiles */
static void
conv_data_rows(G *g, ConvGrad *cg, Cur c, KExpr *rv, bool first)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const ConvGeom *d = &cg->d;
    KExpr *ih, *cc, *q;
    KStmt *fh = loop(lw, c, "ih", ci(lw, d->H), false, &ih);
    cg->r = rv;
    cg->ih = ih;
    cg->direct = first;
    if (!first) conv_dxs(lw, cg);
    /* each group's input channels in tiles, pixel by pixel or in blocks */
    if (d->G == 1) {
        cg->grp = ci(lw, 0);
        conv_data_row(lw, body(fh), cg);
    } else {
        KExpr *gv;
        KStmt *fg = loop(lw, body(fh), "g", ci(lw, d->G), false, &gv);
        cg->grp = gv;
        conv_data_row(lw, body(fg), cg);
    }
    if (cg->direct) return;
    KStmt *fc = loop(lw, c, "c", ci(lw, d->C), false, &cc);
    KStmt *fq = loop(lw, body(fc), "q", ci(lw, d->H * d->W), false, &q);
    fq->is_lanes = true;
    Pos px = row_pos(lw, cg->x, rv, bin(lw, KB_ADD, bin(lw, KB_MUL, cc, ci(lw, d->H * d->W)), q));
    KExpr *si = bin(
        lw, KB_ADD,
        bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, rv, ci(lw, d->H * d->W)), q), ci(lw, d->C)),
        cc);
    gadd(g, body(fq), cg->x, &px, kx_load(p, cg->dxs, si), first);
}

/* dL/dx of every row: the CPU's rows in parallel, the GPU's a thread per element */
static void
conv_data_all(G *g, ConvGrad *cg)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    ValueId v = cg->v;
    const ConvGeom *d = &cg->d;
    const char *name = value_name(lw, v);
    bool first = claim(g, cg->x);
    begin_kernel(lw, v,
                 describe(lw, v,
                          on_gpu(lw) ? "backward: dL/dx, the transposed convolution: a thread "
                                       "per input element (channels last), its taps then the "
                                       "output channels in order"
                                     : "backward: dL/dx, the transposed convolution: each "
                                       "input pixel's channels in tiles, its taps then the "
                                       "output channels in order"),
                 false);
    lw->k.name = arena_printf(&p->arena, "grad_x_%s", name);
    if (on_gpu(lw)) {
        conv_data_gpu(lw, cg);
        end_kernel(lw);
        /* then into x's gradient, a thread per element */
        begin_kernel(lw, v, describe(lw, v, "backward: dL/dx into x's gradient"), false);
        lw->k.name = arena_printf(&p->arena, "grad_dx_%s", name);
        KExpr *q, *x[3];
        KStmt *fq = loop(lw, top(lw), "q",
                         bin(lw, KB_MUL, rows_of(lw, v), ci(lw, d->C * d->H * d->W)), true, &q);
        gpu_coords(lw, body(fq), q, 3, (const int64_t[]){0, d->C, d->H * d->W}, x);
        Pos px = row_pos(lw, cg->x, x[0],
                         bin(lw, KB_ADD, bin(lw, KB_MUL, x[1], ci(lw, d->H * d->W)), x[2]));
        KExpr *si =
            bin(lw, KB_ADD,
                bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, x[0], ci(lw, d->H * d->W)), x[2]),
                    ci(lw, d->C)),
                x[1]);
        gadd(g, body(fq), cg->x, &px, kx_load(p, cg->dxs, si), first);
        end_kernel(lw);
        return;
    }
    KExpr *rv;
    KStmt *fr = loop(lw, top(lw), "r", rows_of(lw, v), true, &rv);
    conv_data_rows(g, cg, body(fr), rv, first);
    end_kernel(lw);
}

/* dW and db over every row (dL/dy copied channels last first) */
static void
conv_grad_weights(G *g, ConvGrad *cgp)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Module *m = lw->m;
    ValueId v = cgp->v;
    const Node *n = &m->nodes[v];
    ConvGrad cg = *cgp;
    const ConvGeom *d = &cg.d;
    const char *name = value_name(lw, v);
    int64_t P = d->OH * d->OW;
    int w = n->first_weight;
    if (cg.dyt < 0) conv_dy_cl(g, &cg);
    /* dW: tiles of output channels times taps in parallel */
    int dw = add_buf(lw, arena_printf(&p->arena, "%s.grad", m->weights[w].name), KT_F32,
                     (KSize){0, m->weights[w].numel}, KB_TEMP, -1, -1);
    p->bufs[dw].is_written_first = true;
    g->tr->weight_grad[w] = dw;
    /* with AVX-512, tiles of four registers (CONV_DW_CH_WIDE) */
    int wl = (lw->acc == KT_F32 ? DW_LANES : DW_LANES / 2) * (lower_wide_vectors() ? 4 : 1);
    if (d->G > 1) /* tiles inside groups: the largest divisor of Og up to wl lanes */
        while (d->Og % wl) wl--;
    int64_t ntiles = d->O / wl, tail = d->O % wl;
    if (on_gpu(lw))
        conv_weight_gpu(g, &cg, dw, name);
    else if (ntiles > 0)
        conv_weight_kernel(g, &cg, ntiles, 0, wl, dw,
                           "backward: dW = the sum over rows and pixels of dy x, tiles of output "
                           "channels times taps in parallel, rows and pixels in order",
                           name);
    if (tail > 0 && !on_gpu(lw))
        conv_weight_kernel(g, &cg, 1, ntiles * wl, (int)tail, dw,
                           "backward: dW, the output channels left over", name);
    /* db: the sum over rows and pixels per output channel */
    if (has_bias(n)) {
        int db = add_buf(lw, arena_printf(&p->arena, "%s.grad", m->weights[w + 1].name), KT_F32,
                         (KSize){0, d->O}, KB_TEMP, -1, -1);
        p->bufs[db].is_written_first = true;
        g->tr->weight_grad[w + 1] = db;
        begin_kernel(lw, v, describe(lw, v, "backward: db = the sum of dL/dy over rows and pixels"),
                     false);
        lw->k.name = arena_printf(&p->arena, "grad_b_%s", name);
        KExpr *rv, *ov, *pv;
        KStmt *fo2 = loop(lw, top(lw), "o", ci(lw, d->O), true, &ov);
        int sum = local(lw, "db", lw->acc);
        s_assign(lw, body(fo2), sum, kx_const(p, lw->acc, 0));
        KStmt *fr2 = loop(lw, body(fo2), "r", rows_of(lw, v), false, &rv);
        KStmt *fp2 = loop(lw, body(fr2), "p", ci(lw, P), false, &pv);
        /* dL/dy from the channels-last copy (the same values, in the same order) */
        KExpr *di = bin(
            lw, KB_ADD,
            bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, rv, ci(lw, P)), pv), ci(lw, d->O)), ov);
        s_assign(lw, body(fp2), sum,
                 bin(lw, KB_ADD, var(lw, sum), to(lw, lw->acc, kx_load(p, cg.dyt, di))));
        s_store(lw, body(fo2), db, ov, var(lw, sum));
        end_kernel(lw);
    }
    *cgp = cg;
}

static void
grad_conv(G *g, ValueId v)
{
    ConvGrad cg;
    conv_grad_init(g, v, &cg);
    conv_dy_cl(g, &cg);
    if (g->needs[cg.x]) conv_data_all(g, &cg);
    conv_grad_weights(g, &cg);
}

/* ---- delays (no recurrence: the operand comes first) ---- */

/* dL/dx at step t - steps += dL/dy at t (t >= steps); a first contributor stores +0 at the last
 * steps, which nothing reaches */
static void
grad_delay(G *g, ValueId v)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Node *n = &lw->m->nodes[v];
    ValueId x = n->args[0];
    if (!g->needs[x]) return;
    int64_t steps = node_attr_i(n, "steps", 0), numel = lw->vs[root(lw, v)].numel;
    if (lw->is_static[v]) die("kir: a static delay in training");
    bool first = claim(g, x);
    if (lw->is_static[root(lw, x)]) {
        /* a static value delayed: the steps from `steps` on read it, their gradients summed
         * from the last step to the first as the interpreter adds them into its one slot */
        begin_kernel(lw, v, describe(lw, v, "backward: dL/dx, a static value's steps summed"),
                     false);
        lw->k.name = arena_printf(&p->arena, "grad_%s", lw->k.name);
        KExpr *jv, *tv;
        Pos p0;
        Cur cj = sample_lanes(lw, top(lw), numel, &jv, &p0);
        int sum = static_sum(g, cj, x, &p0, first, "d_x");
        Cur cu = steps_from_last(lw, cj, lw->T - steps, &tv);
        Pos pt = p0;
        pt.t = tv;
        s_assign(lw, cu, sum, bin(lw, KB_ADD, var(lw, sum), gload(g, v, &pt)));
        static_store(g, cj, x, &p0, sum);
        end_kernel(lw);
        return;
    }
    begin_kernel(lw, v, describe(lw, v, "backward: dL/dx at t - steps from dL/dy at t"), false);
    lw->k.name = arena_printf(&p->arena, "grad_%s", lw->k.name);
    KExpr *jv, *tv;
    Pos px;
    Cur cj = sample_lanes(lw, top(lw), numel, &jv, &px);
    KStmt *ft = loop(lw, cj, "t", ci(lw, lw->T), false, &tv);
    Pos py = px;
    px.t = tv;
    py.t = bin(lw, KB_ADD, tv, ci(lw, steps));
    KStmt *i = s_if(lw, body(ft), bin(lw, KB_LT, tv, ci(lw, lw->T - steps)));
    gadd(g, body(i), x, &px, gload(g, v, &py), first);
    if (first) gadd(g, els(i), x, &px, zero(lw), true);
    end_kernel(lw);
}

/* a kernel storing zeros over buffer buf (every sample's elements) */
static void
zero_kernel(Lower *lw, ValueId v, int buf, const char *what)
{
    KProgram *p = lw->p;
    begin_kernel(lw, v, describe(lw, v, what), false);
    lw->k.name = arena_printf(&p->arena, "grad_zero_%s", p->bufs[buf].name);
    KExpr *iv;
    KSize sz = p->bufs[buf].size; /* every sample's: per_batch * B + fixed */
    KStmt *f = loop(lw, top(lw), "e",
                    bin(lw, KB_ADD, bin(lw, KB_MUL, ci(lw, sz.per_batch), kx_kind(p, KX_BATCH)),
                        ci(lw, sz.fixed)),
                    true, &iv);
    f->is_lanes = true;
    s_store(lw, body(f), buf, iv, kx_const(p, ktype_value(p->bufs[buf].type), 0));
    end_kernel(lw);
}

/* ---- recurrent regions ----
 * A region (a cycle through delays, ir_schedule_order: contiguous, its readers outside it already
 * done) goes backwards step by step, as interp_grad does it: one kernel, parallel over samples (a
 * recurrence couples a sample's steps, never two samples), the steps from the last, at each step
 * the region's nodes in reverse order: a neuron layer's step (grad_neuron_step, its states before
 * the step kept by a kernel of their own, the adjoints carried between steps in a buffer), a dense
 * layer's row of dL/dx (the outputs in order, as dense_backward_f32), add/sub/mul/scale, a delay
 * to its operand's step t - steps. Every gradient the region adds to starts zeroed (or holds what
 * its readers outside stored), so every contribution adds. After the loop: the dense layers' dW and
 * db over all the rows, the learned parameters' sums. */

typedef struct RegionNeuron {
    int hist, carry, nadj;
    int *partial; /* per parameter: a learned one's per-neuron shares (f64), else -1 */
} RegionNeuron;

typedef struct RegionRow {
    G *g;
    const DenseGrad *d;
    KExpr *t, *b;
} RegionRow;

/* one tile of dL/dx of a dense layer's row (t, b): what it holds plus dL/dy W, outputs in order */
static void
region_dense_tile(Lower *lw, Cur c, KExpr *i0, int lanes, const void *ctx)
{
    const RegionRow *rr = ctx;
    G *g = rr->g;
    const DenseGrad *d = rr->d;
    ValueId rx = root(lw, d->x);
    int t = tile(lw, "dx", lanes);
    Pos px = {0};
    px.t = rr->t;
    px.b = rr->b;
    px.i = i0;
    KExpr *xi = vindex(lw, rx, &px);
    s_tile(lw, c, KS_VLOAD, t, g->gbuf[rx], xi, NULL);
    KExpr *o;
    KStmt *fo = loop(lw, c, "o", ci(lw, d->O), false, &o);
    Pos py = px;
    py.i = o;
    tile_fma(lw, body(fo), t, gload(g, d->v, &py), d->wrows,
             bin(lw, KB_ADD, bin(lw, KB_MUL, o, ci(lw, d->K)), i0), false);
    s_tile(lw, c, KS_VSTORE, t, g->gbuf[rx], xi, NULL);
}

/* neuron layer v's step t for neuron jv (c: inside the parallel loop over the neurons) */
static void
region_neuron(G *g, ValueId v, Cur c, KExpr *tv, KExpr *jv, const RegionNeuron *rn)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Module *m = lw->m;
    const Node *n = &m->nodes[v];
    const NeuronDef *nd = m->neurons[n->neuron];
    int64_t numel = lw->vs[v].numel;
    int ns = nd->nstates, nl_ = nd->nlocals;
    SurrogateFn sg;
    char why[8];
    neuron_surrogate(nd, &sg, why, sizeof why);
    KExpr *BN = bin(lw, KB_MUL, kx_kind(p, KX_BATCH), ci(lw, numel));
    NCopy cp;
    neuron_copy(lw, n, "", &cp);
    Adj A = {arena_alloc(&p->arena, (size_t)(ns + 1) * sizeof(int)),
             arena_alloc(&p->arena, (size_t)(nl_ + 1) * sizeof(int)),
             local(lw, "d_spike", KT_F32),
             local(lw, "d_I", KT_F32),
             -1,
             arena_alloc(&p->arena, (size_t)(nd->nparams + 1) * sizeof(int))};
    for (int k = 0; k < ns; k++)
        A.st[k] = local(lw, arena_printf(&p->arena, "d_%s", nd->states[k].name), KT_F32);
    for (int k = 0; k < nl_; k++)
        A.lc[k] = local(lw, arena_printf(&p->arena, "d_%s", nd->locals[k]), KT_F32);
    /* the adjoints carried from step t + 1: [nadj][B * numel] */
    for (int k = 0; k < rn->nadj; k++) {
        int a = k < ns ? A.st[k] : k < ns + nl_ ? A.lc[k - ns] : A.sp;
        s_assign(lw, c, a,
                 kx_load(p, rn->carry, bin(lw, KB_ADD, bin(lw, KB_MUL, ci(lw, k), BN), jv)));
    }
    for (int i = 0; i < nd->nparams; i++) {
        A.pa[i] = -1;
        if (rn->partial[i] < 0) continue;
        A.pa[i] = local(lw, arena_printf(&p->arena, "d_%s", nd->params[i].name), KT_F64);
        s_assign(lw, c, A.pa[i], kx_load(p, rn->partial[i], jv));
    }
    int a_out = local(lw, "d_out", KT_F32);
    grad_neuron_step(g, v, c, &cp, &A, tv, NULL, rn->hist, jv, -1, a_out, false, &sg);
    for (int k = 0; k < rn->nadj; k++) {
        int a = k < ns ? A.st[k] : k < ns + nl_ ? A.lc[k - ns] : A.sp;
        s_store(lw, c, rn->carry, bin(lw, KB_ADD, bin(lw, KB_MUL, ci(lw, k), BN), jv), var(lw, a));
    }
    for (int i = 0; i < nd->nparams; i++)
        if (rn->partial[i] >= 0) s_store(lw, c, rn->partial[i], jv, var(lw, A.pa[i]));
}

/* a step kernel of the region's backward: one parallel loop over [0, n B) (the step loop runs it
 * sample by sample: Kernel.sample_iters), the step t = T - 1 - the schedule's step in a local;
 * returns the loop's body, *iv its variable, *tv the step */
static Cur
region_kernel(Lower *lw, ValueId v, const char *what, const char *name, int64_t n, bool lanes,
              KExpr **iv, KExpr **tv)
{
    KProgram *p = lw->p;
    begin_kernel(lw, v, describe(lw, v, what), true);
    lw->k.name = arena_printf(&p->arena, "%s_%s", name, value_name(lw, v));
    KStmt *f = loop(lw, top(lw), n == 1 && !lanes ? "b" : "j",
                    bin(lw, KB_MUL, kx_kind(p, KX_BATCH), ci(lw, n)), true, iv);
    f->is_lanes = lanes;
    int tl = local(lw, "t", KT_I64);
    s_assign(lw, body(f), tl, bin(lw, KB_SUB, ci(lw, lw->T - 1), kx_kind(p, KX_STEP)));
    *tv = var(lw, tl);
    return body(f);
}

/* the backward of the region sched[lo..hi] */
static void
grad_region(G *g, const ValueId *sched, int lo, int hi)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Module *m = lw->m;
    RegionNeuron *rn = arena_alloc(&lw->scratch, (size_t)(hi - lo + 1) * sizeof *rn);
    DenseGrad *dg = arena_alloc(&lw->scratch, (size_t)(hi - lo + 1) * sizeof *dg);
    ConvGrad *cgs = arena_alloc(&lw->scratch, (size_t)(hi - lo + 1) * sizeof *cgs);
    /* every gradient the region adds to: zeroed unless its readers outside stored it */
    for (int q = lo; q <= hi; q++) {
        const Node *n = &m->nodes[sched[q]];
        for (int a = -1; a < n->nargs; a++) {
            ValueId r = root(lw, a < 0 ? sched[q] : n->args[a]);
            if (g->gbuf[r] >= 0 && !g->written[r]) {
                zero_kernel(lw, r, g->gbuf[r], "backward: a recurrent region's gradient, zeroed");
                g->written[r] = true;
            }
        }
    }
    for (int q = lo; q <= hi; q++) {
        ValueId v = sched[q];
        const Node *n = &m->nodes[v];
        if (n->op == OP_DENSE) dense_grad_init(g, v, &dg[q - lo]);
        if (op_is_conv(n->op)) conv_grad_init(g, v, &cgs[q - lo]);
        if (n->op != OP_NEURON) continue;
        const NeuronDef *nd = m->neurons[n->neuron];
        int64_t numel = lw->vs[v].numel;
        const char *vn = value_name(lw, v);
        RegionNeuron *r = &rn[q - lo];
        /* the states before every step, from the layer's input */
        begin_kernel(lw, v,
                     describe(lw, v,
                              "backward: the forward again from the layer's input, "
                              "the states before every step kept"),
                     false);
        lw->k.name = arena_printf(&p->arena, "grad_states_%s", vn);
        KExpr *jv;
        Pos pj;
        Cur cj = sample_lanes(lw, top(lw), numel, &jv, &pj);
        NCopy cp;
        neuron_copy(lw, n, "", &cp);
        int64_t kept = (int64_t)lw->T * cp.ncarry;
        r->hist = scratch_buf_sized(lw, arena_printf(&p->arena, "%s.states", vn), KT_F32,
                                    (KSize){kept * numel, kept * HIST_BLOCK});
        kept_states(lw, cj, n->args[0], &cp, jv, r->hist);
        end_kernel(lw);
        r->nadj = nd->nstates + nd->nlocals + 1;
        r->carry = add_buf(lw, arena_printf(&p->arena, "%s.adjoints", vn), KT_F32,
                           (KSize){r->nadj * numel, 0}, KB_TEMP, -1, -1);
        p->bufs[r->carry].is_written_first = true;
        zero_kernel(lw, v, r->carry, "backward: the adjoints carried between steps, zeroed");
        r->partial = arena_alloc(&lw->scratch, (size_t)(nd->nparams + 1) * sizeof(int));
        for (int i = 0; i < nd->nparams; i++) {
            r->partial[i] = -1;
            if (!node_learns(n, i)) continue;
            r->partial[i] =
                add_buf(lw, arena_printf(&p->arena, "%s.%s.partial", vn, nd->params[i].name),
                        KT_F64, (KSize){numel, 0}, KB_TEMP, -1, -1);
            p->bufs[r->partial[i]].is_written_first = true;
            zero_kernel(lw, v, r->partial[i], "backward: a learned parameter's shares, zeroed");
        }
    }
    /* the step loop: the region's nodes in reverse, each a step kernel */
    for (int q = hi; q >= lo; q--) {
        ValueId v = sched[q];
        const Node *n = &m->nodes[v];
        int64_t numel = lw->vs[root(lw, v)].numel;
        KExpr *iv, *tv;
        switch (n->op) {
        case OP_NEURON: {
            Cur c = region_kernel(lw, v,
                                  "backward: one step, reverse mode over the neuron's program (a "
                                  "recurrent region's, from the last step)",
                                  "grad_step", numel, true, &iv, &tv);
            region_neuron(g, v, c, tv, iv, &rn[q - lo]);
            end_kernel(lw);
            break;
        }
        case OP_DENSE: {
            if (!g->needs[n->args[0]]) break;
            Cur c = region_kernel(lw, v,
                                  "backward: one step's dL/dx = dL/dy W, outputs in order (a "
                                  "recurrent region's, from the last step)",
                                  "grad_x_step", 1, false, &iv, &tv);
            RegionRow rr = {g, &dg[q - lo], tv, iv};
            for_tiles(lw, c, dg[q - lo].K, lw->acc == KT_F32 ? DW_LANES : DW_LANES / 2,
                      region_dense_tile, &rr);
            end_kernel(lw);
            break;
        }
        case OP_CONV2D:
        case OP_CONV1D: {
            if (!g->needs[n->args[0]]) break;
            Cur c = region_kernel(lw, v,
                                  "backward: one step's dL/dx, the transposed convolution: the "
                                  "sample's row, its taps then the output channels in order (a "
                                  "recurrent region's, from the last step)",
                                  "grad_x_step", 1, false, &iv, &tv);
            KExpr *row = bin(lw, KB_ADD, bin(lw, KB_MUL, tv, kx_kind(p, KX_BATCH)), iv);
            conv_data_rows(g, &cgs[q - lo], c, row, false);
            end_kernel(lw);
            break;
        }
        case OP_MAXPOOL2D:
        case OP_AVGPOOL2D:
        case OP_SUMPOOL2D: {
            /* (a neuron layer outside that only this pool reads computes it inline) */
            if (!g->needs[n->args[0]] || g->pool_of[n->args[0]] == v) break;
            Cur c = region_kernel(lw, v,
                                  "backward: one step's dL/dx, each input element gathering "
                                  "dL/dy of its windows (a recurrent region's, from the last "
                                  "step)",
                                  "grad_step", 1, false, &iv, &tv);
            PoolGeom pq = pool_geom(m, n);
            KExpr *row = bin(lw, KB_ADD, bin(lw, KB_MUL, tv, kx_kind(p, KX_BATCH)), iv);
            pool_grad_rows(g, v, &pq, c, row, false);
            end_kernel(lw);
            break;
        }
        case OP_ADD:
        case OP_SUB:
        case OP_MUL:
        case OP_SCALE: {
            Cur c = region_kernel(lw, v,
                                  "backward: one step's dL/da, dL/db (a recurrent region's, from "
                                  "the last step)",
                                  "grad_step", numel, true, &iv, &tv);
            Pos ps = {0};
            ps.t = tv;
            ps.j = iv;
            ps.jn = numel;
            for (int k = 0; k < n->nargs; k++)
                if (g->needs[n->args[k]])
                    gadd(g, c, n->args[k], &ps, elementwise_term(g, v, k, &ps), false);
            end_kernel(lw);
            break;
        }
        case OP_DELAY: {
            ValueId x = n->args[0];
            int64_t steps = node_attr_i(n, "steps", 0);
            if (!g->needs[x]) break;
            Cur c = region_kernel(lw, v,
                                  "backward: dL/dx at t - steps from dL/dy at t (a recurrent "
                                  "region's, from the last step)",
                                  "grad_step", numel, true, &iv, &tv);
            KStmt *i = s_if(lw, c, bin(lw, KB_GE, tv, ci(lw, steps)));
            Pos py = {0}, px = {0};
            py.j = px.j = iv;
            py.jn = px.jn = numel;
            py.t = tv;
            px.t = bin(lw, KB_SUB, tv, ci(lw, steps));
            gadd(g, body(i), x, &px, gload(g, v, &py), false);
            end_kernel(lw);
            break;
        }
        default:
            break; /* flatten (a view), state probes (their neuron reads them) */
        }
    }
    for (int q = lo; q <= hi; q++) {
        ValueId v = sched[q];
        const Node *n = &m->nodes[v];
        if (n->op == OP_DENSE) dense_grad_weights(g, &dg[q - lo]);
        if (op_is_conv(n->op)) conv_grad_weights(g, &cgs[q - lo]);
        for (int i = 0; n->op == OP_NEURON && i < m->neurons[n->neuron]->nparams; i++)
            if (rn[q - lo].partial[i] >= 0) learned_grad(g, v, i, rn[q - lo].partial[i]);
    }
}

/* ---- the inputs' gradients last ---- */

/* what kernel statements s load (reads) and store (writes), by buffer */
static void
expr_reads(const KExpr *e, bool *reads)
{
    if (!e) return;
    if (e->kind == KX_LOAD) reads[e->buf] = true;
    expr_reads(e->a, reads);
    expr_reads(e->b, reads);
    expr_reads(e->c, reads);
}

static void
stmt_uses(KStmt *const *s, int n, bool *reads, bool *writes)
{
    for (int i = 0; i < n; i++) {
        const KStmt *st = s[i];
        if (st->kind == KS_VLOAD || st->kind == KS_VFMA) reads[st->buf] = true;
        if (st->kind == KS_STORE || st->kind == KS_VSTORE || st->kind == KS_COUNT)
            writes[st->buf] = true;
        expr_reads(st->lo, reads);
        expr_reads(st->hi, reads);
        expr_reads(st->index, reads);
        expr_reads(st->a, reads);
        stmt_uses(st->body, st->nbody, reads, writes);
        stmt_uses(st->els, st->nels, reads, writes);
    }
}

/* the loads and stores of kernels [first, end): row k - first of *reads and *writes (nbb
 * flags a row, one a buffer) */
static void
kernels_uses(const KProgram *p, int first, int end, size_t nbb, bool **reads, bool **writes)
{
    *reads = xcalloc((size_t)(end - first + 1) * nbb, sizeof(bool));
    *writes = xcalloc((size_t)(end - first + 1) * nbb, sizeof(bool));
    for (int k = first; k < end; k++)
        stmt_uses(p->kernels[k].body, p->kernels[k].nbody, *reads + (size_t)(k - first) * nbb,
                  *writes + (size_t)(k - first) * nbb);
}

/* Moves the backward kernels [first, nkernels) that only the inputs' gradients need after the
 * others (each part in its order), and returns where they start. From the last kernel back, one
 * is such a kernel when everything it stores is a gradient that only an input's needs (is_only)
 * or a temporary, that no kernel kept so far reads (nor the caller: a weight's gradient), and no
 * kept kernel stores there too (else the contributions' order would change: then it is kept, and
 * the scan runs again). Nothing the rest computes depends on them: a value whose gradient a
 * weight's needs has only such values as its readers. */
static int
split_input_kernels(KProgram *p, const KTrain *tr, const bool *is_only)
{
    int nk = p->nkernels, nb = p->nbufs, first = tr->nforward;
    size_t nbb = (size_t)nb + 1;
    /* each backward kernel's loads and stores */
    bool *reads, *writes;
    kernels_uses(p, first, nk, nbb, &reads, &writes);
    bool *read_later = xcalloc(nbb, sizeof(bool));
    /* buffers a kept kernel stores to: a moved kernel storing there too would change the order
     * of the contributions (an input's gradient that a kept layer's kernel adds to) */
    bool *pinned = xcalloc(nbb, sizeof(bool));
    bool *is_in = xcalloc((size_t)nk + 1, sizeof(bool));
    for (bool again = true; again;) {
        memset(read_later, 0, nbb * sizeof(bool));
        for (int w = 0; w < p->m->nweights; w++) /* the results: the caller reads them */
            if (tr->weight_grad[w] >= 0) read_later[tr->weight_grad[w]] = true;
        for (int k = nk - 1; k >= first; k--) {
            const bool *rd = reads + (size_t)(k - first) * nbb;
            const bool *wr = writes + (size_t)(k - first) * nbb;
            bool only = !p->kernels[k].is_step;
            for (int b = 0; b < nb && only; b++)
                if (wr[b])
                    only =
                        !pinned[b] && !read_later[b] &&
                        (is_only[b] || (p->bufs[b].kind == KB_TEMP && p->bufs[b].is_written_first));
            is_in[k] = only;
            for (int b = 0; b < nb && !only; b++)
                read_later[b] = read_later[b] || rd[b];
        }
        again = false;
        for (int k = first; k < nk; k++)
            for (int b = 0; b < nb && !is_in[k]; b++)
                if (writes[(size_t)(k - first) * nbb + b] && !pinned[b]) {
                    pinned[b] = true;
                    for (int q = first; q < nk; q++)
                        again = again || (is_in[q] && writes[(size_t)(q - first) * nbb + b]);
                }
    }
    free(pinned);
    Kernel *ks = xmalloc(((size_t)nk + 1) * sizeof *ks);
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int k = first; k < nk; k++)
            if (is_in[k] == (pass == 1)) ks[n++] = p->kernels[k];
    int split = nk;
    for (int k = first; k < nk; k++)
        split -= is_in[k];
    memcpy(p->kernels + first, ks, (size_t)n * sizeof *ks);
    free(ks);
    free(is_in);
    free(writes);
    free(reads);
    free(read_later);
    return split;
}

/* Moves the kernels of a weight's gradient to the end of the backward, in their order, where
 * the gradient is larger than what they read: it lives from where they run to the optimiser, so
 * computed where its layer's backward stands it held memory through every layer's backward
 * before it (the conv net's 6272 -> 2048 layer: 49 MiB through both convolutions' backward, for
 * 3.5 MiB of spikes and dL/dy at a batch of 64). What they read lives longer instead, which pays
 * up to a batch of DEFER_BATCH. Only whole kernels outside step loops, storing nothing but the
 * gradient and scratch of their own: nothing after them reads what they store, so the results
 * are the same bits. */
enum { DEFER_BATCH = 256 };

static int64_t
buf_bytes_at(const KBuf *b, int64_t batch)
{
    return kbytes(b->type, b->size.fixed + b->size.per_batch * batch);
}

static void
defer_weight_grads(KProgram *p, const KTrain *tr)
{
    int nk = p->nkernels, nb = p->nbufs, first = tr->nforward;
    size_t nbb = (size_t)nb + 1;
    bool *reads, *writes;
    kernels_uses(p, 0, nk, nbb, &reads, &writes);
    bool *moved = xcalloc((size_t)nk + 1, sizeof(bool));
    bool *in_set = xcalloc((size_t)nk + 1, sizeof(bool));
    for (int w = 0; w < p->m->nweights; w++) {
        int wg = tr->weight_grad[w];
        if (wg < 0) continue;
        bool ok = true;
        int64_t read_bytes = 0;
        for (int k = 0; k < nk; k++) {
            in_set[k] = k >= first && writes[(size_t)k * nbb + wg];
            ok = ok && !(in_set[k] && p->kernels[k].is_step) &&
                 !(reads[(size_t)k * nbb + wg] && !in_set[k]) &&
                 !(k < first && writes[(size_t)k * nbb + wg]);
        }
        for (int b = 0; b < nb && ok; b++) {
            bool set_writes = false, set_reads = false, others = false;
            for (int k = 0; k < nk; k++) {
                bool touches = reads[(size_t)k * nbb + b] || writes[(size_t)k * nbb + b];
                if (in_set[k]) {
                    set_writes |= writes[(size_t)k * nbb + b];
                    set_reads |= reads[(size_t)k * nbb + b];
                } else {
                    others |= touches;
                }
            }
            /* the gradient and scratch of their own; what they read of the others' lives on */
            if (set_writes && b != wg && others) ok = false;
            if (set_reads && others && p->bufs[b].kind == KB_TEMP)
                read_bytes += buf_bytes_at(&p->bufs[b], DEFER_BATCH);
        }
        if (!ok || buf_bytes_at(&p->bufs[wg], DEFER_BATCH) <= read_bytes) continue;
        for (int k = first; k < nk; k++)
            moved[k] |= in_set[k];
    }
    Kernel *ks = xmalloc(((size_t)nk + 1) * sizeof *ks);
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int k = first; k < nk; k++)
            if (moved[k] == (pass == 1)) ks[n++] = p->kernels[k];
    memcpy(p->kernels + first, ks, (size_t)n * sizeof *ks);
    free(ks);
    free(in_set);
    free(moved);
    free(writes);
    free(reads);
}

/* e with every load of buffer `from` reading `to` instead: the subtrees that load it copied
 * (trees share subtrees, so none is changed in place), the others shared */
static KExpr *
expr_rebuf(KProgram *p, KExpr *e, int from, int to)
{
    if (!e) return NULL;
    KExpr *a = expr_rebuf(p, e->a, from, to), *b = expr_rebuf(p, e->b, from, to),
          *c = expr_rebuf(p, e->c, from, to);
    bool loads = e->kind == KX_LOAD && e->buf == from;
    if (!loads && a == e->a && b == e->b && c == e->c) return e;
    KExpr *x = arena_alloc(&p->arena, sizeof *x);
    *x = *e;
    x->a = a, x->b = b, x->c = c;
    if (loads) x->buf = to;
    return x;
}

/* a copy of statements s[0..n) with buffer `from` read and written as `to` */
static KStmt **
stmts_rebuf(KProgram *p, KStmt *const *s, int n, int from, int to)
{
    KStmt **out = arena_alloc(&p->arena, ((size_t)n + 1) * sizeof *out);
    for (int i = 0; i < n; i++) {
        KStmt *st = arena_alloc(&p->arena, sizeof *st);
        *st = *s[i];
        if (st->buf == from) st->buf = to;
        st->lo = expr_rebuf(p, st->lo, from, to);
        st->hi = expr_rebuf(p, st->hi, from, to);
        st->index = expr_rebuf(p, st->index, from, to);
        st->a = expr_rebuf(p, st->a, from, to);
        st->body = stmts_rebuf(p, st->body, st->nbody, from, to);
        st->els = stmts_rebuf(p, st->els, st->nels, from, to);
        out[i] = st;
    }
    return out;
}

/* A forward kernel computed from the inputs and weights alone into a buffer much larger than
 * what it reads of the inputs (a first convolution's channels from the image) runs again just
 * before the backward's first reader of its value, into a buffer of its own that the backward
 * reads instead: the value is kept through the rest of the forward and the backward's later
 * layers no more (the conv net's c1, 24.5 MiB at a batch of 64, for a conv over one input
 * channel, 9 terms an output). The same kernel on the same inputs and weights: the same bits.
 * Worth it from REMAT_BYTES (at a batch of 64) and REMAT_RATIO times the input bytes. */
enum { REMAT_BYTES = 4 << 20, REMAT_RATIO = 8 };

static void
remat_first_layers(Lower *lw, const KTrain *tr)
{
    KProgram *p = lw->p;
    int first = tr->nforward, nb = p->nbufs;
    /* room for the buffers this adds too, one a forward kernel at most */
    size_t nbb = (size_t)nb + (size_t)first + 1;
    bool *reads, *writes, *rd = xcalloc(nbb, sizeof(bool)), *wr = xcalloc(nbb, sizeof(bool));
    kernels_uses(p, 0, first, nbb, &reads, &writes);
    for (int x = 0; x < nb; x++) {
        const KBuf *xb = &p->bufs[x];
        if (xb->kind != KB_TEMP || !xb->is_written_first) continue;
        /* the forward kernels that store x (a GPU layer's two: its tiles and their twin, one of
         * which runs at a batch): each from the inputs and weights alone, storing x alone */
        int nw = 0;
        int64_t in_bytes = 0;
        bool ok = true;
        for (int k = 0; k < first && ok; k++) {
            if (!writes[(size_t)k * nbb + x]) continue;
            nw++;
            ok = !p->kernels[k].is_step;
            for (int b = 0; b < nb && ok; b++) {
                const KBuf *kb = &p->bufs[b];
                if (writes[(size_t)k * nbb + b])
                    ok = b == x;
                else if (reads[(size_t)k * nbb + b])
                    ok = kb->kind == KB_INPUT || kb->kind == KB_WEIGHT;
                if (ok && reads[(size_t)k * nbb + b] && kb->kind == KB_INPUT)
                    in_bytes += buf_bytes_at(kb, 64);
            }
        }
        int64_t x_bytes = buf_bytes_at(xb, 64);
        if (!ok || nw == 0 || x_bytes < REMAT_BYTES || x_bytes < REMAT_RATIO * in_bytes) continue;
        /* the backward's first reader; none, or its first kernel: nothing to gain */
        int kb = -1;
        for (int q = first; q < p->nkernels && kb < 0; q++) {
            memset(rd, 0, nbb * sizeof(bool));
            memset(wr, 0, nbb * sizeof(bool));
            stmt_uses(p->kernels[q].body, p->kernels[q].nbody, rd, wr);
            if (rd[x] || wr[x]) kb = q;
        }
        if (kb <= first) continue;
        KBuf copy = *xb;
        int y = add_buf(lw, arena_printf(&p->arena, "%s.again", copy.name), copy.type, copy.size,
                        KB_TEMP, -1, -1);
        p->bufs[y].is_written_first = true;
        /* the backward reads y; copies of the kernels that stored x store it, placed before kb
         * in their order */
        for (int q = first; q < p->nkernels; q++)
            p->kernels[q].body = stmts_rebuf(p, p->kernels[q].body, p->kernels[q].nbody, x, y);
        for (int k = 0, at = kb; k < first; k++) {
            if (!writes[(size_t)k * nbb + x]) continue;
            const Kernel *kn = &p->kernels[k];
            lw->k = *kn;
            lw->k.name = arena_printf(&p->arena, "%s_again", kn->name);
            lw->k.what = arena_printf(
                &p->arena, "%s, again for the backward (kept meanwhile by no buffer)", kn->what);
            lw->k.body = stmts_rebuf(p, kn->body, kn->nbody, x, y);
            end_kernel(lw);
            Kernel again = p->kernels[p->nkernels - 1];
            memmove(p->kernels + at + 1, p->kernels + at,
                    (size_t)(p->nkernels - 1 - at) * sizeof *p->kernels);
            p->kernels[at++] = again;
        }
    }
    free(rd);
    free(wr);
    free(reads);
    free(writes);
}

/* ---- memory ---- */

/* The memory plan over the forward and the backward: temporaries whose lifetimes do not overlap
 * share memory. What the caller touches between or after the kernels lives past them: the
 * outputs' gradients from the backward's start (written after the forward), the weights' and the
 * inputs' gradients and the batch statistics to the end (read after the forward or the step). */
void
plan_train_memory(KProgram *p, const KTrain *tr)
{
    const Module *m = p->m;
    int nb = p->nbufs, end = p->nkernels;
    int *first_at = xmalloc(((size_t)nb + 1) * sizeof *first_at);
    int *last_at = xmalloc(((size_t)nb + 1) * sizeof *last_at);
    for (int b = 0; b < nb; b++)
        first_at[b] = last_at[b] = -1;
    for (int k = 0; k < m->noutputs; k++)
        first_at[tr->out_grad[k]] = tr->nforward;
    for (int w = 0; w < m->nweights; w++)
        if (tr->weight_grad[w] >= 0) last_at[tr->weight_grad[w]] = end;
    for (int k = 0; tr->input_grad && k < m->ninputs; k++)
        if (tr->input_grad[k] >= 0) last_at[tr->input_grad[k]] = end;
    for (ValueId v = 0; v < m->nnodes; v++) {
        if (tr->bn_mean[v] >= 0) last_at[tr->bn_mean[v]] = end;
        if (tr->bn_invstd[v] >= 0) last_at[tr->bn_invstd[v]] = end;
        if (tr->bn_var[v] >= 0) last_at[tr->bn_var[v]] = end;
    }
    plan_memory_with(p, first_at, last_at);
    free(first_at);
    free(last_at);
}

/* ---- the pass ---- */

void
lower_grad(Lower *lw, const Module *tm, const ValueId *topo, const ValueId *sched, KTrain *tr)
{
    const Module *m = lw->m;
    KProgram *p = lw->p;
    int n = m->nnodes;
    G g = {lw,
           tr,
           arena_alloc(&lw->scratch, ((size_t)n + 1) * sizeof(int)),
           arena_alloc(&lw->scratch, ((size_t)n + 1) * sizeof(bool)),
           arena_alloc(&lw->scratch, ((size_t)n + 1) * sizeof(bool)),
           arena_alloc(&lw->scratch, ((size_t)n + 1) * sizeof(ValueId))};
    /* the recurrent regions: the backward walks them step by step in kernels of its own
     * (grad_region); every other backward kernel sees their values as what they are once the
     * forward is done, buffers of all the steps (batched rows, not step kernels) */
    int *region = arena_alloc(&lw->scratch, ((size_t)n + 1) * sizeof(int));
    for (ValueId v = 0; v < n; v++) {
        region[v] = lw->region[v];
        lw->region[v] = -1;
    }
    tr->out_grad = arena_alloc(&p->arena, ((size_t)m->noutputs + 1) * sizeof(int));
    tr->weight_grad = arena_alloc(&p->arena, ((size_t)m->nweights + 1) * sizeof(int));
    for (int w = 0; w < m->nweights; w++)
        tr->weight_grad[w] = -1;
    /* which values get a gradient: those with a grad node; needs_w, which of them depend on a
     * weight (the rest serve only the inputs' gradients) */
    bool *needs_w = arena_alloc(&lw->scratch, ((size_t)n + 1) * sizeof(bool));
    bool *needs = arena_alloc(&lw->scratch, ((size_t)n + 1) * sizeof(bool));
    ir_grad_needs(m, topo, tr->has_input_grads, needs_w, needs);
    for (int k = n; k < tm->nnodes; k++)
        if (tm->nodes[k].op == OP_GRAD) g.needs[tm->nodes[k].args[0]] = true;
    for (ValueId v = 0; v < n; v++) {
        g.gbuf[v] = -1;
        if (needs[v] != g.needs[v]) die("kir: the grad nodes are not the forward's (ir_grad)");
    }
    /* a neuron layer read by one pool that tiles it (and nothing else): its backward computes the
     * pool's inline, so neither the pool's kernel nor the layer's gradient buffer exists */
    int *readers = arena_alloc(&lw->scratch, ((size_t)n + 1) * sizeof(int));
    for (ValueId v = 0; v < n; v++) {
        g.pool_of[v] = -1;
        for (int a = 0; a < m->nodes[v].nargs; a++)
            readers[m->nodes[v].args[a]]++;
    }
    for (int o = 0; o < m->noutputs; o++)
        readers[m->outputs[o]]++;
    for (ValueId u = 0; u < n; u++) {
        const Node *nd = &m->nodes[u];
        if (nd->op != OP_MAXPOOL2D && nd->op != OP_AVGPOOL2D && nd->op != OP_SUMPOOL2D) continue;
        ValueId x = nd->args[0];
        PoolGeom q = pool_geom(m, nd);
        if (m->nodes[x].op == OP_NEURON && region[x] < 0 && readers[x] == 1 && g.needs[x] &&
            pool_tiles(&q) && lw->vs[x].layout == LY_FULL && lw->vs[u].layout == LY_FULL)
            g.pool_of[x] = u;
    }
    /* gradient buffers: the value's layout, f32 */
    for (ValueId v = 0; v < n; v++) {
        const Node *nd = &m->nodes[v];
        if (!g.needs[v] || nd->op == OP_FLATTEN || nd->op == OP_SEQUENCE ||
            is_step_readout(nd->op) || g.pool_of[v] >= 0)
            continue;
        const VStore *vs = &lw->vs[v];
        if (vs->layout != LY_FULL && vs->layout != LY_STATIC && vs->layout != LY_INPUT &&
            vs->layout != LY_INPUT_STEP)
            die("kir: value %d needs a gradient but has no buffer of its own", (int)v);
        bool is_steps = vs->layout == LY_FULL || vs->layout == LY_INPUT_STEP;
        KSize size = {is_steps ? lw->T * vs->numel : vs->numel, 0};
        g.gbuf[v] = add_buf(lw, arena_printf(&p->arena, "%s.grad", value_name(lw, v)), KT_F32, size,
                            KB_TEMP, -1, -1);
        p->bufs[g.gbuf[v]].is_written_first = true;
    }
    for (int k = 0; k < m->noutputs; k++) {
        ValueId v = m->outputs[k];
        const Node *nd = &m->nodes[v];
        /* as the output: [B][n], or [B][T][n] for one of every step */
        int64_t numel =
            type_numel(&nd->type) * (nd->type.has_time && !is_step_readout(nd->op) ? lw->T : 1);
        tr->out_grad[k] = add_buf(lw, arena_printf(&p->arena, "%s.grad", value_name(lw, v)), KT_F32,
                                  (KSize){numel, 0}, KB_TEMP, -1, -1);
        p->bufs[tr->out_grad[k]].is_written_first = true;
    }
    /* outputs that are values themselves: their gradients first */
    for (int o = 0; o < m->noutputs; o++) {
        ValueId v = m->outputs[o];
        const Node *nd = &m->nodes[v];
        if (g.needs[v] && !is_step_readout(nd->op) && nd->op != OP_SEQUENCE)
            grad_direct_output(&g, v, o);
    }
    /* the grad nodes in order: each value's backward step where its gradient is complete; a
     * recurrent region's steps together, ir_schedule_order's range of it (contiguous) */
    for (int k = n; k < tm->nnodes; k++) {
        if (tm->nodes[k].op != OP_GRAD) continue; /* grad_weight: the step before gives it */
        ValueId v = tm->nodes[k].args[0];
        const Node *nd = &m->nodes[v];
        if (region[v] >= 0) {
            int at = 0;
            while (sched[at] != v)
                at++;
            int lo = at, hi = at;
            while (lo > 0 && region[sched[lo - 1]] == region[v])
                lo--;
            while (hi + 1 < n && region[sched[hi + 1]] == region[v])
                hi++;
            grad_region(&g, sched, lo, hi);
            while (k + 1 < tm->nnodes && (tm->nodes[k + 1].op != OP_GRAD ||
                                          region[tm->nodes[k + 1].args[0]] == region[v]))
                k++;
            continue;
        }
        if (g.gbuf[v] >= 0 && !g.written[v]) {
            /* nothing reads it: its gradient is zero (a buffer written whole) */
            zero_kernel(lw, v, g.gbuf[v], "backward: no reader, a zero gradient");
            g.written[v] = true;
        }
        switch (nd->op) {
        case OP_MEAN:
        case OP_COUNT:
        case OP_LAST:
        case OP_MAX:
        case OP_SEQUENCE:
            for (int o = 0; o < m->noutputs; o++)
                if (m->outputs[o] == v) grad_readout(&g, v, o);
            break;
        case OP_NEURON:
            grad_neuron(&g, v);
            break;
        case OP_DENSE:
            grad_dense(&g, v);
            break;
        case OP_CONV2D:
        case OP_CONV1D:
            grad_conv(&g, v);
            break;
        case OP_MAXPOOL2D:
        case OP_AVGPOOL2D:
        case OP_SUMPOOL2D:
            grad_pool(&g, v);
            break;
        case OP_BATCHNORM:
            grad_batchnorm(&g, v);
            break;
        case OP_DELAY:
            grad_delay(&g, v);
            break;
        case OP_ADD:
        case OP_SUB:
        case OP_MUL:
        case OP_SCALE:
            grad_elementwise(&g, v);
            break;
        default:
            break; /* flatten (a view), inputs */
        }
    }
    defer_weight_grads(p, tr);
    remat_first_layers(lw, tr);
    tr->input_grad = arena_alloc(&p->arena, ((size_t)m->ninputs + 1) * sizeof(int));
    tr->ninput_first = p->nkernels;
    for (int k = 0; k < m->ninputs; k++)
        tr->input_grad[k] = g.gbuf[m->inputs[k]];
    if (tr->has_input_grads) {
        bool *is_only = arena_alloc(&lw->scratch, ((size_t)p->nbufs + 1) * sizeof(bool));
        for (ValueId v = 0; v < n; v++)
            if (g.gbuf[v] >= 0 && !needs_w[v]) is_only[g.gbuf[v]] = true;
        tr->ninput_first = split_input_kernels(p, tr, is_only);
    }
}
