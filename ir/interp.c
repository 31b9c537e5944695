/* The reference interpreter: runs a verified, typed module with bound weights step by step (for t,
 * for each node in topological order), in double precision (INTERP_F64) or rounding like float32
 * PyTorch on the CPU (INTERP_F32). It is the oracle every backend is checked against, so it must
 * stay obvious: no fusion, no reordering of time, no rounding changed for speed. Its only shortcuts
 * are exact ones (zero spikes skipped, values that are the same at every step computed once) and it
 * does not re-verify. */
#include "ir/interp_impl.h"
#include "runtime/f16.h"
#include "runtime/philox.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void
interp_fail(Interp *ip, const char *fmt, ...)
{
    if (ip->failed)
        return;
    ip->failed = true;
    if (!ip->err || ip->errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ip->err, ip->errlen, fmt, ap);
    va_end(ap);
}

/* calloc of n * size bytes with overflow checked; NULL (and ip failed) on failure */
void *
interp_alloc(Interp *ip, size_t n, size_t size)
{
    if (n == 0)
        n = 1;
    if (size && n > SIZE_MAX / size) {
        interp_fail(ip, "interpreter: buffer of %zu x %zu bytes is too large", n, size);
        return NULL;
    }
    void *p = calloc(n, size);
    if (!p)
        interp_fail(ip, "interpreter: out of memory (%zu bytes)", n * size);
    return p;
}

/* ---- neuron expressions ---- */

static int
count_nexpr(const NExpr *e)
{
    if (!e)
        return 0;
    int n = 1;
    for (int i = 0; i < nexpr_arity(e); i++)
        n += count_nexpr(e->args[i]);
    return n;
}

typedef struct Compiler {
    CExpr *pool;
    int n;
    const double *params;
    const double *learned; /* per parameter: its weight's value, NaN where not learned */
    bool is_f32;
} Compiler;

static const CExpr *
compile_expr(Compiler *c, const NExpr *e)
{
    CExpr *ce = &c->pool[c->n++];
    ce->kind = e->kind;
    ce->op = e->op;
    ce->idx = e->idx;
    ce->num = e->num;
    bool is_param_only = true;
    switch (e->kind) {
    case NX_NUM: break;
    case NX_PARAM:
        /* a learned parameter is a value of the run, rounded per operation as a state is */
        if (!isnan(c->learned[e->idx])) {
            ce->num = c->learned[e->idx];
            return ce;
        }
        break;
    case NX_STATE:
    case NX_LOCAL:
    case NX_INPUT:
    case NX_SPIKE: is_param_only = false; break;
    case NX_NEG:
    case NX_NOT:
    case NX_BIN:
    case NX_COND:
    case NX_CALL:
        ce->nargs = nexpr_arity(e);
        for (int i = 0; i < ce->nargs; i++) {
            ce->args[i] = compile_expr(c, e->args[i]);
            if (ce->args[i]->kind != NX_NUM)
                is_param_only = false;
        }
        break;
    }
    if (is_param_only) {
        /* fold the original tree in double: children's float roundings must not leak in */
        double x = nexpr_fold(e, c->params);
        ce->kind = NX_NUM;
        ce->nargs = 0;
        ce->num = c->is_f32 ? (double)(float)x : x;
    }
    return ce;
}

double
interp_ceval(const CExpr *e, const NCtx *c)
{
    double a[3];
    switch (e->kind) {
    case NX_NUM:
    case NX_PARAM: return e->num; /* a learned parameter's value; others are folded */
    case NX_STATE: return c->st[e->idx];
    case NX_LOCAL: return c->lc[e->idx];
    case NX_INPUT: return c->input;
    case NX_SPIKE: return c->spike;
    case NX_NEG: return -interp_ceval(e->args[0], c);
    case NX_NOT: return interp_ceval(e->args[0], c) == 0;
    case NX_BIN:
        /* && and || evaluate both sides: expressions have no side effects */
        return nexpr_apply_bin((NxBin)e->op, interp_ceval(e->args[0], c),
                               interp_ceval(e->args[1], c), c->is_f32);
    case NX_COND:
        return interp_ceval(e->args[0], c) != 0 ? interp_ceval(e->args[1], c)
                                                : interp_ceval(e->args[2], c);
    case NX_CALL:
        for (int i = 0; i < e->nargs; i++)
            a[i] = interp_ceval(e->args[i], c);
        return nexpr_apply_call((NFunc)e->op, a, c->is_f32);
    }
    unreachable();
}

