/*
 * alloc.c - the caching host allocator: 64-byte aligned blocks in size
 * classes (4 per power of two), freed blocks kept per class and reused by the
 * next request of the same class, so a training loop's steady state makes no
 * malloc calls. The cache is bounded; tide_mem_empty_cache() returns it all.
 * Device memory belongs to the device backends, not here.
 */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>

enum { N_CLASSES = 256 };
#define CACHE_LIMIT ((int64_t)2 << 30)   /* bytes kept for reuse before blocks go back to the OS */

typedef struct block { struct block * next; } block;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static block *         free_lists[N_CLASSES];
static tide_mem_stats  stats;            /* under lock, except the counters below */

/* Small blocks (the common case of many tiny tensors) first go through a cache
 * per thread, with no lock; the counters they touch are atomics. */
/* A collection cycle releases thousands of tensors at once: the caches hold
 * that many, up to 1 MiB of blocks per class, rather than going back to malloc. */
enum { N_SMALL = 12, SMALL_CACHE_BYTES = 1 << 20 };
typedef struct { block * head; int n; } small_cache;
static _Thread_local small_cache small[N_SMALL];
/* Their counters are per thread too: each thread writes only its own (relaxed
 * stores, no locked instructions on the hot path) and readers add them up. */
typedef struct thread_counts {
    atomic_llong           in_use, cached, allocs, reused;
    struct thread_counts * next;
} thread_counts;
static _Thread_local thread_counts counts;
static thread_counts * all_counts;     /* live threads' counters; under lock */
static thread_counts   retired;        /* what exited threads counted; under lock */

static inline void count(atomic_llong * c, long long d) {
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + d, memory_order_relaxed);
}

static void flush_thread_caches(void * unused);

/* A thread's caches go back when it exits, so programs that start and end
 * threads which touch tensors do not leak what those threads cached. */
static pthread_once_t      exit_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t       exit_key;
static _Thread_local bool  exit_hooked;

static void make_exit_key(void) { pthread_key_create(&exit_key, flush_thread_caches); }

static inline void hook_thread_exit(void) {
    if (__builtin_expect(exit_hooked, 1)) return;
    exit_hooked = true;
    pthread_once(&exit_key_once, make_exit_key);
    pthread_setspecific(exit_key, &exit_hooked);
    pthread_mutex_lock(&lock);
    counts.next = all_counts;
    all_counts  = &counts;
    pthread_mutex_unlock(&lock);
}

/* Class of a request and its rounded size: multiples of 64 up to 512 bytes, then
 * four classes per power of two (at most 25% waste). */
static int size_class(size_t n, size_t * rounded) {
    if (n <= 512) {
        size_t r = n < 64 ? 64 : (n + 63) & ~(size_t)63;
        *rounded = r;
        return (int)(r / 64) - 1;                   /* 0..7 */
    }
    int    lg   = 63 - __builtin_clzll(n - 1);      /* 2^lg < n <= 2^(lg+1) */
    size_t step = (size_t)1 << (lg - 2);
    size_t r    = (n + step - 1) & ~(step - 1);
    *rounded    = r;
    int sub     = (int)((r >> (lg - 2)) - 4);       /* 1..4 */
    int cls     = 8 + (lg - 9) * 4 + (sub - 1);
    return cls < N_CLASSES ? cls : -1;
}

/* The rounded size of class c (the inverse of size_class). */
static size_t class_size(int c) {
    if (c < 8) return (size_t)(c + 1) * 64;
    int lg = 9 + (c - 8) / 4, sub = (c - 8) % 4 + 1;
    return (size_t)(4 + sub) << (lg - 2);
}

void * tide_host_alloc(size_t nbytes, size_t * capacity) {
    size_t rounded;
    int    cls = size_class(nbytes ? nbytes : 1, &rounded);
    void * p   = NULL;
    if (cls >= 0 && cls < N_SMALL) {
        small_cache * c = &small[cls];
        hook_thread_exit();
        count(&counts.allocs, 1);
        if (c->head) {
            p       = c->head;
            c->head = c->head->next;
            c->n--;
            count(&counts.cached, -(long long)rounded);
            count(&counts.reused, 1);
        } else {
            p = aligned_alloc(TIDE_ALIGN, rounded);
            if (!p) return NULL;
        }
        count(&counts.in_use, (long long)rounded);
        *capacity = rounded;
        return p;
    }
    pthread_mutex_lock(&lock);
    stats.n_allocs++;
    if (cls >= 0 && free_lists[cls]) {
        block * b       = free_lists[cls];
        free_lists[cls] = b->next;
        stats.bytes_cached -= (int64_t)rounded;
        stats.n_reused++;
        p = b;
    }
    pthread_mutex_unlock(&lock);
    if (!p) {
        p = aligned_alloc(TIDE_ALIGN, rounded);
        if (!p) {
            tide_mem_empty_cache();
            p = aligned_alloc(TIDE_ALIGN, rounded);
            if (!p) return NULL;
        }
    }
    pthread_mutex_lock(&lock);
    stats.bytes_in_use += (int64_t)rounded;
    if (stats.bytes_in_use > stats.peak_in_use) stats.peak_in_use = stats.bytes_in_use;
    pthread_mutex_unlock(&lock);
    *capacity = rounded;
    return p;
}

