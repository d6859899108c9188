/*
 * random.c - the CPU kernels of the random ops (rand, randn, randint,
 * randperm, bernoulli) on the counter-based Philox stream of philox.h: element
 * i of an op's output is a pure function of (seed, offset, i), so results never
 * depend on the thread count or the order blocks run in. Reserving each op's
 * slice of the stream is rng.c's (at enqueue); strides, broadcasting, dtype
 * conversion and threads are the elementwise iterator's (ew.c).
 */
#include "kernels.h"
#include "philox.h"
#include "crmath.h"

#include <stdlib.h>


/* -- words of the stream -------------------------------------------------------------------- */

enum { CHUNK = 256 };   /* elements per batch of words, kept on the stack */

enum { BATCH = 32 };     /* Philox blocks computed side by side */

/* Draw `draw` of BATCH consecutive blocks from block0: the words of
 * tide_philox_block, with the blocks as vector lanes. The 32-bit words are kept
 * in 64-bit lanes so each round's 32x32->64 multiplies are single vector
 * multiplies with no narrowing (measured 1.5-2x the scalar function with
 * AVX-512, BATCH 32; 8 and 16 were slower). w[4 * j + l] is word l of block j. */
static TIDE_SIMD_CLONES void philox_batch(uint64_t seed, uint64_t block0, uint32_t draw, uint32_t * restrict w) {
    const uint64_t lo32 = 0xffffffffu;
    uint64_t       c0[BATCH], c1[BATCH], c2[BATCH], c3[BATCH];
    for (int j = 0; j < BATCH; j++) {
        uint64_t blk = block0 + (uint64_t)j;
        c0[j] = blk & lo32;
        c1[j] = blk >> 32;
        c2[j] = draw;
        c3[j] = 0;
    }
    uint64_t k0 = seed & lo32, k1 = seed >> 32;
    for (int r = 0; r < 10; r++) {
        for (int j = 0; j < BATCH; j++) {
            uint64_t p0 = TIDE_PHILOX_M0 * c0[j];
            uint64_t p1 = TIDE_PHILOX_M1 * c2[j];
            uint64_t n0 = (p1 >> 32) ^ c1[j] ^ k0;
            uint64_t n2 = (p0 >> 32) ^ c3[j] ^ k1;
            c1[j] = p1 & lo32;
            c3[j] = p0 & lo32;
            c0[j] = n0;
            c2[j] = n2;
        }
        k0 = (k0 + TIDE_PHILOX_W0) & lo32;
        k1 = (k1 + TIDE_PHILOX_W1) & lo32;
    }
    for (int j = 0; j < BATCH; j++) {
        w[4 * j]     = (uint32_t)c0[j];
        w[4 * j + 1] = (uint32_t)c1[j];
        w[4 * j + 2] = (uint32_t)c2[j];
        w[4 * j + 3] = (uint32_t)c3[j];
    }
}

/* w[k] = draw `draw` of stream element g0 + k, for k < n (see philox.h). A
 * few blocks go through the scalar function, so small tensors pay for no batch. */
static void stream_words(uint64_t seed, uint64_t g0, int64_t n, uint32_t draw, uint32_t * restrict w) {
    uint64_t g = g0, end = g0 + (uint64_t)n;
    uint32_t buf[4 * BATCH];
    while (g < end) {
        uint64_t first = g & ~(uint64_t)3, stop = first + 4 * BATCH;
        if (stop > end) stop = end;
        if (stop - first <= 16) {
            for (uint64_t b = first; b < stop; b += 4) tide_philox_block(seed, b >> 2, draw, buf + (b - first));
        } else {
            philox_batch(seed, first >> 2, draw, buf);
        }
        memcpy(w + (g - g0), buf + (g - first), (size_t)(stop - g) * sizeof *w);
        g = stop;
    }
}

/* Uniform on [0, 1): 24 bits for float32 (every value a float), 53 for float64. */
static inline float  u24(uint32_t a) { return (float)(a >> 8) * 0x1p-24f; }
static inline double u53(uint32_t a, uint32_t b) { return (double)(((uint64_t)a << 32 | b) >> 11) * 0x1p-53; }

