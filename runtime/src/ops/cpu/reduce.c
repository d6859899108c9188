/*
 * reduce.c - CPU kernels of the reductions (sum, mean, prod, amax, amin,
 * max_dim, min_dim, argmax, argmin, var, std, logsumexp, all, any), of the
 * ops that scan along one dim (cumsum, cumprod, cummax, cummin, softmax,
 * log_softmax) and of sort and topk. Every input is
 * seen as a contiguous [A, R, B] array in the compute dtype (R reduced),
 * gathered into a temporary when it is not one already. Shapes, dtypes and
 * dims were checked and normalised by the rules in registry.c.
 */
#include "kernels.h"

#include <stdlib.h>

/* Columns per tile of the column kernels, and elements per task of a reduction
 * split along R: partials are combined in a fixed order, so results do not
 * depend on the number of threads. */
enum { TILE = 256, CHUNK = TIDE_REDUCE_CHUNK, LANES = TIDE_REDUCE_LANES };

/* An accumulator: double for float compute dtypes, int64 for the others. */
typedef union {
    double  f;
    int64_t i;
} acc_t;

static bool is_float(int32_t d) { return d == TIDE_DTYPE_F32 || d == TIDE_DTYPE_F64; }

/* -- strided transfers between a view and a contiguous buffer -------------------------------- */

typedef struct {
    int32_t nd;
    int64_t sizes[TIDE_MAX_DIMS], strides[TIDE_MAX_DIMS];
    char *  base;         /* element 0 of the view */
    int32_t dtype;        /* of the view */
    char *  buf;          /* contiguous, row-major over sizes */
    int32_t buf_dtype;
    bool    to_view;
} xfer;

/* Drops size-1 dims and merges dims that step as one. */
static void xfer_coalesce(xfer * x) {
    int32_t n = 0;
    for (int32_t d = 0; d < x->nd; d++) {
        if (x->sizes[d] == 1) continue;
        if (n > 0 && x->strides[n - 1] == x->strides[d] * x->sizes[d]) {
            x->sizes[n - 1] *= x->sizes[d];
            x->strides[n - 1] = x->strides[d];
        } else {
            x->sizes[n]   = x->sizes[d];
            x->strides[n] = x->strides[d];
            n++;
        }
    }
    if (n == 0) {
        x->sizes[0]   = 1;
        x->strides[0] = 0;
        n             = 1;
    }
    x->nd = n;
}

static void xfer_range(void * ctx, int64_t b, int64_t e) {
    const xfer * x = ctx;
    int32_t nd = x->nd;
    int64_t idx[TIDE_MAX_DIMS], off = 0, tmp = b;
    for (int32_t d = nd - 1; d >= 0; d--) {
        idx[d] = tmp % x->sizes[d];
        tmp /= x->sizes[d];
        off += idx[d] * x->strides[d];
    }
    size_t bsz = tide_dtype_size(x->buf_dtype), esz = tide_dtype_size(x->dtype);
    char * buf = x->buf + b * (int64_t)bsz;
    int64_t len = e - b, inner = x->strides[nd - 1];
    while (len > 0) {
        int64_t run = x->sizes[nd - 1] - idx[nd - 1];
        if (run > len) run = len;
        char * mem = x->base + off * (int64_t)esz;
        if (x->to_view)
            tide_convert(mem, x->dtype, inner, buf, x->buf_dtype, 1, run);
        else
            tide_convert(buf, x->buf_dtype, 1, mem, x->dtype, inner, run);
        buf += run * (int64_t)bsz;
        len -= run;
        off += run * inner;
        idx[nd - 1] += run;
        for (int32_t d = nd - 1; d > 0 && idx[d] == x->sizes[d]; d--) {
            off -= x->sizes[d] * x->strides[d];
            idx[d] = 0;
            idx[d - 1]++;
            off += x->strides[d - 1];
        }
    }
}

/* Copies between the view t, its dims taken in the order `perm` (NULL: as they
 * are), and the contiguous buffer buf of dtype bdt, converting. */
static void xfer_run(tide_tensor * t, const int32_t * perm, void * buf, int32_t bdt, bool to_view) {
    xfer x;
    x.nd = t->ndim;
    for (int32_t d = 0; d < t->ndim; d++) {
        int32_t s     = perm ? perm[d] : d;
        x.sizes[d]    = t->sizes[s];
        x.strides[d]  = t->strides[s];
    }
    x.base      = tide_tensor_ptr(t);
    x.dtype     = t->dtype_id;
    x.buf       = buf;
    x.buf_dtype = bdt;
    x.to_view   = to_view;
    xfer_coalesce(&x);
    tide_parallel_for(t->nelem, TIDE_GRAIN, 64, xfer_range, &x);
}

/* A buffer for results of dtype dt destined for t: t's memory when it is
 * contiguous of that dtype, else a temporary (*tmp set, to be flushed). */
static void * result_buf(tide_tensor * t, int32_t dt, void ** tmp) {
    *tmp = NULL;
    if (t->dtype_id == dt && tide_tensor_is_contiguous(t)) return tide_tensor_ptr(t);
    *tmp = malloc((size_t)(t->nelem ? t->nelem : 1) * tide_dtype_size(dt));
    return *tmp;
}

static void result_flush(tide_tensor * t, int32_t dt, void * tmp) {
    if (!tmp) return;
    xfer_run(t, NULL, tmp, dt, true);
    free(tmp);
}

/* -- monoid reductions: per-row and per-column-tile loops ---------------------------------- */

typedef void (*row_fn)(const void * x, int64_t n, acc_t * r);
typedef void (*col_fn)(const void * x, int64_t rows, int64_t stride, int64_t w, acc_t * r);

/* name_row: reduces n contiguous elements; name_col: w columns over `rows` rows
 * `stride` apart. ACC the accumulator type, INIT(x0) its start (x0 the first
 * element), STEP(a, v) the update, M the acc_t member. Lanes keep the order
 * fixed and let the compiler vectorise without reassociating. */
#define MONOID(name, SUF, T, ACC, INIT, STEP, M, MT)                                             \
    static TIDE_SIMD_CLONES void name##_row_##SUF(const void * x_, int64_t n, acc_t * r) {      \
        const T * restrict x = x_;                                                               \
        T   x0 = n ? x[0] : (T)0;                                                                \
        ACC lane[LANES], a = INIT(x0);                                                           \
        for (int j = 0; j < LANES; j++) lane[j] = INIT(x0);                                      \
        int64_t i = 0;                                                                           \
        for (; i + LANES <= n; i += LANES)                                                       \
            for (int j = 0; j < LANES; j++) {                                                    \
                T v = x[i + j];                                                                  \
                STEP(lane[j], v);                                                                \
            }                                                                                    \
        for (int j = 0; j < LANES; j++) {                                                        \
            ACC v = lane[j];                                                                     \
            STEP(a, v);                                                                          \
        }                                                                                        \
        for (; i < n; i++) {                                                                     \
            T v = x[i];                                                                          \
            STEP(a, v);                                                                          \
        }                                                                                        \
        r->M = (MT)a;                                                                            \
    }                                                                                            \
    static TIDE_SIMD_CLONES void name##_col_##SUF(const void * x_, int64_t rows, int64_t stride, \
                                                  int64_t w, acc_t * r) {                        \
        const T * restrict x = x_;                                                               \
        ACC a[TILE];                                                                             \
        for (int64_t j = 0; j < w; j++) a[j] = INIT(x[j]);                                       \
        for (int64_t k = 0; k < rows; k++) {                                                     \
            const T * restrict row = x + k * stride;                                             \
            for (int64_t j = 0; j < w; j++) {                                                    \
                T v = row[j];                                                                    \
                STEP(a[j], v);                                                                   \
            }                                                                                    \
        }                                                                                        \
        for (int64_t j = 0; j < w; j++) r[j].M = (MT)a[j];                                       \
    }

