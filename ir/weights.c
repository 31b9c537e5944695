/* Binding weight data to a module's weight slots (m->weights, named and shaped by inference): from
 * a safetensors file, checking every name, shape and dtype and reporting every problem, or from a
 * seeded initialisation with PyTorch's default ranges. Data always lands in the module's arena. The
 * seeded values are a contract (saved results depend on them): for a dense or conv weight or bias,
 * value[i] = (float)((2u - 1) * bound), u = rt_uniform(m->seed, fnv1a32(name), 0, i),
 * bound = 1/sqrt(fan_in), fan_in = weight numel / out channels; batchnorm: 1, 0, mean 0, var 1. */
#include "ir/ir.h"
#include "runtime/f16.h"
#include "runtime/philox.h"
#include "runtime/tensor_io.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_LISTED_WEIGHTS = 8, MAX_LISTED_UNUSED = 5 };

/* FNV-1a, 32 bits: the random stream of a weight is keyed by its name */
static uint32_t
fnv1a32(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 16777619u;
    }
    return h;
}

/* "[256, 784]" into buf */
static char *
shape_str(char *buf, size_t n, int rank, const int64_t *dims)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
    return buf;
}

static void
init_seeded(Module *m, Weight *w)
{
    const Node *n = &m->nodes[w->node];
    w->data = arena_alloc(&m->arena, (size_t)(w->numel ? w->numel : 1) * sizeof(float));
    if (w->slot < 0) { /* a learned neuron parameter starts from the value the model gives */
        w->data[0] = (float)n->params[w->param];
        return;
    }
    const char *slot = op_info(n->op)->weights[w->slot];
    if (n->op == OP_BATCHNORM) {
        float v = strcmp(slot, "weight") == 0 || strcmp(slot, "running_var") == 0 ? 1.0f : 0.0f;
        for (int64_t i = 0; i < w->numel; i++)
            w->data[i] = v;
        return;
    }
    /* dense and conv: kaiming_uniform(a=sqrt(5)) on the weight and PyTorch's bias rule both give
     * U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
    const Weight *kernel = &m->weights[n->first_weight];
    int64_t fan_in = kernel->rank > 0 && kernel->dims[0] > 0 ? kernel->numel / kernel->dims[0] : 0;
    double bound = fan_in > 0 ? 1.0 / sqrt((double)fan_in) : 0.0;
    uint32_t stream = fnv1a32(w->name);
    for (int64_t i = 0; i < w->numel; i++) {
        double u = rt_uniform((uint64_t)m->seed, stream, 0, (uint64_t)i);
        w->data[i] = (float)((2.0 * u - 1.0) * bound);
    }
}

static bool
is_float_dtype(RtDType t)
{
    return t == RT_F32 || t == RT_F16 || t == RT_BF16;
}

/* Check one slot against the file; reports and returns false on a problem. */
static bool
check_tensor(const Module *m, const Weight *w, const RtTensor *t, const char *path)
{
    const Node *n = &m->nodes[w->node];
    char want[160], got[160];
    shape_str(want, sizeof want, w->rank, w->dims);
    if (!t) {
        diag_error(n->loc,
                   "weights file '%s' has no tensor '%s' (expected f32/f16/bf16 of shape %s)", path,
                   w->name, want);
        return false;
    }
    bool ok = true;
    if (!is_float_dtype(t->dtype)) {
        diag_error(n->loc, "tensor '%s' in '%s' has dtype %s; weights must be f32, f16 or bf16",
                   w->name, path, rt_dtype_name(t->dtype));
        ok = false;
    }
    bool same = t->rank == w->rank;
    for (int i = 0; same && i < w->rank; i++)
        same = t->dims[i] == w->dims[i];
    same = same || (w->slot < 0 && t->numel == 1); /* a learned parameter: [] or [1] */
    if (!same) {
        diag_error(n->loc, "tensor '%s' in '%s' has shape %s; layer '%s' expects %s", w->name, path,
                   shape_str(got, sizeof got, t->rank, t->dims), node_layer_name(m, n), want);
        ok = false;
    }
    int64_t first;
    int64_t bad = ok ? rt_count_nonfinite(t->data, t->numel, &first) : 0;
    if (bad) {
        diag_error(n->loc, "tensor '%s' in '%s' holds %lld value%s that %s not finite (element "
                   "%lld is %s); weights must be numbers", w->name, path, (long long)bad,
                   bad == 1 ? "" : "s", bad == 1 ? "is" : "are", (long long)first,
                   isnan(t->data[first]) ? "NaN" : t->data[first] > 0 ? "inf" : "-inf");
        ok = false;
    }
    return ok;
}

/* "fc1.weight, fc1.bias, ..." (at most MAX_LISTED_WEIGHTS names) into buf */
static void
list_weights(const Module *m, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < m->nweights && i < MAX_LISTED_WEIGHTS && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", m->weights[i].name);
    if (m->nweights > MAX_LISTED_WEIGHTS && k < n)
        snprintf(buf + k, n - k, ", ... (%d in all)", m->nweights);
}

/* x as stored in s and read back */
static float
stored(float x, WeightStore s)
{
    return s == WSTORE_F16 ? rt_f16_to_f32(rt_f32_to_f16(x))
           : s == WSTORE_BF16 ? rt_bf16_to_f32(rt_f32_to_bf16(x))
                              : x;
}

int64_t
weights_overflow(const Weight *w, WeightStore s, int64_t *first)
{
    int64_t count = 0;
    *first = -1;
    for (int64_t i = 0; w->data && i < w->numel; i++)
        if (isfinite(w->data[i]) && !isfinite(stored(w->data[i], s))) {
            if (!count) *first = i;
            count++;
        }
    return count;
}

bool
weights_check_store(const Module *m, ValueId v, WeightStore s)
{
    const Node *n = &m->nodes[v];
    int wi = node_stored_weight(m, n);
    int64_t first, bad = wi >= 0 ? weights_overflow(&m->weights[wi], s, &first) : 0;
    if (!bad) return true;
    const Weight *w = &m->weights[wi];
    diag_error(n->loc, "tensor '%s' holds %lld value%s past %s's range (element %lld is %g): "
               "stored in %s %s infinite; keep this layer's weights f32 (--precision=mixed "
               "chooses per tensor)", w->name, (long long)bad, bad == 1 ? "" : "s",
               wstore_name(s), (long long)first, (double)w->data[first], wstore_name(s),
               bad == 1 ? "it would be" : "they would be");
    return false;
}

/* every value of w is one of s's: stored and read back, the same bits */
static bool
is_exact_in(const Weight *w, WeightStore s)
{
    for (int64_t i = 0; i < w->numel; i++) {
        float y = stored(w->data[i], s);
        if (memcmp(&y, &w->data[i], sizeof y) != 0) return false;
    }
    return true;
}

/* the narrow-weights pass's layers: 16 bits where that loses nothing, chosen again at every
 * binding (other weights, another choice) */
static void
choose_exact_stores(Module *m)
{
    for (int v = 0; v < m->nnodes; v++) {
        Node *n = &m->nodes[v];
        int wi = node_stored_weight(m, n);
        if (!n->wstore_auto || wi < 0 || !m->weights[wi].data) continue;
        if (n->wstore_exact) n->wstore = WSTORE_F32;
        n->wstore_exact = false;
        if (n->wstore != WSTORE_F32) continue; /* stated, or --precision's */
        const Weight *w = &m->weights[wi];
        WeightStore s = is_exact_in(w, WSTORE_F16)    ? WSTORE_F16
                        : is_exact_in(w, WSTORE_BF16) ? WSTORE_BF16
                                                      : WSTORE_F32;
        n->wstore = s;
        n->wstore_exact = s != WSTORE_F32;
    }
}

bool
weights_round_stored(Module *m)
{
    bool ok = true;
    choose_exact_stores(m);
    for (int v = 0; v < m->nnodes; v++) {
        const Node *n = &m->nodes[v];
        int wi = node_stored_weight(m, n);
        if (wi < 0 || n->wstore == WSTORE_F32 || !m->weights[wi].data)
            continue;
        if (!weights_check_store(m, v, n->wstore)) {
            ok = false;
            continue;
        }
        float *d = m->weights[wi].data;
        for (int64_t i = 0; i < m->weights[wi].numel; i++)
            d[i] = stored(d[i], n->wstore);
    }
    return ok;
}

bool
weights_bind_set(Module *m, const RtTensorSet *set, const char *path)
{
    bool ok = true;
    int nmissing = 0;
    for (int i = 0; i < m->nweights; i++) {
        const RtTensor *t = rt_tensorset_find(set, m->weights[i].name);
        /* a file of the wrong model misses every weight: a few are named, then a count */
        if (!t && ++nmissing > MAX_LISTED_WEIGHTS) {
            ok = false;
            continue;
        }
        if (!check_tensor(m, &m->weights[i], t, path))
            ok = false;
    }
    if (nmissing > MAX_LISTED_WEIGHTS)
        diag_file_error(path, "has no tensor for %d more of the model's weights (%d of %d missing)",
                        nmissing - MAX_LISTED_WEIGHTS, nmissing, m->nweights);
    /* the tensors the model does not use: one error, however many, naming the first few */
    int nunused = 0;
    char names[512];
    size_t k = 0;
    names[0] = 0;
    for (int i = 0; i < set->ntensors; i++) {
        const char *name = set->tensors[i].name ? set->tensors[i].name : "";
        if (module_find_weight(m, name) >= 0)
            continue;
        /* what a checkpoint of snnc --train holds besides the weights (its optimiser's state and
         * where training stood): its weights load like any others' */
        if (strncmp(name, "__snnc_", 7) == 0 || strstr(name, ".__opt"))
            continue;
        if (nunused++ < MAX_LISTED_UNUSED && k < sizeof names)
            k += (size_t)snprintf(names + k, sizeof names - k, "%s'%s'", k ? ", " : "", name);
    }
    if (nunused) {
        char list[1024] = "it has no weights";
        if (m->nweights) {
            memcpy(list, "its weights are: ", 18);
            list_weights(m, list + 17, sizeof list - 17);
        }
        if (nunused == 1)
            diag_file_error(path, "tensor %s is not used by the model (%s)", names, list);
        else
            diag_file_error(path, "%d tensors are not used by the model: %s%s (%s)", nunused,
                            names, nunused > MAX_LISTED_UNUSED ? ", ..." : "", list);
        ok = false;
    }
    if (ok)
        for (int i = 0; i < m->nweights; i++) {
            Weight *w = &m->weights[i];
            const RtTensor *t = rt_tensorset_find(set, w->name);
            w->data = arena_alloc(&m->arena, (size_t)(w->numel ? w->numel : 1) * sizeof(float));
            int64_t n = t->numel < w->numel ? t->numel : w->numel; /* equal: the shapes match */
            if (n > 0)
                memcpy(w->data, t->data, (size_t)n * sizeof(float));
        }
    if (ok) ok = weights_round_stored(m);
    return ok;
}

void
weights_read_limit(const Module *m, RtReadLimit *lim, char *why, size_t len)
{
    int64_t numel = 0;
    for (int i = 0; i < m->nweights; i++)
        numel += m->weights[i].numel;
    char size[32];
    rt_format_bytes(4 * (uint64_t)numel, size, sizeof size);
    snprintf(why, len, "the model's %d weight%s hold %s as f32, and a header", m->nweights,
             m->nweights == 1 ? "" : "s", size);
    *lim = (RtReadLimit){rt_weights_file_limit(numel, m->nweights), 0, why};
}

bool
weights_bind(Module *m, const char *override_path)
{
    const char *path = override_path ? override_path : m->weights_path;
    if (!path) {
        for (int i = 0; i < m->nweights; i++)
            init_seeded(m, &m->weights[i]);
        return weights_round_stored(m);
    }

    RtTensorSet set;
    char msg[1024];
    memset(&set, 0, sizeof set);
    RtReadLimit lim;
    char why[200];
    weights_read_limit(m, &lim, why, sizeof why);
    if (rt_safetensors_read(path, &lim, &set, msg, sizeof msg) != 0) {
        diag_reader_error(path, msg);
        rt_tensorset_free(&set);
        return false;
    }
    bool ok = weights_bind_set(m, &set, path);
    rt_tensorset_free(&set);
    return ok;
}

RtTensor *
weights_as_tensors(const Module *m)
{
    RtTensor *ts = xcalloc((size_t)m->nweights + 1, sizeof *ts);
    for (int i = 0; i < m->nweights; i++) {
        const Weight *w = &m->weights[i];
        ts[i] = (RtTensor){(char *)w->name, RT_F32, w->rank, {0}, w->numel, w->data};
        for (int d = 0; d < w->rank; d++)
            ts[i].dims[d] = w->dims[d];
    }
    return ts;
}
