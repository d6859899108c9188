-- embed_spec: Tide as a host program gets it. `cmake --install` into a fresh
-- prefix; the two examples of examples/embed/ built there as a user would, with
-- one pkg-config flag (the C API alone, and a host owning its lua_State), and
-- run; the installed `tide` finds its module and library with nothing set; and
-- libtide.a links without --whole-archive. (ctest also builds and runs both
-- examples against the build tree, under the sanitizers too.)
local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1; echo \"rc=$?\""))
  local out = p:read("*a")
  p:close()
  local body, rc = out:match("^(.-)rc=(%d+)\n$")
  return body, tonumber(rc)
end

local ROOT = sh("cd " .. debug.getinfo(1, "S").source:sub(2):gsub("[^/]*$", "") .. ".. && pwd"):gsub("\n$", "") .. "/"
local BUILD = (os.getenv("TIDE_LIBRARY") or ""):match("^(.*)/[^/]*$")
local SANITIZED = (os.getenv("LD_PRELOAD") or ""):find("san") ~= nil

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

describe("embedding", function()
  if not BUILD then
    it("needs TIDE_LIBRARY", function() error("TIDE_LIBRARY is not set: run the specs through build/tide") end)
    return
  end
  local prefix = os.tmpname()
  os.remove(prefix)
  -- the prefix first, the caller's path after it (where LuaJIT's own .pc may be: tools/gpu-carry)
  local pc = "PKG_CONFIG_PATH=" .. prefix .. "/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH} pkg-config"
  teardown(function() os.execute("rm -rf " .. prefix) end)

  local C_API_OUT = table.concat({
    "c_api: expected error: matmul: shapes [2,3] and [2,3] cannot be multiplied: 3 ~= 2",
    "c_api: y[0] = 0.2500 0.5000 0.0000 0.0000",
    "c_api: y[1] = 0.0000 0.5500 0.0000 0.0000",
    "c_api: result written into the host buffer: yes",
    "c_api: ok",
  }, "\n") .. "\n"

  it("installs libraries, headers, pkg-config files, the Lua module and tide", function()
    local out, rc = sh("cmake --install " .. BUILD .. " --prefix " .. prefix)
    assert.are.equal(0, rc, out)
    for _, f in ipairs { "bin/tide", "include/tide.h", "include/tide_lua.h", "lib/libtide.so", "lib/libtide.a",
                         "lib/libtide_lua.so", "lib/pkgconfig/tide.pc", "lib/pkgconfig/tide-lua.pc",
                         "share/lua/5.1/tide/init.lua", "share/lua/5.1/tide/plot.lua",
                         "share/lua/5.1/bindings/ffi.lua", "share/lua/5.1/bindings/cdef.lua",
                         "share/tide/repl.lua" } do
      assert.is_true(exists(prefix .. "/" .. f), f)
    end
  end)

  it("runs the installed tide with nothing in the environment", function()
    local out, rc = sh("cd / && env -u TIDE_LIBRARY -u LUA_PATH " .. prefix .. "/bin/tide -e "
      .. "'print(tide.ones(3):sum():item(), debug.getinfo(tide.zeros, \"S\").source, os.getenv(\"TIDE_LIBRARY\"))'")
    assert.are.equal(0, rc, out)
    local n, src, lib = out:match("^(%S+)\t(%S+)\t(%S+)\n$")
    assert.are.equal("3", n)
    assert.truthy(src:find(prefix .. "/share/lua/5.1/tide/init.lua", 1, true), src)
    assert.truthy(lib:find(prefix .. "/lib/libtide.so", 1, true), lib)
    -- the installed REPL too, on piped input
    out, rc = sh("printf '1 + 1\\n' | env -u TIDE_LIBRARY -u LUA_PATH " .. prefix .. "/bin/tide -i")
    assert.are.equal(0, rc, out)
    assert.are.equal("2\n", out)
  end)

  it("builds and runs the C API example with `pkg-config --libs tide`", function()
    local exe = prefix .. "/c_api"
    local out, rc = sh("cc " .. ROOT .. "examples/embed/c_api.c $(" .. pc .. " --cflags --libs tide) -o " .. exe)
    assert.are.equal(0, rc, out)
    out, rc = sh(exe)
    assert.are.equal(0, rc, out)
    assert.are.equal(C_API_OUT, out)
  end)

  it("builds and runs a host that owns its lua_State with `pkg-config --libs tide-lua`", function()
    local exe = prefix .. "/lua_host"
    local out, rc = sh("cc " .. ROOT .. "examples/embed/lua_host.c $(" .. pc .. " --cflags --libs tide-lua) -o " .. exe)
    assert.are.equal(0, rc, out)
    out, rc = sh("cd / && env -u TIDE_LIBRARY -u LUA_PATH " .. exe .. " " .. ROOT .. "examples/embed/model.lua")
    assert.are.equal(0, rc, out)
    assert.are.equal(table.concat({
      "lua_host: y[0] = 0.2500 0.5000",
      "lua_host: y[1] = 0.0000 0.5500",
      "lua_host: x[1][2] after scale_ in Lua: 4.0",
      "lua_host: expected error: tide_lua_to_tensor: the value at index 2 is a string, not a tensor",
      "lua_host: ok",
    }, "\n") .. "\n", out)
  end)

  it("links libtide.a statically without --whole-archive", function()
    if SANITIZED then
      print("skipped: libtide.a of a sanitizer build needs the sanitizer's link flags")
      return
    end
    local exe = prefix .. "/c_api_static"
    local out, rc = sh("cc " .. ROOT .. "examples/embed/c_api.c $(" .. pc .. " --cflags tide) " .. prefix
      .. "/lib/libtide.a $(" .. pc .. " --static --libs-only-other --libs-only-l tide | sed 's/-ltide//') -o " .. exe)
    assert.are.equal(0, rc, out)
    assert.falsy(sh("ldd " .. exe):find("libtide", 1, true))
    out, rc = sh(exe)
    assert.are.equal(0, rc, out)
    assert.are.equal(C_API_OUT, out)
  end)
end)
