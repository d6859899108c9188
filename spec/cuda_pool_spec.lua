-- The pooling kernels of libtide_cuda (runtime/src/cuda/pool.cu) against the
-- CPU's (ops/cpu/pool.c): max_pool2d (values, and indices compared exactly,
-- ties and NaN included), avg_pool2d, adaptive_avg_pool2d and their backward
-- ops, in float32, float64, float16 and bfloat16, on contiguous, permuted,
-- narrowed and transposed inputs, 4-d and 3-d, with padding, stride,
-- dilation, ceil_mode, count_include_pad off, divisor_override, overlapping
-- windows (the backward ops' collisions) and empty batches; the backward ops
-- called directly and through autograd. Tagged #cuda: where no CUDA device is
-- usable, each case prints why it was skipped (spec/helpers/cuda_compare.lua).
local tide = require "tide"
local nn_ops = require "tide.nn_ops"

local C = require "spec.helpers.cuda_compare"
local on_gpu, same, DEV = C.on_gpu, C.same, C.DEV
local F = tide.nn.functional

local DTYPES = { "float32", "float64", "float16", "bfloat16" }

-- Host inputs [N, C, H, W] (or [C, H, W]) in every layout, as float64 (converted per dtype by the caller).
local function inputs()
  tide.manual_seed(7)
  local nan, inf = 0 / 0, math.huge
  -- NaN, infinities and signed zeros, some windows all -inf
  local special = tide.randn(1, 2, 6, 7, "float64"):totable()
  local row = { nan, -inf, inf, -0.0, 0.0, 1, nan }
  for w = 1, 7 do special[1][1][2][w] = row[w] end
  for h = 4, 6 do for w = 1, 4 do special[1][2][h][w] = -inf end end
  special = tide.tensor(special, "float64")
  return {
    contiguous = tide.randn(2, 3, 7, 6, "float64"):mul(3),
    ties = tide.randn(2, 3, 7, 6, "float64"):mul(1.5):round(),   -- equal maxima in most windows
    channels_last = tide.randn(2, 7, 6, 3, "float64"):permute(1, 4, 2, 3),
    narrowed = tide.randn(2, 4, 10, 9, "float64"):narrow(2, 2, 3):narrow(3, 2, 7):narrow(4, 3, 6),
    transposed = tide.randn(2, 3, 6, 7, "float64"):transpose(3, 4),
    special = special,
    unbatched = tide.randn(3, 7, 6, "float64"):round(),       -- 3-d: F runs it as a batch of one
    big = tide.randn(3, 5, 33, 40, "float64"),                  -- planes of more than 32 outputs
    empty = tide.zeros({ 0, 3, 7, 6 }, "float64"),
  }
end

local function with(opts, extra)
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  for k, v in pairs(extra) do o[k] = v end
  return o
end

local MAX = {
  { 2, {} },
  { 3, { stride = 1 } },                                           -- overlapping: collisions in backward
  { 3, { stride = 2, padding = 1 } },
  { { 2, 3 }, { stride = { 1, 2 }, padding = { 1, 1 }, dilation = { 2, 1 } } },
  { 3, { stride = 2, ceil_mode = true } },
  { 2, { stride = 2, padding = 1, ceil_mode = true } },
  { 3, { stride = 1, padding = 1, dilation = 2 } },
}

local AVG = {
  { 2, {} },
  { 3, { stride = 1 } },
  { 3, { stride = 2, padding = 1 } },
  { 3, { stride = 2, padding = 1, count_include_pad = false } },
  { 3, { stride = 2, padding = 1, ceil_mode = true } },
  { 3, { stride = 2, padding = 1, ceil_mode = true, count_include_pad = false } },
  { 2, { stride = 1, divisor_override = 3 } },
  { { 3, 2 }, { stride = { 2, 1 }, padding = { 1, 0 }, ceil_mode = true } },
}

local ADAPTIVE = { 1, { 3, 4 }, { 5, 2 }, { 7, 6 }, { 10, 9 } }

local function describe_opts(k, opts)
  local parts = { "k=" .. (type(k) == "table" and table.concat(k, "x") or k) }
  for key, v in pairs(opts) do
    parts[#parts + 1] = key .. "=" .. (type(v) == "table" and table.concat(v, "x") or tostring(v))
  end
  table.sort(parts)
  return table.concat(parts, " ")
end

-- Gradients of the result: non-integer, so that the order of the sums shows.
local function grad_for(y, dtype)
  tide.manual_seed(y:numel() + 1)
  return tide.randn(y:shape(), "float64"):to(dtype)
end

-- The 4-d sizes of x (a batch of one for a 3-d x), for the backward ops.
local function sizes4(x)
  local s = x:shape()
  if #s == 3 then return { 1, s[1], s[2], s[3] } end
  return s
end

local function as4(t) return t:dim() == 3 and t:unsqueeze(1) or t end

describe("CUDA pooling kernels against the CPU's", function()
  on_gpu("max_pool2d: values and indices, exactly", function()
    for _, dt in ipairs(DTYPES) do
      for lname, base in pairs(inputs()) do
        local x = base:to(dt)
        for _, case in ipairs(MAX) do
          local k, opts = case[1], with(case[2], { return_indices = true })
          local what = ("max_pool2d %s of %s %s"):format(describe_opts(k, case[2]), lname, dt)
          local ok = pcall(F.max_pool2d, x, k, opts)
          if ok then   -- some windows do not fit the smaller inputs
            local cy, ci = F.max_pool2d(x, k, opts)
            local gy, gi = F.max_pool2d(x:to(DEV), k, opts)
            same(cy, gy, what .. " values")
            same(ci, gi, what .. " indices")
          end
        end
      end
    end
  end)

  on_gpu("max_pool2d_backward: gradients scattered to the maxima, collisions summed", function()
    for _, dt in ipairs(DTYPES) do
      for lname, base in pairs(inputs()) do
        local x = base:to(dt)
        for _, case in ipairs(MAX) do
          local k, opts = case[1], with(case[2], { return_indices = true })
          local what = ("max_pool2d_backward %s of %s %s"):format(describe_opts(k, case[2]), lname, dt)
          if pcall(F.max_pool2d, x, k, opts) then
            local _, idx = F.max_pool2d(x, k, opts)
            local gy, s = as4(grad_for(idx, dt)), sizes4(x)
            idx = as4(idx)
            -- the same indices on both devices, then non-contiguous ones
            C.both(function(g, i) return nn_ops.max_pool2d_backward(g, i, s) end, what, gy, idx)
            C.both(function(g, i) return nn_ops.max_pool2d_backward(g, i, s) end, what .. " (transposed grads)",
              gy:transpose(3, 4):contiguous():transpose(3, 4), idx:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3))
          end
        end
      end
    end
  end)

  on_gpu("max_pool2d_backward reports an index out of range", function()
    local gy = tide.ones(1, 1, 2, 2)
    local idx = tide.tensor({ { { { 1, 2 }, { 3, 17 } } } }, "int64")   -- a 4x4 plane has 16 positions
    for _, dev in ipairs { "cpu", DEV } do
      local ok, err = pcall(function()
        return nn_ops.max_pool2d_backward(gy:to(dev), idx:to(dev), { 1, 1, 4, 4 }):to("cpu"):totable()
      end)
      tide.sync()   -- the read raised the failure: not again
      assert.is_false(ok, dev)
      assert.is_truthy(tostring(err):find("max_pool2d_backward: index 17 is out of range for an input plane of 4x4", 1, true),
        tostring(err))
    end
    -- the device stays usable after the error
    same(nn_ops.max_pool2d_backward(gy, idx:clamp(1, 16), { 1, 1, 4, 4 }),
      nn_ops.max_pool2d_backward(gy:to(DEV), idx:clamp(1, 16):to(DEV), { 1, 1, 4, 4 }), "after the error")
  end)

  on_gpu("avg_pool2d and its backward", function()
    for _, dt in ipairs(DTYPES) do
      for lname, base in pairs(inputs()) do
        local x = base:to(dt)
        for _, case in ipairs(AVG) do
          local k, opts = case[1], case[2]
          local what = ("avg_pool2d %s of %s %s"):format(describe_opts(k, opts), lname, dt)
          if pcall(F.avg_pool2d, x, k, opts) then
            C.both(function(t) return F.avg_pool2d(t, k, opts) end, what, x)
            local gy, s = as4(grad_for(F.avg_pool2d(x, k, opts), dt)), sizes4(x)
            C.both(function(g) return nn_ops.avg_pool2d_backward(g, s, k, opts) end, what .. " backward", gy)
            C.both(function(g) return nn_ops.avg_pool2d_backward(g, s, k, opts) end, what .. " backward (transposed)",
              gy:transpose(3, 4):contiguous():transpose(3, 4))
          end
        end
      end
    end
  end)

  on_gpu("adaptive_avg_pool2d and its backward", function()
    for _, dt in ipairs(DTYPES) do
      for lname, base in pairs(inputs()) do
        local x = base:to(dt)
        for _, out in ipairs(ADAPTIVE) do
          local what = ("adaptive_avg_pool2d to %s of %s %s"):format(
            type(out) == "table" and table.concat(out, "x") or out, lname, dt)
          C.both(function(t) return F.adaptive_avg_pool2d(t, out) end, what, x)
          local gy, s = as4(grad_for(F.adaptive_avg_pool2d(x, out), dt)), sizes4(x)
          C.both(function(g) return nn_ops.adaptive_avg_pool2d_backward(g, s) end, what .. " backward", gy)
          C.both(function(g) return nn_ops.adaptive_avg_pool2d_backward(g, s) end, what .. " backward (permuted)",
            gy:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3))
        end
      end
    end
  end)

  on_gpu("gradients through autograd", function()
    local L = inputs()
    for _, dt in ipairs { "float32", "float64", "float16" } do
      for _, lname in ipairs { "contiguous", "ties", "channels_last", "unbatched" } do
        for name, f in pairs {
          max = function(t) return F.max_pool2d(t, 3, { stride = 1, padding = 1 }) end,
          avg = function(t) return F.avg_pool2d(t, 3, { stride = 2, padding = 1, count_include_pad = false }) end,
          adaptive = function(t) return F.adaptive_avg_pool2d(t, { 4, 3 }) end,
        } do
          local what = ("%s pool through autograd, %s %s"):format(name, lname, dt)
          local function grad_on(dev)
            local x = L[lname]:to(dt):to(dev):detach():requires_grad_()
            local y = f(x)
            y:backward(grad_for(y, dt):to(dev))
            return x.grad
          end
          same(grad_on("cpu"), grad_on(DEV), what)
        end
      end
    end
  end)
end)
