/* test_cuda_jit.c - captured graphs replayed on a CUDA device, with the fake
 * device of fake_device.h as the process's backend (its kernels are the CPU
 * kernels, run on the device's memory, so a replay's numbers must equal the
 * same step run eagerly on the CPU): a training step (forward, backward and
 * an in-place update) replays as one task that launches every step on the
 * device's stream, keeps device memory flat, and what a step's work reports
 * on the device (an index out of range) comes back as the replay's error,
 * naming the op and where it was captured; random ops draw what eager ones
 * would; chains of elementwise ops run as one kernel that libtide writes
 * and the backend compiles at run time. */
#include "tide.h"
#include "check.h"
#include "core/internal.h"
#include "engine/cuda_loader.h"
#include "fake_device.h"

#include <math.h>

static const tide_device CPU = {TIDE_DEVICE_CPU, -1}, CUDA0 = {TIDE_DEVICE_CUDA, 0};

static tide_tensor * call(const char * name, tide_tensor * a, tide_tensor * b, const tide_op_params * p,
                          tide_tensor * dst) {
    tide_tensor * in[2] = {a, b}, * out[4] = {NULL};
    if (tide_op_call(tide_op_find(name), in, b ? 2 : 1, p, out, dst) != TIDE_OK) return NULL;
    return out[0];
}

static tide_tensor * op(const char * name, tide_tensor * a, tide_tensor * b) { return call(name, a, b, NULL, NULL); }

/* rows x cols (cols 0: a vector of rows) of (i * 7 + shift) % 11 / 4 - 1, on dev */
static tide_tensor * filled(int64_t rows, int64_t cols, int shift, tide_device dev) {
    double  v[64];
    int64_t sizes[2] = {rows, cols};
    for (int64_t i = 0; i < rows * (cols ? cols : 1); i++) v[i] = (double)((i * 7 + shift) % 11) / 4 - 1;
    tide_tensor * h = tide_tensor_from_doubles(v, cols ? 2 : 1, cols ? sizes : &rows, TIDE_DTYPE_F32);
    if (dev.type == TIDE_DEVICE_CPU) return h;
    tide_tensor * d = tide_tensor_to(h, -1, dev, 0);
    tide_tensor_release(h);
    return d;
}

static double at(tide_tensor * t, int64_t i) {
    double v = NAN;
    CHECK(tide_tensor_get(t, i, &v) == TIDE_OK);
    return v;
}

static int64_t device_in_use(void) {
    tide_devmem_stats st;
    return tide_cuda_memory_stats(0, &st) == TIDE_OK ? st.bytes_in_use : -1;
}

/* One step of a one-layer regression: loss = sum((relu(x W + b) - y)^2),
 * backward, then W -= lr dW and b -= lr db in place, gradients cleared. */
static tide_tensor * train_step(tide_tensor * x, tide_tensor * y, tide_tensor * w, tide_tensor * b,
                                tide_tensor * lr) {
    tide_tensor * xw = op("matmul", x, w), * z = op("add", xw, b), * h = op("relu", z, NULL);
    tide_tensor * d = op("sub", h, y), * d2 = op("mul", d, d), * loss = op("sum", d2, NULL);
    CHECK(loss != NULL);
    CHECK(tide_autograd_backward(1, &loss, NULL, 0) == TIDE_OK);
    tide_autograd_set_enabled(0);
    tide_tensor * params[2] = {w, b};
    for (int k = 0; k < 2; k++) {
        tide_tensor * g = tide_tensor_grad(params[k]), * s = op("mul", g, lr);
        tide_tensor * u = call("sub", params[k], s, NULL, params[k]);
        CHECK(u != NULL);
        CHECK(tide_tensor_set_grad(params[k], NULL) == TIDE_OK);
        tide_tensor_release(g), tide_tensor_release(s), tide_tensor_release(u);
    }
    tide_autograd_set_enabled(1);
    tide_tensor * all[] = {xw, z, h, d, d2};
    tide_tensor_release_many(all, 5);
    return loss;
}

