/* cuemu.h: libsnn_cuemu, a stand-in for libcuda and libnvrtc that runs snnc's CUDA path on the CPU,
 * so that CI (which has no GPU) exercises NVRTC compile -> module load -> graph capture -> launches
 * -> copies against the reference interpreter. Private to tests/cuda_emu; the CUDA types below are
 * declared here with the toolkit's ABI (cuda.h and nvrtc.h of CUDA 13), so nothing needs the
 * toolkit.
 *
 * Use: point SNN_NVRTC (snnc) and SNN_CUDA_DRIVER (the runtime) at libsnn_cuemu.so (CMake:
 * $<TARGET_FILE:snn_cuemu>). It exports SNN_NVRTC_FUNCTIONS and SNN_CUDA_DRIVER_FUNCTIONS of
 * runtime/cuda_abi.h with the real signatures and result codes, and the extras at the end of this
 * file. It provides nothing to the kernels: the source's SNN_CUDA_EMULATE part defines what CUDA
 * would (blockIdx, __global__, ...) and runs the blocks one after another: each block's threads
 * one after another to the end, or, in kernels whose threads meet (__syncthreads,
 * __shfl_xor_sync, __shared__), as coroutines that yield where they wait (cuda_gen.c's prelude).
 *
 * NVRTC (cuemu_nvrtc.c): nvrtcCompileProgram checks the options as NVRTC 13 does (unknown options,
 * bad values and unsupported architectures give NVRTC_ERROR_INVALID_OPTION with NVRTC's message)
 * and requires --gpu-architecture/-arch (the real one defaults to compute_75; snnc always names
 * one). It then compiles the source as C++ with -DSNN_CUDA_EMULATE (cuda_abi.h, "Emulation"):
 *     $SNN_CUEMU_CXX (default c++) -std=c++17 -O1 -fPIC -shared -DSNN_CUDA_EMULATE
 *         [-D/-U/-I/-include/-std options given to NVRTC] [-ffp-contract=off for --fmad=false]
 *         $SNN_CUEMU_CXXFLAGS -include TAG.h -x c++ SRC -o KERNEL.so
 * in a private directory under $TMPDIR (or /tmp), removed afterwards, without LD_PRELOAD (in the
 * sanitizer build, SNN_CUEMU_CXXFLAGS=-fsanitize=address instruments the kernels too, so that a
 * kernel's out-of-bounds access is reported where it happens); a failure gives
 * NVRTC_ERROR_COMPILATION with the compiler's output as the log. The images look like NVRTC's to
 * whoever handles them (snnc's cache, --emit, model.so): the "PTX" is text ending in its only NUL
 * (for compute_XY, also after an sm_XY compile, as NVRTC's PTX is for the virtual architecture),
 * the "CUBIN" an ELF file (none after a compute_XY compile, as with NVRTC); see the image format
 * below.
 *
 * Driver (cuemu_driver.c): one device ($SNN_CUEMU_DEVICES devices, 0 to make cuInit fail with
 * CUDA_ERROR_NO_DEVICE), named "snnc CUDA emulator", of compute capability $SNN_CUEMU_ARCH (default
 * 90: 9.0), 4 multiprocessors; primary contexts and a per-thread stack of current contexts (module,
 * memory, stream and launch calls fail with CUDA_ERROR_INVALID_CONTEXT when none is current, or the
 * current one was released). cuModuleLoadData loads an image: a cubin only on a device of exactly
 * its architecture, PTX on one at least as new (else CUDA_ERROR_NO_BINARY_FOR_GPU, INVALID_PTX),
 * and dlopens its shared object; cuModuleGetFunction finds snnk_emu_NAME and snnk_emu_NAME_nparams.
 * Device pointers are host addresses of 256-byte-aligned allocations, filled with $SNN_CUEMU_FILL
 * (a byte, default 255: NaN in every float, -1 in every integer, so that reading memory nobody
 * wrote shows) and limited to $SNN_CUEMU_MEM_LIMIT bytes in all (default none); every copy and
 * memset must lie inside one live allocation (CUDA_ERROR_INVALID_VALUE), cuMemFree takes only what
 * cuMemAlloc gave. Work runs on the calling thread, in order, when it is issued, except on a
 * capturing stream: there launches (their parameter values copied, as the driver copies them),
 * copies and memsets are recorded in a graph and run, checked again, by every cuGraphLaunch (a
 * recorded copy reads or writes its host memory then, as a graph's memcpy node does;
 * $SNN_CUEMU_FAIL_LAUNCH=N makes the N-th cuGraphLaunch fail with CUDA_ERROR_LAUNCH_FAILED). As
 * with the driver, an error on a capturing stream invalidates the capture, cuStreamSynchronize
 * on it is an error, and so are cuMemAlloc/cuMemFree during a global or thread-local capture.
 * Launches must be 1-D, with 1..1024 threads a block and no dynamic shared memory. Releasing a
 * primary context for the last time frees what is left in it (counted as "leaked").
 * One mutex serialises every call; kernels run under it, block after block.
 *
 * $SNN_CUEMU_VERBOSE=1 prints every error result with its reason on stderr; snn_cuemu_last_error()
 * gives the reason for the calling thread's last error either way. */
