-- engine_bench.lua: the asynchronous engine, each figure next to its reference
-- measured in the same run.
--   (a) eager cost per op on 1-element tensors, and enqueue-to-completion time;
--       a creation op naming its device next to one on the default device
--   (b) ten rounds of "make a 1000x1000 random matrix and multiply it by itself":
--       enqueue alone, then with tide.sync(), next to NumPy's loop when python3
--       has NumPy
--   (c) two independent chains of matmuls on cpu:0 and cpu:1 against the same
--       chains on one device
-- usage: build/tide bench/engine_bench.lua
local tide = require "tide"
local ffi = require "ffi"

ffi.cdef [[ typedef struct { long s, ns; } bench_timespec; int clock_gettime(int clk, bench_timespec * ts); ]]
local ts = ffi.new("bench_timespec")
local function now()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.s) + tonumber(ts.ns) * 1e-9
end

local function cpu_model()
  local f = io.open("/proc/cpuinfo")
  local m = f and f:read("*a"):match("model name%s*:%s*([^\n]+)") or "?"
  if f then f:close() end
  return m
end
local cfg = tide.config()
print(string.format("machine: %s, %d threads, blas %s (%s)", cpu_model(), tide.get_num_threads(),
  tostring(cfg.blas), tostring(cfg.blas_core)))

-- (a) -------------------------------------------------------------------------------
do
  local a, b = tide.ones(1), tide.ones(1)
  for _ = 1, 1e5 do local _ = a + b end
  local n = 1e6
  local t0 = now()
  for _ = 1, n do local _ = a + b end
  local per = (now() - t0) / n * 1e9
  local t1 = now()
  local c = a
  for _ = 1, 1000 do c = c + b end
  c:item()
  local chain = (now() - t1) / 1000 * 1e9
  print(string.format("(a) eager op on 1-element tensors: %.0f ns (target < 500; Torch7 ~440 synchronous)", per))
  print(string.format("    a chain of dependent ops, enqueue to completion: %.0f ns per op", chain))
  -- naming the device costs parsing its name (it once read /sys for the CPU count: 25 us)
  local function per_call(f)
    for _ = 1, 1e4 do f() end
    tide.sync()
    local t = now()
    for _ = 1, 1e5 do f() end
    return (now() - t) / 1e5 * 1e9
  end
  local named = per_call(function() return tide.randn(1, { device = "cpu" }) end)
  local plain = per_call(function() return tide.randn(1) end)
  print(string.format("    randn(1, {device = 'cpu'}): %.0f ns, randn(1) on the default device: %.0f ns", named, plain))
end

-- (b) -------------------------------------------------------------------------------
local has_matmul = tide.config and pcall(function() return tide.ones(2, 2):matmul(tide.ones(2, 2)) end)
if not has_matmul then
  print("(b) skipped: matmul has no kernel in this build")
else
  local function rounds()
    local r
    for _ = 1, 10 do
      local x = tide.randn(1000, 1000)
      r = x:matmul(x)
    end
    return r
  end
  rounds(); tide.sync()
  local t0 = now()
  local r = rounds()
  local enq = now() - t0
  tide.sync()
  local total = now() - t0
  r:wait()
  print(string.format("(b) 10 x (randn 1000x1000, matmul): enqueue %.2f ms, synchronised %.1f ms", enq * 1e3, total * 1e3))
  local py = io.popen([[python3 -c "
import time
try:
    import numpy as np
except ImportError:
    print('none'); raise SystemExit
def rounds():
    for _ in range(10):
        x = np.random.randn(1000, 1000).astype(np.float32)
        y = x @ x
rounds()
t = time.perf_counter(); rounds(); print('%.1f' % ((time.perf_counter() - t) * 1e3))
" 2>/dev/null]])
  local out = py and py:read("*a") or ""
  if py then py:close() end
  if out:match("^%d") then
    print(string.format("    NumPy (float32, same machine): %s ms", out:gsub("%s+$", "")))
  else
    print("    NumPy: not installed, no reference")
  end
end

-- (c) -------------------------------------------------------------------------------
if has_matmul then
  local n, len = 384, 24
  local function chains(dev_a, dev_b)
    local a = tide.randn(n, n, { device = dev_a }) * (1 / math.sqrt(n))
    local b = tide.randn(n, n, { device = dev_b }) * (1 / math.sqrt(n))
    tide.sync()
    local t0 = now()
    local x, y = a, b
    for _ = 1, len do
      x = x:matmul(a)
      y = y:matmul(b)
    end
    tide.sync()
    return now() - t0
  end
  chains("cpu:0", "cpu:1")
  local two, one = math.huge, math.huge   -- best of five, interleaved, against a noisy machine
  for _ = 1, 5 do
    two = math.min(two, chains("cpu:0", "cpu:1"))
    one = math.min(one, chains("cpu:0", "cpu:0"))
  end
  print(string.format("(c) two chains of %d matmuls %dx%d: on cpu:0 + cpu:1 %.1f ms, both on cpu:0 %.1f ms: %.2fx (target >= 1.7x)",
    len, n, n, two * 1e3, one * 1e3, one / two))
end
