/* npy.c: numpy's .npy format (versions 1.0-3.0, the little-endian numeric dtypes, C order) and .npz
 * archives of them (ZIP with stored or deflate members, zip64 aware), reading and writing.
 * Must not evaluate the header as Python: it is parsed by a small grammar of exactly the literals
 * numpy writes. Must not allocate from a size it has not checked against the bytes present. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "runtime/tensor_io.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

static uint16_t
ld16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t
ld32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t
ld64(const unsigned char *p)
{
    return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32;
}

static void
st16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void
st32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* ---- .npy header: a Python dict literal ----
 * header = ws '{' ws [ item { ws ',' ws item } [ ws ',' ] ] ws '}' ws
 * item   = pystr ws ':' ws value
 * value  = pystr | 'True' | 'False' | tuple
 * tuple  = '(' ws [ int { ws ',' ws int } [ ws ',' ] ] ws ')'   (one element needs the comma)
 * pystr  = "'" { char } "'" | '"' { char } '"'                   (printable ASCII, no escapes)
 * int    = digit { digit } [ 'L' ]                                (Python 2 wrote 3L) */

typedef struct {
    const unsigned char *s, *p, *end;
    const char *what;
    char *err;
    size_t errlen;
} PyLit;

static void
py_fail(PyLit *py, const char *msg)
{
    if (py->p >= py->end)
        rt_io_error(py->err, py->errlen, py->what, "bad header: %s at end of header", msg);
    else if (*py->p >= 0x21 && *py->p <= 0x7e)
        rt_io_error(py->err, py->errlen, py->what, "bad header at byte %zu: %s, found '%c'",
                    (size_t)(py->p - py->s), msg, *py->p);
    else
        rt_io_error(py->err, py->errlen, py->what, "bad header at byte %zu: %s, found byte 0x%02x",
                    (size_t)(py->p - py->s), msg, *py->p);
}

static void
py_ws(PyLit *py)
{
    while (py->p < py->end && (*py->p == ' ' || *py->p == '\t' || *py->p == '\n' || *py->p == '\r'))
        py->p++;
}

static int
py_eat(PyLit *py, int c)
{
    py_ws(py);
    if (py->p < py->end && *py->p == c) {
        py->p++;
        return 1;
    }
    return 0;
}

/* copies the string into out (truncated to outlen - 1) */
static int
py_str(PyLit *py, char *out, size_t outlen)
{
    py_ws(py);
    if (py->p >= py->end || (*py->p != '\'' && *py->p != '"')) {
        py_fail(py, "expected a quoted string");
        return 0;
    }
    int q = *py->p++;
    size_t n = 0;
    while (py->p < py->end && *py->p != q) {
        if (*py->p < 0x20 || *py->p > 0x7e || *py->p == '\\') {
            py_fail(py, "unsupported character in string");
            return 0;
        }
        if (n + 1 < outlen) out[n++] = (char)*py->p;
        py->p++;
    }
    if (py->p >= py->end) {
        py_fail(py, "unterminated string");
        return 0;
    }
    py->p++;
    out[n] = 0;
    return 1;
}

static int
py_word(PyLit *py, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(py->end - py->p) >= n && memcmp(py->p, w, n) == 0) {
        const unsigned char *after = py->p + n;
        if (after == py->end ||
            !((*after >= 'a' && *after <= 'z') || (*after >= 'A' && *after <= 'Z') ||
              (*after >= '0' && *after <= '9') || *after == '_')) {
            py->p += n;
            return 1;
        }
    }
    return 0;
}

/* tuple of non-negative ints; values above RT_MAX_NUMEL are stored as RT_MAX_NUMEL + 1 so the
 * caller reports them without overflowing */
static int
py_shape(PyLit *py, int64_t *dims, int *rank)
{
    *rank = 0;
    if (!py_eat(py, '(')) {
        py_fail(py, "expected a shape tuple");
        return 0;
    }
    int n = 0, trailing_comma = 0;
    for (;;) {
        py_ws(py);
        if (py_eat(py, ')')) break;
        if (py->p >= py->end || *py->p < '0' || *py->p > '9') {
            py_fail(py, n == 0 || trailing_comma ? "expected a non-negative integer or ')' in shape"
                                                 : "expected a non-negative integer in shape");
            return 0;
        }
        int64_t v = 0;
        while (py->p < py->end && *py->p >= '0' && *py->p <= '9') {
            if (v <= RT_MAX_NUMEL) v = v * 10 + (*py->p - '0');
            py->p++;
        }
        if (v > RT_MAX_NUMEL) v = RT_MAX_NUMEL + 1;
        if (py->p < py->end && *py->p == 'L') py->p++;
        if (n == RT_MAX_RANK) {
            rt_io_error(py->err, py->errlen, py->what, "shape has more than %d dimensions",
                        RT_MAX_RANK);
            return 0;
        }
        dims[n++] = v;
        trailing_comma = py_eat(py, ',');
        if (!trailing_comma) {
            if (py_eat(py, ')')) break;
            py_fail(py, "expected ',' or ')' in shape");
            return 0;
        }
    }
    if (n == 1 && !trailing_comma) {
        rt_io_error(py->err, py->errlen, py->what, "bad header: shape (%lld) is not a tuple",
                    (long long)dims[0]);
        return 0;
    }
    *rank = n;
    return 1;
}

