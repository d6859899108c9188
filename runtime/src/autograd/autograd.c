/*
 * autograd.c - define-by-run reverse mode: the nodes that op calls and views
 * record, the public autograd API, and the backward walk, which runs each
 * node's rule as ordinary (asynchronous) ops and routes the results to the
 * next nodes or into leaves' gradients. The rules themselves are in rules.c;
 * this file knows no op by name except the few the vocabulary needs.
 */
#include "grad.h"
#include "../graph/graph.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

_Thread_local int32_t tide_grad_off;

void    tide_autograd_set_enabled(int32_t on) { tide_grad_off = !on; }
int32_t tide_autograd_is_enabled(void) { return !tide_grad_off; }

static bool is_float(int32_t dtype) { return tide_dtype_is_float(dtype) != 0; }

static void meta_of(tide_meta * m, const tide_tensor * t) {
    m->ndim  = t->ndim;
    m->dtype = t->dtype_id;
    m->dev   = t->dev;
    memcpy(m->sizes, t->sizes, sizeof m->sizes);
}

static bool same_shape(const tide_tensor * t, const tide_meta * m) {
    return t->ndim == m->ndim && memcmp(t->sizes, m->sizes, (size_t)m->ndim * sizeof(int64_t)) == 0;
}

static const char * node_name(const tide_node * n) {
    static const char * views[] = {"?", "view", "permute", "expand", "slice", "as_strided", "alias", "custom"};
    if (n->op == TIDE_NODE_CUSTOM && n->name) return n->name;
    return n->op >= 0 ? tide_op_name(n->op) : views[-n->op];
}

/* A header over t's storage and view that takes no part in autograd. */
static tide_tensor * alias(const tide_tensor * t) {
    tide_tensor * a = tide_tensor_alloc_header(t->storage, t->dtype_id);
    if (!a) return NULL;
    a->ndim   = t->ndim;
    a->offset = t->offset;
    a->flags  = t->flags & (TIDE_TENSOR_WRAPPED_NUMBER | TIDE_TENSOR_VIEW);
    memcpy(a->sizes, t->sizes, sizeof a->sizes);
    memcpy(a->strides, t->strides, sizeof a->strides);
    a->nelem = t->nelem;
    if (TIDE_UNLIKELY(tide_capture != NULL)) tide_graph_on_view((tide_tensor *)t, a, TIDE_VIEW_ALIAS, NULL, 0);
    return a;
}

/* -- hook lists ---------------------------------------------------------------------

   Hooks live on the node whose output they watch (a leaf's in leaf_hooks), under
   hook_lock: tensors die, and nodes are freed, on any thread. An entry names its
   tensor weakly; a tensor named so is flagged HOOKED and drops its entries when it
   dies (tide_autograd_forget). The ids of callers' hooks dropped with a node or a
   leaf are queued, so that the caller can free what it kept for them. */

static pthread_mutex_t hook_lock = PTHREAD_MUTEX_INITIALIZER;
static tide_hook *     leaf_hooks;
static int64_t         hook_counter;
static int64_t *       dead_ids;
static int64_t         n_dead, cap_dead;

static void dead_push(int64_t id) {   /* under hook_lock; on OOM the caller keeps a stale entry */
    if (n_dead == cap_dead) {
        int64_t   cap = cap_dead ? 2 * cap_dead : 64;
        int64_t * v   = realloc(dead_ids, (size_t)cap * sizeof *v);
        if (!v) return;
        dead_ids = v, cap_dead = cap;
    }
    dead_ids[n_dead++] = id;
}

static void hook_append(tide_hook ** list, tide_hook * h) {
    while (*list) list = &(*list)->next;
    h->next = NULL;
    *list   = h;
}

/* Unlinks the entries of *list that name t; retain_grad's go to *moved when given,
 * the others are freed. Under hook_lock. */
static void hook_unlink(tide_hook ** list, const tide_tensor * t, tide_hook ** moved) {
    for (tide_hook ** p = list; *p;) {
        tide_hook * h = *p;
        if (h->tensor != t) {
            p = &h->next;
            continue;
        }
        *p = h->next;
        if (moved && h->id == 0) {
            hook_append(moved, h);
        } else {
            if (h->id) dead_push(h->id);
            free(h);
        }
    }
}

void tide_autograd_forget(tide_tensor * t) {
    pthread_mutex_lock(&hook_lock);
    if (t->ag_node) hook_unlink(&t->ag_node->hooks, t, NULL);
    hook_unlink(&leaf_hooks, t, NULL);
    pthread_mutex_unlock(&hook_lock);
}

/* Moves t's retain_grad entry from node `from` (or none) to output nr of node `to` (or drops it). */
static void retain_move(tide_tensor * t, tide_node * from, tide_node * to, int32_t nr) {
    tide_hook * moved = NULL;
    pthread_mutex_lock(&hook_lock);
    if (from) hook_unlink(&from->hooks, t, &moved);
    if (moved && to) {
        moved->nr = nr;
        hook_append(&to->hooks, moved);
    } else {
        free(moved);
        t->flags &= ~(uint32_t)TIDE_TENSOR_RETAINS_GRAD;
    }
    pthread_mutex_unlock(&hook_lock);
}

/* -- nodes -------------------------------------------------------------------------- */

static void free_saved(tide_node * n) {
    for (int32_t i = 0; i < TIDE_SAVED_MAX; i++) {
        tide_tensor_release(n->saved[i]);
        n->saved[i] = NULL;
    }
}

/* Releases n; a chain of nodes is released iteratively, so long histories
 * (a loop of ten thousand ops) cannot overflow the stack. */
void tide_node_release(tide_node * n) {
    enum { STACK = 64 };
    tide_node * stack[STACK];
    int32_t     top = 0;
    while (n) {
        if (atomic_fetch_sub_explicit(&n->refcount, 1, memory_order_acq_rel) == 1) {
            free_saved(n);
            if (n->hooks || n->op == TIDE_NODE_CUSTOM) {   /* no tensor names n any more: only the lists' lock is needed */
                pthread_mutex_lock(&hook_lock);
                for (tide_hook * h = n->hooks, * next; h; h = next) {
                    next = h->next;
                    if (h->id) dead_push(h->id);
                    free(h);
                }
                if (n->op == TIDE_NODE_CUSTOM) dead_push(n->p.ints[0]);   /* its caller frees its function's state */
                pthread_mutex_unlock(&hook_lock);
                free(n->name);
            }
            for (int32_t i = 0; i < TIDE_OP_MAX_OUT; i++) tide_tensor_release(n->gbuf[i]);
            for (int32_t i = 0; i < n->n_in; i++) {
                tide_tensor_release(n->next[i].leaf);
                tide_node * next = n->next[i].node;
                if (!next) continue;
                if (top < STACK) stack[top++] = next;
                else tide_node_release(next);   /* deeper than the stack: recurse (rare: wide nodes) */
            }
            tide_obj_free(TIDE_OBJ_NODE, n);
        }
        n = top ? stack[--top] : NULL;
    }
}

static void node_retain(tide_node * n) { atomic_fetch_add_explicit(&n->refcount, 1, memory_order_relaxed); }

/* A node for op with the given inputs, its edges taken from them. */
static tide_node * node_new(int32_t op, const tide_grad_rule * rule, tide_tensor * const * in, int32_t n_in,
                            int32_t n_out) {
    tide_node * n = tide_obj_alloc(TIDE_OBJ_NODE, sizeof *n);
    if (!n) {
        tide_error_set(TIDE_E_OOM, "out of memory: autograd node");
        return NULL;
    }
    atomic_init(&n->refcount, 1);
    n->op    = op;
    n->rule  = rule;
    n->n_in  = n_in;
    n->n_out = n_out;
    for (int32_t i = 0; i < n_in; i++) {
        tide_tensor * t = in[i];
        meta_of(&n->in[i], t);
        if (t->ag_node) {
            node_retain(t->ag_node);
            n->next[i].node = t->ag_node;
            n->next[i].nr   = t->ag_output_nr;
        } else if (t->flags & TIDE_TENSOR_REQUIRES_GRAD) {
            tide_tensor_retain(t);
            n->next[i].leaf = t;
        }
    }
    return n;
}

static tide_status save(tide_node * n, int32_t slot, const tide_tensor * t, int32_t version_bias) {
    n->saved[slot] = alias(t);
    if (!n->saved[slot]) return TIDE_E_OOM;
    n->saved_version[slot] = atomic_load_explicit(&t->storage->version, memory_order_relaxed) + version_bias;
    return TIDE_OK;
}

/* Makes t an output of node n (retained), replacing its earlier history. */
static void attach(tide_tensor * t, tide_node * n, int32_t nr) {
    tide_node * old = t->ag_node;
    node_retain(n);
    if (TIDE_UNLIKELY(t->flags & TIDE_TENSOR_RETAINS_GRAD)) retain_move(t, old, n, nr);   /* follows t */
    t->ag_node      = n;
    t->ag_output_nr = nr;
    if (old) tide_node_release(old);
}

/* -- recording ---------------------------------------------------------------------- */

tide_status tide_autograd_check_inplace(const tide_opcall * c, const tide_tensor * out) {
    const char * op = tide_op_name(c->op);
    bool         any = false;
    for (int32_t i = 0; i < c->n_in; i++) any = any || tide_needs_grad(c->in[i]);
    if ((out->flags & TIDE_TENSOR_REQUIRES_GRAD) && !out->ag_node)
        return tide_error_set(TIDE_E_VALUE, "%s: a leaf tensor that requires grad cannot be written in place "
                              "(do it inside tide.no_grad, or on t:detach())", op);
    if ((out->flags & TIDE_TENSOR_VIEW) && (any || out->ag_node))
        return tide_error_set(TIDE_E_VALUE, "%s: an in-place write into a view is not supported by autograd when "
                              "the values or the view require grad; build the result out of place "
                              "(cat, stack, where, index_add)", op);
    return TIDE_OK;
}

