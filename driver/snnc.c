/* snnc: the command-line driver's main: options (driver/options.c), the model loaded (the
 * frontend, or a NIR graph: driver/load.c), --outputs, calibration and the passes, then the job:
 * --explain, --emit and model.so (driver/build.c) or --run (driver/run.c). User errors exit with
 * status 1 and a message; results go to stdout, progress to stderr. */
#include "driver/build.h"
#include "driver/calibrate.h"
#include "driver/compile.h"
#include "driver/explain.h"
#include "driver/files.h"
#include "driver/load.h"
#include "driver/options.h"
#include "driver/plot.h"
#include "driver/record.h"
#include "driver/run.h"
#include "driver/train.h"
#include "frontend/frontend.h"
#include "runtime/tensor_io.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --precision=fp16|bf16|mixed: the storage of dense and conv weights and outputs (--narrow),
 * chosen or checked on the calibration samples when --data or --input gives them
 * (driver/calibrate.c) */
static bool
apply_precision(Module *m, const Options *o, int nrecorded)
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
            .nrecorded = nrecorded,
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
check_files(const Options *o, const Module *m, const char *snn_weights_path, const Recording *rec)
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
        for (int split = 0; split <= (o->train ? 1 : 0); split++)
            if (!rt_fmnist_find(dir, split, img, lbl, sizeof img, err, sizeof err)) {
                files_input(l, img, "the Fashion-MNIST images");
                files_input(l, lbl, "the Fashion-MNIST labels");
            }
    }
    if (o->labels) files_input(l, o->labels, "--labels");
    const char *ov = getenv("SNN_KERNEL_OVERRIDE");
    if (ov && *ov) files_input(l, ov, "SNN_KERNEL_OVERRIDE");
    if (o->out && !o->explain) files_output(l, o->out, "-o");
    if (snn_weights_path) files_output(l, snn_weights_path, "the weights written beside -o");
    if (o->output) files_output(l, o->output, "--output");
    if (o->grads) files_output(l, o->grads, "--grads");
    record_files(o, rec, l);
    if (o->resume) files_input(l, o->resume, "--resume");
    /* the checkpoints this run may write: every epoch's, or, resuming from epoch-K.safetensors,
     * those after K (the run starts there; a file named otherwise: every epoch's, to be safe) */
    int64_t first_ck = 1;
    if (o->resume) {
        const char *base = strrchr(o->resume, '/');
        long long k;
        char tail[32];
        if (sscanf(base ? base + 1 : o->resume, "epoch-%lld.%31s", &k, tail) == 2 &&
            strcmp(tail, "safetensors") == 0 && k >= 0)
            first_ck = k + 1;
    }
    for (int64_t e = first_ck; o->checkpoint && e <= o->epochs; e++) {
        char *path = train_checkpoint_path(o->checkpoint, e);
        files_output(l, path, "a --checkpoint file");
        free(path);
    }
    char dump[4200];
    for (int i = 0; passes_tree_path(&o->passes, i, dump, sizeof dump); i++)
        files_output(l, dump, "a --print-ir-tree-dir dump");
    bool ok = files_check(l);
    files_free(l);
    return ok;
}

/* what main holds, freed at its end (diag's origin points into the import) */
static void
release(Module *m, Recording *rec, NirImport *import, char *nir_text_path, char *nir_weights_path)
{
    module_free(m);
    record_free(rec);
    diag_set_origin(NULL, NULL, NULL, NULL);
    nir_import_free(import);
    free(nir_text_path);
    free(nir_weights_path);
    diag_reset();
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
    Recording rec = {0};
    if (m && (!record_plan(m, &o, &rec) || !check_files(&o, m, nir_weights_path, &rec) ||
              (o.plot && !plot_dir_check(o.plot)))) {
        module_free(m);
        m = NULL;
    }
    if (m && (is_emit(&o, "snn") || is_emit(&o, "nir"))) {
        int rc = is_emit(&o, "snn") ? emit_snn(&o, nir_weights_path) : emit_nir(m, &o);
        release(m, &rec, &import, nir_text_path, nir_weights_path);
        return finish(rc);
    }
    if (m && o.accumulate >= 0) m->accumulate = (Accumulate)o.accumulate;
    if (m && o.train && !o.train_library) { /* the interpreter runs the module as written */
        int rc = o.emit || o.explain ? train_emit_kernel(m, &o) : train(m, &o);
        release(m, &rec, &import, nir_text_path, nir_weights_path);
        return finish(rc);
    }
    if (m) m->is_precision_stated = o.has_precision;
    if (m)
        m->is_for_gpu = (o.backend && strcmp(o.backend, "cuda") == 0) || is_emit(&o, "cuda") ||
                        is_emit(&o, "ptx") || is_emit(&o, "cubin");
    if (m && o.outputs && !keep_outputs(m, o.outputs, o.path)) {
        module_free(m);
        m = NULL;
    }
    /* --record: outputs of the module from here on, so every backend computes them */
    if (m) record_add_outputs(m, &rec);
    if (!m || (o.events_auto && !calibrate_events(m, &o)) || !passes_run(m, &o.passes) ||
        (o.precision_mode && !apply_precision(m, &o, rec.nitems))) {
        release(m, &rec, &import, nir_text_path, nir_weights_path);
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
        if (!bind_weights_for_code(m, &o)) {
            release(m, &rec, &import, nir_text_path, nir_weights_path);
            return 1;
        }
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
        rc = emit_text(m, &o);
    } else if (o.out) {
        rc = build_binary(m, &o);
    }
    if (rc == 0 && o.run) {
        if (!bind_weights(m, &o))
            rc = 1;
        else
            rc = run(m, &o, &rec);
    }
    release(m, &rec, &import, nir_text_path, nir_weights_path);
    return finish(rc);
}

