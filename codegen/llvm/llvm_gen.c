/* Kernel IR → one LLVM module: a function per kernel and a driver that runs the schedule.
 * Every expression must compute what codegen/kir_eval.c computes, bit for bit: f32 arithmetic in
 * float with no fast-math flags (so no contraction into FMA), transcendental functions as calls to
 * the C library marked nobuiltin (LLVM may neither fold nor rewrite them), Philox inline as
 * runtime/philox.h. Loops are plain rotated loops over an i64 phi so LLVM's vectoriser sees them;
 * nothing here runs code. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/DebugInfo.h>
#include <llvm-c/IRReader.h>

#include "codegen/llvm/llvm_gen.h"
#include "runtime/philox.h"

typedef struct Gen {
    const KProgram *p;
    LLVMContextRef ctx;
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    LLVMTypeRef t_void, t_i1, t_i8, t_i32, t_i64, t_f32, t_f64, t_i8p, t_bufs;
    LLVMTypeRef t_chunk, t_par; /* LlvmChunkFn and LlvmRt.parallel_for (llvm_gen.h) */
    LLVMAttributeRef a_nobuiltin, a_noalias, a_nounwind, a_alwaysinline, a_noinline, a_readnone;
    /* the kernel being generated */
    const Kernel *k;
    LLVMValueRef fn;
    LLVMValueRef *bufptr;  /* [nbufs] typed base address, NULL when the kernel does not touch it */
    LLVMValueRef *local;   /* [nlocals] alloca (tile locals: NULL) */
    LLVMValueRef **tile;   /* [nlocals] a tile local's pieces (allocas, see tile_pieces), or NULL */
    LLVMValueRef *loopval; /* [nlocals] the induction phi while inside its loop, else NULL */
    LLVMValueRef batch, step, sample_base;
    /* a threaded kernel's chunk: its outermost parallel loop runs over [range_lo, range_hi) */
    const KStmt *range_loop;
    LLVMValueRef range_lo, range_hi;
    int parallel_depth;           /* is_parallel loops around the code being generated */
    LLVMMetadataRef access_group; /* tags every load and store inside them; NULL: none to be had */
    unsigned md_access_group, md_loop;
    char *err;
    size_t errlen;
    bool has_failed;
} Gen;

static void gen_stmts(Gen *g, KStmt *const *s, int n);

static void
gen_fail(Gen *g, const char *fmt, ...)
{
    if (g->has_failed) return;
    g->has_failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err, g->errlen, fmt, ap);
    va_end(ap);
}

size_t
llvm_gen_elem_size(KType t)
{
    switch (t) {
    case KT_F32:
        return 4;
    case KT_F64:
        return 8;
    case KT_I64:
        return 8;
    case KT_U8:
    case KT_I8:
    case KT_BOOL:
        return 1;
    }
    return 1;
}

static bool
is_float(KType t)
{
    return t == KT_F32 || t == KT_F64;
}

/* The SSA type of a value of type t. As in kir_eval, every integer value is an i64 (u8 and i8 too:
 * their arithmetic does not wrap at 8 bits; only KX_CAST to them and stores do); bool is an i1. */
static LLVMTypeRef
val_type(Gen *g, KType t)
{
    switch (t) {
    case KT_F32:
        return g->t_f32;
    case KT_F64:
        return g->t_f64;
    case KT_I64:
    case KT_U8:
    case KT_I8:
        return g->t_i64;
    case KT_BOOL:
        return g->t_i1;
    }
    return g->t_i64;
}

/* the in-memory type of a buffer element (bool as a byte, as C stores it) */
static LLVMTypeRef
mem_type(Gen *g, KType t)
{
    switch (t) {
    case KT_U8:
    case KT_I8:
    case KT_BOOL:
        return g->t_i8;
    default:
        return val_type(g, t);
    }
}

/* an i64 wrapped to t's range as C's (uint8_t) / (int8_t) conversions do */
static LLVMValueRef
wrap_int(Gen *g, LLVMValueRef v, KType t)
{
    if (t != KT_U8 && t != KT_I8) return v;
    LLVMValueRef n = LLVMBuildTrunc(g->b, v, g->t_i8, "");
    return t == KT_U8 ? LLVMBuildZExt(g->b, n, g->t_i64, "") : LLVMBuildSExt(g->b, n, g->t_i64, "");
}

static LLVMValueRef
const_of(Gen *g, KType t, double v)
{
    switch (t) {
    case KT_F32:
        return LLVMConstReal(g->t_f32, (double)(float)v);
    case KT_F64:
        return LLVMConstReal(g->t_f64, v);
    case KT_I64:
    case KT_U8:
    case KT_I8:
        return LLVMConstInt(g->t_i64, (unsigned long long)(long long)v, 1);
    case KT_BOOL:
        return LLVMConstInt(g->t_i1, v != 0, 0);
    }
    return NULL;
}

/* Convert v from type `from` to type `to` as kir_eval's KX_CAST does: float → float rounds to
 * nearest, float → int truncates toward zero to an i64, then u8/i8 wrap like C's conversions; bool
 * → anything is 0 or 1; anything → bool is `!= 0`. */
static LLVMValueRef
convert(Gen *g, LLVMValueRef v, KType from, KType to)
{
    LLVMBuilderRef b = g->b;
    if (from == to) return v;
    if (to == KT_BOOL) {
        if (is_float(from))
            return LLVMBuildFCmp(b, LLVMRealUNE, v, LLVMConstNull(val_type(g, from)), "tobool");
        return LLVMBuildICmp(b, LLVMIntNE, v, LLVMConstNull(val_type(g, from)), "tobool");
    }
    if (is_float(from) && is_float(to))
        return to == KT_F32 ? LLVMBuildFPTrunc(b, v, g->t_f32, "")
                            : LLVMBuildFPExt(b, v, g->t_f64, "");
    if (is_float(from)) return wrap_int(g, LLVMBuildFPToSI(b, v, g->t_i64, ""), to);
    if (from == KT_BOOL)
        return is_float(to) ? LLVMBuildUIToFP(b, v, val_type(g, to), "")
                            : LLVMBuildZExt(b, v, g->t_i64, "");
    if (is_float(to)) return LLVMBuildSIToFP(b, v, val_type(g, to), "");
    return wrap_int(g, v, to); /* i64 → i64 */
}

/* A C library function (expf, ...) declared once, called with nobuiltin at the call site so LLVM
 * neither constant-folds it with its own arithmetic nor rewrites it (powf(2, x) → exp2f): the JIT
 * resolves the same libm the evaluator calls. Declared readnone/nounwind so loops around it still
 * optimise. */
static LLVMValueRef
call_libm(Gen *g, const char *name, KType t, LLVMValueRef *args, unsigned nargs)
{
    LLVMTypeRef ft_args[2] = {val_type(g, t), val_type(g, t)};
    LLVMTypeRef fty = LLVMFunctionType(val_type(g, t), ft_args, nargs, 0);
    LLVMValueRef f = LLVMGetNamedFunction(g->mod, name);
    if (!f) {
        f = LLVMAddFunction(g->mod, name, fty);
        LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, g->a_nounwind);
        if (g->a_readnone) LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, g->a_readnone);
    }
    LLVMValueRef c = LLVMBuildCall2(g->b, fty, f, args, nargs, "");
    LLVMAddCallSiteAttribute(c, LLVMAttributeFunctionIndex, g->a_nobuiltin);
    return c;
}

/* An LLVM intrinsic that is exact in IEEE arithmetic (sqrt, fabs, floor): identical to the C
 * library's result, and vectorisable. */