tide_status tide_autograd_record(const tide_opcall * c, tide_tensor * out) {
    bool any = false;
    for (int32_t i = 0; i < c->n_in; i++) any = any || tide_needs_grad(c->in[i]);
    if (!any) {   /* an in-place write of values that need no grad ends out's history */
        if (out && out->ag_node) {
            tide_node * old = out->ag_node;
            if (TIDE_UNLIKELY(out->flags & TIDE_TENSOR_RETAINS_GRAD)) retain_move(out, old, NULL, 0);
            out->ag_node    = NULL;
            tide_node_release(old);
        }
        return TIDE_OK;
    }
    bool float_out = false;
    for (int32_t i = 0; i < c->n_out; i++) float_out = float_out || is_float(c->out[i]->dtype_id);
    if (!float_out) return TIDE_OK;   /* comparisons, argmax, ...: nothing to differentiate */

    const tide_grad_rule * rule = tide_op_grad_rule(c->op);
    tide_node * n = node_new(c->op, rule, c->in, c->n_in, c->n_out);
    if (!n) return TIDE_E_OOM;
    n->p = c->p;
    for (int32_t i = 0; i < c->n_out; i++) meta_of(&n->out[i], c->out[i]);
    uint32_t want = rule ? rule->save : 0, needed = 0;
    for (int32_t i = 0; i < c->n_in; i++)
        if (tide_needs_grad(c->in[i])) needed |= 1u << i;
    for (int32_t i = 0; i < c->n_in && want; i++) {
        if (!(want & (1u << i)) || (rule->only_for[i] && !(rule->only_for[i] & needed))) continue;
        if (save(n, i, c->in[i], 0) != TIDE_OK) goto oom;
    }
    /* an in-place op bumps out's version after this; what it wrote is saved at the new one */
    for (int32_t i = 0; i < c->n_out && want; i++)
        if ((want & (1u << (TIDE_OP_MAX_IN + i))) && save(n, TIDE_OP_MAX_IN + i, c->out[i], out ? 1 : 0) != TIDE_OK)
            goto oom;
    for (int32_t i = 0; i < c->n_out; i++)
        if (is_float(c->out[i]->dtype_id)) attach(c->out[i], n, i);
    tide_node_release(n);
    return TIDE_OK;
oom:
    tide_node_release(n);
    return tide_error_set(TIDE_E_OOM, "%s: out of memory saving tensors for backward", tide_op_name(c->op));
}

tide_tensor * tide_autograd_view(tide_tensor * t, tide_tensor * v, int32_t kind, const int64_t * ints, int32_t n) {
    if (tide_grad_off) return v;
    tide_node * node = node_new(kind, NULL, &t, 1, 1);
    if (!node) {
        tide_tensor_release(v);
        return NULL;
    }
    node->p.dtype  = -1;
    node->p.n_ints = n;
    for (int32_t i = 0; i < n; i++) node->p.ints[i] = ints[i];
    if (kind == TIDE_VIEW_STRIDED) {   /* the geometry of both, in storage elements */
        for (int32_t i = 0; i < v->ndim; i++) node->p.ints[i] = v->strides[i];
        for (int32_t i = 0; i < t->ndim; i++) node->p.ints[v->ndim + i] = t->strides[i];
        node->p.n_ints     = v->ndim + t->ndim;
        node->p.scalars[0] = (double)v->offset;
        node->p.scalars[1] = (double)t->offset;
    }
    meta_of(&node->out[0], v);
    attach(v, node, 0);
    tide_node_release(node);
    return v;
}

/* -- custom functions: a node whose gradients the caller computes ------------------------ */

tide_status tide_autograd_custom(const char * name, int32_t n_in, tide_tensor * const * inputs, int32_t n_out,
                                 tide_tensor * const * outputs, tide_tensor ** results, int64_t * id) {
    const char * api = name && name[0] ? name : "custom function";
    *id = 0;
    for (int32_t i = 0; i < n_out; i++) results[i] = NULL;
    if (n_in < 0 || n_in > TIDE_OP_MAX_IN)
        return tide_error_set(TIDE_E_VALUE, "%s: autograd functions take at most %d tensor inputs, got %d", api,
                              TIDE_OP_MAX_IN, n_in);
    if (n_out < 1 || n_out > TIDE_OP_MAX_OUT)
        return tide_error_set(TIDE_E_VALUE, "%s: autograd functions return 1 to %d differentiable tensors, got %d",
                              api, TIDE_OP_MAX_OUT, n_out);
    for (int32_t i = 0; i < n_in; i++)
        if (!inputs[i]) return tide_error_set(TIDE_E_VALUE, "%s: input %d is NULL", api, i + 1);
    for (int32_t i = 0; i < n_out; i++)
        if (outputs[i] && !is_float(outputs[i]->dtype_id))
            return tide_error_set(TIDE_E_DTYPE, "%s: output %d has dtype %s, and only floating-point outputs can "
                                  "be differentiable (pass NULL for it)", api, i + 1,
                                  tide_dtype_name(outputs[i]->dtype_id));
    tide_node * n = node_new(TIDE_NODE_CUSTOM, NULL, inputs, n_in, n_out);
    if (!n) return TIDE_E_OOM;
    n->name = strdup(api);
    pthread_mutex_lock(&hook_lock);
    n->p.ints[0] = *id = ++hook_counter;   /* one sequence with hooks: the caller keeps both by id */
    pthread_mutex_unlock(&hook_lock);
    n->p.n_ints = 1;
    n->p.dtype  = -1;
    tide_status st = n->name ? TIDE_OK : TIDE_E_OOM;
    for (int32_t i = 0; i < n_out && st == TIDE_OK; i++) {
        if (!outputs[i]) continue;
        meta_of(&n->out[i], outputs[i]);
        results[i] = alias(outputs[i]);
        if (!results[i]) st = TIDE_E_OOM;
        else attach(results[i], n, i);
    }
    if (st != TIDE_OK) {
        for (int32_t i = 0; i < n_out; i++) tide_tensor_release(results[i]), results[i] = NULL;
        *id = 0;
        tide_error_set(TIDE_E_OOM, "%s: out of memory recording its node", api);
    }
    tide_node_release(n);   /* the outputs hold it; with none, its id is dead at once */
    return st;
}

/* -- the public tensor API --------------------------------------------------------------- */

int32_t tide_tensor_requires_grad(const tide_tensor * t) { return tide_needs_grad(t); }
int32_t tide_tensor_version(const tide_tensor * t) {
    return atomic_load_explicit(&t->storage->version, memory_order_relaxed);
}

tide_status tide_tensor_set_requires_grad(tide_tensor * t, int32_t on) {
    if (t->ag_node) {
        if (on) return TIDE_OK;
        return tide_error_set(TIDE_E_VALUE, "requires_grad_: the tensor is the result of '%s', not a leaf; "
                              "use detach() to get a tensor that does not require grad", node_name(t->ag_node));
    }
    if (on && !is_float(t->dtype_id))
        return tide_error_set(TIDE_E_DTYPE, "requires_grad_: only floating-point tensors can require grad, got %s",
                              tide_dtype_name(t->dtype_id));
    if (on && (t->flags & TIDE_TENSOR_WRAPPED_NUMBER))
        return tide_error_set(TIDE_E_VALUE, "requires_grad_: a wrapped host number cannot require grad");
    if (on) t->flags |= TIDE_TENSOR_REQUIRES_GRAD;
    else t->flags &= ~(uint32_t)TIDE_TENSOR_REQUIRES_GRAD;
    return TIDE_OK;
}

tide_tensor * tide_tensor_grad(tide_tensor * t) {
    if (t->ag_grad) tide_tensor_retain(t->ag_grad);
    return t->ag_grad;
}

tide_status tide_tensor_set_grad(tide_tensor * t, tide_tensor * g) {
    if (g) {
        char a[128], b[128];
        if (g->ndim != t->ndim || memcmp(g->sizes, t->sizes, (size_t)t->ndim * sizeof(int64_t)) != 0)
            return tide_error_set(TIDE_E_SHAPE, "grad: a gradient of shape %s cannot be set on a tensor of shape %s",
                                  tide_shape_str(g, a, sizeof a), tide_shape_str(t, b, sizeof b));
        if (g->dtype_id != t->dtype_id)
            return tide_error_set(TIDE_E_DTYPE, "grad: a gradient of dtype %s cannot be set on a tensor of dtype %s",
                                  tide_dtype_name(g->dtype_id), tide_dtype_name(t->dtype_id));
        if (g->dev.type != t->dev.type || g->dev.index != t->dev.index)
            return tide_error_set(TIDE_E_DEVICE, "grad: the gradient is on %s but the tensor on %s",
                                  tide_device_format(g->dev, a, sizeof a), tide_device_format(t->dev, b, sizeof b));
        tide_tensor_retain(g);
    }
    tide_tensor * old = t->ag_grad;
    t->ag_grad        = g;
    tide_tensor_release(old);
    if (TIDE_UNLIKELY(tide_capture != NULL)) tide_graph_on_set_grad(t, g);
    return TIDE_OK;
}

tide_tensor * tide_tensor_detach(tide_tensor * t) {
    tide_tensor * a = alias(t);
    if (a) a->flags &= ~(uint32_t)TIDE_TENSOR_VIEW;   /* a new name for the same values, not a view of a graph */
    return a;
}

const char * tide_tensor_grad_fn_name(const tide_tensor * t) { return t->ag_node ? node_name(t->ag_node) : NULL; }

int32_t tide_op_is_differentiable(int32_t op) { return tide_op_grad_rule(op) != NULL; }

/* -- the rule vocabulary ------------------------------------------------------------------ */

tide_tensor * g_keep(tide_grad_ctx * c, tide_tensor * t) {
    if (!t) {
        if (c->st == TIDE_OK) c->st = TIDE_E_INTERNAL;
        return NULL;
    }
    if (c->n_temps == (int32_t)(sizeof c->temps / sizeof c->temps[0])) {
        tide_tensor_release(t);
        if (c->st == TIDE_OK) c->st = tide_error_set(TIDE_E_INTERNAL, "backward: a rule made too many temporaries");
        return NULL;
    }
    c->temps[c->n_temps++] = t;
    return t;
}

