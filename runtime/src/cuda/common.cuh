/*
 * common.cuh - what the CUDA backend's kernel files share: errors kept for
 * tide_devapi.error_text, the storage and compute types of Tide's dtypes,
 * loads and stores that convert between them, strided (broadcast) element
 * offsets, launch sizes, and the list each file gives of its kernels.
 *
 * A kernel file defines `tide_devkernel_fn`s (engine/device.h) that check
 * what the registry cannot (a dtype pair they lack, say), launch on
 * c->stream and return launched(c). It never waits for the device.
 */
#ifndef TIDE_CUDA_COMMON_CUH
#define TIDE_CUDA_COMMON_CUH

#include "engine/device.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>

#include <type_traits>

struct cublasContext;   /* cublas_v2.h's handle, for the files that use cuBLAS */

namespace tide_cuda {

/* -- errors (backend.cu) ---------------------------------------------------------------- */

/* Keeps a message for error_text on this thread and returns `code`. */
int set_error(int code, const char * fmt, ...) __attribute__((format(printf, 2, 3)));
/* TIDE_DEVAPI_OK for cudaSuccess; otherwise keeps "what: message (name)". */
int fail(cudaError_t err, const char * what);
/* Makes `dev` current on the calling thread. */
int use(int32_t dev);
/* The result of the launches just made for c: the launch error, if any, named by c's op. */
int launched(const tide_devcall * c);
/* The status of a runtime call (a memset, a copy, CUB) made for c: its error
 * is cleared, or launched() would report it again for the next op. */
int checked(const tide_devcall * c, cudaError_t err, const char * what);
/* The error for a dtype a kernel has no instance for (the registry's accepted sets should prevent it). */
int no_dtype(const tide_devcall * c, int32_t dtype);
/* The error for a host number (data NULL) among c's inputs, for the kernels
 * that read their inputs' memory; the Lua API passes none to them, a C caller could. */
int need_memory(const tide_devcall * c);

/* -- toolkit libraries opened on first need (backend.cu) ---------------------------------- */

/* dlopen of the CUDA toolkit's library `stem` ("libnvrtc"): <stem>.so.<major>
 * first, then <stem>.so; each from the loader's search path, then from the
 * toolkit this was built with. NULL if none opens, with the first failure's
 * message (the likeliest) in `why` unless it holds one already. */
void * open_toolkit_library(const char * stem, int major, char * why, size_t why_size);

/* -- dtypes ------------------------------------------------------------------------------- */

/* Bytes per element, as libtide's tide_esize. */
__host__ __device__ inline int32_t esize(int32_t d) { return (int32_t)((0x22118484u >> (4 * d)) & 0xf); }

/* Float to integer saturates and sends NaN to 0, as libtide's tide_store_double:
 * a plain cast is undefined there, and the device's own saturation differs for uint8. */
template <typename S> __host__ __device__ inline int32_t sat32(S x) {
    if (!(x == x)) return 0;
    if (x >= (S)2147483648.0) return INT32_MAX;
    if (x <= (S)-2147483648.0) return INT32_MIN;
    return (int32_t)x;
}
template <typename S> __host__ __device__ inline int64_t sat64(S x) {
    if (!(x == x)) return 0;
    if (x >= (S)9223372036854775808.0) return INT64_MAX;
    if (x <= (S)-9223372036854775808.0) return INT64_MIN;
    return (int64_t)x;
}

/* x as T, converted exactly as tide_convert converts between the dtypes of S and T:
 * bool is x != 0; floats to integers saturate (uint8 from the saturated int32,
 * wrapping); integers to narrower integers wrap. */
template <typename T, typename S> __host__ __device__ inline T cvt(S x) {
    if constexpr (std::is_same_v<T, bool>) return x != (S)0;
    else if constexpr (std::is_floating_point_v<T> || !std::is_floating_point_v<S>) return (T)x;
    else if constexpr (sizeof(T) == 8) return sat64(x);
    else return (T)sat32(x);
}

/* Loads element `off` (in elements) of memory of dtype `dt` as T, converted as
 * tide_convert would (cvt). */
template <typename T> __device__ inline T load_as(const void * base, int32_t dt, int64_t off) {
    switch (dt) {
    case TIDE_DTYPE_F32:  return cvt<T>(((const float *)base)[off]);
    case TIDE_DTYPE_F64:  return cvt<T>(((const double *)base)[off]);
    case TIDE_DTYPE_I32:  return cvt<T>(((const int32_t *)base)[off]);
    case TIDE_DTYPE_I64:  return cvt<T>(((const int64_t *)base)[off]);
    case TIDE_DTYPE_U8:   return cvt<T>(((const uint8_t *)base)[off]);
    case TIDE_DTYPE_BOOL: return cvt<T>(((const uint8_t *)base)[off] != 0);
    case TIDE_DTYPE_F16:  return cvt<T>(__half2float(((const __half *)base)[off]));
    default:              return cvt<T>(__bfloat162float(((const __nv_bfloat16 *)base)[off]));
    }
}

/* The float a compute value rounds to float16/bfloat16 from: integers go through
 * double, as tide_store_double takes them (int64 rounds twice). */
template <typename T> __host__ __device__ inline float half_src(T v) {
    if constexpr (std::is_same_v<T, float>) return v;
    else if constexpr (std::is_same_v<T, bool>) return v ? 1.0f : 0.0f;
    else return (float)(double)v;
}

/* Stores compute value v into element `off` of memory of dtype `dt`, converted as tide_convert would. */
template <typename T> __host__ __device__ inline void store_as(void * base, int32_t dt, int64_t off, T v) {
    switch (dt) {
    case TIDE_DTYPE_F32:  ((float *)base)[off] = cvt<float>(v); break;
    case TIDE_DTYPE_F64:  ((double *)base)[off] = cvt<double>(v); break;
    case TIDE_DTYPE_I32:  ((int32_t *)base)[off] = cvt<int32_t>(v); break;
    case TIDE_DTYPE_I64:  ((int64_t *)base)[off] = cvt<int64_t>(v); break;
    case TIDE_DTYPE_U8:   ((uint8_t *)base)[off] = cvt<uint8_t>(v); break;
    case TIDE_DTYPE_BOOL: ((uint8_t *)base)[off] = cvt<bool>(v); break;
    case TIDE_DTYPE_F16:  ((__half *)base)[off] = __float2half_rn(half_src(v)); break;
    default:              ((__nv_bfloat16 *)base)[off] = __float2bfloat16_rn(half_src(v)); break;
    }
}

/* Calls f(T()) with T the C type that computes in `dt` (a compute dtype:
 * float32, float64, int32, int64, uint8 or bool as uint8); false for any other. */
template <typename F> inline bool dispatch_compute(int32_t dt, F && f) {
    switch (dt) {
    case TIDE_DTYPE_F32:  f(float()); return true;
    case TIDE_DTYPE_F64:  f(double()); return true;
    case TIDE_DTYPE_I32:  f(int32_t()); return true;
    case TIDE_DTYPE_I64:  f(int64_t()); return true;
    case TIDE_DTYPE_U8:
    case TIDE_DTYPE_BOOL: f(uint8_t()); return true;
    default:              return false;
    }
}

/* -- strided operands --------------------------------------------------------------------- */

/* An operand of a kernel over an iteration shape: its memory, dtype and
 * strides per dim of that shape (0 along broadcast dims). A host number has
 * data NULL and its value in `value`/`ivalue`. Passed to kernels by value. */
struct Operand {
    const void * data;
    int32_t      dtype;
    int64_t      strides[TIDE_MAX_DIMS];
    double       value;
    int64_t      ivalue;
};

/* The iteration shape: sizes, innermost last. */
struct Shape {
    int32_t ndim;
    int64_t sizes[TIDE_MAX_DIMS];
    int64_t nelem;
};

/* t as an operand over `shape`, into which it broadcasts (right-aligned). */
inline Operand operand(const tide_devtensor & t, const Shape & shape) {
    Operand o;
    o.data   = t.data;
    o.dtype  = t.dtype;
    o.value  = t.value;
    o.ivalue = t.ivalue;
    for (int32_t d = 0; d < TIDE_MAX_DIMS; d++) o.strides[d] = 0;
    int32_t lead = shape.ndim - t.ndim;
    for (int32_t d = 0; d < t.ndim && t.data; d++)
        o.strides[lead + d] = t.sizes[d] == 1 ? 0 : t.strides[d];
    return o;
}

/* Merges adjacent dims of `shape` that every one of the n operands walks as
 * one (stride[d] == stride[d+1] * size[d+1] for each), and drops size-1 dims:
 * a dense tensor becomes one dim, and the offsets below take fewer divisions. */
inline void coalesce(Shape & shape, Operand * ops, int32_t n) {
    int32_t out = 0;
    for (int32_t d = 0; d < shape.ndim; d++) {
        if (shape.sizes[d] == 1) continue;
        bool merge = out > 0;
        for (int32_t k = 0; merge && k < n; k++)
            merge = ops[k].strides[out - 1] == ops[k].strides[d] * shape.sizes[d];
        if (merge) {
            shape.sizes[out - 1] *= shape.sizes[d];
            for (int32_t k = 0; k < n; k++) ops[k].strides[out - 1] = ops[k].strides[d];
        } else {
            shape.sizes[out] = shape.sizes[d];
            for (int32_t k = 0; k < n; k++) ops[k].strides[out] = ops[k].strides[d];
            out++;
        }
    }
    shape.ndim = out;
    for (int32_t d = out; d < TIDE_MAX_DIMS; d++) {
        shape.sizes[d] = 1;
        for (int32_t k = 0; k < n; k++) ops[k].strides[d] = 0;
    }
}

/* The offsets (in elements) of row-major element i of `shape` in up to N
 * operands at once: one pass of divisions serves them all. I is the index
 * type: uint32_t when the shape has fewer than 2^32 elements (cheaper
 * divisions), else uint64_t. */
template <int N, typename I>
__device__ inline void offsets(const Shape & shape, const Operand * ops, I i, int64_t * off) {
    for (int32_t k = 0; k < N; k++) off[k] = 0;
    for (int32_t d = shape.ndim - 1; d >= 0; d--) {
        I size = (I)shape.sizes[d];
        I idx  = d ? i % size : i;
        i      = d ? i / size : 0;
        for (int32_t k = 0; k < N; k++) off[k] += (int64_t)idx * ops[k].strides[d];
    }
}

/* Iterations below this many elements index in 32 bits: cheaper divisions,
 * and a grid-stride step from below 2^31 cannot wrap a uint32_t. */
constexpr int64_t SMALL = (int64_t)1 << 31;

/* t's shape as an iteration shape (0-d: no dims, one element). */
inline Shape shape_of(const tide_devtensor & t) {
    Shape s;
    s.ndim  = t.ndim;
    s.nelem = t.nelem;
    for (int32_t d = 0; d < TIDE_MAX_DIMS; d++) s.sizes[d] = d < t.ndim ? t.sizes[d] : 1;
    return s;
}

/* Up to N operands, passed to a kernel by value. */
template <int N> struct Operands {
    Operand o[N];
};

/* offsets() with the loop over dims unrolled to TIDE_MAX_DIMS: there the
 * runtime bound makes ptxas copy the Shape to a local-memory stack frame (80
 * bytes, read back on every element); here every index is a constant. */
template <int N, typename I>
__device__ inline void offsets_of(const Shape & s, const Operand * ops, I i, int64_t * off) {
    for (int k = 0; k < N; k++) off[k] = 0;
#pragma unroll
    for (int d = TIDE_MAX_DIMS - 1; d >= 0; d--) {
        if (d >= s.ndim) continue;
        I size = (I)s.sizes[d];
        I idx  = d ? i % size : i;
        i      = d ? i / size : 0;
        for (int k = 0; k < N; k++) off[k] += (int64_t)idx * ops[k].strides[d];
    }
}

/* Whether a and b are the same view of the same memory. */
inline bool same_view(const tide_devtensor & a, const tide_devtensor & b) {
    if (a.data != b.data || a.dtype != b.dtype || a.ndim != b.ndim) return false;
    for (int32_t d = 0; d < a.ndim; d++)
        if (a.sizes[d] != b.sizes[d] || a.strides[d] != b.strides[d]) return false;
    return true;
}

/* Operand k's value at offset `off` as T (its host number when it has no data). */
template <typename T> __device__ inline T read(const Operand & o, int64_t off) {
    if (!o.data)
        return o.dtype == TIDE_DTYPE_F32 || o.dtype == TIDE_DTYPE_F64 || o.dtype >= TIDE_DTYPE_F16 ? cvt<T>(o.value)
                                                                                                  : cvt<T>(o.ivalue);
    return load_as<T>(o.data, o.dtype, off);
}

/* -- launches ----------------------------------------------------------------------------- */

enum { THREADS = 256 };

/* Blocks for a grid-stride loop over n items: enough to fill the device, not
 * one per item for huge n. */
inline unsigned blocks_for(int64_t n, int32_t threads = THREADS) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    return (unsigned)(b < 65536 ? b : 65536);
}

