/* cuda_exec.c: the CUDA half of a session. Creation loads the module (a cubin for the device's
 * exact compute capability, else PTX the driver compiles), allocates one device arena and one
 * stream; the first run of each batch size B captures the whole run into a CUDA graph (the zeroing
 * memsets, then the schedule as the kernel IR says: static kernels once, each run of consecutive
 * step kernels inside one loop t = 0..T-1); every run then copies host inputs in (device inputs
 * and outputs are used in place), writes the dyn array (the sample base and the input and output
 * addresses), launches that graph, copies host outputs out and synchronizes once. Spike counts
 * accumulate on the device and are read only when asked for. Every buffer
 * stays at one device address for the executor's life, so a graph serves every run of its B.
 * Every CUresult is checked; the context is pushed around each use so any thread can call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_driver.h"
#include "runtime/cuda_exec.h"
#include "runtime/layout.h"

enum { DEVICE_ALIGN = 256, BLOCKS_PER_SM = 32 };

struct RtCudaExec {
    const RtCudaDriver *drv;
    const snn_model *m;
    int ordinal, max_batch;
    int cc;       /* 10 * major + minor */
    int nsm;      /* multiprocessors: the grid cap is BLOCKS_PER_SM of them */
    CUdevice dev;
    CUcontext ctx; /* the device's primary context, retained; NULL until then */
    CUmodule module;
    CUfunction *fns;      /* [ncuda_kernels] */
    CUstream stream;
    /* the caller's stream of the last snn_run_stream whose work may still be pending (has_user;
     * 0 is the legacy default stream): what uses the arena from another stream waits for it
     * first (settle) */
    CUstream user;
    bool has_user;
    CUdeviceptr arena;
    CUdeviceptr *addr;    /* [nbufs] every buffer's device address (inputs/outputs: staging) */
    CUdeviceptr dyn;      /* ndyn int64 */
    int ndyn;             /* SNN_CUDA_DYN_IO + the input and output buffers */
    int *dyn_slot;        /* [nbufs] an input or output buffer's dyn slot, else -1 */
    size_t weight_bytes;  /* the weights: one region at the arena's start */
    CUgraphExec *graphs;  /* [max_batch + 1] by B, NULL until captured */
    int64_t *nlaunches;   /* [max_batch + 1] kernel launches in graphs[B] */
    int64_t *dyn_host;    /* [ndyn] what a run copies to dyn */
    int64_t *count_host;  /* every counted layer's i64 buffer at max_batch, one after another */
    size_t *count_off;    /* [nlayers] element offsets in count_host */
    uint64_t *param_vals; /* [max NB + 3] a launch's parameter values (the driver copies them) */
    void **params;        /* [max NB + 3] &param_vals[i] */
    CUresult last;        /* of the last failed call */
    /* rt_cuda_exec_alloc's memory beside the arena, and rt_cuda_exec_launch's functions */
    CUdeviceptr *extra;
    int nextra;
    size_t bytes; /* the arena's and the extra memory's */
    struct NamedFn {
        char name[64];
        CUfunction fn;
    } named[8];
    int nnamed;
};

static bool
cu_ok(RtCudaExec *x, CUresult r, const char *fn, char *err, size_t errlen)
{
    if (r == CUDA_SUCCESS) return true;
    x->last = r;
    rt_cuda_error(x->drv, r, fn, err, errlen);
    return false;
}

/* call a driver function of x's table; true if it succeeded, else the message is in err */
#define CU(fn, ...) cu_ok(x, x->drv->fn(__VA_ARGS__), #fn, err, errlen)

static snn_status
cu_status(const RtCudaExec *x)
{
    return x->last == CUDA_ERROR_OUT_OF_MEMORY ? SNN_ERR_MEMORY : SNN_ERR_DEVICE;
}

static bool
push(RtCudaExec *x, char *err, size_t errlen)
{
    return CU(cuCtxPushCurrent_v2, x->ctx);
}

static bool
pop(RtCudaExec *x, char *err, size_t errlen)
{
    CUcontext popped;
    return CU(cuCtxPopCurrent_v2, &popped);
}

static size_t
align_up(size_t n)
{
    return (n + DEVICE_ALIGN - 1) / DEVICE_ALIGN * DEVICE_ALIGN;
}

/* elements of buffer b at batch B */
static size_t
buf_elems(const RtBuf *b, int64_t batch)
{
    return (size_t)(b->per_batch * batch + b->fixed);
}

