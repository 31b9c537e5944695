/* explain.c: snnc --explain, the kernel IR's schedule read back for performance tuners: per kernel
 * the graph nodes it computes, how many iterations its parallel loop has and the buffers it reads
 * and writes; per buffer its size and layout; the arena, the weights and the launches of one
 * inference, all at one batch size. It only reads the program; sizes and alignments are the
 * runtimes' own (runtime/session.c, runtime/cuda_exec.c), and it must stay in step with them. */
#include "driver/explain.h"

#include "codegen/cuda/cuda_gen.h"
#ifdef SNN_HAVE_LLVM
#include "codegen/llvm/cg_llvm.h"
#endif

#include "runtime/layout.h"
#include "runtime/cuda_abi.h"

#include <stdbool.h>
#include <string.h>

/* how each runtime aligns the temporaries in its arena: runtime/session.c's ARENA_ALIGN (model.so
 * on the CPU), runtime/cuda_exec.c's DEVICE_ALIGN (the device arena) */
enum { CPU_ARENA_ALIGN = 64, GPU_ARENA_ALIGN = 256 };

typedef struct Explain {
    FILE *f;
    const KProgram *p;
    int64_t batch;
    bool is_gpu;
    Arena scratch;      /* the strings below */
    unsigned char *use; /* use[k * nbufs + b]: USE_READ | USE_WRITE of buffer b by kernel k */
    const char **par;   /* per kernel: "parallel N", "serial", ... */
    const char **nodes; /* per kernel: "fc1 (dense), ..." */
    int64_t *trip;      /* per kernel: the parallel loop's iterations, or -1 */
} Explain;


static int64_t
buf_elems(const Explain *x, int b)
{
    return ksize_eval(x->p->bufs[b].size, x->batch);
}

static int64_t
buf_bytes(const Explain *x, int b)
{
    return kbytes(x->p->bufs[b].type, buf_elems(x, b)); /* as the runtimes (rt_buf_bytes) */
}

/* a temporary every run clears first: neither stored before loaded nor a running total */
static bool
is_zeroed(const KBuf *kb)
{
    return kb->kind == KB_TEMP && !kb->is_written_first && !kb->is_accumulator;
}

static const char *
node_name(Explain *x, ValueId v)
{
    char buf[32];
    return arena_strdup(&x->scratch, kir_value_name(x->p, v, buf, sizeof buf));
}

/* s, then ", " and t (s NULL: t alone) */
static const char *
join(Explain *x, const char *s, const char *t)
{
    return s ? arena_printf(&x->scratch, "%s, %s", s, t) : t;
}

/* "1 input", "2 inputs" */
static const char *
count_of(Explain *x, int64_t n, const char *one, const char *many)
{
    return arena_printf(&x->scratch, "%lld %s", (long long)n, n == 1 ? one : many);
}

/* "N bytes", and from a KiB up the same in a larger unit: "N bytes (1.5 KiB)" */
static const char *
bytes_of(Explain *x, int64_t n)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
    if (n < 1024) return arena_printf(&x->scratch, "%lld bytes", (long long)n);
    double v = (double)n / 1024;
    int u = 0;
    for (; v >= 1024 && u < 3; u++)
        v /= 1024;
    return arena_printf(&x->scratch, "%lld bytes (%.1f %s)", (long long)n, v, units[u]);
}

/* ---- what each kernel touches ---- */

static void
mark_reads(const KExpr *e, unsigned char *use)
{
    if (!e) return;
    if (e->kind == KX_LOAD) use[e->buf] |= USE_READ;
    mark_reads(e->a, use);
    mark_reads(e->b, use);
    mark_reads(e->c, use);
}

