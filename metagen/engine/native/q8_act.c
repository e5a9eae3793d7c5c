/* metagen native kernel: y = x @ W^T * scale for a few float32 rows x and int8 weights W (one
 * float32 scale per output channel), with x quantized to int8 on the fly and multiplied as
 * integers (dynamic activation quantization, as llama.cpp's Q8_0 x Q8_0 dot and onnxruntime's
 * MatMulNBits at accuracy level 4 do).
 *
 * Activations: each row of x is cut into blocks of QB = 32 values along K; block b gets
 *   d_b = max_k |x_k| / 127,  q_k = round_half_even(x_k * (1 / d_b))  in [-127, 127]
 * (d_b = 0 and q = 0 for a block of zeros; d_b = NaN for a block holding a NaN or an infinity,
 * so the outputs of that row are NaN as the float product's would be). Then
 * |x_k - q_k * d_b| <= d_b / 2, and with W's exact integer dot per block
 *   y_q[m, n] = scale[n] * sum_b d_b * sum_{k in b} q_k W[n, k]
 *   |y_q[m, n] - y[m, n]| <= scale[n] * sum_b d_b / 2 * sum_{k in b} |W[n, k]|
 * against y = x @ (W * scale)^T, plus float32 rounding of the per-block sums.
 *
 * Integer dot without VNNI: per vector of 4 * VW bytes, |q| (unsigned) times W with q's sign
 * moved onto W (vpmaddubsw: u8 x s8 pairs -> s16, 2 * 127 * 127 < 32767 so nothing saturates),
 * then vpmaddwd with ones (-> s32; lane i holds bytes 4i .. 4i + 3, so lanes 0-7 are one block
 * and 8-15 the next). Each lane's int32 is converted to float and FMAed with its block's d_b
 * into a float accumulator; the lanes are summed once at the end, the channel's scale and bias
 * applied last; one row (a batch-1 decode step) goes FL channels at a time (a8_row: the tile's
 * chunks over groups of RG channels, then the FL lane sums in one transpose with fsum's
 * additions, scales and biases as vectors), so each channel's chain of operations is the
 * tile's. Where the build targets VNNI (AVX-512 VNNI, or AVX-VNNI on an AVX2 CPU), one vpdpbusd
 * does the maddubs + maddwd pair: the same exact s32 lane sums, so the same bits.
 *
 * Layout: W (N, K) int8 row-major (Hugging Face's (out, in)); the quantized rows live in a
 * buffer of mg_a8_ldq(K) bytes per row, zero past K, and their scales in mg_a8_ldd(K) floats
 * per row, zero past the last block. A K that is not a multiple of the vector is finished by
 * one more vector step over W's last bytes (masked load, or a zero-padded copy on AVX2); the
 * zero padding of the quantized row makes the extra lanes add 0.
 *
 * Every output element is the same chain of operations whichever slice of columns, tile or
 * thread computes it, and quantizing a row is a pure function of the row, so results never
 * depend on the thread count.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hsum.h"
#include "pool.h"
#include "simd.h"

#if MG_ISA
#define QB 32 /* activation values per scale */

#if defined(__AVX512BW__)
#define A8W 64 /* int8 per vector */
#define AC 4   /* output channels per tile */
#define AM 4   /* rows per tile: 16 accumulators + 4 weights + a few temporaries <= 32 */
typedef __m512i ivec;
typedef __m512 fvec;
static inline ivec iload(const void *p) { return _mm512_loadu_si512(p); }
/* the n < A8W bytes at p, zero above */
static inline ivec iload_tail(const int8_t *p, int64_t n) {
  return _mm512_maskz_loadu_epi8(((__mmask64)1 << n) - 1, p);
}
/* sum over 4-byte groups of |x| * (w with x's sign): lane i = sum_{4i..4i+3} x * w */
static inline ivec dot4(ivec ax, __mmask64 neg, ivec w) {
  const ivec sw = _mm512_mask_sub_epi8(w, neg, _mm512_setzero_si512(), w);
#if defined(__AVX512VNNI__)
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), ax, sw);
#else
  return _mm512_madd_epi16(_mm512_maddubs_epi16(ax, sw), _mm512_set1_epi16(1));
