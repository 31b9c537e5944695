/* The grammar of .snn and .snnir text → the AST of frontend.h (fe_parse). A pure LALR(1) parser
 * with no conflicts (%expect 0) and no error recovery: the first syntax error is reported through
 * diag_error, naming the unexpected token and what was expected, and the parse returns NULL.
 * Everything it builds lives in the caller's arena; it prints nothing but diagnostics. */

%require "3.6"
%define api.pure full
%define api.prefix {fe_yy}
%define api.token.prefix {TOK_}
%define api.location.type {Loc}
%define parse.error custom
%define parse.lac full
%locations
%expect 0

%parse-param {yyscan_t scanner} {FeParser *p}
%lex-param {yyscan_t scanner}

%code requires {
#include "frontend/frontend.h"

#ifndef YY_TYPEDEF_YY_SCANNER_T
#define YY_TYPEDEF_YY_SCANNER_T
typedef void *yyscan_t;
#endif

/* The state one fe_parse call shares between its scanner (as yyextra) and its parser. */
typedef struct FeParser {
    Arena *arena;
    const char *file; /* interned */
    const char *text;
    size_t len;
    size_t off;       /* scanner cursor: byte offset, line and column (1-based, bytes) */
    int line, col;
    size_t tok_off, tok_len; /* the last token's text: error messages quote it */
    int last;         /* the last token's kind */
    Loc end;          /* just past the last token: where "end of file" is reported */
    bool failed;      /* an error has been reported */
    AstFile *result;
} FeParser;

/* An expression under construction and the depth of its tree: walkers downstream recurse over the
 * AST, so its depth is bounded (FE_MAX_DEPTH) whatever the input. */
typedef struct FeExpr {
    Ast *ast;
    int depth;
} FeExpr;

/* A growing array in the arena (items, statements, parameters, expressions). */
typedef struct FeList {
    void *data;
    int n, cap;
    int depth; /* expression lists: the deepest element */
} FeList;

#define FE_TOKEN_QUOTE_MAX 64

Ast *fe_ast_new(Arena *arena, AstKind kind, Loc loc);
/* The last token's text as an error message quotes it: 'foo', ')', "a string"; shortened and with
 * control and non-ASCII bytes escaped. Returns buf. */
const char *fe_quote_token(const FeParser *p, char *buf, size_t n);
}

%code provides {
int fe_yylex(FE_YYSTYPE *val, Loc *loc, yyscan_t scanner);
}

%code {
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Nesting limits. The parse stack bounds parentheses and prefix operators; FE_MAX_DEPTH bounds the
 * AST built from long left-associative chains ("a + a + ... + a"), which need no stack. */
#define YYMAXDEPTH 2000
#define FE_MAX_DEPTH 500

/* A node's location is its first token's. */
#define YYLLOC_DEFAULT(cur, rhs, n)                                                              \
    do {                                                                                         \
        (cur) = (n) ? YYRHSLOC(rhs, 1) : YYRHSLOC(rhs, 0);                                        \
    } while (0)

/* The scanner (lexer.l) as seen from here; its own header is not needed. */
int fe_yylex_init_extra(FeParser *extra, yyscan_t *scanner);
int fe_yylex_destroy(yyscan_t scanner);
struct yy_buffer_state *fe_yy_scan_bytes(const char *bytes, int len, yyscan_t scanner);

static void fe_yyerror(const Loc *loc, yyscan_t scanner, FeParser *p, const char *msg);

#define CHECK()                                                                                  \
    do {                                                                                         \
        if (p->failed)                                                                           \
            YYABORT;                                                                             \
    } while (0)

/* Report an error unless one has been: the parse stops at the first. */
static void fail(FeParser *p, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void
fail(FeParser *p, Loc loc, const char *fmt, ...)
{
    if (p->failed)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    diag_error(loc, "%s", msg);
    p->failed = true;
}

static FeList *
list_new(FeParser *p)
{
    return arena_alloc(p->arena, sizeof(FeList));
}

static void
list_push(FeParser *p, FeList *l, const void *elem, size_t size)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 4;
        if (cap > INT_MAX / 2)
            die("list too long");
        l->data = arena_grow(p->arena, l->data, (size_t)l->cap * size, (size_t)cap * size);
        l->cap = cap;
    }
    memcpy((char *)l->data + (size_t)l->n * size, elem, size);
    l->n++;
}

/* An expression list: push e, tracking the deepest element. */
static FeList *
push_expr(FeParser *p, FeList *l, FeExpr e)
{
    if (!l)
        l = list_new(p);
    list_push(p, l, &e.ast, sizeof e.ast);
    if (e.depth > l->depth)
        l->depth = e.depth;
    return l;
}

