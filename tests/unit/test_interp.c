/* test_interp.c: unit tests for the reference interpreter (ir/interp.c) and weight binding
 * (ir/weights.c) on small modules built by hand through ir.h, with types set here (no inference),
 * and results checked exactly against hand-computed values or naive direct formulas. Writes only
 * temporary files (weights tests) and removes them. */
#include "ir/fmath.h"
#include "ir/ir.h"
#include "runtime/philox.h"
#include "runtime/tensor_io.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/check.h"

/* exact comparison of n float outputs against doubles rounded to float, reporting the first
 * difference */
#define CHECK_VALUES(got, want, n) CHECK(same_values(__LINE__, got, want, n))

static bool
same_values(int line, const float *got, const double *want, int n)
{
    for (int i = 0; i < n; i++)
        if (!(got[i] == (float)want[i] || (isnan(got[i]) && isnan(want[i])))) {
            fprintf(stderr, "line %d: element %d: got %.9g, want %.17g\n", line, i, got[i],
                    want[i]);
            return false;
        }
    return true;
}

static const Loc noloc;

/* ---- building modules ---- */

static Module *
new_module(int T)
{
    Module *m = module_new();
    m->name = "test";
    m->timesteps = T;
    m->seed = 1234;
    return m;
}

static void
set_type(Module *m, ValueId v, DType dt, bool has_time, int rank, int d0, int d1, int d2)
{
    Node *n = module_node(m, v);
    n->type.dtype = dt;
    n->type.has_time = has_time;
    n->type.rank = rank;
    int64_t d[3] = {d0, d1, d2};
    for (int i = 0; i < rank && i < 3; i++)
        n->type.dims[i] = d[i];
}

static ValueId *
append(Module *m, ValueId *arr, int *n, ValueId v)
{
    arr = arena_grow(&m->arena, arr, (size_t)*n * sizeof *arr, (size_t)(*n + 1) * sizeof *arr);
    arr[(*n)++] = v;
    return arr;
}

static ValueId
add_input(Module *m, DType dt, bool per_step, int rank, int d0, int d1, int d2)
{
    ValueId v = module_add_node(m, OP_INPUT, noloc);
    set_type(m, v, dt, per_step, rank, d0, d1, d2);
    module_node(m, v)->is_per_step_input = per_step;
    m->inputs = append(m, m->inputs, &m->ninputs, v);
    return v;
}

/* a node over operands a (and b); its type is a's (time-indexed) until set otherwise */
static ValueId
add_op(Module *m, Op op, ValueId a, ValueId b)
{
    ValueId v = module_add_node(m, op, noloc);
    Node *n = module_node(m, v);
    n->args[0] = a;
    n->nargs = 1;
    if (b >= 0) {
        n->args[1] = b;
        n->nargs = 2;
    }
    n->type = m->nodes[a].type;
    n->type.has_time = true;
    return v;
}

static ValueId
add_output(Module *m, Op readout, ValueId a)
{
    ValueId v = add_op(m, readout, a, -1);
    module_node(m, v)->type.has_time = readout == OP_SEQUENCE;
    module_node(m, v)->is_output = true;
    m->outputs = append(m, m->outputs, &m->noutputs, v);
    return v;
}

static void
set_attr_i(Module *m, ValueId v, const char *name, int64_t a, int64_t b)
{
    Node *n = module_node(m, v);
    int k = op_attr_index(n->op, name);
    if (k < 0)
        die("no attribute %s", name);
    n->attrs[k].i[0] = a;
    n->attrs[k].i[1] = b;
}

static void
set_attr_f(Module *m, ValueId v, const char *name, double f)
{
    Node *n = module_node(m, v);
    n->attrs[op_attr_index(n->op, name)].f = f;
}

/* Appends weight slot `slot` of node v (as inference would) with zeroed data to fill. */
static float *
add_weight(Module *m, ValueId v, int slot, int rank, int d0, int d1, int d2, int d3)
{
    Node *n = module_node(m, v);
    m->weights = arena_grow(&m->arena, m->weights, (size_t)m->nweights * sizeof *m->weights,
                            (size_t)(m->nweights + 1) * sizeof *m->weights);
    if (n->first_weight < 0)
        n->first_weight = m->nweights;
    n->nweights++;
    Weight *w = &m->weights[m->nweights++];
    w->name =
        arena_printf(&m->arena, "%s.%s", node_layer_name(m, n), op_info(n->op)->weights[slot]);
    w->node = v;
    w->slot = slot;
    w->rank = rank;
    int64_t d[4] = {d0, d1, d2, d3};
    w->numel = 1;
    for (int i = 0; i < rank; i++) {
        w->dims[i] = d[i];
        w->numel *= d[i];
    }
    w->data = arena_alloc(&m->arena, (size_t)w->numel * sizeof(float));
    return w->data;
}

static void
set_layer_name(Module *m, ValueId v, const char *name)
{
    Node *n = module_node(m, v);
    n->name = name;
    n->attrs[op_attr_index(n->op, "name")].s = name;
}

/* neuron expressions */
static Module *cur; /* the module expressions are allocated in */

static NExpr *
num(double x)
{
    NExpr *e = nexpr_new(&cur->arena, NX_NUM);
    e->num = x;
    return e;
}

static NExpr *
leaf(NxKind k, int idx)
{
    NExpr *e = nexpr_new(&cur->arena, k);
    e->idx = idx;
    return e;
}

#define PAR(i) leaf(NX_PARAM, i)
#define ST(i) leaf(NX_STATE, i)
#define LC(i) leaf(NX_LOCAL, i)
#define IN() leaf(NX_INPUT, 0)
#define SPK() leaf(NX_SPIKE, 0)

static NExpr *
un(NxKind k, NExpr *a)
{
    NExpr *e = nexpr_new(&cur->arena, k);
    e->nargs = 1;
    e->args[0] = a;
    return e;
}

static NExpr *
bin(NxBin op, NExpr *a, NExpr *b)
{
    NExpr *e = nexpr_new(&cur->arena, NX_BIN);
    e->op = op;
    e->nargs = 2;
    e->args[0] = a;
    e->args[1] = b;
    return e;
}

static NExpr *
call(NFunc f, NExpr *a, NExpr *b, NExpr *c)
{
    NExpr *e = nexpr_new(&cur->arena, NX_CALL);
    e->op = f;
    e->nargs = nfunc_arity(f);
    e->args[0] = a;
    e->args[1] = b;
    e->args[2] = c;
    return e;
}

static NExpr *
cond(NExpr *c, NExpr *a, NExpr *b)
{
    NExpr *e = nexpr_new(&cur->arena, NX_COND);
    e->nargs = 3;
    e->args[0] = c;
    e->args[1] = a;
    e->args[2] = b;
    return e;
}

static NeuronDef *
new_neuron(const char *name)
{
    NeuronDef *nd = arena_alloc(&cur->arena, sizeof *nd);
    nd->name = name;
    nd->params = arena_alloc(&cur->arena, 8 * sizeof *nd->params);
    nd->states = arena_alloc(&cur->arena, 8 * sizeof *nd->states);
    nd->locals = arena_alloc(&cur->arena, 8 * sizeof *nd->locals);
    nd->stmts = arena_alloc(&cur->arena, 16 * sizeof *nd->stmts);
    return nd;
}

static int
nparam(NeuronDef *nd, const char *name, double def)
{
    nd->params[nd->nparams].name = name;
    nd->params[nd->nparams].def = def;
    return nd->nparams++;
}

static int
nstate(NeuronDef *nd, const char *name, NExpr *init)
{
    nd->states[nd->nstates].name = name;
    nd->states[nd->nstates].init = init;
    return nd->nstates++;
}

static int
nlocal(NeuronDef *nd, const char *name)
{
    nd->locals[nd->nlocals] = name;
    return nd->nlocals++;
}

static void
nstmt(NeuronDef *nd, NsKind kind, int var, bool is_local, NExpr *e)
{
    NStmt *s = &nd->stmts[nd->nstmts++];
    s->kind = kind;
    s->var = var;
    s->is_local = is_local;
    s->e = e;
}