static void
mark_stmts(KStmt *const *ss, int n, unsigned char *use)
{
    for (int i = 0; i < n; i++) {
        const KStmt *s = ss[i];
        mark_reads(s->lo, use);
        mark_reads(s->hi, use);
        mark_reads(s->index, use);
        mark_reads(s->a, use);
        switch (s->kind) {
        case KS_STORE:
        case KS_VSTORE: use[s->buf] |= USE_WRITE; break;
        case KS_VLOAD:
        case KS_VFMA:
        case KS_PREFETCH:
            use[s->buf] |= USE_READ;
            break;
        case KS_COUNT: use[s->buf] |= USE_READ | USE_WRITE; break;
        default: break;
        }
        mark_stmts(s->body, s->nbody, use);
        mark_stmts(s->els, s->nels, use);
    }
}

void
explain_kernel_use(const Kernel *k, unsigned char *use)
{
    mark_stmts(k->body, k->nbody, use);
}

/* ---- the parallel loop ---- */

/* A bound as integer arithmetic over constants and B: the forms the CUDA runtime evaluates from a
 * cuda_kernel record (codegen/cuda/cuda_gen.c's rpn); false for anything else. */
static bool
eval_bound(const KExpr *e, int64_t batch, int64_t *out)
{
    int64_t a, b;
    if (!e || e->type != KT_I64) return false;
    switch (e->kind) {
    case KX_CONST:
        *out = (int64_t)e->num;
        return e->num >= 0;
    case KX_BATCH: *out = batch; return true;
    case KX_CAST:
        if (e->a->type == KT_BOOL && e->a->kind == KX_BIN && e->a->op == KB_GE) {
            if (!eval_bound(e->a->a, batch, &a) || !eval_bound(e->a->b, batch, &b)) return false;
            *out = a >= b;
            return true;
        }
        return e->a->type == KT_I64 && eval_bound(e->a, batch, out);
    case KX_BIN:
        if (!eval_bound(e->a, batch, &a) || !eval_bound(e->b, batch, &b)) return false;
        switch ((KBin)e->op) {
        case KB_ADD: *out = a + b; return true;
        case KB_SUB: *out = a - b; return true;
        case KB_MUL: *out = a * b; return true;
        case KB_DIV: *out = b ? a / b : 0; return b != 0;
        case KB_REM: *out = b ? a % b : 0; return b != 0;
        default: return false;
        }
    default: return false;
    }
}

/* a bound the CPU backend computes before its loop: no loads, locals or draws (llvm_gen.c) */
static bool
is_pure_bound(const KExpr *e)
{
    if (!e) return true;
    if (e->kind == KX_LOAD || e->kind == KX_VAR || e->kind == KX_UNIFORM) return false;
    return is_pure_bound(e->a) && is_pure_bound(e->b) && is_pure_bound(e->c);
}

/* How the kernel spreads: a body that is one parallel loop is split over the CPU's threads or
 * walked grid-stride by the GPU's threads; anything else runs on one thread. Its iterations at
 * the batch go to *trip (-1 where they are not known before the run or it is serial). GPU blocks
 * are ceil(iterations / SNN_CUDA_BLOCK), what the runtime launches up to its cap of resident
 * blocks (runtime/cuda_exec.c); the threads stride over the rest. */
static const char *
kernel_parallelism(Explain *x, const Kernel *k, int64_t *trip)
{
    *trip = -1;
    const KStmt *s = k->nbody == 1 ? k->body[0] : NULL;
    if (!s || s->kind != KS_FOR || !s->is_parallel) return "serial";
    int64_t lo, hi;
    if (eval_bound(s->lo, x->batch, &lo) && eval_bound(s->hi, x->batch, &hi)) {
        *trip = hi > lo ? hi - lo : 0;
        if (!x->is_gpu) {
            int lanes = 0;
#ifdef SNN_HAVE_LLVM
            lanes = cg_llvm_simd_lanes(k);
#endif
            return lanes ? arena_printf(&x->scratch, "parallel %lld, %d lanes", (long long)*trip,
                                        lanes)
                         : arena_printf(&x->scratch, "parallel %lld", (long long)*trip);
        }
        if (*trip == 0) /* a layer's tiles or their twin (lower_layers.c, "GPU") */
            return "not launched at this batch";
        int64_t blocks = (*trip + SNN_CUDA_BLOCK - 1) / SNN_CUDA_BLOCK;
        return arena_printf(&x->scratch, "parallel %lld (%s)", (long long)*trip,
                            count_of(x, blocks, "block", "blocks"));
    }
    /* the GPU launches a kernel whose bounds it cannot compute on one thread */
    if (!x->is_gpu && is_pure_bound(s->lo) && is_pure_bound(s->hi))
        return "parallel (bound at run time)";
    return "serial";
}

