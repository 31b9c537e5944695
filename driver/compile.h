/* compile.h: the pipeline after the passes, in one function: lower a module for a target and, as far
 * as a job needs, generate and compile its code. Every job of snnc goes through it: --run on the
 * kernel-IR evaluator, the CPU and the GPU, --emit=kernel|llvm|cuda|ptx|cubin|obj, model.so and
 * --explain. */
#ifndef SNN_DRIVER_COMPILE_H
#define SNN_DRIVER_COMPILE_H

#include "codegen/kir.h"

typedef enum {
    STAGE_LOWERED, /* the kernel IR (kir_eval, --emit=kernel|llvm, --explain, model.so's CPU code) */
    STAGE_SOURCE,  /* GPU: and its CUDA C (--emit=cuda, the CUDA build) */
    STAGE_JIT,     /* CPU: and its code compiled by LLVM and loaded (--run) */
} CompileStage;

typedef struct CompileOptions {
    KTarget target;
    CompileStage stage;
} CompileOptions;

struct CgLlvm;

typedef struct Program {
    KTarget target;
    KProgram *kir;
    char *cuda_source;  /* GPU, STAGE_SOURCE */
    struct CgLlvm *cpu; /* CPU, STAGE_JIT: refers to kir (buffers, sizes) */
    bool is_cached;     /* STAGE_JIT: a compile-cache directory was in use */
} Program;

/* NULL with err set (and the lowering's own messages reported) when it fails */
Program *compile(Module *m, const CompileOptions *o, char *err, size_t errlen);
void program_free(Program *p);
/* p's kernel IR, now the caller's (p is freed) */
KProgram *program_take_kir(Program *p);

#endif
