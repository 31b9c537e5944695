/* cuda_gen.c: the kernel IR as CUDA C, one translation unit for NVRTC (runtime/cuda_abi.h is the
 * contract with the runtime). A kernel IR kernel becomes one __global__ function; when its body is
 * one parallel loop whose bounds depend on B alone, the loop is walked grid-stride (any grid is
 * correct, the runtime sizes it from the loop's trip count), else one thread runs it.
 *
 * The text keeps the kernel IR's arithmetic exactly (kir.h): every value has the C type of its
 * kernel IR type (f32 float, f64 double, every integer long long, bool bool), every operation is
 * parenthesised, float constants are written in hexadecimal, NVRTC runs with --fmad=false so
 * nothing is contracted, and tiles are double arrays updated by fma() lane by lane. The f32 exp,
 * log, tanh and pow are the double functions rounded once, as on every backend (ir/fmath.h).
 *
 * Compiled by a host C++ compiler with -DSNN_CUDA_EMULATE, the same text runs on the CPU: the
 * prelude then defines the few CUDA built-ins the kernels use, and every kernel gets a snnk_emu_
 * wrapper that runs its blocks one after another, and each block's threads one after another, or
 * as coroutines where they meet (spike counts: snn_count_total) (tests/cuda_emu). */
#include "codegen/cuda/cuda_gen.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_abi.h"

/* runtime/philox.h as a string, made at build time (CMakeLists.txt) */
#include "codegen/cuda/philox_text.h"

typedef struct Gen {
    FILE *f;
    const KProgram *p;
    const Kernel *k;
    int depth;
    /* a grid kernel's KS_COUNT buffers (else NULL): a thread sums its counts in a register, an
     * iteration's in 32 bits where they fit (KBuf.count_max; a 64-bit count live across the
     * steps made ptxas spill around the double division's slow-path call) */
    const bool *counted;
} Gen;

static bool
counts_in_32(const Gen *g, int buf)
{
    return g->p->bufs[buf].count_max <= 0xffffffffLL;
}

static const char *
ctype(KType t) /* the C type of a value */
{
    switch (t) {
    case KT_F32: return "float";
    case KT_F64: return "double";
    case KT_BOOL: return "bool";
    default: return "long long";
    }
}

static const char *
mtype(KType t) /* the C type of a buffer element */
{
    switch (t) {
    case KT_F32: return "float";
    case KT_F64: return "double";
    case KT_I64: return "long long";
    case KT_I8: return "signed char";
    case KT_F16:
    case KT_BF16: return "unsigned short"; /* the bits; loads widen them (snn_f16_f32) */
    default: return "unsigned char"; /* u8, bool */
    }
}

static bool
is_float(KType t)
{
    return t == KT_F32 || t == KT_F64;
}

static void
indent(Gen *g)
{
    for (int i = 0; i < g->depth; i++)
        fputs("    ", g->f);
}

/* one level out, and its closing brace */
static void
close_brace(Gen *g)
{
    g->depth--;
    indent(g);
    fputs("}\n", g->f);
}

/* a constant of type t, exactly */
static void
put_const(Gen *g, KType t, double v)
{
    FILE *f = g->f;
    if (t == KT_BOOL) {
        fputs(v != 0 ? "true" : "false", f);
        return;
    }
    if (!is_float(t)) {
        fprintf(f, "%lldLL", (long long)v);
        return;
    }
    if (t == KT_F32) v = (double)(float)v;
    if (isnan(v) || isinf(v)) {
        const char *what = isnan(v) ? "nan" : v > 0 ? "inf" : "ninf";
        fprintf(f, "snn_%s_%s()", t == KT_F32 ? "f32" : "f64", what);
        return;
    }
    fprintf(f, t == KT_F32 ? "%af" : "%a", v);
}

static void expr(Gen *g, const KExpr *e);

/* expression e as a value of type `to` (kernel IR conversion rules: kir_eval.c's eval_cast) */
static void
expr_as(Gen *g, const KExpr *e, KType to)
{
    KType from = e->type;
    FILE *f = g->f;
    if (from == to) {
        expr(g, e);
        return;
    }
    switch (to) {
    case KT_F32:
    case KT_F64:
    case KT_I64:
    case KT_F16: /* not value types: never converted to */
    case KT_BF16:
    case KT_BIT:
    case KT_BIT2: fprintf(f, "((%s)(", ctype(to)); break;
    case KT_BOOL: fputs("((", f); break;
    case KT_U8: fputs(is_float(from) ? "((long long)(unsigned char)(long long)(" : "((long long)(unsigned char)(", f); break;
    case KT_I8: fputs(is_float(from) ? "((long long)(signed char)(long long)(" : "((long long)(signed char)(", f); break;
    }
    expr(g, e);
    fputs(to == KT_BOOL ? ") != 0)" : "))", f);
}

static void
un(Gen *g, const KExpr *e)
{
    FILE *f = g->f;
    KType t = e->a->type;
    bool f32 = t == KT_F32;
    const char *fn = NULL;
    if (e->op == KU_NOT) {
        fputs("(!", f);
        expr_as(g, e->a, KT_BOOL);
        fputs(")", f);
        return;
    }
    if (!is_float(t)) {
        switch ((KUn)e->op) {
        case KU_NEG: fputs("(-", f); expr(g, e->a); fputs(")", f); return;
        case KU_FLOOR: expr(g, e->a); return;
        case KU_ABS: fputs("snn_absi(", f); expr(g, e->a); fputs(")", f); return;
        case KU_CTZ: /* __ffsll: 1 + the lowest set bit, 0 for 0 */
            fputs("(long long)(__ffsll(", f);
            expr(g, e->a);
            fputs(") ? __ffsll(", f);
            expr(g, e->a);
            fputs(") - 1 : 64)", f);
            return;
        case KU_POPCOUNT: fputs("(long long)__popcll(", f); expr(g, e->a); fputs(")", f); return;
        default: die("cuda_gen: %s of %s", kun_str((KUn)e->op), ktype_name(t));
        }
    }
    switch ((KUn)e->op) {
    case KU_NEG: fputs("(-", f); expr(g, e->a); fputs(")", f); return;
    case KU_EXP: fn = f32 ? "snn_expf" : "exp"; break;
    case KU_LOG: fn = f32 ? "snn_logf" : "log"; break;
    case KU_SQRT: fn = f32 ? "sqrtf" : "sqrt"; break;
    case KU_TANH: fn = f32 ? "snn_tanhf" : "tanh"; break;
    case KU_ABS: fn = f32 ? "fabsf" : "fabs"; break;
    case KU_FLOOR: fn = f32 ? "floorf" : "floor"; break;
    case KU_SIGMOID: fn = f32 ? "snn_sigmoidf" : "snn_sigmoid"; break;
    case KU_ROUND_F16: fn = "snn_round_f16"; break;
    case KU_ROUND_BF16: fn = "snn_round_bf16"; break;
    case KU_NOT:
    case KU_CTZ:
    case KU_POPCOUNT: die("cuda_gen: %s of %s", kun_str((KUn)e->op), ktype_name(t));
    }
    fprintf(f, "%s(", fn);
    expr(g, e->a);
    fputs(")", f);
}

