/* npycmp: compares arrays written by snnc (.npy/.npz/.safetensors) with expected ones, for tests. Spikes exactly,
 * other values within |a - b| <= atol + rtol * |b| + mtol * max |b| (over the array); with
 * --minus BASE, the differences a - base and b - base of same-named arrays (a step's update); or, with --argmax, the argmax of score rows against
 * predicted labels (the first N of them, for N rows: a run over the first N images). Mismatches are reported by name and index ([sample, step, neuron] for sequences). */
#include "runtime/tensor_io.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Opts {
    const char *exact[16];
    int nexact;
    double rtol, atol, mtol;
    double min_agree; /* --argmax */
    bool argmax;
} Opts;

static int
load(const char *path, RtTensorSet *set)
{
    char err[512];
    size_t n = strlen(path);
    if (n > 4 && strcmp(path + n - 4, ".npz") == 0) {
        if (rt_npz_read(path, NULL, set, err, sizeof err) == 0)
            return 0;
    } else if (n > 12 && strcmp(path + n - 12, ".safetensors") == 0) {
        if (rt_safetensors_read(path, NULL, set, err, sizeof err) == 0)
            return 0;
    } else {
        set->tensors = calloc(1, sizeof *set->tensors);
        set->ntensors = 1;
        if (set->tensors && rt_npy_read(path, NULL, &set->tensors[0], err, sizeof err) == 0)
            return 0;
    }
    fprintf(stderr, "npycmp: %s\n", err);
    return 1;
}

static void
index_str(const RtTensor *t, int64_t flat, char *buf, size_t len)
{
    int64_t idx[RT_MAX_RANK];
    for (int d = t->rank - 1; d >= 0; d--) {
        idx[d] = t->dims[d] ? flat % t->dims[d] : 0;
        flat = t->dims[d] ? flat / t->dims[d] : 0;
    }
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < t->rank && k < len; d++)
        k += (size_t)snprintf(buf + k, len - k, "%s%lld", d ? ", " : "", (long long)idx[d]);
    if (k < len)
        snprintf(buf + k, len - k, "]%s", t->rank == 3 ? " (sample, step, neuron)" : "");
}

static bool
is_exact(const Opts *o, const char *name)
{
    for (int i = 0; i < o->nexact; i++)
        if (strcmp(o->exact[i], name) == 0 || strcmp(o->exact[i], "*") == 0)
            return true;
    return false;
}

static int
compare(const Opts *o, const RtTensor *a, const RtTensor *b, const char *name)
{
    bool same_shape = a->rank == b->rank;
    for (int d = 0; same_shape && d < a->rank; d++)
        same_shape = a->dims[d] == b->dims[d];
    if (!same_shape) {
        fprintf(stderr, "npycmp: '%s': shapes differ (%d-d vs %d-d or different sizes)\n", name,
                a->rank, b->rank);
        return 1;
    }
    bool exact = is_exact(o, name);
    int64_t bad = 0;
    double scale = 0;
    for (int64_t i = 0; i < b->numel; i++)
        if (fabs(b->data[i]) > scale) scale = fabs(b->data[i]);
    double atol = o->atol + o->mtol * scale;
    double max_abs = 0;
    for (int64_t i = 0; i < a->numel; i++) {
        double x = a->data[i], y = b->data[i];
        double diff = fabs(x - y);
        bool ok = x == y || (isnan(x) && isnan(y)) || (!exact && diff <= atol + o->rtol * fabs(y));
        if (diff > max_abs)
            max_abs = diff;
        if (!ok) {
            if (bad < 5) {
                char ix[160];
                index_str(a, i, ix, sizeof ix);
                fprintf(stderr, "npycmp: '%s' differs at %s: got %.9g, expected %.9g\n", name, ix, x, y);
            }
            bad++;
        }
    }
    printf("%-12s %s %lld values, max |diff| %.3g, %lld mismatches\n", name,
           exact ? "exact" : "tolerant", (long long)a->numel, max_abs, (long long)bad);
    return bad > 0;
}

