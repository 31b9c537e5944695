/* abi_test: the C ABI of a model.so (runtime/snn.h), loaded with dlopen as a user would.
 *   abi_test MODEL.so NOWEIGHTS.so WEIGHTS.safetensors INPUTS.npz OUT.npz [CUDA.so]
 * MODEL.so carries the weights WEIGHTS.safetensors holds; NOWEIGHTS.so is the same model built with
 * --no-embed-weights. INPUTS.npz has one array per model input (sample-major). Checks every error
 * path of the ABI, runs the inputs in uneven batches (first_sample offsets) and writes the outputs
 * to OUT.npz for the caller to compare with snnc's own run; checks that thread counts, sessions
 * running concurrently and weights reloaded from a file or memory all give the same bits. CUDA.so,
 * the model with CUDA code, run where no GPU can be had: an "auto" session falls back to the CPU
 * and leaves no message.
 *   abi_test --exact MODEL.so F16.safetensors OTHER.safetensors   (test_exact)
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/snn.h"
#include "runtime/tensor_io.h"

static int failures, checks;

#define CHECK(cond)                                                                               \
    do {                                                                                          \
        checks++;                                                                                 \
        if (!(cond)) {                                                                            \
            failures++;                                                                           \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);             \
        }                                                                                         \
    } while (0)

/* a call that must fail with status st and a message containing `text` */
#define CHECK_ERR(call, st, text)                                                                 \
    do {                                                                                          \
        snn_status got_ = (call);                                                                 \
        const char *msg_ = api.snn_last_error();                                                  \
        checks++;                                                                                 \
        if (got_ != (st) || !strstr(msg_, (text))) {                                              \
            failures++;                                                                           \
            fprintf(stderr, "%s:%d: %s gave %s \"%s\", expected %s with \"%s\"\n", __FILE__,      \
                    __LINE__, #call, api.snn_status_name(got_), msg_, #st, (text));              \
        }                                                                                         \
    } while (0)

#define SNN_FUNCTIONS(X)                                                                          \
    X(snn_abi_version) X(snn_last_error) X(snn_status_name) X(snn_model_get) X(snn_model_name)    \
    X(snn_model_timesteps) X(snn_model_num_inputs) X(snn_model_num_outputs)                       \
    X(snn_model_num_weights) X(snn_model_num_layers) X(snn_model_layer_name) X(snn_model_input)   \
    X(snn_model_output) X(snn_model_weight) X(snn_model_has_weights) X(snn_model_devices)         \
    X(snn_session_create) X(snn_session_destroy) X(snn_session_load_weights_file)                 \
    X(snn_session_load_weights) X(snn_run) X(snn_session_spike_counts) X(snn_session_stats)       \
    X(snn_session_reset_stats) X(snn_session_threads) X(snn_session_device)

typedef struct Api {
#define FIELD(f) __typeof__(f) *f;
    SNN_FUNCTIONS(FIELD)
    void *handle;
} Api;

static Api api; /* the library under test */

static bool
load_api(Api *a, const char *path)
{
    a->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!a->handle) {
        fprintf(stderr, "abi_test: %s\n", dlerror());
        return false;
    }
#define LOOKUP(f)                                                                                 \
    /* POSIX's way to store a dlsym result in a function pointer */                              \
    if (!(*(void **)&a->f = dlsym(a->handle, #f))) {                                              \
        fprintf(stderr, "abi_test: %s does not export %s\n", path, #f);                           \
        return false;                                                                             \
    }
    SNN_FUNCTIONS(LOOKUP)
    return true;
}

typedef struct Io {
    int ninputs, noutputs;
    int64_t n;                 /* samples */
    const float *in[8];
    float *out[8];
    int64_t in_numel[8], out_numel[8];
} Io;

/* run all n samples in batches of `batch` on s, outputs into io->out */
static snn_status
run_all(const Api *a, snn_session *s, Io *io, int batch)
{
    for (int64_t b0 = 0; b0 < io->n; b0 += batch) {
        int nb = (int)(io->n - b0 < batch ? io->n - b0 : batch);
        const float *in[8];
        float *out[8];
        for (int i = 0; i < io->ninputs; i++)
            in[i] = io->in[i] + b0 * io->in_numel[i];
        for (int i = 0; i < io->noutputs; i++)
            out[i] = io->out[i] + b0 * io->out_numel[i];
        snn_status st = a->snn_run(s, b0, nb, in, out);
        if (st != SNN_OK) return st;
    }
    return SNN_OK;
}

static float *
alloc_outputs(const Io *io, int i)
{
    float *p = calloc((size_t)(io->n * io->out_numel[i]) + 1, sizeof *p);
    if (!p) abort();
    return p;
}

static bool
same_outputs(const Io *x, const Io *y)
{
    for (int i = 0; i < x->noutputs; i++)
        if (memcmp(x->out[i], y->out[i], (size_t)(x->n * x->out_numel[i]) * sizeof(float)) != 0)
            return false;
    return true;
}

typedef struct Job {
    const snn_model *m;
    Io io;
    int threads, batch;
    snn_status st;
} Job;

static void *
job_main(void *arg)
{
    Job *j = arg;
    snn_session *s;
    j->st = api.snn_session_create(j->m, "cpu", j->batch, j->threads, &s);
    if (j->st == SNN_OK) {
        for (int rep = 0; rep < 3 && j->st == SNN_OK; rep++)
            j->st = run_all(&api, s, &j->io, j->batch);
        api.snn_session_destroy(s);
    }
    return NULL;
}

static void
test_model_info(const snn_model *m, const RtTensorSet *inputs)
{
    snn_tensor_info info;
    CHECK(api.snn_abi_version() == SNN_ABI_VERSION);
    CHECK(!strcmp(api.snn_model_name(m), "abi_model"));
    CHECK(api.snn_model_timesteps(m) == 5);
    CHECK(api.snn_model_num_inputs(m) == 2 && api.snn_model_num_outputs(m) == 2);
    CHECK(api.snn_model_num_weights(m) == 7); /* conv and two dense: weight and bias; one dense: weight */
    CHECK(api.snn_model_num_layers(m) == 2);
    CHECK(!strcmp(api.snn_model_layer_name(m, 0), "s1"));
    CHECK(!strcmp(api.snn_model_layer_name(m, 1), "s2"));
    CHECK(api.snn_model_has_weights(m) == 1);
    CHECK(!strcmp(api.snn_model_devices(m), "cpu"));
    CHECK(api.snn_model_input(m, 0, &info) == SNN_OK && !strcmp(info.name, "a") &&
          info.per_step == 0 && info.rank == 3 && info.dims[0] == 2 && info.dims[1] == 5 &&
          info.numel == 50 && info.dtype == SNN_F32);
    CHECK(api.snn_model_input(m, 1, &info) == SNN_OK && !strcmp(info.name, "b") &&
          info.per_step == 1 && info.rank == 1 && info.dims[0] == 4 && info.numel == 20);
    CHECK(api.snn_model_output(m, 0, &info) == SNN_OK && !strcmp(info.name, "spikes") &&
          info.per_step == 1 && info.numel == 35);
    CHECK(api.snn_model_output(m, 1, &info) == SNN_OK && !strcmp(info.name, "rate") &&
          info.per_step == 0 && info.rank == 3 && info.numel == 75);
    CHECK(api.snn_model_weight(m, 0, &info) == SNN_OK && !strcmp(info.name, "c.weight") &&
          info.rank == 4 && info.dims[0] == 3 && info.dims[1] == 2 && info.dims[2] == 3);
    for (int i = 0; i < 2; i++) {
        CHECK(api.snn_model_input(m, i, &info) == SNN_OK);
        const RtTensor *t = rt_tensorset_find(inputs, info.name);
        CHECK(t && t->numel == t->dims[0] * info.numel);
    }
    /* the model functions' own errors */
    CHECK_ERR(api.snn_model_input(m, 2, &info), SNN_ERR_ARGUMENT, "index 2 out of range");
    CHECK_ERR(api.snn_model_output(m, -1, &info), SNN_ERR_ARGUMENT, "out of range");
    CHECK_ERR(api.snn_model_weight(m, 0, NULL), SNN_ERR_ARGUMENT, "info is NULL");
    CHECK_ERR(api.snn_model_input(NULL, 0, &info), SNN_ERR_ARGUMENT, "model is NULL");
    CHECK(api.snn_model_layer_name(m, 2) == NULL);
    CHECK(api.snn_model_name(NULL) == NULL && api.snn_model_timesteps(NULL) == -1);
    CHECK(api.snn_model_num_inputs(NULL) == -1 && api.snn_model_num_layers(NULL) == -1);
    CHECK(!strcmp(api.snn_status_name(SNN_ERR_WEIGHTS), "SNN_ERR_WEIGHTS"));
}

static void
test_session_errors(const snn_model *m, Io *io)
{
    snn_session *s = (snn_session *)&s; /* must be set to NULL on failure */
    CHECK_ERR(api.snn_session_create(NULL, "cpu", 4, 1, &s), SNN_ERR_ARGUMENT, "model is NULL");
    CHECK(s == NULL);
    CHECK_ERR(api.snn_session_create(m, "cpu", 4, 1, NULL), SNN_ERR_ARGUMENT, "out is NULL");
    CHECK_ERR(api.snn_session_create(m, "cuda:0", 4, 1, &s), SNN_ERR_DEVICE, "code for cpu only");
    CHECK_ERR(api.snn_session_create(m, "tpu", 4, 1, &s), SNN_ERR_DEVICE, "unknown device 'tpu'");
    CHECK_ERR(api.snn_session_create(m, "cpu", 0, 1, &s), SNN_ERR_ARGUMENT, "max_batch");
    CHECK_ERR(api.snn_session_create(m, "cpu", 4, -1, &s), SNN_ERR_ARGUMENT, "threads");
    /* the documented bounds, checked before anything is allocated or started */
    CHECK_ERR(api.snn_session_create(m, "cpu", SNN_MAX_BATCH + 1, 1, &s), SNN_ERR_ARGUMENT,
              "max_batch must be from 1 to 1048576 (SNN_MAX_BATCH), not 1048577");
    CHECK_ERR(api.snn_session_create(m, "cpu", 4, SNN_MAX_THREADS + 1, &s), SNN_ERR_ARGUMENT,
              "threads must be 0 (one per core) or from 1 to 1024 (SNN_MAX_THREADS), not 1025");
    CHECK_ERR(api.snn_session_create(m, "tpu", INT32_MAX, 1, &s), SNN_ERR_ARGUMENT, "max_batch");
    CHECK(s == NULL);
    CHECK_ERR(api.snn_session_create((const snn_model *)io, "cpu", 4, 1, &s), SNN_ERR_ARGUMENT,
              "not a model of this library");
    CHECK(api.snn_session_create(m, NULL, 4, 2, &s) == SNN_OK && s);
    CHECK(api.snn_session_threads(s) == 2 && !strcmp(api.snn_session_device(s), "cpu"));
    CHECK(api.snn_session_threads(NULL) == -1 && api.snn_session_device(NULL) == NULL);

    const float *in[2] = {io->in[0], io->in[1]};
    float *out[2] = {io->out[0], io->out[1]};
    CHECK_ERR(api.snn_run(NULL, 0, 1, in, out), SNN_ERR_ARGUMENT, "session is NULL");
    CHECK_ERR(api.snn_run(s, 0, 0, in, out), SNN_ERR_ARGUMENT, "batch 0 is not in 1..4");
    CHECK_ERR(api.snn_run(s, 0, 5, in, out), SNN_ERR_ARGUMENT, "batch 5 is not in 1..4");
    CHECK_ERR(api.snn_run(s, -1, 1, in, out), SNN_ERR_ARGUMENT, "first_sample -1");
    /* first_sample + batch past the last sample whose Poisson keys are its own: an error, not
     * keys that wrap onto sample 0's */
    CHECK_ERR(api.snn_run(s, INT64_MAX, 1, in, out), SNN_ERR_ARGUMENT,
              "first_sample 9223372036854775807 + batch 1 passes");
    CHECK_ERR(api.snn_run(s, INT64_MAX / 2, 4, in, out), SNN_ERR_ARGUMENT, "+ batch 4 passes");
    CHECK(api.snn_run(s, (int64_t)1 << 40, 4, in, out) == SNN_OK);
    CHECK_ERR(api.snn_run(s, 0, 1, NULL, out), SNN_ERR_ARGUMENT, "inputs is NULL");
    CHECK_ERR(api.snn_run(s, 0, 1, in, NULL), SNN_ERR_ARGUMENT, "outputs is NULL");
    const float *in_hole[2] = {io->in[0], NULL};
    CHECK_ERR(api.snn_run(s, 0, 1, in_hole, out), SNN_ERR_ARGUMENT, "inputs[1] ('b') is NULL");
    float *out_hole[2] = {NULL, io->out[1]};
    CHECK_ERR(api.snn_run(s, 0, 1, in, out_hole), SNN_ERR_ARGUMENT,
              "outputs[0] ('spikes') is NULL");
    double counts[2];
    snn_stats st;
    CHECK_ERR(api.snn_session_spike_counts(s, counts, 3), SNN_ERR_ARGUMENT, "2 counted layers");
    CHECK_ERR(api.snn_session_spike_counts(s, NULL, 2), SNN_ERR_ARGUMENT, "counts is NULL");
    CHECK_ERR(api.snn_session_stats(s, NULL), SNN_ERR_ARGUMENT, "stats is NULL");
    CHECK_ERR(api.snn_session_stats(NULL, &st), SNN_ERR_ARGUMENT, "session is NULL");
    CHECK_ERR(api.snn_session_reset_stats(NULL), SNN_ERR_ARGUMENT, "session is NULL");
    /* a call that succeeds leaves no message: after each failure above, one that works */
    CHECK(api.snn_session_reset_stats(s) == SNN_OK && !strcmp(api.snn_last_error(), ""));
    CHECK_ERR(api.snn_run(s, -1, 1, in, out), SNN_ERR_ARGUMENT, "first_sample -1");
    CHECK(api.snn_model_get() == m && !strcmp(api.snn_last_error(), ""));
    CHECK_ERR(api.snn_run(s, -1, 1, in, out), SNN_ERR_ARGUMENT, "first_sample -1");
    CHECK(api.snn_session_threads(s) == 2 && !strcmp(api.snn_last_error(), ""));
    CHECK_ERR(api.snn_run(s, -1, 1, in, out), SNN_ERR_ARGUMENT, "first_sample -1");
    CHECK(api.snn_session_spike_counts(s, counts, 2) == SNN_OK &&
          !strcmp(api.snn_last_error(), ""));
    /* failed runs count nothing */
    CHECK(api.snn_session_stats(s, &st) == SNN_OK && st.runs == 0 && st.samples == 0);
    CHECK(api.snn_run(s, 0, 2, in, out) == SNN_OK);
    CHECK(api.snn_session_stats(s, &st) == SNN_OK && st.runs == 1 && st.samples == 2 &&
          st.kernel_launches > 0 && st.seconds >= st.last_seconds && st.last_seconds > 0);
    CHECK(api.snn_run(s, 0, 2, in, out) == SNN_OK && !strcmp(api.snn_last_error(), ""));
    CHECK(api.snn_session_reset_stats(s) == SNN_OK);
    CHECK(api.snn_session_stats(s, &st) == SNN_OK && st.runs == 0 && st.kernel_launches == 0);
    CHECK(api.snn_session_spike_counts(s, counts, 2) == SNN_OK && counts[0] == 0 &&
          counts[1] == 0);
    api.snn_session_destroy(s);
    api.snn_session_destroy(NULL);
}

/* weights: errors leave the session's weights as they were; reloading the same weights (file or
 * memory) gives the same bits; other weights give other outputs */
static void
test_weights(const snn_model *m, Io *ref, const char *weights_path)
{
    RtTensorSet set;
    char msg[512];
    memset(&set, 0, sizeof set);
    CHECK(rt_safetensors_read(weights_path, NULL, &set, msg, sizeof msg) == 0);
    unsigned char *good = NULL, *bad = NULL;
    size_t good_len = 0, bad_len = 0;
    CHECK(rt_safetensors_encode(set.tensors, set.ntensors, RT_F32, &good, &good_len, msg,
                                sizeof msg) == 0);

    snn_session *s;
    CHECK(api.snn_session_create(m, "cpu", 3, 1, &s) == SNN_OK);
    Io io = *ref;
    for (int i = 0; i < io.noutputs; i++)
        io.out[i] = alloc_outputs(&io, i);

    CHECK_ERR(api.snn_session_load_weights(NULL, good, good_len), SNN_ERR_ARGUMENT,
              "session is NULL");
    CHECK_ERR(api.snn_session_load_weights(s, NULL, 1), SNN_ERR_ARGUMENT, "data is NULL");
    CHECK_ERR(api.snn_session_load_weights_file(s, NULL), SNN_ERR_ARGUMENT, "path is NULL");
    CHECK_ERR(api.snn_session_load_weights_file(s, "/nonexistent/w.safetensors"), SNN_ERR_IO,
              "/nonexistent/w.safetensors");
    CHECK_ERR(api.snn_session_load_weights(s, "garbage!", 8), SNN_ERR_WEIGHTS, "weights buffer");
    CHECK_ERR(api.snn_session_load_weights(s, good, good_len - 1), SNN_ERR_WEIGHTS,
              "weights buffer");
    /* a tensor of the wrong shape */
    RtTensor saved = set.tensors[0];
    set.tensors[0].dims[0] = 1;
    set.tensors[0].numel /= saved.dims[0];
    CHECK(rt_safetensors_encode(set.tensors, set.ntensors, RT_F32, &bad, &bad_len, msg,
                                sizeof msg) == 0);
    set.tensors[0] = saved;
    char want[128];
    snprintf(want, sizeof want, "tensor '%s' in the weights buffer has shape [1]", saved.name);
    CHECK_ERR(api.snn_session_load_weights(s, bad, bad_len), SNN_ERR_WEIGHTS, want);
    free(bad);
    /* a missing tensor */
    CHECK(rt_safetensors_encode(set.tensors + 1, set.ntensors - 1, RT_F32, &bad, &bad_len, msg,
                                sizeof msg) == 0);
    snprintf(want, sizeof want, "has no tensor '%s'", saved.name);
    CHECK_ERR(api.snn_session_load_weights(s, bad, bad_len), SNN_ERR_WEIGHTS, want);
    free(bad);
    /* an extra tensor */
    RtTensor *more = calloc((size_t)set.ntensors + 1, sizeof *more);
    memcpy(more, set.tensors, (size_t)set.ntensors * sizeof *more);
    more[set.ntensors] = set.tensors[0];
    more[set.ntensors].name = "extra.weight";
    CHECK(rt_safetensors_encode(more, set.ntensors + 1, RT_F32, &bad, &bad_len, msg, sizeof msg) ==
          0);
    CHECK_ERR(api.snn_session_load_weights(s, bad, bad_len), SNN_ERR_WEIGHTS,
              "tensor 'extra.weight' in the weights buffer is not a weight of model 'abi_model'");
    free(bad);
    free(more);
    /* a value that is not a number */
    float keep = set.tensors[1].data[0];
    set.tensors[1].data[0] = 0.0f / 0.0f;
    CHECK(rt_safetensors_encode(set.tensors, set.ntensors, RT_F16, &bad, &bad_len, msg,
                                sizeof msg) == 0);
    set.tensors[1].data[0] = keep;
    snprintf(want, sizeof want, "tensor '%s' in the weights buffer holds 1 value that is not "
             "finite (element 0 is NaN)", set.tensors[1].name);
    CHECK_ERR(api.snn_session_load_weights(s, bad, bad_len), SNN_ERR_WEIGHTS, want);
    free(bad);
    /* a value past the range of f16, the type the model stores the convolution's weight in */
    bool has_conv = false;
    for (int i = 0; i < set.ntensors; i++) {
        if (strcmp(set.tensors[i].name, "c.weight") != 0) continue;
        has_conv = true;
        keep = set.tensors[i].data[4];
        set.tensors[i].data[4] = 70000.0f;
        CHECK(rt_safetensors_encode(set.tensors, set.ntensors, RT_F32, &bad, &bad_len, msg,
                                    sizeof msg) == 0);
        set.tensors[i].data[4] = keep;
        CHECK_ERR(api.snn_session_load_weights(s, bad, bad_len), SNN_ERR_WEIGHTS,
                  "tensor 'c.weight' in the weights buffer: element 4 (70000) is past the range "
                  "of f16");
        free(bad);
    }
    CHECK(has_conv);
    /* a file larger than the model's weights (as f32) and a header: not read */
    char big_path[] = "/tmp/abi_test_big_XXXXXX";
    int fd = mkstemp(big_path);
    CHECK(fd >= 0 && ftruncate(fd, 64 << 20) == 0);
    if (fd >= 0) close(fd);
    CHECK_ERR(api.snn_session_load_weights_file(s, big_path), SNN_ERR_IO,
              "is 64.0 MiB, more than the ");
    unlink(big_path);
    /* after all those errors, the embedded weights still give the reference outputs */
    CHECK(run_all(&api, s, &io, 3) == SNN_OK && same_outputs(&io, ref));
    /* the same weights from memory and from the file: the same bits */
    CHECK(api.snn_session_load_weights(s, good, good_len) == SNN_OK);
    CHECK(run_all(&api, s, &io, 3) == SNN_OK && same_outputs(&io, ref));
    CHECK(api.snn_session_load_weights_file(s, weights_path) == SNN_OK);
    CHECK(run_all(&api, s, &io, 3) == SNN_OK && same_outputs(&io, ref));
    /* other weights (all doubled): other outputs */
    for (int i = 0; i < set.ntensors; i++)
        for (int64_t k = 0; k < set.tensors[i].numel; k++)
            set.tensors[i].data[k] *= 2.0f;
    CHECK(rt_safetensors_encode(set.tensors, set.ntensors, RT_F32, &bad, &bad_len, msg,
                                sizeof msg) == 0);
    CHECK(api.snn_session_load_weights(s, bad, bad_len) == SNN_OK);
    CHECK(run_all(&api, s, &io, 3) == SNN_OK && !same_outputs(&io, ref));
    free(bad);
    api.snn_session_destroy(s);
    for (int i = 0; i < io.noutputs; i++)
        free(io.out[i]);
    free(good);
    rt_tensorset_free(&set);
}

/* api becomes the library at path (false, counted as a failure, if it cannot be loaded); the
 * caller puts *saved back when done */
static bool
use_library(const char *path, const Api *saved)
{
    if (load_api(&api, path)) return true;
    failures++;
    api = *saved;
    return false;
}

/* the library built without weights: runs fail until weights are loaded, then match */
static void
test_no_weights(const char *path, const Io *ref, const char *weights_path)
{
    Api saved = api;
    if (!use_library(path, &saved)) return;
    const snn_model *m = api.snn_model_get();
    CHECK(m && api.snn_model_has_weights(m) == 0);
    snn_session *s;
    CHECK(api.snn_session_create(m, "auto", 4, 2, &s) == SNN_OK);
    Io io = *ref;
    for (int i = 0; i < io.noutputs; i++)
        io.out[i] = alloc_outputs(&io, i);
    CHECK_ERR(run_all(&api, s, &io, 4), SNN_ERR_STATE, "no weights loaded");
    CHECK(api.snn_session_load_weights_file(s, weights_path) == SNN_OK);
    CHECK(run_all(&api, s, &io, 4) == SNN_OK && same_outputs(&io, ref));
    api.snn_session_destroy(s);
    for (int i = 0; i < io.noutputs; i++)
        free(io.out[i]);
    dlclose(api.handle);
    api = saved;
}

/* a library with CUDA code where no GPU can be had: "auto" is the CPU, and a call that succeeds
 * leaves no message even though the GPU it tried first failed */
static void
test_auto_fallback(const char *path)
{
    Api saved = api;
    if (!use_library(path, &saved)) return;
    const snn_model *m = api.snn_model_get();
    CHECK(m && strstr(api.snn_model_devices(m), "cuda"));
    snn_session *s = NULL;
    CHECK_ERR(api.snn_session_create(m, "cuda", 4, 1, &s), SNN_ERR_DEVICE, "");
    CHECK(s == NULL && strcmp(api.snn_last_error(), "") != 0);
    CHECK(api.snn_session_create(m, "auto", 4, 1, &s) == SNN_OK && s);
    CHECK(!strcmp(api.snn_last_error(), ""));
    CHECK(s && !strcmp(api.snn_session_device(s), "cpu"));
    api.snn_session_destroy(s);
    dlclose(api.handle);
    api = saved;
}

/* abi_test --exact MODEL.so F16.safetensors OTHER.safetensors: MODEL.so (one input, one output)
 * stores a weight in f16 because the weights it was built with (F16's) all were f16 values
 * (the narrow-weights pass). Loading F16's again is fine; OTHER's, the same but one value not an
 * f16 value, is refused naming the tensor and element, and the weights before stay. */
static int
test_exact(const char *lib, const char *f16_path, const char *other_path)
{
    if (!load_api(&api, lib)) return 1;
    const snn_model *m = api.snn_model_get();
    snn_tensor_info in, out;
    snn_session *s = NULL;
    if (!m || api.snn_model_input(m, 0, &in) != SNN_OK ||
        api.snn_model_output(m, 0, &out) != SNN_OK ||
        api.snn_session_create(m, "cpu", 2, 1, &s) != SNN_OK) {
        fprintf(stderr, "abi_test: %s\n", api.snn_last_error());
        return 1;
    }
    int64_t nin = 2 * in.numel, nout = 2 * out.numel;
    float *x = malloc((size_t)nin * sizeof *x), *y0 = calloc((size_t)nout, sizeof *y0),
          *y = calloc((size_t)nout, sizeof *y);
    for (int64_t i = 0; x && i < nin; i++)
        x[i] = (float)(i % 7) * 0.4f;
    const float *ins[] = {x};
    float *o0[] = {y0}, *o[] = {y};
    CHECK(x && y0 && y && api.snn_run(s, 0, 2, ins, o0) == SNN_OK);
    double total = 0;
    for (int64_t i = 0; y0 && i < nout; i++)
        total += y0[i];
    CHECK(total > 0); /* something fires: the comparisons below can fail */
    CHECK(api.snn_session_load_weights_file(s, f16_path) == SNN_OK);
    CHECK(api.snn_run(s, 0, 2, ins, o) == SNN_OK && !memcmp(y, y0, (size_t)nout * sizeof *y));
    CHECK_ERR(api.snn_session_load_weights_file(s, other_path), SNN_ERR_WEIGHTS,
              "tensor 'd.weight' in ");
    CHECK(strstr(api.snn_last_error(), "element 5 (0.00150000001) is not a f16 value") &&
          strstr(api.snn_last_error(), "--disable-pass=narrow-weights"));
    memset(y, 0, (size_t)nout * sizeof *y);
    CHECK(api.snn_run(s, 0, 2, ins, o) == SNN_OK && !memcmp(y, y0, (size_t)nout * sizeof *y));
    api.snn_session_destroy(s);
    free(x);
    free(y0);
    free(y);
    dlclose(api.handle);
    printf("abi_test --exact: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}

int
main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "--exact")) return test_exact(argv[2], argv[3], argv[4]);
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: abi_test MODEL.so NOWEIGHTS.so WEIGHTS.safetensors INPUTS.npz "
                        "OUT.npz [CUDA.so]\n");
        return 2;
    }
    if (!load_api(&api, argv[1])) return 1;
    const snn_model *m = api.snn_model_get();
    if (!m) {
        fprintf(stderr, "abi_test: %s\n", api.snn_last_error());
        return 1;
    }
    CHECK(!strcmp(api.snn_last_error(), ""));
    RtTensorSet inputs;
    char msg[512];
    memset(&inputs, 0, sizeof inputs);
    if (rt_npz_read(argv[4], NULL, &inputs, msg, sizeof msg) != 0) {
        fprintf(stderr, "abi_test: %s\n", msg);
        return 1;
    }
    test_model_info(m, &inputs);

    /* the reference run: batches of 3 (the last one short), 2 threads */
    Io ref = {0};
    ref.ninputs = api.snn_model_num_inputs(m);
    ref.noutputs = api.snn_model_num_outputs(m);
    for (int i = 0; i < ref.ninputs; i++) {
        snn_tensor_info info;
        api.snn_model_input(m, i, &info);
        const RtTensor *t = rt_tensorset_find(&inputs, info.name);
        if (!t) {
            fprintf(stderr, "abi_test: %s has no array '%s'\n", argv[4], info.name);
            return 1;
        }
        ref.in[i] = t->data;
        ref.in_numel[i] = info.numel;
        ref.n = t->dims[0];
    }
    for (int i = 0; i < ref.noutputs; i++) {
        snn_tensor_info info;
        api.snn_model_output(m, i, &info);
        ref.out_numel[i] = info.numel;
        ref.out[i] = alloc_outputs(&ref, i);
    }
    test_session_errors(m, &ref);

    snn_session *s;
    CHECK(api.snn_session_create(m, "cpu", 3, 2, &s) == SNN_OK);
    CHECK(run_all(&api, s, &ref, 3) == SNN_OK);
    double counts[2] = {-1, -1};
    CHECK(api.snn_session_spike_counts(s, counts, 2) == SNN_OK && counts[0] > 0 && counts[1] > 0);
    api.snn_session_destroy(s);

    /* one thread, batch 1, and four sessions on two threads each, concurrently: the same bits */
    Job jobs[4];
    pthread_t tid[4];
    for (int j = 0; j < 4; j++) {
        jobs[j] = (Job){m, ref, j == 0 ? 1 : 2, j == 0 ? 1 : 2 + j, SNN_OK};
        for (int i = 0; i < ref.noutputs; i++)
            jobs[j].io.out[i] = alloc_outputs(&ref, i);
        CHECK(pthread_create(&tid[j], NULL, job_main, &jobs[j]) == 0);
    }
    for (int j = 0; j < 4; j++) {
        pthread_join(tid[j], NULL);
        CHECK(jobs[j].st == SNN_OK && same_outputs(&jobs[j].io, &ref));
        for (int i = 0; i < ref.noutputs; i++)
            free(jobs[j].io.out[i]);
    }

    test_weights(m, &ref, argv[3]);
    test_no_weights(argv[2], &ref, argv[3]);
    if (argc == 7) test_auto_fallback(argv[6]);

    /* the outputs, for the caller to compare with snnc's own run */
    RtTensor outs[8];
    memset(outs, 0, sizeof outs);
    for (int i = 0; i < ref.noutputs; i++) {
        snn_tensor_info info;
        api.snn_model_output(m, i, &info);
        outs[i].name = (char *)info.name;
        outs[i].dtype = RT_F32;
        outs[i].dims[0] = ref.n;
        outs[i].rank = 1;
        if (info.per_step) outs[i].dims[outs[i].rank++] = api.snn_model_timesteps(m);
        for (int d = 0; d < info.rank; d++)
            outs[i].dims[outs[i].rank++] = info.dims[d];
        outs[i].numel = ref.n * info.numel;
        outs[i].data = ref.out[i];
    }
    if (rt_npz_write(argv[5], outs, ref.noutputs, msg, sizeof msg) != 0) {
        fprintf(stderr, "abi_test: %s\n", msg);
        failures++;
    }
    for (int i = 0; i < ref.noutputs; i++)
        free(ref.out[i]);
    rt_tensorset_free(&inputs);
    dlclose(api.handle);
    printf("abi_test: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
