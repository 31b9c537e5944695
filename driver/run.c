/* run.c: --run. The backends (driver/backends.def: the interpreter, the kernel-IR evaluator, the
 * CPU and the GPU, the compiled ones through the runtime session model.so runs), the loop over
 * batches, and the report: accuracy, images/s, firing rates, --output, --report=json and what
 * --record keeps (driver/record.c). */
#include "driver/run.h"

#include "codegen/cuda/cuda_gen.h"
#include "codegen/cuda/nvrtc.h"
#include "driver/build.h"
#include "driver/compile.h"
#include "driver/load.h"
#include "driver/session_run.h"
#ifdef SNN_HAVE_LLVM
#include "codegen/llvm/cg_llvm.h"
#include "driver/profile.h"
#endif
#include "runtime/clock.h"
#include "runtime/cuda_driver.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the CUDA backend of --run ----
 * The program lowered for the GPU, compiled by NVRTC into a cubin for the device's architecture
 * and run through the model runtime (runtime/model_parts.h) as a cuda session: the same code, the
 * same launches and graphs as a model.so's cuda session, from a description made here. */
typedef struct CudaRun {
    CudaBuild b;
    SessionRun r;
} CudaRun;

static void
be_cuda_release(void *state)
{
    CudaRun *st = state;
    session_close(&st->r);
    cuda_build_free(&st->b);
    free(st);
}

static const char *
be_cuda_cache(void *state)
{
    const CudaRun *st = state;
    return !st->b.cache[0] ? "off" : st->b.nimages && st->b.images[0].is_cache_hit ? "hit" : "miss";
}

static void *
be_cuda_prepare(Module *m, const Options *o, char *err, size_t errlen)
{
    int major, minor;
    char name[256];
    if (!rt_cuda_device_arch(o->cuda_ordinal, &major, &minor, name, sizeof name, err, errlen))
        return NULL;
    if (!cuda_nvrtc_load(err, errlen)) return NULL;
    CudaRun *st = xcalloc(1, sizeof *st);
    char arch[32];
    snprintf(arch, sizeof arch, "sm_%d%d", major, minor);
    CudaImage *img = cuda_build_start(m, &st->b) ? cuda_build_add(&st->b, arch, true) : NULL;
    if (!img) {
        snprintf(err, errlen, "the CUDA code for %s (%s) could not be built", name, arch);
        be_cuda_release(st);
        return NULL;
    }
    char *kernels = cuda_gen_describe(st->b.gp);
    size_t rlen = strlen(kernels) + 128;
    char *records = xmalloc(rlen);
    snprintf(records, rlen, "%scuda_image cubin %s 0 %zu\n", kernels, arch, img->size);
    char *meta = kir_describe_with(st->b.gp, "cuda", records);
    bool ok = session_open(&st->r, m, meta, NULL, img->data, img->size,
                           o->device && strncmp(o->device, "cuda", 4) == 0 ? o->device : "cuda",
                           o->batch, 1, err, errlen);
    free(meta);
    free(records);
    free(kernels);
    if (!ok) {
        be_cuda_release(st);
        return NULL;
    }
    return st;
}

static bool
be_cuda_run(void *state, const Module *m, const InterpOptions *io, int batch, int64_t base,
                 const float *const *in, float *const *out, double *counts, char *err,
                 size_t errlen)
{
    CudaRun *st = state;
    return session_run(&st->r, st->b.gp, batch, base, in, out, counts, err, errlen);
}


/* ---- backends: a struct of functions chosen by name ---- */

typedef struct Backend {
    const char *name;
    bool counts_spikes; /* fills per-layer spike counts for firing rates */
    bool is_f32;        /* computes float32 whatever --precision says */
    bool is_compiled;   /* compiles code: the compile time is reported, the seed baked in */
    void *(*prepare)(Module *m, const Options *o, char *err, size_t errlen);
    bool (*run)(void *state, const Module *m, const InterpOptions *io, int batch, int64_t sample_base,
                const float *const *in, float *const *out, double *counts, char *err, size_t errlen);
    void (*release)(void *state);
    /* compiled-code cache: "hit", "miss" or "off"; NULL where nothing is cached */
    const char *(*cache)(void *state);
} Backend;