static void test_training_step(void) {
    fake.autorun = 1;
    enum { B = 6, I = 4, O = 3, R = 8 };
    tide_tensor * w = filled(I, O, 1, CUDA0), * b = filled(O, 0, 2, CUDA0), * lr = NULL;
    tide_tensor * wc = filled(I, O, 1, CPU), * bc = filled(O, 0, 2, CPU), * lrc = NULL;
    {
        tide_tensor * h = tide_tensor_full(0, NULL, 0.05, TIDE_DTYPE_F32);
        lr = tide_tensor_to(h, -1, CUDA0, 0), lrc = h;
    }
    CHECK(tide_tensor_set_requires_grad(w, 1) == TIDE_OK && tide_tensor_set_requires_grad(b, 1) == TIDE_OK);
    CHECK(tide_tensor_set_requires_grad(wc, 1) == TIDE_OK && tide_tensor_set_requires_grad(bc, 1) == TIDE_OK);

    /* captured once, on the device, while it runs (the first step) */
    tide_tensor * x = filled(B, I, 0, CUDA0), * y = filled(B, O, 5, CUDA0);
    tide_tensor * xc = filled(B, I, 0, CPU), * yc = filled(B, O, 5, CPU);
    tide_graph *  g = tide_graph_capture_begin();
    CHECK(tide_graph_add_arg(g, x) == TIDE_OK && tide_graph_add_arg(g, y) == TIDE_OK);
    tide_tensor * loss = train_step(x, y, w, b, lr);
    CHECK(tide_graph_add_output(g, loss) == TIDE_OK);
    tide_tensor_release(loss);
    CHECK(tide_graph_capture_end(g, NULL, 0) == TIDE_OK);
    CHECK(tide_graph_optimize(g, TIDE_GRAPH_PASS_ALL, NULL) == TIDE_OK);
    tide_tensor_release(train_step(xc, yc, wc, bc, lrc));
    tide_tensor_release(x), tide_tensor_release(y), tide_tensor_release(xc), tide_tensor_release(yc);

    int64_t in_use = -1, captures = fake.n_captures;
    for (int r = 0; r < R; r++) {
        tide_tensor * args[2] = {filled(B, I, r, CUDA0), filled(B, O, 3 * r, CUDA0)}, * out[1] = {NULL};
        CHECK(tide_sync() == TIDE_OK);   /* the arguments' uploads */
        int64_t k0 = fake.n_kernels, c0 = fake.n_callbacks, l0 = fake.n_graph_launches, f0 = fake.n_rtc_launches;
        CHECK(tide_graph_replay(g, args, 2, out) == TIDE_OK);
        CHECK(tide_sync() == TIDE_OK);
        /* every step a kernel (the update's chains one compiled kernel each), all
         * of them behind one host callback; from the second replay on, as one
         * launch of the graph recorded then */
        CHECK(fake.n_kernels - k0 >= 8 && fake.n_rtc_launches - f0 >= 2 && fake.n_callbacks - c0 == 1);
        CHECK(fake.n_graph_launches - l0 == (r > 0));
        const char * how = tide_graph_describe(g);
        CHECK(strstr(how, "replayed as one task of") != NULL);
        CHECK(strstr(how, r ? "on the device: one device graph launch" : "step by step until the second") != NULL);
        tide_tensor * xr = filled(B, I, r, CPU), * yr = filled(B, O, 3 * r, CPU);
        tide_tensor * want = train_step(xr, yr, wc, bc, lrc);
        CHECK(fabs(at(out[0], 0) - at(want, 0)) <= 1e-6 * fabs(at(want, 0)));
        for (int i = 0; i < I * O; i++) CHECK(fabs(at(w, i) - at(wc, i)) <= 1e-6);
        for (int i = 0; i < O; i++) CHECK(fabs(at(b, i) - at(bc, i)) <= 1e-6);
        /* every step a kernel, all of them behind one host callback */
        tide_tensor * all[] = {args[0], args[1], out[0], xr, yr, want};
        tide_tensor_release_many(all, 6);
        CHECK(tide_sync() == TIDE_OK);
        if (r == 2) in_use = device_in_use();
        if (r > 2) CHECK(device_in_use() == in_use);   /* flat: the arena and the results come back */
    }
    CHECK(fake.n_captures - captures == 1);
    tide_graph_release(g);
    tide_tensor * all[] = {w, b, lr, wc, bc, lrc};
    tide_tensor_release_many(all, 6);
    CHECK(tide_sync() == TIDE_OK);
}

