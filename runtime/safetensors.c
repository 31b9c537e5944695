/* safetensors.c: the safetensors format (a strict hand-written parser for its JSON header, the
 * reader, and a writer byte-identical to the reference serializer), plus the tensor, tensor-set and
 * whole-file helpers the other readers share.
 * Must not trust any size or offset before checking it against the bytes present, and must not
 * allocate from a claimed size: every allocation is bounded by the input's length. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "runtime/tensor_io.h"
#include "runtime/f16.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* the reference implementation refuses headers above 100 MB */
#define ST_MAX_HEADER 100000000u

/* ---- tensors, sets, errors, files ---- */

const char *
rt_dtype_name(RtDType t)
{
    switch (t) {
    case RT_F32:
        return "f32";
    case RT_F16:
        return "f16";
    case RT_BF16:
        return "bf16";
    case RT_F64:
        return "f64";
    case RT_U8:
        return "u8";
    case RT_I8:
        return "i8";
    case RT_I32:
        return "i32";
    case RT_I64:
        return "i64";
    case RT_BOOL:
        return "bool";
    }
    return "?";
}

size_t
rt_dtype_size(RtDType t)
{
    switch (t) {
    case RT_F32:
        return 4;
    case RT_F16:
        return 2;
    case RT_BF16:
        return 2;
    case RT_F64:
        return 8;
    case RT_U8:
        return 1;
    case RT_I8:
        return 1;
    case RT_I32:
        return 4;
    case RT_I64:
        return 8;
    case RT_BOOL:
        return 1;
    }
    return 0;
}

int
rt_tensor_init(RtTensor *t, const char *name, int rank, const int64_t *dims, char *err,
               size_t errlen)
{
    memset(t, 0, sizeof *t);
    const char *what = name ? name : "tensor";
    if (rank < 0 || rank > RT_MAX_RANK) {
        rt_io_error(err, errlen, what, "rank %d is outside 0..%d", rank, RT_MAX_RANK);
        return 1;
    }
    int64_t numel = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0 || dims[i] > RT_MAX_NUMEL) {
            rt_io_error(err, errlen, what, "dimension %d is %lld, outside 0..2^34", i,
                        (long long)dims[i]);
            return 1;
        }
        numel *= dims[i];
        if (numel > RT_MAX_NUMEL) {
            rt_io_error(err, errlen, what, "shape has more than 2^34 elements");
            return 1;
        }
    }
    t->data = calloc(numel > 0 ? (size_t)numel : 1, sizeof(float));
    t->name = name ? strdup(name) : NULL;
    if (!t->data || (name && !t->name)) {
        free(t->data);
        free(t->name);
        memset(t, 0, sizeof *t);
        rt_io_error(err, errlen, what, "out of memory for %lld elements", (long long)numel);
        return 1;
    }
    t->dtype = RT_F32;
    t->rank = rank;
    for (int i = 0; i < rank; i++)
        t->dims[i] = dims[i];
    t->numel = numel;
    return 0;
}

void
rt_tensor_free(RtTensor *t)
{
    if (!t) return;
    free(t->name);
    free(t->data);
    memset(t, 0, sizeof *t);
}

int64_t
rt_count_nonfinite(const float *x, int64_t n, int64_t *first)
{
    int64_t count = 0;
    *first = -1;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            if (!count) *first = i;
            count++;
        }
    return count;
}

const RtTensor *
rt_tensorset_find(const RtTensorSet *s, const char *name)
{
    if (!s || !name) return NULL;
    for (int i = 0; i < s->ntensors; i++)
        if (s->tensors[i].name && strcmp(s->tensors[i].name, name) == 0) return &s->tensors[i];
    return NULL;
}

void
rt_tensorset_free(RtTensorSet *s)
{
    if (!s) return;
    for (int i = 0; i < s->ntensors; i++)
        rt_tensor_free(&s->tensors[i]);
    free(s->tensors);
    s->tensors = NULL;
    s->ntensors = 0;
}

/* ---- little-endian loads and element conversion ---- */

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

void
rt_decode_le(RtDType t, const void *bytes, int64_t n, float *dst)
{
    const unsigned char *src = bytes;
    switch (t) {
    case RT_F32:
        for (int64_t i = 0; i < n; i++)
            dst[i] = rt_bits_f32(ld32(src + 4 * i));
        break;
    case RT_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = rt_f16_to_f32(ld16(src + 2 * i));
        break;
    case RT_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = rt_bf16_to_f32(ld16(src + 2 * i));
        break;
    case RT_F64:
        for (int64_t i = 0; i < n; i++) {
            uint64_t u = ld64(src + 8 * i);
            double d;
            memcpy(&d, &u, sizeof d);
            dst[i] = (float)d;
        }
        break;
    case RT_U8:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)src[i];
        break;
    case RT_I8:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)(int8_t)src[i];
        break;
    case RT_I32:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)(int32_t)ld32(src + 4 * i);
        break;
    case RT_I64:
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)(int64_t)ld64(src + 8 * i);
        break;
    case RT_BOOL:
        for (int64_t i = 0; i < n; i++)
            dst[i] = src[i] ? 1.0f : 0.0f;
        break;
    }
}