/* The dtype the op's result is stored in: the destination's, else the request's. */
static int32_t result_dtype(const tide_opcall * c, int32_t fallback) {
    return c->out[0] ? c->out[0]->dtype_id : c->p.dtype >= 0 ? c->p.dtype : fallback;
}

/* An iterator loop that walks its range in chunks of the stream: SETUP runs
 * once, then BODY fills o[b + k] for each k < m from w0[k] (draw 0 of the
 * element) and, when TWO, w1[k] (draw 1). */
#define CHUNKED(name, T, TWO, SETUP, BODY)                                                       \
    static void name(int64_t n, int64_t i0, void * restrict out_, const void * const * in,      \
                     const tide_opcall * c) {                                                    \
        T * restrict o = out_;                                                                   \
        uint32_t w0[CHUNK], w1[CHUNK];                                                           \
        (void)in; (void)w1;                                                                      \
        SETUP                                                                                    \
        for (int64_t b = 0; b < n; b += CHUNK) {                                                 \
            int64_t  m = n - b < CHUNK ? n - b : CHUNK;                                          \
            uint64_t g = c->rng_offset + (uint64_t)(i0 + b);                                     \
            stream_words(c->rng_seed, g, m, 0, w0);                                              \
            if (TWO) stream_words(c->rng_seed, g, m, 1, w1);                                     \
            for (int64_t k = 0; k < m; k++) BODY                                                 \
        }                                                                                        \
    }

/* -- rand: low + (high - low) * u -------------------------------------------------------------- */

static tide_status rand_check(const tide_opcall * c) {
    double lo = c->p.scalars[0], hi = c->p.scalars[1];
    if (!isfinite(lo) || !isfinite(hi) || lo > hi)
        return tide_error_set(TIDE_E_VALUE, "rand: low must be at most high and both finite, got %g and %g", lo, hi);
    return TIDE_OK;
}

/* The largest value of dtype dt below hi: a result capped there stays below
 * high once converted to the result dtype (a float16 0.99995 would round to 1). */
static double below(double hi, int32_t dt) {
    if (dt == TIDE_DTYPE_F64) return nextafter(hi, -INFINITY);
    if (dt == TIDE_DTYPE_F16 || dt == TIDE_DTYPE_BF16) {
        bool     half = dt == TIDE_DTYPE_F16;
        uint16_t h    = half ? tide_f32_to_f16((float)hi) : tide_f32_to_bf16((float)hi);
        float    v    = half ? tide_f16_to_f32(h) : tide_bf16_to_f32(h);
        if (v < hi) return v;
        h = (h & 0x7fff) == 0 ? 0x8001 : (h & 0x8000) ? h + 1 : h - 1;   /* one step down */
        return half ? tide_f16_to_f32(h) : tide_bf16_to_f32(h);
    }
    float f = (float)hi;
    return (double)f < hi ? f : nextafterf(f, -INFINITY);
}

/* low + (high - low) * u, capped below high since rounding may reach it. */
#define RAND_SETUP(T)                                                                             \
    double lo = c->p.scalars[0], hi = c->p.scalars[1], span = hi - lo;                            \
    T      cap = (T)(lo < hi ? fmax(lo, below(hi, result_dtype(c, TIDE_DTYPE_F32))) : hi);
CHUNKED(rand_f32, float, 0, RAND_SETUP(float),
        { float v = (float)(lo + span * (double)u24(w0[k])); o[b + k] = v > cap ? cap : v; })
CHUNKED(rand_f64, double, 1, RAND_SETUP(double),
        { double v = lo + span * u53(w0[k], w1[k]); o[b + k] = v > cap ? cap : v; })

/* The sizes; low and high checked at the call, so that a device, whose
 * kernel cannot raise at the call, reports them alike (rand's rule in
 * ops.def; randn, randint and randperm have theirs below). */
tide_status tide_shape_rand(tide_opcall * c, tide_shape_out * o) {
    TIDE_CHECK(rand_check(c));
    return tide_shape_sizes(c, o);
}

tide_status tide_cpu_rand(const tide_opcall * c) {
    static const tide_ew_loop loops[TIDE_DTYPE_COUNT] = {[TIDE_DTYPE_F32] = rand_f32, [TIDE_DTYPE_F64] = rand_f64};
    return tide_ew_run(c, loops, -1);
}