#define ZERO(x0) ((void)(x0), 0)
#define ONE(x0)  ((void)(x0), 1)
#define SELF(x0) (x0)
#define ADD(a, v) ((a) += (v))
#define MUL(a, v) ((a) *= (v))
/* NaN is the extreme: once a lane holds it, it stays. */
#define MAX(a, v) ((a) = (((v) > (a)) | ((v) != (v))) ? (v) : (a))
#define MIN(a, v) ((a) = (((v) < (a)) | ((v) != (v))) ? (v) : (a))
#define AND(a, v) ((a) &= (uint8_t)((v) != 0))
#define OR(a, v)  ((a) |= (uint8_t)((v) != 0))

/* Sums and products of floats accumulate in double; of integers in uint64 (wrapping). */
#define GEN_SUMPROD(name, INIT, STEP)                                            \
    MONOID(name, f32, float, double, INIT, STEP, f, double)                     \
    MONOID(name, f64, double, double, INIT, STEP, f, double)                    \
    MONOID(name, i32, int32_t, uint64_t, INIT, STEP, i, int64_t)                \
    MONOID(name, i64, int64_t, uint64_t, INIT, STEP, i, int64_t)                \
    MONOID(name, u8, uint8_t, uint64_t, INIT, STEP, i, int64_t)
#define GEN_EXTREME(name, STEP)                                                  \
    MONOID(name, f32, float, float, SELF, STEP, f, double)                      \
    MONOID(name, f64, double, double, SELF, STEP, f, double)                    \
    MONOID(name, i32, int32_t, int32_t, SELF, STEP, i, int64_t)                 \
    MONOID(name, i64, int64_t, int64_t, SELF, STEP, i, int64_t)                 \
    MONOID(name, u8, uint8_t, uint8_t, SELF, STEP, i, int64_t)

GEN_SUMPROD(sum, ZERO, ADD)
MONOID(sum, b, uint8_t, uint64_t, ZERO, ADD, i, int64_t)
GEN_SUMPROD(prod, ONE, MUL)
MONOID(prod, b, uint8_t, uint64_t, ONE, MUL, i, int64_t)
GEN_EXTREME(max, MAX)
MONOID(max, b, uint8_t, uint8_t, SELF, MAX, i, int64_t)
GEN_EXTREME(min, MIN)
MONOID(min, b, uint8_t, uint8_t, SELF, MIN, i, int64_t)
MONOID(all, b, uint8_t, uint8_t, ONE, AND, i, int64_t)
MONOID(any, b, uint8_t, uint8_t, ZERO, OR, i, int64_t)

typedef enum { K_SUM, K_PROD, K_MAX, K_MIN, K_ALL, K_ANY } monoid_kind;

