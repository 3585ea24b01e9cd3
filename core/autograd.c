/* autograd.c: recording nodes and the backward engine (see autograd.h).
 *
 * Leaf hooks (Tensor.grad_hook, used by DDP's gradient reducer): while
 * counting dependencies, the engine also counts, per backward pass, the
 * edges that lead to each hooked leaf; each edge is settled when its node
 * has run (with or without a gradient for that input), and the hook runs
 * once, when the last edge is settled and at least one gradient arrived.
 * So a leaf used several times (a tied weight, a layer applied twice) is
 * reported once, with its complete gradient. A node that no gradient
 * reached still "runs" (its backward is skipped) so that the counts below
 * it settle.
 *
 * Nested backward (a custom Function's backward, activation checkpointing's
 * recompute, calling backward itself) runs as part of the pass around it:
 * same pass number, so a hooked leaf's count adds the nested edges to the
 * outer ones and its hook runs once. A nested pass must stay on its own
 * graph: reaching a node the outer pass has counted is an error. Nodes
 * recorded while keep_saved is off (ag_set_keep_saved) hold no saved tensors
 * and refuse to run. */
#include "autograd.h"
#include "ops.h"
#include "pool.h"
#include "profile.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static __thread bool grad_enabled = true, keep_saved = true, inference_mode, retain_graph;
static uint32_t backward_pass, pass_counter; /* the pass running (0: none), for leaf hooks */
static int pass_depth;                       /* ag_backward calls running, nested ones included */

uint32_t ag_backward_pass(void) { return backward_pass; }

/* ---- callbacks at the end of the outermost pass ---- */

static struct {
    int (*fn)(void *ud);
    void *ud;
} pass_end[AG_PASS_END_MAX];
static int n_pass_end;

int ag_queue_pass_end(int (*fn)(void *ud), void *ud) {
    if (!backward_pass) return accel_fail_int("autograd: a pass-end callback can only be queued during backward");
    if (n_pass_end == AG_PASS_END_MAX)
        return accel_fail_int("autograd: more than %d pass-end callbacks queued in one backward", AG_PASS_END_MAX);
    pass_end[n_pass_end].fn = fn, pass_end[n_pass_end].ud = ud;
    n_pass_end++;
    return 0;
}

/* After the outermost pass: the queued callbacks in order when it
 * succeeded (rc 0), the first failure's -1; none after a failure. */
static int run_pass_end(int rc) {
    int n = n_pass_end;
    n_pass_end = 0;
    for (int i = 0; i < n && rc == 0; i++) rc = pass_end[i].fn(pass_end[i].ud);
    return rc;
}

/* Nodes with up to POOLED_EDGES inputs come from a free list. */
#define POOLED_EDGES 3
static ObjPool node_pool = {NULL, sizeof(AGNode) + POOLED_EDGES * sizeof(AGEdge)};

static AGNode *node_alloc(int n_in) {
    if (n_in <= POOLED_EDGES) return pool_alloc(&node_pool);
    return calloc(1, sizeof(AGNode) + sizeof(AGEdge) * (size_t)n_in);
}

static void node_free(AGNode *n) {
    if (n->n_in <= POOLED_EDGES) pool_free(&node_pool, n);
    else free(n);
}

bool ag_grad_enabled(void) { return grad_enabled && !inference_mode; }

bool ag_grad_mode(void) { return grad_enabled; }

bool ag_set_inference_mode(bool on) {
    bool prev = inference_mode;
    inference_mode = on;
    return prev;
}

bool ag_inference_mode(void) { return inference_mode; }

bool ag_set_grad_enabled(bool on) {
    bool prev = grad_enabled;
    grad_enabled = on;
    return prev;
}

bool ag_set_retain_graph(bool on) {
    bool prev = retain_graph;
    retain_graph = on;
    return prev;
}

bool ag_retaining_graph(void) { return retain_graph; }

