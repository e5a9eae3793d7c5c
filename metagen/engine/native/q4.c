/* metagen native kernel: y = x @ dequant(W)^T for a few float32 rows x and int4 weights W with
 * one float32 scale per output channel and group of 32 inputs (Q4_0's granularity), x quantized
 * to int8 per block of 32 on the fly (q8_act.c's mg_a8_quantize) and multiplied as integers.
 *
 * Weights: q[n, k] in [-8, 7] stands for q * ws[n, k / 32]. Stored as u = q + 8 (a nibble, 0..15;
 * 8 for padding) in groups of W4G = 16 output channels: for group g, chunk t (inputs 8t .. 8t + 7)
 * is 64 bytes, byte 4c + i (channel c < 16, i < 4) holding u[16g + c, 8t + i] in its low nibble
 * and u[16g + c, 8t + 4 + i] in its high one. A group is K8 / 8 chunks (K8 = K rounded up to 32),
 * the groups one after another: (N rounded up to 16) * K8 / 2 bytes. Scales: ws as
 * (groups, K8 / 32, 16) float32, a group's 16 channels of block b side by side (0 for padding).
 *
 * So one 64-byte load holds four inputs of sixteen channels twice over; a nibble mask gives the
 * first four (low) and a shift the next four (high) as u8 vectors whose 32-bit lanes are the 16
 * channels, and each meets its four activation bytes broadcast to every lane: vpdpbusd (u8
 * weights x s8 activations; without VNNI vpmaddubsw, whose pair sums 2 * 15 * 127 and their sum
 * over a block 8 * 3810 < 32767 never saturate, then vpmaddwd with ones). Per block b of 32
 * inputs, each channel's int32 dot of u with the activation bytes q_x, less 8 * sum_k q_x[k]
 * (u = q + 8), is exact; converted to float and FMAed with ws[n, b] * d_x[b] into the channel's
 * lane:
 *   y[m, n] = sum_b (ws[n, b] * d_x[m, b])
 *                   * (sum_{k in b} u[n, k] q_x[m, k] - 8 sum_{k in b} q_x[m, k])
 * in block order, then + bias[n]. Against y = x @ dequant(W)^T the error is at most
 * sum_b ws[n, b] d_x[m, b] / 2 * sum_{k in b} |q[n, k]| plus float32 rounding of the block sums.
 *
 * With AVX2 a group is two halves of 8 channels (bytes 0-31 and 32-63 of each chunk), the same
 * layout. Every output element is the same chain of operations whichever thread, tile or slice
 * computes it, so results never depend on the thread count.
 */
#include <stdint.h>
#include <stdlib.h>

#include "pool.h"
#include "simd.h"

#if MG_ISA
#define W4G 16 /* output channels per group */
#define W4B 32 /* inputs per scale block */

int64_t mg_a8_ldq(int64_t K);
int64_t mg_a8_ldd(int64_t K);
void mg_a8_quantize(const float *x, int64_t M, int64_t K, int8_t *q, float *d);

