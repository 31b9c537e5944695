/* emu_smoke.c: drives libsnn_cuemu (argv[1]) as snnc and the runtime will: dlopen, the NVRTC and
 * driver functions of runtime/cuda_abi.h by name, a hand-written kernel source that follows
 * cuda_abi.h (its SNN_CUDA_EMULATE part included), compile -> load -> copy -> launch -> graph
 * capture
 * -> replay -> copy back, then the error paths a runtime bug would hit. With --no-device it checks
 * only that cuInit fails as on a machine without a GPU (run with SNN_CUEMU_DEVICES=0). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_abi.h"
#include "tests/cuda_emu/cuemu.h"
#include "tests/unit/check.h"

typedef struct Api {
#define FIELD(f) __typeof__(f) *f;
    SNN_CUDA_DRIVER_FUNCTIONS(FIELD)
    SNN_NVRTC_FUNCTIONS(FIELD)
    FIELD(snn_cuemu_stat)
    FIELD(snn_cuemu_stats_reset)
    FIELD(snn_cuemu_last_error)
#undef FIELD
    void *handle;
} Api;

static Api api;
static const char *lib_path; /* the library under test */

static bool
load_api(const char *path)
{
    api.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!api.handle) {
        fprintf(stderr, "emu_smoke: %s\n", dlerror());
        return false;
    }
