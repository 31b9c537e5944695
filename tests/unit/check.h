/* check.h: the unit tests' assertion: CHECK(cond) counts a pass or reports file:line and the
 * condition on stderr and counts a failure; main prints npass and nfail and fails if nfail > 0.
 * One test program per executable, so the counters are static here. */
#ifndef SNN_TESTS_CHECK_H
#define SNN_TESTS_CHECK_H

#include <stdio.h>

static int npass, nfail;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond)                                                                                  \
            npass++;                                                                               \
        else {                                                                                     \
            nfail++;                                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#endif
