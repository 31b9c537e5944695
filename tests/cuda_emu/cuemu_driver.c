/* cuemu_driver.c: libsnn_cuemu's CUDA driver (see cuemu.h): devices, primary contexts, modules
 * (dlopened shared objects of cuemu_nvrtc.c's images), memory (host allocations in a table against
 * which every copy is checked), streams whose work runs at once, and graphs recorded by stream
 * capture and replayed in order. It checks what a driver would refuse, and a little more, so that
 * runtime bugs fail in CI; it never guesses at a kernel's meaning (kernels run as compiled). */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/cuda_emu/cuemu.h"

#define MAX_DEVICES 8
#define CTX_STACK_MAX 64
#define ALLOC_ALIGN 256
#define MAX_KERNEL_PARAMS 4096
#define DEVICE_NAME "snnc CUDA emulator"

/* what snnk_emu_NAME is (runtime/cuda_abi.h) */
typedef void (*EmuKernel)(unsigned gx, unsigned bx, void **params);

/* a device's primary context; CUcontext points at one of `contexts` */
struct CUctx_st {
    int dev;
    int refcount; /* retains minus releases; 0: inactive */
};

typedef struct Alloc {
    uintptr_t base;
    size_t size;
    struct CUctx_st *ctx;
} Alloc;

struct CUfunc_st {
    struct CUfunc_st *next;
    struct CUmod_st *mod;
    EmuKernel fn;
    int nparams;
    char name[]; /* the kernel's name (without snnk_emu_) */
};

struct CUmod_st {
    struct CUmod_st *next;
    struct CUctx_st *ctx;
    void *dl;
    struct CUfunc_st *funcs; /* looked up so far */
};

typedef enum NodeKind { NODE_KERNEL, NODE_HTOD, NODE_DTOH, NODE_DTOD, NODE_MEMSET } NodeKind;

/* one operation of a graph (or one being issued) */
typedef struct Node {
    NodeKind kind;
    struct CUfunc_st *fn; /* kernel: the function, its grid and block, its parameter values */
    unsigned gx, bx;
    uint64_t *args;
    int nargs;
    uintptr_t dst, src; /* copies and memset; host or device addresses as the kind says */
    size_t n;
    unsigned char value; /* memset */
} Node;

struct CUgraph_st {
    struct CUgraph_st *next;
    struct CUctx_st *ctx;
    Node *nodes;
    size_t nnodes, cap;
};

struct CUgraphExec_st {
    struct CUgraphExec_st *next;
    struct CUctx_st *ctx;
    Node *nodes;
    size_t nnodes;
};

struct CUstream_st {
    struct CUstream_st *next;
    struct CUctx_st *ctx;
    unsigned flags;
    bool is_capturing, is_invalidated;
    CUstreamCaptureMode mode;
    pthread_t capture_thread;
    struct CUgraph_st *capture; /* being recorded; not in `graphs` */
};

/* the counters snn_cuemu_stat reports and snn_cuemu_stats_reset zeroes */
/* clang-format off */
#define CUEMU_COUNTERS(X)                                                                          \
    X(launches) X(captured_launches) X(graph_launches) X(graph_kernel_runs) X(kernel_runs)         \
    X(bytes_htod) X(bytes_dtoh) X(bytes_dtod) X(memsets) X(bytes_set) X(allocs)                   \
    X(modules_loaded) X(compiles) X(errors) X(leaked)
/* clang-format on */

#define FIELD(name) long long name;
static struct {
    CUEMU_COUNTERS(FIELD)
} stats;
#undef FIELD

/* Everything below is guarded by mu, except the thread's own context stack and last error. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const char *current_api; /* the entry point being run, for messages */
static bool is_initialized;
static int ndevices;
static int device_cc = 90;
static unsigned long long mem_limit; /* 0: none */
/* SNN_CUEMU_FAIL_LAUNCH=N: the N-th graph launch (1, 2, ...) fails as a faulting kernel would,
 * for tests of a run that fails partway; 0: none */
static long long fail_launch, nlaunches;
static int fill_byte = 0xff;         /* -1: leave allocations as malloc gives them */
static struct CUctx_st contexts[MAX_DEVICES];
static Alloc *allocs;
static size_t nallocs, allocs_cap;
static unsigned long long live_bytes, peak_bytes;
static struct CUmod_st *modules;
static struct CUstream_st *streams;
static struct CUgraph_st *graphs;
static struct CUgraphExec_st *graph_execs;

static _Thread_local struct CUctx_st *ctx_stack[CTX_STACK_MAX];
static _Thread_local int nctx_stack;
static _Thread_local char last_error[2048];

static const char *
result_name(CUresult r)
{
    switch (r) {
#define CASE(name, value, text)                                                                    \
    case name:                                                                                     \
        return #name;
        CUEMU_CU_RESULTS(CASE)
#undef CASE
    }
    return NULL;
}

static const char *
result_text(CUresult r)
{
    switch (r) {
#define CASE(name, value, text)                                                                    \
    case name:                                                                                     \
        return text;
        CUEMU_CU_RESULTS(CASE)
#undef CASE
    }
    return NULL;
}

void
cuemu_count_compile(void)
{
    pthread_mutex_lock(&mu);
    stats.compiles++;
    pthread_mutex_unlock(&mu);
}

void
cuemu_set_last_error(const char *msg)
{
    snprintf(last_error, sizeof last_error, "%s", msg);
}

/* record and count error r of the current entry point, with its reason; returns r */
static CUresult fail(CUresult r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static CUresult
fail(CUresult r, const char *fmt, ...)
{
    int n = snprintf(last_error, sizeof last_error, "%s: %s: ", current_api ? current_api : "?",
                     result_name(r));
    if (n > 0 && (size_t)n < sizeof last_error) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt, ap);
        va_end(ap);
    }
    stats.errors++;
    const char *verbose = getenv("SNN_CUEMU_VERBOSE");
    if (verbose && *verbose && strcmp(verbose, "0") != 0)
        fprintf(stderr, "snn_cuemu: %s\n", last_error);
    return r;
}

static void
enter(const char *api)
{
    pthread_mutex_lock(&mu);
    current_api = api;
}

static CUresult
leave(CUresult r)
{
    current_api = NULL;
    pthread_mutex_unlock(&mu);
    return r;
}

static CUresult
need_init(void)
{
    if (!is_initialized)
        return fail(CUDA_ERROR_NOT_INITIALIZED, "cuInit has not been called, or it failed");
    return CUDA_SUCCESS;
}

static CUresult
need_device(CUdevice dev)
{
    CUresult r = need_init();
    if (r) return r;
    if (dev < 0 || dev >= ndevices)
        return fail(CUDA_ERROR_INVALID_DEVICE, "device %d of %d", dev, ndevices);
    return CUDA_SUCCESS;
}

