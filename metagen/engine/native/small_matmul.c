/* metagen native kernel: y (M, N) = x (M, K) @ w (K, N) [+ bias (N,)], float32, row-major,
 * every operand contiguous. Built at first use by metagen/engine/native/build.py.
 *
 * Why: for a few rows (2 <= M <= 16: beams, samples, speculative verification) MKL repacks the
 * weight on every call and runs at about half the memory bandwidth; decoding is bound by
 * streaming the weights once, which this kernel does for any M. Two schedules:
 *  - up to SMR rows (stream_rows): w is read once, in storage order, GR rows at a time, each
 *    vector of those rows feeding the accumulators of every x row; one sequential stream is
 *    what the hardware prefetchers follow best (one row: MKL's GEMV speed);
 *  - more rows: w is read in chunks of KC rows x NC columns: every weight row is read as one
 *    contiguous run of NC floats (the hardware prefetchers follow KC such streams), the
 *    NC-wide slice of y stays in L1/L2 between chunks, and a register tile of MR rows x NR
 *    vectors accumulates KC products per load of y. Rows beyond MR are further passes over the
 *    same weight chunk, served from cache.
 *
 * Summation order differs from MKL's, so results agree to rounding, not bit for bit.
 */
#include <stdint.h>

#include "pool.h"
#include "simd.h"

/* Which vector path this build has: 512 (AVX-512F), 256 (AVX2 + FMA) or 0 (none: do not call
 * mg_matmul). */
int mg_isa(void) { return MG_ISA; }

#if MG_ISA
#define TILE_COLS (NR * VW)
#define KC 16                                /* weight rows per chunk */
/* Whether a tile spreads its prefetches of the next chunk among its FMAs (see matmul_ld). */
#define PF_SPREAD (MG_ISA == 512)
#define NC (TILE_COLS * (4096 / TILE_COLS)) /* columns per chunk: about 4096, whole tiles */
/* The tile loops run over compile-time bounds; unrolled, the accumulators live in registers. */
#define UNROLL _Pragma("GCC unroll 16")
#if MG_ISA == 256
/* Keep a loaded weight vector in its register. Without it GCC 12 folds the load into every FMA
 * that uses the vector, as a memory operand: a 4 x 3 AVX2 tile then issued 12 vector loads and
 * 4 broadcasts for 12 FMAs per k, more than the two 256-bit loads a cycle that a Zen 3 core
 * feeds, so the FMAs waited on loads (16 rows at ~45 GFLOP/s a core). The empty asm claims to
 * change the register, so it is loaded once; it emits no instruction and changes no FMA. */
#define KEEP(v) __asm__("" : "+x"(v))
#else
#define KEEP(v) ((void)0)
#endif

/* The register tile: y[m, 0:cols] = (first ? bias or 0 : y[m, 0:cols])
 *                                    + sum_{k < kc} x[m, k] * w[k, 0:cols], for m < mr.
 * A full tile (cols = NR * VW) uses plain loads; the last, narrower tile of a row (`full` = 0)
 * masks vector r to its valid lanes `mask[r]`. Forced inline: GCC 12 left it out of line on AVX2,
 * with `full` a run-time argument, so full tiles ran masked loads with the masks spilled. */
static inline __attribute__((always_inline)) void tile(const int mr, const int full, const float *x,
                                                       int64_t ldx, const float *w, int64_t ldw,
                                                       const float *bias, float *y, int64_t ldy,
                                                       int64_t kc, int first, const vmask *mask,
                                                       const float *pf, int64_t npf) {
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
    if (PF_SPREAD && 2 * k < npf) __builtin_prefetch(pf + 32 * k, 0, 2); /* lines pf[0:npf) */
    if (PF_SPREAD && 2 * k + 1 < npf) __builtin_prefetch(pf + 32 * k + 16, 0, 2);
    vec wv[NR];
    UNROLL
    for (int r = 0; r < NR; r++) {
      wv[r] = LOAD(wk + r * VW, r);
      if (mr > 1) KEEP(wv[r]); /* one row uses each vector once: nothing to keep */
    }
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
                        int64_t, int64_t, int, const vmask *, const float *, int64_t);
