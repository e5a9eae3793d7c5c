/* metagen native decode step: every decoder layer of a Llama-family model for a few new tokens
 * (decoding rows, beams, samples, speculative verification), float32, in one call.
 *
 * Why: at 1-16 tokens a layer is four weight-streaming products (mg_matmul) plus some forty
 * small operators (norms, rotary embedding, cache write, attention, SiLU gate, residuals). In
 * PyTorch each small operator is a dispatched kernel with its own allocation, and together they
 * cost as much as the products; here they run on data already in cache, between the products.
 *
 * The math is the PyTorch path's (metagen/engine/models/llama.py), in float32:
 *   x = rms_norm(h) * w_in;  q|k|v = x @ W_qkv [+ b];  [q, k = per-head rms_norm];  rope(q, k);
 *   write k, v to their cache slots;  a = attention;  h += a @ W_o;
 *   x = rms_norm(h) * w_post;  g|u = x @ W_gate_up;  h += (silu(g) * u) @ W_down.
 * Attention (grouped-query) is an online softmax (running max, sum and weighted values per
 * query head, FlashAttention's rescaling). Rows of a prefix group (Hydragen) first attend to the
 * group's shared prefix together, so each prefix key and value is read once per group, then
 * each token attends to its own row's positions from the end of that prefix up to its own.
 * A float32 cache is read position by position, every kv head of a unit in turn (attend_pm); a
 * group's queries go across vector lanes (attend_group) unless they are few (SMALL_GROUP).
 * A row's own positions are attended in chunks of a length set by its context alone
 * (own_chunk), each chunk's state folded into the row's in chunk order (split-K).
 * Summation orders differ from PyTorch's: results agree to rounding, not bit for bit.
 * The step (mg_decode_step_q8) and attention alone (mg_attention_q8) also run on an int8 cache
 * with one float32 scale per block and kv head: each key block is dequantized into the thread's
 * scratch, then attended as above; the step quantizes each row's new K/V into its blocks with
 * metagen/engine/kv_quant.py's arithmetic (write_q8), as the q|k|v product makes them.
 *
 * Threads (pool.h): every thread walks the layers' stages (q|k|v product, in units of whole
 * heads, each head then normed, rotated and written to the cache by its unit |
 * prefix-group attention | own-position attention | o product + residual |
 * gate|up product | down product + residual), claiming units of each and waiting for the stage
 * to finish before the next; the RMSNorms and the SiLU gate, a few rows' worth, are made by each
 * thread for itself where a product reads them, instead of in stages of their own (each stage
 * ends in a wait). Products are cut by output columns, so each weight row is read once per step,
 * in whole-cache-line slices (whole panels of a panel-major weight, mg_layer's *_p: then each
 * thread's slice is one contiguous region); attention by (group or row, run of kv heads), or,
 * with fewer rows than threads, by (chunk of a row's positions, run of kv heads). Each
 * output element is computed by the one-thread path's instructions in its order, so the result
 * is the same bit for bit on any number of threads. Int8 products whose activations are
 * quantized too (act8, q8_act.c) quantize their input into the thread's own buffer at the first
 * unit it claims in the stage: a pure function of the input, so every thread's copy is the same.
 */
#ifdef MG_STAGE_CLOCK
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <time.h>
#endif
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "simd.h"

void mg_matmul_cols(const float *x, const float *w, const float *bias, float *y, int64_t M,
                    int64_t K, int64_t N, int64_t c0, int64_t c1);
void mg_matmul_panels(const float *x, const float *w, const float *bias, float *y, int64_t M,
                      int64_t K, int64_t N, int64_t p, int64_t c0, int64_t c1);
void mg_q8_matmul_cols(const float *x, const int8_t *w, const float *scale, const float *bias,
                       float *y, int64_t M, int64_t K, int64_t N, int64_t c0, int64_t c1);
int64_t mg_a8_ldq(int64_t K);
int64_t mg_a8_ldd(int64_t K);
void mg_a8_quantize(const float *x, int64_t M, int64_t K, int8_t *q, float *d);
void mg_w4_xsums(const int8_t *q, int64_t M, int64_t K, int32_t *xs);
void mg_w4_matmul_cols(const int8_t *q, const float *d, const int32_t *xs, const uint8_t *w,
                       const float *ws, const float *bias, float *y, int64_t M, int64_t K,
                       int64_t N, int64_t c0, int64_t c1);
void mg_a8_matmul_cols(const int8_t *q, const float *d, const int8_t *w, const float *scale,
                       const float *bias, float *y, int64_t M, int64_t K, int64_t N, int64_t c0,
                       int64_t c1);

/* Shapes and shared tables of a model. */
typedef struct {
  int64_t hidden, n_heads, n_kv_heads, head_dim, inter, n_layers;
  float eps, scale;       /* RMSNorm epsilon; attention scale (head_dim ** -0.5) */
  const float *cos, *sin; /* (max_positions, head_dim), HF layout (the two halves repeat) */
  const float *final_norm; /* the model's last RMSNorm weight (hidden), or NULL: not applied */
} mg_model;

/* One layer's weights; float32 projections are (in, out) row-major, or panel-major where their
 * *_p is set: columns in panels of *_p floats (a multiple of 16), each panel (in, its width)
 * row-major, one after another (mg_matmul_panels). Optional ones are NULL. A projection
 * quantized to int8 has its float pointer NULL and instead its *_q weight, (out, in) int8, and
 * *_s scales, (out,) float32 (int8_matmul.c); with act8 = 1, the int8 products quantize their
 * activations too (q8_act.c). act8 = 2: the projections are int4 (q4.c): *_q their packed bytes,
 * *_s their group scales, the activations quantized as with act8 = 1. */
typedef struct {
  const float *input_norm, *qkv, *qkv_bias, *q_norm, *k_norm, *o, *post_norm, *gate_up, *down;
  const int8_t *qkv_q, *o_q, *gate_up_q, *down_q;
  const float *qkv_s, *o_s, *gate_up_s, *down_s;
  int64_t act8;
  int64_t qkv_p, o_p, gate_up_p, down_p; /* panel widths; 0: row-major */
} mg_layer;

/* The step: which tokens, where they sit, what they attend to.
 * Row r owns the hidden rows tok_off[r] .. tok_off[r + 1) - 1; its j-th new token is at position
 * start[r] + j. Position p of row r lives in cache slot
 *   tables[r * max_blocks + p / block_size] * block_size + p % block_size.
 * A token attends to its row's positions own_from[r] .. its own position; positions before
 * own_from[r] (0 unless the row is in a prefix group) come from its group: group g holds the rows
 * group_rows[group_off[g] .. group_off[g + 1]), which share their first own_from[r] positions
 * in the same blocks. Row r's tokens are rotated (RoPE) at their position + rope_off[r] (the
 * tokens token dropping removed from the row's table before them).
 * A draft tree's leaves (tok_at, NULL where the step has none): flat token t is stored at its
 * position but stands at tok_at[t] (a leaf: tok_at[t] < its position, the position after its
 * parent's; any other token: tok_at[t] = its position). It is rotated at tok_at[t] + rope_off[r]
 * and attends the positions before tok_at[t] and its own: its ancestors, never the other
 * branches stored between. */
typedef struct {
  int64_t n_rows, block_size, max_blocks, n_groups;
  const int64_t *tables, *start, *tok_off, *own_from, *group_off, *group_rows, *rope_off;
  const int64_t *tok_at;
} mg_plan;

#if MG_ISA
#define KB 32 /* keys per online-softmax block */
/* Positions ahead that attend_pm prefetches. One row over 1024 positions from memory, 8 layers,
 * against the head-by-head order: none 1.14x, 2 1.65x, 4 1.80x, 8 1.72x (2-core Zen 4). */
#define PMPF 4
/* The most queries per kv head for which a Hydragen group's prefix is attended by attend (each
 * query alone, the prefix read position by position) rather than attend_group (the queries
 * across a vector's lanes, each key element broadcast to them): with a quarter of a vector or
 * less most lanes are idle while the broadcasts cost as much as with a full one. Group attention
 * of one step, 2-core Zen 4 (benchmarks.step_stages): AVX-512, 4 queries 568 us against 1080
 * (step 1.14x; two threads 1.06x), 2 queries 349 against 949 (1.20x), 8 queries 1997 against
 * 1701; AVX2, 2 queries 1.09x (two threads 1.03x), 4 queries one thread 0.99x, two 0.95x. A
 * row's arithmetic over a shared prefix so depends on how many queries share it, as it already
 * differed from attending alone. */
#define SMALL_GROUP (VW / 4)
#define UNROLL4 _Pragma("GCC unroll 4")
#define UNROLL8 _Pragma("GCC unroll 8")

static float dot(const float *a, const float *b, int64_t n) {
  vec acc = vzero();
  for (int64_t i = 0; i < n; i += VW) {
    const vmask m = mask_first(n - i);
    acc = vfma(vload(a + i, m), vload(b + i, m), acc);
  }
  return vsum(acc);
}

