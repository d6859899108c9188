/*
 * linalg.c - matmul, mm, bmm, dot and outer: their shape rules, and one
 * kernel that sees each of them as a batch of row-major products
 * C[m,n] = A[m,k] B[k,n] with broadcast batch strides. Floats go to the GEMM
 * of blas.c (batches split across Tide's pool, each product single-threaded;
 * a lone product on OpenBLAS's threads, with cores the pool lends),
 * integers to a plain i-k-j loop. softmax and log_softmax are not here.
 */
#include "blas.h"
#include "kernels.h"

#include <stdio.h>

/* -- shape rules ---------------------------------------------------------------------------- */

static tide_status bad_ndim(const tide_opcall * c, const char * what) {
    char a[128], b[128];
    return tide_error_set(TIDE_E_SHAPE, "%s: expects %s tensors, got shapes %s and %s", tide_op_name(c->op), what,
                          tide_shape_str(c->in[0], a, sizeof a), tide_shape_str(c->in[1], b, sizeof b));
}

static tide_status bad_inner(const tide_opcall * c, int64_t ka, int64_t kb) {
    char a[128], b[128];
    return tide_error_set(TIDE_E_SHAPE, "%s: shapes %s and %s cannot be multiplied: %lld ~= %lld", tide_op_name(c->op),
                          tide_shape_str(c->in[0], a, sizeof a), tide_shape_str(c->in[1], b, sizeof b),
                          (long long)ka, (long long)kb);
}

/* NumPy's matmul: a 1-d operand becomes a row (left) or a column (right) that
 * is dropped from the result; the dims before the last two broadcast. */
tide_status tide_shape_matmul(tide_opcall * c, tide_shape_out * o) {
    const tide_tensor * a = c->in[0], * b = c->in[1];
    if (a->ndim == 0 || b->ndim == 0) return bad_ndim(c, "at least 1-d");
    int64_t ka = a->sizes[a->ndim - 1], kb = b->ndim == 1 ? b->sizes[0] : b->sizes[b->ndim - 2];
    if (ka != kb) return bad_inner(c, ka, kb);
    int32_t na = a->ndim > 2 ? a->ndim - 2 : 0, nb = b->ndim > 2 ? b->ndim - 2 : 0, n = na > nb ? na : nb;
    for (int32_t d = 0; d < n; d++) {
        int32_t ja = d - (n - na), jb = d - (n - nb);
        int64_t sa = ja >= 0 ? a->sizes[ja] : 1, sb = jb >= 0 ? b->sizes[jb] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            char x[128], y[128];
            return tide_error_set(TIDE_E_SHAPE, "%s: batch dimensions of shapes %s and %s cannot be broadcast: %lld ~= %lld",
                                  tide_op_name(c->op), tide_shape_str(a, x, sizeof x), tide_shape_str(b, y, sizeof y),
                                  (long long)sa, (long long)sb);
        }
        o->sizes[0][d] = sa == 1 ? sb : sa;
    }
    if (a->ndim >= 2) o->sizes[0][n++] = a->sizes[a->ndim - 2];
    if (b->ndim >= 2) o->sizes[0][n++] = b->sizes[b->ndim - 1];
    o->ndim[0] = n;
    return TIDE_OK;
}

tide_status tide_shape_mm(tide_opcall * c, tide_shape_out * o) {
    if (c->in[0]->ndim != 2 || c->in[1]->ndim != 2) return bad_ndim(c, "2-d");
    return tide_shape_matmul(c, o);
}

tide_status tide_shape_bmm(tide_opcall * c, tide_shape_out * o) {
    const tide_tensor * a = c->in[0], * b = c->in[1];
    if (a->ndim != 3 || b->ndim != 3) return bad_ndim(c, "3-d");
    if (a->sizes[0] != b->sizes[0]) {
        char x[128], y[128];
        return tide_error_set(TIDE_E_SHAPE, "bmm: shapes %s and %s have different batch sizes: %lld ~= %lld",
                              tide_shape_str(a, x, sizeof x), tide_shape_str(b, y, sizeof y),
                              (long long)a->sizes[0], (long long)b->sizes[0]);
    }
    return tide_shape_matmul(c, o);
}

