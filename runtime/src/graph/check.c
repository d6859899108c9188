/*
 * check.c - check mode: the eager code a graph came from runs again under a
 * recording, and as each of its ops is recorded the graph replays, node by
 * node, up to the node that stands for that op, so that both results are
 * compared while they are fresh (before later in-place writes) and the first
 * op whose results differ while its inputs agree can be named. A device's
 * values are copied on the device and compared through host copies. Values
 * match by their stable ids (graph.h). Capture, the passes and the ordinary
 * replay are graph.c's and pass_*.c's; this file only reads the graph.
 */
#include "pass.h"
#include "../ops/cpu/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* What the check found first. */
enum {
    FOUND_NONE,
    FOUND_PATH,     /* the eager code ran other ops than the capture did */
    FOUND_INPUT,    /* a value an op read first (constant, bound tensor, argument) differs */
    FOUND_RESULT,   /* what an op made, or left in its destination, differs */
    FOUND_ERROR     /* the replay failed, or a tensor could not be read */
};

struct tide_check {
    tide_graph *   g;                /* the graph checked (borrowed) */
    tide_tensor ** t;                /* per value of g: its tensor in the replay (+1), or NULL */
    double *       diff;             /* per value of g: its last difference from the eager run (-1: none) */
    int32_t *      by_seq, * first;  /* g's values with a stable id, ordered by seq; first[k]: where seq k starts */
    tide_tensor ** copies;           /* pairs: a tensor g writes in place, and the copy its replay writes (+1) */
    int32_t        n_copies;
    tide_tensor ** made;             /* per recorded value made from Lua data: its contents then (+1), as an
                                      * in-place write into it is recorded only once it is written */
    int32_t        n_made;
    int32_t        next;             /* g's next node to replay */
    int32_t        seen;             /* recorded nodes compared so far */
    uint64_t       seed, offset;     /* the replay's generator */
    double         tol;
    /* the first difference */
    int32_t        found, at, value, node;   /* kind; recorded node; g's value; g's node (-1: none) */
    double         by, inputs_by, step_by, then_v, now_v;
    bool           meta;             /* the shapes differ */
    bool           failed;           /* the replay failed: it stopped there */
    int32_t        step, step_at;    /* a fused node's result: its first step that differs run alone (-1:
                                      * none), and the recorded node for that step */
    char           eager_meta[128];  /* the recorded value's dtype and shape, when the shapes differ */
    char           params[160];      /* how the culprit's parameters differ from the recorded op's */
    char           msg[600];
};

static tide_tensor * bound(const struct tide_check * c, tide_tensor * t) {
    for (int32_t i = 0; i < c->n_copies; i++)
        if (c->copies[2 * i] == t) return c->copies[2 * i + 1];
    return t;
}

/* -- setting up the replay ---------------------------------------------------------------------- */

/* A tensor like t over storage s (its copy's), retained. */
static tide_tensor * like_on(tide_storage * s, const tide_tensor * t) {
    tide_tensor * r = tide_tensor_alloc_header(s, t->dtype_id);
    if (!r) return NULL;
    r->ndim   = t->ndim;
    r->offset = t->offset;
    r->flags  = t->flags;
    memcpy(r->sizes, t->sizes, sizeof r->sizes);
    memcpy(r->strides, t->strides, sizeof r->strides);
    tide_tensor_finish(r);
    return r;
}

/* The check's own copies of a device's values are neither ops of the eager
 * run it records nor of autograd's history: made with both off. */
typedef struct {
    tide_graph * capture;
    int32_t      grad_off;
} quiet;

static quiet quiet_begin(void) {
    quiet q     = {tide_capture, tide_grad_off};
    tide_capture  = NULL;
    tide_grad_off = 1;
    return q;
}

static void quiet_end(quiet q) {
    tide_capture  = q.capture;
    tide_grad_off = q.grad_off;
}

/* A new storage holding from's bytes, on from's device: copied by the host
 * once from is written, or on a device by the copy op over its bytes, queued
 * after what writes it. NULL with the error set. */
