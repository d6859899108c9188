/*
 * special.c - inner loops of the special functions: lgamma, digamma,
 * polygamma and the modified Bessel functions i0, i0e, i1, i1e. Both dtypes
 * compute in double (float32 is rounded once at the end, as erfinv in
 * transcend.c); cuda/ewmath.cuh has the same algorithms with the same
 * constants and operation order, so the devices differ only where their libm
 * does. Broadcasting, strides and threads are the iterator's (ew.c).
 */
#include "kernels.h"

#define SF_PI 3.14159265358979323846

/* -- digamma on x > 0 ----------------------------------------------------------------------- */

/* The positive root of digamma, x0 = 1.46163214496836234126..., as hi + lo. */
static const double DIGAMMA_X0_HI = 0x1.762d86356be3fp+0, DIGAMMA_X0_LO = 0x1.b86a722197829p-54;
/* digamma(x) / (x - x0) on [1, 2] as a polynomial in u = x - 1.5, highest degree first: the
 * degree-22 Chebyshev interpolant (mpmath, 40 digits), within 4e-18 of the function, which
 * stays between 0.78 and 1.25. With the root factored out, digamma keeps its relative
 * accuracy where it crosses zero. */
static const double DIGAMMA_POLY[23] = {
    0.00011881232908510335, -0.0001782188548855923, 9.653646261410062e-05, -0.00014480643368061614,
    0.00032395945401345196, -0.00048595039220036254, 0.0006909255761282986, -0.0010364584817312839,
    0.0015633696313653504,  -0.0023454947397380833, 0.003518106563802472,  -0.005279937255532708,
    0.007927021796868154,   -0.011908220105959716,  0.017907248317313294,  -0.026975796659787055,
    0.040760833940846085,   -0.06192213327548831,   0.09498872445289039,   -0.14840492305388092,
    0.24054248424078697,    -0.4236274212814606,    0.9510558760318328,
};
/* B_2k / 2k, k = 1..7: digamma(x) = log x - 1/(2x) - sum B_2k / (2k x^2k) for x >= 10,
 * where the first term left out is below 2e-17 of the result. */
static const double DIGAMMA_ASYM[7] = {1.0 / 12, -1.0 / 120, 1.0 / 252, -1.0 / 240, 1.0 / 132, -691.0 / 32760, 1.0 / 12};

/* digamma(x) for finite x > 0: the asymptotic series from 10 on; below, the recurrence
 * digamma(x) = digamma(x + 1) - 1/x takes x into [1, 2] (x - 1 is exact for x >= 1),
 * where the polynomial is. Within 2.5 ulp of mpmath's. */
