/*
 * conv.c - 2-d convolution (NCHW, PyTorch's semantics): conv2d with an
 * optional fused bias, and the two backward ops the autograd rules call,
 * conv2d_backward_input and conv2d_backward_weight (the bias gradient is a
 * plain sum). Each is im2col + the single-threaded GEMM of blas.c, with the
 * work split over (image, block of output positions) across Tide's pool; 1x1
 * stride-1 unpadded convolutions skip im2col, and the weight gradient of a
 * layer with few taps per channel is dot products. Also the helpers of nn.h.
 */
#include "blas.h"
#include "nn.h"

/* -- nn.h: shape-rule helpers --------------------------------------------------------------- */

tide_status tide_nn_need_4d(const char * op, const tide_tensor * t, const char * what) {
    if (t->ndim == 4) return TIDE_OK;
    char a[128];
    return tide_error_set(TIDE_E_SHAPE, "%s: expects a 4-d %s, got shape %s", op, what, tide_shape_str(t, a, sizeof a));
}

tide_status tide_nn_need_float(const tide_opcall * c, const tide_tensor * t, const char * what) {
    const char * op = tide_op_name(c->op);
    if (!tide_dtype_is_float(t->dtype_id))
        return tide_error_set(TIDE_E_DTYPE, "%s: %s must be a floating-point tensor, got %s", op, what,
                              tide_dtype_name(t->dtype_id));
    if (c->p.dtype >= 0 && c->p.dtype != t->dtype_id)
        return tide_error_set(TIDE_E_DTYPE, "%s: the result has the dtype of %s (%s), not %s", op, what,
                              tide_dtype_name(t->dtype_id), tide_dtype_name(c->p.dtype));
    return TIDE_OK;
}

tide_status tide_nn_need_dtype(const char * op, const tide_tensor * t, const char * what, const tide_tensor * first,
                               const char * first_what) {
    if (t->dtype_id == first->dtype_id) return TIDE_OK;
    return tide_error_set(TIDE_E_DTYPE, "%s: %s has dtype %s but %s has dtype %s", op, what,
                          tide_dtype_name(t->dtype_id), first_what, tide_dtype_name(first->dtype_id));
}

tide_status tide_nn_need_ints(const tide_opcall * c, int32_t n, const char * layout) {
    if (c->p.n_ints == n) return TIDE_OK;
    return tide_error_set(TIDE_E_VALUE, "%s: takes %d ints (%s), got %d", tide_op_name(c->op), n, layout, c->p.n_ints);
}

tide_status tide_nn_need_pair(const tide_opcall * c, int32_t i, int64_t min, const char * what) {
    if (c->p.ints[i] >= min && c->p.ints[i + 1] >= min) return TIDE_OK;
    return tide_error_set(TIDE_E_VALUE, "%s: %s must be %s, got (%lld, %lld)", tide_op_name(c->op), what,
                          min > 0 ? "positive" : "non-negative", (long long)c->p.ints[i], (long long)c->p.ints[i + 1]);
}

tide_status tide_nn_need_sizes(const tide_opcall * c, int32_t i, const char * what) {
    for (int32_t k = 0; k < 4; k++)
        if (c->p.ints[i + k] < 0) {
            char a[128];
            return tide_error_set(TIDE_E_SHAPE, "%s: %s sizes must be non-negative, got %s", tide_op_name(c->op), what,
                                  tide_dims_str(4, c->p.ints + i, a, sizeof a));
        }
    return TIDE_OK;
}

tide_status tide_nn_need_grad_shape(const tide_opcall * c, const tide_tensor * gy, const int64_t * want,
                                    const char * forward, const int64_t * x_sizes) {
    if (memcmp(gy->sizes, want, 4 * sizeof(int64_t)) == 0) return TIDE_OK;
    char a[128], b[128], x[128];
    return tide_error_set(TIDE_E_SHAPE, "%s: grad_output of shape %s does not match %s's result shape %s for an input of shape %s",
                          tide_op_name(c->op), tide_shape_str(gy, a, sizeof a), forward, tide_dims_str(4, want, b, sizeof b),
                          tide_dims_str(4, x_sizes, x, sizeof x));
}

/* -- nn.h: tensors in the compute dtype ------------------------------------------------------ */

static void contiguous4(tide_nn_view * v, const tide_tensor * t) {
    if (t->ndim != 4) return;
    v->s[3] = 1;
    v->s[2] = t->sizes[3];
    v->s[1] = t->sizes[2] * t->sizes[3];
    v->s[0] = t->sizes[1] * v->s[1];
}

tide_status tide_nn_view_in(tide_nn_view * v, const tide_tensor * t, int32_t ct, int contig, const char * op) {
    v->tmp = NULL;
    v->cap = 0;
    if (t->dtype_id == ct && (!contig || tide_tensor_is_contiguous(t))) {
        v->base = tide_tensor_ptr(t);
        if (contig)
            contiguous4(v, t);
        else if (t->ndim == 4)
            memcpy(v->s, t->strides, sizeof v->s);
        return TIDE_OK;
    }
    size_t esz = tide_dtype_size(ct), tsz = tide_dtype_size(t->dtype_id);
    v->tmp = tide_host_alloc((size_t)t->nelem * esz, &v->cap);
    if (!v->tmp) return tide_error_set(TIDE_E_OOM, "%s: out of memory for a converted copy of an input", op);
    v->base = v->tmp;
    contiguous4(v, t);
    const char * src = tide_tensor_ptr(t);
    if (t->ndim == 0) {
        tide_convert(v->tmp, ct, 1, src, t->dtype_id, 1, 1);
        return TIDE_OK;
    }
    int64_t len = t->sizes[t->ndim - 1], rows = len ? t->nelem / len : 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = tide_elem_offset(t->ndim - 1, t->sizes, t->strides, r);
        tide_convert((char *)v->tmp + (size_t)(r * len) * esz, ct, 1, src + off * (int64_t)tsz, t->dtype_id,
                     t->strides[t->ndim - 1], len);
    }
    return TIDE_OK;
}

