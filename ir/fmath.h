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

#endif
