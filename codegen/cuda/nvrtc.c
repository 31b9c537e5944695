/* nvrtc.c: NVRTC through dlopen (loaded once per process, the functions of SNN_NVRTC_FUNCTIONS
 * resolved by name), compiling CUDA C to PTX or a cubin with the options of runtime/cuda_abi.h,
 * results kept in the shared compile cache, and SNN_KERNEL_OVERRIDE. Every nvrtcResult is checked
 * where it happens and reported with NVRTC's own words; nothing here prints or exits. */
#include "codegen/cuda/nvrtc.h"

#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/cache.h"
#include "ir/ir.h"
#include "runtime/clock.h"
#include "runtime/cuda_abi.h"
#include "runtime/tensor_io.h"

/* NVRTC's types, as nvrtc.h declares them (the header is not needed to build snnc) */
typedef int nvrtcResult; /* NVRTC_SUCCESS = 0 */
typedef struct _nvrtcProgram *nvrtcProgram;
enum { NVRTC_SUCCESS = 0, NVRTC_ERROR_INVALID_OPTION = 5 };

typedef const char *(*PFN_nvrtcGetErrorString)(nvrtcResult);
typedef nvrtcResult (*PFN_nvrtcVersion)(int *, int *);
typedef nvrtcResult (*PFN_nvrtcCreateProgram)(nvrtcProgram *, const char *, const char *, int,
                                              const char *const *, const char *const *);
typedef nvrtcResult (*PFN_nvrtcDestroyProgram)(nvrtcProgram *);
typedef nvrtcResult (*PFN_nvrtcCompileProgram)(nvrtcProgram, int, const char *const *);
typedef nvrtcResult (*PFN_nvrtcGetProgramLogSize)(nvrtcProgram, size_t *);
typedef nvrtcResult (*PFN_nvrtcGetProgramLog)(nvrtcProgram, char *);
typedef nvrtcResult (*PFN_nvrtcGetPTXSize)(nvrtcProgram, size_t *);
typedef nvrtcResult (*PFN_nvrtcGetPTX)(nvrtcProgram, char *);
typedef nvrtcResult (*PFN_nvrtcGetCUBINSize)(nvrtcProgram, size_t *);
typedef nvrtcResult (*PFN_nvrtcGetCUBIN)(nvrtcProgram, char *);

/* The loaded library: written once under load_once, read-only afterwards. */
static struct {
#define X(name) PFN_##name name;
    SNN_NVRTC_FUNCTIONS(X)
#undef X
    bool is_loaded;
    int major, minor;
    char library[1024];
    char error[1200]; /* why loading failed */
} nv;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;



/* Resolve every function of h into nv; false with nv.error set if one is missing. */
static bool
resolve(void *h, const char *lib)
{
#define X(name)                                                                                    \
    {                                                                                              \
        void *sym = dlsym(h, #name);                                                               \
        if (!sym) {                                                                                \
            diag_format(nv.error, sizeof nv.error,                                                     \
                    "NVRTC is unavailable: %s does not define " #name " (not an NVRTC library?)",  \
                    lib);                                                                          \
            return false;                                                                          \
        }                                                                                          \
        memcpy(&nv.name, &sym, sizeof sym); /* ISO C has no object-to-function pointer cast */     \
    }
    SNN_NVRTC_FUNCTIONS(X)
#undef X
    return true;
}

static void
load(void)
{
    const char *env = getenv("SNN_NVRTC");
    void *h = NULL;
    if (env && *env) {
        h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *why = dlerror();
            diag_format(nv.error, sizeof nv.error, "NVRTC is unavailable: SNN_NVRTC=%s cannot be loaded "
                    "(%s)", env, why ? why : "dlopen failed");
            return;
        }
        snprintf(nv.library, sizeof nv.library, "%s", env);
    } else {
        static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
        char first[512] = "";
        for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++) {
            h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
            if (h) snprintf(nv.library, sizeof nv.library, "%s", names[i]);
            else if (i == 0) {
                const char *why = dlerror();
                snprintf(first, sizeof first, "%s", why ? why : "");
            }
        }
        if (!h) {
            /* a library that is there but cannot load says why; one that is not there, how to fix */
            if (first[0] && !strstr(first, "No such file"))
                diag_format(nv.error, sizeof nv.error, "NVRTC is unavailable: %s", first);
            else
                diag_format(nv.error, sizeof nv.error, "NVRTC is unavailable: libnvrtc.so.13 not found "
                        "(install the CUDA toolkit's NVRTC or set SNN_NVRTC)");
            return;
        }
    }
    if (!resolve(h, nv.library)) {
        dlclose(h);
        return;
    }
    nvrtcResult rc = nv.nvrtcVersion(&nv.major, &nv.minor);
    if (rc != NVRTC_SUCCESS) {
        diag_format(nv.error, sizeof nv.error, "NVRTC is unavailable: nvrtcVersion failed in %s (%s)",
                nv.library, nv.nvrtcGetErrorString(rc));
        dlclose(h);
        return;
    }
    nv.is_loaded = true; /* h stays open for the life of the process */
}

