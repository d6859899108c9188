/*
 * rules.c - the backward rule of every differentiable op of the registry,
 * one GRAD() each, found by name like kernels. A rule gets the gradients of
 * the op's outputs and returns those of its inputs, composing registry ops;
 * gradients of broadcast inputs may be left in the broadcast shape: the walk
 * sums them back and converts dtypes. Ops with no rule here are not
 * differentiable (backward through them is an error naming the op).
 */
#include "grad.h"

#include <math.h>

#define NEEDS(i) (c->needs[i])
#define SET(i, t) do { if (NEEDS(i)) g_set(c, (i), (t)); } while (0)
#define ZEROS(i) g_zeros(c, &c->node->in[i])

/* -- elementwise unary ------------------------------------------------------------------ */

GRAD(neg, 0) { SET(0, U(neg, GY(0))); return TIDE_OK; }
GRAD(abs, SAVE_IN0) { SET(0, B(mul, GY(0), U(sign, IN(0)))); return TIDE_OK; }
GRAD(exp, SAVE_OUT0) { SET(0, B(mul, GY(0), OUT(0))); return TIDE_OK; }
GRAD(log, SAVE_IN0) { SET(0, B(div, GY(0), IN(0))); return TIDE_OK; }
GRAD(log1p, SAVE_IN0) { SET(0, B(div, GY(0), B(add, IN(0), NUM(1)))); return TIDE_OK; }
GRAD(expm1, SAVE_OUT0) { SET(0, B(mul, GY(0), B(add, OUT(0), NUM(1)))); return TIDE_OK; }
GRAD(sqrt, SAVE_OUT0) { SET(0, B(div, GY(0), B(mul, OUT(0), NUM(2)))); return TIDE_OK; }
GRAD(rsqrt, SAVE_OUT0) { SET(0, B(mul, GY(0), B(mul, B(pow, OUT(0), NUM(3)), NUM(-0.5)))); return TIDE_OK; }
GRAD(sin, SAVE_IN0) { SET(0, B(mul, GY(0), U(cos, IN(0)))); return TIDE_OK; }
GRAD(cos, SAVE_IN0) { SET(0, B(mul, GY(0), U(neg, U(sin, IN(0))))); return TIDE_OK; }
GRAD(tanh, SAVE_OUT0) { SET(0, B(mul, GY(0), B(sub, NUM(1), B(mul, OUT(0), OUT(0))))); return TIDE_OK; }
GRAD(sigmoid, SAVE_OUT0) { SET(0, B(mul, GY(0), B(mul, OUT(0), B(sub, NUM(1), OUT(0))))); return TIDE_OK; }
GRAD(relu, SAVE_OUT0) { SET(0, W(B(gt, OUT(0), NUM(0)), GY(0), NUM(0))); return TIDE_OK; }
GRAD(gelu, SAVE_IN0) {
    tide_op_params p = g_params(0, NULL, 0, c->node->p.flags);
    SET(0, g_call(c, TIDE_OP_gelu_backward, 2, GY(0), IN(0), NULL, &p));
    return TIDE_OK;
}
/* gelu_backward(gy, x) = gy gelu'(x) (recorded by create_graph): linear in gy, and
 * gelu''(x) = phi(x) (2 - x^2) exactly; for the tanh form 0.5 x (1 + t), t = tanh(u),
 * u = k (x + a x^3): gelu'' = (1 - t^2) (u' + x (u'' / 2 - t u'^2)). */
GRAD_ONLY_FOR(gelu_backward, SAVE_IN0 | SAVE_IN1, [0] = 1 << 1) {
    tide_op_params p = g_params(0, NULL, 0, c->node->p.flags);
    SET(0, g_call(c, TIDE_OP_gelu_backward, 2, GY(0), IN(1), NULL, &p));
    if (!NEEDS(1)) return TIDE_OK;
    tide_tensor * x = IN(1), * x2 = B(mul, x, x), * d2;
    if (c->node->p.flags & 1) {
        const double k = 0.79788456080286535588, a = 0.044715;
        tide_tensor * t  = U(tanh, B(mul, B(add, x, B(mul, B(mul, x2, x), NUM(a))), NUM(k)));
        tide_tensor * u1 = B(mul, B(add, B(mul, x2, NUM(3 * a)), NUM(1)), NUM(k));
        tide_tensor * in = B(sub, B(mul, x, NUM(3 * a * k)), B(mul, t, B(mul, u1, u1)));
        d2 = B(mul, B(sub, NUM(1), B(mul, t, t)), B(add, u1, B(mul, x, in)));
    } else {   /* phi(x) = exp(-x^2 / 2) / sqrt(2 pi) */
        tide_tensor * phi = B(mul, U(exp, B(mul, x2, NUM(-0.5))), NUM(0.39894228040143267794));
        d2 = B(mul, phi, B(sub, NUM(2), x2));
    }
    g_set(c, 1, B(mul, B(mul, GY(0), IN(0)), d2));
    return TIDE_OK;
}
GRAD(silu, SAVE_IN0) {   /* s (1 + x (1 - s)) */
    tide_tensor * s = U(sigmoid, IN(0));
    SET(0, B(mul, GY(0), B(mul, s, B(add, NUM(1), B(mul, IN(0), B(sub, NUM(1), s))))));
    return TIDE_OK;
}
/* piecewise constant: zero almost everywhere, as PyTorch has it */
GRAD(floor, 0) { SET(0, ZEROS(0)); return TIDE_OK; }
GRAD(ceil, 0) { SET(0, ZEROS(0)); return TIDE_OK; }
GRAD(round, 0) { SET(0, ZEROS(0)); return TIDE_OK; }
GRAD(sign, 0) { SET(0, ZEROS(0)); return TIDE_OK; }
GRAD(trunc, 0) { SET(0, ZEROS(0)); return TIDE_OK; }
GRAD(reciprocal, SAVE_OUT0) { SET(0, U(neg, B(mul, GY(0), B(mul, OUT(0), OUT(0))))); return TIDE_OK; }
/* the inverse trigonometric and hyperbolic functions, erf and the log/exp bases:
 * the textbook derivatives, in PyTorch's forms (acosh's sqrt((x-1)(x+1))) */
