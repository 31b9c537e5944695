/* snnc: the command-line driver. Parses options, loads a .snn/.snnir file into the graph IR, then emits
 * it or runs it on a data set (Fashion-MNIST or .npy/.npz inputs) and reports accuracy, speed and firing
 * rates. User errors exit with status 1 and a message; results go to stdout, progress to stderr. */
#include "codegen/cache.h"
#include "codegen/cuda/build.h"
#include "codegen/cuda/cuda_gen.h"
#include "codegen/cuda/nvrtc.h"
#include "codegen/kir.h"
#include "driver/calibrate.h"
#include "driver/compile.h"
#include "driver/explain.h"
#include "driver/files.h"
#include "driver/session_run.h"
#ifdef SNN_HAVE_LLVM
#include "codegen/llvm/cg_llvm.h"
#include "driver/link.h"
#endif
#include "frontend/frontend.h"
#include "ir/ir.h"
#include "nir/nir.h"
#include "passes/pass.h"
#include "runtime/clock.h"
#include "runtime/cuda_driver.h"
#include "runtime/f16.h"
#include "runtime/snn.h"
#include "runtime/tensor_io.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SNNC_VERSION "0.1.0"

enum { MAX_INPUT_ARGS = 16 };

typedef struct Options {
    const char *path;
    const char *model;
    const char *emit;
    const char *out;
    bool run;
    const char *backend;
    InterpPrecision precision;
    const char *precision_mode; /* fp16, bf16, mixed: dense and conv weights stored narrower */
    const char *outputs;        /* --outputs: the outputs to keep, comma-separated; NULL: all */
    WeightStore narrow;         /* WSTORE_F32 unless precision_mode */
    bool narrow_weights, narrow_activations; /* --narrow: what precision_mode narrows */
    bool has_narrow;
    int64_t calibrate;          /* calibration samples (of --data / --input) */
    double tolerance;           /* --tolerance: changed spikes allowed (fraction) */
    double tolerance_outputs;   /* ... and changed output elements */
    bool has_tolerance;
    int accumulate; /* -1: as the model says; else an Accumulate */
    bool events_auto; /* --events=auto: input rates on the calibration samples decide */
    const char *data;
    const char *input_args[MAX_INPUT_ARGS];
    int ninput_args;
    int batch;
    int64_t limit;
    int64_t seed;
    const char *output;
    bool report_json;
    const char *weights;
    bool quiet;
    int opt_level;
    int threads; /* CPU backend: threads running each kernel (default: online CPUs) */
    bool no_embed_weights; /* model.so: leave the weights out */
    const char *cpu;       /* model.so / --emit=obj: LLVM CPU name; NULL = this machine's */
    PassOptions passes;    /* the pass pipeline: -O (opt_level), --passes, --print-ir-... */
    bool explain;          /* --explain: the schedule, buffers and launches at --batch */
    const char *device;    /* --device: cpu, cuda, cuda:N or auto (NULL: auto) */
    int cuda_ordinal;      /* N of cuda:N */
    const char *cuda_arch; /* --cuda-arch as given; NULL: the default */
    const char *archs[MAX_CUDA_ARCHS]; /* its entries (sm_NN, compute_NN), or "none" alone */
    int narchs;
    char arch_list[256];   /* where archs point */
    bool is_nir;           /* the model file is a NIR graph (.nir) */
    NirImportOptions nir;  /* --dt, --integrator, --reset, --reset-step, --timesteps */
    const NirImport *import; /* the imported graph's text and weights (is_nir) */
} Options;

/* --emit kinds: one row each, read by the option's check, the -o rule and --help */
typedef struct EmitKind {
    const char *name;
    bool needs_cpu;   /* made by the CPU backend (LLVM) */
    bool needs_out;   /* writes a file: needs -o FILE */
    const char *help; /* --help, after "--emit=NAME" (continuation lines indented to column 26) */
} EmitKind;

static const EmitKind emits[] = {
    {"ir", false, false, "print the graph IR (to stdout, or to the file given by -o)"},
    {"kernel", false, false, "print the kernel IR the code generators start from"},
    {"llvm", true, false, "print the LLVM IR of the CPU backend (-O0: before optimisation)"},
    {"obj", true, true, "write the CPU backend's object file (needs -o)"},
    {"cuda", false, false, "print the CUDA C of the CUDA backend (its records first, as\n"
                           "                          comments)"},
    {"ptx", false, false, "compile that with NVRTC and write PTX"},
    {"cubin", false, true, "compile that with NVRTC and write a cubin (needs -o)"},
    {"snn", false, false, "a NIR graph as an equivalent .snn model (to -o FILE.snn, its\n"
                          "                          weights beside it as FILE.safetensors; or "
                          "the text to stdout)"},
    {"nir", false, false, "the model as a NIR graph (needs -o FILE.nir; --dt: the step its\n"
                          "                          time constants are written for, default "
                          "1e-4)"},
    {"weights", false, true, "write the weights the model runs with (--weights, the model's\n"
                             "                          file, or its seeded initialisation) as "
                             "f32 safetensors (needs -o)"},
};

static const EmitKind *
find_emit(const char *name)
{
    for (size_t i = 0; i < sizeof emits / sizeof emits[0]; i++)
        if (strcmp(emits[i].name, name) == 0) return &emits[i];
    return NULL;
}

static void
usage(FILE *f)
{
    fputs("usage: snnc [options] MODEL.snn|MODEL.snnir|MODEL.nir\n"
          "\n"
          "Compile a spiking neural network and run it or print its IR.\n"
          "\n"
          "Output:\n",
          f);
    for (size_t i = 0; i < sizeof emits / sizeof emits[0]; i++)
        fprintf(f, "  --emit=%-17s%s\n", emits[i].name, emits[i].help);
    fputs("  --explain               print the schedule a tuner reads: kernels, the layers each\n"
          "                          computes, buffers (layout, type, size), arena bytes, launches\n"
          "                          per inference, at --batch (--device=cuda: the GPU's)\n"
          "  -o FILE                 where --emit writes; without --emit, build a shared library\n"
          "                          (model.so: generated code, runtime and weights, C ABI snn.h).\n"
          "                          Every output is written whole, or the old file is left as\n"
          "                          it was; /dev/stdout, /dev/null and FIFOs are streams; no\n"
          "                          output may be a file the run reads\n"
          "  --no-embed-weights      model.so without weights (load them with\n"
          "                          snn_session_load_weights_file)\n"
          "  --cpu=NAME              model.so / --emit=obj for another CPU: an LLVM CPU name\n"
          "                          (x86-64-v2, x86-64-v3, znver4, ...; default: this machine's)\n"
          "  --cuda-arch=LIST        GPU architectures, comma-separated (sm_NN, compute_NN): model.so\n"
          "                          and --emit=obj carry a cubin per sm_NN and PTX per compute_NN\n"
          "                          (else for compute_ of the lowest sm_NN); default sm_80,sm_90\n"
          "                          where NVRTC is found; none: CPU code only. --emit=ptx and\n"
          "                          --emit=cubin take one (default sm_90)\n"
          "\n",
          f);
    fputs("Running:\n"
          "  --run                   run the model on the data and report accuracy, images/s, firing rates\n"
          "  --device=DEV            where it runs: cuda, cuda:N (the CUDA backend, also\n"
          "                          --backend=cuda), cpu, or auto (the default: CUDA when NVRTC and\n"
          "                          a device are found, else the CPU); with --emit=kernel, cuda\n"
          "                          prints the GPU's lowering\n"
#ifdef SNN_HAVE_LLVM
          "  --backend=cpu, --jit    compile with LLVM for this CPU and run (the default; float32\n"
          "                          semantics, equal to the interpreter's --precision=f32 bit for bit)\n"
          "  --backend=interp        the reference interpreter (the semantic oracle; the default\n"
          "                          with --precision=f64)\n"
#else
          "  --backend=interp        the reference interpreter (the only backend of this build, which\n"
          "                          has no LLVM)\n"
#endif
          "  --threads=N             threads of the CPU backend (default: the online CPUs; results\n"
          "                          are the same for every N)\n"
          "  --precision=f64|f32     interpreter arithmetic: double (its default) or float32 like\n"
          "                          PyTorch (fp32 = f32)\n"
          "  --precision=fp16|bf16|mixed  float32 arithmetic with dense and conv weights and\n"
          "                          outputs stored in 16 bits (rounded to nearest; half the bytes;\n"
          "                          membrane state and thresholds stay f32); mixed: f16 only for\n"
          "                          the tensors where no spike and no output changes on the\n"
          "                          calibration inputs (--data or --input, with or without --run);\n"
          "                          fp16/bf16 with them report the spike agreement measured\n"
          "  --narrow=weights|activations|all  what --precision=fp16|bf16|mixed narrows: the\n"
          "                          layers' weights, their outputs, or both (all, the default)\n"
          "  --calibrate=N           calibration samples: the first N of the data (default 64)\n"
          "  --tolerance=F[,G]       with --precision and calibration inputs: the fraction of\n"
          "                          spikes (every layer's) that may change, and of output\n"
          "                          elements (G, default F; both default 0); mixed keeps a 16-bit\n"
          "                          tensor within them, fp16 and bf16 fail past them\n"
          "  --data=fashion-mnist[:DIR]  the Fashion-MNIST test set (IDX files; default directory\n"
          "                          $SNN_DATA_DIR, then /usr/share/datasets/fashion-mnist)\n"
          "  --input=FILE.npy        input samples, sample-major [N, ...]; NAME=FILE.npy for one of\n"
          "                          several inputs, or one .npz holding an array per input name\n"
          "                          (a file, a FIFO, /dev/stdin; values that are not finite are\n"
          "                          counted in a warning)\n"
          "  --batch=B               samples per batch (default 64)\n"
          "  --limit=N               run only the first N samples (of an .npy, only they are read)\n"
          "  --seed=S                seed for Poisson encoders (default: the model's seed)\n"
          "  --output=FILE           write the outputs: .npy (the first output) or .npz (all)\n"
          "  --outputs=NAMES         keep only these outputs of the model (comma-separated, in the\n"
          "                          model's order): what only the others needed is not computed\n"
          "  --report=json           print one JSON object as the last line of stdout (also for a\n"
          "                          build: its CUDA images, their compile times and cache use)\n"
          "  --weights=FILE          a safetensors file overriding the model's weights\n"
          "  -q, --quiet             print only the report (and errors)\n"
          "  --accumulate=exact|f32  how compiled dense and conv layers sum: exact (default: in\n"
          "                          double, rounded once: the interpreter's bits) or f32 (float\n"
          "                          with an FMA per term, as float32 frameworks: about twice as\n"
          "                          fast; outputs may differ in the last bits, and spikes with them)\n"
          "  --events=all|auto       which spike-fed dense and conv layers the events pass makes sum\n"
          "                          event by event on the CPU: all (default), or auto: those whose\n"
          "                          input fires below the rate where the dense kernel is faster,\n"
          "                          measured on calibration inputs (--data or --input)\n"
          "\n"
          "\n",
          f);
    fputs("NIR graphs (MODEL.nir, docs/nir.md): NIR's neurons are continuous in time; these choose\n"
          "the step they run with (written into the imported neurons, so the IR shows them):\n"
          "  --timesteps=N           steps per inference (required: NIR does not say)\n"
          "  --dt=SECONDS            the step (default 1e-4, the exporters' convention r = tau/dt)\n"
          "  --integrator=euler|exact  forward Euler (default: v <- (1 - dt/tau) v + ...) or the\n"
          "                          exact exponential decay e^(-dt/tau)\n"
          "  --reset=value|subtract  after a spike v <- v_reset (default, NIR's definition) or\n"
          "                          v <- v - v_th\n"
          "  --reset-step=same|next  the reset acts in the step that fires (default) or in the next\n"
          "                          step's update (snnTorch)\n"
          "  --impulses              IF, I and the synaptic current of CubaLIF take each step's\n"
          "                          input as an impulse (v += r I, i += w_in I; Norse) instead of\n"
          "                          a current over dt\n"
          "  --spike-inputs          the graph's inputs are spikes (0/1): declared spike, so the\n"
          "                          layers reading them sum only what spiked\n"
          "  --framework=NAME        run the graph as the framework that exported it ran it: its\n"
          "                          dt, integrator, reset kind and timing, impulses and neurons\n"
          "                          (snntorch, norse, sinabs, spikingjelly, spyx, lava-dl; none:\n"
          "                          NIR's reading). The flags above override it; docs/nir.md\n"
          "                          has the table\n"
          "\n"
          "Passes (the graph-IR pipeline; --help-passes lists them):\n"
          "  -O0 .. -O3              -O0: no pass (lowering only: every layer step by step); -O1 and\n"
          "                          up: the passes of that level (default -O2; -O3 adds\n"
          "                          scan-epilogue, for the GPU); -O also sets the LLVM level of\n"
          "                          --emit=llvm\n"
          "  --passes=a,b            run exactly these passes, in this order\n"
          "  --disable-pass=a,b      leave these out\n"
          "  --print-ir-before=a,b, --print-ir-after=a,b, --print-ir-before-all,\n"
          "  --print-ir-after-all, --print-ir-after-change\n"
          "                          print the graph IR around passes on stderr (a comment header,\n"
          "                          then IR that snnc reads back)\n"
          "  --print-ir-tree-dir=DIR DIR/00-input.snnir, then one numbered file per pass\n"
          "  --time-passes           a table of the passes' times on stderr\n"
          "  --verify-each           verify the IR after every pass\n"
          "  --llvm-args=\"...\"       options for LLVM itself (-print-after=loop-vectorize, ...)\n"
          "\n"
          "Other:\n"
          "  --model=NAME            which model of the file to compile, if it has several\n"
          "  --help-ops              list the layer ops and their attributes\n"
          "  --help-marks            list the schedule marks (fuse, events, ...) and who sets them\n"
          "  --help, --version\n"
          "\n"
          "Environment: SNN_DATA_DIR (where Fashion-MNIST lives); SNN_CACHE_DIR (compiled code of\n"
          "the CPU and CUDA backends, default ~/.cache/snnc; \"off\" for none); CC (links model.so);\n"
          "SNN_NVRTC (the NVRTC library to load, default libnvrtc.so.13, .12, libnvrtc.so);\n"
          "SNN_CUDA_DRIVER (the CUDA driver library to load, default libcuda.so.1);\n"
          "SNN_IR_DUMP (all, changed or PASS,...: dump the IR after those passes) and SNN_DUMP_DIR\n"
          "(the --print-ir-tree-dir default);\n"
          "SNN_KERNEL_OVERRIDE (a .cu compiled in place of the generated CUDA C, or a .ptx used as\n"
          "the PTX).\n",
          f);
}