/* Scratch carved into parts: each starts 256-byte aligned. */
inline size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* -- cuBLAS (blas.cu) --------------------------------------------------------------------- */

/* The device's cuBLAS handle, held by one caller at a time: locked from
 * blas_handle() until the BlasHandle goes out of scope. */
struct BlasHandle {
    cublasContext * h   = nullptr;
    int32_t         dev = -1;
    BlasHandle()        = default;
    BlasHandle(const BlasHandle &) = delete;
    BlasHandle & operator=(const BlasHandle &) = delete;
    ~BlasHandle();
};

/* Takes c's device's cuBLAS handle (made on first use, kept for the process)
 * into `out`, set to c's stream, host pointer mode and math mode `math` (a
 * cublasMath_t). On an error, with its message naming c's op, nothing is held. */
int blas_handle(const tide_devcall * c, int math, BlasHandle & out);

/* -- the kernels of a file ---------------------------------------------------------------- */

struct kernel_entry {
    const char *      name;    /* the op's registry name */
    tide_devkernel_fn fn;
};

/* Each kernel file's list, ended by {nullptr, nullptr}; backend.cu's kernel() looks in all. */
extern const kernel_entry ew_kernels[];
extern const kernel_entry reduce_kernels[];
extern const kernel_entry blas_kernels[];
extern const kernel_entry random_kernels[];
extern const kernel_entry index_kernels[];
extern const kernel_entry pool_kernels[];
extern const kernel_entry sort_kernels[];
extern const kernel_entry linalg_kernels[];

}   // namespace tide_cuda

#endif
