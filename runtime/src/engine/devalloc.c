/*
 * devalloc.c - the caching device allocator. Device allocations (cudaMalloc)
 * are slow and synchronise the device, so blocks are cut from segments and
 * kept when freed: requests of up to 1 MiB share 2 MiB segments, larger ones
 * get segments of their own (20 MiB for those under 10 MiB, so several fit).
 * Free blocks are kept per stream and found best-fit; neighbours in a segment
 * merge again when both are free. A block used by another stream than its own
 * (record_stream) waits for an event on that stream before it is reused.
 * Which stream an op runs on, and when memory is asked for, is the engine's.
 */
#include "devalloc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define ROUND       ((size_t)512)          /* every block is a multiple of this */
#define SMALL_MAX   ((size_t)1 << 20)      /* requests up to this come from the small pool */
#define SMALL_SEG   ((size_t)2 << 20)
#define MID_MAX     ((size_t)10 << 20)     /* large requests under this share a MID_SEG */
#define MID_SEG     ((size_t)20 << 20)
#define LARGE_ROUND ((size_t)2 << 20)

enum { FREE, ALLOCATED, PENDING };

struct tide_devblock {
    void *          ptr;
    size_t          size;
    void *          stream;            /* the stream it was made for: its pool's key */
    tide_devblock * prev, * next;      /* neighbours in its segment, by address */
    int32_t         state;
    int32_t         events;            /* PENDING: events still to complete */
    bool            small;
    void **         uses;              /* other streams that used it since it was allocated */
    int32_t         n_uses, cap_uses;
};

/* Free blocks of one pool, sorted by (stream, size, address). */
typedef struct {
    tide_devblock ** v;
    size_t           n, cap;
} pool;

typedef struct { void * event; tide_devblock * block; } pending;

struct tide_devalloc {
    const tide_devapi * api;
    int32_t             dev;
    char                name[32];
    pthread_mutex_t     lock;
    pool                small, large;
    pending *           pend;          /* events that hold PENDING blocks back */
    size_t              n_pend, cap_pend;
    void **             spare_events;  /* recorded and done: reused for the next free */
    size_t              n_spare, cap_spare;
    tide_devmem_stats   st;
    atomic_size_t       total;         /* the device's memory, once asked (tide_devalloc_check_size) */
};

static bool grow(void ** v, size_t * cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void * nv = realloc(*v, nc * elem);
    if (!nv) return false;
    *v = nv, *cap = nc;
    return true;
}

tide_devalloc * tide_devalloc_new(const tide_devapi * api, int32_t dev, const char * name) {
    tide_devalloc * a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->api = api;
    a->dev = dev;
    snprintf(a->name, sizeof a->name, "%s", name);
    pthread_mutex_init(&a->lock, NULL);
    return a;
}

/* -- pools ----------------------------------------------------------------- */

static int cmp(const tide_devblock * x, void * stream, size_t size, uintptr_t ptr) {
    if ((uintptr_t)x->stream != (uintptr_t)stream) return (uintptr_t)x->stream < (uintptr_t)stream ? -1 : 1;
    if (x->size != size) return x->size < size ? -1 : 1;
    if ((uintptr_t)x->ptr != ptr) return (uintptr_t)x->ptr < ptr ? -1 : 1;
    return 0;
}

/* The first position whose block is not below (stream, size, ptr). */
static size_t lower_bound(const pool * p, void * stream, size_t size, uintptr_t ptr) {
    size_t lo = 0, hi = p->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cmp(p->v[mid], stream, size, ptr) < 0) lo = mid + 1; else hi = mid;
    }
    return lo;
}

static bool pool_insert(pool * p, tide_devblock * b) {
    if (!grow((void **)&p->v, &p->cap, p->n + 1, sizeof *p->v)) return false;
    size_t i = lower_bound(p, b->stream, b->size, (uintptr_t)b->ptr);
    memmove(p->v + i + 1, p->v + i, (p->n - i) * sizeof *p->v);
    p->v[i] = b;
    p->n++;
    return true;
}