static _Noreturn void
usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("snnc: error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n(snnc --help lists the options)\n", stderr);
    exit(1);
}

/* ---- backends: a struct of functions chosen by name ---- */

typedef struct Backend {
    const char *name;
    bool counts_spikes; /* fills per-layer spike counts for firing rates */
    bool is_f32;        /* computes float32 whatever --precision says */
    void *(*prepare)(Module *m, const Options *o, char *err, size_t errlen);
    bool (*run)(void *state, const Module *m, const InterpOptions *io, int batch, int64_t sample_base,
                const float *const *in, float *const *out, double *counts, char *err, size_t errlen);
    void (*release)(void *state);
    /* compiled-code cache: "hit", "miss" or "off"; NULL for backends that compile nothing */
    const char *(*cache)(void *state);
} Backend;

static void *
interp_prepare(Module *m, const Options *o, char *err, size_t errlen)
{
    return m;
}

static bool
interp_backend_run(void *state, const Module *m, const InterpOptions *io, int batch, int64_t base,
                   const float *const *in, float *const *out, double *counts, char *err, size_t errlen)
{
    return interp_run(m, io, batch, base, in, out, counts, err, errlen);
}

static void
no_release(void *state)
{
}

static void *
kir_prepare(Module *m, const Options *o, char *err, size_t errlen)
{
    return compile(m, &(CompileOptions){KTARGET_CPU, STAGE_LOWERED}, err, errlen);
}

static bool
kir_backend_run(void *state, const Module *m, const InterpOptions *io, int batch, int64_t base,
                const float *const *in, float *const *out, double *counts, char *err, size_t errlen)
{
    return kir_eval(((Program *)state)->kir, batch, base, in, out, counts, err, errlen);
}

static void
program_release(void *state)
{
    program_free(state);
}

#ifdef SNN_HAVE_LLVM
/* --run on the CPU: the JIT-compiled program's entry point run by the runtime session */
typedef struct CpuRun {
    Program *prog;
    SessionRun r;
} CpuRun;

static const char *
cpu_cache(void *state)
{
    const Program *p = ((const CpuRun *)state)->prog;
    return !p->is_cached ? "off" : cg_llvm_cache_hit(p->cpu) ? "hit" : "miss";
}

static void
cpu_release(void *state)
{
    CpuRun *st = state;
    session_close(&st->r);
    program_free(st->prog);
    free(st);
}

static void *
cpu_prepare(Module *m, const Options *o, char *err, size_t errlen)
{
    CpuRun *st = xcalloc(1, sizeof *st);
    st->prog = compile(m, &(CompileOptions){KTARGET_CPU, STAGE_JIT}, err, errlen);
    if (!st->prog) {
        free(st);
        return NULL;
    }
    char *meta = kir_describe(st->prog->kir);
    bool ok = session_open(&st->r, m, meta, (SnnkEntryFn)(uintptr_t)cg_llvm_entry(st->prog->cpu),
                           NULL, 0, "cpu", o->batch, o->threads, err, errlen);
    free(meta);
    if (!ok) {
        cpu_release(st);
        return NULL;
    }
    return st;
}

static bool
cpu_backend_run(void *state, const Module *m, const InterpOptions *io, int batch, int64_t base,
                const float *const *in, float *const *out, double *counts, char *err, size_t errlen)
{
    CpuRun *st = state;
    return session_run(&st->r, st->prog->kir, batch, base, in, out, counts, err, errlen);
}
#endif

/* the CUDA backend (below, after the CUDA build functions it uses) */
static void *cuda_prepare(Module *m, const Options *o, char *err, size_t errlen);
static bool cuda_backend_run(void *state, const Module *m, const InterpOptions *io, int batch,
                             int64_t base, const float *const *in, float *const *out,
                             double *counts, char *err, size_t errlen);
static void cuda_release(void *state);
static const char *cuda_cache(void *state);

static const Backend backends[] = {
    {"interp", true, false, interp_prepare, interp_backend_run, no_release, NULL},
    /* kir (not listed in --help): the kernel-IR evaluator, the check of lowering against interp */
    {"kir", true, true, kir_prepare, kir_backend_run, program_release, NULL},
#ifdef SNN_HAVE_LLVM
    {"cpu", true, true, cpu_prepare, cpu_backend_run, cpu_release, cpu_cache},
#endif
    {"cuda", true, true, cuda_prepare, cuda_backend_run, cuda_release, cuda_cache},
};

static const Backend *
find_backend(const char *name)
{
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (strcmp(backends[i].name, name) == 0)
            return &backends[i];
    return NULL;
}

static int64_t
parse_int(const char *opt, const char *s, int64_t lo, int64_t hi)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        usage_error("%s expects an integer from %lld to %lld, got '%s'", opt, (long long)lo,
                    (long long)hi, s);
    return v;
}

static bool
is_emit(const Options *o, const char *what)
{
    return o->emit && strcmp(o->emit, what) == 0;
}

/* whether the command builds a binary: model.so, its object, PTX or a cubin */
static bool
is_build(const Options *o)
{
    return (o->out && (!o->emit || is_emit(o, "obj"))) || is_emit(o, "ptx") || is_emit(o, "cubin");
}

/* --version: snnc's, and the NVRTC it would use (tests ask it whether NVRTC is there) */
static void
print_version(void)
{
    printf("snnc %s\n", SNNC_VERSION);
    char err[1200];
    if (cuda_nvrtc_load(err, sizeof err)) {
        int major, minor;
        cuda_nvrtc_version(&major, &minor);
        printf("nvrtc: %d.%d (%s)\n", major, minor, cuda_nvrtc_library());
    } else {
        printf("nvrtc: none (%s)\n", err);
    }
    printf("nir: %s\n", nir_h5_available() ? "on (libhdf5)" : "off (built without libhdf5)");
}

