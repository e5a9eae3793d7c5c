/* metagen native kernels: the horizontal sums of VW vectors at once.
 *
 * vsums(a) is the vector whose lane c is vsum(a[c]) for c < VW, equal to it bit for bit:
 * vsum adds lane j to lane j + VW/2, then j + VW/4, ..., then j + 1 (_mm512_reduce_add_ps's
 * order, and simd.h's AVX2 vsum's), and vsums makes the same additions, VW vectors' worth side
 * by side in a transpose (floating-point addition is commutative, so only which values are paired
 * matters). About 3 instructions per vector instead of vsum's 8, and the sums come out in one
 * vector, ready for a vector scale, bias and store: what a one-row product ends each group of
 * VW output channels with.
 */
#ifndef MG_HSUM_H
#define MG_HSUM_H
#include "simd.h"

#if MG_ISA
/* a (8 vectors of 8 floats) -> lane c = the AVX2 vsum of a[c] (also in an AVX-512 build, for
 * kernels that work on 8-float vectors there) */
static inline __attribute__((always_inline)) __m256 vsums8(const __m256 *a) {
  __m256 t[4], u[2];
  for (int i = 0; i < 4; i++) /* lanes 0-3: a[2i]'s j + (j + 4); lanes 4-7: a[2i + 1]'s */
    t[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x20),
                         _mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x31));
  for (int i = 0; i < 2; i++) /* half h: a[4i + h]'s j + (j + 2) in 0-1, a[4i + 2 + h]'s in 2-3 */
    u[i] = _mm256_add_ps(_mm256_shuffle_ps(t[2 * i], t[2 * i + 1], 0x44),
                         _mm256_shuffle_ps(t[2 * i], t[2 * i + 1], 0xEE));
  /* lane 4h + m: a[2m + h]'s whole sum */
  const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], 0x88),
                                 _mm256_shuffle_ps(u[0], u[1], 0xDD));
  return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
#endif

#if MG_ISA == 512
/* a (16 vectors) -> lane c = vsum(a[c]) */
static inline __attribute__((always_inline)) vec vsums(const vec *a) {
  vec t[8], u[4], v[2];
  for (int i = 0; i < 8; i++) /* lanes 0-7: a[2i]'s j + (j + 8); lanes 8-15: a[2i + 1]'s */
    t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
  for (int i = 0; i < 4; i++) /* 128-bit lane l: a[4i + l]'s j + (j + 4) */
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; i++) /* lane l: a[8i + l]'s (j + (j + 2)) in 0-1, a[8i + 4 + l]'s in 2-3 */
    v[i] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], 0x44),
                         _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], 0xEE));
  /* lane 4l + m: a[4m + l]'s whole sum */
  const vec r = _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], 0x88),
                              _mm512_shuffle_ps(v[0], v[1], 0xDD));
  return _mm512_permutexvar_ps(
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}
#elif MG_ISA == 256
static inline __attribute__((always_inline)) vec vsums(const vec *a) { return vsums8(a); }
#endif
#endif
