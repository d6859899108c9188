--- bindings.ffi: the one place that loads libtide and touches the FFI library.
-- It declares tide.h (through the generated cdef.lua), loads the library,
-- and offers check() and wrap(): check turns a failed status into a Lua error
-- at the caller's line; wrap takes ownership of a new tensor for the Lua
-- collector and counts the bytes it holds, stepping the collector as they grow
-- so a training loop stays flat without collectgarbage() calls.
-- Everything above this file (lua/tide/) goes through what it returns.
local ffi = require "ffi"

ffi.cdef(require "bindings.cdef")

local function load_library()
  local path = os.getenv("TIDE_LIBRARY")
  if path and path ~= "" then return ffi.load(path) end
  local ok, lib = pcall(ffi.load, "tide")
  if ok then return lib end
  error("tide: cannot load libtide (set TIDE_LIBRARY, or install it): " .. tostring(lib), 0)
end

local C = load_library()

local M = { C = C, ffi = ffi }

-- Lua holds tensors as references (`tide_tensor &`), not pointers: LuaJIT gives
-- pointers C's arithmetic (p + 1 would step the pointer), while arithmetic on a
-- struct reference goes to the metatype's __add & co. C functions taking
-- `tide_tensor *` accept the reference as is.
M.tensor_type = ffi.typeof("struct tide_tensor")

-- Sources that belong to Tide: an error is reported at the first frame outside them.
local function is_tide_source(src)
  return src == "=[C]" or src == "=(tail call)"
    or (src:sub(1, 1) == "@" and (src:find("/lua/tide/", 1, true) or src:find("/bindings/", 1, true)))
end

--- Raises `msg` as a Lua error at the user's line: the innermost frame that is not Tide's own.
function M.fail(msg)
  for level = 2, 50 do
    local info = debug.getinfo(level, "S")
    if not info then break end
    if not is_tide_source(info.source) then error(msg, level) end
  end
  error(msg, 2)
end
local fail = M.fail

--- Raises the runtime's last error at the user's line.
function M.raise()
  fail(ffi.string(C.tide_last_error()))
end
local raise = M.raise

--- Raises the runtime's error if `rc` is not TIDE_OK.
function M.check(rc)
  if rc ~= 0 then raise() end
end

-- -- memory accounting ------------------------------------------------------
-- LuaJIT sees a tensor as a pointer-sized cdata, however many bytes it holds.
-- We count the bytes of fresh tensors, and when they pass a threshold that
-- follows the live size, run a full collection, as Torch7's allocator hook did.
local pending = 0
local threshold = 64 * 1024 * 1024
local stats = ffi.new("tide_mem_stats")

local function collect()
  collectgarbage("collect")
  C.tide_mem_get_stats(stats)
  local live = tonumber(stats.bytes_in_use)
  threshold = math.max(64 * 1024 * 1024, live)
  pending = 0
end
M.collect = collect

--- Takes ownership of a new tensor pointer, returned as a reference (raising the runtime's error if it is
-- NULL) and counts `fresh_bytes` of newly allocated data against the collector.
function M.wrap(p, fresh_bytes)
  if p == nil then raise() end
  if fresh_bytes and fresh_bytes > 0 then
    pending = pending + fresh_bytes
    if pending > threshold then collect() end
  end
  return ffi.gc(p[0], C.tide_tensor_release)
end

return M