#define TILE(R)                                                                                \
  static void full_##R(const float *x, int64_t ldx, const float *w, int64_t ldw,               \
                       const float *bias, float *y, int64_t ldy, int64_t kc, int first,        \
                       const vmask *mask, const float *pf, int64_t npf) {                      \
    tile(R, 1, x, ldx, w, ldw, bias, y, ldy, kc, first, mask, pf, npf);                        \
  }                                                                                            \
  static void tail_##R(const float *x, int64_t ldx, const float *w, int64_t ldw,               \
                       const float *bias, float *y, int64_t ldy, int64_t kc, int first,        \
                       const vmask *mask, const float *pf, int64_t npf) {                      \
    tile(R, 0, x, ldx, w, ldw, bias, y, ldy, kc, first, mask, pf, npf);                        \
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

#define GR 8 /* weight rows per sweep of stream_rows */
/* Most rows stream_rows takes; more go to the chunked tiles. On AVX2 the stream's 1 x sw tile
 * holds its rows' accumulators in registers up to 8 rows (8 + a weight vector + a broadcast of
 * the 16), where the chunked tiles' MR = 4 made 5 rows two passes (3 + 2) over each chunk:
 * products of 5, 6 and 7 rows (the verify step of 4-6 drafts) 1.40x, 1.15-1.22x, 1.06-1.09x
 * faster on one thread of a Zen 3, 8 rows the same (benchmarks/README.md). AVX-512: MR (not
 * measured beyond it). */
#define SMR (MG_ISA == 256 ? 8 : MR)
/* Floats ahead that a sweep of two or more rows prefetches on each of its GR weight rows, while
 * that stays within the row (stream_rows passes `pf`: no pointer past the weights). Where
 * the FMAs are a good part of the time (a Zen 4 retires one 512-bit FMA a cycle), the hardware
 * prefetchers alone left them and the memory barely overlapped: a 2-core Zen 4's step of four
 * rows 1.05-1.08x with 128 (two threads 1.05x; the AVX2 build 1.04-1.06x), 1.02-1.06x with 64;
 * one row lost (0.94x), so it has none. */
#define SPF 128

/* y (mr, N) = x (mr, K) @ w (K, N) [+ bias] for mr <= MR, sweeping w in storage order GR rows
 * at a time: per sw vectors of y (SW), their mr * sw accumulators are loaded once, take GR
 * weight vectors each (mr FMAs each) and are stored once, so y (mr x N floats) stays in L1/L2
 * and w is one sequential stream. One row: as fast as MKL's GEMV; the chunked tiles were ~8%
 * slower (benchmarks/README.md). */
static inline __attribute__((always_inline)) void sweep(const int mr, const int full, const int gr,
                                                        const int sw, const int pf,
                                                        const float *xs, const float *wk,
                                                        int64_t ldw, const float *bias, float *y,
                                                        int64_t ld, int first, vmask msk) {
#define LOAD(p) (full ? vloadu(p) : vload(p, msk))
  vec a[SMR][2];
  UNROLL
  for (int m = 0; m < mr; m++)
    UNROLL
    for (int s = 0; s < sw; s++)
      a[m][s] = !first ? LOAD(y + m * ld + s * VW) : (bias ? LOAD(bias + s * VW) : vzero());
  UNROLL
  for (int r = 0; r < gr; r++) {
    if (pf) __builtin_prefetch(wk + r * ldw + SPF, 0, 3);
    vec wv[2];
    UNROLL
    for (int s = 0; s < sw; s++) {
      wv[s] = LOAD(wk + r * ldw + s * VW);
      if (mr > 1) KEEP(wv[s]);
    }
    UNROLL
    for (int m = 0; m < mr; m++)
      UNROLL
      for (int s = 0; s < sw; s++) a[m][s] = vfma(vbcast(xs[r * SMR + m]), wv[s], a[m][s]);
  }
  UNROLL
  for (int m = 0; m < mr; m++)
    UNROLL
    for (int s = 0; s < sw; s++) {
      if (full)
        vstoreu(y + m * ld + s * VW, a[m][s]);
      else
        vstore(y + m * ld + s * VW, a[m][s], msk);
    }
#undef LOAD
}

/* Vectors of columns per sweep: two (a whole 64-byte line of each weight row) for one row on
 * AVX2, one elsewhere (AVX-512's vector is already a line). One row's decode step on the AVX2
 * build of a 2-core Zen 4: 1.09-1.11x with two; two rows measured no gain (0.97-0.99x of the
 * products). The same FMAs in the same order for every output element: the same bits. */
#define SW(mr) (MG_ISA == 256 && (mr) == 1 ? 2 : 1)

static inline __attribute__((always_inline)) void stream_rows(const int mr, const float *x,
                                                              const float *w, const float *bias,
                                                              float *y, int64_t K, int64_t N,
                                                              int64_t ldw, int64_t ld) {
  const int64_t body = N / VW * VW;
  const vmask tail = mask_first(N - body), all = mask_first(VW);
  float xs[GR * SMR]; /* x[0:mr, k:k+gr] by weight row, so each FMA broadcasts from one base */
  for (int64_t k = 0; k < K; k += GR) {
    const int gr = K - k < GR ? (int)(K - k) : GR;
    for (int r = 0; r < gr; r++)
      for (int m = 0; m < mr; m++) xs[r * SMR + m] = x[m * K + k + r];
    const float *wk = w + k * ldw;
    const int first = k == 0;
    const int sw = SW(mr);
    const int64_t wide = N / (sw * VW) * (sw * VW);
    const int64_t pf_end = mr >= 2 ? N - SPF : 0; /* columns whose prefetch stays in the row */
    if (gr == GR) { /* GR is a constant here: the sweep unrolls */
      for (int64_t j = 0; j < wide; j += sw * VW)
        sweep(mr, 1, GR, sw, j < pf_end, xs, wk + j, ldw, bias ? bias + j : 0, y + j, ld, first,
              all);
      for (int64_t j = wide; j < body; j += VW)
        sweep(mr, 1, GR, 1, j < pf_end, xs, wk + j, ldw, bias ? bias + j : 0, y + j, ld, first,
              all);
      if (body < N)
        sweep(mr, 0, GR, 1, body < pf_end, xs, wk + body, ldw, bias ? bias + body : 0, y + body,
              ld, first, tail);
    } else {
      for (int64_t j = 0; j < body; j += VW)
        sweep(mr, 1, gr, 1, j < pf_end, xs, wk + j, ldw, bias ? bias + j : 0, y + j, ld, first,
              all);
      if (body < N)
        sweep(mr, 0, gr, 1, body < pf_end, xs, wk + body, ldw, bias ? bias + body : 0, y + body,
              ld, first, tail);
    }
  }
}

typedef void (*stream_fn)(const float *, const float *, const float *, float *, int64_t, int64_t,
                          int64_t, int64_t);
#define STREAM(R)                                                                              \
  static void stream_##R(const float *x, const float *w, const float *bias, float *y,          \
                         int64_t K, int64_t N, int64_t ldw, int64_t ld) {                      \
    stream_rows(R, x, w, bias, y, K, N, ldw, ld);                                              \
  }
