/*
 * ref.c - reference measurements for the benchmarks, called from LuaJIT
 * through the FFI (libtide_bench_ref.so): plain C copy and add loops over
 * floats, jit_bench's elementwise chain as one loop, OpenBLAS's sgemm called
 * directly with its own default threads, and im2col + sgemm convolutions and a
 * 2x2 max pooling written the textbook way.
 * It knows nothing of Tide; the Lua benchmarks put the figures side by side.
 */
#include <dlfcn.h>
#include <math.h>
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

/* Seconds for `reps` passes of jit_bench's memory-bound chain over n floats, written as one
 * plain C loop (one thread): each input read once, the result written once, the ten
 * operations in registers, NaN handled as Tide's loops handle it. */
double tide_ref_chain(float * restrict dst, const float * restrict x, const float * restrict v, int64_t n,
                      int32_t reps) {
    double t0 = now();
    for (int32_t r = 0; r < reps; r++) {
        for (int64_t i = 0; i < n; i++) {
            float t = x[i], u = v[i];
            float y = t * 1.5f + u;
            y = y - 0.25f;
            y = y > 0 ? y : (y != y ? y : 0);                        /* relu */
            y = y * u - t;
            y = -fabsf(y);
            y = ((y != y) | __builtin_isgreater(y, u)) ? y : u;   /* maximum */
            dst[i] = y / 3;
        }
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

/* -- convolution and pooling: the textbook way ---------------------------------------------- */

/* col[(c*k + ki)*k + kj][oy*ow + ox] = x[c][oy - pad + ki][ox - pad + kj] (0 outside), stride 1. */
static void ref_im2col(const float * x, int c, int h, int w, int k, int pad, float * col) {
    int oh = h + 2 * pad - k + 1, ow = w + 2 * pad - k + 1;
    for (int ch = 0; ch < c; ch++)
        for (int ki = 0; ki < k; ki++)
            for (int kj = 0; kj < k; kj++, col += oh * ow)
                for (int oy = 0; oy < oh; oy++)
                    for (int ox = 0; ox < ow; ox++) {
                        int iy = oy - pad + ki, ix = ox - pad + kj;
                        col[oy * ow + ox] = iy >= 0 && iy < h && ix >= 0 && ix < w ? x[(ch * h + iy) * w + ix] : 0;
                    }
}

static void ref_col2im(const float * col, int c, int h, int w, int k, int pad, float * x) {
    int oh = h + 2 * pad - k + 1, ow = w + 2 * pad - k + 1;
    memset(x, 0, sizeof(float) * (size_t)(c * h * w));
    for (int ch = 0; ch < c; ch++)
        for (int ki = 0; ki < k; ki++)
            for (int kj = 0; kj < k; kj++, col += oh * ow)
                for (int oy = 0; oy < oh; oy++)
                    for (int ox = 0; ox < ow; ox++) {
                        int iy = oy - pad + ki, ix = ox - pad + kj;
                        if (iy >= 0 && iy < h && ix >= 0 && ix < w) x[(ch * h + iy) * w + ix] += col[oy * ow + ox];
                    }
}

/* Seconds for `reps` stride-1 convolutions of x[n,c,h,w] by w[o,c,k,k] with
 * padding pad, one image at a time: im2col, then cblas_sgemm with OpenBLAS's
 * default threads (one per core). which: 0 forward, 1 gradient of the input
 * (sgemm W^T gy, then col2im), 2 gradient of the weight (im2col, then
 * sgemm gy col^T summed over the batch). Negative: OpenBLAS or memory missing. */
double tide_ref_conv2d(int32_t n, int32_t c, int32_t h, int32_t w, int32_t o, int32_t k, int32_t pad, int32_t which,
                       int32_t reps) {
    if (!load()) return -1;
    int    oh = h + 2 * pad - k + 1, ow = w + 2 * pad - k + 1, kk = c * k * k, hw = oh * ow;
    size_t nx = (size_t)n * c * h * w, ny = (size_t)n * o * hw, nw = (size_t)o * kk, ncol = (size_t)kk * hw;
    float * x = malloc(nx * sizeof(float)), * y = malloc(ny * sizeof(float)), * wt = malloc(nw * sizeof(float));
    float * col = malloc(ncol * sizeof(float)), * gw = malloc(nw * sizeof(float));
    if (!x || !y || !wt || !col || !gw) {
        free(x); free(y); free(wt); free(col); free(gw);
        return -2;
    }
    uint32_t r = 7;
    for (size_t i = 0; i < nx; i++) x[i] = (float)((r = r * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
    for (size_t i = 0; i < ny; i++) y[i] = (float)((r = r * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
    for (size_t i = 0; i < nw; i++) wt[i] = (float)((r = r * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    ob.set_threads(cores > 0 ? (int)cores : 1);
    ob.used_threads = ob.get_threads();
    double t0 = 0;
    for (int32_t rep = -1; rep < reps; rep++) {   /* rep -1: warm-up */
        if (rep == 0) t0 = now();
        for (int32_t i = 0; i < n; i++) {
            float * xi = x + (size_t)i * c * h * w, * yi = y + (size_t)i * o * hw;
            if (which == 0) {
                ref_im2col(xi, c, h, w, k, pad, col);
                ob.sgemm(101, 111, 111, o, hw, kk, 1.0f, wt, kk, col, hw, 0.0f, yi, hw);
            } else if (which == 1) {
                ob.sgemm(101, 112, 111, kk, hw, o, 1.0f, wt, kk, yi, hw, 0.0f, col, hw);
                ref_col2im(col, c, h, w, k, pad, xi);
            } else {
                ref_im2col(xi, c, h, w, k, pad, col);
                ob.sgemm(101, 111, 112, o, kk, hw, 1.0f, yi, hw, col, hw, i == 0 ? 0.0f : 1.0f, gw, kk);
            }
        }
    }
    double t = now() - t0;
    ob.set_threads(1);
    free(x); free(y); free(wt); free(col); free(gw);
    return t;
}

/* Seconds for `reps` 2x2 stride-2 max poolings of planes x h x w floats (values
 * and int64 argmax indices), or with backward set, of their gradients
 * (scatter into zeroed planes). One thread, plain loops. */
double tide_ref_max_pool2x2(int64_t planes, int32_t h, int32_t w, int32_t backward, int32_t reps) {
    int     oh = h / 2, ow = w / 2;
    size_t  nx = (size_t)planes * h * w, ny = (size_t)planes * oh * ow;
    float * x = malloc(nx * sizeof(float)), * y = malloc(ny * sizeof(float));
    int64_t * idx = malloc(ny * sizeof(int64_t));
    if (!x || !y || !idx) {
        free(x); free(y); free(idx);
        return -2;
    }
    uint32_t r = 9;
    for (size_t i = 0; i < nx; i++) x[i] = (float)((r = r * 1103515245u + 12345u) >> 8);
    for (size_t i = 0; i < ny; i++) idx[i] = (int64_t)((i % ((size_t)oh * ow)) / ow * 2 * w + (i % ow) * 2);
    double t0 = 0;
    for (int32_t rep = -1; rep < reps; rep++) {
        if (rep == 0) t0 = now();
        for (int64_t p = 0; p < planes; p++) {
            float * xp = x + (size_t)p * h * w, * yp = y + (size_t)p * oh * ow;
            int64_t * ip = idx + (size_t)p * oh * ow;
            if (backward) {
                memset(xp, 0, sizeof(float) * (size_t)(h * w));
                for (int i = 0; i < oh * ow; i++) xp[ip[i]] += yp[i];
                continue;
            }
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    int     base = 2 * oy * w + 2 * ox;
                    int64_t bi = base;
                    float   m = xp[base];
                    if (xp[base + 1] > m) m = xp[bi = base + 1];
                    if (xp[base + w] > m) m = xp[bi = base + w];
                    if (xp[base + w + 1] > m) m = xp[bi = base + w + 1];
                    yp[oy * ow + ox] = m;
                    ip[oy * ow + ox] = bi;
                }
        }
        __asm__ volatile("" : : "r"(y), "r"(x) : "memory");
    }
    double t = now() - t0;
    free(x); free(y); free(idx);
    return t;
}

/* -- sorting and searching --------------------------------------------------------------------- */

typedef struct {
    float   k;
    int64_t i;
} ref_pair;

static int ref_pair_cmp(const void * a, const void * b) {   /* by key, then position: stable */
    const ref_pair * x = a, * y = b;
    if (x->k < y->k) return -1;
    if (x->k > y->k) return 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* Seconds to sort each of `rows` rows of n floats (no NaN) with libc's qsort
 * on (key, position) pairs, values and positions written out (one thread). */
double tide_ref_sort_rows(const float * x, float * y, int64_t * idx, int64_t rows, int64_t n) {
    ref_pair * buf = malloc(sizeof *buf * (size_t)(n ? n : 1));
    if (!buf) return -1;
    double t0 = now();
    for (int64_t r = 0; r < rows; r++) {
        const float * xr = x + r * n;
        for (int64_t i = 0; i < n; i++) buf[i].k = xr[i], buf[i].i = i;
        qsort(buf, (size_t)n, sizeof *buf, ref_pair_cmp);
        for (int64_t i = 0; i < n; i++) y[r * n + i] = buf[i].k, idx[r * n + i] = buf[i].i;
    }
    double t = now() - t0;
    free(buf);
    return t;
}

/* Seconds to find, for each of n values, the first of m sorted floats not
 * below it (a plain binary search, one thread). */
double tide_ref_search(const float * seq, int64_t m, const float * v, int64_t n, int64_t * out) {
    double t0 = now();
    for (int64_t i = 0; i < n; i++) {
        int64_t lo = 0, hi = m;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (seq[mid] < v[i]) lo = mid + 1;
            else hi = mid;
        }
        out[i] = lo;
    }
    return now() - t0;
}

/* -- LAPACK, called directly ------------------------------------------------------------------ */

typedef void (*getrf_fn)(const int *, const int *, float *, const int *, int *, int *);
typedef void (*getrs_fn)(const char *, const int *, const int *, const float *, const int *, const int *, float *,
                         const int *, int *, size_t);
typedef void (*potrf_fn)(const char *, const int *, float *, const int *, int *, size_t);
typedef void (*syevd_fn)(const char *, const char *, const int *, float *, const int *, float *, float *, const int *,
                         int *, const int *, int *, size_t, size_t);
typedef void (*gesdd_fn)(const char *, const int *, const int *, float *, const int *, float *, float *, const int *,
                         float *, const int *, float *, const int *, int *, int *, size_t);

/* Seconds for one pass over `batch` n x n float matrices of: 0 solve with one right-hand
 * side (sgetrf + sgetrs), 1 the inverse (sgetrf + sgetrs on the identity), 2 Cholesky
 * (spotrf), 3 symmetric eigenvectors (ssyevd), 4 SVD with U and V (sgesdd), each matrix
 * column-major and fresh (copied in untimed), one matrix after the other with OpenBLAS
 * on `threads` threads; the best of `reps` passes. Negative: LAPACK not available. */
double tide_ref_lapack(int32_t which, int32_t n, int32_t batch, int32_t threads, int32_t reps) {
    if (!load()) return -1;
    getrf_fn getrf = (getrf_fn)dlsym(ob.lib, "sgetrf_");
    getrs_fn getrs = (getrs_fn)dlsym(ob.lib, "sgetrs_");
    potrf_fn potrf = (potrf_fn)dlsym(ob.lib, "spotrf_");
    syevd_fn syevd = (syevd_fn)dlsym(ob.lib, "ssyevd_");
    gesdd_fn gesdd = (gesdd_fn)dlsym(ob.lib, "sgesdd_");
    if (!getrf || !getrs || !potrf || !syevd || !gesdd) return -1;
    size_t nn = (size_t)n * (size_t)n, total = nn * (size_t)batch;
    float * src = malloc(total * sizeof(float)), * a = malloc(total * sizeof(float));
    float * b = malloc(nn * sizeof(float)), * w = malloc(nn * sizeof(float)), * u = malloc(nn * sizeof(float));
    float * vt = malloc(nn * sizeof(float));
    int *   piv = malloc((size_t)n * 8 * sizeof(int));
    int     lwork = -1, liwork = -1, info = 0;
    float   q;
    int     iq;
    if (which == 3) syevd("V", "L", &n, NULL, &n, NULL, &q, &lwork, &iq, &liwork, &info, 1, 1);
    if (which == 4) gesdd("A", &n, &n, NULL, &n, NULL, NULL, &n, NULL, &n, &q, &lwork, piv, &info, 1);
    lwork  = which >= 3 ? (int)q + 1 : 1;
    liwork = which == 3 ? iq : 1;
    float * work = malloc((size_t)lwork * sizeof(float));
    int *   iwork = malloc((size_t)(liwork > 8 * n ? liwork : 8 * n) * sizeof(int));
    if (!src || !a || !b || !w || !u || !vt || !piv || !work || !iwork) return -2;
    uint32_t x = 7;
    for (int32_t m = 0; m < batch; m++) {   /* symmetric, diagonally dominant: every routine succeeds */
        float * s = src + (size_t)m * nn;
        for (int32_t i = 0; i < n; i++)
            for (int32_t j = 0; j <= i; j++) {
                float v = (float)((x = x * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
                s[i + (size_t)j * n] = s[j + (size_t)i * n] = i == j ? v + (float)n : v;
            }
    }
    ob.set_threads(threads);
    double best = 1e30;
    for (int32_t r = 0; r < reps; r++) {
        memcpy(a, src, total * sizeof(float));
        double t0 = now();
        for (int32_t m = 0; m < batch; m++) {
            float * am = a + (size_t)m * nn;
            switch (which) {
            case 0:
            case 1: {
                int k = which == 0 ? 1 : n;
                memset(b, 0, nn * sizeof(float));
                for (int32_t i = 0; i < n; i++) b[which == 0 ? (size_t)i : (size_t)i * ((size_t)n + 1)] = 1;   /* ones, or I */
                getrf(&n, &n, am, &n, piv, &info);
                getrs("N", &n, &k, am, &n, piv, b, &n, &info, 1);
                break;
            }
            case 2: potrf("L", &n, am, &n, &info, 1); break;
            case 3: syevd("V", "L", &n, am, &n, w, work, &lwork, iwork, &liwork, &info, 1, 1); break;
            default: gesdd("A", &n, &n, am, &n, w, u, &n, vt, &n, work, &lwork, iwork, &info, 1); break;
            }
        }
        double t = now() - t0;
        if (t < best) best = t;
    }
    ob.set_threads(1);
    free(src), free(a), free(b), free(w), free(u), free(vt), free(piv), free(work), free(iwork);
    return best;
}
