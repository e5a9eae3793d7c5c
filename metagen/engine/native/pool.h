/* metagen native kernels: the thread pool that splits a kernel's work across threads.
 *
 * mg_parallel(n, task, ctx) runs task(ctx, i, n) for every i < n, on the caller (i = 0) and
 * n - 1 pool threads, and returns when all have returned. The pool belongs to the library: one
 * per process, its threads started at first use (and after a fork, in the child) and kept,
 * sleeping between jobs, so a kernel call costs a wake-up, not a thread creation. One job runs
 * at a time: a caller that finds the pool busy (another Python thread's kernel, since ctypes
 * releases the GIL) runs its job on its own thread with n = 1. Tasks split their work so that
 * every output element is computed by the same instructions whatever n is, so results do not
 * depend on the thread count (or on whether the pool was busy).
 *
 * mg_sync(b, n) is a barrier for the n threads of one job; mg_share splits columns into
 * disjoint cache-line-aligned slices, one per thread.
 */
#ifndef MG_POOL_H
#define MG_POOL_H
#include <stdatomic.h>
#include <stdint.h>

#define MG_MAX_THREADS 64

typedef void (*mg_task)(void *ctx, int tid, int nth);

/* Run task(ctx, tid, n) for tid < n (n clamped to 1 .. MG_MAX_THREADS; fewer where the pool is
 * busy or threads cannot be started) and wait for all of them. */
void mg_parallel(int n, mg_task task, void *ctx);

/* A barrier for the threads of one job; zero-initialise it before the job. */
typedef struct {
  atomic_int count, phase;
} mg_barrier;

/* Wait until all nth threads of the job have called this (the barrier's n-th use for each). */
void mg_sync(mg_barrier *b, int nth);

/* Thread tid's slice [*c0, *c1) of n columns split nth ways at multiples of 16 floats (one
 * cache line), so no two threads write the same line of an output row. */
static inline void mg_share(int64_t n, int tid, int nth, int64_t *c0, int64_t *c1) {
  const int64_t lines = (n + 15) / 16, a = lines * tid / nth * 16, b = lines * (tid + 1) / nth * 16;
  *c0 = a < n ? a : n;
  *c1 = b < n ? b : n;
}
#endif /* MG_POOL_H */
