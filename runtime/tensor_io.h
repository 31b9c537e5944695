/* tensor_io.h: reading and writing tensors in the file formats models and data sets come in
 * (safetensors, .npy/.npz, IDX/MNIST) and loading Fashion-MNIST, all as float tensors in memory.
 * Every function reports failure by return value and one sentence in a caller buffer: none prints,
 * exits, aborts or leaks, and none reads out of bounds on any input (the parsers are fuzzed). */
#ifndef SNN_RUNTIME_TENSOR_IO_H
#define SNN_RUNTIME_TENSOR_IO_H

#include <stddef.h>
#include <stdint.h>

typedef enum { RT_F32, RT_F16, RT_BF16, RT_F64, RT_U8, RT_I8, RT_I32, RT_I64, RT_BOOL } RtDType;

#define RT_MAX_RANK 8
/* largest element count any reader accepts; larger claims are errors, never allocations */
#define RT_MAX_NUMEL ((int64_t)1 << 34)

typedef struct RtTensor {
    char *name;    /* owned; NULL for npy */
    RtDType dtype; /* the dtype as stored in the file */
    int rank;
    int64_t dims[RT_MAX_RANK];
    int64_t numel;
    float *data; /* owned; values converted to float (f16/bf16/u8/i8/bool exact; f64/i32/i64
                    rounded) */
} RtTensor;

typedef struct RtTensorSet {
    RtTensor *tensors;
    int ntensors;
} RtTensorSet;

/* All int functions return 0 on success, nonzero on error; on error they write one sentence into
 * err (errlen bytes, always NUL-terminated) naming the file (the `what` argument for in-memory
 * parsers) and what is wrong, and leave *out empty (zeroed), so freeing it is harmless. */

/* safetensors.c: tensors, sets, files, and the safetensors format */
const char *
rt_dtype_name(RtDType t);        /* "f32", "f16", "bf16", "f64", "u8", "i8", "i32", "i64", "bool" */
size_t rt_dtype_size(RtDType t); /* bytes per element as stored */
/* t gets a copy of name (may be NULL), dtype RT_F32, and zeroed data of the given shape */
int rt_tensor_init(RtTensor *t, const char *name, int rank, const int64_t *dims, char *err,
                   size_t errlen);
void rt_tensor_free(RtTensor *t);
const RtTensor *rt_tensorset_find(const RtTensorSet *s, const char *name);
void rt_tensorset_free(RtTensorSet *s);

/* files.c: whole files in and out (docs/design.md, "Files snnc reads and writes").
 * Every read is bounded: by a limit derived from what the model needs, else by the ceiling (half
 * the physical memory, at least 1 GiB). A limit of max_bytes == 0 (or a NULL limit) means the
 * ceiling. */
typedef struct RtReadLimit {
    uint64_t max_bytes; /* the most read; 0: rt_read_ceiling() */
    int64_t max_rows;   /* .npy: > 0: only the first max_rows along the first dimension; 0: all */
    const char *why;    /* where max_bytes comes from, for messages ("the model's weights...") */
} RtReadLimit;
/* The reader's first bytes through a format's eyes: nonzero if it needs more of them to say, else
 * 0 with *total = the bytes to read (what the header claims; n itself when the bytes are not of
 * the format, so the parser says why), or RT_SIZE_UNKNOWN: to the end of the file. */
#define RT_SIZE_UNKNOWN UINT64_MAX
typedef int (*RtSizeProbe)(const unsigned char *head, size_t n, const void *ctx, uint64_t *total);
uint64_t rt_read_ceiling(void);
void rt_format_bytes(uint64_t n, char *buf, size_t len); /* "812 bytes", "3.14 MiB" */
/* The whole file (regular, a FIFO, a device) into a malloc'd buffer (never NULL on success, even
 * for an empty file); a file past the limit is an error, found from its size before reading where
 * the size is known. */
int rt_read_file(const char *path, const RtReadLimit *lim, unsigned char **buf, size_t *len,
                 char *err, size_t errlen);
/* The same, reading only what probe says the format claims (see RtSizeProbe), and one byte more
 * where the file has it, so that a parser sees that data follows; a claim past the limit is an
 * error before anything more is read. A file shorter than its claim is returned as it is, for the
 * parser to say what is missing. */