/* y = x * rsqrt(mean(x^2) + eps) * w over n floats (y may be x). */
static void rms_norm(const float *x, const float *w, float *y, int64_t n, float eps) {
  const float r = 1.0f / sqrtf(dot(x, x, n) / (float)n + eps);
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

/* Rotate one head x (d) at table row c, s (HF rotate_half: pairs i and i + d/2). */
static void rope(float *x, const float *c, const float *s, int64_t d) {
  const int64_t half = d / 2;
  for (int64_t i = 0; i < half; i++) {
    const float a = x[i], b = x[i + half];
    x[i] = a * c[i] - b * s[i];
    x[i + half] = b * c[i + half] + a * s[i + half];
  }
}

static inline int64_t slot_of(const mg_plan *P, int64_t row, int64_t pos) {
  return P->tables[row * P->max_blocks + pos / P->block_size] * P->block_size +
         pos % P->block_size;
}

/* One layer's cache as attention reads it: float32 K/V (kc, vc), or int8 K/V (kq, vq, kc and vc
 * NULL) with their float32 scales ks, vs (num_blocks, n_kv_heads), one per block and kv head;
 * an int8 entry stands for scale * q. deq: the reading thread's scratch of 2 * KB * head_dim
 * floats, where a key block of an int8 cache is dequantized. */
typedef struct {
  const float *kc, *vc;
  const int8_t *kq, *vq;
  const float *ks, *vs;
  float *deq;
} kv_src;

/* One layer's cache as the step writes it: float32 K/V (kc, vc), or int8 K/V (kq, vq; kc and vc
 * NULL) with their scales ks, vs (num_blocks, n_kv_heads). */
typedef struct {
  float *kc, *vc;
  int8_t *kq, *vq;
  float *ks, *vs;
} kv_layer;

/* round(v) (half to even, as torch.round) clamped to [-127, 127]: kv_quant's int8 value. */
static int8_t to_q8(float v) {
  v = nearbyintf(v);
  return (int8_t)(v < -127.0f ? -127.0f : v > 127.0f ? 127.0f : v);
}

/* Store kv head hk of `row`'s new tokens, its j-th token's d values at x + j * x_stride, into an
 * int8 cache q (num_blocks, block_size, hkv, d) with scales s (num_blocks, hkv), both mutated,
 * with kv_quant.write_quantized's arithmetic in float32, so the same int8 values and scales bit
 * for bit: per block written, need = absmax / 127 of its new values; a block written from its
 * first slot takes need, any other max(old, need), and when that grows the scale, the block's
 * entries are first requantized to round(q * (old / new)); then each new value is stored as
 * round(x / scale) (x / 1 where the scale is 0). The row owns the blocks it writes. */
static void write_q8(const mg_plan *P, int64_t hkv, int64_t d, int64_t row, int64_t hk,
                     const float *x, int64_t x_stride, int8_t *q, float *s) {
  const int64_t bs = P->block_size, n = P->tok_off[row + 1] - P->tok_off[row];
  const int64_t *table = P->tables + row * P->max_blocks;
  for (int64_t j0 = 0, nb; j0 < n; j0 += nb) {
    const int64_t p0 = P->start[row] + j0, first = p0 % bs, blk = table[p0 / bs];
    nb = n - j0 < bs - first ? n - j0 : bs - first; /* new tokens in this block */
    float amax = 0.0f;
    for (int64_t j = j0; j < j0 + nb; j++)
      for (int64_t c = 0; c < d; c++) {
        const float a = fabsf(x[j * x_stride + c]);
        amax = a > amax ? a : amax;
      }
    const float need = amax / 127.0f, old = s[blk * hkv + hk];
    const float scale = first > 0 && old > need ? old : need;
    int8_t *b = q + (blk * bs * hkv + hk) * d; /* entry i of the block: b + i * hkv * d */
    if (first > 0 && scale > old) {
      const float ratio = old / scale;
      for (int64_t i = 0; i < bs * hkv * d; i += hkv * d)
        for (int64_t c = 0; c < d; c++) b[i + c] = to_q8((float)b[i + c] * ratio);
    }
    s[blk * hkv + hk] = scale;
    const float div = scale > 0.0f ? scale : 1.0f;
    for (int64_t j = j0; j < j0 + nb; j++)
      for (int64_t c = 0; c < d; c++)
        b[(first + j - j0) * hkv * d + c] = to_q8(x[j * x_stride + c] / div);
  }
}

/* kp[j], vp[j] = kv head hk's key and value at position p0 + j of `row`, for j < nb <= KB:
 * pointers into a float32 cache, or into C->deq where an int8 block is dequantized as
 * (float)q * scale, the rounding of kv_quant.dequantize. */
static void key_block(const mg_model *M, const mg_plan *P, int64_t row, int64_t p0, int64_t nb,
                      const kv_src *C, int64_t hk, const float **kp, const float **vp) {
  const int64_t d = M->head_dim, hkv = M->n_kv_heads, bs = P->block_size;
  const int64_t *table = P->tables + row * P->max_blocks;
  int64_t blk = p0 / bs, in_blk = p0 % bs; /* one division per key block, not two per key */
  for (int64_t j = 0; j < nb; j++) {
    const int64_t off = ((table[blk] * bs + in_blk) * hkv + hk) * d;
    if (C->kq) {
      const float sk = C->ks[table[blk] * hkv + hk], sv = C->vs[table[blk] * hkv + hk];
      float *k = C->deq + j * d, *v = C->deq + (KB + j) * d;
      const int8_t *qk = C->kq + off, *qv = C->vq + off;
      for (int64_t c = 0; c < d; c++) k[c] = (float)qk[c] * sk;
      for (int64_t c = 0; c < d; c++) v[c] = (float)qv[c] * sv;
      kp[j] = k;
      vp[j] = v;
    } else {
      kp[j] = C->kc + off;
      vp[j] = C->vc + off;
    }
    if (++in_blk == bs) in_blk = 0, blk++;
  }
}

/* s[j] = q . k[j] * scale for j < nb (nb <= KB): four keys at a time, four independent
 * accumulation chains. */
static void scores(const float *q, const float *const *k, int64_t nb, int64_t d, float scale,
                   float *s) {
  for (int64_t j = 0; j < nb; j += 4) {
    const float *k0 = k[j], *k1 = k[j + 1 < nb ? j + 1 : j], *k2 = k[j + 2 < nb ? j + 2 : j],
                *k3 = k[j + 3 < nb ? j + 3 : j];
    vec a0 = vzero(), a1 = vzero(), a2 = vzero(), a3 = vzero();
    for (int64_t c = 0; c < d; c += VW) {
      const vmask m = mask_first(d - c);
      const vec qv = vload(q + c, m);
      a0 = vfma(qv, vload(k0 + c, m), a0);
      a1 = vfma(qv, vload(k1 + c, m), a1);
      a2 = vfma(qv, vload(k2 + c, m), a2);
      a3 = vfma(qv, vload(k3 + c, m), a3);
    }
    const float t[4] = {vsum(a0), vsum(a1), vsum(a2), vsum(a3)};
    for (int64_t r = 0; r < 4 && j + r < nb; r++) s[j + r] = t[r] * scale;
  }
}

/* acc (d) = acc * corr + sum_{j < nb} p[j] * v[j], four vectors of acc in registers at a time. */
static void accumulate(float *acc, float corr, const float *p, const float *const *v, int64_t nb,
                       int64_t d) {
  for (int64_t c0 = 0; c0 < d; c0 += 4 * VW) {
    vmask m[4];
    vec a[4];
    UNROLL4
    for (int r = 0; r < 4; r++) {
      m[r] = mask_first(d - c0 - r * VW);
      a[r] = vmul(vload(acc + c0 + r * VW, m[r]), vbcast(corr));
    }
    for (int64_t j = 0; j < nb; j++) {
      const vec pj = vbcast(p[j]);
      UNROLL4
      for (int r = 0; r < 4; r++) a[r] = vfma(pj, vload(v[j] + c0 + r * VW, m[r]), a[r]);
    }
    UNROLL4
    for (int r = 0; r < 4; r++) vstore(acc + c0 + r * VW, a[r], m[r]);
  }
}

/* One query's online-softmax statistics over the scores s[0:nb) of its next nb keys: s becomes
 * exp(s - new max), the running max *mx and sum *l move on; returns the factor, exp(old max -
 * new max), by which its unnormalised output is to be scaled before the block's values add in. */
static float softmax_block(float *s, int64_t nb, float *mx, float *l) {
  float top = *mx;
  for (int64_t j = 0; j < nb; j++) top = s[j] > top ? s[j] : top;
  const float corr = expf(*mx - top); /* 0 on the first block (mx = -inf) */
  vec sum = vzero();
  for (int64_t j = 0; j < nb; j += VW) {
    const vmask m = mask_first(nb - j);
    const vec e = vexp(vsub(vload(s + j, m), vbcast(top)));
    vstore(s + j, e, m);
    sum = vadd(sum, vload(s + j, m)); /* dead lanes load as 0 */
  }
  *l = *l * corr + vsum(sum);
  *mx = top;
  return corr;
}

/* One query's online-softmax update over nb keys and values (kp, vp): its running max *mx,
 * sum *l and unnormalised output acc (d). s: scratch of KB floats. */
static void attend_block(const float *q, float *acc, float *mx, float *l, const float *const *kp,
                         const float *const *vp, int64_t nb, int64_t d, float scale, float *s) {
  scores(q, kp, nb, d, scale, s);
  const float corr = softmax_block(s, nb, mx, l);
  accumulate(acc, corr, s, vp, nb, d);
}

/* acc (d) = acc * corr. */
static void rescale(float *acc, float corr, int64_t d) {
  for (int64_t c = 0; c < d; c += VW) {
    const vmask m = mask_first(d - c);
    vstore(acc + c, vmul(vload(acc + c, m), vbcast(corr)), m);
  }
}

/* acc (d) += p * v (d), one fused multiply-add per element: accumulate's arithmetic for one key. */
static void add_value(float *acc, float p, const float *v, int64_t d) {
  const vec pv = vbcast(p);
  for (int64_t c = 0; c < d; c += VW) {
    const vmask m = mask_first(d - c);
    vstore(acc + c, vfma(pv, vload(v + c, m), vload(acc + c, m)), m);
  }
}

/* dot and add_value where n is whole vectors: plain loads and stores, the same arithmetic. */
static inline float dot_whole(const float *a, const float *b, int64_t n) {
  vec acc = vzero();
  for (int64_t i = 0; i < n; i += VW) acc = vfma(vloadu(a + i), vloadu(b + i), acc);
  return vsum(acc);
}

static inline void add_value_whole(float *acc, float p, const float *v, int64_t n) {
  const vec pv = vbcast(p);
  for (int64_t c = 0; c < n; c += VW) vstoreu(acc + c, vfma(pv, vloadu(v + c), vloadu(acc + c)));
}

/* acc (d) = acc * corr + sum_{j < nb} p[j] * v[j][off..off + d), d whole vectors: accumulate's
 * arithmetic in its order (so the same bits as rescale then add_value_whole key by key), with up
 * to eight vectors of acc in registers across the block's keys instead of a load and a store of
 * acc per key. */
static inline void accumulate_whole(float *acc, float corr, const float *p, const float *const *v,
                                    int64_t off, int64_t nb, int64_t d) {
  for (int64_t c0 = 0; c0 < d; c0 += 8 * VW) {
    const int nr = d - c0 >= 8 * VW ? 8 : (int)((d - c0) / VW);
    vec a[8];
    UNROLL8
    for (int r = 0; r < 8; r++)
      a[r] = r < nr ? vmul(vloadu(acc + c0 + r * VW), vbcast(corr)) : vzero();
    for (int64_t j = 0; j < nb; j++) {
      const vec pj = vbcast(p[j]);
      const float *vj = v[j] + off + c0;
      UNROLL8
      for (int r = 0; r < 8; r++)
        if (r < nr) a[r] = vfma(pj, vloadu(vj + r * VW), a[r]);
    }
    UNROLL8
    for (int r = 0; r < 8; r++)
      if (r < nr) vstoreu(acc + c0 + r * VW, a[r]);
  }
}

/* dot_whole of four queries q[0..3] against keys k0 + (i0 + u) / nq * n (u = 0..3), each its
 * own accumulator chain in dot_whole's order (so each the same bits), the four interleaved:
 * one chain alone waits on its FMA's latency at every vector. */
static inline void dot4_whole(const float *const *q, const float *k0, int64_t i0, int64_t nq,
                              int64_t n, float *out) {
  const float *k[4];
  for (int u = 0; u < 4; u++) k[u] = k0 + (i0 + u) / nq * n;
  vec a0 = vzero(), a1 = vzero(), a2 = vzero(), a3 = vzero();
  for (int64_t c = 0; c < n; c += VW) {
    a0 = vfma(vloadu(q[0] + c), vloadu(k[0] + c), a0);
    a1 = vfma(vloadu(q[1] + c), vloadu(k[1] + c), a1);
    a2 = vfma(vloadu(q[2] + c), vloadu(k[2] + c), a2);
    a3 = vfma(vloadu(q[3] + c), vloadu(k[3] + c), a3);
  }
  out[0] = vsum(a0), out[1] = vsum(a1), out[2] = vsum(a2), out[3] = vsum(a3);
}

/* Positions in the key block from p: KB, fewer at the end, 0 from end on. */
static inline int64_t block_len(int64_t p, int64_t end) {
  return end - p < KB ? (end > p ? end - p : 0) : KB;
}

/* Prefetch into L1 the n floats from p (a position's run of kv heads), a line at a time. */
static inline void prefetch_run(const float *p, int64_t n) {
  for (int64_t c = 0; c < n; c += 16) __builtin_prefetch(p + c, 0, 3); /* 16 floats: a line */
}

/* attend's float32-cache path, position-major: the nh * nq queries take each key block as it lies
 * in memory, position by position, the unit's kv heads of a position in turn (adjacent in the
 * cache), each position's run prefetched PMPF positions ahead along the order the passes read it: a
 * block's keys, its values, the next block's keys, so that no pass starts on lines not yet asked
 * for (prefetching within each pass alone left a gap of PMPF positions at each pass's start: one
 * row's 8 layers over 256 positions, int4 step, one thread of a Zen 3, own attention 871-923 us
 * against 751-823 now; five new tokens 2749 against 2237; medians of 8-12 rounds of
 * benchmarks.step_stages, one run each). Taking a block head by head read head_dim floats per
 * position at a stride of n_kv_heads * head_dim, which the hardware prefetchers lose at every page:
 * from memory (a decode step's weights push the cache out of L3) it ran latency-bound, one row's 8
 * layers over 256 positions 646 us of a 2-core Zen 4's step against 303 us now (1.08x the step; two
 * threads 1.02-1.05x). The same arithmetic as attend_block in the same order for each query: each
 * score the one dot product, each output element scaled by corr then taking the block's values in
 * key order, one FMA each; so the same bits. A head_dim of whole vectors (64, 128) takes plain
 * loads and stores: AVX2 has no cheap masked ones (the mask built per vector, a vmaskmovps per
 * load), and one row's 8 layers of own attention over 256 positions took 1.2x less thread time so
 * on a Zen 3, five tokens of a row (a verify step) 1.5x less (benchmarks/README.md).
 * Scores are made four queries at a time (dot4_whole: four FMA chains in flight where one waits on
 * its latency). Where a kv head serves several queries (nq > 1: a verify step's tokens, a GQA
 * model's query heads) each query then takes the block's values with its output in registers
 * (accumulate_whole) instead of a load and a store of it per key and query; the values are
 * prefetched during the scores pass instead. Each query's arithmetic and order stay as above, so
 * the same bits (benchmarks.own_attention checks it). One row's 8 layers over 256-1024 cached
 * positions, cold, one thread of a Zen 3 (own_attention, 41 rounds, results/own_attention_zen3
 * .json): 8 query heads on 8 kv heads of 64, one token 1.20x less CPU time, five 1.46x; 32 on 8
 * of 128 (Llama-3-8B's) 1.12x, 1.33x; 16 on 2 of 64 1.67x, 1.70x. */
static inline __attribute__((always_inline)) void attend_pm_body(
    const int whole, const mg_model *M, const mg_plan *P, const float *const *q,
                      float *const *acc, float *const *mx, float *const *l, int64_t nq,
                      int64_t row, int64_t from, int64_t end, const int64_t *to, const kv_src *C,
                      int64_t hk, int64_t nh, float *s) {
  const int64_t d = M->head_dim, n = nh * nq, run = nh * d;
  const int by_query = whole && nq > 1; /* values query by query (accumulate_whole) */
  /* kv head hk's keys and values of this block (cur) and the next (cur ^ 1); head hk + h is
   * h * d floats on. */
  const float *kp[2][KB], *vp[2][KB];
  int cur = 0;
  if (from < end) key_block(M, P, row, from, block_len(from, end), C, hk, kp[0], vp[0]);
  for (int64_t p0 = from; p0 < end; p0 += KB, cur ^= 1) {
    const int64_t nb = block_len(p0, end), nb1 = block_len(p0 + KB, end);
    if (nb1) key_block(M, P, row, p0 + KB, nb1, C, hk, kp[cur ^ 1], vp[cur ^ 1]);
    const float *const *K = kp[cur], *const *V = vp[cur], *const *K1 = kp[cur ^ 1];
    for (int64_t j = 0; j < nb; j++) {
      const int64_t a = j + PMPF;
      if (a < nb) prefetch_run(K[a], run);
      else if (!by_query && a - nb < nb) prefetch_run(V[a - nb], run);
      if (by_query) prefetch_run(V[j], run); /* read after the whole scores pass */
      int64_t i = 0;
      if (whole)
        for (; i + 4 <= n; i += 4) { /* keys past a query's end are read, never stored */
          float t[4];
          dot4_whole(q + i, K[j], i, nq, d, t);
          for (int u = 0; u < 4; u++)
            if (p0 + j < to[i + u]) s[(i + u) * KB + j] = t[u] * M->scale;
        }
      for (; i < n; i++)
        if (p0 + j < to[i])
          s[i * KB + j] =
              (whole ? dot_whole(q[i], K[j] + i / nq * d, d) : dot(q[i], K[j] + i / nq * d, d)) *
              M->scale;
    }
    if (by_query) {
      for (int64_t a = 0; a < PMPF && a < nb1; a++) prefetch_run(K1[a], run);
      for (int64_t i = 0; i < n; i++)
        if (to[i] > p0) {
          const int64_t nbi = to[i] - p0 < nb ? to[i] - p0 : nb;
          accumulate_whole(acc[i], softmax_block(s + i * KB, nbi, mx[i], l[i]), s + i * KB, V,
                           i / nq * d, nbi, d);
        }
      continue;
    }
    for (int64_t i = 0; i < n; i++)
      if (to[i] > p0)
        rescale(acc[i], softmax_block(s + i * KB, to[i] - p0 < nb ? to[i] - p0 : nb, mx[i], l[i]),
                d);
    for (int64_t j = 0; j < nb; j++) {
      const int64_t a = j + PMPF;
      if (a < nb) prefetch_run(V[a], run);
      else if (a - nb < nb1) prefetch_run(K1[a - nb], run);
      for (int64_t i = 0; i < n; i++)
        if (p0 + j < to[i]) {
          if (whole)
            add_value_whole(acc[i], s[i * KB + j], V[j] + i / nq * d, d);
          else
            add_value(acc[i], s[i * KB + j], V[j] + i / nq * d, d);
        }
    }
  }
}

static void attend_pm(const mg_model *M, const mg_plan *P, const float *const *q,
                      float *const *acc, float *const *mx, float *const *l, int64_t nq,
                      int64_t row, int64_t from, int64_t end, const int64_t *to, const kv_src *C,
                      int64_t hk, int64_t nh, float *s) {
  if (M->head_dim % VW == 0)
    attend_pm_body(1, M, P, q, acc, mx, l, nq, row, from, end, to, C, hk, nh, s);
  else
    attend_pm_body(0, M, P, q, acc, mx, l, nq, row, from, end, to, C, hk, nh, s);
}

/* Online-softmax attention of nh * nq query heads q[i] (d floats) over positions from ..
 * to[i] - 1 of `row`'s blocks, queries h * nq .. (h + 1) * nq - 1 on kv head hk + h: updates the
 * running max mx[i], sum l[i] and unnormalised output acc[i] (d). s: scratch of nh * nq * KB
 * floats. Every query walks the same key blocks (from, from + KB, ...), each cut at its own end,
 * so a query's arithmetic is that of attending alone, while the queries of a row's several new
 * tokens share every block as it sits in L1 (their keys and values are read from memory once,
 * not once per token). A float32 cache: attend_pm, position by position. An int8 cache: each key
 * block is dequantized and taken for the nh kv heads in turn, a unit of several heads reading
 * along memory where one head alone reads head_dim values per position at a stride of
 * n_kv_heads * head_dim (one row after 320 positions, 8 kv heads, cold cache, on a 2-core Xeon,
 * float32: 8 layers' attention 2.80 ms with one head per unit, 2.21 ms with all 8). */
static void attend(const mg_model *M, const mg_plan *P, const float *const *q, float *const *acc,
                   float *const *mx, float *const *l, int64_t nq, int64_t row, int64_t from,
                   const int64_t *to, const kv_src *C, int64_t hk, int64_t nh, float *s) {
  const int64_t d = M->head_dim;
  int64_t end = from;
  for (int64_t i = 0; i < nh * nq; i++) end = to[i] > end ? to[i] : end;
  if (!C->kq) {
    attend_pm(M, P, q, acc, mx, l, nq, row, from, end, to, C, hk, nh, s);
    return;
  }
  for (int64_t p0 = from; p0 < end; p0 += KB) {
    const int64_t nb = end - p0 < KB ? end - p0 : KB;
    const float *kp[KB], *vp[KB];
    for (int64_t h = 0; h < nh; h++) {
      key_block(M, P, row, p0, nb, C, hk + h, kp, vp);
      for (int64_t i = h * nq; i < (h + 1) * nq; i++)
        if (to[i] > p0)
          attend_block(q[i], acc[i], mx[i], l[i], kp, vp, to[i] - p0 < nb ? to[i] - p0 : nb, d,
                       M->scale, s + i * KB);
    }
  }
}

/* A row's own positions are attended in chunks (split-K, flash-decoding): chunk k of a row whose
 * tokens attend own_from .. own_from + n - 1 is positions own_from + k * len .. + len - 1 (len
 * = own_chunk(n)), cut at each token's own end. Chunk 0 continues the row's state (fresh, or its
 * prefix group's); every later chunk starts fresh, and the states are folded into the row's in
 * chunk order (merge_states). The chunks are a function of n alone, and a chunk's arithmetic is
 * that of attend over its positions, so a row's result is the same bits whichever threads take
 * its chunks, and in whichever order; a row of at most OWN_CHUNK positions is one chunk, which is
 * attend over them all. OWN_CHUNK: one row at 256 positions is four chunks and a position,
 * two for each of two threads; OWN_CHUNKS bounds the merges, and the chunk states one step
 * holds, at long contexts. */
#define OWN_CHUNK 64
#define OWN_CHUNKS 16

/* Positions per chunk of a row that attends n own positions: OWN_CHUNK, or more (whole key
 * blocks) to keep to OWN_CHUNKS chunks. */
static int64_t own_chunk(int64_t n) {
  const int64_t per = (n + OWN_CHUNKS - 1) / OWN_CHUNKS, len = (per + KB - 1) / KB * KB;
  return len > OWN_CHUNK ? len : OWN_CHUNK;
}

/* own_chunk for the tests, which place contexts at and across chunk boundaries. */
int64_t mg_own_chunk(int64_t n) { return own_chunk(n); }

/* Own positions of row r (its last token's: own_from[r] .. its position) and its chunks. */
static int64_t own_span(const mg_plan *P, int64_t r) {
  return P->start[r] + P->tok_off[r + 1] - P->tok_off[r] - P->own_from[r];
}

static int64_t own_chunks(const mg_plan *P, int64_t r) {
  const int64_t n = own_span(P, r), len = own_chunk(n);
  return (n + len - 1) / len;
}

/* Fold n chunk states (cacc[i] (d), *cmx[i], *cl[i]) into the row states (acc[i], *mx[i], *l[i])
 * of the same queries: both rescaled to the larger max, sums and outputs added. A query the chunk
 * did not reach (max -inf) keeps its state untouched. */
static void merge_states(float *const *acc, float *const *mx, float *const *l,
                         float *const *cacc, float *const *cmx, float *const *cl, int64_t n,
                         int64_t d) {
  for (int64_t i = 0; i < n; i++) {
    if (*cmx[i] == -INFINITY) continue;
    const float m = *mx[i] > *cmx[i] ? *mx[i] : *cmx[i];
    const float a = expf(*mx[i] - m), b = expf(*cmx[i] - m); /* a = 0 for a fresh row state */
    *l[i] = *l[i] * a + *cl[i] * b;
    *mx[i] = m;
    for (int64_t c = 0; c < d; c += VW) {
      const vmask k = mask_first(d - c);
      const vec y = vmul(vload(acc[i] + c, k), vbcast(a));
      vstore(acc[i] + c, vfma(vload(cacc[i] + c, k), vbcast(b), y), k);
    }
  }
}

/* at[c + r] = at[c + r] * corr + sum_{j < nb} st[j] * v_j[c + r] for r < R (R <= 8, a constant
 * at each call, so the R output vectors stay in registers): group_block's value update of R
 * output elements of VW queries, one per lane. */
static inline __attribute__((always_inline)) void group_values(float *at, vec corr,
                                                               const float *st,
                                                               const float *const *vp,
                                                               int64_t nb, int64_t c, int R) {
  vec a[8];
  UNROLL8
  for (int r = 0; r < R; r++) a[r] = vmul(vloadu(at + (c + r) * VW), corr);
  for (int64_t j = 0; j < nb; j++) {
    const vec pj = vloadu(st + j * VW);
    const float *v = vp[j] + c;
    UNROLL8
    for (int r = 0; r < R; r++) a[r] = vfma(vbcast(v[r]), pj, a[r]);
  }
  UNROLL8
  for (int r = 0; r < R; r++) vstoreu(at + (c + r) * VW, a[r]);
}

/* One key block of a Hydragen group's prefix for up to VW queries held one per vector lane:
 * their scaled queries qt (d, VW), unnormalised outputs at (d, VW), running max *m and sum *lsum
 * (a vector each) are updated by the nb keys kp (padded with 7 repeats) and values vp; st:
 * scratch of KB * VW floats. Lane i's arithmetic involves lane i only, so a query's result does
 * not depend on which others share its vector. Eight independent chains (keys for the scores,
 * output elements for the values) keep both FMA units busy. */
static void group_block(const float *qt, float *at, vec *m, vec *lsum, const float *const *kp,
                        const float *const *vp, int64_t nb, int64_t d, float *st) {
  for (int64_t j = 0; j < nb; j += 8) { /* st[j] = scores of key j for every query */
    vec s[8];
    UNROLL8
    for (int r = 0; r < 8; r++) s[r] = vzero();
    for (int64_t c = 0; c < d; c++) {
      const vec qc = vloadu(qt + c * VW);
      UNROLL8
      for (int r = 0; r < 8; r++) s[r] = vfma(vbcast(kp[j + r][c]), qc, s[r]);
    }
    UNROLL8
    for (int r = 0; r < 8; r++)
      if (j + r < nb) vstoreu(st + (j + r) * VW, s[r]);
  }
  vec top = *m;
  for (int64_t j = 0; j < nb; j++) top = vmax(top, vloadu(st + j * VW));
  const vec corr = vexp(vsub(*m, top)); /* ~0 on the first block (m = -inf) */
  vec sum = vmul(*lsum, corr);
  for (int64_t j = 0; j < nb; j++) {
    const vec e = vexp(vsub(vloadu(st + j * VW), top));
    vstoreu(st + j * VW, e);
    sum = vadd(sum, e);
  }
  *lsum = sum;
  *m = top;
  int64_t c = 0;
  for (; c + 8 <= d; c += 8) group_values(at, corr, st, vp, nb, c, 8);
  if (c < d) group_values(at, corr, st, vp, nb, c, 4); /* d % 8 == 4 */
}

/* Floats of attend_group's scratch for nh kv heads of nq queries each. */
static int64_t group_scratch(int64_t d, int64_t nh, int64_t nq) {
  return nh * ((nq + VW - 1) / VW) * (2 * d + 2) * VW + KB * VW;
}

/* attend() for the queries of a Hydragen group over its shared prefix, positions 0 .. to - 1 of
 * `row`, for nh kv heads together: q[h * nq + i], i < nq, on kv head hk + h. Vectorised across
 * the queries instead of along head_dim (VW queries of one head per vector: one score,
 * probability or output element of each), so there are no horizontal sums and the softmax is
 * whole-vector. Each key block is taken for the nh heads in turn, all of a head's queries
 * against it while it sits in L1: the prefix is read along memory once per unit (the cache
 * holds a position's kv heads side by side), not once per head and VW queries at a stride of
 * n_kv_heads * head_dim. Requires d % 4 == 0 and a fresh state (mx = -inf, l = 0, acc = 0),
 * which it overwrites. w: scratch of group_scratch(d, nh, nq) floats. */
static void attend_group(const mg_model *M, const mg_plan *P, const float *const *q,
                         float *const *acc, float *const *mx, float *const *l, int64_t nq,
                         int64_t row, int64_t to, const kv_src *C, int64_t hk, int64_t nh,
                         float *w) {
  const int64_t d = M->head_dim, nv = (nq + VW - 1) / VW, per = (2 * d + 2) * VW;
  float *st = w + nh * nv * per; /* (KB, VW); then per (head, vector of queries): */
  for (int64_t u = 0; u < nh * nv; u++) { /* qt (d, VW), at (d, VW), m (VW), lsum (VW) */
    float *qt = w + u * per, *at = qt + d * VW;
    const int64_t h = u / nv, i0 = u % nv * VW;
    for (int64_t c = 0; c < d; c++)
      for (int64_t i = 0; i < VW; i++)
        qt[c * VW + i] = i0 + i < nq ? q[h * nq + i0 + i][c] * M->scale : 0.0f;
    memset(at, 0, (size_t)(d * VW) * sizeof(float));
    vstoreu(at + d * VW, vbcast(-INFINITY));
    vstoreu(at + d * VW + VW, vzero());
  }
  for (int64_t p0 = 0; p0 < to; p0 += KB) {
    const int64_t nb = to - p0 < KB ? to - p0 : KB;
    const float *kp[KB + 7], *vp[KB];
    for (int64_t h = 0; h < nh; h++) {
      key_block(M, P, row, p0, nb, C, hk + h, kp, vp);
      for (int64_t j = nb; j < nb + 7; j++) kp[j] = kp[0]; /* padding keys, scores unused */
      for (int64_t u = h * nv; u < (h + 1) * nv; u++) {
        float *qt = w + u * per, *at = qt + d * VW;
        vec m = vloadu(at + d * VW), lsum = vloadu(at + d * VW + VW);
        group_block(qt, at, &m, &lsum, kp, vp, nb, d, st);
        vstoreu(at + d * VW, m);
        vstoreu(at + d * VW + VW, lsum);
      }
    }
  }
  for (int64_t u = 0; u < nh * nv; u++) {
    const float *at = w + u * per + d * VW;
    const int64_t h = u / nv, i0 = u % nv * VW;
    for (int64_t i = i0; i < nq && i < i0 + VW; i++) {
      const int64_t k = h * nq + i;
      *mx[k] = at[d * VW + i - i0];
      *l[k] = at[d * VW + VW + i - i0];
      for (int64_t c = 0; c < d; c++) acc[k][c] = at[c * VW + i - i0];
    }
  }
}

/* A thread's own buffers: the gathered queries of one attention work unit and their state, the
 * same queries' state over one later chunk of their row (cacc, cmx, cl, pointing into cbuf or
 * into the step's chunk states; c_to: their ends cut at the chunk's), the input of a norm's or
 * the SiLU gate's product (x: (T, hidden) normed tokens; act: (T, inter) gated), and the
 * quantized activations (aq, ad: mg_a8_quantize's; axs: mg_w4_xsums' for int4 weights) of the
 * int8-activation products. */
typedef struct {
  int8_t *aq;
  int32_t *axs;
  float *ad, *x, *act;
  float *s, *grp, *deq, *cbuf;
  int64_t *q_to, *c_to; /* each gathered query's end position (exclusive); in the chunk */
  const float **q;
  float **acc, **pmx, **pl, **cacc, **cmx, **cl;
} lane;

/* Work buffers of one step, carved from one allocation, and its threads' lanes. Attention reads
 * token t's query head i at q + t * q_stride + i * head_dim and writes it to
 * attn + (t * n_heads + i) * head_dim. Where rows' chunks are units of their own (step_job's
 * split), row r's chunks are units chunk_off[r] .. chunk_off[r + 1] - 1; those after the first
 * keep their states in chunk_acc (d floats each), chunk_mx, chunk_l from record chunk_rec[r] on
 * (own_unit), and chunk_done[r * runs + run] counts the row's finished chunk units of that run
 * of kv heads, over the layers. */
typedef struct {
  float *qkv, *attn, *mx, *l, *tmp, *gu;
  float *chunk_acc, *chunk_mx, *chunk_l;
  const float *q_base;
  int64_t q_stride;
  int64_t *tok_row, *tok_pos, *chunk_off, *chunk_rec;
  const int64_t *tok_at; /* the plan's (NULL: no leaves) */
  atomic_llong *chunk_done;
  lane lanes[MG_MAX_THREADS];
  void *block;
} scratch;

static void *carve(char **p, size_t bytes) {
  void *r = *p;
  *p += (bytes + 63) & ~(size_t)63;
  return r;
}

/* The step's buffers for T tokens on nth threads, with recs chunk states (split's). */
static int make_scratch(const mg_model *M, int64_t T, int nth, int64_t recs, scratch *S) {
  const int64_t H = M->hidden, D = M->head_dim, hq = M->n_heads, hkv = M->n_kv_heads;
  const int64_t qkv = (hq + 2 * hkv) * D, nq = T * hq;
  const int64_t kmax = H > hq * D ? (H > M->inter ? H : M->inter) /* the products' widest K */
                                   : (hq * D > M->inter ? hq * D : M->inter);
  const size_t f = sizeof(float), n[] = {
      T * qkv * f, nq * D * f, nq * f, nq * f, T * H * f, T * 2 * M->inter * f,
      T * sizeof(int64_t), T * sizeof(int64_t), recs * D * f, recs * f, recs * f,
      (T + 1) * sizeof(int64_t), T * sizeof(int64_t), T * hkv * sizeof(atomic_llong)};
  const size_t per_lane[] = {nq * KB * f, (size_t)group_scratch(D, hkv, T * (hq / hkv)) * f,
                             nq * sizeof(int64_t), nq * sizeof(void *), nq * sizeof(void *),
                             nq * sizeof(void *), nq * sizeof(void *), 2 * KB * D * f,
                             T * mg_a8_ldq(kmax), T * mg_a8_ldd(kmax) * f, T * H * f,
                             T * M->inter * f, T * mg_a8_ldd(kmax) * sizeof(int32_t),
                             nq * (D + 2) * f, nq * sizeof(int64_t), nq * sizeof(void *),
                             nq * sizeof(void *), nq * sizeof(void *)};
  size_t total = 0, lane_total = 0;
  for (size_t i = 0; i < sizeof n / sizeof *n; i++) total += (n[i] + 63) & ~(size_t)63;
  for (size_t i = 0; i < sizeof per_lane / sizeof *per_lane; i++)
    lane_total += (per_lane[i] + 63) & ~(size_t)63;
  /* every buffer starts on a cache line (malloc gives 16 bytes): two threads writing
   * neighbouring buffers, or neighbouring heads of one, never share a line; the sizes are
   * whole lines, as aligned_alloc requires */
  char *p = S->block = aligned_alloc(64, total + (size_t)nth * lane_total);
  if (!p) return -1;
  S->qkv = carve(&p, n[0]);
  S->attn = carve(&p, n[1]);
  S->mx = carve(&p, n[2]);
  S->l = carve(&p, n[3]);
  S->tmp = carve(&p, n[4]);
  S->gu = carve(&p, n[5]);
  S->tok_row = carve(&p, n[6]);
  S->tok_pos = carve(&p, n[7]);
  S->chunk_acc = carve(&p, n[8]);
  S->chunk_mx = carve(&p, n[9]);
  S->chunk_l = carve(&p, n[10]);
  S->chunk_off = carve(&p, n[11]);
  S->chunk_rec = carve(&p, n[12]);
  S->chunk_done = carve(&p, n[13]);
  for (int64_t i = 0; i < T * hkv; i++) atomic_init(S->chunk_done + i, 0);
  for (int i = 0; i < nth; i++) {
    lane *L = S->lanes + i;
    L->s = carve(&p, per_lane[0]);
    L->grp = carve(&p, per_lane[1]);
    L->q_to = carve(&p, per_lane[2]);
    L->q = carve(&p, per_lane[3]);
    L->acc = carve(&p, per_lane[4]);
    L->pmx = carve(&p, per_lane[5]);
    L->pl = carve(&p, per_lane[6]);
    L->deq = carve(&p, per_lane[7]);
    L->aq = carve(&p, per_lane[8]);
    L->ad = carve(&p, per_lane[9]);
    L->x = carve(&p, per_lane[10]);
    L->act = carve(&p, per_lane[11]);
    L->axs = carve(&p, per_lane[12]);
    L->cbuf = carve(&p, per_lane[13]);
    L->c_to = carve(&p, per_lane[14]);
    L->cacc = carve(&p, per_lane[15]);
    L->cmx = carve(&p, per_lane[16]);
    L->cl = carve(&p, per_lane[17]);
  }
  S->q_base = S->qkv;
  S->q_stride = qkv;
  return 0;
}

/* Row and position of every flat token of the plan. */
static void index_tokens(const mg_plan *P, scratch *S) {
  for (int64_t r = 0; r < P->n_rows; r++)
    for (int64_t t = P->tok_off[r]; t < P->tok_off[r + 1]; t++) {
      S->tok_row[t] = r;
      S->tok_pos[t] = P->start[r] + (t - P->tok_off[r]);
    }
  S->tok_at = P->tok_at;
}

/* The position token t stands at (is rotated at): its own, or a leaf's (mg_plan's tok_at). */
static inline int64_t stands_at(const scratch *S, int64_t t) {
  return S->tok_at ? S->tok_at[t] : S->tok_pos[t];
}

/* Whether token t is a leaf of a draft tree (stored past the position it stands at). */
static inline int is_leaf(const scratch *S, int64_t t) {
  return S->tok_at && S->tok_at[t] != S->tok_pos[t];
}

/* Queries of token t for kv head hk, appended to the lane's lists at index *n; each attends
 * up to the token's own position (q_to), a leaf up to its parent's (own_unit adds its own). */
static void gather_queries(const mg_model *M, const scratch *S, const lane *L, int64_t t,
                           int64_t hk, int64_t *n) {
  const int64_t D = M->head_dim, hq = M->n_heads, g = hq / M->n_kv_heads;
  for (int64_t j = 0; j < g; j++, (*n)++) {
    const int64_t head = t * hq + hk * g + j;
    L->q_to[*n] = is_leaf(S, t) ? S->tok_at[t] : S->tok_pos[t] + 1;
    L->q[*n] = S->q_base + t * S->q_stride + (hk * g + j) * D;
    L->acc[*n] = S->attn + head * D;
    L->pmx[*n] = S->mx + head;
    L->pl[*n] = S->l + head;
  }
}

#define STAGES_PER_LAYER 6

/* One step's shared state, for the threads of its job. Every thread walks the same sequence of
 * stages: stage[0], stage[1], ... */
typedef struct {
  const mg_model *M;
  const mg_layer *layers;
  const mg_plan *P;
  scratch *S;
  int64_t T, layer_stride, scale_stride; /* cache values, and scales, per layer */
  float *h;
  kv_layer cache; /* the first layer's (attention alone: its one layer's) */
  int nth;                        /* threads of the job: the products' unit widths */
  mg_stage *stage;
  int64_t kv_run;  /* kv heads per unit of own-position attention (kv_run_for) */
  int64_t grp_run; /* kv heads per unit of prefix-group attention (kv_run_for) */
  int split;          /* own-position units are chunks of rows (own_unit), not rows */
  int64_t own_units;  /* chunks or rows: own-position units per run of kv heads */
} step_job;

/* The kv heads per attention unit: the most (a divisor of n_kv_heads) that still leaves every
 * one of nth threads a unit when there are n rows (own positions) or n prefix groups. More
 * heads per unit read the cache along memory (attend, attend_group); fewer share one row's or
 * group's attention among threads. Which queries a unit holds never changes any query's
 * arithmetic. */
static int64_t kv_run_for(int64_t n_kv_heads, int64_t n, int nth) {
  for (int64_t runs = 1; runs < n_kv_heads; runs++)
    if (n_kv_heads % runs == 0 && n * runs >= nth) return n_kv_heads / runs;
  return 1;
}

/* The scratch S of job J (its M, P and nth set) for its T tokens, indexed, and J's attention
 * units. Where the rows are fewer than the threads and some row has several chunks (own_chunk),
 * each chunk of a row is an own-position unit (J->split: one row's positions shared among
 * threads, each reading every position's whole run of kv heads), else each row is; either way
 * the kv heads are cut into the longest runs that still leave every thread a unit (kv_run_for).
 * Which units there are changes no query's arithmetic. Returns 0, or -1 when out of memory. */
static int prepare(step_job *J, scratch *S) {
  const mg_plan *P = J->P;
  const int64_t hq = J->M->n_heads, hkv = J->M->n_kv_heads;
  int64_t chunks = 0, recs = 0;
  for (int64_t r = 0; r < P->n_rows; r++) {
    const int64_t nc = own_chunks(P, r);
    chunks += nc;
    recs += (nc - 1) * (P->tok_off[r + 1] - P->tok_off[r]) * hq;
  }
  J->split = J->nth > P->n_rows && chunks > P->n_rows;
  J->own_units = J->split ? chunks : P->n_rows;
  J->kv_run = kv_run_for(hkv, J->own_units, J->nth);
  J->grp_run = kv_run_for(hkv, P->n_groups, J->nth);
  if (make_scratch(J->M, J->T, J->nth, J->split ? recs : 0, S)) return -1;
  index_tokens(P, S);
  S->chunk_off[0] = 0;
  for (int64_t r = 0, rec = 0; r < P->n_rows; r++) {
    const int64_t nc = own_chunks(P, r);
    S->chunk_off[r + 1] = S->chunk_off[r] + nc;
    S->chunk_rec[r] = rec;
    rec += (nc - 1) * (P->tok_off[r + 1] - P->tok_off[r]) * hq;
  }
  return 0;
}

/* Claim loop over the n units of stage st: `for (STAGE(st, n, u)) {...}` runs the body for
 * each unit this thread claims; mg_wait(st, n) then waits for the whole stage. */
#define STAGE(st, n, u) int64_t u; (u = mg_claim(st, n)) >= 0; mg_done(st)

#ifdef MG_STAGE_CLOCK
/* A benchmark build's stage clock (benchmarks/step_stages.py builds with -DMG_STAGE_CLOCK): each
 * thread's CPU time in ns, not wall time (a thread the OS takes off its core does not count), in
 * each of a layer's stage kinds: [tid][k] the work before stage k's wait, [tid][6 + k] the wait,
 * summed over the layers and steps until mg_stage_clock reads and clears them. One step at a
 * time: concurrent steps mix their counts. */
static int64_t stage_ns[MG_MAX_THREADS][2 * STAGES_PER_LAYER];
static _Thread_local int64_t stage_mark;

static int64_t thread_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Copy the counts into out (MG_MAX_THREADS * 2 * STAGES_PER_LAYER int64s) and clear them. */
void mg_stage_clock(int64_t *out) {
  memcpy(out, stage_ns, sizeof stage_ns);
  memset(stage_ns, 0, sizeof stage_ns);
}
#endif

/* mg_wait for stage st of the step; a benchmark build also clocks the thread's work before it
 * and the wait. */
static void stage_wait(const step_job *J, mg_stage *st, int64_t n, int tid) {
#ifdef MG_STAGE_CLOCK
  const int64_t k = (st - J->stage) % STAGES_PER_LAYER, t0 = thread_ns();
  stage_ns[tid][k] += t0 - stage_mark;
  mg_wait(st, n);
  stage_mark = thread_ns();
  stage_ns[tid][STAGES_PER_LAYER + k] += stage_mark - t0;
#else
  (void)J, (void)tid;
  mg_wait(st, n);
#endif
}

/* Query heads' fresh online-softmax state (unit: one token's q heads). */
static void init_heads(step_job *J, mg_stage *st) {
  const int64_t D = J->M->head_dim, hq = J->M->n_heads;
  const scratch *S = J->S;
  for (STAGE(st, J->T, t))
    for (int64_t i = t * hq; i < (t + 1) * hq; i++) {
      S->mx[i] = -INFINITY, S->l[i] = 0.0f;
      memset(S->attn + i * D, 0, (size_t)D * sizeof(float));
    }
  mg_wait(st, J->T);
}

/* Chunk k of row r (own_chunk) for the lane's n gathered queries, on kv heads hk0 .. hk0 +
 * kv_run - 1: attend over the chunk's positions, each query cut at its own end, updating the
 * states acc[i], mx[i], l[i]. */
static void attend_chunk(const step_job *J, const lane *L, const kv_src *C, int64_t r, int64_t k,
                         int64_t hk0, int64_t n, float *const *acc, float *const *mx,
                         float *const *l) {
  const int64_t len = own_chunk(own_span(J->P, r)), c0 = J->P->own_from[r] + k * len;
  for (int64_t i = 0; i < n; i++) L->c_to[i] = L->q_to[i] < c0 + len ? L->q_to[i] : c0 + len;
  attend(J->M, J->P, L->q, acc, mx, l, n / J->kv_run, r, c0, L->c_to, C, hk0, J->kv_run, L->s);
}

/* Point the lane's chunk lists (cacc, cmx, cl) at n states: d floats each from acc, one each
 * from mx and l; with `fresh`, make them fresh (-inf, 0, zeros). */
static void chunk_states(const lane *L, float *acc, float *mx, float *l, int64_t n, int64_t d,
                         int fresh) {
  for (int64_t i = 0; i < n; i++) {
    L->cacc[i] = acc + i * d, L->cmx[i] = mx + i, L->cl[i] = l + i;
    if (fresh) {
      mx[i] = -INFINITY, l[i] = 0.0f;
      memset(acc + i * d, 0, (size_t)d * sizeof(float));
    }
  }
}

/* One unit of own-position attention: kv heads run * kv_run .. of a row (unit = the row) or,
 * with J->split, of one chunk of a row (unit = the chunk, chunk_off). A row unit attends its
 * chunks in order, each after the first in the lane's cbuf, folded in at once; a chunk unit
 * attends its chunk (the first into the row's state, a later one into its own chunk state),
 * and the row's last chunk unit of this run to finish, over the layers' count of them
 * (chunk_done), folds the row's chunk states in order. Either way each state is folded in chunk
 * order, so the bits are the same. A draft tree's leaf (mg_plan's tok_at) then attends its own
 * key, stored past its branch, continuing its state. Then the row's outputs of these heads are
 * normalised. */
static void own_unit(const step_job *J, const lane *L, const kv_src *C, int64_t unit,
                     int64_t run, int64_t layer) {
  const mg_plan *P = J->P;
  const scratch *S = J->S;
  const int64_t D = J->M->head_dim, hq = J->M->n_heads, runs = J->M->n_kv_heads / J->kv_run;
  const int64_t hk0 = run * J->kv_run, hk1 = hk0 + J->kv_run, g = hq / J->M->n_kv_heads;
  int64_t r = unit, k = 0, n = 0;
  if (J->split) {
    for (r = 0; S->chunk_off[r + 1] <= unit; r++) continue;
    k = unit - S->chunk_off[r];
  }
  const int64_t nc = own_chunks(P, r);
  for (int64_t hk = hk0; hk < hk1; hk++)
    for (int64_t t = P->tok_off[r]; t < P->tok_off[r + 1]; t++)
      gather_queries(J->M, S, L, t, hk, &n);
  if (k == 0) attend_chunk(J, L, C, r, 0, hk0, n, L->acc, L->pmx, L->pl);
  if (!J->split)
    for (k = 1; k < nc; k++) {
      chunk_states(L, L->cbuf, L->cbuf + n * D, L->cbuf + n * (D + 1), n, D, 1);
      attend_chunk(J, L, C, r, k, hk0, n, L->cacc, L->cmx, L->cl);
      merge_states(L->acc, L->pmx, L->pl, L->cacc, L->cmx, L->cl, n, D);
    }
  else {
    const int64_t rec = S->chunk_rec[r] + run * n; /* chunk k's: rec + (k - 1) * runs * n */
    if (k > 0) {
      const int64_t at = rec + (k - 1) * runs * n;
      chunk_states(L, S->chunk_acc + at * D, S->chunk_mx + at, S->chunk_l + at, n, D, 1);
      attend_chunk(J, L, C, r, k, hk0, n, L->cacc, L->cmx, L->cl);
    }
    /* acq_rel: this unit's states are seen by the last one, which sees every other's */
    if (atomic_fetch_add_explicit(S->chunk_done + r * runs + run, 1, memory_order_acq_rel) + 1 <
        nc * (layer + 1))
      return;
    for (k = 1; k < nc; k++) {
      const int64_t at = rec + (k - 1) * runs * n;
      chunk_states(L, S->chunk_acc + at * D, S->chunk_mx + at, S->chunk_l + at, n, D, 0);
      merge_states(L->acc, L->pmx, L->pl, L->cacc, L->cmx, L->cl, n, D);
    }
  }
  if (S->tok_at) /* a leaf also attends its own key, stored past its parent's branch */
    for (int64_t t = P->tok_off[r]; t < P->tok_off[r + 1]; t++) {
      if (!is_leaf(S, t)) continue;
      int64_t m = 0;
      for (int64_t hk = hk0; hk < hk1; hk++) gather_queries(J->M, S, L, t, hk, &m);
      for (int64_t i = 0; i < m; i++) L->c_to[i] = S->tok_pos[t] + 1;
      attend(J->M, P, L->q, L->acc, L->pmx, L->pl, m / J->kv_run, r, S->tok_pos[t], L->c_to, C,
             hk0, J->kv_run, L->s);
    }
  for (int64_t t = P->tok_off[r]; t < P->tok_off[r + 1]; t++)
    for (int64_t i = t * hq + hk0 * g; i < t * hq + hk1 * g; i++) {
      const float inv = 1.0f / S->l[i];
      for (int64_t c = 0; c < D; c++) S->attn[i * D + c] *= inv;
    }
}

/* Attention of every query head over two stages: (prefix group, run of kv heads) units, then
 * own positions in own_unit's units (row or chunk of a row, run of kv heads); a unit owns the
 * queries it gathers (a row's last chunk unit its row's, after every other chunk unit of the
 * row is done with them), so each query's arithmetic is the one-thread path's. Needs the heads'
 * initial state (init_heads) and, on an int8 cache, the step's new K/V written (write_heads). */
static void attention(step_job *J, mg_stage *st, const kv_layer *c, int tid) {
  const mg_model *M = J->M;
  const mg_plan *P = J->P;
  const scratch *S = J->S;
  const lane *L = S->lanes + tid;
  const int64_t D = M->head_dim, hkv = M->n_kv_heads;
  const kv_src C = {c->kc, c->vc, c->kq, c->vq, c->ks, c->vs, L->deq};
  /* shared prefixes: once per group, in (group, run of grp_run kv heads) units */
  const int64_t gruns = hkv / J->grp_run, n_grp = P->n_groups * gruns;
  for (STAGE(st, n_grp, u)) {
    const int64_t gi = u / gruns, hk0 = u % gruns * J->grp_run;
    const int64_t first = P->group_rows[P->group_off[gi]];
    int64_t n = 0;
    for (int64_t hk = hk0; hk < hk0 + J->grp_run; hk++)
      for (int64_t i = P->group_off[gi]; i < P->group_off[gi + 1]; i++) {
        const int64_t r = P->group_rows[i];
        for (int64_t t = P->tok_off[r]; t < P->tok_off[r + 1]; t++)
          gather_queries(M, S, L, t, hk, &n);
      }
    /* attend_group needs head_dim % 4 == 0; a few queries go faster alone (SMALL_GROUP) */
    if (D % 4 || n / J->grp_run <= SMALL_GROUP) {
      for (int64_t i = 0; i < n; i++) L->q_to[i] = P->own_from[first];
      attend(M, P, L->q, L->acc, L->pmx, L->pl, n / J->grp_run, first, 0, L->q_to, &C, hk0,
             J->grp_run, L->s);
      continue;
    }
    attend_group(M, P, L->q, L->acc, L->pmx, L->pl, n / J->grp_run, first, P->own_from[first],
                 &C, hk0, J->grp_run, L->grp);
  }
  stage_wait(J, st, n_grp, tid);
  st++;
  /* each row's own positions, causal: a row's tokens together share the key blocks */
  const int64_t runs = hkv / J->kv_run, n_own = J->own_units * runs;
  const int64_t layer = (st - J->stage) / STAGES_PER_LAYER;
  for (STAGE(st, n_own, u)) own_unit(J, L, &C, u / runs, u % runs, layer);
  stage_wait(J, st, n_own, tid);
}

/* Columns [c0, c1) of y = x @ W [+ bias] for a float32 W (w; panel-major in panels of p floats
 * where p > 0), an int8 one (q, s) or an int4 one (act8 = 2: q packed, s group scales); an act8
 * product first quantizes x into the thread's lane L (once per stage: while *ready is 0). Sets
 * *ready: the lane's input of this stage is made. */
static void product_cols(const float *x, const float *w, int64_t p, const int8_t *q,
                         const float *s, int64_t act8, const lane *L, int *ready,
                         const float *bias, float *y, int64_t M, int64_t K, int64_t N, int64_t c0,
                         int64_t c1) {
  if (q && act8 && !*ready) {
    mg_a8_quantize(x, M, K, L->aq, L->ad);
    if (act8 == 2) mg_w4_xsums(L->aq, M, K, L->axs);
  }
  *ready = 1;
  if (q && act8 == 2)
    mg_w4_matmul_cols(L->aq, L->ad, L->axs, (const uint8_t *)q, s, bias, y, M, K, N, c0, c1);
  else if (q && act8)
    mg_a8_matmul_cols(L->aq, L->ad, q, s, bias, y, M, K, N, c0, c1);
  else if (q)
    mg_q8_matmul_cols(x, q, s, bias, y, M, K, N, c0, c1);
  else if (p)
    mg_matmul_panels(x, w, bias, y, M, K, N, p, c0, c1);
  else
    mg_matmul_cols(x, w, bias, y, M, K, N, c0, c1);
}

/* Column width of a product's units of n columns on nth threads: mg_col_width's one contiguous
 * slice per thread, in multiples of g as well as of 16 floats (a cache line): whole heads for
 * the q|k|v product, whole panels for a panel-major weight. */
static int64_t unit_width(int64_t n, int64_t g, int nth) {
  if (nth <= 1) return n > 0 ? n : 1;
  int64_t l = g;
  while (l % 16) l += g; /* the least common multiple of g and 16 */
  const int64_t per = ((n + l - 1) / l + nth - 1) / nth;
  return l * (per > 0 ? per : 1);
}

/* The least common multiple of a and b (small positive integers). */
static int64_t lcm(int64_t a, int64_t b) {
  int64_t l = a;
  while (l % b) l += a;
  return l;
}

/* The lane's x = rms_norm(h) * w of every token. Each thread makes its own copy at the first unit
 * it claims in the product stage that reads it, from h as the stage before left it: a pure
 * function of h, so every copy is the same bit for bit, and the norm needs no stage (barrier) of
 * its own, for T * hidden floats of work per thread. */
static void norm_lane(const step_job *J, const lane *L, const float *w) {
  const int64_t H = J->M->hidden;
  for (int64_t t = 0; t < J->T; t++) rms_norm(J->h + t * H, w, L->x + t * H, H, J->M->eps);
}

/* The lane's act = silu(gate) * up of every token, from the step's gate|up (T, 2 inter): made
 * per thread as norm_lane's x, so the gate needs no stage of its own either. */
static void gate_lane(const step_job *J, const lane *L) {
  const int64_t I = J->M->inter;
  for (int64_t t = 0; t < J->T; t++)
    for (int64_t i = 0; i < I; i += VW) {
      const vmask m = mask_first(I - i);
      const float *g = J->S->gu + t * 2 * I + i;
      const vec gv = vload(g, m);
      const vec silu = vdiv(gv, vadd(vbcast(1.0f), vexp(vsub(vzero(), gv))));
      vstore(L->act + t * I + i, vmul(silu, vload(g + I, m)), m);
    }
}

/* h += x @ W, W float32 (w) or int8 (q, s) (unit: a slice of h's columns). With `gated`, x is
 * the lane's act, made from the step's gate|up at the thread's first unit (gate_lane). */
static void residual(step_job *J, mg_stage *st, const float *x, const float *w, int64_t p,
                     const int8_t *q, const float *s, int64_t act8, int tid, int64_t K,
                     int gated) {
  const int64_t H = J->M->hidden, width = unit_width(H, p ? p : 16, J->nth);
  const int64_t n = mg_units(H, width);
  const lane *L = J->S->lanes + tid;
  int ready = 0;
  for (STAGE(st, n, u)) {
    int64_t c0, c1;
    mg_cols(H, width, u, &c0, &c1);
    if (gated && !ready) gate_lane(J, L);
    product_cols(gated ? L->act : x, w, p, q, s, act8, L, &ready, 0, J->S->tmp, J->T, K, H, c0,
                 c1);
    for (int64_t t = 0; t < J->T; t++)
      for (int64_t c = c0; c < c1; c++) J->h[t * H + c] += J->S->tmp[t * H + c];
  }
  stage_wait(J, st, n, tid);
}

/* Head i (q heads, then k, then v) of token t, just computed in the step's q|k|v: a q head is
 * normed (q_norm), rotated and given a fresh online-softmax state; a k head normed (k_norm) and
 * rotated; a k or v head written to its float32 cache slot (an int8 cache's are written by
 * write_heads, once the unit's heads are made for every token). */
static void head_work(const step_job *J, const mg_layer *W, const kv_layer *kv, int64_t t,
                      int64_t i) {
  const mg_model *M = J->M;
  const scratch *S = J->S;
  const int64_t D = M->head_dim, hq = M->n_heads, hkv = M->n_kv_heads;
  float *x = S->qkv + t * (hq + 2 * hkv) * D + i * D;
  if (i < hq + hkv) {
    const int64_t rp = stands_at(S, t) + J->P->rope_off[S->tok_row[t]];
    const float *norm = i < hq ? W->q_norm : W->k_norm;
    if (norm) rms_norm(x, norm, x, D, M->eps);
    rope(x, M->cos + rp * D, M->sin + rp * D, D);
  }
  if (i < hq) {
    S->mx[t * hq + i] = -INFINITY, S->l[t * hq + i] = 0.0f;
    memset(S->attn + (t * hq + i) * D, 0, (size_t)D * sizeof(float));
    return;
  }
  if (!kv->kc) return;
  const int64_t slot = slot_of(J->P, S->tok_row[t], S->tok_pos[t]);
  float *cache = i < hq + hkv ? kv->kc + (slot * hkv + i - hq) * D
                              : kv->vc + (slot * hkv + i - hq - hkv) * D;
  memcpy(cache, x, (size_t)D * sizeof(float));
}

/* K or V head i (of the q|k|v heads, i >= n_heads) of every row's new tokens, normed and
 * rotated (head_work), into an int8 cache (write_q8): each row owns the blocks it writes, and
 * the unit that computed the head is the only one to write that head's entries and scales. */
static void write_heads(const step_job *J, const kv_layer *kv, int64_t i) {
  const int64_t D = J->M->head_dim, hq = J->M->n_heads, hkv = J->M->n_kv_heads;
  const int64_t qkv = (hq + 2 * hkv) * D, hk = (i - hq) % hkv;
  const int key = i < hq + hkv;
  for (int64_t r = 0; r < J->P->n_rows; r++)
    write_q8(J->P, hkv, D, r, hk, J->S->qkv + J->P->tok_off[r] * qkv + i * D, qkv,
             key ? kv->kq : kv->vq, key ? kv->ks : kv->vs);
}

/* One layer: STAGES_PER_LAYER stages from st, whose units any of the job's threads compute.
 * Products are cut by output columns (a unit reads its columns of the weight), attention by
 * (group or row, run of kv heads). The q|k|v product's units are whole heads, each normed,
 * rotated and written to the cache by the unit that computed it; the norms and the SiLU gate are
 * made by every thread for itself at the start of the product that reads them (norm_lane,
 * gate_lane). So a layer has six stages, six waits: q|k|v | prefix-group attention | own
 * attention | o + residual | gate|up | down + residual. */
static void layer(step_job *J, const mg_layer *W, mg_stage *st, const kv_layer *kv, int tid) {
  const mg_model *M = J->M;
  const scratch *S = J->S;
  const int64_t T = J->T, D = M->head_dim, hq = M->n_heads, hkv = M->n_kv_heads;
  const int64_t qkv = (hq + 2 * hkv) * D, I = M->inter;
  /* q|k|v units are whole heads, so a unit owns the heads it computes (and whole panels) */
  const int64_t w_qkv = unit_width(qkv, W->qkv_p ? lcm(D, W->qkv_p) : D, J->nth);
  const int64_t w_gu = unit_width(2 * I, W->gate_up_p ? W->gate_up_p : 16, J->nth);
  const int64_t n_qkv = mg_units(qkv, w_qkv), n_gu = mg_units(2 * I, w_gu);
  const lane *L = S->lanes + tid;
  int ready = 0;
  for (STAGE(st, n_qkv, u)) {
    int64_t c0, c1;
    mg_cols(qkv, w_qkv, u, &c0, &c1);
    if (!ready) norm_lane(J, L, W->input_norm);
    product_cols(L->x, W->qkv, W->qkv_p, W->qkv_q, W->qkv_s, W->act8, L, &ready, W->qkv_bias,
                 S->qkv, T, M->hidden, qkv, c0, c1);
    for (int64_t t = 0; t < T; t++)
      for (int64_t i = c0 / D; i < c1 / D; i++) head_work(J, W, kv, t, i);
    if (kv->kq)
      for (int64_t i = c0 / D > hq ? c0 / D : hq; i < c1 / D; i++) write_heads(J, kv, i);
  }
  stage_wait(J, st++, n_qkv, tid);
  attention(J, st, kv, tid);
  st += 2;
  residual(J, st++, S->attn, W->o, W->o_p, W->o_q, W->o_s, W->act8, tid, hq * D, 0);
  /* gate|up in slices of its 2 I columns, one run of each weight row per unit (units of the
   * same columns of gate and of up read two runs of half the length: workload A on 2 threads of
   * a loaded 2-core Xeon decoded 1.06x slower so, median of 5 interleaved rounds) */
  ready = 0;
  for (STAGE(st, n_gu, u)) {
    int64_t c0, c1;
    mg_cols(2 * I, w_gu, u, &c0, &c1);
    if (!ready) norm_lane(J, L, W->post_norm);
    product_cols(L->x, W->gate_up, W->gate_up_p, W->gate_up_q, W->gate_up_s, W->act8, L, &ready,
                 0, S->gu, T, M->hidden, 2 * I, c0, c1);
  }
  stage_wait(J, st++, n_gu, tid);
  residual(J, st, 0, W->down, W->down_p, W->down_q, W->down_s, W->act8, tid, I, 1);
}

static void step_task(void *ctx, int tid, int nth) {
  step_job *J = ctx;
  (void)nth;
  const kv_layer *c0 = &J->cache;
#ifdef MG_STAGE_CLOCK
  stage_mark = thread_ns();
#endif
  for (int64_t i = 0; i < J->M->n_layers; i++) {
    const int64_t o = i * J->layer_stride, so = i * J->scale_stride;
    const kv_layer c = c0->kc ? (kv_layer){c0->kc + o, c0->vc + o, 0, 0, 0, 0}
                              : (kv_layer){0, 0, c0->kq + o, c0->vq + o, c0->ks + so,
                                           c0->vs + so};
    layer(J, J->layers + i, J->stage + i * STAGES_PER_LAYER, &c, tid);
  }
}

/* mg_decode_step and mg_decode_step_q8 over the cache whose first layer is `cache`. */
static int run_step(const mg_model *M, const mg_layer *layers, const mg_plan *P, float *h,
                    kv_layer cache, int64_t layer_stride, int64_t scale_stride, int threads) {
  const int64_t T = P->tok_off[P->n_rows], H = M->hidden;
  const int nth = threads < 1 ? 1 : threads > MG_MAX_THREADS ? MG_MAX_THREADS : threads;
  scratch S;
  mg_stage *stages = calloc((size_t)(M->n_layers * STAGES_PER_LAYER), sizeof(mg_stage));
  step_job J = {.M = M, .layers = layers, .P = P, .S = &S, .T = T, .layer_stride = layer_stride,
                .scale_stride = scale_stride, .h = h, .cache = cache, .nth = nth,
                .stage = stages};
  if (!stages || prepare(&J, &S)) {
    free(stages);
    return -1;
  }
  mg_parallel(nth, step_task, &J);
  if (M->final_norm) /* a few rows: one thread, after every layer's last stage */
    for (int64_t t = 0; t < T; t++) rms_norm(h + t * H, M->final_norm, h + t * H, H, M->eps);
  free(S.block);
  free(stages);
  return 0;
}

/* Run every layer over h (T, hidden), the embedded new tokens, in place, then the model's final
 * RMSNorm where M->final_norm is set; writes their K/V into
 * k_cache / v_cache (n_layers, S, n_kv_heads, head_dim). Up to `threads` threads of the pool
 * share the work; the results are the same bit for bit for any number. Returns 0, or -1 when
 * out of memory (h and the cache are then untouched). */
int mg_decode_step(const mg_model *M, const mg_layer *layers, const mg_plan *P, float *h,
                   float *k_cache, float *v_cache, int64_t layer_stride, int threads) {
  return run_step(M, layers, P, h, (kv_layer){k_cache, v_cache, 0, 0, 0, 0}, layer_stride, 0,
                  threads);
}

/* mg_decode_step over an int8 cache: k_cache / v_cache (n_layers, S, n_kv_heads, head_dim) int8
 * with k_scale / v_scale (n_layers, S / block_size, n_kv_heads) float32, scale_stride scales per
 * layer. The new tokens' K/V are quantized into their blocks (write_q8: kv_quant's values and
 * scales for the same K/V, bit for bit), then attended dequantized as in mg_attention_q8. */
int mg_decode_step_q8(const mg_model *M, const mg_layer *layers, const mg_plan *P, float *h,
                      int8_t *k_cache, int8_t *v_cache, float *k_scale, float *v_scale,
                      int64_t layer_stride, int64_t scale_stride, int threads) {
  return run_step(M, layers, P, h, (kv_layer){0, 0, k_cache, v_cache, k_scale, v_scale},
                  layer_stride, scale_stride, threads);
}

static void attention_task(void *ctx, int tid, int nth) {
  step_job *J = ctx;
  (void)nth;
  init_heads(J, J->stage);
  attention(J, J->stage + 1, &J->cache, tid);
}

/* mg_attention and mg_attention_q8: the plan's tokens attend over a float32 cache (kc, vc) or
 * an int8 one (kq, vq with scales ks, vs). */
static int attention_only(const mg_model *M, const mg_plan *P, const float *q, int64_t q_stride,
                          float *out, const float *kc, const float *vc, const int8_t *kq,
                          const int8_t *vq, const float *ks, const float *vs, int threads) {
  const int64_t T = P->tok_off[P->n_rows];
  const int nth = threads < 1 ? 1 : threads > MG_MAX_THREADS ? MG_MAX_THREADS : threads;
  scratch S;
  mg_stage stages[3] = {0};
  const kv_layer c = {(float *)kc, (float *)vc, (int8_t *)kq, (int8_t *)vq, (float *)ks,
                      (float *)vs}; /* read only */
  step_job J = {.M = M, .P = P, .S = &S, .T = T, .cache = c, .nth = nth, .stage = stages};
  if (prepare(&J, &S)) return -1;
  S.q_base = q;
  S.q_stride = q_stride;
  S.attn = out;
  mg_parallel(nth, attention_task, &J);
  free(S.block);
  return 0;
}

/* Attention alone, for steps whose products run elsewhere: the plan's tokens, whose keys and
 * values are already in this layer's k_cache / v_cache (S, n_kv_heads, head_dim), attend as in
 * mg_decode_step, on up to `threads` threads. q: token t's query head i at
 * q + t * q_stride + i * head_dim; out: (T, n_heads * head_dim). Returns 0, or -1 when out of
 * memory (out is then untouched). */
int mg_attention(const mg_model *M, const mg_plan *P, const float *q, int64_t q_stride,
                 float *out, const float *k_cache, const float *v_cache, int threads) {
  return attention_only(M, P, q, q_stride, out, k_cache, v_cache, 0, 0, 0, 0, threads);
}

/* mg_attention over an int8 cache: k_cache / v_cache (S, n_kv_heads, head_dim) int8 with
 * k_scale / v_scale (S / block_size, n_kv_heads) float32, entry = scale * q. Each key block is
 * dequantized once per (row or group, kv head) into the thread's scratch and attended as float32
 * keys and values, so results agree with dequantize-then-attend to float32 summation rounding,
 * and are the same bit for bit for any number of threads. */
int mg_attention_q8(const mg_model *M, const mg_plan *P, const float *q, int64_t q_stride,
                    float *out, const int8_t *k_cache, const int8_t *v_cache,
                    const float *k_scale, const float *v_scale, int threads) {
  return attention_only(M, P, q, q_stride, out, 0, 0, k_cache, v_cache, k_scale, v_scale,
                        threads);
}
#endif
