/* fake_backend.c - libtide_fakecuda.so: the fake device of fake_device.h as
 * a backend library that libtide loads in place of libtide_cuda.so
 * (TIDE_CUDA_LIBRARY=.../libtide_fakecuda.so), so that the whole spec suite
 * can run with its default device at cuda:0 on a machine without a GPU
 * (make test-specs does). Its kernels are the CPU's, from its own copy of
 * libtide's objects (linked in whole, hidden), run when launched; its
 * "device memory" is host memory that libtide only reaches through the
 * backend's copies, as it would a GPU's.
 *
 * TIDE_FAKE_DEVICES: how many devices it reports (1 by default).
 * TIDE_FAKE_MEMORY_MB: each device's memory (4096 by default).
 * TIDE_FAKE_TEARDOWN_AFTER: an op's name: its first kernel call registers an
 * exit handler that tears the "library" down, as cuBLAS's first GEMM does;
 * a kernel launched after that exits the process with status 86 and says so
 * (libtide must drain its queued work before such handlers run). */
#include "fake_device.h"

#include <stdatomic.h>
#include <unistd.h>

static const char * teardown_op;
static atomic_int   torn_down, teardown_registered;
static tide_devapi  api;

static void teardown(void) { atomic_store(&torn_down, 1); }

static int lazy_library_kernel(const tide_devcall * d) {
    if (atomic_load(&torn_down)) {
        fprintf(stderr, "fake: %s launched after the library was torn down at exit\n", d->op);
        fflush(stderr);
        _exit(86);
    }
    int rc = fake_kernel_run(d);
    if (strcmp(d->op, teardown_op) == 0 && !atomic_exchange(&teardown_registered, 1)) atexit(teardown);
    return rc;
}

static tide_devkernel_fn lazy_library_kernel_of(const char * op) {
    return fake_kernel(op) ? lazy_library_kernel : NULL;
}

__attribute__((visibility("default"))) const tide_devapi * tide_cuda_backend_api(int32_t version);

const tide_devapi * tide_cuda_backend_api(int32_t version) {
    const char * n = getenv("TIDE_FAKE_DEVICES"), * mb = getenv("TIDE_FAKE_MEMORY_MB");
    fake.autorun   = 1;   /* work is done when it is launched: no test drives it here */
    fake.n_devices = n && atoi(n) > 0 ? atoi(n) : 1;
    fake.capacity  = (size_t)(mb && atoll(mb) > 0 ? atoll(mb) : 4096) << 20;
    if (version != TIDE_DEVAPI_VERSION) return NULL;
    api         = fake_api;
    teardown_op = getenv("TIDE_FAKE_TEARDOWN_AFTER");
    if (teardown_op && *teardown_op) api.kernel = lazy_library_kernel_of;
    return &api;
}
