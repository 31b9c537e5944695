/* A NirObj tree from a line-based text, so tests and the fuzz target can describe .nir files without
 * HDF5. One dataset per line, groups implied by the '/'-separated path:
 *     PATH s DIMS TOKEN...     strings (tokens separated by blanks)
 *     PATH f DIMS NUMBER...    floats;  PATH i DIMS NUMBER...  integers
 * DIMS is '-' for a scalar or dimensions joined by 'x' ("2x3"); '#' starts a comment line. */
#include "nir/nir.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_LINE_ITEMS = 1 << 16 };

static bool
fail(char *err, size_t errlen, int line, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(err, errlen, "line %d: %s", line, msg);
    return false;
}

static char *
dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* the member of group called name (created as kind if absent); NULL when out of memory or when
 * it exists with another kind */
static NirObj *
member(NirObj *group, const char *name, size_t len, NirObjKind kind)
{
    for (int i = 0; i < group->nkids; i++)
        if (strlen(group->kids[i].name) == len && memcmp(group->kids[i].name, name, len) == 0)
            return group->kids[i].kind == kind && kind == NIR_GROUP ? &group->kids[i] : NULL;
    if (group->nkids >= NIR_MAX_NODES) return NULL;
    NirObj *kids = realloc(group->kids, (size_t)(group->nkids + 1) * sizeof *kids);
    if (!kids) return NULL;
    group->kids = kids;
    NirObj *o = &kids[group->nkids];
    memset(o, 0, sizeof *o);
    if (!(o->name = dup_n(name, len))) return NULL;
    o->kind = kind;
    group->nkids++;
    return o;
}

static const char *
skip_blanks(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

static const char *
token_end(const char *p, const char *end)
{
    while (p < end && *p != ' ' && *p != '\t' && *p != '\r')
        p++;
    return p;
}

static bool
parse_line(NirObj *root, const char *p, const char *end, int line, char *err, size_t errlen)
{
    p = skip_blanks(p, end);
    if (p == end || *p == '#') return true;
    const char *path_end = token_end(p, end);
    /* walk the groups of the path; its last component is the dataset */
    NirObj *group = root;
    const char *c = p;
    for (;;) {
        const char *slash = memchr(c, '/', (size_t)(path_end - c));
        if (!slash) break;
        if (slash == c) return fail(err, errlen, line, "an empty path component");
        group = member(group, c, (size_t)(slash - c), NIR_GROUP);
        if (!group) return fail(err, errlen, line, "a path through a dataset (or out of memory)");
        c = slash + 1;
    }
    if (c == path_end) return fail(err, errlen, line, "no dataset name");
    const char *q = skip_blanks(path_end, end);
    const char *kind_end = token_end(q, end);
    if (kind_end - q != 1 || !strchr("sfi", *q))
        return fail(err, errlen, line, "expected a kind s, f or i after the path");
    char kind = *q;
    q = skip_blanks(kind_end, end);
    const char *dims_end = token_end(q, end);
    if (q == dims_end) return fail(err, errlen, line, "expected dimensions ('-' for a scalar)");
    int rank = 0;
    int64_t dims[NIR_MAX_RANK], numel = 1;
    if (!(dims_end - q == 1 && *q == '-')) {
        char buf[128]; /* the text is not NUL-terminated: parse a copy */
        if (dims_end - q >= (ptrdiff_t)sizeof buf) return fail(err, errlen, line, "bad dimensions");
        memcpy(buf, q, (size_t)(dims_end - q));
        buf[dims_end - q] = 0;
        const char *d = buf;
        while (*d) {
            char *e;
            errno = 0;
            long long v = strtoll(d, &e, 10);
            if (e == d || errno || v < 0 || v > MAX_LINE_ITEMS || rank == NIR_MAX_RANK)
                return fail(err, errlen, line, "bad dimensions");
            dims[rank++] = v;
            numel *= v;
            if (numel > MAX_LINE_ITEMS) return fail(err, errlen, line, "too many elements");
            d = e;
            if (*d && *d != 'x') return fail(err, errlen, line, "bad dimensions");
            if (*d) d++;
        }
    }
    NirObj *o = member(group, c, (size_t)(path_end - c), kind == 's' ? NIR_STRINGS : NIR_NUMBERS);
    if (!o) return fail(err, errlen, line, "'%.*s' given twice", (int)(path_end - c), c);
    o->rank = rank;
    memcpy(o->dims, dims, sizeof(int64_t) * (size_t)rank);
    o->numel = numel;
    o->is_int = kind == 'i';
    if (kind == 's')
        o->str = calloc((size_t)numel + 1, sizeof *o->str);
    else
        o->num = calloc((size_t)numel + 1, sizeof *o->num);
    if (!o->str && !o->num) return fail(err, errlen, line, "out of memory");
    q = dims_end;
    for (int64_t i = 0; i < numel; i++) {
        q = skip_blanks(q, end);
        const char *t = token_end(q, end);
        if (q == t) return fail(err, errlen, line, "%lld values expected, %lld given",
                                (long long)numel, (long long)i);
        if (kind == 's') {
            if (!(o->str[i] = dup_n(q, (size_t)(t - q)))) return fail(err, errlen, line, "out of memory");
        } else {
            char buf[64];
            if (t - q >= (ptrdiff_t)sizeof buf) return fail(err, errlen, line, "a number too long");
            memcpy(buf, q, (size_t)(t - q));
            buf[t - q] = 0;
            char *e;
            o->num[i] = strtod(buf, &e);
            if (*e) return fail(err, errlen, line, "'%s' is not a number", buf);
        }
        q = t;
    }
    if (skip_blanks(q, end) != end) return fail(err, errlen, line, "more values than dimensions");
    return true;
}

bool
nir_tree_parse(const char *text, size_t len, NirObj *root, char *err, size_t errlen)
{
    memset(root, 0, sizeof *root);
    root->kind = NIR_GROUP;
    if (!(root->name = dup_n("", 0))) return fail(err, errlen, 0, "out of memory");
    const char *p = text, *end = text + len;
    int line = 1;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if (memchr(p, 0, (size_t)(le - p))) {
            nir_obj_free(root);
            return fail(err, errlen, line, "a NUL byte");
        }
        if (!parse_line(root, p, le, line, err, errlen)) {
            nir_obj_free(root);
            return false;
        }
        p = nl ? nl + 1 : end;
        line++;
    }
    return true;
}
