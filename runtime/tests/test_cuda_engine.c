/* test_cuda_engine.c - a CUDA device in the engine, with the fake device of
 * fake_device.h as the process's backend: tensors move to the device and back
 * through pinned staging (dtype, strides and views on the host side), the
 * device's queue launches a copy behind another on its stream without waiting
 * for the device, the host waits for what the device has not done, and device
 * memory comes from the caching allocator and goes back to it. */
#include "tide.h"
#include "check.h"
#include "core/internal.h"
#include "engine/cuda_loader.h"
#include "fake_device.h"

#include <sched.h>
#include <stdatomic.h>

#include <time.h>

static const tide_device CPU = {TIDE_DEVICE_CPU, -1}, CUDA0 = {TIDE_DEVICE_CUDA, 0};

static tide_tensor * iota(int64_t rows, int64_t cols) {
    double  v[64];
    int64_t sizes[2] = {rows, cols};
    for (int64_t i = 0; i < rows * cols; i++) v[i] = (double)i + 0.5;
    return tide_tensor_from_doubles(v, 2, sizes, TIDE_DTYPE_F32);
}

static double at(tide_tensor * t, int64_t i) {
    double v = -1;
    CHECK(tide_tensor_get(t, i, &v) == TIDE_OK);
    return v;
}

static int64_t device_in_use(void) {
    tide_devmem_stats st;
    return tide_cuda_memory_stats(0, &st) == TIDE_OK ? st.bytes_in_use : -1;
}

static void test_there_and_back(void) {
    fake.autorun     = 1;
    tide_tensor * x  = iota(2, 3);
    tide_tensor * d  = tide_tensor_to(x, TIDE_DTYPE_F32, CUDA0, 0);
    /* its memory comes when the copy runs, from the copy stream's blocks */
    CHECK(d && d->dev.type == TIDE_DEVICE_CUDA && tide_tensor_wait(d) == TIDE_OK && d->storage->block != NULL);
    CHECK(tide_devblock_stream(d->storage->block) == tide_cuda_stream_of(0, TIDE_STREAM_COPY));
    CHECK(device_in_use() == 512);   /* 24 bytes, in a block of the smallest size */
    tide_tensor * h = tide_tensor_to(d, TIDE_DTYPE_F64, CPU, 0);   /* and a dtype on the way back */
    CHECK(h && h->dev.type == TIDE_DEVICE_CPU && h->dtype_id == TIDE_DTYPE_F64);
    for (int i = 0; i < 6; i++) CHECK(at(h, i) == i + 0.5);
    CHECK(at(d, 4) == 4.5);   /* item() of a device tensor reads it through the host */
    /* a strided source on the host, and a strided view on the device */
    tide_tensor * xt = tide_tensor_transpose(x, 0, 1);
    tide_tensor * dt = tide_tensor_to(xt, -1, CUDA0, 0);
    tide_tensor * ht = tide_tensor_to(dt, -1, CPU, 0);
    double want[6] = {0.5, 3.5, 1.5, 4.5, 2.5, 5.5};
    for (int i = 0; i < 6; i++) CHECK(at(ht, i) == want[i]);
    tide_tensor * dv  = tide_tensor_transpose(d, 0, 1);
    tide_tensor * hv  = tide_tensor_to(dv, -1, CPU, 0);
    for (int i = 0; i < 6; i++) CHECK(at(hv, i) == want[i]);
    /* copy_ into an existing host tensor, broadcasting a device row */
    int64_t       big[2] = {4, 3};
    tide_tensor * row  = iota(1, 3);
    tide_tensor * row3 = tide_tensor_to(row, -1, CUDA0, 0);
    tide_tensor * dst  = tide_tensor_zeros(2, big, TIDE_DTYPE_F32);
    tide_tensor * in[1] = {row3}, * res[1];
    CHECK(tide_op_call(tide_op_find("copy"), in, 1, NULL, res, dst) == TIDE_OK);
    tide_tensor_release(res[0]);
    for (int i = 0; i < 12; i++) CHECK(at(dst, i) == i % 3 + 0.5);
    /* staging is pinned once and kept: twenty round trips pin at most a
     * block for each copy that can be in flight (the upload may not have
     * given its block back when the download asks), not one a trip */
    CHECK(tide_sync() == TIDE_OK);
    int64_t pinned = fake.n_pinned;
    for (int i = 0; i < 20; i++) {
        tide_tensor * a = tide_tensor_to(x, -1, CUDA0, 0), * b = tide_tensor_to(a, -1, CPU, 0);
        /* both done (the upload completes on the copy stream, on its own time) */
        CHECK(at(b, 5) == 5.5 && tide_tensor_wait(a) == TIDE_OK);
        tide_tensor_release(a);
        tide_tensor_release(b);
    }
    CHECK(fake.n_pinned - pinned <= 2);
    tide_tensor * all[] = {x, d, h, xt, dt, ht, dv, hv, row, row3, dst};
    CHECK(tide_sync() == TIDE_OK);
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tide_tensor_release(all[i]);
    CHECK(device_in_use() == 0);
}

