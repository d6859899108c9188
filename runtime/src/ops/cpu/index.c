/*
 * index.c - ops that move elements by index tensors or masks: index_select,
 * gather, scatter, scatter_add, index_add, masked_select, and their shape
 * rules. Index tensors (int32 or int64, any strides) are read once into an
 * array of checked 0-based int64 before anything is written, so a bad index
 * leaves the destination untouched. Whole-tensor copies (x into the result,
 * a temporary into a strided `out`) are shape.c's tide_copy_view.
 */
#include "kernels.h"
#include "../../graph/graph.h"

#include <stdlib.h>

/* shape.c: copies src (broadcast, converted) into dst. TODO(lead): kernels.h. */
TIDE_INTERNAL tide_status tide_copy_view(tide_tensor * dst, tide_tensor * src);

/* -- shape-rule helpers --------------------------------------------------------------------- */

static int category(int32_t d) { return d == TIDE_DTYPE_BOOL ? 0 : tide_dtype_is_float(d) ? 2 : 1; }

/* A 0-d tensor takes part as the one element of a 1-d tensor. */
static int32_t ndim1(const tide_tensor * t) { return t->ndim ? t->ndim : 1; }
static int64_t size1(const tide_tensor * t, int32_t d) { return t->ndim ? t->sizes[d] : 1; }

static tide_status need_index(const char * op, const tide_tensor * index) {
    if (index->dtype_id == TIDE_DTYPE_I32 || index->dtype_id == TIDE_DTYPE_I64) return TIDE_OK;
    return tide_error_set(TIDE_E_DTYPE, "%s: index must be an int32 or int64 tensor, got %s", op,
                          tide_dtype_name(index->dtype_id));
}

static tide_status need_index_1d(const char * op, const tide_tensor * index) {
    char a[128];
    TIDE_CHECK(need_index(op, index));
    if (index->ndim > 1)
        return tide_error_set(TIDE_E_SHAPE, "%s: index must be 1-d, got shape %s", op, tide_shape_str(index, a, sizeof a));
    return TIDE_OK;
}

/* ints[0] normalised against the first input's dims. */
static tide_status need_dim(tide_opcall * c, const char * op, int32_t * d) {
    if (c->p.n_ints < 1) return tide_error_set(TIDE_E_VALUE, "%s: a dimension is required", op);
    TIDE_CHECK(tide_wrap_dim(op, c->p.ints[0], c->in[0]->ndim, d));
    c->p.ints[0] = *d;
    c->p.n_ints  = 1;
    return TIDE_OK;
}

/* src's values must fit the input's dtype, as a result must fit `out`. */
static tide_status need_src_dtype(const char * op, const tide_tensor * src, const tide_tensor * x) {
    if (category(src->dtype_id) <= category(x->dtype_id)) return TIDE_OK;
    return tide_error_set(TIDE_E_DTYPE, "%s: src of dtype %s cannot be written into the input of dtype %s", op,
                          tide_dtype_name(src->dtype_id), tide_dtype_name(x->dtype_id));
}

/* index.size(d) <= t.size(d) for every d (but skip), all as 1-d when 0-d. */
static tide_status need_within(const char * op, const tide_tensor * index, const tide_tensor * t, const char * what,
                               int32_t skip) {
    char a[128], b[128];
    for (int32_t d = 0; d < ndim1(index); d++)
        if (d != skip && size1(index, d) > size1(t, d))
            return tide_error_set(TIDE_E_SHAPE, "%s: index of shape %s is larger than %s of shape %s at dimension %d", op,
                                  tide_shape_str(index, a, sizeof a), what, tide_shape_str(t, b, sizeof b), d + 1);
    return TIDE_OK;
}

/* -- shape rules ---------------------------------------------------------------------------- */

/* x's shape with size #index at ints[0]; index 1-d (or 0-d), int32/int64. */
tide_status tide_shape_index_select(tide_opcall * c, tide_shape_out * o) {
    const tide_tensor * x = c->in[0], * index = c->in[1];
    int32_t d;
    TIDE_CHECK(need_index_1d("index_select", index));
    TIDE_CHECK(need_dim(c, "index_select", &d));
    if (x->ndim == 0 && index->nelem != 1)
        return tide_error_set(TIDE_E_SHAPE, "index_select: a 0-d input takes an index of one element, got %lld",
                              (long long)index->nelem);
    TIDE_CHECK(tide_shape_first(c, o));
    if (x->ndim) o->sizes[0][d] = index->nelem;
    return TIDE_OK;
}

/* The index's shape; index and x have the same number of dims and the index
 * is no larger than x except at ints[0]. */
