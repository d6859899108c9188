/*
 * safetensors.c - checkpoints in the safetensors format: an 8-byte
 * little-endian header length N, N bytes of JSON (name -> dtype, shape,
 * data_offsets; "__metadata__" -> string map) padded with spaces to a multiple
 * of 8, then the tensors' bytes. The JSON goes through cJSON both ways; the
 * checks on load follow the reference reader (no overlaps, no unused bytes).
 */
#include "io.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The reference implementation refuses headers above 100 MB. */
enum { MAX_HEADER = 100000000 };

/* Tide's dtypes by their safetensors names, with the rank of each in the
 * reference writer's dtype order (larger ranks first in the data). */
static const struct { const char * name; int32_t rank; } st_dtypes[TIDE_DTYPE_COUNT] = {
    [TIDE_DTYPE_F32] = {"F32", 11}, [TIDE_DTYPE_F64] = {"F64", 12}, [TIDE_DTYPE_I32] = {"I32", 9},
    [TIDE_DTYPE_I64] = {"I64", 13}, [TIDE_DTYPE_U8] = {"U8", 1},    [TIDE_DTYPE_BOOL] = {"BOOL", 0},
    [TIDE_DTYPE_F16] = {"F16", 7},  [TIDE_DTYPE_BF16] = {"BF16", 8}};

static int32_t st_dtype_find(const char * name) {
    for (int32_t d = 0; d < TIDE_DTYPE_COUNT; d++)
        if (strcmp(st_dtypes[d].name, name) == 0) return d;
    return -1;
}

/* -- save ------------------------------------------------------------------------- */

/* The reference writer's order: decreasing dtype alignment (so every tensor
 * starts aligned), then by name. */
static int cmp_write_order(const void * a, const void * b, void * ctx) {
    const tide_tensor_dict * d = ctx;
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    int32_t ri = st_dtypes[d->tensors[i]->dtype_id].rank, rj = st_dtypes[d->tensors[j]->dtype_id].rank;
    if (ri != rj) return ri > rj ? -1 : 1;
    return strcmp(d->names[i], d->names[j]);
}

static tide_status check_string(const char * path, const char * what, const char * s) {
    if (!io_utf8_valid(s, strlen(s)))
        return tide_error_set(TIDE_E_VALUE, "save: '%s': %s '%s' is not valid UTF-8", path, what, s);
    return TIDE_OK;
}

/* Exact integers in the JSON: cJSON prints numbers through a double. */
static cJSON * json_int(int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    return cJSON_CreateRaw(buf);
}

static tide_status build_header(const char * path, const tide_tensor_dict * d, const int64_t * order, char ** out,
                                size_t * out_len) {
    cJSON * root = cJSON_CreateObject();
    bool    ok   = root != NULL;
    if (ok && d->n_meta > 0) {
        cJSON * meta = cJSON_AddObjectToObject(root, "__metadata__");
        ok           = meta != NULL;
        for (int64_t i = 0; ok && i < d->n_meta; i++)
            ok = cJSON_AddStringToObject(meta, d->meta[2 * i], d->meta[2 * i + 1]) != NULL;
    }
    int64_t offset = 0;
    for (int64_t k = 0; ok && k < d->n; k++) {
        tide_tensor * t     = d->tensors[order[k]];
        cJSON *       entry = cJSON_AddObjectToObject(root, d->names[order[k]]);
        cJSON *       shape = entry ? cJSON_CreateArray() : NULL;
        cJSON *       offs  = shape ? cJSON_CreateArray() : NULL;
        ok = offs && cJSON_AddStringToObject(entry, "dtype", st_dtypes[t->dtype_id].name);
        for (int32_t i = 0; ok && i < t->ndim; i++) ok = cJSON_AddItemToArray(shape, json_int(t->sizes[i]));
        int64_t end = offset + (int64_t)tide_tensor_nbytes(t);
        ok = ok && cJSON_AddItemToArray(offs, json_int(offset)) && cJSON_AddItemToArray(offs, json_int(end));
        if (ok) {
            cJSON_AddItemToObject(entry, "shape", shape);
            cJSON_AddItemToObject(entry, "data_offsets", offs);
        } else {
            cJSON_Delete(shape);
            cJSON_Delete(offs);
        }
        offset = end;
    }
    char * json = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!json) return tide_error_set(TIDE_E_OOM, "save: '%s': out of memory building the header", path);
    size_t n = strlen(json), padded = (n + 7) & ~(size_t)7;   /* the data starts 8-byte aligned */
    char * buf = malloc(8 + padded);
    if (!buf) {
        cJSON_free(json);
        return tide_error_set(TIDE_E_OOM, "save: '%s': out of memory building the header", path);
    }
    uint64_t len = padded;
    memcpy(buf, &len, 8);   /* little-endian host (io.h) */
    memcpy(buf + 8, json, n);
    memset(buf + 8 + n, ' ', padded - n);
    cJSON_free(json);
    *out     = buf;
    *out_len = 8 + padded;
    return TIDE_OK;
}

