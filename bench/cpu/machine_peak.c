/* machine_peak: the limits of the host a CPU benchmark runs on, measured there, so that each kernel's
 * figure can be given as a share of its floor: the FMA peak (f32 and f64, for each vector width the
 * CPU has: AVX-512, AVX2 with FMA) and the copy bandwidth (memcpy of buffers far larger than the
 * caches; bytes read plus bytes written, as the benchmarks' copy yardstick counts them), on 1 thread
 * and on --threads threads.
 *
 *   machine_peak [--threads=N] [--quick]
 *
 * --threads: default the online CPUs. --quick: shorter runs (a smoke test; the figures are then
 * rougher). Prints one JSON object: cpu (the model name from /proc/cpuinfo), features (those the
 * code paths test: avx2, fma, avx512f, avx512_vnni, avx512_bf16), threads, fma_gflops
 * {f32|f64: {isa: {"1": GFLOP/s on one thread, "N": on N threads}}}, copy_gbs {"1", "N"}, and the
 * parameters (chains, copy bytes, repeats). Each figure is the best of the repeats: a peak. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { CHAINS = 12, REPEATS = 5, MAX_THREADS = 1024 };
/* the chains' loop unrolled, so every accumulator stays in a register */
#define UNROLLED _Pragma("GCC unroll 16")

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- FMA chains: CHAINS independent accumulators, so the FMA units never wait on latency ---- */

typedef double FmaFn(int64_t iters);

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static double
fma_avx2_f32(int64_t iters)
{
    __m256 acc[CHAINS];
    for (int c = 0; c < CHAINS; c++)
        acc[c] = _mm256_set1_ps((float)c * 1e-3f);
    __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (int64_t i = 0; i < iters; i++)
        UNROLLED for (int c = 0; c < CHAINS; c++)
            acc[c] = _mm256_fmadd_ps(acc[c], a, b);
    float lanes[8];
    double s = 0;
    for (int c = 0; c < CHAINS; c++) {
        _mm256_storeu_ps(lanes, acc[c]);
        for (int l = 0; l < 8; l++)
            s += lanes[l];
    }
    return s;
}

__attribute__((target("avx2,fma"))) static double
fma_avx2_f64(int64_t iters)
{
    __m256d acc[CHAINS];
    for (int c = 0; c < CHAINS; c++)
        acc[c] = _mm256_set1_pd((double)c * 1e-3);
    __m256d a = _mm256_set1_pd(0.999999), b = _mm256_set1_pd(1e-7);
    for (int64_t i = 0; i < iters; i++)
        UNROLLED for (int c = 0; c < CHAINS; c++)
            acc[c] = _mm256_fmadd_pd(acc[c], a, b);
    double lanes[4], s = 0;
    for (int c = 0; c < CHAINS; c++) {
        _mm256_storeu_pd(lanes, acc[c]);
        for (int l = 0; l < 4; l++)
            s += lanes[l];
    }
    return s;
}

__attribute__((target("avx512f"))) static double
fma_avx512_f32(int64_t iters)
{
    __m512 acc[CHAINS];
    for (int c = 0; c < CHAINS; c++)
        acc[c] = _mm512_set1_ps((float)c * 1e-3f);
    __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (int64_t i = 0; i < iters; i++)
        UNROLLED for (int c = 0; c < CHAINS; c++)
            acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    double s = 0;
    for (int c = 0; c < CHAINS; c++)
        s += _mm512_reduce_add_ps(acc[c]);
    return s;
}

__attribute__((target("avx512f"))) static double
fma_avx512_f64(int64_t iters)
{
    __m512d acc[CHAINS];
    for (int c = 0; c < CHAINS; c++)
        acc[c] = _mm512_set1_pd((double)c * 1e-3);
    __m512d a = _mm512_set1_pd(0.999999), b = _mm512_set1_pd(1e-7);
    for (int64_t i = 0; i < iters; i++)
        UNROLLED for (int c = 0; c < CHAINS; c++)
            acc[c] = _mm512_fmadd_pd(acc[c], a, b);
    double s = 0;
    for (int c = 0; c < CHAINS; c++)
        s += _mm512_reduce_add_pd(acc[c]);
    return s;
}
#endif

