/*
 * pass_fuse.c - elementwise fusion on a captured graph: a run of elementwise
 * ops of one float dtype over one shape (float16 and bfloat16 ones computing in
 * float32, each step's result rounded to it), consecutive but for view nodes between
 * them (autograd's aliases; they stay where they are), becomes one node whose
 * kernel applies every op's loop block by block (ops/cpu/ew.c), reading each
 * input and writing the result once. Inputs may broadcast to the run's shape.
 * A run may update a tensor in place (optimizer steps), and may end in a sum or
 * mean over all elements or over the last dim, whose input is then never
 * stored. Every value the run makes or updates but the last must be read only
 * inside the run. Random ops, ops whose loops are not exported (tide_loops_<op>)
 * and ops that record autograd history at replay stay as they are.
 *
 * On a CUDA device a run becomes one kernel that fuse_cuda.c writes and the
 * backend compiles now: its inputs are on that device or host numbers, and it
 * ends in no reduction. A run whose kernel does not compile (no runtime
 * compiler there) stays as its ops.
 */
#include "pass.h"
#include "fuse_cuda.h"
#include "../engine/cuda_loader.h"
#include "../ops/cpu/kernels.h"

#include <stdio.h>
#include <stdlib.h>

#define X(name, nin, nout, dt, acc, sh, fl, par)                                                  \
    extern const tide_ew_loop tide_loops_##name[TIDE_DTYPE_COUNT] __attribute__((weak));          \
    extern const tide_ew_loop tide_loops_##name##_k[TIDE_DTYPE_COUNT] __attribute__((weak));
#include "../ops/ops.def"
#undef X

static const tide_ew_loop * const loops_of[] = {
#define X(name, nin, nout, dt, acc, sh, fl, par) tide_loops_##name,
#include "../ops/ops.def"
#undef X
};
static const tide_ew_loop * const k_loops_of[] = {
#define X(name, nin, nout, dt, acc, sh, fl, par) tide_loops_##name##_k,
#include "../ops/ops.def"
#undef X
};

/* The value a node writes: its result, or the tensor it updates in place. */
static int32_t written(const tide_gnode * n) { return n->into >= 0 ? n->into : n->out[0]; }

static bool same_shape(const tide_gvalue * a, const tide_gvalue * b) {
    return a->ndim == b->ndim && !memcmp(a->sizes, b->sizes, (size_t)a->ndim * sizeof a->sizes[0]);
}

/* Whether replaying n records no autograd history: fused kernels record none. */
static bool gradless(const tide_graph * g, const tide_gnode * n) { return g->had_backward || !n->records_grad; }

static bool on_cuda(const tide_gvalue * v) { return v->dev.type == TIDE_DEVICE_CUDA; }

static bool is_half(int32_t dtype) { return dtype == TIDE_DTYPE_F16 || dtype == TIDE_DTYPE_BF16; }

/* A node a fused kernel can run as one of its steps: an elementwise op computing
 * in the float dtype of what it writes (or in float32, writing float16 or
 * bfloat16: each step's result is rounded to it), whose loop is exported (on
 * the CPU) or which has a fused form (on a CUDA device). */
static bool fusable(const tide_graph * g, const tide_gnode * n) {
    if (n->kind != TIDE_GN_OP || n->n_out != (n->into >= 0 ? 0 : 1) || !gradless(g, n)) return false;
    tide_op_info info;
    if (tide_op_get_info(n->op, &info) != TIDE_OK || !(info.flags & TIDE_OPF_ELEMWISE) || (info.flags & TIDE_OPF_RANDOM))
        return false;
    const tide_gvalue * w = &g->values[written(n)];
    if (is_half(w->dtype) ? n->compute_dtype != TIDE_DTYPE_F32
                          : w->dtype != n->compute_dtype || (w->dtype != TIDE_DTYPE_F32 && w->dtype != TIDE_DTYPE_F64))
        return false;
    if (on_cuda(w)) return tide_fuse_cuda_op(n->op) && tide_cuda_api();
    return loops_of[n->op] && loops_of[n->op][n->compute_dtype] && w->dev.type == TIDE_DEVICE_CPU;
}

/* Whether value v can be an input of a fused kernel on value `like`'s device:
 * any on the CPU; on a CUDA device, one there (of any dtype), or a host number. */
static bool readable(const tide_gvalue * v, const tide_gvalue * like) {
    if (!on_cuda(like)) return true;
    if (v->dev.type == TIDE_DEVICE_CPU) return v->ndim == 0;
    return v->dev.type == like->dev.type && v->dev.index == like->dev.index;
}

