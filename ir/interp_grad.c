/* The reference backward pass: surrogate-gradient backpropagation through time over the
 * interpreter's forward pass (interp.c, run with every step kept). It mirrors the forward's order
 * exactly reversed (for t from T - 1 down to 0, nodes in reverse topological order), so recurrence
 * through delays, state probes and static values need nothing special: a static value's gradient
 * collects every step's into one slot and its own backward runs once, at t = 0. A neuron layer is
 * differentiated by reverse mode over its program: the step is run again from the state kept before
 * it, each statement's inputs noted, then the statements are walked backwards with an adjoint per
 * state, local, the spike and the input; `fire` goes through the neuron's surrogate. Like the
 * forward it must stay obvious: the oracle gradient every training backend is checked against. */
#include "ir/interp_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct Grad {
    Interp ip;
    double **g;  /* per node with a time axis: [T or 1 (static)][chunk][numel], dLoss/dvalue */
    double **rg; /* per step readout: [chunk][numel] */
    double *const *input_grads, *const *weight_grads;
    double *scratch; /* [max numel] */
    /* per neuron layer with learned parameters: [chunk][numel][nparams], each neuron's share of
     * each learned parameter's gradient, summed over its steps (from the last) in double; added
     * to the weight's gradient neuron by neuron in order after the pass (learned_flush) */
    double **pacc;
    /* float32 mode: the compiled trainer's order, the batch in one pass: the dense backward's
     * sums (dense_backward_f32), the nodes in ir_schedule_order's order, each outside a
     * recurrence all its steps at once, each recurrent region step by step (region[v] >= 0; a
     * dense layer's dW after its region's loop) */
    bool compiled_order;
    int *region;
} Grad;

/* the gradient slot of value v at step t (a static value keeps one for every step) */
static double *
gslot(const Grad *G, ValueId v, int t)
{
    const NodeRun *r = &G->ip.nodes[v];
    int s = r->is_static ? 0 : t;
    return G->g[v] + (size_t)s * (size_t)G->ip.chunk * (size_t)r->numel;
}

static void
acc(const Interp *ip, double *dst, double x)
{
    *dst = ip_rnd(ip, *dst + x);
}

/* ---- neuron layers ---- */

typedef struct Adj {
    double *st, *lc; /* per state and local */
    double sp, in;   /* the spike variable, the input */
    double *pa;      /* per parameter: the learned ones' adjoints, summed in double */
} Adj;

/* adds a * d(e)/d(each variable) into A, e evaluated in context c */
static void
backprop(const Interp *ip, const CExpr *e, const NCtx *c, double a, Adj *A)
{
    double x, y, z;
    switch (e->kind) {
    case NX_NUM:
        return;
    case NX_PARAM: /* only a learned parameter is left unfolded */
        if (A->pa) A->pa[e->idx] += a;
        return;
    case NX_STATE:
        acc(ip, &A->st[e->idx], a);
        return;
    case NX_LOCAL:
        acc(ip, &A->lc[e->idx], a);
        return;
    case NX_INPUT:
        acc(ip, &A->in, a);
        return;
    case NX_SPIKE:
        acc(ip, &A->sp, a);
        return;
    case NX_NEG:
        backprop(ip, e->args[0], c, -a, A);
        return;
    case NX_NOT:
        return;
    case NX_BIN:
        switch ((NxBin)e->op) {
        case NB_ADD:
            backprop(ip, e->args[0], c, a, A);
            backprop(ip, e->args[1], c, a, A);
            return;
        case NB_SUB:
            backprop(ip, e->args[0], c, a, A);
            backprop(ip, e->args[1], c, -a, A);
            return;
        case NB_MUL: /* PyTorch: grad * other */
            x = interp_ceval(e->args[0], c);
            y = interp_ceval(e->args[1], c);
            backprop(ip, e->args[0], c, ip_rnd(ip, a * y), A);
            backprop(ip, e->args[1], c, ip_rnd(ip, a * x), A);
            return;
        case NB_DIV: /* PyTorch: grad / other; -grad * self / (other * other) */
            x = interp_ceval(e->args[0], c);
            y = interp_ceval(e->args[1], c);
            backprop(ip, e->args[0], c, ip_rnd(ip, a / y), A);
            if (e->args[1]->kind != NX_NUM)
                backprop(ip, e->args[1], c, ip_rnd(ip, ip_rnd(ip, -a * x) / ip_rnd(ip, y * y)), A);
            return;
        default:
            return; /* comparisons and logic: piecewise constant */
        }
    case NX_COND:
        backprop(ip, e->args[interp_ceval(e->args[0], c) != 0 ? 1 : 2], c, a, A);
        return;
    case NX_CALL: {
        x = interp_ceval(e->args[0], c);
        switch ((NFunc)e->op) {
        case NF_EXP:
            backprop(ip, e->args[0], c, ip_rnd(ip, a * interp_ceval(e, c)), A);
            return;
        case NF_LOG:
            backprop(ip, e->args[0], c, ip_rnd(ip, a / x), A);
            return;
        case NF_SQRT:
            backprop(ip, e->args[0], c, ip_rnd(ip, a / ip_rnd(ip, 2 * interp_ceval(e, c))), A);
            return;
        case NF_TANH:
            z = interp_ceval(e, c);
            backprop(ip, e->args[0], c, ip_rnd(ip, a * ip_rnd(ip, 1 - ip_rnd(ip, z * z))), A);
            return;
        case NF_SIGMOID:
            z = interp_ceval(e, c);
            backprop(ip, e->args[0], c, ip_rnd(ip, ip_rnd(ip, a * ip_rnd(ip, 1 - z)) * z), A);
            return;
        case NF_ABS: /* nothing flows at 0 */
            if (x != 0) backprop(ip, e->args[0], c, x > 0 ? a : -a, A);
            return;
        case NF_FLOOR:
            return;
        case NF_MIN:
        case NF_MAX: {
            y = interp_ceval(e->args[1], c);
            bool first = e->op == NF_MIN ? x <= y : x >= y;
            backprop(ip, e->args[first ? 0 : 1], c, a, A);
            return;
        }
        case NF_POW: { /* y x^(y - 1); x^y log x: pow and log as the float32 mode computes them */
            y = interp_ceval(e->args[1], c);
            double xy[2] = {x, ip_rnd(ip, y - 1)};
            backprop(ip, e->args[0], c,
                     ip_rnd(ip, a * ip_rnd(ip, y * nexpr_apply_call(NF_POW, xy, ip->is_f32))), A);
            if (e->args[1]->kind != NX_NUM)
                backprop(ip, e->args[1], c,
                         ip_rnd(ip, a * ip_rnd(ip, interp_ceval(e, c) *
                                                       nexpr_apply_call(NF_LOG, &x, ip->is_f32))),
                         A);
            return;
        }
        case NF_CLAMP: { /* the gradient passes on the closed interval, as torch.clamp's */
            y = interp_ceval(e->args[1], c);
            z = interp_ceval(e->args[2], c);
            if (x >= y && x <= z) backprop(ip, e->args[0], c, a, A);
            return;
        }
        case NF_SELECT:
            backprop(ip, e->args[x != 0 ? 1 : 2], c, a, A);
            return;
        case NF_FLOAT32:
            backprop(ip, e->args[0], c, a, A);
            return;
        case NF_COUNT_:
            break;
        }
        unreachable();
    }
    }
    unreachable();
}