STREAM(1)
STREAM(2)
STREAM(3)
STREAM(4)
STREAM(5)
STREAM(6)
#if SMR > 6
STREAM(7)
STREAM(8)
static const stream_fn STREAMS[SMR + 1] = {0,        stream_1, stream_2, stream_3, stream_4,
                                           stream_5, stream_6, stream_7, stream_8};
#else
static const stream_fn STREAMS[SMR + 1] = {0,        stream_1, stream_2, stream_3,
                                           stream_4, stream_5, stream_6};
#endif

/* Chunk (k0, c0) of w: kc rows of nc columns from row k0, column c0. */
typedef struct {
  int64_t k0, c0, kc, nc;
} chunk;

/* The chunk after `c` in mg_matmul's order (down the rows, then across), or kc = 0 at the end. */
static chunk next_chunk(chunk c, int64_t K, int64_t N) {
  chunk n = {c.k0 + KC, c.c0, 0, c.nc};
  if (n.k0 >= K) n.k0 = 0, n.c0 = c.c0 + NC, n.nc = N - n.c0 < NC ? N - n.c0 : NC;
  if (n.c0 < N) n.kc = K - n.k0 < KC ? K - n.k0 : KC;
  return n;
}

/* Rows in pass `pass` of the fewest passes of at most cap rows that cover M rows, balanced (9 rows
 * with cap 4: 3 + 3 + 3, not 4 + 4 + 1, whose one-row tile has too few accumulators to hide the
 * FMA latency). */
static inline int mr_of(int64_t M, int64_t pass, int64_t cap) {
  const int64_t passes = (M + cap - 1) / cap;
  return (int)(M / passes + (pass < M % passes));
}