static void
bin(Gen *g, const KExpr *e)
{
    FILE *f = g->f;
    KType t = e->a->type;
    KBin op = (KBin)e->op;
    if (op == KB_AND || op == KB_OR) {
        fputs("(", f);
        expr_as(g, e->a, KT_BOOL);
        fputs(op == KB_AND ? " && " : " || ", f);
        expr_as(g, e->b, KT_BOOL);
        fputs(")", f);
        return;
    }
    const char *fn = NULL;
    switch (op) {
    case KB_MIN: fn = is_float(t) ? (t == KT_F32 ? "snn_minf" : "snn_min") : "snn_mini"; break;
    case KB_MAX: fn = is_float(t) ? (t == KT_F32 ? "snn_maxf" : "snn_max") : "snn_maxi"; break;
    case KB_POW:
        if (!is_float(t)) die("cuda_gen: pow of %s", ktype_name(t));
        fn = t == KT_F32 ? "snn_powf" : "pow";
        break;
    case KB_REM:
    case KB_BITAND:
    case KB_BITOR:
    case KB_SHL:
        if (is_float(t)) die("cuda_gen: %s of %s", kbin_str(op), ktype_name(t));
        break;
    default: break;
    }
    if (fn) {
        fprintf(f, "%s(", fn);
        expr(g, e->a);
        fputs(", ", f);
        expr_as(g, e->b, t);
        fputs(")", f);
        return;
    }
    fputs("(", f);
    expr(g, e->a);
    fprintf(f, " %s ", kbin_str(op));
    expr_as(g, e->b, t);
    fputs(")", f);
}

static void
load(Gen *g, const KExpr *e)
{
    FILE *f = g->f;
    KType bt = g->p->bufs[e->buf].type;
    /* the element as a value of its own type (u8/i8 widen to long long, bool compares) */
    fputs("(", f);
    if (bt == KT_U8 || bt == KT_I8) fputs("(long long)", f);
    if (bt == KT_F16 || bt == KT_BF16) fputs(bt == KT_F16 ? "snn_f16_f32(" : "snn_bf16_f32(", f);
    fprintf(f, "b%d[", e->buf);
    expr_as(g, e->a, KT_I64);
    fputs(bt == KT_BOOL ? "] != 0)" : bt == KT_F16 || bt == KT_BF16 ? "]))" : "])", f);
}

static void
expr(Gen *g, const KExpr *e)
{
    FILE *f = g->f;
    if (!e) die("cuda_gen: missing operand in kernel %s", g->k->name);
    switch (e->kind) {
    case KX_CONST: put_const(g, e->type, e->num); return;
    case KX_BATCH:
    case KX_STEP:
    case KX_SAMPLE_BASE: {
        char name[32];
        if (e->kind == KX_SAMPLE_BASE)
            snprintf(name, sizeof name, "dyn[%d]", SNN_CUDA_DYN_SAMPLE_BASE);
        else
            snprintf(name, sizeof name, "%s", e->kind == KX_BATCH ? "B" : "t");
        if (e->type == KT_I64)
            fputs(name, f);
        else if (e->type == KT_BOOL)
            fprintf(f, "(%s != 0)", name);
        else
            fprintf(f, "((%s)%s)", ctype(e->type), name);
        return;
    }
    case KX_VAR: /* a one-lane tile reads as its lane (kir.h) */
        fprintf(f, g->k->locals[e->var].lanes > 0 ? "v%d[0]" : "v%d", e->var);
        return;
    case KX_LOAD: load(g, e); return;
    case KX_UN: un(g, e); return;
    case KX_BIN: bin(g, e); return;
    case KX_SELECT:
        fputs("(", f);
        expr_as(g, e->a, KT_BOOL);
        fputs(" ? ", f);
        expr_as(g, e->b, e->type);
        fputs(" : ", f);
        expr_as(g, e->c, e->type);
        fputs(")", f);
        return;
    case KX_CAST:
        /* a cast to u8/i8 always wraps, even from the same type */
        if (e->a->type == e->type && (e->type == KT_U8 || e->type == KT_I8)) {
            fprintf(f, "((long long)(%s)(", e->type == KT_U8 ? "unsigned char" : "signed char");
            expr(g, e->a);
            fputs("))", f);
            return;
        }
        expr_as(g, e->a, e->type);
        return;
    case KX_UNIFORM:
        fprintf(f, "rt_uniform(%" PRIu64 "ULL, %" PRIu32 "u, (uint32_t)(", e->seed, e->stream);
        expr_as(g, e->a, KT_I64);
        fputs("), (uint64_t)(", f);
        expr_as(g, e->b, KT_I64);
        fputs("))", f);
        return;
    }
    die("cuda_gen: expression of kind %d", (int)e->kind);
}

static void stmts(Gen *g, KStmt *const *s, int n);

static int
lanes_of(Gen *g, const KStmt *s)
{
    if (s->var < 0 || s->var >= g->k->nlocals || g->k->locals[s->var].lanes <= 0)
        die("cuda_gen: kernel %s: tile statement on a local that is not a tile", g->k->name);
    return g->k->locals[s->var].lanes;
}

/* the tile statements as loops over the lanes (unrolled: the lane count is a constant, so the
 * tile stays in registers) */
static void
tile(Gen *g, const KStmt *s)
{
    FILE *f = g->f;
    int n = lanes_of(g, s);
    indent(g);
    fputs("{\n", f);
    g->depth++;
    /* a tile holds doubles, or floats under accumulate f32 (fmaf then: one rounding per term) */
    bool is_f32 = g->k->locals[s->var].type == KT_F32;
    const char *tt = is_f32 ? "float" : "double";
    KType bt = s->kind == KS_VSET ? KT_F32 : g->p->bufs[s->buf].type;
    const char *widen = bt == KT_F16 ? "snn_f16_f32" : bt == KT_BF16 ? "snn_bf16_f32" : "";
    if (s->kind == KS_VSET || s->kind == KS_VFMA) {
        indent(g);
        fprintf(f, "const %s a_ = ", tt);
        expr_as(g, s->a, is_f32 ? KT_F32 : KT_F64);
        fputs(";\n", f);
    }
    if (s->kind != KS_VSET) {
        indent(g);
        fputs("const long long i_ = ", f);
        expr_as(g, s->index, KT_I64);
        fputs(";\n", f);
    }
    if (s->kind == KS_VFMA && s->is_sparse && !g->p->adds_zero_terms) {
        indent(g);
        fputs("if (a_ != 0.0)\n", f); /* a is the same for every lane */
    }
    indent(g);
    fprintf(f, "SNN_UNROLL for (int l_ = 0; l_ < %d; l_++) ", n);
    switch (s->kind) {
    case KS_VSET: fprintf(f, "v%d[l_] = a_;\n", s->var); break;
    case KS_VLOAD: fprintf(f, "v%d[l_] = (%s)%s(b%d[i_ + l_]);\n", s->var, tt, widen, s->buf); break;
    case KS_VFMA:
        fprintf(f, "v%d[l_] = %s(a_, (%s)%s(b%d[i_ + l_]), v%d[l_]);\n", s->var,
                is_f32 ? "fmaf" : "fma", tt, widen, s->buf, s->var);
        break;
    case KS_VSTORE:
        if (bt == KT_F16 || bt == KT_BF16)
            fprintf(f, "b%d[i_ + l_ * %lldLL] = snn_f32_%s((float)v%d[l_]);\n", s->buf,
                    (long long)s->stride, bt == KT_F16 ? "f16" : "bf16", s->var);
        else
            fprintf(f, "b%d[i_ + l_ * %lldLL] = (%s)v%d[l_];\n", s->buf, (long long)s->stride,
                    mtype(bt), s->var);
        break;
    default: break;
    }
    close_brace(g);
}

/* how a loop walks its iterations: in order on one thread; grid-stride (a grid kernel's parallel
 * loop); or, in a step loop's fused kernel (steps_kernel), sample s_'s a iterations strided over
 * the block's threads */
typedef enum { LOOP_SERIAL, LOOP_GRID, LOOP_SAMPLE } LoopMode;