Tensor *ag_name_node(Tensor *t, const char *name) {
    if (t && t->grad_fn) t->grad_fn->name = name;
    return t;
}

bool ag_set_keep_saved(bool on) {
    bool prev = keep_saved;
    keep_saved = on;
    return prev;
}

bool ag_needs_grad(Tensor **inputs, int n) {
    if (!grad_enabled || inference_mode) return false;
    for (int k = 0; k < n; k++)
        if (inputs[k] && inputs[k]->requires_grad) return true;
    return false;
}

AGNode *ag_node_retain(AGNode *n) {
    n->refcount++;
    return n;
}

static void node_free_saved(AGNode *n) {
    for (int k = 0; k < n->n_saved; k++) {
        tensor_release(n->saved[k]);
        n->saved[k] = NULL;
    }
    n->n_saved = 0;
}

/* After a node ran: its saved tensors are freed, and only then can it not
 * run again (as torch, a node that saved nothing, add's or a view's, runs
 * in a second backward through the same graph). */
static void release_after_run(AGNode *n) {
    if (retain_graph) return; /* backward(retain_graph = true): kept for another pass */
    if (n->n_saved > 0 || n->ctx) n->released = true;
    node_free_saved(n);
}

/* ---- tensor hooks ---- */

static void hooks_free(AGHook *h) {
    while (h) {
        AGHook *next = h->next;
        if (h->free_ud) h->free_ud(h->ud);
        free(h);
        h = next;
    }
}

/* The list t's hooks go to: its grad_fn's, or a leaf's own. */
static AGHook **hook_list(Tensor *t) { return t->grad_fn ? &t->grad_fn->hooks : &t->hooks; }

static void hook_append(AGHook **list, AGHook *h) {
    while (*list) list = &(*list)->next;
    *list = h;
}

/* Unlink and return the hook with this id (id > 0) or, with id 0,
 * retain_grad's hook of `retains`; NULL when the list has none. */
static AGHook *hook_take(AGHook **list, int id, const Tensor *retains) {
    for (AGHook **at = list; *at; at = &(*at)->next) {
        if (id ? (*at)->id != id : (*at)->retains != retains) continue;
        AGHook *h = *at;
        *at = h->next;
        h->next = NULL;
        return h;
    }
    return NULL;
}

/* Why a hook of this kind cannot go on t, or NULL. */
static const char *hook_refused(const Tensor *t, AGHookKind kind) {
    if (!t->requires_grad) return "cannot register a hook on a tensor that doesn't require gradient";
    if (kind == AG_HOOK_POST && t->grad_fn) return "post accumulate grad hooks cannot be registered on non-leaf tensors";
    return NULL;
}

int ag_hook_add(Tensor *t, AGHookFn run, void (*free_ud)(void *), void *ud, AGHookKind kind, Tensor *retains) {
    static int last_id;
    const char *why = hook_refused(t, kind);
    AGHook *h = why ? NULL : calloc(1, sizeof *h);
    if (!h) {
        if (free_ud) free_ud(ud);
        return accel_fail_int("%s", why ? why : "register_hook: out of memory");
    }
    *h = (AGHook){run, free_ud, ud, retains, ++last_id, kind, NULL};
    hook_append(hook_list(t), h);
    return h->id;
}

bool ag_hook_remove(AGHook **list, int id) {
    AGHook *h = id > 0 ? hook_take(list, id, NULL) : NULL;
    hooks_free(h);
    return h != NULL;
}

bool ag_retains_grad(const Tensor *t) {
    for (const AGHook *h = t->grad_fn ? t->grad_fn->hooks : NULL; h; h = h->next)
        if (h->retains == t) return true;
    return false;
}

/* Unlink t's retain_grad hook from n's list (n NULL: none). */
static AGHook *take_retain_hook(AGNode *n, const Tensor *t) { return n ? hook_take(&n->hooks, 0, t) : NULL; }

