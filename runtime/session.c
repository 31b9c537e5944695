/* session.c: the C ABI of model.so (snn.h): the model, sessions, weights and runs, on the CPU
 * (the generated schedule, through runtime/kernel_abi.h) or a CUDA device (runtime/cuda_exec.c).
 * snnc links this file, with the rest of the model runtime (model_parts.c, the CUDA driver and
 * executor, safetensors, layouts, the thread pool), to the generated object, which defines:
 *   snnk_run           the generated CPU schedule (runtime/kernel_abi.h)
 *   snnk_meta          the program's description as text (format: runtime/model_parts.c)
 *   snnk_weights, snnk_weights_size   the weights as safetensors bytes (size 0: none embedded)
 *   snnk_cuda_images, snnk_cuda_images_size   the CUDA images its cuda_image records index (size 0:
 *                      no CUDA code; an object from before the CUDA backend has neither)
 *   snnk_train_fwd, snnk_train_bwd   the training step's halves, in a library built with --train
 *   snnk_train_bwd_in                 its kernels only the inputs' gradients need
 * They are weak (and hidden) here, so that snnc, which links this runtime without a generated
 * object and makes its models with rt_model_create, links too; snn_model_get() then says there is
 * no model. Nothing here prints or exits; runs allocate nothing. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/bigmem.h"
#include "runtime/clock.h"
#include "runtime/cuda_exec.h"
#include "runtime/f16.h"
#include "runtime/kernel_abi.h"
#include "runtime/layout.h"
#include "runtime/model_parts.h"
#include "runtime/pool.h"
#include "runtime/snn.h"
#include "runtime/tensor_io.h"

/* defined by the generated object of a model.so; NULL (weak, undefined) elsewhere */
#define SNNK_WEAK __attribute__((weak, visibility("hidden")))
extern const char snnk_meta[] SNNK_WEAK;
extern const unsigned char snnk_weights[] SNNK_WEAK;
extern const uint64_t snnk_weights_size SNNK_WEAK;
extern const unsigned char snnk_cuda_images[] SNNK_WEAK;
extern const uint64_t snnk_cuda_images_size SNNK_WEAK;
void snnk_run(void **bufs, int64_t batch, int64_t sample_base, SnnkRt *rt) SNNK_WEAK;
/* a trainable library's training step (runtime/trainer.c runs it) */
void snnk_train_fwd(void **bufs, int64_t batch, int64_t sample_base, SnnkRt *rt) SNNK_WEAK;
void snnk_train_bwd(void **bufs, int64_t batch, int64_t sample_base, SnnkRt *rt) SNNK_WEAK;
void snnk_train_bwd_in(void **bufs, int64_t batch, int64_t sample_base, SnnkRt *rt) SNNK_WEAK;

enum { ARENA_ALIGN = 64 };

struct snn_session {
    const snn_model *m;
    int max_batch;
    char device[24];        /* "cpu", "cuda:0" */
    RtPool *pool;           /* cpu */
    RtCudaExec *cuda;       /* cuda */
    pthread_mutex_t lock;
    void **bufs;            /* [nbufs] what the CPU code gets */
    unsigned char *arena;   /* cpu: every temporary buffer, sized for max_batch */
    void **weight_mem;      /* [nbufs] cpu: owned weight memory (packed), NULL until loaded */
    const void **in_ptrs;   /* [ninputs] the inputs of the run under way */
    void **out_ptrs;        /* [noutputs] */
    bool has_weights;
    double *counts;         /* [nlayers] */
    snn_stats stats;
};

/* errors: rt_fail and rt_clear_error keep the thread's last message (runtime/error.c) */

uint32_t
snn_abi_version(void)
{
    rt_clear_error();
    return SNN_ABI_VERSION;
}

