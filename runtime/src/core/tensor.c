/*
 * tensor.c - tensor headers and views. A tensor is an immutable strided view
 * (sizes, strides, offset, dtype) over a retained storage; every view function
 * here allocates a header and no data. Reading and writing elements is the
 * ops' and the engine's job; the accessors here wait on the engine first.
 */
#include "internal.h"
#include "../graph/graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* -- headers ------------------------------------------------------------------ */

tide_tensor * tide_tensor_alloc_header(tide_storage * s, int32_t dtype) {
    tide_tensor * t = tide_obj_alloc(TIDE_OBJ_TENSOR, sizeof *t);
    if (!t) {
        tide_error_set(TIDE_E_OOM, "out of memory: tensor header");
        return NULL;
    }
    tide_storage_retain(s);
    t->storage  = s;
    t->dtype_id = dtype;
    t->refcount = 1;
    t->dev   = s->device;
    if (TIDE_UNLIKELY(tide_capture != NULL)) t->capture_id = (int32_t)tide_capture->serial;
    return t;
}

void tide_tensor_finish(tide_tensor * t) {
    int64_t n = 1;
    for (int32_t i = 0; i < t->ndim; i++) n *= t->sizes[i];
    t->nelem = n;
}

void tide_tensor_retain(tide_tensor * t) {
    __atomic_fetch_add(&t->refcount, 1, __ATOMIC_RELAXED);
}

void tide_tensor_release(tide_tensor * t) {
    if (!t) return;
    if (__atomic_fetch_sub(&t->refcount, 1, __ATOMIC_ACQ_REL) != 1) return;
    if (t->flags & TIDE_TENSOR_HOOKED) tide_autograd_forget(t);
    if (t->ag_node) tide_node_release(t->ag_node);
    if (t->ag_grad) tide_tensor_release(t->ag_grad);
    tide_storage_release(t->storage);
    tide_obj_free(TIDE_OBJ_TENSOR, t);
}

void tide_tensor_release_many(tide_tensor ** ts, int64_t n) {
    for (int64_t i = 0; i < n; i++) tide_tensor_release(ts[i]);
}

void tide_contiguous_strides(int32_t ndim, const int64_t * sizes, int64_t * strides) {
    int64_t s = 1;
    for (int32_t i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= sizes[i] > 1 ? sizes[i] : 1;
    }
}

