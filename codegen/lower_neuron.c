/* Lowering of neuron layers: the scan over time with state in locals, its equations (NExpr),
 * refractory counters, spike counts, fused pooling and fused readouts; readouts and
 * sequence outputs. */
#include "codegen/lower.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- neurons ---- */

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
    bool is_learned = e->kind == NX_PARAM && nl->node && node_learns(nl->node, e->idx);
    if (e->kind == NX_NUM || (e->kind == NX_PARAM && !is_learned) || (na > 0 && all_folded))
        return (NT){kx_const(lw->p, KT_F32, nexpr_fold(e, nl->params)), true};
    KProgram *p = lw->p;
    KExpr *r = NULL;
    switch (e->kind) {
    case NX_PARAM: /* learned: its weight, read at run time */
        r = kx_load(p, node_param_weight(lw->m, nl->node, e->idx), ci(lw, 0));
        break;
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

KExpr *
nexpr(Lower *lw, const NLower *nl, const NExpr *e)
{
    return nlower(lw, nl, e).e;
}

bool
nexpr_is_fixed(const NLower *nl, const NExpr *e)
{
    switch (e->kind) {
    case NX_NUM:
        return true;
    case NX_PARAM:
        return !nl->node || !node_learns(nl->node, e->idx);
    case NX_STATE:
    case NX_LOCAL:
    case NX_INPUT:
    case NX_SPIKE:
        return false;
    default:
        break;
    }
    for (int i = 0; i < nexpr_arity(e); i++)
        if (!nexpr_is_fixed(nl, e->args[i])) return false;
    return true;
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
void
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
    /* a training step reports no firing rates: no counters (the conv SNN's were 8 MB of its
     * arena at batch 64, written and never read) */
    if (lw->train) return;
    int buf = spike_count_buffer(lw, v, lw->vs[v].numel, lw->T);
    if (p->bufs[buf].is_accumulator) {
        /* the GPU: each step's spike into the thread's sum (cuda_gen.c), nothing else live across
         * the steps (a count local of the neuron's made ptxas spill around the double division's
         * slow-path call in the conv SNN's pooled scans) */
        s_count(lw, step, buf, jv, spike_one(lw, spike));
        return;
    }
    /* counted in a float where the count stays exact (at most T spikes): in SIMD lanes 8 floats
     * take one register where 8 int64 take two, and a blocked scan keeps it between steps in L1
     * (llvm_gen.c scan_plan) */
    KType ct = lw->T <= (1 << 24) ? KT_F32 : KT_I64;
    int cnt = local(lw, "nspikes", ct);
    KExpr *one = ct == KT_F32 ? kx_select(p, bin(lw, KB_NE, spike, kx_const(p, KT_F32, 0)),
                                          kx_const(p, KT_F32, 1), kx_const(p, KT_F32, 0))
                              : spike_one(lw, spike);
    if (ft) {
        /* before the t loop: c's last statement is ft */
        KStmt *init = st_new(lw, KS_ASSIGN);
        init->var = cnt;
        init->a = kx_const(p, ct, 0);
        (*c.arr)[*c.n - 1] = init;
        put(lw, c, ft);
    } else {
        KStmt *first = s_if(lw, c, bin(lw, KB_EQ, kx_kind(p, KX_STEP), ci(lw, 0)));
        s_assign(lw, body(first), cnt, kx_const(p, ct, 0));
        s_assign(lw, els(first), cnt, to(lw, ct, kx_load(p, buf, jv)));
        /* the reload must come before the step's statements: move it to the front of c */
        KStmt **arr = *c.arr;
        memmove(arr + 1, arr, (size_t)(*c.n - 1) * sizeof *arr);
        arr[0] = first;
    }
    s_assign(lw, step, cnt, bin(lw, KB_ADD, var(lw, cnt), one));
    s_count(lw, c, buf, jv, to(lw, KT_I64, var(lw, cnt)));
}

void
neuron_copy(Lower *lw, const Node *n, const char *suffix, NCopy *cp)
{
    KProgram *p = lw->p;
    const NeuronDef *nd = lw->m->neurons[n->neuron];
    NLower nl = {nd, n, n->params, NULL, NULL, -1, -1, -1, -1};
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
void
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
    /* an input stored window by window (VStore.win_kh): the window's neuron e of sample b at
     * b*numel + e*per + jp % per, i.e. jp + (jp / per)*(K - 1)*per + e*per */
    ValueId x = n->args[0];
    if (m->nodes[x].op == OP_BATCHNORM && lw->vs[x].layout == LY_INLINE) x = m->nodes[x].args[0];
    bool is_windows = lw->vs[x].win_kh != 0;
    if (is_windows)
        s_assign(lw, c, base,
                 bin(lw, KB_ADD, jp,
                     bin(lw, KB_MUL, bin(lw, KB_DIV, jp, ci(lw, per)), ci(lw, (K - 1) * per))));
    else
        s_assign(lw, c, base,
                 bin(lw, KB_ADD, bin(lw, KB_MUL, jp, ci(lw, KW)),
                     bin(lw, KB_MUL, bin(lw, KB_DIV, jp, ci(lw, OW)), ci(lw, (KH - 1) * W))));
    s_assign(lw, c, chv, bin(lw, KB_REM, bin(lw, KB_DIV, jp, ci(lw, OH * OW)), ci(lw, C)));
    /* one counter per window: the run functions sum every counter of the layer */
    int cbuf = spike_count_buffer(lw, v, per, (int64_t)lw->T * K);
    bool is_total = p->bufs[cbuf].is_accumulator; /* the GPU's: as in count_spikes */
    /* a float count where it stays exact, as count_spikes */
    KType ct = (int64_t)lw->T * K <= (1 << 24) ? KT_F32 : KT_I64;
    int cnt = is_total ? -1 : local(lw, "nspikes", ct);
    if (!is_total) s_assign(lw, c, cnt, kx_const(p, ct, 0));
    NCopy *cp = arena_alloc(&p->arena, (size_t)K * sizeof *cp);
    int *jl = arena_alloc(&p->arena, (size_t)K * sizeof *jl);
    Pos *ps = arena_alloc(&p->arena, (size_t)K * sizeof *ps);
    for (int e = 0; e < K; e++) {
        const char *sfx = arena_printf(&p->arena, ".%d", e);
        neuron_copy(lw, n, sfx, &cp[e]);
        jl[e] = local(lw, arena_printf(&p->arena, "j%s", sfx), KT_I64);
        s_assign(
            lw, c, jl[e],
            bin(lw, KB_ADD, var(lw, base), ci(lw, is_windows ? e * per : (e / KW) * W + e % KW)));
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
    if (!is_static_input) batchnorm_hoist(lw, c, n->args[0], &ps[0]);
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
        KExpr *spiked = bin(lw, KB_NE, var(lw, cp[e].nl.spike), kx_const(p, KT_F32, 0));
        if (is_total)
            s_count(lw, step, cbuf, jp, spike_one(lw, var(lw, cp[e].nl.spike)));
        else
            s_assign(lw, step, cnt,
                     bin(lw, KB_ADD, var(lw, cnt),
                         kx_select(p, spiked, kx_const(p, ct, 1), kx_const(p, ct, 0))));
    }
    lw->hoisted_bn = NULL;
    KExpr *pooled = var(lw, pv);
    if (pn->op == OP_AVGPOOL2D)
        pooled = bin(lw, KB_DIV, pooled, kx_const(p, KT_F64, (double)K));
    Pos pp = {0};
    pp.t = tv;
    pp.j = jp;
    pp.jn = per;
    vstore(lw, step, pool, &pp, to(lw, KT_F32, pooled));
    if (!is_total) s_store(lw, c, cbuf, jp, to(lw, KT_I64, var(lw, cnt)));
    kernel_add_node(lw, pool);
}

/* The readout ro of neuron layer v (count, mean, last, max: reduced over t into obuf[j] = [B][n];
 * sequence: obuf[b][t][i]) from the scan's value at each step, as lower_readout and lower_sequence
 * compute it from the layer's buffer: the value through the buffer's element type, then f64. c is
 * the neuron's body, ft its t loop (c's last statement), step the loop's body; fused_readout_end
 * stores the reduced value once everything around the loop is in place. */
static int
fused_readout(Lower *lw, ValueId v, ValueId ro, int obuf, Cur c, Cur step, KStmt *ft, KExpr *jv,
              KExpr *value, bool is_spike)
{
    KProgram *p = lw->p;
    const Node *rn = &lw->m->nodes[ro];
    int64_t numel = lw->vs[v].numel;
    /* the spike local only ever holds -1, 0 or 1 (neuron_step), which every element type holds:
     * through it is the value itself (the LIF scan's f32 spikes: 3 instructions a vector less) */
    KExpr *x = is_spike ? to(lw, KT_F64, value)
                        : to(lw, KT_F64, to(lw, ktype_of(lw->m->nodes[v].type.dtype), value));
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
void
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
        else
            batchnorm_hoist(lw, c, n->args[0], &ps);
        KExpr *tv;
        ft = loop(lw, c, "t", ci(lw, lw->T), false, &tv);
        ps.t = tv;
        step = body(ft);
    }
    lw->pre = step;
    if (!is_static_input)
        s_assign(lw, step, nl.input, as_f32(lw, vload(lw, n->args[0], &ps)));
    lw->hoisted_bn = NULL;
    lw->pre = (Cur){NULL, NULL};
    neuron_step(lw, step, &nl);
    KExpr *value = has_output ? var(lw, nl.out) : var(lw, nl.spike);
    int acc = -1;
    if (ro < 0)
        vstore(lw, step, v, &ps, value);
    else
        acc = fused_readout(lw, v, ro, obuf, c, step, ft, jv, value, !has_output);
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
int
neuron_ncarry(const NeuronDef *nd, bool *has_refractory)
{
    bool r = nd->has_refractory;
    for (int s = 0; s < nd->nstmts; s++)
        r = r || nd->stmts[s].kind == NS_REFRACTORY;
    *has_refractory = r;
    return nd->nstates + nd->nlocals + 1 + (r ? 1 : 0);
}

/* ---- readouts and outputs ---- */

bool
is_step_readout(Op op)
{
    return op == OP_COUNT || op == OP_MEAN || op == OP_LAST || op == OP_MAX;
}

/* count/mean/last/max: acc over t in f64 (max and last keep the value), out[b][i] = (f32) acc */
void
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
void
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
