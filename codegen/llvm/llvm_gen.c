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

#include "codegen/llvm/cg_llvm.h"
#include "codegen/llvm/llvm_gen.h"
#include "ir/fmath.h"
#include "runtime/kernel_abi.h"
#include "runtime/philox.h"

typedef struct Gen {
    bool has_f16c; /* the target converts halves in hardware (widen16) */
    bool has512;   /* the target has AVX-512: float tiles in pieces of 16 (tile_piece_width) */
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
    /* SIMD lanes (simd_plan): the chunk's parallel loop runs simd_w iterations side by side
     * (16 where the target has AVX-512, else 8) */
    int simd_w;
    unsigned char *lshape; /* [nlocals] PS_* of simd_plan; NULL: one iteration at a time */
    LLVMValueRef *vlocal;  /* [nlocals] a PS_VAR local's <simd_w x T> alloca */
    LLVMValueRef mask;     /* the lanes on under varying conditions (<simd_w x i1>); NULL: all */
    int simd_var;         /* the parallel loop's variable: lane l holds simd_base + l */
    LLVMValueRef simd_base, iota;
    /* a blocked scan (scan_plan): the SIMD body runs block by block, segment by segment */
    int scan_at;        /* the body's sequential loop (its index in the body), or -1 */
    bool *carried;      /* [nlocals] locals a segment reads that an earlier one wrote */
    LLVMValueRef *slot; /* [nlocals] a carried local's [scan_vecs x T] alloca, else NULL */
    int scan_vecs;      /* vectors in a block */
    bool *nt_buf;       /* [nbufs] stored in lanes by the scan's loop and never loaded */
    bool is_nt;         /* the code being generated may store nt_buf non-temporally */
    unsigned md_nontemporal;
    LLVMValueRef *chunks; /* [nkernels] kernel_N.chunk of a threaded kernel, else NULL */
    char *err;
    size_t errlen;
    bool has_failed;
} Gen;

static void gen_stmts(Gen *g, KStmt *const *s, int n);
static LLVMValueRef gen_simd_loop(Gen *g, const KStmt *s, LLVMValueRef lo, LLVMValueRef hi);
static bool is_pure_bound(const KExpr *e);

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
    case KT_BIT: /* accessed a byte (8 elements, 4 pairs) at a time */
    case KT_BIT2:
        return 1;
    case KT_F16:
    case KT_BF16:
        return 2;
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
    case KT_F16: /* loads widen them: kir.h ktype_value */
    case KT_BF16:
        return g->t_f32;
    case KT_F64:
        return g->t_f64;
    case KT_I64:
    case KT_U8:
    case KT_I8:
    case KT_BIT: /* loads give u8 0/1 */
    case KT_BIT2: /* ... and i8 -1/0/1 */
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
    case KT_BIT: /* a byte holds 8 elements (pairs: 4) */
    case KT_BIT2:
        return g->t_i8;
    case KT_F16:
    case KT_BF16:
        return LLVMInt16TypeInContext(g->ctx);
    default:
        return val_type(g, t);
    }
}


/* et, or a vector of et as long as `like` when like is a vector (SIMD lanes: see simd_plan) */
static LLVMTypeRef
shaped(LLVMTypeRef et, LLVMValueRef like)
{
    LLVMTypeRef lt = LLVMTypeOf(like);
    return LLVMGetTypeKind(lt) == LLVMVectorTypeKind ? LLVMVectorType(et, LLVMGetVectorSize(lt))
                                                     : et;
}

static LLVMTypeRef
type_like(Gen *g, KType t, LLVMValueRef like)
{
    return shaped(val_type(g, t), like);
}

static bool
is_vector(LLVMValueRef v)
{
    return LLVMGetTypeKind(LLVMTypeOf(v)) == LLVMVectorTypeKind;
}

/* an i64 wrapped to t's range as C's (uint8_t) / (int8_t) conversions do */
static LLVMValueRef
wrap_int(Gen *g, LLVMValueRef v, KType t)
{
    if (t != KT_U8 && t != KT_I8) return v;
    LLVMValueRef n = LLVMBuildTrunc(g->b, v, shaped(g->t_i8, v), "");
    LLVMTypeRef it = shaped(g->t_i64, v);
    return t == KT_U8 ? LLVMBuildZExt(g->b, n, it, "") : LLVMBuildSExt(g->b, n, it, "");
}

static LLVMValueRef const_of(Gen *g, KType t, double v);

/* the constant c, in every lane when like is a vector */
static LLVMValueRef
const_splat(LLVMValueRef c, LLVMValueRef like)
{
    if (!is_vector(like)) return c;
    unsigned n = LLVMGetVectorSize(LLVMTypeOf(like));
    LLVMValueRef lanes[64];
    for (unsigned i = 0; i < n && i < 64; i++)
        lanes[i] = c;
    return LLVMConstVector(lanes, n);
}

/* the constant v of type t, in every lane when like is a vector */
static LLVMValueRef
const_like(Gen *g, KType t, double v, LLVMValueRef like)
{
    return const_splat(const_of(g, t, v), like);
}

static LLVMValueRef
const_of(Gen *g, KType t, double v)
{
    switch (t) {
    case KT_F32:
    case KT_F16:
    case KT_BF16:
        return LLVMConstReal(g->t_f32, (double)(float)v);
    case KT_F64:
        return LLVMConstReal(g->t_f64, v);
    case KT_I64:
    case KT_U8:
    case KT_I8:
    case KT_BIT:
    case KT_BIT2:
        return LLVMConstInt(g->t_i64, (unsigned long long)(long long)v, 1);
    case KT_BOOL:
        return LLVMConstInt(g->t_i1, v != 0, 0);
    }
    return NULL;
}

/* the i32 constant c, in every lane when like is a vector */
static LLVMValueRef
const_like_i32(Gen *g, unsigned c, LLVMValueRef like)
{
    return const_splat(LLVMConstInt(g->t_i32, c, 0), like);
}

/* 16-bit weight elements (i16, or a vector of them) as the f32 values they stand for, exactly:
 * bfloat16 is the top half of a float; binary16 is F16C's conversion where the target has it,
 * else rebiased with integer operations and one multiplication by 2^112 (exact for normals and
 * subnormals alike), inf and NaN kept with their payload, as runtime/f16.h rt_f16_to_f32: without
 * F16C, LLVM 14 would widen a half with a call to __gnu_h2f_ieee, which x86's libgcc lacks. */
static LLVMValueRef
widen16(Gen *g, LLVMValueRef v, KType bt)
{
    LLVMBuilderRef b = g->b;
    LLVMTypeRef i32 = shaped(g->t_i32, v), f32 = shaped(g->t_f32, v);
    if (bt == KT_F16 && g->has_f16c) /* vcvtph2ps: exact, one instruction per 8 lanes */
        return LLVMBuildFPExt(b, LLVMBuildBitCast(b, v, shaped(LLVMHalfTypeInContext(g->ctx), v), ""),
                              f32, "");
    LLVMValueRef u = LLVMBuildZExt(b, v, i32, "");
    if (bt == KT_BF16)
        return LLVMBuildBitCast(b, LLVMBuildShl(b, u, const_like_i32(g, 16, v), ""), f32, "");
    LLVMValueRef a = LLVMBuildAnd(b, u, const_like_i32(g, 0x7fff, v), "");
    LLVMValueRef sign = LLVMBuildShl(b, LLVMBuildAnd(b, u, const_like_i32(g, 0x8000, v), ""),
                                     const_like_i32(g, 16, v), "");
    LLVMValueRef m = LLVMBuildShl(b, a, const_like_i32(g, 13, v), "");
    LLVMValueRef fin = LLVMBuildFMul(b, LLVMBuildBitCast(b, m, f32, ""),
                                     const_like(g, KT_F32, 0x1p112, v), "");
    LLVMValueRef inf = LLVMBuildOr(b, m, const_like_i32(g, 0x7f800000, v), "");
    LLVMValueRef is_inf = LLVMBuildICmp(b, LLVMIntUGE, a, const_like_i32(g, 0x7c00, v), "");
    LLVMValueRef r = LLVMBuildSelect(b, is_inf, inf, LLVMBuildBitCast(b, fin, i32, ""), "");
    return LLVMBuildBitCast(b, LLVMBuildOr(b, r, sign, ""), f32, "");
}

/* f32 values (or lanes) v as the 16-bit elements (i16) a store to a KT_F16 / KT_BF16 buffer keeps,
 * rounded to nearest, ties to even, as runtime/f16.h rt_f32_to_f16 / rt_f32_to_bf16: binary16 by
 * F16C (vcvtps2ph, whose NaN is rt's: quiet, the payload's top bits) where the target has it,
 * else by integer operations and selects that vectorise: a normal result rebiases the exponent
 * and rounds the 13 bits it drops (a carry may reach the exponent: the right result, infinity
 * too); a subnormal one is |v| + 0.5f, whose float addition rounds at 2^-24, the subnormal
 * step, less the bits of 0.5f. bfloat16 rounds the top half, NaN c10's quiet 0x7fc0. */
static LLVMValueRef
narrow16(Gen *g, LLVMValueRef v, KType bt)
{
    LLVMBuilderRef b = g->b;
    LLVMTypeRef i32 = shaped(g->t_i32, v), f32 = shaped(g->t_f32, v);
    LLVMTypeRef i16 = shaped(LLVMInt16TypeInContext(g->ctx), v);
    if (bt == KT_F16 && g->has_f16c)
        return LLVMBuildBitCast(
            b, LLVMBuildFPTrunc(b, v, shaped(LLVMHalfTypeInContext(g->ctx), v), ""), i16, "");
    LLVMValueRef u = LLVMBuildBitCast(b, v, i32, "");
#define K(c) const_like_i32(g, (c), v)
    LLVMValueRef a = LLVMBuildAnd(b, u, K(0x7fffffffu), "");
    LLVMValueRef is_nan = LLVMBuildICmp(b, LLVMIntUGT, a, K(0x7f800000u), "");
    LLVMValueRef r;
    if (bt == KT_BF16) {
        LLVMValueRef odd = LLVMBuildAnd(b, LLVMBuildLShr(b, u, K(16), ""), K(1), "");
        r = LLVMBuildLShr(b, LLVMBuildAdd(b, LLVMBuildAdd(b, u, K(0x7fff), ""), odd, ""), K(16), "");
        r = LLVMBuildSelect(b, is_nan, K(0x7fc0), r, "");
    } else {
        LLVMValueRef odd = LLVMBuildAnd(b, LLVMBuildLShr(b, a, K(13), ""), K(1), "");
        LLVMValueRef nrm = LLVMBuildAdd(b, LLVMBuildSub(b, a, K(0x38000000u - 0xfffu), ""), odd, "");
        nrm = LLVMBuildLShr(b, nrm, K(13), "");
        LLVMValueRef sub = LLVMBuildFAdd(b, LLVMBuildBitCast(b, a, f32, ""),
                                         const_like(g, KT_F32, 0.5, v), "");
        sub = LLVMBuildSub(b, LLVMBuildBitCast(b, sub, i32, ""), K(0x3f000000u), "");
        r = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntULT, a, K(0x38800000u), ""), sub, nrm, "");
        r = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntUGE, a, K(0x47800000u), ""), K(0x7c00), r,
                            "");
        LLVMValueRef nan = LLVMBuildOr(
            b, LLVMBuildAnd(b, LLVMBuildLShr(b, a, K(13), ""), K(0x3ff), ""), K(0x7e00), "");
        r = LLVMBuildSelect(b, is_nan, nan, r, "");
        r = LLVMBuildOr(b, r, LLVMBuildAnd(b, LLVMBuildLShr(b, u, K(16), ""), K(0x8000), ""), "");
    }
#undef K
    return LLVMBuildTrunc(b, r, i16, "");
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
            return LLVMBuildFCmp(b, LLVMRealUNE, v, LLVMConstNull(LLVMTypeOf(v)), "tobool");
        return LLVMBuildICmp(b, LLVMIntNE, v, LLVMConstNull(LLVMTypeOf(v)), "tobool");
    }
    if (is_float(from) && is_float(to))
        return to == KT_F32 ? LLVMBuildFPTrunc(b, v, type_like(g, KT_F32, v), "")
                            : LLVMBuildFPExt(b, v, type_like(g, KT_F64, v), "");
    if (is_float(from)) {
        /* SIMD lanes bound for u8/i8 go through i32, which AVX2 converts in one instruction where
         * i64 takes one per lane: the low 8 bits agree for every input (in i32 range they are the
         * same integer; beyond it, and for NaN, x86 gives 0x80000000, and floats that large are
         * multiples of 256, so both keep 0) */
        if (is_vector(v) && (to == KT_U8 || to == KT_I8))
            return wrap_int(g,
                            LLVMBuildSExt(b, LLVMBuildFPToSI(b, v, shaped(g->t_i32, v), ""),
                                          shaped(g->t_i64, v), ""),
                            to);
        return wrap_int(g, LLVMBuildFPToSI(b, v, shaped(g->t_i64, v), ""), to);
    }
    if (from == KT_BOOL || (from == KT_U8 && is_float(to)))
        return is_float(to) ? LLVMBuildUIToFP(b, v, type_like(g, to, v), "")
                            : LLVMBuildZExt(b, v, shaped(g->t_i64, v), "");
    if (is_float(to)) return LLVMBuildSIToFP(b, v, type_like(g, to, v), "");
    return wrap_int(g, v, to); /* i64 → i64 */
}

/* A C library function (exp, ...) declared once, called with nobuiltin at the call site so LLVM
 * neither constant-folds it with its own arithmetic nor rewrites it (pow(2, x) → exp2): the JIT
 * resolves the same libm the evaluator calls. Declared readnone/nounwind so loops around it still
 * optimise. */
static LLVMValueRef call_libm_scalar(Gen *g, const char *name, KType t, LLVMValueRef *args,
                                     unsigned nargs);

/* The double function `name` in type t: on f32 operands it is called on their double values and
 * rounded once (ir/fmath.h). SIMD lanes call the same scalar function lane by lane: the same
 * results, bit for bit. */
static LLVMValueRef
call_libm(Gen *g, const char *name, KType t, LLVMValueRef *args, unsigned nargs)
{
    if (!is_vector(args[0])) return call_libm_scalar(g, name, t, args, nargs);
    unsigned n = LLVMGetVectorSize(LLVMTypeOf(args[0]));
    LLVMValueRef r = LLVMGetUndef(LLVMTypeOf(args[0]));
    for (unsigned l = 0; l < n; l++) {
        LLVMValueRef lane = LLVMConstInt(g->t_i32, l, 0), a[2];
        for (unsigned k = 0; k < nargs; k++)
            a[k] = LLVMBuildExtractElement(g->b, args[k], lane, "");
        r = LLVMBuildInsertElement(g->b, r, call_libm_scalar(g, name, t, a, nargs), lane, "");
    }
    return r;
}