const char *
snn_status_name(snn_status status)
{
    rt_clear_error();
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

/* ---- the model: this library's, parsed from snnk_meta once ---- */

static snn_model model;
static const snn_model *model_ok; /* &model once parsed and checked, else NULL */
static char model_error[512];
static pthread_once_t model_once = PTHREAD_ONCE_INIT;

static void
model_parse(void)
{
    if (!snnk_meta) {
        snprintf(model_error, sizeof model_error, "this program holds no compiled model "
                 "(snn_model_get is for a model.so built by snnc)");
        return;
    }
    /* the weak symbols' addresses are NULL where the object does not define them */
    size_t wsize = &snnk_weights_size ? (size_t)snnk_weights_size : 0;
    size_t isize = &snnk_cuda_images_size ? (size_t)snnk_cuda_images_size : 0;
    if (rt_model_parse(&model, snnk_meta, snnk_run, snnk_weights, snnk_weights ? wsize : 0,
                       snnk_cuda_images, snnk_cuda_images ? isize : 0, model_error,
                       sizeof model_error)) {
        model.train_fwd = snnk_train_fwd; /* the training step's code, where there is one */
        model.train_bwd = snnk_train_bwd;
        model.train_bwd_in = snnk_train_bwd_in;
        model_ok = &model;
    }
}

/* the parsed model's tables go when the library is unloaded (dlclose), so nothing is left behind */
__attribute__((destructor)) static void
model_release(void)
{
    rt_model_clear(&model);
    model_ok = NULL;
}

const snn_model *
snn_model_get(void)
{
    rt_clear_error();
    pthread_once(&model_once, model_parse);
    if (!model_ok) rt_fail(SNN_ERR_STATE, "%s", model_error);
    return model_ok;
}

const char *
snn_model_name(const snn_model *m)
{
    rt_clear_error();
    return m ? m->name : NULL;
}

int
snn_model_timesteps(const snn_model *m)
{
    rt_clear_error();
    return m ? m->timesteps : -1;
}

int
snn_model_num_inputs(const snn_model *m)
{
    rt_clear_error();
    return m ? m->ninputs : -1;
}

int
snn_model_num_outputs(const snn_model *m)
{
    rt_clear_error();
    return m ? m->noutputs : -1;
}

int
snn_model_num_weights(const snn_model *m)
{
    rt_clear_error();
    return m ? m->nweights : -1;
}

int
snn_model_num_layers(const snn_model *m)
{
    rt_clear_error();
    return m ? m->nlayers : -1;
}

const char *
snn_model_layer_name(const snn_model *m, int i)
{
    rt_clear_error();
    if (!m || i < 0 || i >= m->nlayers) {
        rt_fail(SNN_ERR_ARGUMENT, "snn_model_layer_name: %s", m ? "layer index out of range" :
                                                               "model is NULL");
        return NULL;
    }
    return m->layers[i].name;
}

static snn_status
tensor_info(const char *fn, const snn_model *m, const RtModelTensor *ts, int n, int i,
            snn_tensor_info *info)
{
    if (!m || !info) return rt_fail(SNN_ERR_ARGUMENT, "%s: %s is NULL", fn, m ? "info" : "model");
    if (i < 0 || i >= n)
        return rt_fail(SNN_ERR_ARGUMENT, "%s: index %d out of range (the model has %d)", fn, i, n);
    *info = ts[i].info;
    return SNN_OK;
}

snn_status
snn_model_input(const snn_model *m, int i, snn_tensor_info *info)
{
    rt_clear_error();
    return tensor_info("snn_model_input", m, m ? m->inputs : NULL, m ? m->ninputs : 0, i, info);
}

snn_status
snn_model_output(const snn_model *m, int i, snn_tensor_info *info)
{
    rt_clear_error();
    return tensor_info("snn_model_output", m, m ? m->outputs : NULL, m ? m->noutputs : 0, i,
                       info);
}

snn_status
snn_model_weight(const snn_model *m, int i, snn_tensor_info *info)
{
    rt_clear_error();
    return tensor_info("snn_model_weight", m, m ? m->weights : NULL, m ? m->nweights : 0, i,
                       info);
}

int
snn_model_has_weights(const snn_model *m)
{
    rt_clear_error();
    return m && m->weight_size > 0;
}

const char *
snn_model_devices(const snn_model *m)
{
    rt_clear_error();
    return m ? m->devices : NULL;
}

/* ---- weights ---- */

/* Check set against the model and build packed weight memory into mem[nbufs] for the program
 * buffers bufs (the CPU's or CUDA's; NULL where a buffer is not a weight). On failure frees what
 * it made and returns the status. */
/* every weight of m in set, of its shape, a float type, finite (model_parts.h) */
snn_status
rt_weights_check(const snn_model *m, const RtTensorSet *set, const char *what)
{
    for (int i = 0; i < m->nweights; i++) {
        const snn_tensor_info *w = &m->weights[i].info;
        const RtTensor *t = rt_tensorset_find(set, w->name);
        if (!t)
            return rt_fail(SNN_ERR_WEIGHTS, "%s has no tensor '%s' (the model's weight %d)", what,
                        w->name, i);
        if (t->dtype != RT_F32 && t->dtype != RT_F16 && t->dtype != RT_BF16)
            return rt_fail(SNN_ERR_WEIGHTS, "tensor '%s' in %s has dtype %s; weights must be f32, "
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
            return rt_fail(SNN_ERR_WEIGHTS, "tensor '%s' in %s has shape %s], the model wants %s]",
                        w->name, what, got, want);
        }
        int64_t first, bad = rt_count_nonfinite(t->data, t->numel, &first);
        if (bad)
            return rt_fail(SNN_ERR_WEIGHTS, "tensor '%s' in %s holds %lld value%s that %s not finite "
                        "(element %lld is %s); weights must be numbers", w->name, what,
                        (long long)bad, bad == 1 ? "" : "s", bad == 1 ? "is" : "are",
                        (long long)first, t->data[first] != t->data[first] ? "NaN"
                                          : t->data[first] > 0             ? "inf"
                                                                           : "-inf");
    }
    return SNN_OK;
}

static snn_status
weights_from_set(const snn_model *m, const RtTensorSet *set, const char *what, const RtBuf *bufs,
                 int nbufs, void **mem)
{
    snn_status st = rt_weights_check(m, set, what);
    if (st != SNN_OK) return st;
    for (int i = 0; i < set->ntensors; i++) {
        const char *name = set->tensors[i].name ? set->tensors[i].name : "";
        bool is_used = false;
        for (int k = 0; k < m->nweights && !is_used; k++)
            is_used = !strcmp(m->weights[k].name, name);
        if (!is_used)
            return rt_fail(SNN_ERR_WEIGHTS, "tensor '%s' in %s is not a weight of model '%s'", name,
                        what, m->name);
    }
    /* a weight the model stores in 16 bits must fit them: past f16's 65504 (bf16's ~3.4e38) it
     * would become infinite, where the compiler refuses it (ir/weights.c weights_overflow) */
    for (int b = 0; b < nbufs; b++) {
        const RtBuf *kb = &bufs[b];
        if (kb->kind != RT_BUF_WEIGHT || (kb->type != RT_ELEM_F16 && kb->type != RT_ELEM_BF16))
            continue;
        const snn_tensor_info *w = &m->weights[kb->io].info;
        const RtTensor *t = rt_tensorset_find(set, w->name);
        bool is_bf16 = kb->type == RT_ELEM_BF16;
        for (int64_t i = 0; i < t->numel; i++) {
            float y = is_bf16 ? rt_bf16_to_f32(rt_f32_to_bf16(t->data[i]))
                              : rt_f16_to_f32(rt_f32_to_f16(t->data[i]));
            if (kb->is_exact && memcmp(&y, &t->data[i], sizeof y) != 0)
                return rt_fail(SNN_ERR_WEIGHTS,
                               "tensor '%s' in %s: element %lld (%.9g) is not a %s value; the "
                               "model stores this weight in %s because the weights it was built "
                               "with all were (lossless), so it cannot hold these; rebuild it with "
                               "these weights, or with --disable-pass=narrow-weights to store f32",
                               w->name, what, (long long)i, (double)t->data[i],
                               is_bf16 ? "bf16" : "f16", is_bf16 ? "bf16" : "f16");
            if (!isinf(y)) continue;
            return rt_fail(SNN_ERR_WEIGHTS,
                           "tensor '%s' in %s: element %lld (%g) is past the range "
                           "of %s, the type the model stores it in; rebuild the model with "
                           "--precision=fp32 or scale the weights",
                           w->name, what, (long long)i, (double)t->data[i],
                           is_bf16 ? "bf16" : "f16");
        }
    }
    for (int b = 0; b < nbufs; b++) {
        const RtBuf *kb = &bufs[b];
        mem[b] = NULL;
        if (kb->kind != RT_BUF_WEIGHT) continue;
        const snn_tensor_info *w = &m->weights[kb->io].info;
        const RtTensor *t = rt_tensorset_find(set, w->name);
        size_t n = (size_t)(w->numel ? w->numel : 1);
        bool is_16 = kb->type == RT_ELEM_F16 || kb->type == RT_ELEM_BF16;
        float *f = is_16 ? malloc(n * sizeof *f) : rt_big_alloc(n * sizeof *f);
        uint16_t *h = is_16 ? rt_big_alloc(n * sizeof *h) : NULL;
        if (!f || (is_16 && !h)) {
            free(f);
            for (int k = 0; k < b; k++)
                free(mem[k]);
            return rt_fail(SNN_ERR_MEMORY, "out of memory for weight '%s'", w->name);
        }
        if (kb->nperm) {
            int64_t dims[SNN_MAX_RANK + 1];
            int rank = rt_split_dims(w->rank, w->dims, kb->split, dims);
            rt_transpose_f32(t->data, rank, dims, kb->perm, f);
        }
        else if (w->numel) memcpy(f, t->data, (size_t)w->numel * sizeof *f);
        mem[b] = f;
        if (is_16) { /* rounded as the compiler rounded it (ir/weights.c) */
            rt_narrow16(f, w->numel, kb->type == RT_ELEM_BF16, h);
            free(f);
            mem[b] = h;
        }
    }
    return SNN_OK;
}

static void
free_weight_mem(int nbufs, void **mem)
{
    for (int b = 0; b < nbufs; b++)
        free(mem[b]);
    free(mem);
}

/* every weight of s from set (checked first: nothing changes on error) */
static snn_status
install_set(snn_session *s, const RtTensorSet *set, const char *what)
{
    char msg[512];
    const snn_model *m = s->m;
    /* packed for the program the session runs: CUDA's has buffers of its own */
    const RtBuf *bufs = s->cuda ? m->cuda_bufs : m->bufs;
    int nbufs = s->cuda ? m->ncuda_bufs : m->nbufs;
    void **mem = calloc((size_t)nbufs + 1, sizeof *mem);
    if (!mem) return rt_fail(SNN_ERR_MEMORY, "out of memory loading weights");
    snn_status st = weights_from_set(m, set, what, bufs, nbufs, mem);
    if (st != SNN_OK) {
        free(mem);
        return st;
    }
    pthread_mutex_lock(&s->lock);
    if (s->cuda) {
        /* uploaded whole or not at all; the host copies are not kept */
        st = rt_cuda_exec_set_weights(s->cuda, mem, msg, sizeof msg);
        if (st == SNN_OK) s->has_weights = true;
        pthread_mutex_unlock(&s->lock);
        free_weight_mem(nbufs, mem);
        return st == SNN_OK ? SNN_OK : rt_fail(st, "uploading weights: %s", msg);
    }
    for (int b = 0; b < m->nbufs; b++)
        if (m->bufs[b].kind == RT_BUF_WEIGHT) {
            free(s->weight_mem[b]);
            s->weight_mem[b] = mem[b];
            s->bufs[b] = mem[b];
        }
    s->has_weights = true;
    pthread_mutex_unlock(&s->lock);
    free(mem);
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
        return rt_fail(SNN_ERR_WEIGHTS, "%s", msg);
    }
    snn_status st = install_set(s, &set, what);
    rt_tensorset_free(&set);
    return st;
}

