/* metagen native kernel: one inverse-CDF draw per row of a (B, V) float32 array of logits.
 *
 * Why: sampling 16 rows over a 32000-token vocabulary in PyTorch makes a dozen passes over the
 * logits (max, subtract, exp, a float64 block sum, cumulative sums, gathers) on one thread, a few
 * milliseconds a step next to a decode step of a few tens; this kernel makes two passes per row
 * (the max, then exp and the float64 block sums) plus one block's scan, and shares the rows
 * among the pool's threads.
 *
 * The draw is metagen.decoding.sampler.inverse_cdf_sample over the weights w = exp(x - max(x)):
 * blocks of SCAN_BLOCK tokens, each block's total summed in float64, the block whose cumulative
 * total first exceeds u * total, then the first token of that block whose float64 cumulative sum
 * (from the blocks before) exceeds u * total; a token of weight 0 is never returned. A weight
 * below exp(-87.3) (x more than 87.3 below the row's max, -inf among them) is 0, every other is
 * vexp's (relative error ~2e-7 against libm), so a draw can differ from PyTorch's only where u
 * falls within that rounding of a boundary. Each row is computed by the same instructions
 * whichever thread takes it: the result does not depend on the thread count.
 *
 * mg_draw_rows is a sampled row's whole step in one call from its raw logits: the draw over the
 * processed logits (a few masked ids, a temperature, applied as they are read, never written),
 * the raw logsumexp and the token's raw log-probability, and the bad rows (a non-finite
 * maximum), with no pre-pass, copy or per-row tensor operation around it.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "pool.h"
#include "simd.h"

#if MG_ISA
#define SCAN_BLOCK 256 /* as metagen.decoding.sampler.SCAN_BLOCK */
#define CUTOFF (-87.3f) /* below this x - max, the weight is 0 (vexp's clamp) */

/* The weights of one vector: exp(d), 0 in the lanes where d < CUTOFF. The Taylor polynomial goes
 * to degree 7: vexp's degree 6 errs by up to ~1e-7, always the same way, and summed over a
 * vocabulary that bias moved about one draw in a thousand onto the next token against PyTorch's
 * exp (which rounds within an ulp); degree 7 leaves only float32 rounding. */
static inline vec weight(vec d) {
  const vec e = vexp_taylor(vmax(d, vbcast(CUTOFF)), 7);
#if MG_ISA == 512
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(d, vbcast(CUTOFF), _CMP_GE_OQ), e);
#else
  return _mm256_and_ps(e, _mm256_cmp_ps(d, vbcast(CUTOFF), _CMP_GE_OQ));
#endif
}

/* w[0:SCAN_BLOCK] = exp(x[0:n] / t - top) (x / t rounded to float32 first, as PyTorch's
 * division; no division where t == 1; 0 where the difference is below CUTOFF, and past n). */
static void fill_weights(const float *x, int64_t n, float top, float t, float *w) {
  const vec vt = vbcast(t), vtop = vbcast(top);
  if (n == SCAN_BLOCK) { /* a whole block: the same values without masks and tails */
    if (t != 1.0f)
      for (int64_t j = 0; j < SCAN_BLOCK; j += VW)
        vstoreu(w + j, weight(vsub(vdiv(vloadu(x + j), vt), vtop)));
    else
      for (int64_t j = 0; j < SCAN_BLOCK; j += VW) vstoreu(w + j, weight(vsub(vloadu(x + j), vtop)));
    return;
  }
  for (int64_t j = 0; j < SCAN_BLOCK; j += VW) {
    const vmask m = mask_first(n - j);
    vec v = j < n ? vload(x + j, m) : vzero();
    if (t != 1.0f) v = vdiv(v, vt);
    vstoreu(w + j, j < n ? weight(vsub(v, vtop)) : vzero());
    if (n - j < VW)
      for (int64_t l = n > j ? n - j : 0; l < VW; l++) w[j + l] = 0.0f;
  }
}

