/* session.c: the C ABI of model.so (snn.h) on the CPU. snnc links this file, with the rest of the
 * model runtime (safetensors, layouts, the thread pool), to the generated object, which defines:
 *   snnk_run           the generated schedule (runtime/kernel_abi.h)
 *   snnk_meta          the program's description as text (format below), NUL-terminated
 *   snnk_weights, snnk_weights_size   the weights as safetensors bytes (size 0: none embedded)
 * Metadata format, one record per line, fields separated by single spaces (names never hold
 * spaces):
 *   snnc-model ABI                     first line; ABI = SNNK_ABI_VERSION
 *   name NAME / timesteps T / devices LIST / kernels NSTATIC NSTEP
 *   input NAME PER_STEP RANK DIMS...   output NAME PER_STEP RANK DIMS...   weight NAME RANK DIMS...
 *   layer NAME BUF                     a counted spiking layer and its i64 spike-count buffer
 *   buf NAME KIND TYPE PER_BATCH FIXED IO NPERM PERM... ZERO   buffer i of the program, in order;
 *                                      ZERO 0: every element is stored before it is loaded
 *   end
 * Nothing here prints or exits; runs allocate nothing. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/kernel_abi.h"
#include "runtime/layout.h"
#include "runtime/pool.h"
#include "runtime/snn.h"
#include "runtime/tensor_io.h"

/* defined by the generated object */
extern const char snnk_meta[];
extern const unsigned char snnk_weights[];
extern const uint64_t snnk_weights_size;
void snnk_run(void **bufs, int64_t batch, int64_t sample_base, SnnkRt *rt);

enum { MAX_NAME = 256, ARENA_ALIGN = 64 };

typedef enum { BK_INPUT, BK_OUTPUT, BK_WEIGHT, BK_TEMP } BufKind;

typedef struct Buf {
    char name[MAX_NAME];
    BufKind kind;
    size_t elem;        /* bytes per element */
    int64_t per_batch, fixed;
    int io;             /* input/output/weight index */
    int nperm;
    int perm[SNN_MAX_RANK];
    bool needs_zero;    /* temporaries: zeroed before every run */
} Buf;

typedef struct Layer {
    char name[MAX_NAME];
    int buf;
} Layer;

typedef struct Tensor {
    char name[MAX_NAME];
    snn_tensor_info info;
} Tensor;

struct snn_model {
    char name[MAX_NAME];
    char devices[64];
    int timesteps;
    int nstatic, nstep; /* kernels outside and inside the step loop */
    int ninputs, noutputs, nweights, nlayers, nbufs;
    Tensor *inputs, *outputs, *weights;
    Layer *layers;
    Buf *bufs;
};

struct snn_session {
    const snn_model *m;
    int max_batch;
    RtPool *pool;
    pthread_mutex_t lock;
    void **bufs;            /* [nbufs] what snnk_run gets */
    unsigned char *arena;   /* every temporary buffer, sized for max_batch */
    size_t *temp_off;       /* [nbufs] offset in the arena (temporaries) */
    float **weight_mem;     /* [nbufs] owned weight memory (packed), NULL until loaded */
    bool has_weights;
    double *counts;         /* [nlayers] */
    snn_stats stats;
};

/* ---- errors ---- */

static _Thread_local char last_error[512];

static snn_status
fail(snn_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}

const char *
snn_last_error(void)
{
    return last_error;
}

uint32_t
snn_abi_version(void)
{
    return SNN_ABI_VERSION;
}

const char *
snn_status_name(snn_status status)
{
    switch (status) {
    case SNN_OK: return "SNN_OK";
    case SNN_ERR_ARGUMENT: return "SNN_ERR_ARGUMENT";
    case SNN_ERR_DEVICE: return "SNN_ERR_DEVICE";
    case SNN_ERR_WEIGHTS: return "SNN_ERR_WEIGHTS";
    case SNN_ERR_STATE: return "SNN_ERR_STATE";
    case SNN_ERR_MEMORY: return "SNN_ERR_MEMORY";
    case SNN_ERR_IO: return "SNN_ERR_IO";
    }
    return "SNN_ERR_UNKNOWN";
}

/* ---- the model: parsed from snnk_meta once ---- */

