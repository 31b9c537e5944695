/* Diagnostics for users ("file:line:col: error: message", the source line, a caret) and the one place
 * internal bugs die. Sources are remembered by name so any phase can quote the offending line.
 * Compiler-side only: the runtime library reports errors through return codes, never here. */
#include "ir/ir.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct Source {
    char *file;
    char *text; /* NULL: name only (interned) */
} Source;

static Source *sources;
static int nsources, capsources;
static int nerrors;
static FILE *stream;

static Source *
find_source(const char *file)
{
    for (int i = 0; i < nsources; i++)
        if (strcmp(sources[i].file, file) == 0)
            return &sources[i];
    return NULL;
}

static Source *
add_source(const char *file)
{
    Source *s = find_source(file);
    if (s)
        return s;
    if (nsources == capsources) {
        capsources = capsources ? 2 * capsources : 16;
        sources = realloc(sources, (size_t)capsources * sizeof *sources);
        if (!sources)
            die("out of memory");
    }
    s = &sources[nsources++];
    s->file = strdup(file);
    s->text = NULL;
    if (!s->file)
        die("out of memory");
    return s;
}

const char *
diag_intern(const char *file)
{
    return add_source(file)->file;
}

void
diag_add_source(const char *file, const char *text)
{
    Source *s = add_source(file);
    free(s->text);
    s->text = strdup(text);
    if (!s->text)
        die("out of memory");
}

void
diag_set_stream(FILE *f)
{
    stream = f;
}

void
diag_reset(void)
{
    for (int i = 0; i < nsources; i++) {
        free(sources[i].file);
        free(sources[i].text);
    }
    free(sources);
    sources = NULL;
    nsources = capsources = 0;
    nerrors = 0;
}

int
diag_error_count(void)
{
    return nerrors;
}

/* The length of the UTF-8 character at s (at most n bytes), or 0 if the bytes there are not
 * one (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF, cut short). */
static int
utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    int len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
              : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (!len || (size_t)len > n) return 0;
    for (int i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) || (c == 0xf0 && s[1] < 0x90) ||
        (c == 0xf4 && s[1] > 0x8f))
        return 0;
    return len;
}

/* One character of s (n bytes left) as printed (to f, unless f is NULL): itself, or an escape for
 * a control byte (\\n, \\t unless tabs are kept, \\x1b) or a byte that is not UTF-8 (\\xff), so
 * that nothing a file holds (a name, a source line) can move the cursor, ring the bell or fake a
 * line of output. Returns the bytes of s consumed; *width gets the columns printed. */
static size_t
put_char(FILE *f, const unsigned char *s, size_t n, bool keep_tabs, int *width)
{
    int len = utf8_len(s, n);
    if (len > 1 || (len == 1 && s[0] >= 0x20 && s[0] != 0x7f) || (keep_tabs && s[0] == '\t')) {
        if (f) fwrite(s, 1, (size_t)len, f);
        *width = 1;
        return (size_t)len;
    }
    char esc[8];
    if (s[0] == '\n' || s[0] == '\t' || s[0] == '\r')
        snprintf(esc, sizeof esc, "\\%c", s[0] == '\n' ? 'n' : s[0] == '\t' ? 't' : 'r');
    else
        snprintf(esc, sizeof esc, "\\x%02x", s[0]);
    if (f) fputs(esc, f);
    *width = (int)strlen(esc);
    return 1;
}

static void
put_escaped(FILE *f, const char *s)
{
    size_t n = strlen(s);
    int width;
    for (const unsigned char *p = (const unsigned char *)s; n > 0;) {
        size_t k = put_char(f, p, n, false, &width);
        p += k;
        n -= k;
    }
}

/* Print the source line of loc and a caret under its column (tabs kept so the caret lines up;
 * other control bytes and bytes that are not UTF-8 escaped, the caret moved past them). */
