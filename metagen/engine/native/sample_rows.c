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
 */
#include <math.h>
#include <stdint.h>

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

/* w[0:SCAN_BLOCK] = exp(x[0:n] - top) (0 where x - top < CUTOFF, and past n); returns their sum
 * in float64, in a fixed order (eight running sums over w[l::8], then added pairwise). */
static double block_weights(const float *x, int64_t n, float top, float *w) {
  for (int64_t j = 0; j < SCAN_BLOCK; j += VW) {
    const vmask m = mask_first(n - j);
    vstoreu(w + j, j < n ? weight(vsub(vload(x + j, m), vbcast(top))) : vzero());
    if (n - j < VW)
      for (int64_t l = n > j ? n - j : 0; l < VW; l++) w[j + l] = 0.0f;
  }
  double a[8] = {0};
  for (int64_t j = 0; j < SCAN_BLOCK; j += 8)
    for (int l = 0; l < 8; l++) a[l] += w[j + l];
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* The row's maximum, NaN where the row holds a NaN (the vector max drops NaN lanes, so they are
 * looked for apart). */
static float row_max(const float *x, int64_t V) {
  const int64_t body = V / VW * VW;
  float top = -INFINITY;
  int nan = 0;
  if (body) {
    vec m = vloadu(x);
#if MG_ISA == 512
    __mmask16 un = _mm512_cmp_ps_mask(m, m, _CMP_UNORD_Q);
    for (int64_t j = VW; j < body; j += VW) {
      const vec v = vloadu(x + j);
      m = vmax(m, v);
      un |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    }
    nan = un != 0;
#else
    vec un = _mm256_cmp_ps(m, m, _CMP_UNORD_Q);
    for (int64_t j = VW; j < body; j += VW) {
      const vec v = vloadu(x + j);
      m = vmax(m, v);
      un = _mm256_or_ps(un, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    nan = _mm256_movemask_ps(un) != 0;
#endif
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
  double total = 0;
  for (int64_t b = 0; b < nb; b++) {
    const int64_t n = V - b * SCAN_BLOCK < SCAN_BLOCK ? V - b * SCAN_BLOCK : SCAN_BLOCK;
    sums[b] = block_weights(x + b * SCAN_BLOCK, n, top, w);
    total += sums[b];
  }
  *lse = (double)top + log(total);
  if (u < 0) { /* logsumexp only, or with the argmax */
    if (argmax) *tok = first_equal(x, V, top), *lp = (float)((double)top - *lse);
    return;
  }
  const double target = u * total;
  int64_t blk = 0;
  double before = 0;
  while (blk < nb - 1 && before + sums[blk] <= target) before += sums[blk++];
  const int64_t n = V - blk * SCAN_BLOCK < SCAN_BLOCK ? V - blk * SCAN_BLOCK : SCAN_BLOCK;
  block_weights(x + blk * SCAN_BLOCK, n, top, w);
  double cum = 0; /* the block's own cumulative sum, then plus `before`: PyTorch's rounding */
  int64_t j = 0;
  while (j < n - 1 && (cum += w[j]) + before <= target) j++;
  if (w[j] <= 0.0f) /* only when u * total rounded onto the block's end: its last positive */
    for (j = n - 1; j > 0 && w[j] <= 0.0f;) j--;
  *tok = blk * SCAN_BLOCK + j;
}

typedef struct {
  const float *x;
  const double *u;
  int64_t *tok;
  double *lse;
  float *lp;
  int64_t V, B;
  int argmax;
  mg_stage rows;
} sample_job;

static void sample_task(void *ctx, int tid, int nth) {
  sample_job *j = ctx;
  (void)tid, (void)nth;
  for (int64_t b; (b = mg_claim(&j->rows, j->B)) >= 0; mg_done(&j->rows))
    sample_row(j->x + b * j->V, j->V, j->u ? j->u[b] : -1.0, j->argmax, j->tok + b, j->lse + b,
               j->lp + b);
  mg_wait(&j->rows, j->B);
}

/* For each row b < B of x (B, V), contiguous: lse[b] = log(sum_j exp(x[b, j])) in float64 and,
 * unless u is NULL, tok[b] drawn at u[b] in [0, 1) as above; on up to `threads` threads (rows
 * shared). */
void mg_sample_rows(const float *x, int64_t B, int64_t V, const double *u, int64_t *tok,
                    double *lse, int threads) {
  sample_job j = {x, u, tok, lse, NULL, V, B, 0, {0}};
  mg_parallel(threads < B ? threads : (int)B, sample_task, &j);
}

/* For each row b < B of x (B, V), contiguous: tok[b] the first index of the row's maximum (the
 * greedy token), lse[b] as mg_sample_rows computes it (bit for bit) and lp[b] the token's
 * log-probability (float)(x[b, tok[b]] - lse[b]), NaN where the row holds a NaN or +inf or no
 * finite value (a row is usable exactly where lp[b] is finite), in one call. */
void mg_argmax_rows(const float *x, int64_t B, int64_t V, int64_t *tok, double *lse, float *lp,
                    int threads) {
  sample_job j = {x, NULL, tok, lse, lp, V, B, 1, {0}};
  mg_parallel(threads < B ? threads : (int)B, sample_task, &j);
}
#endif