/* the calling thread's current context, which must be active */
static CUresult
need_ctx(struct CUctx_st **out)
{
    CUresult r = need_init();
    if (r) return r;
    if (nctx_stack == 0)
        return fail(CUDA_ERROR_INVALID_CONTEXT, "no context is current on this thread");
    struct CUctx_st *c = ctx_stack[nctx_stack - 1];
    if (c->refcount == 0)
        return fail(CUDA_ERROR_INVALID_CONTEXT,
                    "the current context (device %d's primary context) has been released", c->dev);
    *out = c;
    return CUDA_SUCCESS;
}

/* ---- errors, version, devices ---- */

CUresult
cuGetErrorName(CUresult error, const char **pStr)
{
    enter(__func__);
    if (!pStr) return leave(fail(CUDA_ERROR_INVALID_VALUE, "pStr is NULL"));
    *pStr = result_name(error);
    if (!*pStr) return leave(fail(CUDA_ERROR_INVALID_VALUE, "%d is not a CUresult", (int)error));
    return leave(CUDA_SUCCESS);
}

CUresult
cuGetErrorString(CUresult error, const char **pStr)
{
    enter(__func__);
    if (!pStr) return leave(fail(CUDA_ERROR_INVALID_VALUE, "pStr is NULL"));
    *pStr = result_text(error);
    if (!*pStr) return leave(fail(CUDA_ERROR_INVALID_VALUE, "%d is not a CUresult", (int)error));
    return leave(CUDA_SUCCESS);
}

CUresult
cuDriverGetVersion(int *driverVersion)
{
    enter(__func__);
    if (!driverVersion) return leave(fail(CUDA_ERROR_INVALID_VALUE, "driverVersion is NULL"));
    const char *v = getenv("SNN_CUEMU_DRIVER_VERSION");
    *driverVersion = v && *v ? atoi(v) : 13000;
    return leave(CUDA_SUCCESS);
}

/* $name as an integer in [lo, hi], or def if unset; false if set to something else */
static bool
env_int(const char *name, long long lo, long long hi, long long def, long long *out)
{
    const char *s = getenv(name);
    *out = def;
    if (!s || !*s) return true;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 0);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static CUresult
init(unsigned flags)
{
    if (flags != 0) return fail(CUDA_ERROR_INVALID_VALUE, "Flags must be 0, not %u", flags);
    if (is_initialized) return CUDA_SUCCESS;
    long long n, limit, fill;
    if (!env_int("SNN_CUEMU_DEVICES", 0, MAX_DEVICES, 1, &n))
        return fail(CUDA_ERROR_NO_DEVICE, "SNN_CUEMU_DEVICES is not a number from 0 to %d",
                    MAX_DEVICES);
    if (!env_int("SNN_CUEMU_MEM_LIMIT", 0, (long long)(~0ull >> 1), 0, &limit))
        return fail(CUDA_ERROR_NO_DEVICE, "SNN_CUEMU_MEM_LIMIT is not a byte count");
    if (!env_int("SNN_CUEMU_FAIL_LAUNCH", 0, (long long)(~0ull >> 1), 0, &fail_launch))
        return fail(CUDA_ERROR_NO_DEVICE, "SNN_CUEMU_FAIL_LAUNCH is not a launch count");
    if (!env_int("SNN_CUEMU_FILL", -1, 255, 255, &fill))
        return fail(CUDA_ERROR_NO_DEVICE, "SNN_CUEMU_FILL is not a byte value (or -1)");
    const char *arch = getenv("SNN_CUEMU_ARCH");
    CuemuArch a;
    if (arch && *arch && (!cuemu_parse_arch(arch, &a) || a.is_virtual || a.suffix))
        return fail(CUDA_ERROR_NO_DEVICE,
                    "SNN_CUEMU_ARCH=%s is not a compute capability such as 90 or sm_86", arch);
    if (n == 0) return fail(CUDA_ERROR_NO_DEVICE, "SNN_CUEMU_DEVICES=0");
    device_cc = arch && *arch ? a.cc : 90;
    ndevices = (int)n;
    mem_limit = (unsigned long long)limit;
    fill_byte = (int)fill;
    for (int i = 0; i < ndevices; i++)
        contexts[i] = (struct CUctx_st){.dev = i, .refcount = 0};
    is_initialized = true;
    return CUDA_SUCCESS;
}

CUresult
cuInit(unsigned int Flags)
{
    enter(__func__);
    return leave(init(Flags));
}

CUresult
cuDeviceGetCount(int *count)
{
    enter(__func__);
    CUresult r = need_init();
    if (r) return leave(r);
    if (!count) return leave(fail(CUDA_ERROR_INVALID_VALUE, "count is NULL"));
    *count = ndevices;
    return leave(CUDA_SUCCESS);
}

CUresult
cuDeviceGet(CUdevice *device, int ordinal)
{
    enter(__func__);
    CUresult r = need_init();
    if (r) return leave(r);
    if (!device) return leave(fail(CUDA_ERROR_INVALID_VALUE, "device is NULL"));
    if (ordinal < 0 || ordinal >= ndevices)
        return leave(
            fail(CUDA_ERROR_INVALID_DEVICE, "ordinal %d of %d devices", ordinal, ndevices));
    *device = ordinal;
    return leave(CUDA_SUCCESS);
}

/* cuDeviceGetAttribute's answers (an H100's where it matters little); the compute capability comes
 * from $SNN_CUEMU_ARCH */
static const struct {
    CUdevice_attribute attrib;
    int value;
} device_attributes[] = {
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152},
    {CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536},
    {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
    {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536},
    {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1000000},
    {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 4},
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048},
    {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472},
    {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32},
};

static CUresult
device_attribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult r = need_device(dev);
    if (r) return r;
    if (!pi) return fail(CUDA_ERROR_INVALID_VALUE, "pi is NULL");
    if (attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ||
        attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) {
        *pi = attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? device_cc / 10
                                                                     : device_cc % 10;
        return CUDA_SUCCESS;
    }
    for (size_t i = 0; i < sizeof device_attributes / sizeof *device_attributes; i++)
        if (device_attributes[i].attrib == attrib) {
            *pi = device_attributes[i].value;
            return CUDA_SUCCESS;
        }
    return fail(CUDA_ERROR_INVALID_VALUE, "attribute %d is not emulated", (int)attrib);
}

CUresult
cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    enter(__func__);
    return leave(device_attribute(pi, attrib, dev));
}

CUresult
cuDeviceGetName(char *name, int len, CUdevice dev)
{
    enter(__func__);
    CUresult r = need_device(dev);
    if (r) return leave(r);
    if (!name || len <= 0) return leave(fail(CUDA_ERROR_INVALID_VALUE, "name NULL or len <= 0"));
    snprintf(name, (size_t)len, "%s", DEVICE_NAME);
    return leave(CUDA_SUCCESS);
}

/* ---- contexts ---- */

CUresult
cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    enter(__func__);
    CUresult r = need_device(dev);
    if (r) return leave(r);
    if (!pctx) return leave(fail(CUDA_ERROR_INVALID_VALUE, "pctx is NULL"));
    contexts[dev].refcount++;
    *pctx = &contexts[dev];
    return leave(CUDA_SUCCESS);
}

