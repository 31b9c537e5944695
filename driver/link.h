/* link.h: writing the object file model.so is made of and linking model.so (link.c). Both report
 * errors through diag and return false. */
#ifndef SNN_DRIVER_LINK_H
#define SNN_DRIVER_LINK_H

#include <stdbool.h>
#include <stddef.h>

#include "codegen/kir.h"

/* The CUDA code model.so carries, built by the caller (snnc.c): the description's CUDA records
 * (runtime/cuda_abi.h: cuda_layer, cuda_buf, cuda_kernel, cuda_image lines) and the images their
 * cuda_image records index. records NULL: none, the model runs on the CPU only. */
typedef struct LinkCuda {
    const char *records;
    const unsigned char *images;
    size_t images_len;
} LinkCuda;

/* The training step a trainable model.so carries (`snnc --train model.snn -o model.so`): the
 * program kir_lower_train made (kernels 0..nforward-1 its forward, the rest its backward) and its
 * train_* description records (kir_describe_train). NULL: none. */
typedef struct LinkTrain {
    const KProgram *p;
    int nforward, ninput_first; /* KTrain's: the forward, the backward, the inputs' gradients */
    const char *records;
} LinkTrain;

/* The relocatable object of kp for LLVM CPU `cpu` (NULL: the host), with the CUDA code of cuda
 * (NULL: none); weights embedded from kp->m if embed_weights (they must be bound). */
bool link_emit_object(const KProgram *kp, const char *cpu, const LinkCuda *cuda, const char *path,
                      bool embed_weights);
/* model.so at out: that object linked with the model runtime by $CC (default cc). */
bool link_shared_library(const KProgram *kp, const char *cpu, const LinkCuda *cuda,
                         const LinkTrain *train, const char *out, bool embed_weights);

#endif
