/*
 * pool.c - the runtime's one thread pool. Kernels split large loops across it
 * with tide_parallel_for(); OpenBLAS runs single-threaded inside it, so no two
 * sets of threads ever compete for the cores. Idle workers spin briefly (a
 * back-to-back op is common) and then sleep on a condition variable.
 * Scheduling ops themselves is the engine's job (engine.c), not this file's.
 */
#include "../core/internal.h"

#include <pthread.h>
#include <unistd.h>

enum { MAX_THREADS = 256, SPIN_ROUNDS = 4000 };

typedef struct {
    tide_range_fn fn;
    void *        ctx;
    int64_t       n, step;       /* ranges are [i*step, min(n, (i+1)*step)) */
    int64_t       n_ranges;
} job_t;

/* The job's fields are written under wake_lock while no worker is inside a job
 * (active == 0), and workers copy them under the same lock when they enter,
 * so a late worker never reads a job while the next one is being set up. */
static pthread_mutex_t   pool_lock = PTHREAD_MUTEX_INITIALIZER;   /* one parallel_for at a time */
static pthread_mutex_t   wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t    wake_cond = PTHREAD_COND_INITIALIZER;
static pthread_cond_t    done_cond = PTHREAD_COND_INITIALIZER;
static job_t             job;
static int32_t           active;                /* workers inside run_ranges; under wake_lock */
static atomic_llong      next_range, done_ranges;
static atomic_llong      generation;
static atomic_int        n_threads;             /* including the calling thread; 0 = not set yet */
static int32_t           n_workers;             /* started */
static _Thread_local int in_pool;               /* a worker, or a caller inside parallel_for */
static _Thread_local int serial;                /* this thread's kernels run single-threaded */
static atomic_int        lent;                  /* the cores are lent out: workers sleep at once */

void tide_pool_set_serial(int32_t on) { serial = on; }

static int32_t default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int32_t)n;
}

void tide_set_num_threads(int32_t n) {
    if (n < 1) n = default_threads();
    if (n > MAX_THREADS) n = MAX_THREADS;
    atomic_store(&n_threads, n);
}

int32_t tide_get_num_threads(void) {
    int32_t n = atomic_load_explicit(&n_threads, memory_order_relaxed);
    if (n) return n;
    int32_t expected = 0;
    atomic_compare_exchange_strong(&n_threads, &expected, default_threads());
    return atomic_load(&n_threads);
}

static void run_ranges(const job_t * j) {
    for (;;) {
        int64_t i = atomic_fetch_add(&next_range, 1);
        if (i >= j->n_ranges) return;
        int64_t b = i * j->step, e = b + j->step < j->n ? b + j->step : j->n;
        j->fn(j->ctx, b, e);
        if (atomic_fetch_add(&done_ranges, 1) + 1 == j->n_ranges) {
            pthread_mutex_lock(&wake_lock);
            pthread_cond_broadcast(&done_cond);
            pthread_mutex_unlock(&wake_lock);
        }
    }
}

static void * worker(void * arg) {
    (void)arg;
    in_pool = 1;
    long long seen = atomic_load(&generation);
    for (;;) {
        int spins = 0;
        while (atomic_load_explicit(&generation, memory_order_acquire) == seen && spins++ < SPIN_ROUNDS &&
               !atomic_load_explicit(&lent, memory_order_relaxed))
            __builtin_ia32_pause();
        pthread_mutex_lock(&wake_lock);
        while (atomic_load(&generation) == seen) pthread_cond_wait(&wake_cond, &wake_lock);
        seen    = atomic_load(&generation);
        job_t j = job;
        active++;
        pthread_mutex_unlock(&wake_lock);
        run_ranges(&j);
        pthread_mutex_lock(&wake_lock);
        if (--active == 0) pthread_cond_broadcast(&done_cond);
        pthread_mutex_unlock(&wake_lock);
    }
    return NULL;
}

void tide_parallel_for(int64_t n, int64_t grain, int64_t align, tide_range_fn fn, void * ctx) {
    int32_t threads = tide_get_num_threads();
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (threads == 1 || n < 2 * grain || in_pool || serial || pthread_mutex_trylock(&pool_lock) != 0) {
        fn(ctx, 0, n);
        return;
    }
    /* The engine's busy workers count against the cores, so that a kernel's own
     * threads and the engine's never add up to more runnable threads than cores. */
    int32_t busy = tide_engine_busy_workers();
    int32_t avail = busy > 0 ? threads - busy + 1 : threads;
    if (avail < 1) avail = 1;
    int64_t ranges = n / grain;
    if (ranges > avail) ranges = avail;
    if (ranges < 2) {
        pthread_mutex_unlock(&pool_lock);
        fn(ctx, 0, n);
        return;
    }
    int64_t step = (n + ranges - 1) / ranges;
    if (align > 1) step = (step + align - 1) / align * align;
    ranges = (n + step - 1) / step;
    while (n_workers < threads - 1) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&th, &at, worker, NULL);
        pthread_attr_destroy(&at);
        if (rc != 0) break;   /* fewer workers: the caller takes the remaining ranges */
        n_workers++;
    }
    job_t j = {fn, ctx, n, step, ranges};
    pthread_mutex_lock(&wake_lock);
    while (active > 0) pthread_cond_wait(&done_cond, &wake_lock);   /* stragglers of the last job */
    job = j;
    atomic_store(&next_range, 0);
    atomic_store(&done_ranges, 0);
    atomic_fetch_add_explicit(&generation, 1, memory_order_release);
    pthread_cond_broadcast(&wake_cond);
    pthread_mutex_unlock(&wake_lock);

    in_pool = 1;
    run_ranges(&j);
    in_pool = 0;
    int spins = 0;
    while (atomic_load_explicit(&done_ranges, memory_order_acquire) < ranges && spins++ < SPIN_ROUNDS * 4)
        __builtin_ia32_pause();
    if (atomic_load(&done_ranges) < ranges) {
        pthread_mutex_lock(&wake_lock);
        while (atomic_load(&done_ranges) < ranges) pthread_cond_wait(&done_cond, &wake_lock);
        pthread_mutex_unlock(&wake_lock);
    }
    pthread_mutex_unlock(&pool_lock);
}

int32_t tide_pool_lend(void) {
    int32_t threads = tide_get_num_threads();
    if (threads == 1 || in_pool || serial) return 0;
    /* Waits for a running parallel_for rather than lending fewer cores: the
     * borrower's results may depend on its thread count (OpenBLAS's do), and
     * must not depend on what else happened to be running. */
    pthread_mutex_lock(&pool_lock);
    atomic_store(&lent, 1);
    return threads;
}

void tide_pool_unlend(void) {
    atomic_store(&lent, 0);
    pthread_mutex_unlock(&pool_lock);
}