/* The sum of w[0:SCAN_BLOCK] in float64, in a fixed order: eight running sums over w[l::8]
 * (the vector lanes of acc), then added pairwise. */
static double reduce8(const double *a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

#if MG_ISA == 512
typedef __m512d acc8; /* eight float64 running sums */
static inline acc8 acc_zero(void) { return _mm512_setzero_pd(); }
static inline acc8 acc_add(acc8 a, const float *w) {
  return _mm512_add_pd(a, _mm512_cvtps_pd(_mm256_loadu_ps(w)));
}
static inline double acc_sum(acc8 a) {
  double l[8];
  _mm512_storeu_pd(l, a);
  return reduce8(l);
}
#else
typedef struct { __m256d lo, hi; } acc8;
static inline acc8 acc_zero(void) { return (acc8){_mm256_setzero_pd(), _mm256_setzero_pd()}; }
static inline acc8 acc_add(acc8 a, const float *w) {
  return (acc8){_mm256_add_pd(a.lo, _mm256_cvtps_pd(_mm_loadu_ps(w))),
                _mm256_add_pd(a.hi, _mm256_cvtps_pd(_mm_loadu_ps(w + 4)))};
}
static inline double acc_sum(acc8 a) {
  double l[8];
  _mm256_storeu_pd(l, a.lo), _mm256_storeu_pd(l + 4, a.hi);
  return reduce8(l);
}
#endif

static double sum_weights(const float *w) {
  acc8 a = acc_zero();
  for (int64_t j = 0; j < SCAN_BLOCK; j += 8) a = acc_add(a, w + j);
  return acc_sum(a);
}

/* sum_weights of four blocks at w, w + SCAN_BLOCK, ... into s[0:4]: the same sums, their four
 * chains of additions interleaved (each one waits on the adder's latency alone). */
static void sum_weights4(const float *w, double *s) {
  acc8 a = acc_zero(), b = acc_zero(), c = acc_zero(), d = acc_zero();
  for (int64_t j = 0; j < SCAN_BLOCK; j += 8) {
    a = acc_add(a, w + j), b = acc_add(b, w + SCAN_BLOCK + j);
    c = acc_add(c, w + 2 * SCAN_BLOCK + j), d = acc_add(d, w + 3 * SCAN_BLOCK + j);
  }
  s[0] = acc_sum(a), s[1] = acc_sum(b), s[2] = acc_sum(c), s[3] = acc_sum(d);
}

/* fill_weights without division, and the weights' sum_weights. */
static double block_weights(const float *x, int64_t n, float top, float *w) {
  fill_weights(x, n, top, 1.0f, w);
  return sum_weights(w);
}

/* The block (of nb, with float64 totals sums) where the cumulative total first exceeds target
 * (the last one if none does); *before gets the blocks' total before it. */
static int64_t pick_block(const double *sums, int64_t nb, double target, double *before) {
  int64_t blk = 0;
  double b = 0;
  while (blk < nb - 1 && b + sums[blk] <= target) b += sums[blk++];
  *before = b;
  return blk;
}

/* In a block of n weights w after `before`: the first token whose cumulative sum exceeds target
 * (the block's own cumulative sum, then plus `before`: PyTorch's rounding); never one of weight
 * 0 (when u * total rounded onto the block's end: its last positive one). */
static int64_t pick_in_block(const float *w, int64_t n, double before, double target) {
  double cum = 0;
  int64_t j = 0;
  while (j < n - 1 && (cum += w[j]) + before <= target) j++;
  if (w[j] <= 0.0f)
    for (j = n - 1; j > 0 && w[j] <= 0.0f;) j--;
  return j;
}

/* Ascending ids in [0, V) whose logits count as -inf: `k` of them at `ids`. */
typedef struct {
  const int64_t *ids;
  int64_t k;
} masked_ids;

/* Zeroes w[id - lo] for the masked ids in [lo, lo + n); returns how many. */
static int64_t zero_masked(float *w, masked_ids m, int64_t lo, int64_t n) {
  int64_t hits = 0;
  for (int64_t i = 0; i < m.k; i++)
    if (m.ids[i] >= lo && m.ids[i] < lo + n) w[m.ids[i] - lo] = 0.0f, hits++;
  return hits;
}

/* sums[b] = the sum_weights of block b of x[0:V] (fill_weights against top and t, the masked
 * ids' weights zeroed), for each of its blocks; hit[b] (unless hit is NULL) whether a masked id
 * fell in block b. Four blocks at a time (sum_weights4). */
static void block_sums(const float *x, int64_t V, float top, float t, masked_ids m, double *sums,
                       char *hit) {
  const int64_t nb = (V + SCAN_BLOCK - 1) / SCAN_BLOCK;
  float w[4 * SCAN_BLOCK];
  for (int64_t b = 0; b < nb; b += 4) {
    const int64_t k = nb - b < 4 ? nb - b : 4;
    for (int64_t i = 0; i < k; i++) {
      const int64_t lo = (b + i) * SCAN_BLOCK, n = V - lo < SCAN_BLOCK ? V - lo : SCAN_BLOCK;
      fill_weights(x + lo, n, top, t, w + i * SCAN_BLOCK);
      const int64_t hits = zero_masked(w + i * SCAN_BLOCK, m, lo, n);
      if (hit) hit[b + i] = hits != 0;
    }
    if (k == 4)
      sum_weights4(w, sums + b);
    else
      for (int64_t i = 0; i < k; i++) sums[b + i] = sum_weights(w + i * SCAN_BLOCK);
  }
}

/* The row's maximum, NaN where the row holds a NaN (the vector max drops NaN lanes, so they are
 * looked for apart). */
static float row_max(const float *x, int64_t V) {
  const int64_t body = V / VW * VW;
  float top = -INFINITY;
  int nan = 0;
  if (body) {
    /* four running maxima (the maximum does not depend on the order), one NaN test */
    vec m = vloadu(x), m1 = m, m2 = m, m3 = m;
    const int64_t quad = VW + (body - VW) / (4 * VW) * (4 * VW);
#if MG_ISA == 512
    __mmask16 un = _mm512_cmp_ps_mask(m, m, _CMP_UNORD_Q);
    for (int64_t j = VW; j < quad; j += 4 * VW) {
      const vec a = vloadu(x + j), b = vloadu(x + j + VW), c = vloadu(x + j + 2 * VW),
                d = vloadu(x + j + 3 * VW);
      m = vmax(m, a), m1 = vmax(m1, b), m2 = vmax(m2, c), m3 = vmax(m3, d);
      un |= _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(c, d, _CMP_UNORD_Q);
    }
    for (int64_t j = quad; j < body; j += VW) {
      const vec v = vloadu(x + j);
      m = vmax(m, v);
      un |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    }
    nan = un != 0;
#else
    vec un = _mm256_cmp_ps(m, m, _CMP_UNORD_Q);
    for (int64_t j = VW; j < quad; j += 4 * VW) {
      const vec a = vloadu(x + j), b = vloadu(x + j + VW), c = vloadu(x + j + 2 * VW),
                d = vloadu(x + j + 3 * VW);
      m = vmax(m, a), m1 = vmax(m1, b), m2 = vmax(m2, c), m3 = vmax(m3, d);
      un = _mm256_or_ps(un, _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q),
                                         _mm256_cmp_ps(c, d, _CMP_UNORD_Q)));
    }
    for (int64_t j = quad; j < body; j += VW) {
      const vec v = vloadu(x + j);
      m = vmax(m, v);
      un = _mm256_or_ps(un, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    nan = _mm256_movemask_ps(un) != 0;
#endif
    m = vmax(vmax(m, m1), vmax(m2, m3));
    float lanes[VW];
    vstoreu(lanes, m);
    for (int l = 0; l < VW; l++) top = lanes[l] > top ? lanes[l] : top;
  }
  for (int64_t j = body; j < V; j++) {
    top = x[j] > top ? x[j] : top;
    nan |= x[j] != x[j];
  }
  return nan ? NAN : top;
}

/* The first j with x[j] == top, 0 if there is none (top NaN, say: the caller drops such rows). */
static int64_t first_equal(const float *x, int64_t V, float top) {
  const int64_t body = V / VW * VW;
  const vec t = vbcast(top);
  for (int64_t j = 0; j < body; j += VW) {
#if MG_ISA == 512
    const unsigned m = _mm512_cmp_ps_mask(vloadu(x + j), t, _CMP_EQ_OQ);
#else
    const unsigned m = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(vloadu(x + j), t, _CMP_EQ_OQ));
#endif
    if (m) return j + __builtin_ctz(m);
  }
  for (int64_t j = body; j < V; j++)
    if (x[j] == top) return j;
  return 0;
}

