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
/* log2 exact at powers of two, as the CPU's libm is (CUDA's is within 1 ulp:
 * log2(8) came out 2.9999999999999996 on an H100) */
__device__ inline float m_log2(float x) {
    int   e;
    float m = frexpf(x, &e);
    return m == 0.5f ? (float)(e - 1) : log2f(x);
}
__device__ inline double m_log2(double x) {
    int    e;
    double m = frexp(x, &e);
    return m == 0.5 ? (double)(e - 1) : log2(x);
}
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

/* -- the gamma family ------------------------------------------------------------------------- */

/* lgamma, digamma and polygamma as ops/cpu/special.c computes them, in double for both
 * dtypes: the same algorithms, constants and order of operations (see there for why each
 * step is as it is), so that only the math library's lgamma, log, pow, tan and expm1 part
 * the devices. */
__device__ inline double sf_nan() { return __longlong_as_double(0x7ff8000000000000ULL); }

/* digamma(x) for finite x > 0 */
__device__ inline double digamma_pos(double x) {
    if (x >= 10.0) {
        double z = 1.0 / (x * x), p = 1.0 / 12;
        p = p * z + -691.0 / 32760;
        p = p * z + 1.0 / 132;
        p = p * z + -1.0 / 240;
        p = p * z + 1.0 / 252;
        p = p * z + -1.0 / 120;
        p = p * z + 1.0 / 12;
        return log(x) - 0.5 / x - z * p;
    }
    double s = 0.0;
    if (x < 1.0) {
        s = -1.0 / x;
        x += 1.0;
    }
    while (x > 2.0) {
        x -= 1.0;
        s += 1.0 / x;
    }
    double u = x - 1.5, p = 0.00011881232908510335;
    p = p * u + -0.0001782188548855923;
    p = p * u + 9.653646261410062e-05;
    p = p * u + -0.00014480643368061614;
    p = p * u + 0.00032395945401345196;
    p = p * u + -0.00048595039220036254;
    p = p * u + 0.0006909255761282986;
    p = p * u + -0.0010364584817312839;
    p = p * u + 0.0015633696313653504;
    p = p * u + -0.0023454947397380833;
    p = p * u + 0.003518106563802472;
    p = p * u + -0.005279937255532708;
    p = p * u + 0.007927021796868154;
    p = p * u + -0.011908220105959716;
    p = p * u + 0.017907248317313294;
    p = p * u + -0.026975796659787055;
    p = p * u + 0.040760833940846085;
    p = p * u + -0.06192213327548831;
    p = p * u + 0.09498872445289039;
    p = p * u + -0.14840492305388092;
    p = p * u + 0.24054248424078697;
    p = p * u + -0.4236274212814606;
    p = p * u + 0.9510558760318328;
    return ((x - 0x1.762d86356be3fp+0) - 0x1.b86a722197829p-54) * p + s;
}

/* (2j)! / B_2j, j = m + 1 */
__device__ inline double zeta_em(int m) {
    switch (m) {
    case 0:  return 12.0;
    case 1:  return -720.0;
    case 2:  return 30240.0;
    case 3:  return -1209600.0;
    case 4:  return 47900160.0;
    case 5:  return -1307674368000.0 / 691;
    case 6:  return 74724249600.0;
    case 7:  return -10670622842880000.0 / 3617;
    case 8:  return 5109094217170944000.0 / 43867;
    case 9:  return -802857662698291200000.0 / 174611;
    case 10: return 14101100039391805440000.0 / 77683;
    default: return -1693824136731743669452800000.0 / 236364091;
    }
}

/* s + c, compensated (Neumaier) */
__device__ inline void sf_add(double & s, double & c, double v) {
    double t = s + v;
    c += fabs(s) >= fabs(v) ? (s - t) + v : (v - t) + s;
    s = t;
}

/* zeta(s, q) 2^(e s), e = ilogb(q), for an integer s >= 2 and finite q > 0 */
__device__ inline double zeta_scaled(double s, double q, int & e) {
    e = ilogb(q);
    double p0 = pow(ldexp(q, -e), -s);
    if (q > 1e8) return p0 * (q / (s - 1.0) + 0.5 + s / (12.0 * q));
    double sum = p0, comp = 0.0, a = q, lo = 0.0, b = p0;
    for (int i = 1; i < 10 || a <= 9.0; i++) {
        double k = (double)i;
        a = q + k;
        double bk = a - q;
        lo = (q - (a - bk)) + (k - bk);
        b = pow(ldexp(a, -e), -s) * (1.0 - s * lo / a);
        sf_add(sum, comp, b);
        if (b <= 0x1p-53 * sum) return sum + comp;
    }
    sf_add(sum, comp, (b * a + b * lo) / (s - 1.0));
    sf_add(sum, comp, -0.5 * b);
    double f = 1.0, j = 0.0;
    for (int m = 0; m < 12; m++) {
        f *= s + j;
        b /= a;
        double t = f * b / zeta_em(m);
        sf_add(sum, comp, t);
        if (fabs(t) <= 0x1p-53 * sum) break;
        j += 1.0;
        f *= s + j;
        b /= a;
        j += 1.0;
    }
    return sum + comp;
}