void ag_set_grad_fn(Tensor *t, AGNode *n) {
    AGNode *old = t->grad_fn;
    if (n == old) return;
    AGHook *keep = take_retain_hook(old, t);
    if (keep && n) hook_append(&n->hooks, keep); /* it stays with the tensor: the gradient of its new value */
    else hooks_free(keep);
    t->grad_fn = n ? ag_node_retain(n) : NULL;
    if (old) ag_node_release(old);
}

void ag_tensor_freed(Tensor *t) {
    hooks_free(t->hooks);
    t->hooks = NULL;
    tensor_release(t->ag_sum);
    t->ag_sum = NULL;
    hooks_free(take_retain_hook(t->grad_fn, t));
}

/* Run the hooks of one kind in a list. */
static int run_hooks_of(AGHook *list, AGHookKind kind, Tensor **g) {
    for (AGHook *h = list; h; h = h->next)
        if (h->kind == kind && h->run(h->ud, g) < 0) return -1;
    return 0;
}

/* Run a gradient through a list of hooks: the others first, then the last ones. */
static int run_hooks(AGHook *list, Tensor **g) {
    return run_hooks_of(list, AG_HOOK_GRAD, g) < 0 ? -1 : run_hooks_of(list, AG_HOOK_LAST, g);
}

/* Release the node and, iteratively, producers that this was the last owner of
 * (long chains must not recurse deeply). */
void ag_node_release(AGNode *n) {
    AGNode *stack = NULL;
    if (n && --n->refcount == 0) n->stack_next = NULL, stack = n;
    while (stack) {
        AGNode *cur = stack;
        stack = cur->stack_next;
        node_free_saved(cur);
        for (int k = 0; k < cur->n_in; k++) {
            tensor_release(cur->edges[k].leaf);
            AGNode *p = cur->edges[k].fn;
            if (p && --p->refcount == 0) p->stack_next = stack, stack = p;
        }
        if (cur->destroy_ctx) cur->destroy_ctx(cur);
        hooks_free(cur->hooks);
        tensor_release(cur->grad_acc);
        node_free(cur);
    }
}

AGNode *ag_record(const char *name, AGBackwardFn fn, Tensor *out, Tensor **inputs, int n_in) {
    if (!name || !ag_needs_grad(inputs, n_in) || !dtype_is_float(out->dtype)) return NULL;
    AGNode *n = node_alloc(n_in);
    if (!n) return NULL;
    n->refcount = 1;
    n->name = name;
    n->unsaved = !keep_saved;
    n->backward = fn;
    n->n_in = n_in;
    n->edges = (AGEdge *)(n + 1);
    for (int k = 0; k < n_in; k++) {
        Tensor *in = inputs[k];
        if (!in) continue;
        AGEdge *e = &n->edges[k];
        e->ndim = in->ndim;
        memcpy(e->shape, in->shape, sizeof(int64_t) * (size_t)in->ndim);
        e->dtype = in->dtype;
        e->device = in->device;
        if (!in->requires_grad) continue;
        AGNode *p = in->grad_fn;
        if (p && p->view_base && in->storage->version != p->view_version) p->view_stale = true; /* see ag_record_view */
        if (in->grad_fn) e->fn = ag_node_retain(in->grad_fn);
        else e->leaf = tensor_retain(in);
    }
    ag_set_grad_fn(out, n);
    ag_node_release(n); /* out holds the one reference */
    out->requires_grad = true;
    return n;
}

void ag_save(AGNode *n, Tensor *t) {
    if (n->unsaved) return;
    int k = n->n_saved++;
    if (!t) { /* a slot the backward will not read */
        n->saved[k] = NULL, n->saved_version[k] = 0;
        return;
    }
    /* Saving the node's own output: keep a history-free header over the same
     * storage, so output -> grad_fn -> saved -> output is not a reference
     * cycle (which would leak every graph that is never backpropagated). */
    Tensor *d = t->grad_fn == n ? tensor_detach(t) : NULL;
    n->saved[k] = d ? d : tensor_retain(t);
    n->saved_version[k] = t->storage->version;
}

