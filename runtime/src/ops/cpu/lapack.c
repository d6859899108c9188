/*
 * lapack.c - the matrix decompositions and solvers of the registry
 * (linalg_solve, linalg_solve_triangular, linalg_slogdet, linalg_cholesky,
 * linalg_eigh, linalg_qr, linalg_svd): their shape rules, the message of a
 * factorisation that fails (shared with the CUDA backend's reports), and the
 * CPU kernels, which hand each matrix of a batch to OpenBLAS's LAPACK.
 *
 * LAPACK is column-major: each matrix is copied, converted to the compute
 * dtype, into a column-major work buffer (any strides and storage dtype in),
 * factored there, and the results are written back through the outputs'
 * strides. The copies are O(n^2) against the factorisations' O(n^3). The
 * matrices of a batch run in parallel on Tide's pool, each call single-
 * threaded; a lone large matrix runs on OpenBLAS's threads, with the cores
 * the pool lends, as a lone large product does. OpenBLAS is loaded at run
 * time (blas.c): without it (TIDE_BLAS=builtin) these ops are an error.
 */
#include "blas.h"
#include "kernels.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* -- the message of a failed factorisation --------------------------------------------------- */

tide_status tide_linalg_error(const char * op, int64_t info, int64_t batch, int64_t nbatch, int32_t cuda_dev) {
    char what[160], where[96] = "", dev[32] = "";
    if (strcmp(op, "linalg_cholesky") == 0)
        snprintf(what, sizeof what, "the matrix is not positive-definite: its leading minor of order %lld is not",
                 (long long)info);
    else if (strcmp(op, "linalg_solve") == 0)
        snprintf(what, sizeof what, "the matrix is singular: pivot %lld of its LU factorisation is zero", (long long)info);
    else
        snprintf(what, sizeof what, "the algorithm did not converge (LAPACK info %lld)", (long long)info);
    if (nbatch > 0) snprintf(where, sizeof where, " (batch element %lld of %lld)", (long long)batch + 1, (long long)nbatch);
    if (cuda_dev >= 0) snprintf(dev, sizeof dev, " (on cuda:%d)", cuda_dev);
    return tide_error_set(TIDE_E_VALUE, "%s: %s%s%s", op, what, where, dev);
}

/* -- shape rules ----------------------------------------------------------------------------- */

static tide_status need_matrix(const tide_opcall * c, int32_t i, const char * what, bool square) {
    const tide_tensor * t = c->in[i];
    char s[128];
    if (t->ndim < 2)
        return tide_error_set(TIDE_E_SHAPE, "%s: %s must have at least 2 dimensions (a matrix or a batch of them), got shape %s",
                              tide_op_name(c->op), what, tide_shape_str(t, s, sizeof s));
    if (square && t->sizes[t->ndim - 1] != t->sizes[t->ndim - 2])
        return tide_error_set(TIDE_E_SHAPE, "%s: %s must be square matrices, got shape %s", tide_op_name(c->op), what,
                              tide_shape_str(t, s, sizeof s));
    return TIDE_OK;
}

/* Output o: the batch dims nb of bsizes, then `tail` sizes. */
static void set_out(tide_shape_out * o, int32_t k, int32_t nb, const int64_t * bsizes, int32_t ntail, int64_t t0, int64_t t1) {
    memcpy(o->sizes[k], bsizes, (size_t)nb * sizeof(int64_t));
    if (ntail > 0) o->sizes[k][nb] = t0;
    if (ntail > 1) o->sizes[k][nb + 1] = t1;
    o->ndim[k] = nb + ntail;
}

static void set_empty(tide_shape_out * o, int32_t k) {
    o->ndim[k]     = 1;
    o->sizes[k][0] = 0;
}

static bool flag_param(tide_opcall * c, int32_t i) { return c->p.n_ints > i && c->p.ints[i] != 0; }

/* linalg_solve, linalg_solve_triangular: A [..., n, n], B [..., n, k], batch dims broadcast. */
tide_status tide_shape_linalg_solve(tide_opcall * c, tide_shape_out * o) {
    TIDE_CHECK(need_matrix(c, 0, "A", true));
    TIDE_CHECK(need_matrix(c, 1, "B", false));
    const tide_tensor * a = c->in[0], * b = c->in[1];
    const char * op = tide_op_name(c->op);
    char x[128], y[128];
    int64_t n = a->sizes[a->ndim - 1];
    if (b->sizes[b->ndim - 2] != n)
        return tide_error_set(TIDE_E_SHAPE, "%s: A of shape %s is %lldx%lld, so B must have %lld rows, got shape %s", op,
                              tide_shape_str(a, x, sizeof x), (long long)n, (long long)n, (long long)n,
                              tide_shape_str(b, y, sizeof y));
    int32_t na = a->ndim - 2, nb = b->ndim - 2, nd = na > nb ? na : nb;
    int64_t bs[TIDE_MAX_DIMS];
    for (int32_t d = 0; d < nd; d++) {
        int32_t ja = d - (nd - na), jb = d - (nd - nb);
        int64_t sa = ja >= 0 ? a->sizes[ja] : 1, sb = jb >= 0 ? b->sizes[jb] : 1;
        if (sa != sb && sa != 1 && sb != 1)
            return tide_error_set(TIDE_E_SHAPE, "%s: the batch dimensions of shapes %s and %s cannot be broadcast: %lld ~= %lld",
                                  op, tide_shape_str(a, x, sizeof x), tide_shape_str(b, y, sizeof y), (long long)sa,
                                  (long long)sb);
        bs[d] = sa == 1 ? sb : sa;
    }
    if (c->op == TIDE_OP_linalg_solve_triangular) {
        int64_t upper = flag_param(c, 0), unit = flag_param(c, 1);
        c->p.ints[0] = upper, c->p.ints[1] = unit, c->p.n_ints = 2;
    } else {
        c->p.n_ints = 0;
    }
    set_out(o, 0, nd, bs, 2, n, b->sizes[b->ndim - 1]);
    return TIDE_OK;
}

