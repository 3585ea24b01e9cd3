/* autograd.h: the dynamic tape. Each differentiable op that sees an input
 * requiring grad records an AGNode on its output: edges to the producers of
 * its inputs (another node, or a leaf tensor to accumulate into), the
 * tensors it saved for backward (with their storage versions, so an
 * in-place write after saving is caught), and small op parameters. backward()
 * walks the graph from a root in dependency order, reduces each input
 * gradient to its input's shape and dtype, accumulates into leaves' .grad
 * and frees each node's saved tensors once it has run. */
#ifndef ACCEL_AUTOGRAD_H
#define ACCEL_AUTOGRAD_H

#include "tensor.h"

#define AG_MAX_SAVED 4

typedef struct AGNode AGNode;
/* Compute gradients of the inputs from gout (the gradient of the node's
 * output). gin[i] receives a new reference, or NULL for no gradient. Shapes
 * may be broadcast-larger than the input's: the engine reduces them.
 * Returns 0, or -1 with an error set. */
typedef int (*AGBackwardFn)(AGNode *n, Tensor *gout, Tensor **gin);
/* Optional, for one-input nodes whose gradient covers only part of their
 * input (narrow, select): add it straight into *acc, the producer's
 * accumulated gradient (the input's shape and dtype; NULL: create it), so
 * that a split into k parts costs k slice writes, not k full-size zero
 * tensors summed. The engine uses it instead of backward when the input
 * comes from another node (never for leaves). Returns 0, or -1 with an
 * error set. */
typedef int (*AGAccumulateFn)(AGNode *n, Tensor *gout, Tensor **acc);

/* A tensor hook (torch's Tensor.register_hook / retain_grad /
 * register_post_accumulate_grad_hook). AG_HOOK_GRAD and AG_HOOK_LAST run on
 * the complete gradient of a tensor once per backward pass, before it flows
 * on (a non-leaf's: before its grad_fn runs; a leaf's: before it is added
 * into .grad), and may replace *grad (releasing the old reference); the
 * AG_HOOK_LAST ones (retain_grad) after the others. AG_HOOK_POST (leaves
 * only) runs after the pass's gradient was added into .grad, with *grad the
 * leaf itself. Each kind runs in the order added. run returns 0, or -1 with
 * an error set, which fails the pass. free_ud (may be NULL) runs when the
 * hook is removed or its owner freed. */
typedef int (*AGHookFn)(void *ud, Tensor **grad);
typedef enum { AG_HOOK_GRAD, AG_HOOK_LAST, AG_HOOK_POST } AGHookKind;
typedef struct AGHook {
    AGHookFn run;
    void (*free_ud)(void *ud);
    void *ud;
    Tensor *retains; /* retain_grad's tensor (not a reference): cleared when it is freed */
    int id;
    AGHookKind kind;
    struct AGHook *next;
} AGHook;

typedef struct AGEdge {
    AGNode *fn;    /* producer of this input, or NULL */
    Tensor *leaf;  /* leaf requiring grad, or NULL */
    int ndim;      /* the input's shape, dtype and device, to reduce and check its gradient against */
    int64_t shape[TENSOR_MAX_DIMS];
    DType dtype;
    Device device;
} AGEdge;

struct AGNode {
    int refcount;
    const char *name;
    AGBackwardFn backward;
    void (*destroy_ctx)(AGNode *n); /* frees ctx, may be NULL */
    int n_in;
    AGEdge *edges;
    Tensor *saved[AG_MAX_SAVED];
    int64_t saved_version[AG_MAX_SAVED];
    int n_saved;
    bool released;
    bool unsaved;    /* recorded while saving was off (ag_set_keep_saved): cannot run */
    bool view_base;  /* a view's node (ag_record_view): view_version is its storage's version then */
    bool view_stale; /* the view was used after an in-place op on what it views: refuses to run */
    int64_t view_version;
    double p[4];     /* op scalars */
    int64_t i[TENSOR_MAX_DIMS * 2]; /* op integers (dims, shapes) */
    void *ctx;
    AGAccumulateFn backward_acc; /* optional, see AGAccumulateFn */
    AGHook *hooks;               /* hooks of the tensor this node made (ag_hook_add) */
    /* engine scratch */
    int deps;
    int depth;       /* nesting depth of the pass that counted it (see ag_backward) */
    Tensor *grad_acc;
    AGNode *stack_next;
};

/* Whether ops record: grad mode on and inference mode off. */
bool ag_grad_enabled(void);
bool ag_grad_mode(void);           /* the grad mode alone (torch.is_grad_enabled) */
bool ag_set_grad_enabled(bool on); /* returns the previous mode */
/* Inference mode (torch.inference_mode): nothing records while it is on,
 * whatever the grad mode. Returns the previous state. */
bool ag_set_inference_mode(bool on);
bool ag_inference_mode(void);

/* While keep_saved is off, ops still record their nodes (so requires_grad
 * and grad_fn come out as usual) but ag_save keeps nothing: the nodes refuse
 * to run. Activation checkpointing runs its forward so and recomputes the
 * graph in backward. Returns the previous setting. */
bool ag_set_keep_saved(bool on);

/* True when grad mode is on and any of the inputs requires grad. */
bool ag_needs_grad(Tensor **inputs, int n);

