/* cuemu_nvrtc.c: libsnn_cuemu's NVRTC (see cuemu.h): checks the options as NVRTC 13 does, compiles
 * the program as C++ with the host compiler and -DSNN_CUDA_EMULATE in a private temporary
 * directory, and hands the shared object back as "PTX" (base64 text) and "CUBIN" (itself). It
 * never loads or runs what it compiles (cuemu_driver.c does). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/cuda_emu/cuemu.h"

extern char **environ; /* POSIX: the application declares it */

struct _nvrtcProgram {
    struct _nvrtcProgram *next; /* in `programs`, the live ones */
    char *src, *name;
    int nheaders;
    char **headers, **include_names;
    char *log; /* NUL-terminated; NULL: empty */
    bool is_compiled;
    CuemuArch arch;
    char arch_name[24];
    unsigned char *so; /* the compiled shared object: the CUBIN */
    size_t so_size;
    char *ptx; /* the PTX image, NUL-terminated */
};

static pthread_mutex_t programs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct _nvrtcProgram *programs;

/* the architectures NVRTC 13.0 accepts (nvrtc.h; checked against libnvrtc 13.0): 'a' exists for 90
 * and from 100 on, 'f' from 100 on */
static const int supported_cc[] = {75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121};

bool
cuemu_parse_arch(const char *s, CuemuArch *out)
{
    CuemuArch a = {0, 0, false};
    if (strncmp(s, "sm_", 3) == 0)
        s += 3;
    else if (strncmp(s, "compute_", 8) == 0) {
        s += 8;
        a.is_virtual = true;
    }
    if (*s < '1' || *s > '9') return false;
    while (*s >= '0' && *s <= '9' && a.cc < 10000)
        a.cc = a.cc * 10 + (*s++ - '0');
    if (*s == 'a' || *s == 'f') a.suffix = *s++;
    if (*s || a.cc < 10 || a.cc >= 10000) return false;
    *out = a;
    return true;
}

bool
cuemu_arch_runs_on(const CuemuArch *code, int cc)
{
    if (code->suffix == 'a') return code->cc == cc;
    if (code->suffix == 'f') return code->cc / 10 == cc / 10 && cc >= code->cc;
    return code->is_virtual ? cc >= code->cc : cc == code->cc;
}

static bool
is_supported_arch(const CuemuArch *a)
{
    bool is_known = false;
    for (size_t i = 0; i < sizeof supported_cc / sizeof *supported_cc; i++)
        is_known |= supported_cc[i] == a->cc;
    if (!is_known) return false;
    if (a->suffix == 'a') return a->cc == 90 || a->cc >= 100;
    if (a->suffix == 'f') return a->cc >= 100;
    return true;
}

const char *
nvrtcGetErrorString(nvrtcResult result)
{
    switch (result) {
#define CASE(name, value)                                                                          \
    case name:                                                                                     \
        return #name;
        CUEMU_NVRTC_RESULTS(CASE)
#undef CASE
    }
    return "NVRTC_ERROR unknown";
}

nvrtcResult
nvrtcVersion(int *major, int *minor)
{
    if (!major || !minor) return NVRTC_ERROR_INVALID_INPUT;
    *major = 13;
    *minor = 0;
    return NVRTC_SUCCESS;
}

/* a copy of s, or NULL if out of memory */
static char *
dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static void
free_program(struct _nvrtcProgram *p)
{
    for (int i = 0; i < p->nheaders; i++) {
        free(p->headers[i]);
        free(p->include_names[i]);
    }
    free(p->headers);
    free(p->include_names);
    free(p->src);
    free(p->name);
    free(p->log);
    free(p->so);
    free(p->ptx);
    free(p);
}

/* is p a live program? (the caller holds programs_mu) */
static bool
is_live(nvrtcProgram p)
{
    for (struct _nvrtcProgram *q = programs; q; q = q->next)
        if (q == p) return true;
    return false;
}