static const struct {
    const char *descr;
    RtDType dtype;
} npy_dtypes[] = {
    {"<f4", RT_F32}, {"<f8", RT_F64},  {"<f2", RT_F16},  {"|u1", RT_U8},
    {"|i1", RT_I8},  {"|b1", RT_BOOL}, {"<i4", RT_I32},  {"<i8", RT_I64},
    {"<u1", RT_U8},  {"<i1", RT_I8},   {"<b1", RT_BOOL},
};

static const char *
npy_descr(RtDType t)
{
    for (size_t i = 0; i < sizeof npy_dtypes / sizeof npy_dtypes[0]; i++)
        if (npy_dtypes[i].dtype == t) return npy_dtypes[i].descr;
    return "?";
}

/* the header dict: exactly the keys descr, fortran_order and shape */
static int
npy_header(PyLit *py, RtDType *dtype, int *rank, int64_t *dims)
{
    int has_descr = 0, has_order = 0, has_shape = 0;
    char key[32], descr[32];
    if (!py_eat(py, '{')) {
        py_fail(py, "expected '{'");
        return 0;
    }
    for (;;) {
        if (py_eat(py, '}')) break;
        if (!py_str(py, key, sizeof key)) return 0;
        if (!py_eat(py, ':')) {
            py_fail(py, "expected ':' after key");
            return 0;
        }
        py_ws(py);
        if (strcmp(key, "descr") == 0 && !has_descr) {
            has_descr = 1;
            if (py->p < py->end && *py->p == '[') {
                rt_io_error(py->err, py->errlen, py->what,
                            "structured dtypes are not supported (only plain numeric arrays)");
                return 0;
            }
            if (!py_str(py, descr, sizeof descr)) return 0;
            int found = 0;
            for (size_t i = 0; i < sizeof npy_dtypes / sizeof npy_dtypes[0]; i++)
                if (strcmp(descr, npy_dtypes[i].descr) == 0) {
                    *dtype = npy_dtypes[i].dtype;
                    found = 1;
                }
            if (!found) {
                if (descr[0] == '>')
                    rt_io_error(py->err, py->errlen, py->what,
                                "big-endian dtype '%s' is not supported", descr);
                else
                    rt_io_error(
                        py->err, py->errlen, py->what,
                        "unsupported dtype '%s' (supported: <f4 <f8 <f2 |u1 |i1 |b1 <i4 <i8)",
                        descr);
                return 0;
            }
        } else if (strcmp(key, "fortran_order") == 0 && !has_order) {
            has_order = 1;
            if (py_word(py, "True")) {
                rt_io_error(py->err, py->errlen, py->what,
                            "fortran_order True is not supported (save a C-contiguous array)");
                return 0;
            }
            if (!py_word(py, "False")) {
                py_fail(py, "fortran_order must be True or False");
                return 0;
            }
        } else if (strcmp(key, "shape") == 0 && !has_shape) {
            has_shape = 1;
            if (!py_shape(py, dims, rank)) return 0;
        } else {
            int dup =
                !strcmp(key, "descr") || !strcmp(key, "fortran_order") || !strcmp(key, "shape");
            rt_io_error(
                py->err, py->errlen, py->what,
                dup ? "bad header: duplicate key '%s'"
                    : "bad header: unexpected key '%s' (allowed: descr, fortran_order, shape)",
                key);
            return 0;
        }
        if (py_eat(py, '}')) break;
        if (!py_eat(py, ',')) {
            py_fail(py, "expected ',' or '}'");
            return 0;
        }
    }
    py_ws(py);
    if (py->p != py->end) {
        py_fail(py, "unexpected text after the header dict");
        return 0;
    }
    const char *missing = !has_descr   ? "descr"
                          : !has_order ? "fortran_order"
                          : !has_shape ? "shape"
                                       : NULL;
    if (missing) {
        rt_io_error(py->err, py->errlen, py->what, "bad header: missing key '%s'", missing);
        return 0;
    }
    return 1;
}

/* a header longer than this is refused (numpy writes a few hundred bytes; np.load itself refuses
 * more than 10,000 unless told otherwise) */
enum { NPY_MAX_HEADER = 1 << 20 };

/* The magic, version and header length at the start of b: 1 with *start and *hlen, 0 if len is
 * too short to say, -1 if the bytes are not a .npy file of a known version. */
