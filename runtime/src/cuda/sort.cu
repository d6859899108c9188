/*
 * sort.cu - the ops along the lines of one dim on CUDA: sort, topk, cumprod,
 * cummax, cummin and searchsorted. For sort and topk each line of the input (its
 * elements along dim) becomes a segment of contiguous unsigned keys whose
 * order is the CPU's: floats by their bits with the sign flipped (NaN made
 * one positive NaN, above everything; -0 made +0), signed integers with the
 * sign bit flipped, and for a descending sort every key complemented. CUB's
 * segmented radix sort, stable, orders them with their positions, and the
 * first K of each line are written out: the values read back from the input
 * at the sorted positions (a -0 stays -0) and the positions as int64. Stable
 * in both directions, as on the CPU, so the two devices give the same indices
 * for equal values. Two key widths in one direction: two instances of CUB's
 * sort in all (ten, one per dtype and direction, took minutes to build).
 */
#include "common.cuh"

#include <cub/device/device_segmented_radix_sort.cuh>

namespace tide_cuda {
namespace {

/* The ordered key of v: 32 bits for float, int32, uint8 (and bool), 64 for double and int64. */
template <typename T, typename K> __device__ inline K sort_key(T v, bool desc) {
    K k;
    if constexpr (std::is_same_v<T, float>) {
        uint32_t b = v != v ? 0x7fc00000u : v == 0.0f ? 0u : __float_as_uint(v);
        k = (b & 0x80000000u) ? ~b : b | 0x80000000u;
    } else if constexpr (std::is_same_v<T, double>) {
        uint64_t b = v != v ? 0x7ff8000000000000ull : v == 0.0 ? 0ull : (uint64_t)__double_as_longlong(v);
        k = (b & 0x8000000000000000ull) ? ~b : b | 0x8000000000000000ull;
    } else if constexpr (std::is_signed_v<T>) {
        k = (K)v ^ ((K)1 << (8 * sizeof(K) - 1));
    } else {
        k = (K)v;
    }
    return desc ? ~k : k;
}

/* The lines: x's shape with dim of size 1, and each operand's strides over it. */
struct Lines {
    Shape   s;
    int64_t lines, R;
};

Lines lines_of(const tide_devtensor & x, int32_t dim) {
    Lines l;
    l.s   = shape_of(x);
    l.R   = x.ndim ? x.sizes[dim] : 1;
    if (x.ndim) l.s.sizes[dim] = 1;
    l.lines = l.R ? x.nelem / l.R : 0;
    if (!x.ndim) l.lines = 1;
    l.s.nelem = l.lines;
    return l;
}

Operand along_lines(const tide_devtensor & t, const Lines & l) {
    Operand o = operand(t, l.s);   /* size-1 dims get stride 0, dim among them */
    return o;
}

template <typename T, typename K>
__global__ void __launch_bounds__(THREADS)
gather_kernel(Shape s, Operand x, int64_t xs, int64_t R, int64_t n, bool desc, K * keys, int64_t * pos) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t line = i / R, r = i % R, off;
        offsets_of<1, uint64_t>(s, &x, (uint64_t)line, &off);
        keys[i] = sort_key<T, K>(load_as<T>(x.data, x.dtype, off + r * xs), desc);
        pos[i]  = r;
    }
}

__global__ void __launch_bounds__(THREADS) offsets_kernel(int64_t * offs, int64_t lines, int64_t R) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i <= lines; i += step) offs[i] = i * R;
}

/* ops: x, values, indices over the lines; xs, vs, is their strides along dim */
template <typename T>
__global__ void __launch_bounds__(THREADS)
write_kernel(Shape s, Operands<3> ops, int64_t xs, int64_t vs, int64_t is, int64_t R, int64_t K, int64_t base,
             const int64_t * pos, int64_t n) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += step) {
        int64_t line = j / K, q = j % K, off[3];
        offsets_of<3, uint64_t>(s, ops.o, (uint64_t)line, off);
        int64_t r = pos[line * R + q];
        T       v = load_as<T>(ops.o[0].data, ops.o[0].dtype, off[0] + r * xs);
        store_as<T>((void *)ops.o[1].data, ops.o[1].dtype, off[1] + q * vs, v);
        ((int64_t *)ops.o[2].data)[off[2] + q * is] = r + base;
    }
}

