/*
 * lua_host.c - a host that owns its LuaJIT lua_State: it opens Tide with
 * luaopen_tide, loads a model script, calls its forward() on tensors wrapped
 * around the host's own buffers and reads the result, with no copy either way.
 * Build:  cc lua_host.c $(pkg-config --cflags --libs tide-lua) -o lua_host
 * Run:    ./lua_host model.lua
 */
#include <tide_lua.h>

#include <lauxlib.h>
#include <lualib.h>
#include <math.h>
#include <stdio.h>

static int fail(lua_State * L, const char * what) {
    fprintf(stderr, "lua_host: %s: %s\n", what, lua_tostring(L, -1));
    lua_close(L);
    return 1;
}

static tide_tensor * wrap(float * data, int32_t ndim, const int64_t * sizes) {
    return tide_tensor_from_blob(data, ndim, sizes, NULL, TIDE_DTYPE_F32, NULL, NULL);
}

int main(int argc, char ** argv) {
    const char * model = argc > 1 ? argv[1] : "model.lua";
    float x[2][3]  = {{1, 2, 3}, {-1, 0.5f, 2}};
    float w1[3][4] = {{0.1f, -0.2f, 0.3f, 0}, {0.5f, 0.1f, -0.4f, 1}, {-0.3f, 0.2f, 0.1f, -1}};
    float b1[4]    = {0.05f, -0.1f, 0, 0.2f};
    float w2[4][2] = {{1, 0}, {0, 1}, {0.5f, 0.5f}, {-1, 2}};

    lua_State * L = luaL_newstate();
    luaL_openlibs(L);
    lua_pushcfunction(L, luaopen_tide);          /* require "tide" works from here on */
    if (lua_pcall(L, 0, 1, 0) != 0) return fail(L, "luaopen_tide");
    lua_pop(L, 1);
    if (luaL_dofile(L, model) != 0) return fail(L, model);   /* leaves the model's table */
    int mod = lua_gettop(L);

    tide_tensor * tx = wrap(&x[0][0], 2, (int64_t[]){2, 3});
    tide_tensor * t1 = wrap(&w1[0][0], 2, (int64_t[]){3, 4});
    tide_tensor * tb = wrap(b1, 1, (int64_t[]){4});
    tide_tensor * t2 = wrap(&w2[0][0], 2, (int64_t[]){4, 2});

    /* y = model.forward(x, w1, b1, w2) */
    lua_getfield(L, mod, "forward");
    tide_lua_push_tensor(L, tx);
    tide_lua_push_tensor(L, t1);
    tide_lua_push_tensor(L, tb);
    tide_lua_push_tensor(L, t2);
    if (lua_pcall(L, 4, 1, 0) != 0) return fail(L, "forward");
    tide_tensor * y = tide_lua_to_tensor(L, -1);   /* +1: ours until we release it */
    lua_pop(L, 1);
    const float * out = y ? tide_tensor_data(y) : NULL;   /* waits; no copy */
    if (!out) {
        fprintf(stderr, "lua_host: %s\n", tide_last_error());
        return 1;
    }

    int bad = 0;
    for (int i = 0; i < 2; i++) {
        printf("lua_host: y[%d] =", i);
        for (int j = 0; j < 2; j++) {
            float ref = 0;
            for (int k = 0; k < 4; k++) {
                float h = b1[k];
                for (int m = 0; m < 3; m++) h += x[i][m] * w1[m][k];
                ref += (h > 0 ? h : 0) * w2[k][j];
            }
            bad += fabsf(out[i * 2 + j] - ref) > 1e-5f;
            printf(" %.4f", out[i * 2 + j]);
        }
        printf("\n");
    }

    /* Lua writes into the host's buffer: model.scale_(x, 2) doubles x[][] here */
    lua_getfield(L, mod, "scale_");
    tide_lua_push_tensor(L, tx);
    lua_pushnumber(L, 2);
    if (lua_pcall(L, 2, 0, 0) != 0) return fail(L, "scale_");
    printf("lua_host: x[1][2] after scale_ in Lua: %.1f\n", x[1][2]);
    bad += x[1][2] != 4.0f;

    /* a value that is not a tensor is refused with a message */
    lua_pushstring(L, "not a tensor");
    if (tide_lua_to_tensor(L, -1) == NULL) printf("lua_host: expected error: %s\n", tide_last_error());
    lua_pop(L, 1);

    tide_tensor * mine[5] = {tx, t1, tb, t2, y};
    tide_tensor_release_many(mine, 5);
    lua_close(L);   /* Lua's references go with the state */
    printf(bad ? "lua_host: MISMATCH\n" : "lua_host: ok\n");
    return bad != 0;
}