char * tide_dims_str(int32_t ndim, const int64_t * sizes, char * buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int32_t i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ",%lld" : "%lld", (long long)sizes[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}

char * tide_shape_str(const tide_tensor * t, char * buf, size_t n) {
    return tide_dims_str(t->ndim, t->sizes, buf, n);
}

static tide_status check_sizes(const char * op, int32_t ndim, const int64_t * sizes, int64_t * numel) {
    if (ndim < 0 || ndim > TIDE_MAX_DIMS)
        return tide_error_set(TIDE_E_SHAPE, "%s: %d dimensions given, at most %d are supported", op, ndim, TIDE_MAX_DIMS);
    int64_t n = 1;
    for (int32_t i = 0; i < ndim; i++) {
        if (sizes[i] < 0)
            return tide_error_set(TIDE_E_SHAPE, "%s: size %lld of dimension %d is negative", op, (long long)sizes[i], i + 1);
        if (sizes[i] && n > INT64_MAX / 16 / sizes[i])
            return tide_error_set(TIDE_E_SHAPE, "%s: %d-d shape is too large", op, ndim);
        n *= sizes[i];
    }
    *numel = n;
    return TIDE_OK;
}

static bool valid_dtype(const char * op, int32_t dtype) {
    if (dtype >= 0 && dtype < TIDE_DTYPE_COUNT) return true;
    tide_error_set(TIDE_E_DTYPE, "%s: unknown dtype %d", op, dtype);
    return false;
}

/* -- creation ----------------------------------------------------------------- */

static tide_tensor * empty(int32_t ndim, const int64_t * sizes, int32_t dtype, tide_device dev, bool deferred) {
    int64_t n;
    if (!valid_dtype("empty", dtype) || check_sizes("empty", ndim, sizes, &n) != TIDE_OK) return NULL;
    size_t         bytes = (size_t)n * tide_dtype_size(dtype);
    tide_storage * s     = deferred ? tide_storage_new_deferred(bytes, dev) : tide_storage_new(bytes, dev);
    if (!s) return NULL;
    tide_tensor * t = tide_tensor_alloc_header(s, dtype);
    tide_storage_release(s);
    if (!t) return NULL;
    t->ndim = ndim;
    if (ndim) memcpy(t->sizes, sizes, (size_t)ndim * sizeof *sizes);
    tide_contiguous_strides(ndim, t->sizes, t->strides);
    t->nelem = n;
    return t;
}

tide_tensor * tide_tensor_empty(int32_t ndim, const int64_t * sizes, int32_t dtype, tide_device dev) {
    return empty(ndim, sizes, dtype, dev, false);
}

tide_tensor * tide_tensor_empty_deferred(int32_t ndim, const int64_t * sizes, int32_t dtype, tide_device dev) {
    return empty(ndim, sizes, dtype, dev, true);
}

tide_tensor * tide_tensor_full(int32_t ndim, const int64_t * sizes, double value, int32_t dtype) {
    tide_tensor * t = tide_tensor_empty(ndim, sizes, dtype, (tide_device){TIDE_DEVICE_CPU, -1});
    if (!t) return NULL;
    tide_op_params p = {.dtype = dtype, .n_ints = ndim};
    p.scalars[0]     = value;
    if (ndim) memcpy(p.ints, sizes, (size_t)ndim * sizeof *sizes);
    tide_tensor * out[1];
    if (tide_op_call(TIDE_OP_full, NULL, 0, &p, out, t) != TIDE_OK) {
        tide_tensor_release(t);
        return NULL;
    }
    tide_tensor_release(out[0]);
    return t;
}

tide_tensor * tide_tensor_zeros(int32_t ndim, const int64_t * sizes, int32_t dtype) {
    return tide_tensor_full(ndim, sizes, 0.0, dtype);
}

tide_tensor * tide_tensor_scalar(double value, int32_t dtype) {
    tide_tensor * t = tide_tensor_empty(0, NULL, dtype, (tide_device){TIDE_DEVICE_CPU, -1});
    if (!t) return NULL;
    /* a fresh storage nobody else can see yet: written directly, no op needed */
    tide_store_double(t->storage->data, dtype, value);
    t->flags |= TIDE_TENSOR_WRAPPED_NUMBER;
    if (TIDE_UNLIKELY(tide_capture != NULL)) tide_graph_on_const(t);
    return t;
}

tide_tensor * tide_tensor_scalar_on(double value, int32_t dtype, tide_device dev) {
    if (dev.type == TIDE_DEVICE_CPU) return tide_tensor_scalar(value, dtype);
    /* made and copied outside any capture: the graph sees the device's number, not the copy */
    struct tide_graph * cap = tide_capture;
    tide_capture            = NULL;
    tide_tensor * h = tide_tensor_scalar(value, dtype), * t = h ? tide_tensor_to(h, -1, dev, 1) : NULL;
    tide_capture            = cap;
    tide_tensor_release(h);
    if (!t) return NULL;
    t->flags |= TIDE_TENSOR_WRAPPED_NUMBER;
    if (TIDE_UNLIKELY(tide_capture != NULL)) {   /* made during the capture, as it would be with it on */
        t->capture_id = (int32_t)tide_capture->serial;
        tide_graph_on_const(t);
    }
    return t;
}

tide_tensor * tide_tensor_from_blob(void * data, int32_t ndim, const int64_t * sizes, const int64_t * strides,
                                    int32_t dtype, void (*free_fn)(void *, void *), void * ctx) {
    int64_t n;
    if (!valid_dtype("from_blob", dtype) || check_sizes("from_blob", ndim, sizes, &n) != TIDE_OK) return NULL;
    if (!data && n > 0) {
        tide_error_set(TIDE_E_VALUE, "from_blob: data is NULL for %lld elements", (long long)n);
        return NULL;
    }
    int64_t span = 1;   /* elements between the lowest and highest address, plus one */
    for (int32_t i = 0; i < ndim; i++) {
        int64_t st = strides ? strides[i] : 0;
        if (st < 0) {
            tide_error_set(TIDE_E_VALUE, "from_blob: stride %lld of dimension %d is negative", (long long)st, i + 1);
            return NULL;
        }
        if (sizes[i] > 0) span += (sizes[i] - 1) * st;
    }
    tide_storage * s = tide_obj_alloc(TIDE_OBJ_STORAGE, sizeof *s);
    if (!s) {
        tide_error_set(TIDE_E_OOM, "out of memory: storage header");
        return NULL;
    }
    atomic_init(&s->refcount, 1);
    s->data     = data;
    s->device   = (tide_device){TIDE_DEVICE_CPU, -1};
    s->free_fn  = free_fn;
    s->free_ctx = ctx;
    tide_tensor * t = tide_tensor_alloc_header(s, dtype);
    tide_storage_release(s);
    if (!t) return NULL;
    t->ndim = ndim;
    if (ndim) memcpy(t->sizes, sizes, (size_t)ndim * sizeof *sizes);
    if (strides)
        memcpy(t->strides, strides, (size_t)ndim * sizeof *strides);
    else
        tide_contiguous_strides(ndim, t->sizes, t->strides);
    if (!strides) span = n;
    s->nbytes = (size_t)(n ? span : 0) * tide_dtype_size(dtype);
    t->nelem  = n;
    if (TIDE_UNLIKELY(tide_capture != NULL)) tide_graph_on_const(t);
    return t;
}

tide_tensor * tide_tensor_from_doubles(const double * data, int32_t ndim, const int64_t * sizes, int32_t dtype) {
    tide_tensor * t = tide_tensor_empty(ndim, sizes, dtype, (tide_device){TIDE_DEVICE_CPU, -1});
    if (!t) return NULL;
    tide_convert(t->storage->data, dtype, 1, data, TIDE_DTYPE_F64, 1, t->nelem);
    if (TIDE_UNLIKELY(tide_capture != NULL)) tide_graph_on_const(t);
    return t;
}

/* -- queries ------------------------------------------------------------------ */

bool tide_views_overlap(const tide_tensor * a, const tide_tensor * b) {
    if (a->storage != b->storage || a->nelem == 0 || b->nelem == 0) return false;
    int64_t lo[2], hi[2];
    const tide_tensor * t[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        int64_t l = t[k]->offset, h = t[k]->offset;
        for (int32_t d = 0; d < t[k]->ndim; d++) {
            int64_t span = (t[k]->sizes[d] - 1) * t[k]->strides[d];
            if (span < 0) l += span; else h += span;
        }
        int64_t esz = (int64_t)tide_esize(t[k]->dtype_id);
        lo[k] = l * esz, hi[k] = (h + 1) * esz;
    }
    return lo[0] < hi[1] && lo[1] < hi[0];
}

bool tide_same_view(const tide_tensor * a, const tide_tensor * b) {
    return a->storage == b->storage && a->offset == b->offset && a->ndim == b->ndim && a->dtype_id == b->dtype_id &&
           !memcmp(a->sizes, b->sizes, (size_t)a->ndim * sizeof(int64_t)) &&
           !memcmp(a->strides, b->strides, (size_t)a->ndim * sizeof(int64_t));
}

int32_t tide_tensor_is_contiguous(const tide_tensor * t) {
    int64_t expected = 1;
    for (int32_t i = t->ndim - 1; i >= 0; i--) {
        if (t->sizes[i] == 1) continue;
        if (t->strides[i] != expected) return 0;
        expected *= t->sizes[i];
    }
    return 1;
}

size_t tide_tensor_nbytes(const tide_tensor * t) { return (size_t)t->nelem * tide_dtype_size(t->dtype_id); }

tide_status tide_tensor_wait(tide_tensor * t) { return tide_engine_wait_storage(t->storage); }

void * tide_tensor_data(tide_tensor * t) {
    if (TIDE_UNLIKELY(tide_capture != NULL) && tide_graph_on_read("a data pointer (data_ptr)") != TIDE_OK) return NULL;
    if (tide_tensor_wait(t) != TIDE_OK) return NULL;
    return tide_tensor_ptr(t);
}

static int64_t element_offset(const tide_tensor * t, int64_t i) {
    int64_t off = t->offset;
    for (int32_t d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->sizes[d]) * t->strides[d];
        i /= t->sizes[d];
    }
    return off;
}

