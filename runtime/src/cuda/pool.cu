/*
 * pool.cu - CUDA kernels of 2-d pooling over NCHW planes: max_pool2d (values
 * and argmax indices), avg_pool2d, adaptive_avg_pool2d and their backward
 * ops, giving the CPU kernels' results (ops/cpu/pool.c) to the bit: the same
 * windows (pool.c's axis_pool and axis_adaptive, worked out per output here
 * rather than tabled), the same divisors, the first largest tap and the last
 * NaN of a max window, and every sum added in the CPU's order, so that no
 * result depends on how threads are scheduled. float16/bfloat16 compute in
 * float32. Inputs and results are read and written through their strides; the
 * registry's shape rules have checked the params and sizes.
 *
 * Every kernel is a gather, one thread per result element, except
 * max_pool2d_backward: its op gets no window params, and its indices may name
 * any position of a plane, so a warp per plane scatters the gradients in
 * output order instead (max_grad_kernel).
 */
#include "common.cuh"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

namespace tide_cuda {
namespace {

constexpr int32_t  WARP = 32;
constexpr unsigned FULL = 0xffffffffu;

/* a / b for a >= 0 and b > 0: a 32-bit division where both fit, several times cheaper than 64-bit. */
__host__ __device__ inline int64_t idiv(int64_t a, int64_t b) {
    if (((uint64_t)(a | b) >> 32) == 0) return (int64_t)((uint32_t)a / (uint32_t)b);
    return a / b;
}

/* a / d for a dilation d, which is nearly always 1. */
__host__ __device__ inline int64_t ddiv(int64_t a, int64_t d) { return d == 1 ? a : idiv(a, d); }

/* -- storage and compute types ------------------------------------------------------------ */

/* A stored element as compute type T (float16/bfloat16 widen exactly to float). */
template <typename T, typename S> __host__ __device__ inline T to_c(S v) {
    if constexpr (std::is_same_v<S, __half>) return __half2float(v);
    else if constexpr (std::is_same_v<S, __nv_bfloat16>) return __bfloat162float(v);
    else return (T)v;
}

/* A compute value stored as S, rounded to nearest even as libtide's conversions round. */
template <typename S, typename T> __host__ __device__ inline S from_c(T v) {
    if constexpr (std::is_same_v<S, __half>) return __float2half_rn(v);
    else if constexpr (std::is_same_v<S, __nv_bfloat16>) return __float2bfloat16_rn(v);
    else return (S)v;
}

/* -- windows ------------------------------------------------------------------------------ */

/* One axis of the windows: in and out positions, and either pooling windows
 * (k taps d apart, output i starting at i*s - p) or adaptive ones. */
struct Axis {
    int64_t in, out, k, s, p, d;
    bool    adaptive;
};

/* The taps of a window: input positions lo + t*d for t in [0, cnt); full is
 * its size counting padding (avg_pool2d's divisor with count_include_pad). */
struct Win {
    int64_t lo, cnt, full;
};

/* Window i of axis a, as pool.c's axis_pool (a window of k taps clipped to
 * [0, in), ending at in + p at most for `full`) or axis_adaptive
 * ([floor(i*in/out), ceil((i+1)*in/out))) writes it. */
__host__ __device__ inline Win window(const Axis & a, int64_t i) {
    if (a.adaptive) {
        const int64_t start = idiv(i * a.in, a.out), end = idiv((i + 1) * a.in + a.out - 1, a.out);
        return {start, end - start, end - start};
    }
    const int64_t d = a.d, start = i * a.s - a.p;
    int64_t       t0 = start < 0 ? ddiv(-start + d - 1, d) : 0;
    int64_t       t1 = a.in - 1 - start >= 0 ? ddiv(a.in - 1 - start, d) + 1 : 0;
    if (t1 > a.k) t1 = a.k;
    if (t0 > t1) t0 = t1;
    const int64_t end = start + a.k < a.in + a.p ? start + a.k : a.in + a.p;
    return {start + t0 * d, t1 - t0, end - start};
}

/* Whether window w (of consecutive taps: avg and adaptive windows) holds position x. */
__host__ __device__ inline bool holds(const Win & w, int64_t x) { return x >= w.lo && x - w.lo < w.cnt; }

/* The outputs [*lo, *hi] of axis a whose windows may hold input position x:
 * exactly those for adaptive windows (start <= x iff i < (x+1) out / in,
 * end > x iff i >= x out / in); for pooling windows (d = 1) those whose
 * unclipped window [i*s - p, i*s - p + k) does, a superset of the clipped
 * ones, which the caller checks with holds(). */
__host__ __device__ inline void outputs_of(const Axis & a, int64_t x, int64_t * lo, int64_t * hi) {
    if (a.adaptive) {
        *lo = idiv(x * a.out, a.in);
        *hi = idiv((x + 1) * a.out + a.in - 1, a.in) - 1;
    } else {
        const int64_t first = x + a.p - (a.k - 1);   /* i*s >= first */
        *lo = first <= 0 ? 0 : idiv(first + a.s - 1, a.s);
        *hi = idiv(x + a.p, a.s);
    }
    if (*hi > a.out - 1) *hi = a.out - 1;
}

/* -- the kernels -------------------------------------------------------------------------- */

/* What a kernel needs of a call, passed by value. Strides are in elements. */
struct Job {
    const void *     x;    int64_t xs[4];   /* forward: the input; backward: grad_output */
    void *           y;    int64_t ys[4];   /* the result */
    int64_t *        idx;  int64_t is[4];   /* max_pool2d: its indices; max_pool2d_backward: the given ones */
    void *           acc;  int64_t as[4];   /* max_pool2d_backward: where the sums build, in the compute type */
    tide_devreport * rep;                   /* max_pool2d_backward: an index out of range, in device memory */
    int64_t          c, h, w, oh, ow;       /* channels, the input plane, the output plane */
    Axis             ay, ax;
    int64_t          base;                  /* 1 for ONE_BASED indices */
    int64_t          divisor;               /* avg_pool2d's divisor_override, or 0 */
    bool             include_pad;
    bool             zeroed;                /* max_pool2d_backward: acc was cleared before the kernel */
};

/* max_pool2d's output (oy, ox) of plane (n, ch), as pool.c's max_fwd: the
 * first largest tap in row-major order (the first tap when all are -inf, -1
 * for an empty window), or the last NaN, as PyTorch's. */
template <typename S, typename T>
__host__ __device__ inline void max_one(const Job & j, int64_t n, int64_t ch, int64_t oy, int64_t ox) {
    const Win     wy = window(j.ay, oy), wx = window(j.ax, ox);
    const int64_t dh = j.ay.d, dw = j.ax.d, w = j.w, xs2 = j.xs[2], xs3 = j.xs[3];
    const S *     xp   = (const S *)j.x + n * j.xs[0] + ch * j.xs[1];
    T             best = -(T)INFINITY;
    int64_t       bi = wy.cnt > 0 && wx.cnt > 0 ? wy.lo * w + wx.lo : -1, nan_at = -1;
    for (int64_t ty = 0; ty < wy.cnt; ty++) {
        const int64_t iy  = wy.lo + ty * dh;
        const S *     row = xp + iy * xs2;
        for (int64_t tx = 0; tx < wx.cnt; tx++) {
            const int64_t ix = wx.lo + tx * dw;
            const T       v  = to_c<T>(row[ix * xs3]);
            if (v > best) {
                best = v;
                bi   = iy * w + ix;
            }
            if (v != v) nan_at = iy * w + ix;
        }
    }
    if (nan_at >= 0) {
        best = (T)NAN;
        bi   = nan_at;
    }
    ((S *)j.y)[n * j.ys[0] + ch * j.ys[1] + oy * j.ys[2] + ox * j.ys[3]] = from_c<S>(best);
    if (j.idx) j.idx[n * j.is[0] + ch * j.is[1] + oy * j.is[2] + ox * j.is[3]] = bi + j.base;
}

/* The divisor of the window (wy, wx), as pool.c's avg_divisors: 1 for an empty
 * window (its sum is 0), else divisor_override, the window with its padding,
 * or its taps. Adaptive windows have no override and no padding. */
template <typename T> __host__ __device__ inline T avg_div(const Job & j, const Win & wy, const Win & wx) {
    if (wy.cnt == 0 || wx.cnt == 0) return (T)1;
    if (j.divisor) return (T)j.divisor;
    if (j.include_pad) return (T)(wy.full * wx.full);
    return (T)(wy.cnt * wx.cnt);
}

/* avg_pool2d's and adaptive_avg_pool2d's output (oy, ox): the window's taps
 * summed in row-major order from 0, then divided, as pool.c's avg_fwd. */
template <typename S, typename T>
__host__ __device__ inline void avg_one(const Job & j, int64_t n, int64_t ch, int64_t oy, int64_t ox) {
    const Win     wy = window(j.ay, oy), wx = window(j.ax, ox);
    const int64_t xs2 = j.xs[2], xs3 = j.xs[3];
    const S *     xp = (const S *)j.x + n * j.xs[0] + ch * j.xs[1];
    T             s  = 0;
    for (int64_t iy = wy.lo; iy < wy.lo + wy.cnt; iy++) {
        const S * row = xp + iy * xs2;
        for (int64_t ix = wx.lo; ix < wx.lo + wx.cnt; ix++) s += to_c<T>(row[ix * xs3]);
    }
    ((S *)j.y)[n * j.ys[0] + ch * j.ys[1] + oy * j.ys[2] + ox * j.ys[3]] = from_c<S>(s / avg_div<T>(j, wy, wx));
}

/* The gradient of avg_pool2d's or adaptive_avg_pool2d's input (iy, ix): the
 * share (gy / divisor) of every window holding it. pool.c's avg_bwd scatters
 * the shares of the outputs in row-major order into a zeroed plane; gathering
 * them here in that same order from 0 gives its sums to the bit. */
template <typename S, typename T>
__host__ __device__ inline void avg_grad_one(const Job & j, int64_t n, int64_t ch, int64_t iy, int64_t ix) {
    int64_t oy0, oy1, ox0, ox1;
    outputs_of(j.ay, iy, &oy0, &oy1);
    outputs_of(j.ax, ix, &ox0, &ox1);
    const int64_t xs2 = j.xs[2], xs3 = j.xs[3];
    const S *     gp  = (const S *)j.x + n * j.xs[0] + ch * j.xs[1];
    T             acc = 0;
    for (int64_t oy = oy0; oy <= oy1; oy++) {
        const Win wy = window(j.ay, oy);
        if (!holds(wy, iy)) continue;
        for (int64_t ox = ox0; ox <= ox1; ox++) {
            const Win wx = window(j.ax, ox);
            if (!holds(wx, ix)) continue;
            acc += to_c<T>(gp[oy * xs2 + ox * xs3]) / avg_div<T>(j, wy, wx);
        }
    }
    ((S *)j.y)[n * j.ys[0] + ch * j.ys[1] + iy * j.ys[2] + ix * j.ys[3]] = from_c<S>(acc);
}

enum Kind { K_MAX, K_AVG, K_AVG_GRAD };

/* One thread per result element [n, c, rows, cols] (the output plane forward,
 * the input plane backward), row-major so that neighbouring threads write
 * neighbouring elements. I: the index type. */
template <int K, typename S, typename T, typename I>
__global__ void __launch_bounds__(THREADS) pool_kernel(const Job j, const int64_t total) {
    const I n = (I)total, step = (I)gridDim.x * blockDim.x, ch = (I)j.c;
    const I rows = (I)(K == K_AVG_GRAD ? j.h : j.oh), cols = (I)(K == K_AVG_GRAD ? j.w : j.ow);
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        I       q = i;
        const I x = q % cols;
        q /= cols;
        const I y = q % rows;
        q /= rows;
        const I c = q % ch, b = q / ch;
        if constexpr (K == K_MAX) max_one<S, T>(j, (int64_t)b, (int64_t)c, (int64_t)y, (int64_t)x);
        else if constexpr (K == K_AVG) avg_one<S, T>(j, (int64_t)b, (int64_t)c, (int64_t)y, (int64_t)x);
        else avg_grad_one<S, T>(j, (int64_t)b, (int64_t)c, (int64_t)y, (int64_t)x);
    }
}

/* The offset of element e (row-major) of a plane w wide, in a tensor of strides s. */
__host__ __device__ inline int64_t plane_off(const int64_t * s, int64_t e, int64_t w) {
    const int64_t r = idiv(e, w);
    return r * s[2] + (e - r * w) * s[3];
}

/* Keeps the first index out of range that the work meets, as the call's report. */
__host__ __device__ inline void bad_index(const Job & j, int64_t value) {
#ifdef __CUDA_ARCH__
    if (atomicCAS(&j.rep->code, (int32_t)TIDE_DEVREPORT_NONE, (int32_t)TIDE_DEVREPORT_PLANE) != TIDE_DEVREPORT_NONE)
        return;
#else
    if (j.rep->code != TIDE_DEVREPORT_NONE) return;
    j.rep->code = TIDE_DEVREPORT_PLANE;
#endif
    j.rep->value = value;   /* a position of the flattened [H, W] plane */
    j.rep->bound = j.h;
    j.rep->width = j.w;
}

/* Output o (row-major) of max_pool2d_backward's plane (n, ch): the input
 * position its index names, or -1 for none (-1, or 0 with ONE_BASED: a window
 * that held no input element; an index out of range is reported), and its
 * gradient in *g. */
template <typename S, typename T>
__host__ __device__ inline int64_t grad_target(const Job & j, int64_t n, int64_t ch, int64_t o, T * g) {
    const int64_t oy = idiv(o, j.ow), ox = o - oy * j.ow, plane = j.h * j.w;
    const int64_t raw = j.idx[n * j.is[0] + ch * j.is[1] + oy * j.is[2] + ox * j.is[3]], i = raw - j.base;
    *g = 0;
    if ((uint64_t)i < (uint64_t)plane) {
        *g = to_c<T>(((const S *)j.x)[n * j.xs[0] + ch * j.xs[1] + oy * j.xs[2] + ox * j.xs[3]]);
        return i;
    }
    if (i != -1) bad_index(j, raw);
    return -1;
}

/* max_pool2d_backward: a warp per plane zeroes its sums (unless a memset
 * did), then takes the outputs 32 at a time in row-major order; the lanes
 * naming one position add their gradients to it through the lowest of them,
 * in lane order. Every position thus receives its gradients in output order,
 * as pool.c's max_bwd adds them: the same sums to the bit, whatever the
 * scheduling, with no atomics. Sums build in the compute type: in the result
 * itself, or for float16/bfloat16 in float32 scratch that the warp converts at
 * the end. The cost: a plane's outputs are taken 32 at a time by one warp, so
 * a call of few large planes (a batch of one image) runs on few warps. */
template <typename S, typename T>
__global__ void __launch_bounds__(THREADS) max_grad_kernel(const Job j, const int64_t planes) {
    __shared__ T  vals[THREADS];
    const int32_t lane = (int32_t)threadIdx.x % WARP, first = (int32_t)threadIdx.x - lane;
    const int64_t plane = j.h * j.w, outs = j.oh * j.ow, warps = (int64_t)gridDim.x * (THREADS / WARP);
    /* q is the same for a whole warp, so every lane takes every loop below together */
    for (int64_t q = (int64_t)blockIdx.x * (THREADS / WARP) + threadIdx.x / WARP; q < planes; q += warps) {
        const int64_t n = q / j.c, ch = q - n * j.c;
        T *           acc = (T *)j.acc + n * j.as[0] + ch * j.as[1];
        if (!j.zeroed) {
            for (int64_t e = lane; e < plane; e += WARP) acc[plane_off(j.as, e, j.w)] = (T)0;
            __syncwarp();
        }
        for (int64_t o0 = 0; o0 < outs; o0 += WARP) {
            T             g = 0;
            const int64_t t = o0 + lane < outs ? grad_target<S, T>(j, n, ch, o0 + lane, &g) : -1;
            vals[threadIdx.x] = g;
            const unsigned same = __match_any_sync(FULL, (unsigned long long)t);
            __syncwarp();   /* vals written, and the sums of the outputs before these */
            if (t >= 0 && lane == __ffs(same) - 1) {
                T * p = acc + plane_off(j.as, t, j.w);
                T   s = *p;
                for (unsigned m = same; m; m &= m - 1) s += vals[first + __ffs(m) - 1];
                *p = s;
            }
            __syncwarp();
        }
        if constexpr (!std::is_same_v<S, T>) {
            S * out = (S *)j.y + n * j.ys[0] + ch * j.ys[1];
            for (int64_t e = lane; e < plane; e += WARP)
                out[plane_off(j.ys, e, j.w)] = from_c<S>(acc[plane_off(j.as, e, j.w)]);
        }
    }
}

/* -- launches ----------------------------------------------------------------------------- */

/* f(S(), T()) for the storage type S of the call's input and its compute type
 * T. The registry gives the result the input's dtype and computes float16 and
 * bfloat16 in float32: anything else is refused rather than misread. */
template <typename F> int dispatch(const tide_devcall * c, F && f) {
    const int32_t dt = c->in[0].dtype;
    if (c->out[0].dtype != dt) return no_dtype(c, c->out[0].dtype);
    if (c->compute_dtype != (dt == TIDE_DTYPE_F64 ? TIDE_DTYPE_F64 : TIDE_DTYPE_F32)) return no_dtype(c, c->compute_dtype);
    switch (dt) {
    case TIDE_DTYPE_F32:  return f(float(), float());
    case TIDE_DTYPE_F64:  return f(double(), double());
    case TIDE_DTYPE_F16:  return f(__half(), float());
    case TIDE_DTYPE_BF16: return f(__nv_bfloat16(), float());
    default:              return no_dtype(c, dt);
    }
}

/* A job reading x (forward: the input, backward: grad_output) into y, the
 * input's plane h x w and the output's oh x ow. */
Job job_of(const tide_devtensor & x, const tide_devtensor & y, int64_t c, int64_t h, int64_t w, int64_t oh,
           int64_t ow) {
    Job j;
    memset(&j, 0, sizeof j);
    j.x = x.data;
    j.y = y.data;
    for (int32_t d = 0; d < 4; d++) {
        j.xs[d] = x.strides[d];
        j.ys[d] = y.strides[d];
    }
    j.c = c, j.h = h, j.w = w, j.oh = oh, j.ow = ow;
    return j;
}

/* The axes of max_pool2d (ints: kernel, stride, padding, dilation, ceil_mode) or
 * avg_pool2d (kernel, stride, padding, ceil_mode, count_include_pad,
 * divisor_override). ceil_mode only decides the output's size, which the
 * shape rule has given the output. */
void pool_axes(Job & j, const int64_t * p, bool is_max) {
    j.ay = {j.h, j.oh, p[0], p[2], p[4], is_max ? p[6] : 1, false};
    j.ax = {j.w, j.ow, p[1], p[3], p[5], is_max ? p[7] : 1, false};
    if (!is_max) {
        j.include_pad = p[7] != 0;
        j.divisor     = p[8];
    }
}

void adaptive_axes(Job & j) {
    j.ay = {j.h, j.oh, 0, 0, 0, 1, true};
    j.ax = {j.w, j.ow, 0, 0, 0, 1, true};
}

/* Launches pool_kernel<K> over the n elements of c's result. */
template <int K> int launch(const tide_devcall * c, const Job & j) {
    const int64_t n = c->out[0].nelem;
    return dispatch(c, [&](auto s, auto t) {
        using S         = decltype(s);
        using T         = decltype(t);
        cudaStream_t st = (cudaStream_t)c->stream;
        if (n < SMALL) pool_kernel<K, S, T, uint32_t><<<blocks_for(n), THREADS, 0, st>>>(j, n);
        else pool_kernel<K, S, T, uint64_t><<<blocks_for(n), THREADS, 0, st>>>(j, n);
        return launched(c);
    });
}

/* The jobs of each op, apart from their launches (a host test can run the
 * kernels' bodies on them). */
Job max_pool2d_job(const tide_devcall * c) {
    const tide_devtensor & x = c->in[0], & y = c->out[0];
    Job j = job_of(x, y, x.sizes[1], x.sizes[2], x.sizes[3], y.sizes[2], y.sizes[3]);
    pool_axes(j, c->p.ints, true);
    j.base = (c->p.flags & TIDE_PARAMF_ONE_BASED) ? 1 : 0;
    if (c->n_out > 1) {
        j.idx = (int64_t *)c->out[1].data;
        for (int32_t d = 0; d < 4; d++) j.is[d] = c->out[1].strides[d];
    }
    return j;
}

Job avg_pool2d_job(const tide_devcall * c) {
    const tide_devtensor & x = c->in[0], & y = c->out[0];
    Job j = job_of(x, y, x.sizes[1], x.sizes[2], x.sizes[3], y.sizes[2], y.sizes[3]);
    pool_axes(j, c->p.ints, false);
    return j;
}

/* Backward ops: the input's sizes are the result's (the shape rule made them from ints). */
Job avg_pool2d_backward_job(const tide_devcall * c) {
    const tide_devtensor & gy = c->in[0], & gx = c->out[0];
    Job j = job_of(gy, gx, gx.sizes[1], gx.sizes[2], gx.sizes[3], gy.sizes[2], gy.sizes[3]);
    pool_axes(j, c->p.ints, false);
    return j;
}

Job adaptive_avg_pool2d_job(const tide_devcall * c) {
    const tide_devtensor & x = c->in[0], & y = c->out[0];
    Job j = job_of(x, y, x.sizes[1], x.sizes[2], x.sizes[3], y.sizes[2], y.sizes[3]);
    adaptive_axes(j);
    return j;
}

Job adaptive_avg_pool2d_backward_job(const tide_devcall * c) {
    const tide_devtensor & gy = c->in[0], & gx = c->out[0];
    Job j = job_of(gy, gx, gx.sizes[1], gx.sizes[2], gx.sizes[3], gy.sizes[2], gy.sizes[3]);
    adaptive_axes(j);
    return j;
}

/* max_pool2d_backward's job; acc and rep are the launch's to set. */
Job max_pool2d_backward_job(const tide_devcall * c) {
    const tide_devtensor & gy = c->in[0], & idx = c->in[1], & gx = c->out[0];
    Job j  = job_of(gy, gx, gx.sizes[1], gx.sizes[2], gx.sizes[3], gy.sizes[2], gy.sizes[3]);
    j.idx  = (int64_t *)idx.data;
    j.base = (c->p.flags & TIDE_PARAMF_ONE_BASED) ? 1 : 0;
    for (int32_t d = 0; d < 4; d++) j.is[d] = idx.strides[d];
    return j;
}

/* -- the ops ------------------------------------------------------------------------------ */

int op_max_pool2d(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    if (c->out[0].nelem == 0) return TIDE_DEVAPI_OK;
    return launch<K_MAX>(c, max_pool2d_job(c));
}

int op_avg_pool2d(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    if (c->out[0].nelem == 0) return TIDE_DEVAPI_OK;
    return launch<K_AVG>(c, avg_pool2d_job(c));
}

int op_avg_pool2d_backward(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    if (c->out[0].nelem == 0) return TIDE_DEVAPI_OK;
    return launch<K_AVG_GRAD>(c, avg_pool2d_backward_job(c));
}

int op_adaptive_avg_pool2d(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    if (c->out[0].nelem == 0) return TIDE_DEVAPI_OK;
    return launch<K_AVG>(c, adaptive_avg_pool2d_job(c));
}

int op_adaptive_avg_pool2d_backward(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    if (c->out[0].nelem == 0) return TIDE_DEVAPI_OK;
    return launch<K_AVG_GRAD>(c, adaptive_avg_pool2d_backward_job(c));
}

/* Launches max_grad_kernel with its sums in the result (float32, float64) or
 * in float32 scratch (float16, bfloat16). Dense sums, the usual case, are
 * cleared by one memset, cheaper than the warps' strided stores. */
template <typename S, typename T> int launch_max_grad(const tide_devcall * c, Job j) {
    const tide_devtensor & gx = c->out[0];
    const int64_t          hw = gx.sizes[2] * gx.sizes[3], dense[4] = {gx.sizes[1] * hw, hw, gx.sizes[3], 1};
    cudaStream_t           st = (cudaStream_t)c->stream;
    if constexpr (std::is_same_v<S, T>) {
        j.acc = gx.data;
        for (int32_t d = 0; d < 4; d++) j.as[d] = gx.strides[d];
    } else {
        j.acc = c->scratch(c->scratch_ctx, (size_t)gx.nelem * sizeof(T));
        if (!j.acc) return TIDE_DEVAPI_OOM;
        memcpy(j.as, dense, sizeof dense);
    }
    if (memcmp(j.as, dense, sizeof dense) == 0) {
        if (int rc = checked(c, cudaMemsetAsync(j.acc, 0, (size_t)gx.nelem * sizeof(T), st), "cudaMemsetAsync"))
            return rc;
        j.zeroed = true;
    }
    const int64_t planes = gx.sizes[0] * gx.sizes[1];
    max_grad_kernel<S, T><<<blocks_for(planes * WARP), THREADS, 0, st>>>(j, planes);
    return launched(c);
}

/* An index out of range is only found on the device: the kernel keeps it in
 * device scratch (zeroed first), copied in stream order into the call's
 * report, which libtide raises once the work is done. */
int op_max_pool2d_backward(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    if (c->out[0].nelem == 0) return TIDE_DEVAPI_OK;
    Job              j    = max_pool2d_backward_job(c);
    cudaStream_t     st   = (cudaStream_t)c->stream;
    tide_devreport * host = c->report(c->scratch_ctx);
    if (!host) return TIDE_DEVAPI_OOM;
    j.rep = (tide_devreport *)c->scratch(c->scratch_ctx, sizeof(tide_devreport));
    if (!j.rep) return TIDE_DEVAPI_OOM;
    if (int rc = checked(c, cudaMemsetAsync(j.rep, 0, sizeof(tide_devreport), st), "cudaMemsetAsync")) return rc;
    if (int rc = dispatch(c, [&](auto s, auto t) { return launch_max_grad<decltype(s), decltype(t)>(c, j); }))
        return rc;
    return checked(c, cudaMemcpyAsync(host, j.rep, sizeof(tide_devreport), cudaMemcpyDefault, st),
                   "cudaMemcpyAsync");
}

}   // namespace

const kernel_entry pool_kernels[] = {
    {"max_pool2d", op_max_pool2d},
    {"max_pool2d_backward", op_max_pool2d_backward},
    {"avg_pool2d", op_avg_pool2d},
    {"avg_pool2d_backward", op_avg_pool2d_backward},
    {"adaptive_avg_pool2d", op_adaptive_avg_pool2d},
    {"adaptive_avg_pool2d_backward", op_adaptive_avg_pool2d_backward},
    {nullptr, nullptr},
};

}   // namespace tide_cuda