static LLVMValueRef
call_libm_scalar(Gen *g, const char *name, KType t, LLVMValueRef *args, unsigned nargs)
{
    LLVMTypeRef ft_args[2] = {g->t_f64, g->t_f64};
    LLVMTypeRef fty = LLVMFunctionType(g->t_f64, ft_args, nargs, 0);
    LLVMValueRef f = LLVMGetNamedFunction(g->mod, name);
    if (!f) {
        f = LLVMAddFunction(g->mod, name, fty);
        LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, g->a_nounwind);
        if (g->a_readnone) LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, g->a_readnone);
    }
    LLVMValueRef wide[2];
    for (unsigned k = 0; k < nargs; k++)
        wide[k] = t == KT_F32 ? LLVMBuildFPExt(g->b, args[k], g->t_f64, "") : args[k];
    LLVMValueRef c = LLVMBuildCall2(g->b, fty, f, wide, nargs, "");
    LLVMAddCallSiteAttribute(c, LLVMAttributeFunctionIndex, g->a_nobuiltin);
    return t == KT_F32 ? LLVMBuildFPTrunc(g->b, c, g->t_f32, "") : c;
}

/* An LLVM intrinsic that is exact in IEEE arithmetic (sqrt, fabs, floor): identical to the C
 * library's result, and vectorisable. */
static LLVMValueRef
call_intrinsic(Gen *g, const char *base, KType t, LLVMValueRef a)
{
    char name[64];
    if (is_vector(a))
        snprintf(name, sizeof name, "llvm.%s.v%u%s", base, LLVMGetVectorSize(LLVMTypeOf(a)),
                 t == KT_F32 ? "f32" : "f64");
    else
        snprintf(name, sizeof name, "llvm.%s.%s", base, t == KT_F32 ? "f32" : "f64");
    LLVMTypeRef ty = LLVMTypeOf(a);
    LLVMTypeRef fty = LLVMFunctionType(ty, &ty, 1, 0);
    LLVMValueRef f = LLVMGetNamedFunction(g->mod, name);
    if (!f) f = LLVMAddFunction(g->mod, name, fty);
    return LLVMBuildCall2(g->b, fty, f, &a, 1, "");
}

/* llvm.NAME over values of a's shape (scalar or vector) of type t, n operands */
static LLVMValueRef
call_intrinsic_n(Gen *g, const char *base, KType t, LLVMValueRef *args, unsigned n)
{
    char name[64];
    LLVMValueRef a = args[0];
    if (is_vector(a))
        snprintf(name, sizeof name, "llvm.%s.v%u%s", base, LLVMGetVectorSize(LLVMTypeOf(a)),
                 t == KT_F32 ? "f32" : "f64");
    else
        snprintf(name, sizeof name, "llvm.%s.%s", base, t == KT_F32 ? "f32" : "f64");
    LLVMTypeRef ty = LLVMTypeOf(a), pt[3] = {ty, ty, ty};
    LLVMTypeRef fty = LLVMFunctionType(ty, pt, n, 0);
    LLVMValueRef f = LLVMGetNamedFunction(g->mod, name);
    if (!f) f = LLVMAddFunction(g->mod, name, fty);
    return LLVMBuildCall2(g->b, fty, f, args, n, "");
}

/* An f32 exp, (float)exp((double)x), as ir/fmath.h's f32_exp_poly computes it (the same
 * operations, so the same bits, which are f32_exp's for every float): in SIMD lanes it is a few
 * vector instructions where the C library is one call per lane (the sigmoid surrogate's exp was
 * three quarters of a LIF layer's backward). */
static LLVMValueRef
exp_f32(Gen *g, LLVMValueRef a)
{
    LLVMBuilderRef b = g->b;
    static const double coeffs[] = {F32_EXP_COEFFS};
#define D(v) const_like(g, KT_F64, (v), a)
    LLVMValueRef d = LLVMBuildFPExt(b, a, type_like(g, KT_F64, a), "");
    LLVMValueRef mm[2] = {d, D(-104.0)};
    mm[0] = call_intrinsic_n(g, "maxnum", KT_F64, mm, 2);
    mm[1] = D(89.0);
    LLVMValueRef xc = call_intrinsic_n(g, "minnum", KT_F64, mm, 2);
    LLVMValueRef k = call_intrinsic(g, "rint", KT_F64, LLVMBuildFMul(b, xc, D(F32_EXP_LOG2E), ""));
    LLVMValueRef nk = LLVMBuildFNeg(b, k, "");
    LLVMValueRef f3[3] = {nk, D(F32_EXP_LN2HI), xc};
    LLVMValueRef r = call_intrinsic_n(g, "fma", KT_F64, f3, 3);
    f3[1] = D(F32_EXP_LN2LO);
    f3[2] = r;
    r = call_intrinsic_n(g, "fma", KT_F64, f3, 3);
    LLVMValueRef p = D(coeffs[0]);
    for (size_t i = 1; i < sizeof coeffs / sizeof coeffs[0]; i++) {
        LLVMValueRef h[3] = {p, r, D(coeffs[i])};
        p = call_intrinsic_n(g, "fma", KT_F64, h, 3);
    }
    LLVMTypeRef it = shaped(g->t_i64, a);
    LLVMValueRef ki = LLVMBuildFPToSI(b, k, it, "");
    LLVMValueRef bits =
        LLVMBuildShl(b, LLVMBuildAdd(b, ki, const_splat(LLVMConstInt(g->t_i64, 1023, 0), a), ""),
                     const_splat(LLVMConstInt(g->t_i64, 52, 0), a), "");
    LLVMValueRef scale = LLVMBuildBitCast(b, bits, type_like(g, KT_F64, a), "");
    LLVMValueRef f =
        LLVMBuildFPTrunc(b, LLVMBuildFMul(b, p, scale, ""), type_like(g, KT_F32, a), "");
#undef D
    return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealUNO, a, a, ""), a, f, "exp");
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

/* ---- bit buffers: KT_BIT, element e is bit e % 8 of byte e / 8; KT_BIT2, element e is the bit
 * pair 2(e % 4), 2(e % 4) + 1 of byte e / 4, two's complement (kir.h) ---- */

/* the type a load from a bit buffer of type bt gives: u8 (a bit, a byte), i8 (a pair), i64 (a
 * word) */
static KType
ktype_value_of_load(const KExpr *e, KType bt)
{
    return e->op == KLOAD_WORD ? KT_I64 : e->op == KLOAD_BYTES ? KT_U8 : ktype_value(bt);
}

/* et, or a vector of et as wide as `like` is */
static LLVMTypeRef
shaped_like(LLVMTypeRef et, LLVMValueRef like)
{
    return is_vector(like) ? LLVMVectorType(et, LLVMGetVectorSize(LLVMTypeOf(like))) : et;
}

/* the byte of element idx (i64 or i64 lanes) of a buffer of `bits` bits per element, and the
 * element's first bit in it (i8 or i8 lanes) */
static LLVMValueRef
bit_byte_index(Gen *g, int bits, LLVMValueRef idx, LLVMValueRef *shift)
{
    LLVMBuilderRef b = g->b;
    LLVMTypeRef t8 = shaped_like(g->t_i8, idx);
    unsigned in_byte = 8u / (unsigned)bits;
    LLVMValueRef byte =
        LLVMBuildAShr(b, idx, const_splat(LLVMConstInt(g->t_i64, bits == 2 ? 2 : 3, 0), idx), "");
    LLVMValueRef e =
        LLVMBuildAnd(b, idx, const_splat(LLVMConstInt(g->t_i64, in_byte - 1, 0), idx), "");
    if (bits == 2) e = LLVMBuildShl(b, e, const_splat(LLVMConstInt(g->t_i64, 1, 0), idx), "");
    *shift = LLVMBuildTrunc(b, e, t8, "");
    return byte;
}

/* element bits (i8 or i8 lanes, shifted down from `shift`) as the load gives it: a bit as 0/1,
 * a pair sign-extended to -1/0/1; widened to i64 */
static LLVMValueRef
bit_value(Gen *g, int bits, LLVMValueRef byte, LLVMValueRef shift)
{
    LLVMBuilderRef b = g->b;
    LLVMTypeRef t64 = shaped_like(g->t_i64, byte);
    if (bits == 1) {
        LLVMValueRef v = LLVMBuildLShr(b, byte, shift, "");
        v = LLVMBuildAnd(b, v, const_splat(LLVMConstInt(g->t_i8, 1, 0), v), "");
        return LLVMBuildZExt(b, v, t64, "");
    }
    /* the pair to the top of the byte, then an arithmetic shift brings its sign down */
    LLVMValueRef up = LLVMBuildSub(b, const_splat(LLVMConstInt(g->t_i8, 6, 0), shift), shift, "");
    LLVMValueRef v = LLVMBuildShl(b, byte, up, "");
    v = LLVMBuildAShr(b, v, const_splat(LLVMConstInt(g->t_i8, 6, 0), v), "");
    return LLVMBuildSExt(b, v, t64, "");
}

/* element idx of bit buffer buf as an i64 (0/1, or -1/0/1 for pairs); KLOAD_BYTES: byte idx as
 * an i64; KLOAD_WORD: the 8 bytes from byte idx (unaligned), as an i64 */
static LLVMValueRef
load_bit(Gen *g, int buf, LLVMValueRef idx, int how)
{
    LLVMBuilderRef b = g->b;
    if (how == KLOAD_WORD) {
        LLVMValueRef ptr = LLVMBuildInBoundsGEP2(b, g->t_i8, g->bufptr[buf], &idx, 1, "");
        ptr = LLVMBuildBitCast(b, ptr, LLVMPointerType(g->t_i64, 0), "");
        LLVMValueRef v = tag_access(g, LLVMBuildLoad2(b, g->t_i64, ptr, ""));
        LLVMSetAlignment(v, 1);
        return v;
    }
    if (how == KLOAD_BYTES) {
        LLVMValueRef ptr = LLVMBuildInBoundsGEP2(b, g->t_i8, g->bufptr[buf], &idx, 1, "");
        return LLVMBuildZExt(b, tag_access(g, LLVMBuildLoad2(b, g->t_i8, ptr, "")), g->t_i64, "");
    }
    int bits = ktype_bits(g->p->bufs[buf].type);
    LLVMValueRef sh, byte = bit_byte_index(g, bits, idx, &sh);
    LLVMValueRef ptr = LLVMBuildInBoundsGEP2(b, g->t_i8, g->bufptr[buf], &byte, 1, "");
    return bit_value(g, bits, tag_access(g, LLVMBuildLoad2(b, g->t_i8, ptr, "")), sh);
}

/* element idx of bit buffer buf = v, an i64: for bits (v != 0), for pairs v's two low bits; the
 * byte read, the element's bits replaced. Not in the parallel loop's access group: neighbouring
 * iterations read and write the same byte, so LLVM must not take them for independent (it
 * vectorised such a loop and lost bits). */
static void
store_bit(Gen *g, int buf, LLVMValueRef idx, LLVMValueRef v)
{
    LLVMBuilderRef b = g->b;
    int bits = ktype_bits(g->p->bufs[buf].type);
    LLVMValueRef sh, byte = bit_byte_index(g, bits, idx, &sh);
    LLVMValueRef ptr = LLVMBuildInBoundsGEP2(b, g->t_i8, g->bufptr[buf], &byte, 1, "");
    LLVMValueRef old = LLVMBuildLoad2(b, g->t_i8, ptr, "");
    LLVMValueRef ones = LLVMConstInt(g->t_i8, bits == 2 ? 3 : 1, 0);
    LLVMValueRef val = bits == 2 ? LLVMBuildAnd(b, LLVMBuildTrunc(b, v, g->t_i8, ""), ones, "")
                                 : LLVMBuildZExt(b, LLVMBuildICmp(b, LLVMIntNE, v,
                                                                  LLVMConstNull(LLVMTypeOf(v)), ""),
                                                 g->t_i8, "");
    LLVMValueRef mask = LLVMBuildShl(b, ones, sh, "");
    LLVMValueRef keep = LLVMBuildAnd(b, old, LLVMBuildNot(b, mask, ""), "");
    LLVMBuildStore(b, LLVMBuildOr(b, keep, LLVMBuildShl(b, val, sh, ""), ""), ptr);
}

/* op(a) for a of type t, as type rt (a scalar, or SIMD lanes) */
static LLVMValueRef
un_value(Gen *g, int op, KType t, LLVMValueRef a, KType rt)
{
    LLVMBuilderRef b = g->b;
    bool is_f = is_float(t);
    switch ((KUn)op) {
    case KU_NEG:
        return convert(g, is_f ? LLVMBuildFNeg(b, a, "") : LLVMBuildNeg(b, a, ""), t, rt);
    case KU_NOT:
        return convert(g, LLVMBuildNot(b, convert(g, a, t, KT_BOOL), ""), KT_BOOL, rt);
    case KU_ABS:
        if (is_f) return convert(g, call_intrinsic(g, "fabs", t, a), t, rt);
        return convert(
            g,
            LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, a, LLVMConstNull(LLVMTypeOf(a)), ""),
                            LLVMBuildNeg(b, a, ""), a, ""),
            t, rt);
    default:
        break;
    }
    if (!is_f && op == KU_FLOOR) return convert(g, a, t, rt);
    if (!is_f && (op == KU_CTZ || op == KU_POPCOUNT)) {
        /* llvm.cttz.i64(a, false): 64 for 0; llvm.ctpop.i64; on lanes their vNi64 forms */
        char name[48];
        LLVMTypeRef ty = LLVMTypeOf(a);
        if (is_vector(a))
            snprintf(name, sizeof name, "llvm.%s.v%ui64", op == KU_CTZ ? "cttz" : "ctpop",
                     LLVMGetVectorSize(ty));
        else
            snprintf(name, sizeof name, "llvm.%s.i64", op == KU_CTZ ? "cttz" : "ctpop");
        LLVMValueRef args[2] = {a, LLVMConstInt(g->t_i1, 0, 0)};
        LLVMTypeRef pt[2] = {ty, g->t_i1};
        int n = op == KU_CTZ ? 2 : 1;
        LLVMTypeRef fty = LLVMFunctionType(ty, pt, (unsigned)n, 0);
        LLVMValueRef f = LLVMGetNamedFunction(g->mod, name);
        if (!f) f = LLVMAddFunction(g->mod, name, fty);
        return convert(g, LLVMBuildCall2(b, fty, f, args, (unsigned)n, ""), t, rt);
    }
    if (!is_f) {
        gen_fail(g, "kernel %s: unary op %d on type %d", g->k->name, op, (int)t);
        return LLVMGetUndef(type_like(g, rt, a));
    }
    LLVMValueRef r;
    switch ((KUn)op) {
    case KU_EXP:
        r = t == KT_F32 ? exp_f32(g, a) : call_libm(g, "exp", t, &a, 1);
        break;
    case KU_LOG:
        r = call_libm(g, "log", t, &a, 1);
        break;
    case KU_TANH:
        r = call_libm(g, "tanh", t, &a, 1);
        break;
    case KU_SQRT:
        r = call_intrinsic(g, "sqrt", t, a);
        break;
    case KU_FLOOR:
        r = call_intrinsic(g, "floor", t, a);
        break;
    case KU_ROUND_F16:
    case KU_ROUND_BF16: {
        KType st = op == KU_ROUND_F16 ? KT_F16 : KT_BF16;
        return convert(g, widen16(g, narrow16(g, convert(g, a, t, KT_F32), st), st), KT_F32, rt);
    }
    case KU_SIGMOID: {
        /* 1 / (1 + exp(-x)), in that order, in t */
        LLVMValueRef na = LLVMBuildFNeg(b, a, "");
        LLVMValueRef ex = t == KT_F32 ? exp_f32(g, na) : call_libm(g, "exp", t, &na, 1);
        LLVMValueRef one = const_like(g, t, 1.0, a);
        r = LLVMBuildFDiv(b, one, LLVMBuildFAdd(b, one, ex, ""), "sigmoid");
        break;
    }
    default:
        gen_fail(g, "kernel %s: unknown unary op %d", g->k->name, op);
        return LLVMGetUndef(type_like(g, rt, a));
    }
    return convert(g, r, t, rt);
}

