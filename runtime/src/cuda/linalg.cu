/*
 * linalg.cu - the matrix decompositions and solvers on CUDA (linalg_solve,
 * linalg_solve_triangular, linalg_det, linalg_slogdet, linalg_cholesky, linalg_eigh,
 * linalg_qr, linalg_svd), giving the CPU's results (ops/cpu/lapack.c): its
 * sign rules, zeroed triangles and empty cases. Each matrix is copied,
 * converted to the compute dtype, into a column-major work buffer on the
 * call's scratch memory, factored there by cuSOLVER's dense routines (the
 * triangular solve by cuBLAS's trsm), one call per matrix of a batch, and
 * small kernels write the results through the outputs' strides and dtypes.
 * Where the CPU factors a row-major A as its transpose (rows_contiguous), so
 * does this file, so that pivots, and the info of a failure, are the CPU's.
 *
 * cuSOLVER is opened on first use, not linked, so that this library loads
 * and runs where it is missing. A factorisation's failure (its info > 0) is
 * known only on the device: a kernel puts the first failing batch element in
 * the call's report, which libtide raises with the CPU's message
 * (tide_linalg_error). Shape rules are libtide's.
 */
#include "common.cuh"

#include <cublas_v2.h>
#include <cusolverDn.h>   /* its types only: libcusolver is opened at run time */
#include <dlfcn.h>
#include <pthread.h>

#include <limits.h>
#include <math.h>
#include <mutex>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

