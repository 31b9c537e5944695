/* test_io.c: unit tests for the runtime's tensor file readers and writers (runtime/tensor_io.h):
 * round trips, golden bytes from the reference writers, one hand-made input per error class with
 * the message checked, and Fashion-MNIST from the Debian package when it is installed (else
 * skipped). Must not touch anything outside its own temporary directory, which it removes at the
 * end. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "runtime/bigmem.h"
#include "runtime/f16.h"
#include "runtime/tensor_io.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/unit/check.h"

/* the call failed and its message contains every one of the given fragments */
#define CHECK_ERR(rc, err, ...)                                                                    \
    check_err(__FILE__, __LINE__, (rc), (err), __VA_ARGS__, (const char *)NULL)

static void
check_err(const char *file, int line, int rc, const char *err, ...)
{
    int ok = rc != 0 && strlen(err) > 0;
    va_list ap;
    va_start(ap, err);
    for (const char *frag; (frag = va_arg(ap, const char *)) != NULL;)
        if (!strstr(err, frag)) {
            fprintf(stderr, "%s:%d: message lacks \"%s\"\n", file, line, frag);
            ok = 0;
        }
    va_end(ap);
    if (ok)
        npass++;
    else {
        nfail++;
        fprintf(stderr, "%s:%d: expected an error, got rc=%d err=\"%s\"\n", file, line, rc, err);
    }
}

static char tmpdir[512];