GRAD(tan, SAVE_OUT0) { SET(0, B(mul, GY(0), B(add, NUM(1), B(mul, OUT(0), OUT(0))))); return TIDE_OK; }
static tide_tensor * one_minus_sq(tide_grad_ctx * c) { return B(sub, NUM(1), B(mul, IN(0), IN(0))); }
GRAD(asin, SAVE_IN0) { SET(0, B(mul, GY(0), U(rsqrt, one_minus_sq(c)))); return TIDE_OK; }
GRAD(acos, SAVE_IN0) { SET(0, U(neg, B(mul, GY(0), U(rsqrt, one_minus_sq(c))))); return TIDE_OK; }
GRAD(atan, SAVE_IN0) { SET(0, B(div, GY(0), B(add, NUM(1), B(mul, IN(0), IN(0))))); return TIDE_OK; }
GRAD(sinh, SAVE_IN0) { SET(0, B(mul, GY(0), U(cosh, IN(0)))); return TIDE_OK; }
GRAD(cosh, SAVE_IN0) { SET(0, B(mul, GY(0), U(sinh, IN(0)))); return TIDE_OK; }
GRAD(asinh, SAVE_IN0) { SET(0, B(mul, GY(0), U(rsqrt, B(add, B(mul, IN(0), IN(0)), NUM(1))))); return TIDE_OK; }
GRAD(acosh, SAVE_IN0) {
    SET(0, B(mul, GY(0), U(rsqrt, B(mul, B(sub, IN(0), NUM(1)), B(add, IN(0), NUM(1))))));
    return TIDE_OK;
}
GRAD(atanh, SAVE_IN0) { SET(0, B(div, GY(0), one_minus_sq(c))); return TIDE_OK; }
static tide_tensor * erf_slope(tide_grad_ctx * c) {   /* 2/sqrt(pi) exp(-x^2) */
    return B(mul, U(exp, U(neg, B(mul, IN(0), IN(0)))), NUM(1.12837916709551257390));
}
GRAD(erf, SAVE_IN0) { SET(0, B(mul, GY(0), erf_slope(c))); return TIDE_OK; }
GRAD(erfc, SAVE_IN0) { SET(0, U(neg, B(mul, GY(0), erf_slope(c)))); return TIDE_OK; }
GRAD(erfinv, SAVE_OUT0) {   /* sqrt(pi)/2 exp(y^2) */
    SET(0, B(mul, GY(0), B(mul, U(exp, B(mul, OUT(0), OUT(0))), NUM(0.88622692545275801365))));
    return TIDE_OK;
}
GRAD(log2, SAVE_IN0) { SET(0, B(div, GY(0), B(mul, IN(0), NUM(0.69314718055994530942)))); return TIDE_OK; }
GRAD(log10, SAVE_IN0) { SET(0, B(div, GY(0), B(mul, IN(0), NUM(2.30258509299404568402)))); return TIDE_OK; }
GRAD(exp2, SAVE_OUT0) { SET(0, B(mul, GY(0), B(mul, OUT(0), NUM(0.69314718055994530942)))); return TIDE_OK; }
/* the gamma family: lgamma' = digamma = polygamma(0), polygamma(n)' = polygamma(n + 1) */
static tide_tensor * polygamma_in0(tide_grad_ctx * c, int64_t n) {
    tide_op_params p = g_params(1, &n, 0, 0);
    return g_call(c, TIDE_OP_polygamma, 1, IN(0), NULL, NULL, &p);
}
GRAD(lgamma, SAVE_IN0) { SET(0, B(mul, GY(0), U(digamma, IN(0)))); return TIDE_OK; }
GRAD(digamma, SAVE_IN0) { SET(0, B(mul, GY(0), polygamma_in0(c, 1))); return TIDE_OK; }
GRAD(polygamma, SAVE_IN0) { SET(0, B(mul, GY(0), polygamma_in0(c, c->node->p.ints[0] + 1))); return TIDE_OK; }
/* the Bessel functions, PyTorch's forms: i0' = i1, i0e' = i1e - sign(x) i0e, i1' = i0 - i1/x,
 * i1e' = i0e - i1e (sign(x) + 1/x); the last two are 1/2 at 0, where i1/x would be 0/0 */
GRAD(i0, SAVE_IN0) { SET(0, B(mul, GY(0), U(i1, IN(0)))); return TIDE_OK; }
GRAD(i0e, SAVE_IN0 | SAVE_OUT0) {
    SET(0, B(mul, GY(0), B(sub, U(i1e, IN(0)), B(mul, U(sign, IN(0)), OUT(0)))));
    return TIDE_OK;
}
static tide_tensor * at_zero_half(tide_grad_ctx * c, tide_tensor * t) { return W(B(eq, IN(0), NUM(0)), NUM(0.5), t); }
GRAD(i1, SAVE_IN0 | SAVE_OUT0) {
    SET(0, B(mul, GY(0), at_zero_half(c, B(sub, U(i0, IN(0)), B(div, OUT(0), IN(0))))));
    return TIDE_OK;
}
GRAD(i1e, SAVE_IN0 | SAVE_OUT0) {
    tide_tensor * d = B(sub, U(i0e, IN(0)), B(mul, OUT(0), B(add, U(sign, IN(0)), U(reciprocal, IN(0)))));
    SET(0, B(mul, GY(0), at_zero_half(c, d)));
    return TIDE_OK;
}
GRAD(copy, 0) { SET(0, GY(0)); return TIDE_OK; }
GRAD(clamp, SAVE_IN0) {   /* passes where min <= x <= max */
    const tide_op_params * p = &c->node->p;
    tide_tensor * keep = NULL;
    if (p->flags & TIDE_PARAMF_HAS_MIN) keep = B(ge, IN(0), NUM(p->scalars[0]));
    if (p->flags & TIDE_PARAMF_HAS_MAX) {
        tide_tensor * hi = B(le, IN(0), NUM(p->scalars[1]));
        keep = keep ? B(logical_and, keep, hi) : hi;
    }
    SET(0, W(keep, GY(0), NUM(0)));
    return TIDE_OK;
}

/* -- elementwise binary ----------------------------------------------------------------- */

GRAD(add, 0) { SET(0, GY(0)); SET(1, GY(0)); return TIDE_OK; }
GRAD(sub, 0) { SET(0, GY(0)); SET(1, U(neg, GY(0))); return TIDE_OK; }
/* Each input is saved only for the other's gradient, so x:mul_(2) on a tensor with a
 * history keeps nothing that the in-place write changes. */
GRAD_ONLY_FOR(mul, SAVE_IN0 | SAVE_IN1, [0] = 1 << 1, [1] = 1 << 0) {
    SET(0, B(mul, GY(0), IN(1)));
    SET(1, B(mul, GY(0), IN(0)));
    return TIDE_OK;
}
GRAD(div, SAVE_IN1 | SAVE_OUT0) {   /* d(a/b)/db = -(a/b)/b */
    SET(0, B(div, GY(0), IN(1)));
    if (NEEDS(1)) g_set(c, 1, U(neg, B(div, B(mul, GY(0), OUT(0)), IN(1))));
    return TIDE_OK;
}
GRAD(pow, SAVE_IN0 | SAVE_IN1 | SAVE_OUT0) {
    if (NEEDS(0)) g_set(c, 0, B(mul, GY(0), B(mul, IN(1), B(pow, IN(0), B(sub, IN(1), NUM(1))))));
    if (NEEDS(1))   /* y log a; 0 where a == 0 (PyTorch's choice: the limit for positive exponents) */
        g_set(c, 1, W(B(eq, IN(0), NUM(0)), NUM(0), B(mul, GY(0), B(mul, OUT(0), U(log, IN(0))))));
    return TIDE_OK;
}
/* piecewise constant: zero gradients, as PyTorch's */
GRAD(floor_divide, 0) { return TIDE_OK; }
GRAD(fmod, SAVE_IN0 | SAVE_IN1) {   /* a - trunc(a/b) b */
    SET(0, GY(0));
    if (NEEDS(1)) {
        tide_tensor * q = B(div, IN(0), IN(1));
        tide_tensor * t = B(mul, U(sign, q), U(floor, U(abs, q)));
        g_set(c, 1, U(neg, B(mul, GY(0), t)));
    }
    return TIDE_OK;
}
GRAD(remainder, SAVE_IN0 | SAVE_IN1) {   /* a - floor(a/b) b */
    SET(0, GY(0));
    if (NEEDS(1)) g_set(c, 1, U(neg, B(mul, GY(0), U(floor, B(div, IN(0), IN(1))))));
    return TIDE_OK;
}
/* The fused updates. Their scalar (alpha, value, weight) is an input like the others:
 * its gradient is left in the broadcast shape for the walk to sum back to 0-d. Each
 * saved input is kept only for the gradients that read it (masks of inputs, bit j for
 * input j), so x:lerp_(e, 0.5) or x:addcmul_(t1, t2, 0.5) on a tensor with a history
 * keeps nothing the in-place write overwrites unless a gradient needs it. */
