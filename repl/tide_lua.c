/*
 * tide_lua.c - libtide_lua: Tide for a host that owns a LuaJIT lua_State.
 * luaopen_tide finds Tide's Lua sources next to this library (the build tree
 * it was built in, or the install prefix), adds a package searcher for them
 * and tells the bindings which libtide is loaded; tide_lua_push_tensor and
 * tide_lua_to_tensor pass tensors across without copying. The REPL and the
 * script runner are tide.c's; the tensor logic is the Lua module's.
 */
#include "tide_lua.h"

#include <dlfcn.h>
#include <lauxlib.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Set by CMake: the trees this library was built from and in, and the install
 * layout relative to the prefix. */
#ifndef TIDE_SOURCE_DIR
#error "TIDE_SOURCE_DIR must be defined"
#endif

static char           lua_path[4 * PATH_MAX + 256];
static char           library[PATH_MAX + 32];
static char           repl[2 * PATH_MAX + 256];
static tide_lua_paths paths = {lua_path, library, repl};
static pthread_once_t paths_once = PTHREAD_ONCE_INIT;

/* dirname of the file holding `addr`, resolved; "" if unknown. */
static void dir_of(const void * addr, char * out) {
    Dl_info info;
    char    real[PATH_MAX];
    out[0] = 0;
    if (!dladdr(addr, &info) || !info.dli_fname || !realpath(info.dli_fname, real)) return;
    char * slash = strrchr(real, '/');
    if (slash) *slash = 0;
    snprintf(out, PATH_MAX, "%s", real);
}

