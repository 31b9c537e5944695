/* A .nir file's tree → one flat graph of NIR nodes. Nested graphs are inlined with dotted names;
 * their Input and Output nodes stay as pass-through nodes so edges into and out of a nested graph
 * need no rewriting. Every structural problem is an error naming the graph, node or edge. */
#include "nir/nir.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {
#define X(k, s) s,
    NIR_KINDS(X)
#undef X
};

const char *
nir_kind_name(NirKind k)
{
    return k >= 0 && k < NK_COUNT ? kind_names[k] : "?";
}

void
nir_obj_free(NirObj *o)
{
    if (!o) return;
    free(o->name);
    for (int i = 0; i < o->nkids; i++)
        nir_obj_free(&o->kids[i]);
    free(o->kids);
    free(o->num);
    if (o->str)
        for (int64_t i = 0; i < o->numel; i++)
            free(o->str[i]);
    free(o->str);
    memset(o, 0, sizeof *o);
}

const NirObj *
nir_obj_find(const NirObj *group, const char *name)
{
    if (!group || group->kind != NIR_GROUP) return NULL;
    for (int i = 0; i < group->nkids; i++)
        if (strcmp(group->kids[i].name, name) == 0) return &group->kids[i];
    return NULL;
}

/* a nested graph: where its pass-through Input and Output nodes are */
typedef struct Sub {
    char *name;
    int input, output;   /* node indices; -1 none; -2 several */
} Sub;

typedef struct Edges {
    const NirObj *edges; /* the strings dataset */
    char *prefix;        /* "" or "sub." */
    char *graph;         /* for messages: "graph 'sub'" or "the top graph" */
} Edges;

typedef struct Builder {
    const char *path;
    char *err;
    size_t errlen;
    NirGraph *g;
    int cap;
    Sub *subs;
    int nsubs, capsubs;
    Edges *edges;
    int nedges, capedges;
} Builder;

static bool
fail(Builder *b, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rt_io_error(b->err, b->errlen, b->path, "%s", msg);
    return false;
}

static char *
join(const char *prefix, const char *name)
{
    size_t a = strlen(prefix), n = strlen(name);
    char *s = malloc(a + n + 1);
    if (!s) return NULL;
    memcpy(s, prefix, a);
    memcpy(s + a, name, n + 1);
    return s;
}

/* the string of a scalar (or one-element) string dataset, or NULL */
static const char *
string_field(const NirObj *group, const char *name)
{
    const NirObj *o = nir_obj_find(group, name);
    if (!o || o->kind != NIR_STRINGS || o->numel != 1) return NULL;
    return o->str[0];
}

static bool
grow(void **p, int *cap, int need, size_t size)
{
    if (need <= *cap) return true;
    int n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, (size_t)n * size);
    if (!q) return false;
    *p = q;
    *cap = n;
    return true;
}