__device__ inline double zeta_plain(double s, double q) {
    int    e;
    double z = zeta_scaled(s, q, e);
    return ldexp(z, (int)fmin(fmax(-e * s, -4000.0), 4000.0));
}

/* n! as a fraction in [1/2, 1) times 2^e */
__device__ inline double factorial_frexp(long long n, int & e) {
    if (n <= 170) {
        double f = 1.0;
        for (long long k = 2; k <= n; k++) f *= (double)k;
        return frexp(f, &e);
    }
    double l2 = lgamma((double)n + 1.0) / 0.69314718055994530942, ip = floor(l2);
    double m = frexp(exp2(l2 - ip), &e);
    e += (int)fmin(ip, 1e6);
    return m;
}

/* psi^(n)(x) for finite x > 0, n >= 1 */
__device__ inline double polygamma_pos(long long n, double x) {
    int    ez, ef, em;
    double s = (double)n + 1.0;
    double m = frexp(zeta_scaled(s, x, ez), &em);
    double f = factorial_frexp(n, ef);
    double ex = (double)ef + em - (double)ez * s;
    ex = ex < -4000.0 ? -4000.0 : ex > 4000.0 ? 4000.0 : ex;
    double r = ldexp(f * m, (int)ex);
    return n & 1 ? r : -r;
}

/* cot(pi r), |r| <= 1/2 */
__device__ inline double cot_pi(double r) {
    const double pi = 3.14159265358979323846;
    double a = fabs(r);
    if (a <= 0.25) return 1.0 / tan(pi * r);
    double c = tan(pi * (0.5 - a));
    return r < 0 ? -c : c;
}

/* psi^(n)(x) for x < 0 not an integer. The derivatives of cot live in a local array of 64
 * (local memory on the device, touched only for even n near half-integers). */
__device__ inline double polygamma_neg(long long n, double x) {
    const double pi = 3.14159265358979323846;
    double r = x - round(x), a = fabs(r), s = (double)n + 1.0;
    if (n == 0) {
        double y = 1.0 - x, bv = y - 1.0, lo = (1.0 - (y - bv)) + (-x - bv);
        double t = 1.0 / y, d1 = t * (1.0 + t * (0.5 + t / 6.0));
        return (digamma_pos(y) + d1 * lo) - pi * cot_pi(r);
    }
    double f = 1.0;
    for (long long k = 2; k <= n && f < INFINITY; k++) f *= (double)k;
    if (n & 1 || pow(a / (1.0 - a), s) < 0.5) {
        double b = pow(a, -s), z1 = zeta_plain(s, 1.0 + r), z2 = zeta_plain(s, 1.0 - r);
        double zx = zeta_plain(s, 1.0 - x);
        if (n & 1) return f * (b + z1 + z2 - zx);
        return -f * ((r < 0 ? -b : b) + z1 - z2 + zx);
    }
    if (n > 63) {
        if (a == 0.5) return polygamma_pos(n, 1.0 - x);
        double pair = -pow(a, -s) * expm1(s * log1p((2.0 * a - 1.0) / (1.0 - a)));
        return r < 0 ? f * pair : -f * pair;
    }
    double d[64], c = cot_pi(r);
    d[0] = c;
    d[1] = -(1.0 + c * c);
    for (int m = 1; m < n; m++) {
        double acc = 0.0, binom = 1.0;
        for (int k = 0; k <= m; k++) {
            acc += binom * d[k] * d[m - k];
            binom = binom * (double)(m - k) / (double)(k + 1);
        }
        d[m + 1] = -acc;
    }
    return polygamma_pos(n, 1.0 - x) - pow(pi, s) * d[n];
}

/* psi^(n)(x), n >= 0, with PyTorch's values at the poles (special.c's sf_polygamma) */
__device__ inline double polygamma_of(long long n, double x) {
    if (x != x) return x;
    if (x == INFINITY) return n == 0 ? x : n & 1 ? 0.0 : -0.0;
    if (n == 0 && x == 0.0) return copysign((double)INFINITY, -x);
    if (x > 0.0) return n == 0 ? digamma_pos(x) : polygamma_pos(n, x);
    if (x == floor(x)) return n == 0 || x == -INFINITY ? sf_nan() : n & 1 ? INFINITY : -INFINITY;
    return polygamma_neg(n, x);
}

/* -- the modified Bessel functions i0, i0e, i1, i1e ----------------------------------------- */

