/*
 * pass_dce.c - dead-code elimination on a captured graph: a node stays if
 * something outside the graph can see what it does (an output, a gradient it
 * sets, an in-place write into a tensor bound by reference), if a node that
 * stays reads what it makes, or if it draws random numbers (dropping a draw
 * would shift every later draw of the stream).
 */
#include "pass.h"

#include <stdlib.h>

int32_t tide_pass_dce(tide_graph * g) {
    bool * live = calloc((size_t)(g->n_values > 0 ? g->n_values : 1), sizeof *live);
    bool * keep = calloc((size_t)(g->n_nodes > 0 ? g->n_nodes : 1), sizeof *keep);
    if (!live || !keep) {
        free(live), free(keep);
        return -1;
    }
    for (int32_t i = 0; i < g->n_outputs; i++) live[g->outputs[i]] = true;
    for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
        const tide_gnode * n = &g->nodes[i];
        bool k = n->kind == TIDE_GN_SET_GRAD || tide_graph_node_is_random(n);
        for (int32_t j = 0; j < n->n_out && !k; j++) k = live[n->out[j]];
        if (!k && n->into >= 0) {
            int32_t base = tide_graph_base(g, n->into);
            k = g->values[base].kind != TIDE_GV_NODE || live[base] || live[n->into];
        }
        if (!k) continue;
        keep[i] = true;
        for (int32_t j = 0; j < n->n_in; j++) live[n->in[j]] = true;
        if (n->into >= 0) live[n->into] = true, live[tide_graph_base(g, n->into)] = true;
    }
    int32_t removed = tide_graph_compact(g, keep);
    free(live), free(keep);
    return removed;
}
