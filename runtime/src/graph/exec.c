/*
 * exec.c - a captured graph replayed as one engine task. The first replay
 * plans the graph once: nodes are put in waves of independent work, every
 * intermediate value gets a place in one arena (values whose lives do not
 * overlap share bytes, and an elementwise op may write over its dying input),
 * every node is checked and resolved (tide_op_prepare) into a step that calls
 * its kernel on tensors made once, and views are made once. A replay then
 * allocates only what it hands out (results, gradients), and pushes one task
 * that binds the arguments and runs the waves in order, the small steps of a
 * wave at once across the pool: no per-op checks, dependency analysis,
 * allocation or Lua. On a CUDA device the task launches every step in order
 * on the device's stream, and one completion raises what their work reported.
 * Graphs it cannot run this way (several
 * devices, autograd history to record, nested captures, arguments that are
 * not contiguous or share memory with the graph's tensors) are left to the
 * node-by-node replay of graph.c, which says why in tide_graph_describe.
 */
#include "pass.h"
#include "../engine/cuda_loader.h"
#include "../ops/cpu/kernels.h"
#include "fuse_cuda.h"

#include <stdio.h>
#include <stdlib.h>

/* How a value is held. */
enum {
    HELD_FIXED = 1,   /* a tensor made once: captured (extern, const), or a view of one, or in the arena */
    HELD_BOUND = 2    /* a view of a root bound at each replay: an argument or a fresh result */
};

/* A plan-owned tensor header whose storage and offset are set at each replay:
 * the root's storage, and the root's offset plus delta. */
typedef struct {
    tide_tensor * t;
    int32_t       root;    /* < n_args: argument root; else fresh root - n_args */
    int64_t       delta;
} bind;

typedef struct {
    int32_t        op;                 /* its node's op, for messages (-1: fused) */
    char           origin[96];         /* its node's Lua line */
    tide_kernel_fn kernel;             /* NULL: a fused step */
    tide_fused *   fused;              /* owned copy */
    int32_t        random;             /* its slot of the replay's generator reservations, or -1 */
    int32_t        wave, unit, order;  /* when it runs: its wave, its node, its place in the node's steps */
    bool           small;              /* its node's work is too small to split: it runs beside others */
    tide_opcall    c;                  /* for a fused step: in = its external inputs, out[0] its result */
} step;

/* How a replay hands out a value (a result, a gradient): a fixed tensor, or its
 * bound root (args[root] or fresh[root - n_args]) itself or viewed as `meta`
 * starting `delta` elements past the root's offset. */
typedef struct {
    tide_tensor * fixed;
    int32_t       root;
    tide_tensor * meta;
    int64_t       delta;
} handout;

typedef struct {
    tide_tensor * leaf;                /* fixed, or NULL with leaf_arg >= 0 */
    int32_t       leaf_arg;
    int32_t       has;                 /* 0: the gradient is set to none */
    handout       grad;
} grad_set;

struct tide_exec {
    atomic_int      refcount;          /* the graph's, and each pending replay's */
    tide_device     dev;
    int32_t         n_args, n_fresh;
    tide_gvalue *   fresh_meta;        /* each fresh root's value (shape, dtype) */
    tide_storage *  arena;
    int64_t         arena_bytes;
    step *          steps;             /* by wave, then node */
    int32_t         n_steps, n_random;
    uint64_t *      random_nelem;      /* per generator slot, in node order: the draws it reserves */
    uint64_t *      random_from;       /* per slot: the {seed, offset} its first op drew when captured */
    int32_t *       waves;             /* steps[waves[w] .. waves[w + 1]) make wave w */
    int32_t         n_waves;
    int32_t *       small_units;       /* first step of each small unit, by wave */
    int32_t *       wave_units;        /* small_units[wave_units[w] .. wave_units[w + 1]) are wave w's */
    bind *          binds;
    int32_t         n_binds;
    tide_storage ** dummies;           /* a placeholder storage per bound root */
    tide_tensor **  owned;             /* tensors the plan made or holds */
    int32_t         n_owned, cap_owned;
    tide_storage ** reads, ** writes;  /* fixed storages (the arena and temporaries among the writes) */
    int32_t         n_reads, n_writes;
    bool *          arg_written;
    handout *       outputs;
    int32_t         n_outputs;
    grad_set *      grads;
    int32_t         n_grads;
    tide_tensor **  bumped;            /* fixed tensors written in place: versions, fences */
    int32_t         n_bumped;
    bool            args_grad_check;   /* a replay with an argument that requires grad must record history */
    /* CUDA: from the second replay on, the steps run as one device graph
     * (device.h's capture), recorded over fixed copies of the roots: a
     * replay copies its arguments in, launches the graph, and copies the
     * results (and the arguments it writes) out. */
    tide_gvalue *   arg_meta;          /* each argument's value (shape, dtype) */
    int32_t         n_device_runs;
    atomic_int      graph_state;       /* GRAPH_* */
    char            graph_why[160];    /* GRAPH_NO: why, set before the state */
    void *          graph;
    tide_tensor **  statics;           /* per root: the graph's fixed copy */
    tide_tensor *   rng_at;            /* the Philox slices its random steps read: {seed, offset} each */
    tide_cuda_held  held;              /* scratch and reports its calls took, kept with it */
    void **         dev_reports;       /* per step: the device memory of its report, or NULL */
    int64_t         cost;
    char            largest[512];      /* the largest arena values, with the lines that made them */
};

enum { GRAPH_UNTRIED = 0, GRAPH_READY = 1, GRAPH_NO = 2 };

/* -- building ---------------------------------------------------------------------------------- */

typedef struct {
    tide_graph *    g;
    tide_exec *     x;
    tide_tensor **  t;        /* per value: the plan's tensor */
    int32_t *       held;     /* per value: HELD_* */
    int32_t *       root;     /* per value: for HELD_BOUND, its root slot */
    int32_t *       fresh;    /* per value: fresh root slot (- n_args), or -1 */
    int64_t *       offset;   /* per value: arena offset in bytes, or -1 */
    int32_t *       wave;     /* per node: its wave (schedule), -1 for nodes that run nothing */
    int32_t *       made_in;  /* per value: the value whose memory it is made in (copy elision), or -1 */
    bool *          elided;   /* per node: a copy that runs nothing, its source made in place */
    bool *          escapes;  /* per root value: handed out by a replay (a result, a gradient, or a view of one) */
    char            why[160];
} builder;

static bool own(tide_exec * x, tide_tensor * t) {
    if (x->n_owned == x->cap_owned) {
        int32_t         cap = x->cap_owned ? 2 * x->cap_owned : 64;
        tide_tensor **  o   = realloc(x->owned, (size_t)cap * sizeof *o);
        if (!o) return false;
        x->owned = o, x->cap_owned = cap;
    }
    x->owned[x->n_owned++] = t;
    return true;
}

static bool add_storage(tide_storage *** list, int32_t * n, tide_storage * s) {
    for (int32_t i = 0; i < *n; i++)
        if ((*list)[i] == s) return true;
    tide_storage ** l = realloc(*list, (size_t)(*n + 1) * sizeof *l);
    if (!l) return false;
    *list = l;
    l[(*n)++] = s;
    return true;
}

static bool add_bind(tide_exec * x, tide_tensor * t, int32_t root, int64_t delta) {
    bind * b = realloc(x->binds, (size_t)(x->n_binds + 1) * sizeof *b);
    if (!b) return false;
    x->binds = b;
    b[x->n_binds++] = (bind){t, root, delta};
    return true;
}

/* A contiguous header for value v over storage s at element offset `off`. */
static tide_tensor * header(const tide_gvalue * v, tide_storage * s, int64_t off) {
    tide_tensor * t = tide_tensor_alloc_header(s, v->dtype);
    if (!t) return NULL;
    t->ndim = v->ndim;
    memcpy(t->sizes, v->sizes, (size_t)v->ndim * sizeof *t->sizes);
    tide_contiguous_strides(v->ndim, t->sizes, t->strides);
    t->offset = off;
    tide_tensor_finish(t);
    return t;
}

/* Places the arena values: by size, largest first, each at the lowest offset
 * that no value alive at the same time occupies (first fit). */
typedef struct { int32_t id; int64_t size, first, last, off; } slot;

