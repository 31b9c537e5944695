/* Private to codegen/llvm: what llvm_gen.c (kernel IR → LLVM module) and llvm_jit.c (target
 * machine, optimisation, ORC LLJIT) share. Includes LLVM's C headers; nothing outside codegen/llvm
 * includes it. */
#ifndef SNN_LLVM_GEN_H
#define SNN_LLVM_GEN_H

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

#include "codegen/kir.h"

/* The entry points of a generated module:
 *   void snn_run(ptr bufs, i64 B, i64 sample_base, ptr rt)       the whole schedule, step loops
 *   void kernel_N(ptr bufs, i64 B, i64 t, i64 sample_base, ptr rt) kernel N of the schedule
 *   void kernel_N.chunk(ptr bufs, i64 B, i64 t, i64 sample_base, i64 lo, i64 hi)
 *        iterations [lo, hi) of kernel N's outermost parallel loop, for kernels whose body is that
 *        loop alone; kernel_N calls rt->parallel_for with it and the loop's bounds
 * bufs[i] is the base address of KProgram.bufs[i], in its element type (KT_BOOL stored as a byte).
 */
#define LLVM_GEN_ENTRY "snn_run"
typedef void (*LlvmChunkFn)(void **bufs, int64_t batch, int64_t step, int64_t sample_base,
                            int64_t lo, int64_t hi);
/* What generated code calls back: run fn over [lo, hi) in chunks, return when all are done. The
 * chunks must not depend on how they are split (iterations of a parallel loop are independent). */
typedef struct LlvmRt LlvmRt;
struct LlvmRt {
    void (*parallel_for)(LlvmRt *rt, LlvmChunkFn fn, void **bufs, int64_t batch, int64_t step,
                         int64_t sample_base, int64_t lo, int64_t hi);
};
typedef void (*LlvmEntryFn)(void **bufs, int64_t batch, int64_t sample_base, LlvmRt *rt);

/* ---- llvm_gen.c ---- */
/* Build and verify the module of p in ctx. Returns NULL with a message in err. */
LLVMModuleRef llvm_gen_module(const KProgram *p, LLVMContextRef ctx, char *err, size_t errlen);
/* Bytes one element of a buffer of type t occupies in memory. */
size_t llvm_gen_elem_size(KType t);

/* ---- llvm_jit.c ---- */
/* A target machine for the host CPU (name and features), PIC, LLVMCodeGenLevelAggressive. */
LLVMTargetMachineRef llvm_host_target_machine(char *err, size_t errlen);
/* Set the module's triple and data layout from tm and run "default<O3>". */
bool llvm_optimise(LLVMModuleRef mod, LLVMTargetMachineRef tm, char *err, size_t errlen);

/* ---- llvm_pool.c ---- */
/* A persistent pool of nthreads - 1 worker threads (the caller is the last one) behind an LlvmRt:
 * parallel_for splits [lo, hi) into at most nthreads contiguous chunks, runs the first on the
 * caller, and waits for the rest. nthreads 1 starts no thread and runs the whole range in place.
 * One parallel_for at a time per pool (cg_llvm_run holds its CgLlvm's lock). Returns NULL with a
 * message in err if a thread cannot be started. */
typedef struct LlvmPool LlvmPool;
LlvmPool *llvm_pool_new(int nthreads, char *err, size_t errlen);
LlvmRt *llvm_pool_rt(LlvmPool *pool);
int llvm_pool_nthreads(const LlvmPool *pool);
void llvm_pool_free(LlvmPool *pool); /* joins the workers */

#endif