/* trainer.c's snn_session_copy_weights: the weights from float32 arrays in the model's layout
 * (a set viewing them, not owning them) */
snn_status rt_session_set_weights(snn_session *s, const float *const *w);
snn_status
rt_session_set_weights(snn_session *s, const float *const *w)
{
    const snn_model *m = s->m;
    RtTensorSet set = {calloc((size_t)m->nweights + 1, sizeof(RtTensor)), m->nweights};
    if (!set.tensors) return rt_fail(SNN_ERR_MEMORY, "out of memory copying weights");
    for (int i = 0; i < m->nweights; i++) {
        const snn_tensor_info *info = &m->weights[i].info;
        RtTensor *t = &set.tensors[i];
        t->name = (char *)m->weights[i].name;
        t->dtype = RT_F32;
        t->rank = info->rank;
        memcpy(t->dims, info->dims, (size_t)info->rank * sizeof info->dims[0]);
        t->numel = info->numel;
        t->data = (float *)w[i];
    }
    snn_status st = install_set(s, &set, "the trainer's weights");
    free(set.tensors);
    return st;
}

snn_status
snn_session_load_weights(snn_session *s, const void *data, size_t size)
{
    rt_clear_error();
    if (!s || !data)
        return rt_fail(SNN_ERR_ARGUMENT, "snn_session_load_weights: %s is NULL",
                    s ? "data" : "session");
    return load_weights_bytes(s, data, size, "the weights buffer");
}

