--- tide.nn.init: the weight initialisations of torch.nn.init, with the same
-- formulas (fans, gains, bounds), drawn from tide's generator so that
-- tide.manual_seed makes them reproducible. Every function fills its tensor in
-- place without recording gradients and returns it. The layers' own defaults
-- (reset_parameters) are in tide.nn; reset_linear_ is the one Linear and the
-- convolutions share.
-- One instance per Lua state, like tide.nn itself (busted resets package.loaded between files).
do local nn = debug.getregistry()["tide.nn"]; if nn then return nn.init end end
local B = require "bindings.ffi"
local T = require "tide.tensor"
local autograd = require "tide.autograd"
local fail = B.fail
local is_tensor = T.is_tensor
local no_grad = autograd.no_grad

local init = {}

local function need_tensor(t, name)
  if not is_tensor(t) then fail(string.format("%s: argument 1 must be a tensor, got %s", name, type(t))) end
  if not t:is_floating_point() then
    fail(string.format("%s: expects a floating-point tensor, got %s", name, t:dtype()))
  end
end

--- The fans of a weight: for a Linear weight [out, in], fan_in = in and
-- fan_out = out; for a convolution weight [out, in/groups, k1, k2, ...] both
-- are multiplied by the receptive field k1 * k2 * ... (as PyTorch's
-- _calculate_fan_in_and_fan_out).
-- @param t a tensor of at least 2 dimensions
-- @return fan_in, fan_out
-- @usage local fan_in = nn.init.calculate_fan_in_and_fan_out(conv_weight)
function init.calculate_fan_in_and_fan_out(t)
  if not is_tensor(t) then fail("calculate_fan_in_and_fan_out: argument 1 must be a tensor, got " .. type(t)) end
  if t:dim() < 2 then
    fail(string.format("calculate_fan_in_and_fan_out: fans need a tensor of at least 2 dimensions, got %d", t:dim()))
  end
  local shape = t:shape()
  local field = 1
  for i = 3, #shape do field = field * shape[i] end
  return shape[2] * field, shape[1] * field
end

local function fan(t, mode, name)
  local fan_in, fan_out = init.calculate_fan_in_and_fan_out(t)
  if mode == nil or mode == "fan_in" then return fan_in end
  if mode == "fan_out" then return fan_out end
  fail(string.format("%s: mode must be 'fan_in' or 'fan_out', got %s", name, tostring(mode)))
end

--- The recommended gain for a nonlinearity (torch.nn.init.calculate_gain):
-- 1 for linear, conv and sigmoid, 5/3 for tanh, sqrt(2) for relu,
-- sqrt(2 / (1 + a^2)) for leaky_relu (a defaults to 0.01), 3/4 for selu.
-- @param nonlinearity the name
-- @param param the negative slope of leaky_relu
-- @return a number
-- @usage nn.init.xavier_uniform_(w, nn.init.calculate_gain("tanh"))
function init.calculate_gain(nonlinearity, param)
  local linear = { linear = true, conv1d = true, conv2d = true, conv3d = true, conv_transpose1d = true,
                   conv_transpose2d = true, conv_transpose3d = true, sigmoid = true }
  if linear[nonlinearity] then return 1 end
  if nonlinearity == "tanh" then return 5 / 3 end
  if nonlinearity == "relu" then return math.sqrt(2) end
  if nonlinearity == "selu" then return 3 / 4 end
  if nonlinearity == "leaky_relu" then
    local slope = param == nil and 0.01 or param
    if type(slope) ~= "number" then
      fail("calculate_gain: negative_slope must be a number, got " .. type(slope))
    end
    return math.sqrt(2 / (1 + slope * slope))
  end
  fail("calculate_gain: unsupported nonlinearity " .. tostring(nonlinearity))
end

--- Fills t with U(a, b).
-- @param t a floating-point tensor
-- @param a lower bound (default 0)
-- @param b upper bound (default 1)
-- @return t
-- @usage nn.init.uniform_(w, -0.1, 0.1)
function init.uniform_(t, a, b)
  need_tensor(t, "uniform_")
  a, b = a or 0, b or 1
  if a > b then fail(string.format("uniform_: lower bound %g is above upper bound %g", a, b)) end
  return no_grad(function() return t:uniform_(a, b) end)
end

--- Fills t with N(mean, std^2).
-- @param t a floating-point tensor
-- @param mean the mean (default 0)
-- @param std the standard deviation (default 1)
-- @return t
-- @usage nn.init.normal_(w, 0, 0.02)
function init.normal_(t, mean, std)
  need_tensor(t, "normal_")
  mean, std = mean or 0, std or 1
  if std < 0 then fail(string.format("normal_: std must be non-negative, got %g", std)) end
  return no_grad(function() return t:normal_(mean, std) end)
end

--- Fills t with the value v.
-- @return t
-- @usage nn.init.constant_(b, 0.1)
function init.constant_(t, v)
  need_tensor(t, "constant_")
  if type(v) ~= "number" then fail("constant_: value must be a number, got " .. type(v)) end
  return no_grad(function() return t:fill_(v) end)
end

--- Fills t with zeros.
-- @return t
-- @usage nn.init.zeros_(layer.bias)
function init.zeros_(t)
  need_tensor(t, "zeros_")
  return no_grad(function() return t:zero_() end)
end