/* A neuron layer over `in` with the definition's default parameters (or those given). */
static ValueId
add_neuron(Module *m, NeuronDef *nd, ValueId in, const double *params)
{
    CHECK(neuron_analyse(nd));
    int k = module_add_neuron(m, nd);
    ValueId v = add_op(m, OP_NEURON, in, -1);
    Node *n = module_node(m, v);
    n->neuron = k;
    n->params = arena_alloc(&m->arena, (size_t)(nd->nparams ? nd->nparams : 1) * sizeof(double));
    for (int i = 0; i < nd->nparams; i++)
        n->params[i] = params ? params[i] : nd->params[i].def;
    n->type.dtype = nd->has_output ? DT_F32 : nd->is_bipolar ? DT_I8 : DT_SPIKE;
    return v;
}

static ValueId
add_state_probe(Module *m, ValueId neuron, const char *var)
{
    ValueId v = add_op(m, OP_STATE, neuron, -1);
    module_node(m, v)->attrs[op_attr_index(OP_STATE, "var")].s = var;
    module_node(m, v)->type.dtype = DT_F32;
    return v;
}

static bool
run(const Module *m, InterpPrecision p, int batch, int64_t base, const float *const *in,
    float *const *out, double *counts)
{
    InterpOptions opt = {p, -1, false, false};
    char err[256];
    bool ok = interp_run(m, &opt, batch, base, in, out, counts, err, sizeof err);
    if (!ok)
        fprintf(stderr, "interp_run: %s\n", err);
    return ok;
}

/* ---- layers ---- */

static void
test_dense(void)
{
    /* static input, bias; two samples; last readout */
    Module *m = cur = new_module(2);
    ValueId x = add_input(m, DT_F32, false, 1, 3, 0, 0);
    ValueId d = add_op(m, OP_DENSE, x, -1);
    set_layer_name(m, d, "fc");
    set_type(m, d, DT_F32, true, 1, 2, 0, 0);
    float *w = add_weight(m, d, 0, 2, 2, 3, 0, 0), *b = add_weight(m, d, 1, 1, 2, 0, 0, 0);
    const float W[6] = {1, 2, 3, -1, 0.5f, 4}, B[2] = {0.5f, -1};
    memcpy(w, W, sizeof W);
    memcpy(b, B, sizeof B);
    add_output(m, OP_LAST, d);
    ValueId seq = add_output(m, OP_SEQUENCE, d);
    (void)seq;
    float xin[6] = {1, 2, 3, 0, -1, 2}, last[4], sq[8];
    const float *ins[] = {xin};
    float *outs[] = {last, sq};
    CHECK(run(m, INTERP_F64, 2, 0, ins, outs, NULL));
    const double want[4] = {14.5, 11, 4.5, 6.5};
    CHECK_VALUES(last, want, 4);
    const double want_seq[8] = {14.5, 11, 14.5, 11, 4.5, 6.5, 4.5, 6.5}; /* [B][T][2] */
    CHECK_VALUES(sq, want_seq, 8);
    module_free(m);

    /* per-step input [B][T][3], no bias */
    m = cur = new_module(2);
    x = add_input(m, DT_F32, true, 1, 3, 0, 0);
    d = add_op(m, OP_DENSE, x, -1);
    set_layer_name(m, d, "fc");
    set_attr_i(m, d, "bias", 0, 0);
    set_type(m, d, DT_F32, true, 1, 2, 0, 0);
    memcpy(add_weight(m, d, 0, 2, 2, 3, 0, 0), W, sizeof W);
    add_output(m, OP_SEQUENCE, d);
    float xs[12] = {1, 2, 3, 0, -1, 2, /* sample 1: */ 1, 0, 0, 0, 0, 1};
    const float *ins2[] = {xs};
    float *outs2[] = {sq};
    CHECK(run(m, INTERP_F32, 2, 0, ins2, outs2, NULL));
    const double want2[8] = {14, 12, 4, 7.5, 1, -1, 3, 4};
    CHECK_VALUES(sq, want2, 8);
    module_free(m);

    /* spike (i8, bipolar) input: zero inputs are skipped, -1 subtracts the row */
    m = cur = new_module(1);
    x = add_input(m, DT_I8, false, 1, 3, 0, 0);
    d = add_op(m, OP_DENSE, x, -1);
    set_layer_name(m, d, "fc");
    set_type(m, d, DT_F32, true, 1, 2, 0, 0);
    memcpy(add_weight(m, d, 0, 2, 2, 3, 0, 0), W, sizeof W);
    memcpy(add_weight(m, d, 1, 1, 2, 0, 0, 0), B, sizeof B);
    add_output(m, OP_COUNT, d);
    float sp[3] = {1, 0, -1};
    const float *ins3[] = {sp};
    float *outs3[] = {last};
    CHECK(run(m, INTERP_F64, 1, 0, ins3, outs3, NULL));
    const double want3[2] = {1 - 3 + 0.5, -1 - 4 - 1};
    CHECK_VALUES(last, want3, 2);
    module_free(m);
}

typedef struct ConvCase {
    int C, H, W, O, KH, KW, SH, SW, PH, PW, DH, DW, G, has_bias, is_spike;
} ConvCase;

/* the defining formula, gathered directly */
static void
naive_conv(const ConvCase *k, int OH, int OW, const float *x, const float *w, const float *b,
           double *y)
{
    int Cg = k->C / k->G, Og = k->O / k->G;
    for (int o = 0; o < k->O; o++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                double s = k->has_bias ? b[o] : 0;
                int g = o / Og;
                for (int cg = 0; cg < Cg; cg++)
                    for (int kh = 0; kh < k->KH; kh++)
                        for (int kw = 0; kw < k->KW; kw++) {
                            int ih = oh * k->SH - k->PH + kh * k->DH;
                            int iw = ow * k->SW - k->PW + kw * k->DW;
                            if (ih < 0 || ih >= k->H || iw < 0 || iw >= k->W)
                                continue;
                            int c = g * Cg + cg;
                            s += (double)w[((o * Cg + cg) * k->KH + kh) * k->KW + kw] *
                                 x[(c * k->H + ih) * k->W + iw];
                        }
                y[(o * OH + oh) * OW + ow] = s;
            }
}

static void
test_conv2d(void)
{
    static const ConvCase cases[] = {
        {2, 5, 5, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0}, /* pad 1 ("same") */
        {2, 7, 6, 4, 3, 2, 2, 1, 0, 1, 1, 1, 1, 0, 0}, /* stride 2x1, 3x2 kernel, no bias */
        {4, 6, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2, 1, 0}, /* groups 2 */
        {3, 8, 8, 3, 3, 3, 1, 1, 2, 2, 2, 2, 3, 1, 0}, /* dilation 2, depthwise */
        {1, 9, 7, 2, 2, 3, 3, 2, 1, 0, 2, 1, 1, 1, 0}, /* everything mixed */
        {2, 5, 5, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1}, /* spike input */
        {4, 6, 5, 4, 3, 3, 1, 2, 1, 1, 2, 1, 4, 1, 1}, /* spike input, depthwise, dilation */
    };
    unsigned seed = 1;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const ConvCase *k = &cases[ci];
        int OH = (k->H + 2 * k->PH - k->DH * (k->KH - 1) - 1) / k->SH + 1;
        int OW = (k->W + 2 * k->PW - k->DW * (k->KW - 1) - 1) / k->SW + 1;
        enum { B = 2 };
        Module *m = cur = new_module(1);
        ValueId x = add_input(m, k->is_spike ? DT_SPIKE : DT_F32, false, 3, k->C, k->H, k->W);
        ValueId c = add_op(m, OP_CONV2D, x, -1);
        set_layer_name(m, c, "conv");
        set_attr_i(m, c, "out", k->O, k->O);
        set_attr_i(m, c, "kernel", k->KH, k->KW);
        set_attr_i(m, c, "stride", k->SH, k->SW);
        set_attr_i(m, c, "pad", k->PH, k->PW);
        set_attr_i(m, c, "dilation", k->DH, k->DW);
        set_attr_i(m, c, "groups", k->G, k->G);
        set_attr_i(m, c, "bias", k->has_bias, 0);
        set_type(m, c, DT_F32, true, 3, k->O, OH, OW);
        int nw = k->O * (k->C / k->G) * k->KH * k->KW;
        float *w = add_weight(m, c, 0, 4, k->O, k->C / k->G, k->KH, k->KW);
        float *b = k->has_bias ? add_weight(m, c, 1, 1, k->O, 0, 0, 0) : NULL;
        for (int i = 0; i < nw; i++)
            w[i] = (float)((int)((seed = seed * 1103515245u + 12345u) >> 16) % 5 - 2);
        for (int i = 0; b && i < k->O; i++)
            b[i] = (float)i - 0.5f;
        add_output(m, OP_LAST, c);
        int nx = k->C * k->H * k->W, ny = k->O * OH * OW;
        float *xin = malloc((size_t)(B * nx) * sizeof *xin),
              *y = malloc((size_t)(B * ny) * sizeof *y);
        double *want = malloc((size_t)(B * ny) * sizeof *want);
        for (int i = 0; i < B * nx; i++) {
            int r = (int)((seed = seed * 1103515245u + 12345u) >> 16);
            xin[i] = k->is_spike ? (float)(r % 3 == 0) : (float)(r % 7 - 3);
        }
        for (int s = 0; s < B; s++)
            naive_conv(k, OH, OW, xin + s * nx, w, b, want + s * ny);
        const float *ins[] = {xin};
        float *outs[] = {y};
        CHECK(run(m, INTERP_F64, B, 0, ins, outs, NULL));
        CHECK_VALUES(y, want, B * ny);
        CHECK(run(m, INTERP_F32, B, 0, ins, outs, NULL));
        CHECK_VALUES(y, want, B * ny);
        free(xin);
        free(y);
        free(want);
        module_free(m);
    }
}

