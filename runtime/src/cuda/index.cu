/*
 * index.cu - the CUDA kernels of the ops that move elements by index tensors
 * or masks: index_select, gather, scatter, scatter_add, index_add and
 * masked_select, giving the CPU's results and errors (ops/cpu/index.c).
 *
 * An index's values are known only on the device, so a bad one cannot fail
 * the launch. check_index() finds the first bad one (in the index's row-major
 * order) on the device, fills the call's report, which libtide reads once the
 * device is done and raises as the op's error, and leaves a flag that every
 * later kernel of the call reads first, doing nothing when it is set: the
 * destination is left as it was, as on the CPU, which checks every index
 * before it writes anything. masked_select reports the same way a mask whose
 * count is no longer the one its shape rule saw.
 *
 * Duplicate indices: scatter writes, as the CPU's serial order does, the value
 * of the last index element (row-major) that names a place; the adds sum
 * with atomics, so float sums may differ from the CPU's in the last places.
 */
#include "common.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <stdint.h>

#include <type_traits>

namespace tide_cuda {
namespace {

/* check_index's flag while no bad index has been found; anything else is the
 * row-major position of the first bad one (masked_select: the count found). */
constexpr int64_t NO_BAD = INT64_MAX;

/* Whether the call's check found something wrong (bad: nullptr when it had nothing to check). */
__device__ inline bool refused(const int64_t * bad) { return bad && *bad != NO_BAD; }

/* The index element at `off`, as the user wrote it (int32 or int64). */
__device__ inline int64_t index_at(const Operand & ix, int64_t off) {
    return ix.dtype == TIDE_DTYPE_I64 ? ((const int64_t *)ix.data)[off] : (int64_t)((const int32_t *)ix.data)[off];
}

/* -- host helpers ----------------------------------------------------------------------------- */

/* t's size along dim, a 0-d tensor taking part as one element of a 1-d one (index.c's size1). */
int64_t size1(const tide_devtensor & t, int32_t dim) { return t.ndim ? t.sizes[dim] : 1; }

/* The same, a 0-d tensor as 1-d (index.c's walk_init): dim 0 then exists. */
Shape shape1_of(const tide_devtensor & t) {
    Shape s = shape_of(t);
    if (s.ndim == 0) s.ndim = 1;
    return s;
}

/* t as an operand over s, whose dims it has (or t is 0-d: it stays put), with
 * stride 0 along dim `zero` (-1: none). No broadcasting: the shape rules make
 * t at least as large as s wherever it moves. */
int along(const tide_devcall * c, const tide_devtensor & t, const Shape & s, int32_t zero, Operand & o) {
    if (t.ndim && t.ndim != s.ndim)
        return set_error(TIDE_DEVAPI_ERROR, "%s: a %d-d operand in a %d-d iteration", c->op, t.ndim, s.ndim);
    o.data   = t.data;
    o.dtype  = t.dtype;
    o.value  = 0;
    o.ivalue = 0;
    for (int32_t d = 0; d < TIDE_MAX_DIMS; d++) o.strides[d] = d < t.ndim && d != zero ? t.strides[d] : 0;
    return TIDE_DEVAPI_OK;
}

/* A 1-d (or 0-d) index whose element k goes with coordinate k of dim `dim`. */
Operand along_dim(const tide_devtensor & index, int32_t dim) {
    Operand o;
    o.data   = index.data;
    o.dtype  = index.dtype;
    o.value  = 0;
    o.ivalue = 0;
    for (int32_t d = 0; d < TIDE_MAX_DIMS; d++) o.strides[d] = 0;
    o.strides[dim] = index.ndim ? index.strides[0] : 0;
    return o;
}

/* f(E()) for E the unsigned type of esz bytes: elements that move unchanged. */
template <typename F> void by_size(int32_t esz, F && f) {
    switch (esz) {
    case 1:  f(uint8_t()); break;
    case 2:  f(uint16_t()); break;
    case 4:  f(uint32_t()); break;
    default: f(uint64_t()); break;
    }
}

/* f(I()) for the type that indexes an iteration of n elements. */
template <typename F> void by_count(int64_t n, F && f) {
    if (n < SMALL) f(uint32_t());
    else f(uint64_t());
}

/* -- copies: x into the result, a temporary into the result ----------------------------------- */

/* Elements of E bytes moved unchanged: views of one dtype. */
template <typename E, typename I>
__global__ void __launch_bounds__(THREADS) move_kernel(Shape s, Operands<2> ops, const int64_t * bad) {
    if (refused(bad)) return;
    I n = (I)s.nelem, step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t off[2];
        offsets_of<2, I>(s, ops.o, i, off);
        ((E *)ops.o[0].data)[off[0]] = ((const E *)ops.o[1].data)[off[1]];
    }
}

/* Elements converted through compute type T, as tide_convert converts. */
template <typename T, typename I>
__global__ void __launch_bounds__(THREADS) convert_kernel(Shape s, Operands<2> ops, const int64_t * bad) {
    if (refused(bad)) return;
    I n = (I)s.nelem, step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t off[2];
        offsets_of<2, I>(s, ops.o, i, off);
        store_as<T>((void *)ops.o[0].data, ops.o[0].dtype, off[0], load_as<T>(ops.o[1].data, ops.o[1].dtype, off[1]));
    }
}

