/* Private to codegen/llvm: what llvm_gen.c (kernel IR → LLVM module) and llvm_jit.c (target
 * machine, optimisation, ORC LLJIT) share. Includes LLVM's C headers; nothing outside codegen/llvm
 * includes it. */
#ifndef SNN_LLVM_GEN_H
#define SNN_LLVM_GEN_H

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

#include "codegen/kir.h"
#include "runtime/kernel_abi.h"

/* The entry points of a generated module:
 *   void snnk_run(ptr bufs, i64 B, i64 sample_base, ptr rt)      the whole schedule, step loops
 *        (runtime/kernel_abi.h: the contract with the runtime, shared by the JIT and model.so)
 *   void kernel_N(ptr bufs, i64 B, i64 t, i64 sample_base, ptr rt) kernel N of the schedule
 *   void kernel_N.chunk(ptr bufs, i64 B, i64 t, i64 sample_base, i64 lo, i64 hi)
 *        iterations [lo, hi) of kernel N's outermost parallel loop, for kernels whose body is that
 *        loop alone; kernel_N calls rt->parallel_for with it and the loop's bounds
 * bufs[i] is the base address of KProgram.bufs[i], in its element type (KT_BOOL stored as a byte).
 */
#define LLVM_GEN_ENTRY SNNK_ENTRY
typedef SnnkChunkFn LlvmChunkFn;
typedef SnnkRt LlvmRt;
typedef SnnkEntryFn LlvmEntryFn;

/* ---- llvm_gen.c ---- */
/* Build and verify the module of p in ctx, for target machine tm (its features choose how 16-bit
 * weights widen: F16C's conversion where it has one). Returns NULL with a message in err. */
LLVMModuleRef llvm_gen_module(const KProgram *p, LLVMContextRef ctx, LLVMTargetMachineRef tm,
                              char *err, size_t errlen);
/* Bytes one element of a buffer of type t occupies in memory. */
size_t llvm_gen_elem_size(KType t);
/* whether tm's code may use AVX-512 (its features say so; SNN_VEC512=0 says not to): the lanes of
 * lanes loops, the tiles' 512-bit registers (llvm_jit.c) */
bool llvm_gen_has_avx512(LLVMTargetMachineRef tm);

/* ---- llvm_jit.c ---- */
/* A target machine for the host CPU (name and features), PIC, LLVMCodeGenLevelAggressive. */
LLVMTargetMachineRef llvm_host_target_machine(char *err, size_t errlen);
/* The same for a named CPU ("x86-64-v3", "znver4", "generic": its own features); NULL or "native"
 * is the host. */
LLVMTargetMachineRef llvm_target_machine(const char *cpu, char *err, size_t errlen);
/* Set the module's triple and data layout from tm and run "default<O3>". */
bool llvm_optimise(LLVMModuleRef mod, LLVMTargetMachineRef tm, char *err, size_t errlen);

#endif
