/* metagen native kernels: the thread pool that shares a kernel's work among threads.
 *
 * mg_parallel(n, task, ctx) runs task(ctx, tid, n) on the caller (tid 0) and on up to n - 1
 * pool threads (tids 1 .. n - 1), and returns when every thread that joined has returned. The
 * pool belongs to the library: one per process, its threads started at first use (and after a
 * fork, in the child) and kept, sleeping between jobs. A pool thread that wakes late (its core
 * busy with another process) joins the job where it stands, or not at all once it is over, so
 * a task must be correct for any subset of its tids: it shares its work through stages (below),
 * never by a fixed share per tid. One job runs at a time; a caller that finds the pool busy
 * (another Python thread's kernel: ctypes releases the GIL) runs its job alone.
 *
 * A stage is a count of work units that the job's threads claim one at a time (mg_claim); each
 * thread then waits at mg_wait until every unit is done. Whichever thread computes a unit, it
 * runs the same instructions, so results never depend on the thread count or on who joined.
 */
#ifndef MG_POOL_H
#define MG_POOL_H
#include <stdatomic.h>
#include <stdint.h>

#define MG_MAX_THREADS 64

typedef void (*mg_task)(void *ctx, int tid, int nth);

/* Run task(ctx, tid, n) as above (n clamped to 1 .. MG_MAX_THREADS) and wait for it. */
void mg_parallel(int n, mg_task task, void *ctx);

/* One stage's counters, on their own cache line; zero-initialise before the job. A stage's
 * units are claimed either all with mg_claim or all with mg_claim_own. */
typedef struct {
  atomic_llong next, done;
  atomic_ullong taken; /* mg_claim_own: bit u set once unit u is claimed */
  char pad[64 - 2 * sizeof(atomic_llong) - sizeof(atomic_ullong)];
} mg_stage;

/* The next unclaimed unit (< n) of the stage, or -1 when all are claimed. */
static inline int64_t mg_claim(mg_stage *s, int64_t n) {
  const int64_t u = atomic_fetch_add(&s->next, 1);
  return u < n ? u : -1;
}

/* An unclaimed unit of a stage of n <= 64 units, or -1 when all are claimed: unit `own` (< n)
 * while it is free, then the others from own + 1 on, wrapping. A thread that asks for the unit
 * whose data it warmed (mg_wait_warm) gets it unless a thread that ran out of its own took it
 * first; which thread computes a unit still never changes the unit's result. */
static inline int64_t mg_claim_own(mg_stage *s, int64_t n, int64_t own) {
  for (int64_t i = 0; i < n; i++) {
    const int64_t u = (own + i) % n;
    const unsigned long long bit = 1ull << u;
    if (!(atomic_load(&s->taken) & bit) && !(atomic_fetch_or(&s->taken, bit) & bit)) return u;
  }
  return -1;
}

/* Mark one claimed unit done. */
static inline void mg_done(mg_stage *s) { atomic_fetch_add(&s->done, 1); }

/* Wait until all n units of the stage are done. */
void mg_wait(mg_stage *s, int64_t n);

/* Memory a thread will read next, to pull into its core's L2 while it waits at a barrier:
 * `rows` runs of `bytes` bytes, `stride` bytes apart, from `base`, in that order, of which the
 * first `left` bytes are still to warm (so several waits before one stage continue one warming,
 * and what a wait cannot use is never fetched). */
typedef struct {
  const char *base;
  int64_t rows, bytes, stride;
  int64_t row, off, left; /* the cursor: next line at base + row * stride + off */
} mg_warm;

/* A warming of at most `cap` bytes of the region above (nothing to warm: base NULL). */
static inline mg_warm mg_warm_region(const void *base, int64_t rows, int64_t bytes,
                                     int64_t stride, int64_t cap) {
  const int64_t all = base ? rows * bytes : 0;
  return (mg_warm){base, rows, bytes, stride, 0, 0, all < cap ? all : cap};
}

/* mg_wait that spends its wait warming w: a thread that finished its units early fetches the
 * next stage's data (prefetches into L2, a few lines between checks) while the others finish,
 * then spins as mg_wait. The loads it issues are hints: results never depend on them. */
void mg_wait_warm(mg_stage *s, int64_t n, mg_warm *w);

/* Columns [*c0, *c1) of unit u when n columns are cut into units of `width` (a multiple of 16
 * floats, one cache line, so no two units write the same line of an output row). */
static inline void mg_cols(int64_t n, int64_t width, int64_t u, int64_t *c0, int64_t *c1) {
  *c0 = u * width;
  *c1 = *c0 + width < n ? *c0 + width : n;
}

/* The unit width for n columns on nth threads: one contiguous slice per thread, whole cache
 * lines. Wider runs of each weight row stream better: on a 2-core Zen 4 VM, 40 products of a
 * (512, 2752) weight took 7.7 / 8.5 / 15.2 ms at 1 / 4 / 16 rows on two threads in halves
 * against 10.6 / 13.6 / 24 ms on one thread, but 7.7 / 12.7 / 23.5 ms in quarters and 11.7 /
 * 15.7 / 28.5 ms in eighths. A thread that has not joined yet leaves its slice to whichever
 * thread claims it first. */
static inline int64_t mg_col_width(int64_t n, int nth) {
  if (nth <= 1) return n > 0 ? n : 1;
  const int64_t lines = (n + 15) / 16, per = (lines + nth - 1) / nth;
  return 16 * (per > 0 ? per : 1);
}

static inline int64_t mg_units(int64_t n, int64_t width) { return (n + width - 1) / width; }
#endif /* MG_POOL_H */