static tide_storage * storage_copy(tide_storage * from) {
    if (from->device.type == TIDE_DEVICE_CPU) {
        if (tide_engine_wait_storage(from) != TIDE_OK) return NULL;
        tide_storage * s = tide_storage_new(from->nbytes, from->device);
        if (!s) return NULL;
        memcpy(s->data, from->data, from->nbytes);
        return s;
    }
    tide_tensor * bytes = tide_tensor_alloc_header(from, TIDE_DTYPE_U8);
    if (!bytes) return NULL;
    bytes->ndim       = 1;
    bytes->sizes[0]   = (int64_t)from->nbytes;
    bytes->strides[0] = 1;
    tide_tensor_finish(bytes);
    quiet         q    = quiet_begin();
    tide_tensor * copy = tide_tensor_to(bytes, -1, from->device, 1);
    quiet_end(q);
    tide_tensor_release(bytes);
    if (!copy) return NULL;
    tide_storage * s = copy->storage;
    tide_storage_retain(s);
    tide_tensor_release(copy);
    return s;
}

/* A copy of t's storage, with t's layout; NULL when out of memory or t failed. */
static tide_tensor * copy_of(tide_tensor * t) {
    tide_storage * s = storage_copy(t->storage);
    if (!s) return NULL;
    tide_tensor * r = like_on(s, t);
    tide_storage_release(s);
    return r;
}

/* The tensor value id is bound to before any node runs (args for arguments). */
static tide_tensor * given(const tide_graph * g, int32_t id, tide_tensor * const * args) {
    const tide_gvalue * v = &g->values[id];
    return v->kind == TIDE_GV_ARG ? args[v->arg] : v->kind == TIDE_GV_NODE ? NULL : v->t;
}

/* Binds g's inputs: the tensors whose storage g writes in place are bound to
 * copies (every one sharing such a storage, to the same copy), the rest as they are. */
static tide_status bind(struct tide_check * c, tide_tensor * const * args) {
    const tide_graph * g = c->g;
    for (int32_t id = 0; id < g->n_values; id++) {
        const tide_gvalue * v = &g->values[id];
        if (v->kind != TIDE_GV_ARG) continue;
        const tide_tensor * a = args[v->arg];
        if (a->ndim != v->ndim || a->dtype_id != v->dtype || memcmp(a->sizes, v->sizes, (size_t)v->ndim * 8)) {
            char x[128], y[128];
            return tide_error_set(TIDE_E_SHAPE, "jit check: argument %d is %s %s but the graph was captured for %s %s",
                                  v->arg + 1, tide_dtype_name(a->dtype_id), tide_shape_str(a, x, sizeof x),
                                  tide_dtype_name(v->dtype), tide_dims_str(v->ndim, v->sizes, y, sizeof y));
        }
    }
    tide_storage ** from = malloc((size_t)(g->n_nodes + 1) * sizeof *from), ** to = NULL;
    int32_t         n = 0;
    for (int32_t i = 0; i < g->n_nodes && from; i++) {
        if (g->nodes[i].into < 0) continue;
        tide_tensor * t = given(g, tide_graph_base(g, g->nodes[i].into), args);
        int32_t       k = 0;
        while (t && k < n && from[k] != t->storage) k++;
        if (t && k == n) from[n++] = t->storage;
    }
    c->copies = calloc((size_t)(2 * g->n_values + 1), sizeof *c->copies);
    to        = calloc((size_t)(n + 1), sizeof *to);
    tide_status st = from && to && c->copies ? TIDE_OK : tide_error_set(TIDE_E_OOM, "jit check: out of memory");
    for (int32_t k = 0; k < n && st == TIDE_OK; k++)   /* what the replay writes starts as it is now */
        if (!(to[k] = storage_copy(from[k]))) st = tide_last_status();
    for (int32_t id = 0; id < g->n_values && st == TIDE_OK; id++) {
        tide_tensor * t = given(g, id, args);
        if (!t) continue;
        int32_t k = 0;
        while (k < n && from[k] != t->storage) k++;
        if (k == n) {
            c->t[id] = t;
            tide_tensor_retain(t);
            continue;
        }
        tide_tensor * copy = bound(c, t);
        if (copy == t) {
            if (!(copy = like_on(to[k], t))) {
                st = TIDE_E_OOM;
                break;
            }
            c->copies[2 * c->n_copies] = t, c->copies[2 * c->n_copies + 1] = copy;
            tide_tensor_retain(t);
            c->n_copies++;
        }
        c->t[id] = copy;
        tide_tensor_retain(copy);
    }
    for (int32_t k = 0; k < n && to; k++) tide_storage_release(to[k]);   /* the copies hold them */
    free(from), free(to);
    return st;
}

