/*
 * backend.cu - libtide_cuda, Tide's CUDA backend, built only where CMake finds
 * the CUDA toolkit and loaded by libtide at run time (engine/cuda_loader.c),
 * so that one libtide runs with or without a GPU and its driver. For now it
 * answers what devices there are, or why there are none; kernels, streams and
 * the device allocator come next (see issue "CUDA devices").
 */
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern "C" {

/* The number of CUDA devices usable here; with none, `reason` (n bytes) says
 * why, and with some, it lists their names. Never aborts. */
__attribute__((visibility("default"))) int32_t tide_cuda_backend_probe(char * reason, size_t n) {
    int         count = 0;
    cudaError_t err   = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        snprintf(reason, n, "the CUDA runtime found no usable device: %s (%s)", cudaGetErrorString(err),
                 cudaGetErrorName(err));
        return 0;
    }
    if (count == 0) {
        snprintf(reason, n, "the CUDA runtime found no device");
        return 0;
    }
    size_t used = (size_t)snprintf(reason, n, "%d device%s:", count, count > 1 ? "s" : "");
    for (int i = 0; i < count && used < n; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        used += (size_t)snprintf(reason + used, n - used, " cuda:%d %s (sm_%d%d, %.0f GiB)", i, p.name, p.major,
                                 p.minor, (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    }
    return count;
}

}
