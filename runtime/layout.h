/* layout.h: packing tensors into the layouts generated code wants (weights transposed once when
 * they are bound, so that the inner loops of dense and convolution layers read them contiguously).
 * Plain C, no allocation, nothing printed. */
#ifndef SNN_RUNTIME_LAYOUT_H
#define SNN_RUNTIME_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

/* dst = src transposed by perm and made contiguous, as NumPy's src.transpose(perm).copy():
 * src has shape dims[0..rank), dst has shape dims[perm[0]], ..., dims[perm[rank-1]].
 * rank 1..8; perm a permutation of 0..rank-1 (not checked); src and dst must not overlap. */
void rt_transpose_f32(const float *src, int rank, const int64_t *dims, const int *perm,
                      float *dst);

/* The dims a weight buffer's transpose runs over: the weight's own, or with split > 0 its first
 * dimension split into [dims[0] / split][split] (a layout of tiles: [O][K] split by nt and
 * transposed by (0, 2, 1) is [O/nt][K][nt], each tile's rows contiguous). Writes rank or rank + 1
 * dims to out (room for rank + 1) and returns their number. */
int rt_split_dims(int rank, const int64_t *dims, int64_t split, int64_t *out);

/* dst[i] = src[i] rounded to IEEE binary16 (is_bf16 0) or bfloat16 (1), to nearest, ties to even
 * (runtime/f16.h): how 16-bit weight buffers are filled, by every binder alike. */
void rt_narrow16(const float *src, int64_t n, int is_bf16, uint16_t *dst);

/* The offsets of n buffers in one arena. Buffers with the same slot k > 0 share region k: the
 * compiler's memory plan gives a slot to buffers whose lifetimes do not overlap (KBuf.slot); a
 * buffer of span w > 1 (span NULL: every span 1) covers regions k .. k + w - 1, laid out one after
 * another, and needs each of them at least a w-th of its bytes; slot 0 is a region of its own;
 * bytes[i] == SIZE_MAX leaves buffer i out (off[i] is not written). A region is as large as the
 * most any buffer covering it needs, the shared regions come first in order of their numbers, then
 * the others in buffer order, each aligned to align bytes (a power of two). Returns the arena's
 * size in bytes. */
size_t rt_arena_layout(int n, const size_t *bytes, const int *slot, const int *span, size_t align,
                       size_t *off);

/* The sum of n spike counters of elem bytes each: 1, unsigned bytes (a CPU layer whose counters
 * cannot pass 255), or 8, int64 (codegen/kir_lower.c spike_count_buffer). As integers: exact in any
 * order, so the loop vectorises (a layer of a conv net holds millions of counters per batch). */
int64_t rt_count_sum(const void *counters, size_t elem, int64_t n);

#endif