static bool
add_graph(Builder *b, const NirObj *group, const char *prefix, const char *gname, int depth)
{
    if (depth > NIR_MAX_DEPTH)
        return fail(b, "graph '%s': nested more than %d graphs deep", gname, NIR_MAX_DEPTH);
    const NirObj *nodes = nir_obj_find(group, "nodes");
    if (!nodes || nodes->kind != NIR_GROUP)
        return fail(b, "%s%s%s: field 'nodes' is missing or not a group", depth ? "graph '" : "",
                    depth ? gname : "the top graph", depth ? "'" : "");
    int sub = -1;
    if (depth > 0) {
        if (!grow((void **)&b->subs, &b->capsubs, b->nsubs + 1, sizeof *b->subs))
            return fail(b, "out of memory");
        sub = b->nsubs++;
        b->subs[sub] = (Sub){join("", gname), -1, -1};
        if (!b->subs[sub].name) return fail(b, "out of memory");
    }
    for (int i = 0; i < nodes->nkids; i++) {
        const NirObj *kid = &nodes->kids[i];
        char *full = join(prefix, kid->name);
        if (!full) return fail(b, "out of memory");
        if (kid->kind != NIR_GROUP) {
            fail(b, "node '%s': not a group (a node is a group with a 'type' field)", full);
            free(full);
            return false;
        }
        const char *type = string_field(kid, "type");
        if (!type) {
            fail(b, "node '%s': field 'type' is missing or not a string", full);
            free(full);
            return false;
        }
        if (strcmp(type, "NIRGraph") == 0) {
            char *pre = join(full, ".");
            bool ok = pre && add_graph(b, kid, pre, full, depth + 1);
            if (!pre) fail(b, "out of memory");
            free(pre);
            free(full);
            if (!ok) return false;
            continue;
        }
        int k = 0;
        while (k < NK_COUNT && strcmp(kind_names[k], type) != 0)
            k++;
        if (k == NK_COUNT) {
            fail(b, "node '%s': unknown type '%s' (NIR 1.0 defines Input, Output, Affine, Linear, "
                    "Scale, Conv1d, Conv2d, SumPool2d, AvgPool2d, Flatten, Delay, Threshold, I, IF, "
                    "LI, LIF, CubaLI, CubaLIF and NIRGraph)", full, type);
            free(full);
            return false;
        }
        if (b->g->nnodes >= NIR_MAX_NODES) {
            free(full);
            return fail(b, "more than %d nodes", NIR_MAX_NODES);
        }
        if (!grow((void **)&b->g->nodes, &b->cap, b->g->nnodes + 1, sizeof *b->g->nodes)) {
            free(full);
            return fail(b, "out of memory");
        }
        int id = b->g->nnodes++;
        b->g->nodes[id] = (NirNode){.name = full, .kind = (NirKind)k, .group = kid,
                                    .is_top = depth == 0 && (k == NK_INPUT || k == NK_OUTPUT)};
        if (sub >= 0 && k == NK_INPUT) b->subs[sub].input = b->subs[sub].input == -1 ? id : -2;
        if (sub >= 0 && k == NK_OUTPUT) b->subs[sub].output = b->subs[sub].output == -1 ? id : -2;
    }
    const NirObj *edges = nir_obj_find(group, "edges");
    if (edges) {
        bool is_empty = edges->numel == 0;
        if (edges->kind == NIR_NUMBERS && is_empty) return true; /* an empty list written as numbers */
        if (edges->kind != NIR_STRINGS || (!is_empty && (edges->rank != 2 || edges->dims[1] != 2)))
            return fail(b, "%s%s%s: field 'edges' must be pairs of node names (strings [E, 2])",
                        depth ? "graph '" : "", depth ? gname : "the top graph", depth ? "'" : "");
        if (!grow((void **)&b->edges, &b->capedges, b->nedges + 1, sizeof *b->edges))
            return fail(b, "out of memory");
        char what[600];
        snprintf(what, sizeof what, depth ? "graph '%s'" : "the top graph", gname);
        Edges *e = &b->edges[b->nedges++];
        *e = (Edges){edges, join("", prefix), join("", what)};
        if (!e->prefix || !e->graph) return fail(b, "out of memory");
    }
    return true;
}

static int
find_node(const NirGraph *g, const char *name)
{
    for (int i = 0; i < g->nnodes; i++)
        if (strcmp(g->nodes[i].name, name) == 0) return i;
    return -1;
}

/* an edge end: a node, or a nested graph (its Output as a source, its Input as a destination) */
static bool
resolve(Builder *b, const Edges *e, int64_t i, int end, int *out)
{
    const char *name = e->edges->str[2 * i + end];
    char *full = join(e->prefix, name);
    if (!full) return fail(b, "out of memory");
    *out = find_node(b->g, full);
    if (*out < 0)
        for (int s = 0; s < b->nsubs; s++) {
            if (strcmp(b->subs[s].name, full) != 0) continue;
            int id = end == 0 ? b->subs[s].output : b->subs[s].input;
            const char *what = end == 0 ? "Output" : "Input";
            if (id < 0) {
                fail(b, "%s: edge %lld ('%s' -> '%s'): graph '%s' has %s %s node", e->graph,
                     (long long)i, e->edges->str[2 * i], e->edges->str[2 * i + 1], full,
                     id == -1 ? "no" : "more than one", what);
                free(full);
                return false;
            }
            *out = id;
        }
    if (*out < 0) {
        fail(b, "%s: edge %lld ('%s' -> '%s'): no node named '%s'", e->graph, (long long)i,
             e->edges->str[2 * i], e->edges->str[2 * i + 1], full);
        free(full);
        return false;
    }
    free(full);
    return true;
}

