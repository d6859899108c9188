/*
 * ew.cu - the CUDA kernels of the elementwise ops (arithmetic, comparisons,
 * logic, where, the fused updates, the transcendental functions, copy), of the
 * creation ops (full, arange, linspace, eye) and of the shaping ops that are
 * strided copies (flip, repeat, tril, triu, cat, stack). Values follow the CPU
 * kernels (ops/cpu/binary.c, transcend.c, create.c, shape.c) and libtide's
 * dtype conversions; reductions, matmuls and random ops live beside this file.
 */
#include "common.cuh"

#define TIDE_SHARED_FN static __host__ __device__ inline
#include "ops/cpu/shared.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <type_traits>

namespace tide_cuda {
namespace {

/* -- compute types and conversions ------------------------------------------------------- */

/* The C++ type of each compute dtype. bool computes as C++ bool (one byte in
 * memory, 0 or 1) rather than as uint8, so that the op functors tell the two
 * apart by type: bool's add is or, uint8's wraps. */
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr int32_t value = TIDE_DTYPE_F32; };
template <> struct dtype_of<double> { static constexpr int32_t value = TIDE_DTYPE_F64; };
template <> struct dtype_of<int32_t> { static constexpr int32_t value = TIDE_DTYPE_I32; };
template <> struct dtype_of<int64_t> { static constexpr int32_t value = TIDE_DTYPE_I64; };
template <> struct dtype_of<uint8_t> { static constexpr int32_t value = TIDE_DTYPE_U8; };
template <> struct dtype_of<bool> { static constexpr int32_t value = TIDE_DTYPE_BOOL; };

/* How a compute type is stored. */
template <typename T> using Stor = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

template <typename T> constexpr bool is_float = std::is_floating_point_v<T>;
template <typename T> constexpr bool is_bool  = std::is_same_v<T, bool>;

bool is_float_dtype(int32_t d) {
    return d == TIDE_DTYPE_F32 || d == TIDE_DTYPE_F64 || d == TIDE_DTYPE_F16 || d == TIDE_DTYPE_BF16;
}
/* float16 and bfloat16 storage computes in float32 (tide_dtype_compute) */
int32_t compute_of(int32_t d) { return d == TIDE_DTYPE_F16 || d == TIDE_DTYPE_BF16 ? TIDE_DTYPE_F32 : d; }

/* A host number as T: its dtype's value converted like any element of that dtype. */
template <typename T> T host_value(const tide_devtensor & t) {
    return is_float_dtype(t.dtype) ? cvt<T>(t.value) : cvt<T>(t.ivalue);
}

/* Makes o a host number holding v, already in the compute type, so that reading
 * it back with a plain cast (get below) is exact. common.cuh's read() casts the
 * original value instead, which neither saturates nor makes 0.5 true for bool. */
template <typename T> void hold(Operand & o, T v) {
    o.data = nullptr;
    if constexpr (is_float<T>) {
        o.value  = (double)v;
        o.ivalue = 0;
    } else {
        o.value  = 0;
        o.ivalue = (int64_t)v;
    }
}

template <typename T> __device__ inline T get(const Operand & o, int64_t off) {
    if (!o.data) {
        if constexpr (is_float<T>) return (T)o.value;
        else return (T)o.ivalue;
    }
    return load_as<T>(o.data, o.dtype, off);
}

/* A host number of value v, for the constants some ops add as operands (the
 * value of masked_fill, the bounds of clamp, the false of logical_not). */
tide_devtensor number(double v) {
    tide_devtensor t;
    memset(&t, 0, sizeof t);
    t.dtype = TIDE_DTYPE_F64;
    t.nelem = 1;
    t.value = v;
    return t;
}

#include "ewmath.cuh"

/* Integer arithmetic wraps (two's complement), done in the unsigned type as binary.c does. */
template <typename T> __device__ inline T wadd(T a, T b) {
    using U = std::make_unsigned_t<T>;
    return (T)(U)((U)a + (U)b);
}
template <typename T> __device__ inline T wsub(T a, T b) {
    using U = std::make_unsigned_t<T>;
    return (T)(U)((U)a - (U)b);
}
template <typename T> __device__ inline T wmul(T a, T b) {
    using U = std::make_unsigned_t<T>;
    return (T)(U)((U)a * (U)b);
}
template <typename T> __device__ inline T wneg(T a) { return wsub((T)0, a); }

/* binary.c's integer remainder: the divisor's sign; by 0 (and by -1, which could trap) 0. */
__device__ inline int64_t iremainder(int64_t a, int64_t b) {
    if (b == 0 || b == -1) return 0;
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

/* -- the ops, by family ----------------------------------------------------------------------- */

/* A family is one functor over the op code: each family has one kernel per dtype
 * whatever its number of ops, which keeps the build time and the library size in
 * check; the switch on a code that every thread shares costs a few instructions
 * per element of a loop bound by memory. */
enum : int32_t {
    NEG, ABS, RELU, FLOOR, CEIL, ROUND, SIGN, TRUNC,                            /* Unary */
    EXP, LOG, LOG1P, EXPM1, SQRT, RSQRT, SIN, COS, TANH, SIGMOID, SILU, GELU,   /* Transcend */
    GELU_TANH, RECIPROCAL, TAN, ASIN, ACOS, ATAN, SINH, COSH, ASINH, ACOSH, ATANH,
    ERF, ERFC, ERFINV, LOG2, LOG10, EXP2,
    LGAMMA, DIGAMMA, POLYGAMMA, I0, I0E, I1, I1E,                               /* Special */
    ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM,                                       /* Arith */
    POW, FMOD, REMAINDER, ATAN2, GELU_GRAD, GELU_TANH_GRAD, FLOOR_DIVIDE,       /* Heavy */
    EQ, NE, LT, LE, GT, GE,                                                     /* Cmp */
    WHERE, CLAMP, ADD_SCALED, LERP,                                             /* Ternary */
    ADDCMUL, ADDCDIV,                                                           /* Quaternary */
};

/* The cheap unary ops of every numeric dtype. */
struct Unary {
    int32_t op;
    template <typename T> __device__ T operator()(T a) const {
        if constexpr (is_float<T>) {
            switch (op) {   /* ewmath.cuh */
            case NEG:   return f_neg(a);
            case ABS:   return f_abs(a);
            case RELU:  return f_relu(a);
            case FLOOR: return f_floor(a);
            case CEIL:  return f_ceil(a);
            case ROUND: return f_round(a);
            case TRUNC: return f_trunc(a);
            default:    return f_sign(a);
            }
        } else if constexpr (std::is_signed_v<T>) {
            switch (op) {
            case NEG:  return wneg(a);
            case ABS:  return a < 0 ? wneg(a) : a;
            case RELU: return a > 0 ? a : (T)0;
            case SIGN: return (T)((a > 0) - (a < 0));
            default:   return a;   /* FLOOR, CEIL, ROUND, TRUNC */
            }
        } else {
            switch (op) {
            case NEG:  return wneg(a);
            case SIGN: return (T)(a > 0);
            default:   return a;   /* ABS, RELU, FLOOR, CEIL, ROUND, TRUNC */
            }
        }
    }
};

/* The transcendental unary ops (float32 and float64). */
struct Transcend {
    int32_t op;
    template <typename T> __device__ T operator()(T a) const {
        switch (op) {   /* ewmath.cuh */
        case EXP:       return f_exp(a);
        case LOG:       return f_log(a);
        case LOG1P:     return f_log1p(a);
        case EXPM1:     return f_expm1(a);
        case SQRT:      return f_sqrt(a);
        case RSQRT:     return f_rsqrt(a);
        case SIN:       return f_sin(a);
        case COS:       return f_cos(a);
        case TANH:      return f_tanh(a);
        case SIGMOID:   return f_sigmoid(a);
        case SILU:      return f_silu(a);
        case GELU:      return f_gelu(a, false);
        case GELU_TANH: return f_gelu(a, true);
        case TAN:       return f_tan(a);
        case ASIN:      return f_asin(a);
        case ACOS:      return f_acos(a);
        case ATAN:      return f_atan(a);
        case SINH:      return f_sinh(a);
        case COSH:      return f_cosh(a);
        case ASINH:     return f_asinh(a);
        case ACOSH:     return f_acosh(a);
        case ATANH:     return f_atanh(a);
        case ERF:       return f_erf(a);
        case ERFC:      return f_erfc(a);
        case ERFINV:    return f_erfinv(a);
        case LOG2:      return f_log2(a);
        case LOG10:     return f_log10(a);
        case EXP2:      return f_exp2(a);
        default:        return f_reciprocal(a);
        }
    }
};

/* The gamma family and the Bessel functions (float32 and float64, computed in
 * double), kept apart from Transcend so that their registers and local array do
 * not slow the others. */
struct Special {
    int32_t   op;
    long long n;   /* polygamma's order */
    template <typename T> __device__ T operator()(T a) const {
        switch (op) {   /* ewmath.cuh */
        case LGAMMA:  return f_lgamma(a);
        case DIGAMMA: return f_digamma(a);
        case I0:      return f_i0(a);
        case I0E:     return f_i0e(a);
        case I1:      return f_i1(a);
        case I1E:     return f_i1e(a);
        default:      return f_polygamma(a, n);
        }
    }
};

/* The cheap binary ops. bool: add and maximum are or, mul and minimum and. */
struct Arith {
    int32_t op;
    template <typename T> __device__ T operator()(T a, T b) const {
        if constexpr (is_bool<T>) {
            return op == ADD || op == MAXIMUM ? (a || b) : (a && b);
        } else {
            switch (op) {
            case ADD: if constexpr (is_float<T>) return f_add(a, b); else return wadd(a, b);
            case SUB: if constexpr (is_float<T>) return f_sub(a, b); else return wsub(a, b);
            case MUL: if constexpr (is_float<T>) return f_mul(a, b); else return wmul(a, b);
            case DIV: if constexpr (is_float<T>) return f_div(a, b); else return a;   /* float only */
            case MAXIMUM: if constexpr (is_float<T>) return f_maximum(a, b); else return a > b ? a : b;
            default:      if constexpr (is_float<T>) return f_minimum(a, b); else return a < b ? a : b;
            }
        }
    }
};

/* The costly binary ops, kept apart so that their registers do not slow Arith. */
struct Heavy {
    int32_t op;
    template <typename T> __device__ T operator()(T a, T b) const {
        if constexpr (is_float<T>) {
            switch (op) {   /* ewmath.cuh */
            case POW:       return f_pow(a, b);
            case FMOD:      return f_fmod(a, b);
            case REMAINDER: return f_remainder(a, b);
            case ATAN2:     return f_atan2(a, b);
            case FLOOR_DIVIDE: return f_floor_divide(a, b);
            case GELU_GRAD: return f_gelu_backward(a, b, false);
            default:        return f_gelu_backward(a, b, true);
            }
        } else {
            switch (op) {
            case POW: return (T)tide_ipow((int64_t)a, (int64_t)b);
            /* by 0 is 0 (PyTorch raises; a kernel must not trap), and by -1 too (INT_MIN % -1 traps) */
            case FMOD:
                if constexpr (std::is_signed_v<T>) return b == 0 || b == -1 ? (T)0 : (T)(a % b);
                else return b == 0 ? (T)0 : (T)(a % b);
            /* exactly, as the CPU (binary.c): by 0 is 0, by -1 negates with wrapping */
            case FLOOR_DIVIDE:
                if constexpr (std::is_signed_v<T>) {
                    if (b == 0) return (T)0;
                    if (b == -1) return (T)(0 - (uint64_t)(int64_t)a);
                    T q = a / b, r = a % b;
                    return (r != 0 && ((r < 0) != (b < 0))) ? (T)(q - 1) : q;
                } else {
                    return b == 0 ? (T)0 : (T)(a / b);
                }
            default: return (T)iremainder((int64_t)a, (int64_t)b);
            }
        }
    }
};

/* Comparisons, in the compute dtype, to bool. */
struct Cmp {
    int32_t op;
    template <typename T> __device__ bool operator()(T a, T b) const {
        switch (op) {
        case EQ: return a == b;
        case NE: return a != b;
        case LT: return a < b;
        case LE: return a <= b;
        case GT: return a > b;
        default: return a >= b;
        }
    }
};

/* where(cond, a, b), clamp(x, lo, hi), add_scaled(a, b, alpha), lerp(x, end, weight). */
struct Ternary {
    int32_t op;
    template <typename T> __device__ T operator()(T a, T b, T d) const {
        if (op == WHERE) return f_where(a, b, d);
        if constexpr (!is_bool<T>) {
            if (op == CLAMP) return f_clamp(a, b, d);   /* an integer's absent bounds are its extremes */
            if constexpr (is_float<T>) {
                return op == ADD_SCALED ? f_add_scaled(a, b, d) : f_lerp(a, b, d);
            } else {
                return wadd(a, wmul(d, b));   /* ADD_SCALED */
            }
        }
        return a;   /* bool takes only WHERE */
    }
};

/* addcmul(x, t1, t2, value) = x + value t1 t2; addcdiv(...) = x + value t1 / t2, in PyTorch's order. */
struct Quaternary {
    int32_t op;
    template <typename T> __device__ T operator()(T a, T b, T d, T e) const {
        if constexpr (is_float<T>) {
            return op == ADDCMUL ? f_addcmul(a, b, d, e) : f_addcdiv(a, b, d, e);
        } else {
            return wadd(a, wmul(wmul(e, b), d));   /* ADDCMUL (addcdiv is float only) */
        }
    }
};

/* -- the elementwise kernels --------------------------------------------------------------------- */

template <int N, typename F, typename T> __device__ inline auto call(const F & f, const T * a) {
    if constexpr (N == 1) return f(a[0]);
    else if constexpr (N == 2) return f(a[0], a[1]);
    else if constexpr (N == 3) return f(a[0], a[1], a[2]);
    else return f(a[0], a[1], a[2], a[3]);
}

/* Elements per thread and iteration of the dense kernel: 16 bytes of input, or 4. */
template <typename T> constexpr int lanes = sizeof(T) == 8 ? 2 : 4;

template <typename S, int V> struct alignas(sizeof(S) * V) Pack {
    S v[V];
};

/* The dtypes the dense kernel loads and stores in packs for compute type T: T's
 * own, and for float the float16/bfloat16 storage that computes in it. */
template <typename T> bool packable(int32_t dt) {
    return dt == dtype_of<T>::value ||
           (std::is_same_v<T, float> && (dt == TIDE_DTYPE_F16 || dt == TIDE_DTYPE_BF16));
}

template <typename T, int V> __device__ inline void load_pack(const void * p, int32_t dt, int64_t i, T * x) {
    if constexpr (std::is_same_v<T, float>) {
        if (dt == TIDE_DTYPE_F16) {
            Pack<__half, V> h = ((const Pack<__half, V> *)p)[i];
            for (int e = 0; e < V; e++) x[e] = __half2float(h.v[e]);
            return;
        }
        if (dt == TIDE_DTYPE_BF16) {
            Pack<__nv_bfloat16, V> h = ((const Pack<__nv_bfloat16, V> *)p)[i];
            for (int e = 0; e < V; e++) x[e] = __bfloat162float(h.v[e]);
            return;
        }
    }
    Pack<Stor<T>, V> q = ((const Pack<Stor<T>, V> *)p)[i];
    for (int e = 0; e < V; e++) x[e] = (T)q.v[e];
}

template <typename O, int V> __device__ inline void store_pack(void * p, int32_t dt, int64_t i, const O * r) {
    if constexpr (std::is_same_v<O, float>) {
        if (dt == TIDE_DTYPE_F16) {
            Pack<__half, V> h;
            for (int e = 0; e < V; e++) h.v[e] = __float2half_rn(r[e]);
            ((Pack<__half, V> *)p)[i] = h;
            return;
        }
        if (dt == TIDE_DTYPE_BF16) {
            Pack<__nv_bfloat16, V> h;
            for (int e = 0; e < V; e++) h.v[e] = __float2bfloat16_rn(r[e]);
            ((Pack<__nv_bfloat16, V> *)p)[i] = h;
            return;
        }
    }
    Pack<Stor<O>, V> q;
    for (int e = 0; e < V; e++) q.v[e] = (Stor<O>)r[e];
    ((Pack<Stor<O>, V> *)p)[i] = q;
}

/* The dense case: out and every input contiguous over the same elements, in a
 * packable dtype (or one value repeated), loaded and stored in packs. */
template <typename T, typename O, int N> struct Dense {
    void *       out;
    const void * in[N];    /* a contiguous input, or nullptr for one value */
    const void * one[N];   /* a one-element device input, read once per thread */
    T            k[N];     /* a host number, converted on the host */
    int32_t      out_dt, dt[N];
};

template <typename T, typename O, int N, typename F>
__global__ void __launch_bounds__(THREADS) dense_kernel(Dense<T, O, N> a, int64_t n, F f) {
    constexpr int V = lanes<T>;
    T             k[N];
    for (int j = 0; j < N; j++) k[j] = a.one[j] ? load_as<T>(a.one[j], a.dt[j], 0) : a.k[j];
    int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    int64_t packs = n / V;
    for (int64_t p = first; p < packs; p += step) {
        T x[N][V];
        for (int j = 0; j < N; j++) {
            if (a.in[j]) load_pack<T, V>(a.in[j], a.dt[j], p, x[j]);
            else for (int e = 0; e < V; e++) x[j][e] = k[j];
        }
        O r[V];
        for (int e = 0; e < V; e++) {
            T arg[N];
            for (int j = 0; j < N; j++) arg[j] = x[j][e];
            r[e] = call<N>(f, arg);
        }
        store_pack<O, V>(a.out, a.out_dt, p, r);
    }
    for (int64_t i = packs * V + first; i < n; i += step) {   /* the last n % V */
        T arg[N];
        for (int j = 0; j < N; j++) arg[j] = a.in[j] ? load_as<T>(a.in[j], a.dt[j], i) : k[j];
        store_as<O>(a.out, a.out_dt, i, call<N>(f, arg));
    }
}

/* Any strides, broadcasting and dtypes: operand 0 is out, converted on the way in and out. */
template <typename T, typename O, int N, typename F, typename I>
__global__ void __launch_bounds__(THREADS) strided_kernel(Shape s, Operands<N + 1> ops, F f) {
    I n = (I)s.nelem, step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t off[N + 1];
        offsets_of<N + 1, I>(s, ops.o, i, off);
        T arg[N];
        for (int j = 0; j < N; j++) arg[j] = get<T>(ops.o[j + 1], off[j + 1]);
        store_as<O>((void *)ops.o[0].data, ops.o[0].dtype, off[0], call<N>(f, arg));
    }
}

/* t as an operand over s. operand() writes out of bounds for a t of more dims than
 * s, which a shape rule gone wrong could give: an error then, not a corruption. */
int over(const tide_devcall * c, const tide_devtensor & t, const Shape & s, Operand & o) {
    if (t.ndim > s.ndim)
        return set_error(TIDE_DEVAPI_ERROR, "%s: a %d-d operand does not broadcast to the %d-d result", c->op, t.ndim,
                         s.ndim);
    o = operand(t, s);
    return TIDE_DEVAPI_OK;
}

/* Whether operand o walks the coalesced shape s one element at a time. */
bool dense(const Shape & s, const Operand & o) { return s.ndim == 0 || (s.ndim == 1 && o.strides[0] == 1); }

bool aligned(const void * p, size_t a) { return (uintptr_t)p % a == 0; }

/* Launches out = f(in...) computed in T, the result (O: T, or bool for comparisons)
 * converted to out's dtype. */
template <typename T, typename O, int N, typename F>
int run_ew(const tide_devcall * c, const tide_devtensor * const * in, F f) {
    const tide_devtensor & out = c->out[0];
    int64_t                n   = out.nelem;
    if (n == 0) return TIDE_DEVAPI_OK;
    Shape           s = shape_of(out);
    Operands<N + 1> ops;
    if (int rc = over(c, out, s, ops.o[0])) return rc;
    for (int j = 0; j < N; j++) {
        if (int rc = over(c, *in[j], s, ops.o[j + 1])) return rc;
        if (!in[j]->data) hold<T>(ops.o[j + 1], host_value<T>(*in[j]));
    }
    coalesce(s, ops.o, N + 1);
    constexpr int  V = lanes<T>;
    Dense<T, O, N> d;
    bool fast = packable<O>(out.dtype) && dense(s, ops.o[0]) && aligned(out.data, V * (size_t)esize(out.dtype));
    d.out     = out.data;
    d.out_dt  = out.dtype;
    for (int j = 0; j < N; j++) {
        const tide_devtensor & t = *in[j];
        d.in[j]  = nullptr;
        d.one[j] = nullptr;
        d.k[j]   = T();
        d.dt[j]  = t.dtype;
        if (!t.data) d.k[j] = host_value<T>(t);
        else if (t.nelem == 1) d.one[j] = t.data;
        else if (packable<T>(t.dtype) && dense(s, ops.o[j + 1]) && aligned(t.data, V * (size_t)esize(t.dtype)))
            d.in[j] = t.data;
        else fast = false;
    }
    cudaStream_t st = (cudaStream_t)c->stream;
    if (fast) dense_kernel<T, O, N><<<blocks_for((n + V - 1) / V), THREADS, 0, st>>>(d, n, f);
    else if (n < SMALL) strided_kernel<T, O, N, F, uint32_t><<<blocks_for(n), THREADS, 0, st>>>(s, ops, f);
    else strided_kernel<T, O, N, F, uint64_t><<<blocks_for(n), THREADS, 0, st>>>(s, ops, f);
    return launched(c);
}

/* Compute dtypes an op accepts (ops.def's A_FLOAT, A_NUM, A_ALL): only those get kernels. */
constexpr unsigned A_FLOAT = 1u << TIDE_DTYPE_F32 | 1u << TIDE_DTYPE_F64;
constexpr unsigned A_NUM   = A_FLOAT | 1u << TIDE_DTYPE_I32 | 1u << TIDE_DTYPE_I64 | 1u << TIDE_DTYPE_U8;
constexpr unsigned A_ALL   = A_NUM | 1u << TIDE_DTYPE_BOOL;

/* f(T()) for T the compute type of dt, if A has it. */
template <unsigned A, typename F> int dispatch(const tide_devcall * c, int32_t dt, F && f) {
    switch (dt) {
    case TIDE_DTYPE_F32:
        if constexpr ((A >> TIDE_DTYPE_F32) & 1) return f(float());
        break;
    case TIDE_DTYPE_F64:
        if constexpr ((A >> TIDE_DTYPE_F64) & 1) return f(double());
        break;
    case TIDE_DTYPE_I32:
        if constexpr ((A >> TIDE_DTYPE_I32) & 1) return f(int32_t());
        break;
    case TIDE_DTYPE_I64:
        if constexpr ((A >> TIDE_DTYPE_I64) & 1) return f(int64_t());
        break;
    case TIDE_DTYPE_U8:
        if constexpr ((A >> TIDE_DTYPE_U8) & 1) return f(uint8_t());
        break;
    case TIDE_DTYPE_BOOL:
        if constexpr ((A >> TIDE_DTYPE_BOOL) & 1) return f(bool());
        break;
    default: break;
    }
    return no_dtype(c, dt);
}

/* An elementwise op of family F on inputs `in`, in c's compute dtype. */
template <unsigned A, typename F, bool TO_BOOL = false, int N>
int ew(const tide_devcall * c, F f, const tide_devtensor * const (&in)[N]) {
    if (int rc = use(c->dev)) return rc;
    return dispatch<A>(c, c->compute_dtype, [&](auto t) {
        using T = decltype(t);
        return run_ew<T, std::conditional_t<TO_BOOL, bool, T>, N>(c, in, f);
    });
}

/* -- elementwise op entries ------------------------------------------------------------------------ */

template <int32_t OP> int k_unary(const tide_devcall * c) {
    const tide_devtensor * in[] = {&c->in[0]};
    return ew<A_NUM>(c, Unary{OP}, in);
}

template <int32_t OP> int k_transcend(const tide_devcall * c) {
    const tide_devtensor * in[] = {&c->in[0]};
    return ew<A_FLOAT>(c, Transcend{OP}, in);
}

/* polygamma's n is ints[0], checked non-negative by its shape rule */
template <int32_t OP> int k_special(const tide_devcall * c) {
    const tide_devtensor * in[] = {&c->in[0]};
    return ew<A_FLOAT>(c, Special{OP, OP == POLYGAMMA ? (long long)c->p.ints[0] : 0}, in);
}

int k_gelu(const tide_devcall * c) {
    const tide_devtensor * in[] = {&c->in[0]};
    return ew<A_FLOAT>(c, Transcend{c->p.flags & 1 ? GELU_TANH : GELU}, in);
}

template <unsigned A, int32_t OP> int k_arith(const tide_devcall * c) {
    const tide_devtensor * in[] = {&c->in[0], &c->in[1]};
    return ew<A>(c, Arith{OP}, in);
}

template <unsigned A, int32_t OP> int k_heavy(const tide_devcall * c) {
    const tide_devtensor * in[] = {&c->in[0], &c->in[1]};
    return ew<A>(c, Heavy{OP}, in);
}

/* Integer division by zero is the op's error, as on the CPU (binary.c): before
 * the op runs, the divisor's first zero (row-major) goes to the call's report. */
template <typename I>
__global__ void __launch_bounds__(THREADS)
    find_zero(const __grid_constant__ Shape shape, const __grid_constant__ Operands<1> d, unsigned long long * first) {
    uint64_t step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (uint64_t)shape.nelem; i += step) {
        int64_t off;
        offsets<1, I>(shape, d.o, (I)i, &off);
        if (read<int64_t>(d.o[0], off) == 0) atomicMin(first, (unsigned long long)i);
    }
}