#endif
}
/* the scales of the vector's lanes: blocks 2j (lanes 0-7) and 2j + 1 (8-15) */
static inline fvec lane_scales(const float *d, int64_t j) {
  return _mm512_mask_broadcastss_ps(_mm512_set1_ps(d[2 * j]), 0xFF00, _mm_set_ss(d[2 * j + 1]));
}
static inline fvec fzero(void) { return _mm512_setzero_ps(); }
static inline fvec ffma_i(ivec a, fvec s, fvec acc) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), s, acc);
}
static inline float fsum(fvec a) { return _mm512_reduce_add_ps(a); }
#define FL 16 /* floats per fvec */
static inline fvec fsums(const fvec *a) { return vsums(a); }
static inline fvec floadu(const float *p) { return _mm512_loadu_ps(p); }
static inline fvec fmul(fvec a, fvec b) { return _mm512_mul_ps(a, b); }
static inline fvec fadd(fvec a, fvec b) { return _mm512_add_ps(a, b); }
static inline void fstoreu(float *p, fvec a) { _mm512_storeu_ps(p, a); }
#define SIGN_T __mmask64
static inline SIGN_T sign_of(ivec x) { return _mm512_movepi8_mask(x); }
static inline ivec iabs(ivec x) { return _mm512_abs_epi8(x); }
#else /* AVX2 (also an AVX-512F CPU without BW) */
#define A8W 32
#define AC 3
#define AM 2 /* 6 accumulators + 3 weights + x, |x|, its scale, ones, a temporary: 16 ymm */
typedef __m256i ivec;
typedef __m256 fvec;
static inline ivec iload(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline ivec iload_tail(const int8_t *p, int64_t n) {
  int8_t buf[A8W] = {0};
  memcpy(buf, p, (size_t)n);
  return iload(buf);
}
#define SIGN_T __m256i
static inline SIGN_T sign_of(ivec x) { return x; }
static inline ivec iabs(ivec x) { return _mm256_abs_epi8(x); }
static inline ivec dot4(ivec ax, SIGN_T x, ivec w) {
#if defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), ax, _mm256_sign_epi8(w, x));
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(w, x)),
                           _mm256_set1_epi16(1));