void
rt_cuda_exec_destroy(RtCudaExec *x)
{
    if (!x) return;
    const RtCudaDriver *d = x->drv;
    /* teardown goes on past failures: there is nobody to tell */
    if (x->ctx && d->cuCtxPushCurrent_v2(x->ctx) == CUDA_SUCCESS) {
        if (x->has_user) d->cuStreamSynchronize(x->user); /* nothing still reads the arena */
        for (int b = 0; x->graphs && b <= x->max_batch; b++)
            if (x->graphs[b]) d->cuGraphExecDestroy(x->graphs[b]);
        if (x->stream) d->cuStreamDestroy_v2(x->stream);
        if (x->arena) d->cuMemFree_v2(x->arena);
        for (int i = 0; i < x->nextra; i++)
            d->cuMemFree_v2(x->extra[i]);
        if (x->module) d->cuModuleUnload(x->module);
        CUcontext popped;
        d->cuCtxPopCurrent_v2(&popped);
    }
    if (x->ctx) d->cuDevicePrimaryCtxRelease_v2(x->dev);
    free(x->fns);
    free(x->addr);
    free(x->graphs);
    free(x->nlaunches);
    free(x->dyn_host);
    free(x->dyn_slot);
    free(x->count_host);
    free(x->count_off);
    free(x->param_vals);
    free(x->params);
    free(x->extra);
    free(x);
}

/* The image for the device: a cubin for exactly its compute capability, else the PTX of the
 * highest capability it has (the driver compiles PTX for newer devices, not older). */
static const RtCudaImage *
pick_image(const RtCudaExec *x, char *err, size_t errlen)
{
    const snn_model *m = x->m;
    const RtCudaImage *ptx = NULL;
    for (int i = 0; i < m->ncuda_images; i++) {
        const RtCudaImage *im = &m->cuda_images[i];
        if (im->is_cubin && im->cc == x->cc) return im;
        if (!im->is_cubin && im->cc <= x->cc && (!ptx || im->cc > ptx->cc)) ptx = im;
    }
    if (ptx) return ptx;
    char have[256] = "";
    for (int i = 0; i < m->ncuda_images; i++)
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", i ? "," : "",
                 m->cuda_images[i].arch);
    snprintf(err, errlen, "this model has CUDA code for %s only; cuda:%d is sm_%d", have,
             x->ordinal, x->cc);
    return NULL;
}

static bool
load_module(RtCudaExec *x, char *err, size_t errlen)
{
    const snn_model *m = x->m;
    const RtCudaImage *im = pick_image(x, err, errlen);
    if (!im) return false;
    /* a copy: aligned for the ELF reader, and PTX must end in a NUL the record may not count */
    unsigned char *copy = malloc(im->size + 1);
    if (!copy) {
        snprintf(err, errlen, "out of memory loading the CUDA image");
        x->last = CUDA_ERROR_OUT_OF_MEMORY;
        return false;
    }
    memcpy(copy, m->image_data + im->offset, im->size);
    copy[im->size] = 0;
    CUresult r = x->drv->cuModuleLoadData(&x->module, copy);
    free(copy);
    if (r != CUDA_SUCCESS) {
        char msg[384];
        cu_ok(x, r, "cuModuleLoadData", msg, sizeof msg);
        if (im->is_cubin) snprintf(err, errlen, "%s (the model's cubin for %s)", msg, im->arch);
        else
            snprintf(err, errlen, "%s (the driver could not compile the model's PTX for %s for "
                                  "cuda:%d, sm_%d)", msg, im->arch, x->ordinal, x->cc);
        x->module = NULL;
        return false;
    }
    for (int k = 0; k < m->ncuda_kernels; k++) {
        const char *sym = m->cuda_kernels[k].symbol;
        if (!CU(cuModuleGetFunction, &x->fns[k], x->module, sym)) {
            size_t n = strlen(err);
            snprintf(err + n, errlen - n, " (kernel '%s')", sym);
            return false;
        }
    }
    return true;
}

/* the spike-count accumulators to zero (the context is current) */
static bool
zero_counts(RtCudaExec *x, char *err, size_t errlen)
{
    const snn_model *m = x->m;
    for (int l = 0; l < m->nlayers; l++) {
        int b = m->cuda_layers[l].buf;
        const RtBuf *kb = &m->cuda_bufs[b];
        if (!CU(cuMemsetD8Async, x->addr[b], 0, buf_elems(kb, x->max_batch) * kb->elem, x->stream))
            return false;
    }
    return CU(cuStreamSynchronize, x->stream);
}

