/*
 * ref.c - reference measurements for the benchmarks, called from LuaJIT
 * through the FFI (libtide_bench_ref.so): plain C copy and add loops over
 * floats, and OpenBLAS's sgemm called directly with its own default threads.
 * It knows nothing of Tide; the Lua benchmarks put the figures side by side.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds for `reps` passes of dst[i] = src[i] over n floats (one thread). */
double tide_ref_copy(float * restrict dst, const float * restrict src, int64_t n, int32_t reps) {
    double t0 = now();
    for (int32_t r = 0; r < reps; r++) {
        for (int64_t i = 0; i < n; i++) dst[i] = src[i];
        __asm__ volatile("" : : "r"(dst) : "memory");   /* keep every pass */
    }
    return now() - t0;
}

/* Seconds for `reps` passes of dst[i] = a[i] + b[i] over n floats (one thread). */
double tide_ref_add(float * restrict dst, const float * restrict a, const float * restrict b, int64_t n, int32_t reps) {
    double t0 = now();
    for (int32_t r = 0; r < reps; r++) {
        for (int64_t i = 0; i < n; i++) dst[i] = a[i] + b[i];
        __asm__ volatile("" : : "r"(dst) : "memory");
    }
    return now() - t0;
}

/* -- OpenBLAS -------------------------------------------------------------------------------- */

typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha, const float * a, int lda,
                         const float * b, int ldb, float beta, float * c, int ldc);

static struct {
    void *   lib;
    sgemm_fn sgemm;
    char * (*corename)(void);
    void (*set_threads)(int);
    int (*get_threads)(void);
    int      shared;     /* already loaded (by libtide) when we opened it: the same instance */
    int      used_threads;
    char     info[256];
} ob;

/* The kernel set libtide would pick, for when this library loads OpenBLAS first. */
static const char * cpuid_coretype(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512bf16")) return "Cooperlake";
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
    return NULL;
}

static int load(void) {
    if (ob.lib) return 1;
    void * h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    ob.shared = h != NULL;
    if (!h) {
        const char * core = cpuid_coretype();
        int          set  = core && !getenv("OPENBLAS_CORETYPE");
        if (set) setenv("OPENBLAS_CORETYPE", core, 1);
        h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
        if (set) unsetenv("OPENBLAS_CORETYPE");
    }
    if (!h) return 0;
    ob.lib         = h;
    ob.sgemm       = (sgemm_fn)dlsym(h, "cblas_sgemm");
    ob.corename    = (char * (*)(void))dlsym(h, "openblas_get_corename");
    ob.set_threads = (void (*)(int))dlsym(h, "openblas_set_num_threads");
    ob.get_threads = (int (*)(void))dlsym(h, "openblas_get_num_threads");
    return ob.sgemm && ob.set_threads && ob.get_threads;
}

/* Seconds for `reps` products of two n x n float matrices by cblas_sgemm,
 * after one warm-up product, with OpenBLAS's default threads (one per core);
 * OpenBLAS is set back to one thread afterwards, as libtide runs it. A
 * negative result: OpenBLAS could not be loaded or memory allocated. */
double tide_ref_sgemm(int32_t n, int32_t reps) {
    if (!load()) return -1;
    size_t bytes = ((size_t)n * (size_t)n * sizeof(float) + 63) / 64 * 64;
    float * a = aligned_alloc(64, bytes), * b = aligned_alloc(64, bytes), * c = aligned_alloc(64, bytes);
    if (!a || !b || !c) {
        free(a); free(b); free(c);
        return -2;
    }
    uint32_t x = 1;
    for (size_t i = 0; i < (size_t)n * (size_t)n; i++) {
        a[i] = (float)((x = x * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
        b[i] = (float)((x = x * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    ob.set_threads(cores > 0 ? (int)cores : 1);
    ob.used_threads = ob.get_threads();
    ob.sgemm(101, 111, 111, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);   /* row-major, no transposes */
    double t0 = now();
    for (int32_t r = 0; r < reps; r++) ob.sgemm(101, 111, 111, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double t = now() - t0;
    ob.set_threads(1);
    free(a); free(b); free(c);
    return t;
}

/* "core=... threads=... shared=yes|no": OpenBLAS's kernel set, the threads the
 * last tide_ref_sgemm used, and whether it is the instance libtide loaded. */
const char * tide_ref_blas_info(void) {
    if (!load()) return "unavailable";
    snprintf(ob.info, sizeof ob.info, "core=%s threads=%d shared=%s", ob.corename ? ob.corename() : "?",
             ob.used_threads, ob.shared ? "yes" : "no");
    return ob.info;
}