/* the variable a statement writes, and its adjoint */
static double *
var_of(double *st, double *lc, const NStmt *s)
{
    return s->is_local ? &lc[s->var] : &st[s->var];
}

/* Step t of neuron layer v backwards. carry[j] holds, per neuron, the adjoints of its states,
 * locals and spike after step t (in: from step t + 1) and leaves them before step t (out). */
static void
neuron_backward(Grad *G, ValueId v, int t, double *carry, double *snap)
{
    Interp *ip = &G->ip;
    const Module *m = ip->m;
    const Node *n = &m->nodes[v];
    const NodeRun *r = &ip->nodes[v];
    const NeuronRun *nr = r->neuron;
    const NeuronDef *nd = nr->nd;
    int ns = nd->nstates, nl = nd->nlocals, nv = ns + nl + 1, nst = nd->nstmts;
    size_t nj = (size_t)ip->nb * (size_t)r->numel, cj = (size_t)ip->chunk * (size_t)r->numel;
    const double *x = ip_val(ip, n->args[0], t);
    double *gx = gslot(G, n->args[0], t);
    const double *gy = gslot(G, v, t);
    /* the state probes of this layer: their gradients are the states' after the step */
    int nprobes = 0;
    for (ValueId p = 0; p < m->nnodes; p++)
        nprobes += m->nodes[p].op == OP_STATE && m->nodes[p].args[0] == v;
    ValueId *probes = interp_alloc(ip, (size_t)nprobes, sizeof *probes);
    if (!probes) return;
    nprobes = 0;
    for (ValueId p = 0; p < m->nnodes; p++)
        if (m->nodes[p].op == OP_STATE && m->nodes[p].args[0] == v) probes[nprobes++] = p;
    for (size_t j = 0; j < nj; j++) {
        double *cv = carry + j * (size_t)nv;
        /* the step again, from what it started with, each statement's inputs noted */
        double *st = snap + (size_t)nst * (size_t)nv, *lc = st + ns;
        memcpy(st, nr->h_states + ((size_t)t * cj + j) * (size_t)ns, (size_t)ns * sizeof *st);
        memcpy(lc, nr->h_locals + ((size_t)t * cj + j) * (size_t)nl, (size_t)nl * sizeof *lc);
        double spike = nr->h_spike[(size_t)t * cj + j];
        NCtx c = {st, lc, x[j], spike, ip->is_f32};
        for (int s = 0; s < nst; s++) {
            double *sn = snap + (size_t)s * (size_t)nv;
            memcpy(sn, st, (size_t)(ns + nl) * sizeof *sn);
            sn[ns + nl] = c.spike;
            const NStmt *stm = &nd->stmts[s];
            const CExpr *e = nr->stmt_e[s];
            switch (stm->kind) {
            case NS_ASSIGN:
                *var_of(st, lc, stm) = interp_ceval(e, &c);
                break;
            case NS_FIRE:
                if (ip->smooth) {
                    double a = interp_ceval(e->args[0], &c), b = interp_ceval(e->args[1], &c);
                    bool up = e->op == NB_GE || e->op == NB_GT;
                    c.spike = surrogate_primitive(&nr->sg, up ? a - b : b - a);
                } else {
                    c.spike = interp_ceval(e, &c) != 0 ? 1.0 : 0.0;
                }
                break;
            case NS_RESET_TO:
                if (ip->smooth)
                    *var_of(st, lc, stm) =
                        c.spike * interp_ceval(e, &c) + (1 - c.spike) * *var_of(st, lc, stm);
                else if (c.spike != 0)
                    *var_of(st, lc, stm) = interp_ceval(e, &c);
                break;
            case NS_RESET_SUB: {
                double *var = var_of(st, lc, stm);
                *var = ip_rnd(ip, *var - ip_rnd(ip, c.spike * interp_ceval(e, &c)));
                break;
            }
            case NS_OUTPUT:
            case NS_REFRACTORY:
            case NS_FIRE_DOWN:
                break;
            }
        }
        /* the adjoints after the step: carried from step t + 1, plus what readers of this step's
         * output (the spike, or the output expression) and of its state probes give */
        Adj A = {cv, cv + ns, cv[ns + nl], 0,
                 G->pacc && G->pacc[v] ? G->pacc[v] + j * (size_t)nd->nparams : NULL};
        double a_out = 0;
        if (nr->has_output)
            a_out = gy[j];
        else
            acc(ip, &A.sp, gy[j]);
        for (int k = 0; k < nprobes; k++) {
            ValueId p = probes[k];
            int sv = ip->nodes[p].state_var;
            double gp = gslot(G, p, t)[j];
            if (sv >= 0)
                acc(ip, &A.st[sv], gp);
            else
                acc(ip, &A.lc[-1 - sv], gp);
        }
        for (int s = nst - 1; s >= 0; s--) {
            const double *sn = snap + (size_t)s * (size_t)nv;
            NCtx cs = {(double *)sn, (double *)sn + ns, x[j], sn[ns + nl], ip->is_f32};
            const NStmt *stm = &nd->stmts[s];
            const CExpr *e = nr->stmt_e[s];
            double *av =
                stm->kind == NS_FIRE || stm->kind == NS_OUTPUT ? NULL : var_of(A.st, A.lc, stm);
            switch (stm->kind) {
            case NS_ASSIGN: {
                double a = *av;
                *av = 0; /* overwritten: its old value reaches the result only through e */
                backprop(ip, e, &cs, a, &A);
                break;
            }
            case NS_FIRE: {
                double a = A.sp;
                A.sp = 0;
                double u =
                    ip_rnd(ip, interp_ceval(e->args[0], &cs) - interp_ceval(e->args[1], &cs));
                bool up = e->op == NB_GE || e->op == NB_GT;
                if (!up) u = -u;
                double gu = surrogate_grad(&nr->sg, a, u, ip->is_f32);
                backprop(ip, e->args[0], &cs, up ? gu : -gu, &A);
                backprop(ip, e->args[1], &cs, up ? -gu : gu, &A);
                break;
            }
            case NS_RESET_TO: {
                /* V = S e + (1 - S) H: dH = a (1 - S), de = a S, dS = a e - a H */
                double a = *av, S = cs.spike, H = *var_of(cs.st, cs.lc, stm);
                double ev = interp_ceval(e, &cs);
                *av = ip_rnd(ip, a * ip_rnd(ip, 1 - S));
                backprop(ip, e, &cs, ip_rnd(ip, a * S), &A);
                if (!nr->sg.detach_reset)
                    acc(ip, &A.sp, ip_rnd(ip, ip_rnd(ip, a * ev) - ip_rnd(ip, a * H)));
                break;
            }
            case NS_RESET_SUB: {
                /* V = H - S e: dH = a, dS = -a e, de = -a S */
                double a = *av, S = cs.spike;
                if (!nr->sg.detach_reset) acc(ip, &A.sp, ip_rnd(ip, -a * interp_ceval(e, &cs)));
                backprop(ip, e, &cs, ip_rnd(ip, -a * S), &A);
                break;
            }
            case NS_OUTPUT: {
                double a = a_out;
                a_out = 0;
                backprop(ip, e, &cs, a, &A);
                break;
            }
            case NS_REFRACTORY:
            case NS_FIRE_DOWN:
                break;
            }
        }
        cv[ns + nl] = A.sp; /* the spike before the step: the previous step's */
        acc(ip, &gx[j], A.in);
    }
    free(probes);
}

