/*
 * half.c - float16 <-> float32, one element (tide_f16_to_f32, tide_f32_to_f16)
 * and over dense arrays (tide_convert's loops for them). Branch-free: every
 * case is computed and the right one selected, so that the array loops
 * vectorise; they are compiled for each instruction set (TIDE_SIMD_CLONES),
 * and this file with no-trapping-math, without which GCC keeps the branches.
 * A float16 add ran at 9.9 ms over 4M elements with branchy conversions, 6x
 * bfloat16's; 2.6 ms now. They give the bits the branchy versions gave for
 * every float16 and every float32 (all 2^32 were compared when they were
 * written; test_tensor checks all float16s and a sample of float32s against
 * a reference).
 */
#if defined(__GNUC__) && !defined(__clang__)
/* selects over float arithmetic become blends only when evaluating both arms
 * may raise FP flags; nothing reads them (as in ops/cpu/transcend.c) */
#pragma GCC optimize("no-trapping-math")
#endif

#include "internal.h"

static inline uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t o    = (uint32_t)(h & 0x7fff) << 13;    /* exponent and mantissa in float's places */
    uint32_t e    = o & 0x0f800000u;
    uint32_t n    = o + (112u << 23);                 /* rebias: normal numbers */
    n += e == 0x0f800000u ? 112u << 23 : 0;           /* inf, NaN: the exponent all ones */
    uint32_t s = f2u(u2f(o + (113u << 23)) - u2f(113u << 23));   /* zero, subnormal: exact in float */
    return u2f(sign | (e == 0 ? s : n));
}

static inline uint16_t f32_to_f16(float f) {
    uint32_t x = f2u(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
    uint32_t r      = ax + 0xfffu + ((ax >> 13) & 1);             /* round to nearest even */
    uint32_t normal = (r - 0x38000000u) >> 13;
    uint32_t sub    = f2u(u2f(ax) * 16777216.0f + 8388608.0f) - 0x4b000000u;   /* |f| / 2^-24, ties to even */
    uint32_t big    = ax > 0x7f800000u ? 0x7e00u : 0x7c00u;       /* NaN (quiet), or inf */
    uint32_t v      = ax >= 0x477ff000u ? big : ax < 0x38800000u ? sub : normal;   /* 0x477ff000: rounds to inf */
    return (uint16_t)(sign | v);
}

float    tide_f16_to_f32(uint16_t h) { return f16_to_f32(h); }
uint16_t tide_f32_to_f16(float f) { return f32_to_f16(f); }

TIDE_SIMD_CLONES void tide_f32_to_f16_dense(uint16_t * restrict d, const float * restrict s, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = f32_to_f16(s[i]);
}
TIDE_SIMD_CLONES void tide_f16_to_f32_dense(float * restrict d, const uint16_t * restrict s, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = f16_to_f32(s[i]);
}
