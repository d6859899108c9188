-- transcend_bench.lua: throughput of the vectorised float32 transcendental
-- kernels (exp, tanh, sigmoid, gelu, ...) on 16M elements next to a plain
-- copy (t:clone()), in ns per element and GB/s (4 bytes read + 4 written per
-- element), out of place (a fresh result, as clone) and in place (no new
-- pages), with one thread and with all of them. Not a test.
-- usage: build/tide bench/transcend_bench.lua [elements]
local tide = require "tide"
local ffi = require "ffi"

ffi.cdef [[ typedef struct { long s, ns; } transc_timespec; int clock_gettime(int clk, transc_timespec * ts); ]]
local ts = ffi.new("transc_timespec")
local function now()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.s) + tonumber(ts.ns) * 1e-9
end

local N = tonumber(arg and arg[1]) or 16 * 1024 * 1024
local REPS = 7

-- best wall time of REPS runs of fn (each synced)
local function best(fn)
  fn(); tide.sync()
  local b = math.huge
  for _ = 1, REPS do
    local t0 = now()
    local r = fn()
    tide.sync()
    b = math.min(b, now() - t0)
    r = nil   -- luacheck: ignore
    collectgarbage()
  end
  return b
end

local x = tide.randn(N)
local y = x:clone()

local cases = {
  { "clone (copy)", function() return x:clone() end, function() return y:copy_(x) end },
  { "exp", function() return x:exp() end, function() return y:copy_(x):exp_() end },
  { "tanh", function() return x:tanh() end, function() return y:copy_(x):tanh_() end },
  { "sigmoid", function() return x:sigmoid() end, function() return y:copy_(x):sigmoid_() end },
  { "gelu", function() return x:gelu() end, function() return y:copy_(x):gelu_() end },
  { "gelu tanh", function() return x:gelu("tanh") end, function() return y:copy_(x):gelu_("tanh") end },
  { "silu", function() return x:silu() end, function() return y:copy_(x):silu_() end },
  { "log(|x|)", function() return y:log() end, nil },
  { "sin", function() return x:sin() end, nil },
}

local threads = tide.get_num_threads()
print(string.format("%d float32 elements, best of %d; in place = copy_ then op_ (the copy's time subtracted)",
  N, REPS))
for _, nt in ipairs(threads > 1 and { 1, threads } or { 1 }) do
  tide.set_num_threads(nt)
  print(string.format("\n-- %d thread%s --", nt, nt > 1 and "s" or ""))
  print(string.format("%-14s %10s %8s %8s   %10s %8s", "op", "ns/elem", "GB/s", "x copy", "in place", "GB/s"))
  y:copy_(x):abs_()   -- positive values for log
  local copy_t, copy_in
  for _, c in ipairs(cases) do
    local t = best(c[2])
    local tin = c[3] and best(c[3]) or nil
    if not copy_t then copy_t, copy_in = t, tin end
    local line = string.format("%-14s %10.3f %8.2f %8.2f", c[1], t / N * 1e9, 8 * N / t / 1e9, t / copy_t)
    if tin and c[1] ~= "clone (copy)" then
      local net = math.max(tin - copy_in, 1e-9)
      line = line .. string.format("   %10.3f %8.2f", net / N * 1e9, 8 * N / net / 1e9)
    elseif tin then
      line = line .. string.format("   %10.3f %8.2f", tin / N * 1e9, 8 * N / tin / 1e9)
    end
    print(line)
    if c[1] == "log(|x|)" then y:copy_(x) end
  end
end
tide.set_num_threads(threads)