namespace tide_cuda {
namespace {

/* -- cuSOLVER, opened on first need ------------------------------------------------------------ */

/* The routines used, for one compute type T (float: cusolverDnS*, double: cusolverDnD*). */
template <typename T> struct Routines {
    cusolverStatus_t (*getrf_size)(cusolverDnHandle_t, int, int, T *, int, int *);
    cusolverStatus_t (*getrf)(cusolverDnHandle_t, int, int, T *, int, T *, int *, int *);
    cusolverStatus_t (*getrs)(cusolverDnHandle_t, cublasOperation_t, int, int, const T *, int, const int *, T *, int,
                              int *);
    cusolverStatus_t (*potrf_size)(cusolverDnHandle_t, cublasFillMode_t, int, T *, int, int *);
    cusolverStatus_t (*potrf)(cusolverDnHandle_t, cublasFillMode_t, int, T *, int, T *, int, int *);
    cusolverStatus_t (*syevd_size)(cusolverDnHandle_t, cusolverEigMode_t, cublasFillMode_t, int, const T *, int,
                                   const T *, int *);
    cusolverStatus_t (*syevd)(cusolverDnHandle_t, cusolverEigMode_t, cublasFillMode_t, int, T *, int, T *, T *, int,
                              int *);
    cusolverStatus_t (*geqrf_size)(cusolverDnHandle_t, int, int, T *, int, int *);
    cusolverStatus_t (*geqrf)(cusolverDnHandle_t, int, int, T *, int, T *, T *, int, int *);
    cusolverStatus_t (*orgqr_size)(cusolverDnHandle_t, int, int, int, const T *, int, const T *, int *);
    cusolverStatus_t (*orgqr)(cusolverDnHandle_t, int, int, int, T *, int, const T *, T *, int, int *);
    cusolverStatus_t (*gesvd_size)(cusolverDnHandle_t, int, int, int *);
    cusolverStatus_t (*gesvd)(cusolverDnHandle_t, signed char, signed char, int, int, T *, int, T *, T *, int, T *,
                              int, T *, int, T *, int *);
};

/* The pointers above, typed by hand for both types, are checked against the
 * header's declarations: a wrong one would not fail at dlsym. */
#define TIDE_SAME_AS(member, fn)                                                                                      \
    static_assert(std::is_same_v<decltype(Routines<float>::member), decltype(&cusolverDnS##fn)> &&                    \
                      std::is_same_v<decltype(Routines<double>::member), decltype(&cusolverDnD##fn)>,                 \
                  "Routines::" #member " is not cusolverDn?" #fn)
TIDE_SAME_AS(getrf_size, getrf_bufferSize);
TIDE_SAME_AS(getrf, getrf);
TIDE_SAME_AS(getrs, getrs);
TIDE_SAME_AS(potrf_size, potrf_bufferSize);
TIDE_SAME_AS(potrf, potrf);
TIDE_SAME_AS(syevd_size, syevd_bufferSize);
TIDE_SAME_AS(syevd, syevd);
TIDE_SAME_AS(geqrf_size, geqrf_bufferSize);
TIDE_SAME_AS(geqrf, geqrf);
TIDE_SAME_AS(orgqr_size, orgqr_bufferSize);
TIDE_SAME_AS(orgqr, orgqr);
TIDE_SAME_AS(gesvd_size, gesvd_bufferSize);
TIDE_SAME_AS(gesvd, gesvd);
#undef TIDE_SAME_AS

struct Cusolver {
    decltype(&cusolverDnCreate)    create;
    decltype(&cusolverDnSetStream) set_stream;
    Routines<float>                s;
    Routines<double>               d;
};

/* Kept for the process once opened: its routines may be running. */
pthread_once_t cusolver_once = PTHREAD_ONCE_INIT;
Cusolver       cusolver;
bool           cusolver_loaded;
char           cusolver_why[1024];   /* why it is not there, once tried */

template <typename T> const Routines<T> & routines() {
    if constexpr (std::is_same_v<T, float>) return cusolver.s;
    else return cusolver.d;
}

/* The letter of T in LAPACK's names. */
template <typename T> constexpr char letter() { return std::is_same_v<T, float> ? 'S' : 'D'; }

template <typename F> bool resolve(void * lib, F & fn, const char * symbol) {
    fn = (F)dlsym(lib, symbol);
    if (!fn) snprintf(cusolver_why, sizeof cusolver_why, "libcusolver has no %s", symbol);
    return fn != nullptr;
}

template <typename T> bool resolve_routines(void * lib, Routines<T> & r) {
    const char t = letter<T>();
    char       name[64];
    auto       get = [&](auto & fn, const char * what) {
        snprintf(name, sizeof name, "cusolverDn%c%s", t, what);
        return resolve(lib, fn, name);
    };
    return get(r.getrf_size, "getrf_bufferSize") && get(r.getrf, "getrf") && get(r.getrs, "getrs") &&
           get(r.potrf_size, "potrf_bufferSize") && get(r.potrf, "potrf") &&
           get(r.syevd_size, "syevd_bufferSize") && get(r.syevd, "syevd") &&
           get(r.geqrf_size, "geqrf_bufferSize") && get(r.geqrf, "geqrf") &&
           get(r.orgqr_size, "orgqr_bufferSize") && get(r.orgqr, "orgqr") &&
           get(r.gesvd_size, "gesvd_bufferSize") && get(r.gesvd, "gesvd");
}

/* The major version this library was built with first: the legacy dense API
 * it calls is the same in every version since. */
void * open_cusolver() {
    return open_toolkit_library("libcusolver", CUSOLVER_VER_MAJOR, cusolver_why, sizeof cusolver_why);
}

void load_cusolver() {
    void * lib = open_cusolver();
    if (!lib) return;
    Cusolver a;
    bool ok = resolve(lib, a.create, "cusolverDnCreate") && resolve(lib, a.set_stream, "cusolverDnSetStream") &&
              resolve_routines(lib, a.s) && resolve_routines(lib, a.d);
    if (!ok) {
        dlclose(lib);   /* nothing of it was used */
        return;
    }
    cusolver        = a;
    cusolver_loaded = true;
}

const char * status_name(cusolverStatus_t st) {
    switch (st) {
    case CUSOLVER_STATUS_NOT_INITIALIZED:           return "CUSOLVER_STATUS_NOT_INITIALIZED";
    case CUSOLVER_STATUS_ALLOC_FAILED:              return "CUSOLVER_STATUS_ALLOC_FAILED";
    case CUSOLVER_STATUS_INVALID_VALUE:             return "CUSOLVER_STATUS_INVALID_VALUE";
    case CUSOLVER_STATUS_ARCH_MISMATCH:             return "CUSOLVER_STATUS_ARCH_MISMATCH";
    case CUSOLVER_STATUS_EXECUTION_FAILED:          return "CUSOLVER_STATUS_EXECUTION_FAILED";
    case CUSOLVER_STATUS_INTERNAL_ERROR:            return "CUSOLVER_STATUS_INTERNAL_ERROR";
    case CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED: return "CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED";
    case CUSOLVER_STATUS_NOT_SUPPORTED:             return "CUSOLVER_STATUS_NOT_SUPPORTED";
    case CUSOLVER_STATUS_INVALID_WORKSPACE:         return "CUSOLVER_STATUS_INVALID_WORKSPACE";
    default:                                        return "an unknown cusolverStatus_t";
    }
}

/* The error of cuSOLVER routine `fn` (its name with %c for T's letter). */
template <typename T> int dn_fail(const tide_devcall * c, const char * fn, cusolverStatus_t st) {
    char name[64];
    snprintf(name, sizeof name, fn, letter<T>());
    return set_error(st == CUSOLVER_STATUS_ALLOC_FAILED ? TIDE_DEVAPI_OOM : TIDE_DEVAPI_ERROR, "%s: %s failed: %s (%d)",
                     c->op, name, status_name(st), (int)st);
}

/* One cuSOLVER handle per device, made on first use and kept for the process
 * (as blas.cu's cuBLAS handles, and for the same reasons); the lock keeps
 * the stream a call sets until its last routine is queued. */
enum { MAX_DEVICES = 64 };
struct DnSlot {
    std::mutex         mu;
    cusolverDnHandle_t h = nullptr;
};
DnSlot dn_slots[MAX_DEVICES];

/* The handle of one call, its device's lock held from dn_handle() until this
 * goes out of scope (no std::unique_lock: its out-of-line members would be
 * exported from this library, which exports one symbol; exports.sh). */
struct Dn {
    cusolverDnHandle_t h    = nullptr;
    std::mutex *       held = nullptr;
    Dn()                    = default;
    Dn(const Dn &)          = delete;
    Dn & operator=(const Dn &) = delete;
    ~Dn() {
        if (held) held->unlock();
    }
};

/* Opens cuSOLVER if need be and takes c's device's handle, set to c's stream. */
int dn_handle(const tide_devcall * c, Dn & dn) {
    pthread_once(&cusolver_once, load_cusolver);
    if (!cusolver_loaded)
        return set_error(TIDE_DEVAPI_ERROR, "%s: cuSOLVER could not be loaded: %s", c->op, cusolver_why);
    if (c->dev < 0 || c->dev >= MAX_DEVICES)
        return set_error(TIDE_DEVAPI_ERROR, "%s: cuSOLVER handles are kept for devices 0 to %d, not %d", c->op,
                         MAX_DEVICES - 1, c->dev);
    DnSlot & slot = dn_slots[c->dev];
    slot.mu.lock();
    dn.held = &slot.mu;
    cusolverStatus_t st;
    if (!slot.h && (st = cusolver.create(&slot.h)) != CUSOLVER_STATUS_SUCCESS) {
        slot.h = nullptr;   /* tried again by the next call */
        return set_error(st == CUSOLVER_STATUS_ALLOC_FAILED ? TIDE_DEVAPI_OOM : TIDE_DEVAPI_ERROR,
                         "%s: cusolverDnCreate failed: %s (%d)", c->op, status_name(st), (int)st);
    }
    if ((st = cusolver.set_stream(slot.h, (cudaStream_t)c->stream)) != CUSOLVER_STATUS_SUCCESS)
        return set_error(TIDE_DEVAPI_ERROR, "%s: cusolverDnSetStream failed: %s (%d)", c->op, status_name(st), (int)st);
    dn.h = slot.h;
    return TIDE_DEVAPI_OK;
}

/* -- batches of matrices ---------------------------------------------------------------------- */

/* The leading dims of t before its `tail` matrix (or vector) dims: its batch. */
Shape batch_of(const tide_devtensor & t, int32_t tail) {
    Shape s = {};
    s.ndim  = t.ndim - tail;
    s.nelem = 1;
    for (int32_t d = 0; d < TIDE_MAX_DIMS; d++) s.sizes[d] = d < s.ndim ? t.sizes[d] : 1;
    for (int32_t d = 0; d < s.ndim; d++) s.nelem *= t.sizes[d];
    return s;
}

/* t's batch dims (those before its `tail` dims) over `batch`, into which they
 * broadcast (right-aligned): offsets_of gives the element where matrix b starts. */
Operand batch_operand(const tide_devtensor & t, int32_t tail, const Shape & batch) {
    Operand o = {};
    o.data    = t.data;
    o.dtype   = t.dtype;
    int32_t n = t.ndim - tail, lead = batch.ndim - n;
    for (int32_t d = 0; d < n; d++) o.strides[lead + d] = t.sizes[d] == 1 ? 0 : t.strides[d];
    return o;
}

/* As batch_operand, but counting t's matrices as if packed in row-major order:
 * offsets_of gives the index of batch element b's matrix among t's own. */
Operand packed_operand(const tide_devtensor & t, int32_t tail, const Shape & batch) {
    Operand o = {};
    int32_t n = t.ndim - tail, lead = batch.ndim - n;
    int64_t step = 1;
    for (int32_t d = n - 1; d >= 0; d--) {
        o.strides[lead + d] = t.sizes[d] == 1 ? 0 : step;
        step *= t.sizes[d];
    }
    return o;
}

/* offsets_of on the host: operand o's offset at row-major element i of s. */
int64_t host_offset(const Shape & s, const Operand & o, int64_t i) {
    int64_t off = 0;
    for (int32_t d = s.ndim - 1; d >= 0; d--) {
        off += (i % s.sizes[d]) * o.strides[d];
        i /= s.sizes[d];
    }
    return off;
}

/* A batch of rows x cols matrices to read: matrix b starts at offsets_of(batch, o, b). */
struct Src {
    Operand o;
    int64_t rows, cols, rs, cs;
};

/* t's matrices over `batch`; transposed: read as their transposes. */
Src src_of(const tide_devtensor & t, const Shape & batch, bool transposed = false) {
    Src s;
    s.o    = batch_operand(t, 2, batch);
    s.rows = t.sizes[t.ndim - 2];
    s.cols = t.sizes[t.ndim - 1];
    s.rs   = t.strides[t.ndim - 2];
    s.cs   = t.strides[t.ndim - 1];
    if (transposed) {
        int64_t r = s.rows, rs = s.rs;
        s.rows = s.cols, s.rs = s.cs;
        s.cols = r, s.cs = rs;
    }
    return s;
}

/* Whether lapack.c factors t's matrices as their transposes: their rows are
 * contiguous, and the column-major copy of A^T is then a copy of rows. */
bool rows_contiguous(const tide_devtensor & t) {
    return t.sizes[t.ndim - 2] > 1 && t.strides[t.ndim - 1] == 1 && t.strides[t.ndim - 2] != 1;
}

/* dst: batch.nelem matrices of src.rows x dcols (dcols >= src.cols), column-major
 * and packed, converted to T; columns past src.cols are the identity's. */
template <typename T>
__global__ void __launch_bounds__(THREADS) pack_kernel(Shape batch, Src src, int64_t dcols, T * dst, int64_t n) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += step) {
        int64_t i = x % src.rows, q = x / src.rows, j = q % dcols, b = q / dcols;
        T       v = i == j ? (T)1 : (T)0;
        if (j < src.cols) {
            int64_t off;
            offsets_of<1, uint64_t>(batch, &src.o, (uint64_t)b, &off);
            v = load_as<T>(src.o.data, src.o.dtype, off + i * src.rs + j * src.cs);
        }
        dst[x] = v;
    }
}

template <typename T> void pack(const tide_devcall * c, const Shape & batch, const Src & src, int64_t dcols, T * dst) {
    int64_t n = batch.nelem * src.rows * dcols;
    if (n == 0) return;
    pack_kernel<T><<<blocks_for(n), THREADS, 0, (cudaStream_t)c->stream>>>(batch, src, dcols, dst, n);
}

/* A batch of matrices in a work buffer: element (i, j) of matrix b at p[b*bs + i*rs + j*cs]. */
template <typename T> struct Work {
    const T * p;
    int64_t   bs, rs, cs;
};

/* Column-major and packed, ld rows. */
template <typename T> Work<T> colmajor(const T * p, int64_t rows, int64_t cols) {
    return Work<T>{p, rows * cols, 1, rows};
}

/* A vector of n per batch element, as n x 1 matrices. */
template <typename T> Work<T> vectors(const T * p, int64_t n) { return Work<T>{p, n, 1, 0}; }

enum { TRI_NONE = 0, TRI_LOWER = 1, TRI_UPPER = 2 };

/* One output as rows x cols matrices (a vector output: cols 1; one number per batch element: 1 x 1). */
struct Dst {
    Shape   s;
    Operand o;
    int64_t rows, cols;
};

Dst dst_of(const tide_devtensor & t, int64_t rows, int64_t cols) {
    Dst d;
    d.s    = shape_of(t);
    d.o    = operand(t, d.s);
    d.rows = rows;
    d.cols = cols;
    return d;
}

/* out = the work's matrices, in out's dtype and strides; `tri` zeroes the
 * triangle above (LOWER) or below (UPPER) the diagonal; with sgn, each column
 * (by_row: row) k of batch element b is multiplied by sgn[b*ss + k]. */
template <typename T>
__global__ void __launch_bounds__(THREADS)
unpack_kernel(Dst d, Work<T> w, int32_t tri, const T * sgn, int64_t ss, bool by_row) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < d.s.nelem; x += step) {
        int64_t j = x % d.cols, q = x / d.cols, i = q % d.rows, b = q / d.rows;
        bool    zero = (tri == TRI_LOWER && j > i) || (tri == TRI_UPPER && i > j);
        T       v    = zero ? (T)0 : w.p[b * w.bs + i * w.rs + j * w.cs];
        if (sgn) v *= sgn[b * ss + (by_row ? i : j)];
        int64_t off;
        offsets_of<1, uint64_t>(d.s, &d.o, (uint64_t)x, &off);
        store_as<T>((void *)d.o.data, d.o.dtype, off, v);
    }
}

template <typename T>
void unpack(const tide_devcall * c, const Dst & d, const Work<T> & w, int32_t tri = TRI_NONE, const T * sgn = nullptr,
            int64_t ss = 0, bool by_row = false) {
    if (d.s.nelem == 0) return;
    unpack_kernel<T><<<blocks_for(d.s.nelem), THREADS, 0, (cudaStream_t)c->stream>>>(d, w, tri, sgn, ss, by_row);
}

/* The sign rule of eigenvectors and singular vectors: sgn[b*ncols + j] is -1
 * where column j of the work's rows x ncols matrix b has its first element of
 * largest magnitude negative, else 1; for j < j0 it is from[b*fs + j] instead
 * (Vh's rows take the sign of U's matching columns). */
template <typename T>
__global__ void __launch_bounds__(THREADS) sign_kernel(Work<T> w, int64_t rows, int64_t ncols, int64_t j0,
                                                       const T * from, int64_t fs, T * sgn, int64_t n) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += step) {
        int64_t b = x / ncols, j = x % ncols;
        if (j < j0) {
            sgn[x] = from[b * fs + j];
            continue;
        }
        T best = 0, at = 0;
        for (int64_t i = 0; i < rows; i++) {
            T v = w.p[b * w.bs + i * w.rs + j * w.cs], a = v < 0 ? -v : v;
            if (a > best) best = a, at = v;   /* strictly: the first of equal magnitudes stays */
        }
        sgn[x] = at < 0 ? (T)-1 : (T)1;
    }
}