/* value: the element, or -1 for a 0-d divisor (the CPU's message names none) */
__global__ void report_zero(const unsigned long long * first, bool dim0, tide_devreport * r) {
    r->code = TIDE_DEVREPORT_NONE;
    if (*first == ~0ull) return;
    r->code  = TIDE_DEVREPORT_ZERO_DIVISOR;
    r->value = dim0 ? -1 : (int64_t)*first;
}

int check_divisor(const tide_devcall * c) {
    int32_t dt = c->compute_dtype;
    if (dt == TIDE_DTYPE_F32 || dt == TIDE_DTYPE_F64 || dt == TIDE_DTYPE_F16 || dt == TIDE_DTYPE_BF16 ||
        c->out[0].nelem == 0)
        return TIDE_DEVAPI_OK;
    const tide_devtensor & d = c->in[1];
    if (!d.data)   /* a host number */
        return d.value == 0 ? set_error(TIDE_DEVAPI_ERROR, "%s: integer division by zero", c->op)
                            : TIDE_DEVAPI_OK;
    cudaStream_t st = (cudaStream_t)c->stream;
    Shape        ds = shape_of(d);
    Operands<1>  dop;
    dop.o[0] = operand(d, ds);
    coalesce(ds, dop.o, 1);   /* keeps the row-major order of the elements */
    auto *           first  = (unsigned long long *)c->scratch(c->scratch_ctx, sizeof(unsigned long long));
    auto *           dev_r  = (tide_devreport *)c->scratch(c->scratch_ctx, sizeof(tide_devreport));
    tide_devreport * host_r = first && dev_r ? c->report(c->scratch_ctx) : nullptr;
    if (!host_r) return TIDE_DEVAPI_OOM;
    cudaError_t err = cudaMemsetAsync(first, 0xff, sizeof *first, st);   /* ~0: none found */
    if (err != cudaSuccess) return fail(err, "integer division: cudaMemsetAsync");
    if (ds.nelem <= (int64_t)UINT32_MAX) find_zero<uint32_t><<<blocks_for(ds.nelem), THREADS, 0, st>>>(ds, dop, first);
    else find_zero<uint64_t><<<blocks_for(ds.nelem), THREADS, 0, st>>>(ds, dop, first);
    report_zero<<<1, 1, 0, st>>>(first, d.ndim == 0, dev_r);
    err = cudaMemcpyAsync(host_r, dev_r, sizeof *host_r, cudaMemcpyDefault, st);
    return err == cudaSuccess ? TIDE_DEVAPI_OK : fail(err, "integer division: cudaMemcpyAsync");
}

