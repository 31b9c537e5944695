/* record.c: --record, --record-file and --plot of a run (record.h). The recorded values are
 * outputs of the module (`rec_s1 = sequence(s1)`, `rec_s1__v = sequence(state(s1, "v"))`), added
 * before the passes: every backend computes them as it computes the model's own outputs, so the
 * interpreter, the kernel-IR evaluator, the CPU and the GPU record the same bits. This file
 * neither computes nor draws: the run fills the outputs, driver/plot.c draws. */
#include "driver/record.h"

#include "driver/plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* layers a --record name may be: named, not a readout or an input, with a value per step */
static bool
is_recordable(const Module *m, const Node *n)
{
    return n->name && n->type.has_time && n->op != OP_INPUT && n->op != OP_STATE && !n->is_output;
}

/* "its layers: fc1, s1 (LIF), ..." on stderr, closing the message */
static void
list_layers(const Module *m)
{
    fputs(" its layers:", stderr);
    const char *sep = " ";
    for (int v = 0; v < m->nnodes; v++) {
        const Node *n = &m->nodes[v];
        if (!is_recordable(m, n)) continue;
        fprintf(stderr, "%s%s", sep, n->name);
        if (n->op == OP_NEURON) {
            const NeuronDef *nd = m->neurons[n->neuron];
            fprintf(stderr, " (%s", nd->name);
            for (int k = 0; k < nd->nstates; k++)
                fprintf(stderr, "%s%s.%s", k ? ", " : "; states ", n->name, nd->states[k].name);
            fputc(')', stderr);
        }
        sep = ", ";
    }
    fputc('\n', stderr);
}

/* the threshold a neuron fires at on state k: its `fire STATE >= P` (or >, or P <= STATE) with P
 * a parameter or a number; NAN where the fire statement is anything else */
static double
fire_threshold(const Module *m, const Node *n, int k, const char **pname)
{
    const NeuronDef *nd = m->neurons[n->neuron];
    *pname = NULL;
    for (int i = 0; i < nd->nstmts; i++) {
        const NStmt *st = &nd->stmts[i];
        if (st->kind != NS_FIRE || !st->e || st->e->kind != NX_BIN) continue;
        const NExpr *e = st->e, *s = e->args[0], *t = e->args[1];
        if (e->op == NB_LE || e->op == NB_LT) {
            s = e->args[1];
            t = e->args[0];
        } else if (e->op != NB_GE && e->op != NB_GT) {
            return NAN;
        }
        if (s->kind != NX_STATE || s->idx != k) return NAN;
        if (t->kind == NX_NUM) return t->num;
        if (t->kind == NX_PARAM && n->params) {
            *pname = nd->params[t->idx].name;
            int w = node_param_weight(m, n, t->idx); /* learned: its weight's value */
            return w >= 0 && m->weights[w].data ? m->weights[w].data[0] : n->params[t->idx];
        }
        return NAN;
    }
    return NAN;
}

