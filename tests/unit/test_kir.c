/* test_kir.c: unit tests for the kernel IR (codegen/kir_lower.c, kir_print.c, kir_eval.c): small
 * models parsed from text are lowered, printed and evaluated; every output must equal the reference
 * interpreter's float32 results bit for bit, and the printed schedule must show the intended shape
 * (fused neuron scans, static kernels, step kernels for recurrence). Writes no files. */
#include "codegen/kir.h"
#include "runtime/layout.h"
#include "frontend/frontend.h"
#include "passes/pass.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/check.h"

static Module *
load(const char *text)
{
    Module *m = fe_load_text("test.snn", text, strlen(text), NULL);
    if (!m) {
        fprintf(stderr, "model does not compile:\n%s\n", text);
        exit(1);
    }
    if (!weights_bind(m, NULL)) {
        fprintf(stderr, "weights do not bind\n");
        exit(1);
    }
    return m;
}

static char *
print_program(const KProgram *p)
{
    char *s = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&s, &n);
    kir_print(f, p);
    fclose(f);
    return s;
}

static int64_t
input_numel(const Module *m, int k)
{
    const Node *n = &m->nodes[m->inputs[k]];
    return type_numel(&n->type) * (n->is_per_step_input ? m->timesteps : 1);
}

static int64_t
output_numel(const Module *m, int k)
{
    const Node *n = &m->nodes[m->outputs[k]];
    return type_numel(&n->type) * (n->type.has_time ? m->timesteps : 1);
}

/* a deterministic input with zeros, negatives and values above threshold */
static float
input_value(uint64_t i)
{
    static const float vals[] = {0.9f, 0.1f, 1.7f, -0.3f, 0.55f, 2.2f, 0.0f,
                                 0.35f, 1.1f, -1.2f, 0.8f, 0.05f, 3.0f};
    uint64_t h = i * 0x9E3779B97F4A7C15ull;
    return vals[(h >> 33) % 13] * (1.0f + (float)((h >> 20) & 7) / 16.0f);
}

/* does kernel k use buffer b (load or store)? */
static bool
expr_uses(const KExpr *e, int b)
{
    return e && ((e->kind == KX_LOAD && e->buf == b) || expr_uses(e->a, b) || expr_uses(e->b, b) ||
                 expr_uses(e->c, b));
}

static bool
stmts_use(KStmt *const *s, int n, int b)
{
    for (int i = 0; i < n; i++) {
        const KStmt *st = s[i];
        bool is_store = st->kind == KS_STORE || st->kind == KS_VLOAD || st->kind == KS_VFMA ||
                        st->kind == KS_VSTORE;
        if ((is_store && st->buf == b) || expr_uses(st->lo, b) || expr_uses(st->hi, b) ||
            expr_uses(st->index, b) || expr_uses(st->a, b) || stmts_use(st->body, st->nbody, b) ||
            stmts_use(st->els, st->nels, b))
            return true;
    }
    return false;
}

/* The memory plan's promise for temporaries zeroed before a run: nothing that shares their region
 * is used by a kernel up to their last use (it would overwrite the zeros), and buffers of one slot
 * are never used by one kernel. */
static bool
plan_keeps_zeros(const KProgram *p)
{
    for (int a = 0; a < p->nbufs; a++) {
        const KBuf *ka = &p->bufs[a];
        if (ka->kind != KB_TEMP || ka->slot == 0) continue;
        int last = -1;
        for (int k = 0; k < p->nkernels; k++)
            if (stmts_use(p->kernels[k].body, p->kernels[k].nbody, a)) last = k;
        for (int b = 0; b < p->nbufs; b++) {
            if (b == a || p->bufs[b].slot != ka->slot) continue;
            for (int k = 0; k < p->nkernels; k++) {
                const Kernel *kk = &p->kernels[k];
                bool uses_b = stmts_use(kk->body, kk->nbody, b);
                if (uses_b && stmts_use(kk->body, kk->nbody, a)) {
                    fprintf(stderr, "%s and %s share slot %d and kernel %s\n", ka->name,
                            p->bufs[b].name, ka->slot, kk->name);
                    return false;
                }
                if (uses_b && !ka->is_written_first && k <= last) {
                    fprintf(stderr, "%s (zeroed) shares slot %d with %s, used by %s first\n",
                            ka->name, ka->slot, p->bufs[b].name, kk->name);
                    return false;
                }
            }
        }
    }
    return true;
}

/* runs interp (f32) and the kernel IR lowered for `target` on `batch` samples at sample_base; true
 * when every output is bitwise identical */