static int by_size(const void * a, const void * b) {
    const slot * x = a, * y = b;
    return x->size != y->size ? (x->size < y->size) - (x->size > y->size) : x->id - y->id;
}
static int by_offset(const void * a, const void * b) {
    const slot * x = *(const slot * const *)a, * y = *(const slot * const *)b;
    return (x->off > y->off) - (x->off < y->off);
}

/* Value v's bytes in the arena: rounded up so that every value starts aligned. */
static int64_t slot_size(const tide_gvalue * v) {
    return (int64_t)(tide_graph_value_bytes(v) + TIDE_ALIGN - 1) / TIDE_ALIGN * TIDE_ALIGN;
}

static int64_t place(slot * s, int32_t n) {
    qsort(s, (size_t)n, sizeof *s, by_size);
    slot ** live = malloc((size_t)(n > 0 ? n : 1) * sizeof *live);
    if (!live) return -1;
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t nl = 0;
        for (int32_t j = 0; j < i; j++)
            if (s[j].first <= s[i].last && s[i].first <= s[j].last) live[nl++] = &s[j];
        qsort(live, (size_t)nl, sizeof *live, by_offset);
        int64_t off = 0;
        for (int32_t j = 0; j < nl; j++) {
            if (live[j]->off - off >= s[i].size) break;
            if (live[j]->off + live[j]->size > off) off = live[j]->off + live[j]->size;
        }
        s[i].off = off;
        if (off + s[i].size > total) total = off + s[i].size;
    }
    free(live);
    return total;
}

static bool fail_build(builder * b, const char * why) {
    snprintf(b->why, sizeof b->why, "%s", why);
    return false;
}

static bool schedule(builder * b);
static bool elide_copies(builder * b);
static bool plan_arena(builder * b);

/* Checks what the plan needs (one device, no history to record), then
 * schedules the nodes and places the arena. */
static bool classify(builder * b) {
    tide_graph * g = b->g;
    tide_exec *  x = b->x;
    bool have_dev = false;
    for (int32_t id = 0; id < g->n_values; id++) {
        const tide_gvalue * v = &g->values[id];
        b->fresh[id] = -1, b->offset[id] = -1, b->root[id] = -1;
        if (v->kind == TIDE_GV_CONST && v->t && (v->t->flags & TIDE_TENSOR_WRAPPED_NUMBER)) continue;
        if (v->dev.type != TIDE_DEVICE_CPU && v->dev.type != TIDE_DEVICE_CUDA)
            return fail_build(b, "a value is on a kind of device plans do not run on");
        if (!have_dev) x->dev = v->dev, have_dev = true;
        else if (v->dev.type != x->dev.type || v->dev.index != x->dev.index)
            return fail_build(b, "its values are on several devices");
    }
    if (!have_dev) x->dev = (tide_device){TIDE_DEVICE_CPU, -1};
    /* what a replay hands out needs memory of its own: results and gradients */
    for (int32_t i = 0; i < g->n_outputs; i++) b->escapes[tide_graph_base(g, g->outputs[i])] = true;
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].kind == TIDE_GN_SET_GRAD && g->nodes[i].n_in == 2)
            b->escapes[tide_graph_base(g, g->nodes[i].in[1])] = true;
    /* A graph that ran its own backward replays with autograd off. Otherwise a
     * node that recorded history at capture (grad on, an input requiring grad)
     * must record it again, which only the node-by-node replay does. */
    if (!g->had_backward) {
        for (int32_t i = 0; i < g->n_nodes; i++) {
            const tide_gnode * n = &g->nodes[i];
            if (!n->grad_on) continue;
            x->args_grad_check = true;
            for (int32_t k = 0; k < n->n_in; k++) {
                const tide_gvalue * v = &g->values[n->in[k]];
                if ((v->kind == TIDE_GV_EXTERN || v->kind == TIDE_GV_CONST) && v->t && tide_needs_grad(v->t))
                    return fail_build(b, "its results carry autograd history for a backward outside it");
            }
        }
    }
    return schedule(b) && elide_copies(b) && plan_arena(b);
}

/* `t <- copy(v)` where v is a value made by one op (or a reshape of one) only to
 * be copied into t, a new tensor of the same dtype and size that nothing touches
 * before: the value is made in t's memory instead, and the copy runs nothing.
 * (Autograd makes each leaf's gradient such a copy of what computed it.) */
static bool elide_copies(builder * b) {
    tide_graph * g  = b->g;
    size_t       nv = (size_t)(g->n_values > 0 ? g->n_values : 1);
    int32_t *    touches = calloc(nv, sizeof *touches), * first = malloc(nv * sizeof *first);
    if (!touches || !first) {
        free(touches), free(first);
        return fail_build(b, "out of memory");
    }
    for (int32_t id = 0; id < g->n_values; id++) b->made_in[id] = -1, first[id] = -1;
    for (int32_t i = 0; i < g->n_nodes; i++) {   /* who reads or writes each root's memory, and who first */
        const tide_gnode * n = &g->nodes[i];
        if (n->kind == TIDE_GN_VIEW || n->kind == TIDE_GN_EMPTY) continue;   /* they touch no memory */
        for (int32_t k = 0; k <= n->n_in; k++) {
            int32_t v = k < n->n_in ? n->in[k] : n->into;
            if (v < 0) continue;
            int32_t r = tide_graph_base(g, v);
            touches[r]++;
            if (first[r] < 0) first[r] = i;
        }
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const tide_gnode * n = &g->nodes[i];
        if (n->kind != TIDE_GN_OP || n->op != TIDE_OP_copy || n->n_in != 1 || n->into < 0) continue;
        int32_t r = tide_graph_base(g, n->in[0]), t = n->into;
        const tide_gvalue * vr = &g->values[r], * vt = &g->values[t];
        if (vr->kind != TIDE_GV_NODE || vt->kind != TIDE_GV_NODE || vr->node < 0 || vt->node < 0 ||
            tide_graph_base(g, t) != t || b->escapes[r] || touches[r] != 1 || first[t] != i ||
            g->nodes[vt->node].kind != TIDE_GN_EMPTY || vr->dtype != vt->dtype ||
            tide_graph_value_bytes(vr) != tide_graph_value_bytes(vt))
            continue;
        bool reshaped = true;   /* v is r, or r reshaped: the same bytes in the same order */
        for (int32_t v = n->in[0]; v != r && reshaped; v = g->nodes[g->values[v].node].in[0]) {
            const tide_gnode * vn = &g->nodes[g->values[v].node];
            reshaped = vn->op == TIDE_VIEW_RESHAPE || vn->op == TIDE_VIEW_ALIAS;
        }
        if (!reshaped) continue;
        const tide_gnode * m = &g->nodes[vr->node];
        if ((m->kind != TIDE_GN_OP && m->kind != TIDE_GN_FUSED) || m->into >= 0 || m->n_out != 1) continue;
        b->made_in[r] = t;
        b->elided[i]  = true;
    }
    free(touches), free(first);
    return true;
}

/* Puts each node that runs (an op, a fused chain) in a wave: one after every
 * node it depends on through the memory it reads or writes (after the last
 * write of what it reads; after the last read and write of what it writes).
 * The nodes of a wave are independent, and a replay may run them at once. */
static bool schedule(builder * b) {
    tide_graph * g  = b->g;
    size_t       nv = (size_t)(g->n_values > 0 ? g->n_values : 1);
    int32_t *    lw = malloc(nv * sizeof *lw), * lr = malloc(nv * sizeof *lr);
    if (!lw || !lr) {
        free(lw), free(lr);
        return fail_build(b, "out of memory");
    }
    for (int32_t id = 0; id < g->n_values; id++) {
        lw[id] = g->values[id].init ? 0 : -1;   /* a constant written in place is restored first */
        lr[id] = -1;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const tide_gnode * n = &g->nodes[i];
        b->wave[i] = -1;
        if (n->kind != TIDE_GN_OP && n->kind != TIDE_GN_FUSED) continue;
        int32_t w = 0;
        for (int32_t k = 0; k < n->n_in; k++) {
            int32_t r = tide_graph_base(g, n->in[k]);
            if (lw[r] + 1 > w) w = lw[r] + 1;
        }
        int32_t into = n->into >= 0 ? tide_graph_base(g, n->into) : -1;
        if (into >= 0) {
            if (lw[into] + 1 > w) w = lw[into] + 1;
            if (lr[into] + 1 > w) w = lr[into] + 1;
        }
        b->wave[i] = w;
        for (int32_t k = 0; k < n->n_in; k++) {
            int32_t r = tide_graph_base(g, n->in[k]);
            if (lr[r] < w) lr[r] = w;
        }
        if (into >= 0) lw[into] = w;
        for (int32_t k = 0; k < n->n_out; k++) lw[n->out[k]] = w;
    }
    free(lw), free(lr);
    return true;
}