/* --cuda-arch=LIST into o->archs, checked against what the command builds */
static void
parse_cuda_arch(Options *o)
{
    bool is_image = is_emit(o, "ptx") || is_emit(o, "cubin");
    if (!is_image && !(o->out && (!o->emit || is_emit(o, "obj"))))
        usage_error("--cuda-arch is for --emit=ptx, --emit=cubin, --emit=obj and building a shared "
                    "library (-o MODEL.so)");
    if (snprintf(o->arch_list, sizeof o->arch_list, "%s", o->cuda_arch) >= (int)sizeof o->arch_list)
        usage_error("--cuda-arch: the list is too long");
    char *p = o->arch_list;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = 0;
        if (!*p) usage_error("--cuda-arch=%s has an empty entry", o->cuda_arch);
        if (strcmp(p, "none") != 0 && !cuda_arch_is_valid(p))
            usage_error("--cuda-arch: '%s' is not a CUDA architecture (sm_NN or compute_NN, e.g. "
                        "sm_90; or none)", p);
        bool is_dup = false;
        for (int i = 0; i < o->narchs; i++)
            is_dup |= strcmp(o->archs[i], p) == 0;
        if (!is_dup) {
            if (o->narchs == MAX_CUDA_ARCHS)
                usage_error("--cuda-arch: at most %d architectures", MAX_CUDA_ARCHS);
            o->archs[o->narchs++] = p;
        }
        if (!comma) break;
        p = comma + 1;
    }
    for (int i = 0; i < o->narchs; i++) {
        if (strcmp(o->archs[i], "none") != 0) continue;
        if (is_image) usage_error("--emit=%s needs an architecture, not --cuda-arch=none", o->emit);
        if (o->narchs > 1) usage_error("--cuda-arch=none means no CUDA code: it takes no other entry");
    }
    if (is_image && o->narchs > 1)
        usage_error("--emit=%s builds for one architecture; --cuda-arch=%s names %d", o->emit,
                    o->cuda_arch, o->narchs);
    if (is_emit(o, "cubin") && !cuda_arch_is_real(o->archs[0]))
        usage_error("--emit=cubin needs a real architecture (sm_NN); %s is virtual (--emit=ptx "
                    "writes PTX for it)", o->archs[0]);
}

/* a comma-separated list of pass names, or a usage error naming the one that is not a pass */
static void
pass_list_option(const char *opt, const char *list)
{
    char err[768];
    if (!*list) usage_error("%s needs a comma-separated list of passes (see --help-passes)", opt);
    if (!pass_check_list(list, err, sizeof err)) usage_error("%s: %s", opt, err);
}

/* --device: cuda and cuda:N choose the CUDA backend, cpu the CPU's (or the interpreter where asked);
 * without it (or with auto) a --run that names no backend runs on CUDA when NVRTC and a device are
 * there, else on the CPU. */
static void
parse_device(Options *o, bool is_f64_asked)
{
    const char *d = o->device;
    bool is_cuda = false;
    if (d && (strcmp(d, "cuda") == 0 || strncmp(d, "cuda:", 5) == 0)) {
        is_cuda = true;
        o->cuda_ordinal = d[4] ? (int)parse_int("--device=cuda:N", d + 5, 0, 1023) : 0;
    } else if (d && strcmp(d, "cpu") != 0 && strcmp(d, "auto") != 0) {
        usage_error("--device expects cpu, cuda, cuda:N or auto, got '%s'", d);
    }
    if (o->backend && strcmp(o->backend, "cuda") == 0) {
        if (d && !is_cuda && strcmp(d, "auto") != 0)
            usage_error("--backend=cuda runs on a CUDA device, not --device=%s", d);
        is_cuda = true;
    }
    if (is_cuda) {
        if (o->backend && strcmp(o->backend, "cuda") != 0 && strcmp(o->backend, "cpu") != 0)
            usage_error("--device=%s: backend %s runs on the CPU", d ? d : "cuda", o->backend);
        if (is_f64_asked)
            usage_error("--precision=f64 is computed by the interpreter only, on the CPU");
        o->backend = "cuda";
        return;
    }
    if (d && strcmp(d, "cpu") == 0) return;
    /* auto: a GPU when one can run this (asked only for runs that name no backend) */
    if (o->run && !o->backend && !is_f64_asked && !o->emit) {
        char err[512];
        int major, minor;
        if (cuda_nvrtc_load(err, sizeof err) &&
            rt_cuda_device_arch(0, &major, &minor, NULL, 0, err, sizeof err))
            o->backend = "cuda";
    }
}