template <typename T>
void signs(const tide_devcall * c, const Work<T> & w, int64_t rows, int64_t ncols, int64_t nbatch, T * sgn,
           int64_t j0 = 0, const T * from = nullptr, int64_t fs = 0) {
    int64_t n = nbatch * ncols;
    if (n == 0) return;
    sign_kernel<T><<<blocks_for(n), THREADS, 0, (cudaStream_t)c->stream>>>(w, rows, ncols, j0, from, fs, sgn, n);
}

/* -- failures: the report ------------------------------------------------------------------------- */

/* The first batch element b (row-major over s) whose info, at index
 * offsets_of(s, map, b) of `info`, is positive: the report names it, its info
 * and `width`; NONE when there is none. One block. */
__global__ void __launch_bounds__(THREADS)
report_kernel(const int * info, Shape s, Operand map, int64_t width, tide_devreport * r) {
    __shared__ int64_t first[THREADS];
    int64_t            mine = INT64_MAX;
    for (int64_t b = threadIdx.x; b < s.nelem; b += THREADS) {
        int64_t at;
        offsets_of<1, uint64_t>(s, &map, (uint64_t)b, &at);
        if (info[at] > 0) {
            mine = b;   /* this thread's later elements come after b */
            break;
        }
    }
    first[threadIdx.x] = mine;
    __syncthreads();
    for (int k = THREADS / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k && first[threadIdx.x + k] < first[threadIdx.x])
            first[threadIdx.x] = first[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        tide_devreport rep = {};
        rep.code           = TIDE_DEVREPORT_NONE;
        if (first[0] != INT64_MAX) {
            int64_t at;
            offsets_of<1, uint64_t>(s, &map, (uint64_t)first[0], &at);
            rep.code  = TIDE_DEVREPORT_LINALG;
            rep.value = info[at];
            rep.bound = first[0];
            rep.width = width;
        }
        *r = rep;
    }
}

/* Fills c's report from the infos of the factorisations of the output's
 * batch s (no dims: the message names no batch element), through `dev`,
 * device memory for the report on its way to the host. */
int report(const tide_devcall * c, const int * info, const Shape & s, const Operand & map, tide_devreport * dev) {
    tide_devreport * host = c->report(c->scratch_ctx);
    if (!host) return TIDE_DEVAPI_OOM;
    cudaStream_t st = (cudaStream_t)c->stream;
    report_kernel<<<1, THREADS, 0, st>>>(info, s, map, s.ndim > 0 ? s.nelem : 0, dev);
    if (int rc = launched(c)) return rc;
    return checked(c, cudaMemcpyAsync(host, dev, sizeof *dev, cudaMemcpyDefault, st), "copying the report");
}

/* The identity map of a batch: element b's info is info[b]. */
Operand dense_map(const Shape & s) {
    Operand o    = {};
    int64_t step = 1;
    for (int32_t d = s.ndim - 1; d >= 0; d--) {
        o.strides[d] = step;
        step *= s.sizes[d];
    }
    return o;
}