static int
argmax_agree(const Opts *o, const RtTensor *scores, const RtTensor *pred)
{
    if (scores->rank != 2 || pred->rank != 1 || scores->dims[0] > pred->dims[0]) {
        fprintf(stderr, "npycmp: --argmax wants scores [N, K] and predictions [M >= N]\n");
        return 1;
    }
    int64_t n = scores->dims[0], k = scores->dims[1], agree = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *row = scores->data + i * k;
        int64_t best = 0;
        for (int64_t c = 1; c < k; c++)
            if (row[c] > row[best])
                best = c;
        agree += (float)best == pred->data[i];
    }
    double frac = n ? (double)agree / (double)n : 1.0;
    printf("argmax agreement: %lld/%lld = %.5f (required %.5f)\n", (long long)agree, (long long)n,
           frac, o->min_agree);
    return frac + 1e-12 < o->min_agree;
}

int
main(int argc, char **argv)
{
    Opts o = {.rtol = 1e-6, .atol = 1e-6};
    const char *files[2], *minus = NULL;
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--exact") == 0 && i + 1 < argc && o.nexact < 16)
            o.exact[o.nexact++] = argv[++i];
        else if (strcmp(argv[i], "--rtol") == 0 && i + 1 < argc)
            o.rtol = atof(argv[++i]);
        else if (strcmp(argv[i], "--atol") == 0 && i + 1 < argc)
            o.atol = atof(argv[++i]);
        else if (strcmp(argv[i], "--minus") == 0 && i + 1 < argc)
            minus = argv[++i];
        else if (strcmp(argv[i], "--mtol") == 0 && i + 1 < argc)
            o.mtol = atof(argv[++i]);
        else if (strcmp(argv[i], "--argmax") == 0 && i + 1 < argc) {
            o.argmax = true;
            o.min_agree = atof(argv[++i]);
        } else if (argv[i][0] != '-' && nfiles < 2)
            files[nfiles++] = argv[i];
        else {
            fprintf(stderr, "usage: npycmp [--exact NAME]... [--rtol R] [--atol A] [--mtol M] [--minus BASE] [--argmax MIN] "
                            "ACTUAL EXPECTED\n");
            return 2;
        }
    }
    if (nfiles != 2) {
        fprintf(stderr, "npycmp: two files expected\n");
        return 2;
    }
    RtTensorSet a = {0}, b = {0}, c = {0};
    int rc = load(files[0], &a) || load(files[1], &b) || (minus && load(minus, &c));
    for (int i = 0; !rc && minus && i < c.ntensors; i++) /* subtract the base from both */
        for (RtTensorSet *s = &a; s; s = s == &a ? &b : NULL)
            for (int j = 0; j < s->ntensors; j++) {
                RtTensor *t = &s->tensors[j];
                if (!t->name || !c.tensors[i].name || strcmp(t->name, c.tensors[i].name) ||
                    t->numel != c.tensors[i].numel)
                    continue;
                for (int64_t k = 0; k < t->numel; k++)
                    t->data[k] -= c.tensors[i].data[k];
            }
    if (!rc && o.argmax)
        rc = argmax_agree(&o, &a.tensors[0], &b.tensors[0]);
    else if (!rc) {
        for (int i = 0; i < b.ntensors; i++) {
            const RtTensor *e = &b.tensors[i];
            const char *name = e->name ? e->name : "array";
            const RtTensor *g = NULL;
            for (int j = 0; j < a.ntensors && !g; j++)
                if (!e->name || (a.tensors[j].name && strcmp(a.tensors[j].name, e->name) == 0))
                    g = &a.tensors[j];
            if (!g) {
                fprintf(stderr, "npycmp: %s has no array '%s'\n", files[0], name);
                rc = 1;
                continue;
            }
            rc |= compare(&o, g, e, name);
        }
    }
    rt_tensorset_free(&a);
    rt_tensorset_free(&b);
    rt_tensorset_free(&c);
    return rc;
}
