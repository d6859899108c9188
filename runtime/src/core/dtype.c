/*
 * dtype.c - element types: names, sizes, PyTorch's promotion lattice, and
 * conversion between any two dtypes (including the float16/bfloat16 storage
 * types). Knows nothing about tensors or ops.
 */
#include "internal.h"

#include <math.h>
#include <strings.h>

static const struct {
    const char * name;
    size_t       size;
} dtypes[TIDE_DTYPE_COUNT] = {
    [TIDE_DTYPE_F32]  = {"float32", 4},  [TIDE_DTYPE_F64] = {"float64", 8},
    [TIDE_DTYPE_I32]  = {"int32", 4},    [TIDE_DTYPE_I64] = {"int64", 8},
    [TIDE_DTYPE_U8]   = {"uint8", 1},    [TIDE_DTYPE_BOOL] = {"bool", 1},
    [TIDE_DTYPE_F16]  = {"float16", 2},  [TIDE_DTYPE_BF16] = {"bfloat16", 2},
};

static bool valid(int32_t d) { return d >= 0 && d < TIDE_DTYPE_COUNT; }

const char * tide_dtype_name(int32_t d) { return valid(d) ? dtypes[d].name : NULL; }
size_t       tide_dtype_size(int32_t d) { return valid(d) ? dtypes[d].size : 0; }

int32_t tide_dtype_is_float(int32_t d) {
    return d == TIDE_DTYPE_F32 || d == TIDE_DTYPE_F64 || d == TIDE_DTYPE_F16 || d == TIDE_DTYPE_BF16;
}

int32_t tide_dtype_from_name(const char * name) {
    static const struct { const char * alias; int32_t d; } aliases[] = {
        {"float", TIDE_DTYPE_F32},  {"double", TIDE_DTYPE_F64}, {"int", TIDE_DTYPE_I32},
        {"long", TIDE_DTYPE_I64},   {"half", TIDE_DTYPE_F16},   {"byte", TIDE_DTYPE_U8},
        {"f32", TIDE_DTYPE_F32},    {"f64", TIDE_DTYPE_F64},    {"i32", TIDE_DTYPE_I32},
        {"i64", TIDE_DTYPE_I64},    {"u8", TIDE_DTYPE_U8},      {"f16", TIDE_DTYPE_F16},
        {"bf16", TIDE_DTYPE_BF16},
    };
    if (!name) return -1;
    for (int32_t d = 0; d < TIDE_DTYPE_COUNT; d++)
        if (strcasecmp(name, dtypes[d].name) == 0) return d;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcasecmp(name, aliases[i].alias) == 0) return aliases[i].d;
    return -1;
}

/* Category: 0 bool, 1 integer, 2 floating. */
static int category(int32_t d) {
    if (d == TIDE_DTYPE_BOOL) return 0;
    return tide_dtype_is_float(d) ? 2 : 1;
}

int32_t tide_dtype_promote(int32_t a, int32_t b) {
    if (a == b) return a;
    int ca = category(a), cb = category(b);
    if (ca != cb) return ca > cb ? a : b;
    if (ca == 1) {  /* u8 < i32 < i64 */
        static const int rank[TIDE_DTYPE_COUNT] = {[TIDE_DTYPE_U8] = 1, [TIDE_DTYPE_I32] = 2, [TIDE_DTYPE_I64] = 3};
        return rank[a] > rank[b] ? a : b;
    }
    /* floating: f16 and bf16 meet at f32; otherwise the wider wins */
    if (a == TIDE_DTYPE_F64 || b == TIDE_DTYPE_F64) return TIDE_DTYPE_F64;
    return TIDE_DTYPE_F32;
}

/* -- half precision: bfloat16 (float16 is half.c's) ---------------------------- */

float tide_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t tide_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);  /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* -- conversion --------------------------------------------------------------- */

/* NaN as one bit pattern: LuaJIT tags its values inside NaNs, so a NaN whose
 * high bits are all set (CUDA's erf(NaN) in double gives one) read into Lua
 * became nil. Every NaN leaves here as the quiet NaN. */
static inline double canonical(double v) { return v != v ? (double)NAN : v; }

double tide_load_double(const void * p, int32_t d) {
    switch (d) {
    case TIDE_DTYPE_F32:  return canonical(*(const float *)p);
    case TIDE_DTYPE_F64:  return canonical(*(const double *)p);
    case TIDE_DTYPE_I32:  return *(const int32_t *)p;
    case TIDE_DTYPE_I64:  return (double)*(const int64_t *)p;
    case TIDE_DTYPE_U8:   return *(const uint8_t *)p;
    case TIDE_DTYPE_BOOL: return *(const uint8_t *)p != 0;
    case TIDE_DTYPE_F16:  return tide_f16_to_f32(*(const uint16_t *)p);
    case TIDE_DTYPE_BF16: return tide_bf16_to_f32(*(const uint16_t *)p);
    }
    return 0;
}


