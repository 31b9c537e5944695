/* fuzz_idx.c: libFuzzer target for rt_idx_parse, gzip input included. Accepted inputs must satisfy
 * the RtTensor contract with byte values 0..255; rejected ones must come with a message. */
#include "tests/fuzz/fuzz_check.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    RtTensor t;
    char err[512];
    memset(err, 'x', sizeof err);
    if (rt_idx_parse(data, size, "fuzz", &t, err, sizeof err) != 0) {
        fuzz_check_error(err, sizeof err, "fuzz: ");
        FUZZ_ASSERT(t.data == NULL && t.numel == 0);
        return 0;
    }
    fuzz_check_tensor(&t, 0);
    FUZZ_ASSERT(t.dtype == RT_U8 && t.rank >= 1);
    for (int64_t i = 0; i < t.numel; i++)
        FUZZ_ASSERT(t.data[i] >= 0.0f && t.data[i] <= 255.0f && t.data[i] == (float)(int)t.data[i]);
    rt_tensor_free(&t);
    return 0;
}
