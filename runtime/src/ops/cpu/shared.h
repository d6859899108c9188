/*
 * shared.h - arithmetic and plans the CPU kernels and the CUDA backend's
 * must do alike (as philox.h and crmath.h): integer pow, and how repeat
 * lays its output out. Plain C; the includer may define TIDE_SHARED_FN
 * (the CUDA files: __host__ __device__ inline) and includes <stdint.h>.
 */
#ifndef TIDE_SHARED_H
#define TIDE_SHARED_H

#ifndef TIDE_SHARED_FN
#define TIDE_SHARED_FN static inline
#endif

/* Integer pow by squaring, wrapping; a negative exponent gives 0 except for
 * bases 1 and -1. */
TIDE_SHARED_FN int64_t tide_ipow(int64_t a, int64_t b) {
    if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    uint64_t r = 1, x = (uint64_t)a;
    while (b) {
        if (b & 1) r *= x;
        x *= x;
        b >>= 1;
    }
    return (int64_t)r;
}

/* repeat(x, reps[0..n)) seen as (tile, element) pairs of dims: the n reps
 * against x's ndim sizes and strides (right-aligned) and the result's
 * strides give up to 2n dims of sizes sz, result strides ost and x strides
 * xst (0 over the tile dims: x broadcast), size-1 dims left out. Returns
 * how many. Each kernel copies x into that view once, looping over the
 * leading ones beyond TIDE_MAX_DIMS. */
TIDE_SHARED_FN int32_t tide_repeat_plan(int32_t n, const int64_t * reps, int32_t xndim, const int64_t * xsizes,
                                        const int64_t * xstrides, const int64_t * ostrides, int64_t * sz,
                                        int64_t * ost, int64_t * xst) {
    int32_t lead = n - xndim, m = 0;
    for (int32_t d = 0; d < n; d++) {
        int64_t r = reps[d], s = d >= lead ? xsizes[d - lead] : 1;
        int64_t xs = d >= lead ? xstrides[d - lead] : 0, os = ostrides[d];
        if (r > 1) sz[m] = r, ost[m] = s * os, xst[m] = 0, m++;
        if (s > 1) sz[m] = s, ost[m] = os, xst[m] = xs, m++;
    }
    return m;
}

#endif
