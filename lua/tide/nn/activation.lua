--- tide.nn.activation: the activations of torch.nn beyond those in tide.nn
-- (LeakyReLU, ELU, SELU, CELU, Softplus, Hardtanh, ReLU6, the hard and smooth
-- sigmoids and swishes, the shrinks, PReLU, RReLU, GLU, Softmin, Softmax2d,
-- gumbel_softmax...), and the vector similarities
-- (F.normalize, cosine similarity, pairwise distance), as functions of
-- tide.nn.functional and as modules. Each is composed of tensor ops, in the
-- forms that stay finite at large |x| in value and gradient; autograd does the rest.
-- Called once by tide.nn with the nn table, which it fills.
local tide = require "tide"
local B = require "bindings.ffi"
local args = require "tide.args"
local fail = B.fail

return function(nn)
  local F, Module = nn.functional, nn.Module
  local huge = math.huge

  -- -- argument checks ------------------------------------------------------------------

  local shape_str, need_float, options = args.shape_str, args.need_float, args.options

  local function need_number(v, fname, what)
    if type(v) ~= "number" or v ~= v then fail(string.format("%s: %s must be a number, got %s", fname, what,
      type(v) == "number" and tostring(v) or type(v))) end
    return v
  end

  -- A dimension of an n-d tensor (shape s, for the message): an integer in [-n, n], not 0.
  local function need_dim(dim, n, s, fname)
    if type(dim) ~= "number" or dim ~= math.floor(dim) or dim == 0 or dim > n or dim < -n then
      fail(string.format("%s: dim %s is out of range for input of shape %s", fname, tostring(dim), s))
    end
    return dim
  end

  -- p: a positive number or math.huge (also the string "inf", as Python's float("inf")).
  local function need_p(p, fname)
    if p == "inf" then return huge end
    if type(p) ~= "number" or not (p > 0) then
      fail(string.format("%s: p must be a positive number or math.huge, got %s", fname, tostring(p)))
    end
    return p
  end

  -- The shape a and b broadcast to, or nil.
  local function broadcast_shape(a, b)
    local sa, sb = a:shape(), b:shape()
    local n, r = math.max(#sa, #sb), {}
    for i = 1, n do
      local x, y = sa[#sa - n + i] or 1, sb[#sb - n + i] or 1
      if x ~= y and x ~= 1 and y ~= 1 then return nil end
      r[i] = x == 1 and y or x
    end
    return r
  end

  -- The p-norm of x along dim, with a gradient of 0 where the norm is 0 (as
  -- PyTorch's) where sqrt and pow(1/p) would give 0/0: a where on each side
  -- of the root keeps it away from 0 (NaN and inf still go through).
  local function pnorm(x, p, dim, keepdim)
    if p == huge then return x:abs():amax(dim, keepdim) end
    if p == 1 then return x:abs():sum(dim, keepdim) end
    local s = p == 2 and (x * x):sum(dim, keepdim) or x:abs():pow(p):sum(dim, keepdim)
    local nz = s:ne(0)
    local safe = tide.where(nz, s, 1)
    return tide.where(nz, p == 2 and safe:sqrt() or safe:pow(1 / p), 0)
  end
  nn._pnorm = pnorm

  -- -- elementwise activations -------------------------------------------------------------

  --- F.leaky_relu(x, negative_slope): x where x > 0, else negative_slope * x, as torch's.
  -- @param x a floating-point tensor
  -- @param negative_slope default 0.01
  -- @usage F.leaky_relu(x, 0.2)
  function F.leaky_relu(x, negative_slope)
    need_float(x, "leaky_relu", "input")
    negative_slope = need_number(negative_slope or 0.01, "leaky_relu", "negative_slope")
    return tide.where(x:gt(0), x, x * negative_slope)
  end

  -- alpha (exp(x) - 1) for x <= 0, with exp's argument clamped at 0 so that
  -- the branch not taken stays finite (its gradient is 0, not 0 * inf).
  local function neg_expm1(x, alpha, scale)
    return x:clamp(nil, 0):mul(scale):expm1():mul(alpha)
  end

  --- F.elu(x, alpha): x where x > 0, else alpha (exp(x) - 1), as torch's.
  -- @param x a floating-point tensor
  -- @param alpha default 1
  -- @usage F.elu(x)
  function F.elu(x, alpha)
    need_float(x, "elu", "input")
    alpha = need_number(alpha or 1, "elu", "alpha")
    return tide.where(x:gt(0), x, neg_expm1(x, alpha, 1))
  end

  local SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946

  --- F.selu(x): scale * elu(x, alpha) with PyTorch's constants
  -- (alpha = 1.6732632423543772, scale = 1.0507009873554805).
  -- @usage F.selu(x)
  function F.selu(x)
    need_float(x, "selu", "input")
    return tide.where(x:gt(0), x * SELU_SCALE, neg_expm1(x, SELU_ALPHA * SELU_SCALE, 1))
  end

  --- F.celu(x, alpha): max(0, x) + min(0, alpha (exp(x / alpha) - 1)), as torch's.
  -- @param x a floating-point tensor
  -- @param alpha default 1, not 0
  -- @usage F.celu(x, 0.5)
  function F.celu(x, alpha)
    need_float(x, "celu", "input")
    alpha = need_number(alpha or 1, "celu", "alpha")
    if alpha == 0 then fail("celu: alpha must not be 0") end
    return tide.where(x:gt(0), x, neg_expm1(x, alpha, 1 / alpha))
  end

  --- F.softplus(x, beta, threshold): log(1 + exp(beta x)) / beta, and x itself
  -- where beta x > threshold, as torch's.
  -- @param x a floating-point tensor
  -- @param beta default 1
  -- @param threshold default 20
  -- @usage F.softplus(x, 2)
  function F.softplus(x, beta, threshold)
    need_float(x, "softplus", "input")
    beta = need_number(beta or 1, "softplus", "beta")
    threshold = need_number(threshold or 20, "softplus", "threshold")
    if beta == 0 then fail("softplus: beta must not be 0") end
    local bx = x * beta
    -- exp's argument clamped at threshold: the branch not taken stays finite
    return tide.where(bx:gt(threshold), x, bx:clamp(nil, threshold):exp():log1p():div(beta))
  end

  -- x clamped to [lo, hi] with the gradient passing only strictly inside,
  -- as torch's hardtanh_backward (clamp's passes at the bounds too).
  local function clip(x, lo, hi)
    return tide.where(x:le(lo), lo, tide.where(x:ge(hi), hi, x))
  end

  --- F.hardtanh(x, min_val, max_val): x clamped to [min_val, max_val] (the
  -- gradient is 0 at the bounds, as torch's).
  -- @param x a floating-point tensor
  -- @param min_val default -1
  -- @param max_val default 1 (not below min_val)
  -- @usage F.hardtanh(x, -2, 2)
  function F.hardtanh(x, min_val, max_val)
    need_float(x, "hardtanh", "input")
    min_val = need_number(min_val or -1, "hardtanh", "min_val")
    max_val = need_number(max_val or 1, "hardtanh", "max_val")
    if max_val < min_val then
      fail(string.format("hardtanh: max_val (%g) must not be less than min_val (%g)", max_val, min_val))
    end
    return clip(x, min_val, max_val)
  end

  --- F.relu6(x): min(max(x, 0), 6).
  -- @usage F.relu6(x)
  function F.relu6(x)
    need_float(x, "relu6", "input")
    return clip(x, 0, 6)
  end

  --- F.hardsigmoid(x): relu6(x + 3) / 6, that is clamp(x / 6 + 1/2, 0, 1).
  -- @usage F.hardsigmoid(x)
  function F.hardsigmoid(x)
    need_float(x, "hardsigmoid", "input")
    return clip(x / 6 + 0.5, 0, 1)
  end

  --- F.hardswish(x): x relu6(x + 3) / 6 (the gradient at -3 and 3 is
  -- x / 3 + 1/2, as torch's: clamp's passes at its bounds).
  -- @usage F.hardswish(x)
  function F.hardswish(x)
    need_float(x, "hardswish", "input")
    return x * (x / 6 + 0.5):clamp(0, 1)
  end

  --- F.mish(x): x tanh(softplus(x)).
  -- @usage F.mish(x)
  function F.mish(x)
    need_float(x, "mish", "input")
    return x * F.softplus(x):tanh()
  end

  --- F.softsign(x): x / (1 + |x|).
  -- @usage F.softsign(x)
  function F.softsign(x)
    need_float(x, "softsign", "input")
    return x / (x:abs() + 1)
  end

  --- F.logsigmoid(x): log(sigmoid(x)) = -softplus(-x), as x - log1p(exp(x))
  -- for x < 0 and -log1p(exp(-x)) otherwise: accurate at every x, each
  -- branch's exp argument clamped at 0 so the other stays finite.
  -- @usage F.logsigmoid(x)
  function F.logsigmoid(x)
    need_float(x, "logsigmoid", "input")
    local a, b = x:clamp(nil, 0), (-x):clamp(nil, 0)
    return tide.where(x:lt(0), a - a:exp():log1p(), -b:exp():log1p())
  end

  --- F.tanhshrink(x): x - tanh(x).
  -- @usage F.tanhshrink(x)
  function F.tanhshrink(x)
    need_float(x, "tanhshrink", "input")
    return x - x:tanh()
  end

  --- F.threshold(x, threshold, value): x where x > threshold, else value.
  -- @param x a floating-point tensor
  -- @param threshold a number
  -- @param value a number
  -- @usage F.threshold(x, 0.1, 0)
  function F.threshold(x, threshold, value)
    need_float(x, "threshold", "input")
    need_number(threshold, "threshold", "threshold")
    need_number(value, "threshold", "value")
    return tide.where(x:gt(threshold), x, value)
  end

  --- F.hardshrink(x, lambd): x where |x| > lambd, else 0.
  -- @param x a floating-point tensor
  -- @param lambd default 0.5
  -- @usage F.hardshrink(x, 0.1)
  function F.hardshrink(x, lambd)
    need_float(x, "hardshrink", "input")
    lambd = need_number(lambd == nil and 0.5 or lambd, "hardshrink", "lambd")
    return tide.where(x:abs():gt(lambd), x, 0)
  end

  local function need_lambd(lambd, name)
    lambd = need_number(lambd == nil and 0.5 or lambd, name, "lambd")
    if lambd < 0 then fail(string.format("%s: lambd must not be negative, got %g", name, lambd)) end
    return lambd
  end

  --- F.softshrink(x, lambd): x - lambd where x > lambd, x + lambd where
  -- x < -lambd, else 0 (the gradient is 0 at +-lambd, as torch's).
  -- @param x a floating-point tensor
  -- @param lambd default 0.5, not negative
  -- @usage F.softshrink(x, 0.1)
  function F.softshrink(x, lambd)
    need_float(x, "softshrink", "input")
    lambd = need_lambd(lambd, "softshrink")
    return tide.where(x:gt(lambd), x - lambd, tide.where(x:lt(-lambd), x + lambd, 0))
  end

  local function rrelu_bounds(lower, upper, name)
    lower = need_number(lower == nil and 1 / 8 or lower, name, "lower")
    upper = need_number(upper == nil and 1 / 3 or upper, name, "upper")
    if lower > upper then
      fail(string.format("%s: lower (%g) must not be greater than upper (%g)", name, lower, upper))
    end
    return lower, upper
  end

  --- F.rrelu(x, lower, upper, training): randomized leaky ReLU. In training,
  -- x where x > 0, else a x with a drawn from U(lower, upper) for each element
  -- (tide's generator); otherwise leaky_relu with slope (lower + upper) / 2.
  -- @param x a floating-point tensor
  -- @param lower default 1/8
  -- @param upper default 1/3
  -- @param training default false, as PyTorch's F.rrelu
  -- @usage F.rrelu(x, 0.1, 0.3, model.training)
  function F.rrelu(x, lower, upper, training)
    need_float(x, "rrelu", "input")
    lower, upper = rrelu_bounds(lower, upper, "rrelu")
    if not training then return tide.where(x:gt(0), x, x * ((lower + upper) / 2)) end
    local a = tide.rand(x:shape(), { dtype = x:dtype(), device = x:device() }) * (upper - lower) + lower
    return tide.where(x:gt(0), x, x * a)
  end

  --- F.gumbel_softmax(logits, {tau = 1, hard = false, dim = -1}): a sample
  -- of the Gumbel-softmax distribution, softmax((logits + g) / tau) along dim
  -- with g drawn from Gumbel(0, 1) (tide's generator). With hard, the one-hot
  -- vector of its largest element, with the soft sample's gradient (the
  -- straight-through estimator: y_hard - y_soft:detach() + y_soft).
  -- @param logits a floating-point tensor of unnormalised log-probabilities
  -- @param opts {tau = 1 (positive), hard = false, dim = -1}
  -- @usage local y = F.gumbel_softmax(logits, { tau = 0.5, hard = true })
  function F.gumbel_softmax(logits, opts)
    local fname = "gumbel_softmax"
    opts = options(opts, fname)
    need_float(logits, fname, "logits")
    local tau = need_number(opts.tau == nil and 1 or opts.tau, fname, "tau")
    if not (tau > 0) then fail(string.format("%s: tau must be positive, got %g", fname, tau)) end
    if logits:dim() == 0 then fail(fname .. ": logits must have at least 1 dimension, got a 0-d tensor") end
    local dim = need_dim(opts.dim == nil and -1 or opts.dim, logits:dim(), shape_str(logits), fname)
    -- g = -log(e), e ~ Exp(1) as -log(1 - u), u ~ U[0, 1): e is 0 only for u = 0, kept finite by the clamp
    local u = tide.rand(logits:shape(), { dtype = logits:dtype(), device = logits:device() })
    local g = -((-u):log1p():neg():clamp(1e-30):log())
    local y = ((logits + g) / tau):softmax(dim)
    if not opts.hard then return y end
    local _, idx = y:max(dim, true)
    local hard = tide.zeros(logits:shape(), { dtype = logits:dtype(), device = logits:device() }):scatter(dim, idx, 1)
    return hard - y:detach() + y
  end

  --- F.prelu(x, weight): x where x > 0, else weight * x, with one weight or
  -- one per channel (dimension 2 of x).
  -- @param x a floating-point tensor
  -- @param weight a 1-d tensor of 1 or C elements
  -- @usage F.prelu(x, tide.full({ 1 }, 0.25))
  function F.prelu(x, weight)
    need_float(x, "prelu", "input")
    need_float(weight, "prelu", "weight")
    if weight:dim() ~= 1 then
      fail(string.format("prelu: weight must be 1-d, got shape %s", shape_str(weight)))
    end
    local w, n = weight, weight:size(1)
    if n ~= 1 then
      local c = x:dim() >= 2 and x:size(2) or 1
      if x:dim() == 0 or n ~= c then
        fail(string.format("prelu: weight of %d parameters does not match the %d channels (dimension 2) of input %s",
          n, c, shape_str(x)))
      end
      local shape = { n }
      for i = 3, x:dim() do shape[i - 1] = 1 end
      w = weight:view(shape)
    end
    return tide.where(x:gt(0), x, x * w)
  end

  --- F.glu(x, dim): a * sigmoid(b), a and b the two halves of x along dim.
  -- @param x a floating-point tensor, of even size along dim
  -- @param dim default -1
  -- @usage F.glu(x, 2)
  function F.glu(x, dim)
    need_float(x, "glu", "input")
    dim = need_dim(dim or -1, x:dim(), shape_str(x), "glu")
    local n = x:size(dim)
    if n % 2 ~= 0 then
      fail(string.format("glu: dimension %d of input %s must have an even size, got %d", dim, shape_str(x), n))
    end
    return x:narrow(dim, 1, n / 2) * x:narrow(dim, n / 2 + 1, n / 2):sigmoid()
  end

  --- F.softmin(x, dim, dtype): softmax(-x) along dim (required).
  -- @usage F.softmin(x, -1)
  function F.softmin(x, dim, dtype)
    need_float(x, "softmin", "input")
    if dim == nil then fail("softmin: a dimension is required") end
    return (-x):softmax(dim, dtype)
  end

  -- -- norms and similarities ---------------------------------------------------------------

  --- F.normalize(x, {p = 2, dim = 2, eps = 1e-12}): x / max(||x||_p, eps)
  -- along dim (1-based: the default 2 is PyTorch's dim=1).
  -- @param x a floating-point tensor
  -- @param opts {p = 2 (a positive number or math.huge), dim = 2, eps = 1e-12}
  -- @usage F.normalize(emb, { dim = -1 })
  function F.normalize(x, opts)
    opts = options(opts, "normalize")
    need_float(x, "normalize", "input")
    local p = need_p(opts.p or 2, "normalize")
    local dim = need_dim(opts.dim or 2, x:dim(), shape_str(x), "normalize")
    local eps = need_number(opts.eps or 1e-12, "normalize", "eps")
    return x / pnorm(x, p, dim, true):clamp(eps)
  end

  --- F.cosine_similarity(x1, x2, {dim = 2, eps = 1e-8}): the sum along dim of
  -- (x1 / max(||x1||, eps)) (x2 / max(||x2||, eps)), x1 and x2 broadcast together.
  -- @param x1 a floating-point tensor
  -- @param x2 a tensor that broadcasts with x1
  -- @param opts {dim = 2 (1-based: PyTorch's dim=1), eps = 1e-8}
  -- @return the shape of x1 and x2 broadcast, without dim
  -- @usage F.cosine_similarity(a, b, { dim = -1 })
  function F.cosine_similarity(x1, x2, opts)
    local fname = "cosine_similarity"
    opts = options(opts, fname)
    need_float(x1, fname, "x1")
    need_float(x2, fname, "x2")
    local shape = broadcast_shape(x1, x2)
    if not shape then
      fail(string.format("%s: x1 of shape %s and x2 of shape %s do not broadcast", fname, shape_str(x1),
        shape_str(x2)))
    end
    local dim = need_dim(opts.dim or 2, #shape, "[" .. table.concat(shape, ",") .. "]", fname)
    local eps = need_number(opts.eps or 1e-8, fname, "eps")
    local a, b = x1:expand(shape), x2:expand(shape)
    return ((a / pnorm(a, 2, dim, true):clamp(eps)) * (b / pnorm(b, 2, dim, true):clamp(eps))):sum(dim)
  end

  --- F.pairwise_distance(x1, x2, {p = 2, eps = 1e-6, keepdim = false}):
  -- ||x1 - x2 + eps||_p along the last dimension, x1 and x2 broadcast together.
  -- @param x1 a floating-point tensor
  -- @param x2 a tensor that broadcasts with x1
  -- @param opts {p = 2 (a positive number or math.huge), eps = 1e-6, keepdim = false}
  -- @usage F.pairwise_distance(a, b)
  function F.pairwise_distance(x1, x2, opts)
    local fname = "pairwise_distance"
    opts = options(opts, fname)
    need_float(x1, fname, "x1")
    need_float(x2, fname, "x2")
    if not broadcast_shape(x1, x2) then
      fail(string.format("%s: x1 of shape %s and x2 of shape %s do not broadcast", fname, shape_str(x1),
        shape_str(x2)))
    end
    local p = need_p(opts.p or 2, fname)
    local d = x1 - x2 + need_number(opts.eps or 1e-6, fname, "eps")
    if d:dim() == 0 then return d:abs() end
    return pnorm(d, p, -1, opts.keepdim and true or false)
  end

  --- F.pdist(x, p): tide.pdist, the p-norm distances between the rows of x
  -- [N, M] (each pair i < j), as torch.nn.functional.pdist.
  -- @usage F.pdist(points, 2)
  F.pdist = tide.pdist

  -- -- modules ---------------------------------------------------------------------------------

  -- Activations without options.
  for name, f in pairs { SELU = F.selu, ReLU6 = F.relu6, Hardsigmoid = F.hardsigmoid, Hardswish = F.hardswish,
                         Mish = F.mish, Softsign = F.softsign, LogSigmoid = F.logsigmoid,
                         Tanhshrink = F.tanhshrink } do
    local cls = Module:extend(name)
    function cls:forward(x) return f(x) end
    nn[name] = cls
  end

  -- A module of one numeric option: Class(value), forward f(x, value).
  local function one_option(name, key, default, f, nonzero)
    local cls = Module:extend(name)
    function cls:init(v)
      if v == nil then v = default end
      self[key] = need_number(v, name, key)
      if nonzero and v == 0 then fail(string.format("%s: %s must not be 0", name, key)) end
    end
    function cls:forward(x) return f(x, self[key]) end
    function cls:extra_repr() return string.format("%s=%g", key, self[key]) end
    nn[name] = cls
  end

  --- nn.LeakyReLU(negative_slope = 0.01): F.leaky_relu as a module.
  -- @usage local act = nn.LeakyReLU(0.2)
  one_option("LeakyReLU", "negative_slope", 0.01, F.leaky_relu)
  --- nn.ELU(alpha = 1): F.elu as a module.
  -- @usage local act = nn.ELU()
  one_option("ELU", "alpha", 1, F.elu)
  --- nn.CELU(alpha = 1): F.celu as a module.
  -- @usage local act = nn.CELU(0.5)
  one_option("CELU", "alpha", 1, F.celu, true)

  --- nn.Hardshrink(lambd = 0.5): F.hardshrink as a module.
  -- @usage local act = nn.Hardshrink(0.1)
  one_option("Hardshrink", "lambd", 0.5, F.hardshrink)

  --- nn.Softshrink(lambd = 0.5): F.softshrink as a module.
  -- @usage local act = nn.Softshrink(0.1)
  local Softshrink = Module:extend("Softshrink")
  function Softshrink:init(lambd) self.lambd = need_lambd(lambd, "Softshrink") end
  function Softshrink:forward(x) return F.softshrink(x, self.lambd) end
  function Softshrink:extra_repr() return string.format("lambd=%g", self.lambd) end
  nn.Softshrink = Softshrink

  --- nn.RReLU(lower = 1/8, upper = 1/3): F.rrelu, with random slopes in
  -- training mode and their mean in evaluation.
  -- @usage local act = nn.RReLU(0.1, 0.3)
  local RReLU = Module:extend("RReLU")
  function RReLU:init(lower, upper) self.lower, self.upper = rrelu_bounds(lower, upper, "RReLU") end
  function RReLU:forward(x) return F.rrelu(x, self.lower, self.upper, self.training) end
  function RReLU:extra_repr() return string.format("lower=%g, upper=%g", self.lower, self.upper) end
  nn.RReLU = RReLU

  --- nn.Softmax2d(): softmax over the channels (dimension -3) of [N, C, H, W]
  -- or [C, H, W] input, at each position.
  -- @usage local sm = nn.Softmax2d()
  local Softmax2d = Module:extend("Softmax2d")
  function Softmax2d:forward(x)
    need_float(x, "Softmax2d", "input")
    if x:dim() ~= 3 and x:dim() ~= 4 then
      fail(string.format("Softmax2d: expects a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape %s", shape_str(x)))
    end
    return x:softmax(-3)
  end
  nn.Softmax2d = Softmax2d

  --- nn.Softplus(beta = 1, threshold = 20): F.softplus as a module.
  -- @usage local act = nn.Softplus(2)
  local Softplus = Module:extend("Softplus")
  function Softplus:init(beta, threshold)
    self.beta = need_number(beta == nil and 1 or beta, "Softplus", "beta")
    self.threshold = need_number(threshold == nil and 20 or threshold, "Softplus", "threshold")
    if self.beta == 0 then fail("Softplus: beta must not be 0") end
  end
  function Softplus:forward(x) return F.softplus(x, self.beta, self.threshold) end
  function Softplus:extra_repr() return string.format("beta=%g, threshold=%g", self.beta, self.threshold) end
  nn.Softplus = Softplus

  --- nn.Hardtanh(min_val = -1, max_val = 1): F.hardtanh as a module.
  -- @usage local act = nn.Hardtanh(-2, 2)
  local Hardtanh = Module:extend("Hardtanh")
  function Hardtanh:init(min_val, max_val)
    self.min_val = need_number(min_val == nil and -1 or min_val, "Hardtanh", "min_val")
    self.max_val = need_number(max_val == nil and 1 or max_val, "Hardtanh", "max_val")
    if self.max_val < self.min_val then
      fail(string.format("Hardtanh: max_val (%g) must not be less than min_val (%g)", self.max_val, self.min_val))
    end
  end
  function Hardtanh:forward(x) return F.hardtanh(x, self.min_val, self.max_val) end
  function Hardtanh:extra_repr() return string.format("min_val=%g, max_val=%g", self.min_val, self.max_val) end
  nn.Hardtanh = Hardtanh

  --- nn.Threshold(threshold, value): F.threshold as a module.
  -- @usage local act = nn.Threshold(0.1, 20)
  local Threshold = Module:extend("Threshold")
  function Threshold:init(threshold, value)
    self.threshold = need_number(threshold, "Threshold", "threshold")
    self.value = need_number(value, "Threshold", "value")
  end
  function Threshold:forward(x) return F.threshold(x, self.threshold, self.value) end
  function Threshold:extra_repr() return string.format("threshold=%g, value=%g", self.threshold, self.value) end
  nn.Threshold = Threshold

  --- nn.PReLU(num_parameters = 1, init = 0.25, opts): F.prelu with a learnable
  -- weight [num_parameters] (one, or one per channel) starting at init.
  -- @param num_parameters 1 or the number of channels
  -- @param init the weight's initial value
  -- @param opts {dtype = "float32", device}
  -- @usage local act = nn.PReLU(16)
  local PReLU = Module:extend("PReLU")
  function PReLU:init(num_parameters, init, opts)
    num_parameters = num_parameters == nil and 1 or num_parameters
    if type(num_parameters) ~= "number" or num_parameters < 1 or num_parameters ~= math.floor(num_parameters) then
      fail("PReLU: num_parameters must be a positive integer, got " .. tostring(num_parameters))
    end
    self.num_parameters = num_parameters
    self.init_value = need_number(init == nil and 0.25 or init, "PReLU", "init")
    self:register_parameter("weight", nn._new_tensor({ num_parameters }, nn._opts_of(opts, "PReLU")))
    self:reset_parameters()
  end
  --- Sets the weight back to init.
  -- @usage act:reset_parameters()
  function PReLU:reset_parameters() nn.init.constant_(self.weight, self.init_value) end
  function PReLU:forward(x) return F.prelu(x, self.weight) end
  function PReLU:extra_repr() return "num_parameters=" .. self.num_parameters end
  nn.PReLU = PReLU

  local dim_module = nn._dim_module   -- Class(dim), forward f(x, dim)
  --- nn.GLU(dim = -1): F.glu as a module.
  -- @usage local act = nn.GLU()
  dim_module("GLU", -1, F.glu)
  --- nn.Softmin(dim): F.softmin along dim (required) as a module.
  -- @usage local sm = nn.Softmin(-1)
  dim_module("Softmin", nil, F.softmin)

  --- nn.CosineSimilarity(dim = 2, eps = 1e-8): F.cosine_similarity as a module
  -- (also nn.CosineSimilarity({dim = ..., eps = ...})).
  -- @usage local cos = nn.CosineSimilarity(-1)
  local CosineSimilarity = Module:extend("CosineSimilarity")
  function CosineSimilarity:init(dim, eps)
    if type(dim) == "table" then dim, eps = dim.dim, dim.eps end
    dim = dim == nil and 2 or dim
    if type(dim) ~= "number" or dim == 0 or dim ~= math.floor(dim) then
      fail("CosineSimilarity: dim must be a nonzero integer (1-based, negative from the end), got " .. tostring(dim))
    end
    self.dim = dim
    self.eps = need_number(eps == nil and 1e-8 or eps, "CosineSimilarity", "eps")
  end
  function CosineSimilarity:forward(x1, x2)
    return F.cosine_similarity(x1, x2, { dim = self.dim, eps = self.eps })
  end
  function CosineSimilarity:extra_repr() return string.format("dim=%d, eps=%g", self.dim, self.eps) end
  nn.CosineSimilarity = CosineSimilarity

  --- nn.PairwiseDistance(p = 2, eps = 1e-6, keepdim = false): F.pairwise_distance
  -- as a module (also nn.PairwiseDistance({p = ..., eps = ..., keepdim = ...})).
  -- @usage local dist = nn.PairwiseDistance(1)
  local PairwiseDistance = Module:extend("PairwiseDistance")
  function PairwiseDistance:init(p, eps, keepdim)
    if type(p) == "table" then p, eps, keepdim = p.p, p.eps, p.keepdim end
    self.norm = need_p(p == nil and 2 or p, "PairwiseDistance")
    self.eps = need_number(eps == nil and 1e-6 or eps, "PairwiseDistance", "eps")
    self.keepdim = keepdim and true or false
  end
  function PairwiseDistance:forward(x1, x2)
    return F.pairwise_distance(x1, x2, { p = self.norm, eps = self.eps, keepdim = self.keepdim })
  end
  function PairwiseDistance:extra_repr()
    return string.format("p=%g, eps=%g, keepdim=%s", self.norm, self.eps, tostring(self.keepdim))
  end
  nn.PairwiseDistance = PairwiseDistance
end
