/* test_graph.c - capturing and replaying from the C API alone: a recorded
 * expression replayed on new arguments, in-place updates of a tensor bound by
 * reference, a value read refused during capture, argument checks at replay,
 * queued replays of one graph on different arguments (each bound to its own),
 * independent ops of one wave run at once across the pool, replays from
 * two threads at once (each with its own graph), views of one tensor
 * that differ in their shape alone kept apart by the passes, and a graph
 * released while its node-by-node replay's fused tasks wait. */
#include "tide.h"
#include "check.h"
#include "core/internal.h"
#include "gate.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

static tide_tensor * op(const char * name, tide_tensor * a, tide_tensor * b, tide_tensor * dst) {
    tide_tensor * in[2] = {a, b}, * out[4] = {NULL};
    if (tide_op_call(tide_op_find(name), in, b ? 2 : 1, NULL, out, dst) != TIDE_OK) return NULL;
    return out[0];
}

static tide_tensor * vec(double a, double b) {
    double  v[2] = {a, b};
    int64_t n    = 2;
    return tide_tensor_from_doubles(v, 1, &n, TIDE_DTYPE_F32);
}

static double at(tide_tensor * t, int64_t i) {
    double v = NAN;
    CHECK(tide_tensor_get(t, i, &v) == TIDE_OK);
    return v;
}

/* y = exp(x) * w; w += x (in place); returns y */
static tide_graph * capture(tide_tensor * x, tide_tensor * w) {
    tide_graph * g = tide_graph_capture_begin();
    CHECK(g != NULL);
    CHECK(tide_graph_capture_begin() == NULL);   /* one capture per thread */
    CHECK(tide_graph_add_arg(g, x) == TIDE_OK);
    tide_tensor * e = op("exp", x, NULL, NULL), * y = op("mul", e, w, NULL);
    tide_tensor * r = op("add", w, x, w);
    CHECK(tide_graph_add_output(g, y) == TIDE_OK);
    tide_tensor_release(e), tide_tensor_release(r);
    char leaks[256];
    CHECK(tide_graph_capture_end(g, leaks, sizeof leaks) == TIDE_OK);
    CHECK(leaks[0] == 0);   /* y is still held here, but it is an output */
    tide_tensor_release(y);
    return g;
}

static void * replay_thread(void * arg) {
    tide_tensor * w = vec(1, 1), * x = vec(0, 0);
    tide_graph *  g = capture(x, w);
    for (int i = 0; i < 50; i++) {
        tide_tensor * out[1] = {NULL};
        CHECK(tide_graph_replay(g, &x, 1, out) == TIDE_OK);
        tide_tensor_release(out[0]);
    }
    *(double *)arg = at(w, 0);
    tide_graph_release(g);
    tide_tensor_release(w), tide_tensor_release(x);
    return NULL;
}

/* Twenty replays queued back to back (large enough not to run at once), each
 * on its own argument, each result checked after all were queued. */
static void queued_replays(void) {
    enum { N = 1 << 18, R = 20 };
    int64_t       n = N;
    tide_tensor * w = tide_tensor_full(1, &n, 0.5, TIDE_DTYPE_F32), * x = tide_tensor_zeros(1, &n, TIDE_DTYPE_F32);
    tide_graph *  g = tide_graph_capture_begin();
    CHECK(tide_graph_add_arg(g, x) == TIDE_OK);
    tide_tensor * e = op("add", x, w, NULL), * y = op("mul", e, e, NULL);
    CHECK(tide_graph_add_output(g, y) == TIDE_OK);
    tide_tensor_release(e), tide_tensor_release(y);
    CHECK(tide_graph_capture_end(g, NULL, 0) == TIDE_OK);
    tide_tensor * xs[R], * ys[R];
    for (int r = 0; r < R; r++) {
        xs[r] = tide_tensor_full(1, &n, r, TIDE_DTYPE_F32);
        CHECK(tide_graph_replay(g, &xs[r], 1, &ys[r]) == TIDE_OK);
    }
    CHECK(strstr(tide_graph_describe(g), "replayed as one task of 2 steps") != NULL);
    tide_graph_release(g);   /* queued replays keep what they need */
    for (int r = 0; r < R; r++) {
        CHECK(fabs(at(ys[r], 0) - (r + 0.5) * (r + 0.5)) < 1e-3 && fabs(at(ys[r], N - 1) - (r + 0.5) * (r + 0.5)) < 1e-3);
        tide_tensor_release(xs[r]), tide_tensor_release(ys[r]);
    }
    tide_tensor_release(w), tide_tensor_release(x);
}

/* Eight constants and eight products of the argument by them (two waves of
 * eight independent small ops, each run at once across the pool), then the
 * sum of the products, replayed many times. */
