/* test_tensor.c - the runtime's core without Lua: storage lifetimes across
 * views, views that allocate nothing, the allocator's reuse, error messages
 * kept per thread, external buffers and the op call path from C. */
#include "tide.h"
#include "check.h"

#include <pthread.h>
#include <string.h>

static int freed;
static void on_free(void * data, void * ctx) { (void)data; freed += *(int *)ctx; }

static void test_views_share_storage(void) {
    int64_t sizes[2] = {3, 4};
    tide_tensor * t = tide_tensor_zeros(2, sizes, TIDE_DTYPE_F32);
    CHECK(t && t->nelem == 12 && t->ndim == 2);
    tide_storage * s = t->storage;
    CHECK(tide_storage_refcount(s) == 1);
    tide_mem_stats before, after;
    tide_mem_get_stats(&before);
    tide_tensor * v = tide_tensor_transpose(t, 0, 1);
    tide_tensor * n = tide_tensor_narrow(v, 0, 1, 2);
    tide_mem_get_stats(&after);
    CHECK(after.bytes_in_use == before.bytes_in_use);   /* views allocate no data */
    CHECK(v->storage == s && n->storage == s);
    CHECK(tide_storage_refcount(s) == 3);
    CHECK(n->sizes[0] == 2 && n->sizes[1] == 3 && n->strides[0] == 1 && n->strides[1] == 4 && n->offset == 1);
    tide_tensor_release(t);
    tide_tensor_release(v);
    CHECK(tide_storage_refcount(s) == 1);                 /* the narrow view keeps it alive */
    float * p = tide_tensor_data(n);
    CHECK(p != NULL && p[0] == 0.0f);
    tide_tensor_release(n);
    tide_tensor_release(NULL);                           /* a no-op */
}

static void test_allocator_reuses_blocks(void) {
    int64_t sizes[1] = {1000};
    tide_mem_stats s0, s1;
    tide_tensor * warm = tide_tensor_empty(1, sizes, TIDE_DTYPE_F32, (tide_device){TIDE_DEVICE_CPU, -1});
    tide_tensor_release(warm);
    tide_mem_get_stats(&s0);
    for (int i = 0; i < 100; i++) {
        tide_tensor * t = tide_tensor_empty(1, sizes, TIDE_DTYPE_F32, (tide_device){TIDE_DEVICE_CPU, -1});
        CHECK(((uintptr_t)tide_tensor_data(t) & 63) == 0);   /* 64-byte aligned */
        tide_tensor_release(t);
    }
    tide_mem_get_stats(&s1);
    CHECK(s1.n_reused - s0.n_reused == 100);
    CHECK(s1.bytes_in_use == s0.bytes_in_use);
    tide_mem_empty_cache();
    tide_mem_get_stats(&s1);
    CHECK(s1.bytes_cached == 0);
}

static void test_external_buffer(void) {
    float data[6] = {1, 2, 3, 4, 5, 6};
    int64_t sizes[2] = {2, 3};
    int one = 1;
    freed = 0;
    tide_tensor * t = tide_tensor_from_blob(data, 2, sizes, NULL, TIDE_DTYPE_F32, on_free, &one);
    CHECK(t != NULL);
    tide_tensor * in[2] = {t, t}, * out[1];
    CHECK(tide_op_call(tide_op_find("add"), in, 2, NULL, out, NULL) == TIDE_OK);
    double v;
    CHECK(tide_tensor_get(out[0], 5, &v) == TIDE_OK && v == 12.0);
    tide_tensor_release(out[0]);
    /* in place, into the caller's memory: outputs[0] is t, retained once more */
    CHECK(tide_op_call(tide_op_find("mul"), in, 2, NULL, out, t) == TIDE_OK);
    CHECK(out[0] == t);
    tide_tensor_release(out[0]);
    CHECK(tide_tensor_wait(t) == TIDE_OK && data[2] == 9.0f);
    tide_tensor_release(t);
    CHECK(freed == 1);
}

