/*
 * pass_simplify.c - algebraic simplification on a captured graph: x * 1,
 * 1 * x, x + 0, 0 + x, x - 0 and x / 1 (with a one-element constant that
 * leaves x's dtype and shape as they are), and permutations or transposes
 * that undo each other, are x itself. A result that is an output or that
 * something writes into in place keeps its node: it must be a tensor of its own.
 */
#include "pass.h"

#include <math.h>
#include <stdlib.h>

/* The value of a one-element constant, or NAN when v is not one. */
static double const_scalar(const tide_graph * g, int32_t id) {
    const tide_gvalue * v = &g->values[id];
    double d = NAN;
    if (v->kind != TIDE_GV_CONST || !v->t || v->t->nelem != 1) return NAN;
    if (tide_tensor_get(v->t, 0, &d) != TIDE_OK) return NAN;
    return d;
}

static bool same_meta(const tide_gvalue * a, const tide_gvalue * b) {
    return a->ndim == b->ndim && a->dtype == b->dtype && !memcmp(a->sizes, b->sizes, (size_t)a->ndim * 8) &&
           a->dev.type == b->dev.type && a->dev.index == b->dev.index;
}

static bool replaceable(const tide_graph * g, int32_t id) {
    for (int32_t i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == id) return false;
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].into >= 0 && tide_graph_base(g, g->nodes[i].into) == tide_graph_base(g, id)) return false;
    return true;
}

/* The input a node passes through unchanged, or -1. */
static int32_t identity_of(const tide_graph * g, const tide_gnode * n) {
    if (n->kind == TIDE_GN_OP && n->n_in == 2 && n->into < 0) {
        const tide_gvalue * out = &g->values[n->out[0]];
        int32_t a = n->in[0], b = n->in[1];
        double ca = const_scalar(g, a), cb = const_scalar(g, b);
        int32_t x = -1;
        if (n->op == TIDE_OP_mul) x = cb == 1 ? a : ca == 1 ? b : -1;
        else if (n->op == TIDE_OP_add) x = cb == 0 ? a : ca == 0 ? b : -1;
        else if (n->op == TIDE_OP_sub) x = cb == 0 ? a : -1;
        else if (n->op == TIDE_OP_div) x = cb == 1 ? a : -1;
        return x >= 0 && same_meta(&g->values[x], out) ? x : -1;
    }
    if (n->kind == TIDE_GN_VIEW && n->op == TIDE_VIEW_PERMUTE) {   /* permute of a permute: composed */
        const tide_gvalue * src = &g->values[n->in[0]];
        if (src->kind != TIDE_GV_NODE || src->node < 0) return -1;
        const tide_gnode * m = &g->nodes[src->node];
        if (m->kind != TIDE_GN_VIEW || m->op != TIDE_VIEW_PERMUTE || m->p.n_ints != n->p.n_ints) return -1;
        for (int32_t i = 0; i < n->p.n_ints; i++)   /* out dim i is in dim perm_n[i] = inner dim perm_m[perm_n[i]] */
            if (m->p.ints[n->p.ints[i]] != i) return -1;
        return m->in[0];
    }
    return -1;
}

int32_t tide_pass_simplify(tide_graph * g) {
    bool * keep = malloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1) * sizeof *keep);
    if (!keep) return -1;
    int32_t removed = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        keep[i] = true;
        tide_gnode * n = &g->nodes[i];
        int32_t x = identity_of(g, n);
        if (x < 0 || !replaceable(g, n->out[0])) continue;
        tide_graph_replace(g, n->out[0], x, i + 1);
        keep[i] = false;
        removed++;
    }
    if (removed) tide_graph_compact(g, keep);
    free(keep);
    return removed;
}