nvrtcResult
nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int numHeaders,
                   const char *const *headers, const char *const *includeNames)
{
    if (!prog || !src || numHeaders < 0 || (numHeaders > 0 && (!headers || !includeNames)))
        return NVRTC_ERROR_INVALID_INPUT;
    for (int i = 0; i < numHeaders; i++)
        if (!headers[i] || !includeNames[i]) return NVRTC_ERROR_INVALID_INPUT;
    struct _nvrtcProgram *p = calloc(1, sizeof *p);
    if (!p) return NVRTC_ERROR_OUT_OF_MEMORY;
    p->src = dup_str(src);
    p->name = dup_str(name ? name : "default_program");
    p->headers = calloc((size_t)numHeaders + 1, sizeof *p->headers);
    p->include_names = calloc((size_t)numHeaders + 1, sizeof *p->include_names);
    bool is_ok = p->src && p->name && p->headers && p->include_names;
    for (int i = 0; is_ok && i < numHeaders; i++) {
        p->headers[i] = dup_str(headers[i]);
        p->include_names[i] = dup_str(includeNames[i]);
        p->nheaders = i + 1;
        is_ok = p->headers[i] && p->include_names[i];
    }
    if (!is_ok) {
        free_program(p);
        return NVRTC_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&programs_mu);
    p->next = programs;
    programs = p;
    pthread_mutex_unlock(&programs_mu);
    *prog = p;
    return NVRTC_SUCCESS;
}

nvrtcResult
nvrtcDestroyProgram(nvrtcProgram *prog)
{
    if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
    pthread_mutex_lock(&programs_mu);
    struct _nvrtcProgram **pp = &programs;
    while (*pp && *pp != *prog)
        pp = &(*pp)->next;
    struct _nvrtcProgram *p = *pp;
    if (p) *pp = p->next;
    pthread_mutex_unlock(&programs_mu);
    if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
    free_program(p);
    *prog = NULL;
    return NVRTC_SUCCESS;
}

/* A growing argv for the compiler. */
typedef struct Argv {
    char **v;
    int n, cap;
    bool has_failed; /* out of memory */
} Argv;

static void
argv_add(Argv *a, const char *s)
{
    if (a->has_failed) return;
    if (a->n + 2 > a->cap) {
        int cap = a->cap ? 2 * a->cap : 32;
        char **v = realloc(a->v, (size_t)cap * sizeof *v);
        if (!v) {
            a->has_failed = true;
            return;
        }
        a->v = v;
        a->cap = cap;
    }
    if (!(a->v[a->n] = dup_str(s))) {
        a->has_failed = true;
        return;
    }
    a->v[++a->n] = NULL;
}

static void
argv_addf(Argv *a, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf)
        a->has_failed = true;
    else
        argv_add(a, buf);
}

/* the words of s, split at spaces (for $SNN_CUEMU_CXX="ccache c++" and $SNN_CUEMU_CXXFLAGS) */
static void
argv_add_words(Argv *a, const char *s)
{
    while (*s) {
        while (*s == ' ' || *s == '\t')
            s++;
        size_t n = strcspn(s, " \t");
        if (n == 0) break;
        char word[1024];
        if (n >= sizeof word) {
            a->has_failed = true;
            return;
        }
        memcpy(word, s, n);
        word[n] = 0;
        argv_add(a, word);
        s += n;
    }
}

static void
argv_free(Argv *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->v[i]);
    free(a->v);
}

/* NVRTC's options: FLAG stands alone; BOOL takes =true or =false; VALUE takes =X, or X as the next
 * option (and, for the single-letter -D -U -I, directly after the letter). The handful that change
 * the host compile are marked with what they become. */
typedef enum OptKind { OPT_FLAG, OPT_BOOL, OPT_VALUE } OptKind;
typedef enum OptUse {
    USE_NONE,
    USE_ARCH,
    USE_DEFINE,
    USE_UNDEFINE,
    USE_INCLUDE_PATH,
    USE_PRE_INCLUDE,
    USE_STD,
    USE_FMAD
} OptUse;
typedef struct Opt {
    const char *long_name, *short_name;
    OptKind kind;
    OptUse use;
} Opt;

