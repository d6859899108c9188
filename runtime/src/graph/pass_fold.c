/*
 * pass_fold.c - constant folding on a captured graph: an op or view whose
 * inputs are all constants (host data the function turned into tensors, or
 * results of such ops: tide.ones(n):triu() as a mask) computes the same thing
 * at every replay, so the value capture computed is kept as a constant and
 * the node goes. Random ops, in-place writes, outputs and values written in
 * place later are not folded: each replay must see them anew.
 */
#include "pass.h"

#include <stdlib.h>

static bool written_later(const tide_graph * g, int32_t base) {
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].into >= 0 && tide_graph_base(g, g->nodes[i].into) == base) return true;
    return false;
}

static bool is_output(const tide_graph * g, int32_t id) {
    for (int32_t i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == id) return true;
    return false;
}

void tide_pass_mark_constants(tide_graph * g) {
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const tide_gnode * n = &g->nodes[i];
        if ((n->kind != TIDE_GN_OP && n->kind != TIDE_GN_VIEW) || n->into >= 0 || tide_graph_node_is_random(n))
            continue;
        bool all = true;
        for (int32_t k = 0; k < n->n_in && all; k++) {
            const tide_gvalue * v = &g->values[n->in[k]];
            all = v->kind == TIDE_GV_CONST || (v->kind == TIDE_GV_NODE && v->constant);
        }
        for (int32_t k = 0; k < n->n_out && all; k++) {
            int32_t id = n->out[k];
            tide_gvalue * v = &g->values[id];
            if (v->t && !is_output(g, id) && !written_later(g, tide_graph_base(g, id))) v->constant = 1;
        }
    }
}

int32_t tide_pass_fold(tide_graph * g, bool fold) {
    bool * keep = malloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1) * sizeof *keep);
    if (!keep) return -1;
    int32_t folded = 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const tide_gnode * n = &g->nodes[i];
        bool all = n->n_out > 0;
        for (int32_t k = 0; k < n->n_out; k++) all = all && g->values[n->out[k]].constant;
        keep[i] = !(fold && all);
        folded += !keep[i];
    }
    for (int32_t id = 0; id < g->n_values; id++) {
        tide_gvalue * v = &g->values[id];
        if (v->kind != TIDE_GV_NODE || !v->constant) continue;
        v->constant = 0;
        if (fold && !keep[v->node]) {   /* a constant now: the graph keeps the captured tensor */
            v->kind = TIDE_GV_CONST;
            v->node = -1;
        } else {
            tide_tensor_release(v->t);
            v->t = NULL;
        }
    }
    if (folded) tide_graph_compact(g, keep);
    free(keep);
    return folded;
}
