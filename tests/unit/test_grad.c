/* test_grad.c: the reference backward pass (ir/interp_grad.c) against finite differences. Each
 * model runs in double with its spikes replaced by the surrogate's primitive (a smooth network,
 * InterpOptions.smooth_spikes), where surrogate-gradient BPTT is the true gradient of a smooth
 * function; the loss is a fixed random weighting of every output. Central differences,
 * Richardson-extrapolated (steps h and h/2 that keep the float weights and inputs exact), must
 * agree with interp_grad for every weight and input element to about 1e-7. Also: every surrogate is
 * non-zero at the threshold, a neuron that cannot be differentiated is refused with a reason, and
 * detach_reset drops exactly the reset's term. */
#include "frontend/frontend.h"
#include "ir/interp_impl.h"
#include "runtime/philox.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/check.h"

enum { BATCH = 3, MAXOUT = 4 };

typedef struct Case {
    Module *m;
    float *in[4];
    size_t in_n[4];
    float *out[MAXOUT];
    float *coef[MAXOUT]; /* the loss: sum over outputs of coef . output */
    size_t out_n[MAXOUT];
} Case;

static void
fill(float *p, size_t n, uint32_t stream, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(lo + (hi - lo) * rt_uniform(7, stream, 0, i));
}

static size_t
samples_elems(const Module *m, ValueId v)
{
    const Node *n = &m->nodes[v];
    return (size_t)type_numel(&n->type) *
           (size_t)((n->op == OP_INPUT ? n->is_per_step_input : n->type.has_time) ? m->timesteps
                                                                                  : 1) *
           BATCH;
}

static Case
make_case(const char *text)
{
    Case c;
    memset(&c, 0, sizeof c);
    c.m = fe_load_text("grad.snn", text, strlen(text), NULL);
    if (!c.m || !weights_bind(c.m, NULL)) {
        fprintf(stderr, "model does not load:\n%s\n", text);
        exit(1);
    }
    for (int i = 0; i < c.m->ninputs; i++) {
        c.in_n[i] = samples_elems(c.m, c.m->inputs[i]);
        c.in[i] = malloc(c.in_n[i] * sizeof(float));
        fill(c.in[i], c.in_n[i], 100 + (uint32_t)i, -0.5, 2.0);
    }
    for (int k = 0; k < c.m->noutputs; k++) {
        c.out_n[k] = samples_elems(c.m, c.m->outputs[k]);
        c.out[k] = malloc(c.out_n[k] * sizeof(float));
        c.coef[k] = malloc(c.out_n[k] * sizeof(float));
        fill(c.coef[k], c.out_n[k], 200 + (uint32_t)k, -1.0, 1.0);
    }
    return c;
}

static void
free_case(Case *c)
{
    for (int i = 0; i < c->m->ninputs; i++)
        free(c->in[i]);
    for (int k = 0; k < c->m->noutputs; k++) {
        free(c->out[k]);
        free(c->coef[k]);
    }
    module_free(c->m);
}

static void
coef_grad(void *ctx, int64_t first, int nb, float **og)
{
    const Case *c = ctx;
    for (int k = 0; k < c->m->noutputs; k++) {
        size_t per = c->out_n[k] / BATCH;
        memcpy(og[k], c->coef[k] + (size_t)first * per, (size_t)nb * per * sizeof(float));
    }
}

/* the loss in double: the interpreter's own loop (interp_run's), the outputs read from its
 * double buffers before interp_run would round them to float */
static double
loss(Case *c, const InterpOptions *o)
{
    char err[256];
    Interp ip;
    const Module *m = c->m;
    interp_init(&ip, m, o, BATCH, 0, (const float *const *)c->in, c->out, err, sizeof err);
    ip.keep_all = o->batch_stats; /* layer by layer: every step of every value kept */
    if (!interp_setup(&ip) || ip.chunk < BATCH) {
        fprintf(stderr, "interpreter: %s\n", err);
        exit(1);
    }
    ip.b0 = 0;
    ip.nb = BATCH;
    for (ValueId v = 0; v < m->nnodes; v++)
        if (ip.nodes[v].neuron) interp_reset_neuron(&ip, &ip.nodes[v]);
    double l = 0;
    if (o->batch_stats) /* batch statistics need every step of a layer's input: layer by layer */
        for (int k = 0; k < m->nnodes; k++)
            for (int t = 0; t < ip.T; t++)
                interp_eval_node(&ip, ip.order[k], t, NULL);
    for (int t = 0; t < ip.T; t++) {
        if (!o->batch_stats)
            for (int k = 0; k < m->nnodes; k++)
                interp_eval_node(&ip, ip.order[k], t, NULL);
        for (int k = 0; k < m->noutputs; k++) {
            ValueId v = m->outputs[k];
            if (m->nodes[v].op != OP_SEQUENCE) continue;
            size_t numel = (size_t)ip.nodes[v].numel;
            const double *y = ip_val(&ip, v, t);
            for (int b = 0; b < BATCH; b++)
                for (size_t i = 0; i < numel; i++)
                    l += (double)c->coef[k][((size_t)b * (size_t)ip.T + (size_t)t) * numel + i] *
                         y[(size_t)b * numel + i];
        }
    }
    for (int k = 0; k < m->noutputs; k++) {
        ValueId v = m->outputs[k];
        Op op = m->nodes[v].op;
        if (op == OP_SEQUENCE) continue;
        size_t n = (size_t)BATCH * (size_t)ip.nodes[v].numel;
        for (size_t i = 0; i < n; i++)
            l += (double)c->coef[k][i] *
                 (op == OP_MEAN ? ip.nodes[v].acc[i] / ip.T : ip.nodes[v].acc[i]);
    }
    interp_teardown(&ip);
    return l;
}

