/* fuzz_npz.c: libFuzzer target for rt_npz_parse (ZIP directory, zip64 fields, stored and deflate
 * members, CRCs, then each member's .npy). Accepted inputs must satisfy the RtTensor contract with
 * unique names; rejected ones must come with a message. */
#include "tests/fuzz/fuzz_check.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    RtTensorSet s;
    char err[512];
    memset(err, 'x', sizeof err);
    if (rt_npz_parse(data, size, "fuzz", &s, err, sizeof err) != 0) {
        fuzz_check_error(err, sizeof err, "fuzz: ");
        FUZZ_ASSERT(s.tensors == NULL && s.ntensors == 0);
        return 0;
    }
    for (int i = 0; i < s.ntensors; i++) {
        fuzz_check_tensor(&s.tensors[i], 1);
        FUZZ_ASSERT(rt_tensorset_find(&s, s.tensors[i].name) == &s.tensors[i]);
    }
    rt_tensorset_free(&s);
    return 0;
}
