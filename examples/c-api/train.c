/* train.c: train a model.so built with `snnc --train` on Fashion-MNIST through the C ABI
 * (runtime/snn.h, the snn_trainer_* functions) loaded with dlopen, then test it with an inference
 * session that takes the trained weights: nothing of snnc is needed to build or run this program.
 *
 *   snnc --train examples/fmnist_mlp.snn -o fmnist_mlp_train.so
 *   cc -O2 -I runtime examples/c-api/train.c -o train -ldl -lz
 *   ./train ./fmnist_mlp_train.so [DATA_DIR] [--limit=N] [--epochs=E] [--batch=B] [--lr=X]
 *           [--threads=N] [--test-limit=N] [-o trained.safetensors]
 *
 * DATA_DIR holds the Fashion-MNIST .gz files (default: $SNN_DATA_DIR, then
 * /usr/share/datasets/fashion-mnist). The first N training images in order (no shuffle), pixels
 * as byte / 255, MSE on the output, Adam: the same steps as `snnc --train --no-shuffle`, so the
 * same weights. Prints each epoch's loss and accuracy, then the test accuracy. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "snn.h"

#define SNN_FUNCTIONS(X)                                                                           \
    X(snn_last_error)                                                                              \
    X(snn_model_get) X(snn_model_name) X(snn_model_output) X(snn_model_trainable)                  \
        X(snn_train_config_default) X(snn_trainer_create) X(snn_trainer_destroy) X(snn_train_step) \
            X(snn_trainer_save_weights) X(snn_session_create) X(snn_session_destroy)               \
                X(snn_session_copy_weights) X(snn_run)
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

/* images (bytes) and labels of a split; the count, or -1 */
static long
load(const char *dir, const char *split, unsigned char **img, unsigned char **lab)
{
    char path[4096];
    size_t ni, nl;
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte.gz", dir, split);
    *img = read_gz(path, &ni);
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte.gz", dir, split);
    *lab = read_gz(path, &nl);
    if (!*img || !*lab || ni < 16 || nl < 8 || (ni - 16) / 784 != nl - 8) {
        fprintf(stderr, "train: cannot read the %s set in %s\n", split, dir);
        return -1;
    }
    return (long)(nl - 8);
}

int
main(int argc, char **argv)
{
    const char *lib = NULL, *dir = NULL, *out = NULL;
    long limit = -1, test_limit = -1, batch = 128, threads = 0, epochs = 1;
    double lr = 1e-3;
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--limit=", 8))
            limit = strtol(argv[i] + 8, NULL, 10);
        else if (!strncmp(argv[i], "--test-limit=", 13))
            test_limit = strtol(argv[i] + 13, NULL, 10);
        else if (!strncmp(argv[i], "--batch=", 8))
            batch = strtol(argv[i] + 8, NULL, 10);
        else if (!strncmp(argv[i], "--epochs=", 9))
            epochs = strtol(argv[i] + 9, NULL, 10);
        else if (!strncmp(argv[i], "--threads=", 10))
            threads = strtol(argv[i] + 10, NULL, 10);
        else if (!strncmp(argv[i], "--lr=", 5))
            lr = strtod(argv[i] + 5, NULL);
        else if (!strcmp(argv[i], "-o") && i + 1 < argc)
            out = argv[++i];
        else if (!lib)
            lib = argv[i];
        else
            dir = argv[i];
    }
    if (!lib || batch < 1 || threads < 0 || epochs < 1) {
        fprintf(stderr, "usage: train MODEL.so [DATA_DIR] [--limit=N] [--epochs=E] [--batch=B] "
                        "[--lr=X] [--threads=N] [--test-limit=N] [-o OUT.safetensors]\n");
        return 2;
    }
    if (!dir) dir = getenv("SNN_DATA_DIR");
    if (!dir) dir = "/usr/share/datasets/fashion-mnist";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "train: %s\n", dlerror());
        return 1;
    }