/* ---- layers ---- */

/* Dense backward in float32 mode: the compiled trainer's sums, in its order
 * (codegen/lower_grad.c), once for every step at the node's first backward call (the passes go
 * layer by layer, so dL/dy is complete; the batch is one pass): rows r = t*B + b (a static
 * layer's B rows), dL/dx[r, i] = fma over outputs o in order from what it holds, dW[o, i] = fma
 * over rows in order from +0 (every term, as PyTorch's GEMM: a zero input times an infinite or
 * NaN gradient is NaN; finite zero terms leave a sum that never holds -0 as it is), db[o] = the
 * rows' sum; in float under `accumulate f32` (fmaf), in
 * double under `accumulate exact`, rounded to float once at the end. */
static void
dense_backward_f32_rows(Grad *G, ValueId v, int64_t q0, int64_t q1, bool weights)
{
    Interp *ip = &G->ip;
    const Node *n = &ip->m->nodes[v];
    ValueId a = n->args[0];
    const NodeRun *r = &ip->nodes[v];
    int64_t in = ip->nodes[a].numel, out = r->numel;
    int steps = r->is_static ? 1 : ip->T;
    int64_t rows = (int64_t)steps * ip->nb;
    const float *w = ip_weight(ip, n, 0)->data;
    double *dw = weights && G->weight_grads ? G->weight_grads[n->first_weight] : NULL;
    double *db = weights && G->weight_grads && (int)node_attr_i(n, "bias", 0)
                     ? G->weight_grads[n->first_weight + 1]
                     : NULL;
    bool f32 = ip->is_f32_sums;
#define FMA(x, y, s) (f32 ? (double)fmaf((float)(x), (float)(y), (float)(s)) : fma((x), (y), (s)))
    /* row q is sample q % nb of step q / nb */
    for (int64_t q = q0; q < q1; q++) {
        int t = (int)(q / ip->nb);
        const double *gy = gslot(G, v, t) + (size_t)(q % ip->nb) * (size_t)out;
        double *gx = gslot(G, a, t) + (size_t)(q % ip->nb) * (size_t)in;
        for (int64_t i = 0; i < in; i++) {
            double s = gx[i];
            for (int64_t o = 0; o < out; o++)
                s = FMA(gy[o], (double)w[o * in + i], s);
            gx[i] = (float)s;
        }
    }
    for (int64_t o = 0; o < out && (dw || db); o++) {
        for (int64_t i = 0; i < in && dw; i++) {
            double s = 0;
            for (int64_t q = 0; q < rows; q++) {
                int t = (int)(q / ip->nb);
                double xv = ip_val(ip, a, t)[(size_t)(q % ip->nb) * (size_t)in + (size_t)i];
                s = FMA(xv, gslot(G, v, t)[(size_t)(q % ip->nb) * (size_t)out + (size_t)o], s);
            }
            dw[o * in + i] += (float)s;
        }
        if (db) {
            double s = 0;
            for (int64_t q = 0; q < rows; q++) {
                double g = gslot(G, v, (int)(q / ip->nb))[(size_t)(q % ip->nb) * (size_t)out +
                                                          (size_t)o];
                s = f32 ? (double)((float)s + (float)g) : s + g;
            }
            db[o] += (float)s;
        }
    }
#undef FMA
}

static void
dense_backward_f32(Grad *G, ValueId v)
{
    const NodeRun *r = &G->ip.nodes[v];
    dense_backward_f32_rows(G, v, 0, (int64_t)(r->is_static ? 1 : G->ip.T) * G->ip.nb, true);
}

static void
dense_backward(Grad *G, ValueId v, int t)
{
    Interp *ip = &G->ip;
    if (G->compiled_order && G->region && G->region[v] >= 0) {
        /* in a recurrence, step by step: this step's rows of dL/dx (their dW after the loop) */
        dense_backward_f32_rows(G, v, (int64_t)t * ip->nb, (int64_t)(t + 1) * ip->nb, false);
        return;
    }
    if (G->compiled_order) {
        if (t == (ip->nodes[v].is_static ? 0 : ip->T - 1)) dense_backward_f32(G, v);
        return;
    }
    const Node *n = &ip->m->nodes[v];
    ValueId a = n->args[0];
    int64_t in = ip->nodes[a].numel, out = ip->nodes[v].numel;
    const float *w = ip_weight(ip, n, 0)->data;
    double *dw = G->weight_grads ? G->weight_grads[n->first_weight] : NULL;
    double *db = G->weight_grads && (int)node_attr_i(n, "bias", 0)
                     ? G->weight_grads[n->first_weight + 1]
                     : NULL;
    const double *x = ip_val(ip, a, t), *gy = gslot(G, v, t);
    double *gx = gslot(G, a, t);
    for (int b = 0; b < ip->nb; b++) {
        const double *gyb = gy + (size_t)b * (size_t)out, *xb = x + (size_t)b * (size_t)in;
        double *gxb = gx + (size_t)b * (size_t)in;
        for (int64_t i = 0; i < in; i++) {
            double s = 0;
            for (int64_t o = 0; o < out; o++)
                s += gyb[o] * w[o * in + i];
            acc(ip, &gxb[i], s);
        }
        for (int64_t o = 0; o < out; o++) {
            if (gyb[o] == 0) continue;
            if (db) db[o] += gyb[o];
            if (dw)
                for (int64_t i = 0; i < in; i++)
                    dw[o * in + i] += gyb[o] * xb[i];
        }
    }
}

/* Conv backward in float32 mode: the compiled trainer's sums in its order (codegen/lower_grad.c,
 * grad_conv), once for every step at the node's first backward call: rows q = t*B + b (a static
 * layer's B rows); dL/dx[q, c, ih, iw]: from +0, fma over the taps (kh, kw) that reach the pixel,
 * then its group's output channels o, in order, rounded to float and added to what it holds;
 * dW[o, c, kh, kw]: fma over rows, then output pixels (oh, ow) in order from +0, every term (a
 * small conv, ir.h conv_dw_rows_first: each row's from +0, added to the total in order);
 * db[o]: the sum over rows and output pixels. Float sums under `accumulate f32` (fmaf), double
 * under `accumulate exact`, rounded once at the end. */
