/*
 * registry.c - expands ops.def into the op table and runs ops: the one
 * dispatch path every op takes (validate, infer dtypes and shapes, allocate
 * or check outputs, push the kernel on the engine). The dtype rules and the
 * shape rules shared by many ops live here; op-specific shape rules live
 * with their kernels. No kernel code and no per-op special cases here.
 */
#include "../autograd/grad.h"
#include "../engine/transfer.h"
#include "../graph/graph.h"

#include <stdio.h>
#include <stdlib.h>

/* -- rule and kernel declarations generated from ops.def ------------------------------- */

#define X(name, nin, nout, dt, acc, sh, fl, par)                                   \
    extern tide_status tide_cpu_##name(const tide_opcall *) __attribute__((weak)); \
    extern tide_status tide_shape_##sh(tide_opcall *, tide_shape_out *) __attribute__((weak)); \
    extern const tide_grad_rule tide_grad_##name __attribute__((weak));
#include "ops.def"
#undef X

/* Compute-dtype masks: which compute dtypes an op's kernels handle. */
#define A_FLOAT ((1u << TIDE_DTYPE_F32) | (1u << TIDE_DTYPE_F64))
#define A_NUM   (A_FLOAT | (1u << TIDE_DTYPE_I32) | (1u << TIDE_DTYPE_I64) | (1u << TIDE_DTYPE_U8))
#define A_ALL   (A_NUM | (1u << TIDE_DTYPE_BOOL))

#define ELEMWISE TIDE_OPF_ELEMWISE
#define COMMUTE  TIDE_OPF_COMMUTE
#define INPLACE  TIDE_OPF_INPLACE
#define REDUCE   TIDE_OPF_REDUCE
#define RANDOM   TIDE_OPF_RANDOM
#define NOINPUT  TIDE_OPF_NOINPUT
#define VARIADIC TIDE_OPF_VARIADIC
#define XDEVICE  TIDE_OPF_XDEVICE

/* -- dtype rules ----------------------------------------------------------------------- */

static int category(int32_t d) { return d == TIDE_DTYPE_BOOL ? 0 : tide_dtype_is_float(d) ? 2 : 1; }

/* PyTorch's result_type: tensors with dimensions decide, 0-d tensors and then
 * wrapped host numbers only when they are of a higher category (bool < int < float). */
static int32_t promote_inputs(const tide_opcall * c, int32_t first, int32_t last) {
    int32_t dim = -1, zero = -1, wrapped = -1;
    for (int32_t i = first; i <= last; i++) {
        const tide_tensor * t = c->in[i];
        int32_t * slot = (t->flags & TIDE_TENSOR_WRAPPED_NUMBER) ? &wrapped : t->ndim == 0 ? &zero : &dim;
        *slot = *slot < 0 ? t->dtype_id : tide_dtype_promote(*slot, t->dtype_id);
    }
    int32_t r = dim;
    if (zero >= 0 && (r < 0 || category(zero) > category(r))) r = zero;
    if (wrapped >= 0 && (r < 0 || category(wrapped) > category(r))) {
        switch (category(wrapped)) {
        case 2:  r = TIDE_DTYPE_F32; break;  /* the default float dtype */
        case 1:  r = TIDE_DTYPE_I64; break;
        default: r = TIDE_DTYPE_BOOL; break;
        }
    }
    return r;
}

static int32_t requested(const tide_opcall * c, int32_t fallback) { return c->p.dtype >= 0 ? c->p.dtype : fallback; }