/* Gives each value that is neither handed out nor captured a place in the
 * arena. A value lives from the wave that makes it to the last wave that reads
 * or writes it (or a view of it); values whose lives do not overlap share
 * bytes, and an elementwise op whose input of the same shape and dtype dies
 * with it writes its result in that input's place. */
static bool plan_arena(builder * b) {
    tide_graph * g  = b->g;
    tide_exec *  x  = b->x;
    size_t       nv = (size_t)(g->n_values > 0 ? g->n_values : 1);
    const bool * escapes = b->escapes;
    slot *    slots   = malloc(nv * sizeof *slots);
    int32_t * at      = malloc(nv * sizeof *at);        /* value -> its slot, or -1 */
    int32_t * owner   = malloc(nv * sizeof *owner);     /* slot -> the slot whose bytes it takes */
    int32_t * touches = calloc(nv, sizeof *touches);    /* slot -> nodes touching it in its last wave */
    if (!slots || !at || !owner || !touches) {
        free(slots), free(at), free(owner), free(touches);
        return fail_build(b, "out of memory");
    }
    int32_t n_slots = 0;
    for (int32_t id = 0; id < g->n_values; id++) {
        const tide_gvalue * v = &g->values[id];
        at[id] = -1;
        if (v->init) {   /* a constant written in place: a copy of its first contents in the arena */
            if (escapes[id]) {
                free(slots), free(at), free(owner), free(touches);
                return fail_build(b, "it returns a constant that it also writes in place");
            }
            owner[n_slots] = n_slots;
            at[id] = n_slots;
            slots[n_slots++] = (slot){id, slot_size(v), 0, 0, 0};
            continue;
        }
        /* values whose node a pass removed are never made; some are made in another's memory */
        if (v->kind != TIDE_GV_NODE || v->node < 0 || tide_graph_base(g, id) != id || b->made_in[id] >= 0) continue;
        if (escapes[id]) {
            b->fresh[id] = x->n_fresh++;
            continue;
        }
        int32_t w = b->wave[v->node] >= 0 ? b->wave[v->node] : 0;   /* an empty node: from the start */
        owner[n_slots] = n_slots;
        at[id] = n_slots;
        slots[n_slots++] = (slot){id, slot_size(v), w, w, 0};
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const tide_gnode * n = &g->nodes[i];
        if (b->wave[i] < 0) continue;
        for (int32_t k = 0; k <= n->n_in; k++) {
            int32_t v = k < n->n_in ? n->in[k] : n->into;
            if (v < 0) continue;
            int32_t s = at[tide_graph_base(g, v)];
            if (s < 0) continue;
            if (slots[s].last < b->wave[i]) slots[s].last = b->wave[i], touches[s] = 0;
            if (slots[s].last == b->wave[i]) touches[s]++;
        }
    }
    /* in place: the result takes the bytes of an input that only this node touches last */
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const tide_gnode * n = &g->nodes[i];
        tide_op_info       info;
        if (n->kind != TIDE_GN_OP || n->into >= 0 || n->n_out != 1 || at[n->out[0]] < 0 ||
            tide_op_get_info(n->op, &info) != TIDE_OK || !(info.flags & TIDE_OPF_ELEMWISE) ||
            (info.flags & TIDE_OPF_RANDOM))
            continue;
        int32_t o = at[n->out[0]];
        for (int32_t k = 0; k < n->n_in; k++) {
            int32_t s = at[n->in[k]];   /* the input itself, not a view of it */
            if (s < 0 || slots[s].last != b->wave[i] || touches[s] != 1) continue;
            const tide_gvalue * vi = &g->values[n->in[k]], * vo = &g->values[n->out[0]];
            if (vi->dtype != vo->dtype || vi->ndim != vo->ndim || memcmp(vi->sizes, vo->sizes, (size_t)vi->ndim * 8))
                continue;
            owner[o] = owner[s];
            touches[s] = 0;   /* taken */
            break;
        }
    }
    /* each owner's life covers those of the slots that take its bytes */
    for (int32_t i = 0; i < n_slots; i++) {
        int32_t r = i;
        while (owner[r] != r) r = owner[r];
        owner[i] = r;
        if (slots[i].last > slots[r].last) slots[r].last = slots[i].last;
        if (slots[i].first < slots[r].first) slots[r].first = slots[i].first;
    }
    int32_t n_own = 0;
    slot *  own_slots = malloc((size_t)(n_slots > 0 ? n_slots : 1) * sizeof *own_slots);
    if (!own_slots) {
        free(slots), free(at), free(owner), free(touches);
        return fail_build(b, "out of memory");
    }
    for (int32_t i = 0; i < n_slots; i++)
        if (owner[i] == i) own_slots[n_own++] = slots[i];
    x->arena_bytes = place(own_slots, n_own);   /* sorts them by size, largest first */
    for (int32_t i = 0; i < n_own; i++) b->offset[own_slots[i].id] = own_slots[i].off;
    for (int32_t i = 0; i < n_slots; i++) b->offset[slots[i].id] = b->offset[slots[owner[i]].id];
    size_t used = 0;
    for (int32_t i = 0; i < n_own && i < 5 && used + 1 < sizeof x->largest; i++) {
        if (g->values[own_slots[i].id].node < 0) continue;   /* a restored constant */
        char line[384];
        tide_graph_value_line(g, own_slots[i].id, line, sizeof line);
        int  w = snprintf(x->largest + used, sizeof x->largest - used, "%s%s", used ? "; " : "", line);
        if (w > 0) used = used + (size_t)w < sizeof x->largest ? used + (size_t)w : sizeof x->largest - 1;
    }
    free(slots), free(at), free(owner), free(touches), free(own_slots);
    if (x->arena_bytes < 0) return fail_build(b, "out of memory");
    x->fresh_meta = malloc((size_t)(x->n_fresh > 0 ? x->n_fresh : 1) * sizeof *x->fresh_meta);
    if (!x->fresh_meta) return fail_build(b, "out of memory");
    for (int32_t id = 0; id < g->n_values; id++)
        if (b->fresh[id] >= 0) {
            x->fresh_meta[b->fresh[id]]   = g->values[id];
            x->fresh_meta[b->fresh[id]].t = NULL;
        }
    return true;
}

/* The tensor of a new root value (arena or fresh), or of the value it is made in. */
static tide_tensor * root_tensor(builder * b, int32_t id) {
    tide_exec *         x = b->x;
    const tide_gvalue * v = &b->g->values[id];
    tide_tensor *       t;
    if (b->made_in[id] >= 0) {   /* in the memory of `into`, with its own shape */
        int32_t into = b->made_in[id];
        if (!b->t[into] && !(b->t[into] = root_tensor(b, into))) return NULL;
        b->held[id] = b->held[into];
        b->root[id] = b->root[into];
        tide_tensor * in = b->t[into];
        if (in->ndim == v->ndim && !memcmp(in->sizes, v->sizes, (size_t)v->ndim * 8)) return in;
        if (!(t = header(v, in->storage, in->offset))) return NULL;
        if (!own(x, t)) {
            tide_tensor_release(t);
            return NULL;
        }
        if (b->held[id] == HELD_BOUND && !add_bind(x, t, b->root[id], in->offset)) return NULL;
        return t;
    }
    if (b->t[id]) return b->t[id];   /* made early, for a value made in it */
    if (b->fresh[id] >= 0) {
        int32_t r = x->n_args + b->fresh[id];
        t = header(v, x->dummies[r], 0);
        if (t && !add_bind(x, t, r, 0)) {
            tide_tensor_release(t);
            return NULL;
        }
        b->held[id] = HELD_BOUND;
        b->root[id] = r;
    } else {
        t = header(v, x->arena, b->offset[id] / (int64_t)tide_dtype_size(v->dtype));
        b->held[id] = HELD_FIXED;
    }
    if (t && !own(x, t)) {
        tide_tensor_release(t);
        return NULL;
    }
    return t;
}

