/* AST → graph IR. Reads the main file and its includes (the prelude first for .snn files), turns neuron
 * definitions into scalar programs and model statements into nodes, then runs verification and shape
 * inference and checks IR type annotations. Every user error is reported here with its location; nothing
 * downstream should have to guess where a node came from. */
#include "frontend/frontend.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MAX_INCLUDE_DEPTH = 32, MAX_TIMESTEPS = 1000000 };

typedef struct Sym {
    const char *name;
    ValueId v;
} Sym;

typedef struct Fixup {
    ValueId node;
    int arg;
    const char *name;
    Loc loc;
} Fixup;

typedef struct Annot {
    ValueId v;
    AstType type;
} Annot;

typedef struct Lower {
    Module *m;
    Arena ast; /* ASTs and file texts of this load */
    bool is_ir; /* main file is textual IR (.snnir): names like %3 are plain value names */
    int nuser_neurons_start; /* neurons at or after this index come from the user's files */
    /* model statement state */
    Sym *syms;
    int nsyms, capsyms;
    const char **later; /* names bound by statements not yet lowered (for prev() forward refs) */
    int nlater;
    Fixup *fixups;
    int nfixups, capfixups;
    Annot *annots;
    int nannots, capannots;
    int delay_depth; /* > 0 while lowering the operand of a delay */
    const char *binding; /* name of the statement being lowered (auto names of nested layers) */
    int nested_count;
    /* include bookkeeping */
    const char **included;
    int nincluded;
} Lower;

/* ---- small helpers ---- */

static char *
read_file(Arena *a, const char *path, size_t *len)
{
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        /* directories, devices and pipes are not models (and would block or never end) */
        errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        die("out of memory");
    for (;;) {
        if (n == cap) {
            if (cap > ((size_t)1 << 30)) {
                free(buf);
                fclose(f);
                errno = EFBIG;
                return NULL;
            }
            cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb)
                die("out of memory");
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
    }
    int read_errno = ferror(f) ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (read_errno) {
        free(buf);
        errno = read_errno;
        return NULL;
    }
    char *text = arena_alloc(a, n + 1);
    memcpy(text, buf, n);
    text[n] = 0;
    free(buf);
    *len = n;
    return text;
}

static const char *
dir_of(Arena *a, const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return ".";
    if (slash == path)
        return "/";
    return arena_strndup(a, path, (size_t)(slash - path));
}

/* `rel` relative to the directory of `from`, made absolute (so printed IR means the same file from any
 * directory); absolute paths are kept. Canonical (realpath) when the file exists. */
static const char *
resolve_path(Arena *a, const char *from, const char *rel)
{
    const char *p = rel[0] == '/' ? arena_strdup(a, rel) : arena_printf(a, "%s/%s", dir_of(a, from), rel);
    char *real = realpath(p, NULL);
    if (real) {
        p = arena_strdup(a, real);
        free(real);
    } else if (p[0] != '/') {
        char cwd[4096];
        if (getcwd(cwd, sizeof cwd))
            p = arena_printf(a, "%s/%s", cwd, p);
    }
    return p;
}

static bool
has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Fold an expression of numbers only (parameter defaults, attribute values). */
static bool
const_eval(const Ast *e, double *out)
{
    double a, b, c;
    switch (e->kind) {
    case AST_NUM:
        *out = e->num;
        return true;
    case AST_UNARY:
        if (!const_eval(e->a, &a))
            return false;
        *out = e->op == '-' ? -a : (a == 0);
        return true;
    case AST_BINARY:
        if (!const_eval(e->a, &a) || !const_eval(e->b, &b))
            return false;
        switch ((NxBin)e->op) {
        case NB_ADD: *out = a + b; break;
        case NB_SUB: *out = a - b; break;
        case NB_MUL: *out = a * b; break;
        case NB_DIV: *out = a / b; break;
        case NB_LT: *out = a < b; break;
        case NB_LE: *out = a <= b; break;
        case NB_GT: *out = a > b; break;
        case NB_GE: *out = a >= b; break;
        case NB_EQ: *out = a == b; break;
        case NB_NE: *out = a != b; break;
        case NB_AND: *out = a != 0 && b != 0; break;
        case NB_OR: *out = a != 0 || b != 0; break;
        }
        return true;
    case AST_COND:
        if (!const_eval(e->a, &a) || !const_eval(e->b, &b) || !const_eval(e->c, &c))
            return false;
        *out = a != 0 ? b : c;
        return true;
    case AST_IDENT:
        if (strcmp(e->str, "true") == 0 || strcmp(e->str, "false") == 0) {
            *out = e->str[0] == 't';
            return true;
        }
        return false;
    default:
        return false;
    }
}

static const char *
ast_kind_what(const Ast *e)
{
    switch (e->kind) {
    case AST_NUM: return "a number";
    case AST_STR: return "a string";
    case AST_IDENT: return "a name";
    case AST_CALL: return "a call";
    case AST_KWARG: return "a keyword argument";
    case AST_TUPLE: return "a tuple";
    default: return "an expression";
    }
}

/* ---- neurons ---- */

typedef struct NScope {
    Lower *L;
    NeuronDef *nd;
    int nlocals_defined; /* locals usable so far (let statements seen) */
    bool params_only;    /* state initialisers: parameters and numbers only */
} NScope;

