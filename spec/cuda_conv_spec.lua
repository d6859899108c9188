-- The convolution kernels on CUDA (libtide_cudnn, runtime/src/cudnn/conv.cpp,
-- over cuDNN) against the CPU's (ops/cpu/conv.c): conv2d with and without a
-- bias, conv2d_backward_input and conv2d_backward_weight, called directly and
-- through autograd, over stride, padding, dilation and groups (depthwise
-- too), in float32, float64, float16 and bfloat16, on inputs and weights that
-- are contiguous, channels last, narrowed, transposed or expanded (the ones
-- cuDNN reads in place and the ones packed first), empty batches, channels
-- and inputs; float32 with TF32 off as close as float32 sums in another order
-- get, and with TF32 on within TF32's precision. Tagged #cuda: where no CUDA
-- device is usable, each case prints why it was skipped
-- (spec/helpers/cuda_compare.lua).
local tide = require "tide"
local nn_ops = require "tide.nn_ops"

local C = require "spec.helpers.cuda_compare"
local on_gpu, same, DEV = C.on_gpu, C.same, C.DEV

local DTYPES = { "float32", "float64", "float16", "bfloat16" }

-- cuDNN sums the C/groups*kH*kW products of a result (N*oH*oW for the
-- weight's gradient) in another order than the CPU, or by another method
-- (Winograd, FFT); half types round their result once more where a bias is
-- added after the convolution.
local TOL = { float32 = 1e-4, float64 = 1e-10, float16 = 1e-2, bfloat16 = 4e-2 }

-- { name, input sizes N,C,H,W, weight sizes O,C/groups,kH,kW, options }
local CASES = {
  { "3x3", { 2, 3, 9, 8 }, { 4, 3, 3, 3 }, {} },
  { "3x3 padding 1", { 2, 3, 9, 8 }, { 4, 3, 3, 3 }, { padding = 1 } },
  { "stride 2, padding 1x2", { 2, 4, 11, 10 }, { 6, 4, 3, 3 }, { stride = 2, padding = { 1, 2 } } },
  { "stride 2x1, dilation 1x2", { 2, 3, 12, 11 }, { 5, 3, 3, 2 }, { stride = { 2, 1 }, padding = 1, dilation = { 1, 2 } } },
  { "1x1", { 3, 8, 5, 6 }, { 4, 8, 1, 1 }, {} },
  { "1x1 stride 2", { 2, 8, 7, 6 }, { 4, 8, 1, 1 }, { stride = 2 } },
  { "5x5 'same'", { 2, 3, 10, 10 }, { 4, 3, 5, 5 }, { padding = "same" } },
  { "groups 2", { 2, 6, 8, 8 }, { 4, 3, 3, 3 }, { groups = 2, padding = 1 } },
  { "depthwise", { 2, 6, 9, 9 }, { 6, 1, 3, 3 }, { groups = 6, padding = 1 } },
  { "depthwise, multiplier 2", { 2, 4, 7, 8 }, { 8, 1, 5, 3 }, { groups = 4, stride = 2, padding = { 2, 1 } } },
  { "kernel the size of the padded input", { 1, 2, 4, 5 }, { 3, 2, 6, 7 }, { padding = 1 } },
  { "one image, one channel", { 1, 1, 6, 6 }, { 1, 1, 3, 3 }, {} },
}

-- Layouts of a 4-d operand of sizes s: the sizes of the (contiguous) tensor to
-- make, and the view of it that has sizes s. The views are taken on the
-- device's own tensor (a copy to the device is contiguous).
local X_LAYOUTS = {
  { "contiguous", function(s) return s end, function(t) return t end },
  { "channels last", function(s) return { s[1], s[3], s[4], s[2] } end, function(t) return t:permute(1, 4, 2, 3) end },
  { "narrowed", function(s) return { s[1], s[2] + 2, s[3] + 3, s[4] + 4 } end,
    function(t, s) return t:narrow(2, 2, s[2]):narrow(3, 3, s[3]):narrow(4, 2, s[4]) end },
  { "transposed", function(s) return { s[1], s[2], s[4], s[3] } end, function(t) return t:transpose(3, 4) end },
  { "expanded", function(s) return { 1, s[2], s[3], s[4] } end, function(t, s) return t:expand(s[1], s[2], s[3], s[4]) end },
}
local W_LAYOUTS = {
  { "contiguous", function(s) return s end, function(t) return t end },
  { "permuted", function(s) return { s[3], s[4], s[2], s[1] } end, function(t) return t:permute(4, 3, 1, 2) end },
}

local seed = 100
local function randn(sizes, dtype)
  seed = seed + 1
  tide.manual_seed(seed)
  return tide.randn(sizes, "float64"):to(dtype or "float64")
end

local function describe_opts(opts)
  local parts = {}
  for k, v in pairs(opts) do parts[#parts + 1] = k .. "=" .. (type(v) == "table" and table.concat(v, "x") or tostring(v)) end
  table.sort(parts)
  return table.concat(parts, " ")
end

-- The largest |c - g| over the elements of c (host) and g (device).
local function max_diff(c, g)
  local a, b, m = C.flat(c), C.flat(g), 0
  for i = 1, #a do m = math.max(m, math.abs(a[i] - b[i])) end
  return m
end

describe("CUDA convolution kernels against the CPU's", function()
  on_gpu("conv2d with and without a bias, every layout and dtype", function()
    for ci, case in ipairs(CASES) do
      local name, xs, ws, opts = case[1], case[2], case[3], case[4]
      for _, dt in ipairs(DTYPES) do
        local bias = ci % 2 == 0 and randn({ ws[1] }, dt) or nil
        for _, xl in ipairs(X_LAYOUTS) do
          for _, wl in ipairs(W_LAYOUTS) do
            local what = ("conv2d %s (%s) of %s input, %s weight, %s%s"):format(name, describe_opts(opts), xl[1], wl[1],
              dt, bias and ", bias" or "")
            C.both_within(TOL, function(xb, wb, b) return nn_ops.conv2d(xl[3](xb, xs), wl[3](wb, ws), b, opts) end,
              what, randn(xl[2](xs), dt), randn(wl[2](ws), dt), bias)
          end
        end
      end
    end
  end)

  on_gpu("conv2d_backward_input and conv2d_backward_weight, called directly", function()
    for _, case in ipairs(CASES) do
      local name, xs, ws, opts = case[1], case[2], case[3], case[4]
      local ys = nn_ops.conv2d(tide.zeros(xs), tide.zeros(ws), nil, opts):shape()
      for _, dt in ipairs(DTYPES) do
        for _, gl in ipairs { X_LAYOUTS[1], X_LAYOUTS[2], X_LAYOUTS[4] } do
          local gy = randn(gl[2](ys), dt)
          for _, wl in ipairs(W_LAYOUTS) do
            local what = ("conv2d_backward_input %s (%s), %s grad_output, %s weight, %s"):format(name,
              describe_opts(opts), gl[1], wl[1], dt)
            C.both_within(TOL, function(g, wb) return nn_ops.conv2d_backward_input(gl[3](g, ys), wl[3](wb, ws), xs, opts) end,
              what, gy, randn(wl[2](ws), dt))
          end
          for _, xl in ipairs(X_LAYOUTS) do
            local what = ("conv2d_backward_weight %s (%s), %s grad_output, %s input, %s"):format(name,
              describe_opts(opts), gl[1], xl[1], dt)
            C.both_within(TOL, function(g, xb) return nn_ops.conv2d_backward_weight(gl[3](g, ys), xl[3](xb, xs), ws, opts) end,
              what, gy, randn(xl[2](xs), dt))
          end
        end
      end
    end
  end)

  on_gpu("gradients through autograd", function()
    for _, case in ipairs { CASES[2], CASES[4], CASES[8], CASES[10] } do
      local name, xs, ws, opts = case[1], case[2], case[3], case[4]
      for _, dt in ipairs { "float32", "float64", "float16" } do
        local x, w, b = randn(xs, dt), randn(ws, dt), randn({ ws[1] }, dt)
        local gy = randn(nn_ops.conv2d(x, w, b, opts):shape(), dt)
        local function grads(dev)
          local xd, wd, bd = x:to(dev):detach():requires_grad_(), w:to(dev):detach():requires_grad_(),
            b:to(dev):detach():requires_grad_()
          local y = nn_ops.conv2d(xd, wd, bd, opts)
          y:backward(gy:to(dev))
          return xd.grad, wd.grad, bd.grad
        end
        local cx, cw, cb = grads("cpu")
        local gx, gw, gb = grads(DEV)
        local what = ("conv2d %s (%s) through autograd, %s"):format(name, describe_opts(opts), dt)
        same(cx, gx, what .. ": input's gradient", TOL)
        same(cw, gw, what .. ": weight's gradient", TOL)
        same(cb, gb, what .. ": bias's gradient", TOL)
      end
    end
  end)

  on_gpu("empty batches, channels and inputs", function()
    for _, dt in ipairs(DTYPES) do
      local function both(f, what, ...) C.both_within(TOL, f, what .. " " .. dt, ...) end
      local conv = nn_ops.conv2d
      -- an empty batch: an empty result, and a weight gradient of zeros
      both(function(x, w) return conv(x, w, nil, { padding = 1 }) end, "conv2d of an empty batch",
        tide.zeros({ 0, 3, 5, 5 }, dt), randn({ 4, 3, 3, 3 }, dt))
      both(function(g, w) return nn_ops.conv2d_backward_input(g, w, { 0, 3, 5, 5 }, { padding = 1 }) end,
        "conv2d_backward_input of an empty batch", tide.zeros({ 0, 4, 5, 5 }, dt), randn({ 4, 3, 3, 3 }, dt))
      both(function(g, x) return nn_ops.conv2d_backward_weight(g, x, { 4, 3, 3, 3 }, { padding = 1 }) end,
        "conv2d_backward_weight of an empty batch", tide.zeros({ 0, 4, 5, 5 }, dt), tide.zeros({ 0, 3, 5, 5 }, dt))
      -- no input channels: the bias, or zeros
      both(function(x, w, b) return conv(x, w, b) end, "conv2d without input channels, bias",
        tide.zeros({ 2, 0, 5, 5 }, dt), tide.zeros({ 3, 0, 3, 3 }, dt), randn({ 3 }, dt))
      both(function(x, w) return conv(x, w) end, "conv2d without input channels",
        tide.zeros({ 2, 0, 5, 5 }, dt), tide.zeros({ 3, 0, 3, 3 }, dt))
      -- an input of no rows, all padding
      both(function(x, w, b) return conv(x, w, b, { padding = 1 }) end, "conv2d of an input of no rows, bias",
        tide.zeros({ 2, 2, 0, 3 }, dt), randn({ 3, 2, 1, 1 }, dt), randn({ 3 }, dt))
      -- no output channels: an empty result, and an input gradient of zeros
      both(function(x, w) return conv(x, w) end, "conv2d without output channels",
        randn({ 2, 3, 5, 5 }, dt), tide.zeros({ 0, 3, 3, 3 }, dt))
      both(function(g, w) return nn_ops.conv2d_backward_input(g, w, { 2, 3, 5, 5 }) end,
        "conv2d_backward_input without output channels", tide.zeros({ 2, 0, 3, 3 }, dt), tide.zeros({ 0, 3, 3, 3 }, dt))
    end
  end)

  on_gpu("float32 with TF32 off as close as float32 sums get; with TF32 on within TF32's precision", function()
    local xs, ws, opts = { 4, 64, 16, 16 }, { 32, 64, 3, 3 }, { padding = 1 }
    local x, w = randn(xs, "float32"), randn(ws, "float32")
    local gy = randn({ 4, 32, 16, 16 }, "float32")
    local ops = {
      { "conv2d", function(a, b) return nn_ops.conv2d(a, b, nil, opts) end, x, w, ws[2] * ws[3] * ws[4] },
      { "conv2d_backward_input", function(g, b) return nn_ops.conv2d_backward_input(g, b, xs, opts) end, gy, w,
        ws[1] * ws[3] * ws[4] },
      { "conv2d_backward_weight", function(g, a) return nn_ops.conv2d_backward_weight(g, a, ws, opts) end, gy, x,
        xs[1] * xs[3] * xs[4] },
    }
    local prev = tide.cuda.allow_tf32()
    local ok, err = pcall(function()
      for _, op in ipairs(ops) do
        local name, f, a, b, k = op[1], op[2], op[3], op[4], op[5]
        local c = f(a, b)
        -- float32 sums of k products of unit size: partial sums grow like
        -- sqrt(k), each addition rounds by 2^-24 of one, and the errors add
        -- up like a random walk: about 2^-24 k, in any order of summation
        -- (seen on an H100: 1.2e-4 at k = 1024); TF32 is off by far more
        tide.cuda.set_allow_tf32(false)
        local g = f(a:to(DEV), b:to(DEV))
        same(c, g, name .. " with TF32 off", 1e-2)
        local d0 = max_diff(c, g)
        assert.is_true(d0 < 16 * 2 ^ -24 * k, ("%s with TF32 off: off by %g"):format(name, d0))
        -- TF32 keeps 10 bits of each factor: errors of about 2^-11 of a
        -- product, which add up over k products like a random walk
        tide.cuda.set_allow_tf32(true)
        local d = max_diff(c, f(a:to(DEV), b:to(DEV)))
        assert.is_true(d < 0.05 * math.sqrt(k), ("%s with TF32 on: off by %g"):format(name, d))
      end
    end)
    tide.cuda.set_allow_tf32(prev)
    assert(ok, err)
  end)

  on_gpu("a forward call after a change of layout takes the new one (the algorithm cache)", function()
    -- the same sizes in three layouts, twice over: each layout its own choice
    local xs, ws, opts = { 2, 8, 12, 12 }, { 8, 8, 3, 3 }, { padding = 1 }
    for round = 1, 2 do
      for _, xl in ipairs { X_LAYOUTS[1], X_LAYOUTS[2], X_LAYOUTS[3] } do
        C.both_within(TOL, function(xb, wb) return nn_ops.conv2d(xl[3](xb, xs), wb, nil, opts) end,
          ("round %d, %s input"):format(round, xl[1]), randn(xl[2](xs), "float32"), randn(ws, "float32"))
      end
    end
  end)
end)
