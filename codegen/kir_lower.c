/* Graph IR -> kernel IR: the schedule (static values, recurrent regions, kernel order),
 * buffers and their aliases, the kernel groups planned from the marks (kir_groups.def), and
 * kir_lower_for, one loop over the groups calling each variant's lowering function (the
 * lowering files lower_*.c, kir_memory.c; shared state in lower.h). Rounding follows ir/interp.c's F32
 * mode exactly (layer accumulators in f64, rounded once; neuron arithmetic in f32 with
 * parameter-only subexpressions folded in double): the evaluator's results equal the
 * interpreter's bit for bit. */
#include "codegen/lower.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- analysis: static values, recurrent regions, kernel order ---- */

/* Fills lw->region and writes the kernel order (ir_schedule_order's); not batched over time (no
 * time-batch pass ran), every layer is a step kernel, one step at a time, the neuron state in
 * buffers between steps, and a value that is the same at every step keeps its one-step buffer
 * and is recomputed into it. Returns the count. */
static int
schedule_order(Lower *lw, const ValueId *topo, ValueId *out)
{
    int cnt = ir_schedule_order(lw->m, topo, lw->region, out);
    if (lw->m->schedule == SCHEDULE_STEP)
        for (int v = 0; v < lw->m->nnodes; v++)
            lw->region[v] = lw->m->nnodes; /* one region: every node */
    return cnt;
}

/* ---- buffers ---- */

/* batchnorm v of a training step on the CPU, kept in no buffer: read by neuron scans outside
 * recurrent regions only, not an output, its input a layer's value in a buffer of its own */
static bool
bn_recomputed(const Lower *lw, ValueId v)
{
    const Module *m = lw->m;
    const Node *n = &m->nodes[v];
    if (!lw->train || lw->p->target == KTARGET_GPU || n->op != OP_BATCHNORM || n->is_output ||
        lw->region[v] >= 0)
        return false;
    const Node *x = &m->nodes[n->args[0]];
    if (x->op == OP_INPUT || x->op == OP_FLATTEN || x->op == OP_SEQUENCE ||
        is_step_readout(x->op) || x->fused_into >= 0 || x->is_scan_epilogue ||
        lw->region[n->args[0]] >= 0)
        return false;
    for (ValueId u = 0; u < m->nnodes; u++)
        for (int a = 0; a < m->nodes[u].nargs; a++)
            if (m->nodes[u].args[a] == v && (m->nodes[u].op != OP_NEURON || lw->region[u] >= 0))
                return false;
    return true;
}