/* The float64 total of the row's weights exp(x - top) (top its maximum), block by block into
 * sums[0:nb] as well (nb = V / SCAN_BLOCK rounded up): log of it plus top is the row's lse. */
static double row_total(const float *x, int64_t V, float top, double *sums) {
  const int64_t nb = (V + SCAN_BLOCK - 1) / SCAN_BLOCK;
  double total = 0;
  block_sums(x, V, top, 1.0f, (masked_ids){NULL, 0}, sums, NULL);
  for (int64_t b = 0; b < nb; b++) total += sums[b];
  return total;
}

/* The row's log(sum exp(x)) (float64) into *lse, then, for u >= 0, its draw into *tok, or, for
 * u < 0 with `argmax`, the first index of its maximum and that maximum's log-probability
 * (float)(max - lse) into *lp: finite exactly where the row's maximum is (no NaN, no +inf, not
 * all -inf). Otherwise the row needs a finite maximum (the caller replaces rows without one, or
 * drops their result). */
static void sample_row(const float *x, int64_t V, double u, int argmax, int64_t *tok,
                       double *lse, float *lp) {
  const float top = row_max(x, V);
  const int64_t nb = (V + SCAN_BLOCK - 1) / SCAN_BLOCK;
  double sums[nb];
  float w[SCAN_BLOCK];
  const double total = row_total(x, V, top, sums);
  *lse = (double)top + log(total);
  if (u < 0) { /* logsumexp only, or with the argmax */
    if (argmax) *tok = first_equal(x, V, top), *lp = (float)((double)top - *lse);
    return;
  }
  double before;
  const int64_t blk = pick_block(sums, nb, u * total, &before);
  const int64_t n = V - blk * SCAN_BLOCK < SCAN_BLOCK ? V - blk * SCAN_BLOCK : SCAN_BLOCK;
  block_weights(x + blk * SCAN_BLOCK, n, top, w);
  *tok = blk * SCAN_BLOCK + pick_in_block(w, n, before, u * total);
}

