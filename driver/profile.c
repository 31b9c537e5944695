/* profile.c: --run --profile on the CPU (profile.h). Units are kernels, except that a run of
 * consecutive step kernels (each launched once per step, interleaved) is one unit: compiled alone
 * they would each run all their steps before the next began. Every unit is a program of its own
 * (the whole program's buffers, its kernels only), run on one binding (its weights packed once),
 * with the session's kind of pool (runtime/pool.c): the timings are the ones a model.so's session
 * sees, less the calls between kernels that the whole entry point saves. */
#include "driver/profile.h"

#include "codegen/llvm/cg_llvm.h"
#include "driver/explain.h"
#include "runtime/clock.h"
#include "runtime/kernel_abi.h"
#include "runtime/pool.h"

#include <stdlib.h>

typedef struct Unit {
    int first, end; /* kernels [first, end) of the program */
    CgLlvm *code;
    double secs, flops, bytes; /* summed over the batches run */
    double flops_per_sample;   /* dense and conv multiply-adds x 2, every input counted */
} Unit;

struct Profile {
    const Module *m;
    const KProgram *p;
    RtPool *pool;
    KBinding *bd; /* made at the first batch (the largest), its inputs and outputs set per batch */
    int bound;    /* the batch it was made for */
    Unit *units;
    int nunits, threads;
    int64_t batches, samples;
    unsigned char *use; /* per unit and buffer: USE_READ | USE_WRITE */
};

/* 2 x the multiply-adds of one sample of node v, a dense or conv layer over all its inputs (the
 * dense equivalent: an event-driven kernel does only the spikes' share); 0 for other nodes */
static double
layer_flops(const Module *m, const bool *is_static, ValueId v)
{
    const Node *n = &m->nodes[v];
    if (n->op != OP_DENSE && n->op != OP_CONV2D && n->op != OP_CONV1D) return 0;
    int wi = node_stored_weight(m, n);
    if (wi < 0 || n->type.rank < 1 || n->type.dims[0] <= 0) return 0;
    double per_out = (double)m->weights[wi].numel / (double)n->type.dims[0]; /* K, or Cin/g*kh*kw */
    double steps = is_static[v] ? 1 : m->timesteps;
    return 2.0 * per_out * (double)type_numel(&n->type) * steps;
}

Profile *
profile_open(const Module *m, const KProgram *p, int threads, char *err, size_t errlen)
{
    Profile *pf = xcalloc(1, sizeof *pf);
    pf->m = m;
    pf->p = p;
    pf->threads = threads;
    pf->units = xcalloc((size_t)p->nkernels + 1, sizeof *pf->units);
    pf->use = xcalloc(((size_t)p->nkernels + 1) * ((size_t)p->nbufs + 1), 1);
    size_t nn = (size_t)m->nnodes + 1;
    ValueId *order = xcalloc(nn, sizeof *order);
    bool *is_static = xcalloc(nn, sizeof *is_static);
    ir_topo_order(m, order);
    ir_fill_static(m, order, is_static);
    bool ok = true;
    for (int k = 0; k < p->nkernels && ok;) {
        Unit *u = &pf->units[pf->nunits++];
        u->first = k;
        u->end = k + 1;
        if (p->kernels[k].is_step)
            while (u->end < p->nkernels && p->kernels[u->end].is_step)
                u->end++;
        unsigned char *use = pf->use + (size_t)(pf->nunits - 1) * (size_t)p->nbufs;
        for (int j = u->first; j < u->end; j++) {
            explain_kernel_use(&p->kernels[j], use);
            for (int i = 0; i < p->kernels[j].nnodes; i++)
                u->flops_per_sample += layer_flops(m, is_static, p->kernels[j].nodes[i]);
        }
        KProgram one = *p;
        one.kernels = p->kernels + u->first;
        one.nkernels = u->end - u->first;
        char msg[512];
        u->code = cg_llvm_compile(&one, msg, sizeof msg);
        if (!u->code) {
            snprintf(err, errlen, "--profile: compiling kernel %s alone: %s",
                     p->kernels[u->first].name, msg);
            ok = false;
        }
        k = u->end;
    }
    free(order);
    free(is_static);
    if (ok) pf->pool = rt_pool_new(threads, err, errlen);
    if (!ok || !pf->pool) {
        profile_free(pf);
        return NULL;
    }
    return pf;
}