static const char *
tmp_path(const char *name)
{
    static char buf[8][600];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void
write_bytes(const char *path, const void *p, size_t n)
{
    char err[256];
    if (rt_write_file(path, p, n, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(2);
    }
}

/* ---- a little byte buffer for building inputs ---- */

typedef struct {
    unsigned char *p;
    size_t n;
} Bytes;

static void
bytes_put(Bytes *b, const void *s, size_t n)
{
    b->p = realloc(b->p, b->n + n + 1);
    if (!b->p) exit(2);
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void
bytes_zero(Bytes *b, size_t n)
{
    b->p = realloc(b->p, b->n + n + 1);
    if (!b->p) exit(2);
    memset(b->p + b->n, 0, n);
    b->n += n;
}

/* safetensors: 8-byte length, the given header, datalen zero bytes */
static Bytes
st_bytes(const char *json, size_t datalen)
{
    Bytes b = {0};
    unsigned char len8[8];
    uint64_t h = strlen(json);
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(h >> (8 * i));
    bytes_put(&b, len8, 8);
    bytes_put(&b, json, strlen(json));
    bytes_zero(&b, datalen);
    return b;
}

/* a safetensors parse expected to fail with the given fragments in the message */
#define ST_FAIL(json, datalen, ...)                                                                \
    do {                                                                                           \
        Bytes b_ = st_bytes(json, datalen);                                                        \
        RtTensorSet s_;                                                                            \
        char e_[512];                                                                              \
        int rc_ = rt_safetensors_parse(b_.p, b_.n, "t.safetensors", &s_, e_, sizeof e_);           \
        check_err(__FILE__, __LINE__, rc_, e_, "t.safetensors: ", __VA_ARGS__,                     \
                  (const char *)NULL);                                                             \
        CHECK(s_.tensors == NULL && s_.ntensors == 0);                                             \
        free(b_.p);                                                                                \
    } while (0)

/* .npy with a version 1.0 header built from the dict text, then datalen zero bytes */
static Bytes
npy_bytes(int major, const char *dict, size_t datalen)
{
    Bytes b = {0};
    unsigned char pre[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)major, 0};
    size_t h = strlen(dict);
    if (major == 1) {
        pre[8] = (unsigned char)h;
        pre[9] = (unsigned char)(h >> 8);
        bytes_put(&b, pre, 10);
    } else {
        for (int i = 0; i < 4; i++)
            pre[8 + i] = (unsigned char)(h >> (8 * i));
        bytes_put(&b, pre, 12);
    }
    bytes_put(&b, dict, h);
    bytes_zero(&b, datalen);
    return b;
}

#define NPY_FAIL(major, dict, datalen, ...)                                                        \
    do {                                                                                           \
        Bytes b_ = npy_bytes(major, dict, datalen);                                                \
        RtTensor t_;                                                                               \
        char e_[512];                                                                              \
        int rc_ = rt_npy_parse(b_.p, b_.n, "t.npy", &t_, e_, sizeof e_);                           \
        check_err(__FILE__, __LINE__, rc_, e_, "t.npy: ", __VA_ARGS__, (const char *)NULL);        \
        CHECK(t_.data == NULL && t_.numel == 0);                                                   \
        free(b_.p);                                                                                \
    } while (0)

/* gzip of the given bytes */
static Bytes
gzip_bytes(const void *src, size_t n)
{
    Bytes b = {0};
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) exit(2);
    uLong bound = deflateBound(&zs, (uLong)n) + 32;
    b.p = malloc(bound);
    zs.next_in = (Bytef *)src;
    zs.avail_in = (uInt)n;
    zs.next_out = b.p;
    zs.avail_out = (uInt)bound;
    if (deflate(&zs, Z_FINISH) != Z_STREAM_END) exit(2);
    b.n = zs.total_out;
    deflateEnd(&zs);
    return b;
}

/* ---- dtypes and conversions ---- */

static void
test_dtypes(void)
{
    static const char *const names[] = {"f32", "f16", "bf16", "f64", "u8",
                                        "i8",  "i32", "i64",  "bool"};
    static const size_t sizes[] = {4, 2, 2, 8, 1, 1, 4, 8, 1};
    for (int t = RT_F32; t <= RT_BOOL; t++) {
        CHECK(strcmp(rt_dtype_name((RtDType)t), names[t]) == 0);
        CHECK(rt_dtype_size((RtDType)t) == sizes[t]);
    }
}

static void
test_f16(void)
{
    CHECK(rt_f32_to_f16(1.0f) == 0x3c00);
    CHECK(rt_f32_to_f16(-2.0f) == 0xc000);
    CHECK(rt_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(rt_f32_to_f16(65519.0f) == 0x7bff);
    CHECK(rt_f32_to_f16(65520.0f) == 0x7c00); /* the tie rounds to even, which is infinity */
    CHECK(rt_f32_to_f16(INFINITY) == 0x7c00);
    CHECK(rt_f32_to_f16(-INFINITY) == 0xfc00);
    CHECK((rt_f32_to_f16(NAN) & 0x7fff) > 0x7c00);
    CHECK(rt_f32_to_f16(ldexpf(1, -24)) == 0x0001);        /* smallest subnormal */
    CHECK(rt_f32_to_f16(ldexpf(1, -25)) == 0x0000);        /* tie to even: zero */
    CHECK(rt_f32_to_f16(ldexpf(3, -26)) == 0x0001);        /* 0.75 ulp rounds up */
    CHECK(rt_f32_to_f16(ldexpf(3, -25)) == 0x0002);        /* 1.5 ulp: tie to even 2 */
    CHECK(rt_f32_to_f16(ldexpf(1023, -24)) == 0x03ff);     /* largest subnormal */
    CHECK(rt_f32_to_f16(ldexpf(2047, -25)) == 0x0400);     /* rounds up into the normals */
    CHECK(rt_f32_to_f16(1.0f + ldexpf(1, -11)) == 0x3c00); /* tie, even stays */
    CHECK(rt_f32_to_f16(1.0f + ldexpf(3, -11)) == 0x3c02); /* tie, odd rounds up */
    CHECK(rt_f32_to_f16(-0.0f) == 0x8000);
    CHECK(rt_f32_to_f16(1e-10f) == 0x0000);
    int exact = 1;
    for (unsigned h = 0; h < 0x10000; h++) {
        float f = rt_f16_to_f32((uint16_t)h);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            exact &= isnan(f) != 0;
            continue;
        }
        exact &= rt_f32_to_f16(f) == h;
    }
    CHECK(exact);
    CHECK(rt_f16_to_f32(0x0001) == ldexpf(1, -24));
    CHECK(rt_f16_to_f32(0x3555) == 0x3555 / 1024.0f / 1024.0f * 0 + 0.333251953125f);

    CHECK(rt_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(rt_f32_to_bf16(rt_bits_f32(0x3f808000u)) == 0x3f80); /* tie, even stays */
    CHECK(rt_f32_to_bf16(rt_bits_f32(0x3f818000u)) == 0x3f82); /* tie, odd rounds up */
    CHECK(rt_f32_to_bf16(rt_bits_f32(0x3f808001u)) == 0x3f81);
    CHECK(rt_f32_to_bf16(NAN) == 0x7fc0);
    CHECK(rt_f32_to_bf16(rt_bits_f32(0x7f7fffffu)) == 0x7f80); /* FLT_MAX rounds to infinity */
    exact = 1;
    for (unsigned h = 0; h < 0x10000; h++) {
        float f = rt_bf16_to_f32((uint16_t)h);
        if (!isnan(f)) exact &= rt_f32_to_bf16(f) == h;
    }
    CHECK(exact);
}

/* ---- safetensors ---- */

static void
fill(RtTensor *t, float scale)
{
    for (int64_t i = 0; i < t->numel; i++)
        t->data[i] = scale * (float)(i + 1) / 3.0f * (i % 2 ? -1.0f : 1.0f);
}

static void
test_safetensors_roundtrip(void)
{
    char err[512];
    RtTensor ts[4];
    int64_t d_a[] = {2, 3}, d_z[] = {5}, d_e[] = {0, 4};
    CHECK(rt_tensor_init(&ts[0], "z.weight", 1, d_z, err, sizeof err) == 0);
    CHECK(rt_tensor_init(&ts[1], "a", 2, d_a, err, sizeof err) == 0);
    CHECK(rt_tensor_init(&ts[2], "scalar", 0, NULL, err, sizeof err) == 0);
    CHECK(rt_tensor_init(&ts[3], "empty", 2, d_e, err, sizeof err) == 0);
    fill(&ts[0], 1000.0f);
    fill(&ts[1], 1.0f);
    ts[1].data[5] = 70000.0f; /* beyond f16: becomes inf there */
    ts[2].data[0] = 1e-6f;    /* f16 subnormal */

    static const RtDType stores[] = {RT_F32, RT_F16, RT_BF16};
    for (int s = 0; s < 3; s++) {
        const char *path = tmp_path("rt.safetensors");
        CHECK(rt_safetensors_write(path, ts, 4, stores[s], err, sizeof err) == 0);
        RtTensorSet set;
        int rc = rt_safetensors_read(path, NULL, &set, err, sizeof err);
        CHECK(rc == 0);
        if (rc) {
            fprintf(stderr, "%s\n", err);
            continue;
        }
        CHECK(set.ntensors == 4);
        /* file order is sorted by name */
        CHECK(set.ntensors == 4 && strcmp(set.tensors[0].name, "a") == 0 &&
              strcmp(set.tensors[1].name, "empty") == 0 &&
              strcmp(set.tensors[2].name, "scalar") == 0 &&
              strcmp(set.tensors[3].name, "z.weight") == 0);
        for (int i = 0; i < 4; i++) {
            const RtTensor *r = rt_tensorset_find(&set, ts[i].name);
            CHECK(r != NULL);
            if (!r) continue;
            CHECK(r->dtype == stores[s]);
            CHECK(r->rank == ts[i].rank && r->numel == ts[i].numel);
            CHECK(memcmp(r->dims, ts[i].dims, sizeof(int64_t) * (size_t)ts[i].rank) == 0);
            int same = 1;
            for (int64_t k = 0; k < r->numel; k++) {
                float want = ts[i].data[k];
                if (stores[s] == RT_F16)
                    want = rt_f16_to_f32(rt_f32_to_f16(want));
                else if (stores[s] == RT_BF16)
                    want = rt_bf16_to_f32(rt_f32_to_bf16(want));
                same &= r->data[k] == want;
            }
            CHECK(same);
        }
        if (stores[s] == RT_F16) {
            const RtTensor *a = rt_tensorset_find(&set, "a");
            CHECK(a && isinf(a->data[5]));
        }
        CHECK(rt_tensorset_find(&set, "missing") == NULL);
        rt_tensorset_free(&set);
        CHECK(set.tensors == NULL && set.ntensors == 0);
        unlink(path);
    }
    for (int i = 0; i < 4; i++)
        rt_tensor_free(&ts[i]);

    /* byte-identical to safetensors.numpy.save({"b": f32[2], "a": zeros f32[2,3], "s": f32 scalar,
     * "e": f32[0]}) and to a name with characters serde_json escapes */
    RtTensor g[4];
    int64_t d2[] = {2}, d23[] = {2, 3}, d0[] = {0};
    rt_tensor_init(&g[0], "b", 1, d2, err, sizeof err);
    rt_tensor_init(&g[1], "a", 2, d23, err, sizeof err);
    rt_tensor_init(&g[2], "s", 0, NULL, err, sizeof err);
    rt_tensor_init(&g[3], "e", 1, d0, err, sizeof err);
    unsigned char *buf;
    size_t len;
    CHECK(rt_safetensors_encode(g, 4, RT_F32, &buf, &len, err, sizeof err) == 0);
    static const char golden[] =
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},\"b\":{\"dtype\":"
        "\"F32\","
        "\"shape\":[2],\"data_offsets\":[24,32]},\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_"
        "offsets\":[32,32]},\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[32,36]}}   ";
    CHECK(len == 8 + 224 + 36 && buf[0] == 224 && buf[1] == 0 && memcmp(buf + 8, golden, 224) == 0);
    free(buf);
    for (int i = 0; i < 4; i++)
        rt_tensor_free(&g[i]);
    rt_tensor_init(&g[0], "x", 1, d2, err, sizeof err);
    rt_tensor_init(&g[1], "y\"\n\xc3\xa9\x01", 1, d2, err, sizeof err);
    CHECK(rt_safetensors_encode(g, 2, RT_F16, &buf, &len, err, sizeof err) == 0);
    static const char golden2[] = "{\"x\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                                  "\"y\\\"\\n\xc3\xa9\\u0001\":"
                                  "{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[4,8]}} ";
    CHECK(len == 8 + strlen(golden2) + 8 && memcmp(buf + 8, golden2, strlen(golden2)) == 0);
    RtTensorSet set;
    CHECK(rt_safetensors_parse(buf, len, "mem", &set, err, sizeof err) == 0);
    CHECK(set.ntensors == 2 && strcmp(set.tensors[1].name, "y\"\n\xc3\xa9\x01") == 0);
    rt_tensorset_free(&set);
    free(buf);

    /* writer errors */
    g[1].name[0] = 'x';
    g[1].name[1] = 0;
    CHECK_ERR(rt_safetensors_write(tmp_path("dup.safetensors"), g, 2, RT_F32, err, sizeof err), err,
              "dup.safetensors", "'x' appears twice");
    CHECK(access(tmp_path("dup.safetensors"), F_OK) != 0);
    CHECK_ERR(rt_safetensors_write(tmp_path("d.safetensors"), g, 1, RT_I32, err, sizeof err), err,
              "d.safetensors", "cannot store dtype i32");
    g[0].numel = 3;
    CHECK_ERR(rt_safetensors_write(tmp_path("d.safetensors"), g, 1, RT_F32, err, sizeof err), err,
              "numel 3 does not match");
    g[0].numel = 2;
    CHECK_ERR(rt_safetensors_write("/nonexistent-dir/x.safetensors", g, 1, RT_F32, err, sizeof err),
              err, "/nonexistent-dir/x.safetensors");
    rt_tensor_free(&g[0]);
    rt_tensor_free(&g[1]);
}

/* the streamed file (rt_safetensors_write: tensors converted in pieces) is the encoder's bytes,
 * for a tensor of several pieces and one that ends inside a piece, in every stored dtype (failed
 * writes: lit robust/output-disk.test) */
static void
test_safetensors_streamed(void)
{
    char err[512];
    RtTensor ts[2];
    int64_t d_big[] = {3, 20011}, d_small[] = {7};
    CHECK(rt_tensor_init(&ts[0], "big", 2, d_big, err, sizeof err) == 0);
    CHECK(rt_tensor_init(&ts[1], "a.small", 1, d_small, err, sizeof err) == 0);
    fill(&ts[0], 3.0f);
    fill(&ts[1], 1e5f);
    static const RtDType stores[] = {RT_F32, RT_F16, RT_BF16};
    for (int s = 0; s < 3; s++) {
        unsigned char *enc = NULL, *got = NULL;
        size_t elen = 0, glen = 0;
        const char *path = tmp_path("streamed.safetensors");
        CHECK(rt_safetensors_encode(ts, 2, stores[s], &enc, &elen, err, sizeof err) == 0);
        CHECK(rt_safetensors_write(path, ts, 2, stores[s], err, sizeof err) == 0);
        CHECK(rt_read_file(path, NULL, &got, &glen, err, sizeof err) == 0);
        CHECK(elen > 3 * 20011 * 2 && glen == elen && got && memcmp(enc, got, elen) == 0);
        free(got);
        free(enc);
    }
    rt_tensor_free(&ts[0]);
    rt_tensor_free(&ts[1]);
}

static void
test_safetensors_parse_ok(void)
{
    char err[512];
    RtTensorSet s;
    /* every supported dtype, metadata, escapes, whitespace and padding */
    static const char hdr[] =
        " {\"__metadata__\":{\"format\":\"pt\",\"k\\u00e9\":\"\\ud83d\\ude00\"},\n"
        "  \"f64\":{\"shape\":[1],\"dtype\":\"F64\",\"data_offsets\":[0,8]},"
        "\"i64\" : {\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]},"
        "\"i32\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[16,20]},"
        "\"u8\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[20,22]},"
        "\"i8\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[22,23]},"
        "\"bool\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[23,24]},"
        "\"bf16\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[24,26]},"
        "\"f16\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[26,28]},"
        "\"z\\/\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[28,28]},"
        "\"f32\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1],\"data_offsets\":[28,32]}}   ";
    Bytes b = st_bytes(hdr, 32);
    unsigned char *d = b.p + 8 + strlen(hdr);
    double f64 = -2.5;
    memcpy(d, &f64, 8);
    int64_t i64 = -(1ll << 40);
    memcpy(d + 8, &i64, 8);
    int32_t i32 = -123456;
    memcpy(d + 16, &i32, 4);
    d[20] = 255;
    d[21] = 7;
    d[22] = 0x80;
    d[23] = 2;
    d[24] = 0x80; /* bf16 1.0 = 0x3f80 */
    d[25] = 0x3f;
    d[26] = 0x00; /* f16 -2 = 0xc000 */
    d[27] = 0xc0;
    float f32 = 0.1f;
    memcpy(d + 28, &f32, 4);
    int rc = rt_safetensors_parse(b.p, b.n, "ok.safetensors", &s, err, sizeof err);
    CHECK(rc == 0);
    if (rc) fprintf(stderr, "%s\n", err);
    CHECK(s.ntensors == 10);
    const RtTensor *t;
    CHECK((t = rt_tensorset_find(&s, "f64")) && t->dtype == RT_F64 && t->data[0] == -2.5f);
    CHECK((t = rt_tensorset_find(&s, "i64")) && t->dtype == RT_I64 &&
          t->data[0] == -1099511627776.0f);
    CHECK((t = rt_tensorset_find(&s, "i32")) && t->dtype == RT_I32 && t->data[0] == -123456.0f);
    CHECK((t = rt_tensorset_find(&s, "u8")) && t->dtype == RT_U8 && t->data[0] == 255.0f &&
          t->data[1] == 7.0f);
    CHECK((t = rt_tensorset_find(&s, "i8")) && t->dtype == RT_I8 && t->data[0] == -128.0f);
    CHECK((t = rt_tensorset_find(&s, "bool")) && t->dtype == RT_BOOL && t->data[0] == 1.0f);
    CHECK((t = rt_tensorset_find(&s, "bf16")) && t->dtype == RT_BF16 && t->data[0] == 1.0f);
    CHECK((t = rt_tensorset_find(&s, "f16")) && t->dtype == RT_F16 && t->data[0] == -2.0f);
    CHECK((t = rt_tensorset_find(&s, "z/")) && t->numel == 0 && t->rank == 2 && t->dims[1] == 3);
    CHECK((t = rt_tensorset_find(&s, "f32")) && t->rank == 8 && t->numel == 1 &&
          t->data[0] == 0.1f);
    rt_tensorset_free(&s);
    free(b.p);

    /* an empty header and gaps between tensors are accepted */
    b = st_bytes("{}", 0);
    CHECK(rt_safetensors_parse(b.p, b.n, "e", &s, err, sizeof err) == 0 && s.ntensors == 0);
    rt_tensorset_free(&s);
    free(b.p);
    b = st_bytes("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[3,4]}}", 8);
    CHECK(rt_safetensors_parse(b.p, b.n, "g", &s, err, sizeof err) == 0 && s.ntensors == 1);
    rt_tensorset_free(&s);
    free(b.p);
}

static void
test_safetensors_errors(void)
{
    char err[512];
    RtTensorSet s;
    /* truncated header length, header length beyond the file */
    CHECK_ERR(rt_safetensors_parse("\x10\0\0", 3, "t.safetensors", &s, err, sizeof err), err,
              "t.safetensors: ", "too short");
    Bytes b = st_bytes("{}", 0);
    b.p[0] = 200;
    CHECK_ERR(rt_safetensors_parse(b.p, b.n, "t.safetensors", &s, err, sizeof err), err,
              "header length 200 exceeds the 2 bytes after it");
    b.p[0] = 0xff;
    memset(b.p, 0xff, 8);
    CHECK_ERR(rt_safetensors_parse(b.p, b.n, "t.safetensors", &s, err, sizeof err), err,
              "header length 18446744073709551615 exceeds");
    free(b.p);
    /* the example from the API documentation, character for character */
    b = st_bytes("{\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[1000],\"data_offsets\":[0,4000]}}",
                 3000);
    CHECK(rt_safetensors_parse(b.p, b.n, "w.safetensors", &s, err, sizeof err) != 0);
    CHECK(strcmp(err, "w.safetensors: tensor 'fc1.weight': data offsets [0, 4000) out of range "
                      "(file data is 3000 bytes)") == 0);
    free(b.p);

    /* bad JSON */
    ST_FAIL("", 0, "bad JSON", "must be a JSON object");
    ST_FAIL("[]", 0, "bad JSON", "must be a JSON object");
    ST_FAIL("{\"a\":", 0, "tensor 'a': expected an object, found nothing");
    ST_FAIL("{\"a\"", 0, "bad JSON", "expected ':' after key at end of header");
    ST_FAIL("{\"a\" {}}", 0, "bad JSON", "expected ':'");
    ST_FAIL("{\"a\":{},}", 0, "tensor 'a': missing \"dtype\"");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}", 4, "bad JSON",
            "expected a string");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\" \"shape\":[1]}}", 4, "bad JSON", "expected ',' or '}'");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "bad JSON",
            "only integers");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[1e3],\"data_offsets\":[0,4]}}", 4,
            "only integers");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4, "leading zero");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}",
            4, "does not fit in 64 bits");
    ST_FAIL("{\"a\":{\"dtype\":true,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
            "dtype must be a string, found a boolean");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":null,\"data_offsets\":[0,4]}}", 4,
            "shape must be an array of integers, found null");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4,
            "expected an integer");
    ST_FAIL("{\"a\":[1]}", 4, "tensor 'a': expected an object, found an array");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4,
            "unexpected data after the header object");
    ST_FAIL("{\"a\\q\":{}}", 0, "unknown escape");
    ST_FAIL("{\"a\\u12\":{}}", 0, "four hex digits");
    ST_FAIL("{\"a\\ud800\":{}}", 0, "unpaired high surrogate");
    ST_FAIL("{\"a\\udc00\":{}}", 0, "unpaired low surrogate");
    ST_FAIL("{\"a\\u0000\":{}}", 0, "\\u0000 is not allowed");
    ST_FAIL("{\"a\tb\":{}}", 0, "control character in string");
    ST_FAIL("{\"a\xc3(\":{}}", 0, "invalid UTF-8");
    ST_FAIL("{\"a\xed\xa0\x80\":{}}", 0, "invalid UTF-8"); /* an encoded surrogate */
    ST_FAIL("{\"abc", 0, "unterminated string");
    ST_FAIL("{\"__metadata__\":{\"k\":1}}", 0,
            "\"__metadata__\" values must be strings, found a number");
    ST_FAIL("{\"__metadata__\":[]}", 0, "\"__metadata__\" must be an object");

    /* schema */
    ST_FAIL("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'a': missing \"dtype\"");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4,
            "tensor 'a': missing \"shape\"");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "tensor 'a': missing \"data_offsets\"");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}", 4,
            "tensor 'a': duplicate key \"dtype\"");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
            "tensor 'a': unexpected key \"x\"");
    ST_FAIL("{\"a\":{\"dtype\":\"F17\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
            "tensor 'a': unknown dtype 'F17'");
    ST_FAIL("{\"a\":{\"dtype\":\"U16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2,
            "tensor 'a': unsupported dtype 'U16'");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
            "data_offsets must hold exactly two integers");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8,
            "data_offsets must hold exactly two integers");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8,
            "data offsets [8, 4) are not a range");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 8, "not a range");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 3,
            "tensor 'a': data offsets [0, 4) out of range (file data is 3 bytes)");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
            "tensor 'a': data offsets [0, 8) hold 8 bytes but shape [3] of F32 needs 12");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
            12, "tensors 'a' [0, 8) and 'b' [4, 12) overlap");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
            "tensor 'a': shape has more than 8 dimensions");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,4]}}", 4,
            "tensor 'a': negative dimension -1 in shape [2, -1]");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}",
            4, "tensor 'a': shape [4294967296, 4294967296] has more than 2^34 elements");
    ST_FAIL("{\"a\":{\"dtype\":\"U8\",\"shape\":[9223372036854775807,0],\"data_offsets\":[0,0]}}",
            0, "more than 2^34 elements");
    ST_FAIL("{\"a\":{\"dtype\":\"U8\",\"shape\":[131072,131072,131072],\"data_offsets\":[0,4]}}", 4,
            "more than 2^34 elements");
    ST_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
            "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
            12, "tensor 'a' appears twice");

    /* the message is cut to errlen and always terminated */
    b = st_bytes("{\"a\":{\"dtype\":\"F17\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    char small[12];
    memset(small, 'x', sizeof small);
    CHECK(rt_safetensors_parse(b.p, b.n, "t.safetensors", &s, small, sizeof small) != 0);
    CHECK(strlen(small) == sizeof small - 1 && strncmp(small, "t.safetenso", 11) == 0);
    CHECK(rt_safetensors_parse(b.p, b.n, "t.safetensors", &s, NULL, 0) != 0);
    free(b.p);

    /* file errors name the file */
    CHECK_ERR(rt_safetensors_read(tmp_path("nope.safetensors"), NULL, &s, err, sizeof err), err,
              "nope.safetensors", "cannot open");
    CHECK_ERR(rt_safetensors_read(tmpdir, NULL, &s, err, sizeof err), err, tmpdir);
}