/* ---- printing ---- */

static int
width(const char *s, int w)
{
    int n = (int)strlen(s);
    return n > w ? n : w;
}

static const char *
kernel_runs(Explain *x, const Kernel *k)
{
    return k->is_step ? arena_printf(&x->scratch, "step x%d", x->p->timesteps) : "once";
}

static void
print_kernels(Explain *x)
{
    const KProgram *p = x->p;
    int nstep = 0;
    for (int k = 0; k < p->nkernels; k++)
        nstep += p->kernels[k].is_step;
    fprintf(x->f, "\nkernels %d: %d once, %d per step", p->nkernels, p->nkernels - nstep, nstep);
    if (nstep) fprintf(x->f, " (a step kernel runs at each t in 0..%d)", p->timesteps);
    fputc('\n', x->f);
    int wi = 0, wn = 0, wr = 0, wp = 0;
    for (int k = 0; k < p->nkernels; k++) {
        wi = width(arena_printf(&x->scratch, "k%d", k), wi);
        wn = width(p->kernels[k].name, wn);
        wr = width(kernel_runs(x, &p->kernels[k]), wr);
        wp = width(x->par[k], wp);
    }
    for (int k = 0; k < p->nkernels; k++) {
        const Kernel *kn = &p->kernels[k];
        if (kn->is_step && (k == 0 || !p->kernels[k - 1].is_step)) {
            int end = k;
            while (end + 1 < p->nkernels && p->kernels[end + 1].is_step)
                end++;
            if (end > k)
                fprintf(x->f, "  step loop: k%d..k%d in turn at each t in 0..%d", k, end,
                        p->timesteps);
            else
                fprintf(x->f, "  step loop: k%d at each t in 0..%d", k, p->timesteps);
            /* kir_by_sample: one parallel loop over samples, each through every step; on the
             * GPU one launch, a block per sample (cuda_steps_fused) */
            if (!x->is_gpu && kir_by_sample(p, k, end + 1))
                fputs(", sample by sample: each thread's samples through every step", x->f);
            if (x->is_gpu && cuda_steps_fused(p, k, end + 1))
                fputs(", one launch: a block takes each sample through every step, its threads "
                      "meeting at __syncthreads", x->f);
            fputc('\n', x->f);
        }
        fprintf(x->f, "  %-*s  %-*s  %-*s  %-*s  nodes %s\n", wi,
                arena_printf(&x->scratch, "k%d", k), wn, kn->name, wr, kernel_runs(x, kn), wp,
                x->par[k], x->nodes[k]);
        int pad = wi + 4;
        fprintf(x->f, "%*swhat    %s\n", pad, "", kn->what ? kn->what : "");
        fprintf(x->f, "%*sgroup   %s\n", pad, "", kgroup_name(kn->group));
        const char *reads = NULL, *writes = NULL;
        for (int b = 0; b < p->nbufs; b++) {
            unsigned char u = x->use[(size_t)k * (size_t)p->nbufs + (size_t)b];
            if (u & USE_READ) reads = join(x, reads, p->bufs[b].name);
            if (u & USE_WRITE) writes = join(x, writes, p->bufs[b].name);
        }
        fprintf(x->f, "%*sreads   %s\n", pad, "", reads ? reads : "-");
        fprintf(x->f, "%*swrites  %s\n", pad, "", writes ? writes : "-");
    }
}