int rt_read_file_probed(const char *path, const RtReadLimit *lim, RtSizeProbe probe, const void *ctx,
                        unsigned char **buf, size_t *len, char *err, size_t errlen);
/* The one rule of every file snnc writes. path may be: missing (created), a regular file
 * (replaced atomically: a temporary file beside it, written, fsync'ed and closed with every error
 * checked, then renamed over it, its permissions kept; on any failure the temporary is removed and
 * the old file is as it was), a symbolic link to an existing file (that file is replaced; the link
 * stays), /dev/stdout, /dev/stderr, /dev/fd/N, a character device or a FIFO (written as a stream).
 * A directory, socket, block device or dangling link is an error; nothing is written. */
enum { RT_WRITE_EXEC = 1 }; /* flags: a new file is executable (0777 less the umask: a library) */
/* The descriptor a path names by itself (/dev/stdin, /dev/stdout, /dev/stderr, /dev/fd/N,
 * /proc/self/fd/N), else -1: written to, such a path is the stream the process already holds,
 * whatever file it resolves to. */
int rt_fd_path(const char *path);
int rt_write_file_flags(const char *path, const void *buf, size_t len, unsigned flags, char *err,
                        size_t errlen);
int rt_write_file(const char *path, const void *buf, size_t len, char *err, size_t errlen);
/* rt_write_file in two steps, for outputs that change together: prepare writes everything but
 * the renames (a stream is written then), commit renames, abort removes the temporary. Each
 * consumes w. */
typedef struct RtWrite RtWrite;
int rt_write_prepare(const char *path, const void *buf, size_t len, unsigned flags, RtWrite **w,
                     char *err, size_t errlen);
int rt_write_commit(RtWrite *w, char *err, size_t errlen);
void rt_write_abort(RtWrite *w);
/* the same with the bytes written by fn(ctx, fd) to the file's descriptor (0, or an errno value;
 * rt_fd_write_all writes a buffer whole), so that a large file needs no copy of itself in memory
 * (the trained weights, a checkpoint) */
typedef int (*RtWriteFn)(void *ctx, int fd);
int rt_write_prepare_fn(const char *path, RtWriteFn fn, void *ctx, unsigned flags, RtWrite **w,
                        char *err, size_t errlen);
int rt_write_file_fn(const char *path, RtWriteFn fn, void *ctx, char *err, size_t errlen);
int rt_fd_write_all(int fd, const void *buf, size_t len);
/* n little-endian elements of dtype t at bytes (n * rt_dtype_size(t) of them, checked by the
 * caller) converted to float */
void rt_decode_le(RtDType t, const void *bytes, int64_t n, float *dst);
/* The values of x[0..n) that are NaN or infinite: their count, and *first the index of the first
 * (-1 if none) */