#endif
}
static inline fvec lane_scales(const float *d, int64_t j) { return _mm256_broadcast_ss(d + j); }
static inline fvec fzero(void) { return _mm256_setzero_ps(); }
static inline fvec ffma_i(ivec a, fvec s, fvec acc) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), s, acc);
}
static inline float fsum(fvec a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
#define FL 8
static inline fvec fsums(const fvec *a) { return vsums8(a); }
static inline fvec floadu(const float *p) { return _mm256_loadu_ps(p); }
static inline fvec fmul(fvec a, fvec b) { return _mm256_mul_ps(a, b); }
static inline fvec fadd(fvec a, fvec b) { return _mm256_add_ps(a, b); }
static inline void fstoreu(float *p, fvec a) { _mm256_storeu_ps(p, a); }
#endif

/* 1 where dot4 is one vpdpbusd (the build targets AVX-512 VNNI or AVX-VNNI), else 0. */
int mg_a8_vnni(void) {
#if defined(__AVX512BW__) && defined(__AVX512VNNI__) || !defined(__AVX512BW__) && defined(__AVXVNNI__)
  return 1;
#else
  return 0;
#endif
}

/* Bytes per quantized row and floats of block scales per row for K values. */
int64_t mg_a8_ldq(int64_t K) { return (K + A8W - 1) / A8W * A8W; }
int64_t mg_a8_ldd(int64_t K) { return mg_a8_ldq(K) / QB; }

/* One block of n <= QB values: q (QB bytes, zero past n) and its scale. A whole block is
 * vectorised; a partial one (K's last) takes the same operations one value at a time, so both
 * round alike (to nearest, ties to even: vround and nearbyintf in the default mode). */
static float quantize_block(const float *x, int64_t n, int8_t *q) {
  float amax = 0.0f, r[QB];
  int finite = 1;
  if (n == QB) {
    vec mx = vzero(), bad = vzero(); /* bad: x - x, NaN for a NaN or an infinity */
    for (int i = 0; i < QB; i += VW) {
      const vec v = vloadu(x + i);
      mx = vmax(mx, vmax(v, vsub(vzero(), v)));
      bad = vadd(bad, vsub(v, v));
    }
    float lanes[VW];
    vstoreu(lanes, mx);
    for (int i = 0; i < VW; i++) amax = lanes[i] > amax ? lanes[i] : amax;
    finite = vsum(bad) == 0.0f;
  } else {
    for (int64_t k = 0; k < n; k++) {
      const float a = fabsf(x[k]);
      finite &= a <= 3.4028235e38f; /* false for NaN and infinities */
      amax = a > amax ? a : amax;
    }
  }
  memset(q, 0, QB);
  if (!finite) return NAN;
  const float d = amax / 127.0f;
  if (d == 0.0f) return 0.0f;
  const float id = 1.0f / d;
  if (n == QB)
    for (int i = 0; i < QB; i += VW) vstoreu(r + i, vround(vmul(vloadu(x + i), vbcast(id))));
  else
    for (int64_t k = 0; k < n; k++) r[k] = nearbyintf(x[k] * id);
  for (int64_t k = 0; k < n; k++)
    q[k] = (int8_t)(r[k] > 127.0f ? 127 : r[k] < -127.0f ? -127 : (int)r[k]);
  return d;
}

/* Quantize x (M, K) into q (M, mg_a8_ldq(K)) and d (M, mg_a8_ldd(K)), zero-padded. */
void mg_a8_quantize(const float *x, int64_t M, int64_t K, int8_t *q, float *d) {
  const int64_t ldq = mg_a8_ldq(K), ldd = mg_a8_ldd(K);
  for (int64_t m = 0; m < M; m++)
    for (int64_t b = 0; b < ldd; b++) {
      const int64_t k0 = b * QB, n = K - k0 < QB ? (K - k0 > 0 ? K - k0 : 0) : QB;
      d[m * ldd + b] = quantize_block(x + m * K + k0, n, q + m * ldq + k0);
    }
}

#define UNROLL _Pragma("GCC unroll 16")
#define RG 4 /* channels read side by side by the one-row kernel (a8_row) */

/* acc[m * nc + c] += the lanes of rows m < mr of q (chunk j) against the weight vectors wv[c],
 * c < nc. */
static inline __attribute__((always_inline)) void a8_dot(const int mr, const int nc,
                                                           const int8_t *q, const float *d,
                                                           int64_t ldq, int64_t ldd, int64_t j,
                                                           const ivec *wv, fvec *acc) {
  UNROLL
  for (int m = 0; m < mr; m++) {
    const ivec xv = iload(q + m * ldq + j * A8W);
    const ivec ax = iabs(xv);
    const SIGN_T sg = sign_of(xv);
    const fvec sv = lane_scales(d + m * ldd, j);
    UNROLL
    for (int c = 0; c < nc; c++)
      acc[m * nc + c] = ffma_i(dot4(ax, sg, wv[c]), sv, acc[m * nc + c]);
  }
}

/* a8_dot of chunk j (a whole one) of the int8 rows w[c], c < nc. */
static inline __attribute__((always_inline)) void a8_chunk(const int mr, const int nc,
                                                           const int8_t *q, const float *d,
                                                           int64_t ldq, int64_t ldd, int64_t j,
                                                           const int8_t *const *w, fvec *acc) {
  ivec wv[AC > RG ? AC : RG];
  UNROLL
  for (int c = 0; c < nc; c++) wv[c] = iload(w[c] + j * A8W);
  a8_dot(mr, nc, q, d, ldq, ldd, j, wv, acc);
}

/* acc[m * nc + c] += rows m < mr of (q, d) against the whole int8 rows w[c] (K bytes each),
 * c < nc, along k in chunks of A8W, prefetching the run of nc * K bytes ahead (`end`: the end of
 * the weights), a K that is not a multiple of A8W finished by a zero-padded chunk. */
static inline __attribute__((always_inline)) void a8_rows(const int mr, const int nc,
                                                          const int8_t *q, const float *d,
                                                          int64_t K, const int8_t *const *w,
                                                          const int8_t *end, fvec *acc) {
  const int64_t ldq = mg_a8_ldq(K), ldd = mg_a8_ldd(K), full = K / A8W;
  /* the rows are one run of nc * K bytes, read nc * A8W bytes a chunk */
  const int pf = (nc * A8W + 63) / 64 * 64;
  const int64_t ahead = prefetch_steps(w[0], end, nc * A8W, pf, full);
  int64_t j = 0;
  for (; j < ahead; j++) {
    prefetch_ahead(w[0] + nc * j * A8W, pf);
    a8_chunk(mr, nc, q, d, ldq, ldd, j, w, acc);
  }
  for (; j < full; j++) a8_chunk(mr, nc, q, d, ldq, ldd, j, w, acc);
  if (K > full * A8W) {
    ivec wv[AC > RG ? AC : RG];
    UNROLL
    for (int c = 0; c < nc; c++) wv[c] = iload_tail(w[c] + full * A8W, K - full * A8W);
    a8_dot(mr, nc, q, d, ldq, ldd, full, wv, acc);
  }
}

/* y[m, c] for m < mr, c < nc: quantized rows (q, d) against the int8 rows w[c] (K bytes each;
 * the entries c >= nc repeat w[0] and are computed but not stored). `end`: the end of the
 * weights (the prefetches stay before it). */
static inline __attribute__((always_inline)) void a8_tile(const int mr, const int8_t *q,
                                                          const float *d, int64_t K,
                                                          const int8_t *const *w,
                                                          const int8_t *end, const float *scale,
                                                          const float *bias, float *y,
                                                          int64_t ldy, int nc) {
  fvec acc[AM * AC];
  UNROLL
  for (int i = 0; i < AM * AC; i++) acc[i] = fzero(); /* all: the compiler cannot see mr */
  a8_rows(mr, AC, q, d, K, w, end, acc);
  for (int m = 0; m < mr; m++)
    for (int c = 0; c < nc; c++) {
      const float s = fsum(acc[m * AC + c]) * scale[c];
      y[m * ldy + c] = bias ? s + bias[c] : s;
    }
}

typedef void (*a8_tile_fn)(const int8_t *, const float *, int64_t, const int8_t *const *,
                           const int8_t *, const float *, const float *, float *, int64_t, int);
#define A8_TILE(R)                                                                            \
  static void a8_tile_##R(const int8_t *q, const float *d, int64_t K, const int8_t *const *w, \
                          const int8_t *end, const float *sc, const float *b, float *y,       \
                          int64_t ldy, int nc) {                                              \
    a8_tile(R, q, d, K, w, end, sc, b, y, ldy, nc);                                           \
  }