/* Waits up to a second for the fake stream to have n work items queued. */
static bool queued(fake_stream * s, int64_t n) {
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&fake.lock);
        int64_t q = s->queued;
        pthread_mutex_unlock(&fake.lock);
        if (q >= n) return true;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return false;
}

/* A fake device counter, read under its lock (the engine's threads write them). */
static int64_t count_of(const int64_t * counter) {
    pthread_mutex_lock(&fake.lock);
    int64_t n = *counter;
    pthread_mutex_unlock(&fake.lock);
    return n;
}

/* Waits up to a second for a host callback queued on s, then finishes s:
 * the device queue puts its callback after the launch that ends a burst. */
static void finish_when_called_back(fake_stream * s) {
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&fake.lock);
        int n = s->n_cb;
        pthread_mutex_unlock(&fake.lock);
        if (n > 0) break;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    fake_stream_finish(s);
}

static void test_stream_order_and_host_waits(void) {
    fake.autorun      = 0;
    fake_stream * s   = tide_cuda_stream_of(0, TIDE_STREAM_COMPUTE);
    fake_stream * cs  = tide_cuda_stream_of(0, TIDE_STREAM_COPY);
    int64_t       q0  = count_of(&s->queued), c0 = count_of(&cs->queued), w0 = count_of(&fake.n_waits);
    tide_tensor * x   = iota(4, 4);
    tide_tensor * d   = tide_tensor_to(x, -1, CUDA0, 0);
    tide_tensor * h   = tide_tensor_to(d, -1, CPU, 0);
    /* the copy there goes on the copy stream; the copy back on the compute
     * stream, launched after it with a wait on the device for the copy
     * stream, before the device did either */
    CHECK(queued(cs, c0 + 1));
    CHECK(queued(s, q0 + 1));
    CHECK(count_of(&fake.n_waits) == w0 + 1);
    CHECK(d->storage->q_head != NULL && h->storage->q_head != NULL);   /* nothing is done: the host must wait */
    finish_when_called_back(cs);
    finish_when_called_back(s);
    CHECK(tide_tensor_wait(h) == TIDE_OK);
    for (int i = 0; i < 16; i++) CHECK(at(h, i) == i + 0.5);
    tide_tensor_release(x);
    tide_tensor_release(d);
    tide_tensor_release(h);
    fake.autorun = 1;
    CHECK(tide_sync() == TIDE_OK);
}

/* Copies from the host overlap kernels: they wait for the compute stream only
 * where they would overwrite what a launched kernel still reads. */