static void
conv_backward_f32_rows(Grad *G, ValueId v, int64_t q0, int64_t q1, bool weights)
{
    Interp *ip = &G->ip;
    const Node *n = &ip->m->nodes[v];
    ValueId a = n->args[0];
    ConvGeom g = conv_geom(ip->m, n);
    int steps = ip->nodes[v].is_static ? 1 : ip->T;
    int64_t rows = (int64_t)steps * ip->nb, npix = g.OH * g.OW, nin = g.C * g.H * g.W;
    const float *w = ip_weight(ip, n, 0)->data;
    double *dw = G->weight_grads ? G->weight_grads[n->first_weight] : NULL;
    double *db = G->weight_grads && (int)node_attr_i(n, "bias", 0)
                     ? G->weight_grads[n->first_weight + 1]
                     : NULL;
    bool f32 = ip->is_f32_sums;
#define FMA(x, y, s) (f32 ? (double)fmaf((float)(x), (float)(y), (float)(s)) : fma((x), (y), (s)))
#define ROW(base, q, len) ((base) + (size_t)((q) % ip->nb) * (size_t)(len))
    for (int64_t q = q0; q < q1; q++) {
        int t = (int)(q / ip->nb);
        const double *gy = ROW(gslot(G, v, t), q, g.O * npix);
        double *gx = ROW(gslot(G, a, t), q, nin);
        for (int64_t c = 0; c < g.C; c++)
            for (int64_t ih = 0; ih < g.H; ih++)
                for (int64_t iw = 0; iw < g.W; iw++) {
                    double s = 0;
                    int64_t grp = c / g.Cg, cg = c % g.Cg;
                    for (int64_t kh = 0; kh < g.KH; kh++) {
                        int64_t nh = ih + g.PH - kh * g.DH;
                        if (nh < 0 || nh >= g.OH * g.SH || nh % g.SH) continue;
                        for (int64_t kw = 0; kw < g.KW; kw++) {
                            int64_t nw = iw + g.PW - kw * g.DW;
                            if (nw < 0 || nw >= g.OW * g.SW || nw % g.SW) continue;
                            int64_t oh = nh / g.SH, ow = nw / g.SW;
                            for (int64_t o = grp * g.Og; o < (grp + 1) * g.Og; o++)
                                s = FMA(gy[o * npix + oh * g.OW + ow],
                                        (double)w[((o * g.Cg + cg) * g.KH + kh) * g.KW + kw], s);
                        }
                    }
                    acc(ip, &gx[(c * g.H + ih) * g.W + iw], (float)s);
                }
    }
    bool rows_first = conv_dw_rows_first(&g);
    for (int64_t o = 0; o < g.O && (dw || db) && weights; o++) {
        for (int64_t cg = 0; cg < g.Cg && dw; cg++)
            for (int64_t kh = 0; kh < g.KH; kh++)
                for (int64_t kw = 0; kw < g.KW; kw++) {
                    double s = 0;
                    for (int64_t q = 0; q < rows; q++) {
                        int t = (int)(q / ip->nb);
                        const double *gy = ROW(gslot(G, v, t), q, g.O * npix);
                        const double *x = ROW(ip_val(ip, a, t), q, nin);
                        double ps = 0, *sum = rows_first ? &ps : &s;
                        for (int64_t oh = 0; oh < g.OH; oh++) {
                            int64_t ih = oh * g.SH - g.PH + kh * g.DH;
                            if (ih < 0 || ih >= g.H) continue;
                            for (int64_t ow = 0; ow < g.OW; ow++) {
                                int64_t iw = ow * g.SW - g.PW + kw * g.DW;
                                if (iw < 0 || iw >= g.W) continue;
                                double xv = x[(((o / g.Og) * g.Cg + cg) * g.H + ih) * g.W + iw];
                                *sum = FMA(xv, gy[o * npix + oh * g.OW + ow], *sum);
                            }
                        }
                        if (rows_first) s = FMA(1.0, ps, s);
                    }
                    dw[((o * g.Cg + cg) * g.KH + kh) * g.KW + kw] += (float)s;
                }
        if (db) {
            double s = 0;
            for (int64_t q = 0; q < rows; q++) {
                const double *gy = ROW(gslot(G, v, (int)(q / ip->nb)), q, g.O * npix);
                for (int64_t p = 0; p < npix; p++)
                    s = f32 ? (double)((float)s + (float)gy[o * npix + p]) : s + gy[o * npix + p];
            }
            db[o] += (float)s;
        }
    }
#undef ROW
#undef FMA
}

static void
conv_backward_f32(Grad *G, ValueId v)
{
    const NodeRun *r = &G->ip.nodes[v];
    conv_backward_f32_rows(G, v, 0, (int64_t)(r->is_static ? 1 : G->ip.T) * G->ip.nb, true);
}

static void
conv_backward(Grad *G, ValueId v, int t)
{
    Interp *ip = &G->ip;
    if (G->compiled_order && G->region && G->region[v] >= 0) {
        /* in a recurrence, step by step: this step's rows of dL/dx (dW and db after the loop) */
        conv_backward_f32_rows(G, v, (int64_t)t * ip->nb, (int64_t)(t + 1) * ip->nb, false);
        return;
    }
    if (G->compiled_order) {
        if (t == (ip->nodes[v].is_static ? 0 : ip->T - 1)) conv_backward_f32(G, v);
        return;
    }
    const Node *n = &ip->m->nodes[v];
    ValueId a = n->args[0];
    ConvGeom g = conv_geom(ip->m, n);
    const float *w = ip_weight(ip, n, 0)->data;
    double *dw = G->weight_grads ? G->weight_grads[n->first_weight] : NULL;
    double *db = G->weight_grads && (int)node_attr_i(n, "bias", 0)
                     ? G->weight_grads[n->first_weight + 1]
                     : NULL;
    const double *x = ip_val(ip, a, t), *gy = gslot(G, v, t);
    double *gx = gslot(G, a, t), *s = G->scratch;
    int64_t npix = g.OH * g.OW, nin = g.C * g.H * g.W;
    for (int b = 0; b < ip->nb; b++) {
        const double *xb = x + (size_t)b * (size_t)nin,
                     *gyb = gy + (size_t)b * (size_t)(g.O * npix);
        memset(s, 0, (size_t)nin * sizeof *s);
        for (int64_t o = 0; o < g.O; o++) {
            int64_t c0 = (o / g.Og) * g.Cg;
            for (int64_t oh = 0; oh < g.OH; oh++)
                for (int64_t ow = 0; ow < g.OW; ow++) {
                    double gv = gyb[o * npix + oh * g.OW + ow];
                    if (gv == 0) continue;
                    if (db) db[o] += gv;
                    for (int64_t cg = 0; cg < g.Cg; cg++)
                        for (int64_t kh = 0; kh < g.KH; kh++) {
                            int64_t ih = oh * g.SH - g.PH + kh * g.DH;
                            if (ih < 0 || ih >= g.H) continue;
                            for (int64_t kw = 0; kw < g.KW; kw++) {
                                int64_t iw = ow * g.SW - g.PW + kw * g.DW;
                                if (iw < 0 || iw >= g.W) continue;
                                int64_t wi = ((o * g.Cg + cg) * g.KH + kh) * g.KW + kw;
                                int64_t xi = ((c0 + cg) * g.H + ih) * g.W + iw;
                                s[xi] += gv * w[wi];
                                if (dw) dw[wi] += gv * xb[xi];
                            }
                        }
                }
        }
        double *gxb = gx + (size_t)b * (size_t)nin;
        for (int64_t i = 0; i < nin; i++)
            acc(ip, &gxb[i], s[i]);
    }
}