A8_TILE(1)
A8_TILE(2)
#if AM > 2
A8_TILE(3)
A8_TILE(4)
static const a8_tile_fn A8_TILES[AM + 1] = {0, a8_tile_1, a8_tile_2, a8_tile_3, a8_tile_4};
#else
static const a8_tile_fn A8_TILES[AM + 1] = {0, a8_tile_1, a8_tile_2};
#endif

/* One row: y[c] for the FL channels c whose int8 rows start at w + c * K, in groups of RG
 * channels whose chunks are a8_tile's for one row (the same accumulation, prefetches and reads
 * side by side), the groups' lane sums then taken together (fsums: fsum's additions) and scaled
 * as a vector: per channel the same chain of operations as a8_tile's, so the same bits, without
 * a tile's setup and lane sums per AC channels. */
static void a8_row(const int8_t *q, const float *d, int64_t K, const int8_t *w,
                   const int8_t *end, const float *scale, const float *bias, float *y) {
  fvec acc[FL];
  UNROLL
  for (int g = 0; g < FL; g += RG) {
    const int8_t *r[RG];
    UNROLL
    for (int c = 0; c < RG; c++) {
      r[c] = w + (g + c) * K;
      acc[g + c] = fzero();
    }
    a8_rows(1, RG, q, d, K, r, end, acc + g);
  }
  const fvec s = fmul(fsums(acc), floadu(scale));
  fstoreu(y, bias ? fadd(s, floadu(bias)) : s);
}