/* A new interior node of the given depth; the limit error points at its first token. */
static FeExpr
node(FeParser *p, AstKind kind, Loc loc, int depth)
{
    FeExpr e = {fe_ast_new(p->arena, kind, loc), depth};
    if (depth > FE_MAX_DEPTH)
        fail(p, loc, "expression nested too deeply (more than %d levels)", FE_MAX_DEPTH);
    return e;
}

static int
max2(int a, int b)
{
    return a > b ? a : b;
}

static FeExpr
binary(FeParser *p, Loc loc, NxBin op, FeExpr a, FeExpr b)
{
    FeExpr e = node(p, AST_BINARY, loc, 1 + max2(a.depth, b.depth));
    e.ast->op = op;
    e.ast->a = a.ast;
    e.ast->b = b.ast;
    return e;
}

static FeExpr
unary(FeParser *p, Loc loc, int op, FeExpr a)
{
    FeExpr e = node(p, AST_UNARY, loc, 1 + a.depth);
    e.ast->op = op;
    e.ast->a = a.ast;
    return e;
}

/* A keyword used as a name (see word): an identifier with the keyword's text. */
static Ast *
keyword(FeParser *p, Loc loc, const char *word)
{
    Ast *a = fe_ast_new(p->arena, AST_IDENT, loc);
    a->str = word;
    return a;
}

static FeExpr
leaf(Ast *a)
{
    return (FeExpr){a, 1};
}

/* A call or tuple node over a list (first, when given, goes before the list's items). */
static FeExpr
with_items(FeParser *p, AstKind kind, Loc loc, const FeExpr *first, const FeList *l)
{
    int n = (first ? 1 : 0) + (l ? l->n : 0);
    int depth = max2(first ? first->depth : 0, l ? l->depth : 0);
    FeExpr e = node(p, kind, loc, 1 + depth);
    e.ast->items = arena_alloc(p->arena, (size_t)n * sizeof(Ast *));
    if (first)
        e.ast->items[e.ast->nitems++] = first->ast;
    for (int i = 0; l && i < l->n; i++)
        e.ast->items[e.ast->nitems++] = ((Ast **)l->data)[i];
    return e;
}

static AstStmt *
stmt(FeParser *p, StmtKind kind, Loc loc, const Ast *name, FeExpr a)
{
    AstStmt *s = arena_alloc(p->arena, sizeof *s);
    s->kind = kind;
    s->loc = loc;
    s->name = name ? name->str : NULL;
    s->a = a.ast;
    return s;
}

static FeExpr
no_expr(void)
{
    return (FeExpr){NULL, 0};
}

/* dim := INT | T | B */
static void
add_dim(FeParser *p, AstType *t, const Ast *d)
{
    if (p->failed)
        return;
    if (t->rank == IR_MAX_RANK + 2) {
        fail(p, d->loc, "too many dimensions (at most %d)", IR_MAX_RANK + 2);
        return;
    }
    int i = t->rank++;
    if (d->kind == AST_IDENT) {
        if (strcmp(d->str, "T") != 0 && strcmp(d->str, "B") != 0) {
            fail(p, d->loc, "unknown dimension '%.40s' (expected a number, T or B)", d->str);
            return;
        }
        t->is_sym[i] = true;
        t->sym[i] = d->str[0];
        return;
    }
    if (!d->is_int) {
        fail(p, d->loc, "a dimension must be an integer");
        return;
    }
    t->dims[i] = (int64_t)d->num;
}

/* The line or column of a loc(...) annotation. */
static int
loc_number(FeParser *p, const Ast *a)
{
    if (!a->is_int || a->num > INT_MAX) {
        fail(p, a->loc, "a location's line and column must be integers (at most 2^31 - 1)");
        return 0;
    }
    return (int)a->num;
}
}

%union {
    Ast *ast;
    FeExpr x;
    FeList *list;
    AstItem *item;
    AstStmt *stmt;
    AstType *type;
    Loc loc;
}

%token <ast> IDENT "identifier" VALNAME "value name" NUMBER "number" STRING "string"
%token INCLUDE "include" NEURON "neuron" MODEL "model" STATE "state" LET "let" FIRE "fire"
%token DOWN "down" RESET "reset" REFRACTORY "refractory" OUTPUT "output" SURROGATE "surrogate"
%token TIMESTEPS "timesteps" WEIGHTS "weights" SEED "seed" INPUT "input" LOC "loc"
%token SCHEDULE "schedule" FUSE "fuse"
%token TRUE "true" FALSE "false" AND "and" OR "or" NOT "not"
%token ANDAND "&&" OROR "||" LE "<=" GE ">=" EQ "==" NE "!=" SUBEQ "-="
%token PLUS "+" MINUS "-" STAR "*" SLASH "/" LT "<" GT ">" BANG "!" QUESTION "?" COLON ":"
%token ASSIGN "=" LPAREN "(" RPAREN ")" LBRACKET "[" RBRACKET "]" LBRACE "{" RBRACE "}"
%token COMMA "," SEMI ";"

