/* idx.c: the IDX format of MNIST-style data sets (unsigned byte data, optionally gzipped), gzip
 * decompression, and the Fashion-MNIST loader that finds the files and scales images like
 * torchvision's ToTensor.
 * Must not trust the dims in a header before checking them against the bytes present, and must not
 * decompress without a bound on the output. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "runtime/tensor_io.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* Inflate gzip data (one or more members) into a malloc'd buffer of at most max_out bytes. With
 * is_prefix, stop there without complaint (the first bytes of the output); else more output is an
 * error saying past_what ("the 47 MiB its header's shape [60000, 28, 28] claims"). The buffer
 * grows as output comes, so a claim is never allocated before the data backs it. */
static int
gunzip(const unsigned char *b, size_t len, const char *what, size_t max_out, bool is_prefix,
       const char *past_what, unsigned char **out, size_t *outlen, char *err, size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    if (len < 2 || b[0] != 0x1f || b[1] != 0x8b) {
        rt_io_error(err, errlen, what, "not gzip data (bad magic)");
        return 1;
    }
    size_t cap = len < ((size_t)1 << 24) ? len * 4 + 4096 : (size_t)1 << 26;
    if (cap > max_out + 1) cap = max_out + 1; /* + 1: room to see output past max_out */
    unsigned char *dst = malloc(cap);
    if (!dst) {
        rt_io_error(err, errlen, what, "out of memory");
        return 1;
    }
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
        free(dst);
        rt_io_error(err, errlen, what, "zlib inflateInit2 failed");
        return 1;
    }
    size_t in_left = len, n = 0;
    zs.next_in = (Bytef *)b;
    const char *problem = NULL;
    char msg[320];
    for (;;) {
        /* zlib counts in uInt, so feed both sides in chunks of at most 1 GiB */
        if (zs.avail_in == 0 && in_left > 0) {
            zs.avail_in = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
            in_left -= zs.avail_in;
        }
        if (n > max_out || (is_prefix && n == max_out)) {
            if (is_prefix) {
                n = max_out;
                break;
            }
            snprintf(msg, sizeof msg, "decompresses to more than %s", past_what);
            problem = msg;
            break;
        }
        if (n == cap) {
            size_t ncap = cap > (max_out + 1) / 2 ? max_out + 1 : cap * 2;
            unsigned char *nd = realloc(dst, ncap);
            if (!nd) {
                problem = "out of memory";
                break;
            }
            dst = nd;
            cap = ncap;
        }
        zs.next_out = dst + n;
        zs.avail_out = cap - n > (1u << 30) ? (1u << 30) : (uInt)(cap - n);
        uInt before = zs.avail_out;
        int zr = inflate(&zs, Z_NO_FLUSH);
        n += before - zs.avail_out;
        if (zr == Z_STREAM_END) {
            size_t pos = len - in_left - zs.avail_in;
            if (pos == len) break;
            /* gzip allows several members back to back */
            if (len - pos >= 2 && b[pos] == 0x1f && b[pos + 1] == 0x8b) {
                inflateReset(&zs);
                continue;
            }
            snprintf(msg, sizeof msg, "unexpected data after the gzip stream at byte %zu", pos);
            problem = msg;
            break;
        }
        if (zr == Z_OK) continue;
        if (zr == Z_BUF_ERROR && zs.avail_in == 0 && in_left == 0) {
            if (is_prefix) break; /* what there is of the prefix: the parser says what is short */
            problem = "gzip data is truncated";
            break;
        }
        if (zr == Z_BUF_ERROR && zs.avail_out == 0)
            continue; /* the buffer grows on the next turn */
        snprintf(msg, sizeof msg, "corrupt gzip data (%s)", zs.msg ? zs.msg : "zlib error");
        problem = msg;
        break;
    }
    inflateEnd(&zs);
    if (problem) {
        free(dst);
        rt_io_error(err, errlen, what, "%s", problem);
        return 1;
    }
    unsigned char *shrunk = realloc(dst, n ? n : 1);
    *out = shrunk ? shrunk : dst;
    *outlen = n;
    return 0;
}

