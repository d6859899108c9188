/* test_nn.c - the convolution and pooling ops from C, on sizes that split
 * their work across the pool (the weight gradient's per-thread partial sums
 * included), against naive loops in double, from two threads at once: what
 * ThreadSanitizer runs (the busted specs cover the parameters and messages). */
#include "tide.h"
#include "check.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { N = 8, C = 8, HH = 16, WW = 16, O = 16, K = 3, PAD = 1 };

static const tide_device CPU = {TIDE_DEVICE_CPU, -1};

static tide_tensor * filled(int32_t ndim, const int64_t * sizes, uint32_t seed) {
    tide_tensor * t = tide_tensor_empty(ndim, sizes, TIDE_DTYPE_F64, CPU);
    double *      p = tide_tensor_data(t);
    for (int64_t i = 0; i < t->nelem; i++) p[i] = (double)((seed = seed * 1103515245u + 12345u) >> 8) / 16777216.0 - 0.5;
    return t;
}

static tide_tensor * run(const char * op, tide_tensor ** in, int32_t n_in, const int64_t * ints, int32_t n_ints,
                         tide_tensor ** second) {
    tide_op_params p;
    memset(&p, 0, sizeof p);
    p.dtype  = -1;
    p.n_ints = n_ints;
    memcpy(p.ints, ints, (size_t)n_ints * sizeof(int64_t));
    tide_tensor * out[2] = {NULL, NULL};
    if (tide_op_call(tide_op_find(op), in, n_in, &p, out, NULL) != TIDE_OK) {
        fprintf(stderr, "%s: %s\n", op, tide_last_error());
        return NULL;
    }
    if (tide_tensor_wait(out[0]) != TIDE_OK) fprintf(stderr, "%s: %s\n", op, tide_last_error());
    if (second)
        *second = out[1];
    else
        tide_tensor_release(out[1]);
    return out[0];
}

static double max_diff(tide_tensor * t, const double * ref) {
    const double * p = tide_tensor_data(t);
    double         m = 0;
    for (int64_t i = 0; i < t->nelem; i++) m = fmax(m, fabs(p[i] - ref[i]));
    return m;
}

/* One round of conv2d, its two backward ops and max_pool2d with its backward,
 * each checked against plain loops. Returns the failures it saw. */
static void * round_trip(void * arg) {
    uint32_t seed = (uint32_t)(uintptr_t)arg;
    int64_t xs[4] = {N, C, HH, WW}, ws[4] = {O, C, K, K}, ys[4] = {N, O, HH, WW}, bs[1] = {O};
    tide_tensor * x = filled(4, xs, seed), * w = filled(4, ws, seed + 1), * b = filled(1, bs, seed + 2);
    tide_tensor * gy = filled(4, ys, seed + 3);
    const double * xp = tide_tensor_data(x), * wp = tide_tensor_data(w), * bp = tide_tensor_data(b);
    const double * gp = tide_tensor_data(gy);
    double * y_ref = malloc(sizeof(double) * N * O * HH * WW), * gx_ref = calloc(N * C * HH * WW, sizeof(double));
    double * gw_ref = calloc(O * C * K * K, sizeof(double));
    if (!y_ref || !gx_ref || !gw_ref) {
        CHECK(!"out of memory for the references");
        return NULL;
    }
    for (int i = 0; i < N * O * HH * WW; i++) y_ref[i] = bp[i / (HH * WW) % O];
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++)
            for (int oy = 0; oy < HH; oy++)
                for (int ox = 0; ox < WW; ox++)
                    for (int c = 0; c < C; c++)
                        for (int ki = 0; ki < K; ki++)
                            for (int kj = 0; kj < K; kj++) {
                                int iy = oy - PAD + ki, ix = ox - PAD + kj;
                                if (iy < 0 || iy >= HH || ix < 0 || ix >= WW) continue;
                                int yi = ((n * O + o) * HH + oy) * WW + ox, xi = ((n * C + c) * HH + iy) * WW + ix;
                                int wi = ((o * C + c) * K + ki) * K + kj;
                                y_ref[yi] += xp[xi] * wp[wi];
                                gx_ref[xi] += wp[wi] * gp[yi];
                                gw_ref[wi] += xp[xi] * gp[yi];
                            }
    int64_t conv[11] = {1, 1, PAD, PAD, 1, 1, 1, N, C, HH, WW};
    tide_tensor * in[3] = {x, w, b};
    tide_tensor * y = run("conv2d", in, 3, conv, 7, NULL);
    CHECK(y && max_diff(y, y_ref) < 1e-12);
    in[0] = gy, in[1] = w;
    tide_tensor * gx = run("conv2d_backward_input", in, 2, conv, 11, NULL);
    CHECK(gx && max_diff(gx, gx_ref) < 1e-12);
    int64_t convw[11] = {1, 1, PAD, PAD, 1, 1, 1, O, C, K, K};
    in[0] = gy, in[1] = x;
    tide_tensor * gw = run("conv2d_backward_weight", in, 2, convw, 11, NULL);
    CHECK(gw && max_diff(gw, gw_ref) < 1e-11);

    /* 2x2 max pooling of the convolution's result, and back */
    int64_t pool[9] = {2, 2, 2, 2, 0, 0, 1, 1, 0}, sizes[4] = {N, O, HH, WW};
    tide_tensor * idx = NULL;
    in[0] = y;
    tide_tensor * m = run("max_pool2d", in, 1, pool, 9, &idx);
    CHECK(m && idx);
    if (m && idx) {
        const double * yp = tide_tensor_data(y), * mp = tide_tensor_data(m);
        const int64_t * ip = tide_tensor_data(idx);
        int bad = 0;
        for (int64_t i = 0; i < m->nelem; i++) {
            int64_t plane = i / (HH / 2 * WW / 2);
            bad += ip[i] < 0 || ip[i] >= HH * WW || yp[plane * HH * WW + ip[i]] != mp[i];
        }
        CHECK(bad == 0);
        in[0] = m, in[1] = idx;
        tide_tensor * gm = run("max_pool2d_backward", in, 2, sizes, 4, NULL);
        const double * gmp = gm ? tide_tensor_data(gm) : NULL;
        double sum = 0, want = 0;
        for (int64_t i = 0; gmp && i < gm->nelem; i++) sum += gmp[i];
        for (int64_t i = 0; i < m->nelem; i++) want += mp[i];
        CHECK(gm && fabs(sum - want) < 1e-9);
        tide_tensor_release(gm);
    }
    tide_tensor * rel[] = {x, w, b, gy, y, gx, gw, m, idx};
    tide_tensor_release_many(rel, 9);
    free(y_ref), free(gx_ref), free(gw_ref);
    return NULL;
}

int main(void) {
    tide_set_num_threads(2);   /* the pool splits the work even on one core */
    round_trip((void *)(uintptr_t)1);
    /* two threads enqueueing at once: one of them gets the pool, the other runs inline */
    pthread_t th[2];
    for (uintptr_t i = 0; i < 2; i++) pthread_create(&th[i], NULL, round_trip, (void *)(10 + i));
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK(tide_sync() == TIDE_OK);
    if (check_failures) fprintf(stderr, "%d checks failed\n", check_failures);
    return check_failures != 0;
}