template <unsigned A, int32_t OP> int k_dividing(const tide_devcall * c) {
    if (int rc = check_divisor(c)) return rc;
    return k_heavy<A, OP>(c);
}

int k_gelu_backward(const tide_devcall * c) {
    const tide_devtensor * in[] = {&c->in[0], &c->in[1]};
    return ew<A_FLOAT>(c, Heavy{c->p.flags & 1 ? GELU_TANH_GRAD : GELU_GRAD}, in);
}

template <int32_t OP> int k_cmp(const tide_devcall * c) {
    const tide_devtensor * in[] = {&c->in[0], &c->in[1]};
    return ew<A_ALL, Cmp, true>(c, Cmp{OP}, in);
}

/* The logical ops compute in bool (inputs nonzero): and is bool's mul, or its
 * add, not is x == false. */
int k_logical_and(const tide_devcall * c) {
    const tide_devtensor * in[] = {&c->in[0], &c->in[1]};
    return ew<1u << TIDE_DTYPE_BOOL>(c, Arith{MUL}, in);
}
int k_logical_or(const tide_devcall * c) {
    const tide_devtensor * in[] = {&c->in[0], &c->in[1]};
    return ew<1u << TIDE_DTYPE_BOOL>(c, Arith{ADD}, in);
}
int k_logical_not(const tide_devcall * c) {
    tide_devtensor         no   = number(0);
    const tide_devtensor * in[] = {&c->in[0], &no};
    return ew<1u << TIDE_DTYPE_BOOL, Cmp, true>(c, Cmp{EQ}, in);
}

