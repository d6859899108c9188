/*
 * random.cu - the CUDA kernels of the random ops (rand, randn, randint,
 * randperm, bernoulli): the CPU's arithmetic (ops/cpu/random.c) on the same
 * Philox stream (ops/cpu/philox.h), so that a seed gives the same tensor on
 * either device. Element g of the result (row-major, whatever out's strides)
 * takes stream element c->rng_offset + g (or, recorded into a graph, the
 * offset at c->rng_at when the graph runs); reserving that slice is libtide's.
 * Each thread computes one Philox block and fills the up to four elements it
 * holds. randperm sorts its keys with CUB's radix sort.
 */
#include "common.cuh"

#define TIDE_PHILOX_FN static __host__ __device__ inline
#include "ops/cpu/philox.h"
#define TIDE_CRMATH_FN static __host__ __device__ inline
#include "ops/cpu/crmath.h"

#include <cub/device/device_radix_sort.cuh>

#include <math.h>
#include <stdint.h>
#include <string.h>

namespace tide_cuda {

namespace {

/* -- arithmetic as the CPU rounds it ------------------------------------------------------ */

/* nvcc fuses a * b + c into one fma, whose single rounding the CPU (plain
 * x86-64, no FMA) does not share: the intrinsics round each step as C does.
 * The host branches let a host program check the functions below against
 * the CPU's results (without FMA instructions the host contracts nothing). */
__host__ __device__ inline double mul_f64(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}
__host__ __device__ inline double add_f64(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}
__host__ __device__ inline float mul_f32(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
__host__ __device__ inline float add_f32(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
/* IEEE square roots whatever -prec-sqrt or -use_fast_math says. */
__host__ __device__ inline float sqrt_f32(float a) {
#ifdef __CUDA_ARCH__
    return __fsqrt_rn(a);
#else
    return sqrtf(a);
#endif
}
__host__ __device__ inline double sqrt_f64(double a) {
#ifdef __CUDA_ARCH__
    return __dsqrt_rn(a);
#else
    return sqrt(a);
#endif
}
/* The high 64 bits of x * y: randint's (x * range) >> 64. */
__host__ __device__ inline uint64_t mulhi(uint64_t x, uint64_t y) {
#ifdef __CUDA_ARCH__
    return __umul64hi(x, y);
#else
    return (uint64_t)(((unsigned __int128)x * y) >> 64);
#endif
}

/* -- words into numbers (random.c's u24, u53, NORMALS, randint_draw) ----------------------- */

/* Uniform on [0, 1): 24 bits for float32 (every value a float), 53 for float64. Exact. */
__host__ __device__ inline float  u24(uint32_t a) { return (float)(a >> 8) * 0x1p-24f; }
__host__ __device__ inline double u53(uint32_t a, uint32_t b) {
    return (double)(((uint64_t)a << 32 | b) >> 11) * 0x1p-53;
}

/* The uniforms of the four stream elements of Philox block `block`: draw 0
 * for float32, draws 0 and 1 for float64. */
__host__ __device__ inline void uniforms(uint64_t seed, uint64_t block, float u[4]) {
    uint32_t w[4];
    tide_philox_block(seed, block, 0, w);
    for (int j = 0; j < 4; j++) u[j] = u24(w[j]);
}
__host__ __device__ inline void uniforms(uint64_t seed, uint64_t block, double u[4]) {
    uint32_t a[4], b[4];
    tide_philox_block(seed, block, 0, a);
    tide_philox_block(seed, block, 1, b);
    for (int j = 0; j < 4; j++) u[j] = u53(a[j], b[j]);
}

/* Box-Muller on the stream elements of block `block`: elements 2j and 2j + 1
 * are one pair (53-bit uniforms from draws 0 and 1 of each), the even one
 * takes the cosine, the odd one the sine. A block of four holds two whole
 * pairs, whatever the op's offset. Step for step as random.c's NORMALS. */
__host__ __device__ inline void normals(uint64_t seed, uint64_t block, float z[4]) {
    uint32_t a[4], b[4];
    tide_philox_block(seed, block, 0, a);
    tide_philox_block(seed, block, 1, b);
    for (int k = 0; k < 4; k += 2) {
        float r = sqrt_f32(-2.0f * log_f32((float)(1.0 - u53(a[k], b[k]))));   /* 1 - u in (0, 1], exact */
        float s, co;
        sincos_f32(mul_f32((float)(2 * M_PI), (float)u53(a[k + 1], b[k + 1])), &s, &co);
        z[k]     = mul_f32(r, co);
        z[k + 1] = mul_f32(r, s);
    }
}
/* float64: CUDA's log and sincos are not glibc's and neither rounds correctly
 * (glibc misses on about 0.1% of these arguments), so a few values differ
 * from the CPU's in their last bits: only functions shared by both devices
 * would make them agree. */
__host__ __device__ inline void normals(uint64_t seed, uint64_t block, double z[4]) {
    uint32_t a[4], b[4];
    tide_philox_block(seed, block, 0, a);
    tide_philox_block(seed, block, 1, b);
    for (int k = 0; k < 4; k += 2) {
        double r = sqrt_f64(-2.0 * log(1.0 - u53(a[k], b[k])));
        double s, co;
        sincos(mul_f64(2 * M_PI, u53(a[k + 1], b[k + 1])), &s, &co);
        z[k]     = mul_f64(r, co);
        z[k + 1] = mul_f64(r, s);
    }
}

/* -- the values of a block, per op --------------------------------------------------------- */

/* Each fills v[j] with the value of stream element 4 * block + j in the
 * compute type `value`; the kernel stores it converted to out's dtype. */

/* low + (high - low) * u in double, then capped below high (random.c's RAND_SETUP). */
struct Rand32 {
    using value = float;
    double lo, span;
    float  cap;
    __host__ __device__ void operator()(uint64_t seed, uint64_t block, float v[4]) const {
        float u[4];
        uniforms(seed, block, u);
        for (int j = 0; j < 4; j++) {
            float x = (float)add_f64(lo, mul_f64(span, (double)u[j]));
            v[j]    = x > cap ? cap : x;
        }
    }
};
struct Rand64 {
    using value = double;
    double lo, span, cap;
    __host__ __device__ void operator()(uint64_t seed, uint64_t block, double v[4]) const {
        double u[4];
        uniforms(seed, block, u);
        for (int j = 0; j < 4; j++) {
            double x = add_f64(lo, mul_f64(span, u[j]));
            v[j]     = x > cap ? cap : x;
        }
    }
};

/* mean + std * z in T. */
template <typename T> struct Randn {
    using value = T;
    T mean, std;
    __host__ __device__ void operator()(uint64_t seed, uint64_t block, T v[4]) const {
        T z[4];
        normals(seed, block, z);
        for (int j = 0; j < 4; j++) {
            if constexpr (sizeof(T) == 4) v[j] = add_f32(mean, mul_f32(std, z[j]));
            else v[j] = add_f64(mean, mul_f64(std, z[j]));
        }
    }
};

/* low + (64-bit draw * range) >> 64, range 0 standing for 2^64 (random.c's randint_draw). */
template <typename T> struct Randint {
    using value = T;
    uint64_t lo, range;
    __host__ __device__ void operator()(uint64_t seed, uint64_t block, T v[4]) const {
        uint32_t a[4], b[4];
        tide_philox_block(seed, block, 0, a);
        tide_philox_block(seed, block, 1, b);
        for (int j = 0; j < 4; j++) {
            uint64_t x = (uint64_t)a[j] << 32 | b[j];
            v[j]       = (T)(int64_t)(lo + (range ? mulhi(x, range) : x));
        }
    }
};

/* -- kernels ------------------------------------------------------------------------------- */

/* The Philox blocks an op's n elements span: element i is stream element
 * offset + i, i.e. word (skip + i) % 4 of block first + (skip + i) / 4. */
struct Span {
    uint64_t first, nb, n;
    uint32_t skip;
};

/* The slice a call draws: given by value, or, for a call recorded into a
 * graph (whose every run draws anew), read by each run from device memory
 * ({seed, offset} at `at`). */
struct Slice {
    uint64_t         seed, offset, n;
    const uint64_t * at;
};

inline Slice slice_of(const tide_devcall * c, int64_t n) {
    return {c->rng_seed, c->rng_offset, (uint64_t)n, (const uint64_t *)c->rng_at};
}

/* The blocks a grid covers: enough for any offset when the device reads it. */
inline unsigned grid_of(const Slice & s) {
    return blocks_for((int64_t)(s.at ? (s.n + 6) / 4 : ((s.offset & 3) + s.n + 3) / 4));
}

__device__ inline Span span_at(const Slice & s, uint64_t * seed) {
    uint64_t off = s.at ? s.at[1] : s.offset;
    *seed        = s.at ? s.at[0] : s.seed;
    Span sp;
    sp.first = off >> 2;
    sp.skip  = (uint32_t)(off & 3);
    sp.n     = s.n;
    sp.nb    = (sp.skip + sp.n + 3) / 4;
    return sp;
}

/* out[g] = gen's value of stream element offset + g, at g's strided offset in out. */
template <typename I, typename Gen>
__global__ void __launch_bounds__(THREADS)
    fill_kernel(const __grid_constant__ Shape shape, const __grid_constant__ Operands<1> out,
                const __grid_constant__ Gen gen, Slice sl) {
    uint64_t seed;
    Span     sp   = span_at(sl, &seed);
    uint64_t step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t q = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; q < sp.nb; q += step) {
        typename Gen::value v[4];
        gen(seed, sp.first + q, v);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint64_t e = 4 * q + (uint64_t)j;
            if (e < sp.skip || e - sp.skip >= sp.n) continue;
            int64_t off;
            offsets<1, I>(shape, out.o, (I)(e - sp.skip), &off);
            store_as((void *)out.o[0].data, out.o[0].dtype, off, v[j]);
        }
    }
}

/* out[g] = u < p[g], p broadcast over out; nothing when *bad names a bad p. */
template <typename T, typename I>
__global__ void __launch_bounds__(THREADS)
    bernoulli_kernel(const __grid_constant__ Shape shape, const __grid_constant__ Operands<2> ops, Slice sl,
                     const unsigned long long * bad) {
    if (*bad != ~0ull) return;   /* a probability outside [0, 1]: the CPU writes nothing then either */
    uint64_t seed;
    Span     sp   = span_at(sl, &seed);
    uint64_t step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t q = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; q < sp.nb; q += step) {
        T u[4];
        uniforms(seed, sp.first + q, u);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint64_t e = 4 * q + (uint64_t)j;
            if (e < sp.skip || e - sp.skip >= sp.n) continue;
            int64_t off[2];
            offsets<2, I>(shape, ops.o, (I)(e - sp.skip), off);
            T p = read<T>(ops.o[1], off[1]);
            store_as((void *)ops.o[0].data, ops.o[0].dtype, off[0], (T)(u[j] < p));
        }
    }
}