/* f(T()) for T the type libtide's copies convert through into dtype dt: its
 * compute type, with bool as C++ bool (x != 0, not uint8's saturation). */
template <typename F> int by_compute(const tide_devcall * c, int32_t dt, F && f) {
    switch (dt) {
    case TIDE_DTYPE_F32:
    case TIDE_DTYPE_F16:
    case TIDE_DTYPE_BF16: f(float()); return TIDE_DEVAPI_OK;
    case TIDE_DTYPE_F64:  f(double()); return TIDE_DEVAPI_OK;
    case TIDE_DTYPE_I32:  f(int32_t()); return TIDE_DEVAPI_OK;
    case TIDE_DTYPE_I64:  f(int64_t()); return TIDE_DEVAPI_OK;
    case TIDE_DTYPE_U8:   f(uint8_t()); return TIDE_DEVAPI_OK;
    case TIDE_DTYPE_BOOL: f(bool()); return TIDE_DEVAPI_OK;
    default:              return no_dtype(c, dt);
    }
}

/* Copies src (of dst's shape) into dst as shape.c's tide_copy_view does: the
 * bytes when the dtypes agree, else each value through the compute type of
 * dst's dtype. Nothing when they are the same view (in place), and nothing on
 * the device once `bad` is set. */
int copy_view(const tide_devcall * c, const tide_devtensor & dst, const tide_devtensor & src, const int64_t * bad) {
    if (dst.nelem == 0 || same_view(dst, src)) return TIDE_DEVAPI_OK;
    Shape       s = shape_of(dst);
    Operands<2> ops;
    if (src.ndim > s.ndim)
        return set_error(TIDE_DEVAPI_ERROR, "%s: a %d-d tensor copied into a %d-d one", c->op, src.ndim, s.ndim);
    ops.o[0] = operand(dst, s);
    ops.o[1] = operand(src, s);
    coalesce(s, ops.o, 2);
    cudaStream_t st = (cudaStream_t)c->stream;
    unsigned     nb = blocks_for(s.nelem);
    if (src.dtype == dst.dtype) {
        by_size(esize(dst.dtype), [&](auto e) {
            by_count(s.nelem, [&](auto i) {
                move_kernel<decltype(e), decltype(i)><<<nb, THREADS, 0, st>>>(s, ops, bad);
            });
        });
        return launched(c);
    }
    int rc = by_compute(c, dst.dtype, [&](auto t) {
        by_count(s.nelem, [&](auto i) {
            convert_kernel<decltype(t), decltype(i)><<<nb, THREADS, 0, st>>>(s, ops, bad);
        });
    });
    return rc ? rc : launched(c);
}

/* A contiguous tensor of t's shape in dtype dt, in scratch memory. */
int scratch_like(const tide_devcall * c, const tide_devtensor & t, int32_t dt, tide_devtensor & r) {
    r       = t;
    r.dtype = dt;
    if (t.nelem == 0) return TIDE_DEVAPI_OK;
    r.data = c->scratch(c->scratch_ctx, (size_t)t.nelem * (size_t)esize(dt));
    if (!r.data) return TIDE_DEVAPI_OOM;
    int64_t stride = 1;
    for (int32_t d = t.ndim - 1; d >= 0; d--) {
        r.strides[d] = stride;
        stride *= t.sizes[d];
    }
    return TIDE_DEVAPI_OK;
}