typedef struct PoolCase {
    Op op;
    int C, H, W, KH, KW, SH, SW, PH, PW; /* stride 0 = kernel */
} PoolCase;

static void
naive_pool(const PoolCase *k, int OH, int OW, const float *x, double *y)
{
    int SH = k->SH ? k->SH : k->KH, SW = k->SW ? k->SW : k->KW;
    for (int c = 0; c < k->C; c++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                double s = k->op == OP_MAXPOOL2D ? -INFINITY : 0;
                for (int kh = 0; kh < k->KH; kh++)
                    for (int kw = 0; kw < k->KW; kw++) {
                        int ih = oh * SH - k->PH + kh, iw = ow * SW - k->PW + kw;
                        double v = ih < 0 || ih >= k->H || iw < 0 || iw >= k->W
                                       ? (k->op == OP_MAXPOOL2D ? -INFINITY : 0)
                                       : x[(c * k->H + ih) * k->W + iw];
                        s = k->op == OP_MAXPOOL2D ? (v > s ? v : s) : s + v;
                    }
                if (k->op == OP_AVGPOOL2D)
                    s /= k->KH * k->KW;
                y[(c * OH + oh) * OW + ow] = s;
            }
}

static ValueId
add_pool(Module *m, Op op, ValueId x, int KH, int KW, int SH, int SW, int PH, int PW, int OH,
         int OW)
{
    ValueId p = add_op(m, op, x, -1);
    set_attr_i(m, p, "kernel", KH, KW);
    set_attr_i(m, p, "stride", SH, SW);
    set_attr_i(m, p, "pad", PH, PW);
    Node *n = module_node(m, p);
    n->type.dims[1] = OH;
    n->type.dims[2] = OW;
    n->type.dtype = DT_F32;
    return p;
}

static void
test_pool(void)
{
    static const PoolCase cases[] = {
        {OP_MAXPOOL2D, 2, 4, 4, 2, 2, 0, 0, 0, 0}, {OP_MAXPOOL2D, 2, 7, 5, 3, 3, 2, 2, 1, 1},
        {OP_MAXPOOL2D, 1, 5, 6, 2, 3, 1, 2, 1, 1}, {OP_AVGPOOL2D, 2, 4, 4, 2, 2, 0, 0, 0, 0},
        {OP_AVGPOOL2D, 2, 7, 5, 3, 3, 2, 2, 1, 1}, {OP_AVGPOOL2D, 1, 5, 6, 2, 3, 1, 2, 1, 1},
        {OP_SUMPOOL2D, 2, 4, 4, 2, 2, 0, 0, 0, 0}, {OP_SUMPOOL2D, 2, 7, 5, 3, 3, 2, 2, 1, 1},
        {OP_SUMPOOL2D, 1, 5, 6, 2, 3, 1, 2, 1, 1},
    };
    unsigned seed = 7;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const PoolCase *k = &cases[ci];
        int SH = k->SH ? k->SH : k->KH, SW = k->SW ? k->SW : k->KW;
        int OH = (k->H + 2 * k->PH - k->KH) / SH + 1, OW = (k->W + 2 * k->PW - k->KW) / SW + 1;
        Module *m = cur = new_module(1);
        ValueId x = add_input(m, DT_F32, false, 3, k->C, k->H, k->W);
        ValueId p = add_pool(m, k->op, x, k->KH, k->KW, k->SH, k->SW, k->PH, k->PW, OH, OW);
        add_output(m, OP_LAST, p);
        int nx = k->C * k->H * k->W, ny = k->C * OH * OW;
        float *xin = malloc((size_t)(2 * nx) * sizeof *xin),
              *y = malloc((size_t)(2 * ny) * sizeof *y);
        double *want = malloc((size_t)(2 * ny) * sizeof *want);
        for (int i = 0; i < 2 * nx; i++) /* quarters in -4..-0.25: padding must not win a max */
            xin[i] = -(float)((int)((seed = seed * 1103515245u + 12345u) >> 16) % 16 + 1) / 4;
        for (int s = 0; s < 2; s++)
            naive_pool(k, OH, OW, xin + s * nx, want + s * ny);
        const float *ins[] = {xin};
        float *outs[] = {y};
        CHECK(run(m, INTERP_F64, 2, 0, ins, outs, NULL));
        CHECK_VALUES(y, want, 2 * ny);
        free(xin);
        free(y);
        free(want);
        module_free(m);
    }

    /* by hand: [[-1, -2], [-3, -4]], kernel 2, stride 1, pad 1 */
    Module *m = cur = new_module(1);
    ValueId x = add_input(m, DT_F32, false, 3, 1, 2, 2);
    ValueId mx = add_pool(m, OP_MAXPOOL2D, x, 2, 2, 1, 1, 1, 1, 3, 3);
    ValueId av = add_pool(m, OP_AVGPOOL2D, x, 2, 2, 1, 1, 1, 1, 3, 3);
    ValueId sm = add_pool(m, OP_SUMPOOL2D, x, 2, 2, 1, 1, 1, 1, 3, 3);
    add_output(m, OP_LAST, mx);
    add_output(m, OP_LAST, av);
    add_output(m, OP_LAST, sm);
    float xin[4] = {-1, -2, -3, -4}, ymax[9], yavg[9], ysum[9];
    const float *ins[] = {xin};
    float *outs[] = {ymax, yavg, ysum};
    CHECK(run(m, INTERP_F64, 1, 0, ins, outs, NULL));
    const double wmax[9] = {-1, -1, -2, -1, -1, -2, -3, -3, -4};
    const double wsum[9] = {-1, -3, -2, -4, -10, -6, -3, -7, -4};
    double wavg[9];
    for (int i = 0; i < 9; i++)
        wavg[i] = wsum[i] / 4;
    CHECK_VALUES(ymax, wmax, 9);
    CHECK_VALUES(yavg, wavg, 9);
    CHECK_VALUES(ysum, wsum, 9);
    module_free(m);
}

