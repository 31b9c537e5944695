/* The textual kernel IR (--emit=kernel): buffers, then the schedule's kernels with their loop nests,
 * statements and expressions; step kernels inside their `step` loop. Deterministic: the same program
 * prints the same bytes. Read-only: it never changes the program. */
#include "codegen/kir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void
print_size(FILE *f, KSize s)
{
    if (s.per_batch && s.fixed)
        fprintf(f, "%lld*B + %lld", (long long)s.per_batch, (long long)s.fixed);
    else if (s.per_batch)
        fprintf(f, "%lld*B", (long long)s.per_batch);
    else
        fprintf(f, "%lld", (long long)s.fixed);
}

/* a number that reads back as itself in its type; floats always show a '.', 'e', inf or nan */
static void
print_num(FILE *f, KType t, double x)
{
    char buf[64];
    if (t == KT_BOOL) {
        fputs(x != 0 ? "true" : "false", f);
        return;
    }
    if (t != KT_F32 && t != KT_F64) {
        if (t == KT_I64)
            fprintf(f, "%lld", (long long)x);
        else
            fprintf(f, "%s(%lld)", ktype_name(t), (long long)x);
        return;
    }
    if (isnan(x)) {
        fputs(t == KT_F32 ? "nanf" : "nan", f);
        return;
    }
    if (isinf(x)) {
        fputs(x < 0 ? (t == KT_F32 ? "-inff" : "-inf") : (t == KT_F32 ? "inff" : "inf"), f);
        return;
    }
    if (t == KT_F32) {
        for (int prec = 1; prec <= 9; prec++) {
            snprintf(buf, sizeof buf, "%.*g", prec, x);
            if ((float)strtod(buf, NULL) == (float)x)
                break;
        }
    } else {
        print_double(buf, sizeof buf, x);
    }
    if (!strpbrk(buf, ".en"))
        strcat(buf, ".0");
    fprintf(f, "%s%s", buf, t == KT_F32 ? "f" : "");
}

/* binding strength for parentheses; calls and atoms bind tightest */
static int
prec(const KExpr *e)
{
    if (e->kind != KX_BIN)
        return e->kind == KX_SELECT ? 0 : 10;
    switch ((KBin)e->op) {
    case KB_OR: return 1;
    case KB_AND: return 2;
    case KB_LT:
    case KB_LE:
    case KB_GT:
    case KB_GE:
    case KB_EQ:
    case KB_NE: return 3;
    case KB_ADD:
    case KB_SUB: return 4;
    case KB_MUL:
    case KB_DIV:
    case KB_REM:
    case KB_BITAND:
    case KB_BITOR:
    case KB_SHL: return 5;
    default: return 10; /* min, max, pow: calls */
    }
}

typedef struct Printer {
    FILE *f;
    const KProgram *p;
    const Kernel *k;
} Printer;

static void
print_var(const Printer *pr, int v)
{
    const Kernel *k = pr->k;
    const char *name = k->locals[v].name;
    int same = 0;
    for (int u = 0; u < k->nlocals; u++)
        same += strcmp(k->locals[u].name, name) == 0;
    if (same > 1)
        fprintf(pr->f, "%%%s.%d", name, v);
    else
        fprintf(pr->f, "%%%s", name);
}

static void print_expr(const Printer *pr, const KExpr *e);

static void
print_operand(const Printer *pr, const KExpr *e, int min_prec)
{
    if (prec(e) < min_prec) {
        fputc('(', pr->f);
        print_expr(pr, e);
        fputc(')', pr->f);
    } else {
        print_expr(pr, e);
    }
}

