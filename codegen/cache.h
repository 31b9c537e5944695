/* cache.h: the compile cache both code generators share (cache.c): one directory of files named by a
 * 128-bit content hash of everything that decides their bytes (the generated code, the target, the
 * compiler's version). An entry carries a trailer that checks its bytes, so a damaged or truncated
 * file reads as a miss (and is replaced by the next store); entries are written under a temporary
 * name and renamed into place, so concurrent compilers never read half a file. Nothing here prints,
 * and a cache that cannot be read or written is never an error: the caller compiles. */
#ifndef SNN_CODEGEN_CACHE_H
#define SNN_CODEGEN_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Two 64-bit FNV-1a hashes with different offset bases over the same bytes. Not cryptographic: the
 * cache trusts its directory, it only must not confuse two programs. */
typedef struct CacheKey {
    uint64_t a, b;
} CacheKey;

CacheKey cache_key_new(void);
void cache_key_bytes(CacheKey *k, const void *data, size_t n);
/* s and its NUL, which separates one field from the next */
void cache_key_str(CacheKey *k, const char *s);

/* The cache directory: $SNN_CACHE_DIR ("" or "off": none), else $XDG_CACHE_HOME/snnc, else
 * ~/.cache/snnc; written into buf (n bytes) and returned, "" for no cache. */
const char *cache_dir_default(char *buf, size_t n);
/* DIR/KEY.EXT, the file of entry k (32 hex digits), for messages. */
void cache_entry_path(const char *dir, CacheKey k, const char *ext, char *buf, size_t n);
/* Entry k of dir (NULL or "": none) with extension ext, if it is there and intact: its bytes in
 * *data (malloc'ed, with a NUL after the last byte) and *len. False on a miss. */
bool cache_load(const char *dir, CacheKey k, const char *ext, unsigned char **data, size_t *len);
/* Store len bytes as entry k (the directory is made if missing). False if it could not be written,
 * which callers ignore: the next run compiles again. */
bool cache_store(const char *dir, CacheKey k, const char *ext, const void *data, size_t len);

#endif
