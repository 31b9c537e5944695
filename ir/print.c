/* The textual IR: the canonical form of the language. Every node is one statement bound to a name
 * (%N when anonymous), every attribute is written out, every value carries its type and source location,
 * and the neuron definitions the model uses are printed in full. The output is deterministic and reads
 * back to the same module: print(parse(print(m))) == print(m) byte for byte. */
#include "ir/ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void
print_double(char *buf, size_t n, double x)
{
    if (x == 0) {
        snprintf(buf, n, signbit(x) ? "-0" : "0");
        return;
    }
    /* like Python's repr: fixed notation for 1e-4 <= |x| < 2^53, else the shortest exponent form
     * (an integral value at or above 2^53 written without one would read back as an integer
     * literal, which the language limits to 2^53) */
    double ax = fabs(x);
    if (ax >= 1e-4 && ax < 9007199254740992.0) {
        for (int digits = 0; digits <= 20; digits++) {
            snprintf(buf, n, "%.*f", digits, x);
            if (strtod(buf, NULL) == x)
                return;
        }
    }
    for (int prec = 0; prec <= 16; prec++) {
        snprintf(buf, n, "%.*e", prec, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}

static void
put_double(FILE *f, double x)
{
    char b[40];
    print_double(b, sizeof b, x);
    fputs(b, f);
}

static void
put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        switch (*s) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\t': fputs("\\t", f); break;
        default: fputc(*s, f);
        }
    }
    fputc('"', f);
}

/* ---- neuron expressions: minimal parentheses by precedence ---- */
enum { P_COND = 1, P_OR, P_AND, P_CMP, P_ADD, P_MUL, P_UNARY, P_PRIMARY };

static int
prec(const NExpr *e)
{
    switch (e->kind) {
    case NX_COND: return P_COND;
    case NX_BIN:
        switch ((NxBin)e->op) {
        case NB_OR: return P_OR;
        case NB_AND: return P_AND;
        case NB_ADD:
        case NB_SUB: return P_ADD;
        case NB_MUL:
        case NB_DIV: return P_MUL;
        default: return P_CMP;
        }
    case NX_NEG:
    case NX_NOT: return P_UNARY;
    case NX_NUM: return e->num < 0 || (e->num == 0 && signbit(e->num)) ? P_UNARY : P_PRIMARY;
    default: return P_PRIMARY;
    }
}

static void put_nexpr(FILE *f, const NeuronDef *nd, const NExpr *e, int min_prec);

static void
put_nexpr(FILE *f, const NeuronDef *nd, const NExpr *e, int min_prec)
{
    int p = prec(e);
    bool paren = p < min_prec;
    if (paren)
        fputc('(', f);
    switch (e->kind) {
    case NX_NUM: put_double(f, e->num); break;
    case NX_PARAM: fputs(nd->params[e->idx].name, f); break;
    case NX_STATE: fputs(nd->states[e->idx].name, f); break;
    case NX_LOCAL: fputs(nd->locals[e->idx], f); break;
    case NX_INPUT: fputs("I", f); break;
    case NX_SPIKE: fputs("spike", f); break;
    case NX_NEG:
    case NX_NOT:
        fputc(e->kind == NX_NEG ? '-' : '!', f);
        put_nexpr(f, nd, e->args[0], P_UNARY);
        break;
    case NX_BIN: {
        /* left-associative: the right operand needs a strictly higher level; comparisons chain on
         * neither side */
        int lp = p == P_CMP ? P_CMP + 1 : p;
        put_nexpr(f, nd, e->args[0], lp);
        fprintf(f, " %s ", nxbin_str((NxBin)e->op));
        put_nexpr(f, nd, e->args[1], p + 1);
        break;
    }
    case NX_COND:
        put_nexpr(f, nd, e->args[0], P_OR);
        fputs(" ? ", f);
        put_nexpr(f, nd, e->args[1], P_COND);
        fputs(" : ", f);
        put_nexpr(f, nd, e->args[2], P_COND);
        break;
    case NX_CALL:
        fprintf(f, "%s(", nfunc_name((NFunc)e->op));
        for (int i = 0; i < e->nargs; i++) {
            if (i)
                fputs(", ", f);
            put_nexpr(f, nd, e->args[i], P_COND);
        }
        fputc(')', f);
        break;
    }
    if (paren)
        fputc(')', f);
}

