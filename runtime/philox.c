/* philox.c: host-side helpers around the inline Philox4x32-10 in philox.h: bulk uniform fills and a
 * known-answer self test that drivers can run before trusting a backend.
 * Must not define its own variant of the generator: everything goes through rt_philox4x32_10 and
 * rt_uniform so host and kernels stay bit-identical. */
#include "runtime/philox.h"

/* out[i] = rt_uniform(seed, stream, step, first + i) for i in [0, n) */
void
rt_uniform_fill(uint64_t seed, uint32_t stream, uint32_t step, uint64_t first, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = rt_uniform(seed, stream, step, first + (uint64_t)i);
}

/* Returns 0 when the published Random123 known-answer vectors for philox4x32_10 reproduce, else the
 * 1-based number of the first vector that failed. */
int
rt_philox_selftest(void)
{
    static const uint32_t kat[3][10] = {
        /* ctr[4], key[2], expected[4] (Random123 kat_vectors) */
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        rt_philox4x32_10(&kat[i][0], &kat[i][4], out);
        for (int j = 0; j < 4; j++)
            if (out[j] != kat[i][6 + j]) return i + 1;
    }
    return 0;
}