static LLVMValueRef
gen_un(Gen *g, const KExpr *e)
{
    return un_value(g, e->op, e->a->type, gen_expr(g, e->a), e->type);
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
        return LLVMBuildSelect(b, uno, const_like(g, t, NAN, a), r, is_min ? "min" : "max");
    }
    LLVMIntPredicate pr =
        t == KT_BOOL ? (is_min ? LLVMIntULT : LLVMIntUGT) : (is_min ? LLVMIntSLT : LLVMIntSGT);
    return LLVMBuildSelect(b, LLVMBuildICmp(b, pr, a, bv, ""), a, bv, is_min ? "min" : "max");
}

/* a op bv for operands of type t, as type rt (scalars, or SIMD lanes) */
static LLVMValueRef
bin_value(Gen *g, int op, KType t, LLVMValueRef a, LLVMValueRef bv, KType rtype)
{
    LLVMBuilderRef b = g->b;
    bool is_f = is_float(t), is_u = t == KT_BOOL; /* other integers are i64 values, signed */
    LLVMValueRef r;
    KType rt = t; /* the type r has */
    static const LLVMRealPredicate fpred[] = {LLVMRealOLT, LLVMRealOLE, LLVMRealOGT,
                                              LLVMRealOGE, LLVMRealOEQ, LLVMRealUNE};
    static const LLVMIntPredicate spred[] = {LLVMIntSLT, LLVMIntSLE, LLVMIntSGT,
                                             LLVMIntSGE, LLVMIntEQ,  LLVMIntNE};
    static const LLVMIntPredicate upred[] = {LLVMIntULT, LLVMIntULE, LLVMIntUGT,
                                             LLVMIntUGE, LLVMIntEQ,  LLVMIntNE};
    switch ((KBin)op) {
    case KB_ADD:
        r = is_f ? LLVMBuildFAdd(b, a, bv, "") : LLVMBuildAdd(b, a, bv, "");
        break;
    case KB_SUB:
        r = is_f ? LLVMBuildFSub(b, a, bv, "") : LLVMBuildSub(b, a, bv, "");
        break;
    case KB_MUL:
        r = is_f ? LLVMBuildFMul(b, a, bv, "") : LLVMBuildMul(b, a, bv, "");
        break;
    case KB_DIV: /* integer operands are never negative in lowered code (kir.h): unsigned,
                  * a shift and a mask for a power of two where signed needs a fix-up of 5 */
        r = is_f ? LLVMBuildFDiv(b, a, bv, "") : LLVMBuildUDiv(b, a, bv, "");
        break;
    case KB_REM:
        if (is_f) {
            gen_fail(g, "kernel %s: rem on a float", g->k->name);
            return LLVMGetUndef(type_like(g, rtype, a));
        }
        r = LLVMBuildURem(b, a, bv, "");
        break;
    case KB_BITAND:
        if (is_f) {
            gen_fail(g, "kernel %s: & on a float", g->k->name);
            return LLVMGetUndef(type_like(g, rtype, a));
        }
        r = LLVMBuildAnd(b, a, bv, "");
        break;
    case KB_BITOR:
    case KB_SHL:
        if (is_f) {
            gen_fail(g, "kernel %s: %s on a float", g->k->name, kbin_str(op));
            return LLVMGetUndef(type_like(g, rtype, a));
        }
        r = op == KB_BITOR ? LLVMBuildOr(b, a, bv, "") : LLVMBuildShl(b, a, bv, "");
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
            return LLVMGetUndef(type_like(g, rtype, a));
        }
        r = call_libm(g, "pow", t, (LLVMValueRef[]){a, bv}, 2);
        break;
    case KB_LT:
    case KB_LE:
    case KB_GT:
    case KB_GE:
    case KB_EQ:
    case KB_NE: {
        int i = op - KB_LT;
        r = is_f ? LLVMBuildFCmp(b, fpred[i], a, bv, "")
                 : LLVMBuildICmp(b, (is_u ? upred : spred)[i], a, bv, "");
        rt = KT_BOOL;
        break;
    }
    case KB_AND:
    case KB_OR: {
        LLVMValueRef x = convert(g, a, t, KT_BOOL), y = convert(g, bv, t, KT_BOOL);
        r = op == KB_AND ? LLVMBuildAnd(b, x, y, "") : LLVMBuildOr(b, x, y, "");
        rt = KT_BOOL;
        break;
    }
    default:
        gen_fail(g, "kernel %s: unknown binary op %d", g->k->name, op);
        return LLVMGetUndef(type_like(g, rtype, a));
    }
    return convert(g, r, rt, rtype);
}