/* Columns [c0, c1) of y (M, N) = dequant(q, d) (M, K) @ w^T * scale [+ bias (N,), may be
 * NULL], with q, d from mg_a8_quantize, w (N, K) int8 and scale (N,) float32. M, K, N >= 1;
 * 0 <= c0 <= c1 <= N. One row goes FL channels at a time (a8_row), the channels left over and
 * more rows in tiles. */
void mg_a8_matmul_cols(const int8_t *q, const float *d, const int8_t *w, const float *scale,
                       const float *bias, float *y, int64_t M, int64_t K, int64_t N, int64_t c0,
                       int64_t c1) {
  const int64_t ldq = mg_a8_ldq(K), ldd = mg_a8_ldd(K);
  if (M == 1)
    for (; c0 + FL <= c1; c0 += FL)
      a8_row(q, d, K, w + c0 * K, w + N * K, scale + c0, bias ? bias + c0 : 0, y + c0);
  for (int64_t n0 = c0; n0 < c1; n0 += AC) {
    const int nc = c1 - n0 < AC ? (int)(c1 - n0) : AC;
    const int8_t *rows[AC];
    for (int c = 0; c < AC; c++) rows[c] = w + (n0 + (c < nc ? c : 0)) * K;
    for (int64_t m0 = 0; m0 < M; m0 += AM) {
      const int64_t mr = M - m0 < AM ? M - m0 : AM;
      A8_TILES[mr](q + m0 * ldq, d + m0 * ldd, K, rows, w + N * K, scale + n0,
                   bias ? bias + n0 : 0, y + m0 * N + n0, N, nc);
    }
  }
}

typedef struct {
  const int8_t *q;
  const float *d;
  const int8_t *w;
  const float *scale, *bias;
  float *y;
  int64_t M, K, N;
} a8_args;

static void a8_slice(const void *ctx, int64_t c0, int64_t c1) {
  const a8_args *a = ctx;
  mg_a8_matmul_cols(a->q, a->d, a->w, a->scale, a->bias, a->y, a->M, a->K, a->N, c0, c1);
}

/* The whole product, x (M, K) float32 quantized once here, on up to `threads` threads of the
 * pool sharing the output channels in contiguous slices: equal to one thread's result bit for
 * bit. Returns 0, or -1 when out of memory for the quantized rows (y untouched). */
int mg_a8_matmul_threads(const float *x, const int8_t *w, const float *scale, const float *bias,
                         float *y, int64_t M, int64_t K, int64_t N, int threads) {
  const int64_t ldq = mg_a8_ldq(K), ldd = mg_a8_ldd(K);
  int8_t *q = malloc((size_t)(M * ldq) + (size_t)(M * ldd) * sizeof(float));
  if (!q) return -1;
  float *d = (float *)(q + M * ldq); /* ldq is a multiple of 32: d stays aligned */
  mg_a8_quantize(x, M, K, q, d);
  const a8_args a = {q, d, w, scale, bias, y, M, K, N};
  mg_parallel_cols(threads, N, a8_slice, &a);
  free(q);
  return 0;
}
#endif
