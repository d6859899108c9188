--- bench/common.lua: what the benchmark scripts share: a monotonic clock, the
-- CPU's name, and the models of the training issue (the MLP 784-256-256-10 and
-- the Fashion-MNIST CNN of examples/fashion_mnist.lua).
local ffi = require "ffi"
local M = {}

ffi.cdef [[ typedef struct { long s, ns; } bench_common_timespec;
            int clock_gettime(int clk, bench_common_timespec * ts); ]]
local ts = ffi.new("bench_common_timespec")

--- Seconds on the monotonic clock.
function M.now()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.s) + tonumber(ts.ns) * 1e-9
end

--- The best of `reps` runs of f (after a warm-up run), each waited for with
-- tide.sync(), in ms.
function M.best_ms(f, reps)
  local tide = require "tide"
  f()
  tide.sync()
  local b = math.huge
  for _ = 1, reps do
    local t0 = M.now()
    f()
    tide.sync()
    b = math.min(b, M.now() - t0)
  end
  return b * 1e3
end

--- bench/ref.c's library (libtide_bench_ref.so, next to libtide in the build
-- tree), or nil, saying so, when it cannot be loaded: references are then skipped.
function M.load_ref()
  local libdir = (os.getenv("TIDE_LIBRARY") or ""):match("^(.*)/[^/]*$") or "."
  local ok, ref = pcall(ffi.load, libdir .. "/libtide_bench_ref.so")
  if ok then return ref end
  print("note: no reference library (" .. tostring(ref) .. "); references skipped")
end

--- The CPU's model name from /proc/cpuinfo ("?" when unknown).
function M.cpu_model()
  local f = io.open("/proc/cpuinfo")
  local m = f and f:read("*a"):match("model name%s*:%s*([^\n]+)") or "?"
  if f then f:close() end
  return m
end

--- The first of $TIDE_PYTHON, python3 and /usr/bin/python3 that imports
-- torch, or nil: PyTorch is a reference only, the project never needs it.
function M.torch_python()
  for _, py in ipairs { os.getenv("TIDE_PYTHON") or "", "python3", "/usr/bin/python3" } do
    if py ~= "" and os.execute(py .. " -c 'import torch' >/dev/null 2>&1") == 0 then return py end
  end
  return nil
end

--- A fresh model: "mlp" or "cnn".
function M.model(kind)
  local nn = require("tide").nn
  if kind == "mlp" then
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
  end
  return nn.Sequential(
    nn.Conv2d(1, 32, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))
end

return M
