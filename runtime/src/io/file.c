/*
 * file.c - the plumbing under every format: sequential byte sources over a
 * file, a gzip stream (zlib's gz* functions) or a zip entry (inflated with
 * zlib, CRC-checked), the atomic writer (temporary file, fsync, rename), and
 * element helpers (byte swaps, widening, UTF-8). Formats parse elsewhere.
 */
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

enum { INBUF = 1 << 16, CHUNK = 1 << 30 };

static tide_status fail_errno(const io_src * s, const char * doing) {
    return tide_error_set(TIDE_E_IO, "%s: %s: %s failed: %s", s->op, s->where, doing, strerror(errno));
}

int64_t io_pread_full(int fd, void * buf, size_t n, int64_t offset) {
    size_t done = 0;
    while (done < n) {
        size_t  want = n - done < CHUNK ? n - done : CHUNK;
        ssize_t r    = pread(fd, (char *)buf + done, want, (off_t)(offset + (int64_t)done));
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break;
        done += (size_t)r;
    }
    return (int64_t)done;
}

/* -- sources ---------------------------------------------------------------------- */

static void src_init(io_src * s, int kind, const char * op, const char * path) {
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->op   = op;
    s->fd   = -1;
    snprintf(s->where, sizeof s->where, "'%s'", path);
}

tide_status io_src_open_file(io_src * s, const char * op, const char * path) {
    src_init(s, IO_SRC_FILE, op, path);
    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0) return tide_error_set(TIDE_E_IO, "%s: cannot open '%s': %s", op, path, strerror(errno));
    s->own_fd = 1;
    struct stat st;
    if (fstat(s->fd, &st) != 0) {
        tide_status r = fail_errno(s, "stat");
        io_src_close(s);
        return r;
    }
    if (S_ISDIR(st.st_mode)) {
        io_src_close(s);
        return tide_error_set(TIDE_E_IO, "%s: cannot open '%s': it is a directory", op, path);
    }
    s->end = (int64_t)st.st_size;
    return TIDE_OK;
}

tide_status io_src_open_gz(io_src * s, const char * op, const char * path) {
    src_init(s, IO_SRC_GZ, op, path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        close(fd);
        return tide_error_set(TIDE_E_IO, "%s: cannot open '%s': it is a directory", op, path);
    }
    if (fd < 0 || !(s->gz = gzdopen(fd, "rb"))) {
        tide_status r = tide_error_set(TIDE_E_IO, "%s: cannot open '%s': %s", op, path,
                                       fd < 0 ? strerror(errno) : "out of memory");
        if (fd >= 0) close(fd);
        return r;
    }
    gzbuffer(s->gz, INBUF);
    if (fstat(fd, &st) == 0) s->end = (int64_t)st.st_size;   /* for io_src_check_room */
    return TIDE_OK;
}

tide_status io_src_open_entry(io_src * s, const char * op, const char * where, int fd, int64_t offset,
                              int64_t csize, int64_t usize, int method, uint32_t crc) {
    src_init(s, method == 0 ? IO_SRC_STORED : IO_SRC_DEFLATE, op, "");
    snprintf(s->where, sizeof s->where, "%s", where);
    s->fd       = fd;
    s->pos      = offset;
    s->end      = offset + csize;
    s->expect   = usize;
    s->want_crc = crc;
    s->crc      = (uint32_t)crc32(0L, Z_NULL, 0);
    if (method == 0) {
        if (csize != usize)
            return tide_error_set(TIDE_E_VALUE, "%s: %s: a stored entry of %lld bytes claims %lld uncompressed bytes",
                                  op, where, (long long)csize, (long long)usize);
        return TIDE_OK;
    }
    s->inbuf = malloc(INBUF);
    if (!s->inbuf) return tide_error_set(TIDE_E_OOM, "out of memory: inflate buffer");
    if (inflateInit2(&s->zs, -MAX_WBITS) != Z_OK) {   /* raw deflate: zip entries have no zlib header */
        free(s->inbuf);
        s->inbuf = NULL;
        return tide_error_set(TIDE_E_OOM, "%s: %s: cannot start inflating: out of memory", op, where);
    }
    s->zs_live = 1;
    return TIDE_OK;
}