static int
npy_prefix(const unsigned char *b, size_t len, size_t *start, uint64_t *hlen)
{
    if (memcmp(b, npy_magic, len < 6 ? len : 6) != 0) return -1;
    if (len < 8) return 0;
    int major = b[6], minor = b[7];
    if (!(major == 1 || major == 2 || major == 3) || minor != 0) return -1;
    *start = major == 1 ? 10 : 12;
    if (len < *start) return 0;
    *hlen = major == 1 ? ld16(b + 8) : ld32(b + 8);
    return 1;
}

/* the shape's element count, the first dimension cut to max_rows (> 0); -1 past 2^34 */
static int64_t
npy_numel(int rank, int64_t *dims, int64_t max_rows)
{
    if (max_rows > 0 && rank > 0 && dims[0] > max_rows) dims[0] = max_rows;
    int64_t numel = 1;
    for (int i = 0; i < rank; i++)
        if (dims[i] > RT_MAX_NUMEL) return -1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] == 0) return 0;
        if (numel > RT_MAX_NUMEL / dims[i]) return -1;
        numel *= dims[i];
    }
    return numel;
}

/* RtSizeProbe of .npy: the header and the data its shape and dtype claim (of the first
 * *(const int64_t *)ctx rows, if that is > 0) */
static int
npy_probe(const unsigned char *b, size_t n, const void *ctx, uint64_t *total)
{
    size_t start;
    uint64_t hlen;
    int k = npy_prefix(b, n, &start, &hlen);
    if (k == 0) return 1;
    if (k < 0 || hlen > NPY_MAX_HEADER) {
        *total = n; /* not one this reads: the parser says why */
        return 0;
    }
    if (n < start + hlen) return 1;
    PyLit py = {b + start, b + start, b + start + hlen, "", NULL, 0};
    RtDType dtype = RT_F32;
    int rank = 0;
    int64_t dims[RT_MAX_RANK];
    int64_t numel = npy_header(&py, &dtype, &rank, dims) ? npy_numel(rank, dims, *(const int64_t *)ctx)
                                                         : -1;
    *total = numel < 0 ? n : start + hlen + (uint64_t)numel * rt_dtype_size(dtype);
    return 0;
}

/* rt_npy_parse of the first max_rows rows (> 0; 0: all) */
static int
npy_parse(const void *buf, size_t len, const char *what, int64_t max_rows, RtTensor *out,
          char *err, size_t errlen)
{
    const unsigned char *b = buf;
    memset(out, 0, sizeof *out);
    if (err && errlen) err[0] = 0;
    size_t start = 0;
    uint64_t hlen = 0;
    int k = npy_prefix(b, len, &start, &hlen);
    if (k <= 0) {
        if (len >= 8 && !memcmp(b, npy_magic, 6))
            rt_io_error(err, errlen, what, "unsupported .npy format version %d.%d", b[6], b[7]);
        else
            rt_io_error(err, errlen, what,
                        k == 0 ? "file is %zu bytes, too short for a .npy header"
                               : "not a .npy file (bad magic; %zu bytes)",
                        len);
        return 1;
    }
    if (hlen > NPY_MAX_HEADER) {
        rt_io_error(err, errlen, what, "header length %llu is more than the %d bytes read for it",
                    (unsigned long long)hlen, NPY_MAX_HEADER);
        return 1;
    }
    if (hlen > len - start) {
        rt_io_error(err, errlen, what, "header length %llu exceeds the %zu bytes after it",
                    (unsigned long long)hlen, len - start);
        return 1;
    }
    PyLit py = {b + start, b + start, b + start + hlen, what, err, errlen};
    RtDType dtype = RT_F32;
    int rank = 0;
    int64_t dims[RT_MAX_RANK];
    if (!npy_header(&py, &dtype, &rank, dims)) return 1;
    for (int i = max_rows > 0 ? 1 : 0; i < rank; i++)
        if (dims[i] > RT_MAX_NUMEL) {
            rt_io_error(err, errlen, what, "dimension %d of the shape is above 2^34", i);
            return 1;
        }
    int64_t numel = npy_numel(rank, dims, max_rows);
    if (numel < 0) {
        rt_io_error(err, errlen, what, "shape has more than 2^34 elements");
        return 1;
    }
    size_t avail = len - start - (size_t)hlen;
    uint64_t need = (uint64_t)numel * rt_dtype_size(dtype);
    if (need > avail) {
        rt_io_error(err, errlen, what,
                    "data is %zu bytes but the shape and dtype %s need %llu (file truncated?)",
                    avail, npy_descr(dtype), (unsigned long long)need);
        return 1;
    }
    float *data = malloc(numel > 0 ? (size_t)numel * sizeof(float) : sizeof(float));
    if (!data) {
        rt_io_error(err, errlen, what, "out of memory for %lld elements", (long long)numel);
        return 1;
    }
    rt_decode_le(dtype, b + start + hlen, numel, data);
    out->name = NULL;
    out->dtype = dtype;
    out->rank = rank;
    for (int i = 0; i < rank; i++)
        out->dims[i] = dims[i];
    out->numel = numel;
    out->data = data;
    return 0;
}

