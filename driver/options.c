/* options.c: snnc's command line. The options are the rows of driver/options.def, from which
 * getopt's tables and --help come; the --emit kinds and the backends' names are tables too. Every
 * check of the options as a whole is here, before anything is read. */
#include "driver/options.h"

#include "codegen/cuda/nvrtc.h"
#include "runtime/cuda_driver.h"
#include "runtime/train.h"
#ifdef SNN_HAVE_LLVM
#include "codegen/llvm/cg_llvm.h"
#endif

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --emit kinds: one row each, read by the option's check, the -o rule and --help */
typedef struct EmitKind {
    const char *name;
    bool needs_cpu;   /* made by the CPU backend (LLVM) */
    bool needs_out;   /* writes a file: needs -o FILE */
    const char *help; /* --help, after "--emit=NAME" */
} EmitKind;

static const EmitKind emits[] = {
    {"ir", false, false, "print the graph IR (to stdout, or to the file given by -o)"},
    {"kernel", false, false, "print the kernel IR the code generators start from"},
    {"llvm", true, false, "print the LLVM IR of the CPU backend (-O0: before optimisation)"},
    {"obj", true, true, "write the CPU backend's object file (needs -o)"},
    {"cuda", false, false, "print the CUDA C of the CUDA backend (its records first, as comments)"},
    {"ptx", false, false, "compile that with NVRTC and write PTX"},
    {"cubin", false, true, "compile that with NVRTC and write a cubin (needs -o)"},
    {"snn", false, false,
     "a NIR graph as an equivalent .snn model (to -o FILE.snn, its weights beside it as "
     "FILE.safetensors; or the text to stdout)"},
    {"nir", false, false,
     "the model as a NIR graph (needs -o FILE.nir; --dt: the step its time constants are written "
     "for, default 1e-4)"},
    {"weights", false, true,
     "write the weights the model runs with (--weights, the model's file, or its seeded "
     "initialisation) as f32 safetensors (needs -o)"},
};

static const EmitKind *
find_emit(const char *name)
{
    for (size_t i = 0; i < sizeof emits / sizeof emits[0]; i++)
        if (strcmp(emits[i].name, name) == 0) return &emits[i];
    return NULL;
}

/* the backends' names and what the checks need of them (driver/backends.def) */
static const struct {
    const char *name;
    bool is_f32;
} backends[] = {
#define BACKEND(name, counts, is_f32, compiles) {#name, is_f32},
#include "driver/backends.def"
#undef BACKEND
};

static bool
has_backend(const char *name)
{
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (strcmp(backends[i].name, name) == 0) return true;
    return false;
}

static bool
backend_is_f32(const char *name)
{
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (strcmp(backends[i].name, name) == 0) return backends[i].is_f32;
    return false;
}

/* ---- the options table (driver/options.def) ---- */

enum {
    O_FIRST = 256, /* past every short option's letter */
#define OPT(id, name, arg, letter, shown, help) O_##id,
#define HELP(build, shown, help)
#define SECTION(text)
#define EMITS()
#include "driver/options.def"
#undef OPT
#undef HELP
#undef SECTION
#undef EMITS
};

enum { HB_ANY, HB_LLVM, HB_NO_LLVM };
enum { ROW_OPT, ROW_HELP, ROW_SECTION, ROW_EMITS };

typedef struct OptRow {
    int kind; /* ROW_* */
    int id;   /* O_*: what the parser's switch sees for the long and the short spelling */
    const char *name;
    int has_arg;
    int letter;
    int build; /* HB_*: the builds whose --help shows the row */
    const char *shown, *help;
} OptRow;