static LLVMValueRef
call_intrinsic(Gen *g, const char *base, KType t, LLVMValueRef a)
{
    char name[64];
    snprintf(name, sizeof name, "llvm.%s.%s", base, t == KT_F32 ? "f32" : "f64");
    LLVMTypeRef ty = val_type(g, t);
    LLVMTypeRef fty = LLVMFunctionType(ty, &ty, 1, 0);
    LLVMValueRef f = LLVMGetNamedFunction(g->mod, name);
    if (!f) f = LLVMAddFunction(g->mod, name, fty);
    return LLVMBuildCall2(g->b, fty, f, &a, 1, "");
}

/* mulhi/mullo of a 32x32 → 64 product */
static void
mul_wide(Gen *g, uint32_t m, LLVMValueRef c, LLVMValueRef *hi, LLVMValueRef *lo)
{
    LLVMValueRef p =
        LLVMBuildMul(g->b, LLVMBuildZExt(g->b, c, g->t_i64, ""), LLVMConstInt(g->t_i64, m, 0), "");
    *hi = LLVMBuildTrunc(g->b, LLVMBuildLShr(g->b, p, LLVMConstInt(g->t_i64, 32, 0), ""), g->t_i32,
                         "");
    *lo = LLVMBuildTrunc(g->b, p, g->t_i32, "");
}

/* rt_uniform(seed, stream, step, index) inline: Philox4x32-10 with the key schedule folded to
 * constants, then (float)(out[0] >> 8) * 2^-24. */
static LLVMValueRef
gen_uniform(Gen *g, uint64_t seed, uint32_t stream, LLVMValueRef step, LLVMValueRef index)
{
    LLVMBuilderRef b = g->b;
    LLVMValueRef c[4];
    c[0] = LLVMBuildTrunc(b, index, g->t_i32, "");
    c[1] =
        LLVMBuildTrunc(b, LLVMBuildLShr(b, index, LLVMConstInt(g->t_i64, 32, 0), ""), g->t_i32, "");
    c[2] = step;
    c[3] = LLVMConstInt(g->t_i32, stream, 0);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < RT_PHILOX_ROUNDS; r++) {
        if (r > 0) {
            k0 += RT_PHILOX_W0;
            k1 += RT_PHILOX_W1;
        }
        LLVMValueRef hi0, lo0, hi1, lo1;
        mul_wide(g, RT_PHILOX_M0, c[0], &hi0, &lo0);
        mul_wide(g, RT_PHILOX_M1, c[2], &hi1, &lo1);
        LLVMValueRef n0 =
            LLVMBuildXor(b, LLVMBuildXor(b, hi1, c[1], ""), LLVMConstInt(g->t_i32, k0, 0), "");
        LLVMValueRef n2 =
            LLVMBuildXor(b, LLVMBuildXor(b, hi0, c[3], ""), LLVMConstInt(g->t_i32, k1, 0), "");
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
    }
    LLVMValueRef top = LLVMBuildLShr(b, c[0], LLVMConstInt(g->t_i32, 8, 0), "");
    return LLVMBuildFMul(b, LLVMBuildUIToFP(b, top, g->t_f32, ""),
                         LLVMConstReal(g->t_f32, 1.0 / 16777216.0), "uniform");
}

/* ---- parallel loops: llvm.loop.parallel_accesses ----
 * KIR's is_parallel says a loop's iterations are independent. Every buffer access inside such a
 * loop carries one access group, and the loop's latch lists it in llvm.loop.parallel_accesses, so
 * the vectoriser needs no dependence proof (it cannot find one for stores at j + t*B*n with B
 * symbolic). One group serves all loops: an access tagged inside loop L is in L's body, and L is
 * parallel. */

/* A distinct metadata node without operands (what an access group must be). The C API builds only
 * uniqued nodes, so it is parsed; distinct nodes belong to the context and outlive the helper
 * module. */
static LLVMMetadataRef
distinct_empty_node(LLVMContextRef ctx)
{
    static const char text[] = "!snn.access_group = !{!0}\n!0 = distinct !{}\n";
    LLVMMemoryBufferRef mb =
        LLVMCreateMemoryBufferWithMemoryRangeCopy(text, sizeof text - 1, "access_group");
    LLVMModuleRef m = NULL;
    char *msg = NULL;
    if (LLVMParseIRInContext(ctx, mb, &m, &msg)) { /* consumes mb */
        LLVMDisposeMessage(msg);
        return NULL; /* no group: loops are left to the vectoriser's own analysis */
    }
    LLVMValueRef op = NULL;
    LLVMMetadataRef md = NULL;
    if (LLVMGetNamedMetadataNumOperands(m, "snn.access_group") == 1) {
        LLVMGetNamedMetadataOperands(m, "snn.access_group", &op); /* the node itself, as a value */
        md = LLVMValueAsMetadata(op);
    }
    LLVMDisposeModule(m);
    return md;
}

static LLVMValueRef
tag_access(Gen *g, LLVMValueRef inst)
{
    if (g->parallel_depth > 0 && g->access_group)
        LLVMSetMetadata(inst, g->md_access_group, LLVMMetadataAsValue(g->ctx, g->access_group));
    return inst;
}

/* !{!self, !{!"llvm.loop.parallel_accesses", group}} on a loop's latch branch. The self reference
 * goes through a temporary node; a uniqued node that refers to itself becomes distinct. */
static void
mark_parallel_loop(Gen *g, LLVMValueRef latch_br)
{
    if (!g->access_group) return;
    static const char key[] = "llvm.loop.parallel_accesses";
    LLVMMetadataRef pa[2] = {LLVMMDStringInContext2(g->ctx, key, sizeof key - 1), g->access_group};
    LLVMMetadataRef tmp = LLVMTemporaryMDNode(g->ctx, NULL, 0);
    LLVMMetadataRef ops[2] = {tmp, LLVMMDNodeInContext2(g->ctx, pa, 2)};
    LLVMMetadataRef id = LLVMMDNodeInContext2(g->ctx, ops, 2);
    LLVMMetadataReplaceAllUsesWith(tmp, id); /* also frees tmp */
    LLVMSetMetadata(latch_br, g->md_loop, LLVMMetadataAsValue(g->ctx, id));
}

static LLVMValueRef gen_expr(Gen *g, const KExpr *e);

/* an expression as type t (index and bound expressions are i64) */
static LLVMValueRef
gen_expr_as(Gen *g, const KExpr *e, KType t)
{
    return convert(g, gen_expr(g, e), e->type, t);
}

static LLVMValueRef
elem_ptr(Gen *g, int buf, const KExpr *index)
{
    if (buf < 0 || buf >= g->p->nbufs || !g->bufptr[buf]) {
        gen_fail(g, "kernel %s: buffer %d out of range", g->k->name, buf);
        return NULL;
    }
    LLVMValueRef idx = gen_expr_as(g, index, KT_I64);
    return LLVMBuildInBoundsGEP2(g->b, mem_type(g, g->p->bufs[buf].type), g->bufptr[buf], &idx, 1,
                                 "");
}

