/*
 * pool.c - 2-d pooling over NCHW planes with PyTorch's semantics: max_pool2d
 * (values and argmax indices), avg_pool2d, adaptive_avg_pool2d, and their
 * backward ops for the autograd rules. Each window's valid taps along each
 * axis are worked out once per call, so the per-plane loops (split across
 * Tide's pool) carry no bounds checks. Shared checks and views are in nn.h.
 */
#include "nn.h"

#include <stdlib.h>

/* -- geometry ---------------------------------------------------------------------------------- */

#define MAX_LAYOUT   "kernel h, w, stride h, w, padding h, w, dilation h, w, ceil_mode"
#define AVG_LAYOUT   "kernel h, w, stride h, w, padding h, w, ceil_mode, count_include_pad, divisor_override or 0"
#define AVG_LAYOUT_X AVG_LAYOUT ", then the input's sizes N, C, H, W"

/* The taps of output i along one axis: input positions lo + t*step for t in
 * [0, cnt); full is the window's size counting padding (avg_pool2d's divisor). */
typedef struct {
    int64_t * lo, * cnt, * full;
    int64_t   step;
} axis;

/* A window of k taps d apart starting at i*s - p, clipped to [0, in); avg
 * windows (d = 1) also end at in + p, as PyTorch's do. */
static void axis_pool(axis * a, int64_t out, int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
    a->step = d;
    for (int64_t i = 0; i < out; i++) {
        int64_t start = i * s - p, t0 = start < 0 ? (-start + d - 1) / d : 0;
        int64_t t1    = in - 1 - start >= 0 ? (in - 1 - start) / d + 1 : 0;
        if (t1 > k) t1 = k;
        if (t0 > t1) t0 = t1;
        int64_t end = start + k < in + p ? start + k : in + p;
        a->lo[i]   = start + t0 * d;
        a->cnt[i]  = t1 - t0;
        a->full[i] = end - start;
    }
}

/* Adaptive windows: [floor(i*in/out), ceil((i+1)*in/out)). */
static void axis_adaptive(axis * a, int64_t out, int64_t in) {
    a->step = 1;
    for (int64_t i = 0; i < out; i++) {
        int64_t start = i * in / out, end = ((i + 1) * in + out - 1) / out;
        a->lo[i]   = start;
        a->cnt[i]  = end - start;
        a->full[i] = end - start;
    }
}

static tide_status axes_alloc(axis * y, axis * x, int64_t oh, int64_t ow, int64_t ** mem, size_t * cap,
                              const char * op) {
    *mem = tide_host_alloc((size_t)(3 * (oh + ow)) * sizeof(int64_t), cap);
    if (!*mem) return tide_error_set(TIDE_E_OOM, "%s: out of memory", op);
    y->lo = *mem, y->cnt = y->lo + oh, y->full = y->cnt + oh;
    x->lo = y->full + oh, x->cnt = x->lo + ow, x->full = x->cnt + ow;
    return TIDE_OK;
}

typedef struct {
    int64_t kh, kw, sh, sw, ph, pw, dh, dw, ceil_mode;
    int64_t count_include_pad, divisor;      /* avg_pool2d */
    int64_t oh, ow;
} pgeom;

static void pgeom_fill(pgeom * g, const int64_t * p, bool is_max, const int64_t * xs) {
    g->kh = p[0], g->kw = p[1], g->sh = p[2], g->sw = p[3], g->ph = p[4], g->pw = p[5];
    if (is_max) {
        g->dh = p[6], g->dw = p[7], g->ceil_mode = p[8];
        g->count_include_pad = 1, g->divisor = 0;
    } else {
        g->dh = g->dw = 1, g->ceil_mode = p[6], g->count_include_pad = p[7], g->divisor = p[8];
    }
    g->oh = tide_nn_out_size(xs[2], g->kh, g->sh, g->ph, g->dh, g->ceil_mode != 0);
    g->ow = tide_nn_out_size(xs[3], g->kw, g->sw, g->pw, g->dw, g->ceil_mode != 0);
}

static tide_status need_planes(const char * op, const int64_t * xs) {
    if (xs[1] > 0 && xs[2] > 0 && xs[3] > 0) return TIDE_OK;
    char a[128];
    return tide_error_set(TIDE_E_SHAPE, "%s: expects an input with non-empty channels, height and width, got shape %s", op,
                          tide_dims_str(4, xs, a, sizeof a));
}