/* Saved tensor t of slot as the graph sees it, for a rule that is itself recorded
 * (create_graph): an input as the node's edge has it (the leaf itself, or an alias
 * made by the node before), an output as made by the node. Kept by the ctx. */
static tide_tensor * linked(tide_grad_ctx * c, int32_t slot, tide_tensor * t) {
    tide_node * from = (tide_node *)c->node;
    int32_t     nr   = slot - TIDE_OP_MAX_IN;
    if (slot < TIDE_OP_MAX_IN) {
        const tide_edge * e = &c->node->next[slot];
        if (e->leaf) return e->leaf;
        from = e->node, nr = e->nr;
    }
    if (!from || !is_float(t->dtype_id)) return t;
    tide_tensor * a = g_keep(c, alias(t));
    if (a) {
        node_retain(from);
        a->ag_node      = from;
        a->ag_output_nr = nr;
    }
    return a;
}

tide_tensor * g_saved(tide_grad_ctx * c, int32_t slot) {
    tide_tensor * t = c->node->saved[slot];
    if (!t && c->st == TIDE_OK)
        c->st = tide_error_set(TIDE_E_INTERNAL, "backward: the rule of '%s' reads %s %d, which it did not save",
                               node_name(c->node), slot < TIDE_OP_MAX_IN ? "input" : "output",
                               (slot < TIDE_OP_MAX_IN ? slot : slot - TIDE_OP_MAX_IN) + 1);
    if (!t || !c->create) return t;
    return c->linked[slot] ? c->linked[slot] : (c->linked[slot] = linked(c, slot, t));
}

/* A NULL argument means an earlier step failed: pass the failure on. */
#define NEED(x) do { if (!(x) || c->st != TIDE_OK) return NULL; } while (0)

tide_tensor * g_call(tide_grad_ctx * c, int32_t op, int32_t n, tide_tensor * a, tide_tensor * b, tide_tensor * d,
                     const tide_op_params * p) {
    tide_tensor * in[3] = {a, b, d}, * out[TIDE_OP_MAX_OUT] = {0};
    for (int32_t i = 0; i < n; i++) NEED(in[i]);
    if (c->st != TIDE_OK) return NULL;
    tide_status st = tide_op_call(op, in, n, p, out, NULL);
    if (st != TIDE_OK) {
        c->st = st;
        return NULL;
    }
    for (int32_t i = 1; i < TIDE_OP_MAX_OUT; i++) tide_tensor_release(out[i]);
    return g_keep(c, out[0]);
}

tide_tensor * g_num(tide_grad_ctx * c, double v) {
    NEED(c);
    bool integral = fabs(v) < 9.2e18 && v == (double)(int64_t)v;   /* the cast is defined only in range (not inf, NaN) */
    return g_keep(c, tide_tensor_scalar(v, integral ? TIDE_DTYPE_I64 : TIDE_DTYPE_F64));
}

/* Zeros of meta m in *out (+1). */
static tide_status zeros_of(const tide_meta * m, tide_tensor ** out) {
    *out = tide_tensor_empty(m->ndim, m->sizes, m->dtype, m->dev);
    if (!*out) return TIDE_E_OOM;
    tide_op_params p = g_params(m->ndim, m->sizes, 0, 0);
    p.dtype = m->dtype;
    tide_tensor * res[TIDE_OP_MAX_OUT] = {0};
    tide_status   st = tide_op_call(TIDE_OP_full, NULL, 0, &p, res, *out);
    tide_tensor_release(res[0]);
    if (st != TIDE_OK) tide_tensor_release(*out), *out = NULL;
    return st;
}

tide_tensor * g_zeros(tide_grad_ctx * c, const tide_meta * m) {
    NEED(m);
    tide_tensor * t  = NULL;
    tide_status   st = zeros_of(m, &t);
    if (st != TIDE_OK) {
        c->st = st;
        return NULL;
    }
    return g_keep(c, t);
}

tide_tensor * g_reshape(tide_grad_ctx * c, tide_tensor * t, int32_t ndim, const int64_t * sizes) {
    NEED(t);
    return g_keep(c, tide_tensor_reshape(t, ndim, sizes));
}

tide_tensor * g_unreduce(tide_grad_ctx * c, tide_tensor * g, const tide_meta * in, const tide_op_params * p) {
    NEED(g);
    int64_t kept[TIDE_MAX_DIMS];
    memcpy(kept, in->sizes, sizeof kept);
    for (int32_t i = 0; i < p->n_ints; i++) kept[p->ints[i]] = 1;
    if (in->ndim > 0) g = g_reshape(c, g, in->ndim, kept);
    NEED(g);
    return g_keep(c, tide_tensor_expand(g, in->ndim, in->sizes));
}

tide_tensor * g_sum_dim(tide_grad_ctx * c, tide_tensor * t, int32_t dim, int32_t keepdim) {
    int64_t        d = dim;
    tide_op_params p = g_params(1, &d, keepdim, 0);
    return g_call(c, TIDE_OP_sum, 1, t, NULL, NULL, &p);
}

tide_tensor * g_transpose(tide_grad_ctx * c, tide_tensor * t, int32_t d0, int32_t d1) {
    NEED(t);
    return g_keep(c, tide_tensor_transpose(t, d0, d1));
}
tide_tensor * g_unsqueeze(tide_grad_ctx * c, tide_tensor * t, int32_t dim) {
    NEED(t);
    return g_keep(c, tide_tensor_unsqueeze(t, dim));
}
tide_tensor * g_squeeze(tide_grad_ctx * c, tide_tensor * t, int32_t dim) {
    NEED(t);
    return g_keep(c, tide_tensor_squeeze(t, dim));
}
tide_tensor * g_narrow(tide_grad_ctx * c, tide_tensor * t, int32_t dim, int64_t start, int64_t len) {
    NEED(t);
    return g_keep(c, tide_tensor_narrow(t, dim, start, len));
}
tide_tensor * g_select(tide_grad_ctx * c, tide_tensor * t, int32_t dim, int64_t index) {
    NEED(t);
    return g_keep(c, tide_tensor_select(t, dim, index));
}

void g_copy_into(tide_grad_ctx * c, tide_tensor * dst, tide_tensor * src) {
    if (!dst || !src || c->st != TIDE_OK) return;
    tide_tensor * res[TIDE_OP_MAX_OUT] = {0};
    tide_status   st = tide_op_call(TIDE_OP_copy, &src, 1, NULL, res, dst);
    if (st != TIDE_OK) c->st = st;
    else tide_tensor_release(res[0]);
}

void g_set(tide_grad_ctx * c, int32_t i, tide_tensor * t) {
    if (!t || c->st != TIDE_OK) return;
    tide_tensor_retain(t);
    tide_tensor_release(c->gx[i]);
    c->gx[i] = t;
}

/* -- view rules ---------------------------------------------------------------------------- */

/* The gradient of a slice (dim, start, stop, step; step 0: select) of an input of
 * meta in, from its gradient gy, made by recorded ops only (for create_graph). */
static tide_tensor * slice_backward_recorded(tide_grad_ctx * c, const int64_t * a, const tide_meta * in,
                                             tide_tensor * gy) {
    NEED(gy);
    int64_t step = a[3] ? a[3] : 1, stop = a[3] ? a[2] : a[1] + 1;
    int64_t len  = stop > a[1] ? (stop - a[1] + step - 1) / step : 0;
    if (!a[3]) gy = g_unsqueeze(c, gy, (int32_t)a[0]);
    tide_tensor * idx = g_keep(c, tide_tensor_empty(1, &len, TIDE_DTYPE_I64, in->dev));
    NEED(idx);
    tide_op_params p = g_params(0, NULL, 0, 0);
    tide_tensor *  res[TIDE_OP_MAX_OUT] = {0};
    p.dtype      = TIDE_DTYPE_I64;
    p.scalars[0] = (double)a[1], p.scalars[1] = (double)stop, p.scalars[2] = (double)step;
    tide_status st = tide_op_call(TIDE_OP_arange, NULL, 0, &p, res, idx);
    tide_tensor_release(res[0]);
    if (st != TIDE_OK) {
        c->st = st;
        return NULL;
    }
    tide_op_params q = g_params(1, a, 0, 0);
    return g_call(c, TIDE_OP_index_add, 3, g_zeros(c, in), idx, gy, &q);
}

/* int64 [0, n) * step on dev (+1, kept by the ctx). */
static tide_tensor * g_arange(tide_grad_ctx * c, int64_t n, int64_t step, tide_device dev) {
    tide_tensor * r = g_keep(c, tide_tensor_empty(1, &n, TIDE_DTYPE_I64, dev));
    NEED(r);
    tide_op_params p = g_params(0, NULL, 0, 0);
    tide_tensor *  res[TIDE_OP_MAX_OUT] = {0};
    p.dtype      = TIDE_DTYPE_I64;
    p.scalars[0] = 0, p.scalars[1] = (double)(n * step), p.scalars[2] = (double)step;
    if (step == 0) p.scalars[1] = (double)n, p.scalars[2] = 1;   /* a stride of 0: all at the start, below */
    tide_status st = tide_op_call(TIDE_OP_arange, NULL, 0, &p, res, r);
    tide_tensor_release(res[0]);
    if (st != TIDE_OK) {
        c->st = st;
        return NULL;
    }
    return step == 0 && n > 0 ? g_call(c, TIDE_OP_mul, 2, r, g_num(c, 0), NULL, NULL) : r;
}

/* The storage positions (minus base) of the elements of a view of sizes and
 * strides at offset, as a 1-d int64 tensor in the view's element order. */
