/* test_deferred.c - an op's result gets its memory when the op runs, not when
 * it is queued: pending ops hold no memory for results not computed yet, a
 * stream of queued ops reuses one block, the values are right, and a result
 * larger than the machine fails at the call rather than later. */
#include "tide.h"
#include "check.h"
#include "core/internal.h"
#include "gate.h"

#include <string.h>

enum { N = 256 * 1024 };   /* 1 MiB of float32: queued, never inline */

static tide_tensor * full(double v, int64_t n, tide_device dev) {
    int64_t sizes[1] = {n};
    tide_tensor * t = tide_tensor_empty(1, sizes, TIDE_DTYPE_F32, dev);
    tide_op_params p = {.dtype = TIDE_DTYPE_F32, .n_ints = 1};
    p.ints[0] = n;
    p.scalars[0] = v;
    tide_tensor * out[1];
    if (t && tide_op_call(tide_op_find("full"), NULL, 0, &p, out, t) == TIDE_OK) tide_tensor_release(out[0]);
    return t;
}

static tide_tensor * add(tide_tensor * a, tide_tensor * b) {
    tide_tensor * in[2] = {a, b}, * out[1] = {NULL};
    return tide_op_call(tide_op_find("add"), in, 2, NULL, out, NULL) == TIDE_OK ? out[0] : NULL;
}

static int64_t in_use(void) {
    tide_mem_stats s;
    tide_mem_get_stats(&s);
    return s.bytes_in_use;
}

static void test_pending_results_hold_no_memory(void) {
    tide_device cpu0 = {TIDE_DEVICE_CPU, 0};
    tide_tensor * x = full(1.5, N, cpu0);
    CHECK(tide_tensor_wait(x) == TIDE_OK);
    push_gated(x);   /* every reader of x now waits for the gate */
    int64_t before = in_use();
    tide_tensor * y = add(x, x);
    CHECK(y && y->storage->data == NULL);
    CHECK(in_use() == before);   /* queued: no memory yet */
    /* a stream of results dropped as soon as they are queued, as a loop does:
     * with memory taken at the call they would all be held until they ran */
    tide_mem_reset_peak();
    for (int i = 0; i < 50; i++) tide_tensor_release(add(x, x));
    open_gate();
    double v = 0;
    CHECK(tide_tensor_get(y, N - 1, &v) == TIDE_OK && v == 3.0);
    CHECK(y->storage->data != NULL);
    CHECK(tide_sync() == TIDE_OK);
    tide_mem_stats s;
    tide_mem_get_stats(&s);
    CHECK(s.peak_in_use - before <= 4 * (int64_t)N * 4);   /* y and a few in flight, not 51 */
    tide_tensor_release(y);
    tide_tensor_release(x);
}

static void test_too_large_fails_at_the_call(void) {
    tide_op_params p = {.dtype = TIDE_DTYPE_F32, .n_ints = 1};
    p.ints[0] = (int64_t)1 << 52;   /* 16 PiB */
    tide_tensor * out[1] = {NULL};
    CHECK(tide_op_call(tide_op_find("full"), NULL, 0, &p, out, NULL) == TIDE_E_OOM);
    CHECK(strstr(tide_last_error(), "out of memory") != NULL);
    CHECK(out[0] == NULL);
}

int main(void) {
    test_pending_results_hold_no_memory();
    test_too_large_fails_at_the_call();
    if (check_failures) fprintf(stderr, "%d checks failed\n", check_failures);
    return check_failures != 0;
}