static int
find_name(const char *const *names, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

static int
find_param(const NeuronDef *nd, const char *name)
{
    for (int i = 0; i < nd->nparams; i++)
        if (strcmp(nd->params[i].name, name) == 0)
            return i;
    return -1;
}

static int
find_state(const NeuronDef *nd, const char *name)
{
    for (int i = 0; i < nd->nstates; i++)
        if (strcmp(nd->states[i].name, name) == 0)
            return i;
    return -1;
}

static NExpr *lower_nexpr(NScope *s, const Ast *e);

static NExpr *
lower_nident(NScope *s, const Ast *e)
{
    Arena *a = &s->L->m->arena;
    const NeuronDef *nd = s->nd;
    const char *name = e->str;
    NExpr *x;
    if (strcmp(name, "true") == 0 || strcmp(name, "false") == 0) {
        x = nexpr_new(a, NX_NUM);
        x->num = name[0] == 't';
        return x;
    }
    int i = find_param(nd, name);
    if (i >= 0) {
        x = nexpr_new(a, NX_PARAM);
        x->idx = i;
        return x;
    }
    if (s->params_only) {
        diag_error(e->loc, "a state's initial value may use only parameters and numbers, not '%s'", name);
        return NULL;
    }
    if (strcmp(name, "I") == 0)
        return nexpr_new(a, NX_INPUT);
    if (strcmp(name, "spike") == 0)
        return nexpr_new(a, NX_SPIKE);
    i = find_state(nd, name);
    if (i >= 0) {
        x = nexpr_new(a, NX_STATE);
        x->idx = i;
        return x;
    }
    i = find_name(nd->locals, s->nlocals_defined, name);
    if (i >= 0) {
        x = nexpr_new(a, NX_LOCAL);
        x->idx = i;
        return x;
    }
    if (find_name(nd->locals, nd->nlocals, name) >= 0)
        diag_error(e->loc, "'%s' is used before its let statement", name);
    else
        diag_error(e->loc,
                   "unknown name '%s' in neuron '%s' (parameters, states, lets, I and spike are "
                   "visible here)",
                   name, nd->name);
    return NULL;
}

static NExpr *
lower_ncall(NScope *s, const Ast *e)
{
    NFunc f;
    if (!nfunc_lookup(e->str, &f)) {
        diag_error(e->loc,
                   "unknown function '%s' in a neuron equation (available: exp, log, sqrt, tanh, "
                   "sigmoid, abs, floor, min, max, pow, clamp, select, float32)",
                   e->str);
        return NULL;
    }
    if (e->nitems != nfunc_arity(f)) {
        diag_error(e->loc, "%s() takes %d argument%s, got %d", e->str, nfunc_arity(f),
                   nfunc_arity(f) == 1 ? "" : "s", e->nitems);
        return NULL;
    }
    NExpr *x = nexpr_new(&s->L->m->arena, NX_CALL);
    x->op = (int)f;
    x->nargs = e->nitems;
    for (int i = 0; i < e->nitems; i++) {
        if (e->items[i]->kind == AST_KWARG) {
            diag_error(e->items[i]->loc, "%s() takes no keyword arguments", e->str);
            return NULL;
        }
        x->args[i] = lower_nexpr(s, e->items[i]);
        if (!x->args[i])
            return NULL;
    }
    return x;
}

static NExpr *
lower_nexpr(NScope *s, const Ast *e)
{
    Arena *a = &s->L->m->arena;
    NExpr *x;
    switch (e->kind) {
    case AST_NUM:
        x = nexpr_new(a, NX_NUM);
        x->num = e->num;
        return x;
    case AST_IDENT:
        return lower_nident(s, e);
    case AST_CALL:
        return lower_ncall(s, e);
    case AST_UNARY:
        /* -<number> is a negative number, so printed constants read back as the same node */
        if (e->op == '-' && e->a->kind == AST_NUM) {
            x = nexpr_new(a, NX_NUM);
            x->num = -e->a->num;
            return x;
        }
        x = nexpr_new(a, e->op == '-' ? NX_NEG : NX_NOT);
        x->nargs = 1;
        x->args[0] = lower_nexpr(s, e->a);
        return x->args[0] ? x : NULL;
    case AST_BINARY:
        x = nexpr_new(a, NX_BIN);
        x->op = e->op;
        x->nargs = 2;
        x->args[0] = lower_nexpr(s, e->a);
        if (!x->args[0])
            return NULL;
        x->args[1] = lower_nexpr(s, e->b);
        return x->args[1] ? x : NULL;
    case AST_COND:
        x = nexpr_new(a, NX_COND);
        x->nargs = 3;
        for (int i = 0; i < 3; i++) {
            x->args[i] = lower_nexpr(s, i == 0 ? e->a : i == 1 ? e->b : e->c);
            if (!x->args[i])
                return NULL;
        }
        return x;
    default:
        diag_error(e->loc, "%s cannot appear in a neuron equation", ast_kind_what(e));
        return NULL;
    }
}

static bool
is_comparison(const NExpr *e)
{
    if (e->kind == NX_BIN && e->op >= NB_LT && e->op <= NB_NE)
        return true;
    if (e->kind == NX_BIN && (e->op == NB_AND || e->op == NB_OR))
        return is_comparison(e->args[0]) && is_comparison(e->args[1]);
    if (e->kind == NX_NOT)
        return is_comparison(e->args[0]);
    return false;
}

static bool
reserved_in_neuron(const char *name)
{
    return strcmp(name, "I") == 0 || strcmp(name, "spike") == 0 || strcmp(name, "true") == 0 ||
           strcmp(name, "false") == 0;
}

static bool
lower_surrogate(Lower *L, NeuronDef *nd, const Ast *e)
{
    Surrogate *sg = &nd->surrogate;
    if (e->kind == AST_IDENT) {
        sg->name = arena_strdup(&L->m->arena, e->str);
        return true;
    }
    if (e->kind != AST_CALL) {
        diag_error(e->loc, "surrogate expects a name such as atan or atan(alpha = 2.0)");
        return false;
    }
    sg->name = arena_strdup(&L->m->arena, e->str);
    if (e->nitems > 4) {
        diag_error(e->loc, "a surrogate takes at most 4 arguments");
        return false;
    }
    for (int i = 0; i < e->nitems; i++) {
        const Ast *k = e->items[i];
        double v;
        if (k->kind != AST_KWARG || !const_eval(k->a, &v)) {
            diag_error(k->loc, "surrogate arguments are written name = number");
            return false;
        }
        sg->arg_names[i] = arena_strdup(&L->m->arena, k->str);
        sg->arg_values[i] = v;
    }
    sg->nargs = e->nitems;
    return true;
}

/* neuron NAME(params) { statements } → NeuronDef */
static bool
lower_neuron(Lower *L, const AstItem *it)
{
    Arena *a = &L->m->arena;
    Op clash;
    if (op_lookup(it->name, &clash)) {
        diag_error(it->loc, "neuron '%s' has the name of the layer op '%s'; choose another name", it->name,
                   op_info(clash)->name);
        return false;
    }
    int prev = module_find_neuron(L->m, it->name);
    if (prev >= L->nuser_neurons_start) {
        diag_error(it->loc, "neuron '%s' is defined twice", it->name);
        diag_note(L->m->neurons[prev]->loc, "the first definition is here");
        return false;
    }
    NeuronDef *nd = arena_alloc(a, sizeof *nd);
    nd->name = arena_strdup(a, it->name);
    nd->loc = it->loc;
    nd->params = arena_alloc(a, (size_t)(it->nparams + 1) * sizeof *nd->params);
    bool ok = true;
    for (int i = 0; i < it->nparams; i++) {
        const AstParam *p = &it->params[i];
        if (find_param(nd, p->name) >= 0) {
            diag_error(p->loc, "parameter '%s' is declared twice", p->name);
            ok = false;
            continue;
        }
        if (reserved_in_neuron(p->name)) {
            diag_error(p->loc, "'%s' is reserved inside neurons and cannot be a parameter", p->name);
            ok = false;
            continue;
        }
        double v = NAN;
        if (p->def && (!const_eval(p->def, &v) || !isfinite(v))) {
            diag_error(p->def->loc, "the default of '%s' must be a finite constant", p->name);
            ok = false;
            continue;
        }
        nd->params[nd->nparams].name = arena_strdup(a, p->name);
        nd->params[nd->nparams].def = v;
        nd->nparams++;
    }
    /* states and lets are declared by statements; count first so lookups see all of them */
    int nstate = 0, nlet = 0;
    for (int i = 0; i < it->nstmts; i++) {
        nstate += it->stmts[i].kind == NST_STATE;
        nlet += it->stmts[i].kind == NST_LET;
    }
    nd->states = arena_alloc(a, (size_t)(nstate + 1) * sizeof *nd->states);
    nd->locals = arena_alloc(a, (size_t)(nlet + 1) * sizeof *nd->locals);
    nd->stmts = arena_alloc(a, (size_t)(it->nstmts + 1) * sizeof *nd->stmts);
    for (int i = 0; i < it->nstmts; i++) {
        const AstStmt *st = &it->stmts[i];
        if (st->kind == NST_STATE) {
            if (find_state(nd, st->name) >= 0 || find_param(nd, st->name) >= 0 ||
                reserved_in_neuron(st->name)) {
                diag_error(st->loc, "state '%s' clashes with another name in neuron '%s'", st->name,
                           nd->name);
                ok = false;
                continue;
            }
            nd->states[nd->nstates++].name = arena_strdup(a, st->name);
        } else if (st->kind == NST_LET) {
            if (find_state(nd, st->name) >= 0 || find_param(nd, st->name) >= 0 ||
                find_name(nd->locals, nd->nlocals, st->name) >= 0 || reserved_in_neuron(st->name)) {
                diag_error(st->loc, "let '%s' clashes with another name in neuron '%s'", st->name,
                           nd->name);
                ok = false;
                continue;
            }
            nd->locals[nd->nlocals++] = arena_strdup(a, st->name);
        }
    }
    if (!ok)
        return false;

    NScope s = {L, nd, 0, false};
    int nfire = 0, nfire_down = 0, noutput = 0, nrefr = 0;
    for (int i = 0; i < it->nstmts && ok; i++) {
        const AstStmt *st = &it->stmts[i];
        NStmt *ns = &nd->stmts[nd->nstmts];
        ns->loc = st->loc;
        ns->var = -1;
        switch (st->kind) {
        case NST_STATE: {
            s.params_only = true;
            NExpr *init = lower_nexpr(&s, st->a);
            s.params_only = false;
            if (!init)
                return false;
            nd->states[find_state(nd, st->name)].init = init;
            continue;
        }
        case NST_SURROGATE:
            if (!lower_surrogate(L, nd, st->a))
                return false;
            continue;
        case NST_LET:
            ns->kind = NS_ASSIGN;
            ns->is_local = true;
            ns->var = find_name(nd->locals, nd->nlocals, st->name);
            ns->e = lower_nexpr(&s, st->a);
            s.nlocals_defined = ns->var + 1;
            break;
        case NST_ASSIGN:
        case NST_RESET_TO:
        case NST_RESET_SUB:
            ns->kind = st->kind == NST_ASSIGN     ? NS_ASSIGN
                       : st->kind == NST_RESET_TO ? NS_RESET_TO
                                                  : NS_RESET_SUB;
            ns->var = find_state(nd, st->name);
            if (ns->var < 0) {
                if (find_param(nd, st->name) >= 0)
                    diag_error(st->loc, "cannot assign to parameter '%s'", st->name);
                else if (find_name(nd->locals, nd->nlocals, st->name) >= 0)
                    diag_error(st->loc, "cannot assign to let '%s' twice; use a state", st->name);
                else
                    diag_error(st->loc, "'%s' is not a state of neuron '%s' (declare it with: state %s = ...)",
                               st->name, nd->name, st->name);
                return false;
            }
            ns->e = lower_nexpr(&s, st->a);
            break;
        case NST_FIRE:
        case NST_FIRE_DOWN:
            ns->kind = st->kind == NST_FIRE ? NS_FIRE : NS_FIRE_DOWN;
            if (st->kind == NST_FIRE) {
                if (nfire++) {
                    diag_error(st->loc, "neuron '%s' has more than one fire statement", nd->name);
                    return false;
                }
            } else if (!nfire || nfire_down++) {
                diag_error(st->loc, nfire ? "neuron '%s' has more than one fire down statement"
                                          : "fire down must follow the fire statement in neuron '%s'",
                           nd->name);
                return false;
            }
            ns->e = lower_nexpr(&s, st->a);
            if (ns->e && !is_comparison(ns->e)) {
                diag_error(st->a->loc,
                           "fire needs an explicit comparison, e.g. 'fire v >= v_th' (SpikingJelly) or "
                           "'fire v > v_th' (snnTorch, Norse)");
                return false;
            }
            break;
        case NST_REFRACTORY:
            ns->kind = NS_REFRACTORY;
            if (nrefr++) {
                diag_error(st->loc, "neuron '%s' has more than one refractory statement", nd->name);
                return false;
            }
            ns->e = lower_nexpr(&s, st->a);
            break;
        case NST_OUTPUT:
            ns->kind = NS_OUTPUT;
            if (noutput++) {
                diag_error(st->loc, "neuron '%s' has more than one output statement", nd->name);
                return false;
            }
            ns->e = lower_nexpr(&s, st->a);
            break;
        default:
            diag_error(st->loc, "this statement belongs in a model, not in neuron '%s'", nd->name);
            return false;
        }
        if (!ns->e)
            return false;
        nd->nstmts++;
    }
    if (!ok)
        return false;
    for (int i = 0; i < nd->nstates; i++)
        if (!nd->states[i].init) {
            diag_error(it->loc, "state '%s' of neuron '%s' has no initial value", nd->states[i].name,
                       nd->name);
            return false;
        }
    if (!nfire && !noutput) {
        diag_error(it->loc,
                   "neuron '%s' neither fires nor has an output statement (a non-spiking neuron "
                   "says what it emits, e.g. 'output v')",
                   nd->name);
        return false;
    }
    for (int i = 0; i < nd->nstmts; i++) {
        NsKind k = nd->stmts[i].kind;
        if (!nfire && (k == NS_RESET_TO || k == NS_RESET_SUB || k == NS_REFRACTORY)) {
            diag_error(nd->stmts[i].loc, "%s without a fire statement in neuron '%s'",
                       k == NS_REFRACTORY ? "refractory" : "reset", nd->name);
            return false;
        }
    }
    if (!neuron_analyse(nd))
        return false;
    module_add_neuron(L->m, nd);
    return true;
}

/* ---- model statements ---- */

static void
sym_add(Lower *L, const char *name, ValueId v)
{
    if (L->nsyms == L->capsyms) {
        int cap = L->capsyms ? 2 * L->capsyms : 32;
        L->syms = arena_grow(&L->ast, L->syms, (size_t)L->capsyms * sizeof *L->syms,
                             (size_t)cap * sizeof *L->syms);
        L->capsyms = cap;
    }
    L->syms[L->nsyms].name = name;
    L->syms[L->nsyms].v = v;
    L->nsyms++;
}

static ValueId
sym_find(const Lower *L, const char *name)
{
    for (int i = L->nsyms - 1; i >= 0; i--)
        if (strcmp(L->syms[i].name, name) == 0)
            return L->syms[i].v;
    return -1;
}

static bool
bound_later(const Lower *L, const char *name)
{
    for (int i = 0; i < L->nlater; i++)
        if (L->later[i] && strcmp(L->later[i], name) == 0)
            return true;
    return false;
}

static ValueId lower_value(Lower *L, const Ast *e);

static bool
is_bool_literal(const Ast *e)
{
    return e->kind == AST_IDENT && (strcmp(e->str, "true") == 0 || strcmp(e->str, "false") == 0);
}

static bool
attr_from_ast(Lower *L, Node *n, int ai, const Ast *e)
{
    const AttrSpec *spec = &op_info(n->op)->attrs[ai];
    AttrVal *av = &n->attrs[ai];
    double v, w;
    switch (spec->kind) {
    case AK_STR:
        if (e->kind != AST_STR) {
            diag_error(e->loc, "%s: attribute '%s' expects a string, got %s", op_info(n->op)->name,
                       spec->name, ast_kind_what(e));
            return false;
        }
        av->s = arena_strdup(&L->m->arena, e->str);
        return true;
    case AK_BOOL:
        if (e->kind != AST_IDENT || (strcmp(e->str, "true") && strcmp(e->str, "false"))) {
            diag_error(e->loc, "%s: attribute '%s' expects true or false", op_info(n->op)->name,
                       spec->name);
            return false;
        }
        av->i[0] = e->str[0] == 't';
        return true;
    case AK_FLOAT:
        if (is_bool_literal(e) || !const_eval(e, &v) || !isfinite(v)) {
            diag_error(e->loc, "%s: attribute '%s' expects a number", op_info(n->op)->name, spec->name);
            return false;
        }
        av->f = v;
        return true;
    case AK_INT:
    case AK_INT2:
        if (spec->kind == AK_INT2 && e->kind == AST_TUPLE) {
            if (e->nitems != 2 || !const_eval(e->items[0], &v) || !const_eval(e->items[1], &w)) {
                diag_error(e->loc, "%s: attribute '%s' expects an integer or a pair (h, w)",
                           op_info(n->op)->name, spec->name);
                return false;
            }
        } else if (is_bool_literal(e) || !const_eval(e, &v)) {
            diag_error(e->loc, "%s: attribute '%s' expects an integer%s, got %s", op_info(n->op)->name,
                       spec->name, spec->kind == AK_INT2 ? " or a pair (h, w)" : "", ast_kind_what(e));
            return false;
        } else {
            w = v;
        }
        if (v != floor(v) || w != floor(w) || fabs(v) > 1e15 || fabs(w) > 1e15) {
            diag_error(e->loc, "%s: attribute '%s' must be an integer", op_info(n->op)->name,
                       spec->name);
            return false;
        }
        av->i[0] = (int64_t)v;
        av->i[1] = (int64_t)w;
        return true;
    }
    unreachable();
}

static const char *
auto_layer_name(Lower *L, Op op, bool is_root)
{
    if (is_root && L->binding && L->binding[0] != '%')
        return arena_strdup(&L->m->arena, L->binding);
    const char *base = L->binding && L->binding[0] != '%' ? L->binding : "layer";
    const char *name = arena_printf(&L->m->arena, "%s.%s", base, op_info(op)->name);
    for (int k = 1;; k++) {
        bool used = false;
        for (int i = 0; i < L->m->nnodes && !used; i++) {
            int a = op_attr_index(L->m->nodes[i].op, "name");
            used = a >= 0 && L->m->nodes[i].attrs[a].s && strcmp(L->m->nodes[i].attrs[a].s, name) == 0;
        }
        if (!used)
            return name;
        name = arena_printf(&L->m->arena, "%s.%s.%d", base, op_info(op)->name, k);
    }
}

/* An operand: a value name (or, inside delay, a name bound later) or a nested expression. */
static bool
lower_operand(Lower *L, ValueId node, int argi, const Ast *e)
{
    if (e->kind == AST_IDENT && L->delay_depth > 0 && sym_find(L, e->str) < 0 &&
        bound_later(L, e->str)) {
        if (L->nfixups == L->capfixups) {
            int cap = L->capfixups ? 2 * L->capfixups : 8;
            L->fixups = arena_grow(&L->ast, L->fixups, (size_t)L->capfixups * sizeof *L->fixups,
                                   (size_t)cap * sizeof *L->fixups);
            L->capfixups = cap;
        }
        L->fixups[L->nfixups++] = (Fixup){node, argi, e->str, e->loc};
        return true;
    }
    ValueId v = lower_value(L, e);
    if (v < 0)
        return false;
    L->m->nodes[node].args[argi] = v;
    return true;
}

static ValueId
lower_op_call(Lower *L, const Ast *e, Op op)
{
    const OpInfo *oi = op_info(op);
    if (op == OP_INPUT || op == OP_NEURON) {
        diag_error(e->loc, "'%s' cannot be called; %s", e->str,
                   op == OP_INPUT ? "declare inputs with: input NAME : f32[...]"
                                  : "call a neuron by its name, e.g. LIF(x)");
        return -1;
    }
    bool is_root = L->nested_count++ == 0;
    ValueId v = module_add_node(L->m, op, e->loc);
    int npos = 0;
    bool seen[IR_MAX_ATTRS] = {0};
    bool is_delay = op == OP_DELAY;
    for (int i = 0; i < e->nitems; i++) {
        const Ast *arg = e->items[i];
        if (arg->kind == AST_KWARG) {
            int ai = op_attr_index(op, arg->str);
            if (ai < 0) {
                diag_error(arg->loc, "%s has no attribute '%s'", oi->name, arg->str);
                return -1;
            }
            if (seen[ai]) {
                diag_error(arg->loc, "%s: attribute '%s' given twice", oi->name, arg->str);
                return -1;
            }
            seen[ai] = true;
            if (!attr_from_ast(L, &L->m->nodes[v], ai, arg->a))
                return -1;
            continue;
        }
        if (npos < oi->nargs) {
            L->delay_depth += is_delay;
            bool ok = lower_operand(L, v, npos, arg);
            L->delay_depth -= is_delay;
            if (!ok)
                return -1;
        } else {
            int ai = npos - oi->nargs;
            if (ai >= oi->nattrs) {
                diag_error(arg->loc, "too many arguments to %s (it takes %d operand%s%s)", oi->name,
                           oi->nargs, oi->nargs == 1 ? "" : "s",
                           oi->nattrs ? " and then its attributes" : "");
                return -1;
            }
            if (seen[ai]) {
                diag_error(arg->loc, "%s: attribute '%s' given twice", oi->name, oi->attrs[ai].name);
                return -1;
            }
            seen[ai] = true;
            if (!attr_from_ast(L, &L->m->nodes[v], ai, arg))
                return -1;
        }
        npos++;
    }
    Node *n = &L->m->nodes[v];
    n->nargs = oi->nargs;
    if (npos < oi->nargs) {
        diag_error(e->loc, "%s takes %d operand%s, got %d", oi->name, oi->nargs,
                   oi->nargs == 1 ? "" : "s", npos);
        return -1;
    }
    for (int ai = 0; ai < oi->nattrs; ai++) {
        if (!seen[ai] && !oi->attrs[ai].has_default) {
            diag_error(e->loc, "%s needs attribute '%s'", oi->name, oi->attrs[ai].name);
            return -1;
        }
    }
    int name_ai = op_attr_index(op, "name");
    if (name_ai >= 0 && (!n->attrs[name_ai].s || !n->attrs[name_ai].s[0]))
        n->attrs[name_ai].s = auto_layer_name(L, op, is_root);
    return v;
}

static bool
uses_param(const NExpr *e, int pi)
{
    if (!e) return false;
    if (e->kind == NX_PARAM) return e->idx == pi;
    for (int i = 0; i < nexpr_arity(e); i++)
        if (uses_param(e->args[i], pi)) return true;
    return false;
}

static ValueId
lower_neuron_call(Lower *L, const Ast *e, int ni)
{
    const NeuronDef *nd = L->m->neurons[ni];
    L->nested_count++;
    ValueId v = module_add_node(L->m, OP_NEURON, e->loc);
    L->m->nodes[v].neuron = ni;
    L->m->nodes[v].nargs = 1;
    double *params = arena_alloc(&L->m->arena, (size_t)(nd->nparams + 1) * sizeof *params);
    bool *seen = arena_alloc(&L->ast, (size_t)(nd->nparams + 1) * sizeof *seen);
    for (int i = 0; i < nd->nparams; i++)
        params[i] = nd->params[i].def;
    L->m->nodes[v].params = params;
    int npos = 0;
    for (int i = 0; i < e->nitems; i++) {
        const Ast *arg = e->items[i];
        int pi;
        const Ast *val = arg;
        if (arg->kind == AST_KWARG) {
            pi = find_param(nd, arg->str);
            if (pi < 0 && strcmp(arg->str, "name") == 0) {
                /* the layer's name in weight names (LAYER.p of a learned p): a state_dict's */
                if (arg->a->kind != AST_STR) {
                    diag_error(arg->a->loc, "name = takes a string: the layer's name in its "
                                            "weights' names");
                    return -1;
                }
                L->m->nodes[v].attrs[op_attr_index(OP_NEURON, "name")].s =
                    arena_strdup(&L->m->arena, arg->a->str);
                continue;
            }
            if (pi < 0) {
                diag_error(arg->loc, "neuron '%s' has no parameter '%s'", nd->name, arg->str);
                diag_note(nd->loc, "'%s' is defined here", nd->name);
                return -1;
            }
            val = arg->a;
        } else if (npos == 0) {
            if (!lower_operand(L, v, 0, arg))
                return -1;
            npos++;
            continue;
        } else {
            pi = npos - 1;
            npos++;
            if (pi >= nd->nparams) {
                diag_error(arg->loc, "too many arguments to neuron '%s'", nd->name);
                return -1;
            }
        }
        if (seen[pi]) {
            diag_error(arg->loc, "parameter '%s' given twice", nd->params[pi].name);
            return -1;
        }
        seen[pi] = true;
        /* p = learn(x): a learned parameter, x its initial value */
        if (val->kind == AST_CALL && strcmp(val->str, "learn") == 0) {
            if (val->nitems != 1 || val->items[0]->kind == AST_KWARG) {
                diag_error(val->loc, "learn(x) takes one argument: the parameter's initial value");
                return -1;
            }
            if (pi >= 32) {
                diag_error(val->loc, "only the first 32 parameters of a neuron can be learned");
                return -1;
            }
            for (int k = 0; k < nd->nstates; k++)
                if (uses_param(nd->states[k].init, pi)) {
                    diag_error(val->loc,
                               "parameter '%s' of neuron '%s' gives state '%s' its initial value "
                               "and cannot be learned",
                               nd->params[pi].name, nd->name, nd->states[k].name);
                    return -1;
                }
            L->m->nodes[v].learned |= 1u << pi;
            val = val->items[0];
        }
        double x;
        if (!const_eval(val, &x) || !isfinite(x)) {
            diag_error(val->loc, "parameter '%s' of neuron '%s' must be a finite constant",
                       nd->params[pi].name, nd->name);
            return -1;
        }
        params[pi] = x;
    }
    if (npos == 0) {
        diag_error(e->loc, "neuron '%s' needs its input current as the first argument", nd->name);
        return -1;
    }
    for (int i = 0; i < nd->nparams; i++)
        if (isnan(params[i])) {
            diag_error(e->loc, "neuron '%s' needs parameter '%s' (it has no default)", nd->name,
                       nd->params[i].name);
            return -1;
        }
    return v;
}

static ValueId
lower_binop(Lower *L, const Ast *e)
{
    Op op;
    double k;
    const Ast *x = NULL;
    switch ((NxBin)e->op) {
    case NB_ADD: op = OP_ADD; break;
    case NB_SUB: op = OP_SUB; break;
    case NB_MUL:
        if (const_eval(e->a, &k))
            x = e->b;
        else if (const_eval(e->b, &k))
            x = e->a;
        op = x ? OP_SCALE : OP_MUL;
        break;
    case NB_DIV:
        if (!const_eval(e->b, &k) || k == 0) {
            diag_error(e->loc, "a layer value can only be divided by a nonzero constant");
            return -1;
        }
        x = e->a;
        op = OP_SCALE;
        break;
    default:
        diag_error(e->loc, "operator '%s' is for neuron equations; layers use + - and * by a constant",
                   nxbin_str((NxBin)e->op));
        return -1;
    }
    if (op == OP_SCALE && !isfinite(k)) {
        diag_error(e->loc, "the constant factor is not a finite number");
        return -1;
    }
    L->nested_count++;
    ValueId v = module_add_node(L->m, op, e->loc);
    if (op == OP_SCALE) {
        /* x / k keeps k as a divisor: in float32, x / k and x * (1/k) differ */
        L->m->nodes[v].nargs = 1;
        L->m->nodes[v].attrs[op_attr_index(OP_SCALE, "factor")].f = e->op == NB_DIV ? 1 : k;
        L->m->nodes[v].attrs[op_attr_index(OP_SCALE, "divisor")].f = e->op == NB_DIV ? k : 1;
        return lower_operand(L, v, 0, x) ? v : -1;
    }
    L->m->nodes[v].nargs = 2;
    if (!lower_operand(L, v, 0, e->a) || !lower_operand(L, v, 1, e->b))
        return -1;
    return v;
}

static ValueId
lower_value(Lower *L, const Ast *e)
{
    switch (e->kind) {
    case AST_IDENT: {
        ValueId v = sym_find(L, e->str);
        if (v >= 0)
            return v;
        if (bound_later(L, e->str))
            diag_error(e->loc,
                       "'%s' is used before it is defined; to read its value from the previous step "
                       "write prev(%s)",
                       e->str, e->str);
        else if (module_find_neuron(L->m, e->str) >= 0)
            diag_error(e->loc, "'%s' is a neuron; call it on an input current: %s(x)", e->str, e->str);
        else
            diag_error(e->loc, "unknown name '%s'", e->str);
        return -1;
    }
    case AST_CALL: {
        Op op;
        if (op_lookup(e->str, &op))
            return lower_op_call(L, e, op);
        int ni = module_find_neuron(L->m, e->str);
        if (ni >= 0)
            return lower_neuron_call(L, e, ni);
        NFunc f;
        if (nfunc_lookup(e->str, &f))
            diag_error(e->loc, "%s() is a function for neuron equations, not a layer", e->str);
        else
            diag_error(e->loc, "unknown layer or neuron '%s' (snnc --help-ops lists the layers)",
                       e->str);
        return -1;
    }
    case AST_BINARY:
        return lower_binop(L, e);
    case AST_UNARY:
        if (e->op == '-') {
            L->nested_count++;
            ValueId v = module_add_node(L->m, OP_SCALE, e->loc);
            L->m->nodes[v].nargs = 1;
            L->m->nodes[v].attrs[0].f = -1;
            return lower_operand(L, v, 0, e->a) ? v : -1;
        }
        diag_error(e->loc, "'!' is for neuron equations, not layers");
        return -1;
    default:
        diag_error(e->loc, "expected a layer value, got %s", ast_kind_what(e));
        return -1;
    }
}

static bool
lower_type(const AstType *t, bool is_input, Type *out)
{
    memset(out, 0, sizeof *out);
    if (!dtype_from_name(t->dtype, &out->dtype)) {
        diag_error(t->loc, "unknown element type '%s' (expected f32, f16, bf16, spike or i8)", t->dtype);
        return false;
    }
    int i = 0;
    if (is_input && t->rank == 0) {
        diag_error(t->loc, "an input has at least one dimension (f32[1]: one number a sample)");
        return false;
    }
    if (t->rank > 0 && t->is_sym[0] && t->sym[0] == 'T') {
        out->has_time = true;
        i = 1;
    }
    if (!is_input) {
        if (i == 0 && (t->rank == 0 || !t->is_sym[0])) {
            out->is_weight = true; /* a weight's shape (f32[] a scalar's): grad_weight's */
        } else if (i >= t->rank || !t->is_sym[i] || t->sym[i] != 'B') {
            diag_error(t->loc, "a value type has the form f32[T, B, ...] or f32[B, ...] (a "
                               "weight's gradient: f32[out, in])");
            return false;
        } else {
            i++;
        }
    }
    for (; i < t->rank; i++) {
        if (t->is_sym[i]) {
            diag_error(t->loc,
                       is_input && t->sym[i] == 'B'
                           ? "the batch dimension of an input is implicit: leave out B"
                           : "'%c' may only be the leading dimension",
                       t->sym[i]);
            return false;
        }
        if (t->dims[i] <= 0 || t->dims[i] > ((int64_t)1 << 31)) {
            diag_error(t->loc, "dimension %lld is out of range (1 to 2^31)", (long long)t->dims[i]);
            return false;
        }
        if (out->rank == IR_MAX_RANK) {
            diag_error(t->loc, "at most %d dimensions per sample", IR_MAX_RANK);
            return false;
        }
        out->dims[out->rank++] = t->dims[i];
    }
    int64_t numel = 1;
    for (int k = 0; k < out->rank; k++) {
        numel *= out->dims[k];
        if (numel > ((int64_t)1 << 31)) {
            diag_error(t->loc, "a sample of this type would have more than 2^31 elements");
            return false;
        }
    }
    return true;
}

static bool
int_stmt(const AstStmt *st, const char *what, int64_t lo, int64_t hi, int64_t *out)
{
    double v;
    if (!const_eval(st->a, &v) || v != floor(v) || v < (double)lo || v > (double)hi) {
        diag_error(st->a->loc, "%s must be an integer from %lld to %lld", what, (long long)lo,
                   (long long)hi);
        return false;
    }
    *out = (int64_t)v;
    return true;
}

static bool
name_ok(Lower *L, const AstStmt *st)
{
    if (!L->is_ir && st->name[0] == '%') {
        diag_error(st->loc, "names starting with %% belong to the textual IR (.snnir)");
        return false;
    }
    if (sym_find(L, st->name) >= 0) {
        diag_error(st->loc, "'%s' is already defined", st->name);
        return false;
    }
    return true;
}

static void
annotate(Lower *L, ValueId v, const AstStmt *st)
{
    if (!st->has_type)
        return;
    if (L->nannots == L->capannots) {
        int cap = L->capannots ? 2 * L->capannots : 16;
        L->annots = arena_grow(&L->ast, L->annots, (size_t)L->capannots * sizeof *L->annots,
                               (size_t)cap * sizeof *L->annots);
        L->capannots = cap;
    }
    L->annots[L->nannots].v = v;
    L->annots[L->nannots].type = st->type;
    L->nannots++;
}

/* `word a|b` (schedule, memory, accumulate), given at most once: 0 for a, 1 for b, -1 after an
 * error at the statement */
static int
choice_stmt(const AstStmt *st, const char *word, const char *a, const char *b, int *seen)
{
    if ((*seen)++) {
        diag_error(st->loc, "%s is given twice", word);
        return -1;
    }
    const char *what = st->name ? st->name : "";
    if (strcmp(what, a) == 0) return 0;
    if (strcmp(what, b) == 0) return 1;
    diag_error(st->loc, "%s expects %s or %s, got '%s'", word, a, b, what);
    return -1;
}

/* The keys of a train block (each a --train option, its dashes underscores) and their values: 'i'
 * an integer >= 1, 'n' a number >= 0, 'w' one of `words`, or 'o' a name (an output) */
static const struct {
    const char *key;
    char kind;
    const char *words;
} train_keys[] = {
    {"epochs", 'i', NULL},
    {"batch", 'i', NULL},
    {"loss", 'w', "mse ce ce_count ce_rate mse_count mse_membrane"},
    {"loss_output", 'o', NULL},
    {"optimizer", 'w', "adam adamw sgd"},
    {"lr", 'n', NULL},
    {"momentum", 'n', NULL},
    {"weight_decay", 'n', NULL},
    {"nesterov", 'w', "true false"},
    {"schedule", 'w', "constant cosine step"},
    {"step_size", 'i', NULL},
    {"gamma", 'n', NULL},
    {"clip_grad_norm", 'n', NULL},
};

/* whether word w is one of the space-separated words */
static bool
is_one_of(const char *w, const char *words)
{
    size_t n = strlen(w);
    for (const char *p = words; *p;) {
        size_t k = strcspn(p, " ");
        if (k == n && strncmp(p, w, n) == 0) return true;
        p += k + (p[k] == ' ');
    }
    return false;
}

static bool
lower_train_block(Module *m, const AstStmt *st)
{
    if (m->has_train) {
        diag_error(st->loc, "train is given twice");
        return false;
    }
    m->has_train = true;
    const Ast *call = st->a;
    m->train = arena_alloc(&m->arena, (size_t)(call->nitems + 1) * sizeof *m->train);
    for (int i = 0; i < call->nitems; i++) {
        const Ast *kv = call->items[i];
        int k = -1;
        for (size_t j = 0; j < sizeof train_keys / sizeof train_keys[0] && k < 0; j++)
            if (strcmp(kv->str, train_keys[j].key) == 0) k = (int)j;
        if (k < 0) {
            char list[512] = "";
            for (size_t j = 0; j < sizeof train_keys / sizeof train_keys[0]; j++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", j ? ", " : "",
                         train_keys[j].key);
            diag_error(kv->loc, "unknown train setting '%s' (the settings: %s)", kv->str, list);
            return false;
        }
        for (int j = 0; j < m->ntrain; j++)
            if (strcmp(m->train[j].key, kv->str) == 0) {
                diag_error(kv->loc, "train setting %s is given twice", kv->str);
                return false;
            }
        const Ast *v = kv->a;
        TrainItem *t = &m->train[m->ntrain];
        *t = (TrainItem){train_keys[k].key, NULL, 0, false, kv->loc};
        char kind = train_keys[k].kind;
        if (kind == 'w' || kind == 'o') {
            if (v->kind != AST_IDENT || (kind == 'w' && !is_one_of(v->str, train_keys[k].words))) {
                if (kind == 'w')
                    diag_error(v->loc, "train setting %s expects one of: %s", kv->str,
                               train_keys[k].words);
                else
                    diag_error(v->loc, "train setting %s expects an output's name", kv->str);
                return false;
            }
            t->word = arena_strdup(&m->arena, v->str);
        } else {
            if (v->kind != AST_NUM ||
                (kind == 'i' && (!v->is_int || v->num < 1 || v->num > (1 << 20))) ||
                !(v->num >= 0) || !isfinite(v->num)) {
                diag_error(v->loc, "train setting %s expects %s", kv->str,
                           kind == 'i' ? "a whole number from 1 to 1048576"
                                       : "a number of at least 0");
                return false;
            }
            t->num = v->num;
            t->is_int = v->is_int;
        }
        m->ntrain++;
    }
    return true;
}

static bool
lower_model(Lower *L, const AstItem *it, const char *path)
{
    Module *m = L->m;
    Arena *a = &m->arena;
    m->name = arena_strdup(a, it->name);
    m->loc = it->loc;
    bool has_timesteps = false;
    int has_seed = 0, has_schedule = 0, has_memory = 0, has_accumulate = 0;
    L->nlater = it->nstmts;
    L->later = arena_alloc(&L->ast, (size_t)(it->nstmts + 1) * sizeof *L->later);
    for (int i = 0; i < it->nstmts; i++)
        if (it->stmts[i].kind == MST_BIND || it->stmts[i].kind == MST_OUTPUT ||
            it->stmts[i].kind == MST_INPUT)
            L->later[i] = it->stmts[i].name;
    ValueId *outs = arena_alloc(a, (size_t)(it->nstmts + 1) * sizeof *outs);
    ValueId *ins = arena_alloc(a, (size_t)(it->nstmts + 1) * sizeof *ins);
    for (int i = 0; i < it->nstmts; i++) {
        const AstStmt *st = &it->stmts[i];
        int64_t v64;
        switch (st->kind) {
        case MST_TIMESTEPS:
            if (has_timesteps) {
                diag_error(st->loc, "timesteps is given twice");
                return false;
            }
            if (!int_stmt(st, "timesteps", 1, MAX_TIMESTEPS, &v64))
                return false;
            m->timesteps = (int)v64;
            has_timesteps = true;
            break;
        case MST_SEED:
            if (has_seed++) {
                diag_error(st->loc, "seed is given twice");
                return false;
            }
            if (!int_stmt(st, "seed", 0, ((int64_t)1 << 53), &v64))
                return false;
            m->seed = v64;
            break;
        case MST_SCHEDULE: {
            int k = choice_stmt(st, "schedule", "layer", "step", &has_schedule);
            if (k < 0) return false;
            m->schedule = k ? SCHEDULE_STEP : SCHEDULE_LAYER;
            break;
        }
        case MST_MARK:
            break; /* once every value is bound: below */
        case MST_TRAIN:
            if (!lower_train_block(m, st)) return false;
            break;
        case MST_ACCUMULATE: {
            int k = choice_stmt(st, "accumulate", "exact", "f32", &has_accumulate);
            if (k < 0) return false;
            m->accumulate = k ? ACC_F32 : ACC_EXACT;
            break;
        }
        case MST_MEMORY: {
            int k = choice_stmt(st, "memory", "reuse", "separate", &has_memory);
            if (k < 0) return false;
            m->memory = k ? MEMORY_SEPARATE : MEMORY_REUSE;
            break;
        }
        case MST_WEIGHTS:
            if (m->weights_path) {
                diag_error(st->loc, "weights is given twice");
                return false;
            }
            if (st->a->kind != AST_STR || !st->a->str[0]) {
                diag_error(st->loc, "weights expects a file name in quotes");
                return false;
            }
            m->weights_path = resolve_path(a, path, st->a->str);
            break;
        case MST_INPUT: {
            if (!name_ok(L, st))
                return false;
            Type t;
            if (!lower_type(&st->type, true, &t))
                return false;
            if (t.dtype == DT_I8) {
                diag_error(st->type.loc, "inputs are f32, f16, bf16 or spike");
                return false;
            }
            ValueId v = module_add_node(m, OP_INPUT, st->loc);
            Node *n = &m->nodes[v];
            n->name = arena_strdup(a, st->name);
            n->is_per_step_input = t.has_time;
            t.has_time = true;
            n->type = t;
            ins[m->ninputs++] = v;
            sym_add(L, n->name, v);
            break;
        }
        case MST_BIND:
        case MST_OUTPUT: {
            if (!name_ok(L, st))
                return false;
            if (st->has_loc && (st->at.line < 1 || st->at.col < 1)) {
                diag_error(st->loc, "a loc annotation counts lines and columns from 1");
                return false;
            }
            int first = m->nnodes;
            L->binding = st->name;
            L->nested_count = 0;
            ValueId v = lower_value(L, st->a);
            L->binding = NULL;
            if (v < 0)
                return false;
            bool is_new = v >= first;
            if (st->kind == MST_OUTPUT) {
                Op op = m->nodes[v].op;
                bool is_readout = op == OP_COUNT || op == OP_MEAN || op == OP_LAST || op == OP_MAX ||
                                  op == OP_SEQUENCE;
                if (!is_readout || !is_new) {
                    /* an output of a plain value is its whole sequence */
                    ValueId s = module_add_node(m, OP_SEQUENCE, st->loc);
                    m->nodes[s].nargs = 1;
                    m->nodes[s].args[0] = v;
                    v = s;
                }
                m->nodes[v].is_output = true;
                outs[m->noutputs++] = v;
                is_new = true;
            }
            if (is_new) {
                m->nodes[v].name = st->name[0] == '%' ? NULL : arena_strdup(a, st->name);
                if (st->has_loc)
                    m->nodes[v].loc = st->at;
            } else if (st->has_type || st->has_loc) {
                diag_error(st->loc, "a type or loc annotation needs a new value, not a copy of one");
                return false;
            }
            sym_add(L, arena_strdup(&L->ast, st->name), v);
            annotate(L, v, st);
            break;
        }
        default:
            diag_error(st->loc, "this statement belongs in a neuron, not in model '%s'", m->name);
            return false;
        }
        /* a statement's own name stays "later" while it is lowered: h = LIF(... prev(h) ...) */
        L->later[i] = NULL;
    }
    if (!has_timesteps) {
        diag_error(it->loc, "model '%s' does not say how many timesteps it runs (add: timesteps N)",
                   m->name);
        return false;
    }
    if (m->ninputs == 0) {
        diag_error(it->loc, "model '%s' has no inputs (add e.g.: input x : f32[784])", m->name);
        return false;
    }
    if (m->noutputs == 0) {
        diag_error(it->loc, "model '%s' has no outputs (add e.g.: output rate = mean(s))", m->name);
        return false;
    }
    /* each encoder draws its own random stream, numbered in source order unless given */
    int64_t nstream = 0;
    for (int v = 0; v < m->nnodes; v++) {
        if (m->nodes[v].op != OP_POISSON)
            continue;
        AttrVal *s = &m->nodes[v].attrs[op_attr_index(OP_POISSON, "stream")];
        if (s->i[0] < 0)
            s->i[0] = nstream;
        nstream++;
    }
    for (int i = 0; i < L->nfixups; i++) {
        ValueId v = sym_find(L, L->fixups[i].name);
        if (v < 0)
            die("unresolved fixup %s", L->fixups[i].name);
        m->nodes[L->fixups[i].node].args[L->fixups[i].arg] = v;
    }
    /* the schedule marks (ir/marks.c): the names are values of this model (ir_verify checks that
     * each can be done) */
    for (int i = 0; i < it->nstmts; i++) {
        const AstStmt *st = &it->stmts[i];
        if (st->kind != MST_MARK)
            continue;
        const MarkInfo *mi = mark_info((MarkKind)st->mark);
        ValueId v = sym_find(L, st->name);
        ValueId target = mi->form == MF_INTO ? sym_find(L, st->a->str) : 0;
        if (v < 0 || target < 0) {
            diag_error(v < 0 ? st->loc : st->a->loc, "%s: '%s' is not a value of model '%s'",
                       mi->keyword, v < 0 ? st->name : st->a->str, m->name);
            return false;
        }
        int value = mi->form == MF_INTO ? target + 1 : 1;
        if (mi->form == MF_TYPE) {
            value = -1;
            for (int w = 0; mi->words[w]; w++)
                if (strcmp(mi->words[w], st->a->str) == 0) value = w;
            if (value < 0) {
                diag_error(st->a->loc, mi->bad_word, st->name, st->a->str);
                return false;
            }
        }
        Node *n = &m->nodes[v];
        Loc *at = mi->loc(n);
        if (at->line > 0 || (mi->form != MF_TYPE && mi->get(n))) {
            char msg[256];
            snprintf(msg, sizeof msg, mi->twice, st->name);
            diag_error(st->loc, "%s: %s", mi->keyword, msg);
            return false;
        }
        mi->set(n, value);
        *at = st->loc;
    }
    m->outputs = outs;
    m->inputs = ins;
    return true;
}

/* ---- files ---- */

static bool load_file(Lower *L, const char *path, const char *text, size_t len, bool is_main,
                      const char *model_name, Loc from, int depth, const AstItem **model_out);

static bool
load_include(Lower *L, const AstItem *it, const char *path, int depth)
{
    const char *inc = resolve_path(&L->ast, path, it->name);
    for (int i = 0; i < L->nincluded; i++)
        if (strcmp(L->included[i], inc) == 0)
            return true; /* each file once; also breaks include cycles */
    if (depth >= MAX_INCLUDE_DEPTH) {
        diag_error(it->loc, "includes nested more than %d deep", MAX_INCLUDE_DEPTH);
        return false;
    }
    size_t len;
    char *text = read_file(&L->ast, inc, &len);
    if (!text) {
        diag_error(it->loc, "cannot read included file '%s': %s", it->name,
                   errno == EINVAL ? "not a regular file" : strerror(errno));
        return false;
    }
    L->included = arena_grow(&L->ast, L->included, (size_t)L->nincluded * sizeof *L->included,
                             (size_t)(L->nincluded + 1) * sizeof *L->included);
    L->included[L->nincluded++] = inc;
    return load_file(L, inc, text, len, false, NULL, it->loc, depth + 1, NULL);
}

static bool
load_file(Lower *L, const char *path, const char *text, size_t len, bool is_main,
          const char *model_name, Loc from, int depth, const AstItem **model_out)
{
    AstFile *f = fe_parse(&L->ast, path, text, len); /* registers the text for diagnostics */
    if (!f)
        return false;
    const AstItem *model = NULL;
    int nmodels = 0;
    for (int i = 0; i < f->nitems; i++) {
        const AstItem *it = &f->items[i];
        switch (it->kind) {
        case ITEM_INCLUDE:
            if (!load_include(L, it, path, depth))
                return false;
            break;
        case ITEM_NEURON:
            if (!lower_neuron(L, it))
                return false;
            break;
        case ITEM_MODEL:
            if (!is_main) {
                diag_error(it->loc, "an included file may define neurons only; model '%s' belongs "
                                    "in the main file",
                           it->name);
                diag_note(from, "included from here");
                return false;
            }
            nmodels++;
            if (!model_name || strcmp(it->name, model_name) == 0)
                model = it;
            break;
        }
    }
    if (!is_main)
        return true;
    if (model_name && !model) {
        diag_file_error(path, "no model named '%s' in this file", model_name);
        return false;
    }
    if (!model) {
        diag_file_error(path, "no model in this file (a model starts with: model NAME { ... })");
        return false;
    }
    if (!model_name && nmodels > 1) {
        diag_error(model->loc, "this file defines %d models; choose one with --model NAME", nmodels);
        return false;
    }
    *model_out = model;
    return true;
}

static bool
check_annotations(Lower *L)
{
    bool ok = true;
    for (int i = 0; i < L->nannots; i++) {
        Type want;
        const Node *n = &L->m->nodes[L->annots[i].v];
        if (!lower_type(&L->annots[i].type, false, &want)) {
            ok = false;
            continue;
        }
        if (!type_equal(&want, &n->type)) {
            char a[128], b[128];
            diag_error(L->annots[i].type.loc, "type annotation %s does not match the inferred type %s",
                       type_str(&want, a, sizeof a), type_str(&n->type, b, sizeof b));
            ok = false;
        }
    }
    return ok;
}

Module *
fe_load_text(const char *path, const char *text, size_t len, const char *model_name)
{
    Lower L = {0};
    L.m = module_new();
    L.is_ir = has_suffix(path, ".snnir");
    bool ok = true;
    if (!L.is_ir) {
        Loc none = {0};
        ok = load_file(&L, fe_prelude_name, fe_prelude_text, strlen(fe_prelude_text), false, NULL,
                       none, 0, NULL);
        if (!ok)
            die("the built-in prelude does not compile");
    }
    L.nuser_neurons_start = L.m->nneurons;
    /* an include cycle back to the main file is a file already read */
    L.included = arena_alloc(&L.ast, sizeof *L.included);
    L.included[L.nincluded++] = resolve_path(&L.ast, ".", path);
    const AstItem *model = NULL;
    Loc none = {0};
    ok = load_file(&L, path, text, len, true, model_name, none, 0, &model) &&
         lower_model(&L, model, path) && ir_verify(L.m) && ir_infer(L.m);
    /* a train-step module's backward (--train --emit=ir) is checked, then left: what reads a
     * model runs its forward (its marks checked on it), and --train derives the backward again
     * (ir_grad) */
    if (ok) module_drop_backward(L.m);
    ok = ok && ir_verify_fusions(L.m) && check_annotations(&L);
    if (ok) {
        /* included[0] is the main file's name, which fe_load adds if it is a file */
        L.m->files = arena_alloc(&L.m->arena, (size_t)L.nincluded * sizeof *L.m->files);
        for (int i = 1; i < L.nincluded; i++)
            L.m->files[L.m->nfiles++] = arena_strdup(&L.m->arena, L.included[i]);
    }
    arena_free(&L.ast);
    if (!ok || diag_error_count() > 0) {
        module_free(L.m);
        return NULL;
    }
    return L.m;
}

Module *
fe_load(const char *path, const char *model_name)
{
    Arena tmp = {0};
    size_t len;
    char *text = read_file(&tmp, path, &len);
    if (!text) {
        diag_file_error(path, "cannot read: %s", errno == EINVAL ? "not a regular file" : strerror(errno));
        arena_free(&tmp);
        return NULL;
    }
    Module *m = fe_load_text(path, text, len, model_name);
    arena_free(&tmp);
    if (m) {
        m->files = arena_grow(&m->arena, m->files, (size_t)m->nfiles * sizeof *m->files,
                              (size_t)(m->nfiles + 1) * sizeof *m->files);
        memmove(m->files + 1, m->files, (size_t)m->nfiles * sizeof *m->files);
        m->files[0] = arena_strdup(&m->arena, path);
        m->nfiles++;
    }
    return m;
}