#ifndef SNN_TESTS_CUEMU_H
#define SNN_TESTS_CUEMU_H

#include <stdbool.h>
#include <stddef.h>

/* CUresult: name, value, cuGetErrorString's text */
#define CUEMU_CU_RESULTS(X)                                                                        \
    X(CUDA_SUCCESS, 0, "no error")                                                                 \
    X(CUDA_ERROR_INVALID_VALUE, 1, "invalid argument")                                             \
    X(CUDA_ERROR_OUT_OF_MEMORY, 2, "out of memory")                                                \
    X(CUDA_ERROR_NOT_INITIALIZED, 3, "initialization error")                                       \
    X(CUDA_ERROR_DEINITIALIZED, 4, "driver shutting down")                                         \
    X(CUDA_ERROR_PROFILER_DISABLED, 5, "profiler disabled while using external profiling tool")    \
    X(CUDA_ERROR_PROFILER_NOT_INITIALIZED, 6, "profiler not initialized")                          \
    X(CUDA_ERROR_PROFILER_ALREADY_STARTED, 7, "profiler already started")                          \
    X(CUDA_ERROR_PROFILER_ALREADY_STOPPED, 8, "profiler already stopped")                          \
    X(CUDA_ERROR_STUB_LIBRARY, 34, "CUDA driver is a stub library")                                \
    X(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, 36, "API call requires a newer CUDA driver")          \
    X(CUDA_ERROR_DEVICE_UNAVAILABLE, 46, "CUDA-capable device(s) is/are busy or unavailable")      \
    X(CUDA_ERROR_NO_DEVICE, 100, "no CUDA-capable device is detected")                             \
    X(CUDA_ERROR_INVALID_DEVICE, 101, "invalid device ordinal")                                    \
    X(CUDA_ERROR_DEVICE_NOT_LICENSED, 102, "device doesn't have valid Grid license")               \
    X(CUDA_ERROR_INVALID_IMAGE, 200, "device kernel image is invalid")                             \
    X(CUDA_ERROR_INVALID_CONTEXT, 201, "invalid device context")                                   \
    X(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, 202, "context already current")                          \
    X(CUDA_ERROR_MAP_FAILED, 205, "mapping of buffer object failed")                               \
    X(CUDA_ERROR_UNMAP_FAILED, 206, "unmapping of buffer object failed")                           \
    X(CUDA_ERROR_ARRAY_IS_MAPPED, 207, "array is mapped")                                          \
    X(CUDA_ERROR_ALREADY_MAPPED, 208, "resource already mapped")                                   \
    X(CUDA_ERROR_NO_BINARY_FOR_GPU, 209,                                                           \
      "no kernel image is available for execution on the device")                                  \
    X(CUDA_ERROR_ALREADY_ACQUIRED, 210, "resource already acquired")                               \
    X(CUDA_ERROR_NOT_MAPPED, 211, "resource not mapped")                                           \
    X(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, 212, "resource not mapped as array")                         \
    X(CUDA_ERROR_NOT_MAPPED_AS_POINTER, 213, "resource not mapped as pointer")                     \
    X(CUDA_ERROR_ECC_UNCORRECTABLE, 214, "uncorrectable ECC error encountered")                    \
    X(CUDA_ERROR_UNSUPPORTED_LIMIT, 215, "limit is not supported on this architecture")            \
    X(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, 216,                                                      \
      "exclusive-thread device already in use by a different thread")                              \
    X(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, 217,                                                     \
      "peer access is not supported between these two devices")                                    \
    X(CUDA_ERROR_INVALID_PTX, 218, "a PTX JIT compilation failed")                                 \
    X(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, 219, "invalid OpenGL or DirectX context")               \
    X(CUDA_ERROR_NVLINK_UNCORRECTABLE, 220,                                                        \
      "uncorrectable NVLink error detected during the execution")                                  \
    X(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, 221, "PTX JIT compiler library not found")                \
    X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222,                                                     \
      "the provided PTX was compiled with an unsupported toolchain.")                              \
    X(CUDA_ERROR_JIT_COMPILATION_DISABLED, 223, "PTX JIT compilation was disabled")                \
    X(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, 224,                                                   \
      "the provided execution affinity is not supported")                                          \
    X(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, 225,                                                    \
      "the provided PTX contains unsupported call to cudaDeviceSynchronize")                       \
    X(CUDA_ERROR_CONTAINED, 226, "exception contained")                                            \
    X(CUDA_ERROR_INVALID_SOURCE, 300, "device kernel image is invalid")                            \
    X(CUDA_ERROR_FILE_NOT_FOUND, 301, "file not found")                                            \
    X(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, 302, "shared object symbol not found")            \
    X(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, 303, "shared object initialization failed")            \
    X(CUDA_ERROR_OPERATING_SYSTEM, 304, "OS call failed or operation not supported on this OS")    \
    X(CUDA_ERROR_INVALID_HANDLE, 400, "invalid resource handle")                                   \
    X(CUDA_ERROR_ILLEGAL_STATE, 401, "the operation cannot be performed in the present state")     \
    X(CUDA_ERROR_LOSSY_QUERY, 402, "attempted introspection would be semantically lossy")          \
    X(CUDA_ERROR_NOT_FOUND, 500, "named symbol not found")                                         \
    X(CUDA_ERROR_NOT_READY, 600, "device not ready")                                               \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, 700, "an illegal memory access was encountered")                 \
    X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, 701, "too many resources requested for launch")          \
    X(CUDA_ERROR_LAUNCH_TIMEOUT, 702, "the launch timed out and was terminated")                   \
    X(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, 703, "launch uses incompatible texturing mode")    \
    X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, 704, "peer access is already enabled")               \
    X(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, 705, "peer access has not been enabled")                 \
    X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, 708, "cannot set while device is active in this process") \
    X(CUDA_ERROR_CONTEXT_IS_DESTROYED, 709, "context is destroyed")                                \
    X(CUDA_ERROR_ASSERT, 710, "device-side assert triggered")                                      \
    X(CUDA_ERROR_TOO_MANY_PEERS, 711, "peer mapping resources exhausted")                          \
    X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, 712,                                              \
      "part or all of the requested memory range is already mapped")                               \
    X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, 713,                                                  \
      "pointer does not correspond to a registered memory region")                                 \
    X(CUDA_ERROR_HARDWARE_STACK_ERROR, 714, "hardware stack error")                                \
    X(CUDA_ERROR_ILLEGAL_INSTRUCTION, 715, "an illegal instruction was encountered")               \
    X(CUDA_ERROR_MISALIGNED_ADDRESS, 716, "misaligned address")                                    \
    X(CUDA_ERROR_INVALID_ADDRESS_SPACE, 717,                                                       \
      "operation not supported on global/shared address space")                                    \
    X(CUDA_ERROR_INVALID_PC, 718, "invalid program counter")                                       \
    X(CUDA_ERROR_LAUNCH_FAILED, 719, "unspecified launch failure")                                 \
    X(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, 720, "too many blocks in cooperative launch")       \
    X(CUDA_ERROR_TENSOR_MEMORY_LEAK, 721, "tensor memory not completely freed")                    \
    X(CUDA_ERROR_NOT_PERMITTED, 800, "operation not permitted")                                    \
    X(CUDA_ERROR_NOT_SUPPORTED, 801, "operation not supported")                                    \
    X(CUDA_ERROR_SYSTEM_NOT_READY, 802, "system not yet initialized")                              \
    X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, 803,                                                      \
      "system has unsupported display driver / cuda driver combination")                           \
    X(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, 804,                                              \
      "forward compatibility was attempted on non supported HW")                                   \
    X(CUDA_ERROR_MPS_CONNECTION_FAILED, 805,                                                       \
      "MPS client failed to connect to the MPS control daemon or the MPS server")                  \
    X(CUDA_ERROR_MPS_RPC_FAILURE, 806,                                                             \
      "the remote procedural call between the MPS server and the MPS client failed")               \
    X(CUDA_ERROR_MPS_SERVER_NOT_READY, 807,                                                        \
      "MPS server is not ready to accept new MPS client requests")                                 \
    X(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, 808,                                                     \
      "the hardware resources required to create MPS client have been exhausted")                  \
    X(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, 809,                                                 \
      "the hardware resources required to support device connections have been exhausted")         \
    X(CUDA_ERROR_MPS_CLIENT_TERMINATED, 810, "the MPS client has been terminated by the server")   \
    X(CUDA_ERROR_CDP_NOT_SUPPORTED, 811,                                                           \
      "module is using CUDA Dynamic Parallelism, but the current configuration does not support "  \
      "it")                                                                                        \
    X(CUDA_ERROR_CDP_VERSION_MISMATCH, 812,                                                        \
      "CUDA Dynamic Parallelism is not supported with this version of the driver")                 \
    X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, 900,                                                  \
      "operation not permitted when stream is capturing")                                          \
    X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, 901,                                                  \
      "operation failed due to a previous error during capture")                                   \
    X(CUDA_ERROR_STREAM_CAPTURE_MERGE, 902,                                                        \
      "operation would result in a merge of separate capture sequences")                           \
    X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, 903,                                                    \
      "capture was not ended in the same stream as it began")                                      \
    X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, 904, "capturing stream has unjoined work")               \
    X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, 905,                                                    \
      "dependency created on uncaptured work in another stream")                                   \
    X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, 906,                                                     \
      "operation would make the legacy stream depend on a capturing blocking stream")              \
    X(CUDA_ERROR_CAPTURED_EVENT, 907,                                                              \
      "operation not permitted on an event last recorded in a capturing stream")                   \
    X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, 908,                                                 \
      "attempt to terminate a thread-local capture sequence from another thread")                  \
    X(CUDA_ERROR_TIMEOUT, 909, "wait operation timed out")                                         \
    X(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, 910,                                                   \
      "the graph update was not performed because it included changes which violated constraints " \
      "specific to instantiated graph update")                                                     \
    X(CUDA_ERROR_EXTERNAL_DEVICE, 911,                                                             \
      "an async error has occured in external entity outside of CUDA")                             \
    X(CUDA_ERROR_INVALID_CLUSTER_SIZE, 912,                                                        \
      "a kernel launch error has occurred due to cluster misconfiguration")                        \
    X(CUDA_ERROR_FUNCTION_NOT_LOADED, 913,                                                         \
      "the function handle is not loaded when calling an API that requires a loaded function")     \
    X(CUDA_ERROR_INVALID_RESOURCE_TYPE, 914,                                                       \
      "one or more resources passed in are not valid resource types for the operation")            \
    X(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, 915,                                              \
      "one or more resources are insufficient or non-applicable for the operation")                \
    X(CUDA_ERROR_KEY_ROTATION, 916, "an error happened during the key rotation sequence")          \
    X(CUDA_ERROR_UNKNOWN, 999, "unknown error")

