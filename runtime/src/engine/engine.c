/*
 * engine.c - the asynchronous dependency engine. Every op reaches it through
 * tide_engine_push(task, reads, writes, device): the caller returns at once,
 * and the task runs on its device's queue as soon as, for each storage it
 * touches, every earlier write (for a read) or every earlier read and write
 * (for a write) is done. Each storage keeps the queue of ops that use it, in
 * push order; independent ops run in parallel on different device queues.
 * A small task whose storages are all free runs inline on the caller's thread,
 * since a hand-off would cost more than the work. TIDE_SYNC=1 (or
 * tide_engine_set_sync) runs every task inline, in order, like the naive engine.
 * Failures poison the storages a task writes; waits and later readers see them,
 * with the op's arguments and where it was enqueued. A wait that sees no progress
 * for TIDE_WATCHDOG seconds prints what it waits on; TIDE_TRACE=file.json (or
 * tide_trace_start/stop) records a Chrome trace of what each device ran.
 * tide_set_interrupt() (async-signal-safe, for a host's SIGINT handler) makes
 * the next push or blocking wait of a host thread return TIDE_E_INTERRUPTED.
 * A CUDA device has a queue whose thread launches each op on the device's
 * stream and goes on: later ops of the same queue may follow it at once, since
 * the stream keeps their order, while everyone else waits until the device
 * says, through a host callback, that the work is done.
 * How kernels split their own work across cores is the pool's job (pool.c).
 */
#include "../core/internal.h"
#include "cuda_loader.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Storages an op usually touches at most; a task may name more (a replayed
 * graph names every tensor it reads or writes), at the cost of a malloc. */
enum { MAX_DEPS = TIDE_OP_MAX_IN + TIDE_OP_MAX_OUT, CPU_QUEUES = 65, MAX_QUEUES = CPU_QUEUES + TIDE_MAX_CUDA_DEVICES };
/* Below this cost (elements) a task whose storages are free runs inline. */
enum { INLINE_COST = 1 << 16 };
/* Back-pressure: a host thread that has this many ops queued, or ops whose
 * results hold this many bytes, waits until half of them are done, so a loop
 * that enqueues faster than the devices run cannot fill memory with pending
 * results. At 512 MiB, a loop of ops on 256 KiB tensors held 300 MiB of
 * queued results. Only what an op writes counts: its inputs are held by the
 * caller or counted as an earlier op's results, and counting them too kept a
 * loop of 4096x4096 float32 products (192 MiB touched each) to one op in
 * flight, the device idle while the host queued the next. However large its
 * results, a few ops stay in flight. */
enum { MAX_PENDING_OPS = 4096, MIN_PENDING_OPS = 4 };
#define MAX_PENDING_BYTES ((int64_t)128 << 20)

typedef struct tide_dep {
    struct op *       op;
    tide_storage *    s;
    struct tide_dep * next;     /* in s's queue */
    bool              write;
    bool              granted;
} dep;

typedef struct op {
    tide_engine_task task;      /* task.ctx points at payload */
    int32_t          id;
    struct op *      live_prev, * live_next;   /* every queued op, for the watchdog */
    int32_t          n_deps, n_writes;   /* deps[0 .. n_writes) are writes, the rest reads */
    int32_t          waiting;   /* deps not granted yet */
    int32_t          queue;
    bool             launched;  /* on a device: its work is queued on the stream, not done yet */
    int64_t          held_bytes; /* of the storages it writes, for back-pressure */
    dep *            deps;      /* in the same block, after the payload */
    tide_storage **  storages;  /* deps[i].s, for execute() */
    struct op *      next;      /* in the device queue */
    struct op *      covered;   /* launched before it on its stream, done when it is (device_worker) */
    struct op *      inflight_next;
    _Alignas(16) char payload[];
} op;

typedef struct {
    op *      head, * tail;
    op *      done_head, * done_tail;   /* a CUDA queue's launched ops that its device has done */
    /* per stream (TIDE_STREAM_*): launched, no host callback after them yet */
    op *      inflight_head[TIDE_STREAMS], * inflight_tail[TIDE_STREAMS];
    int32_t   n_inflight[TIDE_STREAMS];
    int32_t   n_callbacks[TIDE_STREAMS];   /* host callbacks put on the stream and not yet taken back */
    int32_t   cuda;                     /* the CUDA device of a CUDA queue, else -1 */
    pthread_t thread;
    bool      started;
} devq;

static pthread_mutex_t lock      = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  work_cond = PTHREAD_COND_INITIALIZER;   /* a device queue got work */
static pthread_cond_t  done_cond = PTHREAD_COND_INITIALIZER;   /* what a waiter waits for may be done */
static int32_t         sync_waiters, pressure_waiters;         /* threads in sync_all, in back-pressure */
static devq            queues[MAX_QUEUES];      /* 0: "cpu", 1 + i: "cpu:i", CPU_QUEUES + i: "cuda:i" */
static int64_t         n_pending;               /* pushed, not finished (deferred ones) */
static int64_t         pending_bytes;           /* of those ops' results */
static _Thread_local bool on_worker;            /* an engine worker: never throttled */
static atomic_int      busy;                    /* workers running a task */
static int32_t         sync_mode = -1;          /* -1: not read from the environment yet */
static pthread_t       owner;                   /* the first thread that pushed */
/* 0: nobody pushed yet; 1: only `owner` has (it may run a task inline without
 * the lock when its storages have no pending ops); 2: several threads have
 * (inline tasks must be registered too). Moves forward under lock. */
static atomic_int      owners;
/* Async failures not yet reported, oldest first: each is a root (a task that
 * failed of itself, not for a failed input), with the id its poison carries to
 * what is computed from it. A wait or a call that raises a failure reports its
 * root (unreported() drops it); tide_sync() reports the oldest left and drops
 * the rest. Roots past the first MAX_FAILS go unrecorded. */
enum { MAX_FAILS = 8 };
static struct {
    tide_status st;
    int64_t     root;
    char        msg[1024];
}                      fails[MAX_FAILS];
static int32_t         n_fails;
static atomic_llong    next_root = 1;
static int32_t         next_id = 1;
static _Thread_local int32_t last_deferred;
static op *            live;                    /* queued ops, newest first */
static int64_t         progress;                /* ops finished, for the watchdog */
static atomic_int      interrupt_req;           /* tide_set_interrupt(1), not yet taken */