GRAD_ONLY_FOR(add_scaled, SAVE_IN1 | SAVE_IN2, [1] = 1 << 2, [2] = 1 << 1) {   /* a + alpha b */
    SET(0, GY(0));
    SET(1, B(mul, GY(0), IN(2)));
    SET(2, B(mul, GY(0), IN(1)));
    return TIDE_OK;
}
/* x + v t1 t2 */
GRAD_ONLY_FOR(addcmul, SAVE_IN1 | SAVE_IN2 | SAVE_IN3, [1] = 0xc, [2] = 0xa, [3] = 0x6) {
    SET(0, GY(0));
    if (NEEDS(1) || NEEDS(2)) {
        tide_tensor * gyv = B(mul, GY(0), IN(3));
        SET(1, B(mul, gyv, IN(2)));
        SET(2, B(mul, gyv, IN(1)));
    }
    SET(3, B(mul, GY(0), B(mul, IN(1), IN(2))));
    return TIDE_OK;
}
/* x + v t1 / t2: d/dt1 = v / t2, d/dt2 = -(v / t2) t1 / t2 */
GRAD_ONLY_FOR(addcdiv, SAVE_IN1 | SAVE_IN2 | SAVE_IN3, [1] = 0xc, [3] = 0x6) {
    SET(0, GY(0));
    if (NEEDS(1) || NEEDS(2)) {
        tide_tensor * g1 = B(div, B(mul, GY(0), IN(3)), IN(2));
        SET(1, g1);
        SET(2, U(neg, B(div, B(mul, g1, IN(1)), IN(2))));
    }
    SET(3, B(div, B(mul, GY(0), IN(1)), IN(2)));
    return TIDE_OK;
}
/* x + w (end - x), whichever of its two forms the kernel took */
GRAD_ONLY_FOR(lerp, SAVE_IN0 | SAVE_IN1 | SAVE_IN2, [0] = 1 << 2, [1] = 1 << 2, [2] = 0x3) {
    SET(0, B(mul, GY(0), B(sub, NUM(1), IN(2))));
    SET(1, B(mul, GY(0), IN(2)));
    SET(2, B(mul, GY(0), B(sub, IN(1), IN(0))));
    return TIDE_OK;
}
/* maximum/minimum: the gradient goes to the chosen input, split evenly on ties */
static void pick_grad(tide_grad_ctx * c, int32_t op) {
    tide_tensor * half = B(mul, GY(0), NUM(0.5));
    tide_tensor * tie  = B(eq, IN(0), IN(1));
    tide_tensor * a_wins = g_call(c, op, 2, IN(0), IN(1), NULL, NULL);
    SET(0, W(tie, half, W(a_wins, GY(0), NUM(0))));
    SET(1, W(tie, half, W(a_wins, NUM(0), GY(0))));
}
GRAD(maximum, SAVE_IN0 | SAVE_IN1) { pick_grad(c, TIDE_OP_gt); return TIDE_OK; }
GRAD(minimum, SAVE_IN0 | SAVE_IN1) { pick_grad(c, TIDE_OP_lt); return TIDE_OK; }
GRAD(atan2, SAVE_IN0 | SAVE_IN1) {   /* atan2(a, b): (b, -a) / (a^2 + b^2) */
    tide_tensor * d = B(add, B(mul, IN(0), IN(0)), B(mul, IN(1), IN(1)));
    tide_tensor * g = B(div, GY(0), d);
    SET(0, B(mul, g, IN(1)));
    SET(1, U(neg, B(mul, g, IN(0))));
    return TIDE_OK;
}
GRAD(where, SAVE_IN0) {
    SET(1, W(IN(0), GY(0), NUM(0)));
    SET(2, W(IN(0), NUM(0), GY(0)));
    return TIDE_OK;
}
GRAD(masked_fill, SAVE_IN1) {
    tide_op_params p = g_params(0, NULL, 0, 0);
    p.scalars[0] = 0;
    SET(0, g_call(c, TIDE_OP_masked_fill, 2, GY(0), IN(1), NULL, &p));
    return TIDE_OK;
}

/* -- reductions ---------------------------------------------------------------------------- */

#define IN0 (&c->node->in[0])
#define P   (&c->node->p)

static double reduced_count(const tide_grad_ctx * c) {
    double n = 1;
    for (int32_t i = 0; i < P->n_ints; i++) n *= (double)IN0->sizes[P->ints[i]];
    return n;
}

GRAD(sum, 0) { SET(0, g_unreduce(c, GY(0), IN0, P)); return TIDE_OK; }
GRAD(mean, 0) { SET(0, B(div, g_unreduce(c, GY(0), IN0, P), NUM(reduced_count(c)))); return TIDE_OK; }
/* y / x_i where no element of x_i's product is 0; where one is, the product of the others
 * at that element and 0 elsewhere; where two are, 0. */