/* The first (row-major) element of p outside [0, 1], NaN included, into *first. */
template <typename I>
__global__ void __launch_bounds__(THREADS)
    find_bad_prob(const __grid_constant__ Shape shape, const __grid_constant__ Operands<1> p, unsigned long long * first) {
    uint64_t step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (uint64_t)shape.nelem; i += step) {
        int64_t off;
        offsets<1, I>(shape, p.o, (I)i, &off);
        double v = read<double>(p.o[0], off);
        if (!(v >= 0 && v <= 1)) atomicMin(first, (unsigned long long)i);
    }
}

/* The report of the element find_bad_prob found, if any (one thread). */
__global__ void report_bad_prob(const __grid_constant__ Shape shape, const __grid_constant__ Operands<1> p,
                                const unsigned long long * first, tide_devreport * r) {
    r->code = TIDE_DEVREPORT_NONE;
    if (*first == ~0ull) return;
    int64_t off;
    offsets<1, uint64_t>(shape, p.o, (uint64_t)*first, &off);
    r->code = TIDE_DEVREPORT_PROBABILITY;
    r->real = read<double>(p.o[0], off);
}

/* randperm's keys: element i draws (draw 0 << 32 | draw 1) at stream element offset + i. */
__global__ void __launch_bounds__(THREADS) perm_keys(uint64_t * key, int64_t * idx, Slice sl) {
    uint64_t seed;
    Span     sp   = span_at(sl, &seed);
    uint64_t step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t q = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; q < sp.nb; q += step) {
        uint32_t a[4], b[4];
        tide_philox_block(seed, sp.first + q, 0, a);
        tide_philox_block(seed, sp.first + q, 1, b);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint64_t e = 4 * q + (uint64_t)j;
            if (e < sp.skip || e - sp.skip >= sp.n) continue;
            uint64_t i = e - sp.skip;
            key[i]     = (uint64_t)a[j] << 32 | b[j];
            idx[i]     = (int64_t)i;
        }
    }
}