static void
plan_buffers(Lower *lw)
{
    const Module *m = lw->m;
    KProgram *p = lw->p;
    /* weights first: buffer index == weight index */
    for (int w = 0; w < m->nweights; w++) {
        const Node *n = &m->nodes[m->weights[w].node];
        KType t = node_stored_weight(m, n) != w ? KT_F32
                  : n->wstore == WSTORE_F16    ? KT_F16
                  : n->wstore == WSTORE_BF16   ? KT_BF16
                                               : KT_F32;
        int b =
            add_buf(lw, m->weights[w].name, t, (KSize){0, m->weights[w].numel}, KB_WEIGHT, w, -1);
        p->bufs[b].is_exact = t != KT_F32 && n->wstore_exact;
    }
    for (int k = 0; k < m->ninputs; k++) {
        ValueId v = m->inputs[k];
        const Node *n = &m->nodes[v];
        int64_t numel = type_numel(&n->type);
        VStore *s = &lw->vs[v];
        s->numel = numel;
        s->layout = n->is_per_step_input ? LY_INPUT_STEP : LY_INPUT;
        s->buf = add_buf(lw, value_name(lw, v), KT_F32,
                         (KSize){numel * (n->is_per_step_input ? lw->T : 1), 0}, KB_INPUT, k, v);
    }
    for (ValueId v = 0; v < m->nnodes; v++) {
        const Node *n = &m->nodes[v];
        VStore *s = &lw->vs[v];
        s->numel = type_numel(&n->type);
        if (n->op == OP_INPUT || n->op == OP_FLATTEN || is_step_readout(n->op) ||
            n->op == OP_SEQUENCE)
            continue; /* inputs: above; flatten: an alias (resolved in order below) */
        if (n->fused_into >= 0) {
            /* computed inside its user's kernel (ir_fusion_problem): elementwise values where
             * they are loaded, neuron scans into their pooling's buffer */
            s->layout = n->op == OP_NEURON ? LY_NONE : LY_INLINE;
            s->buf = -1;
            continue;
        }
        if (n->is_scan_epilogue && p->target == KTARGET_GPU) {
            s->layout = LY_SUMMED; /* in the scan that reads it (ir_epilogue_problem) */
            s->buf = -1;
            continue;
        }
        s->layout = lw->is_static[v] ? LY_STATIC : LY_FULL;
        if (bn_recomputed(lw, v)) {
            /* training on the CPU: a batchnorm that only neuron scans read keeps no values. Its
             * kernel computes the batch's statistics; the scan, forward and backward, recomputes
             * each value from the layer before it as that kernel would have (batchnorm_expr): a
             * buffer the size of its input, alive through most of the backward, is saved (the
             * conv net: b1 and b2, 24.5 MiB each at a batch of 64) */
            s->is_recomputed = true;
            s->buf = -1;
            continue;
        }
        int64_t per = s->numel * (lw->is_static[v] ? 1 : lw->T);
        /* spikes stored as bits (Node.layout) on the CPU; GPU threads write a neuron each */
        KType t = n->layout == SPIKES_BITS && p->target == KTARGET_CPU
                      ? (n->type.dtype == DT_I8 ? KT_BIT2 : KT_BIT)
                  : n->astore == WSTORE_F16                            ? KT_F16
                  : n->astore == WSTORE_BF16                           ? KT_BF16
                                                                       : ktype_of(n->type.dtype);
        s->buf = add_buf(lw, value_name(lw, v), t, (KSize){per, 0}, KB_TEMP, -1, v);
        if (n->op == OP_NEURON && lw->region[v] >= 0) {
            /* step kernels keep the neuron's state between steps: buffers value+1.. */
            const NeuronDef *nd = m->neurons[n->neuron];
            bool has_refractory;
            int ncarry = neuron_ncarry(nd, &has_refractory);
            const char *vn = value_name(lw, v);
            for (int k = 0; k < ncarry; k++) {
                const char *what = k < nd->nstates ? nd->states[k].name
                                   : k < nd->nstates + nd->nlocals
                                       ? nd->locals[k - nd->nstates]
                                   : k == nd->nstates + nd->nlocals ? "spike"
                                                                    : "refr";
                bool is_refr = has_refractory && k == ncarry - 1;
                int sb = add_buf(lw, arena_printf(&p->arena, "%s.%s", vn, what),
                                 is_refr ? KT_I64 : KT_F32, (KSize){s->numel, 0}, KB_TEMP, -1, -1);
                /* step 0 starts from the neuron's initial values, not a load, and every step
                 * stores every state: nothing needs zeroing before a run (lower_neuron) */
                p->bufs[sb].is_written_first = true;
            }
        }
    }
    /* a conv or dense layer fused into its batchnorm (fold-batchnorm) stores into the batchnorm's
     * buffer */
    for (ValueId v = 0; v < m->nnodes; v++)
        if ((op_is_conv(m->nodes[v].op) || m->nodes[v].op == OP_DENSE) &&
            m->nodes[v].fused_into >= 0)
            lw->vs[v] = lw->vs[m->nodes[v].fused_into];
}

/* flatten is a view of its operand (same elements, same order): resolve in topological order */
static void
resolve_aliases(Lower *lw, const ValueId *topo)
{
    const Module *m = lw->m;
    for (int k = 0; k < m->nnodes; k++) {
        ValueId v = topo[k];
        const Node *n = &m->nodes[v];
        if (n->op != OP_FLATTEN)
            continue;
        int64_t numel = lw->vs[v].numel;
        lw->vs[v] = lw->vs[n->args[0]];
        lw->vs[v].numel = numel;
    }
}