static bool
setup_neuron(Interp *ip, ValueId v)
{
    const Module *m = ip->m;
    const Node *n = &m->nodes[v];
    NodeRun *r = &ip->nodes[v];
    if (n->neuron < 0 || n->neuron >= m->nneurons) {
        interp_fail(ip, "interpreter: node %d has no neuron definition", (int)v);
        return false;
    }
    const NeuronDef *nd = m->neurons[n->neuron];
    NeuronRun *nr = interp_alloc(ip, 1, sizeof *nr);
    if (!nr)
        return false;
    r->neuron = nr;
    nr->nd = nd;

    double *defaults = NULL;
    const double *params = n->params;
    if (!params) {
        defaults = interp_alloc(ip, (size_t)nd->nparams, sizeof *defaults);
        if (!defaults)
            return false;
        for (int i = 0; i < nd->nparams; i++)
            defaults[i] = nd->params[i].def;
        params = defaults;
    }

    int total = 0;
    for (int s = 0; s < nd->nstmts; s++)
        total += count_nexpr(nd->stmts[s].e);
    nr->pool = interp_alloc(ip, (size_t)total, sizeof *nr->pool);
    nr->stmt_e = interp_alloc(ip, (size_t)nd->nstmts, sizeof *nr->stmt_e);
    nr->init = interp_alloc(ip, (size_t)nd->nstates, sizeof *nr->init);
    if (!nr->pool || !nr->stmt_e || !nr->init) {
        free(defaults);
        return false;
    }
    double *learned = interp_alloc(ip, (size_t)nd->nparams + 1, sizeof *learned);
    if (!learned) {
        free(defaults);
        return false;
    }
    for (int i = 0; i < nd->nparams; i++) {
        int w = node_param_weight(m, n, i);
        learned[i] = w < 0 ? NAN : m->weights[w].data ? m->weights[w].data[0] : params[i];
        if (!isnan(learned[i]) && ip->is_f32) learned[i] = (float)learned[i];
    }
    Compiler c = {nr->pool, 0, params, learned, ip->is_f32};
    nr->has_output = nd->has_output;
    nr->has_refractory = nd->has_refractory;
    for (int s = 0; s < nd->nstmts; s++) {
        const NStmt *st = &nd->stmts[s];
        nr->stmt_e[s] = st->e ? compile_expr(&c, st->e) : NULL;
        if (st->kind == NS_OUTPUT) {
            nr->has_output = true;
            nr->output_e = nr->stmt_e[s];
        }
        if (st->kind == NS_REFRACTORY)
            nr->has_refractory = true;
    }
    for (int k = 0; k < nd->nstates; k++) {
        const NExpr *init = nd->states[k].init;
        nr->init[k] = init ? ip_rnd(ip, nexpr_fold(init, params)) : 0.0;
    }
    free(defaults);
    free(learned);

    size_t nj = (size_t)ip->chunk * (size_t)r->numel;
    nr->states = interp_alloc(ip, nj * (size_t)(nd->nstates ? nd->nstates : 1), sizeof(double));
    nr->locals = interp_alloc(ip, nj * (size_t)(nd->nlocals ? nd->nlocals : 1), sizeof(double));
    nr->spike = interp_alloc(ip, nj, sizeof(double));
    nr->refr = interp_alloc(ip, nj, sizeof(int32_t));
    if (ip->smooth) {
        char why[256];
        if (!neuron_surrogate(nd, &nr->sg, why, sizeof why)) {
            interp_fail(ip, "layer '%s' (%s): %s", n->name ? n->name : "?", nd->name, why);
            return false;
        }
    }
    if (ip->keep_all) {
        size_t ntj = (size_t)ip->T * nj;
        nr->h_states =
            interp_alloc(ip, ntj * (size_t)(nd->nstates ? nd->nstates : 1), sizeof(double));
        nr->h_locals =
            interp_alloc(ip, ntj * (size_t)(nd->nlocals ? nd->nlocals : 1), sizeof(double));
        nr->h_spike = interp_alloc(ip, ntj, sizeof(double));
    }
    return !ip->failed;
}

void
interp_reset_neuron(const Interp *ip, NodeRun *r)
{
    NeuronRun *nr = r->neuron;
    int ns = nr->nd->nstates, nl = nr->nd->nlocals;
    size_t nj = (size_t)ip->nb * (size_t)r->numel;
    for (size_t j = 0; j < nj; j++) {
        for (int k = 0; k < ns; k++)
            nr->states[j * (size_t)ns + (size_t)k] = nr->init[k];
        for (int k = 0; k < nl; k++)
            nr->locals[j * (size_t)nl + (size_t)k] = 0.0;
        nr->spike[j] = 0.0;
        nr->refr[j] = 0;
    }
}

/* the variable a statement writes */
static double *
target(const NCtx *c, const NStmt *st)
{
    return st->is_local ? &c->lc[st->var] : &c->st[st->var];
}

/* floor(x) as a step count, saturated: NaN and negatives give 0 */
static int32_t
refractory_steps(double x)
{
    if (!(x >= 1))
        return 0;
    if (x > 1e9)
        return 1000000000;
    return (int32_t)floor(x);
}

/* the smooth stand-in of `fire a >= b` (or >, <=, <): the surrogate's primitive of a - b (b - a) */
static double
smooth_spike(const NeuronRun *nr, const CExpr *e, const NCtx *c)
{
    double x = interp_ceval(e->args[0], c), y = interp_ceval(e->args[1], c);
    bool up = e->op == NB_GE || e->op == NB_GT;
    return surrogate_primitive(&nr->sg, up ? x - y : y - x);
}

