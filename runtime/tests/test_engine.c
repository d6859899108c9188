/* test_engine.c - the asynchronous engine from C: ordering of writes and
 * reads on shared storages, queued work on several cpu devices, several host
 * threads pushing at once, and failures that poison what an op writes. Built
 * also under ThreadSanitizer (make test-tsan). */
#include "tide.h"
#include "check.h"

#include <pthread.h>
#include <string.h>

enum { N = 300 * 300 };   /* large enough to be queued rather than run inline */

static tide_tensor * filled(double v, tide_device dev) {
    int64_t sizes[1] = {N};
    tide_tensor * t = tide_tensor_empty(1, sizes, TIDE_DTYPE_F32, dev);
    tide_op_params p = {.dtype = TIDE_DTYPE_F32, .n_ints = 1};
    p.ints[0] = N;
    p.scalars[0] = v;
    tide_tensor * out[1];
    if (tide_op_call(tide_op_find("full"), NULL, 0, &p, out, t) == TIDE_OK) tide_tensor_release(out[0]);
    return t;
}

static tide_tensor * binary(const char * op, tide_tensor * a, tide_tensor * b, tide_tensor * dst) {
    tide_tensor * in[2] = {a, b}, * out[1] = {NULL};
    if (tide_op_call(tide_op_find(op), in, 2, NULL, out, dst) != TIDE_OK) return NULL;
    return out[0];
}

static double at(tide_tensor * t, int64_t i) {
    double v = -1;
    tide_tensor_get(t, i, &v);
    return v;
}

static void test_ordering(void) {
    tide_device cpu = {TIDE_DEVICE_CPU, -1}, cpu1 = {TIDE_DEVICE_CPU, 1};
    tide_tensor * a = filled(1, cpu), * b = filled(2, cpu1);
    tide_tensor * c = binary("add", a, a, NULL);          /* c = 2 */
    tide_tensor_release(binary("mul", c, c, c));          /* c = 4, in place after the add */
    tide_tensor_release(binary("add", a, c, a));          /* a = 5, after c's reads of a */
    tide_tensor_release(a);                               /* dropped while ops may be pending */
    tide_tensor * d = binary("mul", b, b, NULL);          /* on cpu:1: 4 */
    CHECK(d && d->dev.index == 1);
    CHECK(at(c, N - 1) == 4.0);
    CHECK(at(d, 7) == 4.0);
    CHECK(tide_sync() == TIDE_OK);
    tide_tensor_release(b);
    tide_tensor_release(c);
    tide_tensor_release(d);
}

static void * host_thread(void * arg) {
    double v = *(double *)arg, * result = (double *)arg + 1;
    tide_device cpu = {TIDE_DEVICE_CPU, -1};
    tide_tensor * x = filled(v, cpu);
    for (int i = 0; i < 20; i++) tide_tensor_release(binary("add", x, x, x));   /* x *= 2, twenty times */
    *result = at(x, 123);
    tide_tensor_release(x);
    return NULL;
}

static void test_threads(void) {
    double args[4][2] = {{1, 0}, {2, 0}, {3, 0}, {0.5, 0}};
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, host_thread, args[i]);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) CHECK(args[i][1] == args[i][0] * 1048576.0);
}

static void test_poison(void) {
    /* eye's kernel fails on a 1-d destination: a failure found when the op runs */
    tide_op_params p = {.dtype = TIDE_DTYPE_F32, .n_ints = 1};
    p.ints[0] = N;
    tide_tensor * out[1] = {NULL};
    tide_status st = tide_op_call(tide_op_find("eye"), NULL, 0, &p, out, NULL);
    if (st == TIDE_OK) {   /* queued: the failure shows at the wait and at the next sync */
        CHECK(tide_tensor_wait(out[0]) != TIDE_OK);
        CHECK(strstr(tide_last_error(), "eye") != NULL);
        CHECK(tide_sync() != TIDE_OK);
        CHECK(tide_sync() == TIDE_OK);   /* reported once */
        tide_tensor * later = binary("add", out[0], out[0], NULL);   /* a reader of a poisoned tensor */
        CHECK(later == NULL);
        CHECK(strstr(tide_last_error(), "an input comes from a failed op") != NULL);
        tide_tensor_release(out[0]);
    } else {
        CHECK(strstr(tide_last_error(), "eye") != NULL);
    }
    /* unrelated work goes on */
    tide_device cpu = {TIDE_DEVICE_CPU, -1};
    tide_tensor * ok = filled(3, cpu);
    CHECK(at(ok, 0) == 3.0);
    tide_tensor_release(ok);
}

int main(void) {
    test_ordering();
    test_threads();
    test_poison();
    test_ordering();
    tide_set_sync(1);
    test_ordering();
    test_threads();
    tide_set_sync(0);
    if (check_failures) fprintf(stderr, "%d checks failed\n", check_failures);
    return check_failures != 0;
}