/* y (M, N) = x (M, K) @ w (K, N) [+ bias (N,), may be NULL], where w has rows of ldw >= N floats
 * and y rows of ld >= N (N of them used: a slice of columns of wider matrices, or one panel of a
 * panel-major weight, mg_matmul_panel). M, K, N >= 1.
 * Up to SMR rows: stream_rows. More: chunked tiles, where the passes after the first over a chunk
 * are arithmetic on cached weights while the first waits on memory; so the tiles also prefetch
 * the next chunk into L2, and the next chunk's first pass finds it there (16 rows: 44 -> 33 ms
 * for the benchmark target's products; table in benchmarks/README.md). Each tile takes its share
 * of the next chunk's lines: on AVX-512 (PF_SPREAD) a run within one row, prefetched two lines
 * per k step among the tile's FMAs, where a burst after each tile left the prefetches waiting on
 * each other for the line fill buffers (16 rows 1.05x, 8 rows 1.11x CPU time, interleaved); on
 * AVX2 that burst, which the spread did not beat there (0.94-0.98x). */
static void matmul_ld(const float *x, const float *w, const float *bias, float *y, int64_t M,
                      int64_t K, int64_t N, int64_t ldw, int64_t ld) {
  if (M <= SMR) {
    STREAMS[M](x, w, bias, y, K, N, ldw, ld);
    return;
  }
  chunk c = {0, 0, K < KC ? K : KC, N < NC ? N : NC};
  for (; c.kc; c = next_chunk(c, K, N)) {
    const chunk nx = next_chunk(c, K, N);
    const int64_t row_lines = (nx.nc + 15) / 16; /* 64-byte lines per row of the next chunk */
    const int64_t tiles = ((M + MR - 1) / MR) * ((c.nc + TILE_COLS - 1) / TILE_COLS);
    int64_t left = nx.kc * row_lines, col = 0; /* lines still to prefetch; line in its row */
    const int64_t share = (left + tiles - 1) / tiles + PF_SPREAD; /* +1: runs end at rows' ends */
    const float *row = w + nx.k0 * ldw + nx.c0;
    for (int64_t m0 = 0, pass = 0; m0 < M; m0 += mr_of(M, pass++, MR)) {
      const int mr = mr_of(M, pass, MR);
      for (int64_t j = c.c0; j < c.c0 + c.nc; j += TILE_COLS) {
        const int64_t cols = c.c0 + c.nc - j;
        vmask mask[NR];
        for (int r = 0; r < NR; r++) mask[r] = mask_first(cols - r * VW);
        int64_t npf = share < row_lines - col ? share : row_lines - col; /* spread: one run */
        npf = !PF_SPREAD ? 0 : npf < left ? npf : left;
        npf = npf < 2 * c.kc ? npf : 2 * c.kc;
        (cols >= TILE_COLS ? FULL : TAIL)[mr](x + m0 * K + c.k0, K, w + c.k0 * ldw + j, ldw,
                                              bias ? bias + j : 0, y + m0 * ld + j, ld, c.kc,
                                              c.k0 == 0, mask, row + col * 16, npf);
        left -= npf;
        if ((col += npf) == row_lines) col = 0, row += ldw;
        for (int64_t i = 0; !PF_SPREAD && i < share && left > 0; i++, left--) { /* a burst */
          __builtin_prefetch(row + col * 16, 0, 2);
          if (++col == row_lines) col = 0, row += ldw;
        }
      }
    }
  }
}

/* y = x @ w [+ bias] as matmul_ld, for M, K, N >= 1. */
void mg_matmul(const float *x, const float *w, const float *bias, float *y, int64_t M, int64_t K,
               int64_t N) {
  matmul_ld(x, w, bias, y, M, K, N, N, N);
}

/* Columns [c0, c1) of y = x @ w [+ bias] (M, K, N as mg_matmul). Every element is the same
 * chain of FMAs in the same order (bias or 0, then k = 0, 1, ..., K - 1) whichever schedule and
 * slice computes it, so slices computed apart equal the whole product bit for bit. */
void mg_matmul_cols(const float *x, const float *w, const float *bias, float *y, int64_t M,
                    int64_t K, int64_t N, int64_t c0, int64_t c1) {
  if (c1 > c0) matmul_ld(x, w + c0, bias ? bias + c0 : 0, y + c0, M, K, c1 - c0, N, N);
}

