/* The frontend: .snn and .snnir text → AST (lexer.l, parser.y) → graph IR (lower.c).
 * The textual IR is the canonical subset of the language (every node bound to a name, every attribute
 * explicit, types and locations annotated), so one parser reads both. The AST lives in an arena owned by
 * the caller; nothing here prints except through diag_*. */
#ifndef SNN_FRONTEND_H
#define SNN_FRONTEND_H

#include "ir/ir.h"

typedef enum {
    AST_NUM,     /* num (is_int when written without '.', 'e') */
    AST_STR,     /* str */
    AST_IDENT,   /* str (also %N value names and the keywords I and spike inside neurons) */
    AST_CALL,    /* str(items...) ; items may be AST_KWARG */
    AST_KWARG,   /* str = a */
    AST_TUPLE,   /* (a, b, ...) with two or more items, or [items...] with one or more */
    AST_UNARY,   /* op in {'-', '!'} a */
    AST_BINARY,  /* a op b, op an NxBin */
    AST_COND,    /* a ? b : c */
} AstKind;

typedef struct Ast Ast;
struct Ast {
    AstKind kind;
    Loc loc;
    int op;
    double num;
    bool is_int;
    const char *str;
    Ast *a, *b, *c;
    Ast **items;
    int nitems;
};

/* A declared type: "f32[T, 64]" or, in IR text, "f32[T, B, 64]". */
typedef struct AstType {
    Loc loc;
    const char *dtype;
    int rank;
    int64_t dims[IR_MAX_RANK + 2];
    bool is_sym[IR_MAX_RANK + 2]; /* dims[i] is the symbol named in sym[i] ("T" or "B") */
    char sym[IR_MAX_RANK + 2];
} AstType;

typedef enum {
    /* neuron body */
    NST_STATE,      /* state name = a */
    NST_LET,        /* let name = a */
    NST_ASSIGN,     /* name = a */
    NST_FIRE,       /* fire a */
    NST_FIRE_DOWN,  /* fire down a */
    NST_RESET_TO,   /* reset name = a */
    NST_RESET_SUB,  /* reset name -= a */
    NST_REFRACTORY, /* refractory a */
    NST_OUTPUT,     /* output a */
    NST_SURROGATE,  /* surrogate a (an AST_CALL or AST_IDENT) */
    /* model body */
    MST_TIMESTEPS,  /* timesteps a */
    MST_WEIGHTS,    /* weights "a" */
    MST_SEED,       /* seed a */
    MST_INPUT,      /* input name : type */
    MST_BIND,       /* name = a [: type] [loc(...)] */
    MST_OUTPUT,     /* output name = a [: type] [loc(...)] */
    MST_SCHEDULE,   /* schedule name (layer or step) */
    MST_MEMORY,     /* memory name (reuse or separate); `memory` is a keyword only there */
    MST_ACCUMULATE, /* accumulate name (exact or f32); likewise */
    MST_TRAIN,      /* train { key value ... }: a an AST_CALL "train" of AST_KWARG items */
    MST_MARK,       /* a schedule mark (ir/marks.c, AstStmt.mark): `fuse name into a`, `events
                       name`, `weights name : a` ... (a: the target or word, an AST_IDENT) */
} StmtKind;

typedef struct AstStmt {
    StmtKind kind;
    int mark;       /* MST_MARK: its MarkKind */
    Loc loc;
    const char *name;
    Ast *a;
    bool has_type;
    AstType type;
    bool has_loc;
    Loc at; /* the loc("file":line:col) annotation of IR text */
} AstStmt;

typedef struct AstParam {
    const char *name;
    Loc loc;
    Ast *def; /* default value: a constant expression, or NULL */
} AstParam;

typedef enum { ITEM_INCLUDE, ITEM_NEURON, ITEM_MODEL } ItemKind;

typedef struct AstItem {
    ItemKind kind;
    Loc loc;
    const char *name; /* include: the path as written */
    int nparams;
    AstParam *params;
    int nstmts;
    AstStmt *stmts;
} AstItem;

typedef struct AstFile {
    const char *path;
    int nitems;
    AstItem *items;
} AstFile;

/* parser.y: parse text into an AST allocated in arena. Reports syntax errors through diag_error
 * (file:line:col with a caret) and returns NULL after the first one. `text` must stay alive. */
AstFile *fe_parse(Arena *arena, const char *path, const char *text, size_t len);

/* prelude.c: the built-in neuron library, written in the language itself (frontend/prelude.snn). */
extern const char fe_prelude_text[];
extern const char fe_prelude_name[]; /* "<prelude>" */

/* lower.c: read a .snn or .snnir file (following includes), prepend the prelude, and build the module.
 * Returns NULL after reporting errors. model_name selects a model when the main file has several. */
Module *fe_load(const char *path, const char *model_name);

/* Same from text already in memory (tests, fuzzing); includes resolve relative to the path's dir. */
Module *fe_load_text(const char *path, const char *text, size_t len, const char *model_name);

#endif