static bool
build(Builder *b, const NirObj *root)
{
    const NirObj *version = nir_obj_find(root, "version");
    const char *v = version && version->kind == NIR_STRINGS && version->numel == 1
                        ? version->str[0] : "";
    if (!(b->g->version = join("", v))) return fail(b, "out of memory");
    const NirObj *top = nir_obj_find(root, "node");
    if (!top || top->kind != NIR_GROUP)
        return fail(b, "no group 'node' (the top graph of a file written by nir.write)");
    const char *type = string_field(top, "type");
    if (!type || strcmp(type, "NIRGraph") != 0)
        return fail(b, "the top node is %s%s%s, not a NIRGraph", type ? "a '" : "untyped",
                    type ? type : "", type ? "'" : "");
    if (!add_graph(b, top, "", "", 0)) return false;
    for (int k = 0; k < b->nedges; k++) {
        const Edges *e = &b->edges[k];
        for (int64_t i = 0; i < e->edges->numel / 2; i++) {
            int src, dst;
            if (!resolve(b, e, i, 0, &src) || !resolve(b, e, i, 1, &dst)) return false;
            NirNode *d = &b->g->nodes[dst];
            if (b->g->nodes[src].kind == NK_OUTPUT && b->g->nodes[src].is_top)
                return fail(b, "%s: edge %lld: '%s' is an output of the model; nothing may read it",
                            e->graph, (long long)i, b->g->nodes[src].name);
            if (d->kind == NK_INPUT && d->is_top)
                return fail(b, "%s: edge %lld: '%s' is an input of the model; nothing may write it",
                            e->graph, (long long)i, d->name);
            for (int j = 0; j < d->nin; j++)
                if (d->in[j] == src)
                    return fail(b, "%s: edge %lld ('%s' -> '%s') is given twice", e->graph,
                                (long long)i, b->g->nodes[src].name, d->name);
            int *in = realloc(d->in, (size_t)(d->nin + 1) * sizeof *in);
            if (!in) return fail(b, "out of memory");
            d->in = in;
            d->in[d->nin++] = src;
        }
    }
    int ninputs = 0, noutputs = 0;
    for (int i = 0; i < b->g->nnodes; i++) {
        ninputs += b->g->nodes[i].is_top && b->g->nodes[i].kind == NK_INPUT;
        noutputs += b->g->nodes[i].is_top && b->g->nodes[i].kind == NK_OUTPUT;
    }
    if (ninputs == 0) return fail(b, "the top graph has no Input node");
    if (noutputs == 0) return fail(b, "the top graph has no Output node");
    for (int i = 0; i < b->g->nnodes; i++) {
        const NirNode *n = &b->g->nodes[i];
        if (n->nin == 0 && !(n->is_top && n->kind == NK_INPUT))
            return fail(b, "node '%s' (%s): no edge leads into it", n->name, nir_kind_name(n->kind));
    }
    return true;
}

bool
nir_graph_build(const NirObj *root, const char *path, NirGraph *g, char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    Builder b = {.path = path, .err = err, .errlen = errlen, .g = g};
    bool ok = build(&b, root);
    for (int i = 0; i < b.nsubs; i++)
        free(b.subs[i].name);
    free(b.subs);
    for (int i = 0; i < b.nedges; i++) {
        free(b.edges[i].prefix);
        free(b.edges[i].graph);
    }
    free(b.edges);
    if (!ok) nir_graph_free(g);
    return ok;
}

void
nir_graph_free(NirGraph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        free(g->nodes[i].name);
        free(g->nodes[i].in);
    }
    free(g->nodes);
    free(g->version);
    memset(g, 0, sizeof *g);
}
