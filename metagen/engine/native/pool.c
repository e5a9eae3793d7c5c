/* metagen native kernels: the thread pool of pool.h (pthreads).
 *
 * Each worker waits on its own job counter: spinning briefly, then asleep on a condition
 * variable, so idle workers hardly compete with PyTorch's threads between kernel calls. The
 * caller opens the job, bumps the counters of the workers it wants, runs the task itself, then
 * closes the job and waits only for the workers that joined it (`refs`): a worker that wakes
 * after the close stays out. Waits spin with the CPU's pause hint and yield the core after a
 * while, so a job with more threads than free cores still makes progress.
 *
 * More threads than free cores (another process busy on the machine) is worse than slow: a
 * thread the OS takes off its core in the middle of a stage holds the stage's barrier until it
 * is back, while the others spin. On a 2-core Zen 3 beside one busy process, a 16-row decode
 * step took 51 ms on two threads against 33 ms on one. So the pool watches each job's waits:
 * a job whose threads spent more than LOST_PCT % of their time (wall time x threads) waiting on
 * each other is a strike, and after STRIKES jobs in a row the pool runs the next jobs on the
 * caller alone, then tries its threads again (guard_next, a pure function). How many alone backs
 * off exponentially: SOLO_MIN after a first fallback, twice the last after a strike on the first
 * job tried again, up to SOLO_MAX; each clean job halves it back. So a busy process beside us
 * costs one job on threads every SOLO_MAX, while contention that passes (torch's OpenMP workers
 * spinning after a PyTorch prefill's operators, which made an int4 prefill's products strike)
 * costs SOLO_MIN jobs alone, not the SOLO_MAX decode steps after it: with a fixed 256, workload
 * A on int4 weights ran its whole decode on one thread. Results do not change: every job's
 * result is the same bit for bit on any number of threads.
 */
#define _POSIX_C_SOURCE 200809L
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_WAKE 2000  /* pause hints before an idle worker sleeps (tens of us) */
#define CLOSED 0x80000000u
#define SPIN_YIELD 2000 /* pause hints before a waiting thread yields its core */
#define LOST_PCT 25     /* a job waiting more than this % of its thread time is a strike */
#define STRIKES 2       /* strikes in a row before the pool first runs jobs alone */
#define SOLO_MIN 8      /* jobs run alone at a first fallback */
#define SOLO_MAX 256    /* ... and at most, after strikes on every try */

/* The oversubscription guard's state: strikes in a row; jobs still to run alone; the length of
 * the last fallback, halved by each clean job (below SOLO_MIN: none, the next takes STRIKES). */
typedef struct {
  int strikes, solo, backoff;
} mg_guard;

static struct {
  pthread_mutex_t busy;  /* held by the caller of the running job */
  pthread_mutex_t mu;    /* guards sleeping on `wake` */
  pthread_cond_t wake;
  atomic_int sleepers;   /* workers asleep (or about to be) on `wake` */
  atomic_uint refs;      /* workers inside the job, | CLOSED when none may join */
  int workers;           /* started: ids 1 .. workers */
  int atfork;            /* the fork handler is registered */
  mg_task task;
  void *ctx;
  int nth;
  atomic_uint go[MG_MAX_THREADS]; /* per worker: bumped once per job it takes part in */
  unsigned start[MG_MAX_THREADS]; /* go[i] when worker i was started (its last job done) */
  atomic_llong waited;   /* ns the running job's threads spent in mg_wait */
  mg_guard guard;        /* the oversubscription guard's state (the caller holds `busy`) */
  int64_t stats[3];      /* jobs run with threads, jobs run alone by the guard, fallbacks */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0,
            CLOSED};

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The guard after a job of wall_ns on `threads` threads whose threads waited wait_ns in all: a
 * strike where they waited more than LOST_PCT % of wall_ns * threads. STRIKES in a row (one,
 * while a fallback is still remembered in `backoff`) start a fallback of SOLO_MIN jobs alone, or
 * twice the last one's, at most SOLO_MAX (mg_parallel counts them down as they run); a clean
 * job halves `backoff`. */
static mg_guard guard_next(mg_guard g, int64_t wall_ns, int64_t wait_ns, int threads) {
  const int strike = 100 * wait_ns > (int64_t)LOST_PCT * wall_ns * threads;
  if (!strike) {
    g.strikes = 0;
    g.backoff = g.backoff / 2 >= SOLO_MIN ? g.backoff / 2 : 0;
    return g;
  }
  if (++g.strikes >= (g.backoff ? 1 : STRIKES)) {
    g.backoff = !g.backoff ? SOLO_MIN : 2 * g.backoff < SOLO_MAX ? 2 * g.backoff : SOLO_MAX;
    g.strikes = 0, g.solo = g.backoff;
  }
  return g;
}

void mg_guard_test(const int64_t *walls, const int64_t *waits, int64_t n, int threads,
                   int *solo_after) {
  mg_guard g = {0, 0, 0};
  for (int64_t i = 0; i < n; i++) {
    g = guard_next(g, walls[i], waits[i], threads);
    solo_after[i] = g.solo;
    g.solo = 0; /* the next job is the one tried after these ran alone */
  }
}

void mg_guard_limits(int *out) {
  out[0] = SOLO_MIN, out[1] = SOLO_MAX, out[2] = STRIKES;
}

void mg_pool_stats(int64_t *out) {
  for (int i = 0; i < 3; i++) out[i] = pool.stats[i];
}