/* Whether the pending ops are over 1/div of the back-pressure limits (under lock). */
static bool pressed(int32_t div) {
    return n_pending > MAX_PENDING_OPS / div ||
           (pending_bytes > MAX_PENDING_BYTES / div && n_pending > MIN_PENDING_OPS / div);
}

static tide_status sync_all(bool interruptible);

/* Where deferred ops were enqueued, by id (the binding tells us after the push). */
enum { N_ORIGINS = 1024 };
static struct { int32_t id; char where[120]; } origins[N_ORIGINS];

int32_t tide_engine_last_deferred(void) {
    int32_t id    = last_deferred;
    last_deferred = 0;
    return id;
}

void tide_engine_set_origin(int32_t id, const char * where) {
    pthread_mutex_lock(&lock);
    origins[id % N_ORIGINS].id = id;
    snprintf(origins[id % N_ORIGINS].where, sizeof origins[0].where, "%s", where ? where : "?");
    pthread_mutex_unlock(&lock);
}

/* Copies the origin of op id into buf ("" if unknown). */
static void origin_of(int32_t id, char * buf, size_t n) {
    buf[0] = 0;
    if (id <= 0) return;
    pthread_mutex_lock(&lock);
    if (origins[id % N_ORIGINS].id == id) snprintf(buf, n, "%s", origins[id % N_ORIGINS].where);
    pthread_mutex_unlock(&lock);
}

/* -- tracing --------------------------------------------------------------------------- */

typedef struct {
    const char * name;
    char         args[96];
    int32_t      queue;          /* -1: inline on the caller's thread; -2: a step of a replay */
    double       t0, t1;         /* microseconds */
} trace_event;

static atomic_int       tracing;
static pthread_mutex_t  trace_lock = PTHREAD_MUTEX_INITIALIZER;
static trace_event *    events;
static size_t           n_events, cap_events;
static const char *     trace_env_path;

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

void tide_trace_start(void) {
    pthread_mutex_lock(&trace_lock);
    n_events = 0;
    pthread_mutex_unlock(&trace_lock);
    atomic_store(&tracing, 1);
}

static trace_event * trace_slot(void);

static void trace_add(const tide_engine_task * t, int32_t queue, double t0, double t1) {
    pthread_mutex_lock(&trace_lock);
    trace_event * e = trace_slot();
    if (e) {
        e->name = t->name, e->queue = queue, e->t0 = t0, e->t1 = t1;
        e->args[0] = 0;
        if (t->describe) t->describe(t->ctx, e->args, sizeof e->args);
    }
    pthread_mutex_unlock(&trace_lock);
}

double tide_trace_now(void) { return atomic_load_explicit(&tracing, memory_order_relaxed) ? now_us() : 0; }

void tide_trace_step(const char * name, const char * where, double t0) {
    double t1 = now_us();
    pthread_mutex_lock(&trace_lock);
    trace_event * e = trace_slot();
    if (e) {
        e->name = name, e->queue = -2, e->t0 = t0, e->t1 = t1;
        snprintf(e->args, sizeof e->args, "%s", where);
    }
    pthread_mutex_unlock(&trace_lock);
}

/* A new event (under trace_lock), or NULL when out of memory. */
static trace_event * trace_slot(void) {
    if (n_events == cap_events) {
        size_t         ncap = cap_events ? cap_events * 2 : 4096;
        trace_event *  ne   = realloc(events, ncap * sizeof *ne);
        if (!ne) return NULL;
        events = ne, cap_events = ncap;
    }
    return &events[n_events++];
}

tide_status tide_trace_stop(const char * path) {
    atomic_store(&tracing, 0);
    sync_all(false);
    FILE * f = fopen(path, "w");
    if (!f) return tide_error_set(TIDE_E_IO, "trace: cannot write %s", path);
    pthread_mutex_lock(&trace_lock);
    fprintf(f, "{\"traceEvents\":[\n");
    fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"caller (inline)\"}}");
    fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"cpu\"}}");
    fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":-1,\"args\":{\"name\":\"replay steps\"}}");
    for (int32_t q = 0; q < tide_engine_cpu_queues(); q++)
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"cpu:%d\"}}",
                q + 2, q);
    for (int32_t d = 0; d < tide_cuda_device_count(); d++)
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"cuda:%d\"}}",
                CPU_QUEUES + d + 1, d);
    for (size_t i = 0; i < n_events; i++) {
        const trace_event * e = &events[i];
        fprintf(f, ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                   "\"args\":{\"inputs\":\"%s\"}}",
                e->name, e->queue + 1, e->t0, e->t1 - e->t0, e->args);
    }
    fprintf(f, "\n]}\n");
    n_events = 0;
    pthread_mutex_unlock(&trace_lock);
    return fclose(f) == 0 ? TIDE_OK : tide_error_set(TIDE_E_IO, "trace: error writing %s", path);
}

static void trace_at_exit(void) {
    if (trace_env_path && tide_trace_stop(trace_env_path) != TIDE_OK)
        fprintf(stderr, "tide: %s\n", tide_last_error());
}

/* A script may end with ops still queued (an optimizer step nobody waited
 * for). They finish before the process's libraries are torn down: OpenBLAS's
 * destructor frees its buffers, and a kernel still inside sgemm then would
 * use freed memory. Errors are dropped: nobody is left to read them. */
void tide_engine_drain_at_exit(void) { (void)tide_sync(); }

__attribute__((constructor)) static void engine_init(void) {
    const char * p = getenv("TIDE_TRACE");
    if (p && *p) {
        trace_env_path = p;
        tide_trace_start();
        atexit(trace_at_exit);
    }
    atexit(tide_engine_drain_at_exit);   /* registered last, so it runs before the trace is written */
}

int32_t tide_engine_busy_workers(void) { return atomic_load_explicit(&busy, memory_order_relaxed); }

/* Counted once: sysconf reads /sys on each call (about 10 us, and every
 * parse of a device name asks), and the CPU devices must not change while
 * tensors live on them. */