GRAD(prod, SAVE_IN0 | SAVE_OUT0) {
    if (!NEEDS(0)) return TIDE_OK;
    tide_op_params q = g_params(P->n_ints, P->ints, P->keepdim, 0);   /* no dtype: counts as int64 */
    tide_tensor *  x = IN(0), * zero = B(eq, x, NUM(0)), * safe = W(zero, NUM(1), x);
    tide_tensor *  zeros = g_unreduce(c, g_call(c, TIDE_OP_sum, 1, zero, NULL, NULL, &q), IN0, P);
    tide_tensor *  others = g_unreduce(c, g_call(c, TIDE_OP_prod, 1, safe, NULL, NULL, P), IN0, P);
    tide_tensor *  d = W(B(eq, zeros, NUM(0)), B(div, g_unreduce(c, OUT(0), IN0, P), safe),
                         W(B(logical_and, zero, B(eq, zeros, NUM(1))), others, NUM(0)));
    g_set(c, 0, B(mul, g_unreduce(c, GY(0), IN0, P), d));
    return TIDE_OK;
}
/* amax/amin: split evenly among the elements equal to the extreme */
static void extreme_grad(tide_grad_ctx * c) {
    tide_tensor *  hit = B(eq, IN(0), g_unreduce(c, OUT(0), IN0, P));
    tide_op_params p   = g_params(P->n_ints, P->ints, 1, 0);
    tide_tensor *  cnt = g_call(c, TIDE_OP_sum, 1, hit, NULL, NULL, &p);
    tide_tensor *  per = B(div, g_unreduce(c, GY(0), IN0, P), g_keep(c, cnt ? tide_tensor_expand(cnt, IN0->ndim, IN0->sizes) : NULL));
    SET(0, W(hit, per, NUM(0)));
}
GRAD(amax, SAVE_IN0 | SAVE_OUT0) { extreme_grad(c); return TIDE_OK; }
GRAD(amin, SAVE_IN0 | SAVE_OUT0) { extreme_grad(c); return TIDE_OK; }
/* max/min along a dim: the gradient goes to the index found (indices keep the op's base) */
static void dim_extreme_grad(tide_grad_ctx * c) {
    int32_t       dim = (int32_t)P->ints[0];
    tide_tensor * g = GY(0), * idx = OUT(1);
    if (IN0->ndim == 0) {
        SET(0, g);
        return;
    }
    if (!P->keepdim) g = g_unsqueeze(c, g, dim), idx = g_unsqueeze(c, idx, dim);
    int64_t        d = dim;
    tide_op_params p = g_params(1, &d, 0, P->flags & TIDE_PARAMF_ONE_BASED);
    SET(0, g_call(c, TIDE_OP_scatter, 3, ZEROS(0), idx, g, &p));
}
/* sort/topk: each value's gradient goes back to the place it came from */
static void dim_place_grad(tide_grad_ctx * c) {
    if (IN0->ndim == 0) {
        SET(0, GY(0));
        return;
    }
    int64_t        d = P->ints[0];
    tide_op_params p = g_params(1, &d, 0, P->flags & TIDE_PARAMF_ONE_BASED);
    SET(0, g_call(c, TIDE_OP_scatter, 3, ZEROS(0), OUT(1), GY(0), &p));
}
GRAD(sort, SAVE_OUT1) { if (GY(0)) dim_place_grad(c); return TIDE_OK; }
GRAD(topk, SAVE_OUT1) { if (GY(0)) dim_place_grad(c); return TIDE_OK; }
GRAD(max_dim, SAVE_OUT1) { if (GY(0)) dim_extreme_grad(c); return TIDE_OK; }
GRAD(min_dim, SAVE_OUT1) { if (GY(0)) dim_extreme_grad(c); return TIDE_OK; }
/* var: 2 (x - mean) / (N - correction); std: (x - mean) / ((N - correction) std) */
static tide_tensor * centred(tide_grad_ctx * c) {
    tide_op_params p = g_params(P->n_ints, P->ints, 1, 0);
    return B(sub, IN(0), g_call(c, TIDE_OP_mean, 1, IN(0), NULL, NULL, &p));
}
GRAD(var, SAVE_IN0) {
    double dof = reduced_count(c) - P->scalars[0];
    SET(0, B(mul, g_unreduce(c, GY(0), IN0, P), B(mul, centred(c), NUM(2.0 / dof))));
    return TIDE_OK;
}
GRAD(std, SAVE_IN0 | SAVE_OUT0) {
    double dof = reduced_count(c) - P->scalars[0];
    tide_tensor * g = B(div, g_unreduce(c, GY(0), IN0, P), g_unreduce(c, OUT(0), IN0, P));
    SET(0, B(mul, g, B(mul, centred(c), NUM(1.0 / dof))));
    return TIDE_OK;
}
/* g exp(x - y); where every term is -inf (y = -inf) each gets 0, not exp(-inf + inf) = NaN,
 * so log-space recursions (CTC, HMMs) keep unreachable states out of the gradient */
GRAD(logsumexp, SAVE_IN0 | SAVE_OUT0) {
    if (!NEEDS(0)) return TIDE_OK;
    tide_tensor * y = g_unreduce(c, OUT(0), IN0, P);
    y = W(B(eq, y, NUM(-INFINITY)), NUM(0), y);
    g_set(c, 0, B(mul, g_unreduce(c, GY(0), IN0, P), U(exp, B(sub, IN(0), y))));
    return TIDE_OK;
}
GRAD(cumsum, 0) {   /* the reversed cumulative sum */
    if (IN0->ndim == 0) {
        SET(0, GY(0));
        return TIDE_OK;
    }
    tide_op_params p = g_params(1, P->ints, 0, 0);
    tide_tensor *  f = g_call(c, TIDE_OP_flip, 1, GY(0), NULL, NULL, &p);
    SET(0, g_call(c, TIDE_OP_flip, 1, g_call(c, TIDE_OP_cumsum, 1, f, NULL, NULL, &p), NULL, NULL, &p));
    return TIDE_OK;
}
/* cumprod: for a line without zeros, the reversed cumulative sum of gy * y,
 * divided by x. With zeros, that holds before the first zero; the first zero
 * takes the reversed cumulative sum of gy * y', y' the cumprod with that zero
 * made 1 (the product of every other factor); the elements after it get 0. */
GRAD(cumprod, SAVE_IN0 | SAVE_OUT0) {
    if (IN0->ndim == 0) {
        SET(0, GY(0));
        return TIDE_OK;
    }
    tide_op_params p = g_params(1, P->ints, 0, 0);
#define SCAN(op, t) g_call(c, TIDE_OP_##op, 1, (t), NULL, NULL, &p)
#define RCUMSUM(t) SCAN(flip, SCAN(cumsum, SCAN(flip, (t))))
    tide_tensor * zero   = B(eq, IN(0), NUM(0));
    tide_tensor * zeros  = SCAN(cumsum, zero);   /* zeros so far, int64 */
    tide_tensor * before = B(eq, zeros, NUM(0));
    tide_tensor * first  = B(logical_and, zero, B(eq, zeros, NUM(1)));
    tide_tensor * g_before = B(div, RCUMSUM(B(mul, GY(0), OUT(0))), IN(0));
    tide_tensor * g_first  = RCUMSUM(B(mul, GY(0), SCAN(cumprod, W(first, NUM(1), IN(0)))));
    SET(0, W(before, g_before, W(first, g_first, NUM(0))));
#undef RCUMSUM
#undef SCAN
    return TIDE_OK;
}
/* cummax/cummin: each output's gradient goes to where its value was found
 * (indices repeat: added up) */
static void cum_extreme_grad(tide_grad_ctx * c) {
    if (IN0->ndim == 0) {
        SET(0, GY(0));
        return;
    }
    int64_t        d = P->ints[0];
    tide_op_params p = g_params(1, &d, 0, P->flags & TIDE_PARAMF_ONE_BASED);
    SET(0, g_call(c, TIDE_OP_scatter_add, 3, ZEROS(0), OUT(1), GY(0), &p));
}
GRAD(cummax, SAVE_OUT1) { if (GY(0)) cum_extreme_grad(c); return TIDE_OK; }
GRAD(cummin, SAVE_OUT1) { if (GY(0)) cum_extreme_grad(c); return TIDE_OK; }

/* -- linear algebra ------------------------------------------------------------------------- */

static tide_tensor * mT(tide_grad_ctx * c, tide_tensor * t) { return g_transpose(c, t, -1, -2); }

/* matmul with NumPy's rules: 1-d operands gain a dim, which the gradient loses again;
 * batch dims that were broadcast are summed back by the walk. */