static LLVMValueRef
gen_un(Gen *g, const KExpr *e)
{
    LLVMBuilderRef b = g->b;
    KType t = e->a->type;
    LLVMValueRef a = gen_expr(g, e->a);
    bool is_f = is_float(t), is_f32 = t == KT_F32;
    switch ((KUn)e->op) {
    case KU_NEG:
        return convert(g, is_f ? LLVMBuildFNeg(b, a, "") : LLVMBuildNeg(b, a, ""), t, e->type);
    case KU_NOT:
        return convert(g, LLVMBuildNot(b, convert(g, a, t, KT_BOOL), ""), KT_BOOL, e->type);
    case KU_ABS:
        if (is_f) return convert(g, call_intrinsic(g, "fabs", t, a), t, e->type);
        return convert(
            g,
            LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, a, LLVMConstNull(LLVMTypeOf(a)), ""),
                            LLVMBuildNeg(b, a, ""), a, ""),
            t, e->type);
    default:
        break;
    }
    if (!is_f && e->op == KU_FLOOR) return convert(g, a, t, e->type);
    if (!is_f) {
        gen_fail(g, "kernel %s: unary op %d on type %d", g->k->name, e->op, (int)t);
        return LLVMGetUndef(val_type(g, e->type));
    }
    LLVMValueRef r;
    switch ((KUn)e->op) {
    case KU_EXP:
        r = call_libm(g, is_f32 ? "expf" : "exp", t, &a, 1);
        break;
    case KU_LOG:
        r = call_libm(g, is_f32 ? "logf" : "log", t, &a, 1);
        break;
    case KU_TANH:
        r = call_libm(g, is_f32 ? "tanhf" : "tanh", t, &a, 1);
        break;
    case KU_SQRT:
        r = call_intrinsic(g, "sqrt", t, a);
        break;
    case KU_FLOOR:
        r = call_intrinsic(g, "floor", t, a);
        break;
    case KU_SIGMOID: {
        /* 1 / (1 + exp(-x)), in that order, in t */
        LLVMValueRef na = LLVMBuildFNeg(b, a, "");
        LLVMValueRef ex = call_libm(g, is_f32 ? "expf" : "exp", t, &na, 1);
        LLVMValueRef one = const_of(g, t, 1.0);
        r = LLVMBuildFDiv(b, one, LLVMBuildFAdd(b, one, ex, ""), "sigmoid");
        break;
    }
    default:
        gen_fail(g, "kernel %s: unknown unary op %d", g->k->name, e->op);
        return LLVMGetUndef(val_type(g, e->type));
    }
    return convert(g, r, t, e->type);
}

/* min/max as the evaluator and the interpreter: NaN if either operand is NaN, else a < b ? a : b
 * (so min(-0, +0) is +0: not llvm.minimum). */
static LLVMValueRef
gen_minmax(Gen *g, bool is_min, KType t, LLVMValueRef a, LLVMValueRef bv)
{
    LLVMBuilderRef b = g->b;
    if (is_float(t)) {
        LLVMValueRef lt = LLVMBuildFCmp(b, is_min ? LLVMRealOLT : LLVMRealOGT, a, bv, "");
        LLVMValueRef r = LLVMBuildSelect(b, lt, a, bv, "");
        LLVMValueRef uno = LLVMBuildFCmp(b, LLVMRealUNO, a, bv, "");
        return LLVMBuildSelect(b, uno, LLVMConstReal(val_type(g, t), NAN), r,
                               is_min ? "min" : "max");
    }
    LLVMIntPredicate pr =
        t == KT_BOOL ? (is_min ? LLVMIntULT : LLVMIntUGT) : (is_min ? LLVMIntSLT : LLVMIntSGT);
    return LLVMBuildSelect(b, LLVMBuildICmp(b, pr, a, bv, ""), a, bv, is_min ? "min" : "max");
}

static LLVMValueRef
gen_bin(Gen *g, const KExpr *e)
{
    LLVMBuilderRef b = g->b;
    KType t = e->a->type;
    LLVMValueRef a = gen_expr(g, e->a);
    LLVMValueRef bv = gen_expr_as(g, e->b, t);
    bool is_f = is_float(t), is_u = t == KT_BOOL; /* other integers are i64 values, signed */
    LLVMValueRef r;
    KType rt = t; /* the type r has */
    static const LLVMRealPredicate fpred[] = {LLVMRealOLT, LLVMRealOLE, LLVMRealOGT,
                                              LLVMRealOGE, LLVMRealOEQ, LLVMRealUNE};
    static const LLVMIntPredicate spred[] = {LLVMIntSLT, LLVMIntSLE, LLVMIntSGT,
                                             LLVMIntSGE, LLVMIntEQ,  LLVMIntNE};
    static const LLVMIntPredicate upred[] = {LLVMIntULT, LLVMIntULE, LLVMIntUGT,
                                             LLVMIntUGE, LLVMIntEQ,  LLVMIntNE};
    switch ((KBin)e->op) {
    case KB_ADD:
        r = is_f ? LLVMBuildFAdd(b, a, bv, "") : LLVMBuildAdd(b, a, bv, "");
        break;
    case KB_SUB:
        r = is_f ? LLVMBuildFSub(b, a, bv, "") : LLVMBuildSub(b, a, bv, "");
        break;
    case KB_MUL:
        r = is_f ? LLVMBuildFMul(b, a, bv, "") : LLVMBuildMul(b, a, bv, "");
        break;
    case KB_DIV:
        r = is_f   ? LLVMBuildFDiv(b, a, bv, "")
            : is_u ? LLVMBuildUDiv(b, a, bv, "")
                   : LLVMBuildSDiv(b, a, bv, "");
        break;
    case KB_REM:
        if (is_f) {
            gen_fail(g, "kernel %s: rem on a float", g->k->name);
            return LLVMGetUndef(val_type(g, e->type));
        }
        r = is_u ? LLVMBuildURem(b, a, bv, "") : LLVMBuildSRem(b, a, bv, "");
        break;
    case KB_MIN:
        r = gen_minmax(g, true, t, a, bv);
        break;
    case KB_MAX:
        r = gen_minmax(g, false, t, a, bv);
        break;
    case KB_POW:
        if (!is_f) {
            gen_fail(g, "kernel %s: pow on an integer", g->k->name);
            return LLVMGetUndef(val_type(g, e->type));
        }
        r = call_libm(g, t == KT_F32 ? "powf" : "pow", t, (LLVMValueRef[]){a, bv}, 2);
        break;
    case KB_LT:
    case KB_LE:
    case KB_GT:
    case KB_GE:
    case KB_EQ:
    case KB_NE: {
        int i = e->op - KB_LT;
        r = is_f ? LLVMBuildFCmp(b, fpred[i], a, bv, "")
                 : LLVMBuildICmp(b, (is_u ? upred : spred)[i], a, bv, "");
        rt = KT_BOOL;
        break;
    }
    case KB_AND:
    case KB_OR: {
        LLVMValueRef x = convert(g, a, t, KT_BOOL), y = convert(g, bv, t, KT_BOOL);
        r = e->op == KB_AND ? LLVMBuildAnd(b, x, y, "") : LLVMBuildOr(b, x, y, "");
        rt = KT_BOOL;
        break;
    }
    default:
        gen_fail(g, "kernel %s: unknown binary op %d", g->k->name, e->op);
        return LLVMGetUndef(val_type(g, e->type));
    }
    return convert(g, r, rt, e->type);
}

/* a ? b : c as a select: both arms are safe to evaluate (kir.h: a load that may be out of bounds is
 * guarded by a KS_IF, never by a select) */
static LLVMValueRef
gen_select(Gen *g, const KExpr *e)
{
    LLVMValueRef cond = gen_expr_as(g, e->a, KT_BOOL);
    return LLVMBuildSelect(g->b, cond, gen_expr_as(g, e->b, e->type), gen_expr_as(g, e->c, e->type),
                           "");
}