/* ---- npy ---- */

static void
test_npy(void)
{
    char err[512];
    RtTensor t;
    float v[6] = {0.5f, -1.25f, 3.7f, 300.0f, -200.0f, NAN};
    int64_t dims[2] = {2, 3};
    const char *path = tmp_path("a.npy");

    CHECK(rt_npy_write(path, RT_F32, 2, dims, v, err, sizeof err) == 0);
    CHECK(rt_npy_read(path, NULL, &t, err, sizeof err) == 0);
    CHECK(t.name == NULL && t.dtype == RT_F32 && t.rank == 2 && t.dims[0] == 2 && t.dims[1] == 3 &&
          t.numel == 6);
    CHECK(t.data && memcmp(t.data, v, 5 * sizeof(float)) == 0 && isnan(t.data[5]));
    rt_tensor_free(&t);
    /* numpy.save's header for float32 (2, 3), byte for byte */
    unsigned char *buf;
    size_t len;
    CHECK(rt_npy_encode(RT_F32, 2, dims, v, &buf, &len, err, sizeof err) == 0);
    static const char golden[] = "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, "
                                 "'shape': (2, 3), }";
    CHECK(len == 128 + 24 && memcmp(buf, golden, sizeof golden - 1) == 0 && buf[127] == '\n' &&
          buf[126] == ' ');
    free(buf);
    int64_t five = 5;
    CHECK(rt_npy_encode(RT_U8, 1, &five, v, &buf, &len, err, sizeof err) == 0);
    static const char golden1[] = "\x93NUMPY\x01\x00v\x00{'descr': '|u1', 'fortran_order': False, "
                                  "'shape': (5,), }";
    CHECK(len == 128 + 5 && memcmp(buf, golden1, sizeof golden1 - 1) == 0);
    free(buf);

    /* integer stores clamp and truncate like astype */
    CHECK(rt_npy_write(path, RT_U8, 2, dims, v, err, sizeof err) == 0);
    CHECK(rt_npy_read(path, NULL, &t, err, sizeof err) == 0);
    CHECK(t.dtype == RT_U8 && t.data[0] == 0 && t.data[1] == 0 && t.data[2] == 3 &&
          t.data[3] == 255 && t.data[4] == 0 && t.data[5] == 0);
    rt_tensor_free(&t);
    CHECK(rt_npy_write(path, RT_I8, 2, dims, v, err, sizeof err) == 0);
    CHECK(rt_npy_read(path, NULL, &t, err, sizeof err) == 0);
    CHECK(t.dtype == RT_I8 && t.data[0] == 0 && t.data[1] == -1 && t.data[2] == 3 &&
          t.data[3] == 127 && t.data[4] == -128 && t.data[5] == 0);
    rt_tensor_free(&t);
    /* scalar and 1-D */
    CHECK(rt_npy_write(path, RT_F32, 0, NULL, v, err, sizeof err) == 0);
    CHECK(rt_npy_read(path, NULL, &t, err, sizeof err) == 0 && t.rank == 0 && t.numel == 1 &&
          t.data[0] == 0.5f);
    rt_tensor_free(&t);
    CHECK(rt_npy_write(path, RT_F32, 1, &five, v, err, sizeof err) == 0);
    CHECK(rt_npy_read(path, NULL, &t, err, sizeof err) == 0 && t.rank == 1 && t.dims[0] == 5);
    rt_tensor_free(&t);
    CHECK_ERR(rt_npy_write(path, RT_F16, 1, &five, v, err, sizeof err), err, "a.npy",
              "cannot write dtype f16");
    int64_t neg = -1;
    CHECK_ERR(rt_npy_write(path, RT_F32, 1, &neg, v, err, sizeof err), err, "invalid dimension -1");
    unlink(path);

    /* the dtypes numpy writes, versions 2.0 and 3.0, Python 2 longs, odd spacing and quotes */
    static const struct {
        int major;
        const char *dict;
        unsigned char data[8];
        size_t n;
        RtDType dtype;
        float want;
    } ok[] = {
        /* clang-format off */
        {1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }\n",
         {0, 0, 0, 0, 0, 0, 0xf8, 0xbf}, 8, RT_F64, -1.5f},
        {1, "{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }", {0x00, 0x3c}, 2, RT_F16, 1.0f},
        {1, "{'descr': '|i1', 'fortran_order': False, 'shape': (1,), }", {0xff}, 1, RT_I8, -1.0f},
        {1, "{'descr': '|b1', 'fortran_order': False, 'shape': (1,), }", {1}, 1, RT_BOOL, 1.0f},
        {1, "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }", {0xfe, 0xff, 0xff, 0xff}, 4,
         RT_I32, -2.0f},
        {1, "{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }", {5}, 8, RT_I64, 5.0f},
        {2, "{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }", {200}, 1, RT_U8, 200.0f},
        {3, "{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }", {201}, 1, RT_U8, 201.0f},
        {1, "{'shape':(1L,),\"descr\":\"<f4\",'fortran_order':False}   \n", {0, 0, 0x80, 0x3f}, 4,
         RT_F32, 1.0f},
        /* clang-format on */
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        Bytes b = npy_bytes(ok[i].major, ok[i].dict, 0);
        bytes_put(&b, ok[i].data, ok[i].n);
        int rc = rt_npy_parse(b.p, b.n, "ok.npy", &t, err, sizeof err);
        CHECK(rc == 0 && t.dtype == ok[i].dtype && t.numel == 1 && t.data[0] == ok[i].want);
        if (rc) fprintf(stderr, "case %zu: %s\n", i, err);
        rt_tensor_free(&t);
        free(b.p);
    }
    Bytes b = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 0, 3), }", 0);
    CHECK(rt_npy_parse(b.p, b.n, "z.npy", &t, err, sizeof err) == 0 && t.numel == 0 && t.rank == 3);
    rt_tensor_free(&t);
    free(b.p);

    /* errors */
    CHECK_ERR(rt_npy_parse("\x93NUMPY\x01", 7, "t.npy", &t, err, sizeof err), err,
              "t.npy: ", "too short");
    CHECK_ERR(rt_npy_parse("PK\x03\x04xxxxxxxxxx", 14, "t.npy", &t, err, sizeof err), err,
              "t.npy: ", "not a .npy file (bad magic");
    NPY_FAIL(4, "{}", 0, "unsupported .npy format version 4.0");
    b = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 4);
    b.p[8] = 0xff;
    b.p[9] = 0x7f;
    CHECK_ERR(rt_npy_parse(b.p, b.n, "t.npy", &t, err, sizeof err), err,
              "header length 32767 exceeds");
    free(b.p);
    NPY_FAIL(1, "{'descr' '<f4'}", 0, "bad header", "expected ':'");
    NPY_FAIL(1, "{'descr': '<f4', 'fortran_order': False}", 0, "missing key 'shape'");
    NPY_FAIL(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4,
             "unexpected key 'x'");
    NPY_FAIL(1, "{'descr': '<f4', 'descr': '<f4'}", 4, "duplicate key 'descr'");
    NPY_FAIL(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16,
             "fortran_order True");
    NPY_FAIL(1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }", 4, "True or False");
    NPY_FAIL(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", 8,
             "unsupported dtype '<c8'");
    NPY_FAIL(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", 4,
             "big-endian dtype '>f4'");
    NPY_FAIL(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", 4,
             "structured dtypes");
    NPY_FAIL(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3), }", 12,
             "shape (3) is not a tuple");
    NPY_FAIL(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }", 12,
             "non-negative integer");
    NPY_FAIL(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20,
             "data is 20 bytes but the shape and dtype <f4 need 24");
    NPY_FAIL(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 4,
             "more than 8 dimensions");
    NPY_FAIL(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }",
             4, "above 2^34");
    NPY_FAIL(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 4,
             "more than 2^34 elements");
    NPY_FAIL(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } junk", 4,
             "unexpected text after the header dict");
    NPY_FAIL(1,
             "{'descr': '<f\xc3\xa9"
             "4'}",
             4, "unsupported character");
    CHECK_ERR(rt_npy_read(tmp_path("nope.npy"), NULL, &t, err, sizeof err), err, "nope.npy",
              "cannot open");
}