static void matmul_grad(tide_grad_ctx * c) {
    tide_tensor * a = IN(0), * b = IN(1), * g = GY(0);
    int32_t       na = c->node->in[0].ndim, nb = c->node->in[1].ndim;
    if (na == 1 && nb == 1) {
        SET(0, B(mul, g, b));
        SET(1, B(mul, g, a));
        return;
    }
    if (nb == 1) {   /* [..., n, k] @ [k] -> [..., n] */
        SET(0, B(mul, g_unsqueeze(c, g, -1), b));
        SET(1, g_squeeze(c, B(matmul, mT(c, a), g_unsqueeze(c, g, -1)), -1));
        return;
    }
    if (na == 1) {   /* [k] @ [..., k, m] -> [..., m] */
        SET(0, g_squeeze(c, B(matmul, b, g_unsqueeze(c, g, -1)), -1));
        SET(1, B(mul, g_unsqueeze(c, a, -1), g_unsqueeze(c, g, -2)));
        return;
    }
    SET(0, B(matmul, g, mT(c, b)));
    /* A 2-d b read with its dims transposed (a Linear weight used as w:t()) gets its
     * gradient in that layout, as (g^T a)^T, so that the weight's gradient comes out
     * contiguous: a^T g would need a transposing copy into the weight's layout. */
    if (na == 2 && nb == 2 && b->strides[0] == 1 && b->strides[1] != 1 && b->sizes[0] > 1 && b->sizes[1] > 1)
        SET(1, mT(c, B(matmul, mT(c, g), a)));
    else
        SET(1, B(matmul, mT(c, a), g));
}
GRAD(matmul, SAVE_IN0 | SAVE_IN1) { matmul_grad(c); return TIDE_OK; }
GRAD(mm, SAVE_IN0 | SAVE_IN1) { matmul_grad(c); return TIDE_OK; }
GRAD(bmm, SAVE_IN0 | SAVE_IN1) { matmul_grad(c); return TIDE_OK; }
GRAD(dot, SAVE_IN0 | SAVE_IN1) { matmul_grad(c); return TIDE_OK; }
GRAD(outer, SAVE_IN0 | SAVE_IN1) {   /* [n] x [m] -> [n, m] */
    SET(0, B(matmul, GY(0), IN(1)));
    SET(1, B(matmul, mT(c, GY(0)), IN(0)));
    return TIDE_OK;
}
GRAD(softmax, SAVE_OUT0) {   /* y (g - sum(g y)) */
    tide_tensor * gy = B(mul, GY(0), OUT(0));
    SET(0, B(mul, OUT(0), B(sub, GY(0), g_sum_dim(c, gy, (int32_t)P->ints[0], 1))));
    return TIDE_OK;
}
GRAD(log_softmax, SAVE_OUT0) {   /* g - exp(y) sum(g) */
    SET(0, B(sub, GY(0), B(mul, U(exp, OUT(0)), g_sum_dim(c, GY(0), (int32_t)P->ints[0], 1))));
    return TIDE_OK;
}

/* -- matrix decompositions: the rules of PyTorch's FunctionsManual, for real matrices ---------- */

static tide_tensor * mm(tide_grad_ctx * c, tide_tensor * a, tide_tensor * b) { return B(matmul, a, b); }
/* [..., k] as a row [..., 1, k] or a column [..., k, 1] */
static tide_tensor * as_row(tide_grad_ctx * c, tide_tensor * v) { return g_unsqueeze(c, v, -2); }
static tide_tensor * as_col(tide_grad_ctx * c, tide_tensor * v) { return g_unsqueeze(c, v, -1); }

/* The gradient of output i, or zeros of its shape where it has none. */
static tide_tensor * gy_or_zeros(tide_grad_ctx * c, int32_t i) { return GY(i) ? GY(i) : g_zeros(c, &c->node->out[i]); }

/* The n x n identity, of like's dtype and device. */
static tide_tensor * eye_like(tide_grad_ctx * c, const tide_tensor * like, int64_t n) {
    if (!like) return NULL;
    int64_t       sizes[2] = {n, n};
    tide_tensor * out = tide_tensor_empty(2, sizes, like->dtype_id, like->dev), * res[TIDE_OP_MAX_OUT] = {0};
    if (!out) return g_keep(c, NULL);
    tide_op_params p = g_params(2, sizes, 0, 0);
    p.dtype          = like->dtype_id;
    tide_status st   = tide_op_call(TIDE_OP_eye, NULL, 0, &p, res, out);
    tide_tensor_release(res[0]);
    if (st != TIDE_OK) {
        tide_tensor_release(out);
        if (c->st == TIDE_OK) c->st = st;
        return NULL;
    }
    return g_keep(c, out);
}

/* diag(v) of the vectors v [..., k], as [..., k, k] */
static tide_tensor * diag_embed(tide_grad_ctx * c, tide_tensor * v) {
    return v ? B(mul, as_row(c, v), eye_like(c, v, v->sizes[v->ndim - 1])) : NULL;
}

/* the triangle of t on and above (upper) or below diagonal d */
static tide_tensor * triangle(tide_grad_ctx * c, tide_tensor * t, bool upper, int64_t d) {
    tide_op_params p = g_params(1, &d, 0, 0);
    return g_call(c, upper ? TIDE_OP_triu : TIDE_OP_tril, 1, t, NULL, NULL, &p);
}

/* X with A X = B for triangular A */
static tide_tensor * solve_tri(tide_grad_ctx * c, tide_tensor * a, tide_tensor * b, bool upper) {
    int64_t        ints[2] = {upper, 0};
    tide_op_params p       = g_params(2, ints, 0, 0);
    return g_call(c, TIDE_OP_linalg_solve_triangular, 2, a, b, NULL, &p);
}

/* x R^{-T} for R upper triangular: the transpose of R^{-1} x^T */
static tide_tensor * times_inv_rt(tide_grad_ctx * c, tide_tensor * x, tide_tensor * r) {
    return mT(c, solve_tri(c, r, mT(c, x), true));
}

/* X = A^{-1} B: gB = A^{-T} gX, gA = -gB X^T (batch dims that broadcast are summed back by the walk) */
GRAD(linalg_solve, SAVE_IN0 | SAVE_OUT0) {
    tide_tensor * gb = B(linalg_solve, mT(c, IN(0)), GY(0));
    SET(1, gb);
    SET(0, U(neg, mm(c, gb, mT(c, OUT(0)))));
    return TIDE_OK;
}
/* the same with A's transpose, in the other triangle; A's gradient is kept to the triangle read */
GRAD(linalg_solve_triangular, SAVE_IN0 | SAVE_OUT0) {
    bool           upper = P->ints[0] != 0, unit = P->ints[1] != 0;
    int64_t        ints[2] = {!upper, unit};
    tide_op_params p       = g_params(2, ints, 0, 0);
    tide_tensor *  gb      = g_call(c, TIDE_OP_linalg_solve_triangular, 2, mT(c, IN(0)), GY(0), NULL, &p);
    SET(1, gb);
    if (NEEDS(0)) g_set(c, 0, triangle(c, U(neg, mm(c, gb, mT(c, OUT(0)))), upper, unit ? (upper ? 1 : -1) : 0));
    return TIDE_OK;
}
/* det A: gA = g adj(A)^T, from the SVD so that singular A (where A^{-T} does not exist)
 * get theirs too: adj(A)^T = det(U) det(Vh) U diag(prod_{j != i} s_j) Vh. The products
 * leaving one value out are those of the values before it times those after it. */
