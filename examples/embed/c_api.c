/*
 * c_api.c - Tide from C alone, no Lua: a host wraps its own buffers as tensors
 * (tide_tensor_from_blob, no copy), runs a small dense layer with tide_op_call,
 * has the result written straight into another of its buffers, and reads it.
 * Build:  cc c_api.c $(pkg-config --cflags --libs tide) -o c_api
 */
#include <tide.h>

#include <math.h>
#include <stdio.h>

/* Runs op on inputs; the result goes into `out` when given. Returns a new
 * tensor (+1) or NULL after printing the runtime's message. */
static tide_tensor * run(const char * op, tide_tensor * a, tide_tensor * b, tide_tensor * out) {
    tide_tensor * in[2] = {a, b}, * res[1] = {NULL};
    if (tide_op_call(tide_op_find(op), in, b ? 2 : 1, NULL, res, out) != TIDE_OK) {
        fprintf(stderr, "c_api: %s failed: %s\n", op, tide_last_error());
        return NULL;
    }
    return res[0];
}

int main(void) {
    /* the host's memory: a batch of 2 inputs of 3 features, a 3x4 layer */
    float x[2][3] = {{1, 2, 3}, {-1, 0.5f, 2}};
    float w[3][4] = {{0.1f, -0.2f, 0.3f, 0}, {0.5f, 0.1f, -0.4f, 1}, {-0.3f, 0.2f, 0.1f, -1}};
    float b[4]     = {0.05f, -0.1f, 0, 0.2f};
    float y[2][4]  = {{0}};   /* Tide writes the result here */

    tide_tensor * tx = tide_tensor_from_blob(x, 2, (int64_t[]){2, 3}, NULL, TIDE_DTYPE_F32, NULL, NULL);
    tide_tensor * tw = tide_tensor_from_blob(w, 2, (int64_t[]){3, 4}, NULL, TIDE_DTYPE_F32, NULL, NULL);
    tide_tensor * tb = tide_tensor_from_blob(b, 1, (int64_t[]){4}, NULL, TIDE_DTYPE_F32, NULL, NULL);
    tide_tensor * ty = tide_tensor_from_blob(y, 2, (int64_t[]){2, 4}, NULL, TIDE_DTYPE_F32, NULL, NULL);
    if (!tx || !tw || !tb || !ty) {
        fprintf(stderr, "c_api: %s\n", tide_last_error());
        return 1;
    }

    /* y = relu(x @ w + b): ops are queued; the last one writes into y's buffer */
    tide_tensor * xw  = run("matmul", tx, tw, NULL);
    tide_tensor * z   = xw ? run("add", xw, tb, NULL) : NULL;
    tide_tensor * out = z ? run("relu", z, NULL, ty) : NULL;
    if (!out || tide_tensor_wait(ty) != TIDE_OK) return 1;   /* wait before reading y */

    /* errors are status codes with a message, never an abort */
    tide_tensor * bad_in[2] = {tx, tx}, * bad_out[1];
    if (tide_op_call(tide_op_find("matmul"), bad_in, 2, NULL, bad_out, NULL) != TIDE_OK)
        printf("c_api: expected error: %s\n", tide_last_error());

    /* check against plain C, and show that the result is in the host's buffer */
    int bad = 0;
    for (int i = 0; i < 2; i++) {
        printf("c_api: y[%d] =", i);
        for (int j = 0; j < 4; j++) {
            float ref = b[j];
            for (int k = 0; k < 3; k++) ref += x[i][k] * w[k][j];
            ref = ref > 0 ? ref : 0;
            bad += fabsf(y[i][j] - ref) > 1e-5f;
            printf(" %.4f", y[i][j]);
        }
        printf("\n");
    }
    printf("c_api: result written into the host buffer: %s\n", tide_tensor_data(ty) == (void *)y ? "yes" : "no");
    bad += tide_tensor_data(ty) != (void *)y;

    tide_tensor * all[7] = {tx, tw, tb, ty, xw, z, out};
    tide_tensor_release_many(all, 7);
    if (tide_sync() != TIDE_OK) return 1;
    printf(bad ? "c_api: MISMATCH\n" : "c_api: ok\n");
    return bad != 0;
}