/* ---- strict JSON for the safetensors header ----
 * header  = ws object ws            (trailing spaces are the reference writer's padding)
 * object  = '{' ws [ member { ws ',' ws member } ] ws '}'
 * member  = string ws ':' ws value
 * value   = object | array | string | integer      (no floats, true, false or null)
 * array   = '[' ws [ value { ws ',' ws value } ] ws ']'
 * integer = [ '-' ] ( '0' | [1-9] [0-9]* )         (must fit in int64)
 * The schema is checked while parsing: the top level maps names to tensor objects with exactly the
 * keys dtype (string), shape (array of integers) and data_offsets (array of two integers), plus an
 * optional "__metadata__" object of strings. */

typedef struct {
    const unsigned char *s, *p, *end;
    const char *what;
    char *err;
    size_t errlen;
    int failed;
} Json;

static void
json_fail(Json *j, const char *msg)
{
    if (j->failed) return;
    j->failed = 1;
    if (j->p >= j->end)
        rt_io_error(j->err, j->errlen, j->what, "bad JSON in header: %s at end of header", msg);
    else if (*j->p >= 0x21 && *j->p <= 0x7e)
        rt_io_error(j->err, j->errlen, j->what, "bad JSON in header at byte %zu: %s, found '%c'",
                    (size_t)(j->p - j->s), msg, *j->p);
    else
        rt_io_error(j->err, j->errlen, j->what,
                    "bad JSON in header at byte %zu: %s, found byte 0x%02x", (size_t)(j->p - j->s),
                    msg, *j->p);
}

static void
json_ws(Json *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int
json_eat(Json *j, int c)
{
    json_ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return 1;
    }
    return 0;
}

/* length of a valid UTF-8 sequence at p (excluding overlongs and surrogates), or 0 */
static int
utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    int n;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else
        return 0;
    if (end - p < n) return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf) return 0;
    return n;
}

static int
hex4(const unsigned char *p, const unsigned char *end, unsigned *v)
{
    if (end - p < 4) return 0;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return 0;
        *v = *v << 4 | d;
    }
    return 1;
}