bool
cuda_nvrtc_load(char *err, size_t errlen)
{
    pthread_once(&load_once, load);
    if (!nv.is_loaded) diag_format(err, errlen, "%s", nv.error);
    return nv.is_loaded;
}

void
cuda_nvrtc_version(int *major, int *minor)
{
    *major = nv.major;
    *minor = nv.minor;
}

const char *
cuda_nvrtc_library(void)
{
    return nv.library;
}

bool
cuda_arch_is_valid(const char *arch)
{
    const char *p = !strncmp(arch, "sm_", 3) ? arch + 3 : !strncmp(arch, "compute_", 8) ? arch + 8
                                                                                       : NULL;
    if (!p) return false;
    size_t ndigits = 0;
    while (isdigit((unsigned char)p[ndigits]))
        ndigits++;
    if (ndigits < 2 || ndigits > 3 || p[0] == '0') return false;
    p += ndigits;
    return !*p || ((*p == 'a' || *p == 'f') && !p[1]);
}

bool
cuda_arch_is_real(const char *arch)
{
    return cuda_arch_is_valid(arch) && !strncmp(arch, "sm_", 3);
}

void
cuda_arch_virtual(const char *arch, char *buf, size_t n)
{
    const char *p = strchr(arch, '_');
    p = p ? p + 1 : arch;
    size_t ndigits = strspn(p, "0123456789");
    snprintf(buf, n, "compute_%.*s", (int)ndigits, p);
}

void
cuda_image_free(CudaImage *img)
{
    if (!img) return;
    free(img->data);
    free(img->log);
    img->data = NULL;
    img->log = NULL;
    img->size = 0;
}

/* The cache key of one compile: everything that decides NVRTC's output, and which NVRTC. */
static CacheKey
image_key(const char *source, const char *name, const char *arch, bool is_cubin,
          const char *const *opts, int nopts)
{
    CacheKey k = cache_key_new();
    char version[64];
    snprintf(version, sizeof version, "snnc-nvrtc 1, NVRTC %d.%d", nv.major, nv.minor);
    cache_key_str(&k, version);
    cache_key_str(&k, nv.library); /* a stand-in NVRTC (tests/cuda_emu) must not share entries */
    cache_key_str(&k, source);
    cache_key_str(&k, name);
    cache_key_str(&k, arch);
    cache_key_str(&k, is_cubin ? "cubin" : "ptx");
    for (int i = 0; i < nopts; i++)
        cache_key_str(&k, opts[i]);
    return k;
}

/* Whether bytes from the cache look like what was asked for: an ELF cubin, or NUL-ended PTX. */
static bool
is_image(const unsigned char *data, size_t len, bool is_cubin)
{
    if (is_cubin) return len > 64 && !memcmp(data, "\177ELF", 4);
    return len > 1 && data[len - 1] == 0 && memchr(data, 0, len) == data + len - 1;
}

/* The first line of NVRTC's log, for a one-sentence error ("" if none). */
static void
first_line(const char *log, char *buf, size_t n)
{
    size_t len = strcspn(log, "\n");
    while (len > 0 && isspace((unsigned char)log[len - 1]))
        len--;
    snprintf(buf, n, "%.*s", (int)len, log);
}

