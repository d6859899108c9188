/* test_devalloc.c - the caching device allocator (engine/devalloc.c), driven by
 * a fake device over host memory: blocks are reused per stream, cut from shared
 * segments and merged back, held back from reuse until the other streams that
 * used them are done, and a full device frees the cache and retries once
 * before failing with a message that names the request and what is held. */
#include "tide.h"
#include "check.h"
#include "engine/cuda_loader.h"
#include "fake_device.h"

#define MiB ((size_t)1 << 20)

static void * new_stream(void) {
    void * s;
    fake_stream_create(0, &s);
    return s;
}

static tide_devmem_stats stats(tide_devalloc * a) {
    tide_devmem_stats st;
    tide_devalloc_stats(a, &st);
    return st;
}

static void test_reuse_on_one_stream(void) {
    tide_devalloc * a  = tide_devalloc_new(&fake_api, 0, "cuda:0");
    void *          s1 = new_stream();
    tide_devblock * b  = tide_devalloc_alloc(a, 1000, s1);
    CHECK(b != NULL);
    void * p = tide_devblock_ptr(b);
    tide_devmem_stats st = stats(a);
    CHECK(st.bytes_in_use == 1024 && st.bytes_reserved == (int64_t)(2 * MiB) && st.n_segments == 1);
    CHECK(st.bytes_cached == (int64_t)(2 * MiB) - 1024);
    tide_devalloc_free(a, b);
    b = tide_devalloc_alloc(a, 900, s1);   /* the same class: the same block, no new segment */
    CHECK(tide_devblock_ptr(b) == p);
    st = stats(a);
    CHECK(st.n_allocs == 2 && st.n_reused == 1 && st.n_segments == 1 && fake.n_mallocs == 1);
    CHECK(st.peak_in_use == 1024);
    tide_devalloc_free(a, b);
    CHECK(stats(a).bytes_in_use == 0 && stats(a).peak_in_use == 1024);
    tide_devalloc_reset_peak(a);
    CHECK(stats(a).peak_in_use == 0);
    tide_devalloc_free_all(a);
    CHECK(fake.used == 0);
    fake_stream_destroy(0, s1);
}

static void test_small_blocks_share_a_segment(void) {
    tide_devalloc * a  = tide_devalloc_new(&fake_api, 0, "cuda:0");
    void *          s1 = new_stream();
    tide_devblock * b[4];
    for (int i = 0; i < 4; i++) b[i] = tide_devalloc_alloc(a, 100 << 10, s1);
    for (int i = 1; i < 4; i++) CHECK((char *)tide_devblock_ptr(b[i]) == (char *)tide_devblock_ptr(b[0]) + i * (100 << 10));
    CHECK(stats(a).n_segments == 1 && stats(a).bytes_in_use == 400 << 10);
    /* freed out of order, they merge back into one block of the whole segment */
    tide_devalloc_free(a, b[1]);
    tide_devalloc_free(a, b[3]);
    tide_devalloc_free(a, b[0]);
    tide_devalloc_empty_cache(a);   /* b[2] still holds the segment */
    CHECK(stats(a).n_segments == 1);
    tide_devalloc_free(a, b[2]);
    tide_devblock * big = tide_devalloc_alloc(a, MiB, s1);
    CHECK(tide_devblock_ptr(big) == tide_devblock_ptr(b[0]) && stats(a).n_segments == 1);
    tide_devalloc_free(a, big);
    tide_devalloc_empty_cache(a);
    CHECK(stats(a).n_segments == 0 && stats(a).bytes_reserved == 0 && fake.used == 0);
    tide_devalloc_free_all(a);
    fake_stream_destroy(0, s1);
}

static void test_large_blocks_split(void) {
    tide_devalloc * a  = tide_devalloc_new(&fake_api, 0, "cuda:0");
    void *          s1 = new_stream();
    tide_devblock * x  = tide_devalloc_alloc(a, 3 * MiB, s1);   /* a 20 MiB segment */
    tide_devblock * y  = tide_devalloc_alloc(a, 12 * MiB, s1);  /* cut from its rest */
    CHECK(x && y && stats(a).n_segments == 1 && stats(a).bytes_reserved == (int64_t)(20 * MiB));
    CHECK((char *)tide_devblock_ptr(y) == (char *)tide_devblock_ptr(x) + 3 * MiB);
    tide_devblock * z = tide_devalloc_alloc(a, 16 * MiB, s1);   /* too large for the 5 MiB left */
    CHECK(stats(a).n_segments == 2 && stats(a).bytes_reserved == (int64_t)(36 * MiB));
    /* small requests never come from the large pool */
    tide_devblock * s = tide_devalloc_alloc(a, 4096, s1);
    CHECK(stats(a).n_segments == 3);
    tide_devalloc_free(a, x);
    tide_devalloc_free(a, y);
    tide_devalloc_free(a, z);
    tide_devalloc_free(a, s);
    CHECK(stats(a).bytes_in_use == 0);
    tide_devalloc_empty_cache(a);
    CHECK(stats(a).n_segments == 0 && fake.used == 0);
    tide_devalloc_free_all(a);
    fake_stream_destroy(0, s1);
}

