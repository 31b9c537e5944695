/* The HDF5 reader of a build without libhdf5: NIR files cannot be read, and say why. */
#include "nir/nir.h"

bool
nir_h5_available(void)
{
    return false;
}

bool
nir_h5_read(const char *path, NirObj *root, char *err, size_t errlen)
{
    *root = (NirObj){0};
    rt_io_error(err, errlen, path, "NIR support is off in this build of snnc (libhdf5 was not found "
                "when it was built; on Debian: apt-get install libhdf5-dev, then rebuild)");
    return false;
}

bool
nir_h5_write(const char *path, const NirObj *root, char *err, size_t errlen)
{
    (void)root;
    rt_io_error(err, errlen, path, "NIR support is off in this build of snnc (libhdf5 was not found "
                "when it was built; on Debian: apt-get install libhdf5-dev, then rebuild)");
    return false;
}