/* Reads of a device tensor's values go through a copy on the host, as
 * PyTorch's item() and tolist() do. */
static tide_tensor * host_copy(tide_tensor * t) {
    return tide_tensor_to(t, t->dtype_id, (tide_device){TIDE_DEVICE_CPU, -1}, 1);
}

tide_status tide_tensor_get(tide_tensor * t, int64_t i, double * out) {
    if (i < 0 || i >= t->nelem)
        return tide_error_set(TIDE_E_INDEX, "item: index %lld is out of range for %lld elements",
                              (long long)i, (long long)t->nelem);
    if (TIDE_UNLIKELY(tide_capture != NULL)) TIDE_CHECK(tide_graph_on_read("item()"));
    if (TIDE_UNLIKELY(t->dev.type != TIDE_DEVICE_CPU)) {
        tide_tensor * h = host_copy(t);
        tide_status   st = h ? tide_tensor_get(h, i, out) : tide_last_status();
        tide_tensor_release(h);
        return st;
    }
    TIDE_CHECK(tide_tensor_wait(t));
    size_t es = tide_dtype_size(t->dtype_id);
    *out = tide_load_double((char *)t->storage->data + element_offset(t, i) * (int64_t)es, t->dtype_id);
    return TIDE_OK;
}

tide_status tide_tensor_to_doubles(tide_tensor * t, double * out) {
    if (TIDE_UNLIKELY(tide_capture != NULL)) TIDE_CHECK(tide_graph_on_read("totable() (or printing)"));
    if (TIDE_UNLIKELY(t->dev.type != TIDE_DEVICE_CPU)) {
        tide_tensor * h = host_copy(t);
        tide_status   st = h ? tide_tensor_to_doubles(h, out) : tide_last_status();
        tide_tensor_release(h);
        return st;
    }
    TIDE_CHECK(tide_tensor_wait(t));
    size_t es = tide_dtype_size(t->dtype_id);
    if (tide_tensor_is_contiguous(t)) {
        tide_convert(out, TIDE_DTYPE_F64, 1, tide_tensor_ptr(t), t->dtype_id, 1, t->nelem);
        if (tide_dtype_is_float(t->dtype_id))   /* one NaN, as tide_load_double gives (dtype.c) */
            for (int64_t i = 0; i < t->nelem; i++)
                if (out[i] != out[i]) out[i] = (double)NAN;
        return TIDE_OK;
    }
    for (int64_t i = 0; i < t->nelem; i++)
        out[i] = tide_load_double((char *)t->storage->data + element_offset(t, i) * (int64_t)es, t->dtype_id);
    return TIDE_OK;
}