tide_status tide_shape_dot(tide_opcall * c, tide_shape_out * o) {
    if (c->in[0]->ndim != 1 || c->in[1]->ndim != 1) return bad_ndim(c, "1-d");
    return tide_shape_matmul(c, o);
}

tide_status tide_shape_outer(tide_opcall * c, tide_shape_out * o) {
    if (c->in[0]->ndim != 1 || c->in[1]->ndim != 1) return bad_ndim(c, "1-d");
    o->ndim[0]     = 2;
    o->sizes[0][0] = c->in[0]->sizes[0];
    o->sizes[0][1] = c->in[1]->sizes[0];
    return TIDE_OK;
}

/* -- the batched product -------------------------------------------------------------------- */

/* One operand as a batch of rows x cols matrices: element (i, j) of batch
 * index (b_0..b_nb) is at base + sum b_d*bstr[d] + i*rs + j*cs. */
typedef struct {
    const char * base;
    int32_t      dtype;
    int64_t      rows, cols, rs, cs;
    int64_t      bstr[TIDE_MAX_DIMS];
    bool         trans;     /* for BLAS: stored transposed, ld the stride between its stored rows */
    int64_t      ld;
    void *       tmp;       /* a converted copy we own, or NULL */
    size_t       tmp_cap;
} operand;

typedef struct {
    int32_t  nb;                        /* batch dims of the result */
    int64_t  bsizes[TIDE_MAX_DIMS];
    int64_t  nbatch, m, n, k;
    operand  a, b;
    int32_t  ct;                        /* compute dtype */
    char *   c;                         /* contiguous [nbatch, m, n] in ct */
    /* float work split: each item is one batch's block of rows or columns */
    bool     split_n;
    int64_t  chunks, chunk;
} problem;

static void operand_init(operand * x, const tide_tensor * t, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                         int32_t nb, int32_t t_nb) {
    x->base  = tide_tensor_ptr(t);
    x->dtype = t->dtype_id;
    x->rows  = rows;
    x->cols  = cols;
    x->rs    = rows == 1 ? 0 : rs;    /* a stride over a size-1 dim says nothing */
    x->cs    = cols == 1 ? 0 : cs;
    x->tmp   = NULL;
    for (int32_t d = 0; d < nb; d++) {
        int32_t j  = d - (nb - t_nb);
        x->bstr[d] = (j >= 0 && t->sizes[j] != 1) ? t->strides[j] : 0;
    }
}

/* Whether BLAS can read the matrices in place: one of the two strides is 1
 * and the other at least the stored row length. Sets trans and ld. */
static bool blas_layout(operand * x, bool allow_trans) {
    if ((x->cs == 1 || x->cols == 1) && (x->rows == 1 || x->rs >= x->cols)) {
        x->trans = false;
        x->ld    = x->rows == 1 ? x->cols : x->rs;
        return true;
    }
    if (allow_trans && (x->rs == 1 || x->rows == 1) && (x->cols == 1 || x->cs >= x->rows)) {
        x->trans = true;
        x->ld    = x->cols == 1 ? x->rows : x->cs;
        return true;
    }
    return false;
}

/* Replaces x by a contiguous row-major copy in dtype ct. Batch dims that x
 * broadcasts (stride 0) stay broadcast: they are copied once. */
static tide_status operand_copy(operand * x, const problem * p, const char * op) {
    int64_t count = 1, mat = x->rows * x->cols;
    for (int32_t d = 0; d < p->nb; d++)
        if (x->bstr[d] != 0) count *= p->bsizes[d];
    size_t esz = tide_dtype_size(p->ct), src_esz = tide_dtype_size(x->dtype);
    x->tmp = tide_host_alloc((size_t)(count * mat) * esz, &x->tmp_cap);
    if (!x->tmp) return tide_error_set(TIDE_E_OOM, "%s: out of memory for a converted copy of an operand", op);
    int64_t idx[TIDE_MAX_DIMS] = {0};
    for (int64_t q = 0; q < count; q++) {
        int64_t off = 0;
        for (int32_t d = 0; d < p->nb; d++) off += idx[d] * x->bstr[d];
        char * dst = (char *)x->tmp + (size_t)(q * mat) * esz;
        for (int64_t r = 0; r < x->rows; r++)
            tide_convert(dst + (size_t)(r * x->cols) * esz, p->ct, 1, x->base + (off + r * x->rs) * (int64_t)src_esz,
                         x->dtype, x->cs, x->cols);
        for (int32_t d = p->nb - 1; d >= 0; d--) {   /* next index over the dims x does not broadcast */
            if (x->bstr[d] == 0) continue;
            if (++idx[d] < p->bsizes[d]) break;
            idx[d] = 0;
        }
    }
    int64_t step = mat;
    for (int32_t d = p->nb - 1; d >= 0; d--) {
        if (x->bstr[d] == 0) continue;
        x->bstr[d] = step;
        step *= p->bsizes[d];
    }
    x->base  = x->tmp;
    x->dtype = p->ct;
    x->rs    = x->rows == 1 ? 0 : x->cols;
    x->cs    = x->cols == 1 ? 0 : 1;
    return TIDE_OK;
}

