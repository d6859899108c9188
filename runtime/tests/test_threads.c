/* test_threads.c - what tide.h promises a host with several threads: each
 * thread wraps its own buffers (tide_tensor_from_blob), runs ops on them and on
 * a tensor shared read-only by every thread, reads results and sees its own
 * error messages, all at once. Built also under ThreadSanitizer (make test-tsan). */
#include "tide.h"
#include "check.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N_THREADS = 6, ROUNDS = 30, R = 64, K = 48, COLS = 32 };

static tide_tensor * shared_w;        /* K x COLS, read by every thread */
static float         shared_w_host[K * COLS];
static atomic_int    freed;           /* free_fn calls of the host buffers */

static void count_free(void * data, void * ctx) {
    (void)ctx;
    free(data);
    atomic_fetch_add(&freed, 1);
}

static tide_tensor * call(const char * op, tide_tensor * a, tide_tensor * b, const tide_op_params * p,
                          tide_tensor * dst) {
    tide_tensor * in[2] = {a, b}, * out[1] = {NULL};
    if (tide_op_call(tide_op_find(op), in, b ? 2 : 1, p, out, dst) != TIDE_OK) return NULL;
    return out[0];
}

typedef struct {
    int    id;
    int    failures;   /* counted here, reported by the main thread (CHECK is not thread-safe) */
} job;

static void * host_thread(void * arg) {
    job * j = arg;
    for (int round = 0; round < ROUNDS; round++) {
        /* x: R x K over a buffer this thread owns, freed by free_fn when tide lets go */
        float * xb = malloc(sizeof(float) * R * K);
        for (int i = 0; i < R * K; i++) xb[i] = (float)((i + j->id + round) % 7) - 3.0f;
        tide_tensor * x = tide_tensor_from_blob(xb, 2, (int64_t[]){R, K}, NULL, TIDE_DTYPE_F32, count_free, NULL);
        if (!x) { j->failures++; free(xb); continue; }
        /* y = relu(x @ w) * 2, written into a second host buffer through `out` */
        float yb[R * COLS];
        tide_tensor * y = tide_tensor_from_blob(yb, 2, (int64_t[]){R, COLS}, NULL, TIDE_DTYPE_F32, NULL, NULL);
        tide_tensor * m = call("matmul", x, shared_w, NULL, NULL);
        tide_tensor * r = m ? call("relu", m, NULL, NULL, NULL) : NULL;
        tide_tensor * two = tide_tensor_scalar(2.0, TIDE_DTYPE_F32);
        tide_tensor * yo = r ? call("mul", r, two, NULL, y) : NULL;
        tide_op_params sp = {.dtype = -1, .n_ints = 0};
        tide_tensor * total = yo ? call("sum", y, NULL, &sp, NULL) : NULL;
        double got = NAN;
        if (!total || tide_tensor_get(total, 0, &got) != TIDE_OK || tide_tensor_wait(y) != TIDE_OK) j->failures++;
        /* the reference, from the host buffers */
        double want = 0;
        for (int i = 0; i < R; i++)
            for (int c = 0; c < COLS; c++) {
                double acc = 0;
                for (int k = 0; k < K; k++) acc += (double)xb[i * K + k] * shared_w_host[k * COLS + c];
                double v = acc > 0 ? 2 * acc : 0;
                if (fabs(yb[i * COLS + c] - v) > 1e-3 * (1 + fabs(v))) j->failures++;
                want += v;
            }
        if (fabs(got - want) > 1e-3 * (1 + fabs(want))) j->failures++;
        /* a failing call sets this thread's message, not another's */
        if (call("matmul", x, x, NULL, NULL) != NULL) j->failures++;
        if (!strstr(tide_last_error(), "matmul")) j->failures++;
        tide_tensor * views[3] = {m, r, two};
        tide_tensor_release_many(views, 3);
        tide_tensor_release(yo);
        tide_tensor_release(total);
        tide_tensor_release(y);
        tide_tensor_release(x);
    }
    return NULL;
}

static void test_host_threads(void) {
    for (int i = 0; i < K * COLS; i++) shared_w_host[i] = (float)((i * 7) % 11) / 10.0f - 0.5f;
    shared_w = tide_tensor_from_blob(shared_w_host, 2, (int64_t[]){K, COLS}, NULL, TIDE_DTYPE_F32, NULL, NULL);
    CHECK(shared_w != NULL);
    pthread_t th[N_THREADS];
    job jobs[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        jobs[i] = (job){i, 0};
        CHECK(pthread_create(&th[i], NULL, host_thread, &jobs[i]) == 0);
    }
    for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < N_THREADS; i++) {
        if (jobs[i].failures) fprintf(stderr, "thread %d: %d failures\n", i, jobs[i].failures);
        CHECK(jobs[i].failures == 0);
    }
    CHECK(tide_sync() == TIDE_OK);
    tide_tensor_release(shared_w);
    /* every host buffer is given back; the last ones just after their ops end */
    for (int i = 0; i < 2000 && atomic_load(&freed) != N_THREADS * ROUNDS; i++) nanosleep(&(struct timespec){0, 1000000}, NULL);
    CHECK(atomic_load(&freed) == N_THREADS * ROUNDS);
}

int main(void) {
    test_host_threads();
    tide_set_sync(1);   /* the same with every op run at once on its caller's thread */
    atomic_store(&freed, 0);
    test_host_threads();
    tide_set_sync(0);
    if (check_failures) fprintf(stderr, "%d checks failed\n", check_failures);
    return check_failures != 0;
}