tide_status tide_shape_gather(tide_opcall * c, tide_shape_out * o) {
    const tide_tensor * x = c->in[0], * index = c->in[1];
    char a[128], b[128];
    int32_t d;
    TIDE_CHECK(need_index("gather", index));
    TIDE_CHECK(need_dim(c, "gather", &d));
    if (ndim1(index) != ndim1(x))
        return tide_error_set(TIDE_E_SHAPE, "gather: index of shape %s and input of shape %s must have the same number of dimensions",
                              tide_shape_str(index, a, sizeof a), tide_shape_str(x, b, sizeof b));
    TIDE_CHECK(need_within("gather", index, x, "the input", d));
    o->ndim[0] = index->ndim;
    memcpy(o->sizes[0], index->sizes, sizeof o->sizes[0]);
    return TIDE_OK;
}

/* x's shape (scatter, scatter_add); x, index and src have the same number of
 * dims, the index is no larger than src, nor than x except at ints[0]. */
tide_status tide_shape_scatter(tide_opcall * c, tide_shape_out * o) {
    const char *        op = tide_op_name(c->op);
    const tide_tensor * x = c->in[0], * index = c->in[1], * src = c->in[2];
    char a[128], b[128], e[128];
    int32_t d;
    TIDE_CHECK(need_index(op, index));
    TIDE_CHECK(need_dim(c, op, &d));
    if (ndim1(index) != ndim1(x) || ndim1(src) != ndim1(x))
        return tide_error_set(TIDE_E_SHAPE, "%s: input of shape %s, index of shape %s and src of shape %s must have the same number of dimensions",
                              op, tide_shape_str(x, a, sizeof a), tide_shape_str(index, b, sizeof b),
                              tide_shape_str(src, e, sizeof e));
    TIDE_CHECK(need_within(op, index, src, "src", -1));
    TIDE_CHECK(need_within(op, index, x, "the input", d));
    TIDE_CHECK(need_src_dtype(op, src, x));
    return tide_shape_first(c, o);
}

/* x's shape; index 1-d, src of x's shape with size #index at ints[0]. */
tide_status tide_shape_index_add(tide_opcall * c, tide_shape_out * o) {
    const tide_tensor * x = c->in[0], * index = c->in[1], * src = c->in[2];
    char a[128], b[128], e[128];
    int32_t d;
    TIDE_CHECK(need_index_1d("index_add", index));
    TIDE_CHECK(need_dim(c, "index_add", &d));
    if (x->ndim == 0) {
        if (index->nelem != 1 || src->nelem != 1 || src->ndim > 1)
            return tide_error_set(TIDE_E_SHAPE, "index_add: a 0-d input takes an index and a src of one element, got shapes %s and %s",
                                  tide_shape_str(index, a, sizeof a), tide_shape_str(src, b, sizeof b));
    } else {
        int64_t want[TIDE_MAX_DIMS];
        memcpy(want, x->sizes, sizeof want);
        want[d] = index->nelem;
        if (src->ndim != x->ndim || memcmp(src->sizes, want, (size_t)x->ndim * sizeof(int64_t)) != 0)
            return tide_error_set(TIDE_E_SHAPE, "index_add: src of shape %s should have shape %s: the input's shape %s with dimension %d of the index's length %lld",
                                  tide_shape_str(src, a, sizeof a), tide_dims_str(x->ndim, want, b, sizeof b),
                                  tide_shape_str(x, e, sizeof e), d + 1, (long long)index->nelem);
    }
    TIDE_CHECK(need_src_dtype("index_add", src, x));
    return tide_shape_first(c, o);
}

/* 1-d: the number of true elements of the mask (bool) broadcast with x. This
 * rule reads the mask's data, so it WAITS for the ops writing the mask
 * (tide_tensor_wait): the call that enqueues masked_select blocks until then. */
tide_status tide_shape_masked_select(tide_opcall * c, tide_shape_out * o) {
    tide_tensor * mask = c->in[1];
    if (mask->dtype_id != TIDE_DTYPE_BOOL)
        return tide_error_set(TIDE_E_DTYPE, "masked_select: mask must be a bool tensor, got %s",
                              tide_dtype_name(mask->dtype_id));
    int32_t nd;
    int64_t sizes[TIDE_MAX_DIMS];
    TIDE_CHECK(tide_broadcast_shape("masked_select", c->in, 2, &nd, sizes));
    if (TIDE_UNLIKELY(tide_capture != NULL))   /* a size that depends on values cannot be replayed */
        TIDE_CHECK(tide_graph_on_read("masked_select (the size of its result depends on the mask's values)"));
    tide_tensor * on_device = NULL;
    if (mask->dev.type != TIDE_DEVICE_CPU) {   /* count a host copy: the same values, read after the device wrote them */
        mask = on_device = tide_tensor_to(mask, -1, (tide_device){TIDE_DEVICE_CPU, -1}, 0);
        if (!mask) return tide_last_status();
    }
    tide_status st = tide_tensor_wait(mask);
    if (st != TIDE_OK) {
        tide_tensor_release(on_device);
        return st;
    }
    /* each mask element stands for prod(broadcast sizes / mask sizes) elements */
    int64_t reps = 1, count = 0;
    for (int32_t d = 0; d < nd; d++) {
        int32_t j = mask->ndim - nd + d;
        if (j < 0 || mask->sizes[j] != sizes[d]) reps *= sizes[d];
    }
    if (reps > 0 && mask->nelem > 0) {
        const uint8_t * m = tide_tensor_ptr(mask);
        if (tide_tensor_is_contiguous(mask)) {
            for (int64_t i = 0; i < mask->nelem; i++) count += m[i] != 0;
        } else {
            for (int64_t i = 0; i < mask->nelem; i++)
                count += m[tide_elem_offset(mask->ndim, mask->sizes, mask->strides, i)] != 0;
        }
    }
    tide_tensor_release(on_device);
    o->ndim[0]     = 1;
    o->sizes[0][0] = count * reps;
    return TIDE_OK;
}