static bool
same_on_target(const char *text, int batch, int64_t sample_base, char **printed, KTarget target,
               Schedule schedule, bool is_fused)
{
    Module *m = load(text);
    m->schedule = schedule;
    /* the memory plan where the schedule is step by step (step loops) and fused (kir_eval lays
     * the arena out as planned, written-first regions full of garbage) */
    if (is_fused || schedule == SCHEDULE_STEP) m->memory = MEMORY_REUSE;
    bool changed;
    /* fused: the fuse pass's kernels, and on the GPU layers summed in the scans that read them
     * (scan-epilogue, whose marks the CPU lowering ignores) */
    if (is_fused && (!pass_fuse(m, &changed) || !pass_scan_epilogue(m, &changed))) {
        module_free(m);
        return false;
    }
    /* event-driven spike layers where the schedule is layer by layer (as -O1 and up); step by
     * step the kernels for real inputs read the spikes (as -O0) */
    if (schedule == SCHEDULE_LAYER && !pass_events(m, &changed)) {
        module_free(m);
        return false;
    }
    KProgram *p = kir_lower_for(m, target);
    if (!p)
        return false;
    if (m->memory == MEMORY_REUSE && !plan_keeps_zeros(p)) {
        kir_free(p);
        module_free(m);
        return false;
    }
    if (printed)
        *printed = print_program(p);
    float **in = calloc((size_t)m->ninputs, sizeof *in);
    float **a = calloc((size_t)m->noutputs, sizeof *a), **b = calloc((size_t)m->noutputs, sizeof *b);
    for (int k = 0; k < m->ninputs; k++) {
        int64_t n = input_numel(m, k) * batch;
        in[k] = malloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++)
            in[k][i] = input_value((uint64_t)(i + 1000 * k));
    }
    for (int k = 0; k < m->noutputs; k++) {
        int64_t n = output_numel(m, k) * batch;
        a[k] = calloc((size_t)n, sizeof(float));
        b[k] = malloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++)
            b[k][i] = NAN; /* every element must be written */
    }
    InterpOptions io = {INTERP_F32, -1, false, false};
    char err[256];
    /* spike counts too: they start at 1 to check that both add to what is there */
    double *ca = malloc((size_t)m->nnodes * sizeof *ca), *cb = malloc((size_t)m->nnodes * sizeof *cb);
    for (int v = 0; v < m->nnodes; v++)
        ca[v] = cb[v] = 1;
    bool ok = interp_run(m, &io, batch, sample_base, (const float *const *)in, a, ca, err,
                         sizeof err);
    if (!ok)
        fprintf(stderr, "interp: %s\n", err);
    if (ok && !kir_eval(p, batch, sample_base, (const float *const *)in, b, cb, err, sizeof err)) {
        fprintf(stderr, "kir_eval (%s): %s\n", target == KTARGET_GPU ? "gpu" : "cpu", err);
        ok = false;
    }
    for (int v = 0; ok && v < m->nnodes; v++)
        if (ca[v] != cb[v]) {
            fprintf(stderr, "spike count of node %d: interp %.17g, kernel IR %.17g\n", v, ca[v],
                    cb[v]);
            ok = false;
        }
    free(ca);
    free(cb);
    for (int k = 0; ok && k < m->noutputs; k++) {
        int64_t n = output_numel(m, k) * batch;
        for (int64_t i = 0; i < n; i++)
            if (memcmp(&a[k][i], &b[k][i], sizeof(float)) != 0) {
                fprintf(stderr, "output %d element %lld: interp %.9g, kernel IR %.9g\n", k,
                        (long long)i, a[k][i], b[k][i]);
                ok = false;
                break;
            }
    }
    for (int k = 0; k < m->ninputs; k++)
        free(in[k]);
    for (int k = 0; k < m->noutputs; k++) {
        free(a[k]);
        free(b[k]);
    }
    free(in);
    free(a);
    free(b);
    kir_free(p);
    module_free(m);
    return ok;
}

/* the same for both targets' lowerings, time-batched (the time-batch pass's schedule) and step by
 * step (with the memory plan), and time-batched after the fuse and scan-epilogue passes (with the
 * memory plan); spike
 * layers event-driven when time-batched;
 * printed: the CPU's time-batched kernel IR without either */
static bool
same_as_interp(const char *text, int batch, int64_t sample_base, char **printed)
{
    bool ok = true;
    for (int k = 0; k < 6; k++) {
        KTarget target = k & 1 ? KTARGET_GPU : KTARGET_CPU;
        Schedule schedule = (k >> 1) == 1 ? SCHEDULE_STEP : SCHEDULE_LAYER;
        bool is_fused = (k >> 1) == 2;
        if (!same_on_target(text, batch, sample_base, k == 0 ? printed : NULL, target, schedule,
                            is_fused)) {
            fprintf(stderr, "  (the %s lowering, scheduled %s%s, differs from the interpreter)\n",
                    target == KTARGET_GPU ? "GPU" : "CPU",
                    schedule == SCHEDULE_STEP ? "step by step" : "layer by layer",
                    is_fused ? ", fused" : "");
            ok = false;
        }
    }
    return ok;
}

/* the fuse pass's kernels: elementwise chains evaluated where a neuron layer loads them (static
 * and per-step inputs, in and out of recurrence), neuron scans inside max, average and sum pooling
 * of 2x2, 3x3 and 1x2 windows, pooling that cannot take its neuron layer (overlapping windows,
 * sizes not divided), a neuron layer with a second user, neuron scans computing their readouts
 * (max of an LI's values, last, sequence, count) */