static tide_tensor * positions(tide_grad_ctx * c, int32_t nd, const int64_t * sizes, const int64_t * strides,
                               int64_t offset, tide_device dev) {
    tide_tensor * pos = g_keep(c, tide_tensor_scalar_on((double)offset, TIDE_DTYPE_I64, dev));
    for (int32_t d = 0; d < nd; d++) {
        int64_t shape[TIDE_MAX_DIMS];
        for (int32_t k = 0; k < nd; k++) shape[k] = k == d ? sizes[d] : 1;
        tide_tensor * a = g_arange(c, sizes[d], strides[d], dev);
        NEED(a);
        pos = g_call(c, TIDE_OP_add, 2, pos, g_reshape(c, a, nd, shape), NULL, NULL);
    }
    int64_t n = 1;
    for (int32_t d = 0; d < nd; d++) n *= sizes[d];
    return g_reshape(c, pos, 1, &n);
}

/* The gradient of an as_strided view: element i of the view is storage position
 * P(i), so the input element at position q gets the sum of the view's gradients
 * at the i with P(i) = q (overlapping views sum, as PyTorch's). Added into a
 * buffer over the positions both reach, then read at the input's. */
static tide_tensor * strided_backward(tide_grad_ctx * c, const tide_node * n, tide_tensor * gy) {
    const tide_meta * in = &n->in[0], * out = &n->out[0];
    const int64_t *   ys = n->p.ints, * xs = n->p.ints + out->ndim;
    int64_t           y0 = (int64_t)n->p.scalars[0], x0 = (int64_t)n->p.scalars[1];
    int64_t           lo = y0 < x0 ? y0 : x0, hi = lo, ny = 1, nx = 1;
    for (int32_t d = 0; d < out->ndim; d++) ny *= out->sizes[d];
    for (int32_t d = 0; d < in->ndim; d++) nx *= in->sizes[d];
    if (ny == 0 || nx == 0) return g_zeros(c, in);
    int64_t ey = y0, ex = x0;   /* the last positions each reaches (strides are not negative) */
    for (int32_t d = 0; d < out->ndim; d++) ey += (out->sizes[d] - 1) * ys[d];
    for (int32_t d = 0; d < in->ndim; d++) ex += (in->sizes[d] - 1) * xs[d];
    hi = ey > ex ? ey : ex;
    tide_meta span = *in;
    span.ndim     = 1;
    span.sizes[0] = hi - lo + 1;
    tide_tensor *  py = positions(c, out->ndim, out->sizes, ys, y0 - lo, in->dev);
    tide_tensor *  px = positions(c, in->ndim, in->sizes, xs, x0 - lo, in->dev);
    int64_t        zero = 0;
    tide_op_params p0   = g_params(1, &zero, 0, 0);
    tide_tensor *  buf  = g_call(c, TIDE_OP_index_add, 3, g_zeros(c, &span), py, g_reshape(c, gy, 1, &ny), &p0);
    tide_tensor *  gx   = g_call(c, TIDE_OP_index_select, 2, buf, px, NULL, &p0);
    return gx ? g_reshape(c, gx, in->ndim, in->sizes) : NULL;
}

static tide_status view_backward(tide_grad_ctx * c) {
    const tide_node * n  = c->node;
    const tide_meta * in = &n->in[0];
    tide_tensor *     gy = GY(0);
    switch (n->op) {
    case TIDE_VIEW_RESHAPE:
    case TIDE_VIEW_ALIAS:
        g_set(c, 0, g_reshape(c, gy, in->ndim, in->sizes));
        break;
    case TIDE_VIEW_PERMUTE: {
        int64_t inv[TIDE_MAX_DIMS];
        for (int32_t i = 0; i < n->p.n_ints; i++) inv[n->p.ints[i]] = i;
        g_set(c, 0, g_keep(c, tide_tensor_permute(gy, n->p.n_ints, inv)));
        break;
    }
    case TIDE_VIEW_EXPAND:   /* summed back to the input's shape by the walk */
        g_set(c, 0, gy);
        break;
    case TIDE_VIEW_SLICE: {
        const int64_t * a = n->p.ints;   /* dim, start, stop, step (0: select) */
        if (c->create) {   /* an in-place write would not be recorded: index_add into zeros is */
            g_set(c, 0, slice_backward_recorded(c, a, in, gy));
            break;
        }
        tide_tensor *   z = g_zeros(c, in);
        tide_tensor *   v = !z ? NULL
                          : a[3] == 0 ? g_select(c, z, (int32_t)a[0], a[1])
                                      : g_keep(c, tide_tensor_slice(z, (int32_t)a[0], a[1], a[2], a[3]));
        g_copy_into(c, v, gy);
        g_set(c, 0, z);
        break;
    }
    case TIDE_VIEW_STRIDED:
        g_set(c, 0, strided_backward(c, n, gy));
        break;
    default:
        return tide_error_set(TIDE_E_VALUE, "backward: '%s' views are not differentiable", node_name(n));
    }
    return c->st;
}

/* -- the walk --------------------------------------------------------------------------------- */

static pthread_mutex_t walk_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t        walk_counter;
/* This thread's innermost walk (it holds walk_lock while one runs): a walk started
 * while it is stopped at a custom node nests inside it. */
static _Thread_local struct tide_autograd_walk * walk_top;

typedef struct {
    tide_node ** v;
    int64_t      n, cap;
} node_list;

static bool list_push(node_list * l, tide_node * n) {
    if (l->n == l->cap) {
        int64_t      cap = l->cap ? 2 * l->cap : 64;
        tide_node ** v   = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return false;
        l->v = v, l->cap = cap;
    }
    l->v[l->n++] = n;
    return true;
}

int64_t tide_autograd_held(tide_tensor * const * roots, int32_t n_roots, tide_tensor ** out, int64_t max) {
    node_list todo = {NULL, 0, 0};
    int64_t   n    = 0;
    bool held = walk_top != NULL;   /* called from a hook: its walk holds the lock */
    if (!held) pthread_mutex_lock(&walk_lock);
    uint64_t id = ++walk_counter;   /* marks the nodes seen, as a walk does */
    for (int32_t i = 0; i < n_roots; i++) {
        tide_node * r = roots[i] ? roots[i]->ag_node : NULL;
        if (r && r->walk_id != id && list_push(&todo, r)) r->walk_id = id;
    }
    while (todo.n > 0) {
        tide_node * nd = todo.v[--todo.n];
        for (int32_t k = 0; k < TIDE_SAVED_MAX && !nd->freed; k++)
            if (nd->saved[k] && n++ < max) out[n - 1] = nd->saved[k];
        for (int32_t k = 0; k < nd->n_in; k++) {
            if (nd->next[k].leaf && n++ < max) out[n - 1] = nd->next[k].leaf;
            tide_node * next = nd->next[k].node;
            if (next && next->walk_id != id && list_push(&todo, next)) next->walk_id = id;
        }
    }
    if (!held) pthread_mutex_unlock(&walk_lock);
    free(todo.v);
    return n;
}

/* What one walk asks for: capture the gradients of `inputs` (autograd.grad)
 * instead of accumulating into leaves (backward). */
typedef struct {
    int32_t              n_in;
    tide_tensor * const * inputs;
    tide_tensor **       results;
    bool *               results_own;   /* as tide_node's gown, for results */
    bool                 retain;
    bool                 create;        /* create_graph: the rules run with grad mode on */
    /* backward: the gradients of hooked leaves, summed until their hooks run at the end */
    struct leaf_grad { tide_tensor * leaf, * g; bool own; } * leaves;
    int64_t              n_leaves, cap_leaves;
    /* the inputs' gradients of the custom node being processed, as its caller gave them */
    tide_tensor *        custom_gx[TIDE_OP_MAX_IN];
    bool                 custom_given;
} walk_req;

/* Adds g (+1, taken) into *slot; *own says whether the walk made *slot, so
 * that nothing else sees it and slices may add into it in place (route_part). */
static tide_status accumulate(tide_tensor ** slot, bool * own, tide_tensor * g) {
    if (!*slot) {
        *slot = g;
        *own  = false;   /* a rule's result, or a gradient passed through from elsewhere */
        return TIDE_OK;
    }
    tide_tensor * in[2] = {*slot, g}, * res[TIDE_OP_MAX_OUT] = {0};
    tide_status   st = tide_op_call(TIDE_OP_add, in, 2, NULL, res, NULL);
    tide_tensor_release(g);
    if (st != TIDE_OK) return st;
    tide_tensor_release(*slot);
    *slot = res[0];
    *own  = true;
    return TIDE_OK;
}

/* Adds g (+1, taken) into a leaf's gradient: the first one is kept as it is
 * when nothing else can see it, later ones are added in place. */
static tide_status accumulate_leaf(tide_tensor * leaf, tide_tensor * g) {
    if (leaf->ag_grad && tide_grad_off == 0) {   /* create_graph: out of place, as the sum has a history */
        tide_tensor * in[2] = {leaf->ag_grad, g}, * res[TIDE_OP_MAX_OUT] = {0};
        tide_status   st = tide_op_call(TIDE_OP_add, in, 2, NULL, res, NULL);
        tide_tensor_release(g);
        if (st != TIDE_OK) return st;
        tide_tensor_release(leaf->ag_grad);
        leaf->ag_grad = res[0];
        return TIDE_OK;
    }
    if (!leaf->ag_grad) {
        bool own = __atomic_load_n(&g->refcount, __ATOMIC_ACQUIRE) == 1 && atomic_load(&g->storage->refcount) == 1 && !(g->flags & TIDE_TENSOR_VIEW) &&
                   tide_tensor_is_contiguous(g);
        if (!own) {
            tide_tensor * copy = tide_tensor_to(g, leaf->dtype_id, leaf->dev, 1);
            tide_tensor_release(g);
            if (!copy) return TIDE_E_OOM;
            g = copy;
        }
        leaf->ag_grad = g;
        if (TIDE_UNLIKELY(tide_capture != NULL)) tide_graph_on_set_grad(leaf, g);
        return TIDE_OK;
    }
    tide_tensor * in[2] = {leaf->ag_grad, g}, * res[TIDE_OP_MAX_OUT] = {0};
    tide_status   st = tide_op_call(TIDE_OP_add, in, 2, NULL, res, leaf->ag_grad);
    tide_tensor_release(g);
    tide_tensor_release(res[0]);
    return st;
}