void
nexpr_print(FILE *f, const NeuronDef *nd, const NExpr *e)
{
    put_nexpr(f, nd, e, P_COND);
}

/* The comparison a fire condition rests on: the first one met left to right through && || !. */
static const char *
first_comparison(const NExpr *e)
{
    if (e->kind == NX_BIN && e->op >= NB_LT && e->op <= NB_NE)
        return nxbin_str((NxBin)e->op);
    for (int i = 0; i < e->nargs; i++) {
        const char *c = first_comparison(e->args[i]);
        if (strcmp(c, "none") != 0)
            return c;
    }
    return "none";
}

static void
neuron_print_indented(FILE *f, const NeuronDef *nd, const char *ind)
{
    fprintf(f, "%sneuron %s(", ind, nd->name);
    for (int i = 0; i < nd->nparams; i++) {
        fprintf(f, "%s%s", i ? ", " : "", nd->params[i].name);
        if (!isnan(nd->params[i].def)) {
            fputs(" = ", f);
            put_double(f, nd->params[i].def);
        }
    }
    fputs(") {\n", f);
    /* derived attributes, as a comment: what a reader needs to compare with a framework */
    const char *cmp = "none", *reset = "none";
    for (int i = 0; i < nd->nstmts; i++) {
        const NStmt *s = &nd->stmts[i];
        if (s->kind == NS_FIRE)
            cmp = first_comparison(s->e);
        if (s->kind == NS_RESET_TO)
            reset = "to value";
        if (s->kind == NS_RESET_SUB)
            reset = "subtract";
    }
    if (strcmp(cmp, "none") == 0)
        fprintf(f, "%s  # non-spiking: emits its output expression\n", ind);
    else
        fprintf(f, "%s  # fire: %s, reset: %s (%s step), spikes: %s, emits: %s%s\n", ind, cmp, reset,
                nd->reset_is_next ? "next" : "same", nd->is_bipolar ? "bipolar" : "0/1",
                nd->has_output ? "output expression" : "spikes",
                nd->has_refractory ? ", refractory" : "");
    for (int i = 0; i < nd->nstates; i++) {
        fprintf(f, "%s  state %s = ", ind, nd->states[i].name);
        nexpr_print(f, nd, nd->states[i].init);
        fputc('\n', f);
    }
    for (int i = 0; i < nd->nstmts; i++) {
        const NStmt *s = &nd->stmts[i];
        fprintf(f, "%s  ", ind);
        switch (s->kind) {
        case NS_ASSIGN:
            if (s->is_local)
                fprintf(f, "let %s = ", nd->locals[s->var]);
            else
                fprintf(f, "%s = ", nd->states[s->var].name);
            break;
        case NS_FIRE: fputs("fire ", f); break;
        case NS_FIRE_DOWN: fputs("fire down ", f); break;
        case NS_RESET_TO: fprintf(f, "reset %s = ", nd->states[s->var].name); break;
        case NS_RESET_SUB: fprintf(f, "reset %s -= ", nd->states[s->var].name); break;
        case NS_REFRACTORY: fputs("refractory ", f); break;
        case NS_OUTPUT: fputs("output ", f); break;
        }
        nexpr_print(f, nd, s->e);
        fputc('\n', f);
    }
    if (nd->surrogate.name) {
        fprintf(f, "%s  surrogate %s", ind, nd->surrogate.name);
        if (nd->surrogate.nargs) {
            fputc('(', f);
            for (int i = 0; i < nd->surrogate.nargs; i++) {
                fprintf(f, "%s%s = ", i ? ", " : "", nd->surrogate.arg_names[i]);
                put_double(f, nd->surrogate.arg_values[i]);
            }
            fputc(')', f);
        }
        fputc('\n', f);
    }
    fprintf(f, "%s}\n", ind);
}