static void
test_fusion(void)
{
    const char *text =
        "model fused {\n timesteps 5\n input x : f32[2, 6, 6]\n input y : f32[T, 3, 6, 6]\n"
        " b1 = batchnorm(conv2d(x, 3, kernel = 3, pad = 1))\n"
        " s1 = IF(b1, v_th = 0.6)\n p1 = maxpool(s1, 2)\n"
        " s2 = LIF(scale(batchnorm(y), factor = 1.5) + b1, tau = 2.0)\n p2 = avgpool(s2, 3)\n"
        " s3 = IF(y - b1, v_th = 0.4)\n p3 = sumpool(s3, (1, 2))\n"
        " s4 = IFSoft(y * b1, v_th = 0.3)\n p4 = maxpool(s4, 2, stride = 1)\n"
        " s5 = IF(b1 + y, v_th = 0.5)\n p5 = avgpool(s5, 4)\n"
        " s6 = IF(y, v_th = 0.7)\n p6 = maxpool(s6, 2)\n"
        " output o1 = sequence(p1)\n output o2 = sequence(p2)\n output o3 = count(p3)\n"
        " output o4 = mean(p4)\n output o5 = sequence(p5)\n output o6 = mean(p6)\n"
        " output o7 = count(s6)\n"
        " output o8 = max(LI(y, tau = 3.0))\n output o9 = last(IF(y - b1, v_th = 0.9))\n"
        " output o10 = sequence(LIF(y, tau = 1.5))\n output o11 = count(IF(y * b1, v_th = 0.2))\n"
        "}\n";
    CHECK(same_as_interp(text, 3, 0, NULL));
    /* what the pass fused */
    Module *m = load(text);
    m->schedule = SCHEDULE_LAYER;
    bool changed = false;
    CHECK(pass_fuse(m, &changed) && changed);
    const char *want[][2] = {{"s1", "p1"}, {"b1", NULL}, {"s2", "p2"}, {"s3", "p3"},
                             {"s4", NULL}, {"s5", NULL}, {"s6", NULL}};
    /* the readouts of single-use neuron layers took them */
    static const char *const ro[] = {"o8", "o9", "o10", "o11"};
    for (size_t k = 0; k < sizeof ro / sizeof ro[0]; k++) {
        ValueId o = module_find_value(m, ro[k]);
        CHECK(o >= 0 && m->nodes[m->nodes[o].args[0]].fused_into == o);
    }
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        ValueId v = module_find_value(m, want[i][0]);
        ValueId into = want[i][1] ? module_find_value(m, want[i][1]) : -1;
        CHECK(v >= 0 && m->nodes[v].fused_into == into);
    }
    module_free(m);
    /* a recurrent layer keeps its add in its step kernel, and its pooling apart */
    CHECK(same_as_interp("model rec {\n timesteps 4\n input x : f32[T, 1, 4, 4]\n"
                         " h = IF(x + scale(prev(p), factor = 0.5), v_th = 0.5)\n"
                         " p = maxpool(h, (1, 1))\n output o = sequence(p)\n}\n",
                         2, 0, NULL));
}

static void
test_mlp(void)
{
    const char *text = "model mlp {\n timesteps 6\n input x : f32[3, 4]\n"
                       " h = dense(flatten(x), 16)\n s = LIF(h, tau = 2.0)\n"
                       " y = dense(s, 5)\n o = LIF(y, tau = 3.0, v_th = 0.5)\n"
                       " output rate = mean(o)\n output c = count(s)\n}\n";
    char *printed = NULL;
    CHECK(same_as_interp(text, 3, 0, &printed));
    CHECK(same_as_interp(text, 1, 0, NULL));
    /* the static dense runs over B rows only; the neuron is one fused scan over t */
    CHECK(printed && strstr(printed, "static (the same every step)"));
    CHECK(printed && strstr(printed, "for %j in 0..B * 16 parallel {"));
    CHECK(printed && strstr(printed, "for %t in 0..6 {"));
    CHECK(printed && strstr(printed, "buffer @h : f32[16*B] temp"));
    CHECK(printed && strstr(printed, "buffer @s : u8[96*B] temp"));
    CHECK(printed && !strstr(printed, "step in"));
    /* printing is deterministic */
    Module *m = load(text);
    m->schedule = SCHEDULE_LAYER;
    KProgram *p1 = kir_lower(m), *p2 = kir_lower(m);
    char *s1 = print_program(p1), *s2 = print_program(p2);
    CHECK(strcmp(s1, s2) == 0 && strcmp(s1, printed) == 0);
    free(s1);
    free(s2);
    kir_free(p1);
    kir_free(p2);
    module_free(m);
    free(printed);
}

static void
test_conv(void)
{
    /* gathered conv over values, scattered conv over spikes, every pool, batchnorm, strides,
     * padding, dilation and groups */
    const char *text =
        "model conv {\n timesteps 3\n input x : f32[T, 2, 9, 9]\n"
        " c1 = conv2d(x, 4, kernel = 3, stride = 2, pad = 1, groups = 2)\n"
        " s1 = IF(batchnorm(c1), v_th = 0.3)\n"
        " c2 = conv2d(s1, 6, kernel = (2, 3), pad = (1, 2), dilation = (2, 1), stride = (1, 2))\n"
        " s2 = IFSoft(c2, v_th = 0.2)\n"
        " m = maxpool(s2, 2)\n a = avgpool(c2, 2, stride = 1, pad = 1)\n"
        " u = sumpool(s1, (2, 2))\n"
        " output om = sequence(m)\n output oa = last(a)\n output ou = max(u)\n}\n";
    CHECK(same_as_interp(text, 2, 0, NULL));
}

