/*
 * transcend.c - inner loops of the transcendental elementwise ops (exp, log,
 * log1p, expm1, sqrt, rsqrt, sin, cos, tanh, sigmoid, gelu, silu,
 * reciprocal). The float32 loops are branch-free polynomial and
 * range-reduction code that GCC vectorises (no libm call per element, except
 * sin/cos of |x| > 1e6); float64 loops call libm. The rarer ones (tan, the
 * inverse and hyperbolic functions, erf, erfc, log2, log10, exp2) call libm in
 * both, and erfinv is its own. Broadcasting, strides, dtype conversion and
 * threads are the iterator's (ew.c).
 */
#if defined(__GNUC__) && !defined(__clang__)
/* Selects only become blends when evaluating both arms may raise FP flags;
 * nothing reads them. */
#pragma GCC optimize("no-trapping-math")
#endif

#include "kernels.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* -- float32 building blocks ---------------------------------------------------------------- */

/* Accuracy, measured against long double libm at every 61st float32 bit
 * pattern and in every clone (SSE2, AVX2+FMA, AVX-512): exp, log, log1p,
 * expm1, tanh, rsqrt within 1.6 ulp; sqrt, reciprocal, sin, cos 0.5 ulp;
 * sigmoid, silu and tanh-gelu within 3 ulp; exact gelu within 5 ulp (near
 * x = -1.5, from the erfc fit). Every function maps NaN to NaN and keeps
 * the sign of zero where the function is odd. Bit casts go through unions so
 * GCC sees plain lane operations; all integer work is unsigned (no UB on
 * NaN or garbage lanes). */

typedef union { float f; uint32_t u; } f32bits;
typedef union { double f; uint64_t u; } f64bits;

static inline uint32_t f2u(float x) { f32bits b; b.f = x; return b.u; }
static inline float    u2f(uint32_t u) { f32bits b; b.u = u; return b.f; }
static inline uint64_t d2u(double x) { f64bits b; b.f = x; return b.u; }

#define F32_INF  __builtin_inff()
#define F32_NAN  __builtin_nanf("")
#define MAGIC_F  0x1.8p23f         /* x + MAGIC_F rounds x to an integer held in the low bits */
#define MAGIC_D  0x1.8p52

static const float LOG2E = 1.44269504088896341f;
/* Cody-Waite split of ln 2: n * LN2_HI is exact for |n| < 2^15. */
static const float LN2_HI = 0.693359375f;
static const float LN2_LO = -2.12194440e-4f;

/* 2^n for n in [-126, 127] */
static inline float pow2i(uint32_t n) { return u2f((n + 127u) << 23); }

/* Cephes expf's P: exp(r) = 1 + r + r^2 P(r) on |r| <= ln2/2 (expm1(r) without the 1). */
static inline float exp_poly(float r) {
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    return p * r + 5.0000001201e-1f;
}

/* exp(hi + lo) * 2^k for hi + lo in [-150, 89] and k in {0, 64}, with n
 * chosen from hi + lo and the reduction r = hi + lo - n ln2 done as
 * (hi - n LN2_HI) + lo - n LN2_LO, so that a caller who splits its argument
 * exactly (erfc) keeps the low bits. k = 64 lets callers whose result is
 * denormal multiply at full precision first and round once at the end. */
static inline float exp_core(float hi, float lo, uint32_t k) {
    float    t = (hi + lo) * LOG2E + MAGIC_F;
    float    n = t - MAGIC_F;
    uint32_t ni = f2u(t) - f2u(MAGIC_F);            /* n, two's complement */
    float    r = (hi - n * LN2_HI) + lo - n * LN2_LO;
    float    y = exp_poly(r) * (r * r) + r + 1.0f;
    /* scale in two halves so 2^n for n in [-216, 192] never leaves the normal range */
    ni += k;
    uint32_t n1 = (uint32_t)((int32_t)ni >> 1), n2 = ni - n1;
    return y * pow2i(n1) * pow2i(n2);
}