/* the code paths: ISA name, the feature __builtin_cpu_supports must report, lanes per vector */
typedef struct Isa {
    const char *name;
    const char *feature;
    int lanes_f32;
    FmaFn *f32, *f64;
} Isa;

static const Isa isas[] = {
#if defined(__x86_64__)
    {"avx512", "avx512f", 16, fma_avx512_f32, fma_avx512_f64},
    {"avx2", "fma", 8, fma_avx2_f32, fma_avx2_f64},
#endif
};

static bool
has_feature(const char *f)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (!strcmp(f, "avx512f")) return __builtin_cpu_supports("avx512f");
    if (!strcmp(f, "avx2")) return __builtin_cpu_supports("avx2");
    if (!strcmp(f, "fma")) return __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
#endif
    (void)f;
    return false;
}

/* ---- running a function on n threads at once ---- */

typedef struct Job {
    FmaFn *fma;          /* or NULL: a copy */
    int64_t iters;
    const unsigned char *src;
    unsigned char *dst;
    size_t bytes;        /* the thread's share of the copy */
    double sink;
    double secs;         /* this thread's time, from the barrier to its end */
    pthread_barrier_t *start;
} Job;

static void *
job_run(void *arg)
{
    Job *j = arg;
    pthread_barrier_wait(j->start);
    double t0 = now();
    if (j->fma)
        j->sink = j->fma(j->iters);
    else
        memcpy(j->dst, j->src, j->bytes);
    j->secs = now() - t0;
    return NULL;
}

/* seconds for jobs[0..n) run together (thread 0 is the caller): the slowest thread's own time
 * from the common start, so that starting the threads is not counted (it once made a short
 * --quick run on 2 threads slower than on 1) */
static double
run_jobs(Job *jobs, int n)
{
    pthread_t th[MAX_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)n);
    for (int t = 0; t < n; t++)
        jobs[t].start = &start;
    for (int t = 1; t < n; t++)
        if (pthread_create(&th[t], NULL, job_run, &jobs[t]) != 0) {
            fprintf(stderr, "machine_peak: cannot start thread %d\n", t);
            exit(1);
        }
    job_run(&jobs[0]);
    double dt = jobs[0].secs;
    for (int t = 1; t < n; t++) {
        pthread_join(th[t], NULL);
        if (jobs[t].secs > dt) dt = jobs[t].secs;
    }
    pthread_barrier_destroy(&start);
    return dt;
}

/* best GFLOP/s of `fn` over the repeats on n threads */
static double
fma_peak(FmaFn *fn, int lanes, int n, int64_t iters, Job *jobs)
{
    double best = 0, sink = 0;
    for (int r = 0; r < REPEATS; r++) {
        for (int t = 0; t < n; t++)
            jobs[t] = (Job){.fma = fn, .iters = iters};
        double dt = run_jobs(jobs, n);
        for (int t = 0; t < n; t++)
            sink += jobs[t].sink;
        double g = 2.0 * (double)lanes * CHAINS * (double)iters * n / dt * 1e-9;
        if (g > best) best = g;
    }
    if (sink == 12345.678) fputc(' ', stderr); /* keeps the results live */
    return best;
}

/* best GB/s (read + written) of a copy of `bytes` split over n threads */
static double
copy_peak(const unsigned char *src, unsigned char *dst, size_t bytes, int n, Job *jobs)
{
    double best = 0;
    size_t share = bytes / (size_t)n / 64 * 64;
    for (int r = 0; r < REPEATS; r++) {
        for (int t = 0; t < n; t++)
            jobs[t] = (Job){.src = src + (size_t)t * share, .dst = dst + (size_t)t * share,
                            .bytes = share};
        double dt = run_jobs(jobs, n);
        double g = 2.0 * (double)share * n / dt * 1e-9;
        if (g > best) best = g;
    }
    return best;
}

static void
cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) {
                c += 1 + (c[1] == ' ');
                c[strcspn(c, "\n")] = 0;
                snprintf(buf, len, "%s", c);
            }
            break;
        }
    fclose(f);
}