/* nvrtcResult: name, value (nvrtcGetErrorString gives the name) */
#define CUEMU_NVRTC_RESULTS(X)                                                                     \
    X(NVRTC_SUCCESS, 0)                                                                            \
    X(NVRTC_ERROR_OUT_OF_MEMORY, 1)                                                                \
    X(NVRTC_ERROR_PROGRAM_CREATION_FAILURE, 2)                                                     \
    X(NVRTC_ERROR_INVALID_INPUT, 3)                                                                \
    X(NVRTC_ERROR_INVALID_PROGRAM, 4)                                                              \
    X(NVRTC_ERROR_INVALID_OPTION, 5)                                                               \
    X(NVRTC_ERROR_COMPILATION, 6)                                                                  \
    X(NVRTC_ERROR_BUILTIN_OPERATION_FAILURE, 7)                                                    \
    X(NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION, 8)                                        \
    X(NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION, 9)                                          \
    X(NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID, 10)                                                   \
    X(NVRTC_ERROR_INTERNAL_ERROR, 11)                                                              \
    X(NVRTC_ERROR_TIME_FILE_WRITE_FAILED, 12)                                                      \
    X(NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED, 13)                                                     \
    X(NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED, 14)                                                   \
    X(NVRTC_ERROR_PCH_CREATE, 15)                                                                  \
    X(NVRTC_ERROR_CANCELLED, 16)                                                                   \
    X(NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED, 17)

