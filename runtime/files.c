/* files.c: whole files in and out, for every reader and writer of snnc and model.so.
 * Reads are bounded: never more than a caller's limit (derived from what the model needs) or the
 * ceiling, and a format's probe stops a read at the size its header claims, so /dev/zero, a FIFO or
 * a lying header costs at most the limit, never an allocation from a claimed size.
 * Writes follow one rule (rt_write_file): a regular file is replaced atomically (a temporary file
 * beside it, every write, the fsync and the close checked, then a rename), a symbolic link is
 * written through to its existing target, a character device or FIFO is written as a stream, and
 * anything else is refused. Nothing here prints. */
#include "runtime/tensor_io.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* "WHAT: message" into err (nothing when err is NULL or errlen 0): every reader's error form */
void
rt_io_error(char *err, size_t errlen, const char *what, const char *fmt, ...)
{
    if (!err || errlen == 0) return;
    int n = snprintf(err, errlen, "%s: ", what ? what : "(input)");
    if (n < 0 || (size_t)n >= errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

enum { FIRST_CHUNK = 1 << 16 };

uint64_t
rt_read_ceiling(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t half = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 2 : 0;
    return half > ((uint64_t)1 << 30) ? half : (uint64_t)1 << 30;
}

void
rt_format_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (n < 1024) {
        snprintf(buf, len, "%llu bytes", (unsigned long long)n);
        return;
    }
    double v = (double)n / 1024;
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    snprintf(buf, len, "%.*f %s", v < 10 ? 2 : v < 100 ? 1 : 0, v, units[u]);
}

/* the limit's bytes and the words saying where it comes from */
static uint64_t
limit_bytes(const RtReadLimit *lim, char *why, size_t len)
{
    uint64_t max = lim && lim->max_bytes ? lim->max_bytes : rt_read_ceiling();
    char size[32];
    rt_format_bytes(max, size, sizeof size);
    if (lim && lim->max_bytes)
        snprintf(why, len, "%s read for it%s%s", size, lim->why ? ": " : "",
                 lim->why ? lim->why : "");
    else
        snprintf(why, len, "%s read for any file: half this machine's memory", size);
    return max;
}

/* ---- reading ---- */

/* "is 3.1 GiB, more than the ..." for a file whose size (or claimed size) is past the limit */
static int
too_large(const char *path, const char *verb, uint64_t size, const char *why, char *err,
          size_t errlen)
{
    char s[32];
    rt_format_bytes(size, s, sizeof s);
    rt_io_error(err, errlen, path, "%s %s, more than the %s", verb, s, why);
    return 1;
}

int
rt_read_file_probed(const char *path, const RtReadLimit *lim, RtSizeProbe probe, const void *ctx,
                    unsigned char **buf, size_t *len, char *err, size_t errlen)
{
    *buf = NULL;
    *len = 0;
    char why[320];
    uint64_t max = limit_bytes(lim, why, sizeof why);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        rt_io_error(err, errlen, path, "cannot open: %s", strerror(errno));
        return 1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
        rt_io_error(err, errlen, path, "cannot read: %s",
                    S_ISDIR(st.st_mode) ? "it is a directory" : strerror(errno));
        close(fd);
        return 1;
    }
    /* a regular file's size is known: past the limit, it is not read at all (unless a probe may
     * find that only its start is needed) */
    bool is_regular = S_ISREG(st.st_mode);
    uint64_t size = is_regular ? (uint64_t)st.st_size : 0;
    if (!probe && is_regular && size > max) {
        close(fd);
        return too_large(path, "is", size, why, err, errlen);
    }
    /* is_probing: the probe has not yet said how much to read; then is_sized: exactly `want`
     * bytes (the rest of the file is not needed), else to the end of the file within max */
    bool is_probing = probe != NULL, is_sized = false;
    uint64_t want = 0;
    size_t cap = !probe && is_regular ? (size_t)size + 1 : FIRST_CHUNK, n = 0;
    unsigned char *b = malloc(cap);
    if (!b) goto oom;
    for (;;) {
        /* + 1: sees that the file is larger (than the limit, or than its claim) */
        uint64_t stop = is_sized ? want + 1 : max + 1;
        if (n >= stop) break;
        if (n == cap) {
            /* a stream's buffer doubles as bytes arrive: a claimed size is never allocated */
            uint64_t ncap = is_regular && is_sized ? want + 1 : (uint64_t)cap * 2;
            if (ncap > stop) ncap = stop;
            if (ncap > SIZE_MAX) goto oom;
            unsigned char *nb = realloc(b, (size_t)ncap);
            if (!nb) goto oom;
            b = nb;
            cap = (size_t)ncap;
        }
        uint64_t room = cap - n;
        if (room > stop - n) room = stop - n;
        if (room > (1u << 30)) room = 1u << 30;
        ssize_t got = read(fd, b + n, (size_t)room);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            rt_io_error(err, errlen, path, "read error: %s", strerror(errno));
            free(b);
            close(fd);
            return 1;
        }
        if (got == 0) break;
        n += (size_t)got;
        uint64_t total;
        if (!is_probing || probe(b, n, ctx, &total) != 0) continue;
        is_probing = false;
        if (total != RT_SIZE_UNKNOWN) {
            if (total > max) {
                free(b);
                close(fd);
                return too_large(path, "its header claims", total, why, err, errlen);
            }
            is_sized = true;
            want = total;
            if (n > want + 1) n = (size_t)want + 1; /* read past what is needed: not kept */
        } else if (is_regular && size > max) {
            free(b);
            close(fd);
            return too_large(path, "is", size, why, err, errlen);
        }
    }
    close(fd);
    if (!is_sized && (uint64_t)n > max) {
        free(b);
        rt_io_error(err, errlen, path, "holds more than the %s", why);
        return 1;
    }
    *buf = b;
    *len = n;
    return 0;
