/* Reading a .nir file's HDF5 structure into a NirObj tree: groups, numeric datasets (any integer or
 * float type, read as double) and string datasets (variable or fixed length). Sizes, ranks and
 * depth are checked before anything is allocated; libhdf5's own error printing is switched off and
 * its failures become one sentence naming the object. Compiled only where CMake found libhdf5. */
#include "nir/nir.h"

#include <errno.h>
#include <hdf5.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Reader {
    const char *path;
    char *err;
    size_t errlen;
    int64_t nobjs;
    uint64_t budget; /* bytes the datasets may still claim, as doubles */
} Reader;

static bool
fail(Reader *r, const char *obj, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (obj && obj[0])
        rt_io_error(r->err, r->errlen, r->path, "'%s': %s", obj, msg);
    else
        rt_io_error(r->err, r->errlen, r->path, "%s", msg);
    return false;
}

static char *
xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static bool read_group(Reader *r, hid_t gid, const char *where, int depth, NirObj *out);

/* one dataset: where is its path in the file (messages) */
static bool
read_dataset(Reader *r, hid_t did, const char *where, NirObj *o)
{
    bool ok = false;
    hid_t tid = H5Dget_type(did), sid = H5Dget_space(did), mt = -1;
    if (tid < 0 || sid < 0) {
        fail(r, where, "cannot read the dataset's type or shape");
        goto done;
    }
    int rank = H5Sget_simple_extent_ndims(sid);
    if (rank < 0 || rank > NIR_MAX_RANK) {
        fail(r, where, "rank %d (at most %d)", rank, NIR_MAX_RANK);
        goto done;
    }
    hsize_t dims[NIR_MAX_RANK];
    if (H5Sget_simple_extent_dims(sid, dims, NULL) < 0) {
        fail(r, where, "cannot read the dataset's shape");
        goto done;
    }
    o->rank = rank;
    o->numel = 1;
    for (int d = 0; d < rank; d++) {
        if (dims[d] > (hsize_t)NIR_MAX_NUMEL || (int64_t)dims[d] * o->numel > NIR_MAX_NUMEL) {
            fail(r, where, "more than %lld elements", (long long)NIR_MAX_NUMEL);
            goto done;
        }
        o->dims[d] = (int64_t)dims[d];
        o->numel *= (int64_t)dims[d];
    }
    size_t n = (size_t)o->numel;
    /* a dataset's values need not be in the file (compressed, or chunks never written, which read
     * as fill values): the claims together are bounded by the file's size, so that a small file
     * cannot ask for much */
    if ((uint64_t)n * 8 > r->budget) {
        fail(r, where, "claims %lld elements, more than a file of this size can hold (compressed, "
             "or never written)", (long long)o->numel);
        goto done;
    }
    r->budget -= (uint64_t)n * 8;
    H5T_class_t cls = H5Tget_class(tid);
    if (cls == H5T_INTEGER || cls == H5T_FLOAT) {
        o->kind = NIR_NUMBERS;
        o->is_int = cls == H5T_INTEGER;
        o->num = malloc((n ? n : 1) * sizeof *o->num);
        if (!o->num) {
            fail(r, where, "out of memory");
            goto done;
        }
        if (n && H5Dread(did, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, o->num) < 0) {
            fail(r, where, "cannot read its values (damaged or truncated file?)");
            goto done;
        }
    } else if (cls == H5T_STRING) {
        o->kind = NIR_STRINGS;
        o->str = calloc(n ? n : 1, sizeof *o->str);
        if (!o->str) {
            fail(r, where, "out of memory");
            goto done;
        }
        mt = H5Tcopy(H5T_C_S1);
        htri_t is_var = H5Tis_variable_str(tid);
        if (mt < 0 || is_var < 0) {
            fail(r, where, "cannot read its string type");
            goto done;
        }
        if (is_var) {
            char **tmp = calloc(n ? n : 1, sizeof *tmp);
            if (!tmp || H5Tset_size(mt, H5T_VARIABLE) < 0 ||
                H5Tset_cset(mt, H5Tget_cset(tid)) < 0 ||
                (n && H5Dread(did, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, tmp) < 0)) {
                free(tmp);
                fail(r, where, "cannot read its strings (damaged or truncated file?)");
                goto done;
            }
            bool is_oom = false;
            for (size_t i = 0; i < n; i++)
                if (!(o->str[i] = xstrdup(tmp[i] ? tmp[i] : ""))) is_oom = true;
            if (n) H5Dvlen_reclaim(mt, sid, H5P_DEFAULT, tmp);
            free(tmp);
            if (is_oom) {
                fail(r, where, "out of memory");
                goto done;
            }
        } else {
            size_t size = H5Tget_size(tid);
            if (size == 0 || size > 1 << 20 || (n && size > ((size_t)1 << 31) / n)) {
                fail(r, where, "strings of %zu bytes", size);
                goto done;
            }
            char *buf = calloc(n ? n : 1, size + 1);
            if (!buf || H5Tset_size(mt, size + 1) < 0 || H5Tset_strpad(mt, H5T_STR_NULLTERM) < 0 ||
                (n && H5Dread(did, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)) {
                free(buf);
                fail(r, where, "cannot read its strings (damaged or truncated file?)");
                goto done;
            }
            bool is_oom = false;
            for (size_t i = 0; i < n; i++) {
                char *s = buf + i * (size + 1);
                s[size] = 0;
                if (!(o->str[i] = xstrdup(s))) is_oom = true;
            }
            free(buf);
            if (is_oom) {
                fail(r, where, "out of memory");
                goto done;
            }
        }
    } else {
        o->kind = NIR_OTHER; /* compound, enum, reference...: an error only if a field is one */
    }
    ok = true;
done:
    if (mt >= 0) H5Tclose(mt);
    if (sid >= 0) H5Sclose(sid);
    if (tid >= 0) H5Tclose(tid);
    return ok;
}

static int
compare_names(const void *a, const void *b)
{
    return strcmp(((const NirObj *)a)->name, ((const NirObj *)b)->name);
}

static bool
read_group(Reader *r, hid_t gid, const char *where, int depth, NirObj *out)
{
    out->kind = NIR_GROUP;
    if (depth > 2 * NIR_MAX_DEPTH + 4) return fail(r, where, "groups nested too deeply");
    H5G_info_t info;
    if (H5Gget_info(gid, &info) < 0) return fail(r, where, "cannot list the group");
    if (info.nlinks > (hsize_t)NIR_MAX_NODES || (r->nobjs += (int64_t)info.nlinks) > 4 * NIR_MAX_NODES)
        return fail(r, where, "too many objects (more than %d)", 4 * NIR_MAX_NODES);
    out->kids = calloc(info.nlinks ? info.nlinks : 1, sizeof *out->kids);
    if (!out->kids) return fail(r, where, "out of memory");
    for (hsize_t i = 0; i < info.nlinks; i++) {
        char name[1024];
        ssize_t len = H5Lget_name_by_idx(gid, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name,
                                         H5P_DEFAULT);
        if (len < 0 || (size_t)len >= sizeof name)
            return fail(r, where, "a member's name is unreadable or longer than %zu bytes",
                        sizeof name - 1);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", where, name);
        NirObj *kid = &out->kids[out->nkids];
        if (!(kid->name = xstrdup(name))) return fail(r, path, "out of memory");
        out->nkids++;
        hid_t oid = H5Oopen(gid, name, H5P_DEFAULT);
        if (oid < 0) return fail(r, path, "cannot open it (a dangling link, or a damaged file)");
        H5I_type_t t = H5Iget_type(oid);
        bool ok = true;
        if (t == H5I_GROUP)
            ok = read_group(r, oid, path, depth + 1, kid);
        else if (t == H5I_DATASET)
            ok = read_dataset(r, oid, path, kid);
        else
            kid->kind = NIR_OTHER;
        H5Oclose(oid);
        if (!ok) return false;
    }
    qsort(out->kids, (size_t)out->nkids, sizeof *out->kids, compare_names);
    return true;
}

bool
nir_h5_available(void)
{
    return true;
}

/* HDF5's signature: the superblock starts with it at 0, 512, 1024, 2048, ... */
static const unsigned char h5_signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
enum { H5_SEARCH = 1 << 16 }; /* how far the signature is looked for */
/* The name libhdf5 opens the image under: its core driver refuses the name of a file that exists,
 * so one that cannot */
#define H5_IMAGE_NAME "/proc/self/snnc-nir-file-image"

static uint64_t
le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* RtSizeProbe of HDF5: the superblock's end-of-file address (from its base address) is the file's
 * size; no signature in the first 64 KiB stops the read (not HDF5) */
static int
h5_probe(const unsigned char *b, size_t n, const void *ctx, uint64_t *total)
{
    (void)ctx;
    for (size_t at = 0; at <= H5_SEARCH; at = at ? at * 2 : 512) {
        if (n < at + 16) return 1;
        if (memcmp(b + at, h5_signature, 8) != 0) continue;
        int version = b[at + 8];
        int o = version <= 1 ? b[at + 13] : b[at + 9]; /* size of offsets */
        size_t base_at = version == 0 ? at + 24 : version == 1 ? at + 28 : at + 12;
        if (version > 3 || (o != 2 && o != 4 && o != 8)) {
            *total = RT_SIZE_UNKNOWN; /* a superblock this does not know: libhdf5 will say */
            return 0;
        }
        size_t eof_at = base_at + 2 * (size_t)o;
        if (n < eof_at + (size_t)o) return 1;
        uint64_t base = le(b + base_at, o), eof = le(b + eof_at, o);
        uint64_t undefined = o == 8 ? UINT64_MAX : ((uint64_t)1 << (8 * o)) - 1;
        *total = eof == undefined || base > UINT64_MAX / 2 || eof > UINT64_MAX / 2
                     ? RT_SIZE_UNKNOWN
                     : base + eof;
        return 0;
    }
    *total = n;
    return 0;
}

bool
nir_h5_read(const char *path, NirObj *root, char *err, size_t errlen)
{
    memset(root, 0, sizeof *root);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    /* the file is read once, bounded, and parsed from memory: a FIFO or a device is read like a
     * file, and libhdf5 never sees the path */
    unsigned char *buf;
    size_t len;
    if (rt_read_file_probed(path, NULL, h5_probe, NULL, &buf, &len, err, errlen)) return false;
    /* deflate packs at most 1032 bytes into one: 2 x that for values read as doubles */
    uint64_t budget = 2064 * (uint64_t)len + ((uint64_t)1 << 20), ceiling = rt_read_ceiling();
    Reader r = {path, err, errlen, 0, budget < ceiling ? budget : ceiling};
    bool has_signature = false;
    for (size_t at = 0; at <= H5_SEARCH && at + 8 <= len && !has_signature; at = at ? at * 2 : 512)
        has_signature = memcmp(buf + at, h5_signature, 8) == 0;
    uint64_t claim = RT_SIZE_UNKNOWN;
    if (h5_probe(buf, len, NULL, &claim) != 0) claim = RT_SIZE_UNKNOWN; /* the superblock is cut */
    if (!has_signature) {
        free(buf);
        return fail(&r, NULL, "not an HDF5 file (a .nir file is HDF5, written by nir.write)");
    }
    if (claim != RT_SIZE_UNKNOWN && len < claim) {
        free(buf);
        return fail(&r, NULL, "truncated: its superblock says the file is %llu bytes, it holds %zu",
                    (unsigned long long)claim, len);
    }
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), fid = -1;
    if (fapl >= 0 && H5Pset_fapl_core(fapl, 1 << 16, 0) >= 0 &&
        H5Pset_file_image(fapl, buf, len) >= 0)
        fid = H5Fopen(H5_IMAGE_NAME, H5F_ACC_RDONLY, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    free(buf);
    if (fid < 0) return fail(&r, NULL, "cannot open it as HDF5 (damaged or truncated file?)");
    hid_t gid = H5Gopen2(fid, "/", H5P_DEFAULT);
    bool ok = gid >= 0 ? read_group(&r, gid, "", 0, root)
                       : fail(&r, NULL, "cannot open its root group (damaged file?)");
    if (gid >= 0) H5Gclose(gid);
    H5Fclose(fid);
    if (!ok) nir_obj_free(root);
    return ok;
}
