/* snn.h: the C ABI of a compiled spiking network (a model.so made by `snnc model.snn -o model.so`).
 * C99; documented in docs/api.md. Everything a model.so exports is declared here and starts with
 * snn_. The library never prints, exits or aborts: every function that can fail returns an
 * snn_status and leaves a message for snn_last_error().
 *
 *   const snn_model *m = snn_model_get();
 *   snn_session *s;
 *   if (snn_session_create(m, "cpu", 256, 0, &s) != SNN_OK) puts(snn_last_error());
 *   const float *in[] = {images};  float *out[] = {scores};
 *   snn_run(s, 0, 256, in, out);
 *   snn_session_destroy(s);
 *
 * Arrays are sample-major float32, as snnc's --input/--output files are: input i of a batch of B is
 * B * info.numel floats, sample after sample ([B, T, ...] for an input or output with per_step).
 * Devices: "cpu", and "cuda" / "cuda:N" where the library carries CUDA code (the NVIDIA driver is
 * loaded when a session first needs it; the library does not link it).
 * Thread safety: model functions may be called from any thread; sessions are independent of each
 * other, and calls on one session from several threads take turns (a session holds a lock while it
 * runs). */
#ifndef SNN_H
#define SNN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change of this header; snn_abi_version() says what a library was
 * built with. */
#define SNN_ABI_VERSION 3
#define SNN_MAX_RANK 8
/* the largest max_batch and threads snn_session_create accepts */
#define SNN_MAX_BATCH (1 << 20)
#define SNN_MAX_THREADS 1024

typedef enum snn_status {
    SNN_OK = 0,
    SNN_ERR_ARGUMENT = 1, /* a NULL pointer, a batch out of range, an index out of range */
    SNN_ERR_DEVICE = 2,   /* the device string names no device this library can run on, or the
                             device cannot be had (no driver, no such GPU) or failed */
    SNN_ERR_WEIGHTS = 3,  /* a weights file or buffer that is unreadable or does not fit the model */
    SNN_ERR_STATE = 4,    /* the session cannot run yet (no weights loaded), or the model's
                             description is damaged */
    SNN_ERR_MEMORY = 5,   /* out of memory, or a thread could not be started */
    SNN_ERR_IO = 6,       /* a file could not be read */
} snn_status;

typedef enum snn_dtype { SNN_F32 = 0 } snn_dtype;

typedef struct snn_model snn_model;     /* the model a library holds: static, never freed */
typedef struct snn_session snn_session; /* memory, threads and weights for running it */

typedef struct snn_tensor_info {
    const char *name;            /* as in the model source ("image", "rate", "fc1.weight") */
    snn_dtype dtype;             /* SNN_F32: what callers pass and receive */
    int per_step;                /* 1: one slice per timestep, the sample is [T, dims...] */
    int rank;                    /* rank of one sample (one step), 0..SNN_MAX_RANK */
    int64_t dims[SNN_MAX_RANK];  /* dims of one sample (one step); weights: the tensor's shape */
    int64_t numel;               /* floats per sample (T * prod(dims) when per_step) */
} snn_tensor_info;

typedef struct snn_stats {
    int64_t runs;            /* successful snn_run calls since the session began or stats reset */
    int64_t samples;         /* samples they ran */
    int64_t kernel_launches; /* kernels run: each kernel once per run, step kernels once per step
                                (cuda: the launches its graphs hold; none for a kernel with no
                                work) */
    double seconds;          /* wall-clock time inside those runs */
    double last_seconds;     /* of the last run */
    int64_t graph_launches;  /* cuda: CUDA graphs launched (one per run); cpu: 0. ABI 2 */
} snn_stats;

/* ABI version the library was built with (SNN_ABI_VERSION of its header). */
uint32_t snn_abi_version(void);
/* The message of the last failed call on this thread: "" if the last call succeeded (every snn_
 * function but this one clears it first). Valid until the next call on this thread. */
const char *snn_last_error(void);
/* A name for a status ("SNN_ERR_ARGUMENT"). */
const char *snn_status_name(snn_status status);

/* ---- the model ---- */
const snn_model *snn_model_get(void);
const char *snn_model_name(const snn_model *m);   /* NULL if m is NULL */
int snn_model_timesteps(const snn_model *m);      /* T; -1 if m is NULL */
int snn_model_num_inputs(const snn_model *m);     /* -1 if m is NULL */
int snn_model_num_outputs(const snn_model *m);
int snn_model_num_weights(const snn_model *m);
/* Spiking layers whose spikes are counted (snn_session_spike_counts), in model order. */
int snn_model_num_layers(const snn_model *m);
const char *snn_model_layer_name(const snn_model *m, int i); /* NULL if out of range */
snn_status snn_model_input(const snn_model *m, int i, snn_tensor_info *info);
snn_status snn_model_output(const snn_model *m, int i, snn_tensor_info *info);
snn_status snn_model_weight(const snn_model *m, int i, snn_tensor_info *info);
/* 1 if the library carries weights (a session then starts with them), 0 if not. */
int snn_model_has_weights(const snn_model *m);
/* The device kinds compiled in, comma-separated ("cpu", "cpu,cuda"). */
const char *snn_model_devices(const snn_model *m);