typedef struct Parser {
    const char *p;
    int line;
    bool is_bad;
} Parser;

/* the next space-separated word of the current line into buf (empty at the end of the line) */
static void
word(Parser *ps, char *buf, size_t n)
{
    size_t k = 0;
    while (*ps->p == ' ')
        ps->p++;
    while (*ps->p && *ps->p != ' ' && *ps->p != '\n') {
        if (k + 1 < n) buf[k++] = *ps->p;
        else ps->is_bad = true;
        ps->p++;
    }
    buf[k] = 0;
}

static int64_t
number(Parser *ps)
{
    char buf[32], *end;
    word(ps, buf, sizeof buf);
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (!buf[0] || *end || errno) ps->is_bad = true;
    return v;
}

static void
end_line(Parser *ps)
{
    while (*ps->p == ' ')
        ps->p++;
    if (*ps->p && *ps->p != '\n') ps->is_bad = true;
    while (*ps->p && *ps->p != '\n')
        ps->p++;
    if (*ps->p == '\n') ps->p++;
    ps->line++;
}

static void
parse_tensor(Parser *ps, Tensor *t, bool has_step)
{
    word(ps, t->name, sizeof t->name);
    t->info.name = t->name;
    t->info.dtype = SNN_F32;
    t->info.per_step = has_step ? (int)number(ps) : 0;
    t->info.rank = (int)number(ps);
    if (t->info.rank < 0 || t->info.rank > SNN_MAX_RANK) {
        ps->is_bad = true;
        return;
    }
    t->info.numel = 1;
    for (int d = 0; d < t->info.rank; d++) {
        t->info.dims[d] = number(ps);
        if (t->info.dims[d] < 0) ps->is_bad = true;
        t->info.numel *= t->info.dims[d];
    }
}

static const struct {
    const char *name;
    size_t size;
} elem_types[] = {{"f32", 4}, {"f64", 8}, {"i64", 8}, {"u8", 1}, {"i8", 1}, {"bool", 1}};

static void
parse_buf(Parser *ps, Buf *b)
{
    static const char *const kinds[] = {"input", "output", "weight", "temp"};
    char kind[16], type[16];
    word(ps, b->name, sizeof b->name);
    word(ps, kind, sizeof kind);
    word(ps, type, sizeof type);
    b->kind = (BufKind)-1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(kind, kinds[i])) b->kind = (BufKind)i;
    b->elem = 0;
    for (size_t i = 0; i < sizeof elem_types / sizeof elem_types[0]; i++)
        if (!strcmp(type, elem_types[i].name)) b->elem = elem_types[i].size;
    b->per_batch = number(ps);
    b->fixed = number(ps);
    b->io = (int)number(ps);
    b->nperm = (int)number(ps);
    if ((int)b->kind < 0 || !b->elem || b->per_batch < 0 || b->fixed < 0 || b->nperm < 0 ||
        b->nperm > SNN_MAX_RANK) {
        ps->is_bad = true;
        return;
    }
    for (int d = 0; d < b->nperm; d++)
        b->perm[d] = (int)number(ps);
    int64_t zero = number(ps);
    if (zero != 0 && zero != 1) ps->is_bad = true;
    b->needs_zero = zero == 1;
}

static snn_model model;
static const snn_model *model_ok; /* &model once parsed and checked, else NULL */
static char model_error[512];
static pthread_once_t model_once = PTHREAD_ONCE_INIT;

/* the count of lines starting with `key ` */
static int
count_records(const char *text, const char *key)
{
    int n = 0;
    size_t k = strlen(key);
    for (const char *p = text; *p;) {
        if (!strncmp(p, key, k) && p[k] == ' ') n++;
        p = strchr(p, '\n');
        if (!p) break;
        p++;
    }
    return n;
}