static void
parse_options(int argc, char **argv, Options *o)
{
    enum { O_EMIT = 256, O_RUN, O_BACKEND, O_PRECISION, O_NARROW, O_TOLERANCE, O_CALIBRATE, O_DATA, O_INPUT, O_BATCH, O_LIMIT, O_SEED,
           O_OUTPUT, O_REPORT, O_WEIGHTS, O_MODEL, O_HELP_OPS, O_VERSION, O_JIT, O_THREADS, O_NO_EMBED, O_CPU,
           O_CUDA_ARCH, O_DEVICE, O_PASSES, O_DISABLE_PASS, O_PRINT_BEFORE, O_PRINT_AFTER,
           O_PRINT_BEFORE_ALL, O_PRINT_AFTER_ALL, O_PRINT_AFTER_CHANGE, O_TREE_DIR, O_TIME_PASSES,
           O_VERIFY_EACH, O_HELP_PASSES, O_HELP_MARKS, O_EXPLAIN, O_LLVM_ARGS, O_ACCUMULATE, O_DT, O_INTEGRATOR,
           O_RESET, O_RESET_STEP, O_TIMESTEPS, O_IMPULSES, O_SPIKE_INPUTS, O_OUTPUTS, O_EVENTS,
           O_FRAMEWORK };
    static const struct option longopts[] = {
        {"emit", required_argument, 0, O_EMIT},       {"run", no_argument, 0, O_RUN},
        {"backend", required_argument, 0, O_BACKEND}, {"precision", required_argument, 0, O_PRECISION},
        {"calibrate", required_argument, 0, O_CALIBRATE}, {"narrow", required_argument, 0, O_NARROW},
        {"tolerance", required_argument, 0, O_TOLERANCE},
        {"data", required_argument, 0, O_DATA},       {"input", required_argument, 0, O_INPUT},
        {"batch", required_argument, 0, O_BATCH},     {"limit", required_argument, 0, O_LIMIT},
        {"seed", required_argument, 0, O_SEED},       {"output", required_argument, 0, O_OUTPUT},
        {"report", required_argument, 0, O_REPORT},   {"weights", required_argument, 0, O_WEIGHTS},
        {"model", required_argument, 0, O_MODEL},     {"help-ops", no_argument, 0, O_HELP_OPS},
        {"help", no_argument, 0, 'h'},                {"version", no_argument, 0, O_VERSION},
        {"quiet", no_argument, 0, 'q'},
        {"jit", no_argument, 0, O_JIT},               {"threads", required_argument, 0, O_THREADS},
        {"no-embed-weights", no_argument, 0, O_NO_EMBED}, {"cpu", required_argument, 0, O_CPU},
        {"cuda-arch", required_argument, 0, O_CUDA_ARCH}, {"device", required_argument, 0, O_DEVICE},
        {"passes", required_argument, 0, O_PASSES},
        {"disable-pass", required_argument, 0, O_DISABLE_PASS},
        {"print-ir-before", required_argument, 0, O_PRINT_BEFORE},
        {"print-ir-after", required_argument, 0, O_PRINT_AFTER},
        {"print-ir-before-all", no_argument, 0, O_PRINT_BEFORE_ALL},
        {"print-ir-after-all", no_argument, 0, O_PRINT_AFTER_ALL},
        {"print-ir-after-change", no_argument, 0, O_PRINT_AFTER_CHANGE},
        {"print-ir-tree-dir", required_argument, 0, O_TREE_DIR},
        {"time-passes", no_argument, 0, O_TIME_PASSES},
        {"verify-each", no_argument, 0, O_VERIFY_EACH},
        {"help-passes", no_argument, 0, O_HELP_PASSES},
        {"help-marks", no_argument, 0, O_HELP_MARKS},
        {"explain", no_argument, 0, O_EXPLAIN},
        {"llvm-args", required_argument, 0, O_LLVM_ARGS},
        {"accumulate", required_argument, 0, O_ACCUMULATE},
        {"events", required_argument, 0, O_EVENTS},
        {"dt", required_argument, 0, O_DT},
        {"integrator", required_argument, 0, O_INTEGRATOR},
        {"reset", required_argument, 0, O_RESET},
        {"reset-step", required_argument, 0, O_RESET_STEP},
        {"timesteps", required_argument, 0, O_TIMESTEPS},
        {"impulses", no_argument, 0, O_IMPULSES},
        {"spike-inputs", no_argument, 0, O_SPIKE_INPUTS},
        {"framework", required_argument, 0, O_FRAMEWORK},
        {"outputs", required_argument, 0, O_OUTPUTS},
        {0, 0, 0, 0},
    };
    o->batch = 64;
    o->opt_level = 2;
    o->accumulate = -1;
    o->calibrate = 64;
    o->narrow_weights = o->narrow_activations = true;
    o->limit = -1;
    o->seed = -1;
    o->backend = NULL; /* chosen after the options: see below */
    bool is_f64_asked = false;
    /* the NIR options given, a bit each in the order of nir_option_names */
    static const char *const nir_option_names[] = {"--dt", "--impulses", "--integrator", "--reset",
                                                   "--reset-step", "--timesteps", "--spike-inputs",
                                                   "--framework"};
    unsigned nir_given = 0;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = ncpu < 1 ? 1 : ncpu > 1024 ? 1024 : (int)ncpu;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":o:hqO:", longopts, NULL)) != -1) {
        switch (c) {
        case O_EMIT:
        {
            const EmitKind *e = find_emit(optarg);
            if (!e || (e->needs_cpu && !find_backend("cpu"))) {
                char names[256];
                size_t k = 0;
                for (size_t i = 0; i < sizeof emits / sizeof emits[0] && k < sizeof names; i++)
                    if (!emits[i].needs_cpu || find_backend("cpu"))
                        k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", k ? ", " : "",
                                              emits[i].name);
                usage_error("--emit=%s is not available (this build emits: %s)", optarg, names);
            }
            o->emit = optarg;
        }
            break;
        case 'O':
            if (!optarg[0] || optarg[1] || optarg[0] < '0' || optarg[0] > '3')
                usage_error("-O expects a level from 0 to 3, got '-O%s'", optarg);
            o->opt_level = optarg[0] - '0';
            break;
        case O_JIT: o->backend = "cpu"; break;
        case 'o': o->out = optarg; break;
        case O_RUN: o->run = true; break;
        case O_BACKEND:
            if (!find_backend(optarg))
                usage_error("backend '%s' is not available in this build (available: interp%s, cuda)",
                            optarg, find_backend("cpu") ? ", cpu" : "");
            o->backend = optarg;
            break;
        case O_PRECISION:
            /* the last --precision wins, whole */
            o->precision_mode = NULL;
            o->narrow = WSTORE_F32;
            is_f64_asked = false;
            if (strcmp(optarg, "f64") == 0) {
                o->precision = INTERP_F64;
                is_f64_asked = true;
            } else if (strcmp(optarg, "f32") == 0 || strcmp(optarg, "fp32") == 0) {
                o->precision = INTERP_F32;
            } else if (strcmp(optarg, "fp16") == 0 || strcmp(optarg, "bf16") == 0 ||
                       strcmp(optarg, "mixed") == 0) {
                o->precision = INTERP_F32;
                o->precision_mode = optarg;
                o->narrow = strcmp(optarg, "bf16") == 0 ? WSTORE_BF16 : WSTORE_F16;
            } else {
                usage_error("--precision expects f64, f32 (fp32), fp16, bf16 or mixed, got '%s'",
                            optarg);
            }
            break;
        case O_NARROW:
            o->narrow_weights = !strcmp(optarg, "weights") || !strcmp(optarg, "all");
            o->narrow_activations = !strcmp(optarg, "activations") || !strcmp(optarg, "all");
            if (!o->narrow_weights && !o->narrow_activations)
                usage_error("--narrow expects weights, activations or all, got '%s'", optarg);
            o->has_narrow = true;
            break;
        case O_TOLERANCE: {
            char *end;
            double v = strtod(optarg, &end), w = v;
            bool is_bad = end == optarg;
            if (!is_bad && *end == ',') {
                const char *at = end + 1;
                w = strtod(at, &end);
                is_bad = end == at;
            }
            if (is_bad || *end || !(v >= 0 && v <= 1) || !(w >= 0 && w <= 1))
                usage_error("--tolerance expects fractions of spikes [and outputs] (0 to 1, e.g. "
                            "1e-5 or 1e-5,0.01), got '%s'", optarg);
            o->tolerance = v;
            o->tolerance_outputs = w;
            o->has_tolerance = true;
            break;
        }
        case O_CALIBRATE: {
            char *end;
            long long v = strtoll(optarg, &end, 10);
            if (*end || v < 1 || v > 1000000)
                usage_error("--calibrate expects a number of samples (1 to 1000000), got '%s'",
                            optarg);
            o->calibrate = v;
            break;
        }
        case O_DATA: o->data = optarg; break;
        case O_INPUT:
            if (o->ninput_args == MAX_INPUT_ARGS)
                usage_error("too many --input options");
            o->input_args[o->ninput_args++] = optarg;
            break;
        case O_THREADS: o->threads = (int)parse_int("--threads", optarg, 1, 1024); break;
        case O_BATCH: o->batch = (int)parse_int("--batch", optarg, 1, 1 << 20); break;
        case O_LIMIT: o->limit = parse_int("--limit", optarg, 1, INT64_MAX / 2); break;
        case O_SEED: o->seed = parse_int("--seed", optarg, 0, (int64_t)1 << 53); break;
        case O_OUTPUT: o->output = optarg; break;
        case O_REPORT:
            if (strcmp(optarg, "json") != 0)
                usage_error("--report expects json, got '%s'", optarg);
            o->report_json = true;
            break;
        case O_WEIGHTS: o->weights = optarg; break;
        case O_MODEL: o->model = optarg; break;
        case O_HELP_OPS: ops_print_help(stdout); exit(0);
        case 'h': usage(stdout); exit(0);
        case O_VERSION: print_version(); exit(0);
        case 'q': o->quiet = true; break;
        case O_NO_EMBED: o->no_embed_weights = true; break;
        case O_CPU: o->cpu = optarg; break;
        case O_CUDA_ARCH: o->cuda_arch = optarg; break;
        case O_DEVICE: o->device = optarg; break;
        case O_PASSES: {
            char err[768];
            if (!*optarg) usage_error("--passes needs a comma-separated list of passes (see --help-passes)");
            if (!pass_check_pipeline(optarg, err, sizeof err)) usage_error("--passes: %s", err);
            o->passes.passes = optarg;
            break;
        }
        case O_DISABLE_PASS:
            pass_list_option("--disable-pass", optarg);
            o->passes.disable = optarg;
            break;
        case O_PRINT_BEFORE:
            pass_list_option("--print-ir-before", optarg);
            o->passes.print_before = optarg;
            break;
        case O_PRINT_AFTER:
            pass_list_option("--print-ir-after", optarg);
            o->passes.print_after = optarg;
            break;
        case O_PRINT_BEFORE_ALL: o->passes.print_before_all = true; break;
        case O_PRINT_AFTER_ALL: o->passes.print_after_all = true; break;
        case O_PRINT_AFTER_CHANGE: o->passes.print_after_change = true; break;
        case O_TREE_DIR: o->passes.tree_dir = optarg; break;
        case O_TIME_PASSES: o->passes.time_passes = true; break;
        case O_VERIFY_EACH: o->passes.verify_each = true; break;
        case O_HELP_PASSES: passes_print_help(stdout); exit(0);
        case O_HELP_MARKS: marks_help(stdout); exit(0);
        case O_EXPLAIN: o->explain = true; break;
        case O_ACCUMULATE:
            if (strcmp(optarg, "exact") == 0)
                o->accumulate = ACC_EXACT;
            else if (strcmp(optarg, "f32") == 0)
                o->accumulate = ACC_F32;
            else
                usage_error("--accumulate expects exact or f32, got '%s'", optarg);
            break;
        case O_EVENTS:
            if (strcmp(optarg, "auto") == 0)
                o->events_auto = true;
            else if (strcmp(optarg, "all") == 0)
                o->events_auto = false;
            else
                usage_error("--events expects all or auto, got '%s'", optarg);
            break;
        case O_DT: {
            char *end;
            errno = 0;
            o->nir.dt = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(o->nir.dt > 0) || !isfinite(o->nir.dt))
                usage_error("--dt expects a positive number of seconds, got '%s'", optarg);
            nir_given |= 1u << 0;
            break;
        }
        case O_INTEGRATOR:
            if (strcmp(optarg, "euler") == 0)
                o->nir.integrator = NIR_EULER;
            else if (strcmp(optarg, "exact") == 0)
                o->nir.integrator = NIR_EXACT;
            else
                usage_error("--integrator expects euler or exact, got '%s'", optarg);
            nir_given |= 1u << 2;
            break;
        case O_RESET:
            if (strcmp(optarg, "value") == 0)
                o->nir.reset = NIR_RESET_VALUE;
            else if (strcmp(optarg, "subtract") == 0)
                o->nir.reset = NIR_RESET_SUBTRACT;
            else
                usage_error("--reset expects value or subtract, got '%s'", optarg);
            nir_given |= 1u << 3;
            break;
        case O_RESET_STEP:
            if (strcmp(optarg, "same") == 0)
                o->nir.reset_next = false;
            else if (strcmp(optarg, "next") == 0)
                o->nir.reset_next = true;
            else
                usage_error("--reset-step expects same or next, got '%s'", optarg);
            nir_given |= 1u << 4;
            break;
        case O_OUTPUTS:
            if (!optarg[0]) usage_error("--outputs expects output names, comma-separated");
            o->outputs = optarg;
            break;
        case O_SPIKE_INPUTS:
            o->nir.spike_inputs = true;
            nir_given |= 1u << 6;
            break;
        case O_IMPULSES:
            o->nir.impulses = true;
            nir_given |= 1u << 1;
            break;
        case O_FRAMEWORK: {
            NirFramework f = nir_framework_parse(optarg);
            if (f == NIR_FW_COUNT)
                usage_error("--framework expects %s, got '%s'", nir_framework_list(), optarg);
            o->nir.framework = f;
            nir_given |= 1u << 7;
            break;
        }
        case O_TIMESTEPS:
            o->nir.timesteps = (int)parse_int("--timesteps", optarg, 1, 1 << 20);
            nir_given |= 1u << 5;
            break;
        case O_LLVM_ARGS: {
#ifdef SNN_HAVE_LLVM
            char why[256];
            if (!cg_llvm_set_args(optarg, why, sizeof why)) usage_error("%s", why);
#else
            usage_error("--llvm-args: this build has no LLVM");
#endif
            break;
        }
        case ':': usage_error("option '%s' needs a value", argv[optind - 1]);
        default:
            if (optopt >= 256)
                for (const struct option *lo = longopts; lo->name; lo++)
                    if (lo->val == optopt)
                        usage_error("option '--%s' takes no value", lo->name);
            if (optopt > 0 && optopt < 256)
                usage_error("unknown option '-%c'", optopt);
            usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    o->passes.level = o->opt_level;
    pass_options_from_env(&o->passes);
    char why[768];
    if (o->passes.print_after && !pass_check_list(o->passes.print_after, why, sizeof why))
        usage_error("SNN_IR_DUMP: %s", why);
    parse_device(o, is_f64_asked);
    /* The default backend is the compiled CPU code when this build has it: unless double precision
     * is asked for, which only the interpreter computes. */
    if (!o->backend)
        o->backend = find_backend("cpu") && !is_f64_asked ? "cpu" : "interp";
    if (is_f64_asked && find_backend(o->backend)->is_f32)
        usage_error("--precision=f64 is computed by the interpreter only (--backend=interp); "
                    "backend %s computes float32", o->backend);
    if (optind >= argc)
        usage_error("no input file");
    if (optind + 1 < argc)
        usage_error("one model file at a time (got '%s' and '%s')", argv[optind], argv[optind + 1]);
    o->path = argv[optind];
    size_t plen = strlen(o->path);
    o->is_nir = plen > 4 && strcmp(o->path + plen - 4, ".nir") == 0;
    o->nir.given = nir_given; /* bit i is nir_option_names[i]: NIR_GIVEN_* (nir.h) */
    /* NIR options read a .nir file; --emit=nir writes time constants for a reader's --dt and
     * --impulses */
    unsigned nir_allowed = o->is_nir ? ~0u : is_emit(o, "nir") ? 3u | 1u << 7 : 0u;
    for (int i = 0; i < 8; i++)
        if (nir_given & ~nir_allowed & (1u << i))
            usage_error("%s is for NIR graphs (MODEL.nir)%s; a .snn model says this itself",
                        nir_option_names[i],
                        is_emit(o, "nir") ? " (--emit=nir takes --dt, --impulses and --framework)"
                                          : "");
    if (is_emit(o, "nir") && !o->out) usage_error("--emit=nir needs -o FILE.nir");
    if (is_emit(o, "snn") && !o->is_nir)
        usage_error("--emit=snn translates a NIR graph (MODEL.nir); for a .snn model, --emit=ir "
                    "prints its canonical form");
    if (o->is_nir && o->model)
        usage_error("--model picks one model of a .snn file; a NIR graph is one model");
    if (!o->emit && !o->run && !o->out && !o->explain)
        usage_error("nothing to do: give --run, --emit=ir, --explain or -o MODEL.so");
    if (o->out && !o->emit && !find_backend("cpu"))
        usage_error("building a shared library needs the CPU backend, not in this build");
    if (o->emit && find_emit(o->emit)->needs_out && !o->out)
        usage_error("--emit=%s needs -o FILE", o->emit);
    if (o->no_embed_weights && (!o->out || o->emit))
        usage_error("--no-embed-weights is for building a shared library (-o MODEL.so)");
    if (o->cpu && (!o->out || (o->emit && strcmp(o->emit, "obj") != 0)))
        usage_error("--cpu is for building a shared library (-o MODEL.so) or --emit=obj");
    if (o->cuda_arch) parse_cuda_arch(o);
    if (o->report_json && !o->run && !is_build(o))
        usage_error("--report=json reports a run (--run) or a build (-o MODEL.so, --emit=obj, "
                    "--emit=ptx, --emit=cubin)");
    if (!o->run && (o->output || o->limit >= 0))
        usage_error("--output and --limit need --run");
    if (!o->run && !o->precision_mode && !o->events_auto && (o->data || o->ninput_args))
        usage_error("--data and --input need --run (or --precision=fp16|bf16|mixed or "
                    "--events=auto, which calibrate on them)");
    if (o->events_auto && !o->data && !o->ninput_args)
        usage_error("--events=auto chooses per layer from firing rates on calibration inputs: "
                    "give --data or --input");
    if (o->events_auto && !passes_include(&o->passes, "events"))
        usage_error("--events=auto chooses for the events pass, which this pipeline does not run "
                    "(-O1 and above run it, unless --disable-pass or --passes leave it out)");
    if (o->precision_mode && !strcmp(o->precision_mode, "mixed") && !o->data && !o->ninput_args)
        usage_error("--precision=mixed chooses per tensor on calibration inputs: give --data or "
                    "--input");
    if (o->data && o->ninput_args)
        usage_error("give either --data or --input, not both");
    if (o->has_narrow && !o->precision_mode)
        usage_error("--narrow says what --precision=fp16|bf16|mixed narrows: give --precision");
    if (o->has_tolerance && (!o->precision_mode || (!o->data && !o->ninput_args)))
        usage_error("--tolerance bounds what --precision=fp16|bf16|mixed changes on calibration "
                    "inputs: give --precision and --data or --input");
}

