/*
 * shape.c - ops that rearrange whole tensors: cat, stack, flip, repeat, tril
 * and triu, and their shape rules. Each is expressed as copies between
 * strided views (a slice of the output, a flipped or tiled view of the input)
 * done by the elementwise iterator, which brings strides, dtype conversion and
 * threads; nothing here computes. Gathering by index tensors is in index.c.
 */
#include "kernels.h"
#include "shared.h"

#include <stdio.h>


/* -- views and copies --------------------------------------------------------------------- */

/* A view header over t's storage (retained), with the given layout. NULL: out of memory. */
static tide_tensor * view_as(const tide_tensor * t, int32_t ndim, const int64_t * sizes, const int64_t * strides,
                             int64_t offset) {
    tide_tensor * v = tide_tensor_alloc_header(t->storage, t->dtype_id);
    if (!v) return NULL;
    v->ndim = ndim;
    if (ndim) {
        memcpy(v->sizes, sizes, (size_t)ndim * sizeof *sizes);
        memcpy(v->strides, strides, (size_t)ndim * sizeof *strides);
    }
    v->offset = offset;
    tide_tensor_finish(v);
    return v;
}

#define MOVE_LOOP(name, T)                                                                       \
    static void name(int64_t n, int64_t i0, void * restrict out, const void * const * in,        \
                     const tide_opcall * c) {                                                    \
        (void)i0; (void)c;                                                                       \
        memcpy(out, in[0], (size_t)n * sizeof(T));                                               \
    }
MOVE_LOOP(move_f32, float) MOVE_LOOP(move_f64, double) MOVE_LOOP(move_i32, int32_t)
MOVE_LOOP(move_i64, int64_t) MOVE_LOOP(move_u8, uint8_t)

/* Copies src, broadcast to dst's shape and converted to dst's dtype, into dst
 * (both any strides, negative ones included). Runs on the calling thread and
 * the pool; the caller has made sure the two do not overlap.
 * TODO(lead): declare in kernels.h; index.c declares it for now. */
TIDE_INTERNAL tide_status tide_copy_view(tide_tensor * dst, tide_tensor * src) {
    static const tide_ew_loop loops[TIDE_DTYPE_COUNT] = {
        [TIDE_DTYPE_F32] = move_f32, [TIDE_DTYPE_F64] = move_f64, [TIDE_DTYPE_I32] = move_i32,
        [TIDE_DTYPE_I64] = move_i64, [TIDE_DTYPE_U8] = move_u8,   [TIDE_DTYPE_BOOL] = move_u8};
    tide_opcall c;
    memset(&c, 0, sizeof c);
    c.op            = TIDE_OP_copy;
    c.n_in          = 1;
    c.n_out         = 1;
    c.compute_dtype = tide_dtype_compute(dst->dtype_id);
    c.in[0]         = src;
    c.out[0]        = dst;
    c.p.dtype       = -1;
    return tide_ew_run(&c, loops, -1);
}

/* Copies src into a view of dst's storage; releases the view. */
static tide_status copy_to_view(tide_tensor * dst, int32_t ndim, const int64_t * sizes, const int64_t * strides,
                                int64_t offset, tide_tensor * src) {
    tide_tensor * v = view_as(dst, ndim, sizes, strides, offset);
    if (!v) return TIDE_E_OOM;
    tide_status st = tide_copy_view(v, src);
    tide_tensor_release(v);
    return st;
}

/* -- cat ------------------------------------------------------------------------------------ */

/* PyTorch's legacy rule: 1-d empty tensors join anything (they are skipped). */
static bool legacy_empty(const tide_tensor * t) { return t->ndim == 1 && t->sizes[0] == 0; }

/* All inputs have the same ndim and sizes except at ints[0] (normalised here);
 * tensors of shape [0] are skipped. */