static void
test_batchnorm(void)
{
    Module *m = cur = new_module(1);
    ValueId x = add_input(m, DT_F32, false, 3, 2, 1, 2);
    ValueId bn = add_op(m, OP_BATCHNORM, x, -1);
    set_layer_name(m, bn, "bn");
    set_attr_f(m, bn, "eps", 1.0);
    const float w[2] = {2, -1}, b[2] = {0.5f, 1}, mean[2] = {1, -1}, var[2] = {3, 0};
    memcpy(add_weight(m, bn, 0, 1, 2, 0, 0, 0), w, sizeof w);
    memcpy(add_weight(m, bn, 1, 1, 2, 0, 0, 0), b, sizeof b);
    memcpy(add_weight(m, bn, 2, 1, 2, 0, 0, 0), mean, sizeof mean);
    memcpy(add_weight(m, bn, 3, 1, 2, 0, 0, 0), var, sizeof var);
    add_output(m, OP_LAST, bn);
    float xin[4] = {3, -1, 0, 2}, y[4];
    const float *ins[] = {xin};
    float *outs[] = {y};
    /* channel 0: (x - 1) / 2 * 2 + 0.5; channel 1: (x + 1) / 1 * -1 + 1 */
    const double want[4] = {2.5, -1.5, 0, -2};
    CHECK(run(m, INTERP_F64, 1, 0, ins, outs, NULL));
    CHECK_VALUES(y, want, 4);
    CHECK(run(m, INTERP_F32, 1, 0, ins, outs, NULL));
    CHECK_VALUES(y, want, 4);

    /* eps = 1e-5: F32 rounds the double result once */
    set_attr_f(m, bn, "eps", 1e-5);
    CHECK(run(m, INTERP_F32, 1, 0, ins, outs, NULL));
    double want32[4], want64[4];
    for (int i = 0; i < 4; i++) {
        int c = i / 2;
        want64[i] = (xin[i] - mean[c]) / sqrt(var[c] + 1e-5) * w[c] + b[c];
        want32[i] = (float)want64[i];
    }
    CHECK_VALUES(y, want32, 4);
    CHECK(run(m, INTERP_F64, 1, 0, ins, outs, NULL));
    CHECK_VALUES(y, want32, 4); /* outputs are float either way */
    module_free(m);
}

static void
test_elementwise(void)
{
    Module *m = cur = new_module(2);
    ValueId a = add_input(m, DT_F32, true, 3, 1, 2, 2);
    ValueId b = add_input(m, DT_F32, false, 3, 1, 2, 2);
    ValueId add = add_op(m, OP_ADD, a, b), sub = add_op(m, OP_SUB, a, b);
    ValueId mul = add_op(m, OP_MUL, a, b), sc = add_op(m, OP_SCALE, a, -1);
    set_attr_f(m, sc, "factor", -0.5);
    ValueId fl = add_op(m, OP_FLATTEN, mul, -1);
    set_type(m, fl, DT_F32, true, 1, 4, 0, 0);
    add_output(m, OP_SEQUENCE, add);
    add_output(m, OP_SEQUENCE, sub);
    add_output(m, OP_SEQUENCE, fl);
    add_output(m, OP_SEQUENCE, sc);
    float ain[8] = {1, 2, 3, 4, -1, -2, -3, -4}, bin_[4] = {0.5f, 2, -1, 8};
    float yadd[8], ysub[8], ymul[8], ysc[8];
    const float *ins[] = {ain, bin_};
    float *outs[] = {yadd, ysub, ymul, ysc};
    CHECK(run(m, INTERP_F64, 1, 0, ins, outs, NULL));
    double wadd[8], wsub[8], wmul[8], wsc[8];
    for (int i = 0; i < 8; i++) {
        wadd[i] = ain[i] + bin_[i % 4];
        wsub[i] = ain[i] - bin_[i % 4];
        wmul[i] = ain[i] * bin_[i % 4];
        wsc[i] = -0.5 * ain[i];
    }
    CHECK_VALUES(yadd, wadd, 8);
    CHECK_VALUES(ysub, wsub, 8);
    CHECK_VALUES(ymul, wmul, 8);
    CHECK_VALUES(ysc, wsc, 8);
    module_free(m);
}

/* y[t] = x[t] + y[t-1] through a delay that reads a later node; and delays by 2 and by T */
static void
test_delay(void)
{
    Module *m = cur = new_module(4);
    ValueId x = add_input(m, DT_F32, true, 1, 2, 0, 0);
    ValueId d = module_add_node(m, OP_DELAY, noloc); /* operand set below: y comes later */
    ValueId y = add_op(m, OP_ADD, x, d);
    Node *dn = module_node(m, d);
    dn->args[0] = y;
    dn->nargs = 1;
    dn->type = m->nodes[y].type;
    ValueId d2 = add_op(m, OP_DELAY, x, -1);
    set_attr_i(m, d2, "steps", 2, 2);
    ValueId d4 = add_op(m, OP_DELAY, x, -1);
    set_attr_i(m, d4, "steps", 4, 4);
    /* a value that is the same at every step (static input, stateless ops), kept for a delay */
    ValueId xs = add_input(m, DT_F32, false, 1, 2, 0, 0);
    ValueId sc = add_op(m, OP_SCALE, xs, -1);
    set_attr_f(m, sc, "factor", 2);
    ValueId ds = add_op(m, OP_DELAY, sc, -1);
    set_attr_i(m, ds, "steps", 2, 2);
    add_output(m, OP_SEQUENCE, y);
    add_output(m, OP_SEQUENCE, d2);
    add_output(m, OP_LAST, d4);
    add_output(m, OP_SEQUENCE, sc);
    add_output(m, OP_SEQUENCE, ds);
    float xin[16] = {1, 10, 2, 20, 3, 30, 4, 40, /* sample 1 */ -1, 0, -1, 0, -1, 0, -1, 5};
    float xsin[4] = {1, 2, 3, 4};
    float yy[16], y2[16], y4[4], ysc[16], yds[16];
    const float *ins[] = {xin, xsin};
    float *outs[] = {yy, y2, y4, ysc, yds};
    CHECK(run(m, INTERP_F64, 2, 0, ins, outs, NULL));
    const double wsc[16] = {2, 4, 2, 4, 2, 4, 2, 4, 6, 8, 6, 8, 6, 8, 6, 8};
    const double wds[16] = {0, 0, 0, 0, 2, 4, 2, 4, 0, 0, 0, 0, 6, 8, 6, 8};
    CHECK_VALUES(ysc, wsc, 16);
    CHECK_VALUES(yds, wds, 16);
    const double wy[16] = {1, 10, 3, 30, 6, 60, 10, 100, -1, 0, -2, 0, -3, 0, -4, 5};
    const double w2[16] = {0, 0, 0, 0, 1, 10, 2, 20, 0, 0, 0, 0, -1, 0, -1, 0};
    const double w4[4] = {0, 0, 0, 0};
    CHECK_VALUES(yy, wy, 16);
    CHECK_VALUES(y2, w2, 16);
    CHECK_VALUES(y4, w4, 4);
    module_free(m);
}

/* ---- neurons ---- */

/* SpikingJelly LIF (tau 2, hard reset to 0, >=) on a constant 1.5 */
static void
test_lif_hard_reset(void)
{
    Module *m = cur = new_module(6);
    NeuronDef *nd = new_neuron("LIF");
    int tau = nparam(nd, "tau", 2.0), vth = nparam(nd, "v_th", 1.0),
        vr = nparam(nd, "v_reset", 0.0);
    int v = nstate(nd, "v", PAR(vr));
    /* v = v + (I - (v - v_reset)) / tau */
    nstmt(
        nd, NS_ASSIGN, v, false,
        bin(NB_ADD, ST(v), bin(NB_DIV, bin(NB_SUB, IN(), bin(NB_SUB, ST(v), PAR(vr))), PAR(tau))));
    nstmt(nd, NS_FIRE, 0, false, bin(NB_GE, ST(v), PAR(vth)));
    nstmt(nd, NS_RESET_TO, v, false, PAR(vr));
    ValueId x = add_input(m, DT_F32, false, 1, 1, 0, 0);
    ValueId s = add_neuron(m, nd, x, NULL);
    ValueId pv = add_state_probe(m, s, "v");
    add_output(m, OP_SEQUENCE, s);
    add_output(m, OP_SEQUENCE, pv);
    add_output(m, OP_COUNT, s);
    add_output(m, OP_MEAN, s);
    float xin[1] = {1.5f}, ys[6], yv[6], yc[1], ym[1];
    const float *ins[] = {xin};
    float *outs[] = {ys, yv, yc, ym};
    double *counts = calloc((size_t)m->nnodes, sizeof *counts);
    for (int p = 0; p < 2; p++) {
        CHECK(run(m, p ? INTERP_F32 : INTERP_F64, 1, 0, ins, outs, counts));
        const double ws[6] = {0, 1, 0, 1, 0, 1}, wv[6] = {0.75, 0, 0.75, 0, 0.75, 0};
        const double wc[1] = {3}, wm[1] = {0.5};
        CHECK_VALUES(ys, ws, 6);
        CHECK_VALUES(yv, wv, 6);
        CHECK_VALUES(yc, wc, 1);
        CHECK_VALUES(ym, wm, 1);
    }
    CHECK(counts[s] == 6); /* accumulated over both runs */
    CHECK(counts[x] == 0 && counts[pv] == 0);
    free(counts);
    module_free(m);
}