static void test_streams_keep_their_blocks(void) {
    tide_devalloc * a  = tide_devalloc_new(&fake_api, 0, "cuda:0");
    void *          s1 = new_stream(), * s2 = new_stream();
    tide_devblock * b  = tide_devalloc_alloc(a, 4096, s1);
    void *          p  = tide_devblock_ptr(b);
    tide_devalloc_free(a, b);
    tide_devblock * c = tide_devalloc_alloc(a, 4096, s2);   /* s1's cache is not s2's */
    CHECK(tide_devblock_ptr(c) != p && stats(a).n_segments == 2);
    tide_devalloc_free(a, c);
    tide_devalloc_free_all(a);
    CHECK(fake.used == 0);
    fake_stream_destroy(0, s1);
    fake_stream_destroy(0, s2);
}

static void test_record_stream_holds_a_block_back(void) {
    tide_devalloc * a  = tide_devalloc_new(&fake_api, 0, "cuda:0");
    void *          s1 = new_stream(), * s2 = new_stream();
    tide_devblock * b  = tide_devalloc_alloc(a, 4096, s1);
    void *          p  = tide_devblock_ptr(b);
    CHECK(tide_devalloc_record_stream(a, b, s2) == TIDE_OK);
    CHECK(tide_devalloc_record_stream(a, b, s2) == TIDE_OK);   /* once is enough */
    CHECK(tide_devalloc_record_stream(a, b, s1) == TIDE_OK);   /* its own stream: nothing to do */
    fake_launch(s2);                                          /* s2 reads b: not done yet */
    tide_devalloc_free(a, b);
    CHECK(stats(a).bytes_in_use == 0);
    tide_devblock * c = tide_devalloc_alloc(a, 4096, s1);
    CHECK(tide_devblock_ptr(c) != p);                          /* b waits for s2 */
    fake_stream_finish(s2);
    tide_devalloc_free(a, c);
    tide_devblock * d = tide_devalloc_alloc(a, 4096, s1);
    CHECK(tide_devblock_ptr(d) == p);                          /* s2 is done: b is back, merged */
    tide_devalloc_free(a, d);
    /* freed with the other stream still busy, then emptied: the cache waits for it */
    b = tide_devalloc_alloc(a, 4096, s1);
    tide_devalloc_record_stream(a, b, s2);
    fake_launch(s2);
    tide_devalloc_free(a, b);
    int64_t syncs = fake.n_syncs;
    tide_devalloc_empty_cache(a);
    CHECK(fake.n_syncs == syncs + 1 && stats(a).n_segments == 0 && fake.used == 0);
    tide_devalloc_free_all(a);
    fake_stream_destroy(0, s1);
    fake_stream_destroy(0, s2);
}

static void test_full_device_frees_the_cache_and_retries(void) {
    fake.capacity      = 40 * MiB;
    tide_devalloc * a  = tide_devalloc_new(&fake_api, 0, "cuda:0");
    void *          s1 = new_stream(), * s2 = new_stream();
    tide_devblock * x  = tide_devalloc_alloc(a, 30 * MiB, s1);
    tide_devalloc_free(a, x);                                  /* cached for s1 */
    tide_devblock * y = tide_devalloc_alloc(a, 30 * MiB, s2);  /* full: s1's cache goes, then it fits */
    CHECK(y != NULL && stats(a).n_cache_flushes == 1 && stats(a).n_ooms == 0 && stats(a).n_segments == 1);
    tide_devblock * z = tide_devalloc_alloc(a, 30 * MiB, s2);
    CHECK(z == NULL && stats(a).n_ooms == 1 && stats(a).n_cache_flushes == 2);
    CHECK_MSG("out of memory: could not allocate 30.0 MiB (31457280 bytes) on cuda:0, which has 10.0 MiB free of "
              "40.0 MiB; Tide holds 30.0 MiB there in tensors, and freed its cache of 0 B before trying again");
    tide_devalloc_free(a, y);
    tide_devalloc_free_all(a);
    CHECK(fake.used == 0);
    fake.capacity = 64 * MiB;
    fake_stream_destroy(0, s1);
    fake_stream_destroy(0, s2);
}

