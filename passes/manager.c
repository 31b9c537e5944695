/* manager.c: the pass pipeline. The passes of passes.def whose minimum level is at most -O run in
 * table order (or exactly --passes=, in its order), less --disable-pass=; around each, the IR is
 * printed where asked (a comment header naming the pass, then the textual IR, which parses back),
 * written to a numbered file per pass under --print-ir-tree-dir, verified with --verify-each, and
 * timed with --time-passes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "passes/pass.h"
#include "runtime/clock.h"
#include "runtime/tensor_io.h"

typedef struct PassInfo {
    const char *name;
    PassFn *run;
    int level;
    const char *description;
} PassInfo;

static const PassInfo table[] = {
#define PASS(name, fn, level, desc) {name, fn, level, desc},
#include "passes/passes.def"
#undef PASS
};
enum { NPASSES = sizeof table / sizeof table[0] };

static const PassInfo *
find(const char *name, size_t len)
{
    for (int i = 0; i < NPASSES; i++)
        if (strlen(table[i].name) == len && strncmp(table[i].name, name, len) == 0) return &table[i];
    return NULL;
}

/* is `name` in the comma-separated list (NULL: no) */
static bool
in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, name, n) == 0) return true;
        p += len + (p[len] == ',');
    }
    return false;
}

bool
pass_check_list(const char *list, char *err, size_t errlen)
{
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, ",");
        /* grad: --train's reverse mode (ir_grad), which the dumps show as the pass after these */
        if (!find(p, len) && !(len == 4 && strncmp(p, "grad", 4) == 0)) {
            char names[512] = "";
            for (int i = 0; i < NPASSES; i++) {
                size_t at = strlen(names);
                snprintf(names + at, sizeof names - at, "%s%s", i ? ", " : "", table[i].name);
            }
            snprintf(err, errlen,
                     "there is no pass '%.*s' (passes: %s; and grad, --train's reverse mode)",
                     (int)len, p, names);
            return false;
        }
        p += len + (p[len] == ',');
    }
    return true;
}

bool
pass_check_pipeline(const char *list, char *err, size_t errlen)
{
    if (!pass_check_list(list, err, errlen)) return false;
    if (in_list(list, "grad")) {
        snprintf(err, errlen,
                 "grad is not a pass to list: --train runs it (reverse mode, ir_grad) "
                 "after the passes");
        return false;
    }
    int n = 0;
    for (const char *p = list; *p; n++)
        p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',');
    if (n > NPASSES * 4) {
        snprintf(err, errlen, "%d passes listed; a pipeline runs at most %d (4 times the %d passes)",
                 n, NPASSES * 4, NPASSES);
        return false;
    }
    return true;
}

void
pass_options_from_env(PassOptions *o)
{
    const char *dump = getenv("SNN_IR_DUMP"), *dir = getenv("SNN_DUMP_DIR");
    if (dump && *dump && !o->print_after_all && !o->print_after_change && !o->print_after) {
        if (strcmp(dump, "all") == 0)
            o->print_after_all = true;
        else if (strcmp(dump, "changed") == 0)
            o->print_after_change = true;
        else
            o->print_after = dump;
    }
    if (dir && *dir && !o->tree_dir) o->tree_dir = dir;
}

void
passes_print_help(FILE *f)
{
    fputs("passes, in pipeline order (-O level from which each runs):\n", f);
    for (int i = 0; i < NPASSES; i++)
        fprintf(f, "  %-14s -O%d  %s\n", table[i].name, table[i].level, table[i].description);
}


/* the IR as a comment header and the module: text that snnc reads back */
static void
dump(FILE *f, const Module *m, const char *when, const char *pass, int k, int n)
{
    fprintf(f, "# snnc graph IR %s pass %s (%d of %d)\n", when, pass, k, n);
    ir_print(f, m);
}

/* DIR/NN-name.snnir: the tree dump of pass `name` at position index (0: the input) */
static void
passes_tree_file(const char *dir, int index, const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%02d-%s.snnir", dir, index, name);
}

static bool
dump_file(const char *dir, int index, const char *name, const Module *m, const char *when, int k,
          int n)
{
    char path[4096], err[1200];
    passes_tree_file(dir, index, name, path, sizeof path);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) die("out of memory");
    dump(f, m, when, name, k, n);
    if (fclose(f) != 0) die("out of memory");
    bool is_ok = rt_write_file(path, text, len, err, sizeof err) == 0;
    if (!is_ok) diag_reader_error(path, err);
    free(text);
    return is_ok;
}