AGNode *ag_record_view(const char *name, AGBackwardFn fn, Tensor *out, Tensor *t) {
    AGNode *n = ag_record(name, fn, out, &t, 1);
    if (n && t->grad_fn) {
        n->view_base = true;
        n->view_version = t->storage->version;
    }
    return n;
}

Tensor *ag_saved(AGNode *n, int k) {
    Tensor *t = n->saved[k];
    if (t && t->numel > 0 && !t->storage->data)
        return accel_fail("backward of %s: a tensor it saved (shape %s) has no memory: it is a parameter whose sharding "
                          "engine released it (stage 3) outside its wrap unit", n->name, tensor_shape_str(t));
    if (t && t->storage->version != n->saved_version[k])
        return accel_fail("backward of %s: a tensor it saved (shape %s) was modified by an in-place operation after it was "
                          "used; clone it before modifying in place", n->name, tensor_shape_str(t));
    return t;
}

/* ---- reducing gradients to input shapes ---- */

Tensor *ag_sum_to(Tensor *g, const int64_t *shape, int ndim) {
    if (g->ndim == ndim && memcmp(g->shape, shape, sizeof(int64_t) * (size_t)ndim) == 0) return tensor_retain(g);
    int dims[TENSOR_MAX_DIMS], nd = 0;
    int lead = g->ndim - ndim;
    for (int d = 0; d < g->ndim; d++)
        if (d < lead || (shape[d - lead] == 1 && g->shape[d] != 1)) dims[nd++] = d;
    Tensor *s = nd ? op_reduce(KR_SUM, g, dims, nd, true) : tensor_retain(g);
    if (!s) return NULL;
    Tensor *r = tensor_reshape(s, shape, ndim);
    tensor_release(s);
    return r;
}

/* Input k's gradient g, summed to the input's shape and cast to its dtype;
 * on another device than the input (a custom Function's backward): an
 * error, as in PyTorch. */
static Tensor *fit_grad(Tensor *g, const AGEdge *e, const AGNode *n, int k) {
    if (!device_same(g->device, e->device)) {
        char want[32], got[32];
        return accel_fail("backward: %s returned an invalid gradient for input %d: expected device %s but got %s",
                          n->name, k + 1, device_str(e->device, want, sizeof want), device_str(g->device, got, sizeof got));
    }
    Tensor *s = ag_sum_to(g, e->shape, e->ndim);
    if (!s || s->dtype == e->dtype) return s;
    Tensor *c = tensor_to_dtype(s, e->dtype);
    tensor_release(s);
    return c;
}

/* acc = acc + g (acc may be NULL: takes g). */
bool ag_sole_owner(const Tensor *t) {
    return t->refcount == 1 && t->storage->refcount == 1 && !t->is_view && !t->grad_fn && tensor_is_contiguous(t);
}

static int accumulate(Tensor **acc, Tensor *g) {
    if (!*acc) {
        *acc = tensor_retain(g);
        return 0;
    }
    Tensor *a = *acc; /* held by nothing else: add in place */
    if (ag_sole_owner(a) && a->dtype == g->dtype && tensor_same_shape(a, g))
        return op_binary_(KB_ADD, a, g);
    Tensor *sum = op_binary(KB_ADD, *acc, g);
    if (!sum) return -1;
    tensor_release(*acc);
    *acc = sum;
    return 0;
}

/* Leaves: .grad is a fresh tensor the first time (never aliasing another
 * tensor's storage), then accumulated in place. */
static int accumulate_leaf(Tensor *leaf, Tensor *g) {
    if (leaf->grad) {
        if (op_binary_(KB_ADD, leaf->grad, g) < 0) return -1;
    } else {
        Tensor *c = ag_sole_owner(g) ? tensor_retain(g) : tensor_clone(g);
        if (!c) return -1;
        leaf->grad = c;
    }
    return 0;
}

/* ---- autograd.grad's capture ---- */