static tide_status read_range(io_src * s, void * buf, size_t n, size_t * got) {
    int64_t left = s->end - s->pos;
    size_t  want = (int64_t)n < left ? n : (size_t)(left > 0 ? left : 0);
    int64_t r    = io_pread_full(s->fd, buf, want, s->pos);
    if (r < 0) return fail_errno(s, "read");
    s->pos += r;
    *got = (size_t)r;
    if ((size_t)r < want)   /* the file shrank under us */
        return tide_error_set(TIDE_E_IO, "%s: %s: the file ended %lld bytes early", s->op, s->where,
                              (long long)(want - (size_t)r));
    return TIDE_OK;
}

static tide_status read_gz(io_src * s, void * buf, size_t n, size_t * got) {
    size_t done = 0;
    while (done < n) {
        unsigned want = (unsigned)(n - done < CHUNK ? n - done : CHUNK);
        int      r    = gzread(s->gz, (char *)buf + done, want);
        int      err  = Z_OK;
        const char * msg = gzerror(s->gz, &err);
        if (r < 0 || (err != Z_OK && err != Z_STREAM_END)) {
            if (err == Z_ERRNO) return fail_errno(s, "read");
            const char * colon = strncmp(msg, "<fd:", 4) == 0 ? strstr(msg, ": ") : NULL;
            if (colon) msg = colon + 2;   /* gzdopen names the file "<fd:N>"; ours is in `where` */
            return tide_error_set(TIDE_E_IO, "%s: %s: gzip data is truncated or corrupt: %s", s->op, s->where, msg);
        }
        if (r == 0) break;
        done += (size_t)r;
    }
    *got = done;
    return TIDE_OK;
}

static tide_status read_inflate(io_src * s, void * buf, size_t n, size_t * got) {
    size_t done = 0;
    while (done < n && !s->zs_done) {
        if (s->zs.avail_in == 0 && s->pos < s->end) {
            size_t  want = s->end - s->pos < INBUF ? (size_t)(s->end - s->pos) : INBUF;
            int64_t r    = io_pread_full(s->fd, s->inbuf, want, s->pos);
            if (r < 0) return fail_errno(s, "read");
            if ((size_t)r < want)
                return tide_error_set(TIDE_E_IO, "%s: %s: the file ended %lld bytes early", s->op, s->where,
                                      (long long)(want - (size_t)r));
            s->pos += r;
            s->zs.next_in  = s->inbuf;
            s->zs.avail_in = (uInt)r;
        }
        size_t want = n - done < CHUNK ? n - done : CHUNK;
        s->zs.next_out  = (unsigned char *)buf + done;
        s->zs.avail_out = (uInt)want;
        int zr          = inflate(&s->zs, Z_NO_FLUSH);
        done += want - s->zs.avail_out;
        if (zr == Z_STREAM_END) s->zs_done = 1;
        else if (zr == Z_BUF_ERROR) {
            if (s->zs.avail_in > 0 || s->pos >= s->end) break;   /* compressed data ran out: reported by the caller */
        } else if (zr != Z_OK) {
            return tide_error_set(TIDE_E_VALUE, "%s: %s: corrupt deflate data: %s", s->op, s->where,
                                  s->zs.msg ? s->zs.msg : "inflate failed");
        }
    }
    *got = done;
    return TIDE_OK;
}