snn_status
rt_cuda_exec_create(const snn_model *m, int ordinal, int max_batch, RtCudaExec **out, char *err,
                    size_t errlen)
{
    *out = NULL;
    const RtCudaDriver *d = rt_cuda_driver(err, errlen);
    if (!d) return SNN_ERR_DEVICE;
    if (!m->ncuda_kernels) {
        snprintf(err, errlen, "this model has no CUDA code");
        return SNN_ERR_DEVICE;
    }
    RtCudaExec *x = calloc(1, sizeof *x);
    if (!x) {
        snprintf(err, errlen, "out of memory for a CUDA session");
        return SNN_ERR_MEMORY;
    }
    x->drv = d;
    x->m = m;
    x->ordinal = ordinal;
    x->max_batch = max_batch;
    snn_status st = SNN_ERR_DEVICE;
    int major = 0, minor = 0;
    if (!rt_cuda_device(d, ordinal, &x->dev, err, errlen) ||
        !CU(cuDeviceGetAttribute, &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, x->dev) ||
        !CU(cuDeviceGetAttribute, &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, x->dev) ||
        !CU(cuDeviceGetAttribute, &x->nsm, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, x->dev))
        goto fail;
    x->cc = 10 * major + minor;
    if (x->nsm < 1) x->nsm = 1;

    /* host memory, all of it now: runs allocate nothing */
    int max_params = 0;
    for (int k = 0; k < m->ncuda_kernels; k++)
        if (m->cuda_kernels[k].nbufs > max_params) max_params = m->cuda_kernels[k].nbufs;
    max_params += 3; /* B, t, dyn */
    size_t ncounts = 0;
    x->count_off = calloc((size_t)m->nlayers + 1, sizeof *x->count_off);
    for (int l = 0; x->count_off && l < m->nlayers; l++) {
        x->count_off[l] = ncounts;
        ncounts += buf_elems(&m->cuda_bufs[m->cuda_layers[l].buf], max_batch);
    }
    x->fns = calloc((size_t)m->ncuda_kernels, sizeof *x->fns);
    x->addr = calloc((size_t)m->ncuda_bufs + 1, sizeof *x->addr);
    x->graphs = calloc((size_t)max_batch + 1, sizeof *x->graphs);
    x->nlaunches = calloc((size_t)max_batch + 1, sizeof *x->nlaunches);
    x->dyn_slot = calloc((size_t)m->ncuda_bufs + 1, sizeof *x->dyn_slot);
    x->ndyn = SNN_CUDA_DYN_IO;
    for (int b = 0; x->dyn_slot && b < m->ncuda_bufs; b++) {
        RtBufKind k = m->cuda_bufs[b].kind;
        x->dyn_slot[b] = k == RT_BUF_INPUT || k == RT_BUF_OUTPUT ? x->ndyn++ : -1;
    }
    x->dyn_host = calloc((size_t)x->ndyn, sizeof *x->dyn_host);
    x->count_host = calloc(ncounts + 1, sizeof *x->count_host);
    x->param_vals = calloc((size_t)max_params, sizeof *x->param_vals);
    x->params = calloc((size_t)max_params, sizeof *x->params);
    if (!x->count_off || !x->fns || !x->addr || !x->graphs || !x->nlaunches || !x->dyn_slot ||
        !x->dyn_host ||
        !x->count_host || !x->param_vals || !x->params) {
        snprintf(err, errlen, "out of memory for a CUDA session of batch %d", max_batch);
        st = SNN_ERR_MEMORY;
        goto fail;
    }
    for (int i = 0; i < max_params; i++)
        x->params[i] = &x->param_vals[i];

    /* the arena: weights (one region, replaced as a whole), temporaries at max_batch, input and
     * output staging, dyn; each buffer 256-byte aligned */
    size_t total = 0;
    size_t *off = calloc((size_t)m->ncuda_bufs + 1, sizeof *off);
    if (!off) {
        snprintf(err, errlen, "out of memory for a CUDA session");
        st = SNN_ERR_MEMORY;
        goto fail;
    }
    size_t *bytes = calloc((size_t)m->ncuda_bufs + 1, sizeof *bytes);
    int *slot = calloc((size_t)m->ncuda_bufs + 1, sizeof *slot);
    int *span = calloc((size_t)m->ncuda_bufs + 1, sizeof *span);
    if (!bytes || !slot || !span) {
        free(off);
        free(bytes);
        free(slot);
        free(span);
        snprintf(err, errlen, "out of memory for a CUDA session");
        st = SNN_ERR_MEMORY;
        goto fail;
    }
    for (int b = 0; b < m->ncuda_bufs; b++) { /* weights first */
        const RtBuf *kb = &m->cuda_bufs[b];
        double n = (double)kb->per_batch * max_batch + (double)kb->fixed;
        if (n * (double)kb->elem > 1e15) {
            free(off);
            free(bytes);
            free(slot);
            free(span);
            snprintf(err, errlen, "max_batch %d needs more memory than can be had", max_batch);
            st = SNN_ERR_MEMORY;
            goto fail;
        }
        if (kb->kind != RT_BUF_WEIGHT) continue;
        off[b] = total;
        total += align_up(buf_elems(kb, max_batch) * kb->elem);
    }
    x->weight_bytes = total;
    /* then temporaries (those of one slot of the memory plan share a region), staging */
    for (int b = 0; b < m->ncuda_bufs; b++) {
        const RtBuf *kb = &m->cuda_bufs[b];
        bytes[b] = kb->kind == RT_BUF_WEIGHT ? SIZE_MAX : buf_elems(kb, max_batch) * kb->elem;
        slot[b] = kb->kind == RT_BUF_TEMP ? kb->slot : 0;
        span[b] = kb->span;
    }
    size_t rest = rt_arena_layout(m->ncuda_bufs, bytes, slot, span, DEVICE_ALIGN, off);
    for (int b = 0; b < m->ncuda_bufs; b++)
        if (m->cuda_bufs[b].kind != RT_BUF_WEIGHT) off[b] += total;
    total += rest;
    free(bytes);
    free(slot);
    free(span);
    size_t dyn_off = total;
    total += align_up((size_t)x->ndyn * sizeof(int64_t));

    if (!CU(cuDevicePrimaryCtxRetain, &x->ctx, x->dev)) {
        x->ctx = NULL;
        free(off);
        goto fail;
    }
    if (!push(x, err, errlen)) {
        free(off);
        goto fail;
    }
    bool is_ok = load_module(x, err, errlen);
    x->bytes = total;
    if (is_ok && !CU(cuMemAlloc_v2, &x->arena, total)) {
        x->arena = 0;
        char msg[384];
        snprintf(msg, sizeof msg, "%s", err);
        snprintf(err, errlen, "%s (the arena of a CUDA session of batch %d, %zu bytes)", msg,
                 max_batch, total);
        is_ok = false;
    }
    if (is_ok && !CU(cuStreamCreate, &x->stream, CU_STREAM_NON_BLOCKING)) {
        x->stream = NULL;
        is_ok = false;
    }
    if (is_ok) {
        for (int b = 0; b < m->ncuda_bufs; b++)
            x->addr[b] = x->arena + off[b];
        x->dyn = x->arena + dyn_off;
        is_ok = zero_counts(x, err, errlen);
    }
    free(off);
    if (!is_ok) {
        st = cu_status(x);
        CUcontext popped;
        x->drv->cuCtxPopCurrent_v2(&popped);
        goto fail;
    }
    if (!pop(x, err, errlen)) goto fail;
    *out = x;
    return SNN_OK;
fail:
    if (st == SNN_ERR_DEVICE && x->last == CUDA_ERROR_OUT_OF_MEMORY) st = SNN_ERR_MEMORY;
    rt_cuda_exec_destroy(x);
    return st;
}

