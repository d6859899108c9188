--- bindings.ffi: the one place that loads libtide and touches the FFI library.
-- It declares tide.h (through the generated cdef.lua), loads the library,
-- and offers check() and wrap(): check turns a failed status into a Lua error
-- at the caller's line; wrap takes ownership of a new tensor for the Lua
-- collector and counts the bytes it holds, stepping the collector as they grow
-- so a training loop stays flat without collectgarbage() calls.
-- Everything above this file (lua/tide/) goes through what it returns.
local ffi = require "ffi"

-- One instance per Lua state, even when package.loaded is reset (busted does so
-- between spec files): the tensor registry and the C declarations exist once.
local REG = debug.getregistry()
if REG["tide.bindings"] then return REG["tide.bindings"] end

ffi.cdef(require "bindings.cdef")

-- Which libtide: the one a host already linked in (the tide executable and
-- libtide_lua say so in the registry; "" when it is part of the program itself,
-- whose symbols must then be exported), else $TIDE_LIBRARY, else the installed one.
local function load_library()
  local linked = REG["tide.library"]
  if linked == "" then
    if pcall(function() return ffi.C.tide_version end) then return ffi.C end
    error("tide: libtide is linked into this program but its symbols are not exported (link with -rdynamic)", 0)
  elseif linked then
    return ffi.load(linked)
  end
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

--- "file:line" of the innermost frame that is not Tide's own (for the engine's messages).
function M.user_location()
  for level = 2, 50 do
    local info = debug.getinfo(level, "Sl")
    if not info then break end
    if not is_tide_source(info.source) then return info.short_src .. ":" .. (info.currentline or 0) end
  end
  return "?"
end

--- Raises the runtime's last error at the user's line.
function M.raise()
  fail(ffi.string(C.tide_last_error()))
end
local raise = M.raise

--- Raises the runtime's error if `rc` is not TIDE_OK.
function M.check(rc)
  if rc ~= 0 then raise() end
end

-- -- lifetimes ------------------------------------------------------------------
-- A finalizer per tensor (ffi.gc) costs LuaJIT about 250 ns, more than an op.
-- Instead every tensor Lua owns sits in a slot of a weak-valued registry, with
-- its C pointer kept beside it in `ptrs`. When a collection cycle has cleared
-- the registry's dead entries (a sentinel's finalizer, one per cycle, says so),
-- the next wrap() releases the C tensors of the emptied slots in one batch.
local registry = setmetatable({}, { __mode = "v" })
local ptrs = ffi.new("tide_tensor *[?]", 1024)
local cap, top = 1024, 0          -- slots 1..top are in use or free
local free_slots, n_free = {}, 0
local cycles, swept = 0, 0
local batch = ffi.new("tide_tensor *[?]", 256)

local function arm_sentinel()
  local s = newproxy(true)
  getmetatable(s).__gc = function() cycles = cycles + 1; arm_sentinel() end
end
arm_sentinel()

local function sweep()
  swept = cycles
  local nb = 0
  for slot = 1, top do
    local p = ptrs[slot]
    if p ~= nil and registry[slot] == nil then
      ptrs[slot] = nil
      batch[nb] = p
      nb = nb + 1
      n_free = n_free + 1
      free_slots[n_free] = slot
      if nb == 256 then C.tide_tensor_release_many(batch, nb); nb = 0 end
    end
  end
  if nb > 0 then C.tide_tensor_release_many(batch, nb) end
end

--- Releases now the C tensors of those a collection cycle has found dead
-- (wrap() does it at the next fresh tensor): for memory figures read right
-- after a collectgarbage(), and for caches emptied then.
function M.release_collected()
  if cycles ~= swept then sweep() end
end

-- At exit (or lua_close), release everything still registered.
local closer = newproxy(true)
getmetatable(closer).__gc = function()
  for slot = 1, top do
    local p = ptrs[slot]
    if p ~= nil then ptrs[slot] = nil; C.tide_tensor_release(p) end
  end
end
M._closer = closer