/* Orders g's values by seq, for the lookups as the recorded nodes come. */
static bool index_values(struct tide_check * c) {
    const tide_graph * g = c->g;
    c->first  = calloc((size_t)g->n_trace + 2, sizeof *c->first);
    c->by_seq = malloc((size_t)(g->n_values + 1) * sizeof *c->by_seq);
    if (!c->first || !c->by_seq) return false;
    for (int32_t id = 0; id < g->n_values; id++)
        if (g->values[id].seq >= 0) c->first[g->values[id].seq + 2]++;
    for (int32_t k = 2; k < g->n_trace + 2; k++) c->first[k] += c->first[k - 1];
    for (int32_t id = 0; id < g->n_values; id++)   /* first[seq + 1] is where the next of seq goes */
        if (g->values[id].seq >= 0) c->by_seq[c->first[g->values[id].seq + 1]++] = id;
    return true;
}

tide_graph * tide_graph_check_begin(tide_graph * g, tide_tensor * const * args, int32_t n_args, double tol) {
    if (tide_capture) {
        tide_error_set(TIDE_E_VALUE, "jit check: this thread is already capturing a graph");
        return NULL;
    }
    if (g->capturing || !g->trace) {
        tide_error_set(TIDE_E_VALUE, "jit check: the graph %s", g->capturing ? "is still being captured"
                                                                             : "was not captured to its end");
        return NULL;
    }
    if (n_args != g->n_args) {
        tide_error_set(TIDE_E_VALUE, "jit check: the graph takes %d tensor arguments, %d given", g->n_args, n_args);
        return NULL;
    }
    struct tide_check * c = calloc(1, sizeof *c);
    if (c) {
        c->g    = g;
        c->tol  = tol;
        c->t    = calloc((size_t)g->n_values + 1, sizeof *c->t);
        c->diff = malloc(((size_t)g->n_values + 1) * sizeof *c->diff);
    }
    if (!c || !c->t || !c->diff || !index_values(c)) {
        tide_check_free(c);
        tide_error_set(TIDE_E_OOM, "jit check: out of memory");
        return NULL;
    }
    for (int32_t id = 0; id < g->n_values; id++) c->diff[id] = -1;
    if (bind(c, args) != TIDE_OK) {
        tide_check_free(c);
        return NULL;
    }
    tide_rng_get_state(&c->seed, &c->offset);
    tide_graph * e = tide_graph_capture_begin();
    if (!e) {
        tide_check_free(c);
        return NULL;
    }
    e->check = c;
    return e;
}

/* -- comparing ------------------------------------------------------------------------------------ */

static double host_diff(struct tide_check * c, tide_tensor * a, tide_tensor * b);

/* The largest absolute difference between a and b, elementwise (NaN against NaN
 * agrees; INFINITY when the shapes differ or one is NaN). Waits for both; a
 * device's values are compared through copies in host memory. */
static double max_diff(struct tide_check * c, tide_tensor * a, tide_tensor * b) {
    if (!a || !b || a == b) return 0;
    if (a->ndim != b->ndim || memcmp(a->sizes, b->sizes, (size_t)a->ndim * 8)) {
        c->meta = true;
        return INFINITY;
    }
    if (a->dev.type == TIDE_DEVICE_CPU && b->dev.type == TIDE_DEVICE_CPU) return host_diff(c, a, b);
    tide_device   cpu = {TIDE_DEVICE_CPU, -1};
    quiet         q   = quiet_begin();
    tide_tensor * ha = tide_tensor_to(a, -1, cpu, 0), * hb = ha ? tide_tensor_to(b, -1, cpu, 0) : NULL;
    quiet_end(q);
    double        d  = 0;
    if (!hb) {
        c->found = FOUND_ERROR;
        snprintf(c->msg, sizeof c->msg, "a value could not be read: %s", tide_last_error());
    } else {
        d = host_diff(c, ha, hb);
    }
    tide_tensor_release(ha), tide_tensor_release(hb);
    return d;
}

