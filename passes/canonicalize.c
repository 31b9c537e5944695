/* canonicalize.c: one spelling per computation, so that later passes and the lowering see fewer
 * cases. Uses are rewired; the nodes left without users are dce's to remove.
 *   scale(x, factor = 1, divisor = 1)   -> x           (the same values, bit for bit)
 *   flatten(flatten(x))                 -> flatten(x)
 *   flatten(x) where x is already flat  -> x           (a view of the same elements) */
#include "passes/pass.h"

/* the uses of v become uses of x; whether there were any */
static bool
forward(Module *m, ValueId v, ValueId x)
{
    bool is_used = false;
    for (ValueId u = 0; u < m->nnodes; u++)
        for (int a = 0; a < m->nodes[u].nargs; a++)
            is_used |= m->nodes[u].args[a] == v;
    module_replace_uses(m, v, x);
    return is_used;
}

/* one rewrite at node v, if one applies */
static bool
rewrite(Module *m, ValueId v)
{
    Node *n = &m->nodes[v];
    if (n->op == OP_SCALE && node_attr_f(n, "factor") == 1 && node_attr_f(n, "divisor") == 1) {
        return forward(m, v, n->args[0]);
    }
    if (n->op != OP_FLATTEN) return false;
    const Node *x = &m->nodes[n->args[0]];
    if (x->op == OP_FLATTEN) {
        n->args[0] = x->args[0];
        return true;
    }
    if (x->type.rank == 1) {
        return forward(m, v, n->args[0]);
    }
    return false;
}

bool
pass_canonicalize(Module *m, bool *changed)
{
    *changed = false;
    for (bool again = true; again;) { /* to a fixed point: one rewrite can enable another */
        again = false;
        for (ValueId v = 0; v < m->nnodes; v++)
            again |= rewrite(m, v);
        *changed |= again;
    }
    return !*changed || (ir_infer(m) && ir_verify(m));
}