/* PyTorch's pool2d_shape_check, for the input sizes xs. */
static tide_status pgeom_check(const tide_opcall * c, const int64_t * xs, bool is_max, pgeom * g) {
    const char * op = tide_op_name(c->op);
    const int64_t * p = c->p.ints;
    char a[128];
    TIDE_CHECK(tide_nn_need_pair(c, 0, 1, "kernel_size"));
    TIDE_CHECK(tide_nn_need_pair(c, 2, 1, "stride"));
    TIDE_CHECK(tide_nn_need_pair(c, 4, 0, "padding"));
    if (is_max) TIDE_CHECK(tide_nn_need_pair(c, 6, 1, "dilation"));
    if (p[4] > p[0] / 2 || p[5] > p[1] / 2)
        return tide_error_set(TIDE_E_VALUE, "%s: padding (%lld, %lld) must be at most half of kernel_size (%lld, %lld)", op,
                              (long long)p[4], (long long)p[5], (long long)p[0], (long long)p[1]);
    TIDE_CHECK(need_planes(op, xs));
    pgeom_fill(g, p, is_max, xs);
    if (g->oh < 1 || g->ow < 1)
        return tide_error_set(TIDE_E_SHAPE, "%s: output size %lldx%lld is too small for input of shape %s (kernel %lldx%lld, stride %lldx%lld, padding %lldx%lld, dilation %lldx%lld)",
                              op, (long long)g->oh, (long long)g->ow, tide_dims_str(4, xs, a, sizeof a),
                              (long long)g->kh, (long long)g->kw, (long long)g->sh, (long long)g->sw, (long long)g->ph,
                              (long long)g->pw, (long long)g->dh, (long long)g->dw);
    return TIDE_OK;
}

static void set_out(tide_shape_out * o, int32_t i, int64_t a, int64_t b, int64_t c, int64_t d) {
    o->ndim[i]     = 4;
    o->sizes[i][0] = a, o->sizes[i][1] = b, o->sizes[i][2] = c, o->sizes[i][3] = d;
}

/* -- shape rules -------------------------------------------------------------------------------- */

/* max_pool2d(input [N,C,H,W]) -> values [N,C,oH,oW], indices (int64, same shape) */
tide_status tide_shape_max_pool2d(tide_opcall * c, tide_shape_out * o) {
    const tide_tensor * x = c->in[0];
    TIDE_CHECK(tide_nn_need_4d("max_pool2d", x, "input [N,C,H,W]"));
    TIDE_CHECK(tide_nn_need_ints(c, 9, MAX_LAYOUT));
    pgeom g;
    TIDE_CHECK(pgeom_check(c, x->sizes, true, &g));
    set_out(o, 0, x->sizes[0], x->sizes[1], g.oh, g.ow);
    set_out(o, 1, x->sizes[0], x->sizes[1], g.oh, g.ow);
    return TIDE_OK;
}

/* max_pool2d_backward(grad_output, indices) -> grad_input [N,C,H,W] (sizes in ints[0..3]) */
tide_status tide_shape_max_pool2d_backward(tide_opcall * c, tide_shape_out * o) {
    const char * op = "max_pool2d_backward";
    const tide_tensor * gy = c->in[0], * idx = c->in[1];
    char a[128], b[128];
    TIDE_CHECK(tide_nn_need_4d(op, gy, "grad_output [N,C,oH,oW]"));
    TIDE_CHECK(tide_nn_need_float(c, gy, "grad_output"));
    if (idx->dtype_id != TIDE_DTYPE_I64)
        return tide_error_set(TIDE_E_DTYPE, "%s: indices must be an int64 tensor, got %s", op, tide_dtype_name(idx->dtype_id));
    if (idx->ndim != 4 || memcmp(idx->sizes, gy->sizes, 4 * sizeof(int64_t)) != 0)
        return tide_error_set(TIDE_E_SHAPE, "%s: indices of shape %s do not match grad_output of shape %s", op,
                              tide_shape_str(idx, a, sizeof a), tide_shape_str(gy, b, sizeof b));
    TIDE_CHECK(tide_nn_need_ints(c, 4, "the input's sizes N, C, H, W"));
    TIDE_CHECK(tide_nn_need_sizes(c, 0, "input"));
    const int64_t * xs = c->p.ints;
    TIDE_CHECK(need_planes(op, xs));
    if (gy->sizes[0] != xs[0] || gy->sizes[1] != xs[1])
        return tide_error_set(TIDE_E_SHAPE, "%s: grad_output of shape %s does not match an input of shape %s in batch and channels",
                              op, tide_shape_str(gy, a, sizeof a), tide_dims_str(4, xs, b, sizeof b));
    set_out(o, 0, xs[0], xs[1], xs[2], xs[3]);
    return TIDE_OK;
}

/* avg_pool2d(input [N,C,H,W]) -> [N,C,oH,oW] */
tide_status tide_shape_avg_pool2d(tide_opcall * c, tide_shape_out * o) {
    const tide_tensor * x = c->in[0];
    TIDE_CHECK(tide_nn_need_4d("avg_pool2d", x, "input [N,C,H,W]"));
    TIDE_CHECK(tide_nn_need_ints(c, 9, AVG_LAYOUT));
    pgeom g;
    TIDE_CHECK(pgeom_check(c, x->sizes, false, &g));
    set_out(o, 0, x->sizes[0], x->sizes[1], g.oh, g.ow);
    return TIDE_OK;
}