template <typename T> int sort_typed(const tide_devcall * c, int32_t dim, int64_t K, bool desc) {
    using Key = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
    const tide_devtensor & x = c->in[0], & vals = c->out[0], & idx = c->out[1];
    cudaStream_t st = (cudaStream_t)c->stream;
    Lines        l  = lines_of(x, dim);
    int64_t      n  = l.lines * l.R;
    int64_t xs = x.ndim ? x.strides[dim] : 0, vs = vals.ndim ? vals.strides[dim] : 0,
            is = idx.ndim ? idx.strides[dim] : 0;
    if (n > INT32_MAX || l.lines > INT32_MAX)
        return set_error(TIDE_DEVAPI_ERROR, "%s: %lld elements, at most 2^31 - 1 are supported on CUDA", c->op,
                         (long long)n);

    size_t work = 0;
    cudaError_t err = cub::DeviceSegmentedRadixSort::SortPairs(
        nullptr, work, (const Key *)nullptr, (Key *)nullptr, (const int64_t *)nullptr, (int64_t *)nullptr, (int)n,
        (int)l.lines, (const int64_t *)nullptr, (const int64_t *)nullptr, 0, (int)(8 * sizeof(Key)), st);
    if (int rc = checked(c, err, "sizing the sort")) return rc;
    size_t kb = align256((size_t)n * sizeof(Key)), pb = align256((size_t)n * sizeof(int64_t)),
           ob = align256((size_t)(l.lines + 1) * sizeof(int64_t));
    char * mem = (char *)c->scratch(c->scratch_ctx, 2 * kb + 2 * pb + ob + work);
    if (!mem) return TIDE_DEVAPI_OOM;
    Key *     k0 = (Key *)mem, * k1 = (Key *)(mem + kb);
    int64_t * p0 = (int64_t *)(mem + 2 * kb), * p1 = (int64_t *)(mem + 2 * kb + pb);
    int64_t * offs = (int64_t *)(mem + 2 * kb + 2 * pb);

    Operand xo = along_lines(x, l);
    gather_kernel<T, Key><<<blocks_for(n), THREADS, 0, st>>>(l.s, xo, xs, l.R, n, desc, k0, p0);
    offsets_kernel<<<blocks_for(l.lines + 1), THREADS, 0, st>>>(offs, l.lines, l.R);
    if (int rc = launched(c)) return rc;
    void * tmp = mem + 2 * kb + 2 * pb + ob;
    err = cub::DeviceSegmentedRadixSort::SortPairs(tmp, work, k0, k1, p0, p1, (int)n, (int)l.lines, offs, offs + 1, 0,
                                                   (int)(8 * sizeof(Key)), st);
    if (int rc = checked(c, err, "sorting")) return rc;

    Operands<3> ops;
    ops.o[0] = xo;
    ops.o[1] = along_lines(vals, l);
    ops.o[2] = along_lines(idx, l);
    int64_t m = l.lines * K, base = (c->p.flags & TIDE_PARAMF_ONE_BASED) ? 1 : 0;
    write_kernel<T><<<blocks_for(m), THREADS, 0, st>>>(l.s, ops, xs, vs, is, l.R, K, base, p1, m);
    return launched(c);
}

int sort_along(const tide_devcall * c, int32_t dim, int64_t K, bool desc) {
    if (int rc = use(c->dev)) return rc;
    if (!c->in[0].data && c->in[0].nelem > 0)
        return set_error(TIDE_DEVAPI_ERROR, "%s: input 1 must be a tensor on the device, not a host number", c->op);
    if (c->out[0].nelem == 0 || K == 0) return TIDE_DEVAPI_OK;
    int rc = TIDE_DEVAPI_OK;
    if (!dispatch_compute(c->compute_dtype, [&](auto t) { rc = sort_typed<decltype(t)>(c, dim, K, desc); }))
        return no_dtype(c, c->compute_dtype);
    return rc;
}