tide_status tide_safetensors_save(const char * path, const tide_tensor_dict * d) {
    if (!path || !d) return tide_error_set(TIDE_E_VALUE, "save: path and dict must not be NULL");
    for (int64_t i = 0; i < d->n; i++) {
        tide_tensor * t = d->tensors[i];
        if (strcmp(d->names[i], "__metadata__") == 0)
            return tide_error_set(TIDE_E_VALUE, "save: '%s': '__metadata__' cannot name a tensor", path);
        TIDE_CHECK(check_string(path, "tensor name", d->names[i]));
        if (t->dtype_id < 0 || t->dtype_id >= TIDE_DTYPE_COUNT)
            return tide_error_set(TIDE_E_DTYPE, "save: '%s': tensor '%s' has unknown dtype %d", path, d->names[i], t->dtype_id);
        if (t->dev.type != TIDE_DEVICE_CPU)
            return tide_error_set(TIDE_E_DEVICE, "save: '%s': tensor '%s' is not on the CPU", path, d->names[i]);
    }
    for (int64_t i = 0; i < d->n_meta; i++) {
        TIDE_CHECK(check_string(path, "metadata key", d->meta[2 * i]));
        TIDE_CHECK(check_string(path, "metadata value", d->meta[2 * i + 1]));
    }
    TIDE_CHECK(io_check_unique("save", path, d->names, d->n));
    int64_t * order = malloc((size_t)(d->n ? d->n : 1) * sizeof *order);
    if (!order) return tide_error_set(TIDE_E_OOM, "save: out of memory");
    for (int64_t i = 0; i < d->n; i++) order[i] = i;
    qsort_r(order, (size_t)d->n, sizeof *order, cmp_write_order, (void *)d);
    char *      header     = NULL;
    size_t      header_len = 0;
    tide_status r = build_header(path, d, order, &header, &header_len);
    if (r != TIDE_OK) {
        free(order);
        return r;
    }
    io_out o;
    r = io_out_open(&o, "save", path);
    if (r == TIDE_OK) r = io_out_write(&o, header, header_len);
    for (int64_t k = 0; r == TIDE_OK && k < d->n; k++) {
        r = io_out_tensor(&o, d->tensors[order[k]]);
        if (r != TIDE_OK) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", tide_last_error());
            r = tide_error_set(r, "save: '%s': tensor '%s': %s", path, d->names[order[k]], msg);
        }
    }
    if (r == TIDE_OK) r = io_out_commit(&o);
    else if (o.tmp) io_out_abort(&o);
    free(header);
    free(order);
    return r;
}

/* -- load ------------------------------------------------------------------------- */

typedef struct {
    const char * name;   /* borrowed from the parsed JSON */
    int32_t      dtype, ndim;
    int64_t      sizes[TIDE_MAX_DIMS];
    int64_t      begin, end;
} st_entry;

#define BAD(...) tide_error_set(TIDE_E_VALUE, __VA_ARGS__)

/* A JSON number that is an integer in [0, 2^53]. */
static bool json_uint(const cJSON * j, int64_t * out) {
    if (!cJSON_IsNumber(j)) return false;
    double v = j->valuedouble;
    if (!(v >= 0 && v <= 0x1p53) || v != floor(v)) return false;
    *out = (int64_t)v;
    return true;
}