static LLVMValueRef
gen_bin(Gen *g, const KExpr *e)
{
    LLVMValueRef a = gen_expr(g, e->a);
    return bin_value(g, e->op, e->a->type, a, gen_expr_as(g, e->b, e->a->type), e->type);
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
        if (e->buf >= 0 && e->buf < g->p->nbufs && g->bufptr[e->buf] &&
            ktype_bits(g->p->bufs[e->buf].type))
            return convert(g, load_bit(g, e->buf, gen_expr_as(g, e->a, KT_I64), e->op),
                           ktype_value_of_load(e, g->p->bufs[e->buf].type), e->type);
        LLVMValueRef ptr = elem_ptr(g, e->buf, e->a);
        if (!ptr) return LLVMGetUndef(val_type(g, e->type));
        KType bt = g->p->bufs[e->buf].type;
        LLVMValueRef v = tag_access(g, LLVMBuildLoad2(g->b, mem_type(g, bt), ptr, ""));
        if (bt == KT_BOOL)
            v = LLVMBuildICmp(g->b, LLVMIntNE, v, LLVMConstNull(g->t_i8), "");
        else if (bt == KT_U8 || bt == KT_I8)
            v = bt == KT_U8 ? LLVMBuildZExt(g->b, v, g->t_i64, "")
                            : LLVMBuildSExt(g->b, v, g->t_i64, "");
        else if (bt == KT_F16 || bt == KT_BF16)
            v = widen16(g, v, bt);
        return convert(g, v, ktype_value(bt), e->type);
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
        if (g->lshape) lo = gen_simd_loop(g, s, lo, hi);
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

/* the widest piece of a tile of type t: 8 lanes, or 16 floats where AVX-512 holds them in one
 * register */
static int
tile_piece_width(const Gen *g, KType t)
{
    return t == KT_F32 && g->has512 ? 2 * TILE_PIECE : TILE_PIECE;
}

static int
tile_pieces(int lanes, int maxw, int *off, int *len)
{
    int n = 0;
    for (int o = 0, w = maxw; o < lanes; w /= 2)
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

/* buf[index + off .. + len) as <len x tt> (the tile's type: f32 elements widen exactly to f64; an
 * f64 buffer under an f32 tile rounds) */
static LLVMValueRef
load_piece(Gen *g, int buf, LLVMValueRef index, int off, int len, KType tt)
{
    KType bt = g->p->bufs[buf].type;
    LLVMTypeRef et = mem_type(g, bt);
    LLVMValueRef i = LLVMBuildAdd(g->b, index, LLVMConstInt(g->t_i64, (unsigned)off, 0), "");
    LLVMValueRef ptr = LLVMBuildInBoundsGEP2(g->b, et, g->bufptr[buf], &i, 1, "");
    LLVMTypeRef pt = piece_type(g, et, len);
    ptr = LLVMBuildBitCast(g->b, ptr, LLVMPointerType(pt, 0), "");
    LLVMValueRef v = tag_access(g, LLVMBuildLoad2(g->b, pt, ptr, ""));
    LLVMSetAlignment(v, (unsigned)llvm_gen_elem_size(bt));
    if (bt == KT_F16 || bt == KT_BF16) v = widen16(g, v, bt);
    return convert(g, v, ktype_value(bt), tt);
}

static LLVMValueRef
fma_piece(Gen *g, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c, int len, KType tt)
{
    char name[32];
    const char *et = tt == KT_F32 ? "f32" : "f64";
    if (len == 1)
        snprintf(name, sizeof name, "llvm.fma.%s", et);
    else
        snprintf(name, sizeof name, "llvm.fma.v%d%s", len, et);
    LLVMTypeRef ty = piece_type(g, val_type(g, tt), len);
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
    bool is_16 = kb->type == KT_F16 || kb->type == KT_BF16;
    bool is_spikes = !is_store && (kb->type == KT_U8 || kb->type == KT_I8); /* kir.h: loads */
    if (kb->type != KT_F32 && kb->type != KT_F64 && !is_16 && !is_spikes) {
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

/* whether fma_nz s may add its zero terms instead of skipping them (kir.h KS_VFMA): always in a
 * training step (KProgram.adds_zero_terms: it must); else where its input is an integer value (a
 * spike or count widened from an integer) and its weights are finite (weights are checked finite
 * where they are bound and loaded, 16-bit ones for overflow too).
 * Its tile never holds -0: sums start from +0 (a bias is added to it: lower_layers.c tile_init),
 * and an integer times a float is exact, so no sum rounds to -0. */
static bool
adds_zero_terms(Gen *g, const KStmt *s)
{
    if (g->p->adds_zero_terms) return true; /* a training step (kir.h) */
    const KExpr *a = s->a;
    while (a && a->kind == KX_CAST && (a->type == KT_F32 || a->type == KT_F64))
        a = a->a;
    bool is_int =
        a && (a->type == KT_U8 || a->type == KT_I8 || a->type == KT_I64 || a->type == KT_BOOL);
    return is_int && g->p->bufs[s->buf].kind == KB_WEIGHT;
}

static void
gen_tile(Gen *g, const KStmt *s)
{
    LLVMBuilderRef b = g->b;
    LLVMValueRef *t = tile_of(g, s);
    if (!t) return;
    int off[MAX_PIECES], len[MAX_PIECES];
    KType tt = g->k->locals[s->var].type; /* f64, or f32 under accumulate f32 */
    int np = tile_pieces(g->k->locals[s->var].lanes, tile_piece_width(g, tt), off, len);
    LLVMTypeRef te = val_type(g, tt);
    if (s->kind == KS_VSET) {
        LLVMValueRef a = gen_expr_as(g, s->a, tt);
        for (int i = 0; i < np; i++)
            LLVMBuildStore(b, splat(g, a, len[i]), t[i]);
        return;
    }
    if (!is_tile_buffer(g, s, s->kind == KS_VSTORE)) return;
    LLVMValueRef index = gen_expr_as(g, s->index, KT_I64);
    switch (s->kind) {
    case KS_VLOAD:
        for (int i = 0; i < np; i++)
            LLVMBuildStore(b, load_piece(g, s->buf, index, off[i], len[i], tt), t[i]);
        return;
    case KS_VFMA: {
        /* fused: one rounding, as kir_eval's fma() / fmaf() */
        LLVMValueRef a = gen_expr_as(g, s->a, tt);
        bool is_test = s->is_sparse && !adds_zero_terms(g, s);
        for (int i = 0; i < np; i++) {
            LLVMTypeRef pt = piece_type(g, te, len[i]);
            LLVMValueRef acc = LLVMBuildLoad2(b, pt, t[i], "");
            LLVMValueRef w = load_piece(g, s->buf, index, off[i], len[i], tt);
            LLVMValueRef va = splat(g, a, len[i]);
            /* is_sparse, without a branch (spike trains defeat branch prediction) and off the
             * accumulator's dependency chain: where a == 0 the weight becomes -a, and
             * a * -a = -0 whatever a's sign, and acc + -0 == acc for every acc (-0 included);
             * -a is finite where w may not be. Where a != 0 (NaN too, as kir_eval's test),
             * fma(a, w, acc). */
            if (is_test)
                w = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealUNE, va, LLVMConstNull(pt), ""), w,
                                    LLVMBuildFNeg(b, va, ""), "");
            LLVMBuildStore(b, fma_piece(g, va, w, acc, len[i], tt), t[i]);
        }
        return;
    }
    case KS_VSTORE: {
        KType bt = g->p->bufs[s->buf].type;
        LLVMTypeRef et = mem_type(g, bt);
        bool is_16 = bt == KT_F16 || bt == KT_BF16;
        for (int i = 0; i < np; i++) {
            LLVMValueRef v = LLVMBuildLoad2(b, piece_type(g, te, len[i]), t[i], "");
            v = convert(g, v, tt, ktype_value(bt));
            if (is_16) v = narrow16(g, v, bt);
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
        if (s->buf < 0 || s->buf >= g->p->nbufs || !g->bufptr[s->buf]) {
            gen_fail(g, "kernel %s: buffer %d out of range", g->k->name, s->buf);
            return;
        }
        KType bt = g->p->bufs[s->buf].type;
        if (g->p->bufs[s->buf].kind == KB_INPUT || g->p->bufs[s->buf].kind == KB_WEIGHT) {
            gen_fail(g, "kernel %s: store to read-only buffer '%s'", g->k->name,
                     g->p->bufs[s->buf].name);
            return;
        }
        if (ktype_bits(bt)) {
            store_bit(g, s->buf, gen_expr_as(g, s->index, KT_I64), gen_expr_as(g, s->a, KT_I64));
            return;
        }
        LLVMValueRef ptr = elem_ptr(g, s->buf, s->index);
        LLVMValueRef v = gen_expr_as(g, s->a, ktype_value(bt));
        if (bt == KT_F16 || bt == KT_BF16)
            v = narrow16(g, v, bt);
        else if (bt == KT_BOOL)
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
    case KS_COUNT: /* the GPU's; a CPU layer stores per-neuron counters */
        gen_fail(g, "kernel %s: a count statement on the CPU", g->k->name);
        return;
    case KS_PREFETCH: {
        /* llvm.prefetch(address, read, locality 3: keep in every cache level, data cache) */
        LLVMValueRef ptr = LLVMBuildBitCast(b, elem_ptr(g, s->buf, s->index), g->t_i8p, "");
        LLVMTypeRef pt[4] = {g->t_i8p, g->t_i32, g->t_i32, g->t_i32};
        LLVMTypeRef fty = LLVMFunctionType(g->t_void, pt, 4, 0);
        LLVMValueRef f = LLVMGetNamedFunction(g->mod, "llvm.prefetch.p0i8");
        if (!f) f = LLVMAddFunction(g->mod, "llvm.prefetch.p0i8", fty);
        LLVMValueRef args[4] = {ptr, LLVMConstInt(g->t_i32, 0, 0), LLVMConstInt(g->t_i32, 3, 0),
                                LLVMConstInt(g->t_i32, 1, 0)};
        LLVMBuildCall2(b, fty, f, args, 4, "");
        return;
    }
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

/* ---- SIMD lanes ----
 * A kernel whose outermost parallel loop runs over elements (KStmt.is_lanes: neuron scans, pooled
 * scans, readouts) runs W of its iterations side by side (Gen.simd_w: 16 where the target has
 * AVX-512, whose 16 float lanes took a LIF layer's backward 1.5x faster, else 8): every local whose
 * value can differ between iterations (simd_plan: it depends on the loop variable, or is assigned
 * under a condition that does) becomes a vector of W lanes, the others stay scalars; an index that
 * is the loop
 * variable plus a uniform value is "linear" and its loads and stores are contiguous vectors, other
 * per-lane indices gather and scatter. A condition that differs between lanes runs both branches
 * under a mask: assignments keep the old value in lanes that are off (select), loads and stores
 * there are masked. Every lane computes exactly the scalar code's operations in the same order (no
 * reassociation, libm called lane by lane), so results are bit-identical; the iterations left over
 * (fewer than W) run the scalar code. The thread pool cuts chunks at multiples of 16
 * (SNNK_CHUNK_ALIGN, runtime/kernel_abi.h), a multiple of either width. */
enum { SIMD_MAX = 16 };

typedef enum { SH_UNI, SH_LIN, SH_VAR } Shape; /* uniform scalar, scalar + lane (i64), per lane */
typedef struct VV {
    LLVMValueRef v;
    Shape sh;
    /* SH_LIN whose base is a multiple of the width (the loop variable: the SIMD loop starts at
     * one): divided by a constant multiple of it all lanes have one quotient (uniform), and the
     * remainder is linear again */
    bool is_aligned;
} VV;

/* a constant i64 multiple of the width w (> 0) */
static bool
is_lane_const(const KExpr *e, int w)
{
    return e && e->kind == KX_CONST && e->type == KT_I64 && e->num > 0 && (int64_t)e->num % w == 0;
}

/* an i64 multiple of the width w: a constant one, a product with one as a factor (t*(B*n) for a
 * value of n = kw elements), a sum or difference of two */
static bool
is_lane_multiple(const KExpr *e, int w)
{
    if (!e || e->type != KT_I64) return false;
    if (e->kind == KX_CONST) return is_lane_const(e, w);
    if (e->kind != KX_BIN || e->a->type != KT_I64 || e->b->type != KT_I64) return false;
    if (e->op == KB_MUL) return is_lane_multiple(e->a, w) || is_lane_multiple(e->b, w);
    return (e->op == KB_ADD || e->op == KB_SUB) && is_lane_multiple(e->a, w) &&
           is_lane_multiple(e->b, w);
}

/* What a local holds across the lanes (simd_plan): nothing assigned yet, one value for all (a
 * scalar), the loop variable plus a uniform value (a scalar base; aligned: the base is a multiple
 * of the width), or a value per lane (a vector). The order is the lattice's. */
enum { PS_NONE, PS_UNI, PS_LIN, PS_LINAL, PS_VAR };

typedef struct SimdPlan {
    const Kernel *k;
    int w;                /* the lanes */
    uint64_t sig;         /* every expression's shape in a pass, in order (simd_plan) */
    unsigned char *shape; /* [nlocals] */
    bool is_ok, has_changed;
    bool is_ctl_varying; /* the statement being read is under a condition that differs by lane */
} SimdPlan;

static bool
is_lin(int sh)
{
    return sh == PS_LIN || sh == PS_LINAL;
}

static int sp_expr_of(SimdPlan *sp, const KExpr *e);

/* the shape vexpr will give e: the same rules, on shapes alone (sp_expr_of), noted in sp->sig */
static int
sp_expr(SimdPlan *sp, const KExpr *e)
{
    int sh = sp_expr_of(sp, e);
    sp->sig = sp->sig * 1000003u + (uint64_t)sh + 1;
    return sh;
}

static int
sp_expr_of(SimdPlan *sp, const KExpr *e)
{
    if (!e) return PS_UNI;
    if (e->kind == KX_VAR) {
        if (e->var < 0 || e->var >= sp->k->nlocals) {
            sp->is_ok = false;
            return PS_VAR;
        }
        int sh = sp->shape[e->var];
        if (sh == PS_NONE) return PS_UNI;
        return is_lin(sh) && e->type != KT_I64 ? PS_VAR : sh;
    }
    /* every operand is visited: each may mark the kernel unfit */
    int a = sp_expr(sp, e->a), b = sp_expr(sp, e->b), c = sp_expr(sp, e->c);
    switch (e->kind) {
    case KX_UNIFORM:
        if (a != PS_UNI || b != PS_UNI) sp->is_ok = false; /* Philox runs on scalars only */
        return PS_UNI;
    case KX_LOAD: /* under lanes that may be off, even one address is a masked gather */
        return a == PS_UNI && !sp->is_ctl_varying ? PS_UNI : PS_VAR;
    case KX_UN: return a == PS_UNI ? PS_UNI : PS_VAR;
    case KX_SELECT: return a == PS_UNI && b == PS_UNI && c == PS_UNI ? PS_UNI : PS_VAR;
    case KX_CAST:
        if (a == PS_UNI) return PS_UNI;
        if (is_lin(a) && e->type == KT_I64 && e->a->type == KT_I64) return a;
        return PS_VAR;
    case KX_BIN: {
        KType t = e->a->type;
        /* the second operand is converted to the first's type first */
        if (is_lin(b) && !(t == KT_I64 && e->b->type == KT_I64)) b = PS_VAR;
        if (is_lin(a) && t != KT_I64) a = PS_VAR;
        if (a == PS_UNI && b == PS_UNI) return PS_UNI;
        if (t == KT_I64 && e->type == KT_I64 && (is_lin(a) || is_lin(b)) && a != PS_VAR &&
            b != PS_VAR && (e->op == KB_ADD || (e->op == KB_SUB && b == PS_UNI))) {
            int lin = is_lin(a) ? a : b;
            const KExpr *other = is_lin(a) ? e->b : e->a;
            return lin == PS_LINAL && a != b && is_lane_multiple(other, sp->w) ? PS_LINAL : PS_LIN;
        }
        if (t == KT_I64 && e->type == KT_I64 && a == PS_LINAL && is_lane_const(e->b, sp->w) &&
            (e->op == KB_DIV || e->op == KB_REM))
            return e->op == KB_DIV ? PS_UNI : PS_LINAL;
        return PS_VAR;
    }
    default: return PS_UNI; /* constants, B, t, sample_base */
    }
}

/* a local assigned values of shapes old and new */
static int
sp_join(int old, int new)
{
    if (old == PS_NONE || old == new) return new;
    if (is_lin(old) && is_lin(new)) return PS_LIN;
    return PS_VAR;
}

static void
sp_stmts(SimdPlan *sp, KStmt *const *s, int n, bool is_ctl_varying)
{
    for (int i = 0; i < n && sp->is_ok; i++) {
        const KStmt *st = s[i];
        if (!st || st->var >= sp->k->nlocals) {
            sp->is_ok = false;
            return;
        }
        sp->is_ctl_varying = is_ctl_varying;
        switch (st->kind) {
        case KS_FOR:
            /* every lane runs the same trips: bounds must be uniform, the variable too */
            if (sp_expr(sp, st->lo) != PS_UNI || sp_expr(sp, st->hi) != PS_UNI || st->var < 0 ||
                sp->shape[st->var] > PS_UNI)
                sp->is_ok = false;
            sp_stmts(sp, st->body, st->nbody, is_ctl_varying);
            break;
        case KS_ASSIGN: {
            if (st->var < 0) {
                sp->is_ok = false;
                break;
            }
            int sh = is_ctl_varying ? PS_VAR : sp_expr(sp, st->a);
            int j = sp_join(sp->shape[st->var], sh);
            if (j != sp->shape[st->var]) {
                sp->shape[st->var] = (unsigned char)j;
                sp->has_changed = true;
            }
            break;
        }
        case KS_STORE:
            /* an element per iteration: a uniform index would be one element for every lane */
            if (sp_expr(sp, st->index) == PS_UNI) sp->is_ok = false;
            sp_expr(sp, st->a);
            break;
        case KS_IF: {
            bool c = sp_expr(sp, st->a) != PS_UNI || is_ctl_varying;
            sp_stmts(sp, st->body, st->nbody, c);
            sp_stmts(sp, st->els, st->nels, c);
            break;
        }
        default: sp->is_ok = false; /* tiles: already vectors of their own */
        }
    }
}

/* What every local holds across the lanes of loop's iterations (PS_*), or NULL where the kernel
 * cannot run in lanes (or its loop does not ask to). */
static unsigned char *
plan_at(const Kernel *k, const KStmt *loop, int w, uint64_t *sig)
{
    if (!loop || !loop->is_lanes || loop->var < 0 || loop->var >= k->nlocals) return NULL;
    for (int i = 0; i < k->nlocals; i++)
        if (k->locals[i].lanes > 0) return NULL;
    SimdPlan sp = {k, w, 0, calloc((size_t)k->nlocals + 1, 1), true, true, false};
    if (!sp.shape) die("out of memory");
    sp.shape[loop->var] = PS_LINAL;
    while (sp.is_ok && sp.has_changed) {
        sp.has_changed = false;
        sp.sig = 0;
        sp_stmts(&sp, loop->body, loop->nbody, false);
    }
    if (!sp.is_ok) {
        free(sp.shape);
        return NULL;
    }
    *sig = sp.sig; /* the last pass's, which changed nothing */
    return sp.shape;
}

/* The plan at the widest lanes `most` (16 or 8) where every expression has the shape it has at 8
 * (a quotient uniform over 8 lanes may not be over 16: a row of 24 elements), else at 8; *w the
 * lanes chosen. NULL where the kernel cannot run in lanes. */
static unsigned char *
simd_plan(const Kernel *k, const KStmt *loop, int most, int *w)
{
    uint64_t sig8 = 0, sigw = 0;
    *w = 8;
    unsigned char *at8 = plan_at(k, loop, 8, &sig8);
    if (!at8 || most <= 8) return at8;
    unsigned char *atw = plan_at(k, loop, most, &sigw);
    if (!atw || sigw != sig8 || memcmp(atw, at8, (size_t)k->nlocals)) {
        free(atw);
        return at8;
    }
    free(at8);
    *w = most;
    return atw;
}

/* ---- blocked scans ----
 * A lanes loop whose body holds one sequential loop (a neuron's steps: for j { init; for t {...};
 * counts }) reads and writes, for each group of simd_w iterations, one vector at each step's row:
 * T streams of loads and T of stores a row apart. Run instead block by block (SCAN_VECS vectors):
 * the statements before the loop for every vector of the block, then each step for every vector,
 * then the statements after it; the locals a segment needs from an earlier one (scan_plan: read
 * before they are written there) wait in L1 arrays between segments. The iterations are
 * independent (is_parallel), so the order in which different iterations' statements run is free,
 * each iteration's own order is kept, and results are bit-identical; but memory now sees one row
 * of loads and one of stores at a time, contiguous runs of SCAN_VECS * simd_w elements. That is
 * what lets the stores bypass the caches (scan_nt_guard): measured on a 2-thread AVX2 host, the
 * LIF scan's 8 interleaved rows with non-temporal stores ran 4x slower than plain stores, blocked
 * rows with them as fast as a memcpy of the same bytes (docs/benchmarks.md). A block is SCAN_VECS
 * vectors, fewer where its slots would pass SCAN_SLOT_BYTES (three quarters of a 32 KB L1). */
enum { SCAN_VECS = 256, SCAN_SLOT_BYTES = 24 << 10, NT_MIN_BYTES = 16 << 20, NT_ALIGN = 16 };

static bool
mentions_var(const KExpr *e, int var)
{
    if (!e) return false;
    if (e->kind == KX_VAR && e->var == var) return true;
    return mentions_var(e->a, var) || mentions_var(e->b, var) || mentions_var(e->c, var);
}

/* a store in s whose index moves with both the lanes' variable and the step's */
static bool
has_stream(KStmt *const *s, int n, int jvar, int tvar)
{
    for (int i = 0; i < n; i++) {
        if (!s[i]) continue;
        if (s[i]->kind == KS_STORE && mentions_var(s[i]->index, jvar) &&
            mentions_var(s[i]->index, tvar))
            return true;
        if (has_stream(s[i]->body, s[i]->nbody, jvar, tvar) ||
            has_stream(s[i]->els, s[i]->nels, jvar, tvar))
            return true;
    }
    return false;
}

static void
exposed_expr(const KExpr *e, const bool *def, bool *out, int nlocals)
{
    if (!e) return;
    if (e->kind == KX_VAR && e->var >= 0 && e->var < nlocals && !def[e->var]) out[e->var] = true;
    exposed_expr(e->a, def, out, nlocals);
    exposed_expr(e->b, def, out, nlocals);
    exposed_expr(e->c, def, out, nlocals);
}

/* out |= the locals statements s may read before they assign them, def the ones assigned before
 * them (updated: those s surely assigns) */
static void
exposed_stmts(KStmt *const *s, int n, bool *def, bool *out, int nlocals)
{
    bool *d1 = xcalloc((size_t)nlocals + 1, 1), *d2 = xcalloc((size_t)nlocals + 1, 1);
    for (int i = 0; i < n; i++) {
        const KStmt *st = s[i];
        if (!st) continue;
        exposed_expr(st->lo, def, out, nlocals);
        exposed_expr(st->hi, def, out, nlocals);
        exposed_expr(st->index, def, out, nlocals);
        exposed_expr(st->a, def, out, nlocals);
        if (st->kind == KS_ASSIGN && st->var >= 0 && st->var < nlocals) {
            def[st->var] = true;
        } else if (st->kind == KS_IF) {
            memcpy(d1, def, (size_t)nlocals);
            exposed_stmts(st->body, st->nbody, d1, out, nlocals);
            memcpy(d2, def, (size_t)nlocals);
            exposed_stmts(st->els, st->nels, d2, out, nlocals);
            for (int v = 0; v < nlocals; v++)
                def[v] = d1[v] && d2[v];
        } else if (st->kind == KS_FOR) {
            memcpy(d1, def, (size_t)nlocals);
            if (st->var >= 0 && st->var < nlocals) d1[st->var] = true;
            exposed_stmts(st->body, st->nbody, d1, out, nlocals); /* may run no trip */
        }
    }
    free(d1);
    free(d2);
}

/* Whether the SIMD loop's body runs as a blocked scan: the index of its one sequential loop (with
 * bounds that no local changes, and a store that streams with both variables), and carried[] the
 * locals the loop's body or the statements after it read before assigning; else -1. */
static int
scan_plan(const Kernel *k, const KStmt *loop, const unsigned char *shape, bool *carried)
{
    if (!shape) return -1;
    int at = -1;
    for (int i = 0; i < loop->nbody; i++)
        if (loop->body[i] && loop->body[i]->kind == KS_FOR) {
            if (at >= 0) return -1;
            at = i;
        }
    if (at < 0) return -1;
    const KStmt *t = loop->body[at];
    if (t->is_parallel || t->var < 0 || t->var >= k->nlocals || !is_pure_bound(t->lo) ||
        !is_pure_bound(t->hi) || !has_stream(t->body, t->nbody, loop->var, t->var))
        return -1;
    int n = k->nlocals;
    bool *def = xcalloc((size_t)n + 1, 1);
    memset(carried, 0, (size_t)n);
    def[loop->var] = def[t->var] = true;
    exposed_stmts(t->body, t->nbody, def, carried, n);
    memset(def, 0, (size_t)n);
    def[loop->var] = true;
    exposed_stmts(loop->body + at + 1, loop->nbody - at - 1, def, carried, n);
    free(def);
    carried[loop->var] = false;
    return at;
}

static LLVMTypeRef
lanes_of(const Gen *g, LLVMTypeRef et)
{
    return LLVMVectorType(et, (unsigned)g->simd_w);
}

static LLVMValueRef
vec_of(Gen *g, VV x)
{
    if (x.sh == SH_VAR) return x.v;
    LLVMValueRef v = splat(g, x.v, g->simd_w);
    return x.sh == SH_LIN ? LLVMBuildAdd(g->b, v, g->iota, "lanes") : v;
}

static VV
vv_uni(LLVMValueRef v)
{
    return (VV){v, SH_UNI, false};
}

static VV
vv_var(LLVMValueRef v)
{
    return (VV){v, SH_VAR, false};
}


static VV
vconv(Gen *g, VV x, KType from, KType to)
{
    if (from == to) return x;
    if (x.sh == SH_LIN && to == KT_I64) return x;
    if (x.sh == SH_UNI) return vv_uni(convert(g, x.v, from, to));
    return vv_var(convert(g, vec_of(g, x), from, to));
}

static const char *
elem_name(KType mt)
{
    switch (mt) {
    case KT_F32: return "f32";
    case KT_F64: return "f64";
    case KT_I64: return "i64";
    case KT_F16:
    case KT_BF16: return "i16";
    default: return "i8";
    }
}

/* llvm.masked.{load,store,gather,scatter} for <simd_w x mt> (typed pointers: LLVM 14) */
static LLVMValueRef
masked_intrinsic(Gen *g, const char *what, KType bt, LLVMTypeRef *fty)
{
    LLVMTypeRef et = mem_type(g, bt), vt = lanes_of(g, et);
    LLVMTypeRef mk = lanes_of(g, g->t_i1), vp = LLVMPointerType(vt, 0);
    LLVMTypeRef pv = lanes_of(g, LLVMPointerType(et, 0));
    const char *en = elem_name(bt);
    char name[96];
    bool is_gs = strcmp(what, "gather") == 0 || strcmp(what, "scatter") == 0;
    if (is_gs) /* llvm.masked.gather.v8f32.v8p0f32 */
        snprintf(name, sizeof name, "llvm.masked.%s.v%d%s.v%dp0%s", what, g->simd_w, en, g->simd_w,
                 en);
    else /* llvm.masked.load.v8f32.p0v8f32 */
        snprintf(name, sizeof name, "llvm.masked.%s.v%d%s.p0v%d%s", what, g->simd_w, en, g->simd_w,
                 en);
    LLVMTypeRef i32 = g->t_i32;
    if (strcmp(what, "load") == 0)
        *fty = LLVMFunctionType(vt, (LLVMTypeRef[]){vp, i32, mk, vt}, 4, 0);
    else if (strcmp(what, "store") == 0)
        *fty = LLVMFunctionType(g->t_void, (LLVMTypeRef[]){vt, vp, i32, mk}, 4, 0);
    else if (strcmp(what, "gather") == 0)
        *fty = LLVMFunctionType(vt, (LLVMTypeRef[]){pv, i32, mk, vt}, 4, 0);
    else
        *fty = LLVMFunctionType(g->t_void, (LLVMTypeRef[]){vt, pv, i32, mk}, 4, 0);
    LLVMValueRef f = LLVMGetNamedFunction(g->mod, name);
    if (!f) f = LLVMAddFunction(g->mod, name, *fty);
    return f;
}

static LLVMValueRef
all_lanes(Gen *g)
{
    return g->mask ? g->mask : LLVMConstAllOnes(lanes_of(g, g->t_i1));
}

/* the memory lanes of buf at idx → value lanes of bt (as a scalar load when idx is uniform and no
 * lane is off) */
static VV
vload_buf(Gen *g, int buf, VV idx)
{
    if (buf < 0 || buf >= g->p->nbufs || !g->bufptr[buf]) {
        gen_fail(g, "kernel %s: buffer %d out of range", g->k->name, buf);
        return vv_uni(LLVMGetUndef(g->t_i64));
    }
    KType bt = g->p->bufs[buf].type;
    LLVMTypeRef et = mem_type(g, bt), vt = lanes_of(g, et);
    LLVMValueRef align = LLVMConstInt(g->t_i32, (unsigned)llvm_gen_elem_size(bt), 0), v;
    LLVMBuilderRef b = g->b;
    if (idx.sh == SH_UNI && !g->mask) {
        LLVMValueRef ptr = LLVMBuildInBoundsGEP2(b, et, g->bufptr[buf], &idx.v, 1, "");
        v = tag_access(g, LLVMBuildLoad2(b, et, ptr, ""));
    } else if (idx.sh == SH_LIN) {
        LLVMValueRef ptr = LLVMBuildInBoundsGEP2(b, et, g->bufptr[buf], &idx.v, 1, "");
        ptr = LLVMBuildBitCast(b, ptr, LLVMPointerType(vt, 0), "");
        if (g->mask) {
            LLVMTypeRef fty;
            LLVMValueRef f = masked_intrinsic(g, "load", bt, &fty);
            v = LLVMBuildCall2(b, fty, f, (LLVMValueRef[]){ptr, align, g->mask, LLVMConstNull(vt)},
                               4, "");
        } else {
            v = tag_access(g, LLVMBuildLoad2(b, vt, ptr, ""));
            LLVMSetAlignment(v, (unsigned)llvm_gen_elem_size(bt));
        }
    } else {
        LLVMValueRef iv = vec_of(g, idx);
        LLVMValueRef ptrs = LLVMBuildInBoundsGEP2(b, et, g->bufptr[buf], &iv, 1, "");
        LLVMTypeRef fty;
        LLVMValueRef f = masked_intrinsic(g, "gather", bt, &fty);
        v = LLVMBuildCall2(b, fty, f, (LLVMValueRef[]){ptrs, align, all_lanes(g), LLVMConstNull(vt)},
                           4, "");
    }
    if (bt == KT_BOOL)
        v = LLVMBuildICmp(b, LLVMIntNE, v, LLVMConstNull(LLVMTypeOf(v)), "");
    else if (bt == KT_U8 || bt == KT_I8)
        v = bt == KT_U8 ? LLVMBuildZExt(b, v, shaped(g->t_i64, v), "")
                        : LLVMBuildSExt(b, v, shaped(g->t_i64, v), "");
    else if (bt == KT_F16 || bt == KT_BF16)
        v = widen16(g, v, bt);
    return is_vector(v) ? vv_var(v) : vv_uni(v);
}

/* element lanes idx of bit buffer buf as i64 lanes (0/1, pairs -1/0/1; bytes: byte lanes idx,
 * KLOAD_BYTES): one scalar load when idx is uniform and no lane is off (a word, KLOAD_WORD, only
 * so), else a gather of the bytes under the lanes that are on */
static VV
vload_bits(Gen *g, int buf, VV idx, int how)
{
    if (idx.sh == SH_UNI && !g->mask) return vv_uni(load_bit(g, buf, idx.v, how));
    if (how == KLOAD_WORD) {
        gen_fail(g, "kernel %s: a word of bits loaded per SIMD lane", g->k->name);
        return vv_uni(LLVMGetUndef(g->t_i64));
    }
    bool is_bytes = how == KLOAD_BYTES;
    int bits = ktype_bits(g->p->bufs[buf].type);
    LLVMBuilderRef b = g->b;
    LLVMValueRef iv = vec_of(g, idx), byte = iv, sh = NULL;
    if (!is_bytes) byte = bit_byte_index(g, bits, iv, &sh);
    LLVMValueRef ptrs = LLVMBuildInBoundsGEP2(b, g->t_i8, g->bufptr[buf], &byte, 1, "");
    LLVMTypeRef fty;
    LLVMValueRef f = masked_intrinsic(g, "gather", KT_U8, &fty);
    LLVMValueRef v =
        LLVMBuildCall2(b, fty, f,
                       (LLVMValueRef[]){ptrs, LLVMConstInt(g->t_i32, 1, 0), all_lanes(g),
                                        LLVMConstNull(lanes_of(g, g->t_i8))},
                       4, "");
    if (sh) return vv_var(bit_value(g, bits, v, sh));
    return vv_var(LLVMBuildZExt(b, v, lanes_of(g, g->t_i64), ""));
}

/* a store of i64 lanes v to bit buffer buf at element lanes idx: 8 neighbouring lanes from an
 * element that is a multiple of 8 with every lane on are one byte (the lanes' comparisons with 0,
 * bitcast) or, for pairs, two (the lanes' two low bits, <8 x i2> bitcast to i16); anything else
 * is stored lane by lane, each lane that is on reading and writing its byte */
static void
vstore_bits(Gen *g, int buf, VV idx, LLVMValueRef v)
{
    LLVMBuilderRef b = g->b;
    if (idx.sh == SH_LIN && idx.is_aligned && !g->mask) {
        bool is_pairs = ktype_bits(g->p->bufs[buf].type) == 2;
        LLVMValueRef packed;
        if (is_pairs) {
            LLVMTypeRef i2 = LLVMIntTypeInContext(g->ctx, 2);
            packed = LLVMBuildBitCast(
                b, LLVMBuildTrunc(b, v, LLVMVectorType(i2, (unsigned)g->simd_w), ""),
                LLVMIntTypeInContext(g->ctx, 2 * (unsigned)g->simd_w), "spikes");
        } else {
            LLVMValueRef on = LLVMBuildICmp(b, LLVMIntNE, v, LLVMConstNull(LLVMTypeOf(v)), "");
            packed = LLVMBuildBitCast(b, on, LLVMIntTypeInContext(g->ctx, (unsigned)g->simd_w),
                                      "spikes");
        }
        LLVMValueRef byte =
            LLVMBuildAShr(b, idx.v, LLVMConstInt(g->t_i64, is_pairs ? 2 : 3, 0), "");
        LLVMValueRef ptr = LLVMBuildInBoundsGEP2(b, g->t_i8, g->bufptr[buf], &byte, 1, "");
        ptr = LLVMBuildBitCast(b, ptr, LLVMPointerType(LLVMTypeOf(packed), 0), "");
        LLVMValueRef st = tag_access(g, LLVMBuildStore(b, packed, ptr));
        LLVMSetAlignment(st, 1);
        return;
    }
    LLVMValueRef iv = vec_of(g, idx);
    for (int l = 0; l < g->simd_w; l++) {
        LLVMValueRef lane = LLVMConstInt(g->t_i32, (unsigned)l, 0);
        LLVMBasicBlockRef bb_on = NULL, bb_next = NULL;
        if (g->mask) {
            bb_on = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "bit.lane");
            bb_next = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "bit.next");
            LLVMBuildCondBr(b, LLVMBuildExtractElement(b, g->mask, lane, ""), bb_on, bb_next);
            LLVMPositionBuilderAtEnd(b, bb_on);
        }
        store_bit(g, buf, LLVMBuildExtractElement(b, iv, lane, ""),
                  LLVMBuildExtractElement(b, v, lane, ""));
        if (g->mask) {
            LLVMBuildBr(b, bb_next);
            LLVMPositionBuilderAtEnd(b, bb_next);
        }
    }
}

static VV vexpr(Gen *g, const KExpr *e);

static VV
vexpr_as(Gen *g, const KExpr *e, KType t)
{
    return vconv(g, vexpr(g, e), e->type, t);
}

static VV
vexpr(Gen *g, const KExpr *e)
{
    if (!e) {
        gen_fail(g, "kernel %s: missing operand", g->k->name);
        return vv_uni(LLVMGetUndef(g->t_i64));
    }
    switch (e->kind) {
    case KX_CONST:
    case KX_BATCH:
    case KX_SAMPLE_BASE:
    case KX_STEP:
    case KX_UNIFORM: /* simd_plan: its operands are uniform */
        return vv_uni(gen_expr(g, e));
    case KX_VAR: {
        if (e->var < 0 || e->var >= g->k->nlocals) {
            gen_fail(g, "kernel %s: local %d out of range", g->k->name, e->var);
            return vv_uni(LLVMGetUndef(val_type(g, e->type)));
        }
        KType lt = g->k->locals[e->var].type;
        if (e->var == g->simd_var)
            return vconv(g, (VV){g->simd_base, SH_LIN, true}, KT_I64, e->type);
        int sh = g->lshape[e->var];
        if (is_lin(sh)) {
            LLVMValueRef base = LLVMBuildLoad2(g->b, g->t_i64, g->local[e->var], "");
            return vconv(g, (VV){base, SH_LIN, sh == PS_LINAL}, KT_I64, e->type);
        }
        if (sh != PS_VAR) return vv_uni(gen_expr(g, e));
        LLVMValueRef v = LLVMBuildLoad2(g->b, lanes_of(g, val_type(g, lt)), g->vlocal[e->var],
                                        g->k->locals[e->var].name);
        return vconv(g, vv_var(v), lt, e->type);
    }
    case KX_LOAD: {
        if (e->buf >= 0 && e->buf < g->p->nbufs && g->bufptr[e->buf] &&
            ktype_bits(g->p->bufs[e->buf].type))
            return vconv(g, vload_bits(g, e->buf, vexpr_as(g, e->a, KT_I64), e->op),
                         ktype_value_of_load(e, g->p->bufs[e->buf].type), e->type);
        VV v = vload_buf(g, e->buf, vexpr_as(g, e->a, KT_I64));
        return g->has_failed ? v : vconv(g, v, ktype_value(g->p->bufs[e->buf].type), e->type);
    }
    case KX_UN: {
        VV a = vexpr(g, e->a);
        if (a.sh == SH_UNI) return vv_uni(un_value(g, e->op, e->a->type, a.v, e->type));
        return vv_var(un_value(g, e->op, e->a->type, vec_of(g, a), e->type));
    }
    case KX_BIN: {
        KType t = e->a->type;
        VV a = vexpr(g, e->a), b = vexpr_as(g, e->b, t);
        if (a.sh == SH_UNI && b.sh == SH_UNI)
            return vv_uni(bin_value(g, e->op, t, a.v, b.v, e->type));
        /* linear ± uniform stays linear (aligned when the uniform is a constant multiple of the
         * lanes); aligned linear / and % a constant multiple of the lanes: one quotient for every
         * lane, a linear aligned remainder */
        if (t == KT_I64 && e->type == KT_I64 && (a.sh == SH_LIN || b.sh == SH_LIN) &&
            a.sh != SH_VAR && b.sh != SH_VAR &&
            (e->op == KB_ADD || (e->op == KB_SUB && b.sh == SH_UNI))) {
            const VV *lin = a.sh == SH_LIN ? &a : &b;
            const KExpr *other = a.sh == SH_LIN ? e->b : e->a;
            bool is_al = lin->is_aligned && b.sh != a.sh && is_lane_multiple(other, g->simd_w);
            return (VV){bin_value(g, e->op, t, a.v, b.v, KT_I64), SH_LIN, is_al};
        }
        if (t == KT_I64 && e->type == KT_I64 && a.sh == SH_LIN && a.is_aligned &&
            is_lane_const(e->b, g->simd_w) && (e->op == KB_DIV || e->op == KB_REM)) {
            LLVMValueRef r = bin_value(g, e->op, t, a.v, b.v, KT_I64);
            return e->op == KB_DIV ? vv_uni(r) : (VV){r, SH_LIN, true};
        }
        return vv_var(bin_value(g, e->op, t, vec_of(g, a), vec_of(g, b), e->type));
    }
    case KX_SELECT: {
        VV c = vexpr_as(g, e->a, KT_BOOL), x = vexpr_as(g, e->b, e->type),
           y = vexpr_as(g, e->c, e->type);
        if (c.sh == SH_UNI && x.sh == SH_UNI && y.sh == SH_UNI)
            return vv_uni(LLVMBuildSelect(g->b, c.v, x.v, y.v, ""));
        return vv_var(LLVMBuildSelect(g->b, c.sh == SH_UNI ? c.v : vec_of(g, c), vec_of(g, x),
                                      vec_of(g, y), ""));
    }
    case KX_CAST: {
        VV x = vexpr(g, e->a);
        if (e->a->type != e->type) return vconv(g, x, e->a->type, e->type);
        if (e->type != KT_U8 && e->type != KT_I8) return x;
        if (x.sh == SH_UNI) return vv_uni(wrap_int(g, x.v, e->type));
        return vv_var(wrap_int(g, vec_of(g, x), e->type));
    }
    }
    gen_fail(g, "kernel %s: unknown expression kind %d", g->k->name, (int)e->kind);
    return vv_uni(LLVMGetUndef(val_type(g, e->type)));
}

static void vstmts(Gen *g, KStmt *const *s, int n);

static void
vstore_buf(Gen *g, const KStmt *s)
{
    if (s->buf < 0 || s->buf >= g->p->nbufs || !g->bufptr[s->buf]) {
        gen_fail(g, "kernel %s: buffer %d out of range", g->k->name, s->buf);
        return;
    }
    KType bt = g->p->bufs[s->buf].type;
    if (g->p->bufs[s->buf].kind == KB_INPUT || g->p->bufs[s->buf].kind == KB_WEIGHT) {
        gen_fail(g, "kernel %s: store to read-only buffer '%s'", g->k->name,
                 g->p->bufs[s->buf].name);
        return;
    }
    LLVMBuilderRef b = g->b;
    VV idx = vexpr_as(g, s->index, KT_I64);
    if (ktype_bits(bt)) {
        vstore_bits(g, s->buf, idx, vec_of(g, vexpr_as(g, s->a, KT_I64)));
        return;
    }
    LLVMValueRef v = vec_of(g, vexpr_as(g, s->a, ktype_value(bt)));
    LLVMTypeRef et = mem_type(g, bt), vt = lanes_of(g, et);
    if (bt == KT_F16 || bt == KT_BF16)
        v = narrow16(g, v, bt);
    else if (bt == KT_BOOL)
        v = LLVMBuildZExt(b, v, vt, "");
    else if (bt == KT_U8 || bt == KT_I8)
        v = LLVMBuildTrunc(b, v, vt, "");
    LLVMValueRef align = LLVMConstInt(g->t_i32, (unsigned)llvm_gen_elem_size(bt), 0);
    LLVMTypeRef fty;
    if (idx.sh == SH_LIN) {
        LLVMValueRef ptr = LLVMBuildInBoundsGEP2(b, et, g->bufptr[s->buf], &idx.v, 1, "");
        ptr = LLVMBuildBitCast(b, ptr, LLVMPointerType(vt, 0), "");
        if (g->mask) {
            LLVMValueRef f = masked_intrinsic(g, "store", bt, &fty);
            LLVMBuildCall2(b, fty, f, (LLVMValueRef[]){v, ptr, align, g->mask}, 4, "");
        } else {
            LLVMValueRef st = tag_access(g, LLVMBuildStore(b, v, ptr));
            LLVMSetAlignment(st, (unsigned)llvm_gen_elem_size(bt));
            if (g->is_nt && g->nt_buf[s->buf] && idx.is_aligned) {
                /* a whole vector at a multiple of simd_w lanes from a base that scan_nt_guard
                 * found 16-byte aligned (NumPy's arrays are; x86 then stores 16-byte halves:
                 * with less alignment LLVM would store 8 bytes at a time) */
                LLVMValueRef one = LLVMConstInt(g->t_i32, 1, 0);
                LLVMSetMetadata(st, g->md_nontemporal, LLVMMDNodeInContext(g->ctx, &one, 1));
                LLVMSetAlignment(st, NT_ALIGN);
            }
        }
        return;
    }
    LLVMValueRef iv = vec_of(g, idx);
    LLVMValueRef ptrs = LLVMBuildInBoundsGEP2(b, et, g->bufptr[s->buf], &iv, 1, "");
    LLVMValueRef f = masked_intrinsic(g, "scatter", bt, &fty);
    LLVMBuildCall2(b, fty, f, (LLVMValueRef[]){v, ptrs, align, all_lanes(g)}, 4, "");
}

/* an inner loop of a SIMD body: uniform bounds, a scalar variable, the body in lanes */
static void
vfor(Gen *g, const KStmt *s)
{
    LLVMBuilderRef b = g->b;
    VV lo = vexpr_as(g, s->lo, KT_I64), hi = vexpr_as(g, s->hi, KT_I64);
    if (lo.sh != SH_UNI || hi.sh != SH_UNI) {
        gen_fail(g, "kernel %s: a loop in SIMD lanes with bounds that differ between lanes",
                 g->k->name);
        return;
    }
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "vfor.body");
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "vfor.exit");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, lo.v, hi.v, ""), body, exit);
    LLVMPositionBuilderAtEnd(b, body);
    LLVMValueRef phi = LLVMBuildPhi(b, g->t_i64, "");
    LLVMValueRef saved = g->loopval[s->var];
    g->loopval[s->var] = convert(g, phi, KT_I64, g->k->locals[s->var].type);
    LLVMBuildStore(b, g->loopval[s->var], g->local[s->var]);
    vstmts(g, s->body, s->nbody);
    g->loopval[s->var] = saved;
    LLVMValueRef next = LLVMBuildNSWAdd(b, phi, LLVMConstInt(g->t_i64, 1, 0), "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(b);
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, next, hi.v, ""), body, exit);
    LLVMAddIncoming(phi, (LLVMValueRef[]){lo.v, next}, (LLVMBasicBlockRef[]){pre, latch}, 2);
    LLVMPositionBuilderAtEnd(b, exit);
}

