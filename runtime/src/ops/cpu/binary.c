/*
 * binary.c - inner loops of the cheap elementwise ops: arithmetic, the
 * fused updates (add_scaled, addcmul, addcdiv, lerp), comparisons, logical
 * ops, where, masked_fill, clamp, copy, and the unary ops that need no
 * transcendental function. Broadcasting, strides, dtype
 * conversion and threads are the iterator's (ew.c); the vectorised
 * transcendental ops are in transcend.c.
 */
#include "kernels.h"
#include "shared.h"

#include <stdio.h>

/* -- loop generators ------------------------------------------------------------------------ */

/* A loop for one dtype: `T` the compute type, `O` the output type, EXPR over a, b. */
#define BIN_LOOP(name, T, O, EXPR)                                                              \
    static TIDE_SIMD_CLONES void name(int64_t n, int64_t i0, void * restrict out_,              \
                                      const void * const * in, const tide_opcall * c) {         \
        O * restrict o = out_;                                                                  \
        const T * restrict A = in[0];                                                           \
        const T * restrict B = in[1];                                                           \
        (void)i0; (void)c;                                                                      \
        for (int64_t i = 0; i < n; i++) {                                                       \
            T a = A[i], b = B[i];                                                               \
            o[i] = (O)(EXPR);                                                                   \
        }                                                                                       \
    }
#define UN_LOOP(name, T, O, EXPR)                                                               \
    static TIDE_SIMD_CLONES void name(int64_t n, int64_t i0, void * restrict out_,              \
                                      const void * const * in, const tide_opcall * c) {         \
        O * restrict o = out_;                                                                  \
        const T * restrict A = in[0];                                                           \
        (void)i0; (void)c;                                                                      \
        for (int64_t i = 0; i < n; i++) {                                                       \
            T a = A[i];                                                                         \
            o[i] = (O)(EXPR);                                                                   \
        }                                                                                       \
    }

/* Tables of loops by compute dtype, one entry per dtype the op accepts. */
#define LOOPS_F(op)   [TIDE_DTYPE_F32] = op##_f32, [TIDE_DTYPE_F64] = op##_f64
#define LOOPS_I(op)   [TIDE_DTYPE_I32] = op##_i32, [TIDE_DTYPE_I64] = op##_i64, [TIDE_DTYPE_U8] = op##_u8
#define LOOPS_B(op)   [TIDE_DTYPE_BOOL] = op##_b

#define GEN_F(GEN, op, EXPR_F) GEN(op##_f32, float, float, EXPR_F) GEN(op##_f64, double, double, EXPR_F)
#define GEN_I(GEN, op, EXPR)   GEN(op##_i32, int32_t, int32_t, EXPR) GEN(op##_i64, int64_t, int64_t, EXPR) \
                               GEN(op##_u8, uint8_t, uint8_t, EXPR)

/* The loops are exported too (tide_loops_<op>): a fused kernel of a captured
 * graph runs several ops' loops over one block of memory. */
#define KERNEL(op, ...)                                                        \
    const tide_ew_loop tide_loops_##op[TIDE_DTYPE_COUNT] = {__VA_ARGS__};      \
    tide_status tide_cpu_##op(const tide_opcall * c) {                         \
        return tide_ew_run(c, tide_loops_##op, -1);                            \
    }
#define KERNEL_BOOL_OUT(op, ...)                                               \
    tide_status tide_cpu_##op(const tide_opcall * c) {                         \
        static const tide_ew_loop loops[TIDE_DTYPE_COUNT] = {__VA_ARGS__};     \
        return tide_ew_run(c, loops, TIDE_DTYPE_BOOL);                         \
    }

/* Integer arithmetic wraps (two's complement) instead of overflowing, as in
 * PyTorch; done in unsigned types so it is defined behaviour. */
#define WRAP(T, U, e) ((T)(U)(e))

/* -- arithmetic ------------------------------------------------------------------------------ */

