/* test_philox.c - Philox4x32-10 against the published known-answer vectors
 * (Random123's kat_vectors, from Salmon et al. 2011), and the rand/randint ops
 * against the element-to-counter mapping philox.h documents, so a CUDA port
 * that follows philox.h reproduces the CPU's numbers. */
#include "core/internal.h"
#include "ops/cpu/philox.h"
#include "check.h"

#include <math.h>
#include <string.h>

static void test_known_answers(void) {
    static const struct { uint32_t ctr[4], key[2], expect[4]; } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4];
        tide_philox4x32_10(kat[i].ctr, kat[i].key, out);
        for (int k = 0; k < 4; k++) {
            if (out[k] != kat[i].expect[k])
                fprintf(stderr, "vector %zu word %d: got %08x, expected %08x\n", i, k, out[k], kat[i].expect[k]);
            CHECK(out[k] == kat[i].expect[k]);
        }
    }
    uint32_t ctr[4] = {1, 2, 3, 4}, key[2] = {5, 6}, a[4];
    tide_philox4x32_10(ctr, key, a);
    tide_philox4x32_10(ctr, key, ctr);   /* in place gives the same words */
    CHECK(memcmp(a, ctr, sizeof a) == 0);
}

/* Runs a random creation op of n elements, continuing the stream; returns it synced. */
static tide_tensor * run_more(const char * op, int64_t n, double s0, double s1, int32_t dtype) {
    tide_op_params p;
    memset(&p, 0, sizeof p);
    p.ints[0] = n;
    p.n_ints = 1;
    p.scalars[0] = s0;
    p.scalars[1] = s1;
    p.dtype = dtype;
    tide_tensor * out[1] = {NULL};
    if (tide_op_call(tide_op_find(op), NULL, 0, &p, out, NULL) != TIDE_OK) return NULL;
    if (tide_tensor_wait(out[0]) != TIDE_OK) {
        tide_tensor_release(out[0]);
        return NULL;
    }
    return out[0];
}

/* The same, 10 elements, from the start of seed's stream. */
static tide_tensor * run_random(const char * op, uint64_t seed, double s0, double s1, int32_t dtype) {
    tide_manual_seed(seed);
    return run_more(op, 10, s0, s1, dtype);
}

/* The word philox.h assigns to draw d of stream element g. */
static uint32_t word(uint64_t seed, uint64_t g, uint32_t d) {
    uint32_t w[4];
    tide_philox_block(seed, g / 4, d, w);
    return w[g % 4];
}

static void test_ops_follow_the_stream(void) {
    const uint64_t seed = 0x123456789abcdefull;
    tide_tensor * t = run_random("rand", seed, 0, 1, TIDE_DTYPE_F32);
    CHECK(t != NULL);
    if (t) {
        const float * x = tide_tensor_data(t);
        for (uint64_t i = 0; i < 10; i++) CHECK(x[i] == (float)(word(seed, i, 0) >> 8) * 0x1p-24f);
        tide_tensor_release(t);
    }
    t = run_random("rand", seed, 0, 1, TIDE_DTYPE_F64);
    CHECK(t != NULL);
    if (t) {
        const double * x = tide_tensor_data(t);
        for (uint64_t i = 0; i < 10; i++) {
            uint64_t bits = ((uint64_t)word(seed, i, 0) << 32 | word(seed, i, 1)) >> 11;
            CHECK(x[i] == (double)bits * 0x1p-53);
        }
        tide_tensor_release(t);
    }
    /* randint: low + (64-bit draw * range) >> 64 */
    t = run_random("randint", seed, -5, 1000, TIDE_DTYPE_I64);
    CHECK(t != NULL);
    if (t) {
        const int64_t * x = tide_tensor_data(t);
        for (uint64_t i = 0; i < 10; i++) {
            uint64_t r = (uint64_t)word(seed, i, 0) << 32 | word(seed, i, 1);
            CHECK(x[i] == -5 + (int64_t)(((unsigned __int128)r * 1005u) >> 64));
        }
        tide_tensor_release(t);
    }
    /* a second op continues the stream at the next multiple of 4 (10 -> 12), and
     * a large one goes through the batched Philox, from a block not on a batch edge */
    tide_tensor * first = run_random("rand", seed, 0, 1, TIDE_DTYPE_F32);
    tide_tensor * second = run_more("rand", 3, 0, 1, TIDE_DTYPE_F32);
    tide_tensor * big = run_more("rand", 5000, 0, 1, TIDE_DTYPE_F32);
    CHECK(first && second && big);
    if (second && big) {
        const float * x = tide_tensor_data(second);
        for (uint64_t i = 0; i < 3; i++) CHECK(x[i] == (float)(word(seed, 12 + i, 0) >> 8) * 0x1p-24f);
        const float * y = tide_tensor_data(big);
        int bad = 0;
        for (uint64_t i = 0; i < 5000; i++) bad += y[i] != (float)(word(seed, 16 + i, 0) >> 8) * 0x1p-24f;
        CHECK(bad == 0);
    }
    tide_tensor_release(first);
    tide_tensor_release(second);
    tide_tensor_release(big);
}

/* The rules the registry may adopt for randint and randperm (validation at enqueue). */
tide_status tide_shape_randint(tide_opcall * c, tide_shape_out * o);
tide_status tide_shape_randperm(tide_opcall * c, tide_shape_out * o);

static void test_shape_rules(void) {
    tide_opcall c;
    tide_shape_out o;
    memset(&c, 0, sizeof c);
    c.op = tide_op_find("randint");
    c.p.dtype = -1;
    c.p.n_ints = 2;
    c.p.ints[0] = 2;
    c.p.ints[1] = 3;
    c.p.scalars[0] = 4;
    c.p.scalars[1] = 9;
    CHECK(tide_shape_randint(&c, &o) == TIDE_OK && o.ndim[0] == 2 && o.sizes[0][1] == 3);
    c.p.scalars[1] = 4;
    CHECK(tide_shape_randint(&c, &o) == TIDE_E_VALUE);
    CHECK_MSG("randint: low must be less than high, got low = 4 and high = 4");
    c.p.scalars[1] = 300;
    c.p.dtype = TIDE_DTYPE_U8;
    CHECK(tide_shape_randint(&c, &o) == TIDE_E_VALUE);
    CHECK_MSG("randint: [4, 300) is outside what dtype uint8 holds exactly, [0, 256]");
    c.op = tide_op_find("randperm");
    c.p.n_ints = 1;
    c.p.ints[0] = 256;
    c.p.flags = TIDE_PARAMF_ONE_BASED;
    CHECK(tide_shape_randperm(&c, &o) == TIDE_E_VALUE);
    CHECK_MSG("randperm: n = 256 is too large for dtype uint8 (at most 255)");
    c.p.flags = 0;
    CHECK(tide_shape_randperm(&c, &o) == TIDE_OK && o.ndim[0] == 1 && o.sizes[0][0] == 256);
    c.p.ints[0] = -1;
    CHECK(tide_shape_randperm(&c, &o) == TIDE_E_SHAPE);
}

int main(void) {
    test_known_answers();
    test_ops_follow_the_stream();
    test_shape_rules();
    if (check_failures) fprintf(stderr, "test_philox: %d failures\n", check_failures);
    return check_failures != 0;
}
