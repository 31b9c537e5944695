/* layout.c: see layout.h. */
#include "runtime/layout.h"

#include <stddef.h>

void
rt_transpose_f32(const float *src, int rank, const int64_t *dims, const int *perm, float *dst)
{
    enum { MAX_RANK = 8 };
    int64_t stride[MAX_RANK], odims[MAX_RANK], ostride[MAX_RANK], idx[MAX_RANK] = {0};
    int64_t numel = 1;
    for (int d = rank - 1; d >= 0; d--) {
        stride[d] = numel;
        numel *= dims[d];
    }
    for (int d = 0; d < rank; d++) {
        odims[d] = dims[perm[d]];
        ostride[d] = stride[perm[d]]; /* the source stride of output dimension d */
    }
    if (numel == 0) return;
    /* walk dst in order, the source offset following an odometer over the output dims */
    int64_t off = 0;
    for (int64_t i = 0; i < numel; i++) {
        dst[i] = src[off];
        for (int d = rank - 1; d >= 0; d--) {
            if (++idx[d] < odims[d]) {
                off += ostride[d];
                break;
            }
            off -= ostride[d] * (odims[d] - 1);
            idx[d] = 0;
        }
    }
}