/* A new step of unit `unit` in wave `wave`, after the steps made before it. */
static step * add_step(tide_exec * x, int32_t op, int32_t wave, int32_t unit, const char * origin) {
    step * s = realloc(x->steps, (size_t)(x->n_steps + 1) * sizeof *s);
    if (!s) return NULL;
    x->steps = s;
    s        = &x->steps[x->n_steps];
    memset(s, 0, sizeof *s);
    s->op     = op;
    s->random = -1;
    s->wave   = wave;
    s->unit   = unit;
    s->order  = x->n_steps++;
    snprintf(s->origin, sizeof s->origin, "%s", origin);
    return s;
}

/* A new step of node `node`. */
static step * new_step(builder * b, int32_t node) {
    const tide_gnode * n = &b->g->nodes[node];
    return add_step(b->x, n->kind == TIDE_GN_OP ? n->op : -1, b->wave[node], node, n->origin);
}

/* Notes that value id is written in place. */
static bool note_write(builder * b, int32_t id) {
    tide_exec * x    = b->x;
    int32_t     base = tide_graph_base(b->g, id);
    const tide_gvalue * v = &b->g->values[base];
    if (v->kind == TIDE_GV_ARG) {
        x->arg_written[v->arg] = true;
        return true;
    }
    if (v->kind == TIDE_GV_EXTERN || v->kind == TIDE_GV_CONST) {
        bool seen = false;
        for (int32_t i = 0; i < x->n_bumped; i++) seen |= x->bumped[i] == b->t[id];
        if (!seen) {
            tide_tensor ** l = realloc(x->bumped, (size_t)(x->n_bumped + 1) * sizeof *l);
            if (!l) return false;
            x->bumped = l;
            l[x->n_bumped++] = b->t[id];
        }
        return add_storage(&x->writes, &x->n_writes, b->t[id]->storage);
    }
    return true;
}

static bool build_op(builder * b, int32_t i) {
    tide_graph *       g = b->g;
    tide_exec *        x = b->x;
    const tide_gnode * n = &g->nodes[i];
    tide_tensor *      in[TIDE_OP_MAX_IN];
    for (int32_t k = 0; k < n->n_in; k++) in[k] = b->t[n->in[k]];
    tide_tensor *    target = n->into >= 0 ? b->t[n->into] : NULL;
    tide_op_prepared r;
    /* an op of no inputs makes its result where it did at capture */
    bool        made = n->n_in == 0 && !target;
    tide_device d0   = made ? tide_default_device_swap(g->values[n->out[0]].dev) : (tide_device){0, 0};
    tide_status ps   = tide_op_prepare(n->op, in, n->n_in, &n->p, target, &r);
    if (made) tide_default_device_swap(d0);
    if (ps != TIDE_OK) {
        char why[160];
        snprintf(why, sizeof why, "node %d (%s) does not prepare: %s", i, tide_op_name(n->op), tide_last_error());
        return fail_build(b, why);
    }
    if (r.dev.type != x->dev.type || r.dev.index != x->dev.index)
        return fail_build(b, "an op runs on another device");
    if (!r.kernel) return fail_build(b, "a copy between the host and a device is not a kernel");
    for (int32_t k = 0; k < n->n_in; k++)
        if (b->held[n->in[k]] == HELD_FIXED && !add_storage(&x->reads, &x->n_reads, in[k]->storage))
            return fail_build(b, "out of memory");
    step * s = new_step(b, i);
    if (!s) return fail_build(b, "out of memory");
    s->kernel = r.kernel;
    s->c      = r.c;
    if (r.flags & TIDE_OPF_RANDOM) {
        /* An op that drew the same slice as an earlier one when captured (the
         * generator was set back: a checkpoint's recomputation replays its
         * forward's dropout) reads that op's slice in replays too. */
        for (int32_t k = 0; k < x->n_random && s->random < 0; k++)
            if (x->random_from[2 * k] == n->rng_seed && x->random_from[2 * k + 1] == n->rng_offset) s->random = k;
        if (s->random < 0) {
            uint64_t * rn = realloc(x->random_nelem, (size_t)(x->n_random + 1) * sizeof *rn);
            if (rn) x->random_nelem = rn;
            uint64_t * rf = rn ? realloc(x->random_from, 2 * (size_t)(x->n_random + 1) * sizeof *rf) : NULL;
            if (!rf) return fail_build(b, "out of memory");
            x->random_from = rf;
            rf[2 * x->n_random] = n->rng_seed, rf[2 * x->n_random + 1] = n->rng_offset;
            x->random_nelem[x->n_random] = 0;
            s->random = x->n_random++;
        }
    }
    if (target) {
        if (!note_write(b, n->into)) return fail_build(b, "out of memory");
        if (!r.temp) {
            s->c.out[0] = target;
            x->cost += target->nelem;
            return true;
        }
        /* the destination overlaps an input: compute into a temporary, then copy */
        tide_tensor * tmp = tide_tensor_empty(r.shape.ndim[0], r.shape.sizes[0], r.dtypes[0], x->dev);
        if (!tmp || !own(x, tmp)) {
            tide_tensor_release(tmp);
            return fail_build(b, "out of memory");
        }
        if (!add_storage(&x->writes, &x->n_writes, tmp->storage)) return fail_build(b, "out of memory");
        x->steps[x->n_steps - 1].c.out[0] = tmp;
        tide_op_prepared cp;
        if (tide_op_prepare(TIDE_OP_copy, &tmp, 1, NULL, target, &cp) != TIDE_OK)
            return fail_build(b, "the copy into an overlapping destination does not prepare");
        step * s2 = new_step(b, i);
        if (!s2) return fail_build(b, "out of memory");
        s2->kernel = cp.kernel;
        s2->c      = cp.c;
        s2->c.out[0] = target;
        x->cost += 2 * target->nelem;
        return true;
    }
    for (int32_t k = 0; k < n->n_out; k++) {
        const tide_gvalue * v = &g->values[n->out[k]];
        if (r.dtypes[k] != v->dtype || r.shape.ndim[k] != v->ndim ||
            memcmp(r.shape.sizes[k], v->sizes, (size_t)v->ndim * sizeof(int64_t)))
            return fail_build(b, "an op's result differs from the captured one");
        tide_tensor * t = root_tensor(b, n->out[k]);
        if (!t) return fail_build(b, "out of memory");
        b->t[n->out[k]] = t;
        x->steps[x->n_steps - 1].c.out[k] = t;
        x->cost += t->nelem;
    }
    return true;
}

static bool build_view(builder * b, int32_t i) {
    tide_graph *        g   = b->g;
    const tide_gnode *  n   = &g->nodes[i];
    int32_t             src = n->in[0], id = n->out[0];
    const tide_gvalue * v   = &g->values[id];
    tide_tensor *       t   = tide_graph_make_view(n, v, b->t[src]);
    if (!t) return fail_build(b, "a view does not replay");
    if (!own(b->x, t)) {
        tide_tensor_release(t);
        return fail_build(b, "out of memory");
    }
    b->t[id]    = t;
    b->held[id] = b->held[src];
    b->root[id] = b->root[src];
    if (b->held[id] == HELD_BOUND && !add_bind(b->x, t, b->root[id], t->offset))
        return fail_build(b, "out of memory");
    return true;
}

static bool build_fused(builder * b, int32_t i) {
    tide_exec *        x = b->x;
    const tide_gnode * n = &b->g->nodes[i];
    if (x->dev.type != TIDE_DEVICE_CPU && !n->fused->dev_fn)
        return fail_build(b, "a fused chain has no kernel on this device");
    step *             s = new_step(b, i);
    if (!s) return fail_build(b, "out of memory");
    s->fused = malloc(sizeof *s->fused);
    if (!s->fused) return fail_build(b, "out of memory");
    *s->fused = *n->fused;
    s->c.n_in = n->n_in;
    for (int32_t k = 0; k < n->n_in; k++) {
        s->c.in[k] = b->t[n->in[k]];
        if (b->held[n->in[k]] == HELD_FIXED && !add_storage(&x->reads, &x->n_reads, s->c.in[k]->storage))
            return fail_build(b, "out of memory");
    }
    if (n->into >= 0) {   /* a run that updates a tensor in place */
        if (!note_write(b, n->into)) return fail_build(b, "out of memory");
        tide_tensor * t = b->t[n->into];
        x->steps[x->n_steps - 1].c.out[0] = t;
        x->cost += t->nelem * n->fused->n_steps;
        return true;
    }
    tide_tensor * t = root_tensor(b, n->out[0]);
    if (!t) return fail_build(b, "out of memory");
    b->t[n->out[0]] = t;
    x->steps[x->n_steps - 1].c.out[0] = t;
    x->cost += t->nelem * n->fused->n_steps;
    return true;
}