static inline float f32_exp(float x) {
    x = x < -104.0f ? -104.0f : x;   /* NaN passes both clamps */
    x = x > 89.0f ? 89.0f : x;
    return exp_core(x, 0.0f, 0u);
}

static inline float f32_expm1(float x) {
    float    c = x < -40.0f ? -40.0f : x;
    c = c > 89.0f ? 89.0f : c;
    float    t = c * LOG2E + MAGIC_F;
    float    n = t - MAGIC_F;
    uint32_t ni = f2u(t) - f2u(MAGIC_F);
    float    r = (c - n * LN2_HI) - n * LN2_LO;
    float    q = exp_poly(r) * (r * r) + r;      /* expm1(r) */
    /* expm1(x) = 2^n q + (2^n - 1); n = 128 is done as 2 * 2^127 */
    uint32_t big = (int32_t)ni > 127;
    uint32_t e = big ? 127u : ni;
    float    s = pow2i(e);
    float    y = (s * q + (s - 1.0f)) * (big ? 2.0f : 1.0f);
    return x == 0.0f ? x : y;                    /* expm1(-0) = -0 */
}

static const float SQRT_HALF = 0.70710678118654752f;

/* log(x) for finite x > 0 (denormals included). */
static inline float log_core(float x) {
    uint32_t den = x < 0x1p-126f;
    x = den ? x * 0x1p23f : x;
    uint32_t b = f2u(x);
    float    e = (float)(int32_t)((b >> 23) - 126u) - (den ? 23.0f : 0.0f);
    float    m = u2f((b & 0x007fffffu) | 0x3f000000u);    /* [0.5, 1) */
    uint32_t lo = m < SQRT_HALF;
    e = lo ? e - 1.0f : e;
    float f = lo ? m + m - 1.0f : m - 1.0f;               /* exact, in [sqrt(1/2)-1, sqrt(2)-1) */
    float z = f * f;
    /* Cephes logf: log(1+f) = f - f^2/2 + f^3 P(f) */
    float p = 7.0376836292e-2f;
    p = p * f - 1.1514610310e-1f;
    p = p * f + 1.1676998740e-1f;
    p = p * f - 1.2420140846e-1f;
    p = p * f + 1.4249322787e-1f;
    p = p * f - 1.6668057665e-1f;
    p = p * f + 2.0000714765e-1f;
    p = p * f - 2.4999993993e-1f;
    p = p * f + 3.3333331174e-1f;
    float y = p * f * z + e * LN2_LO - 0.5f * z;
    return (f + y) + e * LN2_HI;
}

/* log of the values log_core does not take: 0, negatives, inf, NaN */
static inline float log_special(float x) {
    return x == 0.0f ? -F32_INF : (x < 0.0f ? F32_NAN : x);
}

static inline float f32_log(float x) {
    float y = log_core(x > 0.0f && x < F32_INF ? x : 1.0f);
    return x > 0.0f && x < F32_INF ? y : log_special(x);
}

/* log1p(x) = log(u) + (x - (u - 1)) / u with u = 1 + x rounded: the second
 * term puts back what the rounding of u lost (Goldberg's trick). */
static inline float f32_log1p(float x) {
    float u = 1.0f + x;
    int   ok = u > 0.0f && u < F32_INF;
    float v = ok ? u : 1.0f;
    float y = log_core(v) + (x - (v - 1.0f)) / v;
    y = ok ? y : log_special(u);
    return x == 0.0f ? x : y;                   /* log1p(-0) = -0 */
}

/* tanh(|x|) with x's sign bit put back, so tanh(-0) = -0 and NaN stays NaN:
 * below 0.625 the Cephes odd polynomial, above 1 - 2 / (exp(2|x|) + 1) with
 * |x| clamped to 10 (the formula gives 1 there, as tanh does in float32 from
 * 9.01 on), where exp needs a single scaling. Two selects in all: half the
 * instructions of clamping and blending each case (3.1 -> 2.0 ns per element
 * on one Zen 1 core), and as accurate: the same polynomials. */
