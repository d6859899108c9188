-- conv_bench.lua: the convolutions and poolings of a Fashion-MNIST CNN (batch
-- 128), forward and backward, in ms per call and GFLOP/s (GB/s for pooling),
-- each next to a reference measured in the same run:
--   convolutions: im2col + cblas_sgemm per image, OpenBLAS with its own default
--   threads (bench/ref.c), the textbook way; max pooling: a plain C loop on one
--   thread; PyTorch on the same shapes when a python3 has torch (TIDE_PYTHON, python3, /usr/bin/python3).
-- usage: build/tide bench/conv_bench.lua [reps]
local tide = require "tide"
local nn = require "tide.nn_ops"
local ffi = require "ffi"
-- shared helpers, found beside this script
local common = dofile((debug.getinfo(1, "S").source:sub(2):match("^(.*)/") or ".") .. "/common.lua")

ffi.cdef [[
  double tide_ref_conv2d(int32_t n, int32_t c, int32_t h, int32_t w, int32_t o, int32_t k, int32_t pad,
                         int32_t which, int32_t reps);
  double tide_ref_max_pool2x2(int64_t planes, int32_t h, int32_t w, int32_t backward, int32_t reps);
  const char * tide_ref_blas_info(void);
]]
local now = common.now

local REPS = tonumber(arg and arg[1]) or 10
local ROUNDS = 5
local ref = common.load_ref()

local function cpuinfo()
  local f = io.open("/proc/cpuinfo")
  if not f then return "?", 0 end
  local s = f:read("*a")
  f:close()
  local n = select(2, s:gsub("\nprocessor%s*:", "")) + (s:match("^processor%s*:") and 1 or 0)
  return s:match("model name%s*:%s*([^\n]+)") or "?", n
end
local model, cores = cpuinfo()
local function loadavg()
  local f = io.open("/proc/loadavg")
  if not f then return "?" end
  local s = f:read("*l")
  f:close()
  return s:match("^(%S+)") or "?"
end
print(string.format("machine: %s, %d cores, load %s (other work shares the cores), tide threads %d, %d calls per figure (best of %d)",
  model, cores, loadavg(), tide.get_num_threads(), REPS, ROUNDS))

--- Seconds per call of f (which enqueues one op), synchronised, best of ROUNDS rounds after a warm-up.
local function per_call(f)
  f()
  tide.sync()
  local best = math.huge
  for _ = 1, ROUNDS do
    local t0 = now()
    for _ = 1, REPS do f() end
    tide.sync()
    best = math.min(best, (now() - t0) / REPS)
  end
  return best
end

local function best_ref(f)
  local best = math.huge
  for _ = 1, ROUNDS do
    local t = f()
    if t < 0 then return nil end
    best = math.min(best, t / REPS)
  end
  return best
end

-- -- PyTorch, when it is there -----------------------------------------------------------