/* -- scratch ------------------------------------------------------------------------------------ */

/* One scratch block carved into parts, each 256-byte aligned: take() each part's
 * size, then get() the block, then at() each part's address. */
struct Carve {
    size_t total = 0;
    char * base  = nullptr;
    size_t take(size_t nbytes) {
        size_t at = total;
        total += align256(nbytes ? nbytes : 1);
        return at;
    }
    bool get(const tide_devcall * c) { return (base = (char *)c->scratch(c->scratch_ctx, total)) != nullptr; }
    template <typename P> P * at(size_t off) const { return (P *)(base + off); }
};

/* The workspace of lwork elements of T that a sizing call gave. */
template <typename T> T * workspace(const tide_devcall * c, int lwork) {
    return (T *)c->scratch(c->scratch_ctx, (size_t)(lwork > 0 ? lwork : 1) * sizeof(T));
}

/* cuSOLVER's sizes are ints. */
int check_int(const tide_devcall * c, int64_t m, int64_t n) {
    if (m <= INT_MAX && n <= INT_MAX && m * n <= INT_MAX) return TIDE_DEVAPI_OK;
    return set_error(TIDE_DEVAPI_ERROR, "%s: a %lldx%lld matrix is beyond cuSOLVER's 32-bit sizes", c->op, (long long)m,
                     (long long)n);
}

/* -- linalg_solve, linalg_solve_triangular --------------------------------------------------------- */

/* A's distinct matrices are packed (and factored) once, not once per batch
 * element of the result that broadcasts them; B's are packed per element of
 * the result, which the solve overwrites. */
struct SolvePlan {
    Shape   ob, ab;   /* the result's batch, A's own */
    Operand amap;     /* element b of ob -> A's matrix */
    int64_t n, k;
    bool    trans;    /* A is packed as A^T (rows_contiguous) */
};

SolvePlan solve_plan(const tide_devcall * c) {
    const tide_devtensor & a = c->in[0], & b = c->in[1], & x = c->out[0];
    SolvePlan p;
    p.ob   = batch_of(x, 2);
    p.ab   = batch_of(a, 2);
    p.amap = packed_operand(a, 2, p.ob);
    p.n    = a.sizes[a.ndim - 1];
    p.k     = b.sizes[b.ndim - 1];
    p.trans = rows_contiguous(a);
    return p;
}

/* A matrix holding NaN: cuSOLVER's getrf may pivot around it (a solve of
 * [[1, NaN], [NaN, 2]] gave 1 on an H100), where LAPACK's gives NaN. flag[b]:
 * matrix b (nn elements) holds a NaN; its info is cleared so no report calls it
 * singular, and its solutions are NaN (nan_fill_batch), as on the CPU. */
template <typename T> __global__ void nan_scan_kernel(const T * a, int * flag, int64_t nb, int64_t nn) {
    for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < nb; b += (int64_t)gridDim.x * blockDim.x) {
        int f = 0;
        for (int64_t i = 0; i < nn && !f; i++) f = isnan(a[b * nn + i]);
        flag[b] = f;
    }
}
__global__ void nan_info_kernel(const int * flag, int * info, int64_t nb) {
    for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < nb; b += (int64_t)gridDim.x * blockDim.x)
        if (flag[b]) info[b] = 0;
}
/* nan_scan_kernel over the triangle of each n x n column-major matrix that
 * syevd reads (upper: i <= j), as LAPACK reads no other. */
template <typename T>
__global__ void nan_scan_tri_kernel(const T * a, int * flag, int64_t nb, int64_t n, bool upper) {
    for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < nb; b += (int64_t)gridDim.x * blockDim.x) {
        int f = 0;
        for (int64_t j = 0; j < n && !f; j++)
            for (int64_t i = upper ? 0 : j; i < (upper ? j + 1 : n) && !f; i++) f = isnan(a[b * n * n + j * n + i]);
        flag[b] = f;
    }
}
/* x: nb blocks of `per` elements; block b's all NaN where flag[b]. */
template <typename T> __global__ void nan_fill_batch_kernel(const int * flag, T * x, int64_t nb, int64_t per) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nb * per; i += (int64_t)gridDim.x * blockDim.x)
        if (flag[i / per]) x[i] = (T)NAN;
}
template <typename T> void nan_fill_batch(const tide_devcall * c, const int * flag, T * x, int64_t nb, int64_t per) {
    if (nb * per > 0)
        nan_fill_batch_kernel<T><<<blocks_for(nb * per), THREADS, 0, (cudaStream_t)c->stream>>>(flag, x, nb, per);
}

/* Where A was factored as A^T (p.trans), a failure names A^T's zero pivot;
 * LAPACK's, and the CPU's, is A's own. A matrix whose info says it failed is
 * read again from A as itself and factored here (unblocked, partial pivoting,
 * the first of equal magnitudes as i?amax) as far as its first zero pivot,
 * which its info then names. A block per matrix; only failed ones work, and
 * their factors, in a, are not used (the op fails). */
template <typename T>
__global__ void __launch_bounds__(THREADS) own_pivot_kernel(Shape batch, Src src, T * a, int * info, int64_t n) {
    __shared__ T       best[THREADS];
    __shared__ int64_t at[THREADS];
    const int          t = threadIdx.x;
    for (int64_t b = blockIdx.x; b < batch.nelem; b += gridDim.x) {
        if (info[b] <= 0) continue;   /* the same for the whole block */
        T *     m = a + b * n * n;    /* column-major: (i, j) at m[i + j * n] */
        int64_t off;
        offsets_of<1, uint64_t>(batch, &src.o, (uint64_t)b, &off);
        for (int64_t x = t; x < n * n; x += blockDim.x)
            m[x] = load_as<T>(src.o.data, src.o.dtype, off + (x % n) * src.rs + (x / n) * src.cs);
        __syncthreads();
        for (int64_t j = 0; j < n; j++) {
            T       bv = -1;
            int64_t bi = -1;
            for (int64_t i = j + t; i < n; i += blockDim.x) {
                T v = m[i + j * n] < 0 ? -m[i + j * n] : m[i + j * n];
                if (v > bv) bv = v, bi = i;
            }
            best[t] = bv, at[t] = bi;
            __syncthreads();
            for (int h = blockDim.x / 2; h > 0; h >>= 1) {
                if (t < h && at[t + h] >= 0 &&
                    (best[t + h] > best[t] || (best[t + h] == best[t] && (at[t] < 0 || at[t + h] < at[t]))))
                    best[t] = best[t + h], at[t] = at[t + h];
                __syncthreads();
            }
            int64_t pr = at[0];
            T       pv = pr >= 0 ? m[pr + j * n] : (T)0;
            __syncthreads();
            if (pv == 0) {
                if (t == 0) info[b] = (int)(j + 1);
                break;
            }
            for (int64_t q = t; q < n && pr != j; q += blockDim.x) {
                T r = m[j + q * n];
                m[j + q * n] = m[pr + q * n], m[pr + q * n] = r;
            }
            __syncthreads();
            for (int64_t i = j + 1 + t; i < n; i += blockDim.x) m[i + j * n] /= pv;
            __syncthreads();
            int64_t r = n - j - 1;
            for (int64_t x = t; x < r * r; x += blockDim.x) {
                int64_t i = j + 1 + x % r, q = j + 1 + x / r;
                m[i + q * n] -= m[i + j * n] * m[j + q * n];
            }
            __syncthreads();
        }
    }
}

