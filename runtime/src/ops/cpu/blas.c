/*
 * blas.c - the GEMM behind matmul: OpenBLAS, loaded with dlopen() at start
 * (libtide does not link it), single-threaded except while a caller holds
 * cores lent by Tide's pool (tide_blas_lend_begin); or, when OpenBLAS cannot
 * be loaded or gives wrong results, a built-in blocked GEMM. Picks OpenBLAS's
 * kernel set from cpuid (Debian's 0.3.21 may not know recent CPUs and fall
 * back to slow Prescott kernels), checks one product once, and reports what
 * is in use.
 */
#include "blas.h"
#include "kernels.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* -- OpenBLAS, by dlsym ------------------------------------------------------------------ */

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

/* Debian's OpenBLAS has 32-bit integers (no INTERFACE64); CBLAS enums are ints. */
typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha, const float * a, int lda,
                         const float * b, int ldb, float beta, float * c, int ldc);
typedef void (*dgemm_fn)(int order, int ta, int tb, int m, int n, int k, double alpha, const double * a, int lda,
                         const double * b, int ldb, double beta, double * c, int ldc);
typedef char * (*corename_fn)(void);
typedef void (*set_threads_fn)(int n);

static struct {
    void *         lib;          /* NULL: the built-in GEMM */
    sgemm_fn       sgemm;
    dgemm_fn       dgemm;
    corename_fn    corename;
    set_threads_fn set_threads;
    const char *   source;       /* who chose the kernel set: user, cpuid, openblas, fallback */
    bool           check_ok;
    char           note[160];    /* why OpenBLAS is not used, or why a first choice was dropped */
    char           describe[512];
} blas = {.source = "none"};

/* The kernel set for this CPU, or NULL to let OpenBLAS decide. */
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

/* -- built-in GEMM ------------------------------------------------------------------------ */

/* Blocks: a packed kc x nc panel of B stays in L2, a packed MR x kc sliver of A
 * in L1, and an MR x NR tile of C in registers while p runs over kc. */
enum { KC = 256, NC = 512, MC = 64, MR = 4, NR = 16 };