int
rt_gunzip(const void *buf, size_t len, const char *what, size_t max_out, unsigned char **out,
          size_t *outlen, char *err, size_t errlen)
{
    char past[64];
    rt_format_bytes(max_out, past, sizeof past);
    return gunzip(buf, len, what, max_out, false, past, out, outlen, err, errlen);
}

static const char *
idx_type_name(unsigned t)
{
    switch (t) {
    case 0x08:
        return "unsigned byte";
    case 0x09:
        return "signed byte";
    case 0x0b:
        return "short";
    case 0x0c:
        return "int";
    case 0x0d:
        return "float";
    case 0x0e:
        return "double";
    }
    return NULL;
}

enum { IDX_MAX_HEADER = 4 + 4 * RT_MAX_RANK };

/* The bytes a whole, valid IDX header (of unsigned bytes) says its file holds, else
 * RT_SIZE_UNKNOWN. */
static uint64_t
idx_claim(const unsigned char *b, size_t len)
{
    if (len < 4 || b[0] || b[1] || b[2] != 0x08 || b[3] < 1 || b[3] > RT_MAX_RANK ||
        len < 4 + 4 * (size_t)b[3])
        return RT_SIZE_UNKNOWN;
    uint64_t numel = 1;
    for (int i = 0; i < b[3]; i++) {
        const unsigned char *p = b + 4 + 4 * i;
        uint64_t d = (uint64_t)p[0] << 24 | (uint64_t)p[1] << 16 | (uint64_t)p[2] << 8 | p[3];
        if (d && numel > (uint64_t)RT_MAX_NUMEL / d) return RT_SIZE_UNKNOWN;
        numel *= d;
    }
    return 4 + 4 * (uint64_t)b[3] + numel;
}

/* "[10000, 28, 28]": the shape of a header idx_claim accepted */
static void
idx_shape(const unsigned char *b, char *buf, size_t len)
{
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < b[3] && k < len; i++) {
        const unsigned char *p = b + 4 + 4 * i;
        k += (size_t)snprintf(buf + k, len - k, "%s%lu", i ? ", " : "",
                              (unsigned long)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
                                              (uint32_t)p[2] << 8 | p[3]));
    }
    if (k < len) snprintf(buf + k, len - k, "]");
}

static int
idx_too_large(const char *what, uint64_t claim, size_t max_out, char *err, size_t errlen)
{
    char c[32], m[32];
    rt_format_bytes(claim, c, sizeof c);
    rt_format_bytes(max_out, m, sizeof m);
    rt_io_error(err, errlen, what, "its header claims %s, more than the %s read for it", c, m);
    return 1;
}

/* file = 00 00 type ndims { dim_be32 } data     (type 0x08 only; 1 <= ndims <= 8); at most
 * max_out bytes, decompressed. bytes NULL: out->data the values as floats; else *bytes (malloc'd)
 * the data bytes as they are and out->data NULL (a quarter of the memory). */