/* One step of every neuron of the layer (semantics in ir.h and the NeuronDef statement kinds). */
static void
eval_neuron(Interp *ip, ValueId v, int t, double *spike_counts)
{
    const Node *n = &ip->m->nodes[v];
    NodeRun *r = &ip->nodes[v];
    NeuronRun *nr = r->neuron;
    const NeuronDef *nd = nr->nd;
    const double *x = ip_val(ip, n->args[0], t);
    double *y = ip_val(ip, v, t);
    size_t nj = (size_t)ip->nb * (size_t)r->numel;
    if (nr->h_states) {
        size_t ns = (size_t)nd->nstates, nl = (size_t)nd->nlocals,
               cj = (size_t)ip->chunk * (size_t)r->numel;
        memcpy(nr->h_states + (size_t)t * cj * ns, nr->states, nj * ns * sizeof(double));
        memcpy(nr->h_locals + (size_t)t * cj * nl, nr->locals, nj * nl * sizeof(double));
        memcpy(nr->h_spike + (size_t)t * cj, nr->spike, nj * sizeof(double));
    }
    double nspikes = 0;
    for (size_t j = 0; j < nj; j++) {
        NCtx c = {nr->states + j * (size_t)nd->nstates, nr->locals + j * (size_t)nd->nlocals, x[j],
                  nr->spike[j], ip->is_f32};
        double out = 0;
        if (nr->has_refractory && nr->refr[j] > 0) {
            /* refractory: state held, no spike; the output expression still reads the state */
            nr->refr[j]--;
            c.spike = 0;
            if (nr->output_e)
                out = interp_ceval(nr->output_e, &c);
        } else {
            for (int s = 0; s < nd->nstmts; s++) {
                const NStmt *st = &nd->stmts[s];
                const CExpr *e = nr->stmt_e[s];
                switch (st->kind) {
                case NS_ASSIGN: *target(&c, st) = interp_ceval(e, &c); break;
                case NS_FIRE:
                    c.spike = ip->smooth ? smooth_spike(nr, e, &c)
                                         : interp_ceval(e, &c) != 0 ? 1.0 : 0.0;
                    break;
                case NS_FIRE_DOWN:
                    if (c.spike == 0 && interp_ceval(e, &c) != 0)
                        c.spike = -1.0;
                    break;
                case NS_RESET_TO:
                    if (ip->smooth) /* S e + (1 - S) v, as SpikingJelly writes the hard reset */
                        *target(&c, st) =
                            c.spike * interp_ceval(e, &c) + (1 - c.spike) * *target(&c, st);
                    else if (c.spike != 0)
                        *target(&c, st) = interp_ceval(e, &c);
                    break;
                case NS_RESET_SUB: {
                    double *var = target(&c, st);
                    *var = ip_rnd(ip, *var - ip_rnd(ip, c.spike * interp_ceval(e, &c)));
                    break;
                }
                case NS_REFRACTORY:
                    if (c.spike != 0)
                        nr->refr[j] = refractory_steps(interp_ceval(e, &c));
                    break;
                case NS_OUTPUT: out = interp_ceval(e, &c); break;
                }
            }
        }
        nr->spike[j] = c.spike;
        y[j] = nr->has_output ? out : c.spike;
        nspikes += fabs(c.spike);
    }
    if (spike_counts && !nr->has_output)
        spike_counts[v] += nspikes;
}

/* ---- layer ops ---- */

/* acc[0..n) += x * w[0..n): in double, or under `accumulate f32` (F32 mode) in float with one
 * fused multiply-add per term, as every backend adds */
static void
add_row(const Interp *ip, double *acc, double x, const float *w, int64_t n)
{
    if (ip->is_f32_sums)
        for (int64_t o = 0; o < n; o++)
            acc[o] = fmaf((float)x, w[o], (float)acc[o]);
    else
        for (int64_t o = 0; o < n; o++)
            acc[o] += x * w[o];
}

/* y = x W^T + b per sample, as a sum over inputs of x[i] * (row i of W^T): rows are contiguous and
 * a zero spike skips its row. From the bias, in input order; accumulated in double and rounded
 * once in F32 mode, or under `accumulate f32` in float with one fused multiply-add per term (what
 * every backend computes, in the same order). */
static void
eval_dense(Interp *ip, ValueId v, int t)
{
    const Node *n = &ip->m->nodes[v];
    const NodeRun *r = &ip->nodes[v];
    int64_t in = ip->nodes[n->args[0]].numel, out = r->numel;
    const float *bias = (int)node_attr_i(n, "bias", 0) ? ip_weight(ip, n, 1)->data : NULL;
    const double *x = ip_val(ip, n->args[0], t);
    double *y = ip_val(ip, v, t);
    double *acc = ip->scratch;
    for (int b = 0; b < ip->nb; b++) {
        const double *xb = x + (size_t)b * (size_t)in;
        for (int64_t o = 0; o < out; o++)
            acc[o] = bias ? bias[o] + 0.0 : 0.0; /* a -0 bias starts the sum at +0 */
        for (int64_t i = 0; i < in; i++) {
            double xi = xb[i];
            if (xi == 0 && r->is_spike_input)
                continue;
            add_row(ip, acc, xi, r->wt + (size_t)i * (size_t)out, out);
        }
        double *yb = y + (size_t)b * (size_t)out;
        for (int64_t o = 0; o < out; o++)
            yb[o] = ip_rnd(ip, acc[o]);
    }
}

/* PyTorch Conv2d: y[o][oh][ow] = b[o] + sum over c in o's group, kh, kw of
 * W[o][c - group start][kh][kw] * x[c][oh*s - p + kh*d][ow*s - p + kw*d] (zero outside).
 * Gathered per output pixel in the order every backend sums it: taps (kh, kw) outer, input
 * channels inner (a zero spike skipped), each adding its row of the weight transposed to
 * [C][KH][KW][O/G] into the pixel's O accumulators; then + bias. In double, rounded once in F32
 * mode; under `accumulate f32` in float, one fused multiply-add per term. */
static void
eval_conv2d(Interp *ip, ValueId v, int t)
{
    const Node *n = &ip->m->nodes[v];
    const NodeRun *r = &ip->nodes[v];
    ConvGeom g = conv_geom(ip->m, n);
    int64_t Cg = g.C / g.G, Og = g.O / g.G;
    const float *bias = (int)node_attr_i(n, "bias", 0) ? ip_weight(ip, n, 1)->data : NULL;
    const double *x = ip_val(ip, n->args[0], t);
    double *y = ip_val(ip, v, t);
    double *acc = ip->scratch;
    size_t npix = (size_t)(g.OH * g.OW);
    for (int b = 0; b < ip->nb; b++) {
        const double *xb = x + (size_t)b * (size_t)(g.C * g.H * g.W);
        double *yb = y + (size_t)b * (size_t)r->numel;
        for (int64_t oh = 0; oh < g.OH; oh++) {
            for (int64_t ow = 0; ow < g.OW; ow++) {
                memset(acc, 0, (size_t)g.O * sizeof *acc);
                for (int64_t kh = 0; kh < g.KH; kh++) {
                    int64_t ih = oh * g.SH - g.PH + kh * g.DH;
                    if (ih < 0 || ih >= g.H) continue;
                    for (int64_t kw = 0; kw < g.KW; kw++) {
                        int64_t iw = ow * g.SW - g.PW + kw * g.DW;
                        if (iw < 0 || iw >= g.W) continue;
                        for (int64_t c = 0; c < g.C; c++) {
                            double xv = xb[(c * g.H + ih) * g.W + iw];
                            if (xv == 0 && r->is_spike_input) continue;
                            add_row(ip, acc + (c / Cg) * Og, xv,
                                    r->wt + ((c * g.KH + kh) * g.KW + kw) * Og, Og);
                        }
                    }
                }
                size_t p = (size_t)(oh * g.OW + ow);
                for (int64_t o = 0; o < g.O; o++)
                    yb[(size_t)o * npix + p] = ip_rnd(ip, acc[o] + (bias ? bias[o] : 0.0));
            }
        }
    }
}