/* What the kernels write (index.c's target): out itself when it holds dtype
 * dt, else a contiguous temporary that finish() converts into out. */
int target(const tide_devcall * c, const tide_devtensor & out, int32_t dt, tide_devtensor & dst) {
    if (out.dtype == dt) {
        dst = out;
        return TIDE_DEVAPI_OK;
    }
    return scratch_like(c, out, dt, dst);
}

int finish(const tide_devcall * c, const tide_devtensor & out, const tide_devtensor & dst, const int64_t * bad) {
    return dst.data == out.data ? TIDE_DEVAPI_OK : copy_view(c, out, dst, bad);
}

/* -- checking an index -------------------------------------------------------------------------- */

__global__ void check_init(int64_t * bad) { *bad = NO_BAD; }

/* The smallest row-major position of an index element outside [base, base + bound). */
template <typename I>
__global__ void __launch_bounds__(THREADS)
check_kernel(Shape s, Operand ix, int64_t base, int64_t bound, int64_t * bad) {
    I n = (I)s.nelem, step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t off;
        offsets_of<1, I>(s, &ix, i, &off);
        int64_t v = index_at(ix, off);
        if (v < base || v - base >= bound) {
            atomicMin((long long *)bad, (long long)i);
            return;   /* this thread's later elements come after i */
        }
    }
}

/* The report of what check_kernel found: the first bad index, as the user wrote it. */
__global__ void check_report(Shape s, Operand ix, int32_t dim, int64_t bound, const int64_t * bad, tide_devreport * r) {
    tide_devreport rep = {TIDE_DEVREPORT_NONE, 0, 0, 0};
    int64_t        pos = *bad;
    if (pos != NO_BAD) {
        int64_t off;
        offsets_of<1, uint64_t>(s, &ix, (uint64_t)pos, &off);
        rep = {TIDE_DEVREPORT_INDEX, dim, index_at(ix, off), bound};
    }
    *r = rep;
}

/* Checks index (int32 or int64, any strides, 1-based for ONE_BASED) against a
 * dimension `dim` of size `bound` on the device: the call's report names the
 * first bad element, and *bad becomes the flag the call's later kernels pass
 * to refused(). Nothing to check (an empty index) leaves *bad nullptr. */
int check_index(const tide_devcall * c, const tide_devtensor & index, int32_t dim, int64_t bound,
                const int64_t ** bad) {
    *bad = nullptr;
    if (index.nelem == 0) return TIDE_DEVAPI_OK;
    tide_devreport * host = c->report(c->scratch_ctx);
    if (!host) return TIDE_DEVAPI_OOM;
    auto * flag = (int64_t *)c->scratch(c->scratch_ctx, sizeof(int64_t) + sizeof(tide_devreport));
    if (!flag) return TIDE_DEVAPI_OOM;
    auto *  rep  = (tide_devreport *)(flag + 1);
    Shape   s    = shape_of(index);
    Operand ix   = operand(index, s);
    int64_t base = (c->p.flags & TIDE_PARAMF_ONE_BASED) ? 1 : 0;
    coalesce(s, &ix, 1);
    cudaStream_t st = (cudaStream_t)c->stream;
    check_init<<<1, 1, 0, st>>>(flag);
    by_count(s.nelem, [&](auto i) {
        check_kernel<decltype(i)><<<blocks_for(s.nelem), THREADS, 0, st>>>(s, ix, base, bound, flag);
    });
    check_report<<<1, 1, 0, st>>>(s, ix, dim, bound, flag, rep);
    if (int rc = launched(c)) return rc;
    if (int rc = checked(c, cudaMemcpyAsync(host, rep, sizeof *rep, cudaMemcpyDefault, st), "copying the report"))
        return rc;
    *bad = flag;
    return TIDE_DEVAPI_OK;
}

/* -- index_select, gather ----------------------------------------------------------------------- */