/* How often each value is accessed: read by a node, updated in place, returned (1000). */
static int32_t * count_uses(const tide_graph * g) {
    int32_t * uses = calloc((size_t)(g->n_values > 0 ? g->n_values : 1), sizeof *uses);
    if (!uses) return NULL;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const tide_gnode * n = &g->nodes[i];
        for (int32_t k = 0; k < n->n_in; k++) uses[n->in[k]]++;
        if (n->into >= 0) uses[n->into]++;
    }
    for (int32_t i = 0; i < g->n_outputs; i++) uses[g->outputs[i]] += 1000;
    return uses;
}

/* A candidate run: member nodes, in order, and what it reads and writes. */
typedef struct {
    int32_t node[TIDE_FUSED_MAX_STEPS], n;
    int32_t reduce;                      /* the sum or mean node that ends it, or -1 */
    int32_t ext[TIDE_OP_MAX_IN], n_ext;  /* values read from outside the run */
    int32_t target;                      /* a value from before the run that it updates in place, or -1 */
    int32_t result;                      /* the value the last member writes */
} run;

/* The sum or mean node after node `last` (views passed over) that reduces value v, of
 * shape and dtype `like`, over all elements or the last dim into that dtype; or -1. */
static int32_t reduction_after(const tide_graph * g, int32_t last, int32_t v, const tide_gvalue * like) {
    int32_t i = last + 1;
    while (i < g->n_nodes && g->nodes[i].kind == TIDE_GN_VIEW) i++;
    if (i == g->n_nodes) return -1;
    const tide_gnode * n = &g->nodes[i];
    if (on_cuda(like) || is_half(like->dtype)) return -1;   /* a fused CUDA kernel, or a float16/bfloat16 chain,
                                                               * ends in no reduction yet */
    if (n->kind != TIDE_GN_OP || (n->op != TIDE_OP_sum && n->op != TIDE_OP_mean) || n->in[0] != v || n->into >= 0 ||
        !gradless(g, n) || n->compute_dtype != like->dtype || g->values[n->out[0]].dtype != like->dtype)
        return -1;
    bool all = n->p.n_ints == like->ndim, last_dim = n->p.n_ints == 1 && n->p.ints[0] == like->ndim - 1;
    return all || last_dim ? i : -1;
}

/* Builds the kernel of run r (its members and reduce set), or returns NULL when the
 * run is not valid: a value it makes or updates other than its result is read
 * outside it (or, before the fused node, at all), or it updates two values from
 * outside. Inputs that share the target's memory are the kernel's concern. */