/* -- walking strided tensors ---------------------------------------------------------------- */

enum { W_OPS = 3 };

/* A row-major walk over a shape, with the element offsets of up to W_OPS
 * operands; kernels take the last dim as a run. */
typedef struct {
    int32_t nd;
    int64_t sizes[TIDE_MAX_DIMS];
    int64_t st[W_OPS][TIDE_MAX_DIMS];
    int64_t coord[TIDE_MAX_DIMS];
    int64_t off[W_OPS];
} walk;

static void walk_init(walk * w, const tide_tensor * shape) {
    memset(w, 0, sizeof *w);
    w->nd       = ndim1(shape);
    w->sizes[0] = 1;
    for (int32_t d = 0; d < shape->ndim; d++) w->sizes[d] = shape->sizes[d];
}

/* Operand k steps with t's strides (t has the walk's dims, or is 0-d); 0 at dim `zero`. */
static void walk_operand(walk * w, int32_t k, const tide_tensor * t, int32_t zero) {
    for (int32_t d = 0; d < w->nd; d++) w->st[k][d] = (t->ndim && d != zero) ? t->strides[d] : 0;
}

static void walk_seek(walk * w, int64_t pos) {
    for (int32_t k = 0; k < W_OPS; k++) w->off[k] = 0;
    for (int32_t d = w->nd - 1; d >= 0; d--) {
        w->coord[d] = pos % w->sizes[d];
        pos /= w->sizes[d];
        for (int32_t k = 0; k < W_OPS; k++) w->off[k] += w->coord[d] * w->st[k][d];
    }
}

/* Moves past a run of len elements of the last dim (not past its end). */
static inline void walk_skip(walk * w, int64_t len) {
    int32_t d = w->nd - 1;
    w->coord[d] += len;
    for (int32_t k = 0; k < W_OPS; k++) w->off[k] += len * w->st[k][d];
    while (d > 0 && w->coord[d] == w->sizes[d]) {
        for (int32_t k = 0; k < W_OPS; k++) w->off[k] += w->st[k][d - 1] - w->sizes[d] * w->st[k][d];
        w->coord[d] = 0;
        d--;
        w->coord[d]++;
    }
}

/* The run of the last dim from the walk's position, at most `left`. */
static inline int64_t walk_run(const walk * w, int64_t left) {
    int64_t run = w->sizes[w->nd - 1] - w->coord[w->nd - 1];
    return run < left ? run : left;
}

/* Functions generated per element size (data moves) or per compute dtype (adds). */
#define BY_SIZE(GEN, name) GEN(name##_1, uint8_t) GEN(name##_2, uint16_t) GEN(name##_4, uint32_t) GEN(name##_8, uint64_t)
static tide_range_fn by_size(size_t esz, tide_range_fn f1, tide_range_fn f2, tide_range_fn f4, tide_range_fn f8) {
    return esz == 1 ? f1 : esz == 2 ? f2 : esz == 4 ? f4 : f8;
}
#define PICK_SIZE(esz, name) by_size(esz, name##_1, name##_2, name##_4, name##_8)

/* -- index arrays ---------------------------------------------------------------------------- */

typedef struct {
    walk           w;           /* over the index, operand 0 */
    const char *   data;
    bool           i64;
    int64_t        base;        /* 1 for ONE_BASED */
    int64_t        bound;
    int64_t *      out;
    int64_t        bad;         /* first bad row-major position, INT64_MAX if none (atomic) */
} load_ctx;

static void load_range(void * ctx_, int64_t b, int64_t e) {
    load_ctx * l = ctx_;
    walk       w = l->w;
    walk_seek(&w, b);
    int32_t L = w.nd - 1;
    for (int64_t pos = b; pos < e;) {
        int64_t run = walk_run(&w, e - pos), s = w.st[0][L];
        for (int64_t k = 0; k < run; k++) {
            int64_t o = w.off[0] + k * s;
            int64_t v = l->i64 ? ((const int64_t *)l->data)[o] : ((const int32_t *)l->data)[o];
            if (TIDE_UNLIKELY(v < l->base || v - l->base >= l->bound)) {
                int64_t bad = pos + k, cur = __atomic_load_n(&l->bad, __ATOMIC_RELAXED);
                while (bad < cur && !__atomic_compare_exchange_n(&l->bad, &cur, bad, false, __ATOMIC_RELAXED,
                                                                 __ATOMIC_RELAXED)) {}
                return;
            }
            l->out[pos + k] = v - l->base;
        }
        walk_skip(&w, run);
        pos += run;
    }
}