static const Opt nvrtc_options[] = {
    {"--gpu-architecture", "-arch", OPT_VALUE, USE_ARCH},
    {"--define-macro", "-D", OPT_VALUE, USE_DEFINE},
    {"--undefine-macro", "-U", OPT_VALUE, USE_UNDEFINE},
    {"--include-path", "-I", OPT_VALUE, USE_INCLUDE_PATH},
    {"--pre-include", "-include", OPT_VALUE, USE_PRE_INCLUDE},
    {"--std", "-std", OPT_VALUE, USE_STD},
    {"--fmad", "-fmad", OPT_BOOL, USE_FMAD},
    {"--ftz", "-ftz", OPT_BOOL, USE_NONE},
    {"--prec-sqrt", "-prec-sqrt", OPT_BOOL, USE_NONE},
    {"--prec-div", "-prec-div", OPT_BOOL, USE_NONE},
    {"--use_fast_math", "-use_fast_math", OPT_FLAG, USE_NONE},
    {"--generate-line-info", "-lineinfo", OPT_FLAG, USE_NONE},
    {"--device-debug", "-G", OPT_FLAG, USE_NONE},
    {"--dopt", "-dopt", OPT_VALUE, USE_NONE},
    {"--Ofast-compile", "-Ofc", OPT_VALUE, USE_NONE},
    {"--ptxas-options", "-Xptxas", OPT_VALUE, USE_NONE},
    {"--maxrregcount", "-maxrregcount", OPT_VALUE, USE_NONE},
    {"--relocatable-device-code", "-rdc", OPT_BOOL, USE_NONE},
    {"--device-c", "-dc", OPT_FLAG, USE_NONE},
    {"--device-w", "-dw", OPT_FLAG, USE_NONE},
    {"--extensible-whole-program", "-ewp", OPT_FLAG, USE_NONE},
    {"--extra-device-vectorization", "-extra-device-vectorization", OPT_FLAG, USE_NONE},
    {"--modify-stack-limit", "-modify-stack-limit", OPT_BOOL, USE_NONE},
    {"--dlink-time-opt", "-dlto", OPT_FLAG, USE_NONE},
    {"--gen-opt-lto", "-gen-opt-lto", OPT_FLAG, USE_NONE},
    {"--optix-ir", "-optix-ir", OPT_FLAG, USE_NONE},
    {"--jump-table-density", "-jtd", OPT_VALUE, USE_NONE},
    {"--device-stack-protector", "-device-stack-protector", OPT_BOOL, USE_NONE},
    {"--no-cache", "-no-cache", OPT_FLAG, USE_NONE},
    {"--frandom-seed", "-frandom-seed", OPT_VALUE, USE_NONE},
    {"--no-source-include", "-no-source-include", OPT_FLAG, USE_NONE},
    {"--builtin-move-forward", "-builtin-move-forward", OPT_BOOL, USE_NONE},
    {"--builtin-initializer-list", "-builtin-initializer-list", OPT_BOOL, USE_NONE},
    {"--pch", "-pch", OPT_FLAG, USE_NONE},
    {"--create-pch", "-create-pch", OPT_VALUE, USE_NONE},
    {"--use-pch", "-use-pch", OPT_VALUE, USE_NONE},
    {"--pch-dir", "-pch-dir", OPT_VALUE, USE_NONE},
    {"--pch-verbose", "-pch-verbose", OPT_BOOL, USE_NONE},
    {"--pch-messages", "-pch-messages", OPT_BOOL, USE_NONE},
    {"--instantiate-templates-in-pch", "-instantiate-templates-in-pch", OPT_BOOL, USE_NONE},
    {"--disable-warnings", "-w", OPT_FLAG, USE_NONE},
    {"--restrict", "-restrict", OPT_FLAG, USE_NONE},
    {"--device-as-default-execution-space", "-default-device", OPT_FLAG, USE_NONE},
    {"--device-int128", "-device-int128", OPT_FLAG, USE_NONE},
    {"--device-float128", "-device-float128", OPT_FLAG, USE_NONE},
    {"--optimization-info", "-opt-info", OPT_VALUE, USE_NONE},
    {"--display-error-number", "-err-no", OPT_FLAG, USE_NONE},
    {"--no-display-error-number", "-no-err-no", OPT_FLAG, USE_NONE},
    {"--diag-error", "-diag-error", OPT_VALUE, USE_NONE},
    {"--diag-suppress", "-diag-suppress", OPT_VALUE, USE_NONE},
    {"--diag-warn", "-diag-warn", OPT_VALUE, USE_NONE},
    {"--brief-diagnostics", "-brief-diag", OPT_BOOL, USE_NONE},
    {"--time", "-time", OPT_VALUE, USE_NONE},
    {"--split-compile", "-split-compile", OPT_VALUE, USE_NONE},
    {"--fdevice-syntax-only", "-fdevice-syntax-only", OPT_FLAG, USE_NONE},
    {"--minimal", "-minimal", OPT_FLAG, USE_NONE},
    {"--fdevice-time-trace", "-fdevice-time-trace", OPT_VALUE, USE_NONE},
};

