/* f16.h: IEEE binary16 and bfloat16 <-> binary32 conversions, as static inline functions.
 * Narrowing rounds to nearest, ties to even, like numpy and torch; NaN stays NaN (quiet), overflow
 * becomes infinity. Widening is exact. Header-only and free of libm and of host-only calls, so the
 * same code can be compiled into kernels; it must not depend on the C library beyond memcpy. */
#ifndef SNN_RUNTIME_F16_H
#define SNN_RUNTIME_F16_H

#include <stdint.h>
#include <string.h>

static inline uint32_t
rt_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float
rt_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float
rt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;

    if (exp == 0x1fu) /* inf or NaN; keep the payload */
        return rt_bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp != 0) return rt_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0) return rt_bits_f32(sign);
    /* subnormal: value is man * 2^-24, exactly representable as a normal float */
    exp = 113u;
    while (!(man & 0x400u)) {
        man <<= 1;
        exp--;
    }
    return rt_bits_f32(sign | (exp << 23) | ((man & 0x3ffu) << 13));
}

static inline uint16_t
rt_f32_to_f16(float f)
{
    uint32_t u = rt_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t exp = (u >> 23) & 0xffu;
    uint32_t man = u & 0x7fffffu;

    if (exp == 0xffu) { /* inf or NaN; NaN stays quiet NaN with the top payload bits */
        if (man == 0) return (uint16_t)(sign | 0x7c00u);
        return (uint16_t)(sign | 0x7e00u | (man >> 13));
    }
    int e = (int)exp - 127 + 15;
    if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        /* result is subnormal or zero: shift the full significand (with hidden bit) right */
        if (e < -10) return sign; /* below half the smallest subnormal, rounds to zero */
        uint32_t m = man | 0x800000u;
        int shift = 14 - e; /* 14..24 */
        uint32_t half = 1u << (shift - 1);
        uint32_t rest = m & ((1u << shift) - 1u);
        uint32_t r = m >> shift;
        if (rest > half || (rest == half && (r & 1u)))
            r++; /* may carry into the exponent field, which is the correct result */
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (r & 1u)))
        r++; /* a carry out of the mantissa bumps the exponent; 0x7bff+1 becomes inf */
    return (uint16_t)(sign | r);
}

static inline float
rt_bf16_to_f32(uint16_t b)
{
    return rt_bits_f32((uint32_t)b << 16);
}

static inline uint16_t
rt_f32_to_bf16(float f)
{
    uint32_t u = rt_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: c10::BFloat16's canonical quiet NaN */
        return 0x7fc0u;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#endif