static bool
is_live_func(const struct CUfunc_st *f)
{
    for (struct CUmod_st *m = modules; m; m = m->next)
        for (struct CUfunc_st *g = m->funcs; g; g = g->next)
            if (g == f) return true;
    return false;
}

static void
free_nodes(Node *nodes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(nodes[i].args);
    free(nodes);
}

static void
free_graph(struct CUgraph_st *g)
{
    if (!g) return;
    free_nodes(g->nodes, g->nnodes);
    free(g);
}

static void
free_module(struct CUmod_st *m)
{
    while (m->funcs) {
        struct CUfunc_st *f = m->funcs;
        m->funcs = f->next;
        free(f);
    }
    dlclose(m->dl);
    free(m);
}

/* Free the allocation table once it is empty, so that a process that frees what it allocated
 * and then dlcloses the library leaves nothing to LeakSanitizer (what it did not free, LSan shows
 * as allocated by cuMemAlloc_v2). */
static void
release_empty_table(void)
{
    if (nallocs > 0) return;
    free(allocs);
    allocs = NULL;
    allocs_cap = 0;
}

/* Unlink every element of the list at *head whose ctx is c, freeing it with free_fn; their number.
 * (a macro: the lists have different element types) */
#define FREE_IN_CTX(head, type, c, free_fn, count)                                                 \
    for (type **pp = (head); *pp;) {                                                               \
        type *e = *pp;                                                                             \
        if (e->ctx != (c)) {                                                                       \
            pp = &e->next;                                                                         \
            continue;                                                                              \
        }                                                                                          \
        *pp = e->next;                                                                             \
        free_fn(e);                                                                                \
        (count)++;                                                                                 \
    }

static void
free_stream(struct CUstream_st *s)
{
    free_graph(s->capture);
    free(s);
}

static void
free_exec(struct CUgraphExec_st *e)
{
    free_nodes(e->nodes, e->nnodes);
    free(e);
}

/* a primary context's last release: the driver frees what is left in it */
static void
destroy_context(struct CUctx_st *c)
{
    long long n = 0, nallocs_freed = 0;
    FREE_IN_CTX(&graph_execs, struct CUgraphExec_st, c, free_exec, n)
    FREE_IN_CTX(&graphs, struct CUgraph_st, c, free_graph, n)
    FREE_IN_CTX(&streams, struct CUstream_st, c, free_stream, n)
    FREE_IN_CTX(&modules, struct CUmod_st, c, free_module, n)
    size_t k = 0;
    for (size_t i = 0; i < nallocs; i++) {
        if (allocs[i].ctx == c) {
            live_bytes -= allocs[i].size;
            free((void *)allocs[i].base);
            nallocs_freed++;
        } else
            allocs[k++] = allocs[i];
    }
    nallocs = k;
    release_empty_table();
    n += nallocs_freed;
    stats.leaked += n;
    const char *verbose = getenv("SNN_CUEMU_VERBOSE");
    if (n && verbose && *verbose && strcmp(verbose, "0") != 0)
        fprintf(stderr,
                "snn_cuemu: device %d's primary context released with %lld objects left in it "
                "(%lld allocations)\n",
                c->dev, n, nallocs_freed);
}

CUresult
cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    enter(__func__);
    CUresult r = need_device(dev);
    if (r) return leave(r);
    struct CUctx_st *c = &contexts[dev];
    if (c->refcount == 0)
        return leave(fail(CUDA_ERROR_INVALID_CONTEXT,
                          "device %d's primary context is released more often than retained", dev));
    if (--c->refcount == 0) destroy_context(c);
    return leave(CUDA_SUCCESS);
}

CUresult
cuCtxPushCurrent_v2(CUcontext ctx)
{
    enter(__func__);
    CUresult r = need_init();
    if (r) return leave(r);
    if (!ctx || ctx < contexts || ctx >= contexts + ndevices)
        return leave(fail(CUDA_ERROR_INVALID_CONTEXT, "%p is not a context", (void *)ctx));
    if (ctx->refcount == 0)
        return leave(fail(CUDA_ERROR_INVALID_CONTEXT, "device %d's primary context is not retained",
                          ctx->dev));
    if (nctx_stack == CTX_STACK_MAX)
        return leave(fail(CUDA_ERROR_OUT_OF_MEMORY, "more than %d contexts pushed", CTX_STACK_MAX));
    ctx_stack[nctx_stack++] = ctx;
    return leave(CUDA_SUCCESS);
}

CUresult
cuCtxPopCurrent_v2(CUcontext *pctx)
{
    enter(__func__);
    CUresult r = need_init();
    if (r) return leave(r);
    if (nctx_stack == 0)
        return leave(fail(CUDA_ERROR_INVALID_CONTEXT, "no context is current on this thread"));
    struct CUctx_st *c = ctx_stack[--nctx_stack];
    if (pctx) *pctx = c;
    return leave(CUDA_SUCCESS);
}

/* ---- modules ---- */

/* the shared object of an image, written to a temporary file and dlopened */
static CUresult
open_shared_object(const unsigned char *so, size_t size, void **dl)
{
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/snn_cuemu_module.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0)
        return fail(CUDA_ERROR_OPERATING_SYSTEM, "cannot create %s: %s", path, strerror(errno));
    for (size_t done = 0; done < size;) {
        ssize_t w = write(fd, so + done, size - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int err = errno;
            close(fd);
            unlink(path);
            return fail(CUDA_ERROR_OPERATING_SYSTEM, "cannot write %s: %s", path, strerror(err));
        }
        done += (size_t)w;
    }
    close(fd);
    /* RTLD_LOCAL: two modules never share symbols; the file can go once it is mapped */
    *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    unlink(path);
    if (!*dl)
        return fail(CUDA_ERROR_INVALID_IMAGE, "dlopen: %s (is $TMPDIR on a noexec file system?)",
                    dlerror());
    return CUDA_SUCCESS;
}

/* does the NUL-terminated or longer b start with prefix? (byte by byte: never reads past a NUL) */
static bool
starts_with(const unsigned char *b, const char *prefix)
{
    for (size_t i = 0; prefix[i]; i++)
        if (b[i] != (unsigned char)prefix[i]) return false;
    return true;
}