/* ---- data ---- */

typedef struct Data {
    int64_t n;            /* samples */
    int ninputs;
    float **inputs;       /* per model input: n * per-sample numel */
    int64_t *numel;       /* per-sample numel of each input, in file layout */
    float *labels;        /* n, or NULL */
    RtTensor *owned;      /* tensors whose data the inputs point into */
    int nowned, capowned;
} Data;

static void
data_free(Data *d)
{
    for (int i = 0; i < d->nowned; i++)
        rt_tensor_free(&d->owned[i]);
    free(d->owned);
    free(d->inputs);
    free(d->numel);
}

/* The file layout of one sample of input node n: [T, dims...] for per-step inputs, [dims...] else. */
static int
input_file_shape(const Module *m, const Node *n, int64_t *dims)
{
    int r = 0;
    if (n->is_per_step_input)
        dims[r++] = m->timesteps;
    for (int i = 0; i < n->type.rank; i++)
        dims[r++] = n->type.dims[i];
    return r;
}

static void
shape_str(char *buf, size_t len, const char *first, int rank, const int64_t *dims)
{
    size_t k = (size_t)snprintf(buf, len, "[%s", first ? first : "");
    for (int i = 0; i < rank && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%lld", (i || first) ? ", " : "", (long long)dims[i]);
    if (k < len)
        snprintf(buf + k, len - k, "]");
}

static bool
bind_tensor(const Module *m, Data *d, int k, RtTensor *t, const char *file)
{
    const Node *n = &m->nodes[m->inputs[k]];
    int64_t dims[IR_MAX_RANK + 1];
    int r = input_file_shape(m, n, dims);
    bool ok = t->rank == r + 1;
    for (int i = 0; ok && i < r; i++)
        ok = t->dims[i + 1] == dims[i];
    if (!ok) {
        char want[160], got[160];
        shape_str(want, sizeof want, "N", r, dims);
        shape_str(got, sizeof got, NULL, t->rank, t->dims);
        diag_file_error(file, "has shape %s; input '%s' expects %s (samples first%s)", got, n->name,
                        want, n->is_per_step_input ? ", then timesteps" : "");
        return false;
    }
    if (d->n >= 0 && t->dims[0] != d->n) {
        diag_file_error(file, "has %lld samples; the other inputs have %lld", (long long)t->dims[0],
                        (long long)d->n);
        return false;
    }
    if (d->inputs[k]) {
        diag_file_error(file, "is a second array for input '%s'; give each input once", n->name);
        return false;
    }
    /* values take the declared element type: f16/bf16 are rounded, spikes must be 0 or 1 */
    for (int64_t i = 0; i < t->numel; i++) {
        float *x = &t->data[i];
        if (n->type.dtype == DT_F16)
            *x = rt_f16_to_f32(rt_f32_to_f16(*x));
        else if (n->type.dtype == DT_BF16)
            *x = rt_bf16_to_f32(rt_f32_to_bf16(*x));
        else if (n->type.dtype == DT_SPIKE && *x != 0 && *x != 1) {
            diag_file_error(file, "input '%s' is declared spike, but element %lld is %g (not 0 or 1)",
                            n->name, (long long)i, (double)*x);
            return false;
        }
    }
    /* not an error: the model computes with them as IEEE arithmetic does (docs/api.md) */
    int64_t first, bad = rt_count_nonfinite(t->data, t->numel, &first);
    if (bad) {
        int64_t per = t->dims[0] ? t->numel / t->dims[0] : 1;
        diag_warning((Loc){diag_intern(file), 0, 0},
                     "%lld value%s of input '%s' %s not finite (the first, element %lld of sample "
                     "%lld, is %s); they reach the model as they are (docs/api.md: inputs that are "
                     "not finite)", (long long)bad, bad == 1 ? "" : "s", n->name,
                     bad == 1 ? "is" : "are", (long long)(first % per), (long long)(first / per),
                     isnan(t->data[first]) ? "NaN" : t->data[first] > 0 ? "inf" : "-inf");
    }
    d->n = t->dims[0];
    d->inputs[k] = t->data;
    return true;
}

/* A tensor slot the data owns. The array is sized once (load_inputs), so returned pointers stay valid. */
static RtTensor *
own(Data *d)
{
    if (d->nowned == d->capowned)
        die("too many input tensors");
    return &d->owned[d->nowned++];
}

static int
input_index(const Module *m, const char *name)
{
    for (int k = 0; k < m->ninputs; k++)
        if (strcmp(m->nodes[m->inputs[k]].name, name) == 0)
            return k;
    return -1;
}

static bool
load_inputs(const Module *m, const Options *o, Data *d)
{
    char err[512];
    d->n = -1;
    d->ninputs = m->ninputs;
    d->inputs = calloc((size_t)m->ninputs, sizeof *d->inputs);
    d->numel = calloc((size_t)m->ninputs, sizeof *d->numel);
    d->capowned = m->ninputs + MAX_INPUT_ARGS + 2;
    d->owned = calloc((size_t)d->capowned, sizeof *d->owned);
    if (!d->inputs || !d->numel || !d->owned)
        die("out of memory");
    for (int k = 0; k < m->ninputs; k++) {
        int64_t dims[IR_MAX_RANK + 1];
        int r = input_file_shape(m, &m->nodes[m->inputs[k]], dims);
        d->numel[k] = 1;
        for (int i = 0; i < r; i++)
            d->numel[k] *= dims[i];
    }
    if (o->data) {
        const char *dir = NULL;
        if (strncmp(o->data, "fashion-mnist", 13) == 0 && (o->data[13] == 0 || o->data[13] == ':'))
            dir = o->data[13] == ':' ? o->data + 14 : NULL;
        else
            usage_error("unknown data set '%s' (available: fashion-mnist[:DIR])", o->data);
        const Node *n = &m->nodes[m->inputs[0]];
        if (m->ninputs != 1 || n->is_per_step_input || type_numel(&n->type) != 784) {
            int64_t dims[IR_MAX_RANK + 1];
            char shape[160];
            int r = input_file_shape(m, n, dims);
            shape_str(shape, sizeof shape, n->is_per_step_input ? "T" : NULL, r - n->is_per_step_input,
                      dims + n->is_per_step_input);
            diag_error(n->loc,
                       "--data fashion-mnist needs a model with one static input of 784 values "
                       "(e.g. input image : f32[1, 28, 28]); '%s' is %s%s%s",
                       n->name, dtype_name(n->type.dtype), shape,
                       m->ninputs != 1 ? " and the model has several inputs" : "");
            return false;
        }
        RtTensor *img = own(d), *lab = own(d);
        if (rt_fmnist_load(dir && dir[0] ? dir : NULL, 0, img, lab, err, sizeof err)) {
            diag_reader_error(NULL, err);
            return false;
        }
        d->n = img->dims[0];
        d->inputs[0] = img->data;
        d->labels = lab->data;
        return true;
    }
    if (o->ninput_args == 0) {
        fputs("snnc: error: nothing to run on: give --data=fashion-mnist or --input=FILE.npy\n", stderr);
        return false;
    }
    for (int a = 0; a < o->ninput_args; a++) {
        const char *arg = o->input_args[a];
        const char *eq = strchr(arg, '=');
        const char *file = eq ? eq + 1 : arg;
        size_t flen = strlen(file);
        if (flen > 4 && strcmp(file + flen - 4, ".npz") == 0) {
            if (eq)
                usage_error("--input %s: an .npz holds every input under its own name; give it "
                            "without NAME=",
                            arg);
            RtTensorSet set = {0};
            if (rt_npz_read(file, NULL, &set, err, sizeof err)) {
                diag_reader_error(file, err);
                return false;
            }
            bool ok = true;
            for (int k = 0; k < m->ninputs && ok; k++) {
                const char *name = m->nodes[m->inputs[k]].name;
                RtTensor *t = NULL;
                for (int i = 0; i < set.ntensors; i++)
                    if (set.tensors[i].name && strcmp(set.tensors[i].name, name) == 0)
                        t = &set.tensors[i];
                if (!t) {
                    diag_file_error(file, "has no array named '%s' (one per model input)", name);
                    ok = false;
                    break;
                }
                RtTensor *keep = own(d);
                *keep = *t;
                memset(t, 0, sizeof *t);
                ok = bind_tensor(m, d, k, keep, file);
            }
            rt_tensorset_free(&set);
            if (!ok)
                return false;
            continue;
        }
        int k = 0;
        if (eq) {
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(eq - arg), arg);
            k = input_index(m, name);
            if (k < 0)
                usage_error("--input %s: the model has no input named '%s'", arg, name);
        } else if (m->ninputs > 1) {
            usage_error("the model has %d inputs: name them, --input=NAME=FILE.npy", m->ninputs);
        }
        RtTensor *t = own(d);
        RtReadLimit lim = {0, o->limit > 0 ? o->limit : 0, NULL}; /* --limit: the rows it runs */
        if (rt_npy_read(file, &lim, t, err, sizeof err)) {
            diag_reader_error(file, err);
            return false;
        }
        if (!bind_tensor(m, d, k, t, file))
            return false;
    }
    for (int k = 0; k < m->ninputs; k++)
        if (!d->inputs[k]) {
            fprintf(stderr, "snnc: error: no data for input '%s'\n", m->nodes[m->inputs[k]].name);
            return false;
        }
    return true;
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

static void
json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static bool
write_outputs(const Module *m, const Options *o, float **outs, int64_t n)
{
    char err[512];
    size_t len = strlen(o->output);
    bool npz = len > 4 && strcmp(o->output + len - 4, ".npz") == 0;
    RtTensor *ts = calloc((size_t)m->noutputs, sizeof *ts);
    if (!ts)
        die("out of memory");
    int count = npz ? m->noutputs : 1;
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

static int
run(Module *m, const Options *o)
{
    Data d = {0};
    if (!load_inputs(m, o, &d)) {
        data_free(&d);
        return 1;
    }
    int64_t n = o->limit >= 0 && o->limit < d.n ? o->limit : d.n;
    int batch = o->batch;
    /* every sample's outputs are kept only when they are written out; else one batch at a time */
    bool keep_all = o->output != NULL;
    int64_t rows = keep_all ? (n ? n : 1) : (n < batch ? (n ? n : 1) : batch);
    float **outs = calloc((size_t)m->noutputs, sizeof *outs);
    double *counts = calloc((size_t)m->nnodes, sizeof *counts);
    const float **in_ptrs = calloc((size_t)m->ninputs, sizeof *in_ptrs);
    float **out_ptrs = calloc((size_t)m->noutputs, sizeof *out_ptrs);
    if (!outs || !counts || !in_ptrs || !out_ptrs)
        die("out of memory");
    int rc = 0;
    for (int j = 0; j < m->noutputs && rc == 0; j++) {
        int64_t per = output_numel(m, j);
        if (per > 0 && rows > (int64_t)(SIZE_MAX / sizeof(float)) / per)
            outs[j] = NULL;
        else
            outs[j] = malloc((size_t)rows * (size_t)per * sizeof(float));
        if (!outs[j]) {
            fprintf(stderr,
                    "snnc: error: output '%s' of %lld samples needs %.3g GB of memory, which cannot be "
                    "allocated; use --limit%s\n",
                    m->nodes[m->outputs[j]].name ? m->nodes[m->outputs[j]].name : "?", (long long)rows,
                    (double)rows * (double)per * 4e-9, keep_all ? " or leave out --output" : " or a smaller --batch");
            rc = 1;
        }
    }
    /* accuracy needs labels and a first output of class scores: [B, K] */
    const Node *out0 = &m->nodes[m->outputs[0]];
    bool scores = !out0->type.has_time && out0->type.rank == 1;
    int64_t correct = 0;
    InterpOptions io = {o->precision, o->seed};
    char err[512];
    const Backend *be = find_backend(o->backend);
    if (be->prepare != interp_prepare && o->seed >= 0)
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
            out_ptrs[j] = outs[j] + (keep_all ? s : 0) * output_numel(m, j);
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
    if (rc == 0 && o->output && !write_outputs(m, o, outs, n))
        rc = 1;
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
            if (be->prepare != interp_prepare)
                printf(" (compile %.3f s%s)", compile_secs,
                       be->cache && !strcmp(be->cache(state), "hit") ? ", cached" : "");
            printf("\n");
            if (!be->counts_spikes)
                printf("firing rates: not counted by backend %s yet\n", be->name);
            else
                printf("firing rates (spikes per neuron per step):\n");
            for (int v = 0; v < m->nnodes && be->counts_spikes; v++)
                if (is_rate_layer(m, &m->nodes[v]))
                    printf("  %-16s %.4f\n", layer_label(m, &m->nodes[v], label, sizeof label), rates[v]);
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
            if (be->prepare != interp_prepare)
                printf(", \"compile_seconds\": %.6f, \"accumulate\": \"%s\"", compile_secs,
                       m->accumulate == ACC_F32 ? "f32" : "exact");
            if (be->cache) printf(", \"cache\": \"%s\"", be->cache(state));
            /* the spikes each layer fired over the run, exactly; then the rates they make */
            printf(", \"spike_counts\": ");
            json_layers(m, be->counts_spikes, counts, "%.0f");
            printf(", \"firing_rates\": ");
            json_layers(m, be->counts_spikes, rates, "%.6f");
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

static int
emit_llvm(FILE *f, const KProgram *kp, bool optimised)
{
#ifdef SNN_HAVE_LLVM
    char err[512];
    char *text = cg_llvm_module_text(kp, optimised, err, sizeof err);
    if (!text) {
        fprintf(stderr, "snnc: error: %s\n", err);
        return 1;
    }
    fputs(text, f);
    free(text);
    return 0;
#else
    (void)f, (void)kp, (void)optimised;
    unreachable();
#endif
}

/* --emit=weights: the bound weights as f32 safetensors */
static int
write_weights(const Module *m, const char *path)
{
    RtTensor *ts = weights_as_tensors(m);
    char msg[512];
    int rc = 0;
    if (rt_safetensors_write(path, ts, m->nweights, RT_F32, msg, sizeof msg) != 0) {
        diag_reader_error(path, msg);
        rc = 1;
    }
    free(ts);
    return rc;
}

/* ---- the CUDA backend's compile-time half: --emit=cuda|ptx|cubin and model.so's images ---- */

/* the CUDA build of m: compiled for the GPU up to its CUDA C (compile.c), then handed over */
static bool
cuda_build_start(Module *m, CudaBuild *b)
{
    memset(b, 0, sizeof *b); /* what cuda_build_free expects if this fails */
    char err[256];
    Program *p = compile(m, &(CompileOptions){KTARGET_GPU, STAGE_SOURCE}, err, sizeof err);
    if (!p) return false;
    char *source = p->cuda_source;
    p->cuda_source = NULL;
    return cuda_build_begin(b, program_take_kir(p), source, m->name);
}

/* --report=json of a build: the output and every CUDA image with its compile time and cache use */
static void
cuda_build_report(const CudaBuild *b, const char *out, const char *devices)
{
    printf("{\"output\": ");
    if (out)
        json_string(stdout, out);
    else
        printf("null");
    if (devices) printf(", \"devices\": \"%s\"", devices);
    double total = 0;
    for (int i = 0; i < b->nimages; i++)
        total += b->images[i].seconds;
    printf(", \"cuda_compile_seconds\": %.6f, \"cuda_images\": [", total);
    for (int i = 0; i < b->nimages; i++) {
        const CudaImage *img = &b->images[i];
        const char *cache = b->ov.path && b->ov.is_ptx ? "override"
                            : img->is_cache_hit        ? "hit"
                            : b->cache[0]              ? "miss"
                                                       : "off";
        printf("%s{\"format\": \"%s\", \"arch\": \"%s\", \"bytes\": %zu, \"seconds\": %.6f, "
               "\"cache\": \"%s\"}", i ? ", " : "", img->is_cubin ? "cubin" : "ptx", img->arch,
               img->size, img->seconds, cache);
    }
    printf("]}\n");
}

/* --emit=cuda: the kernel records as comments, then the CUDA C */
static int
emit_cuda(FILE *f, Module *m)
{
    const char *ov = getenv("SNN_KERNEL_OVERRIDE");
    if (ov && *ov)
        diag_note((Loc){0}, "SNN_KERNEL_OVERRIDE is not applied by --emit=cuda, which prints the "
                            "generated CUDA C");
    char err[256];
    Program *prog = compile(m, &(CompileOptions){KTARGET_GPU, STAGE_SOURCE}, err, sizeof err);
    if (!prog) return 1;
    const KProgram *gp = prog->kir;
    char *records = cuda_gen_describe(gp);
    const char *source = prog->cuda_source;
    fprintf(f, "// snnc --emit=cuda: model %s, CUDA C for runtime/cuda_abi.h (SNN_KERNEL_OVERRIDE "
               "compiles\n// an edited copy in its place). Its buffers and launch records:\n",
            m->name);
    for (const char *p = records; *p;) {
        size_t n = strcspn(p, "\n");
        fprintf(f, "// %.*s\n", (int)n, p);
        p += n + (p[n] == '\n');
    }
    fputs(source, f);
    free(records);
    program_free(prog);
    return 0;
}

/* --emit=ptx (to -o FILE or stdout) and --emit=cubin (-o FILE) for one architecture */
static int
emit_cuda_image(Module *m, const Options *o)
{
    bool is_cubin = is_emit(o, "cubin");
    const char *arch = o->narchs ? o->archs[0] : "sm_90";
    CudaBuild b;
    int rc = 1;
    CudaImage *img = cuda_build_start(m, &b) ? cuda_build_add(&b, arch, is_cubin) : NULL;
    if (img) {
        size_t len = is_cubin ? img->size : img->size - 1; /* PTX files hold no NUL */
        char msg[512];
        if (!o->out) {
            rc = fwrite(img->data, 1, len, stdout) == len ? 0 : 1;
        } else if (rt_write_file(o->out, img->data, len, msg, sizeof msg) != 0) {
            diag_reader_error(o->out, msg);
        } else {
            rc = 0;
        }
    }
    if (rc == 0 && o->report_json && !o->run) cuda_build_report(&b, o->out, NULL);
    cuda_build_free(&b);
    return rc;
}

#ifdef SNN_HAVE_LLVM
/* the number of an architecture, for ordering: sm_90a → 90 */
static int
arch_number(const char *arch)
{
    return atoi(strchr(arch, '_') + 1);
}

/* model.so's CUDA code: a cubin for each sm_NN of --cuda-arch (default sm_80,sm_90), PTX for each
 * compute_NN or else for compute_ of the lowest, packed 64-byte aligned into *images, and the
 * description's records for them in *records. With --cuda-arch=none, or by default where NVRTC is
 * not found (a note says so), no CUDA code: *records NULL. */
static bool
cuda_model_images(Module *m, const Options *o, CudaBuild *b, char **records,
                  unsigned char **images, size_t *images_len)
{
    static const char *const defaults[] = {"sm_80", "sm_90"};
    memset(b, 0, sizeof *b);
    *records = NULL;
    *images = NULL;
    *images_len = 0;
    bool is_default = !o->cuda_arch;
    const char *const *archs = is_default ? defaults : o->archs;
    int narchs = is_default ? 2 : o->narchs;
    if (narchs == 1 && strcmp(archs[0], "none") == 0) return true;
    char err[1200];
    if (!cuda_nvrtc_load(err, sizeof err)) {
        if (!is_default) {
            diag_error((Loc){0}, "%s", err);
            return false;
        }
        diag_note((Loc){0}, "%s; model.so runs on the CPU only", err);
        return true;
    }
    if (!cuda_build_start(m, b)) return false;
    const char *lowest = NULL;
    bool has_ptx = false;
    for (int i = 0; i < narchs; i++) {
        if (!cuda_arch_is_real(archs[i])) {
            has_ptx = true;
            continue;
        }
        if (!lowest || arch_number(archs[i]) < arch_number(lowest)) lowest = archs[i];
        if (!cuda_build_add(b, archs[i], true)) return false;
    }
    for (int i = 0; i < narchs; i++)
        if (!cuda_arch_is_real(archs[i]) && !cuda_build_add(b, archs[i], false)) return false;
    if (!has_ptx) {
        char ptx_arch[32];
        cuda_arch_virtual(lowest, ptx_arch, sizeof ptx_arch);
        if (!cuda_build_add(b, ptx_arch, false)) return false;
    }
    /* the images, each at a 64-byte boundary, and a cuda_image record for each */
    size_t total = 0;
    for (int i = 0; i < b->nimages; i++)
        total = (total + 63) / 64 * 64 + b->images[i].size;
    char *kernels = cuda_gen_describe(b->gp);
    size_t cap = strlen(kernels) + (size_t)b->nimages * 96 + 1;
    char *rec = xmalloc(cap);
    unsigned char *blob = xcalloc(total ? total : 1, 1);
    size_t len = (size_t)snprintf(rec, cap, "%s", kernels), off = 0;
    for (int i = 0; i < b->nimages; i++) {
        const CudaImage *img = &b->images[i];
        off = (off + 63) / 64 * 64;
        memcpy(blob + off, img->data, img->size);
        len += (size_t)snprintf(rec + len, cap - len, "cuda_image %s %s %zu %zu\n",
                                img->is_cubin ? "cubin" : "ptx", img->arch, off, img->size);
        off += img->size;
    }
    free(kernels);
    *records = rec;
    *images = blob;
    *images_len = total;
    return true;
}
#endif

/* ---- the CUDA backend of --run ----
 * The program lowered for the GPU, compiled by NVRTC into a cubin for the device's architecture
 * and run through the model runtime (runtime/model_parts.h) as a cuda session: the same code, the
 * same launches and graphs as a model.so's cuda session, from a description made here. */
typedef struct CudaRun {
    CudaBuild b;
    SessionRun r;
} CudaRun;

static void
cuda_release(void *state)
{
    CudaRun *st = state;
    session_close(&st->r);
    cuda_build_free(&st->b);
    free(st);
}

static const char *
cuda_cache(void *state)
{
    const CudaRun *st = state;
    return !st->b.cache[0] ? "off" : st->b.nimages && st->b.images[0].is_cache_hit ? "hit" : "miss";
}

static void *
cuda_prepare(Module *m, const Options *o, char *err, size_t errlen)
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
        cuda_release(st);
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
        cuda_release(st);
        return NULL;
    }
    return st;
}

static bool
cuda_backend_run(void *state, const Module *m, const InterpOptions *io, int batch, int64_t base,
                 const float *const *in, float *const *out, double *counts, char *err,
                 size_t errlen)
{
    CudaRun *st = state;
    return session_run(&st->r, st->b.gp, batch, base, in, out, counts, err, errlen);
}

/* The weights a model runs with: --weights, else an imported graph's, else the model's own. */
static bool
bind_weights(Module *m, const Options *o)
{
    if (o->weights || !o->import) return weights_bind(m, o->weights);
    RtTensorSet set = {o->import->tensors, o->import->ntensors};
    return weights_bind_set(m, &set, o->path);
}

/* --emit=obj -o FILE, or -o MODEL.so */
static int
build_binary(Module *m, const Options *o)
{
#ifdef SNN_HAVE_LLVM
    bool embed = !o->no_embed_weights;
    if (embed && !bind_weights(m, o)) return 1;
    char lerr[256];
    Program *prog = compile(m, &(CompileOptions){KTARGET_CPU, STAGE_LOWERED}, lerr, sizeof lerr);
    if (!prog) return 1;
    KProgram *kp = program_take_kir(prog);
    CudaBuild b;
    LinkCuda cuda = {0};
    char *records = NULL;
    unsigned char *images = NULL;
    bool is_ok = cuda_model_images(m, o, &b, &records, &images, &cuda.images_len);
    if (!is_ok)
        diag_note((Loc){0}, "--cuda-arch=none builds %s for the CPU only",
                  o->emit ? "the object" : "model.so");
    cuda.records = records;
    cuda.images = images;
    if (is_ok)
        is_ok = o->emit ? link_emit_object(kp, o->cpu, &cuda, o->out, embed)
                        : link_shared_library(kp, o->cpu, &cuda, o->out, embed);
    if (is_ok && o->report_json && !o->run)
        cuda_build_report(&b, o->out, records ? "cpu,cuda" : "cpu");
    cuda_build_free(&b);
    free(records);
    free(images);
    kir_free(kp);
    return is_ok ? 0 : 1;
#else
    (void)m, (void)o;
    unreachable();
#endif
}

/* "dir/model.snn" → "dir/model.safetensors" (malloc'ed) */
static char *
weights_path_beside(const char *snn_path)
{
    size_t len = strlen(snn_path);
    const char *slash = strrchr(snn_path, '/');
    const char *dot = strrchr(snn_path, '.');
    if (dot && (!slash || dot > slash + 1)) len = (size_t)(dot - snn_path);
    char *p = xmalloc(len + sizeof ".safetensors");
    memcpy(p, snn_path, len);
    memcpy(p + len, ".safetensors", sizeof ".safetensors");
    return p;
}

/* notes, one per line, as "FILE: note: ..." on stderr (through diag: they quote node names a
 * file holds, printed escaped) */
static void
print_notes(const char *file, const char *notes, bool quiet)
{
    for (const char *line = notes; *line;) {
        const char *end = strchr(line, '\n');
        int len = end ? (int)(end - line) : (int)strlen(line);
        if (strncmp(line, "warning: ", 9) == 0 && len >= 9)
            diag_warning((Loc){diag_intern(file), 0, 0}, "%.*s", len - 9, line + 9);
        else if (!quiet)
            diag_note((Loc){diag_intern(file), 0, 0}, "%.*s", len, line);
        line += len + (end != NULL);
    }
}

/* A NIR graph: imported into .snn text and weights (nir/), which the frontend then reads like a
 * file. The text is named after where --emit=snn writes it, else MODEL.nir.snn, in messages and
 * IR locations. */
static Module *
load_nir(Options *o, NirImport *im, char **text_path, char **weights_path)
{
    NirImportOptions no = o->nir;
    /* -o names a file (or where one will be): its weights go beside it; a device, FIFO or
     * /dev/stdout takes the text alone, like stdout */
    struct stat st;
    bool is_snn_file = is_emit(o, "snn") && o->out &&
                       (stat(o->out, &st) != 0 || S_ISREG(st.st_mode));
    if (is_snn_file) {
        *weights_path = weights_path_beside(o->out);
        const char *slash = strrchr(*weights_path, '/');
        no.weights_ref = slash ? slash + 1 : *weights_path;
    }
    char err[1024];
    if (!nir_import_file(o->path, &no, im, err, sizeof err)) {
        diag_reader_error(NULL, err);
        return NULL;
    }
    print_notes(o->path, im->notes, o->quiet); /* warnings even with -q */
    size_t n = strlen(o->path) + 5;
    *text_path = xmalloc(n);
    snprintf(*text_path, n, "%s.snn", o->path);
    o->import = im;
    /* a message about a line of the generated text names the graph's node it stands for */
    const char *name = is_snn_file ? o->out : *text_path;
    diag_set_origin(name, o->path, nir_import_origin, im);
    return fe_load_text(name, im->text, im->len, NULL);
}

/* --emit=nir -o FILE: the model (weights bound) as a NIR graph, and what the reader should know */
static int
emit_nir(Module *m, const Options *o)
{
    if (!bind_weights(m, o)) return 1;
    NirObj root;
    char notes[2048], err[1024];
    if (!nir_from_module(m, o->nir.dt, o->nir.given & NIR_GIVEN_IMPULSES ? 1 : -1,
                         o->nir.framework, &root, notes, sizeof notes, err,
                         sizeof err)) {
        diag_file_error(o->path, "--emit=nir: %s", err);
        return 1;
    }
    bool ok = nir_h5_write(o->out, &root, err, sizeof err);
    nir_obj_free(&root);
    if (!ok) {
        diag_reader_error(NULL, err);
        return 1;
    }
    print_notes(o->out, notes, o->quiet);
    return 0;
}

/* --emit=snn: the imported model's text (to -o or stdout) and, with -o, its weights beside it */
static int
emit_snn(const Options *o, const char *weights_path)
{
    char err[512];
    const NirImport *im = o->import;
    if (!o->out || !weights_path) {
        if (!o->out) {
            fwrite(im->text, 1, im->len, stdout);
        } else if (rt_write_file(o->out, im->text, im->len, err, sizeof err) != 0) {
            diag_reader_error(NULL, err);
            return 1;
        }
        if (!o->quiet && im->ntensors)
            fprintf(stderr, "%s: note: the weights are written with -o FILE.snn only (beside it, "
                    "as FILE.safetensors)\n", o->path);
        return 0;
    }
    /* the text and its weights change together: both are written whole before either is
     * renamed into place */
    unsigned char *weights = NULL;
    size_t wlen = 0;
    RtWrite *text_w = NULL, *weights_w = NULL;
    bool ok = rt_safetensors_encode(im->tensors, im->ntensors, RT_F32, &weights, &wlen, err,
                                    sizeof err) == 0 &&
              rt_write_prepare(weights_path, weights, wlen, 0, &weights_w, err, sizeof err) == 0 &&
              rt_write_prepare(o->out, im->text, im->len, 0, &text_w, err, sizeof err) == 0;
    if (!ok) {
        rt_write_abort(weights_w);
    } else if (rt_write_commit(weights_w, err, sizeof err) != 0) {
        rt_write_abort(text_w);
        ok = false;
    } else {
        ok = rt_write_commit(text_w, err, sizeof err) == 0;
    }
    free(weights);
    if (!ok) diag_reader_error(NULL, err);
    return ok ? 0 : 1;
}

/* --precision=fp16|bf16|mixed: the storage of dense and conv weights and outputs (--narrow),
 * chosen or checked on the calibration samples when --data or --input gives them
 * (driver/calibrate.c) */
static bool
apply_precision(Module *m, const Options *o)
{
    if (!o->data && !o->ninput_args) {
        precision_set_all(m, o->narrow, o->narrow_weights, o->narrow_activations);
        return true;
    }
    Data d = {0};
    bool ok = load_inputs(m, o, &d) && bind_weights(m, o);
    if (ok) {
        PrecisionRequest rq = {
            .mode = o->precision_mode,
            .narrow = o->narrow,
            .is_mixed = strcmp(o->precision_mode, "mixed") == 0,
            .weights = o->narrow_weights,
            .activations = o->narrow_activations,
            .tolerance = o->tolerance,
            .tolerance_outputs = o->tolerance_outputs,
            .has_tolerance = o->has_tolerance,
            .inputs = (const float *const *)d.inputs,
            .numel = d.numel,
            .n = d.n < o->calibrate ? d.n : o->calibrate,
            .batch = o->batch,
            .quiet = o->quiet,
        };
        ok = precision_calibrate(m, &rq);
    }
    data_free(&d);
    return ok;
}

/* --events=auto: the input rates of spike-fed layers on the calibration samples, for the events
 * pass (weights bound for the run, then unbound again: passes see a module without weights) */
static bool
calibrate_events(Module *m, const Options *o)
{
    Data d = {0};
    bool ok = load_inputs(m, o, &d) && bind_weights(m, o);
    if (ok)
        ok = events_calibrate(m, (const float *const *)d.inputs, d.numel,
                              d.n < o->calibrate ? d.n : o->calibrate, o->batch, o->quiet);
    for (int i = 0; i < m->nweights; i++)
        m->weights[i].data = NULL; /* arena memory, freed with the module */
    data_free(&d);
    return ok;
}

/* --outputs: keep the outputs named in the comma-separated list (every name an output of the
 * model), drop the others; dce then removes what only they needed. Says what is wrong, or true. */
static bool
keep_outputs(Module *m, const char *list, const char *path)
{
    bool *is_kept = xcalloc((size_t)m->noutputs + 1, sizeof *is_kept);
    bool ok = true;
    for (const char *p = list; ok;) {
        size_t len = strcspn(p, ",");
        int k = -1;
        for (int i = 0; i < m->noutputs && k < 0; i++) {
            const char *name = m->nodes[m->outputs[i]].name;
            if (name && strlen(name) == len && strncmp(name, p, len) == 0) k = i;
        }
        if (len == 0) {
            fprintf(stderr, "%s: error: --outputs: an empty name in '%s'\n", path, list);
            ok = false;
        } else if (k < 0) {
            fprintf(stderr,
                    "%s: error: --outputs: '%.*s' is not an output of model '%s' (its outputs:",
                    path, (int)len, p, m->name ? m->name : "?");
            for (int i = 0; i < m->noutputs; i++)
                fprintf(stderr, "%s %s", i ? "," : "", m->nodes[m->outputs[i]].name);
            fputs(")\n", stderr);
            ok = false;
        } else {
            is_kept[k] = true;
        }
        if (!p[len]) break;
        p += len + 1;
    }
    if (ok) {
        int n = 0;
        for (int i = 0; i < m->noutputs; i++) {
            if (is_kept[i])
                m->outputs[n++] = m->outputs[i];
            else
                m->nodes[m->outputs[i]].is_output = false;
        }
        m->noutputs = n;
    }
    free(is_kept);
    return ok;
}

/* The exit status of a run that ended with rc: 1 also when what it printed could not all be
 * written (a full disk, a closed pipe): output cut short never exits 0. */
static int
finish(int rc)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "snnc: error: cannot write to standard output: %s\n", strerror(errno));
        return 1;
    }
    return rc;
}