oom:
    free(b);
    close(fd);
    rt_io_error(err, errlen, path, "out of memory reading the file (%zu bytes so far)", n);
    return 1;
}

int
rt_read_file(const char *path, const RtReadLimit *lim, unsigned char **buf, size_t *len,
             char *err, size_t errlen)
{
    return rt_read_file_probed(path, lim, NULL, NULL, buf, len, err, errlen);
}

/* ---- writing ---- */

int
rt_fd_path(const char *path)
{
    if (!strcmp(path, "/dev/stdin")) return 0;
    if (!strcmp(path, "/dev/stdout")) return 1;
    if (!strcmp(path, "/dev/stderr")) return 2;
    const char *p = !strncmp(path, "/dev/fd/", 8)         ? path + 8
                    : !strncmp(path, "/proc/self/fd/", 14) ? path + 14
                                                            : NULL;
    if (!p || !*p) return -1;
    long fd = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || fd > 1000000) return -1;
        fd = fd * 10 + (*p - '0');
    }
    return (int)fd;
}

static int
write_all(int fd, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len > (1u << 30) ? (1u << 30) : len);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return errno;
        if (w == 0) return EIO;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int
rt_fd_write_all(int fd, const void *buf, size_t len)
{
    return write_all(fd, buf, len);
}

/* what a write puts in the file: buf, or what fn writes to the descriptor */
typedef struct Src {
    const void *buf;
    size_t len;
    RtWriteFn fn;
    void *ctx;
} Src;

static int
src_write(int fd, const Src *s)
{
    return s->fn ? s->fn(s->ctx, fd) : write_all(fd, s->buf, s->len);
}

/* A write prepared and not yet committed: for a file, its temporary, written whole; for a
 * stream, nothing (streams are written when prepared: they cannot be taken back). */
struct RtWrite {
    char *path;   /* as the caller named it, for messages */
    char *target; /* the file the rename replaces (a link's target); NULL for a stream */
    char *tmp;
    char *dir;
    bool has_old;
};

static void
write_free(RtWrite *w)
{
    if (!w) return;
    free(w->path);
    free(w->target);
    free(w->tmp);
    free(w->dir);
    free(w);
}

