/* Schedule decisions ("marks") as one table. A mark is a statement of the IR text that says how a
 * value is computed, not what: `fuse a into b`, `events a`, `epilogue a`, `weights a : f16`,
 * `activations a : bf16`, `layout a : bits`. Passes (or --precision, or a user) set them; the
 * interpreter ignores them; the lowering does what they say. Each row gives the keyword and form
 * the parser reads and the printer writes, the node field it lives in, the check the verifier
 * runs (ir_verify_fusions), who sets it, and where a target does not honour it (a note then, never
 * silence). */
#include "ir/ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- where each mark may stand (the verifier's and the passes' checks) ---- */

/* does a path of operand edges lead from `from` to `to` (to reads from, at some remove)? */
static bool
reaches(const Module *m, ValueId from, ValueId to)
{
    bool *seen = xcalloc((size_t)m->nnodes + 1, sizeof *seen);
    ValueId *work = xmalloc(((size_t)m->nnodes + 1) * sizeof *work);
    int nwork = 0;
    bool found = false;
    work[nwork++] = from;
    seen[from] = true;
    while (nwork > 0 && !found) {
        ValueId u = work[--nwork];
        for (ValueId v = 0; v < m->nnodes && !found; v++)
            for (int a = 0; a < m->nodes[v].nargs; a++)
                if (m->nodes[v].args[a] == u) {
                    found = v == to;
                    if (!seen[v]) {
                        seen[v] = true;
                        work[nwork++] = v;
                    }
                }
    }
    free(seen);
    free(work);
    return found;
}

static bool
is_pointwise(Op op)
{
    return op == OP_BATCHNORM || op == OP_ADD || op == OP_SUB || op == OP_MUL || op == OP_SCALE;
}

const char *
ir_layout_problem(const Module *m, ValueId v)
{
    const Node *n = &m->nodes[v];
    bool is_bipolar = n->type.dtype == DT_I8;
    if (n->type.dtype != DT_SPIKE && !is_bipolar)
        return "it is not a spike value (0/1, or -1/0/1)";
    if (n->op == OP_INPUT || n->is_output)
        return "a model input or output is stored as the caller holds it";
    if (n->op == OP_FLATTEN)
        return "a flatten is a view of its operand, which holds the memory";
    if (n->fused_into >= 0)
        return "it is computed inside the kernel of the value it is fused into, without memory";
    if (type_numel(&n->type) % (is_bipolar ? 4 : 8) != 0)
        return is_bipolar ? "its elements per sample are not a multiple of 4 (a byte would hold "
                            "the spikes of two samples or steps)"
                          : "its elements per sample are not a multiple of 8 (a byte would hold "
                            "the spikes of two samples or steps)";
    return NULL;
}

