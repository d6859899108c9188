-- ops_bench.lua: the cost of ops, each figure next to a reference measured in
-- the same run (bench/ref.c, loaded through the FFI):
--   (a) one eager op on 1-element tensors, in ns (target < 300 ns, set where
--       PyTorch took 600 ns: PyTorch's a + b is timed in the same run when a
--       python3 has torch)
--   (b) matmul GFLOP/s at n = 256, 1024, 2048 next to OpenBLAS's sgemm called
--       directly with its own default threads (target >= 95%)
--   (c) add, exp, tanh, masked_fill and where on 16M floats as GB/s (bytes
--       read + written / time) next to a plain C copy loop (targets: add,
--       masked_fill and where >= 80%, exp and tanh >= 50%); the masks are random
-- usage: build/tide bench/ops_bench.lua
local tide = require "tide"
local ffi = require "ffi"
-- shared helpers, found beside this script
local common = dofile((debug.getinfo(1, "S").source:sub(2):match("^(.*)/") or ".") .. "/common.lua")

ffi.cdef [[
  double tide_ref_copy(float * dst, const float * src, int64_t n, int32_t reps);
  double tide_ref_add(float * dst, const float * a, const float * b, int64_t n, int32_t reps);
  double tide_ref_sgemm(int32_t n, int32_t reps);
  const char * tide_ref_blas_info(void);
]]
local now = common.now

-- the reference library sits next to libtide in the build tree
local ref = common.load_ref()

-- -- the machine --------------------------------------------------------------------------

local function cpuinfo()
  local f = io.open("/proc/cpuinfo")
  if not f then return "?", 0 end
  local s = f:read("*a")
  f:close()
  local n = 0
  for _ in s:gmatch("\nprocessor%s*:") do n = n + 1 end
  if s:match("^processor%s*:") then n = n + 1 end
  return s:match("model name%s*:%s*([^\n]+)") or "?", n