static int
base64_value(int c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* The shared object in a PTX image (cuemu.h), malloc'ed into *so, and its architecture. */
static CUresult
read_ptx(const char *text, unsigned char **so, size_t *size, char arch[24])
{
    int version = 0, nhead = 0;
    size_t n = 0, len = strlen(text);
    if (sscanf(text + strlen(CUEMU_PTX_MAGIC), "%d %23s %zu%n", &version, arch, &n, &nhead) != 3 ||
        version != CUEMU_IMAGE_VERSION)
        return fail(CUDA_ERROR_INVALID_IMAGE, "a malformed first line of snn_cuemu PTX");
    if (n > len / 4 * 3)
        return fail(CUDA_ERROR_INVALID_IMAGE,
                    "snn_cuemu PTX of %zu characters cannot hold %zu bytes (truncated?)", len, n);
    const char *p = strchr(text, '\n');
    while (p && p[1] == '/' && p[2] == '/')
        p = strchr(p + 1, '\n');
    if (!p) return fail(CUDA_ERROR_INVALID_IMAGE, "snn_cuemu PTX without a shared object");
    unsigned char *out = malloc(n ? n : 1);
    if (!out) return fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a module");
    size_t k = 0;
    unsigned long v = 0;
    int nbits = 0;
    bool is_bad = false, is_padded = false;
    for (; *p; p++) {
        if (*p == '\n' || *p == '\r') continue;
        if (*p == '=') {
            is_padded = true;
            continue;
        }
        int d = base64_value((unsigned char)*p);
        if (d < 0 || is_padded || k == n) {
            is_bad = true;
            break;
        }
        v = (v << 6 | (unsigned long)d) & 0xffffff;
        if ((nbits += 6) >= 8) {
            nbits -= 8;
            if (k == n) {
                is_bad = true;
                break;
            }
            out[k++] = (unsigned char)(v >> nbits);
        }
    }
    if (is_bad || k != n) {
        free(out);
        return fail(CUDA_ERROR_INVALID_IMAGE,
                    "snn_cuemu PTX whose base64 holds %zu%s bytes, not %zu (truncated or edited?)",
                    k, is_bad ? "+" : "", n);
    }
    *so = out;
    *size = n;
    return CUDA_SUCCESS;
}

/* The size and architecture of a CUBIN image (cuemu.h), an ELF file. */
static CUresult
read_cubin(const unsigned char *b, size_t *size, char arch[24])
{
    uint16_t machine, shentsize, shnum;
    uint64_t shoff;
    const uint16_t one = 1;
    bool is_little = *(const unsigned char *)&one == 1;
    if (b[4] != 2 || b[5] != (is_little ? 1 : 2))
        return fail(CUDA_ERROR_INVALID_IMAGE,
                    "an ELF file not of this machine's class and byte order");
    memcpy(&machine, b + 0x12, 2);
    memcpy(&shoff, b + 0x28, 8);
    memcpy(&shentsize, b + 0x3a, 2);
    memcpy(&shnum, b + 0x3c, 2);
    if (machine == 190)
        return fail(CUDA_ERROR_INVALID_IMAGE,
                    "a real cubin (ELF for EM_CUDA), not an snn_cuemu one");
    /* the linker writes the section headers last */
    uint64_t n = shoff + (uint64_t)shentsize * shnum;
    if (shnum == 0 || shoff < 64 || n > ((uint64_t)1 << 36))
        return fail(CUDA_ERROR_INVALID_IMAGE, "an ELF file whose size cannot be told");
    const unsigned char *tag = NULL;
    size_t ntag = strlen(CUEMU_CUBIN_TAG);
    for (size_t i = 0; !tag && i + ntag < n; i++)
        if (b[i] == CUEMU_CUBIN_TAG[0] && memcmp(b + i, CUEMU_CUBIN_TAG, ntag) == 0) tag = b + i;
    int version = 0, nscan = 0;
    if (!tag || !memchr(tag, 0, (size_t)(b + n - tag)) ||
        sscanf((const char *)tag + ntag, "%d %23s%n", &version, arch, &nscan) != 2 ||
        version != CUEMU_IMAGE_VERSION)
        return fail(CUDA_ERROR_INVALID_IMAGE,
                    "an ELF file without the snn_cuemu cubin tag (a shared object not made by "
                    "its NVRTC)");
    *size = (size_t)n;
    return CUDA_SUCCESS;
}

static CUresult
module_load(CUmodule *module, const void *image)
{
    struct CUctx_st *ctx = NULL;
    CUresult r = need_ctx(&ctx);
    if (r) return r;
    if (!module || !image) return fail(CUDA_ERROR_INVALID_VALUE, "module or image is NULL");
    const unsigned char *b = image;
    bool is_ptx = starts_with(b, CUEMU_PTX_MAGIC);
    if (!is_ptx && !starts_with(b, "\177ELF"))
        return fail(CUDA_ERROR_INVALID_IMAGE,
                    "neither snn_cuemu PTX (\"%s...\") nor an ELF cubin: real PTX, or a wrong "
                    "pointer?",
                    CUEMU_PTX_MAGIC);
    char arch[24];
    unsigned char *decoded = NULL;
    size_t size = 0;
    r = is_ptx ? read_ptx(image, &decoded, &size, arch) : read_cubin(b, &size, arch);
    if (r) return r;
    CuemuArch a;
    if (!cuemu_parse_arch(arch, &a) || a.is_virtual != is_ptx) {
        free(decoded);
        return fail(CUDA_ERROR_INVALID_IMAGE, "%s for the architecture '%s'",
                    is_ptx ? "PTX" : "a cubin", arch);
    }
    if (!cuemu_arch_runs_on(&a, device_cc)) {
        free(decoded);
        return fail(is_ptx ? CUDA_ERROR_INVALID_PTX : CUDA_ERROR_NO_BINARY_FOR_GPU,
                    "%s for %s cannot run on a device of compute capability %d.%d",
                    is_ptx ? "PTX" : "a cubin", arch, device_cc / 10, device_cc % 10);
    }
    struct CUmod_st *m = calloc(1, sizeof *m);
    if (!m) {
        free(decoded);
        return fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a module");
    }
    r = open_shared_object(is_ptx ? decoded : b, size, &m->dl);
    free(decoded);
    if (r) {
        free(m);
        return r;
    }
    m->ctx = ctx;
    m->next = modules;
    modules = m;
    stats.modules_loaded++;
    *module = m;
    return CUDA_SUCCESS;
}

CUresult
cuModuleLoadData(CUmodule *module, const void *image)
{
    enter(__func__);
    return leave(module_load(module, image));
}

static CUresult
module_unload(CUmodule hmod)
{
    struct CUctx_st *ctx = NULL;
    CUresult r = need_ctx(&ctx);
    if (r) return r;
    for (struct CUmod_st **pp = &modules; *pp; pp = &(*pp)->next)
        if (*pp == hmod) {
            *pp = hmod->next;
            free_module(hmod);
            return CUDA_SUCCESS;
        }
    return fail(CUDA_ERROR_INVALID_VALUE, "%p is not a loaded module", (void *)hmod);
}

CUresult
cuModuleUnload(CUmodule hmod)
{
    enter(__func__);
    return leave(module_unload(hmod));
}

static CUresult
module_get_function(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    struct CUctx_st *ctx = NULL;
    CUresult r = need_ctx(&ctx);
    if (r) return r;
    if (!hfunc || !name) return fail(CUDA_ERROR_INVALID_VALUE, "hfunc or name is NULL");
    struct CUmod_st *m = modules;
    while (m && m != hmod)
        m = m->next;
    if (!m) return fail(CUDA_ERROR_INVALID_VALUE, "%p is not a loaded module", (void *)hmod);
    for (struct CUfunc_st *f = m->funcs; f; f = f->next)
        if (strcmp(f->name, name) == 0) {
            *hfunc = f;
            return CUDA_SUCCESS;
        }
    char sym[1024];
    if (snprintf(sym, sizeof sym, "snnk_emu_%s_nparams", name) >= (int)sizeof sym)
        return fail(CUDA_ERROR_NOT_FOUND, "a name of %zu characters", strlen(name));
    const int *nparams = dlsym(m->dl, sym);
    snprintf(sym, sizeof sym, "snnk_emu_%s", name);
    EmuKernel fn;
    *(void **)&fn =
        dlsym(m->dl, sym); /* POSIX's way to store a dlsym result in a function pointer */
    if (!fn) return fail(CUDA_ERROR_NOT_FOUND, "the module has no kernel %s (no %s)", name, sym);
    if (!nparams)
        return fail(CUDA_ERROR_NOT_FOUND, "the module has %s but no %s_nparams", sym, sym);
    if (*nparams < 0 || *nparams > MAX_KERNEL_PARAMS)
        return fail(CUDA_ERROR_INVALID_IMAGE, "%s_nparams is %d", sym, *nparams);
    struct CUfunc_st *f = malloc(sizeof *f + strlen(name) + 1);
    if (!f) return fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a function");
    f->mod = m;
    f->fn = fn;
    f->nparams = *nparams;
    strcpy(f->name, name);
    f->next = m->funcs;
    m->funcs = f;
    *hfunc = f;
    return CUDA_SUCCESS;
}

CUresult
cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    enter(__func__);
    return leave(module_get_function(hfunc, hmod, name));
}

