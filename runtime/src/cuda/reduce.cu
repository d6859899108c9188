/*
 * reduce.cu - CUDA kernels of the reductions (sum, mean, prod, amax, amin,
 * max_dim, min_dim, argmax, argmin, var, std, logsumexp, all, any) and of the
 * ops along one dim (cumsum, softmax, log_softmax), giving what the CPU
 * kernels give (ops/cpu/reduce.c): each value is converted to the compute
 * dtype first, floats then accumulate in double and integers wrap in uint64,
 * NaN is the extreme of max and min, ties go to the first index. Tensors are
 * read and written through their strides, never gathered into a copy; the
 * registry's rules have checked shapes and dtypes and normalised the dims.
 */
#include "common.cuh"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <type_traits>

namespace tide_cuda {
namespace {

/* Blocks that fill the device (8 resident blocks of THREADS on each of some
 * 130 SMs); a reduction to fewer outputs splits its elements over blockIdx.y
 * to reach it, keeping at least MIN_PER_THREAD elements a thread. */
enum { FILL_BLOCKS = 1024, MIN_PER_THREAD = 32, MAX_SPLITS = 65535 };

constexpr unsigned FULL = 0xffffffffu;

__host__ __device__ inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* -- plans: the input as [outputs] x [elements each output reduces] ------------------------ */

/* `kept` walks the outputs and `red` the elements of one output (both row-major
 * in the input's dim order, coalesced): the input's strides over each, the
 * outputs' over kept, and for the scans the output's over red as well. */
struct Plan {
    Shape   kept, red;
    Operand k[3];   /* over kept: the input, out[0], out[1] */
    Operand r[2];   /* over red: the input, out[0] (scans only) */
};

/* x reduced (or scanned) over the dims flagged in `red` into o0 (and o1), whose
 * dims are x's kept ones, or all of x's with the reduced ones of size 1. */
Plan make_plan(const tide_devtensor & x, const bool * red, const tide_devtensor * o0, const tide_devtensor * o1,
               bool scan) {
    Plan                   p{};
    const tide_devtensor * ts[3] = {&x, o0, o1};
    for (int32_t i = 0; i < 3; i++)
        if (ts[i]) {
            p.k[i].data  = ts[i]->data;
            p.k[i].dtype = ts[i]->dtype;
        }
    p.r[0]       = p.k[0];
    p.r[1]       = p.k[1];
    p.kept.nelem = p.red.nelem = 1;
    int32_t nk = 0, nr = 0;
    for (int32_t d = 0; d < x.ndim; d++) {
        if (red[d]) {
            p.red.sizes[nr]    = x.sizes[d];
            p.r[0].strides[nr] = x.strides[d];
            if (scan) p.r[1].strides[nr] = o0->strides[d];
            p.red.nelem *= x.sizes[d];
            nr++;
        } else {
            p.kept.sizes[nk] = x.sizes[d];
            for (int32_t i = 0; i < 3; i++)
                if (ts[i]) p.k[i].strides[nk] = ts[i]->strides[ts[i]->ndim == x.ndim ? d : nk];
            p.kept.nelem *= x.sizes[d];
            nk++;
        }
    }
    p.kept.ndim = nk;
    p.red.ndim  = nr;
    coalesce(p.kept, p.k, 3);
    /* a reduction's output has no stride along what it reduces: only the input's decides */
    coalesce(p.red, p.r, scan ? 2 : 1);
    return p;
}

/* p writing one double per output, dense in output order, into buf instead of
 * out[0]: the first pass of var, std and logsumexp. */
Plan to_buffer(Plan p, double * buf) {
    p.k[1].data  = buf;
    p.k[1].dtype = TIDE_DTYPE_F64;
    int64_t s    = 1;
    for (int32_t d = p.kept.ndim - 1; d >= 0; d--) {
        p.k[1].strides[d] = s;
        s *= p.kept.sizes[d];
    }
    return p;
}

/* i % size, with i /= size; 32-bit division where both fit, as it is several
 * times cheaper than 64-bit. */
__device__ inline uint64_t divmod(uint64_t & i, uint64_t size) {
    if (((i | size) >> 32) == 0) {
        uint32_t a = (uint32_t)i, b = (uint32_t)size, q = a / b;
        i = q;
        return a - q * b;
    }
    uint64_t q = i / size, r = i - q * size;
    i = q;
    return r;
}

/* The offsets of row-major element i of `s` in N operands. */
template <int N> __device__ inline void offs(const Shape & s, const Operand * ops, uint64_t i, int64_t * off) {
    for (int32_t k = 0; k < N; k++) off[k] = 0;
    for (int32_t d = s.ndim - 1; d >= 0; d--) {
        uint64_t idx = d ? divmod(i, (uint64_t)s.sizes[d]) : i;
        for (int32_t k = 0; k < N; k++) off[k] += (int64_t)idx * ops[k].strides[d];
    }
}

/* The input's offset of reduced element r (from its output's offset). */
__device__ inline int64_t red_off(const Plan & p, uint64_t r) {
    int64_t off;
    offs<1>(p.red, p.r, r, &off);
    return off;
}

/* -- values ------------------------------------------------------------------------------- */

/* Element `off` of x as T. `logical` (compute dtype bool, input not bool) reads
 * nonzero as 1, the CPU's conversion, where load_as<uint8_t> would truncate 0.5 to 0. */
template <typename T> __device__ inline T load_c(const Operand & x, int64_t off, bool logical) {
    if constexpr (std::is_same<T, uint8_t>::value)
        if (logical) return (T)(load_as<double>(x.data, x.dtype, off) != 0);
    return load_as<T>(x.data, x.dtype, off);
}

template <typename T> __host__ __device__ constexpr int32_t dtype_of() {
    return std::is_same<T, float>::value     ? TIDE_DTYPE_F32
           : std::is_same<T, double>::value  ? TIDE_DTYPE_F64
           : std::is_same<T, int32_t>::value ? TIDE_DTYPE_I32
           : std::is_same<T, int64_t>::value ? TIDE_DTYPE_I64
                                             : TIDE_DTYPE_U8;
}

/* Loaders of input elements as T: Direct where the input is already of T, which
 * spares the per-element switch of load_as, Any for every other dtype. A
 * kernel's body is instantiated for both and picks one per launch. */
template <typename T> struct Direct {
    const T * x;
    __device__ T operator()(int64_t off) const { return x[off]; }
};
template <typename T> struct Any {
    Operand x;
    bool    logical;
    __device__ T operator()(int64_t off) const { return load_c<T>(x, off, logical); }
};

template <typename T> __device__ inline bool is_direct(const Operand & x, bool logical) {
    return x.dtype == dtype_of<T>() && !logical;
}

template <typename T> __device__ inline void store_to(const Operand & o, int64_t off, T v) {
    store_as<T>(const_cast<void *>(o.data), o.dtype, off, v);
}

/* Sums and products of floats accumulate in double, of integers in uint64, as on the CPU. */
template <typename T>
using acc_of = typename std::conditional<std::is_floating_point<T>::value, double, uint64_t>::type;

template <typename T> __device__ inline acc_of<T> to_acc(T v) {
    if constexpr (std::is_floating_point<T>::value) return (double)v;
    else return (uint64_t)(int64_t)v;
}

__device__ inline bool is_nan(float v) { return isnan(v); }
__device__ inline bool is_nan(double v) { return isnan(v); }
template <typename T> __device__ inline bool is_nan(T) { return false; }

__device__ inline void limits(float & lo, float & hi) { lo = -INFINITY, hi = INFINITY; }
__device__ inline void limits(double & lo, double & hi) { lo = -INFINITY, hi = INFINITY; }
__device__ inline void limits(int32_t & lo, int32_t & hi) { lo = INT32_MIN, hi = INT32_MAX; }
__device__ inline void limits(int64_t & lo, int64_t & hi) { lo = INT64_MIN, hi = INT64_MAX; }
__device__ inline void limits(uint8_t & lo, uint8_t & hi) { lo = 0, hi = UINT8_MAX; }

/* The value every element beats or ties in a max (or min) reduction. */
template <typename T> __device__ inline T worst(bool max) {
    T lo, hi;
    limits(lo, hi);
    return max ? lo : hi;
}

__device__ inline float  exp_t(float v) { return expf(v); }
__device__ inline double exp_t(double v) { return exp(v); }

/* -- reduction ops ------------------------------------------------------------------------ */
/*
 * An op reads its input as In (`logical`: nonzero as 1) into an accumulator
 * Acc: identity(); element(v, r, o), the accumulator of value v (reduced
 * element r of output o); combine(a, b) with a's elements before b's; and
 * store(a, plan, o, offs), which writes output o (offs: its offsets over
 * kept). Combining in a fixed tree order keeps results the same run to run.
 */

/* sum, prod, mean (div: the count), and var's mean (raw: the double itself). */
template <typename T> struct SumOp {
    using In  = T;
    using Acc = acc_of<T>;
    bool    mul;
    bool    logical;    /* load nonzero as 1 */
    bool    to_bool;    /* compute dtype bool: nonzero totals are true, 256 included */
    bool    raw;
    int64_t div;
    __device__ Acc identity() const { return mul ? (Acc)1 : (Acc)0; }
    __device__ Acc element(T v, int64_t, int64_t) const { return to_acc(v); }
    __device__ Acc combine(Acc a, Acc b) const { return mul ? a * b : a + b; }
    __device__ void store(Acc a, const Plan & p, int64_t, const int64_t * off) const {
        if constexpr (std::is_floating_point<T>::value) {
            double v = div ? a / (double)div : a;
            if (raw) store_to<double>(p.k[1], off[1], v);
            else store_to<T>(p.k[1], off[1], (T)v);
        } else {
            store_to<T>(p.k[1], off[1], to_bool ? (T)(a != 0) : (T)a);
        }
    }
};

/* amax, amin; all and any as the min and max of (x != 0). NaN, once met, stays. */
template <typename T> struct ExtOp {
    using In  = T;
    using Acc = T;
    bool max;
    bool logical;
    __device__ Acc  identity() const { return worst<T>(max); }
    __device__ Acc  element(T v, int64_t, int64_t) const { return v; }
    __device__ Acc  combine(Acc a, Acc b) const { return (max ? b > a : b < a) || is_nan(b) ? b : a; }
    __device__ void store(Acc a, const Plan & p, int64_t, const int64_t * off) const { store_to<T>(p.k[1], off[1], a); }
};

template <typename T> struct ArgVal {
    T       v;
    int64_t i;
};

/* argmax, argmin, max_dim, min_dim: the first index of the extreme, NaN the
 * extreme of all (the CPU finds the extreme, then its first occurrence). */
template <typename T> struct ArgOp {
    using In  = T;
    using Acc = ArgVal<T>;
    bool    max;
    bool    logical;
    bool    vals;   /* values into out[0] and indices into out[1] (max_dim), else indices into out[0] */
    int64_t base;   /* 1 for ONE_BASED indices */
    __device__ Acc identity() const { return {worst<T>(max), INT64_MAX}; }
    __device__ Acc element(T v, int64_t r, int64_t) const { return {v, r}; }
    __device__ Acc combine(Acc a, Acc b) const {
        bool na = is_nan(a.v), nb = is_nan(b.v), take;
        if (na || nb) take = nb && (!na || b.i < a.i);
        else take = (max ? b.v > a.v : b.v < a.v) || (b.v == a.v && b.i < a.i);
        return take ? b : a;
    }
    __device__ void store(Acc a, const Plan & p, int64_t, const int64_t * off) const {
        if (vals) {
            store_to<T>(p.k[1], off[1], a.v);
            store_to<int64_t>(p.k[2], off[2], a.i + base);
        } else {
            store_to<int64_t>(p.k[1], off[1], a.i + base);
        }
    }
};

enum { DEV_VAR, DEV_STD, DEV_LSE };

/* The second pass of var and std (squared deviations from the mean in aux) and
 * of logsumexp (exp of the distance to the max in aux), as the CPU's two passes. */
template <typename T> struct DevOp {
    using In  = T;
    using Acc = double;
    static constexpr bool logical = false;
    int32_t        kind;
    double         corr;
    int64_t        n;
    const double * aux;
    /* as the CPU and PyTorch: a row of -inf gives -inf, one holding +inf gives inf */
    __device__ static double shift(double m) { return isinf(m) ? 0 : m; }
    __device__ Acc identity() const { return 0; }
    __device__ Acc element(T x, int64_t, int64_t o) const {
        double v = (double)x;
        if (kind == DEV_LSE) return exp(v - shift(aux[o]));
        double d = v - aux[o];
        return d * d;
    }
    __device__ Acc  combine(Acc a, Acc b) const { return a + b; }
    __device__ void store(Acc a, const Plan & p, int64_t o, const int64_t * off) const {
        double v;
        if (kind == DEV_LSE) {
            v = log(a) + shift(aux[o]);
        } else {
            double div = (double)n > corr ? (double)n - corr : 0;   /* n <= correction: nan or inf */
            v = a / div;
            if (kind == DEV_STD) v = sqrt(v);
        }
        store_to<T>(p.k[1], off[1], (T)v);
    }
};

struct AddOp {
    using Acc = double;
    __device__ Acc identity() const { return 0; }
    __device__ Acc combine(Acc a, Acc b) const { return a + b; }
};

/* -- one block, many outputs -------------------------------------------------------------- */

/* How a block's threads share its outputs: by rows (threadIdx.x walks an
 * output's elements, y picks among blockDim.y outputs) or, where outputs lie
 * closer together in memory than an output's elements (a reduction over a
 * leading dim), by columns (x picks the output, y walks its elements), so that
 * a warp reads neighbouring memory either way. blockIdx.y takes `chunk`
 * elements of each output. */
struct Layout {
    bool    cols;
    int32_t splits;
    int64_t chunk;
};

__device__ inline int64_t output_of(const Layout & l) {
    return l.cols ? (int64_t)blockIdx.x * blockDim.x + threadIdx.x : (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
}

template <class A> __device__ inline A shfl_down(A a, int32_t d) {
    constexpr int W = (sizeof(A) + 3) / 4;
    uint32_t      w[W] = {};
    memcpy(w, &a, sizeof(A));
    for (int32_t i = 0; i < W; i++) w[i] = __shfl_down_sync(FULL, w[i], d);
    memcpy(&a, w, sizeof(A));
    return a;
}

/* Combines the accumulators of the threads sharing an output, in their order.
 * The result is in the thread of the output's first element (in all its
 * threads with bcast). Every thread of the block must call it. sh: THREADS
 * accumulators of shared memory. */
template <class Op>
__device__ typename Op::Acc block_reduce(const Op & op, typename Op::Acc a, bool cols, typename Op::Acc * sh,
                                         bool bcast) {
    const int32_t tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
    if (!cols) {
        /* bx is a power of two: below 32 an output's threads are an aligned part of a warp */
        for (int32_t d = (bx < 32 ? bx : 32) / 2; d > 0; d /= 2) a = op.combine(a, shfl_down(a, d));
        if (bx > 32) {
            const int32_t nw = bx / 32;
            if (tx % 32 == 0) sh[ty * nw + tx / 32] = a;
            __syncthreads();
            if (tx < 32) {   /* the output's first warp, whole */
                a = tx < nw ? sh[ty * nw + tx] : op.identity();
                for (int32_t d = nw / 2; d > 0; d /= 2) a = op.combine(a, shfl_down(a, d));
            }
        }
        if (bcast) {
            __syncthreads();
            if (tx == 0) sh[ty] = a;
            __syncthreads();
            a = sh[ty];
            __syncthreads();
        }
        return a;
    }
    sh[ty * bx + tx] = a;
    __syncthreads();
    for (int32_t s = by / 2; s > 0; s /= 2) {
        if (ty < s) {
            a                = op.combine(a, sh[(ty + s) * bx + tx]);
            sh[ty * bx + tx] = a;
        }
        __syncthreads();
    }
    if (bcast) {
        a = sh[tx];
        __syncthreads();
    }
    return a;
}

/* The accumulator of one thread's elements of output o (input offset `base`):
 * r0 + rt, then every nr-th below r1. */
template <class Op, class Ld>
__device__ typename Op::Acc accumulate(const Op & op, const Plan & p, const Ld & ld, int64_t base, int64_t o,
                                       int64_t r0, int64_t r1, int32_t rt, int32_t nr) {
    using In           = typename Op::In;
    typename Op::Acc a = op.identity();
    int64_t          r = r0 + rt;
    if (p.red.ndim > 1) {
        for (; r < r1; r += nr) a = op.combine(a, op.element(ld(base + red_off(p, r)), r, o));
        return a;
    }
    /* four loads in flight, combined in order */
    const int64_t st = p.r[0].strides[0];
    for (; r + 3 * nr < r1; r += 4 * nr) {
        In v0 = ld(base + r * st), v1 = ld(base + (r + nr) * st);
        In v2 = ld(base + (r + 2 * nr) * st), v3 = ld(base + (r + 3 * nr) * st);
        a = op.combine(a, op.element(v0, r, o));
        a = op.combine(a, op.element(v1, r + nr, o));
        a = op.combine(a, op.element(v2, r + 2 * nr, o));
        a = op.combine(a, op.element(v3, r + 3 * nr, o));
    }
    for (; r < r1; r += nr) a = op.combine(a, op.element(ld(base + r * st), r, o));
    return a;
}

/* Reduces elements [blockIdx.y * chunk, + chunk) of each of the block's
 * outputs: into the outputs when there is one split, else into part[split][output]. */
template <class Op>
__global__ void __launch_bounds__(THREADS) reduce_kernel(const Op op, const Plan p, const Layout l,
                                                         typename Op::Acc * part) {
    using In  = typename Op::In;
    using Acc = typename Op::Acc;
    __shared__ __align__(16) unsigned char smem[THREADS * sizeof(Acc)];
    const int64_t o  = output_of(l);
    const int32_t rt = l.cols ? threadIdx.y : threadIdx.x, nr = l.cols ? blockDim.y : blockDim.x;
    const int64_t r0 = (int64_t)blockIdx.y * l.chunk, r1 = min64(p.red.nelem, r0 + l.chunk);
    const bool    valid  = o < p.kept.nelem;
    int64_t       off[3] = {0, 0, 0};
    Acc           a      = op.identity();
    if (valid) {
        offs<3>(p.kept, p.k, o, off);
        if (is_direct<In>(p.r[0], op.logical))
            a = accumulate(op, p, Direct<In>{(const In *)p.r[0].data}, off[0], o, r0, r1, rt, nr);
        else a = accumulate(op, p, Any<In>{p.r[0], op.logical}, off[0], o, r0, r1, rt, nr);
    }
    a = block_reduce(op, a, l.cols, reinterpret_cast<Acc *>(smem), false);
    if (rt != 0 || !valid) return;
    if (l.splits == 1) op.store(a, p, o, off);
    else part[(int64_t)blockIdx.y * p.kept.nelem + o] = a;
}

/* Combines the splits of each output in order and stores it. */
template <class Op>
__global__ void __launch_bounds__(THREADS) finish_kernel(const Op op, const Plan p, const int32_t splits,
                                                         const typename Op::Acc * part) {
    const int64_t n = p.kept.nelem;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < n; o += (int64_t)gridDim.x * blockDim.x) {
        typename Op::Acc a = part[o];
        for (int32_t k = 1; k < splits; k++) a = op.combine(a, part[k * n + o]);
        int64_t off[3];
        offs<3>(p.kept, p.k, o, off);
        op.store(a, p, o, off);
    }
}

/* The result of reducing nothing: 0 for sum and any, 1 for prod and all, nan for mean, var and std, -inf for logsumexp. */
__global__ void __launch_bounds__(THREADS) fill_kernel(const Plan p, const double v) {
    const int64_t n = p.kept.nelem;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < n; o += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        offs<3>(p.kept, p.k, o, off);
        store_to<double>(p.k[1], off[1], v);
    }
}

/* -- launching ---------------------------------------------------------------------------- */

struct Launch {
    Layout  l;
    dim3    block;
    int64_t gx;   /* blocks along x */
};

int32_t pow2_at_least(int64_t n, int32_t cap) {
    int32_t p = 1;
    while (p < n && p < cap) p *= 2;
    return p;
}

/* Rows or columns (see Layout), with THREADS threads a block: as many of them
 * on an output's elements as it has, up to all, the rest on more outputs. */
Launch shape_of(const Plan & p) {
    Launch        g{};
    const int64_t n = p.kept.nelem, R = p.red.nelem;
    const int64_t sk = p.kept.ndim ? llabs(p.k[0].strides[p.kept.ndim - 1]) : 0;
    const int64_t sr = p.red.ndim ? llabs(p.r[0].strides[p.red.ndim - 1]) : 0;
    g.l.cols         = p.red.ndim == 0 || (sk > 0 && sk < sr);   /* sk 0: outputs broadcast, no help */
    int32_t bx, by;
    if (g.l.cols) {
        bx = pow2_at_least(n, 32);
        by = pow2_at_least(R, THREADS / bx);
        bx = THREADS / by;   /* short columns: more outputs a block */
    } else {
        bx = pow2_at_least(R, THREADS);
        by = THREADS / bx;
    }
    g.block    = dim3(bx, by);
    int64_t pb = g.l.cols ? bx : by;
    g.gx       = (n + pb - 1) / pb;
    g.l.splits = 1;
    g.l.chunk  = R;
    return g;
}

/* Splits R elements an output over blockIdx.y when the outputs give too few
 * blocks, `threads` of a block on each output. R > 0. */
void split(Launch & g, int64_t R, int64_t threads) {
    int64_t s = 1;
    if (g.gx < FILL_BLOCKS) {
        s            = (FILL_BLOCKS + g.gx - 1) / g.gx;
        int64_t most = R / (threads * MIN_PER_THREAD);
        if (s > most) s = most;
        if (s > MAX_SPLITS) s = MAX_SPLITS;
        if (s < 1) s = 1;
    }
    g.l.chunk  = (R + s - 1) / s;
    g.l.splits = (int32_t)((R + g.l.chunk - 1) / g.l.chunk);
}

int too_big(const tide_devcall * c, int64_t gx) {
    return set_error(TIDE_DEVAPI_ERROR, "the CUDA %s kernel cannot launch %lld blocks", c->op, (long long)gx);
}

template <class Op> int run_reduce(const tide_devcall * c, const Op & op, const Plan & p) {
    using Acc = typename Op::Acc;
    Launch g  = shape_of(p);
    split(g, p.red.nelem, g.l.cols ? g.block.y : g.block.x);
    if (g.gx > INT32_MAX) return too_big(c, g.gx);
    Acc * part = nullptr;
    if (g.l.splits > 1) {
        part = (Acc *)c->scratch(c->scratch_ctx, (size_t)g.l.splits * (size_t)p.kept.nelem * sizeof(Acc));
        if (!part) return TIDE_DEVAPI_OOM;
    }
    cudaStream_t s = (cudaStream_t)c->stream;
    reduce_kernel<Op><<<dim3((unsigned)g.gx, (unsigned)g.l.splits), g.block, 0, s>>>(op, p, g.l, part);
    if (part) finish_kernel<Op><<<blocks_for(p.kept.nelem), THREADS, 0, s>>>(op, p, g.l.splits, part);
    return TIDE_DEVAPI_OK;
}

template <typename F> bool dispatch_float(int32_t dt, F && f) {
    switch (dt) {
    case TIDE_DTYPE_F32: f(float()); return true;
    case TIDE_DTYPE_F64: f(double()); return true;
    default:             return false;
    }
}

/* -- the reductions ----------------------------------------------------------------------- */

enum Kind { K_SUM, K_MEAN, K_PROD, K_AMAX, K_AMIN, K_ALL, K_ANY, K_MAX_DIM, K_MIN_DIM, K_ARGMAX, K_ARGMIN, K_VAR, K_STD, K_LSE };

int reduce(const tide_devcall * c, Kind kind) {
    if (int rc = use(c->dev)) return rc;
    const tide_devtensor & x = c->in[0];
    bool                   red[TIDE_MAX_DIMS] = {};
    int64_t                R = 1;
    for (int32_t i = 0; i < c->p.n_ints; i++) {
        int64_t d = c->p.ints[i];
        if (d < 0 || d >= x.ndim) continue;
        red[d] = true;
        R *= x.sizes[d];
    }
    const bool arg = kind >= K_MAX_DIM && kind <= K_ARGMIN;
    /* before the empty-output check, as on the CPU */
    if (R == 0 && (arg || kind == K_AMAX || kind == K_AMIN))
        return set_error(TIDE_DEVAPI_ERROR, "%s: cannot reduce over an empty dimension of size 0", c->op);
    if (c->out[0].nelem == 0) return TIDE_DEVAPI_OK;
    const Plan   p = make_plan(x, red, &c->out[0], c->n_out > 1 ? &c->out[1] : nullptr, false);
    cudaStream_t s = (cudaStream_t)c->stream;
    if (R == 0) {
        double v = kind == K_PROD || kind == K_ALL  ? 1.0
                   : kind == K_SUM || kind == K_ANY ? 0.0
                   : kind == K_LSE                  ? -INFINITY
                                                    : NAN;
        fill_kernel<<<blocks_for(p.kept.nelem), THREADS, 0, s>>>(p, v);
        return launched(c);
    }
    const int32_t ct      = c->compute_dtype;
    const bool    logical = ct == TIDE_DTYPE_BOOL && x.dtype != TIDE_DTYPE_BOOL;
    int           rc      = TIDE_DEVAPI_OK;
    bool          have    = false;
    switch (kind) {
    case K_SUM:
    case K_MEAN:
    case K_PROD: {
        auto f = [&](auto t) {
            SumOp<decltype(t)> op{kind == K_PROD, logical, ct == TIDE_DTYPE_BOOL, false, kind == K_MEAN ? R : 0};
            rc = run_reduce(c, op, p);
        };
        have = kind == K_MEAN ? dispatch_float(ct, f) : dispatch_compute(ct, f);
        break;
    }
    case K_AMAX:
    case K_AMIN:
    case K_ALL:
    case K_ANY:
        have = dispatch_compute(ct, [&](auto t) {
            rc = run_reduce(c, ExtOp<decltype(t)>{kind == K_AMAX || kind == K_ANY, logical}, p);
        });
        break;
    case K_MAX_DIM:
    case K_MIN_DIM:
    case K_ARGMAX:
    case K_ARGMIN: {
        const bool    vals = kind == K_MAX_DIM || kind == K_MIN_DIM;
        const int64_t base = (c->p.flags & TIDE_PARAMF_ONE_BASED) ? 1 : 0;
        have = dispatch_compute(ct, [&](auto t) {
            ArgOp<decltype(t)> op{kind == K_MAX_DIM || kind == K_ARGMAX, logical, vals, base};
            rc = run_reduce(c, op, p);
        });
        break;
    }
    case K_VAR:
    case K_STD:
    case K_LSE: {
        double * buf = (double *)c->scratch(c->scratch_ctx, (size_t)p.kept.nelem * sizeof(double));
        if (!buf) return TIDE_DEVAPI_OOM;
        const int32_t dk = kind == K_VAR ? DEV_VAR : kind == K_STD ? DEV_STD : DEV_LSE;
        have = dispatch_float(ct, [&](auto t) {
            using T = decltype(t);
            if (dk == DEV_LSE) rc = run_reduce(c, ExtOp<T>{true, false}, to_buffer(p, buf));
            else rc = run_reduce(c, SumOp<T>{false, false, false, true, R}, to_buffer(p, buf));
            if (rc == TIDE_DEVAPI_OK) rc = run_reduce(c, DevOp<T>{dk, c->p.scalars[0], R, buf}, p);
        });
        break;
    }
    }
    if (!have) return no_dtype(c, ct);
    if (rc != TIDE_DEVAPI_OK) return rc;
    return launched(c);
}

/* -- scans along one dim ------------------------------------------------------------------ */

/* cumsum by rows: blockDim.x threads scan an output's row `blockDim.x`
 * elements at a time, carrying the total; a split row starts from the sums of
 * the splits before it (part, from reduce_kernel). */
/* A running count as stored: for a bool cumsum, whether any element so far
 * is true (the CPU's too), not the count modulo 256. */
template <typename T> __device__ inline T scanned(acc_of<T> count, bool any) { return any ? (T)(count != 0) : (T)count; }

template <typename T, class Ld>
__device__ void cumsum_row(const Plan & p, const Layout & l, const Ld & ld, const acc_of<T> * part, bool any) {
    using Acc = acc_of<T>;
    __shared__ Acc warp_sums[THREADS / 32];
    const int32_t  tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x;
    const int64_t  n = p.kept.nelem, o = output_of(l);
    const bool     valid = o < n;
    int64_t        off[3] = {0, 0, 0};
    Acc            carry  = 0;
    if (valid) {
        offs<3>(p.kept, p.k, o, off);
        if (part)
            for (uint32_t k = 0; k < blockIdx.y; k++) carry += part[k * n + o];
    }
    const int64_t r0 = (int64_t)blockIdx.y * l.chunk, r1 = min64(p.red.nelem, r0 + l.chunk);
    const int64_t sx = p.r[0].strides[0], so = p.r[1].strides[0];
    const int32_t w = bx < 32 ? bx : 32, lane = tx % w;
    for (int64_t b = r0; b < r1; b += bx) {
        const int64_t r  = b + tx;
        const bool    in = valid && r < r1;
        Acc           v  = in ? to_acc(ld(off[0] + r * sx)) : (Acc)0;
        for (int32_t d = 1; d < w; d *= 2) {
            Acc u = __shfl_up_sync(FULL, v, d, w);
            if (lane >= d) v += u;
        }
        Acc total;
        if (bx > 32) {
            const int32_t nw = bx / 32, wi = tx / 32;
            if (lane == 31) warp_sums[ty * nw + wi] = v;
            __syncthreads();
            Acc before = 0;
            total      = 0;
            for (int32_t j = 0; j < nw; j++) {
                Acc t = warp_sums[ty * nw + j];
                if (j < wi) before += t;
                total += t;
            }
            v += before;
            __syncthreads();
        } else {
            total = __shfl_sync(FULL, v, w - 1, w);
        }
        if (in) store_to<T>(p.k[1], off[1] + r * so, scanned<T>(carry + v, any));
        carry += total;
    }
}

template <typename T>
__global__ void __launch_bounds__(THREADS) cumsum_rows(const Plan p, const Layout l, const bool logical,
                                                       const acc_of<T> * part, const bool any) {
    if (is_direct<T>(p.r[0], logical)) cumsum_row<T>(p, l, Direct<T>{(const T *)p.r[0].data}, part, any);
    else cumsum_row<T>(p, l, Any<T>{p.r[0], logical}, part, any);
}

/* cumsum by columns: a thread scans its output's elements in order (a scan
 * over a leading dim, where neighbouring threads read neighbouring memory). */
template <typename T, class Ld> __device__ void cumsum_col(const Plan & p, const Layout & l, const Ld & ld,
                                                           const acc_of<T> * part, bool any) {
    using Acc       = acc_of<T>;
    const int64_t n = p.kept.nelem, o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= n) return;
    int64_t off[3];
    offs<3>(p.kept, p.k, o, off);
    Acc carry = 0;
    if (part)
        for (uint32_t k = 0; k < blockIdx.y; k++) carry += part[k * n + o];
    const int64_t r0 = (int64_t)blockIdx.y * l.chunk, r1 = min64(p.red.nelem, r0 + l.chunk);
    const int64_t sx = p.r[0].strides[0], so = p.r[1].strides[0];
    for (int64_t r = r0; r < r1; r++) {
        carry += to_acc(ld(off[0] + r * sx));
        store_to<T>(p.k[1], off[1] + r * so, scanned<T>(carry, any));
    }
}