GEN_F(BIN_LOOP, add, a + b)
BIN_LOOP(add_i32, int32_t, int32_t, (uint32_t)a + (uint32_t)b)
BIN_LOOP(add_i64, int64_t, int64_t, (uint64_t)a + (uint64_t)b)
BIN_LOOP(add_u8, uint8_t, uint8_t, a + b)
BIN_LOOP(add_b, uint8_t, uint8_t, a | b)
KERNEL(add, LOOPS_F(add), LOOPS_I(add), LOOPS_B(add))

GEN_F(BIN_LOOP, sub, a - b)
BIN_LOOP(sub_i32, int32_t, int32_t, (uint32_t)a - (uint32_t)b)
BIN_LOOP(sub_i64, int64_t, int64_t, (uint64_t)a - (uint64_t)b)
BIN_LOOP(sub_u8, uint8_t, uint8_t, a - b)
KERNEL(sub, LOOPS_F(sub), LOOPS_I(sub))

GEN_F(BIN_LOOP, mul, a * b)
BIN_LOOP(mul_i32, int32_t, int32_t, (uint32_t)a * (uint32_t)b)
BIN_LOOP(mul_i64, int64_t, int64_t, (uint64_t)a * (uint64_t)b)
BIN_LOOP(mul_u8, uint8_t, uint8_t, a * b)
BIN_LOOP(mul_b, uint8_t, uint8_t, a & b)
KERNEL(mul, LOOPS_F(mul), LOOPS_I(mul), LOOPS_B(mul))

GEN_F(BIN_LOOP, div, a / b)
KERNEL(div, LOOPS_F(div))

/* b == 2 squares, as tide_cpu_pow's fast path below does, so that every path
 * (a tensor of exponents, a fused chain of a compiled graph) gives the same bits. */
BIN_LOOP(pow_f32, float, float, b == 2.0f ? a * a : powf(a, b))
BIN_LOOP(pow_f64, double, double, b == 2.0 ? a * a : pow(a, b))
GEN_I(BIN_LOOP, pow, tide_ipow(a, b))   /* shared.h: as the CUDA kernel */
const tide_ew_loop tide_loops_pow[TIDE_DTYPE_COUNT] = {LOOPS_F(pow), LOOPS_I(pow)};

/* x ^ 2 (squares in losses and variances) as x * x: the exact square rounded
 * once, which is what powf/pow return too, without a library call an element. */
UN_LOOP(square_f32, float, float, a * a)
UN_LOOP(square_f64, double, double, a * a)

tide_status tide_cpu_pow(const tide_opcall * c) {
    static const tide_ew_loop square[TIDE_DTYPE_COUNT] = {LOOPS_F(square)};
    const tide_tensor *       e = c->in[1];
    if (tide_dtype_is_float(c->compute_dtype) && e->nelem == 1 &&
        tide_load_double(tide_tensor_ptr(e), e->dtype_id) == 2.0)
        return tide_ew_run(c, square, -1);
    return tide_ew_run(c, tide_loops_pow, -1);
}

/* Integer division by zero is the op's error, as in PyTorch, never a value: the
 * divisor is scanned before the loops run (its own elements: each one is used
 * when the result is not empty). The loops still give 0 there, as a kernel
 * must not trap. */
static tide_status divisor_has_zero(const tide_opcall * c) {
    const tide_tensor * b = c->in[1];
    if (tide_dtype_is_float(c->compute_dtype) || c->out[0]->nelem == 0) return TIDE_OK;
    const char * base = tide_tensor_ptr(b);
    size_t       es   = tide_dtype_size(b->dtype_id);
    bool         dense = tide_tensor_is_contiguous(b);
    for (int64_t i = 0; i < b->nelem; i++) {
        int64_t off = i;
        if (!dense) {   /* the offset of row-major element i */
            off = 0;
            for (int64_t d = b->ndim - 1, r = i; d >= 0; d--) {
                off += (r % b->sizes[d]) * b->strides[d];
                r /= b->sizes[d];
            }
        }
        if (tide_load_double(base + off * (int64_t)es, b->dtype_id) == 0)
            return tide_zero_divisor_error(tide_op_name(c->op), b->ndim == 0 ? -1 : i, -1);
    }
    return TIDE_OK;
}