#define LOOKUP(f)                                                                                  \
    if (!(*(void **)&p_##f = dlsym(h, #f))) {                                                      \
        fprintf(stderr, "train: %s: no %s (a library of ABI 3 or later is needed)\n", lib, #f);    \
        return 1;                                                                                  \
    }
    SNN_FUNCTIONS(LOOKUP)
    const snn_model *m = p_snn_model_get();
    if (!m || !p_snn_model_trainable(m)) {
        fprintf(stderr, "train: %s\n",
                m ? "the library carries no training step (build it with "
                    "snnc --train MODEL.snn -o MODEL.so)"
                  : p_snn_last_error());
        return 1;
    }
    unsigned char *img, *lab, *timg, *tlab;
    long n = load(dir, "train", &img, &lab), nt = load(dir, "t10k", &timg, &tlab);
    if (n < 0 || nt < 0) return 1;
    if (limit >= 0 && limit < n) n = limit;
    if (test_limit >= 0 && test_limit < nt) nt = test_limit;
    if (batch > n) batch = n > 0 ? n : 1;
    snn_train_config c;
    p_snn_train_config_default(&c);
    c.lr = lr;
    snn_trainer *t;
    if (p_snn_trainer_create(m, &c, (int)batch, (int)threads, &t) != SNN_OK) {
        fprintf(stderr, "train: %s\n", p_snn_last_error());
        return 1;
    }
    float *x = malloc((size_t)batch * 784 * sizeof *x), *y = malloc((size_t)batch * sizeof *y);
    float *scores = malloc((size_t)batch * 10 * sizeof *scores);
    if (!x || !y || !scores) return 1;
    printf("training %s on %ld images: %ld epochs, batch %ld, adam lr %g\n", p_snn_model_name(m), n,
           epochs, batch, lr);
    for (long e = 0; e < epochs; e++) {
        double loss_sum = 0;
        int64_t correct = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long b0 = 0; b0 < n; b0 += batch) {
            int nb = (int)(n - b0 < batch ? n - b0 : batch);
            for (long q = 0; q < (long)nb * 784; q++)
                x[q] = (float)img[16 + b0 * 784 + q] / 255.0f;
            for (int b = 0; b < nb; b++)
                y[b] = (float)lab[8 + b0 + b];
            const float *in[] = {x};
            double loss;
            int64_t ok;
            if (p_snn_train_step(t, e * n + b0, nb, in, y, &loss, &ok) != SNN_OK) {
                fprintf(stderr, "train: %s\n", p_snn_last_error());
                return 1;
            }
            loss_sum += loss * nb;
            correct += ok;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        printf("epoch %ld: loss %.6f train accuracy %.4f %.0f images/s\n", e + 1,
               loss_sum / (double)n, (double)correct / (double)n, secs > 0 ? n / secs : 0);
    }
    /* an inference session with the trained weights */
    snn_session *s;
    if (p_snn_session_create(m, "cpu", (int)batch, (int)threads, &s) != SNN_OK ||
        p_snn_session_copy_weights(s, t) != SNN_OK) {
        fprintf(stderr, "train: %s\n", p_snn_last_error());
        return 1;
    }
    long right = 0;
    for (long b0 = 0; b0 < nt; b0 += batch) {
        int nb = (int)(nt - b0 < batch ? nt - b0 : batch);
        for (long q = 0; q < (long)nb * 784; q++)
            x[q] = (float)timg[16 + b0 * 784 + q] / 255.0f;
        const float *in[] = {x};
        float *o[] = {scores};
        if (p_snn_run(s, b0, nb, in, o) != SNN_OK) {
            fprintf(stderr, "train: %s\n", p_snn_last_error());
            return 1;
        }
        for (int b = 0; b < nb; b++) {
            int best = 0;
            for (int k = 1; k < 10; k++)
                if (scores[b * 10 + k] > scores[b * 10 + best]) best = k;
            right += best == tlab[8 + b0 + b];
        }
    }
    printf("test accuracy %.4f on %ld images\n", (double)right / (double)nt, nt);
    if (out && p_snn_trainer_save_weights(t, out) != SNN_OK) {
        fprintf(stderr, "train: %s\n", p_snn_last_error());
        return 1;
    }
    p_snn_session_destroy(s);
    p_snn_trainer_destroy(t);
    free(x);
    free(y);
    free(scores);
    free(img);
    free(lab);
    free(timg);
    free(tlab);
    dlclose(h);
    return 0;
}