static void
vstmt(Gen *g, const KStmt *s)
{
    LLVMBuilderRef b = g->b;
    switch (s->kind) {
    case KS_FOR:
        vfor(g, s);
        return;
    case KS_ASSIGN: {
        if (s->var < 0 || s->var >= g->k->nlocals || g->loopval[s->var] || s->var == g->simd_var) {
            gen_fail(g, "kernel %s: assignment to local %d", g->k->name, s->var);
            return;
        }
        KType lt = g->k->locals[s->var].type;
        VV x = vexpr_as(g, s->a, lt);
        int sh = g->lshape[s->var];
        if (is_lin(sh)) {
            /* simd_plan: linear wherever it is assigned, on every lane */
            if (x.sh != SH_LIN || lt != KT_I64) {
                gen_fail(g, "kernel %s: %s is not linear in the lanes", g->k->name,
                         g->k->locals[s->var].name);
                return;
            }
            LLVMBuildStore(b, x.v, g->local[s->var]);
            return;
        }
        if (sh != PS_VAR) {
            if (x.sh != SH_UNI) {
                gen_fail(g, "kernel %s: %s differs between lanes", g->k->name,
                         g->k->locals[s->var].name);
                return;
            }
            LLVMBuildStore(b, x.v, g->local[s->var]);
            return;
        }
        LLVMValueRef v = vec_of(g, x);
        if (g->mask)
            v = LLVMBuildSelect(
                b, g->mask, v,
                LLVMBuildLoad2(b, lanes_of(g, val_type(g, lt)), g->vlocal[s->var], ""), "");
        LLVMBuildStore(b, v, g->vlocal[s->var]);
        return;
    }
    case KS_STORE:
        vstore_buf(g, s);
        return;
    case KS_IF: {
        VV c = vexpr_as(g, s->a, KT_BOOL);
        if (c.sh == SH_UNI) {
            LLVMBasicBlockRef bb_t = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "vif.then");
            LLVMBasicBlockRef bb_e = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "vif.else");
            LLVMBasicBlockRef bb_j = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "vif.end");
            LLVMBuildCondBr(b, c.v, bb_t, bb_e);
            LLVMPositionBuilderAtEnd(b, bb_t);
            vstmts(g, s->body, s->nbody);
            LLVMBuildBr(b, bb_j);
            LLVMPositionBuilderAtEnd(b, bb_e);
            vstmts(g, s->els, s->nels);
            LLVMBuildBr(b, bb_j);
            LLVMPositionBuilderAtEnd(b, bb_j);
            return;
        }
        /* both branches, each under its lanes */
        LLVMValueRef cv = vec_of(g, c), saved = g->mask;
        g->mask = saved ? LLVMBuildAnd(b, saved, cv, "") : cv;
        vstmts(g, s->body, s->nbody);
        if (s->nels > 0) {
            LLVMValueRef nc = LLVMBuildNot(b, cv, "");
            g->mask = saved ? LLVMBuildAnd(b, saved, nc, "") : nc;
            vstmts(g, s->els, s->nels);
        }
        g->mask = saved;
        return;
    }
    default:
        gen_fail(g, "kernel %s: statement kind %d in SIMD lanes", g->k->name, (int)s->kind);
    }
}