/* out[i * stride] = perm[i] + base, converted to out's dtype. */
__global__ void __launch_bounds__(THREADS)
    perm_store(const int64_t * perm, void * out, int32_t dtype, int64_t stride, int64_t n, int64_t base) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        store_as(out, dtype, i * stride, perm[i] + base);
}

/* -- launches ------------------------------------------------------------------------------ */

/* out[0]'s shape, and the operands of out[0] and in[0..n-1] over it, coalesced. */
Shape shape_of(const tide_devcall * c, Operand * ops, int32_t n_in) {
    const tide_devtensor & o = c->out[0];
    Shape s;
    s.ndim  = o.ndim;
    s.nelem = o.nelem;
    for (int32_t d = 0; d < TIDE_MAX_DIMS; d++) s.sizes[d] = d < o.ndim ? o.sizes[d] : 1;
    ops[0] = operand(o, s);
    for (int32_t k = 0; k < n_in; k++) ops[1 + k] = operand(c->in[k], s);
    coalesce(s, ops, 1 + n_in);
    return s;
}

/* Launches fill_kernel over out[0] (which has elements) with 32-bit index math when it fits. */
template <typename Gen> int fill(const tide_devcall * c, const Gen & gen) {
    Operands<1> out;
    Shape       shape = shape_of(c, out.o, 0);
    Slice       sl    = slice_of(c, shape.nelem);
    auto        st    = (cudaStream_t)c->stream;
    if (shape.nelem <= (int64_t)UINT32_MAX)
        fill_kernel<uint32_t, Gen><<<grid_of(sl), THREADS, 0, st>>>(shape, out, gen, sl);
    else
        fill_kernel<uint64_t, Gen><<<grid_of(sl), THREADS, 0, st>>>(shape, out, gen, sl);
    return launched(c);
}

