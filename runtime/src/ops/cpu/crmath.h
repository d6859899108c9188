/*
 * crmath.h - float32 log, sin and cos rounded correctly on the inputs randn
 * gives them, shared by the CPU's random.c and the CUDA backend's random.cu
 * (as philox.h is): the two devices then draw the same float32 normals. The
 * includer may define TIDE_CRMATH_FN (random.cu: __host__ __device__ inline)
 * and must have included <math.h>, <stdint.h> and <string.h>.
 */
#ifndef TIDE_CRMATH_H
#define TIDE_CRMATH_H

#ifndef TIDE_CRMATH_FN
#define TIDE_CRMATH_FN static inline
#endif

/* float32 log, sin and cos, rounded correctly on every input randn gives
 * them: log on [2^-53, 1], sin and cos on [0, float(2 pi)].
 *
 * Why not logf and sincosf: the device's differ from glibc's in the last bit,
 * and glibc's are not correctly rounded either (ARM's algorithms: checked
 * exhaustively against a 113-bit reference, 196521 logf inputs and about 0.9
 * million sinf and cosf inputs of these ranges are off by one), so no device
 * function matches them everywhere. A correctly rounded result is one value,
 * whoever computes it.
 *
 * How: the double function rounded to float is the correctly rounded result
 * unless the exact value lies within the double function's error (CUDA's: 1
 * ulp for log, 2 for sin and cos; glibc's: under 1) of a midpoint between two
 * floats. The same exhaustive check lists every input whose exact value lies
 * within 16 double ulps of one: the cases below, with their correct results.
 *
 * random.c's and random.cu's float32 randn both call these, so a seed gives
 * the same normals on either device, whatever the libm; the CPU pays about
 * twice the time of logf and sincosf for it. */
TIDE_CRMATH_FN uint32_t to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
TIDE_CRMATH_FN float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

TIDE_CRMATH_FN float log_f32(float x) {
    switch (to_bits(x)) {
    case 0x25be734f: return from_bits(0xc20e95ce);
    case 0x25f12e61: return from_bits(0xc20da3fb);
    case 0x2702172e: return from_bits(0xc207cac3);
    case 0x2758eec4: return from_bits(0xc205bf23);
    case 0x27a51454: return from_bits(0xc2041112);
    case 0x28e3fa26: return from_bits(0xc1fa75e0);
    case 0x29bd4f07: return from_bits(0xc1f0db66);
    case 0x29e6126b: return from_bits(0xc1ef4c02);
    case 0x29fd22f8: return from_bits(0xc1ee8859);
    case 0x2c4c24b7: return from_bits(0xc1d48710);
    case 0x2d6f4a4e: return from_bits(0xc1c82a99);
    case 0x2e492984: return from_bits(0xc1be76ee);
    case 0x2e7a6221: return from_bits(0xc1bcb6a9);
    case 0x3031622e: return from_bits(0xc1a94a4d);
    case 0x3418949b: return from_bits(0xc17c447f);
    case 0x3461a322: return from_bits(0xc17601fe);
    case 0x36e5459e: return from_bits(0xc13e4ce2);
    case 0x38dcbe38: return from_bits(0xc1128ba4);
    case 0x39c31348: return from_bits(0xc0fcaf65);
    case 0x39c7b1f9: return from_bits(0xc0fbefa7);
    case 0x39dbdda7: return from_bits(0xc0f8db60);
    case 0x3bf86ef0: return from_bits(0xc09c399e);
    case 0x3c413d3a: return from_bits(0xc08e158f);
    case 0x3e2b3421: return from_bits(0xbfe4f170);
    }
    return (float)log((double)x);
}

TIDE_CRMATH_FN void sincos_f32(float t, float * s, float * c) {
    double sd, cd;
    sincos((double)t, &sd, &cd);
    *s = (float)sd;
    *c = (float)cd;
    switch (to_bits(t)) {
    case 0x3a1285ff: *s = from_bits(0x3a1285ff); break;
    case 0x3a852018: *s = from_bits(0x3a852017); break;
    case 0x3d0650ea: *s = from_bits(0x3d064ac0); break;
    case 0x3dcf5597: *s = from_bits(0x3dcefaf9); break;
    case 0x3ef32001: *s = from_bits(0x3eea1732); break;
    case 0x3ef3830f: *s = from_bits(0x3eea6f45); break;
    case 0x3fa0fa4e: *s = from_bits(0x3f738cb1); break;
    case 0x401f2100: *s = from_bits(0x3f1bfc6f); break;
    }
    switch (to_bits(t)) {
    case 0x39800000: *c = from_bits(0x3f800000); break;
    case 0x3a0f1bbd: *c = from_bits(0x3f7ffffd); break;
    case 0x3a544395: *c = from_bits(0x3f7ffffb); break;
    case 0x3b434e12: *c = from_bits(0x3f7fffb5); break;
    case 0x3c107fe6: *c = from_bits(0x3f7ffd74); break;
    case 0x3dac4fc0: *c = from_bits(0x3f7f182d); break;
    case 0x3e5fa70e: *c = from_bits(0x3f79eb10); break;
    case 0x3f8626a5: *c = from_bits(0x3eff9eb8); break;
    case 0x3faa2672: *c = from_bits(0x3e74e5b3); break;
    case 0x3fdb3c0e: *c = from_bits(0xbe10e4b3); break;
    case 0x4010a4bf: *c = from_bits(0xbf22cea3); break;
    case 0x40259f7c: *c = from_bits(0xbf59bec4); break;
    }
}

#endif
