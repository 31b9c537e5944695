/* The kernel IR's core: its types' names and sizes, operator spellings, expression builders
 * (which fold constants), value names and lifetime. Every reader and writer of the kernel IR
 * (lowering, printer, evaluator, code generators) builds on this file. */
#include "codegen/kir.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- types and operators: names and sizes ---- */

/* the rows of runtime/elem_types.def and kir_ops.def, by enum value */
static const struct {
    const char *name;
    size_t bytes;
} ktypes[] = {
#define ELEM(id, name, bytes, bits, value) [KT_##id] = {name, bytes},
#include "runtime/elem_types.def"
#undef ELEM
};
static const char *const kuns[] = {
#define KUN(id, spelling) [KU_##id] = spelling,
#include "codegen/kir_ops.def"
#undef KUN
};
static const char *const kbins[] = {
#define KBIN(id, spelling) [KB_##id] = spelling,
#include "codegen/kir_ops.def"
#undef KBIN
};

static const struct {
    const char *name, *what;
} kgroups[] = {
#define KGROUP(id, name, fn, what) [KG_##id] = {name, what},
#include "codegen/kir_groups.def"
#undef KGROUP
};


const char *
kgroup_name(KGroupKind g)
{
    return (unsigned)g < sizeof kgroups / sizeof kgroups[0] ? kgroups[g].name : "?";
}

const char *
kgroup_what(KGroupKind g)
{
    return (unsigned)g < sizeof kgroups / sizeof kgroups[0] ? kgroups[g].what : "?";
}

const char *
ktype_name(KType t)
{
    return (unsigned)t < sizeof ktypes / sizeof ktypes[0] ? ktypes[t].name : "?";
}

/* bytes of one element (u8, i8, bool: a byte; bit, bit2: a byte holds 8, 4: kbytes) */
size_t
ktype_size(KType t)
{
    return (unsigned)t < sizeof ktypes / sizeof ktypes[0] ? ktypes[t].bytes : 1;
}

int64_t
kbytes(KType t, int64_t elements)
{
    int bits = ktype_bits(t);
    return bits ? (elements * bits + 7) / 8 : elements * (int64_t)ktype_size(t);
}

const char *
kbin_str(KBin op)
{
    return (unsigned)op < sizeof kbins / sizeof kbins[0] ? kbins[op] : "?";
}

const char *
kun_str(KUn op)
{
    return (unsigned)op < sizeof kuns / sizeof kuns[0] ? kuns[op] : "?";
}

/* ---- value names ---- */

const char *
kir_value_name(const KProgram *p, ValueId v, char *buf, size_t n)
{
    if (p->m->nodes[v].name) return p->m->nodes[v].name;
    snprintf(buf, n, "v%d", p->vnum ? p->vnum[v] : (int)v);
    return buf;
}

/* ---- builders ---- */

KExpr *
kx_new(KProgram *p, KxKind kind, KType t)
{
    KExpr *e = arena_alloc(&p->arena, sizeof *e);
    e->kind = kind;
    e->type = t;
    return e;
}

KExpr *
kx_const(KProgram *p, KType t, double v)
{
    KExpr *e = kx_new(p, KX_CONST, t);
    e->num = t == KT_F32 ? (double)(float)v : v;
    return e;
}

KExpr *
kx_kind(KProgram *p, KxKind kind)
{
    return kx_new(p, kind, KT_I64);
}

KExpr *
kx_var(KProgram *p, const Kernel *k, int var)
{
    if (var < 0 || var >= k->nlocals)
        die("kir: local %d out of range", var);
    KExpr *e = kx_new(p, KX_VAR, k->locals[var].type);
    e->var = var;
    return e;
}

KExpr *
kx_load(KProgram *p, int buf, KExpr *index)
{
    if (buf < 0 || buf >= p->nbufs)
        die("kir: buffer %d out of range", buf);
    KExpr *e = kx_new(p, KX_LOAD, ktype_value(p->bufs[buf].type));
    e->buf = buf;
    e->a = index;
    return e;
}

/* the byte (KLOAD_BYTES, a u8) or the 8 bytes (KLOAD_WORD, an i64) from byte `index` of bit
 * buffer buf */
KExpr *
kx_load_bits(KProgram *p, int buf, KExpr *index, int how)
{
    KExpr *e = kx_load(p, buf, index);
    if (!ktype_bits(p->bufs[buf].type))
        die("kir: byte load from %s buffer '%s'", ktype_name(p->bufs[buf].type), p->bufs[buf].name);
    e->op = how;
    e->type = how == KLOAD_WORD ? KT_I64 : KT_U8; /* bytes of pairs too: not an element's i8 */
    return e;
}

KExpr *
kx_un(KProgram *p, KUn op, KExpr *a)
{
    KExpr *e = kx_new(p, KX_UN, op == KU_NOT ? KT_BOOL : a->type);
    e->op = op;
    e->a = a;
    return e;
}

