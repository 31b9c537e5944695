/* snnc_bench: times a model.so through its C ABI the way the peers are timed (bench/cpu/peers.py,
 * bench/gpu/peers.py): one session, a warm-up pass, then the median of repeated passes; and batch-1
 * latency as the median of single-sample runs. This is the deployment path: what a user of model.so
 * gets, host arrays in and out.
 *
 *   snnc_bench MODEL.so (--fmnist | --input=X.npy) [--device=DEV] [--weights=W.safetensors]
 *              [--batch=B] [--limit=N] [--repeats=R] [--threads=T] [--latency-runs=L]
 *              [--output=OUT.npy]
 *
 * --device: what snn_session_create gets ("cpu", the default; "cuda", "cuda:N", "auto"). On a cuda
 * session the timing is the same: snn_run copies the batch to the device, runs, copies the outputs
 * back and synchronises before it returns, so a pass's wall time includes those copies.
 * --weights: snn_session_load_weights_file on every session (for a model.so built with
 * --no-embed-weights).
 *
 * Prints one JSON object: device (snn_session_device), images, batch, threads, pass times (s),
 * images_per_s (median pass), runs, kernel_launches_per_run and graph_launches_per_run (from
 * snn_session_stats over the warm-up and timed passes; graph launches null for a library older
 * than ABI 2), latency_b1_ms (median; only with --latency-runs, with the batch-1 session's runs and
 * launches as b1_runs, b1_kernel_launches_per_run, b1_graph_launches_per_run), and writes the first
 * output of the last pass (all samples) to --output. Models with one input and one output. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "runtime/snn.h"
#include "runtime/tensor_io.h"

#define SNN_FUNCTIONS(X)                                                                          \
    X(snn_last_error) X(snn_model_get) X(snn_model_input) X(snn_model_output)                     \
    X(snn_session_create) X(snn_session_destroy) X(snn_run) X(snn_model_timesteps)                \
    X(snn_abi_version) X(snn_session_stats) X(snn_session_device)                                 \
    X(snn_session_load_weights_file)
#define DECLARE(f) static __typeof__(f) *p_##f;
SNN_FUNCTIONS(DECLARE)

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double
median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static _Noreturn void
fail(const char *what, const char *msg)
{
    /* the runtime's messages start with the function's name already */
    if (!strncmp(msg, what, strlen(what)) && msg[strlen(what)] == ':')
        fprintf(stderr, "snnc_bench: %s\n", msg);
    else
        fprintf(stderr, "snnc_bench: %s: %s\n", what, msg);
    exit(1);
}

/* A session on `device` with the weights of --weights, if given. */
static snn_session *
open_session(const snn_model *m, const char *lib, const char *device, long batch, long threads,
             const char *weights)
{
    snn_session *s;
    if (p_snn_session_create(m, device, (int)batch, (int)threads, &s))
        fail(lib, p_snn_last_error());
    if (weights && p_snn_session_load_weights_file(s, weights)) fail(weights, p_snn_last_error());
    return s;
}

/* Prints `, "PREFIXkernel_launches_per_run": K, "PREFIXgraph_launches_per_run": G` from the
 * session's stats (every run since it was created). The stats struct is read into a larger zeroed
 * buffer: a library older than ABI 2 writes a shorter struct without graph_launches. */
static void
print_launches(snn_session *s, const char *prefix)
{
    union {
        snn_stats st;
        unsigned char pad[512];
    } u;
    memset(&u, 0, sizeof u);
    if (p_snn_session_stats(s, &u.st)) fail("snn_session_stats", p_snn_last_error());
    double runs = u.st.runs > 0 ? (double)u.st.runs : 1.0;
    printf(", \"%sruns\": %lld, \"%skernel_launches_per_run\": %.2f", prefix, (long long)u.st.runs,
           prefix, (double)u.st.kernel_launches / runs);
    if (p_snn_abi_version() >= 2)
        printf(", \"%sgraph_launches_per_run\": %.2f", prefix, (double)u.st.graph_launches / runs);
    else
        printf(", \"%sgraph_launches_per_run\": null", prefix);
}