static int by_wave(const void * a, const void * b) {
    const step * x = a, * y = b;
    return x->wave != y->wave ? x->wave - y->wave : x->order - y->order;
}

/* A constant written in place: an arena copy that a first step fills with its
 * first contents at every replay. */
static bool restore_const(builder * b, int32_t id) {
    tide_exec *         x = b->x;
    const tide_gvalue * v = &b->g->values[id];
    tide_tensor *       t = header(v, x->arena, b->offset[id] / (int64_t)tide_dtype_size(v->dtype));
    if (!t || !own(x, t)) {
        tide_tensor_release(t);
        return fail_build(b, "out of memory");
    }
    tide_tensor_retain(v->init);
    if (!own(x, v->init)) {
        tide_tensor_release(v->init);
        return fail_build(b, "out of memory");
    }
    b->t[id]    = t;
    b->held[id] = HELD_FIXED;
    tide_op_prepared cp;
    tide_tensor *    src = v->init;
    if (tide_op_prepare(TIDE_OP_copy, &src, 1, NULL, t, &cp) != TIDE_OK)
        return fail_build(b, "a constant's copy does not prepare");
    if (!cp.kernel) return fail_build(b, "a constant it writes in place was made on another device");
    if (!add_storage(&x->reads, &x->n_reads, src->storage)) return fail_build(b, "out of memory");
    step * s = add_step(x, TIDE_OP_copy, 0, -1 - id, "the start of the replay");   /* a unit before every node */
    if (!s) return fail_build(b, "out of memory");
    s->kernel   = cp.kernel;
    s->c        = cp.c;
    s->c.out[0] = t;
    x->cost += t->nelem;
    return true;
}

static handout handout_of(builder * b, int32_t id) {
    if (b->held[id] == HELD_BOUND) {
        const tide_gvalue * v = &b->g->values[id];
        bool root = (v->kind == TIDE_GV_ARG) || b->fresh[id] >= 0;
        /* before any replay, a bound view's offset is its delta (its bind's) */
        return root ? (handout){NULL, b->root[id], NULL, 0} : (handout){NULL, b->root[id], b->t[id], b->t[id]->offset};
    }
    return (handout){b->t[id], -1, NULL, 0};
}

static bool build(builder * b) {
    tide_graph * g = b->g;
    tide_exec *  x = b->x;
    if (!classify(b)) return false;
    x->arena = tide_storage_new((size_t)x->arena_bytes, x->dev);
    if (!x->arena) return fail_build(b, "out of memory for the arena");
    if (!add_storage(&x->writes, &x->n_writes, x->arena)) return fail_build(b, "out of memory");
    int32_t n_roots = x->n_args + x->n_fresh;
    x->dummies     = calloc((size_t)(n_roots > 0 ? n_roots : 1), sizeof *x->dummies);
    x->arg_written = calloc((size_t)(x->n_args > 0 ? x->n_args : 1), sizeof *x->arg_written);
    x->arg_meta    = calloc((size_t)(x->n_args > 0 ? x->n_args : 1), sizeof *x->arg_meta);
    if (!x->dummies || !x->arg_written || !x->arg_meta) return fail_build(b, "out of memory");
    for (int32_t r = 0; r < n_roots; r++)
        if (!(x->dummies[r] = tide_storage_new(0, x->dev))) return fail_build(b, "out of memory");
    for (int32_t id = 0; id < g->n_values; id++) {
        const tide_gvalue * v = &g->values[id];
        if (v->init) {
            if (!restore_const(b, id)) return false;
        } else if (v->kind == TIDE_GV_EXTERN || v->kind == TIDE_GV_CONST) {
            b->t[id]    = v->t;
            b->held[id] = HELD_FIXED;
            tide_tensor_retain(v->t);
            if (!own(x, v->t)) {
                tide_tensor_release(v->t);
                return fail_build(b, "out of memory");
            }
        } else if (v->kind == TIDE_GV_ARG) {
            x->arg_meta[v->arg]   = *v;
            x->arg_meta[v->arg].t = NULL;
            tide_tensor * t = header(v, x->dummies[v->arg], 0);
            if (!t || !own(x, t)) {
                tide_tensor_release(t);
                return fail_build(b, "out of memory");
            }
            if (!add_bind(x, t, v->arg, 0)) return fail_build(b, "out of memory");
            b->t[id] = t, b->held[id] = HELD_BOUND, b->root[id] = v->arg;
        }
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const tide_gnode * n = &g->nodes[i];
        bool ok = true;
        switch (n->kind) {
        case TIDE_GN_OP:    ok = b->elided[i] || build_op(b, i); break;
        case TIDE_GN_VIEW:  ok = build_view(b, i); break;
        case TIDE_GN_FUSED: ok = build_fused(b, i); break;
        case TIDE_GN_EMPTY: ok = (b->t[n->out[0]] = root_tensor(b, n->out[0])) != NULL; break;
        case TIDE_GN_SET_GRAD: {
            grad_set * gs = realloc(x->grads, (size_t)(x->n_grads + 1) * sizeof *gs);
            if (!gs) return fail_build(b, "out of memory");
            x->grads = gs;
            gs = &x->grads[x->n_grads++];
            const tide_gvalue * leaf = &g->values[n->in[0]];
            gs->leaf     = leaf->kind == TIDE_GV_ARG ? NULL : b->t[n->in[0]];
            gs->leaf_arg = leaf->kind == TIDE_GV_ARG ? leaf->arg : -1;
            if (leaf->kind != TIDE_GV_ARG && leaf->kind != TIDE_GV_EXTERN)
                return fail_build(b, "a gradient is set on a tensor that is not a leaf of the graph");
            gs->has = n->n_in == 2;
            if (gs->has) gs->grad = handout_of(b, n->in[1]);
            break;
        }
        default: ok = fail_build(b, "an unknown node kind");
        }
        if (!ok) return false;
        if (b->why[0]) return false;
    }
    for (int32_t i = 0; i < x->n_steps; i++) {   /* a shared slot reserves for its largest draw */
        int32_t  k = x->steps[i].random;
        uint64_t n = k >= 0 ? (uint64_t)x->steps[i].c.out[0]->nelem : 0;
        if (k >= 0 && n > x->random_nelem[k]) x->random_nelem[k] = n;
    }
    qsort(x->steps, (size_t)x->n_steps, sizeof *x->steps, by_wave);
    x->n_waves = x->n_steps ? x->steps[x->n_steps - 1].wave + 1 : 0;
    x->waves   = calloc((size_t)x->n_waves + 1, sizeof *x->waves);
    if (!x->waves) return fail_build(b, "out of memory");
    for (int32_t i = 0, w = 0; w <= x->n_waves; w++) {
        while (i < x->n_steps && x->steps[i].wave < w) i++;
        x->waves[w] = i;
    }
    /* a node's steps run in order on one thread; a small node's run beside others' */
    for (int32_t i = 0; i < x->n_steps; i++) {
        step *  s    = &x->steps[i];
        int64_t cost = 0;
        for (int32_t k = 0; k < s->c.n_in; k++) cost += s->c.in[k]->nelem;
        for (int32_t k = 0; k < s->c.n_out; k++) cost += s->c.out[k]->nelem;
        s->small = cost < 2 * TIDE_GRAIN;
    }
    for (int32_t i = 0; i < x->n_steps; i++)   /* a unit is small when all its steps are */
        for (int32_t j = i + 1; j < x->n_steps && x->steps[j].unit == x->steps[i].unit; j++)
            x->steps[i].small = x->steps[j].small = x->steps[i].small && x->steps[j].small;
    x->small_units = malloc((size_t)(x->n_steps > 0 ? x->n_steps : 1) * sizeof *x->small_units);
    x->wave_units  = malloc((size_t)(x->n_waves + 1) * sizeof *x->wave_units);
    if (!x->small_units || !x->wave_units) return fail_build(b, "out of memory");
    int32_t nu = 0;
    for (int32_t w = 0; w < x->n_waves; w++) {
        x->wave_units[w] = nu;
        for (int32_t i = x->waves[w]; i < x->waves[w + 1]; i++)
            if (x->steps[i].small && (i == x->waves[w] || x->steps[i - 1].unit != x->steps[i].unit))
                x->small_units[nu++] = i;
    }
    x->wave_units[x->n_waves] = nu;
    x->n_outputs = g->n_outputs;
    x->outputs   = malloc((size_t)(g->n_outputs > 0 ? g->n_outputs : 1) * sizeof *x->outputs);
    if (!x->outputs) return fail_build(b, "out of memory");
    for (int32_t i = 0; i < g->n_outputs; i++) x->outputs[i] = handout_of(b, g->outputs[i]);
    return true;
}