/* the work a caller's stream may still have pending on the arena, done (the context is current) */
static bool
settle(RtCudaExec *x, char *err, size_t errlen)
{
    if (!x->has_user) return true;
    x->has_user = false;
    return CU(cuStreamSynchronize, x->user);
}

snn_status
rt_cuda_exec_set_weights(RtCudaExec *x, void *const *mem, char *err, size_t errlen)
{
    const snn_model *m = x->m;
    x->last = CUDA_SUCCESS;
    if (!x->weight_bytes) return SNN_OK;
    /* the region as the device holds it, built on the host (weights already packed by their
     * transpose), then uploaded to a scratch allocation and copied into place in one copy: a
     * failure before that copy leaves the old weights */
    unsigned char *host = calloc(1, x->weight_bytes);
    if (!host) {
        snprintf(err, errlen, "out of memory uploading weights");
        return SNN_ERR_MEMORY;
    }
    for (int b = 0; b < m->ncuda_bufs; b++) {
        const RtBuf *kb = &m->cuda_bufs[b];
        if (kb->kind != RT_BUF_WEIGHT) continue;
        size_t n = buf_elems(kb, 0);
        unsigned char *dst = host + (x->addr[b] - x->arena);
        if (n) memcpy(dst, mem[b], n * kb->elem); /* f32, f16 or bf16, packed by the session */
    }
    if (!push(x, err, errlen)) {
        free(host);
        return cu_status(x);
    }
    CUdeviceptr scratch = 0;
    bool is_ok = settle(x, err, errlen) && CU(cuMemAlloc_v2, &scratch, x->weight_bytes);
    if (!is_ok) scratch = 0;
    is_ok = is_ok && CU(cuMemcpyHtoDAsync_v2, scratch, host, x->weight_bytes, x->stream) &&
            CU(cuStreamSynchronize, x->stream) &&
            CU(cuMemcpyDtoDAsync_v2, x->arena, scratch, x->weight_bytes, x->stream) &&
            CU(cuStreamSynchronize, x->stream);
    if (!is_ok) x->drv->cuStreamSynchronize(x->stream); /* nothing may still read host */
    if (scratch) {
        if (is_ok) is_ok = CU(cuMemFree_v2, scratch);
        else x->drv->cuMemFree_v2(scratch);
    }
    free(host);
    if (!is_ok) {
        CUcontext popped;
        x->drv->cuCtxPopCurrent_v2(&popped);
        return cu_status(x);
    }
    return pop(x, err, errlen) ? SNN_OK : cu_status(x);
}