int32_t tide_engine_cpu_queues(void) {
    static atomic_int queues;
    int32_t q = atomic_load_explicit(&queues, memory_order_relaxed);
    if (q) return q;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    q      = n < 2 ? 2 : n > CPU_QUEUES - 1 ? CPU_QUEUES - 1 : (int32_t)n;
    atomic_store_explicit(&queues, q, memory_order_relaxed);
    return q;
}

static bool is_sync(void) {
    if (sync_mode < 0) {
        const char * e = getenv("TIDE_SYNC");
        sync_mode = e && *e && strcmp(e, "0") != 0;
    }
    return sync_mode;
}

void tide_set_sync(int32_t on) {
    if (!on || is_sync() == !!on) {
        sync_mode = on != 0;
        return;
    }
    sync_all(false); /* what is queued finishes before ops start running inline */
    sync_mode = 1;
}
int32_t tide_get_sync(void) { return is_sync(); }

/* -- poison ------------------------------------------------------------------------ */

/* root: the failure's root id (new_root(), or the failed input's). */
static void poison(tide_storage * s, tide_status st, const char * msg, int64_t root) {
    if (atomic_load(&s->poisoned)) return;   /* the first failure stays */
    s->poison_msg  = strdup(msg);
    s->poison_root = root;
    atomic_store(&s->poisoned, (int)st);
}

static int64_t new_root(void) { return atomic_fetch_add(&next_root, 1); }

/* A task's own failure: a new root, recorded for tide_sync() when the task was
 * queued (id > 0; one run at once returns its failure to its caller), before
 * the poison that carries it is published, so that whoever sees the poison can
 * mark it reported. Poisons the task's writes. */
static void fail_root(int32_t id, tide_status st, const char * msg, tide_storage * const * writes, int32_t n_writes) {
    int64_t root = new_root();
    if (id > 0) {
        pthread_mutex_lock(&lock);
        if (n_fails < MAX_FAILS) {
            fails[n_fails].st   = st;
            fails[n_fails].root = root;
            snprintf(fails[n_fails].msg, sizeof fails[n_fails].msg, "%s", msg);
            n_fails++;
        }
        pthread_mutex_unlock(&lock);
    }
    for (int32_t i = 0; i < n_writes; i++) poison(writes[i], st, msg, root);
}

/* Marks the failure with root id `root` as reported: a later tide_sync() does not raise it again. */
static void unreported(int64_t root) {
    pthread_mutex_lock(&lock);
    for (int32_t i = 0; i < n_fails; i++)
        if (fails[i].root == root) {
            memmove(&fails[i], &fails[i + 1], (size_t)(n_fails - i - 1) * sizeof fails[0]);
            n_fails--;
            break;
        }
    pthread_mutex_unlock(&lock);
}

/* A task's failure for an input from failed op `root`: poisons its writes.
 * A task run at once (id 0) returns the failure to its caller, which raises
 * it: reported then (its input may have failed just after the push looked). */
static void propagate(int32_t id, tide_status st, const char * msg, int64_t root, tide_storage * const * writes,
                      int32_t n_writes) {
    for (int32_t i = 0; i < n_writes; i++) poison(writes[i], st, msg, root);
    if (id == 0) unreported(root);
}

static tide_status poison_error(tide_storage * s) {
    return tide_error_set((tide_status)atomic_load(&s->poisoned), "%s",
                          s->poison_msg ? s->poison_msg : "a previous op writing this tensor failed");
}

/* Runs a task (inline or on a worker): poisoned inputs or a failure poison the outputs. */
static tide_status execute(const tide_engine_task * t, int32_t id, int32_t queue, tide_storage * const * reads,
                           int32_t n_reads, tide_storage * const * writes, int32_t n_writes) {
    tide_status st = TIDE_OK;
    char msg[1024];
    int64_t root = 0;   /* a failed input's root, or 0 for a failure of the task's own */
    double t0 = atomic_load_explicit(&tracing, memory_order_relaxed) ? now_us() : 0;
    for (int32_t i = 0; i < n_reads && st == TIDE_OK; i++) {
        if (atomic_load(&reads[i]->poisoned)) {
            st   = (tide_status)atomic_load(&reads[i]->poisoned);
            root = reads[i]->poison_root;
            snprintf(msg, sizeof msg, "%s: an input comes from a failed op: %s", t->name,
                     reads[i]->poison_msg ? reads[i]->poison_msg : "?");
        }
    }
    /* results made deferred (tide_storage_new_deferred) get their memory now,
     * on the thread that writes them first */
    for (int32_t i = 0; i < n_writes && st == TIDE_OK; i++) {
        if ((st = tide_storage_materialize(writes[i], t->stream)) != TIDE_OK)
            snprintf(msg, sizeof msg, "%s: %s", t->name, tide_last_error());
    }
    if (st == TIDE_OK) {
        st = t->fn(t->ctx);
        if (st != TIDE_OK) {
            char args[256] = "", where[128];
            if (t->describe) t->describe(t->ctx, args, sizeof args);
            origin_of(id, where, sizeof where);
            if (id > 0)   /* a queued op: say which, since the error surfaces elsewhere */
                snprintf(msg, sizeof msg, "%s (op %s on %s%s%s)", tide_last_error(), t->name, args,
                         where[0] ? ", enqueued at " : "", where);
            else
                snprintf(msg, sizeof msg, "%s", tide_last_error());
        }
    }
    if (t0 > 0) trace_add(t, queue, t0, now_us());
    if (st != TIDE_OK) {
        if (root) propagate(id, st, msg, root, writes, n_writes);
        else fail_root(id, st, msg, writes, n_writes);
        tide_error_set(st, "%s", msg);
    }
    return st;
}

/* -- dependency queues (under lock) -------------------------------------------------- */

static void ready(op * o);

static void grant_past_launched(tide_storage * s);

/* Marks d granted; its op is ready once every dep of it is. */
static void grant_dep(dep * d) {
    d->granted = true;
    if (--d->op->waiting == 0) ready(d->op);
}

/* Grants what may run of s's queue: with nothing launched on a device, one
 * write at the head, or the reads before the first write; past launched ops,
 * what grant_past_launched allows. Its ungranted ops start at s->q_grant,
 * so that a long queue of granted ops is not walked again at each grant:
 * thousands of small device ops reading one tensor (x + 1 in a loop) are
 * launched faster than the device finishes them, and walking them all at
 * each push made the loop quadratic (fake device: 133 us an op). */