static void *
be_interp_prepare(Module *m, const Options *o, char *err, size_t errlen)
{
    return m;
}

static bool
be_interp_run(void *state, const Module *m, const InterpOptions *io, int batch, int64_t base,
                   const float *const *in, float *const *out, double *counts, char *err, size_t errlen)
{
    return interp_run(m, io, batch, base, in, out, counts, err, errlen);
}

static void
be_interp_release(void *state)
{
}

static const char *
be_interp_cache(void *state)
{
    return NULL;
}

static void *
be_kir_prepare(Module *m, const Options *o, char *err, size_t errlen)
{
    return compile(m, &(CompileOptions){KTARGET_CPU, STAGE_LOWERED}, err, errlen);
}

static bool
be_kir_run(void *state, const Module *m, const InterpOptions *io, int batch, int64_t base,
                const float *const *in, float *const *out, double *counts, char *err, size_t errlen)
{
    return kir_eval(((Program *)state)->kir, batch, base, in, out, counts, err, errlen);
}

static void
be_kir_release(void *state)
{
    program_free(state);
}

static const char *
be_kir_cache(void *state)
{
    return NULL;
}

#ifdef SNN_HAVE_LLVM
/* --run on the CPU: the JIT-compiled program's entry point run by the runtime session, or with
 * --profile its kernels compiled and timed one by one (driver/profile.c) */
typedef struct CpuRun {
    Program *prog;
    SessionRun r;
    Profile *prof;
} CpuRun;

static const char *
be_cpu_cache(void *state)
{
    const Program *p = ((const CpuRun *)state)->prog;
    return !p->is_cached ? "off" : cg_llvm_cache_hit(p->cpu) ? "hit" : "miss";
}

static void
be_cpu_release(void *state)
{
    CpuRun *st = state;
    session_close(&st->r);
    profile_free(st->prof);
    program_free(st->prog);
    free(st);
}

static void *
be_cpu_prepare(Module *m, const Options *o, char *err, size_t errlen)
{
    CpuRun *st = xcalloc(1, sizeof *st);
    st->prog = compile(m, &(CompileOptions){KTARGET_CPU, STAGE_JIT}, err, errlen);
    if (!st->prog) {
        free(st);
        return NULL;
    }
    bool ok;
    if (o->profile) {
        st->prof = profile_open(m, st->prog->kir, o->threads, err, errlen);
        ok = st->prof != NULL;
    } else {
        char *meta = kir_describe(st->prog->kir);
        ok = session_open(&st->r, m, meta, (SnnkEntryFn)(uintptr_t)cg_llvm_entry(st->prog->cpu),
                          NULL, 0, "cpu", o->batch, o->threads, err, errlen);
        free(meta);
    }
    if (!ok) {
        be_cpu_release(st);
        return NULL;
    }
    return st;
}

static bool
be_cpu_run(void *state, const Module *m, const InterpOptions *io, int batch, int64_t base,
                const float *const *in, float *const *out, double *counts, char *err, size_t errlen)
{
    CpuRun *st = state;
    if (st->prof) return profile_run(st->prof, batch, base, in, out, counts, err, errlen);
    return session_run(&st->r, st->prog->kir, batch, base, in, out, counts, err, errlen);
}

/* --profile's table (json: the report's array), where the backend was profiled */
static void
cpu_profile_print(const char *backend, void *state, FILE *f, bool json)
{
    if (strcmp(backend, "cpu") == 0 && ((CpuRun *)state)->prof)
        profile_print(((CpuRun *)state)->prof, f, json);
}
#endif