/* Compile options turned into what the host compile needs; `error` holds NVRTC's message for a
 * bad option. */
typedef struct Options {
    Argv extra; /* -D, -U, -I, -include, -std, -ffp-contract for the compiler */
    bool has_arch;
    CuemuArch arch;
    char arch_name[24];
    char error[512];
} Options;

/* the option table entry `s` names, and where its value starts (NULL if none in s) */
static const Opt *
find_option(const char *s, const char **value)
{
    *value = NULL;
    for (size_t i = 0; i < sizeof nvrtc_options / sizeof *nvrtc_options; i++) {
        const Opt *o = &nvrtc_options[i];
        const char *names[2] = {o->long_name, o->short_name};
        for (int k = 0; k < 2; k++) {
            size_t n = strlen(names[k]);
            if (strncmp(s, names[k], n) != 0) continue;
            if (s[n] == 0) return o;
            if (s[n] == '=' && o->kind != OPT_FLAG) {
                *value = s + n + 1;
                return o;
            }
            /* -DNAME, -UNAME, -IDIR */
            if (k == 1 && n == 2 &&
                (o->use == USE_DEFINE || o->use == USE_UNDEFINE || o->use == USE_INCLUDE_PATH)) {
                *value = s + n;
                return o;
            }
        }
    }
    return NULL;
}

/* apply option o with value v; false (and opts->error) if NVRTC would refuse it */
static bool
apply_option(Options *opts, const Opt *o, const char *v)
{
    switch (o->use) {
    case USE_ARCH: {
        CuemuArch a;
        bool is_named = strncmp(v, "sm_", 3) == 0 || strncmp(v, "compute_", 8) == 0;
        if (!is_named || !cuemu_parse_arch(v, &a) || !is_supported_arch(&a) ||
            strlen(v) >= sizeof opts->arch_name) {
            snprintf(opts->error, sizeof opts->error,
                     "nvrtc: error: invalid value for --gpu-architecture (-arch)\n");
            return false;
        }
        opts->has_arch = true;
        opts->arch = a;
        strcpy(opts->arch_name, v);
        return true;
    }
    case USE_DEFINE:
        argv_addf(&opts->extra, "-D%s", v);
        return true;
    case USE_UNDEFINE:
        argv_addf(&opts->extra, "-U%s", v);
        return true;
    case USE_INCLUDE_PATH:
        argv_addf(&opts->extra, "-I%s", v);
        return true;
    case USE_PRE_INCLUDE:
        argv_add(&opts->extra, "-include");
        argv_add(&opts->extra, v);
        return true;
    case USE_STD:
        if (strcmp(v, "c++03") != 0 && strcmp(v, "c++11") != 0 && strcmp(v, "c++14") != 0 &&
            strcmp(v, "c++17") != 0 && strcmp(v, "c++20") != 0) {
            snprintf(opts->error, sizeof opts->error,
                     "nvrtc: error: invalid value for --std (-std)\n");
            return false;
        }
        argv_addf(&opts->extra, "-std=%s", v);
        return true;
    case USE_FMAD:
        /* a*b+c rounded twice (--fmad=false): the host compiler must not contract it either */
        if (strcmp(v, "false") == 0) argv_add(&opts->extra, "-ffp-contract=off");
        return true;
    case USE_NONE:
        return true;
    }
    return true;
}

