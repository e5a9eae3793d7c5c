/* metagen native kernel: y = x @ W^T for a few float32 rows x and int8 weights W with one
 * float32 scale per output channel (weight-only int8 quantization).
 *
 * Layout: W is (N, K) int8 row-major, Hugging Face's (out, in), so each output channel is one
 * contiguous run of K bytes; scale is (N,) and W's dequantized value is W[n, k] * scale[n].
 *   y[m, n] = (sum_k x[m, k] * W[n, k]) * scale[n] [+ bias[n]].
 * Decoding is bound by the bytes of weight streamed per step; int8 streams a quarter of float32's.
 *
 * Schedule: a register tile of QM rows x QC output channels. Along k, each step loads VW int8 of
 * each channel's row, widens them to int32 and converts to float in registers (no dequantized
 * copy in memory), and FMAs them with VW floats of each row of x; the QM * QC accumulators are
 * summed across lanes once at the end, the channel's scale and bias applied last. The QC rows of
 * W being reduced are QC sequential streams; the passes over further groups of QM rows of x read
 * the same QC * K bytes again from L1/L2. A K that is not a multiple of VW finishes with a scalar
 * tail. One row (a batch-1 decode step) goes VW channels at a time instead (q8_row): the same k
 * loops over groups of RG channels, then the VW lane sums in one transpose (hsum.h's vsums,
 * whose additions are vsum's) and the scales and biases as vectors, so per channel the tile's
 * chain of operations, at a third of its per-channel work outside the k loop (at K = 512 that
 * work was a quarter of the product's instructions).
 *
 * Every output element is the same chain of operations (lanes, then tail, then scale, then bias)
 * whichever slice of columns, tile or thread computes it, so slices computed apart equal the whole
 * product bit for bit and results never depend on the thread count.
 */
#include <stdint.h>

#include "hsum.h"
#include "pool.h"
#include "simd.h"