/* IF with subtract reset on 0.75 per step; reset v -= v_th after fire */
static void
test_subtract_reset(void)
{
    Module *m = cur = new_module(6);
    NeuronDef *nd = new_neuron("IF");
    int vth = nparam(nd, "v_th", 1.0);
    int v = nstate(nd, "v", num(0));
    nstmt(nd, NS_ASSIGN, v, false, bin(NB_ADD, ST(v), IN()));
    nstmt(nd, NS_FIRE, 0, false, bin(NB_GE, ST(v), PAR(vth)));
    nstmt(nd, NS_RESET_SUB, v, false, PAR(vth));
    ValueId x = add_input(m, DT_F32, false, 1, 1, 0, 0);
    ValueId s = add_neuron(m, nd, x, NULL);
    add_output(m, OP_SEQUENCE, s);
    add_output(m, OP_SEQUENCE, add_state_probe(m, s, "v"));
    float xin[1] = {0.75f}, ys[6], yv[6];
    const float *ins[] = {xin};
    float *outs[] = {ys, yv};
    CHECK(run(m, INTERP_F64, 1, 0, ins, outs, NULL));
    const double ws[6] = {0, 1, 1, 1, 0, 1}, wv[6] = {0.75, 0.5, 0.25, 0, 0.75, 0.5};
    CHECK_VALUES(ys, ws, 6);
    CHECK_VALUES(yv, wv, 6);

    /* parameters per layer: v_th = 0.5 */
    module_node(m, s)->params[0] = 0.5;
    CHECK(run(m, INTERP_F64, 1, 0, ins, outs, NULL));
    const double ws2[6] = {1, 1, 1, 1, 1, 1}, wv2[6] = {0.25, 0.5, 0.75, 1, 1.25, 1.5};
    CHECK_VALUES(ys, ws2, 6);
    CHECK_VALUES(yv, wv2, 6);
    module_free(m);
}

/* snnTorch Leaky (beta 0.5, subtract, reset_delay): the reset sits before fire and reads the
 * previous step's spike: U[t] = beta U[t-1] + X[t] - S[t-1] thr, S[t] = U[t] > thr */
static void
test_delayed_reset(void)
{
    Module *m = cur = new_module(6);
    NeuronDef *nd = new_neuron("Leaky");
    int beta = nparam(nd, "beta", 0.5), thr = nparam(nd, "threshold", 1.0);
    int v = nstate(nd, "mem", num(0));
    nstmt(nd, NS_ASSIGN, v, false, bin(NB_ADD, bin(NB_MUL, PAR(beta), ST(v)), IN()));
    nstmt(nd, NS_RESET_SUB, v, false, PAR(thr));
    nstmt(nd, NS_FIRE, 0, false, bin(NB_GT, ST(v), PAR(thr)));
    ValueId x = add_input(m, DT_F32, false, 1, 1, 0, 0);
    ValueId s = add_neuron(m, nd, x, NULL);
    CHECK(nd->reset_is_next);
    add_output(m, OP_SEQUENCE, s);
    add_output(m, OP_SEQUENCE, add_state_probe(m, s, "mem"));
    float xin[1] = {1.25f}, ys[6], yv[6];
    const float *ins[] = {xin};
    float *outs[] = {ys, yv};
    CHECK(run(m, INTERP_F32, 1, 0, ins, outs, NULL));
    const double ws[6] = {1, 0, 1, 1, 0, 1};
    const double wv[6] = {1.25, 0.875, 1.6875, 1.09375, 0.796875, 1.6484375};
    CHECK_VALUES(ys, ws, 6);
    CHECK_VALUES(yv, wv, 6);
    module_free(m);
}

/* bipolar: fire up at v >= 1, fire down at v <= -1, subtract reset by the signed spike */
static void
test_fire_down(void)
{
    Module *m = cur = new_module(6);
    NeuronDef *nd = new_neuron("Bipolar");
    int v = nstate(nd, "v", num(0));
    nstmt(nd, NS_ASSIGN, v, false, bin(NB_ADD, ST(v), IN()));
    nstmt(nd, NS_FIRE, 0, false, bin(NB_GE, ST(v), num(1)));
    nstmt(nd, NS_FIRE_DOWN, 0, false, bin(NB_LE, ST(v), num(-1)));
    nstmt(nd, NS_RESET_SUB, v, false, num(1));
    ValueId x = add_input(m, DT_F32, true, 1, 1, 0, 0);
    ValueId s = add_neuron(m, nd, x, NULL);
    CHECK(nd->is_bipolar && m->nodes[s].type.dtype == DT_I8);
    add_output(m, OP_SEQUENCE, s);
    add_output(m, OP_SEQUENCE, add_state_probe(m, s, "v"));
    add_output(m, OP_COUNT, s);
    /* fire down never overrides an up spike of the same step: up at v >= 1, down at I != 0 */
    NeuronDef *nd2 = new_neuron("UpFirst");
    int w = nstate(nd2, "v", num(0));
    nstmt(nd2, NS_ASSIGN, w, false, bin(NB_ADD, ST(w), IN()));
    nstmt(nd2, NS_FIRE, 0, false, bin(NB_GE, ST(w), num(1)));
    nstmt(nd2, NS_FIRE_DOWN, 0, false, bin(NB_NE, IN(), num(0)));
    add_output(m, OP_SEQUENCE, add_neuron(m, nd2, x, NULL));
    float xin[6] = {1.5f, -3, 0.5f, 0.25f, -0.5f, 0}, ys[6], yv[6], yc[1], yu[6];
    const float *ins[] = {xin};
    float *outs[] = {ys, yv, yc, yu};
    double *counts = calloc((size_t)m->nnodes, sizeof *counts);
    CHECK(run(m, INTERP_F64, 1, 0, ins, outs, counts));
    const double ws[6] = {1, -1, -1, 0, 0, 0}, wv[6] = {0.5, -1.5, 0, 0.25, -0.25, -0.25};
    const double wc[1] = {-1};
    CHECK_VALUES(ys, ws, 6);
    CHECK_VALUES(yv, wv, 6);
    CHECK_VALUES(yc, wc, 1);
    const double wu[6] = {1, -1, -1, -1, -1, 0};
    CHECK_VALUES(yu, wu, 6);
    CHECK(counts[s] == 3); /* |S| summed */
    free(counts);
    module_free(m);
}

static void
test_refractory(void)
{
    /* IF, hard reset, 2 refractory steps after each spike, constant input 1 */
    Module *m = cur = new_module(7);
    NeuronDef *nd = new_neuron("RIF");
    int tr = nparam(nd, "t_ref", 2.0);
    int v = nstate(nd, "v", num(0));
    nstmt(nd, NS_ASSIGN, v, false, bin(NB_ADD, ST(v), IN()));
    nstmt(nd, NS_FIRE, 0, false, bin(NB_GE, ST(v), num(1)));
    nstmt(nd, NS_RESET_TO, v, false, num(0));
    nstmt(nd, NS_REFRACTORY, 0, false, PAR(tr));
    ValueId x = add_input(m, DT_F32, false, 1, 1, 0, 0);
    ValueId s = add_neuron(m, nd, x, NULL);
    CHECK(nd->has_refractory);
    add_output(m, OP_SEQUENCE, s);
    /* the same with 1.7 steps (rounded down to 1) */
    const double p17[1] = {1.7};
    ValueId s17 = add_neuron(m, nd, x, p17);
    add_output(m, OP_SEQUENCE, s17);

    /* refractory with an output expression: out = 2 v, no reset; the output still reads the state
     */
    NeuronDef *nd2 = new_neuron("ROut");
    int w = nstate(nd2, "v", num(0));
    nstmt(nd2, NS_ASSIGN, w, false, bin(NB_ADD, ST(w), bin(NB_MUL, IN(), num(0.5))));
    nstmt(nd2, NS_FIRE, 0, false, bin(NB_GE, ST(w), num(1)));
    nstmt(nd2, NS_REFRACTORY, 0, false, num(1));
    nstmt(nd2, NS_OUTPUT, 0, false, bin(NB_MUL, ST(w), num(2)));
    ValueId o = add_neuron(m, nd2, x, NULL);
    add_output(m, OP_SEQUENCE, o);

    float xin[1] = {1}, ys[7], y17[7], yo[7];
    const float *ins[] = {xin};
    float *outs[] = {ys, y17, yo};
    double *counts = calloc((size_t)m->nnodes, sizeof *counts);
    CHECK(run(m, INTERP_F64, 1, 0, ins, outs, counts));
    const double ws[7] = {1, 0, 0, 1, 0, 0, 1}, w17[7] = {1, 0, 1, 0, 1, 0, 1};
    const double wo[7] = {1, 2, 2, 3, 3, 4, 4};
    CHECK_VALUES(ys, ws, 7);
    CHECK_VALUES(y17, w17, 7);
    CHECK_VALUES(yo, wo, 7);
    CHECK(counts[s] == 3 && counts[s17] == 4);
    CHECK(counts[o] == 0); /* an output layer emits values, not spikes: not counted */
    free(counts);
    module_free(m);
}