static bool
parse_options(Options *opts, int n, const char *const *options)
{
    for (int i = 0; i < n; i++) {
        const char *s = options[i];
        if (!s) {
            snprintf(opts->error, sizeof opts->error, "nvrtc: error: null option\n");
            return false;
        }
        const char *v;
        const Opt *o = find_option(s, &v);
        if (!o) {
            snprintf(opts->error, sizeof opts->error,
                     "nvrtc: error: unrecognized option %s found\n", s);
            return false;
        }
        if (o->kind != OPT_FLAG && !v) {
            if (i + 1 == n) {
                snprintf(opts->error, sizeof opts->error,
                         "nvrtc: error: invalid value for %s (%s)\n", o->long_name, o->short_name);
                return false;
            }
            v = options[++i];
        }
        if (o->kind == OPT_BOOL && strcmp(v, "true") != 0 && strcmp(v, "false") != 0) {
            snprintf(opts->error, sizeof opts->error,
                     "nvrtc: error: %s (%s) expects true or false\n", o->long_name, o->short_name);
            return false;
        }
        if (!apply_option(opts, o, v)) return false;
    }
    if (!opts->has_arch) {
        snprintf(opts->error, sizeof opts->error,
                 "snn_cuemu: error: no --gpu-architecture (-arch) option (NVRTC would default to "
                 "compute_75; snnc always names the architecture)\n");
        return false;
    }
    return true;
}

/* name, made into a plain file name for the source (NVRTC's log names the program so) */
static void
file_name(char *out, size_t size, const char *name)
{
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    size_t n = 0;
    for (; base[n] && n + 1 < size; n++) {
        char c = base[n];
        bool is_plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' || c == '+';
        out[n] = is_plain ? c : '_';
    }
    out[n] = 0;
    if (n == 0 || strcmp(out, ".") == 0 || strcmp(out, "..") == 0)
        snprintf(out, size, "default_program");
}

static bool
write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool is_ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && is_ok;
}

/* the whole file at path, malloc'ed, NUL-terminated; NULL on failure */
static unsigned char *
read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 1 >= cap) {
            cap = cap ? 2 * cap : 65536;
            unsigned char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = b;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    bool is_ok = !ferror(f);
    fclose(f);
    if (!is_ok) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *size = n;
    return buf;
}

/* out = dir/rel, in a buffer of 4096 bytes; false if it does not fit */
static bool
path_join(char out[4096], const char *dir, const char *rel)
{
    int n = snprintf(out, 4096, "%s/%s", dir, rel);
    return n >= 0 && n < 4096;
}

/* mkdir -p for the directories of dir/rel (a header's include name) */
static bool
make_parents(const char *dir, const char *rel)
{
    char path[4096];
    if (!path_join(path, dir, rel)) return false;
    for (char *p = path + strlen(dir) + 1; (p = strchr(p, '/')); p++) {
        *p = 0;
        if (mkdir(path, 0700) != 0 && errno != EEXIST) return false;
        *p = '/';
    }
    return true;
}

static int
remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    remove(path);
    return 0;
}

/* the log `out` with every "dir/src/" and "dir/inc/" removed, so that it names files as NVRTC's
 * does (by program and include name) */