/* dst = x at the index's element along dim, elsewhere at the iteration's
 * coordinates. Operands: 0 dst, 1 x (stride 0 along dim), 2 the index. */
template <typename E, typename I>
__global__ void __launch_bounds__(THREADS)
take_kernel(Shape s, Operands<3> ops, int64_t xs, int64_t base, const int64_t * bad) {
    if (refused(bad)) return;
    I n = (I)s.nelem, step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t off[3];
        offsets_of<3, I>(s, ops.o, i, off);
        int64_t k = index_at(ops.o[2], off[2]) - base;
        ((E *)ops.o[0].data)[off[0]] = ((const E *)ops.o[1].data)[off[1] + k * xs];
    }
}

/* The take over iteration shape s (operands still to coalesce), then out from dst. */
int take(const tide_devcall * c, Shape s, Operands<3> & ops, int64_t xs, const tide_devtensor & out,
         const tide_devtensor & dst, const int64_t * bad) {
    int64_t      base = (c->p.flags & TIDE_PARAMF_ONE_BASED) ? 1 : 0;
    cudaStream_t st   = (cudaStream_t)c->stream;
    coalesce(s, ops.o, 3);
    by_size(esize(dst.dtype), [&](auto e) {
        by_count(s.nelem, [&](auto i) {
            take_kernel<decltype(e), decltype(i)><<<blocks_for(s.nelem), THREADS, 0, st>>>(s, ops, xs, base, bad);
        });
    });
    if (int rc = launched(c)) return rc;
    return finish(c, out, dst, bad);
}

/* Over the result: its element at coordinate k of dim is x's at index[k]. */
int k_index_select(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    if (int rc = need_memory(c)) return rc;
    const tide_devtensor & x = c->in[0], & index = c->in[1], & out = c->out[0];
    int32_t                dim = (int32_t)c->p.ints[0];
    const int64_t *        bad;
    if (int rc = check_index(c, index, dim, size1(x, dim), &bad)) return rc;
    if (out.nelem == 0) return TIDE_DEVAPI_OK;
    tide_devtensor dst;
    if (int rc = target(c, out, x.dtype, dst)) return rc;
    Shape       s = shape1_of(out);
    Operands<3> ops;
    if (int rc = along(c, dst, s, -1, ops.o[0])) return rc;
    if (int rc = along(c, x, s, dim, ops.o[1])) return rc;
    ops.o[2] = along_dim(index, dim);
    return take(c, s, ops, x.ndim ? x.strides[dim] : 0, out, dst, bad);
}

/* Over the index (the result's shape): x at the index's value along dim. */
int k_gather(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    if (int rc = need_memory(c)) return rc;
    const tide_devtensor & x = c->in[0], & index = c->in[1], & out = c->out[0];
    int32_t                dim = (int32_t)c->p.ints[0];
    const int64_t *        bad;
    if (int rc = check_index(c, index, dim, size1(x, dim), &bad)) return rc;
    if (out.nelem == 0) return TIDE_DEVAPI_OK;
    tide_devtensor dst;
    if (int rc = target(c, out, x.dtype, dst)) return rc;
    Shape       s = shape1_of(index);
    Operands<3> ops;
    if (int rc = along(c, dst, s, -1, ops.o[0])) return rc;
    if (int rc = along(c, x, s, dim, ops.o[1])) return rc;
    if (int rc = along(c, index, s, -1, ops.o[2])) return rc;
    return take(c, s, ops, x.ndim ? x.strides[dim] : 0, out, dst, bad);
}

/* -- scatter ------------------------------------------------------------------------------------ */

/* dst at the index's value along dim (elsewhere at the iteration's coordinates)
 * = src. Operands: 0 dst (stride 0 along dim), 1 src, 2 the index. With
 * `order`, the index's positions sorted stably by the place they write (the
 * keys), only the last of each run of one place writes: the highest position,
 * the CPU's last write. */
