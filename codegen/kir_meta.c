/* kir_meta.c: the description of a program that a model.so carries (kir_describe), in the text
 * format runtime/model_parts.c reads (its opening comment gives the records). Kept next to the
 * kernel IR, not in a code generator, because every device's model.so carries the same one. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kir.h"
#include "runtime/kernel_abi.h"

typedef struct Text {
    char *s;
    size_t len, cap;
} Text;

static void
put(Text *t, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) die("kir_describe: formatting failed");
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        t->cap = (t->cap + (size_t)n + 1) * 2;
        t->s = xrealloc(t->s, t->cap);
    }
}

static void
put_dims(Text *t, int rank, const int64_t *dims)
{
    put(t, " %d", rank);
    for (int d = 0; d < rank; d++)
        put(t, " %lld", (long long)dims[d]);
}

char *
kir_describe_buffers(const KProgram *p, const char *prefix)
{
    Text t = {malloc(4096), 0, 4096};
    if (!t.s) die("out of memory");
    t.s[0] = 0;
    char buf[32];
    for (int i = 0; i < p->nstats; i++)
        put(&t, "%slayer %s %d\n", prefix, kir_value_name(p, p->stats[i].value, buf, sizeof buf),
            p->stats[i].buf);
    static const char *const kinds[] = {"input", "output", "weight", "temp"};
    for (int i = 0; i < p->nbufs; i++) {
        const KBuf *b = &p->bufs[i];
        put(&t, "%sbuf %s %s %s %lld %lld %d %d %lld", prefix, b->name, kinds[b->kind],
            ktype_name(b->type), (long long)b->size.per_batch, (long long)b->size.fixed, b->io,
            b->nperm, (long long)b->split);
        for (int d = 0; d < b->nperm; d++)
            put(&t, " %d", b->perm[d]);
        put(&t, " %d %d",
            b->is_exact           ? 3
            : b->is_accumulator   ? 2
            : b->is_written_first ? 0
                                  : 1,
            b->slot);
        if (b->span > 1) put(&t, " %d", b->span); /* only where it covers more than its slot */
        put(&t, "\n");
    }
    return t.s;
}

char *
kir_describe_train(const KProgram *p, const KTrain *tr)
{
    const Module *m = p->m;
    Text t = {malloc(4096), 0, 4096};
    if (!t.s) die("out of memory");
    t.s[0] = 0;
    char *bufs = kir_describe_buffers(p, "train_");
    put(&t, "%s", bufs);
    free(bufs);
    for (int k = 0; k < m->noutputs; k++)
        put(&t, "train_out_grad %d %d\n", k, tr->out_grad[k]);
    for (int w = 0; w < m->nweights; w++)
        put(&t, "train_weight_grad %d %d\n", w, tr->weight_grad[w]);
    for (int k = 0; tr->has_input_grads && k < m->ninputs; k++)
        put(&t, "train_input_grad %d %d\n", k, tr->input_grad[k]);
    for (ValueId v = 0; v < m->nnodes; v++) {
        if (tr->bn_mean[v] < 0) continue;
        const Node *n = &m->nodes[v];
        int64_t C = n->type.rank > 0 ? n->type.dims[0] : 1;
        put(&t, "train_bn %d %d %d %d %lld %lld\n", tr->bn_mean[v], tr->bn_var[v],
            n->first_weight + 2, n->first_weight + 3, (long long)C,
            (long long)(C ? type_numel(&n->type) / C : 0));
    }
    return t.s;
}

char *
kir_describe(const KProgram *p)
{
    return kir_describe_with(p, "cpu", "");
}

char *
kir_describe_with(const KProgram *p, const char *devices, const char *records)
{
    const Module *m = p->m;
    Text t = {malloc(4096), 0, 4096};
    if (!t.s) die("out of memory");
    char buf[32];
    int nstatic = 0, nstep = 0;
    for (int k = 0; k < p->nkernels; k++)
        p->kernels[k].is_step ? nstep++ : nstatic++;
    put(&t, "snnc-model %d\nname %s\ntimesteps %d\ndevices %s\nkernels %d %d\n", SNNK_ABI_VERSION,
        m->name, p->timesteps, devices, nstatic, nstep);
    for (int i = 0; i < m->ninputs; i++) {
        const Node *n = &m->nodes[m->inputs[i]];
        put(&t, "input %s %d", kir_value_name(p, m->inputs[i], buf, sizeof buf),
            n->is_per_step_input ? 1 : 0);
        put_dims(&t, n->type.rank, n->type.dims);
        put(&t, "\n");
    }
    for (int i = 0; i < m->noutputs; i++) {
        const Node *n = &m->nodes[m->outputs[i]];
        put(&t, "output %s %d", kir_value_name(p, m->outputs[i], buf, sizeof buf),
            n->type.has_time ? 1 : 0);
        put_dims(&t, n->type.rank, n->type.dims);
        put(&t, "\n");
    }
    for (int i = 0; i < m->nweights; i++) {
        put(&t, "weight %s", m->weights[i].name);
        put_dims(&t, m->weights[i].rank, m->weights[i].dims);
        put(&t, "\n");
    }
    char *bufs = kir_describe_buffers(p, "");
    put(&t, "%s", bufs);
    free(bufs);
    put(&t, "%s", records);
    put(&t, "end\n");
    return t.s;
}