static void
for_loop(Gen *g, const KStmt *s, LoopMode mode)
{
    bool grid_stride = mode != LOOP_SERIAL;
    FILE *f = g->f;
    /* the loop variable keeps the last iteration's value after the loop, as in kir_eval.c */
    indent(g);
    fputs("{\n", f);
    g->depth++;
    if (mode != LOOP_SAMPLE) { /* a sample's iterations need not the loop's bounds */
        indent(g);
        fputs("const long long lo_ = ", f);
        expr_as(g, s->lo, KT_I64);
        fputs(", hi_ = ", f);
        expr_as(g, s->hi, KT_I64);
        fputs(";\n", f);
    }
    indent(g);
    if (mode == LOOP_SAMPLE)
        fprintf(f, "for (long long i_ = s_ * %lldLL + threadIdx.x; i_ < (s_ + 1) * %lldLL; "
                   "i_ += blockDim.x) {\n",
                (long long)g->k->sample_iters, (long long)g->k->sample_iters);
    else if (mode == LOOP_GRID)
        fputs("for (long long i_ = lo_ + (long long)blockIdx.x * blockDim.x + threadIdx.x; i_ < hi_;"
              " i_ += (long long)gridDim.x * blockDim.x) {\n",
              f);
    else
        fputs("for (long long i_ = lo_; i_ < hi_; i_++) {\n", f);
    g->depth++;
    indent(g);
    fprintf(f, "v%d = i_;\n", s->var);
    const bool *counted = grid_stride ? g->counted : NULL;
    for (int b = 0; counted && b < g->p->nbufs; b++) {
        if (!counted[b] || !counts_in_32(g, b)) continue;
        indent(g);
        fprintf(f, "unsigned c%d_ = 0;\n", b);
    }
    stmts(g, s->body, s->nbody);
    for (int b = 0; counted && b < g->p->nbufs; b++) {
        if (!counted[b] || !counts_in_32(g, b)) continue;
        /* the thread's sum is 32 bits too (one register fewer live across the steps); where it
         * would wrap, it goes to the total first */
        indent(g);
        fprintf(f, "if ((unsigned long long)n%d_ + c%d_ > SNN_COUNT_LIMIT) { "
                   "atomicAdd((unsigned long long *)b%d, (unsigned long long)n%d_); n%d_ = 0; }\n",
                b, b, b, b, b);
        indent(g);
        fprintf(f, "n%d_ += c%d_;\n", b, b);
    }
    close_brace(g);
    close_brace(g);
}

static void
stmts(Gen *g, KStmt *const *ss, int n)
{
    FILE *f = g->f;
    for (int i = 0; i < n; i++) {
        const KStmt *s = ss[i];
        if (!s) continue;
        switch (s->kind) {
        case KS_FOR: for_loop(g, s, LOOP_SERIAL); break;
        case KS_PREFETCH:
            break; /* a CPU cache hint; the GPU's loads need none */
        case KS_ASSIGN:
            indent(g);
            fprintf(f, "v%d = ", s->var);
            expr_as(g, s->a, g->k->locals[s->var].type);
            fputs(";\n", f);
            break;
        case KS_STORE: {
            KType bt = g->p->bufs[s->buf].type;
            indent(g);
            fprintf(f, "b%d[", s->buf);
            expr_as(g, s->index, KT_I64);
            /* to the element's value type first (u8 wraps, bool is 0/1, 16 bits round), then
             * to memory */
            if (bt == KT_F16 || bt == KT_BF16) {
                fputs(bt == KT_F16 ? "] = snn_f32_f16(" : "] = snn_f32_bf16(", f);
                expr_as(g, s->a, KT_F32);
            } else {
                fprintf(f, "] = (%s)(", mtype(bt));
                expr_as(g, s->a, bt == KT_BOOL ? KT_BOOL : bt);
            }
            fputs(");\n", f);
            break;
        }
        case KS_IF:
            indent(g);
            fputs("if (", f);
            expr_as(g, s->a, KT_BOOL);
            fputs(") {\n", f);
            g->depth++;
            stmts(g, s->body, s->nbody);
            g->depth--;
            indent(g);
            if (s->nels > 0) {
                fputs("} else {\n", f);
                g->depth++;
                stmts(g, s->els, s->nels);
                g->depth--;
                indent(g);
            }
            fputs("}\n", f);
            break;
        case KS_VSET:
        case KS_VLOAD:
        case KS_VFMA:
        case KS_VSTORE: tile(g, s); break;
        case KS_COUNT:
            indent(g);
            /* a grid kernel's thread sums its counts; its block adds them once at the end */
            if (g->counted && counts_in_32(g, s->buf))
                fprintf(f, "c%d_ += (unsigned)(", s->buf);
            else if (g->counted)
                fprintf(f, "n%d_ += (unsigned long long)(", s->buf);
            else
                fprintf(f, "b%d[0] += (", s->buf);
            expr_as(g, s->a, KT_I64);
            fputs(");\n", f);
            break;
        }
    }
}

/* ---- launch geometry ---- */

/* Whether e is integer arithmetic over constants and B that the runtime's RPN evaluator computes
 * (runtime/cuda_abi.h); with f non-NULL, write it as RPN. */
static bool
rpn(FILE *f, const KExpr *e)
{
    if (!e || e->type != KT_I64) return false;
    switch (e->kind) {
    case KX_CONST:
        if (f) fprintf(f, " %lld", (long long)e->num);
        return e->num >= 0;
    case KX_BATCH:
        if (f) fputs(" B", f);
        return true;
    case KX_BIN:
        if (e->op != KB_ADD && e->op != KB_SUB && e->op != KB_MUL && e->op != KB_DIV &&
            e->op != KB_REM)
            return false;
        if (!rpn(f, e->a) || !rpn(f, e->b)) return false;
        if (f) fprintf(f, " %s", kbin_str((KBin)e->op));
        return true;
    case KX_CAST:
        /* a comparison as 1 or 0 (>= only: the tiles' switch, lower_layers.c "GPU") */
        if (e->a->type == KT_BOOL && e->a->kind == KX_BIN && e->a->op == KB_GE) {
            if (!rpn(f, e->a->a) || !rpn(f, e->a->b)) return false;
            if (f) fputs(" >=", f);
            return true;
        }
        return e->a->type == KT_I64 && rpn(f, e->a);
    default: return false;
    }
}

/* The kernel's grid-stride loop: its body when that is one parallel loop with bounds the runtime
 * can compute; NULL for a one-thread kernel. */
static const KStmt *
grid_loop(const Kernel *k)
{
    if (k->nbody != 1 || !k->body[0]) return NULL;
    const KStmt *s = k->body[0];
    if (s->kind != KS_FOR || !s->is_parallel || !rpn(NULL, s->lo) || !rpn(NULL, s->hi))
        return NULL;
    return s;
}

static void
mark_expr(const KExpr *e, bool *used)
{
    if (!e) return;
    if (e->kind == KX_LOAD) used[e->buf] = true;
    mark_expr(e->a, used);
    mark_expr(e->b, used);
    mark_expr(e->c, used);
}

static void
mark_used(KStmt *const *ss, int n, bool *used)
{
    for (int i = 0; i < n; i++) {
        const KStmt *s = ss[i];
        if (!s) continue;
        if (s->kind == KS_STORE || s->kind == KS_VLOAD || s->kind == KS_VFMA ||
            s->kind == KS_VSTORE || s->kind == KS_COUNT)
            used[s->buf] = true;
        mark_expr(s->lo, used);
        mark_expr(s->hi, used);
        mark_expr(s->index, used);
        mark_expr(s->a, used);
        mark_used(s->body, s->nbody, used);
        mark_used(s->els, s->nels, used);
    }
}

static void
mark_counted(KStmt *const *ss, int n, bool *counted)
{
    for (int i = 0; i < n; i++) {
        const KStmt *s = ss[i];
        if (!s) continue;
        if (s->kind == KS_COUNT) counted[s->buf] = true;
        mark_counted(s->body, s->nbody, counted);
        mark_counted(s->els, s->nels, counted);
    }
}

/* the buffers kernel k uses, ascending: used[i] for every program buffer (caller frees) */
static bool *
used_bufs(const KProgram *p, const Kernel *k)
{
    bool *used = xcalloc((size_t)p->nbufs + 1, sizeof *used);
    mark_used(k->body, k->nbody, used);
    return used;
}

