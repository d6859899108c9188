/* test_engine.c - the asynchronous engine from C: ordering of writes and
 * reads on shared storages, queued work on several cpu devices, several host
 * threads pushing at once, and failures that poison what an op writes. Built
 * also under ThreadSanitizer (make test-tsan). */
#include "tide.h"
#include "check.h"
#include "core/internal.h"
#include "gate.h"

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
    /* eye's kernel fails on a 1-d destination: a failure found when the op runs
     * (at once here: an op with no inputs to wait for may run inline) */
    tide_op_params p = {.dtype = TIDE_DTYPE_F32, .n_ints = 1};
    p.ints[0] = N;
    tide_tensor * out[1] = {NULL};
    tide_status st = tide_op_call(tide_op_find("eye"), NULL, 0, &p, out, NULL);
    if (st == TIDE_OK) {   /* queued: the failure shows at the wait */
        CHECK(tide_tensor_wait(out[0]) != TIDE_OK);
        tide_tensor_release(out[0]);
    }
    CHECK(strstr(tide_last_error(), "eye") != NULL);
    CHECK(tide_sync() == TIDE_OK);   /* reported where it was raised */
    /* unrelated work goes on */
    tide_device cpu = {TIDE_DEVICE_CPU, -1};
    tide_tensor * ok = filled(3, cpu);
    CHECK(at(ok, 0) == 3.0);
    tide_tensor_release(ok);
}

/* A queued task that fails with the message in its ctx. */
static tide_status fails(void * ctx) { return tide_error_set(TIDE_E_INDEX, "%s", (const char *)ctx); }

static tide_tensor * push_failing(const char * msg, tide_tensor * after) {
    int64_t          n    = 4;
    tide_device      cpu0 = {TIDE_DEVICE_CPU, 0};
    tide_tensor *    t    = tide_tensor_empty(1, &n, TIDE_DTYPE_F32, cpu0);
    tide_engine_task task = {.fn = fails, .ctx = (void *)msg, .ctx_size = strlen(msg) + 1, .name = "fails", .cost = 1 << 30};
    CHECK(t && tide_engine_push(&task, &after->storage, 1, &t->storage, 1, cpu0) == TIDE_OK);
    return t;
}

/* Each failure of a queued op is raised once: by the first wait or op call that
 * meets it (in the tensor it wrote, or in one computed from it), else by the
 * next tide_sync(), which then raises the oldest one left. */
static void test_failure_reports(void) {
    int64_t       n  = 4;
    tide_device   cpu0 = {TIDE_DEVICE_CPU, 0};
    tide_tensor * g  = tide_tensor_empty(1, &n, TIDE_DTYPE_F32, cpu0);
    push_gated(g);
    tide_tensor * a  = push_failing("A failed", g);
    tide_tensor * b  = binary("add", a, a, NULL);   /* queued after a: fails for its input */
    tide_tensor * c  = push_failing("C failed", g);
    tide_tensor * d  = push_failing("D failed", g);
    open_gate();
    CHECK(b && tide_tensor_wait(b) == TIDE_E_INDEX);   /* A, through b */
    CHECK(strstr(tide_last_error(), "an input comes from a failed op: A failed") != NULL);
    CHECK(tide_tensor_wait(a) == TIDE_E_INDEX);         /* a is poisoned for good... */
    CHECK(tide_sync() == TIDE_E_INDEX);                 /* ...but sync raises C, the oldest not raised yet */
    CHECK(strstr(tide_last_error(), "C failed") != NULL && !strstr(tide_last_error(), "A failed"));
    CHECK(tide_sync() == TIDE_OK);                      /* and drops D with it, as it always did */
    /* an op call that meets the poison raises it at once, and reports it */
    push_gated(g);
    tide_tensor * e = push_failing("E failed", g);
    open_gate();
    CHECK(tide_sync() == TIDE_E_INDEX && strstr(tide_last_error(), "E failed"));
    tide_tensor * f = push_failing("F failed", g);
    CHECK(tide_tensor_wait(f) == TIDE_E_INDEX);
    CHECK(binary("add", e, f, NULL) == NULL);           /* E's poison, met at the call */
    CHECK(strstr(tide_last_error(), "an input comes from a failed op: E failed") != NULL);
    CHECK(tide_sync() == TIDE_OK);
    tide_tensor * all[] = {g, a, b, c, d, e, f};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tide_tensor_release(all[i]);
}

static tide_status nothing(void * ctx) {
    (void)ctx;
    return TIDE_OK;
}

static void * open_gate_later(void * arg) {
    (void)arg;
    nanosleep(&(struct timespec){0, 300 * 1000000}, NULL);
    open_gate();
    return NULL;
}

/* Pushes n ops on cpu:0 that read `in` (and what the gated task writes) and
 * write fresh float32 tensors of `out_n` elements, while a thread opens the
 * gate 300 ms later: whether a push had to wait for the gate. */
static bool pushes_wait(tide_tensor * gated_t, tide_tensor * in, int64_t out_n, int n) {
    tide_device cpu0 = {TIDE_DEVICE_CPU, 0};
    push_gated(gated_t);
    pthread_t opener;
    pthread_create(&opener, NULL, open_gate_later, NULL);
    for (int i = 0; i < n; i++) {
        tide_tensor *    out  = tide_tensor_empty(1, &out_n, TIDE_DTYPE_F32, cpu0);
        tide_storage *   r[2] = {gated_t->storage, in->storage};
        tide_engine_task task = {.fn = nothing, .name = "nothing", .cost = 1 << 30};
        CHECK(out && tide_engine_push(&task, r, 2, &out->storage, 1, cpu0) == TIDE_OK);
        tide_tensor_release(out);
    }
    bool waited = atomic_load(&gate) != 0;
    pthread_join(opener, NULL);
    CHECK(tide_sync() == TIDE_OK);
    return waited;
}

/* Back-pressure bounds the results of pending ops, not what they read: ops
 * reading a 200 MiB tensor queue at once behind a blocked one; so do three
 * writing 100 MiB each (a few ops stay in flight however large), while eight
 * writing 48 MiB each make the pusher wait. */
static void test_back_pressure(void) {
    int64_t       small = 16, big = (int64_t)200 << 18;   /* float32: 200 MiB */
    tide_device   cpu0 = {TIDE_DEVICE_CPU, 0};
    tide_tensor * g = tide_tensor_empty(1, &small, TIDE_DTYPE_F32, cpu0);
    tide_tensor * b = tide_tensor_empty(1, &big, TIDE_DTYPE_F32, cpu0);
    CHECK(g && b);
    CHECK(!pushes_wait(g, b, 16, 3));
    CHECK(!pushes_wait(g, g, (int64_t)100 << 18, 3));
    CHECK(pushes_wait(g, g, (int64_t)48 << 18, 8));
    tide_tensor_release(b);
    tide_tensor_release(g);
}

int main(void) {
    test_back_pressure();
    test_ordering();
    test_threads();
    test_poison();
    test_failure_reports();
    test_ordering();
    tide_set_sync(1);
    test_ordering();
    test_threads();
    tide_set_sync(0);
    if (check_failures) fprintf(stderr, "%d checks failed\n", check_failures);
    return check_failures != 0;
}