/* -- randn: Box-Muller on pairs of stream elements --------------------------------------------- */

/* z[k] = normal of stream element g0 + k, for k < m <= CHUNK. Elements 2j and
 * 2j + 1 of the stream are one Box-Muller pair (53-bit uniforms from draws 0
 * and 1 of each, so the tails reach 8.5 sigma): the even one takes the cosine,
 * the odd one the sine, whichever block either falls in. float32 does the
 * math in float, with log, sin and cos rounded correctly (crmath.h), so that
 * a CUDA device draws the same normals. */
#define NORMALS(name, T, LOG, SQRT, SINCOS)                                                      \
    static void name(uint64_t seed, uint64_t g0, int64_t m, T * restrict z) {                    \
        uint32_t a[CHUNK + 2], b[CHUNK + 2];                                                     \
        uint64_t gs = g0 & ~(uint64_t)1, ge = (g0 + (uint64_t)m + 1) & ~(uint64_t)1;             \
        int64_t  np = (int64_t)(ge - gs), shift = (int64_t)(g0 - gs);   /* 0 or 1 */             \
        stream_words(seed, gs, np, 0, a);                                                        \
        stream_words(seed, gs, np, 1, b);                                                        \
        for (int64_t k = 0; k < np; k += 2) {                                                    \
            T r = SQRT((T)-2 * LOG((T)(1.0 - u53(a[k], b[k]))));   /* 1 - u in (0, 1] */         \
            T s, co;                                                                             \
            SINCOS((T)(2 * M_PI) * (T)u53(a[k + 1], b[k + 1]), &s, &co);                         \
            int64_t e = k - shift;                                                               \
            if (e >= 0) z[e] = r * co;                                                           \
            if (e + 1 < m) z[e + 1] = r * s;                                                     \
        }                                                                                        \
    }
NORMALS(normals_f32, float, log_f32, sqrtf, sincos_f32)   /* crmath.h: as the CUDA kernel's */
NORMALS(normals_f64, double, log, sqrt, sincos)

static tide_status randn_check(const tide_opcall * c) {
    double mean = c->p.scalars[0], std = c->p.scalars[1];
    if (!isfinite(mean) || !isfinite(std) || std < 0)
        return tide_error_set(TIDE_E_VALUE, "randn: std must be non-negative and both finite, got mean %g and std %g",
                              mean, std);
    return TIDE_OK;
}

#define RANDN_LOOP(name, T, NORMALS_FN)                                                                    \
    static void name(int64_t n, int64_t i0, void * restrict out_, const void * const * in,      \
                     const tide_opcall * c) {                                                    \
        T * restrict o = out_;                                                                   \
        T mean = (T)c->p.scalars[0], std = (T)c->p.scalars[1], z[CHUNK];                         \
        (void)in;                                                                                \
        for (int64_t b = 0; b < n; b += CHUNK) {                                                 \
            int64_t m = n - b < CHUNK ? n - b : CHUNK;                                           \
            NORMALS_FN(c->rng_seed, c->rng_offset + (uint64_t)(i0 + b), m, z);                  \
            for (int64_t k = 0; k < m; k++) o[b + k] = mean + std * z[k];                        \
        }                                                                                        \
    }
RANDN_LOOP(randn_f32, float, normals_f32)
RANDN_LOOP(randn_f64, double, normals_f64)

tide_status tide_shape_randn(tide_opcall * c, tide_shape_out * o) {
    TIDE_CHECK(randn_check(c));
    return tide_shape_sizes(c, o);
}

tide_status tide_cpu_randn(const tide_opcall * c) {
    static const tide_ew_loop loops[TIDE_DTYPE_COUNT] = {[TIDE_DTYPE_F32] = randn_f32, [TIDE_DTYPE_F64] = randn_f64};
    return tide_ew_run(c, loops, -1);
}

/* -- randint: low + (64-bit draw * range) >> 64 ------------------------------------------------ */

/* Checks [low, high) and returns low and the range (0 standing for 2^64). The
 * bounds must be integers that the result dtype holds exactly (floats: up to
 * 2^mantissa bits), so that every value of the range can come out. */
