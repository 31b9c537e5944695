/* layout.h: packing tensors into the layouts generated code wants (weights transposed once when
 * they are bound, so that the inner loops of dense and convolution layers read them contiguously).
 * Plain C, no allocation, nothing printed. */
#ifndef SNN_RUNTIME_LAYOUT_H
#define SNN_RUNTIME_LAYOUT_H

#include <stdint.h>

/* dst = src transposed by perm and made contiguous, as NumPy's src.transpose(perm).copy():
 * src has shape dims[0..rank), dst has shape dims[perm[0]], ..., dims[perm[rank-1]].
 * rank 1..8; perm a permutation of 0..rank-1 (not checked); src and dst must not overlap. */
void rt_transpose_f32(const float *src, int rank, const int64_t *dims, const int *perm,
                      float *dst);

#endif