%type <list> items params param_list nstmts mstmts exprs args tstmts
%type <item> item
%type <stmt> nstmt mstmt
%type <ast> name dim word
%type <type> opt_type type dims
%type <loc> opt_loc
%type <x> expr or_e and_e cmp add mul unary primary arg

%start file

%%

/* file := item* */
file:
    items {
        AstFile *f = arena_alloc(p->arena, sizeof *f);
        f->path = p->file;
        f->items = $1->data;
        f->nitems = $1->n;
        p->result = f;
    }
    ;

items:
    %empty { $$ = list_new(p); }
  | items item { list_push(p, $1, $2, sizeof *$2); $$ = $1; }
  | items ";" { $$ = $1; }
    ;

/* item := 'include' STRING
 *       | 'neuron' IDENT '(' params ')' '{' nstmt* '}'
 *       | 'model' IDENT '{' mstmt* '}' */
item:
    INCLUDE STRING {
        $$ = arena_alloc(p->arena, sizeof *$$);
        $$->kind = ITEM_INCLUDE;
        $$->loc = @1;
        $$->name = $2->str;
    }
  | NEURON IDENT "(" params ")" "{" nstmts "}" {
        $$ = arena_alloc(p->arena, sizeof *$$);
        $$->kind = ITEM_NEURON;
        $$->loc = @1;
        $$->name = $2->str;
        $$->params = $4->data;
        $$->nparams = $4->n;
        $$->stmts = $7->data;
        $$->nstmts = $7->n;
    }
  | MODEL IDENT "{" mstmts "}" {
        $$ = arena_alloc(p->arena, sizeof *$$);
        $$->kind = ITEM_MODEL;
        $$->loc = @1;
        $$->name = $2->str;
        $$->stmts = $4->data;
        $$->nstmts = $4->n;
    }
    ;

/* params := [param (',' param)* [',']] ; param := IDENT ['=' expr] */
params:
    %empty { $$ = list_new(p); }
  | param_list
  | param_list ","
    ;

param_list:
    IDENT {
        AstParam pa = {$1->str, @1, NULL};
        $$ = list_new(p);
        list_push(p, $$, &pa, sizeof pa);
    }
  | IDENT "=" expr {
        AstParam pa = {$1->str, @1, $3.ast};
        $$ = list_new(p);
        list_push(p, $$, &pa, sizeof pa);
    }
  | param_list "," IDENT {
        AstParam pa = {$3->str, @3, NULL};
        list_push(p, $1, &pa, sizeof pa);
        $$ = $1;
    }
  | param_list "," IDENT "=" expr {
        AstParam pa = {$3->str, @3, $5.ast};
        list_push(p, $1, &pa, sizeof pa);
        $$ = $1;
    }
    ;

nstmts:
    %empty { $$ = list_new(p); }
  | nstmts nstmt { list_push(p, $1, $2, sizeof *$2); $$ = $1; }
  | nstmts ";" { $$ = $1; }
    ;

/* nstmt := 'state' IDENT '=' expr | 'let' IDENT '=' expr | IDENT '=' expr
 *        | 'fire' ['down'] expr | 'reset' IDENT ('=' | '-=') expr
 *        | 'refractory' expr | 'output' expr | 'surrogate' expr */
nstmt:
    STATE IDENT "=" expr { $$ = stmt(p, NST_STATE, @1, $2, $4); }
  | LET IDENT "=" expr { $$ = stmt(p, NST_LET, @1, $2, $4); }
  | IDENT "=" expr { $$ = stmt(p, NST_ASSIGN, @1, $1, $3); }
  | FIRE expr { $$ = stmt(p, NST_FIRE, @1, NULL, $2); }
  | FIRE DOWN expr { $$ = stmt(p, NST_FIRE_DOWN, @1, NULL, $3); }
  | RESET IDENT "=" expr { $$ = stmt(p, NST_RESET_TO, @1, $2, $4); }
  | RESET IDENT SUBEQ expr { $$ = stmt(p, NST_RESET_SUB, @1, $2, $4); }
  | REFRACTORY expr { $$ = stmt(p, NST_REFRACTORY, @1, NULL, $2); }
  | OUTPUT expr { $$ = stmt(p, NST_OUTPUT, @1, NULL, $2); }
  | SURROGATE expr { $$ = stmt(p, NST_SURROGATE, @1, NULL, $2); }
    ;

mstmts:
    %empty { $$ = list_new(p); }
  | mstmts mstmt { list_push(p, $1, $2, sizeof *$2); $$ = $1; }
  | mstmts ";" { $$ = $1; }
    ;