/* As ops/cpu/special.c: the power series up to 8, Cephes' Chebyshev form above, in double. */
__device__ const double BESSEL_I0_B[27] = {
    1.193650890845982e-18,  9.921475412173699e-19,  -7.233180487874754e-18, -4.830504485944182e-18,
    4.46562142029676e-17,   3.461222867697461e-17,  -2.8276239805165836e-16, -3.425485619677219e-16,
    1.7725601330565263e-15, 3.8116806693526224e-15, -9.554846698828307e-15, -4.150569347287222e-14,
    1.54008621752141e-14,   3.8527783827421426e-13, 7.180124451383666e-13,  -1.7941785315068062e-12,
    -1.3215811840447713e-11, -3.1499165279632416e-11, 1.1889147107846439e-11, 4.94060238822497e-10,
    3.3962320257083865e-09, 2.266668990498178e-08,  2.0489185894690638e-07, 2.8913705208347567e-06,
    6.889758346916825e-05,  0.0033691164782556943,  0.8044904110141088,
};
__device__ const double BESSEL_I1_B[27] = {
    -1.242193275194891e-18, -9.314178867326884e-19, 7.517296310842105e-18,  4.414348323071708e-18,
    -4.6503053684893586e-17, -3.209525921993424e-17, 2.96262899764595e-16,  3.3082023109209285e-16,
    -1.8803547755107825e-15, -3.8144030724370075e-15, 1.0420276984128802e-14, 4.272440016711951e-14,
    -2.1015418427726643e-14, -4.0835511110921974e-13, -7.198551776245908e-13, 2.0356285441470896e-12,
    1.4125807436613782e-11, 3.2526035830154884e-11, -1.8974958123505413e-11, -5.589743462196584e-10,
    -3.835380385964237e-09, -2.6314688468895196e-08, -2.512236237870209e-07, -3.882564808877691e-06,
    -0.00011058893876262371, -0.009761097491361469, 0.7785762350182801,
};

__device__ inline double chbevl(double y, const double * c, int n) {
    double b0 = c[0], b1 = 0.0, b2 = 0.0;
    for (int i = 1; i < n; i++) {
        b2 = b1;
        b1 = b0;
        b0 = y * b1 - b2 + c[i];
    }
    return 0.5 * (b0 - b2);
}

__device__ inline double bessel_series(int order, double a) {
    double q = 0.25 * a * a, t = 1.0, s = 1.0;
    for (int k = 1; k < 60 && t > 0x1p-54 * s; k++) {
        t *= q / ((double)k * (double)(k + order));
        s += t;
    }
    return order ? 0.5 * a * s : s;
}

/* I_order(x), or exp(-|x|) I_order(x) when scaled */
__device__ inline double bessel_of(int order, bool scaled, double x) {
    double a = fabs(x), r;
    if (a <= 8.0) {
        r = bessel_series(order, a);
        if (scaled) r *= exp(-a);
    } else if (a == INFINITY) {
        r = scaled ? 0.0 : (double)INFINITY;
    } else {
        r = chbevl(32.0 / a - 2.0, order ? BESSEL_I1_B : BESSEL_I0_B, 27) / sqrt(a);
        if (!scaled && a <= 700.0) r *= exp(a);
        else if (!scaled) {
            double h = exp(0.5 * a);
            r = r * h * h;
        }
    }
    return order ? copysign(r, x) : r;
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
template <typename T> __device__ inline T f_lgamma(T a) { return (T)lgamma((double)a); }
template <typename T> __device__ inline T f_digamma(T a) { return (T)polygamma_of(0, (double)a); }
template <typename T> __device__ inline T f_polygamma(T a, long long n) { return (T)polygamma_of(n, (double)a); }

/* v, which the compiler cannot see through. A fused kernel (fuse_cuda.c) knows
 * polygamma's n when NVRTC compiles it; given as a literal, what depends on it
 * alone was folded at compile time (pow(pi, n + 1) by the compiler's pow, where
 * the unfused kernel calls libdevice's): a float64 result one ulp from eager's
 * on an H100. Through this it is computed at run time, as there. */
__device__ inline long long tide_opaque_ll(long long v) {
#ifdef __CUDA_ARCH__
    asm volatile("mov.b64 %0, %0;" : "+l"(v));
#endif
    return v;
}
template <typename T> __device__ inline T f_i0(T a) { return (T)bessel_of(0, false, (double)a); }
template <typename T> __device__ inline T f_i0e(T a) { return (T)bessel_of(0, true, (double)a); }
template <typename T> __device__ inline T f_i1(T a) { return (T)bessel_of(1, false, (double)a); }
template <typename T> __device__ inline T f_i1e(T a) { return (T)bessel_of(1, true, (double)a); }
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
/* PyTorch's div_floor, as the CPU's (binary.c) */
template <typename T> __device__ inline T f_floor_divide(T a, T b) {
    if (b == (T)0) return a / b;
    T mod = m_fmod(a, b), div = (a - mod) / b;
    if (mod != (T)0 && ((b < (T)0) != (mod < (T)0))) div -= (T)1;
    if (div == (T)0) return (T)0 * (a / b);   /* copysign(0, a / b): |a / b| < 1 here */
    T f = m_floor(div);
    return div - f > (T)0.5 ? f + (T)1 : f;
}
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