local torch_figures
do
  local script = [[
import time, torch, torch.nn.functional as F
torch.manual_seed(0)
R = %d
def t(f):
    f()
    best = 1e9
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(R): f()
        best = min(best, (time.perf_counter() - t0) / R)
    return best
x1 = torch.randn(128, 1, 28, 28); w1 = torch.randn(32, 1, 3, 3); b1 = torch.randn(32)
x2 = torch.randn(128, 32, 14, 14); w2 = torch.randn(64, 32, 3, 3); b2 = torch.randn(64)
gy1 = torch.randn(128, 32, 28, 28); gy2 = torch.randn(128, 64, 14, 14)
bi = torch.ops.aten.convolution_backward
p1 = torch.randn(128, 32, 28, 28); p2 = torch.randn(128, 64, 14, 14)
_, i1 = F.max_pool2d(p1, 2, return_indices=True)
g1 = torch.randn(128, 32, 14, 14)
print("conv1 fwd", t(lambda: F.conv2d(x1, w1, b1, padding=1)))
print("conv1 bwd_w", t(lambda: bi(gy1, x1, w1, None, [1,1], [1,1], [1,1], False, [0,0], 1, [False, True, False])))
print("conv2 fwd", t(lambda: F.conv2d(x2, w2, b2, padding=1)))
print("conv2 bwd_in", t(lambda: bi(gy2, x2, w2, None, [1,1], [1,1], [1,1], False, [0,0], 1, [True, False, False])))
print("conv2 bwd_w", t(lambda: bi(gy2, x2, w2, None, [1,1], [1,1], [1,1], False, [0,0], 1, [False, True, False])))
print("maxpool1 fwd", t(lambda: F.max_pool2d(p1, 2, return_indices=True)))
print("maxpool1 bwd", t(lambda: torch.ops.aten.max_pool2d_with_indices_backward(g1, p1, [2,2], [2,2], [0,0], [1,1], False, i1)))
x3 = torch.randn(8, 16, 16, 32, 32, requires_grad=True); w3 = torch.randn(32, 16, 3, 3, 3, requires_grad=True)
b3 = torch.randn(32, requires_grad=True)
with torch.no_grad(): print("conv3d fwd", t(lambda: F.conv3d(x3, w3, b3, padding=1)))
print("conv3d fwdbwd", t(lambda: F.conv3d(x3, w3, b3, padding=1).sum().backward()))
]]
  local python = common.torch_python()
  if not python then
    print("note: PyTorch reference skipped: no python3 with torch (set TIDE_PYTHON; the project never needs it)")
  else
    local path = os.tmpname()
    local f = io.open(path, "w")
    f:write(script:format(REPS))
    f:close()
    local p = io.popen(python .. " " .. path .. " 2>&1")
    local out = p:read("*a")
    p:close()
    os.remove(path)
    torch_figures = {}
    for name, v in out:gmatch("([%w_]+ [%w_]+) ([%d%.e%-]+)") do torch_figures[name] = tonumber(v) end
    if next(torch_figures) == nil then print("note: PyTorch reference failed: " .. out); torch_figures = nil end
  end
end

-- -- the table ----------------------------------------------------------------------------------

local function row(name, key, t, amount, unit, ref_t)
  local rate = amount / t / 1e9
  local line = string.format("  %-34s %8.3f ms %8.1f %s", name, t * 1e3, rate, unit)
  if ref_t then line = line .. string.format("   | textbook ref %8.3f ms %8.1f %s", ref_t * 1e3, amount / ref_t / 1e9, unit) end
  local tt = torch_figures and torch_figures[key]
  if tt then line = line .. string.format("   | PyTorch %8.3f ms", tt * 1e3) end
  print(line)
end

tide.manual_seed(0)
local convs = {
  { name = "conv1 1->32 3x3 pad 1 [128,1,28,28]", key = "conv1", n = 128, c = 1, h = 28, o = 32 },
  { name = "conv2 32->64 3x3 pad 1 [128,32,14,14]", key = "conv2", n = 128, c = 32, h = 14, o = 64 },
}
print(string.format("OpenBLAS for the reference: %s", ref and ffi.string(ref.tide_ref_blas_info()) or "none"))
print("convolutions (GFLOP/s = 2 N O H W C 9 / time)")
for _, cv in ipairs(convs) do
  local x = tide.randn(cv.n, cv.c, cv.h, cv.h)
  local w = tide.randn(cv.o, cv.c, 3, 3)
  local b = tide.randn(cv.o)
  local gy = tide.randn(cv.n, cv.o, cv.h, cv.h)
  local flops = 2 * cv.n * cv.o * cv.h * cv.h * cv.c * 9
  local opts = { padding = 1 }
  local function r(which)
    return ref and best_ref(function() return ref.tide_ref_conv2d(cv.n, cv.c, cv.h, cv.h, cv.o, 3, 1, which, REPS) end)
  end
  row(cv.name .. " fwd", cv.key .. " fwd", per_call(function() return nn.conv2d(x, w, b, opts) end), flops, "GFLOP/s", r(0))
  row(cv.name .. " bwd input", cv.key .. " bwd_in",
    per_call(function() return nn.conv2d_backward_input(gy, w, x, opts) end), flops, "GFLOP/s", r(1))
  row(cv.name .. " bwd weight", cv.key .. " bwd_w",
    per_call(function() return nn.conv2d_backward_weight(gy, x, w, opts) end), flops, "GFLOP/s", r(2))
