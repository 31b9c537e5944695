/* model_parts.h: the model as the runtime holds it, private to runtime/ (rt_*, never exported from
 * model.so): the description text parsed and validated (format at the top of model_parts.c) and
 * the parts that come with it: CPU code (the generated snnk_run), weights as safetensors bytes and
 * CUDA images. model.so's model is made once from the generated object's symbols (session.c);
 * snnc makes its own from parts it built in memory (rt_model_create). */
#ifndef SNN_RUNTIME_MODEL_PARTS_H
#define SNN_RUNTIME_MODEL_PARTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/kernel_abi.h"
#include "runtime/snn.h"

enum { RT_MAX_NAME = 256, RT_WORK_MAX_DEPTH = 64, RT_MAX_SLOT = 1 << 20 };

typedef enum { RT_BUF_INPUT, RT_BUF_OUTPUT, RT_BUF_WEIGHT, RT_BUF_TEMP } RtBufKind;
/* element types of buffers, as the description names them: the rows of runtime/elem_types.def,
 * the compiler's KType too (the 16-bit ones only for weights, filled by runtime/layout.h
 * rt_narrow16, or GPU temporaries; bit and bit2 only for CPU temporaries, 8 or 4 elements to a
 * byte: rt_buf_bytes) */
typedef enum {
#define ELEM(id, name, bytes, bits, value) RT_ELEM_##id,
#include "runtime/elem_types.def"
#undef ELEM
} RtElem;

typedef struct RtBuf {
    char name[RT_MAX_NAME];
    RtBufKind kind;
    RtElem type;
    size_t elem;        /* bytes per element (bit: 1, the unit of access; rt_buf_bytes) */
    int64_t per_batch, fixed; /* elements: per_batch * B + fixed */
    int io;             /* input/output/weight index */
    int nperm;          /* weights: transposed by perm (rank entries, rank + 1 with split; at
                         * most SNN_MAX_RANK, what rt_transpose_f32 takes) */
    int perm[SNN_MAX_RANK];
    int64_t split;      /* weights: the first dim split into tiles of split first (layout.h) */
    bool needs_zero;    /* temporaries: zeroed before every run */
    bool is_accumulator; /* cuda_buf spike counts (ZERO 2): each run adds; zeroed by the session */
    bool is_exact;       /* 16-bit weights (ZERO 3): values loaded must be exact in the type */
    int slot;           /* temporaries: 0, memory of its own; k > 0, shared with slot k's others */
    int span;           /* slot > 0: the regions it covers from slot's (runtime/layout.h) */
} RtBuf;

/* the bytes of buffer b at batch B (per_batch * B + fixed elements) */
size_t rt_buf_bytes(const RtBuf *b, int64_t batch);

typedef struct RtLayer {
    char name[RT_MAX_NAME];
    int buf; /* its i64 spike-count buffer */
} RtLayer;

typedef struct RtModelTensor {
    char name[RT_MAX_NAME];
    snn_tensor_info info;
} RtModelTensor;

/* WORK of a cuda_kernel record (runtime/cuda_abi.h): RPN over decimal integers, B and + - * / %,
 * checked when it is parsed (every operator has its operands, one value is left, the stack never
 * deeper than RT_WORK_MAX_DEPTH) so that evaluating it can only fail on arithmetic. */
typedef enum { RT_WORK_NUM, RT_WORK_B, RT_WORK_ADD, RT_WORK_SUB, RT_WORK_MUL, RT_WORK_DIV,
               RT_WORK_REM, RT_WORK_GE } RtWorkOp;
typedef struct RtWorkTok {
    RtWorkOp op;
    int64_t num; /* RT_WORK_NUM */
} RtWorkTok;
typedef struct RtCudaWork {
    RtWorkTok *toks;
    int ntoks;
} RtCudaWork;

/* one kernel of the schedule (cuda_kernel record), kept at its schedule index */
typedef struct RtCudaKernel {
    char symbol[RT_MAX_NAME];
    bool is_step;   /* runs in the step loop (consecutive step kernels share one loop) */
    bool is_single; /* one thread; else a grid-stride loop of WORK iterations */
    int *bufs;      /* cuda_bufs indices of its pointer parameters, increasing */
    int nbufs;
    RtCudaWork work;
} RtCudaKernel;

/* a cuda_image record: bytes [offset, offset + size) of the model's CUDA images */
typedef struct RtCudaImage {
    bool is_cubin;  /* else PTX */
    char arch[32];  /* sm_90 (cubin) or compute_80 (ptx) */
    int cc;         /* its compute capability as 10 * major + minor: 90, 80 */
    uint64_t offset, size;
} RtCudaImage;