snn_status
snn_session_load_weights_file(snn_session *s, const char *path)
{
    rt_clear_error();
    if (!s || !path)
        return rt_fail(SNN_ERR_ARGUMENT, "snn_session_load_weights_file: %s is NULL",
                    s ? "path" : "session");
    unsigned char *buf;
    size_t len;
    char msg[1024], why[160], size[32];
    const snn_model *m = s->m;
    int64_t numel = 0;
    for (int i = 0; i < m->nweights; i++)
        numel += m->weights[i].info.numel;
    rt_format_bytes(4 * (uint64_t)numel, size, sizeof size);
    snprintf(why, sizeof why, "the model's %d weights hold %s as f32, and a header", m->nweights,
             size);
    RtReadLimit lim = {rt_weights_file_limit(numel, m->nweights), 0, why};
    if (rt_read_file(path, &lim, &buf, &len, msg, sizeof msg) != 0)
        return rt_fail(SNN_ERR_IO, "%s", msg);
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

/* snn_session_destroy's work, for the error paths that must keep their message */
static void
session_free(snn_session *s)
{
    if (!s) return;
    rt_pool_free(s->pool);
    rt_cuda_exec_destroy(s->cuda);
    if (s->weight_mem)
        for (int b = 0; b < s->m->nbufs; b++)
            free(s->weight_mem[b]);
    free(s->weight_mem);
    free(s->arena);
    free(s->bufs);
    free(s->in_ptrs);
    free(s->out_ptrs);
    free(s->counts);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void
snn_session_destroy(snn_session *s)
{
    rt_clear_error();
    session_free(s);
}

/* "cuda" or "cuda:N": the ordinal, else -1 */
static int
cuda_ordinal(const char *device)
{
    if (!strcmp(device, "cuda")) return 0;
    if (strncmp(device, "cuda:", 5) != 0) return -1;
    const char *p = device + 5;
    long n = 0;
    if (!*p || (p[0] == '0' && p[1])) return -1; /* "cuda:", "cuda:01" */
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || n > 9999) return -1;
        n = n * 10 + (*p - '0');
    }
    return n > 9999 ? -1 : (int)n;
}