/* A conv2d whose only reader is a neuron layer fused into its pooling (directly, through a
 * batchnorm fused into the neuron, or as the batchnorm it is folded into) is stored window by
 * window (VStore.win_kh; a folded batchnorm normalises the planes, batchnorm_row): the pooled scan
 * then loads each of a window's neurons from a plane of its own, SIMD lanes over neighbouring
 * windows reading neighbouring floats, where in NCHW its lanes gathered them 2 apart across rows
 * (the conv SNN's IF_s2 at batch 1, with its batchnorm's terms hoisted: 0.046 -> 0.015 ms). The
 * conv stores a channel tile with a stride either way. CPU inference only: the training program
 * reads its forward values in NCHW, and the GPU's scans load a neuron per thread. */
static void
plan_windows(Lower *lw)
{
    const Module *m = lw->m;
    if (lw->p->target != KTARGET_CPU || lw->train) return;
    for (ValueId c = 0; c < m->nnodes; c++) {
        if (m->nodes[c].op != OP_CONV2D) continue;
        /* the value the conv stores: its own, or its batchnorm's (fold-batchnorm) */
        ValueId v = m->nodes[c].fused_into >= 0 ? m->nodes[c].fused_into : c;
        const Node *n = &m->nodes[v];
        if ((v != c && n->op != OP_BATCHNORM) || n->is_output || n->fused_into >= 0 ||
            (lw->vs[v].layout != LY_FULL && lw->vs[v].layout != LY_STATIC) || n->type.rank != 3)
            continue;
        ValueId s = value_only_reader(m, v);
        if (s < 0) continue;
        if (m->nodes[s].op == OP_BATCHNORM) {
            if (m->nodes[s].is_output || lw->vs[s].layout != LY_INLINE) continue;
            s = value_only_reader(m, s);
            if (s < 0) continue;
        }
        const Node *sn = &m->nodes[s];
        if (sn->op != OP_NEURON || sn->fused_into < 0) continue;
        const Node *pn = &m->nodes[sn->fused_into];
        if (pn->op != OP_MAXPOOL2D && pn->op != OP_AVGPOOL2D && pn->op != OP_SUMPOOL2D) continue;
        lw->vs[v].win_kh = lw->vs[c].win_kh = (int)node_attr_i(pn, "kernel", 0);
        lw->vs[v].win_kw = lw->vs[c].win_kw = (int)node_attr_i(pn, "kernel", 1);
    }
}

/* ---- kernel groups: the marks turned into one plan ---- */

/* how a dense or conv layer is computed on the target (the `events` mark where it is honoured) */
static KGroupKind
layer_kind(const Lower *lw, ValueId v)
{
    if (lw->p->target == KTARGET_GPU)
        return KG_FLAT;
    /* a training step: no marks; a conv over spikes (bytes) sums its spike lists, the tiled
     * kernel's terms in its order (lower_conv2d_events) */
    if (lw->train) {
        const Node *n = &lw->m->nodes[v];
        bool is_spikes = lw->m->nodes[n->args[0]].type.dtype == DT_SPIKE &&
                         bits_of((Lower *)lw, n->args[0]) == 0;
        return n->op == OP_CONV2D && is_spikes && !lw->m->is_train_dense ? KG_EVENTS : KG_TILED;
    }
    return node_lists_events(lw->m, &lw->m->nodes[v]) ? KG_EVENTS : KG_TILED;
}

static KGroup
group_new(KGroupKind kind, ValueId root, bool is_step)
{
    return (KGroup){kind, kind, root, -1, -1, -1, is_step};
}

/* the dense or conv layer neuron layer v sums as it loads its input (directly or through a
 * batchnorm fused into v), or -1 */
static ValueId
summed_input(const Lower *lw, ValueId v)
{
    const Module *m = lw->m;
    ValueId in = m->nodes[v].args[0];
    if (m->nodes[in].op == OP_BATCHNORM && m->nodes[in].fused_into == v)
        in = m->nodes[in].args[0];
    return lw->vs[in].layout == LY_SUMMED ? in : -1;
}

/* The groups, in kernel order: a kernel for each node that has one (in `order`), then one per
 * output. Writes at most nnodes + noutputs groups; returns the count. */