/* A bad index found by a step's work on the device fails the replay's
 * results with the op's message and where it was captured; a later replay
 * with good indices runs. */
static void test_device_report(void) {
    fake.autorun    = 1;
    tide_tensor * w = filled(5, 3, 1, CUDA0);
    int64_t       n = 2;
    tide_tensor * ih = tide_tensor_full(1, &n, 1, TIDE_DTYPE_I64), * ix = tide_tensor_to(ih, -1, CUDA0, 0);
    tide_op_params p = {.n_ints = 1, .dtype = -1};
    tide_graph *   g = tide_graph_capture_begin();
    CHECK(tide_graph_add_arg(g, ix) == TIDE_OK);
    tide_tensor * rows = call("index_select", w, ix, &p, NULL);
    CHECK(tide_graph_set_origin(g, "model.lua:12") == TIDE_OK);
    tide_tensor * y = op("relu", rows, NULL);
    CHECK(tide_graph_add_output(g, y) == TIDE_OK);
    tide_tensor_release(rows), tide_tensor_release(y);
    CHECK(tide_graph_capture_end(g, NULL, 0) == TIDE_OK);
    CHECK(tide_graph_optimize(g, TIDE_GRAPH_PASS_ALL, NULL) == TIDE_OK);

    double        bad_v[2] = {4, 7};
    tide_tensor * bh = tide_tensor_from_doubles(bad_v, 1, &n, TIDE_DTYPE_I64), * bad = tide_tensor_to(bh, -1, CUDA0, 0);
    tide_tensor * out[1] = {NULL};
    CHECK(tide_graph_replay(g, &bad, 1, out) == TIDE_OK);   /* the launch itself succeeds */
    CHECK(strstr(tide_graph_describe(g), "replayed as one task of") != NULL);
    double v;
    CHECK(tide_tensor_get(out[0], 0, &v) == TIDE_E_INDEX);
    const char * msg = tide_last_error();
    CHECK(strstr(msg, "index_select: index 7 is out of range for dimension 1 of size 5 (on cuda:0)") != NULL);
    CHECK(strstr(msg, "replaying index_select captured at model.lua:12") != NULL);
    tide_tensor_release(out[0]);
    CHECK(tide_sync() == TIDE_OK);   /* the read raised the replay's failure */

    /* then launched as a device graph: its report is copied out at each run */
    for (int r = 0; r < 4; r++) {
        CHECK(tide_graph_replay(g, r % 2 ? &bad : &ix, 1, out) == TIDE_OK);
        if (r % 2 == 0) {
            CHECK(at(out[0], 0) == fmax(0, at(w, 3)) && at(out[0], 5) == fmax(0, at(w, 5)));
        } else {
            CHECK(tide_tensor_get(out[0], 0, &v) == TIDE_E_INDEX);
            CHECK(strstr(tide_last_error(), "index_select: index 7 is out of range for dimension 1 of size 5 (on "
                                            "cuda:0) (replaying index_select captured at model.lua:12)") != NULL);
            CHECK(tide_sync() == TIDE_OK);
        }
        tide_tensor_release(out[0]);
    }
    CHECK(tide_sync() == TIDE_OK);
    CHECK(strstr(tide_graph_describe(g), "on the device: one device graph launch") != NULL);
    tide_graph_release(g);
    tide_tensor * all[] = {w, ih, ix, bh, bad};
    tide_tensor_release_many(all, 5);
    CHECK(tide_sync() == TIDE_OK);
}

/* A replay's random op draws the numbers an eager one would at that point of
 * the stream, and each replay draws new ones. */