static LLVMValueRef
gen_expr(Gen *g, const KExpr *e)
{
    if (!e) {
        gen_fail(g, "kernel %s: missing operand", g->k->name);
        return LLVMGetUndef(g->t_i64);
    }
    switch (e->kind) {
    case KX_CONST:
        return const_of(g, e->type, e->num);
    case KX_BATCH:
        return convert(g, g->batch, KT_I64, e->type);
    case KX_SAMPLE_BASE:
        return convert(g, g->sample_base, KT_I64, e->type);
    case KX_STEP:
        if (!g->k->is_step) gen_fail(g, "kernel %s: step read outside a step kernel", g->k->name);
        return convert(g, g->step, KT_I64, e->type);
    case KX_VAR: {
        if (e->var < 0 || e->var >= g->k->nlocals) {
            gen_fail(g, "kernel %s: local %d out of range", g->k->name, e->var);
            return LLVMGetUndef(val_type(g, e->type));
        }
        if (g->tile[e->var]) {
            gen_fail(g, "kernel %s: tile %s read as a scalar", g->k->name,
                     g->k->locals[e->var].name);
            return LLVMGetUndef(val_type(g, e->type));
        }
        KType lt = g->k->locals[e->var].type;
        LLVMValueRef v = g->loopval[e->var];
        if (!v)
            v = LLVMBuildLoad2(g->b, val_type(g, lt), g->local[e->var], g->k->locals[e->var].name);
        return convert(g, v, lt, e->type);
    }
    case KX_LOAD: {
        LLVMValueRef ptr = elem_ptr(g, e->buf, e->a);
        if (!ptr) return LLVMGetUndef(val_type(g, e->type));
        KType bt = g->p->bufs[e->buf].type;
        LLVMValueRef v = tag_access(g, LLVMBuildLoad2(g->b, mem_type(g, bt), ptr, ""));
        if (bt == KT_BOOL)
            v = LLVMBuildICmp(g->b, LLVMIntNE, v, LLVMConstNull(g->t_i8), "");
        else if (bt == KT_U8 || bt == KT_I8)
            v = bt == KT_U8 ? LLVMBuildZExt(g->b, v, g->t_i64, "")
                            : LLVMBuildSExt(g->b, v, g->t_i64, "");
        return convert(g, v, bt, e->type);
    }
    case KX_UN:
        return gen_un(g, e);
    case KX_BIN:
        return gen_bin(g, e);
    case KX_SELECT:
        return gen_select(g, e);
    case KX_CAST:
        /* a cast to u8/i8 always wraps, even from the same type (whose values need not be in range)
         */
        if (e->a->type == e->type) return wrap_int(g, gen_expr(g, e->a), e->type);
        return gen_expr_as(g, e->a, e->type);
    case KX_UNIFORM: {
        LLVMValueRef step = LLVMBuildTrunc(g->b, gen_expr_as(g, e->a, KT_I64), g->t_i32, "");
        LLVMValueRef index = gen_expr_as(g, e->b, KT_I64);
        return convert(g, gen_uniform(g, e->seed, e->stream, step, index), KT_F32, e->type);
    }
    }
    gen_fail(g, "kernel %s: unknown expression kind %d", g->k->name, (int)e->kind);
    return LLVMGetUndef(val_type(g, e->type));
}

/* for var in [lo, hi): a guarded, rotated loop (preheader → body ⟲ latch → exit) over an i64 phi,
 * the bounds evaluated once. */
static void
gen_for(Gen *g, const KStmt *s)
{
    if (s->var < 0 || s->var >= g->k->nlocals || g->tile[s->var]) {
        gen_fail(g, "kernel %s: loop variable %d out of range or a tile", g->k->name, s->var);
        return;
    }
    LLVMBuilderRef b = g->b;
    LLVMValueRef lo, hi;
    if (s == g->range_loop) {
        lo = g->range_lo;
        hi = g->range_hi;
    } else {
        lo = gen_expr_as(g, s->lo, KT_I64);
        hi = gen_expr_as(g, s->hi, KT_I64);
    }
    const char *name = g->k->locals[s->var].name ? g->k->locals[s->var].name : "i";
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "for.body");
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "for.exit");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, lo, hi, ""), body, exit);
    LLVMPositionBuilderAtEnd(b, body);
    LLVMValueRef phi = LLVMBuildPhi(b, g->t_i64, name);
    LLVMValueRef saved = g->loopval[s->var];
    g->loopval[s->var] = convert(g, phi, KT_I64, g->k->locals[s->var].type);
    /* also in its alloca: after the loop it reads the last value, as in kir_eval (mem2reg folds it)
     */
    LLVMBuildStore(b, g->loopval[s->var], g->local[s->var]);
    g->parallel_depth += s->is_parallel;
    gen_stmts(g, s->body, s->nbody);
    g->parallel_depth -= s->is_parallel;
    g->loopval[s->var] = saved;
    LLVMValueRef next = LLVMBuildNSWAdd(b, phi, LLVMConstInt(g->t_i64, 1, 0), "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(b);
    LLVMValueRef br = LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, next, hi, ""), body, exit);
    if (s->is_parallel) mark_parallel_loop(g, br);
    LLVMAddIncoming(phi, (LLVMValueRef[]){lo, next}, (LLVMBasicBlockRef[]){pre, latch}, 2);
    LLVMPositionBuilderAtEnd(b, exit);
}

/* ---- tiles (KS_VSET, KS_VLOAD, KS_VFMA, KS_VSTORE) ----
 * A tile of n lanes lives in pieces of 8, then 4, 2, 1 lanes: one alloca of <len x double> each
 * (a double when len is 1). Every statement reads and writes whole pieces, so SROA turns them into
 * SSA values and a tile stays in vector registers across the loops around it; pieces of 8 split
 * into two AVX2 registers or fill one AVX-512 register. */
enum { TILE_PIECE = 8, MAX_PIECES = 64 }; /* a tile has at most MAX_PIECES pieces */

static int
tile_pieces(int lanes, int *off, int *len)
{
    int n = 0;
    for (int o = 0, w = TILE_PIECE; o < lanes; w /= 2)
        while (w > 0 && lanes - o >= w) {
            if (off) off[n] = o;
            if (len) len[n] = w;
            n++;
            o += w;
        }
    return n;
}

static LLVMTypeRef
piece_type(Gen *g, LLVMTypeRef elem, int len)
{
    return len == 1 ? elem : LLVMVectorType(elem, (unsigned)len);
}

/* a scalar in every lane of a piece */
static LLVMValueRef
splat(Gen *g, LLVMValueRef x, int len)
{
    if (len == 1) return x;
    LLVMTypeRef vt = LLVMVectorType(LLVMTypeOf(x), (unsigned)len);
    LLVMValueRef v = LLVMBuildInsertElement(g->b, LLVMGetUndef(vt), x,
                                            LLVMConstInt(g->t_i32, 0, 0), "");
    return LLVMBuildShuffleVector(g->b, v, LLVMGetUndef(vt),
                                  LLVMConstNull(LLVMVectorType(g->t_i32, (unsigned)len)), "splat");
}

/* the tile local s->var's pieces, or NULL after reporting */
static LLVMValueRef *
tile_of(Gen *g, const KStmt *s)
{
    if (s->var < 0 || s->var >= g->k->nlocals || !g->tile[s->var]) {
        gen_fail(g, "kernel %s: local %d is not a tile", g->k->name, s->var);
        return NULL;
    }
    return g->tile[s->var];
}

/* buf[index + off .. + len) as <len x double> (f32 elements converted exactly) */
static LLVMValueRef
load_piece(Gen *g, int buf, LLVMValueRef index, int off, int len)
{
    KType bt = g->p->bufs[buf].type;
    LLVMTypeRef et = val_type(g, bt);
    LLVMValueRef i = LLVMBuildAdd(g->b, index, LLVMConstInt(g->t_i64, (unsigned)off, 0), "");
    LLVMValueRef ptr = LLVMBuildInBoundsGEP2(g->b, et, g->bufptr[buf], &i, 1, "");
    LLVMTypeRef pt = piece_type(g, et, len);
    ptr = LLVMBuildBitCast(g->b, ptr, LLVMPointerType(pt, 0), "");
    LLVMValueRef v = tag_access(g, LLVMBuildLoad2(g->b, pt, ptr, ""));
    LLVMSetAlignment(v, (unsigned)llvm_gen_elem_size(bt));
    return bt == KT_F32 ? LLVMBuildFPExt(g->b, v, piece_type(g, g->t_f64, len), "") : v;
}