static void parallel_wave(void) {
    enum { N = 1000 };
    int64_t       n = N;
    tide_tensor * x = tide_tensor_full(1, &n, 1.0, TIDE_DTYPE_F32);
    tide_graph *  g = tide_graph_capture_begin();
    CHECK(tide_graph_add_arg(g, x) == TIDE_OK);
    tide_tensor * parts[8], * acc;
    for (int i = 0; i < 8; i++) {
        tide_tensor * c = tide_tensor_full(0, NULL, i + 1, TIDE_DTYPE_F32);
        parts[i] = op("mul", x, c, NULL);
        tide_tensor_release(c);
    }
    acc = op("add", parts[0], parts[1], NULL);
    for (int i = 2; i < 8; i++) {
        tide_tensor * next = op("add", acc, parts[i], NULL);
        tide_tensor_release(acc);
        acc = next;
    }
    CHECK(tide_graph_add_output(g, acc) == TIDE_OK);
    for (int i = 0; i < 8; i++) tide_tensor_release(parts[i]);
    tide_tensor_release(acc);
    CHECK(tide_graph_capture_end(g, NULL, 0) == TIDE_OK);
    for (int r = 0; r < 50; r++) {
        tide_tensor * xr = tide_tensor_full(1, &n, r, TIDE_DTYPE_F32), * y = NULL;
        CHECK(tide_graph_replay(g, &xr, 1, &y) == TIDE_OK);
        CHECK(fabs(at(y, N - 1) - 36.0 * r) < 1e-3);
        tide_tensor_release(xr), tide_tensor_release(y);
    }
    CHECK(strstr(tide_graph_describe(g), "23 steps in 9 waves") != NULL);   /* 8 fills, 8 products, 7 sums */
    tide_graph_release(g);
    tide_tensor_release(x);
}

/* Reshapes and expands keep their shape in their result, not in their params:
 * CSE merges two of one tensor only where the shapes agree too. */
static void views_apart(void) {
    double        d[6] = {1, 2, 3, 4, 5, 6};
    int64_t       six = 6, s23[2] = {2, 3}, s32[2] = {3, 2}, s61[2] = {6, 1}, s64[2] = {6, 4};
    tide_tensor * x = tide_tensor_from_doubles(d, 1, &six, TIDE_DTYPE_F32);
    tide_graph *  g = tide_graph_capture_begin();
    CHECK(g != NULL && tide_graph_add_arg(g, x) == TIDE_OK);
    tide_tensor * a = tide_tensor_view(x, 2, s23), * b = tide_tensor_view(x, 2, s32), * c = tide_tensor_view(x, 2, s23);
    tide_tensor * col = tide_tensor_view(x, 2, s61), * e = tide_tensor_expand(col, 2, s64);
    tide_tensor * f = tide_tensor_expand(col, 2, s61);
    tide_tensor * r[5] = {op("neg", a, NULL, NULL), op("neg", b, NULL, NULL), op("exp", c, NULL, NULL),
                          op("neg", e, NULL, NULL), op("neg", f, NULL, NULL)};
    for (int i = 0; i < 5; i++) CHECK(tide_graph_add_output(g, r[i]) == TIDE_OK);
    CHECK(tide_graph_capture_end(g, NULL, 0) == TIDE_OK);
    CHECK(tide_graph_optimize(g, TIDE_GRAPH_PASS_ALL, NULL) == TIDE_OK);
    const char * text = tide_graph_describe(g);
    int views = 0;
    for (const char * p = text; (p = strstr(p, "= view(")) != NULL; p++) views++;
    CHECK(views == 3);   /* [2,3] (c is a again), [3,2], [6,1] */
    tide_tensor * out[5] = {NULL};
    CHECK(tide_graph_replay(g, &x, 1, out) == TIDE_OK);
    const int64_t * want[5] = {s23, s32, s23, s64, s61};
    for (int i = 0; i < 5; i++) {
        CHECK(out[i] && out[i]->ndim == 2 && !memcmp(out[i]->sizes, want[i], sizeof s23));
        CHECK(out[i] && fabs(at(out[i], out[i]->nelem - 1) - (i == 2 ? exp(6.0) : -6)) < 1e-3);
        tide_tensor_release(out[i]), tide_tensor_release(r[i]);
    }
    tide_graph_release(g);
    tide_tensor_release(a), tide_tensor_release(b), tide_tensor_release(c);
    tide_tensor_release(col), tide_tensor_release(e), tide_tensor_release(f), tide_tensor_release(x);
}

/* A replay node by node (here: a transposed argument) queues tasks that read
 * the graph's fused chains; a graph released while they wait must stay until
 * they ran (under ASan, a use after free before ddf291b). The argument's
 * storage is held by a gated task, so the fused task is pending when the
 * graph is released. */