/* Panel-major weights (mg_matmul_panels): the columns in panels, each panel (K, its width)
 * row-major, one after another, so a panel, and a run of whole panels, is one contiguous region.
 * A product of one row over panels of PANEL_COLS columns reads PANEL_GROUP of them at once in
 * storage order, prefetching each PANEL_AHEAD bytes ahead: on the 2-core Xeon (AVX-512, no VNNI)
 * the o and down products of workload A took 1.20x less thread CPU time so than row-major at
 * one thread and 1.22x at two (benchmarks/README.md), where one panel at a time without the
 * prefetch gained 1.08x, and the row-major sweep order over a panel lost.
 * PANEL_COLS: the register tile's width where that is whole cache lines (AVX-512: 64 floats),
 * else one line (AVX2, whose tile is 24 floats: 16, two vectors). */
#define PANEL_GROUP 4
#define PANEL_COLS (TILE_COLS % 16 == 0 ? TILE_COLS : 16)
#define PNR (PANEL_COLS / VW) /* vectors per panel row */
/* Most rows per pass over a panel: AVX2's panel is two vectors wide, so 6 rows' accumulators fit
 * (12 + 2 weight vectors + a broadcast of the 16 registers), where MR = 4 made 5 rows two passes
 * (3 + 2): the o and down products of a 5-row step (4 drafts' verification) cost 1.74-1.78x one
 * row's on one thread of a Zen 3, the row-major products streaming 5 rows 1.23-1.33x
 * (benchmarks/README.md). AVX-512: MR (its panel is the whole register tile). */
#define PMR (MG_ISA == 256 ? 6 : MR)
#ifndef PANEL_AHEAD
#define PANEL_AHEAD 4096 /* bytes; 2048 and 8192 measured 1.20x and 1.16x against 4096's 1.22x */
#endif

/* How many of a panel's K rows may prefetch PANEL_AHEAD bytes past them, from w's, with `span`
 * floats of further streams beyond it, staying before `end` (the weight's end). */
static inline int64_t ahead_rows(const float *w, const float *end, int64_t span, int64_t K) {
  const int64_t room = (int64_t)(end - w) - span - PANEL_AHEAD / 4 - PANEL_COLS; /* floats */
  if (room < 0) return 0;
  return room / PANEL_COLS + 1 < K ? room / PANEL_COLS + 1 : K;
}

/* y[m, i PANEL_COLS + c] (c < PANEL_COLS) = bias or 0 + sum_k x[m, k] * w[i K PANEL_COLS + k
 * PANEL_COLS + c] for m < mr, i < g (mr g <= PMR): g consecutive panels of K rows of PANEL_COLS
 * floats, their register tiles walking them together in storage order, k = 0, 1, ... (tile()'s
 * chain of FMAs for every column): g sequential streams, K PANEL_COLS floats apart, keep more
 * memory requests in flight than one. */
static inline __attribute__((always_inline)) void panel_tiles(const int mr, const int g,
                                                              const float *x, int64_t K,
                                                              const float *w, const float *bias,
                                                              float *y, int64_t ldy,
                                                              const float *end) {
  vec acc[PMR][PNR];
  const int64_t pk = K * PANEL_COLS, kpf = ahead_rows(w, end, (g - 1) * pk, K);
  UNROLL
  for (int m = 0; m < mr * g; m++)
    UNROLL
    for (int r = 0; r < PNR; r++)
      acc[m][r] = bias ? vloadu(bias + m / mr * PANEL_COLS + r * VW) : vzero();
  for (int64_t k = 0; k < K; k++) {
    UNROLL
    for (int i = 0; i < g; i++) {
      const float *wk = w + i * pk + k * PANEL_COLS;
      if (k < kpf)
        for (int b = 0; b < PANEL_COLS; b += 16)
          _mm_prefetch((const char *)(wk + PANEL_AHEAD / 4 + b), _MM_HINT_T0);
      vec wv[PNR];
      UNROLL
      for (int r = 0; r < PNR; r++) {
        wv[r] = vloadu(wk + r * VW);
        if (mr > 1) KEEP(wv[r]);
      }
      UNROLL
      for (int m = 0; m < mr; m++) {
        const vec bx = vbcast(x[m * K + k]);
        UNROLL
        for (int r = 0; r < PNR; r++) acc[i * mr + m][r] = vfma(bx, wv[r], acc[i * mr + m][r]);
      }
    }
  }
  UNROLL
  for (int i = 0; i < g; i++)
    UNROLL
    for (int m = 0; m < mr; m++)
      UNROLL
      for (int r = 0; r < PNR; r++)
        vstoreu(y + m * ldy + i * PANEL_COLS + r * VW, acc[i * mr + m][r]);
}