/* a power-of-two step such that p +- h and p +- h/2 are floats */
static double
step_for(float p)
{
    int e;
    frexp(p == 0 ? 1.0 : (double)p, &e);
    return ldexp(1.0, e - 9);
}

static double
fd(Case *c, const InterpOptions *o, float *p)
{
    float keep = *p;
    double h = step_for(keep), d[2];
    for (int k = 0; k < 2; k++) {
        double hk = k ? h / 2 : h;
        *p = (float)(keep + hk);
        double up = loss(c, o);
        *p = (float)(keep - hk);
        double down = loss(c, o);
        d[k] = (up - down) / (2 * hk);
    }
    *p = keep;
    return (4 * d[1] - d[0]) / 3;
}

static int nchecked;
static double worst;

static bool
agree(const char *model, const char *what, size_t i, double got, double want, double scale)
{
    double err = fabs(got - want) / (fabs(want) + scale);
    nchecked++;
    if (err > worst) worst = err;
    if (err <= 2e-6) return true;
    fprintf(stderr, "%s: %s[%zu]: backward %.12g, finite differences %.12g (error %.3g)\n", model,
            what, i, got, want, err);
    return false;
}

static void
check_case_stats(const char *name, const char *text, bool batch_stats)
{
    Case c = make_case(text);
    InterpOptions o = {INTERP_F64, -1, true, batch_stats};
    Module *m = c.m;
    double *wg[64] = {0}, *ig[4] = {0};
    for (int w = 0; w < m->nweights; w++)
        wg[w] = calloc((size_t)m->weights[w].numel, sizeof(double));
    for (int i = 0; i < m->ninputs; i++)
        ig[i] = calloc(c.in_n[i], sizeof(double));
    char err[256];
    bool ok = interp_grad(m, &o, BATCH, 0, (const float *const *)c.in, c.out, coef_grad, &c, ig, wg,
                          err, sizeof err);
    CHECK(ok);
    if (!ok) {
        fprintf(stderr, "%s: %s\n", name, err);
        return;
    }
    /* the scale of the gradients, for elements whose gradient is near zero */
    double scale = 0;
    for (int w = 0; w < m->nweights; w++)
        for (int64_t j = 0; j < m->weights[w].numel; j++)
            scale = fmax(scale, fabs(wg[w][j]));
    scale *= 1e-3;
    int bad = 0;
    for (int w = 0; w < m->nweights; w++) {
        Weight *wt = &m->weights[w];
        if (strstr(wt->name, "running_")) continue; /* statistics, not trained */
        for (int64_t j = 0; j < wt->numel && bad < 5; j++)
            if (!agree(name, wt->name, (size_t)j, wg[w][j], fd(&c, &o, &wt->data[j]), scale)) bad++;
    }
    for (int i = 0; i < m->ninputs && bad < 5; i++)
        for (size_t j = 0; j < c.in_n[i] && bad < 5; j += 1 + c.in_n[i] / 40)
            if (!agree(name, "input", j, ig[i][j], fd(&c, &o, &c.in[i][j]), scale)) bad++;
    CHECK(bad == 0);
    for (int w = 0; w < m->nweights; w++)
        free(wg[w]);
    for (int i = 0; i < m->ninputs; i++)
        free(ig[i]);
    free_case(&c);
}

static void
check_case(const char *name, const char *text)
{
    check_case_stats(name, text, false);
}

