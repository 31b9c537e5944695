/* link.c: building model.so. The generated object (codegen/llvm: snnk_run, the program's
 * description, the weights as safetensors bytes, the CUDA images snnc built) is linked by the
 * system's C compiler driver ($CC, else cc) with the model runtime archive (runtime/CMakeLists.txt:
 * snnrt_model) into a shared library that exports only snn_* (a version script) and needs nothing
 * but libc, libm and libpthread at run time. Everything is made in a temporary directory; only
 * the finished library reaches the output, through rt_write_file's rule. */
#include "driver/link.h"

#include "codegen/llvm/cg_llvm.h"
#include "runtime/tensor_io.h"

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

enum { MAX_ARGS = 32 };

static bool
is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The runtime archive: $SNN_RUNTIME_ARCHIVE, ../lib/snnc/ beside this executable, the build tree. */
static bool
find_runtime(char *path, size_t n)
{
    const char *env = getenv("SNN_RUNTIME_ARCHIVE");
    if (env && *env) {
        snprintf(path, n, "%s", env);
        if (is_file(path)) return true;
        diag_file_error(env, "SNN_RUNTIME_ARCHIVE names no file");
        return false;
    }
    char exe[2048];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(path, n, "%s/../lib/snnc/libsnnrt_model.a", exe);
            if (is_file(path)) return true;
        }
    }
    snprintf(path, n, "%s", SNN_RUNTIME_ARCHIVE);
    if (is_file(path)) return true;
    diag_error((Loc){0}, "cannot find the model runtime (libsnnrt_model.a): set "
                            "SNN_RUNTIME_ARCHIVE, or install it beside snnc in ../lib/snnc/");
    return false;
}

/* The bound weights as safetensors bytes (f32: exactly the values the model computes with). */
static bool
encode_weights(const Module *m, unsigned char **buf, size_t *len)
{
    RtTensor *ts = weights_as_tensors(m);
    char msg[512];
    bool is_ok = rt_safetensors_encode(ts, m->nweights, RT_F32, buf, len, msg, sizeof msg) == 0;
    if (!is_ok) diag_error((Loc){0}, "encoding the weights: %s", msg);
    free(ts);
    return is_ok;
}

/* Run argv, waiting for it; false after reporting if it could not start or failed. */
static bool
run_command(char *const *argv, const char *what)
{
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ);
    if (rc != 0) {
        diag_error((Loc){0}, "%s: cannot run '%s': %s (a C compiler driver links model.so: "
                                "apt-get install gcc, or set CC)", what, argv[0], strerror(rc));
        return false;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            diag_error((Loc){0}, "%s: waiting for '%s': %s", what, argv[0], strerror(errno));
            return false;
        }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
    diag_error((Loc){0}, "%s: '%s' failed (%s %d)", what, argv[0],
               WIFEXITED(status) ? "exit status" : "signal",
               WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    return false;
}

/* the object at path; errors name `library` (the model.so it is made for) when given */
static bool
emit_object(const KProgram *kp, const char *cpu, const LinkCuda *cuda, const LinkTrain *train,
            const char *path, bool embed_weights, const char *library)
{
    const Module *m = kp->m;
    unsigned char *weights = NULL;
    size_t wlen = 0;
    if (embed_weights && !encode_weights(m, &weights, &wlen)) return false;
    bool has_cuda = cuda && cuda->records;
    size_t rlen = (has_cuda ? strlen(cuda->records) : 0) + (train ? strlen(train->records) : 0);
    char *records = xmalloc(rlen + 1);
    snprintf(records, rlen + 1, "%s%s", has_cuda ? cuda->records : "", train ? train->records : "");
    char *meta = kir_describe_with(kp, has_cuda ? "cpu,cuda" : "cpu", records);
    free(records);
    CgLlvmObjectData data = {meta, weights, wlen, has_cuda ? cuda->images : NULL,
                             has_cuda ? cuda->images_len : 0};
    char err[1024];
    bool is_ok = cg_llvm_write_object(kp, cpu, &data, path, err, sizeof err);
    if (!is_ok && library)
        diag_file_error(library, "cannot build it: %s", err);
    else if (!is_ok)
        diag_reader_error(NULL, err);
    free(meta);
    free(weights);
    return is_ok;
}

bool
link_emit_object(const KProgram *kp, const char *cpu, const LinkCuda *cuda, const char *path,
                 bool embed_weights)
{
    return emit_object(kp, cpu, cuda, NULL, path, embed_weights, NULL);
}

/* the training step's parts as objects of their own: snnk_train_fwd, snnk_train_bwd and
 * snnk_train_bwd_in (the kernels only the inputs' gradients need, after the backward) */
