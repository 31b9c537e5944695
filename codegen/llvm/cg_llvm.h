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
/* Compile p for the host CPU (host CPU name and features, "default<O3>"). p must outlive the result
 * (cg_llvm_run reads its buffers and weights). Returns NULL with LLVM's own message in err. */
CgLlvm *cg_llvm_compile(const KProgram *p, char *err, size_t errlen);
/* Same calling convention as kir_eval and interp_run: one batch, sample-major inputs and outputs,
 * sample_base the global index of the batch's first sample; caller buffers must be f32 and weights
 * bound, as for kir_eval. The KB_TEMP buffers are calloc'ed and freed on each call for now (a
 * per-session arena comes with threading), so concurrent calls on one CgLlvm are safe. Indices are
 * not checked. */
bool cg_llvm_run(CgLlvm *cg, int batch, int64_t sample_base, const float *const *inputs,
                 float *const *outputs, char *err, size_t errlen);
void cg_llvm_free(CgLlvm *cg);
/* The generated module as text (--emit=llvm), before or after "default<O3>"; malloc'ed, or NULL
 * with a message in err. */
char *cg_llvm_module_text(const KProgram *p, bool optimised, char *err, size_t errlen);

#endif