int64_t rt_count_nonfinite(const float *x, int64_t n, int64_t *first);
/* what a writer needs from a tensor: rank 0..8, dims >= 0 whose product is numel <= 2^34, data */
int rt_tensor_check(const RtTensor *t, const char *what, char *err, size_t errlen);
/* err gets "<what>: <message>" (printf-style), truncated to errlen, always NUL-terminated */
void rt_io_error(char *err, size_t errlen, const char *what, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

int rt_safetensors_read(const char *path, const RtReadLimit *lim, RtTensorSet *out, char *err,
                        size_t errlen);
/* The most a weights file for n weights of numel elements in all may hold: f32 data and a header
 * of 1 MiB plus 1 KiB a tensor (the limit both snnc and model.so read such files with). */
uint64_t rt_weights_file_limit(int64_t numel, int n);
int rt_safetensors_parse(const void *buf, size_t len, const char *what, RtTensorSet *out, char *err,
                         size_t errlen);
/* Writes tensors converted from their float data to store_dtype (RT_F32, RT_F16 or RT_BF16; round
 * to nearest even), header keys sorted by name like the reference implementation (byte-identical to
 * safetensors' serialize for one dtype), with "__metadata__" omitted. Names must be unique. */
int rt_safetensors_write(const char *path, const RtTensor *ts, int n, RtDType store_dtype,
                         char *err, size_t errlen);
/* the same bytes into a malloc'd buffer */
int rt_safetensors_encode(const RtTensor *ts, int n, RtDType store_dtype, unsigned char **buf,
                          size_t *len, char *err, size_t errlen);

/* npy.c: .npy versions 1.0/2.0/3.0, little-endian '<f4' '<f8' '<f2' '|u1' '|i1' '|b1' '<i4' '<i8',
 * C order only (fortran_order True is an error), shape tuples including () and (n,); and .npz */
/* lim->max_rows > 0 reads only the first rows (of a file that may hold more) */
int rt_npy_read(const char *path, const RtReadLimit *lim, RtTensor *out, char *err, size_t errlen);
int rt_npy_parse(const void *buf, size_t len, const char *what, RtTensor *out, char *err,
                 size_t errlen);
/* Writes float data as dtype RT_F32, RT_U8 or RT_I8; integer stores truncate toward zero like
 * numpy's astype after clamping to the type's range (NaN becomes 0). Header byte-identical to
 * numpy.save. */
int rt_npy_write(const char *path, RtDType dtype, int rank, const int64_t *dims, const float *data,
                 char *err, size_t errlen);
int rt_npy_encode(RtDType dtype, int rank, const int64_t *dims, const float *data,
                  unsigned char **buf, size_t *len, char *err, size_t errlen);
/* .npz: written uncompressed (ZIP "stored") like numpy.savez, member names "<name>.npy",
 * ts[i].dtype one of F32/U8/I8; read with stored and deflate (numpy.savez_compressed) members,
 * names without
 * ".npy", CRCs checked. */
int rt_npz_write(const char *path, const RtTensor *ts, int n, char *err, size_t errlen);
/* the members inflate to at most the limit's bytes together */
int rt_npz_read(const char *path, const RtReadLimit *lim, RtTensorSet *out, char *err,
                size_t errlen);
int rt_npz_parse(const void *buf, size_t len, const char *what, RtTensorSet *out, char *err,
                 size_t errlen);

/* idx.c: IDX (MNIST format): magic 0x0000 08 NN (unsigned byte data only), big-endian dims. The
 * parser transparently gunzips gzip input (magic 1f 8b); the reader requires gzip for files ending
 * in
 * ".gz". Values converted to float unscaled (0..255). */
int rt_idx_read(const char *path, const RtReadLimit *lim, RtTensor *out, char *err, size_t errlen);
int rt_idx_parse(const void *buf, size_t len, const char *what, RtTensor *out, char *err,
                 size_t errlen);
/* gzip (one or more members) into a malloc'd buffer; more than max_out bytes of output is an
 * error (the buffer grows with the output: max_out is never allocated up front) */
int rt_gunzip(const void *buf, size_t len, const char *what, size_t max_out, unsigned char **out,
              size_t *outlen, char *err, size_t errlen);
/* Fashion-MNIST test or train split. dir may be NULL: then search $SNN_DATA_DIR (and its
 * fashion-mnist/ and FashionMNIST/raw/ subfolders), then /usr/share/datasets/fashion-mnist (Debian
 * package dataset-fashion-mnist), accepting {t10k,train}-{images-idx3,labels-idx1}-ubyte[.gz].
 * images: [N,1,28,28], (float)u8 / 255.0f exactly as torchvision's ToTensor; labels: [N], 0..9. */
/* The images and labels files rt_fmnist_load reads (n bytes each) */
int rt_fmnist_find(const char *dir, int is_train, char *img_path, char *lbl_path, size_t n,
                   char *err, size_t errlen);
int rt_fmnist_load(const char *dir, int is_train, RtTensor *images, RtTensor *labels, char *err,
                   size_t errlen);
/* rt_fmnist_load with the images kept as their bytes: *pixels (malloc'd, images->numel of them;
 * pixel i is (float)(*pixels)[i] / 255.0f) and images->data NULL; the floats, four times the
 * memory, are never made (a trainer's peak memory held both for a moment). max_rows > 0: only
 * the first max_rows images and labels are kept (the split's whole file is still checked) */
int rt_fmnist_load_bytes(const char *dir, int is_train, int64_t max_rows, RtTensor *images,
                         uint8_t **pixels, RtTensor *labels, char *err, size_t errlen);

#endif