static double digamma_pos(double x) {
    if (x >= 10.0) {
        double z = 1.0 / (x * x), p = DIGAMMA_ASYM[6];
        for (int k = 5; k >= 0; k--) p = p * z + DIGAMMA_ASYM[k];
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
    double u = x - 1.5, p = DIGAMMA_POLY[0];
    for (int k = 1; k < 23; k++) p = p * u + DIGAMMA_POLY[k];
    return ((x - DIGAMMA_X0_HI) - DIGAMMA_X0_LO) * p + s;
}

/* lgamma_r: lgamma's sign goes to a global, which the pool's threads would race on. */
static double sf_lgamma(double x) {
    int sign;
    return lgamma_r(x, &sign);
}

/* -- polygamma, n >= 1, on x > 0 ------------------------------------------------------------ */

/* (2j)! / B_2j, j = 1..12, for the Euler-Maclaurin tail of the Hurwitz zeta function
 * (Cephes' zeta.c table, written as the exact fractions). */
static const double ZETA_EM[12] = {
    12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1307674368000.0 / 691, 74724249600.0,
    -10670622842880000.0 / 3617, 5109094217170944000.0 / 43867, -802857662698291200000.0 / 174611,
    14101100039391805440000.0 / 77683, -1693824136731743669452800000.0 / 236364091,
};

/* s + c, compensated (Neumaier) */
typedef struct { double s, c; } sf_sum;
static inline void sf_add(sf_sum * k, double v) {
    double t = k->s + v;
    k->c += fabs(k->s) >= fabs(v) ? (k->s - t) + v : (v - t) + k->s;
    k->s = t;
}

/* The Hurwitz zeta function zeta(s, q) = sum over k >= 0 of (q + k)^-s, for an integer
 * s >= 2 and a finite q > 0, scaled by 2^(e s) with e = ilogb(q), which it sets: the terms
 * are powers of (q + k) 2^-e, an exact rescaling, so that none underflows where n! times the
 * result does not. As Cephes' zeta: ten terms or more, then the Euler-Maclaurin tail. Each
 * q + k is rounded, and its power, s times as far off, is corrected to first order from the
 * rounding error (else large s cost s/2 ulp); the sum is compensated. */
static double zeta_scaled(double s, double q, int * e_out) {
    int e = ilogb(q);
    *e_out = e;
    double p0 = pow(ldexp(q, -e), -s);
    if (q > 1e8)   /* the tail's first terms; the next is below 1e-17 of the result for s < 2e4 */
        return p0 * (q / (s - 1.0) + 0.5 + s / (12.0 * q));
    sf_sum sum = {p0, 0.0};
    double a = q, lo = 0.0, b = p0;
    for (int i = 1; i < 10 || a <= 9.0; i++) {
        double k = (double)i;
        a = q + k;
        double bk = a - q;
        lo = (q - (a - bk)) + (k - bk);   /* q + k = a + lo, exactly */
        b = pow(ldexp(a, -e), -s) * (1.0 - s * lo / a);
        sf_add(&sum, b);
        if (b <= 0x1p-53 * sum.s) return sum.s + sum.c;
    }
    sf_add(&sum, (b * a + b * lo) / (s - 1.0));   /* (a + lo)^(1 - s) / (s - 1) */
    sf_add(&sum, -0.5 * b);
    double f = 1.0, j = 0.0;   /* s (s + 1) ... (s + 2m), the rising factorial */
    for (int m = 0; m < 12; m++) {
        f *= s + j;
        b /= a;
        double t = f * b / ZETA_EM[m];
        sf_add(&sum, t);
        if (fabs(t) <= 0x1p-53 * sum.s) break;
        j += 1.0;
        f *= s + j;
        b /= a;
        j += 1.0;
    }
    return sum.s + sum.c;
}

/* zeta(s, q) for q in [1/2, 3/2] (and 1 - x for x < 0, where an underflow is harmless). */
static double zeta_plain(double s, double q) {
    int    e;
    double z = zeta_scaled(s, q, &e);
    return ldexp(z, (int)fmin(fmax(-e * s, -4000.0), 4000.0));
}

/* n! as a fraction in [1/2, 1) times 2^e: the product to 170 (exact to 22), above from
 * lgamma (then to about 1e-13). */
static double factorial_frexp(int64_t n, int * e) {
    if (n <= 170) {
        double f = 1.0;
        for (int64_t k = 2; k <= n; k++) f *= (double)k;
        return frexp(f, e);
    }
    double l2 = sf_lgamma((double)n + 1.0) / 0.69314718055994530942, ip = floor(l2);
    double m = frexp(exp2(l2 - ip), e);
    *e += (int)fmin(ip, 1e6);
    return m;
}

/* psi^(n)(x) = (-1)^(n+1) n! zeta(n + 1, x) for finite x > 0 and n >= 1, the three factors
 * (n!, the scaled zeta, 2^(-e s)) joined by their exponents: no partial product overflows
 * or underflows. Within 4 ulp of mpmath's for n up to 120. */
static double polygamma_pos(int64_t n, double x) {
    int    ez, ef, em;
    double s = (double)n + 1.0;
    double m = frexp(zeta_scaled(s, x, &ez), &em);
    double f = factorial_frexp(n, &ef);
    double ex = (double)ef + em - (double)ez * s;
    ex = ex < -4000.0 ? -4000.0 : ex > 4000.0 ? 4000.0 : ex;
    double r = ldexp(f * m, (int)ex);
    return n & 1 ? r : -r;
}

/* -- any x ------------------------------------------------------------------------------------ */

/* cot(pi r) for |r| <= 1/2: from 1/4 on as tan(pi (1/2 - |r|)), whose argument is exact, so
 * that it is 0 at 1/2 and keeps its relative accuracy near it. */
static double cot_pi(double r) {
    double a = fabs(r);
    if (a <= 0.25) return 1.0 / tan(SF_PI * r);
    double c = tan(SF_PI * (0.5 - a));
    return r < 0 ? -c : c;
}

enum { SF_LEIBNIZ_MAX = 63 };

/* psi^(n)(x) for x < 0 not an integer. With r = x - round(x) (exact), a = |r| and s = n + 1,
 * the sum over k >= 0 of (x + k)^-s is the sum over all integers k of (r + k)^-s less the
 * terms below x, and so
 *   psi^(n)(x) = (-1)^(n+1) n! [r^-s + zeta(s, 1 + r) + (-1)^s zeta(s, 1 - r) - (-1)^s zeta(s, 1 - x)],
 * whose terms have one sign for odd n, and for even n cancel at most by half where r^-s is at
 * least twice (1 - a)^-s. Elsewhere (even n, a near 1/2) the reflection
 *   psi^(n)(x) = psi^(n)(1 - x) - pi^(n+1) cot^(n)(pi r),
 * cot^(n) from c = cot(pi r) (then small) by d0 = c, d1 = -(1 + c^2),
 * d(m+1) = -sum_k C(m, k) dk d(m-k) (Leibniz on cot' = -(1 + cot^2)), whose terms have one
 * sign; above n = 63 (more derivatives than it keeps) by r^-s - (1 - a)^-s alone, through
 * expm1, the other terms being below 2^-53 of it for s >= 65 but where it is 0, at a = 1/2.
 * digamma: digamma(1 - x) - pi cot(pi r). Near the zeros of psi^(n) its two halves cancel:
 * the error is a few ulp of the larger; elsewhere within about n/2 ulp + 4. */
static double polygamma_neg(int64_t n, double x) {
    double r = x - round(x), a = fabs(r), s = (double)n + 1.0;
    if (n == 0) {   /* 1 - x = y + lo: trigamma(y) ~ 1/y + 1/2y^2 + 1/6y^3 puts back what y lost */
        double y = 1.0 - x, bv = y - 1.0, lo = (1.0 - (y - bv)) + (-x - bv);
        double t = 1.0 / y, d1 = t * (1.0 + t * (0.5 + t / 6.0));
        return (digamma_pos(y) + d1 * lo) - SF_PI * cot_pi(r);
    }
    double f = 1.0;
    for (int64_t k = 2; k <= n && f < INFINITY; k++) f *= (double)k;
    if (n & 1 || pow(a / (1.0 - a), s) < 0.5) {
        double b = pow(a, -s), z1 = zeta_plain(s, 1.0 + r), z2 = zeta_plain(s, 1.0 - r);
        double zx = zeta_plain(s, 1.0 - x);
        if (n & 1) return f * (b + z1 + z2 - zx);
        return -f * ((r < 0 ? -b : b) + z1 - z2 + zx);
    }
    if (n > SF_LEIBNIZ_MAX) {
        if (a == 0.5) return polygamma_pos(n, 1.0 - x);
        double pair = -pow(a, -s) * expm1(s * log1p((2.0 * a - 1.0) / (1.0 - a)));
        return r < 0 ? f * pair : -f * pair;
    }
    double d[SF_LEIBNIZ_MAX + 1], c = cot_pi(r);
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
    return polygamma_pos(n, 1.0 - x) - pow(SF_PI, s) * d[n];
}

/* psi^(n)(x), n >= 0. The poles as PyTorch has them: digamma -inf at +0, +inf at -0, NaN at
 * the negative integers; for n >= 1 (-1)^(n+1) inf at 0 and the negative integers (where
 * PyTorch's trigamma gives a large finite number: its sin(pi x) is not 0 there). At -inf
 * NaN (no limit); at +inf digamma inf, the others 0. */
static double sf_polygamma(int64_t n, double x) {
    if (x != x) return x;
    if (x == INFINITY) return n == 0 ? x : n & 1 ? 0.0 : -0.0;
    if (n == 0 && x == 0.0) return copysign(INFINITY, -x);
    if (x > 0.0) return n == 0 ? digamma_pos(x) : polygamma_pos(n, x);
    if (x == floor(x)) return n == 0 || x == -INFINITY ? NAN : n & 1 ? INFINITY : -INFINITY;
    return polygamma_neg(n, x);
}

/* -- the modified Bessel functions of the first kind, orders 0 and 1 -------------------------- */

/* Up to 8, the power series, whose terms are all positive; above, Cephes' form: exp(x) / sqrt(x)
 * times a Chebyshev series in 32/x - 2 (coefficients recomputed with mpmath, 60 digits, to
 * 1e-18). Within 6.5 ulp of mpmath's (Cephes' i1 is within 8.6). The scaled ones (i0e, i1e)
 * leave out exp(|x|); the others take it as exp(|x|/2)^2 above 700, so that they overflow only
 * where the result does. */
static const double BESSEL_I0_B[27] = {
    1.193650890845982e-18,  9.921475412173699e-19,  -7.233180487874754e-18, -4.830504485944182e-18,
    4.46562142029676e-17,   3.461222867697461e-17,  -2.8276239805165836e-16, -3.425485619677219e-16,
    1.7725601330565263e-15, 3.8116806693526224e-15, -9.554846698828307e-15, -4.150569347287222e-14,
    1.54008621752141e-14,   3.8527783827421426e-13, 7.180124451383666e-13,  -1.7941785315068062e-12,
    -1.3215811840447713e-11, -3.1499165279632416e-11, 1.1889147107846439e-11, 4.94060238822497e-10,
    3.3962320257083865e-09, 2.266668990498178e-08,  2.0489185894690638e-07, 2.8913705208347567e-06,
    6.889758346916825e-05,  0.0033691164782556943,  0.8044904110141088,
};
static const double BESSEL_I1_B[27] = {
    -1.242193275194891e-18, -9.314178867326884e-19, 7.517296310842105e-18,  4.414348323071708e-18,
    -4.6503053684893586e-17, -3.209525921993424e-17, 2.96262899764595e-16,  3.3082023109209285e-16,
    -1.8803547755107825e-15, -3.8144030724370075e-15, 1.0420276984128802e-14, 4.272440016711951e-14,
    -2.1015418427726643e-14, -4.0835511110921974e-13, -7.198551776245908e-13, 2.0356285441470896e-12,
    1.4125807436613782e-11, 3.2526035830154884e-11, -1.8974958123505413e-11, -5.589743462196584e-10,
    -3.835380385964237e-09, -2.6314688468895196e-08, -2.512236237870209e-07, -3.882564808877691e-06,
    -0.00011058893876262371, -0.009761097491361469, 0.7785762350182801,
};

/* sum' c_k T_k(y / 2), c highest first (Cephes' chbevl: Clenshaw on y in [-2, 2]) */
static double chbevl(double y, const double * c, int n) {
    double b0 = c[0], b1 = 0.0, b2 = 0.0;
    for (int i = 1; i < n; i++) {
        b2 = b1;
        b1 = b0;
        b0 = y * b1 - b2 + c[i];
    }
    return 0.5 * (b0 - b2);
}

/* I_order(a) for 0 <= a <= 8: sum (a^2/4)^k / (k! (k + order)!), times a/2 for order 1 */
static double bessel_series(int order, double a) {
    double q = 0.25 * a * a, t = 1.0, s = 1.0;
    for (int k = 1; k < 60 && t > 0x1p-54 * s; k++) {
        t *= q / ((double)k * (double)(k + order));
        s += t;
    }
    return order ? 0.5 * a * s : s;
}

/* I_order(x), or exp(-|x|) I_order(x) when scaled */
static double bessel_f64(int order, int scaled, double x) {
    double a = fabs(x), r;
    if (a <= 8.0) {
        r = bessel_series(order, a);
        if (scaled) r *= exp(-a);
    } else if (a == INFINITY) {
        r = scaled ? 0.0 : INFINITY;
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

/* -- loops and kernels ------------------------------------------------------------------------ */

#define SF_LOOP(name, T, EXPR)                                                                  \
    static void name(int64_t n, int64_t i0, void * restrict out_, const void * const * in,      \
                     const tide_opcall * c) {                                                   \
        T * restrict o = out_;                                                                  \
        const T * restrict A = in[0];                                                           \
        (void)i0; (void)c;                                                                      \
        for (int64_t i = 0; i < n; i++) o[i] = (T)(EXPR);                                       \
    }

#define SF_KERNEL(op, EXPR)                                                                     \
    SF_LOOP(op##_f32, float, EXPR)                                                              \
    SF_LOOP(op##_f64, double, EXPR)                                                             \
    const tide_ew_loop tide_loops_##op[TIDE_DTYPE_COUNT] = {                                    \
        [TIDE_DTYPE_F32] = op##_f32, [TIDE_DTYPE_F64] = op##_f64};   /* for fused kernels */   \
    tide_status tide_cpu_##op(const tide_opcall * c) { return tide_ew_run(c, tide_loops_##op, -1); }

SF_KERNEL(lgamma, sf_lgamma((double)A[i]))
SF_KERNEL(digamma, sf_polygamma(0, (double)A[i]))
SF_KERNEL(polygamma, sf_polygamma(c->p.ints[0], (double)A[i]))
SF_KERNEL(i0, bessel_f64(0, 0, (double)A[i]))
SF_KERNEL(i0e, bessel_f64(0, 1, (double)A[i]))
SF_KERNEL(i1, bessel_f64(1, 0, (double)A[i]))
SF_KERNEL(i1e, bessel_f64(1, 1, (double)A[i]))

/* polygamma's n: ints[0], a non-negative integer. */
tide_status tide_shape_polygamma(tide_opcall * c, tide_shape_out * o) {
    if (c->p.n_ints < 1 || c->p.ints[0] < 0)
        return tide_error_set(TIDE_E_VALUE, "polygamma: n must be a non-negative integer, got %lld",
                              (long long)(c->p.n_ints ? c->p.ints[0] : -1));
    return tide_shape_first(c, o);
}
