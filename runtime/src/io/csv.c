/*
 * csv.c - CSV files of numbers into a [rows, columns] tensor. Read whole
 * through zlib's gz* functions (plain or gzip'd), split into lines and fields
 * (double-quoted fields allowed), parsed with strtod/strtoll. Integer dtypes
 * parse as integers, so int64 values beyond 2^53 stay exact.
 */
#include "io.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define BAD(...) tide_error_set(TIDE_E_VALUE, __VA_ARGS__)

typedef struct {
    const char * path;
    int          delim;
    int64_t      line;
    char *       text;      /* the file */
    size_t       len;
    void *       vals;      /* int64_t or double, 8 bytes each */
    int64_t      n, cap;
    char *       field;     /* scratch for one field, unquoted */
    size_t       field_cap;
} csv;

static tide_status slurp(csv * c, io_src * s) {
    size_t cap = 1 << 16;
    c->text    = malloc(cap);
    for (;;) {
        if (!c->text) return tide_error_set(TIDE_E_OOM, "read_csv: out of memory reading '%s'", c->path);
        size_t got;
        TIDE_CHECK(io_src_read(s, c->text + c->len, cap - c->len, &got));
        c->len += got;
        if (c->len < cap) return TIDE_OK;
        char * bigger = realloc(c->text, cap * 2);
        if (!bigger) free(c->text);
        c->text = bigger;
        cap *= 2;
    }
}

static bool is_space(char ch) { return ch == ' ' || ch == '\t'; }

/* The next field of [*p, end): unquotes it into c->field, moves *p past the
 * delimiter (NULL after the last field). *got is false when no field is left. */
static tide_status next_field(csv * c, const char ** p, const char * end, bool * got, size_t * flen) {
    const char * q = *p;
    while (q < end && is_space(*q)) q++;
    if (q >= end && c->delim == ' ') {   /* only trailing blanks: no more fields */
        *got = false;
        return TIDE_OK;
    }
    size_t n = 0;
    if (c->field_cap < (size_t)(end - q) + 1) {
        char * f = realloc(c->field, (size_t)(end - q) + 1);
        if (!f) return tide_error_set(TIDE_E_OOM, "read_csv: out of memory");
        c->field     = f;
        c->field_cap = (size_t)(end - q) + 1;
    }
    if (q < end && *q == '"') {   /* quoted: "" stands for one quote */
        q++;
        for (;;) {
            if (q >= end)
                return BAD("read_csv: '%s': line %lld: a quoted field is not closed", c->path, (long long)c->line);
            if (*q == '"') {
                if (q + 1 < end && q[1] == '"') { c->field[n++] = '"'; q += 2; continue; }
                q++;
                break;
            }
            c->field[n++] = *q++;
        }
        while (q < end && is_space(*q)) q++;
        if (q < end && *q != c->delim && !(c->delim == ' ' && is_space(*q)))
            return BAD("read_csv: '%s': line %lld: text after a quoted field", c->path, (long long)c->line);
    } else {
        while (q < end && *q != c->delim && !(c->delim == ' ' && is_space(*q))) c->field[n++] = *q++;
        while (n > 0 && is_space(c->field[n - 1])) n--;
    }
    c->field[n] = 0;
    *flen       = n;
    /* past the delimiter; NULL marks "the line ended without one" */
    if (q < end) *p = q + 1;
    else *p = NULL;
    *got = true;
    return TIDE_OK;
}

static tide_status push(csv * c, const void * v) {
    if (c->n == c->cap) {
        int64_t cap  = c->cap ? 2 * c->cap : 1024;
        void *  more = realloc(c->vals, (size_t)cap * 8);
        if (!more) return tide_error_set(TIDE_E_OOM, "read_csv: out of memory for %lld values", (long long)cap);
        c->vals = more;
        c->cap  = cap;
    }
    memcpy((char *)c->vals + 8 * c->n++, v, 8);
    return TIDE_OK;
}

/* Parses c->field as a value of dtype: a double for float dtypes, an int64 else. */
static tide_status parse_value(csv * c, size_t flen, int64_t col, int32_t dtype) {
    const char * f        = c->field;
    bool         is_float = tide_dtype_is_float(dtype);
    if (flen == 0) {
        if (!is_float)
            return BAD("read_csv: '%s': line %lld, column %lld is empty (dtype %s has no NaN)", c->path,
                       (long long)c->line, (long long)col, tide_dtype_name(dtype));
        double nan = NAN;
        return push(c, &nan);
    }
    char * end;
    errno = 0;
    if (is_float) {
        double v = strtod(f, &end);
        if (end == f || *end)
            return BAD("read_csv: '%s': line %lld, column %lld: '%s' is not a number", c->path, (long long)c->line,
                       (long long)col, f);
        return push(c, &v);
    }
    long long v = strtoll(f, &end, 10);
    if (end == f || *end) {   /* "3.0" or "1e3" in an integer column: fine when integral */
        double d = strtod(f, &end);
        if (end == f || *end)
            return BAD("read_csv: '%s': line %lld, column %lld: '%s' is not a number", c->path, (long long)c->line,
                       (long long)col, f);
        if (d != floor(d) || !(fabs(d) <= 0x1p53))
            return BAD("read_csv: '%s': line %lld, column %lld: '%s' is not an integer (dtype %s)", c->path,
                       (long long)c->line, (long long)col, f, tide_dtype_name(dtype));
        v     = (long long)d;
        errno = 0;
    }
    long long lo = dtype == TIDE_DTYPE_I32 ? INT32_MIN : dtype == TIDE_DTYPE_I64 ? INT64_MIN : 0;
    long long hi = dtype == TIDE_DTYPE_I32 ? INT32_MAX : dtype == TIDE_DTYPE_I64 ? INT64_MAX
                 : dtype == TIDE_DTYPE_U8 ? 255 : 1;
    if (errno == ERANGE || v < lo || v > hi)
        return BAD("read_csv: '%s': line %lld, column %lld: %s is out of range for dtype %s", c->path,
                   (long long)c->line, (long long)col, f, tide_dtype_name(dtype));
    int64_t w = v;
    return push(c, &w);
}