#define CUEMU_ENUM2(name, value) name = value,
#define CUEMU_ENUM3(name, value, text) name = value,
typedef enum cudaError_enum { CUEMU_CU_RESULTS(CUEMU_ENUM3) } CUresult;
typedef enum { CUEMU_NVRTC_RESULTS(CUEMU_ENUM2) } nvrtcResult;

/* the rest of cuda.h that the exported functions use; enums hold only the values acted on */
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct _nvrtcProgram *nvrtcProgram;

typedef enum CUdevice_attribute_enum {
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y = 3,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z = 4,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
    CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY = 9,
    CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
    CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK = 12,
    CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39,
    CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
    CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR = 82,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR = 106,
} CUdevice_attribute;

typedef enum CUpointer_attribute_enum {
    CU_POINTER_ATTRIBUTE_CONTEXT = 1,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
} CUpointer_attribute;

typedef enum CUmemorytype_enum { CU_MEMORYTYPE_HOST = 1, CU_MEMORYTYPE_DEVICE = 2 } CUmemorytype;

typedef enum CUstreamCaptureMode_enum {
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    CU_STREAM_CAPTURE_MODE_RELAXED = 2,
} CUstreamCaptureMode;

enum { CU_STREAM_DEFAULT = 0, CU_STREAM_NON_BLOCKING = 1 };
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