static const OptRow rows[] = {
#define OPT(id, name, arg, letter, shown, help)                                                     \
    {ROW_OPT, O_##id, name, arg, letter, HB_ANY, shown, help},
#define HELP(build, shown, help) {ROW_HELP, 0, NULL, 0, 0, build, shown, help},
#define SECTION(text) {ROW_SECTION, 0, NULL, 0, 0, HB_ANY, NULL, text},
#define EMITS() {ROW_EMITS, 0, NULL, 0, 0, HB_ANY, NULL, NULL},
#include "driver/options.def"
#undef OPT
#undef HELP
#undef SECTION
#undef EMITS
};
enum { NROWS = sizeof rows / sizeof rows[0], HELP_COLUMN = 26, HELP_WIDTH = 100 };

/* text from column `at`, wrapped at HELP_WIDTH, its further lines starting at column `indent` */
static void
help_wrap(FILE *f, const char *text, int at, int indent)
{
    int col = at;
    bool is_line_start = true;
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, " ");
        if (!is_line_start && col + 1 + (int)len > HELP_WIDTH) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
            is_line_start = true;
        }
        if (!is_line_start) {
            fputc(' ', f);
            col++;
        }
        fwrite(p, 1, len, f);
        col += (int)len;
        is_line_start = false;
        p += len;
        while (*p == ' ')
            p++;
    }
    fputc('\n', f);
}

/* "  SHOWN" padded to HELP_COLUMN, then the help wrapped (a longer SHOWN: the help starts two
 * columns after it, or on the next line when SHOWN fills most of one) */
static void
help_row(FILE *f, const char *shown, const char *help)
{
    int len = 2 + (int)strlen(shown);
    if (len > HELP_WIDTH - 40) {
        fputs("  ", f);
        help_wrap(f, shown, 2, 2);
        fprintf(f, "%*s", HELP_COLUMN, "");
        help_wrap(f, help, HELP_COLUMN, HELP_COLUMN);
        return;
    }
    fprintf(f, "  %s", shown);
    int at = len < HELP_COLUMN - 1 ? HELP_COLUMN : len + 2;
    fprintf(f, "%*s", at - len, "");
    help_wrap(f, help, at, HELP_COLUMN);
}

static void
usage(FILE *f)
{
    fputs("usage: snnc [options] MODEL.snn|MODEL.snnir|MODEL.nir\n\n"
          "Compile a spiking neural network and run it or print its IR.\n", f);
#ifdef SNN_HAVE_LLVM
    int build = HB_LLVM;
#else
    int build = HB_NO_LLVM;
#endif
    for (int r = 0; r < NROWS; r++) {
        const OptRow *row = &rows[r];
        if (row->build != HB_ANY && row->build != build) continue;
        switch (row->kind) {
        case ROW_SECTION:
            fputc('\n', f);
            help_wrap(f, row->help, 0, 0);
            break;
        case ROW_EMITS:
            for (size_t i = 0; i < sizeof emits / sizeof emits[0]; i++) {
                char shown[64];
                snprintf(shown, sizeof shown, "--emit=%s", emits[i].name);
                help_row(f, shown, emits[i].help);
            }
            break;
        default:
            if (row->shown) help_row(f, row->shown, row->help);
            break;
        }
    }
}

_Noreturn void
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


static double
parse_real(const char *opt, const char *s, double lo)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo)
        usage_error("%s expects a number of at least %g, got '%s'", opt, lo, s);
    return v;
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

bool
is_emit(const Options *o, const char *what)
{
    return o->emit && strcmp(o->emit, what) == 0;
}

bool
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
    /* auto: a GPU when one can run this (asked only for runs that name no backend). The device
     * first: NVRTC (28 MB resident once loaded) only where there is one to compile for */
    if (o->run && !o->backend && !is_f64_asked && !o->emit) {
        char err[512];
        int major, minor;
        if (rt_cuda_device_arch(0, &major, &minor, NULL, 0, err, sizeof err) &&
            cuda_nvrtc_load(err, sizeof err))
            o->backend = "cuda";
    }
}