/* max/avg/sum pooling over [C][H][W]; stride 0 means stride = kernel; no ceil mode */
static void
eval_pool(Interp *ip, ValueId v, int t)
{
    const Node *n = &ip->m->nodes[v];
    const Type *xt = &ip->m->nodes[n->args[0]].type;
    int64_t C = xt->dims[0], H = xt->dims[1], W = xt->dims[2];
    int64_t OH = n->type.dims[1], OW = n->type.dims[2];
    int KH = (int)node_attr_i(n, "kernel", 0), KW = (int)node_attr_i(n, "kernel", 1);
    int SH = (int)node_attr_i(n, "stride", 0), SW = (int)node_attr_i(n, "stride", 1);
    int PH = (int)node_attr_i(n, "pad", 0), PW = (int)node_attr_i(n, "pad", 1);
    if (SH == 0)
        SH = KH;
    if (SW == 0)
        SW = KW;
    const double *x = ip_val(ip, n->args[0], t);
    double *y = ip_val(ip, v, t);
    for (int b = 0; b < ip->nb; b++) {
        const double *xb = x + (size_t)b * (size_t)(C * H * W);
        double *yb = y + (size_t)b * (size_t)(C * OH * OW);
        for (int64_t c = 0; c < C; c++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    /* padding: -inf for max (never wins), 0 for sums (adds nothing) */
                    double a = n->op == OP_MAXPOOL2D ? -INFINITY : 0.0;
                    for (int kh = 0; kh < KH; kh++) {
                        int64_t ih = oh * SH - PH + kh;
                        if (ih < 0 || ih >= H)
                            continue;
                        for (int kw = 0; kw < KW; kw++) {
                            int64_t iw = ow * SW - PW + kw;
                            if (iw < 0 || iw >= W)
                                continue;
                            double xv = xb[(c * H + ih) * W + iw];
                            if (n->op != OP_MAXPOOL2D)
                                a += xv;
                            else if (xv > a || isnan(xv)) /* NaN propagates, as in PyTorch */
                                a = xv;
                        }
                    }
                    if (n->op == OP_AVGPOOL2D)
                        a /= (double)KH * KW; /* count_include_pad=True */
                    yb[(c * OH + oh) * OW + ow] = ip_rnd(ip, a);
                }
    }
}

/* A batchnorm's statistics over its whole input (every step: the backward pass runs layer by
 * layer, so they are all there; a static value's one), per channel, in double as PyTorch's CPU
 * kernels accumulate them: the mean, the biased variance and 1 / sqrt(var + eps). Each sum is
 * each row's (step and sample) sum over the positions, then the rows' in order: every backend
 * sums so (a GPU a thread per row and channel, then per channel: docs/design.md) */
static void
batch_statistics(Interp *ip, ValueId v)
{
    const Node *n = &ip->m->nodes[v];
    NodeRun *r = &ip->nodes[v];
    int64_t C = n->type.rank > 0 ? n->type.dims[0] : 1, inner = C ? r->numel / C : 0;
    int steps = r->is_static ? 1 : ip->T;
    double cnt = (double)steps * ip->nb * (double)inner, eps = node_attr_f(n, "eps");
    for (int64_t c = 0; c < C; c++) {
        double sum = 0, sq = 0;
        for (int t = 0; t < steps; t++) {
            const double *x = ip_val(ip, n->args[0], t);
            for (int b = 0; b < ip->nb; b++) {
                double part = 0; /* each row's positions, then the rows */
                for (int64_t i = 0; i < inner; i++)
                    part += x[(size_t)b * (size_t)r->numel + (size_t)(c * inner + i)];
                sum += part;
            }
        }
        double mean = sum / cnt;
        for (int t = 0; t < steps; t++) {
            const double *x = ip_val(ip, n->args[0], t);
            for (int b = 0; b < ip->nb; b++) {
                double part = 0;
                for (int64_t i = 0; i < inner; i++) {
                    double d = x[(size_t)b * (size_t)r->numel + (size_t)(c * inner + i)] - mean;
                    part += d * d;
                }
                sq += part;
            }
        }
        r->bn_mean[c] = ip_rnd(ip, mean);
        r->bn_var[c] = sq / cnt;
        r->bn_invstd[c] = ip_rnd(ip, 1.0 / sqrt(sq / cnt + eps));
    }
}

/* inference batch norm over the first sample dimension */
static void
eval_batchnorm(Interp *ip, ValueId v, int t)
{
    const Node *n = &ip->m->nodes[v];
    const NodeRun *r = &ip->nodes[v];
    int64_t C = n->type.rank > 0 ? n->type.dims[0] : 1;
    int64_t inner = C ? r->numel / C : 0;
    const float *w = ip_weight(ip, n, 0)->data, *bias = ip_weight(ip, n, 1)->data;
    const float *mean = ip_weight(ip, n, 2)->data, *var = ip_weight(ip, n, 3)->data;
    double eps = node_attr_f(n, "eps");
    const double *x = ip_val(ip, n->args[0], t);
    double *y = ip_val(ip, v, t);
    if (ip->batch_stats) {
        if (t == 0 || !r->is_static) {
            if (t == 0)
                batch_statistics(ip, v);
            for (int b = 0; b < ip->nb; b++)
                for (int64_t c = 0; c < C; c++) {
                    size_t base = (size_t)b * (size_t)r->numel + (size_t)(c * inner);
                    for (int64_t i = 0; i < inner; i++)
                        y[base + (size_t)i] =
                            ip_rnd(ip, ip_rnd(ip, (x[base + (size_t)i] - r->bn_mean[c]) *
                                                      r->bn_invstd[c]) *
                                               w[c] +
                                           bias[c]);
                }
        }
        return;
    }
    for (int b = 0; b < ip->nb; b++)
        for (int64_t c = 0; c < C; c++) {
            double sd = sqrt((double)var[c] + eps);
            size_t base = (size_t)b * (size_t)r->numel + (size_t)(c * inner);
            for (int64_t i = 0; i < inner; i++)
                y[base + (size_t)i] =
                    ip_rnd(ip, (x[base + (size_t)i] - mean[c]) / sd * w[c] + bias[c]);
        }
}