template <typename E, typename I>
__global__ void __launch_bounds__(THREADS) put_kernel(Shape s, Operands<3> ops, int64_t ds, int64_t base,
                                                      const int64_t * bad, const I * keys, const I * order) {
    if (refused(bad)) return;
    I n = (I)s.nelem, step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        I p = i;
        if (order) {
            if (i + 1 < n && keys[i + 1] == keys[i]) continue;
            p = order[i];
        }
        int64_t off[3];
        offsets_of<3, I>(s, ops.o, p, off);
        int64_t k = index_at(ops.o[2], off[2]) - base;
        ((E *)ops.o[0].data)[off[0] + k * ds] = ((const E *)ops.o[1].data)[off[1]];
    }
}

/* Each index element's place, as a row-major position in the result, and its
 * own position: what scatter sorts. Operands: 0 the result's contiguous
 * strides (0 along dim; kd is the one along dim), 1 the index. */
template <typename I>
__global__ void __launch_bounds__(THREADS)
key_kernel(Shape s, Operands<2> ops, int64_t kd, int64_t base, const int64_t * bad, I * keys, I * pos) {
    if (refused(bad)) return;
    I n = (I)s.nelem, step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t off[2];
        offsets_of<2, I>(s, ops.o, i, off);
        keys[i] = (I)(off[0] + (index_at(ops.o[1], off[1]) - base) * kd);
        pos[i]  = i;
    }
}

/* Index elements that differ in a coordinate other than dim never write the
 * same place, so with one element along dim (a one-hot scatter, say) there
 * are no duplicates and every element writes. Otherwise the elements are
 * sorted by the place they write (CUB's radix sort is stable) and the last of
 * each place writes: scratch of four index-sized arrays, the work O(#index),
 * whatever the size of the result. */
template <typename E, typename I>
int put(const tide_devcall * c, const Shape & s0, const Operands<3> & ops0, int64_t ds, const tide_devtensor & dst,
        const tide_devtensor & index, int32_t dim, const int64_t * bad) {
    int64_t      base = (c->p.flags & TIDE_PARAMF_ONE_BASED) ? 1 : 0;
    cudaStream_t st   = (cudaStream_t)c->stream;
    int64_t      n    = s0.nelem;
    Shape        s    = s0;
    Operands<3>  ops  = ops0;
    coalesce(s, ops.o, 3);
    if ((index.ndim ? index.sizes[dim] : 1) == 1) {
        put_kernel<E, I><<<blocks_for(n), THREADS, 0, st>>>(s, ops, ds, base, bad, nullptr, nullptr);
        return launched(c);
    }

    /* the keys: row-major positions in the result (dst's shape), along s0 */
    Shape       ks = s0;
    Operands<2> kops;
    kops.o[0] = ops0.o[0];
    kops.o[1] = ops0.o[2];
    int64_t stride = 1, kd = 1;
    for (int32_t d = ks.ndim - 1; d >= 0; d--) {
        int64_t size = dst.ndim ? dst.sizes[d] : 1;
        kops.o[0].strides[d] = d == dim ? 0 : stride;
        if (d == dim) kd = stride;
        stride *= size;
    }
    coalesce(ks, kops.o, 2);
    int bits = 1;   /* the sort looks at the bits a key can have set */
    while (bits < (int)(8 * sizeof(I)) && ((uint64_t)(dst.nelem - 1) >> bits) != 0) bits++;

    cub::DoubleBuffer<I> keys(nullptr, nullptr), order(nullptr, nullptr);
    size_t               work = 0;
    cudaError_t          err  = cub::DeviceRadixSort::SortPairs(nullptr, work, keys, order, n, 0, bits, st);
    if (int rc = checked(c, err, "sizing the sort")) return rc;
    size_t bufs = align256((size_t)n * 4 * sizeof(I));
    char * mem  = (char *)c->scratch(c->scratch_ctx, bufs + work);
    if (!mem) return TIDE_DEVAPI_OOM;
    I * k0 = (I *)mem, * p0 = k0 + 2 * n;
    keys   = cub::DoubleBuffer<I>(k0, k0 + n);
    order  = cub::DoubleBuffer<I>(p0, p0 + n);
    key_kernel<I><<<blocks_for(n), THREADS, 0, st>>>(ks, kops, kd, base, bad, keys.Current(), order.Current());
    if (int rc = launched(c)) return rc;
    err = cub::DeviceRadixSort::SortPairs(mem + bufs, work, keys, order, n, 0, bits, st);
    if (int rc = checked(c, err, "sorting the indices")) return rc;
    put_kernel<E, I><<<blocks_for(n), THREADS, 0, st>>>(s, ops, ds, base, bad, keys.Current(), order.Current());
    return launched(c);
}