/* Every file this run reads and writes, checked before anything is written (driver/files.h);
 * false after reporting an output that would overwrite an input or another output. */
static bool
check_files(const Options *o, const Module *m, const char *snn_weights_path)
{
    FileList *l = files_new();
    files_input(l, o->path, o->is_nir ? "the NIR graph" : "the model");
    for (int i = 1; i < m->nfiles; i++) /* files[0] is the model */
        files_input(l, m->files[i], "a file the model includes");
    if (o->weights)
        files_input(l, o->weights, "--weights");
    else if (m->weights_path && !o->is_nir) /* an import's weights come with the graph */
        files_input(l, m->weights_path, "the model's weights file");
    for (int a = 0; a < o->ninput_args; a++) {
        const char *eq = strchr(o->input_args[a], '=');
        files_input(l, eq ? eq + 1 : o->input_args[a], "--input");
    }
    if (o->data && !strncmp(o->data, "fashion-mnist", 13)) {
        const char *dir = o->data[13] == ':' && o->data[14] ? o->data + 14 : NULL;
        char img[4200], lbl[4200], err[1200];
        if (!rt_fmnist_find(dir, 0, img, lbl, sizeof img, err, sizeof err)) {
            files_input(l, img, "the Fashion-MNIST images");
            files_input(l, lbl, "the Fashion-MNIST labels");
        }
    }
    const char *ov = getenv("SNN_KERNEL_OVERRIDE");
    if (ov && *ov) files_input(l, ov, "SNN_KERNEL_OVERRIDE");
    if (o->out && !o->explain) files_output(l, o->out, "-o");
    if (snn_weights_path) files_output(l, snn_weights_path, "the weights written beside -o");
    if (o->output) files_output(l, o->output, "--output");
    char dump[4200];
    for (int i = 0; passes_tree_path(&o->passes, i, dump, sizeof dump); i++)
        files_output(l, dump, "a --print-ir-tree-dir dump");
    bool ok = files_check(l);
    files_free(l);
    return ok;
}