#define RULE(name) static tide_status dt_##name(tide_opcall * c, int32_t * o)
RULE(SAME)    { o[0] = c->in[0]->dtype_id; c->compute_dtype = o[0]; return TIDE_OK; }
RULE(PROMOTE) { o[0] = promote_inputs(c, 0, c->n_in - 1); c->compute_dtype = o[0]; return TIDE_OK; }
RULE(FLOAT) {
    int32_t d = c->p.dtype >= 0 ? c->p.dtype : promote_inputs(c, 0, c->n_in - 1);
    o[0] = tide_dtype_is_float(d) ? d : TIDE_DTYPE_F32;
    c->compute_dtype = o[0];
    return TIDE_OK;
}
RULE(FLOATS) {   /* FLOAT for each output */
    TIDE_CHECK(dt_FLOAT(c, o));
    for (int32_t i = 1; i < c->n_out; i++) o[i] = o[0];
    return TIDE_OK;
}
RULE(CMP)     { c->compute_dtype = promote_inputs(c, 0, c->n_in - 1); o[0] = TIDE_DTYPE_BOOL; return TIDE_OK; }
RULE(LOGICAL) { c->compute_dtype = TIDE_DTYPE_BOOL; o[0] = TIDE_DTYPE_BOOL; return TIDE_OK; }
RULE(PARAM)   { o[0] = requested(c, TIDE_DTYPE_F32); c->compute_dtype = o[0]; return TIDE_OK; }
RULE(PARAM_I64) { o[0] = requested(c, TIDE_DTYPE_I64); c->compute_dtype = o[0]; return TIDE_OK; }
RULE(SUM) {
    int32_t d = promote_inputs(c, 0, 0);
    o[0] = requested(c, category(d) == 2 ? d : TIDE_DTYPE_I64);
    c->compute_dtype = o[0];
    return TIDE_OK;
}
RULE(INDEX)  { c->compute_dtype = c->in[0]->dtype_id; o[0] = TIDE_DTYPE_I64; return TIDE_OK; }
RULE(SEARCH) { c->compute_dtype = promote_inputs(c, 0, c->n_in - 1); o[0] = TIDE_DTYPE_I64; return TIDE_OK; }
RULE(VALIDX) { c->compute_dtype = o[0] = c->in[0]->dtype_id; o[1] = TIDE_DTYPE_I64; return TIDE_OK; }
RULE(WHERE)  { o[0] = promote_inputs(c, 1, 2); c->compute_dtype = o[0]; return TIDE_OK; }
RULE(COPY) {
    /* a copy into a given tensor converts to its dtype, whatever it is (copy_) */
    o[0] = c->out[0] ? c->out[0]->dtype_id : requested(c, c->in[0]->dtype_id);
    c->compute_dtype = o[0];
    return TIDE_OK;
}
#undef RULE

/* -- the op table ------------------------------------------------------------------------ */

typedef struct {
    tide_op_def def;
    uint32_t    accepts;
    const char * shape_rule_name;
    const tide_grad_rule * grad;   /* autograd/rules.c: tide_grad_<name>, NULL if not differentiable */
} op_entry;

