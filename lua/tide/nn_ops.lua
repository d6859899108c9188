--- tide.nn_ops: the Lua functions of the convolution and pooling ops of the
-- runtime's registry (conv.c, pool.c) and of their backward ops, which the
-- autograd rules call. Tensors are NCHW; sizes, strides, paddings and
-- dilations are a number or a table {h, w}; no dims are involved. Indices of
-- max_pool2d are 1-based here (flat (h-1)*W + w within each input plane).
-- Layers (nn.Conv2d & co.) and gradients belong to nn/ and autograd, not here.
local B = require "bindings.ffi"
local args = require "tide.args"
local T = require "tide.tensor"

local fail, C = B.fail, B.C
local run, new_params, ins_set, op_ids, is_tensor = T.run, T.new_params, T.ins_set, T.op_ids, T.is_tensor
local ONE_BASED = C.TIDE_PARAMF_ONE_BASED

local M = {}

-- -- arguments ---------------------------------------------------------------------

local is_int, options = args.is_int, args.options

local function need_tensor(x, name, pos, what)
  if not is_tensor(x) then
    fail(string.format("%s: argument %d (%s) must be a tensor, got %s", name, pos, what, type(x)))
  end
end

--- h, w of a number or a table {h, w} (v nil: default).
local function pair(v, name, what, default)
  if v == nil then v = default end
  if type(v) == "number" then v = { v, v } end
  if type(v) ~= "table" or #v ~= 2 then
    fail(string.format("%s: %s must be a number or a table {h, w}, got %s", name, what,
      type(v) == "table" and ("a table of " .. #v) or type(v)))
  end
  if not is_int(v[1]) or not is_int(v[2]) then
    fail(string.format("%s: %s must be integers, got {%s, %s}", name, what, tostring(v[1]), tostring(v[2])))
  end
  return v[1], v[2]
end

--- The 4 sizes of a tensor the op does not get: a table {N, C, H, W} or a tensor of that shape.
local function sizes4(s, name, what)
  if is_tensor(s) then s = s:shape() end
  if type(s) ~= "table" or #s ~= 4 then
    fail(string.format("%s: %s must be a table of 4 sizes or a 4-d tensor, got %s", name, what,
      type(s) == "table" and ("a table of " .. #s) or type(s)))
  end
  for i = 1, 4 do
    if not is_int(s[i]) then fail(string.format("%s: %s must be integers, got %s", name, what, tostring(s[i]))) end
  end
  return s
end

local function put(p, i, ...)
  for k = 1, select("#", ...) do p.ints[i + k - 1] = (select(k, ...)) end
  return i + select("#", ...)
end

-- -- convolution -----------------------------------------------------------------------

local CONV_OPTS = { stride = true, padding = true, dilation = true, groups = true }

--- Params of conv2d (ints 0..6) from opts; kh, kw (the kernel) resolve padding = "same".
local function conv_params(name, opts, kh, kw)
  opts = options(opts, name, CONV_OPTS)
  local sh, sw = pair(opts.stride, name, "stride", 1)
  local dh, dw = pair(opts.dilation, name, "dilation", 1)
  local pad, ph, pw = opts.padding
  if pad == "valid" then
    ph, pw = 0, 0
  elseif pad == "same" then
    -- PyTorch pads d*(k-1) in total; an odd total would need more on one side
    if sh ~= 1 or sw ~= 1 then
      fail(string.format("%s: padding='same' needs stride 1, got {%d, %d}", name, sh, sw))
    end
    local th, tw = dh * (kh - 1), dw * (kw - 1)
    if th % 2 ~= 0 or tw % 2 ~= 0 then
      fail(string.format("%s: padding='same' with kernel %dx%d and dilation %dx%d would pad one side more than the other, which is not supported",
        name, kh, kw, dh, dw))
    end
    ph, pw = th / 2, tw / 2
  else
    ph, pw = pair(pad, name, "padding", 0)
  end
  local groups = opts.groups == nil and 1 or opts.groups
  if not is_int(groups) then fail(string.format("%s: groups must be an integer, got %s", name, tostring(groups))) end
  local p = new_params()
  p.n_ints = put(p, 0, sh, sw, ph, pw, dh, dw, groups)
  return p
end

--- 2-d convolution (cross-correlation, as PyTorch's conv2d).
-- @param x input [N, C, H, W]
-- @param w weight [O, C/groups, kH, kW]
-- @param b bias [O], or nil
-- @param opts {stride=1, padding=0 (or "valid", "same"), dilation=1, groups=1}; each a number or {h, w}
-- @return [N, O, oH, oW], oH = floor((H + 2 padding - dilation (kH - 1) - 1) / stride) + 1
-- @usage local y = nn_ops.conv2d(x, w, b, { padding = 1 })
function M.conv2d(x, w, b, opts)
  need_tensor(x, "conv2d", 1, "input")
  need_tensor(w, "conv2d", 2, "weight")
  if b ~= nil then need_tensor(b, "conv2d", 3, "bias") end
  local p = conv_params("conv2d", opts, w.ndim == 4 and tonumber(w.sizes[2]) or 1,
    w.ndim == 4 and tonumber(w.sizes[3]) or 1)
  ins_set(0, x)
  ins_set(1, w)
  if b ~= nil then ins_set(2, b) end
  return run(op_ids.conv2d, b ~= nil and 3 or 2, p, nil)
end

--- The gradient of conv2d's input.
-- @param gy the gradient of conv2d's result [N, O, oH, oW]
-- @param w the weight conv2d was given
-- @param input_size the input's sizes {N, C, H, W} (or the input itself)
-- @param opts conv2d's options
-- @return [N, C, H, W]
-- @usage local gx = nn_ops.conv2d_backward_input(gy, w, x:shape(), { padding = 1 })
function M.conv2d_backward_input(gy, w, input_size, opts)
  need_tensor(gy, "conv2d_backward_input", 1, "grad_output")
  need_tensor(w, "conv2d_backward_input", 2, "weight")
  local s = sizes4(input_size, "conv2d_backward_input", "input_size")
  local p = conv_params("conv2d_backward_input", opts, w.ndim == 4 and tonumber(w.sizes[2]) or 1,
    w.ndim == 4 and tonumber(w.sizes[3]) or 1)
  p.n_ints = put(p, 7, s[1], s[2], s[3], s[4])
  ins_set(0, gy)
  ins_set(1, w)
  return run(op_ids.conv2d_backward_input, 2, p, nil)
end

--- The gradient of conv2d's weight.
-- @param gy the gradient of conv2d's result [N, O, oH, oW]
-- @param x the input conv2d was given
-- @param weight_size the weight's sizes {O, C/groups, kH, kW} (or the weight itself)
-- @param opts conv2d's options
-- @return [O, C/groups, kH, kW]
-- @usage local gw = nn_ops.conv2d_backward_weight(gy, x, w:shape(), { padding = 1 })
function M.conv2d_backward_weight(gy, x, weight_size, opts)
  need_tensor(gy, "conv2d_backward_weight", 1, "grad_output")
  need_tensor(x, "conv2d_backward_weight", 2, "input")
  local s = sizes4(weight_size, "conv2d_backward_weight", "weight_size")
  local p = conv_params("conv2d_backward_weight", opts, s[3], s[4])
  p.n_ints = put(p, 7, s[1], s[2], s[3], s[4])
  ins_set(0, gy)
  ins_set(1, x)
  return run(op_ids.conv2d_backward_weight, 2, p, nil)
end

--- The gradient of conv2d's bias: gy summed over N, oH and oW.
-- @param gy the gradient of conv2d's result [N, O, oH, oW]
-- @return [O]
-- @usage local gb = nn_ops.conv2d_backward_bias(gy)
function M.conv2d_backward_bias(gy)
  need_tensor(gy, "conv2d_backward_bias", 1, "grad_output")
  return T.functions.sum(gy, { 1, 3, 4 })
end

-- -- pooling ----------------------------------------------------------------------------

local MAX_OPTS = { stride = true, padding = true, dilation = true, ceil_mode = true, return_indices = true }
local AVG_OPTS = { stride = true, padding = true, ceil_mode = true, count_include_pad = true, divisor_override = true }

local function max_params(name, kernel, opts)
  opts = options(opts, name, MAX_OPTS)
  local kh, kw = pair(kernel, name, "kernel_size")
  local sh, sw = pair(opts.stride, name, "stride", { kh, kw })
  local ph, pw = pair(opts.padding, name, "padding", 0)
  local dh, dw = pair(opts.dilation, name, "dilation", 1)
  local p = new_params()
  p.n_ints = put(p, 0, kh, kw, sh, sw, ph, pw, dh, dw, opts.ceil_mode and 1 or 0)
  p.flags = ONE_BASED
  return p, opts.return_indices
end

--- 2-d max pooling.
-- @param x input [N, C, H, W]
-- @param kernel the window, a number or {h, w}
-- @param opts {stride=kernel, padding=0 (at most half the kernel), dilation=1, ceil_mode=false, return_indices=false}
-- @return the maxima [N, C, oH, oW]; with return_indices, also their 1-based positions (int64) within each input plane
-- @usage local y, idx = nn_ops.max_pool2d(x, 2, { return_indices = true })
function M.max_pool2d(x, kernel, opts)
  need_tensor(x, "max_pool2d", 1, "input")
  local p, with_indices = max_params("max_pool2d", kernel, opts)
  ins_set(0, x)
  local y, idx = run(op_ids.max_pool2d, 1, p, nil)
  if with_indices then return y, idx end
  return y
end

--- The gradient of max_pool2d's input: each gradient goes to the position its maximum came from.
-- @param gy the gradient of max_pool2d's result [N, C, oH, oW]
-- @param indices what max_pool2d returned with return_indices (1-based)
-- @param input_size the input's sizes {N, C, H, W} (or the input itself)
-- @return [N, C, H, W]
-- @usage local gx = nn_ops.max_pool2d_backward(gy, idx, x:shape())
function M.max_pool2d_backward(gy, indices, input_size)
  need_tensor(gy, "max_pool2d_backward", 1, "grad_output")
  need_tensor(indices, "max_pool2d_backward", 2, "indices")
  local s = sizes4(input_size, "max_pool2d_backward", "input_size")
  local p = new_params()
  p.n_ints = put(p, 0, s[1], s[2], s[3], s[4])
  p.flags = ONE_BASED
  ins_set(0, gy)
  ins_set(1, indices)
  return run(op_ids.max_pool2d_backward, 2, p, nil)
end

local function avg_params(name, kernel, opts)
  opts = options(opts, name, AVG_OPTS)
  local kh, kw = pair(kernel, name, "kernel_size")
  local sh, sw = pair(opts.stride, name, "stride", { kh, kw })
  local ph, pw = pair(opts.padding, name, "padding", 0)
  local div = opts.divisor_override
  if div ~= nil and (not is_int(div) or div == 0) then
    fail(string.format("%s: divisor_override must be a nonzero integer, got %s", name, tostring(div)))
  end
  local p = new_params()
  p.n_ints = put(p, 0, kh, kw, sh, sw, ph, pw, opts.ceil_mode and 1 or 0,
    opts.count_include_pad == false and 0 or 1, div or 0)
  return p
end

--- 2-d average pooling.
-- @param x input [N, C, H, W]
-- @param kernel the window, a number or {h, w}
-- @param opts {stride=kernel, padding=0 (at most half the kernel), ceil_mode=false, count_include_pad=true, divisor_override=nil}
-- @return [N, C, oH, oW]
-- @usage local y = nn_ops.avg_pool2d(x, 3, { stride = 2, padding = 1 })
function M.avg_pool2d(x, kernel, opts)
  need_tensor(x, "avg_pool2d", 1, "input")
  local p = avg_params("avg_pool2d", kernel, opts)
  ins_set(0, x)
  return run(op_ids.avg_pool2d, 1, p, nil)
end

--- The gradient of avg_pool2d's input.
-- @param gy the gradient of avg_pool2d's result [N, C, oH, oW]
-- @param input_size the input's sizes {N, C, H, W} (or the input itself)
-- @param kernel, opts avg_pool2d's
-- @return [N, C, H, W]
-- @usage local gx = nn_ops.avg_pool2d_backward(gy, x:shape(), 3, { stride = 2, padding = 1 })
function M.avg_pool2d_backward(gy, input_size, kernel, opts)
  need_tensor(gy, "avg_pool2d_backward", 1, "grad_output")
  local s = sizes4(input_size, "avg_pool2d_backward", "input_size")
  local p = avg_params("avg_pool2d_backward", kernel, opts)
  p.n_ints = put(p, 9, s[1], s[2], s[3], s[4])
  ins_set(0, gy)
  return run(op_ids.avg_pool2d_backward, 1, p, nil)
end

--- 2-d adaptive average pooling: window i of an axis covers [floor((i-1) in / out), ceil(i in / out)).
-- @param x input [N, C, H, W]
-- @param output_size a number or {h, w}
-- @return [N, C, h, w]
-- @usage local y = nn_ops.adaptive_avg_pool2d(x, 1)   -- global average pooling
function M.adaptive_avg_pool2d(x, output_size)
  need_tensor(x, "adaptive_avg_pool2d", 1, "input")
  local oh, ow = pair(output_size, "adaptive_avg_pool2d", "output_size")
  local p = new_params()
  p.n_ints = put(p, 0, oh, ow)
  ins_set(0, x)
  return run(op_ids.adaptive_avg_pool2d, 1, p, nil)
end

--- The gradient of adaptive_avg_pool2d's input.
-- @param gy the gradient of adaptive_avg_pool2d's result [N, C, h, w]
-- @param input_size the input's sizes {N, C, H, W} (or the input itself)
-- @return [N, C, H, W]
-- @usage local gx = nn_ops.adaptive_avg_pool2d_backward(gy, x:shape())
function M.adaptive_avg_pool2d_backward(gy, input_size)
  need_tensor(gy, "adaptive_avg_pool2d_backward", 1, "grad_output")
  local s = sizes4(input_size, "adaptive_avg_pool2d_backward", "input_size")
  local p = new_params()
  p.n_ints = put(p, 0, s[1], s[2], s[3], s[4])
  ins_set(0, gy)
  return run(op_ids.adaptive_avg_pool2d_backward, 1, p, nil)
end

return M