static void pool_remove(pool * p, tide_devblock * b) {
    size_t i = lower_bound(p, b->stream, b->size, (uintptr_t)b->ptr);
    if (i < p->n && p->v[i] == b) {
        memmove(p->v + i, p->v + i + 1, (p->n - i - 1) * sizeof *p->v);
        p->n--;
    }
}

static pool * pool_of(tide_devalloc * a, const tide_devblock * b) { return b->small ? &a->small : &a->large; }

/* Puts a block that nobody uses back in its pool, merged with free neighbours. */
static void release_block(tide_devalloc * a, tide_devblock * b) {
    pool * p = pool_of(a, b);
    b->state  = FREE;
    b->n_uses = 0;
    tide_devblock * n = b->next, * pr = b->prev;
    if (n && n->state == FREE) {
        pool_remove(p, n);
        b->size += n->size;
        b->next  = n->next;
        if (n->next) n->next->prev = b;
        free(n->uses);
        free(n);
    }
    if (pr && pr->state == FREE) {
        pool_remove(p, pr);
        pr->size += b->size;
        pr->next  = b->next;
        if (b->next) b->next->prev = pr;
        free(b->uses);
        free(b);
        b = pr;
    }
    /* Without host memory for the pool's index, the block stays out of the
     * cache and is found again only when a neighbour's release merges it. */
    (void)pool_insert(p, b);
}

/* -- events ---------------------------------------------------------------- */

/* Frees the blocks whose events are all done; with `wait`, waits for them. */
static void process_events(tide_devalloc * a, bool wait) {
    size_t keep = 0;
    for (size_t i = 0; i < a->n_pend; i++) {
        pending * e = &a->pend[i];
        int done = a->api->event_query(a->dev, e->event);
        if (done == 0 && wait) done = a->api->event_sync(a->dev, e->event) == TIDE_DEVAPI_OK ? 1 : -1;
        if (done == 0) {
            a->pend[keep++] = *e;
            continue;
        }
        /* done, or an error the event will not recover from: a device error
         * this deep has already failed the ops that used the block */
        if (done == 1 && grow((void **)&a->spare_events, &a->cap_spare, a->n_spare + 1, sizeof(void *)))
            a->spare_events[a->n_spare++] = e->event;
        else
            a->api->event_destroy(a->dev, e->event);
        if (--e->block->events == 0) release_block(a, e->block);
    }
    a->n_pend = keep;
}

/* -- alloc and free --------------------------------------------------------- */

static size_t round_size(size_t n) { return n < ROUND ? ROUND : (n + ROUND - 1) / ROUND * ROUND; }

static size_t segment_size(size_t size) {
    if (size <= SMALL_MAX) return SMALL_SEG;
    if (size < MID_MAX) return MID_SEG;
    return (size + LARGE_ROUND - 1) / LARGE_ROUND * LARGE_ROUND;
}

static void human(double b, char * buf, size_t n) {
    const char * unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) b /= 1024, u++;
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
}

/* Returns the cached segments that no block uses to the device (under lock). */
static void release_cached(tide_devalloc * a) {
    process_events(a, true);
    pool * pools[2] = {&a->small, &a->large};
    for (int k = 0; k < 2; k++) {
        pool * p    = pools[k];
        size_t keep = 0;
        for (size_t i = 0; i < p->n; i++) {
            tide_devblock * b = p->v[i];
            if (b->prev || b->next) {   /* part of a segment still in use */
                p->v[keep++] = b;
                continue;
            }
            a->api->mem_free(a->dev, b->ptr);
            a->st.bytes_reserved -= (int64_t)b->size;
            a->st.n_segments--;
            free(b->uses);
            free(b);
        }
        p->n = keep;
    }
}