int k_where(const tide_devcall * c) {
    const tide_devtensor * in[] = {&c->in[0], &c->in[1], &c->in[2]};
    return ew<A_ALL>(c, Ternary{WHERE}, in);
}

/* masked_fill(x, mask) is where(mask, value, x), the value converted to the compute dtype. */
int k_masked_fill(const tide_devcall * c) {
    tide_devtensor         value = number(c->p.scalars[0]);
    const tide_devtensor * in[]  = {&c->in[1], &value, &c->in[0]};
    return ew<A_ALL>(c, Ternary{WHERE}, in);
}

int k_clamp(const tide_devcall * c) {
    tide_devtensor lo = number(c->p.flags & TIDE_PARAMF_HAS_MIN ? c->p.scalars[0] : -INFINITY);
    tide_devtensor hi = number(c->p.flags & TIDE_PARAMF_HAS_MAX ? c->p.scalars[1] : INFINITY);
    const tide_devtensor * in[] = {&c->in[0], &lo, &hi};
    return ew<A_NUM>(c, Ternary{CLAMP}, in);
}

template <unsigned A, int32_t OP> int k_ternary(const tide_devcall * c) {
    const tide_devtensor * in[] = {&c->in[0], &c->in[1], &c->in[2]};
    return ew<A>(c, Ternary{OP}, in);
}