/* g (+1, taken) made to fit input meta m: broadcast dims summed, dtype and device converted. */
static tide_tensor * fit(tide_tensor * g, const tide_meta * m, const char * op) {
    if (!same_shape(g, m)) {
        int64_t dims[TIDE_MAX_DIMS];
        int32_t nd = 0, lead = g->ndim - m->ndim;
        if (lead < 0) {
            char a[128], b[128];
            tide_error_set(TIDE_E_INTERNAL, "backward of '%s': a gradient of shape %s for an input of shape %s", op,
                           tide_shape_str(g, a, sizeof a), tide_dims_str(m->ndim, m->sizes, b, sizeof b));
            tide_tensor_release(g);
            return NULL;
        }
        for (int32_t d = 0; d < g->ndim; d++)
            if (d < lead || (m->sizes[d - lead] == 1 && g->sizes[d] != 1)) dims[nd++] = d;
        tide_op_params p = g_params(nd, dims, 1, 0);
        tide_tensor * s[TIDE_OP_MAX_OUT] = {0};
        tide_status st = nd ? tide_op_call(TIDE_OP_sum, &g, 1, &p, s, NULL) : TIDE_OK;
        if (!nd) {
            s[0] = g;
            tide_tensor_retain(g);
        }
        tide_tensor_release(g);
        if (st != TIDE_OK) return NULL;
        g = tide_tensor_reshape(s[0], m->ndim, m->sizes);
        tide_tensor_release(s[0]);
        if (!g) return NULL;
    }
    if (g->dtype_id != m->dtype || g->dev.type != m->dev.type || g->dev.index != m->dev.index) {
        tide_tensor * h = tide_tensor_to(g, m->dtype, m->dev, 0);
        tide_tensor_release(g);
        g = h;
    }
    return g;
}

static tide_status run_rule(const walk_req * r, tide_node * n, tide_grad_ctx * c) {
    memset(c, 0, sizeof *c);
    c->node   = n;
    c->create = r->create;
    for (int32_t i = 0; i < n->n_out; i++) c->gy[i] = n->gbuf[i];
    for (int32_t i = 0; i < n->n_in; i++) c->needs[i] = n->next[i].node || n->next[i].leaf;
    if (n->op < 0) return view_backward(c);
    if (!n->rule && strstr(node_name(n), "_backward"))   /* recorded by a create_graph backward */
        return tide_error_set(TIDE_E_VALUE, "backward: '%s' has no derivative, so the gradient it computed "
                              "(with create_graph) cannot be differentiated again", node_name(n));
    if (!n->rule)
        return tide_error_set(TIDE_E_VALUE, "backward: '%s' has no derivative; compute it out of the graph "
                              "(inside tide.no_grad or on detached tensors)", node_name(n));
    if (n->rule->save && n->freed)
        return tide_error_set(TIDE_E_VALUE, "backward: the saved tensors of '%s' were already freed by an earlier "
                              "backward; pass retain_graph = true to the first one to go through the graph twice",
                              node_name(n));
    for (int32_t i = 0; i < TIDE_SAVED_MAX; i++) {
        const tide_tensor * s = n->saved[i];
        if (!s) continue;
        int32_t now = atomic_load_explicit(&s->storage->version, memory_order_relaxed);
        if (now != n->saved_version[i])
            return tide_error_set(TIDE_E_VALUE, "backward: %s %d of '%s' (shape %s) is needed for its gradient but "
                                  "was modified in place after it was used (version %d, expected %d); clone it "
                                  "before the in-place op", i < TIDE_OP_MAX_IN ? "input" : "output",
                                  (i < TIDE_OP_MAX_IN ? i : i - TIDE_OP_MAX_IN) + 1, node_name(n),
                                  tide_shape_str(s, (char[128]){0}, 128), now, n->saved_version[i]);
    }
    tide_status st = n->rule->fn(c);
    return st != TIDE_OK ? st : c->st;
}

/* A custom node's "rule": the gradients its caller gave (tide_autograd_walk_custom_result). */
static tide_status take_custom(walk_req * r, tide_node * n, tide_grad_ctx * c) {
    memset(c, 0, sizeof *c);
    c->node = n;
    if (!r->custom_given)
        return tide_error_set(TIDE_E_INTERNAL, "backward: '%s' was processed before its gradients were given",
                              node_name(n));
    for (int32_t i = 0; i < n->n_in; i++) {
        c->needs[i]     = n->next[i].node || n->next[i].leaf;
        c->gx[i]        = r->custom_gx[i];
        r->custom_gx[i] = NULL;
    }
    r->custom_given = false;
    return TIDE_OK;
}

static void end_rule(tide_grad_ctx * c) {
    for (int32_t i = 0; i < c->n_temps; i++) tide_tensor_release(c->temps[i]);
    for (int32_t i = 0; i < TIDE_OP_MAX_IN; i++) tide_tensor_release(c->gx[i]);
    c->n_temps = 0;
}

static int32_t captured(const walk_req * r, const tide_tensor * t) {
    for (int32_t k = 0; k < r->n_in; k++)
        if (r->inputs[k] == t) return k;
    return -1;
}

/* Sends g (+1, taken) along edge e. */
static tide_status route(walk_req * r, const tide_edge * e, tide_tensor * g) {
    if (e->node) return accumulate(&e->node->gbuf[e->nr], &e->node->gown[e->nr], g);
    if (!r->results && (e->leaf->flags & TIDE_TENSOR_HOOKED)) {   /* summed, for its hooks at the end */
        for (int64_t k = 0; k < r->n_leaves; k++)
            if (r->leaves[k].leaf == e->leaf) return accumulate(&r->leaves[k].g, &r->leaves[k].own, g);
        if (r->n_leaves == r->cap_leaves) {
            int64_t            cap = r->cap_leaves ? 2 * r->cap_leaves : 8;
            struct leaf_grad * v   = realloc(r->leaves, (size_t)cap * sizeof *v);
            if (!v) {
                tide_tensor_release(g);
                return TIDE_E_OOM;
            }
            r->leaves = v, r->cap_leaves = cap;
        }
        r->leaves[r->n_leaves++] = (struct leaf_grad){e->leaf, g, false};
        return TIDE_OK;
    }
    if (r->results) {   /* autograd.grad: only the asked-for leaves get anything */
        int32_t k = captured(r, e->leaf);
        if (k < 0) {
            tide_tensor_release(g);
            return TIDE_OK;
        }
        return accumulate(&r->results[k], &r->results_own[k], g);
    }
    return accumulate_leaf(e->leaf, g);
}

/* -- slices: each gradient added into its part of one buffer -------------------------------

   The gradient of a slice is zero outside it. Made as a zero tensor of the whole
   input and summed with the others, the gradients of L slices of one tensor (an
   RNN's time steps, unbind, split) would cost O(L * size); instead the first
   makes a buffer of the input's size and each adds into its own part of it, in
   place, for O(size) in all. Sums run in the order the walk delivers them, as
   accumulate's would, so the values are those of the zero-padded sums (up to the
   sign of a zero: 0 + -0 is 0). */

/* The part of t that slice node n views (+1). */
static tide_tensor * part_of(const tide_node * n, tide_tensor * t) {
    const int64_t * a = n->p.ints;   /* dim, start, stop, step (0: select) */
    return a[3] == 0 ? tide_tensor_select(t, (int32_t)a[0], a[1])
                     : tide_tensor_slice(t, (int32_t)a[0], a[1], a[2], a[3]);
}

/* Writes g (borrowed) into n's part of buf: copied when buf is fresh zeros, else added in place. */
static tide_status add_part(const tide_node * n, tide_tensor * buf, tide_tensor * g, bool fresh) {
    tide_tensor * v = part_of(n, buf);
    if (!v) return TIDE_E_OOM;
    tide_tensor * in[2] = {v, g}, * res[TIDE_OP_MAX_OUT] = {0};
    tide_status   st = fresh ? tide_op_call(TIDE_OP_copy, &g, 1, NULL, res, v)
                             : tide_op_call(TIDE_OP_add, in, 2, NULL, res, v);
    tide_tensor_release(res[0]);
    tide_tensor_release(v);
    return st;
}

/* Routes the gradient of slice node n into its part of the gradient of n's input.
 * *done false: the slot holds a gradient of another dtype (a root's, given so),
 * and the general rule (a zero-padded gradient, summed) keeps its promotion. */
static tide_status route_part(walk_req * r, tide_node * n, bool * done) {
    const tide_edge * e = &n->next[0];
    const tide_meta * m = &n->in[0];
    tide_tensor **    slot;
    bool              leaf_own = true, * own = &leaf_own;   /* a leaf's grad is added into in place anyway */
    *done = true;
    if (e->node) {
        slot = &e->node->gbuf[e->nr], own = &e->node->gown[e->nr];
    } else if (!e->leaf) {
        return TIDE_OK;
    } else if (e->leaf->flags & TIDE_TENSOR_HOOKED) {   /* route() keeps it for its hooks */
        *done = false;
        return TIDE_OK;
    } else if (r->results) {
        int32_t k = captured(r, e->leaf);
        if (k < 0) return TIDE_OK;
        slot = &r->results[k], own = &r->results_own[k];
    } else {
        slot = &e->leaf->ag_grad;
    }
    if (*slot && (*slot)->dtype_id != m->dtype) {
        *done = false;
        return TIDE_OK;
    }
    tide_tensor * g = tide_tensor_to(n->gbuf[0], m->dtype, m->dev, 0);   /* as a copy into zeros converts */
    if (!g) return TIDE_E_OOM;
    tide_status st = TIDE_OK;
    if (!*slot) {
        tide_tensor * buf = NULL;
        if ((st = zeros_of(m, &buf)) == TIDE_OK && (st = add_part(n, buf, g, true)) == TIDE_OK) {
            *slot = buf, *own = true;
            if (!e->node && !r->results && TIDE_UNLIKELY(tide_capture != NULL)) tide_graph_on_set_grad(e->leaf, buf);
        } else {
            tide_tensor_release(buf);
        }
    } else {
        if (!*own) {   /* someone else's tensor: added into a copy of it, once */
            tide_tensor * copy = tide_tensor_to(*slot, m->dtype, m->dev, 1);
            if (!copy) st = TIDE_E_OOM;
            else tide_tensor_release(*slot), *slot = copy, *own = true;
        }
        if (st == TIDE_OK) st = add_part(n, *slot, g, false);
    }
    tide_tensor_release(g);
    return st;
}