/* One NVRTC compile, the program destroyed whatever happens. */
static bool
compile_now(const char *source, const char *name, const char *arch, bool is_cubin,
            const char *const *opts, int nopts, CudaImage *img, char *err, size_t errlen)
{
    nvrtcProgram prog = NULL;
    nvrtcResult rc = nv.nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL);
    if (rc != NVRTC_SUCCESS) {
        diag_format(err, errlen, "NVRTC cannot create a program for %s (%s)", name,
                nv.nvrtcGetErrorString(rc));
        return false;
    }
    nvrtcResult crc = nv.nvrtcCompileProgram(prog, nopts, opts);
    /* the log, always: warnings on success, the reasons on failure */
    size_t loglen = 0;
    rc = nv.nvrtcGetProgramLogSize(prog, &loglen);
    free(img->log);
    img->log = xcalloc(loglen + 1, 1);
    if (rc == NVRTC_SUCCESS && loglen > 0) rc = nv.nvrtcGetProgramLog(prog, img->log);
    if (rc != NVRTC_SUCCESS) img->log[0] = 0;
    bool is_ok = crc == NVRTC_SUCCESS;
    if (!is_ok) {
        char line[512];
        first_line(img->log, line, sizeof line);
        if (crc == NVRTC_ERROR_INVALID_OPTION) { /* our options are fixed: the architecture */
            diag_format(err, errlen, "NVRTC %d.%d does not support %s (%s)", nv.major, nv.minor, arch,
                    line[0] ? line : nv.nvrtcGetErrorString(crc));
            img->log[0] = 0; /* its one line is in err */
        } else
            diag_format(err, errlen, "NVRTC cannot compile %s for %s (%s)%s", name, arch,
                    nv.nvrtcGetErrorString(crc), img->log[0] ? "; its log follows" : "");
    }
    size_t size = 0;
    if (is_ok) {
        rc = is_cubin ? nv.nvrtcGetCUBINSize(prog, &size) : nv.nvrtcGetPTXSize(prog, &size);
        is_ok = rc == NVRTC_SUCCESS && size > 0;
        if (!is_ok)
            diag_format(err, errlen, "NVRTC gave no %s for %s (%s)", is_cubin ? "cubin" : "PTX", arch,
                    rc != NVRTC_SUCCESS ? nv.nvrtcGetErrorString(rc) : "size 0");
    }
    if (is_ok) {
        img->data = xmalloc(size + 1);
        img->data[size] = 0;
        rc = is_cubin ? nv.nvrtcGetCUBIN(prog, (char *)img->data)
                      : nv.nvrtcGetPTX(prog, (char *)img->data);
        is_ok = rc == NVRTC_SUCCESS;
        if (!is_ok)
            diag_format(err, errlen, "NVRTC cannot hand over the %s for %s (%s)",
                    is_cubin ? "cubin" : "PTX", arch, nv.nvrtcGetErrorString(rc));
        /* PTX's size counts its NUL; make sure there is exactly one, at the end */
        if (is_ok && !is_cubin) size = strlen((char *)img->data) + 1;
        img->size = size;
    }
    nv.nvrtcDestroyProgram(&prog);
    return is_ok;
}