static inline float f32_tanh(float x) {
    uint32_t sign = f2u(x) & 0x80000000u;
    float    a = u2f(f2u(x) & 0x7fffffffu);
    float    z = a * a;
    float    p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    float    small = p * z * a + a;
    float    c = 10.0f < a ? 10.0f : a;   /* NaN stays */
    float    h = c + c;
    float    t = h * LOG2E + MAGIC_F;
    float    n = t - MAGIC_F;
    uint32_t ni = f2u(t) - f2u(MAGIC_F);
    float    r = (h - n * LN2_HI) - n * LN2_LO;
    float    e = (exp_poly(r) * (r * r) + r + 1.0f) * pow2i(ni);   /* exp(2c), 2c <= 20 */
    float    big = 1.0f - 2.0f / (e + 1.0f);
    return u2f(f2u(a < 0.625f ? small : big) | sign);
}

/* x sigmoid(v), v = vh + vl, from e = exp(-|v|): x/(1+e) for v >= 0,
 * x e/(1+e) below, so neither side overflows and the negative tail keeps its
 * relative accuracy; for v < -64 (1 + e = 1) e is scaled by 2^64 so that a
 * denormal result is rounded once. x is clamped to -200 so that x = -inf
 * gives the limit -0. */
static inline float mul_sigmoid(float x, float v, float vl) {
    float    h = v < 0.0f ? v : -v, hl = v < 0.0f ? vl : -vl;
    uint32_t tiny = v < -64.0f;
    hl = h < -150.0f ? 0.0f : hl;
    h = h < -150.0f ? -150.0f : h;
    float e = exp_core(h, hl, tiny ? 64u : 0u);
    float num = v >= 0.0f ? 1.0f : e;
    float den = 1.0f + (tiny ? 0.0f : e);
    float xm = x < -200.0f ? -200.0f : x;
    return xm * num / den * (tiny ? 0x1p-64f : 1.0f);
}

static inline float f32_sigmoid(float x) { return mul_sigmoid(1.0f, x, 0.0f); }
static inline float f32_silu(float x) { return mul_sigmoid(x, x, 0.0f); }

/* gelu(x) = x Phi(x), Phi the standard normal CDF. |x| < 0.65: Taylor series of the odd part.
 * Otherwise Phi = 0.5 erfc(|x|/sqrt2) (mirrored for x > 0), with
 *   erfc(a) = C t exp(-a^2 + H(t - T0)),  t = 1 / (1 + a/2),
 * H a degree-9 fit (|error| < 2e-9 for a in [0.45, 10.6]); a^2 = x^2/2 is
 * split exactly (x = xh + xl, xh with 12 significant bits) because erfc's
 * relative error grows as 2 a^2 times the argument's. */
/* Phi(x) for |x| < 0.65, z = x^2: 0.5 + 1/sqrt(2 pi) sum (-1)^k x^(2k+1) / (2^k k! (2k+1)),
 * k <= 6 (the rest < 1e-10). */
static inline float phi_series(float x, float z) {
    float p = 6.659693516e-07f;
    p = p * z - 9.444656260e-06f;
    p = p * z + 1.154346876e-04f;
    p = p * z - 1.187328215e-03f;
    p = p * z + 9.973557010e-03f;
    p = p * z - 6.649038007e-02f;
    p = p * z + 3.989422804e-01f;
    return 0.5f + x * p;
}

