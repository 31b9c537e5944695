/* Writing a NirObj tree as an HDF5 file the way nir.write stores graphs: one group per group,
 * numeric arrays gzip-compressed (float32, or int64 where the tree says integers), scalars
 * uncompressed, strings variable-length UTF-8. The file is made in memory and written by
 * rt_write_file (the rule of every output). Compiled only where CMake found libhdf5. */
#include "nir/nir.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool
write_obj(hid_t parent, const NirObj *o, const char *path, char *err, size_t errlen)
{
    if (o->kind == NIR_GROUP) {
        hid_t g = H5Gcreate2(parent, o->name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (g < 0) {
            rt_io_error(err, errlen, path, "cannot create group '%s'", o->name);
            return false;
        }
        bool ok = true;
        for (int i = 0; ok && i < o->nkids; i++)
            ok = write_obj(g, &o->kids[i], path, err, errlen);
        H5Gclose(g);
        return ok;
    }
    if (o->kind != NIR_NUMBERS && o->kind != NIR_STRINGS) return true;
    hsize_t dims[NIR_MAX_RANK];
    for (int d = 0; d < o->rank; d++)
        dims[d] = (hsize_t)o->dims[d];
    hid_t space = o->rank ? H5Screate_simple(o->rank, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    bool is_compressed = o->kind == NIR_NUMBERS && o->rank > 0 && o->numel > 0;
    if (is_compressed) {
        H5Pset_chunk(dcpl, o->rank, dims);
        H5Pset_deflate(dcpl, 4);
    }
    hid_t ftype, mtype;
    if (o->kind == NIR_STRINGS) {
        ftype = H5Tcopy(H5T_C_S1);
        H5Tset_size(ftype, H5T_VARIABLE);
        H5Tset_cset(ftype, H5T_CSET_UTF8);
        mtype = H5Tcopy(ftype);
    } else {
        ftype = H5Tcopy(o->is_int ? H5T_STD_I64LE : H5T_IEEE_F32LE);
        mtype = H5Tcopy(o->is_int ? H5T_NATIVE_INT64 : H5T_NATIVE_FLOAT);
    }
    hid_t ds = H5Dcreate2(parent, o->name, ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    bool ok = ds >= 0;
    if (ok && o->numel > 0) {
        herr_t rc;
        if (o->kind == NIR_STRINGS) {
            rc = H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, o->str);
        } else if (o->is_int) {
            int64_t *v = malloc((size_t)o->numel * sizeof *v);
            for (int64_t i = 0; v && i < o->numel; i++)
                v[i] = (int64_t)o->num[i];
            rc = v ? H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) : -1;
            free(v);
        } else {
            float *v = malloc((size_t)o->numel * sizeof *v);
            for (int64_t i = 0; v && i < o->numel; i++)
                v[i] = (float)o->num[i];
            rc = v ? H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) : -1;
            free(v);
        }
        ok = rc >= 0;
    }
    if (!ok) rt_io_error(err, errlen, path, "cannot write dataset '%s'", o->name);
    if (ds >= 0) H5Dclose(ds);
    H5Tclose(ftype);
    H5Tclose(mtype);
    H5Pclose(dcpl);
    H5Sclose(space);
    return ok;
}

bool
nir_h5_write(const char *path, const NirObj *root, char *err, size_t errlen)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    /* built in memory by libhdf5's core driver (under a name no file has), then written by the
     * one writer every output goes through: atomic, every error checked, nothing of libhdf5's
     * own file handling on the output's path */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), f = -1;
    if (fapl >= 0 && H5Pset_fapl_core(fapl, 1 << 16, 0) >= 0)
        f = H5Fcreate("/proc/self/snnc-nir-file-image", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (f < 0) {
        rt_io_error(err, errlen, path, "cannot make the HDF5 file in memory");
        return false;
    }
    bool ok = true;
    for (int i = 0; ok && i < root->nkids; i++)
        ok = write_obj(f, &root->kids[i], path, err, errlen);
    unsigned char *image = NULL;
    ssize_t size = ok && H5Fflush(f, H5F_SCOPE_GLOBAL) >= 0 ? H5Fget_file_image(f, NULL, 0) : -1;
    if (ok && size > 0 && (image = malloc((size_t)size)) &&
        H5Fget_file_image(f, image, (size_t)size) != size) {
        free(image);
        image = NULL;
    }
    if (H5Fclose(f) < 0 || (ok && !image)) {
        if (ok) rt_io_error(err, errlen, path, "cannot finish the HDF5 file in memory");
        ok = false;
    }
    if (ok) ok = rt_write_file(path, image, (size_t)size, err, errlen) == 0;
    free(image);
    return ok;
}