template <unsigned A, int32_t OP> int k_quaternary(const tide_devcall * c) {
    const tide_devtensor * in[] = {&c->in[0], &c->in[1], &c->in[2], &c->in[3]};
    return ew<A>(c, Quaternary{OP}, in);
}

/* -- copies between views ------------------------------------------------------------------------- */

/* Elements of E bytes moved unchanged: views of one dtype. */
template <typename E, typename I> __global__ void __launch_bounds__(THREADS) move_kernel(Shape s, Operands<2> ops) {
    I n = (I)s.nelem, step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t off[2];
        offsets_of<2, I>(s, ops.o, i, off);
        ((E *)ops.o[0].data)[off[0]] = ((const E *)ops.o[1].data)[off[1]];
    }
}

/* Elements converted through compute type T, from any dtype (or a host number) to any. */
template <typename T, typename I> __global__ void __launch_bounds__(THREADS) convert_kernel(Shape s, Operands<2> ops) {
    I n = (I)s.nelem, step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t off[2];
        offsets_of<2, I>(s, ops.o, i, off);
        store_as<T>((void *)ops.o[0].data, ops.o[0].dtype, off[0], get<T>(ops.o[1], off[1]));
    }
}

template <typename E> __global__ void __launch_bounds__(THREADS) fill_kernel(E * p, int64_t n, E v) {
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) p[i] = v;
}

template <typename E, typename I> void launch_move(const Shape & s, const Operands<2> & ops, cudaStream_t st) {
    move_kernel<E, I><<<blocks_for(s.nelem), THREADS, 0, st>>>(s, ops);
}
template <typename I> void launch_move(int32_t esz, const Shape & s, const Operands<2> & ops, cudaStream_t st) {
    switch (esz) {
    case 1:  launch_move<uint8_t, I>(s, ops, st); break;
    case 2:  launch_move<uint16_t, I>(s, ops, st); break;
    case 4:  launch_move<uint32_t, I>(s, ops, st); break;
    default: launch_move<uint64_t, I>(s, ops, st); break;
    }
}

/* n contiguous elements of esz bytes set to the pattern in `bits`. */
int fill(const tide_devcall * c, void * p, int64_t n, int32_t esz, uint64_t bits) {
    cudaStream_t st = (cudaStream_t)c->stream;
    if (bits == 0 || esz == 1)
        return checked(c, cudaMemsetAsync(p, (int)(bits & 0xff), (size_t)(n * esz), st), "cudaMemsetAsync");
    unsigned blocks = blocks_for(n);
    if (esz == 2) fill_kernel<uint16_t><<<blocks, THREADS, 0, st>>>((uint16_t *)p, n, (uint16_t)bits);
    else if (esz == 4) fill_kernel<uint32_t><<<blocks, THREADS, 0, st>>>((uint32_t *)p, n, (uint32_t)bits);
    else fill_kernel<uint64_t><<<blocks, THREADS, 0, st>>>((uint64_t *)p, n, bits);
    return launched(c);
}

