/*
 * npy.c - NumPy's .npy files and .npz archives of them. The header is a
 * Python dict literal (descr, fortran_order, shape), parsed here by a small
 * scanner that accepts what numpy writes; the data goes straight into the
 * tensor's storage, then is byte-swapped or widened in place when needed.
 * The zip container is zip.c's; inflating is zlib's (file.c).
 */
#include "io.h"

#include <stdio.h>
#include <stdlib.h>

enum { MAX_NPY_HEADER = 1 << 20, NPY_ALIGN = 64 };

#define BAD(...) tide_error_set(TIDE_E_VALUE, __VA_ARGS__)

typedef struct {
    int32_t dtype;       /* the tensor's */
    size_t  file_size;   /* bytes of one element in the file */
    int     widen;       /* IO_I8 ... or -1 */
    int     swap;        /* big-endian data */
    int     fortran;
    int32_t ndim;
    int64_t sizes[TIDE_MAX_DIMS];
} npy_info;

/* -- the header's dict literal ------------------------------------------------------- */

typedef struct {
    const char * s, * end, * p;
    const io_src * src;
} scan;

static void skip_ws(scan * c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

/* The message shows the header, its bytes outside printable ASCII as \xNN. */
static tide_status syntax(scan * c, const char * expected) {
    int len = (int)(c->end - c->s);
    while (len > 0 && (c->s[len - 1] == ' ' || c->s[len - 1] == '\n')) len--;
    char   shown[240];
    size_t k = 0;
    for (int i = 0; i < len && k + 8 < sizeof shown; i++) {
        unsigned char ch = (unsigned char)c->s[i];
        if (ch >= 0x20 && ch < 0x7f) shown[k++] = (char)ch;
        else k += (size_t)snprintf(shown + k, sizeof shown - k, "\\x%02x", ch);
    }
    shown[k] = 0;
    return BAD("%s: %s: malformed header: expected %s at byte %d of \"%s%s\"", c->src->op, c->src->where, expected,
               (int)(c->p - c->s), shown, k + 8 >= sizeof shown ? "..." : "");
}

static bool eat(scan * c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A quoted Python string without escapes (all numpy writes); *out points into the header. */
static tide_status scan_string(scan * c, const char ** out, int * len) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return syntax(c, "a quoted string");
    char         q     = *c->p++;
    const char * start = c->p;
    while (c->p < c->end && *c->p != q && *c->p != '\\') c->p++;
    if (c->p >= c->end || *c->p != q) return syntax(c, "the end of a string");
    *out = start;
    *len = (int)(c->p - start);
    c->p++;
    return TIDE_OK;
}

static bool word(scan * c, const char * w) {
    skip_ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
        c->p += n;
        return true;
    }
    return false;
}

static tide_status scan_shape(scan * c, npy_info * info) {
    if (!eat(c, '(')) return syntax(c, "a shape tuple");
    info->ndim = 0;
    for (;;) {
        if (eat(c, ')')) return TIDE_OK;
        skip_ws(c);
        if (c->p >= c->end || *c->p < '0' || *c->p > '9') return syntax(c, "a dimension size");
        int64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (INT64_MAX - 9) / 10) return syntax(c, "a smaller dimension size");
            v = v * 10 + (*c->p++ - '0');
        }
        if (c->p < c->end && *c->p == 'L') c->p++;   /* Python 2's long */
        if (info->ndim == TIDE_MAX_DIMS)
            return tide_error_set(TIDE_E_SHAPE, "%s: %s: the array has more than %d dimensions", c->src->op,
                                  c->src->where, TIDE_MAX_DIMS);
        info->sizes[info->ndim++] = v;
        if (!eat(c, ',')) {
            if (eat(c, ')')) return TIDE_OK;
            return syntax(c, "',' or ')' in the shape");
        }
    }
}