/* linalg_cholesky: A's shape; ints[0] upper (0/1). */
tide_status tide_shape_linalg_square(tide_opcall * c, tide_shape_out * o) {
    TIDE_CHECK(need_matrix(c, 0, "A", true));
    c->p.ints[0] = flag_param(c, 0), c->p.n_ints = 1;
    o->ndim[0] = c->in[0]->ndim;
    memcpy(o->sizes[0], c->in[0]->sizes, (size_t)c->in[0]->ndim * sizeof(int64_t));
    return TIDE_OK;
}

/* linalg_slogdet: sign and log|det|, each of A's batch shape; linalg_det: det alone. */
tide_status tide_shape_linalg_slogdet(tide_opcall * c, tide_shape_out * o) {
    TIDE_CHECK(need_matrix(c, 0, "A", true));
    c->p.n_ints = 0;
    for (int32_t i = 0; i < c->n_out; i++) set_out(o, i, c->in[0]->ndim - 2, c->in[0]->sizes, 0, 0, 0);
    return TIDE_OK;
}

/* linalg_eigh: eigenvalues [..., n], eigenvectors [..., n, n]; ints[0] upper. */
tide_status tide_shape_linalg_eigh(tide_opcall * c, tide_shape_out * o) {
    TIDE_CHECK(need_matrix(c, 0, "A", true));
    const tide_tensor * a = c->in[0];
    int64_t n = a->sizes[a->ndim - 1];
    c->p.ints[0] = flag_param(c, 0), c->p.n_ints = 1;
    set_out(o, 0, a->ndim - 2, a->sizes, 1, n, 0);
    set_out(o, 1, a->ndim - 2, a->sizes, 2, n, n);
    return TIDE_OK;
}

/* linalg_qr: ints[0] the mode, 0 reduced, 1 complete, 2 r. */
tide_status tide_shape_linalg_qr(tide_opcall * c, tide_shape_out * o) {
    TIDE_CHECK(need_matrix(c, 0, "A", false));
    const tide_tensor * a = c->in[0];
    int64_t mode = c->p.n_ints > 0 ? c->p.ints[0] : 0;
    if (mode < 0 || mode > 2)
        return tide_error_set(TIDE_E_VALUE, "%s: mode must be 0 (reduced), 1 (complete) or 2 (r), got %lld",
                              tide_op_name(c->op), (long long)mode);
    c->p.ints[0] = mode, c->p.n_ints = 1;
    int32_t nb = a->ndim - 2;
    int64_t m = a->sizes[nb], n = a->sizes[nb + 1], k = m < n ? m : n;
    if (mode == 2) set_empty(o, 0);
    else set_out(o, 0, nb, a->sizes, 2, m, mode == 1 ? m : k);
    set_out(o, 1, nb, a->sizes, 2, mode == 1 ? m : k, n);
    return TIDE_OK;
}

/* linalg_svd: ints[0] full_matrices, ints[1] compute_uv (default 1). */
tide_status tide_shape_linalg_svd(tide_opcall * c, tide_shape_out * o) {
    TIDE_CHECK(need_matrix(c, 0, "A", false));
    const tide_tensor * a = c->in[0];
    bool full = flag_param(c, 0), uv = c->p.n_ints < 2 || c->p.ints[1] != 0;
    c->p.ints[0] = full, c->p.ints[1] = uv, c->p.n_ints = 2;
    int32_t nb = a->ndim - 2;
    int64_t m = a->sizes[nb], n = a->sizes[nb + 1], k = m < n ? m : n;
    set_out(o, 1, nb, a->sizes, 1, k, 0);
    if (!uv) {
        set_empty(o, 0);
        set_empty(o, 2);
    } else {
        set_out(o, 0, nb, a->sizes, 2, m, full ? m : k);
        set_out(o, 2, nb, a->sizes, 2, full ? n : k, n);
    }
    return TIDE_OK;
}

/* -- OpenBLAS's LAPACK, by dlsym --------------------------------------------------------------- */

/* Fortran's convention: every argument by reference, and each character argument's
 * length appended (gfortran's hidden size_t). Debian's OpenBLAS has 32-bit integers. */
typedef int lp;
typedef void (*getrf_fn)(const lp * m, const lp * n, void * a, const lp * lda, lp * ipiv, lp * info);
typedef void (*getrs_fn)(const char * trans, const lp * n, const lp * nrhs, const void * a, const lp * lda,
                         const lp * ipiv, void * b, const lp * ldb, lp * info, size_t);
typedef void (*potrf_fn)(const char * uplo, const lp * n, void * a, const lp * lda, lp * info, size_t);
typedef void (*geqrf_fn)(const lp * m, const lp * n, void * a, const lp * lda, void * tau, void * work, const lp * lwork,
                         lp * info);
typedef void (*orgqr_fn)(const lp * m, const lp * n, const lp * k, void * a, const lp * lda, const void * tau,
                         void * work, const lp * lwork, lp * info);
typedef void (*syevd_fn)(const char * jobz, const char * uplo, const lp * n, void * a, const lp * lda, void * w,
                         void * work, const lp * lwork, lp * iwork, const lp * liwork, lp * info, size_t, size_t);
typedef void (*gesdd_fn)(const char * jobz, const lp * m, const lp * n, void * a, const lp * lda, void * s, void * u,
                         const lp * ldu, void * vt, const lp * ldvt, void * work, const lp * lwork, lp * iwork, lp * info,
                         size_t);
typedef void (*strsm_fn)(int order, int side, int uplo, int trans, int diag, int m, int n, float alpha, const float * a,
                         int lda, float * b, int ldb);
