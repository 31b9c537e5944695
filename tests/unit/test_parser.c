/* test_parser.c: unit test of the frontend's scanner and parser (fe_parse). Valid snippets are
 * checked by printing their AST as S-expressions, invalid ones by the whole first line of their one
 * diagnostic. Uses only fe_parse, the arena and diag (links against snnfe, or by hand against the
 * generated parser.c and lexer.c with ir/arena.c and ir/diag.c). */
#include "frontend/frontend.h"

#include <stdlib.h>
#include <string.h>

#include "tests/unit/check.h"

/* ---- an S-expression printer for the AST ---- */

typedef struct Buf {
    char *s;
    size_t n;
    FILE *f;
} Buf;

static const char *
binop_str(int op)
{
    static const char *names[] = {"+", "-", "*", "/", "<", "<=", ">", ">=", "==", "!=", "&&", "||"};
    return op >= 0 && op < (int)(sizeof names / sizeof names[0]) ? names[op] : "?";
}

static void
put_expr(FILE *f, const Ast *e)
{
    if (!e) {
        fputs("NULL", f);
        return;
    }
    switch (e->kind) {
    case AST_NUM:
        if (e->is_int)
            fprintf(f, "%lld", (long long)e->num);
        else
            fprintf(f, "%gf", e->num);
        break;
    case AST_STR: fprintf(f, "\"%s\"", e->str); break;
    case AST_IDENT: fputs(e->str, f); break;
    case AST_CALL:
    case AST_TUPLE:
        fprintf(f, "(%s", e->kind == AST_CALL ? e->str : "tuple");
        for (int i = 0; i < e->nitems; i++) {
            fputc(' ', f);
            put_expr(f, e->items[i]);
        }
        fputc(')', f);
        break;
    case AST_KWARG:
        fprintf(f, "(= %s ", e->str);
        put_expr(f, e->a);
        fputc(')', f);
        break;
    case AST_UNARY:
        fprintf(f, "(%c ", e->op);
        put_expr(f, e->a);
        fputc(')', f);
        break;
    case AST_BINARY:
        fprintf(f, "(%s ", binop_str(e->op));
        put_expr(f, e->a);
        fputc(' ', f);
        put_expr(f, e->b);
        fputc(')', f);
        break;
    case AST_COND:
        fputs("(? ", f);
        put_expr(f, e->a);
        fputc(' ', f);
        put_expr(f, e->b);
        fputc(' ', f);
        put_expr(f, e->c);
        fputc(')', f);
        break;
    }
}

static void
put_type(FILE *f, const AstType *t)
{
    fprintf(f, " : %s[", t->dtype);
    for (int i = 0; i < t->rank; i++) {
        if (i)
            fputs(", ", f);
        if (t->is_sym[i])
            fputc(t->sym[i], f);
        else
            fprintf(f, "%lld", (long long)t->dims[i]);
    }
    fputc(']', f);
}

static const char *stmt_names[] = {
    "state", "let", "assign", "fire", "fire_down", "reset_to", "reset_sub", "refractory",
    "output", "surrogate", "timesteps", "weights", "seed", "input", "bind", "out", "schedule",
    "memory", "accumulate", "mark",
};

static void
put_file(FILE *f, const AstFile *file)
{
    for (int i = 0; i < file->nitems; i++) {
        const AstItem *it = &file->items[i];
        if (i)
            fputc('\n', f);
        switch (it->kind) {
        case ITEM_INCLUDE: fprintf(f, "include \"%s\"", it->name); continue;
        case ITEM_NEURON:
            fprintf(f, "neuron %s(", it->name);
            for (int j = 0; j < it->nparams; j++) {
                fprintf(f, "%s%s", j ? " " : "", it->params[j].name);
                if (it->params[j].def) {
                    fputc('=', f);
                    put_expr(f, it->params[j].def);
                }
            }
            fputc(')', f);
            break;
        case ITEM_MODEL: fprintf(f, "model %s", it->name); break;
        }
        for (int j = 0; j < it->nstmts; j++) {
            const AstStmt *s = &it->stmts[j];
            fprintf(f, "; %s", s->kind == MST_MARK ? mark_info((MarkKind)s->mark)->keyword
                                                    : stmt_names[s->kind]);
            if (s->name)
                fprintf(f, " %s", s->name);
            if (s->a) {
                fputc(' ', f);
                put_expr(f, s->a);
            }
            if (s->has_type)
                put_type(f, &s->type);
            if (s->has_loc)
                fprintf(f, " @%s:%d:%d", s->at.file, s->at.line, s->at.col);
        }
    }
}