int
main(int argc, char **argv)
{
    const char *lib = NULL, *input = NULL, *output = NULL, *device = "cpu", *weights = NULL;
    int is_fmnist = 0;
    long batch = 256, limit = -1, repeats = 5, threads = 2, lat_runs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "--input=", 8)) input = a + 8;
        else if (!strcmp(a, "--fmnist")) is_fmnist = 1;
        else if (!strncmp(a, "--batch=", 8)) batch = strtol(a + 8, NULL, 10);
        else if (!strncmp(a, "--limit=", 8)) limit = strtol(a + 8, NULL, 10);
        else if (!strncmp(a, "--repeats=", 10)) repeats = strtol(a + 10, NULL, 10);
        else if (!strncmp(a, "--threads=", 10)) threads = strtol(a + 10, NULL, 10);
        else if (!strncmp(a, "--latency-runs=", 15)) lat_runs = strtol(a + 15, NULL, 10);
        else if (!strncmp(a, "--output=", 9)) output = a + 9;
        else if (!strncmp(a, "--device=", 9)) device = a + 9;
        else if (!strncmp(a, "--weights=", 10)) weights = a + 10;
        else if (!lib && a[0] != '-') lib = a;
        else fail(a, "unknown option");
    }
    if (!lib || (!input == !is_fmnist) || batch < 1 || repeats < 1 || threads < 0)
        fail("usage", "snnc_bench MODEL.so (--fmnist | --input=X.npy) [--device=DEV] "
                      "[--weights=W.safetensors] [--batch=B] [--limit=N] [--repeats=R] "
                      "[--threads=T] [--latency-runs=L] [--output=OUT.npy]");
    struct stat si, so; /* the output never replaces an input */
    if (output && input && stat(input, &si) == 0 && stat(output, &so) == 0 &&
        si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        fail(output, "is the input file; give --output another path");

    char libpath[4096]; /* dlopen searches the library path for a name without a slash */
    snprintf(libpath, sizeof libpath, "%s%s", strchr(lib, '/') ? "" : "./", lib);
    void *h = dlopen(libpath, RTLD_NOW | RTLD_LOCAL);
    if (!h) fail(lib, dlerror());
#define LOOKUP(f)                                                                                 \
    if (!(*(void **)&p_##f = dlsym(h, #f))) fail(lib, "missing " #f);
    SNN_FUNCTIONS(LOOKUP)
    const snn_model *m = p_snn_model_get();
    if (!m) fail(lib, p_snn_last_error());
    snn_tensor_info in_info, out_info;
    if (p_snn_model_input(m, 0, &in_info) || p_snn_model_output(m, 0, &out_info))
        fail(lib, p_snn_last_error());
    snn_tensor_info more; /* snn_run reads one pointer per input and output */
    if (p_snn_model_input(m, 1, &more) == SNN_OK || p_snn_model_output(m, 1, &more) == SNN_OK)
        fail(lib, "the model has more than one input or output; snnc_bench times models with one "
                  "of each");

    RtTensor x, labels;
    char msg[512];
    if (is_fmnist ? rt_fmnist_load(NULL, 0, &x, &labels, msg, sizeof msg)
                  : rt_npy_read(input, NULL, &x, msg, sizeof msg))
        fail(is_fmnist ? "fashion-mnist" : input, msg);
    long n = x.rank ? (long)x.dims[0] : 0;
    if (limit >= 0 && limit < n) n = limit;
    if (n < 1 || x.numel != x.dims[0] * in_info.numel)
        fail("input", "no samples, or not of the model's input shape");
    if (batch > n) batch = n;

    snn_session *s = open_session(m, lib, device, batch, threads, weights);
    float *y = malloc((size_t)n * (size_t)out_info.numel * sizeof *y);
    if (!y) fail("memory", "out of memory");
    double *pass = calloc((size_t)repeats, sizeof *pass);
    for (long r = -1; r < repeats; r++) { /* r = -1: the warm-up pass, not timed */
        double t0 = now();
        for (long b0 = 0; b0 < n; b0 += batch) {
            int nb = (int)(n - b0 < batch ? n - b0 : batch);
            const float *ins[] = {x.data + b0 * in_info.numel};
            float *outs[] = {y + b0 * out_info.numel};
            if (p_snn_run(s, b0, nb, ins, outs)) fail("snn_run", p_snn_last_error());
        }
        if (r >= 0) pass[r] = now() - t0;
    }
    double pass_s = median(pass, (int)repeats);
    printf("{\"device\": \"%s\", \"images\": %ld, \"batch\": %ld, \"threads\": %ld, "
           "\"repeats\": %ld, \"pass_seconds\": [", p_snn_session_device(s), n, batch, threads,
           repeats);
    for (long r = 0; r < repeats; r++)
        printf("%s%.6f", r ? ", " : "", pass[r]);
    printf("], \"median_pass_s\": %.6f, \"images_per_s\": %.1f", pass_s, (double)n / pass_s);
    print_launches(s, "");
    if (lat_runs > 0) {
        snn_session *s1 = open_session(m, lib, device, 1, threads, weights);
        double *lat = calloc((size_t)lat_runs, sizeof *lat);
        for (long i = -5; i < lat_runs; i++) { /* five warm-up runs */
            long k = (i < 0 ? -i : i) % n;
            const float *ins[] = {x.data + k * in_info.numel};
            float *outs[] = {y + k * out_info.numel};
            double t0 = now();
            if (p_snn_run(s1, k, 1, ins, outs)) fail("snn_run", p_snn_last_error());
            if (i >= 0) lat[i] = now() - t0;
        }
        printf(", \"latency_b1_ms\": %.4f, \"latency_runs\": %ld", 1e3 * median(lat, (int)lat_runs),
               lat_runs);
        print_launches(s1, "b1_");
        free(lat);
        p_snn_session_destroy(s1);
    }
    printf("}\n");
    if (output) {
        int64_t dims[RT_MAX_RANK] = {n};
        int rank = 1;
        if (out_info.per_step) dims[rank++] = p_snn_model_timesteps(m);
        for (int d = 0; d < out_info.rank; d++)
            dims[rank++] = out_info.dims[d];
        if (rt_npy_write(output, RT_F32, rank, dims, y, msg, sizeof msg)) fail(output, msg);
    }
    p_snn_session_destroy(s);
    free(pass);
    free(y);
    rt_tensor_free(&x);
    if (is_fmnist) rt_tensor_free(&labels);
    dlclose(h);
    return 0;
}