tide_status io_src_read(io_src * s, void * buf, size_t n, size_t * got) {
    *got = 0;
    if (n == 0) return TIDE_OK;
    tide_status st;
    switch (s->kind) {
    case IO_SRC_GZ:      st = read_gz(s, buf, n, got); break;
    case IO_SRC_DEFLATE: st = read_inflate(s, buf, n, got); break;
    default:             st = read_range(s, buf, n, got); break;
    }
    if (s->kind == IO_SRC_STORED || s->kind == IO_SRC_DEFLATE) {
        size_t done = 0;   /* crc32 takes uInt lengths */
        while (done < *got) {
            uInt part = (uInt)(*got - done < CHUNK ? *got - done : CHUNK);
            s->crc    = (uint32_t)crc32(s->crc, (const Bytef *)buf + done, part);
            done += part;
        }
    }
    s->produced += (int64_t)*got;
    return st;
}

tide_status io_src_read_exact(io_src * s, void * buf, size_t n, const char * what) {
    size_t got;
    TIDE_CHECK(io_src_read(s, buf, n, &got));
    if (got < n)
        return tide_error_set(TIDE_E_VALUE, "%s: %s: truncated: %s needs %zu bytes, only %zu remain", s->op, s->where,
                              what, n, got);
    return TIDE_OK;
}

/* Deflate expands at most 1032:1; the slack covers output zlib has buffered. */
enum { MAX_INFLATE_RATIO = 1032, INFLATE_SLACK = 1 << 18 };

static int64_t inflated_bound(int64_t compressed) {
    if (compressed > (INT64_MAX - INFLATE_SLACK) / MAX_INFLATE_RATIO) return INT64_MAX;
    return compressed * MAX_INFLATE_RATIO + INFLATE_SLACK;
}

tide_status io_src_check_room(io_src * s, int64_t n, const char * what) {
    int64_t left, raw;
    int     exact = 1;
    switch (s->kind) {
    case IO_SRC_FILE:   left = s->end - s->pos; break;
    case IO_SRC_STORED: left = s->expect - s->produced; break;
    case IO_SRC_DEFLATE:
        raw  = s->end - s->pos + (int64_t)s->zs.avail_in;
        left = s->expect > s->produced ? s->expect - s->produced : 0;   /* past the declared size: nothing is left */
        if (inflated_bound(raw) < left) {
            left  = inflated_bound(raw);
            exact = 0;
        }
        break;
    default: {   /* GZ: gzoffset is where zlib stands in the raw file, past what it has buffered */
        z_off_t at = gzoffset(s->gz);
        raw        = s->end - (at > 0 ? (int64_t)at : 0);
        left       = inflated_bound(raw > 0 ? raw : 0);
        exact      = 0;
        break;
    }
    }
    if (n <= left) return TIDE_OK;
    if (exact)
        return tide_error_set(TIDE_E_VALUE, "%s: %s: truncated: %s needs %lld bytes, only %lld remain", s->op, s->where,
                              what, (long long)n, (long long)left);
    return tide_error_set(TIDE_E_VALUE, "%s: %s: truncated: %s needs %lld bytes, more than the rest of the file "
                          "can hold", s->op, s->where, what, (long long)n);
}

tide_status io_src_expect_end(io_src * s, const char * what) {
    unsigned char scratch[4096];
    int64_t       extra = 0;
    for (;;) {   /* count what is left, up to a limit: the message says how much */
        size_t got;
        TIDE_CHECK(io_src_read(s, scratch, sizeof scratch, &got));
        extra += (int64_t)got;
        if (got < sizeof scratch || extra >= (1 << 20)) break;
    }
    if (extra > 0)
        return tide_error_set(TIDE_E_VALUE, "%s: %s: %s%lld unexpected bytes after %s", s->op, s->where,
                              extra >= (1 << 20) ? "at least " : "", (long long)extra, what);
    if (s->kind == IO_SRC_DEFLATE && !s->zs_done)
        return tide_error_set(TIDE_E_VALUE, "%s: %s: the deflate stream is truncated", s->op, s->where);
    if (s->kind == IO_SRC_STORED || s->kind == IO_SRC_DEFLATE) {
        if (s->produced != s->expect)
            return tide_error_set(TIDE_E_VALUE, "%s: %s: the zip entry declares %lld bytes but holds %lld", s->op,
                                  s->where, (long long)s->expect, (long long)s->produced);
        if (s->crc != s->want_crc)
            return tide_error_set(TIDE_E_VALUE, "%s: %s: CRC-32 mismatch (0x%08x, the zip directory says 0x%08x): the data is corrupt",
                                  s->op, s->where, (unsigned)s->crc, (unsigned)s->want_crc);
    }
    return TIDE_OK;
}