bool
cuda_nvrtc_compile(const char *source, const char *name, const char *arch, bool is_cubin,
                   const char *cache_dir, CudaImage *img, char *err, size_t errlen)
{
    double t0 = rt_now_seconds();
    memset(img, 0, sizeof *img);
    img->is_cubin = is_cubin;
    snprintf(img->arch, sizeof img->arch, "%s", arch);
    img->log = xcalloc(1, 1);
    if (!cuda_arch_is_valid(arch)) {
        diag_format(err, errlen, "'%s' is not a CUDA architecture (sm_NN or compute_NN, e.g. sm_90)",
                arch);
        return false;
    }
    if (is_cubin && !cuda_arch_is_real(arch)) {
        diag_format(err, errlen, "a cubin is built for a real architecture (sm_NN), not the virtual %s",
                arch);
        return false;
    }
    if (!cuda_nvrtc_load(err, errlen)) return false;
    char gpu_arch[64];
    snprintf(gpu_arch, sizeof gpu_arch, "--gpu-architecture=%s", arch);
    const char *opts[] = {SNN_CUDA_NVRTC_OPTIONS, gpu_arch};
    int nopts = (int)(sizeof opts / sizeof opts[0]);
    _Static_assert(sizeof opts / sizeof opts[0] == SNN_CUDA_NVRTC_NOPTIONS + 1,
                   "SNN_CUDA_NVRTC_NOPTIONS counts SNN_CUDA_NVRTC_OPTIONS");

    bool is_cached = cache_dir && *cache_dir;
    CacheKey key = image_key(source, name, arch, is_cubin, opts, nopts);
    const char *ext = is_cubin ? "cubin" : "ptx";
    if (is_cached && cache_load(cache_dir, key, ext, &img->data, &img->size)) {
        if (is_image(img->data, img->size, is_cubin)) {
            img->is_cache_hit = true;
            img->seconds = rt_now_seconds() - t0;
            return true;
        }
        free(img->data); /* damaged: compiled again below, and replaced */
        img->data = NULL;
        img->size = 0;
    }
    if (!compile_now(source, name, arch, is_cubin, opts, nopts, img, err, errlen)) return false;
    if (is_cached) cache_store(cache_dir, key, ext, img->data, img->size);
    img->seconds = rt_now_seconds() - t0;
    return true;
}

bool
cuda_override_load(CudaOverride *ov, char *err, size_t errlen)
{
    memset(ov, 0, sizeof *ov);
    const char *path = getenv("SNN_KERNEL_OVERRIDE");
    if (!path || !*path) return true;
    size_t n = strlen(path);
    bool is_cu = n > 3 && !strcmp(path + n - 3, ".cu");
    bool is_ptx = n > 4 && !strcmp(path + n - 4, ".ptx");
    if (!is_cu && !is_ptx) {
        diag_format(err, errlen, "SNN_KERNEL_OVERRIDE=%s names neither CUDA C (.cu) nor PTX (.ptx)",
                path);
        return false;
    }
    unsigned char *buf;
    size_t len;
    char msg[600];
    RtReadLimit lim = {(uint64_t)1 << 28, 0, "a kernel source or PTX file"};
    if (rt_read_file(path, &lim, &buf, &len, msg, sizeof msg) != 0) {
        diag_format(err, errlen, "SNN_KERNEL_OVERRIDE: %s", msg);
        return false;
    }
    char *text = xrealloc(buf, len + 1);
    text[len] = 0;
    if (memchr(text, 0, len) || (is_ptx && len == 0)) {
        diag_format(err, errlen, "SNN_KERNEL_OVERRIDE=%s is %s, not %s text", path,
                len ? "binary" : "empty", is_ptx ? "PTX" : "CUDA C");
        free(text);
        return false;
    }
    ov->path = path;
    ov->is_ptx = is_ptx;
    ov->text = text;
    ov->len = len;
    return true;
}

void
cuda_override_free(CudaOverride *ov)
{
    free(ov->text);
    memset(ov, 0, sizeof *ov);
}

bool
cuda_build_image(const char *source, const char *name, const CudaOverride *ov, const char *arch,
                 bool is_cubin, const char *cache_dir, CudaImage *img, char *err, size_t errlen)
{
    if (!ov || !ov->path) return cuda_nvrtc_compile(source, name, arch, is_cubin, cache_dir, img,
                                                    err, errlen);
    if (!ov->is_ptx) return cuda_nvrtc_compile(ov->text, ov->path, arch, is_cubin, cache_dir, img,
                                               err, errlen);
    memset(img, 0, sizeof *img);
    img->is_cubin = is_cubin;
    snprintf(img->arch, sizeof img->arch, "%s", arch);
    img->log = xcalloc(1, 1);
    if (is_cubin) {
        diag_format(err, errlen, "SNN_KERNEL_OVERRIDE=%s is PTX, which stands in for PTX only, not a "
                "cubin for %s (override with a .cu file, or ask for PTX alone)", ov->path, arch);
        return false;
    }
    img->data = xmalloc(ov->len + 1);
    memcpy(img->data, ov->text, ov->len + 1);
    img->size = ov->len + 1;
    return true;
}