static inline float f32_gelu(float x) {
    float a = fabsf(x);
    float z = x * x;
    float sm = phi_series(x, z);

    float ac = a < 17.0f ? a : 17.0f;                  /* Phi(-17) x 17 is 0 in float */
    float ah = u2f(f2u(ac) & 0xfffff000u);
    float al = ac - ah;
    float hi = -0.5f * ah * ah;                       /* exact */
    float tc = 0.25625053f / (1.0f + 0.35355339f * ac);   /* C/2 t, t = 1 / (1 + a/2), a = |x|/sqrt2 */
    float u = tc * 3.9024308f - 0.48752835f;             /* t - T0 */
    float h = 0.2534804f;
    h = h * u - 0.080095172f;
    h = h * u - 0.28436825f;
    h = h * u + 0.13867301f;
    h = h * u + 0.27253446f;
    h = h * u - 0.17529075f;
    h = h * u - 0.36684150f;
    h = h * u + 0.20325713f;
    h = h * u + 1.3403890f;
    h = h * u - 0.020089343f;
    float    lo = h - (ah * al + 0.5f * al * al);
    uint32_t tiny = hi < -60.0f;                      /* erfc denormal: scale by 2^64 */
    float    sc = tiny ? 0x1p-64f : 1.0f;
    float    e = tc * exp_core(hi, lo, tiny ? 64u : 0u);   /* erfc(a) / 2 */
    float    xc = x < -17.0f ? -17.0f : x;
    float    neg = xc * e * sc, pos = x * (1.0f - e * sc);
    return a < 0.65f ? x * sm : (x < 0.0f ? neg : pos);
}

/* tanh form: 0.5 x (1 + tanh(v/2)) = x sigmoid(v), v = 2 sqrt(2/pi) (x + 0.044715 x^3),
 * which avoids the cancellation of 1 + tanh for negative x. The tail's
 * relative error is |v| times v's, so v is formed in double and handed over
 * as a float pair. */
static inline float f32_gelu_tanh(float x) {
    double xd = x;
    double vd = 1.5957691216057308 * xd * (1.0 + 0.044715 * xd * xd);
    float  vh = (float)vd;
    float  vl = fabs(vd) < 1e30 ? (float)(vd - vh) : 0.0f;   /* 0 for inf, NaN */
    return mul_sigmoid(x, vh, vl);
}

/* -- sin, cos ----------------------------------------------------------------------------------- */

/* Reduction and polynomials in double: x - j pi/2 with pi/2 split in three
 * 33-bit parts is exact enough for |x| < 2^20 pi/2, and the double Taylor
 * polynomials leave only the final rounding to float. Larger |x| (and inf,
 * NaN) go to libm; a chunk is scanned for them first. */
static const double PIO2_1  = 1.57079632673412561417e+00;
static const double PIO2_2  = 6.07710050630396597660e-11;
static const double PIO2_2T = 2.02226624879595063154e-21;
enum { TRIG_CHUNK = 1024 };
#define TRIG_LIMIT 1e6f

/* sin(x) for quadrant offset q (0: sin, 1: cos) */
static inline float trig_core(float xf, uint32_t q) {
    double   x = xf;
    double   t = x * 0.63661977236758134308 + MAGIC_D;
    double   j = t - MAGIC_D;
    uint32_t ji = (uint32_t)d2u(t) + q;
    double   r = ((x - j * PIO2_1) - j * PIO2_2) - j * PIO2_2T;
    double   z = r * r;
    double   s = -7.6471637318198164759e-13;      /* -1/13! ... Taylor of sin */
    s = s * z + 1.6059043836821614599e-10;
    s = s * z - 2.5052108385441718775e-8;
    s = s * z + 2.7557319223985890653e-6;
    s = s * z - 1.9841269841269841270e-4;
    s = s * z + 8.3333333333333333333e-3;
    s = s * z - 1.6666666666666666667e-1;
    s = r + r * z * s;
    double c = 4.7794773323873852974e-14;         /* 1/14! ... Taylor of cos */
    c = c * z - 1.1470745597729724714e-11;
    c = c * z + 2.0876756987868098979e-9;
    c = c * z - 2.7557319223985890653e-7;
    c = c * z + 2.4801587301587301587e-5;
    c = c * z - 1.3888888888888888889e-3;
    c = c * z + 4.1666666666666666667e-2;
    c = c * z - 0.5;
    c = 1.0 + z * c;
    double y = (ji & 1u) ? c : s;
    y = (ji & 2u) ? -y : y;
    return q == 0 && xf == 0.0f ? xf : (float)y;   /* sin(-0) = -0 */
}

