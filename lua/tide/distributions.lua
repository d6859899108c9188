--- tide.distributions: probability distributions after torch.distributions.
-- Continuous: Normal, Uniform, Exponential, Laplace, LogNormal, Gumbel, Cauchy,
-- StudentT, Gamma, Chi2, Beta, Dirichlet, MultivariateNormal; discrete:
-- Bernoulli, Categorical, OneHotCategorical, Geometric, Poisson, Binomial; and
-- Independent, which makes batch dims event dims. Each has sample, log_prob,
-- mean, variance and stddev, entropy where it has a closed form, and rsample
-- (the reparameterised draw that gradients flow through; has_rsample) where
-- PyTorch has one, the gamma family's through the implicit gradient of its
-- sampler (StandardGamma, below); kl_divergence covers the pairs of
-- the same family that have closed forms. Parameters are tensors or numbers;
-- draws come from the global generator (tide.manual_seed) on the parameters'
-- device, and nothing is read back to the host: the rejection samplers (Gamma
-- and what is made of it, Poisson, Binomial) draw a fixed number of proposals
-- per element at once. Parameters given as numbers are always checked (a
-- negative rate is an error); tensors, and log_prob's values, only with
-- validate_args, which reads them back: per distribution ({ validate_args =
-- true } as the last argument) or for all (set_default_validate_args).
--
--     local d = tide.distributions.Normal(mu, sigma)
--     local z = d:rsample()                       -- differentiable in mu and sigma
--     local loss = -d:log_prob(x):sum()
local tide = require "tide"
local B = require "bindings.ffi"
local fail = B.fail
local is_tensor = tide.is_tensor
local fmt, huge, floor = string.format, math.huge, math.floor

local M = {}
local LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
local LOG_PI = math.log(math.pi)
local EULER = 0.57721566490153286061

-- -- parameters and their checks ------------------------------------------------------------

local validate_default = false
--- set_default_validate_args(v): whether the distributions made from now on check their
-- tensor parameters and log_prob's values (each check reads them back to the host).
function M.set_default_validate_args(v)
  if type(v) ~= "boolean" then fail("set_default_validate_args: expects a boolean, got " .. type(v)) end
  validate_default = v
end

-- Constraints: the message's words, a test of a number, an elementwise test of a tensor.
local function both(a, b) return a:logical_and(b) end
local C = {
  real = { "a number (not NaN)", function(v) return v == v end, function(t) return t:eq(t) end },
  positive = { "positive", function(v) return v > 0 end, function(t) return t:gt(0) end },
  nonnegative = { "non-negative", function(v) return v >= 0 end, function(t) return t:ge(0) end },
  unit = { "in [0, 1]", function(v) return v >= 0 and v <= 1 end, function(t) return both(t:ge(0), t:le(1)) end },
  open_unit = { "in (0, 1)", function(v) return v > 0 and v < 1 end, function(t) return both(t:gt(0), t:lt(1)) end },
  unit_pos = { "in (0, 1]", function(v) return v > 0 and v <= 1 end, function(t) return both(t:gt(0), t:le(1)) end },
  count = { "a non-negative integer", function(v) return v >= 0 and v == floor(v) end,
            function(t) return both(t:ge(0), t:eq(t:floor())) end },
}

-- Whether opts (a table or nil) asks for validation.
local function validating(opts, name)
  if opts == nil then return validate_default end
  if type(opts) ~= "table" or is_tensor(opts) then
    fail(fmt("%s: the options must be a table such as { validate_args = true }, got %s", name, type(opts)))
  end
  if opts.validate_args == nil then return validate_default end
  return opts.validate_args == true
end

-- Checks x against constraint c: a number always, a tensor when `on`.
local function check(name, what, x, c, on)
  if type(x) == "number" then
    if not c[2](x) then fail(fmt("%s: %s must be %s, got %s", name, what, c[1], tostring(x))) end
  elseif on and is_tensor(x) and x:numel() > 0 and not c[3](x):all():item() then
    fail(fmt("%s: %s must be %s (validate_args found an element that is not)", name, what, c[1]))
  end
end