static int
plan_groups(const Lower *lw, const ValueId *order, int norder, KGroup *out)
{
    const Module *m = lw->m;
    int ng = 0;
    for (int k = 0; k < norder; k++) {
        ValueId v = order[k];
        const Node *nd = &m->nodes[v];
        switch (nd->op) {
        case OP_INPUT:
        case OP_FLATTEN:
        case OP_STATE: /* no kernel: caller's memory, a view, filled by the neuron kernel */
        case OP_COUNT:
        case OP_MEAN:
        case OP_LAST:
        case OP_MAX:
        case OP_SEQUENCE: /* outputs, below */
            continue;
        default: break;
        }
        if (nd->fused_into >= 0 || lw->vs[v].layout == LY_SUMMED)
            continue; /* a member of its user's group */
        bool is_step = ctx_of((Lower *)lw, v) == CTX_STEP;
        const Node *an = nd->nargs ? &m->nodes[nd->args[0]] : NULL;
        KGroup g = group_new(KG_POINTWISE, v, is_step);
        if (nd->op == OP_BATCHNORM && an->fused_into == v &&
            (op_is_conv(an->op) || an->op == OP_DENSE)) {
            g.kind = KG_EPILOGUE; /* fold-batchnorm */
            g.member = nd->args[0];
            g.layer = layer_kind(lw, g.member);
        } else if ((nd->op == OP_MAXPOOL2D || nd->op == OP_AVGPOOL2D ||
                    nd->op == OP_SUMPOOL2D) && an->fused_into == v) {
            g.kind = KG_POOLED_SCAN; /* never a step kernel (ir_fusion_problem) */
            g.member = nd->args[0];
            g.summed = summed_input(lw, g.member);
        } else if (nd->op == OP_DENSE || op_is_conv(nd->op)) {
            g.kind = g.layer = layer_kind(lw, v);
        } else if (nd->op == OP_NEURON) {
            g.kind = is_step ? KG_STEP : KG_SCAN;
            g.summed = summed_input(lw, v);
        }
        out[ng++] = g;
    }
    /* outputs after everything: readouts reduce over t into the caller's sample-major arrays */
    for (int k = 0; k < m->noutputs; k++) {
        ValueId v = m->outputs[k];
        const Node *nd = &m->nodes[v];
        KGroup g = group_new(is_step_readout(nd->op) ? KG_READOUT : KG_OUTPUT, v, false);
        g.output = k;
        if (nd->nargs == 1 && m->nodes[nd->args[0]].fused_into == v) {
            g.kind = KG_SCAN_READOUT; /* a neuron layer fused into its readout computes it */
            g.member = nd->args[0];
            g.summed = summed_input(lw, g.member);
        }
        out[ng++] = g;
    }
    return ng;
}

/* Every layer kernel stores every element of its value (each step's slice at its step, before any
 * kernel after it reads the slice), so its buffer need not be zeroed before a run; kir_eval fills
 * such buffers with garbage, which keeps this claim tested. */
static void
mark_written_first(Lower *lw, ValueId v, bool is_any_layout)
{
    const VStore *vs = &lw->vs[v];
    if ((is_any_layout || vs->layout == LY_FULL || vs->layout == LY_STATIC) && vs->buf >= 0 &&
        lw->p->bufs[vs->buf].kind == KB_TEMP)
        lw->p->bufs[vs->buf].is_written_first = true;
}

/* the statements of dense or conv layer v computed as `kind` says */
static void
lower_layer(Lower *lw, ValueId v, KGroupKind kind)
{
    bool is_dense = lw->m->nodes[v].op == OP_DENSE;
    switch (kind) {
    case KG_TILED: is_dense ? lower_dense(lw, v) : lower_conv2d(lw, v); break;
    case KG_EVENTS: is_dense ? lower_dense_events(lw, v) : lower_conv2d_events(lw, v); break;
    case KG_FLAT: is_dense ? lower_dense_flat(lw, v) : lower_conv2d_flat(lw, v); break;
    default: unreachable();
    }
}