static tide_fused * plan(const tide_graph * g, const int32_t * uses, run * r) {
    tide_fused * f = calloc(1, sizeof *f);
    if (!f) return NULL;
    int32_t vals[TIDE_FUSED_MAX_STEPS], ver[TIDE_FUSED_MAX_STEPS], n_vals = 0;   /* value -> last writer */
    int32_t ext_last[TIDE_OP_MAX_IN], first_write = -1, last_read[TIDE_FUSED_MAX_STEPS];
    r->n_ext = 0, r->target = -1;
    for (int32_t s = 0; s < r->n; s++) {
        const tide_gnode * n  = &g->nodes[r->node[s]];
        tide_fused_step *  st = &f->steps[s];
        last_read[s]        = -1;
        st->c.op            = n->op;
        st->c.n_in          = n->n_in;
        st->c.n_out         = 1;
        st->c.compute_dtype = n->compute_dtype;
        st->c.p             = n->p;
        st->loop            = loops_of[n->op][n->compute_dtype];
        st->k_loop          = k_loops_of[n->op] ? k_loops_of[n->op][n->compute_dtype] : NULL;
        for (int32_t k = 0; k < n->n_in; k++) {
            int32_t v = n->in[k], j = 0, e = 0;
            while (j < n_vals && vals[j] != v) j++;
            if (j < n_vals) {   /* made or updated earlier in the run */
                st->src[k]        = -ver[j] - 1;
                last_read[ver[j]] = s;
                continue;
            }
            while (e < r->n_ext && r->ext[e] != v) e++;
            if (e == r->n_ext) {
                if (e == TIDE_OP_MAX_IN) goto fail;
                r->ext[r->n_ext++] = v;
            }
            st->src[k]  = e;
            ext_last[e] = s;
        }
        int32_t w = written(n), j = 0;
        while (j < n_vals && vals[j] != w) j++;
        if (j == n_vals) {
            if (n->into >= 0) {   /* updates a value from before the run */
                if (r->target >= 0) goto fail;
                r->target = w, first_write = s;
            }
            vals[n_vals++] = w;
        }
        ver[j]         = s;
        st->writes_out = w == r->target;
    }
    r->result = written(&g->nodes[r->node[r->n - 1]]);
    if (r->reduce >= 0 && r->result == r->target) goto fail;
    int32_t at = r->reduce >= 0 ? r->reduce : r->node[r->n - 1];
    for (int32_t j = 0; j < n_vals; j++) {
        int32_t v = vals[j], inside = 0;
        if (v == r->target && v != r->result) goto fail;
        for (int32_t s = 0; s < r->n; s++) {
            const tide_gnode * n = &g->nodes[r->node[s]];
            for (int32_t k = 0; k < n->n_in; k++) inside += n->in[k] == v;
            inside += n->into == v;
        }
        inside += r->reduce >= 0 && v == r->result;
        if (v != r->target && (v != r->result || r->reduce >= 0) && uses[v] != inside) goto fail;
    }
    /* the nodes passed over run before the fused node: they may not read what it writes (a
     * view of the target reads no data), and only views may sit inside a run that updates */
    for (int32_t i = r->node[0] + 1, s = 1; i < at; i++) {
        if (s < r->n && r->node[s] == i) {
            s++;
            continue;
        }
        const tide_gnode * x = &g->nodes[i];
        if (x->kind != TIDE_GN_VIEW && r->target >= 0) goto fail;
        for (int32_t k = 0; k < x->n_in; k++)
            for (int32_t j = 0; j < n_vals; j++)
                if (x->in[k] == vals[j] && !(x->kind == TIDE_GN_VIEW && vals[j] == r->target)) goto fail;
        for (int32_t m = 0; m < s && x->into >= 0; m++)   /* members it would now run before */
            for (int32_t k = 0; k < g->nodes[r->node[m]].n_in; k++)
                if (g->nodes[r->node[m]].in[k] == x->into) goto fail;
    }
    for (int32_t e = 0; e < r->n_ext && r->target >= 0; e++) {
        if (r->ext[e] != r->target && tide_graph_base(g, r->ext[e]) == tide_graph_base(g, r->target))
            goto fail;   /* a view of the target: read at other indices, or after the blocks wrote it */
        if (ext_last[e] > first_write) f->late |= 1u << e;
    }
    /* block buffers: a result's slot is free once the steps that read it have run */
    int32_t holder[TIDE_FUSED_MAX_STEPS];
    for (int32_t s = 0; s < r->n; s++) {
        int32_t q = 0;
        while (q < f->n_slots && last_read[holder[q]] >= s) q++;
        if (q == f->n_slots) f->n_slots++;
        holder[q]        = s;
        f->steps[s].slot = q;
    }
    const tide_gvalue * shape = &g->values[r->result];
    f->n_steps     = r->n;
    f->n_ext       = r->n_ext;
    f->dtype       = shape->dtype;
    f->ndim        = shape->ndim;
    memcpy(f->sizes, shape->sizes, sizeof f->sizes);
    f->reduce_op   = r->reduce >= 0 ? g->nodes[r->reduce].op : -1;
    f->reduce_rows = r->reduce >= 0 && g->nodes[r->reduce].p.n_ints == 1 && shape->ndim > 1;
    return f;
fail:
    free(f);
    return NULL;
}

/* Nodes a run may pass over, to stay where they are, before the fused node: views (they
 * read no data), new tensors, and in-place ops that fill a tensor made since the run
 * began (dropout's mask: bernoulli into an empty()). plan() checks what they read. */
static bool passable(const tide_graph * g, int32_t first, const tide_gnode * n) {
    if (n->kind == TIDE_GN_VIEW || n->kind == TIDE_GN_EMPTY) return true;
    if (n->kind != TIDE_GN_OP || n->into < 0) return false;
    const tide_gvalue * v = &g->values[n->into];
    return v->kind == TIDE_GV_NODE && v->node > first && g->nodes[v->node].kind == TIDE_GN_EMPTY;
}