tide_status tide_nn_view_out(tide_nn_view * v, const tide_tensor * out, int32_t ct, int contig, const char * op) {
    v->tmp = NULL;
    v->cap = 0;
    if (out->dtype_id == ct && (!contig || tide_tensor_is_contiguous(out))) {
        v->base = tide_tensor_ptr(out);
        if (contig)
            contiguous4(v, out);
        else
            memcpy(v->s, out->strides, sizeof v->s);
        return TIDE_OK;
    }
    v->tmp = tide_host_alloc((size_t)out->nelem * tide_dtype_size(ct), &v->cap);
    if (!v->tmp) return tide_error_set(TIDE_E_OOM, "%s: out of memory for the result", op);
    v->base = v->tmp;
    contiguous4(v, out);
    return TIDE_OK;
}

void tide_nn_view_out_end(tide_nn_view * v, tide_tensor * out, int32_t ct) {
    if (!v->tmp) return;
    size_t  esz = tide_dtype_size(ct), osz = tide_dtype_size(out->dtype_id);
    char *  base = tide_tensor_ptr(out);
    int32_t nd = out->ndim;
    int64_t len = out->sizes[nd - 1], rows = len ? out->nelem / len : 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = tide_elem_offset(nd - 1, out->sizes, out->strides, r);
        tide_convert(base + off * (int64_t)osz, out->dtype_id, out->strides[nd - 1],
                     (char *)v->tmp + (size_t)(r * len) * esz, ct, 1, len);
    }
}

void tide_nn_view_free(tide_nn_view * v) {
    if (v->tmp) tide_host_free(v->tmp, v->cap);
    v->tmp = NULL;
}

/* -- geometry and shape rules ------------------------------------------------------------------ */

/* ints[0..6]: stride (h, w), padding (h, w), dilation (h, w), groups. */
#define CONV_LAYOUT "stride h, w, padding h, w, dilation h, w, groups"
#define CONV_LAYOUT_X CONV_LAYOUT ", then the input's sizes N, C, H, W"
#define CONV_LAYOUT_W CONV_LAYOUT ", then the weight's sizes O, C/groups, kH, kW"

typedef struct {
    int64_t n, c, h, w;          /* input [n, c, h, w] */
    int64_t o, cg, kh, kw;       /* weight [o, cg = c/groups, kh, kw] */
    int64_t oh, ow;              /* result [n, o, oh, ow] */
    int64_t sh, sw, ph, pw, dh, dw, groups;
} geom;

static void geom_fill(geom * g, const int64_t * xs, const int64_t * ws, const int64_t * p) {
    g->n  = xs[0], g->c = xs[1], g->h = xs[2], g->w = xs[3];
    g->o  = ws[0], g->cg = ws[1], g->kh = ws[2], g->kw = ws[3];
    g->sh = p[0], g->sw = p[1], g->ph = p[2], g->pw = p[3], g->dh = p[4], g->dw = p[5], g->groups = p[6];
    g->oh = tide_nn_out_size(g->h, g->kh, g->sh, g->ph, g->dh, 0);
    g->ow = tide_nn_out_size(g->w, g->kw, g->sw, g->pw, g->dw, 0);
}

/* Checks the params, and the input sizes xs against the weight sizes ws, in
 * PyTorch's order; fills g. */
static tide_status geom_check(const tide_opcall * c, const int64_t * xs, const int64_t * ws, geom * g) {
    const char * op = tide_op_name(c->op);
    const int64_t * p = c->p.ints;
    char a[128], b[128];
    TIDE_CHECK(tide_nn_need_pair(c, 0, 1, "stride"));
    TIDE_CHECK(tide_nn_need_pair(c, 2, 0, "padding"));
    TIDE_CHECK(tide_nn_need_pair(c, 4, 1, "dilation"));
    if (p[6] < 1) return tide_error_set(TIDE_E_VALUE, "%s: groups must be positive, got %lld", op, (long long)p[6]);
    if (xs[1] % p[6] != 0)
        return tide_error_set(TIDE_E_SHAPE, "%s: input channels %lld are not divisible by groups %lld", op,
                              (long long)xs[1], (long long)p[6]);
    if (ws[0] % p[6] != 0)
        return tide_error_set(TIDE_E_SHAPE, "%s: output channels %lld (weight of shape %s) are not divisible by groups %lld",
                              op, (long long)ws[0], tide_dims_str(4, ws, a, sizeof a), (long long)p[6]);
    if (ws[1] * p[6] != xs[1])
        return tide_error_set(TIDE_E_SHAPE, "%s: input of shape %s has %lld channels but weight of shape %s with groups %lld expects %lld",
                              op, tide_dims_str(4, xs, a, sizeof a), (long long)xs[1], tide_dims_str(4, ws, b, sizeof b),
                              (long long)p[6], (long long)(ws[1] * p[6]));
    geom_fill(g, xs, ws, p);
    if (g->oh < 1 || g->ow < 1)
        return tide_error_set(TIDE_E_SHAPE, "%s: kernel %lldx%lld (dilation %lldx%lld) is larger than the padded input %lldx%lld (input of shape %s, padding %lldx%lld)",
                              op, (long long)g->kh, (long long)g->kw, (long long)g->dh, (long long)g->dw,
                              (long long)(g->h + 2 * g->ph), (long long)(g->w + 2 * g->pw),
                              tide_dims_str(4, xs, a, sizeof a), (long long)g->ph, (long long)g->pw);
    return TIDE_OK;
}

static void set_out4(tide_shape_out * o, int64_t a, int64_t b, int64_t c, int64_t d) {
    o->ndim[0]     = 4;
    o->sizes[0][0] = a, o->sizes[0][1] = b, o->sizes[0][2] = c, o->sizes[0][3] = d;
}