/* mstmt := 'timesteps' expr | 'weights' STRING | 'weights' name ':' name | 'seed' expr
 *        | 'schedule' name | 'layout' name ':' name | 'activations' name ':' name | 'events' name
 *        | 'fuse' name 'into' name | 'memory' name | 'accumulate' name | 'input' name ':' type
 *        | name '=' expr [':' type] [locann] | 'output' name '=' expr [':' type] [locann] */
mstmt:
    TIMESTEPS expr { $$ = stmt(p, MST_TIMESTEPS, @1, NULL, $2); }
  | WEIGHTS STRING { $$ = stmt(p, MST_WEIGHTS, @1, NULL, leaf($2)); }
  | WEIGHTS name ":" name {
        $$ = stmt(p, MST_MARK, @1, $2, leaf($4));
        $$->mark = MARK_WEIGHTS;
    }
  | SEED expr { $$ = stmt(p, MST_SEED, @1, NULL, $2); }
  | SCHEDULE name { $$ = stmt(p, MST_SCHEDULE, @1, $2, no_expr()); }
  | IDENT name {
        /* words that are statements only here: memory reuse|separate, accumulate exact|f32,
         * events LAYER, epilogue LAYER */
        StmtKind k = MST_MARK;
        int mark = mark_find($1->str, MF_NODE); /* events, epilogue (ir/marks.c) */
        if (strcmp($1->str, "memory") == 0) k = MST_MEMORY;
        else if (strcmp($1->str, "accumulate") == 0) k = MST_ACCUMULATE;
        else if (mark < 0) {
            fail(p, @1, "unexpected '%s %s': a model statement is NAME = ..., output, input, "
                        "timesteps, seed, weights, schedule, memory, accumulate, events, epilogue, "
                        "layout, activations or fuse",
                 $1->str, $2->str);
            YYABORT;
        }
        $$ = stmt(p, k, @1, $2, no_expr());
        $$->mark = mark;
    }
  | IDENT "{" tstmts "}" {
        /* train { key value ... }: the --train settings the model gives */
        if (strcmp($1->str, "train") != 0) {
            fail(p, @1, "unexpected '%s {': the one block in a model is train { ... }", $1->str);
            YYABORT;
        }
        FeExpr items = with_items(p, AST_CALL, @1, NULL, $3);
        items.ast->str = "train";
        $$ = stmt(p, MST_TRAIN, @1, NULL, items);
    }
  | IDENT name ":" name {
        /* layout VALUE : bits|bytes, activations LAYER : f16|bf16|f32 (statement words only
         * here) */
        int mark = mark_find($1->str, MF_TYPE); /* layout, activations (ir/marks.c) */
        if (mark < 0) {
            fail(p, @1, "unexpected '%s %s :': a statement 'NAME VALUE : WHAT' is "
                        "'weights LAYER : f16|bf16|f32', 'activations LAYER : f16|bf16|f32' or "
                        "'layout VALUE : bits|bytes'",
                 $1->str, $2->str);
            YYABORT;
        }
        $$ = stmt(p, MST_MARK, @1, $2, leaf($4));
        $$->mark = mark;
    }
  | FUSE name name name {
        if (strcmp($3->str, "into") != 0) {
            fail(p, @3, "expected 'into' in: fuse VALUE into VALUE, got '%s'", $3->str);
            YYABORT;
        }
        $$ = stmt(p, MST_MARK, @1, $2, leaf($4));
        $$->mark = MARK_FUSE;
    }
  | INPUT name ":" type {
        $$ = stmt(p, MST_INPUT, @1, $2, no_expr());
        $$->has_type = true;
        $$->type = *$4;
    }
  | name "=" expr opt_type opt_loc {
        $$ = stmt(p, MST_BIND, @1, $1, $3);
        if ($4) {
            $$->has_type = true;
            $$->type = *$4;
        }
        $$->has_loc = $5.file != NULL;
        $$->at = $5;
    }
  | OUTPUT name "=" expr opt_type opt_loc {
        $$ = stmt(p, MST_OUTPUT, @2, $2, $4);
        if ($5) {
            $$->has_type = true;
            $$->type = *$5;
        }
        $$->has_loc = $6.file != NULL;
        $$->at = $6;
    }
    ;

/* tstmts := (word expr | ';')*: the settings of a train block */
tstmts:
    %empty { $$ = list_new(p); }
  | tstmts word expr {
        FeExpr kv = node(p, AST_KWARG, @2, 1 + $3.depth);
        kv.ast->str = $2->str;
        kv.ast->a = $3.ast;
        $$ = push_expr(p, $1, kv);
        CHECK();
    }
  | tstmts ";" { $$ = $1; }
    ;