static void test_random(void) {
    fake.autorun     = 1;
    tide_op_params p = {.ints = {3, 4}, .n_ints = 2, .scalars = {0, 1}, .dtype = TIDE_DTYPE_F32};
    tide_tensor *  z = filled(3, 4, 0, CUDA0);
    CHECK(tide_set_default_device(CUDA0) == TIDE_OK);   /* where rand makes its result */
    tide_graph *   g = tide_graph_capture_begin();
    CHECK(tide_graph_add_arg(g, z) == TIDE_OK);
    tide_tensor * res[1];
    CHECK(tide_op_call(tide_op_find("rand"), NULL, 0, &p, res, NULL) == TIDE_OK);
    tide_tensor * u = res[0];
    tide_tensor * y = op("add", u, z);
    CHECK(tide_graph_add_output(g, y) == TIDE_OK);
    tide_tensor_release(u), tide_tensor_release(y);
    CHECK(tide_graph_capture_end(g, NULL, 0) == TIDE_OK);
    CHECK(tide_graph_optimize(g, TIDE_GRAPH_PASS_ALL, NULL) == TIDE_OK);
    CHECK(tide_set_default_device(CPU) == TIDE_OK);
    tide_tensor * zero = tide_tensor_zeros(2, (int64_t[]){3, 4}, TIDE_DTYPE_F32), * zd = tide_tensor_to(zero, -1, CUDA0, 0);
    for (int r = 0; r < 5; r++) {
        tide_manual_seed(40 + (uint64_t)(r >= 2));   /* from the third replay: another seed */
        if (r == 4) {   /* the last replay draws after an eager draw */
            CHECK(tide_op_call(tide_op_find("rand"), NULL, 0, &p, res, NULL) == TIDE_OK);
            tide_tensor_release(res[0]);
        }
        tide_tensor * out[1] = {NULL};
        CHECK(tide_graph_replay(g, &zd, 1, out) == TIDE_OK);
        CHECK(strstr(tide_graph_describe(g), "replayed as one task of") != NULL);
        CHECK(tide_sync() == TIDE_OK);   /* the device queue has run it */
        if (r > 0) CHECK(strstr(tide_graph_describe(g), "on the device: one device graph launch") != NULL);
        tide_manual_seed(40 + (uint64_t)(r >= 2));
        if (r == 4) {
            CHECK(tide_op_call(tide_op_find("rand"), NULL, 0, &p, res, NULL) == TIDE_OK);
            tide_tensor_release(res[0]);
        }
        tide_op_params pc = p;
        tide_tensor *  want = tide_op_call(tide_op_find("rand"), NULL, 0, &pc, res, NULL) == TIDE_OK ? res[0] : NULL;
        CHECK(want != NULL);
        for (int i = 0; i < 12; i++) CHECK(at(out[0], i) == at(want, i));
        tide_tensor_release(out[0]), tide_tensor_release(want);
    }
    tide_graph_release(g);
    tide_tensor * all[] = {z, zero, zd};
    tide_tensor_release_many(all, 3);
    CHECK(tide_sync() == TIDE_OK);
}

/* An argument the graph writes in place is copied back out of the device
 * graph's fixed copy at each replay; and where the device cannot record the
 * graph, the replays go on step by step, saying why. */