typedef void (*panel_fn)(const float *, int64_t, const float *, const float *, float *, int64_t,
                         const float *);
#define PANELS(R, G)                                                                           \
  static void panels_##R##_##G(const float *x, int64_t K, const float *w, const float *bias,   \
                               float *y, int64_t ldy, const float *end) {                      \
    panel_tiles(R, G, x, K, w, bias, y, ldy, end);                                             \
  }
PANELS(1, 4) /* PANEL_GROUP */
PANELS(1, 1)
PANELS(2, 1)
PANELS(3, 1)
PANELS(4, 1)
PANELS(5, 1)
PANELS(6, 1)
static const panel_fn PANEL_TILES[PMR + 1] = {0,          panels_1_1, panels_2_1, panels_3_1,
                                              panels_4_1, panels_5_1, panels_6_1};

/* Columns [c0, c1) of y = x @ W [+ bias] (M, K, N as mg_matmul) for W stored panel-major: the
 * columns in panels of p (a multiple of 16) floats, the last one narrower where p does not
 * divide N, each panel (K, its width) row-major and the panels one after another (panel j at
 * w + j * p * K). c0 is a multiple of p, c1 one or N. Each panel is one contiguous run of
 * memory, so a slice of whole panels is too: a thread streams one region, where its slice of
 * a row-major W is a run of (c1 - c0) floats in every row (for a hidden-wide output on two
 * threads, 1 KB of each 2 KB row). Panels of PANEL_COLS columns run in storage order
 * (panel_tiles), up to PMR rows at a time: more rows where the panel is not the register tile's
 * width (AVX2) take further passes of at most PMR rows over the panel, from cache (its K
 * PANEL_COLS floats: 22 KB for a 1376-row down projection), where matmul_ld would run it as
 * masked tail tiles; other panels run as mg_matmul_cols does a slice. Every element is
 * mg_matmul_cols's chain of FMAs, so the result equals the row-major product bit for bit. */
void mg_matmul_panels(const float *x, const float *w, const float *bias, float *y, int64_t M,
                      int64_t K, int64_t N, int64_t p, int64_t c0, int64_t c1) {
  const float *end = w + K * N;
  if (M == 1 && p == PANEL_COLS) /* PANEL_GROUP panels at once while whole ones remain */
    for (; c0 + PANEL_GROUP * p <= c1; c0 += PANEL_GROUP * p)
      panels_1_4(x, K, w + c0 * K, bias ? bias + c0 : 0, y + c0, N, end);
  for (int64_t j = c0; j < c1; j += p) {
    const int64_t n = c1 - j < p ? c1 - j : p;
    if (n == PANEL_COLS && (M <= PMR || PANEL_COLS != TILE_COLS)) /* M <= PMR: one pass */
      for (int64_t m0 = 0, pass = 0; m0 < M; m0 += mr_of(M, pass++, PMR))
        PANEL_TILES[mr_of(M, pass, PMR)](x + m0 * K, K, w + j * K, bias ? bias + j : 0,
                                    y + m0 * N + j, N, end);
    else
      matmul_ld(x, w + j * K, bias ? bias + j : 0, y + j, M, K, n, n, N);
  }
}

/* The panel width (floats) mg_matmul_panels runs in storage order on this build: PANEL_COLS
 * (AVX-512: 64; AVX2: 16, where the step's o and down products of workload A at two threads of
 * a 2-core Zen 3 ran faster so than from row-major weights: benchmarks/README.md). */
int64_t mg_panel_width(void) { return PANEL_COLS; }

typedef struct {
  const float *x, *w, *bias;
  float *y;
  int64_t M, K, N;
} matmul_args;

static void matmul_slice(const void *ctx, int64_t c0, int64_t c1) {
  const matmul_args *a = ctx;
  mg_matmul_cols(a->x, a->w, a->bias, a->y, a->M, a->K, a->N, c0, c1);
}

/* mg_matmul on up to `threads` threads of the pool, which share the output columns in units of
 * whole cache lines (each reading its units' columns of w): equal to mg_matmul bit for bit. */
void mg_matmul_threads(const float *x, const float *w, const float *bias, float *y, int64_t M,
                       int64_t K, int64_t N, int threads) {
  const matmul_args a = {x, w, bias, y, M, K, N};
  mg_parallel_cols(threads, N, matmul_slice, &a);
}
#endif