int k_scatter(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    if (int rc = need_memory(c)) return rc;
    const tide_devtensor & x = c->in[0], & index = c->in[1], & src = c->in[2], & out = c->out[0];
    int32_t                dim = (int32_t)c->p.ints[0];
    const int64_t *        bad;
    if (int rc = check_index(c, index, dim, size1(x, dim), &bad)) return rc;
    tide_devtensor dst, sw = src;
    if (int rc = target(c, out, x.dtype, dst)) return rc;
    if (int rc = copy_view(c, dst, x, bad)) return rc;
    if (index.nelem == 0) return finish(c, out, dst, bad);
    if (src.dtype != x.dtype) {   /* as index.c's as_dtype: a converted copy, then bytes move */
        if (int rc = scratch_like(c, src, x.dtype, sw)) return rc;
        if (int rc = copy_view(c, sw, src, nullptr)) return rc;
    }
    Shape       s = shape1_of(index);
    Operands<3> ops;
    if (int rc = along(c, dst, s, dim, ops.o[0])) return rc;
    if (int rc = along(c, sw, s, -1, ops.o[1])) return rc;
    if (int rc = along(c, index, s, -1, ops.o[2])) return rc;
    int64_t ds = dst.ndim ? dst.strides[dim] : 0;
    /* keys are positions in the result too: 32 bits when both fit */
    int rc = TIDE_DEVAPI_OK;
    by_size(esize(x.dtype), [&](auto e) {
        using E = decltype(e);
        if (s.nelem < SMALL && dst.nelem < SMALL) rc = put<E, uint32_t>(c, s, ops, ds, dst, index, dim, bad);
        else rc = put<E, uint64_t>(c, s, ops, ds, dst, index, dim, bad);
    });
    if (rc) return rc;
    return finish(c, out, dst, bad);
}

/* -- scatter_add, index_add ------------------------------------------------------------------- */

/* Adds that wrap for integers as the CPU's do (in the unsigned type). */
__device__ inline void atomic_add(float * p, float v) { atomicAdd(p, v); }
__device__ inline void atomic_add(double * p, double v) { atomicAdd(p, v); }
__device__ inline void atomic_add(int32_t * p, int32_t v) { atomicAdd((unsigned int *)p, (unsigned int)v); }
__device__ inline void atomic_add(int64_t * p, int64_t v) {
    atomicAdd((unsigned long long *)p, (unsigned long long)v);
}
/* No byte atomics: a compare-and-swap of the aligned word holding the byte. The
 * word may reach past the tensor but not past its storage's block (devalloc.c
 * makes blocks multiples of 512 bytes), and the bytes beside it, which no one
 * else writes while the op runs, go back unchanged. */
__device__ inline void atomic_add(uint8_t * p, uint8_t v) {
    unsigned int * w     = (unsigned int *)((uintptr_t)p & ~(uintptr_t)3);
    unsigned int   shift = (unsigned int)((uintptr_t)p & 3) * 8;
    unsigned int   old   = *w, seen;
    do {
        seen           = old;
        unsigned int b = ((seen >> shift) + v) & 0xffu;
        old            = atomicCAS(w, seen, (seen & ~(0xffu << shift)) | (b << shift));
    } while (old != seen);
}

/* dst at the index's value along dim += src, in compute type T. Operands: 0 dst
 * (stride 0 along dim), 1 src (any dtype, converted to T), 2 the index. */
template <typename T, typename I>
__global__ void __launch_bounds__(THREADS)
add_kernel(Shape s, Operands<3> ops, int64_t ds, int64_t base, const int64_t * bad) {
    if (refused(bad)) return;
    I n = (I)s.nelem, step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t off[3];
        offsets_of<3, I>(s, ops.o, i, off);
        int64_t k = index_at(ops.o[2], off[2]) - base;
        atomic_add((T *)ops.o[0].data + off[0] + k * ds, load_as<T>(ops.o[1].data, ops.o[1].dtype, off[1]));
    }
}

