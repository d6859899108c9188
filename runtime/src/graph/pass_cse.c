/*
 * pass_cse.c - common-subexpression elimination on a captured graph: an op or
 * view that repeats an earlier one (same op, params, inputs and result shapes,
 * no in-place write to those inputs in between) reads the earlier one's
 * results instead.
 * Random ops, in-place ops, and results that something writes into later are
 * left alone: merging those would change what the code computed.
 */
#include "pass.h"

#include <stdlib.h>

static bool same_params(const tide_op_params * a, const tide_op_params * b) {
    if (a->n_ints != b->n_ints || a->keepdim != b->keepdim || a->dtype != b->dtype || a->flags != b->flags) return false;
    for (int32_t i = 0; i < a->n_ints && i < TIDE_OP_MAX_INTS; i++)
        if (a->ints[i] != b->ints[i]) return false;
    return memcmp(a->scalars, b->scalars, sizeof a->scalars) == 0;
}

/* Whether two nodes' results have the same dtype, device and shape. What a node
 * makes is not all in its params: a reshape or expand keeps its shape only in
 * its result (w:view(2,9) and w:unsqueeze(1) differ there alone), and an op of
 * no inputs its device and default dtype. */
static bool same_results(const tide_graph * g, const tide_gnode * a, const tide_gnode * b) {
    for (int32_t k = 0; k < a->n_out; k++) {
        const tide_gvalue * x = &g->values[a->out[k]], * y = &g->values[b->out[k]];
        if (x->ndim != y->ndim || x->dtype != y->dtype || x->dev.type != y->dev.type || x->dev.index != y->dev.index ||
            memcmp(x->sizes, y->sizes, (size_t)x->ndim * sizeof *x->sizes))
            return false;
    }
    return true;
}

int32_t tide_pass_cse(tide_graph * g) {
    int32_t * version = calloc((size_t)(g->n_values > 0 ? g->n_values : 1), sizeof *version);  /* writes per base */
    int32_t * seen_at = calloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1), sizeof *seen_at);    /* version sums */
    bool *    written = calloc((size_t)(g->n_values > 0 ? g->n_values : 1), sizeof *written);
    bool *    keep    = malloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1) * sizeof *keep);
    if (!version || !seen_at || !written || !keep) {
        free(version), free(seen_at), free(written), free(keep);
        return -1;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        keep[i] = true;
        if (g->nodes[i].into >= 0) written[tide_graph_base(g, g->nodes[i].into)] = true;
    }
    int32_t merged = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        tide_gnode * n = &g->nodes[i];
        if (n->into >= 0) {
            version[tide_graph_base(g, n->into)]++;
            continue;
        }
        bool candidate = (n->kind == TIDE_GN_OP || n->kind == TIDE_GN_VIEW) && !tide_graph_node_is_random(n);
        for (int32_t k = 0; k < n->n_out && candidate; k++) candidate = !written[tide_graph_base(g, n->out[k])];
        if (!candidate) continue;
        int32_t sum = 0;
        for (int32_t k = 0; k < n->n_in; k++) sum += version[tide_graph_base(g, n->in[k])];
        seen_at[i] = sum;
        for (int32_t j = 0; j < i; j++) {   /* earlier nodes of the same op: few, in practice */
            const tide_gnode * m = &g->nodes[j];
            if (!keep[j] || m->kind != n->kind || m->op != n->op || m->n_in != n->n_in || m->n_out != n->n_out ||
                m->into >= 0 || m->grad_on != n->grad_on || seen_at[j] != sum || !same_params(&m->p, &n->p) ||
                !same_results(g, m, n))
                continue;
            bool same = tide_graph_node_is_random(m) == false;
            for (int32_t k = 0; k < n->n_in && same; k++) same = m->in[k] == n->in[k];
            for (int32_t k = 0; k < m->n_out && same; k++) same = !written[tide_graph_base(g, m->out[k])];
            if (!same) continue;
            for (int32_t k = 0; k < n->n_out; k++) tide_graph_replace(g, n->out[k], m->out[k], i + 1);
            keep[i] = false;
            merged++;
            break;
        }
    }
    if (merged) tide_graph_compact(g, keep);
    free(version), free(seen_at), free(written), free(keep);
    return merged;
}