#define TABLE(name)                                                                                 \
    {[TIDE_DTYPE_F32] = name##_f32, [TIDE_DTYPE_F64] = name##_f64, [TIDE_DTYPE_I32] = name##_i32,  \
     [TIDE_DTYPE_I64] = name##_i64, [TIDE_DTYPE_U8] = name##_u8, [TIDE_DTYPE_BOOL] = name##_b}
static const row_fn rows_of[6][TIDE_DTYPE_COUNT] = {
    [K_SUM] = TABLE(sum_row), [K_PROD] = TABLE(prod_row), [K_MAX] = TABLE(max_row),
    [K_MIN] = TABLE(min_row), [K_ALL] = {[TIDE_DTYPE_BOOL] = all_row_b}, [K_ANY] = {[TIDE_DTYPE_BOOL] = any_row_b}};
static const col_fn cols_of[6][TIDE_DTYPE_COUNT] = {
    [K_SUM] = TABLE(sum_col), [K_PROD] = TABLE(prod_col), [K_MAX] = TABLE(max_col),
    [K_MIN] = TABLE(min_col), [K_ALL] = {[TIDE_DTYPE_BOOL] = all_col_b}, [K_ANY] = {[TIDE_DTYPE_BOOL] = any_col_b}};

/* Folds partial b into a, in the order the partials cover the reduced elements. */
static void combine(monoid_kind k, bool fl, acc_t * a, acc_t b) {
    switch (k) {
    case K_SUM:
        if (fl) a->f += b.f; else a->i = (int64_t)((uint64_t)a->i + (uint64_t)b.i);
        break;
    case K_PROD:
        if (fl) a->f *= b.f; else a->i = (int64_t)((uint64_t)a->i * (uint64_t)b.i);
        break;
    case K_MAX:
        if (fl) MAX(a->f, b.f); else MAX(a->i, b.i);
        break;
    case K_MIN:
        if (fl) MIN(a->f, b.f); else MIN(a->i, b.i);
        break;
    case K_ALL: a->i = a->i && b.i; break;
    case K_ANY: a->i = a->i || b.i; break;
    }
}

/* Stores an accumulator as dtype dt (float dtypes from .f, the others from .i). */
static void store_acc(void * p, int64_t i, int32_t dt, acc_t a) {
    switch (dt) {
    case TIDE_DTYPE_F32:  ((float *)p)[i] = (float)a.f; break;
    case TIDE_DTYPE_F64:  ((double *)p)[i] = a.f; break;
    case TIDE_DTYPE_I32:  ((int32_t *)p)[i] = (int32_t)(uint32_t)(uint64_t)a.i; break;
    case TIDE_DTYPE_I64:  ((int64_t *)p)[i] = a.i; break;
    case TIDE_DTYPE_U8:   ((uint8_t *)p)[i] = (uint8_t)(uint64_t)a.i; break;
    case TIDE_DTYPE_BOOL: ((uint8_t *)p)[i] = a.i != 0; break;
    }
}

/* -- the [A, R, B] view of an input -------------------------------------------------------- */

typedef struct {
    int64_t A, R, B;
    int64_t R1;          /* > 1: src is [R1, A, R] (B 1), reduced over R1 and R; else 1 */
    const char * src;    /* contiguous [A, R, B] in the compute dtype */
    void *       tmp;    /* owned copy, when src is not the input's memory */
} arb;

/* Whether contiguous x, in the compute dtype, reduces over leading and trailing
 * dims around kept ones ([N, C, H, W] over {N, H, W}: batch norm's statistics,
 * a bias's gradient): then *g is [R1, A, R] over x's own memory. */
static bool arb_outer(tide_tensor * x, const bool * red, int32_t ct, arb * g) {
    int64_t R1 = 1, A = 1, R = 1, expect = 1;
    int32_t phase = 0;   /* 0: leading reduced, 1: kept, 2: trailing reduced */
    if (x->dtype_id != ct) return false;
    for (int32_t d = x->ndim - 1; d >= 0; d--) {
        if (x->sizes[d] == 1) continue;
        if (x->strides[d] != expect) return false;
        expect *= x->sizes[d];
    }
    for (int32_t d = 0; d < x->ndim; d++) {
        if (x->sizes[d] == 1) continue;
        if (red[d] && phase == 1) phase = 2;
        else if (!red[d] && phase != 1) {
            if (phase == 2) return false;
            phase = 1;
        }
        if (phase == 0) R1 *= x->sizes[d]; else if (phase == 1) A *= x->sizes[d]; else R *= x->sizes[d];
    }
    if (phase != 2 || R1 == 1) return false;
    g->R1 = R1, g->A = A, g->R = R, g->B = 1;
    g->src = tide_tensor_ptr(x);
    g->tmp = NULL;
    return true;
}

/* Sees x as [A, R, B] with R the product of the dims flagged in red. When the
 * reduced dims are not one block (or rows_only and B > 1), the kept dims are
 * moved first and R last. Fails only when out of memory. */
static tide_status arb_init(tide_tensor * x, const bool * red, int32_t ct, bool rows_only, arb * g) {
    g->R1 = 1;
    int64_t A = 1, R = 1, B = 1;
    bool block = true;
    int32_t phase = 0;
    for (int32_t d = 0; d < x->ndim; d++) {
        if (x->sizes[d] == 1) continue;
        int32_t t = red[d] ? 1 : (phase == 0 ? 0 : 2);   /* leading kept, reduced, trailing kept */
        if (red[d] && phase == 2) block = false;
        if (red[d]) phase = 1; else if (phase == 1) phase = 2;
        if (t == 0) A *= x->sizes[d]; else if (t == 1) R *= x->sizes[d]; else B *= x->sizes[d];
    }
    if (block && rows_only && B > 1) block = false;
    g->tmp = NULL;
    if (block) {
        g->A = A; g->R = R; g->B = B;
        bool contiguous = x->dtype_id == ct;
        int64_t expect = 1;
        for (int32_t d = x->ndim - 1; d >= 0 && contiguous; d--) {
            if (x->sizes[d] == 1) continue;
            contiguous = x->strides[d] == expect;
            expect *= x->sizes[d];
        }
        if (contiguous) {
            g->src = tide_tensor_ptr(x);
            return TIDE_OK;
        }
        g->tmp = malloc((size_t)x->nelem * tide_dtype_size(ct));
        if (!g->tmp) return tide_error_set(TIDE_E_OOM, "out of memory");
        xfer_run(x, NULL, g->tmp, ct, false);
        g->src = g->tmp;
        return TIDE_OK;
    }
    int32_t perm[TIDE_MAX_DIMS], k = 0;
    int64_t kept = 1, reduced = 1;
    for (int32_t d = 0; d < x->ndim; d++)
        if (!red[d]) { perm[k++] = d; kept *= x->sizes[d]; }
    for (int32_t d = 0; d < x->ndim; d++)
        if (red[d]) { perm[k++] = d; reduced *= x->sizes[d]; }
    g->A = kept; g->R = reduced; g->B = 1;
    g->tmp = malloc((size_t)x->nelem * tide_dtype_size(ct));
    if (!g->tmp) return tide_error_set(TIDE_E_OOM, "out of memory");
    xfer_run(x, perm, g->tmp, ct, false);
    g->src = g->tmp;
    return TIDE_OK;
}

/* -- monoid driver: tasks of (row a, column tile, chunk of R) ------------------------------ */

/* With R1 > 1 each of the R1 slices of a row has its own chunks, combined in
 * slice order: part is [A][R1 * nch][B]. */
typedef struct {
    const arb * g;
    row_fn      row;
    col_fn      col;
    size_t      esz;
    int64_t     W, tiles, rch, nch, nparts;   /* nparts: R1 * nch */
    acc_t *     part;   /* [A][nparts][B] */
} monoid_job;

static void monoid_range(void * ctx, int64_t b, int64_t e) {
    const monoid_job * j = ctx;
    const arb * g = j->g;
    for (int64_t t = b; t < e; t++) {
        int64_t p = t % j->nparts, rest = t / j->nparts, tile = rest % j->tiles, a = rest / j->tiles;
        int64_t s = p / j->nch, k = p % j->nch;   /* slice of R1, chunk of R */
        int64_t r0 = k * j->rch, r1 = r0 + j->rch < g->R ? r0 + j->rch : g->R;
        int64_t b0 = tile * j->W, w = g->B - b0 < j->W ? g->B - b0 : j->W;
        const char * src = g->src + (((s * g->A + a) * g->R + r0) * g->B + b0) * (int64_t)j->esz;
        acc_t * dst = j->part + (a * j->nparts + p) * g->B + b0;
        if (g->B == 1) j->row(src, r1 - r0, dst);
        else j->col(src, r1 - r0, g->B, w, dst);
    }
}

typedef struct {
    const monoid_job * j;
    monoid_kind kind;
    bool        fl, mean;
    void *      res;
    int32_t     rdt;
} finish_job;

static void finish_range(void * ctx, int64_t b, int64_t e) {
    const finish_job * f = ctx;
    const monoid_job * j = f->j;
    int64_t B = j->g->B;
    for (int64_t o = b; o < e; o++) {
        int64_t a = o / B, bb = o % B;
        acc_t acc = j->part[(a * j->nparts) * B + bb];
        for (int64_t k = 1; k < j->nparts; k++) combine(f->kind, f->fl, &acc, j->part[(a * j->nparts + k) * B + bb]);
        if (f->mean) acc.f /= (double)(j->g->R1 * j->g->R);
        store_acc(f->res, o, f->rdt, acc);
    }
}

static tide_status run_monoid(const arb * g, monoid_kind kind, int32_t ct, bool mean, void * res) {
    monoid_job j;
    j.g     = g;
    j.row   = rows_of[kind][ct];
    j.col   = cols_of[kind][ct];
    j.esz   = tide_dtype_size(ct);
    j.W     = g->B == 1 ? 1 : g->B < TILE ? g->B : TILE;
    j.tiles = (g->B + j.W - 1) / j.W;
    j.rch   = CHUNK / j.W;
    if (j.rch < 1) j.rch = 1;
    j.nch   = (g->R + j.rch - 1) / j.rch;
    j.nparts = g->R1 * j.nch;
    if (!j.row || !j.col) return tide_error_set(TIDE_E_DTYPE, "reduce: dtype %s is not supported", tide_dtype_name(ct));
    j.part = malloc((size_t)(g->A * j.nparts * g->B) * sizeof(acc_t));
    if (!j.part) return tide_error_set(TIDE_E_OOM, "out of memory");
    int64_t n_tasks = g->A * j.tiles * j.nparts;
    int64_t per = (g->R < j.rch ? g->R : j.rch) * j.W;
    tide_parallel_for(n_tasks, per >= TIDE_GRAIN ? 1 : TIDE_GRAIN / (per ? per : 1), 1, monoid_range, &j);
    finish_job f = {&j, kind, is_float(ct), mean, res, ct};
    tide_parallel_for(g->A * g->B, TIDE_GRAIN, 1, finish_range, &f);
    free(j.part);
    return TIDE_OK;
}

/* -- row-only reductions: var, std, logsumexp, arg/extreme with index ---------------------- */

/* Variance and log-sum-exp of one row, in double (float dtypes only). */
#define ROW_STATS(SUF, T)                                                                         \
    static TIDE_SIMD_CLONES double sumsq_##SUF(const T * restrict x, int64_t n, double mean) {   \
        double lane[LANES] = {0}, s = 0;                                                          \
        int64_t i = 0;                                                                            \
        for (; i + LANES <= n; i += LANES)                                                        \
            for (int j = 0; j < LANES; j++) {                                                     \
                double d = (double)x[i + j] - mean;                                               \
                lane[j] += d * d;                                                                 \
            }                                                                                     \
        for (int j = 0; j < LANES; j++) s += lane[j];                                             \
        for (; i < n; i++) s += ((double)x[i] - mean) * ((double)x[i] - mean);                    \
        return s;                                                                                 \
    }                                                                                             \
    static double sumexp_##SUF(const T * restrict x, int64_t n, double m) {                       \
        double lane[4] = {0}, s = 0;                                                              \
        int64_t i = 0;                                                                            \
        for (; i + 4 <= n; i += 4)                                                                \
            for (int j = 0; j < 4; j++) lane[j] += exp((double)x[i + j] - m);                     \
        for (int j = 0; j < 4; j++) s += lane[j];                                                 \
        for (; i < n; i++) s += exp((double)x[i] - m);                                            \
        return s;                                                                                 \
    }
ROW_STATS(f32, float)
ROW_STATS(f64, double)

typedef enum { X_VAR, X_STD, X_LSE, X_ARGMAX, X_ARGMIN } rowx_kind;

typedef struct {
    const arb * g;
    rowx_kind   kind;
    int32_t     ct;
    double      corr;
    void *      vals;     /* [A] in ct, or NULL */
    int64_t *   idx;      /* [A] int64, or NULL */
    int64_t     base;     /* 0 or 1 (ONE_BASED) */
} rowx_job;

/* First index in x[0..n) holding m (NaN matching NaN). */
#define FIND(SUF, T)                                                                  \
    static int64_t find_##SUF(const T * x, int64_t n, T m) {                          \
        if (m != m) {                                                                 \
            for (int64_t i = 0; i < n; i++) if (x[i] != x[i]) return i;               \
        }                                                                             \
        for (int64_t i = 0; i < n; i++) if (x[i] == m) return i;                      \
        return 0;                                                                     \
    }