/* ---- npz ---- */

/* numpy.savez_compressed(f, w=np.arange(6, dtype=np.float32).reshape(2, 3) / 4,
 *                        lbl=np.array([9, 0, 255], dtype=np.uint8)) */
static const unsigned char npz_golden[] = {
    0x50, 0x4b, 0x03, 0x04, 0x2d, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21, 0x00, 0x0a, 0x9c,
    0x00, 0xa4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x05, 0x00, 0x14, 0x00, 0x77, 0x2e,
    0x6e, 0x70, 0x79, 0x01, 0x00, 0x10, 0x00, 0x98, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x56,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x9b, 0xec, 0x17, 0xea, 0x1b, 0x10, 0xc9, 0xc8, 0x50,
    0xc6, 0x50, 0xad, 0x9e, 0x92, 0x5a, 0x9c, 0x5c, 0xa4, 0x6e, 0xa5, 0xa0, 0x6e, 0x93, 0x66, 0xa2,
    0xae, 0xa3, 0xa0, 0x9e, 0x96, 0x5f, 0x54, 0x52, 0x94, 0x98, 0x17, 0x9f, 0x5f, 0x94, 0x92, 0x0a,
    0x12, 0x77, 0x4b, 0xcc, 0x29, 0x4e, 0x05, 0x8a, 0x17, 0x67, 0x24, 0x16, 0xa4, 0x02, 0xf9, 0x1a,
    0x46, 0x3a, 0x0a, 0xc6, 0x9a, 0x3a, 0x0a, 0xb5, 0x0a, 0x64, 0x03, 0x2e, 0x06, 0x30, 0x68, 0xb0,
    0x03, 0x12, 0xf6, 0x0c, 0x0c, 0x0e, 0x40, 0xdc, 0x00, 0xc4, 0x0b, 0xec, 0x01, 0x50, 0x4b, 0x03,
    0x04, 0x2d, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21, 0x00, 0x27, 0x6e, 0xa0, 0x39, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x07, 0x00, 0x14, 0x00, 0x6c, 0x62, 0x6c, 0x2e, 0x6e,
    0x70, 0x79, 0x01, 0x00, 0x10, 0x00, 0x83, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x47, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x9b, 0xec, 0x17, 0xea, 0x1b, 0x10, 0xc9, 0xc8, 0x50, 0xc6,
    0x50, 0xad, 0x9e, 0x92, 0x5a, 0x9c, 0x5c, 0xa4, 0x6e, 0xa5, 0xa0, 0x5e, 0x53, 0x6a, 0xa8, 0xae,
    0xa3, 0xa0, 0x9e, 0x96, 0x5f, 0x54, 0x52, 0x94, 0x98, 0x17, 0x9f, 0x5f, 0x94, 0x92, 0x0a, 0x12,
    0x77, 0x4b, 0xcc, 0x29, 0x4e, 0x05, 0x8a, 0x17, 0x67, 0x24, 0x16, 0xa4, 0x02, 0xf9, 0x1a, 0xc6,
    0x3a, 0x9a, 0x3a, 0x0a, 0xb5, 0x0a, 0x14, 0x00, 0x2e, 0x4e, 0x86, 0xff, 0x00, 0x50, 0x4b, 0x01,
    0x02, 0x2d, 0x03, 0x2d, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21, 0x00, 0x0a, 0x9c, 0x00,
    0xa4, 0x56, 0x00, 0x00, 0x00, 0x98, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x77, 0x2e, 0x6e, 0x70, 0x79,
    0x50, 0x4b, 0x01, 0x02, 0x2d, 0x03, 0x2d, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21, 0x00,
    0x27, 0x6e, 0xa0, 0x39, 0x47, 0x00, 0x00, 0x00, 0x83, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0x8d, 0x00, 0x00, 0x00, 0x6c, 0x62,
    0x6c, 0x2e, 0x6e, 0x70, 0x79, 0x50, 0x4b, 0x05, 0x06, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x02,
    0x00, 0x68, 0x00, 0x00, 0x00, 0x0d, 0x01, 0x00, 0x00, 0x00, 0x00,
};