static void test_written_argument(void) {
    fake.autorun = 1;
    for (int fails = 0; fails < 2; fails++) {
        fake.no_capture = fails;
        tide_tensor * w = filled(2, 3, 1, CUDA0), * x = filled(2, 3, 0, CUDA0);
        tide_graph *  g = tide_graph_capture_begin();
        CHECK(tide_graph_add_arg(g, x) == TIDE_OK);
        tide_tensor * u = call("add", x, w, NULL, x), * y = op("mul", x, w);
        CHECK(tide_graph_add_output(g, y) == TIDE_OK);
        tide_tensor_release(u), tide_tensor_release(y);
        CHECK(tide_graph_capture_end(g, NULL, 0) == TIDE_OK);
        CHECK(tide_graph_optimize(g, TIDE_GRAPH_PASS_ALL, NULL) == TIDE_OK);
        tide_tensor * a = filled(2, 3, 4, CUDA0), * a0 = filled(2, 3, 4, CPU), * wc = filled(2, 3, 1, CPU);
        for (int r = 1; r <= 4; r++) {
            tide_tensor * out[1] = {NULL};
            CHECK(tide_graph_replay(g, &a, 1, out) == TIDE_OK);
            for (int i = 0; i < 6; i++) {
                double want = at(a0, i) + r * at(wc, i);
                CHECK(fabs(at(a, i) - want) < 1e-6 && fabs(at(out[0], i) - want * at(wc, i)) < 1e-6);
            }
            tide_tensor_release(out[0]);
        }
        CHECK(tide_sync() == TIDE_OK);
        CHECK(strstr(tide_graph_describe(g), fails ? "on the device: fake: the graph could not be recorded"
                                                   : "on the device: one device graph launch") != NULL);
        tide_graph_release(g);
        tide_tensor * all[] = {w, x, a, a0, wc};
        tide_tensor_release_many(all, 5);
        CHECK(tide_sync() == TIDE_OK);
    }
    fake.no_capture = 0;
}

/* -- fused chains ------------------------------------------------------------------------------ */

static tide_tensor * opn(const char * name, tide_tensor * const * in, int32_t n, const tide_op_params * p) {
    tide_tensor * out[4] = {NULL};
    tide_status   st     = tide_op_call(tide_op_find(name), (tide_tensor **)in, n, p, out, NULL);
    if (st != TIDE_OK) printf("# %s: %s\n", name, tide_last_error());
    CHECK(st == TIDE_OK);
    return out[0];
}

/* The inputs of chain(): x [R,C], a row [C], xt0 [C,R] (which chain()
 * transposes, a strided [R,C] view), a positive d [R,C], a mask [R,C] and
 * host numbers. */
enum { R = 5, C = 6 };
typedef struct {
    tide_tensor * x, * row, * xt0, * d, * mask, * two, * half, * xt;
} chain_in;

/* Every op with a fused CUDA form (fuse_cuda.c), in runs of elementwise ops
 * over [R,C] that the fusion pass makes into a few kernels; out[0..3) are the
 * runs' results. */