/* ---- memory ---- */

/* the live allocation containing address p, or NULL */
static Alloc *
find_alloc(uintptr_t p)
{
    for (size_t i = 0; i < nallocs; i++)
        if (p >= allocs[i].base && p - allocs[i].base < allocs[i].size) return &allocs[i];
    return NULL;
}

/* does [p, p + n) lie inside one live allocation? If not, fail with r and say why. */
static CUresult
check_range(uintptr_t p, size_t n, const char *what, CUresult r)
{
    if (n == 0) return CUDA_SUCCESS;
    Alloc *a = find_alloc(p);
    if (!a)
        return fail(r, "the %s range [0x%llx, +%zu) is in no live allocation", what,
                    (unsigned long long)p, n);
    if (n > a->size - (p - a->base))
        return fail(r,
                    "the %s range [0x%llx, +%zu) runs %zu bytes past the end of its allocation "
                    "[0x%llx, +%zu)",
                    what, (unsigned long long)p, n, n - (a->size - (p - a->base)),
                    (unsigned long long)a->base, a->size);
    return CUDA_SUCCESS;
}

/* is the calling thread barred from "potentially unsafe" calls (cuMemAlloc, cuMemFree) by a
 * capture? As the driver: by its own capture unless relaxed, by another thread's global one */
static CUresult
check_capture_safe(void)
{
    for (struct CUstream_st *s = streams; s; s = s->next) {
        if (!s->is_capturing) continue;
        bool is_own = pthread_equal(s->capture_thread, pthread_self());
        if ((is_own && s->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
            (!is_own && s->mode == CU_STREAM_CAPTURE_MODE_GLOBAL))
            return fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                        "not allowed while stream %p is capturing (mode %d)", (void *)s,
                        (int)s->mode);
    }
    return CUDA_SUCCESS;
}

static CUresult
mem_alloc(CUdeviceptr *dptr, size_t bytesize)
{
    struct CUctx_st *ctx = NULL;
    CUresult r = need_ctx(&ctx);
    if (r) return r;
    if (!dptr || bytesize == 0) return fail(CUDA_ERROR_INVALID_VALUE, "dptr NULL or bytesize 0");
    if ((r = check_capture_safe())) return r;
    if (mem_limit && bytesize > mem_limit - live_bytes)
        return fail(CUDA_ERROR_OUT_OF_MEMORY, "%zu bytes more than SNN_CUEMU_MEM_LIMIT=%llu allows",
                    bytesize, mem_limit);
    if (nallocs == allocs_cap) {
        size_t cap = allocs_cap ? 2 * allocs_cap : 64;
        Alloc *a = realloc(allocs, cap * sizeof *a);
        if (!a) return fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for the allocation table");
        allocs = a;
        allocs_cap = cap;
    }
    void *p;
    if (posix_memalign(&p, ALLOC_ALIGN, bytesize) != 0)
        return fail(CUDA_ERROR_OUT_OF_MEMORY, "malloc of %zu bytes failed", bytesize);
    if (fill_byte >= 0) memset(p, fill_byte, bytesize);
    allocs[nallocs++] = (Alloc){(uintptr_t)p, bytesize, ctx};
    live_bytes += bytesize;
    if (live_bytes > peak_bytes) peak_bytes = live_bytes;
    stats.allocs++;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult
cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    enter(__func__);
    return leave(mem_alloc(dptr, bytesize));
}

static CUresult
mem_free(CUdeviceptr dptr)
{
    struct CUctx_st *ctx = NULL;
    CUresult r = need_ctx(&ctx);
    if (r) return r;
    if (dptr == 0) return CUDA_SUCCESS;
    if ((r = check_capture_safe())) return r;
    for (size_t i = 0; i < nallocs; i++)
        if (allocs[i].base == dptr) {
            free((void *)allocs[i].base);
            live_bytes -= allocs[i].size;
            allocs[i] = allocs[--nallocs];
            release_empty_table();
            return CUDA_SUCCESS;
        }
    Alloc *a = find_alloc((uintptr_t)dptr);
    if (a)
        return fail(CUDA_ERROR_INVALID_VALUE,
                    "0x%llx is inside the allocation at 0x%llx, not its start", dptr,
                    (unsigned long long)a->base);
    return fail(CUDA_ERROR_INVALID_VALUE, "0x%llx is not a live allocation (freed twice?)", dptr);
}

CUresult
cuMemFree_v2(CUdeviceptr dptr)
{
    enter(__func__);
    return leave(mem_free(dptr));
}

static CUresult
pointer_attribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    CUresult r = need_init();
    if (r) return r;
    if (!data) return fail(CUDA_ERROR_INVALID_VALUE, "data is NULL");
    Alloc *a = find_alloc((uintptr_t)ptr);
    if (!a) return fail(CUDA_ERROR_INVALID_VALUE, "0x%llx is not in a device allocation", ptr);
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = a->ctx;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = ptr;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = a->ctx->dev;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = a->base;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = a->size;
        break;
    default:
        return fail(CUDA_ERROR_INVALID_VALUE, "attribute %d is not emulated", (int)attribute);
    }
    return CUDA_SUCCESS;
}

