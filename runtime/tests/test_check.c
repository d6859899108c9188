/* test_check.c - check mode from the C API: an eager run recorded beside an
 * optimised graph's replay names the op that reads a host number changed since
 * capture, the step of a fused chain whose parameter changed, a fused kernel
 * that disagrees with its ops run one by one (a fused step's loop swapped, as
 * a bug in fusion would), and another path taken; a clean run reports nothing,
 * and the replay writes copies, so the eager run's tensors are its own. */
#include "tide.h"
#include "check.h"
#include "graph/graph.h"
#include "ops/cpu/kernels.h"

#include <math.h>
#include <string.h>

extern const tide_ew_loop tide_loops_sigmoid[TIDE_DTYPE_COUNT];

static tide_tensor * op(const char * name, tide_tensor * a, tide_tensor * b, const tide_op_params * p,
                        tide_tensor * dst) {
    tide_tensor * in[2] = {a, b}, * out[4] = {NULL};
    if (tide_op_call(tide_op_find(name), in, b ? 2 : 1, p, out, dst) != TIDE_OK) return NULL;
    return out[0];
}

static tide_tensor * vec(double a, double b, double c) {
    double  v[3] = {a, b, c};
    int64_t n    = 3;
    return tide_tensor_from_doubles(v, 1, &n, TIDE_DTYPE_F32);
}

/* The code checked: w += x * scale (in place), then y = tanh(clamp(w * scale, 0, hi)) + 1,
 * or y = sigmoid(w) when `other`. Returns y. */
static tide_tensor * code(tide_tensor * x, tide_tensor * w, double scale, double hi, bool other) {
    tide_tensor *  s = tide_tensor_scalar(scale, TIDE_DTYPE_F32), * one = tide_tensor_scalar(1, TIDE_DTYPE_F32);
    tide_tensor *  xs = op("mul", x, s, NULL, NULL);
    tide_tensor *  r  = op("add", w, xs, NULL, w), * y;
    tide_op_params p;
    memset(&p, 0, sizeof p);
    p.dtype      = -1;
    p.flags      = TIDE_PARAMF_HAS_MIN | TIDE_PARAMF_HAS_MAX;
    p.scalars[1] = hi;
    if (other) {
        y = op("sigmoid", w, NULL, NULL, NULL);
    } else {
        tide_tensor * a = op("mul", w, s, NULL, NULL), * b = op("clamp", a, NULL, &p, NULL), * t = op("tanh", b, NULL, NULL, NULL);
        y = op("add", t, one, NULL, NULL);
        tide_tensor_release(a), tide_tensor_release(b), tide_tensor_release(t);
    }
    tide_tensor_release(s), tide_tensor_release(one), tide_tensor_release(xs), tide_tensor_release(r);
    return y;
}

static tide_graph * capture(tide_tensor * x, tide_tensor * w) {
    tide_graph * g = tide_graph_capture_begin();
    CHECK(g && tide_graph_add_arg(g, x) == TIDE_OK);
    tide_tensor * y = code(x, w, 2, 10, false);
    CHECK(tide_graph_add_output(g, y) == TIDE_OK);
    tide_tensor_release(y);
    CHECK(tide_graph_capture_end(g, NULL, 0) == TIDE_OK);
    CHECK(tide_graph_optimize(g, TIDE_GRAPH_PASS_ALL, NULL) == TIDE_OK);
    return g;
}

/* Checks g against code(scale, hi, other); returns the report. */
static const char * check(tide_graph * g, tide_tensor * x, tide_tensor * w, double scale, double hi, bool other) {
    static char report[1024];
    tide_graph * c = tide_graph_check_begin(g, &x, 1, 1e-5);
    CHECK(c != NULL);
    CHECK(tide_graph_check_begin(g, &x, 1, 1e-5) == NULL);   /* one capture or check per thread */
    tide_tensor * y = code(x, w, scale, hi, other), * out[1] = {NULL};
    CHECK(tide_graph_check_end(c, out, report, sizeof report) == TIDE_OK);
    CHECK(out[0] != NULL);
    tide_tensor * copy = tide_graph_check_copy(c, w);
    CHECK(copy != w);   /* the replay wrote a copy of w */
    double a = NAN, b = NAN;
    CHECK(tide_tensor_get(copy, 0, &a) == TIDE_OK && tide_tensor_get(w, 0, &b) == TIDE_OK);
    CHECK(other || scale != 2 || a == b);
    tide_tensor_release(y), tide_tensor_release(out[0]);
    tide_graph_release(c);
    return report;
}

int main(void) {
    tide_tensor * x = vec(0.1, 0.2, 0.3), * w = vec(0, 0, 0);
    tide_graph *  g = capture(x, w);
    CHECK(strstr(tide_graph_describe(g), "fused(") != NULL);
    CHECK(strcmp(check(g, x, w, 2, 10, false), "") == 0);
    const char * r = check(g, x, w, 3, 10, false);
    CHECK(strstr(r, "op `mul` at an unknown line reads a Lua number that has changed since capture (a constant of "
                    "the graph: 2 then, 3 now)") == r);
    r = check(g, x, w, 2, 0.5, false);
    CHECK(strstr(r, "op `clamp` at an unknown line (one of the fused ops `mul clamp tanh add` ending at an unknown "
                    "line, which make value") == r);
    CHECK(strstr(r, "its number parameter 2 was 10 at capture and is 0.5 now") != NULL);
    r = check(g, x, w, 2, 10, true);
    CHECK(strstr(r, "the eager run took another path at its op 3, op `sigmoid` at an unknown line, where the capture "
                    "had `mul`") == r);
    /* a fused kernel that disagrees with its own ops: the tanh step's loop swapped for sigmoid's */
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].kind == TIDE_GN_FUSED) g->nodes[i].fused->steps[2].loop = tide_loops_sigmoid[TIDE_DTYPE_F32];
    r = check(g, x, w, 2, 10, false);
    CHECK(strstr(r, "the result of the fused ops `mul clamp tanh add` ending at an unknown line (value") == r);
    CHECK(strstr(r, ", though the same ops run one by one agree and so do their inputs: fusing them changed the "
                    "result") != NULL);
    tide_graph_release(g);
    tide_tensor_release(x), tide_tensor_release(w);
    if (check_failures) fprintf(stderr, "last report: %s\n", r);
    return check_failures;
}
