/* build.h: the CUDA backend's compile-time half, as one build: the program lowered for the GPU, its
 * CUDA C (or SNN_KERNEL_OVERRIDE's), and the images NVRTC compiles from it (--emit=cuda|ptx|cubin,
 * model.so's images). */
#ifndef SNN_CODEGEN_CUDA_BUILD_H
#define SNN_CODEGEN_CUDA_BUILD_H

#include "codegen/cuda/nvrtc.h"
#include "codegen/kir.h"

/* --cuda-arch takes at most MAX_CUDA_ARCHS; a build holds one image more (a PTX for the JIT) */
enum { MAX_CUDA_ARCHS = 16, MAX_CUDA_IMAGES = MAX_CUDA_ARCHS + 1 };

/* A CUDA build: the program lowered for the GPU, its CUDA C, SNN_KERNEL_OVERRIDE, and the images
 * compiled so far (what --report=json lists). */
typedef struct CudaBuild {
    KProgram *gp;
    char *source;
    char name[300]; /* how NVRTC's messages name the generated source: MODEL.cu */
    CudaOverride ov;
    char cache[4096]; /* "" for none */
    CudaImage images[MAX_CUDA_IMAGES];
    int nimages;
} CudaBuild;

void cuda_build_free(CudaBuild *b);
/* A build of gp (lowered for the GPU) and its CUDA C, both now the build's; reads
 * SNN_KERNEL_OVERRIDE (saying so on stderr). False after reporting an error (b freed). */
bool cuda_build_begin(CudaBuild *b, KProgram *gp, char *source, const char *model_name);
/* Compile the next image (arch, PTX or cubin); NULL after reporting an error */
CudaImage *cuda_build_add(CudaBuild *b, const char *arch, bool is_cubin);

#endif