/* The checks that make every later index safe: io indices, stat buffers, weight shapes. */
static bool
model_check(const snn_model *m)
{
    for (int i = 0; i < m->nbufs; i++) {
        const Buf *b = &m->bufs[i];
        int limit = b->kind == BK_INPUT    ? m->ninputs
                    : b->kind == BK_OUTPUT ? m->noutputs
                    : b->kind == BK_WEIGHT ? m->nweights
                                           : 1;
        if (b->kind != BK_TEMP && (b->io < 0 || b->io >= limit)) return false;
        if (b->kind == BK_INPUT || b->kind == BK_OUTPUT || b->kind == BK_WEIGHT) {
            if (b->elem != 4) return false;
        }
        if (b->kind == BK_WEIGHT) {
            const snn_tensor_info *w = &m->weights[b->io].info;
            if (b->per_batch != 0 || b->fixed != w->numel) return false;
            if (b->nperm && b->nperm != w->rank) return false;
            unsigned seen = 0;
            for (int d = 0; d < b->nperm; d++) {
                if (b->perm[d] < 0 || b->perm[d] >= b->nperm || (seen >> b->perm[d] & 1))
                    return false;
                seen |= 1u << b->perm[d];
            }
        }
    }
    for (int i = 0; i < m->nlayers; i++) {
        int b = m->layers[i].buf;
        if (b < 0 || b >= m->nbufs || m->bufs[b].kind != BK_TEMP || m->bufs[b].elem != 8)
            return false;
    }
    return m->timesteps > 0;
}

static void
model_parse(void)
{
    snn_model *m = &model;
    const char *text = snnk_meta;
    m->ninputs = count_records(text, "input");
    m->noutputs = count_records(text, "output");
    m->nweights = count_records(text, "weight");
    m->nlayers = count_records(text, "layer");
    m->nbufs = count_records(text, "buf");
    m->inputs = calloc((size_t)m->ninputs + 1, sizeof *m->inputs);
    m->outputs = calloc((size_t)m->noutputs + 1, sizeof *m->outputs);
    m->weights = calloc((size_t)m->nweights + 1, sizeof *m->weights);
    m->layers = calloc((size_t)m->nlayers + 1, sizeof *m->layers);
    m->bufs = calloc((size_t)m->nbufs + 1, sizeof *m->bufs);
    if (!m->inputs || !m->outputs || !m->weights || !m->layers || !m->bufs) {
        snprintf(model_error, sizeof model_error, "out of memory reading the model description");
        return;
    }
    Parser ps = {text, 1, false};
    char key[32];
    int ni = 0, no = 0, nw = 0, nl = 0, nb = 0;
    long long abi = -1;
    bool is_end = false;
    while (*ps.p && !ps.is_bad && !is_end) {
        word(&ps, key, sizeof key);
        if (!strcmp(key, "snnc-model")) abi = number(&ps);
        else if (!strcmp(key, "name")) word(&ps, m->name, sizeof m->name);
        else if (!strcmp(key, "devices")) word(&ps, m->devices, sizeof m->devices);
        else if (!strcmp(key, "timesteps")) m->timesteps = (int)number(&ps);
        else if (!strcmp(key, "kernels")) {
            m->nstatic = (int)number(&ps);
            m->nstep = (int)number(&ps);
        } else if (!strcmp(key, "input")) {
            parse_tensor(&ps, &m->inputs[ni], true);
            if (m->inputs[ni].info.per_step) m->inputs[ni].info.numel *= m->timesteps;
            ni++;
        } else if (!strcmp(key, "output")) {
            parse_tensor(&ps, &m->outputs[no], true);
            if (m->outputs[no].info.per_step) m->outputs[no].info.numel *= m->timesteps;
            no++;
        } else if (!strcmp(key, "weight")) parse_tensor(&ps, &m->weights[nw++], false);
        else if (!strcmp(key, "layer")) {
            word(&ps, m->layers[nl].name, sizeof m->layers[nl].name);
            m->layers[nl++].buf = (int)number(&ps);
        } else if (!strcmp(key, "buf")) parse_buf(&ps, &m->bufs[nb++]);
        else if (!strcmp(key, "end")) is_end = true;
        else ps.is_bad = true;
        end_line(&ps);
    }
    if (abi != SNNK_ABI_VERSION) {
        snprintf(model_error, sizeof model_error,
                 "the model's description is for runtime ABI %lld, this runtime is %d", abi,
                 SNNK_ABI_VERSION);
        return;
    }
    if (ps.is_bad || !is_end || !model_check(m)) {
        snprintf(model_error, sizeof model_error,
                 "the model's description is malformed (line %d)", ps.line - 1);
        return;
    }
    model_ok = m;
}