/* avg_pool2d_backward(grad_output [N,C,oH,oW]) -> grad_input (sizes in ints[9..12]) */
tide_status tide_shape_avg_pool2d_backward(tide_opcall * c, tide_shape_out * o) {
    const char * op = "avg_pool2d_backward";
    const tide_tensor * gy = c->in[0];
    TIDE_CHECK(tide_nn_need_4d(op, gy, "grad_output [N,C,oH,oW]"));
    TIDE_CHECK(tide_nn_need_ints(c, 13, AVG_LAYOUT_X));
    TIDE_CHECK(tide_nn_need_sizes(c, 9, "input"));
    const int64_t * xs = c->p.ints + 9;
    pgeom g;
    TIDE_CHECK(pgeom_check(c, xs, false, &g));
    int64_t want[4] = {xs[0], xs[1], g.oh, g.ow};
    TIDE_CHECK(tide_nn_need_grad_shape(c, gy, want, "avg_pool2d", xs));
    set_out(o, 0, xs[0], xs[1], xs[2], xs[3]);
    return TIDE_OK;
}

/* adaptive_avg_pool2d(input [N,C,H,W]) -> [N,C,ints[0],ints[1]] */
tide_status tide_shape_adaptive_avg_pool2d(tide_opcall * c, tide_shape_out * o) {
    const tide_tensor * x = c->in[0];
    TIDE_CHECK(tide_nn_need_4d("adaptive_avg_pool2d", x, "input [N,C,H,W]"));
    TIDE_CHECK(tide_nn_need_ints(c, 2, "output size h, w"));
    TIDE_CHECK(tide_nn_need_pair(c, 0, 0, "output_size"));
    TIDE_CHECK(need_planes("adaptive_avg_pool2d", x->sizes));
    set_out(o, 0, x->sizes[0], x->sizes[1], c->p.ints[0], c->p.ints[1]);
    return TIDE_OK;
}

/* adaptive_avg_pool2d_backward(grad_output [N,C,oH,oW]) -> grad_input (sizes in ints[0..3]) */
tide_status tide_shape_adaptive_avg_pool2d_backward(tide_opcall * c, tide_shape_out * o) {
    const char * op = "adaptive_avg_pool2d_backward";
    const tide_tensor * gy = c->in[0];
    TIDE_CHECK(tide_nn_need_4d(op, gy, "grad_output [N,C,oH,oW]"));
    TIDE_CHECK(tide_nn_need_ints(c, 4, "the input's sizes N, C, H, W"));
    TIDE_CHECK(tide_nn_need_sizes(c, 0, "input"));
    const int64_t * xs = c->p.ints;
    TIDE_CHECK(need_planes(op, xs));
    int64_t want[4] = {xs[0], xs[1], gy->sizes[2], gy->sizes[3]};
    TIDE_CHECK(tide_nn_need_grad_shape(c, gy, want, "adaptive_avg_pool2d", xs));
    set_out(o, 0, xs[0], xs[1], xs[2], xs[3]);
    return TIDE_OK;
}

/* -- kernels ------------------------------------------------------------------------------------ */

typedef struct {
    int64_t      c, h, w, oh, ow;
    axis         ay, ax;
    const char * x;  int64_t xs[4];     /* forward: input; backward: grad_output */
    char *       y;  int64_t ys[4];     /* forward: result (any strides); backward: contiguous grad_input */
    const char * ix; int64_t is[4];     /* max_pool2d_backward: indices */
    char *       iy;                    /* max_pool2d: indices (int64, strides ys2) */
    int64_t      ys2[4];
    int64_t      divisor;               /* avg_pool2d: divisor_override, or 0 */
    const void * div;                   /* avg kernels: each output's divisor, [oh, ow] in the compute dtype */
    bool         include_pad, one_based;
    bool         full2x2;               /* 2x2 windows, no dilation, all inside the input, 2 apart in w */
    atomic_int   bad;                   /* max_pool2d_backward: an index out of range was met */
    atomic_llong bad_value;
} pjob;

/* Planes whose work (outputs times taps) is below the grain run on one thread. */
static int64_t plane_grain(int64_t work_per_plane) {
    return work_per_plane >= TIDE_GRAIN ? 1 : TIDE_GRAIN / (work_per_plane > 0 ? work_per_plane : 1) + 1;
}

/* The kernels copy what they use of the job into locals first: the build has
 * -fno-strict-aliasing, so every store into a result would otherwise make the
 * compiler reload the job's fields. */
#define POOL_LOCALS                                                                                     \
    const int64_t c_ = j->c, w_ = j->w, oh_ = j->oh, ow_ = j->ow;                                      \
    const int64_t * ylo = j->ay.lo, * ycnt = j->ay.cnt, * xlo = j->ax.lo, * xcnt = j->ax.cnt;          \
    const int64_t xs0 = j->xs[0], xs1 = j->xs[1], xs2 = j->xs[2], xs3 = j->xs[3];                      \
    (void)c_, (void)w_, (void)oh_, (void)ow_, (void)ylo, (void)ycnt, (void)xlo, (void)xcnt;             \
    (void)xs0, (void)xs1, (void)xs2, (void)xs3

