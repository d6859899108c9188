/*
 * ewmath.cuh - the float math of the elementwise ops on CUDA: one function per
 * op over float and double, which ew.cu's kernels call and which the kernels
 * libtide writes for a jit plan's fused chains include (graph/fuse_cuda.c
 * embeds this file's text and hands it to the runtime compiler, NVRTC), so
 * that a fused chain rounds as the ops one by one. Self-contained for that
 * reason: no includes, only the CUDA math library's functions.
 */
#ifndef TIDE_CUDA_EWMATH_CUH
#define TIDE_CUDA_EWMATH_CUH

#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

/* One name for the float and double functions. sqrt, division and so rsqrt and
 * reciprocal are correctly rounded, as on the CPU; the rest is the CUDA math
 * library's (float: expf, tanhf, sinf, cosf within 2 ulp, logf, log1pf, expm1f
 * within 1, erfcf 4), where the CPU's float32 loops are polynomials of its own:
 * the two agree to a few ulp, not to the bit. */
#define MATH1(name, F32, F64)                                   \
    __device__ inline float name(float x) { return F32(x); }   \
    __device__ inline double name(double x) { return F64(x); }
#define MATH2(name, F32, F64)                                                 \
    __device__ inline float name(float x, float y) { return F32(x, y); }     \
    __device__ inline double name(double x, double y) { return F64(x, y); }
MATH1(m_fabs, fabsf, fabs)
MATH1(m_floor, floorf, floor)
MATH1(m_ceil, ceilf, ceil)
MATH1(m_rint, rintf, rint)
MATH1(m_trunc, truncf, trunc)
MATH1(m_tan, tanf, tan)
MATH1(m_asin, asinf, asin)
MATH1(m_acos, acosf, acos)
MATH1(m_atan, atanf, atan)
MATH1(m_sinh, sinhf, sinh)
MATH1(m_cosh, coshf, cosh)
MATH1(m_asinh, asinhf, asinh)
MATH1(m_acosh, acoshf, acosh)
MATH1(m_atanh, atanhf, atanh)
MATH1(m_erf, erff, erf)
MATH1(m_erfc, erfcf, erfc)
MATH1(m_erfinv, erfinvf, erfinv)
MATH1(m_log2, log2f, log2)
MATH1(m_log10, log10f, log10)
MATH1(m_exp2, exp2f, exp2)
MATH1(m_exp, expf, exp)
MATH1(m_log, logf, log)
MATH1(m_log1p, log1pf, log1p)
MATH1(m_expm1, expm1f, expm1)
MATH1(m_sqrt, sqrtf, sqrt)
MATH1(m_sin, sinf, sin)
MATH1(m_cos, cosf, cos)
MATH1(m_tanh, tanhf, tanh)
MATH2(m_pow, powf, pow)
MATH2(m_fmod, fmodf, fmod)
MATH2(m_atan2, atan2f, atan2)
/* Rounded separately, never fused into an fma: the CPU build (x86-64 baseline)
 * has no fma, and the fused updates should give the CPU's bits. */
MATH2(add_rn, __fadd_rn, __dadd_rn)
MATH2(sub_rn, __fsub_rn, __dsub_rn)
MATH2(mul_rn, __fmul_rn, __dmul_rn)
MATH2(div_rn, __fdiv_rn, __ddiv_rn)
#undef MATH1
#undef MATH2

/* sigmoid from e = exp(-|x|): 1/(1+e) or e/(1+e), so that neither side overflows
 * and the negative tail keeps its relative accuracy (transcend.c's form). */
__device__ inline float sigmoid_of(float x) {
    float e = expf(-fabsf(x));
    return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}
__device__ inline double sigmoid_of(double x) {
    double e = exp(-fabs(x));
    return (x >= 0.0 ? 1.0 : e) / (1.0 + e);
}

/* x sigmoid(x). Below -64 the result is x e^x, and e^x may be denormal in float:
 * formed in double and rounded once (the CPU scales by 2^64 for the same reason);
 * x is clamped to -200 so that silu(-inf) is -0, as on the CPU. */