static void
test_finite_differences(void)
{
    /* two LIF layers on a per-step input, a mean and a count readout */
    check_case("mlp",
               "model mlp {\n timesteps 4\n input x : f32[T, 5]\n"
               " h = dense(x, 6)\n s = LIF(h, tau = 2.0)\n o = dense(s, 3)\n"
               " s2 = LIFSoft(o, tau = 3.0)\n output rate = mean(s2)\n output c = count(s)\n}\n");
    /* a static image: conv, batchnorm, IF, pools, flatten; the static path's gradient is summed */
    check_case("conv", "model conv {\n timesteps 3\n input img : f32[2, 6, 6]\n"
                       " c = conv2d(img, 3, 3, pad = 1)\n b = batchnorm(c)\n s = IF(b)\n"
                       " p = avgpool2d(s, 2)\n q = sumpool2d(s, 3)\n"
                       " f = dense(flatten(p), 4) \n g = dense(flatten(q), 4)\n"
                       " o = LIF(add(f, g), tau = 2.0)\n output n = count(o)\n}\n");
    /* recurrence through prev, a two-state neuron, a state probe and a whole sequence */
    check_case("recurrent", "model rec {\n timesteps 5\n input x : f32[T, 4]\n"
                            " a = dense(x, 5)\n s = CubaLIF(add(a, dense(prev(s), 5)), tau_mem_inv "
                            "= 400.0, tau_syn_inv = 300.0, dt = 0.001)\n"
                            " output seq = sequence(s)\n output v = last(state(s, \"v\"))\n}\n");
    /* user neurons: lets, functions, output expressions, a non-detached subtract reset before fire,
     * the spike read in an update (ALIF), a readout by max, sub, mul and scale */
    check_case("user", "neuron Leak(beta = 0.8, th = 1.0) {\n state u = 0.0\n u = beta * u + I\n"
                       " reset u -= th\n fire u > th\n surrogate atan(alpha = 2.0)\n}\n"
                       "neuron Soft(k = 1.5) {\n state v = 0.0\n let a = tanh(k * I)\n"
                       " v = v * sigmoid(v) + exp(-abs(a)) + sqrt(I * I + 1)\n output v / 2\n}\n"
                       "model user {\n timesteps 4\n input x : f32[T, 4]\n"
                       " d = dense(x, 4)\n s = Leak(d)\n e = ALIF(dense(x, 4), beta = 0.5)\n"
                       " r = Soft(sub(scale(d, 0.5), mul(s, d)))\n"
                       " output m = max(r)\n output k = mean(e)\n output l = count(s)\n}\n");
    /* other surrogates, and a LIF without decay_input and with a non-zero reset value */
    check_case("surrogates", "model sg {\n timesteps 4\n input x : f32[T, 4]\n"
                             " s1 = LIF(dense(x, 4), decay_input = 0, v_reset = -0.25)\n"
                             " s2 = LIFBox(dense(x, 4), tau_mem_inv = 500.0)\n"
                             " output a = count(s1)\n output b = count(s2)\n}\n");
    /* learned neuron parameters: PLIF's w (under a sigmoid), snnTorch's beta (clamped) and
     * threshold (in fire and the reset), a user neuron's parameter in a let and its output, and
     * one inside a recurrence (step by step) */
    check_case("learned", "neuron Gain(k = 1.0) {\n state v = 0.0\n let a = tanh(k * I)\n"
                          " v = 0.5 * v + a * k\n output v\n}\n"
                          /* snnTorch's Leaky but with the reset not detached: the smooth
                           * network's true gradient */
                          "neuron LeakyA(beta = 0.9, threshold = 1.0) {\n state u = 0.0\n"
                          " u = clamp(beta, 0, 1) * u + I\n reset u -= threshold\n"
                          " fire u > threshold\n surrogate atan(alpha = 2.0)\n}\n"
                          "model learned {\n timesteps 4\n input x : f32[T, 4]\n"
                          " s = PLIF(dense(x, 5), w = learn(0.4))\n"
                          " l = LeakyA(dense(s, 4), beta = learn(0.7), threshold = learn(0.6))\n"
                          " g = Gain(dense(x, 3), k = learn(1.3))\n"
                          " output a = count(l)\n output b = mean(g)\n}\n");
    check_case("learned-recurrent",
               "model lr {\n timesteps 5\n input x : f32[T, 3]\n"
               " s = PLIF(add(dense(x, 4), dense(prev(s), 4)), w = learn(-0.3), v_th = 0.8)\n"
               " output seq = sequence(s)\n}\n");
    /* batchnorm in training mode: the batch's statistics over every step, on a static conv
     * output (counted T times) and on a per-step dense output */
    check_case_stats("batchnorm-static",
                     "model bn {\n timesteps 3\n input img : f32[2, 5, 5]\n"
                     " c = conv2d(img, 3, 3, pad = 1)\n s = IF(batchnorm(c))\n"
                     " output a = count(s)\n}\n",
                     true);
    check_case_stats("batchnorm-steps",
                     "model bn {\n timesteps 3\n"
                     " input x : f32[T, 4]\n"
                     " d = batchnorm(dense(x, 5))\n r = LIF(d, tau = 2.0)\n"
                     " output b = mean(r)\n}\n",
                     true);
    fprintf(stderr, "finite differences: %d gradient elements, worst relative error %.3g\n",
            nchecked, worst);
}