int
rt_npy_parse(const void *buf, size_t len, const char *what, RtTensor *out, char *err, size_t errlen)
{
    return npy_parse(buf, len, what, 0, out, err, errlen);
}

int
rt_npy_read(const char *path, const RtReadLimit *lim, RtTensor *out, char *err, size_t errlen)
{
    unsigned char *buf;
    size_t len;
    memset(out, 0, sizeof *out);
    int64_t max_rows = lim ? lim->max_rows : 0;
    if (rt_read_file_probed(path, lim, npy_probe, &max_rows, &buf, &len, err, errlen)) return 1;
    int rc = npy_parse(buf, len, path, max_rows, out, err, errlen);
    free(buf);
    return rc;
}

/* ---- .npy writer ---- */

/* float to a stored integer: NaN -> 0, clamp to [lo, hi], truncate toward zero */
static int
npy_cast(float v, int lo, int hi)
{
    if (isnan(v)) return 0;
    if (v <= (float)lo) return lo;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* The header exactly as numpy.save (format 1.0) writes it: the sorted dict repr, spare spaces so
 * the first axis can grow to 21 digits in place, padding to a multiple of 64 and a newline. */
static int
npy_encode(RtDType dtype, int rank, const int64_t *dims, const float *data, unsigned char **out,
           size_t *outlen, const char *what, char *err, size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    if (dtype != RT_F32 && dtype != RT_U8 && dtype != RT_I8) {
        rt_io_error(err, errlen, what, "cannot write dtype %s to .npy (use f32, u8 or i8)",
                    rt_dtype_name(dtype));
        return 1;
    }
    if (rank < 0 || rank > RT_MAX_RANK || (rank > 0 && !dims)) {
        rt_io_error(err, errlen, what, "rank %d is outside 0..%d", rank, RT_MAX_RANK);
        return 1;
    }
    int64_t numel = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0 || dims[i] > RT_MAX_NUMEL || (dims[i] && numel > RT_MAX_NUMEL / dims[i])) {
            rt_io_error(err, errlen, what, "invalid dimension %lld", (long long)dims[i]);
            return 1;
        }
        numel *= dims[i];
    }
    if (numel > 0 && !data) {
        rt_io_error(err, errlen, what, "no data");
        return 1;
    }

    char h[512];
    size_t k = (size_t)snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                                npy_descr(dtype));
    for (int i = 0; i < rank; i++)
        k += (size_t)snprintf(h + k, sizeof h - k, "%s%lld", i ? ", " : "", (long long)dims[i]);
    k += (size_t)snprintf(h + k, sizeof h - k, "%s), }", rank == 1 ? "," : "");
    if (rank > 0) {
        char first[32];
        int digits = snprintf(first, sizeof first, "%lld", (long long)dims[0]);
        for (int i = digits; i < 21; i++)
            h[k++] = ' ';
    }
    /* total = 6 magic + 2 version + 2 length + header + newline, padded to 64 (1..64 spaces) */
    size_t pad = 64 - ((10 + k + 1) % 64);
    memset(h + k, ' ', pad);
    k += pad;
    h[k++] = '\n';

    size_t esize = rt_dtype_size(dtype);
    size_t total = 10 + k + (size_t)numel * esize;
    unsigned char *b = malloc(total);
    if (!b) {
        rt_io_error(err, errlen, what, "out of memory for %zu bytes", total);
        return 1;
    }
    memcpy(b, npy_magic, 6);
    b[6] = 1;
    b[7] = 0;
    st16(b + 8, (unsigned)k);
    memcpy(b + 10, h, k);
    unsigned char *d = b + 10 + k;
    for (int64_t i = 0; i < numel; i++) {
        if (dtype == RT_F32) {
            uint32_t u;
            memcpy(&u, &data[i], 4);
            st32(d + 4 * i, u);
        } else if (dtype == RT_U8)
            d[i] = (unsigned char)npy_cast(data[i], 0, 255);
        else
            d[i] = (unsigned char)(int8_t)npy_cast(data[i], -128, 127);
    }
    *out = b;
    *outlen = total;
    return 0;
}

int
rt_npy_encode(RtDType dtype, int rank, const int64_t *dims, const float *data, unsigned char **buf,
              size_t *len, char *err, size_t errlen)
{
    return npy_encode(dtype, rank, dims, data, buf, len, "npy", err, errlen);
}

int
rt_npy_write(const char *path, RtDType dtype, int rank, const int64_t *dims, const float *data,
             char *err, size_t errlen)
{
    unsigned char *buf;
    size_t len;
    if (npy_encode(dtype, rank, dims, data, &buf, &len, path, err, errlen)) return 1;
    int rc = rt_write_file(path, buf, len, err, errlen);
    free(buf);
    return rc;
}

/* ---- .npz: ZIP archives of .npy members ---- */