#define TRIG_LOOP(name, Q, LIBM)                                                                 \
    static TIDE_SIMD_CLONES void name##_vec(int64_t n, float * restrict o, const float * restrict a) { \
        for (int64_t i = 0; i < n; i++) o[i] = trig_core(a[i], Q);                              \
    }                                                                                           \
    static TIDE_SIMD_CLONES int name##_tame(int64_t n, const float * restrict a) {              \
        int bad = 0;                                                                            \
        for (int64_t i = 0; i < n; i++) bad |= !(fabsf(a[i]) <= TRIG_LIMIT);                    \
        return !bad;                                                                            \
    }                                                                                           \
    static void name(int64_t n, int64_t i0, void * restrict out_, const void * const * in,      \
                     const tide_opcall * c) {                                                   \
        float * o = out_;                                                                       \
        const float * a = in[0];                                                                \
        (void)i0; (void)c;                                                                      \
        for (int64_t b = 0; b < n; b += TRIG_CHUNK) {                                           \
            int64_t len = n - b < TRIG_CHUNK ? n - b : TRIG_CHUNK;                              \
            if (name##_tame(len, a + b)) {                                                      \
                name##_vec(len, o + b, a + b);                                                  \
                continue;                                                                       \
            }                                                                                   \
            for (int64_t i = b; i < b + len; i++) {                                             \
                float v = a[i];                                                                 \
                o[i] = fabsf(v) <= TRIG_LIMIT ? trig_core(v, Q) : (float)LIBM((double)v);      \
            }                                                                                   \
        }                                                                                       \
    }
TRIG_LOOP(sin_f32, 0u, sin)
TRIG_LOOP(cos_f32, 1u, cos)

/* -- float64 -------------------------------------------------------------------------------- */

static inline double f64_sigmoid(double x) {
    double e = exp(-fabs(x));
    return (x >= 0.0 ? 1.0 : e) / (1.0 + e);
}
static inline double f64_silu(double x) { return x == -INFINITY ? -0.0 : x * f64_sigmoid(x); }
static inline double f64_gelu(double x) {
    return x == -INFINITY ? -0.0 : 0.5 * x * erfc(-x * 0.70710678118654752440);
}
static inline double f64_gelu_tanh(double x) {
    if (isinf(x)) return x < 0 ? -0.0 : x;
    return x * f64_sigmoid(1.5957691216057307117 * x * (1.0 + 0.044715 * x * x));
}

/* -- loops and kernels ---------------------------------------------------------------------- */

#define UN_LOOP(name, T, EXPR)                                                                  \
    static TIDE_SIMD_CLONES void name(int64_t n, int64_t i0, void * restrict out_,              \
                                      const void * const * in, const tide_opcall * c) {         \
        T * restrict o = out_;                                                                  \
        const T * restrict A = in[0];                                                           \
        (void)i0; (void)c;                                                                      \
        for (int64_t i = 0; i < n; i++) {                                                       \
            T a = A[i];                                                                         \
            o[i] = (EXPR);                                                                      \
        }                                                                                       \
    }

#define KERNEL(op, F32, F64)                                                                    \
    const tide_ew_loop tide_loops_##op[TIDE_DTYPE_COUNT] = {                                    \
        [TIDE_DTYPE_F32] = F32, [TIDE_DTYPE_F64] = F64};   /* exported for fused kernels */     \
    tide_status tide_cpu_##op(const tide_opcall * c) {                                          \
        return tide_ew_run(c, tide_loops_##op, -1);                                             \
    }

