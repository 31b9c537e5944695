/* fmath.h: what a float32 transcendental function computes in snnc, on every backend: the double
 * function of the float operands, rounded once to float. That is the correctly rounded result
 * except where the double result lies within a few double ulps of a float rounding boundary (about
 * one operand in 2^28), so the C library here, CUDA's double functions on a GPU and any other
 * faithful double library give the same float. The C library's own float functions (expf, tanhf)
 * are not that: glibc's tanhf is off by one ulp for some operands, CUDA's expf by up to two.
 * The interpreter (ir/nexpr.c), the kernel-IR evaluator, the LLVM code and the CUDA C all compute
 * these; the sigmoid is 1.0f / (1.0f + f32_exp(-x)) in float arithmetic. */
#ifndef SNN_IR_FMATH_H
#define SNN_IR_FMATH_H

#include <math.h>

static inline float f32_exp(float x) { return (float)exp((double)x); }
static inline float f32_log(float x) { return (float)log((double)x); }
static inline float f32_tanh(float x) { return (float)tanh((double)x); }
static inline float f32_pow(float x, float y) { return (float)pow((double)x, (double)y); }
static inline float f32_sigmoid(float x) { return 1.0f / (1.0f + f32_exp(-x)); }

/* f32_exp without the C library, in operations a vector unit has: x clamped to [-104, 89] (outside,
 * the float result is 0 or inf either way), x = k ln2 + r (ln2 in two parts, fma), e^r by its
 * Taylor series to r^13 (|r| <= ln2/2: truncation under 2^-58) in Horner form with fma, times 2^k
 * built in the exponent bits, rounded to float. For every one of the 2^32 floats except NaNs
 * (NaN in, NaN out) it gives f32_exp's bits: test_fmath checks a sample, and all of them with
 * SNN_EXP_CHECK_ALL=1. (Estrin's form, a chain of 4 fma for Horner's 13, gives every float's bits
 * too; it measured no faster in the LIF backward, which its instructions bound, not this chain.)
 * The CPU code generator emits these operations for an f32 exp, in SIMD lanes, instead of one
 * libm call per lane. */
#define F32_EXP_LOG2E 1.4426950408889634
#define F32_EXP_LN2HI 0x1.62e42fefa39efp-1
#define F32_EXP_LN2LO 0x1.abc9e3b39803fp-56
/* the Taylor coefficients, highest first: 1/13!, 1/12!, ..., 1/2!, 1, 1 */
#define F32_EXP_COEFFS                                                                             \
    1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,      \
        1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0,    \
        1.0
static inline float
f32_exp_poly(float x)
{
    if (x != x) return x;
    static const double c[] = {F32_EXP_COEFFS};
    double xc = fmin(fmax((double)x, -104.0), 89.0);
    double k = rint(xc * F32_EXP_LOG2E);
    double r = fma(-k, F32_EXP_LN2HI, xc);
    r = fma(-k, F32_EXP_LN2LO, r);
    double p = c[0];
    for (int i = 1; i < (int)(sizeof c / sizeof c[0]); i++)
        p = fma(p, r, c[i]);
    union {
        unsigned long long u;
        double d;
    } s = {(unsigned long long)((long long)k + 1023) << 52};
    return (float)(p * s.d);
}

#endif