/* the CPU half: the arena holding every temporary buffer at its size for max_batch, aligned for
 * vector loads, and the thread pool */
static snn_status
open_cpu(snn_session *s, int threads)
{
    const snn_model *m = s->m;
    size_t *bytes = calloc((size_t)m->nbufs + 1, sizeof *bytes);
    size_t *off = calloc((size_t)m->nbufs + 1, sizeof *off);
    int *slot = calloc((size_t)m->nbufs + 1, sizeof *slot);
    int *span = calloc((size_t)m->nbufs + 1, sizeof *span);
    if (!bytes || !off || !slot || !span) {
        free(bytes);
        free(off);
        free(slot);
        free(span);
        return rt_fail(SNN_ERR_MEMORY, "out of memory");
    }
    for (int b = 0; b < m->nbufs; b++) {
        const RtBuf *kb = &m->bufs[b];
        bytes[b] = SIZE_MAX;
        slot[b] = kb->slot;
        span[b] = kb->span;
        if (kb->kind != RT_BUF_TEMP) continue;
        double n = (double)kb->per_batch * s->max_batch + (double)kb->fixed;
        if (n * (double)kb->elem > 1e15) {
            free(bytes);
            free(off);
            free(slot);
            free(span);
            return rt_fail(SNN_ERR_MEMORY, "max_batch %d needs more memory than can be had",
                        s->max_batch);
        }
        bytes[b] = rt_buf_bytes(kb, s->max_batch);
    }
    /* the memory plan: temporaries of one slot share a region */
    size_t total = rt_arena_layout(m->nbufs, bytes, slot, span, ARENA_ALIGN, off);
    free(span);
    s->arena = rt_big_alloc(total); /* ARENA_ALIGN (64) aligned */
    if (!s->arena) {
        free(bytes);
        free(off);
        free(slot);
        return rt_fail(SNN_ERR_MEMORY, "out of memory for a session of batch %d (%zu bytes)",
                    s->max_batch, total);
    }
    for (int b = 0; b < m->nbufs; b++)
        if (m->bufs[b].kind == RT_BUF_TEMP) s->bufs[b] = s->arena + off[b];
    free(bytes);
    free(off);
    free(slot);
    char msg[256];
    s->pool = rt_pool_new(threads ? threads : online_cores(), msg, sizeof msg);
    if (!s->pool) return rt_fail(SNN_ERR_MEMORY, "%s", msg);
    snprintf(s->device, sizeof s->device, "cpu");
    return SNN_OK;
}

static snn_status
open_cuda(snn_session *s, int ordinal)
{
    char msg[512];
    snn_status st = rt_cuda_exec_create(s->m, ordinal, s->max_batch, &s->cuda, msg, sizeof msg);
    if (st != SNN_OK) return rt_fail(st, "%s", msg);
    snprintf(s->device, sizeof s->device, "cuda:%d", ordinal);
    return SNN_OK;
}