static void released_while_queued(void) {
    double        d[6] = {0.1, -0.2, 0.3, 0.4, -0.5, 0.6};
    int64_t       s23[2] = {2, 3};
    tide_tensor * x = tide_tensor_from_doubles(d, 2, s23, TIDE_DTYPE_F32);
    tide_tensor * two = tide_tensor_full(0, NULL, 2, TIDE_DTYPE_F32), * one = tide_tensor_full(0, NULL, 1, TIDE_DTYPE_F32);
    tide_graph *  g = tide_graph_capture_begin();
    CHECK(g != NULL && tide_graph_add_arg(g, x) == TIDE_OK);
    tide_tensor * a = op("mul", x, two, NULL), * b = op("tanh", a, NULL, NULL), * y = op("add", b, one, NULL);
    CHECK(tide_graph_add_output(g, y) == TIDE_OK);
    tide_tensor_release(a), tide_tensor_release(b), tide_tensor_release(y);
    CHECK(tide_graph_capture_end(g, NULL, 0) == TIDE_OK);
    CHECK(tide_graph_optimize(g, TIDE_GRAPH_PASS_ALL, NULL) == TIDE_OK);
    CHECK(strstr(tide_graph_describe(g), "fused") != NULL);
    int64_t       s32[2] = {3, 2};
    tide_tensor * base = tide_tensor_from_doubles(d, 2, s32, TIDE_DTYPE_F32);
    tide_tensor * xt = tide_tensor_transpose(base, 0, 1), * out = NULL;   /* [2,3], not contiguous */
    push_gated(base);
    CHECK(tide_graph_replay(g, &xt, 1, &out) == TIDE_OK);
    tide_graph_release(g);
    open_gate();
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) CHECK(fabs(at(out, i * 3 + j) - (tanh(2 * (float)d[j * 2 + i]) + 1)) < 1e-6);
    tide_tensor_release(out), tide_tensor_release(xt), tide_tensor_release(base);
    tide_tensor_release(x), tide_tensor_release(two), tide_tensor_release(one);
}

int main(void) {
    released_while_queued();
    views_apart();
    queued_replays();
    parallel_wave();
    tide_tensor * w = vec(2, 3), * x = vec(0, 1);
    tide_graph *  g = capture(x, w);   /* w becomes (2, 4) */
    CHECK(tide_graph_num_args(g) == 1 && tide_graph_num_outputs(g) == 1 && tide_graph_num_nodes(g) >= 3);
    CHECK(fabs(at(w, 1) - 4) < 1e-6);
    tide_tensor * x2 = vec(1, 0), * out[1] = {NULL};
    CHECK(tide_graph_replay(g, &x2, 1, out) == TIDE_OK);
    CHECK(fabs(at(out[0], 0) - 2 * exp(1.0)) < 1e-5 && fabs(at(out[0], 1) - 4) < 1e-6);
    CHECK(fabs(at(w, 0) - 3) < 1e-6 && fabs(at(w, 1) - 4) < 1e-6);   /* updated in place, by reference */
    tide_tensor_release(out[0]);
    /* a replay checks its arguments */
    int64_t three = 3;
    tide_tensor * bad = tide_tensor_zeros(1, &three, TIDE_DTYPE_F32);
    CHECK(tide_graph_replay(g, &bad, 1, out) == TIDE_E_SHAPE);
    CHECK(strstr(tide_last_error(), "argument 1 is float32 [3] but the graph was captured for float32 [2]") != NULL);
    CHECK(tide_graph_replay(g, NULL, 0, out) == TIDE_E_VALUE);
    CHECK(strstr(tide_graph_describe(g), "= exp(") != NULL);
    tide_tensor_release(bad);
    tide_graph_release(g);
    /* reading a value during capture fails the read and the capture */
    tide_graph * h = tide_graph_capture_begin();
    double v;
    CHECK(tide_tensor_get(x, 0, &v) == TIDE_E_VALUE);
    CHECK(strstr(tide_last_error(), "item() reads a tensor's value while the function is being captured") != NULL);
    CHECK(tide_graph_capture_end(h, NULL, 0) == TIDE_E_VALUE);
    tide_graph_release(h);
    CHECK(tide_tensor_get(x, 0, &v) == TIDE_OK);   /* and only during capture */
    /* two threads capture and replay their own graphs at once */
    pthread_t th[2];
    double    res[2] = {0, 0};
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, replay_thread, &res[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK(res[0] == 1 && res[1] == 1);   /* x = 0: w stays 1 */
    tide_tensor_release(w), tide_tensor_release(x), tide_tensor_release(x2);
    CHECK(tide_sync() == TIDE_OK);
    return check_failures;
}