static void chain(chain_in * a, tide_tensor ** out) {
    a->xt = tide_tensor_transpose(a->xt0, 0, 1);
    tide_op_params none = {.dtype = -1}, gelu_tanh = {.dtype = -1, .flags = 1};
    tide_op_params clamp_both = {.dtype = -1, .flags = TIDE_PARAMF_HAS_MIN | TIDE_PARAMF_HAS_MAX, .scalars = {-0.5, 0.75}};
    tide_op_params clamp_max = {.dtype = -1, .flags = TIDE_PARAMF_HAS_MAX, .scalars = {0, 0.25}};
    tide_op_params fill = {.dtype = -1, .scalars = {0.5}};
    static const char * const unary[] = {"neg", "abs", "relu", "sqrt", "exp", "log", "log1p", "expm1", "sin",
                                          "cos", "tanh", "sigmoid", "silu", "reciprocal"};
    /* a run of 16: a broadcast row, a host number, then the unary ops */
    tide_tensor * v = op("add", a->x, a->row), * t;
    t = op("mul", v, a->two), tide_tensor_release(v), v = t;
    for (size_t k = 0; k < sizeof unary / sizeof *unary; k++) t = op(unary[k], v, NULL), tide_tensor_release(v), v = t;
    out[0] = v;
    /* the binary ops, over a strided view and the row */
    static const char * const binary[] = {"maximum", "minimum", "pow", "fmod", "remainder", "atan2", "div"};
    tide_tensor * second[] = {a->x, a->row, a->two, a->d, a->d, a->x, a->d};
    v = op("sub", a->x, a->xt);
    for (size_t k = 0; k < sizeof binary / sizeof *binary; k++)
        t = op(binary[k], v, second[k]), tide_tensor_release(v), v = t;
    /* the rounding ops side by side, each read by the sums after them */
    tide_tensor * fl = op("floor", v, NULL), * ce = op("ceil", v, NULL), * ro = op("round", v, NULL);
    tide_tensor * sg = op("sign", v, NULL), * s1 = op("add", fl, ce), * s2 = op("add", s1, ro), * s3 = op("add", s2, sg);
    t = op("add", s3, v), tide_tensor_release(v), v = t;
    tide_tensor * parts[] = {fl, ce, ro, sg, s1, s2, s3};
    tide_tensor_release_many(parts, 7);
    out[1] = v;
    /* the ops of three and four inputs, and those with params */
    v = opn("where", (tide_tensor *[]){a->mask, a->x, a->xt}, 3, &none);
    t = opn("add_scaled", (tide_tensor *[]){v, a->x, a->half}, 3, &none), tide_tensor_release(v), v = t;
    t = opn("lerp", (tide_tensor *[]){v, a->xt, a->half}, 3, &none), tide_tensor_release(v), v = t;
    t = opn("addcmul", (tide_tensor *[]){v, a->x, a->xt, a->two}, 4, &none), tide_tensor_release(v), v = t;
    t = opn("addcdiv", (tide_tensor *[]){v, a->x, a->d, a->half}, 4, &none), tide_tensor_release(v), v = t;
    t = opn("gelu", &v, 1, &none), tide_tensor_release(v), v = t;
    t = opn("gelu", &v, 1, &gelu_tanh), tide_tensor_release(v), v = t;
    t = opn("gelu_backward", (tide_tensor *[]){v, a->x}, 2, &none), tide_tensor_release(v), v = t;
    t = opn("gelu_backward", (tide_tensor *[]){v, a->xt}, 2, &gelu_tanh), tide_tensor_release(v), v = t;
    t = opn("clamp", &v, 1, &clamp_both), tide_tensor_release(v), v = t;
    t = opn("masked_fill", (tide_tensor *[]){v, a->mask}, 2, &fill), tide_tensor_release(v), v = t;
    t = opn("clamp", &v, 1, &clamp_max), tide_tensor_release(v), v = t;
    tide_tensor * rs = op("rsqrt", a->d, NULL);
    t = op("add", v, rs), tide_tensor_release(v), tide_tensor_release(rs), v = t;
    t = opn("copy", &v, 1, &none), tide_tensor_release(v), v = t;
    out[2] = v;
    tide_tensor_release(a->xt);
}

/* x as dtype on dev. */
static tide_tensor * as(tide_tensor * x, int32_t dtype, tide_device dev) { return tide_tensor_to(x, dtype, dev, 1); }

static void chain_inputs(chain_in * a, int32_t dtype, tide_device dev, int shift) {
    tide_tensor * x = filled(R, C, shift, CPU), * row = filled(C, 0, shift + 3, CPU);
    tide_tensor * xt0 = filled(C, R, shift + 5, CPU);
    tide_tensor * ex = op("exp", x, NULL), * z = tide_tensor_zeros(0, NULL, TIDE_DTYPE_F32);
    tide_tensor * mask = op("gt", x, z);
    a->x = as(x, dtype, dev), a->row = as(row, dtype, dev), a->xt0 = as(xt0, dtype, dev);
    a->d = as(ex, dtype, dev), a->mask = as(mask, -1, dev);
    a->two = tide_tensor_scalar(2, dtype), a->half = tide_tensor_scalar(0.5, dtype);   /* host numbers */
    tide_tensor * all[] = {x, row, xt0, ex, z, mask};
    tide_tensor_release_many(all, 6);
}

static void chain_free(chain_in * a) {
    tide_tensor * all[] = {a->x, a->row, a->xt0, a->d, a->mask, a->two, a->half};
    tide_tensor_release_many(all, 7);
}