/* one kernel launch of the schedule, at step t, into the capture */
static bool
launch(RtCudaExec *x, int k, int64_t batch, int64_t t, int64_t *count, char *err, size_t errlen)
{
    const RtCudaKernel *kr = &x->m->cuda_kernels[k];
    unsigned grid = 1, block = 1;
    if (!kr->is_single) {
        int64_t work;
        char why[200];
        if (!rt_cuda_work_eval(&kr->work, batch, &work, why, sizeof why)) {
            snprintf(err, errlen, "kernel '%s': %s", kr->symbol, why);
            return false; /* x->last stays CUDA_SUCCESS: the model is at fault */
        }
        if (work == 0) return true;
        int64_t blocks = work / SNN_CUDA_BLOCK + (work % SNN_CUDA_BLOCK != 0);
        int64_t cap = (int64_t)BLOCKS_PER_SM * x->nsm;
        grid = (unsigned)(blocks < cap ? blocks : cap);
        block = SNN_CUDA_BLOCK;
    }
    int n = kr->nbufs;
    for (int i = 0; i < n; i++)
        x->param_vals[i] = x->addr[kr->bufs[i]];
    x->param_vals[n] = (uint64_t)batch;
    x->param_vals[n + 1] = (uint64_t)t;
    x->param_vals[n + 2] = x->dyn;
    if (!CU(cuLaunchKernel, x->fns[k], grid, 1, 1, block, 1, 1, 0, x->stream, x->params, NULL)) {
        size_t len = strlen(err);
        snprintf(err + len, errlen - len, " (kernel '%s')", kr->symbol);
        return false;
    }
    (*count)++;
    return true;
}

/* the run of batch B as stream work, into the capture: zeroing, then the schedule */
static bool
record_run(RtCudaExec *x, int64_t batch, int64_t *count, char *err, size_t errlen)
{
    const snn_model *m = x->m;
    for (int b = 0; b < m->ncuda_bufs; b++) {
        const RtBuf *kb = &m->cuda_bufs[b];
        size_t bytes = buf_elems(kb, batch) * kb->elem;
        if (kb->kind == RT_BUF_TEMP && kb->needs_zero && bytes &&
            !CU(cuMemsetD8Async, x->addr[b], 0, bytes, x->stream))
            return false;
    }
    int n = m->ncuda_kernels;
    for (int i = 0; i < n;) {
        if (!m->cuda_kernels[i].is_step) {
            if (!launch(x, i, batch, 0, count, err, errlen)) return false;
            i++;
            continue;
        }
        int j = i;
        while (j < n && m->cuda_kernels[j].is_step)
            j++;
        for (int64_t t = 0; t < m->timesteps; t++)
            for (int k = i; k < j; k++)
                if (!launch(x, k, batch, t, count, err, errlen)) return false;
        i = j;
    }
    return true;
}

/* graphs[B], captured once (the context is current) */
static bool
capture(RtCudaExec *x, int batch, char *err, size_t errlen)
{
    int64_t count = 0;
    if (!CU(cuStreamBeginCapture_v2, x->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)) return false;
    bool is_ok = record_run(x, batch, &count, err, errlen);
    CUgraph graph = NULL;
    if (!is_ok) {
        /* end the capture, or the stream stays unusable; the first error is the one to report */
        if (x->drv->cuStreamEndCapture(x->stream, &graph) == CUDA_SUCCESS && graph)
            x->drv->cuGraphDestroy(graph);
        return false;
    }
    if (!CU(cuStreamEndCapture, x->stream, &graph)) return false;
    CUgraphExec exec = NULL;
    is_ok = CU(cuGraphInstantiateWithFlags, &exec, graph, 0);
    if (!CU(cuGraphDestroy, graph) && is_ok) {
        x->drv->cuGraphExecDestroy(exec);
        return false;
    }
    if (!is_ok) return false;
    x->graphs[batch] = exec;
    x->nlaunches[batch] = count;
    return true;
}

/* is p memory the device can copy from and to (device or managed)? A plain host pointer gives
 * CUDA_ERROR_INVALID_VALUE, which is the answer, not a failure to report. */
static bool
is_device_memory(RtCudaExec *x, const void *p)
{
    unsigned type = 0;
    CUresult r = x->drv->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                               (CUdeviceptr)(uintptr_t)p);
    return r == CUDA_SUCCESS && (type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED);
}