/* a batchnorm of the training step: its batch statistics' buffers (mean [C] f32, biased variance
 * [C] f64) and the weights that keep the running ones, updated after every step */
typedef struct RtTrainBn {
    int mean, var;                 /* train_bufs indices */
    int running_mean, running_var; /* weight indices */
    int64_t C, inner;              /* channels; values per channel of one sample and step */
} RtTrainBn;

struct snn_model {
    char name[RT_MAX_NAME];
    char devices[64]; /* what it carries code for: "cpu", "cuda" or "cpu,cuda" */
    int timesteps;
    int nstatic, nstep; /* kernels outside and inside the step loop */
    int ninputs, noutputs, nweights, nlayers, nbufs;
    RtModelTensor *inputs, *outputs, *weights;
    RtLayer *layers;
    RtBuf *bufs;
    /* CUDA code: none (all 0), or a program of its own (lowered for the GPU): its buffers, its
     * layers' count buffers (layer l of the model is cuda_layers[l]), its kernels in schedule
     * order, and at least one image */
    RtBuf *cuda_bufs;
    int ncuda_bufs;
    RtLayer *cuda_layers; /* [nlayers] */
    int ncuda_layers;
    RtCudaKernel *cuda_kernels; /* by schedule index */
    int ncuda_kernels;
    RtCudaImage *cuda_images;
    int ncuda_images;
    /* the parts */
    SnnkEntryFn entry;                /* the CPU code, NULL if none */
    const unsigned char *weight_data; /* safetensors; weight_size 0: none */
    size_t weight_size;
    const unsigned char *image_data;  /* the bytes cuda_image records index */
    size_t image_size;
    /* the training step, in a library built with `snnc --train model.snn -o model.so`
     * (runtime/trainer.c): its program's buffers (train_buf records; none: not trainable), the
     * buffer of each output's loss gradient and of each weight's gradient (-1: none flows), its
     * batchnorms' statistics, and its two halves' code (snnk_train_fwd, snnk_train_bwd) */
    RtBuf *train_bufs;
    int ntrain_bufs;
    int *train_out_grad;    /* [noutputs] */
    int *train_weight_grad; /* [nweights] */
    int *train_input_grad;  /* [ninputs] (-1: none flows; -2: the library computes none) */
    RtTrainBn *train_bn;
    int ntrain_bn;
    SnnkEntryFn train_fwd, train_bwd, train_bwd_in; /* train_bwd_in: NULL in older libraries */
    bool is_made;     /* by rt_model_create: owns weight_data and image_data */
    snn_model *next;  /* the list of models rt_model_create made */
};

/* Parse and check description `meta` into *m (which it zeroes first) with the parts given (kept
 * by reference). False with one sentence in err; m then holds nothing (rt_model_clear is not
 * needed). */
bool rt_model_parse(snn_model *m, const char *meta, SnnkEntryFn entry, const void *weights,
                    size_t weights_size, const void *images, size_t images_size, char *err,
                    size_t errlen);
/* free what rt_model_parse allocated (the tables, not the parts) and zero *m */
void rt_model_clear(snn_model *m);

/* A model from parts (snnc's --run): the description text, the CPU code (NULL: none), weights as
 * safetensors (size 0: none) and CUDA images (size 0: none). Weights and images are copied. On
 * failure SNN_ERR_STATE (a bad description) or SNN_ERR_MEMORY, *out NULL and the message in
 * snn_last_error(). Sessions on it work as on a model.so's; free it after its sessions. */
snn_status rt_model_create(const char *meta, SnnkEntryFn cpu_entry, const void *weights,
                           size_t weights_size, const void *cuda_images, size_t cuda_images_size,
                           snn_model **out);
void rt_model_free(snn_model *m); /* NULL is fine */
/* true if rt_model_create made m and it has not been freed */
bool rt_model_is_made(const snn_model *m);

/* WORK text (len bytes, tokens separated by spaces) into *w; false with a message in err */
bool rt_cuda_work_parse(const char *text, size_t len, RtCudaWork *w, char *err, size_t errlen);
/* WORK at batch B; false with a message on division by zero, overflow or a negative value */
bool rt_cuda_work_eval(const RtCudaWork *w, int64_t batch, int64_t *out, char *err, size_t errlen);
void rt_cuda_work_free(RtCudaWork *w);

/* set the message snn_last_error() returns on this thread (error.c) and return st */
struct RtTensorSet;
/* session.c: every weight of m is in set, of its shape, f32, f16 or bf16 and finite; else the
 * status with the message naming the tensor and `what` holds it */
snn_status rt_weights_check(const snn_model *m, const struct RtTensorSet *set, const char *what);
snn_status rt_fail(snn_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* every snn_ function but snn_last_error starts here: a call that succeeds leaves no message */
void rt_clear_error(void);

#endif