static void
test_npz(void)
{
    char err[512];
    RtTensorSet s;
    int rc = rt_npz_parse(npz_golden, sizeof npz_golden, "g.npz", &s, err, sizeof err);
    CHECK(rc == 0);
    if (rc) fprintf(stderr, "%s\n", err);
    const RtTensor *t;
    CHECK((t = rt_tensorset_find(&s, "w")) && t->dtype == RT_F32 && t->rank == 2 &&
          t->dims[0] == 2 && t->dims[1] == 3 && t->data[0] == 0.0f && t->data[5] == 1.25f);
    CHECK((t = rt_tensorset_find(&s, "lbl")) && t->dtype == RT_U8 && t->rank == 1 &&
          t->data[0] == 9.0f && t->data[2] == 255.0f);
    rt_tensorset_free(&s);

    RtTensor ts[3];
    int64_t d[] = {3, 4}, one = 7;
    rt_tensor_init(&ts[0], "weights", 2, d, err, sizeof err);
    rt_tensor_init(&ts[1], "spikes", 1, &one, err, sizeof err);
    rt_tensor_init(&ts[2], "caf\xc3\xa9", 0, NULL, err, sizeof err);
    fill(&ts[0], 1.0f);
    for (int i = 0; i < 7; i++)
        ts[1].data[i] = (float)(i % 2);
    ts[1].dtype = RT_U8;
    ts[2].dtype = RT_I8;
    ts[2].data[0] = -5.0f;
    const char *path = tmp_path("r.npz");
    CHECK(rt_npz_write(path, ts, 3, err, sizeof err) == 0);
    rc = rt_npz_read(path, NULL, &s, err, sizeof err);
    CHECK(rc == 0 && s.ntensors == 3);
    if (rc) fprintf(stderr, "%s\n", err);
    for (int i = 0; i < 3 && rc == 0; i++) {
        t = rt_tensorset_find(&s, ts[i].name);
        CHECK(t && t->dtype == ts[i].dtype && t->rank == ts[i].rank && t->numel == ts[i].numel &&
              memcmp(t->data, ts[i].data, sizeof(float) * (size_t)t->numel) == 0);
    }
    rt_tensorset_free(&s);

    /* corruption: flip a data byte (CRC), cut the file, break the directory */
    unsigned char *buf;
    size_t len;
    CHECK(rt_read_file(path, NULL, &buf, &len, err, sizeof err) == 0);
    buf[30 + 11 + 130] ^= 1;
    CHECK_ERR(rt_npz_parse(buf, len, "c.npz", &s, err, sizeof err), err,
              "c.npz: member 'weights.npy'", "CRC-32 mismatch");
    buf[30 + 11 + 130] ^= 1;
    CHECK(rt_npz_parse(buf, len, "c.npz", &s, err, sizeof err) == 0);
    rt_tensorset_free(&s);
    CHECK_ERR(rt_npz_parse(buf, len - 30, "c.npz", &s, err, sizeof err), err,
              "c.npz: ", "no end of central directory");
    CHECK_ERR(rt_npz_parse(buf, 10, "c.npz", &s, err, sizeof err), err, "too short for a ZIP");
    size_t eocd = len - 22;
    buf[eocd + 16] ^= 0x40; /* directory offset */
    CHECK_ERR(rt_npz_parse(buf, len, "c.npz", &s, err, sizeof err), err, "central directory");
    buf[eocd + 16] ^= 0x40;
    buf[0] = 'X'; /* first local header */
    CHECK_ERR(rt_npz_parse(buf, len, "c.npz", &s, err, sizeof err), err, "member 'weights.npy'",
              "local header");
    free(buf);
    /* deflate corruption in the numpy-made archive */
    unsigned char g[sizeof npz_golden];
    memcpy(g, npz_golden, sizeof g);
    for (size_t i = 40; i < 60; i++)
        g[i] ^= 0x55;
    CHECK_ERR(rt_npz_parse(g, sizeof g, "c.npz", &s, err, sizeof err), err, "c.npz: member '");

    /* a member that is not .npy */
    free(ts[1].name);
    ts[1].name = strdup("x");
    CHECK(rt_npz_write(path, ts, 2, err, sizeof err) == 0);
    CHECK(rt_read_file(path, NULL, &buf, &len, err, sizeof err) == 0);
    /* rename the second member in the directory from "x.npy" to "x.npz" */
    for (size_t i = len - 22; i-- > 0;)
        if (memcmp(buf + i, "x.npy", 5) == 0) {
            buf[i + 4] = 'z';
            break;
        }
    CHECK_ERR(rt_npz_parse(buf, len, "c.npz", &s, err, sizeof err), err, "member 'x.npz'",
              "not a .npy member");
    free(buf);
    free(ts[1].name);
    ts[1].name = strdup("weights");
    CHECK_ERR(rt_npz_write(path, ts, 2, err, sizeof err), err, "r.npz", "'weights' appears twice");
    ts[1].name[0] = 'w';
    ts[1].name[1] = 0;
    ts[1].dtype = RT_F16;
    CHECK_ERR(rt_npz_write(path, ts, 2, err, sizeof err), err, "r.npz: tensor 'w'",
              "cannot write dtype f16");
    CHECK_ERR(rt_npz_read(tmp_path("nope.npz"), NULL, &s, err, sizeof err), err, "nope.npz",
              "cannot open");
    unlink(path);
    for (int i = 0; i < 3; i++)
        rt_tensor_free(&ts[i]);
}

