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

bool
nir_h5_read(const char *path, NirObj *root, char *err, size_t errlen)
{
    memset(root, 0, sizeof *root);
    Reader r = {path, err, errlen, 0};
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    FILE *f = fopen(path, "rb");
    if (!f) {
        rt_io_error(err, errlen, path, "cannot open: %s", strerror(errno));
        return false;
    }
    fclose(f);
    htri_t is_h5 = H5Fis_hdf5(path);
    if (is_h5 <= 0) return fail(&r, NULL, "not an HDF5 file (a .nir file is HDF5, written by nir.write)");
    hid_t fid = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (fid < 0) return fail(&r, NULL, "cannot open it as HDF5 (damaged or truncated file?)");
    hid_t gid = H5Gopen2(fid, "/", H5P_DEFAULT);
    bool ok = gid >= 0 ? read_group(&r, gid, "", 0, root)
                       : fail(&r, NULL, "cannot open its root group (damaged file?)");
    if (gid >= 0) H5Gclose(gid);
    H5Fclose(fid);
    if (!ok) nir_obj_free(root);
    return ok;
}
