/* test_pool.c: the CPU thread pool (runtime/pool.c). Every parallel_for covers its range exactly
 * once, in contiguous chunks whose starts (but the first) are lo plus multiples of 8, with the
 * caller's arguments passed through; hand-offs work whether the workers are spinning (jobs back
 * to back) or asleep (a pause longer than the spin between jobs); pools start and stop cleanly. */
#include "runtime/pool.h"
#include "tests/unit/check.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAXN = 4096, MAXCHUNKS = 16 };

static _Atomic int hits[MAXN];
static _Atomic int nchunks;
static int64_t chunk_lo[MAXCHUNKS];
static void *const want_bufs[1] = {(void *)hits};
static _Atomic int bad_args;

static void
chunk(void **bufs, int64_t batch, int64_t step, int64_t sample_base, int64_t lo, int64_t hi)
{
    if (bufs != (void **)want_bufs || batch != 7 || step != 3 || sample_base != 11)
        atomic_fetch_add(&bad_args, 1);
    int c = atomic_fetch_add(&nchunks, 1);
    if (c < MAXCHUNKS) chunk_lo[c] = lo;
    for (int64_t i = lo; i < hi; i++)
        atomic_fetch_add_explicit(&hits[i], 1, memory_order_relaxed);
}

static void
pause_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* one parallel_for over [lo, hi): every element once, chunks aligned */
static bool
run_once(RtPool *p, int64_t lo, int64_t hi)
{
    memset((void *)hits, 0, sizeof hits);
    atomic_store(&nchunks, 0);
    SnnkRt *rt = rt_pool_rt(p);
    rt->parallel_for(rt, chunk, (void **)want_bufs, 7, 3, 11, lo, hi);
    bool ok = true;
    for (int64_t i = 0; i < MAXN; i++)
        ok = ok && atomic_load(&hits[i]) == (i >= lo && i < hi);
    int n = atomic_load(&nchunks);
    ok = ok && n <= rt_pool_nthreads(p) && (hi <= lo || n >= 1);
    for (int c = 0; c < n && c < MAXCHUNKS; c++)
        ok = ok && (chunk_lo[c] == lo || (chunk_lo[c] - lo) % 8 == 0);
    return ok;
}

int
main(void)
{
    static const int threads[] = {1, 2, 3, 4, 8};
    uint32_t r = 12345;
    for (size_t k = 0; k < sizeof threads / sizeof threads[0]; k++) {
        char err[128];
        RtPool *p = rt_pool_new(threads[k], err, sizeof err);
        CHECK(p != NULL && rt_pool_nthreads(p) == threads[k]);
        if (!p) continue;
        int nbad = 0;
        for (int i = 0; i < 3000; i++) {
            r = r * 1103515245u + 12345u;
            int64_t lo = (r >> 8) % 64, hi = lo + (r >> 16) % 600;
            if (!run_once(p, lo, hi)) nbad++;
            if (i % 500 == 499) pause_us(2000); /* the workers fall asleep: the condvar path */
        }
        CHECK(nbad == 0);
        CHECK(run_once(p, 5, 5) && run_once(p, 9, 10) && run_once(p, 0, MAXN));
        rt_pool_free(p);
    }
    CHECK(atomic_load(&bad_args) == 0);
    /* start and stop: right away, after a job, and after the workers slept */
    for (int i = 0; i < 40; i++) {
        char err[128];
        RtPool *p = rt_pool_new(4, err, sizeof err);
        CHECK(p != NULL);
        if (!p) continue;
        if (i % 3 >= 1) CHECK(run_once(p, 0, 100));
        if (i % 3 == 2) pause_us(1000);
        rt_pool_free(p);
    }
    rt_pool_free(NULL);
    printf("test_pool: %d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