static void test_copy_stream(void) {
    fake.autorun      = 0;
    fake_stream * s   = tide_cuda_stream_of(0, TIDE_STREAM_COMPUTE);
    fake_stream * cs  = tide_cuda_stream_of(0, TIDE_STREAM_COPY);
    tide_tensor * x   = iota(4, 4), * y = iota(4, 4);
    tide_tensor * d   = tide_tensor_to(x, -1, CUDA0, 0);
    finish_when_called_back(cs);
    CHECK(tide_tensor_wait(d) == TIDE_OK);
    int64_t w0 = count_of(&fake.n_waits);
    /* a kernel reading d, launched, not done */
    tide_tensor * n = NULL, * res[1];
    CHECK(tide_op_call(tide_op_find("neg"), &d, 1, NULL, res, NULL) == TIDE_OK);
    n = res[0];
    /* an unrelated upload: on the copy stream at once, no wait, and in a
     * block of its own stream, not the kernel's scratch, which the compute
     * stream may still be using */
    int64_t       c0 = count_of(&cs->queued);
    tide_tensor * e  = tide_tensor_to(y, -1, CUDA0, 0);
    CHECK(queued(cs, c0 + 1));
    CHECK(count_of(&fake.n_waits) == w0);
    pthread_mutex_lock(&fake.lock);
    void * scratch = fake.last_scratch;
    pthread_mutex_unlock(&fake.lock);
    CHECK(tide_tensor_ptr(e) != scratch);
    /* an upload into d, which the kernel still reads: it waits for the compute stream */
    tide_tensor * in[1] = {y};
    CHECK(tide_op_call(tide_op_find("copy"), in, 1, NULL, res, d) == TIDE_OK);
    tide_tensor_release(res[0]);
    CHECK(queued(cs, c0 + 2));
    CHECK(count_of(&fake.n_waits) == w0 + 1);
    /* from here the device runs what it gets at once; then what it holds */
    pthread_mutex_lock(&fake.lock);
    fake.autorun = 1;
    pthread_mutex_unlock(&fake.lock);
    fake_stream_finish(s);
    fake_stream_finish(cs);
    CHECK(at(n, 5) == -5.5 && at(d, 5) == 5.5 && at(e, 15) == 15.5);
    /* an upload into a tensor made beforehand, from the compute stream's
     * blocks (perhaps a kernel's scratch just given back): after that stream */
    tide_tensor * made = tide_tensor_empty(2, (int64_t[]){4, 4}, TIDE_DTYPE_F32, CUDA0);
    CHECK(tide_devblock_stream(made->storage->block) == s);
    w0 = count_of(&fake.n_waits);
    CHECK(tide_op_call(tide_op_find("copy"), in, 1, NULL, res, made) == TIDE_OK);
    tide_tensor_release(res[0]);
    CHECK(tide_tensor_wait(made) == TIDE_OK && count_of(&fake.n_waits) == w0 + 1);
    CHECK(at(made, 15) == 15.5);
    tide_tensor_release(made);
    tide_tensor * all[] = {x, y, d, n, e};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tide_tensor_release(all[i]);
    CHECK(tide_sync() == TIDE_OK);
}

static tide_op_params params(void) {
    tide_op_params p;
    memset(&p, 0, sizeof p);
    p.dtype = -1;
    return p;
}

static void test_errors(void) {
    tide_device dev;
    CHECK(tide_device_parse("cuda", &dev) == TIDE_OK && dev.type == TIDE_DEVICE_CUDA && dev.index == 0);
    CHECK(tide_device_parse("cuda:1", &dev) == TIDE_E_DEVICE);
    CHECK_MSG("device: 'cuda:1' is not available: the CUDA devices are cuda:0 to cuda:0");
    tide_tensor * x = iota(2, 3);
    tide_tensor * d = tide_tensor_to(x, -1, CUDA0, 0);
    tide_tensor * in[2] = {d, d}, * out[1];
    /* into a strided device view: through a dense temporary and the device's copy */
    tide_tensor * dt = tide_tensor_transpose(d, 0, 1), * xt = iota(3, 2);
    in[0] = xt;
    CHECK(tide_op_call(tide_op_find("copy"), in, 1, NULL, out, dt) == TIDE_OK);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) CHECK(at(d, 3 * i + j) == 2 * j + i + 0.5);
    tide_tensor_release(out[0]);
    in[0] = x;
    CHECK(tide_op_call(tide_op_find("add"), (tide_tensor *[]){x, d}, 2, NULL, out, NULL) == TIDE_E_DEVICE);
    CHECK_MSG("add: input 2 is on cuda:0 but input 1 is on cpu");
    /* more than the device holds: the allocator's message, at the call */
    int64_t big[1] = {(int64_t)(80 << 20) / 4};
    CHECK(tide_tensor_empty(1, big, TIDE_DTYPE_F32, CUDA0) == NULL);
    CHECK(strstr(tide_last_error(), "out of memory: could not allocate 80.0 MiB (83886080 bytes) on cuda:0, which "
                                    "has ") == tide_last_error());
    /* an op's result more than the device has: refused at the call, not when it runs */
    tide_op_params fp = params();
    fp.ints[0] = big[0], fp.n_ints = 1, fp.dtype = TIDE_DTYPE_F32;
    tide_set_default_device(CUDA0);
    CHECK(tide_op_call(tide_op_find("full"), NULL, 0, &fp, out, NULL) == TIDE_E_OOM);
    CHECK(strstr(tide_last_error(), "full: out of memory: could not allocate 80.0 MiB (83886080 bytes) on cuda:0, which "
                                    "has 64.0 MiB in all") == tide_last_error());
    tide_set_default_device(CPU);
    tide_tensor_release(dt);
    tide_tensor_release(xt);
    tide_tensor_release(d);
    tide_tensor_release(x);
    CHECK(tide_sync() == TIDE_OK);
    CHECK(device_in_use() == 0);
}