/* Adds the gradients of n's outputs into the tensors that retain theirs. */
static tide_status run_retains(tide_node * n) {
    tide_tensor * keep[16];
    int32_t       nr[16], k = 0;
    pthread_mutex_lock(&hook_lock);
    for (tide_hook * h = n->hooks; h && k < 16; h = h->next) {
        if (h->id || !n->gbuf[h->nr]) continue;
        /* retained only if alive: one whose last release is running waits for the lock to forget */
        int32_t rc = __atomic_load_n(&h->tensor->refcount, __ATOMIC_ACQUIRE);
        while (rc > 0 && !__atomic_compare_exchange_n(&h->tensor->refcount, &rc, rc + 1, false, __ATOMIC_ACQ_REL,
                                                      __ATOMIC_ACQUIRE)) {}
        if (rc > 0) keep[k] = h->tensor, nr[k++] = h->nr;
    }
    pthread_mutex_unlock(&hook_lock);
    tide_status st = TIDE_OK;
    if (k && TIDE_UNLIKELY(tide_capture != NULL))
        st = tide_error_set(TIDE_E_VALUE, "backward: retain_grad is not supported inside tide.jit.compile (a "
                            "captured function); return the tensor's gradient with autograd.grad instead");
    for (int32_t i = 0; i < k; i++) {
        if (st == TIDE_OK) {
            tide_tensor_retain(n->gbuf[nr[i]]);
            st = accumulate_leaf(keep[i], n->gbuf[nr[i]]);
        }
        tide_tensor_release(keep[i]);
    }
    return st;
}

static bool has_gradient(const tide_node * n) {
    for (int32_t i = 0; i < n->n_out; i++)
        if (n->gbuf[i]) return true;
    return false;
}

static tide_status process(walk_req * r, tide_node * n) {
    bool any = has_gradient(n);
    if (n->hooks && any && !r->results) TIDE_CHECK(run_retains(n));   /* autograd.grad touches no .grad */
    if (r->results) {   /* capture gradients of non-leaf inputs made by this node */
        for (int32_t k = 0; k < r->n_in; k++) {
            const tide_tensor * t = r->inputs[k];
            if (t->ag_node == n && n->gbuf[t->ag_output_nr]) {
                tide_tensor_retain(n->gbuf[t->ag_output_nr]);
                TIDE_CHECK(accumulate(&r->results[k], &r->results_own[k], n->gbuf[t->ag_output_nr]));
            }
        }
    }
    if (!any) return TIDE_OK;
    bool        done = false;
    tide_status st   = n->op == TIDE_VIEW_SLICE && !r->create ? route_part(r, n, &done) : TIDE_OK;
    if (st == TIDE_OK && !done) {
        tide_grad_ctx c;
        st = n->op == TIDE_NODE_CUSTOM ? take_custom(r, n, &c) : run_rule(r, n, &c);
        for (int32_t i = 0; i < n->n_in && st == TIDE_OK; i++) {
            tide_tensor * g = c.gx[i];
            if (!g || !c.needs[i]) continue;
            c.gx[i] = NULL;
            g = fit(g, &n->in[i], node_name(n));
            st = g ? route(r, &n->next[i], g) : TIDE_E_SHAPE;   /* fit set the message */
        }
        end_rule(&c);
    }
    for (int32_t i = 0; i < TIDE_OP_MAX_OUT; i++) {
        tide_tensor_release(n->gbuf[i]);
        n->gbuf[i] = NULL;
    }
    if (st == TIDE_OK && !r->retain && n->rule && n->rule->save) {
        free_saved(n);
        n->freed = 1;
    }
    return st;
}

/* -- walks, step by step ---------------------------------------------------------------------

   A walk seeds the roots' gradients, finds the nodes they reach, then runs the
   nodes in an order where each comes after all that feed it. A node's hooks run
   just before its rule, on the sum of its output's gradients; a leaf's at the
   end, on the sum over its uses, before it is accumulated. Callers' hooks are
   run by the caller: tide_autograd_walk_next stops at each and returns its id,
   so the walk is a state machine rather than a loop. */

typedef struct {
    int64_t        id;
    tide_tensor ** slot;   /* the gradient the hook sees and may replace */
    bool *         own;
} pending_hook;

struct tide_autograd_walk {
    walk_req       r;
    struct tide_autograd_walk * outer;   /* the walk this one nests in (a custom node's caller started it) */
    tide_node *    custom;       /* the custom node stopped at: its caller computes its gradients */
    node_list      all, ready;
    uint64_t       id;
    tide_node *    cur;          /* popped from ready: its hooks are due, then its rule */
    pending_hook * due;
    int32_t        n_due, at, cap_due;
    int64_t        leaf_at;      /* phase 1: the next leaf (or input of a grad walk) to finish */
    int64_t        leaf_cur;     /* the one whose hooks are due, or -1 */
    int32_t        phase;        /* 0: nodes, 1: leaves, 2: done */
    tide_status    st;
    int32_t        grad_off;     /* the caller's grad mode, set back at the end */
    tide_autocast_state autocast;   /* the caller's autocast, off during the walk */
    bool           allow_unused;
};


static bool due_push(struct tide_autograd_walk * w, int64_t id, tide_tensor ** slot, bool * own) {
    if (w->n_due == w->cap_due) {
        int32_t        cap = w->cap_due ? 2 * w->cap_due : 8;
        pending_hook * v   = realloc(w->due, (size_t)cap * sizeof *v);
        if (!v) return false;
        w->due = v, w->cap_due = cap;
    }
    w->due[w->n_due++] = (pending_hook){id, slot, own};
    return true;
}

/* Queues the callers' hooks of node n (on outputs that got a gradient) or of leaf t. */
static tide_status collect_hooks(struct tide_autograd_walk * w, tide_node * n, tide_tensor * t, tide_tensor ** slot,
                                 bool * own) {
    w->n_due = w->at = 0;
    bool ok = true;
    pthread_mutex_lock(&hook_lock);
    for (tide_hook * h = n ? n->hooks : leaf_hooks; h && ok; h = h->next) {
        if (!h->id) continue;
        if (n && n->gbuf[h->nr]) ok = due_push(w, h->id, &n->gbuf[h->nr], &n->gown[h->nr]);
        else if (!n && h->tensor == t) ok = due_push(w, h->id, slot, own);
    }
    pthread_mutex_unlock(&hook_lock);
    return ok ? TIDE_OK : TIDE_E_OOM;
}

/* Fails when n is part of a walk that w nests in: w would route into that walk's buffers. */
static tide_status check_outer(const struct tide_autograd_walk * w, const tide_node * n) {
    for (const struct tide_autograd_walk * o = w->outer; o; o = o->outer)
        if (n->walk_id == o->id)
            return tide_error_set(TIDE_E_VALUE, "backward: a backward run inside the backward of '%s' reaches '%s', "
                                  "a node of the graph being walked; differentiate a graph of its own there (detached "
                                  "inputs, as checkpoint does)", node_name(o->custom), node_name(n));
    return TIDE_OK;
}

static tide_status walk_seed(struct tide_autograd_walk * w, int32_t n_roots, tide_tensor * const * roots,
                             tide_tensor * const * grads) {
    walk_req *  r  = &w->r;
    tide_status st = TIDE_OK;
    uint64_t    id = w->id;
    for (int32_t i = 0; i < n_roots && st == TIDE_OK; i++) {
        tide_tensor * t = roots[i], * g = grads ? grads[i] : NULL;
        if (g) {
            tide_tensor_retain(g);
        } else {
            /* ones on the root's own device (tide_tensor_full makes host tensors) */
            tide_op_params p = g_params(t->ndim, t->sizes, 0, 0);
            p.dtype          = t->dtype_id;
            p.scalars[0]     = 1.0;
            g                = NULL;
            tide_tensor * ones = tide_tensor_empty(t->ndim, t->sizes, t->dtype_id, t->dev);
            if (!ones) return TIDE_E_OOM;
            if ((st = tide_op_call(TIDE_OP_full, NULL, 0, &p, &g, ones)) != TIDE_OK) {
                tide_tensor_release(ones);
                return st;
            }
            tide_tensor_release(g);
            g = ones;
        }
        if (!t->ag_node) {   /* a leaf as root: its own gradient */
            tide_edge e = {NULL, t, 0};
            st = route(r, &e, g);
            continue;
        }
        tide_node * n = t->ag_node;
        if (n->walk_id != id) {
            if (w->outer && (st = check_outer(w, n)) != TIDE_OK) {
                tide_tensor_release(g);
                return st;
            }
            n->walk_id = id, n->deps = 0;
            if (!list_push(&w->all, n)) {
                tide_tensor_release(g);
                return TIDE_E_OOM;
            }
            node_retain(n);   /* a hook may drop the last tensor that holds it */
        }
        st = accumulate(&n->gbuf[t->ag_output_nr], &n->gown[t->ag_output_nr], g);
    }
    /* find every node the roots reach and count the edges into each */
    for (int64_t k = 0; k < w->all.n && st == TIDE_OK; k++) {
        tide_node * n = w->all.v[k];
        for (int32_t i = 0; i < n->n_in; i++) {
            tide_node * m = n->next[i].node;
            if (!m) continue;
            if (m->walk_id != id) {
                if (w->outer) TIDE_CHECK(check_outer(w, m));
                m->walk_id = id, m->deps = 0;
                if (!list_push(&w->all, m)) return TIDE_E_OOM;
                node_retain(m);
            }
            m->deps++;
        }
    }
    for (int64_t k = 0; k < w->all.n && st == TIDE_OK; k++)
        if (w->all.v[k]->deps == 0 && !list_push(&w->ready, w->all.v[k])) st = TIDE_E_OOM;
    return st;
}