static LLVMValueRef
fma_piece(Gen *g, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c, int len)
{
    char name[32];
    if (len == 1)
        snprintf(name, sizeof name, "llvm.fma.f64");
    else
        snprintf(name, sizeof name, "llvm.fma.v%df64", len);
    LLVMTypeRef ty = piece_type(g, g->t_f64, len);
    LLVMTypeRef args[3] = {ty, ty, ty};
    LLVMTypeRef fty = LLVMFunctionType(ty, args, 3, 0);
    LLVMValueRef f = LLVMGetNamedFunction(g->mod, name);
    if (!f) f = LLVMAddFunction(g->mod, name, fty);
    return LLVMBuildCall2(g->b, fty, f, (LLVMValueRef[]){a, b, c}, 3, "fma");
}

static bool
is_tile_buffer(Gen *g, const KStmt *s, bool is_store)
{
    if (s->buf < 0 || s->buf >= g->p->nbufs || !g->bufptr[s->buf]) {
        gen_fail(g, "kernel %s: buffer %d out of range", g->k->name, s->buf);
        return false;
    }
    const KBuf *kb = &g->p->bufs[s->buf];
    if (kb->type != KT_F32 && kb->type != KT_F64) {
        gen_fail(g, "kernel %s: tile access to %s buffer '%s'", g->k->name, ktype_name(kb->type),
                 kb->name);
        return false;
    }
    if (is_store && (kb->kind == KB_INPUT || kb->kind == KB_WEIGHT)) {
        gen_fail(g, "kernel %s: store to read-only buffer '%s'", g->k->name, kb->name);
        return false;
    }
    if (is_store && s->stride < 1) {
        gen_fail(g, "kernel %s: tile store with stride %lld", g->k->name, (long long)s->stride);
        return false;
    }
    return true;
}

static void
gen_tile(Gen *g, const KStmt *s)
{
    LLVMBuilderRef b = g->b;
    LLVMValueRef *t = tile_of(g, s);
    if (!t) return;
    int off[MAX_PIECES], len[MAX_PIECES];
    int np = tile_pieces(g->k->locals[s->var].lanes, off, len);
    if (s->kind == KS_VSET) {
        LLVMValueRef a = gen_expr_as(g, s->a, KT_F64);
        for (int i = 0; i < np; i++)
            LLVMBuildStore(b, splat(g, a, len[i]), t[i]);
        return;
    }
    if (!is_tile_buffer(g, s, s->kind == KS_VSTORE)) return;
    LLVMValueRef index = gen_expr_as(g, s->index, KT_I64);
    switch (s->kind) {
    case KS_VLOAD:
        for (int i = 0; i < np; i++)
            LLVMBuildStore(b, load_piece(g, s->buf, index, off[i], len[i]), t[i]);
        return;
    case KS_VFMA: {
        /* fused: one rounding, as kir_eval's fma() */
        LLVMValueRef a = gen_expr_as(g, s->a, KT_F64);
        for (int i = 0; i < np; i++) {
            LLVMTypeRef pt = piece_type(g, g->t_f64, len[i]);
            LLVMValueRef acc = LLVMBuildLoad2(b, pt, t[i], "");
            LLVMValueRef w = load_piece(g, s->buf, index, off[i], len[i]);
            LLVMValueRef va = splat(g, a, len[i]);
            /* is_sparse, without a branch (spike trains defeat branch prediction) and off the
             * accumulator's dependency chain: where a == 0 the weight becomes -a, and
             * a * -a = -0 whatever a's sign, and acc + -0 == acc for every acc (-0 included);
             * -a is finite where w may not be. Where a != 0 (NaN too, as kir_eval's test),
             * fma(a, w, acc). */
            if (s->is_sparse)
                w = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealUNE, va, LLVMConstNull(pt), ""), w,
                                    LLVMBuildFNeg(b, va, ""), "");
            LLVMBuildStore(b, fma_piece(g, va, w, acc, len[i]), t[i]);
        }
        return;
    }
    case KS_VSTORE: {
        KType bt = g->p->bufs[s->buf].type;
        LLVMTypeRef et = val_type(g, bt);
        for (int i = 0; i < np; i++) {
            LLVMValueRef v = LLVMBuildLoad2(b, piece_type(g, g->t_f64, len[i]), t[i], "");
            if (bt == KT_F32) v = LLVMBuildFPTrunc(b, v, piece_type(g, et, len[i]), "");
            if (s->stride == 1) {
                LLVMValueRef ix =
                    LLVMBuildAdd(b, index, LLVMConstInt(g->t_i64, (unsigned)off[i], 0), "");
                LLVMValueRef ptr = LLVMBuildInBoundsGEP2(b, et, g->bufptr[s->buf], &ix, 1, "");
                ptr = LLVMBuildBitCast(b, ptr, LLVMPointerType(piece_type(g, et, len[i]), 0), "");
                LLVMValueRef st = tag_access(g, LLVMBuildStore(b, v, ptr));
                LLVMSetAlignment(st, (unsigned)llvm_gen_elem_size(bt));
                continue;
            }
            for (int l = 0; l < len[i]; l++) {
                LLVMValueRef x = v;
                if (len[i] > 1)
                    x = LLVMBuildExtractElement(b, v, LLVMConstInt(g->t_i32, (unsigned)l, 0), "");
                LLVMValueRef ix = LLVMBuildAdd(
                    b, index,
                    LLVMConstInt(g->t_i64, (unsigned long long)((off[i] + l) * s->stride), 0), "");
                LLVMValueRef ptr = LLVMBuildInBoundsGEP2(b, et, g->bufptr[s->buf], &ix, 1, "");
                tag_access(g, LLVMBuildStore(b, x, ptr));
            }
        }
        return;
    }
    default: unreachable();
    }
}

static void
gen_stmt(Gen *g, const KStmt *s)
{
    LLVMBuilderRef b = g->b;
    switch (s->kind) {
    case KS_FOR:
        gen_for(g, s);
        return;
    case KS_ASSIGN: {
        if (s->var < 0 || s->var >= g->k->nlocals) {
            gen_fail(g, "kernel %s: local %d out of range", g->k->name, s->var);
            return;
        }
        if (g->loopval[s->var] || g->tile[s->var]) {
            gen_fail(g, "kernel %s: assignment to %s %s", g->k->name,
                     g->tile[s->var] ? "tile" : "loop variable", g->k->locals[s->var].name);
            return;
        }
        LLVMBuildStore(b, gen_expr_as(g, s->a, g->k->locals[s->var].type), g->local[s->var]);
        return;
    }
    case KS_STORE: {
        LLVMValueRef ptr = elem_ptr(g, s->buf, s->index);
        if (!ptr) return;
        KType bt = g->p->bufs[s->buf].type;
        if (g->p->bufs[s->buf].kind == KB_INPUT || g->p->bufs[s->buf].kind == KB_WEIGHT) {
            gen_fail(g, "kernel %s: store to read-only buffer '%s'", g->k->name,
                     g->p->bufs[s->buf].name);
            return;
        }
        LLVMValueRef v = gen_expr_as(g, s->a, bt);
        if (bt == KT_BOOL)
            v = LLVMBuildZExt(b, v, g->t_i8, "");
        else if (bt == KT_U8 || bt == KT_I8)
            v = LLVMBuildTrunc(b, v, g->t_i8, "");
        tag_access(g, LLVMBuildStore(b, v, ptr));
        return;
    }
    case KS_IF: {
        LLVMValueRef c = gen_expr_as(g, s->a, KT_BOOL);
        LLVMBasicBlockRef bb_t = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "if.then");
        LLVMBasicBlockRef bb_e = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "if.else");
        LLVMBasicBlockRef bb_j = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "if.end");
        LLVMBuildCondBr(b, c, bb_t, bb_e);
        LLVMPositionBuilderAtEnd(b, bb_t);
        gen_stmts(g, s->body, s->nbody);
        LLVMBuildBr(b, bb_j);
        LLVMPositionBuilderAtEnd(b, bb_e);
        gen_stmts(g, s->els, s->nels);
        LLVMBuildBr(b, bb_j);
        LLVMPositionBuilderAtEnd(b, bb_j);
        return;
    }
    case KS_VSET:
    case KS_VLOAD:
    case KS_VFMA:
    case KS_VSTORE:
        gen_tile(g, s);
        return;
    }
    gen_fail(g, "kernel %s: unknown statement kind %d", g->k->name, (int)s->kind);
}