/* One op on the device; NULL if it failed at the call. */
static tide_tensor * op1(const char * name, tide_tensor ** in, int32_t n, const tide_op_params * p) {
    tide_tensor * out[TIDE_OP_MAX_OUT] = {NULL};
    return tide_op_call(tide_op_find(name), in, n, p, out, NULL) == TIDE_OK ? out[0] : NULL;
}

/* Registry ops on the device: the fake backend's kernels are the CPU ones
 * run on the device memory, so what is checked here is the call as the
 * kernel receives it (views, host numbers, params, the random slice,
 * several results, scratch) and how results and failures come back. */
static void test_kernels(void) {
    fake.autorun    = 1;
    int64_t k0      = fake.n_kernels;
    tide_tensor * x = iota(2, 3), * d = tide_tensor_to(x, -1, CUDA0, 0);
    /* a view of device memory and a host number: (d^T + 1) * 2 */
    tide_tensor * dt = tide_tensor_transpose(d, 0, 1), * one = tide_tensor_scalar(1, TIDE_DTYPE_I64);
    tide_tensor * two = tide_tensor_scalar(2, TIDE_DTYPE_F64);
    tide_tensor * s  = op1("add", (tide_tensor *[]){dt, one}, 2, NULL);
    tide_tensor * m  = op1("mul", (tide_tensor *[]){s, two}, 2, NULL);
    CHECK(m && m->dev.type == TIDE_DEVICE_CUDA && m->dtype_id == TIDE_DTYPE_F32 && m->sizes[0] == 3);
    tide_tensor * h = tide_tensor_to(m, -1, CPU, 0);
    double want[6] = {3, 9, 5, 11, 7, 13};
    for (int i = 0; i < 6; i++) CHECK(at(h, i) == want[i]);
    /* params: a sum over dim 1 keeping it */
    tide_op_params p = params();
    p.ints[0] = 1, p.n_ints = 1, p.keepdim = 1;
    tide_tensor * sum = op1("sum", &d, 1, &p);
    CHECK(sum && sum->ndim == 2 && sum->sizes[1] == 1 && at(sum, 0) == 4.5 && at(sum, 1) == 13.5);
    /* two results */
    tide_tensor * res[2] = {NULL, NULL};
    p.ints[0] = 0, p.keepdim = 0;
    CHECK(tide_op_call(tide_op_find("max_dim"), &d, 1, &p, res, NULL) == TIDE_OK);
    CHECK(res[1] && res[1]->dev.type == TIDE_DEVICE_CUDA && at(res[0], 2) == 5.5 && at(res[1], 2) == 1);
    /* the random slice: the same numbers as on the host for the same seed */
    p = params();
    p.ints[0] = 5, p.n_ints = 1, p.scalars[1] = 1;
    tide_manual_seed(7);
    tide_tensor * rh = op1("rand", NULL, 0, &p);
    tide_manual_seed(7);
    tide_tensor * out[1] = {NULL}, * rd = tide_tensor_empty(1, (int64_t[]){5}, TIDE_DTYPE_F32, CUDA0);
    CHECK(tide_op_call(tide_op_find("rand"), NULL, 0, &p, out, rd) == TIDE_OK);
    for (int i = 0; i < 5; i++) CHECK(at(rd, i) == at(rh, i) && at(rh, i) >= 0 && at(rh, i) < 1);
    tide_tensor_release(out[0]);
    /* into a view on the device: the second column of d, in place */
    tide_tensor * col = tide_tensor_select(d, 1, 1);
    CHECK(tide_op_call(tide_op_find("neg"), &col, 1, NULL, out, col) == TIDE_OK);
    tide_tensor_release(out[0]);
    CHECK(at(d, 1) == -1.5 && at(d, 4) == -4.5 && at(d, 0) == 0.5 && at(d, 5) == 5.5);
    /* masked_select's shape rule counts a device mask through a host copy */
    tide_tensor * mask = op1("gt", (tide_tensor *[]){d, two}, 2, NULL);
    tide_tensor * sel  = op1("masked_select", (tide_tensor *[]){d, mask}, 2, NULL);
    CHECK(sel && sel->dev.type == TIDE_DEVICE_CUDA && sel->ndim == 1 && sel->sizes[0] == 3);
    CHECK(sel && at(sel, 0) == 2.5 && at(sel, 1) == 3.5 && at(sel, 2) == 5.5);
    CHECK(fake.n_kernels - k0 == 8);
    tide_tensor * all[] = {x, d, dt, one, two, s, m, h, sum, res[0], res[1], rh, rd, col, mask, sel};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tide_tensor_release(all[i]);
    CHECK(tide_sync() == TIDE_OK);
    CHECK(device_in_use() == 0);
}