static char *
clean_log(const char *out, const char *dir)
{
    char *log = malloc(strlen(out) + 1);
    if (!log) return NULL;
    size_t ndir = strlen(dir), k = 0;
    for (const char *p = out; *p;) {
        if (strncmp(p, dir, ndir) == 0 &&
            (strncmp(p + ndir, "/src/", 5) == 0 || strncmp(p + ndir, "/inc/", 5) == 0)) {
            p += ndir + 5;
            continue;
        }
        log[k++] = *p++;
    }
    log[k] = 0;
    return log;
}

static void
set_log(struct _nvrtcProgram *p, const char *msg)
{
    free(p->log);
    p->log = dup_str(msg);
}

/* run argv with stdin from /dev/null and stdout and stderr to log_path; its exit status, or -1 (and
 * errno) if it could not be started */
static int
run_compiler(char *const *argv, const char *log_path)
{
    posix_spawn_file_actions_t fa;
    if (posix_spawn_file_actions_init(&fa) != 0) return -1;
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    /* the environment without LD_PRELOAD: a sanitizer runtime preloaded into the test process
     * must not check (and fail) the compiler */
    size_t nenv = 0;
    while (environ[nenv])
        nenv++;
    char **env = malloc((nenv + 1) * sizeof *env);
    if (!env) {
        posix_spawn_file_actions_destroy(&fa);
        errno = ENOMEM;
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < nenv; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0) env[k++] = environ[i];
    env[k] = NULL;
    pid_t pid;
    int err = posix_spawnp(&pid, argv[0], &fa, NULL, argv, env);
    free(env);
    posix_spawn_file_actions_destroy(&fa);
    if (err != 0) {
        errno = err;
        return -1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* The PTX image of shared object so (cuemu.h): NVRTC's PTX is for the virtual architecture of
 * the compile's, compute_XY. NULL if out of memory. */
static char *
make_ptx(const unsigned char *so, size_t size, const char *arch_name)
{
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char head[512];
    int nhead =
        snprintf(head, sizeof head,
                 "%s%d compute_%s %zu\n"
                 "// Not PTX: the NVRTC of tests/cuda_emu compiled this program for the CPU,\n"
                 "// into the shared object below (base64), which its driver loads.\n",
                 CUEMU_PTX_MAGIC, CUEMU_IMAGE_VERSION, strchr(arch_name, '_') + 1, size);
    size_t nchars = (size + 2) / 3 * 4, nlines = (nchars + 75) / 76;
    char *ptx = malloc((size_t)nhead + nchars + nlines + 1);
    if (!ptx) return NULL;
    memcpy(ptx, head, (size_t)nhead);
    char *o = ptx + nhead;
    size_t col = 0;
    for (size_t i = 0; i < size; i += 3) {
        unsigned long v = (unsigned long)so[i] << 16;
        if (i + 1 < size) v |= (unsigned long)so[i + 1] << 8;
        if (i + 2 < size) v |= so[i + 2];
        *o++ = digits[v >> 18 & 63];
        *o++ = digits[v >> 12 & 63];
        *o++ = i + 1 < size ? digits[v >> 6 & 63] : '=';
        *o++ = i + 2 < size ? digits[v & 63] : '=';
        if ((col += 4) == 76 || i + 3 >= size) {
            *o++ = '\n';
            col = 0;
        }
    }
    *o = 0;
    return ptx;
}

/* compile p->src in dir (which exists and is empty) with the options in opts: the shared object
 * into p->so, the compiler's output into p->log */
static nvrtcResult
compile_in(struct _nvrtcProgram *p, const char *dir, Options *opts)
{
    char src_dir[4096], inc_dir[4096], src[4096], so[4096], log_path[4096], name[256];
    file_name(name, sizeof name, p->name);
    bool is_ok = path_join(src_dir, dir, "src") && path_join(inc_dir, dir, "inc") &&
                 path_join(src, src_dir, name) && path_join(so, dir, "kernel.so") &&
                 path_join(log_path, dir, "log");
    if (!is_ok || mkdir(src_dir, 0700) != 0 || mkdir(inc_dir, 0700) != 0 ||
        !write_file(src, p->src, strlen(p->src))) {
        set_log(p, "snn_cuemu: error: cannot write the source to the temporary directory\n");
        return NVRTC_ERROR_INTERNAL_ERROR;
    }
    for (int i = 0; i < p->nheaders; i++) {
        const char *inc = p->include_names[i];
        char path[4096];
        if (inc[0] == '/' || strstr(inc, "..") || !make_parents(inc_dir, inc) ||
            !path_join(path, inc_dir, inc) ||
            !write_file(path, p->headers[i], strlen(p->headers[i]))) {
            set_log(p, "snn_cuemu: error: cannot write a header (an include name must be a "
                       "relative path without '..')\n");
            return NVRTC_ERROR_INVALID_INPUT;
        }
    }

    /* the cubin's architecture, in the shared object */
    char tag_path[4096], tag[256];
    snprintf(
        tag, sizeof tag,
        "extern \"C\" __attribute__((visibility(\"default\"))) const char snn_cuemu_cubin_tag[] "
        "= \"%s%d sm_%s\";\n",
        CUEMU_CUBIN_TAG, CUEMU_IMAGE_VERSION, strchr(opts->arch_name, '_') + 1);
    if (!path_join(tag_path, dir, "snn_cuemu_tag.h") || !write_file(tag_path, tag, strlen(tag))) {
        set_log(p, "snn_cuemu: error: cannot write to the temporary directory\n");
        return NVRTC_ERROR_INTERNAL_ERROR;
    }

    Argv a = {0};
    const char *cxx = getenv("SNN_CUEMU_CXX");
    argv_add_words(&a, cxx && *cxx ? cxx : "c++");
    argv_add(&a, "-std=c++17");
    argv_add(&a, "-O1");
    argv_add(&a, "-fPIC");
    argv_add(&a, "-shared");
    argv_add(&a, "-DSNN_CUDA_EMULATE");
    argv_addf(&a, "-I%s", inc_dir);
    for (int i = 0; i < opts->extra.n; i++)
        argv_add(&a, opts->extra.v[i]);
    const char *flags = getenv("SNN_CUEMU_CXXFLAGS");
    if (flags) argv_add_words(&a, flags);
    argv_add(&a, "-include");
    argv_add(&a, tag_path);
    argv_add(&a, "-x");
    argv_add(&a, "c++");
    argv_add(&a, src);
    argv_add(&a, "-o");
    argv_add(&a, so);
    if (a.has_failed || a.n == 0) {
        argv_free(&a);
        set_log(p, "snn_cuemu: error: out of memory (or an option too long)\n");
        return NVRTC_ERROR_OUT_OF_MEMORY;
    }
    int status = run_compiler(a.v, log_path);
    int err = errno;
    size_t nout = 0;
    unsigned char *out = read_file(log_path, &nout);
    free(p->log);
    p->log = clean_log(out ? (const char *)out : "", dir);
    free(out);
    if (status < 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "snn_cuemu: error: cannot run %s: %s\n", a.v[0], strerror(err));
        argv_free(&a);
        set_log(p, msg);
        return NVRTC_ERROR_INTERNAL_ERROR;
    }
    argv_free(&a);
    if (status != 0) return NVRTC_ERROR_COMPILATION;
    p->so = read_file(so, &p->so_size);
    if (!p->so) {
        set_log(p, "snn_cuemu: error: the compiler succeeded but left no shared object\n");
        return NVRTC_ERROR_INTERNAL_ERROR;
    }
    p->ptx = make_ptx(p->so, p->so_size, opts->arch_name);
    if (!p->ptx) return NVRTC_ERROR_OUT_OF_MEMORY;
    return NVRTC_SUCCESS;
}

nvrtcResult
nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char *const *options)
{
    pthread_mutex_lock(&programs_mu);
    bool is_ok = is_live(prog);
    pthread_mutex_unlock(&programs_mu);
    if (!is_ok) return NVRTC_ERROR_INVALID_PROGRAM;
    cuemu_count_compile();
    if (numOptions < 0 || (numOptions > 0 && !options)) return NVRTC_ERROR_INVALID_INPUT;
    struct _nvrtcProgram *p = prog;
    p->is_compiled = false;
    free(p->so);
    p->so = NULL;
    p->so_size = 0;
    free(p->ptx);
    p->ptx = NULL;
    free(p->log);
    p->log = NULL;

    Options opts = {0};
    if (!parse_options(&opts, numOptions, options)) {
        argv_free(&opts.extra);
        set_log(p, opts.error);
        return NVRTC_ERROR_INVALID_OPTION;
    }
    if (opts.extra.has_failed) {
        argv_free(&opts.extra);
        return NVRTC_ERROR_OUT_OF_MEMORY;
    }
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/snn_cuemu.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        char msg[4096 + 128];
        snprintf(msg, sizeof msg, "snn_cuemu: error: cannot create %s: %s\n", dir, strerror(errno));
        set_log(p, msg);
        argv_free(&opts.extra);
        return NVRTC_ERROR_INTERNAL_ERROR;
    }
    nvrtcResult r = compile_in(p, dir, &opts);
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    argv_free(&opts.extra);
    if (r == NVRTC_SUCCESS) {
        p->is_compiled = true;
        p->arch = opts.arch;
        strcpy(p->arch_name, opts.arch_name);
    } else if (p->log)
        cuemu_set_last_error(p->log);
    return r;
}