/* the parsed model's tables go when the library is unloaded (dlclose), so nothing is left behind */
__attribute__((destructor)) static void
model_release(void)
{
    free(model.inputs);
    free(model.outputs);
    free(model.weights);
    free(model.layers);
    free(model.bufs);
    memset(&model, 0, sizeof model);
    model_ok = NULL;
}

const snn_model *
snn_model_get(void)
{
    pthread_once(&model_once, model_parse);
    if (!model_ok) fail(SNN_ERR_STATE, "%s", model_error);
    return model_ok;
}

const char *
snn_model_name(const snn_model *m)
{
    return m ? m->name : NULL;
}

int
snn_model_timesteps(const snn_model *m)
{
    return m ? m->timesteps : -1;
}

int
snn_model_num_inputs(const snn_model *m)
{
    return m ? m->ninputs : -1;
}

int
snn_model_num_outputs(const snn_model *m)
{
    return m ? m->noutputs : -1;
}

int
snn_model_num_weights(const snn_model *m)
{
    return m ? m->nweights : -1;
}

int
snn_model_num_layers(const snn_model *m)
{
    return m ? m->nlayers : -1;
}

const char *
snn_model_layer_name(const snn_model *m, int i)
{
    if (!m || i < 0 || i >= m->nlayers) {
        fail(SNN_ERR_ARGUMENT, "snn_model_layer_name: %s", m ? "layer index out of range" :
                                                               "model is NULL");
        return NULL;
    }
    return m->layers[i].name;
}

static snn_status
tensor_info(const char *fn, const snn_model *m, const Tensor *ts, int n, int i,
            snn_tensor_info *info)
{
    if (!m || !info) return fail(SNN_ERR_ARGUMENT, "%s: %s is NULL", fn, m ? "info" : "model");
    if (i < 0 || i >= n)
        return fail(SNN_ERR_ARGUMENT, "%s: index %d out of range (the model has %d)", fn, i, n);
    *info = ts[i].info;
    return SNN_OK;
}

snn_status
snn_model_input(const snn_model *m, int i, snn_tensor_info *info)
{
    return tensor_info("snn_model_input", m, m ? m->inputs : NULL, m ? m->ninputs : 0, i, info);
}

snn_status
snn_model_output(const snn_model *m, int i, snn_tensor_info *info)
{
    return tensor_info("snn_model_output", m, m ? m->outputs : NULL, m ? m->noutputs : 0, i,
                       info);
}

snn_status
snn_model_weight(const snn_model *m, int i, snn_tensor_info *info)
{
    return tensor_info("snn_model_weight", m, m ? m->weights : NULL, m ? m->nweights : 0, i,
                       info);
}

int
snn_model_has_weights(const snn_model *m)
{
    return m && snnk_weights_size > 0;
}

const char *
snn_model_devices(const snn_model *m)
{
    return m ? m->devices : NULL;
}

/* ---- weights ---- */

/* Check set against the model and build packed weight memory into mem[nbufs] (NULL where a buffer
 * is not a weight). On failure frees what it made and returns the status. */
