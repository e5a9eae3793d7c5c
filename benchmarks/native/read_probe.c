/* The plain streaming read that bounds a weight-streaming product: sum n floats, split across
 * threads as the products split their columns (mg_parallel_cols), four independent vector
 * chains per thread. benchmarks/weight_pages.py builds it with the kernels' pool.c. */
#include "pool.h"
#include "simd.h"

typedef struct {
  const float *p;
  float *out; /* one float per unit: keeps the sums observable */
  int64_t width;
} probe_args;

static void read_cols(const void *ctx, int64_t c0, int64_t c1) {
  const probe_args *a = ctx;
  vec s0 = vzero(), s1 = vzero(), s2 = vzero(), s3 = vzero();
  int64_t i = c0;
  for (; i + 4 * VW <= c1; i += 4 * VW) {
    s0 = vadd(s0, vloadu(a->p + i));
    s1 = vadd(s1, vloadu(a->p + i + VW));
    s2 = vadd(s2, vloadu(a->p + i + 2 * VW));
    s3 = vadd(s3, vloadu(a->p + i + 3 * VW));
  }
  float tail = 0;
  for (; i < c1; i++) tail += a->p[i];
  a->out[c0 / a->width] = vsum(vadd(vadd(s0, s1), vadd(s2, s3))) + tail;
}

/* Read p[0:n) on up to `threads` pool threads; out holds one float per thread's unit. */
void mg_read_probe(const float *p, int64_t n, float *out, int threads) {
  const probe_args a = {p, out, mg_col_width(n, threads)};
  mg_parallel_cols(threads, n, read_cols, &a);
}
