/*
 * graph.c - captured graphs: recording what a thread's ops, views and
 * autograd do between tide_graph_capture_begin and _end, and replaying the
 * recording on new arguments without the code that made it. Replay issues
 * each node through tide_op_call, so the engine schedules it as any op
 * (asynchronously, independent branches in parallel). Optimisation passes
 * over the recording belong in pass_*.c files, not here.
 */
#include "pass.h"
#include "../ops/cpu/kernels.h"
#include "fuse_cuda.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

_Thread_local tide_graph * tide_capture;
static atomic_int          capture_counter;

static void fail(tide_graph * g, tide_status st, const char * msg) {
    if (g->error != TIDE_OK) return;
    g->error = st;
    snprintf(g->error_msg, sizeof g->error_msg, "%s", msg);
}

/* -- the pointer -> value map (capture only) --------------------------------------------------- */

static uint64_t hash_ptr(const void * p) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

static int32_t map_get(const tide_graph * g, const tide_tensor * t) {
    if (!g->cap_map) return -1;
    for (uint64_t i = hash_ptr(t) & (uint64_t)(g->cap_map - 1);; i = (i + 1) & (uint64_t)(g->cap_map - 1)) {
        if (!g->keys[i]) return -1;
        if (g->keys[i] == t) return g->ids[i];
    }
}

static bool map_put(tide_graph * g, tide_tensor * t, int32_t id) {
    if (2 * (g->n_map + 1) > g->cap_map) {
        int32_t        cap  = g->cap_map ? 2 * g->cap_map : 256;
        tide_tensor ** keys = calloc((size_t)cap, sizeof *keys);
        int32_t *      ids  = calloc((size_t)cap, sizeof *ids);
        if (!keys || !ids) {
            free(keys), free(ids);
            return false;
        }
        tide_tensor ** old_keys = g->keys;
        int32_t *      old_ids = g->ids, old_cap = g->cap_map;
        g->keys = keys, g->ids = ids, g->cap_map = cap, g->n_map = 0;
        for (int32_t i = 0; i < old_cap; i++)
            if (old_keys[i]) map_put(g, old_keys[i], old_ids[i]);
        free(old_keys), free(old_ids);
    }
    uint64_t i = hash_ptr(t) & (uint64_t)(g->cap_map - 1);
    while (g->keys[i] && g->keys[i] != t) i = (i + 1) & (uint64_t)(g->cap_map - 1);
    if (!g->keys[i]) g->n_map++;
    g->keys[i] = t;
    g->ids[i]  = id;
    return true;
}

/* -- values and nodes ------------------------------------------------------------------------- */

static int32_t new_value(tide_graph * g, int32_t kind, tide_tensor * t) {
    if (g->n_values == g->cap_values) {
        int32_t       cap = g->cap_values ? 2 * g->cap_values : 64;
        tide_gvalue * v   = realloc(g->values, (size_t)cap * sizeof *v);
        if (!v) return -1;
        g->values = v, g->cap_values = cap;
    }
    tide_gvalue * v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->kind  = kind;
    v->node  = -1;
    v->arg   = -1;
    v->seq   = -1;
    v->ndim  = t->ndim;
    v->dtype = t->dtype_id;
    v->dev   = t->dev;
    memcpy(v->sizes, t->sizes, sizeof v->sizes);
    v->t = t;
    tide_tensor_retain(t);
    if (!map_put(g, t, g->n_values)) {
        tide_tensor_release(t);
        return -1;
    }
    return g->n_values++;
}

/* The value of a tensor an op reads: known, or an external input (or, when
 * it was made during this capture by something that recorded nothing, an
 * empty tensor: what tide_tensor_empty gives). */
static int32_t value_of(tide_graph * g, tide_tensor * t);

static tide_gnode * new_node(tide_graph * g, int32_t kind, int32_t op) {
    if (g->n_nodes == g->cap_nodes) {
        int32_t      cap = g->cap_nodes ? 2 * g->cap_nodes : 64;
        tide_gnode * n   = realloc(g->nodes, (size_t)cap * sizeof *n);
        if (!n) return NULL;
        g->nodes = n, g->cap_nodes = cap;
    }
    tide_gnode * n = &g->nodes[g->n_nodes++];
    memset(n, 0, sizeof *n);
    n->kind    = kind;
    n->op      = op;
    n->grad_on = !tide_grad_off;
    n->into    = -1;
    n->p.dtype = -1;
    n->seq     = g->n_nodes - 1;
    return n;
}

static int32_t value_of(tide_graph * g, tide_tensor * t) {
    int32_t id = map_get(g, t);
    if (id >= 0) return id;
    if (t->capture_id == (int32_t)g->serial) {   /* made here, outside any op: tide_tensor_empty */
        id = new_value(g, TIDE_GV_NODE, t);
        tide_gnode * n = id >= 0 ? new_node(g, TIDE_GN_EMPTY, -1) : NULL;
        if (!n) return -1;
        n->n_out = 1;
        n->out[0] = id;
        g->values[id].node = g->n_nodes - 1;
        return id;
    }
    /* a wrapped host number (Lua's 2 in x * 2, cached by the binding) never changes: a constant */
    return new_value(g, (t->flags & TIDE_TENSOR_WRAPPED_NUMBER) ? TIDE_GV_CONST : TIDE_GV_EXTERN, t);
}

#define OOM(g) fail((g), TIDE_E_OOM, "jit capture: out of memory recording the graph")

static void record_op(tide_graph * g, const tide_opcall * c, tide_tensor * out) {
    if (g->error != TIDE_OK) return;
    int32_t ins[TIDE_OP_MAX_IN];
    for (int32_t i = 0; i < c->n_in; i++)
        if ((ins[i] = value_of(g, c->in[i])) < 0) return OOM(g);
    int32_t into = out ? value_of(g, out) : -1;
    if (out && into < 0) return OOM(g);
    tide_gnode * n = new_node(g, TIDE_GN_OP, c->op);
    if (!n) return OOM(g);
    int32_t self = g->n_nodes - 1;
    n->n_in = c->n_in;
    memcpy(n->in, ins, sizeof ins);
    n->p    = c->p;
    n->into = into;
    n->compute_dtype = c->compute_dtype;
    n->rng_seed      = c->rng_seed;
    n->rng_offset    = c->rng_offset;
    n->records_grad  = !tide_grad_off && out && tide_needs_grad(out);   /* as tide_op_call decides */
    for (int32_t i = 0; i < c->n_in && !tide_grad_off; i++) n->records_grad |= tide_needs_grad(c->in[i]);
    if (out) return;
    n->n_out = c->n_out;
    for (int32_t i = 0; i < c->n_out; i++) {
        int32_t id = new_value(g, TIDE_GV_NODE, c->out[i]);
        if (id < 0) return OOM(g);
        g->values[id].node = self;
        g->nodes[self].out[i] = id;   /* new_value may not move nodes, but keep one way of writing */
    }
}