tide_status tide_devalloc_check_size(tide_devalloc * a, size_t nbytes) {
    size_t total = atomic_load_explicit(&a->total, memory_order_relaxed);
    if (!total) {
        size_t f = 0, t = 0;
        total = a->api->mem_info(a->dev, &f, &t) == TIDE_DEVAPI_OK && t ? t : SIZE_MAX;
        atomic_store_explicit(&a->total, total, memory_order_relaxed);
    }
    if (nbytes <= total) return TIDE_OK;
    char req[32], all[32];
    human((double)nbytes, req, sizeof req);
    human((double)total, all, sizeof all);
    return tide_error_set(TIDE_E_OOM, "out of memory: could not allocate %s (%zu bytes) on %s, which has %s in all",
                          req, nbytes, a->name, all);
}

/* A new segment from the device, freeing the cache and retrying once when it is
 * full; NULL with the error set. */
static tide_devblock * new_segment(tide_devalloc * a, size_t size, size_t nbytes, void * stream) {
    size_t seg = segment_size(size);
    void * ptr = NULL;
    int    rc  = a->api->mem_alloc(a->dev, seg, &ptr);
    if (rc == TIDE_DEVAPI_OOM) {
        int64_t cached = a->st.bytes_reserved - a->st.bytes_in_use;
        release_cached(a);
        a->st.n_cache_flushes++;
        rc = a->api->mem_alloc(a->dev, seg, &ptr);
        if (rc == TIDE_DEVAPI_OOM) {
            a->st.n_ooms++;
            char req[32], in_use[32], cache[32], freeb[32], total[32], device[96] = "";
            size_t f = 0, t = 0;
            human((double)nbytes, req, sizeof req);
            human((double)a->st.bytes_in_use, in_use, sizeof in_use);
            human((double)cached, cache, sizeof cache);
            if (a->api->mem_info(a->dev, &f, &t) == TIDE_DEVAPI_OK) {
                human((double)f, freeb, sizeof freeb);
                human((double)t, total, sizeof total);
                snprintf(device, sizeof device, ", which has %s free of %s", freeb, total);
            }
            tide_error_set(TIDE_E_OOM,
                           "out of memory: could not allocate %s (%zu bytes) on %s%s; Tide holds %s there in "
                           "tensors, and freed its cache of %s before trying again",
                           req, nbytes, a->name, device, in_use, cache);
            return NULL;
        }
    }
    if (rc != TIDE_DEVAPI_OK) {
        tide_error_set(TIDE_E_DEVICE, "%s: could not allocate %zu bytes: %s", a->name, nbytes, a->api->error_text());
        return NULL;
    }
    tide_devblock * b = calloc(1, sizeof *b);
    if (!b) {
        a->api->mem_free(a->dev, ptr);
        tide_error_set(TIDE_E_OOM, "out of memory: no host memory to track a block of %s", a->name);
        return NULL;
    }
    b->ptr    = ptr;
    b->size   = seg;
    b->stream = stream;
    b->small  = size <= SMALL_MAX;
    a->st.bytes_reserved += (int64_t)seg;
    a->st.n_segments++;
    return b;
}

tide_devblock * tide_devalloc_alloc(tide_devalloc * a, size_t nbytes, void * stream) {
    size_t size  = round_size(nbytes);
    bool   small = size <= SMALL_MAX;
    pthread_mutex_lock(&a->lock);
    if (a->n_pend) process_events(a, false);
    pool *          p = small ? &a->small : &a->large;
    size_t          i = lower_bound(p, stream, size, 0);
    tide_devblock * b = i < p->n && p->v[i]->stream == stream ? p->v[i] : NULL;
    if (b) {
        pool_remove(p, b);
        a->st.n_reused++;
    } else if (!(b = new_segment(a, size, nbytes, stream))) {
        pthread_mutex_unlock(&a->lock);
        return NULL;
    }
    b->state = ALLOCATED;   /* before the split, so that the rest does not merge back into it */
    /* Split off what is left when it can serve another request of the pool:
     * the large pool keeps only blocks larger than the small pool's. */
    size_t rest = b->size - size;
    if (small ? rest >= ROUND : rest > SMALL_MAX) {
        tide_devblock * r = calloc(1, sizeof *r);
        if (r) {
            r->ptr    = (char *)b->ptr + size;
            r->size   = rest;
            r->stream = stream;
            r->small  = small;
            r->prev   = b;
            r->next   = b->next;
            if (b->next) b->next->prev = r;
            b->next = r;
            b->size = size;
            release_block(a, r);
        }
    }
    a->st.n_allocs++;
    a->st.bytes_in_use += (int64_t)b->size;
    if (a->st.bytes_in_use > a->st.peak_in_use) a->st.peak_in_use = a->st.bytes_in_use;
    pthread_mutex_unlock(&a->lock);
    return b;
}