/* the program if live, and the caller may then use it without the lock (as with NVRTC, one
 * program is not used by two threads at once) */
static struct _nvrtcProgram *
live_program(nvrtcProgram prog)
{
    pthread_mutex_lock(&programs_mu);
    bool is_ok = is_live(prog);
    pthread_mutex_unlock(&programs_mu);
    return is_ok ? prog : NULL;
}

nvrtcResult
nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet)
{
    struct _nvrtcProgram *p = live_program(prog);
    if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
    if (!logSizeRet) return NVRTC_ERROR_INVALID_INPUT;
    *logSizeRet = (p->log ? strlen(p->log) : 0) + 1;
    return NVRTC_SUCCESS;
}

nvrtcResult
nvrtcGetProgramLog(nvrtcProgram prog, char *log)
{
    struct _nvrtcProgram *p = live_program(prog);
    if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
    if (!log) return NVRTC_ERROR_INVALID_INPUT;
    strcpy(log, p->log ? p->log : "");
    return NVRTC_SUCCESS;
}

nvrtcResult
nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet)
{
    struct _nvrtcProgram *p = live_program(prog);
    if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
    if (!ptxSizeRet) return NVRTC_ERROR_INVALID_INPUT;
    /* as NVRTC: an empty string before a successful compile */
    *ptxSizeRet = p->is_compiled ? strlen(p->ptx) + 1 : 1;
    return NVRTC_SUCCESS;
}

nvrtcResult
nvrtcGetPTX(nvrtcProgram prog, char *ptx)
{
    struct _nvrtcProgram *p = live_program(prog);
    if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
    if (!ptx) return NVRTC_ERROR_INVALID_INPUT;
    strcpy(ptx, p->is_compiled ? p->ptx : "");
    return NVRTC_SUCCESS;
}

nvrtcResult
nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet)
{
    struct _nvrtcProgram *p = live_program(prog);
    if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
    if (!cubinSizeRet) return NVRTC_ERROR_INVALID_INPUT;
    /* as NVRTC: none for a virtual architecture */
    *cubinSizeRet = p->is_compiled && !p->arch.is_virtual ? p->so_size : 0;
    return NVRTC_SUCCESS;
}

nvrtcResult
nvrtcGetCUBIN(nvrtcProgram prog, char *cubin)
{
    struct _nvrtcProgram *p = live_program(prog);
    if (!p) return NVRTC_ERROR_INVALID_PROGRAM;
    if (!cubin) return NVRTC_ERROR_INVALID_INPUT;
    if (p->is_compiled && !p->arch.is_virtual) memcpy(cubin, p->so, p->so_size);
    return NVRTC_SUCCESS;
}