FIND(f32, float)
FIND(f64, double)
FIND(i32, int32_t)
FIND(i64, int64_t)
FIND(u8, uint8_t)

static void rowx_range(void * ctx, int64_t b, int64_t e) {
    const rowx_job * j = ctx;
    const arb * g = j->g;
    int64_t n = g->R;
    size_t esz = tide_dtype_size(j->ct);
    for (int64_t a = b; a < e; a++) {
        const void * x = g->src + a * n * (int64_t)esz;
        acc_t r;
        if (j->kind == X_ARGMAX || j->kind == X_ARGMIN) {
            rows_of[j->kind == X_ARGMAX ? K_MAX : K_MIN][j->ct](x, n, &r);
            int64_t i = 0;
            switch (j->ct) {
            case TIDE_DTYPE_F32: i = find_f32(x, n, (float)r.f); break;
            case TIDE_DTYPE_F64: i = find_f64(x, n, r.f); break;
            case TIDE_DTYPE_I32: i = find_i32(x, n, (int32_t)r.i); break;
            case TIDE_DTYPE_I64: i = find_i64(x, n, r.i); break;
            default:             i = find_u8(x, n, (uint8_t)r.i); break;
            }
            if (j->idx) j->idx[a] = i + j->base;
            if (j->vals) store_acc(j->vals, a, j->ct, r);
            continue;
        }
        bool f32 = j->ct == TIDE_DTYPE_F32;
        if (j->kind == X_LSE) {
            if (n == 0) {
                r.f = -INFINITY;
            } else {
                rows_of[K_MAX][j->ct](x, n, &r);
                double m = isinf(r.f) ? 0 : r.f;   /* as PyTorch: all -inf gives -inf, +inf gives inf */
                r.f = log(f32 ? sumexp_f32(x, n, m) : sumexp_f64(x, n, m)) + m;
            }
        } else {
            rows_of[K_SUM][j->ct](x, n, &r);
            double mean = r.f / (double)n;
            double ss = n ? (f32 ? sumsq_f32(x, n, mean) : sumsq_f64(x, n, mean)) : 0;
            double div = (double)n > j->corr ? (double)n - j->corr : 0;   /* n <= correction: nan or inf */
            r.f = ss / div;
            if (j->kind == X_STD) r.f = sqrt(r.f);
        }
        store_acc(j->vals, a, j->ct, r);
    }
}

/* -- reduction kernels --------------------------------------------------------------------- */

typedef enum { R_MONOID, R_MEAN, R_ROWX } red_family;

/* Runs a reduction of c->in[0] over the dims in c->p.ints into c->out[0]
 * (and the indices into c->out[1] for max_dim/min_dim). */
static tide_status reduce(const tide_opcall * c, red_family fam, int kind, bool values, bool indices) {
    tide_tensor * x = c->in[0];
    int32_t ct = c->compute_dtype;
    const char * op = tide_op_name(c->op);
    bool red[TIDE_MAX_DIMS] = {0};
    int64_t R = 1;
    for (int32_t i = 0; i < c->p.n_ints; i++) {
        int32_t d = (int32_t)c->p.ints[i];
        if (d < 0 || d >= x->ndim) continue;
        red[d] = true;
        R *= x->sizes[d];
    }
    bool extreme = (fam == R_MONOID && (kind == K_MAX || kind == K_MIN)) ||
                   (fam == R_ROWX && (kind == X_ARGMAX || kind == X_ARGMIN));
    if (R == 0 && extreme)
        return tide_error_set(TIDE_E_SHAPE, "%s: cannot reduce over an empty dimension of size 0", op);
    tide_tensor * out = c->out[0];
    if (out->nelem == 0) return TIDE_OK;

    void * vtmp = NULL, * itmp = NULL, * vals = NULL;
    int64_t * idx = NULL;
    if (values) {
        vals = result_buf(out, ct, &vtmp);
        if (!vals) return tide_error_set(TIDE_E_OOM, "out of memory");
    }
    tide_tensor * iout = indices ? (values ? c->out[1] : c->out[0]) : NULL;
    if (iout) {
        idx = result_buf(iout, TIDE_DTYPE_I64, &itmp);
        if (!idx) {
            free(vtmp);
            return tide_error_set(TIDE_E_OOM, "out of memory");
        }
    }
    tide_status st = TIDE_OK;
    if (R == 0) {   /* empty reductions: the identity, nan for mean/var, -inf for logsumexp */
        acc_t a;
        if (is_float(ct)) a.f = (fam == R_MONOID) ? (kind == K_PROD ? 1.0 : 0.0) : fam == R_MEAN ? NAN
                               : kind == X_LSE ? -INFINITY : NAN;
        else a.i = (kind == K_PROD || kind == K_ALL) ? 1 : 0;
        for (int64_t o = 0; o < out->nelem; o++) store_acc(vals, o, ct, a);
    } else {
        arb g;
        /* a monoid over leading and trailing dims reads x where it is, slice by slice
         * (copying [64,32,28,28] into [32, 64*28*28] first took most of a bias
         * gradient's time); the others see [A, R, B], gathered when needed */
        if (fam != R_ROWX && arb_outer(x, red, ct, &g)) st = TIDE_OK;
        else st = arb_init(x, red, ct, fam == R_ROWX, &g);
        if (st == TIDE_OK) {
            if (fam == R_ROWX) {
                rowx_job j = {&g, (rowx_kind)kind, ct, c->p.scalars[0], vals, idx,
                              (c->p.flags & TIDE_PARAMF_ONE_BASED) ? 1 : 0};
                int64_t grain = g.R >= TIDE_GRAIN ? 1 : TIDE_GRAIN / g.R;
                tide_parallel_for(g.A, grain, 1, rowx_range, &j);
            } else {
                st = run_monoid(&g, (monoid_kind)kind, ct, fam == R_MEAN, vals);
            }
            free(g.tmp);
        }
    }
    if (st == TIDE_OK) {
        if (values) result_flush(out, ct, vtmp);
        if (iout) result_flush(iout, TIDE_DTYPE_I64, itmp);
    } else {
        free(vtmp);
        free(itmp);
    }
    return st;
}

/* Contract of every kernel below: tide_kernel_fn (registry.c runs it after the
 * op's shape and dtype rules); errors only for an empty extreme reduction or OOM. */
tide_status tide_cpu_sum(const tide_opcall * c) { return reduce(c, R_MONOID, K_SUM, true, false); }
tide_status tide_cpu_mean(const tide_opcall * c) { return reduce(c, R_MEAN, K_SUM, true, false); }
tide_status tide_cpu_prod(const tide_opcall * c) { return reduce(c, R_MONOID, K_PROD, true, false); }
tide_status tide_cpu_amax(const tide_opcall * c) { return reduce(c, R_MONOID, K_MAX, true, false); }
tide_status tide_cpu_amin(const tide_opcall * c) { return reduce(c, R_MONOID, K_MIN, true, false); }
tide_status tide_cpu_all(const tide_opcall * c) { return reduce(c, R_MONOID, K_ALL, true, false); }
tide_status tide_cpu_any(const tide_opcall * c) { return reduce(c, R_MONOID, K_ANY, true, false); }
tide_status tide_cpu_var(const tide_opcall * c) { return reduce(c, R_ROWX, X_VAR, true, false); }
tide_status tide_cpu_std(const tide_opcall * c) { return reduce(c, R_ROWX, X_STD, true, false); }
tide_status tide_cpu_logsumexp(const tide_opcall * c) { return reduce(c, R_ROWX, X_LSE, true, false); }
tide_status tide_cpu_max_dim(const tide_opcall * c) { return reduce(c, R_ROWX, X_ARGMAX, true, true); }
tide_status tide_cpu_min_dim(const tide_opcall * c) { return reduce(c, R_ROWX, X_ARGMIN, true, true); }
tide_status tide_cpu_argmax(const tide_opcall * c) { return reduce(c, R_ROWX, X_ARGMAX, false, true); }
tide_status tide_cpu_argmin(const tide_opcall * c) { return reduce(c, R_ROWX, X_ARGMIN, false, true); }

