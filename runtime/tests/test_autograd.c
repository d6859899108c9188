/* test_autograd.c - training from the C API alone: gradients of a small
 * expression against hand-computed values, a linear regression fitted by
 * gradient descent, node lifetimes (no leak under ASan), and two host threads
 * training their own models at once (run under ThreadSanitizer too). */
#include "tide.h"
#include "check.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

static tide_tensor * op2(const char * name, tide_tensor * a, tide_tensor * b, tide_tensor * dst) {
    tide_tensor * in[2] = {a, b}, * out[4] = {NULL};
    if (tide_op_call(tide_op_find(name), in, b ? 2 : 1, NULL, out, dst) != TIDE_OK) return NULL;
    return out[0];
}

static double value(tide_tensor * t, int64_t i) {
    double v = NAN;
    CHECK(tide_tensor_get(t, i, &v) == TIDE_OK);
    return v;
}

/* y = sum(x * x + 3 x): dy/dx = 2x + 3 */
static void test_gradient(void) {
    double        xs[3] = {1, -2, 0.5};
    int64_t       n     = 3;
    tide_tensor * x     = tide_tensor_from_doubles(xs, 1, &n, TIDE_DTYPE_F32);
    CHECK(tide_tensor_set_requires_grad(x, 1) == TIDE_OK);
    tide_tensor * three = tide_tensor_scalar(3, TIDE_DTYPE_I64);
    tide_tensor * sq = op2("mul", x, x, NULL), * lin = op2("mul", x, three, NULL);
    tide_tensor * s  = op2("add", sq, lin, NULL);
    tide_tensor * y  = op2("sum", s, NULL, NULL);
    CHECK(y && tide_tensor_requires_grad(y));
    CHECK(strcmp(tide_tensor_grad_fn_name(y), "sum") == 0);
    CHECK(tide_autograd_backward(1, &y, NULL, 0) == TIDE_OK);
    tide_tensor * g = tide_tensor_grad(x);
    CHECK(g != NULL);
    if (g) {
        for (int64_t i = 0; i < n; i++) CHECK(fabs(value(g, i) - (2 * xs[i] + 3)) < 1e-6);
        tide_tensor_release(g);
    }
    /* a second backward through the freed graph is refused with a message */
    CHECK(tide_autograd_backward(1, &y, NULL, 0) != TIDE_OK);
    CHECK(strstr(tide_last_error(), "already freed") != NULL);
    tide_tensor_release(y), tide_tensor_release(s), tide_tensor_release(lin), tide_tensor_release(sq);
    tide_tensor_release(three), tide_tensor_release(x);
}

/* create_graph through a strided slice: g = d sum(x[::2]^3)/dx = 3x^2 at even places
 * has a history, and d sum(g)/dx = 6x there (the slice's gradient is recorded too). */
static void test_second_derivative(void) {
    double        xs[6] = {1, 2, 3, 4, 5, 6};
    int64_t       n     = 6;
    tide_tensor * x     = tide_tensor_from_doubles(xs, 1, &n, TIDE_DTYPE_F64);
    CHECK(tide_tensor_set_requires_grad(x, 1) == TIDE_OK);
    tide_tensor * v  = tide_tensor_slice(x, 0, 0, 6, 2);
    tide_tensor * v2 = op2("mul", v, v, NULL), * v3 = op2("mul", v2, v, NULL), * y = op2("sum", v3, NULL, NULL);
    tide_tensor * g  = NULL;
    /* g's history reads the forward's nodes: their saved tensors must be kept */
    int32_t flags = TIDE_AUTOGRAD_CREATE_GRAPH | TIDE_AUTOGRAD_RETAIN_GRAPH;
    CHECK(tide_autograd_grad(1, &y, NULL, 1, &x, &g, flags) == TIDE_OK);
    CHECK(g && tide_tensor_requires_grad(g));
    tide_tensor * s = g ? op2("sum", g, NULL, NULL) : NULL;
    CHECK(s && tide_autograd_backward(1, &s, NULL, 0) == TIDE_OK);
    tide_tensor * gg = tide_tensor_grad(x);
    CHECK(gg && !tide_tensor_requires_grad(gg));
    for (int64_t i = 0; i < n && g && gg; i++) {
        CHECK(value(g, i) == (i % 2 ? 0 : 3 * xs[i] * xs[i]));
        CHECK(value(gg, i) == (i % 2 ? 0 : 6 * xs[i]));
    }
    tide_tensor_release(gg), tide_tensor_release(s), tide_tensor_release(g), tide_tensor_release(y);
    tide_tensor_release(v3), tide_tensor_release(v2), tide_tensor_release(v), tide_tensor_release(x);
}