const char *
ir_fusion_problem(const Module *m, ValueId a, ValueId b)
{
    if (b < 0 || b >= m->nnodes || a == b)
        return "it names no other value";
    const Node *na = &m->nodes[a], *nb = &m->nodes[b];
    bool is_used = false;
    for (int k = 0; k < nb->nargs; k++)
        is_used = is_used || nb->args[k] == a;
    if (!is_used)
        return "the second value does not read the first";
    if (na->is_output || na->op == OP_INPUT)
        return "the first value is a model input or output, which needs its own memory";
    for (ValueId v = 0; v < m->nnodes; v++)
        for (int k = 0; k < m->nodes[v].nargs; k++)
            if (v != b && m->nodes[v].args[k] == a)
                return "the first value has other users";
    if (op_is_conv(na->op) || na->op == OP_DENSE) {
        if (nb->op != OP_BATCHNORM)
            return "a conv or dense layer is fused only into the batchnorm that reads it (its "
                   "epilogue)";
        if (nb->fused_into >= 0)
            return "the batchnorm is computed inside another kernel, so it has no buffer for the "
                   "conv to store into";
        if (na->astore != WSTORE_F32)
            return "the layer's output is stored in 16 bits (activations), in a buffer of its own";
        return NULL;
    }
    if (is_pointwise(na->op)) {
        for (ValueId v = 0; v < m->nnodes; v++)
            if (m->nodes[v].fused_into == a &&
                (op_is_conv(m->nodes[v].op) || m->nodes[v].op == OP_DENSE))
                return "a conv or dense layer is fused into this batchnorm, whose kernel it "
                       "becomes";
        if (nb->op != OP_NEURON && !is_pointwise(nb->op))
            return "an elementwise value is fused only into a neuron layer or another elementwise "
                   "op";
        return NULL;
    }
    if (na->op != OP_NEURON)
        return "only elementwise ops (batchnorm, add, sub, mul, scale), neuron layers and conv or "
               "dense layers (into their batchnorm) are fused";
    bool is_readout = nb->op == OP_COUNT || nb->op == OP_MEAN || nb->op == OP_LAST ||
                      nb->op == OP_MAX || nb->op == OP_SEQUENCE;
    if (!is_readout && nb->op != OP_MAXPOOL2D && nb->op != OP_AVGPOOL2D &&
        nb->op != OP_SUMPOOL2D)
        return "a neuron layer is fused only into the pooling or the readout that reads it";
    if (m->schedule != SCHEDULE_LAYER)
        return "a neuron layer is fused into its pooling or readout only in the layer-by-layer "
               "schedule (schedule layer)";
    if (reaches(m, a, a))
        return "the neuron layer is in a recurrent cycle (it runs step by step)";
    if (is_readout) return NULL;
    if (na->type.dtype != DT_SPIKE)
        return "the neuron layer does not emit 0/1 spikes";
    const Type *t = &na->type;
    if (t->rank != 3)
        return "the pooled value is not [C, H, W]";
    for (int d = 0; d < 2; d++) {
        int64_t k = node_attr_i(nb, "kernel", d), st = node_attr_i(nb, "stride", d);
        if ((st != 0 && st != k) || node_attr_i(nb, "pad", d) != 0 || k < 1 ||
            t->dims[1 + d] % k != 0)
            return "the pooling windows overlap, pad or leave neurons out (stride must equal the "
                   "kernel, without padding, dividing the size)";
    }
    if (node_attr_i(nb, "kernel", 0) * node_attr_i(nb, "kernel", 1) > 16)
        return "the pooling window holds more than 16 neurons (each is scanned with its own state)";
    return NULL;
}

const char *
ir_epilogue_problem(const Module *m, ValueId v)
{
    const Node *n = &m->nodes[v];
    if (n->op != OP_DENSE && !op_is_conv(n->op))
        return "only a dense or conv layer is summed in the scan that reads it";
    if (n->is_output)
        return "it is a model output, which needs its own memory";
    if (n->fused_into >= 0)
        return "it is computed inside another kernel already";
    ValueId user = -1;
    for (ValueId u = 0; u < m->nnodes; u++)
        for (int k = 0; k < m->nodes[u].nargs; k++)
            if (m->nodes[u].args[k] == v) {
                if (user >= 0)
                    return "it has more than one reader";
                user = u;
            }
    if (user < 0)
        return "nothing reads it";
    /* the scan, and the value it takes as input: v, or the batchnorm of v fused into it */
    ValueId scan = user, in = v;
    if (m->nodes[user].op == OP_BATCHNORM) {
        scan = m->nodes[user].fused_into;
        in = user;
    }
    if (scan < 0 || m->nodes[scan].op != OP_NEURON || m->nodes[scan].args[0] != in)
        return "its reader is not a neuron layer (or a batchnorm fused into one) taking it as "
               "input";
    if (m->schedule != SCHEDULE_LAYER)
        return "scans run over T only in the layer-by-layer schedule (schedule layer)";
    if (reaches(m, scan, scan))
        return "the neuron layer is in a recurrent cycle (it runs step by step)";
    return NULL;
}

const char *
ir_activation_problem(const Module *m, ValueId v)
{
    const Node *n = &m->nodes[v];
    if (n->op != OP_DENSE && !op_is_conv(n->op))
        return "only a dense or conv layer's output is stored narrower";
    if (n->fused_into >= 0)
        return "it is computed into its batchnorm's buffer (fused into it)";
    return NULL;
}