/* -- scans along one dim: cumsum, softmax, log_softmax -------------------------------------- */

typedef enum { S_CUMSUM, S_CUMPROD, S_SOFTMAX, S_LOGSOFTMAX } scan_kind;

/* One task: row a, column tile b0..b0+w of the [A, R, B] input x into y. */
#define SCAN(SUF, T, ACC)                                                                        \
    static void cumsum_##SUF(const T * restrict x, T * restrict y, int64_t R, int64_t B,        \
                             int64_t w) {                                                        \
        ACC a[TILE] = {0};                                                                       \
        for (int64_t r = 0; r < R; r++)                                                          \
            for (int64_t j = 0; j < w; j++) {                                                    \
                a[j] += (ACC)x[r * B + j];                                                       \
                y[r * B + j] = (T)a[j];                                                          \
            }                                                                                    \
    }
SCAN(f32, float, double)
SCAN(f64, double, double)
SCAN(i32, int32_t, uint32_t)
SCAN(i64, int64_t, uint64_t)
SCAN(u8, uint8_t, uint8_t)

/* cumprod in the same way: floats in double, integers wrapping in their width. */
#define SCANP(SUF, T, ACC)                                                                       \
    static void cumprod_##SUF(const T * restrict x, T * restrict y, int64_t R, int64_t B,       \
                              int64_t w) {                                                       \
        ACC a[TILE];                                                                             \
        for (int64_t j = 0; j < w; j++) a[j] = 1;                                                \
        for (int64_t r = 0; r < R; r++)                                                          \
            for (int64_t j = 0; j < w; j++) {                                                    \
                a[j] *= (ACC)x[r * B + j];                                                       \
                y[r * B + j] = (T)a[j];                                                          \
            }                                                                                    \
    }
SCANP(f32, float, double)
SCANP(f64, double, double)
SCANP(i32, int32_t, uint32_t)
SCANP(i64, int64_t, uint64_t)
SCANP(u8, uint8_t, uint32_t)
SCANP(b, uint8_t, uint8_t)   /* bool: whether every element so far is true (0/1 multiply) */

/* A bool cumsum: whether any element so far is true (a count would store 2,
 * 3, ... in a bool, which eq and other bool ops then misread, and 256 trues
 * would wrap to false). */
static void cumsum_b(const uint8_t * restrict x, uint8_t * restrict y, int64_t R, int64_t B, int64_t w) {
    uint8_t a[TILE] = {0};
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < w; j++) {
            a[j] |= x[r * B + j] != 0;
            y[r * B + j] = a[j];
        }
}

#define SOFTMAX(SUF, T, EXP, LOG)                                                                 \
    static void softmax_##SUF(const T * restrict x, T * restrict y, int64_t R, int64_t B,        \
                              int64_t w, bool logs) {                                            \
        T m[TILE];                                                                               \
        double s[TILE];                                                                          \
        for (int64_t j = 0; j < w; j++) { m[j] = x[j]; s[j] = 0; }                               \
        for (int64_t r = 1; r < R; r++)                                                          \
            for (int64_t j = 0; j < w; j++) MAX(m[j], x[r * B + j]);                             \
        for (int64_t r = 0; r < R; r++)                                                          \
            for (int64_t j = 0; j < w; j++) {                                                    \
                T e = EXP(x[r * B + j] - m[j]);                                                  \
                s[j] += e;                                                                       \
                if (!logs) y[r * B + j] = e;                                                     \
            }                                                                                    \
        for (int64_t j = 0; j < w; j++) s[j] = logs ? LOG(s[j]) : 1.0 / s[j];                    \
        for (int64_t r = 0; r < R; r++)                                                          \
            for (int64_t j = 0; j < w; j++) {                                                    \
                if (logs) y[r * B + j] = (T)((double)(x[r * B + j] - m[j]) - s[j]);             \
                else y[r * B + j] = (T)(y[r * B + j] * s[j]);                                    \
            }                                                                                    \
    }
SOFTMAX(f32, float, expf, log)
SOFTMAX(f64, double, exp, log)

/* softmax_f32's steps over one contiguous row (a softmax over the last dim),
 * in loops GCC vectorises: the max over 16 lanes (of the non-NaN elements; a
 * NaN makes every result NaN through the sum anyway); the
 * differences x - m in float32 and their exp through the exp op's own loop
 * (transcend.c, within 1.6 ulp), a chunk at a time; the sum in double over
 * LANES accumulators; then the scaling (or, for log_softmax, the shift) in
 * double, rounded once. As softmax_f32 with width 1, it took 4 ns an element,
 * most of it glibc's expf and a serial chain of double adds. */
extern const tide_ew_loop tide_loops_exp[TIDE_DTYPE_COUNT];
static TIDE_SIMD_CLONES __attribute__((optimize("no-trapping-math"))) void
softmax_row_f32(const float * restrict x, float * restrict y, int64_t R, bool logs) {
    enum { CH = 1024, ML = 16 };
    float m8[ML];
    for (int j = 0; j < ML; j++) m8[j] = -__builtin_inff();
    int64_t r = 0;
    for (; r + ML <= R; r += ML)
        for (int j = 0; j < ML; j++) m8[j] = x[r + j] > m8[j] ? x[r + j] : m8[j];
    for (; r < R; r++) m8[0] = x[r] > m8[0] ? x[r] : m8[0];
    float m = m8[0];
    for (int j = 1; j < ML; j++) m = m8[j] > m ? m8[j] : m;
    float  d[CH], e[CH];
    double lane[LANES] = {0};
    for (int64_t r0 = 0; r0 < R; r0 += CH) {
        int64_t n = R - r0 < CH ? R - r0 : CH;
        for (int64_t i = 0; i < n; i++) d[i] = x[r0 + i] - m;
        float *      ex    = logs ? e : y + r0;
        const void * in[1] = {d};
        tide_loops_exp[TIDE_DTYPE_F32](n, 0, ex, in, NULL);
        int64_t i = 0;
        for (; i + LANES <= n; i += LANES)
            for (int j = 0; j < LANES; j++) lane[j] += ex[i + j];
        for (int j = 0; i < n; i++, j++) lane[j] += ex[i];
    }
    double s = 0;
    for (int j = 0; j < LANES; j++) s += lane[j];
    if (logs) {
        double ls = log(s);
        for (int64_t i = 0; i < R; i++) y[i] = (float)((double)(x[i] - m) - ls);
    } else {
        double inv = 1.0 / s;
        for (int64_t i = 0; i < R; i++) y[i] = (float)(y[i] * inv);
    }
}

typedef struct {
    const arb * g;
    char *      y;
    scan_kind   kind;
    int32_t     ct;
    int64_t     W, tiles;
} scan_job;