void io_src_close(io_src * s) {
    if (s->gz) gzclose(s->gz);
    if (s->zs_live) inflateEnd(&s->zs);
    free(s->inbuf);
    if (s->own_fd && s->fd >= 0) close(s->fd);
    s->gz      = NULL;
    s->zs_live = 0;
    s->inbuf   = NULL;
    s->fd      = -1;
}

/* -- atomic writes ---------------------------------------------------------------- */

static atomic_int tmp_counter;

tide_status io_out_open(io_out * o, const char * op, const char * path) {
    o->fd   = -1;
    o->op   = op;
    o->path = path;
    size_t n = strlen(path) + 64;
    o->tmp   = malloc(n);
    if (!o->tmp) return tide_error_set(TIDE_E_OOM, "out of memory: file name");
    for (int attempt = 0; attempt < 100; attempt++) {
        snprintf(o->tmp, n, "%s.tmp-%ld-%d", path, (long)getpid(), atomic_fetch_add(&tmp_counter, 1));
        o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);   /* the umask applies, as for any new file */
        if (o->fd >= 0) {
            struct stat st;   /* a file that replaces another keeps its permissions */
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) (void)fchmod(o->fd, st.st_mode & 07777);
            return TIDE_OK;
        }
        if (errno != EEXIST) break;
    }
    tide_status r = tide_error_set(TIDE_E_IO, "%s: cannot write '%s': creating '%s' failed: %s", op, path, o->tmp,
                                   strerror(errno));
    free(o->tmp);
    o->tmp = NULL;
    return r;
}

tide_status io_out_write(io_out * o, const void * buf, size_t n) {
    size_t done = 0;
    while (done < n) {
        size_t  want = n - done < CHUNK ? n - done : CHUNK;
        ssize_t r    = write(o->fd, (const char *)buf + done, want);
        if (r < 0) {
            if (errno == EINTR) continue;
            return tide_error_set(TIDE_E_IO, "%s: writing '%s' failed: %s", o->op, o->tmp, strerror(errno));
        }
        done += (size_t)r;
    }
    return TIDE_OK;
}

void io_out_abort(io_out * o) {
    if (o->fd >= 0) close(o->fd);
    if (o->tmp) unlink(o->tmp);
    free(o->tmp);
    o->fd  = -1;
    o->tmp = NULL;
}

tide_status io_out_commit(io_out * o) {
    const char * doing = "fsync";
    if (fsync(o->fd) != 0) goto fail;
    doing     = "close";
    int fd    = o->fd;
    o->fd     = -1;
    if (close(fd) != 0) goto fail;
    doing = "rename";
    if (rename(o->tmp, o->path) != 0) goto fail;
    free(o->tmp);
    o->tmp = NULL;
    /* the rename itself reaches the disk with the directory; a failure here
     * leaves a complete file either way, so it is not reported */
    char * dir   = strdup(o->path);
    char * slash = dir ? strrchr(dir, '/') : NULL;
    if (dir) {
        if (slash == dir) slash[1] = 0;
        else if (slash) *slash = 0;
        int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
        free(dir);
    }
    return TIDE_OK;
fail:;
    tide_status r = tide_error_set(TIDE_E_IO, "%s: writing '%s' failed: %s of '%s': %s", o->op, o->path, doing,
                                   o->tmp, strerror(errno));
    io_out_abort(o);
    return r;
}