#if MG_ISA
#if MG_ISA == 512
#define QC 4 /* output channels per tile */
#define QM 6 /* rows per tile: QM * QC accumulators + QC weights + 1 activation <= 32 registers */
/* VW int8 at p, as floats */
static inline vec vload_i8(const int8_t *p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
#else
#define QC 3
#define QM 4 /* 12 accumulators + 3 weights + 1 activation = the 16 ymm registers */
static inline vec vload_i8(const int8_t *p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
#endif
#define UNROLL _Pragma("GCC unroll 16")
#define RG 4 /* channels read side by side by the one-row kernel (q8_row) */

/* acc[m][c] += VW lanes from k on of row m < mr of x (ld K) times those of the int8 row w[c]. */
static inline __attribute__((always_inline)) void q8_step(const int mr, const float *x, int64_t K,
                                                          const int8_t *const *w, int64_t k,
                                                          vec acc[][QC]) {
  vec wv[QC];
  UNROLL
  for (int c = 0; c < QC; c++) wv[c] = vload_i8(w[c] + k);
  UNROLL
  for (int m = 0; m < mr; m++) {
    const vec xv = vloadu(x + m * K + k);
    UNROLL
    for (int c = 0; c < QC; c++) acc[m][c] = vfma(xv, wv[c], acc[m][c]);
  }
}

/* a[c] += VW lanes from k on of the one row x times those of the int8 row w[c], c < RG:
 * q8_step's operations for one row and RG channels. */
static inline __attribute__((always_inline)) void q8_group(const float *x,
                                                           const int8_t *const *w, int64_t k,
                                                           vec *a) {
  const vec xv = vloadu(x + k);
  UNROLL
  for (int c = 0; c < RG; c++) a[c] = vfma(xv, vload_i8(w[c] + k), a[c]);
}

/* y[m, c] for m < mr, c < nc: rows of x (ld K) against the int8 rows w[c] (K bytes each; the
 * entries c >= nc repeat w[0] and are computed but not stored). `end`: the end of the weights
 * (the prefetches stay before it). */
static inline __attribute__((always_inline)) void q8_tile(const int mr, const float *x, int64_t K,
                                                          const int8_t *const *w,
                                                          const int8_t *end, const float *scale,
                                                          const float *bias, float *y,
                                                          int64_t ldy, int nc) {
  vec acc[QM][QC];
  UNROLL
  for (int m = 0; m < mr; m++)
    UNROLL
    for (int c = 0; c < QC; c++) acc[m][c] = vzero();
  const int64_t body = K / VW * VW;
  /* the tile's rows are one run of QC * K bytes, read QC * VW bytes a step */
  const int64_t ahead = prefetch_steps(w[0], end, QC * VW, 64, body / VW) * VW;
  int64_t k = 0;
  for (; k < ahead; k += VW) {
    prefetch_ahead(w[0] + QC * k, 64);
    q8_step(mr, x, K, w, k, acc);
  }
  for (; k < body; k += VW) q8_step(mr, x, K, w, k, acc);
  for (int m = 0; m < mr; m++)
    for (int c = 0; c < nc; c++) {
      float s = vsum(acc[m][c]);
      for (int64_t t = body; t < K; t++) s += x[m * K + t] * (float)w[c][t];
      s *= scale[c];
      y[m * ldy + c] = bias ? s + bias[c] : s;
    }
}

typedef void (*q8_tile_fn)(const float *, int64_t, const int8_t *const *, const int8_t *,
                           const float *, const float *, float *, int64_t, int);
#define Q8_TILE(R)                                                                             \
  static void q8_tile_##R(const float *x, int64_t K, const int8_t *const *w,                \
                          const int8_t *end, const float *sc, const float *b, float *y,       \
                          int64_t ldy, int nc) {                                              \
    q8_tile(R, x, K, w, end, sc, b, y, ldy, nc);                                               \
  }
Q8_TILE(1)
Q8_TILE(2)
Q8_TILE(3)
Q8_TILE(4)
#if QM > 4
Q8_TILE(5)
Q8_TILE(6)
static const q8_tile_fn Q8_TILES[QM + 1] = {0, q8_tile_1, q8_tile_2, q8_tile_3,
                                            q8_tile_4, q8_tile_5, q8_tile_6};
#else
static const q8_tile_fn Q8_TILES[QM + 1] = {0, q8_tile_1, q8_tile_2, q8_tile_3, q8_tile_4};
#endif

/* One row: y[c] for the VW channels c whose int8 rows start at w + c * K, in groups of RG
 * channels whose k loops are q8_tile's for one row (the same accumulation, prefetches and reads
 * side by side), the groups' sums then taken together (vsums: vsum's additions) and scaled as a
 * vector: per channel the same chain of operations as q8_tile's, so the same bits, without a
 * tile's setup and lane sums per QC channels. */
static void q8_row(const float *x, int64_t K, const int8_t *w, const int8_t *end,
                   const float *scale, const float *bias, float *y) {
  vec sums[VW];
  const int64_t body = K / VW * VW;
  UNROLL
  for (int g = 0; g < VW; g += RG) {
    const int8_t *r[RG];
    UNROLL
    for (int c = 0; c < RG; c++) r[c] = w + (g + c) * K;
    vec a[RG];
    UNROLL
    for (int c = 0; c < RG; c++) a[c] = vzero();
    const int64_t ahead = prefetch_steps(r[0], end, RG * VW, 64, body / VW) * VW;
    int64_t k = 0;
    for (; k < ahead; k += VW) {
      prefetch_ahead(r[0] + RG * k, 64);
      q8_group(x, r, k, a);
    }
    for (; k < body; k += VW) q8_group(x, r, k, a);
    UNROLL
    for (int c = 0; c < RG; c++) sums[g + c] = a[c];
  }
  const vec s = vsums(sums);
  if (body == K) {
    const vec v = vmul(s, vloadu(scale));
    vstoreu(y, bias ? vadd(v, vloadu(bias)) : v);
    return;
  }
  float t[VW];
  vstoreu(t, s);
  for (int c = 0; c < VW; c++) {
    for (int64_t i = body; i < K; i++) t[c] += x[i] * (float)w[c * K + i];
    t[c] *= scale[c];
    y[c] = bias ? t[c] + bias[c] : t[c];
  }
}

/* Columns [c0, c1) of y (M, N) = x (M, K) @ w^T * scale [+ bias (N,), may be NULL], w (N, K)
 * int8 and scale (N,) float32. M, K, N >= 1; 0 <= c0 <= c1 <= N. One row goes VW channels at a
 * time (q8_row), the channels left over and more rows in tiles. */
void mg_q8_matmul_cols(const float *x, const int8_t *w, const float *scale, const float *bias,
                       float *y, int64_t M, int64_t K, int64_t N, int64_t c0, int64_t c1) {
  if (M == 1)
    for (; c0 + VW <= c1; c0 += VW)
      q8_row(x, K, w + c0 * K, w + N * K, scale + c0, bias ? bias + c0 : 0, y + c0);
  for (int64_t n0 = c0; n0 < c1; n0 += QC) {
    const int nc = c1 - n0 < QC ? (int)(c1 - n0) : QC;
    const int8_t *rows[QC];
    for (int c = 0; c < QC; c++) rows[c] = w + (n0 + (c < nc ? c : 0)) * K;
    for (int64_t m0 = 0; m0 < M; m0 += QM) {
      const int64_t mr = M - m0 < QM ? M - m0 : QM;
      Q8_TILES[mr](x + m0 * K, K, rows, w + N * K, scale + n0, bias ? bias + n0 : 0,
                   y + m0 * N + n0, N, nc);
    }
  }
}

typedef struct {
  const float *x;
  const int8_t *w;
  const float *scale, *bias;
  float *y;
  int64_t M, K, N;
} q8_args;

static void q8_slice(const void *ctx, int64_t c0, int64_t c1) {
  const q8_args *a = ctx;
  mg_q8_matmul_cols(a->x, a->w, a->scale, a->bias, a->y, a->M, a->K, a->N, c0, c1);
}

/* The whole product on up to `threads` threads of the pool, which share the output channels in
 * contiguous slices of whole cache lines of y: equal to one thread's result bit for bit. */
void mg_q8_matmul_threads(const float *x, const int8_t *w, const float *scale, const float *bias,
                          float *y, int64_t M, int64_t K, int64_t N, int threads) {
  const q8_args a = {x, w, scale, bias, y, M, K, N};
  mg_parallel_cols(threads, N, q8_slice, &a);
}
#endif