static void
eval_elementwise(Interp *ip, ValueId v, int t)
{
    const Node *n = &ip->m->nodes[v];
    size_t nj = (size_t)ip->nb * (size_t)ip->nodes[v].numel;
    const double *a = ip_val(ip, n->args[0], t);
    const double *b = n->nargs > 1 ? ip_val(ip, n->args[1], t) : NULL;
    double *y = ip_val(ip, v, t);
    /* a constant factor is a Python float in PyTorch: rounded to float32 once, then multiplied */
    double factor = n->op == OP_SCALE ? ip_rnd(ip, node_attr_f(n, "factor")) : 0;
    double divisor = n->op == OP_SCALE ? ip_rnd(ip, node_attr_f(n, "divisor")) : 1;
    for (size_t j = 0; j < nj; j++) {
        double r;
        switch (n->op) {
        case OP_ADD: r = a[j] + b[j]; break;
        case OP_SUB: r = a[j] - b[j]; break;
        case OP_MUL: r = a[j] * b[j]; break;
        case OP_SCALE:
            r = factor == 1 ? a[j] : factor * a[j];
            if (divisor != 1)
                r = ip_rnd(ip, r) / divisor;
            break;
        default: unreachable();
        }
        y[j] = ip_rnd(ip, r);
    }
}

static void
eval_input(Interp *ip, ValueId v, int t)
{
    const Node *n = &ip->m->nodes[v];
    const NodeRun *r = &ip->nodes[v];
    const float *src = ip->inputs[r->input_index];
    double *y = ip_val(ip, v, t);
    size_t numel = (size_t)r->numel;
    for (int b = 0; b < ip->nb; b++) {
        int64_t s = ip->b0 + b; /* sample within the caller's batch */
        const float *p = n->is_per_step_input
                             ? src + ((size_t)s * (size_t)ip->T + (size_t)t) * numel
                             : src + (size_t)s * numel;
        for (size_t i = 0; i < numel; i++)
            y[(size_t)b * numel + i] = p[i];
    }
}

/* s = u < gain*x, u keyed by (seed, stream, step, global sample * numel + i); compared in float */
static void
eval_poisson(Interp *ip, ValueId v, int t)
{
    const Node *n = &ip->m->nodes[v];
    const NodeRun *r = &ip->nodes[v];
    int64_t node_seed = n->attrs[op_attr_index(OP_POISSON, "seed")].i[0];
    uint64_t seed = node_seed >= 0 ? (uint64_t)node_seed : ip->seed;
    double gain = ip_rnd(ip, node_attr_f(n, "gain"));
    const double *x = ip_val(ip, n->args[0], t);
    double *y = ip_val(ip, v, t);
    size_t numel = (size_t)r->numel;
    for (int b = 0; b < ip->nb; b++) {
        uint64_t first = (uint64_t)(ip->sample_base + ip->b0 + b) * (uint64_t)numel;
        for (size_t i = 0; i < numel; i++) {
            size_t j = (size_t)b * numel + i;
            float p = (float)(gain * x[j]);
            /* u is in [0, 1): p <= 0 (or NaN) never fires and p >= 1 always does, so those
             * draws are skipped (dark pixels are half of Fashion-MNIST) */
            if (!(p > 0))
                y[j] = 0.0;
            else if (p >= 1)
                y[j] = 1.0;
            else
                y[j] = rt_uniform(seed, r->stream, (uint32_t)t, first + i) < p ? 1.0 : 0.0;
        }
    }
}

static void
eval_state(Interp *ip, ValueId v, int t)
{
    const Node *n = &ip->m->nodes[v];
    const NodeRun *r = &ip->nodes[v];
    const NeuronRun *nr = ip->nodes[n->args[0]].neuron;
    int ns = nr->nd->nstates, nl = nr->nd->nlocals;
    double *y = ip_val(ip, v, t);
    size_t nj = (size_t)ip->nb * (size_t)r->numel;
    for (size_t j = 0; j < nj; j++)
        y[j] = r->state_var >= 0 ? nr->states[j * (size_t)ns + (size_t)r->state_var]
                                 : nr->locals[j * (size_t)nl + (size_t)(-1 - r->state_var)];
}

static void
eval_readout(Interp *ip, ValueId v, int t)
{
    const Node *n = &ip->m->nodes[v];
    NodeRun *r = &ip->nodes[v];
    const double *x = ip_val(ip, n->args[0], t);
    size_t nj = (size_t)ip->nb * (size_t)r->numel;
    if (n->op == OP_SEQUENCE) {
        memcpy(ip_val(ip, v, t), x, nj * sizeof *x);
        return;
    }
    for (size_t j = 0; j < nj; j++) {
        double *a = &r->acc[j];
        switch (n->op) {
        case OP_COUNT:
        case OP_MEAN: /* from +0, as torch's sum: all -0 steps sum to +0 */
            *a = (t == 0 ? 0.0 : *a) + x[j];
            break;
        case OP_LAST: *a = x[j]; break;
        case OP_MAX:
            if (t == 0 || x[j] > *a || isnan(x[j]))
                *a = x[j];
            break;
        default: unreachable();
        }
    }
}