/* The maximum of x[0:V] outside the masked ids (-inf if there is none), for a row without NaN:
 * row_max over the runs between them. */
static float unmasked_max(const float *x, int64_t V, masked_ids m) {
  float top = -INFINITY;
  int64_t lo = 0;
  for (int64_t i = 0; i <= m.k; i++) {
    const int64_t hi = i < m.k ? m.ids[i] : V;
    if (hi > lo) {
      const float t = row_max(x + lo, hi - lo);
      top = t > top ? t : top;
    }
    lo = hi + 1;
  }
  return top;
}

/* One row's whole sampling step from its RAW logits x[0:V]: the processed logits are x with
 * the masked ids at -inf, then divided by t (float32, t > 0); *tok gets the draw at u of
 * exp(processed - max) (sample_row's, bit for bit, as if it were given the processed row), *lse
 * the raw row's log(sum exp(x)) (bit for bit sample_row's on x) and *lp the token's raw
 * log-probability (float)(x[tok] - *lse). A row whose raw maximum is not finite (a NaN, a +inf,
 * or all -inf) gets *tok = -2; one whose processed maximum is not finite (every finite logit
 * masked, or overflow in the division) *tok = -1; either gets NaN in *lse and *lp. */
static void draw_row(const float *x, int64_t V, double u, float t, masked_ids m, int64_t *tok,
                     double *lse, float *lp) {
  *lse = NAN, *lp = NAN;
  const float raw_top = row_max(x, V);
  if (!isfinite(raw_top)) {
    *tok = -2;
    return;
  }
  int on_masked = 0; /* the maximum sits on a masked id: look for it outside them */
  for (int64_t i = 0; i < m.k; i++) on_masked |= x[m.ids[i]] == raw_top;
  float top = on_masked ? unmasked_max(x, V, m) : raw_top;
  if (t != 1.0f) top /= t; /* division is monotonic: the maximum of the divided row */
  if (!isfinite(top)) {
    *tok = -1;
    return;
  }
  const int plain = t == 1.0f && top == raw_top; /* unmasked blocks: the raw weights */
  const int64_t nb = (V + SCAN_BLOCK - 1) / SCAN_BLOCK;
  double sums[nb], raw_sums[nb];
  char hit[nb];
  float w[SCAN_BLOCK];
  block_sums(x, V, top, t, m, sums, hit);
  if (!plain) block_sums(x, V, raw_top, 1.0f, (masked_ids){NULL, 0}, raw_sums, NULL);
  double total = 0, raw_total = 0;
  for (int64_t b = 0; b < nb; b++) {
    const int64_t lo = b * SCAN_BLOCK, n = V - lo < SCAN_BLOCK ? V - lo : SCAN_BLOCK;
    total += sums[b];
    raw_total += !plain ? raw_sums[b] : hit[b] ? block_weights(x + lo, n, raw_top, w) : sums[b];
  }
  *lse = (double)raw_top + log(raw_total);
  double before;
  const int64_t blk = pick_block(sums, nb, u * total, &before);
  const int64_t lo = blk * SCAN_BLOCK, n = V - lo < SCAN_BLOCK ? V - lo : SCAN_BLOCK;
  fill_weights(x + lo, n, top, t, w);
  zero_masked(w, m, lo, n);
  *tok = lo + pick_in_block(w, n, before, u * total);
  *lp = (float)((double)x[*tok] - *lse);
}