tide_status tide_shape_cat(tide_opcall * c, tide_shape_out * o) {
    char a[128], b[128];
    int32_t ref = 0;
    for (int32_t i = 0; i < c->n_in; i++) {
        if (c->in[i]->ndim == 0)
            return tide_error_set(TIDE_E_SHAPE, "cat: tensor %d is 0-d and cannot be concatenated", i + 1);
    }
    for (int32_t i = 0; i < c->n_in; i++) {
        if (!legacy_empty(c->in[i])) { ref = i; break; }
    }
    const tide_tensor * r = c->in[ref];
    int32_t d;
    TIDE_CHECK(tide_wrap_dim("cat", c->p.n_ints ? c->p.ints[0] : 0, r->ndim, &d));
    o->ndim[0] = r->ndim;
    memcpy(o->sizes[0], r->sizes, sizeof o->sizes[0]);
    o->sizes[0][d] = 0;
    for (int32_t i = 0; i < c->n_in; i++) {
        const tide_tensor * t = c->in[i];
        if (legacy_empty(t)) continue;   /* adds nothing, whatever the others' shape */
        bool ok = t->ndim == r->ndim;
        for (int32_t k = 0; ok && k < t->ndim; k++) ok = k == d || t->sizes[k] == r->sizes[k];
        if (!ok)
            return tide_error_set(TIDE_E_SHAPE,
                                  "cat: tensor %d of shape %s does not match tensor %d of shape %s except in dimension %d",
                                  i + 1, tide_shape_str(t, a, sizeof a), ref + 1, tide_shape_str(r, b, sizeof b), d + 1);
        o->sizes[0][d] += t->sizes[d];
    }
    c->p.ints[0] = d;
    c->p.n_ints  = 1;
    return TIDE_OK;
}

/* Each input goes to its slice of the output along the dim, converted to the output's dtype. */
tide_status tide_cpu_cat(const tide_opcall * c) {
    tide_tensor * out = c->out[0];
    int32_t       d   = (int32_t)c->p.ints[0];
    int64_t       pos = 0, sizes[TIDE_MAX_DIMS];
    memcpy(sizes, out->sizes, sizeof sizes);
    for (int32_t i = 0; i < c->n_in; i++) {
        tide_tensor * t = c->in[i];
        if (t->ndim != out->ndim) continue;   /* a skipped [0] */
        int64_t len = t->sizes[d];
        if (t->nelem > 0) {
            sizes[d] = len;
            TIDE_CHECK(copy_to_view(out, out->ndim, sizes, out->strides, out->offset + pos * out->strides[d], t));
        }
        pos += len;
    }
    return TIDE_OK;
}

/* -- stack ---------------------------------------------------------------------------------- */

/* All inputs of one shape; a new dim of size n_in inserted at ints[0], which
 * counts against ndim + 1 (normalised here). */
tide_status tide_shape_stack(tide_opcall * c, tide_shape_out * o) {
    char a[128], b[128];
    const tide_tensor * r = c->in[0];
    for (int32_t i = 1; i < c->n_in; i++) {
        const tide_tensor * t = c->in[i];
        if (t->ndim != r->ndim || memcmp(t->sizes, r->sizes, (size_t)r->ndim * sizeof(int64_t)) != 0)
            return tide_error_set(TIDE_E_SHAPE, "stack: tensor %d of shape %s does not match tensor 1 of shape %s",
                                  i + 1, tide_shape_str(t, a, sizeof a), tide_shape_str(r, b, sizeof b));
    }
    int32_t n = r->ndim + 1;
    if (n > TIDE_MAX_DIMS)
        return tide_error_set(TIDE_E_SHAPE, "stack: stacking %d-d tensors gives %d dimensions, at most %d are supported",
                              r->ndim, n, TIDE_MAX_DIMS);
    int64_t dim = c->p.n_ints ? c->p.ints[0] : 0;
    if (dim < -n || dim >= n)
        return tide_error_set(TIDE_E_INDEX, "stack: dimension %lld is out of range for stacking %d-d tensors (1 to %d)",
                              (long long)(dim >= 0 ? dim + 1 : dim), r->ndim, n);
    int32_t d = (int32_t)(dim < 0 ? dim + n : dim);
    o->ndim[0] = n;
    for (int32_t k = 0, j = 0; k < n; k++) o->sizes[0][k] = k == d ? c->n_in : r->sizes[j++];
    c->p.ints[0] = d;
    c->p.n_ints  = 1;
    return TIDE_OK;
}

tide_status tide_cpu_stack(const tide_opcall * c) {
    tide_tensor * out = c->out[0];
    int32_t       d   = (int32_t)c->p.ints[0];
    int64_t       sizes[TIDE_MAX_DIMS], strides[TIDE_MAX_DIMS];
    for (int32_t k = 0, j = 0; k < out->ndim; k++) {
        if (k == d) continue;
        sizes[j]   = out->sizes[k];
        strides[j] = out->strides[k];
        j++;
    }
    for (int32_t i = 0; i < c->n_in; i++) {
        if (c->in[i]->nelem == 0) continue;
        TIDE_CHECK(copy_to_view(out, out->ndim - 1, sizes, strides, out->offset + i * out->strides[d], c->in[i]));
    }
    return TIDE_OK;
}