/* ---- checks ---- */

static char *diag_text;
static size_t diag_len;
static FILE *diag_mem;

static void
diag_begin(void)
{
    diag_reset();
    diag_mem = open_memstream(&diag_text, &diag_len);
    diag_set_stream(diag_mem);
}

static void
diag_end(void)
{
    fclose(diag_mem);
    diag_set_stream(NULL);
}

static AstFile *
parse(Arena *a, const char *src)
{
    return fe_parse(a, "t.snn", src, strlen(src));
}

/* src parses, and its AST prints as want */
static void
ok(int line, const char *src, const char *want)
{
    Arena a = {0};
    diag_begin();
    AstFile *f = parse(&a, src);
    diag_end();
    if (!f) {
        printf("test_parser.c:%d: FAIL: parse failed:\n%s", line, diag_text);
        nfail++;
    } else {
        char *got;
        size_t n;
        FILE *m = open_memstream(&got, &n);
        put_file(m, f);
        fclose(m);
        if (strcmp(got, want) != 0) {
            printf("test_parser.c:%d: FAIL\n  want: %s\n  got:  %s\n", line, want, got);
            nfail++;
        } else {
            npass++;
        }
        free(got);
    }
    free(diag_text);
    arena_free(&a);
}

/* src fails with exactly one error whose first line is want */
static void
bad_n(int line, const char *src, size_t len, const char *want)
{
    Arena a = {0};
    diag_begin();
    AstFile *f = fe_parse(&a, "t.snn", src, len);
    int nerr = diag_error_count();
    diag_end();
    const char *nl = strchr(diag_text, '\n');
    size_t first = nl ? (size_t)(nl - diag_text) : strlen(diag_text);
    if (f || nerr != 1 || first != strlen(want) || memcmp(diag_text, want, first) != 0) {
        printf("test_parser.c:%d: FAIL (%s, %d errors)\n  want: %s\n  got:  %s\n", line,
               f ? "parsed" : "rejected", nerr, want, diag_text);
        nfail++;
    } else {
        npass++;
    }
    free(diag_text);
    arena_free(&a);
}

static void
bad(int line, const char *src, const char *want)
{
    bad_n(line, src, strlen(src), want);
}

#define OK(src, want) ok(__LINE__, src, want)
#define BAD(src, want) bad(__LINE__, src, want)

