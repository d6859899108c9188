-- train_bench.lua: training steps (forward, backward, Adam) of the issue's
-- models, each next to PyTorch's CPU eager mode on the same machine with the
-- same thread count when a python3 with torch is found (TIDE_PYTHON, python3,
-- /usr/bin/python3), and a long run whose resident memory must stay flat.
--   (a) MLP 784-256-256-10, batch 16 and 128: ms per step, samples/s, peak memory
--   (b) the Fashion-MNIST CNN of examples/fashion_mnist.lua, batch 64, and the
--       epoch (938 steps) that gives
--   (c) 10,000 MLP steps: resident memory after 1,000, 5,000 and 10,000
-- Each case runs in a child process of its own, so its peak memory is its own.
-- usage: build/tide bench/train_bench.lua
local tide = require "tide"
local F = tide.nn.functional
-- shared helpers, found beside this script
local common = dofile((debug.getinfo(1, "S").source:sub(2):match("^(.*)/") or ".") .. "/common.lua")
local now = common.now
local function rss_mib()
  local f = io.open("/proc/self/statm")
  local pages = tonumber(f:read("*a"):match("%d+%s+(%d+)"))
  f:close()
  return pages * 4096 / 2^20
end

local model = common.model

local function stepper(kind, batch)
  tide.manual_seed(0)
  local m = model(kind)
  local opt = tide.optim.Adam(m:parameters(), { lr = 1e-3 })
  local x = kind == "mlp" and tide.randn(batch, 784) or tide.randn(batch, 1, 28, 28)
  local y = tide.randint(1, 11, { batch })
  return function()
    local loss = F.cross_entropy(m(x), y)
    opt:zero_grad()
    loss:backward()
    opt:step()
    return loss
  end
end

-- A child: one case, printed as "ms_per_step peak_bytes".
if arg[1] == "--case" then
  local kind, batch, steps = arg[2], tonumber(arg[3]), tonumber(arg[4])
  local step = stepper(kind, batch)
  for _ = 1, math.max(5, steps / 10) do step() end
  tide.sync()
  local t0 = now()
  for _ = 1, steps do step() end
  tide.sync()
  print(string.format("%.4f %d", (now() - t0) / steps * 1e3, tide.memory_stats().peak))
  os.exit(0)
end
if arg[1] == "--flat" then
  local step = stepper("mlp", 16)
  local marks = { [1000] = true, [5000] = true, [10000] = true }
  for i = 1, 10000 do
    step()
    if marks[i] then tide.sync(); io.write(string.format("%.1f ", rss_mib())) end
  end
  print()
  os.exit(0)
end

local self = debug.getinfo(1, "S").source:sub(2)
local function child(args)
  local p = assert(io.popen("luajit " .. self .. " " .. args))
  local out = p:read("*a")
  p:close()
  return out
end

local cpu_model = common.cpu_model
local threads = tide.get_num_threads()
print(string.format("machine: %s, %d threads", cpu_model(), threads))

-- PyTorch, when some python3 has it
local python = common.torch_python()
local cases = { { "mlp", 16, 2000 }, { "mlp", 128, 500 }, { "cnn", 64, 60 } }
local torch_ms = {}
if python then
  local specs = {}
  for _, c in ipairs(cases) do specs[#specs + 1] = table.concat(c, ":") end
  local ref = self:gsub("train_bench%.lua$", "train_ref.py")
  local p = assert(io.popen(python .. " " .. ref .. " " .. threads .. " " .. table.concat(specs, " ")))
  for line in p:lines() do
    local name, ms = line:match("^(%S+) (%S+)$")
    if name then torch_ms[name] = tonumber(ms) end
  end
  p:close()
  local v = io.popen(python .. " -c 'import torch; print(torch.__version__)'"):read("*l")
  print(string.format("reference: PyTorch %s CPU eager (%s), %d threads", v, python, threads))
else
  print("reference: skipped, no python3 with torch (set TIDE_PYTHON; the project never needs it)")
end

print(string.format("%-22s %10s %12s %12s %14s %10s", "case", "ms/step", "samples/s", "peak MiB", "PyTorch ms", "speedup"))
for _, c in ipairs(cases) do
  local kind, batch, steps = c[1], c[2], c[3]
  local ms, peak = child(string.format("--case %s %d %d", kind, batch, steps)):match("(%S+) (%S+)")
  ms, peak = tonumber(ms), tonumber(peak)
  local ref = torch_ms[table.concat(c, ":")]
  print(string.format("%-22s %10.3f %12.0f %12.1f %14s %10s", kind .. " batch " .. batch, ms, batch / ms * 1e3,
    peak / 2^20, ref and string.format("%.3f", ref) or "-", ref and string.format("%.2fx", ref / ms) or "-"))
  if kind == "cnn" then
    print(string.format("%-22s %10.1f s %s", "  cnn epoch (938 steps)", ms * 938 / 1e3,
      ref and string.format("   PyTorch %.1f s", ref * 938 / 1e3) or ""))
  end
end

local rss = child("--flat")
print("(c) MLP batch 16, resident MiB after 1,000 / 5,000 / 10,000 steps: " .. rss:gsub("%s+$", ""))