/* the layout notes of buffer b: how weights are packed, how temporaries start a run */
static const char *
buf_notes(Explain *x, int b)
{
    const KProgram *p = x->p;
    const KBuf *kb = &p->bufs[b];
    const char *notes = NULL;
    if (kb->kind == KB_WEIGHT && kb->nperm) {
        const Weight *w = &p->m->weights[kb->io];
        const char *perm = "transposed(", *dims = "[";
        for (int d = 0; d < kb->nperm; d++)
            perm = arena_printf(&x->scratch, "%s%s%d", perm, d ? "," : "", kb->perm[d]);
        for (int d = 0; d < w->rank; d++)
            dims = arena_printf(&x->scratch, "%s%s%lld", dims, d ? "," : "", (long long)w->dims[d]);
        notes = arena_printf(&x->scratch, "%s) of %s]", perm, dims);
        if (kb->split)
            notes = arena_printf(&x->scratch, "%s, first dim in tiles of %lld", notes,
                                 (long long)kb->split);
    }
    for (int s = 0; s < p->nstats; s++)
        if (p->stats[s].buf == b)
            notes = join(
                x, notes,
                arena_printf(&x->scratch, "spike counts of %s", node_name(x, p->stats[s].value)));
    if (kb->is_exact)
        notes = join(x, notes,
                     arena_printf(&x->scratch, "every value exact in %s (narrow-weights)",
                                  ktype_name(kb->type)));
    if (kb->is_written_first) notes = join(x, notes, "written-first");
    if (kb->is_accumulator) notes = join(x, notes, "accumulates");
    if (is_zeroed(kb)) notes = join(x, notes, "zeroed each run");
    if (kb->kind == KB_TEMP && kb->slot > 0)
        notes = join(x, notes,
                     kb->span > 1 ? arena_printf(&x->scratch, "slots %d-%d", kb->slot,
                                                 kb->slot + kb->span - 1)
                                  : arena_printf(&x->scratch, "slot %d", kb->slot));
    return notes ? notes : "-";
}

static void
print_buffers(Explain *x)
{
    static const char *const kinds[] = {"input", "output", "weight", "temp"};
    const KProgram *p = x->p;
    int count[4] = {0};
    for (int b = 0; b < p->nbufs; b++)
        count[p->bufs[b].kind]++;
    fprintf(x->f, "\nbuffers %d: %d input, %d output, %d weight, %d temp (sizes at B = %lld)\n",
            p->nbufs, count[KB_INPUT], count[KB_OUTPUT], count[KB_WEIGHT], count[KB_TEMP],
            (long long)x->batch);
    const char **notes = arena_alloc(&x->scratch, (size_t)(p->nbufs + 1) * sizeof *notes);
    const char **writers = arena_alloc(&x->scratch, (size_t)(p->nbufs + 1) * sizeof *writers);
    const char **readers = arena_alloc(&x->scratch, (size_t)(p->nbufs + 1) * sizeof *readers);
    int wn = width("name", 0), we = width("elements", 0), wb = width("bytes", 0);
    int wo = width("notes", 0), ww = width("written by", 0);
    for (int b = 0; b < p->nbufs; b++) {
        notes[b] = buf_notes(x, b);
        for (int k = 0; k < p->nkernels; k++) {
            unsigned char u = x->use[(size_t)k * (size_t)p->nbufs + (size_t)b];
            if (u & USE_WRITE) writers[b] = join(x, writers[b], p->kernels[k].name);
            if (u & USE_READ) readers[b] = join(x, readers[b], p->kernels[k].name);
        }
        if (!writers[b]) writers[b] = "-";
        if (!readers[b]) readers[b] = "-";
        wn = width(p->bufs[b].name, wn);
        we = width(arena_printf(&x->scratch, "%lld", (long long)buf_elems(x, b)), we);
        wb = width(arena_printf(&x->scratch, "%lld", (long long)buf_bytes(x, b)), wb);
        wo = width(notes[b], wo);
        ww = width(writers[b], ww);
    }
    fprintf(x->f, "  %-*s  %-6s  %-4s  %*s  %*s  %-*s  %-*s  %s\n", wn, "name", "kind", "type", we,
            "elements", wb, "bytes", wo, "notes", ww, "written by", "read by");
    for (int b = 0; b < p->nbufs; b++) {
        const KBuf *kb = &p->bufs[b];
        fprintf(x->f, "  %-*s  %-6s  %-4s  %*lld  %*lld  %-*s  %-*s  %s\n", wn, kb->name,
                kinds[kb->kind], ktype_name(kb->type), we, (long long)buf_elems(x, b), wb,
                (long long)buf_bytes(x, b), wo, notes[b], ww, writers[b], readers[b]);
    }
}