static void
test_valid(void)
{
    OK("", "");
    OK("# only a comment\n// and another\n;", "");
    OK("include \"lib/neurons.snn\"", "include \"lib/neurons.snn\"");

    /* a neuron with every statement kind, no separators, one optional ';' */
    OK("neuron N(tau = 2.0, v_th, down = -1,) {\n"
       "  state v = 0.0  let dv = (I - v) / tau; v = v + dv\n"
       "  fire v >= v_th fire down v < -v_th\n"
       "  reset v = 0 reset v -= v_th\n"
       "  refractory 2 output spike * v\n"
       "  surrogate atan(alpha = 2.0)\n"
       "}",
       "neuron N(tau=2f v_th down=(- 1)); state v 0f; let dv (/ (- I v) tau); assign v (+ v dv); "
       "fire (>= v v_th); fire_down (< v (- v_th)); reset_to v 0; reset_sub v v_th; "
       "refractory 2; output (* spike v); surrogate (atan (= alpha 2f))");
    OK("neuron E() { surrogate none }", "neuron E(); surrogate none");
    /* "down" is a name except right after "fire" */
    OK("neuron D(down) { state down = 1 fire down - down }",
       "neuron D(down); state down 1; fire_down (- down)");

    /* a model with every statement kind */
    OK("model m {\n"
       "  timesteps 8 weights \"w.safetensors\" seed 42\n"
       "  input image : f32[1, 28, 28]\n"
       "  fc1 = dense(flatten(image), 256)\n"
       "  s1 = LIF(fc1, tau = 2.0, v_reset = -0.5) : spike[T, B, 256]\n"
       "  output rate = mean(s1)\n"
       "}",
       "model m; timesteps 8; weights \"w.safetensors\"; seed 42; input image : f32[1, 28, 28]; "
       "bind fc1 (dense (flatten image) 256); "
       "bind s1 (LIF fc1 (= tau 2f) (= v_reset (- 0.5f))) : spike[T, B, 256]; "
       "out rate (mean s1)");

    /* IR text: value names, types and loc annotations, tuples, kwargs */
    OK("model net {\n"
       "  timesteps 4\n"
       "  input %x : f32[T, B, 2, 8, 8]\n"
       "  %0 = conv2d(%x, out = 4, kernel = (3, 3), stride = [1], name = \"c1\") : "
       "f32[T, B, 4, 6, 6] loc(\"net.snn\":5:3)\n"
       "  %fc1.w = linear(%0, bias = true, flag = false) loc(\"net.snn\":6:1)\n"
       "  output %out = %fc1.w : f32[T, B, 10] ;\n"
       "}",
       "model net; timesteps 4; input %x : f32[T, B, 2, 8, 8]; "
       "bind %0 (conv2d %x (= out 4) (= kernel (tuple 3 3)) (= stride (tuple 1)) (= name \"c1\")) "
       ": f32[T, B, 4, 6, 6] @net.snn:5:3; "
       "bind %fc1.w (linear %0 (= bias true) (= flag false)) @net.snn:6:1; "
       "out %out %fc1.w : f32[T, B, 10]");

    /* ops may share a statement keyword's name: before '(' in an expression, it is a callee */
    OK("model k { output v = sequence(state(s, \"v\")) x = input(seed(), output(1)) y = not(z) }",
       "model k; out v (sequence (state s \"v\")); bind x (input (seed) (output 1)); bind y (! z)");
    OK("model k { x = poisson(image, seed = -1, input = 2) }",
       "model k; bind x (poisson image (= seed (- 1)) (= input 2))");
    OK("neuron k() { fire fire(x) fire (x) state s = state(1) }",
       "neuron k(); fire (fire x); fire x; state s (state 1)");

    /* precedence and associativity */
    OK("model p { a = 1 + 2 * 3 - 4 / 5 }", "model p; bind a (- (+ 1 (* 2 3)) (/ 4 5))");
    OK("model p { a = -x * -y + !z }", "model p; bind a (+ (* (- x) (- y)) (! z))");
    OK("model p { a = x < 1 || y >= 2 && not z == w or u != v and !t }",
       "model p; bind a (|| (|| (< x 1) (&& (>= y 2) (== (! z) w))) (&& (!= u v) (! t)))");
    OK("model p { a = c ? x : d ? y : z  b = (c ? x : y) ? 1 : 2 }",
       "model p; bind a (? c x (? d y z)); bind b (? (? c x y) 1 2)");
    OK("model p { a = ((x)) b = (1, 2,) c = [x,] d = f() e = g(1, k = 2,) }",
       "model p; bind a x; bind b (tuple 1 2); bind c (tuple x); bind d (f); "
       "bind e (g 1 (= k 2))");
    /* numbers and strings */
    OK("model p { a = [0, 12, 1.5, .5, 1e-5, 2.5E+3, 1., 9007199254740992, 1e-310] "
       "weights \"a\\\"b\\\\c\\td\" }",
       "model p; bind a (tuple 0 12 1.5f 0.5f 1e-05f 2500f 1f 9007199254740992 1e-310f); "
       "weights \"a\"b\\c\td\"");
    OK("model\tp\r\n{ x = 1 }", "model p; bind x 1");
    /* weight storage: `weights NAME : TYPE` beside `weights "FILE"` */
    OK("model p { weights \"w\" d = 1 weights d : f16 weights e : bf16 }",
       "model p; weights \"w\"; bind d 1; weights d f16; weights e bf16");
    /* spike layout: `layout NAME : bits` (`layout` a word only there) */
    OK("model p { layout s : bits layout t : bytes layout = 2 }",
       "model p; layout s bits; layout t bytes; bind layout 2");
    /* scan epilogue: `epilogue LAYER` (a word only there) */
    OK("model p { events c epilogue d epilogue = 3 }",
       "model p; events c; epilogue d; bind epilogue 3");
}