template <typename T>
__global__ void __launch_bounds__(THREADS) cumsum_cols(const Plan p, const Layout l, const bool logical,
                                                       const acc_of<T> * part, const bool any) {
    if (is_direct<T>(p.r[0], logical)) cumsum_col<T>(p, l, Direct<T>{(const T *)p.r[0].data}, part, any);
    else cumsum_col<T>(p, l, Any<T>{p.r[0], logical}, part, any);
}

/* Integer sums wrap as the CPU's do (in the compute dtype's width); a bool
 * cumsum stores whether any element so far is true. Floats scan in double: the rounding can differ
 * from the CPU's sequential sum in the last bit of a float64 result. */
template <typename T> int run_cumsum(const tide_devcall * c, const Plan & p, bool logical) {
    using Acc       = acc_of<T>;
    const Launch g  = shape_of(p);
    Launch       sg = g;   /* the scan's grid: a thread per output by columns */
    if (g.l.cols) {
        sg.block = dim3(THREADS);
        sg.gx    = (p.kept.nelem + THREADS - 1) / THREADS;
    }
    split(sg, p.red.nelem, g.l.cols ? 1 : sg.block.x);
    if (g.gx > INT32_MAX || sg.gx > INT32_MAX) return too_big(c, g.gx > sg.gx ? g.gx : sg.gx);
    cudaStream_t s    = (cudaStream_t)c->stream;
    Acc *        part = nullptr;
    if (sg.l.splits > 1) {
        part = (Acc *)c->scratch(c->scratch_ctx, (size_t)sg.l.splits * (size_t)p.kept.nelem * sizeof(Acc));
        if (!part) return TIDE_DEVAPI_OOM;
        Layout l = g.l;
        l.chunk  = sg.l.chunk;
        l.splits = sg.l.splits;
        reduce_kernel<SumOp<T>><<<dim3((unsigned)g.gx, (unsigned)l.splits), g.block, 0, s>>>(
            SumOp<T>{false, logical, false, false, 0}, p, l, part);
    }
    dim3 grid((unsigned)sg.gx, (unsigned)sg.l.splits);
    const bool any = c->compute_dtype == TIDE_DTYPE_BOOL;
    if (g.l.cols) cumsum_cols<T><<<grid, sg.block, 0, s>>>(p, sg.l, logical, part, any);
    else cumsum_rows<T><<<grid, sg.block, 0, s>>>(p, sg.l, logical, part, any);
    return TIDE_DEVAPI_OK;
}

