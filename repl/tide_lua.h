/*
 * tide_lua.h - Tide for a host program that owns a LuaJIT lua_State
 * (libtide_lua; link with `pkg-config --cflags --libs tide-lua`).
 *
 *     lua_State * L = luaL_newstate();
 *     luaL_openlibs(L);
 *     lua_pushcfunction(L, luaopen_tide);          // or: require "tide" after
 *     lua_call(L, 0, 1);                           //     luaopen_tide once
 *     tide_tensor * x = tide_tensor_from_blob(buf, 2, sizes, NULL, TIDE_DTYPE_F32, NULL, NULL);
 *     lua_getglobal(L, "forward");
 *     tide_lua_push_tensor(L, x);                  // no copy: Lua sees buf
 *     lua_call(L, 1, 1);
 *     tide_tensor * y = tide_lua_to_tensor(L, -1); // +1, no copy
 *     const float * out = tide_tensor_data(y);     // waits for the result
 *
 * Everything else (tensors, ops, errors, threads) is tide.h. A lua_State is
 * used by one thread at a time, as LuaJIT requires; separate states in
 * separate threads may each open Tide.
 */
#ifndef TIDE_LUA_H
#define TIDE_LUA_H

#include "tide.h"

#include <lua.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* A lua_CFunction: makes `require "tide"` work in L without any LUA_PATH (it
 * finds Tide's Lua sources in the build tree it was built in, or under the
 * install prefix, relative to libtide_lua itself), points the bindings at the
 * libtide already loaded in the process, then requires "tide" and returns the
 * module (1 result). Calling it again returns the same module. Raises a Lua
 * error (use lua_pcall) if the sources or the library cannot be found. */
int luaopen_tide(lua_State * L);

/* Pushes t onto L's stack as a Tide tensor. t is borrowed: Lua takes its own
 * reference, released by Lua's collector, so the data (a host buffer made with
 * tide_tensor_from_blob, say) is shared, not copied. Raises a Lua error if
 * luaopen_tide was not called in L. */
void tide_lua_push_tensor(lua_State * L, tide_tensor * t);

/* The tensor at stack index idx, retained (+1: the caller releases it), sharing
 * the data Lua's tensor views. NULL if the value there is not a tensor, with
 * TIDE_E_VALUE and a message naming what was found in tide_last_error().
 * Leaves the stack as it was; raises no Lua error. */
tide_tensor * tide_lua_to_tensor(lua_State * L, int idx);

/* Where this libtide_lua finds Tide: `lua_path`, package.path templates of its
 * Lua sources ("dir/?.lua;dir/?/init.lua..."); `library`, the path of the
 * libtide in this process ("" when linked into the program itself); `repl`,
 * the REPL's Lua file. Static strings; the tide executable exports the first
 * two as LUA_PATH and TIDE_LIBRARY for the luajit processes it starts. */
typedef struct tide_lua_paths {
    const char * lua_path;
    const char * library;
    const char * repl;
} tide_lua_paths;

const tide_lua_paths * tide_lua_get_paths(void);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* TIDE_LUA_H */