#if defined(__AVX512BW__)
#define HC 16 /* channels per vector */
#define W4M 4 /* rows per tile */
typedef __m512i ivec;
typedef __m512 fvec;
static inline ivec wload(const uint8_t *p) { return _mm512_loadu_si512(p); }
static inline ivec lo_nib(ivec v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0F)); }
static inline ivec hi_nib(ivec v) {
  return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0F));
}
static inline ivec xbcast(const int8_t *p) { return _mm512_set1_epi32(*(const int32_t *)p); }
static inline ivec izero(void) { return _mm512_setzero_si512(); }
static inline ivec isub32(ivec a, int32_t b) { return _mm512_sub_epi32(a, _mm512_set1_epi32(b)); }
#if defined(__AVX512VNNI__)
#define W4_VNNI 1
static inline ivec dpbusd(ivec acc, ivec u, ivec x) { return _mm512_dpbusd_epi32(acc, u, x); }
#else
#define W4_VNNI 0
static inline ivec maddubs(ivec u, ivec x) { return _mm512_maddubs_epi16(u, x); }
static inline ivec add16(ivec a, ivec b) { return _mm512_add_epi16(a, b); }
static inline ivec to32(ivec s16) { return _mm512_madd_epi16(s16, _mm512_set1_epi16(1)); }
#endif
static inline fvec fzero(void) { return _mm512_setzero_ps(); }
static inline fvec floadu(const float *p) { return _mm512_loadu_ps(p); }
static inline fvec fscale(const float *ws, float dx) {
  return _mm512_mul_ps(_mm512_loadu_ps(ws), _mm512_set1_ps(dx));
}
static inline fvec ffma_i(ivec a, fvec s, fvec acc) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), s, acc);
}
static inline void fstoreu(float *p, fvec a) { _mm512_storeu_ps(p, a); }
#else /* AVX2 */
#define HC 8
#define W4M 2
typedef __m256i ivec;
typedef __m256 fvec;
static inline ivec wload(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline ivec lo_nib(ivec v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
static inline ivec hi_nib(ivec v) {
  return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
}
static inline ivec xbcast(const int8_t *p) { return _mm256_set1_epi32(*(const int32_t *)p); }
static inline ivec izero(void) { return _mm256_setzero_si256(); }
static inline ivec isub32(ivec a, int32_t b) { return _mm256_sub_epi32(a, _mm256_set1_epi32(b)); }
#if defined(__AVXVNNI__)
#define W4_VNNI 1
static inline ivec dpbusd(ivec acc, ivec u, ivec x) { return _mm256_dpbusd_avx_epi32(acc, u, x); }
#else
#define W4_VNNI 0
static inline ivec maddubs(ivec u, ivec x) { return _mm256_maddubs_epi16(u, x); }
static inline ivec add16(ivec a, ivec b) { return _mm256_add_epi16(a, b); }
static inline ivec to32(ivec s16) { return _mm256_madd_epi16(s16, _mm256_set1_epi16(1)); }
#endif
static inline fvec fzero(void) { return _mm256_setzero_ps(); }
static inline fvec floadu(const float *p) { return _mm256_loadu_ps(p); }
static inline fvec fscale(const float *ws, float dx) {
  return _mm256_mul_ps(_mm256_loadu_ps(ws), _mm256_set1_ps(dx));
}
static inline fvec ffma_i(ivec a, fvec s, fvec acc) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), s, acc);
}
static inline void fstoreu(float *p, fvec a) { _mm256_storeu_ps(p, a); }
#endif

#define UNROLL _Pragma("GCC unroll 16")
#define W4_AHEAD 2048 /* bytes of the weight stream prefetched ahead */

int64_t mg_w4_group(void) { return W4G; }

/* The block sums of quantized rows: xs[m * ldd + b] = 8 * sum_{k in block b} q[m * ldq + k]
 * (q, ldq, ldd as mg_a8_quantize's). */
void mg_w4_xsums(const int8_t *q, int64_t M, int64_t K, int32_t *xs) {
  const int64_t ldq = mg_a8_ldq(K), ldd = mg_a8_ldd(K);
  for (int64_t m = 0; m < M; m++)
    for (int64_t b = 0; b < ldd; b++) {
      int32_t s = 0;
      for (int k = 0; k < W4B; k++) s += q[m * ldq + b * W4B + k];
      xs[m * ldd + b] = 8 * s;
    }
}

/* acc[m] (m < mr) += the half-group's channels (vector lanes) of block b: rows q + m * ldq,
 * scales d + m * ldd, sums xs + m * ldd; w: the block's first chunk at the half's offset; ws:
 * the block's scales of the half's channels. */