void
neuron_print(FILE *f, const NeuronDef *nd)
{
    neuron_print_indented(f, nd, "");
}

/* ---- nodes ---- */

/* Anonymous values are numbered by their position in the printed order, so a module whose nodes were
 * appended out of order (by the frontend or a pass) prints the same as its re-parsed copy. */
static void
put_value(FILE *f, const Module *m, const int *pos, ValueId v)
{
    if (m->nodes[v].name)
        fputs(m->nodes[v].name, f);
    else
        fprintf(f, "%%%d", pos[v]);
}

static void
put_attr(FILE *f, const AttrSpec *s, const AttrVal *v)
{
    fprintf(f, ", %s = ", s->name);
    switch (s->kind) {
    case AK_INT: fprintf(f, "%lld", (long long)v->i[0]); break;
    case AK_INT2: fprintf(f, "(%lld, %lld)", (long long)v->i[0], (long long)v->i[1]); break;
    case AK_FLOAT: put_double(f, v->f); break;
    case AK_BOOL: fputs(v->i[0] ? "true" : "false", f); break;
    case AK_STR: put_string(f, v->s ? v->s : ""); break;
    }
}

static void
put_loc(FILE *f, Loc loc)
{
    if (!loc.file || loc.line <= 0)
        return;
    fputs(" loc(", f);
    put_string(f, loc.file);
    fprintf(f, ":%d:%d)", loc.line, loc.col);
}

static void
put_node(FILE *f, const Module *m, const int *pos, ValueId v)
{
    const Node *n = &m->nodes[v];
    const OpInfo *oi = op_info(n->op);
    char tb[128];
    if (n->op == OP_INPUT) {
        Type t = n->type;
        t.has_time = false;
        /* an input is declared per sample: f32[1, 28, 28], or f32[T, 64] for one value per step */
        fprintf(f, "  input %s : %s[", n->name, dtype_name(t.dtype));
        if (n->is_per_step_input)
            fputs(t.rank ? "T, " : "T", f);
        for (int i = 0; i < t.rank; i++)
            fprintf(f, "%s%lld", i ? ", " : "", (long long)t.dims[i]);
        fputs("]\n", f);
        return;
    }
    fputs(n->is_output ? "  output " : "  ", f);
    put_value(f, m, pos, v);
    fputs(" = ", f);
    if (n->op == OP_NEURON) {
        const NeuronDef *nd = m->neurons[n->neuron];
        fprintf(f, "%s(", nd->name);
        put_value(f, m, pos, n->args[0]);
        for (int i = 0; i < nd->nparams; i++) {
            fprintf(f, ", %s = %s", nd->params[i].name, node_learns(n, i) ? "learn(" : "");
            put_double(f, n->params[i]);
            if (node_learns(n, i)) fputc(')', f);
        }
        const char *ln = n->attrs[op_attr_index(OP_NEURON, "name")].s;
        if (ln && ln[0]) {
            fputs(", name = ", f);
            put_string(f, ln);
        }
    } else {
        fprintf(f, "%s(", oi->name);
        for (int a = 0; a < n->nargs; a++) {
            if (a)
                fputs(", ", f);
            put_value(f, m, pos, n->args[a]);
        }
        for (int i = 0; i < oi->nattrs; i++)
            put_attr(f, &oi->attrs[i], &n->attrs[i]);
    }
    fprintf(f, ") : %s", type_str(&n->type, tb, sizeof tb));
    put_loc(f, n->loc);
    fputc('\n', f);
}

/* the printed order of the nodes (order[i]) and each node's position in it (pos[v]) */
static void
print_order(const Module *m, ValueId *order, int *pos)
{
    int count = ir_topo_order(m, order);
    for (int v = 0, k = count; v < m->nnodes && count < m->nnodes; v++) {
        /* a module that does not verify (a dump after a broken pass) still prints every node */
        bool placed = false;
        for (int i = 0; i < count && !placed; i++)
            placed = order[i] == v;
        if (!placed)
            order[k++] = v;
    }
    for (int i = 0; i < m->nnodes; i++)
        pos[order[i]] = i;
}