/* Runs the walk until a caller's hook is due (*hook its id) or the walk ends (*hook 0). */
static tide_status walk_run(struct tide_autograd_walk * w, int64_t * hook, tide_tensor ** grad) {
    walk_req *  r  = &w->r;
    tide_status st = TIDE_OK;
    *hook = 0, *grad = NULL;
    while (st == TIDE_OK) {
        if (w->at < w->n_due) {
            pending_hook * d = &w->due[w->at++];
            if (!*d->slot) continue;
            if (TIDE_UNLIKELY(tide_capture != NULL))
                return tide_error_set(TIDE_E_VALUE, "backward: gradient hooks are not supported inside "
                                      "tide.jit.compile (a captured function); remove them before compiling");
            *hook = d->id, *grad = *d->slot;
            return TIDE_OK;
        }
        w->n_due = w->at = 0;
        if (w->cur) {   /* its hooks have run: its rule now */
            tide_node * n = w->cur;
            if (n->op == TIDE_NODE_CUSTOM && !r->custom_given && has_gradient(n)) {
                if (w->custom == n)
                    return tide_error_set(TIDE_E_VALUE, "backward: the walk went on without the gradients of "
                                          "custom function '%s' (tide_autograd_walk_custom_result)", node_name(n));
                w->custom = n;   /* its caller computes its inputs' gradients */
                *hook     = n->p.ints[0];
                return TIDE_OK;
            }
            w->cur = NULL, w->custom = NULL;
            st = process(r, n);
            for (int32_t i = 0; i < n->n_in && st == TIDE_OK; i++) {
                tide_node * m = n->next[i].node;
                if (m && --m->deps == 0 && !list_push(&w->ready, m)) st = TIDE_E_OOM;
            }
            continue;
        }
        if (w->phase == 0 && w->ready.n) {
            w->cur = w->ready.v[--w->ready.n];
            if (w->cur->hooks) st = collect_hooks(w, w->cur, NULL, NULL, NULL);
            continue;
        }
        if (w->phase == 0) w->phase = 1, w->leaf_at = 0, w->leaf_cur = -1;
        if (w->phase == 1) {
            if (w->leaf_cur >= 0 && !r->results) {   /* its hooks have run: accumulate it */
                struct leaf_grad * l = &r->leaves[w->leaf_cur];
                st = l->g ? accumulate_leaf(l->leaf, l->g) : TIDE_OK;
                l->g = NULL;
            }
            w->leaf_cur = -1;
            int64_t n = r->results ? r->n_in : r->n_leaves;
            if (st != TIDE_OK || w->leaf_at >= n) {
                if (st == TIDE_OK) w->phase = 2;
                continue;
            }
            int64_t k = w->leaf_cur = w->leaf_at++;
            if (r->results) {
                tide_tensor * t = r->inputs[k];
                if (!t->ag_node && (t->flags & TIDE_TENSOR_HOOKED) && r->results[k])
                    st = collect_hooks(w, NULL, t, &r->results[k], &r->results_own[k]);
            } else {
                st = collect_hooks(w, NULL, r->leaves[k].leaf, &r->leaves[k].g, &r->leaves[k].own);
            }
            continue;
        }
        return TIDE_OK;   /* phase 2: done */
    }
    return st;
}

static tide_status check_roots(const char * api, int32_t n, tide_tensor * const * roots, tide_tensor * const * grads) {
    char a[128], b[128];
    for (int32_t i = 0; i < n; i++) {
        const tide_tensor * t = roots[i];
        if (!t) return tide_error_set(TIDE_E_VALUE, "%s: output %d is NULL", api, i + 1);
        if (!tide_needs_grad(t))
            return tide_error_set(TIDE_E_VALUE, "%s: output %d does not require grad and has no grad_fn "
                                  "(no input of the ops that made it requires grad)", api, i + 1);
        const tide_tensor * g = grads ? grads[i] : NULL;
        if (!g && t->nelem != 1)
            return tide_error_set(TIDE_E_SHAPE, "%s: a gradient can be implied only for outputs of one element; "
                                  "output %d has shape %s: pass its gradient", api, i + 1,
                                  tide_shape_str(t, a, sizeof a));
        if (g && (g->ndim != t->ndim || memcmp(g->sizes, t->sizes, (size_t)t->ndim * sizeof(int64_t)) != 0))
            return tide_error_set(TIDE_E_SHAPE, "%s: the gradient of output %d has shape %s but the output has shape %s",
                                  api, i + 1, tide_shape_str(g, a, sizeof a), tide_shape_str(t, b, sizeof b));
    }
    return TIDE_OK;
}

/* Refuses create_graph during a capture: replays have no autograd. */
static tide_status check_flags(const char * api, int32_t flags) {
    if ((flags & TIDE_AUTOGRAD_CREATE_GRAPH) && TIDE_UNLIKELY(tide_capture != NULL))
        return tide_error_set(TIDE_E_VALUE, "%s: create_graph is not supported inside tide.jit.compile (a captured "
                              "function); compute higher-order gradients outside it", api);
    return TIDE_OK;
}

tide_status tide_autograd_walk_begin(tide_autograd_walk ** out, int32_t n, tide_tensor * const * roots,
                                     tide_tensor * const * grads, int32_t n_in, tide_tensor * const * inputs,
                                     int32_t flags) {
    const char * api = n_in ? "grad" : "backward";
    *out = NULL;
    if (walk_top && !walk_top->custom)
        return tide_error_set(TIDE_E_VALUE, "%s: called from inside a gradient hook, while a backward walk runs "
                              "on this thread; compute what the hook needs outside it", api);
    TIDE_CHECK(check_roots(api, n, roots, grads));
    TIDE_CHECK(check_flags(api, flags));
    for (int32_t k = 0; k < n_in; k++)
        if (!inputs[k] || !tide_needs_grad(inputs[k]))
            return tide_error_set(TIDE_E_VALUE, "grad: input %d does not require grad", k + 1);
    struct tide_autograd_walk * w = calloc(1, sizeof *w);
    tide_tensor ** results = n_in ? calloc((size_t)n_in, sizeof *results) : NULL;
    bool * own = n_in ? calloc((size_t)n_in, sizeof *own) : NULL;
    if (!w || (n_in && (!results || !own))) {
        free(w), free(results), free(own);
        return tide_error_set(TIDE_E_OOM, "%s: out of memory", api);
    }
    bool create = (flags & TIDE_AUTOGRAD_CREATE_GRAPH) != 0;
    w->r.n_in = n_in, w->r.inputs = inputs, w->r.results = results, w->r.results_own = own;
    w->r.retain = (flags & TIDE_AUTOGRAD_RETAIN_GRAPH) != 0, w->r.create = create;
    w->allow_unused = (flags & TIDE_AUTOGRAD_ALLOW_UNUSED) != 0;
    w->leaf_cur = -1;
    w->grad_off = tide_grad_off;
    tide_grad_off = !create;   /* create_graph: the rules' ops are recorded */
    w->autocast = tide_autocast_suspend();   /* the rules compute in the forward's dtypes */
    if (!walk_top) pthread_mutex_lock(&walk_lock);   /* a nested walk runs under its outer walk's hold */
    w->outer = walk_top;
    walk_top = w;
    if (TIDE_UNLIKELY(tide_capture != NULL)) tide_graph_on_backward();
    w->id = ++walk_counter;
    w->st = walk_seed(w, n, roots, grads);
    if (w->st != TIDE_OK) return tide_autograd_walk_end(w, NULL);
    *out = w;
    return TIDE_OK;
}

tide_status tide_autograd_walk_next(tide_autograd_walk * w, int64_t * hook, tide_tensor ** grad) {
    *hook = 0, *grad = NULL;
    if (w->st != TIDE_OK) return w->st;
    w->st = walk_run(w, hook, grad);
    if (w->st == TIDE_E_OOM && !tide_last_error()[0]) tide_error_set(TIDE_E_OOM, "backward: out of memory");
    return w->st;
}

tide_status tide_autograd_walk_replace(tide_autograd_walk * w, tide_tensor * g) {
    if (w->st != TIDE_OK || w->at == 0 || w->at > w->n_due)
        return tide_error_set(TIDE_E_VALUE, "backward: no gradient hook is due to replace a gradient");
    pending_hook * d = &w->due[w->at - 1];
    tide_tensor *  old = *d->slot;
    char           a[128], b[128];
    if (g->ndim != old->ndim || memcmp(g->sizes, old->sizes, (size_t)g->ndim * sizeof(int64_t)) != 0)
        return tide_error_set(TIDE_E_SHAPE, "backward: a gradient hook returned a gradient of shape %s for one of "
                              "shape %s", tide_shape_str(g, a, sizeof a), tide_shape_str(old, b, sizeof b));
    if (g->dtype_id != old->dtype_id)
        return tide_error_set(TIDE_E_DTYPE, "backward: a gradient hook returned a gradient of dtype %s for one of "
                              "dtype %s", tide_dtype_name(g->dtype_id), tide_dtype_name(old->dtype_id));
    if (g->dev.type != old->dev.type || g->dev.index != old->dev.index)
        return tide_error_set(TIDE_E_DEVICE, "backward: a gradient hook returned a gradient on %s for one on %s",
                              tide_device_format(g->dev, a, sizeof a), tide_device_format(old->dev, b, sizeof b));
    tide_tensor_retain(g);
    tide_tensor_release(old);
    *d->slot = g, *d->own = false;
    return TIDE_OK;
}

static tide_status custom_due(const tide_autograd_walk * w, const char * api) {
    if (w->st != TIDE_OK || !w->custom || w->cur != w->custom)
        return tide_error_set(TIDE_E_VALUE, "%s: the walk is not stopped at a custom function", api);
    return TIDE_OK;
}

tide_status tide_autograd_walk_custom_grads(tide_autograd_walk * w, tide_tensor ** grads) {
    TIDE_CHECK(custom_due(w, "tide_autograd_walk_custom_grads"));
    const tide_node * n = w->custom;
    for (int32_t i = 0; i < n->n_out; i++) {
        grads[i] = n->gbuf[i];
        if (grads[i]) tide_tensor_retain(grads[i]);
    }
    return TIDE_OK;
}