/* Inputs and outputs are not kernel parameters: their addresses are read from the dyn array (slot
 * SNN_CUDA_DYN_IO + their rank among the program's input and output buffers), so that one graph
 * serves any caller's device memory (runtime/cuda_abi.h). */
static bool
is_io(const KBuf *b)
{
    return b->kind == KB_INPUT || b->kind == KB_OUTPUT;
}

static int
io_slot(const KProgram *p, int buf)
{
    int slot = SNN_CUDA_DYN_IO;
    for (int b = 0; b < buf; b++)
        slot += is_io(&p->bufs[b]);
    return slot;
}

static void
symbol(char *out, size_t n, int ki, const Kernel *k)
{
    snprintf(out, n, "snnk_k%d_%s", ki, k->name ? k->name : "kernel");
    for (char *c = out; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')))
            *c = '_';
}

/* ---- the translation unit ---- */

static const char prelude_emu[] =
    "#ifdef SNN_CUDA_EMULATE\n"
    "/* host emulation (tests/cuda_emu): the CUDA built-ins these kernels use */\n"
    "#include <cmath>\n"
    "#include <cstdint>\n"
    "#include <cstring>\n"
    "#include <ucontext.h>\n"
    "#include <cstdio>\n"
    "#include <cstdlib>\n"
    "using std::fma; using std::exp; using std::log; using std::sqrt; using std::tanh;\n"
    "using std::pow; using std::floor; using std::fabs;\n"
    "struct snn_dim3 { unsigned x, y, z; };\n"
    "static thread_local snn_dim3 blockIdx, threadIdx, blockDim, gridDim;\n"
    "#define __global__\n"
    "#define __device__\n"
    "#define __shared__ static /* blocks run one after another */\n"
    "#define __forceinline__ inline\n"
    "#define __restrict__ __restrict\n"
    "#define __launch_bounds__(n)\n"
    "#define SNN_UNROLL\n"
    "#define SNN_FN static inline\n"
    "static inline float snn_bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }\n"
    "static inline uint32_t snn_f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }\n"
    "static inline double snn_bits_f64(uint64_t u) { double d; std::memcpy(&d, &u, 8); return d; }\n"
    ;

/* the emulation's blocks and threads, and the CUDA functions where threads meet */
static const char prelude_emu_threads[] =
    "/* A launch runs its blocks one after another. A kernel whose threads never meet runs\n"
    " * its threads one after another too; one that calls __syncthreads or a warp function\n"
    " * (coop) runs a block's threads as coroutines: a thread that must wait for others\n"
    " * yields to the next, round robin. Every thread of the block must reach every barrier,\n"
    " * every lane of the warp every warp function, and the mask must name the whole warp:\n"
    " * anything else stops the process with a message, as the hardware would hang or\n"
    " * compute garbage. */\n"
    "struct snn_emu_block {\n"
    "    bool is_coop;\n"
    "    unsigned n, cur, ndone, arrived, gen;\n"
    "    unsigned long long progress; /* arrivals, completions, returns: a round without any is a deadlock */\n"
    "    unsigned warp_arrived[32], warp_gen[32], warp_done[32];\n"
    "    unsigned long long warp_val[32][2][32];\n"
    "    ucontext_t sched;\n"
    "    ucontext_t *ctx;\n"
    "    bool *is_done;\n"
    "    void (*thread)(void **);\n"
    "    void **params;\n"
    "};\n"
    "static snn_emu_block snn_emu_b;\n"
    "[[noreturn]] static void snn_emu_fail(const char *what)\n"
    "{\n"
    "    std::fprintf(stderr, \"snnc CUDA emulator: block %u thread %u: %s\\n\", blockIdx.x,\n"
    "                 threadIdx.x, what);\n"
    "    std::abort();\n"
    "}\n"
    "static void snn_emu_yield(void)\n"
    "{\n"
    "    snn_emu_block &e = snn_emu_b;\n"
    "    if (swapcontext(&e.ctx[e.cur], &e.sched) != 0) snn_emu_fail(\"swapcontext failed\");\n"
    "}\n"
    "static void snn_emu_entry(void)\n"
    "{\n"
    "    snn_emu_block &e = snn_emu_b;\n"
    "    e.thread(e.params);\n"
    "    unsigned w = e.cur / 32;\n"
    "    if (e.arrived != 0)\n"
    "        snn_emu_fail(\"returned while threads of its block wait at __syncthreads\");\n"
    "    if (e.warp_arrived[w] != 0)\n"
    "        snn_emu_fail(\"returned while lanes of its warp wait in a warp function\");\n"
    "    e.is_done[e.cur] = true;\n"
    "    e.progress++;\n"
    "    e.ndone++;\n"
    "    e.warp_done[w]++;\n"
    "} /* then uc_link: back to the scheduler */\n"
    ;

/* the emulation's launch: blocks in turn, a block's threads in turn or as coroutines */
static const char prelude_emu_launch[] =
    "static void snn_emu_launch(unsigned gx, unsigned bx, void **params,\n"
    "                           void (*thread)(void **), bool is_coop)\n"
    "{\n"
    "    snn_emu_block &e = snn_emu_b;\n"
    "    gridDim = snn_dim3{gx, 1, 1};\n"
    "    blockDim = snn_dim3{bx, 1, 1};\n"
    "    e.is_coop = false;\n"
    "    if (!is_coop) {\n"
    "        for (unsigned b = 0; b < gx; b++)\n"
    "            for (unsigned t = 0; t < bx; t++) {\n"
    "                blockIdx = snn_dim3{b, 0, 0};\n"
    "                threadIdx = snn_dim3{t, 0, 0};\n"
    "                thread(params);\n"
    "            }\n"
    "        return;\n"
    "    }\n"
    "    enum { STACK = 256 << 10 };\n"
    "    e.n = bx;\n"
    "    e.thread = thread;\n"
    "    e.params = params;\n"
    "    e.ctx = (ucontext_t *)std::calloc(bx, sizeof *e.ctx);\n"
    "    e.is_done = (bool *)std::calloc(bx, sizeof *e.is_done);\n"
    "    char *stacks = (char *)std::malloc((size_t)bx * STACK);\n"
    "    if (!e.ctx || !e.is_done || !stacks)\n"
    "        snn_emu_fail(\"out of memory for the block's coroutines\");\n"
    "    e.is_coop = true;\n"
    "    e.progress = 0;\n"
    "    for (unsigned b = 0; b < gx; b++) {\n"
    "        blockIdx = snn_dim3{b, 0, 0};\n"
    "        e.ndone = e.arrived = e.gen = 0;\n"
    "        std::memset(e.warp_arrived, 0, sizeof e.warp_arrived);\n"
    "        std::memset(e.warp_gen, 0, sizeof e.warp_gen);\n"
    "        std::memset(e.warp_done, 0, sizeof e.warp_done);\n"
    "        for (unsigned t = 0; t < bx; t++) {\n"
    "            e.is_done[t] = false;\n"
    "            if (getcontext(&e.ctx[t]) != 0) snn_emu_fail(\"getcontext failed\");\n"
    "            e.ctx[t].uc_stack.ss_sp = stacks + (size_t)t * STACK;\n"
    "            e.ctx[t].uc_stack.ss_size = STACK;\n"
    "            e.ctx[t].uc_link = &e.sched;\n"
    "            makecontext(&e.ctx[t], snn_emu_entry, 0);\n"
    "        }\n"
    "        while (e.ndone < bx) {\n"
    "            unsigned long long before = e.progress;\n"
    "            for (unsigned t = 0; t < bx; t++) {\n"
    "                if (e.is_done[t]) continue;\n"
    "                e.cur = t;\n"
    "                threadIdx = snn_dim3{t, 0, 0};\n"
    "                if (swapcontext(&e.sched, &e.ctx[t]) != 0)\n"
    "                    snn_emu_fail(\"swapcontext failed\");\n"
    "            }\n"
    "            if (e.progress == before && e.ndone < bx)\n"
    "                snn_emu_fail(\"deadlock: every thread of the block waits, at barriers or in warp \"\n"
    "                             \"functions that the others never reach\");\n"
    "        }\n"
    "    }\n"
    "    e.is_coop = false;\n"
    "    std::free(stacks);\n"
    "    std::free(e.is_done);\n"
    "    std::free(e.ctx);\n"
    "}\n"
    ;

/* the CUDA functions where a block's threads meet, on the emulation's coroutines */
static const char prelude_emu_meet[] =
    "static void __syncthreads(void)\n"
    "{\n"
    "    snn_emu_block &e = snn_emu_b;\n"
    "    if (!e.is_coop) snn_emu_fail(\"__syncthreads in a kernel run thread by thread\");\n"
    "    if (e.ndone != 0) snn_emu_fail(\"__syncthreads after a thread of its block returned\");\n"
    "    unsigned gen = e.gen;\n"
    "    e.progress++;\n"
    "    if (++e.arrived == e.n) {\n"
    "        e.arrived = 0;\n"
    "        e.gen++;\n"
    "        return;\n"
    "    }\n"
    "    while (e.gen == gen) snn_emu_yield();\n"
    "}\n"
    "/* every lane's v, once each lane of the warp has given its own */\n"
    "static const unsigned long long *snn_emu_warp(unsigned mask, unsigned long long v)\n"
    "{\n"
    "    snn_emu_block &e = snn_emu_b;\n"
    "    if (!e.is_coop) snn_emu_fail(\"a warp function in a kernel run thread by thread\");\n"
    "    unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32;\n"
    "    unsigned lanes = e.n - w * 32 < 32 ? e.n - w * 32 : 32;\n"
    "    if (mask != (lanes == 32 ? 0xffffffffu : (1u << lanes) - 1))\n"
    "        snn_emu_fail(\"a warp function's mask is not its whole warp\");\n"
    "    if (e.warp_done[w] != 0)\n"
    "        snn_emu_fail(\"a warp function after a lane of its warp returned\");\n"
    "    unsigned gen = e.warp_gen[w];\n"
    "    e.warp_val[w][gen & 1][lane] = v;\n"
    "    e.progress++;\n"
    "    if (++e.warp_arrived[w] == lanes) {\n"
    "        e.warp_arrived[w] = 0;\n"
    "        e.warp_gen[w]++;\n"
    "    } else {\n"
    "        while (e.warp_gen[w] == gen) snn_emu_yield();\n"
    "    }\n"
    "    return e.warp_val[w][gen & 1]; /* kept until every lane has left this call */\n"
    "}\n"
    "static unsigned long long __shfl_xor_sync(unsigned mask, unsigned long long v, int lm)\n"
    "{\n"
    "    return snn_emu_warp(mask, v)[(threadIdx.x % 32) ^ (unsigned)lm];\n"
    "}\n"
    "static unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)\n"
    "{\n"
    "    unsigned long long old = *p;\n"
    "    *p = old + v;\n"
    "    return old;\n"
    "}\n"
    ;

/* the same built-ins on a GPU (NVRTC), then what both share */
static const char prelude[] =
    "#else\n"
    "#pragma nv_diag_suppress 177 /* helpers a model does not call are declared but not used */\n"
    "typedef unsigned int uint32_t;\n"
    "typedef unsigned long long uint64_t;\n"
    "#define SNN_UNROLL _Pragma(\"unroll\")\n"
    "#define SNN_FN static __device__ __forceinline__\n"
    "SNN_FN float snn_bits_f32(uint32_t u) { return __uint_as_float(u); }\n"
    "SNN_FN uint32_t snn_f32_bits(float f) { return __float_as_uint(f); }\n"
    "SNN_FN double snn_bits_f64(uint64_t u) { return __longlong_as_double((long long)u); }\n"
    "#endif\n"
    "/* f32 exp, log, tanh, pow: the double function rounded once, as on every backend (CUDA's own\n"
    " * expf is off by up to 2 ulp, glibc's tanhf by 1) */\n"
    "SNN_FN float snn_expf(float x) { return (float)exp((double)x); }\n"
    "SNN_FN float snn_logf(float x) { return (float)log((double)x); }\n"
    "SNN_FN float snn_tanhf(float x) { return (float)tanh((double)x); }\n"
    "SNN_FN float snn_powf(float x, float y) { return (float)pow((double)x, (double)y); }\n"
    "/* 16-bit weights as the floats they stand for, exactly (runtime/f16.h's conversions;\n"
    " * f16 on a GPU by its cvt, one instruction for six, exact too: a NaN's payload the one\n"
    " * freedom) */\n"
    "SNN_FN float snn_bf16_f32(unsigned short h) { return snn_bits_f32((uint32_t)h << 16); }\n"
    "#ifdef SNN_CUDA_EMULATE\n"
    "SNN_FN float snn_f16_f32(unsigned short h) {\n"
    "    uint32_t a = h & 0x7fffu;\n"
    "    float r = a >= 0x7c00u ? snn_bits_f32((a << 13) | 0x7f800000u)\n"
    "                           : snn_bits_f32(a << 13) * 0x1p112f;\n"
    "    return (h & 0x8000u) ? -r : r;\n"
    "}\n"
    "#else\n"
    "SNN_FN float snn_f16_f32(unsigned short h) {\n"
    "    float r;\n"
    "    asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(r) : \"h\"(h));\n"
    "    return r;\n"
    "}\n"
    "#endif\n"
    ;

/* the prelude, continued (a string literal stays under C's 4095 characters) */
static const char prelude_16[] =
    "/* f32 to 16 bits, nearest, ties to even (runtime/f16.h's): stores to 16-bit buffers */\n"
    "SNN_FN unsigned short snn_f32_bf16(float x) {\n"
    "    uint32_t u = snn_f32_bits(x);\n"
    "    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;\n"
    "    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n"
    "}\n"
    "SNN_FN unsigned short snn_f32_f16(float x) {\n"
    "    uint32_t u = snn_f32_bits(x), a = u & 0x7fffffffu, s = (u >> 16) & 0x8000u, r;\n"
    "    if (a > 0x7f800000u) r = 0x7e00u | ((a >> 13) & 0x3ffu);\n"
    "    else if (a >= 0x47800000u) r = 0x7c00u;\n"
    "    else if (a >= 0x38800000u) r = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;\n"
    "    else if (a < 0x33000000u) r = 0;\n"
    "    else {\n"
    "        uint32_t m = (a & 0x7fffffu) | 0x800000u, sh = 126u - (a >> 23), rest = m & ((1u << sh) - 1u);\n"
    "        r = m >> sh;\n"
    "        r += rest > (1u << (sh - 1u)) || (rest == (1u << (sh - 1u)) && (r & 1u));\n"
    "    }\n"
    "    return (unsigned short)(s | r);\n"
    "}\n"
    "SNN_FN float snn_round_f16(float x) { return snn_f16_f32(snn_f32_f16(x)); }\n"
    "SNN_FN float snn_round_bf16(float x) { return snn_bf16_f32(snn_f32_bf16(x)); }\n"
    "SNN_FN float snn_f32_nan(void) { return snn_bits_f32(0x7fc00000u); }\n"
    "SNN_FN float snn_f32_inf(void) { return snn_bits_f32(0x7f800000u); }\n"
    "SNN_FN float snn_f32_ninf(void) { return snn_bits_f32(0xff800000u); }\n"
    "SNN_FN double snn_f64_nan(void) { return snn_bits_f64(0x7ff8000000000000ull); }\n"
    "SNN_FN double snn_f64_inf(void) { return snn_bits_f64(0x7ff0000000000000ull); }\n"
    "SNN_FN double snn_f64_ninf(void) { return snn_bits_f64(0xfff0000000000000ull); }\n"
    "/* min/max propagate NaN like torch.minimum/maximum; the second operand wins ties */\n"
    "SNN_FN float snn_minf(float a, float b) { return (a != a || b != b) ? snn_f32_nan() : (a < b ? a : b); }\n"
    "SNN_FN float snn_maxf(float a, float b) { return (a != a || b != b) ? snn_f32_nan() : (a > b ? a : b); }\n"
    "SNN_FN double snn_min(double a, double b) { return (a != a || b != b) ? snn_f64_nan() : (a < b ? a : b); }\n"
    "SNN_FN double snn_max(double a, double b) { return (a != a || b != b) ? snn_f64_nan() : (a > b ? a : b); }\n"
    "SNN_FN long long snn_mini(long long a, long long b) { return a < b ? a : b; }\n"
    "SNN_FN long long snn_maxi(long long a, long long b) { return a > b ? a : b; }\n"
    "SNN_FN long long snn_absi(long long a) { return a < 0 ? -a : a; }\n"
    "SNN_FN float snn_sigmoidf(float x) { return 1.0f / (1.0f + snn_expf(-x)); }\n"
    "SNN_FN double snn_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }\n"
    "/* a thread's spike count goes to the total before passing this (tests set less) */\n"
    "#ifndef SNN_COUNT_LIMIT\n"
    "#define SNN_COUNT_LIMIT 0xffffffffull\n"
    "#endif\n"
    "/* v of every thread of the block added to *total: the warp's sum by shuffles, the\n"
    " * block's in shared memory, one atomic add. Every thread of the block calls it (grid\n"
    " * kernels: after their grid-stride loop; their blocks are whole warps, 256 threads). */\n"
    "SNN_FN void snn_count_total(unsigned long long *total, unsigned long long v) {\n"
    "    __shared__ unsigned long long warp_sum[32];\n"
    "    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
    "    if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = v;\n"
    "    __syncthreads();\n"
    "    if (threadIdx.x == 0) {\n"
    "        unsigned long long s = 0;\n"
    "        for (unsigned w = 0; w < blockDim.x / 32; w++) s += warp_sum[w];\n"
    "        if (s != 0) atomicAdd(total, s);\n"
    "    }\n"
    "    __syncthreads(); /* warp_sum is free again for the next call */\n"
    "}\n"
    "/* the Philox draws of runtime/philox.h, the same text as the CPU's */\n"
    "#define RT_PHILOX_FN SNN_FN\n"
    "#define RT_PHILOX_NO_STDINT\n";

/* "__global__ void SYM(bufs..., B, t, dyn) {" and the io pointers read from dyn */
static void
kernel_head(Gen *g, const char *sym, const bool *used, const char *t_name)
{
    const KProgram *p = g->p;
    FILE *f = g->f;
    fprintf(f, "extern \"C\" __global__ void __launch_bounds__(%d) %s(", SNN_CUDA_BLOCK, sym);
    for (int b = 0; b < p->nbufs; b++) {
        if (!used[b] || is_io(&p->bufs[b])) continue;
        const KBuf *kb = &p->bufs[b];
        fprintf(f, "%s%s *__restrict__ b%d, ", kb->kind == KB_WEIGHT ? "const " : "",
                mtype(kb->type), b);
    }
    fprintf(f, "long long B, long long %s, const long long *__restrict__ dyn)\n{\n", t_name);
    g->depth = 1;
    indent(g);
    fprintf(f, "(void)B; (void)%s; (void)dyn;\n", t_name);
    for (int b = 0; b < p->nbufs; b++) {
        if (!used[b] || !is_io(&p->bufs[b])) continue;
        const char *c = p->bufs[b].kind == KB_INPUT ? "const " : "";
        const char *ty = mtype(p->bufs[b].type);
        indent(g);
        fprintf(f, "%s%s *__restrict__ b%d = (%s%s *)dyn[%d]; /* %s */\n", c, ty, b, c, ty,
                io_slot(p, b), p->bufs[b].name);
    }
}

static void
kernel_locals(Gen *g, const Kernel *k)
{
    for (int v = 0; v < k->nlocals; v++) {
        const KLocal *l = &k->locals[v];
        indent(g);
        if (l->lanes > 0)
            fprintf(g->f, "%s v%d[%d];", l->type == KT_F32 ? "float" : "double", v, l->lanes);
        else
            fprintf(g->f, "%s v%d = 0;", ctype(l->type), v);
        fprintf(g->f, " /* %s */\n", l->name ? l->name : "");
    }
}

/* a thread's count of each KS_COUNT buffer, declared; then, after the loops, added to the totals */
static void
count_decls(Gen *g, const bool *counted)
{
    for (int b = 0; b < g->p->nbufs; b++) {
        if (!counted[b]) continue;
        indent(g);
        fprintf(g->f, "%s n%d_ = 0; /* this thread's count into %s */\n",
                counts_in_32(g, b) ? "unsigned" : "unsigned long long", b, g->p->bufs[b].name);
    }
}

static bool
count_totals(Gen *g, const bool *counted)
{
    bool any = false;
    for (int b = 0; b < g->p->nbufs; b++) {
        if (!counted[b]) continue;
        indent(g);
        fprintf(g->f, "snn_count_total((unsigned long long *)b%d, n%d_);\n", b, b);
        any = true;
    }
    return any;
}

/* the emulation's entry: the kernel's threads one after another, or, where they meet (barriers,
 * warp functions: is_coop), a block's threads as coroutines (the prelude's snn_emu_launch) */
static void
emu_entry(Gen *g, const char *sym, const bool *used, bool is_coop)
{
    const KProgram *p = g->p;
    FILE *f = g->f;
    int np = 0;
    for (int b = 0; b < p->nbufs; b++)
        np += used[b] && !is_io(&p->bufs[b]);
    fprintf(f, "#ifdef SNN_CUDA_EMULATE\n");
    fprintf(f, "static void %s%s_thread(void **params)\n{\n    %s(", SNN_CUDA_EMU_PREFIX, sym,
            sym);
    int i = 0;
    for (int b = 0; b < p->nbufs; b++)
        if (used[b] && !is_io(&p->bufs[b]))
            fprintf(f, "*(%s **)params[%d], ", mtype(p->bufs[b].type), i++);
    fprintf(f, "*(long long *)params[%d], *(long long *)params[%d], "
               "*(const long long **)params[%d]);\n}\n",
            i, i + 1, i + 2);
    fprintf(f, "extern \"C\" const int %s%s_nparams = %d;\n", SNN_CUDA_EMU_PREFIX, sym, np + 3);
    fprintf(f, "extern \"C\" void %s%s(unsigned gx, unsigned bx, void **params)\n{\n",
            SNN_CUDA_EMU_PREFIX, sym);
    fprintf(f, "    snn_emu_launch(gx, bx, params, %s%s_thread, %s);\n}\n#endif\n",
            SNN_CUDA_EMU_PREFIX, sym, is_coop ? "true" : "false");
}

static void
comment(FILE *f, const char *text)
{
    fputs("/* ", f); /* no "*" "/" inside */
    for (const char *c = text; *c; c++)
        fputc(c[0] == '*' && c[1] == '/' ? '+' : *c, f);
    fputs(" */\n", f);
}

static void
kernel(Gen *g, int ki)
{
    const KProgram *p = g->p;
    const Kernel *k = &p->kernels[ki];
    FILE *f = g->f;
    g->k = k;
    char sym[160];
    symbol(sym, sizeof sym, ki, k);
    bool *used = used_bufs(p, k);
    const KStmt *grid = grid_loop(k);

    fprintf(f, "\n/* kernel %d: %s%s */\n", ki, k->name ? k->name : "", k->is_step ? " (step)" : "");
    if (k->what) comment(f, k->what);
    kernel_head(g, sym, used, "t");
    kernel_locals(g, k);
    bool *counted = xcalloc((size_t)p->nbufs + 1, sizeof *counted);
    mark_counted(k->body, k->nbody, counted);
    bool is_coop = false; /* its threads meet in snn_count_total */
    if (grid) {
        count_decls(g, counted);
        g->counted = counted;
        for_loop(g, grid, LOOP_GRID);
        g->counted = NULL;
        /* every thread of the block gets here: no statement leaves the grid loop early */
        is_coop = count_totals(g, counted);
    } else {
        indent(g);
        fputs("if (blockIdx.x != 0 || threadIdx.x != 0) return;\n", f);
        stmts(g, k->body, k->nbody);
    }
    fputs("}\n", f);
    free(counted);
    emu_entry(g, sym, used, is_coop);
    free(used);
}

/* A fused step loop gives each sample one block: fine where a sample's kernels have few elements
 * (a recurrent layer of 128 neurons: the per-kernel launches cost more than the work), wasteful
 * where they have many (-O0's conv layers step by step: 25,088 outputs a sample, which per-kernel
 * launches spread over every multiprocessor). Fused up to 4 iterations per thread and kernel; to
 * be tuned on a GPU. */
enum { STEPS_FUSE_MAX_ITERS = 4 * SNN_CUDA_BLOCK };

bool
cuda_steps_fused(const KProgram *p, int first, int end)
{
    if (p->timesteps < 1 || !kir_by_sample(p, first, end)) return false;
    for (int k = first; k < end; k++)
        if (!grid_loop(&p->kernels[k]) || p->kernels[k].sample_iters > STEPS_FUSE_MAX_ITERS)
            return false;
    return true;
}

static void
steps_symbol(char *out, size_t n, int first)
{
    snprintf(out, n, "snnk_k%d_steps", first);
}

/* the buffers any of kernels [first, end) uses (caller frees) */
static bool *
steps_used(const KProgram *p, int first, int end)
{
    bool *used = xcalloc((size_t)p->nbufs + 1, sizeof *used);
    for (int ki = first; ki < end; ki++) {
        bool *u = used_bufs(p, &p->kernels[ki]);
        for (int b = 0; b < p->nbufs; b++)
            used[b] = used[b] || u[b];
        free(u);
    }
    return used;
}

/* Step kernels [first, end) as one kernel launched once per run (cuda_steps_fused): a block takes
 * a sample (blockIdx.x, then every gridDim.x-th) through every step, each kernel's iterations of
 * that sample strided over the block's threads, which meet at __syncthreads after each kernel, so
 * that the next kernel, and the next step, read what this one wrote. A recurrence couples a
 * sample's steps only, so no block waits for another, and the T x (end - first) launches of the
 * step loop are one. */
static void
steps_kernel(Gen *g, int first, int end)
{
    const KProgram *p = g->p;
    FILE *f = g->f;
    char sym[160];
    steps_symbol(sym, sizeof sym, first);
    bool *used = steps_used(p, first, end);
    bool *counted = xcalloc((size_t)p->nbufs + 1, sizeof *counted);
    for (int ki = first; ki < end; ki++)
        mark_counted(p->kernels[ki].body, p->kernels[ki].nbody, counted);
    fprintf(f, "\n/* kernels %d..%d: a step loop over t in 0..%d, sample by sample in one launch */\n",
            first, end - 1, p->timesteps);
    g->k = &p->kernels[first];
    kernel_head(g, sym, used, "t"); /* unused: the step loop below declares its own t */
    count_decls(g, counted);
    indent(g);
    fputs("for (long long s_ = blockIdx.x; s_ < B; s_ += gridDim.x) {\n", f);
    g->depth++;
    indent(g);
    fprintf(f, "for (long long t = 0; t < %dLL; t++) {\n", p->timesteps);
    g->depth++;
    for (int ki = first; ki < end; ki++) {
        const Kernel *k = &p->kernels[ki];
        g->k = k;
        indent(g);
        fprintf(f, "{ /* kernel %d: %s */\n", ki, k->name ? k->name : "");
        g->depth++;
        kernel_locals(g, k);
        bool *own = xcalloc((size_t)p->nbufs + 1, sizeof *own); /* what this kernel counts */
        mark_counted(k->body, k->nbody, own);
        g->counted = own;
        for_loop(g, grid_loop(k), LOOP_SAMPLE);
        g->counted = NULL;
        free(own);
        close_brace(g);
        indent(g);
        fputs("__syncthreads();\n", f);
    }
    close_brace(g);
    close_brace(g);
    count_totals(g, counted);
    fputs("}\n", f);
    emu_entry(g, sym, used, true);
    free(counted);
    free(used);
}

char *
cuda_gen_source(const KProgram *p)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) die("out of memory");
    Gen g = {.f = f, .p = p};
    for (int b = 0; b < p->nbufs; b++) /* kir_lower stores spikes as bytes for the GPU */
        if (ktype_bits(p->bufs[b].type))
            die("cuda: bit buffer '%s' in a GPU program", p->bufs[b].name);
    fprintf(f, "/* %s: CUDA C generated by snnc from the kernel IR (--emit=kernel); %d kernels,\n"
               " * T = %d. Kernel parameters and launches: snnc's runtime/cuda_abi.h. */\n",
            p->m->name ? p->m->name : "model", p->nkernels, p->timesteps);
    fputs(prelude_emu, f);
    fputs(prelude_emu_threads, f);
    fputs(prelude_emu_launch, f);
    fputs(prelude_emu_meet, f);
    fputs(prelude, f);
    fputs(prelude_16, f);
    fwrite(snn_philox_text, 1, sizeof snn_philox_text, f);
    /* a whole step loop is one fused kernel or its kernels one by one (never part fused: its
     * kernels interleave step by step) */
    for (int ki = 0; ki < p->nkernels;) {
        int end = ki + 1;
        while (p->kernels[ki].is_step && end < p->nkernels && p->kernels[end].is_step)
            end++;
        if (p->kernels[ki].is_step && cuda_steps_fused(p, ki, end))
            steps_kernel(&g, ki, end);
        else
            for (int k = ki; k < end; k++)
                kernel(&g, k);
        ki = end;
    }
    if (fclose(f) != 0) die("out of memory");
    return text;
}

