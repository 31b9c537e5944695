/* cuda_exec.h: running a model's CUDA code (runtime/cuda_abi.h) for a session: the module loaded
 * on one device, one device arena (temporaries at max_batch, weights, input and output staging,
 * the dyn array), one stream, and one CUDA graph per batch size holding the whole run (memsets and
 * every kernel launch of the schedule), captured on first use. Calls on one executor must take
 * turns (the session's lock); any host thread may make them. Nothing prints; runs allocate
 * nothing on the host. */
#ifndef SNN_RUNTIME_CUDA_EXEC_H
#define SNN_RUNTIME_CUDA_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/model_parts.h"

typedef struct RtCudaExec RtCudaExec;

/* The model's CUDA code on device `ordinal` for batches of up to max_batch. SNN_ERR_DEVICE (no
 * driver, no such device, no image for it, a failed call) or SNN_ERR_MEMORY with one sentence in
 * err. The model must carry CUDA code (m->ncuda_kernels > 0). */
snn_status rt_cuda_exec_create(const snn_model *m, int ordinal, int max_batch, RtCudaExec **out,
                               char *err, size_t errlen);
void rt_cuda_exec_destroy(RtCudaExec *x); /* NULL is fine */

/* Replace the device weights from packed host f32 arrays (mem[b] for every weight buffer b, as
 * the CPU session binds them): all of them, or none on failure (the old ones are kept). */
snn_status rt_cuda_exec_set_weights(RtCudaExec *x, void *const *mem, char *err, size_t errlen);

/* One batch: inputs[i]/outputs[i] host arrays, or device addresses when is_device (read and
 * written in place by the kernels). The counted layers' spikes are added on the device;
 * *launches the kernel launches the run made, *graphs the graph launches. queued (is_device
 * only): the run goes on `stream` (a CUstream; NULL is the legacy default stream) and is not
 * waited for; what uses the arena from another stream later (a run, weights, counts) waits for
 * it first. */
snn_status rt_cuda_exec_run(RtCudaExec *x, bool queued, void *stream, int64_t first_sample,
                            int batch, const void *const *inputs, void *const *outputs,
                            bool is_device, int64_t *launches, int64_t *graphs, char *err,
                            size_t errlen);
/* Part of a program's schedule, for a caller that runs a program in pieces (snnc --train on the
 * GPU): the CUDA kernels whose kernel-IR index (their symbol's snnk_k<N>_) is in [first, end),
 * step loops once per step, at batch `batch`, the inputs and outputs at their staging buffers;
 * with zero, the temporaries that need it zeroed first. Waits for the kernels. */
snn_status rt_cuda_exec_run_kernels(RtCudaExec *x, int first, int end, int batch,
                                    int64_t first_sample, bool zero, char *err, size_t errlen);
/* bytes of buffer b (a cuda_buf index; an input's or output's staging) from or to host memory */
snn_status rt_cuda_exec_copy(RtCudaExec *x, int b, void *host, size_t bytes, bool to_device,
                             char *err, size_t errlen);
/* A training step's own device work (snnc --train --device=cuda keeps the weights, their
 * optimiser state and the update on the device). rt_cuda_exec_alloc: `bytes` zeroed bytes of
 * device memory beside the arena, freed with the executor, their address in *addr.
 * rt_cuda_exec_addr: buffer b's device address (0 for no such buffer). rt_cuda_exec_copy_addr:
 * bytes between host memory and a device address (waited for). rt_cuda_exec_launch: a kernel of
 * the module that is no part of the model's schedule, by name, over `threads` threads in blocks
 * of SNN_CUDA_BLOCK (the grid capped as a schedule's; its threads stride over the rest), params
 * as cuLaunchKernel's (8 bytes each, runtime/cuda_abi.h), queued on the executor's stream after
 * what it ran before. */
snn_status rt_cuda_exec_alloc(RtCudaExec *x, size_t bytes, uint64_t *addr, char *err,
                              size_t errlen);
uint64_t rt_cuda_exec_addr(const RtCudaExec *x, int b);
snn_status rt_cuda_exec_copy_addr(RtCudaExec *x, uint64_t addr, void *host, size_t bytes,
                                  bool to_device, char *err, size_t errlen);
snn_status rt_cuda_exec_launch(RtCudaExec *x, const char *name, int64_t threads, void **params,
                               char *err, size_t errlen);
/* the device memory the executor holds: its arena and rt_cuda_exec_alloc's (0 for NULL) */
size_t rt_cuda_exec_device_bytes(const RtCudaExec *x);
/* counts[l]: every spike of counted layer l since the executor began or its counts were reset */
snn_status rt_cuda_exec_counts(RtCudaExec *x, double *counts, char *err, size_t errlen);
snn_status rt_cuda_exec_reset_counts(RtCudaExec *x, char *err, size_t errlen);

#endif