static void drop_graph(tide_exec * x) {
    const tide_devapi * api = tide_cuda_api();
    if (x->graph && api) api->graph_destroy(x->dev.index, x->graph);
    x->graph = NULL;
    tide_cuda_held_free(&x->held, x->dev.index);
    for (int32_t r = 0; x->statics && r < x->n_args + x->n_fresh; r++) tide_tensor_release(x->statics[r]);
    tide_tensor_release(x->rng_at);
    free(x->statics), free(x->dev_reports);
    x->rng_at      = NULL;
    x->statics     = NULL;
    x->dev_reports = NULL;
}

void tide_exec_release(tide_exec * x) {
    if (!x || atomic_fetch_sub(&x->refcount, 1) != 1) return;
    drop_graph(x);
    free(x->arg_meta);
    for (int32_t i = 0; i < x->n_steps; i++) free(x->steps[i].fused);
    tide_tensor_release_many(x->owned, x->n_owned);
    int32_t n_roots = x->n_args + x->n_fresh;
    for (int32_t r = 0; x->dummies && r < n_roots; r++) tide_storage_release(x->dummies[r]);
    tide_storage_release(x->arena);
    free(x->steps), free(x->binds), free(x->dummies), free(x->owned), free(x->reads), free(x->writes);
    free(x->arg_written), free(x->outputs), free(x->grads), free(x->bumped);
    free(x->random_nelem), free(x->random_from), free(x->waves), free(x->small_units), free(x->wave_units);
    free(x->fresh_meta);
    free(x);
}

tide_exec * tide_exec_plan(tide_graph * g, char * why, size_t n_why) {
    tide_exec * x = calloc(1, sizeof *x);
    builder     b = {g, x, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, ""};
    size_t      nv = (size_t)(g->n_values > 0 ? g->n_values : 1);
    if (!x) {
        snprintf(why, n_why, "out of memory");
        return NULL;
    }
    atomic_init(&x->refcount, 1);
    x->n_args = g->n_args;
    b.t      = calloc(nv, sizeof *b.t);
    b.held   = calloc(nv, sizeof *b.held);
    b.root   = calloc(nv, sizeof *b.root);
    b.fresh  = calloc(nv, sizeof *b.fresh);
    b.offset = calloc(nv, sizeof *b.offset);
    b.wave   = calloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1), sizeof *b.wave);
    b.made_in = calloc(nv, sizeof *b.made_in);
    b.elided  = calloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1), sizeof *b.elided);
    b.escapes = calloc(nv, sizeof *b.escapes);
    int32_t off = tide_grad_off;
    tide_grad_off = 1;   /* views made here record no autograd history */
    bool ok = b.t && b.held && b.root && b.fresh && b.offset && b.wave && b.made_in && b.elided && b.escapes
                  ? build(&b) : fail_build(&b, "out of memory");
    tide_grad_off = off;
    free(b.t), free(b.held), free(b.root), free(b.fresh), free(b.offset), free(b.wave), free(b.made_in), free(b.elided);
    free(b.escapes);
    if (!ok) {
        snprintf(why, n_why, "%s", b.why);
        tide_exec_release(x);
        return NULL;
    }
    return x;
}

/* -- running ----------------------------------------------------------------------------------- */

/* The task's context: the plan, then n_args + n_fresh root tensors and two
 * generator words per random step, in one block the engine copies. */
typedef struct {
    tide_exec *   x;
    tide_tensor * roots[];
} run_ctx;

static uint64_t * rng_words(run_ctx * rc) { return (uint64_t *)(rc->roots + rc->x->n_args + rc->x->n_fresh); }
/* A device replay's: per step, the report its launch took (or NULL), after the generator words. */
static tide_devreport ** reports_of(run_ctx * rc) { return (tide_devreport **)(rng_words(rc) + 2 * rc->x->n_random); }
static size_t ctx_size(const tide_exec * x) {
    size_t n = sizeof(run_ctx) + (size_t)(x->n_args + x->n_fresh) * sizeof(tide_tensor *) + 2 * (size_t)x->n_random * 8;
    return n + (x->dev.type == TIDE_DEVICE_CUDA ? (size_t)x->n_steps * sizeof(tide_devreport *) : 0);
}

static void bind_roots(run_ctx * rc) {
    tide_exec * x = rc->x;
    for (int32_t i = 0; i < x->n_binds; i++) {
        const bind *   bd = &x->binds[i];
        tide_tensor *  r  = rc->roots[bd->root];
        tide_storage_retain(r->storage);
        bd->t->storage = r->storage;
        bd->t->offset  = r->offset + bd->delta;
    }
    uint64_t * rng = rng_words(rc);
    for (int32_t i = 0; i < x->n_steps; i++) {
        step * s = &x->steps[i];
        if (s->random < 0) continue;
        s->c.rng_seed   = rng[2 * s->random];
        s->c.rng_offset = rng[2 * s->random + 1];
    }
}

static void unbind_roots(tide_exec * x) {
    for (int32_t i = 0; i < x->n_binds; i++) {
        const bind * bd = &x->binds[i];
        tide_storage_release(bd->t->storage);
        bd->t->storage = x->dummies[bd->root];
        bd->t->offset  = 0;
    }
}

/* Sets the error of a step that failed, naming its op and line. */
static tide_status step_failed(const step * s, tide_status st) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s (replaying %s captured at %s)", tide_last_error(),
             s->op >= 0 ? tide_op_name(s->op) : "a fused chain", s->origin[0] ? s->origin : "?");
    return tide_error_set(st, "%s", msg);
}

/* Runs step i, with the message naming its op and line on failure. */
static tide_status run_step(step * s) {
    double      t0 = tide_trace_now();
    tide_status st = s->fused ? tide_ew_run_fused(s->fused, s->c.in, s->c.out[0]) : s->kernel(&s->c);
    if (t0 > 0) tide_trace_step(s->op >= 0 ? tide_op_name(s->op) : "fused", s->origin, t0);
    return st == TIDE_OK ? st : step_failed(s, st);
}

/* The small units of one wave, run at once across the pool. */
typedef struct {
    tide_exec *     x;
    const int32_t * units;                 /* first step of each unit (its steps follow it) */
    atomic_int      failed;
    tide_status     st;
    char            msg[1024];
} wave_run;

static void run_units(void * ctx, int64_t begin, int64_t end) {
    wave_run * w = ctx;
    step * steps = w->x->steps;
    for (int64_t u = begin; u < end; u++) {
        int32_t first = w->units[u];
        for (int32_t i = first; i < w->x->n_steps && steps[i].unit == steps[first].unit; i++) {
            if (atomic_load_explicit(&w->failed, memory_order_relaxed)) return;
            tide_status st = run_step(&steps[i]);
            if (st != TIDE_OK && atomic_exchange(&w->failed, 1) == 0) {
                w->st = st;
                snprintf(w->msg, sizeof w->msg, "%s", tide_last_error());
            }
        }
    }
}

static tide_status run(void * ctx) {
    run_ctx *   rc = ctx;
    tide_exec * x  = rc->x;
    bind_roots(rc);
    /* Wave by wave: the small units of a wave together across the pool (their
     * kernels run serially there), then its large steps one by one, each
     * kernel splitting its own work across the pool. */
    tide_status st = TIDE_OK;
    for (int32_t w = 0; w < x->n_waves && st == TIDE_OK; w++) {
        int32_t u0 = x->wave_units[w], u1 = x->wave_units[w + 1];
        if (u1 - u0 >= 2) {
            wave_run wr = {x, x->small_units + u0, 0, TIDE_OK, ""};
            tide_parallel_for(u1 - u0, 1, 1, run_units, &wr);
            if (wr.st != TIDE_OK) st = tide_error_set(wr.st, "%s", wr.msg);
        }
        for (int32_t i = x->waves[w]; i < x->waves[w + 1] && st == TIDE_OK; i++)
            if (!x->steps[i].small || u1 - u0 < 2) st = run_step(&x->steps[i]);
    }
    unbind_roots(x);
    return st;
}