bool
profile_run(Profile *pf, int batch, int64_t base, const float *const *in, float *const *out,
            double *counts, char *err, size_t errlen)
{
    const KProgram *p = pf->p;
    if (batch > pf->bound) {
        kir_unbind(pf->bd);
        pf->bd = kir_bind(p, batch, in, out, err, errlen);
        if (!pf->bd) return false;
        pf->bound = batch;
    }
    KBinding *bd = pf->bd;
    for (int b = 0; b < p->nbufs; b++) {
        const KBuf *kb = &p->bufs[b];
        if (kb->kind == KB_INPUT)
            bd->mem[b] = (void *)in[kb->io];
        else if (kb->kind == KB_OUTPUT)
            bd->mem[b] = out[kb->io];
    }
    /* the first batch once untimed: the arena's pages touched, the caches and the pool warm (a
     * run of one batch would time its page faults); run again from the same start, it computes
     * the same values */
    if (pf->batches == 0) {
        kir_zero_temps(p, bd, batch);
        for (int i = 0; i < pf->nunits; i++)
            ((SnnkEntryFn)(uintptr_t)cg_llvm_entry(pf->units[i].code))(bd->mem, batch, base,
                                                                       rt_pool_rt(pf->pool));
    }
    kir_zero_temps(p, bd, batch);
    for (int i = 0; i < pf->nunits; i++) {
        Unit *u = &pf->units[i];
        SnnkEntryFn entry = (SnnkEntryFn)(uintptr_t)cg_llvm_entry(u->code);
        double t0 = rt_now_seconds();
        entry(bd->mem, batch, base, rt_pool_rt(pf->pool));
        u->secs += rt_now_seconds() - t0;
        u->flops += u->flops_per_sample * batch;
        const unsigned char *use = pf->use + (size_t)i * (size_t)p->nbufs;
        for (int b = 0; b < p->nbufs; b++) {
            double bytes = (double)kbytes(p->bufs[b].type, ksize_eval(p->bufs[b].size, batch));
            u->bytes += bytes * (((use[b] & USE_READ) != 0) + ((use[b] & USE_WRITE) != 0));
        }
    }
    kir_add_spike_counts(p, batch, bd->mem, counts);
    pf->batches++;
    pf->samples += batch;
    return true;
}

static void
unit_name(const Profile *pf, const Unit *u, FILE *f, bool json)
{
    for (int k = u->first; k < u->end; k++) {
        if (json) fputc('"', f);
        fprintf(f, "%s%s", pf->p->kernels[k].name, json ? "\"" : "");
        if (k + 1 < u->end) fputs(json ? ", " : " + ", f);
    }
}

void
profile_print(const Profile *pf, FILE *f, bool json)
{
    double total = 0;
    for (int i = 0; i < pf->nunits; i++)
        total += pf->units[i].secs;
    if (json) {
        fputc('[', f);
        for (int i = 0; i < pf->nunits; i++) {
            const Unit *u = &pf->units[i];
            fprintf(f, "%s{\"kernels\": [", i ? ", " : "");
            unit_name(pf, u, f, true);
            fprintf(f, "], \"seconds\": %.6f, \"flops\": %.0f, \"bytes\": %.0f}", u->secs, u->flops,
                    u->bytes);
        }
        fputc(']', f);
        return;
    }
    fprintf(f,
            "profile: %d kernel%s timed one by one, %lld batch%s, %lld samples, %d thread%s "
            "(GFLOP/s: the dense and conv layers' work over every input, spikes or not; GB/s: "
            "the bytes of the buffers each reads and writes)\n",
            pf->p->nkernels, pf->p->nkernels == 1 ? "" : "s", (long long)pf->batches,
            pf->batches == 1 ? "" : "es", (long long)pf->samples, pf->threads,
            pf->threads == 1 ? "" : "s");
    fprintf(f, "  %10s %6s %9s %8s  %s\n", "seconds", "share", "GFLOP/s", "GB/s", "kernel");
    for (int i = 0; i < pf->nunits; i++) {
        const Unit *u = &pf->units[i];
        fprintf(f, "  %10.6f %5.1f%% ", u->secs, total > 0 ? 100 * u->secs / total : 0);
        if (u->flops > 0 && u->secs > 0)
            fprintf(f, "%9.1f ", u->flops / u->secs * 1e-9);
        else
            fprintf(f, "%9s ", "-");
        fprintf(f, "%8.1f  ", u->secs > 0 ? u->bytes / u->secs * 1e-9 : 0);
        unit_name(pf, u, f, false);
        fputc('\n', f);
    }
    fprintf(f, "  %10.6f total\n", total);
}

void
profile_free(Profile *pf)
{
    if (!pf) return;
    for (int i = 0; i < pf->nunits; i++)
        cg_llvm_free(pf->units[i].code);
    rt_pool_free(pf->pool);
    kir_unbind(pf->bd);
    free(pf->units);
    free(pf->use);
    free(pf);
}