/* ---- IDX and gzip ---- */

static Bytes
idx_bytes(int type, int nd, const uint32_t *dims, size_t datalen)
{
    Bytes b = {0};
    unsigned char h[4] = {0, 0, (unsigned char)type, (unsigned char)nd};
    bytes_put(&b, h, 4);
    for (int i = 0; i < nd; i++) {
        unsigned char d[4] = {(unsigned char)(dims[i] >> 24), (unsigned char)(dims[i] >> 16),
                              (unsigned char)(dims[i] >> 8), (unsigned char)dims[i]};
        bytes_put(&b, d, 4);
    }
    for (size_t i = 0; i < datalen; i++) {
        unsigned char c = (unsigned char)(i * 37 + 1);
        bytes_put(&b, &c, 1);
    }
    return b;
}

#define IDX_FAIL(buf, n, ...)                                                                      \
    do {                                                                                           \
        RtTensor t_;                                                                               \
        char e_[512];                                                                              \
        int rc_ = rt_idx_parse((buf), (n), "t-idx3-ubyte", &t_, e_, sizeof e_);                    \
        check_err(__FILE__, __LINE__, rc_, e_, "t-idx3-ubyte: ", __VA_ARGS__, (const char *)NULL); \
        CHECK(t_.data == NULL);                                                                    \
    } while (0)