static void
print_totals(Explain *x)
{
    const KProgram *p = x->p;
    int64_t align = x->is_gpu ? GPU_ARENA_ALIGN : CPU_ARENA_ALIGN;
    int64_t arena = 0, zeroed = 0, weights = 0, in = 0, out = 0, device = 0;
    int ntemp = 0, nzeroed = 0, nweights = 0, nin = 0, nout = 0;
    for (int b = 0; b < p->nbufs; b++) {
        const KBuf *kb = &p->bufs[b];
        int64_t n = buf_bytes(x, b);
        device += (n + align - 1) / align * align;
        switch (kb->kind) {
        case KB_TEMP:
            arena += (n + align - 1) / align * align;
            ntemp++;
            if (is_zeroed(kb) && n) {
                zeroed += n;
                nzeroed++;
            }
            break;
        case KB_WEIGHT:
            weights += n;
            nweights++;
            break;
        case KB_INPUT:
            in += n;
            nin++;
            break;
        case KB_OUTPUT:
            out += n;
            nout++;
            break;
        }
    }
    int64_t dyn = (SNN_CUDA_DYN_IO + nin + nout) * (int64_t)sizeof(int64_t);
    device += (dyn + align - 1) / align * align;
    /* the memory plan (KBuf.slot): the arena as the binders lay it out */
    size_t *bytes = arena_alloc(&x->scratch, ((size_t)p->nbufs + 1) * sizeof *bytes);
    size_t *off = arena_alloc(&x->scratch, ((size_t)p->nbufs + 1) * sizeof *off);
    int *slot = arena_alloc(&x->scratch, ((size_t)p->nbufs + 1) * sizeof *slot);
    int *span = arena_alloc(&x->scratch, ((size_t)p->nbufs + 1) * sizeof *span);
    int nslots = 0, nshared = 0;
    for (int b = 0; b < p->nbufs; b++) {
        bytes[b] = p->bufs[b].kind == KB_TEMP ? (size_t)buf_bytes(x, b) : SIZE_MAX;
        slot[b] = p->bufs[b].slot;
        span[b] = p->bufs[b].span;
        int end = slot[b] + (span[b] > 1 ? span[b] - 1 : 0);
        if (end > nslots) nslots = end;
        nshared += p->bufs[b].kind == KB_TEMP && slot[b] > 0;
    }
    int64_t planned = (int64_t)rt_arena_layout(p->nbufs, bytes, slot, span, (size_t)align, off);
    device -= arena - planned;
    fprintf(x->f, "\ntotals at B = %lld\n", (long long)x->batch);
    if (nslots > 0)
        fprintf(x->f, "  arena     %s: %s, %d of them sharing %s (memory plan; %s without), "
                      "each region aligned to %lld bytes\n",
                bytes_of(x, planned), count_of(x, ntemp, "temporary", "temporaries"), nshared,
                count_of(x, nslots, "region", "regions"), bytes_of(x, arena), (long long)align);
    else
        fprintf(x->f, "  arena     %s: %s, each aligned to %lld bytes\n", bytes_of(x, arena),
                count_of(x, ntemp, "temporary", "temporaries"), (long long)align);
    fprintf(x->f, "  zeroed    %s before each run: %s\n", bytes_of(x, zeroed),
            count_of(x, nzeroed, "temporary", "temporaries"));
    fprintf(x->f, "  weights   %s: %s\n", bytes_of(x, weights),
            count_of(x, nweights, "weight", "weights"));
    fprintf(x->f, "  inputs    %s: %s\n", bytes_of(x, in), count_of(x, nin, "input", "inputs"));
    fprintf(x->f, "  outputs   %s: %s\n", bytes_of(x, out), count_of(x, nout, "output", "outputs"));
    if (x->is_gpu) {
        /* runtime/cuda_exec.c's one allocation: every buffer (weights, temporaries, input and
         * output staging) and dyn (the sample base and one address per input and output) */
        fprintf(x->f, "  device    %s: every buffer and dyn, each aligned to %lld bytes\n",
                bytes_of(x, device), (long long)align);
    }
    /* launches: every kernel once, step kernels T times (a GPU step loop fused into one kernel:
     * once); the GPU skips a grid of no work */
    int64_t once = 0, step = 0;
    for (int k = 0; k < p->nkernels; k++) {
        if (x->is_gpu && p->kernels[k].is_step && (k == 0 || !p->kernels[k - 1].is_step)) {
            int end = k;
            while (end < p->nkernels && p->kernels[end].is_step)
                end++;
            if (cuda_steps_fused(p, k, end)) {
                once += x->batch > 0;
                k = end - 1;
                continue;
            }
        }
        if (x->is_gpu && x->trip[k] == 0) continue;
        if (p->kernels[k].is_step)
            step++;
        else
            once++;
    }
    int64_t launches = once + step * p->timesteps;
    if (!x->is_gpu) {
        fprintf(x->f, "  launches  %lld kernel calls per inference: %lld once + %lld step x %d\n",
                (long long)launches, (long long)once, (long long)step, p->timesteps);
        return;
    }
    fprintf(x->f,
            "  launches  1 graph launch per inference: %s (%lld once + %lld step x %d), %s\n",
            count_of(x, launches, "kernel", "kernels"), (long long)once, (long long)step,
            p->timesteps, count_of(x, nzeroed, "memset", "memsets"));
}