static tide_status randint_bounds(const tide_opcall * c, int64_t * lo_out, uint64_t * range) {
    double lo = c->p.scalars[0], hi = c->p.scalars[1];
    if (!(lo < hi))
        return tide_error_set(TIDE_E_VALUE, "randint: low must be less than high, got low = %.17g and high = %.17g",
                              lo, hi);
    if (lo != floor(lo) || hi != floor(hi))
        return tide_error_set(TIDE_E_VALUE, "randint: low and high must be integers, got %.17g and %.17g", lo, hi);
    int32_t dt = result_dtype(c, TIDE_DTYPE_I64);
    double  min, max;   /* the bounds allowed for low and high */
    switch (dt) {
    case TIDE_DTYPE_U8:   min = 0;       max = 256;     break;
    case TIDE_DTYPE_BOOL: min = 0;       max = 2;       break;
    case TIDE_DTYPE_I32:  min = -0x1p31; max = 0x1p31;  break;
    case TIDE_DTYPE_F16:  min = -0x1p11; max = 0x1p11;  break;
    case TIDE_DTYPE_BF16: min = -0x1p8;  max = 0x1p8;   break;
    case TIDE_DTYPE_F32:  min = -0x1p24; max = 0x1p24;  break;
    case TIDE_DTYPE_F64:  min = -0x1p53; max = 0x1p53;  break;
    default:              min = -0x1p63; max = 0x1p63;  break;
    }
    if (lo < min || hi > max)
        return tide_error_set(TIDE_E_VALUE, "randint: [%.17g, %.17g) is outside what dtype %s holds exactly, [%.17g, %.17g]",
                              lo, hi, tide_dtype_name(dt), min, max);
    int64_t l = (int64_t)lo;
    /* high - 1 as an integer, exactly, even for high = 2^63 */
    uint64_t last = hi >= 0x1p63 ? (uint64_t)INT64_MAX : (uint64_t)(int64_t)hi - 1;
    *lo_out = l;
    *range  = last - (uint64_t)l + 1;
    return TIDE_OK;
}

/* Validates randint's bounds at enqueue, so the error comes from the call. */
tide_status tide_shape_randint(tide_opcall * c, tide_shape_out * o) {
    int64_t  lo;
    uint64_t range;
    TIDE_CHECK(randint_bounds(c, &lo, &range));
    return tide_shape_sizes(c, o);
}

static inline uint64_t randint_draw(uint64_t lo, uint64_t range, uint32_t a, uint32_t b) {
    uint64_t x = (uint64_t)a << 32 | b;
    return lo + (range ? (uint64_t)(((unsigned __int128)x * range) >> 64) : x);
}

#define RANDINT_LOOP(name, T)                                                                    \
    CHUNKED(name, T, 1, int64_t lo; uint64_t range; randint_bounds(c, &lo, &range);,             \
            { o[b + k] = (T)(int64_t)randint_draw((uint64_t)lo, range, w0[k], w1[k]); })
RANDINT_LOOP(randint_f32, float)
RANDINT_LOOP(randint_f64, double)
RANDINT_LOOP(randint_i32, int32_t)
RANDINT_LOOP(randint_i64, int64_t)
RANDINT_LOOP(randint_u8, uint8_t)

tide_status tide_cpu_randint(const tide_opcall * c) {
    static const tide_ew_loop loops[TIDE_DTYPE_COUNT] = {
        [TIDE_DTYPE_F32] = randint_f32, [TIDE_DTYPE_F64] = randint_f64, [TIDE_DTYPE_I32] = randint_i32,
        [TIDE_DTYPE_I64] = randint_i64, [TIDE_DTYPE_U8] = randint_u8};
    return tide_ew_run(c, loops, -1);   /* the bounds were checked by tide_shape_randint */
}

/* -- randperm: sort the elements by a random 64-bit key ---------------------------------------- */

/* Element i draws key (draw 0 << 32 | draw 1) at stream element offset + i; the
 * permutation lists the elements in increasing key order, ties by index (a
 * stable sort), which is what a GPU's stable radix sort of (key, index) pairs
 * gives too. Uses exactly the n counters reserved. */

