/* test_opt: the optimiser update (runtime/train.c) vectorised for the host (AVX-512 or AVX2+FMA
 * where the CPU has them) gives the bits of the baseline ISA's code, for SGD (momentum, dampening,
 * Nesterov, weight decay), Adam (L2) and AdamW, over ten steps of gradients that include zeros of
 * both signs, tiny and large values; and a split of the parameters over calls (the threads' chunks)
 * changes nothing. */
#include "runtime/train.h"
#include "tests/unit/check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { N = 1037, STEPS = 10 }; /* not a multiple of any vector width: the loops' tails too */

static uint32_t seed = 2024;

static float
rnd(void)
{
    seed = seed * 1664525u + 1013904223u;
    uint32_t r = seed >> 8;
    switch (r % 11) {
    case 0:
        return 0.0f;
    case 1:
        return -0.0f;
    case 2:
        return (float)(r % 1000) * 1e-30f; /* tiny */
    case 3:
        return (float)(r % 1000) * 1e3f; /* large */
    default:
        return ((float)(r % 200001) - 100000.0f) * 1e-5f;
    }
}

/* the update of `steps` steps with the dispatched code (split into calls at `cut`) and the
 * baseline's: the same bits in p, m and v */
static bool
same_bits(const RtOptConfig *c, int64_t cut)
{
    static float p[2][N], m[2][N], v[2][N], g[STEPS][N];
    for (int i = 0; i < N; i++) {
        p[0][i] = p[1][i] = rnd();
        m[0][i] = m[1][i] = v[0][i] = v[1][i] = 0;
        for (int s = 0; s < STEPS; s++)
            g[s][i] = rnd();
    }
    for (int s = 0; s < STEPS; s++) {
        rt_opt_step(c, s + 1, p[0], g[s], m[0], v[0], cut);
        rt_opt_step(c, s + 1, p[0] + cut, g[s] + cut, m[0] + cut, v[0] + cut, N - cut);
        rt_opt_step_baseline(c, s + 1, p[1], g[s], m[1], v[1], N);
    }
    return !memcmp(p[0], p[1], sizeof p[0]) && !memcmp(m[0], m[1], sizeof m[0]) &&
           !memcmp(v[0], v[1], sizeof v[0]);
}

int
main(void)
{
    RtOptConfig sgd = rt_opt_defaults(RT_OPT_SGD);
    sgd.lr = 0.1;
    CHECK(same_bits(&sgd, 0));
    sgd.momentum = 0.9;
    sgd.dampening = 0.1;
    sgd.weight_decay = 1e-2;
    CHECK(same_bits(&sgd, 333));
    sgd.dampening = 0;
    sgd.nesterov = true;
    CHECK(same_bits(&sgd, 17));
    RtOptConfig adam = rt_opt_defaults(RT_OPT_ADAM);
    CHECK(same_bits(&adam, 0));
    adam.weight_decay = 1e-3;
    adam.lr = 3e-2;
    CHECK(same_bits(&adam, 501));
    RtOptConfig adamw = rt_opt_defaults(RT_OPT_ADAMW);
    CHECK(same_bits(&adamw, 64));
    adamw.beta1 = 0.8;
    adamw.beta2 = 0.99;
    adamw.eps = 1e-6;
    CHECK(same_bits(&adamw, N));
    printf("test_opt: %d passed, %d failed\n", npass, nfail);
    return nfail > 0;
}