CUresult
cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    enter(__func__);
    return leave(pointer_attribute(data, attribute, ptr));
}

/* ---- work: run at once, or recorded by a capture ---- */

/* run a kernel, copy or memset; params: a kernel's parameters (NULL: the node's recorded values).
 * A check that fails gives r_bad (a replayed graph: the memory is gone since capture). */
static CUresult
run_node(const Node *nd, void **params, CUresult r_bad)
{
    CUresult r;
    switch (nd->kind) {
    case NODE_KERNEL: {
        if (!is_live_func(nd->fn))
            return fail(CUDA_ERROR_INVALID_HANDLE, "the kernel's module has been unloaded");
        void *local[64], **heap = NULL;
        if (!params) {
            params = local;
            if (nd->nargs > 64 && !(params = heap = malloc((size_t)nd->nargs * sizeof *params)))
                return fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for kernel parameters");
            for (int i = 0; i < nd->nargs; i++)
                params[i] = &nd->args[i];
        }
        nd->fn->fn(nd->gx, nd->bx, params);
        free(heap);
        stats.kernel_runs++;
        return CUDA_SUCCESS;
    }
    case NODE_HTOD:
        if ((r = check_range(nd->dst, nd->n, "destination", r_bad))) return r;
        memcpy((void *)nd->dst, (const void *)nd->src, nd->n);
        stats.bytes_htod += (long long)nd->n;
        return CUDA_SUCCESS;
    case NODE_DTOH:
        if ((r = check_range(nd->src, nd->n, "source", r_bad))) return r;
        memcpy((void *)nd->dst, (const void *)nd->src, nd->n);
        stats.bytes_dtoh += (long long)nd->n;
        return CUDA_SUCCESS;
    case NODE_DTOD:
        if ((r = check_range(nd->src, nd->n, "source", r_bad))) return r;
        if ((r = check_range(nd->dst, nd->n, "destination", r_bad))) return r;
        memmove((void *)nd->dst, (const void *)nd->src, nd->n);
        stats.bytes_dtod += (long long)nd->n;
        return CUDA_SUCCESS;
    case NODE_MEMSET:
        if ((r = check_range(nd->dst, nd->n, "destination", r_bad))) return r;
        memset((void *)nd->dst, nd->value, nd->n);
        stats.memsets++;
        stats.bytes_set += (long long)nd->n;
        return CUDA_SUCCESS;
    }
    return fail(CUDA_ERROR_UNKNOWN, "node kind %d", (int)nd->kind);
}

/* Begin work on stream hs in context ctx: *out is the stream (NULL for the default streams). The
 * legacy default stream waits for every blocking stream, which a capture forbids. */
static CUresult
begin_work(CUstream hs, struct CUctx_st *ctx, struct CUstream_st **out)
{
    *out = NULL;
    if (hs == NULL || hs == CU_STREAM_LEGACY) {
        for (struct CUstream_st *s = streams; s; s = s->next)
            if (s->ctx == ctx && s->is_capturing && s->flags == CU_STREAM_DEFAULT) {
                s->is_invalidated = true;
                return fail(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
                            "work on the legacy default stream while the blocking stream %p is "
                            "capturing",
                            (void *)s);
            }
        return CUDA_SUCCESS;
    }
    if (hs == CU_STREAM_PER_THREAD) return CUDA_SUCCESS;
    for (struct CUstream_st *s = streams; s; s = s->next)
        if (s == hs) {
            if (s->ctx != ctx)
                return fail(CUDA_ERROR_INVALID_HANDLE,
                            "stream %p belongs to device %d's context, not device %d's", (void *)s,
                            s->ctx->dev, ctx->dev);
            *out = s;
            return CUDA_SUCCESS;
        }
    return fail(CUDA_ERROR_INVALID_HANDLE, "%p is not a live stream", (void *)hs);
}

/* end work on s with result r: an error on a capturing stream invalidates the capture */
static CUresult
end_work(struct CUstream_st *s, CUresult r)
{
    if (r && s && s->is_capturing) s->is_invalidated = true;
    return r;
}

/* append nd (and, for a kernel, a copy of its parameter values) to g */
static CUresult
record(struct CUgraph_st *g, const Node *nd, void **params)
{
    if (g->nnodes == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 16;
        Node *nodes = realloc(g->nodes, cap * sizeof *nodes);
        if (!nodes) return fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a graph node");
        g->nodes = nodes;
        g->cap = cap;
    }
    Node copy = *nd;
    if (nd->kind == NODE_KERNEL && nd->nargs > 0) {
        if (!(copy.args = malloc((size_t)nd->nargs * sizeof *copy.args)))
            return fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for kernel parameters");
        /* the driver copies the parameter values when the launch is captured */
        for (int i = 0; i < nd->nargs; i++)
            memcpy(&copy.args[i], params[i], sizeof copy.args[i]);
    }
    g->nodes[g->nnodes++] = copy;
    return CUDA_SUCCESS;
}

/* issue nd on s: recorded if s is capturing, else run now */
static CUresult
issue(struct CUstream_st *s, const Node *nd, void **params)
{
    if (s && s->is_capturing) {
        if (nd->kind == NODE_KERNEL) stats.captured_launches++;
        return record(s->capture, nd, params);
    }
    if (nd->kind == NODE_KERNEL) stats.launches++;
    return run_node(nd, params, CUDA_ERROR_INVALID_VALUE);
}

/* the common part of the copies and memset: context, stream, checks, issue */
static CUresult
mem_op(CUstream hs, Node *nd)
{
    struct CUctx_st *ctx = NULL;
    struct CUstream_st *s;
    CUresult r = need_ctx(&ctx);
    if (r) return r;
    if ((r = begin_work(hs, ctx, &s))) return r;
    bool is_host_src = nd->kind == NODE_HTOD, is_host_dst = nd->kind == NODE_DTOH;
    if (nd->n > 0 && ((is_host_src && !nd->src) || (is_host_dst && !nd->dst)))
        r = fail(CUDA_ERROR_INVALID_VALUE, "the host pointer is NULL");
    if (!r && nd->kind != NODE_HTOD && nd->kind != NODE_MEMSET)
        r = check_range(nd->src, nd->n, "source", CUDA_ERROR_INVALID_VALUE);
    if (!r && nd->kind != NODE_DTOH)
        r = check_range(nd->dst, nd->n, "destination", CUDA_ERROR_INVALID_VALUE);
    if (!r && nd->n > 0) r = issue(s, nd, NULL);
    return end_work(s, r);
}

CUresult
cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
{
    enter(__func__);
    Node nd = {.kind = NODE_HTOD, .dst = dstDevice, .src = (uintptr_t)srcHost, .n = ByteCount};
    return leave(mem_op(hStream, &nd));
}

CUresult
cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    enter(__func__);
    Node nd = {.kind = NODE_DTOH, .dst = (uintptr_t)dstHost, .src = srcDevice, .n = ByteCount};
    return leave(mem_op(hStream, &nd));
}

