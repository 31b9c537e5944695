/* fuzz_safetensors.c: libFuzzer target for rt_safetensors_parse. Accepted inputs must satisfy the
 * RtTensor contract and survive a round trip through rt_safetensors_encode (f32) bit for bit;
 * rejected ones must come with a message. Must not write files. */
#include "tests/fuzz/fuzz_check.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    RtTensorSet s, s2;
    char err[512];
    memset(err, 'x', sizeof err);
    if (rt_safetensors_parse(data, size, "fuzz", &s, err, sizeof err) != 0) {
        fuzz_check_error(err, sizeof err, "fuzz: ");
        FUZZ_ASSERT(s.tensors == NULL && s.ntensors == 0);
        return 0;
    }
    for (int i = 0; i < s.ntensors; i++)
        fuzz_check_tensor(&s.tensors[i], 1);

    unsigned char *buf;
    size_t len;
    FUZZ_ASSERT(rt_safetensors_encode(s.tensors, s.ntensors, RT_F32, &buf, &len, err, sizeof err) ==
                0);
    FUZZ_ASSERT(rt_safetensors_parse(buf, len, "again", &s2, err, sizeof err) == 0);
    FUZZ_ASSERT(s2.ntensors == s.ntensors);
    for (int i = 0; i < s.ntensors; i++) {
        const RtTensor *a = &s.tensors[i], *b = rt_tensorset_find(&s2, a->name);
        FUZZ_ASSERT(b && b->rank == a->rank && b->numel == a->numel && b->dtype == RT_F32);
        FUZZ_ASSERT(memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank) == 0);
        FUZZ_ASSERT(memcmp(a->data, b->data, sizeof(float) * (size_t)a->numel) == 0);
    }
    free(buf);
    rt_tensorset_free(&s2);
    rt_tensorset_free(&s);
    return 0;
}
