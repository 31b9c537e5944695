/* test_fmath.c: f32_exp_poly (ir/fmath.h: the f32 exp the CPU code generator emits in SIMD lanes)
 * gives f32_exp's bits, (float)exp((double)x) of the C library, for every float but NaN (NaN
 * gives NaN). By default every 251st of the 2^32 bit patterns, every float of [1, 2] and
 * [-2, -1], and of the ends of the range, [-104, -87] and [88, 89], where results are subnormal or
 * near overflow (about 30 million floats, a few seconds); SNN_EXP_CHECK_ALL=1 checks all 2^32
 * (about a minute and a half on one core: done when f32_exp_poly changed, 0 differ). */
#include "ir/fmath.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/check.h"

static int64_t nchecked, nbad, nnan_bad;

static void
check_bits(uint32_t b)
{
    float x;
    memcpy(&x, &b, 4);
    float got = f32_exp_poly(x);
    if (x != x) {
        nnan_bad += got == got;
        return;
    }
    float want = f32_exp(x);
    nchecked++;
    if (memcmp(&got, &want, 4) != 0) {
        if (nbad++ < 10)
            fprintf(stderr, "exp(%a): f32_exp_poly %a, f32_exp %a\n", (double)x, (double)got,
                    (double)want);
    }
}

static void
check_range(float lo, float hi)
{
    for (float x = lo; x <= hi; x = nextafterf(x, INFINITY)) {
        uint32_t b;
        memcpy(&b, &x, 4);
        check_bits(b);
    }
}

int
main(void)
{
    const char *all = getenv("SNN_EXP_CHECK_ALL");
    uint64_t stride = all && all[0] == '1' ? 1 : 251;
    for (uint64_t u = 0; u <= 0xffffffffu; u += stride)
        check_bits((uint32_t)u);
    check_range(1.0f, 2.0f);
    check_range(-2.0f, -1.0f);
    check_range(-104.0f, -87.0f);
    check_range(88.0f, 89.0f);
    fprintf(stderr, "f32_exp_poly: %lld floats checked, %lld differ from f32_exp\n",
            (long long)nchecked, (long long)nbad);
    CHECK(nbad == 0);
    CHECK(nnan_bad == 0);
    CHECK(nchecked > 10000000);
    printf("%d passed, %d failed\n", npass, nfail);
    return nfail > 0;
}