/* An array of 0-based indices from the caching allocator (a big index would
 * otherwise cost fresh pages at every call). */
typedef struct {
    int64_t * v;
    size_t    cap;
} index_array;

static void index_free(index_array * a) {
    if (a->v) tide_host_free(a->v, a->cap);
    a->v = NULL;
}

/* Reads index into a new array (*out, index_free() it) of 0-based int64 in
 * row-major order, each checked against [0, bound) of dimension dim. The
 * message names the first bad index as the user wrote it. */
static tide_status load_index(const tide_opcall * c, const tide_tensor * index, int32_t dim, int64_t bound,
                              index_array * out) {
    int64_t n = index->nelem;
    out->v    = tide_host_alloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t), &out->cap);
    if (!out->v) return tide_error_set(TIDE_E_OOM, "%s: out of memory for %lld indices", tide_op_name(c->op), (long long)n);
    if (n == 0) return TIDE_OK;
    load_ctx l;
    walk_init(&l.w, index);
    walk_operand(&l.w, 0, index, -1);
    l.data  = tide_tensor_ptr(index);
    l.i64   = index->dtype_id == TIDE_DTYPE_I64;
    l.base  = (c->p.flags & TIDE_PARAMF_ONE_BASED) ? 1 : 0;
    l.bound = bound;
    l.out   = out->v;
    l.bad   = INT64_MAX;
    tide_parallel_for(n, TIDE_GRAIN, 1, load_range, &l);
    if (l.bad == INT64_MAX) return TIDE_OK;
    int64_t o = tide_elem_offset(l.w.nd, l.w.sizes, l.w.st[0], l.bad);
    int64_t v = l.i64 ? ((const int64_t *)l.data)[o] : ((const int32_t *)l.data)[o];
    index_free(out);
    return tide_error_set(TIDE_E_INDEX, "%s: index %lld is out of range for dimension %d of size %lld",
                          tide_op_name(c->op), (long long)v, dim + 1, (long long)bound);
}

/* -- destinations ------------------------------------------------------------------------------ */

/* What a kernel writes: out itself when it holds `dtype`, else a contiguous
 * temporary of out's shape that finish() copies into out. NULL: out of memory. */
static tide_tensor * target(tide_tensor * out, int32_t dtype) {
    if (out->dtype_id == dtype) {
        tide_tensor_retain(out);
        return out;
    }
    return tide_tensor_empty(out->ndim, out->sizes, dtype, out->dev);
}

static tide_status finish(tide_tensor * out, tide_tensor * dst, tide_status st) {
    if (st == TIDE_OK && dst != out) st = tide_copy_view(out, dst);
    tide_tensor_release(dst);
    return st;
}

/* t itself when of `dtype`, else a converted contiguous copy. */
static tide_tensor * as_dtype(tide_tensor * t, int32_t dtype) {
    if (t->dtype_id == dtype) {
        tide_tensor_retain(t);
        return t;
    }
    tide_tensor * r = tide_tensor_empty(t->ndim, t->sizes, dtype, t->dev);
    if (r && tide_copy_view(r, t) != TIDE_OK) {
        tide_tensor_release(r);
        return NULL;
    }
    return r;
}

/* The destination of scatter, scatter_add, index_add holding x's values: out
 * itself when it is x (in place) and of the working dtype, else a copy of x. */
static tide_tensor * start_from(tide_tensor * out, tide_tensor * x, int32_t dtype) {
    tide_tensor * dst = target(out, dtype);
    if (dst && !tide_same_view(dst, x) && tide_copy_view(dst, x) != TIDE_OK) {
        tide_tensor_release(dst);
        return NULL;
    }
    return dst;
}

/* -- index_select ------------------------------------------------------------------------------ */

typedef struct {
    walk            w;        /* over the result: 0 = dst, 1 = x (0 at dim) */
    char *          dst;
    const char *    x;
    const int64_t * idx;
    int32_t         dim;
    int64_t         xs;       /* x's stride at dim */
} select_ctx;

