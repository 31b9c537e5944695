/* pool.c: the CPU thread pool (pool.h): persistent pthreads that run the chunks of a kernel's
 * outermost parallel loop (SnnkRt.parallel_for, called by generated code). The split is contiguous and
 * depends only on the range and the thread count, and chunks write disjoint data, so results never
 * depend on timing. Nothing here allocates per call or knows what a kernel computes. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/pool.h"

struct RtPool {
    SnnkRt rt; /* first: generated code is handed &pool->rt */
    int nthreads; /* workers + the caller */
    int nworkers; /* started */
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t generation; /* bumped for every job; workers run each generation once */
    int pending;         /* workers that have not finished the current job */
    bool is_stopping;
    /* the current job */
    SnnkChunkFn fn;
    void **bufs;
    int64_t batch, step, sample_base, lo, hi;
    int nchunks;
};

typedef struct Worker {
    RtPool *pool;
    int index; /* chunk index: 1..nthreads-1 (the caller runs chunk 0) */
} Worker;

/* chunk c of n of [lo, hi): contiguous, near-equal, each starting (but the first) at lo plus a
 * multiple of CHUNK_ALIGN, so generated code that runs iterations in SIMD lanes from aligned
 * starts gets them in every chunk (llvm_gen.c: gen_simd_loop) */
enum { CHUNK_ALIGN = 8 };

static int64_t
chunk_start(const RtPool *p, int c)
{
    if (c >= p->nchunks) return p->hi;
    int64_t off = (p->hi - p->lo) * c / p->nchunks;
    return p->lo + off / CHUNK_ALIGN * CHUNK_ALIGN;
}

static void
run_chunk(const RtPool *p, int c)
{
    int64_t a = chunk_start(p, c), b = chunk_start(p, c + 1);
    if (a < b) p->fn(p->bufs, p->batch, p->step, p->sample_base, a, b);
}

static void *
worker_main(void *arg)
{
    Worker *w = arg;
    RtPool *p = w->pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->generation == seen && !p->is_stopping)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->is_stopping) break;
        seen = p->generation;
        int nchunks = p->nchunks;
        pthread_mutex_unlock(&p->mu);
        /* the job's fields do not change until every worker has reported back */
        if (w->index < nchunks) run_chunk(p, w->index);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    free(w);
    return NULL;
}

static void
pool_parallel_for(SnnkRt *rt, SnnkChunkFn fn, void **bufs, int64_t batch, int64_t step,
                  int64_t sample_base, int64_t lo, int64_t hi)
{
    RtPool *p = (RtPool *)rt;
    if (hi <= lo) return;
    int64_t trip = hi - lo;
    if (p->nworkers == 0 || trip < 2) {
        fn(bufs, batch, step, sample_base, lo, hi);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->bufs = bufs;
    p->batch = batch;
    p->step = step;
    p->sample_base = sample_base;
    p->lo = lo;
    p->hi = hi;
    p->nchunks = trip < p->nthreads ? (int)trip : p->nthreads;
    p->pending = p->nworkers;
    p->generation++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    run_chunk(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

SnnkRt *
rt_pool_rt(RtPool *pool)
{
    return &pool->rt;
}

int
rt_pool_nthreads(const RtPool *pool)
{
    return pool->nthreads;
}

RtPool *
rt_pool_new(int nthreads, char *err, size_t errlen)
{
    RtPool *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory for a thread pool");
        return NULL;
    }
    p->rt.parallel_for = pool_parallel_for;
    p->nthreads = nthreads < 1 ? 1 : nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    if (p->nthreads == 1) return p;
    p->workers = calloc((size_t)p->nthreads, sizeof *p->workers);
    if (!p->workers) {
        snprintf(err, errlen, "out of memory for %d threads", p->nthreads);
        rt_pool_free(p);
        return NULL;
    }
    for (int i = 1; i < p->nthreads; i++) {
        Worker *w = malloc(sizeof *w);
        if (!w) {
            snprintf(err, errlen, "out of memory for %d threads", p->nthreads);
            rt_pool_free(p);
            return NULL;
        }
        w->pool = p;
        w->index = i;
        int rc = pthread_create(&p->workers[p->nworkers], NULL, worker_main, w);
        if (rc != 0) {
            free(w);
            snprintf(err, errlen, "cannot start thread %d of %d: %s", i + 1, p->nthreads,
                     strerror(rc));
            rt_pool_free(p);
            return NULL;
        }
        p->nworkers++;
    }
    return p;
}

void
rt_pool_free(RtPool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->is_stopping = true;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nworkers; i++)
        pthread_join(p->workers[i], NULL);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}