/* the pipeline o asks for, into run (room for NPASSES * 4); its length */
static int
pipeline(const PassOptions *o, const PassInfo **run)
{
    int n = 0;
    if (o->passes) {
        for (const char *p = o->passes; *p && n < NPASSES * 4;) {
            size_t len = strcspn(p, ",");
            const PassInfo *pi = find(p, len);
            if (pi && !in_list(o->disable, pi->name)) run[n++] = pi;
            p += len + (p[len] == ',');
        }
    } else {
        for (int i = 0; i < NPASSES; i++)
            if (table[i].level <= o->level && !in_list(o->disable, table[i].name))
                run[n++] = &table[i];
    }
    return n;
}

bool
passes_tree_path(const PassOptions *o, int i, char *buf, size_t n)
{
    const PassInfo *run[NPASSES * 4 + 1];
    int count = pipeline(o, run);
    if (!o->tree_dir || i < 0 || i > count) return false;
    passes_tree_file(o->tree_dir, i, i ? run[i - 1]->name : "input", buf, n);
    return true;
}

bool
passes_include(const PassOptions *o, const char *name)
{
    const PassInfo *run[NPASSES * 4 + 1];
    int n = pipeline(o, run);
    for (int k = 0; k < n; k++)
        if (strcmp(run[k]->name, name) == 0) return true;
    return false;
}

/* the tree dump's directory, made if missing; false after reporting why it cannot be */
static bool
tree_dir_make(const char *dir)
{
    struct stat st;
    if (mkdir(dir, 0777) == 0 || (errno == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode)))
        return true;
    diag_file_error(dir, "cannot create the dump directory: %s",
                    errno == EEXIST ? "a file of that name is in the way" : strerror(errno));
    return false;
}

bool
passes_run(Module *m, const PassOptions *o)
{
    FILE *out = o->dump ? o->dump : stderr;
    const PassInfo *run[NPASSES * 4 + 1];
    int n = pipeline(o, run);
    if (o->tree_dir) {
        if (!tree_dir_make(o->tree_dir)) return false;
        if (!dump_file(o->tree_dir, 0, "input", m, "before", 1, n)) return false;
    }
    double secs[NPASSES * 4 + 1];
    bool changed_any[NPASSES * 4 + 1];
    for (int k = 0; k < n; k++) {
        const PassInfo *pi = run[k];
        if (o->print_before_all || in_list(o->print_before, pi->name))
            dump(out, m, "before", pi->name, k + 1, n);
        bool changed = false;
        double t0 = rt_now_seconds();
        bool ok = pi->run(m, &changed);
        secs[k] = rt_now_seconds() - t0;
        changed_any[k] = changed;
        if (!ok) {
            diag_error(m->loc, "pass %s failed", pi->name);
            return false;
        }
        if (o->verify_each && !(ir_verify(m) && ir_verify_fusions(m))) {
            diag_error(m->loc, "the IR is not valid after pass %s", pi->name);
            return false;
        }
        if (o->print_after_all || in_list(o->print_after, pi->name) ||
            (o->print_after_change && changed))
            dump(out, m, "after", pi->name, k + 1, n);
        if (o->tree_dir && !dump_file(o->tree_dir, k + 1, pi->name, m, "after", k + 1, n))
            return false;
    }
    if (o->time_passes) {
        double total = 0;
        for (int k = 0; k < n; k++)
            total += secs[k];
        fprintf(stderr, "pass timing (-O%d, %d passes, %.6f s):\n", o->level, n, total);
        for (int k = 0; k < n; k++)
            fprintf(stderr, "  %-14s %10.6f s%s\n", run[k]->name, secs[k],
                    changed_any[k] ? "  changed" : "");
    }
    return true;
}

bool
passes_dump_grad(const PassOptions *o, const Module *fwd, const Module *tm)
{
    FILE *out = o->dump ? o->dump : stderr;
    if (o->print_after_all || o->print_after_change || in_list(o->print_after, "grad"))
        dump(out, tm, "after", "grad", 1, 1);
    if (!o->tree_dir) return true;
    if (!tree_dir_make(o->tree_dir)) return false;
    return dump_file(o->tree_dir, 0, "input", fwd, "before", 1, 1) &&
           dump_file(o->tree_dir, 1, "grad", tm, "after", 1, 1);
}