static tide_status parse_entry(const char * path, const cJSON * j, st_entry * e) {
    e->name = j->string;
    if (!cJSON_IsObject(j)) return BAD("load: '%s': tensor '%s' is not a JSON object", path, e->name);
    const cJSON * dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    const cJSON * sh = cJSON_GetObjectItemCaseSensitive(j, "shape");
    const cJSON * of = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    if (!cJSON_IsString(dt)) return BAD("load: '%s': tensor '%s' has no dtype string", path, e->name);
    e->dtype = st_dtype_find(dt->valuestring);
    if (e->dtype < 0)
        return tide_error_set(TIDE_E_DTYPE, "load: '%s': tensor '%s' has unsupported dtype '%s' (supported: F32, F64, "
                              "I32, I64, U8, BOOL, F16, BF16)", path, e->name, dt->valuestring);
    if (!cJSON_IsArray(sh)) return BAD("load: '%s': tensor '%s' has no shape array", path, e->name);
    int n = cJSON_GetArraySize(sh);
    if (n > TIDE_MAX_DIMS)
        return tide_error_set(TIDE_E_SHAPE, "load: '%s': tensor '%s' has %d dimensions, at most %d are supported", path,
                              e->name, n, TIDE_MAX_DIMS);
    e->ndim = n;
    int i = 0;
    for (const cJSON * x = sh->child; x; x = x->next, i++)
        if (!json_uint(x, &e->sizes[i]))
            return BAD("load: '%s': tensor '%s': shape entry %d is not a non-negative integer", path, e->name, i + 1);
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || !json_uint(of->child, &e->begin) ||
        !json_uint(of->child->next, &e->end))
        return BAD("load: '%s': tensor '%s': data_offsets must be two non-negative integers [begin, end]", path, e->name);
    if (e->end < e->begin)
        return BAD("load: '%s': tensor '%s': data_offsets [%lld, %lld] end before they begin", path, e->name,
                   (long long)e->begin, (long long)e->end);
    int64_t elements, bytes;
    char    where[600];
    snprintf(where, sizeof where, "'%s': tensor '%s'", path, e->name);
    TIDE_CHECK(io_count("load", where, e->ndim, e->sizes, tide_dtype_size(e->dtype), &elements, &bytes));
    if (bytes != e->end - e->begin) {
        char dims[160];
        return BAD("load: '%s': tensor '%s': shape %s of %s needs %lld bytes but data_offsets [%lld, %lld] hold %lld",
                   path, e->name, tide_dims_str(e->ndim, e->sizes, dims, sizeof dims), st_dtypes[e->dtype].name,
                   (long long)bytes, (long long)e->begin, (long long)e->end, (long long)(e->end - e->begin));
    }
    return TIDE_OK;
}

static int cmp_offsets(const void * a, const void * b) {
    const st_entry * x = a, * y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

static tide_status parse_header(const char * path, const char * text, size_t n, int64_t data_len, cJSON ** root_out,
                                st_entry ** entries_out, int64_t * n_out) {
    if (!io_utf8_valid(text, n)) return BAD("load: '%s': the header is not valid UTF-8", path);
    const char * end  = NULL;
    cJSON *      root = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!root) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        return BAD("load: '%s': the header is not valid JSON (near byte %zu of %zu)", path, at, n);
    }
    *root_out = root;
    for (const char * p = end; p < text + n; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return BAD("load: '%s': the header has bytes after its JSON object (at byte %zu)", path, (size_t)(p - text));
    if (!cJSON_IsObject(root)) return BAD("load: '%s': the header is not a JSON object", path);
    int64_t count = 0;
    for (const cJSON * j = root->child; j; j = j->next) count++;
    st_entry * es = calloc((size_t)(count ? count : 1), sizeof *es);
    if (!es) return tide_error_set(TIDE_E_OOM, "load: out of memory");
    *entries_out = es;
    int64_t k    = 0;
    for (const cJSON * j = root->child; j; j = j->next) {
        if (strcmp(j->string, "__metadata__") == 0) {
            if (cJSON_IsNull(j)) continue;
            if (!cJSON_IsObject(j)) return BAD("load: '%s': __metadata__ is not a JSON object", path);
            for (const cJSON * m = j->child; m; m = m->next)
                if (!cJSON_IsString(m))
                    return BAD("load: '%s': __metadata__ value of '%s' is not a string", path, m->string);
            continue;
        }
        TIDE_CHECK(parse_entry(path, j, &es[k++]));
    }
    *n_out = k;
    char ** names = malloc((size_t)(k ? k : 1) * sizeof *names);
    if (!names) return tide_error_set(TIDE_E_OOM, "load: out of memory");
    for (int64_t i = 0; i < k; i++) names[i] = (char *)es[i].name;
    tide_status r = io_check_unique("load", path, names, k);
    free(names);
    TIDE_CHECK(r);
    /* The data must be covered exactly: sorted by offset, each range starts
     * where the previous one ended, and the last ends with the file. */
    qsort(es, (size_t)k, sizeof *es, cmp_offsets);
    int64_t covered = 0;
    for (int64_t i = 0; i < k; i++) {
        if (es[i].end > data_len)
            return BAD("load: '%s': tensor '%s': data_offsets [%lld, %lld] run past the end of the data (%lld bytes)",
                       path, es[i].name, (long long)es[i].begin, (long long)es[i].end, (long long)data_len);
        if (es[i].begin < covered)
            return BAD("load: '%s': tensors '%s' and '%s' overlap (data_offsets [%lld, %lld] and [%lld, %lld])", path,
                       es[i - 1].name, es[i].name, (long long)es[i - 1].begin, (long long)es[i - 1].end,
                       (long long)es[i].begin, (long long)es[i].end);
        if (es[i].begin > covered)
            return BAD("load: '%s': bytes [%lld, %lld) of the data belong to no tensor", path, (long long)covered,
                       (long long)es[i].begin);
        covered = es[i].end;
    }
    if (covered != data_len)
        return BAD("load: '%s': bytes [%lld, %lld) of the data belong to no tensor", path, (long long)covered,
                   (long long)data_len);
    return TIDE_OK;
}