/* scatter_add (over the index) and index_add (over src, the 1-d index along
 * dim): in the compute dtype, as the CPU does. float16/bfloat16 add into a
 * float32 copy of x, rounded into the result once at the end. */
template <bool INDEX_ADD> int k_add(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    if (int rc = need_memory(c)) return rc;
    const tide_devtensor & x = c->in[0], & index = c->in[1], & src = c->in[2], & out = c->out[0];
    int32_t                dim = (int32_t)c->p.ints[0];
    int32_t                wt  = c->compute_dtype;
    if (wt != TIDE_DTYPE_F32 && wt != TIDE_DTYPE_F64 && wt != TIDE_DTYPE_I32 && wt != TIDE_DTYPE_I64 &&
        wt != TIDE_DTYPE_U8)
        return no_dtype(c, wt);
    const int64_t * bad;
    if (int rc = check_index(c, index, dim, size1(x, dim), &bad)) return rc;
    tide_devtensor dst;
    if (int rc = target(c, out, wt, dst)) return rc;
    if (int rc = copy_view(c, dst, x, bad)) return rc;
    Shape       s = shape1_of(INDEX_ADD ? src : index);
    Operands<3> ops;
    if (int rc = along(c, dst, s, dim, ops.o[0])) return rc;
    if (int rc = along(c, src, s, -1, ops.o[1])) return rc;
    if (INDEX_ADD) ops.o[2] = along_dim(index, dim);
    else if (int rc = along(c, index, s, -1, ops.o[2])) return rc;
    if (s.nelem > 0) {
        int64_t      ds   = dst.ndim ? dst.strides[dim] : 0;
        int64_t      base = (c->p.flags & TIDE_PARAMF_ONE_BASED) ? 1 : 0;
        cudaStream_t st   = (cudaStream_t)c->stream;
        coalesce(s, ops.o, 3);
        int rc = by_compute(c, wt, [&](auto t) {
            using T = decltype(t);
            if constexpr (!std::is_same_v<T, bool>)
                by_count(s.nelem, [&](auto i) {
                    add_kernel<T, decltype(i)><<<blocks_for(s.nelem), THREADS, 0, st>>>(s, ops, ds, base, bad);
                });
        });
        if (rc) return rc;
        if ((rc = launched(c))) return rc;
    }
    return finish(c, out, dst, bad);
}

/* -- masked_select ------------------------------------------------------------------------------- */

/* pos[i] = whether the mask is set at row-major element i of the broadcast
 * shape, and pos[n] = 0: the exclusive scan then makes pos[i] where element i
 * goes and pos[n] the count. */
template <typename P, typename I>
__global__ void __launch_bounds__(THREADS) flag_kernel(Shape s, Operand mask, P * pos) {
    I n = (I)s.nelem, step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t off;
        offsets_of<1, I>(s, &mask, i, &off);
        pos[i] = ((const uint8_t *)mask.data)[off] != 0;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) pos[n] = 0;
}

/* The count against the one the shape rule found: a mismatch (the mask changed
 * meanwhile) sets the flag and fills the report. */
template <typename P>
__global__ void count_kernel(const P * pos, int64_t n, int64_t expected, int64_t * bad, tide_devreport * r) {
    int64_t        total = (int64_t)pos[n];
    tide_devreport rep   = {TIDE_DEVREPORT_NONE, 0, 0, 0};
    *bad                 = NO_BAD;
    if (total != expected) {
        rep  = {TIDE_DEVREPORT_COUNT, 0, total, expected};
        *bad = total;
    }
    *r = rep;
}

/* dst[pos[i]] = x's element i where the mask is set (pos[i + 1] != pos[i]). */
template <typename E, typename P, typename I>
__global__ void __launch_bounds__(THREADS)
select_kernel(Shape s, Operand x, const P * pos, E * dst, int64_t ds, const int64_t * bad) {
    if (refused(bad)) return;
    I n = (I)s.nelem, step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        P at = pos[i];
        if (pos[i + 1] == at) continue;
        int64_t off;
        offsets_of<1, I>(s, &x, i, &off);
        dst[(int64_t)at * ds] = ((const E *)x.data)[off];
    }
}

