/* nvrtc.h: compiling the CUDA C of codegen/cuda (or a hand-edited file in its place) to PTX or a
 * cubin with NVRTC (nvrtc.c). NVRTC is loaded with dlopen at first use, so snnc builds and runs
 * without the CUDA toolkit; results go through the shared compile cache (codegen/cache.h). Nothing
 * here prints: every error comes back as one sentence in err, NVRTC's log beside it. */
#ifndef SNN_CUDA_NVRTC_H
#define SNN_CUDA_NVRTC_H

#include <stdbool.h>
#include <stddef.h>

/* A compiled image: a cubin for exactly one real architecture, or PTX for a virtual one. */
typedef struct CudaImage {
    bool is_cubin;
    char arch[24];       /* what was asked for: sm_90 (cubin, or PTX written for sm_90), compute_80 */
    unsigned char *data; /* malloc'ed */
    size_t size;         /* bytes; PTX: the text and its terminating NUL (cuModuleLoadData's form) */
    char *log;           /* NVRTC's program log, malloc'ed, "" when empty or from the cache */
    bool is_cache_hit;   /* the image came from the cache */
    double seconds;      /* wall-clock time it took (the compile, or the cache read) */
} CudaImage;

/* SNN_KERNEL_OVERRIDE: a file that takes the generated CUDA C's place. */
typedef struct CudaOverride {
    const char *path; /* the variable's value; NULL: no override */
    bool is_ptx;      /* .ptx: the PTX image itself; else (.cu) CUDA C compiled as usual */
    char *text;       /* the file's bytes, NUL-terminated, malloc'ed */
    size_t len;
} CudaOverride;

/* Load NVRTC, once per process (thread-safe): $SNN_NVRTC (a path) if set, else libnvrtc.so.13,
 * libnvrtc.so.12, libnvrtc.so, resolving SNN_NVRTC_FUNCTIONS (runtime/cuda_abi.h). False with
 * the reason in err, e.g. "NVRTC is unavailable: libnvrtc.so.13 not found (...)". */
bool cuda_nvrtc_load(char *err, size_t errlen);
/* After a successful load: NVRTC's version and the library it came from (SNN_NVRTC's path or the
 * soname found). */
void cuda_nvrtc_version(int *major, int *minor);
const char *cuda_nvrtc_library(void);

/* Whether arch has NVRTC's form: sm_NN or compute_NN (2 or 3 digits), optionally followed by a
 * or f (sm_90a, sm_100f). Says nothing of which architectures this NVRTC supports: it tells. */
bool cuda_arch_is_valid(const char *arch);
/* sm_NN...: a real architecture, one a cubin can be built for */
bool cuda_arch_is_real(const char *arch);
/* The virtual architecture of arch: compute_NN (the digits of sm_NN, without a suffix). */
void cuda_arch_virtual(const char *arch, char *buf, size_t n);

/* Compile source (CUDA C; name, e.g. "model.cu" or the override's path, is how NVRTC's messages
 * refer to it) for arch with SNN_CUDA_NVRTC_OPTIONS, to a cubin (is_cubin: arch must be real) or
 * PTX. cache_dir (NULL or "": none) keeps results under a hash of the source, name, arch, format,
 * options and NVRTC's version. On failure err holds one sentence and img->log NVRTC's log
 * (possibly "", and "" where err quotes it whole); either way the caller frees img with
 * cuda_image_free. */
bool cuda_nvrtc_compile(const char *source, const char *name, const char *arch, bool is_cubin,
                        const char *cache_dir, CudaImage *img, char *err, size_t errlen);
void cuda_image_free(CudaImage *img);

/* Read $SNN_KERNEL_OVERRIDE if it is set (ov->path NULL if not): a .cu or .ptx file. False with a
 * message in err if it cannot be read or is neither. */
bool cuda_override_load(CudaOverride *ov, char *err, size_t errlen);
void cuda_override_free(CudaOverride *ov);
/* The image of the generated program `source` (named `name`) for arch, or of what ov puts in its
 * place: a .cu override is compiled instead (named by its path), a .ptx override is the PTX image
 * as it is, and an error where a cubin is asked for. ov may be NULL. As cuda_nvrtc_compile. */
bool cuda_build_image(const char *source, const char *name, const CudaOverride *ov,
                      const char *arch, bool is_cubin, const char *cache_dir, CudaImage *img,
                      char *err, size_t errlen);

#endif