tide_tensor_dict * tide_safetensors_load(const char * path) {
    if (!path) {
        tide_error_set(TIDE_E_VALUE, "load: path must not be NULL");
        return NULL;
    }
    io_src src;
    if (io_src_open_file(&src, "load", path) != TIDE_OK) return NULL;
    int64_t            size = src.end;
    char *             text = NULL;
    cJSON *            root = NULL;
    st_entry *         es   = NULL;
    int64_t            n    = 0;
    tide_tensor_dict * d    = NULL;
    tide_status        r    = TIDE_OK;
    uint64_t           len  = 0;
    if (size < 8) {
        r = BAD("load: '%s': the file is %lld bytes, too short for a safetensors header", path, (long long)size);
        goto done;
    }
    if ((r = io_src_read_exact(&src, &len, 8, "the header length")) != TIDE_OK) goto done;
    if (len > (uint64_t)(size - 8)) {
        r = BAD("load: '%s': header length %llu runs past the end of the file (%lld bytes)", path,
                (unsigned long long)len, (long long)size);
        goto done;
    }
    if (len > MAX_HEADER) {
        r = BAD("load: '%s': header length %llu is above the format's limit of %d bytes", path,
                (unsigned long long)len, MAX_HEADER);
        goto done;
    }
    text = malloc(len ? len : 1);
    if (!text) {
        r = tide_error_set(TIDE_E_OOM, "load: out of memory for a header of %llu bytes", (unsigned long long)len);
        goto done;
    }
    if ((r = io_src_read_exact(&src, text, len, "the header")) != TIDE_OK) goto done;
    int64_t data_start = 8 + (int64_t)len;
    if ((r = parse_header(path, text, len, size - data_start, &root, &es, &n)) != TIDE_OK) goto done;
    if (!(d = tide_tensor_dict_new())) goto fail;
    const cJSON * meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    for (const cJSON * m = cJSON_IsObject(meta) ? meta->child : NULL; m; m = m->next)
        if ((r = tide_tensor_dict_set_meta(d, m->string, m->valuestring)) != TIDE_OK) goto done;
    for (int64_t i = 0; i < n; i++) {
        tide_tensor * t = tide_tensor_empty(es[i].ndim, es[i].sizes, es[i].dtype, (tide_device){TIDE_DEVICE_CPU, -1});
        if (!t) goto fail;
        /* a fresh storage no op can see yet: read straight into it */
        int64_t want = es[i].end - es[i].begin;
        int64_t got  = want ? io_pread_full(src.fd, t->storage->data, (size_t)want, data_start + es[i].begin) : 0;
        if (got != want) {
            tide_tensor_release(t);
            r = got < 0 ? tide_error_set(TIDE_E_IO, "load: '%s': read failed: %s", path, strerror(errno))
                        : BAD("load: '%s': tensor '%s': the file ended while reading its data", path, es[i].name);
            goto done;
        }
        if ((r = io_dict_take(d, es[i].name, t)) != TIDE_OK) goto done;
    }
    goto done;
fail:
    r = TIDE_E_OOM;   /* the message is set */
done:
    free(text);
    free(es);
    cJSON_Delete(root);
    io_src_close(&src);
    if (r != TIDE_OK) {
        tide_tensor_dict_free(d);
        return NULL;
    }
    return d;
}