/* conv2d(input [N,C,H,W], weight [O,C/groups,kH,kW], bias [O] optional) -> [N,O,oH,oW] */
tide_status tide_shape_conv2d(tide_opcall * c, tide_shape_out * o) {
    if (c->n_in != 2 && c->n_in != 3)
        return tide_error_set(TIDE_E_VALUE, "conv2d: takes 2 or 3 tensor inputs (input, weight, bias), %d given", c->n_in);
    const tide_tensor * x = c->in[0], * w = c->in[1];
    TIDE_CHECK(tide_nn_need_4d("conv2d", x, "input [N,C,H,W]"));
    TIDE_CHECK(tide_nn_need_4d("conv2d", w, "weight [O,C/groups,kH,kW]"));
    TIDE_CHECK(tide_nn_need_float(c, x, "input"));
    TIDE_CHECK(tide_nn_need_dtype("conv2d", w, "weight", x, "input"));
    if (c->n_in == 3) {
        const tide_tensor * bias = c->in[2];
        TIDE_CHECK(tide_nn_need_dtype("conv2d", bias, "bias", x, "input"));
        if (bias->ndim != 1 || bias->sizes[0] != w->sizes[0]) {
            char a[128];
            return tide_error_set(TIDE_E_SHAPE, "conv2d: expects a 1-d bias of %lld elements (the weight's output channels), got shape %s",
                                  (long long)w->sizes[0], tide_shape_str(bias, a, sizeof a));
        }
    }
    TIDE_CHECK(tide_nn_need_ints(c, 7, CONV_LAYOUT));
    geom g;
    TIDE_CHECK(geom_check(c, x->sizes, w->sizes, &g));
    set_out4(o, g.n, g.o, g.oh, g.ow);
    return TIDE_OK;
}

/* conv2d_backward_input(grad_output [N,O,oH,oW], weight) -> grad_input [N,C,H,W] (sizes in ints[7..10]) */
tide_status tide_shape_conv2d_backward_input(tide_opcall * c, tide_shape_out * o) {
    const char * op = "conv2d_backward_input";
    const tide_tensor * gy = c->in[0], * w = c->in[1];
    TIDE_CHECK(tide_nn_need_4d(op, gy, "grad_output [N,O,oH,oW]"));
    TIDE_CHECK(tide_nn_need_4d(op, w, "weight [O,C/groups,kH,kW]"));
    TIDE_CHECK(tide_nn_need_float(c, gy, "grad_output"));
    TIDE_CHECK(tide_nn_need_dtype(op, w, "weight", gy, "grad_output"));
    TIDE_CHECK(tide_nn_need_ints(c, 11, CONV_LAYOUT_X));
    TIDE_CHECK(tide_nn_need_sizes(c, 7, "input"));
    const int64_t * xs = c->p.ints + 7;
    geom g;
    TIDE_CHECK(geom_check(c, xs, w->sizes, &g));
    int64_t want[4] = {g.n, g.o, g.oh, g.ow};
    TIDE_CHECK(tide_nn_need_grad_shape(c, gy, want, "conv2d", xs));
    set_out4(o, g.n, g.c, g.h, g.w);
    return TIDE_OK;
}

/* conv2d_backward_weight(grad_output [N,O,oH,oW], input [N,C,H,W]) -> grad_weight (sizes in ints[7..10]) */
tide_status tide_shape_conv2d_backward_weight(tide_opcall * c, tide_shape_out * o) {
    const char * op = "conv2d_backward_weight";
    const tide_tensor * gy = c->in[0], * x = c->in[1];
    TIDE_CHECK(tide_nn_need_4d(op, gy, "grad_output [N,O,oH,oW]"));
    TIDE_CHECK(tide_nn_need_4d(op, x, "input [N,C,H,W]"));
    TIDE_CHECK(tide_nn_need_float(c, gy, "grad_output"));
    TIDE_CHECK(tide_nn_need_dtype(op, x, "input", gy, "grad_output"));
    TIDE_CHECK(tide_nn_need_ints(c, 11, CONV_LAYOUT_W));
    TIDE_CHECK(tide_nn_need_sizes(c, 7, "weight"));
    const int64_t * ws = c->p.ints + 7;
    geom g;
    TIDE_CHECK(geom_check(c, x->sizes, ws, &g));
    int64_t want[4] = {g.n, g.o, g.oh, g.ow};
    TIDE_CHECK(tide_nn_need_grad_shape(c, gy, want, "conv2d", x->sizes));
    set_out4(o, g.o, g.cg, g.kh, g.kw);
    return TIDE_OK;
}

/* -- the work --------------------------------------------------------------------------------- */

/* Bytes of im2col scratch per work item: the columns of a block stay in L2
 * while the GEMM reads them. Larger images are cut into blocks of positions. */
enum { COL_BYTES = 1 << 20, GEMM_GRAIN = 1 << 20 };
/* Taps per output channel (cg*kh*kw) up to which the weight gradient is not a GEMM (small_gw). */
enum { SMALL_KG = 32 };

typedef struct {
    geom         g;
    const char * x;          /* input (any strides, xs) or, backward input, NULL */
    int64_t      xs[4];
    const char * w;          /* contiguous [o, cg*kh*kw] */
    const char * b;          /* contiguous [o], or NULL */
    const char * gy;         /* contiguous [n, o, oh*ow] */
    char *       y;          /* contiguous result: [n, o, oh*ow], [n, c, h*w] or [o, cg*kh*kw] */
    int64_t      kg;         /* rows of the im2col matrix per group: cg*kh*kw */
    int64_t      hw;         /* output positions per image: oh*ow */
    int64_t      cb, nblk;   /* positions per block, blocks per image */
    int64_t      cpb, ncblk; /* backward input: channels per block, blocks per group */
    int64_t      items, parts;
    char *       partial;    /* backward weight: parts-1 partial sums after the result's own */
    bool         direct;     /* 1x1, stride 1, unpadded, planes contiguous: the input is the im2col matrix */
    int64_t      ldx;        /* direct: stride between channels */
    atomic_int   oom;
} job;