void tide_store_double(void * p, int32_t d, double v) {
    switch (d) {
    case TIDE_DTYPE_F32:  *(float *)p = (float)v; break;
    case TIDE_DTYPE_F64:  *(double *)p = v; break;
    case TIDE_DTYPE_I32:  *(int32_t *)p = tide_sat_i32(v); break;
    case TIDE_DTYPE_I64:  *(int64_t *)p = tide_sat_i64(v); break;
    case TIDE_DTYPE_U8:   *(uint8_t *)p = (uint8_t)(int64_t)tide_sat_i32(v); break;  /* wraps like C, from an int */
    case TIDE_DTYPE_BOOL: *(uint8_t *)p = v != 0; break;
    case TIDE_DTYPE_F16:  *(uint16_t *)p = tide_f32_to_f16((float)v); break;
    case TIDE_DTYPE_BF16: *(uint16_t *)p = tide_f32_to_bf16((float)v); break;
    }
}

/* Fast paths for the conversions kernels do all the time; the rest go through double,
 * which is exact for every pair except int64 values beyond 2^53 to int64 (same dtype
 * never converts) and int64 -> int32 (done through the integer path below). */
#define CONV_LOOP(DT, ST, EXPR)                                                              \
    do {                                                                                     \
        DT * restrict d_ = (DT *)dst;                                                        \
        const ST * restrict s_ = (const ST *)src;                                            \
        if (dst_stride == 1 && src_stride == 1)                                              \
            for (int64_t i = 0; i < n; i++) { ST x = s_[i]; d_[i] = (EXPR); }                \
        else if (dst_stride == 1 && src_stride == 0) { /* a broadcast value: a fill */       \
            ST x = s_[0];                                                                    \
            DT v = (EXPR);                                                                   \
            for (int64_t i = 0; i < n; i++) d_[i] = v;                                       \
        } else                                                                               \
            for (int64_t i = 0; i < n; i++) { ST x = s_[i * src_stride]; d_[i * dst_stride] = (EXPR); } \
        return;                                                                              \
    } while (0)