void
ir_value_numbers(const Module *m, int *num)
{
    ValueId *order = malloc(((size_t)m->nnodes + 1) * sizeof *order);
    if (!order)
        die("out of memory");
    print_order(m, order, num);
    free(order);
}

void
ir_print(FILE *f, const Module *m)
{
    fprintf(f, "# snnc graph IR\n");
    /* the neurons this model uses, in definition order, then the model */
    bool *used = calloc((size_t)m->nneurons + 1, sizeof *used);
    if (!used)
        die("out of memory");
    for (int v = 0; v < m->nnodes; v++)
        if (m->nodes[v].op == OP_NEURON)
            used[m->nodes[v].neuron] = true;
    for (int i = 0; i < m->nneurons; i++)
        if (used[i]) {
            neuron_print(f, m->neurons[i]);
            fputc('\n', f);
        }
    free(used);
    fprintf(f, "model %s {\n", m->name ? m->name : "model");
    fprintf(f, "  timesteps %d\n", m->timesteps);
    fprintf(f, "  seed %lld\n", (long long)m->seed);
    if (m->schedule == SCHEDULE_LAYER) fputs("  schedule layer\n", f);
    if (m->memory == MEMORY_REUSE) fputs("  memory reuse\n", f);
    if (m->accumulate == ACC_EXACT) fputs("  accumulate exact\n", f);
    if (m->weights_path) {
        fputs("  weights ", f);
        put_string(f, m->weights_path);
        fputc('\n', f);
    }
    if (m->has_train) {
        fputs("  train {\n", f);
        for (int i = 0; i < m->ntrain; i++) {
            const TrainItem *t = &m->train[i];
            if (t->word)
                fprintf(f, "    %s %s\n", t->key, t->word);
            else if (t->is_int)
                fprintf(f, "    %s %lld\n", t->key, (long long)t->num);
            else {
                fprintf(f, "    %s ", t->key);
                put_double(f, t->num);
                fputc('\n', f);
            }
        }
        fputs("  }\n", f);
    }
    /* nodes in step order (operands first; a delay may read a later node) */
    ValueId *order = malloc(((size_t)m->nnodes + 1) * sizeof *order);
    int *pos = malloc(((size_t)m->nnodes + 1) * sizeof *pos);
    if (!order || !pos)
        die("out of memory");
    print_order(m, order, pos);
    for (int i = 0; i < m->nnodes; i++) {
        if (op_is_backward(m->nodes[order[i]].op) &&
            (i == 0 || !op_is_backward(m->nodes[order[i - 1]].op)))
            fputs("  # backward (ir/grad.c): grad(x) is dL/dx, complete where it stands, and x's "
                  "backward step runs there, giving the weights' gradients (grad_weight)\n",
                  f);
        put_node(f, m, pos, order[i]);
    }
    /* the schedule marks (marks.c), each kind in the table's order, values in step order */
    for (int k = 0; k < MARK_COUNT; k++) {
        const MarkInfo *mi = mark_info((MarkKind)k);
        for (int i = 0; i < m->nnodes; i++) {
            const Node *n = &m->nodes[order[i]];
            if (!mark_is_printed(n, (MarkKind)k)) continue;
            int x = mi->get(n);
            if (mi->form == MF_INTO && (x - 1 < 0 || x - 1 >= m->nnodes)) continue;
            fprintf(f, "  %s ", mi->keyword);
            put_value(f, m, pos, order[i]);
            if (mi->form == MF_INTO) {
                fputs(" into ", f);
                put_value(f, m, pos, x - 1);
            } else if (mi->form == MF_TYPE) {
                fprintf(f, " : %s", mi->words[x]);
            }
            fputc('\n', f);
        }
    }
    free(order);
    free(pos);
    fputs("}\n", f);
}

char *
ir_print_to_string(const Module *m)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        die("out of memory");
    ir_print(f, m);
    fclose(f);
    return buf;
}