snn_status
rt_cuda_exec_run(RtCudaExec *x, bool queued, void *stream, int64_t first_sample, int batch,
                 const void *const *inputs, void *const *outputs, bool is_device, int64_t *launches,
                 int64_t *graphs, char *err, size_t errlen)
{
    const snn_model *m = x->m;
    x->last = CUDA_SUCCESS;
    if (!push(x, err, errlen)) return cu_status(x);
    /* on the caller's stream (device memory only): the work is queued there and not waited for;
     * a run on another stream first waits for what the last one left pending */
    CUstream on = queued ? (CUstream)stream : x->stream;
    if (x->has_user && x->user != on && !settle(x, err, errlen)) {
        CUcontext popped;
        x->drv->cuCtxPopCurrent_v2(&popped);
        return cu_status(x);
    }
    if (is_device) {
        for (int i = 0; i < m->ninputs + m->noutputs; i++) {
            bool is_in = i < m->ninputs;
            int io = is_in ? i : i - m->ninputs;
            if (is_device_memory(x, is_in ? inputs[io] : outputs[io])) continue;
            snprintf(err, errlen, "snn_run_device: %s[%d] ('%s') is not CUDA device memory",
                     is_in ? "inputs" : "outputs", io,
                     is_in ? m->inputs[io].name : m->outputs[io].name);
            CUcontext popped;
            x->drv->cuCtxPopCurrent_v2(&popped);
            return SNN_ERR_ARGUMENT;
        }
    }
    bool is_ok = x->graphs[batch] || capture(x, batch, err, errlen);
    bool is_queued = false; /* copies from the caller's memory may be under way */
    x->dyn_host[SNN_CUDA_DYN_SAMPLE_BASE] = first_sample;
    for (int b = 0; is_ok && b < m->ncuda_bufs; b++) {
        const RtBuf *kb = &m->cuda_bufs[b];
        if (x->dyn_slot[b] < 0) continue;
        bool is_in = kb->kind == RT_BUF_INPUT;
        const void *user = is_in ? inputs[kb->io] : outputs[kb->io];
        /* device memory is read and written in place; host arrays go through staging */
        x->dyn_host[x->dyn_slot[b]] = (int64_t)(is_device ? (CUdeviceptr)(uintptr_t)user : x->addr[b]);
        if (is_device || !is_in) continue;
        is_queued = true;
        is_ok = CU(cuMemcpyHtoDAsync_v2, x->addr[b], user, buf_elems(kb, batch) * kb->elem,
                   x->stream);
    }
    /* from pageable memory: staged before the call returns, so the next run may rewrite it */
    is_ok =
        is_ok &&
        CU(cuMemcpyHtoDAsync_v2, x->dyn, x->dyn_host, (size_t)x->ndyn * sizeof *x->dyn_host, on) &&
        CU(cuGraphLaunch, x->graphs[batch], on);
    is_queued = is_queued || is_ok;
    if (queued && is_ok) {
        x->user = on;
        x->has_user = true;
        if (!pop(x, err, errlen)) return cu_status(x);
        *launches = x->nlaunches[batch];
        *graphs = 1;
        return SNN_OK;
    }
    for (int b = 0; is_ok && !is_device && b < m->ncuda_bufs; b++) {
        const RtBuf *kb = &m->cuda_bufs[b];
        if (kb->kind != RT_BUF_OUTPUT) continue;
        is_ok = CU(cuMemcpyDtoHAsync_v2, outputs[kb->io], x->addr[b],
                   buf_elems(kb, batch) * kb->elem, x->stream);
    }
    is_ok = is_ok && CU(cuStreamSynchronize, x->stream);
    if (!is_ok) {
        if (is_queued) x->drv->cuStreamSynchronize(on);
        CUcontext popped;
        x->drv->cuCtxPopCurrent_v2(&popped);
        return x->last == CUDA_SUCCESS ? SNN_ERR_STATE : cu_status(x);
    }
    if (!pop(x, err, errlen)) return cu_status(x);
    *launches = x->nlaunches[batch];
    *graphs = 1;
    return SNN_OK;
}

/* the KProgram kernel a CUDA kernel begins with: its symbol is snnk_k<N>_... (cuda_gen.c) */
static int
kernel_base(const RtCudaKernel *kr)
{
    int n = -1;
    return sscanf(kr->symbol, "snnk_k%d_", &n) == 1 ? n : -1;
}