/* one name of the list (len bytes at p) into it; false after reporting */
static bool
plan_item(const Module *m, const Options *o, const char *p, size_t len, RecordItem *it)
{
    char *name = xmalloc(len + 1);
    memcpy(name, p, len);
    name[len] = '\0';
    char *dot = strchr(name, '.');
    char *layer = xstrdup(name);
    if (dot) layer[dot - name] = '\0';
    const char *var = dot ? dot + 1 : NULL;
    ValueId v = *layer ? module_find_value(m, layer) : -1;
    const Node *n = v >= 0 ? &m->nodes[v] : NULL;
    bool ok = false;
    if (!len) {
        fprintf(stderr, "%s: error: --record: an empty name in '%s'\n", o->path, o->record);
    } else if (!n || !is_recordable(m, n)) {
        fprintf(stderr, "%s: error: --record: '%s' is not a layer of model '%s'%s", o->path, layer,
                m->name ? m->name : "?",
                !n                  ? ";"
                : n->is_output      ? " but an output (--output writes it);"
                : !n->type.has_time ? " with a value per step;"
                                    : ";");
        list_layers(m);
    } else if (var && n->op != OP_NEURON) {
        fprintf(stderr,
                "%s: error: --record: '%s' (%s) is not a neuron layer: it has no state "
                "'%s'\n",
                o->path, layer, node_op_name(m, n), var);
    } else {
        ok = true;
    }
    int k = -1;
    if (ok && var) {
        const NeuronDef *nd = m->neurons[n->neuron];
        for (int i = 0; i < nd->nstates && k < 0; i++)
            if (strcmp(nd->states[i].name, var) == 0) k = i;
        if (k < 0) {
            fprintf(stderr,
                    "%s: error: --record: neuron layer '%s' (%s) has no state '%s' (its "
                    "states:",
                    o->path, layer, nd->name, var);
            for (int i = 0; i < nd->nstates; i++)
                fprintf(stderr, "%s %s.%s", i ? "," : "", layer, nd->states[i].name);
            fputs(nd->nstates ? ")\n" : " none)\n", stderr);
            ok = false;
        }
    }
    if (!ok) {
        free(name);
        free(layer);
        return false;
    }
    /* the IR's name: an identifier no value of the model has */
    size_t ilen = strlen(name) + 8;
    char *ir_name = xmalloc(ilen);
    snprintf(ir_name, ilen, var ? "rec_%s__%s" : "rec_%s", layer, var ? var : "");
    if (module_find_value(m, ir_name) >= 0) {
        fprintf(stderr,
                "%s: error: --record: the model has a value named '%s', the name the "
                "recording of '%s' takes\n",
                o->path, ir_name, name);
        free(name);
        free(layer);
        free(ir_name);
        return false;
    }
    *it = (RecordItem){.name = name,
                       .ir_name = ir_name,
                       .layer = layer,
                       .kind = xstrdup(node_op_name(m, n)),
                       .value = v,
                       .is_state = var != NULL,
                       .threshold = NAN,
                       .rank = n->type.rank,
                       .numel = type_numel(&n->type)};
    memcpy(it->dims, n->type.dims, sizeof it->dims);
    it->is_spikes = !var && (n->type.dtype == DT_SPIKE || n->type.dtype == DT_I8);
    it->dtype = !it->is_spikes ? RT_F32 : n->type.dtype == DT_I8 ? RT_I8 : RT_U8;
    if (var) it->threshold = fire_threshold(m, n, k, &it->threshold_name);
    return true;
}

bool
record_plan(const Module *m, const Options *o, Recording *r)
{
    memset(r, 0, sizeof *r);
    if (!o->record) return true;
    int cap = 1;
    for (const char *p = o->record; *p; p++)
        cap += *p == ',';
    r->items = xcalloc((size_t)cap, sizeof *r->items);
    for (const char *p = o->record;;) {
        size_t len = strcspn(p, ",");
        if (!plan_item(m, o, p, len, &r->items[r->nitems])) return false;
        RecordItem *it = &r->items[r->nitems++];
        for (int i = 0; i < r->nitems - 1; i++)
            if (strcmp(r->items[i].name, it->name) == 0) {
                fprintf(stderr, "%s: error: --record: '%s' is named twice\n", o->path, it->name);
                return false;
            }
        if (!p[len]) break;
        p += len + 1;
    }
    return true;
}

/* DIR/raster_NAME.svg and the like: what --plot writes for item it (NULL past the last) */
static char *
plot_file(const Options *o, const RecordItem *it, int k)
{
    static const char *const kinds[] = {"raster", "rates", "trace"};
    /* spikes: a raster and rates; values and states: a trace */
    int first = it->is_spikes ? 0 : 2, last = it->is_spikes ? 1 : 2;
    return first + k <= last ? plot_path(o->plot, kinds[first + k], it->name) : NULL;
}

void
record_files(const Options *o, const Recording *r, FileList *l)
{
    if (o->record_file) files_output(l, o->record_file, "--record-file");
    if (!o->plot) return;
    for (int i = 0; i < r->nitems; i++) {
        char *path;
        for (int k = 0; (path = plot_file(o, &r->items[i], k)); k++) {
            files_output(l, path, "a --plot figure");
            free(path);
        }
    }
    if (o->train) {
        char *path = plot_path(o->plot, "curves", NULL);
        files_output(l, path, "a --plot figure");
        free(path);
    }
}

