/* pool.h: the CPU thread pool behind SnnkRt.parallel_for (runtime/kernel_abi.h): nthreads - 1
 * persistent worker threads, the caller being the last one. parallel_for splits [lo, hi) into at
 * most nthreads contiguous chunks (depending only on the range and the thread count), runs the first
 * on the caller and waits for the rest. One parallel_for at a time per pool. Nothing prints; no
 * allocation after rt_pool_new. */
#ifndef SNN_RUNTIME_POOL_H
#define SNN_RUNTIME_POOL_H

#include <stddef.h>

#include "runtime/kernel_abi.h"

typedef struct RtPool RtPool;
/* NULL with a message in err if memory or a thread cannot be had. nthreads < 1 counts as 1 (no
 * thread started). */
RtPool *rt_pool_new(int nthreads, char *err, size_t errlen);
SnnkRt *rt_pool_rt(RtPool *pool);
int rt_pool_nthreads(const RtPool *pool);
void rt_pool_free(RtPool *pool); /* joins the workers; NULL is fine */

#endif