/* The largest value of dtype dt below hi (random.c's below): a result capped
 * there stays below high once converted to the result dtype. */
double below(double hi, int32_t dt) {
    if (dt == TIDE_DTYPE_F64) return nextafter(hi, -INFINITY);
    if (dt == TIDE_DTYPE_F16) {
        __half_raw h = __float2half_rn((float)hi);
        if ((double)__half2float(h) < hi) return __half2float(h);
        h.x = (h.x & 0x7fff) == 0 ? 0x8001 : (h.x & 0x8000) ? h.x + 1 : h.x - 1;   /* one step down */
        return __half2float(h);
    }
    if (dt == TIDE_DTYPE_BF16) {
        __nv_bfloat16_raw h = __float2bfloat16_rn((float)hi);
        if ((double)__bfloat162float(h) < hi) return __bfloat162float(h);
        h.x = (h.x & 0x7fff) == 0 ? 0x8001 : (h.x & 0x8000) ? h.x + 1 : h.x - 1;
        return __bfloat162float(h);
    }
    float f = (float)hi;
    return (double)f < hi ? f : nextafterf(f, -INFINITY);
}

int rand_kernel(const tide_devcall * c) {
    int rc = use(c->dev);
    if (rc) return rc;
    double lo = c->p.scalars[0], hi = c->p.scalars[1], span = hi - lo;   /* checked by random.c's shape rule */
    if (c->out[0].nelem == 0) return TIDE_DEVAPI_OK;
    double cap = lo < hi ? fmax(lo, below(hi, c->out[0].dtype)) : hi;
    if (c->compute_dtype == TIDE_DTYPE_F32) return fill(c, Rand32{lo, span, (float)cap});
    if (c->compute_dtype == TIDE_DTYPE_F64) return fill(c, Rand64{lo, span, cap});
    return no_dtype(c, c->compute_dtype);
}