/* KG_TILED, KG_EVENTS, KG_FLAT, KG_POINTWISE: one stateless layer */
static void
group_layer(Lower *lw, const KGroup *g)
{
    ValueId v = g->root;
    begin_kernel(lw, v, describe(lw, v, ctx_what(ctx_of(lw, v))), g->is_step);
    switch (lw->m->nodes[v].op) {
    case OP_DENSE:
    case OP_CONV2D:
    case OP_CONV1D: lower_layer(lw, v, g->kind); break;
    case OP_MAXPOOL2D:
    case OP_AVGPOOL2D:
    case OP_SUMPOOL2D: lower_pool(lw, v); break;
    case OP_BATCHNORM:
        if (lw->train)
            lower_batchnorm_batch(lw, v);
        else
            lower_batchnorm(lw, v);
        break;
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_SCALE: lower_elementwise(lw, v); break;
    case OP_POISSON: lower_poisson(lw, v); break;
    case OP_DELAY: lower_delay(lw, v); break;
    default: unreachable();
    }
    end_kernel(lw);
    mark_written_first(lw, v, false);
}

/* KG_EPILOGUE: a conv or dense layer storing batchnorm(layer) into the batchnorm's buffer */
static void
group_epilogue(Lower *lw, const KGroup *g)
{
    const Module *m = lw->m;
    ValueId v = g->root, conv = g->member;
    const Node *cn = &m->nodes[conv];
    begin_kernel(lw, conv,
                 arena_printf(&lw->p->arena, "%s = %s(%s) with %s = batchnorm(%s) applied as "
                              "it stores: %s", value_name(lw, conv), node_op_name(m, cn),
                              value_name(lw, cn->args[0]), value_name(lw, v),
                              value_name(lw, conv), ctx_what(ctx_of(lw, v))),
                 g->is_step);
    kernel_add_node(lw, v);
    lw->epilogue = v;
    lw->is_epilogue_by_row = cn->op != OP_DENSE && lw->p->target == KTARGET_CPU;
    lower_layer(lw, conv, g->layer);
    lw->epilogue = -1;
    lw->is_epilogue_by_row = false;
    end_kernel(lw);
    mark_written_first(lw, v, true);
}

/* KG_SCAN, KG_STEP: one neuron layer */
static void
group_scan(Lower *lw, const KGroup *g)
{
    ValueId v = g->root;
    const char *what = g->is_step ? "neuron step (in the step loop): B*n neurons at step t, "
                                    "state in buffers between steps"
                                  : "neuron scan fused over T: B*n neurons, state in registers";
    begin_kernel(lw, v, describe(lw, v, what), g->is_step);
    lower_neuron(lw, v, -1, -1);
    end_kernel(lw);
    mark_written_first(lw, v, false);
}

/* KG_POOLED_SCAN: a neuron scan storing its pooling's output */
static void
group_pooled_scan(Lower *lw, const KGroup *g)
{
    begin_fused_kernel(lw, g->member, g->root,
                       "neuron scan over T window by window, only the pooled spikes stored");
    lower_neuron_pooled(lw, g->member, g->root);
    end_kernel(lw);
    mark_written_first(lw, g->root, true);
}

/* KG_SCAN_READOUT, KG_READOUT, KG_OUTPUT: the caller's output g->output */
static void
group_output(Lower *lw, const KGroup *g)
{
    ValueId v = g->root;
    const Node *nd = &lw->m->nodes[v];
    int64_t numel = type_numel(&nd->type);
    bool per_step = !is_step_readout(nd->op) && nd->type.has_time;
    int obuf = add_buf(lw, value_name(lw, v), KT_F32,
                       (KSize){numel * (per_step ? lw->T : 1), 0}, KB_OUTPUT, g->output, v);
    if (g->kind == KG_SCAN_READOUT) {
        begin_fused_kernel(lw, g->member, v, "neuron scan over T, the readout computed in it");
        lower_neuron(lw, g->member, v, obuf);
        kernel_add_node(lw, v);
        end_kernel(lw);
        return;
    }
    const char *how = is_step_readout(nd->op) ? "readout: reduce over T into [B][n]"
                      : per_step             ? "output: every step into [B][T][n]"
                                             : "output: the last step into [B][n]";
    begin_kernel(lw, v, describe(lw, v, how), false);
    if (is_step_readout(nd->op))
        lower_readout(lw, v, obuf);
    else if (nd->op == OP_SEQUENCE)
        lower_sequence(lw, nd->args[0], obuf, true);
    else
        lower_sequence(lw, v, obuf, per_step);
    end_kernel(lw);
}

/* each variant's lowering function, by KGroupKind */
static void (*const group_lower[])(Lower *lw, const KGroup *g) = {
#define KGROUP(id, name, fn, what) [KG_##id] = fn,
#include "codegen/kir_groups.def"
#undef KGROUP
};