static int
idx_parse(const void *buf, size_t len, const char *what, size_t max_out, RtTensor *out,
          uint8_t **bytes, char *err, size_t errlen)
{
    const unsigned char *b = buf;
    memset(out, 0, sizeof *out);
    if (err && errlen) err[0] = 0;
    if (len >= 2 && b[0] == 0x1f && b[1] == 0x8b) {
        /* the header first: its shape bounds the rest of the output */
        unsigned char *head;
        size_t hlen;
        if (gunzip(b, len, what, IDX_MAX_HEADER, true, NULL, &head, &hlen, err, errlen)) return 1;
        uint64_t claim = idx_claim(head, hlen);
        if (claim == RT_SIZE_UNKNOWN) {
            /* no whole, valid header: the parser says what is wrong with it */
            int rc = idx_parse(head, hlen, what, max_out, out, bytes, err, errlen);
            free(head);
            if (rc == 0) {
                rt_tensor_free(out);
                if (bytes) {
                    free(*bytes);
                    *bytes = NULL;
                }
            }
            return 1;
        }
        char shape[120], past[200];
        idx_shape(head, shape, sizeof shape);
        free(head);
        snprintf(past, sizeof past, "the %llu bytes its header's shape %s claims",
                 (unsigned long long)claim, shape);
        if (claim > max_out) return idx_too_large(what, claim, max_out, err, errlen);
        unsigned char *plain;
        size_t plen;
        if (gunzip(b, len, what, (size_t)claim, false, past, &plain, &plen, err, errlen)) return 1;
        int rc = idx_parse(plain, plen, what, max_out, out, bytes, err, errlen);
        free(plain);
        return rc;
    }
    if (len < 4) {
        rt_io_error(err, errlen, what, "file is %zu bytes, too short for the IDX magic", len);
        return 1;
    }
    if (b[0] != 0 || b[1] != 0 || !idx_type_name(b[2])) {
        rt_io_error(err, errlen, what,
                    "not an IDX file (bad magic %02x %02x %02x %02x; expected 00 00 08 NN)", b[0],
                    b[1], b[2], b[3]);
        return 1;
    }
    if (b[2] != 0x08) {
        rt_io_error(err, errlen, what,
                    "IDX data type 0x%02x (%s) is not supported (only unsigned byte, 0x08)", b[2],
                    idx_type_name(b[2]));
        return 1;
    }
    int nd = b[3];
    if (nd < 1 || nd > RT_MAX_RANK) {
        rt_io_error(err, errlen, what, "IDX file has %d dimensions (supported: 1..%d)", nd,
                    RT_MAX_RANK);
        return 1;
    }
    size_t hdr = 4 + 4 * (size_t)nd;
    if (len < hdr) {
        rt_io_error(err, errlen, what, "truncated: the header needs %zu bytes but the file is %zu",
                    hdr, len);
        return 1;
    }
    int64_t dims[RT_MAX_RANK], numel = 1;
    for (int i = 0; i < nd; i++) {
        const unsigned char *p = b + 4 + 4 * i;
        dims[i] =
            (int64_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
    }
    for (int i = 0; i < nd; i++) {
        if (dims[i] == 0) {
            numel = 0;
            break;
        }
        if (numel > RT_MAX_NUMEL / dims[i]) {
            rt_io_error(err, errlen, what, "dims have more than 2^34 elements");
            return 1;
        }
        numel *= dims[i];
    }
    if ((uint64_t)numel + hdr > max_out) return idx_too_large(what, numel + hdr, max_out, err, errlen);
    size_t have = len - hdr;
    if ((uint64_t)numel > have) {
        rt_io_error(err, errlen, what, "truncated: data is %zu bytes but the dims need %lld", have,
                    (long long)numel);
        return 1;
    }
    if ((uint64_t)numel < have) {
        uint64_t extra = have - (uint64_t)numel;
        rt_io_error(err, errlen, what, "%llu unexpected byte%s after the %lld data bytes",
                    (unsigned long long)extra, extra == 1 ? "" : "s", (long long)numel);
        return 1;
    }
    if (bytes) {
        *bytes = malloc(numel > 0 ? (size_t)numel : 1);
        if (!*bytes) {
            rt_io_error(err, errlen, what, "out of memory for %lld bytes", (long long)numel);
            return 1;
        }
        memcpy(*bytes, b + hdr, (size_t)numel);
    } else {
        out->data = malloc(numel > 0 ? (size_t)numel * sizeof(float) : sizeof(float));
        if (!out->data) {
            rt_io_error(err, errlen, what, "out of memory for %lld elements", (long long)numel);
            return 1;
        }
        rt_decode_le(RT_U8, b + hdr, numel, out->data);
    }
    out->dtype = RT_U8;
    out->rank = nd;
    for (int i = 0; i < nd; i++)
        out->dims[i] = dims[i];
    out->numel = numel;
    return 0;
}

int
rt_idx_parse(const void *buf, size_t len, const char *what, RtTensor *out, char *err, size_t errlen)
{
    uint64_t max = rt_read_ceiling();
    return idx_parse(buf, len, what, max > SIZE_MAX ? SIZE_MAX : (size_t)max, out, NULL, err,
                     errlen);
}

/* RtSizeProbe of IDX: a plain file is as long as its header says; gzip data is read whole */
static int
idx_probe(const unsigned char *b, size_t n, const void *ctx, uint64_t *total)
{
    (void)ctx;
    if (n < 2) return 1;
    if (b[0] == 0x1f && b[1] == 0x8b) {
        *total = RT_SIZE_UNKNOWN;
        return 0;
    }
    if (n < 4) return 1;
    if (b[0] || b[1] || b[3] < 1 || b[3] > RT_MAX_RANK) {
        *total = n; /* not IDX: the parser says so */
        return 0;
    }
    if (n < 4 + 4 * (size_t)b[3]) return 1;
    uint64_t claim = idx_claim(b, n);
    *total = claim == RT_SIZE_UNKNOWN ? n : claim;
    return 0;
}

static int
idx_read(const char *path, const RtReadLimit *lim, RtTensor *out, uint8_t **bytes, char *err,
         size_t errlen)
{
    unsigned char *buf;
    size_t len;
    memset(out, 0, sizeof *out);
    if (bytes) *bytes = NULL;
    if (rt_read_file_probed(path, lim, idx_probe, NULL, &buf, &len, err, errlen)) return 1;
    size_t plen = strlen(path);
    if (plen > 3 && strcmp(path + plen - 3, ".gz") == 0 &&
        !(len >= 2 && buf[0] == 0x1f && buf[1] == 0x8b)) {
        free(buf);
        rt_io_error(err, errlen, path, "name ends in .gz but the file is not gzip data");
        return 1;
    }
    uint64_t max = lim && lim->max_bytes ? lim->max_bytes : rt_read_ceiling(),
             claim = idx_claim(buf, len);
    if (claim != RT_SIZE_UNKNOWN && len > claim) { /* the reader stopped a byte past the claim */
        char shape[120];
        idx_shape(buf, shape, sizeof shape);
        rt_io_error(err, errlen, path, "has data after the %llu bytes its header's shape %s claims",
                    (unsigned long long)claim, shape);
        free(buf);
        return 1;
    }
    int rc =
        idx_parse(buf, len, path, max > SIZE_MAX ? SIZE_MAX : (size_t)max, out, bytes, err, errlen);
    free(buf);
    return rc;
}

int
rt_idx_read(const char *path, const RtReadLimit *lim, RtTensor *out, char *err, size_t errlen)
{
    return idx_read(path, lim, out, NULL, err, errlen);
}

/* ---- Fashion-MNIST ---- */

#define FMNIST_SYSTEM_DIR "/usr/share/datasets/fashion-mnist"

/* path of dir/base or dir/base.gz if either is readable, else 0 */
static int
find_file(const char *dir, const char *base, char *path, size_t n)
{
    static const char *const ext[] = {"", ".gz"};
    for (int i = 0; i < 2; i++) {
        int k = snprintf(path, n, "%s/%s%s", dir, base, ext[i]);
        if (k > 0 && (size_t)k < n && access(path, R_OK) == 0) return 1;
    }
    return 0;
}

int
rt_fmnist_find(const char *dir, int is_train, char *img_path, char *lbl_path, size_t n, char *err,
               size_t errlen)
{
    const char *what = "Fashion-MNIST";
    const char *split = is_train ? "train" : "t10k";
    char img_base[64], lbl_base[64];
    snprintf(img_base, sizeof img_base, "%s-images-idx3-ubyte", split);
    snprintf(lbl_base, sizeof lbl_base, "%s-labels-idx1-ubyte", split);

    /* the folders to search, in order */
    char dirs[4][4096];
    int ndirs = 0;
    const char *env = getenv("SNN_DATA_DIR");
    if (dir)
        snprintf(dirs[ndirs++], sizeof dirs[0], "%s", dir);
    else {
        if (env && env[0]) {
            snprintf(dirs[ndirs++], sizeof dirs[0], "%s", env);
            snprintf(dirs[ndirs++], sizeof dirs[0], "%s/fashion-mnist", env);
            snprintf(dirs[ndirs++], sizeof dirs[0], "%s/FashionMNIST/raw", env);
        }
        snprintf(dirs[ndirs++], sizeof dirs[0], "%s", FMNIST_SYSTEM_DIR);
    }
    int found = -1;
    for (int i = 0; i < ndirs && found < 0; i++)
        if (find_file(dirs[i], img_base, img_path, n)) found = i;
    if (found < 0) {
        char looked[1024];
        size_t k = 0;
        looked[0] = 0;
        for (int i = 0; i < ndirs && k < sizeof looked; i++)
            k += (size_t)snprintf(looked + k, sizeof looked - k, "%s%s", i ? ", " : "", dirs[i]);
        rt_io_error(err, errlen, what,
                    "%s split not found: looked for %s[.gz] in %s%s; install the Debian package "
                    "dataset-fashion-mnist%s",
                    split, img_base, dir ? "" : (env && env[0] ? "$SNN_DATA_DIR, " : ""), looked,
                    dir ? "" : " or set SNN_DATA_DIR");
        return 1;
    }
    if (!find_file(dirs[found], lbl_base, lbl_path, n)) {
        rt_io_error(err, errlen, what, "found %s but no %s[.gz] beside it", img_path, lbl_base);
        return 1;
    }
    return 0;
}

static int
fmnist_load(const char *dir, int is_train, int64_t max_rows, RtTensor *images, uint8_t **pixels,
            RtTensor *labels, char *err, size_t errlen)
{
    const char *what = "Fashion-MNIST";
    memset(images, 0, sizeof *images);
    memset(labels, 0, sizeof *labels);
    if (pixels) *pixels = NULL;
    char img_path[4200], lbl_path[4200];
    if (rt_fmnist_find(dir, is_train, img_path, lbl_path, sizeof img_path, err, errlen)) return 1;
    /* no split is larger than the training set's 60,000 images and labels */
    RtReadLimit img_lim = {16 + 60000 * 784, 0, "60,000 images of 28 x 28, the largest split"};
    RtReadLimit lbl_lim = {8 + 60000, 0, "60,000 labels, the largest split"};
    if (idx_read(img_path, &img_lim, images, pixels, err, errlen)) return 1;
    if (rt_idx_read(lbl_path, &lbl_lim, labels, err, errlen)) goto fail;
    if (images->rank != 3 || images->dims[1] != 28 || images->dims[2] != 28) {
        rt_io_error(err, errlen, img_path, "expected images of shape [N, 28, 28]");
        goto fail;
    }
    if (labels->rank != 1) {
        rt_io_error(err, errlen, lbl_path, "expected labels of shape [N]");
        goto fail;
    }
    if (labels->dims[0] != images->dims[0]) {
        rt_io_error(err, errlen, what, "%s has %lld images but %s has %lld labels", img_path,
                    (long long)images->dims[0], lbl_path, (long long)labels->dims[0]);
        goto fail;
    }
    for (int64_t i = 0; i < labels->numel; i++)
        if (labels->data[i] > 9.0f) {
            rt_io_error(err, errlen, lbl_path, "label %lld is %.0f, outside 0..9", (long long)i,
                        (double)labels->data[i]);
            goto fail;
        }
    /* only the first max_rows kept: a copy of their size, the whole split freed */
    if (pixels && max_rows > 0 && max_rows < images->dims[0]) {
        size_t n = (size_t)max_rows * 784;
        uint8_t *kept = malloc(n);
        if (!kept) {
            rt_io_error(err, errlen, img_path, "out of memory for %lld images",
                        (long long)max_rows);
            goto fail;
        }
        memcpy(kept, *pixels, n);
        free(*pixels);
        *pixels = kept;
        images->dims[0] = labels->dims[0] = labels->numel = max_rows;
        images->numel = (int64_t)n;
    }
    /* torchvision ToTensor: byte tensor .float().div(255), i.e. one float32 division */
    for (int64_t i = 0; !pixels && i < images->numel; i++)
        images->data[i] = images->data[i] / 255.0f;
    images->rank = 4;
    images->dims[3] = 28;
    images->dims[2] = 28;
    images->dims[1] = 1;
    return 0;
fail:
    rt_tensor_free(images);
    rt_tensor_free(labels);
    if (pixels) {
        free(*pixels);
        *pixels = NULL;
    }
    return 1;
}

int
rt_fmnist_load(const char *dir, int is_train, RtTensor *images, RtTensor *labels, char *err,
               size_t errlen)
{
    return fmnist_load(dir, is_train, 0, images, NULL, labels, err, errlen);
}

int
rt_fmnist_load_bytes(const char *dir, int is_train, int64_t max_rows, RtTensor *images,
                     uint8_t **pixels, RtTensor *labels, char *err, size_t errlen)
{
    return fmnist_load(dir, is_train, max_rows, images, pixels, labels, err, errlen);
}