/* Element offsets of batch bi in a and b. */
static void batch_offsets(const problem * p, int64_t bi, int64_t * oa, int64_t * ob) {
    int64_t a = 0, b = 0;
    for (int32_t d = p->nb - 1; d >= 0; d--) {
        int64_t i = bi % p->bsizes[d];
        bi /= p->bsizes[d];
        a += i * p->a.bstr[d];
        b += i * p->b.bstr[d];
    }
    *oa = a;
    *ob = b;
}

/* -- floats: GEMM per batch and block -------------------------------------------------------- */

/* Multiply-adds below which splitting a product costs more than it saves. */
enum { GEMM_GRAIN = 1 << 20 };

#define FLOAT_RANGE(name, T, GEMM)                                                                   \
    static void name(void * ctx, int64_t begin, int64_t end) {                                      \
        const problem * p = ctx;                                                                    \
        /* op(X)(i, j) steps: no-trans rows by ld, trans columns by ld */                           \
        int64_t ars = p->a.trans ? 1 : p->a.ld, bcs = p->b.trans ? p->b.ld : 1;                     \
        for (int64_t it = begin; it < end; it++) {                                                  \
            int64_t bi = it / p->chunks, ch = it % p->chunks, oa, ob;                               \
            batch_offsets(p, bi, &oa, &ob);                                                         \
            const T * a = (const T *)p->a.base + oa, * b = (const T *)p->b.base + ob;               \
            T * c = (T *)p->c + bi * p->m * p->n;                                                   \
            int64_t i0 = 0, j0 = 0, m = p->m, n = p->n;                                             \
            if (p->split_n) {                                                                       \
                j0 = ch * p->chunk;                                                                 \
                n  = p->n - j0 < p->chunk ? p->n - j0 : p->chunk;                                   \
            } else {                                                                                \
                i0 = ch * p->chunk;                                                                 \
                m  = p->m - i0 < p->chunk ? p->m - i0 : p->chunk;                                   \
            }                                                                                       \
            GEMM(p->a.trans, p->b.trans, m, n, p->k, 1, a + i0 * ars, p->a.ld, b + j0 * bcs, p->b.ld, 0, \
                 c + i0 * p->n + j0, p->n);                                                         \
        }                                                                                           \
    }
FLOAT_RANGE(range_f32, float, tide_blas_sgemm)
FLOAT_RANGE(range_f64, double, tide_blas_dgemm)

