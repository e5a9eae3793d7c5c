/* metagen native kernel: y (M, N) = x (M, K) @ w (K, N) [+ bias (N,)], float32, row-major,
 * every operand contiguous. Built at first use by metagen/engine/native/build.py.
 *
 * Why: for a few rows (2 <= M <= 16: beams, samples, speculative verification) MKL repacks the
 * weight on every call and runs at about half the memory bandwidth; decoding is bound by
 * streaming the weights once, which this kernel does for any M. It reads w in chunks of
 * KC rows x NC columns: every weight row is read as one contiguous run of NC floats (the
 * hardware prefetchers follow KC such streams), the NC-wide slice of y stays in L1/L2 between
 * chunks, and a register tile of MR rows x NR vectors accumulates KC products per load of y.
 * Rows beyond MR are further passes over the same weight chunk, served from cache.
 *
 * Summation order differs from MKL's, so results agree to rounding, not bit for bit.
 */
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
static inline void vstore(float *p, vec v, vmask m) { _mm256_maskstore_ps(p, m, v); }
static inline vec vloadu(const float *p) { return _mm256_loadu_ps(p); }
static inline void vstoreu(float *p, vec v) { _mm256_storeu_ps(p, v); }
static inline vec vzero(void) { return _mm256_setzero_ps(); }
static inline vec vbcast(float x) { return _mm256_set1_ps(x); }
static inline vec vfma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }

#else
#define MG_ISA 0
#endif

/* Which vector path this build has: 512 (AVX-512F), 256 (AVX2 + FMA) or 0 (none: do not call
 * mg_matmul). */
int mg_isa(void) { return MG_ISA; }

#if MG_ISA
#define TILE_COLS (NR * VW)
#define KC 16                                /* weight rows per chunk */
#define NC (TILE_COLS * (4096 / TILE_COLS)) /* columns per chunk: about 4096, whole tiles */
/* The tile loops run over compile-time bounds; unrolled, the accumulators live in registers. */
#define UNROLL _Pragma("GCC unroll 16")

/* The register tile: y[m, 0:cols] = (first ? bias or 0 : y[m, 0:cols])
 *                                    + sum_{k < kc} x[m, k] * w[k, 0:cols], for m < mr.
 * A full tile (cols = NR * VW) uses plain loads; the last, narrower tile of a row (`full` = 0)
 * masks vector r to its valid lanes `mask[r]`. */
static inline void tile(const int mr, const int full, const float *x, int64_t ldx, const float *w,
                        int64_t ldw, const float *bias, float *y, int64_t ldy, int64_t kc,
                        int first, const vmask *mask) {
  vec acc[MR][NR];
#define LOAD(p, r) (full ? vloadu(p) : vload(p, mask[r]))
  UNROLL
  for (int m = 0; m < mr; m++)
    UNROLL
    for (int r = 0; r < NR; r++)
      acc[m][r] = !first ? LOAD(y + m * ldy + r * VW, r)
                         : (bias ? LOAD(bias + r * VW, r) : vzero());
  for (int64_t k = 0; k < kc; k++) {
    const float *wk = w + k * ldw;
    vec wv[NR];
    UNROLL
    for (int r = 0; r < NR; r++) wv[r] = LOAD(wk + r * VW, r);
    UNROLL
    for (int m = 0; m < mr; m++) {
      vec b = vbcast(x[m * ldx + k]);
      UNROLL
      for (int r = 0; r < NR; r++) acc[m][r] = vfma(b, wv[r], acc[m][r]);
    }
  }
#undef LOAD
  UNROLL
  for (int m = 0; m < mr; m++)
    UNROLL
    for (int r = 0; r < NR; r++) {
      if (full)
        vstoreu(y + m * ldy + r * VW, acc[m][r]);
      else
        vstore(y + m * ldy + r * VW, acc[m][r], mask[r]);
    }
}

/* One specialisation per row count and full/tail, so the accumulators stay in registers. */
typedef void (*tile_fn)(const float *, int64_t, const float *, int64_t, const float *, float *,
                        int64_t, int64_t, int, const vmask *);
#define TILE(R)                                                                                \
  static void full_##R(const float *x, int64_t ldx, const float *w, int64_t ldw,               \
                       const float *bias, float *y, int64_t ldy, int64_t kc, int first,        \
                       const vmask *mask) {                                                    \
    tile(R, 1, x, ldx, w, ldw, bias, y, ldy, kc, first, mask);                                 \
  }                                                                                            \
  static void tail_##R(const float *x, int64_t ldx, const float *w, int64_t ldw,               \
                       const float *bias, float *y, int64_t ldy, int64_t kc, int first,        \
                       const vmask *mask) {                                                    \
    tile(R, 0, x, ldx, w, ldw, bias, y, ldy, kc, first, mask);                                 \
  }
TILE(1)
TILE(2)
TILE(3)
TILE(4)
#if MR > 4
TILE(5)
TILE(6)
static const tile_fn FULL[MR + 1] = {0, full_1, full_2, full_3, full_4, full_5, full_6};
static const tile_fn TAIL[MR + 1] = {0, tail_1, tail_2, tail_3, tail_4, tail_5, tail_6};
#else
static const tile_fn FULL[MR + 1] = {0, full_1, full_2, full_3, full_4};
static const tile_fn TAIL[MR + 1] = {0, tail_1, tail_2, tail_3, tail_4};
#endif

/* y (M, N) = x (M, K) @ w (K, N) [+ bias (N,), may be NULL]. M, K, N >= 1. */
void mg_matmul(const float *x, const float *w, const float *bias, float *y, int64_t M, int64_t K,
               int64_t N) {
  for (int64_t c0 = 0; c0 < N; c0 += NC) {
    const int64_t nc = N - c0 < NC ? N - c0 : NC;
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
      const int64_t kc = K - k0 < KC ? K - k0 : KC;
      for (int64_t m0 = 0; m0 < M; m0 += MR) {
        const int64_t mr = M - m0 < MR ? M - m0 : MR;
        for (int64_t j = c0; j < c0 + nc; j += TILE_COLS) {
          const int64_t cols = c0 + nc - j;
          vmask mask[NR];
          for (int r = 0; r < NR; r++) mask[r] = mask_first(cols - r * VW);
          (cols >= TILE_COLS ? FULL : TAIL)[mr](x + m0 * K + k0, K, w + k0 * N + j, N,
                                                bias ? bias + j : 0, y + m0 * N + j, N, kc,
                                                k0 == 0, mask);
        }
      }
    }
  }
}
#endif