/* While ag_grad passes run (nested ones stack): the tensors whose gradients
 * each wants and their sums so far. An exclusive capture (autograd.grad)
 * keeps every other leaf's gradient from its .grad; one that is not (the
 * recompute of activation checkpointing inside a pass) lets the others go
 * on to the capture around it, or to .grad. */
typedef struct Capture {
    Tensor **inputs, **grads;
    int n;
    bool exclusive;
    struct Capture *outer;
} Capture;
static Capture *capture;

/* g (may be NULL) reached the leaf: 1 taken by a capture (or dropped by an
 * exclusive one), 0 for the usual path, -1 on error */
static int capture_leaf(const Tensor *leaf, Tensor *g) {
    for (Capture *c = capture; c; c = c->outer) {
        for (int i = 0; i < c->n; i++)
            if (c->inputs[i] == leaf) return g && accumulate(&c->grads[i], g) < 0 ? -1 : 1;
        if (c->exclusive) return 1;
    }
    return 0;
}

/* g reached the output of node: into the sum of every captured input it made */
static int capture_node(const AGNode *node, Tensor *g) {
    for (Capture *c = capture; c; c = c->outer)
        for (int i = 0; i < c->n; i++)
            if (c->inputs[i]->grad_fn == node && accumulate(&c->grads[i], g) < 0) return -1;
    return 0;
}

int ag_grad(Tensor **roots, Tensor **grads, int n, Tensor **inputs, int n_in, Tensor **out, bool exclusive) {
    for (int i = 0; i < n_in; i++) out[i] = NULL;
    Capture c = {inputs, out, n_in, exclusive, capture};
    capture = &c;
    int rc = ag_backward_many(roots, grads, n);
    capture = c.outer;
    for (int i = 0; rc < 0 && i < n_in; i++) tensor_release(out[i]), out[i] = NULL;
    return rc;
}

/* ---- leaf hooks ---- */

/* Leaves whose edges are counted: those with a grad_hook or tensor hooks. */
static bool leaf_counted(const Tensor *leaf) { return leaf->grad_hook || leaf->hooks; }

/* count_deps: one more edge of this pass leads to the leaf. */
static void leaf_count(Tensor *leaf) {
    if (!leaf_counted(leaf)) return;
    if (leaf->ag_pass != backward_pass) {
        leaf->ag_pass = backward_pass;
        leaf->ag_pending = 0;
        leaf->ag_got = false;
        tensor_release(leaf->ag_sum); /* left by a pass that failed */
        leaf->ag_sum = NULL;
    }
    leaf->ag_pending++;
}

/* A gradient for the leaf: into .grad, or, when it has tensor hooks, into
 * the pass's sum that they will see complete (as torch's AccumulateGrad). */
static int leaf_receive(Tensor *leaf, Tensor *g) {
    if (leaf->hooks && leaf->ag_pass == backward_pass) return accumulate(&leaf->ag_sum, g);
    return accumulate_leaf(leaf, g);
}

/* A leaf's complete gradient of a pass (g: a reference it takes over, may
 * be NULL): through its tensor hooks into .grad, then its post-accumulate
 * hooks and its grad_hook. */
static int leaf_finish(Tensor *leaf, Tensor *g) {
    bool got = g != NULL;
    int rc = got && leaf->hooks ? run_hooks(leaf->hooks, &g) : 0;
    if (rc == 0 && got) rc = accumulate_leaf(leaf, g);
    tensor_release(g);
    if (rc == 0 && got && leaf->hooks) rc = run_hooks_of(leaf->hooks, AG_HOOK_POST, &leaf);
    if (rc == 0 && leaf->grad_hook) leaf->grad_hook(leaf, leaf->grad_hook_ud);
    return rc;
}

/* An edge to the leaf is settled (got: it brought a gradient); after the
 * last one, if anything arrived, leaf_finish. */