void tide_graph_on_op(const tide_opcall * c, tide_tensor * out) {
    tide_graph * g = tide_capture;
    record_op(g, c, out);
    if (g->check) tide_check_on_node(g);
}

void tide_graph_on_view(tide_tensor * src, tide_tensor * v, int32_t kind, const int64_t * ints, int32_t n_ints) {
    tide_graph * g = tide_capture;
    if (g->error != TIDE_OK) return;
    int32_t in = value_of(g, src);
    if (in < 0) return OOM(g);
    tide_gnode * n = new_node(g, TIDE_GN_VIEW, kind);
    if (!n) return OOM(g);
    int32_t self = g->n_nodes - 1;
    n->n_in  = 1;
    n->in[0] = in;
    if (kind == TIDE_VIEW_STRIDED) {   /* sizes, strides, and the offset from the source's */
        n->p.n_ints = 2 * v->ndim + 1;
        for (int32_t i = 0; i < v->ndim; i++) n->p.ints[i] = v->sizes[i], n->p.ints[v->ndim + i] = v->strides[i];
        n->p.ints[2 * v->ndim] = v->offset - src->offset;
        n->p.keepdim           = v->ndim;
    } else {
        n->p.n_ints = n_ints;
        for (int32_t i = 0; i < n_ints; i++) n->p.ints[i] = ints[i];
    }
    int32_t id = new_value(g, TIDE_GV_NODE, v);
    if (id < 0) return OOM(g);
    g->values[id].node  = self;
    g->nodes[self].n_out = 1;
    g->nodes[self].out[0] = id;
    if (g->check) tide_check_on_node(g);
}

void tide_graph_on_const(tide_tensor * t) {
    tide_graph * g = tide_capture;
    if (g->error != TIDE_OK) return;
    int32_t id = new_value(g, TIDE_GV_CONST, t);
    if (id < 0) return OOM(g);
    /* Data Tide owns (not a host's blob, which stays the host's) may be written in
     * place later by the function; a replay must start from what it held when made,
     * as each eager call makes it anew. Its contents are ready: written on the host. */
    if (!(t->flags & TIDE_TENSOR_WRAPPED_NUMBER) && !t->storage->free_fn && tide_tensor_is_contiguous(t)) {
        tide_capture = NULL;
        tide_tensor * s = tide_tensor_empty(t->ndim, t->sizes, t->dtype_id, t->dev);
        tide_capture = g;
        if (!s) return OOM(g);
        memcpy(tide_tensor_ptr(s), tide_tensor_ptr(t), tide_tensor_nbytes(t));
        g->values[id].init = s;
    }
    if (g->check) tide_check_on_const(g, id);
}

void tide_graph_on_set_grad(tide_tensor * leaf, tide_tensor * grad) {
    tide_graph * g = tide_capture;
    if (g->error != TIDE_OK) return;
    int32_t l = value_of(g, leaf), v = grad ? value_of(g, grad) : -1;
    if (l < 0 || (grad && v < 0)) return OOM(g);
    tide_gnode * n = new_node(g, TIDE_GN_SET_GRAD, -1);
    if (!n) return OOM(g);
    n->n_in  = grad ? 2 : 1;
    n->in[0] = l;
    n->in[1] = v;
    if (g->check) tide_check_on_node(g);
}

void tide_graph_on_backward(void) { tide_capture->had_backward = 1; }

tide_status tide_graph_on_read(const char * what) {
    tide_graph * g = tide_capture;
    if (g->check) return TIDE_OK;   /* the eager run of a check may read what it likes */
    char msg[512];
    snprintf(msg, sizeof msg, "jit capture: %s reads a tensor's value while the function is being captured, "
             "and a replay could not read it again; compute with tensors instead (tide.where, masks), or pass "
             "the value as a static argument", what);
    fail(g, TIDE_E_VALUE, msg);
    return tide_error_set(TIDE_E_VALUE, "%s", msg);
}

/* -- the public API --------------------------------------------------------------------------- */

tide_graph * tide_graph_capture_begin(void) {
    if (tide_capture) {
        tide_error_set(TIDE_E_VALUE, "jit capture: this thread is already capturing a graph");
        return NULL;
    }
    tide_graph * g = calloc(1, sizeof *g);
    if (g) atomic_init(&g->refs, 1);
    if (!g) {
        tide_error_set(TIDE_E_OOM, "jit capture: out of memory");
        return NULL;
    }
    int32_t serial = atomic_fetch_add(&capture_counter, 1) + 1;
    if (serial <= 0) serial = 1;   /* after 2^31 captures: an old tensor could be taken for new; harmless */
    g->serial    = (uint64_t)serial;
    g->capturing = 1;
    tide_capture = g;
    return g;
}

tide_status tide_graph_add_arg(tide_graph * g, tide_tensor * t) {
    if (!g->capturing) return tide_error_set(TIDE_E_VALUE, "jit capture: arguments are added while capturing");
    int32_t id = map_get(g, t);
    if (id >= 0 && !(g->values[id].kind == TIDE_GV_CONST && t->capture_id == (int32_t)g->serial))
        return tide_error_set(TIDE_E_VALUE, "jit capture: argument %d is the same tensor as an earlier one; pass "
                              "it once", g->n_args + 1);
    if (id >= 0) g->values[id].kind = TIDE_GV_ARG;   /* a host number the caller just wrapped */
    else id = new_value(g, TIDE_GV_ARG, t);
    if (id < 0) return tide_error_set(TIDE_E_OOM, "jit capture: out of memory");
    g->values[id].arg = g->n_args++;
    return TIDE_OK;
}

tide_status tide_graph_add_output(tide_graph * g, tide_tensor * t) {
    int32_t id = map_get(g, t);
    if (id < 0) {   /* a tensor the function returns without having made or read it */
        id = new_value(g, TIDE_GV_EXTERN, t);
        if (id < 0) return tide_error_set(TIDE_E_OOM, "jit capture: out of memory");
    }
    if (g->n_outputs == g->cap_outputs) {
        int32_t   cap = g->cap_outputs ? 2 * g->cap_outputs : 8;
        int32_t * o   = realloc(g->outputs, (size_t)cap * sizeof *o);
        if (!o) return tide_error_set(TIDE_E_OOM, "jit capture: out of memory");
        g->outputs = o, g->cap_outputs = cap;
    }
    g->outputs[g->n_outputs++] = id;
    return TIDE_OK;
}

