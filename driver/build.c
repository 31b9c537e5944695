/* build.c: what snnc writes: --emit=llvm|cuda|ptx|cubin|nir|snn|weights, the CUDA build of
 * model.so's images, and model.so (-o) or its object (--emit=obj). */
#include "driver/build.h"

#include "codegen/cuda/cuda_gen.h"
#include "codegen/cuda/nvrtc.h"
#include "driver/compile.h"
#include "driver/load.h"
#ifdef SNN_HAVE_LLVM
#include "codegen/llvm/cg_llvm.h"
#include "driver/link.h"
#endif
#include "runtime/tensor_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
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
int
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
bool
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
int
emit_cuda_image(Module *m, const Options *o)
{
    bool is_cubin = is_emit(o, "cubin");
    const char *arch = o->narchs ? o->archs[0] : "sm_90";
    CudaBuild b;
    int rc = 1;
    if (!bind_weights_for_code(m, o)) return 1;
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


/* --emit=obj -o FILE, or -o MODEL.so */
int
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
    /* --train -o MODEL.so: the training step too, lowered from a copy of the model as written
     * (every value in a buffer of its own, the weights in f32: what `snnc --train` runs) */
    Module *tm = NULL, *gm = NULL;
    KProgram *tp = NULL;
    KTrain tr;
    LinkTrain lt = {0};
    if (is_ok && o->train_library) {
        tm = module_clone(m);
        module_clear_marks(tm);
        tm->schedule = SCHEDULE_LAYER;
        tm->memory = MEMORY_SEPARATE;
        /* the trainer binds a weight as stored to the array it updates: large dense layers read
         * it there, with no packed copy to remake after each step (as snnc --train) */
        tm->is_weights_in_place = true;
        tm->is_train_dense = !passes_include(&o->passes, "events");
        char terr[512];
        gm = ir_grad(tm, true); /* the train-step module, the inputs' gradients too */
        tp = kir_lower_train(gm, &tr, terr, sizeof terr);
        if (!tp) {
            diag_file_error(o->out, "cannot build its training step: %s", terr);
            is_ok = false;
        } else {
            lt = (LinkTrain){tp, tr.nforward, tr.ninput_first, kir_describe_train(tp, &tr)};
        }
    }
    if (is_ok)
        is_ok = o->emit ? link_emit_object(kp, o->cpu, &cuda, o->out, embed)
                        : link_shared_library(kp, o->cpu, &cuda, tp ? &lt : NULL, o->out, embed);
    free((char *)lt.records);
    kir_free(tp);
    module_free(gm);
    module_free(tm);
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


/* --emit=nir -o FILE: the model (weights bound) as a NIR graph, and what the reader should know */
int
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
int
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

/* --emit=ir|kernel|llvm|cuda: the text made in memory, then written whole to -o (or stdout) */
int
emit_text(Module *m, const Options *o)
{
    int rc = 0;
    bool is_code = strcmp(o->emit, "kernel") == 0 || strcmp(o->emit, "llvm") == 0 ||
                   strcmp(o->emit, "cuda") == 0;
    if (is_code && !bind_weights_for_code(m, o)) return 1;
    /* -o: the text is made in memory, then written by the one writer */
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = o->out ? open_memstream(&text, &tlen) : stdout;
    if (!f) die("out of memory");
    if (strcmp(o->emit, "kernel") == 0 || strcmp(o->emit, "llvm") == 0) {
        bool is_gpu = o->backend && strcmp(o->backend, "cuda") == 0;
        if (is_gpu && strcmp(o->emit, "llvm") == 0)
            usage_error("--emit=llvm prints the CPU backend's code, not --device=cuda's "
                        "(see --emit=cuda)");
        char err[256];
        Program *prog = compile(m, &(CompileOptions){is_gpu ? KTARGET_GPU : KTARGET_CPU,
                                                     STAGE_LOWERED}, err, sizeof err);
        KProgram *kp = prog ? program_take_kir(prog) : NULL;
        if (!kp)
            rc = 1;
        else if (strcmp(o->emit, "kernel") == 0)
            kir_print(f, kp);
        else
            rc = emit_llvm(f, kp, o->opt_level > 0);
        kir_free(kp);
    } else if (strcmp(o->emit, "cuda") == 0) {
        rc = emit_cuda(f, m);
    } else {
        ir_print(f, m);
    }
    if (f != stdout && fclose(f) != 0) die("out of memory");
    char err[1200];
    if (f != stdout && rc == 0 && rt_write_file(o->out, text, tlen, err, sizeof err) != 0) {
        diag_reader_error(o->out, err);
        rc = 1;
    }
    free(text);
    return rc;
}