static void
vstmts(Gen *g, KStmt *const *s, int n)
{
    for (int i = 0; i < n && !g->has_failed; i++) {
        if (!s[i]) {
            gen_fail(g, "kernel %s: null statement", g->k->name);
            return;
        }
        vstmt(g, s[i]);
    }
}

/* a guarded, rotated loop over an i64 phi from lo while < hi: scan_loop_open leaves the builder
 * in its body, scan_loop_close adds step and leaves it after the loop */
typedef struct ScanLoop {
    LLVMBasicBlockRef pre, exit;
    LLVMValueRef phi, lo, hi;
} ScanLoop;

static ScanLoop
scan_loop_open(Gen *g, LLVMValueRef lo, LLVMValueRef hi, const char *name)
{
    LLVMBuilderRef b = g->b;
    ScanLoop l = {LLVMGetInsertBlock(b), NULL, NULL, lo, hi};
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->ctx, g->fn, name);
    l.exit = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "scan.exit");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, lo, hi, ""), body, l.exit);
    LLVMPositionBuilderAtEnd(b, body);
    l.phi = LLVMBuildPhi(b, g->t_i64, name);
    return l;
}

static void
scan_loop_close(Gen *g, const ScanLoop *l, unsigned step)
{
    LLVMBuilderRef b = g->b;
    LLVMValueRef next = LLVMBuildNSWAdd(b, l->phi, LLVMConstInt(g->t_i64, step, 0), "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(b);
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, next, l->hi, ""),
                    LLVMGetInstructionParent(l->phi), l->exit);
    LLVMAddIncoming(l->phi, (LLVMValueRef[]){l->lo, next}, (LLVMBasicBlockRef[]){l->pre, latch}, 2);
    LLVMPositionBuilderAtEnd(b, l->exit);
}

/* One segment of a blocked scan: statements s[0..n) for each vector of the block [blo, bhi)
 * (simd_w-aligned), the carried locals restored from and saved to their slots around them. */
static void
scan_segment(Gen *g, const KStmt *loop, KStmt *const *s, int n, LLVMValueRef blo, LLVMValueRef bhi,
             bool restore, bool save)
{
    LLVMBuilderRef b = g->b;
    ScanLoop l = scan_loop_open(g, blo, bhi, "scan.vec");
    LLVMValueRef phi = l.phi;
    g->simd_base = phi;
    LLVMBuildStore(b, phi, g->local[loop->var]);
    LLVMValueRef at[2] = {
        LLVMConstInt(g->t_i64, 0, 0),
        LLVMBuildExactSDiv(b, LLVMBuildSub(b, phi, blo, ""),
                           LLVMConstInt(g->t_i64, (unsigned long long)g->simd_w, 0), "")};
    const Kernel *k = g->k;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) vstmts(g, s, n);
        if (!(pass == 0 ? restore : save)) continue;
        for (int v = 0; v < k->nlocals; v++) {
            if (!g->slot[v]) continue;
            LLVMValueRef home = g->lshape[v] == PS_VAR ? g->vlocal[v] : g->local[v];
            LLVMTypeRef ty = LLVMGetAllocatedType(home);
            LLVMValueRef sp =
                LLVMBuildInBoundsGEP2(b, LLVMGetAllocatedType(g->slot[v]), g->slot[v], at, 2, "");
            if (pass == 0)
                LLVMBuildStore(b, LLVMBuildLoad2(b, ty, sp, ""), home);
            else
                LLVMBuildStore(b, LLVMBuildLoad2(b, ty, home, ""), sp);
        }
    }
    scan_loop_close(g, &l, (unsigned)g->simd_w);
}

