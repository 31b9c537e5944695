/* codegen/cuda: the CUDA backend's compile-time half. cuda_gen.c turns the kernel IR into CUDA C
 * (the contract with the runtime is runtime/cuda_abi.h); nvrtc.c compiles that text to PTX or a
 * cubin with NVRTC, loaded with dlopen. Nothing here needs a GPU. */
#ifndef SNN_CUDA_GEN_H
#define SNN_CUDA_GEN_H

#include <stdbool.h>
#include <stddef.h>

#include "codegen/kir.h"

/* p is lowered for KTARGET_GPU (kir_lower_for); its buffers are its own, not the CPU program's.
 * The program as one CUDA C translation unit (runtime/cuda_abi.h), malloc'ed; deterministic. */
char *cuda_gen_source(const KProgram *p);
/* cuda_gen_source's text with the kernels a training step launches by name after it (snnc
 * --train --device=cuda): snn_train_sgd, snn_train_adam (runtime/train.c's updates, the same bits)
 * and snn_train_repack (a weight's packed copy from its own layout); malloc'ed. */
char *cuda_gen_train_source(const KProgram *p);
/* The program's cuda_layer, cuda_buf and cuda_kernel records (runtime/cuda_abi.h), malloc'ed. */
char *cuda_gen_describe(const KProgram *p);
/* Whether step kernels [first, end) (a whole step loop) become one kernel launched once per run,
 * a block per sample through every step (kir_by_sample, every kernel a grid kernel of at most
 * 1,024 iterations per sample). */
bool cuda_steps_fused(const KProgram *p, int first, int end);

#endif