/* n must fit a 1-d result whose largest value (n, or n - 1 zero-based) the dtype holds exactly. */
static tide_status randperm_check(const tide_opcall * c) {
    if (c->p.n_ints != 1) return tide_error_set(TIDE_E_SHAPE, "randperm: takes one size n, %d given", c->p.n_ints);
    int64_t n = c->p.ints[0];
    int32_t dt = result_dtype(c, TIDE_DTYPE_I64);
    double  max;   /* the largest integer every smaller one of which the dtype holds */
    switch (dt) {
    case TIDE_DTYPE_U8:   max = 255;      break;
    case TIDE_DTYPE_BOOL: max = 1;        break;
    case TIDE_DTYPE_I32:  max = 0x1p31 - 1; break;
    case TIDE_DTYPE_F16:  max = 0x1p11;   break;
    case TIDE_DTYPE_BF16: max = 0x1p8;    break;
    case TIDE_DTYPE_F32:  max = 0x1p24;   break;
    case TIDE_DTYPE_F64:  max = 0x1p53;   break;
    default:              max = 0x1p63;   break;
    }
    int64_t base = (c->p.flags & TIDE_PARAMF_ONE_BASED) ? 1 : 0;
    if (n > 0 && (double)(n - 1 + base) > max)
        return tide_error_set(TIDE_E_VALUE, "randperm: n = %lld is too large for dtype %s (at most %.17g)",
                              (long long)n, tide_dtype_name(dt), max + 1 - (double)base);
    return TIDE_OK;
}

/* Validates n at enqueue (suggested rule for randperm in ops.def). */
tide_status tide_shape_randperm(tide_opcall * c, tide_shape_out * o) {
    TIDE_CHECK(tide_shape_sizes(c, o));   /* negative n */
    return randperm_check(c);
}

typedef struct {
    uint64_t   seed, offset;
    uint64_t * key;
} key_job;

static void make_keys(void * ctx, int64_t begin, int64_t end) {
    const key_job * j = ctx;
    uint32_t a[CHUNK], b[CHUNK];
    for (int64_t s = begin; s < end; s += CHUNK) {
        int64_t m = end - s < CHUNK ? end - s : CHUNK;
        stream_words(j->seed, j->offset + (uint64_t)s, m, 0, a);
        stream_words(j->seed, j->offset + (uint64_t)s, m, 1, b);
        for (int64_t k = 0; k < m; k++) j->key[s + k] = (uint64_t)a[k] << 32 | b[k];
    }
}

/* Stable LSD radix sort of (key, idx) pairs by key, 8 bits a pass, ping-ponging
 * between the two buffers; bytes on which every key agrees are skipped.
 * Returns the buffer that holds the sorted indices. */
static int64_t * radix_sort(uint64_t * key, int64_t * idx, uint64_t * key2, int64_t * idx2, int64_t n) {
    int64_t(*count)[256] = calloc(8, sizeof *count);
    if (!count) return NULL;
    for (int64_t i = 0; i < n; i++)
        for (int p = 0; p < 8; p++) count[p][(key[i] >> (8 * p)) & 255]++;
    for (int p = 0; p < 8; p++) {
        int64_t * cnt = count[p], sum = 0;
        if (cnt[(key[0] >> (8 * p)) & 255] == n) continue;
        for (int d = 0; d < 256; d++) {
            int64_t t = cnt[d];
            cnt[d] = sum;
            sum += t;
        }
        for (int64_t i = 0; i < n; i++) {
            int64_t at = cnt[(key[i] >> (8 * p)) & 255]++;
            key2[at]   = key[i];
            idx2[at]   = idx[i];
        }
        uint64_t * tk = key;
        key  = key2;
        key2 = tk;
        int64_t * ti = idx;
        idx  = idx2;
        idx2 = ti;
    }
    free(count);
    return idx;
}