/* retain_grad and hooks from C: y = sum((2x)^2); a hook on x doubles its gradient
 * (8x -> 16x), h = 2x retains its own (4x = 2h); tide_autograd_backward refuses a
 * due hook; a hook's id is queued as dead once its tensor is gone. */
static void test_hooks(void) {
    double        xs[2] = {1, 3};
    int64_t       n     = 2;
    tide_tensor * x     = tide_tensor_from_doubles(xs, 1, &n, TIDE_DTYPE_F64);
    tide_tensor * two   = tide_tensor_scalar(2, TIDE_DTYPE_I64);
    CHECK(tide_tensor_set_requires_grad(x, 1) == TIDE_OK);
    tide_tensor * h = op2("mul", x, two, NULL);
    CHECK(tide_tensor_retain_grad(h) == TIDE_OK && (h->flags & TIDE_TENSOR_RETAINS_GRAD));
    tide_tensor * sq = op2("mul", h, h, NULL), * y = op2("sum", sq, NULL, NULL);
    int64_t       id = 0, seen = 0, dead[4];
    CHECK(tide_tensor_add_hook(x, &id) == TIDE_OK && id > 0);
    CHECK(tide_autograd_backward(1, &y, NULL, TIDE_AUTOGRAD_RETAIN_GRAPH) != TIDE_OK);   /* a hook is due */
    CHECK(strstr(tide_last_error(), "gradient hook") != NULL);
    tide_autograd_walk * w = NULL;
    CHECK(tide_autograd_walk_begin(&w, 1, &y, NULL, 0, NULL, 0) == TIDE_OK);
    for (;;) {
        int64_t       hook = 0;
        tide_tensor * g    = NULL;
        if (tide_autograd_walk_next(w, &hook, &g) != TIDE_OK || !hook) break;
        seen = hook;
        tide_tensor * g2 = op2("mul", g, two, NULL);
        CHECK(tide_autograd_walk_replace(w, g2) == TIDE_OK);
        tide_tensor_release(g2);
    }
    CHECK(tide_autograd_walk_end(w, NULL) == TIDE_OK);
    CHECK(seen == id);
    tide_tensor * gx = tide_tensor_grad(x), * gh = tide_tensor_grad(h);
    for (int64_t i = 0; i < n && gx && gh; i++) {
        CHECK(value(gx, i) == 16 * xs[i]);
        CHECK(value(gh, i) == 2 * 4 * xs[i]);   /* twice: the refused walk had passed h's node */
    }
    CHECK(gx && gh);
    tide_tensor_release(gx), tide_tensor_release(gh);
    tide_tensor_release(y), tide_tensor_release(sq), tide_tensor_release(h);
    tide_tensor_release(two), tide_tensor_release(x);
    CHECK(tide_autograd_hooks_dead(dead, 4) == 1 && dead[0] == id);
}

/* A custom function from C: the caller computes y = x^2 itself (no node), records
 * it with tide_autograd_custom, and gives 2 x g when the walk stops at it. z =
 * sum(3 y): dz/dx = 6x. tide_autograd_backward refuses the due function by name;
 * a wrong gradient shape is refused; the id is dead once the outputs are gone. */