end
local model, cores = cpuinfo()
print(string.format("machine: %s, %d cores, tide threads %d", model, cores, tide.get_num_threads()))
local cfg = tide.config()
local keys = {}
for k in pairs(cfg) do if k:match("^blas") then keys[#keys + 1] = k end end
table.sort(keys)
for _, k in ipairs(keys) do io.write(string.format("  %s=%s\n", k, tostring(cfg[k]))) end

--- Whether op works on a small input (a kernel may not be written yet).
local function has_kernel(f)
  local ok, err = pcall(f)
  if not ok then return false, tostring(err):gsub("^.-:%d+: ", "") end
  return true
end

-- -- (a) eager op cost ---------------------------------------------------------------------

do
  local a, b = tide.ones(1), tide.ones(1)
  local function per_op(f)
    for _ = 1, 1e5 do f() end   -- warm-up: traces compiled, allocator caches filled
    tide.sync()
    local best = math.huge   -- the best of five rounds: a shared machine has slow spells
    for _ = 1, 5 do
      local n = 2e5
      local t0 = now()
      for _ = 1, n do f() end
      tide.sync()
      best = math.min(best, (now() - t0) / n * 1e9)
    end
    return best
  end
  local ns = per_op(function() local _ = a + b end)
  local line = string.format("(a) a + b on 1-element tensors: %.0f ns per op (target < 300)", ns)
  local python = common.torch_python()
  if python then   -- the best of five rounds of 200,000, as Tide's loop is timed
    local p = io.popen(python .. [[ -c "
import time, torch
torch.set_num_threads(]] .. tide.get_num_threads() .. [[)
a, b = torch.ones(1), torch.ones(1)
for _ in range(100000): a + b
best = 1e9
for _ in range(5):
    t0 = time.perf_counter()
    for _ in range(200000): a + b
    best = min(best, (time.perf_counter() - t0) / 200000)
print(best * 1e9)"]])
    local torch_ns = tonumber(p:read("*a"))
    p:close()
    if torch_ns then line = line .. string.format("; PyTorch %.0f ns (%.1fx Tide's)", torch_ns, torch_ns / ns) end
  end
  print(line)
  local ok, why = has_kernel(function() return a:exp():item() end)
  if ok then
    print(string.format("    a:exp() on 1-element tensors: %.0f ns per op", per_op(function() local _ = a:exp() end)))
  else
    print("    a:exp() skipped: " .. why)
  end
end

-- -- (b) matmul ----------------------------------------------------------------------------

do
  local ok, why = has_kernel(function() return tide.ones(2, 2):matmul(tide.ones(2, 2)):totable() end)
  if not ok then
    print("(b) skipped: " .. why)
  else
    print("(b) matmul float32, n x n by n x n, GFLOP/s (best of the runs)")
    for _, n in ipairs { 256, 1024, 2048 } do
      local reps = n <= 256 and 800 or n <= 1024 and 30 or 10
      local a, b = tide.rand(n, n), tide.rand(n, n)
      local c = a:matmul(b):wait()
      -- timed as the reference is: `batch` products back to back after one
      -- untimed, then a wait;
      -- rounds of Tide and of the reference alternate, so that a slow spell of
      -- a shared machine hits both, and each keeps its best round. Each result
      -- is freed once the next is queued, so its memory is reused as in a
      -- training loop (fresh pages would time the kernel's page faults)
      local batch = n <= 256 and 20 or 1
      local best, rbest = math.huge, math.huge
      for _ = 1, math.max(1, reps / batch) do
        -- as the reference does: one untimed product first, so that both time
        -- a product whose operands the one before it left in cache
        local prev = c
        c = a:matmul(b):wait()
        prev:free()
        local t0 = now()
        for _ = 1, batch do
          local prev = c
          c = a:matmul(b)
          prev:free()
        end
        c:wait()
        best = math.min(best, (now() - t0) / batch)
        if ref then rbest = math.min(rbest, ref.tide_ref_sgemm(n, batch) / batch) end
      end
      c:free()
      local flops = 2 * n * n * n
      local tide_gf = flops / best / 1e9
      local line = string.format("    n=%-5d tide %7.1f", n, tide_gf)
      if ref then
        local ob_gf = flops / rbest / 1e9
        line = line .. string.format("   openblas %7.1f   tide/openblas %5.1f%% (target >= 95%%)", ob_gf,
          100 * tide_gf / ob_gf)
      end
      print(line)
      a:free(); b:free()
    end
    if ref then print("    openblas reference: " .. ffi.string(ref.tide_ref_blas_info())) end
  end
end

-- -- (c) elementwise bandwidth ---------------------------------------------------------------

do
  local n = 16 * 1024 * 1024
  local reps = 10
  local x, y = tide.rand(n), tide.rand(n)
  local function gbs(bytes, f)
    local r = f(); r:wait(); r:free()
    local best = math.huge
    for _ = 1, reps do
      local t0 = now()
      r = f():wait()
      best = math.min(best, now() - t0)
      r:free()
    end
    return bytes / best / 1e9
  end
  local copy_gbs
  if ref then
    local dst = tide.empty(n)
    local pd = ffi.cast("float *", dst:data_ptr())
    local ps = ffi.cast("float *", x:data_ptr())
    ref.tide_ref_copy(pd, ps, n, 1)
    local best = math.huge
    for _ = 1, reps do best = math.min(best, ref.tide_ref_copy(pd, ps, n, 1)) end
    copy_gbs = 8 * n / best / 1e9
    local abest = math.huge
    for _ = 1, reps do abest = math.min(abest, ref.tide_ref_add(pd, ps, ffi.cast("float *", y:data_ptr()), n, 1)) end
    print(string.format("(c) 16M floats, GB/s (bytes read + written / time); C copy loop %.1f, C add loop %.1f (one thread)",
      copy_gbs, 12 * n / abest / 1e9))
    dst:free()
  else
    print("(c) 16M floats, GB/s (bytes read + written / time)")
  end
  local mask = x:gt(0.5)   -- x is uniform: a coin toss per element, so a branch per element would mispredict
  local cases = {
    { "add", 12, function() return x + y end, 80, function(s) return s + s end },
    { "exp", 8, function() return x:exp() end, 50 },
    { "tanh", 8, function() return x:tanh() end, 50 },
    -- x, the bool mask, the result
    { "masked_fill", 9, function() return x:masked_fill(mask, 0) end, 80, function(s) return s:masked_fill(s:gt(1), 0) end },
    -- the mask, x, y, the result
    { "where", 13, function() return tide.where(mask, x, y) end, 80, function(s) return tide.where(s:gt(1), s, s) end },
  }
  for _, case in ipairs(cases) do
    local name, bpe, f, target, probe = case[1], case[2], case[3], case[4], case[5]
    local ok, why = has_kernel(function()
      local s = tide.ones(4)
      return (probe and probe(s) or s[name](s)):totable()
    end)
    if not ok then
      print(string.format("    %-11s skipped: %s", name, why))
    else
      local g = gbs(bpe * n, f)
      if copy_gbs then
        print(string.format("    %-11s %6.1f GB/s   %5.1f%% of copy (target >= %d%%)", name, g, 100 * g / copy_gbs, target))
      else
        print(string.format("    %-11s %6.1f GB/s", name, g))
      end
    end
  end
end