/* src with `accumulate exact` after its model's first line, into dst[n] (the kernel text the
 * checks below name is that of double tiles) */
static const char *
exact_sums(char *dst, size_t n, const char *src)
{
    const char *m = strstr(src, "model ");
    const char *nl = m ? strchr(m, '\n') : NULL;
    if (!nl) return src;
    snprintf(dst, n, "%.*s accumulate exact\n%s", (int)(nl + 1 - src), src, nl + 1);
    return dst;
}

/* Dense and conv2d as tiles (kir.h KS_V*): the register-blocked GEMM with output tiles that do and
 * do not divide the layer and row blocks that do and do not divide the batch; spike tiles (fma_nz)
 * over u8 and i8 spikes; the event-driven scatter, per row and grouped by input; gathered
 * convolutions with groups, strides, dilation and padding; spike-list convolutions; static,
 * per-step and recurrent rows */
static void
test_layers(void)
{
    static const char neuron[] = "neuron Bip(th = 0.5) {\n state v = 0.0\n v = v + I\n"
                                 " fire v >= th\n fire down v <= -th\n v = v - spike * th\n}\n";
    static const char dense[] =
        "model dense_layers {\n timesteps 3\n input x : f32[T, 37]\n input u : f32[19]\n"
        " h = dense(x, 45)\n s = LIF(h, tau = 2.0, v_th = 0.3)\n"
        " a = dense(s, 7, bias = false)\n b = dense(s, 40)\n c = dense(u, 3)\n"
        " q = Bip(h)\n d = dense(q, 70, bias = false)\n e = dense(q, 9)\n"
        " r = LIF(dense(x, 17) + dense(prev(r), 17, bias = false), tau = 2.0, v_th = 0.2)\n"
        " output oh = sequence(h)\n output oa = sequence(a)\n output ob = sequence(b)\n"
        " output oc = last(c)\n output od = sequence(d)\n output oe = max(e)\n"
        " output orr = count(r)\n}\n";
    static const char conv[] =
        "model conv_layers {\n timesteps 2\n input x : f32[T, 4, 11, 10]\n input u : f32[3, 7, 6]\n"
        " c1 = conv2d(x, 36, kernel = 3, stride = 2, pad = 1, groups = 2)\n"
        " s1 = IF(c1, v_th = 0.3)\n"
        " c2 = conv2d(s1, 70, kernel = (2, 3), pad = (1, 2), dilation = (2, 1), stride = (1, 2),"
        " bias = false)\n"
        " s2 = IF(c2, v_th = 0.2)\n c3 = conv2d(s2, 6, kernel = 1, groups = 2)\n"
        " c4 = conv2d(u, 5, kernel = (3, 2), pad = (2, 0), dilation = (1, 2))\n"
        " c5 = conv2d(Bip(c1, th = 0.3), 33, kernel = 3, pad = 1, groups = 3, bias = false)\n"
        " output o1 = sequence(c1)\n output o2 = sequence(c2)\n output o3 = sequence(c3)\n"
        " z = IF(conv2d(x, 4, kernel = 3, pad = 1) + conv2d(prev(z), 4, kernel = 3, pad = 1,"
        " bias = false), v_th = 0.3)\n"
        " output o4 = last(c4)\n output o5 = sequence(c5)\n output r = mean(s2)\n"
        " output oz = count(z)\n}\n";
    char text[4096], exact[4200], *printed = NULL;
    /* float sums (the default), then double ones, whose kernel text is checked */
    snprintf(text, sizeof text, "%s%s", neuron, dense);
    CHECK(same_as_interp(text, 3, 0, NULL));
    CHECK(same_as_interp(text, 7, 0, NULL));
    exact_sums(exact, sizeof exact, text);
    CHECK(same_as_interp(exact, 3, 0, &printed));
    CHECK(same_as_interp(exact, 1, 0, NULL));
    CHECK(same_as_interp(exact, 4, 0, NULL));
    CHECK(same_as_interp(exact, 7, 0, NULL));
    /* weights transposed to [in][out]; 45 outputs: two tiles of 16 and one of 13; rows in blocks,
     * the last block row by row; few spike-fed outputs: one tile, zeros skipped; many: scatter */
    CHECK(printed && strstr(printed, "buffer @h.weight : f32[1665] weight 0 transposed(1, 0)"));
    CHECK(printed && strstr(printed, "locals %q: i64, %ot: i64, %r0: i64, %acc.3: f64x16"));
    CHECK(printed && strstr(printed, "vstore @h[%r0 * 45 + 32 + lanes(13)] = %acc"));
    CHECK(printed && strstr(printed, "%acc.4 = fma(f64(@x[((%r0 + 1) % B * 3 + (%r0 + 1) / B) * "
                                     "37 + %k.6]), @h.weight[%k.6 * 45 + %ot * 16 + lanes(16)], "
                                     "%acc.4)"));
    CHECK(printed && strstr(printed, "for %r in %r0..B {"));
    CHECK(printed && strstr(printed, "= fma_nz(f64(@q[%r0 * 45 + %k.6]), @e.weight[%k.6 * 9"));
    /* many outputs over 0/1 spikes: grouped by input over a block of rows (a word of row bits
     * per input, then the inputs that spiked listed), tiles of 32 and 8, a block of at most 8
     * rows input by input over the chunk's 40 outputs; over bit pairs (d): the per-row scatter */
    CHECK(printed && strstr(printed, "@b.by_input[%q * 45 + %k.11] | (1 << %i.2)"));
    CHECK(printed && strstr(printed, "%nk = %nk + i64(@b.by_input[%q * 45 + %k.12] != 0)"));
    CHECK(printed && strstr(printed, "if %nr <= 8 {"));
    CHECK(printed && strstr(printed, "vstore @b.acc[%q * 2048 + (%i.13 * 40 + 32) + lanes(8)]"));
    CHECK(printed && strstr(printed, "%nr = min(64, 3 * B - %r0)"));
    CHECK(printed && strstr(printed, "vstore @b.acc[%q * 2048 + %i.2 * 32 + lanes(8)] = %acc"));
    CHECK(printed && strstr(printed, "vstore @d.acc[%r * 70 + 64 + lanes(6)] = %acc"));
    free(printed);
    printed = NULL;
    /* grouped by input with outputs in whole tiles of 32: the weight packed [O/32][K][32] (64;
     * 1088 = two chunks of 512 and one of 64); 600 outputs end in a partial tile: [K][O]. Batch 10
     * makes 70 rows, two blocks of rows, the second partial */
    static const char wide[] =
        "model wide {\n timesteps 7\n input x : f32[T, 45]\n s = IF(x, v_th = 0.3)\n"
        " a = dense(s, 64)\n b = dense(s, 1088, bias = false)\n c = dense(s, 600)\n"
        " output oa = sequence(a)\n output ob = max(b)\n output oc = last(c)\n}\n";
    CHECK(same_as_interp(wide, 10, 0, NULL));
    CHECK(same_as_interp(exact_sums(exact, sizeof exact, wide), 10, 0, &printed));
    CHECK(same_as_interp(exact, 1, 0, NULL));
    CHECK(printed &&
          strstr(printed, "buffer @a.weight : f32[2880] weight 0 split(64) transposed(0, 2, 1)"));
    CHECK(printed &&
          strstr(printed, "buffer @b.weight : f32[48960] weight 2 split(32) transposed(0, 2, 1)"));
    CHECK(printed && strstr(printed, "buffer @c.weight : f32[27000] weight 3 transposed(1, 0)"));
    /* packed by chunk where chunks are whole (a: 64 outputs), else by tile (b: 1088) */
    CHECK(printed && strstr(printed, "/ 64 * 2880 + %k.3 * 64 + (%oc * 64 + %ot"));
    /* the walk over the inputs that spiked asks for the weight rows 32 of them ahead (the last
     * at the end), a line of 16 floats at a time and the row's last element; kir_eval checks
     * each in bounds */
    CHECK(printed && strstr(printed, "prefetch @b.weight[(%oc * 512 + %ot"));
    CHECK(printed && strstr(printed, " + 32, %nk - 1)] * 32 + (%oc * 512 + %ot"));
    CHECK(printed && strstr(printed, " % 32 + 16]\n"));
    CHECK(printed && strstr(printed, " % 32 + 31]\n"));
    CHECK(printed && strstr(printed, "if %nr <= 4 {"));
    free(printed);
    printed = NULL;
    snprintf(text, sizeof text, "%s%s", neuron, conv);
    CHECK(same_as_interp(text, 2, 0, NULL));
    CHECK(same_as_interp(text, 3, 0, NULL));
    exact_sums(exact, sizeof exact, text);
    CHECK(same_as_interp(exact, 2, 0, &printed));
    CHECK(same_as_interp(exact, 1, 0, NULL));
    CHECK(same_as_interp(exact, 3, 0, NULL));
    /* [c/g][kh][kw][out]; outputs stored channel by channel (NCHW) from a tile; spike lists, an
     * output pixel's terms (weight row, input) gathered from them, tiles of 32 and 6 channels */
    CHECK(printed &&
          strstr(printed, "buffer @c1.weight : f32[648] weight 0 transposed(1, 2, 3, 0)"));
    /* tiles of 16 and 2 channels; a row's pixels one at a time at the padded edge, in blocks
     * (4 pixels with AVX-512, else 2) inside */
    CHECK(printed &&
          strstr(printed, "vstore @c1[%r * 1080 + (%g * 18 * 30 + (%oh.2 * 5 + %ow.3)) + "
                          "lanes(16) * 30] = %acc"));
    CHECK(printed &&
          strstr(printed, "vstore @c1[%r * 1080 + (%g * 18 * 30 + (%oh.2 * 5 + (%ob.10 * "));
    CHECK(printed && strstr(printed, "lanes(2) * 30] = %acc"));
    CHECK(printed && strstr(printed, "for %e in 0..@c2.nspiking[%qi.9] {"));
    CHECK(printed && strstr(printed, "@c2.term_w[%r * 216 + %nterms] = "
                                     "((%cg * 2 + %kh) * 3 + %kw) * 70"));
    CHECK(printed && strstr(printed, "%acc.20 = fma(@c2.term_x[%r * 216 + %j.21], "
                                     "@c2.weight[@c2.term_w[%r * 216 + %j.21] + 64 + lanes(6)], "
                                     "%acc.20)"));
    CHECK(printed && strstr(printed, "buffer @c2.spikes : u8[2160*B] temp"));
    free(printed);
    printed = NULL;
    /* more than 256 channels per group: the spike lists hold i64 */
    CHECK(same_as_interp("model wide_conv {\n timesteps 2\n input x : f32[T, 2, 3, 4]\n"
                         " s = IF(conv2d(x, 300, kernel = 1), v_th = 0.2)\n"
                         " c = conv2d(s, 5, kernel = 3, pad = 1)\n output o = sequence(c)\n}\n",
                         2, 0, &printed));
    CHECK(printed && strstr(printed, "buffer @c.spikes : i64[7200*B] temp"));
    free(printed);
}