static bool
is_const(const KExpr *e, double v)
{
    return e->kind == KX_CONST && e->num == v;
}

KExpr *
kx_bin(KProgram *p, KBin op, KExpr *a, KExpr *b)
{
    if (a->type != b->type)
        die("kir: %s of %s and %s", kbin_str(op), ktype_name(a->type), ktype_name(b->type));
    /* index arithmetic reads better folded; float arithmetic is never rewritten */
    if (a->type == KT_I64) {
        if (a->kind == KX_CONST && b->kind == KX_CONST && op <= KB_REM && op != KB_MIN &&
            op != KB_MAX && op != KB_POW && !(op >= KB_DIV && b->num == 0)) {
            int64_t x = (int64_t)a->num, y = (int64_t)b->num, r = 0;
            bool is_over = false;
            switch (op) {
            case KB_ADD: is_over = __builtin_add_overflow(x, y, &r); break;
            case KB_SUB: is_over = __builtin_sub_overflow(x, y, &r); break;
            case KB_MUL: is_over = __builtin_mul_overflow(x, y, &r); break;
            case KB_DIV: r = x / y; break;
            case KB_REM: r = x % y; break;
            default: unreachable();
            }
            /* a constant holds integers exactly up to 2^53: larger results stay operations */
            if (!is_over && r >= -(INT64_C(1) << 53) && r <= INT64_C(1) << 53)
                return kx_const(p, KT_I64, (double)r);
        }
        if (a->kind == KX_CONST && b->kind == KX_CONST && op >= KB_LT && op <= KB_NE) {
            double x = a->num, y = b->num;
            bool r = op == KB_LT ? x < y : op == KB_LE ? x <= y : op == KB_GT ? x > y
                   : op == KB_GE ? x >= y : op == KB_EQ ? x == y : x != y;
            return kx_const(p, KT_BOOL, r);
        }
        if (op == KB_ADD && is_const(a, 0))
            return b;
        if ((op == KB_ADD || op == KB_SUB) && is_const(b, 0))
            return a;
        if (op == KB_MUL && (is_const(a, 0) || is_const(b, 0)))
            return kx_const(p, KT_I64, 0);
        if (op == KB_MUL && is_const(a, 1))
            return b;
        if ((op == KB_MUL || op == KB_DIV) && is_const(b, 1))
            return a;
        if (op == KB_REM && is_const(b, 1))
            return kx_const(p, KT_I64, 0);
    }
    if (a->type == KT_BOOL && op == KB_AND && (a->kind == KX_CONST || b->kind == KX_CONST)) {
        const KExpr *k = a->kind == KX_CONST ? a : b;
        return k->num != 0 ? (k == a ? b : a) : kx_const(p, KT_BOOL, 0);
    }
    KType t = op >= KB_LT ? KT_BOOL : a->type;
    KExpr *e = kx_new(p, KX_BIN, t);
    e->op = op;
    e->a = a;
    e->b = b;
    return e;
}

KExpr *
kx_select(KProgram *p, KExpr *c, KExpr *a, KExpr *b)
{
    if (c->type != KT_BOOL || a->type != b->type)
        die("kir: select of %s ? %s : %s", ktype_name(c->type), ktype_name(a->type),
            ktype_name(b->type));
    KExpr *e = kx_new(p, KX_SELECT, a->type);
    e->a = c;
    e->b = a;
    e->c = b;
    return e;
}

KExpr *
kx_cast(KProgram *p, KType t, KExpr *a)
{
    if (a->type == t)
        return a;
    if (a->kind == KX_CONST && t != KT_BOOL && a->type != KT_F32 && a->type != KT_F64)
        return kx_const(p, t, a->num); /* integer constants convert exactly */
    /* to float, what was widened to double from a type float holds exactly (float, bytes, bool):
     * the value itself (float tiles take the f64 operands the lowering writes for double ones) */
    if (t == KT_F32 && a->kind == KX_CAST && a->type == KT_F64 &&
        (a->a->type == KT_F32 || a->a->type == KT_U8 || a->a->type == KT_I8 ||
         a->a->type == KT_BOOL))
        return kx_cast(p, t, a->a);
    if (t == KT_F32 && a->kind == KX_CONST && a->type == KT_F64 && (double)(float)a->num == a->num)
        return kx_const(p, t, a->num);
    KExpr *e = kx_new(p, KX_CAST, t);
    e->a = a;
    return e;
}

bool
kir_by_sample(const KProgram *p, int first, int end)
{
    for (int k = first; k < end; k++)
        if (!p->kernels[k].is_step || p->kernels[k].sample_iters <= 0) return false;
    return end > first;
}

int64_t
ksize_eval(KSize s, int64_t batch)
{
    return s.per_batch * batch + s.fixed;
}

void
kir_free(KProgram *p)
{
    if (!p)
        return;
    arena_free(&p->arena);
    free(p);
}