-- -- memory accounting ------------------------------------------------------
-- LuaJIT sees a tensor as a small cdata, however many bytes it holds. We count
-- the bytes of fresh tensors, and when they pass a threshold that follows the
-- live size, run a full collection, as Torch7's allocator hook did. Between
-- those, every quarter of the threshold of fresh bytes, or every 4096 fresh
-- tensors, pays the incremental collector for about one cycle (work in
-- proportion to the Lua heap), so dead tensors go back to the allocator long
-- before the threshold and the headers of small ones are reused while still in
-- cache. A cycle costs about as much as a full collection (100-300 us for
-- Tide's own heap); paying one for every 256 KiB of fresh data, as this file
-- once did, cost a sixth of the time of a 256x256 matmul.
local pending = 0
local threshold = 64 * 1024 * 1024
-- Device tensors are counted apart: a GPU goes through large results far
-- faster than a CPU (ten 4096x4096 products a millisecond or two apart), and
-- at the host's pace a full collection every 64 MiB cost a bfloat16 product
-- loop more host time than the device's, leaving it idle. Fresh device
-- tensors bring a full collection every DEV_THRESHOLD bytes, a fixed amount:
-- one that grew with what is live, as the host's does, could leave a large
-- model's device without room for its dead tensors, which the allocator's
-- out-of-memory retry cannot collect. They pay no incremental steps, which buy
-- the host's cache, not the device's; the caching allocator reuses their
-- blocks as soon as they are collected.
local dev_pending = 0
local DEV_THRESHOLD = 256 * 1024 * 1024
local CUDA = C.TIDE_DEVICE_CUDA
-- What a tensor costs beyond its data (C header, storage header, registry slot).
local HEADER_BYTES = 384
local debt, n_fresh = 0, 0
local COUNT_STEP = 4096
local stats = ffi.new("tide_mem_stats")

-- How often each was paid for, for the specs of this policy.
local counts = { collections = 0, steps = 0 }
M.gc_counts = counts

local function collect()
  collectgarbage("collect")
  sweep()
  C.tide_mem_get_stats(stats)
  local live = tonumber(stats.bytes_in_use)
  threshold = math.max(64 * 1024 * 1024, live)
  pending, dev_pending = 0, 0
  debt, n_fresh = 0, 0
  counts.collections = counts.collections + 1
end
M.collect = collect

-- Counts a fresh tensor of `fresh_bytes` (on a CUDA device or not) against
-- the collector, and pays it what is due.
local function account(fresh_bytes, on_device)
  if on_device and fresh_bytes > 0 then
    dev_pending = dev_pending + fresh_bytes
    fresh_bytes = HEADER_BYTES
    if dev_pending > DEV_THRESHOLD then collect() end
  else
    fresh_bytes = fresh_bytes + HEADER_BYTES
  end
  pending = pending + fresh_bytes
  if pending > threshold then collect() end
  debt = debt + fresh_bytes
  n_fresh = n_fresh + 1
  if debt > threshold / 4 or n_fresh > COUNT_STEP then   -- tell the incremental collector what it cannot see
    collectgarbage("step", collectgarbage("count"))
    debt = 0
    n_fresh = 0
    counts.steps = counts.steps + 1
  end
end
M._account = account

--- Takes ownership of a new tensor pointer (raising the runtime's error if it is
-- NULL), returned as a reference, and counts `fresh_bytes` of newly allocated
-- data against the collector.
function M.wrap(p, fresh_bytes)
  if p == nil then raise() end
  account(fresh_bytes or 0, p.dev.type == CUDA)
  if cycles ~= swept then sweep() end
  local slot
  if n_free > 0 then
    slot = free_slots[n_free]
    n_free = n_free - 1
  else
    top = top + 1
    if top >= cap then
      local bigger = ffi.new("tide_tensor *[?]", cap * 2)
      ffi.copy(bigger, ptrs, cap * ffi.sizeof("tide_tensor *"))
      ptrs, cap = bigger, cap * 2
    end
    slot = top
  end
  local t = p[0]
  t.tag = slot
  registry[slot] = t
  ptrs[slot] = p
  return t
end

--- Releases t's C tensor now; t must not be used afterwards.
function M.free(t)
  local slot = tonumber(t.tag)
  if slot > 0 and registry[slot] == t then
    registry[slot] = nil
    ptrs[slot] = nil
    n_free = n_free + 1
    free_slots[n_free] = slot
    C.tide_tensor_release(t)
  end
end

--- The tensors Lua holds now, each once (for the REPL's who() and for debugging).
-- Run a collection first to leave out those no longer reachable.
function M.live_tensors()
  local r = {}
  for slot = 1, top do
    local t = registry[slot]
    if t ~= nil then r[#r + 1] = t end
  end
  return r
end

REG["tide.bindings"] = M
return M
