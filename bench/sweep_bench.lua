-- sweep_bench.lua: the time of many ops, forward and forward+backward, each
-- next to a copy of the same tensor in the same run (`clone`), so that a kernel
-- that falls far behind the memory it touches shows: a branch per element where
-- a select would do, a scalar library call per element, a gather that thrashes
-- the cache. Such outliers were masked_fill at 18x a copy, softmax at 17x,
-- batch_norm at 15x and gelu's backward at 8x relu's (all fixed 2026-11-27).
-- Memory-bound ops should stay within a few copies; the column says how many.
-- Ops that compute a lot per element (sin, atan2) or move data at random
-- (gather, scatter_add) run slower by nature, and are listed for the record.
-- usage: build/tide bench/sweep_bench.lua [device]   (default: the default device)
local tide = require "tide"
local F = tide.nn.functional
local common = dofile((debug.getinfo(1, "S").source:sub(2):match("^(.*)/") or ".") .. "/common.lua")

local dev = arg[1] or tide.get_default_device()
local o = { device = dev }

-- The best of `reps` runs of f (each waited for), in ms.
local function best(f, reps) return common.best_ms(f, reps or 7) end

print(string.format("machine: %s, %d threads, device %s", common.cpu_model(), tide.get_num_threads(), dev))

-- -- elementwise and reductions over 4M float32s -----------------------------------------------
local N = 4194304
tide.manual_seed(0)
local x, y = tide.randn(N, o), tide.randn(N, o)
local p = x:abs() + 0.5
local m = x:gt(0)
local x2 = x:view(2048, 2048)
local xi = tide.randint(-100, 100, { N }, { dtype = "int32", device = dev })
local copy = best(function() return x:clone() end)
print(string.format("\n(a) %d float32s; a copy (clone) takes %.3f ms", N, copy))
print(string.format("    %-22s %9s %9s", "op", "ms", "x copy"))
local cases = {
  { "add", function() return x + y end },
  { "x - row (broadcast)", function() return x2 - x2[1] end },
  { "mul by scalar", function() return x * 3 end },
  { "gt", function() return x:gt(y) end },
  { "relu", function() return x:relu() end },
  { "clamp", function() return x:clamp(-0.5, 0.5) end },
  { "masked_fill", function() return x:masked_fill(m, 0) end },
  { "where", function() return tide.where(m, x, y) end },
  { "exp", function() return x:exp() end },
  { "log", function() return p:log() end },
  { "tanh", function() return x:tanh() end },
  { "sigmoid", function() return x:sigmoid() end },
  { "gelu", function() return x:gelu() end },
  { "sin", function() return x:sin() end },
  { "pow 2", function() return x:pow(2) end },
  { "atan2", function() return x:atan2(y) end },
  { "to float16", function() return x:to("float16") end },
  { "to bfloat16", function() return x:to("bfloat16") end },
  { "to int32", function() return x:to("int32") end },
  { "int32 to float32", function() return xi:to("float32") end },
  { "arange int64", function() return tide.arange(N, o) end },
  { "sum", function() return x:sum() end },
  { "mean over rows", function() return x2:mean(2) end },
  { "sum over columns", function() return x2:sum(1) end },
  { "amax", function() return x:amax() end },
  { "argmax over rows", function() return x2:argmax(2) end },
  { "cumsum", function() return x:cumsum(1) end },
  { "softmax over rows", function() return x2:softmax(2) end },
  { "log_softmax over rows", function() return x2:log_softmax(2) end },
  { "transposing copy", function() return x2:t():contiguous() end },
  { "rand", function() return tide.rand(N, o) end },
  { "randn", function() return tide.randn(N, o) end },
}
for _, c in ipairs(cases) do
  local ms = best(c[2])
  print(string.format("    %-22s %9.3f %9.1f", c[1], ms, ms / copy))
end

-- -- training paths: forward+backward, next to relu's --------------------------------------------
local a = tide.randn(512, 1024, o)
local g = tide.randn(512, 1024, o)
local img = tide.randn(64, 32, 28, 28, o)
local gi = tide.randn(64, 32, 28, 28, o)
local rm, rv = tide.zeros(32, o), tide.ones(32, o)
local w, b = tide.ones(32, o), tide.zeros(32, o)
local function fb(t, gy, f)
  return function()
    local v = t:detach():requires_grad_()
    f(v):backward(gy)
  end
end
local relu_a = best(fb(a, g, function(v) return v:relu() end))
local relu_i = best(fb(img, gi, function(v) return v:relu() end))
print(string.format("\n(b) forward + backward; relu takes %.3f ms on [512,1024] and %.3f ms on [64,32,28,28]",
  relu_a, relu_i))
print(string.format("    %-22s %9s %9s", "op", "ms", "x relu"))
local train = {
  { "gelu", a, g, function(v) return F.gelu(v) end },
  { "gelu tanh", a, g, function(v) return F.gelu(v, "tanh") end },
  { "silu", a, g, function(v) return F.silu(v) end },
  { "softmax", a, g, function(v) return v:softmax(2) end },
  { "log_softmax", a, g, function(v) return v:log_softmax(2) end },
  { "layer_norm", a, g, function(v) return F.layer_norm(v, { 1024 }) end },
  { "dropout", a, g, function(v) return F.dropout(v, 0.3, true) end },
  { "batch_norm (train)", img, gi, function(v) return F.batch_norm(v, rm, rv, w, b, true) end },
  { "max_pool2d 2x2", img, nil, function(v) return F.max_pool2d(v, 2):sum() end },
  { "avg_pool2d 2x2", img, nil, function(v) return F.avg_pool2d(v, 2):sum() end },
}
for _, c in ipairs(train) do
  local ms = best(fb(c[2], c[3], c[4]))
  print(string.format("    %-22s %9.3f %9.1f", c[1], ms, ms / (c[2] == a and relu_a or relu_i)))
end