CUresult
cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                     CUstream hStream)
{
    enter(__func__);
    Node nd = {.kind = NODE_DTOD, .dst = dstDevice, .src = srcDevice, .n = ByteCount};
    return leave(mem_op(hStream, &nd));
}

CUresult
cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    enter(__func__);
    Node nd = {.kind = NODE_MEMSET, .dst = dstDevice, .value = uc, .n = N};
    return leave(mem_op(hStream, &nd));
}

static CUresult
launch_kernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
              unsigned bz, unsigned shared, CUstream hs, void **params, void **extra)
{
    struct CUctx_st *ctx = NULL;
    struct CUstream_st *s;
    CUresult r = need_ctx(&ctx);
    if (r) return r;
    if ((r = begin_work(hs, ctx, &s))) return r;
    if (!is_live_func(f))
        r = fail(CUDA_ERROR_INVALID_HANDLE, "%p is not a function of a loaded module", (void *)f);
    else if (f->mod->ctx != ctx)
        r = fail(CUDA_ERROR_INVALID_HANDLE, "%s belongs to device %d's context, not device %d's",
                 f->name, f->mod->ctx->dev, ctx->dev);
    else if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0)
        r = fail(CUDA_ERROR_INVALID_VALUE,
                 "%s: a zero dimension: grid (%u, %u, %u) block (%u, %u, %u)", f->name, gx, gy, gz,
                 bx, by, bz);
    else if (gy != 1 || gz != 1 || by != 1 || bz != 1)
        r = fail(CUDA_ERROR_INVALID_VALUE,
                 "%s: grid (%u, %u, %u) block (%u, %u, %u): the emulator runs only 1-D launches",
                 f->name, gx, gy, gz, bx, by, bz);
    else if (bx > 1024)
        r = fail(CUDA_ERROR_INVALID_VALUE, "%s: %u threads a block (at most 1024)", f->name, bx);
    else if (gx > 2147483647u)
        r = fail(CUDA_ERROR_INVALID_VALUE, "%s: %u blocks (at most 2^31-1)", f->name, gx);
    else if (shared != 0)
        r = fail(CUDA_ERROR_INVALID_VALUE,
                 "%s: %u bytes of dynamic shared memory (the emulator supports none)", f->name,
                 shared);
    else if (extra)
        r = fail(CUDA_ERROR_INVALID_VALUE, "%s: `extra` parameters are not emulated", f->name);
    else if (f->nparams > 0 && !params)
        r = fail(CUDA_ERROR_INVALID_VALUE, "%s takes %d parameters; kernelParams is NULL", f->name,
                 f->nparams);
    for (int i = 0; !r && i < f->nparams; i++)
        if (!params[i])
            r = fail(CUDA_ERROR_INVALID_VALUE, "%s: kernelParams[%d] is NULL", f->name, i);
    if (!r) {
        Node nd = {.kind = NODE_KERNEL, .fn = f, .gx = gx, .bx = bx, .nargs = f->nparams};
        r = issue(s, &nd, params);
    }
    return end_work(s, r);
}

CUresult
cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
               unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
               unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
    enter(__func__);
    return leave(launch_kernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                               sharedMemBytes, hStream, kernelParams, extra));
}

/* ---- streams and capture ---- */

static CUresult
stream_create(CUstream *phStream, unsigned flags)
{
    struct CUctx_st *ctx = NULL;
    CUresult r = need_ctx(&ctx);
    if (r) return r;
    if (!phStream) return fail(CUDA_ERROR_INVALID_VALUE, "phStream is NULL");
    if (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)
        return fail(CUDA_ERROR_INVALID_VALUE, "flags 0x%x", flags);
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s) return fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a stream");
    s->ctx = ctx;
    s->flags = flags;
    s->next = streams;
    streams = s;
    *phStream = s;
    return CUDA_SUCCESS;
}

CUresult
cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    enter(__func__);
    return leave(stream_create(phStream, Flags));
}

/* the live stream hs (not a default stream), or NULL */
static struct CUstream_st *
find_stream(CUstream hs)
{
    struct CUstream_st *s = streams;
    while (s && s != hs)
        s = s->next;
    return s;
}

static CUresult
stream_destroy(CUstream hs)
{
    struct CUctx_st *ctx = NULL;
    CUresult r = need_ctx(&ctx);
    if (r) return r;
    for (struct CUstream_st **pp = &streams; *pp; pp = &(*pp)->next)
        if (*pp == hs) {
            *pp = hs->next;
            free_stream(hs); /* a capture in progress goes with it */
            return CUDA_SUCCESS;
        }
    return fail(CUDA_ERROR_INVALID_HANDLE, "%p is not a live stream", (void *)hs);
}

CUresult
cuStreamDestroy_v2(CUstream hStream)
{
    enter(__func__);
    return leave(stream_destroy(hStream));
}

static CUresult
stream_synchronize(CUstream hs)
{
    struct CUctx_st *ctx = NULL;
    struct CUstream_st *s;
    CUresult r = need_ctx(&ctx);
    if (r) return r;
    if ((r = begin_work(hs, ctx, &s))) return r;
    if (s && s->is_capturing) {
        s->is_invalidated = true;
        return fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "stream %p is capturing", (void *)s);
    }
    return CUDA_SUCCESS; /* work ran when it was issued */
}

CUresult
cuStreamSynchronize(CUstream hStream)
{
    enter(__func__);
    return leave(stream_synchronize(hStream));
}

static CUresult
begin_capture(CUstream hs, CUstreamCaptureMode mode)
{
    CUresult r = need_init();
    if (r) return r;
    if (hs == NULL || hs == CU_STREAM_LEGACY || hs == CU_STREAM_PER_THREAD)
        return fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "a default stream cannot be captured");
    struct CUstream_st *s = find_stream(hs);
    if (!s) return fail(CUDA_ERROR_INVALID_VALUE, "%p is not a live stream", (void *)hs);
    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return fail(CUDA_ERROR_INVALID_VALUE, "capture mode %d", (int)mode);
    if (s->is_capturing)
        return fail(CUDA_ERROR_ILLEGAL_STATE, "stream %p is already capturing", (void *)s);
    if (!(s->capture = calloc(1, sizeof *s->capture)))
        return fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a graph");
    s->capture->ctx = s->ctx;
    s->is_capturing = true;
    s->is_invalidated = false;
    s->mode = mode;
    s->capture_thread = pthread_self();
    return CUDA_SUCCESS;
}

CUresult
cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    enter(__func__);
    return leave(begin_capture(hStream, mode));
}