bool
ir_verify_fusions(const Module *m)
{
    /* every mark a node carries (marks.c: the table's check); a fusion last, as it may fail for a
     * reason another mark states more precisely */
    static const MarkKind order[MARK_COUNT] = {MARK_EPILOGUE, MARK_EVENTS, MARK_WEIGHTS,
                                               MARK_ACTIVATIONS, MARK_LAYOUT, MARK_FUSE};
    for (int j = 0; j < MARK_COUNT; j++) {
        MarkKind k = order[j];
        const MarkInfo *mi = mark_info(k);
        for (int v = 0; v < m->nnodes; v++) {
            Node *n = &m->nodes[v];
            char msg[512];
            if (!mark_is_printed(n, k) || mi->check(m, v, msg, sizeof msg)) continue;
            Loc at = *mi->loc(n);
            diag_error(at.line > 0 ? at : n->loc, "%s", msg);
            return false;
        }
    }
    return true;
}

/* ---- the table's rows ---- */

static const char *const stores[] = {"f32", "f16", "bf16", NULL};
static const char *const layouts[] = {"bytes", "bits", NULL};

static const char *
name_of(const Module *m, ValueId v)
{
    return m->nodes[v].name ? m->nodes[v].name : node_op_name(m, &m->nodes[v]);
}

/* ---- fuse a into b ---- */
static int get_fuse(const Node *n) { return n->fused_into + 1; }
static void set_fuse(Node *n, int x) { n->fused_into = x - 1; }
static Loc *loc_fuse(Node *n) { return &n->fused_loc; }
static bool
check_fuse(const Module *m, ValueId v, char *msg, size_t len)
{
    const Node *n = &m->nodes[v];
    const char *why = ir_fusion_problem(m, v, n->fused_into);
    if (!why) return true;
    const char *into = n->fused_into < m->nnodes && m->nodes[n->fused_into].name
                           ? m->nodes[n->fused_into].name
                           : "?";
    snprintf(msg, len, "cannot fuse '%s' into '%s': %s", name_of(m, v), into, why);
    return false;
}

/* ---- events a ---- */
static int get_events(const Node *n) { return n->is_events; }
static void set_events(Node *n, int x) { n->is_events = x != 0; }
static Loc *loc_events(Node *n) { return &n->events_loc; }
static bool
check_events(const Module *m, ValueId v, char *msg, size_t len)
{
    const Node *n = &m->nodes[v];
    bool is_layer = n->op == OP_DENSE || op_is_conv(n->op);
    DType in = n->nargs ? m->nodes[n->args[0]].type.dtype : DT_F32;
    if (is_layer && (in == DT_SPIKE || in == DT_I8)) return true;
    snprintf(msg, len, "events: '%s' is %s; only a dense or conv layer reading spikes sums event by "
             "event", name_of(m, v), is_layer ? "a layer reading real values" : node_op_name(m, n));
    return false;
}
static const char *
unhonoured_events(const Module *m, ValueId v, int target)
{
    if (target == MARK_TARGET_GPU)
        return "the GPU's dense and conv kernels sum every input (a thread per output)";
    const Node *n = &m->nodes[v];
    if (node_lists_events(m, n)) return NULL;
    if (node_is_narrow_dense(n))
        return "a dense layer of 32 outputs or fewer walks spikes stored as bits only; its input "
               "is stored as bytes here, so it keeps all its outputs in one register tile over "
               "every input";
    return "only a dense or conv layer reading spikes lists them";
}