/* Whether g (the gradient given for input m) sums back to m's shape, as a broadcast input's does. */
static bool fits_input(const tide_tensor * g, const tide_meta * m) {
    int32_t lead = g->ndim - m->ndim;
    if (lead < 0) return false;
    for (int32_t d = 0; d < m->ndim; d++)
        if (g->sizes[lead + d] != m->sizes[d] && m->sizes[d] != 1) return false;
    return true;
}

tide_status tide_autograd_walk_custom_result(tide_autograd_walk * w, int32_t n_in, tide_tensor * const * grads) {
    TIDE_CHECK(custom_due(w, "tide_autograd_walk_custom_result"));
    const tide_node * n = w->custom;
    char              a[128], b[128];
    if (n_in != n->n_in)
        return tide_error_set(TIDE_E_VALUE, "backward of '%s': %d gradients for its %d tensor inputs", node_name(n),
                              n_in, n->n_in);
    for (int32_t i = 0; i < n_in; i++) {
        const tide_tensor * g = grads[i];
        const tide_meta *   m = &n->in[i];
        if (!g || !(n->next[i].node || n->next[i].leaf)) continue;   /* zero, or not needed */
        if (!is_float(g->dtype_id))
            return tide_error_set(TIDE_E_DTYPE, "backward of '%s': the gradient of input %d has dtype %s; gradients "
                                  "are floating-point", node_name(n), i + 1, tide_dtype_name(g->dtype_id));
        if (!fits_input(g, m))
            return tide_error_set(TIDE_E_SHAPE, "backward of '%s': the gradient of input %d has shape %s, but the "
                                  "input has shape %s", node_name(n), i + 1, tide_shape_str(g, a, sizeof a),
                                  tide_dims_str(m->ndim, m->sizes, b, sizeof b));
        if (g->dev.type != m->dev.type || g->dev.index != m->dev.index)
            return tide_error_set(TIDE_E_DEVICE, "backward of '%s': the gradient of input %d is on %s, but the input "
                                  "is on %s", node_name(n), i + 1, tide_device_format(g->dev, a, sizeof a),
                                  tide_device_format(m->dev, b, sizeof b));
    }
    for (int32_t i = 0; i < n_in; i++) {
        tide_tensor_release(w->r.custom_gx[i]);
        w->r.custom_gx[i] = grads[i];
        if (grads[i]) tide_tensor_retain(grads[i]);
    }
    w->r.custom_given = true;
    return TIDE_OK;
}

tide_tensor * tide_autograd_walk_custom_output(tide_autograd_walk * w, int32_t nr, tide_tensor * t) {
    if (custom_due(w, "tide_autograd_walk_custom_output") != TIDE_OK) return NULL;
    tide_node * n = w->custom;
    if (nr < 0 || nr >= n->n_out || !same_shape(t, &n->out[nr]) || t->dtype_id != n->out[nr].dtype) {
        tide_error_set(TIDE_E_VALUE, "tide_autograd_walk_custom_output: output %d of '%s' does not match the tensor",
                       nr + 1, node_name(n));
        return NULL;
    }
    tide_tensor * a = alias(t);
    if (!a) {
        tide_error_set(TIDE_E_OOM, "%s: out of memory", node_name(n));
        return NULL;
    }
    attach(a, n, nr);
    return a;
}

tide_status tide_autograd_walk_end(tide_autograd_walk * w, tide_tensor ** results) {
    walk_req *  r  = &w->r;
    tide_status st = w->st;
    if (st == TIDE_OK && w->phase != 2)
        st = tide_error_set(TIDE_E_VALUE, "backward: the walk was ended before it finished");
    for (int64_t k = 0; k < w->all.n; k++) {
        tide_node * n = w->all.v[k];
        for (int32_t j = 0; j < TIDE_OP_MAX_OUT; j++) tide_tensor_release(n->gbuf[j]), n->gbuf[j] = NULL;
    }
    for (int64_t k = 0; k < r->n_leaves; k++) tide_tensor_release(r->leaves[k].g);
    for (int32_t k = 0; k < TIDE_OP_MAX_IN; k++) tide_tensor_release(r->custom_gx[k]);
    walk_top = w->outer;
    if (!walk_top) pthread_mutex_unlock(&walk_lock);
    for (int64_t k = 0; k < w->all.n; k++) tide_node_release(w->all.v[k]);
    tide_grad_off = w->grad_off;
    tide_autocast_resume(w->autocast);
    for (int32_t k = 0; k < r->n_in && st == TIDE_OK; k++) {
        if (r->results[k]) {
            tide_meta m;
            meta_of(&m, r->inputs[k]);
            r->results[k] = fit(r->results[k], &m, "grad");
            if (!r->results[k]) st = TIDE_E_OOM;
        } else if (!w->allow_unused) {
            st = tide_error_set(TIDE_E_VALUE, "grad: input %d was not used to compute the outputs "
                                "(pass allow_unused = true to get nil for it)", k + 1);
        }
    }
    for (int32_t k = 0; k < r->n_in; k++) {
        if (st == TIDE_OK && results) results[k] = r->results[k];
        else tide_tensor_release(r->results[k]);
    }
    free(w->all.v), free(w->ready.v), free(w->due), free(r->leaves), free(r->results), free(r->results_own);
    free(w);
    return st;
}

/* Runs a whole walk, for callers that run no hooks. */
static tide_status walk_all(const char * api, int32_t n, tide_tensor * const * roots, tide_tensor * const * grads,
                            int32_t n_in, tide_tensor * const * inputs, tide_tensor ** results, int32_t flags) {
    tide_autograd_walk * w  = NULL;
    tide_status          st = tide_autograd_walk_begin(&w, n, roots, grads, n_in, inputs, flags);
    int64_t              hook = 0;
    tide_tensor *        g    = NULL;
    if (st == TIDE_OK && (st = tide_autograd_walk_next(w, &hook, &g)) == TIDE_OK && hook)
        st = w->st = w->custom ? tide_error_set(TIDE_E_VALUE, "%s: the backward of custom function '%s' is due, and "
                                                "only a caller that walks step by step (tide_autograd_walk_next) "
                                                "can run it", api, node_name(w->custom))
                               : tide_error_set(TIDE_E_VALUE, "%s: a gradient hook is due, and only a caller that "
                                                "walks step by step (tide_autograd_walk_next) can run it", api);
    if (!w) return st;
    tide_status end = tide_autograd_walk_end(w, results);
    return st != TIDE_OK ? st : end;
}

tide_status tide_autograd_backward(int32_t n, tide_tensor * const * roots, tide_tensor * const * grads,
                                   int32_t flags) {
    return walk_all("backward", n, roots, grads, 0, NULL, NULL, flags);
}

tide_status tide_autograd_grad(int32_t n, tide_tensor * const * roots, tide_tensor * const * grads, int32_t n_in,
                               tide_tensor * const * inputs, tide_tensor ** results, int32_t flags) {
    for (int32_t k = 0; k < n_in; k++) results[k] = NULL;
    return walk_all("grad", n, roots, grads, n_in, inputs, results, flags);
}

/* -- hooks and retain_grad: the public API ------------------------------------------------------- */

tide_status tide_tensor_retain_grad(tide_tensor * t) {
    if (!t->ag_node) {
        if (t->flags & TIDE_TENSOR_REQUIRES_GRAD) return TIDE_OK;   /* a leaf keeps its gradient anyway */
        return tide_error_set(TIDE_E_VALUE, "retain_grad: the tensor does not require grad");
    }
    if (t->flags & TIDE_TENSOR_RETAINS_GRAD) return TIDE_OK;
    if (TIDE_UNLIKELY(tide_capture != NULL))
        return tide_error_set(TIDE_E_VALUE, "retain_grad: not supported inside tide.jit.compile (a captured function)");
    tide_hook * h = calloc(1, sizeof *h);
    if (!h) return tide_error_set(TIDE_E_OOM, "retain_grad: out of memory");
    h->tensor = t, h->nr = t->ag_output_nr;
    pthread_mutex_lock(&hook_lock);
    hook_append(&t->ag_node->hooks, h);
    t->flags |= TIDE_TENSOR_RETAINS_GRAD | TIDE_TENSOR_HOOKED;
    pthread_mutex_unlock(&hook_lock);
    return TIDE_OK;
}

tide_status tide_tensor_add_hook(tide_tensor * t, int64_t * id) {
    *id = 0;
    if (!tide_needs_grad(t))
        return tide_error_set(TIDE_E_VALUE, "register_hook: the tensor does not require grad, so no gradient "
                              "flows into it");
    tide_hook * h = calloc(1, sizeof *h);
    if (!h) return tide_error_set(TIDE_E_OOM, "register_hook: out of memory");
    pthread_mutex_lock(&hook_lock);
    h->id = *id = ++hook_counter;
    if (t->ag_node) {
        h->nr = t->ag_output_nr;
        hook_append(&t->ag_node->hooks, h);
    } else {
        h->tensor = t;
        t->flags |= TIDE_TENSOR_HOOKED;
        hook_append(&leaf_hooks, h);
    }
    pthread_mutex_unlock(&hook_lock);
    return TIDE_OK;
}

tide_status tide_tensor_remove_hook(tide_tensor * t, int64_t id) {
    pthread_mutex_lock(&hook_lock);
    for (tide_hook ** p = t->ag_node ? &t->ag_node->hooks : &leaf_hooks; *p; p = &(*p)->next) {
        if ((*p)->id != id) continue;
        tide_hook * h = *p;
        *p = h->next;
        free(h);
        break;
    }
    pthread_mutex_unlock(&hook_lock);
    return TIDE_OK;
}

int64_t tide_autograd_hooks_dead(int64_t * out, int64_t max) {
    pthread_mutex_lock(&hook_lock);
    int64_t k = n_dead < max ? n_dead : max;
    for (int64_t i = 0; i < k; i++) out[i] = dead_ids[--n_dead];
    pthread_mutex_unlock(&hook_lock);
    return k;
}