/* -- views -------------------------------------------------------------------- */

/* A view of t; `kind` and ints[0..n) say how it was made, for autograd. */
static tide_tensor * new_view(tide_tensor * t, int32_t ndim, const int64_t * sizes, const int64_t * strides,
                              int64_t offset, int32_t kind, const int64_t * ints, int32_t n) {
    tide_tensor * v = tide_tensor_alloc_header(t->storage, t->dtype_id);
    if (!v) return NULL;
    v->ndim   = ndim;
    v->offset = offset;
    v->flags  = TIDE_TENSOR_VIEW;
    if (ndim) {
        memcpy(v->sizes, sizes, (size_t)ndim * sizeof *sizes);
        memcpy(v->strides, strides, (size_t)ndim * sizeof *strides);
    }
    tide_tensor_finish(v);
    if (TIDE_UNLIKELY(tide_capture != NULL)) tide_graph_on_view(t, v, kind, ints, n);
    if (TIDE_UNLIKELY(tide_needs_grad(t))) return tide_autograd_view(t, v, kind, ints, n);
    return v;
}

static bool wrap(const char * op, int64_t dim, int32_t ndim, int32_t * out) {
    return tide_wrap_dim(op, dim, ndim, out) == TIDE_OK;
}

tide_status tide_wrap_dim(const char * op, int64_t dim, int32_t ndim, int32_t * out) {
    int32_t n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim >= n)
        return tide_error_set(TIDE_E_INDEX, "%s: dimension %lld is out of range for a %d-d tensor",
                              op, (long long)(dim >= 0 ? dim + 1 : dim), ndim);
    *out = (int32_t)(dim < 0 ? dim + n : dim);
    return TIDE_OK;
}