static void
test_idx(void)
{
    char err[512];
    RtTensor t;
    uint32_t d23[] = {2, 3};
    Bytes b = idx_bytes(0x08, 2, d23, 6);
    CHECK(rt_idx_parse(b.p, b.n, "a", &t, err, sizeof err) == 0);
    CHECK(t.dtype == RT_U8 && t.rank == 2 && t.dims[0] == 2 && t.dims[1] == 3 && t.numel == 6 &&
          t.data[0] == 1.0f && t.data[5] == (float)(unsigned char)(5 * 37 + 1));
    rt_tensor_free(&t);

    /* gzip, also as two concatenated members, through the file reader */
    Bytes gz = gzip_bytes(b.p, b.n);
    CHECK(rt_idx_parse(gz.p, gz.n, "a.gz", &t, err, sizeof err) == 0 && t.numel == 6 &&
          t.data[5] == (float)(unsigned char)(5 * 37 + 1));
    rt_tensor_free(&t);
    Bytes g1 = gzip_bytes(b.p, 7), g2 = gzip_bytes(b.p + 7, b.n - 7);
    bytes_put(&g1, g2.p, g2.n);
    CHECK(rt_idx_parse(g1.p, g1.n, "a.gz", &t, err, sizeof err) == 0 && t.numel == 6);
    rt_tensor_free(&t);
    write_bytes(tmp_path("x-idx2-ubyte.gz"), gz.p, gz.n);
    CHECK(rt_idx_read(tmp_path("x-idx2-ubyte.gz"), NULL, &t, err, sizeof err) == 0 && t.numel == 6);
    rt_tensor_free(&t);
    write_bytes(tmp_path("y-idx2-ubyte.gz"), b.p, b.n);
    CHECK_ERR(rt_idx_read(tmp_path("y-idx2-ubyte.gz"), NULL, &t, err, sizeof err), err, "y-idx2-ubyte.gz",
              "not gzip data");
    unlink(tmp_path("x-idx2-ubyte.gz"));
    unlink(tmp_path("y-idx2-ubyte.gz"));

    /* gzip errors: truncated, corrupt data, corrupt CRC, trailing junk */
    IDX_FAIL(gz.p, gz.n - 10, "truncated");
    IDX_FAIL(gz.p, 1, "too short for the IDX magic");
    unsigned char *c = malloc(gz.n + 3);
    memcpy(c, gz.p, gz.n);
    c[gz.n - 6] ^= 0xff; /* CRC-32 in the trailer */
    IDX_FAIL(c, gz.n, "corrupt gzip data", "incorrect data check");
    memcpy(c, gz.p, gz.n);
    c[10] = 0xff; /* an invalid deflate block type */
    IDX_FAIL(c, gz.n, "corrupt gzip data");
    memcpy(c, gz.p, gz.n);
    memcpy(c + gz.n, "abc", 3);
    IDX_FAIL(c, gz.n + 3, "unexpected data after the gzip stream");
    free(c);
    free(g1.p);
    free(g2.p);
    free(gz.p);
    unsigned char *out;
    size_t outlen;
    CHECK_ERR(rt_gunzip("ab", 2, "z", 1 << 20, &out, &outlen, err, sizeof err), err, "z: not gzip data");

    /* IDX errors */
    b.p[2] = 0x0d;
    IDX_FAIL(b.p, b.n, "IDX data type 0x0d (float) is not supported");
    b.p[2] = 0x42;
    IDX_FAIL(b.p, b.n, "not an IDX file (bad magic 00 00 42 02");
    b.p[2] = 0x08;
    b.p[0] = 1;
    IDX_FAIL(b.p, b.n, "bad magic 01 00 08 02");
    b.p[0] = 0;
    IDX_FAIL(b.p, 3, "too short");
    IDX_FAIL(b.p, 9, "truncated: the header needs 12 bytes but the file is 9");
    IDX_FAIL(b.p, b.n - 1, "truncated: data is 5 bytes but the dims need 6");
    bytes_zero(&b, 2);
    IDX_FAIL(b.p, b.n, "2 unexpected bytes after the 6 data bytes");
    free(b.p);
    b = idx_bytes(0x08, 0, NULL, 0);
    IDX_FAIL(b.p, b.n, "has 0 dimensions");
    free(b.p);
    uint32_t d9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    b = idx_bytes(0x08, 9, d9, 1);
    IDX_FAIL(b.p, b.n, "has 9 dimensions");
    free(b.p);
    uint32_t huge[3] = {0xffffffffu, 0xffffffffu, 0xffffffffu};
    b = idx_bytes(0x08, 3, huge, 16);
    IDX_FAIL(b.p, b.n, "more than 2^34 elements");
    free(b.p);
    uint32_t big[1] = {1000000};
    b = idx_bytes(0x08, 1, big, 16);
    IDX_FAIL(b.p, b.n, "data is 16 bytes but the dims need 1000000");
    free(b.p);
    CHECK_ERR(rt_idx_read(tmp_path("nope-idx1-ubyte"), NULL, &t, err, sizeof err), err, "nope-idx1-ubyte",
              "cannot open");
}

/* ---- Fashion-MNIST ---- */

