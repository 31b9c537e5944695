/* failio.c: an LD_PRELOAD library for tests that makes snnc's file output fail the way a full or
 * failing disk does, to check that a failed write leaves the old file whole and no temporary file
 * behind. Only snnc's temporary files (".snnc-tmp." in their name) are touched:
 *   SNN_FAILIO=write:ENOSPC:4096   writes to a temporary fail once 4096 bytes are in it (the part
 *                                  that fits is written first, as a full disk does)
 *   SNN_FAILIO=fsync:EIO           fsync of a temporary fails
 *   SNN_FAILIO=rename:EIO          renaming a temporary into place fails
 * Errors: ENOSPC, EIO, EDQUOT, EFBIG. SNN_FAILIO_NAME=TEXT limits it to temporaries whose path
 * holds TEXT (".m.so." for those of m.so). Not for sanitized builds (their runtime must come
 * first). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int
is_temp(const char *path)
{
    const char *name = getenv("SNN_FAILIO_NAME");
    return strstr(path, ".snnc-tmp.") && (!name || strstr(path, name));
}

static int
is_temp_fd(int fd)
{
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    return is_temp(path);
}

/* the failure asked for on op: its errno (0: none) and the bytes allowed before it */
static int
failure(const char *op, long *after)
{
    const char *spec = getenv("SNN_FAILIO");
    size_t n = strlen(op);
    *after = 0;
    if (!spec || strncmp(spec, op, n) != 0 || spec[n] != ':') return 0;
    const char *e = spec + n + 1;
    int err = !strncmp(e, "ENOSPC", 6) ? ENOSPC
              : !strncmp(e, "EIO", 3)  ? EIO
              : !strncmp(e, "EDQUOT", 6) ? EDQUOT
              : !strncmp(e, "EFBIG", 5) ? EFBIG
                                        : 0;
    const char *colon = strchr(e, ':');
    if (colon) *after = atol(colon + 1);
    return err;
}

ssize_t
write(int fd, const void *buf, size_t len)
{
    static ssize_t (*real)(int, const void *, size_t);
    static long written; /* into temporaries, all together (one is written at a time) */
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "write"); /* POSIX's idiom for dlsym */
    long after;
    int err = failure("write", &after);
    if (!err || !is_temp_fd(fd)) return real(fd, buf, len);
    if (written >= after) {
        errno = err;
        return -1;
    }
    size_t room = (size_t)(after - written);
    ssize_t w = real(fd, buf, len < room ? len : room);
    if (w > 0) written += w;
    return w;
}

int
fsync(int fd)
{
    static int (*real)(int);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "fsync");
    long after;
    int err = failure("fsync", &after);
    if (err && is_temp_fd(fd)) {
        errno = err;
        return -1;
    }
    return real(fd);
}

int
rename(const char *from, const char *to)
{
    static int (*real)(const char *, const char *);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "rename");
    long after;
    int err = failure("rename", &after);
    if (err && is_temp(from)) {
        errno = err;
        return -1;
    }
    return real(from, to);
}