/* max_diff of two host tensors of one shape. */
static double host_diff(struct tide_check * c, tide_tensor * a, tide_tensor * b) {
    tide_status st = tide_tensor_wait(a);
    if (st == TIDE_OK) st = tide_tensor_wait(b);
    if (st != TIDE_OK) {
        c->found = FOUND_ERROR;
        snprintf(c->msg, sizeof c->msg, "a value could not be read: %s", tide_last_error());
        return 0;
    }
    const char * pa = a->storage->data, * pb = b->storage->data;
    size_t       ea = tide_dtype_size(a->dtype_id), eb = tide_dtype_size(b->dtype_id);
    int64_t      idx[TIDE_MAX_DIMS] = {0}, oa = a->offset, ob = b->offset;
    double       worst = 0;
    for (int64_t i = 0; i < a->nelem; i++) {
        double x = tide_load_double(pa + oa * (int64_t)ea, a->dtype_id);
        double y = tide_load_double(pb + ob * (int64_t)eb, b->dtype_id);
        double d = x == y || (isnan(x) && isnan(y)) ? 0 : fabs(x - y);
        if (isnan(d)) d = INFINITY;
        if (d > worst) worst = d;
        for (int32_t k = a->ndim - 1; k >= 0; k--) {   /* the next element of both */
            oa += a->strides[k], ob += b->strides[k];
            if (++idx[k] < a->sizes[k]) break;
            oa -= a->strides[k] * a->sizes[k], ob -= b->strides[k] * b->sizes[k];
            idx[k] = 0;
        }
    }
    return worst;
}

/* Compares g's value id (tensor mine) with the recorded one; records the first
 * difference beyond the tolerance. */
static bool differs(struct tide_check * c, int32_t kind, int32_t at, int32_t id, tide_tensor * mine, tide_tensor * eager) {
    c->meta = false;
    double d = max_diff(c, mine, eager);
    if (c->found) return true;
    c->diff[id] = d;
    if (d <= c->tol) return false;
    c->found = kind, c->at = at, c->value = id, c->node = -1, c->by = d;
    if (c->meta) {
        char shape[96];
        snprintf(c->eager_meta, sizeof c->eager_meta, "%s %s", tide_dtype_name(eager->dtype_id),
                 tide_shape_str(eager, shape, sizeof shape));
    }
    if (mine->nelem == 1 && eager->nelem == 1 && !c->meta) {
        tide_tensor_get(mine, 0, &c->then_v);
        tide_tensor_get(eager, 0, &c->now_v);
    }
    return true;
}

/* The recorded value of node k that g's value with (seq k, slot) stands for, or -1. */
static int32_t eager_id(const tide_graph * e, int32_t k, int32_t slot) {
    const tide_gnode * n = &e->nodes[k];
    return slot >= 0 ? (slot < n->n_out ? n->out[slot] : -1)
         : -1 - slot == TIDE_OP_MAX_IN ? n->into : -1 - slot < n->n_in ? n->in[-1 - slot] : -1;
}

static tide_tensor * eager_value(const tide_graph * e, int32_t k, int32_t slot) {
    int32_t id = eager_id(e, k, slot);
    return id >= 0 ? e->values[id].t : NULL;
}

/* -- the replay, node by node ------------------------------------------------------------------- */

/* Runs g's node i as tide_graph_replay does, except that gradients are left to
 * the recorded code (a set_grad does nothing), with the replay's generator. */
