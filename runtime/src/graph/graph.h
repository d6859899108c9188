/*
 * graph.h - what the capture hooks and the graph files share: the recorded
 * graph (values and nodes, in the order the captured code ran them) and the
 * thread-local capture that op calls, views and autograd report to.
 * Replay and passes work on this structure; nothing here touches data.
 */
#ifndef TIDE_GRAPH_H
#define TIDE_GRAPH_H

#include "../core/internal.h"

/* Where a value comes from. */
enum {
    TIDE_GV_EXTERN = 0,   /* a tensor that existed before capture: bound by reference (retained) */
    TIDE_GV_ARG    = 1,   /* argument `arg` of the compiled function: bound anew at each replay */
    TIDE_GV_NODE   = 2,   /* made by node `node` */
    TIDE_GV_CONST  = 3    /* made during capture from host data (tide.tensor{...}): kept (retained) */
};

typedef struct tide_gvalue {
    int32_t       kind;
    int32_t       arg;          /* TIDE_GV_ARG */
    int32_t       node;         /* TIDE_GV_NODE: the node that made it */
    int32_t       ndim, dtype;
    tide_device   dev;
    int64_t       sizes[TIDE_MAX_DIMS];
    tide_tensor * t;            /* EXTERN, CONST: retained; NODE: the captured tensor, retained until capture ends
                                 * (and until tide_graph_optimize for `constant` ones) */
    int32_t       constant;     /* NODE: depends on constants only (pass_fold.c) */
    tide_tensor * init;         /* CONST made from Lua data that the graph writes in place: its contents
                                 * when made (retained), which every replay starts from */
    /* Its stable id, set at capture end and kept by the passes: the node (in capture
     * order) that made it, with slot its output, or for a value no node made, the
     * node that first read it, with slot -1 - its input (-1 - TIDE_OP_MAX_IN: the
     * tensor written in place); seq -1 if none. Check mode matches values by it. */
    int32_t       seq, slot;
} tide_gvalue;

/* What a node does. */
enum {
    TIDE_GN_OP       = 0,   /* a registry op: in -> out, or into value `into` in place */
    TIDE_GN_VIEW     = 1,   /* a view of in[0]: kind in op (TIDE_VIEW_*), args in p.ints */
    TIDE_GN_EMPTY    = 2,   /* a new tensor with undefined contents (tide_tensor_empty) */
    TIDE_GN_SET_GRAD = 3,   /* leaf in[0] gets gradient in[1] (n_in 1: none) */
    TIDE_GN_FUSED    = 4    /* elementwise ops run as one kernel (fused): in -> out[0], or into in place */
};

typedef struct tide_gnode {
    int32_t        kind;
    int32_t        op;                   /* registry op id, or view kind */
    int32_t        grad_on;              /* grad mode when it was captured */
    int32_t        records_grad;         /* TIDE_GN_OP: it recorded autograd history when captured */
    int32_t        n_in, n_out;
    int32_t        in[TIDE_OP_MAX_IN];   /* value ids */
    int32_t        out[TIDE_OP_MAX_OUT]; /* value ids it makes */
    int32_t        into;                 /* value id written in place, or -1 */
    int32_t        compute_dtype;        /* TIDE_GN_OP: the dtype its kernel computed in */
    uint64_t       rng_seed, rng_offset; /* a random op: the slice of the generator it drew when captured */
    struct tide_fused * fused;           /* TIDE_GN_FUSED: the steps (owned) */
    tide_op_params p;
    char           origin[96];           /* the Lua line that ran it ("" if unknown) */
    int32_t        seq;                  /* its index in capture order (a fused node: its last op's) */
} tide_gnode;

struct tide_graph {
    atomic_int     refs;                           /* the owner's, and each pending fused task's */
    tide_gvalue *  values;
    int32_t        n_values, cap_values;
    tide_gnode *   nodes;
    int32_t        n_nodes, cap_nodes, n_origin;   /* nodes before n_origin have their origin set */
    int32_t        n_args;
    int32_t *      outputs;                        /* value ids */
    int32_t        n_outputs, cap_outputs;
    /* capture only: tensor pointer -> value id (open addressing) */
    tide_tensor ** keys;
    int32_t *      ids;
    int32_t        cap_map, n_map;
    tide_status    error;                          /* the first capture failure */
    char           error_msg[1024];
    uint64_t       serial;                         /* tensors made while capturing carry it */
    int32_t        capturing;
    int32_t        had_backward;                   /* a backward walk ran during capture */
    int32_t *      last_use;                       /* per value: the last node reading it (-1: none) */
    /* What the last replays wrote that outlives them (their in-place targets and
     * outputs), retained: a replay waits for the one two before it, so that a
     * loop of replays keeps at most two steps of temporaries in flight. */
    tide_tensor ** written;                        /* tide_graph_written's list */
    tide_tensor ** externs;                        /* tide_graph_externs' list */
    tide_tensor ** fence[2];
    int32_t        n_fence[2];
    char *         text;                           /* tide_graph_describe's buffer */
    /* The plan that replays the graph as one task (exec.c), made at the first
     * replay after the passes; or, when there is none, why not. */
    struct tide_exec * exec;
    int32_t        exec_tried;
    int32_t        exec_off;                       /* TIDE_GRAPH_PASS_PLAN was left out */
    char           exec_why[160];
    char           fuse_why[320];                  /* why a chain on a CUDA device stayed unfused ("": none) */
    int32_t *      trace;                          /* per captured node, in capture order: what it
                                                    * was (tide_graph_trace_code), for check mode */
    int32_t        n_trace;
    struct tide_check * check;                     /* set while capturing an eager run that check.c
                                                    * compares with a graph, node by node */
};