/* locations: every node at its first token, statements at theirs, binds at the name */
static void
test_locations(void)
{
    Arena a = {0};
    diag_begin();
    AstFile *f = parse(&a, "neuron N(x) {\n"
                           "\tv = (a + b) * c\n"
                           "}\n"
                           "model m {\n"
                           "  output  %o = f(k = 1)\n"
                           "}");
    diag_end();
    int bad_locs = 0;
#define LOC_IS(l, ln, cl)                                                                        \
    do {                                                                                         \
        if ((l).line != (ln) || (l).col != (cl) || !(l).file || strcmp((l).file, "t.snn")) {      \
            printf("test_parser.c:%d: FAIL: loc %d:%d, want %d:%d\n", __LINE__, (l).line,         \
                   (l).col, ln, cl);                                                             \
            bad_locs++;                                                                          \
        }                                                                                        \
    } while (0)
    if (!f) {
        printf("test_parser.c:%d: FAIL: %s", __LINE__, diag_text);
        nfail++;
    } else {
        const AstItem *n = &f->items[0], *m = &f->items[1];
        LOC_IS(n->loc, 1, 1);
        LOC_IS(n->params[0].loc, 1, 10);
        const AstStmt *s = &n->stmts[0];
        LOC_IS(s->loc, 2, 2);
        LOC_IS(s->a->loc, 2, 6);    /* (a + b) * c: its first token, '(' */
        LOC_IS(s->a->a->loc, 2, 7); /* a + b */
        LOC_IS(s->a->b->loc, 2, 16);
        LOC_IS(m->loc, 4, 1);
        LOC_IS(m->stmts[0].loc, 5, 11); /* the bound name */
        LOC_IS(m->stmts[0].a->loc, 5, 16);
        LOC_IS(m->stmts[0].a->items[0]->loc, 5, 18);
        if (strcmp(f->path, "t.snn") != 0)
            bad_locs++;
        if (bad_locs)
            nfail++;
        else
            npass++;
    }
    free(diag_text);
    arena_free(&a);
}

