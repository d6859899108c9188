--- tide.distributions: probability distributions after torch.distributions:
-- Normal, Uniform, Bernoulli and Categorical, with sample (and rsample, the
-- reparameterised draw that gradients flow through, for Normal and Uniform),
-- log_prob, entropy, mean, variance and stddev, and kl_divergence between two
-- Normals or two Categoricals. Parameters are tensors or numbers; draws come
-- from the global generator (tide.manual_seed) on the parameters' device, and
-- nothing is read back to the host.
--
--     local d = tide.distributions.Normal(mu, sigma)
--     local z = d:rsample()                       -- differentiable in mu and sigma
--     local loss = -d:log_prob(x):sum()
local tide = require "tide"
local B = require "bindings.ffi"
local fail = B.fail
local is_tensor = tide.is_tensor

local M = {}
local LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)

-- x as a floating-point tensor (a number on `like`'s device and dtype).
local function param(x, name, what, like)
  if is_tensor(x) then
    if not x:is_floating_point() then
      fail(string.format("%s: %s must be a floating-point tensor, got %s", name, what, x:dtype()))
    end
    return x
  end
  if type(x) ~= "number" then fail(string.format("%s: %s must be a tensor or a number, got %s", name, what, type(x))) end
  local o = like and { dtype = like:dtype(), device = like:device() } or nil
  return tide.tensor(x, o and o.dtype or "float32"):to(o and o.device or tide.get_default_device())
end

-- The shape of a draw: sample_shape (a table, default {}) followed by the batch shape.
local function draw_shape(name, sample_shape, batch)
  sample_shape = sample_shape or {}
  if type(sample_shape) == "number" then sample_shape = { sample_shape } end
  if type(sample_shape) ~= "table" then
    fail(string.format("%s: sample_shape must be a table of sizes, got %s", name, type(sample_shape)))
  end
  local s = {}
  for i, v in ipairs(sample_shape) do
    if type(v) ~= "number" or v < 0 or v ~= math.floor(v) then
      fail(string.format("%s: sample_shape must hold non-negative integers, got %s", name, tostring(v)))
    end
    s[i] = v
  end
  for _, v in ipairs(batch) do s[#s + 1] = v end
  return s
end

local function class(name)
  local c = { __name = name }
  c.__index = c
  c.__tostring = function(self) return name .. "(" .. self:_repr() .. ")" end
  return c
end

local function shape_str(t) return "[" .. table.concat(t:shape(), ",") .. "]" end

-- -- Normal -------------------------------------------------------------------------------------

local Normal = class("Normal")
--- Normal(loc, scale): the normal distribution with mean loc and standard
-- deviation scale (tensors that broadcast, or numbers).
function M.Normal(loc, scale)
  local l = param(loc, "Normal", "loc", is_tensor(scale) and scale or nil)
  local s = param(scale, "Normal", "scale", l)
  local shape = tide.broadcast_shapes(l:shape(), s:shape())
  return setmetatable({ loc = l:expand(shape), scale = s:expand(shape), batch_shape = shape }, Normal)
end
function Normal:_repr() return "loc: " .. shape_str(self.loc) .. ", scale: " .. shape_str(self.scale) end
--- rsample(sample_shape): loc + scale * eps, eps ~ N(0, 1): gradients reach loc and scale.
function Normal:rsample(sample_shape)
  local eps = tide.randn(draw_shape("Normal.rsample", sample_shape, self.batch_shape),
    { dtype = self.loc:dtype(), device = self.loc:device() })
  return eps:mul(self.scale):add(self.loc)
end
--- sample(sample_shape): a draw without gradient.
function Normal:sample(sample_shape)
  return tide.no_grad(function() return self:rsample(sample_shape) end)
end
function Normal:log_prob(x)
  local z = (param(x, "Normal.log_prob", "value", self.loc) - self.loc) / self.scale
  return z:mul(z):mul(-0.5):sub(self.scale:log()):sub(LOG_SQRT_2PI)
end
function Normal:entropy() return self.scale:log():add(0.5 + LOG_SQRT_2PI) end
function Normal:cdf(x)
  return (param(x, "Normal.cdf", "value", self.loc) - self.loc):div(self.scale * math.sqrt(2)):erf():add(1):mul(0.5)
end
function Normal:icdf(p)
  return param(p, "Normal.icdf", "value", self.loc):mul(2):sub(1):erfinv():mul(self.scale * math.sqrt(2)):add(self.loc)
end
function Normal:mean() return self.loc end
function Normal:stddev() return self.scale end
function Normal:variance() return self.scale * self.scale end

-- -- Uniform ------------------------------------------------------------------------------------

local Uniform = class("Uniform")
--- Uniform(low, high): the uniform distribution on [low, high).
function M.Uniform(low, high)
  local l = param(low, "Uniform", "low", is_tensor(high) and high or nil)
  local h = param(high, "Uniform", "high", l)
  local shape = tide.broadcast_shapes(l:shape(), h:shape())
  return setmetatable({ low = l:expand(shape), high = h:expand(shape), batch_shape = shape }, Uniform)
end
function Uniform:_repr() return "low: " .. shape_str(self.low) .. ", high: " .. shape_str(self.high) end
function Uniform:rsample(sample_shape)
  local u = tide.rand(draw_shape("Uniform.rsample", sample_shape, self.batch_shape),
    { dtype = self.low:dtype(), device = self.low:device() })
  return u:mul(self.high - self.low):add(self.low)
end
function Uniform:sample(sample_shape)
  return tide.no_grad(function() return self:rsample(sample_shape) end)
end
--- log_prob(x): -log(high - low) inside [low, high), -inf outside.
function Uniform:log_prob(x)
  x = param(x, "Uniform.log_prob", "value", self.low)
  local inside = x:ge(self.low):logical_and(x:lt(self.high))
  return tide.where(inside, (self.high - self.low):log():neg(), -math.huge)
end
function Uniform:entropy() return (self.high - self.low):log() end
function Uniform:mean() return (self.high + self.low) / 2 end
function Uniform:variance() local w = self.high - self.low; return w * w / 12 end
function Uniform:stddev() return self:variance():sqrt() end

-- -- Bernoulli and Categorical: from probs or logits ----------------------------------------------

local function probs_or_logits(name, opts)
  if type(opts) ~= "table" or is_tensor(opts) then
    fail(name .. ": expects a table { probs = ... } or { logits = ... }")
  end
  if (opts.probs == nil) == (opts.logits == nil) then
    fail(name .. ": give exactly one of probs and logits")
  end
  if opts.probs ~= nil then return param(opts.probs, name, "probs"), nil end
  return nil, param(opts.logits, name, "logits")
end

local Bernoulli = class("Bernoulli")
--- Bernoulli{probs = p} or Bernoulli{logits = l}: 1 with probability p = sigmoid(l), else 0.
function M.Bernoulli(opts)
  local p, l = probs_or_logits("Bernoulli", opts)
  local d = setmetatable({}, Bernoulli)
  if p then d.probs, d.logits = p, p:log() - (-p):log1p() else d.logits, d.probs = l, l:sigmoid() end
  d.batch_shape = d.probs:shape()
  return d
end
function Bernoulli:_repr() return "probs: " .. shape_str(self.probs) end
function Bernoulli:sample(sample_shape)
  return tide.no_grad(function()
    local shape = draw_shape("Bernoulli.sample", sample_shape, self.batch_shape)
    return tide.bernoulli(self.probs:expand(shape):contiguous())
  end)
end
--- log_prob(x) = x log p + (1 - x) log(1 - p), from the logits: -softplus(-l) x - softplus(l) (1 - x).
function Bernoulli:log_prob(x)
  x = param(x, "Bernoulli.log_prob", "value", self.logits)
  local l = self.logits
  -- log sigmoid(l) = -softplus(-l), computed without overflow
  local function log_sigmoid(t) return tide.minimum(t, 0):sub(t:abs():neg():exp():log1p()) end
  return x * log_sigmoid(l) + (1 - x) * log_sigmoid(-l)
end
function Bernoulli:entropy()
  local p = self.probs
  return (self:log_prob(tide.ones_like(p)) * p + self:log_prob(tide.zeros_like(p)) * (1 - p)):neg()
end
function Bernoulli:mean() return self.probs end
function Bernoulli:variance() return self.probs * (1 - self.probs) end

local Categorical = class("Categorical")
--- Categorical{probs = p} or Categorical{logits = l}: one of K categories
-- (1-based) per row of the last dim; probs need not be normalised.
function M.Categorical(opts)
  local p, l = probs_or_logits("Categorical", opts)
  local t = p or l
  if t:dim() < 1 then fail("Categorical: " .. (p and "probs" or "logits") .. " must have at least 1 dimension") end
  local d = setmetatable({}, Categorical)
  if p then
    d.probs = p / p:sum(-1, true)
    d.logits = d.probs:log()
  else
    d.logits = l - l:logsumexp(-1, true)
    d.probs = d.logits:exp()
  end
  local shape = t:shape()
  d.num_categories = shape[#shape]
  shape[#shape] = nil
  d.batch_shape = shape
  return d
end
function Categorical:_repr() return "probs: " .. shape_str(self.probs) end
--- sample(sample_shape): 1-based categories by the Gumbel-max trick (argmax of
-- logits + Gumbel noise), int64, of shape sample_shape .. batch_shape.
function Categorical:sample(sample_shape)
  return tide.no_grad(function()
    local shape = draw_shape("Categorical.sample", sample_shape, self.batch_shape)
    shape[#shape + 1] = self.num_categories
    local u = tide.rand(shape, { dtype = self.logits:dtype(), device = self.logits:device() }):clamp(1e-30, 1)
    return (self.logits:expand(shape) - u:log():neg():log()):argmax(-1)
  end)
end
--- log_prob(k): the log-probability of 1-based categories k (an int tensor that
-- broadcasts with the batch shape).
function Categorical:log_prob(k)
  if not is_tensor(k) then
    if type(k) ~= "number" then fail("Categorical.log_prob: value must be an integer tensor or a number") end
    k = tide.tensor(k, "int64"):to(self.logits:device())
  end
  local shape = tide.broadcast_shapes(k:shape(), self.batch_shape)
  local full = {}
  for i, v in ipairs(shape) do full[i] = v end
  full[#full + 1] = self.num_categories
  local idx = k:to("int64"):expand(shape):unsqueeze(-1)
  return self.logits:expand(full):gather(#full, idx):squeeze(-1)
end
function Categorical:entropy()
  -- p log p with 0 log 0 = 0 (logits of -inf where p = 0)
  local plogp = tide.where(self.probs:gt(0), self.probs * self.logits, 0)
  return plogp:sum(-1):neg()
end

-- -- KL divergence -------------------------------------------------------------------------------

--- kl_divergence(p, q): KL(p || q) for two Normals or two Categoricals.
function M.kl_divergence(p, q)
  local mp, mq = getmetatable(p), getmetatable(q)
  if mp == Normal and mq == Normal then
    local vr = (p.scale / q.scale)
    vr = vr * vr
    local t = (p.loc - q.loc) / q.scale
    return (vr + t * t - 1 - vr:log()) * 0.5
  end
  if mp == Categorical and mq == Categorical then
    local t = tide.where(p.probs:gt(0), p.probs * (p.logits - q.logits), 0)
    return t:sum(-1)
  end
  fail(string.format("kl_divergence: not implemented for %s and %s", mp and mp.__name or type(p),
    mq and mq.__name or type(q)))
end

return M