static int same_dir(const char * a, const char * b) {
    char ra[PATH_MAX], rb[PATH_MAX];
    return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

static int readable(const char * path) { return access(path, R_OK) == 0; }

static void find_paths(void) {
    char here[PATH_MAX], luadir[PATH_MAX + 64], probe[PATH_MAX + 128];
    dir_of((const void *)luaopen_tide, here);
    if (here[0] && same_dir(here, TIDE_BINARY_DIR)) {   /* the build tree: sources beside it */
        snprintf(lua_path, sizeof lua_path,
                 "%s/lua/?.lua;%s/lua/?/init.lua;%s/?.lua;%s/?/init.lua;%s/?.lua",
                 TIDE_SOURCE_DIR, TIDE_SOURCE_DIR, TIDE_SOURCE_DIR, TIDE_SOURCE_DIR, TIDE_BINARY_DIR);
        snprintf(repl, sizeof repl, "%s/repl/repl.lua", TIDE_SOURCE_DIR);
    } else {   /* installed: relative to this library, else where it was meant to go */
        char real[PATH_MAX];
        snprintf(luadir, sizeof luadir, "%s/%s/%s", here, TIDE_LIBDIR_TO_PREFIX, TIDE_LUADIR);
        snprintf(probe, sizeof probe, "%s/tide/init.lua", luadir);
        if (here[0] && readable(probe) && realpath(luadir, real)) {
            snprintf(luadir, sizeof luadir, "%s", real);
            snprintf(probe, sizeof probe, "%s/%s/%s", here, TIDE_LIBDIR_TO_PREFIX, TIDE_DATADIR);
            if (realpath(probe, real)) snprintf(repl, sizeof repl, "%s/repl.lua", real);
            else snprintf(repl, sizeof repl, "%s/repl.lua", probe);
        } else {
            snprintf(luadir, sizeof luadir, "%s/%s", TIDE_INSTALL_PREFIX, TIDE_LUADIR);
            snprintf(repl, sizeof repl, "%s/%s/repl.lua", TIDE_INSTALL_PREFIX, TIDE_DATADIR);
        }
        snprintf(lua_path, sizeof lua_path, "%s/?.lua;%s/?/init.lua", luadir, luadir);
    }
    /* the libtide this process loaded: a shared library, or the program itself */
    Dl_info info;
    char    exe[PATH_MAX], real[PATH_MAX];
    library[0] = 0;
    if (dladdr((const void *)tide_version, &info) && info.dli_fname && realpath(info.dli_fname, real)) {
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = 0;
        if (strcmp(real, exe) != 0) snprintf(library, sizeof library, "%s", real);
        /* named as a linker would: libtide.so beside it, when that is the same file */
        char * slash = strrchr(library, '/');
        char   dev[PATH_MAX + 16], dev_real[PATH_MAX];
        if (library[0] && slash) {
            snprintf(dev, sizeof dev, "%.*s/libtide.so", (int)(slash - library), library);
            if (realpath(dev, dev_real) && strcmp(dev_real, real) == 0) snprintf(library, sizeof library, "%s", dev);
        }
    }
}

const tide_lua_paths * tide_lua_get_paths(void) {
    pthread_once(&paths_once, find_paths);
    return &paths;
}

/* package.loaders entry: "tide", "tide.*" and "bindings.*" from Tide's own
 * directories, before package.path, so the library and its sources match. */
static int searcher(lua_State * L) {
    const char * name = luaL_checkstring(L, 1);
    if (strcmp(name, "tide") != 0 && strncmp(name, "tide.", 5) != 0 && strncmp(name, "bindings.", 9) != 0) {
        lua_pushfstring(L, "\n\tnot one of Tide's modules: %s", name);
        return 1;
    }
    char file[sizeof lua_path + 256], rel[256];
    snprintf(rel, sizeof rel, "%s", name);
    for (char * c = rel; *c; c++)
        if (*c == '.') *c = '/';
    luaL_Buffer tried;
    luaL_buffinit(L, &tried);
    for (const char * t = lua_path; *t;) {   /* each template, '?' replaced */
        const char * end = strchr(t, ';');
        size_t       len = end ? (size_t)(end - t) : strlen(t);
        size_t       o = 0;
        for (size_t i = 0; i < len && o + sizeof rel < sizeof file; i++) {
            if (t[i] == '?') o += (size_t)snprintf(file + o, sizeof file - o, "%s", rel);
            else file[o++] = t[i];
        }
        file[o] = 0;
        if (readable(file)) {
            if (luaL_loadfile(L, file) != 0) return lua_error(L);
            return 1;
        }
        luaL_addstring(&tried, "\n\tno file '");
        luaL_addstring(&tried, file);
        luaL_addstring(&tried, "'");
        t += len + (end ? 1 : 0);
    }
    luaL_pushresult(&tried);
    return 1;
}

/* Runs once per state: the searcher, the library's path for bindings/ffi.lua,
 * and the embed helpers in the registry. */
static const char * setup =
    "local searcher, library = ...\n"
    "local reg = debug.getregistry()\n"
    "if not reg['tide.searcher'] then\n"
    "  table.insert(package.loaders, 2, searcher)\n"
    "  reg['tide.searcher'] = searcher\n"
    "end\n"
    "if reg['tide.library'] == nil then reg['tide.library'] = library end\n"
    "local tide = require 'tide'\n"
    "local embed = require 'tide.embed'\n"
    "reg['tide.embed.adopt'], reg['tide.embed.export'] = embed.adopt, embed.export\n"
    "return tide\n";

int luaopen_tide(lua_State * L) {
    const tide_lua_paths * p = tide_lua_get_paths();
    if (luaL_loadbuffer(L, setup, strlen(setup), "=luaopen_tide") != 0) return lua_error(L);
    lua_pushcfunction(L, searcher);
    lua_pushstring(L, p->library);
    lua_call(L, 2, 1);
    return 1;
}

void tide_lua_push_tensor(lua_State * L, tide_tensor * t) {
    lua_getfield(L, LUA_REGISTRYINDEX, "tide.embed.adopt");
    if (!lua_isfunction(L, -1)) luaL_error(L, "tide_lua_push_tensor: call luaopen_tide in this lua_State first");
    lua_pushlightuserdata(L, t);
    lua_call(L, 1, 1);
}

tide_tensor * tide_lua_to_tensor(lua_State * L, int idx) {
    int top = lua_gettop(L);
    if (idx < 0 && idx > LUA_REGISTRYINDEX) idx = top + idx + 1;
    tide_tensor * out = NULL;
    lua_getfield(L, LUA_REGISTRYINDEX, "tide.embed.export");
    if (!lua_isfunction(L, -1)) {
        lua_settop(L, top);
        tide_error_set(TIDE_E_VALUE, "tide_lua_to_tensor: call luaopen_tide in this lua_State first");
        return NULL;
    }
    lua_pushvalue(L, idx);
    lua_pushlightuserdata(L, &out);
    if (lua_pcall(L, 2, 0, 0) != 0) {
        tide_error_set(TIDE_E_VALUE, "tide_lua_to_tensor: %s", lua_tostring(L, -1));
        lua_settop(L, top);
        return NULL;
    }
    lua_settop(L, top);
    if (!out)
        tide_error_set(TIDE_E_VALUE, "tide_lua_to_tensor: the value at index %d is a %s, not a tensor", idx,
                       luaL_typename(L, idx));
    return out;
}