static const op_entry ops[] = {
#define X(name, nin, nout, dt, acc, sh, fl, par) \
    {{#name, par, nin, nout, (uint32_t)(fl), dt_##dt, tide_shape_##sh, tide_cpu_##name}, acc, #sh, &tide_grad_##name},
#include "ops.def"
#undef X
};

enum { N_OPS = sizeof ops / sizeof ops[0] };
_Static_assert((int)N_OPS <= (int)TIDE_OPS_MAX, "more ops than TIDE_OPS_MAX");

int32_t tide_op_count(void) { return N_OPS; }

int32_t tide_op_find(const char * name) {
    if (!name) return -1;
    for (int32_t i = 0; i < N_OPS; i++)
        if (strcmp(ops[i].def.name, name) == 0) return i;
    return -1;
}

const tide_grad_rule * tide_op_grad_rule(int32_t op) { return op >= 0 && op < N_OPS ? ops[op].grad : NULL; }
const tide_op_def * tide_op_def_get(int32_t op) { return op >= 0 && op < N_OPS ? &ops[op].def : NULL; }
const char *        tide_op_name(int32_t op) { return op >= 0 && op < N_OPS ? ops[op].def.name : "?"; }

tide_status tide_op_get_info(int32_t op, tide_op_info * out) {
    if (op < 0 || op >= N_OPS) return tide_error_set(TIDE_E_VALUE, "op_info: no op has id %d", op);
    const tide_op_def * d = &ops[op].def;
    *out = (tide_op_info){d->name, d->params, d->n_in, d->n_out, d->flags, d->cpu != NULL};
    return TIDE_OK;
}

/* -- shared shape rules ------------------------------------------------------------------ */

tide_status tide_broadcast_shape(const char * op, tide_tensor * const * ts, int32_t n, int32_t * ndim, int64_t * sizes) {
    int32_t nd = 0;
    for (int32_t i = 0; i < n; i++)
        if (ts[i]->ndim > nd) nd = ts[i]->ndim;
    for (int32_t d = 0; d < nd; d++) sizes[d] = 1;
    for (int32_t i = 0; i < n; i++) {
        const tide_tensor * t = ts[i];
        for (int32_t j = 0; j < t->ndim; j++) {
            int32_t d = nd - t->ndim + j;
            int64_t s = t->sizes[j];
            if (s == sizes[d] || s == 1) continue;
            if (sizes[d] == 1) {
                sizes[d] = s;
                continue;
            }
            char a[128], b[128];
            int32_t other = 0;   /* the earlier input that set this size */
            for (int32_t k = 0; k < i; k++) {
                int32_t kj = ts[k]->ndim - nd + d;
                if (kj >= 0 && ts[k]->sizes[kj] == sizes[d]) { other = k; break; }
            }
            return tide_error_set(TIDE_E_SHAPE, "%s: shapes %s and %s cannot be broadcast: size %lld ~= %lld at dimension %d",
                                  op, tide_shape_str(ts[other], a, sizeof a), tide_shape_str(t, b, sizeof b),
                                  (long long)sizes[d], (long long)s, d + 1);
        }
    }
    *ndim = nd;
    return TIDE_OK;
}

tide_status tide_shape_bcast(tide_opcall * c, tide_shape_out * o) {
    return tide_broadcast_shape(tide_op_name(c->op), c->in, c->n_in, &o->ndim[0], o->sizes[0]);
}

tide_status tide_shape_first(tide_opcall * c, tide_shape_out * o) {
    o->ndim[0] = c->in[0]->ndim;
    memcpy(o->sizes[0], c->in[0]->sizes, sizeof o->sizes[0]);
    return TIDE_OK;
}

/* Shape of the first input; ints[0] is a dim of it, normalised in place. */
tide_status tide_shape_first_dim(tide_opcall * c, tide_shape_out * o) {
    int32_t d;
    TIDE_CHECK(tide_wrap_dim(tide_op_name(c->op), c->p.n_ints ? c->p.ints[0] : -1, c->in[0]->ndim, &d));
    c->p.ints[0] = d;
    c->p.n_ints  = 1;
    return tide_shape_first(c, o);
}

/* x's shape; the mask (input 2) must broadcast to it. */
tide_status tide_shape_masked(tide_opcall * c, tide_shape_out * o) {
    int32_t nd = 0;
    int64_t s[TIDE_MAX_DIMS];
    TIDE_CHECK(tide_broadcast_shape(tide_op_name(c->op), c->in, 2, &nd, s));
    const tide_tensor * x = c->in[0];
    if (nd != x->ndim || memcmp(s, x->sizes, (size_t)nd * sizeof *s) != 0) {
        char a[128], b[128];
        return tide_error_set(TIDE_E_SHAPE, "%s: mask of shape %s does not broadcast to the input's shape %s",
                              tide_op_name(c->op), tide_shape_str(c->in[1], a, sizeof a), tide_shape_str(x, b, sizeof b));
    }
    return tide_shape_first(c, o);
}

/* Sizes given in params.ints (creation ops: full, rand, eye as [n,m], randperm as [n]). */
tide_status tide_shape_sizes(tide_opcall * c, tide_shape_out * o) {
    if (c->p.n_ints < 0 || c->p.n_ints > TIDE_MAX_DIMS)
        return tide_error_set(TIDE_E_SHAPE, "%s: %d sizes given, at most %d dimensions are supported",
                              tide_op_name(c->op), c->p.n_ints, TIDE_MAX_DIMS);
    for (int32_t i = 0; i < c->p.n_ints; i++)
        if (c->p.ints[i] < 0)
            return tide_error_set(TIDE_E_SHAPE, "%s: size %lld of dimension %d is negative",
                                  tide_op_name(c->op), (long long)c->p.ints[i], i + 1);
    o->ndim[0] = c->p.n_ints;
    memcpy(o->sizes[0], c->p.ints, (size_t)c->p.n_ints * sizeof(int64_t));
    return TIDE_OK;
}

/* Reduction over params.ints dims (none given: all), normalised and sorted in
 * place; keepdim keeps them as size 1. */
tide_status tide_shape_reduce(tide_opcall * c, tide_shape_out * o) {
    const tide_tensor * x = c->in[0];
    const char *        op = tide_op_name(c->op);
    bool reduced[TIDE_MAX_DIMS] = {0};
    if (c->p.n_ints > TIDE_MAX_DIMS)
        return tide_error_set(TIDE_E_INDEX, "%s: %d dimensions given for a %d-d tensor", op, c->p.n_ints, x->ndim);
    if (c->p.n_ints == 0) {
        for (int32_t d = 0; d < x->ndim; d++) reduced[d] = true;
    }
    for (int32_t i = 0; i < c->p.n_ints; i++) {
        int32_t d;
        TIDE_CHECK(tide_wrap_dim(op, c->p.ints[i], x->ndim, &d));
        if (x->ndim == 0) continue;
        if (reduced[d]) return tide_error_set(TIDE_E_INDEX, "%s: dimension %d is repeated", op, d + 1);
        reduced[d] = true;
    }
    int32_t n = 0, k = 0;
    for (int32_t d = 0; d < x->ndim; d++) {
        if (reduced[d]) {
            c->p.ints[k++] = d;
            if (c->p.keepdim) o->sizes[0][n++] = 1;
        } else {
            o->sizes[0][n++] = x->sizes[d];
        }
    }
    c->p.n_ints = k;
    o->ndim[0]  = n;
    /* an extreme (max, min, their indices) of no elements does not exist: refused
     * here, at the call, on every device, rather than by the kernel */
    int32_t id = c->op;
    if (id == TIDE_OP_amax || id == TIDE_OP_amin || id == TIDE_OP_max_dim || id == TIDE_OP_min_dim ||
        id == TIDE_OP_argmax || id == TIDE_OP_argmin) {
        int64_t count = 1;
        for (int32_t d = 0; d < x->ndim; d++)
            if (reduced[d]) count *= x->sizes[d];
        if (count == 0)
            return tide_error_set(TIDE_E_SHAPE, "%s: cannot reduce over an empty dimension of size 0", op);
    }
    for (int32_t i = 1; i < c->n_out; i++) {
        o->ndim[i] = n;
        memcpy(o->sizes[i], o->sizes[0], sizeof o->sizes[0]);
    }
    return TIDE_OK;
}

/* Reduction over one dim ints[0], or over all elements when no dim is given. */
tide_status tide_shape_reduce_one(tide_opcall * c, tide_shape_out * o) {
    if (c->p.n_ints > 1)
        return tide_error_set(TIDE_E_INDEX, "%s: takes one dimension, %d given", tide_op_name(c->op), c->p.n_ints);
    return tide_shape_reduce(c, o);
}

/* -- dispatch ------------------------------------------------------------------------------ */

static tide_status run_kernel(void * ctx) {
    const tide_opcall * c = ctx;
    return ops[c->op].def.cpu(c);
}

/* The prepared kernel of an op on a CUDA device: such an op runs as an engine
 * task (run_cuda, then complete_cuda once the device has done it), never by
 * a direct call, which would return before the device ran it. */
static tide_status cuda_not_direct(const tide_opcall * c) {
    return tide_error_set(TIDE_E_INTERNAL, "%s: an op on a CUDA device cannot be called directly, only enqueued",
                          tide_op_name(c->op));
}

static tide_status run_cuda(void * ctx) { return tide_cuda_launch(ctx); }
static tide_status complete_cuda(void * ctx) { return tide_cuda_complete(ctx); }

static void keep_call(void * ctx) {
    tide_opcall * c = ctx;
    for (int32_t i = 0; i < c->n_in; i++) tide_tensor_retain(c->in[i]);
    for (int32_t i = 0; i < c->n_out; i++) tide_tensor_retain(c->out[i]);
}

static void drop_call(void * ctx) {
    tide_opcall * c = ctx;
    if (TIDE_UNLIKELY(c->dev_report != NULL)) tide_cuda_drop_report(c);
    for (int32_t i = 0; i < c->n_in; i++) tide_tensor_release(c->in[i]);
    for (int32_t i = 0; i < c->n_out; i++) tide_tensor_release(c->out[i]);
}

static void describe_call(const void * ctx, char * buf, size_t n) {
    const tide_opcall * c = ctx;
    size_t used = 0;
    buf[0] = 0;
    for (int32_t i = 0; i < c->n_in && used + 2 < n; i++) {
        char sh[128];
        used += (size_t)snprintf(buf + used, n - used, "%s%s %s", i ? ", " : "",
                                 tide_dtype_name(c->in[i]->dtype_id), tide_shape_str(c->in[i], sh, sizeof sh));
    }
    if (c->n_in == 0 && c->n_out > 0) {
        char sh[128];
        snprintf(buf + used, n - used, "-> %s", tide_shape_str(c->out[0], sh, sizeof sh));
    }
}

/* Whether writing `out` while reading the inputs could read an element after it
 * was overwritten. Identical views are safe for elementwise ops and for the first
 * input of ops that declare INPLACE; any other sharing of storage is not. */
static bool needs_temp(const op_entry * e, const tide_opcall * c, const tide_tensor * out) {
    for (int32_t i = 0; i < c->n_in; i++) {
        const tide_tensor * t = c->in[i];
        if (t->storage != out->storage || t->nelem == 0) continue;
        bool identical = tide_same_view(t, out);
        if (identical && (e->def.flags & TIDE_OPF_ELEMWISE)) continue;
        if (identical && i == 0 && (e->def.flags & TIDE_OPF_INPLACE)) continue;
        return true;
    }
    return false;
}

/* The device an op's inputs live on: that of the first input that is not a
 * wrapped host number (those go with tensors on any device). */
static const tide_tensor * device_input(tide_tensor * const * inputs, int32_t n_in) {
    for (int32_t i = 0; i < n_in; i++)
        if (!(inputs[i]->flags & TIDE_TENSOR_WRAPPED_NUMBER)) return inputs[i];
    return n_in ? inputs[0] : NULL;
}

static bool can_cast(int32_t from, int32_t to) { return category(from) <= category(to); }

static tide_status check_out(const op_entry * e, const tide_opcall * c, const tide_shape_out * shp, int32_t dtype,
                             const tide_tensor * out) {
    const char * op = e->def.name;
    char a[128], b[128];
    bool ok;
    if (e->def.flags & TIDE_OPF_ELEMWISE) {  /* the result may broadcast to the destination */
        ok = shp->ndim[0] <= out->ndim;
        for (int32_t i = 0; ok && i < shp->ndim[0]; i++) {
            int64_t s = shp->sizes[0][i], d = out->sizes[out->ndim - shp->ndim[0] + i];
            ok = s == d || s == 1;
        }
    } else {
        ok = shp->ndim[0] == out->ndim && memcmp(shp->sizes[0], out->sizes, (size_t)out->ndim * sizeof(int64_t)) == 0;
    }
    if (!ok)
        return tide_error_set(TIDE_E_SHAPE, "%s: the result of shape %s cannot be written into a tensor of shape %s", op,
                              tide_dims_str(shp->ndim[0], shp->sizes[0], a, sizeof a), tide_shape_str(out, b, sizeof b));
    if (!can_cast(dtype, out->dtype_id))
        return tide_error_set(TIDE_E_DTYPE, "%s: the result of dtype %s cannot be written into a tensor of dtype %s", op,
                              tide_dtype_name(dtype), tide_dtype_name(out->dtype_id));
    const tide_tensor * ref = device_input(c->in, c->n_in);
    bool same_dev = !ref || (out->dev.type == ref->dev.type && out->dev.index == ref->dev.index);
    /* XDEVICE ops (copy) write across host queues, between the host and a device, or between devices */
    if (!same_dev && !(e->def.flags & TIDE_OPF_XDEVICE)) {
        char x[32], y[32];
        return tide_error_set(TIDE_E_DEVICE, "%s: the destination is on %s but the inputs are on %s", op,
                              tide_device_format(out->dev, x, sizeof x), tide_device_format(ref->dev, y, sizeof y));
    }
    return TIDE_OK;
}

static tide_status validate_inputs(const op_entry * e, tide_tensor * const * inputs, int32_t n_in) {
    const char * name = e->def.name;
    if (e->def.n_in >= 0 && n_in != e->def.n_in)
        return tide_error_set(TIDE_E_VALUE, "%s: takes %d tensor inputs, %d given", name, e->def.n_in, n_in);
    if (e->def.n_in < 0 && (n_in < 1 || n_in > TIDE_OP_MAX_IN))
        return tide_error_set(TIDE_E_VALUE, "%s: takes 1 to %d tensors, %d given", name, TIDE_OP_MAX_IN, n_in);
    for (int32_t i = 0; i < n_in; i++)
        if (!inputs[i]) return tide_error_set(TIDE_E_VALUE, "%s: input %d is NULL", name, i + 1);
    const tide_tensor * ref = device_input(inputs, n_in);
    for (int32_t i = 0; i < n_in; i++) {
        const tide_tensor * t = inputs[i];
        if (t->flags & TIDE_TENSOR_WRAPPED_NUMBER) continue;
        if (t->dev.type != ref->dev.type || t->dev.index != ref->dev.index) {
            char a[32], b[32];
            int32_t r = 0;
            while (inputs[r] != ref) r++;
            return tide_error_set(TIDE_E_DEVICE, "%s: input %d is on %s but input %d is on %s", name, i + 1,
                                  tide_device_format(t->dev, a, sizeof a), r + 1,
                                  tide_device_format(ref->dev, b, sizeof b));
        }
    }
    return TIDE_OK;
}

tide_status tide_op_prepare(int32_t op, tide_tensor * const * inputs, int32_t n_in, const tide_op_params * params,
                            tide_tensor * out, tide_op_prepared * r) {
    if (op < 0 || op >= N_OPS) return tide_error_set(TIDE_E_VALUE, "op_call: no op has id %d", op);
    const op_entry * e = &ops[op];
    TIDE_CHECK(validate_inputs(e, inputs, n_in));
    if (out && e->def.n_out != 1)
        return tide_error_set(TIDE_E_VALUE, "%s: has %d results and cannot write into one given tensor", e->def.name,
                              e->def.n_out);

    tide_opcall * c = &r->c;
    c->op    = op;
    c->n_in  = n_in;
    c->n_out = e->def.n_out;
    if (n_in) memcpy(c->in, inputs, (size_t)n_in * sizeof *inputs);
    c->out[0] = out;
    c->rng_seed = c->rng_offset = 0;
    c->dev_flags = 0;
    c->dev_report = NULL;
    if (params) {
        c->p = *params;
    } else {
        memset(&c->p, 0, sizeof c->p);
        c->p.dtype = -1;
    }
    if (c->p.dtype >= TIDE_DTYPE_COUNT || c->p.dtype < -1)
        return tide_error_set(TIDE_E_DTYPE, "%s: unknown dtype %d", e->def.name, c->p.dtype);

    TIDE_CHECK(e->def.dtype_rule(c, r->dtypes));
    c->compute_dtype = tide_dtype_compute(c->compute_dtype);
    if (!(e->accepts & (1u << c->compute_dtype)))
        return tide_error_set(TIDE_E_DTYPE, "%s: dtype %s is not supported", e->def.name,
                              tide_dtype_name(n_in ? promote_inputs(c, 0, n_in - 1) : c->compute_dtype));
    if (!e->def.shape_rule)
        return tide_error_set(TIDE_E_INTERNAL, "%s: shape rule '%s' is not linked in", e->def.name, e->shape_rule_name);
    if (!e->def.cpu)
        return tide_error_set(TIDE_E_DEVICE, "%s: no kernel for device cpu in this build", e->def.name);
    r->dev = (out && (!n_in || (e->def.flags & TIDE_OPF_XDEVICE))) ? out->dev
           : n_in ? device_input(inputs, n_in)->dev : tide_get_default_device();
    r->kernel = e->def.cpu;
    r->flags  = e->def.flags;
    /* a copy from or to another kind of device, or between two CUDA devices */
    bool xdev = out && (e->def.flags & TIDE_OPF_XDEVICE) && n_in &&
                (c->in[0]->dev.type != out->dev.type ||
                 (out->dev.type == TIDE_DEVICE_CUDA && c->in[0]->dev.index != out->dev.index));
    if (TIDE_UNLIKELY(r->dev.type == TIDE_DEVICE_CUDA && !xdev)) {
        /* before the shape rule: some read their inputs' values on the host */
        if (!tide_cuda_kernel(op)) {
            char         d[32];
            const char * why = tide_cuda_no_kernel_why(op);
            return tide_error_set(TIDE_E_DEVICE, "%s: no kernel for device %s in this build%s%s", e->def.name,
                                  tide_device_format(r->dev, d, sizeof d), why[0] ? ": " : "", why);
        }
        r->kernel    = cuda_not_direct;
        c->dev_flags = tide_cuda_call_flags();
    }
    TIDE_CHECK(e->def.shape_rule(c, &r->shape));
    r->temp = false;
    if (out) {
        TIDE_CHECK(check_out(e, c, &r->shape, r->dtypes[0], out));
        r->temp = needs_temp(e, c, out);
    }
    if (TIDE_UNLIKELY(xdev)) {
        /* a copy across the host-device boundary runs on the device's queue,
         * as a transfer (engine/transfer.c), not a kernel */
        TIDE_CHECK(tide_transfer_check(c));
        r->dev    = out->dev.type == TIDE_DEVICE_CUDA ? out->dev : c->in[0]->dev;
        r->kernel = NULL;
        /* the device side of a transfer is dense: a strided device
         * destination takes it through a temporary and the device's copy kernel */
        if (out->dev.type == TIDE_DEVICE_CUDA && !tide_tensor_is_contiguous(out)) r->temp = true;
    }
    return TIDE_OK;
}

/* An op's fresh results get their memory when the op runs (see
 * tide_storage_new_deferred), except during a capture, whose graph reads
 * values it records (constants, check mode) outside the engine's order. */
static inline bool defer_result(void) { return tide_capture == NULL; }

static tide_status op_call(int32_t op, tide_tensor * const * inputs, int32_t n_in, const tide_op_params * params,
                           tide_tensor ** outputs, tide_tensor * out);

tide_status tide_op_call(int32_t op, tide_tensor * const * inputs, int32_t n_in, const tide_op_params * params,
                         tide_tensor ** outputs, tide_tensor * out) {
    if (TIDE_LIKELY(!tide_autocast_on) || out || n_in < 1 || n_in > TIDE_OP_MAX_IN)
        return op_call(op, inputs, n_in, params, outputs, out);
    tide_tensor * cast[TIDE_OP_MAX_IN], * in[TIDE_OP_MAX_IN];
    int32_t       n = tide_autocast_inputs(op, inputs, n_in, cast);
    if (n < 0) return tide_last_status();
    if (n == 0) return op_call(op, inputs, n_in, params, outputs, out);
    for (int32_t i = 0; i < n_in; i++) in[i] = cast[i] ? cast[i] : inputs[i];
    tide_status st = op_call(op, in, n_in, params, outputs, out);
    for (int32_t i = 0; i < n_in; i++) tide_tensor_release(cast[i]);
    return st;
}

static tide_status op_call(int32_t op, tide_tensor * const * inputs, int32_t n_in, const tide_op_params * params,
                           tide_tensor ** outputs, tide_tensor * out) {
    tide_op_prepared r;
    TIDE_CHECK(tide_op_prepare(op, inputs, n_in, params, out, &r));
    const op_entry * e = &ops[op];
    tide_opcall * c = &r.c;
    tide_tensor * final_out = NULL;   /* set when the result goes through a temporary */
    bool grad = !tide_grad_off;
    if (grad) {
        grad = out && tide_needs_grad(out);
        for (int32_t i = 0; i < n_in && !grad; i++) grad = tide_needs_grad(inputs[i]);
    }
    if (out) {
        if (grad) TIDE_CHECK(tide_autograd_check_inplace(c, out));
        if (r.temp) {
            final_out = out;
            out       = NULL;
        }
    }
    tide_device dev = r.dev;
    for (int32_t i = 0; i < c->n_out; i++) {
        if (out) {
            tide_tensor_retain(out);
            c->out[i] = out;
            continue;
        }
        int32_t         dt    = final_out ? final_out->dtype_id : r.dtypes[i];
        int32_t         ndim  = final_out ? final_out->ndim : r.shape.ndim[i];
        const int64_t * sizes = final_out ? final_out->sizes : r.shape.sizes[i];
        c->out[i] = defer_result() ? tide_tensor_empty_deferred(ndim, sizes, dt, dev)
                                   : tide_tensor_empty(ndim, sizes, dt, dev);
        if (!c->out[i]) {
            for (int32_t j = 0; j < i; j++) tide_tensor_release(c->out[j]);
            char why[256], dims[128];
            snprintf(why, sizeof why, "%s", tide_last_error());
            return tide_error_set(TIDE_E_OOM, "%s: %s, for its %s %s result", e->def.name, why,
                                  tide_dims_str(ndim, sizes, dims, sizeof dims), tide_dtype_name(dt));
        }
    }
    if (e->def.flags & TIDE_OPF_RANDOM) tide_rng_reserve((uint64_t)c->out[0]->nelem, &c->rng_seed, &c->rng_offset);
    if (!out && !final_out && n_in && (e->def.flags & TIDE_OPF_ELEMWISE)) {
        /* arithmetic on host numbers alone (an autograd rule's 1 - w) makes a
         * host number, which goes with tensors on any device as they did */
        bool numbers = true;
        for (int32_t i = 0; i < n_in && numbers; i++) numbers = (c->in[i]->flags & TIDE_TENSOR_WRAPPED_NUMBER) != 0;
        if (numbers) c->out[0]->flags |= TIDE_TENSOR_WRAPPED_NUMBER;
    }

    tide_storage * reads[TIDE_OP_MAX_IN], * writes[TIDE_OP_MAX_OUT];
    for (int32_t i = 0; i < n_in; i++) reads[i] = c->in[i]->storage;
    for (int32_t i = 0; i < c->n_out; i++) writes[i] = c->out[i]->storage;
    tide_engine_task task = {run_kernel, c,           sizeof *c,        keep_call,
                             drop_call,  e->def.name, c->out[0]->nelem, describe_call, NULL, 0};
    tide_transfer    xfer;
    if (TIDE_UNLIKELY(dev.type == TIDE_DEVICE_CUDA)) {
        if (r.kernel) task.fn = run_cuda, task.complete = complete_cuda;
        else tide_transfer_task(&xfer, c, &task);
    }
    tide_status st = tide_engine_push(&task, reads, n_in, writes, c->n_out, dev);
    if (st != TIDE_OK) {
        for (int32_t i = 0; i < c->n_out; i++) tide_tensor_release(c->out[i]);
        return st;
    }
    for (int32_t i = 0; i < c->n_out; i++) outputs[i] = c->out[i];   /* the caller's reference */
    if (TIDE_UNLIKELY(tide_capture != NULL)) tide_graph_on_op(c, out);   /* before autograd saves aliases of it */
    if (grad && (st = tide_autograd_record(c, out)) != TIDE_OK) {
        for (int32_t i = 0; i < c->n_out; i++) tide_tensor_release(outputs[i]), outputs[i] = NULL;
        return st;
    }
    if (out) atomic_fetch_add_explicit(&out->storage->version, 1, memory_order_relaxed);
    if (final_out) {   /* copy the temporary into the destination */
        tide_tensor * tmp = outputs[0], * res[1];
        st = tide_op_call(TIDE_OP_copy, &tmp, 1, NULL, res, final_out);
        tide_tensor_release(tmp);
        if (st != TIDE_OK) return st;
        outputs[0] = res[0];
    }
    return TIDE_OK;
}