static CUresult
end_capture(CUstream hs, CUgraph *phGraph)
{
    CUresult r = need_init();
    if (r) return r;
    if (!phGraph) return fail(CUDA_ERROR_INVALID_VALUE, "phGraph is NULL");
    struct CUstream_st *s = find_stream(hs);
    if (!s) return fail(CUDA_ERROR_INVALID_VALUE, "%p is not a live stream", (void *)hs);
    if (!s->is_capturing)
        return fail(CUDA_ERROR_ILLEGAL_STATE, "stream %p is not capturing", (void *)s);
    if (s->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
        !pthread_equal(s->capture_thread, pthread_self()))
        return fail(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
                    "stream %p's capture began on another thread", (void *)s);
    struct CUgraph_st *g = s->capture;
    s->capture = NULL;
    s->is_capturing = false;
    *phGraph = NULL;
    if (s->is_invalidated) {
        free_graph(g);
        return fail(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                    "an error on stream %p during the capture invalidated it", (void *)s);
    }
    g->next = graphs;
    graphs = g;
    *phGraph = g;
    return CUDA_SUCCESS;
}

CUresult
cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    enter(__func__);
    return leave(end_capture(hStream, phGraph));
}

/* ---- graphs ---- */

static CUresult
graph_instantiate(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
    CUresult r = need_init();
    if (r) return r;
    if (!phGraphExec) return fail(CUDA_ERROR_INVALID_VALUE, "phGraphExec is NULL");
    struct CUgraph_st *g = graphs;
    while (g && g != hGraph)
        g = g->next;
    if (!g) return fail(CUDA_ERROR_INVALID_VALUE, "%p is not a live graph", (void *)hGraph);
    if (flags & ~15ull) return fail(CUDA_ERROR_INVALID_VALUE, "flags 0x%llx", flags);
    struct CUgraphExec_st *e = calloc(1, sizeof *e);
    if (!e || (g->nnodes && !(e->nodes = calloc(g->nnodes, sizeof *e->nodes)))) {
        free(e);
        return fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for an executable graph");
    }
    /* an executable graph is independent of its graph (which may be destroyed) */
    for (size_t i = 0; i < g->nnodes; i++) {
        Node nd = g->nodes[i];
        if (nd.kind == NODE_KERNEL && nd.nargs > 0) {
            if (!(nd.args = malloc((size_t)nd.nargs * sizeof *nd.args))) {
                free_exec(e);
                return fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for an executable graph");
            }
            memcpy(nd.args, g->nodes[i].args, (size_t)nd.nargs * sizeof *nd.args);
        }
        e->nodes[e->nnodes++] = nd;
    }
    e->ctx = g->ctx;
    e->next = graph_execs;
    graph_execs = e;
    *phGraphExec = e;
    return CUDA_SUCCESS;
}

CUresult
cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
    enter(__func__);
    return leave(graph_instantiate(phGraphExec, hGraph, flags));
}

static CUresult
graph_launch(CUgraphExec hGraphExec, CUstream hs)
{
    CUresult r = need_init();
    if (r) return r;
    struct CUgraphExec_st *e = graph_execs;
    while (e && e != hGraphExec)
        e = e->next;
    if (!e)
        return fail(CUDA_ERROR_INVALID_VALUE, "%p is not a live executable graph",
                    (void *)hGraphExec);
    struct CUstream_st *s;
    if ((r = begin_work(hs, e->ctx, &s))) return r;
    if (s && s->is_capturing)
        return end_work(s, fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                                "launching a graph into a capture is not emulated"));
    stats.graph_launches++;
    for (size_t i = 0; i < e->nnodes; i++) {
        /* memory freed since the capture: on a GPU, an illegal address */
        if ((r = run_node(&e->nodes[i], NULL, CUDA_ERROR_ILLEGAL_ADDRESS))) return r;
        if (e->nodes[i].kind == NODE_KERNEL) stats.graph_kernel_runs++;
    }
    return CUDA_SUCCESS;
}

CUresult
cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    enter(__func__);
    if (fail_launch && ++nlaunches == fail_launch)
        return leave(fail(CUDA_ERROR_LAUNCH_FAILED, "SNN_CUEMU_FAIL_LAUNCH: launch %lld fails",
                          nlaunches));
    return leave(graph_launch(hGraphExec, hStream));
}

CUresult
cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    enter(__func__);
    CUresult r = need_init();
    if (r) return leave(r);
    for (struct CUgraphExec_st **pp = &graph_execs; *pp; pp = &(*pp)->next)
        if (*pp == hGraphExec) {
            *pp = hGraphExec->next;
            free_exec(hGraphExec);
            return leave(CUDA_SUCCESS);
        }
    return leave(
        fail(CUDA_ERROR_INVALID_VALUE, "%p is not a live executable graph", (void *)hGraphExec));
}

CUresult
cuGraphDestroy(CUgraph hGraph)
{
    enter(__func__);
    CUresult r = need_init();
    if (r) return leave(r);
    for (struct CUgraph_st **pp = &graphs; *pp; pp = &(*pp)->next)
        if (*pp == hGraph) {
            *pp = hGraph->next;
            free_graph(hGraph);
            return leave(CUDA_SUCCESS);
        }
    return leave(fail(CUDA_ERROR_INVALID_VALUE, "%p is not a live graph", (void *)hGraph));
}

/* ---- extras for tests ---- */

#define COUNT_LIST(head, type, out)                                                                \
    for (type *e = (head); e; e = e->next)                                                         \
        (out)++;

long long
snn_cuemu_stat(const char *name)
{
    if (!name) return -1;
    long long v = -1;
    pthread_mutex_lock(&mu);
#define STAT(field)                                                                                \
    if (strcmp(name, #field) == 0) v = stats.field;
    CUEMU_COUNTERS(STAT)
#undef STAT
    if (strcmp(name, "bytes_copied") == 0)
        v = stats.bytes_htod + stats.bytes_dtoh + stats.bytes_dtod;
    if (strcmp(name, "live_allocs") == 0) v = (long long)nallocs;
    if (strcmp(name, "live_bytes") == 0) v = (long long)live_bytes;
    if (strcmp(name, "peak_bytes") == 0) v = (long long)peak_bytes;
    if (strcmp(name, "current_contexts") == 0) v = nctx_stack;
    if (strcmp(name, "live_modules") == 0) {
        v = 0;
        COUNT_LIST(modules, struct CUmod_st, v)
    }
    if (strcmp(name, "live_streams") == 0) {
        v = 0;
        COUNT_LIST(streams, struct CUstream_st, v)
    }
    if (strcmp(name, "live_graphs") == 0) {
        v = 0;
        COUNT_LIST(graphs, struct CUgraph_st, v)
    }
    if (strcmp(name, "live_graph_execs") == 0) {
        v = 0;
        COUNT_LIST(graph_execs, struct CUgraphExec_st, v)
    }
    pthread_mutex_unlock(&mu);
    return v;
}

void
snn_cuemu_stats_reset(void)
{
    pthread_mutex_lock(&mu);
    memset(&stats, 0, sizeof stats);
    peak_bytes = live_bytes;
    pthread_mutex_unlock(&mu);
}

const char *
snn_cuemu_last_error(void)
{
    return last_error;
}
