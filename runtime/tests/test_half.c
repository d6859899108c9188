/* test_half.c - float16 <-> float32 conversions (core/half.c, and
 * tide_convert's dense and strided loops over them) against a reference
 * written the plain way, with branches: every float16, and float32 bit
 * patterns 61 apart (70 million of them) plus the edges (zeros, the smallest
 * subnormals, the rounding boundaries to infinity, infinities, NaNs). */
#include "tide.h"
#include "check.h"
#include "core/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float    u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static float ref_h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0 && man == 0) {
        bits = sign;
    } else if (exp == 0) {   /* subnormal: man 2^-24, exact in float */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    return u2f(bits);
}

static uint16_t ref_f2h(float f) {
    uint32_t x = f2u(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00);   /* NaN: quiet, no payload */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);  /* rounds to inf */
    if (ax < 0x38800000u) return (uint16_t)(sign | (uint32_t)lrintf(u2f(ax) * 16777216.0f));
    uint32_t r = ax + 0xfffu + ((ax >> 13) & 1);               /* round to nearest even */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static void test_all_halves(void) {
    enum { N = 65536 };
    uint16_t * h = malloc(N * sizeof *h);
    float *    f = malloc(N * sizeof *f), * fs = malloc(2 * N * sizeof *fs);
    for (uint32_t i = 0; i < N; i++) h[i] = (uint16_t)i;
    tide_convert(f, TIDE_DTYPE_F32, 1, h, TIDE_DTYPE_F16, 1, N);    /* the dense loop */
    tide_convert(fs, TIDE_DTYPE_F32, 2, h, TIDE_DTYPE_F16, 1, N);   /* the strided one */
    int bad = 0;
    for (uint32_t i = 0; i < N; i++) {
        uint32_t want = f2u(ref_h2f((uint16_t)i));
        bad += f2u(f[i]) != want || f2u(fs[2 * i]) != want || f2u(tide_f16_to_f32((uint16_t)i)) != want;
    }
    CHECK(bad == 0);
    free(h), free(f), free(fs);
}

static void test_floats(void) {
    enum { CHUNK = 1 << 16 };
    static const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x33000000u, 0x33000001u, 0x337fffffu,
                                     0x387fffffu, 0x38800000u, 0x477fefffu, 0x477ff000u, 0x477fffffu, 0x47800000u,
                                     0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fc00000u, 0xffffffffu,
                                     0x3f800000u, 0x38fff000u, 0x38fff001u, 0x33800000u};
    float *    f = malloc(CHUNK * sizeof *f);
    uint16_t * h = malloc(CHUNK * sizeof *h), * hs = malloc(3 * CHUNK * sizeof *hs);
    int64_t    bad = 0, n = 0;
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) f[n++] = u2f(edges[i]);
    for (uint64_t u = 7;; u += 61) {
        if (u >= (1ull << 32) || n == CHUNK) {
            tide_convert(h, TIDE_DTYPE_F16, 1, f, TIDE_DTYPE_F32, 1, n);
            tide_convert(hs, TIDE_DTYPE_F16, 3, f, TIDE_DTYPE_F32, 1, n);
            for (int64_t i = 0; i < n; i++) {
                uint16_t want = ref_f2h(f[i]);
                bad += h[i] != want || hs[3 * i] != want || tide_f32_to_f16(f[i]) != want;
            }
            n = 0;
        }
        if (u >= (1ull << 32)) break;
        f[n++] = u2f((uint32_t)u);
    }
    CHECK(bad == 0);
    free(f), free(h), free(hs);
}

int main(void) {
    test_all_halves();
    test_floats();
    if (check_failures) fprintf(stderr, "%d checks failed\n", check_failures);
    return check_failures != 0;
}