/* A kernel that fails on the device fails its op: the error names it and
 * surfaces at the next wait; an op the backend has no kernel for is refused
 * at the call. */
static void test_kernel_errors(void) {
    fake.autorun     = 1;
    tide_tensor * x  = iota(2, 3), * d = tide_tensor_to(x, -1, CUDA0, 0);
    tide_tensor * ix = tide_tensor_full(1, (int64_t[]){1}, 7, TIDE_DTYPE_I64);
    tide_tensor * di = tide_tensor_to(ix, -1, CUDA0, 0);
    tide_op_params p = params();
    p.n_ints = 1;
    tide_tensor * bad = op1("index_select", (tide_tensor *[]){d, di}, 2, &p);
    CHECK(bad != NULL);
    double v;
    CHECK(tide_tensor_get(bad, 0, &v) != TIDE_OK);
    CHECK(strstr(tide_last_error(), "index_select: index 7 is out of range for dimension 1 of size 2 (on cuda:0)"));
    tide_tensor_release(bad);
    tide_tensor_release(di);
    tide_tensor_release(d);
    CHECK(tide_sync() == TIDE_OK);   /* raised by the read: not again */
    /* many bad indices in flight at once: each op's own report */
    tide_tensor * many[40];
    d  = tide_tensor_to(x, -1, CUDA0, 0);
    for (int i = 0; i < 40; i++) {
        tide_tensor * k = tide_tensor_full(1, (int64_t[]){1}, i % 2 ? 1 : 2 + i, TIDE_DTYPE_I64);
        tide_tensor * dk = tide_tensor_to(k, -1, CUDA0, 0);
        many[i] = op1("index_select", (tide_tensor *[]){d, dk}, 2, &p);
        tide_tensor_release(k);
        tide_tensor_release(dk);
    }
    for (int i = 0; i < 40; i++) {
        char want[96];
        snprintf(want, sizeof want, "index %d is out of range for dimension 1 of size 2 (on cuda:0)", 2 + i);
        CHECK(many[i] && (tide_tensor_get(many[i], 0, &v) == TIDE_OK) == (i % 2 == 1));
        CHECK(i % 2 == 1 ? v == 3.5 : strstr(tide_last_error(), want) != NULL);
        tide_tensor_release(many[i]);
    }
    tide_tensor_release(d);
    CHECK(tide_sync() == TIDE_OK);
    /* a one-based index as the user wrote it */
    p.flags = TIDE_PARAMF_ONE_BASED;
    d = tide_tensor_to(x, -1, CUDA0, 0);
    tide_tensor * zero = tide_tensor_full(1, (int64_t[]){1}, 0, TIDE_DTYPE_I64), * dz = tide_tensor_to(zero, -1, CUDA0, 0);
    bad = op1("index_select", (tide_tensor *[]){d, dz}, 2, &p);
    CHECK(bad && tide_tensor_get(bad, 0, &v) == TIDE_E_INDEX);
    CHECK(strstr(tide_last_error(), "index_select: index 0 is out of range for dimension 1 of size 2 (on cuda:0)"));
    p.flags = 0;
    tide_tensor * objs[] = {bad, d, zero, dz};
    for (size_t i = 0; i < 4; i++) tide_tensor_release(objs[i]);
    CHECK(tide_sync() == TIDE_OK);
    /* one nobody read: the next sync raises it, once */
    d   = tide_tensor_to(x, -1, CUDA0, 0);
    dz  = tide_tensor_to(ix, -1, CUDA0, 0);
    bad = op1("index_select", (tide_tensor *[]){d, dz}, 2, &p);
    tide_tensor_release(bad), tide_tensor_release(d), tide_tensor_release(dz);
    CHECK(tide_sync() == TIDE_E_INDEX);
    CHECK_MSG("index_select: index 7 is out of range for dimension 1 of size 2 (on cuda:0) "
              "(op index_select on float32 [2,3], int64 [1])");
    CHECK(tide_sync() == TIDE_OK);
    fake.no_kernels = 1;
    tide_cuda_use_backend(&fake_api);   /* the kernels are looked up again */
    d = tide_tensor_to(x, -1, CUDA0, 0);
    CHECK(op1("exp", &d, 1, NULL) == NULL && tide_last_status() == TIDE_E_DEVICE);
    CHECK_MSG("exp: no kernel for device cuda:0 in this build: the fake device was told to have no kernels");
    tide_tensor_release(d);
    CHECK(tide_sync() == TIDE_OK);
    fake.no_kernels = 0;
    tide_cuda_use_backend(&fake_api);
    tide_tensor_release(ix);
    tide_tensor_release(x);
    CHECK(fake.used == 0);
}

