/* build.h: what snnc writes (driver/build.c). Each returns an exit status (0, or 1 after
 * reporting) unless it says otherwise. */
#ifndef SNN_DRIVER_BUILD_H
#define SNN_DRIVER_BUILD_H

#include "codegen/cuda/build.h"
#include "driver/options.h"

#include <stdio.h>

/* s as a JSON string, quoted and escaped (--report=json) */
void json_string(FILE *f, const char *s);
/* --emit=weights: the bound weights as f32 safetensors */
int write_weights(const Module *m, const char *path);
/* the CUDA build of m: compiled for the GPU up to its CUDA C, then handed over; false after
 * reporting */
bool cuda_build_start(Module *m, CudaBuild *b);
/* --emit=ptx (to -o FILE or stdout) and --emit=cubin (-o FILE) */
int emit_cuda_image(Module *m, const Options *o);
/* --emit=ir|kernel|llvm|cuda, to -o FILE or stdout */
int emit_text(Module *m, const Options *o);
/* --emit=obj -o FILE, or -o MODEL.so */
int build_binary(Module *m, const Options *o);
/* --emit=nir -o FILE */
int emit_nir(Module *m, const Options *o);
/* --emit=snn: the imported model's text and, with -o, its weights beside it */
int emit_snn(const Options *o, const char *weights_path);

#endif