static bool is_direct(const geom * g, const int64_t * xs) {
    if (g->kh != 1 || g->kw != 1 || g->sh != 1 || g->sw != 1 || g->ph != 0 || g->pw != 0) return false;
    bool plane = (g->w == 1 || xs[3] == 1) && (g->h == 1 || xs[2] == g->w);
    return plane && (g->c == 1 || xs[1] >= g->h * g->w);
}

/* Splits each image's hw positions into blocks: one block if its im2col
 * matrix fits COL_BYTES, and enough blocks for every thread when there are
 * fewer images than threads. Blocks are whole rows of the result when a row
 * fits, so that im2col_rows can take them. */
static void plan_blocks(job * j, size_t esz) {
    int64_t rows = j->g.c * j->g.kh * j->g.kw, hw = j->hw, ow = j->g.ow, cb = hw;
    if (rows > 0 && (size_t)(rows * hw) * esz > COL_BYTES) {
        cb = (int64_t)(COL_BYTES / esz) / rows;
        cb = cb >= ow ? cb / ow * ow : cb < 64 ? 64 : cb / 16 * 16;
    }
    int64_t threads = tide_get_num_threads();
    if (j->g.n < threads && hw >= 128) {
        int64_t want = (threads + j->g.n - 1) / j->g.n, size = (hw + want - 1) / want;
        size = size >= ow ? (size + ow - 1) / ow * ow : (size + 15) / 16 * 16;
        if (size < cb) cb = size;
    }
    j->cb   = cb > 0 ? cb : 1;
    j->nblk = (hw + j->cb - 1) / j->cb;
}

static int64_t grain_for(double macs_per_item) {
    return macs_per_item >= GEMM_GRAIN ? 1 : (int64_t)(GEMM_GRAIN / (macs_per_item > 1 ? macs_per_item : 1)) + 1;
}

