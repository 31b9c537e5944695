/* load.c: what a run reads: the model's inputs (Fashion-MNIST, .npy, .npz) checked against the
 * model's input shapes and element types, the weights a model runs with, and a NIR graph imported
 * into .snn text and weights. */
#include "driver/load.h"

#include "frontend/frontend.h"
#include "runtime/f16.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void
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

bool
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


/* The weights a model runs with: --weights, else an imported graph's, else the model's own. */
bool
bind_weights(Module *m, const Options *o)
{
    if (o->weights || !o->import) return weights_bind(m, o->weights);
    RtTensorSet set = {o->import->tensors, o->import->ntensors};
    return weights_bind_set(m, &set, o->path);
}

bool
bind_weights_for_code(Module *m, const Options *o)
{
    for (int v = 0; v < m->nnodes; v++)
        if (m->nodes[v].wstore_auto) return bind_weights(m, o);
    return true;
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
void
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
Module *
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