snn_status
snn_session_create(const snn_model *m, const char *device, int max_batch, int threads,
                   snn_session **out)
{
    rt_clear_error();
    if (out) *out = NULL;
    if (!m || !out)
        return rt_fail(SNN_ERR_ARGUMENT, "snn_session_create: %s is NULL", m ? "out" : "model");
    if (m != model_ok && !rt_model_is_made(m))
        return rt_fail(SNN_ERR_ARGUMENT, "snn_session_create: not a model of this library (use "
                                      "snn_model_get())");
    if (max_batch < 1 || max_batch > SNN_MAX_BATCH)
        return rt_fail(SNN_ERR_ARGUMENT, "snn_session_create: max_batch must be from 1 to %d "
                                      "(SNN_MAX_BATCH), not %d", SNN_MAX_BATCH, max_batch);
    if (threads < 0 || threads > SNN_MAX_THREADS)
        return rt_fail(SNN_ERR_ARGUMENT, "snn_session_create: threads must be 0 (one per core) or "
                                      "from 1 to %d (SNN_MAX_THREADS), not %d", SNN_MAX_THREADS,
                    threads);
    bool has_cpu = m->entry != NULL, has_cuda = m->ncuda_kernels > 0;
    bool is_auto = !device || !*device || !strcmp(device, "auto");
    int ordinal = is_auto ? -1 : cuda_ordinal(device);
    if (!is_auto && strcmp(device, "cpu") != 0 && ordinal < 0) {
        if (!strncmp(device, "cuda", 4) && has_cuda)
            return rt_fail(SNN_ERR_DEVICE, "unknown device '%s' (CUDA devices are cuda, cuda:0, "
                                        "cuda:1, ...)", device);
        if (!strncmp(device, "cuda", 4))
            return rt_fail(SNN_ERR_DEVICE, "device '%s': this library holds code for %s only",
                        device, m->devices);
        return rt_fail(SNN_ERR_DEVICE, "unknown device '%s' (this library runs on: %s)", device,
                    m->devices);
    }
    if ((ordinal >= 0 && !has_cuda) || (!is_auto && ordinal < 0 && !has_cpu))
        return rt_fail(SNN_ERR_DEVICE, "device '%s': this library holds code for %s only", device,
                    m->devices);
    snn_session *s = calloc(1, sizeof *s);
    if (!s) return rt_fail(SNN_ERR_MEMORY, "out of memory for a session");
    pthread_mutex_init(&s->lock, NULL);
    s->m = m;
    s->max_batch = max_batch;
    s->bufs = calloc((size_t)m->nbufs + 1, sizeof *s->bufs);
    s->weight_mem = calloc((size_t)m->nbufs + 1, sizeof *s->weight_mem);
    s->in_ptrs = calloc((size_t)m->ninputs + 1, sizeof *s->in_ptrs);
    s->out_ptrs = calloc((size_t)m->noutputs + 1, sizeof *s->out_ptrs);
    s->counts = calloc((size_t)m->nlayers + 1, sizeof *s->counts);
    if (!s->bufs || !s->weight_mem || !s->in_ptrs || !s->out_ptrs || !s->counts) {
        session_free(s);
        return rt_fail(SNN_ERR_MEMORY, "out of memory for a session of batch %d", max_batch);
    }
    snn_status st;
    if (is_auto && has_cuda) {
        /* the GPU when it can be had, else the CPU (where there is CPU code) */
        st = open_cuda(s, 0);
        if (st != SNN_OK && has_cpu) st = open_cpu(s, threads);
    } else if (ordinal >= 0) {
        st = open_cuda(s, ordinal);
    } else {
        st = open_cpu(s, threads);
    }
    if (st == SNN_OK && m->weight_size > 0)
        st = load_weights_bytes(s, m->weight_data, m->weight_size,
                                "the library's embedded weights");
    if (st != SNN_OK) {
        session_free(s);
        return st;
    }
    *out = s;
    rt_clear_error(); /* "auto": a GPU that could not be had, and the CPU that could */
    return SNN_OK;
}