static void
pool_backward(Grad *G, ValueId v, int t)
{
    Interp *ip = &G->ip;
    const Node *n = &ip->m->nodes[v];
    ValueId a = n->args[0];
    const Type *xt = &ip->m->nodes[a].type;
    int64_t C = xt->dims[0], H = xt->dims[1], W = xt->dims[2];
    int64_t OH = n->type.dims[1], OW = n->type.dims[2];
    int KH = (int)node_attr_i(n, "kernel", 0), KW = (int)node_attr_i(n, "kernel", 1);
    int SH = (int)node_attr_i(n, "stride", 0), SW = (int)node_attr_i(n, "stride", 1);
    int PH = (int)node_attr_i(n, "pad", 0), PW = (int)node_attr_i(n, "pad", 1);
    if (SH == 0) SH = KH;
    if (SW == 0) SW = KW;
    const double *x = ip_val(ip, a, t), *gy = gslot(G, v, t);
    double *gx = gslot(G, a, t);
    for (int b = 0; b < ip->nb; b++) {
        const double *xb = x + (size_t)b * (size_t)(C * H * W);
        double *gxb = gx + (size_t)b * (size_t)(C * H * W);
        const double *gyb = gy + (size_t)b * (size_t)(C * OH * OW);
        for (int64_t c = 0; c < C; c++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double gv = gyb[(c * OH + oh) * OW + ow];
                    if (n->op == OP_AVGPOOL2D) gv = ip_rnd(ip, gv / ((double)KH * KW));
                    double best = -INFINITY;
                    int64_t arg = -1;
                    for (int kh = 0; kh < KH; kh++) {
                        int64_t ih = oh * SH - PH + kh;
                        if (ih < 0 || ih >= H) continue;
                        for (int kw = 0; kw < KW; kw++) {
                            int64_t iw = ow * SW - PW + kw;
                            if (iw < 0 || iw >= W) continue;
                            int64_t xi = (c * H + ih) * W + iw;
                            if (n->op != OP_MAXPOOL2D)
                                acc(ip, &gxb[xi], gv);
                            else if (arg < 0 || xb[xi] > best || (isnan(xb[xi]) && !isnan(best))) {
                                best = xb[xi]; /* the first maximum, as the forward and PyTorch */
                                arg = xi;
                            }
                        }
                    }
                    if (n->op == OP_MAXPOOL2D && arg >= 0) acc(ip, &gxb[arg], gv);
                }
    }
}

/* training batch norm (Interp.batch_stats): y = xh w + b with xh = (x - mean) invstd over the set
 * S of every step, sample and position (a static value counts T times); once, at its first call
 * (t = T - 1, or t = 0 for a static value), for every step:
 * dx = w invstd (dy - mean_S(dy) - xh mean_S(dy xh)), dw = sum_S dy xh, db = sum_S dy */
static void
batchnorm_backward_batch(Grad *G, ValueId v, int t)
{
    Interp *ip = &G->ip;
    const Node *n = &ip->m->nodes[v];
    const NodeRun *r = &ip->nodes[v];
    if (!r->is_static && t != ip->T - 1) return;
    ValueId a = n->args[0];
    int64_t numel = r->numel, C = n->type.rank > 0 ? n->type.dims[0] : 1, inner = C ? numel / C : 0;
    int steps = r->is_static ? 1 : ip->T;
    double copies = r->is_static ? ip->T : 1; /* a static value stands for T equal steps */
    double cnt = copies * steps * ip->nb * (double)inner;
    const float *w = ip_weight(ip, n, 0)->data;
    double *dw = G->weight_grads ? G->weight_grads[n->first_weight] : NULL;
    double *db = G->weight_grads ? G->weight_grads[n->first_weight + 1] : NULL;
    for (int64_t c = 0; c < C; c++) {
        double sg = 0, sgx = 0, mean = r->bn_mean[c], is = r->bn_invstd[c];
        for (int s = 0; s < steps; s++) {
            const double *x = ip_val(ip, a, s), *gy = gslot(G, v, s);
            for (int b = 0; b < ip->nb; b++) {
                double pg = 0, pgx = 0; /* each row's, then the rows' (batch_statistics) */
                for (int64_t i = 0; i < inner; i++) {
                    size_t j = (size_t)b * (size_t)numel + (size_t)(c * inner + i);
                    pg += gy[j];
                    pgx += gy[j] * (x[j] - mean) * is;
                }
                sg += pg;
                sgx += pgx;
            }
        }
        if (dw) dw[c] += sgx;
        if (db) db[c] += sg;
        double mg = copies * sg / cnt, mgx = copies * sgx / cnt;
        for (int s = 0; s < steps; s++) {
            const double *x = ip_val(ip, a, s), *gy = gslot(G, v, s);
            double *gx = gslot(G, a, s);
            for (int b = 0; b < ip->nb; b++)
                for (int64_t i = 0; i < inner; i++) {
                    size_t j = (size_t)b * (size_t)numel + (size_t)(c * inner + i);
                    double xh = (x[j] - mean) * is;
                    acc(ip, &gx[j], ip_rnd(ip, w[c] * is * (gy[j] - mg - xh * mgx)));
                }
        }
    }
}

/* PyTorch's running statistics after a training batch: momentum 0.1, the variance unbiased
 * (n / (n - 1), n every step, sample and position, a static value T times), in double, stored
 * to float */
static void
batchnorm_update_running(Grad *G, ValueId v)
{
    Interp *ip = &G->ip;
    const Node *n = &ip->m->nodes[v];
    const NodeRun *r = &ip->nodes[v];
    int64_t C = n->type.rank > 0 ? n->type.dims[0] : 1, inner = C ? r->numel / C : 0;
    double cnt = (double)ip->T * ip->nb * (double)inner;
    float *rm = ip_weight(ip, n, 2)->data, *rv = ip_weight(ip, n, 3)->data;
    for (int64_t c = 0; c < C; c++) {
        double unbiased = cnt > 1 ? r->bn_var[c] * cnt / (cnt - 1) : r->bn_var[c];
        rm[c] = (float)(0.1 * r->bn_mean[c] + 0.9 * (double)rm[c]);
        rv[c] = (float)(0.1 * unbiased + 0.9 * (double)rv[c]);
    }
}