GRAD(linalg_det, SAVE_IN0) {
    if (!NEEDS(0)) return TIDE_OK;
    const tide_meta * m = &c->node->in[0];
    int32_t           nd = m->ndim;
    int64_t           n = m->sizes[nd - 1];
    if (n == 0) return TIDE_OK;   /* an empty gradient */
    int64_t        ints[2] = {0, 1}, last = nd - 2, flipd = nd - 2;
    tide_op_params ps = g_params(2, ints, 0, 0), pc = g_params(1, &last, 0, 0), pf = g_params(1, &flipd, 0, 0);
    tide_tensor *  out[TIDE_OP_MAX_OUT] = {0}, * a = IN(0);
    if (!a) return c->st;
    tide_status st = tide_op_call(TIDE_OP_linalg_svd, &a, 1, &ps, out, NULL);
    if (st != TIDE_OK) return c->st = st;
    tide_tensor * u = g_keep(c, out[0]), * s = g_keep(c, out[1]), * vh = g_keep(c, out[2]);
    tide_tensor * ones = B(add, B(mul, g_narrow(c, s, nd - 2, 0, 1), NUM(0)), NUM(1));   /* [..., 1] */
#define CAT(x, y) g_call(c, TIDE_OP_cat, 2, (x), (y), NULL, &pc)
#define CUMPROD(x) g_call(c, TIDE_OP_cumprod, 1, (x), NULL, NULL, &pc)
#define FLIP(x) g_call(c, TIDE_OP_flip, 1, (x), NULL, NULL, &pf)
    tide_tensor * before = g_narrow(c, CUMPROD(CAT(ones, s)), nd - 2, 0, n);             /* prod_{j < i} */
    tide_tensor * after  = g_narrow(c, FLIP(CUMPROD(FLIP(CAT(s, ones)))), nd - 2, 1, n);  /* prod_{j > i} */
#undef CAT
#undef CUMPROD
#undef FLIP
    tide_tensor * sign = B(mul, U(linalg_det, u), U(linalg_det, vh));
    tide_tensor * cof  = mm(c, B(mul, u, as_row(c, B(mul, before, after))), vh);
    g_set(c, 0, B(mul, cof, as_col(c, as_col(c, B(mul, GY(0), sign)))));
    return TIDE_OK;
}
/* log |det A|: gA = g A^{-T}; the sign has no gradient */
GRAD(linalg_slogdet, SAVE_IN0) {
    if (!GY(1) || !NEEDS(0)) return TIDE_OK;
    tide_tensor * a = IN(0);
    tide_tensor * inv_t = a ? B(linalg_solve, mT(c, a), eye_like(c, a, a->sizes[a->ndim - 1])) : NULL;
    g_set(c, 0, B(mul, inv_t, as_col(c, as_col(c, GY(1)))));
    return TIDE_OK;
}
/* A = L L^T: gA = L^{-T} phi(L^T gL) L^{-1}, symmetrised, phi taking the lower triangle
 * with its diagonal halved. upper: L = U^T. */
GRAD(linalg_cholesky, SAVE_OUT0) {
    if (!NEEDS(0)) return TIDE_OK;
    bool          upper = P->ints[0] != 0;
    tide_tensor * l = upper ? mT(c, OUT(0)) : OUT(0), * gl = upper ? mT(c, GY(0)) : GY(0);
    tide_tensor * lt = mT(c, l), * x = mm(c, lt, gl);
    tide_tensor * phi = B(sub, triangle(c, x, false, 0), B(mul, B(mul, x, eye_like(c, x, x ? x->sizes[x->ndim - 1] : 0)), NUM(0.5)));
    tide_tensor * z = mT(c, solve_tri(c, lt, mT(c, phi), true));   /* phi L^{-1} */
    tide_tensor * s = solve_tri(c, lt, z, true);                     /* L^{-T} phi L^{-1} */
    g_set(c, 0, B(mul, B(add, s, mT(c, s)), NUM(0.5)));
    return TIDE_OK;
}
/* A = V diag(w) V^T: gA = V (diag(gw) + skew(V^T gV) / 2 / E) V^T, E_ij = w_j - w_i
 * (1 on the diagonal, where the skew part is 0); infinite where eigenvalues repeat. */
GRAD(linalg_eigh, SAVE_OUT0 | SAVE_OUT1) {
    if (!NEEDS(0)) return TIDE_OK;
    tide_tensor * w = OUT(0), * v = OUT(1), * inner = diag_embed(c, GY(0));
    if (GY(1)) {
        tide_tensor * m = mm(c, mT(c, v), GY(1)), * i = eye_like(c, w, w ? w->sizes[w->ndim - 1] : 0);
        tide_tensor * e = B(add, B(sub, as_row(c, w), as_col(c, w)), i);
        tide_tensor * f = B(div, B(mul, B(sub, m, mT(c, m)), NUM(0.5)), e);
        inner = inner ? B(add, inner, f) : f;
    }
    g_set(c, 0, mm(c, mm(c, v, inner), mT(c, v)));
    return TIDE_OK;
}
/* A = Q R, for k = n <= m (Q [m, n], R [n, n]):
 *   gA = Q (gR + tril(Q^T gQ - gQ^T Q + R gR^T - gR R^T) R^{-T}) + (gQ - Q Q^T gQ) R^{-T};
 * for m < n, A = [X | Y] with R = [U | V]: X's gradient is that of the square case with
 * gQ + Y gV^T and gU, and Y's is Q gV. */
static tide_tensor * qr_square_grad(tide_grad_ctx * c, tide_tensor * q, tide_tensor * r, tide_tensor * gq,
                                    tide_tensor * gr) {
    tide_tensor * qdq = mm(c, mT(c, q), gq), * rdr = mm(c, r, mT(c, gr));
    tide_tensor * tl  = triangle(c, B(add, B(sub, qdq, mT(c, qdq)), B(sub, rdr, mT(c, rdr))), false, 0);
    tide_tensor * ga  = mm(c, q, B(add, gr, times_inv_rt(c, tl, r)));
    tide_tensor * gb  = times_inv_rt(c, B(sub, gq, mm(c, q, qdq)), r);
    return B(add, ga, gb);
}
GRAD(linalg_qr, SAVE_IN0 | SAVE_OUT0 | SAVE_OUT1) {
    if (!NEEDS(0)) return TIDE_OK;
    const tide_meta * a = &c->node->in[0];
    int64_t m = a->sizes[a->ndim - 2], n = a->sizes[a->ndim - 1];
    if (P->ints[0] == 2)
        return c->st = tide_error_set(TIDE_E_VALUE, "linalg_qr: the gradient needs Q, which mode 'r' does not compute");
    if (P->ints[0] == 1 && m > n)
        return c->st = tide_error_set(TIDE_E_VALUE, "linalg_qr: the gradient of mode 'complete' is not defined for "
                                      "more rows than columns (%lld > %lld): Q's last columns are not unique",
                                      (long long)m, (long long)n);
    tide_tensor * q = OUT(0), * r = OUT(1), * gq = gy_or_zeros(c, 0), * gr = gy_or_zeros(c, 1);
    if (m >= n) {
        g_set(c, 0, qr_square_grad(c, q, r, gq, gr));
        return TIDE_OK;
    }
    int32_t       last = a->ndim - 1;
    tide_tensor * y = g_narrow(c, IN(0), last, m, n - m);
    tide_tensor * u = g_narrow(c, r, last, 0, m), * du = g_narrow(c, gr, last, 0, m), * dv = g_narrow(c, gr, last, m, n - m);
    tide_tensor * dx = qr_square_grad(c, q, u, B(add, gq, mm(c, y, mT(c, dv))), du);
    int64_t        d = last;
    tide_op_params p = g_params(1, &d, 0, 0);
    g_set(c, 0, g_call(c, TIDE_OP_cat, 2, dx, mm(c, q, dv), NULL, &p));
    return TIDE_OK;
}
/* A = U diag(S) Vh, with full U and Vh cut to their first k = min(m, n) columns/rows:
 *   inner = (skew(U^T gU) S_row + S_col skew(Vh gVh^T)) / E + diag(gS), E_ij = s_j^2 - s_i^2,
 *   gA = U inner Vh, plus (I - U U^T) gU S^{-1} Vh for m > n, or U S^{-1} gVh (I - Vh^T Vh) for
 *   m < n. Without gU and gVh: U diag(gS) Vh. Infinite where singular values repeat. */
