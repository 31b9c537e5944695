/* The LLVM backend's driver: host target machine, "default<O3>", ORC LLJIT and the compiled
 * program's entry point (cg_llvm_entry: what snnc --run hands the runtime session, which binds the
 * buffers and runs the threads as a model.so's). Every LLVM error is checked where it happens and reported with
 * LLVM's own message; nothing here prints. Must not change what a program computes: that is
 * llvm_gen.c's contract with kir_eval. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Support.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <llvm/Config/llvm-config.h>

#include "codegen/cache.h"
#include "codegen/llvm/cg_llvm.h"
#include "codegen/llvm/llvm_gen.h"
#include "runtime/tensor_io.h"

struct CgLlvm {
    LLVMOrcLLJITRef jit;
    LlvmEntryFn run;
    bool is_cache_hit; /* the code came from the cache */
};


/* Report an LLVMErrorRef (consuming it) as "what: LLVM's message"; returns true if there was one.
 */
static bool
llvm_failed(LLVMErrorRef e, const char *what, char *err, size_t errlen)
{
    if (!e) return false;
    char *msg = LLVMGetErrorMessage(e);
    diag_format(err, errlen, "%s: %s", what, msg);
    LLVMDisposeErrorMessage(msg);
    return true;
}

/* --llvm-args, as given: they change what LLVM generates, so they are part of the cache key */
static char llvm_args[1024];

bool
cg_llvm_set_args(const char *args, char *err, size_t errlen)
{
    if (strlen(args) >= sizeof llvm_args) {
        diag_format(err, errlen, "--llvm-args is longer than %zu characters", sizeof llvm_args - 1);
        return false;
    }
    snprintf(llvm_args, sizeof llvm_args, "%s", args);
    char copy[sizeof llvm_args];
    snprintf(copy, sizeof copy, "%s", args);
    const char *argv[64] = {"snnc"};
    int argc = 1;
    for (char *tok = strtok(copy, " \t"); tok; tok = strtok(NULL, " \t")) {
        if (argc == 64) {
            diag_format(err, errlen, "--llvm-args holds more than 63 options");
            return false;
        }
        argv[argc++] = tok;
    }
    /* LLVM's own parser (the C API hides its errors: an option LLVM does not know does nothing) */
    LLVMParseCommandLineOptions(argc, argv, "snnc --llvm-args");
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
    return llvm_target_machine(NULL, err, errlen);
}

LLVMTargetMachineRef
llvm_target_machine(const char *cpu_name, char *err, size_t errlen)
{
    init_native();
    char *triple = LLVMGetDefaultTargetTriple();
    char *msg = NULL;
    LLVMTargetRef target;
    if (LLVMGetTargetFromTriple(triple, &target, &msg)) {
        diag_format(err, errlen, "LLVM target %s: %s", triple, msg ? msg : "?");
        LLVMDisposeMessage(msg);
        LLVMDisposeMessage(triple);
        return NULL;
    }
    bool is_host = !cpu_name || !strcmp(cpu_name, "native");
    char *cpu = is_host ? LLVMGetHostCPUName() : strdup(cpu_name);
    char *features = is_host ? LLVMGetHostCPUFeatures() : strdup("");
    if (!cpu || !features) die("out of memory");
    LLVMTargetMachineRef tm =
        LLVMCreateTargetMachine(target, triple, cpu, features, LLVMCodeGenLevelAggressive,
                                LLVMRelocPIC, LLVMCodeModelJITDefault);
    if (!tm) diag_format(err, errlen, "LLVM: cannot create a target machine for %s (%s)", triple, cpu);
    if (is_host) {
        LLVMDisposeMessage(cpu);
        LLVMDisposeMessage(features);
    } else {
        free(cpu);
        free(features);
    }
    LLVMDisposeMessage(triple);
    return tm;
}

/* On a target with AVX-512, the kernels' tiles (16 floats, 8 doubles) as one 512-bit register
 * each rather than two of 256: LLVM otherwise prefers 256-bit vectors and splits wider types */