void tide_host_free(void * p, size_t capacity) {
    if (!p) return;
    size_t rounded;
    int    cls = size_class(capacity, &rounded);
    if (cls >= 0 && cls < N_SMALL && rounded == capacity) {
        small_cache * c = &small[cls];
        hook_thread_exit();
        count(&counts.in_use, -(long long)capacity);
        if ((size_t)c->n * capacity < SMALL_CACHE_BYTES) {
            block * b = p;
            b->next   = c->head;
            c->head   = b;
            c->n++;
            count(&counts.cached, (long long)capacity);
        } else {
            free(p);
        }
        return;
    }
    block * evicted = NULL;
    pthread_mutex_lock(&lock);
    stats.bytes_in_use -= (int64_t)capacity;
    if (cls >= 0 && rounded == capacity && (int64_t)capacity <= CACHE_LIMIT) {
        /* A full cache makes room by giving back its largest blocks, so a long run
         * that once held big tensors still reuses the blocks it uses now. */
        for (int c = N_CLASSES - 1; c >= 0 && stats.bytes_cached + (int64_t)capacity > CACHE_LIMIT; c--) {
            while (free_lists[c] && stats.bytes_cached + (int64_t)capacity > CACHE_LIMIT) {
                block * b     = free_lists[c];
                free_lists[c] = b->next;
                b->next       = evicted;
                evicted       = b;
                stats.bytes_cached -= (int64_t)class_size(c);
            }
        }
        block * b       = p;
        b->next         = free_lists[cls];
        free_lists[cls] = b;
        stats.bytes_cached += (int64_t)capacity;
        p = NULL;
    }
    pthread_mutex_unlock(&lock);
    free(p);
    while (evicted) {
        block * n = evicted->next;
        free(evicted);
        evicted = n;
    }
}

static void free_small_caches(void) {
    for (int c = 0; c < N_SMALL; c++) {   /* this thread's small blocks */
        while (small[c].head) {
            block * b      = small[c].head;
            small[c].head  = b->next;
            count(&counts.cached, -(long long)class_size(c));
            free(b);
        }
        small[c].n = 0;
    }
}

void tide_mem_empty_cache(void) {
    free_small_caches();
    block * all = NULL;
    pthread_mutex_lock(&lock);
    for (int c = 0; c < N_CLASSES; c++) {
        while (free_lists[c]) {
            block * b     = free_lists[c];
            free_lists[c] = b->next;
            b->next       = all;
            all           = b;
        }
    }
    stats.bytes_cached = 0;
    pthread_mutex_unlock(&lock);
    while (all) {
        block * n = all->next;
        free(all);
        all = n;
    }
}

void tide_mem_reset_peak(void) {
    pthread_mutex_lock(&lock);
    stats.peak_in_use = stats.bytes_in_use;
    pthread_mutex_unlock(&lock);
}

void tide_mem_get_stats(tide_mem_stats * out) {
    pthread_mutex_lock(&lock);
    *out = stats;
    for (const thread_counts * c = &retired; c; c = c == &retired ? all_counts : c->next) {
        out->bytes_in_use += atomic_load_explicit(&c->in_use, memory_order_relaxed);
        out->bytes_cached += atomic_load_explicit(&c->cached, memory_order_relaxed);
        out->n_allocs += atomic_load_explicit(&c->allocs, memory_order_relaxed);
        out->n_reused += atomic_load_explicit(&c->reused, memory_order_relaxed);
    }
    pthread_mutex_unlock(&lock);
    if (out->bytes_in_use > out->peak_in_use) out->peak_in_use = out->bytes_in_use;  /* small blocks: at least */
}

/* -- small objects ---------------------------------------------------------------- */

/* Tensor and storage headers come from per-thread free lists in front of malloc,
 * so creating an op's output makes no malloc call in steady state. */
enum { OBJ_CACHE_MAX = 16384, OBJ_KINDS = 3 };
static _Thread_local small_cache obj_cache[OBJ_KINDS];

static void flush_thread_caches(void * unused) {
    (void)unused;
    free_small_caches();
    for (int k = 0; k < OBJ_KINDS; k++) {
        while (obj_cache[k].head) {
            block * b         = obj_cache[k].head;
            obj_cache[k].head = b->next;
            free(b);
        }
        obj_cache[k].n = 0;
    }
    pthread_mutex_lock(&lock);   /* fold this thread's counters into the retired ones */
    for (thread_counts ** p = &all_counts; *p; p = &(*p)->next) {
        if (*p != &counts) continue;
        *p = counts.next;
        break;
    }
    count(&retired.in_use, atomic_load(&counts.in_use));
    count(&retired.cached, atomic_load(&counts.cached));
    count(&retired.allocs, atomic_load(&counts.allocs));
    count(&retired.reused, atomic_load(&counts.reused));
    pthread_mutex_unlock(&lock);
}

void * tide_obj_alloc(int kind, size_t size) {
    small_cache * c = &obj_cache[kind];
    void * p;
    if (c->head) {
        p       = c->head;
        c->head = c->head->next;
        c->n--;
    } else {
        p = malloc(size);
        if (!p) return NULL;
    }
    memset(p, 0, size);
    return p;
}

void tide_obj_free(int kind, void * p) {
    small_cache * c = &obj_cache[kind];
    if (!p) return;
    hook_thread_exit();
    if (c->n >= OBJ_CACHE_MAX) {
        free(p);
        return;
    }
    block * b = p;
    b->next   = c->head;
    c->head   = b;
    c->n++;
}
