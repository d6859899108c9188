/*
 * rng.c - the global generator state: a seed and a counter offset into the
 * Philox stream. Each random op reserves its slice of counters when it is
 * enqueued, so its numbers depend only on the seed and the order of random
 * ops, never on threads or timing. The Philox kernels are in random.c.
 */
#include "kernels.h"

#include <pthread.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t        seed = 0x5eed;
static uint64_t        offset;

void tide_manual_seed(uint64_t s) {
    pthread_mutex_lock(&lock);
    seed   = s;
    offset = 0;
    pthread_mutex_unlock(&lock);
}

uint64_t tide_initial_seed(void) {
    pthread_mutex_lock(&lock);
    uint64_t s = seed;
    pthread_mutex_unlock(&lock);
    return s;
}

void tide_rng_get_state(uint64_t * s, uint64_t * off) {
    pthread_mutex_lock(&lock);
    *s   = seed;
    *off = offset;
    pthread_mutex_unlock(&lock);
}

void tide_rng_set_state(uint64_t s, uint64_t off) {
    pthread_mutex_lock(&lock);
    seed   = s;
    offset = off;
    pthread_mutex_unlock(&lock);
}

void tide_rng_reserve(uint64_t n, uint64_t * s, uint64_t * off) {
    pthread_mutex_lock(&lock);
    *s   = seed;
    *off = offset;
    offset += (n + 3) & ~(uint64_t)3;   /* whole Philox blocks of 4 */
    pthread_mutex_unlock(&lock);
}