static void test_errors(void) {
    int64_t a_sizes[2] = {2, 3}, b_sizes[1] = {4};
    tide_tensor * a = tide_tensor_zeros(2, a_sizes, TIDE_DTYPE_F32);
    tide_tensor * b = tide_tensor_zeros(1, b_sizes, TIDE_DTYPE_F32);
    tide_tensor * in[2] = {a, b}, * out[1] = {NULL};
    CHECK(tide_op_call(tide_op_find("add"), in, 2, NULL, out, NULL) == TIDE_E_SHAPE);
    CHECK_MSG("add: shapes [2,3] and [4] cannot be broadcast: size 3 ~= 4 at dimension 2");
    CHECK(out[0] == NULL);
    CHECK(tide_op_call(tide_op_find("add"), in, 1, NULL, out, NULL) == TIDE_E_VALUE);
    CHECK_MSG("add: takes 2 tensor inputs, 1 given");
    CHECK(tide_op_call(-3, in, 1, NULL, out, NULL) == TIDE_E_VALUE);
    CHECK(tide_tensor_select(a, 0, 2) == NULL);
    CHECK_MSG("select: index 3 is out of range for dimension 1 of size 2");
    int64_t bad[1] = {-2};
    CHECK(tide_tensor_zeros(1, bad, TIDE_DTYPE_F32) == NULL);
    CHECK(tide_dtype_from_name("nope") == -1);
    tide_device d;
    CHECK(tide_device_parse("tpu:0", &d) == TIDE_E_DEVICE);
    /* a message made from the last one keeps it */
    tide_error_set(TIDE_E_VALUE, "first");
    CHECK(tide_error_set(TIDE_E_DEVICE, "%s", tide_last_error()) == TIDE_E_DEVICE);
    CHECK_MSG("first");
    tide_error_set(TIDE_E_VALUE, "outer: %s", tide_last_error());
    CHECK_MSG("outer: first");
    tide_tensor_release(a);
    tide_tensor_release(b);
}

static void * other_thread(void * arg) {
    (void)arg;
    tide_error_set(TIDE_E_IO, "from another thread");
    return NULL;
}

static void test_error_is_per_thread(void) {
    tide_error_set(TIDE_E_VALUE, "mine");
    pthread_t th;
    pthread_create(&th, NULL, other_thread, NULL);
    pthread_join(th, NULL);
    CHECK_MSG("mine");
}

static void test_dtypes(void) {
    CHECK(tide_dtype_promote(TIDE_DTYPE_I32, TIDE_DTYPE_F32) == TIDE_DTYPE_F32);
    CHECK(tide_dtype_promote(TIDE_DTYPE_U8, TIDE_DTYPE_I32) == TIDE_DTYPE_I32);
    CHECK(tide_dtype_promote(TIDE_DTYPE_F16, TIDE_DTYPE_BF16) == TIDE_DTYPE_F32);
    CHECK(tide_dtype_promote(TIDE_DTYPE_BOOL, TIDE_DTYPE_U8) == TIDE_DTYPE_U8);
    CHECK(tide_dtype_size(TIDE_DTYPE_BF16) == 2);
    CHECK(strcmp(tide_dtype_name(TIDE_DTYPE_I64), "int64") == 0);
    double vals[4] = {1.0, 65504.0, 1e-7, -2.5};
    int64_t n[1] = {4};
    tide_tensor * h = tide_tensor_from_doubles(vals, 1, n, TIDE_DTYPE_F16);
    double out[4];
    CHECK(tide_tensor_to_doubles(h, out) == TIDE_OK);
    CHECK(out[0] == 1.0 && out[1] == 65504.0 && out[3] == -2.5);
    CHECK(out[2] > 1.1e-7 * 0.9 - 1e-8 && out[2] < 1.3e-7);   /* a float16 subnormal near 1e-7 */
    tide_tensor_release(h);
}

int main(void) {
    test_views_share_storage();
    test_allocator_reuses_blocks();
    test_external_buffer();
    test_errors();
    test_error_is_per_thread();
    test_dtypes();
    if (check_failures) fprintf(stderr, "%d checks failed\n", check_failures);
    return check_failures != 0;
}
