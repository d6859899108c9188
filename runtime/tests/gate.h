/* gate.h - a task that blocks its queue until the test opens a gate, for C
 * tests that need ops to be pending at a known moment. Include after check.h
 * and core/internal.h. */
#ifndef TIDE_TEST_GATE_H
#define TIDE_TEST_GATE_H
#include <stdatomic.h>
#include <time.h>

static atomic_int gate;   /* 1: the gated task may finish */

static tide_status gated(void * ctx) {
    (void)ctx;
    while (!atomic_load(&gate)) nanosleep(&(struct timespec){0, 1000000}, NULL);
    return TIDE_OK;
}

/* Queues a task writing t's storage on cpu:0 that ends when the gate opens. */
static void push_gated(tide_tensor * t) {
    atomic_store(&gate, 0);
    int unused = 0;   /* the engine copies ctx: give it one */
    tide_engine_task task = {.fn = gated, .ctx = &unused, .ctx_size = sizeof unused, .name = "gated", .cost = 1 << 30};
    tide_device cpu0 = {TIDE_DEVICE_CPU, 0};
    CHECK(tide_engine_push(&task, NULL, 0, &t->storage, 1, cpu0) == TIDE_OK);
}

static void open_gate(void) { atomic_store(&gate, 1); }
#endif