static void
test_poisson(void)
{
    const char *text = "model pois {\n timesteps 5\n seed 9\n input x : f32[20]\n"
                       " p = poisson(x, gain = 0.7)\n q = bernoulli(x, seed = 3)\n"
                       " s = LIF(dense(p + q, 8), tau = 2.0)\n"
                       " output sp = sequence(p)\n output r = mean(s)\n}\n";
    char *printed = NULL;
    /* keys depend on the global sample index: a batch that starts at sample 5 */
    CHECK(same_as_interp(text, 3, 5, &printed));
    CHECK(printed && strstr(printed, "uniform(seed 9, stream 0, %r / B, (sample_base + %r % B) * 20 + %i)"));
    CHECK(printed && strstr(printed, "uniform(seed 3, stream 1,"));
    free(printed);
}

static void
test_recurrent(void)
{
    /* a recurrent region with a two-step delay, a state probe inside and a readout of it */
    const char *text =
        "model rec {\n timesteps 7\n input x : f32[T, 6]\n"
        " h = LIF(dense(x, 10) + dense(delay(h, steps = 2), 10, bias = false), tau = 3.0)\n"
        " v = state(h, \"v\")\n"
        " g = Leaky(dense(prev(g), 4) + scale(dense(h, 4), 0.5), beta = 0.8)\n"
        " output hv = sequence(v)\n output gs = count(g)\n}\n";
    char *printed = NULL;
    CHECK(same_as_interp(text, 3, 0, &printed));
    CHECK(printed && strstr(printed, "step in 0..7 {"));
    CHECK(printed && strstr(printed, "if step == 0 {"));
    CHECK(printed && strstr(printed, "buffer @h.v : f32[10*B] temp"));
    free(printed);
}