/* Two threads allocate and free on their own streams at once: no block is
 * given to both (each fills its blocks and checks them before the free). */
typedef struct { tide_devalloc * a; void * stream; int id; int bad; } worker_arg;

static void * churn(void * p) {
    worker_arg *    w = p;
    tide_devblock * held[8] = {0};
    size_t          sizes[8] = {0};
    uint32_t        r = 12345u + (uint32_t)w->id;
    for (int i = 0; i < 4000; i++) {
        r = r * 1664525u + 1013904223u;
        int k = (int)(r >> 28) & 7;
        if (held[k]) {
            unsigned char * q = tide_devblock_ptr(held[k]);
            for (size_t j = 0; j < sizes[k]; j += 97) w->bad += q[j] != (unsigned char)(w->id * 8 + k);
            tide_devalloc_free(w->a, held[k]);
            held[k] = NULL;
        } else {
            sizes[k] = 1 + (r >> 8) % (3 * MiB);
            held[k]  = tide_devalloc_alloc(w->a, sizes[k], w->stream);
            if (!held[k]) { w->bad++; continue; }
            memset(tide_devblock_ptr(held[k]), w->id * 8 + k, sizes[k]);
        }
    }
    for (int k = 0; k < 8; k++) tide_devalloc_free(w->a, held[k]);
    return NULL;
}

static void test_threads(void) {
    tide_devalloc * a = tide_devalloc_new(&fake_api, 0, "cuda:0");
    worker_arg      w[2] = {{a, new_stream(), 1, 0}, {a, new_stream(), 2, 0}};
    pthread_t       t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, churn, &w[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    CHECK(w[0].bad == 0 && w[1].bad == 0);
    CHECK(stats(a).bytes_in_use == 0 && stats(a).n_allocs > 2000 && stats(a).n_reused > 0);
    tide_devalloc_free_all(a);
    CHECK(fake.used == 0);
    fake_stream_destroy(0, w[0].stream);
    fake_stream_destroy(0, w[1].stream);
}

/* The public functions, with the fake as the process's CUDA backend. */
static void test_public_stats(void) {
    tide_cuda_use_backend(&fake_api);
    CHECK(tide_cuda_device_count() == 1);
    CHECK(strcmp(tide_cuda_status(), "1 device: cuda:0 fake (host memory)") == 0);
    void *          s = new_stream();
    tide_devblock * b = tide_devalloc_alloc(tide_cuda_allocator(0), 5000, s);
    tide_devmem_stats st;
    CHECK(tide_cuda_memory_stats(0, &st) == TIDE_OK && st.bytes_in_use == 5120 && st.n_allocs == 1);
    CHECK(tide_cuda_memory_stats(3, &st) == TIDE_E_DEVICE);
    CHECK_MSG("cuda.memory_stats: there is no device cuda:3 (the CUDA devices are cuda:0 to cuda:0)");
    tide_devalloc_free(tide_cuda_allocator(0), b);
    CHECK(tide_cuda_empty_cache(0) == TIDE_OK && tide_cuda_memory_stats(0, &st) == TIDE_OK && st.n_segments == 0);
    CHECK(tide_cuda_reset_peak(0) == TIDE_OK && tide_cuda_memory_stats(0, &st) == TIDE_OK && st.peak_in_use == 0);
    tide_cuda_use_backend(NULL);
    CHECK(tide_cuda_device_count() == 0);
    CHECK(tide_cuda_memory_stats(0, &st) == TIDE_E_DEVICE);
    CHECK_MSG("cuda.memory_stats: CUDA is not available: the backend was taken out");
    CHECK(fake.used == 0);
    fake_stream_destroy(0, s);
}

int main(void) {
    test_reuse_on_one_stream();
    test_small_blocks_share_a_segment();
    test_large_blocks_split();
    test_streams_keep_their_blocks();
    test_record_stream_holds_a_block_back();
    test_full_device_frees_the_cache_and_retries();
    test_threads();
    test_public_stats();
    if (check_failures == 0) printf("test_devalloc: ok\n");
    return check_failures;
}