static void test_custom(void) {
    double        xs[3] = {1, -2, 0.5};
    int64_t       n = 3, id = 0, dead[4];
    tide_tensor * x = tide_tensor_from_doubles(xs, 1, &n, TIDE_DTYPE_F64);
    tide_tensor * three = tide_tensor_scalar(3, TIDE_DTYPE_I64), * two = tide_tensor_scalar(2, TIDE_DTYPE_I64);
    CHECK(tide_tensor_set_requires_grad(x, 1) == TIDE_OK);
    tide_autograd_set_enabled(0);
    tide_tensor * raw = op2("mul", x, x, NULL);
    tide_autograd_set_enabled(1);
    CHECK(raw && !tide_tensor_requires_grad(raw));
    tide_tensor * y = NULL;
    CHECK(tide_autograd_custom("Square", 1, &x, 1, &raw, &y, &id) == TIDE_OK && y && id > 0);
    CHECK(y && tide_tensor_requires_grad(y) && strcmp(tide_tensor_grad_fn_name(y), "Square") == 0);
    tide_tensor * y3 = op2("mul", y, three, NULL), * z = op2("sum", y3, NULL, NULL);
    CHECK(tide_autograd_backward(1, &z, NULL, TIDE_AUTOGRAD_RETAIN_GRAPH) != TIDE_OK);
    CHECK(strstr(tide_last_error(), "custom function 'Square'") != NULL);
    for (int pass = 0; pass < 2; pass++) {   /* a wrong gradient first, then the right one */
        tide_autograd_walk * w = NULL;
        int32_t              stops = 0;
        CHECK(tide_autograd_walk_begin(&w, 1, &z, NULL, 0, NULL, pass ? 0 : TIDE_AUTOGRAD_RETAIN_GRAPH) == TIDE_OK);
        for (;;) {
            int64_t       due = 0;
            tide_tensor * g = NULL, * gy = NULL;
            if (tide_autograd_walk_next(w, &due, &g) != TIDE_OK || !due) break;
            stops++;
            CHECK(due == id && g == NULL);
            CHECK(tide_autograd_walk_custom_grads(w, &gy) == TIDE_OK && gy);
            tide_tensor * t = op2("mul", gy, x, NULL), * gx = pass ? op2("mul", t, two, NULL) : op2("sum", t, NULL, NULL);
            tide_status st = tide_autograd_walk_custom_result(w, 1, &gx);
            CHECK(pass ? st == TIDE_OK : st == TIDE_E_SHAPE && strstr(tide_last_error(), "has shape []") != NULL);
            tide_tensor_release(gx), tide_tensor_release(t), tide_tensor_release(gy);
            if (st != TIDE_OK) break;
        }
        CHECK(stops == 1);
        CHECK((tide_autograd_walk_end(w, NULL) == TIDE_OK) == (pass == 1));
    }
    tide_tensor * gx = tide_tensor_grad(x);
    for (int64_t i = 0; i < n && gx; i++) CHECK(value(gx, i) == 6 * xs[i]);
    CHECK(gx != NULL);
    tide_tensor_release(gx);
    tide_tensor_release(z), tide_tensor_release(y3), tide_tensor_release(y), tide_tensor_release(raw);
    CHECK(tide_autograd_hooks_dead(dead, 4) == 1 && dead[0] == id);
    tide_tensor_release(three), tide_tensor_release(two), tide_tensor_release(x);
}

/* Autocast from C: a product of float32 tensors runs in bfloat16 while it is on
 * for the CPU, and backward (inside the region too) gives float32 gradients. */