tide_status tide_graph_set_origin(tide_graph * g, const char * where) {
    for (int32_t i = g->n_origin; i < g->n_nodes; i++)
        snprintf(g->nodes[i].origin, sizeof g->nodes[i].origin, "%s", where);
    g->n_origin = g->n_nodes;
    return TIDE_OK;
}

static tide_status plan(tide_graph * g);

/* Whether value id is still needed after capture: an output, a gradient set on a leaf. */
static bool kept(const tide_graph * g, int32_t id) {
    for (int32_t i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == id) return true;
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].kind == TIDE_GN_SET_GRAD && g->nodes[i].n_in == 2 && g->nodes[i].in[1] == id) return true;
    return false;
}

int32_t tide_graph_trace_code(const tide_gnode * n) {
    return n->kind | (n->op + 64) << 3 | (n->into >= 0) << 20 | n->n_in << 21;
}

/* Gives every value its stable id (seq, slot) and records the trace, before any
 * pass renumbers the nodes; false when out of memory. */
static bool number_values(tide_graph * g) {
    free(g->trace);
    g->trace   = malloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1) * sizeof *g->trace);
    g->n_trace = g->trace ? g->n_nodes : 0;
    if (!g->trace) return false;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const tide_gnode * n = &g->nodes[i];
        g->trace[i] = tide_graph_trace_code(n);
        for (int32_t k = 0; k < n->n_out; k++) g->values[n->out[k]].seq = i, g->values[n->out[k]].slot = k;
        for (int32_t k = 0; k <= n->n_in; k++) {
            int32_t id = k < n->n_in ? n->in[k] : n->into;
            if (id >= 0 && g->values[id].seq < 0) g->values[id].seq = i, g->values[id].slot = -1 - (k < n->n_in ? k : TIDE_OP_MAX_IN);
        }
    }
    return true;
}

/* The references to captured tensors (saved tensors, leaves) that autograd
 * histories hold and that are no stale copies: the results' (what their
 * backward needs), and those of values only the graph holds (dead ends, as an
 * unused x:abs() of a tensor that requires grad), which die with them when the
 * graph lets them go below. One entry per reference (n of them; malloc'd, NULL
 * if none). */
static tide_tensor ** history_holds(const tide_graph * g, int64_t * n) {
    tide_tensor ** roots   = malloc((size_t)(g->n_outputs + g->n_values + 1) * sizeof *roots);
    int32_t        n_roots = 0;
    *n = 0;
    if (!roots) return NULL;
    for (int32_t i = 0; i < g->n_outputs && !g->had_backward; i++) roots[n_roots++] = g->values[g->outputs[i]].t;
    for (int32_t id = 0; id < g->n_values; id++) {
        const tide_gvalue * v = &g->values[id];
        if (v->kind == TIDE_GV_NODE && v->t && __atomic_load_n(&v->t->refcount, __ATOMIC_ACQUIRE) == 1)
            roots[n_roots++] = v->t;
    }
    int64_t        want  = n_roots ? tide_autograd_held(roots, n_roots, NULL, 0) : 0;
    tide_tensor ** holds = want ? malloc((size_t)want * sizeof *holds) : NULL;
    *n = holds ? tide_autograd_held(roots, n_roots, holds, want) : 0;
    free(roots);
    return holds;
}

tide_status tide_graph_capture_end(tide_graph * g, char * leaks, size_t n_leaks) {
    if (tide_capture != g) return tide_error_set(TIDE_E_VALUE, "jit capture: this thread is not capturing that graph");
    tide_capture = NULL;
    g->capturing = 0;
    tide_status st = tide_sync();   /* the engine lets go of what it held for the captured ops */
    if (g->error != TIDE_OK) st = g->error;
    if (st == TIDE_OK && !number_values(g)) fail(g, st = TIDE_E_OOM, "jit capture: out of memory");
    /* Tensors made during capture that someone besides the graph still holds, and that are
     * neither returned nor gradients: a replay makes new ones, and the held ones go stale. */
    size_t used = 0;
    if (leaks && n_leaks) leaks[0] = 0;
    int64_t        n_holds = 0;
    tide_tensor ** holds   = history_holds(g, &n_holds);
    for (int32_t id = 0; id < g->n_values; id++) {
        tide_gvalue * v = &g->values[id];
        if (v->kind == TIDE_GV_ARG) {   /* replay binds new ones: the graph does not keep these alive */
            tide_tensor_release(v->t);
            v->t = NULL;
        }
        if (v->kind != TIDE_GV_NODE || !v->t) continue;
        int32_t others = __atomic_load_n(&v->t->refcount, __ATOMIC_ACQUIRE) - 1;
        for (int64_t k = 0; k < n_holds && others > 0; k++) others -= holds[k] == v->t;
        if (others > 0 && !kept(g, id) && leaks && used + 1 < n_leaks) {
            const tide_gnode * n = &g->nodes[v->node];
            char shape[128];
            used += (size_t)snprintf(leaks + used, n_leaks - used, "%s%s %s made by '%s' at %s",
                                     used ? "; " : "", tide_dtype_name(v->dtype),
                                     tide_dims_str(v->ndim, v->sizes, shape, sizeof shape),
                                     n->kind == TIDE_GN_OP ? tide_op_name(n->op)
                                     : n->kind == TIDE_GN_EMPTY ? "empty" : "a view",
                                     n->origin[0] ? n->origin : "?");
            if (used >= n_leaks) used = n_leaks - 1;
        }
    }
    free(holds);
    /* A constant's first contents matter only where the graph writes it in place. */
    for (int32_t id = 0; id < g->n_values; id++) {
        tide_gvalue * v = &g->values[id];
        bool written = false;
        for (int32_t i = 0; i < g->n_nodes && v->init && !written; i++)
            written = g->nodes[i].into >= 0 && tide_graph_base(g, g->nodes[i].into) == id;
        if (v->init && !written) {
            tide_tensor_release(v->init);
            v->init = NULL;
        }
    }
    /* What depends only on constants keeps its captured value, for constant folding
     * (tide_graph_optimize decides); every other captured tensor is let go. */
    tide_pass_mark_constants(g);
    for (int32_t id = 0; id < g->n_values; id++) {
        tide_gvalue * v = &g->values[id];
        if (v->kind != TIDE_GV_NODE || !v->t || v->constant) continue;
        tide_tensor_release(v->t);
        v->t = NULL;
    }
    free(g->keys), free(g->ids);
    g->keys = NULL, g->ids = NULL, g->cap_map = g->n_map = 0;
    if (st != TIDE_OK) return tide_error_set(st, "%s", g->error != TIDE_OK ? g->error_msg : tide_last_error());
    return plan(g);
}