/* inference batch norm: y = (x - mean) / sd * w + b */
static void
batchnorm_backward(Grad *G, ValueId v, int t)
{
    Interp *ip = &G->ip;
    if (ip->batch_stats) {
        batchnorm_backward_batch(G, v, t);
        return;
    }
    const Node *n = &ip->m->nodes[v];
    ValueId a = n->args[0];
    int64_t numel = ip->nodes[v].numel, C = n->type.rank > 0 ? n->type.dims[0] : 1;
    int64_t inner = C ? numel / C : 0;
    const float *w = ip_weight(ip, n, 0)->data, *mean = ip_weight(ip, n, 2)->data;
    const float *var = ip_weight(ip, n, 3)->data;
    double *dw = G->weight_grads ? G->weight_grads[n->first_weight] : NULL;
    double *db = G->weight_grads ? G->weight_grads[n->first_weight + 1] : NULL;
    double eps = node_attr_f(n, "eps");
    const double *x = ip_val(ip, a, t), *gy = gslot(G, v, t);
    double *gx = gslot(G, a, t);
    for (int b = 0; b < ip->nb; b++)
        for (int64_t c = 0; c < C; c++) {
            double sd = sqrt((double)var[c] + eps);
            size_t base = (size_t)b * (size_t)numel + (size_t)(c * inner);
            for (int64_t i = 0; i < inner; i++) {
                double gv = gy[base + (size_t)i];
                acc(ip, &gx[base + (size_t)i], ip_rnd(ip, gv * w[c] / sd));
                if (dw) dw[c] += gv * ((x[base + (size_t)i] - mean[c]) / sd);
                if (db) db[c] += gv;
            }
        }
}

static void
elementwise_backward(Grad *G, ValueId v, int t)
{
    Interp *ip = &G->ip;
    const Node *n = &ip->m->nodes[v];
    size_t nj = (size_t)ip->nb * (size_t)ip->nodes[v].numel;
    const double *gy = gslot(G, v, t);
    double *ga = gslot(G, n->args[0], t), *gb = n->nargs > 1 ? gslot(G, n->args[1], t) : NULL;
    const double *a = ip_val(ip, n->args[0], t),
                 *b = n->nargs > 1 ? ip_val(ip, n->args[1], t) : NULL;
    double factor = n->op == OP_SCALE ? ip_rnd(ip, node_attr_f(n, "factor")) : 0;
    double divisor = n->op == OP_SCALE ? ip_rnd(ip, node_attr_f(n, "divisor")) : 1;
    for (size_t j = 0; j < nj; j++) {
        double g = gy[j];
        switch (n->op) {
        case OP_ADD:
            acc(ip, &ga[j], g);
            acc(ip, &gb[j], g);
            break;
        case OP_SUB:
            acc(ip, &ga[j], g);
            acc(ip, &gb[j], -g);
            break;
        case OP_MUL:
            acc(ip, &ga[j], ip_rnd(ip, g * b[j]));
            acc(ip, &gb[j], ip_rnd(ip, g * a[j]));
            break;
        case OP_SCALE:
            if (divisor != 1) g = ip_rnd(ip, g / divisor);
            if (factor != 1) g = ip_rnd(ip, g * factor);
            acc(ip, &ga[j], g);
            break;
        default:
            unreachable();
        }
    }
}

static void
readout_backward(Grad *G, ValueId v, int t)
{
    Interp *ip = &G->ip;
    const Node *n = &ip->m->nodes[v];
    ValueId a = n->args[0];
    size_t nj = (size_t)ip->nb * (size_t)ip->nodes[v].numel;
    double *gx = gslot(G, a, t);
    if (n->op == OP_SEQUENCE) {
        const double *gy = gslot(G, v, t);
        for (size_t j = 0; j < nj; j++)
            acc(ip, &gx[j], gy[j]);
        return;
    }
    const double *gy = G->rg[v];
    for (size_t j = 0; j < nj; j++) {
        switch (n->op) {
        case OP_COUNT:
            acc(ip, &gx[j], gy[j]);
            break;
        case OP_MEAN:
            acc(ip, &gx[j], ip_rnd(ip, gy[j] / ip->T));
            break;
        case OP_LAST:
            if (t == ip->T - 1) acc(ip, &gx[j], gy[j]);
            break;
        case OP_MAX: { /* to the first step holding the maximum, as torch.max's index */
            int best = 0;
            for (int s = 1; s < ip->T; s++) {
                double xs = ip_val(ip, a, s)[j], xb = ip_val(ip, a, best)[j];
                if (xs > xb || (isnan(xs) && !isnan(xb))) best = s;
            }
            if (best == t) acc(ip, &gx[j], gy[j]);
            break;
        }
        default:
            unreachable();
        }
    }
}

static void
input_backward(Grad *G, ValueId v, int t)
{
    Interp *ip = &G->ip;
    const Node *n = &ip->m->nodes[v];
    const NodeRun *r = &ip->nodes[v];
    double *dst = G->input_grads ? G->input_grads[r->input_index] : NULL;
    if (!dst) return;
    const double *gy = gslot(G, v, t);
    size_t numel = (size_t)r->numel;
    for (int b = 0; b < ip->nb; b++) {
        int64_t s = ip->b0 + b;
        double *p = n->is_per_step_input ? dst + ((size_t)s * (size_t)ip->T + (size_t)t) * numel
                                         : dst + (size_t)s * numel;
        for (size_t i = 0; i < numel; i++)
            p[i] = gy[(size_t)b * numel + i];
    }
}