/* TIDE_SYNC: the device's copies run on the caller's thread and are waited for there. */
static void test_sync_mode(void) {
    fake.autorun = 0;
    tide_set_sync(1);
    tide_tensor * x = iota(3, 3);
    tide_tensor * d = tide_tensor_to(x, -1, CUDA0, 0);
    tide_tensor * h = tide_tensor_to(d, -1, CPU, 0);
    CHECK(h->storage->q_head == NULL);
    for (int i = 0; i < 9; i++) CHECK(at(h, i) == i + 0.5);
    tide_set_sync(0);
    fake.autorun = 1;
    tide_tensor_release(x);
    tide_tensor_release(d);
    tide_tensor_release(h);
}

/* A host task that holds its storage until the test opens the gate. */
static atomic_int gate_open;
static tide_status gate_fn(void * ctx) {
    (void)ctx;
    while (!atomic_load(&gate_open)) sched_yield();
    return TIDE_OK;
}

/* Ops that become ready together launch as a burst with one host callback
 * after the burst (at most every 64 ops), not one each; all finish in order. */
static void test_bursts(void) {
    fake.autorun      = 1;
    tide_tensor * x   = iota(2, 3), * d = tide_tensor_to(x, -1, CUDA0, 0);
    CHECK(tide_sync() == TIDE_OK);
    /* a host task writing d's storage holds the device ops that read it back */
    atomic_store(&gate_open, 0);
    tide_engine_task gate = {gate_fn, NULL, 0, NULL, NULL, "gate", 1, NULL, NULL, 0};
    CHECK(tide_engine_push(&gate, NULL, 0, &d->storage, 1, (tide_device){TIDE_DEVICE_CPU, 0}) == TIDE_OK);
    tide_tensor * r[100];
    for (int i = 0; i < 100; i++) r[i] = op1("neg", &d, 1, NULL);
    int64_t callbacks = count_of(&fake.n_callbacks), kernels = count_of(&fake.n_kernels);
    atomic_store(&gate_open, 1);
    CHECK(tide_sync() == TIDE_OK);
    CHECK(count_of(&fake.n_kernels) - kernels == 100);
    CHECK(count_of(&fake.n_callbacks) - callbacks <= 4);   /* 100 ops: two full bursts of 64 at most, and the rest */
    for (int i = 0; i < 100; i++) {
        CHECK(r[i] && at(r[i], 5) == -5.5);
        tide_tensor_release(r[i]);
    }
    tide_tensor_release(d);
    tide_tensor_release(x);
    CHECK(tide_sync() == TIDE_OK);
}

/* Under back-pressure on bytes, a burst whose ready tail is small gets a
 * callback before that tail, so the host may queue more while the tail runs:
 * three ops writing 48 MiB each, ready at once, launch with two callbacks
 * (after the second, and after the last), where small ops take one a burst
 * (test_bursts). */