/* a layer's output stored narrower (Node.astore): its f32 values rounded to that type */
static void
round_activations(Interp *ip, ValueId v, int t)
{
    WeightStore as = ip->m->nodes[v].astore;
    if (as == WSTORE_F32) return;
    double *y = ip_val(ip, v, t);
    for (int64_t i = 0, n = (int64_t)ip->nb * ip->nodes[v].numel; i < n; i++)
        y[i] = as == WSTORE_F16 ? rt_f16_to_f32(rt_f32_to_f16((float)y[i]))
                                : rt_bf16_to_f32(rt_f32_to_bf16((float)y[i]));
}

void
interp_eval_node(Interp *ip, ValueId v, int t, double *spike_counts)
{
    const Node *n = &ip->m->nodes[v];
    const NodeRun *r = &ip->nodes[v];
    if (r->is_static && t > 0) {
        /* the value of step 0 is still in its slot when one step is kept; else copy it on */
        if (r->hist > 1)
            memcpy(ip_val(ip, v, t), ip_val(ip, v, t - 1),
                   (size_t)ip->nb * (size_t)r->numel * sizeof(double));
        return;
    }
    switch (n->op) {
    case OP_INPUT: eval_input(ip, v, t); break;
    case OP_POISSON: eval_poisson(ip, v, t); break;
    case OP_DENSE:
        eval_dense(ip, v, t);
        round_activations(ip, v, t);
        break;
    case OP_CONV2D:
    case OP_CONV1D:
        eval_conv2d(ip, v, t);
        round_activations(ip, v, t);
        break;
    case OP_MAXPOOL2D:
    case OP_AVGPOOL2D:
    case OP_SUMPOOL2D: eval_pool(ip, v, t); break;
    case OP_FLATTEN:
        memcpy(ip_val(ip, v, t), ip_val(ip, n->args[0], t),
               (size_t)ip->nb * (size_t)ip->nodes[v].numel * sizeof(double));
        break;
    case OP_BATCHNORM: eval_batchnorm(ip, v, t); break;
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_SCALE: eval_elementwise(ip, v, t); break;
    case OP_DELAY: {
        int steps = (int)node_attr_i(n, "steps", 0);
        size_t nbytes = (size_t)ip->nb * (size_t)ip->nodes[v].numel * sizeof(double);
        if (t >= steps && steps >= 0)
            memcpy(ip_val(ip, v, t), ip_val(ip, n->args[0], t - steps), nbytes);
        else
            memset(ip_val(ip, v, t), 0, nbytes);
        break;
    }
    case OP_NEURON: eval_neuron(ip, v, t, spike_counts); break;
    case OP_STATE: eval_state(ip, v, t); break;
    case OP_COUNT:
    case OP_MEAN:
    case OP_LAST:
    case OP_MAX:
    case OP_SEQUENCE: eval_readout(ip, v, t); break;
    case OP_GRAD: /* a train-step module's backward: the driver runs forwards only here */
    case OP_GRAD_WEIGHT:
    case OP_COUNT_: unreachable();
    }
}

static bool
is_step_readout(Op op)
{
    return op == OP_COUNT || op == OP_MEAN || op == OP_LAST || op == OP_MAX;
}

/* Outputs with a time axis are written each step ([B][T][numel]); the others once, at the end. */
void
interp_write_step_outputs(Interp *ip, int t)
{
    const Module *m = ip->m;
    for (int k = 0; k < m->noutputs; k++) {
        ValueId v = m->outputs[k];
        const Node *n = &m->nodes[v];
        if (is_step_readout(n->op) || !n->type.has_time)
            continue;
        size_t numel = (size_t)ip->nodes[v].numel;
        const double *y = ip_val(ip, v, t);
        for (int b = 0; b < ip->nb; b++) {
            float *o = ip->outputs[k] + ((size_t)(ip->b0 + b) * (size_t)ip->T + (size_t)t) * numel;
            for (size_t i = 0; i < numel; i++)
                o[i] = (float)y[(size_t)b * numel + i];
        }
    }
}

void
interp_write_final_outputs(Interp *ip)
{
    const Module *m = ip->m;
    for (int k = 0; k < m->noutputs; k++) {
        ValueId v = m->outputs[k];
        const Node *n = &m->nodes[v];
        bool is_readout = is_step_readout(n->op);
        if (!is_readout && n->type.has_time)
            continue;
        size_t numel = (size_t)ip->nodes[v].numel;
        const double *y = is_readout ? ip->nodes[v].acc : ip_val(ip, v, ip->T - 1);
        for (int b = 0; b < ip->nb; b++) {
            float *o = ip->outputs[k] + (size_t)(ip->b0 + b) * numel;
            for (size_t i = 0; i < numel; i++) {
                double r = y[(size_t)b * numel + i];
                if (n->op == OP_MEAN)
                    r /= ip->T;
                o[i] = (float)ip_rnd(ip, r);
            }
        }
    }
}

