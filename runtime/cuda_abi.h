/* cuda_abi.h: the contract between generated CUDA C (codegen/cuda/cuda_gen.c) and the runtime that
 * loads and launches it (runtime/cuda_exec.c), shared by `snnc --run --device cuda` and model.so.
 *
 * Generated source: one translation unit, compiled by NVRTC with SNN_CUDA_NVRTC_OPTIONS plus
 * --gpu-architecture=ARCH. Kernel i of the schedule (KProgram.kernels[i]) is
 *
 *   extern "C" __global__ void SYMBOL(T0 *b0, ..., Tn-1 *bn-1, long long B, long long t,
 *                                     const long long *dyn)
 *
 * b0..bn-1: the device addresses of the program buffers the kernel uses other than inputs and
 * outputs, in increasing buffer index (element types as in the kernel IR: float, double, long
 * long, unsigned char (u8 and bool), signed char); B the batch; t the step (0 for kernels outside
 * the step loop); dyn a device array of int64 values the runtime writes before each run:
 * dyn[SNN_CUDA_DYN_SAMPLE_BASE] the first sample's global index (it keys the Poisson encoder), and
 * dyn[SNN_CUDA_DYN_IO + k] the address of the k-th input or output buffer (the program's buffers
 * of kind input or output, in buffer order): the runtime's staging memory, or the caller's device
 * memory (snn_run_device), which the kernels then read and write in place. Values that change
 * from run to run are read through dyn so that one captured graph serves every run of a batch
 * size. The spike-count buffers of the GPU program accumulate (ZERO field 2 of their cuda_buf
 * record): each run adds to them; the runtime zeroes them when a session starts and when its
 * counts are reset, and reads them when the counts are asked for.
 *
 * Launch geometry, given by the kernel's record in the metadata:
 *   grid:   the kernel is one parallel loop of WORK iterations, walked grid-stride, so any grid
 *           of SNN_CUDA_BLOCK-thread blocks is correct; the runtime launches
 *           min(ceil(WORK / SNN_CUDA_BLOCK), its cap) blocks, and none when WORK is 0.
 *   single: one thread (grid 1, block 1): code with no parallel loop to spread.
 *
 * Metadata records (lines of model.so's snnk_meta after the `buf` records, and of the description
 * snnc hands the runtime for --device cuda):
 *   cuda_layer NAME BUF  and  cuda_buf NAME KIND TYPE PER_BATCH FIXED IO NPERM PERM... ZERO
 *       exactly as the `layer` and `buf` records, for the CUDA program: it is lowered for the GPU
 *       (one thread per output element where the CPU uses register blocks and event lists), so
 *       its buffers and their indices are its own. Inputs, outputs, weights and layer names are
 *       the model's, the same for both. The B0.. of cuda_kernel and the BUF of cuda_layer index
 *       the cuda_buf records, in order.
 *   cuda_kernel I SYMBOL STEP MODE NB B0 ... B(NB-1) WORK...
 *       I the kernel's index in the schedule, STEP 1 for a step kernel, MODE grid|single, NB the
 *       number of buffer parameters and their program buffer indices, then WORK as RPN tokens to
 *       the end of the line: decimal integers, B, and the operators + - * / % (C's int64
 *       arithmetic; / and % truncate; operands never negative) and >= (1 or 0: a kernel that
 *       runs only from some batch on). `single` kernels give WORK 1.
 *   cuda_image FORMAT ARCH OFFSET SIZE
 *       FORMAT cubin (for exactly ARCH, e.g. sm_90) or ptx (ARCH compute_80: the driver compiles
 *       it for a newer device at load); the bytes [OFFSET, OFFSET+SIZE) of snnk_cuda_images.
 *   A model without these records has no CUDA code ("devices cpu").
 *
 * Emulation: the same source compiled as C++ by a host compiler with -DSNN_CUDA_EMULATE defines,
 * for every kernel, extern "C" void SNN_CUDA_EMU_PREFIX SYMBOL(gx, bx, void **params): the kernel
 * run for every block and thread of a (gx, 1, 1) x (bx, 1, 1) launch, one after another, params
 * as cuLaunchKernel's kernelParams (every parameter is 8 bytes: a pointer or a long long), and
 * extern "C" const int SNN_CUDA_EMU_PREFIX SYMBOL _nparams, their count (a captured launch copies
 * that many values, as the driver does). Blocks run one after another, and a block's threads too,
 * except in kernels whose threads meet (__syncthreads, warp shuffles, __shared__ memory): those
 * run a block's threads as coroutines. __CUDA_ARCH__ is not defined. tests/cuda_emu builds a stand-in for libcuda and libnvrtc on
 * it, so the runtime's whole CUDA path is exercised on machines without a GPU. */
#ifndef SNN_RUNTIME_CUDA_ABI_H
#define SNN_RUNTIME_CUDA_ABI_H

#define SNN_CUDA_BLOCK 256
#define SNN_CUDA_DYN_SAMPLE_BASE 0
#define SNN_CUDA_DYN_IO 1 /* then one slot per input/output buffer */
#define SNN_CUDA_EMU_PREFIX "snnk_emu_"

/* NVRTC options every compile uses (then --gpu-architecture). --fmad=false: a*b+c is two roundings,
 * as in the kernel IR (contraction would change f32 results); -prec-div/-prec-sqrt are NVRTC's
 * defaults (correctly rounded) and stated so that nobody turns on fast math by accident. */
#define SNN_CUDA_NVRTC_OPTIONS                                                                     \
    "--fmad=false", "--prec-div=true", "--prec-sqrt=true", "--ftz=false", "-lineinfo"
#define SNN_CUDA_NVRTC_NOPTIONS 5

/* The driver-API functions the runtime resolves (dlsym, these exact versioned names) from
 * libcuda.so.1 or $SNN_CUDA_DRIVER; a stand-in driver must export them all. */
#define SNN_CUDA_DRIVER_FUNCTIONS(X)                                                                \
    X(cuGetErrorName) X(cuGetErrorString) X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount)     \
    X(cuDeviceGet) X(cuDeviceGetAttribute) X(cuDeviceGetName) X(cuDevicePrimaryCtxRetain)          \
    X(cuDevicePrimaryCtxRelease_v2) X(cuCtxPushCurrent_v2) X(cuCtxPopCurrent_v2)                   \
    X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuMemAlloc_v2)                  \
    X(cuMemFree_v2) X(cuMemcpyHtoDAsync_v2) X(cuMemcpyDtoHAsync_v2) X(cuMemcpyDtoDAsync_v2)        \
    X(cuMemsetD8Async) X(cuStreamCreate) X(cuStreamDestroy_v2) X(cuStreamSynchronize)              \
    X(cuStreamBeginCapture_v2) X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags)               \
    X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuLaunchKernel)                    \
    X(cuPointerGetAttribute)

/* The NVRTC functions snnc resolves from libnvrtc.so.13 / .12 / libnvrtc.so or $SNN_NVRTC. */
#define SNN_NVRTC_FUNCTIONS(X)                                                                      \
    X(nvrtcGetErrorString) X(nvrtcVersion) X(nvrtcCreateProgram) X(nvrtcDestroyProgram)            \
    X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog) X(nvrtcGetPTXSize)      \
    X(nvrtcGetPTX) X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN)

#endif
