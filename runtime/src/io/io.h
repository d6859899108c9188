/*
 * io.h - what the readers and writers of runtime/src/io/ share: byte sources
 * (a range of a file, a gzip stream, a zip entry inflated on the fly), the
 * atomic writer (temporary file, fsync, rename), byte-order and widening
 * helpers, and the tensor dict's internals. The formats live in their own
 * files (safetensors.c, npy.c, zip.c, idx.c, csv.c); nothing here knows one.
 */
#ifndef TIDE_IO_H
#define TIDE_IO_H

#include "../core/internal.h"

#include <zlib.h>

/* Every format Tide reads or writes stores little-endian numbers, and the
 * readers copy them straight into storages: a big-endian host would need swaps. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "Tide's file readers assume a little-endian host");

/* -- tensor dicts (dict.c) ------------------------------------------------------- */

struct tide_tensor_dict {
    int64_t        n, cap;
    char **        names;
    tide_tensor ** tensors;
    int64_t        n_meta, cap_meta;
    char **        meta;        /* key, value, key, value, ... */
};

/* Appends t, taking over the caller's reference (released on failure too). */
TIDE_INTERNAL tide_status io_dict_take(tide_tensor_dict * d, const char * name, tide_tensor * t);

/* -- byte sources (file.c) ------------------------------------------------------ */

enum { IO_SRC_FILE, IO_SRC_GZ, IO_SRC_STORED, IO_SRC_DEFLATE };

/* A sequential reader. Messages name `op` and `where` ("'x.npz' entry 'w.npy'"). */
typedef struct io_src {
    int          kind;
    const char * op;
    char         where[600];
    int          fd;            /* FILE, STORED, DEFLATE: borrowed unless own_fd */
    int          own_fd;
    int64_t      pos, end;      /* FILE, STORED, DEFLATE: the byte range still to read */
    gzFile       gz;            /* GZ */
    z_stream     zs;            /* DEFLATE */
    int          zs_live, zs_done;
    unsigned char * inbuf;      /* DEFLATE: compressed bytes read from fd */
    uint32_t     crc, want_crc; /* STORED, DEFLATE: checked when the entry is read to its end */
    int64_t      produced;      /* bytes handed out so far */
    int64_t      expect;        /* STORED, DEFLATE: the entry's uncompressed size */
} io_src;

/* Opens path for reading as a plain file (FILE) or through zlib's gz* functions,
 * which read gzip'd and plain files alike (GZ). Errors: "op: cannot open 'path': ...". */
TIDE_INTERNAL tide_status io_src_open_file(io_src * s, const char * op, const char * path);
TIDE_INTERNAL tide_status io_src_open_gz(io_src * s, const char * op, const char * path);
/* A zip entry: csize bytes of fd from offset, stored or raw-deflated (method
 * 0 or 8), that must produce usize bytes with CRC-32 crc. fd stays the caller's. */
TIDE_INTERNAL tide_status io_src_open_entry(io_src * s, const char * op, const char * where, int fd,
                                            int64_t offset, int64_t csize, int64_t usize,
                                            int method, uint32_t crc);
/* Reads up to n bytes; *got < n only at the end of the data. */
TIDE_INTERNAL tide_status io_src_read(io_src * s, void * buf, size_t n, size_t * got);
/* Reads exactly n bytes of `what`, or fails: "op: 'path': truncated: <what> needs n bytes, m remain". */
TIDE_INTERNAL tide_status io_src_read_exact(io_src * s, void * buf, size_t n, const char * what);
/* Fails ("truncated: <what> needs n bytes, ...") when the rest of the source
 * cannot hold n bytes, so that readers refuse what a corrupt header asks for
 * before allocating it. Exact for files and stored entries; for gzip streams
 * and deflated entries, a bound from deflate's largest expansion (1032:1). */
TIDE_INTERNAL tide_status io_src_check_room(io_src * s, int64_t n, const char * what);
/* Fails unless the source is at its end ("... bytes after <what>"); for zip entries, checks the CRC. */
TIDE_INTERNAL tide_status io_src_expect_end(io_src * s, const char * what);
TIDE_INTERNAL void        io_src_close(io_src * s);
/* pread that loops until n bytes or the end of the file; returns bytes read, -1 on error (errno). */
TIDE_INTERNAL int64_t     io_pread_full(int fd, void * buf, size_t n, int64_t offset);

/* -- atomic writes (file.c) ----------------------------------------------------- */

/* Writes go to a new temporary file beside path; commit fsyncs it, renames it
 * over path and fsyncs the directory, so path holds either its old contents or
 * the complete new file. abort removes the temporary file. */
typedef struct io_out {
    int          fd;
    const char * op;
    const char * path;
    char *       tmp;
} io_out;

TIDE_INTERNAL tide_status io_out_open(io_out * o, const char * op, const char * path);
TIDE_INTERNAL tide_status io_out_write(io_out * o, const void * buf, size_t n);
TIDE_INTERNAL tide_status io_out_commit(io_out * o);
TIDE_INTERNAL void        io_out_abort(io_out * o);
/* Writes the elements of t (on the CPU) in row-major order, waiting for
 * pending writes to it first (a contiguous copy is made when t is a strided
 * view). The message on failure names neither op nor path: callers add them. */
TIDE_INTERNAL tide_status io_out_tensor(io_out * o, tide_tensor * t);

/* -- element helpers (file.c) --------------------------------------------------- */

/* Reverses the bytes of n elements of elsize bytes, in place. */
TIDE_INTERNAL void io_swap_bytes(void * p, size_t elsize, int64_t n);
/* Source kinds a reader may widen into a Tide dtype. */
enum { IO_I8, IO_I16, IO_U16, IO_U32 };
/* n elements of kind `from` at the start of p become int32 (I8, I16, U16) or
 * int64 (U32) in place; p must hold n of the wider elements. */
TIDE_INTERNAL void io_widen(void * p, int from, int64_t n);
/* elements = product of sizes, bytes = elements * elsize, or an error when it overflows. */
TIDE_INTERNAL tide_status io_count(const char * op, const char * where, int32_t ndim, const int64_t * sizes,
                                   size_t elsize, int64_t * elements, int64_t * bytes);
/* Fails (naming op and path) if a name appears twice among names[0..n). */
TIDE_INTERNAL tide_status io_check_unique(const char * op, const char * path, char * const * names, int64_t n);
/* 1 if the n bytes are valid UTF-8. */
TIDE_INTERNAL int io_utf8_valid(const char * s, size_t n);

/* -- zip archives (zip.c) ------------------------------------------------------- */

typedef struct io_zip_entry {
    char *   name;
    int      method;          /* 0 stored, 8 deflated */
    uint32_t crc;
    int64_t  csize, usize;    /* compressed and uncompressed sizes */
    int64_t  local_offset;    /* of the entry's local header */
} io_zip_entry;

/* Reads the central directory of the zip archive in fd (size bytes), zip64
 * included: a new array of *n entries (io_zip_free). Refuses encrypted entries,
 * methods other than stored and deflated, and archives split over disks. */
TIDE_INTERNAL tide_status io_zip_list(const char * op, const char * path, int fd, int64_t size,
                                      io_zip_entry ** entries, int64_t * n);
TIDE_INTERNAL void        io_zip_free(io_zip_entry * entries, int64_t n);
/* A source that reads entry e's uncompressed bytes (io_src_expect_end checks its CRC). */
TIDE_INTERNAL tide_status io_zip_open_entry(io_src * s, const char * op, const char * path, int fd, int64_t size,
                                            const io_zip_entry * e);

#endif /* TIDE_IO_H */