/* cuemu_driver.c: the driver functions, as cuda.h declares them (the _v2 names are what cuda.h's
 * macros map cuMemAlloc, cuMemcpyHtoDAsync, ... to) */
CUresult cuGetErrorName(CUresult error, const char **pStr);
CUresult cuGetErrorString(CUresult error, const char **pStr);
CUresult cuInit(unsigned int Flags);
CUresult cuDriverGetVersion(int *driverVersion);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev);
CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuCtxPushCurrent_v2(CUcontext ctx);
CUresult cuCtxPopCurrent_v2(CUcontext *pctx);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleUnload(CUmodule hmod);
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                              CUstream hStream);
CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream);
CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream);
CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);
CUresult cuStreamDestroy_v2(CUstream hStream);
CUresult cuStreamSynchronize(CUstream hStream);
CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode);
CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                     unsigned long long flags);
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphExecDestroy(CUgraphExec hGraphExec);
CUresult cuGraphDestroy(CUgraph hGraph);
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra);
CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr);

/* cuemu_nvrtc.c: the NVRTC functions, as nvrtc.h declares them */
const char *nvrtcGetErrorString(nvrtcResult result);
nvrtcResult nvrtcVersion(int *major, int *minor);
nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                               int numHeaders, const char *const *headers,
                               const char *const *includeNames);
nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog);
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char *const *options);
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet);
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log);
nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet);
nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx);
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet);
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin);

/* The images nvrtcGetPTX/nvrtcGetCUBIN return and cuModuleLoadData takes, both the shared object
 * the host compiler made, CUEMU_IMAGE_VERSION 1:
 *   PTX: text, NUL-terminated, no other NUL (as real PTX): the line
 *        "// SNNCUEMU <version> <arch, compute_XY> <bytes of the shared object>", comment lines
 *        starting "//", then the shared object in base64 (RFC 4648, '=' padding), 76 characters a
 *        line.
 *   CUBIN: the shared object itself, an ELF file for the host machine (a real cubin is one for
 *        EM_CUDA), holding the NUL-terminated string "SNNCUEMU cubin <version> <arch, sm_XY>"
 *        (the compile adds it with -include); its size is where its section headers end. */
#define CUEMU_PTX_MAGIC "// SNNCUEMU "
#define CUEMU_CUBIN_TAG "SNNCUEMU cubin "
#define CUEMU_IMAGE_VERSION 1

/* a GPU architecture: "sm_90a" -> {90, 'a', false}, "compute_80" -> {80, 0, true}, "120" -> {120,
 * 0, false} (a bare compute capability, as $SNN_CUEMU_ARCH takes it); false if s is none of these
 */
typedef struct CuemuArch {
    int cc;          /* major * 10 + minor */
    char suffix;     /* 0, 'a' (this architecture only) or 'f' (its family: same major) */
    bool is_virtual; /* compute_XY */
} CuemuArch;
bool cuemu_parse_arch(const char *s, CuemuArch *out);
/* can code for `code` run on a device of compute capability cc? cubins need exactly cc (or, with
 * suffix f, the same major version and minor at least theirs), PTX cc at least its own */
bool cuemu_arch_runs_on(const CuemuArch *code, int cc);
/* cuemu_driver.c keeps the statistics and the last error for both halves */
void cuemu_count_compile(void);
void cuemu_set_last_error(const char *msg);

/* Extras for tests (dlsym them): the value of the counter or gauge `name`, -1 for an unknown name:
 *   launches (cuLaunchKernel calls run at once), captured_launches, graph_launches,
 * graph_kernel_runs (kernels run by graph launches), kernel_runs (all), bytes_htod, bytes_dtoh,
 * bytes_dtod, bytes_copied (their sum), memsets, bytes_set, allocs, modules_loaded, compiles,
 * errors (error results returned by the driver functions), leaked (objects freed by a last primary
 * context release); live_allocs, live_bytes, peak_bytes, live_modules, live_streams, live_graphs,
 *   live_graph_execs, current_contexts (the calling thread's stack depth).
 * snn_cuemu_stats_reset zeroes the counters (not the live_ gauges); snn_cuemu_last_error gives the
 * reason for the calling thread's last driver or NVRTC error, "" if none. */
long long snn_cuemu_stat(const char *name);
void snn_cuemu_stats_reset(void);
const char *snn_cuemu_last_error(void);

#endif
