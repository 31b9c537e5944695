/* fuzz_npy.c: libFuzzer target for rt_npy_parse. Accepted inputs must satisfy the RtTensor
 * contract, and f32/u8/i8 arrays must survive a round trip through rt_npy_encode exactly; rejected
 * ones must come with a message. Must not write files. */
#include "tests/fuzz/fuzz_check.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    RtTensor t, t2;
    char err[512];
    memset(err, 'x', sizeof err);
    if (rt_npy_parse(data, size, "fuzz", &t, err, sizeof err) != 0) {
        fuzz_check_error(err, sizeof err, "fuzz: ");
        FUZZ_ASSERT(t.data == NULL && t.numel == 0);
        return 0;
    }
    fuzz_check_tensor(&t, 0);
    if (t.dtype == RT_F32 || t.dtype == RT_U8 || t.dtype == RT_I8) {
        unsigned char *buf;
        size_t len;
        FUZZ_ASSERT(rt_npy_encode(t.dtype, t.rank, t.dims, t.data, &buf, &len, err, sizeof err) ==
                    0);
        FUZZ_ASSERT(rt_npy_parse(buf, len, "again", &t2, err, sizeof err) == 0);
        FUZZ_ASSERT(t2.dtype == t.dtype && t2.rank == t.rank && t2.numel == t.numel);
        FUZZ_ASSERT(memcmp(t.data, t2.data, sizeof(float) * (size_t)t.numel) == 0);
        free(buf);
        rt_tensor_free(&t2);
    }
    rt_tensor_free(&t);
    return 0;
}