snn_status
rt_cuda_exec_run_kernels(RtCudaExec *x, int first, int end, int batch, int64_t first_sample,
                         bool zero, char *err, size_t errlen)
{
    const snn_model *m = x->m;
    x->last = CUDA_SUCCESS;
    if (!push(x, err, errlen)) return cu_status(x);
    bool is_ok = settle(x, err, errlen);
    /* the kernels find the inputs and outputs at their staging addresses */
    x->dyn_host[SNN_CUDA_DYN_SAMPLE_BASE] = first_sample;
    for (int b = 0; b < m->ncuda_bufs; b++)
        if (x->dyn_slot[b] >= 0) x->dyn_host[x->dyn_slot[b]] = (int64_t)x->addr[b];
    is_ok = is_ok && CU(cuMemcpyHtoDAsync_v2, x->dyn, x->dyn_host,
                        (size_t)x->ndyn * sizeof *x->dyn_host, x->stream);
    for (int b = 0; is_ok && zero && b < m->ncuda_bufs; b++) {
        const RtBuf *kb = &m->cuda_bufs[b];
        size_t bytes = buf_elems(kb, batch) * kb->elem;
        if (kb->kind == RT_BUF_TEMP && kb->needs_zero && bytes)
            is_ok = CU(cuMemsetD8Async, x->addr[b], 0, bytes, x->stream);
    }
    int64_t count = 0;
    int n = m->ncuda_kernels;
    for (int i = 0; is_ok && i < n;) {
        int k = kernel_base(&m->cuda_kernels[i]);
        bool in = k >= first && k < end;
        if (!m->cuda_kernels[i].is_step) {
            if (in) is_ok = launch(x, i, batch, 0, &count, err, errlen);
            i++;
            continue;
        }
        int j = i;
        while (j < n && m->cuda_kernels[j].is_step)
            j++;
        for (int64_t t = 0; is_ok && in && t < m->timesteps; t++)
            for (int q = i; is_ok && q < j; q++)
                is_ok = launch(x, q, batch, t, &count, err, errlen);
        i = j;
    }
    is_ok = is_ok && CU(cuStreamSynchronize, x->stream);
    if (!is_ok) {
        x->drv->cuStreamSynchronize(x->stream);
        CUcontext popped;
        x->drv->cuCtxPopCurrent_v2(&popped);
        return x->last == CUDA_SUCCESS ? SNN_ERR_STATE : cu_status(x);
    }
    return pop(x, err, errlen) ? SNN_OK : cu_status(x);
}

snn_status
rt_cuda_exec_copy(RtCudaExec *x, int b, void *host, size_t bytes, bool to_device, char *err,
                  size_t errlen)
{
    x->last = CUDA_SUCCESS;
    if (b < 0 || b >= x->m->ncuda_bufs) {
        snprintf(err, errlen, "buffer %d is not one of the model's %d", b, x->m->ncuda_bufs);
        return SNN_ERR_ARGUMENT;
    }
    return rt_cuda_exec_copy_addr(x, (uint64_t)x->addr[b], host, bytes, to_device, err, errlen);
}

snn_status
rt_cuda_exec_counts(RtCudaExec *x, double *counts, char *err, size_t errlen)
{
    const snn_model *m = x->m;
    x->last = CUDA_SUCCESS;
    if (!push(x, err, errlen)) return cu_status(x);
    bool is_ok = settle(x, err, errlen);
    for (int l = 0; is_ok && l < m->nlayers; l++) {
        int b = m->cuda_layers[l].buf;
        const RtBuf *kb = &m->cuda_bufs[b];
        is_ok = CU(cuMemcpyDtoHAsync_v2, x->count_host + x->count_off[l], x->addr[b],
                   buf_elems(kb, x->max_batch) * kb->elem, x->stream);
    }
    is_ok = is_ok && CU(cuStreamSynchronize, x->stream);
    if (!is_ok) {
        x->drv->cuStreamSynchronize(x->stream);
        CUcontext popped;
        x->drv->cuCtxPopCurrent_v2(&popped);
        return cu_status(x);
    }
    if (!pop(x, err, errlen)) return cu_status(x);
    /* integers below 2^53 in total: exact in double, in any order */
    for (int l = 0; l < m->nlayers; l++) {
        const int64_t *c = x->count_host + x->count_off[l];
        size_t n = buf_elems(&m->cuda_bufs[m->cuda_layers[l].buf], x->max_batch);
        int64_t sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += c[i];
        counts[l] = (double)sum;
    }
    return SNN_OK;
}

snn_status
rt_cuda_exec_reset_counts(RtCudaExec *x, char *err, size_t errlen)
{
    x->last = CUDA_SUCCESS;
    if (!push(x, err, errlen)) return cu_status(x);
    if (!settle(x, err, errlen) || !zero_counts(x, err, errlen)) {
        CUcontext popped;
        x->drv->cuCtxPopCurrent_v2(&popped);
        return cu_status(x);
    }
    return pop(x, err, errlen) ? SNN_OK : cu_status(x);
}

/* ---- a training step's own device work (snnc --train --device=cuda): memory beside the
 * arena, copies to and from it, and kernels the module holds outside the model's schedule ---- */