typedef void (*dtrsm_fn)(int order, int side, int uplo, int trans, int diag, int m, int n, double alpha,
                         const double * a, int lda, double * b, int ldb);
enum { CBLAS_COL_MAJOR = 102, CBLAS_LEFT = 141, CBLAS_UPPER = 121, CBLAS_LOWER = 122, CBLAS_NO_TRANS = 111,
       CBLAS_TRANS = 112, CBLAS_NON_UNIT = 131, CBLAS_UNIT = 132 };

/* [0] float, [1] double */
static struct {
    getrf_fn getrf[2];
    getrs_fn getrs[2];
    potrf_fn potrf[2];
    geqrf_fn geqrf[2];
    orgqr_fn orgqr[2];
    syevd_fn syevd[2];
    gesdd_fn gesdd[2];
    strsm_fn strsm;
    dtrsm_fn dtrsm;
    bool     ok;
} lapack;
static pthread_once_t lapack_once = PTHREAD_ONCE_INIT;

static void lapack_load(void) {
#define LAPACK_SYM(f)                                                    \
    lapack.f[0] = (f##_fn)tide_blas_symbol("s" #f "_");                  \
    lapack.f[1] = (f##_fn)tide_blas_symbol("d" #f "_");                  \
    lapack.ok   = lapack.ok && lapack.f[0] && lapack.f[1];
    lapack.ok = true;
    LAPACK_SYM(getrf) LAPACK_SYM(getrs) LAPACK_SYM(potrf) LAPACK_SYM(geqrf)
    lapack.orgqr[0] = (orgqr_fn)tide_blas_symbol("sorgqr_");
    lapack.orgqr[1] = (orgqr_fn)tide_blas_symbol("dorgqr_");
    lapack.syevd[0] = (syevd_fn)tide_blas_symbol("ssyevd_");
    lapack.syevd[1] = (syevd_fn)tide_blas_symbol("dsyevd_");
    LAPACK_SYM(gesdd)
#undef LAPACK_SYM
    lapack.strsm = (strsm_fn)tide_blas_symbol("cblas_strsm");
    lapack.dtrsm = (dtrsm_fn)tide_blas_symbol("cblas_dtrsm");
    lapack.ok = lapack.ok && lapack.orgqr[0] && lapack.orgqr[1] && lapack.syevd[0] && lapack.syevd[1] && lapack.strsm &&
                lapack.dtrsm;
}

static tide_status need_lapack(const tide_opcall * c) {
    pthread_once(&lapack_once, lapack_load);
    if (lapack.ok) return TIDE_OK;
    return tide_error_set(TIDE_E_VALUE, "%s: needs the LAPACK of OpenBLAS, which is not in use (%s)",
                          tide_op_name(c->op), strstr(tide_blas_describe(), "blas=openblas") ? "it lacks a routine"
                                                                                              : "the built-in GEMM is");
}

/* -- batches of matrices, column-major work buffers --------------------------------------------- */

/* A tensor as a batch of rows x cols matrices (its last `tail` dims: 2 a matrix, 1 a
 * column, 0 one element) over the nb batch dims of a job, its own broadcast to them. */
typedef struct {
    char *  base;
    int32_t dtype;
    int64_t esz, rows, cols, rs, cs;
    int64_t bstr[TIDE_MAX_DIMS];
} mat;

static mat mat_of(const tide_tensor * t, int32_t tail, int32_t nb) {
    mat     x = {.base = tide_tensor_ptr(t), .dtype = t->dtype_id, .esz = (int64_t)tide_dtype_size(t->dtype_id),
                 .rows = 1, .cols = 1};
    int32_t tb = t->ndim - tail;
    if (tail >= 1) x.rows = t->sizes[tb], x.rs = t->strides[tb];
    if (tail == 2) x.cols = t->sizes[tb + 1], x.cs = t->strides[tb + 1];
    for (int32_t d = 0; d < nb; d++) {
        int32_t j  = d - (nb - tb);
        x.bstr[d] = (j >= 0 && t->sizes[j] != 1) ? t->strides[j] : 0;
    }
    return x;
}

/* x's matrices transposed. */
static mat mat_t(mat x) {
    int64_t r = x.rows, s = x.rs;
    x.rows = x.cols, x.rs = x.cs;
    x.cols = r, x.cs = s;
    return x;
}

/* Whether to factor the transpose of x's matrices: when their rows are contiguous, its
 * column-major copy is a copy of rows, where A's own would be a transposing one. */
static bool rows_contiguous(const mat * x) { return x->rows > 1 && x->cs == 1 && x->rs != 1; }

typedef struct job job;
/* Factors batch element b in work; returns LAPACK's info (> 0: the op's failure). */
typedef lp (*matrix_fn)(const job * j, int64_t b, char * work);

struct job {
    const tide_opcall * c;
    matrix_fn           fn;
    bool                dbl;                  /* compute in double */
    bool                trans;                /* in[0] is loaded transposed (rows_contiguous) */
    int32_t             ct, nb;
    int64_t             bsizes[TIDE_MAX_DIMS], nbatch;
    mat                 in[2], out[3];
    int64_t             m, n, k;              /* the op's matrix sizes */
    lp                  lwork, liwork;        /* LAPACK's workspace, queried once */
    size_t              work_bytes;           /* per matrix */
    pthread_mutex_t     lock;                 /* guards the failure below */
    int64_t             bad;                  /* the first failing batch element, or INT64_MAX */
    lp                  info;
    bool                oom;
};

/* Element offset of batch element b of x. */
static int64_t at(const job * j, const mat * x, int64_t b) {
    int64_t off = 0;
    for (int32_t d = j->nb - 1; d >= 0; d--) {
        off += (b % j->bsizes[d]) * x->bstr[d];
        b /= j->bsizes[d];
    }
    return off;
}

static lp ld_of(int64_t rows) { return rows > 0 ? (lp)rows : 1; }

/* dst = src, rows x cols elements of type T at the given element strides, in 32 x 32
 * tiles so that neither side walks a long stride element by element. */
#define COPY_TILES(T)                                                                                \
    static void copy_tiles_##T(T * dst, int64_t drs, int64_t dcs, const T * src, int64_t srs,       \
                               int64_t scs, int64_t rows, int64_t cols) {                           \
        enum { TILE = 32 };                                                                          \
        for (int64_t r0 = 0; r0 < rows; r0 += TILE)                                                  \
            for (int64_t c0 = 0; c0 < cols; c0 += TILE) {                                            \
                int64_t r1 = r0 + TILE < rows ? r0 + TILE : rows, c1 = c0 + TILE < cols ? c0 + TILE : cols; \
                for (int64_t r = r0; r < r1; r++)                                                    \
                    for (int64_t c = c0; c < c1; c++) dst[r * drs + c * dcs] = src[r * srs + c * scs]; \
            }                                                                                        \
    }
COPY_TILES(float)
COPY_TILES(double)

/* Copies a rows x cols matrix between the work buffer (column-major, leading
 * dimension ld, the job's dtype) and x's matrix of element b. Another storage
 * dtype is converted column by column. */
static void transfer(const job * j, const mat * x, int64_t b, char * ws, int64_t ld, bool to_ws) {
    char * xb = x->base + at(j, x, b) * x->esz;
    if (x->dtype == j->ct && x->rs != 1 && x->rows > 1) {
        if (j->dbl && to_ws) copy_tiles_double((double *)ws, 1, ld, (const double *)xb, x->rs, x->cs, x->rows, x->cols);
        else if (j->dbl) copy_tiles_double((double *)xb, x->rs, x->cs, (const double *)ws, 1, ld, x->rows, x->cols);
        else if (to_ws) copy_tiles_float((float *)ws, 1, ld, (const float *)xb, x->rs, x->cs, x->rows, x->cols);
        else copy_tiles_float((float *)xb, x->rs, x->cs, (const float *)ws, 1, ld, x->rows, x->cols);
        return;
    }
    size_t es = tide_dtype_size(j->ct);
    for (int64_t c = 0; c < x->cols; c++) {
        char * w = ws + (size_t)(c * ld) * es, * e = xb + c * x->cs * x->esz;
        if (to_ws) tide_convert(w, j->ct, 1, e, x->dtype, x->rs, x->rows);
        else tide_convert(e, x->dtype, x->rs, w, j->ct, 1, x->rows);
    }
}

static void load(const job * j, const mat * x, int64_t b, void * ws, int64_t ld) { transfer(j, x, b, ws, ld, true); }
static void store(const job * j, const mat * x, int64_t b, const void * ws, int64_t ld) {
    transfer(j, x, b, (char *)ws, ld, false);
}

static double get(const job * j, const void * p, int64_t i) {
    return j->dbl ? ((const double *)p)[i] : (double)((const float *)p)[i];
}

static void put(const job * j, void * p, int64_t i, double v) {
    if (j->dbl) ((double *)p)[i] = v;
    else ((float *)p)[i] = (float)v;
}

/* Element i of vector p (n elements, `step` apart) of largest magnitude, the first of equals. */
static int64_t argmax_abs(const job * j, const void * p, int64_t n, int64_t step) {
    int64_t best = 0;
    double  m    = -1;
    for (int64_t i = 0; i < n; i++) {
        double v = fabs(get(j, p, i * step));
        if (v > m) m = v, best = i;
    }
    return best;
}

static void negate(const job * j, void * p, int64_t n, int64_t step) {
    for (int64_t i = 0; i < n; i++) put(j, p, i * step, -get(j, p, i * step));
}

/* Zeroes the triangle of an n x n column-major matrix strictly below (lower) or above the diagonal. */
static void zero_triangle(const job * j, void * a, int64_t rows, int64_t cols, int64_t ld, bool lower) {
    for (int64_t c = 0; c < cols; c++)
        for (int64_t r = lower ? c + 1 : 0; r < (lower ? rows : (c < rows ? c : rows)); r++) put(j, a, r + c * ld, 0);
}

static void fail_at(job * j, int64_t b, lp info) {
    pthread_mutex_lock(&j->lock);
    if (b < j->bad) j->bad = b, j->info = info;
    pthread_mutex_unlock(&j->lock);
}

static void run_range(void * ctx, int64_t b0, int64_t b1) {
    job *  j = ctx;
    size_t cap;
    char * work = tide_host_alloc(j->work_bytes ? j->work_bytes : 1, &cap);
    if (!work) {
        pthread_mutex_lock(&j->lock);
        j->oom = true;
        pthread_mutex_unlock(&j->lock);
        return;
    }
    tide_blas_serial_begin();
    for (int64_t b = b0; b < b1; b++) {
        lp info = j->fn(j, b, work);
        if (info != 0) fail_at(j, b, info);
    }
    tide_blas_serial_end();
    tide_host_free(work, cap);
}

/* Sets up a job over the batch dims of `shape` (its first nb sizes). */
static tide_status job_init(job * j, const tide_opcall * c, matrix_fn fn, const tide_tensor * shape, int32_t nb) {
    memset(j, 0, sizeof *j);
    TIDE_CHECK(need_lapack(c));
    j->c      = c;
    j->fn     = fn;
    j->ct     = c->compute_dtype;
    j->dbl    = j->ct == TIDE_DTYPE_F64;
    j->nb     = nb;
    j->nbatch = 1;
    for (int32_t d = 0; d < nb; d++) j->nbatch *= (j->bsizes[d] = shape->sizes[d]);
    j->bad = INT64_MAX;
    return TIDE_OK;
}

/* Runs fn over the batch: in parallel over matrices, or one large matrix on the cores
 * the pool lends OpenBLAS. `cost` is one matrix's work in multiply-adds. */
static tide_status job_run(job * j, double cost) {
    const char * op = tide_op_name(j->c->op);
    if (j->m > INT_MAX / (j->n > 0 ? j->n : 1) || j->n > INT_MAX / (j->m > 0 ? j->m : 1))
        return tide_error_set(TIDE_E_VALUE, "%s: a %lldx%lld matrix is too large for LAPACK's 32-bit indices", op,
                              (long long)j->m, (long long)j->n);
    pthread_mutex_init(&j->lock, NULL);
    if (j->nbatch == 1 && cost >= 1e6 && tide_blas_lend_begin()) {
        run_range(j, 0, 1);
        tide_blas_lend_end();
    } else if (j->nbatch > 0) {
        int64_t grain = cost >= 65536 ? 1 : (int64_t)(65536 / (cost > 1 ? cost : 1));
        tide_parallel_for(j->nbatch, grain, 1, run_range, j);
    }
    pthread_mutex_destroy(&j->lock);
    if (j->oom) return tide_error_set(TIDE_E_OOM, "%s: out of memory for %zu bytes of work space", op, j->work_bytes);
    if (j->bad == INT64_MAX) return TIDE_OK;
    if (j->info < 0)
        return tide_error_set(TIDE_E_INTERNAL, "%s: LAPACK refused its argument %d (a bug in Tide)", op, (int)-j->info);
    return tide_linalg_error(op, j->info, j->bad, j->nb > 0 ? j->nbatch : 0, -1);
}

static size_t es_of(const job * j) { return j->dbl ? sizeof(double) : sizeof(float); }

/* The size a workspace query (lwork = -1) wrote into work[0], in the job's dtype, plus one
 * for the rounding of a float's conversion. */
static lp queried(const job * j, const double * work) {
    return (lp)(j->dbl ? work[0] : (double)((const float *)work)[0]) + 1;
}

/* -- linalg_solve, linalg_solve_triangular ------------------------------------------------------- */

static lp solve_one(const job * j, int64_t b, char * work) {
    lp   n = (lp)j->n, k = (lp)j->k, ld = ld_of(j->n), info = 0;
    char * a = work, * x = a + (size_t)(ld * j->n) * es_of(j);
    lp *   piv = (lp *)(x + (size_t)(ld * j->k) * es_of(j));
    load(j, &j->in[0], b, a, ld);
    load(j, &j->in[1], b, x, ld);
    if (n > 0) {
        lapack.getrf[j->dbl](&n, &n, a, &ld, piv, &info);
        if (info > 0 && j->trans) {   /* name the zero pivot of A's own LU, as other layouts do */
            mat own = mat_t(j->in[0]);
            lp  info_a = 0;
            load(j, &own, b, a, ld);
            lapack.getrf[j->dbl](&n, &n, a, &ld, piv, &info_a);
            if (info_a > 0) info = info_a;
        }
        if (info != 0) return info;
        if (k > 0) lapack.getrs[j->dbl](j->trans ? "T" : "N", &n, &k, a, &ld, piv, x, &ld, &info, 1);
        if (info != 0) return info;
    }
    store(j, &j->out[0], b, x, ld);
    return 0;
}

static lp solve_triangular_one(const job * j, int64_t b, char * work) {
    lp     ld = ld_of(j->n);
    char * a = work, * x = a + (size_t)(ld * j->n) * es_of(j);
    load(j, &j->in[0], b, a, ld);
    load(j, &j->in[1], b, x, ld);
    /* A loaded transposed: its triangle is the other one, and trsm applies the transpose */
    bool upper = (j->c->p.ints[0] != 0) != j->trans;
    int  uplo = upper ? CBLAS_UPPER : CBLAS_LOWER, diag = j->c->p.ints[1] ? CBLAS_UNIT : CBLAS_NON_UNIT;
    int  op   = j->trans ? CBLAS_TRANS : CBLAS_NO_TRANS;
    if (j->n > 0 && j->k > 0) {
        if (j->dbl)
            lapack.dtrsm(CBLAS_COL_MAJOR, CBLAS_LEFT, uplo, op, diag, (int)j->n, (int)j->k, 1.0,
                         (const double *)a, ld, (double *)x, ld);
        else
            lapack.strsm(CBLAS_COL_MAJOR, CBLAS_LEFT, uplo, op, diag, (int)j->n, (int)j->k, 1.0f,
                         (const float *)a, ld, (float *)x, ld);
    }
    store(j, &j->out[0], b, x, ld);
    return 0;
}

static tide_status solve_kernel(const tide_opcall * c, matrix_fn fn) {
    job            j;
    const tide_tensor * out = c->out[0];
    int32_t        nb = out->ndim - 2;
    TIDE_CHECK(job_init(&j, c, fn, out, nb));
    j.in[0]  = mat_of(c->in[0], 2, nb);
    j.in[1]  = mat_of(c->in[1], 2, nb);
    j.out[0] = mat_of(out, 2, nb);
    if ((j.trans = rows_contiguous(&j.in[0]))) j.in[0] = mat_t(j.in[0]);   /* solved with trans 'T' */
    j.n = j.m = out->sizes[nb];
    j.k = out->sizes[nb + 1];
    int64_t ld = ld_of(j.n);
    j.work_bytes = (size_t)(ld * (j.n + j.k)) * es_of(&j) + (size_t)ld * sizeof(lp);
    if (j.k > INT_MAX / ld) return tide_error_set(TIDE_E_VALUE, "%s: B with %lld columns is too large for LAPACK's 32-bit indices",
                                                  tide_op_name(c->op), (long long)j.k);
    return job_run(&j, (double)j.n * j.n * (j.n / 3.0 + j.k));
}

tide_status tide_cpu_linalg_solve(const tide_opcall * c) { return solve_kernel(c, solve_one); }
tide_status tide_cpu_linalg_solve_triangular(const tide_opcall * c) { return solve_kernel(c, solve_triangular_one); }

/* -- linalg_slogdet ------------------------------------------------------------------------------ */

static lp slogdet_one(const job * j, int64_t b, char * work) {
    lp     n = (lp)j->n, ld = ld_of(j->n), info = 0;
    char * a   = work;
    lp *   piv = (lp *)(a + (size_t)(ld * j->n) * es_of(j));
    double sign = 1, logabs = 0;
    load(j, &j->in[0], b, a, ld);
    if (n > 0) lapack.getrf[j->dbl](&n, &n, a, &ld, piv, &info);
    if (info < 0) return info;
    if (info > 0) {   /* an exactly zero pivot */
        sign = 0, logabs = -INFINITY;
    } else {
        for (lp i = 0; i < n; i++) {
            double u = get(j, a, i + (int64_t)i * ld);
            if (u < 0) sign = -sign;
            if (piv[i] != i + 1) sign = -sign;
            logabs += log(fabs(u));
        }
    }
    char r[sizeof(double)];
    put(j, r, 0, sign);
    store(j, &j->out[0], b, r, 1);
    put(j, r, 0, logabs);
    store(j, &j->out[1], b, r, 1);
    return 0;
}

/* det A: the product of U's diagonal, signed by the pivots (so det of [[-3]] is -3, not
 * exp(log 3) signed); 0 at an exactly zero pivot. */
static lp det_one(const job * j, int64_t b, char * work) {
    lp     n = (lp)j->n, ld = ld_of(j->n), info = 0;
    char * a   = work;
    lp *   piv = (lp *)(a + (size_t)(ld * j->n) * es_of(j));
    double det = 1;
    load(j, &j->in[0], b, a, ld);
    if (n > 0) lapack.getrf[j->dbl](&n, &n, a, &ld, piv, &info);
    if (info < 0) return info;
    for (lp i = 0; i < n; i++) det *= piv[i] != i + 1 ? -get(j, a, i + (int64_t)i * ld) : get(j, a, i + (int64_t)i * ld);
    char r[sizeof(double)];
    put(j, r, 0, info > 0 ? 0.0 : det);
    store(j, &j->out[0], b, r, 1);
    return 0;
}

static tide_status det_kernel(const tide_opcall * c, matrix_fn fn) {
    job     j;
    int32_t nb = c->in[0]->ndim - 2;
    TIDE_CHECK(job_init(&j, c, fn, c->in[0], nb));
    j.in[0]  = mat_of(c->in[0], 2, nb);
    if (rows_contiguous(&j.in[0])) j.in[0] = mat_t(j.in[0]);   /* det A^T = det A */
    for (int32_t i = 0; i < c->n_out; i++) j.out[i] = mat_of(c->out[i], 0, nb);
    j.n = j.m = c->in[0]->sizes[nb];
    int64_t ld = ld_of(j.n);
    j.work_bytes = (size_t)(ld * j.n) * es_of(&j) + (size_t)ld * sizeof(lp);
    return job_run(&j, (double)j.n * j.n * j.n / 3.0);
}

tide_status tide_cpu_linalg_slogdet(const tide_opcall * c) { return det_kernel(c, slogdet_one); }
tide_status tide_cpu_linalg_det(const tide_opcall * c) { return det_kernel(c, det_one); }

/* -- linalg_cholesky --------------------------------------------------------------------------- */

static lp cholesky_one(const job * j, int64_t b, char * work) {
    lp   n = (lp)j->n, ld = ld_of(j->n), info = 0;
    /* A loaded transposed: the triangle read is the other one, and so is the factor (its
     * transpose, stored through the transposed output) */
    bool upper = (j->c->p.ints[0] != 0) != j->trans;
    load(j, &j->in[0], b, work, ld);
    if (n > 0) lapack.potrf[j->dbl](upper ? "U" : "L", &n, work, &ld, &info, 1);
    if (info != 0) return info;
    /* LAPACK's reference potrf stops at a NaN pivot; OpenBLAS's runs through it:
     * a matrix holding NaN is reported as the reference reports it */
    for (int64_t i = 0; i < j->n; i++) {
        double d = j->dbl ? ((const double *)work)[i * ld + i] : ((const float *)work)[i * ld + i];
        if (isnan(d)) return (lp)(i + 1);
    }
    zero_triangle(j, work, j->n, j->n, ld, upper);
    store(j, &j->out[0], b, work, ld);
    return 0;
}

tide_status tide_cpu_linalg_cholesky(const tide_opcall * c) {
    job     j;
    int32_t nb = c->in[0]->ndim - 2;
    TIDE_CHECK(job_init(&j, c, cholesky_one, c->in[0], nb));
    j.in[0]  = mat_of(c->in[0], 2, nb);
    j.out[0] = mat_of(c->out[0], 2, nb);
    if ((j.trans = rows_contiguous(&j.in[0]))) j.in[0] = mat_t(j.in[0]), j.out[0] = mat_t(j.out[0]);
    j.n = j.m = c->in[0]->sizes[nb];
    j.work_bytes = (size_t)(ld_of(j.n) * j.n) * es_of(&j);
    return job_run(&j, (double)j.n * j.n * j.n / 6.0);
}

/* -- linalg_eigh ------------------------------------------------------------------------------- */

static lp eigh_one(const job * j, int64_t b, char * work) {
    lp     n = (lp)j->n, ld = ld_of(j->n), info = 0;
    size_t es = es_of(j);
    char * a = work, * w = a + (size_t)(ld * j->n) * es, * wk = w + (size_t)ld * es;
    lp *   iw = (lp *)(wk + (size_t)j->lwork * es);
    load(j, &j->in[0], b, a, ld);
    if (n > 0) {
        bool upper = (j->c->p.ints[0] != 0) != j->trans;   /* A^T's other triangle is A's */
        lapack.syevd[j->dbl]("V", upper ? "U" : "L", &n, a, &ld, w, wk, &j->lwork, iw, &j->liwork, &info, 1, 1);
        if (info != 0) return info;
    }
    for (int64_t col = 0; col < j->n; col++) {
        char * v = a + (size_t)(col * ld) * es;
        if (get(j, v, argmax_abs(j, v, j->n, 1)) < 0) negate(j, v, j->n, 1);
    }
    store(j, &j->out[0], b, w, ld);
    store(j, &j->out[1], b, a, ld);
    return 0;
}

tide_status tide_cpu_linalg_eigh(const tide_opcall * c) {
    job     j;
    int32_t nb = c->in[0]->ndim - 2;
    TIDE_CHECK(job_init(&j, c, eigh_one, c->in[0], nb));
    j.in[0]  = mat_of(c->in[0], 2, nb);
    if ((j.trans = rows_contiguous(&j.in[0]))) j.in[0] = mat_t(j.in[0]);
    j.out[0] = mat_of(c->out[0], 1, nb);
    j.out[1] = mat_of(c->out[1], 2, nb);
    j.n = j.m = c->in[0]->sizes[nb];
    lp n = (lp)j.n, ld = ld_of(j.n), info = 0;
    j.lwork = j.liwork = 1;
    if (n > 0 && j.n <= INT_MAX) {   /* the workspace LAPACK asks for */
        double wq[1];
        lp     iq[1], q = -1;
        tide_blas_serial_begin();
        lapack.syevd[j.dbl]("V", "L", &n, NULL, &ld, NULL, wq, &q, iq, &q, &info, 1, 1);
        tide_blas_serial_end();
        j.lwork  = queried(&j, wq);
        j.liwork = iq[0] > 1 ? iq[0] : 1;
    }
    size_t es = es_of(&j);
    j.work_bytes = (size_t)(ld * j.n + ld + j.lwork) * es + (size_t)j.liwork * sizeof(lp);
    return job_run(&j, 4.0 * j.n * j.n * j.n);
}

/* -- linalg_qr --------------------------------------------------------------------------------- */

static lp qr_one(const job * j, int64_t b, char * work) {
    lp     m = (lp)j->m, n = (lp)j->n, k = (lp)j->k, ld = ld_of(j->m), info = 0;
    int64_t mode = j->c->p.ints[0], qcols = mode == 1 ? j->m : j->k, rrows = mode == 1 ? j->m : j->k;
    int64_t acols = j->n > qcols ? j->n : qcols;
    size_t es = es_of(j);
    char * a = work, * tau = a + (size_t)(ld * acols) * es, * r = tau + (size_t)(k > 0 ? k : 1) * es;
    char * wk = r + (size_t)(ld_of(rrows) * j->n) * es;
    load(j, &j->in[0], b, a, ld);
    if (k > 0) {
        lapack.geqrf[j->dbl](&m, &n, a, &ld, tau, wk, &j->lwork, &info);
        if (info != 0) return info;
    }
    lp rld = ld_of(rrows);
    for (int64_t col = 0; col < j->n; col++)
        for (int64_t row = 0; row < rrows; row++) put(j, r, row + col * rld, row <= col ? get(j, a, row + col * ld) : 0);
    store(j, &j->out[1], b, r, rld);
    if (mode == 2) return 0;
    lp qc = (lp)qcols;
    if (qc > 0) {
        lapack.orgqr[j->dbl](&m, &qc, &k, a, &ld, tau, wk, &j->lwork, &info);
        if (info != 0) return info;
    }
    store(j, &j->out[0], b, a, ld);
    return 0;
}

tide_status tide_cpu_linalg_qr(const tide_opcall * c) {
    job     j;
    int32_t nb = c->in[0]->ndim - 2;
    TIDE_CHECK(job_init(&j, c, qr_one, c->in[0], nb));
    j.in[0]  = mat_of(c->in[0], 2, nb);
    if (c->p.ints[0] != 2) j.out[0] = mat_of(c->out[0], 2, nb);
    j.out[1] = mat_of(c->out[1], 2, nb);
    j.m = c->in[0]->sizes[nb];
    j.n = c->in[0]->sizes[nb + 1];
    j.k = j.m < j.n ? j.m : j.n;
    int64_t mode = c->p.ints[0], qcols = mode == 1 ? j.m : j.k, rrows = qcols;
    int64_t acols = j.n > qcols ? j.n : qcols;
    lp      m = (lp)j.m, n = (lp)j.n, k = (lp)j.k, qc = (lp)qcols, ld = ld_of(j.m), info = 0, q = -1;
    j.lwork = 1;
    if (qc > 0 && j.m <= INT_MAX && acols <= INT_MAX) {   /* Q of an empty A is still the identity */
        double wq[1];
        tide_blas_serial_begin();
        if (k > 0) {
            lapack.geqrf[j.dbl](&m, &n, NULL, &ld, NULL, wq, &q, &info);
            j.lwork = queried(&j, wq);
        }
        if (mode != 2) {
            lapack.orgqr[j.dbl](&m, &qc, &k, NULL, &ld, NULL, wq, &q, &info);
            if (queried(&j, wq) > j.lwork) j.lwork = queried(&j, wq);
        }
        tide_blas_serial_end();
    }
    if (acols > INT_MAX / ld)
        return tide_error_set(TIDE_E_VALUE, "%s: a %lldx%lld Q is too large for LAPACK's 32-bit indices", tide_op_name(c->op),
                              (long long)j.m, (long long)acols);
    j.work_bytes = (size_t)(ld * acols + (j.k > 0 ? j.k : 1) + ld_of(rrows) * j.n + j.lwork) * es_of(&j);
    return job_run(&j, 2.0 * j.m * j.n * j.k);
}

/* -- linalg_svd -------------------------------------------------------------------------------- */

static lp svd_one(const job * j, int64_t b, char * work) {
    bool   full = j->c->p.ints[0] != 0, uv = j->c->p.ints[1] != 0;
    lp     m = (lp)j->m, n = (lp)j->n, info = 0, ld = ld_of(j->m);
    int64_t k = j->k, ucols = uv ? (full ? j->m : k) : 0, vrows = uv ? (full ? j->n : k) : 0;
    lp     ldu = ld_of(j->m), ldvt = ld_of(vrows);
    size_t es = es_of(j);
    char * a = work, * s = a + (size_t)(ld * j->n) * es, * u = s + (size_t)(k > 0 ? k : 1) * es;
    char * vt = u + (size_t)(ldu * (ucols > 0 ? ucols : 1)) * es, * wk = vt + (size_t)(ldvt * (j->n > 0 ? j->n : 1)) * es;
    lp *   iw = (lp *)(wk + (size_t)j->lwork * es);
    load(j, &j->in[0], b, a, ld);
    if (k > 0) {
        lapack.gesdd[j->dbl](uv ? (full ? "A" : "S") : "N", &m, &n, a, &ld, s, u, &ldu, vt, &ldvt, wk, &j->lwork, iw, &info, 1);
        if (info == -4) {   /* gesdd's answer to a NaN in A: NaN factors, as the other decompositions give */
            for (int64_t i = 0; i < k; i++) put(j, s, i, NAN);
            for (int64_t i = 0; i < ucols * ldu; i++) put(j, u, i, NAN);
            for (int64_t i = 0; i < j->n * ldvt; i++) put(j, vt, i, NAN);
            info = 0;
        }
        if (info != 0) return info;
    } else if (uv) {   /* LAPACK returns at once: the full factors of an empty matrix are identities */
        for (int64_t i = 0; i < ucols * ldu; i++) put(j, u, i, 0);
        for (int64_t i = 0; i < ucols; i++) put(j, u, i + i * ldu, 1);
        for (int64_t i = 0; i < j->n * ldvt; i++) put(j, vt, i, 0);
        for (int64_t i = 0; i < vrows; i++) put(j, vt, i + i * ldvt, 1);
    }
    store(j, &j->out[1], b, s, ld_of(k));
    if (!uv) return 0;
    /* the signs: each column of U with its row of Vh; rows of a full Vh beyond k on their own */
    for (int64_t col = 0; col < ucols; col++) {
        char * v = u + (size_t)(col * ldu) * es;
        if (get(j, v, argmax_abs(j, v, j->m, 1)) >= 0) continue;
        negate(j, v, j->m, 1);
        if (col < k) negate(j, vt + (size_t)col * es, j->n, ldvt);
    }
    for (int64_t row = k; row < vrows; row++) {
        char * v = vt + (size_t)row * es;
        if (get(j, v, argmax_abs(j, v, j->n, ldvt)) < 0) negate(j, v, j->n, ldvt);
    }
    store(j, &j->out[0], b, u, ldu);
    store(j, &j->out[2], b, vt, ldvt);
    return 0;
}

tide_status tide_cpu_linalg_svd(const tide_opcall * c) {
    job     j;
    int32_t nb = c->in[0]->ndim - 2;
    bool    full = c->p.ints[0] != 0, uv = c->p.ints[1] != 0;
    TIDE_CHECK(job_init(&j, c, svd_one, c->in[0], nb));
    j.in[0]  = mat_of(c->in[0], 2, nb);
    j.out[1] = mat_of(c->out[1], 1, nb);
    if (uv) {
        j.out[0] = mat_of(c->out[0], 2, nb);
        j.out[2] = mat_of(c->out[2], 2, nb);
    }
    j.m = c->in[0]->sizes[nb];
    j.n = c->in[0]->sizes[nb + 1];
    j.k = j.m < j.n ? j.m : j.n;
    int64_t ucols = uv ? (full ? j.m : j.k) : 0, vrows = uv ? (full ? j.n : j.k) : 0;
    lp      m = (lp)j.m, n = (lp)j.n, ld = ld_of(j.m), ldvt = ld_of(vrows), info = 0, q = -1;
    if (ucols > INT_MAX / ld || j.n > INT_MAX / ldvt)
        return tide_error_set(TIDE_E_VALUE, "%s: a %lldx%lld matrix is too large for LAPACK's 32-bit indices",
                              tide_op_name(c->op), (long long)j.m, (long long)j.n);
    j.lwork = 1;
    if (j.k > 0 && j.m <= INT_MAX && j.n <= INT_MAX) {
        double wq[1];
        lp     iq[1];
        tide_blas_serial_begin();
        lapack.gesdd[j.dbl](uv ? (full ? "A" : "S") : "N", &m, &n, NULL, &ld, NULL, NULL, &ld, NULL, &ldvt, wq, &q, iq, &info, 1);
        tide_blas_serial_end();
        j.lwork = queried(&j, wq);
    }
    size_t es = es_of(&j);
    j.work_bytes = (size_t)(ld * j.n + (j.k > 0 ? j.k : 1) + ld * (ucols > 0 ? ucols : 1) +
                            ldvt * (j.n > 0 ? j.n : 1) + j.lwork) * es +
                   (size_t)(8 * j.k + 1) * sizeof(lp);
    return job_run(&j, 8.0 * j.m * j.n * j.k);
}