/* the checks snn_run and snn_run_device share */
static snn_status
check_run(const char *fn, snn_session *s, int64_t first_sample, int batch, bool has_inputs,
          bool has_outputs)
{
    if (!s) return rt_fail(SNN_ERR_ARGUMENT, "%s: session is NULL", fn);
    const snn_model *m = s->m;
    if (batch < 1 || batch > s->max_batch)
        return rt_fail(SNN_ERR_ARGUMENT, "%s: batch %d is not in 1..%d (the session's max_batch)", fn,
                    batch, s->max_batch);
    if (first_sample < 0)
        return rt_fail(SNN_ERR_ARGUMENT, "%s: first_sample %lld is negative", fn,
                    (long long)first_sample);
    /* the Poisson encoder keys element i of sample s by s * numel + i in 64 bits: past the end,
     * keys would wrap onto other samples' (sample 0's) */
    int64_t per = 1;
    for (int b = 0; b < m->nbufs; b++)
        if (m->bufs[b].per_batch > per) per = m->bufs[b].per_batch;
    int64_t end = INT64_MAX / per;
    if (first_sample > end - batch)
        return rt_fail(SNN_ERR_ARGUMENT, "%s: first_sample %lld + batch %d passes %lld, the last "
                    "sample whose Poisson spikes this model keys apart", fn,
                    (long long)first_sample, batch, (long long)end);
    if (m->ninputs && !has_inputs) return rt_fail(SNN_ERR_ARGUMENT, "%s: inputs is NULL", fn);
    if (m->noutputs && !has_outputs) return rt_fail(SNN_ERR_ARGUMENT, "%s: outputs is NULL", fn);
    return SNN_OK;
}

static snn_status
check_pointers(const char *fn, const snn_session *s)
{
    const snn_model *m = s->m;
    for (int i = 0; i < m->ninputs; i++)
        if (!s->in_ptrs[i])
            return rt_fail(SNN_ERR_ARGUMENT, "%s: inputs[%d] ('%s') is NULL", fn, i,
                        m->inputs[i].name);
    for (int i = 0; i < m->noutputs; i++)
        if (!s->out_ptrs[i])
            return rt_fail(SNN_ERR_ARGUMENT, "%s: outputs[%d] ('%s') is NULL", fn, i,
                        m->outputs[i].name);
    return SNN_OK;
}

/* a run whose pointers are in s->in_ptrs/out_ptrs, with the lock held; unlocks */
static snn_status
run_locked(snn_session *s, int64_t first_sample, int batch, bool is_device, bool queued,
           void *stream)
{
    const snn_model *m = s->m;
    if (!s->has_weights) {
        pthread_mutex_unlock(&s->lock);
        return rt_fail(SNN_ERR_STATE, "snn_run: no weights loaded (this library carries none: call "
                                   "snn_session_load_weights_file first)");
    }
    double t0 = rt_now_seconds();
    int64_t launches = 0, graphs = 0;
    if (s->cuda) {
        char msg[512];
        snn_status st =
            rt_cuda_exec_run(s->cuda, queued, stream, first_sample, batch, s->in_ptrs, s->out_ptrs,
                             is_device, &launches, &graphs, msg, sizeof msg);
        if (st != SNN_OK) {
            pthread_mutex_unlock(&s->lock);
            return rt_fail(st, "%s", msg);
        }
    } else {
        for (int b = 0; b < m->nbufs; b++) {
            const RtBuf *kb = &m->bufs[b];
            switch (kb->kind) {
            case RT_BUF_INPUT: s->bufs[b] = (void *)s->in_ptrs[kb->io]; break;
            case RT_BUF_OUTPUT: s->bufs[b] = s->out_ptrs[kb->io]; break;
            case RT_BUF_WEIGHT: break;
            case RT_BUF_TEMP:
                /* the kernels' temporaries start at zero, unless always stored before loaded */
                if (kb->needs_zero)
                    memset(s->bufs[b], 0, rt_buf_bytes(kb, batch));
                break;
            }
        }
        m->entry(s->bufs, batch, first_sample, rt_pool_rt(s->pool));
        for (int l = 0; l < m->nlayers; l++) {
            const RtBuf *kb = &m->bufs[m->layers[l].buf];
            int64_t n = kb->per_batch * batch + kb->fixed;
            s->counts[l] += (double)rt_count_sum(s->bufs[m->layers[l].buf], kb->elem, n);
        }
        launches = m->nstatic + (int64_t)m->nstep * m->timesteps;
    }
    double dt = rt_now_seconds() - t0;
    s->stats.runs++;
    s->stats.samples += batch;
    s->stats.kernel_launches += launches;
    s->stats.graph_launches += graphs;
    s->stats.seconds += dt;
    s->stats.last_seconds = dt;
    pthread_mutex_unlock(&s->lock);
    return SNN_OK;
}