/* -- rewriting helpers for the passes ---------------------------------------------------------- */

int32_t tide_graph_base(const tide_graph * g, int32_t id) {
    for (;;) {
        const tide_gvalue * v = &g->values[id];
        if (v->kind != TIDE_GV_NODE || v->node < 0 || g->nodes[v->node].kind != TIDE_GN_VIEW) return id;
        id = g->nodes[v->node].in[0];
    }
}

bool tide_graph_node_is_random(const tide_gnode * n) {
    tide_op_info info;
    return n->kind == TIDE_GN_OP && tide_op_get_info(n->op, &info) == TIDE_OK && (info.flags & TIDE_OPF_RANDOM);
}

void tide_graph_replace(tide_graph * g, int32_t from, int32_t to, int32_t from_node) {
    for (int32_t i = from_node; i < g->n_nodes; i++) {
        tide_gnode * n = &g->nodes[i];
        for (int32_t k = 0; k < n->n_in; k++)
            if (n->in[k] == from) n->in[k] = to;
        if (n->into == from) n->into = to;
    }
    for (int32_t i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == from) g->outputs[i] = to;
}

int32_t tide_graph_compact(tide_graph * g, const bool * keep) {
    int32_t * at = malloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1) * sizeof *at), n = 0;
    if (!at) return -1;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        at[i] = keep[i] ? n : -1;
        if (keep[i]) g->nodes[n++] = g->nodes[i];
        else free(g->nodes[i].fused);
    }
    for (int32_t id = 0; id < g->n_values; id++)
        if (g->values[id].kind == TIDE_GV_NODE && g->values[id].node >= 0) g->values[id].node = at[g->values[id].node];
    int32_t removed = g->n_nodes - n;
    g->n_nodes = n;
    g->n_origin = n;
    free(at);
    return removed;
}

/* Replay lets go of each value after the last node that reads it, so that its
 * memory can serve the next ones, as the collector lets eager code's go. */
static tide_status plan(tide_graph * g) {
    tide_exec_release(g->exec);   /* the graph changed: plan again at the next replay */
    g->exec       = NULL;
    g->exec_tried = 0;
    free(g->last_use);
    g->last_use = malloc((size_t)(g->n_values > 0 ? g->n_values : 1) * sizeof *g->last_use);
    if (!g->last_use) return tide_error_set(TIDE_E_OOM, "jit capture: out of memory");
    for (int32_t id = 0; id < g->n_values; id++) g->last_use[id] = -1;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const tide_gnode * n = &g->nodes[i];
        for (int32_t k = 0; k < n->n_in; k++) g->last_use[n->in[k]] = i;
        if (n->into >= 0) g->last_use[n->into] = i;
    }
    return TIDE_OK;
}

tide_status tide_graph_optimize(tide_graph * g, uint32_t passes, int32_t * changed) {
    if (g->capturing) return tide_error_set(TIDE_E_VALUE, "jit optimize: the graph is still being captured");
    int32_t total = 0;
    int32_t r = tide_pass_fold(g, (passes & TIDE_GRAPH_PASS_FOLD) != 0);
    if (r < 0) return tide_error_set(TIDE_E_OOM, "jit optimize: out of memory");
    total += r;
    if (passes & TIDE_GRAPH_PASS_SIMPLIFY) {
        if ((r = tide_pass_simplify(g)) < 0) return tide_error_set(TIDE_E_OOM, "jit optimize: out of memory");
        total += r;
    }
    for (int round = 0; round < 4; round++) {   /* CSE can leave dead code behind, and DCE expose more CSE */
        int32_t n = 0;
        if ((passes & TIDE_GRAPH_PASS_CSE) && (r = tide_pass_cse(g)) != 0) {
            if (r < 0) return tide_error_set(TIDE_E_OOM, "jit optimize: out of memory");
            n += r;
        }
        if ((passes & TIDE_GRAPH_PASS_DCE) && (r = tide_pass_dce(g)) != 0) {
            if (r < 0) return tide_error_set(TIDE_E_OOM, "jit optimize: out of memory");
            n += r;
        }
        total += n;
        if (!n) break;
    }
    if (passes & TIDE_GRAPH_PASS_FUSE) {
        r = tide_pass_fuse(g);
        if (r < 0) return tide_error_set(TIDE_E_OOM, "jit optimize: out of memory");
        total += r;
    }
    if (changed) *changed = total;
    g->exec_off = !(passes & TIDE_GRAPH_PASS_PLAN);
    return plan(g);
}

void tide_graph_release(tide_graph * g) {
    if (!g) return;
    if (tide_capture == g) tide_capture = NULL;
    /* a node-by-node replay's fused tasks read the nodes' chains until they ran */
    if (atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) != 1) return;
    tide_exec_release(g->exec);
    for (int32_t id = 0; id < g->n_values; id++) {
        tide_tensor_release(g->values[id].t);
        tide_tensor_release(g->values[id].init);
    }
    for (int32_t i = 0; i < g->n_nodes; i++) free(g->nodes[i].fused);
    for (int32_t k = 0; k < 2; k++) {
        for (int32_t i = 0; i < g->n_fence[k]; i++) tide_tensor_release(g->fence[k][i]);
        free(g->fence[k]);
    }
    free(g->values), free(g->nodes), free(g->outputs), free(g->keys), free(g->ids), free(g->text), free(g->last_use);
    free(g->written), free(g->externs), free(g->trace);
    tide_check_free(g->check);
    free(g);
}

int32_t tide_graph_num_nodes(const tide_graph * g) { return g->n_nodes; }
int32_t tide_graph_num_outputs(const tide_graph * g) { return g->n_outputs; }
int32_t tide_graph_num_args(const tide_graph * g) { return g->n_args; }

/* -- replay ------------------------------------------------------------------------------------ */