int randn_kernel(const tide_devcall * c) {
    int rc = use(c->dev);
    if (rc) return rc;
    double mean = c->p.scalars[0], std = c->p.scalars[1];   /* checked by random.c's shape rule */
    if (c->out[0].nelem == 0) return TIDE_DEVAPI_OK;
    if (c->compute_dtype == TIDE_DTYPE_F32) return fill(c, Randn<float>{(float)mean, (float)std});
    if (c->compute_dtype == TIDE_DTYPE_F64) return fill(c, Randn<double>{mean, std});
    return no_dtype(c, c->compute_dtype);
}

/* low and the range of [low, high) (0 standing for 2^64), which random.c's
 * shape rule has checked: integers the result dtype holds exactly. */
void randint_bounds(const tide_devcall * c, int64_t * lo_out, uint64_t * range) {
    double   lo   = c->p.scalars[0], hi = c->p.scalars[1];
    int64_t  l    = (int64_t)lo;
    uint64_t last = hi >= 0x1p63 ? (uint64_t)INT64_MAX : (uint64_t)(int64_t)hi - 1;   /* high - 1, exactly */
    *lo_out       = l;
    *range        = last - (uint64_t)l + 1;
}

int randint_kernel(const tide_devcall * c) {
    int rc = use(c->dev);
    if (rc) return rc;
    int64_t  lo    = 0;
    uint64_t range = 0;
    randint_bounds(c, &lo, &range);
    if (c->out[0].nelem == 0) return TIDE_DEVAPI_OK;
    uint64_t l = (uint64_t)lo;
    /* the compute dtypes random.c has loops for (A_NUM) */
    switch (c->compute_dtype) {
    case TIDE_DTYPE_F32: return fill(c, Randint<float>{l, range});
    case TIDE_DTYPE_F64: return fill(c, Randint<double>{l, range});
    case TIDE_DTYPE_I32: return fill(c, Randint<int32_t>{l, range});
    case TIDE_DTYPE_I64: return fill(c, Randint<int64_t>{l, range});
    case TIDE_DTYPE_U8:  return fill(c, Randint<uint8_t>{l, range});
    default:             return no_dtype(c, c->compute_dtype);
    }
}

/* The elements sorted by their random keys, ties by index: LSD radix sort is
 * stable and the indices start in increasing order, which is the order
 * random.c's own radix sort gives, so the permutations agree. */
int randperm_kernel(const tide_devcall * c) {
    int rc = use(c->dev);
    if (rc) return rc;
    const tide_devtensor & o    = c->out[0];
    int64_t                n    = o.nelem;   /* random.c's shape rule checked the dtype holds it */
    int64_t                base = (c->p.flags & TIDE_PARAMF_ONE_BASED) ? 1 : 0;
    if (n == 0) return TIDE_DEVAPI_OK;

    /* keys and indices, each with the second buffer the sort ping-pongs into, then CUB's workspace */
    auto                        st = (cudaStream_t)c->stream;
    cub::DoubleBuffer<uint64_t> keys(nullptr, nullptr);
    cub::DoubleBuffer<int64_t>  idx(nullptr, nullptr);
    size_t                      work = 0;
    cudaError_t err = cub::DeviceRadixSort::SortPairs(nullptr, work, keys, idx, n, 0, 64, st);
    if (err != cudaSuccess) return fail(err, "randperm: sizing the sort");
    size_t bufs = ((size_t)n * 32 + 255) & ~(size_t)255;
    char * mem  = (char *)c->scratch(c->scratch_ctx, bufs + work);
    if (!mem) return TIDE_DEVAPI_OOM;
    uint64_t * k0 = (uint64_t *)mem;
    int64_t *  i0 = (int64_t *)(k0 + 2 * n);
    keys          = cub::DoubleBuffer<uint64_t>(k0, k0 + n);
    idx           = cub::DoubleBuffer<int64_t>(i0, i0 + n);

    Slice sl = slice_of(c, n);
    perm_keys<<<grid_of(sl), THREADS, 0, st>>>(keys.Current(), idx.Current(), sl);
    if ((rc = launched(c))) return rc;
    err = cub::DeviceRadixSort::SortPairs(mem + bufs, work, keys, idx, n, 0, 64, st);
    if (err != cudaSuccess) return fail(err, "randperm: sorting the keys");
    perm_store<<<blocks_for(n), THREADS, 0, st>>>(idx.Current(), o.data, o.dtype, o.strides[0], n, base);
    return launched(c);
}