static RtWrite *
write_new(const char *path, const char *target)
{
    RtWrite *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->path = strdup(path);
    w->target = target ? strdup(target) : NULL;
    if (!w->path || (target && !w->target)) {
        write_free(w);
        return NULL;
    }
    return w;
}

/* path as a stream: a character device, a FIFO, a descriptor the process holds (fd >= 0); *out
 * a write with nothing left to commit */
static int
write_stream(const char *path, int fd, const Src *src, RtWrite **out, char *err, size_t errlen)
{
    bool is_own = fd >= 0;
    if (is_own) {
        /* what stdio holds for the same descriptor goes first */
        fflush(fd == 1 ? stdout : fd == 2 ? stderr : NULL);
    } else {
        fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) {
            rt_io_error(err, errlen, path, "cannot open for writing: %s", strerror(errno));
            return 1;
        }
    }
    int e = src_write(fd, src);
    if (!is_own && close(fd) != 0 && !e) e = errno;
    if (e) {
        rt_io_error(err, errlen, path, "cannot write: %s", strerror(e));
        return 1;
    }
    if (!(*out = write_new(path, NULL))) {
        rt_io_error(err, errlen, path, "out of memory");
        return 1;
    }
    return 0;
}

/* buf into a temporary file beside target (a rename across file systems would fail), written,
 * fsync'ed and closed, every error checked; the old file, if any, keeps its permissions (and its
 * owner, where this process may give it) */
static int
write_temp(RtWrite *w, const struct stat *old, unsigned flags, const Src *src, char *err,
           size_t errlen)
{
    const char *target = w->target;
    const char *slash = strrchr(target, '/');
    size_t dlen = slash ? (size_t)(slash - target) : 0;
    const char *base = slash ? slash + 1 : target;
    size_t cap = strlen(target) + 64;
    w->has_old = old != NULL;
    w->tmp = malloc(cap);
    w->dir = malloc(dlen + 2);
    if (!w->tmp || !w->dir) {
        rt_io_error(err, errlen, w->path, "out of memory");
        return 1;
    }
    if (slash) {
        memcpy(w->dir, target, dlen ? dlen : 1); /* "/x": the root */
        w->dir[dlen ? dlen : 1] = 0;
    } else {
        strcpy(w->dir, ".");
    }
    const char *after = old ? "; the file is left as it was" : "; nothing was written";
    mode_t mode = flags & RT_WRITE_EXEC ? 0777 : 0666; /* the umask applies */
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        /* hidden, beside the target; a long name would not fit with the suffix */
        if (strlen(base) < NAME_MAX - 40)
            snprintf(w->tmp, cap, "%s/.%s.snnc-tmp.%ld.%d", w->dir, base, (long)getpid(), attempt);
        else
            snprintf(w->tmp, cap, "%s/.snnc-tmp.%ld.%d", w->dir, (long)getpid(), attempt);
        fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) { /* the folder is missing or cannot be written: nothing happened at all */
        rt_io_error(err, errlen, w->path, "cannot write: %s%s", strerror(errno),
                    old ? "; the file is left as it was" : "");
        free(w->tmp);
        w->tmp = NULL;
        return 1;
    }
    /* the old file's owner too, where this process may give it (root may; others keep theirs) */
    if (old && (old->st_uid != geteuid() || old->st_gid != getegid()) &&
        fchown(fd, old->st_uid, old->st_gid) != 0)
        errno = 0;
    int e = old && fchmod(fd, old->st_mode & 07777) != 0 ? errno : 0;
    if (!e) e = src_write(fd, src);
    while (!e && fsync(fd) != 0)
        if (errno != EINTR) e = errno;
    if (close(fd) != 0 && !e) e = errno;
    if (e) {
        unlink(w->tmp);
        free(w->tmp);
        w->tmp = NULL;
        rt_io_error(err, errlen, w->path, "cannot write: %s%s", strerror(e), after);
        return 1;
    }
    return 0;
}

