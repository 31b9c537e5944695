/* The LLVM backend's driver: host target machine, "default<O3>", ORC LLJIT, and running a compiled
 * program on one batch (buffers bound, KB_TEMP allocated, snn_run called). Every LLVM error is
 * checked where it happens and reported with LLVM's own message; nothing here prints. Must not
 * change what a program computes: that is llvm_gen.c's contract with kir_eval. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <llvm/Config/llvm-config.h>

#include "codegen/llvm/cg_llvm.h"
#include "codegen/llvm/llvm_gen.h"

struct CgLlvm {
    const KProgram *p;
    LLVMOrcLLJITRef jit;
    LlvmEntryFn run;
};

static void
set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Report an LLVMErrorRef (consuming it) as "what: LLVM's message"; returns true if there was one.
 */
static bool
llvm_failed(LLVMErrorRef e, const char *what, char *err, size_t errlen)
{
    if (!e) return false;
    char *msg = LLVMGetErrorMessage(e);
    set_err(err, errlen, "%s: %s", what, msg);
    LLVMDisposeErrorMessage(msg);
    return true;
}

static void
init_native(void)
{
    static bool is_done;
    if (is_done) return;
    LLVMInitializeNativeTarget();
    LLVMInitializeNativeAsmPrinter();
    is_done = true;
}

LLVMTargetMachineRef
llvm_host_target_machine(char *err, size_t errlen)
{
    init_native();
    char *triple = LLVMGetDefaultTargetTriple();
    char *msg = NULL;
    LLVMTargetRef target;
    if (LLVMGetTargetFromTriple(triple, &target, &msg)) {
        set_err(err, errlen, "LLVM target %s: %s", triple, msg ? msg : "?");
        LLVMDisposeMessage(msg);
        LLVMDisposeMessage(triple);
        return NULL;
    }
    char *cpu = LLVMGetHostCPUName(), *features = LLVMGetHostCPUFeatures();
    LLVMTargetMachineRef tm =
        LLVMCreateTargetMachine(target, triple, cpu, features, LLVMCodeGenLevelAggressive,
                                LLVMRelocPIC, LLVMCodeModelJITDefault);
    if (!tm) set_err(err, errlen, "LLVM: cannot create a target machine for %s (%s)", triple, cpu);
    LLVMDisposeMessage(cpu);
    LLVMDisposeMessage(features);
    LLVMDisposeMessage(triple);
    return tm;
}

bool
llvm_optimise(LLVMModuleRef mod, LLVMTargetMachineRef tm, char *err, size_t errlen)
{
    char *triple = LLVMGetTargetMachineTriple(tm);
    LLVMSetTarget(mod, triple);
    LLVMDisposeMessage(triple);
    LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(mod, td);
    LLVMDisposeTargetData(td);
    LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
    LLVMErrorRef e = LLVMRunPasses(mod, "default<O3>", tm, opts);
    LLVMDisposePassBuilderOptions(opts);
    return !llvm_failed(e, "LLVM default<O3>", err, errlen);
}

/* A thread-safe context and its LLVMContext. LLVM 21 removed LLVMOrcThreadSafeContextGetContext:
 * there the context is created first and wrapped. */
static LLVMOrcThreadSafeContextRef
new_context(LLVMContextRef *ctx)
{
#if LLVM_VERSION_MAJOR >= 21
    *ctx = LLVMContextCreate();
    return LLVMOrcCreateNewThreadSafeContextFromLLVMContext(*ctx);
#else
    LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
    *ctx = LLVMOrcThreadSafeContextGetContext(tsc);
    return tsc;
#endif
}

CgLlvm *
cg_llvm_compile(const KProgram *p, char *err, size_t errlen)
{
    LLVMTargetMachineRef tm = llvm_host_target_machine(err, errlen);
    if (!tm) return NULL;
    LLVMContextRef ctx;
    LLVMOrcThreadSafeContextRef tsc = new_context(&ctx);
    LLVMModuleRef mod = llvm_gen_module(p, ctx, err, errlen);
    if (!mod || !llvm_optimise(mod, tm, err, errlen)) {
        if (mod) LLVMDisposeModule(mod);
        LLVMOrcDisposeThreadSafeContext(tsc);
        LLVMDisposeTargetMachine(tm);
        return NULL;
    }

    /* The JIT generates code with the same target machine (it takes ownership of tm). */
    LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
    LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(
        jb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm));
    LLVMOrcLLJITRef jit = NULL;
    if (llvm_failed(LLVMOrcCreateLLJIT(&jit, jb), "LLVM LLJIT", err, errlen)) {
        LLVMDisposeModule(mod);
        LLVMOrcDisposeThreadSafeContext(tsc);
        return NULL;
    }
    CgLlvm *cg = calloc(1, sizeof *cg);
    if (!cg) die("out of memory");
    cg->p = p;
    cg->jit = jit;

    /* expf, logf, tanhf, powf, ... resolve to the process's own libm (the one kir_eval calls) */
    LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(jit);
    LLVMOrcDefinitionGeneratorRef gen = NULL;
    if (llvm_failed(LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
                        &gen, LLVMOrcLLJITGetGlobalPrefix(jit), NULL, NULL),
                    "LLVM process symbols", err, errlen)) {
        LLVMDisposeModule(mod);
        LLVMOrcDisposeThreadSafeContext(tsc);
        cg_llvm_free(cg);
        return NULL;
    }
    LLVMOrcJITDylibAddGenerator(jd, gen);

    /* the module and the context go to the JIT (the module always, even on error) */
    LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(mod, tsc);
    LLVMOrcDisposeThreadSafeContext(tsc);
    if (llvm_failed(LLVMOrcLLJITAddLLVMIRModule(jit, jd, tsm), "LLVM JIT add module", err,
                    errlen)) {
        cg_llvm_free(cg);
        return NULL;
    }
    LLVMOrcExecutorAddress addr = 0;
    if (llvm_failed(LLVMOrcLLJITLookup(jit, &addr, LLVM_GEN_ENTRY), "LLVM JIT", err, errlen)) {
        cg_llvm_free(cg);
        return NULL;
    }
    cg->run = (LlvmEntryFn)(uintptr_t)addr;
    return cg;
}

