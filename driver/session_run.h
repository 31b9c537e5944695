/* session_run.h: a compiled program run by the runtime session (runtime/session.c), the executor a
 * model.so runs: the kernel IR's description, the CPU entry point or the GPU image, and the module's
 * weights made into a model in memory, then one batch at a time with spikes counted per graph node.
 * Used by --run on the CPU and the GPU and by the LLVM backend's tests. */
#ifndef SNN_DRIVER_SESSION_RUN_H
#define SNN_DRIVER_SESSION_RUN_H

#include "codegen/kir.h"
#include "runtime/kernel_abi.h"
#include "runtime/snn.h"

typedef struct SessionRun {
    snn_model *model;
    snn_session *s;
    double *seen; /* per counted layer: the session's counts after the last run */
    double *now;  /* per counted layer: scratch */
} SessionRun;

/* a model made of meta (kir_describe), entry (CPU) or image (GPU) and m's weights, and a session
 * on device ("cpu", "cuda"); false with err set (close it all the same) */
bool session_open(SessionRun *r, const Module *m, const char *meta, SnnkEntryFn entry,
                  const void *image, size_t image_size, const char *device, int batch, int threads,
                  char *err, size_t errlen);
void session_close(SessionRun *r);
/* one batch of p's model from global sample `base`; its spikes added to counts (NULL: none;
 * else m->nnodes entries) */
bool session_run(SessionRun *r, const KProgram *p, int batch, int64_t base, const float *const *in,
                 float *const *out, double *counts, char *err, size_t errlen);

#endif