static snn_status
weights_from_set(const snn_model *m, const RtTensorSet *set, const char *what, float **mem)
{
    for (int i = 0; i < m->nweights; i++) {
        const snn_tensor_info *w = &m->weights[i].info;
        const RtTensor *t = rt_tensorset_find(set, w->name);
        if (!t)
            return fail(SNN_ERR_WEIGHTS, "%s has no tensor '%s' (the model's weight %d)", what,
                        w->name, i);
        if (t->dtype != RT_F32 && t->dtype != RT_F16 && t->dtype != RT_BF16)
            return fail(SNN_ERR_WEIGHTS, "tensor '%s' in %s has dtype %s; weights must be f32, "
                        "f16 or bf16", w->name, what, rt_dtype_name(t->dtype));
        bool same = t->rank == w->rank;
        for (int d = 0; same && d < w->rank; d++)
            same = t->dims[d] == w->dims[d];
        if (!same) {
            char want[128] = "[", got[128] = "[";
            for (int d = 0; d < w->rank; d++)
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "",
                         (long long)w->dims[d]);
            for (int d = 0; d < t->rank; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
                         (long long)t->dims[d]);
            return fail(SNN_ERR_WEIGHTS, "tensor '%s' in %s has shape %s], the model wants %s]",
                        w->name, what, got, want);
        }
    }
    for (int i = 0; i < set->ntensors; i++) {
        const char *name = set->tensors[i].name ? set->tensors[i].name : "";
        bool is_used = false;
        for (int k = 0; k < m->nweights && !is_used; k++)
            is_used = !strcmp(m->weights[k].name, name);
        if (!is_used)
            return fail(SNN_ERR_WEIGHTS, "tensor '%s' in %s is not a weight of model '%s'", name,
                        what, m->name);
    }
    for (int b = 0; b < m->nbufs; b++) {
        const Buf *kb = &m->bufs[b];
        mem[b] = NULL;
        if (kb->kind != BK_WEIGHT) continue;
        const snn_tensor_info *w = &m->weights[kb->io].info;
        const RtTensor *t = rt_tensorset_find(set, w->name);
        mem[b] = malloc((size_t)(w->numel ? w->numel : 1) * sizeof(float));
        if (!mem[b]) {
            for (int k = 0; k < b; k++)
                free(mem[k]);
            return fail(SNN_ERR_MEMORY, "out of memory for weight '%s'", w->name);
        }
        if (kb->nperm) rt_transpose_f32(t->data, w->rank, w->dims, kb->perm, mem[b]);
        else if (w->numel) memcpy(mem[b], t->data, (size_t)w->numel * sizeof(float));
    }
    return SNN_OK;
}

static snn_status
load_weights_bytes(snn_session *s, const void *data, size_t size, const char *what)
{
    RtTensorSet set;
    char msg[512];
    memset(&set, 0, sizeof set);
    if (rt_safetensors_parse(data, size, what, &set, msg, sizeof msg) != 0) {
        rt_tensorset_free(&set);
        return fail(SNN_ERR_WEIGHTS, "%s", msg);
    }
    const snn_model *m = s->m;
    float **mem = calloc((size_t)m->nbufs + 1, sizeof *mem);
    if (!mem) {
        rt_tensorset_free(&set);
        return fail(SNN_ERR_MEMORY, "out of memory loading weights");
    }
    snn_status st = weights_from_set(m, &set, what, mem);
    rt_tensorset_free(&set);
    if (st != SNN_OK) {
        free(mem);
        return st;
    }
    pthread_mutex_lock(&s->lock);
    for (int b = 0; b < m->nbufs; b++)
        if (m->bufs[b].kind == BK_WEIGHT) {
            free(s->weight_mem[b]);
            s->weight_mem[b] = mem[b];
            s->bufs[b] = mem[b];
        }
    s->has_weights = true;
    pthread_mutex_unlock(&s->lock);
    free(mem);
    return SNN_OK;
}

snn_status
snn_session_load_weights(snn_session *s, const void *data, size_t size)
{
    if (!s || !data)
        return fail(SNN_ERR_ARGUMENT, "snn_session_load_weights: %s is NULL",
                    s ? "data" : "session");
    return load_weights_bytes(s, data, size, "the weights buffer");
}

snn_status
snn_session_load_weights_file(snn_session *s, const char *path)
{
    if (!s || !path)
        return fail(SNN_ERR_ARGUMENT, "snn_session_load_weights_file: %s is NULL",
                    s ? "path" : "session");
    unsigned char *buf;
    size_t len;
    char msg[512];
    if (rt_read_file(path, &buf, &len, msg, sizeof msg) != 0) return fail(SNN_ERR_IO, "%s", msg);
    char what[600];
    snprintf(what, sizeof what, "'%s'", path);
    snn_status st = load_weights_bytes(s, buf, len, what);
    free(buf);
    return st;
}

/* ---- sessions ---- */

static int
online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}