static void
wide_vectors(LLVMModuleRef mod, LLVMTargetMachineRef tm)
{
    if (!llvm_gen_has_avx512(tm)) return;
    LLVMContextRef ctx = LLVMGetModuleContext(mod);
    LLVMAttributeRef prefer = LLVMCreateStringAttribute(ctx, "prefer-vector-width", 19, "512", 3);
    LLVMAttributeRef legal = LLVMCreateStringAttribute(ctx, "min-legal-vector-width", 22, "512", 3);
    for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
        if (LLVMIsDeclaration(f)) continue;
        LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, prefer);
        LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, legal);
    }
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
    wide_vectors(mod, tm);
    LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
    LLVMErrorRef e = LLVMRunPasses(mod, "default<O3>", tm, opts);
    LLVMDisposePassBuilderOptions(opts);
    return !llvm_failed(e, "LLVM default<O3>", err, errlen);
}

/* ---- the compiled-code cache (codegen/cache.c) ---- */

/* The key of a module for a target machine: its unoptimised IR, the target (triple, CPU, features),
 * LLVM's version, and the kernel ABI and cache format versions. */
static CacheKey
object_key(LLVMModuleRef mod, LLVMTargetMachineRef tm)
{
    CacheKey k = cache_key_new();
    char *ir = LLVMPrintModuleToString(mod);
    char *triple = LLVMGetTargetMachineTriple(tm), *cpu = LLVMGetTargetMachineCPU(tm);
    char *features = LLVMGetTargetMachineFeatureString(tm);
    char versions[64];
    snprintf(versions, sizeof versions, "llvm %d.%d kernel-abi %d cache 2", LLVM_VERSION_MAJOR,
             LLVM_VERSION_MINOR, SNNK_ABI_VERSION);
    cache_key_str(&k, ir);
    cache_key_str(&k, triple);
    cache_key_str(&k, cpu);
    cache_key_str(&k, features);
    cache_key_str(&k, versions);
    cache_key_str(&k, llvm_args);
    LLVMDisposeMessage(ir);
    LLVMDisposeMessage(triple);
    LLVMDisposeMessage(cpu);
    LLVMDisposeMessage(features);
    return k;
}

/* A cached object, if there is one that looks like an object file (ELF); else NULL. */
static LLVMMemoryBufferRef
object_read(const char *dir, CacheKey k, const char *path)
{
    unsigned char *buf;
    size_t len;
    if (!cache_load(dir, k, "o", &buf, &len)) return NULL;
    LLVMMemoryBufferRef mb = NULL;
    if (len > 64 && !memcmp(buf, "\177ELF", 4))
        mb = LLVMCreateMemoryBufferWithMemoryRangeCopy((const char *)buf, len, path);
    free(buf);
    return mb;
}

CgLlvm *
cg_llvm_compile(const KProgram *p, char *err, size_t errlen)
{
    return cg_llvm_compile_cached(p, NULL, err, errlen);
}

