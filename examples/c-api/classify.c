/* classify.c: classify Fashion-MNIST test images with a model.so built by snnc, through the C ABI
 * (runtime/snn.h) loaded with dlopen: nothing of snnc is needed to build or run this program.
 *
 *   snnc examples/fmnist_mlp.snn -o fmnist_mlp.so
 *   cc -O2 -I runtime examples/c-api/classify.c -o classify -ldl -lz
 *   ./classify ./fmnist_mlp.so [DATA_DIR] [--limit=N] [--batch=B] [--threads=N]
 *
 * DATA_DIR holds t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz (default:
 * $SNN_DATA_DIR, then /usr/share/datasets/fashion-mnist). Prints the accuracy, images/s, and the
 * spikes per layer; the output must be the model's score per class ([10] per image). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "snn.h"

/* the functions of snn.h this program uses, looked up in the library */
#define SNN_FUNCTIONS(X)                                                                          \
    X(snn_last_error) X(snn_model_get) X(snn_model_name) X(snn_model_timesteps)                   \
    X(snn_model_input) X(snn_model_output) X(snn_model_num_layers) X(snn_model_layer_name)        \
    X(snn_session_create) X(snn_session_destroy) X(snn_run) X(snn_session_spike_counts)           \
    X(snn_session_threads)
#define DECLARE(f) static __typeof__(f) *p_##f;
SNN_FUNCTIONS(DECLARE)

/* gunzip a whole IDX file; returns its bytes (malloc'ed) or NULL */
static unsigned char *
read_gz(const char *path, size_t *len)
{
    gzFile f = gzopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = malloc(cap);
    int got;
    while (buf && (got = gzread(f, buf + n, (unsigned)(cap - n))) > 0) {
        n += (size_t)got;
        if (n == cap) {
            unsigned char *grown = realloc(buf, cap *= 2);
            if (!grown) free(buf);
            buf = grown;
        }
    }
    gzclose(f);
    *len = n;
    return buf;
}

static uint32_t
be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int
main(int argc, char **argv)
{
    const char *lib = NULL, *dir = getenv("SNN_DATA_DIR");
    long limit = -1, batch = 256, threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--limit=", 8)) limit = strtol(argv[i] + 8, NULL, 10);
        else if (!strncmp(argv[i], "--batch=", 8)) batch = strtol(argv[i] + 8, NULL, 10);
        else if (!strncmp(argv[i], "--threads=", 10)) threads = strtol(argv[i] + 10, NULL, 10);
        else if (!lib) lib = argv[i];
        else dir = argv[i];
    }
    if (!lib || batch < 1 || threads < 0) {
        fprintf(stderr, "usage: classify MODEL.so [DATA_DIR] [--limit=N] [--batch=B] "
                        "[--threads=N]\n");
        return 2;
    }
    if (!dir || !*dir) dir = "/usr/share/datasets/fashion-mnist";

    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "classify: %s\n", dlerror());
        return 1;
    }
#define LOOKUP(f)                                                                                 \
    if (!(*(void **)&p_##f = dlsym(h, #f))) { /* POSIX's way to store a function pointer */    \
        fprintf(stderr, "classify: %s has no %s: not a model.so?\n", lib, #f);                    \
        return 1;                                                                                 \
    }
    SNN_FUNCTIONS(LOOKUP)

    const snn_model *m = p_snn_model_get();
    if (!m) {
        fprintf(stderr, "classify: %s\n", p_snn_last_error());
        return 1;
    }
    snn_tensor_info in, out;
    if (p_snn_model_input(m, 0, &in) != SNN_OK || p_snn_model_output(m, 0, &out) != SNN_OK ||
        in.numel != 784 || out.numel != 10) {
        fprintf(stderr, "classify: model '%s' does not take 28x28 images to 10 scores\n",
                p_snn_model_name(m));
        return 1;
    }

    char path[4096];
    size_t nimg_bytes, nlab_bytes;
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte.gz", dir);
    unsigned char *img = read_gz(path, &nimg_bytes);
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte.gz", dir);
    unsigned char *lab = read_gz(path, &nlab_bytes);
    if (!img || !lab || nimg_bytes < 16 || nlab_bytes < 8 || be32(img) != 0x803 ||
        be32(lab) != 0x801 || nimg_bytes != 16 + (size_t)be32(img + 4) * 784 ||
        nlab_bytes != 8 + (size_t)be32(lab + 4) || be32(img + 4) != be32(lab + 4)) {
        fprintf(stderr, "classify: no Fashion-MNIST test set in %s\n", dir);
        return 1;
    }
    long n = (long)be32(img + 4);
    if (limit >= 0 && limit < n) n = limit;
    if (batch > n) batch = n > 0 ? n : 1;

    snn_session *s;
    if (p_snn_session_create(m, "cpu", (int)batch, (int)threads, &s) != SNN_OK) {
        fprintf(stderr, "classify: %s\n", p_snn_last_error());
        return 1;
    }
    float *x = malloc((size_t)batch * 784 * sizeof *x), *y = malloc((size_t)batch * 10 * sizeof *y);
    if (!x || !y) return 1;
    long correct = 0;
    double seconds = 0;
    for (long b0 = 0; b0 < n; b0 += batch) {
        int nb = (int)(n - b0 < batch ? n - b0 : batch);
        for (long i = 0; i < (long)nb * 784; i++)
            x[i] = (float)img[16 + b0 * 784 + i] / 255.0f; /* as torchvision's ToTensor */
        const float *ins[] = {x};
        float *outs[] = {y};
        double t0 = now();
        if (p_snn_run(s, b0, nb, ins, outs) != SNN_OK) {
            fprintf(stderr, "classify: %s\n", p_snn_last_error());
            return 1;
        }
        seconds += now() - t0;
        for (int i = 0; i < nb; i++) {
            int best = 0;
            for (int c = 1; c < 10; c++)
                if (y[i * 10 + c] > y[i * 10 + best]) best = c; /* first maximum, as argmax */
            correct += best == lab[8 + b0 + i];
        }
    }
    printf("model %s: %ld images, T = %d, %d threads, batch %ld\n", p_snn_model_name(m), n,
           p_snn_model_timesteps(m), p_snn_session_threads(s), batch);
    printf("accuracy %.4f (%ld/%ld)\n", n ? (double)correct / (double)n : 0.0, correct, n);
    printf("%.0f images/s\n", seconds > 0 ? (double)n / seconds : 0.0);
    int nl = p_snn_model_num_layers(m);
    double *counts = calloc((size_t)nl + 1, sizeof *counts);
    if (counts && p_snn_session_spike_counts(s, counts, nl) == SNN_OK)
        for (int l = 0; l < nl; l++)
            printf("spikes %s: %.0f\n", p_snn_model_layer_name(m, l), counts[l]);
    free(counts);
    free(x);
    free(y);
    free(img);
    free(lab);
    p_snn_session_destroy(s);
    dlclose(h);
    return 0;
}