static void        record_graph(tide_exec * x);
static tide_status run_graph(run_ctx * rc);

/* A replay on a CUDA device: every step launched in order on the device's
 * stream (the engine's device queue calls this, and learns from the device
 * when the work is done). The steps' tensors are read at the launch, so the
 * plan's headers are free for the next replay once it returns; the reports
 * the launches took go with this replay, for complete_device. */
static tide_status run_device(void * ctx) {
    run_ctx *         rc  = ctx;
    tide_exec *       x   = rc->x;
    tide_devreport ** rep = reports_of(rc);
    tide_status       st  = TIDE_OK;
    /* the first replay launches step by step (kernels set up their libraries
     * and caches then), the second records the graph that later ones launch */
    if (atomic_load_explicit(&x->graph_state, memory_order_relaxed) == GRAPH_UNTRIED && x->n_device_runs++ >= 1)
        record_graph(x);
    if (atomic_load_explicit(&x->graph_state, memory_order_relaxed) == GRAPH_READY) return run_graph(rc);
    bind_roots(rc);
    for (int32_t i = 0; i < x->n_steps && st == TIDE_OK; i++) {
        step * s = &x->steps[i];
        double t0 = tide_trace_now();
        st     = s->fused ? tide_fuse_cuda_launch(s->fused, s->c.in, s->c.out[0]) : tide_cuda_launch(&s->c);
        rep[i] = s->c.dev_report;
        s->c.dev_report = NULL;
        if (t0 > 0) tide_trace_step(s->op >= 0 ? tide_op_name(s->op) : "fused", s->origin, t0);
        if (st != TIDE_OK) st = step_failed(s, st);
    }
    unbind_roots(x);
    return st;
}

/* Gives up on a device graph for x, saying why (for tide_graph_describe). */
static void no_graph(tide_exec * x, const char * why) {
    drop_graph(x);
    snprintf(x->graph_why, sizeof x->graph_why, "%s", why);
    atomic_store_explicit(&x->graph_state, GRAPH_NO, memory_order_release);
}

/* Records the plan's steps as one device graph over fixed copies of its
 * roots, once; on failure the plan goes on launching step by step. */
static void record_graph(tide_exec * x) {
    const tide_devapi * api = tide_cuda_api();
    int32_t dev = x->dev.index, n_roots = x->n_args + x->n_fresh;
    void *  stream = tide_cuda_stream(dev);
    char    why[160];
    if (!stream) return no_graph(x, "the device has no stream");
    int64_t n_words = 2 * (int64_t)x->n_random;
    if (x->n_random && !(x->rng_at = tide_tensor_empty(1, &n_words, TIDE_DTYPE_I64, x->dev)))
        return no_graph(x, "out of device memory for its random steps' slices");
    x->statics     = calloc((size_t)(n_roots > 0 ? n_roots : 1), sizeof *x->statics);
    x->dev_reports = calloc((size_t)(x->n_steps > 0 ? x->n_steps : 1), sizeof *x->dev_reports);
    run_ctx * rc   = calloc(1, ctx_size(x));   /* the roots bound to the statics; its slices unused */
    if (!x->statics || !x->dev_reports || !rc) {
        free(rc);
        return no_graph(x, "out of memory");
    }
    rc->x = x;
    for (int32_t r = 0; r < n_roots; r++) {
        const tide_gvalue * v = r < x->n_args ? &x->arg_meta[r] : &x->fresh_meta[r - x->n_args];
        if (!(x->statics[r] = rc->roots[r] = tide_tensor_empty(v->ndim, v->sizes, v->dtype, x->dev))) {
            free(rc);
            return no_graph(x, "out of device memory for its fixed arguments and results");
        }
    }
    if (api->capture_begin(dev, stream) != TIDE_DEVAPI_OK) {
        snprintf(why, sizeof why, "recording failed: %s", api->error_text());
        free(rc);
        return no_graph(x, why);
    }
    bind_roots(rc);
    tide_status st = TIDE_OK;
    for (int32_t i = 0; i < x->n_steps && st == TIDE_OK; i++) {
        step *  s = &x->steps[i];
        int32_t k = s->random;
        st = s->fused ? tide_fuse_cuda_launch(s->fused, s->c.in, s->c.out[0])
                      : tide_cuda_launch_held(&s->c, &x->held, &x->dev_reports[i],
                                              k >= 0 ? (uint64_t *)tide_tensor_ptr(x->rng_at) + 2 * k : NULL);
    }
    if (st != TIDE_OK) snprintf(why, sizeof why, "%s", tide_last_error());
    unbind_roots(x);
    free(rc);
    void * graph = NULL;
    if (api->capture_end(dev, stream, &graph) != TIDE_DEVAPI_OK && st == TIDE_OK) {
        st = TIDE_E_DEVICE;
        snprintf(why, sizeof why, "%s", api->error_text());
    }
    x->graph = graph;
    if (st != TIDE_OK) return no_graph(x, why);
    atomic_store_explicit(&x->graph_state, GRAPH_READY, memory_order_release);
}

/* A copy of n bytes between two of the device's tensors, in stream order. */
static tide_status copy_dense(tide_exec * x, tide_tensor * dst, tide_tensor * src, void * stream) {
    size_t n = (size_t)src->nelem * tide_dtype_size(src->dtype_id);
    if (!n) return TIDE_OK;
    const tide_devapi * api = tide_cuda_api();
    if (api->copy_async(x->dev.index, tide_tensor_ptr(dst), tide_tensor_ptr(src), n, TIDE_COPY_D2D, stream) ==
        TIDE_DEVAPI_OK)
        return TIDE_OK;
    return tide_error_set(TIDE_E_DEVICE, "jit replay: copying around the device graph failed: %s (on cuda:%d)",
                          api->error_text(), x->dev.index);
}

/* A replay as one launch of the plan's device graph: the arguments copied
 * into its fixed ones, the graph, then its fixed results copied into this
 * replay's, the arguments it wrote back into theirs, and its reports into
 * pinned memory for complete_device. */
static tide_status run_graph(run_ctx * rc) {
    tide_exec *         x   = rc->x;
    const tide_devapi * api = tide_cuda_api();
    void *              stream = tide_cuda_stream(x->dev.index);
    tide_status         st  = TIDE_OK;
    for (int32_t k = 0; k < x->n_args && st == TIDE_OK; k++) st = copy_dense(x, x->statics[k], rc->roots[k], stream);
    if (st != TIDE_OK) return st;
    /* this replay's slices, which it reserved when pushed: copied from the
     * task's context, which the runtime stages at once (pageable memory) */
    if (x->n_random && api->copy_async(x->dev.index, tide_tensor_ptr(x->rng_at), rng_words(rc),
                                       16 * (size_t)x->n_random, TIDE_COPY_H2D, stream) != TIDE_DEVAPI_OK)
        return tide_error_set(TIDE_E_DEVICE, "jit replay: copying the random slices failed: %s (on cuda:%d)",
                              api->error_text(), x->dev.index);
    if (api->graph_launch(x->dev.index, x->graph, stream) != TIDE_DEVAPI_OK)
        return tide_error_set(TIDE_E_DEVICE, "jit replay: launching the device graph failed: %s (on cuda:%d)",
                              api->error_text(), x->dev.index);
    for (int32_t k = 0; k < x->n_args && st == TIDE_OK; k++)
        if (x->arg_written[k]) st = copy_dense(x, rc->roots[k], x->statics[k], stream);
    for (int32_t f = x->n_args; f < x->n_args + x->n_fresh && st == TIDE_OK; f++)
        st = copy_dense(x, rc->roots[f], x->statics[f], stream);
    tide_devreport ** rep = reports_of(rc);
    for (int32_t i = 0; i < x->n_steps && st == TIDE_OK; i++) {
        if (!x->dev_reports[i]) continue;
        if (!(rep[i] = tide_cuda_take_report(tide_op_name(x->steps[i].op)))) return tide_last_status();
        if (api->copy_async(x->dev.index, rep[i], x->dev_reports[i], sizeof(tide_devreport), TIDE_COPY_D2H, stream) !=
            TIDE_DEVAPI_OK)
            st = tide_error_set(TIDE_E_DEVICE, "jit replay: copying a report out of the device graph failed: %s "
                                "(on cuda:%d)", api->error_text(), x->dev.index);
    }
    return st;
}