#define LOOKUP(f)                                                                                  \
    /* POSIX's way to store a dlsym result in a function pointer */                                \
    if (!(*(void **)&api.f = dlsym(api.handle, #f))) {                                             \
        fprintf(stderr, "emu_smoke: %s does not export %s\n", path, #f);                           \
        return false;                                                                              \
    }
    SNN_CUDA_DRIVER_FUNCTIONS(LOOKUP)
    SNN_NVRTC_FUNCTIONS(LOOKUP)
    LOOKUP(snn_cuemu_stat)
    LOOKUP(snn_cuemu_stats_reset)
    LOOKUP(snn_cuemu_last_error)
#undef LOOKUP
    return true;
}

static const char *
cu_name(CUresult r)
{
    const char *s = "(not a CUresult)";
    api.cuGetErrorName(r, &s);
    return s;
}

/* CU(call, want): the driver call gives want (with the emulator's reason if not) */
#define CU(call, want) check_cu(api.call, want, #call, __LINE__)
#define CU_OK(call) CU(call, CUDA_SUCCESS)

static void
check_cu(CUresult got, CUresult want, const char *what, int line)
{
    if (got == want) {
        npass++;
        return;
    }
    nfail++;
    fprintf(stderr, "%s:%d: %s gave %s, expected %s (%s)\n", __FILE__, line, what, cu_name(got),
            cu_name(want), api.snn_cuemu_last_error());
}

/* The kernels, as cuda_gen.c would write them: CUDA C for NVRTC, C++ with -DSNN_CUDA_EMULATE. */
#define KERNEL_SRC                                                                                 \
    "#ifdef SNN_CUDA_EMULATE\n"                                                                    \
    "struct snn_dim3 { unsigned x, y, z; };\n"                                                     \
    "static thread_local snn_dim3 blockIdx, threadIdx, blockDim, gridDim;\n"                       \
    "#define __global__\n"                                                                         \
    "#define __device__ static inline\n"                                                           \
    "#endif\n"                                                                                     \
    "\n"                                                                                           \
    "__device__ float twice(float v) { return 2.0f * v; }\n"                                       \
    "\n"                                                                                           \
    "/* y = 2 x + t, grid-stride */\n"                                                             \
    "extern \"C\" __global__ void scale(float *y, const float *x, long long n, long long t)\n"     \
    "{\n"                                                                                          \
    "    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"            \
    "         i += (long long)gridDim.x * blockDim.x)\n"                                           \
    "        y[i] = twice(x[i]) + (float)t;\n"                                                     \
    "}\n"                                                                                          \
    "\n"                                                                                           \
    "/* z += y, grid-stride */\n"                                                                  \
    "extern \"C\" __global__ void accumulate(float *z, const float *y, long long n)\n"             \
    "{\n"                                                                                          \
    "    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"            \
    "         i += (long long)gridDim.x * blockDim.x)\n"                                           \
    "        z[i] += y[i];\n"                                                                      \
    "}\n"                                                                                          \
    "\n"                                                                                           \
    "#ifdef SNN_CUDA_EMULATE\n"                                                                    \
    "extern \"C\" void snnk_emu_scale(unsigned gx, unsigned bx, void **p)\n"                       \
    "{\n"                                                                                          \
    "    gridDim = {gx, 1, 1};\n"                                                                  \
    "    blockDim = {bx, 1, 1};\n"                                                                 \
    "    for (unsigned b = 0; b < gx; b++)\n"                                                      \
    "        for (unsigned t = 0; t < bx; t++) {\n"                                                \
    "            blockIdx = {b, 0, 0};\n"                                                          \
    "            threadIdx = {t, 0, 0};\n"                                                         \
    "            scale(*(float **)p[0], *(const float **)p[1], *(long long *)p[2],\n"              \
    "                  *(long long *)p[3]);\n"                                                     \
    "        }\n"                                                                                  \
    "}\n"                                                                                          \
    "extern \"C\" const int snnk_emu_scale_nparams = 4;\n"                                         \
    "extern \"C\" void snnk_emu_accumulate(unsigned gx, unsigned bx, void **p)\n"                  \
    "{\n"                                                                                          \
    "    gridDim = {gx, 1, 1};\n"                                                                  \
    "    blockDim = {bx, 1, 1};\n"                                                                 \
    "    for (unsigned b = 0; b < gx; b++)\n"                                                      \
    "        for (unsigned t = 0; t < bx; t++) {\n"                                                \
    "            blockIdx = {b, 0, 0};\n"                                                          \
    "            threadIdx = {t, 0, 0};\n"                                                         \
    "            accumulate(*(float **)p[0], *(const float **)p[1], *(long long *)p[2]);\n"        \
    "        }\n"                                                                                  \
    "}\n"                                                                                          \
    "extern \"C\" const int snnk_emu_accumulate_nparams = 3;\n"                                    \
    "#endif\n"
static const char kernel_src[] = KERNEL_SRC;

/* the same with a kernel that does not compile */
static const char bad_src[] = KERNEL_SRC "extern \"C\" __global__ void k(float *x)\n"
                                         "{\n"
                                         "    x[0] = undefined_thing;\n"
                                         "}\n";

/* An NVRTC compile of src: the result, the log, and the PTX and CUBIN (malloc'ed; NULL if none). */
typedef struct Compiled {
    nvrtcResult result;
    char *log, *ptx, *cubin;
    size_t ptx_size, cubin_size;
} Compiled;

static Compiled
compile(const char *src, const char *name, int nopts, const char *const *opts)
{
    Compiled c = {0};
    nvrtcProgram prog;
    if (api.nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL) != NVRTC_SUCCESS) {
        c.result = NVRTC_ERROR_PROGRAM_CREATION_FAILURE;
        return c;
    }
    c.result = api.nvrtcCompileProgram(prog, nopts, opts);
    size_t n = 0;
    CHECK(api.nvrtcGetProgramLogSize(prog, &n) == NVRTC_SUCCESS && n >= 1);
    c.log = calloc(n + 1, 1);
    CHECK(api.nvrtcGetProgramLog(prog, c.log) == NVRTC_SUCCESS && strlen(c.log) == n - 1);
    CHECK(api.nvrtcGetPTXSize(prog, &c.ptx_size) == NVRTC_SUCCESS);
    CHECK(api.nvrtcGetCUBINSize(prog, &c.cubin_size) == NVRTC_SUCCESS);
    if (c.result == NVRTC_SUCCESS) {
        c.ptx = malloc(c.ptx_size);
        CHECK(api.nvrtcGetPTX(prog, c.ptx) == NVRTC_SUCCESS);
        if (c.cubin_size) {
            c.cubin = malloc(c.cubin_size);
            CHECK(api.nvrtcGetCUBIN(prog, c.cubin) == NVRTC_SUCCESS);
        }
    }
    CHECK(api.nvrtcDestroyProgram(&prog) == NVRTC_SUCCESS && prog == NULL);
    return c;
}

static void
free_compiled(Compiled *c)
{
    free(c->log);
    free(c->ptx);
    free(c->cubin);
}

/* the options snnc uses, then --gpu-architecture=arch */
static Compiled
compile_for(const char *src, const char *arch)
{
    char arch_opt[64];
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", arch);
    const char *opts[] = {SNN_CUDA_NVRTC_OPTIONS, arch_opt};
    return compile(src, "snn_smoke.cu", SNN_CUDA_NVRTC_NOPTIONS + 1, opts);
}

/* x[i] = i / 4 - 10 (exact in float) */
static void
fill_x(float *x, int n)
{
    for (int i = 0; i < n; i++)
        x[i] = (float)i / 4.0f - 10.0f;
}

static void
test_nvrtc_basics(void)
{
    int major = 0, minor = -1;
    CHECK(api.nvrtcVersion(&major, &minor) == NVRTC_SUCCESS && major == 13 && minor == 0);
    CHECK(strcmp(api.nvrtcGetErrorString(NVRTC_ERROR_COMPILATION), "NVRTC_ERROR_COMPILATION") == 0);
    CHECK(strcmp(api.nvrtcGetErrorString((nvrtcResult)99), "NVRTC_ERROR unknown") == 0);

    /* a virtual architecture: PTX, no CUBIN, as NVRTC */
    Compiled c = compile_for(kernel_src, "compute_80");
    CHECK(c.result == NVRTC_SUCCESS);
    CHECK(c.ptx_size > 1000 && c.cubin_size == 0 && !c.cubin);
    /* text whose only NUL ends it, as PTX */
    CHECK(c.ptx && strncmp(c.ptx, "// SNNCUEMU 1 compute_80 ", 25) == 0);
    CHECK(c.ptx && strlen(c.ptx) == c.ptx_size - 1);
    free_compiled(&c);

    /* options NVRTC refuses, with its messages */
    const char *unknown[] = {"--bogus-option", "-arch=sm_90"};
    c = compile(kernel_src, "k.cu", 2, unknown);
    CHECK(c.result == NVRTC_ERROR_INVALID_OPTION && strstr(c.log, "unrecognized option --bogus"));
    CHECK(c.ptx_size == 1 && c.cubin_size == 0); /* an empty PTX string, as NVRTC */
    free_compiled(&c);
    const char *old_arch[] = {"--gpu-architecture=sm_70"};
    c = compile(kernel_src, "k.cu", 1, old_arch);
    CHECK(c.result == NVRTC_ERROR_INVALID_OPTION && strstr(c.log, "--gpu-architecture"));
    free_compiled(&c);
    const char *bad_bool[] = {"--fmad=maybe", "-arch=sm_90"};
    c = compile(kernel_src, "k.cu", 2, bad_bool);
    CHECK(c.result == NVRTC_ERROR_INVALID_OPTION && strstr(c.log, "expects true or false"));
    free_compiled(&c);
    const char *no_arch[] = {"--fmad=false"};
    c = compile(kernel_src, "k.cu", 1, no_arch);
    CHECK(c.result == NVRTC_ERROR_INVALID_OPTION && strstr(c.log, "--gpu-architecture"));
    free_compiled(&c);
    /* separate values, as NVRTC accepts them; -D reaches the compiler */
    const char *separate[] = {"-arch", "sm_90", "-D", "SMOKE_FAIL=1", "-DSMOKE_OTHER"};
    c = compile("#if SMOKE_FAIL && defined SMOKE_OTHER\n#error smoke_defined\n#endif\n", "k.cu", 5,
                separate);
    CHECK(c.result == NVRTC_ERROR_COMPILATION && strstr(c.log, "smoke_defined"));
    free_compiled(&c);

    /* a compile error: NVRTC_ERROR_COMPILATION, the compiler's message in the log, which names the
     * program (not the temporary directory) */
    const char *opts[] = {"-arch=sm_90"};
    c = compile(bad_src, "bad_kernel.cu", 1, opts);
    CHECK(c.result == NVRTC_ERROR_COMPILATION);
    CHECK(strstr(c.log, "undefined_thing") && strstr(c.log, "error"));
    CHECK(strstr(c.log, "bad_kernel.cu") && !strstr(c.log, "snn_cuemu."));
    CHECK(!c.ptx && c.ptx_size == 1 && c.cubin_size == 0);
    free_compiled(&c);

    nvrtcProgram p = NULL;
    CHECK(api.nvrtcCreateProgram(&p, NULL, "x", 0, NULL, NULL) == NVRTC_ERROR_INVALID_INPUT);
    CHECK(api.nvrtcCompileProgram(NULL, 0, NULL) == NVRTC_ERROR_INVALID_PROGRAM);
}

static void
test_device(int *cc)
{
    int version = 0, count = 0, value = 0;
    CUdevice dev = -1;
    char name[64];
    const char *s;
    CU_OK(cuDriverGetVersion(&version));
    CHECK(version == 13000);
    CU(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
    CU(cuInit(1), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuInit(0));
    CU_OK(cuDeviceGetCount(&count));
    CHECK(count == 1);
    CU(cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
    CU_OK(cuDeviceGet(&dev, 0));
    CHECK(dev == 0);
    CU_OK(cuDeviceGetName(name, sizeof name, dev));
    CHECK(strcmp(name, "snnc CUDA emulator") == 0);
    CU_OK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    *cc = value * 10;
    CU_OK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    *cc += value;
    const char *env = getenv("SNN_CUEMU_ARCH");
    CHECK(*cc == (env && *env ? atoi(env) : 90));
    CU_OK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CHECK(value == 4);
    CU(cuDeviceGetAttribute(&value, (CUdevice_attribute)100000, dev), CUDA_ERROR_INVALID_VALUE);

    CU_OK(cuGetErrorName(CUDA_ERROR_NO_BINARY_FOR_GPU, &s));
    CHECK(strcmp(s, "CUDA_ERROR_NO_BINARY_FOR_GPU") == 0);
    CU_OK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s));
    CHECK(strcmp(s, "invalid argument") == 0);
    CU(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
}

/* module loading: the architecture rules, bad images, function lookup */
static void
test_modules(int cc)
{
    CUmodule mod;
    CUfunction f;
    char arch[32];

    snprintf(arch, sizeof arch, "sm_%d", cc);
    Compiled c = compile_for(kernel_src, arch);
    CHECK(c.result == NVRTC_SUCCESS && c.cubin && c.ptx);
    if (c.result != NVRTC_SUCCESS) {
        fprintf(stderr, "%s", c.log);
        free_compiled(&c);
        return;
    }
    CHECK(c.cubin_size > 64 && memcmp(c.cubin, "\177ELF", 4) == 0); /* an ELF file, as a cubin */
    CU_OK(cuModuleLoadData(&mod, c.cubin));
    CU(cuModuleGetFunction(&f, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
    CU(cuModuleGetFunction(&f, mod, "twice"), CUDA_ERROR_NOT_FOUND);
    CU_OK(cuModuleGetFunction(&f, mod, "scale"));
    CU_OK(cuModuleUnload(mod));
    CU(cuModuleUnload(mod), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuModuleLoadData(&mod, c.ptx)); /* PTX for compute_CC runs on CC */
    CU_OK(cuModuleUnload(mod));

    /* PTX for a newer virtual architecture does not (its first line edited) */
    char *edited = malloc(c.ptx_size + 16);
    const char *rest = strchr(c.ptx + strlen("// SNNCUEMU 1 "), ' ');
    snprintf(edited, c.ptx_size + 16, "// SNNCUEMU 1 compute_%d%s", cc + 10, rest);
    CU(cuModuleLoadData(&mod, edited), CUDA_ERROR_INVALID_PTX);
    /* PTX cut short (as strlen would on binary) or with a bad character */
    memcpy(edited, c.ptx, c.ptx_size);
    edited[c.ptx_size / 2] = 0;
    CU(cuModuleLoadData(&mod, edited), CUDA_ERROR_INVALID_IMAGE);
    memcpy(edited, c.ptx, c.ptx_size);
    edited[c.ptx_size - 10] = '!';
    CU(cuModuleLoadData(&mod, edited), CUDA_ERROR_INVALID_IMAGE);
    free(edited);
    free_compiled(&c);

    /* a cubin for another architecture: none for this GPU; its PTX (older) loads */
    int other = cc == 80 ? 86 : 80;
    snprintf(arch, sizeof arch, "sm_%d", other);
    c = compile_for(kernel_src, arch);
    CHECK(c.result == NVRTC_SUCCESS && c.cubin);
    if (c.cubin) CU(cuModuleLoadData(&mod, c.cubin), CUDA_ERROR_NO_BINARY_FOR_GPU);
    CHECK(strstr(api.snn_cuemu_last_error(), "CUDA_ERROR_NO_BINARY_FOR_GPU"));
    if (c.ptx && other < cc) {
        CU_OK(cuModuleLoadData(&mod, c.ptx));
        CU_OK(cuModuleUnload(mod));
    }
    free_compiled(&c);

    /* not an image: garbage, real PTX text, a real cubin (ELF for EM_CUDA), another shared
     * object (this library) */
    static const char garbage[] = "this is not a module";
    static const char ptx_text[] = "//\n// Generated by NVIDIA NVVM Compiler\n.version 9.0\n";
    unsigned char cubin[128] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
    cubin[0x12] = 190;
    CU(cuModuleLoadData(&mod, garbage), CUDA_ERROR_INVALID_IMAGE);
    CU(cuModuleLoadData(&mod, ptx_text), CUDA_ERROR_INVALID_IMAGE);
    CU(cuModuleLoadData(&mod, cubin), CUDA_ERROR_INVALID_IMAGE);
    CU(cuModuleLoadData(&mod, NULL), CUDA_ERROR_INVALID_VALUE);
    FILE *f_lib = fopen(lib_path, "rb");
    unsigned char *lib = malloc(1 << 24);
    size_t nlib = f_lib && lib ? fread(lib, 1, 1 << 24, f_lib) : 0;
    CHECK(nlib > 64 && nlib < (1 << 24));
    if (nlib > 64) CU(cuModuleLoadData(&mod, lib), CUDA_ERROR_INVALID_IMAGE);
    if (f_lib) fclose(f_lib);
    free(lib);
}

enum { N = 1000, BLOCK = 256, GRID = 2 }; /* 2 blocks of 256 walk 1000 elements grid-stride */

/* Several threads at once, each with its stream and buffers, launching the same function. */
typedef struct Worker {
    CUcontext ctx;
    CUfunction scale;
    int index;
    int nbad; /* wrong results or failed calls */
} Worker;

static void *
worker_main(void *arg)
{
    Worker *w = arg;
    float x[N], y[N];
    fill_x(x, N);
    CUstream s;
    CUdeviceptr dx, dy;
    long long n = N, t = w->index;
    void *params[] = {&dy, &dx, &n, &t};
    w->nbad += api.cuCtxPushCurrent_v2(w->ctx) != CUDA_SUCCESS;
    w->nbad += api.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS;
    w->nbad += api.cuMemAlloc_v2(&dx, sizeof x) != CUDA_SUCCESS;
    w->nbad += api.cuMemAlloc_v2(&dy, sizeof y) != CUDA_SUCCESS;
    for (int rep = 0; rep < 20; rep++) {
        w->nbad += api.cuMemcpyHtoDAsync_v2(dx, x, sizeof x, s) != CUDA_SUCCESS;
        w->nbad += api.cuLaunchKernel(w->scale, GRID, 1, 1, BLOCK, 1, 1, 0, s, params, NULL) !=
                   CUDA_SUCCESS;
        w->nbad += api.cuMemcpyDtoHAsync_v2(y, dy, sizeof y, s) != CUDA_SUCCESS;
        w->nbad += api.cuStreamSynchronize(s) != CUDA_SUCCESS;
        for (int i = 0; i < N; i++)
            w->nbad += y[i] != 2 * x[i] + (float)t;
    }
    w->nbad += api.cuMemFree_v2(dx) != CUDA_SUCCESS;
    w->nbad += api.cuMemFree_v2(dy) != CUDA_SUCCESS;
    w->nbad += api.cuStreamDestroy_v2(s) != CUDA_SUCCESS;
    w->nbad += api.cuCtxPopCurrent_v2(NULL) != CUDA_SUCCESS;
    return NULL;
}

/* the whole path: compile, load, copy, launch, capture, replay, copy back; then what must fail */
static void
test_run(int cc)
{
    CUcontext ctx, popped;
    CUdeviceptr dx, dy, dz, tmp;
    CUstream s;
    CUmodule mod;
    CUfunction scale, accumulate;
    CUgraph graph;
    CUgraphExec exec;
    static float x[N], y[N], z[N], out[N + 1];
    char arch[32];
    fill_x(x, N);

    /* no context yet */
    CU(cuMemAlloc_v2(&dx, 4), CUDA_ERROR_INVALID_CONTEXT);
    CU(cuCtxPopCurrent_v2(&popped), CUDA_ERROR_INVALID_CONTEXT);
    CU_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CU_OK(cuCtxPushCurrent_v2(ctx));
    test_modules(cc);

    snprintf(arch, sizeof arch, "sm_%d", cc);
    Compiled c = compile_for(kernel_src, arch);
    CHECK(c.result == NVRTC_SUCCESS && c.cubin);
    if (!c.cubin) {
        free_compiled(&c);
        return;
    }
    CU_OK(cuModuleLoadData(&mod, c.cubin));
    free_compiled(&c); /* the driver keeps no pointer into the image */
    CU_OK(cuModuleGetFunction(&scale, mod, "scale"));
    CU_OK(cuModuleGetFunction(&accumulate, mod, "accumulate"));
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU_OK(cuMemAlloc_v2(&dx, sizeof x));
    CU_OK(cuMemAlloc_v2(&dy, sizeof y));
    CU_OK(cuMemAlloc_v2(&dz, sizeof z));
    CHECK(dx % 256 == 0 && dy % 256 == 0);
    unsigned int memtype = 0;
    CU_OK(cuPointerGetAttribute(&memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dy + 8));
    CHECK(memtype == CU_MEMORYTYPE_DEVICE);
    CU(cuPointerGetAttribute(&memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)x),
       CUDA_ERROR_INVALID_VALUE);

    /* a launch that runs at once: y = 2 x + 1; fresh memory reads as NaN (SNN_CUEMU_FILL) */
    CU_OK(cuMemcpyDtoHAsync_v2(y, dy, sizeof y, s));
    CHECK(y[0] != y[0]);
    long long n = N, t = 1;
    void *scale_params[] = {&dy, &dx, &n, &t};
    void *acc_params[] = {&dz, &dy, &n};
    CU_OK(cuMemcpyHtoDAsync_v2(dx, x, sizeof x, s));
    CU_OK(cuLaunchKernel(scale, GRID, 1, 1, BLOCK, 1, 1, 0, s, scale_params, NULL));
    CU_OK(cuMemcpyDtoHAsync_v2(y, dy, sizeof y, s));
    CU_OK(cuStreamSynchronize(s));
    int nbad = 0;
    for (int i = 0; i < N; i++)
        nbad += y[i] != 2 * x[i] + 1;
    CHECK(nbad == 0);

    /* a graph: z = 0 outside it; inside, y = 0, y = 2 x + 3, z += y, out = z; replayed twice */
    api.snn_cuemu_stats_reset();
    CU_OK(cuMemsetD8Async(dz, 0, sizeof z, s));
    t = 3;
    CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU_OK(cuMemsetD8Async(dy, 0, sizeof y, s));
    CU_OK(cuLaunchKernel(scale, GRID, 1, 1, BLOCK, 1, 1, 0, s, scale_params, NULL));
    CU_OK(cuLaunchKernel(accumulate, GRID, 1, 1, BLOCK, 1, 1, 0, s, acc_params, NULL));
    CU_OK(cuMemcpyDtoHAsync_v2(out, dz, sizeof z, s));
    CU(cuMemAlloc_v2(&tmp, 4), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); /* unsafe during capture */
    CU_OK(cuStreamEndCapture(s, &graph));
    t = 100; /* parameter values were copied at capture */
    CHECK(api.snn_cuemu_stat("captured_launches") == 2 && api.snn_cuemu_stat("kernel_runs") == 0);
    CU_OK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    CU_OK(cuGraphDestroy(graph)); /* the executable graph does not need it */
    CU_OK(cuGraphLaunch(exec, s));
    CU_OK(cuGraphLaunch(exec, s));
    CU_OK(cuStreamSynchronize(s));
    nbad = 0;
    for (int i = 0; i < N; i++)
        nbad += out[i] != 2 * (2 * x[i] + 3);
    CHECK(nbad == 0);
    CU_OK(cuMemcpyDtoHAsync_v2(z, dz, sizeof z, s));
    CHECK(memcmp(z, out, sizeof z) == 0);
    CHECK(api.snn_cuemu_stat("graph_launches") == 2);
    CHECK(api.snn_cuemu_stat("graph_kernel_runs") == 4 && api.snn_cuemu_stat("kernel_runs") == 4);
    CHECK(api.snn_cuemu_stat("launches") == 0);
    CHECK(api.snn_cuemu_stat("bytes_dtoh") == 3 * (long long)sizeof z);
    CHECK(api.snn_cuemu_stat("bytes_set") == 2 * (long long)sizeof y + (long long)sizeof z);
    CHECK(api.snn_cuemu_stat("no_such_stat") == -1);

    /* copies outside one allocation */
    CU(cuMemcpyHtoDAsync_v2(dx, x, sizeof x + 1, s), CUDA_ERROR_INVALID_VALUE);
    CHECK(strstr(api.snn_cuemu_last_error(), "past the end"));
    CU(cuMemcpyDtoHAsync_v2(out, dy + 4, sizeof y, s), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemcpyDtoDAsync_v2(dz, dy, sizeof y + 4, s), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemsetD8Async(dz + sizeof z, 0, 1, s), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemcpyHtoDAsync_v2(dx, NULL, 4, s), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemcpyDtoDAsync_v2(dz, dy, sizeof y, s));

    /* launches the emulator (or the GPU) refuses */
    CU(cuLaunchKernel(scale, GRID, 1, 1, 1025, 1, 1, 0, s, scale_params, NULL),
       CUDA_ERROR_INVALID_VALUE);
    CU(cuLaunchKernel(scale, 0, 1, 1, BLOCK, 1, 1, 0, s, scale_params, NULL),
       CUDA_ERROR_INVALID_VALUE);
    CU(cuLaunchKernel(scale, GRID, 2, 1, BLOCK, 1, 1, 0, s, scale_params, NULL),
       CUDA_ERROR_INVALID_VALUE);
    CU(cuLaunchKernel(scale, GRID, 1, 1, BLOCK, 1, 1, 16, s, scale_params, NULL),
       CUDA_ERROR_INVALID_VALUE);
    CU(cuLaunchKernel(scale, GRID, 1, 1, BLOCK, 1, 1, 0, s, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    CU(cuLaunchKernel((CUfunction)x, GRID, 1, 1, BLOCK, 1, 1, 0, s, scale_params, NULL),
       CUDA_ERROR_INVALID_HANDLE);
    CU(cuLaunchKernel(scale, GRID, 1, 1, BLOCK, 1, 1, 0, (CUstream)x, scale_params, NULL),
       CUDA_ERROR_INVALID_HANDLE);

    /* an error during capture invalidates it; synchronising a capturing stream is an error */
    CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
    CU(cuMemcpyHtoDAsync_v2(dx, x, sizeof x + 4, s), CUDA_ERROR_INVALID_VALUE);
    graph = (CUgraph)x;
    CU(cuStreamEndCapture(s, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK(graph == NULL);
    CU(cuStreamEndCapture(s, &graph), CUDA_ERROR_ILLEGAL_STATE);
    CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CU(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CU(cuStreamEndCapture(s, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CU(cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL),
       CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);

    /* a graph replayed after a buffer it copies into was freed: an illegal address */
    CUgraphExec stale;
    CU_OK(cuMemAlloc_v2(&tmp, 64));
    CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CU_OK(cuMemsetD8Async(tmp, 7, 64, s));
    CU_OK(cuStreamEndCapture(s, &graph));
    CU_OK(cuGraphInstantiateWithFlags(&stale, graph, 0));
    CU_OK(cuGraphLaunch(stale, s));
    CU_OK(cuMemFree_v2(tmp));
    CU(cuMemFree_v2(tmp), CUDA_ERROR_INVALID_VALUE);    /* twice */
    CU(cuMemFree_v2(dx + 4), CUDA_ERROR_INVALID_VALUE); /* not the start */
    CU(cuGraphLaunch(stale, s), CUDA_ERROR_ILLEGAL_ADDRESS);
    CU_OK(cuGraphExecDestroy(stale));
    CU(cuGraphExecDestroy(stale), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuGraphDestroy(graph));

    /* several threads at once */
    Worker workers[4];
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        workers[i] = (Worker){.ctx = ctx, .scale = scale, .index = i, .nbad = 0};
        CHECK(pthread_create(&threads[i], NULL, worker_main, &workers[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(threads[i], NULL);
        CHECK(workers[i].nbad == 0);
    }

    /* no context current: refused */
    CU_OK(cuCtxPopCurrent_v2(&popped));
    CHECK(popped == ctx);
    CU(cuMemcpyHtoDAsync_v2(dx, x, sizeof x, s), CUDA_ERROR_INVALID_CONTEXT);
    CU(cuLaunchKernel(scale, GRID, 1, 1, BLOCK, 1, 1, 0, s, scale_params, NULL),
       CUDA_ERROR_INVALID_CONTEXT);
    CU_OK(cuCtxPushCurrent_v2(ctx));

    /* clean up: nothing left behind */
    CU_OK(cuGraphExecDestroy(exec));
    CU_OK(cuMemFree_v2(dx));
    CU_OK(cuMemFree_v2(dy));
    CU_OK(cuMemFree_v2(dz));
    CU_OK(cuStreamDestroy_v2(s));
    CU_OK(cuModuleUnload(mod));
    CHECK(api.snn_cuemu_stat("live_allocs") == 0 && api.snn_cuemu_stat("live_modules") == 0);
    CHECK(api.snn_cuemu_stat("live_streams") == 0 && api.snn_cuemu_stat("live_graphs") == 0);
    CHECK(api.snn_cuemu_stat("live_graph_execs") == 0);
    CU_OK(cuCtxPopCurrent_v2(NULL));
    CU_OK(cuDevicePrimaryCtxRelease_v2(0));
    CHECK(api.snn_cuemu_stat("leaked") == 0);
    CU(cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT);

    /* the last release frees what the runtime forgot, and a released context is not current */
    CU_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CU_OK(cuCtxPushCurrent_v2(ctx));
    CU_OK(cuMemAlloc_v2(&tmp, 16));
    CU_OK(cuStreamCreate(&s, 0));
    CU_OK(cuDevicePrimaryCtxRelease_v2(0));
    CHECK(api.snn_cuemu_stat("leaked") == 2 && api.snn_cuemu_stat("live_allocs") == 0);
    CU(cuMemAlloc_v2(&tmp, 16), CUDA_ERROR_INVALID_CONTEXT);
    CU_OK(cuCtxPopCurrent_v2(NULL));
}

int
main(int argc, char **argv)
{
    lib_path = argc > 1 ? argv[1] : "libsnn_cuemu.so";
    bool is_no_device = argc > 2 && strcmp(argv[2], "--no-device") == 0;
    if (!load_api(lib_path)) return 1;
    if (is_no_device) {
        int count = -1;
        CU(cuInit(0), CUDA_ERROR_NO_DEVICE);
        CU(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
    } else {
        int cc = 0;
        test_nvrtc_basics();
        test_device(&cc);
        test_run(cc);
    }
    dlclose(api.handle);
    printf("%d passed, %d failed\n", npass, nfail);
    return nfail > 0;
}