static int leaf_settle(Tensor *leaf, bool got) {
    if (!leaf_counted(leaf) || leaf->ag_pass != backward_pass) return 0;
    leaf->ag_got = leaf->ag_got || got;
    if (--leaf->ag_pending > 0 || !leaf->ag_got) return 0;
    Tensor *sum = leaf->ag_sum;
    leaf->ag_sum = NULL;
    return sum || !leaf->hooks ? leaf_finish(leaf, sum) : 0;
}

/* ---- the engine ---- */

/* A growable node list that starts in its own inline array. */
typedef struct {
    AGNode **v;
    int n, cap;
    AGNode *inline_v[32];
} NodeList;

static void list_init(NodeList *l) {
    l->v = l->inline_v;
    l->n = 0;
    l->cap = 32;
}

static void list_free(NodeList *l) {
    if (l->v != l->inline_v) free(l->v);
}

static int list_push(NodeList *l, AGNode *n) {
    if (l->n == l->cap) {
        int cap = l->cap * 2;
        AGNode **v = malloc(sizeof *v * (size_t)cap);
        if (!v) return accel_fail_int("backward: out of memory");
        memcpy(v, l->v, sizeof *v * (size_t)l->n);
        list_free(l);
        l->v = v, l->cap = cap;
    }
    l->v[l->n++] = n;
    return 0;
}

/* A node marked (stack_next == itself) by a pass further out: a nested
 * backward must not count or run it (the outer pass owns its scratch). */
static int check_not_outer(const AGNode *p) {
    if (p->stack_next == p && p->depth != pass_depth)
        return accel_fail_int("backward inside a backward (a custom Function's backward, or checkpoint's recompute) "
                              "reached %s, a node of the graph the outer backward is running through: pass the tensors "
                              "that require grad to the function as arguments instead of capturing them", p->name);
    return 0;
}

/* Mark p visited by this pass; its count starts at 0. */
static int visit(AGNode *p, NodeList *stack, NodeList *all) {
    p->stack_next = p;
    p->depth = pass_depth;
    p->deps = 0;
    return list_push(stack, p) < 0 || list_push(all, p) < 0 ? -1 : 0;
}

/* Count, for every node reachable from root, how many edges point to it. */
static int count_deps(AGNode *root, NodeList *all) {
    NodeList stack;
    list_init(&stack);
    int rc = check_not_outer(root);
    if (rc == 0) rc = visit(root, &stack, all); /* visited marker: a node points to itself while being counted */
    while (rc == 0 && stack.n) {
        AGNode *n = stack.v[--stack.n];
        for (int k = 0; rc == 0 && k < n->n_in; k++) {
            AGNode *p = n->edges[k].fn;
            if (n->edges[k].leaf) leaf_count(n->edges[k].leaf);
            if (!p) continue;
            rc = check_not_outer(p);
            if (rc < 0) break; /* an outer node's count is not ours to touch */
            if (p->stack_next != p) rc = visit(p, &stack, all);
            p->deps++;
        }
    }
    list_free(&stack);
    return rc;
}

/* The node's backward (into gin), or its backward_acc (into *acc), timed by
 * the profiler as one "<name>Backward" event when it is on. */
static int timed_backward(AGNode *n, Tensor *gout, Tensor **gin, Tensor **acc) {
    PROF_SCOPE(n->name, PROF_BACKWARD, gout, NULL);
    return acc ? n->backward_acc(n, gout, acc) : n->backward(n, gout, gin);
}