/* Strides for viewing t's elements with new sizes without copying, or false
 * (PyTorch's computeStride: each run of merged old dims must be contiguous). */
static bool view_strides(const tide_tensor * t, int32_t ndim, const int64_t * sizes, int64_t * strides) {
    if (t->nelem == 0 || t->ndim == 0) {
        tide_contiguous_strides(ndim, sizes, strides);
        return true;
    }
    int32_t view_d = ndim - 1;
    int64_t chunk_base_stride = t->strides[t->ndim - 1];
    int64_t tensor_numel = 1, view_numel = 1;
    for (int32_t d = t->ndim - 1; d >= 0; d--) {
        tensor_numel *= t->sizes[d];
        if (d == 0 || (t->sizes[d - 1] != 1 && t->strides[d - 1] != tensor_numel * chunk_base_stride)) {
            while (view_d >= 0 && (view_numel < tensor_numel || sizes[view_d] == 1)) {
                strides[view_d] = view_numel * chunk_base_stride;
                view_numel *= sizes[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return false;
            if (d > 0) {
                chunk_base_stride = t->strides[d - 1];
                tensor_numel = 1;
                view_numel   = 1;
            }
        }
    }
    return view_d == -1;
}

static tide_status infer_sizes(const char * op, const tide_tensor * t, int32_t ndim, const int64_t * in, int64_t * out) {
    if (ndim < 0 || ndim > TIDE_MAX_DIMS)
        return tide_error_set(TIDE_E_SHAPE, "%s: %d dimensions given, at most %d are supported", op, ndim, TIDE_MAX_DIMS);
    int32_t infer = -1;
    int64_t known = 1;
    for (int32_t i = 0; i < ndim; i++) {
        out[i] = in[i];
        if (in[i] == -1) {
            if (infer >= 0) return tide_error_set(TIDE_E_SHAPE, "%s: only one size may be -1", op);
            infer = i;
        } else if (in[i] < 0) {
            return tide_error_set(TIDE_E_SHAPE, "%s: size %lld of dimension %d is negative", op, (long long)in[i], i + 1);
        } else {
            known *= in[i];
        }
    }
    char a[128], b[128];
    if (infer >= 0) {
        if (known == 0 || t->nelem % known != 0)
            return tide_error_set(TIDE_E_SHAPE, "%s: shape %s is invalid for input of size %lld", op,
                                  tide_dims_str(ndim, in, a, sizeof a), (long long)t->nelem);
        out[infer] = t->nelem / known;
    } else if (known != t->nelem) {
        return tide_error_set(TIDE_E_SHAPE, "%s: shape %s is invalid for input of shape %s (%lld elements)", op,
                              tide_dims_str(ndim, in, a, sizeof a), tide_shape_str(t, b, sizeof b), (long long)t->nelem);
    }
    return TIDE_OK;
}

tide_tensor * tide_tensor_view(tide_tensor * t, int32_t ndim, const int64_t * sizes) {
    int64_t s[TIDE_MAX_DIMS], st[TIDE_MAX_DIMS];
    if (infer_sizes("view", t, ndim, sizes, s) != TIDE_OK) return NULL;
    if (!view_strides(t, ndim, s, st)) {
        char a[128], b[128];
        tide_error_set(TIDE_E_SHAPE, "view: shape %s is not compatible with the strides of the input (shape %s); "
                       "use reshape, which copies when needed",
                       tide_dims_str(ndim, s, a, sizeof a), tide_shape_str(t, b, sizeof b));
        return NULL;
    }
    return new_view(t, ndim, s, st, t->offset, TIDE_VIEW_RESHAPE, NULL, 0);
}

tide_tensor * tide_tensor_reshape(tide_tensor * t, int32_t ndim, const int64_t * sizes) {
    int64_t s[TIDE_MAX_DIMS], st[TIDE_MAX_DIMS];
    if (infer_sizes("reshape", t, ndim, sizes, s) != TIDE_OK) return NULL;
    if (view_strides(t, ndim, s, st)) return new_view(t, ndim, s, st, t->offset, TIDE_VIEW_RESHAPE, NULL, 0);
    tide_tensor * c = tide_tensor_contiguous(t);
    if (!c) return NULL;
    tide_contiguous_strides(ndim, s, st);
    tide_tensor * v = new_view(c, ndim, s, st, c->offset, TIDE_VIEW_RESHAPE, NULL, 0);
    if (v) v->flags &= ~(uint32_t)TIDE_TENSOR_VIEW;   /* a view of a fresh copy only */
    tide_tensor_release(c);
    return v;
}

tide_tensor * tide_tensor_permute(tide_tensor * t, int32_t ndim, const int64_t * dims) {
    if (ndim != t->ndim) {
        tide_error_set(TIDE_E_SHAPE, "permute: %d dimensions given for a %d-d tensor", ndim, t->ndim);
        return NULL;
    }
    int64_t s[TIDE_MAX_DIMS], st[TIDE_MAX_DIMS], perm[TIDE_MAX_DIMS];
    bool    seen[TIDE_MAX_DIMS] = {0};
    for (int32_t i = 0; i < ndim; i++) {
        int32_t d = 0;
        if (!wrap("permute", dims[i], t->ndim, &d)) return NULL;
        if (seen[d]) {
            tide_error_set(TIDE_E_INDEX, "permute: dimension %d is repeated", d + 1);
            return NULL;
        }
        seen[d] = true;
        perm[i] = d;
        s[i]    = t->sizes[d];
        st[i]   = t->strides[d];
    }
    return new_view(t, ndim, s, st, t->offset, TIDE_VIEW_PERMUTE, perm, ndim);
}

tide_tensor * tide_tensor_transpose(tide_tensor * t, int32_t d0, int32_t d1) {
    int32_t a = 0, b = 0;
    if (!wrap("transpose", d0, t->ndim, &a) || !wrap("transpose", d1, t->ndim, &b)) return NULL;
    if (t->ndim == 0) return new_view(t, 0, NULL, NULL, t->offset, TIDE_VIEW_ALIAS, NULL, 0);
    int64_t s[TIDE_MAX_DIMS], st[TIDE_MAX_DIMS], perm[TIDE_MAX_DIMS];
    memcpy(s, t->sizes, sizeof s);
    memcpy(st, t->strides, sizeof st);
    s[a] = t->sizes[b], s[b] = t->sizes[a];
    st[a] = t->strides[b], st[b] = t->strides[a];
    for (int32_t i = 0; i < t->ndim; i++) perm[i] = i;
    perm[a] = b, perm[b] = a;
    return new_view(t, t->ndim, s, st, t->offset, TIDE_VIEW_PERMUTE, perm, t->ndim);
}

tide_tensor * tide_tensor_expand(tide_tensor * t, int32_t ndim, const int64_t * sizes) {
    char a[128], b[128];
    if (ndim < t->ndim || ndim > TIDE_MAX_DIMS) {
        tide_error_set(TIDE_E_SHAPE, "expand: cannot expand shape %s to %d dimensions",
                       tide_shape_str(t, a, sizeof a), ndim);
        return NULL;
    }
    int64_t s[TIDE_MAX_DIMS], st[TIDE_MAX_DIMS];
    for (int32_t i = ndim - 1, j = t->ndim - 1; i >= 0; i--, j--) {
        int64_t want = sizes[i];
        if (j >= 0) {
            int64_t have = t->sizes[j];
            if (want == -1) want = have;
            if (have == want) {
                s[i] = have, st[i] = t->strides[j];
            } else if (have == 1 && want >= 0) {
                s[i] = want, st[i] = 0;
            } else {
                tide_error_set(TIDE_E_SHAPE, "expand: shape %s cannot be expanded to %s: size %lld of dimension %d is not 1",
                               tide_shape_str(t, a, sizeof a), tide_dims_str(ndim, sizes, b, sizeof b),
                               (long long)have, j + 1);
                return NULL;
            }
        } else {
            if (want < 0) {
                tide_error_set(TIDE_E_SHAPE, "expand: size %lld is invalid for a new leading dimension", (long long)want);
                return NULL;
            }
            s[i] = want, st[i] = 0;
        }
    }
    return new_view(t, ndim, s, st, t->offset, TIDE_VIEW_EXPAND, NULL, 0);
}

tide_tensor * tide_tensor_slice(tide_tensor * t, int32_t dim, int64_t start, int64_t stop, int64_t step) {
    int32_t d = 0;
    if (t->ndim == 0) {
        tide_error_set(TIDE_E_INDEX, "slice: a 0-d tensor has no dimension to slice");
        return NULL;
    }
    if (!wrap("slice", dim, t->ndim, &d)) return NULL;
    if (step <= 0) {
        tide_error_set(TIDE_E_VALUE, "slice: step must be positive, got %lld", (long long)step);
        return NULL;
    }
    int64_t n = t->sizes[d];
    if (start < 0) start += n;
    if (stop < 0) stop += n;
    if (start < 0) start = 0;
    if (stop > n) stop = n;
    if (start > n) start = n;
    int64_t len = stop > start ? (stop - start + step - 1) / step : 0;
    int64_t s[TIDE_MAX_DIMS], st[TIDE_MAX_DIMS];
    memcpy(s, t->sizes, sizeof s);
    memcpy(st, t->strides, sizeof st);
    s[d]  = len;
    st[d] = t->strides[d] * step;
    int64_t args[4] = {d, start, start + len * step, step};
    return new_view(t, t->ndim, s, st, t->offset + (len ? start * t->strides[d] : 0), TIDE_VIEW_SLICE, args, 4);
}

tide_tensor * tide_tensor_narrow(tide_tensor * t, int32_t dim, int64_t start, int64_t length) {
    int32_t d = 0;
    if (t->ndim == 0) {
        tide_error_set(TIDE_E_INDEX, "narrow: a 0-d tensor has no dimension to narrow");
        return NULL;
    }
    if (!wrap("narrow", dim, t->ndim, &d)) return NULL;
    int64_t n = t->sizes[d];
    if (start < 0) start += n;
    if (start < 0 || length < 0 || start + length > n) {
        tide_error_set(TIDE_E_INDEX, "narrow: start %lld and length %lld are out of range for dimension %d of size %lld",
                       (long long)start + 1, (long long)length, d + 1, (long long)n);
        return NULL;
    }
    int64_t s[TIDE_MAX_DIMS];
    memcpy(s, t->sizes, sizeof s);
    s[d] = length;
    int64_t args[4] = {d, start, start + length, 1};
    return new_view(t, t->ndim, s, t->strides, t->offset + start * t->strides[d], TIDE_VIEW_SLICE, args, 4);
}

tide_tensor * tide_tensor_select(tide_tensor * t, int32_t dim, int64_t index) {
    int32_t d = 0;
    if (t->ndim == 0) {
        tide_error_set(TIDE_E_INDEX, "select: cannot index a 0-d tensor");
        return NULL;
    }
    if (!wrap("select", dim, t->ndim, &d)) return NULL;
    int64_t n = t->sizes[d];
    if (index < -n || index >= n) {
        tide_error_set(TIDE_E_INDEX, "select: index %lld is out of range for dimension %d of size %lld",
                       (long long)(index >= 0 ? index + 1 : index), d + 1, (long long)n);
        return NULL;
    }
    if (index < 0) index += n;
    int64_t s[TIDE_MAX_DIMS], st[TIDE_MAX_DIMS];
    for (int32_t i = 0, j = 0; i < t->ndim; i++)
        if (i != d) s[j] = t->sizes[i], st[j++] = t->strides[i];
    int64_t args[4] = {d, index, index + 1, 0};
    return new_view(t, t->ndim - 1, s, st, t->offset + index * t->strides[d], TIDE_VIEW_SLICE, args, 4);
}

tide_tensor * tide_tensor_squeeze(tide_tensor * t, int32_t dim) {
    int64_t s[TIDE_MAX_DIMS], st[TIDE_MAX_DIMS];
    int32_t n = 0, d = -1;
    if (dim != -1 && !wrap("squeeze", dim, t->ndim, &d)) return NULL;
    for (int32_t i = 0; i < t->ndim; i++) {
        bool drop = t->sizes[i] == 1 && (d < 0 || i == d);
        if (!drop) s[n] = t->sizes[i], st[n++] = t->strides[i];
    }
    return new_view(t, n, s, st, t->offset, TIDE_VIEW_RESHAPE, NULL, 0);
}

tide_tensor * tide_tensor_unsqueeze(tide_tensor * t, int32_t dim) {
    int32_t d = 0;
    if (t->ndim >= TIDE_MAX_DIMS) {
        tide_error_set(TIDE_E_SHAPE, "unsqueeze: a tensor may have at most %d dimensions", TIDE_MAX_DIMS);
        return NULL;
    }
    if (tide_wrap_dim("unsqueeze", dim, t->ndim + 1, &d) != TIDE_OK) return NULL;
    int64_t s[TIDE_MAX_DIMS], st[TIDE_MAX_DIMS];
    for (int32_t i = 0, j = 0; i <= t->ndim; i++) {
        if (i == d) {
            s[i]  = 1;
            st[i] = d < t->ndim ? t->sizes[d] * t->strides[d] : 1;
        } else {
            s[i] = t->sizes[j], st[i] = t->strides[j], j++;
        }
    }
    return new_view(t, t->ndim + 1, s, st, t->offset, TIDE_VIEW_RESHAPE, NULL, 0);
}

tide_tensor * tide_tensor_as_strided(tide_tensor * t, int32_t ndim, const int64_t * sizes, const int64_t * strides,
                                     int64_t offset) {
    int64_t n;
    if (check_sizes("as_strided", ndim, sizes, &n) != TIDE_OK) return NULL;
    int64_t hi = offset;
    for (int32_t i = 0; i < ndim; i++) {
        if (strides[i] < 0) {
            tide_error_set(TIDE_E_VALUE, "as_strided: stride %lld is negative", (long long)strides[i]);
            return NULL;
        }
        if (sizes[i] > 0) hi += (sizes[i] - 1) * strides[i];
    }
    int64_t cap = (int64_t)(t->storage->nbytes / tide_dtype_size(t->dtype_id));
    if (offset < 0 || (n > 0 && hi >= cap)) {
        tide_error_set(TIDE_E_INDEX, "as_strided: the view reaches element %lld of a storage of %lld elements",
                       (long long)hi, (long long)cap);
        return NULL;
    }
    return new_view(t, ndim, sizes, strides, offset, TIDE_VIEW_STRIDED, NULL, 0);
}

/* -- copies ------------------------------------------------------------------- */

tide_tensor * tide_tensor_to(tide_tensor * t, int32_t dtype, tide_device dev, int32_t copy) {
    if (dtype < 0) dtype = t->dtype_id;
    if (!valid_dtype("to", dtype)) return NULL;
    if (!copy && dtype == t->dtype_id && dev.type == t->dev.type && dev.index == t->dev.index) {
        tide_tensor_retain(t);
        return t;
    }
    if (t->dev.type == TIDE_DEVICE_CUDA && dev.type == TIDE_DEVICE_CUDA && t->dev.index != dev.index &&
        (dtype != t->dtype_id || !tide_tensor_is_contiguous(t))) {
        /* between devices bytes move as they are: convert on the source first */
        tide_tensor * dense = tide_tensor_to(t, dtype, t->dev, 1);
        tide_tensor * r     = dense ? tide_tensor_to(dense, dtype, dev, 1) : NULL;
        tide_tensor_release(dense);
        return r;
    }
    /* on a device, memory of the stream that writes it first (storage.c) */
    tide_tensor * out = dev.type == TIDE_DEVICE_CUDA && !tide_capture
                            ? tide_tensor_empty_deferred(t->ndim, t->sizes, dtype, dev)
                            : tide_tensor_empty(t->ndim, t->sizes, dtype, dev);
    if (!out) return NULL;
    tide_tensor * in[1] = {t}, * res[1];
    if (tide_op_call(TIDE_OP_copy, in, 1, NULL, res, out) != TIDE_OK) {
        tide_tensor_release(out);
        return NULL;
    }
    tide_tensor_release(res[0]);
    return out;
}

tide_tensor * tide_tensor_contiguous(tide_tensor * t) {
    if (tide_tensor_is_contiguous(t)) {
        tide_tensor_retain(t);
        return t;
    }
    return tide_tensor_to(t, t->dtype_id, t->dev, 1);
}