/* As the CPU's, a singular A is an error even where B has no columns. */
template <typename T> int solve(const tide_devcall * c) {
    SolvePlan p = solve_plan(c);
    int64_t   n = p.n, k = p.k;
    if (int rc = check_int(c, n, n > k ? n : k)) return rc;
    Carve  cv;
    size_t a_at    = cv.take((size_t)(p.ab.nelem * n * n) * sizeof(T)),
           b_at    = cv.take((size_t)(p.ob.nelem * n * k) * sizeof(T)),
           piv_at  = cv.take((size_t)(p.ab.nelem * n) * sizeof(int)),
           info_at = cv.take((size_t)p.ab.nelem * sizeof(int)), rs_at = cv.take(sizeof(int)),
           rep_at  = cv.take(sizeof(tide_devreport)), flag_at = cv.take((size_t)p.ab.nelem * sizeof(int));
    if (!cv.get(c)) return TIDE_DEVAPI_OOM;
    T *   aw = cv.at<T>(a_at), * bw = cv.at<T>(b_at);
    int * piv = cv.at<int>(piv_at), * info = cv.at<int>(info_at), * flag = cv.at<int>(flag_at);
    cudaStream_t stream = (cudaStream_t)c->stream;
    pack(c, p.ab, src_of(c->in[0], p.ab, p.trans), n, aw);
    pack(c, p.ob, src_of(c->in[1], p.ob), k, bw);
    if (p.ab.nelem > 0) nan_scan_kernel<T><<<blocks_for(p.ab.nelem), THREADS, 0, stream>>>(aw, flag, p.ab.nelem, n * n);
    if (int rc = launched(c)) return rc;

    const Routines<T> & r = routines<T>();
    Dn                  dn;
    if (int rc = dn_handle(c, dn)) return rc;
    int              lwork = 0;
    cusolverStatus_t st    = r.getrf_size(dn.h, (int)n, (int)n, aw, (int)n, &lwork);
    if (st != CUSOLVER_STATUS_SUCCESS) return dn_fail<T>(c, "cusolverDn%cgetrf_bufferSize", st);
    T * work = workspace<T>(c, lwork);
    if (!work) return TIDE_DEVAPI_OOM;
    for (int64_t i = 0; i < p.ab.nelem; i++) {
        st = r.getrf(dn.h, (int)n, (int)n, aw + i * n * n, (int)n, work, piv + i * n, info + i);
        if (st != CUSOLVER_STATUS_SUCCESS) return dn_fail<T>(c, "cusolverDn%cgetrf", st);
    }
    if (p.ab.nelem > 0) nan_info_kernel<<<blocks_for(p.ab.nelem), THREADS, 0, stream>>>(flag, info, p.ab.nelem);
    /* the LU of A^T solves A X = B transposed; getrs's info only flags a bad
     * argument, which the calls above rule out */
    cublasOperation_t op = p.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    for (int64_t b = 0; k > 0 && b < p.ob.nelem; b++) {
        int64_t i = host_offset(p.ob, p.amap, b);
        st = r.getrs(dn.h, op, (int)n, (int)k, aw + i * n * n, (int)n, piv + i * n, bw + b * n * k, (int)n,
                     cv.at<int>(rs_at));
        if (st != CUSOLVER_STATUS_SUCCESS) return dn_fail<T>(c, "cusolverDn%cgetrs", st);
        nan_fill_batch<T>(c, flag + i, bw + b * n * k, 1, n * k);   /* B's matrix b, of A's matrix i */
    }
    if (p.trans && p.ab.nelem > 0)
        own_pivot_kernel<T><<<(unsigned)(p.ab.nelem < 1024 ? p.ab.nelem : 1024), THREADS, 0, stream>>>(
            p.ab, src_of(c->in[0], p.ab), aw, info, n);
    if (int rc = report(c, info, p.ob, p.amap, cv.at<tide_devreport>(rep_at))) return rc;
    unpack(c, dst_of(c->out[0], n, k), colmajor<T>(bw, n, k));
    return launched(c);
}

template <typename T> int solve_triangular(const tide_devcall * c) {
    SolvePlan p = solve_plan(c);
    int64_t   n = p.n, k = p.k;
    if (int rc = check_int(c, n, n > k ? n : k)) return rc;
    bool   upper = c->p.ints[0] != 0, unit = c->p.ints[1] != 0;
    Carve  cv;
    size_t a_at = cv.take((size_t)(p.ab.nelem * n * n) * sizeof(T)),
           b_at = cv.take((size_t)(p.ob.nelem * n * k) * sizeof(T));
    if (!cv.get(c)) return TIDE_DEVAPI_OOM;
    T * aw = cv.at<T>(a_at), * bw = cv.at<T>(b_at);
    pack(c, p.ab, src_of(c->in[0], p.ab, p.trans), n, aw);
    pack(c, p.ob, src_of(c->in[1], p.ob), k, bw);
    if (int rc = launched(c)) return rc;

    BlasHandle bh;
    if (int rc = blas_handle(c, CUBLAS_DEFAULT_MATH, bh)) return rc;   /* no TF32 in the solve */
    /* A packed as A^T: its triangle is the other one, and trsm applies the transpose */
    const T           one  = 1;
    cublasFillMode_t  uplo = upper != p.trans ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
    cublasDiagType_t  diag = unit ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT;
    cublasOperation_t op   = p.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    for (int64_t b = 0; b < p.ob.nelem; b++) {
        const T *      ai = aw + host_offset(p.ob, p.amap, b) * n * n;
        T *            bi = bw + b * n * k;
        cublasStatus_t st;
        if constexpr (std::is_same_v<T, float>)
            st = cublasStrsm(bh.h, CUBLAS_SIDE_LEFT, uplo, op, diag, (int)n, (int)k, &one, ai, (int)n, bi, (int)n);
        else
            st = cublasDtrsm(bh.h, CUBLAS_SIDE_LEFT, uplo, op, diag, (int)n, (int)k, &one, ai, (int)n, bi, (int)n);
        if (st != CUBLAS_STATUS_SUCCESS)
            return set_error(st == CUBLAS_STATUS_ALLOC_FAILED ? TIDE_DEVAPI_OOM : TIDE_DEVAPI_ERROR,
                             "%s: cublas%ctrsm failed: %s (%s)", c->op, letter<T>(), cublasGetStatusString(st),
                             cublasGetStatusName(st));
    }
    unpack(c, dst_of(c->out[0], n, k), colmajor<T>(bw, n, k));
    return launched(c);
}

/* -- linalg_slogdet ------------------------------------------------------------------------------ */

/* The sign and log |det| of each LU factorisation: U's diagonal, and a row
 * swap for each pivot that is not its own row; an exactly zero pivot (info >
 * 0) gives 0 and -inf. Summed in double, as the CPU does. lu NULL: n is 0,
 * and det is 1. DET: det itself, the signed product of the diagonal, into
 * out.o[0] alone (linalg_det). */
template <typename T, bool DET>
__global__ void __launch_bounds__(THREADS) slogdet_kernel(Shape s, Operands<2> out, const T * lu, const int * piv,
                                                          const int * info, int64_t n) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < s.nelem; b += step) {
        double sign = 1, logabs = 0, det = 1;
        if (lu && info[b] > 0) {
            sign = 0, logabs = -INFINITY, det = 0;
        } else {
            for (int64_t i = 0; i < n; i++) {
                double u = (double)lu[b * n * n + i * n + i];
                if (u < 0) sign = -sign;
                if (piv[b * n + i] != i + 1) sign = -sign, det = -det;
                logabs += log(fabs(u));
                det *= u;
            }
        }
        int64_t off[2];
        offsets_of<2, uint64_t>(s, out.o, (uint64_t)b, off);
        if (DET) {
            store_as<T>((void *)out.o[0].data, out.o[0].dtype, off[0], (T)det);
            continue;
        }
        store_as<T>((void *)out.o[0].data, out.o[0].dtype, off[0], (T)sign);
        store_as<T>((void *)out.o[1].data, out.o[1].dtype, off[1], (T)logabs);
    }
}