static void grant(tide_storage * s) {
    dep * d = s->q_grant;
    if (!d) return;
    if (s->q_writes == 0) {   /* reads only: every one may run */
        for (; d; d = d->next)
            if (!d->granted) grant_dep(d);
        s->q_grant = NULL;
        return;
    }
    if (TIDE_UNLIKELY(s->n_launched > 0)) {
        /* one op waits, behind ops all launched on its own queue, whose stream
         * runs them in order: grant_past_launched's answer, without its walk */
        if (d == s->q_tail && s->n_launched == s->q_len - 1 && s->launch_q == d->op->queue + 1) {
            grant_dep(d);
            s->q_grant = NULL;
            return;
        }
        grant_past_launched(s);
    } else if (s->q_head->write) {
        if (!s->q_head->granted) grant_dep(s->q_head);
    } else {
        for (dep * r = s->q_head; r && !r->write; r = r->next)
            if (!r->granted) grant_dep(r);
    }
    while (d && d->granted) d = d->next;
    s->q_grant = d;
}

/* grant() when ops in s's queue are launched on a device and not done there:
 * an op may pass an earlier one it conflicts with only when that one is
 * launched on the same device queue, whose stream runs them in order. One
 * walk, keeping what the deps before d amount to: a queue may hold hundreds
 * of launched ops (in-place updates of one tensor), and comparing each pair
 * made every grant quadratic in them, under the engine's lock. */
static void grant_past_launched(tide_storage * s) {
    bool    any = false, any_write = false;            /* deps before d: some, some writing */
    bool    idle_any = false, idle_write = false;      /* one not launched (any; writing) */
    int32_t q_any = -1, q_write = -1;                  /* the one queue of the launched ones; -2: several */
    for (dep * d = s->q_head; d; d = d->next) {
        if (!d->granted) {
            int32_t q  = d->op->queue;
            bool    ok = d->write ? !any || (!idle_any && q_any == q)
                                  : !any_write || (!idle_write && q_write == q);
            if (ok) grant_dep(d);
        }
        bool    launched = d->op && d->op->launched;
        int32_t q        = launched ? d->op->queue : -2;
        any              = true;
        idle_any         = idle_any || !launched;
        q_any            = q_any == -1 || q_any == q ? q : -2;
        if (d->write) {
            any_write  = true;
            idle_write = idle_write || !launched;
            q_write    = q_write == -1 || q_write == q ? q : -2;
        }
        if (idle_write) break;   /* nothing after an unlaunched write may pass it */
    }
}

static void enqueue_dep(dep * d) {
    tide_storage * s = d->s;
    d->next = NULL;
    s->q_len++;
    s->q_writes += d->write;
    if (!d->granted && !s->q_grant) s->q_grant = d;
    if (s->q_tail) s->q_tail->next = d; else __atomic_store_n(&s->q_head, d, __ATOMIC_RELEASE);
    s->q_tail = d;
}

static void remove_dep(dep * d) {
    tide_storage * s = d->s;
    dep * prev = NULL;
    s->q_len--;
    s->q_writes -= d->write;
    if (s->q_grant == d)   /* only granted ops finish: not seen, but kept right */
        for (s->q_grant = d->next; s->q_grant && s->q_grant->granted;) s->q_grant = s->q_grant->next;
    for (dep * x = s->q_head; x; prev = x, x = x->next) {
        if (x != d) continue;
        if (prev) prev->next = x->next; else __atomic_store_n(&s->q_head, x->next, __ATOMIC_RELEASE);
        if (s->q_tail == x) s->q_tail = prev;
        break;
    }
}

/* Whether a new op could touch s right now: nothing pending on s conflicts. */
static bool storage_free(tide_storage * s, bool write) { return write ? s->q_head == NULL : s->q_writes == 0; }

/* -- workers ------------------------------------------------------------------------- */

static void ready(op * o) {
    devq * q = &queues[o->queue];
    o->next  = NULL;
    if (q->tail) q->tail->next = o; else q->head = o;
    q->tail = o;
    pthread_cond_broadcast(&work_cond);
}

/* Drops one reference to s unless it is the last (then false: the caller owns
 * the storage alone and frees it later). Cheap enough to do under the lock. */
static bool release_unless_last(tide_storage * s) {
    int r = atomic_load_explicit(&s->refcount, memory_order_relaxed);
    while (r > 1)
        if (atomic_compare_exchange_weak_explicit(&s->refcount, &r, r - 1, memory_order_acq_rel, memory_order_relaxed))
            return true;
    return false;
}

static void finish(op * o) {
    /* The task lets go of its tensors before it stops counting as pending, so
     * that after tide_sync() no tensor is held by finished work (a graph
     * capture's check of what is still held relies on it). Its storages stay
     * retained by o->deps until they leave the queues below; those it holds
     * the last reference to are freed before the op stops counting as
     * pending, so that memory figures read after tide_sync() are exact. */
    if (o->task.drop) o->task.drop(o->task.ctx);
    pthread_mutex_lock(&lock);
    if (o->live_prev) o->live_prev->live_next = o->live_next; else live = o->live_next;
    if (o->live_next) o->live_next->live_prev = o->live_prev;
    progress++;
    if (o->launched)
        for (int32_t i = 0; i < o->n_deps; i++)
            if (--o->deps[i].s->n_launched == 0) o->deps[i].s->launch_q = 0;
    for (int32_t i = 0; i < o->n_deps; i++) remove_dep(&o->deps[i]);
    for (int32_t i = 0; i < o->n_deps; i++) grant(o->deps[i].s);
    /* Wake waiters only when what they wait for may be done: a broadcast per op
     * woke a waiting host thread on every finish, and its wake-ups cost a
     * stream of queued 256x256 products 4% of their time. */
    bool wake = false;
    for (int32_t i = 0; i < o->n_deps && !wake; i++) wake = !o->deps[i].s->q_head && o->deps[i].s->waiters > 0;
    int32_t n_last = 0;
    for (int32_t i = 0; i < o->n_deps; i++)
        if (!release_unless_last(o->deps[i].s)) o->storages[n_last++] = o->deps[i].s;
    if (n_last) {   /* free outside the lock: a storage's release may call its allocator or free_fn */
        if (wake) pthread_cond_broadcast(&done_cond);
        pthread_mutex_unlock(&lock);
        for (int32_t i = 0; i < n_last; i++) tide_storage_release(o->storages[i]);
        pthread_mutex_lock(&lock);
        wake = false;
    }
    n_pending--;
    pending_bytes -= o->held_bytes;
    wake = wake || (sync_waiters > 0 && n_pending == 0) ||
           (pressure_waiters > 0 && !pressed(2));
    if (wake) pthread_cond_broadcast(&done_cond);
    pthread_mutex_unlock(&lock);
    free(o);
}