/* Per-node buffers, transposed weights and neuron programs; false (err set) on failure. */
bool
interp_setup(Interp *ip)
{
    const Module *m = ip->m;
    ip->order = interp_alloc(ip, (size_t)m->nnodes, sizeof *ip->order);
    ip->nodes = interp_alloc(ip, (size_t)m->nnodes, sizeof *ip->nodes);
    if (ip->failed)
        return false;
    if (ir_topo_order(m, ip->order) != m->nnodes) {
        interp_fail(ip, "interpreter: the module's nodes have no topological order");
        return false;
    }
    uint32_t npoisson = 0;
    for (ValueId v = 0; v < m->nnodes; v++) {
        NodeRun *r = &ip->nodes[v];
        r->numel = type_numel(&m->nodes[v].type);
        r->hist = 1;
        r->input_index = -1;
        if (m->nodes[v].op == OP_POISSON) {
            int64_t s = m->nodes[v].attrs[op_attr_index(OP_POISSON, "stream")].i[0];
            r->stream = s >= 0 ? (uint32_t)s : npoisson;
            npoisson++;
        }
    }
    for (int k = 0; k < m->ninputs; k++)
        ip->nodes[m->inputs[k]].input_index = k;
    /* static values (the same at every step) are computed once, at t = 0 */
    bool *is_static = calloc((size_t)m->nnodes + 1, sizeof *is_static);
    if (!is_static) {
        interp_fail(ip, "interpreter: out of memory");
        return false;
    }
    ir_fill_static(m, ip->order, is_static);
    for (ValueId v = 0; v < m->nnodes; v++)
        ip->nodes[v].is_static = is_static[v];
    free(is_static);
    /* a delay by s steps needs s + 1 steps of its operand (fewer when s >= T: it reads nothing);
     * the backward pass needs every step of every node */
    if (ip->keep_all) /* a static value is the same at every step: one slot */
        for (ValueId v = 0; v < m->nnodes; v++)
            ip->nodes[v].hist = ip->nodes[v].is_static ? 1 : ip->T;
    for (ValueId v = 0; v < m->nnodes; v++) {
        const Node *n = &m->nodes[v];
        if (n->op != OP_DELAY)
            continue;
        int steps = (int)node_attr_i(n, "steps", 0);
        NodeRun *a = &ip->nodes[n->args[0]];
        if (steps >= 0 && steps < ip->T && steps + 1 > a->hist)
            a->hist = steps + 1;
    }

    /* the chunk: as many samples as fit in about 256 MiB of values, at most INTERP_CHUNK */
    double per_sample = 0;
    for (ValueId v = 0; v < m->nnodes; v++)
        per_sample += (double)ip->nodes[v].hist * (double)ip->nodes[v].numel * sizeof(double);
    double fit = per_sample > 0 ? (256.0 * 1024 * 1024) / per_sample : INTERP_CHUNK;
    ip->chunk = fit < 1 ? 1 : fit > INTERP_CHUNK ? INTERP_CHUNK : (int)fit;
    if (ip->chunk > ip->batch)
        ip->chunk = (int)ip->batch;
    bool has_bn = false;
    for (ValueId v = 0; v < m->nnodes; v++)
        has_bn |= m->nodes[v].op == OP_BATCHNORM;
    if (((ip->batch_stats && has_bn) || ip->one_pass) && ip->chunk < ip->batch) {
        /* the statistics are the whole batch's (and interp_grad's float32 sums run over all its
         * rows in order): one pass, if it fits in 16 GiB */
        if (per_sample * (double)ip->batch > 16.0 * 1024 * 1024 * 1024) {
            interp_fail(ip,
                        "interpreter: a batch of %lld needs %.1f GiB in one pass (batchnorm's "
                        "batch statistics, float32 gradient sums in order); give a smaller batch",
                        (long long)ip->batch, per_sample * (double)ip->batch / (1 << 30));
            return false;
        }
        ip->chunk = (int)ip->batch;
    }

    size_t scratch = 1;
    for (ValueId v = 0; v < m->nnodes && !ip->failed; v++) {
        const Node *n = &m->nodes[v];
        NodeRun *r = &ip->nodes[v];
        r->buf = interp_alloc(ip, (size_t)r->hist * (size_t)ip->chunk * (size_t)r->numel,
                              sizeof(double));
        if (is_step_readout(n->op))
            r->acc = interp_alloc(ip, (size_t)ip->chunk * (size_t)r->numel, sizeof(double));
        if (n->op == OP_INPUT && r->input_index < 0)
            interp_fail(ip, "interpreter: input node %d is not in the module's input list", (int)v);
        if (op_info(n->op)->nweights > 0) {
            int nslots = n->op == OP_BATCHNORM ? 4 : (int)node_attr_i(n, "bias", 0) ? 2 : 1;
            if (n->first_weight < 0 || n->first_weight + nslots > m->nweights) {
                interp_fail(ip, "interpreter: layer '%s' has no weight slots",
                            node_layer_name(m, n));
                break;
            }
            for (int s = 0; s < nslots; s++)
                if (!ip_weight(ip, n, s)->data)
                    interp_fail(ip, "interpreter: weight '%s' is not bound",
                                ip_weight(ip, n, s)->name);
            if (ip->failed)
                break;
        }
        if (n->op == OP_DENSE || op_is_conv(n->op)) {
            ValueId a = n->args[0];
            r->is_spike_input = !ip->adds_zero_spikes && (m->nodes[a].type.dtype == DT_SPIKE ||
                                                          m->nodes[a].type.dtype == DT_I8);
        }
        if (n->op == OP_DENSE) {
            int64_t in = ip->nodes[n->args[0]].numel, out = r->numel;
            const Weight *w = ip_weight(ip, n, 0);
            if (w->numel != in * out ||
                ((int)node_attr_i(n, "bias", 0) && ip_weight(ip, n, 1)->numel != out)) {
                interp_fail(ip, "interpreter: weights of '%s' do not match its shape",
                     node_layer_name(m, n));
                break;
            }
            r->wt = interp_alloc(ip, (size_t)w->numel, sizeof(float));
            if (!r->wt)
                break;
            for (int64_t o = 0; o < out; o++)
                for (int64_t i = 0; i < in; i++)
                    r->wt[i * out + o] = w->data[o * in + i];
            if ((size_t)out > scratch)
                scratch = (size_t)out;
        }
        if (op_is_conv(n->op)) {
            ConvGeom g = conv_geom(ip->m, n);
            const Weight *w = ip_weight(ip, n, 0);
            bool ok = g.G > 0 && g.C % g.G == 0 && g.O % g.G == 0 && g.SH > 0 && g.SW > 0 &&
                      w->numel == g.O * (g.C / g.G) * g.KH * g.KW &&
                      (!(int)node_attr_i(n, "bias", 0) || ip_weight(ip, n, 1)->numel == g.O);
            if (!ok) {
                interp_fail(ip, "interpreter: %s '%s' has inconsistent shapes",
                            op_info(n->op)->name, node_layer_name(m, n));
                break;
            }
            int64_t Cg = g.C / g.G, Og = g.O / g.G, K = (int64_t)g.KH * g.KW;
            r->wt = interp_alloc(ip, (size_t)w->numel, sizeof(float));
            if (!r->wt)
                break;
            for (int64_t o = 0; o < g.O; o++)
                for (int64_t cg = 0; cg < Cg; cg++)
                    for (int64_t k = 0; k < K; k++) {
                        int64_t c = (o / Og) * Cg + cg; /* the input channel */
                        r->wt[(c * K + k) * Og + o % Og] = w->data[(o * Cg + cg) * K + k];
                    }
            if ((size_t)g.O > scratch) scratch = (size_t)g.O;
        }
        if (n->op == OP_BATCHNORM) {
            int64_t C = n->type.rank > 0 ? n->type.dims[0] : 1;
            if (ip->batch_stats) {
                r->bn_mean = interp_alloc(ip, (size_t)C, sizeof(double));
                r->bn_invstd = interp_alloc(ip, (size_t)C, sizeof(double));
                r->bn_var = interp_alloc(ip, (size_t)C, sizeof(double));
            }
            for (int s = 0; s < 4; s++)
                if (ip_weight(ip, n, s)->numel != C)
                    interp_fail(ip, "interpreter: batchnorm '%s' weights do not match its channels",
                         node_layer_name(m, n));
        }
        if (n->op == OP_NEURON)
            setup_neuron(ip, v);
        if (n->op == OP_STATE) {
            const Node *a = &m->nodes[n->args[0]];
            const char *var = n->attrs[op_attr_index(OP_STATE, "var")].s;
            r->state_var = INT32_MIN;
            if (a->op == OP_NEURON && a->neuron >= 0 && var) {
                const NeuronDef *nd = m->neurons[a->neuron];
                for (int k = 0; k < nd->nstates; k++)
                    if (strcmp(nd->states[k].name, var) == 0)
                        r->state_var = k;
                for (int k = 0; k < nd->nlocals && r->state_var == INT32_MIN; k++)
                    if (strcmp(nd->locals[k], var) == 0)
                        r->state_var = -1 - k;
            }
            if (r->state_var == INT32_MIN)
                interp_fail(ip, "interpreter: state probe %d names no state of its neuron", (int)v);
        }
    }
    if (!ip->failed)
        ip->scratch = interp_alloc(ip, scratch, sizeof(double));
    return !ip->failed;
}