/* The CPU refuses probabilities outside [0, 1] before drawing, naming the
 * first in p's own row-major order; here a first pass finds it, the call's
 * report takes it back to libtide, and the draw writes nothing then. */
int bernoulli_kernel_fn(const tide_devcall * c) {
    int rc = use(c->dev);
    if (rc) return rc;
    if (c->out[0].nelem == 0) return TIDE_DEVAPI_OK;
    auto st = (cudaStream_t)c->stream;

    /* p's own elements, each once */
    const tide_devtensor & p = c->in[0];
    Shape       ps;
    Operands<1> pop;
    ps.ndim  = p.ndim;
    ps.nelem = p.nelem;
    for (int32_t d = 0; d < TIDE_MAX_DIMS; d++) ps.sizes[d] = d < p.ndim ? p.sizes[d] : 1;
    pop.o[0] = operand(p, ps);
    coalesce(ps, pop.o, 1);
    auto *           bad    = (unsigned long long *)c->scratch(c->scratch_ctx, sizeof(unsigned long long));
    auto *           dev_r  = (tide_devreport *)c->scratch(c->scratch_ctx, sizeof(tide_devreport));
    tide_devreport * host_r = bad && dev_r ? c->report(c->scratch_ctx) : nullptr;
    if (!host_r) return TIDE_DEVAPI_OOM;
    cudaError_t err = cudaMemsetAsync(bad, 0xff, sizeof *bad, st);   /* ~0: none found */
    if (err != cudaSuccess) return fail(err, "bernoulli: cudaMemsetAsync");
    if (ps.nelem <= (int64_t)UINT32_MAX) find_bad_prob<uint32_t><<<blocks_for(ps.nelem), THREADS, 0, st>>>(ps, pop, bad);
    else find_bad_prob<uint64_t><<<blocks_for(ps.nelem), THREADS, 0, st>>>(ps, pop, bad);
    report_bad_prob<<<1, 1, 0, st>>>(ps, pop, bad, dev_r);
    err = cudaMemcpyAsync(host_r, dev_r, sizeof *host_r, cudaMemcpyDefault, st);
    if (err != cudaSuccess) return fail(err, "bernoulli: cudaMemcpyAsync");

    Operands<2> ops;
    Shape       shape = shape_of(c, ops.o, 1);
    Slice       sl    = slice_of(c, shape.nelem);
    unsigned    nb    = grid_of(sl);
    bool        small = shape.nelem <= (int64_t)UINT32_MAX;
    if (c->compute_dtype == TIDE_DTYPE_F32) {
        if (small) bernoulli_kernel<float, uint32_t><<<nb, THREADS, 0, st>>>(shape, ops, sl, bad);
        else bernoulli_kernel<float, uint64_t><<<nb, THREADS, 0, st>>>(shape, ops, sl, bad);
    } else if (c->compute_dtype == TIDE_DTYPE_F64) {
        if (small) bernoulli_kernel<double, uint32_t><<<nb, THREADS, 0, st>>>(shape, ops, sl, bad);
        else bernoulli_kernel<double, uint64_t><<<nb, THREADS, 0, st>>>(shape, ops, sl, bad);
    } else {
        return no_dtype(c, c->compute_dtype);
    }
    return launched(c);
}

}   // namespace

const kernel_entry random_kernels[] = {
    {"rand", rand_kernel},
    {"randn", randn_kernel},
    {"randint", randint_kernel},
    {"randperm", randperm_kernel},
    {"bernoulli", bernoulli_kernel_fn},
    {nullptr, nullptr},
};

}   // namespace tide_cuda