#define ZIP_LOCAL_SIG 0x04034b50u
#define ZIP_CENTRAL_SIG 0x02014b50u
#define ZIP_EOCD_SIG 0x06054b50u
#define ZIP64_EOCD_SIG 0x06064b50u
#define ZIP64_LOCATOR_SIG 0x07064b50u
/* deflate cannot expand data by more than about 1032:1, so larger claims are corrupt */
#define ZIP_MAX_RATIO 1032u

static uLong
crc32_big(const unsigned char *p, size_t n)
{
    uLong c = crc32(0L, Z_NULL, 0);
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return c;
}

/* raw deflate of exactly usize bytes into a new buffer */
static int
inflate_member(const unsigned char *src, size_t csize, size_t usize, unsigned char **out,
               const char *what, char *err, size_t errlen)
{
    *out = NULL;
    unsigned char *dst = malloc(usize ? usize : 1);
    if (!dst) {
        rt_io_error(err, errlen, what, "out of memory for %zu bytes", usize);
        return 1;
    }
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) {
        free(dst);
        rt_io_error(err, errlen, what, "zlib inflateInit2 failed");
        return 1;
    }
    size_t in_left = csize, out_left = usize;
    zs.next_in = (Bytef *)src;
    zs.next_out = dst;
    const char *problem = NULL;
    for (;;) {
        /* zlib counts in uInt, so feed both sides in chunks of at most 1 GiB */
        if (zs.avail_in == 0 && in_left > 0) {
            zs.avail_in = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
            in_left -= zs.avail_in;
        }
        if (zs.avail_out == 0 && out_left > 0) {
            zs.avail_out = out_left > (1u << 30) ? (1u << 30) : (uInt)out_left;
            out_left -= zs.avail_out;
        }
        int zr = inflate(&zs, Z_NO_FLUSH);
        if (zr == Z_STREAM_END) break;
        if (zr == Z_OK) continue; /* progress was made */
        if (zr == Z_BUF_ERROR && zs.avail_out == 0 && out_left == 0)
            problem = "inflates to more bytes than the directory says";
        else if (zr == Z_BUF_ERROR)
            problem = "compressed data is truncated";
        else
            problem = zs.msg ? zs.msg : "corrupt compressed data";
        break;
    }
    size_t produced = usize - out_left - zs.avail_out;
    if (problem) {
        rt_io_error(err, errlen, what, "%s%s", problem == zs.msg ? "corrupt compressed data: " : "",
                    problem);
        inflateEnd(&zs);
        free(dst);
        return 1;
    }
    inflateEnd(&zs);
    if (produced != usize) {
        free(dst);
        rt_io_error(err, errlen, what, "inflated to %zu bytes but the directory says %zu", produced,
                    usize);
        return 1;
    }
    *out = dst;
    return 0;
}

typedef struct {
    uint64_t csize, usize, offset;
    uint32_t crc;
    unsigned method, flags;
    const unsigned char *name;
    size_t nlen;
} ZipEntry;

/* finds the central directory: the last end record whose comment fits, then zip64 if flagged */
static int
zip_directory(const unsigned char *b, size_t len, uint64_t *cd_off, uint64_t *cd_size,
              uint64_t *count, size_t *cd_limit, const char *what, char *err, size_t errlen)
{
    if (len < 22) {
        rt_io_error(err, errlen, what, "file is %zu bytes, too short for a ZIP archive", len);
        return 1;
    }
    size_t lo = len - 22 > 65535 ? len - 22 - 65535 : 0;
    size_t eocd = SIZE_MAX;
    for (size_t i = len - 22 + 1; i-- > lo;) {
        if (ld32(b + i) == ZIP_EOCD_SIG && i + 22 + ld16(b + i + 20) <= len) {
            eocd = i;
            break;
        }
    }
    if (eocd == SIZE_MAX) {
        rt_io_error(err, errlen, what, "not a ZIP archive (no end of central directory record)");
        return 1;
    }
    const unsigned char *e = b + eocd;
    if (ld16(e + 4) != 0 || ld16(e + 6) != 0) {
        rt_io_error(err, errlen, what, "multi-disk ZIP archives are not supported");
        return 1;
    }
    *count = ld16(e + 10);
    *cd_size = ld32(e + 12);
    *cd_off = ld32(e + 16);
    *cd_limit = eocd;
    if (*count == 0xffff || *cd_size == 0xffffffffu || *cd_off == 0xffffffffu) {
        if (eocd < 20 || ld32(b + eocd - 20) != ZIP64_LOCATOR_SIG) {
            rt_io_error(err, errlen, what, "zip64 end record locator missing");
            return 1;
        }
        uint64_t z = ld64(b + eocd - 20 + 8);
        if (z > eocd - 20 || eocd - 20 - z < 56 || ld32(b + z) != ZIP64_EOCD_SIG) {
            rt_io_error(err, errlen, what, "zip64 end of central directory record is corrupt");
            return 1;
        }
        *count = ld64(b + z + 32);
        *cd_size = ld64(b + z + 40);
        *cd_off = ld64(b + z + 48);
        *cd_limit = (size_t)z;
    }
    if (*cd_off > *cd_limit || *cd_size > *cd_limit - *cd_off) {
        rt_io_error(err, errlen, what,
                    "central directory [%llu, +%llu) lies outside the archive (%zu bytes)",
                    (unsigned long long)*cd_off, (unsigned long long)*cd_size, len);
        return 1;
    }
    if (*count > *cd_size / 46) {
        rt_io_error(err, errlen, what, "central directory claims %llu entries in %llu bytes",
                    (unsigned long long)*count, (unsigned long long)*cd_size);
        return 1;
    }
    return 0;
}

