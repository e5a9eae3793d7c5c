/* One decode step's int8 products in one call, so their time is the kernels' alone (through
 * Python each product costs a ctypes call, a tensor and its checks: tens of microseconds on a
 * loaded VM, a quarter of a one-row product of the benchmark target). benchmarks/int8_row.py
 * builds it with the kernels' C files (this version's or an older one's). */
#include <stdint.h>

int mg_a8_matmul_threads(const float *x, const int8_t *w, const float *scale, const float *bias,
                         float *y, int64_t M, int64_t K, int64_t N, int threads);
void mg_q8_matmul_threads(const float *x, const int8_t *w, const float *scale, const float *bias,
                          float *y, int64_t M, int64_t K, int64_t N, int threads);

/* Product i < n: y_i (1, N) = x_i (1, K) @ w_i^T * s_i, K = shapes[2i], N = shapes[2i + 1], by
 * the weight-only kernel or (act8) the w8a8 one; each operand follows the one before in its
 * buffer, except the weights with `same_weight` (every product reads w from its start).
 * Returns 0, or -1 when the w8a8 kernel is out of memory. */
int mg_int8_step_probe(const float *x, const int8_t *w, const float *s, float *y,
                       const int64_t *shapes, int64_t n, int act8, int threads, int same_weight) {
  for (int64_t i = 0; i < n; i++) {
    const int64_t K = shapes[2 * i], N = shapes[2 * i + 1];
    if (act8) {
      if (mg_a8_matmul_threads(x, w, s, 0, y, 1, K, N, threads)) return -1;
    } else {
      mg_q8_matmul_threads(x, w, s, 0, y, 1, K, N, threads);
    }
    x += K;
    s += N;
    y += N;
    if (!same_weight) w += K * N;
  }
  return 0;
}