/* Fusable nodes from `first` on, of first's shape and dtype, passing over passable ones. */
static int32_t candidates(const tide_graph * g, int32_t first, int32_t * node) {
    const tide_gvalue * like = &g->values[written(&g->nodes[first])];
    int32_t n = 0;
    for (int32_t i = first; i < g->n_nodes && n < TIDE_FUSED_MAX_STEPS; i++) {
        const tide_gnode *  nd = &g->nodes[i];
        const tide_gvalue * w  = nd->n_out || nd->into >= 0 ? &g->values[written(nd)] : NULL;
        if (w && fusable(g, nd) && w->dtype == like->dtype && same_shape(w, like) && w->dev.type == like->dev.type &&
            w->dev.index == like->dev.index)
            node[n++] = i;
        else if (!passable(g, first, nd)) break;
    }
    return n;
}

/* Compiles run r's kernel f for its CUDA device: 1; 0 when it does not compile
 * (then no run from the same node would); -1 when an input cannot be read
 * there (a shorter run may do without it). */
static int compile_cuda(tide_graph * g, const run * r, tide_fused * f) {
    const tide_gvalue * like = &g->values[r->result];
    int32_t             dtypes[TIDE_OP_MAX_IN];
    uint32_t            host = 0;
    for (int32_t e = 0; e < r->n_ext; e++) {
        const tide_gvalue * v = &g->values[r->ext[e]];
        if (!readable(v, like)) return -1;
        dtypes[e] = v->dtype;
        if (v->dev.type == TIDE_DEVICE_CPU) host |= 1u << e;
    }
    char why[256];
    f->dev_fn = tide_fuse_cuda_compile(f, like->dev.index, dtypes, host, why, sizeof why);
    if (!f->dev_fn && !g->fuse_why[0]) {   /* the first, on one line, for tide_graph_describe */
        snprintf(g->fuse_why, sizeof g->fuse_why, "its kernel did not compile for cuda:%d: %s", like->dev.index, why);
        for (char * c = g->fuse_why; *c; c++)
            if (*c == '\n') *c = ' ';
    }
    return f->dev_fn ? 1 : 0;
}

/* Makes node `at` the fused node of run r, and drops the other members. */
static void apply(tide_graph * g, const run * r, tide_fused * f, bool * keep) {
    int32_t      at = r->reduce >= 0 ? r->reduce : r->node[r->n - 1];
    tide_gnode * n  = &g->nodes[at];
    if (r->reduce < 0 && r->result == r->target) {
        n->into = r->target, n->n_out = 0;
    } else if (r->reduce < 0) {
        n->into = -1, n->n_out = 1, n->out[0] = r->result;
        g->values[r->result].node = at;
    }
    n->kind          = TIDE_GN_FUSED;
    n->op            = -1;
    n->fused         = f;
    n->compute_dtype = f->dtype;
    n->n_in          = r->n_ext;
    memcpy(n->in, r->ext, (size_t)r->n_ext * sizeof *r->ext);
    for (int32_t s = 0; s < r->n; s++)
        if (r->node[s] != at) keep[r->node[s]] = false;
}

int32_t tide_pass_fuse(tide_graph * g) {
    int32_t * uses = count_uses(g);
    bool *    keep = malloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1) * sizeof *keep);
    if (!uses || !keep) {
        free(uses), free(keep);
        return -1;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) keep[i] = true;
    int32_t fused = 0;
    for (int32_t first = 0; first < g->n_nodes; first++) {
        if (!fusable(g, &g->nodes[first])) continue;
        run r;
        int32_t n = candidates(g, first, r.node);
        /* the longest valid run from `first`: with a reduction after it if one fits, else
         * without (a lone op is worth it only with a reduction) */
        for (r.n = n; r.n >= 1; r.n--) {
            tide_fused * f = NULL;
            int32_t last = r.node[r.n - 1];
            r.reduce = reduction_after(g, last, written(&g->nodes[last]), &g->values[written(&g->nodes[first])]);
            if (r.reduce >= 0) f = plan(g, uses, &r);
            if (!f && r.n > 1) {
                r.reduce = -1;
                f = plan(g, uses, &r);
            }
            int compiled = f && on_cuda(&g->values[r.result]) ? compile_cuda(g, &r, f) : 1;
            if (compiled < 1) {
                free(f);
                if (compiled == 0) break;
                continue;
            }
            if (!f) continue;
            apply(g, &r, f, keep);
            fused += r.n - (r.reduce < 0);
            first = r.reduce >= 0 ? r.reduce : last;
            break;
        }
    }
    if (fused) tide_graph_compact(g, keep);
    free(uses), free(keep);
    return fused;
}
