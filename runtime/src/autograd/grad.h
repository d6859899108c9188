/*
 * grad.h - what the autograd files share: the node layout, and the small
 * vocabulary backward rules are written in (run an op, keep its result until
 * the rule ends, reduce a gradient back to an input's shape). A rule only
 * composes registry ops; it never touches data or the engine directly.
 */
#ifndef TIDE_GRAD_H
#define TIDE_GRAD_H

#include "../core/internal.h"

/* Shape, dtype and device of a tensor as it was when a node was recorded. */
typedef struct tide_meta {
    int32_t     ndim, dtype;
    tide_device dev;
    int64_t     sizes[TIDE_MAX_DIMS];
} tide_meta;

/* Where the gradient of one input goes: the node that made it (and which of
 * its outputs the input is), or the leaf it accumulates into. Both NULL: the
 * input does not require grad. */
typedef struct tide_edge {
    tide_node *   node;
    tide_tensor * leaf;
    int32_t       nr;
} tide_edge;

enum { TIDE_SAVED_MAX = TIDE_OP_MAX_IN + TIDE_OP_MAX_OUT };

/* Which tensors a rule reads in backward: saved as detached aliases. */
enum {
    SAVE_IN0 = 1, SAVE_IN1 = 2, SAVE_IN2 = 4, SAVE_IN3 = 8,
    SAVE_OUT0 = 1 << TIDE_OP_MAX_IN, SAVE_OUT1 = 2 << TIDE_OP_MAX_IN, SAVE_OUT2 = 4 << TIDE_OP_MAX_IN
};

struct tide_grad_ctx;
typedef tide_status (*tide_grad_fn)(struct tide_grad_ctx * c);
typedef struct tide_grad_rule {
    uint32_t     save;   /* SAVE_* */
    tide_grad_fn fn;
    /* Saved input i is kept only when an input of mask only_for[i] (bit j: input j)
     * requires grad; 0: always. A rule reads it only for those gradients, so an
     * in-place op that overwrites it stays differentiable when they are not needed
     * (x:lerp_(e, 0.5) keeps no x). */
    uint8_t      only_for[TIDE_OP_MAX_IN];
} tide_grad_rule;

/* A hook on a gradient: on one output of a node (in the node's list), or on a
 * leaf (in autograd.c's list). Lists are read and changed under the hook lock. */
typedef struct tide_hook {
    struct tide_hook * next;
    int64_t            id;       /* a caller's hook (run by whoever drives the walk), or 0: retain_grad */
    tide_tensor *      tensor;   /* weak: retain_grad's tensor, or the hooked leaf (it forgets on death) */
    int32_t            nr;       /* the node's output */
} tide_hook;

struct tide_node {
    atomic_int             refcount;
    int32_t                op;          /* registry id, or a TIDE_VIEW_* kind (< 0) */
    int32_t                n_in, n_out;
    const tide_grad_rule * rule;        /* NULL: the op has no derivative */
    tide_op_params         p;           /* the op's params as its shape rule normalised them */
    tide_edge              next[TIDE_OP_MAX_IN];
    tide_meta              in[TIDE_OP_MAX_IN];
    tide_meta              out[TIDE_OP_MAX_OUT];
    tide_tensor *          saved[TIDE_SAVED_MAX];
    int32_t                saved_version[TIDE_SAVED_MAX];
    int32_t                freed;       /* the saved tensors were released by a backward */
    tide_hook *            hooks;       /* under the hook lock */
    char *                 name;        /* a custom node's (TIDE_NODE_CUSTOM), owned */
    /* Walk state, under the walk lock. */
    uint64_t               walk_id;
    int32_t                deps;
    tide_tensor *          gbuf[TIDE_OP_MAX_OUT];
    bool                   gown[TIDE_OP_MAX_OUT];   /* gbuf[i] was made by the walk: slices add into it in place */
};

/* What a rule gets: gy (borrowed; NULL is a zero gradient, only for nodes of
 * several outputs), and where it puts gx (+1 each, or NULL for zero). */
typedef struct tide_grad_ctx {
    const tide_node * node;
    tide_tensor *     gy[TIDE_OP_MAX_OUT];
    tide_tensor *     gx[TIDE_OP_MAX_IN];
    bool              needs[TIDE_OP_MAX_IN];
    tide_tensor *     temps[96];
    int32_t           n_temps;
    tide_status       st;
    /* create_graph: the rule runs with grad mode on, and g_saved gives the saved
     * tensors their history (linked[slot], cached), so its ops are recorded too. */
    bool              create;
    tide_tensor *     linked[TIDE_SAVED_MAX];
} tide_grad_ctx;

/* The rule of a registry op (weakly linked, like kernels), or NULL. */
TIDE_INTERNAL const tide_grad_rule * tide_op_grad_rule(int32_t op);

