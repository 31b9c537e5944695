/* fuzz_read.c: libFuzzer target for the bounded file readers (runtime/files.c and the formats'
 * size probes). The first byte chooses the format (npy, safetensors, IDX, npz), a row limit for
 * .npy (0..3) and whether the read is limited to 64 bytes; the rest is the file, held in a memfd
 * and read through its /proc/self/fd path. The reader must agree with the in-memory parser of the
 * same bytes: both succeed with the same tensors, or both fail (a row limit may make a file that
 * is cut short readable, the 64-byte limit may refuse a file the parser takes, and an .npz must
 * start with a ZIP record). Must not write files. */
#define _GNU_SOURCE
#include "tests/fuzz/fuzz_check.h"

#include <stdbool.h>
#include <sys/mman.h>
#include <unistd.h>

/* a equals b, or b's first `rows` rows (rows > 0) */
static bool
same_tensor(const RtTensor *a, const RtTensor *b, int64_t rows)
{
    if (a->dtype != b->dtype || a->rank != b->rank) return false;
    for (int d = 1; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return false;
    if (a->rank == 0) return a->numel == b->numel && !memcmp(a->data, b->data, sizeof(float));
    int64_t r = rows > 0 && b->dims[0] > rows ? rows : b->dims[0];
    if (a->dims[0] != r) return false;
    int64_t n = b->dims[0] ? b->numel / b->dims[0] * r : 0; /* at most b->numel: no overflow */
    return a->numel == n && (n == 0 || !memcmp(a->data, b->data, (size_t)n * sizeof(float)));
}

static bool
same_set(const RtTensorSet *a, const RtTensorSet *b)
{
    if (a->ntensors != b->ntensors) return false;
    for (int i = 0; i < a->ntensors; i++)
        if (strcmp(a->tensors[i].name, b->tensors[i].name) != 0 ||
            !same_tensor(&a->tensors[i], &b->tensors[i], 0))
            return false;
    return true;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("fuzz_read", 0);
        FUZZ_ASSERT(fd >= 0);
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (size == 0) return 0;
    int format = data[0] & 3;
    int64_t rows = (data[0] >> 2) & 3;
    bool is_small = (data[0] & 16) != 0;
    data++;
    size--;
    FUZZ_ASSERT(ftruncate(fd, 0) == 0 && pwrite(fd, data, size, 0) == (ssize_t)size);
    RtReadLimit lim = {is_small ? 64 : 0, rows, "the fuzz target's limit"};
    char err[512], err2[512];
    memset(err, 'x', sizeof err);
    memset(err2, 'x', sizeof err2);
    int rc, rc2;
    if (format == 0 || format == 2) {
        RtTensor t, t2;
        rc = format == 0 ? rt_npy_read(path, &lim, &t, err, sizeof err)
                         : rt_idx_read(path, &lim, &t, err, sizeof err);
        rc2 = format == 0 ? rt_npy_parse(data, size, "fuzz", &t2, err2, sizeof err2)
                          : rt_idx_parse(data, size, "fuzz", &t2, err2, sizeof err2);
        if (rc) fuzz_check_error(err, sizeof err, path);
        else fuzz_check_tensor(&t, 0);
        /* the parser's success is the reader's, but for what the limits change */
        if (!rc2 && !is_small) FUZZ_ASSERT(!rc && same_tensor(&t, &t2, format == 0 ? rows : 0));
        if (!rc && !rc2) FUZZ_ASSERT(same_tensor(&t, &t2, format == 0 ? rows : 0));
        if (rc2 && !rc) FUZZ_ASSERT(format == 0 && rows > 0);
        if (!rc) rt_tensor_free(&t);
        if (!rc2) rt_tensor_free(&t2);
    } else {
        RtTensorSet s, s2;
        rc = format == 1 ? rt_safetensors_read(path, &lim, &s, err, sizeof err)
                         : rt_npz_read(path, &lim, &s, err, sizeof err);
        rc2 = format == 1 ? rt_safetensors_parse(data, size, "fuzz", &s2, err2, sizeof err2)
                          : rt_npz_parse(data, size, "fuzz", &s2, err2, sizeof err2);
        if (rc) fuzz_check_error(err, sizeof err, path);
        /* an archive must start with a ZIP record (numpy's do): one with bytes before its first
         * record parses from memory but is not read from a file, which would have to be read
         * whole to find its directory at the end (/dev/zero never ends) */
        bool is_zip = size >= 4 && data[0] == 'P' && data[1] == 'K' &&
                      ((data[2] == 3 && data[3] == 4) || (data[2] == 5 && data[3] == 6));
        if (!rc2 && !is_small && (format == 1 || is_zip)) FUZZ_ASSERT(!rc);
        if (!rc && !rc2) FUZZ_ASSERT(same_set(&s, &s2));
        FUZZ_ASSERT(!rc || rc2 || is_small);
        if (!rc) rt_tensorset_free(&s);
        if (!rc2) rt_tensorset_free(&s2);
        (void)rows;
    }
    return 0;
}