static void test_autocast(void) {
    double        xs[6] = {1, 2, 3, 4, 5, 6};
    int64_t       sz[2] = {2, 3}, wsz[2] = {3, 2};
    tide_tensor * x = tide_tensor_from_doubles(xs, 2, sz, TIDE_DTYPE_F32);
    tide_tensor * w = tide_tensor_from_doubles(xs, 2, wsz, TIDE_DTYPE_F32);
    CHECK(tide_tensor_set_requires_grad(w, 1) == TIDE_OK);
    CHECK(tide_autocast_set(TIDE_DEVICE_CPU, TIDE_DTYPE_F32) == -2 && strstr(tide_last_error(), "float16") != NULL);
    CHECK(tide_autocast_set(TIDE_DEVICE_CPU, TIDE_DTYPE_BF16) == -1);
    CHECK(tide_autocast_get(TIDE_DEVICE_CPU) == TIDE_DTYPE_BF16);
    tide_tensor * y = op2("matmul", x, w, NULL), * s = y ? op2("sum", y, NULL, NULL) : NULL;
    CHECK(y && y->dtype_id == TIDE_DTYPE_BF16);
    CHECK(s && s->dtype_id == TIDE_DTYPE_F32);   /* sums take float32 */
    CHECK(s && tide_autograd_backward(1, &s, NULL, 0) == TIDE_OK);
    CHECK(tide_autocast_set(TIDE_DEVICE_CPU, -1) == TIDE_DTYPE_BF16);
    tide_tensor * g = tide_tensor_grad(w);
    CHECK(g && g->dtype_id == TIDE_DTYPE_F32);
    /* d sum(xw)/dw[i][j] = sum over rows of x[.][i]: 5, 7, 9 (exact in bfloat16) */
    const double want[6] = {5, 5, 7, 7, 9, 9};
    for (int64_t i = 0; g && i < 6; i++) CHECK(value(g, i) == want[i]);
    tide_tensor * z = op2("matmul", x, w, NULL);
    CHECK(z && z->dtype_id == TIDE_DTYPE_F32);
    tide_tensor_release(z), tide_tensor_release(g), tide_tensor_release(s), tide_tensor_release(y);
    tide_tensor_release(w), tide_tensor_release(x);
}

/* Fits w in y = X w by gradient descent; returns the final loss. */
static double fit(int steps) {
    enum { N = 64, D = 4 };
    double  xs[N * D], ys[N], w_true[D] = {1, -2, 0.5, 3};
    int64_t xsz[2] = {N, D}, ysz[2] = {N, 1}, wsz[2] = {D, 1};
    for (int i = 0; i < N; i++) {
        ys[i] = 0;
        for (int j = 0; j < D; j++) {
            xs[i * D + j] = sin(i * 0.37 * (j + 1) + j);
            ys[i] += xs[i * D + j] * w_true[j];
        }
    }
    tide_tensor * X = tide_tensor_from_doubles(xs, 2, xsz, TIDE_DTYPE_F64);
    tide_tensor * Y = tide_tensor_from_doubles(ys, 2, ysz, TIDE_DTYPE_F64);
    tide_tensor * w = tide_tensor_zeros(2, wsz, TIDE_DTYPE_F64);
    tide_tensor * lr = tide_tensor_scalar(0.5, TIDE_DTYPE_F64);
    tide_tensor_set_requires_grad(w, 1);
    double loss_v = INFINITY;
    for (int step = 0; step < steps; step++) {
        tide_tensor * pred = op2("matmul", X, w, NULL);
        tide_tensor * err  = op2("sub", pred, Y, NULL);
        tide_tensor * sq   = op2("mul", err, err, NULL);
        tide_tensor * loss = op2("mean", sq, NULL, NULL);
        CHECK(tide_autograd_backward(1, &loss, NULL, 0) == TIDE_OK);
        if (step == steps - 1) loss_v = value(loss, 0);
        tide_tensor * g = tide_tensor_grad(w);
        tide_autograd_set_enabled(0);
        tide_tensor * upd = op2("mul", g, lr, NULL);
        tide_tensor * res = op2("sub", w, upd, w);   /* in place, under no-grad */
        tide_autograd_set_enabled(1);
        CHECK(res == w);
        tide_tensor_set_grad(w, NULL);
        tide_tensor_release(res), tide_tensor_release(upd), tide_tensor_release(g);
        tide_tensor_release(loss), tide_tensor_release(sq), tide_tensor_release(err), tide_tensor_release(pred);
    }
    for (int j = 0; j < D; j++) CHECK(fabs(value(w, j) - w_true[j]) < 1e-3);
    tide_tensor_release(X), tide_tensor_release(Y), tide_tensor_release(w), tide_tensor_release(lr);
    return loss_v;
}

static void * train_thread(void * arg) {
    *(double *)arg = fit(300);
    return NULL;
}

int main(void) {
    test_gradient();
    test_second_derivative();
    test_hooks();
    test_custom();
    test_autocast();
    CHECK(fit(300) < 1e-6);
    pthread_t th[2];
    double    losses[2] = {1, 1};
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, train_thread, &losses[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK(losses[0] < 1e-6 && losses[1] < 1e-6);
    CHECK(tide_sync() == TIDE_OK);
    return check_failures;
}