static void * worker(void * arg) {
    devq * q = arg;
    on_worker = true;
    tide_pool_set_serial(q != &queues[0]);
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!q->head) pthread_cond_wait(&work_cond, &lock);
        op * o  = q->head;
        q->head = o->next;
        if (!q->head) q->tail = NULL;
        pthread_mutex_unlock(&lock);

        int32_t nw = o->n_writes;
        atomic_fetch_add(&busy, 1);
        execute(&o->task, o->id, o->queue, o->storages + nw, o->n_deps - nw, o->storages, nw);
        atomic_fetch_sub(&busy, 1);
        finish(o);
        pthread_mutex_lock(&lock);
    }
    return NULL;
}

/* Called by the device (on a thread of its backend, which may not call the
 * backend) when the work launched for o is done: o's queue thread finishes it. */
static void device_done(void * arg) {
    op * o = arg;
    pthread_mutex_lock(&lock);
    devq * q = &queues[o->queue];
    o->next  = NULL;
    if (q->done_tail) q->done_tail->next = o; else q->done_head = o;
    q->done_tail = o;
    pthread_cond_broadcast(&work_cond);
    pthread_mutex_unlock(&lock);
}

/* Runs a device task's completion step; a failure poisons what it writes.
 * So does an input that an op launched before it on the same stream poisoned
 * at its own completion (an index out of range, found on the device): the
 * task ran after it on the stream, from what it left. Completions run in
 * launch order, so that poison is there by now. */
static tide_status complete(const tide_engine_task * t, int32_t id, tide_storage * const * writes, int32_t n_writes,
                            tide_storage * const * reads, int32_t n_reads) {
    tide_status st   = t->complete ? t->complete(t->ctx) : TIDE_OK;
    int64_t     root = 0;   /* as in execute() */
    for (int32_t i = 0; i < n_reads && st == TIDE_OK; i++) {
        if (atomic_load(&reads[i]->poisoned)) {
            st   = (tide_status)atomic_load(&reads[i]->poisoned);
            root = reads[i]->poison_root;
            tide_error_set(st, "%s: an input comes from a failed op: %s", t->name,
                           reads[i]->poison_msg ? reads[i]->poison_msg : "?");
        }
    }
    if (st != TIDE_OK) {
        /* as execute() words a failure: a queued op says which it was */
        char msg[1024], args[256] = "", where[128];
        if (t->describe) t->describe(t->ctx, args, sizeof args);
        origin_of(id, where, sizeof where);
        if (id > 0)
            snprintf(msg, sizeof msg, "%s (op %s%s%s%s%s)", tide_last_error(), t->name, args[0] ? " on " : "", args,
                     where[0] ? ", enqueued at " : "", where);
        else
            snprintf(msg, sizeof msg, "%s", tide_last_error());
        if (root) propagate(id, st, msg, root, writes, n_writes);
        else fail_root(id, st, msg, writes, n_writes);
        tide_error_set(st, "%s", msg);
    }
    return st;
}

/* Ops launched in a row without a host callback after each: a callback
 * holds its stream until the host has run it, so one per op would leave the
 * device idle between small kernels. The last op of a burst (the queue has
 * nothing ready, or this many are waiting) gets the callback, and its
 * completion completes the ones before it, which the stream ran first. While
 * a callback is on the stream, the ops launched after it wait for the next
 * one, put there when the host takes that one back: a host queuing small ops
 * one at a time then costs the stream one stop per callback round trip, not
 * one per op (seen: 46 us an op on an H100, the stream idle most of it). */
enum { MAX_UNCOVERED = 64 };

/* Puts a host callback after the queue's launched ops on stream k (under no
 * lock): the last one's, which covers the others. */
static void cover_inflight(devq * q, int32_t k) {
    op * last = q->inflight_tail[k], * before = NULL;
    for (op * c = q->inflight_head[k]; c != last; c = c->inflight_next) before = c;
    if (before) before->inflight_next = NULL;
    last->covered       = before ? q->inflight_head[k] : NULL;
    q->inflight_head[k] = q->inflight_tail[k] = NULL;
    q->n_inflight[k]    = 0;
    q->n_callbacks[k]++;   /* taken back when `last` comes back done, either way */
    /* looked up per op, not kept: a test may swap the backend between ops */
    const tide_devapi * api    = tide_cuda_api();
    void *              stream = tide_cuda_stream_of(q->cuda, k);
    if (!stream || api->host_callback(q->cuda, stream, device_done, last) != TIDE_DEVAPI_OK) {
        /* no callback: wait for the device here rather than never finish */
        if (stream) api->stream_sync(q->cuda, stream);
        device_done(last);
    }
}

/* Whether to put a callback after the ops just launched on stream k although
 * more are ready (under lock): under back-pressure on bytes, when at most two
 * ops are left ready, so that the host, which waits until the pending ops are
 * under half the limits, learns that those launched so far are done while the
 * tail still runs, and queues more. One callback after the whole burst told
 * it only when the device had run everything, so it queued the next ops to an
 * idle device (a loop of 4096x4096 products: 61-81% of cuBLAS in the reduced
 * precisions on an H100). At least two ops are covered, and at most two
 * callbacks are out at once, so a deep queue of small ops is not made to stop
 * the stream more often than every other burst. */
static bool split_burst(const devq * q, int32_t k) {
    if (q->n_inflight[k] < 2 || q->n_callbacks[k] > 1 || pending_bytes <= MAX_PENDING_BYTES / 2) return false;
    int32_t n = 0;
    for (const op * o = q->head; o; o = o->next)
        if (++n > MIN_PENDING_OPS / 2) return false;
    return true;
}

/* Puts callbacks after the launched ops that need one now (the queue
 * thread's, under no lock): `more`, whether the queue has ops ready. */