static tide_tensor * make_view(const tide_gnode * n, const tide_gvalue * v, tide_tensor * src) {
    const int64_t * a = n->p.ints;
    switch (n->op) {
    case TIDE_VIEW_ALIAS:   return tide_tensor_detach(src);
    case TIDE_VIEW_RESHAPE: return tide_tensor_view(src, v->ndim, v->sizes);
    case TIDE_VIEW_EXPAND:  return tide_tensor_expand(src, v->ndim, v->sizes);
    case TIDE_VIEW_PERMUTE: return tide_tensor_permute(src, n->p.n_ints, a);
    case TIDE_VIEW_SLICE:
        return a[3] == 0 ? tide_tensor_select(src, (int32_t)a[0], a[1])
                         : tide_tensor_slice(src, (int32_t)a[0], a[1], a[2], a[3]);
    case TIDE_VIEW_STRIDED: {
        int32_t nd = n->p.keepdim;
        return tide_tensor_as_strided(src, nd, a, a + nd, src->offset + a[2 * nd]);
    }
    default: return NULL;
    }
}

tide_tensor * tide_graph_make_view(const tide_gnode * n, const tide_gvalue * v, tide_tensor * src) {
    tide_tensor * r = make_view(n, v, src);
    if (!r || (r->ndim == v->ndim && !memcmp(r->sizes, v->sizes, (size_t)v->ndim * sizeof *v->sizes))) return r;
    /* A slice clamps where a view would fail: a node fed another input than its
     * own (a pass's mistake) must not pass on a wrong shape silently. */
    char x[128], y[128], z[128];
    tide_error_set(TIDE_E_INTERNAL, "jit replay: a %s view of %s made %s where the capture made %s",
                   tide_graph_node_name(n->kind, n->op), tide_shape_str(src, x, sizeof x),
                   tide_shape_str(r, y, sizeof y), tide_dims_str(v->ndim, v->sizes, z, sizeof z));
    tide_tensor_release(r);
    return NULL;
}

/* -- fused kernels as engine tasks -- */

typedef struct {
    tide_graph *       g;   /* held while the task is pending: f is one of its nodes' */
    const tide_fused * f;
    tide_tensor *      ext[TIDE_OP_MAX_IN];
    tide_tensor *      out;
} fused_task;

static tide_status run_fused(void * ctx) {
    fused_task * ft = ctx;
    if (ft->out->dev.type == TIDE_DEVICE_CUDA) return tide_fuse_cuda_launch(ft->f, ft->ext, ft->out);
    return tide_ew_run_fused(ft->f, ft->ext, ft->out);
}
static void keep_fused(void * ctx) {
    fused_task * ft = ctx;
    atomic_fetch_add_explicit(&ft->g->refs, 1, memory_order_relaxed);
    for (int32_t k = 0; k < ft->f->n_ext; k++) tide_tensor_retain(ft->ext[k]);
    tide_tensor_retain(ft->out);
}
static void drop_fused(void * ctx) {
    fused_task * ft = ctx;
    for (int32_t k = 0; k < ft->f->n_ext; k++) tide_tensor_release(ft->ext[k]);
    tide_tensor_release(ft->out);
    tide_graph_release(ft->g);
}
static void describe_fused(const void * ctx, char * buf, size_t n) {
    const fused_task * ft = ctx;
    size_t used = 0;
    buf[0] = 0;
    for (int32_t i = 0; i < ft->f->n_steps && used + 2 < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? " " : "", tide_op_name(ft->f->steps[i].c.op));
}

tide_status tide_graph_run_fused(const tide_graph * g, const tide_gnode * n, tide_tensor * const * in,
                                 tide_tensor * out) {
    fused_task ft = {(tide_graph *)g, n->fused, {0}, out};
    tide_storage * reads[TIDE_OP_MAX_IN], * writes[1] = {out->storage};
    for (int32_t k = 0; k < n->n_in; k++) ft.ext[k] = in[k], reads[k] = in[k]->storage;
    int64_t work = n->fused->n_steps;   /* elements the steps run over (more than out's when reducing) */
    for (int32_t d = 0; d < n->fused->ndim; d++) work *= n->fused->sizes[d];
    tide_engine_task task = {run_fused, &ft, sizeof ft, keep_fused, drop_fused, "fused", work, describe_fused, NULL, 0};
    return tide_engine_push(&task, reads, n->n_in, writes, 1, out->dev);
}

/* Releases value id's tensor if node i was its last reader and nothing else needs it. */
static void release_after(const tide_graph * g, tide_tensor ** t, int32_t id, int32_t i) {
    if (g->last_use[id] != i || g->values[id].kind != TIDE_GV_NODE || !t[id]) return;
    for (int32_t k = 0; k < g->n_outputs; k++)
        if (g->outputs[k] == id) return;
    tide_tensor_release(t[id]);
    t[id] = NULL;
}

void tide_graph_release_inputs(const tide_graph * g, tide_tensor ** t, int32_t i) {
    const tide_gnode * n = &g->nodes[i];
    for (int32_t k = 0; k < n->n_in; k++) release_after(g, t, n->in[k], i);
    if (n->into >= 0) release_after(g, t, n->into, i);
}

/* A graph that ran its own backward needs no autograd history at replay: its
 * gradients are ops of the graph. Otherwise each op has the grad mode it had,
 * so outputs carry history for a backward outside. */
tide_status tide_graph_run_node(const tide_graph * g, int32_t i, tide_tensor ** t, tide_tensor ** fence,
                                int32_t * n_fence) {
    const tide_gnode * n   = &g->nodes[i];
    int32_t            off = tide_grad_off;
    tide_status        st  = TIDE_OK;
    tide_grad_off = g->had_backward || !n->grad_on;
    tide_tensor * in[TIDE_OP_MAX_IN], * out[TIDE_OP_MAX_OUT] = {0};
    for (int32_t k = 0; k < n->n_in; k++) in[k] = n->in[k] >= 0 ? t[n->in[k]] : NULL;
    switch (n->kind) {
    case TIDE_GN_OP: {
        /* an op of no inputs makes its result where it did at capture */
        bool        made = n->n_in == 0 && n->into < 0;
        tide_device d0   = made ? tide_default_device_swap(g->values[n->out[0]].dev) : (tide_device){0, 0};
        st = tide_op_call(n->op, in, n->n_in, &n->p, out, n->into >= 0 ? t[n->into] : NULL);
        if (made) tide_default_device_swap(d0);
        if (st != TIDE_OK) break;
        if (n->into >= 0) {
            if (g->values[n->into].kind != TIDE_GV_NODE && fence) fence[(*n_fence)++] = out[0];
            else tide_tensor_release(out[0]);
            break;
        }
        for (int32_t k = 0; k < n->n_out; k++) t[n->out[k]] = out[k];
        break;
    }
    case TIDE_GN_VIEW: {
        tide_tensor * r = tide_graph_make_view(n, &g->values[n->out[0]], in[0]);
        if (!r) st = tide_last_error()[0] ? TIDE_E_SHAPE : TIDE_E_INTERNAL;
        t[n->out[0]] = r;
        break;
    }
    case TIDE_GN_FUSED: {
        if (n->into >= 0) {   /* updates value `into` in place, as an op node would */
            st = tide_graph_run_fused(g, n, in, t[n->into]);
            if (st == TIDE_OK) atomic_fetch_add_explicit(&t[n->into]->storage->version, 1, memory_order_relaxed);
            if (st == TIDE_OK && g->values[n->into].kind != TIDE_GV_NODE && fence) {
                tide_tensor_retain(t[n->into]);
                fence[(*n_fence)++] = t[n->into];
            }
            break;
        }
        const tide_gvalue * v = &g->values[n->out[0]];
        tide_tensor * r = tide_tensor_empty(v->ndim, v->sizes, v->dtype, v->dev);
        st = r ? tide_graph_run_fused(g, n, in, r) : TIDE_E_OOM;
        t[n->out[0]] = r;
        break;
    }
    case TIDE_GN_EMPTY: {
        const tide_gvalue * v = &g->values[n->out[0]];
        t[n->out[0]] = tide_tensor_empty(v->ndim, v->sizes, v->dtype, v->dev);
        if (!t[n->out[0]]) st = TIDE_E_OOM;
        break;
    }
    case TIDE_GN_SET_GRAD: {
        tide_tensor * old = in[0]->ag_grad;
        in[0]->ag_grad    = n->n_in == 2 ? in[1] : NULL;
        if (in[0]->ag_grad) tide_tensor_retain(in[0]->ag_grad);
        tide_tensor_release(old);
        break;
    }
    }
    tide_grad_off = off;
    return st;
}