static void
test_invalid(void)
{
    BAD("model m { a = f(1, ) ) }",
        "t.snn:1:22: error: unexpected ')', expected an operator, a statement or '}'");
    BAD("model m {\n  a = (1 + )\n}",
        "t.snn:2:12: error: unexpected ')', expected an expression");
    BAD("neuron n() {\n  v = 1\n",
        "t.snn:2:8: error: unexpected end of file, expected an operator, a statement or '}'");
    BAD("model m { x = a ? b }", "t.snn:1:21: error: unexpected '}', expected an operator or ':'");
    BAD("model m { x = f(g(1) = 2) }",
        "t.snn:1:22: error: unexpected '=', expected an operator, ')' or ','");
    BAD("model m { timesteps }", "t.snn:1:21: error: unexpected '}', expected an expression");
    BAD("model m { foo }",
        "t.snn:1:15: error: unexpected '}', expected an identifier, a value name, '=' or '{'");
    BAD("model m { foo bar }",
        "t.snn:1:11: error: unexpected 'foo bar': a model statement is NAME = ..., output, input, "
        "timesteps, seed, weights, schedule, memory, accumulate, events, epilogue, layout, "
        "activations or fuse");
    BAD("model m { foo bar : bits }",
        "t.snn:1:11: error: unexpected 'foo bar :': a statement 'NAME VALUE : WHAT' is 'weights "
        "LAYER : f16|bf16|f32', 'activations LAYER : f16|bf16|f32' or 'layout VALUE : bits|bytes'");
    BAD("model m { fire x }", "t.snn:1:11: error: unexpected 'fire', expected a statement or '}'");
    BAD("neuron n() { foo bar }", "t.snn:1:18: error: unexpected identifier 'bar', expected '='");
    BAD("neuron n { }", "t.snn:1:10: error: unexpected '{', expected '('");
    BAD("neuron 3() { }", "t.snn:1:8: error: unexpected number '3', expected an identifier");
    BAD("model m { a = 1 < 2 < 3 }",
        "t.snn:1:21: error: unexpected '<': comparisons do not chain (write a < b && b < c)");
    BAD("model m { a = 1 == 2 != 3 }",
        "t.snn:1:22: error: unexpected '!=': comparisons do not chain (write a < b && b < c)");
    BAD("model m { a = (1,) }", "t.snn:1:18: error: unexpected ')', expected an expression");
    BAD("model m { input x f32[1] }",
        "t.snn:1:19: error: unexpected identifier 'f32', expected ':'");
    BAD("model m { input x : f32[Q] }",
        "t.snn:1:25: error: unknown dimension 'Q' (expected a number, T or B)");
    BAD("model m { input x : f32[1.5] }", "t.snn:1:25: error: a dimension must be an integer");
    BAD("model m { input x : f32[1,2,3,4,5,6,7,8,9] }",
        "t.snn:1:41: error: too many dimensions (at most 8)");
    BAD("model m { a = b loc(\"f\":1.5:2) }",
        "t.snn:1:25: error: a location's line and column must be integers (at most 2^31 - 1)");
    BAD("model m { a = b loc(\"f\":1.5:2.5) }",
        "t.snn:1:25: error: a location's line and column must be integers (at most 2^31 - 1)");
    BAD("model m { a = b loc(\"f\":1:2147483648) }",
        "t.snn:1:27: error: a location's line and column must be integers (at most 2^31 - 1)");
    BAD("model m { a = 1e999 }", "t.snn:1:15: error: number out of range '1e999'");
    BAD("model m { a = 1e-999 }",
        "t.snn:1:15: error: number out of range '1e-999' (too small: it would round to 0)");
    BAD("model m { a = 9007199254740993 }",
        "t.snn:1:15: error: integer out of range '9007199254740993' (the largest is 2^53 = "
        "9007199254740992)");
    BAD("model m { a = 12abc }", "t.snn:1:15: error: invalid number '12abc'");
    BAD("model m { a = 1.2.3 }", "t.snn:1:15: error: invalid number '1.2.3'");
    BAD("model m { weights \"abc\n\" }",
        "t.snn:1:19: error: unterminated string (a string ends on its line)");
    BAD("model m { weights \"a\\qb\" }",
        "t.snn:1:21: error: unknown escape '\\q' in string (known: \\\" \\\\ \\n \\t)");
    BAD("model m { a = b $ }", "t.snn:1:17: error: unexpected character '$'");
    BAD("model m { a = b & c }", "t.snn:1:17: error: unexpected character '&'");
    BAD("model m { a = \xc3\xa9 }",
        "t.snn:1:15: error: unexpected character '\\xc3' (non-ASCII text is allowed only in "
        "comments and strings)");
    BAD("model m { % = 1 }", "t.snn:1:11: error: unexpected character '%'");
    BAD("model m { a = \"x\" + }", "t.snn:1:21: error: unexpected '}', expected an expression");
    BAD("model m { \"x\" = 1 }", "t.snn:1:11: error: unexpected string \"x\", expected a statement "
                                "or '}'");
    BAD("model m { model = 1 }",
        "t.snn:1:11: error: unexpected 'model', expected a statement or '}'");
    BAD("model m { a = x -= 1 }",
        "t.snn:1:17: error: unexpected '-=', expected an operator, a statement or '}'");
    BAD("neuron n() { reset v += 1 }", "t.snn:1:22: error: unexpected '+', expected '-=' or '='");
    BAD("model m {", "t.snn:1:10: error: unexpected end of file, expected a statement or '}'");
    BAD("model", "t.snn:1:6: error: unexpected end of file, expected an identifier");
    BAD("x", "t.snn:1:1: error: unexpected identifier 'x', expected end of file, 'include', "
             "'neuron' or 'model'");
}

/* NUL bytes: the length is authoritative */
static void
test_nul(void)
{
    bad_n(__LINE__, "model m { a = 1 \0 }", 19, "t.snn:1:17: error: unexpected character '\\x00'");
    bad_n(__LINE__, "model m { weights \"a\0\" }", 24,
          "t.snn:1:19: error: NUL character in string");
    ok(__LINE__, "model m { a = 1 } # \0 in a comment", "model m; bind a 1");
    /* not NUL-terminated: the parser must not read past len */
    char *buf = malloc(9);
    memcpy(buf, "model m {", 9);
    bad_n(__LINE__, buf, 9,
          "t.snn:1:10: error: unexpected end of file, expected a statement or '}'");
    free(buf);
}

