/* cuda_driver.c: finding and loading the CUDA driver (libcuda) with dlopen, once per process, and
 * turning its results into one-sentence messages. It resolves the exact versioned names of
 * SNN_CUDA_DRIVER_FUNCTIONS: libcuda still exports the unversioned 32-bit-ABI functions
 * (cuMemAlloc), which must never be called. Nothing here prints, exits or unloads the library. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_driver.h"

void
rt_cuda_error(const RtCudaDriver *d, CUresult r, const char *fn, char *err, size_t errlen)
{
    const char *name = NULL, *text = NULL;
    if (d && d->cuGetErrorName && d->cuGetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
    if (d && d->cuGetErrorString && d->cuGetErrorString(r, &text) != CUDA_SUCCESS) text = NULL;
    if (name && text) snprintf(err, errlen, "%s failed: %s: %s", fn, name, text);
    else if (name) snprintf(err, errlen, "%s failed: %s", fn, name);
    else snprintf(err, errlen, "%s failed: CUDA error %d", fn, (int)r);
}

bool
rt_cuda_driver_open(const char *path, RtCudaDriver *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    if (path) {
        d->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!d->handle) {
            const char *why = dlerror();
            snprintf(err, errlen, "CUDA is unavailable: the driver SNN_CUDA_DRIVER names cannot be "
                                  "loaded: %s", why ? why : path);
            return false;
        }
    } else {
        d->handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!d->handle) {
            /* the first failure is the one that says what is missing */
            char why[384];
            const char *e = dlerror();
            snprintf(why, sizeof why, "%s", e ? e : "libcuda.so.1 not found");
            d->handle = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
            if (!d->handle) {
                snprintf(err, errlen, "CUDA is unavailable: the NVIDIA driver (libcuda.so.1) is "
                                      "not installed: %s", why);
                return false;
            }
        }
    }
    const char *from = path ? path : "the driver";
    /* POSIX's way to store a dlsym result in a function pointer */
#define RT_CUDA_RESOLVE(name)                                                                      \
    if (!(*(void **)&d->name = dlsym(d->handle, #name))) {                                        \
        snprintf(err, errlen, "CUDA is unavailable: %s has no %s (too old)", from, #name);        \
        dlclose(d->handle);                                                                       \
        memset(d, 0, sizeof *d);                                                                  \
        return false;                                                                             \
    }
    SNN_CUDA_DRIVER_FUNCTIONS(RT_CUDA_RESOLVE)
#undef RT_CUDA_RESOLVE
    CUresult r = d->cuInit(0);
    if (r == CUDA_SUCCESS) r = d->cuDriverGetVersion(&d->version);
    if (r == CUDA_SUCCESS) r = d->cuDeviceGetCount(&d->ndevices);
    if (r == CUDA_ERROR_NO_DEVICE || (r == CUDA_SUCCESS && d->ndevices < 1)) {
        snprintf(err, errlen, "no CUDA device is present");
        r = CUDA_ERROR_NO_DEVICE;
    } else if (r != CUDA_SUCCESS) {
        char msg[400];
        rt_cuda_error(d, r, "cuInit", msg, sizeof msg);
        snprintf(err, errlen, "CUDA is unavailable: %s", msg);
    }
    if (r != CUDA_SUCCESS) {
        dlclose(d->handle);
        memset(d, 0, sizeof *d);
        return false;
    }
    return true;
}

static RtCudaDriver driver;
static bool is_loaded;
static char load_error[512];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void
load_driver(void)
{
    const char *path = getenv("SNN_CUDA_DRIVER");
    is_loaded = rt_cuda_driver_open(path && *path ? path : NULL, &driver, load_error,
                                    sizeof load_error);
}

const RtCudaDriver *
rt_cuda_driver(char *err, size_t errlen)
{
    pthread_once(&load_once, load_driver);
    if (is_loaded) return &driver;
    snprintf(err, errlen, "%s", load_error);
    return NULL;
}

bool
rt_cuda_device(const RtCudaDriver *d, int ordinal, CUdevice *dev, char *err, size_t errlen)
{
    if (ordinal < 0 || ordinal >= d->ndevices) {
        snprintf(err, errlen, "cuda:%d does not exist (this machine has %d CUDA device%s)", ordinal,
                 d->ndevices, d->ndevices == 1 ? "" : "s");
        return false;
    }
    CUresult r = d->cuDeviceGet(dev, ordinal);
    if (r != CUDA_SUCCESS) {
        rt_cuda_error(d, r, "cuDeviceGet", err, errlen);
        return false;
    }
    return true;
}

bool
rt_cuda_device_arch(int ordinal, int *major, int *minor, char *name, size_t namelen, char *err,
                    size_t errlen)
{
    const RtCudaDriver *d = rt_cuda_driver(err, errlen);
    CUdevice dev;
    if (!d || !rt_cuda_device(d, ordinal, &dev, err, errlen)) return false;
    CUresult r = d->cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    if (r == CUDA_SUCCESS)
        r = d->cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    if (r != CUDA_SUCCESS) {
        rt_cuda_error(d, r, "cuDeviceGetAttribute", err, errlen);
        return false;
    }
    if (name && namelen > 0) {
        r = d->cuDeviceGetName(name, (int)namelen, dev);
        if (r != CUDA_SUCCESS) snprintf(name, namelen, "cuda:%d", ordinal);
    }
    return true;
}