static void run_float(problem * p) {
    int64_t threads = tide_get_num_threads();
    tide_range_fn range = p->ct == TIDE_DTYPE_F32 ? range_f32 : range_f64;
    /* Fewer products than threads: each runs whole on OpenBLAS's own threads,
     * on cores the pool lends while it idles. Splitting a product into
     * single-threaded GEMMs instead packs each operand once per piece, and
     * OpenBLAS's single-threaded driver is slow when its M (our n) is at most
     * its P block (measured on a Zen 1 EPYC with Haswell kernels, n = 256:
     * 8 GFLOP/s on one thread, 30 on two of its own, 13 as two pieces). */
    if (p->nbatch < threads && (double)p->m * (double)p->n * (double)p->k >= GEMM_GRAIN) {
        if (tide_blas_lend_begin()) {
            p->split_n = false;
            p->chunks  = 1;
            p->chunk   = p->m;
            range(p, 0, p->nbatch);
            tide_blas_lend_end();
            return;
        }
    }
    /* Few batches: split each product into blocks of the larger output side,
     * so every thread runs one single-threaded GEMM of a share of the work. */
    p->split_n = p->n >= p->m;
    int64_t side = p->split_n ? p->n : p->m, align = p->split_n ? 16 : 8;
    p->chunks = 1;
    p->chunk  = side;
    if (p->nbatch < threads) {
        int64_t want = (threads + p->nbatch - 1) / p->nbatch;
        int64_t size = (side + want - 1) / want;
        size = (size + align - 1) / align * align;
        p->chunk  = size;
        p->chunks = (side + size - 1) / size;
    }
    int64_t items = p->nbatch * p->chunks;
    double  work  = (double)p->m * (double)p->n * (double)p->k / (double)p->chunks;
    int64_t grain = work >= GEMM_GRAIN ? 1 : (int64_t)(GEMM_GRAIN / (work > 1 ? work : 1)) + 1;
    tide_parallel_for(items, grain, 1, range, p);
}

/* -- integers: i-k-j loops, wrapping like two's complement ---------------------------------- */

#define INT_RANGE(name, T, U)                                                                       \
    static TIDE_SIMD_CLONES void name##_row(int64_t n, int64_t k, const T * restrict arow, int64_t bld, \
                                            const T * restrict b, U * restrict crow) {              \
        for (int64_t j = 0; j < n; j++) crow[j] = 0;                                                \
        for (int64_t q = 0; q < k; q++) {                                                           \
            U av = (U)arow[q];                                                                      \
            const U * restrict brow = (const U *)(b + q * bld);                                     \
            for (int64_t j = 0; j < n; j++) crow[j] = (U)(crow[j] + av * brow[j]);                  \
        }                                                                                           \
    }                                                                                               \
    static void name(void * ctx, int64_t begin, int64_t end) {                                      \
        const problem * p = ctx;                                                                    \
        for (int64_t it = begin; it < end; it++) {                                                  \
            int64_t bi = it / p->m, i = it % p->m, oa, ob;                                          \
            batch_offsets(p, bi, &oa, &ob);                                                         \
            name##_row(p->n, p->k, (const T *)p->a.base + oa + i * p->a.rs, p->b.rs,                \
                       (const T *)p->b.base + ob, (U *)((T *)p->c + (bi * p->m + i) * p->n));       \
        }                                                                                           \
    }
INT_RANGE(range_i32, int32_t, uint32_t)
INT_RANGE(range_i64, int64_t, uint64_t)
INT_RANGE(range_u8, uint8_t, uint8_t)

static void run_int(problem * p) {
    static const tide_range_fn fns[TIDE_DTYPE_COUNT] = {
        [TIDE_DTYPE_I32] = range_i32, [TIDE_DTYPE_I64] = range_i64, [TIDE_DTYPE_U8] = range_u8};
    int64_t per_row = p->n * p->k;
    int64_t grain   = per_row >= TIDE_GRAIN ? 1 : TIDE_GRAIN / (per_row > 0 ? per_row : 1) + 1;
    tide_parallel_for(p->nbatch * p->m, grain, 1, fns[p->ct], p);
}

/* -- the kernel ------------------------------------------------------------------------------ */

/* Converts the contiguous result (dtype dt, row-major over out's shape) into out. */
static void scatter_out(tide_tensor * out, const char * buf, int32_t dt) {
    size_t  esz = tide_dtype_size(dt), oesz = tide_dtype_size(out->dtype_id);
    char *  base = tide_tensor_ptr(out);
    if (out->ndim == 0) {
        tide_convert(base, out->dtype_id, 1, buf, dt, 1, 1);
        return;
    }
    int32_t nd = out->ndim;
    int64_t len = out->sizes[nd - 1], rows = out->nelem / len;
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = tide_elem_offset(nd - 1, out->sizes, out->strides, r);
        tide_convert(base + off * (int64_t)oesz, out->dtype_id, out->strides[nd - 1], buf + (size_t)(r * len) * esz,
                     dt, 1, len);
    }
}