/* Copies src, broadcast to dst's shape, into dst (any strides, negative ones too),
 * each value converted to compute dtype ct and then to dst's dtype, as the CPU's
 * iterator does. The caller has made sure that the two do not overlap, unless
 * they are the same view. */
int copy_into(const tide_devcall * c, const tide_devtensor & dst, const tide_devtensor & src, int32_t ct) {
    int64_t n = dst.nelem;
    if (n == 0) return TIDE_DEVAPI_OK;
    Shape       s = shape_of(dst);
    Operands<2> ops;
    if (int rc = over(c, dst, s, ops.o[0])) return rc;
    if (int rc = over(c, src, s, ops.o[1])) return rc;
    coalesce(s, ops.o, 2);
    cudaStream_t st  = (cudaStream_t)c->stream;
    int32_t      esz = esize(dst.dtype);
    bool         small = n < SMALL;
    if (!src.data) {   /* a host number: one value, which a dense dst takes as a fill */
        uint64_t bits = 0;   /* the value as dst stores it */
        int      rc   = dispatch<A_ALL>(c, ct, [&](auto t) {
            using T = decltype(t);
            T v     = host_value<T>(src);
            hold<T>(ops.o[1], v);
            store_as<T>(&bits, dst.dtype, 0, v);
            return TIDE_DEVAPI_OK;
        });
        if (rc) return rc;
        if (dense(s, ops.o[0])) return fill(c, dst.data, n, esz, bits);
    } else if (src.dtype == dst.dtype && ct == compute_of(dst.dtype)) {   /* no conversion: bytes move */
        bool same = src.data == dst.data;
        for (int32_t d = 0; d < s.ndim && same; d++) same = ops.o[0].strides[d] == ops.o[1].strides[d];
        if (same) return TIDE_DEVAPI_OK;   /* x:copy_(x) */
        if (dense(s, ops.o[0]) && dense(s, ops.o[1]))
            return checked(c, cudaMemcpyAsync(dst.data, src.data, (size_t)(n * esz), cudaMemcpyDeviceToDevice, st),
                           "cudaMemcpyAsync");
        if (small) launch_move<uint32_t>(esz, s, ops, st);
        else launch_move<uint64_t>(esz, s, ops, st);
        return launched(c);
    }
    return dispatch<A_ALL>(c, ct, [&](auto t) {
        using T = decltype(t);
        if (small) convert_kernel<T, uint32_t><<<blocks_for(n), THREADS, 0, st>>>(s, ops);
        else convert_kernel<T, uint64_t><<<blocks_for(n), THREADS, 0, st>>>(s, ops);
        return launched(c);
    });
}

/* A view of t's memory: ndim dims of the given sizes and strides, from `off`
 * elements after t's first. */
tide_devtensor view(const tide_devtensor & t, int32_t ndim, const int64_t * sizes, const int64_t * strides,
                    int64_t off) {
    tide_devtensor v = t;
    v.data           = (char *)t.data + off * esize(t.dtype);
    v.ndim           = ndim;
    v.nelem          = 1;
    for (int32_t d = 0; d < ndim; d++) {
        v.sizes[d]   = sizes[d];
        v.strides[d] = strides[d];
        v.nelem *= sizes[d];
    }
    return v;
}

/* "[2,3]", as tide_dims_str writes shapes in messages. */
const char * dims_str(const tide_devtensor & t, char * buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int32_t i = 0; i < t.ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ",%lld" : "%lld", (long long)t.sizes[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}

/* -- copy and the shaping ops ------------------------------------------------------------------------- */

int k_copy(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    return copy_into(c, c->out[0], c->in[0], c->compute_dtype);
}

/* flip: a copy of x viewed with negative strides along the flipped dims.
 * shape.c's `flip` rule has checked the dims and made them 0-based and
 * distinct; they are checked again here only as a guard against a caller
 * that skipped the registry. */
int k_flip(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    const tide_devtensor & x = c->in[0];
    bool                   flipped[TIDE_MAX_DIMS] = {};
    for (int32_t i = 0; i < c->p.n_ints; i++) {
        int64_t dim = c->p.ints[i];
        int32_t nd  = x.ndim > 0 ? x.ndim : 1;
        if (dim < -nd || dim >= nd)
            return set_error(TIDE_DEVAPI_ERROR, "flip: dimension %lld is out of range for a %d-d tensor",
                             (long long)(dim >= 0 ? dim + 1 : dim), x.ndim);
        int32_t d = (int32_t)(dim < 0 ? dim + nd : dim);
        if (x.ndim == 0) continue;
        if (flipped[d]) return set_error(TIDE_DEVAPI_ERROR, "flip: dimension %d is repeated", d + 1);
        flipped[d] = true;
    }
    if (x.nelem == 0) return TIDE_DEVAPI_OK;
    int64_t strides[TIDE_MAX_DIMS], off = 0;
    for (int32_t d = 0; d < x.ndim; d++) {
        strides[d] = flipped[d] ? -x.strides[d] : x.strides[d];
        if (flipped[d]) off += (x.sizes[d] - 1) * x.strides[d];
    }
    const tide_devtensor & out = c->out[0];
    return copy_into(c, out, view(x, x.ndim, x.sizes, strides, off), compute_of(out.dtype));
}

/* repeat: one copy of x into the output seen as shared.h's repeat plan; dims
 * beyond TIDE_MAX_DIMS become copies over the leading ones, as in shape.c. */
int k_repeat(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    const tide_devtensor & x = c->in[0], & out = c->out[0];
    if (out.nelem == 0) return TIDE_DEVAPI_OK;
    int64_t sz[2 * TIDE_MAX_DIMS], ost[2 * TIDE_MAX_DIMS], xst[2 * TIDE_MAX_DIMS];
    int32_t m     = tide_repeat_plan(c->p.n_ints, c->p.ints, x.ndim, x.sizes, x.strides, out.strides, sz, ost, xst);
    int32_t peel  = m > TIDE_MAX_DIMS ? m - TIDE_MAX_DIMS : 0;
    int64_t outer = 1;
    for (int32_t k = 0; k < peel; k++) outer *= sz[k];
    for (int64_t i = 0; i < outer; i++) {
        int64_t rest = i, ooff = 0, xoff = 0;
        for (int32_t k = peel - 1; k >= 0; k--) {
            ooff += (rest % sz[k]) * ost[k];
            xoff += (rest % sz[k]) * xst[k];
            rest /= sz[k];
        }
        tide_devtensor dst = view(out, m - peel, sz + peel, ost + peel, ooff);
        tide_devtensor src = view(x, m - peel, sz + peel, xst + peel, xoff);
        if (int rc = copy_into(c, dst, src, compute_of(out.dtype))) return rc;
    }
    return TIDE_DEVAPI_OK;
}

/* Element i of the batch of rows x cols matrices: zero in the other triangle,
 * else (unless only zeroing, in place) src's element. All bits zero is 0 in every dtype. */
template <typename E, typename I>
__global__ void __launch_bounds__(THREADS)
    tri_kernel(Shape s, Operands<2> ops, I rows, I cols, int64_t k, bool lower, bool zero_only) {
    I n = (I)s.nelem, step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t col = (int64_t)(i % cols), row = (int64_t)(i / cols % rows);
        bool    zero = lower ? col > row + k : col < row + k;
        if (!zero && zero_only) continue;
        int64_t off[2];
        offsets_of<2, I>(s, ops.o, i, off);
        ((E *)ops.o[0].data)[off[0]] = zero ? (E)0 : ((const E *)ops.o[1].data)[off[1]];
    }
}

