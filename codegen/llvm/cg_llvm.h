/* The LLVM CPU backend: kernel IR (codegen/kir.h) → LLVM IR → native code through ORC LLJIT.
 * This header is the backend's public surface and names no LLVM type, so the driver and the tests
 * include it without LLVM's headers. Code generation (llvm_gen.c) and the JIT (llvm_jit.c) share
 * the private header codegen/llvm/llvm_gen.h. Nothing here prints: every error comes back in err.
 */
#ifndef SNN_CG_LLVM_H
#define SNN_CG_LLVM_H

#include "codegen/kir.h"

typedef struct CgLlvm CgLlvm; /* a compiled program: the JIT, its code and its entry point */

/* ---- llvm_jit.c ---- */
/* Compile p for the host CPU (host CPU name and features, "default<O3>"). Returns NULL with LLVM's
 * own message in err. The result holds code only: the runtime session (driver/session_run.h) runs
 * it, or a caller binds p's buffers itself (kir_bind) and calls cg_llvm_entry. */
CgLlvm *cg_llvm_compile(const KProgram *p, char *err, size_t errlen);
/* The same with a cache of compiled code in cache_dir (NULL or "": none; created if missing; the
 * compile cache of codegen/cache.h): the object file is kept under a hash of the unoptimised
 * module, the target (triple, CPU, features) and the LLVM and kernel ABI versions, so a program
 * compiled before loads without optimisation or code generation. A cache that cannot be written
 * is not an error. */
CgLlvm *cg_llvm_compile_cached(const KProgram *p, const char *cache_dir, char *err,
                               size_t errlen);
/* Whether cg's code came from the cache. */
bool cg_llvm_cache_hit(const CgLlvm *cg);
/* SIMD lanes the CPU code runs kernel k's parallel loop in (8), or 0 where it runs one iteration at
 * a time (llvm_gen.c: simd_plan; --explain shows it). */
int cg_llvm_simd_lanes(const Kernel *k);
/* Options for LLVM itself (--llvm-args="-print-after=loop-vectorize ..."), for the whole process:
 * given to LLVMParseCommandLineOptions (whose C API drops its errors: an option LLVM does not
 * know does nothing).
 * They change what is generated, so compiled objects are cached under them. */
bool cg_llvm_set_args(const char *args, char *err, size_t errlen);
void cg_llvm_free(CgLlvm *cg);
/* the compiled program's entry point, the SNNK_ENTRY of runtime/kernel_abi.h (as a model.so's):
 * what the runtime session calls for a --run on the CPU */
void *cg_llvm_entry(const CgLlvm *cg);
/* The generated module as text (--emit=llvm), before or after "default<O3>"; malloc'ed, or NULL
 * with a message in err. */
char *cg_llvm_module_text(const KProgram *p, bool optimised, char *err, size_t errlen);
/* What model.so's object carries besides the code (runtime/session.c reads it). */
typedef struct CgLlvmObjectData {
    const char *meta;        /* snnk_meta: the description (kir_describe), NUL-terminated */
    const void *weights;     /* snnk_weights, snnk_weights_size: safetensors bytes (0: none) */
    size_t weights_len;
    const void *cuda_images; /* snnk_cuda_images, snnk_cuda_images_size: the images the meta's
                              * cuda_image records point into (runtime/cuda_abi.h; 0: none) */
    size_t cuda_images_len;
} CgLlvmObjectData;
/* The program as a relocatable object for model.so (position-independent, for `cpu`: an LLVM CPU
 * name such as "x86-64-v3", or NULL/"native" for the host CPU and its features): the schedule
 * snnk_run (runtime/kernel_abi.h) and the constants of data, every one defined (a byte array of one
 * zero and a size of 0 where there is nothing). Returns false with a message in err. */
/* p alone as an object whose one external symbol is its schedule, named `entry` (the halves of a
 * trainable model.so's training step: snnk_train_fwd, snnk_train_bwd) */
bool cg_llvm_write_entry_object(const KProgram *p, const char *cpu, const char *entry,
                                const char *path, char *err, size_t errlen);
bool cg_llvm_write_object(const KProgram *p, const char *cpu, const CgLlvmObjectData *data,
                          const char *path, char *err, size_t errlen);

/* Tests: widen binary16 weights with integer operations even where the target has F16C (the
 * code targets without it get; codegen/llvm/llvm_gen.c widen16). */
extern bool llvm_gen_soft_f16;

#endif