/* the scan's sequential loop over one block: each step for every vector */
static void
scan_steps(Gen *g, const KStmt *loop, const KStmt *t, LLVMValueRef blo, LLVMValueRef bhi, bool nt)
{
    LLVMBuilderRef b = g->b;
    ScanLoop l = scan_loop_open(g, gen_expr_as(g, t->lo, KT_I64), gen_expr_as(g, t->hi, KT_I64),
                                "scan.step");
    LLVMValueRef phi = l.phi;
    LLVMValueRef saved = g->loopval[t->var];
    g->loopval[t->var] = convert(g, phi, KT_I64, g->k->locals[t->var].type);
    LLVMBuildStore(b, g->loopval[t->var], g->local[t->var]);
    g->is_nt = nt;
    scan_segment(g, loop, t->body, t->nbody, blo, bhi, true, true);
    g->is_nt = false;
    g->loopval[t->var] = saved;
    scan_loop_close(g, &l, 1);
}

/* Whether this run's scan stores bypass the caches: its nt_buf buffers together at least
 * NT_MIN_BYTES (far past what the next kernel could find in cache), each NT_ALIGN-aligned;
 * NULL when the kernel has none. */
static LLVMValueRef
scan_nt_guard(Gen *g)
{
    LLVMBuilderRef b = g->b;
    LLVMValueRef bytes = LLVMConstInt(g->t_i64, 0, 0), ok = NULL;
    for (int i = 0; i < g->p->nbufs; i++) {
        if (!g->nt_buf[i]) continue;
        const KBuf *kb = &g->p->bufs[i];
        int64_t es = llvm_gen_elem_size(kb->type);
        LLVMValueRef n = LLVMBuildAdd(
            b,
            LLVMBuildMul(b, g->batch,
                         LLVMConstInt(g->t_i64, (unsigned long long)kb->size.per_batch, 0), ""),
            LLVMConstInt(g->t_i64, (unsigned long long)kb->size.fixed, 0), "");
        bytes = LLVMBuildAdd(
            b, bytes, LLVMBuildMul(b, n, LLVMConstInt(g->t_i64, (unsigned long long)es, 0), ""),
            "");
        LLVMValueRef addr = LLVMBuildPtrToInt(b, g->bufptr[i], g->t_i64, "");
        LLVMValueRef al = LLVMBuildICmp(
            b, LLVMIntEQ, LLVMBuildAnd(b, addr, LLVMConstInt(g->t_i64, NT_ALIGN - 1, 0), ""),
            LLVMConstInt(g->t_i64, 0, 0), "");
        ok = ok ? LLVMBuildAnd(b, ok, al, "") : al;
    }
    if (!ok) return NULL;
    return LLVMBuildAnd(
        b, ok, LLVMBuildICmp(b, LLVMIntSGE, bytes, LLVMConstInt(g->t_i64, NT_MIN_BYTES, 0), ""),
        "use.nt");
}

/* The SIMD loop's [lo, vhi) as a blocked scan (see scan_plan) */
static void
gen_scan_blocks(Gen *g, const KStmt *s, LLVMValueRef lo, LLVMValueRef vhi)
{
    LLVMBuilderRef b = g->b;
    const KStmt *t = s->body[g->scan_at];
    LLVMValueRef use_nt = scan_nt_guard(g);
    LLVMValueRef bw = LLVMConstInt(g->t_i64, (unsigned long long)(g->scan_vecs * g->simd_w), 0);
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "scan.block");
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "scan.block.exit");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, lo, vhi, ""), body, exit);
    LLVMPositionBuilderAtEnd(b, body);
    LLVMValueRef blo = LLVMBuildPhi(b, g->t_i64, "block");
    LLVMValueRef next = LLVMBuildNSWAdd(b, blo, bw, "");
    LLVMValueRef bhi =
        LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, next, vhi, ""), next, vhi, "block.end");
    scan_segment(g, s, s->body, g->scan_at, blo, bhi, false, true);
    if (use_nt) {
        LLVMBasicBlockRef bb_nt = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "scan.nt");
        LLVMBasicBlockRef bb_c = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "scan.cached");
        LLVMBasicBlockRef bb_j = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "scan.post");
        LLVMBuildCondBr(b, use_nt, bb_nt, bb_c);
        LLVMPositionBuilderAtEnd(b, bb_nt);
        scan_steps(g, s, t, blo, bhi, true);
        LLVMBuildBr(b, bb_j);
        LLVMPositionBuilderAtEnd(b, bb_c);
        scan_steps(g, s, t, blo, bhi, false);
        LLVMBuildBr(b, bb_j);
        LLVMPositionBuilderAtEnd(b, bb_j);
    } else {
        scan_steps(g, s, t, blo, bhi, false);
    }
    scan_segment(g, s, s->body + g->scan_at + 1, s->nbody - g->scan_at - 1, blo, bhi, true, false);
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(b);
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, next, vhi, ""), body, exit);
    LLVMAddIncoming(blo, (LLVMValueRef[]){lo, next}, (LLVMBasicBlockRef[]){pre, latch}, 2);
    LLVMPositionBuilderAtEnd(b, exit);
    /* non-temporal stores are weakly ordered: done before the chunk reports it is */
    if (use_nt) LLVMBuildFence(b, LLVMAtomicOrderingSequentiallyConsistent, 0, "");
}

/* The range loop's first (hi - lo) - (hi - lo) % simd_w iterations, simd_w at a time; returns
 * where the scalar loop takes over. */
static LLVMValueRef
gen_simd_loop(Gen *g, const KStmt *s, LLVMValueRef lo, LLVMValueRef hi)
{
    LLVMBuilderRef b = g->b;
    LLVMValueRef w = LLVMConstInt(g->t_i64, (unsigned long long)g->simd_w, 0);
    LLVMValueRef n = LLVMBuildSub(b, hi, lo, "");
    /* lanes start at a multiple of simd_w (vexpr's aligned rules need it; the thread pool cuts
     * chunks there): a chunk that does not runs whole on the scalar loop */
    LLVMValueRef is_al =
        LLVMBuildICmp(b, LLVMIntEQ, LLVMBuildSRem(b, lo, w, ""), LLVMConstInt(g->t_i64, 0, 0), "");
    LLVMValueRef vhi = LLVMBuildSelect(
        b, is_al, LLVMBuildSub(b, hi, LLVMBuildSRem(b, n, w, ""), ""), lo, "simd.end");
    LLVMValueRef lanes[SIMD_MAX];
    for (int l = 0; l < g->simd_w; l++)
        lanes[l] = LLVMConstInt(g->t_i64, (unsigned long long)l, 0);
    g->iota = LLVMConstVector(lanes, (unsigned)g->simd_w);
    g->simd_var = s->var;
    g->mask = NULL;
    if (g->scan_at >= 0) {
        g->parallel_depth++;
        gen_scan_blocks(g, s, lo, vhi);
        g->parallel_depth--;
        g->simd_var = -1;
        return vhi;
    }
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "simd.body");
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "simd.exit");
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, lo, vhi, ""), body, exit);
    LLVMPositionBuilderAtEnd(b, body);
    LLVMValueRef phi = LLVMBuildPhi(b, g->t_i64, "i.simd");
    g->simd_var = s->var;
    g->simd_base = phi;
    g->mask = NULL;
    LLVMBuildStore(b, phi, g->local[s->var]); /* linear: its base */
    g->parallel_depth++;
    vstmts(g, s->body, s->nbody);
    g->parallel_depth--;
    g->simd_var = -1;
    LLVMValueRef next = LLVMBuildNSWAdd(b, phi, w, "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(b);
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, next, vhi, ""), body, exit);
    LLVMAddIncoming(phi, (LLVMValueRef[]){lo, next}, (LLVMBasicBlockRef[]){pre, latch}, 2);
    LLVMPositionBuilderAtEnd(b, exit);
    return vhi;
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

/* used[b] for the buffers statements s read (expressions' loads), and with is_all also those
 * their statements store to or tile through */
static void
mark_stmts(KStmt *const *s, int n, bool *used, int nbufs, bool is_all)
{
    for (int i = 0; i < n; i++) {
        if (!s[i]) continue;
        bool has_buf = s[i]->kind == KS_STORE || s[i]->kind == KS_VLOAD || s[i]->kind == KS_VFMA ||
                       s[i]->kind == KS_VSTORE || s[i]->kind == KS_PREFETCH;
        if (is_all && has_buf && s[i]->buf >= 0 && s[i]->buf < nbufs) used[s[i]->buf] = true;
        mark_expr(s[i]->lo, used, nbufs);
        mark_expr(s[i]->hi, used, nbufs);
        mark_expr(s[i]->index, used, nbufs);
        mark_expr(s[i]->a, used, nbufs);
        mark_stmts(s[i]->body, s[i]->nbody, used, nbufs, is_all);
        mark_stmts(s[i]->els, s[i]->nels, used, nbufs, is_all);
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
        case KS_COUNT:
        case KS_PREFETCH:
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

/* stores of s to buffers that may bypass the caches: whole elements of 4 or 8 bytes, in an output
 * or a temporary the kernel never reads */
static void
mark_nt(const Gen *g, KStmt *const *s, int n, const bool *loaded, bool *nt)
{
    for (int i = 0; i < n; i++) {
        if (!s[i]) continue;
        int bf = s[i]->buf;
        if (s[i]->kind == KS_STORE && bf >= 0 && bf < g->p->nbufs && !loaded[bf]) {
            const KBuf *kb = &g->p->bufs[bf];
            int es = llvm_gen_elem_size(kb->type);
            if ((kb->kind == KB_OUTPUT || kb->kind == KB_TEMP) && !ktype_bits(kb->type) &&
                (es == 4 || es == 8))
                nt[bf] = true;
        }
        mark_nt(g, s[i]->body, s[i]->nbody, loaded, nt);
        mark_nt(g, s[i]->els, s[i]->nels, loaded, nt);
    }
}

/* a blocked scan's slots (entry allocas of scan_vecs values of each carried local, in its
 * lanes' shape) and the buffers its steps may store non-temporally */
static void
scan_slots(Gen *g, const KStmt *loop, const bool *used)
{
    const Kernel *k = g->k;
    int64_t per_vec = 0;
    for (int v = 0; v < k->nlocals; v++)
        if (g->carried[v] && g->local[v])
            per_vec += g->lshape[v] == PS_VAR
                           ? g->simd_w * (int64_t)llvm_gen_elem_size(k->locals[v].type)
                           : 8;
    g->scan_vecs = SCAN_VECS;
    while (g->scan_vecs > 16 && g->scan_vecs * per_vec > SCAN_SLOT_BYTES)
        g->scan_vecs /= 2;
    for (int v = 0; v < k->nlocals; v++) {
        if (!g->carried[v] || !g->local[v]) continue;
        LLVMTypeRef et = g->lshape[v] == PS_VAR ? LLVMGetAllocatedType(g->vlocal[v])
                                                : LLVMGetAllocatedType(g->local[v]);
        g->slot[v] = LLVMBuildAlloca(g->b, LLVMArrayType(et, (unsigned)g->scan_vecs), "slot");
    }
    bool *loaded = xcalloc((size_t)g->p->nbufs + 1, 1);
    mark_stmts(k->body, k->nbody, loaded, g->p->nbufs, false);
    const KStmt *t = loop->body[g->scan_at];
    mark_nt(g, t->body, t->nbody, loaded, g->nt_buf);
    for (int i = 0; i < g->p->nbufs; i++)
        if (!used[i]) g->nt_buf[i] = false;
    free(loaded);
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
    mark_stmts(k->body, k->nbody, used, p->nbufs, true);
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
    g->simd_w = 8;
    g->lshape = range_loop ? simd_plan(k, range_loop, g->has512 ? 16 : 8, &g->simd_w) : NULL;
    g->vlocal = xcalloc((size_t)k->nlocals + 1, sizeof *g->vlocal);
    g->simd_var = -1;
    g->mask = NULL;
    g->carried = xcalloc((size_t)k->nlocals + 1, sizeof *g->carried);
    g->slot = xcalloc((size_t)k->nlocals + 1, sizeof *g->slot);
    g->nt_buf = xcalloc((size_t)p->nbufs + 1, sizeof *g->nt_buf);
    g->scan_at = range_loop ? scan_plan(k, range_loop, g->lshape, g->carried) : -1;
    for (int i = 0; g->lshape && i < k->nlocals; i++)
        if (g->lshape[i] == PS_VAR) {
            LLVMTypeRef vt = lanes_of(g, val_type(g, k->locals[i].type));
            g->vlocal[i] = LLVMBuildAlloca(g->b, vt, k->locals[i].name ? k->locals[i].name : "");
            LLVMBuildStore(g->b, LLVMConstNull(vt), g->vlocal[i]);
        }
    for (int i = 0; i < k->nlocals; i++) {
        if (k->locals[i].lanes > 0) {
            int maxw = tile_piece_width(g, k->locals[i].type);
            int len[MAX_PIECES], npieces = tile_pieces(k->locals[i].lanes, maxw, NULL, NULL);
            if ((k->locals[i].type != KT_F64 && k->locals[i].type != KT_F32) ||
                npieces > MAX_PIECES) {
                gen_fail(g, "kernel %s: tile %s of %d %s lanes", k->name, k->locals[i].name,
                         k->locals[i].lanes, ktype_name(k->locals[i].type));
                continue;
            }
            tile_pieces(k->locals[i].lanes, maxw, NULL, len);
            g->tile[i] = xcalloc((size_t)npieces, sizeof **g->tile);
            const char *tn = k->locals[i].name ? k->locals[i].name : "";
            for (int j = 0; j < npieces; j++) {
                LLVMTypeRef ty = piece_type(g, val_type(g, k->locals[i].type), len[j]);
                g->tile[i][j] = LLVMBuildAlloca(g->b, ty, tn);
                LLVMBuildStore(g->b, LLVMConstNull(ty), g->tile[i][j]);
            }
            continue;
        }
        LLVMTypeRef lt = val_type(g, k->locals[i].type);
        g->local[i] = LLVMBuildAlloca(g->b, lt, k->locals[i].name ? k->locals[i].name : "");
        LLVMBuildStore(g->b, LLVMConstNull(lt), g->local[i]);
    }
    if (g->scan_at >= 0) scan_slots(g, range_loop, used);
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
    LLVMValueRef *args = xcalloc((size_t)(np + nscalar), sizeof *args);
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
    free(g->lshape);
    free(g->vlocal);
    free(g->carried);
    free(g->slot);
    free(g->nt_buf);
    g->carried = NULL;
    g->slot = NULL;
    g->nt_buf = NULL;
    g->scan_at = -1;
    g->lshape = NULL;
    g->vlocal = NULL;
    g->bufptr = g->local = g->loopval = NULL;
    g->tile = NULL;
    return w;
}

/* rt->parallel_for(rt, chunk, args[0..5]) where args are a chunk's (bufs, B, t, sample_base, lo,
 * hi) */
static void
call_parallel_for(Gen *g, LLVMValueRef rt, LLVMValueRef chunk, const LLVMValueRef *args)
{
    /* rt points at an LlvmRt, whose first member is parallel_for (casts: typed pointers, LLVM 14) */
    LLVMValueRef slot = LLVMBuildBitCast(g->b, rt, LLVMPointerType(g->t_i8p, 0), "");
    LLVMValueRef par = LLVMBuildBitCast(g->b, LLVMBuildLoad2(g->b, g->t_i8p, slot, ""),
                                        LLVMPointerType(g->t_par, 0), "parallel_for");
    LLVMValueRef pargs[8] = {rt, chunk, args[0], args[1], args[2], args[3], args[4], args[5]};
    LLVMBuildCall2(g->b, g->t_par, par, pargs, 8, "");
}

/* whether a statement of s stores into a bit-packed buffer (KT_BIT, KT_BIT2) */
static bool
stores_bits(const KProgram *p, KStmt *const *s, int n)
{
    for (int i = 0; i < n; i++) {
        if (!s[i]) continue;
        if (s[i]->buf >= 0 && s[i]->buf < p->nbufs && ktype_bits(p->bufs[s[i]->buf].type))
            return true;
        if (stores_bits(p, s[i]->body, s[i]->nbody) || stores_bits(p, s[i]->els, s[i]->nels))
            return true;
    }
    return false;
}

/* The pool cuts a range at multiples of SNNK_CHUNK_ALIGN (16) from its start (runtime/pool.c),
 * which a loop in SIMD lanes and a kernel storing bits need (aligned vectors; no byte of bits
 * shared by two threads). Any other threaded loop is handed over in sixteenths of an iteration,
 * through kernel_N.parts(..., 16*lo, 16*hi) calling the chunk over [lo, hi): the cuts then fall
 * on any iteration, so a range under 32 still feeds two threads (a layer's 4 row blocks or 8 tiles
 * at batch 1 went to one thread, the other idle: the conv SNN's f3 ran 7.4 ms an image; with cuts
 * in eighths, ranges of 2 and 3 iterations went to one thread once the pool cut at multiples of
 * 16). The chunks compute what they did; only which thread runs which iterations changes. */
static bool
cuts_anywhere(const KProgram *p, const Kernel *k, const KStmt *loop)
{
    return !loop->is_lanes && !stores_bits(p, k->body, k->nbody);
}

static LLVMValueRef
gen_parts(Gen *g, int ki, LLVMValueRef chunk)
{
    char name[64];
    snprintf(name, sizeof name, "kernel_%d.parts", ki);
    LLVMValueRef f = LLVMAddFunction(g->mod, name, g->t_chunk);
    LLVMSetLinkage(f, LLVMInternalLinkage);
    LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, g->a_nounwind);
    LLVMPositionBuilderAtEnd(g->b, LLVMAppendBasicBlockInContext(g->ctx, f, "entry"));
    LLVMValueRef n = LLVMConstInt(g->t_i64, SNNK_CHUNK_ALIGN, 0);
    LLVMValueRef args[6] = {LLVMGetParam(f, 0),
                            LLVMGetParam(f, 1),
                            LLVMGetParam(f, 2),
                            LLVMGetParam(f, 3),
                            LLVMBuildExactSDiv(g->b, LLVMGetParam(f, 4), n, ""),
                            LLVMBuildExactSDiv(g->b, LLVMGetParam(f, 5), n, "")};
    LLVMBuildCall2(g->b, g->t_chunk, chunk, args, 6, "");
    LLVMBuildRetVoid(g->b);
    return f;
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
    g->chunks[ki] = chunk;
    LLVMValueRef parts = cuts_anywhere(g->p, k, loop) ? gen_parts(g, ki, chunk) : NULL;

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
    if (parts) {
        LLVMValueRef n = LLVMConstInt(g->t_i64, SNNK_CHUNK_ALIGN, 0);
        cargs[4] = LLVMBuildNSWMul(g->b, lo, n, "");
        cargs[5] = LLVMBuildNSWMul(g->b, hi, n, "");
    }
    call_parallel_for(g, rt, parts ? parts : chunk, cargs);
    LLVMBuildRetVoid(g->b);
    return w;
}

/* the end of a loop over t in 0..T whose body is the block body (t its phi, entered from pre):
 * t + 1 < T ? body : exit, and the builder at exit */
static void
close_step_loop(Gen *g, LLVMValueRef t, LLVMBasicBlockRef pre, LLVMBasicBlockRef body,
                LLVMBasicBlockRef exit)
{
    LLVMBuilderRef b = g->b;
    LLVMValueRef next = LLVMBuildNSWAdd(b, t, LLVMConstInt(g->t_i64, 1, 0), "");
    LLVMValueRef steps = LLVMConstInt(g->t_i64, (unsigned long long)g->p->timesteps, 0);
    LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntSLT, next, steps, ""), body, exit);
    LLVMAddIncoming(t, (LLVMValueRef[]){LLVMConstInt(g->t_i64, 0, 0), next},
                    (LLVMBasicBlockRef[]){pre, body}, 2);
    LLVMPositionBuilderAtEnd(b, exit);
}