/* LI (output = membrane) written with a local, cond and select; readouts of its value sequence:
 * dv = I - (1 - beta) v; v = v + dv; output select(v > 100, 0, v) */
static void
test_output_and_readouts(void)
{
    Module *m = cur = new_module(4);
    NeuronDef *nd = new_neuron("LI");
    int beta = nparam(nd, "beta", 0.5);
    int v = nstate(nd, "v", num(0));
    int l = nlocal(nd, "dv");
    nstmt(nd, NS_ASSIGN, l, true,
          bin(NB_SUB, IN(), bin(NB_MUL, bin(NB_SUB, num(1), PAR(beta)), ST(v))));
    nstmt(nd, NS_ASSIGN, v, false, cond(bin(NB_EQ, IN(), IN()), bin(NB_ADD, ST(v), LC(l)), num(0)));
    nstmt(nd, NS_OUTPUT, 0, false, call(NF_SELECT, bin(NB_GT, ST(v), num(100)), num(0), ST(v)));
    ValueId x = add_input(m, DT_F32, true, 1, 1, 0, 0);
    ValueId o = add_neuron(m, nd, x, NULL);
    CHECK(nd->has_output && m->nodes[o].type.dtype == DT_F32);
    add_output(m, OP_SEQUENCE, o);
    add_output(m, OP_MAX, o);
    add_output(m, OP_LAST, o);
    add_output(m, OP_COUNT, o);
    add_output(m, OP_MEAN, o);
    add_output(m, OP_SEQUENCE, add_state_probe(m, o, "dv"));
    float xin[4] = {1, 2, -4, 0.5f}, ys[4], ymax[1], ylast[1], ycount[1], ymean[1], ydv[4];
    const float *ins[] = {xin};
    float *outs[] = {ys, ymax, ylast, ycount, ymean, ydv};
    for (int p = 0; p < 2; p++) {
        CHECK(run(m, p ? INTERP_F32 : INTERP_F64, 1, 0, ins, outs, NULL));
        const double ws[4] = {1, 2.5, -2.75, -0.875}, wdv[4] = {1, 1.5, -5.25, 1.875};
        const double wmax[1] = {2.5}, wlast[1] = {-0.875}, wcount[1] = {-0.125};
        const double wmean[1] = {-0.03125};
        CHECK_VALUES(ys, ws, 4);
        CHECK_VALUES(ymax, wmax, 1);
        CHECK_VALUES(ylast, wlast, 1);
        CHECK_VALUES(ycount, wcount, 1);
        CHECK_VALUES(ymean, wmean, 1);
        CHECK_VALUES(ydv, wdv, 4);
    }
    module_free(m);
}

/* functions of nfuncs.def in F64, checked against libm */
static void
test_functions(void)
{
    Module *m = cur = new_module(1);
    ValueId x = add_input(m, DT_F32, false, 1, 1, 0, 0);
    NExpr *const exprs[] = {
        call(NF_EXP, IN(), NULL, NULL),
        call(NF_LOG, IN(), NULL, NULL),
        call(NF_SQRT, IN(), NULL, NULL),
        call(NF_TANH, IN(), NULL, NULL),
        call(NF_SIGMOID, IN(), NULL, NULL),
        call(NF_ABS, un(NX_NEG, IN()), NULL, NULL),
        call(NF_FLOOR, IN(), NULL, NULL),
        call(NF_MIN, IN(), num(0.5), NULL),
        call(NF_MAX, IN(), num(0.5), NULL),
        call(NF_POW, IN(), num(3), NULL),
        call(NF_CLAMP, IN(), num(-1), num(1)),
        bin(NB_DIV, IN(), num(0)),
        bin(NB_AND, IN(), num(0)),
        bin(NB_OR, IN(), num(0)),
        un(NX_NOT, IN()),
    };
    enum { NE = sizeof exprs / sizeof exprs[0] };
    ValueId outs_v[NE];
    for (int i = 0; i < NE; i++) {
        NeuronDef *nd = new_neuron("F");
        nstmt(nd, NS_OUTPUT, 0, false, exprs[i]);
        outs_v[i] = add_neuron(m, nd, x, NULL);
        add_output(m, OP_LAST, outs_v[i]);
    }
    float xin[1] = {2.25f}, y[NE];
    float *outs[NE];
    for (int i = 0; i < NE; i++)
        outs[i] = &y[i];
    const float *ins[] = {xin};
    CHECK(run(m, INTERP_F64, 1, 0, ins, outs, NULL));
    double a = 2.25;
    const double want[NE] = {exp(a), log(a),   sqrt(a), tanh(a), 1 / (1 + exp(-a)),
                             a,      2,        0.5,     a,       a * a * a,
                             1,      INFINITY, 0,       1,       0};
    for (int i = 0; i < NE; i++)
        if ((double)y[i] != (double)(float)want[i]) {
            fprintf(stderr, "function %d: got %.9g want %.9g\n", i, y[i], (float)want[i]);
            CHECK(0);
        }
    CHECK(run(m, INTERP_F32, 1, 0, ins, outs, NULL));
    CHECK(y[0] == f32_exp(2.25f) && y[2] == 1.5f && y[4] == f32_sigmoid(2.25f));
    module_free(m);
}

/* ---- Poisson ---- */

static bool
poisson_expected(uint64_t seed, uint32_t stream, double gain, int T, int B, int64_t base, int numel,
                 const float *x, const float *got)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < numel; i++) {
                float u = rt_uniform(seed, stream, (uint32_t)t, (uint64_t)((base + b) * numel + i));
                float want = u < (float)(gain * x[b * numel + i]) ? 1.0f : 0.0f;
                if (got[(b * T + t) * numel + i] != want)
                    return false;
            }
    return true;
}

static void
test_poisson(void)
{
    enum { T = 3, B = 4, N = 5 };
    Module *m = cur = new_module(T);
    m->seed = 77;
    ValueId x = add_input(m, DT_F32, false, 1, N, 0, 0);
    ValueId p1 = add_op(m, OP_POISSON, x, -1);
    set_attr_f(m, p1, "gain", 0.8);
    ValueId p2 = add_op(m, OP_POISSON, x, -1);
    set_attr_i(m, p2, "seed", 5, 5);
    module_node(m, p1)->type.dtype = module_node(m, p2)->type.dtype = DT_SPIKE;
    add_output(m, OP_SEQUENCE, p1);
    add_output(m, OP_SEQUENCE, p2);
    float xin[B * N];
    for (int i = 0; i < B * N; i++)
        xin[i] = (float)(i % 7) / 6;
    float a1[B * T * N], a2[B * T * N], b1[B * T * N], b2[B * T * N];
    const float *ins[] = {xin};
    float *outs[] = {a1, a2};
    CHECK(run(m, INTERP_F64, B, 0, ins, outs, NULL));
    CHECK(poisson_expected(77, 0, 0.8, T, B, 0, N, xin, a1));
    CHECK(poisson_expected(5, 1, 1.0, T, B, 0, N, xin, a2));
    int ones = 0;
    for (int i = 0; i < B * T * N; i++)
        ones += a1[i] == 1;
    CHECK(ones > 5 && ones < B * T * N - 5);

    /* the same draws in two batches of 2 keyed by sample_base, and in F32 */
    const float *ins_lo[] = {xin}, *ins_hi[] = {xin + 2 * N};
    float *outs_lo[] = {b1, b2}, *outs_hi[] = {b1 + 2 * T * N, b2 + 2 * T * N};
    CHECK(run(m, INTERP_F32, 2, 0, ins_lo, outs_lo, NULL));
    CHECK(run(m, INTERP_F32, 2, 2, ins_hi, outs_hi, NULL));
    CHECK(memcmp(a1, b1, sizeof a1) == 0 && memcmp(a2, b2, sizeof a2) == 0);

    /* another sample_base draws other numbers */
    CHECK(run(m, INTERP_F64, B, 100, ins, outs, NULL));
    CHECK(poisson_expected(77, 0, 0.8, T, B, 100, N, xin, a1));
    CHECK(memcmp(a1, b1, sizeof a1) != 0);

    /* the run's seed overrides the module's, a node's seed overrides both */
    InterpOptions opt = {INTERP_F64, 99, false, false};
    char err[128];
    CHECK(interp_run(m, &opt, B, 0, ins, outs, NULL, err, sizeof err));
    CHECK(poisson_expected(99, 0, 0.8, T, B, 0, N, xin, a1));
    CHECK(poisson_expected(5, 1, 1.0, T, B, 0, N, xin, a2));
    module_free(m);
}

