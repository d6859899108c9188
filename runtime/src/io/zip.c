/*
 * zip.c - the container side of zip archives (.npz): the end-of-directory
 * record (and its zip64 form), the central directory and the local headers,
 * read with bounds checks. Inflating and CRC checks are the byte source's
 * (file.c, through zlib); what the entries hold is the caller's business.
 */
#include "io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

enum {
    SIG_LOCAL = 0x04034b50, SIG_CENTRAL = 0x02014b50, SIG_END = 0x06054b50,
    SIG_END64 = 0x06064b50, SIG_LOC64 = 0x07064b50,
    END_SIZE = 22, END64_SIZE = 56, LOC64_SIZE = 20, CENTRAL_SIZE = 46, LOCAL_SIZE = 30,
    MAX_COMMENT = 65535
};

static uint32_t rd16(const unsigned char * p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t rd32(const unsigned char * p) { return rd16(p) | rd16(p + 2) << 16; }
static uint64_t rd64(const unsigned char * p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

#define BAD(...) tide_error_set(TIDE_E_VALUE, __VA_ARGS__)

static tide_status read_at(const char * op, const char * path, int fd, void * buf, size_t n, int64_t at, const char * what) {
    int64_t got = io_pread_full(fd, buf, n, at);
    if (got < 0) return tide_error_set(TIDE_E_IO, "%s: '%s': read failed: %s", op, path, strerror(errno));
    if ((size_t)got < n) return BAD("%s: '%s': truncated: %s at byte %lld runs past the end of the file", op, path, what, (long long)at);
    return TIDE_OK;
}

void io_zip_free(io_zip_entry * es, int64_t n) {
    for (int64_t i = 0; es && i < n; i++) free(es[i].name);
    free(es);
}

/* Finds the end-of-central-directory record: the last signature whose comment
 * length reaches the end of the file. */
static tide_status find_end(const char * op, const char * path, int fd, int64_t size, int64_t * cd_off,
                            int64_t * cd_size, int64_t * count) {
    int64_t         tail = size < END_SIZE + MAX_COMMENT ? size : END_SIZE + MAX_COMMENT;
    unsigned char * buf  = malloc((size_t)(tail ? tail : 1));
    if (!buf) return tide_error_set(TIDE_E_OOM, "%s: out of memory", op);
    tide_status r = read_at(op, path, fd, buf, (size_t)tail, size - tail, "the end of the archive");
    int64_t     at = -1;
    for (int64_t i = tail - END_SIZE; r == TIDE_OK && i >= 0; i--)
        if (rd32(buf + i) == SIG_END && i + END_SIZE + rd16(buf + i + 20) == tail) {
            at = i;
            break;
        }
    if (r == TIDE_OK && at < 0) r = BAD("%s: '%s': not a zip archive (no end of central directory record)", op, path);
    if (r != TIDE_OK) {
        free(buf);
        return r;
    }
    const unsigned char * e = buf + at;
    uint32_t disk = rd16(e + 4), cd_disk = rd16(e + 6);
    *count   = rd16(e + 10);
    *cd_size = rd32(e + 12);
    *cd_off  = rd32(e + 16);
    int64_t end_pos = size - tail + at;
    free(buf);
    if (*count == 0xFFFF || *cd_size == 0xFFFFFFFF || *cd_off == 0xFFFFFFFF) {   /* zip64 */
        unsigned char loc[LOC64_SIZE], e64[END64_SIZE];
        if (end_pos < LOC64_SIZE) return BAD("%s: '%s': the zip64 end of directory locator is missing", op, path);
        TIDE_CHECK(read_at(op, path, fd, loc, LOC64_SIZE, end_pos - LOC64_SIZE, "the zip64 locator"));
        if (rd32(loc) != SIG_LOC64) return BAD("%s: '%s': the zip64 end of directory locator is missing", op, path);
        uint64_t off64 = rd64(loc + 8);
        if (off64 > (uint64_t)size - END64_SIZE || size < END64_SIZE)
            return BAD("%s: '%s': the zip64 end of directory record lies outside the file", op, path);
        TIDE_CHECK(read_at(op, path, fd, e64, END64_SIZE, (int64_t)off64, "the zip64 end of directory record"));
        if (rd32(e64) != SIG_END64) return BAD("%s: '%s': the zip64 end of directory record is corrupt", op, path);
        disk     = rd32(e64 + 16);
        cd_disk  = rd32(e64 + 20);
        *count   = (int64_t)rd64(e64 + 32);
        *cd_size = (int64_t)rd64(e64 + 40);
        *cd_off  = (int64_t)rd64(e64 + 48);
        end_pos  = (int64_t)off64;
    }
    if (disk != 0 || cd_disk != 0) return BAD("%s: '%s': archives split over several disks are not supported", op, path);
    if (*cd_off < 0 || *cd_size < 0 || *count < 0 || *cd_off > end_pos || *cd_size > end_pos - *cd_off)
        return BAD("%s: '%s': the central directory (%lld bytes at %lld) lies outside the file", op, path,
                   (long long)*cd_size, (long long)*cd_off);
    if (*count > *cd_size / CENTRAL_SIZE)
        return BAD("%s: '%s': %lld entries cannot fit a central directory of %lld bytes", op, path, (long long)*count,
                   (long long)*cd_size);
    return TIDE_OK;
}

/* The zip64 extra field (id 1) holds, in order, the fields whose 32-bit value is all ones. */
static tide_status read_zip64_extra(const char * op, const char * path, const char * name, const unsigned char * x,
                                    uint32_t len, int64_t * usize, int64_t * csize, int64_t * offset) {
    int64_t * want[3] = {usize, csize, offset};
    uint32_t  at = 0;
    while (at + 4 <= len) {
        uint32_t id = rd16(x + at), n = rd16(x + at + 2);
        if (at + 4 + n > len) break;
        if (id == 1) {
            uint32_t k = 0;
            for (int f = 0; f < 3; f++) {
                if (*want[f] != 0xFFFFFFFF) continue;
                if (k + 8 > n) return BAD("%s: '%s': entry '%s': its zip64 extra field is too short", op, path, name);
                *want[f] = (int64_t)rd64(x + at + 4 + k);
                k += 8;
            }
            return TIDE_OK;
        }
        at += 4 + n;
    }
    for (int f = 0; f < 3; f++)
        if (*want[f] == 0xFFFFFFFF) return BAD("%s: '%s': entry '%s': its zip64 extra field is missing", op, path, name);
    return TIDE_OK;
}

tide_status io_zip_list(const char * op, const char * path, int fd, int64_t size, io_zip_entry ** out, int64_t * n_out) {
    int64_t cd_off = 0, cd_size = 0, count = 0;
    TIDE_CHECK(find_end(op, path, fd, size, &cd_off, &cd_size, &count));
    unsigned char * cd = malloc((size_t)(cd_size ? cd_size : 1));
    io_zip_entry *  es = calloc((size_t)(count ? count : 1), sizeof *es);
    tide_status     r  = cd && es ? TIDE_OK : tide_error_set(TIDE_E_OOM, "%s: out of memory", op);
    if (r == TIDE_OK) r = read_at(op, path, fd, cd, (size_t)cd_size, cd_off, "the central directory");
    int64_t at = 0, i = 0;
    for (; r == TIDE_OK && i < count; i++) {
        if (at + CENTRAL_SIZE > cd_size || rd32(cd + at) != SIG_CENTRAL) {
            r = BAD("%s: '%s': central directory entry %lld is corrupt", op, path, (long long)i + 1);
            break;
        }
        const unsigned char * h = cd + at;
        uint32_t flags = rd16(h + 8), nlen = rd16(h + 28), xlen = rd16(h + 30), clen = rd16(h + 32);
        if (at + CENTRAL_SIZE + nlen + xlen + clen > cd_size) {
            r = BAD("%s: '%s': central directory entry %lld runs past the directory", op, path, (long long)i + 1);
            break;
        }
        io_zip_entry * e = &es[i];
        e->name          = malloc(nlen + 1);
        if (!e->name) {
            r = tide_error_set(TIDE_E_OOM, "%s: out of memory", op);
            break;
        }
        memcpy(e->name, h + CENTRAL_SIZE, nlen);
        e->name[nlen]   = 0;
        e->method       = (int)rd16(h + 10);
        e->crc          = rd32(h + 16);
        e->csize        = rd32(h + 20);
        e->usize        = rd32(h + 24);
        e->local_offset = rd32(h + 42);
        r = read_zip64_extra(op, path, e->name, h + CENTRAL_SIZE + nlen, xlen, &e->usize, &e->csize, &e->local_offset);
        if (r != TIDE_OK) break;
        if (strlen(e->name) != nlen) r = BAD("%s: '%s': entry %lld has a name with a NUL byte", op, path, (long long)i + 1);
        else if (flags & 1) r = BAD("%s: '%s': entry '%s' is encrypted", op, path, e->name);
        else if (e->method != 0 && e->method != 8)
            r = BAD("%s: '%s': entry '%s' uses compression method %d; only stored (0) and deflated (8) are supported",
                    op, path, e->name, e->method);
        else if (e->csize < 0 || e->usize < 0 || e->local_offset < 0 || e->local_offset > size - LOCAL_SIZE)
            r = BAD("%s: '%s': entry '%s' lies outside the file", op, path, e->name);
        at += CENTRAL_SIZE + nlen + xlen + clen;
    }
    free(cd);
    if (r != TIDE_OK) {
        io_zip_free(es, count);
        return r;
    }
    *out   = es;
    *n_out = count;
    return TIDE_OK;
}

tide_status io_zip_open_entry(io_src * s, const char * op, const char * path, int fd, int64_t size, const io_zip_entry * e) {
    unsigned char h[LOCAL_SIZE];
    TIDE_CHECK(read_at(op, path, fd, h, LOCAL_SIZE, e->local_offset, "a local header"));
    if (rd32(h) != SIG_LOCAL) return BAD("%s: '%s': entry '%s': its local header is corrupt", op, path, e->name);
    int64_t data = e->local_offset + LOCAL_SIZE + rd16(h + 26) + rd16(h + 28);
    if (data > size || e->csize > size - data)
        return BAD("%s: '%s': entry '%s': its %lld bytes of data run past the end of the file", op, path, e->name,
                   (long long)e->csize);
    char where[600];
    snprintf(where, sizeof where, "'%s' entry '%s'", path, e->name);
    return io_src_open_entry(s, op, where, fd, data, e->csize, e->usize, e->method, e->crc);
}