static tide_status run_node(struct tide_check * c, int32_t i) {
    const tide_gnode * n = &c->g->nodes[i];
    uint64_t           seed, offset;
    tide_rng_get_state(&seed, &offset);
    tide_rng_set_state(c->seed, c->offset);
    tide_status st = n->kind == TIDE_GN_SET_GRAD ? TIDE_OK : tide_graph_run_node(c->g, i, c->t, NULL, NULL);
    tide_rng_get_state(&c->seed, &c->offset);
    tide_rng_set_state(seed, offset);
    if (st != TIDE_OK) {
        c->failed = true;
        if (!c->found) {
            c->found = FOUND_ERROR;
            snprintf(c->msg, sizeof c->msg, "the replay failed at %s: %s", n->origin[0] ? n->origin : "an unknown line",
                     tide_last_error());
        }
    }
    return st;
}

/* The largest difference seen in what node i reads. */
static double inputs_by(const struct tide_check * c, const tide_gnode * n) {
    double worst = 0;
    for (int32_t k = 0; k <= n->n_in; k++) {
        int32_t id = k < n->n_in ? n->in[k] : n->into;
        if (id >= 0 && c->diff[id] > worst) worst = c->diff[id];
    }
    return worst;
}

/* How an op's params at capture (a) differ from the recorded run's (b), into buf ("" if alike). */
static void params_differ(const tide_op_params * a, const tide_op_params * b, char * buf, size_t n) {
    buf[0] = 0;
    for (int32_t i = 0; i < 4; i++)
        if (memcmp(&a->scalars[i], &b->scalars[i], sizeof a->scalars[i])) {
            snprintf(buf, n, "its number parameter %d was %.17g at capture and is %.17g now", i + 1, a->scalars[i],
                     b->scalars[i]);
            return;
        }
    bool ints = a->n_ints != b->n_ints;
    for (int32_t i = 0; i < a->n_ints && i < TIDE_OP_MAX_INTS && !ints; i++) ints = a->ints[i] != b->ints[i];
    if (ints || a->keepdim != b->keepdim || a->dtype != b->dtype || a->flags != b->flags)
        snprintf(buf, n, "its %s differ from the eager run's", ints ? "integer parameters (dims, sizes)" : "options");
}

/* The result of fused node n (recorded node k) differs though its inputs agree:
 * runs its ops one by one, as the eager code did, and compares each with the
 * recorded op it stands for (found through what each reads from the one before)
 * to find the first that differs on its own. */
static void blame_step(const tide_graph * e, struct tide_check * c, const tide_gnode * n, int32_t k) {
    const tide_fused * f = n->fused;
    int32_t            at[TIDE_FUSED_MAX_STEPS];
    tide_tensor *      res[TIDE_FUSED_MAX_STEPS] = {0};
    at[f->n_steps - 1] = k;
    for (int32_t s = f->n_steps - 1; s > 0; s--) {   /* step s reads step s - 1's result */
        const tide_fused_step * st = &f->steps[s];
        at[s - 1] = -1;
        for (int32_t q = 0; q < st->c.n_in && at[s] >= 0; q++)
            if (st->src[q] == -s) at[s - 1] = e->values[e->nodes[at[s]].in[q]].node;
    }
    int32_t grad_off = tide_grad_off;
    tide_grad_off    = 1;
    tide_capture     = NULL;
    c->step          = -1;
    for (int32_t s = 0; s < f->n_steps && c->step < 0 && at[s] >= 0; s++) {
        const tide_fused_step * st = &f->steps[s];
        tide_tensor *           in[TIDE_OP_MAX_IN], * out[TIDE_OP_MAX_OUT] = {0};
        for (int32_t q = 0; q < st->c.n_in; q++) in[q] = st->src[q] >= 0 ? c->t[n->in[st->src[q]]] : res[-st->src[q] - 1];
        if (tide_op_call(st->c.op, in, st->c.n_in, &st->c.p, out, NULL) != TIDE_OK) break;
        res[s] = out[0];
        const tide_gnode * rec = &e->nodes[at[s]];
        double d = max_diff(c, res[s], e->values[rec->out[0]].t);
        if (d > c->tol && !c->meta) {
            c->step = s, c->step_at = at[s], c->step_by = d;
            params_differ(&st->c.p, &rec->p, c->params, sizeof c->params);
        }
    }
    tide_capture  = (tide_graph *)e;
    tide_grad_off = grad_off;
    for (int32_t s = 0; s < f->n_steps; s++) tide_tensor_release(res[s]);
}