static void
gen_stmts(Gen *g, KStmt *const *s, int n)
{
    for (int i = 0; i < n && !g->has_failed; i++) {
        if (!s[i]) {
            gen_fail(g, "kernel %s: null statement", g->k->name);
            return;
        }
        gen_stmt(g, s[i]);
    }
}

/* ---- which buffers a kernel touches ---- */
static void
mark_expr(const KExpr *e, bool *used, int nbufs)
{
    if (!e) return;
    if (e->kind == KX_LOAD && e->buf >= 0 && e->buf < nbufs) used[e->buf] = true;
    mark_expr(e->a, used, nbufs);
    mark_expr(e->b, used, nbufs);
    mark_expr(e->c, used, nbufs);
}

static void
mark_stmts(KStmt *const *s, int n, bool *used, int nbufs)
{
    for (int i = 0; i < n; i++) {
        if (!s[i]) continue;
        bool has_buf = s[i]->kind == KS_STORE || s[i]->kind == KS_VLOAD ||
                       s[i]->kind == KS_VFMA || s[i]->kind == KS_VSTORE;
        if (has_buf && s[i]->buf >= 0 && s[i]->buf < nbufs) used[s[i]->buf] = true;
        mark_expr(s[i]->lo, used, nbufs);
        mark_expr(s[i]->hi, used, nbufs);
        mark_expr(s[i]->index, used, nbufs);
        mark_expr(s[i]->a, used, nbufs);
        mark_stmts(s[i]->body, s[i]->nbody, used, nbufs);
        mark_stmts(s[i]->els, s[i]->nels, used, nbufs);
    }
}

static void
sanitise(char *s)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '.'))
            *s = '_';
}

/* A kernel whose body is one parallel loop with bounds computed from B, t and sample_base alone
 * runs on the thread pool: its iterations are split into chunks. */
static bool
is_pure_bound(const KExpr *e)
{
    if (!e) return true;
    if (e->kind == KX_LOAD || e->kind == KX_VAR || e->kind == KX_UNIFORM) return false;
    return is_pure_bound(e->a) && is_pure_bound(e->b) && is_pure_bound(e->c);
}

static const KStmt *
threaded_loop(const Kernel *k)
{
    if (k->nbody != 1 || !k->body[0]) return NULL;
    const KStmt *s = k->body[0];
    if (s->kind != KS_FOR || !s->is_parallel || !is_pure_bound(s->lo) || !is_pure_bound(s->hi))
        return NULL;
    return s;
}

/* ---- how much work a parallel loop's iteration is ----
 * Handing a loop to the thread pool costs a wake-up and a barrier (microseconds); a small loop
 * (a layer at batch 1) runs faster on the calling thread. The estimate counts statements, loads
 * and tile lanes, times constant trip counts (TRIPS_UNKNOWN for a bound known only at run time:
 * a batch remainder, a spike count); it only picks where the same chunks run, never what they
 * compute. */
enum { TRIPS_UNKNOWN = 4, PARALLEL_MIN_WORK = 50000 };

static double
expr_cost(const KExpr *e)
{
    if (!e) return 0;
    double c = e->kind == KX_LOAD || e->kind == KX_UN || e->kind == KX_BIN ? 1
               : e->kind == KX_UNIFORM                                     ? 40
                                                                           : 0;
    return c + expr_cost(e->a) + expr_cost(e->b) + expr_cost(e->c);
}

static double
stmts_cost(const Kernel *k, KStmt *const *s, int n)
{
    double c = 0;
    for (int i = 0; i < n; i++) {
        const KStmt *st = s[i];
        if (!st) continue;
        switch (st->kind) {
        case KS_FOR: {
            double trips = TRIPS_UNKNOWN;
            if (st->lo && st->hi && st->lo->kind == KX_CONST && st->hi->kind == KX_CONST)
                trips = st->hi->num > st->lo->num ? st->hi->num - st->lo->num : 0;
            c += 1 + trips * stmts_cost(k, st->body, st->nbody);
            break;
        }
        case KS_IF: {
            double a = stmts_cost(k, st->body, st->nbody), b = stmts_cost(k, st->els, st->nels);
            c += 1 + expr_cost(st->a) + (a > b ? a : b);
            break;
        }
        case KS_ASSIGN:
        case KS_STORE: c += 1 + expr_cost(st->a) + expr_cost(st->index); break;
        case KS_VSET:
        case KS_VLOAD:
        case KS_VFMA:
        case KS_VSTORE: {
            int lanes = st->var >= 0 && st->var < k->nlocals ? k->locals[st->var].lanes : 1;
            c += 1 + expr_cost(st->a) + expr_cost(st->index) + (lanes + 3) / 4;
            break;
        }
        }
    }
    return c;
}

/* Kernel ki's code as two functions: an internal always-inline body whose buffers are separate
 * noalias parameters (so, once inlined, LLVM knows distinct buffers never overlap and vectorises
 * without run-time checks), and the external `name`(ptr bufs, i64 B, i64 t, i64 sample_base, ...)
 * that loads them from the array. With range_loop (the kernel's outermost parallel loop) both take
 * i64 lo, i64 hi after sample_base and that loop runs over [lo, hi) only: the chunk function the
 * thread pool calls. Else the external function takes ptr rt last (unused). */
