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

/* Print the source line of loc and a caret under its column (tabs kept so the caret lines up). */
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
    fprintf(f, "%.*s\n", (int)(end - p), p);
    for (int c = 1; c < loc.col && p + c - 1 < end; c++)
        fputc(p[c - 1] == '\t' ? '\t' : ' ', f);
    fputs("^\n", f);
}

static void
report(Loc loc, const char *kind, const char *fmt, va_list ap)
{
    FILE *f = stream ? stream : stderr;
    if (loc.file && loc.line > 0)
        fprintf(f, "%s:%d:%d: %s: ", loc.file, loc.line, loc.col, kind);
    else if (loc.file)
        fprintf(f, "%s: %s: ", loc.file, kind);
    else
        fprintf(f, "snnc: %s: ", kind);
    vfprintf(f, fmt, ap);
    fputc('\n', f);
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