__device__ inline float silu_of(float x) {
    if (x < -64.0f) {
        double xd = x < -200.0f ? -200.0 : (double)x;
        return (float)(xd * exp(xd));
    }
    float e = expf(-fabsf(x));
    return x * (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}
__device__ inline double silu_of(double x) { return x == -INFINITY ? -0.0 : x * sigmoid_of(x); }

/* gelu(x) = x/2 erfc(-x/sqrt2). erfc's relative error grows as 2a^2 times its
 * argument's, so for x < 0 the argument is split into ah + al (al what rounding
 * ah lost) and erfc(ah + al) taken as erfc(ah) - al 2/sqrt(pi) exp(-ah^2). Below
 * -12 erfc leaves float's normal range: in double, rounded once; Phi(-17) * 17
 * is 0 in float, so x is clamped there and gelu(-inf) is -0. */
__device__ inline float gelu_of(float x) {
    if (x < -12.0f) {
        double xd = x < -17.0f ? -17.0 : (double)x;
        return (float)(0.5 * xd * erfc(-xd * 0.70710678118654752440));
    }
    const float c_hi = 0x1.6a09e6p-1f, c_lo = 0x1.9fcef4p-27f;   /* 1/sqrt2 = c_hi + c_lo */
    float       nx = -x, ah = nx * c_hi, e = erfcf(ah);
    if (x < 0.0f) {
        float al = fmaf(nx, c_hi, -ah) + nx * c_lo;
        e        = fmaf(-1.12837917f * al, expf(-ah * ah), e);
    }
    return 0.5f * x * e;
}
__device__ inline double gelu_of(double x) {
    return x == -INFINITY ? -0.0 : 0.5 * x * erfc(-x * 0.70710678118654752440);
}

/* tanh form: x sigmoid(v), v = 2 sqrt(2/pi) (x + 0.044715 x^3), formed in double as
 * on the CPU (the tail's relative error is |v| times v's) and handed to float as
 * vh + vl, exp(vh + vl) taken as exp(vh) (1 + vl). Below v = -64 the result is
 * x e^v, in double as in silu_of. */
__device__ inline float gelu_tanh_of(float x) {
    double xd = x, vd = 1.5957691216057308 * xd * (1.0 + 0.044715 * xd * xd);
    float  xm = x < -200.0f ? -200.0f : x;
    if (vd < -64.0) return (float)((double)xm * exp(vd));
    float vh = (float)vd, vl = vd < 1e30 ? (float)(vd - (double)vh) : 0.0f;   /* 0 for inf, NaN */
    float h = vh < 0.0f ? vh : -vh, hl = vh < 0.0f ? vl : -vl;
    float e = expf(h);
    e       = fmaf(e, hl, e);
    return xm * (vh >= 0.0f ? 1.0f : e) / (1.0f + e);
}
__device__ inline double gelu_tanh_of(double x) {
    if (fabs(x) == INFINITY) return x < 0 ? -0.0 : x;
    return x * sigmoid_of(1.5957691216057307117 * x * (1.0 + 0.044715 * x * x));
}

/* d gelu(x) / dx, in double for both dtypes as transcend.c's gelu_grad. */
__device__ inline double gelu_grad(double x, bool approx) {
    if (approx) {
        const double k = 0.79788456080286535588, cc = 0.044715;
        double       t = tanh(k * (x + cc * x * x * x));
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * cc * x * x);
    }
    return 0.5 * erfc(-x * 0.70710678118654752440) + x * 0.39894228040143267794 * exp(-0.5 * x * x);
}

/* -- float16 and bfloat16 storage ------------------------------------------------------------- */

/* Their bits from a float and back, rounding to nearest even as libtide's
 * conversions do (core/dtype.c): a fused chain stored in float16 or bfloat16
 * rounds each step's result as the ops one by one store it. */
__device__ inline unsigned short tide_f16_bits(float f) {
    unsigned int x = __float_as_uint(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (unsigned short)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);   /* rounds to inf */
    if (ax < 0x38800000u)                                             /* subnormal or zero: a / 2^-24 */
        return (unsigned short)(sign | (unsigned int)rintf(__uint_as_float(ax) * 16777216.0f));
    unsigned int r = ax + 0xfffu + ((ax >> 13) & 1u);
    return (unsigned short)(sign | ((r - 0x38000000u) >> 13));
}
__device__ inline float tide_f16_value(unsigned short h) {
    unsigned int sign = (unsigned int)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (m << 13));
    if (e == 0) {   /* zero or subnormal: m 2^-24, exact */
        float v = (float)m * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}
__device__ inline unsigned short tide_bf16_bits(float f) {
    unsigned int x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);   /* quiet NaN */
    return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
__device__ inline float tide_bf16_value(unsigned short h) { return __uint_as_float((unsigned int)h << 16); }

/* -- the ops ---------------------------------------------------------------------------------- */

/* Each float op, as ops/cpu/binary.c and transcend.c define it; their names
 * are the registry's with f_ before. */