static tide_status run_problem(const tide_opcall * c, problem * p) {
    const char *  op  = tide_op_name(c->op);
    tide_tensor * out = c->out[0];
    if (out->nelem == 0) return TIDE_OK;
    p->ct = c->compute_dtype;
    size_t esz = tide_dtype_size(p->ct);
    bool   direct = out->dtype_id == p->ct && tide_tensor_is_contiguous(out);
    void * cbuf = NULL;
    size_t cap  = 0;
    if (direct) {
        p->c = tide_tensor_ptr(out);
    } else {
        cbuf = tide_host_alloc((size_t)out->nelem * esz, &cap);
        if (!cbuf) return tide_error_set(TIDE_E_OOM, "%s: out of memory for the result", op);
        p->c = cbuf;
    }
    tide_status st = TIDE_OK;
    if (p->k == 0) {
        memset(p->c, 0, (size_t)out->nelem * esz);   /* an empty sum; all-zero bytes are 0 in every dtype */
    } else {
        bool is_float = p->ct == TIDE_DTYPE_F32 || p->ct == TIDE_DTYPE_F64;
        operand * xs[2] = {&p->a, &p->b};
        for (int i = 0; i < 2 && st == TIDE_OK; i++) {
            /* integers read rows of both operands with unit stride */
            if (xs[i]->dtype != p->ct || !blas_layout(xs[i], is_float)) {
                st = operand_copy(xs[i], p, op);
                if (st == TIDE_OK) blas_layout(xs[i], is_float);
            }
        }
        if (st == TIDE_OK) {
            if (is_float)
                run_float(p);
            else
                run_int(p);
        }
    }
    if (st == TIDE_OK && !direct) scatter_out(out, p->c, p->ct);
    if (p->a.tmp) tide_host_free(p->a.tmp, p->a.tmp_cap);
    if (p->b.tmp) tide_host_free(p->b.tmp, p->b.tmp_cap);
    if (cbuf) tide_host_free(cbuf, cap);
    return st;
}

/* matmul, and mm, bmm and dot, which are matmul with stricter shape rules. */
static tide_status matmul_kernel(const tide_opcall * c) {
    const tide_tensor * a = c->in[0], * b = c->in[1];
    problem p;
    int32_t na = a->ndim > 2 ? a->ndim - 2 : 0, nb = b->ndim > 2 ? b->ndim - 2 : 0;
    p.nb     = na > nb ? na : nb;
    p.nbatch = 1;
    for (int32_t d = 0; d < p.nb; d++) {   /* the result's leading dims are the batch */
        p.bsizes[d] = c->out[0]->sizes[d];
        p.nbatch *= p.bsizes[d];
    }
    int32_t da = a->ndim, db = b->ndim;
    p.k = a->sizes[da - 1];
    if (da == 1) {
        p.m = 1;
        operand_init(&p.a, a, 1, p.k, 0, a->strides[0], p.nb, 0);
    } else {
        p.m = a->sizes[da - 2];
        operand_init(&p.a, a, p.m, p.k, a->strides[da - 2], a->strides[da - 1], p.nb, na);
    }
    if (db == 1) {
        p.n = 1;
        operand_init(&p.b, b, p.k, 1, b->strides[0], 0, p.nb, 0);
    } else {
        p.n = b->sizes[db - 1];
        operand_init(&p.b, b, p.k, p.n, b->strides[db - 2], b->strides[db - 1], p.nb, nb);
    }
    return run_problem(c, &p);
}

tide_status tide_cpu_matmul(const tide_opcall * c) { return matmul_kernel(c); }
tide_status tide_cpu_mm(const tide_opcall * c) { return matmul_kernel(c); }
tide_status tide_cpu_bmm(const tide_opcall * c) { return matmul_kernel(c); }
tide_status tide_cpu_dot(const tide_opcall * c) { return matmul_kernel(c); }

/* outer(a, b) = a as a column times b as a row: k = 1. */
tide_status tide_cpu_outer(const tide_opcall * c) {
    const tide_tensor * a = c->in[0], * b = c->in[1];
    problem p;
    p.nb     = 0;
    p.nbatch = 1;
    p.m      = a->sizes[0];
    p.n      = b->sizes[0];
    p.k      = 1;
    operand_init(&p.a, a, p.m, 1, a->strides[0], 0, 0, 0);
    operand_init(&p.b, b, 1, p.n, 0, b->strides[0], 0, 0);
    return run_problem(c, &p);
}