char *
cuda_gen_describe(const KProgram *p)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) die("out of memory");
    char *bufs = kir_describe_buffers(p, "cuda_");
    fputs(bufs, f);
    free(bufs);
    int rec = 0; /* records in launch order: a fused step loop is one */
    for (int ki = 0, loop_end = 0; ki < p->nkernels;) {
        const Kernel *k = &p->kernels[ki];
        int end = ki + 1;
        while (k->is_step && end < p->nkernels && p->kernels[end].is_step)
            end++;
        /* a step loop is fused whole or not at all (cuda_gen_source) */
        bool is_fused = k->is_step && ki >= loop_end && cuda_steps_fused(p, ki, end);
        if (k->is_step && ki >= loop_end) loop_end = end;
        char sym[160];
        if (is_fused)
            steps_symbol(sym, sizeof sym, ki);
        else
            symbol(sym, sizeof sym, ki, k);
        bool *used = is_fused ? steps_used(p, ki, end) : used_bufs(p, k);
        int nb = 0;
        for (int b = 0; b < p->nbufs; b++)
            nb += used[b] && !is_io(&p->bufs[b]);
        const KStmt *grid = is_fused ? NULL : grid_loop(k);
        fprintf(f, "cuda_kernel %d %s %d %s %d", rec++, sym, k->is_step && !is_fused ? 1 : 0,
                grid || is_fused ? "grid" : "single", nb);
        for (int b = 0; b < p->nbufs; b++)
            if (used[b] && !is_io(&p->bufs[b])) fprintf(f, " %d", b);
        if (is_fused) {
            /* a block per sample (the runtime caps the grid; blocks stride over the rest) */
            fprintf(f, " B %d * 0 -\n", SNN_CUDA_BLOCK);
        } else if (grid) {
            rpn(f, grid->hi);
            rpn(f, grid->lo);
            fputs(" -\n", f);
        } else {
            fputs(" 1\n", f);
        }
        free(used);
        ki = is_fused ? end : ki + 1;
    }
    if (fclose(f) != 0) die("out of memory");
    return text;
}

