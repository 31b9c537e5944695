/* fuzz_check.h: invariants every fuzz target asserts on what a parser hands back: a result that
 * obeys RtTensor's contract on success, a non-empty message naming the input on failure.
 * Fuzz-harness only: it aborts on a violation so libFuzzer records the input; library code never
 * may. */
#ifndef SNN_TESTS_FUZZ_CHECK_H
#define SNN_TESTS_FUZZ_CHECK_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "runtime/tensor_io.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond);      \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static inline void
fuzz_check_tensor(const RtTensor *t, int has_name)
{
    FUZZ_ASSERT(t->rank >= 0 && t->rank <= RT_MAX_RANK);
    FUZZ_ASSERT(t->dtype >= RT_F32 && t->dtype <= RT_BOOL);
    int64_t numel = 1;
    for (int i = 0; i < t->rank; i++) {
        FUZZ_ASSERT(t->dims[i] >= 0 && t->dims[i] <= RT_MAX_NUMEL);
        numel *= t->dims[i];
        FUZZ_ASSERT(numel <= RT_MAX_NUMEL);
    }
    FUZZ_ASSERT(numel == t->numel);
    FUZZ_ASSERT(t->data != NULL);
    FUZZ_ASSERT(has_name ? t->name != NULL : t->name == NULL);
    /* touch every element so ASan sees the whole allocation is as long as numel says */
    volatile float sink = 0;
    for (int64_t i = 0; i < t->numel; i++)
        sink += t->data[i];
    (void)sink;
}

/* on failure: a NUL-terminated message starting with "<what>: " and saying something */
static inline void
fuzz_check_error(const char *err, size_t errlen, const char *what)
{
    size_t n = strnlen(err, errlen);
    FUZZ_ASSERT(n < errlen);
    FUZZ_ASSERT(strncmp(err, what, strlen(what)) == 0 && n > strlen(what) + 2);
}

#endif