/* ---- epilogue a ---- */
static int get_epilogue(const Node *n) { return n->is_scan_epilogue; }
static void set_epilogue(Node *n, int x) { n->is_scan_epilogue = x != 0; }
static Loc *loc_epilogue(Node *n) { return &n->epilogue_loc; }
static bool
check_epilogue(const Module *m, ValueId v, char *msg, size_t len)
{
    const char *why = ir_epilogue_problem(m, v);
    if (!why) return true;
    snprintf(msg, len, "epilogue: '%s' cannot be summed in its scan: %s", name_of(m, v), why);
    return false;
}
static const char *
unhonoured_epilogue(const Module *m, ValueId v, int target)
{
    (void)m, (void)v;
    return target == MARK_TARGET_CPU ? "the CPU keeps the layer's tiles and event lists" : NULL;
}

/* ---- weights a : f16 ---- */
static int get_wstore(const Node *n) { return (int)n->wstore; }
static void set_wstore(Node *n, int x) { n->wstore = (WeightStore)x; }
static Loc *loc_wstore(Node *n) { return &n->wstore_loc; }
static bool
check_wstore(const Module *m, ValueId v, char *msg, size_t len)
{
    const Node *n = &m->nodes[v];
    if (node_stored_weight(m, n) >= 0) return true;
    snprintf(msg, len, "weights: '%s' is %s; only a dense or conv layer's weight is stored as %s",
             name_of(m, v), node_op_name(m, n), wstore_name(n->wstore));
    return false;
}

/* ---- activations a : bf16 ---- */
static int get_astore(const Node *n) { return (int)n->astore; }
static void set_astore(Node *n, int x) { n->astore = (WeightStore)x; }
static Loc *loc_astore(Node *n) { return &n->astore_loc; }
static bool
check_astore(const Module *m, ValueId v, char *msg, size_t len)
{
    const char *why = ir_activation_problem(m, v);
    if (!why) return true;
    snprintf(msg, len, "activations: '%s' cannot be stored as %s: %s", name_of(m, v),
             wstore_name(m->nodes[v].astore), why);
    return false;
}

/* ---- layout a : bits ---- */
static int get_layout(const Node *n) { return (int)n->layout; }
static void set_layout(Node *n, int x) { n->layout = (SpikeLayout)x; }
static Loc *loc_layout(Node *n) { return &n->layout_loc; }
static bool
check_layout(const Module *m, ValueId v, char *msg, size_t len)
{
    const Node *n = &m->nodes[v];
    DType dt = n->type.dtype;
    const char *why = n->layout == SPIKES_BITS            ? ir_layout_problem(m, v)
                      : dt == DT_SPIKE || dt == DT_I8 ? NULL
                                                      : "it is not a spike value";
    if (!why) return true;
    snprintf(msg, len, "layout: '%s' cannot be stored as %s: %s", name_of(m, v),
             spike_layout_name(n->layout), why);
    return false;
}
static const char *
unhonoured_layout(const Module *m, ValueId v, int target)
{
    bool is_bits = m->nodes[v].layout == SPIKES_BITS;
    return is_bits && target == MARK_TARGET_GPU ? "the GPU keeps spikes in bytes" : NULL;
}

/* the table, in the order marks are printed */
static const MarkInfo marks[MARK_COUNT] = {
    [MARK_FUSE] = {"fuse", MF_INTO, NULL, "the fuse pass",
                   "compute a inside the kernel of b, its only user, with no buffer of its own",
                   "'%s' is already fused into another value", NULL, get_fuse, set_fuse, loc_fuse,
                   check_fuse, NULL, false},
    [MARK_EVENTS] = {"events", MF_NODE, NULL, "the events pass (--events=auto: calibrated rates)",
                     "a dense or conv layer reading spikes sums only its nonzero inputs, from "
                     "per-row lists of the inputs that spiked (CPU)",
                     "'%s' is given twice", NULL, get_events, set_events, loc_events,
                     check_events, unhonoured_events, false},
    [MARK_EPILOGUE] = {"epilogue", MF_NODE, NULL, "the scan-epilogue pass (-O3)",
                       "a dense or conv layer read only by a neuron scan is summed inside that "
                       "scan, with no buffer or kernel of its own (GPU)",
                       "'%s' is given twice", NULL, get_epilogue, set_epilogue, loc_epilogue,
                       check_epilogue, unhonoured_epilogue, false},
    [MARK_WEIGHTS] = {"weights", MF_TYPE, stores, "--precision",
                      "a dense or conv layer's weight is stored (and computed with) as f16 or bf16",
                      "the storage of '%s' is given twice",
                      "weights %s: a weight is stored as f32, f16 or bf16, not '%s'", get_wstore,
                      set_wstore, loc_wstore, check_wstore, NULL, false},
    [MARK_ACTIVATIONS] = {"activations", MF_TYPE, stores, "--precision",
                          "a dense or conv layer's output is rounded to and stored as f16 or bf16",
                          "the storage of '%s' is given twice",
                          "activations %s: activations are stored as f32, f16 or bf16, not '%s'", get_astore,
                          set_astore, loc_astore, check_astore, NULL, false},
    [MARK_LAYOUT] = {"layout", MF_TYPE, layouts, "the pack-spikes pass",
                     "a spike value is stored a bit per spike (2 for -1/0/1) instead of a byte "
                     "(CPU); `bytes` stated keeps the pass off it",
                     "the layout of '%s' is given twice",
                     "layout %s: spikes are stored as bits or bytes, not '%s'", get_layout, set_layout,
                     loc_layout, check_layout, unhonoured_layout, true},
};