static void cover_due(devq * q, bool more) {
    for (int32_t k = 0; k < TIDE_STREAMS; k++)
        if (q->inflight_head[k] && (q->n_inflight[k] >= MAX_UNCOVERED || (!more && q->n_callbacks[k] == 0)))
            cover_inflight(q, k);
}

/* Whether o depends on work launched on its queue's other stream and not
 * done yet (under lock): an earlier op, launched, that shares a storage with
 * o where either writes. Ops on one stream follow each other in order. */
static bool crosses_streams(const op * o) {
    for (int32_t i = 0; i < o->n_deps; i++) {
        const dep * d = &o->deps[i];
        for (const dep * e = d->s->q_head; e && e != d; e = e->next)
            if (e->op && e->op != o && e->op->launched && e->op->queue == o->queue &&
                e->op->task.stream != o->task.stream && (e->write || d->write))
                return true;
    }
    return false;
}

/* A CUDA queue's thread: launches its ready ops on the device's stream, and
 * finishes those the device has done. It never waits for the device itself. */
static void * device_worker(void * arg) {
    devq * q  = arg;
    on_worker = true;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!q->head && !q->done_head) pthread_cond_wait(&work_cond, &lock);
        op * o;
        if ((o = q->done_head)) {
            q->done_head = o->next;
            if (!q->done_head) q->done_tail = NULL;
            pthread_mutex_unlock(&lock);
            for (op * c = o->covered, * next; c; c = next) {   /* in launch order, before o */
                next = c->inflight_next;
                complete(&c->task, c->id, c->storages, c->n_writes, c->storages + c->n_writes,
                         c->n_deps - c->n_writes);
                finish(c);
            }
            q->n_callbacks[o->task.stream]--;
            complete(&o->task, o->id, o->storages, o->n_writes, o->storages + o->n_writes, o->n_deps - o->n_writes);
            finish(o);
            pthread_mutex_lock(&lock);
            bool more = q->head != NULL;
            pthread_mutex_unlock(&lock);
            cover_due(q, more);   /* what was launched while the callback was on the stream */
            pthread_mutex_lock(&lock);
            continue;
        }
        o       = q->head;
        q->head = o->next;
        if (!q->head) q->tail = NULL;
        int32_t k     = o->task.stream;
        bool    cross = crosses_streams(o);
        pthread_mutex_unlock(&lock);

        int32_t     nw = o->n_writes;
        tide_status st = cross ? tide_cuda_wait_stream(q->cuda, k, 1 - k, o->task.name) : TIDE_OK;
        if (st != TIDE_OK)   /* the op did not run: what it writes is poisoned, as by a failure of its own */
            fail_root(o->id, st, tide_last_error(), o->storages, nw);
        else
            st = execute(&o->task, o->id, o->queue, o->storages + nw, o->n_deps - nw, o->storages, nw);
        if (st != TIDE_OK) {
            finish(o);
        } else {
            o->covered       = NULL;
            o->inflight_next = NULL;
            if (q->inflight_tail[k]) q->inflight_tail[k]->inflight_next = o; else q->inflight_head[k] = o;
            q->inflight_tail[k] = o;
            q->n_inflight[k]++;
            pthread_mutex_lock(&lock);
            o->launched = true;   /* the queue's next ops may follow it on the stream */
            for (int32_t i = 0; i < o->n_deps; i++) {
                tide_storage * ds = o->deps[i].s;
                ds->launch_q      = ds->n_launched++ == 0 || ds->launch_q == o->queue + 1 ? o->queue + 1 : -1;
            }
            for (int32_t i = 0; i < o->n_deps; i++) grant(o->deps[i].s);
            pthread_mutex_unlock(&lock);
        }
        /* the inflight lists are this thread's alone; q->head is read under the lock */
        pthread_mutex_lock(&lock);
        bool more  = q->head != NULL;
        bool split = more && st == TIDE_OK && split_burst(q, k);
        pthread_mutex_unlock(&lock);
        if (split) cover_inflight(q, k);
        else cover_due(q, more);
        pthread_mutex_lock(&lock);
    }
    return NULL;
}

static int32_t queue_of(tide_device dev) {
    if (dev.type == TIDE_DEVICE_CUDA) return CPU_QUEUES + dev.index;
    if (dev.index < 0) return 0;
    return 1 + dev.index % (CPU_QUEUES - 1);
}

/* Runs a task on the caller's thread (inline, or TIDE_SYNC): a device's task
 * is launched, waited for and completed here. */
static tide_status execute_here(const tide_engine_task * t, int32_t qi, tide_storage * const * reads, int32_t n_reads,
                                tide_storage * const * writes, int32_t n_writes) {
    tide_status st = execute(t, 0, -1, reads, n_reads, writes, n_writes);
    if (st != TIDE_OK || qi < CPU_QUEUES) return st;
    int32_t dev    = qi - CPU_QUEUES;
    void *  stream = tide_cuda_stream_of(dev, t->stream);
    if (stream && tide_cuda_api()->stream_sync(dev, stream) != TIDE_DEVAPI_OK) {
        st = tide_error_set(TIDE_E_DEVICE, "%s: cuda:%d failed: %s", t->name, dev, tide_cuda_api()->error_text());
        fail_root(0, st, tide_last_error(), writes, n_writes);
        return st;
    }
    return complete(t, 0, writes, n_writes, reads, n_reads);
}

/* -- interrupts ---------------------------------------------------------------------- */

/* A lock-free atomic store: safe in a signal handler. */
void tide_set_interrupt(int32_t on) { atomic_store(&interrupt_req, on != 0); }

/* Takes a pending interrupt request (true once per request). Engine workers
 * never take one: an interrupt stops the host's thread, not queued work. */
static bool take_interrupt(void) {
    return !on_worker && atomic_load_explicit(&interrupt_req, memory_order_relaxed) &&
           atomic_exchange(&interrupt_req, 0);
}

/* -- push ---------------------------------------------------------------------------- */

static void wait_done(int64_t * seen_progress, double * since);
static tide_status wait_storage(tide_storage * s, bool interruptible);

static tide_status push(const tide_engine_task * task, tide_storage ** r, int32_t nr, tide_storage ** w,
                        int32_t nw, tide_device dev);