static bool
emit_train_objects(const LinkTrain *train, const char *cpu, const char *fwd, const char *bwd,
                   const char *bwd_in, const char *library)
{
    KProgram part = *train->p;
    char err[1024];
    part.nkernels = train->nforward;
    bool is_ok = cg_llvm_write_entry_object(&part, cpu, "snnk_train_fwd", fwd, err, sizeof err);
    if (is_ok) {
        part.kernels = train->p->kernels + train->nforward;
        part.nkernels = train->ninput_first - train->nforward;
        is_ok = cg_llvm_write_entry_object(&part, cpu, "snnk_train_bwd", bwd, err, sizeof err);
    }
    if (is_ok) {
        part.kernels = train->p->kernels + train->ninput_first;
        part.nkernels = train->p->nkernels - train->ninput_first;
        is_ok =
            cg_llvm_write_entry_object(&part, cpu, "snnk_train_bwd_in", bwd_in, err, sizeof err);
    }
    if (!is_ok) diag_file_error(library, "cannot build its training step: %s", err);
    return is_ok;
}

bool
link_shared_library(const KProgram *kp, const char *cpu, const LinkCuda *cuda,
                    const LinkTrain *train, const char *out, bool embed_weights)
{
    char runtime[4096];
    if (!find_runtime(runtime, sizeof runtime)) return false;
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/snnc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        diag_file_error(dir, "cannot make a temporary directory: %s", strerror(errno));
        return false;
    }
    char obj[4200], map[4200], lib[4200], tfwd[4200], tbwd[4200], tbin[4200];
    snprintf(obj, sizeof obj, "%s/model.o", dir);
    snprintf(map, sizeof map, "%s/exports.map", dir);
    snprintf(lib, sizeof lib, "%s/model.so", dir);
    snprintf(tfwd, sizeof tfwd, "%s/train_fwd.o", dir);
    snprintf(tbwd, sizeof tbwd, "%s/train_bwd.o", dir);
    snprintf(tbin, sizeof tbin, "%s/train_bwd_in.o", dir);
    bool is_ok = emit_object(kp, cpu, cuda, train, obj, embed_weights, out);
    if (is_ok && train) is_ok = emit_train_objects(train, cpu, tfwd, tbwd, tbin, out);
    if (is_ok) {
        static const char script[] = "{\n  global: snn_*;\n  local: *;\n};\n";
        char msg[512];
        is_ok = rt_write_file(map, script, sizeof script - 1, msg, sizeof msg) == 0;
        if (!is_ok) diag_file_error(out, "cannot build it: %s", msg);
    }
    if (is_ok) {
        char vs[4300], flags[] = SNN_RUNTIME_LINK_FLAGS;
        snprintf(vs, sizeof vs, "-Wl,--version-script=%s", map);
        const char *cc = getenv("CC");
        char *argv[MAX_ARGS];
        int n = 0;
        argv[n++] = (char *)(cc && *cc ? cc : "cc");
        argv[n++] = "-shared";
        argv[n++] = "-o";
        argv[n++] = lib; /* linked here, then written to out by the one writer */
        argv[n++] = obj;
        if (train) {
            argv[n++] = tfwd;
            argv[n++] = tbwd;
            argv[n++] = tbin;
        }
        argv[n++] = "-Wl,--whole-archive"; /* nothing in the object calls snn_*: keep them all */
        argv[n++] = runtime;
        argv[n++] = "-Wl,--no-whole-archive";
        argv[n++] = "-Wl,--gc-sections";
        argv[n++] = vs;
        argv[n++] = "-Wl,--no-undefined";
        argv[n++] = "-Wl,-z,noexecstack";
        for (char *f = strtok(flags, " "); f && n < MAX_ARGS - 4; f = strtok(NULL, " "))
            argv[n++] = f;
        argv[n++] = "-lm";
        argv[n++] = "-lpthread";
        argv[n] = NULL;
        is_ok = run_command(argv, "linking model.so");
    }
    if (is_ok) {
        unsigned char *bytes = NULL;
        size_t len;
        char msg[1200];
        is_ok = rt_read_file(lib, NULL, &bytes, &len, msg, sizeof msg) == 0 &&
                rt_write_file_flags(out, bytes, len, RT_WRITE_EXEC, msg, sizeof msg) == 0;
        if (!is_ok) diag_reader_error(NULL, msg);
        free(bytes);
    }
    unlink(lib);
    unlink(obj);
    unlink(tfwd);
    unlink(tbwd);
    unlink(tbin);
    unlink(map);
    rmdir(dir);
    return is_ok;
}