/* Recorded node k has come: compares what g's values first read there, replays
 * g's node for it, and compares what that made. */
static void step(tide_graph * e, struct tide_check * c, int32_t k) {
    const tide_graph * g = c->g;
    if (k >= g->n_trace || g->trace[k] != tide_graph_trace_code(&e->nodes[k])) {
        c->found = FOUND_PATH, c->at = k;
        return;
    }
    /* What node k writes in place is written already: its state before is what a value
     * made from Lua data was made with, and for one bound by reference, the copy's. */
    const tide_tensor * written = e->nodes[k].into >= 0 ? e->values[e->nodes[k].into].t : NULL;
    for (int32_t j = c->first[k]; j < c->first[k + 1]; j++) {
        int32_t       id    = c->by_seq[j];
        int32_t       eid   = g->values[id].slot < 0 ? eager_id(e, k, g->values[id].slot) : -1;
        tide_tensor * eager = eid >= 0 ? e->values[eid].t : NULL;
        if (eager && written && eager->storage == written->storage) eager = eid < c->n_made ? c->made[eid] : NULL;
        if (eager && differs(c, FOUND_INPUT, k, id, c->t[id], eager)) return;
    }
    int32_t ran = -1;
    tide_capture = NULL;   /* the replay's ops are not the recorded code's */
    while (c->next < g->n_nodes && g->nodes[c->next].seq <= k && !c->found) {
        if (ran >= 0) tide_graph_release_inputs(c->g, c->t, ran);
        if (run_node(c, c->next) == TIDE_OK) ran = c->next++;
    }
    tide_capture = e;
    if (c->found) return;
    for (int32_t j = c->first[k]; j < c->first[k + 1]; j++) {
        int32_t             id = c->by_seq[j];
        const tide_gvalue * v  = &g->values[id];
        if (v->slot < 0) continue;
        bool made = v->kind == TIDE_GV_NODE && v->node >= 0 && v->node == ran;
        bool folded = v->kind == TIDE_GV_CONST;   /* computed once, at capture */
        if (!made && !folded) continue;            /* removed by a pass: nothing stands for it */
        const tide_gnode * n = made ? &g->nodes[ran] : NULL;
        if (n && n->kind == TIDE_GN_EMPTY) continue;   /* undefined contents */
        tide_tensor * mine = made ? c->t[id] : v->t, * eager = eager_value(e, k, v->slot);
        bool reshaped = mine && eager && (mine->ndim != eager->ndim ||
                                          memcmp(mine->sizes, eager->sizes, (size_t)mine->ndim * 8));
        if (n && n->kind == TIDE_GN_VIEW && !reshaped) continue;   /* its data is its base's, compared there */
        if (differs(c, FOUND_RESULT, k, id, mine, eager)) {
            if (c->found != FOUND_RESULT) return;
            c->node = made ? ran : -1, c->inputs_by = n ? inputs_by(c, n) : 0;
            if (n && n->kind == TIDE_GN_OP) params_differ(&n->p, &e->nodes[k].p, c->params, sizeof c->params);
            if (n && n->kind == TIDE_GN_FUSED && !c->meta) blame_step(e, c, n, k);
            return;
        }
    }
    if (ran >= 0 && g->nodes[ran].seq == k && g->nodes[ran].into >= 0) {
        const tide_gnode * n      = &g->nodes[ran];
        double             before = inputs_by(c, n);
        if (differs(c, FOUND_RESULT, k, n->into, c->t[n->into], eager_value(e, k, -1 - TIDE_OP_MAX_IN))) {
            if (c->found != FOUND_RESULT) return;
            c->node = ran, c->inputs_by = before;
            if (n->kind == TIDE_GN_OP) params_differ(&n->p, &e->nodes[k].p, c->params, sizeof c->params);
            return;
        }
    }
    if (ran >= 0) tide_graph_release_inputs(c->g, c->t, ran);
}