/* The plan that replays g as one task, made on first use; NULL when g replays node by node. */
static tide_exec * exec_of(tide_graph * g) {
    if (!g->exec && !g->exec_tried && !g->capturing) {
        g->exec_tried = 1;
        if (g->exec_off) snprintf(g->exec_why, sizeof g->exec_why, "the plan pass is switched off");
        else g->exec = tide_exec_plan(g, g->exec_why, sizeof g->exec_why);
    }
    return g->exec;
}

tide_status tide_graph_replay(tide_graph * g, tide_tensor * const * args, int32_t n_args, tide_tensor ** outputs) {
    if (g->capturing) return tide_error_set(TIDE_E_VALUE, "jit replay: the graph is still being captured");
    if (n_args != g->n_args)
        return tide_error_set(TIDE_E_VALUE, "jit replay: the graph takes %d tensor arguments, %d given", g->n_args,
                              n_args);
    for (int32_t id = 0; id < g->n_values; id++) {
        const tide_gvalue * v = &g->values[id];
        if (v->kind != TIDE_GV_ARG) continue;
        const tide_tensor * a = args[v->arg];
        if (a->ndim != v->ndim || a->dtype_id != v->dtype || memcmp(a->sizes, v->sizes, (size_t)v->ndim * 8) ||
            a->dev.type != v->dev.type || a->dev.index != v->dev.index) {
            char x[128], y[128];
            return tide_error_set(TIDE_E_SHAPE, "jit replay: argument %d is %s %s but the graph was captured "
                                  "for %s %s", v->arg + 1, tide_dtype_name(a->dtype_id),
                                  tide_shape_str(a, x, sizeof x), tide_dtype_name(v->dtype),
                                  tide_dims_str(v->ndim, v->sizes, y, sizeof y));
        }
    }
    /* bound the replays in flight: wait for the one before the last */
    for (int32_t i = 0; i < g->n_fence[0]; i++) {
        tide_status w = tide_tensor_wait(g->fence[0][i]);
        if (w == TIDE_E_INTERRUPTED) return w;   /* poison is reported where the values are read */
    }
    for (int32_t i = 0; i < g->n_fence[0]; i++) tide_tensor_release(g->fence[0][i]);
    tide_tensor ** spare = g->fence[0];
    g->fence[0] = g->fence[1], g->n_fence[0] = g->n_fence[1];
    g->fence[1] = spare, g->n_fence[1] = 0;
    if (!g->fence[1]) g->fence[1] = malloc((size_t)(g->n_values + g->n_nodes + g->n_outputs + 1) * sizeof *g->fence[1]);
    if (!g->fence[1]) return tide_error_set(TIDE_E_OOM, "jit replay: out of memory");
    /* Inside another capture the ops must reach that capture one by one. */
    tide_exec * x = tide_capture ? NULL : exec_of(g);
    if (x && tide_exec_accepts(x, args)) return tide_exec_replay(x, args, outputs, g->fence[1], &g->n_fence[1]);

    tide_tensor ** t = calloc((size_t)(g->n_values > 0 ? g->n_values : 1), sizeof *t);
    if (!t) return tide_error_set(TIDE_E_OOM, "jit replay: out of memory");
    tide_status st = TIDE_OK;
    for (int32_t id = 0; id < g->n_values; id++) {
        const tide_gvalue * v = &g->values[id];
        if (v->init) {   /* a constant it writes in place starts from its first contents */
            tide_tensor * out[1];
            int32_t       off = tide_grad_off;
            tide_grad_off = 1;
            st = tide_op_call(TIDE_OP_copy, &v->init, 1, NULL, out, NULL);
            tide_grad_off = off;
            t[id] = st == TIDE_OK ? out[0] : NULL;
        } else if (v->kind == TIDE_GV_EXTERN || v->kind == TIDE_GV_CONST) {
            t[id] = v->t;
            tide_tensor_retain(t[id]);
        } else if (v->kind == TIDE_GV_ARG) {
            t[id] = args[v->arg];
            tide_tensor_retain(t[id]);
        }
    }
    for (int32_t i = 0; i < g->n_nodes && st == TIDE_OK; i++) {
        const tide_gnode * n = &g->nodes[i];
        st = tide_graph_run_node(g, i, t, tide_capture ? NULL : g->fence[1], &g->n_fence[1]);
        if (st != TIDE_OK && n->origin[0]) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s (replaying the op captured at %s)", tide_last_error(), n->origin);
            tide_error_set(st, "%s", msg);
        }
        tide_graph_release_inputs(g, t, i);
    }
    for (int32_t i = 0; i < g->n_outputs && st == TIDE_OK; i++) {
        outputs[i] = t[g->outputs[i]];
        tide_tensor_retain(outputs[i]);
        if (tide_capture) continue;   /* replayed inside another capture: that graph's replays are bounded */
        tide_tensor_retain(outputs[i]);
        g->fence[1][g->n_fence[1]++] = outputs[i];
    }
    for (int32_t id = 0; id < g->n_values; id++) tide_tensor_release(t[id]);
    free(t);
    return st;
}

