/*
 * idx.c - IDX files, the format of the MNIST data sets: two zero bytes, a
 * type code, the number of dimensions, the sizes as big-endian 32-bit
 * integers, then big-endian data. Read through zlib's gz* functions, so a
 * .gz file and a plain one go through the same path.
 */
#include "io.h"

#include <stdio.h>

#define BAD(...) tide_error_set(TIDE_E_VALUE, __VA_ARGS__)

static const struct { int code; const char * name; int32_t dtype; size_t size; int widen; } idx_types[] = {
    {0x08, "uint8", TIDE_DTYPE_U8, 1, -1},      {0x09, "int8", TIDE_DTYPE_I32, 1, IO_I8},
    {0x0B, "int16", TIDE_DTYPE_I32, 2, IO_I16}, {0x0C, "int32", TIDE_DTYPE_I32, 4, -1},
    {0x0D, "float32", TIDE_DTYPE_F32, 4, -1},   {0x0E, "float64", TIDE_DTYPE_F64, 8, -1}};

static tide_tensor * read_idx(io_src * s) {
    unsigned char magic[4];
    if (io_src_read_exact(s, magic, 4, "the magic number") != TIDE_OK) return NULL;
    if (magic[0] != 0 || magic[1] != 0) {
        BAD("read_idx: %s: not an IDX file: the magic number starts with 0x%02x%02x, not 0x0000", s->where, magic[0], magic[1]);
        return NULL;
    }
    int k = -1;
    for (int i = 0; i < (int)(sizeof idx_types / sizeof idx_types[0]); i++)
        if (idx_types[i].code == magic[2]) k = i;
    if (k < 0) {
        tide_error_set(TIDE_E_DTYPE, "read_idx: %s: unknown data type code 0x%02x (IDX has 0x08, 0x09, 0x0b, 0x0c, "
                       "0x0d and 0x0e)", s->where, magic[2]);
        return NULL;
    }
    int32_t ndim = magic[3];
    if (ndim < 1 || ndim > TIDE_MAX_DIMS) {
        tide_error_set(TIDE_E_SHAPE, "read_idx: %s: %d dimensions; 1 to %d are supported", s->where, ndim, TIDE_MAX_DIMS);
        return NULL;
    }
    unsigned char dims[4 * TIDE_MAX_DIMS];
    if (io_src_read_exact(s, dims, 4 * (size_t)ndim, "the dimension sizes") != TIDE_OK) return NULL;
    int64_t sizes[TIDE_MAX_DIMS], elements, bytes;
    for (int32_t i = 0; i < ndim; i++)
        sizes[i] = (int64_t)dims[4 * i] << 24 | dims[4 * i + 1] << 16 | dims[4 * i + 2] << 8 | dims[4 * i + 3];
    if (io_count("read_idx", s->where, ndim, sizes, idx_types[k].size, &elements, &bytes) != TIDE_OK) return NULL;
    char what[200], shape[160];
    snprintf(what, sizeof what, "the %s data of shape %s", idx_types[k].name, tide_dims_str(ndim, sizes, shape, sizeof shape));
    if (io_src_check_room(s, bytes, what) != TIDE_OK) return NULL;   /* before allocating it */
    tide_tensor * t = tide_tensor_empty(ndim, sizes, idx_types[k].dtype, (tide_device){TIDE_DEVICE_CPU, -1});
    if (!t) return NULL;
    void * data = t->storage->data;   /* fresh: no op can see it yet */
    if (io_src_read_exact(s, data, (size_t)bytes, what) != TIDE_OK || io_src_expect_end(s, "the data") != TIDE_OK) {
        tide_tensor_release(t);
        return NULL;
    }
    if (idx_types[k].size > 1) io_swap_bytes(data, idx_types[k].size, elements);   /* IDX is big-endian */
    if (idx_types[k].widen >= 0) io_widen(data, idx_types[k].widen, elements);
    return t;
}

tide_tensor * tide_idx_load(const char * path) {
    if (!path) {
        tide_error_set(TIDE_E_VALUE, "read_idx: path must not be NULL");
        return NULL;
    }
    io_src s;
    if (io_src_open_gz(&s, "read_idx", path) != TIDE_OK) return NULL;
    tide_tensor * t = read_idx(&s);
    io_src_close(&s);
    return t;
}