static LLVMValueRef
gen_code(Gen *g, int ki, const char *name, const KStmt *range_loop)
{
    const KProgram *p = g->p;
    const Kernel *k = &p->kernels[ki];
    g->k = k;
    int nscalar = range_loop ? 5 : 3; /* B, t, sample_base[, lo, hi] */
    bool *used = calloc((size_t)p->nbufs + 1, sizeof *used);
    int *param_buf = calloc((size_t)p->nbufs + 1, sizeof *param_buf);
    LLVMTypeRef *pt = calloc((size_t)p->nbufs + 5, sizeof *pt);
    g->bufptr = calloc((size_t)p->nbufs + 1, sizeof *g->bufptr);
    g->local = calloc((size_t)k->nlocals + 1, sizeof *g->local);
    g->tile = calloc((size_t)k->nlocals + 1, sizeof *g->tile);
    g->loopval = calloc((size_t)k->nlocals + 1, sizeof *g->loopval);
    if (!used || !param_buf || !pt || !g->bufptr || !g->local || !g->tile || !g->loopval)
        die("out of memory");
    mark_stmts(k->body, k->nbody, used, p->nbufs);
    int np = 0;
    for (int i = 0; i < p->nbufs; i++)
        if (used[i]) {
            param_buf[np] = i;
            pt[np++] = LLVMPointerType(mem_type(g, p->bufs[i].type), 0);
        }
    for (int i = 0; i < nscalar; i++)
        pt[np + i] = g->t_i64;

    char bname[160];
    snprintf(bname, sizeof bname, "k%d.%s%s", ki, k->name ? k->name : "kernel",
             range_loop ? ".chunk" : "");
    sanitise(bname);
    LLVMTypeRef body_ty = LLVMFunctionType(g->t_void, pt, (unsigned)(np + nscalar), 0);
    LLVMValueRef body = LLVMAddFunction(g->mod, bname, body_ty);
    LLVMSetLinkage(body, LLVMInternalLinkage);
    LLVMAddAttributeAtIndex(body, LLVMAttributeFunctionIndex, g->a_alwaysinline);
    LLVMAddAttributeAtIndex(body, LLVMAttributeFunctionIndex, g->a_nounwind);
    for (int i = 0; i < np; i++) {
        LLVMValueRef prm = LLVMGetParam(body, (unsigned)i);
        LLVMAddAttributeAtIndex(body, (unsigned)i + 1, g->a_noalias);
        const char *bn = p->bufs[param_buf[i]].name;
        LLVMSetValueName2(prm, bn ? bn : "buf", bn ? strlen(bn) : 3);
        g->bufptr[param_buf[i]] = prm;
    }
    g->batch = LLVMGetParam(body, (unsigned)np);
    g->step = LLVMGetParam(body, (unsigned)np + 1);
    g->sample_base = LLVMGetParam(body, (unsigned)np + 2);
    LLVMSetValueName2(g->batch, "B", 1);
    LLVMSetValueName2(g->step, "t", 1);
    LLVMSetValueName2(g->sample_base, "sample_base", 11);
    g->range_loop = range_loop;
    if (range_loop) {
        g->range_lo = LLVMGetParam(body, (unsigned)np + 3);
        g->range_hi = LLVMGetParam(body, (unsigned)np + 4);
        LLVMSetValueName2(g->range_lo, "lo", 2);
        LLVMSetValueName2(g->range_hi, "hi", 2);
    }
    g->fn = body;
    LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(g->ctx, body, "entry");
    LLVMPositionBuilderAtEnd(g->b, entry);
    for (int i = 0; i < k->nlocals; i++) {
        if (k->locals[i].lanes > 0) {
            int len[MAX_PIECES], npieces = tile_pieces(k->locals[i].lanes, NULL, NULL);
            if (k->locals[i].type != KT_F64 || npieces > MAX_PIECES) {
                gen_fail(g, "kernel %s: tile %s of %d %s lanes", k->name, k->locals[i].name,
                         k->locals[i].lanes, ktype_name(k->locals[i].type));
                continue;
            }
            tile_pieces(k->locals[i].lanes, NULL, len);
            g->tile[i] = calloc((size_t)npieces, sizeof **g->tile);
            if (!g->tile[i]) die("out of memory");
            const char *tn = k->locals[i].name ? k->locals[i].name : "";
            for (int j = 0; j < npieces; j++) {
                LLVMTypeRef ty = piece_type(g, g->t_f64, len[j]);
                g->tile[i][j] = LLVMBuildAlloca(g->b, ty, tn);
                LLVMBuildStore(g->b, LLVMConstNull(ty), g->tile[i][j]);
            }
            continue;
        }
        LLVMTypeRef lt = val_type(g, k->locals[i].type);
        g->local[i] = LLVMBuildAlloca(g->b, lt, k->locals[i].name ? k->locals[i].name : "");
        LLVMBuildStore(g->b, LLVMConstNull(lt), g->local[i]);
    }
    gen_stmts(g, k->body, k->nbody);
    LLVMBuildRetVoid(g->b);
    g->range_loop = NULL;

    /* name(ptr bufs, i64 B, i64 t, i64 sample_base, i64 lo, i64 hi) or (..., ptr rt) */
    LLVMTypeRef wpt[6] = {g->t_bufs, g->t_i64, g->t_i64, g->t_i64, g->t_i64, g->t_i64};
    if (!range_loop) wpt[4] = g->t_i8p;
    LLVMTypeRef wty = LLVMFunctionType(g->t_void, wpt, range_loop ? 6 : 5, 0);
    LLVMValueRef w = LLVMAddFunction(g->mod, name, wty);
    LLVMAddAttributeAtIndex(w, LLVMAttributeFunctionIndex, g->a_nounwind);
    /* snn_run calls it (once per step at most): inlined there, each kernel would be compiled twice
     */
    LLVMAddAttributeAtIndex(w, LLVMAttributeFunctionIndex, g->a_noinline);
    LLVMPositionBuilderAtEnd(g->b, LLVMAppendBasicBlockInContext(g->ctx, w, "entry"));
    LLVMValueRef *args = calloc((size_t)(np + nscalar), sizeof *args);
    if (!args) die("out of memory");
    for (int i = 0; i < np; i++) {
        LLVMValueRef idx = LLVMConstInt(g->t_i64, (unsigned long long)param_buf[i], 0);
        LLVMValueRef slot = LLVMBuildInBoundsGEP2(g->b, g->t_i8p, LLVMGetParam(w, 0), &idx, 1, "");
        LLVMValueRef base = LLVMBuildLoad2(g->b, g->t_i8p, slot, "");
        args[i] = LLVMBuildBitCast(g->b, base, pt[i], "");
    }
    for (int i = 0; i < nscalar; i++)
        args[np + i] = LLVMGetParam(w, (unsigned)i + 1);
    LLVMBuildCall2(g->b, body_ty, body, args, (unsigned)(np + nscalar), "");
    LLVMBuildRetVoid(g->b);

    free(args);
    free(used);
    free(param_buf);
    free(pt);
    free(g->bufptr);
    for (int i = 0; i < k->nlocals; i++)
        free(g->tile[i]);
    free(g->tile);
    free(g->local);
    free(g->loopval);
    g->bufptr = g->local = g->loopval = NULL;
    g->tile = NULL;
    return w;
}

/* kernel_N(ptr bufs, i64 B, i64 t, i64 sample_base, ptr rt). A threaded kernel computes its loop's
 * bounds and hands kernel_N.chunk to rt->parallel_for, which splits them among the pool's threads
 * and returns when every chunk is done; any other kernel runs whole on the calling thread. */
static LLVMValueRef
gen_kernel(Gen *g, int ki)
{
    const Kernel *k = &g->p->kernels[ki];
    const KStmt *loop = threaded_loop(k);
    char name[64];
    snprintf(name, sizeof name, "kernel_%d", ki);
    if (!loop) return gen_code(g, ki, name, NULL);
    snprintf(name, sizeof name, "kernel_%d.chunk", ki);
    LLVMValueRef chunk = gen_code(g, ki, name, loop);
    if (g->has_failed) return chunk;

    snprintf(name, sizeof name, "kernel_%d", ki);
    LLVMTypeRef wpt[5] = {g->t_bufs, g->t_i64, g->t_i64, g->t_i64, g->t_i8p};
    LLVMValueRef w = LLVMAddFunction(g->mod, name, LLVMFunctionType(g->t_void, wpt, 5, 0));
    LLVMAddAttributeAtIndex(w, LLVMAttributeFunctionIndex, g->a_nounwind);
    LLVMAddAttributeAtIndex(w, LLVMAttributeFunctionIndex, g->a_noinline);
    LLVMPositionBuilderAtEnd(g->b, LLVMAppendBasicBlockInContext(g->ctx, w, "entry"));
    /* the bounds read only B, t and sample_base (threaded_loop) */
    g->k = k;
    g->fn = w;
    g->batch = LLVMGetParam(w, 1);
    g->step = LLVMGetParam(w, 2);
    g->sample_base = LLVMGetParam(w, 3);
    LLVMValueRef lo = gen_expr_as(g, loop->lo, KT_I64), hi = gen_expr_as(g, loop->hi, KT_I64);
    LLVMValueRef rt = LLVMGetParam(w, 4);
    /* too little work for the pool: the whole range on this thread (the same chunks' work) */
    double cost = stmts_cost(k, loop->body, loop->nbody);
    int64_t min_trips = (int64_t)(PARALLEL_MIN_WORK / (cost > 1 ? cost : 1)) + 1;
    LLVMBasicBlockRef inline_bb = LLVMAppendBasicBlockInContext(g->ctx, w, "inline");
    LLVMBasicBlockRef pool_bb = LLVMAppendBasicBlockInContext(g->ctx, w, "pool");
    LLVMValueRef trips = LLVMBuildSub(g->b, hi, lo, "trips");
    LLVMBuildCondBr(g->b,
                    LLVMBuildICmp(g->b, LLVMIntSLT, trips,
                                  LLVMConstInt(g->t_i64, (unsigned long long)min_trips, 0), ""),
                    inline_bb, pool_bb);
    LLVMPositionBuilderAtEnd(g->b, inline_bb);
    LLVMValueRef cargs[6] = {LLVMGetParam(w, 0), g->batch, g->step, g->sample_base, lo, hi};
    LLVMBuildCall2(g->b, g->t_chunk, chunk, cargs, 6, "");
    LLVMBuildRetVoid(g->b);
    LLVMPositionBuilderAtEnd(g->b, pool_bb);
    /* rt points at an LlvmRt, whose first member is parallel_for (casts: typed pointers, LLVM 14) */
    LLVMValueRef slot = LLVMBuildBitCast(g->b, rt, LLVMPointerType(g->t_i8p, 0), "");
    LLVMValueRef par = LLVMBuildBitCast(g->b, LLVMBuildLoad2(g->b, g->t_i8p, slot, ""),
                                        LLVMPointerType(g->t_par, 0), "parallel_for");
    LLVMValueRef args[8] = {rt, chunk, LLVMGetParam(w, 0), g->batch, g->step, g->sample_base,
                            lo, hi};
    LLVMBuildCall2(g->b, g->t_par, par, args, 8, "");
    LLVMBuildRetVoid(g->b);
    return w;
}