/* ---- entry point ---- */

KProgram *
kir_lower(const Module *m)
{
    return kir_lower_for(m, KTARGET_CPU);
}

static KProgram *lower_program(const Module *m, KTarget target, KTrain *tr);

KProgram *
kir_lower_for(const Module *m, KTarget target)
{
    return lower_program(m, target, NULL);
}

const char *
kir_train_problem(const Module *m, ValueId *where)
{
    *where = -1;
    if (m->schedule != SCHEDULE_LAYER || m->memory != MEMORY_SEPARATE)
        return "the training program needs the layer-by-layer schedule and no memory plan";
    /* the forward's nodes (a train-step module's grad nodes follow them) */
    for (ValueId v = 0; v < module_nforward(m); v++) {
        const Node *n = &m->nodes[v];
        if (n->fused_into >= 0 || n->is_events || n->layout != SPIKES_BYTES ||
            n->is_scan_epilogue) {
            *where = v;
            return "the training program needs every value in a buffer of its own (no fuse, "
                   "events, packed spikes or epilogue marks)";
        }
    }
    return grad_problem(m, where);
}

KProgram *
kir_lower_train(const Module *tm, KTrain *tr, char *err, size_t errlen)
{
    return kir_lower_train_for(tm, KTARGET_CPU, tr, err, errlen);
}

KProgram *
kir_lower_train_for(const Module *tm, KTarget target, KTrain *tr, char *err, size_t errlen)
{
    ValueId where;
    const char *why = kir_train_problem(tm, &where);
    if (why) {
        const Node *n = where >= 0 ? &tm->nodes[where] : NULL;
        const char *name = !n ? "" : n->name ? n->name : node_layer_name(tm, n);
        char at[512] = "";
        if (n && !n->name && strcmp(name, "?") == 0) {
            /* an anonymous layer with no name of its own: its op, and where the model has it */
            name = op_info(n->op)->name;
            if (n->loc.file)
                snprintf(at, sizeof at, " at %s:%d:%d", n->loc.file, n->loc.line, n->loc.col);
        }
        diag_format(err, errlen, "%s%s%s%s%s", n ? "layer '" : "", name, n ? "'" : "", at,
                    n ? ": " : "");
        size_t k = err ? strlen(err) : 0;
        if (k < errlen) diag_format(err + k, errlen - k, "%s", why);
        return NULL;
    }
    memset(tr, 0, sizeof *tr);
    /* the inputs' gradients where the backward has them (ir_grad with inputs) */
    for (int k = module_nforward(tm); k < tm->nnodes; k++)
        tr->has_input_grads |=
            tm->nodes[k].op == OP_GRAD && tm->nodes[tm->nodes[k].args[0]].op == OP_INPUT;
    KProgram *p = lower_program(tm, target, tr);
    if (p) p->adds_zero_terms = true;
    if (!p) diag_format(err, errlen, "the training program could not be lowered");
    else
        plan_train_memory(p, tr);
    return p;
}