template <typename I>
void launch_tri(int32_t esz, const Shape & s, const Operands<2> & ops, int64_t rows, int64_t cols, int64_t k,
                bool lower, bool zero_only, cudaStream_t st) {
    unsigned b = blocks_for(s.nelem);
    switch (esz) {
    case 1:  tri_kernel<uint8_t, I><<<b, THREADS, 0, st>>>(s, ops, (I)rows, (I)cols, k, lower, zero_only); break;
    case 2:  tri_kernel<uint16_t, I><<<b, THREADS, 0, st>>>(s, ops, (I)rows, (I)cols, k, lower, zero_only); break;
    case 4:  tri_kernel<uint32_t, I><<<b, THREADS, 0, st>>>(s, ops, (I)rows, (I)cols, k, lower, zero_only); break;
    default: tri_kernel<uint64_t, I><<<b, THREADS, 0, st>>>(s, ops, (I)rows, (I)cols, k, lower, zero_only); break;
    }
}

/* tril/triu: one pass that copies and zeroes; in place only the zeroing. A
 * conversion (out= of another dtype) copies first and then zeroes in place. */
int tri(const tide_devcall * c, bool lower) {
    if (int rc = use(c->dev)) return rc;
    const tide_devtensor & x = c->in[0], & out = c->out[0];
    char                   a[128];
    if (x.ndim < 2)
        return set_error(TIDE_DEVAPI_ERROR, "%s: the input must have at least 2 dimensions, got shape %s", c->op,
                         dims_str(x, a, sizeof a));
    if (out.nelem == 0) return TIDE_DEVAPI_OK;
    int64_t rows = out.sizes[out.ndim - 2], cols = out.sizes[out.ndim - 1], k = c->p.n_ints ? c->p.ints[0] : 0;
    if (k > cols) k = cols;   /* beyond the matrix: same result, and row + k cannot overflow */
    if (k < -rows) k = -rows;
    bool zero_only = same_view(x, out);
    if (!zero_only && x.dtype != out.dtype) {
        if (int rc = copy_into(c, out, x, compute_of(out.dtype))) return rc;
        zero_only = true;
    }
    Shape       s = shape_of(out);
    Operands<2> ops;
    if (int rc = over(c, out, s, ops.o[0])) return rc;
    if (int rc = over(c, zero_only ? out : x, s, ops.o[1])) return rc;
    coalesce(s, ops.o, 2);   /* row and column come from the element's index, which coalescing keeps */
    cudaStream_t st = (cudaStream_t)c->stream;
    if (s.nelem < SMALL) launch_tri<uint32_t>(esize(out.dtype), s, ops, rows, cols, k, lower, zero_only, st);
    else launch_tri<uint64_t>(esize(out.dtype), s, ops, rows, cols, k, lower, zero_only, st);
    return launched(c);
}

int k_tril(const tide_devcall * c) { return tri(c, true); }
int k_triu(const tide_devcall * c) { return tri(c, false); }

/* cat: each input into its slice of out along ints[0], converted to out's dtype;
 * inputs of another ndim (the [0] tensors the shape rule skips) add nothing. */
int k_cat(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    const tide_devtensor & out = c->out[0];
    int32_t                d   = (int32_t)c->p.ints[0];
    int64_t                pos = 0, sizes[TIDE_MAX_DIMS];
    memcpy(sizes, out.sizes, sizeof sizes);
    for (int32_t i = 0; i < c->n_in; i++) {
        const tide_devtensor & t = c->in[i];
        if (t.ndim != out.ndim) continue;
        int64_t len = t.sizes[d];
        if (t.nelem > 0) {
            sizes[d] = len;
            tide_devtensor v = view(out, out.ndim, sizes, out.strides, pos * out.strides[d]);
            if (int rc = copy_into(c, v, t, compute_of(out.dtype))) return rc;
        }
        pos += len;
    }
    return TIDE_DEVAPI_OK;
}

/* stack: input i into out's slice i along the new dim ints[0]. */
int k_stack(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    const tide_devtensor & out = c->out[0];
    int32_t                d   = (int32_t)c->p.ints[0];
    int64_t                sizes[TIDE_MAX_DIMS], strides[TIDE_MAX_DIMS];
    for (int32_t k = 0, j = 0; k < out.ndim; k++) {
        if (k == d) continue;
        sizes[j]   = out.sizes[k];
        strides[j] = out.strides[k];
        j++;
    }
    for (int32_t i = 0; i < c->n_in; i++) {
        if (c->in[i].nelem == 0) continue;
        tide_devtensor v = view(out, out.ndim - 1, sizes, strides, i * out.strides[d]);
        if (int rc = copy_into(c, v, c->in[i], compute_of(out.dtype))) return rc;
    }
    return TIDE_DEVAPI_OK;
}

/* -- creation ------------------------------------------------------------------------------------------ */

/* full: the value in the compute dtype, then in out's; a fill when out is dense. */
int k_full(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    return copy_into(c, c->out[0], number(c->p.scalars[0]), c->compute_dtype);
}

/* v converted to compute dtype ct, then stored into dtype dt. */
__device__ inline void store_through(void * p, int32_t dt, int64_t off, int32_t ct, double v) {
    switch (ct) {
    case TIDE_DTYPE_F32: store_as<float>(p, dt, off, cvt<float>(v)); break;
    case TIDE_DTYPE_F64: store_as<double>(p, dt, off, v); break;
    case TIDE_DTYPE_I32: store_as<int32_t>(p, dt, off, cvt<int32_t>(v)); break;
    case TIDE_DTYPE_I64: store_as<int64_t>(p, dt, off, cvt<int64_t>(v)); break;
    case TIDE_DTYPE_U8:  store_as<uint8_t>(p, dt, off, cvt<uint8_t>(v)); break;
    default:             store_as<bool>(p, dt, off, cvt<bool>(v)); break;
    }
}

/* arange (start + i step) and linspace (from start for the first half, back from
 * end for the second, so that both ends are exact), in double as create.c, with
 * the products and sums rounded apart as there. out is 1-d (their shape rules). */
