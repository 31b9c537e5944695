/* The arithmetic of neuron equations, in one place: what each operator and function computes in double
 * and in float32, and the folding of parameter-only expressions (done once, in double, like Python
 * scalars in PyTorch). The interpreter and the kernel-IR lowering both use these, so they cannot drift. */
#include "ir/ir.h"
#include "ir/fmath.h"

#include <math.h>

/* NaN-propagating min and max, like torch.minimum/maximum and torch.clamp */
static double
min_nan(double a, double b)
{
    return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
}

static double
max_nan(double a, double b)
{
    return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
}

/* One binary operation. With is_f32 the arithmetic result is rounded to float: exact for + - * / on
 * float operands computed in double. Comparisons and logic give 1.0 or 0.0. */
double
nexpr_apply_bin(NxBin op, double a, double b, bool is_f32)
{
    double r;
    switch (op) {
    case NB_ADD: r = a + b; break;
    case NB_SUB: r = a - b; break;
    case NB_MUL: r = a * b; break;
    case NB_DIV: r = a / b; break;
    case NB_LT: return a < b;
    case NB_LE: return a <= b;
    case NB_GT: return a > b;
    case NB_GE: return a >= b;
    case NB_EQ: return a == b;
    case NB_NE: return a != b;
    case NB_AND: return a != 0 && b != 0;
    case NB_OR: return a != 0 || b != 0;
    default: unreachable();
    }
    return is_f32 ? (double)(float)r : r;
}

/* One call over nfuncs.def. With is_f32 the transcendental functions are ir/fmath.h's (the double
 * function rounded once) on float arguments, and sqrt is rounded once (exact); the others return an
 * operand or an integer. */
double
nexpr_apply_call(NFunc f, const double *a, bool is_f32)
{
    switch (f) {
    case NF_EXP: return is_f32 ? (double)f32_exp((float)a[0]) : exp(a[0]);
    case NF_LOG: return is_f32 ? (double)f32_log((float)a[0]) : log(a[0]);
    case NF_SQRT: return is_f32 ? (double)(float)sqrt(a[0]) : sqrt(a[0]);
    case NF_TANH: return is_f32 ? (double)f32_tanh((float)a[0]) : tanh(a[0]);
    case NF_SIGMOID:
        if (is_f32) return (double)f32_sigmoid((float)a[0]);
        return 1.0 / (1.0 + exp(-a[0]));
    case NF_ABS: return fabs(a[0]);
    case NF_FLOOR: return floor(a[0]);
    case NF_MIN: return min_nan(a[0], a[1]);
    case NF_MAX: return max_nan(a[0], a[1]);
    case NF_POW: return is_f32 ? (double)f32_pow((float)a[0], (float)a[1]) : pow(a[0], a[1]);
    case NF_CLAMP: return min_nan(max_nan(a[0], a[1]), a[2]);
    case NF_SELECT: return a[0] != 0 ? a[1] : a[2];
    case NF_FLOAT32: return (double)(float)a[0];
    default: unreachable();
    }
}

/* operands by kind (not e->nargs, so hand-built expressions need not set it) */
int
nexpr_arity(const NExpr *e)
{
    switch (e->kind) {
    case NX_NEG:
    case NX_NOT: return 1;
    case NX_BIN: return 2;
    case NX_COND: return 3;
    case NX_CALL: return nfunc_arity((NFunc)e->op);
    default: return 0;
    }
}

/* A parameter-only expression in double (the caller rounds it once in F32 mode). */
double
nexpr_fold(const NExpr *e, const double *params)
{
    double a[3];
    switch (e->kind) {
    case NX_NUM: return e->num;
    case NX_PARAM: return params[e->idx];
    case NX_NEG: return -nexpr_fold(e->args[0], params);
    case NX_NOT: return nexpr_fold(e->args[0], params) == 0;
    case NX_BIN:
        return nexpr_apply_bin((NxBin)e->op, nexpr_fold(e->args[0], params), nexpr_fold(e->args[1], params), false);
    case NX_COND:
        return nexpr_fold(e->args[0], params) != 0 ? nexpr_fold(e->args[1], params) : nexpr_fold(e->args[2], params);
    case NX_CALL:
        for (int i = 0; i < nexpr_arity(e); i++)
            a[i] = nexpr_fold(e->args[i], params);
        return nexpr_apply_call((NFunc)e->op, a, false);
    case NX_STATE:
    case NX_LOCAL:
    case NX_INPUT:
    case NX_SPIKE: break;
    }
    die("neuron expression of kind %d is not parameter-only", (int)e->kind);
}
