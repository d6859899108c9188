/*
 * engine.c - the engine interface every op goes through: push(fn, reads,
 * writes, device) and the waits. This is the naive engine: it runs each op at
 * once on the calling thread, kernels parallelising inside through the pool.
 * The asynchronous engine replaces this file's internals, not its interface:
 * ops declare everything they read and write, so nothing else has to change.
 */
#include "../core/internal.h"

#include <stdio.h>
#include <stdlib.h>

static void poison(tide_storage * s, tide_status st, const char * msg) {
    if (atomic_load(&s->poisoned)) return;   /* the first failure stays */
    s->poison_msg = strdup(msg);
    atomic_store(&s->poisoned, (int)st);
}

static tide_status poison_error(tide_storage * s) {
    return tide_error_set((tide_status)atomic_load(&s->poisoned), "%s",
                          s->poison_msg ? s->poison_msg : "a previous op writing this tensor failed");
}

tide_status tide_engine_push(const tide_engine_task * task,
                             tide_storage * const * reads, int32_t n_reads,
                             tide_storage * const * writes, int32_t n_writes, tide_device dev) {
    (void)dev;
    tide_status st = TIDE_OK;
    for (int32_t i = 0; i < n_reads && st == TIDE_OK; i++)
        if (atomic_load(&reads[i]->poisoned)) st = poison_error(reads[i]);
    if (st == TIDE_OK) st = task->fn(task->ctx);
    if (st != TIDE_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", tide_last_error());
        for (int32_t i = 0; i < n_writes; i++) poison(writes[i], st, msg);
        tide_error_set(st, "%s", msg);
    }
    return st;
}

tide_status tide_engine_wait_storage(tide_storage * s) {
    return atomic_load(&s->poisoned) ? poison_error(s) : TIDE_OK;
}

tide_status tide_sync(void) { return TIDE_OK; }