/* name := IDENT | VALNAME */
name:
    IDENT
  | VALNAME
    ;

opt_type:
    %empty { $$ = NULL; }
  | ":" type { $$ = $2; }
    ;

/* type := IDENT '[' dim (',' dim)* ']' | IDENT '[' ']' (a scalar: a learned neuron parameter's
 * gradient) */
type:
    IDENT "[" dims "]" {
        $$ = $3;
        $$->loc = @1;
        $$->dtype = $1->str;
    }
  | IDENT "[" "]" {
        $$ = arena_alloc(p->arena, sizeof *$$);
        memset($$, 0, sizeof *$$);
        $$->loc = @1;
        $$->dtype = $1->str;
    }
    ;

dims:
    dim {
        $$ = arena_alloc(p->arena, sizeof *$$);
        add_dim(p, $$, $1);
        CHECK();
    }
  | dims "," dim {
        add_dim(p, $1, $3);
        CHECK();
        $$ = $1;
    }
    ;

dim:
    NUMBER
  | IDENT
    ;

/* locann := 'loc' '(' STRING ':' INT ':' INT ')' */
opt_loc:
    %empty { $$ = (Loc){NULL, 0, 0}; }
  | LOC "(" STRING ":" NUMBER ":" NUMBER ")" {
        $$.file = diag_intern($3->str);
        $$.line = loc_number(p, $5);
        $$.col = loc_number(p, $7);
        CHECK();
    }
    ;

/* expr := or ['?' expr ':' expr] */
expr:
    or_e
  | or_e "?" expr ":" expr {
        $$ = node(p, AST_COND, @1, 1 + max2($1.depth, max2($3.depth, $5.depth)));
        $$.ast->a = $1.ast;
        $$.ast->b = $3.ast;
        $$.ast->c = $5.ast;
        CHECK();
    }
    ;

/* or := and (('||' | 'or') and)* */
or_e:
    and_e
  | or_e OROR and_e { $$ = binary(p, @1, NB_OR, $1, $3); CHECK(); }
  | or_e OR and_e { $$ = binary(p, @1, NB_OR, $1, $3); CHECK(); }
    ;

/* and := cmp (('&&' | 'and') cmp)* */
and_e:
    cmp
  | and_e ANDAND cmp { $$ = binary(p, @1, NB_AND, $1, $3); CHECK(); }
  | and_e AND cmp { $$ = binary(p, @1, NB_AND, $1, $3); CHECK(); }
    ;

/* cmp := add [('<' | '<=' | '>' | '>=' | '==' | '!=') add]   (non-associative) */
cmp:
    add
  | add "<" add { $$ = binary(p, @1, NB_LT, $1, $3); CHECK(); }
  | add LE add { $$ = binary(p, @1, NB_LE, $1, $3); CHECK(); }
  | add ">" add { $$ = binary(p, @1, NB_GT, $1, $3); CHECK(); }
  | add GE add { $$ = binary(p, @1, NB_GE, $1, $3); CHECK(); }
  | add EQ add { $$ = binary(p, @1, NB_EQ, $1, $3); CHECK(); }
  | add NE add { $$ = binary(p, @1, NB_NE, $1, $3); CHECK(); }
    ;

/* add := mul (('+' | '-') mul)* */
add:
    mul
  | add "+" mul { $$ = binary(p, @1, NB_ADD, $1, $3); CHECK(); }
  | add "-" mul { $$ = binary(p, @1, NB_SUB, $1, $3); CHECK(); }
    ;

/* mul := unary (('*' | '/') unary)* */
mul:
    unary
  | mul "*" unary { $$ = binary(p, @1, NB_MUL, $1, $3); CHECK(); }
  | mul "/" unary { $$ = binary(p, @1, NB_DIV, $1, $3); CHECK(); }
    ;

/* unary := '-' unary | ('!' | 'not') unary | primary */
unary:
    "-" unary { $$ = unary(p, @1, '-', $2); CHECK(); }
  | "!" unary { $$ = unary(p, @1, '!', $2); CHECK(); }
  | NOT unary { $$ = unary(p, @1, '!', $2); CHECK(); }
  | primary
    ;

/* primary := NUMBER | STRING | IDENT | VALNAME | 'true' | 'false'
 *          | word '(' [arg (',' arg)* [',']] ')'
 *          | '(' expr ')' | '(' expr ',' expr (',' expr)* [','] ')'
 *          | '[' expr (',' expr)* [','] ']' */
