/*
 * create.c - creation ops (full, arange, linspace, eye) as elementwise loops
 * with no inputs, so that they also fill non-contiguous destinations (fill_).
 * Their shape rules live here too. Random creation is in random.c.
 */
#include "kernels.h"

#define FILL_LOOPS(name, BODY)                                                                   \
    BODY(name##_f32, float) BODY(name##_f64, double) BODY(name##_i32, int32_t)                   \
    BODY(name##_i64, int64_t) BODY(name##_u8, uint8_t) BODY(name##_b, uint8_t)
#define TABLE(name)                                                                              \
    [TIDE_DTYPE_F32] = name##_f32, [TIDE_DTYPE_F64] = name##_f64, [TIDE_DTYPE_I32] = name##_i32, \
    [TIDE_DTYPE_I64] = name##_i64, [TIDE_DTYPE_U8] = name##_u8, [TIDE_DTYPE_BOOL] = name##_b

#define FULL_BODY(name, T)                                                                       \
    static void name(int64_t n, int64_t i0, void * restrict out_, const void * const * in,       \
                     const tide_opcall * c) {                                                    \
        T * restrict o = out_;                                                                   \
        T v;                                                                                     \
        (void)i0; (void)in;                                                                      \
        tide_store_double(&v, c->compute_dtype, c->p.scalars[0]);                                \
        for (int64_t i = 0; i < n; i++) o[i] = v;                                                \
    }
FILL_LOOPS(full, FULL_BODY)
tide_status tide_cpu_full(const tide_opcall * c) {
    static const tide_ew_loop loops[TIDE_DTYPE_COUNT] = {TABLE(full)};
    return tide_ew_run(c, loops, -1);
}

/* arange: start + i * step, computed in double then converted as
 * tide_store_double would (a call of it per element took 2 ns of the 2.2). */
#define ARANGE_BODY(name, T, CONV)                                                               \
    static void name(int64_t n, int64_t i0, void * restrict out_, const void * const * in,       \
                     const tide_opcall * c) {                                                    \
        T * restrict o     = out_;                                                               \
        const double start = c->p.scalars[0], step = c->p.scalars[2];                           \
        (void)in;                                                                                \
        for (int64_t i = 0; i < n; i++) {                                                        \
            double v = start + (double)(i0 + i) * step;                                          \
            o[i]     = CONV;                                                                     \
        }                                                                                        \
    }
ARANGE_BODY(arange_f32, float, (float)v)
ARANGE_BODY(arange_f64, double, v)
ARANGE_BODY(arange_i32, int32_t, tide_sat_i32(v))
ARANGE_BODY(arange_i64, int64_t, tide_sat_i64(v))
ARANGE_BODY(arange_u8, uint8_t, (uint8_t)(int64_t)tide_sat_i32(v))
ARANGE_BODY(arange_b, uint8_t, (uint8_t)(v != 0))
tide_status tide_cpu_arange(const tide_opcall * c) {
    static const tide_ew_loop loops[TIDE_DTYPE_COUNT] = {TABLE(arange)};
    return tide_ew_run(c, loops, -1);
}

/* scalars: start, end (exclusive), step. */
tide_status tide_shape_arange(tide_opcall * c, tide_shape_out * o) {
    double start = c->p.scalars[0], end = c->p.scalars[1], step = c->p.scalars[2];
    if (step == 0 || step != step) return tide_error_set(TIDE_E_VALUE, "arange: step must be nonzero, got %g", step);
    if (!isfinite(start) || !isfinite(end))
        return tide_error_set(TIDE_E_VALUE, "arange: start %g and end %g must be finite", start, end);
    if ((step > 0 && end < start) || (step < 0 && end > start))
        return tide_error_set(TIDE_E_VALUE, "arange: step %g goes away from end %g (start %g)", step, end, start);
    double n = ceil((end - start) / step);
    if (n > 1e15) return tide_error_set(TIDE_E_VALUE, "arange: %g elements is too many", n);
    o->ndim[0]     = 1;
    o->sizes[0][0] = (int64_t)n;
    return TIDE_OK;
}

/* linspace: steps values from start to end inclusive; the second half counts
 * back from end so both ends are exact, as PyTorch does. */
#define LINSPACE_BODY(name, T)                                                                   \
    static void name(int64_t n, int64_t i0, void * restrict out_, const void * const * in,       \
                     const tide_opcall * c) {                                                    \
        T * restrict o = out_;                                                                   \
        double a = c->p.scalars[0], b = c->p.scalars[1];                                         \
        int64_t steps = c->p.ints[0];                                                            \
        double step = steps > 1 ? (b - a) / (double)(steps - 1) : 0;                             \
        (void)in;                                                                                \
        for (int64_t i = 0; i < n; i++) {                                                        \
            int64_t k = i0 + i;                                                                  \
            double v = k < steps / 2 ? a + step * (double)k : b - step * (double)(steps - 1 - k); \
            tide_store_double(&o[i], c->compute_dtype, v);                                       \
        }                                                                                        \
    }
FILL_LOOPS(linspace, LINSPACE_BODY)
tide_status tide_cpu_linspace(const tide_opcall * c) {
    static const tide_ew_loop loops[TIDE_DTYPE_COUNT] = {TABLE(linspace)};
    return tide_ew_run(c, loops, -1);
}

tide_status tide_shape_linspace(tide_opcall * c, tide_shape_out * o) {
    if (c->p.n_ints < 1 || c->p.ints[0] < 0)
        return tide_error_set(TIDE_E_VALUE, "linspace: steps must be a non-negative count, got %lld",
                              (long long)(c->p.n_ints ? c->p.ints[0] : -1));
    o->ndim[0]     = 1;
    o->sizes[0][0] = c->p.ints[0];
    return TIDE_OK;
}

/* eye's result: two sizes, checked at the call. */
tide_status tide_shape_eye(tide_opcall * c, tide_shape_out * o) {
    if (c->p.n_ints != 2) return tide_error_set(TIDE_E_SHAPE, "eye: takes two sizes (n, m), got %d", c->p.n_ints);
    return tide_shape_sizes(c, o);
}

/* eye: ones where row == column of the 2-d output. */
#define EYE_BODY(name, T)                                                                        \
    static void name(int64_t n, int64_t i0, void * restrict out_, const void * const * in,       \
                     const tide_opcall * c) {                                                    \
        T * restrict o = out_;                                                                   \
        int64_t m = c->out[0]->sizes[1];                                                         \
        (void)in;                                                                                \
        for (int64_t i = 0; i < n; i++) o[i] = (T)((i0 + i) / m == (i0 + i) % m);                \
    }
FILL_LOOPS(eye, EYE_BODY)
tide_status tide_cpu_eye(const tide_opcall * c) {
    static const tide_ew_loop loops[TIDE_DTYPE_COUNT] = {TABLE(eye)};
    if (c->out[0]->ndim != 2) return tide_error_set(TIDE_E_SHAPE, "eye: takes two sizes (n, m)");
    return tide_ew_run(c, loops, -1);
}