/* The capture running on this thread, or NULL: every hook tests it first. */
extern _Thread_local struct tide_graph * tide_capture;

/* Hooks, called only while tide_capture is set. */
TIDE_INTERNAL void tide_graph_on_op(const tide_opcall * c, tide_tensor * out);
TIDE_INTERNAL void tide_graph_on_view(tide_tensor * src, tide_tensor * v, int32_t kind, const int64_t * ints, int32_t n);
TIDE_INTERNAL void tide_graph_on_const(tide_tensor * t);
TIDE_INTERNAL void tide_graph_on_set_grad(tide_tensor * leaf, tide_tensor * g);
/* A backward walk starts during capture. */
TIDE_INTERNAL void tide_graph_on_backward(void);
/* A value read (item, totable, data pointers) during capture: fails, with the message set
 * (a check capture lets the eager code read: it returns TIDE_OK). */
TIDE_INTERNAL tide_status tide_graph_on_read(const char * what);

/* The view node n makes of src (its value v), as a new tensor; NULL with the error set. */
TIDE_INTERNAL tide_tensor * tide_graph_make_view(const tide_gnode * n, const tide_gvalue * v, tide_tensor * src);

/* -- replay as one engine task (exec.c) -- */

typedef struct tide_exec tide_exec;
/* Plans g for replay as one task: the arena, the steps, the bindings. Returns
 * the plan (owned), or NULL with the reason in why when g must replay node by
 * node (several devices, history to record, a node it cannot prepare). */
TIDE_INTERNAL tide_exec *  tide_exec_plan(tide_graph * g, char * why, size_t n_why);
TIDE_INTERNAL void         tide_exec_release(tide_exec * x);
/* Whether a replay on these arguments (the graph's shapes and dtypes, already
 * checked) can use the plan: contiguous, memory of their own, no history to record. */
TIDE_INTERNAL int32_t      tide_exec_accepts(const tide_exec * x, tide_tensor * const * args);
/* Pushes one replay. Fills outputs (owned) and written (owned: the fixed
 * tensors it writes in place and its fresh results, for the caller's fences;
 * room for every value and node of the graph). */
TIDE_INTERNAL tide_status  tide_exec_replay(tide_exec * x, tide_tensor * const * args, tide_tensor ** outputs,
                                            tide_tensor ** written, int32_t * n_written);
/* The bytes a replay holds (arena and fresh results), and the largest arena values. */
TIDE_INTERNAL int64_t      tide_exec_peak_bytes(const tide_exec * x);
TIDE_INTERNAL const char * tide_exec_largest(const tide_exec * x);
TIDE_INTERNAL int32_t      tide_exec_num_steps(const tide_exec * x);
TIDE_INTERNAL int32_t      tide_exec_num_waves(const tide_exec * x);
/* How a CUDA plan's replays run on the device: "one device graph launch",
 * why they launch step by step, or "" before the second replay has tried
 * to record the graph; NULL for a CPU plan. */
TIDE_INTERNAL const char * tide_exec_device_graph(const tide_exec * x);
/* What node n does, as one number: two nodes with the same code ran the same op
 * on as many inputs, both in place or neither. */
TIDE_INTERNAL int32_t       tide_graph_trace_code(const tide_gnode * n);
/* A node's name in listings and messages: the op's, a view's kind, "fused", ... */
TIDE_INTERNAL const char *  tide_graph_node_name(int32_t kind, int32_t op);
/* The bytes of value v's elements; and a line naming value id (made by a node)
 * for memory reports: "1.50 MiB: float32 [3, 4] made by 'matmul' at f.lua:7". */
TIDE_INTERNAL size_t        tide_graph_value_bytes(const tide_gvalue * v);
TIDE_INTERNAL int           tide_graph_value_line(const tide_graph * g, int32_t id, char * buf, size_t n);
/* The node-by-node replay's step for node i of g over t (per value: its tensor,
 * owned), in the grad mode the node had at capture. Where fence is given, each
 * tensor from outside g that it writes in place is appended there (retained) for
 * the caller to wait on. And, after it, letting go of the tensors node i was
 * the last to read (save g's outputs). */
TIDE_INTERNAL tide_status   tide_graph_run_node(const tide_graph * g, int32_t i, tide_tensor ** t, tide_tensor ** fence,
                                                int32_t * n_fence);
TIDE_INTERNAL void          tide_graph_release_inputs(const tide_graph * g, tide_tensor ** t, int32_t i);
/* Fused node n pushed to the engine over in -> out (the node-by-node replays'). */
TIDE_INTERNAL tide_status   tide_graph_run_fused(const tide_graph * g, const tide_gnode * n, tide_tensor * const * in,
                                                 tide_tensor * out);
/* check.c: the eager run recorded node(s) up to g->n_nodes: compares them; it made
 * constant value id from Lua data: keeps its contents. And the check's cleanup. */
TIDE_INTERNAL void          tide_check_on_node(tide_graph * g);
TIDE_INTERNAL void          tide_check_on_const(tide_graph * g, int32_t id);
TIDE_INTERNAL void          tide_check_free(struct tide_check * c);

#endif /* TIDE_GRAPH_H */