void
cg_llvm_free(CgLlvm *cg)
{
    if (!cg) return;
    if (cg->jit) {
        LLVMErrorRef e = LLVMOrcDisposeLLJIT(cg->jit);
        if (e) LLVMConsumeError(e);
    }
    free(cg);
}

/* Bind every buffer to memory as kir_eval does: the caller's f32 arrays and the module's weights in
 * place, fresh zeroed KB_TEMP buffers (malloc'ed per call for now). */
bool
cg_llvm_run(CgLlvm *cg, int batch, int64_t sample_base, const float *const *inputs,
            float *const *outputs, char *err, size_t errlen)
{
    const KProgram *p = cg->p;
    const Module *m = p->m;
    if (err && errlen) err[0] = 0;
    if (batch <= 0 || p->timesteps <= 0) return true;
    void **bufs = calloc((size_t)p->nbufs + 1, sizeof *bufs);
    bool *is_owned = calloc((size_t)p->nbufs + 1, sizeof *is_owned);
    if (!bufs || !is_owned) die("out of memory");
    bool is_ok = true;
    for (int i = 0; i < p->nbufs && is_ok; i++) {
        const KBuf *kb = &p->bufs[i];
        int64_t n = kb->size.per_batch * batch + kb->size.fixed;
        if (n < 0) {
            set_err(err, errlen, "buffer '%s': negative size %lld", kb->name, (long long)n);
            is_ok = false;
            break;
        }
        if ((kb->kind == KB_INPUT || kb->kind == KB_OUTPUT) && kb->type != KT_F32) {
            set_err(err, errlen, "caller buffer '%s' is not f32", kb->name);
            is_ok = false;
            break;
        }
        switch (kb->kind) {
        case KB_INPUT:
            if (!m || kb->io < 0 || kb->io >= m->ninputs || !inputs || !inputs[kb->io]) {
                set_err(err, errlen, "buffer '%s': no input %d", kb->name, kb->io);
                is_ok = false;
                break;
            }
            bufs[i] = (void *)inputs[kb->io]; /* read-only: llvm_gen refuses stores to inputs */
            break;
        case KB_OUTPUT:
            if (!m || kb->io < 0 || kb->io >= m->noutputs || !outputs || !outputs[kb->io]) {
                set_err(err, errlen, "buffer '%s': no output %d", kb->name, kb->io);
                is_ok = false;
                break;
            }
            bufs[i] = outputs[kb->io];
            break;
        case KB_WEIGHT:
            if (!m || kb->io < 0 || kb->io >= m->nweights || !m->weights[kb->io].data) {
                set_err(err, errlen, "weight '%s' is not bound", kb->name);
                is_ok = false;
                break;
            }
            if (m->weights[kb->io].numel != n) {
                set_err(err, errlen, "weight '%s' has %lld elements, the program wants %lld",
                        kb->name, (long long)m->weights[kb->io].numel, (long long)n);
                is_ok = false;
                break;
            }
            bufs[i] = m->weights[kb->io].data;
            break;
        case KB_TEMP:
            bufs[i] = calloc(n ? (size_t)n : 1, llvm_gen_elem_size(kb->type));
            if (!bufs[i]) die("out of memory");
            is_owned[i] = true;
            break;
        }
    }
    if (is_ok) cg->run(bufs, batch, sample_base);
    for (int i = 0; i < p->nbufs; i++)
        if (is_owned[i]) free(bufs[i]);
    free(is_owned);
    free(bufs);
    return is_ok;
}

char *
cg_llvm_module_text(const KProgram *p, bool optimised, char *err, size_t errlen)
{
    LLVMTargetMachineRef tm = llvm_host_target_machine(err, errlen);
    if (!tm) return NULL;
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = llvm_gen_module(p, ctx, err, errlen);
    char *text = NULL;
    if (mod && (optimised ? llvm_optimise(mod, tm, err, errlen) : true)) {
        if (!optimised) {
            /* the triple and layout all the same, so the text can be fed to opt/llc */
            char *triple = LLVMGetTargetMachineTriple(tm);
            LLVMSetTarget(mod, triple);
            LLVMDisposeMessage(triple);
            LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
            LLVMSetModuleDataLayout(mod, td);
            LLVMDisposeTargetData(td);
        }
        char *s = LLVMPrintModuleToString(mod);
        text = strdup(s);
        LLVMDisposeMessage(s);
        if (!text) die("out of memory");
    }
    if (mod) LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
    LLVMDisposeTargetMachine(tm);
    return text;
}
