/*
 * dict.c - tide_tensor_dict: an ordered list of named tensors with a string
 * metadata map, the in-memory form of a safetensors or .npz file. Lookups are
 * linear (dicts are built once and walked in order); the formats check names.
 */
#include "io.h"

#include <stdlib.h>

tide_tensor_dict * tide_tensor_dict_new(void) {
    tide_tensor_dict * d = calloc(1, sizeof *d);
    if (!d) tide_error_set(TIDE_E_OOM, "out of memory: tensor dict");
    return d;
}

void tide_tensor_dict_free(tide_tensor_dict * d) {
    if (!d) return;
    for (int64_t i = 0; i < d->n; i++) {
        free(d->names[i]);
        tide_tensor_release(d->tensors[i]);
    }
    for (int64_t i = 0; i < 2 * d->n_meta; i++) free(d->meta[i]);
    free(d->names);
    free(d->tensors);
    free(d->meta);
    free(d);
}

static char * dup_str(const char * s) {
    size_t n = strlen(s) + 1;
    char * r = malloc(n);
    if (r) memcpy(r, s, n);
    return r;
}

tide_status io_dict_take(tide_tensor_dict * d, const char * name, tide_tensor * t) {
    if (d->n == d->cap) {
        int64_t cap = d->cap ? 2 * d->cap : 16;
        char ** names = realloc(d->names, (size_t)cap * sizeof *names);
        if (names) d->names = names;
        tide_tensor ** ts = names ? realloc(d->tensors, (size_t)cap * sizeof *ts) : NULL;
        if (!ts) {
            tide_tensor_release(t);
            return tide_error_set(TIDE_E_OOM, "out of memory: tensor dict of %lld entries", (long long)cap);
        }
        d->tensors = ts;
        d->cap     = cap;
    }
    char * copy = dup_str(name);
    if (!copy) {
        tide_tensor_release(t);
        return tide_error_set(TIDE_E_OOM, "out of memory: tensor name");
    }
    d->names[d->n]   = copy;
    d->tensors[d->n] = t;
    d->n++;
    return TIDE_OK;
}

tide_status tide_tensor_dict_add(tide_tensor_dict * d, const char * name, tide_tensor * t) {
    if (!d || !name || !t) return tide_error_set(TIDE_E_VALUE, "tensor_dict_add: dict, name and tensor must not be NULL");
    tide_tensor_retain(t);
    return io_dict_take(d, name, t);
}

tide_status tide_tensor_dict_set_meta(tide_tensor_dict * d, const char * key, const char * value) {
    if (!d || !key || !value)
        return tide_error_set(TIDE_E_VALUE, "tensor_dict_set_meta: dict, key and value must not be NULL");
    char * v = dup_str(value);
    if (!v) return tide_error_set(TIDE_E_OOM, "out of memory: metadata value");
    for (int64_t i = 0; i < d->n_meta; i++)
        if (strcmp(d->meta[2 * i], key) == 0) {
            free(d->meta[2 * i + 1]);
            d->meta[2 * i + 1] = v;
            return TIDE_OK;
        }
    char * k = dup_str(key);
    if (k && d->n_meta == d->cap_meta) {
        int64_t cap  = d->cap_meta ? 2 * d->cap_meta : 8;
        char ** meta = realloc(d->meta, (size_t)(2 * cap) * sizeof *meta);
        if (meta) {
            d->meta     = meta;
            d->cap_meta = cap;
        } else {
            free(k);
            k = NULL;
        }
    }
    if (!k) {
        free(v);
        return tide_error_set(TIDE_E_OOM, "out of memory: metadata key");
    }
    d->meta[2 * d->n_meta]     = k;
    d->meta[2 * d->n_meta + 1] = v;
    d->n_meta++;
    return TIDE_OK;
}

int64_t tide_tensor_dict_count(const tide_tensor_dict * d) { return d ? d->n : 0; }
int64_t tide_tensor_dict_meta_count(const tide_tensor_dict * d) { return d ? d->n_meta : 0; }

const char * tide_tensor_dict_name(const tide_tensor_dict * d, int64_t i) {
    return d && i >= 0 && i < d->n ? d->names[i] : NULL;
}

tide_tensor * tide_tensor_dict_tensor(const tide_tensor_dict * d, int64_t i) {
    return d && i >= 0 && i < d->n ? d->tensors[i] : NULL;
}

tide_tensor * tide_tensor_dict_find(const tide_tensor_dict * d, const char * name) {
    for (int64_t i = 0; d && name && i < d->n; i++)
        if (strcmp(d->names[i], name) == 0) return d->tensors[i];
    return NULL;
}

const char * tide_tensor_dict_meta_key(const tide_tensor_dict * d, int64_t i) {
    return d && i >= 0 && i < d->n_meta ? d->meta[2 * i] : NULL;
}

const char * tide_tensor_dict_meta_value(const tide_tensor_dict * d, int64_t i) {
    return d && i >= 0 && i < d->n_meta ? d->meta[2 * i + 1] : NULL;
}