static void
print_expr(const Printer *pr, const KExpr *e)
{
    FILE *f = pr->f;
    switch (e->kind) {
    case KX_CONST: print_num(f, e->type, e->num); return;
    case KX_BATCH: fputs("B", f); return;
    case KX_STEP: fputs("step", f); return;
    case KX_SAMPLE_BASE: fputs("sample_base", f); return;
    case KX_VAR: print_var(pr, e->var); return;
    case KX_LOAD:
        fprintf(f, e->op == KLOAD_BYTES ? "bytes @%s[" : e->op == KLOAD_WORD ? "word @%s[" : "@%s[",
                pr->p->bufs[e->buf].name);
        print_expr(pr, e->a);
        fputc(']', f);
        return;
    case KX_UN:
        if (e->op == KU_NEG || e->op == KU_NOT) {
            fputs(kun_str((KUn)e->op), f);
            print_operand(pr, e->a, 10);
        } else {
            fprintf(f, "%s(", kun_str((KUn)e->op));
            print_expr(pr, e->a);
            fputc(')', f);
        }
        return;
    case KX_BIN: {
        int p = prec(e);
        if (p == 10) {
            fprintf(f, "%s(", kbin_str((KBin)e->op));
            print_expr(pr, e->a);
            fputs(", ", f);
            print_expr(pr, e->b);
            fputc(')', f);
            return;
        }
        /* left-associative: the right operand of equal strength keeps its parentheses */
        print_operand(pr, e->a, p == 3 ? 4 : p);
        fprintf(f, " %s ", kbin_str((KBin)e->op));
        print_operand(pr, e->b, p + 1);
        return;
    }
    case KX_SELECT:
        fputs("select(", f);
        print_expr(pr, e->a);
        fputs(", ", f);
        print_expr(pr, e->b);
        fputs(", ", f);
        print_expr(pr, e->c);
        fputc(')', f);
        return;
    case KX_CAST:
        fprintf(f, "%s(", ktype_name(e->type));
        print_expr(pr, e->a);
        fputc(')', f);
        return;
    case KX_UNIFORM:
        fprintf(f, "uniform(seed %llu, stream %u, ", (unsigned long long)e->seed, e->stream);
        print_expr(pr, e->a);
        fputs(", ", f);
        print_expr(pr, e->b);
        fputc(')', f);
        return;
    }
    fputs("?", f);
}

static void
indent(FILE *f, int depth)
{
    for (int i = 0; i < depth; i++)
        fputs("  ", f);
}

static void print_stmts(const Printer *pr, KStmt *const *s, int n, int depth);

/* the elements a tile statement touches: @buf[index + lanes(n)], or [index + lanes(n) * stride] */
static void
print_lanes(const Printer *pr, const KStmt *s)
{
    FILE *f = pr->f;
    fprintf(f, "@%s[", pr->p->bufs[s->buf].name);
    if (!(s->index->kind == KX_CONST && s->index->num == 0)) {
        print_operand(pr, s->index, 4);
        fputs(" + ", f);
    }
    fprintf(f, "lanes(%d)", pr->k->locals[s->var].lanes);
    if (s->kind == KS_VSTORE && s->stride != 1)
        fprintf(f, " * %lld", (long long)s->stride);
    fputc(']', f);
}

static void
print_stmt(const Printer *pr, const KStmt *s, int depth)
{
    FILE *f = pr->f;
    indent(f, depth);
    switch (s->kind) {
    case KS_FOR:
        fputs("for ", f);
        print_var(pr, s->var);
        fputs(" in ", f);
        print_expr(pr, s->lo);
        fputs("..", f);
        print_expr(pr, s->hi);
        fputs(s->is_parallel ? " parallel {\n" : " {\n", f);
        print_stmts(pr, s->body, s->nbody, depth + 1);
        indent(f, depth);
        fputs("}\n", f);
        return;
    case KS_ASSIGN:
        print_var(pr, s->var);
        fputs(" = ", f);
        print_expr(pr, s->a);
        fputc('\n', f);
        return;
    case KS_STORE:
        fprintf(f, "@%s[", pr->p->bufs[s->buf].name);
        print_expr(pr, s->index);
        fputs("] = ", f);
        print_expr(pr, s->a);
        fputc('\n', f);
        return;
    case KS_IF:
        fputs("if ", f);
        print_expr(pr, s->a);
        fputs(" {\n", f);
        print_stmts(pr, s->body, s->nbody, depth + 1);
        indent(f, depth);
        if (s->nels) {
            fputs("} else {\n", f);
            print_stmts(pr, s->els, s->nels, depth + 1);
            indent(f, depth);
        }
        fputs("}\n", f);
        return;
    case KS_VSET:
        print_var(pr, s->var);
        fputs(" = splat(", f);
        print_expr(pr, s->a);
        fputs(")\n", f);
        return;
    case KS_VLOAD:
        print_var(pr, s->var);
        fputs(" = vload ", f);
        print_lanes(pr, s);
        fputc('\n', f);
        return;
    case KS_VFMA:
        print_var(pr, s->var);
        fputs(s->is_sparse ? " = fma_nz(" : " = fma(", f);
        print_expr(pr, s->a);
        fputs(", ", f);
        print_lanes(pr, s);
        fputs(", ", f);
        print_var(pr, s->var);
        fputs(")\n", f);
        return;
    case KS_COUNT:
        fprintf(f, "@%s[0] += ", pr->p->bufs[s->buf].name);
        print_expr(pr, s->a);
        fputs(" (count)\n", f);
        return;
    case KS_VSTORE:
        fputs("vstore ", f);
        print_lanes(pr, s);
        fputs(" = ", f);
        print_var(pr, s->var);
        fputc('\n', f);
        return;
    case KS_PREFETCH:
        fprintf(f, "prefetch @%s[", pr->p->bufs[s->buf].name);
        print_expr(pr, s->index);
        fputs("]\n", f);
        return;
    }
}