tide_status tide_engine_push(const tide_engine_task * task,
                             tide_storage * const * reads, int32_t n_reads,
                             tide_storage * const * writes, int32_t n_writes, tide_device dev) {
    if (take_interrupt()) return tide_error_set(TIDE_E_INTERRUPTED, "%s: interrupted", task->name);
    /* A storage both read and written is a write; repeated storages count once. */
    int32_t         cap = n_reads + n_writes;
    tide_storage *  small[2 * MAX_DEPS];
    tide_storage ** buf = cap <= MAX_DEPS ? small : malloc(2 * (size_t)cap * sizeof *buf);
    if (!buf) return tide_error_set(TIDE_E_OOM, "%s: out of memory queuing the op", task->name);
    tide_storage ** w = buf, ** r = buf + cap;
    int32_t nr = 0, nw = 0;
    for (int32_t i = 0; i < n_writes; i++) {
        bool dup = false;
        for (int32_t j = 0; j < nw; j++) dup |= w[j] == writes[i];
        if (!dup) w[nw++] = writes[i];
    }
    for (int32_t i = 0; i < n_reads; i++) {
        bool dup = false;
        for (int32_t j = 0; j < nw; j++) dup |= w[j] == reads[i];
        for (int32_t j = 0; j < nr; j++) dup |= r[j] == reads[i];
        if (!dup) r[nr++] = reads[i];
    }
    tide_status st = push(task, r, nr, w, nw, dev);
    if (buf != small) free(buf);
    return st;
}

/* tide_engine_push with the read and write sets made distinct. */
static tide_status push(const tide_engine_task * task, tide_storage ** r, int32_t nr, tide_storage ** w,
                        int32_t nw, tide_device dev) {
    /* An input that already failed fails this op now, at the caller's line. */
    for (int32_t i = 0; i < nr; i++) {
        if (atomic_load(&r[i]->poisoned)) {
            tide_status st = (tide_status)atomic_load(&r[i]->poisoned);
            char msg[1024];
            snprintf(msg, sizeof msg, "%s: an input comes from a failed op: %s", task->name,
                     r[i]->poison_msg ? r[i]->poison_msg : "?");
            for (int32_t j = 0; j < nw; j++) poison(w[j], st, msg, r[i]->poison_root);
            unreported(r[i]->poison_root);   /* raised here, at the caller's line */
            return tide_error_set(st, "%s", msg);
        }
    }

    int32_t qi = queue_of(dev);
    /* The owner's small task on storages with no pending op runs here at once:
     * only the owner adds ops, so none can appear (an op that finished released
     * its storages before their queues emptied: acquire). */
    if (task->cost < INLINE_COST && qi == 0 && atomic_load_explicit(&owners, memory_order_acquire) == 1 &&
        pthread_equal(owner, pthread_self())) {
        bool idle = true;
        for (int32_t i = 0; i < nr && idle; i++) idle = __atomic_load_n(&r[i]->q_head, __ATOMIC_ACQUIRE) == NULL;
        for (int32_t i = 0; i < nw && idle; i++) idle = __atomic_load_n(&w[i]->q_head, __ATOMIC_ACQUIRE) == NULL;
        if (idle) return execute(task, 0, -1, r, nr, w, nw);
    }
    pthread_mutex_lock(&lock);
    if (atomic_load_explicit(&owners, memory_order_relaxed) == 0) {
        owner = pthread_self();
        atomic_store_explicit(&owners, 1, memory_order_release);
    } else if (atomic_load_explicit(&owners, memory_order_relaxed) == 1 && !pthread_equal(owner, pthread_self())) {
        atomic_store_explicit(&owners, 2, memory_order_relaxed);
    }
    bool many_threads = atomic_load_explicit(&owners, memory_order_relaxed) == 2;
    bool sync = is_sync();
    bool free_now = true;
    for (int32_t i = 0; i < nr && free_now; i++) free_now = storage_free(r[i], false);
    for (int32_t i = 0; i < nw && free_now; i++) free_now = storage_free(w[i], true);
    if (free_now && (sync || (task->cost < INLINE_COST && qi == 0))) {   /* "cpu" only: cpu:N run serially */
        /* Nothing pending conflicts: run it here. When other threads push too, the
         * op holds its place in the queues while it runs, so theirs wait for it. */
        if (!many_threads) {
            pthread_mutex_unlock(&lock);
            return execute_here(task, qi, r, nr, w, nw);
        }
        dep   small[MAX_DEPS];
        dep * ds = nw + nr <= MAX_DEPS ? small : malloc((size_t)(nw + nr) * sizeof *ds);
        if (!ds) {
            pthread_mutex_unlock(&lock);
            return tide_error_set(TIDE_E_OOM, "%s: out of memory queuing the op", task->name);
        }
        for (int32_t i = 0; i < nw + nr; i++) {
            ds[i] = (dep){NULL, i < nw ? w[i] : r[i - nw], NULL, i < nw, true};
            enqueue_dep(&ds[i]);
        }
        pthread_mutex_unlock(&lock);
        tide_status st = execute_here(task, qi, r, nr, w, nw);
        pthread_mutex_lock(&lock);
        for (int32_t i = 0; i < nw + nr; i++) remove_dep(&ds[i]);
        for (int32_t i = 0; i < nw + nr; i++) grant(ds[i].s);
        pthread_cond_broadcast(&done_cond);
        pthread_mutex_unlock(&lock);
        if (ds != small) free(ds);
        return st;
    }
    if (sync) {   /* wait for the queued ops it depends on, then run it here */
        pthread_mutex_unlock(&lock);
        for (int32_t i = 0; i < nr; i++) wait_storage(r[i], false);
        for (int32_t i = 0; i < nw; i++) wait_storage(w[i], false);
        return execute_here(task, qi, r, nr, w, nw);
    }

    size_t ctx_room = (task->ctx_size + 15) / 16 * 16;
    op *   o = malloc(sizeof *o + ctx_room + (size_t)(nw + nr) * (sizeof(dep) + sizeof(tide_storage *)));
    if (!o) {
        pthread_mutex_unlock(&lock);
        return tide_error_set(TIDE_E_OOM, "%s: out of memory queuing the op", task->name);
    }
    if (task->ctx_size) memcpy(o->payload, task->ctx, task->ctx_size);
    o->task     = *task;
    o->task.ctx = o->payload;
    if (o->task.keep) o->task.keep(o->task.ctx);
    o->queue   = qi;
    o->launched = false;
    o->id      = next_id;
    next_id    = next_id == INT32_MAX ? 1 : next_id + 1;
    last_deferred = o->id;
    o->live_prev = NULL;
    o->live_next = live;
    if (live) live->live_prev = o;
    live = o;
    o->deps     = (dep *)(o->payload + ctx_room);
    o->storages = (tide_storage **)(o->deps + nw + nr);
    o->n_deps   = 0;
    o->n_writes = nw;
    o->waiting  = nr + nw;
    o->held_bytes = 0;
    for (int32_t i = 0; i < nw + nr; i++) {
        dep * d     = &o->deps[o->n_deps++];
        d->op       = o;
        d->s        = i < nw ? w[i] : r[i - nw];
        d->write    = i < nw;
        d->granted  = false;
        o->storages[i] = d->s;
        tide_storage_retain(d->s);
        enqueue_dep(d);
        if (d->write) o->held_bytes += (int64_t)tide_storage_nbytes(d->s);
    }
    n_pending++;
    pending_bytes += o->held_bytes;
    devq * q = &queues[qi];
    if (!q->started) {
        q->cuda = qi >= CPU_QUEUES ? qi - CPU_QUEUES : -1;
        if (pthread_create(&q->thread, NULL, q->cuda >= 0 ? device_worker : worker, q) != 0) {
            pthread_mutex_unlock(&lock);
            return tide_error_set(TIDE_E_INTERNAL, "%s: could not start an engine thread", task->name);
        }
        pthread_detach(q->thread);
        q->started = true;
    }
    if (o->waiting == 0) {
        ready(o);
    } else {
        for (int32_t i = 0; i < o->n_deps; i++) grant(o->deps[i].s);
    }
    if (pressed(1) && !on_worker) {
        int64_t seen = progress;
        double  since = now_us() / 1e6;
        /* an interrupt ends the wait early; the next push or wait takes it */
        pressure_waiters++;
        while (pressed(2) && !atomic_load_explicit(&interrupt_req, memory_order_relaxed))
            wait_done(&seen, &since);
        pressure_waiters--;
    }
    pthread_mutex_unlock(&lock);
    return TIDE_OK;
}