primary:
    NUMBER { $$ = leaf($1); }
  | STRING { $$ = leaf($1); }
  | IDENT { $$ = leaf($1); }
  | VALNAME { $$ = leaf($1); }
  | TRUE {
        $$ = leaf(fe_ast_new(p->arena, AST_IDENT, @1));
        $$.ast->str = "true";
    }
  | FALSE {
        $$ = leaf(fe_ast_new(p->arena, AST_IDENT, @1));
        $$.ast->str = "false";
    }
  | word "(" ")" {
        $$ = with_items(p, AST_CALL, @1, NULL, NULL);
        $$.ast->str = $1->str;
        CHECK();
    }
  | word "(" args ")" {
        $$ = with_items(p, AST_CALL, @1, NULL, $3);
        $$.ast->str = $1->str;
        CHECK();
    }
  | word "(" args "," ")" {
        $$ = with_items(p, AST_CALL, @1, NULL, $3);
        $$.ast->str = $1->str;
        CHECK();
    }
  | "(" expr ")" { $$ = $2; }
  | "(" expr "," exprs ")" { $$ = with_items(p, AST_TUPLE, @1, &$2, $4); CHECK(); }
  | "(" expr "," exprs "," ")" { $$ = with_items(p, AST_TUPLE, @1, &$2, $4); CHECK(); }
  | "[" exprs "]" { $$ = with_items(p, AST_TUPLE, @1, NULL, $2); CHECK(); }
  | "[" exprs "," "]" { $$ = with_items(p, AST_TUPLE, @1, NULL, $2); CHECK(); }
    ;

/* word := IDENT | a statement keyword. Ops and attributes may share a keyword's name
 * (state(s, "v"), poisson(x, seed = 1)); as a callee or a keyword argument's name it is followed by
 * '(' or '=', and no statement starts where an expression does, so this is unambiguous. */
word:
    IDENT
  | INCLUDE { $$ = keyword(p, @1, "include"); }
  | NEURON { $$ = keyword(p, @1, "neuron"); }
  | MODEL { $$ = keyword(p, @1, "model"); }
  | STATE { $$ = keyword(p, @1, "state"); }
  | LET { $$ = keyword(p, @1, "let"); }
  | FIRE { $$ = keyword(p, @1, "fire"); }
  | RESET { $$ = keyword(p, @1, "reset"); }
  | REFRACTORY { $$ = keyword(p, @1, "refractory"); }
  | OUTPUT { $$ = keyword(p, @1, "output"); }
  | SURROGATE { $$ = keyword(p, @1, "surrogate"); }
  | TIMESTEPS { $$ = keyword(p, @1, "timesteps"); }
  | WEIGHTS { $$ = keyword(p, @1, "weights"); }
  | SEED { $$ = keyword(p, @1, "seed"); }
  | SCHEDULE { $$ = keyword(p, @1, "schedule"); }
  | FUSE { $$ = keyword(p, @1, "fuse"); }
  | INPUT { $$ = keyword(p, @1, "input"); }
    ;

exprs:
    expr { $$ = push_expr(p, NULL, $1); }
  | exprs "," expr { $$ = push_expr(p, $1, $3); }
    ;

args:
    arg { $$ = push_expr(p, NULL, $1); }
  | args "," arg { $$ = push_expr(p, $1, $3); }
    ;

/* arg := expr | word '=' expr */
arg:
    expr
  | word "=" expr {
        $$ = node(p, AST_KWARG, @1, 1 + $3.depth);
        $$.ast->str = $1->str;
        $$.ast->a = $3.ast;
        CHECK();
    }
    ;

%%

Ast *
fe_ast_new(Arena *arena, AstKind kind, Loc loc)
{
    Ast *a = arena_alloc(arena, sizeof *a);
    a->kind = kind;
    a->loc = loc;
    return a;
}

const char *
fe_quote_token(const FeParser *p, char *buf, size_t n)
{
    const char *s = p->text + p->tok_off;
    size_t len = p->tok_len, k = 0;
    bool is_str = len > 0 && s[0] == '"';
    size_t room = n - 8; /* the quotes, "..." and the NUL */
    if (!is_str)
        buf[k++] = '\'';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char tmp[8];
        if (c >= ' ' && c < 0x7f)
            tmp[0] = (char)c, tmp[1] = 0;
        else
            snprintf(tmp, sizeof tmp, "\\x%02x", c);
        size_t t = strlen(tmp);
        if (k + t > room) {
            memcpy(buf + k, "...", 3);
            k += 3;
            break;
        }
        memcpy(buf + k, tmp, t);
        k += t;
    }
    if (!is_str)
        buf[k++] = '\'';
    buf[k] = 0;
    return buf;
}