static tide_status parse_descr(const io_src * s, const char * d, int len, npy_info * info) {
    char order = len > 0 ? d[0] : 0, kind = len > 1 ? d[1] : 0;
    int  size  = len == 3 && d[2] >= '1' && d[2] <= '9' ? d[2] - '0' : 0;
    info->widen = -1;
    if (order == '<' || order == '|' || order == '=') info->swap = 0;
    else if (order == '>') info->swap = size > 1;
    else size = 0;
    static const struct { char kind; int size; int32_t dtype; int widen; } map[] = {
        {'b', 1, TIDE_DTYPE_BOOL, -1}, {'u', 1, TIDE_DTYPE_U8, -1},      {'i', 1, TIDE_DTYPE_I32, IO_I8},
        {'i', 2, TIDE_DTYPE_I32, IO_I16}, {'u', 2, TIDE_DTYPE_I32, IO_U16}, {'i', 4, TIDE_DTYPE_I32, -1},
        {'u', 4, TIDE_DTYPE_I64, IO_U32}, {'i', 8, TIDE_DTYPE_I64, -1},  {'f', 2, TIDE_DTYPE_F16, -1},
        {'f', 4, TIDE_DTYPE_F32, -1},     {'f', 8, TIDE_DTYPE_F64, -1}};
    for (size_t i = 0; size && i < sizeof map / sizeof map[0]; i++)
        if (map[i].kind == kind && map[i].size == size) {
            info->dtype     = map[i].dtype;
            info->widen     = map[i].widen;
            info->file_size = (size_t)size;
            return TIDE_OK;
        }
    return tide_error_set(TIDE_E_DTYPE, "%s: %s: dtype '%.*s' is not supported (supported: bool, uint8, uint16, uint32, "
                          "int8, int16, int32, int64, float16, float32, float64)", s->op, s->where, len > 40 ? 40 : len, d);
}