/* one central directory header at *pos; advances *pos */
static int
zip_entry(const unsigned char *b, size_t *pos, size_t end, ZipEntry *ze, const char *what,
          char *err, size_t errlen)
{
    size_t p = *pos;
    if (end - p < 46 || ld32(b + p) != ZIP_CENTRAL_SIG) {
        rt_io_error(err, errlen, what, "corrupt central directory entry at byte %zu", p);
        return 1;
    }
    ze->flags = ld16(b + p + 8);
    ze->method = ld16(b + p + 10);
    ze->crc = ld32(b + p + 16);
    ze->csize = ld32(b + p + 20);
    ze->usize = ld32(b + p + 24);
    size_t nlen = ld16(b + p + 28), xlen = ld16(b + p + 30), clen = ld16(b + p + 32);
    ze->offset = ld32(b + p + 42);
    if (end - p - 46 < nlen + xlen + clen) {
        rt_io_error(err, errlen, what, "corrupt central directory entry at byte %zu", p);
        return 1;
    }
    ze->name = b + p + 46;
    ze->nlen = nlen;
    /* zip64 extra: the 64-bit values appear only for the fields that hold 0xffffffff */
    const unsigned char *x = b + p + 46 + nlen, *xend = x + xlen;
    while (xend - x >= 4) {
        unsigned id = ld16(x), sz = ld16(x + 2);
        if ((size_t)(xend - x - 4) < sz) break;
        if (id == 0x0001) {
            const unsigned char *f = x + 4, *fend = x + 4 + sz;
            uint64_t *fields[3] = {&ze->usize, &ze->csize, &ze->offset};
            for (int i = 0; i < 3; i++) {
                if (*fields[i] != 0xffffffffu) continue;
                if (fend - f < 8) {
                    rt_io_error(err, errlen, what, "corrupt zip64 extra field at byte %zu", p);
                    return 1;
                }
                *fields[i] = ld64(f);
                f += 8;
            }
        }
        x += 4 + sz;
    }
    *pos = p + 46 + nlen + xlen + clen;
    return 0;
}

static int
cmp_tensor_name(const void *a, const void *b)
{
    const RtTensor *x = *(const RtTensor *const *)a, *y = *(const RtTensor *const *)b;
    return strcmp(x->name, y->name);
}