void * tide_devblock_ptr(const tide_devblock * b) { return b->ptr; }
void * tide_devblock_stream(const tide_devblock * b) { return b->stream; }

tide_status tide_devalloc_record_stream(tide_devalloc * a, tide_devblock * b, void * stream) {
    if (stream == b->stream) return TIDE_OK;
    pthread_mutex_lock(&a->lock);
    bool seen = false;
    for (int32_t i = 0; i < b->n_uses && !seen; i++) seen = b->uses[i] == stream;
    size_t cap = (size_t)b->cap_uses;
    if (!seen && !grow((void **)&b->uses, &cap, (size_t)b->n_uses + 1, sizeof *b->uses)) {
        pthread_mutex_unlock(&a->lock);
        return tide_error_set(TIDE_E_OOM, "out of memory: recording a stream's use of a block of %s", a->name);
    }
    b->cap_uses = (int32_t)cap;
    if (!seen) b->uses[b->n_uses++] = stream;
    pthread_mutex_unlock(&a->lock);
    return TIDE_OK;
}

void tide_devalloc_free(tide_devalloc * a, tide_devblock * b) {
    if (!b) return;
    pthread_mutex_lock(&a->lock);
    a->st.bytes_in_use -= (int64_t)b->size;
    b->state  = PENDING;
    b->events = 0;
    for (int32_t i = 0; i < b->n_uses; i++) {
        void * ev = NULL;
        if (a->n_spare) ev = a->spare_events[--a->n_spare];
        else if (a->api->event_create(a->dev, &ev) != TIDE_DEVAPI_OK) ev = NULL;
        if (ev && a->api->event_record(a->dev, ev, b->uses[i]) == TIDE_DEVAPI_OK &&
            grow((void **)&a->pend, &a->cap_pend, a->n_pend + 1, sizeof *a->pend)) {
            a->pend[a->n_pend++] = (pending){ev, b};
            b->events++;
            continue;
        }
        /* No event to wait on: wait for that stream now, so that nothing still
         * using the block can see it reused. */
        if (ev) a->api->event_destroy(a->dev, ev);
        a->api->stream_sync(a->dev, b->uses[i]);
    }
    if (b->events == 0) release_block(a, b);
    pthread_mutex_unlock(&a->lock);
}

void tide_devalloc_empty_cache(tide_devalloc * a) {
    pthread_mutex_lock(&a->lock);
    release_cached(a);
    pthread_mutex_unlock(&a->lock);
}

void tide_devalloc_stats(tide_devalloc * a, tide_devmem_stats * out) {
    pthread_mutex_lock(&a->lock);
    *out = a->st;
    out->bytes_cached = a->st.bytes_reserved - a->st.bytes_in_use;
    pthread_mutex_unlock(&a->lock);
}

void tide_devalloc_reset_peak(tide_devalloc * a) {
    pthread_mutex_lock(&a->lock);
    a->st.peak_in_use = a->st.bytes_in_use;
    pthread_mutex_unlock(&a->lock);
}

void tide_devalloc_free_all(tide_devalloc * a) {
    if (!a) return;
    pthread_mutex_lock(&a->lock);
    release_cached(a);
    pthread_mutex_unlock(&a->lock);
    for (size_t i = 0; i < a->n_spare; i++) a->api->event_destroy(a->dev, a->spare_events[i]);
    free(a->spare_events);
    free(a->pend);
    free(a->small.v);
    free(a->large.v);
    pthread_mutex_destroy(&a->lock);
    free(a);
}
