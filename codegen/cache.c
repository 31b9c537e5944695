/* cache.c: the compile cache of codegen/cache.h: content-hash keys, and entries stored as their bytes
 * followed by a trailer (magic, length, hash of the bytes) that cache_load checks. Knows nothing of
 * what it stores: the keys are the callers' business. */
#include "codegen/cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/tensor_io.h"

enum { TRAILER_BYTES = 32 };
static const char trailer_magic[8] = {'s', 'n', 'n', 'c', 'a', 'c', 'h', '1'};

CacheKey
cache_key_new(void)
{
    return (CacheKey){0xcbf29ce484222325ull, 0x84222325cbf29ce4ull};
}

void
cache_key_bytes(CacheKey *k, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        k->a = (k->a ^ p[i]) * 0x100000001b3ull;
        k->b = (k->b ^ p[i]) * 0x100000001b3ull;
        k->b ^= k->b >> 29;
    }
}

void
cache_key_str(CacheKey *k, const char *s)
{
    cache_key_bytes(k, s, strlen(s) + 1);
}

const char *
cache_dir_default(char *buf, size_t n)
{
    const char *env = getenv("SNN_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    buf[0] = 0;
    if (env)
        snprintf(buf, n, "%s", strcmp(env, "off") == 0 ? "" : env);
    else if (xdg && *xdg)
        snprintf(buf, n, "%s/snnc", xdg);
    else if (home && *home)
        snprintf(buf, n, "%s/.cache/snnc", home);
    return buf;
}

void
cache_entry_path(const char *dir, CacheKey k, const char *ext, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%016llx%016llx.%s", dir, (unsigned long long)k.a, (unsigned long long)k.b,
             ext);
}

/* the trailer of len bytes at data: magic, length, and the two hashes of the bytes */
static void
make_trailer(const void *data, size_t len, unsigned char *t)
{
    CacheKey h = cache_key_new();
    cache_key_bytes(&h, data, len);
    uint64_t words[3] = {(uint64_t)len, h.a, h.b};
    memcpy(t, trailer_magic, sizeof trailer_magic);
    memcpy(t + sizeof trailer_magic, words, sizeof words);
}

/* mkdir -p; false if the directory cannot be had */
static bool
make_dirs(const char *path)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return false;
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(buf, 0777);
            *p = '/';
        }
    return mkdir(buf, 0777) == 0 || errno == EEXIST;
}

bool
cache_load(const char *dir, CacheKey k, const char *ext, unsigned char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    if (!dir || !*dir) return false;
    char path[4200], msg[256];
    cache_entry_path(dir, k, ext, path, sizeof path);
    unsigned char *buf;
    size_t n;
    if (rt_read_file(path, NULL, &buf, &n, msg, sizeof msg) != 0) return false;
    unsigned char want[TRAILER_BYTES];
    bool is_intact = n >= TRAILER_BYTES;
    if (is_intact) {
        make_trailer(buf, n - TRAILER_BYTES, want);
        is_intact = memcmp(buf + n - TRAILER_BYTES, want, TRAILER_BYTES) == 0;
    }
    if (!is_intact) {
        free(buf);
        return false;
    }
    n -= TRAILER_BYTES;
    buf[n] = 0; /* where the trailer began: the bytes are followed by a NUL as promised */
    *data = buf;
    *len = n;
    return true;
}

bool
cache_store(const char *dir, CacheKey k, const char *ext, const void *data, size_t len)
{
    if (!dir || !*dir || !make_dirs(dir)) return false;
    unsigned char *buf = malloc(len + TRAILER_BYTES);
    if (!buf) return false;
    memcpy(buf, data, len);
    make_trailer(data, len, buf + len);
    char path[4200], msg[256];
    cache_entry_path(dir, k, ext, path, sizeof path);
    bool is_ok = rt_write_file(path, buf, len + TRAILER_BYTES, msg, sizeof msg) == 0;
    free(buf);
    return is_ok;
}