static void
node_backward(Grad *G, ValueId v, int t, double **carry, double *snap)
{
    Interp *ip = &G->ip;
    const Node *n = &ip->m->nodes[v];
    if (ip->nodes[v].is_static && t > 0)
        return; /* its slot collects every step's gradient; it runs once, at t = 0 */
    switch (n->op) {
    case OP_INPUT:
        input_backward(G, v, t);
        break;
    case OP_POISSON:
        break; /* sampling: no gradient to the rates */
    case OP_DENSE:
        dense_backward(G, v, t);
        break;
    case OP_CONV2D:
    case OP_CONV1D:
        conv_backward(G, v, t);
        break;
    case OP_MAXPOOL2D:
    case OP_AVGPOOL2D:
    case OP_SUMPOOL2D:
        pool_backward(G, v, t);
        break;
    case OP_FLATTEN: {
        if (G->compiled_order) break; /* its slot is its input's (interp_grad) */
        const double *gy = gslot(G, v, t);
        double *gx = gslot(G, n->args[0], t);
        for (size_t j = 0, nj = (size_t)ip->nb * (size_t)ip->nodes[v].numel; j < nj; j++)
            acc(ip, &gx[j], gy[j]);
        break;
    }
    case OP_BATCHNORM:
        batchnorm_backward(G, v, t);
        break;
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_SCALE:
        elementwise_backward(G, v, t);
        break;
    case OP_DELAY: {
        int steps = (int)node_attr_i(n, "steps", 0);
        if (t < steps || steps < 0) break;
        const double *gy = gslot(G, v, t);
        double *gx = gslot(G, n->args[0], t - steps);
        for (size_t j = 0, nj = (size_t)ip->nb * (size_t)ip->nodes[v].numel; j < nj; j++)
            acc(ip, &gx[j], gy[j]);
        break;
    }
    case OP_NEURON:
        neuron_backward(G, v, t, carry[v], snap);
        break;
    case OP_STATE:
        break; /* its neuron reads its gradient */
    case OP_COUNT:
    case OP_MEAN:
    case OP_LAST:
    case OP_MAX:
    case OP_SEQUENCE:
        readout_backward(G, v, t);
        break;
    case OP_GRAD: /* the interpreter differentiates the forward module itself */
    case OP_GRAD_WEIGHT:
    case OP_COUNT_:
        unreachable();
    }
}

/* adds each neuron's share of its layer's learned parameters' gradients to the weights'
 * gradients, neuron by neuron in order (samples, then elements): the compiled trainer's order */
static void
learned_flush(Grad *G, ValueId v)
{
    const Interp *ip = &G->ip;
    const Node *n = &ip->m->nodes[v];
    const NeuronDef *nd = ip->nodes[v].neuron->nd;
    size_t nj = (size_t)ip->nb * (size_t)ip->nodes[v].numel, np = (size_t)nd->nparams;
    for (int i = 0; i < nd->nparams; i++) {
        int w = node_param_weight(ip->m, n, i);
        if (w < 0 || !G->weight_grads || !G->weight_grads[w]) continue;
        double s = G->weight_grads[w][0];
        for (size_t j = 0; j < nj; j++)
            s += G->pacc[v][j * np + (size_t)i];
        G->weight_grads[w][0] = s;
    }
}

static bool
is_step_readout(Op op)
{
    return op == OP_COUNT || op == OP_MEAN || op == OP_LAST || op == OP_MAX;
}

