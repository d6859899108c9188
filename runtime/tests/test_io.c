/* test_io.c - the file formats from C: safetensors round trips of every dtype
 * (0-d, empty, strided), corrupt headers, the atomic save when a tensor fails,
 * .npy, IDX (plain and gzip'd) and CSV, and saves and loads from two threads
 * at once (for ThreadSanitizer). The Lua specs cover the formats in depth. */
#include "tide.h"
#include "check.h"

#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static char dir[64];

static const char * in_dir(const char * name) {
    static _Thread_local char buf[256];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

static void write_file(const char * path, const void * data, size_t n) {
    FILE * f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(data, 1, n, f) == n);
    fclose(f);
}

static int files_in_dir(void) {
    int n = 0;
    DIR * d = opendir(dir);
    for (struct dirent * e; d && (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    if (d) closedir(d);
    return n;
}

static tide_tensor * arange(int64_t n, int32_t dtype) {
    double * v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (double)(i % 7) - (dtype == TIDE_DTYPE_U8 || dtype == TIDE_DTYPE_BOOL ? 0 : 3);
    if (dtype == TIDE_DTYPE_BOOL)
        for (int64_t i = 0; i < n; i++) v[i] = (double)(i % 2);
    int64_t sizes[1] = {n};
    tide_tensor * t = tide_tensor_from_doubles(v, 1, sizes, dtype);
    free(v);
    return t;
}

static int same_values(tide_tensor * a, tide_tensor * b) {
    if (a->ndim != b->ndim || a->nelem != b->nelem || a->dtype_id != b->dtype_id) return 0;
    for (int32_t i = 0; i < a->ndim; i++)
        if (a->sizes[i] != b->sizes[i]) return 0;
    for (int64_t i = 0; i < a->nelem; i++) {
        double x, y;
        if (tide_tensor_get(a, i, &x) != TIDE_OK || tide_tensor_get(b, i, &y) != TIDE_OK || x != y) return 0;
    }
    return 1;
}

static void test_safetensors_round_trip(void) {
    tide_tensor_dict * d = tide_tensor_dict_new();
    tide_tensor * ts[TIDE_DTYPE_COUNT];
    for (int32_t dt = 0; dt < TIDE_DTYPE_COUNT; dt++) {
        ts[dt] = arange(6, dt);
        CHECK(tide_tensor_dict_add(d, tide_dtype_name(dt), ts[dt]) == TIDE_OK);
    }
    int64_t two_three[2] = {2, 3}, zero[2] = {0, 4};
    tide_tensor * m  = tide_tensor_view(ts[TIDE_DTYPE_F64], 2, two_three);
    tide_tensor * mt = tide_tensor_transpose(m, 0, 1);                       /* strided */
    tide_tensor * s  = tide_tensor_scalar(2.5, TIDE_DTYPE_F32);               /* 0-d */
    tide_tensor * e  = tide_tensor_zeros(2, zero, TIDE_DTYPE_I64);            /* empty */
    CHECK(tide_tensor_dict_add(d, "transposed", mt) == TIDE_OK);
    CHECK(tide_tensor_dict_add(d, "scalar", s) == TIDE_OK);
    CHECK(tide_tensor_dict_add(d, "empty", e) == TIDE_OK);
    CHECK(tide_tensor_dict_set_meta(d, "format", "pt") == TIDE_OK);
    CHECK(tide_tensor_dict_set_meta(d, "format", "tide") == TIDE_OK);   /* replaces */
    CHECK(tide_safetensors_save(in_dir("a.safetensors"), d) == TIDE_OK);

    tide_tensor_dict * r = tide_safetensors_load(in_dir("a.safetensors"));
    CHECK(r != NULL);
    if (r) {
        CHECK(tide_tensor_dict_count(r) == TIDE_DTYPE_COUNT + 3);
        for (int32_t dt = 0; dt < TIDE_DTYPE_COUNT; dt++) {
            tide_tensor * got = tide_tensor_dict_find(r, tide_dtype_name(dt));
            CHECK(got && same_values(got, ts[dt]));
        }
        tide_tensor * got = tide_tensor_dict_find(r, "transposed");
        CHECK(got && tide_tensor_is_contiguous(got) && same_values(got, mt));
        got = tide_tensor_dict_find(r, "scalar");
        CHECK(got && got->ndim == 0 && same_values(got, s));
        got = tide_tensor_dict_find(r, "empty");
        CHECK(got && got->ndim == 2 && got->sizes[1] == 4 && got->nelem == 0);
        CHECK(tide_tensor_dict_meta_count(r) == 1);
        CHECK(strcmp(tide_tensor_dict_meta_key(r, 0), "format") == 0);
        CHECK(strcmp(tide_tensor_dict_meta_value(r, 0), "tide") == 0);
        /* in data order: int64 first (the widest alignment rank), bool last */
        CHECK(strcmp(tide_tensor_dict_name(r, 0), "empty") == 0);
        CHECK(strcmp(tide_tensor_dict_name(r, tide_tensor_dict_count(r) - 1), "bool") == 0);
        CHECK(tide_tensor_dict_name(r, 99) == NULL && tide_tensor_dict_tensor(r, -1) == NULL);
    }
    tide_tensor_dict_free(r);
    tide_tensor_dict_free(NULL);

    CHECK(tide_tensor_dict_add(d, "bool", s) == TIDE_OK);   /* a name twice */
    CHECK(tide_safetensors_save(in_dir("b.safetensors"), d) == TIDE_E_VALUE);
    CHECK(strstr(tide_last_error(), "the name 'bool' appears twice") != NULL);
    tide_tensor_dict_free(d);
    for (int32_t dt = 0; dt < TIDE_DTYPE_COUNT; dt++) tide_tensor_release(ts[dt]);
    tide_tensor_release(m);
    tide_tensor_release(mt);
    tide_tensor_release(s);
    tide_tensor_release(e);
}

static void test_safetensors_corrupt(void) {
    const char * p = in_dir("bad.safetensors");
    write_file(p, "\x10\x00\x00", 3);
    CHECK(tide_safetensors_load(p) == NULL);
    CHECK(strstr(tide_last_error(), "too short for a safetensors header") != NULL);
    write_file(p, "\xff\x00\x00\x00\x00\x00\x00\x00{}", 10);
    CHECK(tide_safetensors_load(p) == NULL);
    CHECK(strstr(tide_last_error(), "header length 255 runs past the end of the file (10 bytes)") != NULL);
    write_file(p, "\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":1,}", 16);
    CHECK(tide_safetensors_load(p) == NULL);
    CHECK(strstr(tide_last_error(), "the header is not valid JSON") != NULL);
    CHECK(tide_safetensors_load(in_dir("missing.safetensors")) == NULL);
    CHECK(strstr(tide_last_error(), "load: cannot open") != NULL);
    CHECK(strstr(tide_last_error(), "No such file or directory") != NULL);
}

/* A save whose second tensor fails (a queued index_select out of range)
 * leaves the existing file as it was and no temporary file behind. */
static void test_atomic_save(void) {
    const char * p = in_dir("keep.safetensors");
    write_file(p, "old contents", 12);
    int before = files_in_dir();
    int64_t n[1] = {100000};
    tide_tensor * x   = tide_tensor_zeros(1, n, TIDE_DTYPE_F32);
    tide_tensor * idx = tide_tensor_full(1, n, 0, TIDE_DTYPE_I64);
    int64_t * iv = tide_tensor_data(idx);
    iv[n[0] - 1] = 1000000;   /* out of range: found by the kernel */
    tide_tensor * in[2] = {x, idx}, * out[1] = {NULL};
    tide_op_params prm = {.n_ints = 1, .dtype = -1};
    tide_status st = tide_op_call(tide_op_find("index_select"), in, 2, &prm, out, NULL);
    CHECK(st == TIDE_OK);   /* queued (too big to run inline): the failure comes later */
    tide_tensor_dict * d = tide_tensor_dict_new();
    tide_tensor_dict_add(d, "a_good", x);
    tide_tensor_dict_add(d, "b_bad", st == TIDE_OK ? out[0] : x);
    CHECK(tide_safetensors_save(p, d) != TIDE_OK);
    CHECK(strstr(tide_last_error(), "tensor 'b_bad'") != NULL);
    CHECK(strstr(tide_last_error(), "index_select") != NULL);
    FILE * f = fopen(p, "rb");
    char   buf[32] = {0};
    CHECK(f && fread(buf, 1, sizeof buf, f) == 12 && memcmp(buf, "old contents", 12) == 0);
    if (f) fclose(f);
    CHECK(files_in_dir() == before);
    tide_tensor_dict_free(d);
    tide_tensor_release(out[0]);
    tide_tensor_release(x);
    tide_tensor_release(idx);
    tide_sync();   /* clears the reported failure */
}

static void test_npy_idx_csv(void) {
    int64_t sizes[2] = {3, 2};
    double  v[6]     = {1, -2, 3.5, 4, 5, 6};
    tide_tensor * t  = tide_tensor_from_doubles(v, 2, sizes, TIDE_DTYPE_F64);
    CHECK(tide_npy_save(in_dir("a.npy"), t) == TIDE_OK);
    tide_tensor * r = tide_npy_load(in_dir("a.npy"));
    CHECK(r && same_values(r, t));
    tide_tensor_release(r);
    tide_tensor * h = tide_tensor_to(t, TIDE_DTYPE_BF16, t->dev, 0);
    CHECK(tide_npy_save(in_dir("h.npy"), h) == TIDE_E_DTYPE);
    tide_tensor_release(h);
    tide_tensor_release(t);

    /* IDX: int16 [2, 2], big-endian, gzip'd through zlib */
    const unsigned char idx[] = {0, 0, 0x0B, 2, 0, 0, 0, 2, 0, 0, 0, 2, 0x00, 0x01, 0xFF, 0xFE, 0x01, 0x00, 0x80, 0x00};
    gzFile gz = gzopen(in_dir("a.idx.gz"), "wb");
    CHECK(gz && gzwrite(gz, idx, sizeof idx) == (int)sizeof idx);
    gzclose(gz);
    r = tide_idx_load(in_dir("a.idx.gz"));
    double want[4] = {1, -2, 256, -32768}, got;
    CHECK(r && r->dtype_id == TIDE_DTYPE_I32 && r->ndim == 2 && r->nelem == 4);
    for (int i = 0; r && i < 4; i++) CHECK(tide_tensor_get(r, i, &got) == TIDE_OK && got == want[i]);
    tide_tensor_release(r);
    write_file(in_dir("short.idx"), idx, sizeof idx - 1);
    CHECK(tide_idx_load(in_dir("short.idx")) == NULL);
    CHECK(strstr(tide_last_error(), "truncated: the int16 data of shape [2,2] needs 8 bytes, only 7 remain") != NULL);

    const char * csv = "x;y\n1;2\n\n3;4.5\n";
    write_file(in_dir("a.csv"), csv, strlen(csv));
    tide_csv_options o = {.delimiter = ';', .header = 1, .dtype = TIDE_DTYPE_F64};
    tide_tensor_dict * d = tide_csv_load(in_dir("a.csv"), &o);
    CHECK(d && tide_tensor_dict_count(d) == 1 && tide_tensor_dict_meta_count(d) == 2);
    tide_tensor * data = tide_tensor_dict_find(d, "data");
    CHECK(data && data->sizes[0] == 2 && data->sizes[1] == 2);
    CHECK(data && tide_tensor_get(data, 3, &got) == TIDE_OK && got == 4.5);
    CHECK(d && strcmp(tide_tensor_dict_meta_value(d, 1), "y") == 0);
    tide_tensor_dict_free(d);
}

static void * save_load_worker(void * arg) {
    int id = *(int *)arg;
    char name[32];
    snprintf(name, sizeof name, "t%d.safetensors", id);
    for (int i = 0; i < 20; i++) {
        tide_tensor * t = arange(1000 + id, TIDE_DTYPE_F32);
        tide_tensor_dict * d = tide_tensor_dict_new();
        tide_tensor_dict_add(d, "w", t);
        CHECK(tide_safetensors_save(in_dir(name), d) == TIDE_OK);
        tide_tensor_dict * r = tide_safetensors_load(in_dir(name));
        CHECK(r && same_values(tide_tensor_dict_find(r, "w"), t));
        tide_tensor_dict_free(r);
        tide_tensor_dict_free(d);
        tide_tensor_release(t);
    }
    return NULL;
}

static void test_threads(void) {
    pthread_t th[2];
    int ids[2] = {0, 1};
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, save_load_worker, &ids[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/tide_test_io_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_safetensors_round_trip();
    test_safetensors_corrupt();
    test_atomic_save();
    test_npy_idx_csv();
    test_threads();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) check_failures++;
    if (check_failures) fprintf(stderr, "%d checks failed\n", check_failures);
    return check_failures != 0;
}
