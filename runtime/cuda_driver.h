/* cuda_driver.h: the CUDA driver API, loaded at run time with dlopen (never linked, never the
 * toolkit's cuda.h): the few types and enum values the runtime uses, declared here with the values
 * of cuda.h (CUDA 13.0), and one table of the functions of SNN_CUDA_DRIVER_FUNCTIONS
 * (runtime/cuda_abi.h), resolved by their exact versioned names. The library is loaded once per
 * process; nothing here prints or exits. */
#ifndef SNN_RUNTIME_CUDA_DRIVER_H
#define SNN_RUNTIME_CUDA_DRIVER_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/cuda_abi.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NO_DEVICE = 100,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_STREAM_NON_BLOCKING = 1,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEMORYTYPE_UNIFIED = 4,
};

/* the signatures of cuda.h's versioned entry points (enum parameters passed as int) */
typedef CUresult (*PFN_cuGetErrorName)(CUresult error, const char **str);
typedef CUresult (*PFN_cuGetErrorString)(CUresult error, const char **str);
typedef CUresult (*PFN_cuInit)(unsigned flags);
typedef CUresult (*PFN_cuDriverGetVersion)(int *version);
typedef CUresult (*PFN_cuDeviceGetCount)(int *count);
typedef CUresult (*PFN_cuDeviceGet)(CUdevice *dev, int ordinal);
typedef CUresult (*PFN_cuDeviceGetAttribute)(int *value, int attrib, CUdevice dev);
typedef CUresult (*PFN_cuDeviceGetName)(char *name, int len, CUdevice dev);
typedef CUresult (*PFN_cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
typedef CUresult (*PFN_cuDevicePrimaryCtxRelease_v2)(CUdevice dev);
typedef CUresult (*PFN_cuCtxPushCurrent_v2)(CUcontext ctx);
typedef CUresult (*PFN_cuCtxPopCurrent_v2)(CUcontext *ctx);
typedef CUresult (*PFN_cuModuleLoadData)(CUmodule *mod, const void *image);
typedef CUresult (*PFN_cuModuleUnload)(CUmodule mod);
typedef CUresult (*PFN_cuModuleGetFunction)(CUfunction *fn, CUmodule mod, const char *name);
typedef CUresult (*PFN_cuMemAlloc_v2)(CUdeviceptr *ptr, size_t bytes);
typedef CUresult (*PFN_cuMemFree_v2)(CUdeviceptr ptr);
typedef CUresult (*PFN_cuMemcpyHtoDAsync_v2)(CUdeviceptr dst, const void *src, size_t bytes,
                                             CUstream stream);
typedef CUresult (*PFN_cuMemcpyDtoHAsync_v2)(void *dst, CUdeviceptr src, size_t bytes,
                                             CUstream stream);
typedef CUresult (*PFN_cuMemcpyDtoDAsync_v2)(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                             CUstream stream);
typedef CUresult (*PFN_cuMemsetD8Async)(CUdeviceptr dst, unsigned char value, size_t n,
                                        CUstream stream);
typedef CUresult (*PFN_cuStreamCreate)(CUstream *stream, unsigned flags);
typedef CUresult (*PFN_cuStreamDestroy_v2)(CUstream stream);
typedef CUresult (*PFN_cuStreamSynchronize)(CUstream stream);
typedef CUresult (*PFN_cuStreamBeginCapture_v2)(CUstream stream, int mode);
typedef CUresult (*PFN_cuStreamEndCapture)(CUstream stream, CUgraph *graph);
typedef CUresult (*PFN_cuGraphInstantiateWithFlags)(CUgraphExec *exec, CUgraph graph,
                                                    unsigned long long flags);
typedef CUresult (*PFN_cuGraphLaunch)(CUgraphExec exec, CUstream stream);
typedef CUresult (*PFN_cuGraphExecDestroy)(CUgraphExec exec);
typedef CUresult (*PFN_cuGraphDestroy)(CUgraph graph);
typedef CUresult (*PFN_cuLaunchKernel)(CUfunction fn, unsigned gx, unsigned gy, unsigned gz,
                                       unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                       CUstream stream, void **params, void **extra);
typedef CUresult (*PFN_cuPointerGetAttribute)(void *data, int attrib, CUdeviceptr ptr);

typedef struct RtCudaDriver {
    void *handle;  /* of dlopen; kept open for the life of the process */
    int version;   /* cuDriverGetVersion: 13000 for CUDA 13.0 */
    int ndevices;  /* cuDeviceGetCount, >= 1 */
#define RT_CUDA_FIELD(name) PFN_##name name;
    SNN_CUDA_DRIVER_FUNCTIONS(RT_CUDA_FIELD)
#undef RT_CUDA_FIELD
} RtCudaDriver;

/* The process's driver: loaded on the first call ($SNN_CUDA_DRIVER, a path, if set; else
 * libcuda.so.1, else libcuda.so), every function resolved, cuInit'ed and its devices counted.
 * NULL with one sentence in err if it cannot be had; the answer never changes afterwards. */
const RtCudaDriver *rt_cuda_driver(char *err, size_t errlen);
/* The same, uncached, into *d: from `path`, or the default names when path is NULL (tests). */
bool rt_cuda_driver_open(const char *path, RtCudaDriver *d, char *err, size_t errlen);
/* "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY: out of memory" for result r of call fn. */
void rt_cuda_error(const RtCudaDriver *d, CUresult r, const char *fn, char *err, size_t errlen);
/* The device with this ordinal: true, or false with "cuda:3 does not exist (this machine
 * has 1 CUDA device)" or a failed call in err. */
bool rt_cuda_device(const RtCudaDriver *d, int ordinal, CUdevice *dev, char *err, size_t errlen);
/* The compute capability of device `ordinal` of the process's driver (9.0: *major 9, *minor 0), and
 * its name; false with one sentence in err when there is no such device or no driver. */
bool rt_cuda_device_arch(int ordinal, int *major, int *minor, char *name, size_t namelen, char *err,
                         size_t errlen);

#endif
