/*
 * pass.h - what the graph passes share: helpers to walk and rewrite a
 * captured graph (the base a view reads through, replacing a value, dropping
 * nodes) and the passes themselves, each in a pass_<name>.c of its own.
 */
#ifndef TIDE_PASS_H
#define TIDE_PASS_H

#include "graph.h"

/* The value whose storage value id views: itself unless a view node made it. */
TIDE_INTERNAL int32_t tide_graph_base(const tide_graph * g, int32_t id);
TIDE_INTERNAL bool    tide_graph_node_is_random(const tide_gnode * n);
/* Makes nodes from `from_node` on (and the outputs) read value `to` where they read `from`. */
TIDE_INTERNAL void    tide_graph_replace(tide_graph * g, int32_t from, int32_t to, int32_t from_node);
/* Drops the nodes whose keep[i] is false; returns how many. */
TIDE_INTERNAL int32_t tide_graph_compact(tide_graph * g, const bool * keep);

/* Each returns how many nodes it removed or merged, or -1 when out of memory. */
TIDE_INTERNAL int32_t tide_pass_dce(tide_graph * g);
TIDE_INTERNAL int32_t tide_pass_cse(tide_graph * g);
TIDE_INTERNAL int32_t tide_pass_fuse(tide_graph * g);
/* At capture end: marks the values that depend on constants only (their captured
 * tensors are kept). In optimize: with fold, they become constants and their nodes
 * go; without, the kept tensors are let go. */
TIDE_INTERNAL void    tide_pass_mark_constants(tide_graph * g);
TIDE_INTERNAL int32_t tide_pass_fold(tide_graph * g, bool fold);
TIDE_INTERNAL int32_t tide_pass_simplify(tide_graph * g);

#endif /* TIDE_PASS_H */