static void test_split_burst(void) {
    fake.autorun  = 1;
    size_t room   = fake.capacity;
    fake.capacity = (size_t)512 << 20;
    int64_t       n = 12 << 20;   /* 48 MiB of float32 */
    tide_tensor * x = tide_tensor_full(1, &n, 1.5, TIDE_DTYPE_F32), * d = tide_tensor_to(x, -1, CUDA0, 0);
    CHECK(tide_sync() == TIDE_OK);
    atomic_store(&gate_open, 0);
    tide_engine_task gate = {gate_fn, NULL, 0, NULL, NULL, "gate", 1, NULL, NULL, 0};
    CHECK(tide_engine_push(&gate, NULL, 0, &d->storage, 1, (tide_device){TIDE_DEVICE_CPU, 0}) == TIDE_OK);
    tide_tensor * r[3];
    for (int i = 0; i < 3; i++) r[i] = op1("neg", &d, 1, NULL);   /* 4 ops pending: the pusher does not wait */
    int64_t callbacks = count_of(&fake.n_callbacks), kernels = count_of(&fake.n_kernels);
    atomic_store(&gate_open, 1);
    CHECK(tide_sync() == TIDE_OK);
    CHECK(count_of(&fake.n_kernels) - kernels == 3);
    CHECK(count_of(&fake.n_callbacks) - callbacks == 2);
    for (int i = 0; i < 3; i++) {
        CHECK(r[i] && at(r[i], n - 1) == -1.5);
        tide_tensor_release(r[i]);
    }
    tide_tensor_release(d);
    tide_tensor_release(x);
    CHECK(tide_sync() == TIDE_OK);
    CHECK(tide_cuda_empty_cache(0) == TIDE_OK);   /* before the device shrinks back */
    fake.capacity = room;
}

/* Waits until the fake device has launched n kernels since k0 and has c
 * callbacks since c0 (both counts exact when they settle). */