static inline __attribute__((always_inline)) void w4_block(const int mr, const uint8_t *w,
                                                           const float *ws, const int8_t *q,
                                                           const float *d, const int32_t *xs,
                                                           int64_t ldq, int64_t ldd, int64_t b,
                                                           fvec *acc) {
  ivec u[8];
  UNROLL
  for (int t = 0; t < 4; t++) {
    const ivec v = wload(w + t * 64);
    u[2 * t] = lo_nib(v);
    u[2 * t + 1] = hi_nib(v);
  }
  UNROLL
  for (int m = 0; m < mr; m++) {
    const int8_t *x = q + m * ldq + b * W4B;
#if W4_VNNI
    ivec dot = izero();
    UNROLL
    for (int i = 0; i < 8; i++) dot = dpbusd(dot, u[i], xbcast(x + 4 * i));
#else
    ivec s16 = maddubs(u[0], xbcast(x));
    UNROLL
    for (int i = 1; i < 8; i++) s16 = add16(s16, maddubs(u[i], xbcast(x + 4 * i)));
    ivec dot = to32(s16);
#endif
    acc[m] = ffma_i(isub32(dot, xs[m * ldd + b]), fscale(ws, d[m * ldd + b]), acc[m]);
  }
}

/* Rows [0, mr) of one half-group: channels (lanes) whose chunks start at w (the half's offset
 * in the group's first chunk), scales ws (the half's in block 0), nblk blocks; stores the lanes
 * [l0, l1) of y's rows (ldy apart) at y, with bias (NULL: none). `end`: the end of the weights. */
static inline __attribute__((always_inline)) void w4_tile(const int mr, const uint8_t *w,
                                                          const float *ws, int64_t nblk,
                                                          const int8_t *q, const float *d,
                                                          const int32_t *xs, int64_t ldq,
                                                          int64_t ldd, const uint8_t *end,
                                                          int prefetch, const float *bias,
                                                          float *y, int64_t ldy, int l0, int l1) {
  fvec acc[W4M];
  UNROLL
  for (int m = 0; m < W4M; m++) acc[m] = fzero();
  for (int64_t b = 0; b < nblk; b++) {
    const uint8_t *wb = w + b * 4 * 64;
    if (prefetch)
      for (int t = 0; t < 4; t++)
        if (end - wb > t * 64 + W4_AHEAD) /* no pointer formed past the weights */
          _mm_prefetch((const char *)(wb + t * 64 + W4_AHEAD), _MM_HINT_T0);
    w4_block(mr, wb, ws + b * W4G, q, d, xs, ldq, ldd, b, acc);
  }
  for (int m = 0; m < mr; m++) {
    float lanes[HC];
    fstoreu(lanes, acc[m]);
    for (int l = l0; l < l1; l++) y[m * ldy + l] = bias ? lanes[l] + bias[l] : lanes[l];
  }
}

typedef void (*w4_tile_fn)(const uint8_t *, const float *, int64_t, const int8_t *,
                           const float *, const int32_t *, int64_t, int64_t, const uint8_t *,
                           int, const float *, float *, int64_t, int, int);
#define W4_TILE(R)                                                                             \
  static void w4_tile_##R(const uint8_t *w, const float *ws, int64_t nblk, const int8_t *q,    \
                          const float *d, const int32_t *xs, int64_t ldq, int64_t ldd,         \
                          const uint8_t *end, int pf, const float *bias, float *y,             \
                          int64_t ldy, int l0, int l1) {                                       \
    w4_tile(R, w, ws, nblk, q, d, xs, ldq, ldd, end, pf, bias, y, ldy, l0, l1);                \
  }
W4_TILE(1)
W4_TILE(2)
#if W4M > 2
W4_TILE(3)
W4_TILE(4)
static const w4_tile_fn W4_TILES[W4M + 1] = {0, w4_tile_1, w4_tile_2, w4_tile_3, w4_tile_4};
#else
static const w4_tile_fn W4_TILES[W4M + 1] = {0, w4_tile_1, w4_tile_2};
#endif