/* -- waits --------------------------------------------------------------------------- */

static double watchdog_s = -1;   /* TIDE_WATCHDOG; 0: off */

/* Prints the queued ops (under lock): what a stuck wait is waiting on. */
static void report_stuck(double waited) {
    fprintf(stderr, "tide watchdog: a wait has seen no op finish for %.0f s; queued ops, newest first:\n", waited);
    int n = 0;
    for (op * o = live; o && n < 50; o = o->live_next, n++) {
        char args[256] = "";
        if (o->task.describe) o->task.describe(o->task.ctx, args, sizeof args);
        const char * where = origins[o->id % N_ORIGINS].id == o->id ? origins[o->id % N_ORIGINS].where : "?";
        fprintf(stderr, "  op %d %s(%s) on queue %d, waiting on %d of %d storages, enqueued at %s\n", o->id,
                o->task.name, args, o->queue, o->waiting, o->n_deps, where);
    }
}

/* Waits on done_cond (under lock), with the watchdog's reports when it is set.
 * Wakes at least every 50 ms so that a wait notices tide_set_interrupt(), which
 * a signal handler cannot follow with a broadcast. */
static void wait_done(int64_t * seen_progress, double * since) {
    if (watchdog_s < 0) {
        const char * e = getenv("TIDE_WATCHDOG");
        watchdog_s = e ? atof(e) : 0;
    }
    struct timespec ts;   /* wake at least as often as the watchdog's period */
    clock_gettime(CLOCK_REALTIME, &ts);
    double  step = watchdog_s > 0 && watchdog_s < 0.05 ? watchdog_s : 0.05;
    int64_t ns   = ts.tv_nsec + (int64_t)(step * 1e9);
    ts.tv_sec += ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    pthread_cond_timedwait(&done_cond, &lock, &ts);
    if (watchdog_s <= 0) return;
    double t = now_us() / 1e6;
    if (progress != *seen_progress) {
        *seen_progress = progress;
        *since = t;
    } else if (t - *since >= watchdog_s) {
        report_stuck(t - *since);
        *since = t;
    }
}

/* Waits until nothing is pending on s. An interruptible wait (a host's) returns
 * TIDE_E_INTERRUPTED when it takes an interrupt request; the engine's own waits
 * must not stop early, since they order ops. */
static tide_status wait_storage(tide_storage * s, bool interruptible) {
    pthread_mutex_lock(&lock);
    int64_t seen = progress;
    double  since = now_us() / 1e6;
    s->waiters++;
    while (s->q_head) {
        if (interruptible && take_interrupt()) {
            s->waiters--;
            pthread_mutex_unlock(&lock);
            return tide_error_set(TIDE_E_INTERRUPTED, "interrupted");
        }
        wait_done(&seen, &since);
    }
    s->waiters--;
    pthread_mutex_unlock(&lock);
    if (!atomic_load(&s->poisoned)) return TIDE_OK;
    unreported(s->poison_root);
    return poison_error(s);
}

tide_status tide_engine_wait_storage(tide_storage * s) { return wait_storage(s, true); }

/* Waits for every pending op; see wait_storage for `interruptible`. */
static tide_status sync_all(bool interruptible) {
    pthread_mutex_lock(&lock);
    int64_t seen = progress;
    double  since = now_us() / 1e6;
    sync_waiters++;
    while (n_pending > 0) {
        if (interruptible && take_interrupt()) {
            sync_waiters--;
            pthread_mutex_unlock(&lock);
            return tide_error_set(TIDE_E_INTERRUPTED, "interrupted");
        }
        wait_done(&seen, &since);
    }
    sync_waiters--;
    tide_status st = n_fails ? fails[0].st : TIDE_OK;
    if (st != TIDE_OK) tide_error_set(st, "%s", fails[0].msg);
    n_fails = 0;
    pthread_mutex_unlock(&lock);
    return st;
}

tide_status tide_sync(void) { return sync_all(true); }