tide_status tide_cpu_randperm(const tide_opcall * c) {   /* n checked by tide_shape_randperm */
    tide_tensor * out = c->out[0];
    int64_t       n   = out->nelem;
    TIDE_ASSERT(out->ndim == 1);
    if (n == 0) return TIDE_OK;
    /* keys, indices and their second buffers */
    char * mem = malloc((size_t)n * 4 * sizeof(uint64_t));
    if (!mem) return tide_error_set(TIDE_E_OOM, "randperm: out of memory for n = %lld", (long long)n);
    uint64_t * key = (uint64_t *)mem, * key2 = key + n;
    int64_t *  idx = (int64_t *)(key2 + n), * idx2 = idx + n;
    key_job job = {c->rng_seed, c->rng_offset, key};
    tide_parallel_for(n, TIDE_GRAIN, 4, make_keys, &job);
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    int64_t * perm = radix_sort(key, idx, key2, idx2, n);
    if (!perm) {
        free(mem);
        return tide_error_set(TIDE_E_OOM, "randperm: out of memory for n = %lld", (long long)n);
    }
    if (c->p.flags & TIDE_PARAMF_ONE_BASED)
        for (int64_t i = 0; i < n; i++) perm[i] += 1;
    tide_convert(tide_tensor_ptr(out), out->dtype_id, out->strides[0], perm, TIDE_DTYPE_I64, 1, n);
    free(mem);
    return TIDE_OK;
}

/* -- bernoulli: 1 where u < p ----------------------------------------------------------------- */

/* Every probability must lie in [0, 1]: scanned before drawing, since the loops
 * cannot fail. Reads p's own elements (strided, any float dtype) once. */
static tide_status check_probs(const tide_tensor * p) {
    if (p->nelem == 0) return TIDE_OK;
    const char * base  = tide_tensor_ptr(p);
    int64_t      esz   = (int64_t)tide_dtype_size(p->dtype_id);
    int32_t      nd    = p->ndim;
    int64_t      inner = nd ? p->sizes[nd - 1] : 1, step = nd ? p->strides[nd - 1] : 0;
    int64_t      outer = p->nelem / inner;
    double       v[CHUNK];
    for (int64_t r = 0; r < outer; r++) {
        int64_t off = nd > 1 ? tide_elem_offset(nd - 1, p->sizes, p->strides, r) : 0;
        for (int64_t j = 0; j < inner; j += CHUNK) {
            int64_t m = inner - j < CHUNK ? inner - j : CHUNK;
            tide_convert(v, TIDE_DTYPE_F64, 1, base + (off + j * step) * esz, p->dtype_id, step, m);
            for (int64_t k = 0; k < m; k++)
                if (!(v[k] >= 0 && v[k] <= 1))
                    return tide_error_set(TIDE_E_VALUE, "bernoulli: probability %g is outside [0, 1]", v[k]);
        }
    }
    return TIDE_OK;
}

#define BERNOULLI_LOOP(name, T, TWO, U)                                                          \
    static void name(int64_t n, int64_t i0, void * restrict out_, const void * const * in,      \
                     const tide_opcall * c) {                                                    \
        T * restrict       o = out_;                                                             \
        const T * restrict P = in[0];                                                            \
        uint32_t w0[CHUNK], w1[CHUNK];                                                           \
        (void)w1;                                                                                \
        for (int64_t b = 0; b < n; b += CHUNK) {                                                 \
            int64_t  m = n - b < CHUNK ? n - b : CHUNK;                                          \
            uint64_t g = c->rng_offset + (uint64_t)(i0 + b);                                     \
            stream_words(c->rng_seed, g, m, 0, w0);                                              \
            if (TWO) stream_words(c->rng_seed, g, m, 1, w1);                                     \
            for (int64_t k = 0; k < m; k++) o[b + k] = (T)(U < P[b + k]);                        \
        }                                                                                        \
    }
BERNOULLI_LOOP(bernoulli_f32, float, 0, u24(w0[k]))
BERNOULLI_LOOP(bernoulli_f64, double, 1, u53(w0[k], w1[k]))

tide_status tide_cpu_bernoulli(const tide_opcall * c) {
    static const tide_ew_loop loops[TIDE_DTYPE_COUNT] = {[TIDE_DTYPE_F32] = bernoulli_f32,
                                                         [TIDE_DTYPE_F64] = bernoulli_f64};
    TIDE_CHECK(check_probs(c->in[0]));
    return tide_ew_run(c, loops, -1);
}