/* One row of 2x2 windows 2 apart starting at column x0 of rows r0 and r1:
 * the first largest tap in PyTorch's order (a b / c d). The comparisons are
 * made on integer keys that order like the floats (-0 equal to +0): GCC does
 * not turn float comparisons into the selects that let the loop vectorise,
 * as they could raise FE_INVALID (the floats are read as integers: the build
 * has -fno-strict-aliasing). Returns false, having written garbage, if a NaN
 * was met: the caller then redoes the plane with the general loop. */
#define MAX_ROW2X2(T, I, ABS, INF)                                                                      \
    static inline I key_##T(I bits) { return bits < 0 ? -(bits & ABS) : bits; }                        \
    static TIDE_SIMD_CLONES bool max_row2x2_##T(const T * restrict r0, const T * restrict r1, int64_t x0, \
                                                int64_t ow, T * restrict y, int64_t * restrict idx,     \
                                                int64_t at, int64_t w) {                                \
        const I * restrict i0 = (const I *)r0, * restrict i1 = (const I *)r1;                          \
        I nan = 0;                                                                                      \
        for (int64_t ox = 0; ox < ow; ox++) {                                                           \
            const int64_t c0 = x0 + 2 * ox;                                                             \
            const I a = i0[c0], b = i0[c0 + 1], c = i1[c0], d = i1[c0 + 1];                            \
            const I ka = key_##T(a), kb = key_##T(b), kc = key_##T(c), kd = key_##T(d);                 \
            I best = a, kbest = ka;                                                                     \
            int64_t k = 0;                                                                              \
            k = kb > kbest ? 1 : k, best = kb > kbest ? b : best, kbest = kb > kbest ? kb : kbest;      \
            k = kc > kbest ? w : k, best = kc > kbest ? c : best, kbest = kc > kbest ? kc : kbest;      \
            k = kd > kbest ? w + 1 : k, best = kd > kbest ? d : best;                                   \
            nan |= ((a & ABS) > INF) | ((b & ABS) > INF) | ((c & ABS) > INF) | ((d & ABS) > INF);       \
            ((I *)y)[ox] = best;                                                                        \
            idx[ox] = at + c0 + k;                                                                      \
        }                                                                                               \
        return !nan;                                                                                    \
    }
MAX_ROW2X2(float, int32_t, INT32_C(0x7fffffff), INT32_C(0x7f800000))
MAX_ROW2X2(double, int64_t, INT64_C(0x7fffffffffffffff), INT64_C(0x7ff0000000000000))

/* One row of 2x2 averages 2 apart from column x0 of rows r0 and r1, the taps
 * added in the general loop's order from 0 (so -0 sums as there), divided by
 * each output's divisor: a vector loop where the general one took 4 ns an output. */
#define AVG_ROW2X2(T)                                                                                   \
    static TIDE_SIMD_CLONES void avg_row2x2_##T(const T * restrict r0, const T * restrict r1, int64_t x0, \
                                                int64_t ow, T * restrict y, const T * restrict div) {  \
        for (int64_t ox = 0; ox < ow; ox++) {                                                           \
            const int64_t c0 = x0 + 2 * ox;                                                             \
            T s = 0;                                                                                    \
            s += r0[c0];                                                                                \
            s += r0[c0 + 1];                                                                            \
            s += r1[c0];                                                                                \
            s += r1[c0 + 1];                                                                            \
            y[ox] = s / div[ox];                                                                        \
        }                                                                                               \
    }
AVG_ROW2X2(float)
AVG_ROW2X2(double)

/* avg_row2x2's backward: each output's gradient over its divisor added to its four
 * taps, in the general loop's order (so bit for bit the same), as a vector loop. */
#define AVG_ROW2X2_BWD(T)                                                                               \
    static TIDE_SIMD_CLONES void avg_row2x2_bwd_##T(T * restrict r0, T * restrict r1, int64_t x0,       \
                                                    int64_t ow, const T * restrict g,                   \
                                                    const T * restrict div) {                           \
        for (int64_t ox = 0; ox < ow; ox++) {                                                           \
            const int64_t c0 = x0 + 2 * ox;                                                             \
            const T       v  = g[ox] / div[ox];                                                         \
            r0[c0] += v;                                                                                \
            r0[c0 + 1] += v;                                                                            \
            r1[c0] += v;                                                                                \
            r1[c0 + 1] += v;                                                                            \
        }                                                                                               \
    }
AVG_ROW2X2_BWD(float)
AVG_ROW2X2_BWD(double)

