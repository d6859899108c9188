-- bindings_spec: the FFI declarations generated from tide.h match the C
-- compiler's layout of every public struct (checked against tools/abi_probe.c),
-- and the op registry seen from Lua has a kernel for every op.
local ffi = require "ffi"
local tide = require "tide"
local B = require "bindings.ffi"

local function probe_path()
  local lib = os.getenv("TIDE_LIBRARY")
  return lib and lib:gsub("libtide%.so$", "tide_abi_probe")
end

describe("bindings", function()
  it("run on a LuaJIT that compiles pairs() loops correctly", function()
    -- Debian's luajit 2.1.0~beta3+git20220320 swaps the pointer lj_vm_next returns
    -- through 32-bit registers in some compiled pairs() loops (LuaJIT issue #829):
    -- an optimizer's step crashed one run in twenty. Its version string is that of
    -- the 2017 release; OpenResty's branch (Debian's luajit2) has table.isempty,
    -- and upstream's later releases another version.
    local fixed = jit.version ~= "LuaJIT 2.1.0-beta3" or pcall(require, "table.isempty")
    assert.is_true(fixed, jit.version .. " without table.isempty: the 2022 snapshot that miscompiles pairs() "
      .. "(LuaJIT issue #829)? install Debian's luajit2 and libluajit2-5.1-dev (tools/setup-deps does)")
  end)

  it("lay out the public structs as the C compiler does", function()
    local path = probe_path()
    assert.truthy(path, "TIDE_LIBRARY is not set: run the specs through build/tide")
    local p = assert(io.popen(path))
    local n = 0
    for line in p:lines() do
      local kind, a, b, c = line:match("^(%S+) (%S+) (%S+) ?(%S*)")
      if kind == "sizeof" then
        assert.are.equal(tonumber(b), ffi.sizeof(a), "sizeof " .. a)
      else
        assert.are.equal(tonumber(c), ffi.offsetof(a, b), "offsetof " .. a .. "." .. b)
      end
      n = n + 1
    end
    p:close()
    assert.is_true(n > 20)
  end)

  it("pays the collector for fresh device tensors apart: a full collection every 256 MiB, no steps", function()
    local counts, MiB = B.gc_counts, 2 ^ 20
    B.collect()
    local c0, s0 = counts.collections, counts.steps
    for _ = 1, 7 do B._account(32 * MiB, true) end   -- 224 MiB of device results
    assert.are.same({ c0, s0 }, { counts.collections, counts.steps })
    B._account(64 * MiB, true)                       -- past 256 MiB
    assert.are.equal(c0 + 1, counts.collections)
    -- the same bytes on the host pay as before: a step every quarter of the
    -- threshold (64 MiB, or what is live), a full collection at it
    B.collect()
    c0, s0 = counts.collections, counts.steps
    for _ = 1, 7 do B._account(32 * MiB, false) end
    assert.is_true(counts.collections > c0 and counts.steps > s0)
  end)

  it("has a CPU kernel for every op of the registry", function()
    local info = ffi.new("tide_op_info")
    local missing = {}
    for i = 0, B.C.tide_op_count() - 1 do
      B.C.tide_op_get_info(i, info)
      if info.has_cpu == 0 then missing[#missing + 1] = ffi.string(info.name) end
    end
    assert.are.same({}, missing)
  end)

  it("gives each Lua-visible op a function", function()
    for _, name in ipairs { "add", "matmul", "sum", "gather", "cat", "softmax", "where", "exp" } do
      assert.are.equal("function", type(tide[name]), name)
    end
  end)

  it("exist once per Lua state, even when package.loaded is cleared", function()
    local saved = {}
    for name, m in pairs(package.loaded) do
      if name == "tide" or name:match("^tide%.") or name:match("^bindings%.") then saved[name] = m end
    end
    for name in pairs(saved) do package.loaded[name] = nil end
    local again = require "tide"
    for name, m in pairs(saved) do package.loaded[name] = m end
    assert.are.equal(tide, again)
    -- a tensor made through the reloaded module is freed through the metatype's methods
    collectgarbage()
    local before = tide.memory_stats().reused
    for _ = 1, 10 do again.zeros(5000, { device = "cpu" }):free() end   -- host memory, whatever the default
    assert.is_true(tide.memory_stats().reused - before >= 9)
  end)
end)