/* ---- precision ---- */

static void
test_precision(void)
{
    /* v += c with c = 0.1 ten times: 0.9999999999999999 in double, 1.0000001 in float */
    Module *m = cur = new_module(10);
    NeuronDef *nd = new_neuron("Acc");
    int c = nparam(nd, "c", 0.1);
    int v = nstate(nd, "v", num(0));
    nstmt(nd, NS_ASSIGN, v, false, bin(NB_ADD, ST(v), PAR(c)));
    nstmt(nd, NS_FIRE, 0, false, bin(NB_GE, ST(v), num(1)));
    ValueId x = add_input(m, DT_F32, false, 1, 1, 0, 0);
    ValueId s = add_neuron(m, nd, x, NULL);
    add_output(m, OP_LAST, s);

    /* parameter-only subexpressions are folded in double and rounded once: (1 - 1/tau) * I */
    NeuronDef *nd2 = new_neuron("Decay");
    int tau = nparam(nd2, "tau", 3.0);
    nstmt(nd2, NS_OUTPUT, 0, false,
          bin(NB_MUL, bin(NB_SUB, num(1), bin(NB_DIV, num(1), PAR(tau))), IN()));
    add_output(m, OP_LAST, add_neuron(m, nd2, x, NULL));

    float xin[1] = {1}, y[1], yd[1];
    const float *ins[] = {xin};
    float *outs[] = {y, yd};
    CHECK(run(m, INTERP_F64, 1, 0, ins, outs, NULL));
    CHECK(y[0] == 0);
    CHECK(yd[0] == (float)(1.0 - 1.0 / 3.0));
    CHECK(run(m, INTERP_F32, 1, 0, ins, outs, NULL));
    CHECK(y[0] == 1);
    float per_op = 1.0f - 1.0f / 3.0f; /* what rounding each operation would give instead */
    CHECK(yd[0] == (float)(1.0 - 1.0 / 3.0) && yd[0] != per_op);
    module_free(m);
}

/* ---- batches larger than one pass, and failures ---- */

static void
test_chunks(void)
{
    enum { T = 5, B = 150, N = 3 };
    Module *m = cur = new_module(T);
    NeuronDef *nd = new_neuron("IF");
    int v = nstate(nd, "v", num(0));
    nstmt(nd, NS_ASSIGN, v, false, bin(NB_ADD, ST(v), IN()));
    nstmt(nd, NS_FIRE, 0, false, bin(NB_GE, ST(v), num(1)));
    nstmt(nd, NS_RESET_SUB, v, false, num(1));
    ValueId x = add_input(m, DT_F32, false, 1, N, 0, 0);
    ValueId p = add_op(m, OP_POISSON, x, -1);
    module_node(m, p)->type.dtype = DT_SPIKE;
    ValueId sp = add_neuron(m, nd, p, NULL), sx = add_neuron(m, nd, x, NULL);
    add_output(m, OP_SEQUENCE, sp);
    add_output(m, OP_COUNT, sx);
    float *xin = malloc(B * N * sizeof *xin), *ya = malloc(B * T * N * sizeof *ya),
          *ca = malloc(B * N * sizeof *ca), *yb = malloc(B * T * N * sizeof *yb),
          *cb = malloc(B * N * sizeof *cb);
    for (int i = 0; i < B * N; i++)
        xin[i] = (float)(i % 17) / 16;
    double *counts_a = calloc((size_t)m->nnodes, sizeof(double));
    double *counts_b = calloc((size_t)m->nnodes, sizeof(double));
    const float *ins[] = {xin};
    float *outs[] = {ya, ca};
    CHECK(run(m, INTERP_F64, B, 1000, ins, outs, counts_a));
    bool ok = true;
    for (int b = 0; b < B; b++) {
        const float *ins1[] = {xin + b * N};
        float *outs1[] = {yb + b * T * N, cb + b * N};
        ok = run(m, INTERP_F64, 1, 1000 + b, ins1, outs1, counts_b) && ok;
    }
    CHECK(ok);
    CHECK(memcmp(ya, yb, B * T * N * sizeof *ya) == 0);
    CHECK(memcmp(ca, cb, B * N * sizeof *ca) == 0);
    CHECK(counts_a[sp] == counts_b[sp] && counts_a[sx] == counts_b[sx] && counts_a[sp] > 0);
    double total = 0;
    for (int i = 0; i < B * N; i++)
        total += ca[i];
    CHECK(counts_a[sx] == total);
    free(xin);
    free(ya);
    free(ca);
    free(yb);
    free(cb);
    free(counts_a);
    free(counts_b);
    module_free(m);
}

static void
test_failures(void)
{
    Module *m = cur = new_module(2);
    ValueId x = add_input(m, DT_F32, false, 1, 3, 0, 0);
    ValueId d = add_op(m, OP_DENSE, x, -1);
    set_layer_name(m, d, "fc");
    set_type(m, d, DT_F32, true, 1, 2, 0, 0);
    add_weight(m, d, 0, 2, 2, 3, 0, 0);
    add_weight(m, d, 1, 1, 2, 0, 0, 0);
    m->weights[1].data = NULL;
    add_output(m, OP_LAST, d);
    float xin[3] = {0}, y[2];
    const float *ins[] = {xin};
    float *outs[] = {y};
    char err[128];
    InterpOptions opt = {INTERP_F64, -1, false, false};
    CHECK(!interp_run(m, &opt, 1, 0, ins, outs, NULL, err, sizeof err));
    CHECK(strstr(err, "fc.bias") && strstr(err, "not bound"));
    CHECK(interp_run(m, &opt, 0, 0, ins, outs, NULL, err, sizeof err)); /* nothing to do */
    module_free(m);
}

/* ---- weights_bind ---- */

static uint32_t
fnv1a(const char *s)
{
    uint32_t h = 2166136261u;
    while (*s)
        h = (h ^ (unsigned char)*s++) * 16777619u;
    return h;
}

/* fc: dense 3 -> 2 with bias; cv: conv 2 -> 4, 3x3, groups 2; bn: batchnorm over 4 channels;
 * fc2: dense 4 -> 1 without bias. Nine weight slots, data unbound. */
static Module *
weights_module(void)
{
    Module *m = cur = new_module(1);
    ValueId x = add_input(m, DT_F32, false, 1, 3, 0, 0);
    ValueId fc = add_op(m, OP_DENSE, x, -1);
    set_layer_name(m, fc, "fc");
    add_weight(m, fc, 0, 2, 2, 3, 0, 0);
    add_weight(m, fc, 1, 1, 2, 0, 0, 0);
    ValueId img = add_input(m, DT_F32, false, 3, 2, 4, 4);
    ValueId cv = add_op(m, OP_CONV2D, img, -1);
    set_layer_name(m, cv, "cv");
    module_node(m, cv)->loc = (Loc){diag_intern("model.snn"), 7, 3};
    set_attr_i(m, cv, "groups", 2, 2);
    add_weight(m, cv, 0, 4, 4, 1, 3, 3);
    add_weight(m, cv, 1, 1, 4, 0, 0, 0);
    ValueId bn = add_op(m, OP_BATCHNORM, cv, -1);
    set_layer_name(m, bn, "bn");
    for (int s = 0; s < 4; s++)
        add_weight(m, bn, s, 1, 4, 0, 0, 0);
    ValueId fc2 = add_op(m, OP_DENSE, x, -1);
    set_layer_name(m, fc2, "fc2");
    set_attr_i(m, fc2, "bias", 0, 0);
    add_weight(m, fc2, 0, 2, 1, 4, 0, 0);
    for (int i = 0; i < m->nweights; i++)
        m->weights[i].data = NULL;
    return m;
}