static int run_node(AGNode *n, NodeList *ready) {
    if (n->released)
        return accel_fail_int("backward through %s a second time: the tensors it saved were freed after the first "
                              "backward (call backward once per forward, or pass retain_graph = true to the first: "
                              "t:backward(nil, true))", n->name);
    if (n->unsaved)
        return accel_fail_int("backward through %s, which was recorded inside activation checkpointing's forward and "
                              "keeps no tensors for backward: backpropagate through the checkpoint's outputs only",
                              n->name);
    if (n->view_stale)
        return accel_fail_int("backward of %s: this view was used after the tensor it views was modified by an "
                              "in-place operation, which changed that tensor's history but not the view's; take the view "
                              "after the in-place operation", n->name);
    Tensor *gin_stack[8];
    Tensor **gin = n->n_in <= 8 ? gin_stack : calloc((size_t)n->n_in, sizeof *gin);
    if (!gin) return accel_fail_int("backward: out of memory");
    memset(gin, 0, sizeof *gin * (size_t)n->n_in);
    Tensor *gout = n->grad_acc;
    n->grad_acc = NULL;
    if (gout && ((n->hooks && run_hooks(n->hooks, &gout) < 0) || (capture && capture_node(n, gout) < 0))) {
        tensor_release(gout);
        if (gin != gin_stack) free(gin);
        return -1;
    }
    if (n->backward_acc && n->n_in == 1 && n->edges[0].fn) { /* adds into the producer's gradient itself */
        AGNode *p = n->edges[0].fn;
        int rc = gout ? timed_backward(n, gout, NULL, &p->grad_acc) : 0;
        tensor_release(gout);
        if (rc == 0 && --p->deps == 0) rc = list_push(ready, p);
        if (gin != gin_stack) free(gin);
        release_after_run(n);
        return rc;
    }
    int rc = gout ? timed_backward(n, gout, gin, NULL) : 0; /* no gradient reached it: none for its inputs */
    tensor_release(gout);
    for (int k = 0; rc == 0 && k < n->n_in; k++) {
        AGEdge *e = &n->edges[k];
        if (!e->fn && !e->leaf) continue;
        Tensor *g = gin[k] ? fit_grad(gin[k], e, n, k) : NULL;
        if (gin[k] && !g) rc = -1;
        tensor_release(gin[k]); /* g owns it now: a sole owner can be adopted or added into */
        gin[k] = NULL;
        if (rc < 0) break;
        if (e->fn) {
            if (g) rc = accumulate(&e->fn->grad_acc, g);
            if (rc == 0 && --e->fn->deps == 0) rc = list_push(ready, e->fn);
        } else {
            int taken = capture ? capture_leaf(e->leaf, g) : 0;
            if (taken < 0) rc = -1;
            if (!taken && g) rc = leaf_receive(e->leaf, g);
            if (!taken && rc == 0) rc = leaf_settle(e->leaf, g != NULL);
        }
        tensor_release(g);
    }
    for (int k = 0; k < n->n_in; k++) tensor_release(gin[k]);
    if (gin != gin_stack) free(gin);
    release_after_run(n);
    return rc;
}

/* Grad mode off; an outermost pass gets a new number, a nested one runs as
 * part of the pass around it (its leaf hooks count with the outer ones, and
 * DDP sees one pass). end_pass restores what begin_pass returned. */
typedef struct {
    uint32_t outer;
    bool grad_mode;
} PassScope;

static PassScope begin_pass(void) {
    PassScope sc = {backward_pass, ag_set_grad_enabled(false)};
    if (!sc.outer) {
        if (++pass_counter == 0) pass_counter = 1; /* 0 means none */
        backward_pass = pass_counter;
    }
    pass_depth++;
    return sc;
}

static void end_pass(PassScope sc) {
    pass_depth--;
    ag_set_grad_enabled(sc.grad_mode);
    backward_pass = sc.outer;
}

/* The root requires grad and its gradient (when given) has its shape; k:
 * the root's position among several (-1: the only one). */
static int check_root(const Tensor *root, const Tensor *grad, int k) {
    char what[32] = "the tensor";
    if (k >= 0) snprintf(what, sizeof what, "tensor %d", k + 1);
    if (!root->requires_grad)
        return accel_fail_int("backward: %s (shape %s) does not require grad and has no grad_fn", what,
                              tensor_shape_str(root));
    if (grad && !tensor_same_shape(grad, root))
        return accel_fail_int("backward: gradient shape %s does not match %s's shape %s", tensor_shape_str(grad), what,
                              tensor_shape_str(root));
    if (grad && !device_same(grad->device, root->device)) {
        char want[32], got[32];
        return accel_fail_int("backward: the gradient is on %s but %s is on %s", device_str(grad->device, got, sizeof got),
                              what, device_str(root->device, want, sizeof want));
    }
    return 0;
}