--- Fills t with ones.
-- @return t
-- @usage nn.init.ones_(norm.weight)
function init.ones_(t)
  need_tensor(t, "ones_")
  return no_grad(function() return t:fill_(1) end)
end

--- Glorot uniform: U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)).
-- @param t a tensor of at least 2 dimensions
-- @param gain a number (default 1)
-- @return t
-- @usage nn.init.xavier_uniform_(w)
function init.xavier_uniform_(t, gain)
  need_tensor(t, "xavier_uniform_")
  if t:numel() == 0 then return t end
  local fan_in, fan_out = init.calculate_fan_in_and_fan_out(t)
  local a = (gain or 1) * math.sqrt(6 / (fan_in + fan_out))
  return no_grad(function() return t:uniform_(-a, a) end)
end

--- Glorot normal: N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
-- @param t a tensor of at least 2 dimensions
-- @param gain a number (default 1)
-- @return t
-- @usage nn.init.xavier_normal_(w)
function init.xavier_normal_(t, gain)
  need_tensor(t, "xavier_normal_")
  if t:numel() == 0 then return t end
  local fan_in, fan_out = init.calculate_fan_in_and_fan_out(t)
  local std = (gain or 1) * math.sqrt(2 / (fan_in + fan_out))
  return no_grad(function() return t:normal_(0, std) end)
end

local function kaiming_std(t, opts, name)
  opts = opts or {}
  if type(opts) ~= "table" then fail(string.format("%s: options must be a table {a, mode, nonlinearity}", name)) end
  local f = fan(t, opts.mode, name)
  local gain = init.calculate_gain(opts.nonlinearity or "leaky_relu", opts.a or 0)
  return gain / math.sqrt(f)
end

--- He uniform: U(-b, b) with b = gain * sqrt(3 / fan), gain from the
-- nonlinearity (leaky_relu with slope a by default, a = 0).
-- @param t a tensor of at least 2 dimensions
-- @param opts {a = 0, mode = "fan_in" | "fan_out", nonlinearity = "leaky_relu"}
-- @return t
-- @usage nn.init.kaiming_uniform_(w, { a = math.sqrt(5) })  -- Linear's default
function init.kaiming_uniform_(t, opts)
  need_tensor(t, "kaiming_uniform_")
  if t:numel() == 0 then return t end   -- as PyTorch: nothing to fill (and a zero fan)
  local bound = math.sqrt(3) * kaiming_std(t, opts, "kaiming_uniform_")
  return no_grad(function() return t:uniform_(-bound, bound) end)
end

--- He normal: N(0, std^2) with std = gain / sqrt(fan).
-- @param t a tensor of at least 2 dimensions
-- @param opts {a = 0, mode = "fan_in" | "fan_out", nonlinearity = "leaky_relu"}
-- @return t
-- @usage nn.init.kaiming_normal_(w, { mode = "fan_out", nonlinearity = "relu" })
function init.kaiming_normal_(t, opts)
  need_tensor(t, "kaiming_normal_")
  if t:numel() == 0 then return t end
  local std = kaiming_std(t, opts, "kaiming_normal_")
  return no_grad(function() return t:normal_(0, std) end)
end

--- A (semi-)orthogonal matrix, as torch.nn.init.orthogonal_: t seen as
-- [rows, numel / rows] is the Q of the QR factorisation of a normal matrix (of
-- its transpose when it has fewer rows than columns), its columns signed by R's
-- diagonal so the distribution is uniform, times gain.
-- @param t a tensor of at least 2 dimensions
-- @param gain a number (1 by default)
-- @return t
-- @usage nn.init.orthogonal_(rnn.weight_hh_l0)
function init.orthogonal_(t, gain)
  need_tensor(t, "orthogonal_")
  if t:dim() < 2 then fail("orthogonal_: only tensors with 2 or more dimensions are supported, got " .. t:dim()) end
  if gain ~= nil and type(gain) ~= "number" then fail("orthogonal_: gain must be a number, got " .. type(gain)) end
  if t:numel() == 0 then return t end
  local tide = require "tide"
  local rows = t:size(1)
  local cols = t:numel() / rows
  return no_grad(function()
    local flat = tide.randn(rows, cols, { dtype = t:dtype() == "float64" and "float64" or "float32", device = t:device() })
    if rows < cols then flat = flat:mT() end
    local q, r = tide.linalg.qr(flat)
    q = q * tide.diagonal(r, 0, -2, -1):sign():unsqueeze(1)
    if rows < cols then q = q:mT() end
    return t:copy_((q * (gain or 1)):reshape(t:shape()))
  end)
end

--- PyTorch's default initialisation of Linear and of the convolutions
-- (their reset_parameters): weight kaiming_uniform_ with a = sqrt(5), i.e.
-- U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the bias (if any) from the same range.
-- @param weight [out, in] or [out, in/groups, k...]
-- @param bias [out] or nil
-- @return weight, bias
-- @usage nn.init.reset_linear_(conv.weight, conv.bias)
function init.reset_linear_(weight, bias)
  init.kaiming_uniform_(weight, { a = math.sqrt(5) })
  if bias ~= nil then
    local fan_in = init.calculate_fan_in_and_fan_out(weight)
    local bound = fan_in > 0 and 1 / math.sqrt(fan_in) or 0
    init.uniform_(bias, -bound, bound)
  end
  return weight, bias
end

return init