static void scan_range(void * ctx, int64_t b, int64_t e) {
    const scan_job * j = ctx;
    const arb * g = j->g;
    size_t esz = tide_dtype_size(j->ct);
    for (int64_t t = b; t < e; t++) {
        int64_t a = t / j->tiles, b0 = (t % j->tiles) * j->W, w = g->B - b0 < j->W ? g->B - b0 : j->W;
        int64_t off = (a * g->R * g->B + b0) * (int64_t)esz;
        const void * x = g->src + off;
        void * y = j->y + off;
        if (j->kind == S_CUMPROD) {
            switch (j->ct) {
            case TIDE_DTYPE_F32: cumprod_f32(x, y, g->R, g->B, w); break;
            case TIDE_DTYPE_F64: cumprod_f64(x, y, g->R, g->B, w); break;
            case TIDE_DTYPE_I32: cumprod_i32(x, y, g->R, g->B, w); break;
            case TIDE_DTYPE_I64: cumprod_i64(x, y, g->R, g->B, w); break;
            case TIDE_DTYPE_U8:  cumprod_u8(x, y, g->R, g->B, w); break;
            default:             cumprod_b(x, y, g->R, g->B, w); break;
            }
            continue;
        }
        if (j->kind != S_CUMSUM) {
            if (j->ct == TIDE_DTYPE_F32 && g->B == 1) softmax_row_f32(x, y, g->R, j->kind == S_LOGSOFTMAX);
            else if (j->ct == TIDE_DTYPE_F32) softmax_f32(x, y, g->R, g->B, w, j->kind == S_LOGSOFTMAX);
            else softmax_f64(x, y, g->R, g->B, w, j->kind == S_LOGSOFTMAX);
            continue;
        }
        switch (j->ct) {
        case TIDE_DTYPE_F32: cumsum_f32(x, y, g->R, g->B, w); break;
        case TIDE_DTYPE_F64: cumsum_f64(x, y, g->R, g->B, w); break;
        case TIDE_DTYPE_I32: cumsum_i32(x, y, g->R, g->B, w); break;
        case TIDE_DTYPE_I64: cumsum_i64(x, y, g->R, g->B, w); break;
        case TIDE_DTYPE_U8:  cumsum_u8(x, y, g->R, g->B, w); break;
        default:             cumsum_b(x, y, g->R, g->B, w); break;
        }
    }
}

static tide_status scan(const tide_opcall * c, scan_kind kind) {
    tide_tensor * x = c->in[0], * out = c->out[0];
    int32_t ct = c->compute_dtype;
    if (out->nelem == 0) return TIDE_OK;
    bool red[TIDE_MAX_DIMS] = {0};
    if (x->ndim > 0) red[c->p.ints[0]] = true;
    arb g;
    TIDE_CHECK(arb_init(x, red, ct, false, &g));   /* one dim: always a block */
    void * ytmp;
    char * y = result_buf(out, ct, &ytmp);
    if (!y) {
        free(g.tmp);
        return tide_error_set(TIDE_E_OOM, "out of memory");
    }
    scan_job j = {&g, y, kind, ct, g.B < TILE ? g.B : TILE, 0};
    j.tiles = (g.B + j.W - 1) / j.W;
    int64_t per = g.R * j.W;
    tide_parallel_for(g.A * j.tiles, per >= TIDE_GRAIN ? 1 : TIDE_GRAIN / per, 1, scan_range, &j);
    free(g.tmp);
    result_flush(out, ct, ytmp);
    return TIDE_OK;
}

tide_status tide_cpu_cumsum(const tide_opcall * c) { return scan(c, S_CUMSUM); }
tide_status tide_cpu_cumprod(const tide_opcall * c) { return scan(c, S_CUMPROD); }
tide_status tide_cpu_softmax(const tide_opcall * c) { return scan(c, S_SOFTMAX); }
tide_status tide_cpu_log_softmax(const tide_opcall * c) { return scan(c, S_LOGSOFTMAX); }

/* -- sort and topk along one dim ------------------------------------------------------------ */

/* Each line (R elements B apart in the [A, R, B] input) is copied into (key,
 * position) pairs, merge-sorted (stable: equal keys keep their order, in both
 * directions) and written back: the first K of them, values and positions.
 * NaN sorts above everything, as in PyTorch; -0 and +0 are equal. topk with
 * k much below R keeps the k best in a bounded insertion buffer instead. */