/* Once the device has done a replay: what its steps' work reported, the
 * first in step order raised. */
static tide_status complete_device(void * ctx) {
    run_ctx *         rc  = ctx;
    tide_exec *       x   = rc->x;
    tide_devreport ** rep = reports_of(rc);
    tide_status       st  = TIDE_OK;
    for (int32_t i = 0; i < x->n_steps; i++) {
        if (!rep[i]) continue;
        tide_devreport * r = rep[i];
        rep[i] = NULL;
        if (st != TIDE_OK) {
            tide_cuda_give_report(r);
            continue;
        }
        st = tide_cuda_raise_report(tide_op_name(x->steps[i].op), x->dev.index, r);
        if (st != TIDE_OK) st = step_failed(&x->steps[i], st);
    }
    return st;
}

static void keep_run(void * ctx) {
    run_ctx * rc = ctx;
    atomic_fetch_add(&rc->x->refcount, 1);
    for (int32_t i = 0; i < rc->x->n_args + rc->x->n_fresh; i++) tide_tensor_retain(rc->roots[i]);
}

static void drop_run(void * ctx) {
    run_ctx * rc = ctx;
    if (rc->x->dev.type == TIDE_DEVICE_CUDA)   /* a replay that never completed */
        for (int32_t i = 0; i < rc->x->n_steps; i++) tide_cuda_give_report(reports_of(rc)[i]);
    tide_tensor_release_many(rc->roots, rc->x->n_args + rc->x->n_fresh);
    tide_exec_release(rc->x);
}

static void describe_run(const void * ctx, char * buf, size_t n) {
    const run_ctx * rc = ctx;
    snprintf(buf, n, "a replay of %d steps", rc->x->n_steps);
}

/* A result or gradient of this replay: a fixed tensor, a root, or a view of one. */
static tide_tensor * hand_out(const handout * h, tide_tensor * const * roots) {
    if (h->fixed) {
        tide_tensor_retain(h->fixed);
        return h->fixed;
    }
    tide_tensor * r = roots[h->root];
    if (!h->meta) {
        tide_tensor_retain(r);
        return r;
    }
    return tide_tensor_as_strided(r, h->meta->ndim, h->meta->sizes, h->meta->strides, r->offset + h->delta);
}

/* Whether storage s is among the plan's fixed ones. */
static bool is_fixed(const tide_exec * x, const tide_storage * s) {
    for (int32_t i = 0; i < x->n_reads; i++)
        if (x->reads[i] == s) return true;
    for (int32_t i = 0; i < x->n_writes; i++)
        if (x->writes[i] == s) return true;
    return false;
}

int32_t tide_exec_accepts(const tide_exec * x, tide_tensor * const * args) {
    for (int32_t k = 0; k < x->n_args; k++) {
        if (!tide_tensor_is_contiguous(args[k]) || is_fixed(x, args[k]->storage)) return 0;
        if (x->args_grad_check && tide_needs_grad(args[k])) return 0;
        for (int32_t j = 0; j < k; j++)
            if (args[j]->storage == args[k]->storage) return 0;
    }
    return 1;
}

tide_status tide_exec_replay(tide_exec * x, tide_tensor * const * args, tide_tensor ** outputs,
                             tide_tensor ** written, int32_t * n_written) {
    int32_t n_roots = x->n_args + x->n_fresh;
    size_t  size    = ctx_size(x);
    /* one block: the task's context, then the storages it reads and writes */
    run_ctx * rc    = malloc(size + (size_t)(x->n_reads + x->n_writes + 2 * n_roots) * sizeof(tide_storage *));
    if (!rc) return tide_error_set(TIDE_E_OOM, "jit replay: out of memory");
    tide_storage ** rs = (tide_storage **)((char *)rc + size), ** ws = rs + x->n_reads + n_roots;
    rc->x = x;
    for (int32_t k = 0; k < x->n_args; k++) rc->roots[k] = args[k];
    tide_status st = TIDE_OK;
    int32_t     made = 0;
    for (int32_t f = 0; f < x->n_fresh && st == TIDE_OK; f++, made++) {
        const tide_gvalue * v = &x->fresh_meta[f];
        rc->roots[x->n_args + f] = tide_tensor_empty(v->ndim, v->sizes, v->dtype, x->dev);
        if (!rc->roots[x->n_args + f]) st = TIDE_E_OOM;
    }
    if (st != TIDE_OK) {
        tide_tensor_release_many(rc->roots + x->n_args, made);
        free(rc);
        return st;
    }
    uint64_t * rng = rng_words(rc);
    for (int32_t k = 0; k < x->n_random; k++)   /* in node order, as eager ops draw */
        tide_rng_reserve(x->random_nelem[k], &rng[2 * k], &rng[2 * k + 1]);
    int32_t nr = 0, nw = 0;
    for (int32_t i = 0; i < x->n_reads; i++) rs[nr++] = x->reads[i];
    for (int32_t i = 0; i < x->n_writes; i++) ws[nw++] = x->writes[i];
    for (int32_t k = 0; k < x->n_args; k++) {
        if (x->arg_written[k]) ws[nw++] = args[k]->storage;
        else rs[nr++] = args[k]->storage;
    }
    for (int32_t f = 0; f < x->n_fresh; f++) ws[nw++] = rc->roots[x->n_args + f]->storage;
    tide_engine_task task = {run, rc, size, keep_run, drop_run, "replay", x->cost, describe_run, NULL, 0};
    if (x->dev.type == TIDE_DEVICE_CUDA) {
        memset(reports_of(rc), 0, (size_t)x->n_steps * sizeof(tide_devreport *));
        task.fn       = run_device;
        task.complete = complete_device;
    }
    st = tide_engine_push(&task, rs, nr, ws, nw, x->dev);
    if (st == TIDE_OK) {
        int32_t off = tide_grad_off;
        tide_grad_off = 1;
        for (int32_t i = 0; i < x->n_outputs && st == TIDE_OK; i++)
            if (!(outputs[i] = hand_out(&x->outputs[i], rc->roots))) st = TIDE_E_OOM;
        for (int32_t i = 0; i < x->n_grads && st == TIDE_OK; i++) {
            const grad_set * gs   = &x->grads[i];
            tide_tensor *    leaf = gs->leaf ? gs->leaf : args[gs->leaf_arg];
            tide_tensor *    gr   = gs->has ? hand_out(&gs->grad, rc->roots) : NULL;
            if (gs->has && !gr) st = TIDE_E_OOM;
            tide_tensor_release(leaf->ag_grad);
            leaf->ag_grad = gr;
        }
        tide_grad_off = off;
        for (int32_t i = 0; i < x->n_bumped; i++)
            atomic_fetch_add_explicit(&x->bumped[i]->storage->version, 1, memory_order_relaxed);
        for (int32_t k = 0; k < x->n_args; k++)
            if (x->arg_written[k]) atomic_fetch_add_explicit(&args[k]->storage->version, 1, memory_order_relaxed);
        *n_written = 0;
        for (int32_t i = 0; i < x->n_bumped; i++) written[(*n_written)++] = x->bumped[i];
        for (int32_t f = 0; f < x->n_fresh; f++) written[(*n_written)++] = rc->roots[x->n_args + f];
        for (int32_t i = 0; i < *n_written; i++) tide_tensor_retain(written[i]);
    }
    tide_tensor_release_many(rc->roots + x->n_args, x->n_fresh);
    free(rc);
    return st;
}

int64_t tide_exec_peak_bytes(const tide_exec * x) {
    int64_t n = x->arena_bytes;
    for (int32_t f = 0; f < x->n_fresh; f++) n += (int64_t)tide_graph_value_bytes(&x->fresh_meta[f]);
    return n;
}
const char * tide_exec_largest(const tide_exec * x) { return x->largest; }
int32_t tide_exec_num_steps(const tide_exec * x) { return x->n_steps; }
int32_t tide_exec_num_waves(const tide_exec * x) { return x->n_waves; }

const char * tide_exec_device_graph(const tide_exec * x) {
    switch (atomic_load_explicit(&x->graph_state, memory_order_acquire)) {
    case GRAPH_READY: return "one device graph launch";
    case GRAPH_NO:    return x->graph_why;
    default:          return x->dev.type == TIDE_DEVICE_CUDA ? "" : NULL;
    }
}