int k_sort(const tide_devcall * c) {
    int32_t dim = (int32_t)c->p.ints[0];
    return sort_along(c, dim, c->in[0].ndim ? c->in[0].sizes[dim] : 1, c->p.ints[1] != 0);
}

int k_topk(const tide_devcall * c) { return sort_along(c, (int32_t)c->p.ints[0], c->p.ints[1], c->p.ints[2] != 0); }

/* -- cumprod, cummax, cummin: a thread scans a line -------------------------------------------- */

/* As ops/cpu/reduce.c: cumprod in double for floats, wrapping in the width for
 * integers; cummax/cummin keep a NaN once met and move to an equal element. The
 * lines are independent, so a thread per line; a single long line is serial. */
template <typename T> using prod_acc = std::conditional_t<std::is_floating_point_v<T>, double,
                                                          std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>>;

template <typename T>
__global__ void __launch_bounds__(THREADS)
cumprod_kernel(Shape s, Operands<2> ops, int64_t xs, int64_t ys, int64_t R, int64_t lines) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t line = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; line < lines; line += step) {
        int64_t off[2];
        offsets_of<2, uint64_t>(s, ops.o, (uint64_t)line, off);
        prod_acc<T> a = 1;
        for (int64_t r = 0; r < R; r++) {
            a *= (prod_acc<T>)load_as<T>(ops.o[0].data, ops.o[0].dtype, off[0] + r * xs);
            store_as<T>((void *)ops.o[1].data, ops.o[1].dtype, off[1] + r * ys, (T)a);
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(THREADS)
cumext_kernel(Shape s, Operands<3> ops, int64_t xs, int64_t vs, int64_t is, int64_t R, int64_t lines, bool mx,
              int64_t base) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t line = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; line < lines; line += step) {
        int64_t off[3];
        offsets_of<3, uint64_t>(s, ops.o, (uint64_t)line, off);
        T       m  = T();
        int64_t at = 0;
        for (int64_t r = 0; r < R; r++) {
            T v = load_as<T>(ops.o[0].data, ops.o[0].dtype, off[0] + r * xs);
            if (r == 0 || (!(m != m) && (v != v || (mx ? v >= m : v <= m)))) m = v, at = r;
            store_as<T>((void *)ops.o[1].data, ops.o[1].dtype, off[1] + r * vs, m);
            ((int64_t *)ops.o[2].data)[off[2] + r * is] = at + base;
        }
    }
}

int k_cumprod(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    const tide_devtensor & x = c->in[0], & y = c->out[0];
    if (!x.data && x.nelem > 0)
        return set_error(TIDE_DEVAPI_ERROR, "%s: input 1 must be a tensor on the device, not a host number", c->op);
    if (y.nelem == 0) return TIDE_DEVAPI_OK;
    int32_t     dim = (int32_t)c->p.ints[0];
    Lines       l   = lines_of(x, dim);
    Operands<2> ops;
    ops.o[0] = along_lines(x, l);
    ops.o[1] = along_lines(y, l);
    int64_t xs = x.ndim ? x.strides[dim] : 0, ys = y.ndim ? y.strides[dim] : 0;
    cudaStream_t st = (cudaStream_t)c->stream;
    if (!dispatch_compute(c->compute_dtype, [&](auto t) {
            cumprod_kernel<decltype(t)><<<blocks_for(l.lines), THREADS, 0, st>>>(l.s, ops, xs, ys, l.R, l.lines);
        }))
        return no_dtype(c, c->compute_dtype);
    return launched(c);
}

