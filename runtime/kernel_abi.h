/* kernel_abi.h: the contract between generated CPU code and the runtime that calls it, shared by the
 * JIT (codegen/llvm) and model.so (runtime/session.c). Generated code exports one entry point and
 * calls back into the runtime only through SnnkRt; changing anything here changes every model.so,
 * so SNNK_ABI_VERSION is written into each model's metadata and checked when a session starts.
 *
 *   void snnk_run(void **bufs, i64 B, i64 sample_base, SnnkRt *rt)
 *       runs the whole schedule on one batch of B samples; bufs[i] is the base address of buffer i
 *       of the program (its element type; bool stored as a byte), sample_base the global index of
 *       the batch's first sample (it keys the Poisson encoder).
 */
#ifndef SNN_RUNTIME_KERNEL_ABI_H
#define SNN_RUNTIME_KERNEL_ABI_H

#include <stdint.h>

#define SNNK_ABI_VERSION 2
#define SNNK_ENTRY "snnk_run"

/* iterations [lo, hi) of a kernel's outermost parallel loop (at step `step` of the schedule) */
typedef void (*SnnkChunkFn)(void **bufs, int64_t batch, int64_t step, int64_t sample_base,
                            int64_t lo, int64_t hi);
/* What generated code calls back: run fn over [lo, hi) in chunks and return when all are done.
 * The chunks must not depend on how they are split (iterations of a parallel loop are
 * independent), so results never depend on the thread count. */
/* The runtime cuts [lo, hi) at lo plus multiples of SNNK_CHUNK_ALIGN (the first chunk's start
 * aside): generated code that runs iterations in SIMD lanes from aligned starts, or stores bits
 * a byte of 8 at a time, relies on it; any other loop is handed over in 1/SNNK_CHUNK_ALIGN parts
 * of an iteration (codegen/llvm/llvm_gen.c gen_parts) so that a short range still feeds every
 * thread. */
#define SNNK_CHUNK_ALIGN 16
typedef struct SnnkRt SnnkRt;
struct SnnkRt {
    void (*parallel_for)(SnnkRt *rt, SnnkChunkFn fn, void **bufs, int64_t batch, int64_t step,
                         int64_t sample_base, int64_t lo, int64_t hi);
};
typedef void (*SnnkEntryFn)(void **bufs, int64_t batch, int64_t sample_base, SnnkRt *rt);

#endif
