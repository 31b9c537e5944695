/* pool.c: the CPU thread pool (pool.h): persistent pthreads that run the chunks of a kernel's
 * outermost parallel loop (SnnkRt.parallel_for, called by generated code). The split is contiguous
 * and depends only on the range and the thread count, and chunks write disjoint data, so results
 * never depend on timing. Nothing here allocates per call or knows what a kernel computes.
 *
 * Hand-offs spin before they sleep: a worker that finished a chunk watches for the next job, and
 * the caller for the workers' chunks, for up to SPIN_NS before waiting on a condition variable.
 * A kernel of a batch-1 inference takes microseconds, the kernels follow one another, and a
 * futex wake-up on a virtual machine costs tens of microseconds each way: with sleeping hand-offs
 * 2 threads were slower at batch 1 than 1 (docs/benchmarks.md). Why 10 us: long enough to catch
 * the next kernel of a run; 100 us measured the same latencies but once cost a recurrent model's
 * batch-64 throughput 1.6x on a 2-vCPU machine (a spinning vCPU takes from the working one when
 * the host shares their cores), 10 us measured throughput at parity. An idle pool sleeps.
 * The caller, waiting for the chunks of the job it launched, has nothing else to do: it spins up
 * to CALLER_SPIN_NS, so a worker that finishes a long chunk (a conv over uneven steps at batch 1)
 * does not have to wake it (conv SNN at batch 1: 0.86 -> 0.80 ms on 2 vCPUs). Not where the pool
 * has more threads than the machine has processors: there the spin would take the worker's. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/pool.h"

/* how long a waiter spins before it sleeps: a worker for the next job, the caller for its job */
enum { SPIN_NS = 10000, CALLER_SPIN_NS = 2000000 };

struct RtPool {
    SnnkRt rt; /* first: generated code is handed &pool->rt */
    int nthreads; /* workers + the caller */
    int64_t caller_spin_ns; /* CALLER_SPIN_NS, or SPIN_NS where threads outnumber processors */
    int nworkers; /* started */
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    /* bumped (under mu) for every job; workers run each generation once */
    _Atomic uint64_t generation;
    _Atomic int pending;     /* workers that have not finished the current job */
    _Atomic bool is_stopping;
    int nsleeping;           /* workers waiting on go (under mu) */
    bool is_caller_sleeping; /* the caller waits on done (under mu) */
    /* the current job */
    SnnkChunkFn fn;
    void **bufs;
    int64_t batch, step, sample_base, lo, hi;
    int nchunks;
};

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* spin until done(arg) or `limit` ns pass; true if done */
static bool
spin_until(bool (*done)(const RtPool *, uint64_t), const RtPool *p, uint64_t arg, int64_t limit)
{
    int64_t t0 = 0;
    for (unsigned i = 0;; i++) {
        if (done(p, arg)) return true;
        cpu_relax();
        if ((i & 63) == 63) {
            int64_t t = now_ns();
            if (!t0) t0 = t;
            else if (t - t0 > limit)
                return false;
        }
    }
}

static bool
has_new_job(const RtPool *p, uint64_t seen)
{
    return atomic_load_explicit(&p->generation, memory_order_acquire) != seen ||
           atomic_load_explicit(&p->is_stopping, memory_order_acquire);
}

static bool
is_job_done(const RtPool *p, uint64_t unused)
{
    (void)unused;
    return atomic_load_explicit(&p->pending, memory_order_acquire) == 0;
}

typedef struct Worker {
    RtPool *pool;
    int index; /* chunk index: 1..nthreads-1 (the caller runs chunk 0) */
} Worker;

/* chunk c of n of [lo, hi): contiguous, near-equal, each starting (but the first) at lo plus a
 * multiple of SNNK_CHUNK_ALIGN (kernel_abi.h), so generated code that runs iterations in SIMD
 * lanes from aligned starts gets them in every chunk (llvm_gen.c: gen_simd_loop; 16 lanes with
 * AVX-512, 8 without: 16 is a multiple of both) */

static int64_t
chunk_start(const RtPool *p, int c)
{
    if (c >= p->nchunks) return p->hi;
    int64_t off = (p->hi - p->lo) * c / p->nchunks;
    return p->lo + off / SNNK_CHUNK_ALIGN * SNNK_CHUNK_ALIGN;
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
    for (;;) {
        if (!spin_until(has_new_job, p, seen, SPIN_NS)) {
            pthread_mutex_lock(&p->mu);
            p->nsleeping++;
            while (!has_new_job(p, seen))
                pthread_cond_wait(&p->go, &p->mu);
            p->nsleeping--;
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load_explicit(&p->is_stopping, memory_order_acquire)) break;
        seen = atomic_load_explicit(&p->generation, memory_order_acquire);
        /* the job's fields (written before the generation was bumped) do not change until every
         * worker has reported back */
        if (w->index < p->nchunks) run_chunk(p, w->index);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            if (p->is_caller_sleeping) pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
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
    /* every worker finished the previous job (pending was 0), so none reads these fields now */
    p->fn = fn;
    p->bufs = bufs;
    p->batch = batch;
    p->step = step;
    p->sample_base = sample_base;
    p->lo = lo;
    p->hi = hi;
    p->nchunks = trip < p->nthreads ? (int)trip : p->nthreads;
    atomic_store_explicit(&p->pending, p->nworkers, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    if (p->nsleeping > 0) pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    run_chunk(p, 0);
    if (!spin_until(is_job_done, p, 0, p->caller_spin_ns)) {
        pthread_mutex_lock(&p->mu);
        p->is_caller_sleeping = true;
        while (!is_job_done(p, 0))
            pthread_cond_wait(&p->done, &p->mu);
        p->is_caller_sleeping = false;
        pthread_mutex_unlock(&p->mu);
    }
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
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    p->caller_spin_ns = online > 0 && p->nthreads > online ? SPIN_NS : CALLER_SPIN_NS;
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
    atomic_store_explicit(&p->is_stopping, true, memory_order_release);
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