CgLlvm *
cg_llvm_compile_cached(const KProgram *p, const char *cache_dir, char *err, size_t errlen)
{
    LLVMTargetMachineRef tm = llvm_host_target_machine(err, errlen);
    if (!tm) return NULL;
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = llvm_gen_module(p, ctx, tm, err, errlen);
    if (!mod) {
        LLVMContextDispose(ctx);
        LLVMDisposeTargetMachine(tm);
        return NULL;
    }
    /* the object: from the cache, or optimised and generated now (and then cached) */
    char path[4200] = "";
    LLVMMemoryBufferRef obj = NULL;
    CacheKey key = {0, 0};
    if (cache_dir && *cache_dir) {
        key = object_key(mod, tm);
        cache_entry_path(cache_dir, key, "o", path, sizeof path);
        obj = object_read(cache_dir, key, path);
    }
    bool is_hit = obj != NULL;
    if (!obj) {
        char *msg = NULL;
        if (!llvm_optimise(mod, tm, err, errlen) ||
            LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMObjectFile, &msg, &obj)) {
            if (msg) diag_format(err, errlen, "LLVM code generation: %s", msg);
            LLVMDisposeMessage(msg);
            LLVMDisposeModule(mod);
            LLVMContextDispose(ctx);
            LLVMDisposeTargetMachine(tm);
            return NULL;
        }
        /* a cache that cannot be written is no error: the next run compiles again */
        if (path[0])
            cache_store(cache_dir, key, "o", LLVMGetBufferStart(obj), LLVMGetBufferSize(obj));
    }
    LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);

    /* The JIT links the object for the same target machine (it takes ownership of tm). */
    LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
    LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(
        jb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm));
    LLVMOrcLLJITRef jit = NULL;
    if (llvm_failed(LLVMOrcCreateLLJIT(&jit, jb), "LLVM LLJIT", err, errlen)) {
        LLVMDisposeMemoryBuffer(obj);
        return NULL;
    }
    CgLlvm *cg = xcalloc(1, sizeof *cg);
    cg->jit = jit;
    cg->is_cache_hit = is_hit;

    /* exp, log, tanh, pow, ... resolve to the process's own libm (the one kir_eval calls) */
    LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(jit);
    LLVMOrcDefinitionGeneratorRef gen = NULL;
    if (llvm_failed(LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
                        &gen, LLVMOrcLLJITGetGlobalPrefix(jit), NULL, NULL),
                    "LLVM process symbols", err, errlen)) {
        LLVMDisposeMemoryBuffer(obj);
        cg_llvm_free(cg);
        return NULL;
    }
    LLVMOrcJITDylibAddGenerator(jd, gen);
    /* the object goes to the JIT (always, even on error) */
    if (llvm_failed(LLVMOrcLLJITAddObjectFile(jit, jd, obj), "LLVM JIT add object", err,
                    errlen)) {
        cg_llvm_free(cg);
        return NULL;
    }
    LLVMOrcExecutorAddress addr = 0;
    if (llvm_failed(LLVMOrcLLJITLookup(jit, &addr, LLVM_GEN_ENTRY), "LLVM JIT", err, errlen)) {
        if (is_hit)
            snprintf(err + strlen(err), errlen - strlen(err), " (compiled code from the cache: "
                     "delete %s)", path);
        cg_llvm_free(cg);
        return NULL;
    }
    cg->run = (LlvmEntryFn)(uintptr_t)addr;
    return cg;
}

bool
cg_llvm_cache_hit(const CgLlvm *cg)
{
    return cg->is_cache_hit;
}

void *
cg_llvm_entry(const CgLlvm *cg)
{
    return (void *)(uintptr_t)cg->run;
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

char *
cg_llvm_module_text(const KProgram *p, bool optimised, char *err, size_t errlen)
{
    LLVMTargetMachineRef tm = llvm_host_target_machine(err, errlen);
    if (!tm) return NULL;
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = llvm_gen_module(p, ctx, tm, err, errlen);
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
        text = xstrdup(s);
        LLVMDisposeMessage(s);
    }
    if (mod) LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
    LLVMDisposeTargetMachine(tm);
    return text;
}

/* a constant global byte array `name` holding data (external linkage: the runtime refers to it) */
static void
add_bytes(LLVMModuleRef mod, const char *name, const void *data, size_t len, unsigned align)
{
    LLVMContextRef ctx = LLVMGetModuleContext(mod);
    LLVMValueRef init = LLVMConstStringInContext(ctx, data, (unsigned)len, 1);
    LLVMValueRef g = LLVMAddGlobal(mod, LLVMTypeOf(init), name);
    LLVMSetInitializer(g, init);
    LLVMSetGlobalConstant(g, 1);
    LLVMSetAlignment(g, align);
}

/* a constant uint64_t global `name` */
static void
add_u64(LLVMModuleRef mod, const char *name, uint64_t v)
{
    LLVMTypeRef i64 = LLVMInt64TypeInContext(LLVMGetModuleContext(mod));
    LLVMValueRef g = LLVMAddGlobal(mod, i64, name);
    LLVMSetInitializer(g, LLVMConstInt(i64, v, 0));
    LLVMSetGlobalConstant(g, 1);
}