tide_status io_out_tensor(io_out * o, tide_tensor * t) {
    if (t->dev.type != TIDE_DEVICE_CPU)
        return tide_error_set(TIDE_E_DEVICE, "only tensors on the CPU can be written");
    if (t->nelem == 0) return TIDE_OK;
    tide_tensor * c = tide_tensor_contiguous(t);
    if (!c) return TIDE_E_OOM;
    const void * p = tide_tensor_data(c);
    tide_status  r = p ? io_out_write(o, p, tide_tensor_nbytes(c)) : TIDE_E_VALUE;
    tide_tensor_release(c);
    return r;
}

/* -- elements ----------------------------------------------------------------------- */

void io_swap_bytes(void * p, size_t elsize, int64_t n) {
    unsigned char * b = p;
    for (int64_t i = 0; i < n; i++, b += elsize) {
        switch (elsize) {
        case 2: { uint16_t v; memcpy(&v, b, 2); v = __builtin_bswap16(v); memcpy(b, &v, 2); break; }
        case 4: { uint32_t v; memcpy(&v, b, 4); v = __builtin_bswap32(v); memcpy(b, &v, 4); break; }
        case 8: { uint64_t v; memcpy(&v, b, 8); v = __builtin_bswap64(v); memcpy(b, &v, 8); break; }
        default: break;
        }
    }
}

/* Backwards, so that each wider element lands on bytes already read. */
void io_widen(void * p, int from, int64_t n) {
    unsigned char * b = p;
    for (int64_t i = n - 1; i >= 0; i--) {
        switch (from) {
        case IO_I8:  { int8_t   v; memcpy(&v, b + i, 1);     int32_t w = v; memcpy(b + 4 * i, &w, 4); break; }
        case IO_I16: { int16_t  v; memcpy(&v, b + 2 * i, 2); int32_t w = v; memcpy(b + 4 * i, &w, 4); break; }
        case IO_U16: { uint16_t v; memcpy(&v, b + 2 * i, 2); int32_t w = v; memcpy(b + 4 * i, &w, 4); break; }
        case IO_U32: { uint32_t v; memcpy(&v, b + 4 * i, 4); int64_t w = v; memcpy(b + 8 * i, &w, 8); break; }
        default: break;
        }
    }
}

tide_status io_count(const char * op, const char * where, int32_t ndim, const int64_t * sizes, size_t elsize,
                     int64_t * elements, int64_t * bytes) {
    int64_t n = 1;
    for (int32_t i = 0; i < ndim; i++) {
        if (sizes[i] < 0)
            return tide_error_set(TIDE_E_VALUE, "%s: %s: size %lld of dimension %d is negative", op, where,
                                  (long long)sizes[i], i + 1);
        if (sizes[i] && n > (INT64_MAX / 16) / sizes[i])
            return tide_error_set(TIDE_E_VALUE, "%s: %s: a shape of %d dimensions is too large", op, where, ndim);
        n *= sizes[i];
    }
    *elements = n;
    *bytes    = n * (int64_t)elsize;
    return TIDE_OK;
}

static int cmp_str_ptr(const void * a, const void * b) { return strcmp(*(char * const *)a, *(char * const *)b); }

tide_status io_check_unique(const char * op, const char * path, char * const * names, int64_t n) {
    if (n < 2) return TIDE_OK;
    char ** sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted) return tide_error_set(TIDE_E_OOM, "%s: out of memory", op);
    memcpy(sorted, names, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_str_ptr);
    tide_status r = TIDE_OK;
    for (int64_t i = 1; i < n && r == TIDE_OK; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0)
            r = tide_error_set(TIDE_E_VALUE, "%s: '%s': the name '%s' appears twice", op, path, sorted[i]);
    free(sorted);
    return r;
}

int io_utf8_valid(const char * str, size_t n) {
    const unsigned char * s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t   len;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
        else return 0;
        if (i + len > n) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        /* overlong forms, surrogates, beyond U+10FFFF */
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
            return 0;
        i += len;
    }
    return 1;
}