/* -- description ------------------------------------------------------------------------------ */

const char * tide_graph_node_name(int32_t kind, int32_t op) {
    static const char * views[] = {"?", "view", "permute", "expand", "slice", "as_strided", "alias"};
    return kind == TIDE_GN_OP ? tide_op_name(op) : kind == TIDE_GN_VIEW ? views[-op]
         : kind == TIDE_GN_EMPTY ? "empty" : kind == TIDE_GN_FUSED ? "fused" : "set_grad";
}

typedef struct {
    char * s;
    size_t cap, used;
} text;

static void put(text * t, const char * fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text * t, const char * fmt, ...) {
    if (t->used + 1 >= t->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->s + t->used, t->cap - t->used, fmt, ap);
    va_end(ap);
    if (n > 0) t->used = t->used + (size_t)n < t->cap ? t->used + (size_t)n : t->cap - 1;
}

const char * tide_graph_describe(tide_graph * g) {
    size_t cap = 256 + (size_t)(g->n_nodes + g->n_values + g->n_outputs) * 192;
    char * s   = realloc(g->text, cap);
    if (!s) return "";
    g->text  = s;
    text out = {s, cap, 0};
    s[0]     = 0;
    static const char * kinds[] = {"extern", "arg", "node", "const"};
    for (int32_t id = 0; id < g->n_values; id++) {
        const tide_gvalue * v = &g->values[id];
        if (v->kind == TIDE_GV_NODE) continue;
        char shape[128];
        if (v->kind == TIDE_GV_ARG) put(&out, "%%%d = arg %d %s %s\n", id, v->arg + 1, tide_dtype_name(v->dtype),
                                        tide_dims_str(v->ndim, v->sizes, shape, sizeof shape));
        else put(&out, "%%%d = %s %s %s\n", id, kinds[v->kind], tide_dtype_name(v->dtype),
                 tide_dims_str(v->ndim, v->sizes, shape, sizeof shape));
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const tide_gnode * n = &g->nodes[i];
        const char * name = tide_graph_node_name(n->kind, n->op);
        if (n->into >= 0) put(&out, "%%%d <- ", n->into);
        for (int32_t k = 0; k < n->n_out; k++) put(&out, "%s%%%d", k ? ", " : "", n->out[k]);
        put(&out, "%s%s(", n->n_out ? " = " : "", name);
        for (int32_t k = 0; k < n->n_in; k++) put(&out, "%s%%%d", k ? ", " : "", n->in[k]);
        put(&out, ")");
        for (int32_t k = 0; n->kind == TIDE_GN_FUSED && k < n->fused->n_steps; k++)   /* what it runs */
            put(&out, "%s%s", k ? " " : " {", tide_op_name(n->fused->steps[k].c.op));
        if (n->kind == TIDE_GN_FUSED && n->fused->reduce_op >= 0)
            put(&out, " %s%s", tide_op_name(n->fused->reduce_op), n->fused->reduce_rows ? " (last dim)" : "");
        put(&out, "%s%s%s\n", n->kind == TIDE_GN_FUSED ? "}" : "", n->origin[0] ? "  -- " : "", n->origin);
    }
    put(&out, "return");
    for (int32_t i = 0; i < g->n_outputs; i++) put(&out, "%s%%%d", i ? ", " : " ", g->outputs[i]);
    tide_exec * x = exec_of(g);
    const char * dg = x ? tide_exec_device_graph(x) : NULL;
    if (x) put(&out, "\n-- replayed as one task of %d steps in %d waves; arena and results %.2f MiB",
               tide_exec_num_steps(x), tide_exec_num_waves(x), (double)tide_exec_peak_bytes(x) / 1048576.0);
    else if (g->exec_tried) put(&out, "\n-- replayed node by node: %s", g->exec_why);
    if (dg) put(&out, "\n-- on the device: %s", dg[0] ? dg : "step by step until the second replay records a graph");
    if (g->fuse_why[0]) put(&out, "\n-- a chain of elementwise ops stays unfused: %s", g->fuse_why);
    return s;
}

/* -- memory statistics -------------------------------------------------------------------------- */

size_t tide_graph_value_bytes(const tide_gvalue * v) {
    int64_t n = 1;
    for (int32_t d = 0; d < v->ndim; d++) n *= v->sizes[d];
    return (size_t)n * tide_dtype_size(v->dtype);
}

int tide_graph_value_line(const tide_graph * g, int32_t id, char * buf, size_t n) {
    const tide_gvalue * v  = &g->values[id];
    const tide_gnode *  nd = &g->nodes[v->node];
    char shape[128];
    return snprintf(buf, n, "%.2f MiB: %s %s made by '%s' at %s", (double)tide_graph_value_bytes(v) / 1048576.0,
                    tide_dtype_name(v->dtype), tide_dims_str(v->ndim, v->sizes, shape, sizeof shape),
                    tide_graph_node_name(nd->kind, nd->op), nd->origin[0] ? nd->origin : "?");
}

/* Whether value id has memory of its own: made by an op or an empty node (views have none). */
static bool owns(const tide_graph * g, int32_t id) {
    const tide_gvalue * v = &g->values[id];
    return v->kind == TIDE_GV_NODE && v->node >= 0 &&
           (g->nodes[v->node].kind == TIDE_GN_OP || g->nodes[v->node].kind == TIDE_GN_EMPTY ||
            g->nodes[v->node].kind == TIDE_GN_FUSED);
}

/* Whether value id is held at node `at` of a replay: made by then, and released only
 * after its last reader (outputs and values nothing reads: at the end). */
static bool held_at(const tide_graph * g, int32_t id, int32_t at, const bool * is_out) {
    if (!owns(g, id) || g->values[id].node > at) return false;
    return is_out[id] || g->last_use[id] < 0 || g->last_use[id] >= at;
}