/* mod as an object file at path: into memory, then through the one writer (LLVM's own file output
 * aborts the process on a write error: "LLVM ERROR: IO failure on output stream") */
static bool
write_object_file(LLVMTargetMachineRef tm, LLVMModuleRef mod, const char *path, char *err,
                  size_t errlen)
{
    char *msg = NULL;
    LLVMMemoryBufferRef obj = NULL;
    bool is_ok;
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMObjectFile, &msg, &obj)) {
        diag_format(err, errlen, "LLVM: cannot make the object file: %s", msg ? msg : "?");
        is_ok = false;
    } else {
        is_ok =
            rt_write_file(path, LLVMGetBufferStart(obj), LLVMGetBufferSize(obj), err, errlen) == 0;
        LLVMDisposeMemoryBuffer(obj);
    }
    LLVMDisposeMessage(msg);
    return is_ok;
}

bool
cg_llvm_write_entry_object(const KProgram *p, const char *cpu, const char *entry, const char *path,
                           char *err, size_t errlen)
{
    LLVMTargetMachineRef tm = llvm_target_machine(cpu, err, errlen);
    if (!tm) return false;
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = llvm_gen_module(p, ctx, tm, err, errlen);
    bool is_ok = mod != NULL;
    if (is_ok) {
        /* the entry renamed; everything else internal, so that several such objects link into
         * one library */
        LLVMValueRef f = LLVMGetNamedFunction(mod, LLVM_GEN_ENTRY);
        for (LLVMValueRef g = LLVMGetFirstFunction(mod); g; g = LLVMGetNextFunction(g))
            if (g != f && !LLVMIsDeclaration(g)) LLVMSetLinkage(g, LLVMInternalLinkage);
        for (LLVMValueRef g = LLVMGetFirstGlobal(mod); g; g = LLVMGetNextGlobal(g))
            if (!LLVMIsDeclaration(g)) LLVMSetLinkage(g, LLVMInternalLinkage);
        if (f) LLVMSetValueName2(f, entry, strlen(entry));
        is_ok = f != NULL && llvm_optimise(mod, tm, err, errlen);
        if (!f) diag_format(err, errlen, "LLVM: the program has no entry point");
    }
    if (is_ok) is_ok = write_object_file(tm, mod, path, err, errlen);
    if (mod) LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
    LLVMDisposeTargetMachine(tm);
    return is_ok;
}

bool
cg_llvm_write_object(const KProgram *p, const char *cpu, const CgLlvmObjectData *data,
                     const char *path, char *err, size_t errlen)
{
    const char *meta = data->meta;
    const void *weights = data->weights;
    size_t weights_len = data->weights_len;
    if (weights_len >= (size_t)1 << 32) {
        diag_format(err, errlen, "the weights take %zu bytes; at most 4 GiB can be embedded (use "
                "--no-embed-weights)", weights_len);
        return false;
    }
    if (data->cuda_images_len >= (size_t)1 << 32) {
        diag_format(err, errlen, "the CUDA images take %zu bytes; at most 4 GiB can be embedded",
                data->cuda_images_len);
        return false;
    }
    LLVMTargetMachineRef tm = llvm_target_machine(cpu, err, errlen);
    if (!tm) return false;
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = llvm_gen_module(p, ctx, tm, err, errlen);
    bool is_ok = mod != NULL;
    if (is_ok) {
        add_bytes(mod, "snnk_meta", meta, strlen(meta) + 1, 1);
        static const unsigned char none = 0;
        add_bytes(mod, "snnk_weights", weights_len ? weights : &none, weights_len ? weights_len : 1,
                  64);
        add_u64(mod, "snnk_weights_size", weights_len);
        size_t clen = data->cuda_images_len;
        add_bytes(mod, "snnk_cuda_images", clen ? data->cuda_images : &none, clen ? clen : 1, 64);
        add_u64(mod, "snnk_cuda_images_size", clen);
        is_ok = llvm_optimise(mod, tm, err, errlen);
    }
    if (is_ok) is_ok = write_object_file(tm, mod, path, err, errlen);
    if (mod) LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
    LLVMDisposeTargetMachine(tm);
    return is_ok;
}