/* Columns [c0, c1) of y (M, N) = x @ dequant(w, ws)^T [+ bias (N,), may be NULL], x given as
 * mg_a8_quantize's (q, d) with xs from mg_w4_xsums; w, ws in the layout of the file's comment.
 * M, K, N >= 1; 0 <= c0 <= c1 <= N. */
void mg_w4_matmul_cols(const int8_t *q, const float *d, const int32_t *xs, const uint8_t *w,
                       const float *ws, const float *bias, float *y, int64_t M, int64_t K,
                       int64_t N, int64_t c0, int64_t c1) {
  const int64_t ldq = mg_a8_ldq(K), ldd = mg_a8_ldd(K), nblk = (K + W4B - 1) / W4B;
  const int64_t gbytes = nblk * W4B * W4G / 2, groups = (N + W4G - 1) / W4G;
  const uint8_t *end = w + groups * gbytes;
  for (int64_t n0 = c0 / HC * HC; n0 < c1; n0 += HC) {
    const int64_t g = n0 / W4G, half = n0 % W4G; /* half: 0, or 8 with AVX2 */
    const uint8_t *wg = w + g * gbytes + half * 4;
    const float *sg = ws + g * nblk * W4G + half;
    const int l0 = n0 < c0 ? (int)(c0 - n0) : 0, l1 = c1 - n0 < HC ? (int)(c1 - n0) : HC;
    for (int64_t m0 = 0; m0 < M; m0 += W4M) {
      const int mr = M - m0 < W4M ? (int)(M - m0) : W4M;
      W4_TILES[mr](wg, sg, nblk, q + m0 * ldq, d + m0 * ldd, xs + m0 * ldd, ldq, ldd, end,
                   m0 == 0, bias ? bias + n0 : 0, y + m0 * N + n0, N, l0, l1);
    }
  }
}

typedef struct {
  const int8_t *q;
  const float *d;
  const int32_t *xs;
  const uint8_t *w;
  const float *ws, *bias;
  float *y;
  int64_t M, K, N;
} w4_args;

/* Slices of mg_col_width's whole cache lines of output, 16 channels: whole groups (W4G). Cut in
 * groups instead, each a "column", the width rounded up to 16 groups: gate|up's 172 groups on
 * two threads were 96 and 76 groups, and the first thread's extra 12 % was the other's wait. */
_Static_assert(W4G == 16, "a slice of whole 16-float lines must be whole groups");
static void w4_slice(const void *ctx, int64_t c0, int64_t c1) {
  const w4_args *a = ctx;
  mg_w4_matmul_cols(a->q, a->d, a->xs, a->w, a->ws, a->bias, a->y, a->M, a->K, a->N, c0, c1);
}

/* The whole product, x (M, K) float32 quantized once here, on up to `threads` threads of the
 * pool sharing the groups of output channels in contiguous slices: equal to one thread's result
 * bit for bit. Returns 0, or -1 when out of memory for the quantized rows (y untouched). */
int mg_w4_matmul_threads(const float *x, const uint8_t *w, const float *ws, const float *bias,
                         float *y, int64_t M, int64_t K, int64_t N, int threads) {
  const int64_t ldq = mg_a8_ldq(K), ldd = mg_a8_ldd(K);
  int8_t *q = malloc((size_t)(M * ldq) + (size_t)(M * ldd) * (sizeof(float) + sizeof(int32_t)));
  if (!q) return -1;
  float *d = (float *)(q + M * ldq); /* ldq is a multiple of 32: d stays aligned */
  int32_t *xs = (int32_t *)(d + M * ldd);
  mg_a8_quantize(x, M, K, q, d);
  mg_w4_xsums(q, M, K, xs);
  const w4_args a = {q, d, xs, w, ws, bias, y, M, K, N};
  mg_parallel_cols(threads, N, w4_slice, &a);
  free(q);
  return 0;
}
#endif