bool
interp_grad(const Module *m, const InterpOptions *opt, int batch, int64_t sample_base,
            const float *const *inputs, float *const *outputs, InterpOutGradFn out_grad, void *ctx,
            double *const *input_grads, double *const *weight_grads, char *err, size_t errlen)
{
    Grad G;
    memset(&G, 0, sizeof G);
    Interp *ip = &G.ip;
    interp_init(ip, m, opt, batch, sample_base, inputs, outputs, err, errlen);
    ip->keep_all = true;
    ip->adds_zero_spikes = true;
    G.input_grads = input_grads;
    G.weight_grads = weight_grads;
    if (batch <= 0 || ip->T <= 0) return true;
    /* every neuron layer must be differentiable before anything runs */
    for (ValueId v = 0; v < m->nnodes; v++) {
        const Node *n = &m->nodes[v];
        SurrogateFn sg;
        char why[256];
        if (n->op == OP_NEURON && !neuron_surrogate(m->neurons[n->neuron], &sg, why, sizeof why)) {
            interp_fail(ip, "layer '%s' (%s) cannot be trained: %s", n->name ? n->name : "?",
                        m->neurons[n->neuron]->name, why);
            return false;
        }
    }
    /* Where every value depends only on values before it in the topological order (no delay
     * reads a later node: no recurrence), the passes may run layer by layer (each node all its
     * steps): what batch statistics need and the compiled trainer does; with recurrence, step by
     * step (forward) and reverse step by step (backward). */
    ValueId *topo = xmalloc(((size_t)m->nnodes + 1) * sizeof *topo);
    bool layer_major = ir_topo_order(m, topo) == m->nnodes && !ir_has_recurrence(m, topo);
    bool has_bn = false;
    free(topo);
    for (ValueId v = 0; v < m->nnodes; v++)
        has_bn |= m->nodes[v].op == OP_BATCHNORM;
    G.compiled_order = ip->is_f32;
    ip->one_pass = G.compiled_order;
    ValueId *sched = NULL;
    if (G.compiled_order && !layer_major) {
        ValueId *order = xmalloc(((size_t)m->nnodes + 1) * sizeof *order);
        sched = xmalloc(((size_t)m->nnodes + 1) * sizeof *sched);
        G.region = xmalloc(((size_t)m->nnodes + 1) * sizeof *G.region);
        if (ir_topo_order(m, order) != m->nnodes) die("interp_grad: no step order");
        ir_schedule_order(m, order, G.region, sched);
        free(order);
    }
    if (ip->batch_stats && has_bn && !layer_major) {
        interp_fail(ip, "batchnorm's batch statistics in a recurrent model (prev/delay) are not "
                        "supported");
        return false;
    }
    double **carry = NULL, *snap = NULL;
    float **og = NULL;
    bool ok = interp_setup(ip);
    if (ok) {
        G.g = interp_alloc(ip, (size_t)m->nnodes, sizeof *G.g);
        G.rg = interp_alloc(ip, (size_t)m->nnodes, sizeof *G.rg);
        G.pacc = interp_alloc(ip, (size_t)m->nnodes, sizeof *G.pacc);
        carry = interp_alloc(ip, (size_t)m->nnodes, sizeof *carry);
        og = interp_alloc(ip, (size_t)m->noutputs, sizeof *og);
        size_t maxnumel = 1, maxsnap = 1;
        for (ValueId v = 0; v < m->nnodes && !ip->failed; v++) {
            const Node *n = &m->nodes[v];
            const NodeRun *r = &ip->nodes[v];
            size_t cj = (size_t)ip->chunk * (size_t)r->numel;
            if (is_step_readout(n->op))
                G.rg[v] = interp_alloc(ip, cj, sizeof(double));
            else if (G.compiled_order && n->op == OP_FLATTEN)
                continue; /* a view, as compiled: its readers add to x's slot (below) */
            else
                G.g[v] = interp_alloc(ip, (size_t)(r->is_static ? 1 : ip->T) * cj, sizeof(double));
            if ((size_t)r->numel > maxnumel) maxnumel = (size_t)r->numel;
            if (n->op == OP_NEURON) {
                const NeuronDef *nd = r->neuron->nd;
                size_t nv = (size_t)(nd->nstates + nd->nlocals + 1);
                carry[v] = interp_alloc(ip, cj * nv, sizeof(double));
                if (n->learned)
                    G.pacc[v] = interp_alloc(ip, cj * (size_t)(nd->nparams + 1), sizeof(double));
                char why[8];
                neuron_surrogate(r->neuron->nd, &r->neuron->sg, why, sizeof why);
                if ((size_t)(nd->nstmts + 1) * nv > maxsnap)
                    maxsnap = (size_t)(nd->nstmts + 1) * nv;
            }
        }
        for (ValueId v = 0; G.compiled_order && v < m->nnodes && !ip->failed; v++) {
            ValueId x = v; /* node ids need not follow the order: flatten of flatten */
            while (m->nodes[x].op == OP_FLATTEN)
                x = m->nodes[x].args[0];
            if (x != v) G.g[v] = G.g[x];
        }
        for (int k = 0; k < m->noutputs && !ip->failed; k++) {
            const Node *n = &m->nodes[m->outputs[k]];
            size_t per =
                (size_t)ip->nodes[m->outputs[k]].numel * (size_t)(n->type.has_time ? ip->T : 1);
            og[k] = interp_alloc(ip, (size_t)ip->chunk * per, sizeof(float));
        }
        G.scratch = interp_alloc(ip, maxnumel, sizeof(double));
        snap = interp_alloc(ip, maxsnap, sizeof(double));
        ok = !ip->failed;
    }
    for (ip->b0 = 0; ok && ip->b0 < batch; ip->b0 += ip->chunk) {
        ip->nb = (int)(batch - ip->b0 < ip->chunk ? batch - ip->b0 : ip->chunk);
        for (ValueId v = 0; v < m->nnodes; v++)
            if (ip->nodes[v].neuron) interp_reset_neuron(ip, &ip->nodes[v]);
        if (layer_major) {
            /* a state probe reads its neuron's state as the step leaves it: evaluated with its
             * neuron, step by step (after all of them it would read the last step's) */
            for (int k = 0; k < m->nnodes; k++) {
                ValueId v = ip->order[k];
                if (m->nodes[v].op == OP_STATE) continue;
                for (int t = 0; t < ip->T; t++) {
                    interp_eval_node(ip, v, t, NULL);
                    for (ValueId u = 0; m->nodes[v].op == OP_NEURON && u < m->nnodes; u++)
                        if (m->nodes[u].op == OP_STATE && m->nodes[u].args[0] == v)
                            interp_eval_node(ip, u, t, NULL);
                }
            }
            for (int t = 0; t < ip->T; t++)
                interp_write_step_outputs(ip, t);
        } else {
            for (int t = 0; t < ip->T; t++) {
                for (int k = 0; k < m->nnodes; k++)
                    interp_eval_node(ip, ip->order[k], t, NULL);
                interp_write_step_outputs(ip, t);
            }
        }
        interp_write_final_outputs(ip);
        if (ip->batch_stats)
            for (ValueId v = 0; v < m->nnodes; v++)
                if (m->nodes[v].op == OP_BATCHNORM) batchnorm_update_running(&G, v);
        /* the gradients of this pass's outputs */
        for (int k = 0; k < m->noutputs; k++) {
            const Node *n = &m->nodes[m->outputs[k]];
            size_t per =
                (size_t)ip->nodes[m->outputs[k]].numel * (size_t)(n->type.has_time ? ip->T : 1);
            memset(og[k], 0, (size_t)ip->nb * per * sizeof(float));
        }
        out_grad(ctx, ip->b0, ip->nb, og);
        for (ValueId v = 0; v < m->nnodes; v++) {
            const NodeRun *r = &ip->nodes[v];
            size_t cj = (size_t)ip->chunk * (size_t)r->numel;
            if (G.g[v]) memset(G.g[v], 0, (size_t)(r->is_static ? 1 : ip->T) * cj * sizeof(double));
            if (G.rg[v]) memset(G.rg[v], 0, cj * sizeof(double));
            if (carry[v]) {
                const NeuronDef *nd = r->neuron->nd;
                memset(carry[v], 0, cj * (size_t)(nd->nstates + nd->nlocals + 1) * sizeof(double));
                if (G.pacc[v])
                    memset(G.pacc[v], 0, cj * (size_t)(nd->nparams + 1) * sizeof(double));
            }
        }
        for (int k = 0; k < m->noutputs; k++) {
            ValueId v = m->outputs[k];
            size_t numel = (size_t)ip->nodes[v].numel;
            for (int b = 0; b < ip->nb; b++)
                for (size_t i = 0; i < numel; i++) {
                    if (is_step_readout(m->nodes[v].op)) {
                        G.rg[v][(size_t)b * numel + i] += og[k][(size_t)b * numel + i];
                        continue;
                    }
                    for (int t = 0; t < ip->T; t++)
                        gslot(&G, v, t)[(size_t)b * numel + i] +=
                            og[k][((size_t)b * (size_t)ip->T + (size_t)t) * numel + i];
                }
        }
        if (layer_major) {
            for (int k = m->nnodes - 1; k >= 0; k--)
                for (int t = ip->T - 1; t >= 0; t--)
                    node_backward(&G, ip->order[k], t, carry, snap);
        } else if (sched) {
            for (int k = m->nnodes - 1; k >= 0; k--) {
                ValueId v = sched[k];
                if (G.region[v] < 0) {
                    for (int t = ip->T - 1; t >= 0; t--)
                        node_backward(&G, v, t, carry, snap);
                    continue;
                }
                /* a recurrent region (contiguous in sched): step by step, then its dense
                 * layers' weight gradients over all the rows */
                int first = k;
                while (first > 0 && G.region[sched[first - 1]] == G.region[v])
                    first--;
                for (int t = ip->T - 1; t >= 0; t--)
                    for (int q = k; q >= first; q--)
                        node_backward(&G, sched[q], t, carry, snap);
                for (int q = k; q >= first; q--)
                    if (m->nodes[sched[q]].op == OP_DENSE)
                        dense_backward_f32_rows(&G, sched[q], 0, 0, true);
                    else if (op_is_conv(m->nodes[sched[q]].op))
                        conv_backward_f32_rows(&G, sched[q], 0, 0, true);
                k = first;
            }
        } else {
            for (int t = ip->T - 1; t >= 0; t--)
                for (int k = m->nnodes - 1; k >= 0; k--)
                    node_backward(&G, ip->order[k], t, carry, snap);
        }
        for (ValueId v = 0; v < m->nnodes && !ip->failed; v++)
            if (G.pacc[v]) learned_flush(&G, v);
    }
    if (G.g)
        for (ValueId v = 0; v < m->nnodes; v++) {
            if (!(G.compiled_order && m->nodes[v].op == OP_FLATTEN)) free(G.g[v]); /* aliases */
            free(G.rg[v]);
            free(carry[v]);
            if (G.pacc) free(G.pacc[v]);
        }
    if (og)
        for (int k = 0; k < m->noutputs; k++)
            free(og[k]);
    free(og);
    free(G.g);
    free(G.rg);
    free(G.pacc);
    free(G.region);
    free(sched);
    free(carry);
    free(snap);
    free(G.scratch);
    interp_teardown(ip);
    return !ip->failed;
}
