/*
 * philox.h - the Philox4x32-10 block function (Salmon et al., "Parallel random
 * numbers: as easy as 1, 2, 3", SC 2011; the generator of cuRAND and PyTorch)
 * and Tide's mapping of its stream to tensor elements. Header-only and free of
 * runtime types so that random.c, the C test and a future CUDA file share it;
 * turning words into floats and integers is random.c's business.
 */
#ifndef TIDE_PHILOX_H
#define TIDE_PHILOX_H

#include <stdint.h>

/* A CUDA file defines this as `static __host__ __device__ inline` before including. */
#ifndef TIDE_PHILOX_FN
#define TIDE_PHILOX_FN static inline
#endif

#define TIDE_PHILOX_M0 0xD2511F53u   /* round multipliers */
#define TIDE_PHILOX_M1 0xCD9E8D57u
#define TIDE_PHILOX_W0 0x9E3779B9u   /* Weyl key increments: golden ratio and sqrt(3) - 1 */
#define TIDE_PHILOX_W1 0xBB67AE85u

/* out = Philox4x32-10(ctr, key): ten rounds, the key bumped between rounds.
 * out may alias ctr. Pure, so any thread may call it. */
TIDE_PHILOX_FN void tide_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r) {
            k0 += TIDE_PHILOX_W0;
            k1 += TIDE_PHILOX_W1;
        }
        uint64_t p0 = (uint64_t)TIDE_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)TIDE_PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* Tide's stream. Element g of the stream (g = the op's reserved offset + the
 * element's row-major index) takes word g % 4 of the block
 *     Philox4x32-10(counter = {lo(g / 4), hi(g / 4), draw, 0}, key = {lo(seed), hi(seed)}).
 * draw 0 gives every element its first 32 bits; an element that needs more
 * (float64, normals, 64-bit integers) takes draw 1, 2, ... of the same g, so
 * an op still consumes exactly one counter per element of its output and the
 * slice reserved by tide_rng_reserve is enough. */
TIDE_PHILOX_FN void tide_philox_block(uint64_t seed, uint64_t block, uint32_t draw, uint32_t out[4]) {
    const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), draw, 0};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    tide_philox4x32_10(ctr, key, out);
}

#endif /* TIDE_PHILOX_H */