/* surrogate_grad at u = 0 is non-zero for every surrogate, in double and float */
static void
test_surrogates_at_threshold(void)
{
    for (int id = 0; id < SG_COUNT_; id++) {
        Surrogate s = {surrogate_name((SurrogateId)id), 0, {0}, {0}};
        SurrogateFn f;
        char err[128];
        CHECK(surrogate_resolve(&s, &f, err, sizeof err));
        double g64 = surrogate_grad(&f, 1.0, 0.0, false), g32 = surrogate_grad(&f, 1.0, 0.0, true);
        CHECK(g64 > 0 && g32 > 0 && isfinite(g64));
        if (!(g64 > 0)) fprintf(stderr, "surrogate %s is %g at the threshold\n", s.name, g64);
        /* the derivative of the primitive */
        double h = 1e-5, u = 0.3;
        double num = (surrogate_primitive(&f, u + h) - surrogate_primitive(&f, u - h)) / (2 * h);
        CHECK(fabs(num - surrogate_grad(&f, 1.0, u, false)) < 1e-6);
    }
    /* unknown names and arguments are refused with the reason */
    Surrogate bad = {"atann", 0, {0}, {0}}, badarg = {"atan", 1, {"beta"}, {1}};
    SurrogateFn f;
    char err[256];
    CHECK(!surrogate_resolve(&bad, &f, err, sizeof err) &&
          strstr(err, "unknown surrogate 'atann'"));
    CHECK(!surrogate_resolve(&badarg, &f, err, sizeof err) && strstr(err, "no argument 'beta'"));
}

static void
test_refused(void)
{
    const char *text = "neuron R(th = 1.0) {\n state v = 0.0\n v = v + I\n fire v >= th\n"
                       " reset v = 0.0\n refractory 2\n surrogate atan\n}\n"
                       "model r {\n timesteps 2\n input x : f32[T, 2]\n s = R(dense(x, 2))\n"
                       " output c = count(s)\n}\n";
    Case c = make_case(text);
    InterpOptions o = {INTERP_F32, -1, false, false};
    char err[256];
    CHECK(!interp_grad(c.m, &o, BATCH, 0, (const float *const *)c.in, c.out, coef_grad, &c, NULL,
                       NULL, err, sizeof err));
    CHECK(strstr(err, "layer 's' (R) cannot be trained: a refractory period") != NULL);
    free_case(&c);
}

/* with detach_reset the spike's gradient loses exactly the reset's term: on one IF neuron with a
 * soft reset, dL/dx at the first step differs by the threshold times the later membrane's
 * adjoint */
static void
test_detach(void)
{
    const char *fmt = "neuron S(th = 1.0) {\n state v = 0.0\n v = v + I\n fire v >= th\n"
                      " reset v -= th\n surrogate straight_through(detach_reset = %d)\n}\n"
                      "model d {\n timesteps 2\n input x : f32[T, 1]\n s = S(x)\n"
                      " output c = sequence(s)\n}\n";
    double g[2];
    for (int d = 0; d < 2; d++) {
        char text[512];
        snprintf(text, sizeof text, fmt, d);
        Case c = make_case(text);
        c.in[0][0] = 1.5f; /* fires at step 0 */
        c.in[0][1] = 0.25f;
        for (size_t i = 0; i < c.out_n[0]; i++)
            c.coef[0][i] = 0;
        c.coef[0][1] = 1; /* dL/ds[1] = 1 for sample 0 */
        double gx[2 * BATCH] = {0};
        double *ig[1] = {gx};
        InterpOptions o = {INTERP_F64, -1, false, false};
        char err[256];
        CHECK(interp_grad(c.m, &o, BATCH, 0, (const float *const *)c.in, c.out, coef_grad, &c, ig,
                          NULL, err, sizeof err));
        g[d] = gx[0];
        free_case(&c);
    }
    /* straight through: ds1/dx0 = dv1/dx0 = 1 + (reset) -th * ds0/dx0 = 1 - 1 */
    CHECK(g[0] == 0.0);
    CHECK(g[1] == 1.0);
}

int
main(void)
{
    test_surrogates_at_threshold();
    test_refused();
    test_detach();
    test_finite_differences();
    printf("%d passed, %d failed\n", npass, nfail);
    return nfail > 0;
}