/* SplitMix64's finalizer, as metagen.decoding.rng._mix. */
static inline uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* u[b] = metagen.decoding.rng.uniform_for(c[3b], c[3b + 1], c[3b + 2], stream) bit for bit, for
 * b < n: the finalizer chained over (seed, sample index, step, stream), the hash's top 53 bits
 * over 2**53. */
void mg_uniforms(const uint64_t *c, int64_t n, uint64_t stream, double *u) {
  for (int64_t b = 0; b < n; b++) {
    const uint64_t h = mix64(mix64(mix64(mix64(c[3 * b]) ^ c[3 * b + 1]) ^ c[3 * b + 2]) ^ stream);
    u[b] = (double)(h >> 11) * 0x1.0p-53;
  }
}

typedef struct {
  const float *x;
  const double *u;
  int64_t *tok;
  double *lse;
  float *lp;
  int64_t V, B;
  int argmax;
  const float *t;        /* mg_draw_rows: temperatures, or NULL (1) */
  const int64_t *ids;    /* mg_draw_rows: masked ids, row b's at ids[off[b]:off[b + 1]] */
  const int64_t *off;    /* or NULL: none */
  mg_stage rows;
} sample_job;

static void sample_task(void *ctx, int tid, int nth) {
  sample_job *j = ctx;
  (void)tid, (void)nth;
  for (int64_t b; (b = mg_claim(&j->rows, j->B)) >= 0; mg_done(&j->rows)) {
    if (j->u && j->lp) {
      const masked_ids m = {j->off ? j->ids + j->off[b] : NULL,
                            j->off ? j->off[b + 1] - j->off[b] : 0};
      draw_row(j->x + b * j->V, j->V, j->u[b], j->t ? j->t[b] : 1.0f, m, j->tok + b,
               j->lse + b, j->lp + b);
    } else {
      sample_row(j->x + b * j->V, j->V, j->u ? j->u[b] : -1.0, j->argmax, j->tok + b,
                 j->lse + b, j->lp + b);
    }
  }
  mg_wait(&j->rows, j->B);
}