/* rt_npz_parse, its members inflating to at most max_out bytes together */
static int
npz_parse(const void *buf, size_t len, const char *what, uint64_t max_out, RtTensorSet *out,
          char *err, size_t errlen)
{
    const unsigned char *b = buf;
    uint64_t inflated = 0;
    out->tensors = NULL;
    out->ntensors = 0;
    if (err && errlen) err[0] = 0;
    uint64_t cd_off, cd_size, count;
    size_t cd_limit;
    if (zip_directory(b, len, &cd_off, &cd_size, &count, &cd_limit, what, err, errlen)) return 1;
    RtTensor *ts = calloc(count > 0 ? (size_t)count : 1, sizeof *ts);
    if (!ts) {
        rt_io_error(err, errlen, what, "out of memory for %llu members", (unsigned long long)count);
        return 1;
    }
    int n = 0;
    size_t pos = (size_t)cd_off, cd_end = (size_t)(cd_off + cd_size);
    char mwhat[320];
    for (uint64_t i = 0; i < count; i++) {
        ZipEntry ze;
        if (zip_entry(b, &pos, cd_end, &ze, what, err, errlen)) goto fail;
        snprintf(mwhat, sizeof mwhat, "%s: member '%.*s'", what,
                 (int)(ze.nlen > 200 ? 200 : ze.nlen), (const char *)ze.name);
        if (ze.nlen < 5 || memcmp(ze.name + ze.nlen - 4, ".npy", 4) != 0 ||
            memchr(ze.name, 0, ze.nlen)) {
            rt_io_error(err, errlen, mwhat,
                        "not a .npy member (an .npz holds only NAME.npy files)");
            goto fail;
        }
        if (ze.flags & 1) {
            rt_io_error(err, errlen, mwhat, "encrypted members are not supported");
            goto fail;
        }
        if (ze.method != 0 && ze.method != 8) {
            rt_io_error(err, errlen, mwhat,
                        "compression method %u is not supported (only stored and deflate)",
                        ze.method);
            goto fail;
        }
        /* the local header repeats the name and has its own extra field; data follows it */
        if (ze.offset > len || len - ze.offset < 30 || ld32(b + ze.offset) != ZIP_LOCAL_SIG) {
            rt_io_error(err, errlen, mwhat, "local header at byte %llu is missing or corrupt",
                        (unsigned long long)ze.offset);
            goto fail;
        }
        size_t lh = (size_t)ze.offset;
        size_t skip = 30 + (size_t)ld16(b + lh + 26) + ld16(b + lh + 28);
        if (len - lh < skip || len - lh - skip < ze.csize) {
            rt_io_error(err, errlen, mwhat, "data [%zu, +%llu) runs past the end of the archive",
                        lh + skip, (unsigned long long)ze.csize);
            goto fail;
        }
        const unsigned char *src = b + lh + skip;
        unsigned char *plain = NULL;
        const unsigned char *npy = src;
        if (ze.method == 0) {
            if (ze.usize != ze.csize) {
                rt_io_error(err, errlen, mwhat,
                            "stored member has size %llu but %llu bytes of data",
                            (unsigned long long)ze.usize, (unsigned long long)ze.csize);
                goto fail;
            }
        } else {
            if (ze.usize > (uint64_t)ze.csize * ZIP_MAX_RATIO + 1024 ||
                ze.usize > (uint64_t)RT_MAX_NUMEL * 8 + 65536) {
                rt_io_error(err, errlen, mwhat,
                            "claims %llu bytes from %llu compressed bytes, which deflate cannot do",
                            (unsigned long long)ze.usize, (unsigned long long)ze.csize);
                goto fail;
            }
            if ((inflated += ze.usize) > max_out) {
                char m[32];
                rt_format_bytes(max_out, m, sizeof m);
                rt_io_error(err, errlen, mwhat, "the members claim more than the %s read for the "
                            "file, inflated", m);
                goto fail;
            }
            if (inflate_member(src, (size_t)ze.csize, (size_t)ze.usize, &plain, mwhat, err, errlen))
                goto fail;
            npy = plain;
        }
        if (crc32_big(npy, (size_t)ze.usize) != ze.crc) {
            free(plain);
            rt_io_error(err, errlen, mwhat, "CRC-32 mismatch (archive corrupt)");
            goto fail;
        }
        int rc = rt_npy_parse(npy, (size_t)ze.usize, mwhat, &ts[n], err, errlen);
        free(plain);
        if (rc) goto fail;
        ts[n].name = malloc(ze.nlen - 3);
        if (!ts[n].name) {
            rt_tensor_free(&ts[n]);
            rt_io_error(err, errlen, mwhat, "out of memory");
            goto fail;
        }
        memcpy(ts[n].name, ze.name, ze.nlen - 4);
        ts[n].name[ze.nlen - 4] = 0;
        n++;
    }
    if (n > 1) {
        const RtTensor **ix = malloc((size_t)n * sizeof *ix);
        if (!ix) {
            rt_io_error(err, errlen, what, "out of memory");
            goto fail;
        }
        for (int i = 0; i < n; i++)
            ix[i] = &ts[i];
        qsort(ix, (size_t)n, sizeof *ix, cmp_tensor_name);
        for (int i = 1; i < n; i++)
            if (strcmp(ix[i - 1]->name, ix[i]->name) == 0) {
                rt_io_error(err, errlen, what, "member '%s.npy' appears twice", ix[i]->name);
                free(ix);
                goto fail;
            }
        free(ix);
    }
    out->tensors = ts;
    out->ntensors = n;
    return 0;
fail:
    for (int i = 0; i < n; i++)
        rt_tensor_free(&ts[i]);
    free(ts);
    return 1;
}

int
rt_npz_parse(const void *buf, size_t len, const char *what, RtTensorSet *out, char *err,
             size_t errlen)
{
    return npz_parse(buf, len, what, rt_read_ceiling(), out, err, errlen);
}

/* RtSizeProbe of .npz: a ZIP archive (its directory is at its end: read whole); anything else
 * stops at its first bytes */
static int
npz_probe(const unsigned char *b, size_t n, const void *ctx, uint64_t *total)
{
    (void)ctx;
    if (n < 4) return 1;
    bool is_zip = b[0] == 'P' && b[1] == 'K' && ((b[2] == 3 && b[3] == 4) || (b[2] == 5 && b[3] == 6));
    *total = is_zip ? RT_SIZE_UNKNOWN : n;
    return 0;
}

int
rt_npz_read(const char *path, const RtReadLimit *lim, RtTensorSet *out, char *err, size_t errlen)
{
    unsigned char *buf;
    size_t len;
    out->tensors = NULL;
    out->ntensors = 0;
    if (rt_read_file_probed(path, lim, npz_probe, NULL, &buf, &len, err, errlen)) return 1;
    int rc = npz_parse(buf, len, path, lim && lim->max_bytes ? lim->max_bytes : rt_read_ceiling(),
                       out, err, errlen);
    free(buf);
    return rc;
}

/* Stored (uncompressed) members like numpy.savez, with a fixed 1980-01-01 timestamp so equal inputs
 * give equal files; no zip64, so the archive must stay below 4 GiB. */