static void relax(int64_t spin) {
  if (spin < SPIN_YIELD)
    CPU_RELAX();
  else
    sched_yield();
}

static void *worker(void *arg) {
  const int id = (int)(intptr_t)arg;
  unsigned seen = pool.start[id]; /* not go[id]: the first job may already be posted */
  for (;;) {
    for (int spin = 0; atomic_load(&pool.go[id]) == seen; spin++) {
      if (spin < SPIN_WAKE) {
        CPU_RELAX();
        continue;
      }
      pthread_mutex_lock(&pool.mu);
      atomic_fetch_add(&pool.sleepers, 1);
      while (atomic_load(&pool.go[id]) == seen) pthread_cond_wait(&pool.wake, &pool.mu);
      atomic_fetch_sub(&pool.sleepers, 1);
      pthread_mutex_unlock(&pool.mu);
    }
    seen = atomic_load(&pool.go[id]);
    /* joined an open job (maybe a later one than it was woken for): task, ctx, nth are its */
    if (!(atomic_fetch_add(&pool.refs, 1) & CLOSED) && id < pool.nth)
      pool.task(pool.ctx, id, pool.nth);
    atomic_fetch_sub(&pool.refs, 1);
  }
  return 0;
}

/* In a forked child only the forking thread exists: start the pool afresh. */
static void after_fork_in_child(void) {
  pool.guard = (mg_guard){0, 0, 0};
  pthread_mutex_init(&pool.busy, 0);
  pthread_mutex_init(&pool.mu, 0);
  pthread_cond_init(&pool.wake, 0);
  atomic_store(&pool.sleepers, 0);
  atomic_store(&pool.refs, CLOSED);
  pool.workers = 0;
}

/* Start workers up to id n - 1 (the caller holds `busy`); returns how many threads a job can
 * have. */
static int grow(int n) {
  if (!pool.atfork) pool.atfork = pthread_atfork(0, 0, after_fork_in_child) == 0;
  if (!pool.atfork) return 1; /* a child could not restart the pool: stay single-threaded */
  while (pool.workers < n - 1) {
    pthread_attr_t attr;
    pthread_t t;
    const int id = pool.workers + 1;
    pool.start[id] = atomic_load(&pool.go[id]);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    const int failed = pthread_create(&t, &attr, worker, (void *)(intptr_t)id);
    pthread_attr_destroy(&attr);
    if (failed) break;
    pool.workers = id;
  }
  return pool.workers + 1 < n ? pool.workers + 1 : n;
}

void mg_parallel(int n, mg_task task, void *ctx) {
  n = n < 1 ? 1 : n > MG_MAX_THREADS ? MG_MAX_THREADS : n;
  if (n == 1 || pthread_mutex_trylock(&pool.busy) != 0) {
    task(ctx, 0, 1);
    return;
  }
  if (pool.guard.solo > 0) { /* the guard's fallback: this job on the caller alone */
    pool.guard.solo--;
    pool.stats[1]++;
    pthread_mutex_unlock(&pool.busy);
    task(ctx, 0, 1);
    return;
  }
  n = grow(n);
  const int64_t t0 = now_ns();
  atomic_store(&pool.waited, 0);
  pool.task = task;
  pool.ctx = ctx;
  pool.nth = n;
  atomic_fetch_and(&pool.refs, ~CLOSED); /* open: publishes task, ctx, nth */
  for (int i = 1; i < n; i++) atomic_fetch_add(&pool.go[i], 1);
  if (atomic_load(&pool.sleepers) > 0) {
    pthread_mutex_lock(&pool.mu);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.mu);
  }
  task(ctx, 0, n);
  atomic_fetch_or(&pool.refs, CLOSED);
  if (atomic_load(&pool.refs) != CLOSED) {
    const int64_t w0 = now_ns();
    for (int64_t spin = 0; atomic_load(&pool.refs) != CLOSED; spin++) relax(spin);
    atomic_fetch_add(&pool.waited, now_ns() - w0);
  }
  const int solo = pool.guard.solo;
  pool.guard = guard_next(pool.guard, now_ns() - t0, atomic_load(&pool.waited), n);
  pool.stats[0]++;
  pool.stats[2] += pool.guard.solo > solo;
  pthread_mutex_unlock(&pool.busy);
}

void mg_wait(mg_stage *s, int64_t n) {
  if (atomic_load(&s->done) >= n) return;
  const int64_t t0 = now_ns();
  for (int64_t spin = 0; atomic_load(&s->done) < n; spin++) relax(spin);
  atomic_fetch_add(&pool.waited, now_ns() - t0);
}

typedef struct {
  mg_cols_fn fn;
  const void *ctx;
  int64_t n, width;
  mg_stage cols;
} cols_job;

static void cols_task(void *ctx, int tid, int nth) {
  cols_job *j = ctx;
  const int64_t units = mg_units(j->n, j->width);
  (void)tid, (void)nth;
  for (int64_t u, c0, c1; (u = mg_claim(&j->cols, units)) >= 0; mg_done(&j->cols)) {
    mg_cols(j->n, j->width, u, &c0, &c1);
    j->fn(j->ctx, c0, c1);
  }
  mg_wait(&j->cols, units);
}

void mg_parallel_cols(int nth, int64_t n, mg_cols_fn fn, const void *ctx) {
  cols_job j = {fn, ctx, n, mg_col_width(n, nth)};
  mg_parallel(nth, cols_task, &j);
}