/* the pool cuts sample ranges at multiples of SNNK_CHUNK_ALIGN: below twice that one thread would
 * take them all */
enum { BY_SAMPLE_MIN_BATCH = 2 * SNNK_CHUNK_ALIGN };

/* ---- a step loop run sample by sample (kir_by_sample) ----
 * steps_N.chunk(bufs, B, t, sample_base, s0, s1) runs samples [s0, s1) through every step: at each
 * t, every kernel's chunk over its iterations of those samples. The driver hands it to the pool
 * once, instead of each kernel at each step: one wake-up and barrier per run instead of T per
 * kernel, and each thread's samples stay in its caches from step to step. The chunks compute
 * what they would step by step (each iteration only touches its own sample), so results do not
 * change. */
static LLVMValueRef
gen_steps_chunk(Gen *g, int first, int end)
{
    const KProgram *p = g->p;
    char name[64];
    snprintf(name, sizeof name, "steps_%d.chunk", first);
    LLVMValueRef f = LLVMAddFunction(g->mod, name, g->t_chunk);
    LLVMSetLinkage(f, LLVMInternalLinkage);
    LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, g->a_nounwind);
    LLVMBuilderRef b = g->b;
    LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(g->ctx, f, "entry");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->ctx, f, "step");
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(g->ctx, f, "exit");
    LLVMPositionBuilderAtEnd(b, entry);
    LLVMBuildBr(b, body);
    LLVMPositionBuilderAtEnd(b, body);
    LLVMValueRef t = LLVMBuildPhi(b, g->t_i64, "t");
    LLVMValueRef s0 = LLVMGetParam(f, 4), s1 = LLVMGetParam(f, 5);
    for (int q = first; q < end; q++) {
        LLVMValueRef a = LLVMConstInt(g->t_i64, (unsigned long long)p->kernels[q].sample_iters, 0);
        LLVMValueRef args[6] = {LLVMGetParam(f, 0), LLVMGetParam(f, 1), t, LLVMGetParam(f, 3),
                                LLVMBuildNSWMul(b, s0, a, ""), LLVMBuildNSWMul(b, s1, a, "")};
        LLVMBuildCall2(b, g->t_chunk, g->chunks[q], args, 6, "");
    }
    close_step_loop(g, t, entry, body, exit);
    LLVMBuildRetVoid(b);
    return f;
}

/* the work of one sample through the step loop [first, end), in stmts_cost units */
static double
steps_cost(const Gen *g, int first, int end)
{
    double c = 0;
    for (int q = first; q < end; q++) {
        const Kernel *k = &g->p->kernels[q];
        c += (double)k->sample_iters * stmts_cost(k, k->body[0]->body, k->body[0]->nbody);
    }
    return c * g->p->timesteps;
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
        bool by_sample = p->timesteps > 0 && kir_by_sample(p, i, j);
        for (int q = i; by_sample && q < j; q++)
            by_sample = g->chunks[q] != NULL;
        LLVMBasicBlockRef next_bb = NULL;
        if (by_sample) {
            LLVMBasicBlockRef here = LLVMGetInsertBlock(b);
            LLVMValueRef chunk = gen_steps_chunk(g, i, j);
            LLVMPositionBuilderAtEnd(b, here);
            /* too little work for the pool (as gen_kernel): every sample on this thread; too few
             * samples for the pool's blocks of 8 to feed two threads: step by step, where each
             * kernel's elements are split among the threads (a layer of 2^20 neurons at batch 1
             * ran 11 → 16 ms by sample) */
            double cost = steps_cost(g, i, j);
            int64_t min_b = (int64_t)(PARALLEL_MIN_WORK / (cost > 1 ? cost : 1)) + 1;
            LLVMBasicBlockRef inline_bb = LLVMAppendBasicBlockInContext(g->ctx, f, "steps.inline");
            LLVMBasicBlockRef test_bb = LLVMAppendBasicBlockInContext(g->ctx, f, "steps.test");
            LLVMBasicBlockRef pool_bb = LLVMAppendBasicBlockInContext(g->ctx, f, "steps.pool");
            LLVMBasicBlockRef bystep_bb = LLVMAppendBasicBlockInContext(g->ctx, f, "steps.bystep");
            next_bb = LLVMAppendBasicBlockInContext(g->ctx, f, "steps.done");
            LLVMBuildCondBr(b,
                            LLVMBuildICmp(b, LLVMIntSLT, batch,
                                          LLVMConstInt(g->t_i64, (unsigned long long)min_b, 0),
                                          ""),
                            inline_bb, test_bb);
            LLVMValueRef args[6] = {bufs, batch, LLVMConstInt(g->t_i64, 0, 0), sb,
                                    LLVMConstInt(g->t_i64, 0, 0), batch};
            LLVMPositionBuilderAtEnd(b, inline_bb);
            LLVMBuildCall2(b, g->t_chunk, chunk, args, 6, "");
            LLVMBuildBr(b, next_bb);
            LLVMPositionBuilderAtEnd(b, test_bb);
            LLVMBuildCondBr(b,
                            LLVMBuildICmp(b, LLVMIntSLT, batch,
                                          LLVMConstInt(g->t_i64, BY_SAMPLE_MIN_BATCH, 0), ""),
                            bystep_bb, pool_bb);
            LLVMPositionBuilderAtEnd(b, pool_bb);
            call_parallel_for(g, rt, chunk, args);
            LLVMBuildBr(b, next_bb);
            LLVMPositionBuilderAtEnd(b, bystep_bb);
        }
        if (p->timesteps > 0) {
            LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
            LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->ctx, f, "step");
            LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(g->ctx, f, "step.exit");
            LLVMBuildBr(b, body);
            LLVMPositionBuilderAtEnd(b, body);
            LLVMValueRef t = LLVMBuildPhi(b, g->t_i64, "t");
            for (int q = i; q < j; q++)
                LLVMBuildCall2(b, kty, kernels[q], (LLVMValueRef[]){bufs, batch, t, sb, rt}, 5, "");
            close_step_loop(g, t, pre, body, exit);
        }
        if (next_bb) {
            LLVMBuildBr(b, next_bb);
            LLVMPositionBuilderAtEnd(b, next_bb);
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

bool llvm_gen_soft_f16 = false;

/* whether tm's code may use F16C (vcvtph2ps): its feature string says so (the host's does), or its
 * CPU is one of those that have it */
static bool
has_f16c(LLVMTargetMachineRef tm)
{
    static const char *const cpus[] = {"x86-64-v3", "x86-64-v4", "znver", "haswell", "broadwell",
                                       "skylake", "cascadelake", "cooperlake", "icelake",
                                       "tigerlake", "sapphirerapids", "alderlake", "raptorlake",
                                       "meteorlake", "graniterapids", "emeraldrapids", "ivybridge"};
    if (!tm) return false;
    char *features = LLVMGetTargetMachineFeatureString(tm);
    char *cpu = LLVMGetTargetMachineCPU(tm);
    bool has = features && strstr(features, "+f16c") != NULL;
    for (size_t i = 0; !has && cpu && i < sizeof cpus / sizeof cpus[0]; i++)
        has = strncmp(cpu, cpus[i], strlen(cpus[i])) == 0;
    LLVMDisposeMessage(features);
    LLVMDisposeMessage(cpu);
    return has;
}

/* whether code for an LLVM feature string (disposed here) may use AVX-512: the string says so
 * and SNN_VEC512=0 does not say otherwise */
static bool
avx512_in(char *features)
{
    const char *env = getenv("SNN_VEC512");
    bool has = !(env && strcmp(env, "0") == 0) && features && strstr(features, "+avx512f");
    LLVMDisposeMessage(features);
    return has;
}

/* llvm_gen.h */
bool
llvm_gen_has_avx512(LLVMTargetMachineRef tm)
{
    return tm && avx512_in(LLVMGetTargetMachineFeatureString(tm));
}

LLVMModuleRef
llvm_gen_module(const KProgram *p, LLVMContextRef ctx, LLVMTargetMachineRef tm, char *err,
                size_t errlen)
{
    Gen g = {0};
    g.p = p;
    g.has_f16c = has_f16c(tm) && !llvm_gen_soft_f16;
    g.has512 = llvm_gen_has_avx512(tm);
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
    g.md_nontemporal = LLVMGetMDKindIDInContext(ctx, "nontemporal", 11);
    g.scan_at = -1;
    g.access_group = distinct_empty_node(ctx);

    LLVMValueRef *kernels = xcalloc((size_t)p->nkernels + 1, sizeof *kernels);
    g.chunks = xcalloc((size_t)p->nkernels + 1, sizeof *g.chunks);
    for (int i = 0; i < p->nkernels && !g.has_failed; i++)
        kernels[i] = gen_kernel(&g, i);
    if (!g.has_failed) gen_driver(&g, kernels);
    free(kernels);
    free(g.chunks);
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

/* the lanes of code for this machine */
static int
host_simd_w(void)
{
    return avx512_in(LLVMGetHostCPUFeatures()) ? 16 : 8;
}

/* cg_llvm.h */
int
cg_llvm_simd_lanes(const Kernel *k)
{
    int w;
    unsigned char *shape = simd_plan(k, threaded_loop(k), host_simd_w(), &w);
    free(shape);
    return shape ? w : 0;
}