/* For each row b < B of x (B, V), contiguous: lse[b] = log(sum_j exp(x[b, j])) in float64 and,
 * unless u is NULL, tok[b] drawn at u[b] in [0, 1) as above; on up to `threads` threads (rows
 * shared). */
void mg_sample_rows(const float *x, int64_t B, int64_t V, const double *u, int64_t *tok,
                    double *lse, int threads) {
  sample_job j = {x, u, tok, lse, NULL, V, B, 0, NULL, NULL, NULL, {0}};
  mg_parallel(threads < B ? threads : (int)B, sample_task, &j);
}

/* For each row b < B of x (B, V), contiguous: tok[b] the first index of the row's maximum (the
 * greedy token), lse[b] as mg_sample_rows computes it (bit for bit) and lp[b] the token's
 * log-probability (float)(x[b, tok[b]] - lse[b]), NaN where the row holds a NaN or +inf or no
 * finite value (a row is usable exactly where lp[b] is finite), in one call. */
void mg_argmax_rows(const float *x, int64_t B, int64_t V, int64_t *tok, double *lse, float *lp,
                    int threads) {
  sample_job j = {x, NULL, tok, lse, lp, V, B, 1, NULL, NULL, NULL, {0}};
  mg_parallel(threads < B ? threads : (int)B, sample_task, &j);
}

/* For each row b < B of the RAW logits x (B, V), contiguous: draw_row at u[b] with temperature
 * t[b] (t NULL: 1 for every row) and the masked ids ids[off[b]:off[b + 1]] (ascending, each in
 * [0, V); off NULL: none), its token, raw logsumexp and raw log-probability into tok[b], lse[b]
 * and lp[b] (tok[b] -2 / -1: a bad row / nothing to draw); one pass per row, the whole sampling
 * step of a row that nothing else processes. On up to `threads` threads (rows shared). */
void mg_draw_rows(const float *x, int64_t B, int64_t V, const double *u, const float *t,
                  const int64_t *ids, const int64_t *off, int64_t *tok, double *lse, float *lp,
                  int threads) {
  sample_job j = {x, u, tok, lse, lp, V, B, 0, t, ids, off, {0}};
  mg_parallel(threads < B ? threads : (int)B, sample_task, &j);
}
/* ---- a beam search step's candidates ------------------------------------------------------ */

/* Inserts (v, j) among the n (< cap) or cap values held in vals/ids, largest first; a value equal
 * to a held one goes after it (the callers offer ascending j: ties keep the lower index). Returns
 * the new count. */
static int64_t hold(float *vals, int64_t *ids, int64_t n, int64_t cap, float v, int64_t j) {
  if (n == cap && !(v > vals[cap - 1])) return n;
  int64_t p = n < cap ? n++ : cap - 1;
  for (; p > 0 && vals[p - 1] < v; p--) vals[p] = vals[p - 1], ids[p] = ids[p - 1];
  vals[p] = v, ids[p] = j;
  return n;
}

/* The k (1 <= k <= V) largest of x[0:V] (no NaN) into vals/ids, largest first, ties to the lower
 * index: the first k held, then a vector compare against the k-th skips everything below it. */
static void row_top(const float *x, int64_t V, int64_t k, float *vals, int64_t *ids) {
  int64_t n = 0, j = 0;
  for (; j < k; j++) n = hold(vals, ids, n, k, x[j], j);
  for (; j + VW <= V; j += VW) {
#if MG_ISA == 512
    unsigned m = _mm512_cmp_ps_mask(vloadu(x + j), vbcast(vals[k - 1]), _CMP_GT_OQ);
#else
    unsigned m = (unsigned)_mm256_movemask_ps(
        _mm256_cmp_ps(vloadu(x + j), vbcast(vals[k - 1]), _CMP_GT_OQ));
#endif
    for (; m; m &= m - 1) { /* hold re-checks each lane against the k-th as it rises */
      const int64_t l = j + __builtin_ctz(m);
      n = hold(vals, ids, n, k, x[l], l);
    }
  }
  for (; j < V; j++) n = hold(vals, ids, n, k, x[j], j);
}