template <typename T> __device__ inline T f_neg(T a) { return -a; }
template <typename T> __device__ inline T f_abs(T a) { return m_fabs(a); }
template <typename T> __device__ inline T f_relu(T a) { return a > 0 ? a : (a != a ? a : (T)0); }   /* NaN stays */
template <typename T> __device__ inline T f_floor(T a) { return m_floor(a); }
template <typename T> __device__ inline T f_ceil(T a) { return m_ceil(a); }
template <typename T> __device__ inline T f_round(T a) { return m_rint(a); }   /* half to even, as nearbyint */
template <typename T> __device__ inline T f_sign(T a) { return (T)((a > 0) - (a < 0)); }   /* 0 for NaN, as on the CPU */
template <typename T> __device__ inline T f_exp(T a) { return m_exp(a); }
template <typename T> __device__ inline T f_log(T a) { return m_log(a); }
template <typename T> __device__ inline T f_log1p(T a) { return a == 0 ? a : m_log1p(a); }   /* keeps -0 */
template <typename T> __device__ inline T f_expm1(T a) { return a == 0 ? a : m_expm1(a); }
template <typename T> __device__ inline T f_sqrt(T a) { return m_sqrt(a); }
template <typename T> __device__ inline T f_rsqrt(T a) { return (T)1 / m_sqrt(a); }   /* correctly rounded twice, as on the CPU */
template <typename T> __device__ inline T f_sin(T a) { return m_sin(a); }
template <typename T> __device__ inline T f_cos(T a) { return m_cos(a); }
template <typename T> __device__ inline T f_tanh(T a) { return m_tanh(a); }
template <typename T> __device__ inline T f_sigmoid(T a) { return sigmoid_of(a); }
template <typename T> __device__ inline T f_silu(T a) { return silu_of(a); }
template <typename T> __device__ inline T f_gelu(T a, bool approx) { return approx ? gelu_tanh_of(a) : gelu_of(a); }
template <typename T> __device__ inline T f_reciprocal(T a) { return (T)1 / a; }
template <typename T> __device__ inline T f_trunc(T a) { return m_trunc(a); }
template <typename T> __device__ inline T f_tan(T a) { return m_tan(a); }
template <typename T> __device__ inline T f_asin(T a) { return m_asin(a); }
template <typename T> __device__ inline T f_acos(T a) { return m_acos(a); }
template <typename T> __device__ inline T f_atan(T a) { return m_atan(a); }
template <typename T> __device__ inline T f_sinh(T a) { return m_sinh(a); }
template <typename T> __device__ inline T f_cosh(T a) { return m_cosh(a); }
template <typename T> __device__ inline T f_asinh(T a) { return m_asinh(a); }
template <typename T> __device__ inline T f_acosh(T a) { return m_acosh(a); }
template <typename T> __device__ inline T f_atanh(T a) { return m_atanh(a); }
template <typename T> __device__ inline T f_erf(T a) { return m_erf(a); }
template <typename T> __device__ inline T f_erfc(T a) { return m_erfc(a); }
template <typename T> __device__ inline T f_erfinv(T a) { return m_erfinv(a); }
template <typename T> __device__ inline T f_log2(T a) { return m_log2(a); }
template <typename T> __device__ inline T f_log10(T a) { return m_log10(a); }
template <typename T> __device__ inline T f_exp2(T a) { return m_exp2(a); }
template <typename T> __device__ inline T f_add(T a, T b) { return a + b; }
template <typename T> __device__ inline T f_sub(T a, T b) { return a - b; }
template <typename T> __device__ inline T f_mul(T a, T b) { return a * b; }
template <typename T> __device__ inline T f_div(T a, T b) { return a / b; }
/* a NaN propagates: a when it is NaN, else b when the comparison fails */
template <typename T> __device__ inline T f_maximum(T a, T b) { return (a != a || a > b) ? a : b; }
template <typename T> __device__ inline T f_minimum(T a, T b) { return (a != a || a < b) ? a : b; }
template <typename T> __device__ inline T f_pow(T a, T b) { return b == (T)2 ? a * a : m_pow(a, b); }   /* the CPU squares too (binary.c) */
template <typename T> __device__ inline T f_fmod(T a, T b) { return m_fmod(a, b); }
template <typename T> __device__ inline T f_remainder(T a, T b) {
    T r = m_fmod(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <typename T> __device__ inline T f_atan2(T a, T b) { return m_atan2(a, b); }
/* (gy, x) */
template <typename T> __device__ inline T f_gelu_backward(T a, T b, bool approx) {
    return (T)((double)a * gelu_grad((double)b, approx));
}
/* the condition converted to T first, as on the CPU */
template <typename T> __device__ inline T f_where(T a, T b, T d) { return a != (T)0 ? b : d; }
/* absent bounds are -inf/+inf: no effect; NaN stays */
template <typename T> __device__ inline T f_clamp(T a, T lo, T hi) {
    T v = a;
    if (v < lo) v = lo;
    if (v > hi) v = hi;
    return v;
}
template <typename T> __device__ inline T f_add_scaled(T a, T b, T alpha) { return add_rn(a, mul_rn(alpha, b)); }
/* x + w (end - x) for |w| < 0.5, end - (end - x)(1 - w) otherwise, so that
 * weight 1 gives end exactly (binary.c's two-sided form) */
template <typename T> __device__ inline T f_lerp(T a, T b, T d) {
    T diff = sub_rn(b, a);
    T lo   = add_rn(a, mul_rn(d, diff));
    T hi   = sub_rn(b, mul_rn(diff, sub_rn((T)1, d)));
    return m_fabs(d) < (T)0.5 ? lo : hi;
}
/* x + value t1 t2 and x + value t1 / t2, in PyTorch's order */
template <typename T> __device__ inline T f_addcmul(T a, T b, T d, T e) { return add_rn(a, mul_rn(mul_rn(e, b), d)); }
template <typename T> __device__ inline T f_addcdiv(T a, T b, T d, T e) { return add_rn(a, div_rn(mul_rn(e, b), d)); }

#endif