GRAD(linalg_svd, SAVE_OUT0 | SAVE_OUT1 | SAVE_OUT2) {
    if (!NEEDS(0)) return TIDE_OK;
    if (!P->ints[1])
        return c->st = tide_error_set(TIDE_E_VALUE, "linalg_svd: the gradient needs U and Vh: compute them (compute_uv)");
    const tide_meta * a = &c->node->in[0];
    int32_t       nd = a->ndim;
    int64_t       m = a->sizes[nd - 2], n = a->sizes[nd - 1], k = m < n ? m : n;
    bool          full = P->ints[0] != 0;
    tide_tensor * u = OUT(0), * s = OUT(1), * vh = OUT(2), * gu = GY(0), * gvh = GY(2);
    if (full) {
        u   = g_narrow(c, u, nd - 1, 0, k);
        vh  = g_narrow(c, vh, nd - 2, 0, k);
        gu  = gu ? g_narrow(c, gu, nd - 1, 0, k) : NULL;
        gvh = gvh ? g_narrow(c, gvh, nd - 2, 0, k) : NULL;
    }
    if (!gu && !gvh) {
        g_set(c, 0, mm(c, B(mul, u, as_row(c, GY(1))), vh));
        return TIDE_OK;
    }
    tide_tensor * s2 = B(mul, s, s), * e = B(add, B(sub, as_row(c, s2), as_col(c, s2)), eye_like(c, s, k));
    tide_tensor * num = NULL;
    if (gu) {
        tide_tensor * uhgu = mm(c, mT(c, u), gu);
        num = B(mul, B(sub, uhgu, mT(c, uhgu)), as_row(c, s));
    }
    if (gvh) {
        tide_tensor * vhgv = mm(c, vh, mT(c, gvh)), * t = B(mul, as_col(c, s), B(sub, vhgv, mT(c, vhgv)));
        num = num ? B(add, num, t) : t;
    }
    tide_tensor * inner = B(div, num, e);
    if (GY(1)) inner = B(add, inner, diag_embed(c, GY(1)));
    tide_tensor * ga;
    if (m > n && gu) {
        tide_tensor * gus = B(div, gu, as_row(c, s));
        ga = mm(c, B(sub, B(add, mm(c, u, inner), gus), mm(c, u, mm(c, mT(c, u), gus))), vh);
    } else if (m < n && gvh) {
        tide_tensor * sgv = B(div, gvh, as_col(c, s));
        ga = mm(c, u, B(sub, B(add, mm(c, inner, vh), sgv), mm(c, mm(c, sgv, mT(c, vh)), vh)));
    } else {
        ga = mm(c, mm(c, u, inner), vh);
    }
    g_set(c, 0, ga);
    return TIDE_OK;
}

/* -- indexing ---------------------------------------------------------------------------------- */

static tide_op_params dim_params(const tide_grad_ctx * c) {
    return g_params(1, P->ints, 0, P->flags & TIDE_PARAMF_ONE_BASED);
}
/* The part of g an index covers, zero-padded to the shape of src (which may be larger). */
static tide_tensor * gather_src(tide_grad_ctx * c, int32_t src) {
    tide_op_params p = dim_params(c);
    tide_tensor *  g = g_call(c, TIDE_OP_gather, 2, GY(0), IN(1), NULL, &p);
    const tide_meta * m = &c->node->in[src];
    if (!g || (g->ndim == m->ndim && !memcmp(g->sizes, m->sizes, (size_t)m->ndim * sizeof(int64_t)))) return g;
    tide_tensor * z = g_zeros(c, m), * v = z;
    for (int32_t d = 0; d < m->ndim && v; d++) v = g_narrow(c, v, d, 0, g->sizes[d]);
    g_copy_into(c, v, g);
    return z;
}
GRAD(index_select, SAVE_IN1) {
    tide_op_params p = dim_params(c);
    SET(0, g_call(c, TIDE_OP_index_add, 3, ZEROS(0), IN(1), GY(0), &p));
    return TIDE_OK;
}
GRAD(gather, SAVE_IN1) {
    tide_op_params p = dim_params(c);
    SET(0, g_call(c, TIDE_OP_scatter_add, 3, ZEROS(0), IN(1), GY(0), &p));
    return TIDE_OK;
}
GRAD(scatter, SAVE_IN1) {   /* overwritten places get nothing */
    tide_op_params p = dim_params(c);
    if (NEEDS(0)) {
        tide_meta m = c->node->in[1];
        m.dtype = GY(0) ? GY(0)->dtype_id : m.dtype;
        g_set(c, 0, g_call(c, TIDE_OP_scatter, 3, GY(0), IN(1), g_zeros(c, &m), &p));
    }
    if (NEEDS(2)) g_set(c, 2, gather_src(c, 2));
    return TIDE_OK;
}
GRAD(scatter_add, SAVE_IN1) {
    SET(0, GY(0));
    if (NEEDS(2)) g_set(c, 2, gather_src(c, 2));
    return TIDE_OK;
}
GRAD(index_add, SAVE_IN1) {
    tide_op_params p = dim_params(c);
    SET(0, GY(0));
    SET(2, g_call(c, TIDE_OP_index_select, 2, GY(0), IN(1), NULL, &p));
    return TIDE_OK;
}

/* -- shaping ------------------------------------------------------------------------------------- */

GRAD(cat, 0) {
    int32_t dim = (int32_t)P->ints[0];
    int64_t at  = 0;
    for (int32_t i = 0; i < c->node->n_in; i++) {
        int64_t len = c->node->in[i].ndim ? c->node->in[i].sizes[dim] : 1;
        SET(i, g_narrow(c, GY(0), dim, at, len));
        at += len;
    }
    return TIDE_OK;
}
GRAD(stack, 0) {
    for (int32_t i = 0; i < c->node->n_in; i++) SET(i, g_select(c, GY(0), (int32_t)P->ints[0], i));
    return TIDE_OK;
}
GRAD(flip, 0) {
    tide_op_params p = g_params(P->n_ints, P->ints, 0, 0);
    SET(0, g_call(c, TIDE_OP_flip, 1, GY(0), NULL, NULL, &p));
    return TIDE_OK;
}
GRAD(repeat, 0) {   /* each repeated dim d of size r*s: view as [r, s] and sum over r */
    const tide_meta * in = IN0;
    int32_t       n = P->n_ints, lead = n - in->ndim;
    tide_tensor * g = GY(0);
    int64_t       sizes[TIDE_MAX_DIMS];
    for (int32_t d = 0; d < n; d++) sizes[d] = GY(0) ? GY(0)->sizes[d] : 0;
    for (int32_t d = 0; d < n && g; d++) {
        int64_t r = P->ints[d], s = d < lead ? 1 : in->sizes[d - lead];
        if (r == 1) continue;
        int64_t split[TIDE_MAX_DIMS + 1];
        for (int32_t k = 0, j = 0; k < n; k++) {
            if (k == d) split[j++] = r, split[j++] = s;
            else split[j++] = sizes[k];
        }
        if (n + 1 > TIDE_MAX_DIMS) {   /* no room for the split: sum the tiles one by one */
            tide_tensor * acc = g_narrow(c, g, d, 0, s);
            for (int64_t t = 1; t < r; t++) acc = B(add, acc, g_narrow(c, g, d, t * s, s));
            g = acc;
        } else {
            g = g_sum_dim(c, g_reshape(c, g, n + 1, split), d, 0);
        }
        sizes[d] = s;
    }
    SET(0, g_reshape(c, g, in->ndim, in->sizes));
    return TIDE_OK;
}
GRAD(tril, 0) {
    tide_op_params p = g_params(1, P->ints, 0, 0);
    SET(0, g_call(c, TIDE_OP_tril, 1, GY(0), NULL, NULL, &p));
    return TIDE_OK;
}
GRAD(triu, 0) {
    tide_op_params p = g_params(1, P->ints, 0, 0);
    SET(0, g_call(c, TIDE_OP_triu, 1, GY(0), NULL, NULL, &p));
    return TIDE_OK;
}
GRAD(bernoulli, 0) { SET(0, ZEROS(0)); return TIDE_OK; }