/* softmax and log_softmax of each output's row, as the CPU computes them: the
 * max m in T, e = exp(x - m) in T summed in double, then e / sum (or x - m -
 * log(sum)) rounded once to T. A row's threads stay in one block, so the
 * second and third reads of a row come from cache. */
template <typename T, class Ld> __device__ void softmax_row(const Plan & p, const Layout & l, bool logs, const Ld & ld) {
    __shared__ __align__(16) unsigned char smem[THREADS * sizeof(double)];
    const int64_t o  = output_of(l);
    const int32_t rt = l.cols ? threadIdx.y : threadIdx.x, nr = l.cols ? blockDim.y : blockDim.x;
    const bool    valid  = o < p.kept.nelem;
    int64_t       off[3] = {0, 0, 0};
    if (valid) offs<3>(p.kept, p.k, o, off);
    const int64_t  L = p.red.nelem, sx = p.r[0].strides[0], so = p.r[1].strides[0];
    const ExtOp<T> mx{true, false};
    T              m = mx.identity();
    if (valid)
        for (int64_t r = rt; r < L; r += nr) m = mx.combine(m, ld(off[0] + r * sx));
    m        = block_reduce(mx, m, l.cols, reinterpret_cast<T *>(smem), true);
    double s = 0;
    if (valid)
        for (int64_t r = rt; r < L; r += nr) s += (double)exp_t((T)(ld(off[0] + r * sx) - m));
    s = block_reduce(AddOp{}, s, l.cols, reinterpret_cast<double *>(smem), true);
    s = logs ? log(s) : 1.0 / s;
    if (valid)
        for (int64_t r = rt; r < L; r += nr) {
            T d = (T)(ld(off[0] + r * sx) - m);
            T y = logs ? (T)((double)d - s) : (T)((double)exp_t(d) * s);
            store_to<T>(p.k[1], off[1] + r * so, y);
        }
}