static KProgram *
lower_program(const Module *m, KTarget target, KTrain *tr)
{
    KProgram *p = xcalloc(1, sizeof *p);
    /* a train-step module: the forward lowered as a module of its own (its nodes, the grad nodes
     * left out; its arena the program's, so nothing frees it twice), the backward from the grad
     * nodes (lower_grad) */
    const Module *tm = NULL;
    if (tr) {
        tm = m;
        Module *fwd = arena_alloc(&p->arena, sizeof *fwd);
        *fwd = *m;
        fwd->arena = (Arena){0};
        fwd->nnodes = module_nforward(m);
        m = fwd;
    }
    p->m = m;
    p->target = target;
    p->timesteps = m->timesteps;
    p->seed = m->seed;
    Lower lw;
    memset(&lw, 0, sizeof lw);
    lw.p = p;
    lw.m = m;
    lw.T = m->timesteps;
    lw.epilogue = -1;
    lw.inline_value = pointwise_expr;
    lw.summed_value = summed_value;
    p->vnum = arena_alloc(&p->arena, ((size_t)m->nnodes + 1) * sizeof *p->vnum);
    ir_value_numbers(m, p->vnum);
    lw.acc = m->accumulate == ACC_F32 ? KT_F32 : KT_F64;
    int n = m->nnodes;
    lw.train = tr;
    if (tr) {
        tr->bn_mean = arena_alloc(&p->arena, ((size_t)n + 1) * sizeof(int));
        tr->bn_invstd = arena_alloc(&p->arena, ((size_t)n + 1) * sizeof(int));
        tr->bn_var = arena_alloc(&p->arena, ((size_t)n + 1) * sizeof(int));
        for (int v = 0; v < n; v++)
            tr->bn_mean[v] = tr->bn_invstd[v] = tr->bn_var[v] = -1;
    }
    /* what only the lowering needs lives in its scratch arena, freed at the end */
    Arena *a = &lw.scratch;
    size_t nn = (size_t)n + 1;
    lw.vs = arena_alloc(a, nn * sizeof *lw.vs);
    lw.is_static = arena_alloc(a, nn * sizeof *lw.is_static);
    lw.region = arena_alloc(a, nn * sizeof *lw.region);
    lw.stream = arena_alloc(a, nn * sizeof *lw.stream);
    ValueId *topo = arena_alloc(a, nn * sizeof *topo);
    ValueId *order = arena_alloc(a, nn * sizeof *order);
    KGroup *groups = arena_alloc(a, (nn + (size_t)m->noutputs) * sizeof *groups);
    bool is_ok = ir_topo_order(m, topo) == n;
    if (!is_ok) {
        diag_error(m->loc, "kernel IR: the model's nodes have no step order");
    } else {
        uint32_t npoisson = 0;
        for (ValueId v = 0; v < n; v++)
            if (m->nodes[v].op == OP_POISSON) {
                int64_t s = m->nodes[v].attrs[op_attr_index(OP_POISSON, "stream")].i[0];
                lw.stream[v] = s >= 0 ? (uint32_t)s : npoisson;
                npoisson++;
            }
        ir_fill_static(lw.m, topo, lw.is_static);
        int norder = schedule_order(&lw, topo, order);
        plan_buffers(&lw);
        resolve_aliases(&lw, topo);
        plan_windows(&lw);
        int ngroups = plan_groups(&lw, order, norder, groups);
        for (int k = 0; k < ngroups; k++) {
            int before = p->nkernels;
            group_lower[groups[k].kind](&lw, &groups[k]);
            /* one kernel; a GPU layer two, its tiles and their one-thread-per-output twin (only
             * one of which runs at a given batch: lower_layers.c, "GPU"); a CPU conv over paired
             * rows two, its spike lists and then its sums (lower_conv.c, open_pair_sums) */
            int made = p->nkernels - before;
            bool is_twin = made == 2 && p->target == KTARGET_GPU &&
                           (groups[k].kind == KG_FLAT || groups[k].kind == KG_EPILOGUE);
            bool is_lists = made == 2 && p->target == KTARGET_CPU &&
                            (groups[k].kind == KG_EVENTS || groups[k].kind == KG_EPILOGUE);
            /* a dense layer over its weight as stored two, its input transposed and then its
             * product (lower_layers.c, lower_dense_stored) */
            bool is_stored = made == 2 && p->target != KTARGET_GPU && m->is_weights_in_place &&
                             groups[k].kind == KG_TILED;
            /* a training batchnorm on the GPU five, its statistics in four and then its
             * values (lower_grad.c, lower_batchnorm_batch) */
            bool is_bn = made == 5 && p->target == KTARGET_GPU && tr &&
                         m->nodes[groups[k].root].op == OP_BATCHNORM;
            if (made != 1 && !is_twin && !is_lists && !is_stored && !is_bn)
                die("kir: group %d (%s) made %d kernels", k, kgroup_name(groups[k].kind), made);
            for (int i = before; i < p->nkernels; i++)
                p->kernels[i].group = groups[k].kind;
        }
        if (tr) {
            tr->nforward = p->nkernels;
            lower_grad(&lw, tm, topo, order, tr);
        }
        if (m->memory == MEMORY_REUSE)
            plan_memory(p);
    }
    arena_free(a);
    if (!is_ok) {
        kir_free(p);
        return NULL;
    }
    return p;
}