#define SELECT_RANGE(name, T)                                                                    \
    static void name(void * ctx_, int64_t b, int64_t e) {                                        \
        const select_ctx * s = ctx_;                                                             \
        walk w = s->w;                                                                           \
        walk_seek(&w, b);                                                                        \
        int32_t L = w.nd - 1;                                                                    \
        int64_t ds = w.st[0][L], xl = w.st[1][L], xs = s->xs;                                    \
        for (int64_t pos = b; pos < e;) {                                                        \
            int64_t run = walk_run(&w, e - pos);                                                 \
            T * restrict d = (T *)s->dst + w.off[0];                                             \
            if (s->dim == L) {   /* a gather along the run */                                    \
                const T * xb = (const T *)s->x + w.off[1];                                       \
                const int64_t * ix = s->idx + w.coord[L];                                        \
                for (int64_t k = 0; k < run; k++) d[k * ds] = xb[ix[k] * xs];                    \
            } else {             /* a strided copy of one selected row */                        \
                const T * xb = (const T *)s->x + w.off[1] + s->idx[w.coord[s->dim]] * xs;        \
                if (ds == 1 && xl == 1) memcpy(d, xb, (size_t)run * sizeof(T));                  \
                else for (int64_t k = 0; k < run; k++) d[k * ds] = xb[k * xl];                   \
            }                                                                                    \
            walk_skip(&w, run);                                                                  \
            pos += run;                                                                          \
        }                                                                                        \
    }
BY_SIZE(SELECT_RANGE, select_range)

tide_status tide_cpu_index_select(const tide_opcall * c) {
    tide_tensor * x = c->in[0], * out = c->out[0];
    int32_t dim = (int32_t)c->p.ints[0];
    index_array idx;
    TIDE_CHECK(load_index(c, c->in[1], dim, size1(x, dim), &idx));
    tide_status st = TIDE_OK;
    tide_tensor * dst = out->nelem ? target(out, x->dtype_id) : NULL;
    if (out->nelem && !dst) st = TIDE_E_OOM;
    if (dst) {
        select_ctx s = {.dst = tide_tensor_ptr(dst), .x = tide_tensor_ptr(x), .idx = idx.v, .dim = dim,
                        .xs = x->ndim ? x->strides[dim] : 0};
        walk_init(&s.w, dst);
        walk_operand(&s.w, 0, dst, -1);
        walk_operand(&s.w, 1, x, dim);
        tide_parallel_for(dst->nelem, TIDE_GRAIN, 1, PICK_SIZE(tide_dtype_size(x->dtype_id), select_range), &s);
        st = finish(out, dst, st);
    }
    index_free(&idx);
    return st;
}

/* -- gather ------------------------------------------------------------------------------------ */

typedef struct {
    walk            w;        /* over the index: 0 = dst, 1 = x (0 at dim), 2 = idx */
    char *          dst;
    const char *    x;
    const int64_t * idx;
    int64_t         xs;
} gather_ctx;

#define GATHER_RANGE(name, T)                                                                    \
    static void name(void * ctx_, int64_t b, int64_t e) {                                        \
        const gather_ctx * g = ctx_;                                                             \
        walk w = g->w;                                                                           \
        walk_seek(&w, b);                                                                        \
        int32_t L = w.nd - 1;                                                                    \
        int64_t ds = w.st[0][L], xl = w.st[1][L], is = w.st[2][L], xs = g->xs;                   \
        for (int64_t pos = b; pos < e;) {                                                        \
            int64_t run = walk_run(&w, e - pos);                                                 \
            T * restrict d = (T *)g->dst + w.off[0];                                             \
            const T * xb = (const T *)g->x + w.off[1];                                           \
            const int64_t * ix = g->idx + w.off[2];                                              \
            for (int64_t k = 0; k < run; k++) d[k * ds] = xb[k * xl + ix[k * is] * xs];          \
            walk_skip(&w, run);                                                                  \
            pos += run;                                                                          \
        }                                                                                        \
    }
BY_SIZE(GATHER_RANGE, gather_range)

/* Strides of a contiguous tensor of t's shape, as a walk operand sees them. */
static void walk_contiguous(walk * w, int32_t k) {
    int64_t s = 1;
    for (int32_t d = w->nd - 1; d >= 0; d--) {
        w->st[k][d] = s;
        s *= w->sizes[d];
    }
}

tide_status tide_cpu_gather(const tide_opcall * c) {
    tide_tensor * x = c->in[0], * index = c->in[1], * out = c->out[0];
    int32_t dim = (int32_t)c->p.ints[0];
    index_array idx;
    TIDE_CHECK(load_index(c, index, dim, size1(x, dim), &idx));
    tide_status st = TIDE_OK;
    tide_tensor * dst = out->nelem ? target(out, x->dtype_id) : NULL;
    if (out->nelem && !dst) st = TIDE_E_OOM;
    if (dst) {
        gather_ctx g = {.dst = tide_tensor_ptr(dst), .x = tide_tensor_ptr(x), .idx = idx.v,
                        .xs = x->ndim ? x->strides[dim] : 0};
        walk_init(&g.w, index);
        walk_operand(&g.w, 0, dst, -1);
        walk_operand(&g.w, 1, x, dim);
        walk_contiguous(&g.w, 2);
        tide_parallel_for(index->nelem, TIDE_GRAIN, 1, PICK_SIZE(tide_dtype_size(x->dtype_id), gather_range), &g);
        st = finish(out, dst, st);
    }
    index_free(&idx);
    return st;
}