/* Positions of type P (int32 below 2^31 elements): flags, CUB's exclusive sum
 * in place, the count checked, then the compaction in row-major order. */
template <typename P>
int compact(const tide_devcall * c, const Shape & s, const Operands<2> & ops, tide_devreport * host) {
    const tide_devtensor & x = c->in[0], & out = c->out[0];
    cudaStream_t           st = (cudaStream_t)c->stream;
    int64_t                n  = s.nelem;
    size_t                 work = 0;
    cudaError_t            err  = cub::DeviceScan::ExclusiveSum(nullptr, work, (P *)nullptr, n + 1, st);
    if (int rc = checked(c, err, "sizing the scan")) return rc;
    size_t head = 256, bufs = align256((size_t)(n + 1) * sizeof(P));
    char * mem  = (char *)c->scratch(c->scratch_ctx, head + bufs + work);
    if (!mem) return TIDE_DEVAPI_OOM;
    auto * bad = (int64_t *)mem;
    auto * rep = (tide_devreport *)(bad + 1);
    P *    pos = (P *)(mem + head);
    using I    = std::conditional_t<sizeof(P) == 4, uint32_t, uint64_t>;
    flag_kernel<P, I><<<blocks_for(n), THREADS, 0, st>>>(s, ops.o[1], pos);
    if (int rc = launched(c)) return rc;
    err = cub::DeviceScan::ExclusiveSum(mem + head + bufs, work, pos, n + 1, st);
    if (int rc = checked(c, err, "scanning the mask")) return rc;
    count_kernel<P><<<1, 1, 0, st>>>(pos, n, out.nelem, bad, rep);
    if (int rc = launched(c)) return rc;
    if (int rc = checked(c, cudaMemcpyAsync(host, rep, sizeof *rep, cudaMemcpyDefault, st), "copying the report"))
        return rc;
    if (out.nelem == 0) return TIDE_DEVAPI_OK;
    tide_devtensor dst;
    if (int rc = target(c, out, x.dtype, dst)) return rc;
    by_size(esize(x.dtype), [&](auto e) {
        using E = decltype(e);
        select_kernel<E, P, I><<<blocks_for(n), THREADS, 0, st>>>(s, ops.o[0], pos, (E *)dst.data, dst.strides[0], bad);
    });
    if (int rc = launched(c)) return rc;
    return finish(c, out, dst, bad);
}

int k_masked_select(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    if (int rc = need_memory(c)) return rc;
    const tide_devtensor & x = c->in[0], & mask = c->in[1], & out = c->out[0];
    if (out.ndim != 1) return set_error(TIDE_DEVAPI_ERROR, "%s: the result must be 1-d", c->op);
    Shape s;   /* x and mask broadcast (the shape rule has checked that they do) */
    s.ndim  = x.ndim > mask.ndim ? x.ndim : mask.ndim;
    s.nelem = 1;
    for (int32_t d = 0; d < TIDE_MAX_DIMS; d++) {
        int32_t jx = x.ndim - s.ndim + d, jm = mask.ndim - s.ndim + d;
        int64_t sx = d < s.ndim && jx >= 0 ? x.sizes[jx] : 1, sm = d < s.ndim && jm >= 0 ? mask.sizes[jm] : 1;
        s.sizes[d] = sx == 1 ? sm : sx;
        s.nelem *= s.sizes[d];
    }
    if (s.nelem == 0) return TIDE_DEVAPI_OK;   /* as the CPU: nothing to count or check */
    tide_devreport * host = c->report(c->scratch_ctx);
    if (!host) return TIDE_DEVAPI_OOM;
    Operands<2> ops;
    ops.o[0] = operand(x, s);
    ops.o[1] = operand(mask, s);
    coalesce(s, ops.o, 2);
    return s.nelem < SMALL ? compact<int32_t>(c, s, ops, host) : compact<int64_t>(c, s, ops, host);
}

}   // namespace

const kernel_entry index_kernels[] = {
    {"index_select", k_index_select},
    {"gather", k_gather},
    {"scatter", k_scatter},
    {"scatter_add", k_add<false>},
    {"index_add", k_add<true>},
    {"masked_select", k_masked_select},
    {nullptr, nullptr},
};

}   // namespace tide_cuda