-- Fails unless every element of the bool tensor t is true (validate_args' checks beyond constraints).
local function require_all(name, what, t)
  if t:numel() > 0 and not t:all():item() then
    fail(fmt("%s: %s (validate_args found an element that is not)", name, what))
  end
end

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

-- The parameters `names` (checked against `cons`) as tensors broadcast to one batch shape,
-- which comes first; numbers take the dtype and device of the first tensor among them.
local function params(name, names, values, cons, on)
  local like
  for i = 1, #names do if is_tensor(values[i]) then like = values[i]; break end end
  local ts, shape = {}, {}
  for i, what in ipairs(names) do
    check(name, what, values[i], cons[i], on)
    ts[i] = param(values[i], name, what, like)
    like = like or ts[i]
    shape = tide.broadcast_shapes(shape, ts[i]:shape())
  end
  for i = 1, #ts do ts[i] = ts[i]:expand(shape) end
  return shape, unpack(ts)
end

-- log_prob's value: a tensor or a number, floating-point in the distribution's dtype
-- (integer counts and categories included), checked against `support` when validating.
local function value(self, x, name, support)
  if not is_tensor(x) and type(x) ~= "number" then
    fail(fmt("%s: value must be a tensor or a number, got %s", name, type(x)))
  end
  if support and self._validate then check(name, "value", x, support, true) end
  if type(x) == "number" then return param(x, name, "value", self._like) end
  if x:dtype() ~= self._like:dtype() then return x:to(self._like:dtype()) end
  return x
end

-- The shape of a draw: sample_shape (a table or a number, default {}), then `shape`.
local function draw_shape(name, sample_shape, shape)
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
  for _, v in ipairs(shape) do s[#s + 1] = v end
  return s
end

local function concat(a, b)
  local r = {}
  for _, v in ipairs(a) do r[#r + 1] = v end
  for _, v in ipairs(b) do r[#r + 1] = v end
  return r
end

local function opts_of(t) return { dtype = t:dtype(), device = t:device() } end

-- The smallest positive normal number of t's dtype.
local function tiny(t)
  local d = t:dtype()
  return d == "float64" and 2.2250738585072014e-308 or d == "float16" and 6.103515625e-05 or 1.1754943508222875e-38
end

-- log sigmoid(l) = -softplus(-l), without overflow
local function log_sigmoid(t) return tide.minimum(t, 0):sub(t:abs():neg():exp():log1p()) end
local function softplus(t) return -log_sigmoid(-t) end

-- A class: its name, tostring through _repr, and the members every distribution shares.
local Distribution = {}
Distribution.__index = Distribution
local function class(name, parent)
  local c = setmetatable({ __name = name }, { __index = parent or Distribution })
  c.__index = c
  c.__tostring = function(self) return name .. "(" .. self:_repr() .. ")" end
  return c
end
--- sample(sample_shape): a draw without gradient, of shape sample_shape .. batch_shape .. event_shape.
function Distribution:sample(sample_shape)
  return tide.no_grad(function() return self:rsample(sample_shape) end)
end
Distribution.has_rsample = false   -- whether rsample draws what gradients flow through
function Distribution:rsample()
  fail(fmt("%s.rsample: not implemented%s", self.__name, self._no_rsample or ""))
end
function Distribution:entropy() fail(self.__name .. ".entropy: has no closed form") end
function Distribution:stddev() return self:variance():sqrt() end
function Distribution:_repr()
  local parts = {}
  for _, k in ipairs(self._show or {}) do
    parts[#parts + 1] = k .. ": [" .. table.concat(self[k]:shape(), ",") .. "]"
  end
  return table.concat(parts, ", ")
end
-- A new distribution of class c with the given fields; `like` gives dtype and device.
local function new(c, fields, like, on)
  fields._like, fields._validate = like, on
  fields.event_shape = fields.event_shape or {}
  return setmetatable(fields, c)
end

local function full(self, v) return tide.full(self.batch_shape, v, opts_of(self._like)) end

-- The first accepted of R proposals per element (dim 1 of `props` and `accept`), the last
-- where none is.
local function first_accepted(props, accept)
  local R = props:size(1)
  local r = props:select(1, R)
  for i = R - 1, 1, -1 do r = tide.where(accept:select(1, i), props:select(1, i), r) end
  return r
end

-- -- Normal, LogNormal ------------------------------------------------------------------------

local Normal = class("Normal")
Normal._show = { "loc", "scale" }
Normal.has_rsample = true
--- Normal(loc, scale): the normal distribution with mean loc and standard deviation scale.
function M.Normal(loc, scale, opts)
  local on = validating(opts, "Normal")
  local shape, l, s = params("Normal", { "loc", "scale" }, { loc, scale }, { C.real, C.positive }, on)
  return new(Normal, { loc = l, scale = s, batch_shape = shape }, l, on)
end
--- rsample(sample_shape): loc + scale * eps, eps ~ N(0, 1): gradients reach loc and scale.
function Normal:rsample(sample_shape)
  local eps = tide.randn(draw_shape("Normal.rsample", sample_shape, self.batch_shape), opts_of(self.loc))
  return eps:mul(self.scale):add(self.loc)
end
function Normal:log_prob(x)
  local z = (value(self, x, "Normal.log_prob", C.real) - self.loc) / self.scale
  return z:mul(z):mul(-0.5):sub(self.scale:log()):sub(LOG_SQRT_2PI)
end
function Normal:entropy() return self.scale:log():add(0.5 + LOG_SQRT_2PI) end
function Normal:cdf(x)
  return (value(self, x, "Normal.cdf") - self.loc):div(self.scale * math.sqrt(2)):erf():add(1):mul(0.5)
end
function Normal:icdf(p)
  return value(self, p, "Normal.icdf", C.unit):mul(2):sub(1):erfinv():mul(self.scale * math.sqrt(2)):add(self.loc)
end
function Normal:mean() return self.loc end
function Normal:stddev() return self.scale end
function Normal:variance() return self.scale * self.scale end

local LogNormal = class("LogNormal")
LogNormal._show = { "loc", "scale" }
LogNormal.has_rsample = true
--- LogNormal(loc, scale): exp(X) for X ~ Normal(loc, scale).
function M.LogNormal(loc, scale, opts)
  local on = validating(opts, "LogNormal")
  local shape, l, s = params("LogNormal", { "loc", "scale" }, { loc, scale }, { C.real, C.positive }, on)
  return new(LogNormal, { loc = l, scale = s, batch_shape = shape, base_dist = M.Normal(l, s) }, l, on)
end
function LogNormal:rsample(sample_shape) return self.base_dist:rsample(sample_shape):exp() end
function LogNormal:log_prob(x)
  local lx = value(self, x, "LogNormal.log_prob", C.positive):log()
  return self.base_dist:log_prob(lx) - lx
end
function LogNormal:entropy() return self.base_dist:entropy() + self.loc end
function LogNormal:mean() return (self.loc + self.scale * self.scale * 0.5):exp() end
function LogNormal:variance()
  local s2 = self.scale * self.scale
  return s2:expm1() * (self.loc * 2 + s2):exp()
end

-- -- Uniform ----------------------------------------------------------------------------------

local Uniform = class("Uniform")
Uniform._show = { "low", "high" }
Uniform.has_rsample = true
--- Uniform(low, high): the uniform distribution on [low, high).
function M.Uniform(low, high, opts)
  local on = validating(opts, "Uniform")
  if type(low) == "number" and type(high) == "number" and not (low < high) then
    fail(fmt("Uniform: low must be below high, got %s and %s", tostring(low), tostring(high)))
  end
  local shape, l, h = params("Uniform", { "low", "high" }, { low, high }, { C.real, C.real }, on)
  if on then check("Uniform", "high - low", h - l, C.positive, true) end
  return new(Uniform, { low = l, high = h, batch_shape = shape }, l, on)
end
function Uniform:rsample(sample_shape)
  local u = tide.rand(draw_shape("Uniform.rsample", sample_shape, self.batch_shape), opts_of(self.low))
  return u:mul(self.high - self.low):add(self.low)
end
--- log_prob(x): -log(high - low) inside [low, high), -inf outside.
function Uniform:log_prob(x)
  x = value(self, x, "Uniform.log_prob")
  local inside = x:ge(self.low):logical_and(x:lt(self.high))
  return tide.where(inside, (self.high - self.low):log():neg(), -huge)
end
function Uniform:cdf(x)
  return ((value(self, x, "Uniform.cdf") - self.low) / (self.high - self.low)):clamp(0, 1)
end
function Uniform:icdf(p) return value(self, p, "Uniform.icdf", C.unit) * (self.high - self.low) + self.low end
function Uniform:entropy() return (self.high - self.low):log() end
function Uniform:mean() return (self.high + self.low) / 2 end
function Uniform:variance() local w = self.high - self.low; return w * w / 12 end

-- -- Exponential, Laplace, Gumbel, Cauchy ------------------------------------------------------

local Exponential = class("Exponential")
Exponential._show = { "rate" }
Exponential.has_rsample = true
--- Exponential(rate): density rate exp(-rate x) on x >= 0.
function M.Exponential(rate, opts)
  local on = validating(opts, "Exponential")
  local shape, r = params("Exponential", { "rate" }, { rate }, { C.positive }, on)
  return new(Exponential, { rate = r, batch_shape = shape }, r, on)
end
--- rsample(sample_shape): -log1p(-u) / rate for u ~ U[0, 1), finite (u < 1).
function Exponential:rsample(sample_shape)
  local u = tide.rand(draw_shape("Exponential.rsample", sample_shape, self.batch_shape), opts_of(self.rate))
  return u:neg():log1p():neg():div(self.rate)
end
function Exponential:log_prob(x)
  return self.rate:log() - self.rate * value(self, x, "Exponential.log_prob", C.nonnegative)
end
function Exponential:cdf(x) return -(-self.rate * value(self, x, "Exponential.cdf")):expm1() end
function Exponential:icdf(p) return -(-value(self, p, "Exponential.icdf", C.unit)):log1p() / self.rate end
function Exponential:entropy() return 1 - self.rate:log() end
function Exponential:mean() return self.rate:reciprocal() end
function Exponential:stddev() return self.rate:reciprocal() end
function Exponential:variance() return (self.rate * self.rate):reciprocal() end

local Laplace = class("Laplace")
Laplace._show = { "loc", "scale" }
Laplace.has_rsample = true
--- Laplace(loc, scale): density exp(-|x - loc| / scale) / (2 scale).
function M.Laplace(loc, scale, opts)
  local on = validating(opts, "Laplace")
  local shape, l, s = params("Laplace", { "loc", "scale" }, { loc, scale }, { C.real, C.positive }, on)
  return new(Laplace, { loc = l, scale = s, batch_shape = shape }, l, on)
end
--- rsample(sample_shape): loc - scale sign(u) log1p(-|u|), u ~ U(-1, 1) (kept off -1, as PyTorch).
function Laplace:rsample(sample_shape)
  local u = tide.rand(draw_shape("Laplace.rsample", sample_shape, self.batch_shape), opts_of(self.loc))
  local eps = 2.220446049250313e-16
  if self.loc:dtype() ~= "float64" then eps = 1.1920928955078125e-07 end
  u = (u * 2 - 1):clamp(-1 + eps, nil)
  return self.loc - self.scale * u:sign() * u:abs():neg():log1p()
end
function Laplace:log_prob(x)
  x = value(self, x, "Laplace.log_prob", C.real)
  return -(self.scale * 2):log() - (x - self.loc):abs() / self.scale
end
function Laplace:cdf(x)
  local d = value(self, x, "Laplace.cdf") - self.loc
  return 0.5 - 0.5 * d:sign() * (-d:abs() / self.scale):expm1()
end
function Laplace:icdf(p)
  local t = value(self, p, "Laplace.icdf", C.unit) - 0.5
  return self.loc - self.scale * t:sign() * (t:abs() * -2):log1p()
end
function Laplace:entropy() return (self.scale * 2):log() + 1 end
function Laplace:mean() return self.loc end
function Laplace:variance() return self.scale * self.scale * 2 end
function Laplace:stddev() return self.scale * math.sqrt(2) end

local Gumbel = class("Gumbel")
Gumbel._show = { "loc", "scale" }
Gumbel.has_rsample = true
--- Gumbel(loc, scale): the distribution of the maximum, density exp(-(z + exp(-z))) / scale.
function M.Gumbel(loc, scale, opts)
  local on = validating(opts, "Gumbel")
  local shape, l, s = params("Gumbel", { "loc", "scale" }, { loc, scale }, { C.real, C.positive }, on)
  return new(Gumbel, { loc = l, scale = s, batch_shape = shape }, l, on)
end
--- rsample(sample_shape): loc - scale log(-log u), u ~ U[tiny, 1 - eps] (finite both ends).
function Gumbel:rsample(sample_shape)
  local u = tide.rand(draw_shape("Gumbel.rsample", sample_shape, self.batch_shape), opts_of(self.loc))
  local eps = self.loc:dtype() == "float64" and 2.220446049250313e-16 or 1.1920928955078125e-07
  u = u:clamp(tiny(self.loc), 1 - eps)
  return self.loc - self.scale * u:log():neg():log()
end
function Gumbel:log_prob(x)
  local z = (value(self, x, "Gumbel.log_prob", C.real) - self.loc) / self.scale
  return -(z + (-z):exp()) - self.scale:log()
end
function Gumbel:cdf(x)
  local z = (value(self, x, "Gumbel.cdf") - self.loc) / self.scale
  return (-(-z):exp()):exp()
end
function Gumbel:icdf(p) return self.loc - self.scale * value(self, p, "Gumbel.icdf", C.unit):log():neg():log() end
function Gumbel:entropy() return self.scale:log() + (1 + EULER) end
function Gumbel:mean() return self.loc + self.scale * EULER end
function Gumbel:variance() return self.scale * self.scale * (math.pi ^ 2 / 6) end

local Cauchy = class("Cauchy")
Cauchy._show = { "loc", "scale" }
Cauchy.has_rsample = true
--- Cauchy(loc, scale): density 1 / (pi scale (1 + z^2)); no mean (NaN) nor variance (inf).
function M.Cauchy(loc, scale, opts)
  local on = validating(opts, "Cauchy")
  local shape, l, s = params("Cauchy", { "loc", "scale" }, { loc, scale }, { C.real, C.positive }, on)
  return new(Cauchy, { loc = l, scale = s, batch_shape = shape }, l, on)
end
--- rsample(sample_shape): loc + scale tan(pi (u - 1/2)).
function Cauchy:rsample(sample_shape)
  local u = tide.rand(draw_shape("Cauchy.rsample", sample_shape, self.batch_shape), opts_of(self.loc))
  return self.loc + self.scale * ((u - 0.5) * math.pi):tan()
end
function Cauchy:log_prob(x)
  local z = (value(self, x, "Cauchy.log_prob", C.real) - self.loc) / self.scale
  return -(z * z):log1p() - self.scale:log() - LOG_PI
end
function Cauchy:cdf(x) return ((value(self, x, "Cauchy.cdf") - self.loc) / self.scale):atan() / math.pi + 0.5 end
function Cauchy:icdf(p)
  return ((value(self, p, "Cauchy.icdf", C.unit) - 0.5) * math.pi):tan() * self.scale + self.loc
end
function Cauchy:entropy() return (self.scale * (4 * math.pi)):log() end
function Cauchy:mean() return full(self, 0 / 0) end
function Cauchy:variance() return full(self, huge) end

-- -- Gamma, Chi2, Beta, Dirichlet --------------------------------------------------------------

-- Marsaglia and Tsang's method ("A simple method for generating gamma variables", 2000),
-- vectorised: GAMMA_ROUNDS proposals per element, all drawn at once, the first accepted
-- kept. For shape a >= 1, d = a - 1/3, c = 1/sqrt(9d), x ~ N(0, 1), v = (1 + c x)^3 is
-- accepted when v > 0 and log u < x^2/2 + d - d v + d log v; then d v ~ Gamma(a). A
-- proposal is accepted with probability 0.952 at a = 1 and more above (measured: 0.982 at
-- 2, 0.997 at 10), so that all 8 fail with probability below 3e-11 per element, where the
-- last proposal is kept (d if v <= 0): a bias far below any sampling error. Below 1,
-- Gamma(a + 1) U^(1/a), taken in logs; draws are kept at or above the dtype's tiny, as
-- PyTorch's.
local GAMMA_ROUNDS = 8
local function standard_gamma(alpha, shape)
  local o = opts_of(alpha)
  local a = alpha:expand(shape)
  local boost = a:lt(1)
  local d = tide.where(boost, a + 1, a) - 1 / 3
  local c = (d * 9):rsqrt()
  local rshape = concat({ GAMMA_ROUNDS }, shape)
  local x, u = tide.randn(rshape, o), tide.rand(rshape, o)
  local v = x * c + 1
  v = v * v * v
  local pos = v:gt(0)
  v = tide.where(pos, v, 1)
  local accept = pos:logical_and(u:log():lt(x * x * 0.5 + d - d * v + d * v:log()))
  local g = first_accepted(v, accept) * d
  local lb = g:log() + tide.rand(shape, o):log() / a
  return tide.where(boost, lb:exp(), g):clamp(tiny(alpha), nil)
end

-- -- the gamma draw's gradient ----------------------------------------------------------------
-- A draw x ~ Gamma(a, 1) moves with a at fixed quantile u = P(a, x) (the regularised lower
-- incomplete gamma): dx/da = -(dP/da)(x; a) / p(x; a), p the density (Figurnov, Mohamed and
-- Mnih, "Implicit reparameterization gradients", 2018). Computed in float64 with
-- elementwise ops, three ways picked per element by tide.where:
-- * a < 20, x < 20: the series P(a, x) = p(x; a) x sum_n t_n, t_n = x^n / (a (a+1)...(a+n)),
--   differentiated in a: dx/da = x sum_n t_n (digamma(a+n+1) - log x), 60 terms (the terms
--   shrink once a + n > x; for x < 20 the 60th is at most about 3e-13 of the sum).
-- * a < 20, x >= 20: the upper tail, Gamma(a, x) = x^(a-1) e^-x S, S = sum_k
--   (a-1)...(a-k) / x^k, 20 terms (exact but for a remainder below |(a-1)...(a-20)| / x^20
--   < 3e-8 of S); dx/da = S (log x - digamma(a)) + dS/da.
-- * a >= 20: Temme's uniform expansion (DLMF 8.12.3-9) with its first two coefficient
--   functions c0, c1 of eta, sign(x/a - 1) sqrt(2 (x/a - 1 - log(x/a))), differentiated in a
--   at fixed x; for |eta| < 1/2, where the closed forms cancel, their Taylor polynomials.
-- Relative error against mpmath (40 digits), over a in [0.01, 1e5] and quantiles 1e-6 to
-- 1 - 1e-6: below 3e-8 for a < 20, and below 0.006 / a^2 above (the c2 / a^2 left out):
-- 1.5e-5 at a = 20, 2.4e-7 at a = 100.
local SG_A, SG_X, SG_SERIES, SG_UPPER, SG_ETA = 20, 20, 60, 20, 0.5
-- Taylor coefficients in eta (ascending) of (x/a - 1)/eta, c0 and c1, computed with mpmath.
local TEMME_R = { 1, 0.3333333333333333, 0.027777777777777776, -0.003703703703703704,
  0.00023148148148148407, 5.8788947677836094e-05, -2.5536449147666305e-05, 4.8990789731723535e-06,
  -2.428276101161959e-07, -1.8540622146935445e-07, 7.542462334392544e-08, -1.4721622671141268e-08,
  5.161598637071555e-10, 7.329549908250624e-10 }
local TEMME_C0 = { -0.3333333333333333, 0.08333333333333333, -0.014814814814814815, 0.0011574074074074073,
  0.0003527336860670101, -0.0001787551440329219, 3.9192631785607446e-05, -2.185448510676416e-06,
  -1.8540622186105944e-06, 8.296711340274822e-07, -1.7665943585977326e-07, 6.707854223458965e-09,
  1.0261185685946479e-08, -4.382039506195016e-09 }
local TEMME_C1 = { -0.001851851851851852, -0.003472222222222222, 0.0026455026455026454,
  -0.0009902263374485596, 0.00020576131687244367, -4.018775720223323e-07, -1.8098550335133173e-05,
  7.649160916322257e-06, -1.6120900762473074e-06, 4.6471228411955115e-09, 1.3786319245977502e-07,
  -5.752539868539009e-08, 1.1952657488007214e-08, -1.7932684917234006e-11 }

-- sum_k c[k] t^(k-1), and its derivative in t
local function poly(c, t)
  local s = t * c[#c] + c[#c - 1]
  for k = #c - 2, 1, -1 do s = s * t + c[k] end
  return s
end
local function dpoly(c, t)
  local s = t * ((#c - 1) * c[#c]) + (#c - 2) * c[#c - 1]
  for k = #c - 2, 2, -1 do s = s * t + (k - 1) * c[k] end
  return s
end

local function gamma_grad_series(a, x)
  local lx, t, psi = x:log(), a:reciprocal(), (a + 1):digamma()
  local s = t * (psi - lx)
  for n = 1, SG_SERIES - 1 do
    t = t * x / (a + n)
    psi = psi + (a + n):reciprocal()
    s = s + t * (psi - lx)
  end
  return x * s
end

local function gamma_grad_upper(a, x)
  local p, dp = tide.ones_like(x), tide.zeros_like(x)
  local s, ds = p, dp
  for k = 1, SG_UPPER - 1 do
    dp = (dp * (a - k) + p) / x
    p = p * (a - k) / x
    s, ds = s + p, ds + dp
  end
  return s * (x:log() - a:digamma()) + ds
end

local function gamma_grad_temme(a, x)
  local l = x / a
  local m = l - 1
  local eta = m:sign() * ((m - m:log1p()) * 2):sqrt()
  local near = eta:abs():lt(SG_ETA)
  local m2, e2 = m * m, eta * eta
  local r = tide.where(near, poly(TEMME_R, eta), m / eta)
  local c0 = tide.where(near, poly(TEMME_C0, eta), m:reciprocal() - eta:reciprocal())
  local c0p = tide.where(near, dpoly(TEMME_C0, eta), e2:reciprocal() - eta * l / (m2 * m))
  local c1 = tide.where(near, poly(TEMME_C1, eta),
    (e2 * eta):reciprocal() - (m2 * m):reciprocal() - m2:reciprocal() - (m * 12):reciprocal())
  local c1p = tide.where(near, dpoly(TEMME_C1, eta),
    (e2 * e2):reciprocal() * -3 + ((m2 * m2):reciprocal() * 3 + (m2 * m):reciprocal() * 2
      + (m2 * 12):reciprocal()) * eta * l / m)
  local ia = a:reciprocal()
  -- Gamma(a) e^a a^-a sqrt(a / 2 pi), Stirling's series to 1/a^4
  local gstar = poly({ 1, 1 / 12, 1 / 288, -139 / 51840, -571 / 2488320 }, ia)
  local d = r - eta * 0.5 + (c0 + c1 * ia) * (m:log1p() - ia * 0.5) - r * ia * (c0p + c1p * ia) - c1 * ia * ia
  return l * gstar * d
end

--- _standard_gamma_grad(alpha, x): dx/dalpha of the draw x ~ Gamma(alpha, 1) at a fixed
-- quantile, elementwise (alpha and x broadcast), in x's dtype. StandardGamma's backward;
-- exposed for the specs.
function M._standard_gamma_grad(alpha, x)
  local dt = x:dtype()
  local a, v = alpha:to("float64"), x:to("float64")
  local shape = tide.broadcast_shapes(a:shape(), v:shape())
  a, v = a:expand(shape), v:expand(shape)
  local small = a:lt(SG_A)
  local as, at = a:clamp(nil, SG_A), a:clamp(SG_A, nil)
  local low = gamma_grad_series(as, v:clamp(nil, SG_X))
  local up = gamma_grad_upper(as, v:clamp(SG_X, nil))
  local g = tide.where(small, tide.where(v:lt(SG_X), low, up), gamma_grad_temme(at, v))
  return g:to(dt)
end

-- x ~ Gamma(alpha, 1), one draw per element of alpha, differentiable in alpha.
local StandardGamma = tide.autograd.Function("StandardGamma")
function StandardGamma.forward(ctx, alpha)
  local x = standard_gamma(alpha, alpha:shape())
  ctx:save_for_backward(alpha, x)
  return x
end
function StandardGamma.backward(ctx, grad)
  local alpha, x = unpack(ctx.saved_tensors)
  return grad * M._standard_gamma_grad(alpha, x)
end
-- A draw of Gamma(alpha, 1) of the given shape that gradients reach alpha through.
local function rstandard_gamma(alpha, shape) return StandardGamma(alpha:expand(shape)) end

local Gamma = class("Gamma")
Gamma._show = { "concentration", "rate" }
Gamma.has_rsample = true
--- Gamma(concentration, rate): density rate^a x^(a-1) exp(-rate x) / Gamma(a).
function M.Gamma(concentration, rate, opts)
  local on = validating(opts, "Gamma")
  local shape, a, r = params("Gamma", { "concentration", "rate" }, { concentration, rate },
    { C.positive, C.positive }, on)
  return new(Gamma, { concentration = a, rate = r, batch_shape = shape }, a, on)
end
function Gamma:sample(sample_shape)
  return tide.no_grad(function()
    local shape = draw_shape(self.__name .. ".sample", sample_shape, self.batch_shape)
    return standard_gamma(self.concentration, shape) / self.rate
  end)
end
--- rsample(sample_shape): a draw of Gamma(concentration, 1), whose gradient in the
-- concentration is the implicit one (above), divided by rate.
function Gamma:rsample(sample_shape)
  local shape = draw_shape(self.__name .. ".rsample", sample_shape, self.batch_shape)
  return rstandard_gamma(self.concentration, shape) / self.rate
end
function Gamma:log_prob(x)
  x = value(self, x, self.__name .. ".log_prob", C.positive)
  local a, r = self.concentration, self.rate
  return tide.xlogy(a, r) + tide.xlogy(a - 1, x) - r * x - a:lgamma()
end
function Gamma:entropy()
  local a = self.concentration
  return a - self.rate:log() + a:lgamma() + (1 - a) * a:digamma()
end
function Gamma:mean() return self.concentration / self.rate end
function Gamma:variance() return self.concentration / (self.rate * self.rate) end

local Chi2 = class("Chi2", Gamma)
Chi2._show = { "df" }
--- Chi2(df): Gamma(df / 2, 1 / 2), the sum of df squared standard normals.
function M.Chi2(df, opts)
  local on = validating(opts, "Chi2")
  local shape, k = params("Chi2", { "df" }, { df }, { C.positive }, on)
  local d = new(Chi2, { df = k, concentration = k * 0.5, batch_shape = shape }, k, on)
  d.rate = tide.full(shape, 0.5, opts_of(k))
  return d
end

-- log B(a) = sum lgamma(a_i) - lgamma(sum a_i) over the last dim
local function log_beta(a) return a:lgamma():sum(-1) - a:sum(-1):lgamma() end

local Dirichlet = class("Dirichlet")
Dirichlet._show = { "concentration" }
Dirichlet.has_rsample = true
--- Dirichlet(concentration): on the simplex of the last dim (K categories, K >= 1).
function M.Dirichlet(concentration, opts)
  local on = validating(opts, "Dirichlet")
  check("Dirichlet", "concentration", concentration, C.positive, on)
  local a = param(concentration, "Dirichlet", "concentration")
  if a:dim() < 1 then fail("Dirichlet: concentration must have at least 1 dimension") end
  local shape = a:shape()
  local k = table.remove(shape)
  return new(Dirichlet, { concentration = a, batch_shape = shape, event_shape = { k } }, a, on)
end
--- sample(sample_shape): Gammas normalised along the last dim.
function Dirichlet:sample(sample_shape)
  return tide.no_grad(function()
    local g = standard_gamma(self.concentration, draw_shape("Dirichlet.sample", sample_shape,
      concat(self.batch_shape, self.event_shape)))
    return g / g:sum(-1, true)
  end)
end
--- rsample(sample_shape): as sample, from gamma draws that gradients reach the concentration through.
function Dirichlet:rsample(sample_shape)
  local g = rstandard_gamma(self.concentration, draw_shape("Dirichlet.rsample", sample_shape,
    concat(self.batch_shape, self.event_shape)))
  return g / g:sum(-1, true)
end
function Dirichlet:log_prob(x)
  x = value(self, x, "Dirichlet.log_prob", C.unit)
  if self._validate then
    require_all("Dirichlet.log_prob", "value must sum to 1 over its last dim", (x:sum(-1) - 1):abs():le(1e-6))
  end
  local a = self.concentration
  return tide.xlogy(a - 1, x):sum(-1) - log_beta(a)
end
function Dirichlet:entropy()
  local a = self.concentration
  local a0, k = a:sum(-1), a:size(-1)
  return log_beta(a) + (a0 - k) * a0:digamma() - ((a - 1) * a:digamma()):sum(-1)
end
function Dirichlet:mean() return self.concentration / self.concentration:sum(-1, true) end
function Dirichlet:variance()
  local a = self.concentration
  local a0 = a:sum(-1, true)
  return a * (a0 - a) / (a0 * a0 * (a0 + 1))
end

local Beta = class("Beta")
Beta._show = { "concentration1", "concentration0" }
Beta.has_rsample = true
--- Beta(concentration1, concentration0): density x^(a-1) (1-x)^(b-1) / B(a, b) on [0, 1].
function M.Beta(concentration1, concentration0, opts)
  local on = validating(opts, "Beta")
  local shape, a, b = params("Beta", { "concentration1", "concentration0" }, { concentration1, concentration0 },
    { C.positive, C.positive }, on)
  return new(Beta, { concentration1 = a, concentration0 = b, batch_shape = shape }, a, on)
end
--- sample(sample_shape): X / (X + Y) for X ~ Gamma(a), Y ~ Gamma(b).
function Beta:sample(sample_shape)
  return tide.no_grad(function()
    local shape = draw_shape("Beta.sample", sample_shape, self.batch_shape)
    local x, y = standard_gamma(self.concentration1, shape), standard_gamma(self.concentration0, shape)
    return x / (x + y)
  end)
end
--- rsample(sample_shape): as sample, from gamma draws that gradients reach both concentrations through.
function Beta:rsample(sample_shape)
  local shape = draw_shape("Beta.rsample", sample_shape, self.batch_shape)
  local x, y = rstandard_gamma(self.concentration1, shape), rstandard_gamma(self.concentration0, shape)
  return x / (x + y)
end
function Beta:log_prob(x)
  x = value(self, x, "Beta.log_prob", C.unit)
  local a, b = self.concentration1, self.concentration0
  return tide.xlogy(a - 1, x) + tide.xlogy(b - 1, 1 - x) - (a:lgamma() + b:lgamma() - (a + b):lgamma())
end
function Beta:entropy()
  local a, b = self.concentration1, self.concentration0
  local s = a + b
  return a:lgamma() + b:lgamma() - s:lgamma() - (a - 1) * a:digamma() - (b - 1) * b:digamma() + (s - 2) * s:digamma()
end
function Beta:mean() return self.concentration1 / (self.concentration1 + self.concentration0) end
function Beta:variance()
  local a, b = self.concentration1, self.concentration0
  local s = a + b
  return a * b / (s * s * (s + 1))
end

-- -- StudentT ---------------------------------------------------------------------------------

local StudentT = class("StudentT")
StudentT._show = { "df", "loc", "scale" }
StudentT.has_rsample = true
--- StudentT(df, loc = 0, scale = 1): Student's t with df degrees of freedom, shifted and scaled.
function M.StudentT(df, loc, scale, opts)
  local on = validating(opts, "StudentT")
  local shape, k, l, s = params("StudentT", { "df", "loc", "scale" }, { df, loc or 0, scale or 1 },
    { C.positive, C.real, C.positive }, on)
  return new(StudentT, { df = k, loc = l, scale = s, batch_shape = shape }, k, on)
end
--- rsample(sample_shape): loc + scale Z / sqrt(V / df), Z ~ N(0, 1), V ~ Chi2(df): gradients
-- reach loc, scale and df (through the gamma draw's implicit gradient).
function StudentT:rsample(sample_shape)
  local shape = draw_shape("StudentT.rsample", sample_shape, self.batch_shape)
  local z = tide.randn(shape, opts_of(self.df))
  local v = rstandard_gamma(self.df * 0.5, shape) * 2
  return self.loc + self.scale * z * (v / self.df):rsqrt()
end
function StudentT:log_prob(x)
  local y = (value(self, x, "StudentT.log_prob", C.real) - self.loc) / self.scale
  local k = self.df
  local z = self.scale:log() + k:log() * 0.5 + 0.5 * LOG_PI + (k * 0.5):lgamma() - ((k + 1) * 0.5):lgamma()
  return (y * y / k):log1p() * ((k + 1) * -0.5) - z
end
function StudentT:entropy()
  local k = self.df
  local lbeta = (k * 0.5):lgamma() + 0.5 * LOG_PI - ((k + 1) * 0.5):lgamma()
  return self.scale:log() + (k + 1) * 0.5 * (((k + 1) * 0.5):digamma() - (k * 0.5):digamma())
    + k:log() * 0.5 + lbeta
end
--- mean(): loc where df > 1, NaN elsewhere.
function StudentT:mean() return tide.where(self.df:gt(1), self.loc, 0 / 0) end
--- variance(): scale^2 df / (df - 2) where df > 2, inf for 1 < df <= 2, NaN for df <= 1.
function StudentT:variance()
  local k = self.df
  local v = self.scale * self.scale * k / (k - 2)
  return tide.where(k:gt(2), v, tide.where(k:gt(1), huge, 0 / 0))
end

-- -- MultivariateNormal -----------------------------------------------------------------------

local MultivariateNormal = class("MultivariateNormal")
MultivariateNormal._show = { "loc", "scale_tril" }
MultivariateNormal.has_rsample = true
local function lower_solve(L, b) return tide.linalg.solve_triangular(L, b, { upper = false }) end
--- MultivariateNormal(loc, { covariance_matrix = S } or { precision_matrix = P } or
-- { scale_tril = L }): loc [..., n]; the matrix [..., n, n]; batch dims broadcast. Kept as
-- the lower Cholesky factor L of the covariance (a covariance matrix that is not
-- positive-definite is tide.linalg.cholesky's error).
function M.MultivariateNormal(loc, opts)
  local name = "MultivariateNormal"
  if type(opts) ~= "table" or is_tensor(opts) then
    fail(name .. ": expects a table { covariance_matrix = ... }, { precision_matrix = ... } or { scale_tril = ... }")
  end
  local on = validating({ validate_args = opts.validate_args }, name)
  local given = 0
  for _, k in ipairs { "covariance_matrix", "precision_matrix", "scale_tril" } do
    if opts[k] ~= nil then given = given + 1 end
  end
  if given ~= 1 then fail(name .. ": give exactly one of covariance_matrix, precision_matrix and scale_tril") end
  local mat = opts.covariance_matrix or opts.precision_matrix or opts.scale_tril
  if not is_tensor(loc) or not loc:is_floating_point() or loc:dim() < 1 then
    fail(name .. ": loc must be a floating-point tensor of at least 1 dimension")
  end
  if not is_tensor(mat) or not mat:is_floating_point() or mat:dim() < 2 then
    fail(name .. ": the matrix must be a floating-point tensor of at least 2 dimensions")
  end
  local n = loc:size(-1)
  if mat:size(-1) ~= n or mat:size(-2) ~= n then
    fail(fmt("%s: loc has %d elements in its last dim, but the matrix is %d x %d", name, n, mat:size(-2),
      mat:size(-1)))
  end
  local L
  if opts.scale_tril then
    L = mat
    if on then
      check(name, "scale_tril's diagonal", L:diagonal(0, -2, -1), C.positive, true)
      require_all(name, "scale_tril must be lower triangular", L:triu(1):eq(0))
    end
  elseif opts.covariance_matrix then
    L = tide.linalg.cholesky(mat)
  else   -- PyTorch's: L from the Cholesky factor of P with its rows and columns reversed
    local Lf = tide.linalg.cholesky(mat:flip(-2, -1))
    local eye = tide.eye(n, opts_of(mat)):expand(mat:shape())
    L = lower_solve(Lf:flip(-2, -1):mT(), eye)
  end
  local lshape, mshape = loc:shape(), L:shape()
  table.remove(lshape)
  table.remove(mshape)
  table.remove(mshape)
  local batch = tide.broadcast_shapes(lshape, mshape)
  local d = new(MultivariateNormal, { loc = loc:expand(concat(batch, { n })),
    scale_tril = L:expand(concat(batch, { n, n })), batch_shape = batch, event_shape = { n } }, loc, on)
  return d
end
--- rsample(sample_shape): loc + L eps, eps ~ N(0, I): gradients reach loc and the matrix.
function MultivariateNormal:rsample(sample_shape)
  local shape = draw_shape("MultivariateNormal.rsample", sample_shape, concat(self.batch_shape, self.event_shape))
  local eps = tide.randn(shape, opts_of(self.loc))
  return self.loc + self.scale_tril:matmul(eps:unsqueeze(-1)):squeeze(-1)
end
local function half_log_det(L) return L:diagonal(0, -2, -1):log():sum(-1) end
function MultivariateNormal:log_prob(x)
  x = value(self, x, "MultivariateNormal.log_prob", C.real)
  local y = lower_solve(self.scale_tril, (x - self.loc):unsqueeze(-1)):squeeze(-1)
  local n = self.event_shape[1]
  return (y * y):sum(-1):add(n * 2 * LOG_SQRT_2PI):mul(-0.5):sub(half_log_det(self.scale_tril))
end
function MultivariateNormal:entropy()
  local n = self.event_shape[1]
  return half_log_det(self.scale_tril):add(0.5 * n * (1 + 2 * LOG_SQRT_2PI))
end
function MultivariateNormal:mean() return self.loc end
--- variance(): the diagonal of the covariance.
function MultivariateNormal:variance() return (self.scale_tril * self.scale_tril):sum(-1) end
function MultivariateNormal:covariance_matrix() return self.scale_tril:matmul(self.scale_tril:mT()) end
function MultivariateNormal:precision_matrix() return tide.cholesky_inverse(self.scale_tril) end

-- -- Bernoulli, Geometric, Categorical, OneHotCategorical: from probs or logits ----------------

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
Bernoulli._show = { "probs" }
--- Bernoulli{probs = p} or Bernoulli{logits = l}: 1 with probability p = sigmoid(l), else 0.
function M.Bernoulli(opts)
  local on = validating(type(opts) == "table" and not is_tensor(opts) and { validate_args = opts.validate_args } or nil,
    "Bernoulli")
  if type(opts) == "table" and not is_tensor(opts) then check("Bernoulli", "probs", opts.probs, C.unit, on) end
  local p, l = probs_or_logits("Bernoulli", opts)
  local d = new(Bernoulli, {}, p or l, on)
  if p then d.probs, d.logits = p, p:log() - (-p):log1p() else d.logits, d.probs = l, l:sigmoid() end
  d.batch_shape = d.probs:shape()
  return d
end
function Bernoulli:sample(sample_shape)
  return tide.no_grad(function()
    local shape = draw_shape("Bernoulli.sample", sample_shape, self.batch_shape)
    return tide.bernoulli(self.probs:expand(shape):contiguous())
  end)
end
--- log_prob(x) = x log p + (1 - x) log(1 - p), from the logits: -softplus(-l) x - softplus(l) (1 - x).
function Bernoulli:log_prob(x)
  x = value(self, x, "Bernoulli.log_prob", C.unit)
  local l = self.logits
  return x * log_sigmoid(l) + (1 - x) * log_sigmoid(-l)
end
function Bernoulli:entropy()
  local p = self.probs
  return (self:log_prob(tide.ones_like(p)) * p + self:log_prob(tide.zeros_like(p)) * (1 - p)):neg()
end
function Bernoulli:mean() return self.probs end
function Bernoulli:variance() return self.probs * (1 - self.probs) end

local Geometric = class("Geometric")
Geometric._show = { "probs" }
--- Geometric{probs = p} or Geometric{logits = l}: the number of failures before the first
-- success of Bernoulli(p) trials (0, 1, 2, ...).
function M.Geometric(opts)
  local on = validating(type(opts) == "table" and not is_tensor(opts) and { validate_args = opts.validate_args } or nil,
    "Geometric")
  if type(opts) == "table" and not is_tensor(opts) then check("Geometric", "probs", opts.probs, C.unit_pos, on) end
  local p, l = probs_or_logits("Geometric", opts)
  local d = new(Geometric, {}, p or l, on)
  if p then d.probs, d.logits = p, p:log() - (-p):log1p() else d.logits, d.probs = l, l:sigmoid() end
  d.batch_shape = d.probs:shape()
  return d
end
--- sample(sample_shape): floor(log1p(-u) / log1p(-p)), u ~ U[0, 1): 1 - u is never 0, so the
-- largest draw comes from the smallest 1 - u, not from a clamp (PyTorch's clamp of u at tiny
-- gives 244 for p = 0.3 once in 2^24 float32 draws); 0 where p = 1.
function Geometric:sample(sample_shape)
  return tide.no_grad(function()
    local shape = draw_shape("Geometric.sample", sample_shape, self.batch_shape)
    local u = tide.rand(shape, opts_of(self.probs))
    return ((-u):log1p() / (-self.probs):log1p()):floor()
  end)
end
function Geometric:log_prob(k)
  k = value(self, k, "Geometric.log_prob", C.count)
  local p = self.probs
  -- k log(1 - p), 0 at p = 1 and k = 0 (where it is 0 * -inf)
  local q = tide.where(p:eq(1):logical_and(k:eq(0)), 0, p)
  return k * (-q):log1p() + p:log()
end
function Geometric:entropy() return (softplus(self.logits) - self.probs * self.logits) / self.probs end
function Geometric:mean() return self.probs:reciprocal() - 1 end
function Geometric:variance() return (self.probs:reciprocal() - 1) / self.probs end

local Categorical = class("Categorical")
Categorical._show = { "probs" }
--- Categorical{probs = p} or Categorical{logits = l}: one of K categories
-- (1-based) per row of the last dim; probs need not be normalised.
function M.Categorical(opts)
  local on = validating(type(opts) == "table" and not is_tensor(opts) and { validate_args = opts.validate_args } or nil,
    "Categorical")
  local p, l = probs_or_logits("Categorical", opts)
  local t = p or l
  if t:dim() < 1 then fail("Categorical: " .. (p and "probs" or "logits") .. " must have at least 1 dimension") end
  if p then check("Categorical", "probs", p, C.nonnegative, on) end
  local d = new(Categorical, {}, t, on)
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
--- sample(sample_shape): 1-based categories by the Gumbel-max trick (argmax of
-- logits + Gumbel noise), int64, of shape sample_shape .. batch_shape.
function Categorical:sample(sample_shape)
  return tide.no_grad(function()
    local shape = draw_shape(self.__name .. ".sample", sample_shape, self.batch_shape)
    shape[#shape + 1] = self.num_categories
    local u = tide.rand(shape, opts_of(self.logits)):clamp(1e-30, 1)
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
  if self._validate then
    check("Categorical.log_prob", "value", k:double(), { "a category in [1, " .. self.num_categories .. "]",
      nil, function(t) return t:ge(1):logical_and(t:le(self.num_categories)):logical_and(t:eq(t:floor())) end },
      true)
  end
  local shape = tide.broadcast_shapes(k:shape(), self.batch_shape)
  local idx = k:to("int64"):expand(shape):unsqueeze(-1)
  return self.logits:expand(concat(shape, { self.num_categories })):gather(#shape + 1, idx):squeeze(-1)
end
function Categorical:entropy()
  -- p log p with 0 log 0 = 0 (logits of -inf where p = 0)
  local plogp = tide.where(self.probs:gt(0), self.probs * self.logits, 0)
  return plogp:sum(-1):neg()
end
--- mean() and variance(): NaN, as in PyTorch (categories have no order).
function Categorical:mean() return full(self, 0 / 0) end
function Categorical:variance() return full(self, 0 / 0) end

local OneHotCategorical = class("OneHotCategorical")
OneHotCategorical._show = { "probs" }
--- OneHotCategorical{probs = p} or {logits = l}: Categorical's draws as one-hot vectors
-- (event_shape {K}, the logits' dtype).
function M.OneHotCategorical(opts)
  local c = M.Categorical(opts)
  local d = new(OneHotCategorical, { probs = c.probs, logits = c.logits, batch_shape = c.batch_shape,
    event_shape = { c.num_categories }, _categorical = c }, c.logits, c._validate)
  return d
end
function OneHotCategorical:sample(sample_shape)
  return tide.no_grad(function()
    local k = self._categorical:sample(sample_shape)
    local cats = tide.arange(1, self.event_shape[1] + 1, { dtype = "int64", device = k:device() })
    return k:unsqueeze(-1):eq(cats):to(self.logits:dtype())
  end)
end
function OneHotCategorical:log_prob(x)
  x = value(self, x, "OneHotCategorical.log_prob", C.unit)
  return tide.where(x:ne(0), x * self.logits, 0):sum(-1)
end
function OneHotCategorical:entropy() return self._categorical:entropy() end
function OneHotCategorical:mean() return self.probs end
function OneHotCategorical:variance() return self.probs * (1 - self.probs) end

-- -- Poisson, Binomial ------------------------------------------------------------------------

-- Both sample in float64 (their acceptance tests take lgamma of counts that float32 would
-- round) and return the parameters' dtype. Means below 10 invert the CDF over the counts
-- 0..39 at once (beyond 39 lies less than 2e-13 of the mass); above, Hormann's transformed
-- rejection (PTRS for Poisson, BTRS for Binomial: "The transformed rejection method for
-- generating Poisson random variables", 1993, and "The generation of binomial random
-- variates", 1993, as numpy and PyTorch have them, with the exact log-probability ratio
-- from lgamma in place of the Stirling series) with RTS_ROUNDS proposals per element:
-- each is accepted with probability at least 0.75 for Poisson (at rate 10; 0.89 for large
-- rates) and 0.70 for binomial (at n q = 10, q = min(p, 1 - p); 0.88 for large n q), so
-- that all 16 fail with probability below 3e-9 per element, where the last proposal is
-- kept, clamped into the support.
local INVERSION_TERMS, RTS_ROUNDS = 40, 16

local function counts(shape, o)   -- 0 .. INVERSION_TERMS - 1 along a new first dim
  local s = { INVERSION_TERMS }
  for i = 1, #shape do s[i + 1] = 1 end
  return tide.arange(0, INVERSION_TERMS, o):reshape(s)
end

-- The number of counts whose CDF (from log-probabilities logp along dim 1) is below u.
local function invert(logp, u) return logp:exp():cumsum(1):lt(u):sum(1):double() end

local function poisson_sample(rate, shape)
  local o = { dtype = "float64", device = rate:device() }
  local lam = rate:double():expand(shape)
  local small = lam:lt(10)
  local ls = tide.where(small, lam, 1)
  local k = counts(shape, o)
  local inv = invert(k * ls:log() - ls - (k + 1):lgamma(), tide.rand(shape, o))
  -- PTRS, on rates of at least 10
  local lb = tide.where(small, 10, lam)
  local b = lb:sqrt() * 2.53 + 0.931
  local a = b * 0.02483 - 0.059
  local inv_alpha = (b - 3.4):reciprocal() * 1.1328 + 1.1239
  local vr = (b - 2):reciprocal() * -3.6224 + 0.9277
  local rshape = concat({ RTS_ROUNDS }, shape)
  local U, V = tide.rand(rshape, o) - 0.5, tide.rand(rshape, o)
  local us = 0.5 - U:abs()
  local kk = ((a * 2 / us + b) * U + lb + 0.43):floor()
  local fast = us:ge(0.07):logical_and(V:le(vr))
  local valid = kk:ge(0)
  kk = tide.where(valid, kk, 0)
  local tight = us:ge(0.013):logical_or(V:le(us))
  local ratio = (V * inv_alpha / (a / (us * us) + b)):log():le(kk * lb:log() - lb - (kk + 1):lgamma())
  local big = first_accepted(kk, fast:logical_or(valid:logical_and(tight):logical_and(ratio)))
  return tide.where(small, inv, big):to(rate:dtype())
end

local Poisson = class("Poisson")
Poisson._show = { "rate" }
--- Poisson(rate): counts with mean rate.
function M.Poisson(rate, opts)
  local on = validating(opts, "Poisson")
  local shape, r = params("Poisson", { "rate" }, { rate }, { C.nonnegative }, on)
  return new(Poisson, { rate = r, batch_shape = shape }, r, on)
end
function Poisson:sample(sample_shape)
  return tide.no_grad(function()
    return poisson_sample(self.rate, draw_shape("Poisson.sample", sample_shape, self.batch_shape))
  end)
end
function Poisson:log_prob(k)
  k = value(self, k, "Poisson.log_prob", C.count)
  return tide.xlogy(k, self.rate) - self.rate - (k + 1):lgamma()
end
function Poisson:mean() return self.rate end
function Poisson:variance() return self.rate end

local function binomial_sample(n0, p0, shape)
  local o = { dtype = "float64", device = p0:device() }
  local n, p = n0:double():expand(shape), p0:double():expand(shape)
  local flip = p:gt(0.5)
  local q = tide.where(flip, 1 - p, p)
  local small = (n * q):lt(10)
  -- inversion: log C(n, k) + k log q + (n - k) log(1 - q), -inf for k > n
  local k = counts(shape, o)
  local logp = (n + 1):lgamma() - (k + 1):lgamma() - (n - k + 1):lgamma() + tide.xlogy(k, q) + (n - k) * (-q):log1p()
  local inv = tide.minimum(invert(tide.where(k:le(n), logp, -huge), tide.rand(shape, o)), n)
  -- BTRS, where n q >= 10
  local nb, qb = tide.where(small, 100, n), tide.where(small, 0.5, q)
  local sd = (nb * qb * (1 - qb)):sqrt()
  local b = sd * 2.53 + 1.15
  local a = b * 0.0248 + qb * 0.01 - 0.0873
  local c = nb * qb + 0.5
  local vr = 0.92 - b:reciprocal() * 4.2
  local alpha = (b:reciprocal() * 5.1 + 2.83) * sd
  local m = ((nb + 1) * qb):floor()
  local logr = qb:log() - (-qb):log1p()
  local rshape = concat({ RTS_ROUNDS }, shape)
  local U, V = tide.rand(rshape, o) - 0.5, tide.rand(rshape, o)
  local us = 0.5 - U:abs()
  local kk = ((a * 2 / us + b) * U + c):floor()
  local fast = us:ge(0.07):logical_and(V:le(vr))
  local valid = kk:ge(0):logical_and(kk:le(nb))
  kk = kk:clamp(0, nil)
  kk = tide.minimum(kk, nb)
  -- log f(k) / f(m), f(j) = C(n, j) (q / (1 - q))^j
  local logratio = (m + 1):lgamma() + (nb - m + 1):lgamma() - (kk + 1):lgamma() - (nb - kk + 1):lgamma()
    + (kk - m) * logr
  local slow = valid:logical_and((V * alpha / (a / (us * us) + b)):log():le(logratio))
  local big = first_accepted(kk, fast:logical_or(slow))
  local r = tide.where(small, inv, big)
  return tide.where(flip, n - r, r):to(p0:dtype())
end

local Binomial = class("Binomial")
Binomial._show = { "total_count", "probs" }
--- Binomial{total_count = n, probs = p} or {total_count = n, logits = l}: successes in n
-- Bernoulli(p) trials (n a number or a tensor, default 1).
function M.Binomial(opts)
  local on = validating(type(opts) == "table" and not is_tensor(opts) and { validate_args = opts.validate_args } or nil,
    "Binomial")
  if type(opts) == "table" and not is_tensor(opts) then
    check("Binomial", "total_count", opts.total_count or 1, C.count, on)
    check("Binomial", "probs", opts.probs, C.unit, on)
  end
  local p, l = probs_or_logits("Binomial", opts)
  local t = p or l
  local n = param(opts.total_count or 1, "Binomial", "total_count", t)
  check("Binomial", "total_count", n, C.count, on)
  local shape = tide.broadcast_shapes(n:shape(), t:shape())
  local d = new(Binomial, { total_count = n:expand(shape), batch_shape = shape }, t, on)
  if p then d.probs, d.logits = p, p:log() - (-p):log1p() else d.logits, d.probs = l, l:sigmoid() end
  d.probs, d.logits = d.probs:expand(shape), d.logits:expand(shape)
  d._n = type(opts.total_count or 1) == "number" and (opts.total_count or 1) or nil
  return d
end
function Binomial:sample(sample_shape)
  return tide.no_grad(function()
    return binomial_sample(self.total_count, self.probs, draw_shape("Binomial.sample", sample_shape,
      self.batch_shape))
  end)
end
--- log_prob(k): log C(n, k) + k l - n softplus(l), l the logits (stable for p near 0 and 1).
function Binomial:log_prob(k)
  k = value(self, k, "Binomial.log_prob", C.count)
  local n, l = self.total_count, self.logits
  local choose = (n + 1):lgamma() - (k + 1):lgamma() - (n - k + 1):lgamma()
  return choose + tide.where(k:eq(0), 0, k * l) - n * softplus(l)
end
--- entropy(): the sum over the support 0..n; n must have been given as a number.
function Binomial:entropy()
  if not self._n then fail("Binomial.entropy: needs total_count given as a number (it sums over 0..n)") end
  local k = tide.arange(0, self._n + 1, opts_of(self.probs))
  local shape = concat({ self._n + 1 }, self.batch_shape)
  local s = { self._n + 1 }
  for i = 1, #self.batch_shape do s[i + 1] = 1 end
  local lp = self:log_prob(k:reshape(s):expand(shape))
  return -(lp:exp() * lp):sum(1)
end
function Binomial:mean() return self.total_count * self.probs end
function Binomial:variance() return self.total_count * self.probs * (1 - self.probs) end

-- -- Independent ------------------------------------------------------------------------------

local Independent = class("Independent")
--- Independent(base, n): base with its last n batch dims taken as event dims (log_prob and
-- entropy summed over them), as torch.distributions.Independent.
function M.Independent(base, n)
  if type(base) ~= "table" or type(base.batch_shape) ~= "table" or not base.log_prob then
    fail("Independent: argument 1 must be a distribution")
  end
  local bs = base.batch_shape
  if type(n) ~= "number" or n ~= floor(n) or n < 0 or n > #bs then
    fail(fmt("Independent: reinterpreted_batch_ndims must be an integer in [0, %d], got %s", #bs, tostring(n)))
  end
  local batch, event = {}, {}
  for i = 1, #bs - n do batch[i] = bs[i] end
  for i = #bs - n + 1, #bs do event[#event + 1] = bs[i] end
  for _, v in ipairs(base.event_shape or {}) do event[#event + 1] = v end
  return new(Independent, { base_dist = base, reinterpreted_batch_ndims = n, batch_shape = batch,
    event_shape = event, has_rsample = base.has_rsample }, base._like, base._validate)
end
function Independent:_repr() return tostring(self.base_dist) .. ", " .. self.reinterpreted_batch_ndims end
local function sum_last(t, n)
  for _ = 1, n do t = t:sum(-1) end
  return t
end
function Independent:sample(sample_shape) return self.base_dist:sample(sample_shape) end
function Independent:rsample(sample_shape) return self.base_dist:rsample(sample_shape) end
function Independent:log_prob(x) return sum_last(self.base_dist:log_prob(x), self.reinterpreted_batch_ndims) end
function Independent:entropy() return sum_last(self.base_dist:entropy(), self.reinterpreted_batch_ndims) end
function Independent:mean() return self.base_dist:mean() end
function Independent:variance() return self.base_dist:variance() end

-- -- KL divergence ----------------------------------------------------------------------------

local KL = {}   -- KL[P][Q] = function(p, q), by class
local function register_kl(P, Q, f)
  KL[P] = KL[P] or {}
  KL[P][Q] = f
end
local function family(c) return c == Chi2 and Gamma or c end

register_kl(Normal, Normal, function(p, q)
  local vr = p.scale / q.scale
  vr = vr * vr
  local t = (p.loc - q.loc) / q.scale
  return (vr + t * t - 1 - vr:log()) * 0.5
end)
register_kl(LogNormal, LogNormal, function(p, q) return M.kl_divergence(p.base_dist, q.base_dist) end)
register_kl(Categorical, Categorical, function(p, q)
  return tide.where(p.probs:gt(0), p.probs * (p.logits - q.logits), 0):sum(-1)
end)
register_kl(OneHotCategorical, OneHotCategorical, function(p, q)
  return M.kl_divergence(p._categorical, q._categorical)
end)
register_kl(Bernoulli, Bernoulli, function(p, q)
  local a = tide.where(p.probs:gt(0), p.probs * (log_sigmoid(p.logits) - log_sigmoid(q.logits)), 0)
  local b = tide.where(p.probs:lt(1), (1 - p.probs) * (log_sigmoid(-p.logits) - log_sigmoid(-q.logits)), 0)
  return a + b
end)
register_kl(Uniform, Uniform, function(p, q)
  local r = ((q.high - q.low) / (p.high - p.low)):log()
  return tide.where(q.low:gt(p.low):logical_or(q.high:lt(p.high)), huge, r)
end)
register_kl(Exponential, Exponential, function(p, q)
  local r = q.rate / p.rate
  return r - r:log() - 1
end)
register_kl(Laplace, Laplace, function(p, q)
  local sr = p.scale / q.scale
  local d = (p.loc - q.loc):abs()
  return -sr:log() + d / q.scale + sr * (-d / p.scale):exp() - 1
end)
register_kl(Gumbel, Gumbel, function(p, q)
  local c1, c2, c3 = p.scale / q.scale, q.loc / q.scale, p.loc / q.scale
  local t3 = (c2 + (c1 + 1):lgamma() - c3):exp()
  return -c1:log() - c2 + c3 + c1 * EULER + t3 - (1 + EULER)
end)
register_kl(Cauchy, Cauchy, function(p, q)
  local s, d = p.scale + q.scale, p.loc - q.loc
  return (s * s + d * d):log() - (p.scale * q.scale * 4):log()
end)
register_kl(Gamma, Gamma, function(p, q)
  local pa, pr, qa, qr = p.concentration, p.rate, q.concentration, q.rate
  return qa * (pr / qr):log() + qa:lgamma() - pa:lgamma() + (pa - qa) * pa:digamma() + (qr - pr) * (pa / pr)
end)
register_kl(Beta, Beta, function(p, q)
  local pa, pb, qa, qb = p.concentration1, p.concentration0, q.concentration1, q.concentration0
  local ps, qs = pa + pb, qa + qb
  return qa:lgamma() + qb:lgamma() + ps:lgamma() - pa:lgamma() - pb:lgamma() - qs:lgamma()
    + (pa - qa) * pa:digamma() + (pb - qb) * pb:digamma() + (qs - ps) * ps:digamma()
end)
register_kl(Dirichlet, Dirichlet, function(p, q)
  local pa, qa = p.concentration, q.concentration
  local ps = pa:sum(-1)
  return ps:lgamma() - qa:sum(-1):lgamma() - (pa:lgamma() - qa:lgamma()):sum(-1)
    + ((pa - qa) * (pa:digamma() - ps:digamma():unsqueeze(-1))):sum(-1)
end)
register_kl(Poisson, Poisson, function(p, q)
  return tide.xlogy(p.rate, p.rate) - tide.xlogy(p.rate, q.rate) - p.rate + q.rate
end)
register_kl(Geometric, Geometric, function(p, q)
  return -p:entropy() - (-q.probs):log1p() / p.probs - q.logits
end)
register_kl(Binomial, Binomial, function(p, q)
  if not p._n or p._n ~= q._n then
    fail("kl_divergence: Binomial pairs need one total_count, given as a number to both")
  end
  return M.kl_divergence(M.Bernoulli({ logits = p.logits }), M.Bernoulli({ logits = q.logits })) * p._n
end)
register_kl(MultivariateNormal, MultivariateNormal, function(p, q)
  local n = p.event_shape[1]
  if q.event_shape[1] ~= n then
    fail(fmt("kl_divergence: MultivariateNormals of %d and %d dimensions", n, q.event_shape[1]))
  end
  local Lq, Lp = q.scale_tril, p.scale_tril
  local shape = tide.broadcast_shapes(Lq:shape(), Lp:shape())
  local t2 = lower_solve(Lq:expand(shape), Lp:expand(shape))
  local t3 = lower_solve(Lq, (q.loc - p.loc):unsqueeze(-1)):squeeze(-1)
  return half_log_det(Lq) - half_log_det(Lp) + ((t2 * t2):sum({ -2, -1 }) + (t3 * t3):sum(-1) - n) * 0.5
end)
register_kl(Independent, Independent, function(p, q)
  if p.reinterpreted_batch_ndims ~= q.reinterpreted_batch_ndims then
    fail("kl_divergence: Independent pairs need the same reinterpreted_batch_ndims")
  end
  return sum_last(M.kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)
end)

--- kl_divergence(p, q): KL(p || q) for two distributions of one family (Normal, LogNormal,
-- Uniform, Exponential, Laplace, Gumbel, Cauchy, Gamma and Chi2, Beta, Dirichlet,
-- MultivariateNormal, Bernoulli, Geometric, Binomial, Poisson, Categorical,
-- OneHotCategorical, Independent).
function M.kl_divergence(p, q)
  local mp, mq = getmetatable(p), getmetatable(q)
  local f = KL[family(mp)] and KL[family(mp)][family(mq)]
  if f then return f(p, q) end
  fail(string.format("kl_divergence: not implemented for %s and %s", mp and mp.__name or type(p),
    mq and mq.__name or type(q)))
end

return M