#define POOL_KERNELS(T)                                                                                  \
    static void max_fwd_##T(void * ctx, int64_t begin, int64_t end) {                                   \
        const pjob * j = ctx;                                                                           \
        POOL_LOCALS;                                                                                    \
        const int64_t dh = j->ay.step, dw = j->ax.step, base = j->one_based ? 1 : 0;                    \
        const int64_t ys0 = j->ys[0], ys1 = j->ys[1], ys2 = j->ys[2], ys3 = j->ys[3];                   \
        const int64_t is0 = j->ys2[0], is1 = j->ys2[1], is2 = j->ys2[2], is3 = j->ys2[3];               \
        for (int64_t q = begin; q < end; q++) {                                                         \
            int64_t n = q / c_, ch = q % c_;                                                            \
            const T * xp = (const T *)j->x + n * xs0 + ch * xs1;                                        \
            T * yp = (T *)j->y + n * ys0 + ch * ys1;                                                    \
            int64_t * ip = (int64_t *)j->iy + n * is0 + ch * is1;                                       \
            /* the CNN case, 2x2 windows 2 apart inside the input: a vector loop per row */            \
            bool fast = j->full2x2 && xs3 == 1 && ys3 == 1 && is3 == 1;                                 \
            for (int64_t oy = 0; fast && oy < oh_; oy++) {                                              \
                const int64_t y0 = ylo[oy];                                                             \
                if (max_row2x2_##T(xp + y0 * xs2, xp + (y0 + 1) * xs2, xlo[0], ow_, yp + oy * ys2,      \
                                   ip + oy * is2, y0 * w_ + base, w_))                                  \
                    continue;                                                                           \
                fast = false;   /* a NaN: this plane goes the general way, which knows PyTorch's rule */\
            }                                                                                           \
            if (fast) continue;                                                                         \
            for (int64_t oy = 0; oy < oh_; oy++) {                                                      \
                const int64_t y0 = ylo[oy], ny = ycnt[oy];                                              \
                for (int64_t ox = 0; ox < ow_; ox++) {                                                  \
                    const int64_t x0 = xlo[ox], nx = xcnt[ox];                                          \
                    T best = -(T)INFINITY;                                                              \
                    /* PyTorch's: the first tap when all are -inf; -1 when the window is empty */      \
                    int64_t bi = ny > 0 && nx > 0 ? y0 * w_ + x0 : -1, nan_at = -1;                     \
                    /* a NaN wins, the last one (PyTorch's rule): tracked on the side so that the      \
                     * comparisons stay simple enough to become selects */                             \
                    for (int64_t ty = 0; ty < ny; ty++) {                                               \
                        const int64_t iy = y0 + ty * dh;                                                \
                        const T * row = xp + iy * xs2;                                                  \
                        for (int64_t tx = 0; tx < nx; tx++) {                                           \
                            const int64_t ixx = x0 + tx * dw, at = iy * w_ + ixx;                       \
                            const T v = row[ixx * xs3];                                                 \
                            const bool gt = v > best;                                                   \
                            bi     = gt ? at : bi;                                                      \
                            best   = gt ? v : best;                                                     \
                            nan_at = v != v ? at : nan_at;                                              \
                        }                                                                               \
                    }                                                                                   \
                    if (nan_at >= 0) {                                                                  \
                        bi   = nan_at;                                                                  \
                        best = (T)NAN;                                                                  \
                    }                                                                                   \
                    yp[oy * ys2 + ox * ys3] = best;                                                     \
                    ip[oy * is2 + ox * is3] = bi + base;                                                \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
    }                                                                                                   \
                                                                                                        \
    static void max_bwd_##T(void * ctx, int64_t begin, int64_t end) {                                   \
        pjob * j = ctx;                                                                                 \
        POOL_LOCALS;                                                                                    \
        const int64_t plane = j->h * w_, base = j->one_based ? 1 : 0;                                   \
        const int64_t is0 = j->is[0], is1 = j->is[1], is2 = j->is[2], is3 = j->is[3];                   \
        int64_t bad = 0;                                                                                \
        bool any_bad = false;                                                                           \
        const bool linear = (xs3 == 1 || ow_ == 1) && (xs2 == ow_ || oh_ == 1) &&                       \
                            (is3 == 1 || ow_ == 1) && (is2 == ow_ || oh_ == 1);                         \
        for (int64_t q = begin; q < end; q++) {                                                         \
            int64_t n = q / c_, ch = q % c_;                                                            \
            const T * gp = (const T *)j->x + n * xs0 + ch * xs1;                                        \
            const int64_t * ip = (const int64_t *)j->ix + n * is0 + ch * is1;                           \
            T * gx = (T *)j->y + q * plane;                                                             \
            memset(gx, 0, (size_t)plane * sizeof(T));                                                   \
            if (linear) {   /* contiguous planes of grad_output and indices: one flat loop */           \
                for (int64_t o = 0; o < oh_ * ow_; o++) {                                               \
                    int64_t i = ip[o] - base;                                                           \
                    if (TIDE_LIKELY((uint64_t)i < (uint64_t)plane)) {                                   \
                        gx[i] += gp[o];                                                                 \
                    } else if (i != -1) {                                                               \
                        bad = i + base;                                                                 \
                        any_bad = true;                                                                 \
                    }                                                                                   \
                }                                                                                       \
                continue;                                                                               \
            }                                                                                           \
            for (int64_t oy = 0; oy < oh_; oy++)                                                        \
                for (int64_t ox = 0; ox < ow_; ox++) {                                                  \
                    int64_t i = ip[oy * is2 + ox * is3] - base;                                         \
                    if ((uint64_t)i < (uint64_t)plane) {                                                \
                        gx[i] += gp[oy * xs2 + ox * xs3];                                               \
                    } else if (i != -1) {                                                               \
                        bad = i + base;                                                                 \
                        any_bad = true;                                                                 \
                    }                                                                                   \
                }                                                                                       \
        }                                                                                               \
        if (any_bad) {                                                                                  \
            atomic_store(&j->bad_value, bad);                                                           \
            atomic_store(&j->bad, 1);                                                                   \
        }                                                                                               \
    }                                                                                                   \
                                                                                                        \
    /* The divisor of output (oy, ox): divisor_override, the window with its padding, or its taps. */  \
    static inline T avg_div_##T(const pjob * j, int64_t oy, int64_t ox) {                               \
        if (j->divisor) return (T)j->divisor;                                                           \
        if (j->include_pad) return (T)(j->ay.full[oy] * j->ax.full[ox]);                                \
        return (T)(j->ay.cnt[oy] * j->ax.cnt[ox]);                                                      \
    }                                                                                                   \
                                                                                                        \
    /* avg_pool2d and adaptive_avg_pool2d: the mean of each window (0 for an empty one). The            \
     * divisors are worked out once per call, in j->div (oh*ow of them). */                             \
    static void avg_fwd_##T(void * ctx, int64_t begin, int64_t end) {                                   \
        const pjob * j = ctx;                                                                           \
        POOL_LOCALS;                                                                                    \
        const int64_t ys0 = j->ys[0], ys1 = j->ys[1], ys2 = j->ys[2], ys3 = j->ys[3];                   \
        const T * div = (const T *)j->div;                                                          \
        for (int64_t q = begin; q < end; q++) {                                                         \
            int64_t n = q / c_, ch = q % c_;                                                            \
            const T * xp = (const T *)j->x + n * xs0 + ch * xs1;                                        \
            T * yp = (T *)j->y + n * ys0 + ch * ys1;                                                    \
            if (j->full2x2 && xs3 == 1 && ys3 == 1) {   /* the CNN case, as max_fwd's */                \
                for (int64_t oy = 0; oy < oh_; oy++)                                                    \
                    avg_row2x2_##T(xp + ylo[oy] * xs2, xp + (ylo[oy] + 1) * xs2, xlo[0], ow_,           \
                                   yp + oy * ys2, div + oy * ow_);                                      \
                continue;                                                                               \
            }                                                                                           \
            for (int64_t oy = 0; oy < oh_; oy++) {                                                      \
                const int64_t y0 = ylo[oy], ny = ycnt[oy];                                              \
                for (int64_t ox = 0; ox < ow_; ox++) {                                                  \
                    const int64_t x0 = xlo[ox], nx = xcnt[ox];                                          \
                    T s = 0;                                                                            \
                    for (int64_t iy = y0; iy < y0 + ny; iy++) {                                         \
                        const T * row = xp + iy * xs2;                                                  \
                        for (int64_t ixx = x0; ixx < x0 + nx; ixx++) s += row[ixx * xs3];               \
                    }                                                                                   \
                    yp[oy * ys2 + ox * ys3] = s / div[oy * ow_ + ox];                                 \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
    }                                                                                                   \
                                                                                                        \
    static void avg_bwd_##T(void * ctx, int64_t begin, int64_t end) {                                   \
        const pjob * j = ctx;                                                                           \
        POOL_LOCALS;                                                                                    \
        const int64_t plane = j->h * w_;                                                                \
        const T * div = (const T *)j->div;                                                          \
        for (int64_t q = begin; q < end; q++) {                                                         \
            int64_t n = q / c_, ch = q % c_;                                                            \
            const T * gp = (const T *)j->x + n * xs0 + ch * xs1;                                        \
            T * gx = (T *)j->y + q * plane;                                                             \
            memset(gx, 0, (size_t)plane * sizeof(T));                                                   \
            if (j->full2x2 && xs3 == 1) {   /* the CNN case, as avg_fwd's */                            \
                for (int64_t oy = 0; oy < oh_; oy++)                                                    \
                    avg_row2x2_bwd_##T(gx + ylo[oy] * w_, gx + (ylo[oy] + 1) * w_, xlo[0], ow_,         \
                                       gp + oy * xs2, div + oy * ow_);                                  \
                continue;                                                                               \
            }                                                                                           \
            for (int64_t oy = 0; oy < oh_; oy++) {                                                      \
                const int64_t y0 = ylo[oy], ny = ycnt[oy];                                              \
                for (int64_t ox = 0; ox < ow_; ox++) {                                                  \
                    const int64_t x0 = xlo[ox], nx = xcnt[ox];                                          \
                    const T v = gp[oy * xs2 + ox * xs3] / div[oy * ow_ + ox];                         \
                    for (int64_t iy = y0; iy < y0 + ny; iy++) {                                         \
                        T * row = gx + iy * w_;                                                         \
                        for (int64_t ixx = x0; ixx < x0 + nx; ixx++) row[ixx] += v;                     \
                    }                                                                                   \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
    }                                                                                                   \
                                                                                                        \
    static void avg_divisors_##T(const pjob * j, void * out) {                                          \
        T * d = out;                                                                                    \
        for (int64_t oy = 0; oy < j->oh; oy++)                                                          \
            for (int64_t ox = 0; ox < j->ow; ox++) {                                                    \
                bool empty = j->ay.cnt[oy] == 0 || j->ax.cnt[ox] == 0;   /* its sum is 0: any divisor */ \
                d[oy * j->ow + ox] = empty ? 1 : avg_div_##T(j, oy, ox);                                \
            }                                                                                           \
    }

POOL_KERNELS(float)
POOL_KERNELS(double)

#define PICK(ct, name) ((ct) == TIDE_DTYPE_F32 ? name##_float : name##_double)

/* Sets up j for input sizes xs and result sizes [.., oh, ow]; the axes are the caller's. */
static void pjob_init(pjob * j, const int64_t * xs, int64_t oh, int64_t ow) {
    memset(j, 0, sizeof *j);
    j->c = xs[1], j->h = xs[2], j->w = xs[3], j->oh = oh, j->ow = ow;
    atomic_init(&j->bad, 0);
    atomic_init(&j->bad_value, 0);
}

/* Runs a forward kernel: x read in place (any strides), y written in place when it can be. */
/* Whether every window is 2x2, undilated, inside the input and 2 apart in w:
 * the forward kernels' vector row loops (max_row2x2, avg_row2x2) then apply. */
static bool full2x2(const pgeom * g, const pjob * j) {
    bool ok = g->kh == 2 && g->kw == 2 && g->dh == 1 && g->dw == 1 && g->sw == 2;
    for (int64_t i = 0; i < g->oh && ok; i++) ok = j->ay.cnt[i] == 2;
    for (int64_t i = 0; i < g->ow && ok; i++) ok = j->ax.cnt[i] == 2;
    return ok;
}

static tide_status run_forward(const tide_opcall * c, pjob * j, tide_range_fn fn, int64_t taps) {
    const char * op = tide_op_name(c->op);
    int32_t ct = c->compute_dtype;
    tide_tensor * x = c->in[0], * y = c->out[0];
    tide_nn_view xv = {0}, yv = {0}, iv = {0};
    tide_status st = tide_nn_view_in(&xv, x, ct, 0, op);
    if (st == TIDE_OK) st = tide_nn_view_out(&yv, y, ct, 0, op);
    if (st == TIDE_OK && c->n_out == 2) st = tide_nn_view_out(&iv, c->out[1], TIDE_DTYPE_I64, 0, op);
    if (st == TIDE_OK) {
        j->x = xv.base, j->y = yv.base, j->iy = iv.base;
        memcpy(j->xs, xv.s, sizeof j->xs);
        memcpy(j->ys, yv.s, sizeof j->ys);
        memcpy(j->ys2, iv.s, sizeof j->ys2);
        int64_t planes = x->sizes[0] * x->sizes[1];
        tide_parallel_for(planes, plane_grain(j->oh * j->ow * taps), 1, fn, j);
        tide_nn_view_out_end(&yv, y, ct);
        if (c->n_out == 2) tide_nn_view_out_end(&iv, c->out[1], TIDE_DTYPE_I64);
    }
    tide_nn_view_free(&xv), tide_nn_view_free(&yv), tide_nn_view_free(&iv);
    return st;
}

/* Runs a backward kernel: grad_output read in place, grad_input contiguous. */
static tide_status run_backward(const tide_opcall * c, pjob * j, tide_range_fn fn, int64_t taps) {
    const char * op = tide_op_name(c->op);
    int32_t ct = c->compute_dtype;
    tide_tensor * gy = c->in[0], * gx = c->out[0];
    tide_nn_view gv = {0}, xv = {0}, iv = {0};
    tide_status st = tide_nn_view_in(&gv, gy, ct, 0, op);
    if (st == TIDE_OK && c->n_in == 2) st = tide_nn_view_in(&iv, c->in[1], TIDE_DTYPE_I64, 0, op);
    if (st == TIDE_OK) st = tide_nn_view_out(&xv, gx, ct, 1, op);
    if (st == TIDE_OK) {
        j->x = gv.base, j->y = xv.base, j->ix = iv.base;
        memcpy(j->xs, gv.s, sizeof j->xs);
        memcpy(j->is, iv.s, sizeof j->is);
        int64_t planes = gx->sizes[0] * gx->sizes[1];
        tide_parallel_for(planes, plane_grain(j->oh * j->ow * taps + j->h * j->w), 1, fn, j);
        if (atomic_load(&j->bad))
            st = tide_error_set(TIDE_E_INDEX, "%s: index %lld is out of range for an input plane of %lldx%lld", op,
                                (long long)atomic_load(&j->bad_value), (long long)j->h, (long long)j->w);
        if (st == TIDE_OK) tide_nn_view_out_end(&xv, gx, ct);
    }
    tide_nn_view_free(&gv), tide_nn_view_free(&xv), tide_nn_view_free(&iv);
    return st;
}

tide_status tide_cpu_max_pool2d(const tide_opcall * c) {
    if (c->out[0]->nelem == 0) return TIDE_OK;
    const int64_t * xs = c->in[0]->sizes;
    pgeom g;
    pgeom_fill(&g, c->p.ints, true, xs);
    pjob j;
    pjob_init(&j, xs, g.oh, g.ow);
    j.one_based = (c->p.flags & TIDE_PARAMF_ONE_BASED) != 0;
    int64_t * mem;
    size_t cap;
    TIDE_CHECK(axes_alloc(&j.ay, &j.ax, g.oh, g.ow, &mem, &cap, "max_pool2d"));
    axis_pool(&j.ay, g.oh, xs[2], g.kh, g.sh, g.ph, g.dh);
    axis_pool(&j.ax, g.ow, xs[3], g.kw, g.sw, g.pw, g.dw);
    j.full2x2 = full2x2(&g, &j);
    tide_status st = run_forward(c, &j, PICK(c->compute_dtype, max_fwd), g.kh * g.kw);
    tide_host_free(mem, cap);
    return st;
}

tide_status tide_cpu_max_pool2d_backward(const tide_opcall * c) {
    if (c->out[0]->nelem == 0) return TIDE_OK;
    const tide_tensor * gy = c->in[0];
    pjob j;
    pjob_init(&j, c->p.ints, gy->sizes[2], gy->sizes[3]);
    j.one_based = (c->p.flags & TIDE_PARAMF_ONE_BASED) != 0;
    return run_backward(c, &j, PICK(c->compute_dtype, max_bwd), 1);
}

/* avg_pool2d and adaptive_avg_pool2d, forward or backward, once their axes are set. */
static tide_status avg_run(const tide_opcall * c, pjob * j, bool backward, int64_t taps) {
    int32_t ct = c->compute_dtype;
    size_t  cap;
    void *  div = tide_host_alloc((size_t)(j->oh * j->ow) * tide_dtype_size(ct), &cap);
    if (!div) return tide_error_set(TIDE_E_OOM, "%s: out of memory", tide_op_name(c->op));
    if (ct == TIDE_DTYPE_F32)
        avg_divisors_float(j, div);
    else
        avg_divisors_double(j, div);
    j->div = div;
    tide_status st = backward ? run_backward(c, j, PICK(ct, avg_bwd), taps) : run_forward(c, j, PICK(ct, avg_fwd), taps);
    tide_host_free(div, cap);
    return st;
}

static tide_status avg_common(const tide_opcall * c, const int64_t * xs, bool backward) {
    pgeom g;
    pgeom_fill(&g, c->p.ints, false, xs);
    pjob j;
    pjob_init(&j, xs, g.oh, g.ow);
    j.divisor     = g.divisor;
    j.include_pad = g.count_include_pad != 0;
    int64_t * mem;
    size_t cap;
    TIDE_CHECK(axes_alloc(&j.ay, &j.ax, g.oh, g.ow, &mem, &cap, tide_op_name(c->op)));
    axis_pool(&j.ay, g.oh, xs[2], g.kh, g.sh, g.ph, 1);
    axis_pool(&j.ax, g.ow, xs[3], g.kw, g.sw, g.pw, 1);
    j.full2x2 = full2x2(&g, &j);
    tide_status st = avg_run(c, &j, backward, g.kh * g.kw);
    tide_host_free(mem, cap);
    return st;
}

tide_status tide_cpu_avg_pool2d(const tide_opcall * c) {
    if (c->out[0]->nelem == 0) return TIDE_OK;
    return avg_common(c, c->in[0]->sizes, false);
}

tide_status tide_cpu_avg_pool2d_backward(const tide_opcall * c) {
    if (c->out[0]->nelem == 0) return TIDE_OK;
    return avg_common(c, c->p.ints + 9, true);
}

static tide_status adaptive_common(const tide_opcall * c, const int64_t * xs, int64_t oh, int64_t ow, bool backward) {
    pjob j;
    pjob_init(&j, xs, oh, ow);
    int64_t * mem;
    size_t cap;
    TIDE_CHECK(axes_alloc(&j.ay, &j.ax, oh, ow, &mem, &cap, tide_op_name(c->op)));
    axis_adaptive(&j.ay, oh, xs[2]);
    axis_adaptive(&j.ax, ow, xs[3]);
    /* a window spans about in/out + 1 positions per axis */
    int64_t taps = (xs[2] / (oh ? oh : 1) + 1) * (xs[3] / (ow ? ow : 1) + 1);
    tide_status st = avg_run(c, &j, backward, taps);
    tide_host_free(mem, cap);
    return st;
}

tide_status tide_cpu_adaptive_avg_pool2d(const tide_opcall * c) {
    if (c->out[0]->nelem == 0) return TIDE_OK;
    return adaptive_common(c, c->in[0]->sizes, c->p.ints[0], c->p.ints[1], false);
}

tide_status tide_cpu_adaptive_avg_pool2d_backward(const tide_opcall * c) {
    if (c->out[0]->nelem == 0) return TIDE_OK;
    return adaptive_common(c, c->p.ints, c->in[0]->sizes[2], c->in[0]->sizes[3], true);
}
