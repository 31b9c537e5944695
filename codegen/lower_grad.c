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
 * zero inputs skipped: a spike-fed layer's weight gradient is event-driven), db the rows' sum.
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
} G;

/* ---- what it differentiates ---- */

static bool
is_supported_op(Op op)
{
    switch (op) {
    case OP_INPUT:
    case OP_POISSON:
    case OP_FLATTEN:
    case OP_DENSE:
    case OP_NEURON:
    case OP_MEAN:
    case OP_COUNT:
    case OP_LAST:
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_SCALE:
        return true;
    default:
        return false;
    }
}

const char *
grad_problem(const Module *m, ValueId *where)
{
    for (ValueId v = 0; v < m->nnodes; v++) {
        const Node *n = &m->nodes[v];
        *where = v;
        if (!is_supported_op(n->op))
            return arena_printf((Arena *)&m->arena,
                                "compiled training does not differentiate %s yet (dense, neuron "
                                "layers, add, sub, mul, scale, flatten, mean, count and last "
                                "readouts; --backend=interp trains every layer)",
                                node_op_name(m, n));
        if (n->op == OP_NEURON) {
            SurrogateFn sg;
            char why[256];
            if (!neuron_surrogate(m->neurons[n->neuron], &sg, why, sizeof why))
                return arena_strdup((Arena *)&m->arena, why);
            for (ValueId u = 0; u < m->nnodes; u++)
                if (m->nodes[u].op == OP_STATE && m->nodes[u].args[0] == v)
                    return "compiled training does not differentiate state probes yet";
        }
        if (n->op == OP_DENSE && m->nodes[n->args[0]].type.dtype == DT_I8)
            return "compiled training does not differentiate -1/0/1 spikes";
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
    KStmt *fj =
        loop(lw, top(lw), "j", bin(lw, KB_MUL, kx_kind(p, KX_BATCH), ci(lw, numel)), true, &jv);
    fj->is_lanes = true;
    KExpr *og = kx_load(p, g->tr->out_grad[k], jv);
    KStmt *ft = loop(lw, body(fj), "t", ci(lw, lw->T), false, &tv);
    Pos ps = {0};
    ps.j = jv;
    ps.jn = numel;
    ps.t = tv;
    Cur c = body(ft);
    switch (n->op) {
    case OP_COUNT:
        gadd(g, c, x, &ps, og, first);
        break;
    case OP_MEAN:
        gadd(g, c, x, &ps, bin(lw, KB_DIV, og, kx_const(p, KT_F32, lw->T)), first);
        break;
    case OP_LAST: {
        KStmt *i = s_if(lw, c, bin(lw, KB_EQ, tv, ci(lw, lw->T - 1)));
        gadd(g, body(i), x, &ps, og, first);
        if (first) /* the other steps get +0 stored: the buffer is written whole */
            gadd(g, els(i), x, &ps, zero(lw), true);
        break;
    }
    default:
        unreachable();
    }
    end_kernel(lw);
}

/* ---- neuron layers ---- */

/* The adjoint locals of one neuron step: states, lets, the spike variable, the input, and the
 * output expression's */
typedef struct Adj {
    int *st, *lc;
    int sp, in, out;
} Adj;

/* A(var) = A(var) + e */
static void
adj_add(Lower *lw, Cur c, int a, KExpr *e)
{
    s_assign(lw, c, a, bin(lw, KB_ADD, var(lw, a), e));
}

static bool
is_param_only(const NExpr *e)
{
    switch (e->kind) {
    case NX_NUM:
    case NX_PARAM:
        return true;
    case NX_STATE:
    case NX_LOCAL:
    case NX_INPUT:
    case NX_SPIKE:
        return false;
    default:
        break;
    }
    for (int i = 0; i < nexpr_arity(e); i++)
        if (!is_param_only(e->args[i])) return false;
    return true;
}

/* Emits A += a * d(e)/d(each variable), e read through nl (the locals holding the values before
 * the statement): interp_grad's backprop, the same operations in the same order. */
static void
backprop(Lower *lw, Cur c, const NLower *nl, const NExpr *e, KExpr *a, const Adj *A)
{
    KProgram *p = lw->p;
    if (is_param_only(e)) return;
    const NExpr *x0 = nexpr_arity(e) > 0 ? e->args[0] : NULL;
    const NExpr *x1 = nexpr_arity(e) > 1 ? e->args[1] : NULL;
    KExpr *f32one = kx_const(p, KT_F32, 1);
    switch (e->kind) {
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
            if (!is_param_only(x1))
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
        if (is_param_only(x0)) {
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
            if (!is_param_only(x1))
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
            if (is_param_only(x0)) {
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
    int ns = nd->nstates, nl_ = nd->nlocals, nst = nd->nstmts;
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
    KExpr *jv, *uv;
    KStmt *fj =
        loop(lw, top(lw), "j", bin(lw, KB_MUL, kx_kind(p, KX_BATCH), ci(lw, numel)), true, &jv);
    fj->is_lanes = true;
    Cur c = body(fj);
    NCopy cp;
    neuron_copy(lw, n, "", &cp);
    NLower nl = cp.nl;
    /* the adjoints carried from step t + 1 to step t: states, lets, spike */
    Adj A = {arena_alloc(&p->arena, (size_t)(ns + 1) * sizeof(int)),
             arena_alloc(&p->arena, (size_t)(nl_ + 1) * sizeof(int)), -1, -1, -1};
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
    Pos ps = {0};
    ps.j = jv;
    ps.jn = numel;
    /* a static input's gradient: every step's added to what its buffer holds, stored after */
    int gsum = -1;
    if (needs_x && is_static_x) {
        gsum = local(lw, "d_x", KT_F32);
        s_assign(lw, c, gsum, first ? zero(lw) : gload(g, x, &ps));
    }
    /* the forward once more, each step's states kept before it runs: [T][ncarry][B*numel] (a
     * neuron's values side by side in memory, as its SIMD lanes load them) */
    KExpr *BN = bin(lw, KB_MUL, kx_kind(p, KX_BATCH), ci(lw, numel));
    int hist = scratch_buf_sized(lw, arena_printf(&p->arena, "%s.states", value_name(lw, v)),
                                 KT_F32, (KSize){(int64_t)lw->T * cp.ncarry * numel, 0});
    for (int k = 0; k < cp.ncarry; k++)
        s_assign(lw, c, cp.carry[k], cp.init[k]);
    KExpr *sv;
    KStmt *fs = loop(lw, c, "s", ci(lw, lw->T), false, &sv);
    for (int k = 0; k < cp.ncarry; k++)
        s_store(lw, body(fs), hist,
                bin(lw, KB_ADD,
                    bin(lw, KB_MUL,
                        bin(lw, KB_ADD, bin(lw, KB_MUL, sv, ci(lw, cp.ncarry)), ci(lw, k)), BN),
                    jv),
                var(lw, cp.carry[k]));
    Pos pss = ps;
    pss.t = sv;
    s_assign(lw, body(fs), nl.input, to(lw, KT_F32, vload(lw, x, &pss)));
    neuron_step(lw, body(fs), &nl);
    /* steps t = T-1 .. 0 */
    KStmt *fu = loop(lw, c, "u", ci(lw, lw->T), false, &uv);
    Cur cu = body(fu);
    int tl = local(lw, "t", KT_I64);
    s_assign(lw, cu, tl, bin(lw, KB_SUB, ci(lw, lw->T - 1), uv));
    KExpr *tv = var(lw, tl);
    /* the states before step t, as the forward pass left them (kept by the first loop) */
    for (int k = 0; k < cp.ncarry; k++)
        s_assign(
            lw, cu, cp.carry[k],
            kx_load(p, hist,
                    bin(lw, KB_ADD,
                        bin(lw, KB_MUL,
                            bin(lw, KB_ADD, bin(lw, KB_MUL, tv, ci(lw, cp.ncarry)), ci(lw, k)), BN),
                        jv)));
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
    KExpr *gy = gload(g, v, &pt);
    s_assign(lw, cu, A.in, zero(lw));
    if (cp.has_output)
        s_assign(lw, cu, a_out, gy);
    else
        adj_add(lw, cu, A.sp, gy);
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
    if (gsum >= 0) {
        ValueId r = root(lw, x);
        s_store(lw, c, g->gbuf[r], vindex(lw, r, &ps), var(lw, gsum));
    }
    end_kernel(lw);
}

/* ---- dense layers ---- */

/* the weight gradient's register block: inputs side by side, each a tile of DW_LANES outputs
 * (f32: 4 x 2 AVX2 registers of accumulators, the row's dy vector and the inputs' broadcasts) */
enum { DW_INPUTS = 4, DW_LANES = 16 };

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

/* dL/dx[row, i0 .. i0 + lanes) = (what it holds) + sum over o of dy[row, o] W[o, i] */
static void
dense_data_tile(Lower *lw, Cur c, KExpr *i0, int lanes, const void *ctx)
{
    const DenseGrad *d = ctx;
    G *g = d->g;
    ValueId r = root(lw, d->x);
    Pos px = d->row;
    px.i = i0;
    int t = tile(lw, "dx", lanes);
    if (d->first)
        s_tile(lw, c, KS_VSET, t, -1, NULL, kx_const(lw->p, KT_F64, 0));
    else
        s_tile(lw, c, KS_VLOAD, t, g->gbuf[r], vindex(lw, r, &px), NULL);
    KExpr *o;
    KStmt *fo = loop(lw, c, "o", ci(lw, d->O), false, &o);
    Pos py = d->row;
    py.i = o;
    tile_fma(lw, body(fo), t, gload(g, d->v, &py), d->wrows,
             bin(lw, KB_ADD, bin(lw, KB_MUL, o, ci(lw, d->K)), i0), false);
    KStmt *st = s_tile(lw, c, KS_VSTORE, t, g->gbuf[r], vindex(lw, r, &px), NULL);
    st->stride = 1;
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

/* dW[o0 .. o0 + lanes, i .. i + ni) = sum over rows of x[row, i] dy[row, o] (zero inputs
 * skipped): ni inputs side by side, so that each row's dy vector, loaded once, feeds ni tiles */
static void
dense_weight_tile(Lower *lw, Cur c, KExpr *o0, int lanes, const void *ctx)
{
    const DenseGrad *d = ctx;
    G *g = d->g;
    int ni = d->ni, t[DW_INPUTS];
    KExpr *rv;
    KStmt *fr = dw_tiles(lw, c, d, lanes, t, &rv);
    Pos py = row_pos(lw, d->v, rv, o0);
    ValueId rvv = root(lw, d->v);
    KExpr *gi = vindex(lw, rvv, &py);
    for (int k = 0; k < ni; k++) {
        Pos px = row_pos(lw, d->x, rv, bin(lw, KB_ADD, d->row.i, ci(lw, k)));
        tile_fma(lw, body(fr), t[k], to(lw, KT_F32, vload(lw, d->x, &px)), g->gbuf[rvv], gi,
                 d->is_sparse);
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
    int ni = d->ni, t[DW_INPUTS];
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
grad_dense(G *g, ValueId v)
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
    const char *name = value_name(lw, v);
    int nt = tile_lanes(lw, DENSE_NT);
    /* dL/dx, where a weight's gradient flows through x */
    if (g->needs[x]) {
        if (lw->is_static[v] != lw->is_static[x])
            die("kir: dense gradient between a static and a per-step value");
        d.first = claim(g, x);
        begin_kernel(lw, v, describe(lw, v, "backward: dL/dx = dL/dy W, rows in parallel"), false);
        lw->k.name = arena_printf(&p->arena, "grad_x_%s", name);
        KExpr *rv;
        KStmt *fr = loop(lw, top(lw), "r", rows_of(lw, v), true, &rv);
        d.row = row_pos(lw, v, rv, NULL);
        for_tiles(lw, body(fr), d.K, nt, dense_data_tile, &d);
        end_kernel(lw);
    }
    /* dW: parallel over inputs i, tiles of outputs, the rows in order */
    d.dw = add_buf(lw, arena_printf(&p->arena, "%s.grad", m->weights[w].name), KT_F32,
                   (KSize){0, m->weights[w].numel}, KB_TEMP, -1, -1);
    p->bufs[d.dw].is_written_first = true;
    g->tr->weight_grad[w] = d.dw;
    /* blocks of DW_INPUTS inputs (outputs, over spikes) in parallel, then those left over one at
     * a time */
    bool by_inputs = d.is_sparse && lw->vs[root(lw, x)].layout != LY_NONE;
    int64_t nout = by_inputs ? d.O : d.K; /* what the parallel loop runs over */
    int64_t nblocks = nout / DW_INPUTS, done = nblocks * DW_INPUTS;
    int wl = lw->acc == KT_F32 ? DW_LANES : DW_LANES / 2;
    for (int part = 0; part < 2; part++) {
        int64_t n_iter = part == 0 ? nblocks : nout - done;
        if (n_iter == 0) continue;
        const char *how =
            by_inputs ? (part == 0 ? "backward: dW = dL/dy^T x over spikes, blocks of outputs in "
                                     "parallel, inputs as lanes, rows in order"
                                   : "backward: dW over spikes, the outputs left over")
                      : (part == 0 ? "backward: dW = dL/dy^T x, blocks of inputs in parallel, rows "
                                     "in order; zero inputs skipped"
                                   : "backward: dW, the inputs left over");
        begin_kernel(lw, v, describe(lw, v, how), false);
        lw->k.name = arena_printf(&p->arena, "grad_w%s_%s", part ? "_tail" : "", name);
        KExpr *iv;
        KStmt *fi = loop(lw, top(lw), "ib", ci(lw, n_iter), true, &iv);
        d.rows = rows_of(lw, v);
        memset(&d.row, 0, sizeof d.row);
        d.ni = part == 0 ? DW_INPUTS : 1;
        d.row.i =
            part == 0 ? bin(lw, KB_MUL, iv, ci(lw, DW_INPUTS)) : bin(lw, KB_ADD, iv, ci(lw, done));
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

static void
grad_elementwise(G *g, ValueId v)
{
    Lower *lw = g->lw;
    KProgram *p = lw->p;
    const Node *n = &lw->m->nodes[v];
    ValueId a = n->args[0], bb = n->nargs > 1 ? n->args[1] : -1;
    bool na = g->needs[a], nb = bb >= 0 && g->needs[bb];
    if (!na && !nb) return;
    begin_kernel(lw, v, describe(lw, v, "backward: elementwise"), false);
    lw->k.name = arena_printf(&p->arena, "grad_%s", lw->k.name);
    int64_t numel = lw->vs[v].numel;
    KExpr *jv;
    KStmt *fj = loop(lw, top(lw), "j", bin(lw, KB_MUL, rows_of(lw, v), ci(lw, numel)), true, &jv);
    fj->is_lanes = true;
    Cur c = body(fj);
    Pos ps = row_pos(lw, v, bin(lw, KB_DIV, jv, ci(lw, numel)), bin(lw, KB_REM, jv, ci(lw, numel)));
    KExpr *gy = gload(g, v, &ps);
    /* claims in the interpreter's order: a before b (add(x, x) adds twice) */
    bool fa = na ? claim(g, a) : false;
    bool fb = nb ? claim(g, bb) : false;
    switch (n->op) {
    case OP_ADD:
        if (na) gadd(g, c, a, &ps, gy, fa);
        if (nb) gadd(g, c, bb, &ps, gy, fb && !(na && root(lw, a) == root(lw, bb)));
        break;
    case OP_SUB:
        if (na) gadd(g, c, a, &ps, gy, fa);
        if (nb)
            gadd(g, c, bb, &ps, kx_un(p, KU_NEG, gy), fb && !(na && root(lw, a) == root(lw, bb)));
        break;
    case OP_MUL: {
        KExpr *va = to(lw, KT_F32, vload(lw, a, &ps)), *vb = to(lw, KT_F32, vload(lw, bb, &ps));
        if (na) gadd(g, c, a, &ps, bin(lw, KB_MUL, gy, vb), fa);
        if (nb)
            gadd(g, c, bb, &ps, bin(lw, KB_MUL, gy, va),
                 fb && !(na && root(lw, a) == root(lw, bb)));
        break;
    }
    case OP_SCALE: {
        double factor = (double)(float)node_attr_f(n, "factor"),
               divisor = (double)(float)node_attr_f(n, "divisor");
        KExpr *e = gy;
        if (divisor != 1) e = bin(lw, KB_DIV, e, kx_const(p, KT_F32, divisor));
        if (factor != 1) e = bin(lw, KB_MUL, e, kx_const(p, KT_F32, factor));
        gadd(g, c, a, &ps, e, fa);
        break;
    }
    default:
        unreachable();
    }
    end_kernel(lw);
}

/* ---- the pass ---- */

void
lower_grad(Lower *lw, const ValueId *topo, KTrain *tr)
{
    const Module *m = lw->m;
    KProgram *p = lw->p;
    int n = m->nnodes;
    G g = {lw, tr, arena_alloc(&lw->scratch, ((size_t)n + 1) * sizeof(int)),
           arena_alloc(&lw->scratch, ((size_t)n + 1) * sizeof(bool)),
           arena_alloc(&lw->scratch, ((size_t)n + 1) * sizeof(bool))};
    tr->out_grad = arena_alloc(&p->arena, ((size_t)m->noutputs + 1) * sizeof(int));
    tr->weight_grad = arena_alloc(&p->arena, ((size_t)m->nweights + 1) * sizeof(int));
    for (int w = 0; w < m->nweights; w++)
        tr->weight_grad[w] = -1;
    /* which values a weight's gradient flows through: those that depend on a weight */
    for (int k = 0; k < n; k++) {
        ValueId v = topo[k];
        const Node *nd = &m->nodes[v];
        g.needs[v] = op_info(nd->op)->nweights > 0;
        for (int a = 0; a < nd->nargs; a++)
            g.needs[v] = g.needs[v] || g.needs[nd->args[a]];
        g.gbuf[v] = -1;
    }
    /* gradient buffers: the value's layout, f32 */
    for (ValueId v = 0; v < n; v++) {
        const Node *nd = &m->nodes[v];
        if (!g.needs[v] || nd->op == OP_FLATTEN || is_step_readout(nd->op)) continue;
        const VStore *vs = &lw->vs[v];
        if (vs->layout != LY_FULL && vs->layout != LY_STATIC)
            die("kir: value %d needs a gradient but has no buffer of its own", (int)v);
        KSize size = {vs->layout == LY_FULL ? lw->T * vs->numel : vs->numel, 0};
        g.gbuf[v] = add_buf(lw, arena_printf(&p->arena, "%s.grad", value_name(lw, v)), KT_F32, size,
                            KB_TEMP, -1, -1);
        p->bufs[g.gbuf[v]].is_written_first = true;
    }
    for (int k = 0; k < m->noutputs; k++) {
        ValueId v = m->outputs[k];
        int64_t numel = type_numel(&m->nodes[v].type);
        tr->out_grad[k] = add_buf(lw, arena_printf(&p->arena, "%s.grad", value_name(lw, v)), KT_F32,
                                  (KSize){numel, 0}, KB_TEMP, -1, -1);
        p->bufs[tr->out_grad[k]].is_written_first = true;
    }
    for (int k = n - 1; k >= 0; k--) {
        ValueId v = topo[k];
        const Node *nd = &m->nodes[v];
        if (!g.needs[v]) continue;
        if (g.gbuf[v] >= 0 && !g.written[v]) {
            /* nothing reads it: its gradient is zero (a buffer written whole) */
            begin_kernel(lw, v, describe(lw, v, "backward: no reader, a zero gradient"), false);
            lw->k.name = arena_printf(&p->arena, "grad_zero_%s", value_name(lw, v));
            KExpr *iv;
            KStmt *f = loop(lw, top(lw), "e", ci(lw, p->bufs[g.gbuf[v]].size.per_batch), true, &iv);
            f->is_lanes = true;
            s_store(lw, body(f), g.gbuf[v], iv, zero(lw));
            end_kernel(lw);
            g.written[v] = true;
        }
        switch (nd->op) {
        case OP_MEAN:
        case OP_COUNT:
        case OP_LAST:
            for (int o = 0; o < m->noutputs; o++)
                if (m->outputs[o] == v) grad_readout(&g, v, o);
            break;
        case OP_NEURON:
            grad_neuron(&g, v);
            break;
        case OP_DENSE:
            grad_dense(&g, v);
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
}