static void
test_fmnist_synthetic(void)
{
    char err[1024];
    RtTensor im, lb;
    uint32_t di[3] = {3, 28, 28}, dl[1] = {3};
    Bytes bi = idx_bytes(0x08, 3, di, 3 * 28 * 28), bl = idx_bytes(0x08, 1, dl, 0);
    unsigned char labels[3] = {9, 0, 3};
    bytes_put(&bl, labels, 3);
    Bytes gi = gzip_bytes(bi.p, bi.n);
    write_bytes(tmp_path("t10k-images-idx3-ubyte.gz"), gi.p, gi.n);
    write_bytes(tmp_path("t10k-labels-idx1-ubyte"), bl.p, bl.n);
    int rc = rt_fmnist_load(tmpdir, 0, &im, &lb, err, sizeof err);
    CHECK(rc == 0);
    if (rc) fprintf(stderr, "%s\n", err);
    CHECK(im.rank == 4 && im.dims[0] == 3 && im.dims[1] == 1 && im.dims[2] == 28 &&
          im.dims[3] == 28 && im.numel == 3 * 784);
    CHECK(lb.rank == 1 && lb.dims[0] == 3 && lb.data[0] == 9.0f && lb.data[2] == 3.0f);
    int same = 1;
    for (int64_t i = 0; i < im.numel && rc == 0; i++)
        same &= im.data[i] == (float)bi.p[16 + i] / 255.0f;
    CHECK(same);
    rt_tensor_free(&im);
    rt_tensor_free(&lb);

    /* the images as their bytes: the same shape, the file's bytes, no floats */
    uint8_t *px = NULL;
    rc = rt_fmnist_load_bytes(tmpdir, 0, 0, &im, &px, &lb, err, sizeof err);
    CHECK(rc == 0 && px && im.data == NULL && im.rank == 4 && im.numel == 3 * 784 && lb.data &&
          lb.data[0] == 9.0f);
    CHECK(rc == 0 && memcmp(px, bi.p + 16, 3 * 784) == 0);
    free(px);
    rt_tensor_free(&im);
    rt_tensor_free(&lb);
    /* the first 2 (a trainer's --limit): their bytes and labels, no more */
    rc = rt_fmnist_load_bytes(tmpdir, 0, 2, &im, &px, &lb, err, sizeof err);
    CHECK(rc == 0 && px && im.dims[0] == 2 && im.numel == 2 * 784 && lb.dims[0] == 2 &&
          lb.numel == 2 && lb.data[1] == 0.0f);
    CHECK(rc == 0 && memcmp(px, bi.p + 16, 2 * 784) == 0);
    free(px);
    rt_tensor_free(&im);
    rt_tensor_free(&lb);
    /* more than there are: all of them */
    rc = rt_fmnist_load_bytes(tmpdir, 0, 7, &im, &px, &lb, err, sizeof err);
    CHECK(rc == 0 && im.dims[0] == 3 && im.numel == 3 * 784 && lb.dims[0] == 3);
    free(px);
    rt_tensor_free(&im);
    rt_tensor_free(&lb);

    /* through $SNN_DATA_DIR */
    setenv("SNN_DATA_DIR", tmpdir, 1);
    CHECK(rt_fmnist_load(NULL, 0, &im, &lb, err, sizeof err) == 0 && im.dims[0] == 3);
    rt_tensor_free(&im);
    rt_tensor_free(&lb);

    /* the train split is absent here; the message says where it looked and what to install */
    rc = rt_fmnist_load(tmpdir, 1, &im, &lb, err, sizeof err);
    CHECK_ERR(rc, err, "Fashion-MNIST", "train-images-idx3-ubyte[.gz]", tmpdir,
              "dataset-fashion-mnist");
    CHECK(im.data == NULL && lb.data == NULL);
    unsetenv("SNN_DATA_DIR");

    /* mismatched counts, a bad label, missing labels */
    bl.p[7] = 2;
    write_bytes(tmp_path("t10k-labels-idx1-ubyte"), bl.p, bl.n - 1);
    CHECK_ERR(rt_fmnist_load(tmpdir, 0, &im, &lb, err, sizeof err), err, "has 3 images but",
              "has 2 labels");
    CHECK(im.data == NULL && lb.data == NULL);
    bl.p[7] = 3;
    bl.p[9] = 10;
    write_bytes(tmp_path("t10k-labels-idx1-ubyte"), bl.p, bl.n);
    CHECK_ERR(rt_fmnist_load(tmpdir, 0, &im, &lb, err, sizeof err), err, "label 1 is 10");
    px = (uint8_t *)err; /* set to NULL on failure, nothing left allocated (ASan) */
    CHECK_ERR(rt_fmnist_load_bytes(tmpdir, 0, 0, &im, &px, &lb, err, sizeof err), err,
              "label 1 is 10");
    CHECK(px == NULL && im.data == NULL && lb.data == NULL);
    unlink(tmp_path("t10k-labels-idx1-ubyte"));
    CHECK_ERR(rt_fmnist_load(tmpdir, 0, &im, &lb, err, sizeof err), err,
              "no t10k-labels-idx1-ubyte[.gz] beside it");
    px = (uint8_t *)err;
    CHECK_ERR(rt_fmnist_load_bytes(tmpdir, 0, 0, &im, &px, &lb, err, sizeof err), err,
              "no t10k-labels-idx1-ubyte[.gz] beside it");
    CHECK(px == NULL);
    unlink(tmp_path("t10k-images-idx3-ubyte.gz"));
    free(bi.p);
    free(bl.p);
    free(gi.p);
}

static void
test_fmnist_debian(void)
{
    const char *dir = "/usr/share/datasets/fashion-mnist";
    if (access("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", R_OK) != 0 &&
        access("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte", R_OK) != 0) {
        printf("skipped: Fashion-MNIST test on the real files (%s not installed; Debian package "
               "dataset-fashion-mnist)\n",
               dir);
        return;
    }
    char err[1024];
    RtTensor im, lb;
    unsetenv("SNN_DATA_DIR");
    int rc = rt_fmnist_load(NULL, 0, &im, &lb, err, sizeof err);
    CHECK(rc == 0);
    if (rc) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    CHECK(im.rank == 4 && im.dims[0] == 10000 && im.dims[1] == 1 && im.dims[2] == 28 &&
          im.dims[3] == 28);
    CHECK(lb.rank == 1 && lb.dims[0] == 10000);
    CHECK(lb.data[0] == 9.0f); /* the first t10k item is an ankle boot */
    float lo = 1, hi = 0;
    int on_grid = 1;
    for (int64_t i = 0; i < im.numel; i++) {
        float v = im.data[i];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        float u8 = roundf(v * 255.0f);
        on_grid &= v == u8 / 255.0f;
    }
    CHECK(lo == 0.0f && hi == 1.0f && on_grid);
    long counts[10] = {0};
    for (int64_t i = 0; i < lb.numel; i++)
        counts[(int)lb.data[i]]++;
    int balanced = 1;
    for (int k = 0; k < 10; k++)
        balanced &= counts[k] == 1000;
    CHECK(balanced);
    rt_tensor_free(&im);
    rt_tensor_free(&lb);
    printf("Fashion-MNIST t10k from %s: 10000 images checked\n", dir);
}

static void
test_files(void)
{
    char err[512];
    unsigned char *buf;
    size_t len;
    write_bytes(tmp_path("empty"), "", 0);
    CHECK(rt_read_file(tmp_path("empty"), NULL, &buf, &len, err, sizeof err) == 0 && buf && len == 0);
    free(buf);
    unlink(tmp_path("empty"));
    CHECK_ERR(rt_read_file(tmp_path("missing"), NULL, &buf, &len, err, sizeof err), err, "missing",
              "cannot open");
    CHECK(buf == NULL && len == 0);
    RtTensor t;
    int64_t bad[2] = {1ll << 20, 1ll << 20};
    CHECK_ERR(rt_tensor_init(&t, "big", 2, bad, err, sizeof err), err, "big: ", "more than 2^34");
    CHECK(t.data == NULL);
    rt_tensor_free(NULL);
    rt_tensorset_free(NULL);
}

/* rt_big_alloc: 64-byte aligned below RT_BIG_BYTES, RT_BIG_BYTES-aligned from it up (whether the
 * kernel then gives huge pages is its choice), every byte usable, impossible sizes refused */
static void
test_big_alloc(void)
{
    static const size_t sizes[] = {0, 1, 100, RT_BIG_BYTES - 1, RT_BIG_BYTES, 3 * RT_BIG_BYTES + 5};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        unsigned char *p = rt_big_alloc(n);
        CHECK(p != NULL);
        if (!p) continue;
        size_t align = n >= RT_BIG_BYTES ? RT_BIG_BYTES : 64;
        CHECK((uintptr_t)p % align == 0);
        memset(p, 0xa5, n);
        CHECK(n == 0 || (p[0] == 0xa5 && p[n - 1] == 0xa5));
        free(p);
    }
    CHECK(rt_big_alloc(SIZE_MAX) == NULL);
    CHECK(rt_big_alloc(SIZE_MAX - RT_BIG_BYTES / 2) == NULL);
}

int
main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/snn_test_io.XXXXXX", base && base[0] ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_dtypes();
    test_f16();
    test_files();
    test_safetensors_roundtrip();
    test_safetensors_streamed();
    test_safetensors_parse_ok();
    test_safetensors_errors();
    test_npy();
    test_npz();
    test_idx();
    test_fmnist_synthetic();
    test_fmnist_debian();
    test_big_alloc();
    if (rmdir(tmpdir) != 0) fprintf(stderr, "warning: %s not empty after the tests\n", tmpdir);
    printf("%d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
