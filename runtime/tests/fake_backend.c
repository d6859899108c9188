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
 * TIDE_FAKE_MEMORY_MB: each device's memory (4096 by default). */
#include "fake_device.h"

__attribute__((visibility("default"))) const tide_devapi * tide_cuda_backend_api(int32_t version);

const tide_devapi * tide_cuda_backend_api(int32_t version) {
    const char * n = getenv("TIDE_FAKE_DEVICES"), * mb = getenv("TIDE_FAKE_MEMORY_MB");
    fake.autorun   = 1;   /* work is done when it is launched: no test drives it here */
    fake.n_devices = n && atoi(n) > 0 ? atoi(n) : 1;
    fake.capacity  = (size_t)(mb && atoll(mb) > 0 ? atoll(mb) : 4096) << 20;
    return version == TIDE_DEVAPI_VERSION ? &fake_api : NULL;
}