#define BUILTIN_GEMM(name, T)                                                                          \
    static TIDE_SIMD_CLONES void name##_tile(int64_t kc, const T * restrict ap, const T * restrict bp,    \
                                             int64_t ldbp, T * restrict c, int64_t ldc) {               \
        T acc[MR][NR] = {{0}};                                                                         \
        for (int64_t p = 0; p < kc; p++) {                                                             \
            const T * restrict brow = bp + p * ldbp;                                                   \
            for (int r = 0; r < MR; r++) {                                                             \
                T a = ap[r * kc + p];                                                                  \
                for (int j = 0; j < NR; j++) acc[r][j] += a * brow[j];                                 \
            }                                                                                          \
        }                                                                                              \
        for (int r = 0; r < MR; r++)                                                                   \
            for (int j = 0; j < NR; j++) c[r * ldc + j] += acc[r][j];                                  \
    }                                                                                                  \
    /* Rows and columns left over from whole tiles: i-k-j order, vectorised over j. */                 \
    static TIDE_SIMD_CLONES void name##_edge(int64_t mr, int64_t nr, int64_t kc, const T * restrict ap,  \
                                             const T * restrict bp, int64_t ldbp, T * restrict c,       \
                                             int64_t ldc) {                                             \
        for (int64_t r = 0; r < mr; r++)                                                               \
            for (int64_t p = 0; p < kc; p++) {                                                         \
                T a = ap[r * kc + p];                                                                  \
                for (int64_t j = 0; j < nr; j++) c[r * ldc + j] += a * bp[p * ldbp + j];               \
            }                                                                                          \
    }                                                                                                  \
    static void name(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T * a,          \
                     int64_t lda, const T * b, int64_t ldb, T beta, T * c, int64_t ldc) {              \
        for (int64_t i = 0; i < m; i++)                                                                \
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0 ? 0 : beta * c[i * ldc + j];    \
        if (k == 0 || alpha == 0 || m == 0 || n == 0) return;                                          \
        T * bp = malloc(sizeof(T) * KC * NC), * ap = malloc(sizeof(T) * MC * KC);                      \
        if (!bp || !ap) { /* no memory for panels: unpacked loop, slow but correct */                  \
            for (int64_t i = 0; i < m; i++)                                                            \
                for (int64_t p = 0; p < k; p++) {                                                      \
                    T x = alpha * (ta ? a[p * lda + i] : a[i * lda + p]);                              \
                    for (int64_t j = 0; j < n; j++) c[i * ldc + j] += x * (tb ? b[j * ldb + p] : b[p * ldb + j]); \
                }                                                                                      \
            free(bp); free(ap);                                                                        \
            return;                                                                                    \
        }                                                                                              \
        for (int64_t j0 = 0; j0 < n; j0 += NC) {                                                       \
            int64_t nc = n - j0 < NC ? n - j0 : NC;                                                    \
            for (int64_t p0 = 0; p0 < k; p0 += KC) {                                                   \
                int64_t kc = k - p0 < KC ? k - p0 : KC;                                                \
                for (int64_t p = 0; p < kc; p++)   /* B panel, scaled by alpha, row-major kc x nc */    \
                    for (int64_t j = 0; j < nc; j++)                                                   \
                        bp[p * nc + j] = alpha * (tb ? b[(j0 + j) * ldb + p0 + p] : b[(p0 + p) * ldb + j0 + j]); \
                for (int64_t i0 = 0; i0 < m; i0 += MC) {                                               \
                    int64_t mc = m - i0 < MC ? m - i0 : MC;                                            \
                    for (int64_t i = 0; i < mc; i++)   /* A block, row-major mc x kc */                \
                        for (int64_t p = 0; p < kc; p++)                                               \
                            ap[i * kc + p] = ta ? a[(p0 + p) * lda + i0 + i] : a[(i0 + i) * lda + p0 + p]; \
                    int64_t mt = mc / MR * MR, nt = nc / NR * NR;                                      \
                    T * cb = c + i0 * ldc + j0;                                                        \
                    for (int64_t i = 0; i < mt; i += MR) {                                             \
                        for (int64_t j = 0; j < nt; j += NR)                                           \
                            name##_tile(kc, ap + i * kc, bp + j, nc, cb + i * ldc + j, ldc);           \
                        if (nt < nc)                                                                   \
                            name##_edge(MR, nc - nt, kc, ap + i * kc, bp + nt, nc, cb + i * ldc + nt, ldc); \
                    }                                                                                  \
                    if (mt < mc) name##_edge(mc - mt, nc, kc, ap + mt * kc, bp, nc, cb + mt * ldc, ldc); \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
        free(bp);                                                                                      \
        free(ap);                                                                                      \
    }

BUILTIN_GEMM(builtin_sgemm, float)
BUILTIN_GEMM(builtin_dgemm, double)

/* -- OpenBLAS's own threads ------------------------------------------------------------------ */

/* OpenBLAS's thread count is one global setting. Serial calls hold `threads_lock`
 * shared; a threaded call holds it exclusively, so no serial call ever runs
 * while the count is above 1. */
static pthread_rwlock_t   threads_lock = PTHREAD_RWLOCK_INITIALIZER;
static _Thread_local bool threaded;   /* this thread is between tide_blas_lend_begin and _end */

bool tide_blas_lend_begin(void) {
    if (!blas.lib) return false;
    int32_t n = tide_pool_lend();
    if (n < 2) {
        if (n > 0) tide_pool_unlend();
        return false;
    }
    pthread_rwlock_wrlock(&threads_lock);
    blas.set_threads(n);
    threaded = true;
    return true;
}

void tide_blas_lend_end(void) {
    blas.set_threads(1);
    threaded = false;
    pthread_rwlock_unlock(&threads_lock);
    tide_pool_unlend();
}

void * tide_blas_symbol(const char * name) { return blas.lib ? dlsym(blas.lib, name) : NULL; }

void tide_blas_serial_begin(void) {
    if (!threaded) pthread_rwlock_rdlock(&threads_lock);
}

void tide_blas_serial_end(void) {
    if (!threaded) pthread_rwlock_unlock(&threads_lock);
}

/* -- the entry points ---------------------------------------------------------------------- */

static bool fits_int(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
    return m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX;
}

void tide_blas_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float * a, int64_t lda,
                     const float * b, int64_t ldb, float beta, float * c, int64_t ldc) {
    if (m == 0 || n == 0) return;
    if (blas.sgemm && k > 0 && fits_int(m, n, k, lda, ldb, ldc)) {
        if (!threaded) pthread_rwlock_rdlock(&threads_lock);
        blas.sgemm(CBLAS_ROW_MAJOR, ta ? CBLAS_TRANS : CBLAS_NO_TRANS, tb ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)m,
                   (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
        if (!threaded) pthread_rwlock_unlock(&threads_lock);
        return;
    }
    builtin_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void tide_blas_dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double * a, int64_t lda,
                     const double * b, int64_t ldb, double beta, double * c, int64_t ldc) {
    if (m == 0 || n == 0) return;
    if (blas.dgemm && k > 0 && fits_int(m, n, k, lda, ldb, ldc)) {
        if (!threaded) pthread_rwlock_rdlock(&threads_lock);
        blas.dgemm(CBLAS_ROW_MAJOR, ta ? CBLAS_TRANS : CBLAS_NO_TRANS, tb ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)m,
                   (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
        if (!threaded) pthread_rwlock_unlock(&threads_lock);
        return;
    }
    builtin_dgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* -- loading and checking ------------------------------------------------------------------- */

/* One 64x48x32 product (plain and with both operands transposed) against a
 * double loop: catches a kernel set that the CPU cannot run correctly. */
static bool check_sgemm(void) {
    enum { M = 64, N = 48, K = 32 };
    static float a[M * K], b[K * N], at[K * M], bt[N * K], c[M * N], c2[M * N];
    uint32_t x = 12345;
    for (int i = 0; i < M * K; i++) a[i] = (float)((x = x * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < K * N; i++) b[i] = (float)((x = x * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < M; i++)
        for (int p = 0; p < K; p++) at[p * M + i] = a[i * K + p];
    for (int p = 0; p < K; p++)
        for (int j = 0; j < N; j++) bt[j * K + p] = b[p * N + j];
    for (int i = 0; i < M * N; i++) c[i] = c2[i] = NAN;   /* beta 0 must overwrite */
    tide_blas_sgemm(false, false, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
    tide_blas_sgemm(true, true, M, N, K, 1.0f, at, M, bt, K, 0.0f, c2, N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int p = 0; p < K; p++) s += (double)a[i * K + p] * b[p * N + j];
            if (!(fabs(c[i * N + j] - s) <= 1e-4) || !(fabs(c2[i * N + j] - s) <= 1e-4)) return false;
        }
    double d[4] = {1, 2, 3, 4}, e[4] = {5, 6, 7, 8}, f[4];   /* and dgemm: [[19,22],[43,50]] */
    tide_blas_dgemm(false, false, 2, 2, 2, 1.0, d, 2, e, 2, 0.0, f, 2);
    return f[0] == 19 && f[1] == 22 && f[2] == 43 && f[3] == 50;
}

static void unload(void) {
    if (blas.lib) dlclose(blas.lib);
    blas.lib = NULL;
    blas.sgemm = NULL;
    blas.dgemm = NULL;
    blas.corename = NULL;
    blas.set_threads = NULL;
}

/* Opens OpenBLAS with the given kernel set (NULL: OpenBLAS's own choice).
 * Returns 1 when it is loaded and checked, 0 when it loads but fails the
 * check, -1 when it cannot be loaded at all. */
static int try_load(const char * core) {
    if (core)
        setenv("OPENBLAS_CORETYPE", core, 1);
    else
        unsetenv("OPENBLAS_CORETYPE");
    blas.lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!blas.lib) {
        const char * err = dlerror();
        snprintf(blas.note, sizeof blas.note, "%s", err ? err : "libopenblas.so.0 not found");
        return -1;
    }
    blas.sgemm       = (sgemm_fn)dlsym(blas.lib, "cblas_sgemm");
    blas.dgemm       = (dgemm_fn)dlsym(blas.lib, "cblas_dgemm");
    blas.corename    = (corename_fn)dlsym(blas.lib, "openblas_get_corename");
    blas.set_threads = (set_threads_fn)dlsym(blas.lib, "openblas_set_num_threads");
    if (!blas.sgemm || !blas.dgemm || !blas.set_threads) {
        snprintf(blas.note, sizeof blas.note, "libopenblas.so.0 lacks cblas_sgemm, cblas_dgemm or openblas_set_num_threads");
        unload();
        return -1;
    }
    blas.set_threads(1);   /* Tide's pool runs the threads; OpenBLAS's own would compete with it */
    if (check_sgemm()) return 1;
    snprintf(blas.note, sizeof blas.note, "kernel set %s failed the check", core ? core : "(OpenBLAS's choice)");
    unload();
    return 0;
}

/* Restores an environment variable to what it was before we set it. */
static void restore_env(const char * name, const char * saved) {
    if (saved)
        setenv(name, saved, 1);
    else
        unsetenv(name);
}

tide_status tide_blas_init(void) {
    static bool done;
    if (done) return TIDE_OK;
    done = true;
    const char * force = getenv("TIDE_BLAS");
    if (force && strcmp(force, "builtin") == 0) {
        snprintf(blas.note, sizeof blas.note, "TIDE_BLAS=builtin");
    } else {
        /* OpenBLAS reads both variables while it loads; afterwards the user's
         * environment is put back as it was. */
        const char * env_core = getenv("OPENBLAS_CORETYPE"), * env_threads = getenv("OPENBLAS_NUM_THREADS");
        char * saved_core = env_core ? strdup(env_core) : NULL, * saved_threads = env_threads ? strdup(env_threads) : NULL;
        setenv("OPENBLAS_NUM_THREADS", "1", 1);   /* no idle OpenBLAS threads started at load */
        const char * first = saved_core && *saved_core ? saved_core : cpuid_coretype();
        typedef struct { const char * core, * source; } attempt;
        attempt tries[3];
        int     n = 0;
        tries[n++] = (attempt){first, saved_core && *saved_core ? "user" : first ? "cpuid" : "openblas"};
        if (first) tries[n++] = (attempt){NULL, "openblas"};
        tries[n++] = (attempt){"Prescott", "fallback"};
        for (int i = 0; i < n; i++) {
            int r = try_load(tries[i].core);
            if (r < 0) break;
            if (r > 0) {
                blas.source = tries[i].source;
                if (i == 0) blas.note[0] = 0;
                break;
            }
        }
        restore_env("OPENBLAS_NUM_THREADS", saved_threads);
        restore_env("OPENBLAS_CORETYPE", saved_core);
        free(saved_core);
        free(saved_threads);
    }
    blas.check_ok = check_sgemm();   /* whatever is in use now, OpenBLAS or built-in */
    const char * core = blas.lib ? (blas.corename ? blas.corename() : "unknown") : "builtin";
    size_t used = (size_t)snprintf(blas.describe, sizeof blas.describe,
                                   "blas=%s\nblas_core=%s\nblas_coretype_source=%s\nblas_check=%s\n"
                                   "blas_threads=1, or the pool's idle cores for a lone product\n",
                                   blas.lib ? "openblas" : "builtin", core, blas.lib ? blas.source : "none",
                                   blas.check_ok ? "ok" : "failed");
    if (blas.note[0] && used < sizeof blas.describe)
        snprintf(blas.describe + used, sizeof blas.describe - used, "blas_note=%s\n", blas.note);
    return blas.check_ok ? TIDE_OK : tide_error_set(TIDE_E_INTERNAL, "blas: the GEMM check failed");
}

const char * tide_blas_describe(void) { return blas.describe[0] ? blas.describe : "blas=none\n"; }
