/* files.c: the files of one run (files.h). Identities come from stat, taken when files_check runs:
 * before anything is written, so every output that exists is still the file it was. */
#include "driver/files.h"

#include "ir/ir.h"
#include "runtime/tensor_io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct File {
    char *path;
    const char *role;
    bool is_output;
} File;

struct FileList {
    File *files;
    int nfiles, capfiles;
};

/* how a path is compared: an existing regular file by device and inode; a path that does not
 * exist by its directory's device and inode and its last component */
typedef enum { ID_NONE, ID_FILE, ID_NEW } IdKind;

typedef struct FileId {
    IdKind kind;
    dev_t dev;
    ino_t ino;
    const char *base; /* ID_NEW: points into the path */
} FileId;

FileList *
files_new(void)
{
    FileList *l = xcalloc(1, sizeof *l);
    return l;
}

void
files_free(FileList *l)
{
    if (!l) return;
    for (int i = 0; i < l->nfiles; i++)
        free(l->files[i].path);
    free(l->files);
    free(l);
}

static void
add(FileList *l, const char *path, const char *role, bool is_output)
{
    if (!path || !*path) return;
    if (l->nfiles == l->capfiles) {
        l->capfiles = l->capfiles ? 2 * l->capfiles : 16;
        l->files = xrealloc(l->files, (size_t)l->capfiles * sizeof *l->files);
    }
    char *copy = xstrdup(path);
    l->files[l->nfiles++] = (File){copy, role, is_output};
}

void
files_input(FileList *l, const char *path, const char *role)
{
    add(l, path, role, false);
}

void
files_output(FileList *l, const char *path, const char *role)
{
    add(l, path, role, true);
}

static FileId
file_id(const File *f)
{
    FileId id = {ID_NONE, 0, 0, NULL};
    if (f->is_output && rt_fd_path(f->path) >= 0) return id; /* a stream snnc holds */
    struct stat st;
    if (stat(f->path, &st) == 0) {
        if (S_ISREG(st.st_mode)) id = (FileId){ID_FILE, st.st_dev, st.st_ino, NULL};
        return id;
    }
    if (errno != ENOENT || !f->is_output) return id;
    struct stat lst;
    if (lstat(f->path, &lst) == 0) return id; /* a dangling link: its writer refuses it */
    const char *slash = strrchr(f->path, '/');
    const char *base = slash ? slash + 1 : f->path;
    if (!*base) return id;
    char dir[4096];
    if (!slash)
        strcpy(dir, ".");
    else if (snprintf(dir, sizeof dir, "%.*s", slash == f->path ? 1 : (int)(slash - f->path),
                      f->path) >= (int)sizeof dir)
        return id;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        id = (FileId){ID_NEW, st.st_dev, st.st_ino, base};
    return id;
}

static bool
same(const FileId *a, const FileId *b)
{
    if (a->kind == ID_NONE || a->kind != b->kind || a->dev != b->dev || a->ino != b->ino)
        return false;
    return a->kind == ID_FILE || strcmp(a->base, b->base) == 0;
}

bool
files_check(const FileList *l)
{
    FileId *ids = xcalloc((size_t)l->nfiles + 1, sizeof *ids);
    for (int i = 0; i < l->nfiles; i++)
        ids[i] = file_id(&l->files[i]);
    bool ok = true;
    for (int i = 0; i < l->nfiles; i++) {
        const File *o = &l->files[i];
        if (!o->is_output) continue;
        /* each output against every input, and against the outputs before it */
        for (int j = 0; j < l->nfiles; j++) {
            const File *x = &l->files[j];
            if (j == i || (x->is_output && j > i) || !same(&ids[i], &ids[j])) continue;
            if (x->is_output)
                diag_file_error(o->path, "%s and %s ('%s') name the same file; nothing was "
                                "written", x->role, o->role, x->path);
            else
                diag_file_error(o->path, "%s names %s ('%s'), which this run reads; nothing was "
                                "written", o->role, x->role, x->path);
            ok = false;
            break;
        }
    }
    free(ids);
    return ok;
}