/* -- scatter, scatter_add ------------------------------------------------------------------------ */

/* Work is split by the dims before `dim` only: elements that differ in those
 * never write the same place, so each block runs in order and duplicates end
 * as in a serial loop (the last write wins; adds are summed in order). */
typedef struct {
    walk            w;        /* over the index: 0 = dst (0 at dim), 1 = src, 2 = idx */
    char *          dst;
    const char *    src;
    const int64_t * idx;
    int64_t         ds;       /* dst's stride at dim */
    int64_t         blk;      /* elements per block of the dims from dim on */
} scatter_ctx;

#define SET(p, v) (*(p) = (v))
#define ADD(p, v) (*(p) += (v))
#define ADD_U32(p, v) (*(p) = (int32_t)((uint32_t) * (p) + (uint32_t)(v)))
#define ADD_U64(p, v) (*(p) = (int64_t)((uint64_t) * (p) + (uint64_t)(v)))
#define ADD_U8(p, v) (*(p) = (uint8_t)(*(p) + (v)))

#define SCATTER_RANGE(name, T, OP)                                                               \
    static void name(void * ctx_, int64_t b, int64_t e) {                                        \
        const scatter_ctx * s = ctx_;                                                            \
        walk w = s->w;                                                                           \
        b *= s->blk;                                                                             \
        e *= s->blk;                                                                             \
        walk_seek(&w, b);                                                                        \
        int32_t L = w.nd - 1;                                                                    \
        int64_t dl = w.st[0][L], sl = w.st[1][L], is = w.st[2][L], ds = s->ds;                   \
        for (int64_t pos = b; pos < e;) {                                                        \
            int64_t run = walk_run(&w, e - pos);                                                 \
            T * d = (T *)s->dst + w.off[0];                                                      \
            const T * sb = (const T *)s->src + w.off[1];                                         \
            const int64_t * ix = s->idx + w.off[2];                                              \
            for (int64_t k = 0; k < run; k++) OP(d + k * dl + ix[k * is] * ds, sb[k * sl]);      \
            walk_skip(&w, run);                                                                  \
            pos += run;                                                                          \
        }                                                                                        \
    }
#define SCATTER_SET(name, T) SCATTER_RANGE(name, T, SET)
BY_SIZE(SCATTER_SET, scatter_range)
SCATTER_RANGE(scatter_add_f32, float, ADD)
SCATTER_RANGE(scatter_add_f64, double, ADD)
SCATTER_RANGE(scatter_add_i32, int32_t, ADD_U32)
SCATTER_RANGE(scatter_add_i64, int64_t, ADD_U64)
SCATTER_RANGE(scatter_add_u8, uint8_t, ADD_U8)

static tide_range_fn add_fn(int32_t dtype, tide_range_fn f32, tide_range_fn f64, tide_range_fn i32, tide_range_fn i64,
                            tide_range_fn u8) {
    switch (dtype) {
    case TIDE_DTYPE_F32: return f32;
    case TIDE_DTYPE_F64: return f64;
    case TIDE_DTYPE_I32: return i32;
    case TIDE_DTYPE_I64: return i64;
    case TIDE_DTYPE_U8:  return u8;
    default:             return NULL;
    }
}
#define PICK_ADD(dtype, name) add_fn(dtype, name##_f32, name##_f64, name##_i32, name##_i64, name##_u8)

/* Units of parallel work: the product of the walk's sizes before dim. */
static int64_t units_before(const walk * w, int32_t dim, int64_t * blk) {
    int64_t u = 1, b = 1;
    for (int32_t d = 0; d < w->nd; d++) {
        if (d < dim) u *= w->sizes[d];
        else b *= w->sizes[d];
    }
    *blk = b;
    return u;
}

static tide_status scatter(const tide_opcall * c, bool add) {
    tide_tensor * x = c->in[0], * index = c->in[1], * out = c->out[0];
    int32_t dim   = (int32_t)c->p.ints[0];
    int32_t dtype = add ? c->compute_dtype : x->dtype_id;   /* adds compute (f16 in f32); sets move bits */
    tide_range_fn fn = add ? PICK_ADD(dtype, scatter_add) : PICK_SIZE(tide_dtype_size(dtype), scatter_range);
    if (!fn) return tide_error_set(TIDE_E_DTYPE, "%s: dtype %s is not supported", tide_op_name(c->op), tide_dtype_name(dtype));
    index_array idx;
    TIDE_CHECK(load_index(c, index, dim, size1(x, dim), &idx));
    tide_tensor * src = as_dtype(c->in[2], dtype);
    tide_tensor * dst = src ? start_from(out, x, dtype) : NULL;
    tide_status   st  = dst ? TIDE_OK : TIDE_E_OOM;
    if (dst && index->nelem) {
        scatter_ctx s = {.dst = tide_tensor_ptr(dst), .src = tide_tensor_ptr(src), .idx = idx.v,
                         .ds = dst->ndim ? dst->strides[dim] : 0};
        walk_init(&s.w, index);
        walk_operand(&s.w, 0, dst, dim);
        walk_operand(&s.w, 1, src, -1);
        walk_contiguous(&s.w, 2);
        int64_t units = units_before(&s.w, dim, &s.blk);
        tide_parallel_for(units, TIDE_GRAIN / s.blk + 1, 1, fn, &s);
    }
    if (dst) st = finish(out, dst, st);
    tide_tensor_release(src);
    index_free(&idx);
    return st;
}

