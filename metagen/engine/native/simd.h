/* metagen native kernels: the vector ISA, chosen at compile time (-march=native).
 *
 * MG_ISA is 512 (AVX-512F), 256 (AVX2 + FMA) or 0 (neither: the kernels are compiled out and
 * the Python side falls back to PyTorch). Each path defines the same small vocabulary over
 * `vec` (VW floats) and `vmask` (which lanes of a partial vector are live), so a kernel is
 * written once for both widths. NR and MR size the matmul's register tile.
 */
#ifndef MG_SIMD_H
#define MG_SIMD_H
#include <stdint.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#define MG_ISA 512
#define VW 16 /* floats per vector */
#define NR 4  /* vectors per register tile row */
#define MR 6  /* rows per register tile: MR * NR accumulators + NR weights + 1 broadcast <= 32 */
typedef __m512 vec;
typedef __mmask16 vmask;
static inline vmask mask_first(int64_t n) {
  return n >= VW ? (vmask)0xFFFF : (vmask)((1u << (n > 0 ? n : 0)) - 1u);
}
static inline vec vload(const float *p, vmask m) { return _mm512_maskz_loadu_ps(m, p); }
static inline void vstore(float *p, vec v, vmask m) { _mm512_mask_storeu_ps(p, m, v); }
static inline vec vloadu(const float *p) { return _mm512_loadu_ps(p); }
static inline void vstoreu(float *p, vec v) { _mm512_storeu_ps(p, v); }
static inline vec vzero(void) { return _mm512_setzero_ps(); }
static inline vec vbcast(float x) { return _mm512_set1_ps(x); }
static inline vec vfma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
static inline float vsum(vec a) { return _mm512_reduce_add_ps(a); }
static inline vec vmul(vec a, vec b) { return _mm512_mul_ps(a, b); }
static inline vec vadd(vec a, vec b) { return _mm512_add_ps(a, b); }
static inline vec vsub(vec a, vec b) { return _mm512_sub_ps(a, b); }
static inline vec vdiv(vec a, vec b) { return _mm512_div_ps(a, b); }
static inline vec vmin(vec a, vec b) { return _mm512_min_ps(a, b); }
static inline vec vmax(vec a, vec b) { return _mm512_max_ps(a, b); }
static inline vec vround(vec a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* a * 2^n for integral n in [-126, 127] */
static inline vec vldexp(vec a, vec n) { return _mm512_scalef_ps(a, n); }

#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define MG_ISA 256
#define VW 8
#define NR 3
#define MR 4 /* 12 accumulators + 3 weights + 1 broadcast = the 16 ymm registers */
typedef __m256 vec;
typedef __m256i vmask;
static inline vmask mask_first(int64_t n) {
  int32_t k = n >= VW ? VW : (n > 0 ? (int32_t)n : 0);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline vec vload(const float *p, vmask m) { return _mm256_maskload_ps(p, m); }
/* A full mask takes the plain store: AMD's Zen cores before Zen 4 microcode vmaskmovps to
 * memory (an add's load and store in a loop, the Zen 3 EPYC here: ~20 cycles masked against ~4
 * plain), and a decode step stores a head_dim of whole vectors per key in attention. The branch
 * is predicted (head_dim and the widths are fixed for a run) and the bits stored are the same. */
static inline void vstore(float *p, vec v, vmask m) {
  if (_mm256_movemask_ps(_mm256_castsi256_ps(m)) == 0xFF)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, m, v);
}
static inline vec vloadu(const float *p) { return _mm256_loadu_ps(p); }
static inline void vstoreu(float *p, vec v) { _mm256_storeu_ps(p, v); }
static inline vec vzero(void) { return _mm256_setzero_ps(); }
static inline vec vbcast(float x) { return _mm256_set1_ps(x); }
static inline vec vfma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
static inline vec vmul(vec a, vec b) { return _mm256_mul_ps(a, b); }
static inline vec vadd(vec a, vec b) { return _mm256_add_ps(a, b); }
static inline vec vsub(vec a, vec b) { return _mm256_sub_ps(a, b); }
static inline vec vdiv(vec a, vec b) { return _mm256_div_ps(a, b); }
static inline vec vmin(vec a, vec b) { return _mm256_min_ps(a, b); }
static inline vec vmax(vec a, vec b) { return _mm256_max_ps(a, b); }
static inline vec vround(vec a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* a * 2^n for integral n in [-126, 127] */
static inline vec vldexp(vec a, vec n) {
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(a, _mm256_castsi256_ps(e));
}
static inline float vsum(vec a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

#else
#define MG_ISA 0
#endif

#if MG_ISA
/* How far ahead of an int8 weight stream its kernels prefetch: a tile reads QC rows of K bytes
 * side by side, which the hardware prefetcher follows too late to keep memory busy. On the
 * 2-core Xeon (AVX-512, no VNNI), one step's 33 int8 products of the benchmark target at one
 * row took 1.5x / 1.7x / 1.8x less CPU time with 1 / 2 / 4 KiB ahead than without (8 and 16
 * KiB: 1.7x, 1.6x); the AVX2 build 1.35x at 4 KiB. */
#define MG_AHEAD 4096

/* Prefetch the `bytes` (a constant multiple of 64) of a weight stream MG_AHEAD past p into
 * L1. The caller keeps p + MG_AHEAD + bytes within the weights (prefetch_steps): a prefetch never
 * faults, but forming a pointer past the end of an array is undefined. */
static inline __attribute__((always_inline)) void prefetch_ahead(const int8_t *p, int bytes) {
  for (int b = 0; b < bytes; b += 64) _mm_prefetch((const char *)(p + MG_AHEAD + b), _MM_HINT_T0);
}

/* How many of the steps i = 0 .. n - 1 of a stream may call prefetch_ahead(p + i * stride,
 * bytes): those whose prefetched bytes end at or before `end`, the end of the array p points
 * into (p <= end). Computed once per stream, so the steps past it run without prefetching
 * instead of checking at each step. */
static inline int64_t prefetch_steps(const int8_t *p, const int8_t *end, int64_t stride,
                                     int bytes, int64_t n) {
  const int64_t room = (int64_t)(end - p) - MG_AHEAD - bytes; /* bytes left past the furthest */
  if (room >= (n - 1) * stride) return n; /* all of them: the common case, no division */
  return room < 0 ? 0 : room / stride + 1;
}

/* exp(x) per lane for x in [-87.3, 88.7]: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, then
 * the Taylor polynomial of exp(r) to `degree` (6: relative error about 2e-7, always on one side
 * of r = 0; 7: float32 rounding). `degree` is a constant at every call. */
static inline vec vexp_taylor(vec x, const int degree) {
  const vec n = vround(vmul(x, vbcast(1.44269504f)));
  vec r = vfma(n, vbcast(-0.693359375f), x); /* ln2 in two parts: the high one is exact */
  r = vfma(n, vbcast(2.12194440e-4f), r);
  vec p = vbcast(1.0f / 720);
  if (degree >= 7) p = vfma(vbcast(1.0f / 5040), r, p);
  p = vfma(p, r, vbcast(1.0f / 120));
  p = vfma(p, r, vbcast(1.0f / 24));
  p = vfma(p, r, vbcast(1.0f / 6));
  p = vfma(p, r, vbcast(0.5f));
  p = vfma(p, r, vbcast(1.0f));
  p = vfma(p, r, vbcast(1.0f));
  return vldexp(p, n);
}

/* exp(x) per lane, relative error about 2e-7 (vexp_taylor to degree 6). x is clamped to
 * [-87.3, 88.7]: exp(-inf) and anything below give 1e-38, never NaN; that stays negligible
 * against the softmax's largest term, exp(0) = 1. */
static inline vec vexp(vec x) {
  return vexp_taylor(vmin(vmax(x, vbcast(-87.3f)), vbcast(88.7f)), 6);
}
#endif

#endif /* MG_SIMD_H */