tide_status tide_zero_divisor_error(const char * op, int64_t at, int32_t cuda_dev) {
    char what[64] = "", dev[32] = "";
    if (at >= 0) snprintf(what, sizeof what, ": element %lld of the divisor is 0", (long long)at + 1);
    if (cuda_dev >= 0) snprintf(dev, sizeof dev, " (on cuda:%d)", cuda_dev);
    return tide_error_set(TIDE_E_VALUE, "%s: integer division by zero%s%s", op, what, dev);
}

/* An op that divides in[0] by in[1]: the divisor checked first for integers. */
#define KERNEL_DIVIDING(op, ...)                                               \
    const tide_ew_loop tide_loops_##op[TIDE_DTYPE_COUNT] = {__VA_ARGS__};      \
    tide_status tide_cpu_##op(const tide_opcall * c) {                         \
        TIDE_CHECK(divisor_has_zero(c));                                       \
        return tide_ew_run(c, tide_loops_##op, -1);                            \
    }

/* fmod and remainder of integers: by 0 an error (above), by -1 0 (a % -1 could trap). */
BIN_LOOP(fmod_f32, float, float, fmodf(a, b))
BIN_LOOP(fmod_f64, double, double, fmod(a, b))
BIN_LOOP(fmod_i32, int32_t, int32_t, b == 0 ? 0 : b == -1 ? 0 : a % b)
BIN_LOOP(fmod_i64, int64_t, int64_t, b == 0 ? 0 : b == -1 ? 0 : a % b)
BIN_LOOP(fmod_u8, uint8_t, uint8_t, b == 0 ? 0 : a % b)
KERNEL_DIVIDING(fmod, LOOPS_F(fmod), LOOPS_I(fmod))