tide_status tide_graph_memory(tide_graph * g, int64_t * peak_bytes, char * largest, size_t n) {
    tide_exec * x = exec_of(g);
    if (x) {   /* one arena, and what each replay hands out */
        *peak_bytes = tide_exec_peak_bytes(x);
        if (n) snprintf(largest, n, "%s", tide_exec_largest(x));
        return TIDE_OK;
    }
    bool * is_out = calloc((size_t)(g->n_values > 0 ? g->n_values : 1), sizeof *is_out);
    bool * shown  = calloc((size_t)(g->n_values > 0 ? g->n_values : 1), sizeof *shown);
    if (!is_out || !shown) {
        free(is_out), free(shown);
        return tide_error_set(TIDE_E_OOM, "jit stats: out of memory");
    }
    for (int32_t i = 0; i < g->n_outputs; i++) is_out[g->outputs[i]] = true;
    int64_t peak = 0;
    int32_t peak_at = -1;
    for (int32_t at = 0; at < g->n_nodes; at++) {   /* quadratic, but only when asked */
        int64_t live = 0;
        for (int32_t id = 0; id < g->n_values; id++)
            if (held_at(g, id, at, is_out)) live += (int64_t)tide_graph_value_bytes(&g->values[id]);
        if (live > peak) peak = live, peak_at = at;
    }
    *peak_bytes = peak;
    text t = {largest, n, 0};
    if (n) largest[0] = 0;
    for (int32_t k = 0; k < 5 && peak_at >= 0; k++) {   /* the largest buffers held at the peak */
        int32_t best = -1;
        for (int32_t id = 0; id < g->n_values; id++)
            if (!shown[id] && held_at(g, id, peak_at, is_out) &&
                (best < 0 || tide_graph_value_bytes(&g->values[id]) > tide_graph_value_bytes(&g->values[best])))
                best = id;
        if (best < 0) break;
        shown[best] = true;
        char line[384];
        tide_graph_value_line(g, best, line, sizeof line);
        put(&t, "%s%s", k ? "; " : "", line);
    }
    free(is_out), free(shown);
    return TIDE_OK;
}

/* -- what a replay writes ------------------------------------------------------------------------ */

tide_tensor * const * tide_graph_written(tide_graph * g, int32_t * n, const char ** origins, int32_t max) {
    *n = 0;
    free(g->written);
    g->written = malloc((size_t)(g->n_values > 0 ? g->n_values : 1) * sizeof *g->written);
    if (!g->written) return NULL;
    for (int32_t id = 0; id < g->n_values; id++) {
        if (g->values[id].kind != TIDE_GV_EXTERN) continue;
        int32_t last = -1;
        for (int32_t i = 0; i < g->n_nodes; i++)
            if (g->nodes[i].into >= 0 && tide_graph_base(g, g->nodes[i].into) == id) last = i;
        if (last < 0) continue;
        if (origins && *n < max) origins[*n] = g->nodes[last].origin;
        g->written[(*n)++] = g->values[id].t;
    }
    return g->written;
}

tide_tensor * const * tide_graph_externs(tide_graph * g, int32_t * n, const char ** origins, int32_t max) {
    *n = 0;
    free(g->externs);
    g->externs = malloc((size_t)(g->n_values > 0 ? g->n_values : 1) * sizeof *g->externs);
    int32_t * reader = malloc((size_t)(g->n_values > 0 ? g->n_values : 1) * sizeof *reader);
    if (!g->externs || !reader) {
        free(reader);
        tide_error_set(TIDE_E_OOM, "jit: out of memory");
        return NULL;
    }
    for (int32_t id = 0; id < g->n_values; id++) reader[id] = -2;   /* -2: unused, -1: only an output */
    for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
        for (int32_t k = 0; k < g->nodes[i].n_in; k++) reader[g->nodes[i].in[k]] = i;
        if (g->nodes[i].into >= 0) reader[g->nodes[i].into] = i;
    }
    for (int32_t i = 0; i < g->n_outputs; i++)
        if (reader[g->outputs[i]] == -2) reader[g->outputs[i]] = -1;
    for (int32_t id = 0; id < g->n_values; id++) {
        if (reader[id] == -2 || g->values[id].kind != TIDE_GV_EXTERN) continue;
        if (origins && *n < max) origins[*n] = reader[id] >= 0 ? g->nodes[reader[id]].origin : "";
        g->externs[(*n)++] = g->values[id].t;
    }
    free(reader);
    return g->externs;
}

/* -- Graphviz ----------------------------------------------------------------------------------- */

const char * tide_graph_dot(tide_graph * g) {
    size_t cap = 512 + (size_t)(g->n_nodes * 4 + g->n_values) * 160;
    char * s   = realloc(g->text, cap);
    if (!s) return "";
    g->text = s;
    text t  = {s, cap, 0};
    s[0]    = 0;
    static const char * kinds[] = {"extern", "arg", "", "const"};
    put(&t, "digraph tide {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n");
    bool * used = calloc((size_t)(g->n_values > 0 ? g->n_values : 1), sizeof *used);
    for (int32_t i = 0; i < g->n_nodes && used; i++)
        for (int32_t k = 0; k < g->nodes[i].n_in; k++) used[g->nodes[i].in[k]] = true;
    for (int32_t id = 0; id < g->n_values && used; id++) {
        const tide_gvalue * v = &g->values[id];
        if (v->kind == TIDE_GV_NODE || !used[id]) continue;
        char shape[128];
        put(&t, "  v%d [shape=box, style=rounded, label=\"%s%s %s %s\"];\n", id, kinds[v->kind],
            v->kind == TIDE_GV_ARG ? "" : "", tide_dtype_name(v->dtype), tide_dims_str(v->ndim, v->sizes, shape, sizeof shape));
    }
    free(used);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const tide_gnode * n = &g->nodes[i];
        const char * name = tide_graph_node_name(n->kind, n->op);
        put(&t, "  n%d [shape=ellipse, label=\"%s\"%s];\n", i, name, n->into >= 0 ? ", style=bold" : "");
        for (int32_t k = 0; k < n->n_in; k++) {
            const tide_gvalue * v = &g->values[n->in[k]];
            if (v->kind == TIDE_GV_NODE && v->node >= 0) put(&t, "  n%d -> n%d;\n", v->node, i);
            else if (v->kind != TIDE_GV_NODE) put(&t, "  v%d -> n%d;\n", n->in[k], i);
        }
        if (n->into >= 0) {
            const tide_gvalue * v = &g->values[n->into];
            if (v->kind == TIDE_GV_NODE && v->node >= 0) put(&t, "  n%d -> n%d [style=dashed, label=\"into\"];\n", i, v->node);
            else put(&t, "  n%d -> v%d [style=dashed, label=\"into\"];\n", i, n->into);
        }
    }
    for (int32_t i = 0; i < g->n_outputs; i++) {
        const tide_gvalue * v = &g->values[g->outputs[i]];
        put(&t, "  out%d [shape=box, label=\"output %d\"];\n", i, i + 1);
        if (v->kind == TIDE_GV_NODE && v->node >= 0) put(&t, "  n%d -> out%d;\n", v->node, i);
    }
    put(&t, "}\n");
    return s;
}