/* -- flip ----------------------------------------------------------------------------------- */

/* Normalises flip's dims into flipped[]; an error names a bad or repeated dim. */
static tide_status flip_dims(const tide_op_params * p, const tide_tensor * x, bool * flipped) {
    memset(flipped, 0, TIDE_MAX_DIMS * sizeof *flipped);
    for (int32_t i = 0; i < p->n_ints; i++) {
        int32_t d;
        TIDE_CHECK(tide_wrap_dim("flip", p->ints[i], x->ndim, &d));
        if (x->ndim == 0) continue;
        if (flipped[d]) return tide_error_set(TIDE_E_INDEX, "flip: dimension %d is repeated", d + 1);
        flipped[d] = true;
    }
    return TIDE_OK;
}

/* The shape of x; dims in ints normalised and checked (repeats are errors).
 * flip's rule in ops.def, so that a bad dim is reported by the call. */
tide_status tide_shape_flip(tide_opcall * c, tide_shape_out * o) {
    bool flipped[TIDE_MAX_DIMS];
    TIDE_CHECK(flip_dims(&c->p, c->in[0], flipped));
    int32_t k = 0;
    for (int32_t d = 0; d < c->in[0]->ndim; d++)
        if (flipped[d]) c->p.ints[k++] = d;
    c->p.n_ints = k;
    return tide_shape_first(c, o);
}

/* A copy of x viewed with negative strides along the flipped dims (which
 * the `flip` rule has checked and made 0-based). */
tide_status tide_cpu_flip(const tide_opcall * c) {
    tide_tensor * x = c->in[0];
    bool flipped[TIDE_MAX_DIMS];
    TIDE_CHECK(flip_dims(&c->p, x, flipped));
    if (x->nelem == 0) return TIDE_OK;
    int64_t strides[TIDE_MAX_DIMS], offset = x->offset;
    for (int32_t d = 0; d < x->ndim; d++) {
        strides[d] = flipped[d] ? -x->strides[d] : x->strides[d];
        if (flipped[d]) offset += (x->sizes[d] - 1) * x->strides[d];
    }
    tide_tensor * v = view_as(x, x->ndim, x->sizes, strides, offset);
    if (!v) return TIDE_E_OOM;
    tide_status st = tide_copy_view(c->out[0], v);
    tide_tensor_release(v);
    return st;
}

/* -- repeat --------------------------------------------------------------------------------- */

/* ints: one repeat count per output dim, at least x's ndim; x's dims align to
 * the last ones (leading new dims of size 1), as in PyTorch's repeat. */
tide_status tide_shape_repeat(tide_opcall * c, tide_shape_out * o) {
    const tide_tensor * x = c->in[0];
    int32_t n = c->p.n_ints;
    if (n < x->ndim)
        return tide_error_set(TIDE_E_SHAPE, "repeat: %d repeats given for a %d-d tensor; at least %d are needed", n,
                              x->ndim, x->ndim);
    if (n > TIDE_MAX_DIMS)
        return tide_error_set(TIDE_E_SHAPE, "repeat: %d repeats give %d dimensions, at most %d are supported", n, n,
                              TIDE_MAX_DIMS);
    int32_t lead = n - x->ndim;
    for (int32_t d = 0; d < n; d++) {
        int64_t r = c->p.ints[d];
        if (r < 0)
            return tide_error_set(TIDE_E_SHAPE, "repeat: repeat %lld for dimension %d is negative", (long long)r, d + 1);
        int64_t s = d >= lead ? x->sizes[d - lead] : 1;
        if (s && r > INT64_MAX / 16 / s) return tide_error_set(TIDE_E_SHAPE, "repeat: the result is too large");
        o->sizes[0][d] = s * r;
    }
    o->ndim[0] = n;
    return TIDE_OK;
}

/* One copy of x into the output seen as shared.h's repeat plan; dims beyond
 * TIDE_MAX_DIMS become an explicit loop over the leading ones. */