/* How an error message names a token kind, as something expected. */
static const char *
symbol_desc(yysymbol_kind_t sym, char *buf, size_t n)
{
    switch (sym) {
    case YYSYMBOL_YYEOF: return "end of file";
    case YYSYMBOL_IDENT: return "an identifier";
    case YYSYMBOL_VALNAME: return "a value name";
    case YYSYMBOL_NUMBER: return "a number";
    case YYSYMBOL_STRING: return "a string";
    default: break;
    }
    snprintf(buf, n, "'%s'", yysymbol_name(sym)); /* parse.error custom: the alias, unquoted */
    return buf;
}

/* "unexpected ')', expected an expression". Groups of expected tokens are named as one: every
 * expression starter is "an expression", every binary operator "an operator", every statement
 * keyword "a statement"; more than four alternatives are not listed. */
static int
yyreport_syntax_error(const yypcontext_t *ctx, yyscan_t scanner, FeParser *p)
{
    (void)scanner;
    if (p->failed)
        return 0;
    yysymbol_kind_t tok = yypcontext_token(ctx);
    Loc loc = *yypcontext_location(ctx);
    char what[FE_TOKEN_QUOTE_MAX + 32], q[FE_TOKEN_QUOTE_MAX];
    switch (tok) {
    case YYSYMBOL_YYEOF: snprintf(what, sizeof what, "end of file"); break;
    case YYSYMBOL_IDENT:
        snprintf(what, sizeof what, "identifier %s", fe_quote_token(p, q, sizeof q));
        break;
    case YYSYMBOL_VALNAME:
        snprintf(what, sizeof what, "value name %s", fe_quote_token(p, q, sizeof q));
        break;
    case YYSYMBOL_NUMBER:
        snprintf(what, sizeof what, "number %s", fe_quote_token(p, q, sizeof q));
        break;
    case YYSYMBOL_STRING:
        snprintf(what, sizeof what, "string %s", fe_quote_token(p, q, sizeof q));
        break;
    default: snprintf(what, sizeof what, "%s", fe_quote_token(p, q, sizeof q)); break;
    }

    yysymbol_kind_t exp[YYNTOKENS];
    int nexp = yypcontext_expected_tokens(ctx, exp, YYNTOKENS);
    if (nexp < 0) /* LAC ran out of stack: only the nesting can be that deep */
        nexp = 0;
    bool is_expected[YYNTOKENS] = {0};
    for (int i = 0; i < nexp; i++)
        is_expected[exp[i]] = true;

    bool is_cmp = tok == YYSYMBOL_LT || tok == YYSYMBOL_LE || tok == YYSYMBOL_GT ||
                  tok == YYSYMBOL_GE || tok == YYSYMBOL_EQ || tok == YYSYMBOL_NE;
    if (is_cmp && is_expected[YYSYMBOL_PLUS]) {
        fail(p, loc, "unexpected %s: comparisons do not chain (write a < b && b < c)", what);
        return 0;
    }

    /* Groups of expected tokens named as one. A group stands in when all its `need` tokens are
     * expected, and then covers its `also` tokens too ("an operator" needs only '*': expected
     * after an operand, whichever operators the grammar allows there). */
    static const yysymbol_kind_t expr_start[] = {
        YYSYMBOL_NUMBER, YYSYMBOL_STRING,   YYSYMBOL_IDENT, YYSYMBOL_VALNAME,
        YYSYMBOL_TRUE,   YYSYMBOL_FALSE,    YYSYMBOL_NOT,   YYSYMBOL_BANG,
        YYSYMBOL_LPAREN, YYSYMBOL_LBRACKET, YYSYMBOL_MINUS,
    };
    static const yysymbol_kind_t callee_keywords[] = {
        YYSYMBOL_INCLUDE, YYSYMBOL_NEURON,    YYSYMBOL_MODEL,     YYSYMBOL_STATE,
        YYSYMBOL_LET,     YYSYMBOL_FIRE,      YYSYMBOL_RESET,     YYSYMBOL_REFRACTORY,
        YYSYMBOL_OUTPUT,  YYSYMBOL_SURROGATE, YYSYMBOL_TIMESTEPS, YYSYMBOL_WEIGHTS,
        YYSYMBOL_SEED,    YYSYMBOL_INPUT,     YYSYMBOL_SCHEDULE,  YYSYMBOL_FUSE,
    };
    static const yysymbol_kind_t star[] = {YYSYMBOL_STAR};
    static const yysymbol_kind_t binop[] = {
        YYSYMBOL_OROR, YYSYMBOL_OR, YYSYMBOL_ANDAND, YYSYMBOL_AND,   YYSYMBOL_LT,
        YYSYMBOL_LE,   YYSYMBOL_GT, YYSYMBOL_GE,     YYSYMBOL_EQ,    YYSYMBOL_NE,
        YYSYMBOL_PLUS, YYSYMBOL_MINUS, YYSYMBOL_STAR, YYSYMBOL_SLASH, YYSYMBOL_QUESTION,
    };
    static const yysymbol_kind_t nstmt_start[] = {
        YYSYMBOL_STATE,      YYSYMBOL_LET,    YYSYMBOL_FIRE,      YYSYMBOL_RESET,
        YYSYMBOL_REFRACTORY, YYSYMBOL_OUTPUT, YYSYMBOL_SURROGATE, YYSYMBOL_IDENT,
    };
    static const yysymbol_kind_t mstmt_start[] = {
        YYSYMBOL_TIMESTEPS, YYSYMBOL_WEIGHTS, YYSYMBOL_SEED,    YYSYMBOL_INPUT,
        YYSYMBOL_OUTPUT,    YYSYMBOL_IDENT,   YYSYMBOL_VALNAME, YYSYMBOL_SCHEDULE,
        YYSYMBOL_FUSE,
    };
#define SYMS(a) a, (int)(sizeof a / sizeof a[0])
    static const struct {
        const yysymbol_kind_t *need;
        int nneed;
        const yysymbol_kind_t *also;
        int nalso;
        const char *desc;
    } groups[] = {
        {SYMS(expr_start), SYMS(callee_keywords), "an expression"},
        {SYMS(star), SYMS(binop), "an operator"},
        {SYMS(nstmt_start), NULL, 0, "a statement"},
        {SYMS(mstmt_start), NULL, 0, "a statement"},
    };
#undef SYMS
    const char *items[YYNTOKENS + 4];
    char bufs[YYNTOKENS + 4][FE_TOKEN_QUOTE_MAX];
    int nitems = 0;
    bool has_op = false;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        bool all = true;
        for (int i = 0; i < groups[g].nneed; i++)
            all = all && is_expected[groups[g].need[i]];
        if (!all)
            continue;
        for (int i = 0; i < groups[g].nneed; i++)
            is_expected[groups[g].need[i]] = false;
        for (int i = 0; i < groups[g].nalso; i++)
            is_expected[groups[g].also[i]] = false;
        items[nitems++] = groups[g].desc;
        has_op |= groups[g].also == binop;
    }
    /* Where an operator may follow, so may '(' (a call) and the IR's annotations (': type',
     * 'loc(...)'); like the optional ';' they would only crowd out what the reader needs. */
    if (has_op)
        is_expected[YYSYMBOL_LPAREN] = false;
    if (has_op && is_expected[YYSYMBOL_LOC])
        is_expected[YYSYMBOL_COLON] = is_expected[YYSYMBOL_LOC] = false;
    is_expected[YYSYMBOL_SEMI] = false;
    for (int i = 0; i < nexp; i++)
        if (is_expected[exp[i]]) {
            items[nitems] = symbol_desc(exp[i], bufs[nitems], sizeof bufs[nitems]);
            nitems++;
        }

    if (nitems == 0 || nitems > 4) {
        fail(p, loc, "unexpected %s", what);
    } else {
        char list[512];
        size_t k = 0;
        for (int i = 0; i < nitems; i++) {
            const char *sep = i == 0 ? "" : i == nitems - 1 ? " or " : ", ";
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", sep, items[i]);
            if (k >= sizeof list)
                break;
        }
        fail(p, loc, "unexpected %s, expected %s", what, list);
    }
    return 0;
}