__global__ void __launch_bounds__(THREADS) sequence_kernel(void * out, int32_t dt, int64_t stride, int64_t n,
                                                           int32_t ct, bool linspace, double a, double b,
                                                           double step) {
    int64_t inc = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += inc) {
        double v;
        if (!linspace) v = __dadd_rn(a, __dmul_rn((double)i, step));
        else if (i < n / 2) v = __dadd_rn(a, __dmul_rn(step, (double)i));
        else v = __dsub_rn(b, __dmul_rn(step, (double)(n - 1 - i)));
        store_through(out, dt, i * stride, ct, v);
    }
}

int sequence(const tide_devcall * c, bool linspace) {
    if (int rc = use(c->dev)) return rc;
    const tide_devtensor & out = c->out[0];
    int64_t                n   = out.nelem;
    if (n == 0) return TIDE_DEVAPI_OK;
    double a = c->p.scalars[0], b = c->p.scalars[1], step = c->p.scalars[2];
    if (linspace) step = n > 1 ? (b - a) / (double)(n - 1) : 0;
    sequence_kernel<<<blocks_for(n), THREADS, 0, (cudaStream_t)c->stream>>>(out.data, out.dtype, out.strides[0], n,
                                                                            c->compute_dtype, linspace, a, b, step);
    return launched(c);
}

int k_arange(const tide_devcall * c) { return sequence(c, false); }
int k_linspace(const tide_devcall * c) { return sequence(c, true); }

/* eye: 1 where row == column. 0 and 1 are exact in every dtype, so the value
 * goes to out's dtype straight from bool. */
template <typename I>
__global__ void __launch_bounds__(THREADS) eye_kernel(void * out, int32_t dt, I n, I m, int64_t s0, int64_t s1) {
    I step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        I r = i / m, col = i % m;
        store_as<bool>(out, dt, (int64_t)r * s0 + (int64_t)col * s1, r == col);
    }
}

int k_eye(const tide_devcall * c) {
    if (int rc = use(c->dev)) return rc;
    const tide_devtensor & out = c->out[0];
    if (out.ndim != 2) return set_error(TIDE_DEVAPI_ERROR, "eye: takes two sizes (n, m)");
    int64_t n = out.nelem, m = out.sizes[1];
    if (n == 0) return TIDE_DEVAPI_OK;
    cudaStream_t st = (cudaStream_t)c->stream;
    if (n < SMALL)
        eye_kernel<uint32_t><<<blocks_for(n), THREADS, 0, st>>>(out.data, out.dtype, (uint32_t)n, (uint32_t)m,
                                                                out.strides[0], out.strides[1]);
    else
        eye_kernel<uint64_t><<<blocks_for(n), THREADS, 0, st>>>(out.data, out.dtype, (uint64_t)n, (uint64_t)m,
                                                                out.strides[0], out.strides[1]);
    return launched(c);
}

}   // namespace

const kernel_entry ew_kernels[] = {
    /* unary */
    {"neg", k_unary<NEG>},
    {"abs", k_unary<ABS>},
    {"relu", k_unary<RELU>},
    {"floor", k_unary<FLOOR>},
    {"ceil", k_unary<CEIL>},
    {"round", k_unary<ROUND>},
    {"sign", k_unary<SIGN>},
    {"exp", k_transcend<EXP>},
    {"log", k_transcend<LOG>},
    {"log1p", k_transcend<LOG1P>},
    {"expm1", k_transcend<EXPM1>},
    {"sqrt", k_transcend<SQRT>},
    {"rsqrt", k_transcend<RSQRT>},
    {"sin", k_transcend<SIN>},
    {"cos", k_transcend<COS>},
    {"tanh", k_transcend<TANH>},
    {"sigmoid", k_transcend<SIGMOID>},
    {"silu", k_transcend<SILU>},
    {"gelu", k_gelu},
    {"reciprocal", k_transcend<RECIPROCAL>},
    {"trunc", k_unary<TRUNC>},
    {"tan", k_transcend<TAN>},
    {"asin", k_transcend<ASIN>},
    {"acos", k_transcend<ACOS>},
    {"atan", k_transcend<ATAN>},
    {"sinh", k_transcend<SINH>},
    {"cosh", k_transcend<COSH>},
    {"asinh", k_transcend<ASINH>},
    {"acosh", k_transcend<ACOSH>},
    {"atanh", k_transcend<ATANH>},
    {"erf", k_transcend<ERF>},
    {"erfc", k_transcend<ERFC>},
    {"erfinv", k_transcend<ERFINV>},
    {"log2", k_transcend<LOG2>},
    {"log10", k_transcend<LOG10>},
    {"exp2", k_transcend<EXP2>},
    {"lgamma", k_special<LGAMMA>},
    {"digamma", k_special<DIGAMMA>},
    {"polygamma", k_special<POLYGAMMA>},
    {"i0", k_special<I0>},
    {"i0e", k_special<I0E>},
    {"i1", k_special<I1>},
    {"i1e", k_special<I1E>},
    {"logical_not", k_logical_not},
    {"copy", k_copy},
    {"clamp", k_clamp},
    /* binary and more */
    {"add", k_arith<A_ALL, ADD>},
    {"sub", k_arith<A_NUM, SUB>},
    {"mul", k_arith<A_ALL, MUL>},
    {"div", k_arith<A_FLOAT, DIV>},
    {"maximum", k_arith<A_ALL, MAXIMUM>},
    {"minimum", k_arith<A_ALL, MINIMUM>},
    {"pow", k_heavy<A_NUM, POW>},
    {"fmod", k_dividing<A_NUM, FMOD>},
    {"floor_divide", k_dividing<A_NUM, FLOOR_DIVIDE>},
    {"remainder", k_dividing<A_NUM, REMAINDER>},
    {"atan2", k_heavy<A_FLOAT, ATAN2>},
    {"gelu_backward", k_gelu_backward},
    {"eq", k_cmp<EQ>},
    {"ne", k_cmp<NE>},
    {"lt", k_cmp<LT>},
    {"le", k_cmp<LE>},
    {"gt", k_cmp<GT>},
    {"ge", k_cmp<GE>},
    {"logical_and", k_logical_and},
    {"logical_or", k_logical_or},
    {"where", k_where},
    {"masked_fill", k_masked_fill},
    {"add_scaled", k_ternary<A_NUM, ADD_SCALED>},
    {"lerp", k_ternary<A_FLOAT, LERP>},
    {"addcmul", k_quaternary<A_NUM, ADDCMUL>},
    {"addcdiv", k_quaternary<A_FLOAT, ADDCDIV>},
    /* shaping */
    {"flip", k_flip},
    {"repeat", k_repeat},
    {"tril", k_tril},
    {"triu", k_triu},
    {"cat", k_cat},
    {"stack", k_stack},
    /* creation */
    {"full", k_full},
    {"arange", k_arange},
    {"linspace", k_linspace},
    {"eye", k_eye},
    {nullptr, nullptr},
};

}   // namespace tide_cuda