void
explain_print(FILE *f, const KProgram *p, int64_t batch)
{
    Explain x = {.f = f, .p = p, .batch = batch, .is_gpu = p->target == KTARGET_GPU};
    size_t nk = (size_t)p->nkernels, nb = (size_t)p->nbufs;
    x.use = arena_alloc(&x.scratch, nk * nb + 1);
    x.par = arena_alloc(&x.scratch, (nk + 1) * sizeof *x.par);
    x.nodes = arena_alloc(&x.scratch, (nk + 1) * sizeof *x.nodes);
    x.trip = arena_alloc(&x.scratch, (nk + 1) * sizeof *x.trip);
    for (int k = 0; k < p->nkernels; k++) {
        const Kernel *kn = &p->kernels[k];
        explain_kernel_use(kn, x.use + (size_t)k * nb);
        x.par[k] = kernel_parallelism(&x, kn, &x.trip[k]);
        const char *nodes = NULL;
        for (int i = 0; i < kn->nnodes; i++) {
            ValueId v = kn->nodes[i];
            nodes = join(&x, nodes,
                         arena_printf(&x.scratch, "%s (%s)", node_name(&x, v),
                                      node_op_name(p->m, &p->m->nodes[v])));
        }
        x.nodes[k] = nodes ? nodes : "-";
    }
    fprintf(f, "# snnc --explain: the schedule, its buffers and its cost at one batch size\n");
    fprintf(f, "model %s  target %s  timesteps %d  batch %lld\n",
            p->m && p->m->name ? p->m->name : "?", x.is_gpu ? "gpu" : "cpu", p->timesteps,
            (long long)batch);
    print_kernels(&x);
    print_buffers(&x);
    print_totals(&x);
    arena_free(&x.scratch);
}