int
main(int argc, char **argv)
{
    Options o = {0};
    /* a write past `ulimit -f` fails with EFBIG, reported like any write error, instead of the
     * signal ending the process with a file half written */
    signal(SIGXFSZ, SIG_IGN);
    parse_options(argc, argv, &o);
    NirImport import = {0};
    char *nir_text_path = NULL, *nir_weights_path = NULL;
    Module *m = o.is_nir ? load_nir(&o, &import, &nir_text_path, &nir_weights_path)
                         : fe_load(o.path, o.model);
    if (m && !check_files(&o, m, nir_weights_path)) {
        module_free(m);
        m = NULL;
    }
    if (m && (is_emit(&o, "snn") || is_emit(&o, "nir"))) {
        int rc = is_emit(&o, "snn") ? emit_snn(&o, nir_weights_path) : emit_nir(m, &o);
        module_free(m);
        diag_set_origin(NULL, NULL, NULL, NULL);
        nir_import_free(&import);
        free(nir_text_path);
        free(nir_weights_path);
        diag_reset();
        return finish(rc);
    }
    if (m && o.accumulate >= 0) m->accumulate = (Accumulate)o.accumulate;
    if (m && o.outputs && !keep_outputs(m, o.outputs, o.path)) {
        module_free(m);
        m = NULL;
    }
    if (!m || (o.events_auto && !calibrate_events(m, &o)) || !passes_run(m, &o.passes) ||
        (o.precision_mode && !apply_precision(m, &o))) {
        module_free(m);
        diag_set_origin(NULL, NULL, NULL, NULL);
        nir_import_free(&import);
        free(nir_text_path);
        free(nir_weights_path);
        diag_reset();
        return 1;
    }
    /* a mark the chosen backend does not do says so (those a statement gave; passes choose for
     * the target) */
    if (o.backend && (strcmp(o.backend, "cpu") == 0 || strcmp(o.backend, "cuda") == 0) && !o.quiet)
        marks_unhonoured(m, strcmp(o.backend, "cuda") == 0 ? MARK_TARGET_GPU : MARK_TARGET_CPU,
                         true);
    int rc = 0;
    if (o.explain) {
        bool is_gpu = o.backend && strcmp(o.backend, "cuda") == 0;
        char err[256];
        Program *prog = compile(m, &(CompileOptions){is_gpu ? KTARGET_GPU : KTARGET_CPU,
                                                     STAGE_LOWERED}, err, sizeof err);
        KProgram *kp = prog ? program_take_kir(prog) : NULL;
        if (kp) explain_print(stdout, kp, o.batch);
        rc = kp ? 0 : 1;
        kir_free(kp);
    } else if (o.emit && strcmp(o.emit, "weights") == 0) {
        rc = bind_weights(m, &o) ? write_weights(m, o.out) : 1;
    } else if (is_emit(&o, "ptx") || is_emit(&o, "cubin")) {
        rc = emit_cuda_image(m, &o);
    } else if (o.emit && strcmp(o.emit, "obj") != 0) {
        /* -o: the text is made in memory, then written by the one writer */
        char *text = NULL;
        size_t tlen = 0;
        FILE *f = o.out ? open_memstream(&text, &tlen) : stdout;
        if (!f) die("out of memory");
        if (strcmp(o.emit, "kernel") == 0 || strcmp(o.emit, "llvm") == 0) {
            bool is_gpu = o.backend && strcmp(o.backend, "cuda") == 0;
            if (is_gpu && strcmp(o.emit, "llvm") == 0)
                usage_error("--emit=llvm prints the CPU backend's code, not --device=cuda's "
                            "(see --emit=cuda)");
            char err[256];
            Program *prog = compile(m, &(CompileOptions){is_gpu ? KTARGET_GPU : KTARGET_CPU,
                                                         STAGE_LOWERED}, err, sizeof err);
            KProgram *kp = prog ? program_take_kir(prog) : NULL;
            if (!kp)
                rc = 1;
            else if (strcmp(o.emit, "kernel") == 0)
                kir_print(f, kp);
            else
                rc = emit_llvm(f, kp, o.opt_level > 0);
            kir_free(kp);
        } else if (strcmp(o.emit, "cuda") == 0) {
            rc = emit_cuda(f, m);
        } else {
            ir_print(f, m);
        }
        if (f != stdout && fclose(f) != 0) die("out of memory");
        char err[1200];
        if (f != stdout && rc == 0 && rt_write_file(o.out, text, tlen, err, sizeof err) != 0) {
            diag_reader_error(o.out, err);
            rc = 1;
        }
        free(text);
    } else if (o.out) {
        rc = build_binary(m, &o);
    }
    if (rc == 0 && o.run) {
        if (!bind_weights(m, &o))
            rc = 1;
        else
            rc = run(m, &o);
    }
    module_free(m);
    diag_set_origin(NULL, NULL, NULL, NULL);
    nir_import_free(&import);
    free(nir_text_path);
    free(nir_weights_path);
    diag_reset();
    return finish(rc);
}