/* ---- snnc --train --device=cuda: the optimiser's update and the weights' packed copies on the
 * device (driver/train.c launches them by name: runtime/cuda_exec.h rt_cuda_exec_launch). The
 * update is runtime/train.c's, operation for operation in float32 (no contraction: --fmad=false;
 * sqrtf and / correctly rounded), its scalars computed by the host as there and passed as bits:
 * the same weights as the host's optimiser, bit for bit. ---- */

static const char train_text[] =
    "/* the training step's optimiser and packed weight copies (snnc --train --device=cuda) */\n"
    "#define SNN_TRAIN_LOOP(n) for (long long i = (long long)blockIdx.x * blockDim.x + "
    "threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)\n"
    "#define SNN_F(u) snn_bits_f32((uint32_t)(u))\n"
    "/* SGD: flags 1 weight decay, 2 momentum, 4 nesterov, 8 the first step */\n"
    "extern \"C\" __global__ void __launch_bounds__(256) snn_train_sgd(float *__restrict__ p, "
    "const float *__restrict__ g, float *__restrict__ m, long long n, long long lr_, long long "
    "wd_, long long mom_, long long damp_, long long flags)\n"
    "{\n"
    "    float lr = SNN_F(lr_), wd = SNN_F(wd_), mom = SNN_F(mom_), damp1 = SNN_F(damp_);\n"
    "    SNN_TRAIN_LOOP(n) {\n"
    "        float d = g[i];\n"
    "        if (flags & 1) d = fmaf(p[i], wd, d);\n"
    "        if (flags & 2) {\n"
    "            float b = (flags & 8) ? d : fmaf(d, damp1, m[i] * mom);\n"
    "            m[i] = b;\n"
    "            d = (flags & 4) ? fmaf(b, mom, d) : b;\n"
    "        }\n"
    "        p[i] = fmaf(d, -lr, p[i]);\n"
    "    }\n"
    "}\n"
    "/* Adam and AdamW: flags 1 L2 weight decay (Adam), 2 decoupled decay (AdamW) */\n"
    "extern \"C\" __global__ void __launch_bounds__(256) snn_train_adam(float *__restrict__ p, "
    "const float *__restrict__ g, float *__restrict__ m, float *__restrict__ v, long long n, "
    "long long step_size_, long long bc2_sqrt_, long long w1_, long long b2_, long long w2_, "
    "long long eps_, long long wd_, long long keep_, long long flags)\n"
    "{\n"
    "    float step_size = SNN_F(step_size_), bc2_sqrt = SNN_F(bc2_sqrt_), w1 = SNN_F(w1_);\n"
    "    float b2 = SNN_F(b2_), w2 = SNN_F(w2_), eps = SNN_F(eps_), wd = SNN_F(wd_), keep = "
    "SNN_F(keep_);\n"
    "    SNN_TRAIN_LOOP(n) {\n"
    "        float pi = p[i];\n"
    "        if (flags & 2) pi *= keep;\n"
    "        float d = (flags & 1) ? fmaf(pi, wd, g[i]) : g[i];\n"
    "        float mi = fmaf(w1, d - m[i], m[i]);\n"
    "        m[i] = mi;\n"
    "        float vi = v[i] * b2;\n"
    "        float dd = w2 * d;\n"
    "        vi = vi + dd * d;\n"
    "        v[i] = vi;\n"
    "        float denom = sqrtf(vi) / bc2_sqrt + eps;\n"
    "        float upd = -step_size * mi;\n"
    "        p[i] = pi + upd / denom;\n"
    "    }\n"
    "}\n"
    "/* dst = src transposed (NumPy's transpose made contiguous): dst's dims d[0..rank), the\n"
    " * source's stride along each, the last fastest */\n"
    "extern \"C\" __global__ void __launch_bounds__(256) snn_train_repack(float *__restrict__ "
    "dst, const float *__restrict__ src, long long n, long long rank, long long d0, long long d1, "
    "long long d2, long long d3, long long d4, long long s0, long long s1, long long s2, long long "
    "s3, long long s4)\n"
    "{\n"
    "    const long long d[5] = {d0, d1, d2, d3, d4}, s[5] = {s0, s1, s2, s3, s4};\n"
    "    SNN_TRAIN_LOOP(n) {\n"
    "        long long rest = i, at = 0;\n"
    "        for (long long k = rank - 1; k >= 0; k--) {\n"
    "            at += rest % d[k] * s[k];\n"
    "            rest /= d[k];\n"
    "        }\n"
    "        dst[i] = src[at];\n"
    "    }\n"
    "}\n";

