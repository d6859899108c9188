/*
 * config.c - the runtime's description of itself (tide_config), its version,
 * and one-time initialisation at load: threads and the BLAS library.
 */
#include "internal.h"

#include <stdio.h>

const char * tide_version(void) { return "0.1.0"; }

static const char * simd_level(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return "avx512f";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2+fma";
    return "sse2";
#else
    return "generic";
#endif
}

const char * tide_config(void) {
    static _Thread_local char buf[1024];
    snprintf(buf, sizeof buf, "version=%s\nsimd=%s\nthreads=%d\n%s", tide_version(), simd_level(),
             tide_get_num_threads(), tide_blas_describe());
    return buf;
}

__attribute__((constructor)) static void tide_init(void) {
    tide_blas_init();
}