/* linalg_slogdet, or linalg_det with DET */
template <typename T, bool DET> int slogdet(const tide_devcall * c) {
    const tide_devtensor & a = c->in[0];
    Shape                  s = shape_of(c->out[0]);   /* A's batch */
    int64_t                n = a.sizes[a.ndim - 1];
    if (int rc = check_int(c, n, n)) return rc;
    Operands<2> out;
    out.o[0]        = operand(c->out[0], s);
    out.o[1]        = operand(c->out[DET ? 0 : 1], s);
    const T *   lu  = nullptr;
    const int * piv = nullptr, * info = nullptr;
    Carve       cv;
    Dn          dn;   /* held until the kernel below is queued (the scratch's lifetime is the call's) */
    if (n > 0) {
        size_t a_at    = cv.take((size_t)(s.nelem * n * n) * sizeof(T)),
               piv_at  = cv.take((size_t)(s.nelem * n) * sizeof(int)),
               info_at = cv.take((size_t)s.nelem * sizeof(int));
        if (!cv.get(c)) return TIDE_DEVAPI_OOM;
        T * aw = cv.at<T>(a_at);
        pack(c, s, src_of(a, s, rows_contiguous(a)), n, aw);   /* det A^T = det A */
        if (int rc = launched(c)) return rc;
        const Routines<T> & r = routines<T>();
        if (int rc = dn_handle(c, dn)) return rc;
        int              lwork = 0;
        cusolverStatus_t st    = r.getrf_size(dn.h, (int)n, (int)n, aw, (int)n, &lwork);
        if (st != CUSOLVER_STATUS_SUCCESS) return dn_fail<T>(c, "cusolverDn%cgetrf_bufferSize", st);
        T * work = workspace<T>(c, lwork);
        if (!work) return TIDE_DEVAPI_OOM;
        for (int64_t b = 0; b < s.nelem; b++) {
            st = r.getrf(dn.h, (int)n, (int)n, aw + b * n * n, (int)n, work, cv.at<int>(piv_at) + b * n,
                         cv.at<int>(info_at) + b);
            if (st != CUSOLVER_STATUS_SUCCESS) return dn_fail<T>(c, "cusolverDn%cgetrf", st);
        }
        lu = aw, piv = cv.at<int>(piv_at), info = cv.at<int>(info_at);
    }
    slogdet_kernel<T, DET><<<blocks_for(s.nelem), THREADS, 0, (cudaStream_t)c->stream>>>(s, out, lu, piv, info, n);
    return launched(c);
}

/* -- linalg_cholesky ---------------------------------------------------------------------------- */

/* potrf may run through a NaN pivot (OpenBLAS's does): the first NaN on a factor's
 * diagonal is reported as LAPACK's reference potrf reports it, as the CPU does. */
template <typename T> __global__ void nan_pivot_kernel(const T * a, int * info, int64_t nb, int64_t n) {
    for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < nb; b += (int64_t)gridDim.x * blockDim.x) {
        const T * m = a + b * n * n;
        for (int64_t i = 0; i < n && info[b] == 0; i++)
            if (isnan(m[i * n + i])) info[b] = (int)(i + 1);
    }
}

template <typename T> int cholesky(const tide_devcall * c) {
    const tide_devtensor & a     = c->in[0];
    Shape                  s     = batch_of(c->out[0], 2);
    int64_t                n     = a.sizes[a.ndim - 1];
    bool                   upper = c->p.ints[0] != 0;
    if (int rc = check_int(c, n, n)) return rc;
    Carve  cv;
    size_t a_at = cv.take((size_t)(s.nelem * n * n) * sizeof(T)), info_at = cv.take((size_t)s.nelem * sizeof(int)),
           rep_at = cv.take(sizeof(tide_devreport));
    if (!cv.get(c)) return TIDE_DEVAPI_OOM;
    T *   aw    = cv.at<T>(a_at);
    int * info  = cv.at<int>(info_at);
    bool  trans = rows_contiguous(a);
    pack(c, s, src_of(a, s, trans), n, aw);
    if (int rc = launched(c)) return rc;

    /* A packed as A^T: the triangle read is the other one, and so is the
     * factor, its transpose, read back transposed */
    const Routines<T> & r = routines<T>();
    Dn                  dn;
    if (int rc = dn_handle(c, dn)) return rc;
    cublasFillMode_t uplo  = upper != trans ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
    int              lwork = 0;
    cusolverStatus_t st    = r.potrf_size(dn.h, uplo, (int)n, aw, (int)n, &lwork);
    if (st != CUSOLVER_STATUS_SUCCESS) return dn_fail<T>(c, "cusolverDn%cpotrf_bufferSize", st);
    T * work = workspace<T>(c, lwork);
    if (!work) return TIDE_DEVAPI_OOM;
    for (int64_t b = 0; b < s.nelem; b++) {
        st = r.potrf(dn.h, uplo, (int)n, aw + b * n * n, (int)n, work, lwork, info + b);
        if (st != CUSOLVER_STATUS_SUCCESS) return dn_fail<T>(c, "cusolverDn%cpotrf", st);
    }
    nan_pivot_kernel<T><<<blocks_for(s.nelem), THREADS, 0, (cudaStream_t)c->stream>>>(aw, info, s.nelem, n);
    if (int rc = launched(c)) return rc;
    if (int rc = report(c, info, s, dense_map(s), cv.at<tide_devreport>(rep_at))) return rc;
    Work<T> f = trans ? Work<T>{aw, n * n, n, 1} : colmajor<T>(aw, n, n);
    unpack(c, dst_of(c->out[0], n, n), f, upper ? TRI_UPPER : TRI_LOWER);
    return launched(c);
}

/* -- linalg_eigh --------------------------------------------------------------------------------- */