typedef struct {
  const float *x;
  float *vals;   /* (B, k): each row's k largest logits, largest first */
  int64_t *ids;  /* (B, k): their indices */
  double *lse;   /* (B,): each row's logsumexp, NaN for a bad row */
  int64_t V, B, k;
  mg_stage rows;
} top_job;

static void top_task(void *ctx, int tid, int nth) {
  top_job *j = ctx;
  (void)tid, (void)nth;
  for (int64_t b; (b = mg_claim(&j->rows, j->B)) >= 0; mg_done(&j->rows)) {
    const float *x = j->x + b * j->V;
    const float top = row_max(x, j->V);
    if (!isfinite(top)) { /* a NaN, a +inf, or every logit -inf */
      j->lse[b] = NAN;
      continue;
    }
    double sums[(j->V + SCAN_BLOCK - 1) / SCAN_BLOCK];
    j->lse[b] = (double)top + log(row_total(x, j->V, top, sums));
    row_top(x, j->V, j->k, j->vals + b * j->k, j->ids + b * j->k);
  }
  mg_wait(&j->rows, j->B);
}

/* A beam search step's candidates from the RAW logits x (B, V), contiguous, of the B live beams
 * with running scores score[0:B]: candidate (b, t) scores acc = (float)((float)(x[b, t] -
 * lse[b]) + score[b]), lse[b] the row's logsumexp (float64, mg_sample_rows' bit for bit), i.e.
 * the beam's score plus the token's log-probability. The `keep` (>= 1) best, best first, ties to
 * the lower flat index b * V + t, go to acc[0:n] and flat[0:n], n = min(keep, B * V), returned.
 * Returns -1 when a row holds a NaN or a +inf or no finite value (nothing written), -2 when
 * scratch memory could not be had. Each row on one of up to `threads` threads (rows shared);
 * the result does not depend on the count. Only the rows' `keep` largest logits can be among
 * the best (a row's candidates rank as its logits do), so those are all that is merged. */
int64_t mg_beam_top(const float *x, int64_t B, int64_t V, const float *score, int64_t keep,
                    float *acc, int64_t *flat, int threads) {
  if (B <= 0 || V <= 0) return 0;
  const int64_t k = keep < V ? keep : V;
  float *vals = malloc((size_t)(B * k) * sizeof *vals);
  int64_t *ids = malloc((size_t)(B * k) * sizeof *ids);
  double *lse = malloc((size_t)B * sizeof *lse);
  int64_t n = -2;
  if (vals && ids && lse) {
    top_job j = {x, vals, ids, lse, V, B, k, {0}};
    mg_parallel(threads < B ? threads : (int)B, top_task, &j);
    n = 0;
    for (int64_t b = 0; b < B && n >= 0; b++)
      if (isnan(lse[b])) n = -1;
    for (int64_t b = 0; b < B && n >= 0; b++)
      for (int64_t i = 0; i < k; i++) {
        const float a = (float)((double)vals[b * k + i] - lse[b]) + score[b];
        const int64_t f = b * V + ids[b * k + i];
        if (n == keep) {
          if (a < acc[keep - 1]) break; /* this row's later candidates rank lower still */
          if (a == acc[keep - 1] && f > flat[keep - 1]) continue;
        }
        int64_t p = n < keep ? n++ : keep - 1;
        for (; p > 0 && (acc[p - 1] < a || (acc[p - 1] == a && flat[p - 1] > f)); p--)
          acc[p] = acc[p - 1], flat[p] = flat[p - 1];
        acc[p] = a, flat[p] = f;
      }
  }
  free(vals), free(ids), free(lse);
  return n;
}
#endif