/* nesting: a clean error, never a crash */
static void
test_nesting(void)
{
    size_t n = 100000;
    char *s = malloc(n + 32);
    strcpy(s, "model m { a = ");
    size_t k = strlen(s);
    for (size_t i = 0; i < n; i++)
        s[k++] = '(';
    s[k] = 0;
    bad_n(__LINE__, s, k, "t.snn:1:2006: error: expression nested too deeply");
    k = strlen("model m { a = ");
    for (size_t i = 0; i < n; i++)
        s[k++] = '-';
    s[k++] = 'x';
    s[k] = 0;
    bad_n(__LINE__, s, k, "t.snn:1:2006: error: expression nested too deeply");
    /* long left-associative chains are bounded too: x+x+...+x */
    k = strlen("model m { a = ");
    for (size_t i = 0; i < n / 2 - 10; i++) {
        s[k++] = 'x';
        s[k++] = '+';
    }
    s[k++] = 'x';
    s[k] = 0;
    bad_n(__LINE__, s, k, "t.snn:1:15: error: expression nested too deeply (more than 500 levels)");
    free(s);
    /* but reasonable depths parse */
    OK("model m { a = ((((((((((((((((((((x)))))))))))))))))))) }", "model m; bind a x");
}

/* the marks table: a model's marks read, printed back, and cleared on a clone (module_clone,
 * module_clear_marks, module_add_output) without touching the model */
static void
test_marks(void)
{
    const char *text = "model m {\n  timesteps 2\n  input x : spike[T, 8]\n  h = dense(x, 40)\n"
                       "  s = IF(h)\n  p = dense(s, 3)\n  output o = sequence(p)\n  events p\n"
                       "  weights h : f16\n  layout s : bits\n}\n";
    Module *m = fe_load_text("marks.snn", text, strlen(text), NULL);
    CHECK(m != NULL);
    if (!m) return;
    ValueId h = module_find_value(m, "h"), s = module_find_value(m, "s");
    ValueId p = module_find_value(m, "p");
    CHECK(h >= 0 && s >= 0 && p >= 0);
    CHECK(m->nodes[p].is_events && m->nodes[h].wstore == WSTORE_F16);
    CHECK(m->nodes[s].layout == SPIKES_BITS && m->nodes[s].layout_loc.line == 10);
    CHECK(mark_find("events", MF_NODE) == MARK_EVENTS && mark_find("events", MF_TYPE) < 0);
    CHECK(mark_find("layout", MF_TYPE) == MARK_LAYOUT && mark_find("fuse", MF_INTO) == MARK_FUSE);
    char *ir = ir_print_to_string(m);
    CHECK(strstr(ir, "  events p\n  weights h : f16\n  layout s : bits\n") != NULL);
    free(ir);
    Module *c = module_clone(m);
    module_clear_marks(c);
    int nout = c->noutputs, nn = c->nnodes;
    ValueId o = module_add_output(c, s, "probe");
    CHECK(c->noutputs == nout + 1 && c->nnodes == nn + 1 && c->outputs[nout] == o);
    CHECK(c->nodes[o].type.has_time && c->nodes[o].type.dtype == m->nodes[s].type.dtype);
    CHECK(!c->nodes[p].is_events && c->nodes[h].wstore == WSTORE_F32);
    CHECK(c->nodes[s].layout == SPIKES_BYTES && c->nodes[s].layout_loc.line == 0);
    for (int k = 0; k < MARK_COUNT; k++)
        for (int v = 0; v < c->nnodes; v++)
            CHECK(!mark_is_printed(&c->nodes[v], (MarkKind)k));
    /* the model keeps its marks and outputs */
    CHECK(m->nodes[p].is_events && m->nodes[h].wstore == WSTORE_F16);
    CHECK(m->nodes[s].layout == SPIKES_BITS && m->noutputs == nout && m->nnodes == nn);
    module_free(c);
    module_free(m);
}

int
main(void)
{
    test_marks();
    test_valid();
    test_locations();
    test_invalid();
    test_nul();
    test_nesting();
    diag_reset();
    printf("test_parser: %d passed, %d failed\n", npass, nfail);
    return nfail ? 1 : 0;
}