/* (ISO C's string limit) their host emulation's entries */
static const char train_emu[] =
    "#ifdef SNN_CUDA_EMULATE\n"
    "#define SNN_P(T, i) (*(T *)params[i])\n"
    "static void snn_train_sgd_thread(void **params)\n"
    "{\n"
    "    snn_train_sgd(SNN_P(float *, 0), SNN_P(const float *, 1), SNN_P(float *, 2), "
    "SNN_P(long long, 3), SNN_P(long long, 4), SNN_P(long long, 5), SNN_P(long long, 6), "
    "SNN_P(long long, 7), SNN_P(long long, 8));\n"
    "}\n"
    "static void snn_train_adam_thread(void **params)\n"
    "{\n"
    "    snn_train_adam(SNN_P(float *, 0), SNN_P(const float *, 1), SNN_P(float *, 2), "
    "SNN_P(float *, 3), SNN_P(long long, 4), SNN_P(long long, 5), SNN_P(long long, 6), "
    "SNN_P(long long, 7), SNN_P(long long, 8), SNN_P(long long, 9), SNN_P(long long, 10), "
    "SNN_P(long long, 11), SNN_P(long long, 12), SNN_P(long long, 13));\n"
    "}\n"
    "static void snn_train_repack_thread(void **params)\n"
    "{\n"
    "    snn_train_repack(SNN_P(float *, 0), SNN_P(const float *, 1), SNN_P(long long, 2), "
    "SNN_P(long long, 3), SNN_P(long long, 4), SNN_P(long long, 5), SNN_P(long long, 6), "
    "SNN_P(long long, 7), SNN_P(long long, 8), SNN_P(long long, 9), SNN_P(long long, 10), "
    "SNN_P(long long, 11), SNN_P(long long, 12), SNN_P(long long, 13));\n"
    "}\n"
    "extern \"C\" const int snnk_emu_snn_train_sgd_nparams = 9;\n"
    "extern \"C\" const int snnk_emu_snn_train_adam_nparams = 14;\n"
    "extern \"C\" const int snnk_emu_snn_train_repack_nparams = 14;\n"
    "extern \"C\" void snnk_emu_snn_train_sgd(unsigned gx, unsigned bx, void **params)\n"
    "{\n"
    "    snn_emu_launch(gx, bx, params, snn_train_sgd_thread, false);\n"
    "}\n"
    "extern \"C\" void snnk_emu_snn_train_adam(unsigned gx, unsigned bx, void **params)\n"
    "{\n"
    "    snn_emu_launch(gx, bx, params, snn_train_adam_thread, false);\n"
    "}\n"
    "extern \"C\" void snnk_emu_snn_train_repack(unsigned gx, unsigned bx, void **params)\n"
    "{\n"
    "    snn_emu_launch(gx, bx, params, snn_train_repack_thread, false);\n"
    "}\n"
    "#endif\n";

char *
cuda_gen_train_source(const KProgram *p)
{
    char *prog = cuda_gen_source(p);
    size_t n = strlen(prog);
    char *text = xmalloc(n + sizeof train_text + sizeof train_emu);
    memcpy(text, prog, n);
    memcpy(text + n, train_text, sizeof train_text - 1);
    memcpy(text + n + sizeof train_text - 1, train_emu, sizeof train_emu);
    free(prog);
    return text;
}