static void
quote_line(FILE *f, Loc loc)
{
    Source *s = loc.file ? find_source(loc.file) : NULL;
    if (!s || !s->text || loc.line <= 0)
        return;
    const char *p = s->text;
    for (int l = 1; l < loc.line && *p; p++)
        if (*p == '\n')
            l++;
    if (!*p && loc.line > 1)
        return;
    const char *end = p;
    while (*end && *end != '\n')
        end++;
    /* the line, then under it a caret at byte loc.col: each character before it a space as wide
     * as it was printed (a tab a tab) */
    int width;
    const unsigned char *q = (const unsigned char *)p, *stop = (const unsigned char *)end;
    const unsigned char *caret = q + (loc.col > 1 ? loc.col - 1 : 0);
    while (q < stop) {
        size_t k = put_char(f, q, (size_t)(stop - q), true, &width);
        q += k;
    }
    fputc('\n', f);
    q = (const unsigned char *)p;
    while (q < stop && q < caret) {
        size_t k = put_char(NULL, q, (size_t)(stop - q), true, &width);
        for (int i = 0; i < width; i++)
            fputc(*q == '\t' ? '\t' : ' ', f);
        q += k;
    }
    fputs("^\n", f);
}

static struct {
    const char *file, *origin_file; /* interned */
    DiagOriginFn fn;
    void *ctx;
} origin;

void
diag_set_origin(const char *file, const char *origin_file, DiagOriginFn fn, void *ctx)
{
    origin.file = fn ? diag_intern(file) : NULL;
    origin.origin_file = fn ? diag_intern(origin_file) : NULL;
    origin.fn = fn;
    origin.ctx = ctx;
}

static void
report(Loc loc, const char *kind, const char *fmt, va_list ap)
{
    FILE *f = stream ? stream : stderr;
    va_list copy;
    va_copy(copy, ap);
    int n = vsnprintf(NULL, 0, fmt, copy);
    va_end(copy);
    char *msg = xmalloc(n > 0 ? (size_t)n + 1 : 1);
    vsnprintf(msg, n > 0 ? (size_t)n + 1 : 1, fmt, ap);
    /* file names and messages quote what files hold: printed escaped */
    const char *what = loc.file && origin.fn && loc.line > 0 && strcmp(loc.file, origin.file) == 0
                           ? origin.fn(origin.ctx, loc.line)
                           : NULL;
    if (what) {
        put_escaped(f, origin.origin_file);
        fprintf(f, ": %s: ", kind);
        put_escaped(f, what);
        fputs(": ", f);
        put_escaped(f, msg);
        fputs("\n  in the model snnc generated from it (--emit=snn writes it), ", f);
        put_escaped(f, loc.file);
        fprintf(f, ":%d:%d:\n", loc.line, loc.col);
        free(msg);
        quote_line(f, loc);
        return;
    }
    if (loc.file) {
        put_escaped(f, loc.file);
        if (loc.line > 0) fprintf(f, ":%d:%d", loc.line, loc.col);
        fprintf(f, ": %s: ", kind);
    } else {
        fprintf(f, "snnc: %s: ", kind);
    }
    put_escaped(f, msg);
    fputc('\n', f);
    free(msg);
    quote_line(f, loc);
}

void
diag_error(Loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report(loc, "error", fmt, ap);
    va_end(ap);
    nerrors++;
}

void
diag_warning(Loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report(loc, "warning", fmt, ap);
    va_end(ap);
}

void
diag_note(Loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report(loc, "note", fmt, ap);
    va_end(ap);
}

void
diag_file_error(const char *file, const char *fmt, ...)
{
    Loc loc = {file ? diag_intern(file) : NULL, 0, 0};
    va_list ap;
    va_start(ap, fmt);
    report(loc, "error", fmt, ap);
    va_end(ap);
    nerrors++;
}

void
diag_reader_error(const char *path, const char *msg)
{
    if (path) {
        size_t len = strlen(path);
        if (strncmp(msg, path, len) == 0 && strncmp(msg + len, ": ", 2) == 0)
            msg += len + 2;
        diag_file_error(path, "%s", msg);
        return;
    }
    const char *sep = strstr(msg, ": ");
    if (sep && !memchr(msg, ' ', (size_t)(sep - msg))) {
        char file[512];
        snprintf(file, sizeof file, "%.*s", (int)(sep - msg), msg);
        diag_file_error(file, "%s", sep + 2);
    } else {
        diag_file_error(NULL, "%s", msg);
    }
}

_Noreturn void
die_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "snnc: internal error at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

void
diag_format(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- allocation for the compiler: out of memory is fatal (die), so no caller checks; the
 * runtime library (runtime/) never dies and does not use these ---- */

void *
xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) die("out of memory");
    return p;
}

void *
xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) die("out of memory");
    return p;
}

void *
xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) die("out of memory");
    return q;
}

char *
xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}