static int backward_from(Tensor *root, Tensor *grad);

int ag_backward(Tensor *root, Tensor *grad) {
    bool outermost = backward_pass == 0;
    int rc = backward_from(root, grad);
    return outermost ? run_pass_end(rc) : rc;
}

static int backward_from(Tensor *root, Tensor *grad) {
    if (check_root(root, grad, -1) < 0) return -1;
    Tensor *g;
    if (grad) {
        g = tensor_reshape(grad, root->shape, root->ndim);
    } else {
        if (root->numel != 1)
            return accel_fail_int("backward: grad can be implicitly created only for scalar outputs; this tensor has "
                                  "shape %s (pass a gradient: t:backward(grad))", tensor_shape_str(root));
        g = tensor_full(root->shape, root->ndim, 1.0, root->dtype, root->device);
    }
    if (!g) return -1;
    if (!root->grad_fn) {
        PassScope outer = begin_pass();
        int rc = capture ? capture_leaf(root, g) : 0;
        if (rc == 0) rc = leaf_finish(root, g);
        else tensor_release(g), rc = rc < 0 ? -1 : 0;
        end_pass(outer);
        return rc;
    }
    PassScope outer = begin_pass();
    int rc = 0;
    AGNode *top = ag_node_retain(root->grad_fn);
    NodeList all, ready;
    list_init(&all);
    list_init(&ready);
    rc = count_deps(top, &all);
    if (rc == 0) {
        top->grad_acc = g;
        g = NULL;
        rc = list_push(&ready, top);
    }
    while (rc == 0 && ready.n) rc = run_node(ready.v[--ready.n], &ready);
    for (int i = 0; i < all.n; i++) { /* clear scratch, also after an error */
        all.v[i]->stack_next = NULL;
        tensor_release(all.v[i]->grad_acc);
        all.v[i]->grad_acc = NULL;
    }
    tensor_release(g);
    list_free(&all);
    list_free(&ready);
    ag_node_release(top);
    end_pass(outer);
    return rc;
}

/* ---- several roots ---- */

/* The gradients of the roots, given by the caller (the node's ctx). */
static int bw_roots(AGNode *n, Tensor *gout, Tensor **gin) {
    Tensor **grads = n->ctx;
    (void)gout;
    for (int k = 0; k < n->n_in; k++) gin[k] = tensor_retain(grads[k]);
    return 0;
}

int ag_backward_many(Tensor **roots, Tensor **grads, int n) {
    for (int k = 0; k < n; k++) {
        if (!grads[k]) return accel_fail_int("backward: no gradient given for tensor %d", k + 1);
        if (check_root(roots[k], grads[k], k) < 0) return -1;
    }
    if (n <= 1) return n ? ag_backward(roots[0], grads[0]) : 0;
    /* one scalar node above the roots, handing each its gradient */
    Tensor *top = tensor_empty(NULL, 0, DT_F32, (Device){DEV_CPU, 0});
    if (!top) return -1;
    bool prev = ag_set_grad_enabled(true), prev_keep = ag_set_keep_saved(true), prev_inf = ag_set_inference_mode(false);
    AGNode *node = ag_record("backward", bw_roots, top, roots, n);
    ag_set_grad_enabled(prev), ag_set_keep_saved(prev_keep), ag_set_inference_mode(prev_inf);
    int rc = node ? 0 : accel_fail_int("backward: out of memory");
    if (node) { /* grads outlive the node: it goes with top */
        node->ctx = grads;
        rc = ag_backward(top, NULL);
    }
    tensor_release(top);
    return rc;
}