/* the end of a call that pushed the context: on failure the stream waited for and the context
 * popped, the driver's status; else popped */
static snn_status
finish(RtCudaExec *x, bool is_ok, char *err, size_t errlen)
{
    if (!is_ok) {
        x->drv->cuStreamSynchronize(x->stream);
        CUcontext popped;
        x->drv->cuCtxPopCurrent_v2(&popped);
        return cu_status(x);
    }
    return pop(x, err, errlen) ? SNN_OK : cu_status(x);
}

snn_status
rt_cuda_exec_alloc(RtCudaExec *x, size_t bytes, uint64_t *addr, char *err, size_t errlen)
{
    x->last = CUDA_SUCCESS;
    CUdeviceptr *grown = realloc(x->extra, (size_t)(x->nextra + 1) * sizeof *grown);
    if (!grown) {
        snprintf(err, errlen, "out of memory");
        return SNN_ERR_MEMORY;
    }
    x->extra = grown;
    if (!push(x, err, errlen)) return cu_status(x);
    CUdeviceptr d = 0;
    bool is_ok = CU(cuMemAlloc_v2, &d, bytes ? bytes : 1) &&
                 CU(cuMemsetD8Async, d, 0, bytes ? bytes : 1, x->stream) &&
                 CU(cuStreamSynchronize, x->stream);
    if (d) x->extra[x->nextra++] = d;
    if (d) x->bytes += bytes;
    if (!is_ok) {
        CUcontext popped;
        x->drv->cuCtxPopCurrent_v2(&popped);
        snprintf(err + strlen(err), errlen - strlen(err), " (%zu bytes of device memory)", bytes);
        return x->last == CUDA_ERROR_OUT_OF_MEMORY ? SNN_ERR_MEMORY : cu_status(x);
    }
    *addr = (uint64_t)d;
    return pop(x, err, errlen) ? SNN_OK : cu_status(x);
}

uint64_t
rt_cuda_exec_addr(const RtCudaExec *x, int b)
{
    return b >= 0 && b < x->m->ncuda_bufs ? (uint64_t)x->addr[b] : 0;
}

snn_status
rt_cuda_exec_copy_addr(RtCudaExec *x, uint64_t addr, void *host, size_t bytes, bool to_device,
                       char *err, size_t errlen)
{
    x->last = CUDA_SUCCESS;
    if (!push(x, err, errlen)) return cu_status(x);
    CUdeviceptr d = (CUdeviceptr)addr;
    bool is_ok = settle(x, err, errlen) &&
                 (to_device ? CU(cuMemcpyHtoDAsync_v2, d, host, bytes, x->stream)
                            : CU(cuMemcpyDtoHAsync_v2, host, d, bytes, x->stream)) &&
                 CU(cuStreamSynchronize, x->stream);
    return finish(x, is_ok, err, errlen);
}

snn_status
rt_cuda_exec_launch(RtCudaExec *x, const char *name, int64_t threads, void **params, char *err,
                    size_t errlen)
{
    x->last = CUDA_SUCCESS;
    if (threads <= 0) return SNN_OK;
    if (strlen(name) >= sizeof x->named[0].name) {
        snprintf(err, errlen, "kernel name '%s' too long", name);
        return SNN_ERR_ARGUMENT;
    }
    if (!push(x, err, errlen)) return cu_status(x);
    CUfunction fn = NULL;
    for (int i = 0; i < x->nnamed && !fn; i++)
        if (!strcmp(x->named[i].name, name)) fn = x->named[i].fn;
    bool is_ok = settle(x, err, errlen);
    if (is_ok && !fn) {
        is_ok = CU(cuModuleGetFunction, &fn, x->module, name);
        if (is_ok && x->nnamed < (int)(sizeof x->named / sizeof x->named[0])) {
            snprintf(x->named[x->nnamed].name, sizeof x->named[0].name, "%s", name);
            x->named[x->nnamed++].fn = fn;
        }
        if (!is_ok) snprintf(err + strlen(err), errlen - strlen(err), " (kernel '%s')", name);
    }
    int64_t blocks = threads / SNN_CUDA_BLOCK + (threads % SNN_CUDA_BLOCK != 0);
    int64_t cap = (int64_t)BLOCKS_PER_SM * x->nsm;
    unsigned grid = (unsigned)(blocks < cap ? blocks : cap);
    is_ok = is_ok &&
            CU(cuLaunchKernel, fn, grid, 1, 1, SNN_CUDA_BLOCK, 1, 1, 0, x->stream, params, NULL);
    return finish(x, is_ok, err, errlen);
}

size_t
rt_cuda_exec_device_bytes(const RtCudaExec *x)
{
    return x ? x->bytes : 0;
}
