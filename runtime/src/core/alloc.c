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
static tide_mem_stats  stats;

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

void * tide_host_alloc(size_t nbytes, size_t * capacity) {
    size_t rounded;
    int    cls = size_class(nbytes ? nbytes : 1, &rounded);
    void * p   = NULL;
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
    pthread_mutex_lock(&lock);
    stats.bytes_in_use -= (int64_t)capacity;
    if (cls >= 0 && rounded == capacity && stats.bytes_cached + (int64_t)capacity <= CACHE_LIMIT) {
        block * b       = p;
        b->next         = free_lists[cls];
        free_lists[cls] = b;
        stats.bytes_cached += (int64_t)capacity;
        p = NULL;
    }
    pthread_mutex_unlock(&lock);
    free(p);
}

void tide_mem_empty_cache(void) {
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

void tide_mem_get_stats(tide_mem_stats * out) {
    pthread_mutex_lock(&lock);
    *out = stats;
    pthread_mutex_unlock(&lock);
}