void
interp_teardown(Interp *ip)
{
    if (ip->nodes)
        for (ValueId v = 0; v < ip->m->nnodes; v++) {
            NodeRun *r = &ip->nodes[v];
            free(r->buf);
            free(r->acc);
            free(r->wt);
            free(r->bn_mean);
            free(r->bn_invstd);
            free(r->bn_var);
            if (r->neuron) {
                NeuronRun *nr = r->neuron;
                free(nr->pool);
                free(nr->stmt_e);
                free(nr->init);
                free(nr->states);
                free(nr->locals);
                free(nr->spike);
                free(nr->refr);
                free(nr->h_states);
                free(nr->h_locals);
                free(nr->h_spike);
                free(nr);
            }
        }
    free(ip->nodes);
    free(ip->order);
    free(ip->scratch);
}

void
interp_init(Interp *ip, const Module *m, const InterpOptions *opt, int batch, int64_t sample_base,
            const float *const *inputs, float *const *outputs, char *err, size_t errlen)
{
    memset(ip, 0, sizeof *ip);
    ip->m = m;
    ip->is_f32 = opt && opt->precision == INTERP_F32;
    ip->is_f32_sums = ip->is_f32 && m->accumulate == ACC_F32;
    ip->T = m->timesteps;
    ip->batch = batch;
    ip->sample_base = sample_base;
    ip->seed = (uint64_t)(opt && opt->seed >= 0 ? opt->seed : m->seed);
    ip->smooth = opt && opt->smooth_spikes;
    ip->batch_stats = opt && opt->batch_stats;
    ip->inputs = inputs;
    ip->outputs = outputs;
    ip->err = err;
    ip->errlen = errlen;
    if (err && errlen)
        err[0] = 0;
}

bool
interp_run(const Module *m, const InterpOptions *opt, int batch, int64_t sample_base,
           const float *const *inputs, float *const *outputs, double *spike_counts, char *err,
           size_t errlen)
{
    Interp ip;
    interp_init(&ip, m, opt, batch, sample_base, inputs, outputs, err, errlen);
    if (batch <= 0 || ip.T <= 0)
        return true;
    if (ip.batch_stats) {
        interp_fail(&ip, "interpreter: batch statistics are for training (interp_grad)");
        return false;
    }
    if (interp_setup(&ip)) {
        for (ip.b0 = 0; ip.b0 < batch; ip.b0 += ip.chunk) {
            ip.nb = (int)(batch - ip.b0 < ip.chunk ? batch - ip.b0 : ip.chunk);
            for (ValueId v = 0; v < m->nnodes; v++)
                if (ip.nodes[v].neuron)
                    interp_reset_neuron(&ip, &ip.nodes[v]);
            for (int t = 0; t < ip.T; t++) {
                for (int k = 0; k < m->nnodes; k++)
                    interp_eval_node(&ip, ip.order[k], t, spike_counts);
                interp_write_step_outputs(&ip, t);
            }
            interp_write_final_outputs(&ip);
        }
    }
    interp_teardown(&ip);
    return !ip.failed;
}