static tide_status parse(csv * c, const tide_csv_options * o, tide_tensor_dict * d, int64_t * rows, int64_t * cols) {
    const char * p   = c->text, * end = c->text + c->len;
    bool         hdr = o->header != 0;
    int64_t      width = -1, width_line = 0;
    if (end - p >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) p += 3;   /* a UTF-8 byte order mark */
    *rows = 0;
    while (p < end) {
        const char * nl = memchr(p, '\n', (size_t)(end - p));
        const char * le = nl ? nl : end;
        c->line++;
        const char * next = nl ? nl + 1 : end;
        if (le > p && le[-1] == '\r') le--;
        const char * q = p;
        while (q < le && is_space(*q)) q++;
        if (q == le) { p = next; continue; }   /* blank lines are skipped */
        int64_t      n   = 0;
        const char * cur = p;
        bool         got = true;
        size_t       flen = 0;
        while (cur) {
            TIDE_CHECK(next_field(c, &cur, le, &got, &flen));
            if (!got) break;
            n++;
            if (hdr) {
                char key[24];
                snprintf(key, sizeof key, "%lld", (long long)(n - 1));
                TIDE_CHECK(tide_tensor_dict_set_meta(d, key, c->field));
            } else {
                TIDE_CHECK(parse_value(c, flen, n, o->dtype));
            }
        }
        if (width < 0) {
            width      = n;
            width_line = c->line;
        } else if (n != width) {
            return BAD("read_csv: '%s': line %lld has %lld field%s where line %lld has %lld", c->path,
                       (long long)c->line, (long long)n, n == 1 ? "" : "s", (long long)width_line, (long long)width);
        }
        if (!hdr) (*rows)++;
        hdr = false;
        p   = next;
    }
    *cols = width < 0 ? 0 : width;
    return TIDE_OK;
}

tide_tensor_dict * tide_csv_load(const char * path, const tide_csv_options * opts) {
    tide_csv_options o = opts ? *opts : (tide_csv_options){0};
    if (!path) {
        tide_error_set(TIDE_E_VALUE, "read_csv: path must not be NULL");
        return NULL;
    }
    if (o.delimiter == 0) o.delimiter = ',';
    if (o.delimiter < 1 || o.delimiter > 127 || o.delimiter == '"' || o.delimiter == '\n' || o.delimiter == '\r') {
        tide_error_set(TIDE_E_VALUE, "read_csv: the delimiter must be one ASCII character other than a quote or a "
                       "line break, got code %d", o.delimiter);
        return NULL;
    }
    if (o.dtype < 0 || o.dtype >= TIDE_DTYPE_COUNT) {
        tide_error_set(TIDE_E_DTYPE, "read_csv: unknown dtype %d", o.dtype);
        return NULL;
    }
    io_src s;
    if (io_src_open_gz(&s, "read_csv", path) != TIDE_OK) return NULL;
    csv                c = {.path = path, .delim = o.delimiter};
    tide_tensor_dict * d = tide_tensor_dict_new();
    int64_t            rows = 0, cols = 0;
    tide_status        r = d ? slurp(&c, &s) : TIDE_E_OOM;
    io_src_close(&s);
    if (r == TIDE_OK) r = parse(&c, &o, d, &rows, &cols);
    if (r == TIDE_OK) {
        int64_t       sizes[2] = {rows, cols};
        tide_tensor * t        = tide_tensor_empty(2, sizes, o.dtype, (tide_device){TIDE_DEVICE_CPU, -1});
        if (!t) r = TIDE_E_OOM;
        else {
            int32_t from = tide_dtype_is_float(o.dtype) ? TIDE_DTYPE_F64 : TIDE_DTYPE_I64;
            if (c.n) tide_convert(t->storage->data, o.dtype, 1, c.vals, from, 1, c.n);   /* fresh storage */
            r = io_dict_take(d, "data", t);
        }
    }
    free(c.text);
    free(c.vals);
    free(c.field);
    if (r != TIDE_OK) {
        tide_tensor_dict_free(d);
        return NULL;
    }
    return d;
}