/* Create a node for `out` if any input requires grad (and grad mode is on);
 * sets out->grad_fn / requires_grad. Returns the node (borrowed: owned by
 * out) or NULL when no graph is needed. NULL inputs are allowed (no edge). */
AGNode *ag_record(const char *name, AGBackwardFn fn, Tensor *out, Tensor **inputs, int n_in);
/* Save a tensor for backward (retained, version recorded); NULL keeps an
 * empty slot (ag_saved gives NULL). */
void ag_save(AGNode *n, Tensor *t);
/* ag_record for a view out of t. When t has history, the node keeps the
 * storage's version: an in-place op on t afterwards changes t's history but
 * not the view's (PyTorch rebuilds the view's), so a view used after it
 * marks its node stale, and a backward through that node is refused. A view
 * used before the in-place op back-propagates as usual. */
AGNode *ag_record_view(const char *name, AGBackwardFn fn, Tensor *out, Tensor *t);
/* Fetch a saved tensor, checking it was not modified in place since. */
Tensor *ag_saved(AGNode *n, int k);
/* Whether input k of the node needs a gradient. */
static inline bool ag_input_needs_grad(const AGNode *n, int k) {
    return n->edges[k].fn != NULL || n->edges[k].leaf != NULL;
}

void ag_node_release(AGNode *n);

/* Run backward from root with gradient grad (NULL: root must have one
 * element, gradient 1). Returns 0 or -1 with error. Leaves' grad_hooks run
 * once per pass, after their last contribution (see autograd.c). A backward
 * started inside a node's backward (a custom Function's, checkpoint's
 * recompute) runs as part of the outer pass; it may not reach the nodes of
 * the graph the outer pass is running through (an error says so). */
int ag_backward(Tensor *root, Tensor *grad);
/* torch's retain_graph for the passes run while on: the nodes keep their
 * saved tensors and may run again. Returns the previous setting. */
bool ag_set_retain_graph(bool on);
bool ag_retaining_graph(void);
/* t (may be NULL), its grad_fn (if any) under the node name PyTorch shows
 * for the op called (name: a static string). */
Tensor *ag_name_node(Tensor *t, const char *name);
/* Backward from n roots at once, roots[k] receiving grads[k] (same shape,
 * required): torch.autograd.backward(tensors, grad_tensors). */
int ag_backward_many(Tensor **roots, Tensor **grads, int n);
/* torch.autograd.grad: one pass from the n roots (grads[k] for roots[k],
 * as ag_backward_many) that sums the gradient reaching each of
 * inputs[0..n_in) (leaves, or tensors made by a recorded op) into out[i]
 * (new references, NULL where none arrived) instead of their .grad.
 * exclusive: no other leaf's .grad, tensor hook or grad_hook is touched
 * either; else (a pass nested in another, as checkpoint's recompute) other
 * leaves go on as the pass around it would send them. */
int ag_grad(Tensor **roots, Tensor **grads, int n, Tensor **inputs, int n_in, Tensor **out, bool exclusive);
/* A number identifying the backward pass running now (0 outside backward);
 * every outermost ag_backward call gets a new one, nested ones share it. */
uint32_t ag_backward_pass(void);
/* fn(ud) runs once when the outermost backward pass running now ends
 * without error (torch's Engine.queue_callback: DDP completes its gradient
 * averaging there). A failing fn (-1, error set) makes that backward fail
 * with its error; after a failed pass queued callbacks are dropped. Outside
 * a pass, or when AG_PASS_END_MAX are queued already: -1 with an error. */
#define AG_PASS_END_MAX 64
int ag_queue_pass_end(int (*fn)(void *ud), void *ud);

/* Whether a gradient tensor is held by nothing else (no other reference,
 * view, graph or Lua value), so the engine may add into it in place or
 * adopt it as a leaf's .grad. */
bool ag_sole_owner(const Tensor *t);

/* Add a hook to t: on its grad_fn, or on t itself when t is a leaf that
 * requires grad (else an error; AG_HOOK_POST: leaves only). retains: retain_grad's hook, which stays
 * with t when an in-place op gives t a new grad_fn. Returns the hook's id
 * (> 0), or -1 with an error set (free_ud is then called on ud). */
int ag_hook_add(Tensor *t, AGHookFn run, void (*free_ud)(void *), void *ud, AGHookKind kind, Tensor *retains);
/* Remove the hook with this id from a list (a node's or a leaf's hooks;
 * keep its owner alive meanwhile); false if it is not there. */
bool ag_hook_remove(AGHook **list, int id);
/* Whether retain_grad was called on t (a hook with retains == t). */
bool ag_retains_grad(const Tensor *t);
/* Give t the history n (new reference taken; NULL: none), moving its
 * retain_grad hook along, and release the old one. */
void ag_set_grad_fn(Tensor *t, AGNode *n);
AGNode *ag_node_retain(AGNode *n);
/* tensor_release's part: t's hooks, and its retain_grad hook on its grad_fn. */
void ag_tensor_freed(Tensor *t);

/* Reduce a (broadcast) gradient to a shape by summing; new reference. */
Tensor *ag_sum_to(Tensor *g, const int64_t *shape, int ndim);

#endif