static const Backend backends[] = {
#define BACKEND(name, counts, is_f32, compiles)                                                    \
    {#name, counts, is_f32, compiles, be_##name##_prepare, be_##name##_run, be_##name##_release,   \
     be_##name##_cache},
#include "driver/backends.def"
#undef BACKEND
};

static const Backend *
find_backend(const char *name)
{
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (strcmp(backends[i].name, name) == 0)
            return &backends[i];
    return NULL;
}


/* ---- running ---- */


static int64_t
output_numel(const Module *m, int j)
{
    const Node *n = &m->nodes[m->outputs[j]];
    return type_numel(&n->type) * (n->type.has_time ? m->timesteps : 1);
}

static void
progress(int64_t done, int64_t total, double elapsed)
{
    int width = 40, filled = (int)(width * done / (total ? total : 1));
    fprintf(stderr, "\r[%.*s%*s] %lld/%lld  %.0f samples/s", filled,
            "########################################", width - filled, "", (long long)done,
            (long long)total, elapsed > 0 ? (double)done / elapsed : 0.0);
    if (done == total)
        fputc('\n', stderr);
    fflush(stderr);
}

static bool
write_outputs(const Module *m, const Options *o, float **outs, int64_t n, int nrecorded)
{
    char err[512];
    size_t len = strlen(o->output);
    bool npz = len > 4 && strcmp(o->output + len - 4, ".npz") == 0;
    RtTensor *ts = calloc((size_t)m->noutputs, sizeof *ts);
    if (!ts)
        die("out of memory");
    int count = npz ? m->noutputs - nrecorded : 1;
    for (int j = 0; j < count; j++) {
        const Node *nd = &m->nodes[m->outputs[j]];
        RtTensor *t = &ts[j];
        t->name = (char *)(nd->name ? nd->name : "output");
        t->dtype = RT_F32;
        t->dims[t->rank++] = n;
        if (nd->type.has_time)
            t->dims[t->rank++] = m->timesteps;
        for (int i = 0; i < nd->type.rank; i++)
            t->dims[t->rank++] = nd->type.dims[i];
        t->numel = n * output_numel(m, j);
        t->data = outs[j];
    }
    int rc = npz ? rt_npz_write(o->output, ts, count, err, sizeof err)
                 : rt_npy_write(o->output, RT_F32, ts[0].rank, ts[0].dims, ts[0].data, err, sizeof err);
    free(ts);
    if (rc) {
        diag_reader_error(o->output, err);
        return false;
    }
    return true;
}

/* How reports name a neuron layer: its value name, or "LIF@12:5" (op and source position) if nested. */
static const char *
layer_label(const Module *m, const Node *n, char *buf, size_t len)
{
    if (n->name)
        return n->name;
    snprintf(buf, len, "%s@%d:%d", node_op_name(m, n), n->loc.line, n->loc.col);
    return buf;
}

static bool
is_rate_layer(const Module *m, const Node *n)
{
    return n->op == OP_NEURON && !m->neurons[n->neuron]->has_output;
}

/* {"layer": value, ...} over the counted layers (none where the backend does not count), each
 * value printed with fmt */
static void
json_layers(const Module *m, bool is_counted, const double *vals, const char *fmt)
{
    char label[96];
    const char *sep = "";
    putchar('{');
    for (int v = 0; is_counted && v < m->nnodes; v++) {
        if (!is_rate_layer(m, &m->nodes[v])) continue;
        printf("%s", sep);
        json_string(stdout, layer_label(m, &m->nodes[v], label, sizeof label));
        putchar(':');
        putchar(' ');
        printf(fmt, vals[v]);
        sep = ", ";
    }
    putchar('}');
}

/* whether output j is kept for every sample: written by --output, or a recording (those from
 * first_rec on) */
static bool
keeps_all(const Options *o, int j, int first_rec)
{
    return o->output != NULL || j >= first_rec;
}

/* index of the first maximum (torch.argmax's choice on ties) */
static int64_t
argmax(const float *row, int64_t k)
{
    int64_t best = 0;
    for (int64_t c = 1; c < k; c++)
        if (row[c] > row[best])
            best = c;
    return best;
}

int
run(Module *m, const Options *o, const Recording *rec)
{
    Data d = {0};
    if (!load_inputs(m, o, &d)) {
        data_free(&d);
        return 1;
    }
    int64_t n = o->limit >= 0 && o->limit < d.n ? o->limit : d.n;
    int batch = o->batch;
    /* every sample's outputs are kept only when they are written out (the model's own by
     * --output, the recordings, which follow them, always); else one batch at a time */
    int first_rec = m->noutputs - rec->nitems;
    int64_t one_batch = n < batch ? (n ? n : 1) : batch;
    float **outs = calloc((size_t)m->noutputs, sizeof *outs);
    double *counts = calloc((size_t)m->nnodes, sizeof *counts);
    const float **in_ptrs = calloc((size_t)m->ninputs, sizeof *in_ptrs);
    float **out_ptrs = calloc((size_t)m->noutputs, sizeof *out_ptrs);
    if (!outs || !counts || !in_ptrs || !out_ptrs)
        die("out of memory");
    int rc = 0;
    for (int j = 0; j < m->noutputs && rc == 0; j++) {
        int64_t per = output_numel(m, j);
        int64_t rows = keeps_all(o, j, first_rec) ? (n ? n : 1) : one_batch;
        if (per > 0 && rows > (int64_t)(SIZE_MAX / sizeof(float)) / per)
            outs[j] = NULL;
        else
            outs[j] = malloc((size_t)rows * (size_t)per * sizeof(float));
        if (!outs[j]) {
            fprintf(
                stderr,
                "snnc: error: output '%s' of %lld samples needs %.3g GB of memory, which cannot be "
                "allocated; use --limit%s\n",
                m->nodes[m->outputs[j]].name ? m->nodes[m->outputs[j]].name : "?", (long long)rows,
                (double)rows * (double)per * 4e-9,
                j >= first_rec               ? " or record fewer layers"
                : keeps_all(o, j, first_rec) ? " or leave out --output"
                                             : " or a smaller --batch");
            rc = 1;
        }
    }
    /* accuracy needs labels and a first output of class scores: [B, K] */
    const Node *out0 = &m->nodes[m->outputs[0]];
    bool scores = !out0->type.has_time && out0->type.rank == 1;
    int64_t correct = 0;
    InterpOptions io = {o->precision, o->seed, false, false};
    char err[512];
    const Backend *be = find_backend(o->backend);
    if (be->is_compiled && o->seed >= 0)
        m->seed = o->seed; /* compiled code bakes the Poisson seed in */
    double tc = rt_now_seconds();
    void *state = rc == 0 ? be->prepare(m, o, err, sizeof err) : NULL;
    double compile_secs = rt_now_seconds() - tc;
    if (rc == 0 && !state) {
        fprintf(stderr, "snnc: error: %s\n", err);
        rc = 1;
    }
    bool show_progress = !o->quiet && isatty(2);
    double t0 = rt_now_seconds(), last = t0;
    for (int64_t s = 0; s < n && rc == 0; s += batch) {
        int b = (int)(n - s < batch ? n - s : batch);
        for (int k = 0; k < m->ninputs; k++)
            in_ptrs[k] = d.inputs[k] + s * d.numel[k];
        for (int j = 0; j < m->noutputs; j++)
            out_ptrs[j] = outs[j] + (keeps_all(o, j, first_rec) ? s : 0) * output_numel(m, j);
        if (!be->run(state, m, &io, b, s, in_ptrs, out_ptrs, counts, err, sizeof err)) {
            fprintf(stderr, "snnc: error: %s\n", err);
            rc = 1;
            break;
        }
        if (d.labels && scores) {
            int64_t k = output_numel(m, 0);
            for (int i = 0; i < b; i++)
                correct += (float)argmax(out_ptrs[0] + i * k, k) == d.labels[s + i];
        }
        double t = rt_now_seconds();
        if (show_progress && t - t0 > 1.0 && (t - last > 0.1 || s + b == n)) {
            progress(s + b, n, t - t0);
            last = t;
        }
    }
    double secs = rt_now_seconds() - t0;
    double accuracy = rc == 0 && d.labels && scores && n > 0 ? (double)correct / (double)n : -1;
    if (rc == 0 && o->output && !write_outputs(m, o, outs, n, rec->nitems)) rc = 1;
    if (rc == 0 && rec->nitems && !record_finish(m, o, rec, outs, n)) rc = 1;
    if (rc == 0) {
        const char *prec = be->is_f32 || o->precision == INTERP_F32 ? "f32" : "f64";
        double *rates = calloc((size_t)m->nnodes + 1, sizeof *rates);
        if (!rates)
            die("out of memory");
        for (int v = 0; v < m->nnodes; v++) {
            double denom = (double)type_numel(&m->nodes[v].type) * m->timesteps * (double)n;
            rates[v] = denom > 0 ? counts[v] / denom : 0.0;
        }
        char label[96];
        if (!o->quiet) {
            printf("model %s: %lld samples, T = %d, backend %s (%s), batch %d", m->name,
                   (long long)n, m->timesteps, o->backend, prec, batch);
            if (strcmp(be->name, "cpu") == 0)
                printf(", %d thread%s", o->threads, o->threads == 1 ? "" : "s");
            printf("\n");
            if (accuracy >= 0)
                printf("accuracy: %.4f (%lld/%lld)\n", accuracy, (long long)correct, (long long)n);
            else if (d.labels)
                printf("accuracy: not computed (the first output, '%s', is not [B, classes])\n",
                       out0->name ? out0->name : "?");
            printf("time: %.3f s, %.1f samples/s", secs, secs > 0 ? (double)n / secs : 0.0);
            if (be->is_compiled)
                printf(" (compile %.3f s%s)", compile_secs,
                       be->cache(state) && !strcmp(be->cache(state), "hit") ? ", cached" : "");
            printf("\n");
            if (!be->counts_spikes)
                printf("firing rates: not counted by backend %s yet\n", be->name);
            else
                printf("firing rates (spikes per neuron per step):\n");
            for (int v = 0; v < m->nnodes && be->counts_spikes; v++)
                if (is_rate_layer(m, &m->nodes[v]))
                    printf("  %-16s %.4f\n", layer_label(m, &m->nodes[v], label, sizeof label), rates[v]);
#ifdef SNN_HAVE_LLVM
            if (o->profile) cpu_profile_print(be->name, state, stdout, false);
#endif
        }
        if (o->report_json) {
            printf("{\"model\": ");
            json_string(stdout, m->name);
            printf(", \"backend\": \"%s\", \"precision\": \"%s\", \"timesteps\": %d, \"batch\": %d, "
                   "\"images\": %lld, \"seconds\": %.6f, \"images_per_second\": %.3f, \"accuracy\": ",
                   o->backend, prec, m->timesteps, batch, (long long)n, secs,
                   secs > 0 ? (double)n / secs : 0.0);
            if (accuracy >= 0)
                printf("%.6f", accuracy);
            else
                printf("null");
            if (be->is_compiled)
                printf(", \"compile_seconds\": %.6f, \"accumulate\": \"%s\"", compile_secs,
                       m->accumulate == ACC_F32 ? "f32" : "exact");
            if (be->cache(state)) printf(", \"cache\": \"%s\"", be->cache(state));
            /* the spikes each layer fired over the run, exactly; then the rates they make */
            printf(", \"spike_counts\": ");
            json_layers(m, be->counts_spikes, counts, "%.0f");
            printf(", \"firing_rates\": ");
            json_layers(m, be->counts_spikes, rates, "%.6f");
#ifdef SNN_HAVE_LLVM
            if (o->profile) {
                printf(", \"profile\": ");
                cpu_profile_print(be->name, state, stdout, true);
            }
#endif
            printf("}\n");
        }
        free(rates);
    }
    for (int j = 0; j < m->noutputs; j++)
        free(outs[j]);
    if (state)
        be->release(state);
    free(outs);
    free(counts);
    free(in_ptrs);
    free(out_ptrs);
    data_free(&d);
    return rc;
}