tide_status tide_cpu_repeat(const tide_opcall * c) {
    tide_tensor * x = c->in[0], * out = c->out[0];
    if (out->nelem == 0) return TIDE_OK;
    int64_t sz[2 * TIDE_MAX_DIMS], ost[2 * TIDE_MAX_DIMS], xst[2 * TIDE_MAX_DIMS];
    int32_t m    = tide_repeat_plan(c->p.n_ints, c->p.ints, x->ndim, x->sizes, x->strides, out->strides, sz, ost, xst);
    int32_t peel = m > TIDE_MAX_DIMS ? m - TIDE_MAX_DIMS : 0;
    int64_t outer = 1;
    for (int32_t k = 0; k < peel; k++) outer *= sz[k];
    for (int64_t i = 0; i < outer; i++) {
        int64_t rest = i, ooff = out->offset, xoff = x->offset;
        for (int32_t k = peel - 1; k >= 0; k--) {
            ooff += (rest % sz[k]) * ost[k];
            xoff += (rest % sz[k]) * xst[k];
            rest /= sz[k];
        }
        tide_tensor * src = view_as(x, m - peel, sz + peel, xst + peel, xoff);
        if (!src) return TIDE_E_OOM;
        tide_status st = copy_to_view(out, m - peel, sz + peel, ost + peel, ooff, src);
        tide_tensor_release(src);
        TIDE_CHECK(st);
    }
    return TIDE_OK;
}

/* -- tril, triu ----------------------------------------------------------------------------- */

/* The shape of x, which must have at least 2 dims; ints[0] (the diagonal)
 * defaults to 0. tril's and triu's rule in ops.def, so that a 1-d input is
 * reported by the call. */
tide_status tide_shape_tril(tide_opcall * c, tide_shape_out * o) {
    char a[128];
    if (c->in[0]->ndim < 2)
        return tide_error_set(TIDE_E_SHAPE, "%s: the input must have at least 2 dimensions, got shape %s",
                              tide_op_name(c->op), tide_shape_str(c->in[0], a, sizeof a));
    if (c->p.n_ints == 0) c->p.ints[0] = 0;
    c->p.n_ints = 1;
    return tide_shape_first(c, o);
}

typedef struct {
    tide_tensor * out;
    int64_t       k;          /* the diagonal */
    bool          lower;      /* tril: zero above the diagonal */
    int64_t       rows, cols;
} tri_ctx;

/* Zeroes the other triangle of rows [b, e) of the batch of matrices (all bits
 * zero is 0 in every dtype). */
static void tri_range(void * ctx_, int64_t b, int64_t e) {
    const tri_ctx *     t   = ctx_;
    const tide_tensor * out = t->out;
    int32_t nd = out->ndim;
    size_t  esz = tide_dtype_size(out->dtype_id);
    int64_t rs = out->strides[nd - 2], cs = out->strides[nd - 1];
    for (int64_t row = b; row < e; row++) {
        int64_t i = row % t->rows, off = out->offset + i * rs, batch = row / t->rows;
        for (int32_t d = nd - 3; d >= 0; d--) {
            off += (batch % out->sizes[d]) * out->strides[d];
            batch /= out->sizes[d];
        }
        int64_t j0, j1;   /* the columns to zero: [j0, j1) */
        if (t->lower) {
            j0 = i + t->k + 1 < 0 ? 0 : i + t->k + 1;
            j1 = t->cols;
        } else {
            j0 = 0;
            j1 = i + t->k < t->cols ? i + t->k : t->cols;
        }
        if (j0 >= j1) continue;
        char * p = (char *)out->storage->data + (off + j0 * cs) * (int64_t)esz;
        if (cs == 1) {
            memset(p, 0, (size_t)(j1 - j0) * esz);
        } else {
            for (int64_t j = j0; j < j1; j++) memset(p + (j - j0) * cs * (int64_t)esz, 0, esz);
        }
    }
}

static tide_status tri(const tide_opcall * c, bool lower) {
    tide_tensor * x = c->in[0], * out = c->out[0];
    char a[128];
    if (x->ndim < 2)
        return tide_error_set(TIDE_E_SHAPE, "%s: the input must have at least 2 dimensions, got shape %s",
                              lower ? "tril" : "triu", tide_shape_str(x, a, sizeof a));
    if (out->nelem == 0) return TIDE_OK;
    if (!tide_same_view(x, out)) TIDE_CHECK(tide_copy_view(out, x));   /* in place: only the zeroing */
    tri_ctx t = {out, c->p.n_ints ? c->p.ints[0] : 0, lower, out->sizes[out->ndim - 2], out->sizes[out->ndim - 1]};
    if (t.k > t.cols) t.k = t.cols;   /* beyond the matrix: same result, and i + k cannot overflow */
    if (t.k < -t.rows) t.k = -t.rows;
    int64_t n = out->nelem / t.cols;
    tide_parallel_for(n, TIDE_GRAIN / t.cols + 1, 1, tri_range, &t);
    return TIDE_OK;
}

tide_status tide_cpu_tril(const tide_opcall * c) { return tri(c, true); }
tide_status tide_cpu_triu(const tide_opcall * c) { return tri(c, false); }