const MarkInfo *
mark_info(MarkKind k)
{
    return k >= 0 && k < MARK_COUNT ? &marks[k] : NULL;
}

int
mark_find(const char *keyword, MarkForm form)
{
    for (int k = 0; k < MARK_COUNT; k++)
        if (strcmp(marks[k].keyword, keyword) == 0 && marks[k].form == form) return k;
    return -1;
}

bool
mark_is_printed(const Node *n, MarkKind k)
{
    const MarkInfo *mi = &marks[k];
    if (mi->get(n)) return true;
    /* a default printed where a statement gave it (`layout a : bytes` keeps pack-spikes off) */
    return mi->print_stated_default && mi->loc((Node *)n)->line > 0;
}

void
module_clear_marks(Module *m)
{
    for (int k = 0; k < MARK_COUNT; k++)
        for (int v = 0; v < m->nnodes; v++) {
            marks[k].set(&m->nodes[v], 0);
            *marks[k].loc(&m->nodes[v]) = (Loc){0};
        }
}

int
marks_unhonoured(const Module *m, int target, bool only_stated)
{
    int n = 0;
    for (int k = 0; k < MARK_COUNT; k++) {
        if (!marks[k].unhonoured) continue;
        for (int v = 0; v < m->nnodes; v++) {
            Node *nd = &m->nodes[v];
            Loc at = *marks[k].loc(nd);
            if (!marks[k].get(nd) || (only_stated && at.line == 0)) continue;
            const char *why = marks[k].unhonoured(m, v, target);
            if (!why) continue;
            diag_note(at.line > 0 ? at : nd->loc, "%s %s: not done on the %s: %s", marks[k].keyword,
                      name_of(m, v), target == MARK_TARGET_GPU ? "GPU" : "CPU", why);
            n++;
        }
    }
    return n;
}

void
marks_help(FILE *f)
{
    fputs("Schedule marks: statements of the IR text that say how a value is computed (the\n"
          "interpreter ignores them; -O0 does what the file says, passes add them):\n", f);
    for (int k = 0; k < MARK_COUNT; k++) {
        const MarkInfo *mi = &marks[k];
        char form[96];
        if (mi->form == MF_INTO) {
            snprintf(form, sizeof form, "%s a into b", mi->keyword);
        } else if (mi->form == MF_TYPE) {
            int len = snprintf(form, sizeof form, "%s a : ", mi->keyword);
            for (int i = 0; mi->words[i] && len < (int)sizeof form; i++)
                len += snprintf(form + len, sizeof form - (size_t)len, "%s%s", i ? "|" : "",
                                mi->words[i]);
        } else {
            snprintf(form, sizeof form, "%s a", mi->keyword);
        }
        fprintf(f, "  %s\n      %s (set by %s)\n", form, mi->doc, mi->set_by);
    }
}