/* string = '"' { char | '\' escape } '"'; returns a malloc'd NUL-terminated UTF-8 copy */
static char *
json_string(Json *j)
{
    json_ws(j);
    if (j->p >= j->end || *j->p != '"') {
        json_fail(j, "expected a string");
        return NULL;
    }
    j->p++;
    /* the decoded form is never longer than the source */
    const unsigned char *q = j->p;
    while (q < j->end && *q != '"')
        q += (*q == '\\' && q + 1 < j->end) ? 2 : 1;
    char *out = malloc((size_t)(q - j->p) + 1);
    if (!out) {
        json_fail(j, "out of memory");
        return NULL;
    }
    size_t n = 0;
    for (;;) {
        if (j->p >= j->end) {
            json_fail(j, "unterminated string");
            goto bad;
        }
        unsigned c = *j->p;
        if (c == '"') {
            j->p++;
            break;
        }
        if (c < 0x20) {
            json_fail(j, "control character in string");
            goto bad;
        }
        if (c >= 0x80) {
            int k = utf8_len(j->p, j->end);
            if (!k) {
                json_fail(j, "invalid UTF-8 in string");
                goto bad;
            }
            memcpy(out + n, j->p, (size_t)k);
            n += (size_t)k;
            j->p += k;
            continue;
        }
        if (c != '\\') {
            out[n++] = (char)c;
            j->p++;
            continue;
        }
        if (j->p + 1 >= j->end) {
            j->p++;
            json_fail(j, "unterminated escape");
            goto bad;
        }
        unsigned e = j->p[1];
        j->p += 2;
        switch (e) {
        case '"':
            out[n++] = '"';
            continue;
        case '\\':
            out[n++] = '\\';
            continue;
        case '/':
            out[n++] = '/';
            continue;
        case 'b':
            out[n++] = '\b';
            continue;
        case 'f':
            out[n++] = '\f';
            continue;
        case 'n':
            out[n++] = '\n';
            continue;
        case 'r':
            out[n++] = '\r';
            continue;
        case 't':
            out[n++] = '\t';
            continue;
        case 'u':
            break;
        default:
            j->p -= 1;
            json_fail(j, "unknown escape in string");
            goto bad;
        }
        unsigned cp, lo;
        if (!hex4(j->p, j->end, &cp)) {
            json_fail(j, "\\u needs four hex digits");
            goto bad;
        }
        j->p += 4;
        if (cp >= 0xdc00 && cp <= 0xdfff) {
            json_fail(j, "unpaired low surrogate in \\u escape");
            goto bad;
        }
        if (cp >= 0xd800 && cp <= 0xdbff) {
            if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' ||
                !hex4(j->p + 2, j->end, &lo) || lo < 0xdc00 || lo > 0xdfff) {
                json_fail(j, "unpaired high surrogate in \\u escape");
                goto bad;
            }
            j->p += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        if (cp == 0) {
            json_fail(j, "\\u0000 is not allowed in names");
            goto bad;
        }
        /* 6 source bytes (12 for a pair) always cover the at most 4 output bytes */
        if (cp < 0x80)
            out[n++] = (char)cp;
        else if (cp < 0x800) {
            out[n++] = (char)(0xc0 | cp >> 6);
            out[n++] = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            out[n++] = (char)(0xe0 | cp >> 12);
            out[n++] = (char)(0x80 | (cp >> 6 & 0x3f));
            out[n++] = (char)(0x80 | (cp & 0x3f));
        } else {
            out[n++] = (char)(0xf0 | cp >> 18);
            out[n++] = (char)(0x80 | (cp >> 12 & 0x3f));
            out[n++] = (char)(0x80 | (cp >> 6 & 0x3f));
            out[n++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    out[n] = 0;
    return out;
bad:
    free(out);
    return NULL;
}

/* integer = [ '-' ] ( '0' | [1-9] [0-9]* ) */
static int
json_int(Json *j, int64_t *v)
{
    json_ws(j);
    const unsigned char *p = j->p;
    int neg = 0;
    if (p < j->end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= j->end || *p < '0' || *p > '9') {
        json_fail(j, "expected an integer");
        return 0;
    }
    uint64_t acc = 0;
    const unsigned char *digits = p;
    while (p < j->end && *p >= '0' && *p <= '9') {
        unsigned d = *p - '0';
        if (acc > (UINT64_MAX - d) / 10 || acc * 10 + d > (uint64_t)INT64_MAX + (uint64_t)neg) {
            json_fail(j, "integer does not fit in 64 bits");
            return 0;
        }
        acc = acc * 10 + d;
        p++;
    }
    if (*digits == '0' && p - digits > 1) {
        json_fail(j, "integer with a leading zero");
        return 0;
    }
    if (p < j->end && (*p == '.' || *p == 'e' || *p == 'E')) {
        j->p = p;
        json_fail(j, "only integers are allowed (no fractions or exponents)");
        return 0;
    }
    j->p = p;
    if (neg)
        *v = acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc;
    else
        *v = (int64_t)acc;
    return 1;
}

/* array of integers: '[' ws [ integer { ws ',' ws integer } ] ws ']'; stores up to max values and
 * sets *n to the count, failing with msg_toolong when there are more */
static int
json_int_array(Json *j, int64_t *vals, int max, int *n, int *too_long)
{
    *n = 0;
    *too_long = 0;
    if (!json_eat(j, '[')) {
        json_fail(j, "expected '['");
        return 0;
    }
    if (json_eat(j, ']')) return 1;
    for (;;) {
        int64_t v;
        if (!json_int(j, &v)) return 0;
        if (*n == max) {
            *too_long = 1;
            return 0;
        }
        vals[(*n)++] = v;
        if (json_eat(j, ']')) return 1;
        if (!json_eat(j, ',')) {
            json_fail(j, "expected ',' or ']' in array");
            return 0;
        }
    }
}

/* any value that is not part of the schema, named for the error message */
static const char *
json_kind_at(Json *j)
{
    json_ws(j);
    if (j->p >= j->end) return "nothing";
    switch (*j->p) {
    case '{':
        return "an object";
    case '[':
        return "an array";
    case '"':
        return "a string";
    case 't':
    case 'f':
        return "a boolean";
    case 'n':
        return "null";
    default:
        return (*j->p == '-' || (*j->p >= '0' && *j->p <= '9')) ? "a number" : "an invalid token";
    }
}

/* ---- safetensors reader ---- */

typedef struct {
    RtTensor t;
    int64_t begin, end;
} StEntry;

static const struct {
    const char *name;
    RtDType dtype;
} st_dtypes[] = {
    {"F32", RT_F32}, {"F16", RT_F16}, {"BF16", RT_BF16}, {"F64", RT_F64},   {"U8", RT_U8},
    {"I8", RT_I8},   {"I32", RT_I32}, {"I64", RT_I64},   {"BOOL", RT_BOOL},
};

/* dtypes the safetensors specification defines that this runtime does not load */
static const char *const st_unsupported[] = {
    "I16",         "U16",         "U32",     "U64",     "F8_E5M2", "F8_E4M3", "F8_E4M3FN",
    "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",      "C64",
};

static const char *
st_dtype_key(RtDType t)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (st_dtypes[i].dtype == t) return st_dtypes[i].name;
    return "?";
}

static void
fmt_shape(char *buf, size_t n, const int64_t *dims, int rank)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* Tensor object: '{' member* '}' with keys dtype, shape, data_offsets, each exactly once. */
static int
st_tensor(Json *j, StEntry *e)
{
    const char *nm = e->t.name;
    int has_dtype = 0, has_shape = 0, has_offsets = 0;
    if (!json_eat(j, '{')) {
        rt_io_error(j->err, j->errlen, j->what, "tensor '%s': expected an object, found %s", nm,
                    json_kind_at(j));
        j->failed = 1;
        return 0;
    }
    if (!json_eat(j, '}')) {
        for (;;) {
            char *key = json_string(j);
            if (!key) return 0;
            if (!json_eat(j, ':')) {
                free(key);
                json_fail(j, "expected ':' after key");
                return 0;
            }
            int *seen = strcmp(key, "dtype") == 0          ? &has_dtype
                        : strcmp(key, "shape") == 0        ? &has_shape
                        : strcmp(key, "data_offsets") == 0 ? &has_offsets
                                                           : NULL;
            if (!seen) {
                rt_io_error(
                    j->err, j->errlen, j->what,
                    "tensor '%s': unexpected key \"%s\" (allowed: dtype, shape, data_offsets)", nm,
                    key);
                j->failed = 1;
                free(key);
                return 0;
            }
            if (*seen) {
                rt_io_error(j->err, j->errlen, j->what, "tensor '%s': duplicate key \"%s\"", nm,
                            key);
                j->failed = 1;
                free(key);
                return 0;
            }
            *seen = 1;
            free(key);
            json_ws(j);
            if (seen == &has_dtype) {
                if (j->p >= j->end || *j->p != '"') {
                    rt_io_error(j->err, j->errlen, j->what,
                                "tensor '%s': dtype must be a string, found %s", nm,
                                json_kind_at(j));
                    j->failed = 1;
                    return 0;
                }
                char *d = json_string(j);
                if (!d) return 0;
                int found = 0;
                for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
                    if (strcmp(d, st_dtypes[i].name) == 0) {
                        e->t.dtype = st_dtypes[i].dtype;
                        found = 1;
                    }
                int known = 0;
                for (size_t i = 0; i < sizeof st_unsupported / sizeof st_unsupported[0]; i++)
                    if (strcmp(d, st_unsupported[i]) == 0) known = 1;
                if (!found) {
                    rt_io_error(
                        j->err, j->errlen, j->what,
                        known ? "tensor '%s': unsupported dtype '%.32s' (supported: F32, F16, "
                                "BF16, F64, U8, I8, I32, I64, BOOL)"
                              : "tensor '%s': unknown dtype '%.32s'",
                        nm, d);
                    j->failed = 1;
                    free(d);
                    return 0;
                }
                free(d);
            } else if (seen == &has_shape) {
                int64_t dims[RT_MAX_RANK];
                int n, too_long;
                if (j->p >= j->end || *j->p != '[') {
                    rt_io_error(j->err, j->errlen, j->what,
                                "tensor '%s': shape must be an array of integers, found %s", nm,
                                json_kind_at(j));
                    j->failed = 1;
                    return 0;
                }
                if (!json_int_array(j, dims, RT_MAX_RANK, &n, &too_long)) {
                    if (too_long) {
                        rt_io_error(j->err, j->errlen, j->what,
                                    "tensor '%s': shape has more than %d dimensions", nm,
                                    RT_MAX_RANK);
                        j->failed = 1;
                    }
                    return 0;
                }
                e->t.rank = n;
                for (int i = 0; i < n; i++)
                    e->t.dims[i] = dims[i];
            } else {
                int64_t off[2];
                int n, too_long;
                if (j->p >= j->end || *j->p != '[') {
                    rt_io_error(
                        j->err, j->errlen, j->what,
                        "tensor '%s': data_offsets must be an array of two integers, found %s", nm,
                        json_kind_at(j));
                    j->failed = 1;
                    return 0;
                }
                if (!json_int_array(j, off, 2, &n, &too_long) && !too_long) return 0;
                if (too_long || n != 2) {
                    rt_io_error(j->err, j->errlen, j->what,
                                "tensor '%s': data_offsets must hold exactly two integers", nm);
                    j->failed = 1;
                    return 0;
                }
                e->begin = off[0];
                e->end = off[1];
            }
            if (json_eat(j, '}')) break;
            if (!json_eat(j, ',')) {
                json_fail(j, "expected ',' or '}' in tensor object");
                return 0;
            }
        }
    }
    const char *missing = !has_dtype     ? "dtype"
                          : !has_shape   ? "shape"
                          : !has_offsets ? "data_offsets"
                                         : NULL;
    if (missing) {
        rt_io_error(j->err, j->errlen, j->what, "tensor '%s': missing \"%s\"", nm, missing);
        j->failed = 1;
        return 0;
    }
    return 1;
}

/* "__metadata__": '{' { string ':' string } '}' — parsed for validity and dropped */
static int
st_metadata(Json *j)
{
    if (!json_eat(j, '{')) {
        rt_io_error(j->err, j->errlen, j->what, "\"__metadata__\" must be an object, found %s",
                    json_kind_at(j));
        j->failed = 1;
        return 0;
    }
    if (json_eat(j, '}')) return 1;
    for (;;) {
        char *k = json_string(j);
        if (!k) return 0;
        free(k);
        if (!json_eat(j, ':')) {
            json_fail(j, "expected ':' after key");
            return 0;
        }
        json_ws(j);
        if (j->p >= j->end || *j->p != '"') {
            rt_io_error(j->err, j->errlen, j->what,
                        "\"__metadata__\" values must be strings, found %s", json_kind_at(j));
            j->failed = 1;
            return 0;
        }
        char *v = json_string(j);
        if (!v) return 0;
        free(v);
        if (json_eat(j, '}')) return 1;
        if (!json_eat(j, ',')) {
            json_fail(j, "expected ',' or '}' in \"__metadata__\"");
            return 0;
        }
    }
}

static int
cmp_entry_name(const void *a, const void *b)
{
    const StEntry *x = *(const StEntry *const *)a, *y = *(const StEntry *const *)b;
    return strcmp(x->t.name, y->t.name);
}

static int
cmp_entry_begin(const void *a, const void *b)
{
    const StEntry *x = *(const StEntry *const *)a, *y = *(const StEntry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Checks every entry against the data section: shape, offsets in range, size, no overlap, unique
 * names. Works on a sorted array of pointers so large headers stay O(n log n). */
static int
st_validate(StEntry *es, int n, uint64_t datalen, const char *what, char *err, size_t errlen)
{
    char shape[256];
    for (int i = 0; i < n; i++) {
        StEntry *e = &es[i];
        RtTensor *t = &e->t;
        int64_t numel = 1;
        int is_huge = 0;
        for (int d = 0; d < t->rank; d++) {
            if (t->dims[d] < 0) {
                fmt_shape(shape, sizeof shape, t->dims, t->rank);
                rt_io_error(err, errlen, what, "tensor '%s': negative dimension %lld in shape %s",
                            t->name, (long long)t->dims[d], shape);
                return 1;
            }
            if (t->dims[d] > RT_MAX_NUMEL) is_huge = 1;
        }
        for (int d = 0; d < t->rank && !is_huge; d++) {
            if (t->dims[d] == 0) {
                numel = 0;
                break;
            }
            if (numel > RT_MAX_NUMEL / t->dims[d])
                is_huge = 1;
            else
                numel *= t->dims[d];
        }
        if (is_huge || numel > RT_MAX_NUMEL) {
            fmt_shape(shape, sizeof shape, t->dims, t->rank);
            rt_io_error(err, errlen, what, "tensor '%s': shape %s has more than 2^34 elements",
                        t->name, shape);
            return 1;
        }
        t->numel = numel;
        if (e->begin < 0 || e->end < 0 || e->begin > e->end) {
            rt_io_error(err, errlen, what, "tensor '%s': data offsets [%lld, %lld) are not a range",
                        t->name, (long long)e->begin, (long long)e->end);
            return 1;
        }
        if ((uint64_t)e->end > datalen) {
            rt_io_error(
                err, errlen, what,
                "tensor '%s': data offsets [%lld, %lld) out of range (file data is %llu bytes)",
                t->name, (long long)e->begin, (long long)e->end, (unsigned long long)datalen);
            return 1;
        }
        int64_t need = numel * (int64_t)rt_dtype_size(t->dtype);
        if (e->end - e->begin != need) {
            fmt_shape(shape, sizeof shape, t->dims, t->rank);
            rt_io_error(err, errlen, what,
                        "tensor '%s': data offsets [%lld, %lld) hold %lld bytes but shape %s of %s "
                        "needs %lld",
                        t->name, (long long)e->begin, (long long)e->end,
                        (long long)(e->end - e->begin), shape, st_dtype_key(t->dtype),
                        (long long)need);
            return 1;
        }
    }
    if (n < 2) return 0;
    StEntry **ix = malloc((size_t)n * sizeof *ix);
    if (!ix) {
        rt_io_error(err, errlen, what, "out of memory for %d tensors", n);
        return 1;
    }
    for (int i = 0; i < n; i++)
        ix[i] = &es[i];
    qsort(ix, (size_t)n, sizeof *ix, cmp_entry_name);
    for (int i = 1; i < n; i++)
        if (strcmp(ix[i - 1]->t.name, ix[i]->t.name) == 0) {
            rt_io_error(err, errlen, what, "tensor '%s' appears twice in the header",
                        ix[i]->t.name);
            free(ix);
            return 1;
        }
    /* empty tensors occupy no bytes and cannot overlap anything */
    qsort(ix, (size_t)n, sizeof *ix, cmp_entry_begin);
    const StEntry *prev = NULL;
    for (int i = 0; i < n; i++) {
        if (ix[i]->begin == ix[i]->end) continue;
        if (prev && ix[i]->begin < prev->end) {
            rt_io_error(err, errlen, what,
                        "tensors '%s' [%lld, %lld) and '%s' [%lld, %lld) overlap", prev->t.name,
                        (long long)prev->begin, (long long)prev->end, ix[i]->t.name,
                        (long long)ix[i]->begin, (long long)ix[i]->end);
            free(ix);
            return 1;
        }
        prev = ix[i];
    }
    free(ix);
    return 0;
}

static void
st_entries_free(StEntry *es, int n)
{
    for (int i = 0; i < n; i++)
        rt_tensor_free(&es[i].t);
    free(es);
}

/* The header's JSON object (hlen bytes at h): its tensors into *es_out (*n_out of them), not yet
 * checked against the data. On failure frees what it made. */
static int
st_header(const unsigned char *h, uint64_t hlen, const char *what, StEntry **es_out, int *n_out,
          char *err, size_t errlen)
{
    Json j = {h, h, h + hlen, what, err, errlen, 0};
    StEntry *es = NULL;
    int n = 0, cap = 0;
    *es_out = NULL;
    *n_out = 0;
    if (!json_eat(&j, '{')) {
        json_fail(&j, "header must be a JSON object starting with '{'");
        return 1;
    }
    if (!json_eat(&j, '}')) {
        for (;;) {
            char *name = json_string(&j);
            if (!name) goto fail;
            if (!json_eat(&j, ':')) {
                free(name);
                json_fail(&j, "expected ':' after key");
                goto fail;
            }
            if (strcmp(name, "__metadata__") == 0) {
                free(name);
                if (!st_metadata(&j)) goto fail;
            } else {
                if (n == cap) {
                    int ncap = cap ? cap * 2 : 16;
                    StEntry *nes = realloc(es, (size_t)ncap * sizeof *es);
                    if (!nes) {
                        free(name);
                        rt_io_error(err, errlen, what, "out of memory for %d tensors", ncap);
                        goto fail;
                    }
                    es = nes;
                    cap = ncap;
                }
                memset(&es[n], 0, sizeof es[n]);
                es[n].t.name = name;
                n++;
                if (!st_tensor(&j, &es[n - 1])) goto fail;
            }
            if (json_eat(&j, '}')) break;
            if (!json_eat(&j, ',')) {
                json_fail(&j, "expected ',' or '}' after a tensor");
                goto fail;
            }
        }
    }
    json_ws(&j);
    if (j.p != j.end) {
        json_fail(&j, "unexpected data after the header object");
        goto fail;
    }
    *es_out = es;
    *n_out = n;
    return 0;
fail:
    st_entries_free(es, n);
    return 1;
}

int
rt_safetensors_parse(const void *buf, size_t len, const char *what, RtTensorSet *out, char *err,
                     size_t errlen)
{
    const unsigned char *b = buf;
    out->tensors = NULL;
    out->ntensors = 0;
    if (err && errlen) err[0] = 0;
    if (len < 8) {
        rt_io_error(err, errlen, what, "file is %zu bytes, too short for the 8-byte header length",
                    len);
        return 1;
    }
    uint64_t hlen = ld64(b);
    if (hlen > ST_MAX_HEADER) {
        rt_io_error(err, errlen, what, "header length %llu exceeds the %u-byte limit",
                    (unsigned long long)hlen, ST_MAX_HEADER);
        return 1;
    }
    if (hlen > len - 8) {
        rt_io_error(err, errlen, what, "header length %llu exceeds the %zu bytes after it",
                    (unsigned long long)hlen, len - 8);
        return 1;
    }
    uint64_t datalen = len - 8 - hlen;
    const unsigned char *data = b + 8 + hlen;
    StEntry *es;
    int n;
    if (st_header(b + 8, hlen, what, &es, &n, err, errlen)) return 1;
    if (st_validate(es, n, datalen, what, err, errlen)) goto fail;

    for (int i = 0; i < n; i++) {
        RtTensor *t = &es[i].t;
        t->data = malloc(t->numel > 0 ? (size_t)t->numel * sizeof(float) : sizeof(float));
        if (!t->data) {
            rt_io_error(err, errlen, what, "tensor '%s': out of memory for %lld elements", t->name,
                        (long long)t->numel);
            goto fail;
        }
        rt_decode_le(t->dtype, data + es[i].begin, t->numel, t->data);
    }
    RtTensor *ts = malloc((n > 0 ? (size_t)n : 1) * sizeof *ts);
    if (!ts) {
        rt_io_error(err, errlen, what, "out of memory for %d tensors", n);
        goto fail;
    }
    for (int i = 0; i < n; i++)
        ts[i] = es[i].t;
    free(es);
    out->tensors = ts;
    out->ntensors = n;
    return 0;
fail:
    st_entries_free(es, n);
    return 1;
}

/* RtSizeProbe of safetensors: the header length, the header, and the data its offsets claim */
static int
st_probe(const unsigned char *b, size_t n, const void *ctx, uint64_t *total)
{
    (void)ctx;
    if (n < 8) return 1;
    uint64_t hlen = ld64(b);
    if (hlen > ST_MAX_HEADER || (n > 8 && hlen > 0 && b[8] != '{')) {
        *total = n; /* not a header this reads: the parser says why */
        return 0;
    }
    if (n < 8 + hlen) return 1;
    StEntry *es;
    int k;
    if (st_header(b + 8, hlen, "", &es, &k, NULL, 0)) {
        *total = n;
        return 0;
    }
    uint64_t end = 0;
    for (int i = 0; i < k; i++)
        if (es[i].end > 0 && (uint64_t)es[i].end > end) end = (uint64_t)es[i].end;
    st_entries_free(es, k);
    *total = 8 + hlen + end;
    return 0;
}

int
rt_safetensors_read(const char *path, const RtReadLimit *lim, RtTensorSet *out, char *err,
                    size_t errlen)
{
    unsigned char *buf;
    size_t len;
    out->tensors = NULL;
    out->ntensors = 0;
    if (rt_read_file_probed(path, lim, st_probe, NULL, &buf, &len, err, errlen)) return 1;
    int rc = rt_safetensors_parse(buf, len, path, out, err, errlen);
    free(buf);
    return rc;
}

uint64_t
rt_weights_file_limit(int64_t numel, int n)
{
    return 8 + ((uint64_t)1 << 20) + 1024 * (uint64_t)(n > 0 ? n : 0) +
           4 * (uint64_t)(numel > 0 ? numel : 0);
}

/* ---- safetensors writer ---- */

typedef struct {
    unsigned char *p;
    size_t n, cap;
    int failed;
} Buf;

static void
buf_put(Buf *b, const void *s, size_t n)
{
    if (b->failed) return;
    if (b->cap - b->n < n) {
        size_t ncap = b->cap ? b->cap : 256;
        while (ncap - b->n < n) {
            if (ncap > SIZE_MAX / 2) {
                b->failed = 1;
                return;
            }
            ncap *= 2;
        }
        unsigned char *np = realloc(b->p, ncap);
        if (!np) {
            b->failed = 1;
            return;
        }
        b->p = np;
        b->cap = ncap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void
buf_str(Buf *b, const char *s)
{
    buf_put(b, s, strlen(s));
}

static void
buf_fmt(Buf *b, const char *fmt, long long v)
{
    char tmp[32];
    int k = snprintf(tmp, sizeof tmp, fmt, v);
    buf_put(b, tmp, (size_t)k);
}

/* a JSON string escaped the way serde_json does it: \" \\ and control characters only */
static void
buf_json_string(Buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    buf_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        size_t k = 2;
        switch (*p) {
        case '"':
            esc[1] = '"';
            break;
        case '\\':
            esc[1] = '\\';
            break;
        case '\b':
            esc[1] = 'b';
            break;
        case '\f':
            esc[1] = 'f';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        default:
            if (*p >= 0x20) {
                buf_put(b, p, 1);
                continue;
            }
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[*p >> 4];
            esc[5] = hex[*p & 15];
            k = 6;
        }
        buf_put(b, esc, k);
    }
    buf_put(b, "\"", 1);
}

static int
cmp_tensor_name(const void *a, const void *b)
{
    const RtTensor *x = *(const RtTensor *const *)a, *y = *(const RtTensor *const *)b;
    return strcmp(x->name, y->name);
}

int
rt_tensor_check(const RtTensor *t, const char *what, char *err, size_t errlen)
{
    const char *nm = t->name ? t->name : "(unnamed)";
    if (t->rank < 0 || t->rank > RT_MAX_RANK) {
        rt_io_error(err, errlen, what, "tensor '%s': rank %d is outside 0..%d", nm, t->rank,
                    RT_MAX_RANK);
        return 1;
    }
    int64_t numel = 1;
    for (int d = 0; d < t->rank; d++) {
        if (t->dims[d] < 0 || t->dims[d] > RT_MAX_NUMEL ||
            (t->dims[d] && numel > RT_MAX_NUMEL / t->dims[d])) {
            rt_io_error(err, errlen, what, "tensor '%s': invalid dimension %lld", nm,
                        (long long)t->dims[d]);
            return 1;
        }
        numel *= t->dims[d];
    }
    if (numel != t->numel) {
        rt_io_error(err, errlen, what, "tensor '%s': numel %lld does not match its shape (%lld)",
                    nm, (long long)t->numel, (long long)numel);
        return 1;
    }
    if (numel > 0 && !t->data) {
        rt_io_error(err, errlen, what, "tensor '%s': no data", nm);
        return 1;
    }
    return 0;
}

/* A file being encoded: the tensors in data order (sorted by name) and the header, its length
 * first, padded with spaces to 8 bytes */
typedef struct Enc {
    const RtTensor **order;
    int n;
    RtDType dtype;
    Buf head; /* the 8 length bytes and the JSON header */
    uint64_t data_bytes;
} Enc;

static void
enc_free(Enc *e)
{
    free(e->order);
    free(e->head.p);
}

static int
st_begin(const RtTensor *ts, int n, RtDType store_dtype, Enc *e, const char *what, char *err,
         size_t errlen)
{
    memset(e, 0, sizeof *e);
    e->dtype = store_dtype;
    e->n = n;
    if (store_dtype != RT_F32 && store_dtype != RT_F16 && store_dtype != RT_BF16) {
        rt_io_error(err, errlen, what, "cannot store dtype %s (use f32, f16 or bf16)",
                    rt_dtype_name(store_dtype));
        return 1;
    }
    if (n < 0 || (n > 0 && !ts)) {
        rt_io_error(err, errlen, what, "invalid tensor count %d", n);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        if (!ts[i].name) {
            rt_io_error(err, errlen, what, "tensor %d has no name", i);
            return 1;
        }
        if (strcmp(ts[i].name, "__metadata__") == 0) {
            rt_io_error(err, errlen, what, "tensor name \"__metadata__\" is reserved");
            return 1;
        }
        if (rt_tensor_check(&ts[i], what, err, errlen)) return 1;
    }
    e->order = malloc((n > 0 ? (size_t)n : 1) * sizeof *e->order);
    if (!e->order) {
        rt_io_error(err, errlen, what, "out of memory");
        return 1;
    }
    for (int i = 0; i < n; i++)
        e->order[i] = &ts[i];
    qsort(e->order, (size_t)n, sizeof *e->order, cmp_tensor_name);
    for (int i = 1; i < n; i++)
        if (strcmp(e->order[i - 1]->name, e->order[i]->name) == 0) {
            rt_io_error(err, errlen, what, "tensor '%s' appears twice", e->order[i]->name);
            enc_free(e);
            return 1;
        }

    /* header: compact JSON like serde_json, keys in data order, padded with spaces to 8 bytes */
    size_t esize = rt_dtype_size(store_dtype);
    Buf h = {0};
    buf_put(&h, "{", 1);
    long long off = 0;
    for (int i = 0; i < n; i++) {
        const RtTensor *t = e->order[i];
        if (i) buf_put(&h, ",", 1);
        buf_json_string(&h, t->name);
        buf_str(&h, ":{\"dtype\":\"");
        buf_str(&h, st_dtype_key(store_dtype));
        buf_str(&h, "\",\"shape\":[");
        for (int d = 0; d < t->rank; d++)
            buf_fmt(&h, d ? ",%lld" : "%lld", (long long)t->dims[d]);
        long long end = off + (long long)t->numel * (long long)esize;
        buf_fmt(&h, "],\"data_offsets\":[%lld,", off);
        buf_fmt(&h, "%lld]}", end);
        off = end;
    }
    buf_put(&h, "}", 1);
    while (!h.failed && h.n % 8)
        buf_put(&h, " ", 1);
    unsigned char len8[8];
    uint64_t hl = h.n;
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(hl >> (8 * i));
    buf_put(&e->head, len8, 8);
    buf_put(&e->head, h.p, h.n);
    free(h.p);
    e->data_bytes = (uint64_t)off;
    if (h.failed || e->head.failed || (uint64_t)off > SIZE_MAX - e->head.n) {
        rt_io_error(err, errlen, what, "out of memory encoding %d tensors", n);
        enc_free(e);
        return 1;
    }
    return 0;
}

/* elements [k0, k0 + n) of t as stored (little-endian) at dst */
static void
st_put(const Enc *e, const RtTensor *t, int64_t k0, int64_t n, unsigned char *dst)
{
    for (int64_t k = 0; k < n; k++) {
        float x = t->data[k0 + k];
        if (e->dtype == RT_F32) {
            uint32_t u = rt_f32_bits(x);
            for (int s = 0; s < 4; s++)
                dst[4 * k + s] = (unsigned char)(u >> (8 * s));
        } else {
            uint16_t u = e->dtype == RT_F16 ? rt_f32_to_f16(x) : rt_f32_to_bf16(x);
            dst[2 * k] = (unsigned char)u;
            dst[2 * k + 1] = (unsigned char)(u >> 8);
        }
    }
}

static int
st_encode(const RtTensor *ts, int n, RtDType store_dtype, unsigned char **out, size_t *outlen,
          const char *what, char *err, size_t errlen)
{
    *out = NULL;
    *outlen = 0;
    Enc e;
    if (st_begin(ts, n, store_dtype, &e, what, err, errlen)) return 1;
    size_t esize = rt_dtype_size(store_dtype), len = e.head.n + (size_t)e.data_bytes;
    unsigned char *f = malloc(len ? len : 1);
    if (!f) {
        enc_free(&e);
        rt_io_error(err, errlen, what, "out of memory encoding %d tensors", n);
        return 1;
    }
    memcpy(f, e.head.p, e.head.n);
    size_t at = e.head.n;
    for (int i = 0; i < n; i++) {
        st_put(&e, e.order[i], 0, e.order[i]->numel, f + at);
        at += (size_t)e.order[i]->numel * esize;
    }
    enc_free(&e);
    *out = f;
    *outlen = len;
    return 0;
}

/* RtWriteFn: the file, each tensor converted in pieces of ST_PIECE elements */
enum { ST_PIECE = 16384 };
static int
st_write_fd(void *ctx, int fd)
{
    const Enc *e = ctx;
    int rc = rt_fd_write_all(fd, e->head.p, e->head.n);
    size_t esize = rt_dtype_size(e->dtype);
    unsigned char *piece = rc ? NULL : malloc(ST_PIECE * esize);
    if (!rc && !piece) rc = ENOMEM;
    for (int i = 0; i < e->n && !rc; i++) {
        const RtTensor *t = e->order[i];
        for (int64_t k = 0; k < t->numel && !rc; k += ST_PIECE) {
            int64_t m = t->numel - k < ST_PIECE ? t->numel - k : ST_PIECE;
            st_put(e, t, k, m, piece);
            rc = rt_fd_write_all(fd, piece, (size_t)m * esize);
        }
    }
    free(piece);
    return rc;
}

int
rt_safetensors_encode(const RtTensor *ts, int n, RtDType store_dtype, unsigned char **buf,
                      size_t *len, char *err, size_t errlen)
{
    return st_encode(ts, n, store_dtype, buf, len, "safetensors", err, errlen);
}

int
rt_safetensors_write(const char *path, const RtTensor *ts, int n, RtDType store_dtype, char *err,
                     size_t errlen)
{
    /* streamed: the file is never whole in memory (the trained weights and a checkpoint's
     * optimiser state would be a second copy of themselves at the run's peak) */
    Enc e;
    if (st_begin(ts, n, store_dtype, &e, path, err, errlen)) return 1;
    int rc = rt_write_file_fn(path, st_write_fd, &e, err, errlen);
    enc_free(&e);
    return rc;
}