int cum_extreme(const tide_devcall * c, bool mx) {
    if (int rc = use(c->dev)) return rc;
    const tide_devtensor & x = c->in[0], & vals = c->out[0], & idx = c->out[1];
    if (!x.data && x.nelem > 0)
        return set_error(TIDE_DEVAPI_ERROR, "%s: input 1 must be a tensor on the device, not a host number", c->op);
    if (vals.nelem == 0) return TIDE_DEVAPI_OK;
    int32_t     dim = (int32_t)c->p.ints[0];
    Lines       l   = lines_of(x, dim);
    Operands<3> ops;
    ops.o[0] = along_lines(x, l);
    ops.o[1] = along_lines(vals, l);
    ops.o[2] = along_lines(idx, l);
    int64_t xs = x.ndim ? x.strides[dim] : 0, vs = vals.ndim ? vals.strides[dim] : 0,
            is = idx.ndim ? idx.strides[dim] : 0, base = (c->p.flags & TIDE_PARAMF_ONE_BASED) ? 1 : 0;
    cudaStream_t st = (cudaStream_t)c->stream;
    if (!dispatch_compute(c->compute_dtype, [&](auto t) {
            cumext_kernel<decltype(t)>
                <<<blocks_for(l.lines), THREADS, 0, st>>>(l.s, ops, xs, vs, is, l.R, l.lines, mx, base);
        }))
        return no_dtype(c, c->compute_dtype);
    return launched(c);
}

/* -- searchsorted: a thread per value, a binary search in its row ---------------------------- */

template <typename T> __device__ inline bool below(T a, T b) {   /* NaN above every number, as sort */
    return a < b || (!(a != a) && b != b);
}

/* ops: the row of the sorted sequence over the values' shape (stride 0 along
 * the last dim, or everywhere for a 1-d one), the values, the result */
template <typename T>
__global__ void __launch_bounds__(THREADS)
search_kernel(Shape s, Operands<3> ops, int64_t ss, int64_t M, bool right, int64_t base, int64_t n) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t off[3];
        offsets_of<3, uint64_t>(s, ops.o, (uint64_t)i, off);
        T       v  = read<T>(ops.o[1], off[1]);
        int64_t lo = 0, hi = M;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            T       e   = load_as<T>(ops.o[0].data, ops.o[0].dtype, off[0] + mid * ss);
            if (right ? !below(v, e) : below(e, v)) lo = mid + 1;
            else hi = mid;
        }
        ((int64_t *)ops.o[2].data)[off[2]] = lo + base;
    }
}

int k_searchsorted(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    const tide_devtensor & seq = c->in[0], & v = c->in[1], & out = c->out[0];
    if (!seq.data && seq.nelem != 0)   /* an empty one has no memory: every value goes first */
        return set_error(TIDE_DEVAPI_ERROR, "%s: the sorted sequence must be a tensor on the device", c->op);
    if (out.nelem == 0) return TIDE_DEVAPI_OK;
    Shape       sh = shape_of(out);
    Operands<3> ops;
    if (seq.ndim == 1) {   /* one row for every value, of any shape (0-d too, which operand() cannot take) */
        ops.o[0]      = Operand{};
        ops.o[0].data = seq.data, ops.o[0].dtype = seq.dtype;
    } else {
        ops.o[0]                      = operand(seq, sh);
        ops.o[0].strides[sh.ndim - 1] = 0;   /* the row's start; its elements go by ss */
    }
    ops.o[1] = operand(v, sh);
    ops.o[2] = operand(out, sh);
    int64_t M = seq.sizes[seq.ndim - 1], ss = seq.strides[seq.ndim - 1];
    int64_t base = (c->p.flags & TIDE_PARAMF_ONE_BASED) ? 1 : 0;
    cudaStream_t st = (cudaStream_t)c->stream;
    if (!dispatch_compute(c->compute_dtype, [&](auto t) {
            search_kernel<decltype(t)><<<blocks_for(out.nelem), THREADS, 0, st>>>(sh, ops, ss, M, c->p.ints[0] != 0,
                                                                                  base, out.nelem);
        }))
        return no_dtype(c, c->compute_dtype);
    return launched(c);
}

int k_cummax(const tide_devcall * c) { return cum_extreme(c, true); }
int k_cummin(const tide_devcall * c) { return cum_extreme(c, false); }

}   // namespace

const kernel_entry sort_kernels[] = {
    {"sort", k_sort},
    {"topk", k_topk},
    {"cumprod", k_cumprod},
    {"cummax", k_cummax},
    {"cummin", k_cummin},
    {"searchsorted", k_searchsorted},
    {nullptr, nullptr},
};

}   // namespace tide_cuda
