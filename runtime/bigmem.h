/* bigmem.h: memory for large buffers (weights, arenas) that the kernels walk at random. */
#ifndef SNN_RUNTIME_BIGMEM_H
#define SNN_RUNTIME_BIGMEM_H

#include <stddef.h>

/* n bytes aligned to 64 at least, freed with free(); NULL when there is no memory. From
 * RT_BIG_BYTES up the block is aligned to and rounded up to RT_BIG_BYTES, and the kernel is asked
 * to back it with transparent huge pages (Linux madvise MADV_HUGEPAGE; where it declines, or
 * elsewhere, the pages stay small and nothing changes but speed). */
enum { RT_BIG_BYTES = 2 << 20 };
void *rt_big_alloc(size_t n);

#endif
