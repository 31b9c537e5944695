/* philox.h: Philox4x32-10 (Salmon et al., SC11; the Random123 algorithm) and the uniform draw every
 * backend must reproduce bit for bit. Static inline, stateless, no library calls: kernels include
 * the same text after defining RT_PHILOX_FN (e.g. `static __device__ inline`) and
 * RT_PHILOX_NO_STDINT. Must not change how (seed, stream, step, index) map to numbers: saved
 * results depend on it. */
#ifndef SNN_RUNTIME_PHILOX_H
#define SNN_RUNTIME_PHILOX_H

#ifndef RT_PHILOX_NO_STDINT
#include <stddef.h>
#include <stdint.h>
#endif

#ifndef RT_PHILOX_FN
#define RT_PHILOX_FN static inline
#endif

#define RT_PHILOX_M0 0xD2511F53u
#define RT_PHILOX_M1 0xCD9E8D57u
#define RT_PHILOX_W0 0x9E3779B9u
#define RT_PHILOX_W1 0xBB67AE85u
#define RT_PHILOX_ROUNDS 10

/* One Philox4x32 round: two 32x32->64 multiplies, then a Feistel-like swap and xor with the key. */
RT_PHILOX_FN void
rt_philox4x32_round(uint32_t c[4], const uint32_t k[2])
{
    uint64_t p0 = (uint64_t)RT_PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)RT_PHILOX_M1 * c[2];
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k[0];
    uint32_t n1 = (uint32_t)p1;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k[1];
    uint32_t n3 = (uint32_t)p0;
    c[0] = n0;
    c[1] = n1;
    c[2] = n2;
    c[3] = n3;
}

/* Philox4x32-10: ten rounds, the key bumped by the Weyl constants between rounds. */
RT_PHILOX_FN void
rt_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int r = 0; r < RT_PHILOX_ROUNDS; r++) {
        if (r > 0) {
            k[0] += RT_PHILOX_W0;
            k[1] += RT_PHILOX_W1;
        }
        rt_philox4x32_round(c, k);
    }
    out[0] = c[0];
    out[1] = c[1];
    out[2] = c[2];
    out[3] = c[3];
}

/* Uniform float in [0, 1): the top 24 bits of the first output word times 2^-24, so every value is
 * exact in float32. key = {seed low, seed high}; ctr = {index low, index high, step, stream}. */
RT_PHILOX_FN float
rt_uniform(uint64_t seed, uint32_t stream, uint32_t step, uint64_t index)
{
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), step, stream};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    rt_philox4x32_10(ctr, key, out);
    return (float)(out[0] >> 8) * (1.0f / 16777216.0f);
}

#ifndef RT_PHILOX_NO_STDINT
/* philox.c: host helpers built on the inline functions above */
void rt_uniform_fill(uint64_t seed, uint32_t stream, uint32_t step, uint64_t first, float *out,
                     size_t n);
int rt_philox_selftest(void);
#endif

#endif