#define SORTER(SUF, T, ISNAN)                                                                     \
    typedef struct { T k; int64_t i; } pair_##SUF;                                               \
    /* whether a goes strictly before b */                                                       \
    static inline bool before_##SUF(const pair_##SUF * a, const pair_##SUF * b, bool desc) {      \
        bool an = ISNAN(a->k), bn = ISNAN(b->k);                                                  \
        if (an || bn) return desc ? an && !bn : bn && !an;                                        \
        return desc ? a->k > b->k : a->k < b->k;                                                  \
    }                                                                                             \
    static void msort_##SUF(pair_##SUF * v, pair_##SUF * tmp, int64_t n, bool desc) {            \
        enum { RUN = 16 };                                                                        \
        for (int64_t s = 0; s < n; s += RUN) {   /* insertion-sorted runs */                     \
            int64_t e = s + RUN < n ? s + RUN : n;                                                \
            for (int64_t i = s + 1; i < e; i++) {                                                 \
                pair_##SUF x = v[i];                                                              \
                int64_t    j = i;                                                                 \
                for (; j > s && before_##SUF(&x, &v[j - 1], desc); j--) v[j] = v[j - 1];          \
                v[j] = x;                                                                         \
            }                                                                                     \
        }                                                                                         \
        pair_##SUF * a = v, * b = tmp;                                                            \
        for (int64_t w = RUN; w < n; w *= 2) {   /* bottom-up merges, left first on ties */      \
            for (int64_t s = 0; s < n; s += 2 * w) {                                              \
                int64_t m = s + w < n ? s + w : n, e = s + 2 * w < n ? s + 2 * w : n;             \
                int64_t i = s, j = m, o = s;                                                      \
                while (i < m && j < e) b[o++] = before_##SUF(&a[j], &a[i], desc) ? a[j++] : a[i++]; \
                while (i < m) b[o++] = a[i++];                                                    \
                while (j < e) b[o++] = a[j++];                                                    \
            }                                                                                     \
            pair_##SUF * t = a; a = b; b = t;                                                     \
        }                                                                                         \
        if (a != v) memcpy(v, a, (size_t)n * sizeof *v);                                          \
    }                                                                                             \
    /* the first k of n in order, into v[0..k): an insertion buffer of k */                      \
    static void select_##SUF(pair_##SUF * v, int64_t n, int64_t k, bool desc) {                   \
        int64_t have = 0;                                                                         \
        for (int64_t i = 0; i < n; i++) {                                                         \
            pair_##SUF x = v[i];                                                                  \
            if (have == k && !before_##SUF(&x, &v[k - 1], desc)) continue;                        \
            int64_t j = have < k ? have++ : k - 1;                                                \
            for (; j > 0 && before_##SUF(&x, &v[j - 1], desc); j--) v[j] = v[j - 1];              \
            v[j] = x;                                                                             \
        }                                                                                         \
    }                                                                                             \
    static void sort_line_##SUF(const T * x, int64_t R, int64_t B, int64_t K, bool desc,          \
                                pair_##SUF * buf, T * y, int64_t * yi, int64_t base) {            \
        for (int64_t r = 0; r < R; r++) buf[r] = (pair_##SUF){x[r * B], r};                       \
        if (K < R && K <= 64 && K * 16 <= R) select_##SUF(buf, R, K, desc);                       \
        else msort_##SUF(buf, buf + R, R, desc);                                                  \
        for (int64_t r = 0; r < K; r++) {                                                         \
            y[r * B]  = buf[r].k;                                                                 \
            yi[r * B] = buf[r].i + base;                                                          \
        }                                                                                         \
    }
#define NEVER_NAN(x) ((void)(x), false)
#define IS_NAN(x) ((x) != (x))
SORTER(f32, float, IS_NAN)
SORTER(f64, double, IS_NAN)
SORTER(i32, int32_t, NEVER_NAN)
SORTER(i64, int64_t, NEVER_NAN)
SORTER(u8, uint8_t, NEVER_NAN)

typedef struct {
    const arb * g;
    char *      y;
    int64_t *   yi;
    int32_t     ct;
    int64_t     K, base;
    bool        desc;
    int         oom;   /* a task could not get its buffer */
} sort_job;

static void sort_range(void * ctx, int64_t b, int64_t e) {
    sort_job * j = ctx;
    const arb * g = j->g;
    int64_t R = g->R, B = g->B, K = j->K;
    size_t esz = tide_dtype_size(j->ct);
    /* the pairs and the merge's second buffer: 16 bytes a pair at most */
    char * buf = malloc((size_t)(2 * R) * 16);
    if (!buf) {
        __atomic_store_n(&j->oom, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t t = b; t < e; t++) {
        int64_t a = t / B, col = t % B;
        const char * x = g->src + (a * R * B + col) * (int64_t)esz;
        char *    y  = j->y + (a * K * B + col) * (int64_t)esz;
        int64_t * yi = j->yi + a * K * B + col;
        switch (j->ct) {
        case TIDE_DTYPE_F32: sort_line_f32((const void *)x, R, B, K, j->desc, (void *)buf, (void *)y, yi, j->base); break;
        case TIDE_DTYPE_F64: sort_line_f64((const void *)x, R, B, K, j->desc, (void *)buf, (void *)y, yi, j->base); break;
        case TIDE_DTYPE_I32: sort_line_i32((const void *)x, R, B, K, j->desc, (void *)buf, (void *)y, yi, j->base); break;
        case TIDE_DTYPE_I64: sort_line_i64((const void *)x, R, B, K, j->desc, (void *)buf, (void *)y, yi, j->base); break;
        default:             sort_line_u8((const void *)x, R, B, K, j->desc, (void *)buf, (void *)y, yi, j->base); break;
        }
    }
    free(buf);
}

static tide_status sort_along(const tide_opcall * c, int32_t dim, int64_t K, bool desc) {
    tide_tensor * x = c->in[0], * vals = c->out[0], * idx = c->out[1];
    int32_t ct = c->compute_dtype;
    if (vals->nelem == 0 || K == 0) return TIDE_OK;
    bool red[TIDE_MAX_DIMS] = {0};
    if (x->ndim > 0) red[dim] = true;
    arb g;
    TIDE_CHECK(arb_init(x, red, ct, false, &g));   /* one dim: always a block */
    void * ytmp, * itmp = NULL;
    char * y = result_buf(vals, ct, &ytmp);
    int64_t * yi = y ? result_buf(idx, TIDE_DTYPE_I64, &itmp) : NULL;
    sort_job j = {&g, y, yi, ct, K, (c->p.flags & TIDE_PARAMF_ONE_BASED) ? 1 : 0, desc, 0};
    if (y && yi) {
        int64_t per = g.R ? g.R : 1;
        tide_parallel_for(g.A * g.B, per >= TIDE_GRAIN ? 1 : TIDE_GRAIN / per, 1, sort_range, &j);
    }
    free(g.tmp);
    if (!y || !yi || j.oom) {
        free(ytmp), free(itmp);
        return tide_error_set(TIDE_E_OOM, "%s: out of memory sorting lines of %lld elements", tide_op_name(c->op),
                              (long long)g.R);
    }
    result_flush(vals, ct, ytmp);
    result_flush(idx, TIDE_DTYPE_I64, itmp);
    return TIDE_OK;
}

/* sort: x's shape twice; ints[0] the dim (normalised), ints[1] descending. */
tide_status tide_shape_sort(tide_opcall * c, tide_shape_out * o) {
    bool desc = c->p.n_ints > 1 && c->p.ints[1] != 0;
    TIDE_CHECK(tide_shape_first_dim(c, o));
    c->p.ints[1] = desc;
    c->p.n_ints  = 2;
    o->ndim[1]   = o->ndim[0];
    memcpy(o->sizes[1], o->sizes[0], sizeof o->sizes[0]);
    return TIDE_OK;
}

/* topk: x's shape with k along the dim; ints dim (normalised), k, largest. */
tide_status tide_shape_topk(tide_opcall * c, tide_shape_out * o) {
    const char * op = tide_op_name(c->op);
    if (c->p.n_ints < 2) return tide_error_set(TIDE_E_VALUE, "%s: takes a dim and k", op);
    int64_t k = c->p.ints[1];
    bool largest = c->p.n_ints < 3 || c->p.ints[2] != 0;
    int32_t d;
    TIDE_CHECK(tide_wrap_dim(op, c->p.ints[0], c->in[0]->ndim, &d));
    int64_t n = c->in[0]->ndim ? c->in[0]->sizes[d] : 1;
    if (c->in[0]->ndim == 0 && k != 1)   /* a 0-d result holds one element */
        return tide_error_set(TIDE_E_INDEX, "%s: k = %lld is out of range for a 0-d tensor (k must be 1)", op,
                              (long long)k);
    if (k < 0 || k > n)
        return tide_error_set(TIDE_E_INDEX, "%s: k = %lld is out of range for dimension %d of size %lld", op,
                              (long long)k, d + 1, (long long)n);
    c->p.ints[0] = d, c->p.ints[2] = largest, c->p.n_ints = 3;
    TIDE_CHECK(tide_shape_first(c, o));
    if (c->in[0]->ndim) o->sizes[0][d] = k;
    o->ndim[1] = o->ndim[0];
    memcpy(o->sizes[1], o->sizes[0], sizeof o->sizes[0]);
    return TIDE_OK;
}

tide_status tide_cpu_sort(const tide_opcall * c) {
    int32_t dim = (int32_t)c->p.ints[0];
    int64_t R   = c->in[0]->ndim ? c->in[0]->sizes[dim] : 1;
    return sort_along(c, dim, R, c->p.ints[1] != 0);
}

tide_status tide_cpu_topk(const tide_opcall * c) {
    return sort_along(c, (int32_t)c->p.ints[0], c->p.ints[1], c->p.ints[2] != 0);
}

/* -- searchsorted: where values would go in sorted rows ------------------------------------- */

/* values' shape; a sorted sequence of more than one dim has rows [..., M]
 * whose leading dims are the values' own. */
tide_status tide_shape_searchsorted(tide_opcall * c, tide_shape_out * o) {
    const tide_tensor * s = c->in[0], * v = c->in[1];
    const char * op = tide_op_name(c->op);
    char a[128], b[128];
    if (s->ndim == 0) return tide_error_set(TIDE_E_SHAPE, "%s: the sorted sequence must have a dimension, got a 0-d tensor", op);
    if (s->ndim > 1) {
        bool ok = v->ndim == s->ndim;
        for (int32_t d = 0; ok && d < s->ndim - 1; d++) ok = s->sizes[d] == v->sizes[d];
        if (!ok)
            return tide_error_set(TIDE_E_SHAPE,
                                  "%s: a sorted sequence of shape %s takes values with the same leading dimensions, got %s",
                                  op, tide_shape_str(s, a, sizeof a), tide_shape_str(v, b, sizeof b));
    }
    c->p.ints[0] = c->p.n_ints > 0 && c->p.ints[0] != 0;
    c->p.n_ints  = 1;
    o->ndim[0]   = v->ndim;
    memcpy(o->sizes[0], v->sizes, (size_t)v->ndim * sizeof(int64_t));
    return TIDE_OK;
}

/* The first place in row[0..M) where v goes: before the first element not below
 * v (left) or above v (right), NaN above every number, as sort orders them. */
#define SEARCHER(SUF, T, ISNAN)                                                                  \
    static inline bool below_##SUF(T a, T b) { return a < b || (!ISNAN(a) && ISNAN(b)); }       \
    static int64_t search_##SUF(const T * row, int64_t M, T v, bool right) {                     \
        int64_t lo = 0, hi = M;                                                                  \
        while (lo < hi) {                                                                        \
            int64_t mid = lo + (hi - lo) / 2;                                                    \
            if (right ? !below_##SUF(v, row[mid]) : below_##SUF(row[mid], v)) lo = mid + 1;      \
            else hi = mid;                                                                       \
        }                                                                                        \
        return lo;                                                                               \
    }
SEARCHER(f32, float, IS_NAN)
SEARCHER(f64, double, IS_NAN)
SEARCHER(i32, int32_t, NEVER_NAN)
SEARCHER(i64, int64_t, NEVER_NAN)
SEARCHER(u8, uint8_t, NEVER_NAN)

typedef struct {
    const char * s, * v;
    int64_t *    y;
    int32_t      ct;
    int64_t      M, K, base;   /* K: values per row (0: every value searches the one row) */
    bool         right;
} search_job;

static void search_range(void * ctx, int64_t b, int64_t e) {
    const search_job * j = ctx;
    for (int64_t i = b; i < e; i++) {
        int64_t row = j->K ? i / j->K * j->M : 0, r;
        switch (j->ct) {
        case TIDE_DTYPE_F32: r = search_f32((const float *)j->s + row, j->M, ((const float *)j->v)[i], j->right); break;
        case TIDE_DTYPE_F64: r = search_f64((const double *)j->s + row, j->M, ((const double *)j->v)[i], j->right); break;
        case TIDE_DTYPE_I32: r = search_i32((const int32_t *)j->s + row, j->M, ((const int32_t *)j->v)[i], j->right); break;
        case TIDE_DTYPE_I64: r = search_i64((const int64_t *)j->s + row, j->M, ((const int64_t *)j->v)[i], j->right); break;
        default:             r = search_u8((const uint8_t *)j->s + row, j->M, ((const uint8_t *)j->v)[i], j->right); break;
        }
        j->y[i] = r + j->base;
    }
}

/* t as contiguous memory of dtype ct: its own, or *tmp (to free) */
static const char * dense_as(tide_tensor * t, int32_t ct, void ** tmp) {
    *tmp = NULL;
    if (t->dtype_id == ct && tide_tensor_is_contiguous(t)) return tide_tensor_ptr(t);
    *tmp = malloc((size_t)(t->nelem ? t->nelem : 1) * tide_dtype_size(ct));
    if (*tmp) xfer_run(t, NULL, *tmp, ct, false);
    return *tmp;
}

tide_status tide_cpu_searchsorted(const tide_opcall * c) {
    tide_tensor * s = c->in[0], * v = c->in[1], * out = c->out[0];
    int32_t ct = c->compute_dtype;
    if (out->nelem == 0) return TIDE_OK;
    void * stmp, * vtmp, * ytmp = NULL;
    const char * sp = dense_as(s, ct, &stmp);
    const char * vp = sp ? dense_as(v, ct, &vtmp) : (vtmp = NULL);
    int64_t * y = vp ? result_buf(out, TIDE_DTYPE_I64, &ytmp) : NULL;
    if (!y) {
        free(stmp), free(vtmp), free(ytmp);
        return tide_error_set(TIDE_E_OOM, "searchsorted: out of memory");
    }
    int64_t M = s->sizes[s->ndim - 1];
    search_job j = {sp, vp, y, ct, M, s->ndim > 1 ? v->sizes[v->ndim - 1] : 0,
                    (c->p.flags & TIDE_PARAMF_ONE_BASED) ? 1 : 0, c->p.ints[0] != 0};
    /* a search costs about log2(M) compares: a few hundred searches make a task */
    tide_parallel_for(out->nelem, TIDE_GRAIN / 16 > 1 ? TIDE_GRAIN / 16 : 1, 1, search_range, &j);
    free(stmp), free(vtmp);
    result_flush(out, TIDE_DTYPE_I64, ytmp);
    return TIDE_OK;
}

/* -- cummax and cummin: the running extreme and where it was found --------------------------- */

/* As PyTorch: a NaN, once met, is the extreme from there on (its index the
 * first NaN's); an element equal to the extreme takes its place, so the index
 * is the last of equal ones. */
#define CUMEXT(SUF, T, ISNAN)                                                                    \
    static void cumext_##SUF(const T * restrict x, T * restrict y, int64_t * restrict yi,        \
                             int64_t R, int64_t B, int64_t w, bool mx, int64_t base) {          \
        T       m[TILE];                                                                         \
        int64_t at[TILE];                                                                        \
        for (int64_t r = 0; r < R; r++)                                                          \
            for (int64_t j = 0; j < w; j++) {                                                    \
                T v = x[r * B + j];                                                              \
                if (r == 0 || (!ISNAN(m[j]) && (ISNAN(v) || (mx ? v >= m[j] : v <= m[j]))))      \
                    m[j] = v, at[j] = r;                                                         \
                y[r * B + j]  = m[j];                                                            \
                yi[r * B + j] = at[j] + base;                                                    \
            }                                                                                    \
    }
CUMEXT(f32, float, IS_NAN)
CUMEXT(f64, double, IS_NAN)
CUMEXT(i32, int32_t, NEVER_NAN)
CUMEXT(i64, int64_t, NEVER_NAN)
CUMEXT(u8, uint8_t, NEVER_NAN)

typedef struct {
    const arb * g;
    char *      y;
    int64_t *   yi;
    int32_t     ct;
    int64_t     W, tiles, base;
    bool        mx;
} cumext_job;

static void cumext_range(void * ctx, int64_t b, int64_t e) {
    const cumext_job * j = ctx;
    const arb * g = j->g;
    size_t esz = tide_dtype_size(j->ct);
    for (int64_t t = b; t < e; t++) {
        int64_t a = t / j->tiles, b0 = (t % j->tiles) * j->W, w = g->B - b0 < j->W ? g->B - b0 : j->W;
        int64_t el = a * g->R * g->B + b0;
        const void * x = g->src + el * (int64_t)esz;
        void * y = j->y + el * (int64_t)esz;
        int64_t * yi = j->yi + el;
        switch (j->ct) {
        case TIDE_DTYPE_F32: cumext_f32(x, y, yi, g->R, g->B, w, j->mx, j->base); break;
        case TIDE_DTYPE_F64: cumext_f64(x, y, yi, g->R, g->B, w, j->mx, j->base); break;
        case TIDE_DTYPE_I32: cumext_i32(x, y, yi, g->R, g->B, w, j->mx, j->base); break;
        case TIDE_DTYPE_I64: cumext_i64(x, y, yi, g->R, g->B, w, j->mx, j->base); break;
        default:             cumext_u8(x, y, yi, g->R, g->B, w, j->mx, j->base); break;
        }
    }
}

static tide_status cumext(const tide_opcall * c, bool mx) {
    tide_tensor * x = c->in[0], * vals = c->out[0], * idx = c->out[1];
    int32_t ct = c->compute_dtype;
    if (vals->nelem == 0) return TIDE_OK;
    bool red[TIDE_MAX_DIMS] = {0};
    if (x->ndim > 0) red[c->p.ints[0]] = true;
    arb g;
    TIDE_CHECK(arb_init(x, red, ct, false, &g));
    void * ytmp, * itmp = NULL;
    char * y = result_buf(vals, ct, &ytmp);
    int64_t * yi = y ? result_buf(idx, TIDE_DTYPE_I64, &itmp) : NULL;
    if (!y || !yi) {
        free(g.tmp), free(ytmp), free(itmp);
        return tide_error_set(TIDE_E_OOM, "%s: out of memory", tide_op_name(c->op));
    }
    cumext_job j = {&g, y, yi, ct, g.B < TILE ? g.B : TILE, 0, (c->p.flags & TIDE_PARAMF_ONE_BASED) ? 1 : 0, mx};
    j.tiles = (g.B + j.W - 1) / j.W;
    int64_t per = g.R * j.W;
    tide_parallel_for(g.A * j.tiles, per >= TIDE_GRAIN ? 1 : TIDE_GRAIN / per, 1, cumext_range, &j);
    free(g.tmp);
    result_flush(vals, ct, ytmp);
    result_flush(idx, TIDE_DTYPE_I64, itmp);
    return TIDE_OK;
}

/* cummax/cummin: x's shape twice; ints[0] the dim (normalised). */
tide_status tide_shape_first_dim2(tide_opcall * c, tide_shape_out * o) {
    TIDE_CHECK(tide_shape_first_dim(c, o));
    o->ndim[1] = o->ndim[0];
    memcpy(o->sizes[1], o->sizes[0], sizeof o->sizes[0]);
    return TIDE_OK;
}

tide_status tide_cpu_cummax(const tide_opcall * c) { return cumext(c, true); }
tide_status tide_cpu_cummin(const tide_opcall * c) { return cumext(c, false); }