static inline float remf_(float a, float b) {
    float r = fmodf(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline double rem_(double a, double b) {
    double r = fmod(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline int64_t remi_(int64_t a, int64_t b) {
    if (b == 0 || b == -1) return 0;
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
/* floor_divide: integers exactly (by 0 an error, above; by -1 negates, wrapping
 * INT_MIN as PyTorch, where a / -1 would trap); floats as PyTorch's div_floor, from
 * fmod so that the quotient of an exact multiple is exact (1 // 0.1 is 9, as Python). */
static inline int64_t floordivi_(int64_t a, int64_t b) {
    if (b == 0) return 0;
    if (b == -1) return (int64_t)(0 - (uint64_t)a);
    int64_t q = a / b, r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
#define FLOORDIV_F(SUF, T, FMOD, FLOOR, COPYSIGN)                                \
    static inline T floordiv_##SUF(T a, T b) {                                   \
        if (b == 0) return a / b;                                                \
        T mod = FMOD(a, b), div = (a - mod) / b;                                 \
        if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;                        \
        if (div == 0) return COPYSIGN((T)0, a / b);                              \
        T f = FLOOR(div);                                                        \
        return div - f > (T)0.5 ? f + 1 : f;                                     \
    }
FLOORDIV_F(f32, float, fmodf, floorf, copysignf)
FLOORDIV_F(f64, double, fmod, floor, copysign)
BIN_LOOP(floor_divide_f32, float, float, floordiv_f32(a, b))
BIN_LOOP(floor_divide_f64, double, double, floordiv_f64(a, b))
BIN_LOOP(floor_divide_i32, int32_t, int32_t, (int32_t)floordivi_(a, b))
BIN_LOOP(floor_divide_i64, int64_t, int64_t, floordivi_(a, b))
BIN_LOOP(floor_divide_u8, uint8_t, uint8_t, b == 0 ? 0 : a / b)
KERNEL_DIVIDING(floor_divide, LOOPS_F(floor_divide), LOOPS_I(floor_divide))

BIN_LOOP(remainder_f32, float, float, remf_(a, b))
BIN_LOOP(remainder_f64, double, double, rem_(a, b))
GEN_I(BIN_LOOP, remainder, remi_(a, b))
KERNEL_DIVIDING(remainder, LOOPS_F(remainder), LOOPS_I(remainder))

/* maximum/minimum propagate NaN, as PyTorch does: a when it is NaN, else b when the
 * comparison fails. Quiet comparisons (!=, isgreater) and a select with no arithmetic
 * in its arms: GCC vectorises that, where `||` and an `a + b` arm kept the loop scalar. */
GEN_F(BIN_LOOP, maximum, ((a != a) | __builtin_isgreater(a, b)) ? a : b)
GEN_I(BIN_LOOP, maximum, a > b ? a : b)
BIN_LOOP(maximum_b, uint8_t, uint8_t, a | b)
KERNEL(maximum, LOOPS_F(maximum), LOOPS_I(maximum), LOOPS_B(maximum))
GEN_F(BIN_LOOP, minimum, ((a != a) | __builtin_isless(a, b)) ? a : b)
GEN_I(BIN_LOOP, minimum, a < b ? a : b)
BIN_LOOP(minimum_b, uint8_t, uint8_t, a & b)
KERNEL(minimum, LOOPS_F(minimum), LOOPS_I(minimum), LOOPS_B(minimum))

BIN_LOOP(atan2_f32, float, float, atan2f(a, b))
BIN_LOOP(atan2_f64, double, double, atan2(a, b))
KERNEL(atan2, LOOPS_F(atan2))

/* -- fused updates ------------------------------------------------------------------------- */

/* Their last input is a scalar (alpha, value, weight), almost always of one element (0-d
 * or a host number). Then the kernel reads it once, in the compute dtype, and runs a loop
 * that keeps it in a register: the iterator sees one operand fewer and takes its direct
 * path when the others are contiguous, instead of repeating the scalar through a block
 * buffer. On 200K float32 elements that makes add_scaled as fast as add, and each op
 * 25-45% faster than with the scalar as an array. A scalar of several elements (a tensor
 * weight for lerp) goes through the iterator as an ordinary operand. */

/* Loops of three and four array inputs, read as a, b, d (and e) in input order. */
#define TER_LOOP(name, T, O, EXPR)                                                               \
    static TIDE_SIMD_CLONES void name(int64_t n, int64_t i0, void * restrict out_,               \
                                      const void * const * in, const tide_opcall * c) {          \
        O * restrict o = out_;                                                                   \
        const T * restrict A = in[0], * restrict B = in[1], * restrict D = in[2];                \
        (void)i0; (void)c;                                                                       \
        for (int64_t i = 0; i < n; i++) {                                                        \
            T a = A[i], b = B[i], d = D[i];                                                      \
            o[i] = (O)(EXPR);                                                                    \
        }                                                                                        \
    }
#define QUAD_LOOP(name, T, O, EXPR)                                                              \
    static TIDE_SIMD_CLONES void name(int64_t n, int64_t i0, void * restrict out_,               \
                                      const void * const * in, const tide_opcall * c) {          \
        O * restrict o = out_;                                                                   \
        const T * restrict A = in[0], * restrict B = in[1], * restrict D = in[2];                \
        const T * restrict E = in[3];                                                            \
        (void)i0; (void)c;                                                                       \
        for (int64_t i = 0; i < n; i++) {                                                        \
            T a = A[i], b = B[i], d = D[i], e = E[i];                                            \
            o[i] = (O)(EXPR);                                                                    \
        }                                                                                        \
    }
/* The same with the last input a constant: its bytes, in the compute dtype, are in
 * c->p.scalars (put there by scalar_last below), and the loop names it d or e. */
#define BIN_K_LOOP(name, T, O, EXPR)                                                             \
    static TIDE_SIMD_CLONES void name(int64_t n, int64_t i0, void * restrict out_,               \
                                      const void * const * in, const tide_opcall * c) {          \
        O * restrict o = out_;                                                                   \
        const T * restrict A = in[0], * restrict B = in[1];                                      \
        T d;                                                                                     \
        memcpy(&d, c->p.scalars, sizeof d);                                                      \
        (void)i0;                                                                                \
        for (int64_t i = 0; i < n; i++) {                                                        \
            T a = A[i], b = B[i];                                                                \
            o[i] = (O)(EXPR);                                                                    \
        }                                                                                        \
    }
#define TER_K_LOOP(name, T, O, EXPR)                                                             \
    static TIDE_SIMD_CLONES void name(int64_t n, int64_t i0, void * restrict out_,               \
                                      const void * const * in, const tide_opcall * c) {          \
        O * restrict o = out_;                                                                   \
        const T * restrict A = in[0], * restrict B = in[1], * restrict D = in[2];                \
        T e;                                                                                     \
        memcpy(&e, c->p.scalars, sizeof e);                                                      \
        (void)i0;                                                                                \
        for (int64_t i = 0; i < n; i++) {                                                        \
            T a = A[i], b = B[i], d = D[i];                                                      \
            o[i] = (O)(EXPR);                                                                    \
        }                                                                                        \
    }

/* Runs k_loops with the one-element last input as the constant, or loops over every input. */
static tide_status scalar_last(const tide_opcall * c, const tide_ew_loop * k_loops, const tide_ew_loop * loops) {
    const tide_tensor * s = c->in[c->n_in - 1];
    if (s->nelem != 1) return tide_ew_run(c, loops, -1);
    tide_opcall k = *c;   /* the kernel's own copy: the queued call stays as it was */
    k.n_in--;
    const char * src = (const char *)s->storage->data + s->offset * (int64_t)tide_dtype_size(s->dtype_id);
    tide_convert(k.p.scalars, c->compute_dtype, 1, src, s->dtype_id, 1, 1);
    return tide_ew_run(&k, k_loops, -1);
}

/* A kernel with both sets of loops: TABLE(op) lists the array loops, TABLE(op##_k) the
 * constant ones; both are exported (tide_loops_<op>, tide_loops_<op>_k) for fused kernels,
 * which pick between them as scalar_last does. */
#define TABLE_F(op)  LOOPS_F(op)
#define TABLE_FI(op) LOOPS_F(op), LOOPS_I(op)
#define KERNEL_SCALAR_LAST(op, TABLE)                                                            \
    const tide_ew_loop tide_loops_##op##_k[TIDE_DTYPE_COUNT] = {TABLE(op##_k)};                  \
    const tide_ew_loop tide_loops_##op[TIDE_DTYPE_COUNT]     = {TABLE(op)};                      \
    tide_status tide_cpu_##op(const tide_opcall * c) {                                          \
        return scalar_last(c, tide_loops_##op##_k, tide_loops_##op);                             \
    }
/* Both loops of one dtype, op_sfx over arrays and op_k_sfx with the constant; EXPR names
 * the inputs a, b (d) and the scalar last: d for two inputs and a scalar, e for three. */
#define GEN_SCALED2(op, T, sfx, EXPR) TER_LOOP(op##_##sfx, T, T, EXPR) BIN_K_LOOP(op##_k_##sfx, T, T, EXPR)
#define GEN_SCALED3(op, T, sfx, EXPR) QUAD_LOOP(op##_##sfx, T, T, EXPR) TER_K_LOOP(op##_k_##sfx, T, T, EXPR)

/* add_scaled(a, b, alpha) = a + alpha * b; integers wrap */
GEN_SCALED2(add_scaled, float, f32, a + d * b)
GEN_SCALED2(add_scaled, double, f64, a + d * b)
GEN_SCALED2(add_scaled, int32_t, i32, WRAP(int32_t, uint32_t, (uint32_t)a + (uint32_t)d * (uint32_t)b))
GEN_SCALED2(add_scaled, int64_t, i64, WRAP(int64_t, uint64_t, (uint64_t)a + (uint64_t)d * (uint64_t)b))
GEN_SCALED2(add_scaled, uint8_t, u8, a + d * b)
KERNEL_SCALAR_LAST(add_scaled, TABLE_FI)

/* addcmul(x, t1, t2, value) = x + value * t1 * t2, in PyTorch's order of operations */
GEN_SCALED3(addcmul, float, f32, a + e * b * d)
GEN_SCALED3(addcmul, double, f64, a + e * b * d)
GEN_SCALED3(addcmul, int32_t, i32, WRAP(int32_t, uint32_t, (uint32_t)a + (uint32_t)e * (uint32_t)b * (uint32_t)d))
GEN_SCALED3(addcmul, int64_t, i64, WRAP(int64_t, uint64_t, (uint64_t)a + (uint64_t)e * (uint64_t)b * (uint64_t)d))
GEN_SCALED3(addcmul, uint8_t, u8, a + e * b * d)
KERNEL_SCALAR_LAST(addcmul, TABLE_FI)

/* addcdiv(x, t1, t2, value) = x + value * t1 / t2 */
GEN_SCALED3(addcdiv, float, f32, a + e * b / d)
GEN_SCALED3(addcdiv, double, f64, a + e * b / d)
KERNEL_SCALAR_LAST(addcdiv, TABLE_F)

/* lerp(x, end, weight): PyTorch's two-sided form, x + w (end - x) for |w| < 0.5 and
 * end - (end - x)(1 - w) otherwise, so weight 1 gives end exactly (x + 1 * (end - x)
 * need not) and each side stays accurate near its end. Both arms are computed and one
 * is picked by a bit mask: a `?:` between them becomes a branch (a float op may trap,
 * so GCC does not compute an arm the condition did not choose), and a branch keeps the
 * loop from being vectorised below AVX-512. */
static inline float lerp_f32_(float x, float e, float w) {
    float    diff = e - x, lo = x + w * diff, hi = e - diff * (1.0f - w);
    uint32_t a, b, m = -(uint32_t)(fabsf(w) < 0.5f);
    memcpy(&a, &lo, sizeof a);
    memcpy(&b, &hi, sizeof b);
    a = (a & m) | (b & ~m);
    memcpy(&lo, &a, sizeof lo);
    return lo;
}
static inline double lerp_f64_(double x, double e, double w) {
    double   diff = e - x, lo = x + w * diff, hi = e - diff * (1.0 - w);
    uint64_t a, b, m = -(uint64_t)(fabs(w) < 0.5);
    memcpy(&a, &lo, sizeof a);
    memcpy(&b, &hi, sizeof b);
    a = (a & m) | (b & ~m);
    memcpy(&lo, &a, sizeof lo);
    return lo;
}
GEN_SCALED2(lerp, float, f32, lerp_f32_(a, b, d))
GEN_SCALED2(lerp, double, f64, lerp_f64_(a, b, d))
KERNEL_SCALAR_LAST(lerp, TABLE_F)

/* -- comparisons and logic ------------------------------------------------------------------ */

#define CMP(op, EXPR)                                                                            \
    BIN_LOOP(op##_f32, float, uint8_t, EXPR) BIN_LOOP(op##_f64, double, uint8_t, EXPR)          \
    BIN_LOOP(op##_i32, int32_t, uint8_t, EXPR) BIN_LOOP(op##_i64, int64_t, uint8_t, EXPR)       \
    BIN_LOOP(op##_u8, uint8_t, uint8_t, EXPR) BIN_LOOP(op##_b, uint8_t, uint8_t, EXPR)          \
    KERNEL_BOOL_OUT(op, LOOPS_F(op), LOOPS_I(op), LOOPS_B(op))
CMP(eq, a == b)
CMP(ne, a != b)
CMP(lt, a < b)
CMP(le, a <= b)
CMP(gt, a > b)
CMP(ge, a >= b)

BIN_LOOP(logical_and_b, uint8_t, uint8_t, a & b)
KERNEL(logical_and, LOOPS_B(logical_and))
BIN_LOOP(logical_or_b, uint8_t, uint8_t, a | b)
KERNEL(logical_or, LOOPS_B(logical_or))
UN_LOOP(logical_not_b, uint8_t, uint8_t, !a)
KERNEL(logical_not, LOOPS_B(logical_not))

/* where(cond, a, b): the condition arrives converted to the compute dtype. */
#define WHERE_LOOP(name, T)                                                                      \
    static TIDE_SIMD_CLONES void name(int64_t n, int64_t i0, void * restrict out_,               \
                                      const void * const * in, const tide_opcall * c) {          \
        T * restrict o = out_;                                                                   \
        const T * restrict k = in[0], * restrict a = in[1], * restrict b = in[2];                \
        (void)i0; (void)c;                                                                       \
        for (int64_t i = 0; i < n; i++) {   /* both loaded: a select, not a branch */            \
            T ai = a[i], bi = b[i];                                                              \
            o[i] = k[i] != 0 ? ai : bi;                                                          \
        }                                                                                        \
    }
WHERE_LOOP(where_f32, float) WHERE_LOOP(where_f64, double) WHERE_LOOP(where_i32, int32_t)
WHERE_LOOP(where_i64, int64_t) WHERE_LOOP(where_u8, uint8_t) WHERE_LOOP(where_b, uint8_t)
KERNEL(where, LOOPS_F(where), LOOPS_I(where), LOOPS_B(where))

/* masked_fill(x, mask): the value is params.scalars[0], converted once. x[i] is
 * loaded whatever the mask says, so that the loop is a vector select: as a
 * branch on a random mask it took 13.5 ms over 4M floats, 18x a copy. */
#define MFILL_LOOP(name, T, CONV)                                                                \
    static TIDE_SIMD_CLONES void name(int64_t n, int64_t i0, void * restrict out_,               \
                                      const void * const * in, const tide_opcall * c) {          \
        T * restrict o = out_;                                                                   \
        const T * restrict x = in[0], * restrict m = in[1];                                      \
        T v = CONV;                                                                              \
        (void)i0;                                                                                \
        for (int64_t i = 0; i < n; i++) {                                                        \
            T xi = x[i];                                                                         \
            o[i] = m[i] != 0 ? v : xi;                                                           \
        }                                                                                        \
    }
#define SCALAR_AS(T) ({ T v_; tide_store_double(&v_, c->compute_dtype, c->p.scalars[0]); v_; })
MFILL_LOOP(masked_fill_f32, float, SCALAR_AS(float))
MFILL_LOOP(masked_fill_f64, double, SCALAR_AS(double))
MFILL_LOOP(masked_fill_i32, int32_t, SCALAR_AS(int32_t))
MFILL_LOOP(masked_fill_i64, int64_t, SCALAR_AS(int64_t))
MFILL_LOOP(masked_fill_u8, uint8_t, SCALAR_AS(uint8_t))
MFILL_LOOP(masked_fill_b, uint8_t, SCALAR_AS(uint8_t))
KERNEL(masked_fill, LOOPS_F(masked_fill), LOOPS_I(masked_fill), LOOPS_B(masked_fill))

/* -- cheap unary ops ------------------------------------------------------------------------ */

GEN_F(UN_LOOP, neg, -a)
UN_LOOP(neg_i32, int32_t, int32_t, -(uint32_t)a)
UN_LOOP(neg_i64, int64_t, int64_t, -(uint64_t)a)
UN_LOOP(neg_u8, uint8_t, uint8_t, -a)
KERNEL(neg, LOOPS_F(neg), LOOPS_I(neg))

UN_LOOP(abs_f32, float, float, fabsf(a))
UN_LOOP(abs_f64, double, double, fabs(a))
UN_LOOP(abs_i32, int32_t, int32_t, a < 0 ? -(uint32_t)a : (uint32_t)a)
UN_LOOP(abs_i64, int64_t, int64_t, a < 0 ? -(uint64_t)a : (uint64_t)a)
UN_LOOP(abs_u8, uint8_t, uint8_t, a)
KERNEL(abs, LOOPS_F(abs), LOOPS_I(abs))

GEN_F(UN_LOOP, relu, a > 0 ? a : (a != a ? a : 0))
GEN_I(UN_LOOP, relu, a > 0 ? a : 0)
KERNEL(relu, LOOPS_F(relu), LOOPS_I(relu))

UN_LOOP(floor_f32, float, float, floorf(a)) UN_LOOP(floor_f64, double, double, floor(a))
GEN_I(UN_LOOP, floor, a)
KERNEL(floor, LOOPS_F(floor), LOOPS_I(floor))
UN_LOOP(ceil_f32, float, float, ceilf(a)) UN_LOOP(ceil_f64, double, double, ceil(a))
GEN_I(UN_LOOP, ceil, a)
KERNEL(ceil, LOOPS_F(ceil), LOOPS_I(ceil))
UN_LOOP(round_f32, float, float, nearbyintf(a)) UN_LOOP(round_f64, double, double, nearbyint(a))
GEN_I(UN_LOOP, round, a)
KERNEL(round, LOOPS_F(round), LOOPS_I(round))
UN_LOOP(trunc_f32, float, float, truncf(a)) UN_LOOP(trunc_f64, double, double, trunc(a))
GEN_I(UN_LOOP, trunc, a)
KERNEL(trunc, LOOPS_F(trunc), LOOPS_I(trunc))
GEN_F(UN_LOOP, sign, (a > 0) - (a < 0))
UN_LOOP(sign_i32, int32_t, int32_t, (a > 0) - (a < 0))
UN_LOOP(sign_i64, int64_t, int64_t, (a > 0) - (a < 0))
UN_LOOP(sign_u8, uint8_t, uint8_t, a > 0)
KERNEL(sign, LOOPS_F(sign), LOOPS_I(sign))

/* clamp with optional bounds in params; NaN stays NaN. */
#define CLAMP_LOOP(name, T)                                                                      \
    static void name(int64_t n, int64_t i0, void * restrict out_, const void * const * in,       \
                     const tide_opcall * c) {                                                    \
        T * restrict o = out_;                                                                   \
        const T * restrict x = in[0];                                                            \
        int has_lo = c->p.flags & TIDE_PARAMF_HAS_MIN, has_hi = c->p.flags & TIDE_PARAMF_HAS_MAX; \
        T lo, hi;                                                                                \
        tide_store_double(&lo, c->compute_dtype, has_lo ? c->p.scalars[0] : 0);                  \
        tide_store_double(&hi, c->compute_dtype, has_hi ? c->p.scalars[1] : 0);                  \
        (void)i0;                                                                                \
        for (int64_t i = 0; i < n; i++) {                                                        \
            T v = x[i];                                                                          \
            if (has_lo && v < lo) v = lo;                                                        \
            if (has_hi && v > hi) v = hi;                                                        \
            o[i] = v;                                                                            \
        }                                                                                        \
    }
CLAMP_LOOP(clamp_f32, float) CLAMP_LOOP(clamp_f64, double) CLAMP_LOOP(clamp_i32, int32_t)
CLAMP_LOOP(clamp_i64, int64_t) CLAMP_LOOP(clamp_u8, uint8_t)
KERNEL(clamp, LOOPS_F(clamp), LOOPS_I(clamp))

/* copy: the iterator converts to the destination's dtype; the loop only moves bytes. */
#define COPY_LOOP(name, T)                                                                       \
    static void name(int64_t n, int64_t i0, void * restrict out_, const void * const * in,       \
                     const tide_opcall * c) {                                                    \
        (void)i0; (void)c;                                                                       \
        memcpy(out_, in[0], (size_t)n * sizeof(T));                                              \
    }
COPY_LOOP(copy_f32, float) COPY_LOOP(copy_f64, double) COPY_LOOP(copy_i32, int32_t)
COPY_LOOP(copy_i64, int64_t) COPY_LOOP(copy_u8, uint8_t) COPY_LOOP(copy_b, uint8_t)
const tide_ew_loop tide_loops_copy[TIDE_DTYPE_COUNT] = {LOOPS_F(copy), LOOPS_I(copy), LOOPS_B(copy)};
tide_status tide_cpu_copy(const tide_opcall * c) {
    return tide_ew_transpose(c) ? TIDE_OK : tide_ew_run(c, tide_loops_copy, -1);
}