template <typename T> int eigh(const tide_devcall * c) {
    const tide_devtensor & a     = c->in[0];
    Shape                  s     = batch_of(c->out[1], 2);
    int64_t                n     = a.sizes[a.ndim - 1];
    bool                   upper = c->p.ints[0] != 0;
    if (int rc = check_int(c, n, n)) return rc;
    Carve  cv;
    size_t a_at = cv.take((size_t)(s.nelem * n * n) * sizeof(T)), w_at = cv.take((size_t)(s.nelem * n) * sizeof(T)),
           sgn_at = cv.take((size_t)(s.nelem * n) * sizeof(T)), info_at = cv.take((size_t)s.nelem * sizeof(int)),
           rep_at = cv.take(sizeof(tide_devreport)), flag_at = cv.take((size_t)s.nelem * sizeof(int));
    if (!cv.get(c)) return TIDE_DEVAPI_OOM;
    T *   aw = cv.at<T>(a_at), * w = cv.at<T>(w_at), * sgn = cv.at<T>(sgn_at);
    int * info  = cv.at<int>(info_at), * flag = cv.at<int>(flag_at);
    bool  trans = rows_contiguous(a);
    pack(c, s, src_of(a, s, trans), n, aw);
    /* A NaN in the triangle read: syevd says it did not converge (an H100), LAPACK's
     * gives NaN: NaN here too, as solve (above) */
    if (s.nelem > 0)
        nan_scan_tri_kernel<T><<<blocks_for(s.nelem), THREADS, 0, (cudaStream_t)c->stream>>>(aw, flag, s.nelem, n,
                                                                                              upper != trans);
    if (int rc = launched(c)) return rc;

    const Routines<T> & r = routines<T>();
    Dn                  dn;
    if (int rc = dn_handle(c, dn)) return rc;
    /* A packed as A^T: the triangle to read is the other one */
    cublasFillMode_t  uplo  = upper != trans ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
    cusolverEigMode_t jobz  = CUSOLVER_EIG_MODE_VECTOR;
    int               lwork = 0;
    cusolverStatus_t  st    = r.syevd_size(dn.h, jobz, uplo, (int)n, aw, (int)n, w, &lwork);
    if (st != CUSOLVER_STATUS_SUCCESS) return dn_fail<T>(c, "cusolverDn%csyevd_bufferSize", st);
    T * work = workspace<T>(c, lwork);
    if (!work) return TIDE_DEVAPI_OOM;
    for (int64_t b = 0; b < s.nelem; b++) {
        st = r.syevd(dn.h, jobz, uplo, (int)n, aw + b * n * n, (int)n, w + b * n, work, lwork, info + b);
        if (st != CUSOLVER_STATUS_SUCCESS) return dn_fail<T>(c, "cusolverDn%csyevd", st);
    }
    if (s.nelem > 0)
        nan_info_kernel<<<blocks_for(s.nelem), THREADS, 0, (cudaStream_t)c->stream>>>(flag, info, s.nelem);
    if (int rc = report(c, info, s, dense_map(s), cv.at<tide_devreport>(rep_at))) return rc;
    nan_fill_batch<T>(c, flag, w, s.nelem, n);
    nan_fill_batch<T>(c, flag, aw, s.nelem, n * n);
    Work<T> v = colmajor<T>(aw, n, n);
    signs<T>(c, v, n, n, s.nelem, sgn);
    unpack(c, dst_of(c->out[0], n, 1), vectors<T>(w, n));
    unpack(c, dst_of(c->out[1], n, n), v, TRI_NONE, (const T *)sgn, n);
    return launched(c);
}

/* -- linalg_qr ----------------------------------------------------------------------------------- */

/* geqrf leaves R in the upper triangle and the reflectors below it; orgqr
 * makes Q from the reflectors in place. The complete Q of a tall A (m x m,
 * past A's n columns) is made in an m x m buffer whose columns past n start
 * as the identity's: the reflectors applied to them give Q's last columns,
 * and a product of no reflectors (n = 0) is the identity. */
template <typename T> int qr(const tide_devcall * c) {
    const tide_devtensor & a    = c->in[0];
    int64_t                mode = c->p.ints[0];
    Shape                  s    = batch_of(c->out[1], 2);
    int64_t m = a.sizes[a.ndim - 2], n = a.sizes[a.ndim - 1], k = m < n ? m : n;
    int64_t qcols = mode == 1 ? m : k, rrows = mode == 1 ? m : k;
    int64_t dcols = mode == 1 && m > n ? m : n;   /* the work buffer's columns */
    bool    want_q = mode != 2 && c->out[0].nelem > 0;
    if (int rc = check_int(c, m, dcols)) return rc;
    Carve  cv;
    size_t a_at    = cv.take((size_t)(s.nelem * m * dcols) * sizeof(T)),
           tau_at  = cv.take((size_t)(s.nelem * k) * sizeof(T)), info_at = cv.take(sizeof(int));
    if (!cv.get(c)) return TIDE_DEVAPI_OOM;
    T * aw = cv.at<T>(a_at), * tau = cv.at<T>(tau_at);
    pack(c, s, src_of(a, s), dcols, aw);
    if (int rc = launched(c)) return rc;

    Dn dn;
    if (k > 0) {
        const Routines<T> & r = routines<T>();
        if (int rc = dn_handle(c, dn)) return rc;
        int              lwork = 0, lq = 0;
        cusolverStatus_t st    = r.geqrf_size(dn.h, (int)m, (int)n, aw, (int)m, &lwork);
        if (st != CUSOLVER_STATUS_SUCCESS) return dn_fail<T>(c, "cusolverDn%cgeqrf_bufferSize", st);
        if (want_q) {
            st = r.orgqr_size(dn.h, (int)m, (int)qcols, (int)k, aw, (int)m, tau, &lq);
            if (st != CUSOLVER_STATUS_SUCCESS) return dn_fail<T>(c, "cusolverDn%corgqr_bufferSize", st);
            if (lq > lwork) lwork = lq;
        }
        T * work = workspace<T>(c, lwork);
        if (!work) return TIDE_DEVAPI_OOM;
        /* geqrf's and orgqr's info only flag a bad argument, which the calls rule out */
        for (int64_t b = 0; b < s.nelem; b++) {
            st = r.geqrf(dn.h, (int)m, (int)n, aw + b * m * dcols, (int)m, tau + b * k, work, lwork,
                         cv.at<int>(info_at));
            if (st != CUSOLVER_STATUS_SUCCESS) return dn_fail<T>(c, "cusolverDn%cgeqrf", st);
        }
        /* R before orgqr overwrites it (stream order) */
        unpack(c, dst_of(c->out[1], rrows, n), Work<T>{aw, m * dcols, 1, m}, TRI_UPPER);
        if (int rc = launched(c)) return rc;
        for (int64_t b = 0; want_q && b < s.nelem; b++) {
            st = r.orgqr(dn.h, (int)m, (int)qcols, (int)k, aw + b * m * dcols, (int)m, tau + b * k, work, lwork,
                         cv.at<int>(info_at));
            if (st != CUSOLVER_STATUS_SUCCESS) return dn_fail<T>(c, "cusolverDn%corgqr", st);
        }
    } else {
        unpack(c, dst_of(c->out[1], rrows, n), Work<T>{aw, m * dcols, 1, m}, TRI_UPPER);
    }
    if (want_q) unpack(c, dst_of(c->out[0], m, qcols), Work<T>{aw, m * dcols, 1, m});
    return launched(c);
}

/* -- linalg_svd ---------------------------------------------------------------------------------- */

/* cuSOLVER's gesvd takes m >= n only: a wide A is factored as its transpose,
 * A^T = U' S V'^T, so that A = V' S U'^T: A's U is V' (read from V'^T
 * transposed) and its Vh is U'^T. */