template <typename T>
__global__ void __launch_bounds__(THREADS) softmax_kernel(const Plan p, const Layout l, const bool logs) {
    if (is_direct<T>(p.r[0], false)) softmax_row<T>(p, l, logs, Direct<T>{(const T *)p.r[0].data});
    else softmax_row<T>(p, l, logs, Any<T>{p.r[0], false});
}

enum Scan { S_CUMSUM, S_SOFTMAX, S_LOG_SOFTMAX };

int scan(const tide_devcall * c, Scan kind) {
    if (int rc = use(c->dev)) return rc;
    const tide_devtensor & x = c->in[0];
    if (c->out[0].nelem == 0) return TIDE_DEVAPI_OK;
    bool red[TIDE_MAX_DIMS] = {};
    if (x.ndim > 0 && c->p.ints[0] >= 0 && c->p.ints[0] < x.ndim) red[c->p.ints[0]] = true;
    const Plan    p  = make_plan(x, red, &c->out[0], nullptr, true);
    const int32_t ct = c->compute_dtype;
    int           rc = TIDE_DEVAPI_OK;
    bool          have;
    if (kind == S_CUMSUM) {
        const bool logical = ct == TIDE_DTYPE_BOOL && x.dtype != TIDE_DTYPE_BOOL;
        have = dispatch_compute(ct, [&](auto t) { rc = run_cumsum<decltype(t)>(c, p, logical); });
    } else {
        const Launch g = shape_of(p);
        if (g.gx > INT32_MAX) return too_big(c, g.gx);
        have = dispatch_float(ct, [&](auto t) {
            softmax_kernel<decltype(t)>
                <<<(unsigned)g.gx, g.block, 0, (cudaStream_t)c->stream>>>(p, g.l, kind == S_LOG_SOFTMAX);
        });
    }
    if (!have) return no_dtype(c, ct);
    if (rc != TIDE_DEVAPI_OK) return rc;
    return launched(c);
}