void tide_convert(void * dst, int32_t dt, int64_t dst_stride,
                  const void * src, int32_t st, int64_t src_stride, int64_t n) {
    size_t ds = tide_dtype_size(dt), ss = tide_dtype_size(st);
    if (dt == st) {
        if (dst_stride == 1 && src_stride == 1) { memcpy(dst, src, (size_t)n * ds); return; }
        switch (ds) {
        case 1: CONV_LOOP(uint8_t, uint8_t, x);
        case 2: CONV_LOOP(uint16_t, uint16_t, x);
        case 4: CONV_LOOP(uint32_t, uint32_t, x);
        case 8: CONV_LOOP(uint64_t, uint64_t, x);
        }
    }
    if (dt == TIDE_DTYPE_F32 && st == TIDE_DTYPE_F64) CONV_LOOP(float, double, (float)x);
    if (dt == TIDE_DTYPE_F64 && st == TIDE_DTYPE_F32) CONV_LOOP(double, float, x);
    if (dt == TIDE_DTYPE_F32 && st == TIDE_DTYPE_I32) CONV_LOOP(float, int32_t, (float)x);
    if (dt == TIDE_DTYPE_F32 && st == TIDE_DTYPE_I64) CONV_LOOP(float, int64_t, (float)x);
    if (dt == TIDE_DTYPE_F32 && st == TIDE_DTYPE_U8) CONV_LOOP(float, uint8_t, (float)x);
    if (dt == TIDE_DTYPE_F32 && st == TIDE_DTYPE_BOOL) CONV_LOOP(float, uint8_t, (float)(x != 0));
    if (dt == TIDE_DTYPE_F32 && st == TIDE_DTYPE_F16 && dst_stride == 1 && src_stride == 1) {
        tide_f16_to_f32_dense(dst, src, n);
        return;
    }
    if (dt == TIDE_DTYPE_F16 && st == TIDE_DTYPE_F32 && dst_stride == 1 && src_stride == 1) {
        tide_f32_to_f16_dense(dst, src, n);
        return;
    }
    if (dt == TIDE_DTYPE_F32 && st == TIDE_DTYPE_F16) CONV_LOOP(float, uint16_t, tide_f16_to_f32(x));
    if (dt == TIDE_DTYPE_F32 && st == TIDE_DTYPE_BF16) CONV_LOOP(float, uint16_t, tide_bf16_to_f32(x));
    if (dt == TIDE_DTYPE_F16 && st == TIDE_DTYPE_F32) CONV_LOOP(uint16_t, float, tide_f32_to_f16(x));
    if (dt == TIDE_DTYPE_BF16 && st == TIDE_DTYPE_F32) CONV_LOOP(uint16_t, float, tide_f32_to_bf16(x));
    if (dt == TIDE_DTYPE_I64 && st == TIDE_DTYPE_I32) CONV_LOOP(int64_t, int32_t, x);
    if (dt == TIDE_DTYPE_I32 && st == TIDE_DTYPE_I64) CONV_LOOP(int32_t, int64_t, (int32_t)(uint32_t)(uint64_t)x);
    if (dt == TIDE_DTYPE_I64 && st == TIDE_DTYPE_U8) CONV_LOOP(int64_t, uint8_t, x);
    if (dt == TIDE_DTYPE_I64 && st == TIDE_DTYPE_BOOL) CONV_LOOP(int64_t, uint8_t, x != 0);
    if (dt == TIDE_DTYPE_BOOL && st == TIDE_DTYPE_F32) CONV_LOOP(uint8_t, float, x != 0);
    if (dt == TIDE_DTYPE_BOOL && st == TIDE_DTYPE_U8) CONV_LOOP(uint8_t, uint8_t, x != 0);
    if (dt == TIDE_DTYPE_U8 && st == TIDE_DTYPE_BOOL) CONV_LOOP(uint8_t, uint8_t, x != 0);
    if (dt == TIDE_DTYPE_U8 && st == TIDE_DTYPE_I64) CONV_LOOP(uint8_t, int64_t, (uint8_t)(uint64_t)x);
    if (dt == TIDE_DTYPE_U8 && st == TIDE_DTYPE_I32) CONV_LOOP(uint8_t, int32_t, (uint8_t)(uint32_t)x);
    /* Every other pair through double, as tide_load_double and tide_store_double
     * do, in a loop of its own: a call per element through both switches took
     * float32 -> int32 2.6 ns an element. */
#define ST_F32(v)  ((float)(v))
#define ST_F64(v)  (v)
#define ST_I32(v)  tide_sat_i32(v)
#define ST_I64(v)  tide_sat_i64(v)
#define ST_U8(v)   ((uint8_t)(int64_t)tide_sat_i32(v))
#define ST_BOOL(v) ((uint8_t)((v) != 0))
#define ST_F16(v)  tide_f32_to_f16((float)(v))
#define ST_BF16(v) tide_f32_to_bf16((float)(v))
#define FROM_ANY(DT, STORE)                                                                        \
    switch (st) {                                                                                  \
    case TIDE_DTYPE_F32:  CONV_LOOP(DT, float, STORE((double)x));                                  \
    case TIDE_DTYPE_F64:  CONV_LOOP(DT, double, STORE(x));                                         \
    case TIDE_DTYPE_I32:  CONV_LOOP(DT, int32_t, STORE((double)x));                                \
    case TIDE_DTYPE_I64:  CONV_LOOP(DT, int64_t, STORE((double)x));                                \
    case TIDE_DTYPE_U8:   CONV_LOOP(DT, uint8_t, STORE((double)x));                                \
    case TIDE_DTYPE_BOOL: CONV_LOOP(DT, uint8_t, STORE((double)(x != 0)));                         \
    case TIDE_DTYPE_F16:  CONV_LOOP(DT, uint16_t, STORE((double)tide_f16_to_f32(x)));              \
    case TIDE_DTYPE_BF16: CONV_LOOP(DT, uint16_t, STORE((double)tide_bf16_to_f32(x)));             \
    }                                                                                              \
    break
    switch (dt) {
    case TIDE_DTYPE_F32:  FROM_ANY(float, ST_F32);
    case TIDE_DTYPE_F64:  FROM_ANY(double, ST_F64);
    case TIDE_DTYPE_I32:  FROM_ANY(int32_t, ST_I32);
    case TIDE_DTYPE_I64:  FROM_ANY(int64_t, ST_I64);
    case TIDE_DTYPE_U8:   FROM_ANY(uint8_t, ST_U8);
    case TIDE_DTYPE_BOOL: FROM_ANY(uint8_t, ST_BOOL);
    case TIDE_DTYPE_F16:  FROM_ANY(uint16_t, ST_F16);
    case TIDE_DTYPE_BF16: FROM_ANY(uint16_t, ST_BF16);
    }
#undef FROM_ANY
    const char * s = src;   /* a dtype outside the table: nothing to convert */
    char * d = dst;
    for (int64_t i = 0; i < n; i++)
        tide_store_double(d + i * dst_stride * (int64_t)ds, dt, tide_load_double(s + i * src_stride * (int64_t)ss, st));
}