#define SIMPLE(op, EXPR_F, EXPR_D)                                                              \
    UN_LOOP(op##_f32, float, EXPR_F)                                                            \
    UN_LOOP(op##_f64, double, EXPR_D)                                                           \
    KERNEL(op, op##_f32, op##_f64)

SIMPLE(exp,        f32_exp(a),         exp(a))
SIMPLE(log,        f32_log(a),         log(a))
SIMPLE(log1p,      f32_log1p(a),       log1p(a))
SIMPLE(expm1,      f32_expm1(a),       expm1(a))
SIMPLE(tanh,       f32_tanh(a),        tanh(a))
SIMPLE(sigmoid,    f32_sigmoid(a),     f64_sigmoid(a))
SIMPLE(silu,       f32_silu(a),        f64_silu(a))
SIMPLE(reciprocal, 1.0f / a,           1.0 / a)

/* The rarer functions: libm, one call per element (float32 through libm's
 * float functions, correctly rounded or within 1-2 ulp in glibc). */
SIMPLE(tan,        tanf(a),            tan(a))
SIMPLE(asin,       asinf(a),           asin(a))
SIMPLE(acos,       acosf(a),           acos(a))
SIMPLE(atan,       atanf(a),           atan(a))
SIMPLE(sinh,       sinhf(a),           sinh(a))
SIMPLE(cosh,       coshf(a),           cosh(a))
SIMPLE(asinh,      asinhf(a),          asinh(a))
SIMPLE(acosh,      acoshf(a),          acosh(a))
SIMPLE(atanh,      atanhf(a),          atanh(a))
SIMPLE(erf,        erff(a),            erf(a))
SIMPLE(erfc,       erfcf(a),           erfc(a))
SIMPLE(log2,       log2f(a),           log2(a))
SIMPLE(log10,      log10f(a),          log10(a))
SIMPLE(exp2,       exp2f(a),           exp2(a))

/* erfinv: Giles' single-precision approximation ("Approximating the erfinv
 * function", GPU Computing Gems, 2011) as the start, then Newton steps in
 * double: on erf up to 0.5, and above on log(erfc), where 1 - |y| is exact and
 * the logarithm keeps the steps quadratic deep in the tail (the start is
 * poor there: 1 - 2^-53 takes 8 steps, 0.999 one). Odd; +-1 give +-inf,
 * |y| > 1 and NaN give NaN. */
static double f64_erfinv(double y) {
    double ay = fabs(y);
    if (!(ay <= 1.0)) return NAN;
    if (ay == 1.0) return copysign(INFINITY, y);
    if (ay == 0.0) return y;
    double w = -log((1.0 - ay) * (1.0 + ay)), p;
    if (w < 5.0) {
        w -= 2.5;
        p = 2.81022636e-08;
        p = 3.43273939e-07 + p * w;
        p = -3.5233877e-06 + p * w;
        p = -4.39150654e-06 + p * w;
        p = 0.00021858087 + p * w;
        p = -0.00125372503 + p * w;
        p = -0.00417768164 + p * w;
        p = 0.246640727 + p * w;
        p = 1.50140941 + p * w;
    } else {
        w = sqrt(w) - 3.0;
        p = -0.000200214257;
        p = 0.000100950558 + p * w;
        p = 0.00134934322 + p * w;
        p = -0.00367342844 + p * w;
        p = 0.00573950773 + p * w;
        p = -0.0076224613 + p * w;
        p = 0.00943887047 + p * w;
        p = 1.00167406 + p * w;
        p = 2.83297682 + p * w;
    }
    double x = p * ay;
    const double two_over_sqrt_pi = 1.12837916709551257390;
    for (int it = 0; it < 8; it++) {
        double d = two_over_sqrt_pi * exp(-x * x), dx;
        if (d == 0.0) break;
        if (ay > 0.5) {
            double e = erfc(x);
            dx = (log(e) - log1p(-ay)) * e / d;
        } else {
            dx = (ay - erf(x)) / d;
        }
        x += dx;
        if (fabs(dx) <= 1e-16 * x) break;
    }
    return copysign(x, y);
}
SIMPLE(erfinv,     (float)f64_erfinv(a), f64_erfinv(a))

/* sqrt, rsqrt: with -fmath-errno (the build's default) GCC never vectorises
 * sqrtf, and neither the optimize pragma nor attribute changes that, so on
 * x86 the loops use the SSE2 instructions directly (4 or 2 lanes keep up
 * with memory); rsqrt is 1/sqrt, correctly rounded sqrt then division. */
#if defined(__SSE2__)
#define SQRT_SSE(name, T, W, V, LOAD, SQRT, DIV, SET1, STORE, SCALAR, RECIP)                     \
    static void name(int64_t n, int64_t i0, void * restrict out_, const void * const * in,      \
                     const tide_opcall * c) {                                                   \
        T * o = out_;                                                                           \
        const T * a = in[0];                                                                    \
        int64_t i = 0;                                                                          \
        (void)i0; (void)c;                                                                      \
        for (; i + W <= n; i += W) {                                                            \
            V v = SQRT(LOAD(a + i));                                                            \
            STORE(o + i, RECIP ? DIV(SET1(1), v) : v);                                          \
        }                                                                                       \
        for (; i < n; i++) o[i] = RECIP ? 1 / SCALAR(a[i]) : SCALAR(a[i]);                      \
    }
SQRT_SSE(sqrt_f32, float, 4, __m128, _mm_loadu_ps, _mm_sqrt_ps, _mm_div_ps, _mm_set1_ps, _mm_storeu_ps, sqrtf, 0)
SQRT_SSE(sqrt_f64, double, 2, __m128d, _mm_loadu_pd, _mm_sqrt_pd, _mm_div_pd, _mm_set1_pd, _mm_storeu_pd, sqrt, 0)
SQRT_SSE(rsqrt_f32, float, 4, __m128, _mm_loadu_ps, _mm_sqrt_ps, _mm_div_ps, _mm_set1_ps, _mm_storeu_ps, sqrtf, 1)
SQRT_SSE(rsqrt_f64, double, 2, __m128d, _mm_loadu_pd, _mm_sqrt_pd, _mm_div_pd, _mm_set1_pd, _mm_storeu_pd, sqrt, 1)
#else
UN_LOOP(sqrt_f32, float, sqrtf(a))
UN_LOOP(sqrt_f64, double, sqrt(a))
UN_LOOP(rsqrt_f32, float, 1.0f / sqrtf(a))
UN_LOOP(rsqrt_f64, double, 1.0 / sqrt(a))
#endif
KERNEL(sqrt, sqrt_f32, sqrt_f64)
KERNEL(rsqrt, rsqrt_f32, rsqrt_f64)

UN_LOOP(sin_f64, double, sin(a))
UN_LOOP(cos_f64, double, cos(a))
KERNEL(sin, sin_f32, sin_f64)
KERNEL(cos, cos_f32, cos_f64)

UN_LOOP(gelu_erf_f32, float, f32_gelu(a))
UN_LOOP(gelu_tanh_f32, float, f32_gelu_tanh(a))
UN_LOOP(gelu_erf_f64, double, f64_gelu(a))
UN_LOOP(gelu_tanh_f64, double, f64_gelu_tanh(a))

/* params.flags & 1 picks the tanh approximation */
static void gelu_f32(int64_t n, int64_t i0, void * restrict out, const void * const * in, const tide_opcall * c) {
    (c->p.flags & 1 ? gelu_tanh_f32 : gelu_erf_f32)(n, i0, out, in, c);
}
static void gelu_f64(int64_t n, int64_t i0, void * restrict out, const void * const * in, const tide_opcall * c) {
    (c->p.flags & 1 ? gelu_tanh_f64 : gelu_erf_f64)(n, i0, out, in, c);
}
KERNEL(gelu, gelu_f32, gelu_f64)

/* -- gelu_backward(gy, x): gy * d gelu(x) / dx, for autograd ------------------------------- */
/* exact:  Phi(x) + x phi(x);  tanh form: 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2),
 * t = tanh(k (x + c x^3)). float64 in double through libm; float32 in float, as
 * PyTorch's kernels compute it, from this file's vector functions: Phi is
 * f32_gelu's series below 0.65 and gelu(x) / x above, phi comes from f32_exp.
 * Both are within 3e-7 of the double formula over [-20, 20] (absolute: the exact
 * form's sum cancels near x = -0.75, where the derivative is 0). Through libm in double
 * the float32 loop took 17-21 ns an element, 8x relu's backward. */
static inline float f32_gelu_grad(float x) {
    float z = x * x;
    float cdf = fabsf(x) < 0.65f ? phi_series(x, z) : f32_gelu(x) / x;
    float pdf = 0.39894228040143267794f * f32_exp(-0.5f * z);
    return cdf + x * pdf;
}
/* With e = exp(-2|u|), u = k (x + c x^3): (1 + t) / 2 = 1 / (1 + e) for u >= 0, else
 * e / (1 + e), and 1 - t^2 = 4 e / (1 + e)^2, so that neither cancels where t
 * nears -1 or 1 (1 - t * t lost 8e-7 near x = 5). */
static inline float f32_gelu_tanh_grad(float x) {
    const float k = 0.79788456080286535588f, cc = 0.044715f;
    float       z = x * x;
    float       u = k * (x + cc * z * x);
    float       e = f32_exp(-2.0f * fabsf(u));
    float       r = 1.0f / (1.0f + e);
    float       half = u >= 0.0f ? r : e * r;   /* NaN: e is NaN, and so is the result */
    return half + 2.0f * x * e * r * r * k * (1.0f + 3.0f * cc * z);
}
static inline double gelu_grad(double x, int approx) {
    if (approx) {
        const double k = 0.79788456080286535588, cc = 0.044715;
        double t = tanh(k * (x + cc * x * x * x));
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * cc * x * x);
    }
    return 0.5 * erfc(-x * 0.70710678118654752440) + x * 0.39894228040143267794 * exp(-0.5 * x * x);
}
#define GELU_GRAD_LOOP(name, T)                                                                  \
    static void name(int64_t n, int64_t i0, void * restrict out, const void * const * in,        \
                     const tide_opcall * c) {                                                    \
        T * restrict o = out;                                                                    \
        const T * restrict g = in[0], * restrict x = in[1];                                      \
        int approx = c->p.flags & 1;                                                             \
        (void)i0;                                                                                \
        for (int64_t i = 0; i < n; i++) o[i] = (T)(g[i] * gelu_grad(x[i], approx));              \
    }
GELU_GRAD_LOOP(gelu_backward_f64, double)
static TIDE_SIMD_CLONES void gelu_backward_erf_f32(int64_t n, int64_t i0, void * restrict out, const void * const * in,
                                                   const tide_opcall * c) {
    float * restrict       o = out;
    const float * restrict g = in[0], * restrict x = in[1];
    (void)i0, (void)c;
    for (int64_t i = 0; i < n; i++) o[i] = g[i] * f32_gelu_grad(x[i]);
}
static TIDE_SIMD_CLONES void gelu_backward_tanh_f32(int64_t n, int64_t i0, void * restrict out,
                                                    const void * const * in, const tide_opcall * c) {
    float * restrict       o = out;
    const float * restrict g = in[0], * restrict x = in[1];
    (void)i0, (void)c;
    for (int64_t i = 0; i < n; i++) o[i] = g[i] * f32_gelu_tanh_grad(x[i]);
}
static void gelu_backward_f32(int64_t n, int64_t i0, void * restrict out, const void * const * in,
                              const tide_opcall * c) {
    (c->p.flags & 1 ? gelu_backward_tanh_f32 : gelu_backward_erf_f32)(n, i0, out, in, c);
}
KERNEL(gelu_backward, gelu_backward_f32, gelu_backward_f64)