static void
test_neurons(void)
{
    /* refractory with an output expression, bipolar spikes, adaptive thresholds, lets, functions */
    const char *text =
        "neuron Odd(tau = 4.0, t_ref = 2.5, k = 0.5) {\n"
        "  state v = 0.1\n  state w = k * 2\n  let d = exp(-1.0 / tau)\n"
        "  v = v * d + (1 - d) * I + select(w > 1, 0.01, -0.02)\n"
        "  w = clamp(w + sigmoid(v) - tanh(abs(I)), -1, 2) + min(v, 0) * max(I, 0)\n"
        "  fire v > 0.6 && !(w < -0.9)\n  reset v = floor(v) * 0.1\n  refractory t_ref\n"
        "  output v + sqrt(abs(w)) + pow(abs(v), 1.5) + log(1 + abs(I)) + (spike ? 1 : 0)\n}\n"
        "model neu {\n timesteps 9\n input x : f32[T, 7]\n"
        " a = Odd(x)\n b = STBIF(x, q_threshold = 0.5, level = 8, sym = 1)\n"
        " c = ALIF(x - scale(x, 0.25), tau = 5.0)\n d = Izhikevich(x * x)\n"
        " e = CubaLIF(x / 0.01)\n"
        " output oa = sequence(a)\n output ob = sequence(b)\n output oc = mean(c)\n"
        " output od = count(d)\n output oe = sequence(state(e, \"i\"))\n}\n";
    CHECK(same_as_interp(text, 2, 0, NULL));
}

static void
test_eval_errors(void)
{
    /* an out-of-bounds store is reported, not performed */
    Module *m = load("model t {\n timesteps 2\n input x : f32[3]\n output y = count(x)\n}\n");
    KProgram *p = kir_lower(m);
    CHECK(p != NULL);
    if (p) {
        Kernel *k = &p->kernels[p->nkernels - 1];
        KStmt *loop = k->body[0];
        KStmt *store = loop->body[loop->nbody - 1];
        CHECK(store->kind == KS_STORE);
        store->index = kx_bin(p, KB_ADD, store->index, kx_const(p, KT_I64, 100));
        float in[6] = {0}, out[6];
        float *outs[1] = {out};
        const float *ins[1] = {in};
        char err[256];
        CHECK(!kir_eval(p, 2, 0, ins, outs, NULL, err, sizeof err));
        CHECK(strstr(err, "out of bounds") != NULL);
        kir_free(p);
    }
    module_free(m);
}