static tide_status parse_dict(const io_src * s, const char * text, size_t n, npy_info * info) {
    scan c = {text, text + n, text, s};
    bool have_descr = false, have_order = false, have_shape = false;
    if (!eat(&c, '{')) return syntax(&c, "'{'");
    while (!eat(&c, '}')) {
        const char * key;
        int          klen;
        TIDE_CHECK(scan_string(&c, &key, &klen));
        if (!eat(&c, ':')) return syntax(&c, "':'");
        if (klen == 5 && memcmp(key, "descr", 5) == 0) {
            skip_ws(&c);
            if (c.p < c.end && *c.p == '[')
                return tide_error_set(TIDE_E_DTYPE, "%s: %s: structured arrays (a list descr) are not supported", s->op, s->where);
            const char * d;
            int          dlen;
            TIDE_CHECK(scan_string(&c, &d, &dlen));
            TIDE_CHECK(parse_descr(s, d, dlen, info));
            have_descr = true;
        } else if (klen == 13 && memcmp(key, "fortran_order", 13) == 0) {
            if (word(&c, "True")) info->fortran = 1;
            else if (word(&c, "False")) info->fortran = 0;
            else return syntax(&c, "True or False");
            have_order = true;
        } else if (klen == 5 && memcmp(key, "shape", 5) == 0) {
            TIDE_CHECK(scan_shape(&c, info));
            have_shape = true;
        } else {
            return BAD("%s: %s: malformed header: unexpected key '%.*s'", s->op, s->where, klen > 40 ? 40 : klen, key);
        }
        if (!eat(&c, ',')) {
            if (eat(&c, '}')) break;
            return syntax(&c, "',' or '}'");
        }
    }
    skip_ws(&c);
    if (c.p != c.end) return syntax(&c, "the end of the header");
    if (!have_descr || !have_order || !have_shape)
        return BAD("%s: %s: malformed header: the key '%s' is missing", s->op, s->where,
                   !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
    return TIDE_OK;
}

/* -- reading --------------------------------------------------------------------------- */

static tide_status read_header(io_src * s, npy_info * info) {
    unsigned char pre[10];
    TIDE_CHECK(io_src_read_exact(s, pre, 8, "the magic string"));
    if (memcmp(pre, "\x93NUMPY", 6) != 0) return BAD("%s: %s: not a .npy file (no \\x93NUMPY magic string)", s->op, s->where);
    int     major = pre[6];
    int64_t hlen;
    if (major == 1) {
        TIDE_CHECK(io_src_read_exact(s, pre + 8, 2, "the header length"));
        hlen = pre[8] | pre[9] << 8;
    } else if (major == 2 || major == 3) {
        unsigned char l[4];
        TIDE_CHECK(io_src_read_exact(s, l, 4, "the header length"));
        hlen = (int64_t)l[0] | (int64_t)l[1] << 8 | (int64_t)l[2] << 16 | (int64_t)l[3] << 24;
    } else {
        return BAD("%s: %s: .npy format version %d.%d is not supported (1.0, 2.0 and 3.0 are)", s->op, s->where, major, pre[7]);
    }
    if (hlen > MAX_NPY_HEADER)
        return BAD("%s: %s: header length %lld is above the limit of %d bytes", s->op, s->where, (long long)hlen, MAX_NPY_HEADER);
    char * text = malloc((size_t)(hlen ? hlen : 1));
    if (!text) return tide_error_set(TIDE_E_OOM, "%s: out of memory", s->op);
    tide_status r = io_src_read_exact(s, text, (size_t)hlen, "the header");
    if (r == TIDE_OK) r = parse_dict(s, text, (size_t)hlen, info);
    free(text);
    return r;
}

/* Reads a whole .npy from s: header, then the data into a new tensor. */
static tide_tensor * read_npy(io_src * s) {
    npy_info info = {0};
    if (read_header(s, &info) != TIDE_OK) return NULL;
    int64_t sizes[TIDE_MAX_DIMS], elements, bytes;
    for (int32_t i = 0; i < info.ndim; i++)   /* Fortran order: the reversed shape is C-contiguous */
        sizes[i] = info.fortran ? info.sizes[info.ndim - 1 - i] : info.sizes[i];
    if (io_count(s->op, s->where, info.ndim, sizes, info.file_size, &elements, &bytes) != TIDE_OK) return NULL;
    char what[200], dims[160];
    snprintf(what, sizeof what, "the data of shape %s", tide_dims_str(info.ndim, info.sizes, dims, sizeof dims));
    if (io_src_check_room(s, bytes, what) != TIDE_OK) return NULL;   /* before allocating it */
    tide_tensor * t = tide_tensor_empty(info.ndim, sizes, info.dtype, (tide_device){TIDE_DEVICE_CPU, -1});
    if (!t) return NULL;
    void * data = t->storage->data;   /* fresh: no op can see it yet */
    if (io_src_read_exact(s, data, (size_t)bytes, what) != TIDE_OK || io_src_expect_end(s, "the array data") != TIDE_OK) {
        tide_tensor_release(t);
        return NULL;
    }
    if (info.swap) io_swap_bytes(data, info.file_size, elements);
    if (info.widen >= 0) io_widen(data, info.widen, elements);
    if (info.fortran && info.ndim > 1) {
        int64_t rev[TIDE_MAX_DIMS];
        for (int32_t i = 0; i < info.ndim; i++) rev[i] = info.ndim - 1 - i;
        tide_tensor * v = tide_tensor_permute(t, info.ndim, rev);
        tide_tensor_release(t);
        t = v;
    }
    return t;
}

tide_tensor * tide_npy_load(const char * path) {
    if (!path) {
        tide_error_set(TIDE_E_VALUE, "load_npy: path must not be NULL");
        return NULL;
    }
    io_src s;
    if (io_src_open_file(&s, "load_npy", path) != TIDE_OK) return NULL;
    tide_tensor * t = read_npy(&s);
    io_src_close(&s);
    return t;
}

tide_tensor_dict * tide_npz_load(const char * path) {
    if (!path) {
        tide_error_set(TIDE_E_VALUE, "load_npz: path must not be NULL");
        return NULL;
    }
    io_src file;
    if (io_src_open_file(&file, "load_npz", path) != TIDE_OK) return NULL;
    io_zip_entry *     es = NULL;
    int64_t            n  = 0;
    tide_tensor_dict * d  = NULL;
    tide_status        r  = io_zip_list("load_npz", path, file.fd, file.end, &es, &n);
    if (r == TIDE_OK && !(d = tide_tensor_dict_new())) r = TIDE_E_OOM;
    for (int64_t i = 0; r == TIDE_OK && i < n; i++) {
        size_t len = strlen(es[i].name);
        if (len > 0 && es[i].name[len - 1] == '/') continue;   /* a directory */
        if (len < 5 || strcmp(es[i].name + len - 4, ".npy") != 0) {
            r = BAD("load_npz: '%s': entry '%s' is not a .npy file", path, es[i].name);
            break;
        }
        io_src s;
        if ((r = io_zip_open_entry(&s, "load_npz", path, file.fd, file.end, &es[i])) != TIDE_OK) break;
        tide_tensor * t = read_npy(&s);
        io_src_close(&s);
        if (!t) {
            r = TIDE_E_VALUE;
            break;
        }
        es[i].name[len - 4] = 0;
        r = io_dict_take(d, es[i].name, t);
    }
    if (r == TIDE_OK) r = io_check_unique("load_npz", path, d->names, d->n);
    io_zip_free(es, n);
    io_src_close(&file);
    if (r != TIDE_OK) {
        tide_tensor_dict_free(d);
        return NULL;
    }
    return d;
}

/* -- writing --------------------------------------------------------------------------- */

tide_status tide_npy_save(const char * path, tide_tensor * t) {
    if (!path || !t) return tide_error_set(TIDE_E_VALUE, "save_npy: path and tensor must not be NULL");
    static const char * descr[TIDE_DTYPE_COUNT] = {
        [TIDE_DTYPE_F32] = "<f4", [TIDE_DTYPE_F64] = "<f8", [TIDE_DTYPE_I32] = "<i4",  [TIDE_DTYPE_I64] = "<i8",
        [TIDE_DTYPE_U8] = "|u1",  [TIDE_DTYPE_BOOL] = "|b1", [TIDE_DTYPE_F16] = "<f2"};
    if (t->dtype_id < 0 || t->dtype_id >= TIDE_DTYPE_COUNT || !descr[t->dtype_id])
        return tide_error_set(TIDE_E_DTYPE, "save_npy: '%s': dtype %s has no NumPy equivalent; convert it first "
                              "(e.g. t:float())", path, tide_dtype_name(t->dtype_id) ? tide_dtype_name(t->dtype_id) : "?");
    char   shape[TIDE_MAX_DIMS * 24 + 4];
    size_t k = 0;
    shape[k++] = '(';
    for (int32_t i = 0; i < t->ndim; i++)
        k += (size_t)snprintf(shape + k, sizeof shape - k, i ? ", %lld" : "%lld", (long long)t->sizes[i]);
    if (t->ndim == 1) shape[k++] = ',';
    shape[k++] = ')';
    shape[k]   = 0;
    /* numpy's layout: magic, version 1.0, header length, the dict padded with
     * spaces and ended by a newline so that the data starts 64-byte aligned */
    char hdr[512];
    int  n   = snprintf(hdr + 10, sizeof hdr - 10, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                        descr[t->dtype_id], shape);
    int  tot = (10 + n + 1 + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
    memset(hdr + 10 + n, ' ', (size_t)(tot - 10 - n - 1));
    hdr[tot - 1] = '\n';
    memcpy(hdr, "\x93NUMPY\x01\x00", 8);
    hdr[8] = (char)((tot - 10) & 0xFF);
    hdr[9] = (char)((tot - 10) >> 8);
    io_out o;
    TIDE_CHECK(io_out_open(&o, "save_npy", path));
    tide_status r = io_out_write(&o, hdr, (size_t)tot);
    if (r == TIDE_OK && (r = io_out_tensor(&o, t)) != TIDE_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", tide_last_error());
        r = tide_error_set(r, "save_npy: '%s': %s", path, msg);
    }
    if (r == TIDE_OK) return io_out_commit(&o);
    io_out_abort(&o);
    return r;
}