end

print("pooling (GB/s = bytes read + written / time)")
local pools = {
  { name = "max_pool2d 2x2 [128,32,28,28]", key = "maxpool1", n = 128, c = 32, h = 28 },
  { name = "max_pool2d 2x2 [128,64,14,14]", key = "maxpool2", n = 128, c = 64, h = 14 },
}
for _, pl in ipairs(pools) do
  local x = tide.randn(pl.n, pl.c, pl.h, pl.h)
  local planes, oh = pl.n * pl.c, pl.h / 2
  local _, idx = nn.max_pool2d(x, 2, { return_indices = true })
  local gy = tide.randn(pl.n, pl.c, oh, oh)
  local fwd_bytes = planes * (pl.h * pl.h * 4 + oh * oh * (4 + 8))
  local bwd_bytes = planes * (pl.h * pl.h * 4 + oh * oh * (4 + 8))
  local function r(backward)
    return ref and best_ref(function() return ref.tide_ref_max_pool2x2(planes, pl.h, pl.h, backward, REPS) end)
  end
  row(pl.name .. " fwd", pl.key .. " fwd",
    per_call(function() return nn.max_pool2d(x, 2, { return_indices = true }) end), fwd_bytes, "GB/s   ", r(0))
  row(pl.name .. " bwd", pl.key .. " bwd",
    per_call(function() return nn.max_pool2d_backward(gy, idx, x) end), bwd_bytes, "GB/s   ", r(1))
end
do
  local x = tide.randn(128, 32, 28, 28)
  local gy = tide.randn(128, 32, 14, 14)
  local bytes = 128 * 32 * (28 * 28 + 14 * 14) * 4
  row("avg_pool2d 2x2 [128,32,28,28] fwd", "avgpool fwd", per_call(function() return nn.avg_pool2d(x, 2) end), bytes, "GB/s   ")
  row("avg_pool2d 2x2 [128,32,28,28] bwd", "avgpool bwd",
    per_call(function() return nn.avg_pool2d_backward(gy, x, 2) end), bytes, "GB/s   ")
  local x7 = tide.randn(128, 64, 7, 7)
  local g1 = tide.randn(128, 64, 1, 1)
  local b7 = 128 * 64 * (49 + 1) * 4
  row("adaptive_avg_pool2d [128,64,7,7]->1 fwd", "adaptive fwd",
    per_call(function() return nn.adaptive_avg_pool2d(x7, 1) end), b7, "GB/s   ")
  row("adaptive_avg_pool2d [128,64,7,7]->1 bwd", "adaptive bwd",
    per_call(function() return nn.adaptive_avg_pool2d_backward(g1, x7) end), b7, "GB/s   ")
end

-- conv3d is composed of conv2d (tide.nn.spatial3d: the kD depth slices each
-- output depth reads as channels, one conv2d over a batch of N oD images)
print("3-d convolution, composed (GFLOP/s = 2 N O D H W C 27 / time; fwd+bwd counts 3x)")
do
  local F = require("tide.nn").functional
  local x = tide.randn(8, 16, 16, 32, 32):requires_grad_()
  local w = tide.randn(32, 16, 3, 3, 3):requires_grad_()
  local b = tide.randn(32):requires_grad_()
  local flops = 2 * 8 * 32 * 16 * 32 * 32 * 16 * 27
  local name = "conv3d 16->32 3x3x3 pad 1 [8,16,16,32,32]"
  row(name .. " fwd", "conv3d fwd",
    per_call(function() return tide.no_grad(function() return F.conv3d(x, w, b, { padding = 1 }) end) end), flops, "GFLOP/s")
  row(name .. " fwd+bwd", "conv3d fwdbwd", per_call(function()
    x.grad, w.grad, b.grad = nil, nil, nil
    F.conv3d(x, w, b, { padding = 1 }):sum():backward()
  end), 3 * flops, "GFLOP/s")
end
