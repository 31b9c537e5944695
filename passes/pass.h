/* pass.h: graph-IR passes and the pass manager that runs them (manager.c). A pass is one function
 * over a verified, typed module whose weights are not bound yet; it rewrites the module in place,
 * says whether it changed anything, and leaves it verified. The table is passes.def. */
#ifndef SNN_PASSES_PASS_H
#define SNN_PASSES_PASS_H

#include <stdbool.h>
#include <stdio.h>

#include "ir/ir.h"

/* A pass: false after reporting an error (the module may then be unusable). */
typedef bool PassFn(Module *m, bool *changed);
#define PASS(name, fn, level, desc) PassFn fn;
#include "passes/passes.def"
#undef PASS

typedef struct PassOptions {
    int level;                 /* -O0..-O3: passes whose minimum level is at most this run */
    const char *passes;        /* --passes=a,b: exactly these, in this order (NULL: by level) */
    const char *disable;       /* --disable-pass=a,b */
    const char *print_before;  /* --print-ir-before=a,b */
    const char *print_after;   /* --print-ir-after=a,b */
    bool print_before_all, print_after_all, print_after_change;
    const char *tree_dir;      /* --print-ir-tree-dir=DIR: NN-name.snnir per pass */
    bool time_passes;          /* --time-passes: a table on stderr */
    bool verify_each;          /* --verify-each: ir_verify after every pass */
    FILE *dump;                /* where printed IR goes (NULL: stderr) */
} PassOptions;

/* The defaults of the environment: SNN_IR_DUMP=all|changed|PASS[,PASS] (dump after every pass,
 * after those that changed the IR, or after the named ones) and SNN_DUMP_DIR=DIR (the tree dir),
 * where the options did not set them. */
void pass_options_from_env(PassOptions *o);
/* Every name of a comma-separated list is a pass; false with a message naming the first that is
 * not (and the passes there are). */
bool pass_check_list(const char *list, char *err, size_t errlen);
/* The same for --passes, whose list is also capped at 4 times the table's length (a pipeline is
 * run as listed; nothing is dropped silently). */
bool pass_check_pipeline(const char *list, char *err, size_t errlen);
/* Whether the pipeline o asks for runs the pass `name`. */
bool passes_include(const PassOptions *o, const char *name);
/* The i-th file --print-ir-tree-dir writes (0: DIR/00-input.snnir, then one per pass the pipeline
 * runs) into buf; false past the last, or without a tree directory. */
bool passes_tree_path(const PassOptions *o, int i, char *buf, size_t n);
/* The pipeline o asks for, on m. False after reporting an error. */
bool passes_run(Module *m, const PassOptions *o);
/* --train's dumps: the train-step module tm (ir_grad of fwd) as the IR after a pass named grad
 * (--print-ir-after=grad, -all, -change, SNN_IR_DUMP), and with a tree dir 00-input.snnir (fwd)
 * and 01-grad.snnir (tm). False after reporting a dump file that could not be written. */
bool passes_dump_grad(const PassOptions *o, const Module *fwd, const Module *tm);
/* --help-passes: name, minimum level, description, one per line. */
void passes_print_help(FILE *f);

/* events.c: the input firing rate at or past which layer n (dense or conv) is summed densely
 * rather than event by event (the events pass, with rates measured on calibration samples) */
double events_crossover(const Module *m, const Node *n);

/* rewrite.c: what passes share */
/* Remove the nodes with keep[v] false (none may be used by a kept node, none may have weights),
 * renumbering the rest in order, then infer and verify again. */
bool module_remove_nodes(Module *m, const bool *keep);
/* Every use of value `from` (operands, outputs) becomes `to`. */
void module_replace_uses(Module *m, ValueId from, ValueId to);

#endif