static int
prepare(const char *path, const Src *src, unsigned flags, RtWrite **out, char *err, size_t errlen)
{
    *out = NULL;
    int fd = rt_fd_path(path);
    if (fd >= 0) return write_stream(path, fd, src, out, err, errlen);
    struct stat lst, st;
    const char *target = path;
    char *resolved = NULL;
    bool has_old = false;
    if (lstat(path, &lst) != 0) {
        if (errno != ENOENT) {
            rt_io_error(err, errlen, path, "cannot write: %s", strerror(errno));
            return 1;
        }
    } else {
        bool is_link = S_ISLNK(lst.st_mode);
        if (is_link && stat(path, &st) != 0) {
            rt_io_error(err, errlen, path,
                        "is a symbolic link to %s; snnc writes through a link only to a file "
                        "that exists",
                        errno == ENOENT ? "nothing (its target does not exist)" : strerror(errno));
            return 1;
        }
        if (!is_link) st = lst;
        if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))
            return write_stream(path, -1, src, out, err, errlen);
        if (!S_ISREG(st.st_mode)) {
            rt_io_error(err, errlen, path,
                        "is %s; snnc writes only regular files (replaced whole) and character "
                        "devices or FIFOs (written as streams)",
                        S_ISDIR(st.st_mode)    ? "a directory"
                        : S_ISSOCK(st.st_mode) ? "a socket"
                        : S_ISBLK(st.st_mode)  ? "a block device"
                                               : "not a regular file");
            return 1;
        }
        has_old = true;
        if (is_link) { /* through the link: its target is replaced, the link stays */
            resolved = realpath(path, NULL);
            if (!resolved) {
                rt_io_error(err, errlen, path, "cannot resolve the link: %s", strerror(errno));
                return 1;
            }
            target = resolved;
        }
    }
    RtWrite *w = write_new(path, target);
    free(resolved);
    if (!w) {
        rt_io_error(err, errlen, path, "out of memory");
        return 1;
    }
    if (write_temp(w, has_old ? &st : NULL, flags, src, err, errlen)) {
        write_free(w);
        return 1;
    }
    *out = w;
    return 0;
}

int
rt_write_prepare(const char *path, const void *buf, size_t len, unsigned flags, RtWrite **out,
                 char *err, size_t errlen)
{
    Src src = {buf, len, NULL, NULL};
    return prepare(path, &src, flags, out, err, errlen);
}

int
rt_write_prepare_fn(const char *path, RtWriteFn fn, void *ctx, unsigned flags, RtWrite **out,
                    char *err, size_t errlen)
{
    Src src = {NULL, 0, fn, ctx};
    return prepare(path, &src, flags, out, err, errlen);
}

int
rt_write_file_fn(const char *path, RtWriteFn fn, void *ctx, char *err, size_t errlen)
{
    RtWrite *w;
    if (rt_write_prepare_fn(path, fn, ctx, 0, &w, err, errlen)) return 1;
    return rt_write_commit(w, err, errlen);
}

int
rt_write_commit(RtWrite *w, char *err, size_t errlen)
{
    if (!w) return 0;
    if (!w->target) { /* a stream: written already */
        write_free(w);
        return 0;
    }
    if (rename(w->tmp, w->target) != 0) {
        int e = errno;
        unlink(w->tmp);
        rt_io_error(err, errlen, w->path, "cannot write: %s%s", strerror(e),
                    w->has_old ? "; the file is left as it was" : "; nothing was written");
        write_free(w);
        return 1;
    }
    /* the rename itself reaches the disk with the directory */
    int dfd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    write_free(w);
    return 0;
}

void
rt_write_abort(RtWrite *w)
{
    if (w && w->tmp) unlink(w->tmp);
    write_free(w);
}

int
rt_write_file_flags(const char *path, const void *buf, size_t len, unsigned flags, char *err,
                    size_t errlen)
{
    RtWrite *w;
    if (rt_write_prepare(path, buf, len, flags, &w, err, errlen)) return 1;
    return rt_write_commit(w, err, errlen);
}

int
rt_write_file(const char *path, const void *buf, size_t len, char *err, size_t errlen)
{
    return rt_write_file_flags(path, buf, len, 0, err, errlen);
}