tide_status tide_cpu_scatter(const tide_opcall * c) { return scatter(c, false); }
tide_status tide_cpu_scatter_add(const tide_opcall * c) { return scatter(c, true); }

/* -- index_add ------------------------------------------------------------------------------------ */

typedef struct {
    walk            w;        /* over src: 0 = dst (0 at dim), 1 = src */
    char *          dst;
    const char *    src;
    const int64_t * idx;
    int32_t         dim;
    int64_t         ds;       /* dst's stride at dim */
    int64_t         blk;
} index_add_ctx;

#define INDEX_ADD_RANGE(name, T, OP)                                                             \
    static void name(void * ctx_, int64_t b, int64_t e) {                                        \
        const index_add_ctx * s = ctx_;                                                          \
        walk w = s->w;                                                                           \
        b *= s->blk;                                                                             \
        e *= s->blk;                                                                             \
        walk_seek(&w, b);                                                                        \
        int32_t L = w.nd - 1;                                                                    \
        int64_t dl = w.st[0][L], sl = w.st[1][L], ds = s->ds;                                    \
        for (int64_t pos = b; pos < e;) {                                                        \
            int64_t run = walk_run(&w, e - pos);                                                 \
            T * d = (T *)s->dst + w.off[0];                                                      \
            const T * sb = (const T *)s->src + w.off[1];                                         \
            if (s->dim == L) {                                                                   \
                const int64_t * ix = s->idx + w.coord[L];                                        \
                for (int64_t k = 0; k < run; k++) OP(d + ix[k] * ds, sb[k * sl]);               \
            } else {                                                                             \
                d += s->idx[w.coord[s->dim]] * ds;                                               \
                for (int64_t k = 0; k < run; k++) OP(d + k * dl, sb[k * sl]);                    \
            }                                                                                    \
            walk_skip(&w, run);                                                                  \
            pos += run;                                                                          \
        }                                                                                        \
    }
INDEX_ADD_RANGE(index_add_f32, float, ADD)
INDEX_ADD_RANGE(index_add_f64, double, ADD)
INDEX_ADD_RANGE(index_add_i32, int32_t, ADD_U32)
INDEX_ADD_RANGE(index_add_i64, int64_t, ADD_U64)
INDEX_ADD_RANGE(index_add_u8, uint8_t, ADD_U8)

tide_status tide_cpu_index_add(const tide_opcall * c) {
    tide_tensor * x = c->in[0], * out = c->out[0];
    int32_t dim   = (int32_t)c->p.ints[0];
    int32_t dtype = c->compute_dtype;
    tide_range_fn fn = PICK_ADD(dtype, index_add);
    if (!fn) return tide_error_set(TIDE_E_DTYPE, "index_add: dtype %s is not supported", tide_dtype_name(dtype));
    index_array idx;
    TIDE_CHECK(load_index(c, c->in[1], dim, size1(x, dim), &idx));
    tide_tensor * src = as_dtype(c->in[2], dtype);
    tide_tensor * dst = src ? start_from(out, x, dtype) : NULL;
    tide_status   st  = dst ? TIDE_OK : TIDE_E_OOM;
    if (dst && src->nelem) {
        index_add_ctx s = {.dst = tide_tensor_ptr(dst), .src = tide_tensor_ptr(src), .idx = idx.v, .dim = dim,
                           .ds = dst->ndim ? dst->strides[dim] : 0};
        walk_init(&s.w, src);
        walk_operand(&s.w, 0, dst, dim);
        walk_operand(&s.w, 1, src, -1);
        int64_t units = units_before(&s.w, dim, &s.blk);
        tide_parallel_for(units, TIDE_GRAIN / s.blk + 1, 1, fn, &s);
    }
    if (dst) st = finish(out, dst, st);
    tide_tensor_release(src);
    index_free(&idx);
    return st;
}

/* -- masked_select ------------------------------------------------------------------------------- */

/* Two passes over chunks of the broadcast shape: count the true elements of
 * each chunk, then copy each chunk's selected elements from its prefix sum. */
typedef struct {
    walk            w;        /* over the broadcast shape: 0 = x, 1 = mask */
    const char *    x;
    const uint8_t * mask;
    char *          dst;
    int64_t         ds;       /* dst's stride */
    int64_t         n, chunk;
    int64_t *       counts;   /* per chunk; then their prefix sums */
    size_t          esz;
} msel_ctx;