static void test_fused_chain(void) {
    fake.autorun = 1;
    static const int32_t dtypes[] = {TIDE_DTYPE_F32, TIDE_DTYPE_F64, TIDE_DTYPE_F16, TIDE_DTYPE_BF16};
    for (size_t di = 0; di < sizeof dtypes / sizeof *dtypes; di++) {
        int32_t dtype = dtypes[di];
        for (int k = 0; k < 4; k++) {
            int no_rtc = k < 2, plan = k % 2;   /* no compiler first: compiled kernels are kept */
            fake.no_rtc = no_rtc;
            chain_in      a;
            tide_tensor * res[3];
            chain_inputs(&a, dtype, CUDA0, 0);
            int64_t       compiles = fake.n_rtc_compiles;
            tide_graph *  g        = tide_graph_capture_begin();
            tide_tensor * args[] = {a.x, a.row, a.xt0, a.d, a.mask};
            for (int k = 0; k < 5; k++) CHECK(tide_graph_add_arg(g, args[k]) == TIDE_OK);
            chain(&a, res);
            for (int k = 0; k < 3; k++) CHECK(tide_graph_add_output(g, res[k]) == TIDE_OK);
            tide_tensor_release_many(res, 3);
            CHECK(tide_graph_capture_end(g, NULL, 0) == TIDE_OK);
            /* replayed as one task, or node by node */
            CHECK(tide_graph_optimize(g, plan ? TIDE_GRAPH_PASS_ALL : TIDE_GRAPH_PASS_ALL & ~TIDE_GRAPH_PASS_PLAN,
                                      NULL) == TIDE_OK);
            const char * how = tide_graph_describe(g);
            /* three runs, one kernel each (the first two end in the graph's
             * results); none without a compiler */
            CHECK((strstr(how, "fused(") != NULL) == !no_rtc);
            CHECK((strstr(how, "-- a chain of elementwise ops stays unfused: its kernel did not compile for cuda:0: "
                               "fake: the runtime compiler was told to be missing") != NULL) == no_rtc);
            CHECK(fake.n_rtc_compiles - compiles == (k == 2 ? 3 : 0));   /* once: then reused */
#ifdef FAKE_NVRTC
            CHECK(fake_nvrtc_checks == fake.n_rtc_compiles);   /* and NVRTC took them too */
#endif
            for (int r = 0; r < 3; r++) {   /* step by step, then recorded, then as the device graph */
                chain_in b, h;
                chain_inputs(&b, dtype, CUDA0, r + 1);
                chain_inputs(&h, dtype, CPU, r + 1);
                tide_tensor * in[] = {b.x, b.row, b.xt0, b.d, b.mask}, * out[3] = {NULL}, * want[3];
                int64_t       launches = fake.n_rtc_launches;
                CHECK(tide_graph_replay(g, in, 5, out) == TIDE_OK);
                CHECK(tide_sync() == TIDE_OK);
                CHECK(fake.n_rtc_launches - launches == (no_rtc ? 0 : 3));
                chain(&h, want);   /* the ops one by one on the CPU */
                /* bit for bit: the fake's kernels, fused or not, take the CPU's math */
                for (int j = 0; j < 3; j++)
                    for (int64_t i = 0; i < R * C; i++) {
                        double got = at(out[j], i), w = at(want[j], i);
                        bool   ok  = got == w || (isnan(got) && isnan(w));
                        if (!ok)
                            printf("# %s, case %d, replay %d, chain %d, element %lld: %.17g, want %.17g\n",
                                   tide_dtype_name(dtype), k, r, j, (long long)i, got, w);
                        CHECK(ok);
                    }
                tide_tensor_release_many(out, 3), tide_tensor_release_many(want, 3);
                chain_free(&b), chain_free(&h);
            }
            CHECK(!plan || strstr(tide_graph_describe(g), "on the device: one device graph launch") != NULL);
            tide_graph_release(g);
            chain_free(&a);
            CHECK(tide_sync() == TIDE_OK);
        }
    }
    fake.no_rtc = 0;
}

int main(void) {
#ifndef FAKE_NVRTC
    printf("# the fused kernels' sources are not compiled by NVRTC in this run: %s\n",
#ifdef TIDE_TEST_NVRTC
           "a sanitizer build"
#else
           "the build found no CUDA toolkit"
#endif
    );
#endif
    tide_cuda_use_backend(&fake_api);
    test_training_step();
    test_device_report();
    test_random();
    test_written_argument();
    test_fused_chain();
    tide_cuda_use_backend(NULL);
    if (!check_failures) printf("test_cuda_jit: ok\n");
    return check_failures;
}