/* -- the rule vocabulary (autograd.c): every result is kept by the ctx and
 *    released when the rule ends; a NULL argument makes a NULL result, and the
 *    first failure is kept in c->st, so rules need no error checks. ------------ */

TIDE_INTERNAL tide_tensor * g_call(tide_grad_ctx * c, int32_t op, int32_t n, tide_tensor * a, tide_tensor * b,
                                   tide_tensor * d, const tide_op_params * p);
TIDE_INTERNAL tide_tensor * g_keep(tide_grad_ctx * c, tide_tensor * t);       /* takes +1 t; NULL fails */
/* Saved tensor `slot` (an input, or TIDE_OP_MAX_IN + an output); one the node did not
 * save (its rule's save or only_for masks left it out) fails: a bug in the rule. */
TIDE_INTERNAL tide_tensor * g_saved(tide_grad_ctx * c, int32_t slot);
TIDE_INTERNAL tide_tensor * g_num(tide_grad_ctx * c, double v);               /* a weak host number */
TIDE_INTERNAL tide_tensor * g_zeros(tide_grad_ctx * c, const tide_meta * m);
/* A gradient of a reduction's output, reshaped with the reduced dims kept and
 * expanded back to the input's shape (a view). */
TIDE_INTERNAL tide_tensor * g_unreduce(tide_grad_ctx * c, tide_tensor * g, const tide_meta * in,
                                       const tide_op_params * p);
TIDE_INTERNAL tide_tensor * g_sum_dim(tide_grad_ctx * c, tide_tensor * t, int32_t dim, int32_t keepdim);
TIDE_INTERNAL tide_tensor * g_reshape(tide_grad_ctx * c, tide_tensor * t, int32_t ndim, const int64_t * sizes);
TIDE_INTERNAL tide_tensor * g_transpose(tide_grad_ctx * c, tide_tensor * t, int32_t d0, int32_t d1);
TIDE_INTERNAL tide_tensor * g_unsqueeze(tide_grad_ctx * c, tide_tensor * t, int32_t dim);
TIDE_INTERNAL tide_tensor * g_squeeze(tide_grad_ctx * c, tide_tensor * t, int32_t dim);
TIDE_INTERNAL tide_tensor * g_narrow(tide_grad_ctx * c, tide_tensor * t, int32_t dim, int64_t start, int64_t len);
TIDE_INTERNAL tide_tensor * g_select(tide_grad_ctx * c, tide_tensor * t, int32_t dim, int64_t index);
/* Copies src into dst (a view of a tensor the ctx keeps). */
TIDE_INTERNAL void          g_copy_into(tide_grad_ctx * c, tide_tensor * dst, tide_tensor * src);
/* Sets gx[i] to t (retained). */
TIDE_INTERNAL void          g_set(tide_grad_ctx * c, int32_t i, tide_tensor * t);

/* Params with the given dims in ints (0-based), keepdim and flags. */
static inline tide_op_params g_params(int32_t n, const int64_t * ints, int32_t keepdim, int32_t flags) {
    tide_op_params p;
    memset(&p, 0, sizeof p);
    p.dtype = -1;
    for (int32_t i = 0; i < n; i++) p.ints[i] = ints[i];
    p.n_ints  = n;
    p.keepdim = keepdim;
    p.flags   = flags;
    return p;
}

#define GY(i)  (c->gy[i])
#define IN(i)  g_saved(c, (i))
#define OUT(i) g_saved(c, TIDE_OP_MAX_IN + (i))
#define U(op, a)       g_call(c, TIDE_OP_##op, 1, (a), NULL, NULL, NULL)
#define B(op, a, b)    g_call(c, TIDE_OP_##op, 2, (a), (b), NULL, NULL)
#define W(cond, a, b)  g_call(c, TIDE_OP_where, 3, (cond), (a), (b), NULL)
#define NUM(v)         g_num(c, (v))

/* Defines the rule of registry op `name`, saving `save` (SAVE_* flags). */
#define GRAD(name, save)                                                      \
    static tide_status grad_##name(tide_grad_ctx * c);                        \
    const tide_grad_rule tide_grad_##name = {(save), grad_##name, {0}};       \
    static tide_status grad_##name(tide_grad_ctx * c)
/* The same, with the only_for masks of the saved inputs that some gradients need:
 * GRAD_ONLY_FOR(lerp, SAVE_IN0 | SAVE_IN2, [0] = 1 << 2) keeps x only for weight's. */
#define GRAD_ONLY_FOR(name, save, ...)                                        \
    static tide_status grad_##name(tide_grad_ctx * c);                        \
    const tide_grad_rule tide_grad_##name = {(save), grad_##name, {__VA_ARGS__}}; \
    static tide_status grad_##name(tide_grad_ctx * c)

#endif /* TIDE_GRAD_H */
