/* bigmem.c: large buffers on huge pages (bigmem.h).
 *
 * Why: a spike-fed dense layer reads the weight rows of the inputs that spiked, scattered over the
 * whole weight. The conv SNN's f3 weight is 6272 rows of 4 KB (f16): with 4 KB pages every row
 * is a page of its own, more pages than the second-level TLB holds, so nearly every row a spike
 * selects costs a page walk, and a virtual machine's walk is two-dimensional. Debian's default
 * (transparent_hugepage=madvise) gives huge pages only to memory that asks: one 2 MB page covers
 * 512 rows. Batch-1 conv SNN on 2 vCPUs: 0.648 -> 0.636 ms (docs/benchmarks.md). */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include "runtime/bigmem.h"

#include <stdint.h>
#include <stdlib.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

void *
rt_big_alloc(size_t n)
{
    if (n > SIZE_MAX - RT_BIG_BYTES) return NULL;
    if (n < RT_BIG_BYTES) return aligned_alloc(64, n ? (n + 63) / 64 * 64 : 64);
    size_t r = (n + RT_BIG_BYTES - 1) / RT_BIG_BYTES * RT_BIG_BYTES;
    void *p = aligned_alloc(RT_BIG_BYTES, r);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (p) (void)madvise(p, r, MADV_HUGEPAGE); /* a hint: refused, the pages stay small */
#endif
    return p;
}
