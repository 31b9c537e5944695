/* The one compile path (compile.h): lower, then generate, then compile, as far as the job asks. */
#include "driver/compile.h"

#include "codegen/cache.h"
#include "codegen/cuda/cuda_gen.h"
#ifdef SNN_HAVE_LLVM
#include "codegen/llvm/cg_llvm.h"
#endif

#include <stdio.h>
#include <stdlib.h>

Program *
compile(Module *m, const CompileOptions *o, char *err, size_t errlen)
{
    Program *p = xcalloc(1, sizeof *p);
    p->target = o->target;
    p->kir = kir_lower_for(m, o->target);
    if (!p->kir) {
        snprintf(err, errlen, "lowering to the kernel IR failed");
        free(p);
        return NULL;
    }
    if (o->target == KTARGET_GPU && o->stage >= STAGE_SOURCE)
        p->cuda_source = cuda_gen_source(p->kir);
    if (o->target == KTARGET_CPU && o->stage == STAGE_JIT) {
#ifdef SNN_HAVE_LLVM
        char dir[4096];
        p->is_cached = cache_dir_default(dir, sizeof dir)[0] != 0;
        p->cpu = cg_llvm_compile_cached(p->kir, dir, err, errlen);
        if (!p->cpu) {
            program_free(p);
            return NULL;
        }
#else
        snprintf(err, errlen, "this build has no LLVM: the CPU backend is off");
        program_free(p);
        return NULL;
#endif
    }
    return p;
}

void
program_free(Program *p)
{
    if (!p) return;
#ifdef SNN_HAVE_LLVM
    cg_llvm_free(p->cpu);
#endif
    free(p->cuda_source);
    kir_free(p->kir);
    free(p);
}

KProgram *
program_take_kir(Program *p)
{
    KProgram *k = p->kir;
    p->kir = NULL;
    program_free(p);
    return k;
}
