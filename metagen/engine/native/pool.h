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

/* Run task(ctx, tid, n) as above (n clamped to 1 .. MG_MAX_THREADS) and wait for it. Where
 * the machine has fewer free cores than threads the pool runs jobs on the caller alone for a
 * while (pool.c's oversubscription guard): the same results, never a deadlock. */
void mg_parallel(int n, mg_task task, void *ctx);

/* For tests of the guard's rule (pool.c's guard_next): solo_after[i] = the jobs it would run
 * alone after job i of n, each of walls[i] ns on `threads` threads that waited waits[i] ns in
 * all, from a fresh guard; job i + 1 is the one tried on threads after those ran alone. */
void mg_guard_test(const int64_t *walls, const int64_t *waits, int64_t n, int threads,
                   int *solo_after);

/* out[0] = jobs alone at a first fallback, out[1] = at most, out[2] = strikes in a row that
 * start a first fallback. */
void mg_guard_limits(int *out);

/* out[0] = jobs run on several threads, out[1] = jobs the guard ran alone, out[2] = times it
 * fell back to running alone (since the process started). */
void mg_pool_stats(int64_t *out);

/* One stage's counters, on their own cache line; zero-initialise before the job. */
typedef struct {
  atomic_llong next, done;
  char pad[64 - 2 * sizeof(atomic_llong)];
} mg_stage;

/* The next unclaimed unit (< n) of the stage, or -1 when all are claimed. */
static inline int64_t mg_claim(mg_stage *s, int64_t n) {
  const int64_t u = atomic_fetch_add(&s->next, 1);
  return u < n ? u : -1;
}

/* Mark one claimed unit done. */
static inline void mg_done(mg_stage *s) { atomic_fetch_add(&s->done, 1); }

/* Wait until all n units of the stage are done. */
void mg_wait(mg_stage *s, int64_t n);

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

/* Computes columns [c0, c1) of a product's output; ctx is the product's arguments. */
typedef void (*mg_cols_fn)(const void *ctx, int64_t c0, int64_t c1);

/* fn over all n columns on up to nth threads of the pool, which claim them in the contiguous
 * units of mg_col_width(n, nth) (one stage); returns when every unit is done. fn must give each
 * column the same result whichever slice computes it: then the whole equals one thread's result
 * bit for bit. */
void mg_parallel_cols(int nth, int64_t n, mg_cols_fn fn, const void *ctx);
#endif /* MG_POOL_H */