/* -- the list ----------------------------------------------------------------------------- */

int op_sum(const tide_devcall * c) { return reduce(c, K_SUM); }
int op_mean(const tide_devcall * c) { return reduce(c, K_MEAN); }
int op_prod(const tide_devcall * c) { return reduce(c, K_PROD); }
int op_amax(const tide_devcall * c) { return reduce(c, K_AMAX); }
int op_amin(const tide_devcall * c) { return reduce(c, K_AMIN); }
int op_max_dim(const tide_devcall * c) { return reduce(c, K_MAX_DIM); }
int op_min_dim(const tide_devcall * c) { return reduce(c, K_MIN_DIM); }
int op_argmax(const tide_devcall * c) { return reduce(c, K_ARGMAX); }
int op_argmin(const tide_devcall * c) { return reduce(c, K_ARGMIN); }
int op_var(const tide_devcall * c) { return reduce(c, K_VAR); }
int op_std(const tide_devcall * c) { return reduce(c, K_STD); }
int op_logsumexp(const tide_devcall * c) { return reduce(c, K_LSE); }
int op_all(const tide_devcall * c) { return reduce(c, K_ALL); }
int op_any(const tide_devcall * c) { return reduce(c, K_ANY); }
int op_cumsum(const tide_devcall * c) { return scan(c, S_CUMSUM); }
int op_softmax(const tide_devcall * c) { return scan(c, S_SOFTMAX); }
int op_log_softmax(const tide_devcall * c) { return scan(c, S_LOG_SOFTMAX); }

}   // namespace

const kernel_entry reduce_kernels[] = {
    {"sum", op_sum},
    {"mean", op_mean},
    {"prod", op_prod},
    {"amax", op_amax},
    {"amin", op_amin},
    {"max_dim", op_max_dim},
    {"min_dim", op_min_dim},
    {"argmax", op_argmax},
    {"argmin", op_argmin},
    {"var", op_var},
    {"std", op_std},
    {"logsumexp", op_logsumexp},
    {"all", op_all},
    {"any", op_any},
    {"cumsum", op_cumsum},
    {"softmax", op_softmax},
    {"log_softmax", op_log_softmax},
    {nullptr, nullptr},
};

}   // namespace tide_cuda