int
rt_npz_write(const char *path, const RtTensor *ts, int n, char *err, size_t errlen)
{
    if (n < 0 || n > 65535 || (n > 0 && !ts)) {
        rt_io_error(err, errlen, path, "invalid tensor count %d", n);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        if (!ts[i].name || !ts[i].name[0] || strlen(ts[i].name) > 65535 - 4) {
            rt_io_error(err, errlen, path, "tensor %d needs a name of 1..65531 bytes", i);
            return 1;
        }
        for (int k = 0; k < i; k++)
            if (strcmp(ts[k].name, ts[i].name) == 0) {
                rt_io_error(err, errlen, path, "tensor '%s' appears twice", ts[i].name);
                return 1;
            }
    }
    unsigned char *zip = NULL, *cd = NULL;
    size_t zn = 0, cdn = 0;
    int rc = 1;
    for (int i = 0; i < n; i++) {
        unsigned char *npy;
        size_t npylen;
        char mwhat[300];
        snprintf(mwhat, sizeof mwhat, "%s: tensor '%.200s'", path, ts[i].name);
        if (rt_tensor_check(&ts[i], mwhat, err, errlen) ||
            npy_encode(ts[i].dtype, ts[i].rank, ts[i].dims, ts[i].data, &npy, &npylen, mwhat, err,
                       errlen))
            goto done;
        size_t nlen = strlen(ts[i].name) + 4;
        int is_utf8 = 0;
        for (const char *c = ts[i].name; *c; c++)
            if ((unsigned char)*c >= 0x80) is_utf8 = 1;
        size_t add = 30 + nlen + npylen;
        if (npylen > 0xfffffffeu || zn + add > 0xfffffffeu) {
            free(npy);
            rt_io_error(err, errlen, path, "archive would exceed 4 GiB (zip64 is not written)");
            goto done;
        }
        unsigned char *nz = realloc(zip, zn + add);
        unsigned char *ncd = nz ? realloc(cd, cdn + 46 + nlen) : NULL;
        if (nz) zip = nz;
        if (ncd) cd = ncd;
        if (!nz || !ncd) {
            free(npy);
            rt_io_error(err, errlen, path, "out of memory");
            goto done;
        }
        uint32_t crc = (uint32_t)crc32_big(npy, npylen);
        unsigned char *l = zip + zn;
        st32(l, ZIP_LOCAL_SIG);
        st16(l + 4, 20);                  /* version needed: 2.0 */
        st16(l + 6, is_utf8 ? 0x800 : 0); /* bit 11: names are UTF-8 */
        st16(l + 8, 0);                   /* stored */
        st16(l + 10, 0);                  /* 00:00:00 */
        st16(l + 12, 0x21);               /* 1980-01-01 */
        st32(l + 14, crc);
        st32(l + 18, (uint32_t)npylen);
        st32(l + 22, (uint32_t)npylen);
        st16(l + 26, (unsigned)nlen);
        st16(l + 28, 0);
        memcpy(l + 30, ts[i].name, nlen - 4);
        memcpy(l + 30 + nlen - 4, ".npy", 4);
        memcpy(l + 30 + nlen, npy, npylen);
        free(npy);

        unsigned char *c = cd + cdn;
        st32(c, ZIP_CENTRAL_SIG);
        st16(c + 4, 0x0314);          /* made by: Unix, 2.0 */
        memcpy(c + 6, l + 4, 26);     /* version needed .. name length, as in the local header */
        st16(c + 30, 0);              /* extra */
        st16(c + 32, 0);              /* comment */
        st16(c + 34, 0);              /* disk */
        st16(c + 36, 0);              /* internal attributes */
        st32(c + 38, 0100644u << 16); /* regular file, rw-r--r-- */
        st32(c + 42, (uint32_t)zn);
        memcpy(c + 46, l + 30, nlen);
        cdn += 46 + nlen;
        zn += add;
    }
    {
        if (zn + cdn + 22 > 0xfffffffeu) {
            rt_io_error(err, errlen, path, "archive would exceed 4 GiB (zip64 is not written)");
            goto done;
        }
        unsigned char *nz = realloc(zip, zn + cdn + 22);
        if (!nz) {
            rt_io_error(err, errlen, path, "out of memory");
            goto done;
        }
        zip = nz;
        if (cdn) memcpy(zip + zn, cd, cdn);
        unsigned char *e = zip + zn + cdn;
        st32(e, ZIP_EOCD_SIG);
        st16(e + 4, 0);
        st16(e + 6, 0);
        st16(e + 8, (unsigned)n);
        st16(e + 10, (unsigned)n);
        st32(e + 12, (uint32_t)cdn);
        st32(e + 16, (uint32_t)zn);
        st16(e + 20, 0);
        rc = rt_write_file(path, zip, zn + cdn + 22, err, errlen);
    }
done:
    free(zip);
    free(cd);
    return rc;
}