/* snn_run(bufs, B, sample_base): the schedule. Consecutive step kernels share one loop over t. */
static void
gen_driver(Gen *g, LLVMValueRef *kernels)
{
    const KProgram *p = g->p;
    LLVMTypeRef pt[4] = {g->t_bufs, g->t_i64, g->t_i64, g->t_i8p};
    LLVMValueRef f = LLVMAddFunction(g->mod, LLVM_GEN_ENTRY, LLVMFunctionType(g->t_void, pt, 4, 0));
    LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, g->a_nounwind);
    LLVMValueRef bufs = LLVMGetParam(f, 0), batch = LLVMGetParam(f, 1), sb = LLVMGetParam(f, 2);
    LLVMValueRef rt = LLVMGetParam(f, 3);
    LLVMSetValueName2(bufs, "bufs", 4);
    LLVMSetValueName2(batch, "B", 1);
    LLVMSetValueName2(sb, "sample_base", 11);
    LLVMSetValueName2(rt, "rt", 2);
    LLVMTypeRef kpt[5] = {g->t_bufs, g->t_i64, g->t_i64, g->t_i64, g->t_i8p};
    LLVMTypeRef kty = LLVMFunctionType(g->t_void, kpt, 5, 0);
    LLVMBuilderRef b = g->b;
    LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(g->ctx, f, "entry"));
    for (int i = 0; i < p->nkernels;) {
        if (!p->kernels[i].is_step) {
            LLVMBuildCall2(b, kty, kernels[i],
                           (LLVMValueRef[]){bufs, batch, LLVMConstInt(g->t_i64, 0, 0), sb, rt}, 5,
                           "");
            i++;
            continue;
        }
        int j = i;
        while (j < p->nkernels && p->kernels[j].is_step)
            j++;
        if (p->timesteps > 0) {
            LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
            LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->ctx, f, "step");
            LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(g->ctx, f, "step.exit");
            LLVMBuildBr(b, body);
            LLVMPositionBuilderAtEnd(b, body);
            LLVMValueRef t = LLVMBuildPhi(b, g->t_i64, "t");
            for (int q = i; q < j; q++)
                LLVMBuildCall2(b, kty, kernels[q], (LLVMValueRef[]){bufs, batch, t, sb, rt}, 5, "");
            LLVMValueRef next = LLVMBuildNSWAdd(b, t, LLVMConstInt(g->t_i64, 1, 0), "");
            LLVMBuildCondBr(
                b,
                LLVMBuildICmp(b, LLVMIntSLT, next,
                              LLVMConstInt(g->t_i64, (unsigned long long)p->timesteps, 0), ""),
                body, exit);
            LLVMAddIncoming(t, (LLVMValueRef[]){LLVMConstInt(g->t_i64, 0, 0), next},
                            (LLVMBasicBlockRef[]){pre, body}, 2);
            LLVMPositionBuilderAtEnd(b, exit);
        }
        i = j;
    }
    LLVMBuildRetVoid(b);
}

static LLVMAttributeRef
enum_attr(LLVMContextRef ctx, const char *name, uint64_t val)
{
    unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
    return kind ? LLVMCreateEnumAttribute(ctx, kind, val) : NULL;
}

LLVMModuleRef
llvm_gen_module(const KProgram *p, LLVMContextRef ctx, char *err, size_t errlen)
{
    Gen g = {0};
    g.p = p;
    g.ctx = ctx;
    g.err = err;
    g.errlen = errlen;
    g.mod = LLVMModuleCreateWithNameInContext(p->m && p->m->name ? p->m->name : "snn", ctx);
    g.b = LLVMCreateBuilderInContext(ctx);
    g.t_void = LLVMVoidTypeInContext(ctx);
    g.t_i1 = LLVMInt1TypeInContext(ctx);
    g.t_i8 = LLVMInt8TypeInContext(ctx);
    g.t_i32 = LLVMInt32TypeInContext(ctx);
    g.t_i64 = LLVMInt64TypeInContext(ctx);
    g.t_f32 = LLVMFloatTypeInContext(ctx);
    g.t_f64 = LLVMDoubleTypeInContext(ctx);
    g.t_i8p = LLVMPointerType(g.t_i8, 0);
    g.t_bufs = LLVMPointerType(g.t_i8p, 0);
    LLVMTypeRef cpt[6] = {g.t_bufs, g.t_i64, g.t_i64, g.t_i64, g.t_i64, g.t_i64};
    g.t_chunk = LLVMFunctionType(g.t_void, cpt, 6, 0);
    LLVMTypeRef ppt[8] = {g.t_i8p, LLVMPointerType(g.t_chunk, 0), g.t_bufs, g.t_i64,
                          g.t_i64, g.t_i64, g.t_i64, g.t_i64};
    g.t_par = LLVMFunctionType(g.t_void, ppt, 8, 0);
    g.a_nobuiltin = enum_attr(ctx, "nobuiltin", 0);
    g.a_noalias = enum_attr(ctx, "noalias", 0);
    g.a_nounwind = enum_attr(ctx, "nounwind", 0);
    g.a_alwaysinline = enum_attr(ctx, "alwaysinline", 0);
    g.a_noinline = enum_attr(ctx, "noinline", 0);
    /* readnone until LLVM 15; memory(none) (value 0) after */
    g.a_readnone = enum_attr(ctx, "readnone", 0);
    if (!g.a_readnone) g.a_readnone = enum_attr(ctx, "memory", 0);
    g.md_access_group = LLVMGetMDKindIDInContext(ctx, "llvm.access.group", 17);
    g.md_loop = LLVMGetMDKindIDInContext(ctx, "llvm.loop", 9);
    g.access_group = distinct_empty_node(ctx);

    LLVMValueRef *kernels = calloc((size_t)p->nkernels + 1, sizeof *kernels);
    if (!kernels) die("out of memory");
    for (int i = 0; i < p->nkernels && !g.has_failed; i++)
        kernels[i] = gen_kernel(&g, i);
    if (!g.has_failed) gen_driver(&g, kernels);
    free(kernels);
    LLVMDisposeBuilder(g.b);
    if (!g.has_failed) {
        char *msg = NULL;
        if (LLVMVerifyModule(g.mod, LLVMReturnStatusAction, &msg)) {
            gen_fail(&g, "LLVM module does not verify: %s", msg ? msg : "?");
        }
        LLVMDisposeMessage(msg);
    }
    if (g.has_failed) {
        LLVMDisposeModule(g.mod);
        return NULL;
    }
    return g.mod;
}