static void msel_count(void * ctx_, int64_t b, int64_t e) {
    const msel_ctx * m = ctx_;
    for (int64_t ch = b; ch < e; ch++) {
        int64_t lo = ch * m->chunk, hi = lo + m->chunk < m->n ? lo + m->chunk : m->n, cnt = 0;
        walk    w = m->w;
        walk_seek(&w, lo);
        for (int64_t pos = lo; pos < hi;) {
            int64_t run = walk_run(&w, hi - pos), ml = w.st[1][w.nd - 1];
            const uint8_t * mb = m->mask + w.off[1];
            for (int64_t k = 0; k < run; k++) cnt += mb[k * ml] != 0;
            walk_skip(&w, run);
            pos += run;
        }
        m->counts[ch] = cnt;
    }
}

#define MSEL_COPY(name, T)                                                                       \
    static void name(void * ctx_, int64_t b, int64_t e) {                                        \
        const msel_ctx * m = ctx_;                                                               \
        for (int64_t ch = b; ch < e; ch++) {                                                     \
            int64_t lo = ch * m->chunk, hi = lo + m->chunk < m->n ? lo + m->chunk : m->n;        \
            T * d = (T *)m->dst + m->counts[ch] * m->ds;                                         \
            walk w = m->w;                                                                       \
            walk_seek(&w, lo);                                                                   \
            for (int64_t pos = lo; pos < hi;) {                                                  \
                int64_t run = walk_run(&w, hi - pos);                                            \
                int64_t xl = w.st[0][w.nd - 1], ml = w.st[1][w.nd - 1];                          \
                const T * xb = (const T *)m->x + w.off[0];                                       \
                const uint8_t * mb = m->mask + w.off[1];                                         \
                for (int64_t k = 0; k < run; k++)                                                \
                    if (mb[k * ml]) {                                                            \
                        *d = xb[k * xl];                                                         \
                        d += m->ds;                                                              \
                    }                                                                            \
                walk_skip(&w, run);                                                              \
                pos += run;                                                                      \
            }                                                                                    \
        }                                                                                        \
    }
BY_SIZE(MSEL_COPY, msel_copy)

/* Strides of t aligned to a broadcast shape of nd dims, 0 where it broadcasts. */
static void walk_broadcast(walk * w, int32_t k, const tide_tensor * t, int32_t nd) {
    for (int32_t d = 0; d < nd; d++) {
        int32_t j = t->ndim - nd + d;
        w->st[k][d] = (j >= 0 && t->sizes[j] != 1) ? t->strides[j] : 0;
    }
}

tide_status tide_cpu_masked_select(const tide_opcall * c) {
    tide_tensor * x = c->in[0], * mask = c->in[1], * out = c->out[0];
    int32_t nd;
    int64_t sizes[TIDE_MAX_DIMS];
    TIDE_CHECK(tide_broadcast_shape("masked_select", c->in, 2, &nd, sizes));
    tide_tensor shape = {.ndim = nd};   /* only the sizes, for walk_init */
    memcpy(shape.sizes, sizes, sizeof sizes);
    int64_t n = 1;
    for (int32_t d = 0; d < nd; d++) n *= sizes[d];
    if (n == 0) return TIDE_OK;
    msel_ctx m = {.x = tide_tensor_ptr(x), .mask = tide_tensor_ptr(mask), .n = n, .esz = tide_dtype_size(x->dtype_id)};
    walk_init(&m.w, &shape);
    walk_broadcast(&m.w, 0, x, nd);
    walk_broadcast(&m.w, 1, mask, nd);
    m.chunk = TIDE_GRAIN;
    int64_t nch = (n + m.chunk - 1) / m.chunk;
    m.counts = malloc((size_t)nch * sizeof(int64_t));
    if (!m.counts) return tide_error_set(TIDE_E_OOM, "masked_select: out of memory");
    tide_parallel_for(nch, 1, 1, msel_count, &m);
    int64_t total = 0;
    for (int64_t ch = 0; ch < nch; ch++) {
        int64_t cnt  = m.counts[ch];
        m.counts[ch] = total;
        total += cnt;
    }
    tide_status st = TIDE_OK;
    if (total != out->nelem) {   /* the shape rule counted the same mask: only a racing writer gets here */
        st = tide_error_set(TIDE_E_VALUE, "masked_select: the mask changed while the op was pending (%lld true elements, %lld expected)",
                            (long long)total, (long long)out->nelem);
    } else if (total > 0) {
        tide_tensor * dst = target(out, x->dtype_id);
        if (!dst) {
            st = TIDE_E_OOM;
        } else {
            m.dst = tide_tensor_ptr(dst);
            m.ds  = dst->strides[0];
            tide_parallel_for(nch, 1, 1, PICK_SIZE(m.esz, msel_copy), &m);
            st = finish(out, dst, st);
        }
    }
    free(m.counts);
    return st;
}