/* ---- sessions ---- */
/* A session on `device` ("cpu", "cuda" = "cuda:0", "cuda:N"; NULL, "" or "auto" for the best
 * available: cuda:0 when the library carries CUDA code and that device can be had, else cpu) for
 * batches of at most max_batch samples (1..SNN_MAX_BATCH), running on `threads` threads (0: one
 * per online core; at most SNN_MAX_THREADS; cpu only): out of range, SNN_ERR_ARGUMENT before
 * anything is allocated or started. All memory a run needs, host and device, is allocated here, once: runs allocate
 * nothing. The session starts with the library's weights if it carries any. */
snn_status snn_session_create(const snn_model *m, const char *device, int max_batch, int threads,
                              snn_session **out);
void snn_session_destroy(snn_session *s); /* NULL is fine */
/* Replace every weight from safetensors data (a file, or `size` bytes in memory): tensors named as
 * the model's weights (snn_model_weight), float32, float16 or bfloat16, of exactly their shapes;
 * a missing, extra or mis-shaped tensor is an error and leaves the session's weights as they were. */
snn_status snn_session_load_weights_file(snn_session *s, const char *path);
snn_status snn_session_load_weights(snn_session *s, const void *data, size_t size);
/* Run a batch of `batch` samples (1..max_batch): inputs[i] and outputs[i] as described above, for
 * every input and output of the model. first_sample is the global index of the batch's first
 * sample: it keys the Poisson encoder, so a data set split into batches gives the same spikes as
 * one run over all of it (pass 0 when that does not matter). Every sample's key is its own while
 * first_sample + batch stays within 2^63 / (the largest per-sample buffer, in elements): past
 * that, SNN_ERR_ARGUMENT. Inputs are not checked: NaN and infinite values are computed with as
 * IEEE float32 arithmetic does (docs/api.md). */
snn_status snn_run(snn_session *s, int64_t first_sample, int batch, const float *const *inputs,
                   float *const *outputs);
/* snn_run with inputs and outputs in CUDA device memory (device addresses, e.g. from cuMemAlloc or
 * cudaMalloc, of any device with unified addressing), on a cuda session: no copy through the host.
 * SNN_ERR_DEVICE on a cpu session; SNN_ERR_ARGUMENT for a pointer that is not device memory. */
snn_status snn_run_device(snn_session *s, int64_t first_sample, int batch,
                          const void *const *inputs, void *const *outputs);
/* snn_run_device queued on the caller's CUDA stream (a CUstream, or cudaStream_t: the same
 * handle; NULL is the legacy default stream, as in CUDA) and not waited for (ABI 3, added): the
 * run's copies and its graph go on `stream`, in
 * order with the caller's work there, and the call returns once they are queued; the outputs are
 * ready when the stream reaches that point. The session's device memory is one: runs on a session
 * go to one stream at a time (a run on another stream, snn_session_load_weights and the spike
 * counts first wait for what the last stream has pending). SNN_ERR_DEVICE on a cpu session;
 * SNN_ERR_ARGUMENT for a pointer that is not device memory. */
snn_status snn_run_stream(snn_session *s, void *stream, int64_t first_sample, int batch,
                          const void *const *inputs, void *const *outputs);
/* Spikes each counted layer emitted (sum over samples, steps and neurons of |spike|) since the
 * session began or the last reset: counts[i] for layer i, n entries (snn_model_num_layers). */
snn_status snn_session_spike_counts(snn_session *s, double *counts, int n);
snn_status snn_session_stats(snn_session *s, snn_stats *stats);
snn_status snn_session_reset_stats(snn_session *s);
int snn_session_threads(const snn_session *s); /* 1 on cuda; -1 if s is NULL */
const char *snn_session_device(const snn_session *s); /* "cpu", "cuda:0"; NULL if s is NULL */

/* ---- training (ABI 3) ----
 * A library built with `snnc --train model.snn -o model.so` also carries the model's compiled
 * training step (surrogate-gradient BPTT, the same code and bits as `snnc --train`): a trainer
 * holds float32 weights, the optimiser's state and the memory of a step for batches of at most
 * max_batch. On the CPU; one step at a time per trainer (calls take turns).
 *
 *   snn_train_config c;  snn_train_config_default(&c);  c.lr = 1e-3;
 *   snn_trainer *t;  snn_trainer_create(m, &c, 64, 0, &t);
 *   for (...) snn_train_step(t, first, 64, inputs, labels, &loss, &correct);
 *   snn_trainer_save_weights(t, "trained.safetensors");
 *   snn_session_copy_weights(session, t);  (an inference session now runs the trained weights)
 *
 * Framework integration uses the pair: snn_train_forward (the outputs; it keeps what the backward
 * needs), snn_train_backward (from the outputs' gradients to the weights'; _inputs: and the
 * inputs'), then snn_trainer_apply (the optimiser over the gradients the backward kept or the
 * caller gives), or the caller's own optimiser writing weights back with snn_trainer_set_weight. */