static bool launched_with(int64_t k0, int64_t n, int64_t c0, int64_t c) {
    for (int i = 0; i < 1000; i++) {
        if (count_of(&fake.n_kernels) - k0 == n && count_of(&fake.n_callbacks) - c0 == c) return true;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return false;
}

/* Ops queued one at a time while a host callback is on the stream launch at
 * once and wait together for the next callback, put there when the first
 * comes back: two callbacks for ten ops, not ten. */
static void test_one_callback_at_a_time(void) {
    fake.autorun      = 1;
    tide_tensor * x   = iota(2, 3), * d = tide_tensor_to(x, -1, CUDA0, 0);
    CHECK(tide_sync() == TIDE_OK);
    fake.autorun      = 0;
    fake_stream * s   = tide_cuda_stream_of(0, TIDE_STREAM_COMPUTE);
    int64_t       k0  = count_of(&fake.n_kernels), c0 = count_of(&fake.n_callbacks);
    tide_tensor * r[10];
    for (int i = 0; i < 10; i++) {
        r[i] = op1("neg", &d, 1, NULL);
        CHECK(launched_with(k0, i + 1, c0, 1));   /* the first op's callback, still on the stream */
    }
    fake_stream_finish(s);   /* the device runs it: the other nine get one callback */
    CHECK(launched_with(k0, 10, c0, 2));
    fake.autorun = 1;
    fake_stream_finish(s);
    CHECK(tide_sync() == TIDE_OK);
    for (int i = 0; i < 10; i++) {
        CHECK(r[i] && at(r[i], 5) == -5.5);
        tide_tensor_release(r[i]);
    }
    tide_tensor_release(d);
    tide_tensor_release(x);
}

/* In-place updates of one device tensor follow each other on the stream:
 * each launches as soon as the one before it has launched, with none done
 * on the device, however many are in flight (each grant walks them once). */
static void test_inplace_chain(void) {
    fake.autorun    = 1;
    tide_tensor * x = iota(2, 3), * d = tide_tensor_to(x, -1, CUDA0, 0);
    CHECK(tide_sync() == TIDE_OK);
    fake.autorun      = 0;
    fake_stream * s   = tide_cuda_stream_of(0, TIDE_STREAM_COMPUTE);
    int64_t       k0  = count_of(&fake.n_kernels);
    enum { N_UPDATES = 301 };
    for (int i = 0; i < N_UPDATES; i++) {
        tide_tensor * res[1] = {NULL};
        CHECK(tide_op_call(tide_op_find("neg"), &d, 1, NULL, res, d) == TIDE_OK);
        tide_tensor_release(res[0]);
    }
    bool all = false;
    for (int i = 0; i < 1000 && !all; i++) {
        all = count_of(&fake.n_kernels) - k0 == N_UPDATES;
        if (!all) nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    CHECK(all);
    CHECK(d->storage->q_head != NULL);   /* launched, not done */
    fake.autorun = 1;
    fake_stream_finish(s);
    tide_tensor * h = tide_tensor_to(d, -1, CPU, 0);
    for (int i = 0; i < 6; i++) CHECK(at(h, i) == -(i + 0.5));   /* an odd number of negations */
    tide_tensor_release(h);
    tide_tensor_release(d);
    tide_tensor_release(x);
    CHECK(tide_sync() == TIDE_OK);
}

/* Two devices: copies between them move bytes on the destination's stream;
 * a strided or converted source is made dense on its own device first. */
static void test_two_devices(void) {
    fake.n_devices = 2;
    tide_cuda_use_backend(&fake_api);
    fake.autorun = 1;
    tide_device   cuda1 = {TIDE_DEVICE_CUDA, 1};
    tide_tensor * x = iota(2, 3), * d0 = tide_tensor_to(x, -1, CUDA0, 0);
    int64_t       peers = count_of(&fake.n_peer);
    tide_tensor * d1 = tide_tensor_to(d0, -1, cuda1, 0);
    CHECK(d1 && d1->dev.type == TIDE_DEVICE_CUDA && d1->dev.index == 1);
    for (int i = 0; i < 6; i++) CHECK(at(d1, i) == i + 0.5);
    CHECK(count_of(&fake.n_peer) == peers + 1);
    /* transposed and converted on the way: dense float64 on cuda:0, then moved */
    tide_tensor * t0 = tide_tensor_transpose(d0, 0, 1);
    tide_tensor * t1 = tide_tensor_to(t0, TIDE_DTYPE_F64, cuda1, 0);
    double want[6] = {0.5, 3.5, 1.5, 4.5, 2.5, 5.5};
    CHECK(t1 && t1->dev.index == 1 && t1->dtype_id == TIDE_DTYPE_F64);
    for (int i = 0; i < 6; i++) CHECK(at(t1, i) == want[i]);
    /* into a strided view on cuda:1: through a dense temporary there */
    tide_tensor * y = iota(3, 2), * back = tide_tensor_transpose(d1, 0, 1), * src = tide_tensor_to(y, -1, CUDA0, 0);
    tide_tensor * res[1];
    CHECK(tide_op_call(tide_op_find("copy"), &src, 1, NULL, res, back) == TIDE_OK);
    tide_tensor_release(res[0]);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) CHECK(at(d1, 3 * i + j) == 2 * j + i + 0.5);
    /* copy_ itself takes only what moves as bytes, and says what to do */
    tide_tensor * in[1] = {t0};
    tide_tensor * dst   = tide_tensor_empty(2, (int64_t[]){3, 2}, TIDE_DTYPE_F32, cuda1);
    CHECK(tide_op_call(tide_op_find("copy"), in, 1, NULL, res, dst) == TIDE_E_DEVICE);
    CHECK(strstr(tide_last_error(), "copy: from cuda:0 to cuda:1 moves a contiguous tensor of the destination's dtype "
                                    "and shape, got float32 [3,2] (not contiguous) into float32 [3,2]"));
    /* ops still refuse inputs on two devices */
    CHECK(tide_op_call(tide_op_find("add"), (tide_tensor *[]){d0, d1}, 2, NULL, res, NULL) == TIDE_E_DEVICE);
    CHECK_MSG("add: input 2 is on cuda:1 but input 1 is on cuda:0");
    tide_tensor * all[] = {x, y, d0, d1, t0, t1, back, src, dst};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tide_tensor_release(all[i]);
    CHECK(tide_sync() == TIDE_OK);
    fake.n_devices = 1;
    tide_cuda_use_backend(&fake_api);
}

int main(void) {
    tide_cuda_use_backend(&fake_api);
    test_there_and_back();
    test_stream_order_and_host_waits();
    test_copy_stream();
    test_errors();
    test_sync_mode();
    test_kernels();
    test_kernel_errors();
    test_bursts();
    test_split_burst();
    test_inplace_chain();
    test_one_callback_at_a_time();
    test_two_devices();
    CHECK(tide_sync() == TIDE_OK);
    tide_cuda_use_backend(NULL);
    CHECK(fake.used == 0);
    if (check_failures == 0) printf("test_cuda_engine: ok\n");
    return check_failures;
}