/* -- nn: each rule calls the backward op of its forward ------------------------------------------ */

/* Params of a backward op: the forward's first n ints, then the sizes of input `of`. */
static tide_op_params nn_params(const tide_grad_ctx * c, int32_t n, const tide_meta * of) {
    tide_op_params p = g_params(n, P->ints, 0, P->flags & TIDE_PARAMF_ONE_BASED);
    for (int32_t i = 0; i < of->ndim; i++) p.ints[n + i] = of->sizes[i];
    p.n_ints = n + of->ndim;
    return p;
}
GRAD(conv2d, SAVE_IN0 | SAVE_IN1) {
    if (NEEDS(0)) {
        tide_op_params p = nn_params(c, 7, &c->node->in[0]);
        g_set(c, 0, g_call(c, TIDE_OP_conv2d_backward_input, 2, GY(0), IN(1), NULL, &p));
    }
    if (NEEDS(1)) {
        tide_op_params p = nn_params(c, 7, &c->node->in[1]);
        g_set(c, 1, g_call(c, TIDE_OP_conv2d_backward_weight, 2, GY(0), IN(0), NULL, &p));
    }
    if (c->node->n_in > 2 && NEEDS(2)) {
        int64_t        dims[3] = {0, 2, 3};
        tide_op_params p = g_params(3, dims, 0, 0);
        g_set(c, 2, g_call(c, TIDE_OP_sum, 1, GY(0), NULL, NULL, &p));
    }
    return TIDE_OK;
}
GRAD(max_pool2d, SAVE_OUT1) {
    tide_op_params p = nn_params(c, 0, IN0);
    if (GY(0)) SET(0, g_call(c, TIDE_OP_max_pool2d_backward, 2, GY(0), OUT(1), NULL, &p));
    return TIDE_OK;
}
GRAD(avg_pool2d, 0) {
    tide_op_params p = nn_params(c, 9, IN0);
    SET(0, g_call(c, TIDE_OP_avg_pool2d_backward, 1, GY(0), NULL, NULL, &p));
    return TIDE_OK;
}
GRAD(adaptive_avg_pool2d, 0) {
    tide_op_params p = nn_params(c, 0, IN0);
    SET(0, g_call(c, TIDE_OP_adaptive_avg_pool2d_backward, 1, GY(0), NULL, NULL, &p));
    return TIDE_OK;
}

/* The backward ops, for create_graph: each is linear in the gradient it takes, and
 * conv2d's bilinear in it and the other input, so their rules are the forward ops
 * and each other (dx = B(gy, w) has <dx, g> = <conv2d(g, w), gy>, so its gradient in
 * gy is conv2d(g, w) and in w the weight gradient of that conv; max_pool2d's
 * gathers g at the indices it scattered to). */
GRAD_ONLY_FOR(conv2d_backward_input, SAVE_IN0 | SAVE_IN1, [0] = 1 << 1, [1] = 1 << 0) {
    tide_op_params p = g_params(7, P->ints, 0, 0);
    if (NEEDS(0)) g_set(c, 0, g_call(c, TIDE_OP_conv2d, 2, GY(0), IN(1), NULL, &p));
    if (NEEDS(1)) {
        tide_op_params q = nn_params(c, 7, &c->node->in[1]);
        g_set(c, 1, g_call(c, TIDE_OP_conv2d_backward_weight, 2, IN(0), GY(0), NULL, &q));
    }
    return TIDE_OK;
}
GRAD_ONLY_FOR(conv2d_backward_weight, SAVE_IN0 | SAVE_IN1, [0] = 1 << 1, [1] = 1 << 0) {   /* dw = B'(gy, x) */
    tide_op_params p = g_params(7, P->ints, 0, 0);
    if (NEEDS(0)) g_set(c, 0, g_call(c, TIDE_OP_conv2d, 2, IN(1), GY(0), NULL, &p));
    if (NEEDS(1)) {
        tide_op_params q = nn_params(c, 7, &c->node->in[1]);
        g_set(c, 1, g_call(c, TIDE_OP_conv2d_backward_input, 2, IN(0), GY(0), NULL, &q));
    }
    return TIDE_OK;
}
GRAD(max_pool2d_backward, SAVE_IN1) {   /* 0 for a window with no input element */
    const tide_meta * gy   = &c->node->in[0];   /* [N, C, oH, oW] */
    int64_t           base = (P->flags & TIDE_PARAMF_ONE_BASED) ? 1 : 0, d = 2;
    int64_t           plane[3] = {P->ints[0], P->ints[1], P->ints[2] * P->ints[3]};   /* x's N, C, H*W */
    int64_t           cols[3]  = {gy->sizes[0], gy->sizes[1], gy->sizes[2] * gy->sizes[3]};
    tide_tensor *     at    = g_reshape(c, IN(1), 3, cols);
    tide_tensor *     valid = B(ge, at, NUM((double)base));
    tide_op_params    p     = g_params(1, &d, 0, P->flags & TIDE_PARAMF_ONE_BASED);
    tide_tensor *     g     = g_call(c, TIDE_OP_gather, 2, g_reshape(c, GY(0), 3, plane),
                                     W(valid, at, NUM((double)base)), NULL, &p);
    SET(0, g_reshape(c, W(valid, g, NUM(0)), gy->ndim, gy->sizes));
    return TIDE_OK;
}
GRAD(avg_pool2d_backward, 0) {
    tide_op_params p = g_params(9, P->ints, 0, 0);
    SET(0, g_call(c, TIDE_OP_avg_pool2d, 1, GY(0), NULL, NULL, &p));
    return TIDE_OK;
}
GRAD(adaptive_avg_pool2d_backward, 0) {   /* pooled back to the size of the gradient it took */
    tide_op_params p = g_params(2, &c->node->in[0].sizes[2], 0, 0);
    SET(0, g_call(c, TIDE_OP_adaptive_avg_pool2d, 1, GY(0), NULL, NULL, &p));
    return TIDE_OK;
}
