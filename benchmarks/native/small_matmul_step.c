/* The float products of one decode step of the benchmark target, in C with nothing else around
 * them: the 8 layers' qkv, o, gate|up and down (in, out) weights and the head (512 x 32000), each
 * distinct (167 MB, streamed from memory each step as decoding does), through mg_matmul_threads.
 * Prints the median and best CPU time of the calling thread per step (ms) over `reps` steps and
 * the median's GFLOP/s. With K N COPIES instead of the target: that one shape, COPIES distinct
 * weights per step (COPIES * K * N * 4 bytes past the last-level cache streams; 1 copy of a
 * weight that fits in L2 gives the kernel's rate from cache).
 *
 * Built against any version of the kernel's C files, so variants of small_matmul.c can be
 * compared in alternating processes (old, new, old, new, ...):
 *   gcc -O3 -march=native -std=c11 -I metagen/engine/native -o /tmp/step \
 *       benchmarks/native/small_matmul_step.c metagen/engine/native/small_matmul.c \
 *       metagen/engine/native/pool.c -lm -pthread
 *   /tmp/step ROWS THREADS REPS [K N COPIES]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void mg_matmul_threads(const float *x, const float *w, const float *bias, float *y, int64_t M,
                       int64_t K, int64_t N, int threads);

static double thread_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define MAX_PRODUCTS 64

int main(int argc, char **argv) {
  if (argc != 4 && argc != 7) {
    fprintf(stderr, "usage: %s ROWS THREADS REPS [K N COPIES]\n", argv[0]);
    return 2;
  }
  const int M = atoi(argv[1]), threads = atoi(argv[2]), reps = atoi(argv[3]);
  int64_t shape[MAX_PRODUCTS][2], kmax = 0, nmax = 0;
  int n = 0;
  if (argc == 7) {
    for (int c = 0; c < atoi(argv[6]) && n < MAX_PRODUCTS; c++, n++)
      shape[n][0] = atol(argv[4]), shape[n][1] = atol(argv[5]);
  } else {
    const int64_t layer[4][2] = {{512, 1536}, {512, 512}, {512, 2752}, {1376, 512}};
    for (int l = 0; l < 8; l++)
      for (int p = 0; p < 4; p++, n++) shape[n][0] = layer[p][0], shape[n][1] = layer[p][1];
    shape[n][0] = 512, shape[n][1] = 32000, n++;
  }
  if (M < 1 || threads < 1 || reps < 1 || n < 1) return 2;
  float *w[MAX_PRODUCTS];
  double flop = 0;
  for (int i = 0; i < n; i++) {
    const size_t size = (size_t)(shape[i][0] * shape[i][1]);
    w[i] = aligned_alloc(64, (size * 4 + 63) / 64 * 64);
    if (!w[i]) return 1;
    for (size_t j = 0; j < size; j++) w[i][j] = (float)(j % 7) * 0.01f;
    flop += 2.0 * M * (double)size;
    kmax = shape[i][0] > kmax ? shape[i][0] : kmax;
    nmax = shape[i][1] > nmax ? shape[i][1] : nmax;
  }
  float *x = aligned_alloc(64, (size_t)(M * kmax * 4 + 63) / 64 * 64);
  float *y = aligned_alloc(64, (size_t)(M * nmax * 4 + 63) / 64 * 64);
  double *t = malloc(sizeof(double) * (size_t)reps);
  if (!x || !y || !t) return 1;
  for (int64_t i = 0; i < M * kmax; i++) x[i] = (float)(i % 5) * 0.1f;
  for (int r = 0; r < reps; r++) {
    const double t0 = thread_seconds();
    for (int i = 0; i < n; i++)
      mg_matmul_threads(x, w[i], 0, y, M, shape[i][0], shape[i][1], threads);
    t[r] = thread_seconds() - t0;
  }
  qsort(t, (size_t)reps, sizeof(double), by_value);
  printf("%.3f %.3f %.1f\n", t[reps / 2] * 1e3, t[0] * 1e3, flop / t[reps / 2] / 1e9);
  return 0;
}
