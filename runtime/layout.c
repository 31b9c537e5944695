/* layout.c: see layout.h. */
#include "runtime/layout.h"
#include "runtime/f16.h"

#include <stdbool.h>
#include <stddef.h>

int
rt_split_dims(int rank, const int64_t *dims, int64_t split, int64_t *out)
{
    int n = 0;
    if (split > 0) {
        out[n++] = dims[0] / split;
        out[n++] = split;
    } else {
        out[n++] = dims[0];
    }
    for (int d = 1; d < rank; d++)
        out[n++] = dims[d];
    return n;
}

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
    /* the last two dimensions swapped, the others kept (a dense weight [O][K] -> [K][O], or
     * split in tiles [O/nt][nt][K] -> [O/nt][K][nt]): 2-D transposes in blocks that stay in
     * cache, both sides touched a cache line at a time */
    bool is_swap2 = rank >= 2 && perm[rank - 1] == rank - 2 && perm[rank - 2] == rank - 1;
    for (int d = 0; d < rank - 2 && is_swap2; d++)
        is_swap2 = perm[d] == d;
    if (is_swap2) {
        int64_t R = dims[rank - 2], C = dims[rank - 1], outer = numel / (R * C);
        enum { BLK = 16 };
        for (int64_t a = 0; a < outer; a++) {
            const float *s = src + a * R * C;
            float *t = dst + a * R * C;
            for (int64_t r0 = 0; r0 < R; r0 += BLK)
                for (int64_t c0 = 0; c0 < C; c0 += BLK) {
                    int64_t r1 = r0 + BLK < R ? r0 + BLK : R, c1 = c0 + BLK < C ? c0 + BLK : C;
                    for (int64_t c = c0; c < c1; c++)
                        for (int64_t r = r0; r < r1; r++)
                            t[c * R + r] = s[r * C + c];
                }
        }
        return;
    }
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

size_t
rt_arena_layout(int n, const size_t *bytes, const int *slot, const int *span, size_t align,
                size_t *off)
{
    size_t total = 0;
    int nreg = 0;
    for (int i = 0; i < n; i++) {
        int w = span && span[i] > 1 ? span[i] : 1;
        if (bytes[i] != SIZE_MAX && slot[i] > 0 && slot[i] + w - 1 > nreg) nreg = slot[i] + w - 1;
    }
    /* region k: as large as the most a buffer covering it needs; its first buffers start there */
    for (int k = 1; k <= nreg; k++) {
        size_t size = 0;
        for (int i = 0; i < n; i++) {
            int w = span && span[i] > 1 ? span[i] : 1;
            if (bytes[i] == SIZE_MAX || slot[i] <= 0 || k < slot[i] || k >= slot[i] + w) continue;
            size_t part = bytes[i] / (size_t)w + (bytes[i] % (size_t)w != 0);
            if (part > size) size = part;
            if (slot[i] == k) off[i] = total;
        }
        total += (size + align - 1) & ~(align - 1);
    }
    for (int i = 0; i < n; i++)
        if (bytes[i] != SIZE_MAX && slot[i] <= 0) {
            off[i] = total;
            total += (bytes[i] + align - 1) & ~(align - 1);
        }
    return total;
}

void
rt_narrow16(const float *src, int64_t n, int is_bf16, uint16_t *dst)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = is_bf16 ? rt_f32_to_bf16(src[i]) : rt_f32_to_f16(src[i]);
}

int64_t
rt_count_sum(const void *counters, size_t elem, int64_t n)
{
    int64_t sum = 0;
    if (elem == 1) {
        const uint8_t *c = counters;
        for (int64_t i = 0; i < n; i++)
            sum += c[i];
    } else {
        const int64_t *c = counters;
        for (int64_t i = 0; i < n; i++)
            sum += c[i];
    }
    return sum;
}