void
record_add_outputs(Module *m, Recording *r)
{
    r->first_output = m->noutputs;
    for (int i = 0; i < r->nitems; i++) {
        RecordItem *it = &r->items[i];
        ValueId v = it->value;
        if (it->is_state) {
            const char *var = strchr(it->name, '.') + 1;
            v = module_add_node(m, OP_STATE, m->nodes[it->value].loc);
            Node *s = &m->nodes[v];
            s->nargs = 1;
            s->args[0] = it->value;
            s->attrs[op_attr_index(OP_STATE, "var")].s = arena_strdup(&m->arena, var);
            s->type = m->nodes[it->value].type;
            s->type.dtype = DT_F32;
        }
        module_add_output(m, v, it->ir_name);
    }
}

/* --record-file: every item, [n, T, ...], in one .npz */
static bool
write_file(const Module *m, const Options *o, const Recording *r, float *const *outs, int64_t n)
{
    RtTensor *ts = xcalloc((size_t)r->nitems, sizeof *ts);
    for (int i = 0; i < r->nitems; i++) {
        const RecordItem *it = &r->items[i];
        RtTensor *t = &ts[i];
        t->name = it->name;
        t->dtype = it->dtype;
        t->dims[t->rank++] = n;
        t->dims[t->rank++] = m->timesteps;
        for (int d = 0; d < it->rank; d++)
            t->dims[t->rank++] = it->dims[d];
        t->numel = n * m->timesteps * it->numel;
        t->data = outs[r->first_output + i];
    }
    char err[512];
    int rc = rt_npz_write(o->record_file, ts, r->nitems, err, sizeof err);
    free(ts);
    if (rc) diag_reader_error(o->record_file, err);
    return rc == 0;
}

/* --plot: each item's figures (plot_file's names) */
static bool
draw(const Module *m, const Options *o, const Recording *r, float *const *outs, int64_t n)
{
    int64_t k = o->plot_sample;
    if (k >= n) {
        fprintf(stderr, "snnc: error: --plot-sample=%lld: the run has %lld sample%s\n",
                (long long)k, (long long)n, n == 1 ? "" : "s");
        return false;
    }
    if (!plot_dir_make(o->plot)) return false;
    bool ok = true;
    for (int i = 0; i < r->nitems && ok; i++) {
        const RecordItem *it = &r->items[i];
        const float *all = outs[r->first_output + i];
        int64_t per = (int64_t)m->timesteps * it->numel; /* one sample */
        PlotSeries s = {.layer = it->layer,
                        .kind = it->kind,
                        .name = it->name,
                        .model = m->name,
                        .data = all + k * per,
                        .timesteps = m->timesteps,
                        .numel = it->numel,
                        .sample = k,
                        .threshold = it->threshold,
                        .threshold_name = it->threshold_name};
        char *path = plot_file(o, it, 0);
        if (it->is_spikes) {
            ok = plot_raster(path, &s);
            free(path);
            path = plot_file(o, it, 1);
            s.data = all;
            s.nsamples = n;
            ok = ok && plot_rates(path, &s);
        } else {
            ok = plot_trace(path, &s);
        }
        free(path);
    }
    return ok;
}

bool
record_finish(const Module *m, const Options *o, const Recording *r, float *const *outs, int64_t n)
{
    for (int i = 0; i < r->nitems; i++) {
        int j = r->first_output + i;
        const char *name = j < m->noutputs ? m->nodes[m->outputs[j]].name : NULL;
        if (!name || strcmp(name, r->items[i].ir_name))
            die("--record: output %d is not the recording of '%s'", r->first_output + i,
                r->items[i].name);
    }
    if (o->record_file && !write_file(m, o, r, outs, n)) return false;
    return !o->plot || draw(m, o, r, outs, n);
}

void
record_free(Recording *r)
{
    for (int i = 0; r->items && i < r->nitems; i++) {
        free(r->items[i].name);
        free(r->items[i].ir_name);
        free(r->items[i].layer);
        free(r->items[i].kind);
    }
    free(r->items);
    memset(r, 0, sizeof *r);
}