/* everything diag printed while f ran */
static char *
capture_diag(bool (*f)(Module *, const char *), Module *m, const char *path, bool *result)
{
    FILE *tmp = tmpfile();
    if (!tmp)
        die("tmpfile");
    diag_set_stream(tmp);
    *result = f(m, path);
    diag_set_stream(NULL);
    long n = ftell(tmp);
    char *buf = calloc((size_t)n + 1, 1);
    rewind(tmp);
    if (fread(buf, 1, (size_t)n, tmp) != (size_t)n)
        die("fread");
    fclose(tmp);
    return buf;
}

static bool
bind_path(Module *m, const char *path)
{
    return weights_bind(m, path);
}

static void
write_file(const char *path, const void *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n)
        die("cannot write %s", path);
    fclose(f);
}

static void
test_weights_seeded(void)
{
    Module *m = weights_module();
    CHECK(weights_bind(m, NULL));
    bool ok = true;
    for (int i = 0; i < m->nweights; i++) {
        const Weight *w = &m->weights[i];
        const char *slot = op_info(m->nodes[w->node].op)->weights[w->slot];
        ok = ok && w->data;
        for (int64_t k = 0; ok && k < w->numel; k++) {
            double want;
            if (m->nodes[w->node].op == OP_BATCHNORM) {
                want = strcmp(slot, "weight") == 0 || strcmp(slot, "running_var") == 0;
            } else {
                int fan_in = strncmp(w->name, "fc.", 3) == 0   ? 3
                             : strncmp(w->name, "cv.", 3) == 0 ? 9
                                                               : 4;
                double bound = 1 / sqrt(fan_in);
                double u = rt_uniform(1234, fnv1a(w->name), 0, (uint64_t)k);
                want = (float)((2 * u - 1) * bound);
                ok = ok && fabs(w->data[k]) <= bound;
            }
            if (w->data[k] != want) {
                fprintf(stderr, "%s[%lld] = %.9g, want %.9g\n", w->name, (long long)k, w->data[k],
                        want);
                ok = false;
            }
        }
    }
    CHECK(ok);
    /* same seed, same values; another seed, others */
    Module *m2 = weights_module();
    CHECK(weights_bind(m2, NULL));
    CHECK(memcmp(m->weights[0].data, m2->weights[0].data, 6 * sizeof(float)) == 0);
    Module *m3 = weights_module();
    m3->seed = 1235;
    CHECK(weights_bind(m3, NULL));
    CHECK(memcmp(m->weights[0].data, m3->weights[0].data, 6 * sizeof(float)) != 0);
    CHECK(m->weights[0].data[0] != m->weights[1].data[0]);
    module_free(m);
    module_free(m2);
    module_free(m3);
}

static void
test_weights_file(void)
{
    char dir[] = "/tmp/snnc_test_interp_XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp");
    char good[256], bad[256], i64[256], missing[256];
    snprintf(good, sizeof good, "%s/good.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    snprintf(i64, sizeof i64, "%s/i64.safetensors", dir);
    snprintf(missing, sizeof missing, "%s/missing.safetensors", dir);
    char err[256];

    /* a file matching the model, stored as f16 (values exact in f16) */
    Module *m = weights_module();
    RtTensor ts[9];
    memset(ts, 0, sizeof ts);
    for (int i = 0; i < m->nweights; i++) {
        const Weight *w = &m->weights[i];
        CHECK(rt_tensor_init(&ts[i], w->name, w->rank, w->dims, err, sizeof err) == 0);
        for (int64_t k = 0; k < w->numel; k++)
            ts[i].data[k] = (float)(i * 100 + k) / 4;
    }
    CHECK(rt_safetensors_write(good, ts, m->nweights, RT_F16, err, sizeof err) == 0);
    bool result;
    char *out = capture_diag(bind_path, m, good, &result);
    CHECK(result && out[0] == 0);
    CHECK(m->weights[2].data && m->weights[2].data[5] == (float)(200 + 5) / 4);
    CHECK(m->weights[8].data[3] == (float)(803) / 4);
    free(out);
    module_free(m);

    /* via m->weights_path; wrong shape (fc.bias), missing (cv.weight), extra (junk, more) */
    m = weights_module();
    m->weights_path = bad;
    int64_t d3 = 3;
    RtTensor saved = ts[1], saved2 = ts[2];
    CHECK(rt_tensor_init(&ts[1], "fc.bias", 1, &d3, err, sizeof err) == 0);
    CHECK(rt_tensor_init(&ts[2], "junk", 1, &d3, err, sizeof err) == 0);
    RtTensor extra;
    CHECK(rt_tensor_init(&extra, "more", 1, &d3, err, sizeof err) == 0);
    RtTensor all[10];
    memcpy(all, ts, sizeof ts);
    all[9] = extra;
    CHECK(rt_safetensors_write(bad, all, 10, RT_F32, err, sizeof err) == 0);
    int errors = diag_error_count();
    out = capture_diag(bind_path, m, NULL, &result);
    CHECK(!result);
    CHECK(diag_error_count() == errors + 3); /* the unused tensors are one error */
    char want[512];
    snprintf(want, sizeof want,
             "model.snn:7:3: error: weights file '%s' has no tensor 'cv.weight' (expected "
             "f32/f16/bf16 of shape [4, 1, 3, 3])",
             bad);
    CHECK(strstr(out, want) != NULL);
    snprintf(want, sizeof want, "tensor 'fc.bias' in '%s' has shape [3]; layer 'fc' expects [2]",
             bad);
    CHECK(strstr(out, want) != NULL);
    snprintf(want, sizeof want,
             "%s: error: 2 tensors are not used by the model: 'junk', 'more' (its weights are: "
             "fc.weight, fc.bias, cv.weight, cv.bias, bn.weight, bn.bias, bn.running_mean, "
             "bn.running_var, ... (9 in all))",
             bad);
    CHECK(strstr(out, want) != NULL);
    if (nfail)
        fputs(out, stderr);
    free(out);
    rt_tensor_free(&ts[1]);
    rt_tensor_free(&ts[2]);
    rt_tensor_free(&extra);
    ts[1] = saved;
    ts[2] = saved2;
    module_free(m);

    /* an integer tensor, written by hand: fc.weight as I64 */
    m = weights_module();
    const char *hdr = "{\"fc.weight\":{\"dtype\":\"I64\",\"shape\":[2,3],\"data_offsets\":[0,48]}}";
    size_t hl = strlen(hdr);
    unsigned char file[8 + 128 + 48];
    memset(file, 0, sizeof file);
    for (int i = 0; i < 8; i++)
        file[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(file + 8, hdr, hl);
    write_file(i64, file, 8 + hl + 48);
    out = capture_diag(bind_path, m, i64, &result);
    CHECK(!result);
    snprintf(want, sizeof want,
             "tensor 'fc.weight' in '%s' has dtype i64; weights must be f32, f16 or bf16", i64);
    CHECK(strstr(out, want) != NULL);
    CHECK(strstr(out, "no tensor 'fc.bias'") != NULL);
    free(out);

    /* a file that cannot be read: named once */
    out = capture_diag(bind_path, m, missing, &result);
    CHECK(!result);
    snprintf(want, sizeof want, "%s: error: cannot open", missing);
    CHECK(strncmp(out, want, strlen(want)) == 0);
    free(out);
    module_free(m);

    for (int i = 0; i < 9; i++)
        rt_tensor_free(&ts[i]);
    unlink(good);
    unlink(bad);
    unlink(i64);
    rmdir(dir);
}

int
main(void)
{
    test_dense();
    test_conv2d();
    test_pool();
    test_batchnorm();
    test_elementwise();
    test_delay();
    test_lif_hard_reset();
    test_subtract_reset();
    test_delayed_reset();
    test_fire_down();
    test_refractory();
    test_output_and_readouts();
    test_functions();
    test_poisson();
    test_precision();
    test_chunks();
    test_failures();
    test_weights_seeded();
    test_weights_file();
    printf("%d passed, %d failed\n", npass, nfail);
    diag_reset();
    return nfail ? 1 : 0;
}