/* the kernel group of the kernel that computes value `name` (its first node), or -1 */
static int
group_of(const Module *m, const KProgram *p, const char *name)
{
    ValueId v = module_find_value(m, name);
    for (int k = 0; k < p->nkernels; k++)
        if (p->kernels[k].nnodes > 0 && p->kernels[k].nodes[0] == v)
            return (int)p->kernels[k].group;
    return -1;
}

/* Kernel groups (kir_groups.def): the marks the passes set become each variant, on the CPU and the
 * GPU, and every group still computes what the interpreter does */
static void
test_groups(void)
{
    const char *text =
        "model g {\n timesteps 3\n input x : f32[2, 6, 6]\n"
        " c1 = conv2d(x, 3, kernel = 3, pad = 1)\n b1 = batchnorm(c1)\n"
        " s1 = IF(b1, v_th = 0.3)\n p1 = maxpool(s1, 2)\n"
        " d = dense(flatten(p1), 40)\n s2 = LIF(d, tau = 2.0)\n e = dense(s2, 8)\n"
        " z = scale(x, factor = 2.0)\n"
        " output o = count(IF(e, v_th = 0.2))\n output q = mean(s2)\n"
        " output y = sequence(e)\n output w = last(z)\n output bb = last(b1)\n}\n";
    CHECK(same_as_interp(text, 2, 0, NULL));
    for (int gpu = 0; gpu < 2; gpu++) {
        Module *m = load(text);
        bool changed = false;
        CHECK(pass_time_batch(m, &changed) && pass_fuse(m, &changed) &&
              pass_fold_batchnorm(m, &changed));
        CHECK(gpu ? pass_scan_epilogue(m, &changed) : pass_events(m, &changed));
        KProgram *p = kir_lower_for(m, gpu ? KTARGET_GPU : KTARGET_CPU);
        CHECK(p != NULL);
        if (!p) {
            module_free(m);
            continue;
        }
        /* conv c1 stores b1 (read twice, so not fused into s1) as its epilogue; s1 is scanned
         * into p1 */
        CHECK(group_of(m, p, "c1") == KG_EPILOGUE);
        CHECK(group_of(m, p, "s1") == KG_POOLED_SCAN);
        /* d reads spikes into 40 outputs: events on the CPU; on the GPU it is summed in s2's scan */
        CHECK(group_of(m, p, "d") == (gpu ? -1 : KG_EVENTS));
        CHECK(group_of(m, p, "s2") == KG_SCAN);
        CHECK(group_of(m, p, "e") == (gpu ? KG_FLAT : KG_TILED));
        CHECK(group_of(m, p, "z") == KG_POINTWISE);
        CHECK(group_of(m, p, "q") == KG_READOUT);
        CHECK(group_of(m, p, "y") == KG_OUTPUT);
        CHECK(group_of(m, p, "w") == KG_READOUT);
        /* the readout o computes its neuron layer: the kernel's first node is the layer */
        int nro = 0;
        for (int k = 0; k < p->nkernels; k++)
            nro += p->kernels[k].group == KG_SCAN_READOUT;
        CHECK(nro == 1);
        CHECK(strcmp(kgroup_name(KG_POOLED_SCAN), "pooled scan") == 0);
        kir_free(p);
        module_free(m);
    }
    /* a recurrent layer is a step group */
    const char *rec = "model rec {\n timesteps 4\n input x : f32[T, 1, 4, 4]\n"
                      " h = IF(x + scale(prev(p), factor = 0.5), v_th = 0.5)\n"
                      " p = maxpool(h, (1, 1))\n output o = sequence(p)\n}\n";
    Module *m = load(rec);
    bool changed = false;
    CHECK(pass_time_batch(m, &changed) && pass_fuse(m, &changed));
    KProgram *p = kir_lower(m);
    CHECK(p && group_of(m, p, "h") == KG_STEP);
    CHECK(p && group_of(m, p, "p") == KG_POINTWISE);
    kir_free(p);
    module_free(m);
}

/* rt_arena_layout: shared regions in slot order, then buffers of their own; a buffer spanning
 * regions covers them one after another and needs each to hold a share of it */
/* conv c2's forward output (buffer "c2", T*B rows) of a training step on the kernel-IR evaluator,
 * summed over its spike lists (events) or by the tiled kernel (is_train_dense) */
static float *
train_conv_forward(Module *m, bool is_dense, int batch, const float *const *in, int64_t *n)
{
    m->is_train_dense = is_dense;
    Module *tm = ir_grad(m, false);
    KTrain tr;
    char err[512];
    KProgram *p = kir_lower_train(tm, &tr, err, sizeof err);
    CHECK(p != NULL);
    if (!p) {
        fprintf(stderr, "kir_lower_train: %s\n", err);
        return NULL;
    }
    float *out = calloc((size_t)(output_numel(m, 0) * batch), sizeof(float)), *r = NULL;
    float *outs[] = {out};
    KBinding *bd = kir_bind(p, batch, in, outs, err, sizeof err);
    bool ok = bd && kir_eval_bound(p, bd, batch, 0, 0, tr.nforward, NULL, err, sizeof err);
    CHECK(ok);
    if (!ok) fprintf(stderr, "kir_eval_bound: %s\n", err);
    for (int b = 0; ok && b < p->nbufs; b++) {
        if (strcmp(p->bufs[b].name, "c2") != 0) continue;
        *n = p->bufs[b].size.per_batch * batch + p->bufs[b].size.fixed;
        r = malloc((size_t)*n * sizeof *r);
        memcpy(r, bd->mem[b], (size_t)*n * sizeof *r);
    }
    CHECK(r != NULL);
    if (bd) kir_unbind(bd);
    free(out);
    kir_free(p);
    module_free(tm);
    return r;
}