static void
json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') putchar('\\');
        if ((unsigned char)*s >= 0x20) putchar(*s);
    }
    putchar('"');
}

int
main(int argc, char **argv)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nthreads = ncpu < 1 ? 1 : ncpu > MAX_THREADS ? MAX_THREADS : (int)ncpu;
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (!strncmp(argv[i], "--threads=", 10)) {
            long v = strtol(argv[i] + 10, &end, 10);
            if (*end || v < 1 || v > MAX_THREADS) {
                fprintf(stderr, "machine_peak: --threads expects 1 to %d, got '%s'\n",
                        MAX_THREADS, argv[i] + 10);
                return 2;
            }
            nthreads = (int)v;
        } else if (!strcmp(argv[i], "--quick")) {
            quick = true;
        } else {
            fprintf(stderr, "usage: machine_peak [--threads=N] [--quick]\n");
            return 2;
        }
    }
    /* about 0.1 s per FMA run at 50 GFLOP/s a thread (a fifth of it with --quick); the copy far
     * larger than any L3 in both modes (32 MB had stayed in one) */
    int64_t iters = quick ? 100000 : 500000;
    size_t copy_bytes = quick ? (size_t)256 << 20 : (size_t)512 << 20;
    unsigned char *src = aligned_alloc(64, copy_bytes), *dst = aligned_alloc(64, copy_bytes);
    Job *jobs = calloc((size_t)nthreads, sizeof *jobs);
    if (!src || !dst || !jobs) {
        fprintf(stderr, "machine_peak: out of memory for %zu-byte copy buffers\n", copy_bytes);
        return 1;
    }
    memset(src, 1, copy_bytes); /* first touch: every page mapped before timing */
    memset(dst, 0, copy_bytes);

    char model[256];
    cpu_model(model, sizeof model);
    static const char *const features[] = {"avx2", "fma", "avx512f", "avx512_vnni",
                                           "avx512_bf16"};
    printf("{\"cpu\": ");
    json_string(model);
    printf(", \"features\": [");
    const char *sep = "";
    for (size_t i = 0; i < sizeof features / sizeof features[0]; i++) {
#if defined(__x86_64__)
        bool has = !strcmp(features[i], "avx2")          ? __builtin_cpu_supports("avx2")
                   : !strcmp(features[i], "fma")         ? __builtin_cpu_supports("fma")
                   : !strcmp(features[i], "avx512f")     ? __builtin_cpu_supports("avx512f")
                   : !strcmp(features[i], "avx512_vnni") ? __builtin_cpu_supports("avx512vnni")
                                                         : __builtin_cpu_supports("avx512bf16");
#else
        bool has = false;
#endif
        if (has) {
            printf("%s\"%s\"", sep, features[i]);
            sep = ", ";
        }
    }
    printf("], \"threads\": %d, \"fma_gflops\": {", nthreads);
    for (int prec = 0; prec < 2; prec++) {
        printf("%s\"%s\": {", prec ? ", " : "", prec ? "f64" : "f32");
        sep = "";
        for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
            const Isa *isa = &isas[i];
            if (!has_feature(isa->feature)) continue;
            FmaFn *fn = prec ? isa->f64 : isa->f32;
            int lanes = prec ? isa->lanes_f32 / 2 : isa->lanes_f32;
            printf("%s\"%s\": {\"1\": %.2f", sep, isa->name, fma_peak(fn, lanes, 1, iters, jobs));
            if (nthreads > 1)
                printf(", \"%d\": %.2f", nthreads, fma_peak(fn, lanes, nthreads, iters, jobs));
            printf("}");
            sep = ", ";
        }
        printf("}");
    }
    printf("}, \"copy_gbs\": {\"1\": %.2f", copy_peak(src, dst, copy_bytes, 1, jobs));
    if (nthreads > 1)
        printf(", \"%d\": %.2f", nthreads, copy_peak(src, dst, copy_bytes, nthreads, jobs));
    printf("}, \"chains\": %d, \"fma_iters\": %lld, \"copy_bytes\": %zu, \"repeats\": %d}\n",
           CHAINS, (long long)iters, copy_bytes, REPEATS);
    free(src);
    free(dst);
    free(jobs);
    return 0;
}