/* The valid output columns [lo, hi) for kernel column kj: 0 <= ox*s - p + kj*d < w. */
static void valid_cols(const geom * g, int64_t kj, int64_t * lo, int64_t * hi) {
    int64_t off = kj * g->dw - g->pw;
    int64_t a = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
    int64_t b = g->w - off > 0 ? (g->w - off - 1) / g->sw + 1 : 0;
    if (b > g->ow) b = g->ow;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

#define CONV_KERNELS(T, GEMM)                                                                           \
    /* im2col of whole output rows [y0, y1) when the stride is 1 and a row of the result is as long   \
     * as a row of the input (the "same" padding of CNNs), input rows contiguous: then the taps of     \
     * one kernel position over all those rows are one contiguous run of the input, copied at once;    \
     * the elements it brings in from the next row, where the padding should be, are then zeroed. */   \
    static void im2col_rows_##T(const job * j, const T * xn, int64_t c0, int64_t c1, int64_t y0,         \
                                int64_t y1, T * restrict col) {                                         \
        const geom * g = &j->g;                                                                         \
        const int64_t w = g->w, ld = (y1 - y0) * w, xsc = j->xs[1];                                     \
        T * dst = col;                                                                                  \
        for (int64_t c = c0; c < c1; c++)                                                               \
            for (int64_t ki = 0; ki < g->kh; ki++)                                                      \
                for (int64_t kj = 0; kj < g->kw; kj++, dst += ld) {                                     \
                    int64_t lo, hi, off = kj * g->dw - g->pw, shift = ki * g->dh - g->ph;               \
                    valid_cols(g, kj, &lo, &hi);                                                        \
                    int64_t a = y0 > -shift ? y0 : -shift, b = y1 < g->h - shift ? y1 : g->h - shift;   \
                    if (b <= a || hi <= lo) {                                                           \
                        memset(dst, 0, (size_t)ld * sizeof(T));                                         \
                        continue;                                                                       \
                    }                                                                                   \
                    memset(dst, 0, (size_t)((a - y0) * w + lo) * sizeof(T));                            \
                    memcpy(dst + (a - y0) * w + lo, xn + c * xsc + (a + shift) * w + off + lo,          \
                           (size_t)((b - a - 1) * w + hi - lo) * sizeof(T));                            \
                    for (int64_t r = a - y0; r < b - y0; r++) {                                         \
                        T * row = dst + r * w;                                                          \
                        if (r > a - y0)                                                                 \
                            for (int64_t ox = 0; ox < lo; ox++) row[ox] = 0;                            \
                        for (int64_t ox = hi; ox < w; ox++) row[ox] = 0;                                \
                    }                                                                                   \
                    memset(dst + (b - y0) * w, 0, (size_t)((y1 - b) * w) * sizeof(T));                  \
                }                                                                                       \
    }                                                                                                   \
                                                                                                        \
    /* The adjoint of im2col_rows over whole images: the columns that would wrap into the next row     \
     * are zeroed in col (scratch), then each kernel position adds one contiguous run. */              \
    static void col2im_rows_##T(const job * j, T * restrict col, int64_t nc, T * restrict gx) {        \
        const geom * g = &j->g;                                                                         \
        const int64_t w = g->w, hw = g->oh * w;                                                         \
        T * src = col;                                                                                  \
        for (int64_t c = 0; c < nc; c++)                                                                \
            for (int64_t ki = 0; ki < g->kh; ki++)                                                      \
                for (int64_t kj = 0; kj < g->kw; kj++, src += hw) {                                     \
                    int64_t lo, hi, off = kj * g->dw - g->pw, shift = ki * g->dh - g->ph;               \
                    valid_cols(g, kj, &lo, &hi);                                                        \
                    int64_t a = shift < 0 ? -shift : 0, b = g->oh < g->h - shift ? g->oh : g->h - shift; \
                    if (b <= a || hi <= lo) continue;                                                   \
                    for (int64_t r = a; r < b; r++) {                                                   \
                        T * row = src + r * w;                                                          \
                        if (r > a)                                                                      \
                            for (int64_t ox = 0; ox < lo; ox++) row[ox] = 0;                            \
                        if (r < b - 1)                                                                  \
                            for (int64_t ox = hi; ox < w; ox++) row[ox] = 0;                            \
                    }                                                                                   \
                    T * restrict d = gx + (c * g->h + a + shift) * w + off + lo;                        \
                    const T * restrict sp = src + a * w + lo;                                           \
                    const int64_t len = (b - a - 1) * w + hi - lo;                                      \
                    for (int64_t i = 0; i < len; i++) d[i] += sp[i];                                    \
                }                                                                                       \
    }                                                                                                   \
                                                                                                        \
    /* col[r][p - p0], r = (c - c0, ki, kj), p in [p0, p1): the input element under kernel tap (ki, kj) \
     * at output position p, 0 in the padding. xn is image n of the input (strides xs). */              \
    static void im2col_##T(const job * j, const T * xn, int64_t c0, int64_t c1, int64_t p0, int64_t p1,  \
                           T * restrict col) {                                                          \
        const geom * g = &j->g;                                                                         \
        const int64_t ld = p1 - p0, xsc = j->xs[1], xsh = j->xs[2], xsw = j->xs[3];                     \
        const int64_t ow = g->ow, h = g->h, sh = g->sh, sw = g->sw, ph = g->ph, dh = g->dh;             \
        const int64_t py = p0 / ow, px = p0 % ow;                                                       \
        const bool unit = sw == 1 && xsw == 1;                                                          \
        if (unit && sh == 1 && ow == g->w && xsh == g->w && p0 % ow == 0 && p1 % ow == 0) {            \
            im2col_rows_##T(j, xn, c0, c1, py, p1 / ow, col);                                           \
            return;                                                                                     \
        }                                                                                               \
        T * dst = col;                                                                                  \
        for (int64_t c = c0; c < c1; c++)                                                               \
            for (int64_t ki = 0; ki < g->kh; ki++)                                                      \
                for (int64_t kj = 0; kj < g->kw; kj++, dst += ld) {                                     \
                    int64_t lo, hi, off = kj * g->dw - g->pw;                                           \
                    valid_cols(g, kj, &lo, &hi);                                                        \
                    T * restrict d = dst;                                                               \
                    /* one row of output positions at a time: [ox0, ox1) of row oy */                  \
                    for (int64_t p = p0, oy = py, ox0 = px; p < p1; oy++, ox0 = 0) {                    \
                        const int64_t ox1 = ow - ox0 < p1 - p ? ow : ox0 + (p1 - p);                    \
                        const int64_t iy = oy * sh - ph + ki * dh;                                      \
                        if (iy < 0 || iy >= h) {                                                        \
                            for (int64_t ox = ox0; ox < ox1; ox++) d[ox - ox0] = 0;                     \
                        } else {                                                                        \
                            const T * restrict row = xn + c * xsc + iy * xsh;                           \
                            const int64_t a = lo < ox0 ? ox0 : lo > ox1 ? ox1 : lo;                     \
                            const int64_t b = hi < a ? a : hi > ox1 ? ox1 : hi;                         \
                            for (int64_t ox = ox0; ox < a; ox++) d[ox - ox0] = 0;                       \
                            if (unit) {   /* rows are short: a loop, not memcpy */                      \
                                for (int64_t ox = a; ox < b; ox++) d[ox - ox0] = row[ox + off];         \
                            } else {                                                                    \
                                for (int64_t ox = a; ox < b; ox++) d[ox - ox0] = row[(ox * sw + off) * xsw]; \
                            }                                                                           \
                            for (int64_t ox = b; ox < ox1; ox++) d[ox - ox0] = 0;                       \
                        }                                                                               \
                        d += ox1 - ox0;                                                                 \
                        p += ox1 - ox0;                                                                 \
                    }                                                                                   \
                }                                                                                       \
    }                                                                                                   \
                                                                                                        \
    /* The adjoint of im2col over all hw positions: adds col[r][p] into gx, whose planes               \
     * (channels c0.. of one image, contiguous h*w each) the caller has zeroed. May change col. */      \
    static void col2im_##T(const job * j, T * restrict col, int64_t nc, T * gx) {                       \
        const geom * g = &j->g;                                                                         \
        if (g->sw == 1 && g->sh == 1 && g->ow == g->w) {                                                \
            col2im_rows_##T(j, col, nc, gx);                                                            \
            return;                                                                                     \
        }                                                                                               \
        const T * src = col;                                                                            \
        for (int64_t c = 0; c < nc; c++)                                                                \
            for (int64_t ki = 0; ki < g->kh; ki++)                                                      \
                for (int64_t kj = 0; kj < g->kw; kj++) {                                                \
                    int64_t lo, hi, off = kj * g->dw - g->pw;                                           \
                    valid_cols(g, kj, &lo, &hi);                                                        \
                    for (int64_t oy = 0; oy < g->oh; oy++, src += g->ow) {                              \
                        int64_t iy = oy * g->sh - g->ph + ki * g->dh;                                   \
                        if (iy < 0 || iy >= g->h) continue;                                             \
                        T * row = gx + (c * g->h + iy) * g->w;                                          \
                        if (g->sw == 1) {                                                               \
                            for (int64_t ox = lo; ox < hi; ox++) row[ox + off] += src[ox];              \
                        } else {                                                                        \
                            for (int64_t ox = lo; ox < hi; ox++) row[ox * g->sw + off] += src[ox];      \
                        }                                                                               \
                    }                                                                                   \
                }                                                                                       \
    }                                                                                                   \
                                                                                                        \
    /* The im2col matrix of block `it` (image n, positions [p0, p1)): col, or the input itself. */      \
    static const T * columns_##T(const job * j, int64_t it, T * col, int64_t * n, int64_t * p0,         \
                                 int64_t * p1, int64_t * ld) {                                          \
        *n  = it / j->nblk;                                                                             \
        *p0 = it % j->nblk * j->cb;                                                                     \
        *p1 = *p0 + j->cb < j->hw ? *p0 + j->cb : j->hw;                                                \
        const T * xn = (const T *)j->x + *n * j->xs[0];                                                 \
        if (j->direct) {                                                                                \
            *ld = j->ldx;                                                                               \
            return xn + *p0;                                                                            \
        }                                                                                               \
        im2col_##T(j, xn, 0, j->g.c, *p0, *p1, col);                                                    \
        *ld = *p1 - *p0;                                                                                \
        return col;                                                                                     \
    }                                                                                                   \
                                                                                                        \
    static T * scratch_##T(job * j, size_t n, size_t * cap) {                                           \
        T * p = tide_host_alloc(n * sizeof(T), cap);                                                    \
        if (!p) atomic_store(&j->oom, 1);                                                               \
        return p;                                                                                       \
    }                                                                                                   \
                                                                                                        \
    /* y[n, o, p0:p1] = sum over the group's rows of w[o, r] col[r, p] (+ bias[o]). */                  \
    static void forward_##T(void * ctx, int64_t begin, int64_t end) {                                   \
        job * j = ctx;                                                                                  \
        const geom * g = &j->g;                                                                         \
        size_t cap = 0;                                                                                 \
        T * col = j->direct ? NULL : scratch_##T(j, (size_t)(g->c * g->kh * g->kw * j->cb), &cap);      \
        if (!j->direct && !col) return;                                                                 \
        int64_t og = g->o / g->groups;                                                                  \
        for (int64_t it = begin; it < end; it++) {                                                      \
            int64_t n, p0, p1, ld;                                                                      \
            const T * bm = columns_##T(j, it, col, &n, &p0, &p1, &ld);                                  \
            T * yn = (T *)j->y + n * g->o * j->hw + p0;                                                 \
            for (int64_t gi = 0; gi < g->groups; gi++)                                                  \
                GEMM(false, false, og, p1 - p0, j->kg, 1, (const T *)j->w + gi * og * j->kg, j->kg,     \
                     bm + gi * j->kg * ld, ld, 0, yn + gi * og * j->hw, j->hw);                         \
            if (j->b) {                                                                                 \
                const T * bias = (const T *)j->b;                                                       \
                for (int64_t o = 0; o < g->o; o++) {                                                    \
                    T * row = yn + o * j->hw, bo = bias[o];                                             \
                    for (int64_t p = 0; p < p1 - p0; p++) row[p] += bo;                                 \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
        tide_host_free(col, cap);                                                                       \
    }                                                                                                   \
                                                                                                        \
    /* gx[n, channels of one block of one group] = col2im(w_g^T gy[n, group]). */                       \
    static void backward_input_##T(void * ctx, int64_t begin, int64_t end) {                            \
        job * j = ctx;                                                                                  \
        const geom * g = &j->g;                                                                         \
        int64_t og = g->o / g->groups, kk = g->kh * g->kw, plane = g->h * g->w;                         \
        size_t cap = 0;                                                                                 \
        T * col = j->direct ? NULL : scratch_##T(j, (size_t)(j->cpb * kk * j->hw), &cap);               \
        if (!j->direct && !col) return;                                                                 \
        for (int64_t it = begin; it < end; it++) {                                                      \
            int64_t n = it / (g->groups * j->ncblk), r = it % (g->groups * j->ncblk);                   \
            int64_t gi = r / j->ncblk, c0 = r % j->ncblk * j->cpb;                                      \
            int64_t nc = g->cg - c0 < j->cpb ? g->cg - c0 : j->cpb;                                     \
            const T * gyn = (const T *)j->gy + (n * g->o + gi * og) * j->hw;                            \
            const T * wg  = (const T *)j->w + gi * og * j->kg + c0 * kk;                                \
            T * gxn = (T *)j->y + (n * g->c + gi * g->cg + c0) * plane;                                 \
            if (j->direct) {                                                                            \
                GEMM(true, false, nc, j->hw, og, 1, wg, j->kg, gyn, j->hw, 0, gxn, j->hw);              \
                continue;                                                                               \
            }                                                                                           \
            GEMM(true, false, nc * kk, j->hw, og, 1, wg, j->kg, gyn, j->hw, 0, col, j->hw);             \
            memset(gxn, 0, (size_t)(nc * plane) * sizeof(T));                                           \
            col2im_##T(j, col, nc, gxn);                                                                \
        }                                                                                               \
        tide_host_free(col, cap);                                                                       \
    }                                                                                                   \
                                                                                                        \
    /* gw[o, r] (+)= sum over p of gy[o, p] col[r, p], for weights with few taps per output channel   \
     * (the first layer of a CNN, depthwise convolutions): OpenBLAS packs both operands on every call, \
     * which then costs more than the products. Dot products with L partial sums vectorise without    \
     * reassociating (the build has no -ffast-math); L spans four vector registers, so that four FMAs  \
     * are in flight rather than one waiting on the last. */                                         \
    static TIDE_SIMD_CLONES void small_gw_##T(int64_t og, int64_t kg, int64_t np, const T * gy,         \
                                              int64_t ldg, const T * col, int64_t ldc, bool add,        \
                                              T * restrict gw) {                                        \
        enum { L = 256 / sizeof(T) };                                                                   \
        for (int64_t o = 0; o < og; o++) {                                                              \
            const T * restrict gr = gy + o * ldg;                                                       \
            for (int64_t r = 0; r < kg; r++) {                                                          \
                const T * restrict xr = col + r * ldc;                                                  \
                T acc[L] = {0};                                                                         \
                int64_t p = 0;                                                                          \
                for (; p + L <= np; p += L)                                                             \
                    for (int k = 0; k < L; k++) acc[k] += gr[p + k] * xr[p + k];                        \
                for (int h = L / 2; h >= 1; h /= 2)   /* a tree: log2(L) dependent adds, not L */        \
                    for (int k = 0; k < h; k++) acc[k] += acc[k + h];                                   \
                T sum = acc[0];                                                                         \
                for (; p < np; p++) sum += gr[p] * xr[p];                                               \
                gw[o * kg + r] = add ? gw[o * kg + r] + sum : sum;                                      \
            }                                                                                           \
        }                                                                                               \
    }                                                                                                   \
                                                                                                        \
    /* Part `part` of the blocks: its own sum over them of gy[n, group, p0:p1] col^T, in order. */      \
    static void backward_weight_##T(void * ctx, int64_t begin, int64_t end) {                           \
        job * j = ctx;                                                                                  \
        const geom * g = &j->g;                                                                         \
        int64_t og = g->o / g->groups, size = g->o * j->kg;                                             \
        size_t cap = 0;                                                                                 \
        T * col = j->direct ? NULL : scratch_##T(j, (size_t)(g->c * g->kh * g->kw * j->cb), &cap);      \
        if (!j->direct && !col) return;                                                                 \
        for (int64_t part = begin; part < end; part++) {                                                \
            T * acc = part == 0 ? (T *)j->y : (T *)j->partial + (part - 1) * size;                      \
            int64_t first = part * j->items / j->parts, last = (part + 1) * j->items / j->parts;        \
            for (int64_t it = first; it < last; it++) {                                                 \
                int64_t n, p0, p1, ld;                                                                  \
                const T * bm = columns_##T(j, it, col, &n, &p0, &p1, &ld);                              \
                const T * gyn = (const T *)j->gy + n * g->o * j->hw + p0;                               \
                for (int64_t gi = 0; gi < g->groups; gi++) {                                            \
                    const T * a = gyn + gi * og * j->hw, * b = bm + gi * j->kg * ld;                    \
                    T * cg = acc + gi * og * j->kg;                                                     \
                    if (j->kg <= SMALL_KG)                                                              \
                        small_gw_##T(og, j->kg, p1 - p0, a, j->hw, b, ld, it != first, cg);             \
                    else                                                                                \
                        GEMM(false, true, og, j->kg, p1 - p0, 1, a, j->hw, b, ld, it == first ? 0 : 1, cg, j->kg); \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
        tide_host_free(col, cap);                                                                       \
    }                                                                                                   \
                                                                                                        \
    static void sum_parts_##T(job * j) {                                                                \
        int64_t size = j->g.o * j->kg;                                                                  \
        T * acc = (T *)j->y;                                                                            \
        for (int64_t part = 1; part < j->parts; part++) {                                               \
            const T * src = (const T *)j->partial + (part - 1) * size;                                  \
            for (int64_t i = 0; i < size; i++) acc[i] += src[i];                                        \
        }                                                                                               \
    }

CONV_KERNELS(float, tide_blas_sgemm)
CONV_KERNELS(double, tide_blas_dgemm)

/* -- the kernels ------------------------------------------------------------------------------- */

static void job_init(job * j, const tide_opcall * c, const int64_t * xs, const int64_t * ws) {
    memset(j, 0, sizeof *j);
    geom_fill(&j->g, xs, ws, c->p.ints);
    j->kg = j->g.cg * j->g.kh * j->g.kw;
    j->hw = j->g.oh * j->g.ow;
    atomic_init(&j->oom, 0);
}

/* Whether items whose GEMMs each take `macs` multiply-adds should run one after
 * the other on OpenBLAS's threads, with cores the pool lends (then it holds them:
 * end with tide_blas_lend_end), rather than across the pool with single-threaded GEMMs.
 * Per-image GEMMs are short and wide (M, the positions, is at most a few
 * hundred), where OpenBLAS's single-threaded driver is at its slowest: the
 * second layer of the Fashion-MNIST CNN went from 42 to 21 ms forward and from
 * 24 to 19 ms for the weight's gradient. Small ones (a first layer's 9 taps)
 * gain more from im2col spread over the pool. */
static bool lend_begin(double macs) { return macs >= GEMM_GRAIN && tide_blas_lend_begin(); }

/* Runs fn over items [0, n) of `macs` multiply-adds each: see lend_begin. */
static void run_items(int64_t n, double macs, tide_range_fn fn, job * j) {
    if (lend_begin(macs)) {
        fn(j, 0, n);
        tide_blas_lend_end();
        return;
    }
    tide_parallel_for(n, grain_for(macs), 1, fn, j);
}

static tide_status finish(job * j, const char * op, tide_status st) {
    if (st == TIDE_OK && atomic_load(&j->oom))
        return tide_error_set(TIDE_E_OOM, "%s: out of memory for im2col scratch", op);
    return st;
}

tide_status tide_cpu_conv2d(const tide_opcall * c) {
    const char * op = "conv2d";
    tide_tensor * x = c->in[0], * w = c->in[1], * y = c->out[0];
    int32_t ct = c->compute_dtype;
    if (y->nelem == 0) return TIDE_OK;
    job j;
    job_init(&j, c, x->sizes, w->sizes);
    tide_nn_view xv = {0}, wv = {0}, bv = {0}, yv = {0};
    tide_status st = tide_nn_view_in(&xv, x, ct, 0, op);
    if (st == TIDE_OK) st = tide_nn_view_in(&wv, w, ct, 1, op);
    if (st == TIDE_OK && c->n_in == 3) st = tide_nn_view_in(&bv, c->in[2], ct, 1, op);
    if (st == TIDE_OK) st = tide_nn_view_out(&yv, y, ct, 1, op);
    if (st == TIDE_OK) {
        j.x = xv.base, j.w = wv.base, j.b = c->n_in == 3 ? bv.base : NULL, j.y = yv.base;
        memcpy(j.xs, xv.s, sizeof j.xs);
        j.direct = is_direct(&j.g, j.xs);
        j.ldx    = j.g.c == 1 ? j.hw : j.xs[1];
        plan_blocks(&j, tide_dtype_size(ct));
        j.items = j.g.n * j.nblk;
        double macs = (double)j.g.o * (double)j.cb * (double)j.kg;
        run_items(j.items, macs, ct == TIDE_DTYPE_F32 ? forward_float : forward_double, &j);
        st = finish(&j, op, st);
        if (st == TIDE_OK) tide_nn_view_out_end(&yv, y, ct);
    }
    tide_nn_view_free(&xv), tide_nn_view_free(&wv), tide_nn_view_free(&bv), tide_nn_view_free(&yv);
    return st;
}

tide_status tide_cpu_conv2d_backward_input(const tide_opcall * c) {
    const char * op = "conv2d_backward_input";
    tide_tensor * gy = c->in[0], * w = c->in[1], * gx = c->out[0];
    int32_t ct = c->compute_dtype;
    if (gx->nelem == 0) return TIDE_OK;
    job j;
    job_init(&j, c, c->p.ints + 7, w->sizes);
    tide_nn_view gv = {0}, wv = {0}, xv = {0};
    tide_status st = tide_nn_view_in(&gv, gy, ct, 1, op);
    if (st == TIDE_OK) st = tide_nn_view_in(&wv, w, ct, 1, op);
    if (st == TIDE_OK) st = tide_nn_view_out(&xv, gx, ct, 1, op);
    if (st == TIDE_OK) {
        j.gy = gv.base, j.w = wv.base, j.y = xv.base;
        memcpy(j.xs, xv.s, sizeof j.xs);
        j.direct = is_direct(&j.g, j.xs);
        /* blocks of channels within a group: col2im of different channels never collide */
        int64_t kk = j.g.kh * j.g.kw, per = kk * j.hw * (int64_t)tide_dtype_size(ct);
        j.cpb = per > 0 && j.g.cg * per > COL_BYTES ? COL_BYTES / per : j.g.cg;
        int64_t threads = tide_get_num_threads();
        if (j.g.n * j.g.groups < threads && j.g.cg >= 2) {
            int64_t want = (threads + j.g.n * j.g.groups - 1) / (j.g.n * j.g.groups);
            int64_t size = (j.g.cg + want - 1) / want;
            if (size < j.cpb) j.cpb = size;
        }
        if (j.cpb < 1) j.cpb = 1;
        j.ncblk = (j.g.cg + j.cpb - 1) / j.cpb;
        j.items = j.g.n * j.g.groups * j.ncblk;
        double macs = (double)(j.g.o / j.g.groups) * (double)j.cpb * (double)kk * (double)j.hw;
        if (j.items > 0)
            tide_parallel_for(j.items, grain_for(macs), 1,
                              ct == TIDE_DTYPE_F32 ? backward_input_float : backward_input_double, &j);
        else
            memset(j.y, 0, (size_t)gx->nelem * tide_dtype_size(ct));   /* no channels: nothing to add */
        st = finish(&j, op, st);
        if (st == TIDE_OK) tide_nn_view_out_end(&xv, gx, ct);
    }
    tide_nn_view_free(&gv), tide_nn_view_free(&wv), tide_nn_view_free(&xv);
    return st;
}

tide_status tide_cpu_conv2d_backward_weight(const tide_opcall * c) {
    const char * op = "conv2d_backward_weight";
    tide_tensor * gy = c->in[0], * x = c->in[1], * gw = c->out[0];
    int32_t ct = c->compute_dtype;
    if (gw->nelem == 0) return TIDE_OK;
    size_t esz = tide_dtype_size(ct);
    job j;
    job_init(&j, c, x->sizes, c->p.ints + 7);
    tide_nn_view gv = {0}, xv = {0}, wv = {0};
    void * partial = NULL;
    size_t pcap = 0;
    tide_status st = tide_nn_view_in(&gv, gy, ct, 1, op);
    if (st == TIDE_OK) st = tide_nn_view_in(&xv, x, ct, 0, op);
    if (st == TIDE_OK) st = tide_nn_view_out(&wv, gw, ct, 1, op);
    if (st == TIDE_OK) {
        j.gy = gv.base, j.x = xv.base, j.y = wv.base;
        memcpy(j.xs, xv.s, sizeof j.xs);
        j.direct = is_direct(&j.g, j.xs);
        j.ldx    = j.g.c == 1 ? j.hw : j.xs[1];
        plan_blocks(&j, esz);
        j.items = j.g.n * j.nblk;
        /* one partial sum per thread, added in a fixed order: the result does
         * not depend on which thread ran which block */
        double macs  = (double)j.g.o * (double)j.cb * (double)j.kg * (double)j.items;
        int64_t threads = tide_get_num_threads();
        j.parts = macs < 2.0 * GEMM_GRAIN ? 1 : threads < j.items ? threads : j.items;
        bool lent = j.parts > 1 && lend_begin(macs / (double)j.items);
        if (lent) j.parts = 1;   /* one part, the items in order: no partial sums */
        if (j.items == 0) {
            memset(j.y, 0, (size_t)gw->nelem * esz);   /* an empty batch: the sum of nothing */
            j.parts = 0;
        }
        if (j.parts > 1) {
            partial = tide_host_alloc((size_t)((j.parts - 1) * j.g.o * j.kg) * esz, &pcap);
            if (!partial) st = tide_error_set(TIDE_E_OOM, "%s: out of memory for partial sums", op);
            j.partial = partial;
        }
        if (st == TIDE_OK && j.parts > 0) {
            tide_parallel_for(j.parts, 1, 1, ct == TIDE_DTYPE_F32 ? backward_weight_float : backward_weight_double, &j);
            st = finish(&j, op, st);
            if (st == TIDE_OK) {
                if (ct == TIDE_DTYPE_F32)
                    sum_parts_float(&j);
                else
                    sum_parts_double(&j);
            }
        }
        if (lent) tide_blas_lend_end();
        if (st == TIDE_OK) tide_nn_view_out_end(&wv, gw, ct);
    }
    if (partial) tide_host_free(partial, pcap);
    tide_nn_view_free(&gv), tide_nn_view_free(&xv), tide_nn_view_free(&wv);
    return st;
}