static void
print_stmts(const Printer *pr, KStmt *const *s, int n, int depth)
{
    for (int i = 0; i < n; i++)
        print_stmt(pr, s[i], depth);
}

static void
print_kernel(FILE *f, const KProgram *p, const Kernel *k, int depth)
{
    Printer pr = {f, p, k};
    indent(f, depth);
    fprintf(f, "# %s\n", k->what ? k->what : "");
    indent(f, depth);
    fprintf(f, "kernel %s {\n", k->name);
    indent(f, depth + 1);
    fputs("locals", f);
    for (int v = 0; v < k->nlocals; v++) {
        fputs(v ? ", " : " ", f);
        print_var(&pr, v);
        fprintf(f, ": %s", ktype_name(k->locals[v].type));
        if (k->locals[v].lanes > 0)
            fprintf(f, "x%d", k->locals[v].lanes);
    }
    fputc('\n', f);
    print_stmts(&pr, k->body, k->nbody, depth + 1);
    indent(f, depth);
    fputs("}\n", f);
}

void
kir_print(FILE *f, const KProgram *p)
{
    static const char *const kinds[] = {"input", "output", "weight", "temp"};
    fprintf(f, "# snnc kernel IR\nprogram %s {\n  timesteps %d\n", p->m && p->m->name ? p->m->name : "?",
            p->timesteps);
    for (int b = 0; b < p->nbufs; b++) {
        const KBuf *kb = &p->bufs[b];
        fprintf(f, "  buffer @%s : %s[", kb->name, ktype_name(kb->type));
        print_size(f, kb->size);
        fprintf(f, "] %s", kinds[kb->kind]);
        if (kb->kind != KB_TEMP)
            fprintf(f, " %d", kb->io);
        if (kb->split)
            fprintf(f, " split(%lld)", (long long)kb->split);
        for (int d = 0; d < kb->nperm; d++)
            fprintf(f, "%s%d", d ? ", " : " transposed(", kb->perm[d]);
        if (kb->nperm)
            fputc(')', f);
        for (int s = 0; s < p->nstats; s++)
            if (p->stats[s].buf == b)
                fprintf(f, " spikes %d", (int)p->stats[s].value);
        if (kb->is_written_first)
            fputs(" written-first", f); /* not zeroed before a run */
        if (kb->is_accumulator)
            fputs(" accumulates", f); /* totals across runs (GPU spike counts) */
        fputc('\n', f);
    }
    for (int i = 0; i < p->nkernels;) {
        fputc('\n', f);
        if (!p->kernels[i].is_step) {
            print_kernel(f, p, &p->kernels[i], 1);
            i++;
            continue;
        }
        int j = i;
        while (j < p->nkernels && p->kernels[j].is_step)
            j++;
        /* the CPU runs such a loop sample by sample (kir_by_sample); the GPU step by step */
        fprintf(f, "  step in 0..%d%s {\n", p->timesteps,
                p->target == KTARGET_CPU && kir_by_sample(p, i, j) ? " by sample" : "");
        for (; i < j; i++)
            print_kernel(f, p, &p->kernels[i], 2);
        fputs("  }\n", f);
    }
    fputs("}\n", f);
}