void tide_check_on_const(tide_graph * e, int32_t id) {
    struct tide_check * c = e->check;
    if (c->found) return;
    if (id >= c->n_made) {
        int32_t         n = 2 * id + 16;
        tide_tensor ** made = realloc(c->made, (size_t)n * sizeof *made);
        if (!made) return;   /* then the write is not compared: a check gives up no more than that */
        memset(made + c->n_made, 0, (size_t)(n - c->n_made) * sizeof *made);
        c->made = made, c->n_made = n;
    }
    tide_capture = NULL;
    c->made[id] = copy_of(e->values[id].t);
    tide_capture = e;
}

void tide_check_on_node(tide_graph * e) {
    struct tide_check * c = e->check;
    for (; c->seen < e->n_nodes; c->seen++)
        if (!c->found) step(e, c, c->seen);
}

/* -- the report ------------------------------------------------------------------------------------ */

static const char * line(const char * origin) { return origin[0] ? origin : "an unknown line"; }

/* "op `mul_` at x.lua:15": a node as the report names it (in place: the name Lua calls it by). */
static void name(int32_t kind, int32_t op, bool in_place, const char * origin, char * buf, size_t n) {
    snprintf(buf, n, "op `%s%s` at %s", tide_graph_node_name(kind, op), in_place ? "_" : "", line(origin));
}

/* "`mul clamp tanh` ending at x.lua:15": a fused node's ops. */
static void name_fused(const tide_gnode * n, char * buf, size_t size) {
    size_t used = (size_t)snprintf(buf, size, "`");
    for (int32_t i = 0; i < n->fused->n_steps && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? " " : "", tide_op_name(n->fused->steps[i].c.op));
    if (used < size) snprintf(buf + used, size - used, "` ending at %s", line(n->origin));
}

static void report_path(const tide_graph * e, const struct tide_check * c, char * out, size_t size) {
    const tide_graph * g = c->g;
    static const char * why = "(Lua code that branches on something that changed since capture)";
    char eager[192] = "";
    if (c->at < e->n_nodes) {
        const tide_gnode * r = &e->nodes[c->at];
        name(r->kind, r->op, r->into >= 0, r->origin, eager, sizeof eager);
    }
    if (c->at >= e->n_nodes)
        snprintf(out, size, "the eager run made %d ops where the capture made %d %s", e->n_nodes, g->n_trace, why);
    else if (c->at >= g->n_trace)
        snprintf(out, size, "the eager run went on after the capture's %d ops, with %s %s", g->n_trace, eager, why);
    else {
        int32_t code = g->trace[c->at];
        snprintf(out, size, "the eager run took another path at its op %d, %s, where the capture had `%s%s` %s",
                 c->at + 1, eager, tide_graph_node_name(code & 7, ((code >> 3) & 0x1ffff) - 64),
                 (code >> 20) & 1 ? "_" : "", why);
    }
}

