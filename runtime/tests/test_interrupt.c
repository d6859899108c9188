/* test_interrupt.c - tide_set_interrupt: a request made from a signal handler
 * stops a host's blocking wait (tide_tensor_wait, tide_sync) or its next op call
 * with TIDE_E_INTERRUPTED, once; the queued work goes on and the engine stays
 * usable. A task that blocks until the test opens a gate makes waits deterministic. */
#include "tide.h"
#include "check.h"
#include "core/internal.h"
#include "gate.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

static void on_signal(int sig) {
    (void)sig;
    tide_set_interrupt(1);   /* what a REPL's SIGINT handler does */
}

typedef struct {
    pthread_t target;
    int       ms;
    int       open_gate;   /* 1: open the gate instead of signalling */
} later_arg;

static void * later(void * p) {
    later_arg * a = p;
    nanosleep(&(struct timespec){0, a->ms * 1000000L}, NULL);
    if (a->open_gate) open_gate();
    else pthread_kill(a->target, SIGUSR1);
    return NULL;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_wait_interrupted(void) {
    tide_tensor * t = tide_tensor_zeros(1, (int64_t[]){16}, TIDE_DTYPE_F32);
    push_gated(t);
    /* a signal 30 ms into a wait that cannot end by itself stops it */
    later_arg a = {pthread_self(), 30, 0};
    pthread_t th;
    pthread_create(&th, NULL, later, &a);
    double t0 = now();
    CHECK(tide_tensor_wait(t) == TIDE_E_INTERRUPTED);
    CHECK_MSG("interrupted");
    CHECK(now() - t0 < 5.0);
    pthread_join(th, NULL);
    /* that request was taken; a new one, made before the wait, stops sync and data */
    tide_set_interrupt(1);
    CHECK(tide_sync() == TIDE_E_INTERRUPTED);
    tide_set_interrupt(1);
    CHECK(tide_tensor_data(t) == NULL);
    CHECK_MSG("interrupted");
    /* a withdrawn request stops nothing: this wait lasts until the gate opens */
    tide_set_interrupt(1);
    tide_set_interrupt(0);
    later_arg g = {pthread_self(), 30, 1};
    pthread_create(&th, NULL, later, &g);
    CHECK(tide_tensor_wait(t) == TIDE_OK);
    pthread_join(th, NULL);
    CHECK(tide_sync() == TIDE_OK);
    tide_tensor_release(t);
}

static void test_op_interrupted(void) {
    tide_tensor * a = tide_tensor_full(1, (int64_t[]){4}, 1.5, TIDE_DTYPE_F32);
    tide_tensor * in[2] = {a, a}, * out[1] = {NULL};
    /* a wait with nothing pending leaves the request for the next call */
    tide_set_interrupt(1);
    CHECK(tide_tensor_wait(a) == TIDE_OK);
    CHECK(tide_op_call(tide_op_find("add"), in, 2, NULL, out, NULL) == TIDE_E_INTERRUPTED);
    CHECK_MSG("add: interrupted");
    /* taken once: the engine goes on as before */
    CHECK(tide_op_call(tide_op_find("add"), in, 2, NULL, out, NULL) == TIDE_OK);
    double v = 0;
    CHECK(tide_tensor_get(out[0], 3, &v) == TIDE_OK && v == 3.0);
    tide_tensor_release(out[0]);
    tide_tensor_release(a);
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGUSR1, &sa, NULL);
    test_wait_interrupted();
    test_op_interrupted();
    if (check_failures) fprintf(stderr, "%d checks failed\n", check_failures);
    return check_failures != 0;
}