template <typename T> int svd(const tide_devcall * c) {
    const tide_devtensor & a    = c->in[0];
    bool                   full = c->p.ints[0] != 0, uv = c->p.ints[1] != 0;
    Shape                  s    = batch_of(c->out[1], 1);
    int64_t m = a.sizes[a.ndim - 2], n = a.sizes[a.ndim - 1], k = m < n ? m : n;
    bool    wide = m < n;
    int64_t M = wide ? n : m, N = k;                   /* the factored matrix */
    int64_t ucols_f = full ? M : N;                    /* columns of U' */
    int64_t ucols = full ? m : k, vrows = full ? n : k;   /* of A's U, rows of its Vh */
    if (int rc = check_int(c, M, uv || k == 0 ? ucols_f : N)) return rc;
    if (k == 0) {   /* no singular values; full U and Vh are identities */
        if (!uv || !full) return TIDE_DEVAPI_OK;
        Carve  cv;
        size_t e_at = cv.take((size_t)(M * M) * sizeof(T));
        if (!cv.get(c)) return TIDE_DEVAPI_OOM;
        T *   eye = cv.at<T>(e_at);
        Shape one = {};
        one.nelem = 1;
        Src none  = {};   /* no columns: all identity */
        none.rows = M;
        pack(c, one, none, M, eye);
        unpack(c, dst_of(c->out[0], m, m), Work<T>{eye, 0, 1, M});
        unpack(c, dst_of(c->out[2], n, n), Work<T>{eye, 0, 1, M});
        return launched(c);
    }
    Carve  cv;
    size_t a_at = cv.take((size_t)(s.nelem * M * N) * sizeof(T)), s_at = cv.take((size_t)(s.nelem * N) * sizeof(T)),
           u_at = cv.take(uv ? (size_t)(s.nelem * M * ucols_f) * sizeof(T) : 0),
           vt_at = cv.take(uv ? (size_t)(s.nelem * N * N) * sizeof(T) : 0),
           su_at = cv.take(uv ? (size_t)(s.nelem * ucols) * sizeof(T) : 0),
           sv_at = cv.take(uv ? (size_t)(s.nelem * vrows) * sizeof(T) : 0), rw_at = cv.take((size_t)N * sizeof(T)),
           info_at = cv.take((size_t)s.nelem * sizeof(int)), rep_at = cv.take(sizeof(tide_devreport)),
           flag_at = cv.take((size_t)s.nelem * sizeof(int));
    if (!cv.get(c)) return TIDE_DEVAPI_OOM;
    T *   aw = cv.at<T>(a_at), * sw = cv.at<T>(s_at), * uw = uv ? cv.at<T>(u_at) : nullptr,
        * vtw = uv ? cv.at<T>(vt_at) : nullptr;
    int * info = cv.at<int>(info_at), * flag = cv.at<int>(flag_at);
    pack(c, s, src_of(a, s, wide), N, aw);
    /* A holding NaN: NaN factors, as gesdd's on the CPU (lapack.c), not gesvd's info */
    if (s.nelem > 0)
        nan_scan_kernel<T><<<blocks_for(s.nelem), THREADS, 0, (cudaStream_t)c->stream>>>(aw, flag, s.nelem, M * N);
    if (int rc = launched(c)) return rc;

    const Routines<T> & r = routines<T>();
    Dn                  dn;
    if (int rc = dn_handle(c, dn)) return rc;
    signed char      jobu = uv ? (full ? 'A' : 'S') : 'N', jobvt = uv ? 'A' : 'N';
    int              lwork = 0;
    cusolverStatus_t st    = r.gesvd_size(dn.h, (int)M, (int)N, &lwork);
    if (st != CUSOLVER_STATUS_SUCCESS) return dn_fail<T>(c, "cusolverDn%cgesvd_bufferSize", st);
    T * work = workspace<T>(c, lwork);
    if (!work) return TIDE_DEVAPI_OOM;
    for (int64_t b = 0; b < s.nelem; b++) {
        st = r.gesvd(dn.h, jobu, jobvt, (int)M, (int)N, aw + b * M * N, (int)M, sw + b * N,
                     uv ? uw + b * M * ucols_f : nullptr, (int)M, uv ? vtw + b * N * N : nullptr, (int)N, work, lwork,
                     cv.at<T>(rw_at), info + b);
        if (st != CUSOLVER_STATUS_SUCCESS) return dn_fail<T>(c, "cusolverDn%cgesvd", st);
    }
    if (s.nelem > 0)
        nan_info_kernel<<<blocks_for(s.nelem), THREADS, 0, (cudaStream_t)c->stream>>>(flag, info, s.nelem);
    if (int rc = report(c, info, s, dense_map(s), cv.at<tide_devreport>(rep_at))) return rc;
    nan_fill_batch<T>(c, flag, sw, s.nelem, N);
    if (uv) nan_fill_batch<T>(c, flag, uw, s.nelem, M * ucols_f), nan_fill_batch<T>(c, flag, vtw, s.nelem, N * N);
    unpack(c, dst_of(c->out[1], k, 1), vectors<T>(sw, N));
    if (uv) {
        /* A's U (m x ucols) and Vh (vrows x n) in the work buffers */
        Work<T> u  = wide ? Work<T>{vtw, N * N, N, 1} : Work<T>{uw, M * ucols_f, 1, M};
        Work<T> vh = wide ? Work<T>{uw, M * ucols_f, M, 1} : Work<T>{vtw, N * N, 1, N};
        T *     su = cv.at<T>(su_at), * sv = cv.at<T>(sv_at);
        signs<T>(c, u, m, ucols, s.nelem, su);
        /* Vh's rows are the columns of Vh^T; the first k take U's signs */
        signs<T>(c, Work<T>{vh.p, vh.bs, vh.cs, vh.rs}, n, vrows, s.nelem, sv, k, su, ucols);
        unpack(c, dst_of(c->out[0], m, ucols), u, TRI_NONE, (const T *)su, ucols, false);
        unpack(c, dst_of(c->out[2], vrows, n), vh, TRI_NONE, (const T *)sv, vrows, true);
    }
    return launched(c);
}

/* -- the kernels --------------------------------------------------------------------------------- */

/* f(T()) for the call's compute dtype T, once c is on its device, unless
 * there is nothing to compute (`empty`: every output is). */
template <typename F> int run(const tide_devcall * c, bool empty, F && f) {
    if (int rc = use(c->dev)) return rc;
    if (int rc = need_memory(c)) return rc;
    if (empty) return TIDE_DEVAPI_OK;
    switch (c->compute_dtype) {
    case TIDE_DTYPE_F32: return f(float());
    case TIDE_DTYPE_F64: return f(double());
    default:             return no_dtype(c, c->compute_dtype);
    }
}

bool all_empty(const tide_devcall * c) {
    for (int32_t i = 0; i < c->n_out; i++)
        if (c->out[i].nelem > 0) return false;
    return true;
}

/* B without columns still has its A factored: a singular one is an error */
int k_solve(const tide_devcall * c) {
    const tide_devtensor & a = c->in[0], & x = c->out[0];
    bool empty = batch_of(x, 2).nelem == 0 || a.sizes[a.ndim - 1] == 0;
    return run(c, empty, [&](auto t) { return solve<decltype(t)>(c); });
}
int k_solve_triangular(const tide_devcall * c) {
    return run(c, all_empty(c), [&](auto t) { return solve_triangular<decltype(t)>(c); });
}
int k_slogdet(const tide_devcall * c) {
    return run(c, all_empty(c), [&](auto t) { return slogdet<decltype(t), false>(c); });
}
int k_det(const tide_devcall * c) {
    return run(c, all_empty(c), [&](auto t) { return slogdet<decltype(t), true>(c); });
}
int k_cholesky(const tide_devcall * c) {
    return run(c, all_empty(c), [&](auto t) { return cholesky<decltype(t)>(c); });
}
int k_eigh(const tide_devcall * c) {
    return run(c, all_empty(c), [&](auto t) { return eigh<decltype(t)>(c); });
}
int k_qr(const tide_devcall * c) {
    return run(c, all_empty(c), [&](auto t) { return qr<decltype(t)>(c); });
}
int k_svd(const tide_devcall * c) {
    return run(c, all_empty(c), [&](auto t) { return svd<decltype(t)>(c); });
}

}   // namespace

const kernel_entry linalg_kernels[] = {
    {"linalg_solve", k_solve},       {"linalg_solve_triangular", k_solve_triangular},
    {"linalg_slogdet", k_slogdet},   {"linalg_det", k_det},
    {"linalg_cholesky", k_cholesky},
    {"linalg_eigh", k_eigh},         {"linalg_qr", k_qr},
    {"linalg_svd", k_svd},           {nullptr, nullptr},
};

}   // namespace tide_cuda