static void report(const tide_graph * e, const struct tide_check * c, char * out, size_t size) {
    const tide_graph * g = c->g;
    if (c->found == FOUND_NONE || c->found == FOUND_ERROR) {
        snprintf(out, size, "%s", c->found == FOUND_ERROR ? c->msg : "");
        return;
    }
    if (c->found == FOUND_PATH) {
        report_path(e, c, out, size);
        return;
    }
    const tide_gvalue * val = &g->values[c->value];
    const tide_gnode *  rec = &e->nodes[c->at];
    char v[128], what[192], by[300], inputs[64] = "", params[256] = "", fused[192];
    char shape[96];
    snprintf(v, sizeof v, "%s %s", tide_dtype_name(val->dtype), tide_dims_str(val->ndim, val->sizes, shape, sizeof shape));
    if (c->meta) snprintf(by, sizeof by, "is %s where the eager run's is %s", v, c->eager_meta);
    else snprintf(by, sizeof by, "differs from the eager run by %.3g", c->by);
    if (c->found == FOUND_INPUT) {
        name(rec->kind, rec->op, rec->into >= 0, rec->origin, what, sizeof what);
        if (val->kind == TIDE_GV_CONST && val->t && (val->t->flags & TIDE_TENSOR_WRAPPED_NUMBER) && !c->meta)
            snprintf(out, size, "%s reads a Lua number that has changed since capture (a constant of the graph: "
                     "%.17g then, %.17g now)", what, c->then_v, c->now_v);
        else if (val->kind == TIDE_GV_CONST)
            snprintf(out, size, "%s reads value %%%d (%s, made from Lua data during capture: a constant of the "
                     "graph), which %s", what, c->value, v, by);
        else if (val->kind == TIDE_GV_ARG)
            snprintf(out, size, "%s reads argument %d (value %%%d, %s), which %s", what, val->arg + 1, c->value, v, by);
        else
            snprintf(out, size, "%s reads value %%%d (a %s tensor bound by reference), which %s", what, c->value, v, by);
        return;
    }
    if (c->node < 0) {   /* a folded constant */
        name(rec->kind, rec->op, false, rec->origin, what, sizeof what);
        snprintf(out, size, "%s (value %%%d, %s) was computed once, at capture (its inputs were constants), and %s",
                 what, c->value, v, by);
        return;
    }
    const tide_gnode * n = &g->nodes[c->node];
    if (c->inputs_by > 0) snprintf(inputs, sizeof inputs, " to within %.3g", c->inputs_by);
    if (c->params[0]) snprintf(params, sizeof params, "; %s (a Lua number or option it was given has changed "
                               "since capture)", c->params);
    if (n->kind == TIDE_GN_FUSED) {
        name_fused(n, fused, sizeof fused);
        if (c->step >= 0) {
            const tide_gnode * r = &e->nodes[c->step_at];
            name(r->kind, r->op, false, r->origin, what, sizeof what);
            snprintf(out, size, "%s (one of the fused ops %s, which make value %%%d, %s) differs from the eager run "
                     "by %.3g; its inputs agree%s%s", what, fused, c->value, v, c->step_by, inputs, params);
        } else
            snprintf(out, size, "the result of the fused ops %s (value %%%d, %s) %s, though the same ops run one by "
                     "one agree and so do their inputs%s: fusing them changed the result", fused, c->value, v, by,
                     inputs);
        return;
    }
    name(n->kind, n->op, n->into >= 0, n->origin, what, sizeof what);
    if (n->into == c->value)
        snprintf(out, size, "%s (writing into value %%%d, %s) leaves a result that %s; its inputs agree%s%s", what,
                 c->value, v, by, inputs, params);
    else
        snprintf(out, size, "%s (value %%%d, %s) %s; its inputs agree%s%s", what, c->value, v, by, inputs, params);
}

tide_status tide_graph_check_end(tide_graph * e, tide_tensor ** outputs, char * text, size_t n) {
    struct tide_check * c = e->check;
    if (!c || tide_capture != e) return tide_error_set(TIDE_E_VALUE, "jit check: this thread is not running that check");
    tide_capture = NULL;
    e->capturing = 0;
    const tide_graph * g = c->g;
    if (!c->found && e->n_nodes < g->n_trace) c->found = FOUND_PATH, c->at = e->n_nodes;
    for (; c->next < g->n_nodes && !c->failed; c->next++)   /* the rest, unchecked */
        if (run_node(c, c->next) == TIDE_OK) tide_graph_release_inputs(c->g, c->t, c->next);
    for (int32_t i = 0; i < g->n_outputs; i++) {
        outputs[i] = c->failed ? NULL : c->t[g->outputs[i]];
        if (outputs[i]) tide_tensor_retain(outputs[i]);
    }
    if (text && n) report(e, c, text, n);
    for (int32_t id = 0; id < g->n_values; id++) tide_tensor_release(c->t[id]), c->t[id] = NULL;
    return TIDE_OK;
}

tide_tensor * tide_graph_check_copy(tide_graph * e, tide_tensor * t) { return e->check ? bound(e->check, t) : t; }

void tide_check_free(struct tide_check * c) {
    if (!c) return;
    if (c->t)
        for (int32_t id = 0; id < c->g->n_values; id++) tide_tensor_release(c->t[id]);
    for (int32_t i = 0; i < 2 * c->n_copies; i++) tide_tensor_release(c->copies[i]);
    for (int32_t i = 0; i < c->n_made; i++) tide_tensor_release(c->made[i]);
    free(c->t), free(c->diff), free(c->by_seq), free(c->first), free(c->copies), free(c->made);
    free(c);
}