void
parse_options(int argc, char **argv, Options *o)
{
    /* getopt's tables, from the rows */
    struct option longopts[NROWS + 1];
    char shorts[2 * NROWS + 2] = ":";
    int nlong = 0;
    size_t ns = 1;
    for (int r = 0; r < NROWS; r++) {
        const OptRow *row = &rows[r];
        if (row->kind != ROW_OPT) continue;
        if (row->name[0])
            longopts[nlong++] =
                (struct option){row->name, row->has_arg ? required_argument : no_argument, 0, row->id};
        if (row->letter) {
            shorts[ns++] = (char)row->letter;
            if (row->has_arg) shorts[ns++] = ':';
        }
    }
    longopts[nlong] = (struct option){0, 0, 0, 0};
    shorts[ns] = 0;
    o->batch = 64;
    o->opt_level = 2;
    o->accumulate = -1;
    o->calibrate = 64;
    o->narrow_weights = o->narrow_activations = true;
    o->limit = -1;
    o->seed = -1;
    o->epochs = 1;
    o->optimizer = RT_OPT_ADAM;
    o->loss = RT_LOSS_MSE;
    o->loss_on = 1;
    o->loss_off = 0;
    o->test_limit = -1;
    o->backend = NULL; /* chosen after the options: see below */
    bool is_f64_asked = false, backend_given = false, is_step = false;
    o->gamma = 0.1;
    /* the NIR options given, a bit each in the order of nir_option_names */
    static const char *const nir_option_names[] = {"--dt", "--impulses", "--integrator", "--reset",
                                                   "--reset-step", "--timesteps", "--spike-inputs",
                                                   "--framework"};
    unsigned nir_given = 0;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = ncpu < 1 ? 1 : ncpu > 1024 ? 1024 : (int)ncpu;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, shorts, longopts, NULL)) != -1) {
        for (int r = 0; r < NROWS && c > 0 && c < O_FIRST; r++) /* a short option: its row's id */
            if (rows[r].kind == ROW_OPT && rows[r].letter == c) c = rows[r].id;
        switch (c) {
        case O_EMIT:
        {
            const EmitKind *e = find_emit(optarg);
            if (!e || (e->needs_cpu && !has_backend("cpu"))) {
                char names[256];
                size_t k = 0;
                for (size_t i = 0; i < sizeof emits / sizeof emits[0] && k < sizeof names; i++)
                    if (!emits[i].needs_cpu || has_backend("cpu"))
                        k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", k ? ", " : "",
                                              emits[i].name);
                usage_error("--emit=%s is not available (this build emits: %s)", optarg, names);
            }
            o->emit = optarg;
        }
            break;
        case O_OPT_LEVEL:
            if (!optarg[0] || optarg[1] || optarg[0] < '0' || optarg[0] > '3')
                usage_error("-O expects a level from 0 to 3, got '-O%s'", optarg);
            o->opt_level = optarg[0] - '0';
            break;
        case O_JIT: o->backend = "cpu"; backend_given = true; break;
        case O_OUT: o->out = optarg; break;
        case O_RUN: o->run = true; break;
        case O_BACKEND:
            if (!has_backend(optarg))
                usage_error("backend '%s' is not available in this build (available: interp%s, cuda)",
                            optarg, has_backend("cpu") ? ", cpu" : "");
            o->backend = optarg;
            backend_given = true;
            break;
        case O_PRECISION:
            /* the last --precision wins, whole */
            o->precision_mode = NULL;
            o->has_precision = false;
            o->narrow = WSTORE_F32;
            is_f64_asked = false;
            if (strcmp(optarg, "f64") == 0) {
                o->precision = INTERP_F64;
                is_f64_asked = true;
            } else if (strcmp(optarg, "f32") == 0 || strcmp(optarg, "fp32") == 0) {
                o->precision = INTERP_F32;
                o->has_precision = true;
            } else if (strcmp(optarg, "fp16") == 0 || strcmp(optarg, "bf16") == 0 ||
                       strcmp(optarg, "mixed") == 0) {
                o->precision = INTERP_F32;
                o->has_precision = true;
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
        case O_TRAIN: o->train = true; break;
        case O_EPOCHS:
            o->epochs = parse_int("--epochs", optarg, 1, 1 << 20);
            o->has_epochs = true;
            break;
        case O_LOSS:
            if (strcmp(optarg, "mse") == 0) o->loss = RT_LOSS_MSE;
            else if (strcmp(optarg, "ce") == 0 || strcmp(optarg, "ce_count") == 0)
                o->loss = RT_LOSS_CE;
            else if (strcmp(optarg, "ce_rate") == 0) o->loss = RT_LOSS_CE_RATE;
            else if (strcmp(optarg, "mse_count") == 0) o->loss = RT_LOSS_MSE_COUNT;
            else if (strcmp(optarg, "mse_membrane") == 0) o->loss = RT_LOSS_MSE_MEMBRANE;
            else usage_error("--loss expects mse, ce, ce_count, ce_rate, mse_count or "
                             "mse_membrane, got '%s'", optarg);
            o->has_loss = true;
            break;
        case O_OPTIMIZER:
            if (strcmp(optarg, "sgd") == 0) o->optimizer = RT_OPT_SGD;
            else if (strcmp(optarg, "adam") == 0) o->optimizer = RT_OPT_ADAM;
            else if (strcmp(optarg, "adamw") == 0) o->optimizer = RT_OPT_ADAMW;
            else usage_error("--optimizer expects sgd, adam or adamw, got '%s'", optarg);
            o->has_optimizer = true;
            break;
        case O_LR: o->lr = parse_real("--lr", optarg, 0); o->has_lr = true; break;
        case O_MOMENTUM:
            o->momentum = parse_real("--momentum", optarg, 0);
            o->has_momentum = true;
            break;
        case O_WEIGHT_DECAY:
            o->weight_decay = parse_real("--weight-decay", optarg, 0);
            o->has_weight_decay = true;
            break;
        case O_NESTEROV: o->nesterov = true; break;
        case O_SCHEDULE:
            o->cosine = strcmp(optarg, "cosine") == 0;
            is_step = strcmp(optarg, "step") == 0;
            if (!o->cosine && !is_step && strcmp(optarg, "constant") != 0)
                usage_error("--schedule expects constant, cosine or step, got '%s'", optarg);
            o->has_schedule = true;
            o->step_schedule = is_step;
            break;
        case O_STEP_SIZE: o->step_size = parse_int("--step-size", optarg, 1, INT64_MAX); break;
        case O_GAMMA:
            o->gamma = parse_real("--gamma", optarg, 0);
            o->has_gamma = true;
            break;
        case O_LOSS_TARGETS: {
            char *end;
            errno = 0;
            o->loss_on = strtod(optarg, &end);
            bool ok = !errno && end != optarg && *end == ',' && isfinite(o->loss_on);
            const char *second = ok ? end + 1 : "";
            o->loss_off = ok ? strtod(second, &end) : 0;
            if (!ok || errno || end == second || *end || !isfinite(o->loss_off))
                usage_error("--loss-targets expects ON,OFF (two numbers), got '%s'", optarg);
            o->has_loss_targets = true;
            break;
        }
        case O_CLIP_GRAD_NORM:
            o->clip_norm = parse_real("--clip-grad-norm", optarg, 0);
            if (!(o->clip_norm > 0))
                usage_error("--clip-grad-norm expects a norm above 0, got '%s'", optarg);
            break;
        case O_LABELS: o->labels = optarg; break;
        case O_NO_SHUFFLE: o->no_shuffle = true; break;
        case O_INIT: o->init = true; break;
        case O_GRADS: o->grads = optarg; break;
        case O_CHECKPOINT: o->checkpoint = optarg; break;
        case O_LOSS_OUTPUT: o->loss_output = optarg; break;
        case O_RESUME: o->resume = optarg; break;
        case O_TEST_LIMIT:
            o->test_limit = parse_int("--test-limit", optarg, 0, INT64_MAX / 2);
            break;
        case O_INPUT:
            if (o->ninput_args == MAX_INPUT_ARGS)
                usage_error("too many --input options");
            o->input_args[o->ninput_args++] = optarg;
            break;
        case O_THREADS: o->threads = (int)parse_int("--threads", optarg, 1, 1024); break;
        case O_BATCH:
            o->batch = (int)parse_int("--batch", optarg, 1, 1 << 20);
            o->has_batch = true;
            break;
        case O_LIMIT: o->limit = parse_int("--limit", optarg, 1, INT64_MAX / 2); break;
        case O_SEED: o->seed = parse_int("--seed", optarg, 0, (int64_t)1 << 53); break;
        case O_OUTPUT: o->output = optarg; break;
        case O_RECORD:
            if (!optarg[0]) usage_error("--record expects layer names, comma-separated");
            o->record = optarg;
            break;
        case O_RECORD_FILE: o->record_file = optarg; break;
        case O_PLOT:
            if (!optarg[0]) usage_error("--plot expects a directory");
            o->plot = optarg;
            break;
        case O_PLOT_SAMPLE:
            o->plot_sample = parse_int("--plot-sample", optarg, 0, INT64_MAX / 2);
            o->has_plot_sample = true;
            break;
        case O_PROFILE: o->profile = true; break;
        case O_REPORT:
            if (strcmp(optarg, "json") != 0)
                usage_error("--report expects json, got '%s'", optarg);
            o->report_json = true;
            break;
        case O_WEIGHTS: o->weights = optarg; break;
        case O_MODEL: o->model = optarg; break;
        case O_HELP_OPS: ops_print_help(stdout); exit(0);
        case O_HELP: usage(stdout); exit(0);
        case O_VERSION: print_version(); exit(0);
        case O_QUIET: o->quiet = true; break;
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
        case O_HELP_SURROGATES:
            fputs("surrogate NAME(args) in a neuron: how --train differentiates its fire (forward: "
                  "the step); every one also takes detach_reset = 0|1\n", stdout);
            surrogates_help(stdout);
            exit(0);
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
        o->backend = has_backend("cpu") && !is_f64_asked ? "cpu" : "interp";
    if (is_f64_asked && backend_is_f32(o->backend))
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
    if (o->train) {
        if (o->run || (o->emit && strcmp(o->emit, "kernel") != 0 && strcmp(o->emit, "ir") != 0) ||
            (o->explain && o->emit))
            usage_error("--train trains and writes weights: not with --run or --emit (but "
                        "--emit=ir, which prints the train-step module, its forward and backward "
                        "graph, --emit=kernel, the training step's kernels, or --explain, its "
                        "buffers and memory)");
        if (!o->out && !o->emit && !o->explain)
            usage_error("--train needs -o FILE.safetensors for the trained weights");
        size_t olen = o->out ? strlen(o->out) : 0;
        o->train_library = !o->emit && olen > 3 && strcmp(o->out + olen - 3, ".so") == 0;
        if (o->train_library) {
            /* a library with the training step: no data, no training now; its inference
             * program keeps the weights in f32, which trained weights need */
            if (!o->passes.disable) {
                o->passes.disable = "narrow-weights";
            } else if (!strstr(o->passes.disable, "narrow-weights")) {
                size_t n = strlen(o->passes.disable) + sizeof ",narrow-weights";
                char *list = xmalloc(n);
                snprintf(list, n, "%s,narrow-weights", o->passes.disable);
                o->passes.disable = list; /* lives as long as the options */
            }
            if (o->data || o->ninput_args || o->labels || o->resume || o->checkpoint || o->grads)
                usage_error("--train -o %s builds a library that carries the training step "
                            "(runtime/snn.h snn_trainer_*): it takes no data, checkpoint or "
                            "gradients file", o->out);
            if ((o->backend && strcmp(o->backend, "cuda") == 0) ||
                (o->device && strncmp(o->device, "cuda", 4) == 0))
                usage_error("--train -o %s: a library's trainer runs on the CPU for now (its "
                            "inference session may use CUDA); --device=cuda trains with "
                            "--data or --input/--labels", o->out);
        } else if (o->emit || o->explain) {
            /* --emit=kernel, --explain: the program only; no data, no training */
        } else if (!o->data && !o->ninput_args)
            usage_error("--train needs data: --data=fashion-mnist, or --input=FILE.npy with "
                        "--labels=FILE.npy");
        if (o->ninput_args && !o->labels)
            usage_error("--train --input needs --labels=FILE.npy (the class of each sample)");
        if (o->is_nir)
            usage_error("--train takes a .snn model for now (--emit=snn translates a NIR graph)");
        if (o->resume && (o->init || o->weights))
            usage_error("--resume takes the weights from the checkpoint: not with --init or "
                        "--weights");
        /* --device=cuda[:N] (or --backend=cuda): the compiled step on a CUDA device */
        const char *d = o->device;
        bool on_cuda = (backend_given && strcmp(o->backend, "cuda") == 0) ||
                       (d && (strcmp(d, "cuda") == 0 || strncmp(d, "cuda:", 5) == 0));
        /* (parse_device has refused other devices and backends that do not run on them) */
        if (!on_cuda && backend_given && strcmp(o->backend, "interp") != 0 &&
            strcmp(o->backend, "kir") != 0 && strcmp(o->backend, "cpu") != 0)
            usage_error("--train runs on the CPU (--backend=cpu, compiled), a CUDA device "
                        "(--device=cuda) or the reference interpreter (--backend=interp)");
        /* (parse_device set cuda_ordinal from --device=cuda:N) */
        if (on_cuda)
            o->backend = "cuda";
        else if (!backend_given || is_f64_asked)
            o->backend = has_backend("cpu") && !is_f64_asked ? "cpu" : "interp";
        o->precision = is_f64_asked ? INTERP_F64 : INTERP_F32;
    } else {
        const char *given = o->has_lr              ? "--lr"
                            : o->has_momentum      ? "--momentum"
                            : o->has_weight_decay  ? "--weight-decay"
                            : o->labels            ? "--labels"
                            : o->no_shuffle        ? "--no-shuffle"
                            : o->test_limit >= 0   ? "--test-limit"
                            : o->nesterov          ? "--nesterov"
                            : o->cosine || is_step ? "--schedule"
                            : o->step_size         ? "--step-size"
                            : o->has_gamma         ? "--gamma"
                            : o->clip_norm > 0     ? "--clip-grad-norm"
                            : o->has_loss_targets  ? "--loss-targets"
                            : o->init              ? "--init"
                            : o->grads             ? "--grads"
                            : o->checkpoint        ? "--checkpoint"
                            : o->resume            ? "--resume"
                            : o->loss_output       ? "--loss-output"
                                                   : NULL;
        if (given)
            usage_error("%s is a training setting: give --train", given);
    }
    if (!o->emit && !o->run && !o->out && !o->explain)
        usage_error("nothing to do: give --run, --train, --emit=ir, --explain or -o MODEL.so");
    if (o->out && !o->emit && (!o->train || o->train_library) && !has_backend("cpu"))
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
    if (!o->run && o->output)
        usage_error("--output needs --run");
    if (o->profile && (!o->run || strcmp(o->backend, "cpu") != 0))
        usage_error("--profile times the CPU backend's kernels in a run: give --run with "
                    "--backend=cpu (the default where this build has it)");
    if (o->record && o->train)
        usage_error("--record keeps values of a run (--run), or adds them as outputs of a "
                    "library (-o MODEL.so): not with --train");
    if (o->record && o->run && !o->record_file && !o->plot)
        usage_error("--record needs somewhere to put the values: --record-file=FILE.npz or "
                    "--plot=DIR");
    if ((o->record_file || (o->plot && !o->train)) && !o->run)
        usage_error("%s needs --run", o->record_file ? "--record-file" : "--plot (without --train)");
    if (o->record_file && !o->record)
        usage_error("--record-file writes what --record keeps: give --record=NAMES");
    if (o->plot && !o->train && !o->record)
        usage_error("--plot draws the recordings of a run (--run --record=NAMES) or the curves "
                    "of training (--train)");
    if (o->plot && o->train && (o->train_library || o->emit || o->explain))
        usage_error("--plot draws training as it runs: not with --train -o MODEL.so, --emit or "
                    "--explain");
    if (o->has_plot_sample && (!o->plot || !o->record))
        usage_error("--plot-sample picks the sample --plot draws of a run's recordings: give "
                    "--plot and --record");
    if (!o->run && !o->train && o->limit >= 0)
        usage_error("--limit needs --run or --train");
    if (!o->run && !o->train && !o->precision_mode && !o->events_auto &&
        (o->data || o->ninput_args))
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