void
snn_session_destroy(snn_session *s)
{
    if (!s) return;
    rt_pool_free(s->pool);
    if (s->weight_mem)
        for (int b = 0; b < s->m->nbufs; b++)
            free(s->weight_mem[b]);
    free(s->weight_mem);
    free(s->arena);
    free(s->temp_off);
    free(s->bufs);
    free(s->counts);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

snn_status
snn_session_create(const snn_model *m, const char *device, int max_batch, int threads,
                   snn_session **out)
{
    if (out) *out = NULL;
    if (!m || !out)
        return fail(SNN_ERR_ARGUMENT, "snn_session_create: %s is NULL", m ? "out" : "model");
    if (m != model_ok) return fail(SNN_ERR_ARGUMENT, "snn_session_create: not a model of this "
                                                     "library (use snn_model_get())");
    if (device && *device && strcmp(device, "auto") != 0 && strcmp(device, "cpu") != 0) {
        if (!strncmp(device, "cuda", 4))
            return fail(SNN_ERR_DEVICE, "device '%s': this library holds code for %s only", device,
                        m->devices);
        return fail(SNN_ERR_DEVICE, "unknown device '%s' (this library runs on: %s)", device,
                    m->devices);
    }
    if (max_batch < 1)
        return fail(SNN_ERR_ARGUMENT, "snn_session_create: max_batch must be at least 1, not %d",
                    max_batch);
    if (threads < 0)
        return fail(SNN_ERR_ARGUMENT, "snn_session_create: threads must be 0 (one per core) or "
                                      "more, not %d", threads);
    /* the arena: every temporary buffer at its size for max_batch, aligned for vector loads */
    size_t total = 0;
    for (int b = 0; b < m->nbufs; b++) {
        const Buf *kb = &m->bufs[b];
        if (kb->kind != BK_TEMP) continue;
        double n = (double)kb->per_batch * max_batch + (double)kb->fixed;
        if (n * (double)kb->elem > 1e15)
            return fail(SNN_ERR_MEMORY, "max_batch %d needs more memory than can be had",
                        max_batch);
        total += ((size_t)n * kb->elem + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    }
    snn_session *s = calloc(1, sizeof *s);
    if (!s) return fail(SNN_ERR_MEMORY, "out of memory for a session");
    pthread_mutex_init(&s->lock, NULL);
    s->m = m;
    s->max_batch = max_batch;
    s->bufs = calloc((size_t)m->nbufs + 1, sizeof *s->bufs);
    s->temp_off = calloc((size_t)m->nbufs + 1, sizeof *s->temp_off);
    s->weight_mem = calloc((size_t)m->nbufs + 1, sizeof *s->weight_mem);
    s->counts = calloc((size_t)m->nlayers + 1, sizeof *s->counts);
    s->arena = aligned_alloc(ARENA_ALIGN, total ? total : ARENA_ALIGN);
    if (!s->bufs || !s->temp_off || !s->weight_mem || !s->counts || !s->arena) {
        snn_session_destroy(s);
        return fail(SNN_ERR_MEMORY, "out of memory for a session of batch %d (%zu bytes)",
                    max_batch, total);
    }
    size_t off = 0;
    for (int b = 0; b < m->nbufs; b++) {
        const Buf *kb = &m->bufs[b];
        if (kb->kind != BK_TEMP) continue;
        s->temp_off[b] = off;
        s->bufs[b] = s->arena + off;
        size_t n = (size_t)(kb->per_batch * max_batch + kb->fixed);
        off += (n * kb->elem + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    }
    char msg[256];
    s->pool = rt_pool_new(threads ? threads : online_cores(), msg, sizeof msg);
    if (!s->pool) {
        snn_session_destroy(s);
        return fail(SNN_ERR_MEMORY, "%s", msg);
    }
    if (snnk_weights_size > 0) {
        snn_status st = load_weights_bytes(s, snnk_weights, (size_t)snnk_weights_size,
                                           "the library's embedded weights");
        if (st != SNN_OK) {
            snn_session_destroy(s);
            return st;
        }
    }
    *out = s;
    return SNN_OK;
}

static double
now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

snn_status
snn_run(snn_session *s, int64_t first_sample, int batch, const float *const *inputs,
        float *const *outputs)
{
    if (!s) return fail(SNN_ERR_ARGUMENT, "snn_run: session is NULL");
    const snn_model *m = s->m;
    if (batch < 1 || batch > s->max_batch)
        return fail(SNN_ERR_ARGUMENT, "snn_run: batch %d is not in 1..%d (the session's "
                                      "max_batch)", batch, s->max_batch);
    if (first_sample < 0)
        return fail(SNN_ERR_ARGUMENT, "snn_run: first_sample %lld is negative",
                    (long long)first_sample);
    if (m->ninputs && !inputs) return fail(SNN_ERR_ARGUMENT, "snn_run: inputs is NULL");
    if (m->noutputs && !outputs) return fail(SNN_ERR_ARGUMENT, "snn_run: outputs is NULL");
    for (int i = 0; i < m->ninputs; i++)
        if (!inputs[i])
            return fail(SNN_ERR_ARGUMENT, "snn_run: inputs[%d] ('%s') is NULL", i,
                        m->inputs[i].name);
    for (int i = 0; i < m->noutputs; i++)
        if (!outputs[i])
            return fail(SNN_ERR_ARGUMENT, "snn_run: outputs[%d] ('%s') is NULL", i,
                        m->outputs[i].name);
    pthread_mutex_lock(&s->lock);
    if (!s->has_weights) {
        pthread_mutex_unlock(&s->lock);
        return fail(SNN_ERR_STATE, "snn_run: no weights loaded (this library carries none: call "
                                   "snn_session_load_weights_file first)");
    }
    double t0 = now_seconds();
    for (int b = 0; b < m->nbufs; b++) {
        const Buf *kb = &m->bufs[b];
        switch (kb->kind) {
        case BK_INPUT: s->bufs[b] = (void *)inputs[kb->io]; break;
        case BK_OUTPUT: s->bufs[b] = outputs[kb->io]; break;
        case BK_WEIGHT: break;
        case BK_TEMP:
            /* the kernels' temporaries start at zero, unless always stored before loaded */
            if (kb->needs_zero)
                memset(s->bufs[b], 0, (size_t)(kb->per_batch * batch + kb->fixed) * kb->elem);
            break;
        }
    }
    snnk_run(s->bufs, batch, first_sample, rt_pool_rt(s->pool));
    for (int l = 0; l < m->nlayers; l++) {
        const Buf *kb = &m->bufs[m->layers[l].buf];
        const int64_t *c = s->bufs[m->layers[l].buf];
        int64_t n = kb->per_batch * batch + kb->fixed, sum = 0;
        for (int64_t i = 0; i < n; i++)
            sum += c[i];
        s->counts[l] += (double)sum;
    }
    double dt = now_seconds() - t0;
    s->stats.runs++;
    s->stats.samples += batch;
    s->stats.kernel_launches += m->nstatic + (int64_t)m->nstep * m->timesteps;
    s->stats.seconds += dt;
    s->stats.last_seconds = dt;
    pthread_mutex_unlock(&s->lock);
    return SNN_OK;
}

snn_status
snn_session_spike_counts(snn_session *s, double *counts, int n)
{
    if (!s || !counts)
        return fail(SNN_ERR_ARGUMENT, "snn_session_spike_counts: %s is NULL",
                    s ? "counts" : "session");
    if (n != s->m->nlayers)
        return fail(SNN_ERR_ARGUMENT, "snn_session_spike_counts: n is %d, the model has %d "
                                      "counted layers", n, s->m->nlayers);
    pthread_mutex_lock(&s->lock);
    memcpy(counts, s->counts, (size_t)n * sizeof *counts);
    pthread_mutex_unlock(&s->lock);
    return SNN_OK;
}

snn_status
snn_session_stats(snn_session *s, snn_stats *stats)
{
    if (!s || !stats)
        return fail(SNN_ERR_ARGUMENT, "snn_session_stats: %s is NULL", s ? "stats" : "session");
    pthread_mutex_lock(&s->lock);
    *stats = s->stats;
    pthread_mutex_unlock(&s->lock);
    return SNN_OK;
}

snn_status
snn_session_reset_stats(snn_session *s)
{
    if (!s) return fail(SNN_ERR_ARGUMENT, "snn_session_reset_stats: session is NULL");
    pthread_mutex_lock(&s->lock);
    memset(&s->stats, 0, sizeof s->stats);
    memset(s->counts, 0, (size_t)s->m->nlayers * sizeof *s->counts);
    pthread_mutex_unlock(&s->lock);
    return SNN_OK;
}

int
snn_session_threads(const snn_session *s)
{
    return s ? rt_pool_nthreads(s->pool) : -1;
}

const char *
snn_session_device(const snn_session *s)
{
    return s ? "cpu" : NULL;
}