/* Bison calls this only when its stack is exhausted (syntax errors go to yyreport_syntax_error). */
static void
fe_yyerror(const Loc *loc, yyscan_t scanner, FeParser *p, const char *msg)
{
    (void)scanner;
    if (strcmp(msg, "memory exhausted") == 0)
        fail(p, *loc, "expression nested too deeply");
    else
        fail(p, *loc, "%s", msg);
}

AstFile *
fe_parse(Arena *arena, const char *path, const char *text, size_t len)
{
    if (!text)
        text = "";
    FeParser p = {0};
    p.arena = arena;
    p.file = diag_intern(path);
    p.text = text;
    p.len = len;
    p.line = p.col = 1;
    p.end = (Loc){p.file, 1, 1};

    /* diag quotes source lines from a NUL-terminated copy; text itself need not end in a NUL */
    char *copy = malloc(len + 1);
    if (!copy)
        die("out of memory");
    memcpy(copy, text, len);
    copy[len] = 0;
    diag_add_source(path, copy);
    free(copy);

    if (len > INT_MAX - 2) {
        diag_file_error(path, "file too large (%zu bytes)", len);
        return NULL;
    }
    yyscan_t scanner;
    if (fe_yylex_init_extra(&p, &scanner) != 0)
        die("out of memory");
    fe_yy_scan_bytes(text, (int)len, scanner);
    int rc = fe_yyparse(scanner, &p);
    fe_yylex_destroy(scanner);
    if (rc != 0 || p.failed)
        return NULL;
    return p.result;
}
