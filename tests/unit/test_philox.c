/* test_philox.c: unit tests for runtime/philox.h: the Random123 known-answer vectors for
 * philox4x32_10, the counter layout of rt_uniform, and coarse statistics of the uniform draws.
 * Must not depend on anything but the header and philox.c (no files, no environment). */
#include "runtime/philox.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/unit/check.h"

/* Random123 kat_vectors, philox4x32 10: counter[4], key[2], expected[4] */
static const uint32_t kat[3][10] = {
    {0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x6627e8d5, 0xe169c58d,
     0xbc57ac4c, 0x9b00dbd8},
    {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e,
     0xa20bc7c6, 0x6d5451fd},
    {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb,
     0x5001e420, 0x24126ea1},
};

static void
test_kat(void)
{
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        rt_philox4x32_10(&kat[i][0], &kat[i][4], out);
        for (int j = 0; j < 4; j++) {
            if (out[j] != kat[i][6 + j])
                fprintf(stderr, "vector %d word %d: got %08x want %08x\n", i, j, (unsigned)out[j],
                        (unsigned)kat[i][6 + j]);
            CHECK(out[j] == kat[i][6 + j]);
        }
    }
    CHECK(rt_philox_selftest() == 0);
}

static void
test_uniform_layout(void)
{
    /* all-zero inputs are the first known-answer vector: out[0] = 0x6627e8d5 */
    CHECK(rt_uniform(0, 0, 0, 0) == (float)(0x6627e8d5u >> 8) / 16777216.0f);

    /* key = {seed lo, seed hi}, ctr = {index lo, index hi, step, stream} */
    uint64_t seed = 0x0123456789abcdefull, index = 0x0000000500000002ull;
    uint32_t stream = 7, step = 11;
    uint32_t ctr[4] = {2, 5, step, stream}, key[2] = {0x89abcdefu, 0x01234567u}, out[4];
    rt_philox4x32_10(ctr, key, out);
    CHECK(rt_uniform(seed, stream, step, index) == (float)(out[0] >> 8) * (1.0f / 16777216.0f));

    /* the pi-digits vector through rt_uniform: ctr {243f6a88, 85a308d3, 13198a2e, 03707344} */
    float u = rt_uniform(0x299f31d0a4093822ull, 0x03707344u, 0x13198a2eu, 0x85a308d3243f6a88ull);
    CHECK(u == (float)(0xd16cfe09u >> 8) / 16777216.0f);

    /* every argument changes the draw */
    float base = rt_uniform(1, 2, 3, 4);
    CHECK(rt_uniform(1, 2, 3, 4) == base);
    CHECK(rt_uniform(2, 2, 3, 4) != base);
    CHECK(rt_uniform(1, 3, 3, 4) != base);
    CHECK(rt_uniform(1, 2, 4, 4) != base);
    CHECK(rt_uniform(1, 2, 3, 5) != base);
    CHECK(rt_uniform(1, 2, 3, 4 + (1ull << 32)) != base);
    CHECK(rt_uniform(1ull << 32 | 1, 2, 3, 4) != base);

    float buf[64];
    rt_uniform_fill(42, 1, 9, 1000, buf, 64);
    int same = 1;
    for (int i = 0; i < 64; i++)
        same &= buf[i] == rt_uniform(42, 1, 9, 1000 + (uint64_t)i);
    CHECK(same);
}

static void
test_statistics(void)
{
    enum { N = 1 << 20, BINS = 16 };
    double sum = 0, sumsq = 0;
    long bins[BINS] = {0};
    float lo = 1, hi = 0;
    for (uint64_t i = 0; i < N; i++) {
        float u = rt_uniform(12345, 0, 0, i);
        sum += u;
        sumsq += (double)u * u;
        if (u < lo) lo = u;
        if (u > hi) hi = u;
        int b = (int)(u * BINS);
        if (b >= 0 && b < BINS) bins[b]++;
    }
    double mean = sum / N, var = sumsq / N - mean * mean;
    CHECK(lo >= 0.0f && hi < 1.0f);
    CHECK(fabs(mean - 0.5) < 0.002);
    CHECK(fabs(var - 1.0 / 12) < 0.001);
    /* chi-square with 15 degrees of freedom: 37.7 is the 0.999 quantile */
    double chi = 0, expect = (double)N / BINS;
    for (int b = 0; b < BINS; b++)
        chi += (bins[b] - expect) * (bins[b] - expect) / expect;
    CHECK(chi < 37.7);

    /* neighbouring streams are uncorrelated */
    double sxy = 0, sx = 0, sy = 0, sxx = 0, syy = 0;
    for (uint64_t i = 0; i < 100000; i++) {
        double x = rt_uniform(7, 0, 3, i), y = rt_uniform(7, 1, 3, i);
        sxy += x * y;
        sx += x;
        sy += y;
        sxx += x * x;
        syy += y * y;
    }
    double n = 100000, r = (n * sxy - sx * sy) / sqrt((n * sxx - sx * sx) * (n * syy - sy * sy));
    CHECK(fabs(r) < 0.02);
}

int
main(void)
{
    test_kat();
    test_uniform_layout();
    test_statistics();
    printf("%d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