typedef struct snn_trainer snn_trainer;
/* MSE to the one-hot label (SpikingJelly's, on rates), cross-entropy (snnTorch's ce_count_loss
 * on counts); snnTorch's ce_rate_loss and mse_membrane_loss (on an output of every step:
 * per_step), mse_count_loss (on counts) */
typedef enum snn_loss {
    SNN_LOSS_MSE = 0,
    SNN_LOSS_CE = 1,
    SNN_LOSS_CE_RATE = 2,
    SNN_LOSS_MSE_COUNT = 3,
    SNN_LOSS_MSE_MEMBRANE = 4
} snn_loss;
typedef enum snn_optimizer { SNN_OPT_ADAM = 0, SNN_OPT_ADAMW = 1, SNN_OPT_SGD = 2 } snn_optimizer;
typedef struct snn_train_config {
    snn_loss loss;
    int loss_output;         /* the output the loss reads: class scores [B, K] ([B, T, K]) */
    snn_optimizer optimizer; /* torch.optim's update and order */
    double lr, momentum, weight_decay, beta1, beta2, eps;
    int nesterov;
    double clip_grad_norm;    /* > 0: clip_grad_norm_ before every update */
    double loss_on, loss_off; /* mse_count: correct and incorrect rates; mse_membrane: on and off
                                 targets (defaults 1, 0) */
} snn_train_config;
/* PyTorch's defaults: MSE on output 0, Adam lr 1e-3, betas 0.9 0.999, eps 1e-8, no decay */
void snn_train_config_default(snn_train_config *c);
/* 1 if the library carries the training step, 0 if not (or m is NULL) */
int snn_model_trainable(const snn_model *m);
/* A trainer starting from the library's weights (or none: load some with
 * snn_trainer_load_weights_file before the first step); threads as snn_session_create's. */
snn_status snn_trainer_create(const snn_model *m, const snn_train_config *c, int max_batch,
                              int threads, snn_trainer **out);
void snn_trainer_destroy(snn_trainer *t); /* NULL is fine */
/* One whole step over a batch: forward, loss against labels[batch] (classes 0..K-1 as floats),
 * backward, optimiser; *loss (the batch's mean) and *correct (argmax == label) where not NULL. */
snn_status snn_train_step(snn_trainer *t, int64_t first_sample, int batch,
                          const float *const *inputs, const float *labels, double *loss,
                          int64_t *correct);
/* The forward alone (training mode: batchnorm on the batch, running statistics updated);
 * outputs as snn_run's, or NULL */
snn_status snn_train_forward(snn_trainer *t, int64_t first_sample, int batch,
                             const float *const *inputs, float *const *outputs);
/* After snn_train_forward: dLoss/doutput of its batch (output_grads[k]: [batch, numel] floats,
 * NULL entries zero) to every weight's gradient, kept for snn_trainer_apply and copied to
 * weight_grads[w] ([numel] floats) where weight_grads and it are not NULL */
snn_status snn_train_backward(snn_trainer *t, const float *const *output_grads,
                              float *const *weight_grads);
/* The same, and each input's gradient dLoss/dinput into input_grads[i] where input_grads and it
 * are not NULL ([batch, numel] floats, the input's layout; a static input's is summed over the
 * steps; zeros where none flows: a Poisson encoder samples its input). SNN_ERR_STATE from a
 * library built before input gradients existed. */
snn_status snn_train_backward_inputs(snn_trainer *t, const float *const *output_grads,
                                     float *const *input_grads, float *const *weight_grads);
/* One optimiser update from weight_grads (NULL: the last backward's), clipped as configured */
snn_status snn_trainer_apply(snn_trainer *t, const float *const *weight_grads);
snn_status snn_trainer_set_lr(snn_trainer *t, double lr);
int64_t snn_trainer_steps(const snn_trainer *t); /* updates so far; -1 if t is NULL */
/* weight i as float32 ([numel]: snn_model_weight's shape) */
snn_status snn_trainer_get_weight(snn_trainer *t, int i, float *dst);
/* weight i from src (float32, [numel]); the optimiser's state stays as it is */
snn_status snn_trainer_set_weight(snn_trainer *t, int i, const float *src);
snn_status snn_trainer_load_weights_file(snn_trainer *t, const char *path);
/* The weights as safetensors (the model's names, float32), through a temporary file: a failed
 * write leaves any old file as it was. A checkpoint adds the optimiser's state and step count
 * (NAME.__opt0, NAME.__opt1, __snnc_steps); loading one continues to the same bits. */
snn_status snn_trainer_save_weights(snn_trainer *t, const char *path);
snn_status snn_trainer_save_checkpoint(snn_trainer *t, const char *path);
snn_status snn_trainer_load_checkpoint(snn_trainer *t, const char *path);
/* An inference session (cpu) takes the trainer's current weights */
snn_status snn_session_copy_weights(snn_session *s, snn_trainer *t);

#ifdef __cplusplus
}
#endif

#endif