/* equal bits, or both NaN (a NaN's sign is the hardware's: x86 makes -NaN, an interpreter may
 * not); counts the NaNs */
static bool
same_or_nan(const float *a, const float *b, int64_t n, int *nans)
{
    *nans = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) && isnan(b[i])) {
            ++*nans;
            continue;
        }
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            fprintf(stderr, "element %lld: events %.9g, tiled %.9g\n", (long long)i, a[i], b[i]);
            return false;
        }
    }
    return true;
}

/* A training step's conv over spikes sums its spike lists (lower_conv2d_events): the tiled
 * kernel's bits with finite weights, and with a weight at +-inf too, where the tiled kernel adds
 * 0 * inf = NaN for the zero spikes and the lists, told by the kernel before them that a weight
 * is not finite, list every channel */
static void
test_train_events(void)
{
    Module *m = load("model ev {\n  timesteps 2\n  seed 3\n  input x : f32[2, 5, 5]\n"
                     "  c1 = conv2d(x, 4, 3, pad = 1)\n  s1 = IF(c1, v_th = 0.2)\n"
                     "  c2 = conv2d(s1, 3, 3, pad = 1, bias = false)\n  s2 = IF(c2, v_th = 0.2)\n"
                     "  output r = mean(s2)\n}\n");
    module_clear_marks(m);
    m->schedule = SCHEDULE_LAYER;
    m->memory = MEMORY_SEPARATE;
    int batch = 3;
    float *x = malloc(2 * 25 * (size_t)batch * sizeof *x);
    for (int i = 0; i < 2 * 25 * batch; i++)
        x[i] = input_value((uint64_t)i);
    const float *in[] = {x};
    Weight *w = NULL;
    for (int k = 0; k < m->nweights; k++)
        if (strcmp(m->weights[k].name, "c2.weight") == 0) w = &m->weights[k];
    CHECK(w != NULL);
    for (int pass = 0; w && pass < 2; pass++) {
        if (pass == 1) {
            w->data[5] = INFINITY;
            w->data[40] = -INFINITY;
        }
        int64_t n = 0, nd = 0;
        float *ev = train_conv_forward(m, false, batch, in, &n);
        float *de = train_conv_forward(m, true, batch, in, &nd);
        int nans = 0;
        CHECK(ev && de && n == nd && n == 2 * 3 * 25 * batch && same_or_nan(ev, de, n, &nans));
        /* finite weights: no NaN; infinite ones: the zero spikes' 0 * inf made some */
        CHECK(pass == 0 ? nans == 0 : nans > 0);
        free(ev);
        free(de);
    }
    free(x);
    module_free(m);
}

static void
test_arena_layout(void)
{
    /* A, B share region 1 (100 bytes: 128 aligned), D region 2, C its own after them */
    size_t bytes[5] = {100, 50, 30, 70, SIZE_MAX}, off[5] = {0};
    int slot[5] = {1, 1, 0, 2, 1};
    size_t total = rt_arena_layout(5, bytes, slot, NULL, 64, off);
    CHECK(total == 128 + 128 + 64 && off[0] == 0 && off[1] == 0 && off[3] == 128 && off[2] == 256);
    /* E spans regions 1 and 2 (200 bytes: 100 of each, which they hold already) */
    size_t bytes2[3] = {100, 70, 200}, off2[3] = {0};
    int slot2[3] = {1, 2, 1}, span2[3] = {1, 1, 2};
    total = rt_arena_layout(3, bytes2, slot2, span2, 64, off2);
    CHECK(total == 256 && off2[0] == 0 && off2[1] == 128 && off2[2] == 0);
    /* ... 400 bytes: each region grows to its half, and E still fits the two */
    bytes2[2] = 400;
    total = rt_arena_layout(3, bytes2, slot2, span2, 64, off2);
    CHECK(total == 512 && off2[1] == 256 && off2[2] == 0 && off2[1] + 256 >= bytes2[2] / 2);
    /* a span from region 2 of 3: regions 2 and 3 follow one another, E starts at 2's */
    size_t bytes3[4] = {64, 64, 64, 128}, off3[4] = {0};
    int slot3[4] = {1, 2, 3, 2}, span3[4] = {1, 1, 1, 2};
    total = rt_arena_layout(4, bytes3, slot3, span3, 64, off3);
    CHECK(total == 192 && off3[3] == 64 && off3[2] == 128);
}

int
main(void)
{
    /* the kernel text checked is that of a host without AVX-512 (lower_wide_vectors picks
     * larger register blocks with it; the lit, grad and random-model tests run those) */
    setenv("SNN_VEC512", "0", 1);
    test_mlp();
    test_conv();
    test_fusion();
    test_groups();
    test_layers();
    test_poisson();
    test_recurrent();
    test_neurons();
    test_eval_errors();
    test_arena_layout();
    test_train_events();
    printf("%d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