snn_status
snn_run(snn_session *s, int64_t first_sample, int batch, const float *const *inputs,
        float *const *outputs)
{
    rt_clear_error();
    snn_status st = check_run("snn_run", s, first_sample, batch, inputs, outputs);
    if (st != SNN_OK) return st;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->m->ninputs; i++)
        s->in_ptrs[i] = inputs[i];
    for (int i = 0; i < s->m->noutputs; i++)
        s->out_ptrs[i] = outputs[i];
    st = check_pointers("snn_run", s);
    if (st != SNN_OK) {
        pthread_mutex_unlock(&s->lock);
        return st;
    }
    return run_locked(s, first_sample, batch, false, false, NULL);
}

/* snn_run_device and snn_run_stream (fn): device pointers on a cuda session; queued: on the
 * caller's stream, not waited for */
static snn_status
run_device(const char *fn, snn_session *s, bool queued, void *stream, int64_t first_sample,
           int batch, const void *const *inputs, void *const *outputs)
{
    rt_clear_error();
    snn_status st = check_run(fn, s, first_sample, batch, inputs, outputs);
    if (st != SNN_OK) return st;
    if (!s->cuda)
        return rt_fail(SNN_ERR_DEVICE, "%s needs a cuda session (this one is on %s)", fn,
                       s->device);
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->m->ninputs; i++)
        s->in_ptrs[i] = inputs[i];
    for (int i = 0; i < s->m->noutputs; i++)
        s->out_ptrs[i] = outputs[i];
    st = check_pointers(fn, s);
    if (st != SNN_OK) {
        pthread_mutex_unlock(&s->lock);
        return st;
    }
    return run_locked(s, first_sample, batch, true, queued, stream);
}

snn_status
snn_run_device(snn_session *s, int64_t first_sample, int batch, const void *const *inputs,
               void *const *outputs)
{
    return run_device("snn_run_device", s, false, NULL, first_sample, batch, inputs, outputs);
}

snn_status
snn_run_stream(snn_session *s, void *stream, int64_t first_sample, int batch,
               const void *const *inputs, void *const *outputs)
{
    return run_device("snn_run_stream", s, true, stream, first_sample, batch, inputs, outputs);
}

snn_status
snn_session_spike_counts(snn_session *s, double *counts, int n)
{
    rt_clear_error();
    if (!s || !counts)
        return rt_fail(SNN_ERR_ARGUMENT, "snn_session_spike_counts: %s is NULL",
                    s ? "counts" : "session");
    if (n != s->m->nlayers)
        return rt_fail(SNN_ERR_ARGUMENT, "snn_session_spike_counts: n is %d, the model has %d "
                                      "counted layers", n, s->m->nlayers);
    pthread_mutex_lock(&s->lock);
    snn_status st = SNN_OK;
    char msg[512];
    if (s->cuda) /* counted on the device: read when asked */
        st = rt_cuda_exec_counts(s->cuda, s->counts, msg, sizeof msg);
    if (st == SNN_OK) memcpy(counts, s->counts, (size_t)n * sizeof *counts);
    pthread_mutex_unlock(&s->lock);
    return st == SNN_OK ? SNN_OK : rt_fail(st, "snn_session_spike_counts: %s", msg);
}

snn_status
snn_session_stats(snn_session *s, snn_stats *stats)
{
    rt_clear_error();
    if (!s || !stats)
        return rt_fail(SNN_ERR_ARGUMENT, "snn_session_stats: %s is NULL", s ? "stats" : "session");
    pthread_mutex_lock(&s->lock);
    *stats = s->stats;
    pthread_mutex_unlock(&s->lock);
    return SNN_OK;
}

snn_status
snn_session_reset_stats(snn_session *s)
{
    rt_clear_error();
    if (!s) return rt_fail(SNN_ERR_ARGUMENT, "snn_session_reset_stats: session is NULL");
    pthread_mutex_lock(&s->lock);
    snn_status st = SNN_OK;
    char msg[512];
    if (s->cuda) st = rt_cuda_exec_reset_counts(s->cuda, msg, sizeof msg);
    if (st == SNN_OK) {
        memset(&s->stats, 0, sizeof s->stats);
        memset(s->counts, 0, (size_t)s->m->nlayers * sizeof *s->counts);
    }
    pthread_mutex_unlock(&s->lock);
    return st == SNN_OK ? SNN_OK : rt_fail(st, "snn_session_reset_stats: %s", msg);
}

int
snn_session_threads(const snn_session *s)
{
    rt_clear_error();
    if (!s) return -1;
    return s->pool ? rt_pool_nthreads(s->pool) : 1; /* cuda: the calling thread drives the GPU */
}

const char *
snn_session_device(const snn_session *s)
{
    rt_clear_error();
    return s ? s->device : NULL;
}
