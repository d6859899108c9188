-- nn activation, loss and utils: the activations, similarities and losses of
-- tide.nn.activation and tide.nn.loss against plain-Lua float64 references
-- (negative, zero and large inputs), their modules against the functions,
-- gradcheck away from kinks, reductions, the errors of bad options and
-- shapes; clip_grad_norm_ / clip_grad_value_ and the parameter-vector
-- conversions of tide.nn.utils, eager and inside tide.jit.compile.
local tide = require "tide"
local H = require "spec.helpers"
local nn = tide.nn
local F = nn.functional

local gradcheck = tide.autograd.gradcheck
local exp, log, abs, max, min = math.exp, math.log, math.abs, math.max, math.min

local t64 = H.t64
local function map(v, f)
  local r = {}
  for i, x in ipairs(v) do r[i] = type(x) == "table" and map(x, f) or f(x) end
  return r
end
local function map2(a, b, f)
  local r = {}
  for i = 1, #a do r[i] = type(a[i]) == "table" and map2(a[i], b[i], f) or f(a[i], b[i]) end
  return r
end
local function log1p(u)   -- accurate for small u, as LuaJIT's math has no log1p
  if abs(u) < 1e-5 then return u - u * u / 2 + u * u * u / 3 end
  return log(1 + u)
end
local function finite(t)
  for _, v in ipairs(H.flat(t:totable())) do
    if v ~= v or v == math.huge or v == -math.huge then return false end
  end
  return true
end

-- -- plain-Lua references --------------------------------------------------------------------
local SELU_A, SELU_S = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
local function sp(x, b, th)
  b, th = b or 1, th or 20
  if b * x > th then return x end
  return log1p(exp(b * x)) / b
end
local function hsig(x) return x <= -3 and 0 or x >= 3 and 1 or x / 6 + 0.5 end
local R = {
  leaky_relu = function(x, s) s = s or 0.01; return x > 0 and x or s * x end,
  elu = function(x, a) a = a or 1; return x > 0 and x or a * (exp(x) - 1) end,
  selu = function(x) return SELU_S * (x > 0 and x or SELU_A * (exp(x) - 1)) end,
  celu = function(x, a) a = a or 1; return x > 0 and x or a * (exp(x / a) - 1) end,
  softplus = sp,
  hardtanh = function(x, lo, hi) return min(max(x, lo or -1), hi or 1) end,
  relu6 = function(x) return min(max(x, 0), 6) end,
  hardsigmoid = hsig,
  hardswish = function(x) return x * hsig(x) end,
  mish = function(x) return x * math.tanh(sp(x)) end,
  softsign = function(x) return x / (1 + abs(x)) end,
  logsigmoid = function(x) return x < 0 and x - log1p(exp(x)) or -log1p(exp(-x)) end,
  tanhshrink = function(x) return x - math.tanh(x) end,
  threshold = function(x, th, v) return x > th and x or v end,
}

-- name, extra arguments of F.name, the module, and whether the point set avoids kinks for gradcheck
local ACTS = {
  { "leaky_relu", {}, nn.LeakyReLU() }, { "leaky_relu", { 0.2 }, nn.LeakyReLU(0.2) },
  { "elu", {}, nn.ELU() }, { "elu", { 0.5 }, nn.ELU(0.5) },
  { "selu", {}, nn.SELU() },
  { "celu", {}, nn.CELU() }, { "celu", { 2 }, nn.CELU(2) },
  { "softplus", {}, nn.Softplus() }, { "softplus", { 2, 5 }, nn.Softplus(2, 5) },
  { "hardtanh", {}, nn.Hardtanh() }, { "hardtanh", { -2, 3 }, nn.Hardtanh(-2, 3) },
  { "relu6", {}, nn.ReLU6() }, { "hardsigmoid", {}, nn.Hardsigmoid() }, { "hardswish", {}, nn.Hardswish() },
  { "mish", {}, nn.Mish() }, { "softsign", {}, nn.Softsign() }, { "logsigmoid", {}, nn.LogSigmoid() },
  { "tanhshrink", {}, nn.Tanhshrink() }, { "threshold", { 0.1, 20 }, nn.Threshold(0.1, 20) },
}
local XS = { -100, -20.5, -3, -1, -0.25, 0, 0.5, 2, 3.5, 6.5, 21, 100 }
local XG = { -25, -4.2, -2.5, -0.7, 0.3, 1.9, 4.4, 7, 25 }   -- away from every kink

describe("nn activations", function()
  it("match float64 references at negative, zero and large inputs", function()
    for _, a in ipairs(ACTS) do
      local name, args = a[1], a[2]
      local got = F[name](t64(XS), unpack(args))
      H.close(got, map(XS, function(x) return R[name](x, unpack(args)) end), 1e-12, 1e-15,
        name .. "(" .. table.concat(args, ",") .. ")")
    end
    -- a few by hand
    H.close(F.leaky_relu(t64({ -2, 0, 3 })), { -0.02, 0, 3 }, 1e-15)
    H.close(F.softplus(t64({ 0, 25, -100 })), { log(2), 25, 3.720075976020836e-44 }, 1e-12, 0)
    H.close(F.logsigmoid(t64({ 0, -100, 100 })), { -log(2), -100, -3.720075976020836e-44 }, 1e-12, 0)
    H.close(F.hardswish(t64({ -3, 1.5, 3 })), { 0, 1.125, 3 }, 1e-15)
    H.close(F.threshold(t64({ 1, 0.1, 0.2 }), 0.1, -7), { 1, -7, 0.2 }, 1e-15)
  end)

  it("stay finite in value and gradient at +-100 in float32", function()
    for _, a in ipairs(ACTS) do
      local x = tide.tensor({ -100, -30, 0.5, 30, 100 }):requires_grad_()
      local y = F[a[1]](x, unpack(a[2]))
      assert.are.equal("float32", y:dtype())
      y:sum():backward()
      assert.is_true(finite(y), a[1] .. " value")
      assert.is_true(finite(x.grad), a[1] .. " gradient")
    end
    local x = tide.tensor({ -100, 100 }):requires_grad_()
    F.logsigmoid(x):sum():backward()
    H.close(x.grad, { 1, 0 }, 1e-6)   -- d/dx log sigmoid(x) = 1 - sigmoid(x)
  end)

  it("give torch's gradients at their kinks", function()
    local cases = {
      { "relu6", { -1, 0, 3, 6, 7 }, { 0, 0, 1, 0, 0 } },
      { "hardtanh", { -1, 0, 1 }, { 0, 1, 0 } },
      { "hardsigmoid", { -3, 0, 3 }, { 0, 1 / 6, 0 } },
      { "hardswish", { -4, -3, 3, 4 }, { 0, -0.5, 1.5, 1 } },
      { "leaky_relu", { 0 }, { 0.01 } },
      { "elu", { 0 }, { 1 } },
      { "threshold", { 0.1 }, { 0 }, { 0.1, 20 } },
    }
    for _, c in ipairs(cases) do
      local x = t64(c[2], true)
      F[c[1]](x, unpack(c[4] or {})):sum():backward()
      H.close(x.grad, c[3], 1e-15, 0, c[1])
    end
    local x, w = t64({ 0, -2 }, true), t64({ 0.25 }, true)
    F.prelu(x, w):sum():backward()
    H.close(x.grad, { 0.25, 0.25 }, 1e-15)
    H.close(w.grad, { -2 }, 1e-15)
  end)

  it("module forms give the functional forms' values", function()
    local x = t64(XS)
    for _, a in ipairs(ACTS) do H.equal(a[3](x), F[a[1]](x, unpack(a[2])), a[1]) end
    local x2 = t64({ { 1, -2, 3, 4 }, { 0.5, 0, -1, 2 } })
    H.equal(nn.GLU()(x2), F.glu(x2))
    H.equal(nn.GLU(1)(x2), F.glu(x2, 1))
    H.equal(nn.Softmin(2)(x2), F.softmin(x2, 2))
    H.equal(nn.CosineSimilarity()(x2, x2 * 2 + 1), F.cosine_similarity(x2, x2 * 2 + 1))
    H.equal(nn.CosineSimilarity({ dim = 1, eps = 0.5 })(x2, x2 + 1), F.cosine_similarity(x2, x2 + 1, { dim = 1, eps = 0.5 }))
    H.equal(nn.PairwiseDistance(1, 0, true)(x2, -x2), F.pairwise_distance(x2, -x2, { p = 1, eps = 0, keepdim = true }))
  end)

  it("print their options", function()
    assert.are.equal("LeakyReLU(negative_slope=0.2)", tostring(nn.LeakyReLU(0.2)))
    assert.are.equal("Softplus(beta=2, threshold=5)", tostring(nn.Softplus(2, 5)))
    assert.are.equal("Hardtanh(min_val=-1, max_val=1)", tostring(nn.Hardtanh()))
    assert.are.equal("Threshold(threshold=0.1, value=20)", tostring(nn.Threshold(0.1, 20)))
    assert.are.equal("PReLU(num_parameters=3)", tostring(nn.PReLU(3)))
    assert.are.equal("GLU(dim=-1)", tostring(nn.GLU()))
    assert.are.equal("Softmin(dim=2)", tostring(nn.Softmin(2)))
    assert.are.equal("Mish()", tostring(nn.Mish()))
    assert.are.equal("PairwiseDistance(p=inf, eps=1e-06, keepdim=false)", tostring(nn.PairwiseDistance(math.huge)))
  end)

  it("take non-contiguous inputs and empty batches", function()
    local vals = { { -2, 0.5, 3 }, { 1, -0.25, 0 } }
    for name, x in pairs(H.layouts(t64(vals))) do
      H.close(F.elu(x), map(vals, R.elu), 1e-14, 0, name)
      H.close(F.mish(x), map(vals, R.mish), 1e-14, 0, name)
      H.close(F.normalize(x, { dim = 1 }), F.normalize(t64(vals), { dim = 1 }), 1e-15, 0, name)
    end
    assert.are.same({ 0, 3 }, F.softplus(tide.zeros(0, 3)):shape())
    assert.are.same({ 0, 3 }, F.normalize(tide.zeros(0, 3)):shape())
    assert.are.same({ 0 }, F.cosine_similarity(tide.zeros(0, 3), tide.zeros(0, 3)):shape())
    assert.are.same({ 0, 2 }, F.glu(tide.zeros(0, 4)):shape())
  end)

  it("gradcheck in float64 away from kinks", function()
    for _, a in ipairs(ACTS) do
      gradcheck(function(x) return F[a[1]](x, unpack(a[2])) end, { t64(XG, true) })
    end
    gradcheck(function(x, w) return F.prelu(x, w) end, { t64({ { -1.5, 2 }, { 0.5, -0.3 } }, true), t64({ 0.25, -0.5 }, true) })
    gradcheck(function(x) return F.glu(x, 1) end, { t64({ { -1.5, 2 }, { 0.5, -0.3 } }, true) })
    gradcheck(function(x) return F.softmin(x, -1) end, { t64({ { -1.5, 2, 0.1 }, { 0.5, -0.3, 4 } }, true) })
  end)

  describe("PReLU", function()
    it("applies one or one weight per channel, and its weight is a parameter", function()
      local x = t64({ { { -2, 1 } }, { { 4, -8 } } }):transpose(2, 3)   -- [2, 2, 1]: channels along dimension 2
      H.close(F.prelu(x, t64({ 0.5 })), { { { -1 }, { 1 } }, { { 4 }, { -4 } } }, 0)
      H.close(F.prelu(x, t64({ 0.5, -1 })), { { { -1 }, { 1 } }, { { 4 }, { 8 } } }, 0)
      local m = nn.PReLU(2)
      assert.are.same({ "weight" }, (function() local r = {} for k in m:named_parameters() do r[#r + 1] = k end return r end)())
      H.equal(m.weight, { 0.25, 0.25 })
      assert.is_true(m.weight.requires_grad)
      H.equal(nn.PReLU(1, 0.1, { dtype = "float64" }).weight, { 0.1 })
      local y = m(x:float())
      y:sum():backward()
      H.close(m.weight.grad, { -2, -8 }, 0)   -- the sum of the negative inputs of each channel
      H.close(F.prelu(t64({ -4, 2 }), t64({ 0.25 })), { -1, 2 }, 0)
    end)

    it("rejects weights that do not match the channels", function()
      assert.has_error(function() F.prelu(t64({ { 1, 2, 3 } }), t64({ 1, 2 })) end,
        "prelu: weight of 2 parameters does not match the 3 channels (dimension 2) of input [1,3]")
      assert.has_error(function() F.prelu(t64({ 1, 2 }), t64({ 1, 2 })) end,
        "prelu: weight of 2 parameters does not match the 1 channels (dimension 2) of input [2]")
      assert.has_error(function() F.prelu(t64({ 1, 2 }), t64({ { 1 } })) end, "prelu: weight must be 1-d, got shape [1,1]")
      assert.has_error(function() nn.PReLU(0) end, "PReLU: num_parameters must be a positive integer, got 0")
    end)
  end)

  it("glu and softmin", function()
    local x = t64({ { 1, 2, -3, 4 } })
    local s = function(v) return 1 / (1 + exp(-v)) end
    H.close(F.glu(x), { { 1 * s(-3), 2 * s(4) } }, 1e-15)
    H.close(F.glu(t64({ { 1, 2 }, { -3, 4 } }), 1), { { s(-3), 2 * s(4) } }, 1e-15)
    local e = { exp(-1), exp(-2), exp(3) }
    local z = e[1] + e[2] + e[3]
    H.close(F.softmin(t64({ 1, 2, -3 }), 1), { e[1] / z, e[2] / z, e[3] / z }, 1e-14)
  end)

  describe("norms and similarities", function()
    it("normalize by the p-norm along dim, at least eps", function()
      local x = t64({ { 3, -4 }, { 0, 0 }, { 1e-20, 0 } })
      H.close(F.normalize(x), { { 0.6, -0.8 }, { 0, 0 }, { 1e-8, 0 } }, 1e-14)
      H.close(F.normalize(x, { p = 1 }), { { 3 / 7, -4 / 7 }, { 0, 0 }, { 1e-8, 0 } }, 1e-14)
      H.close(F.normalize(x, { p = math.huge }), { { 0.75, -1 }, { 0, 0 }, { 1e-8, 0 } }, 1e-14)
      H.close(F.normalize(x, { p = 3, dim = 1 }),
        { { 3 / 3, -1 }, { 0, 0 }, { 1e-20 / 3, 0 } }, 1e-12)
      local x3 = t64({ { 1, 2 }, { -2, 2 } })
      H.close(F.normalize(x3, { dim = 1, eps = 10 }), { { 0.1, 0.2 }, { -0.2, 0.2 } }, 1e-14)
      -- a zero row divides by eps, in value and gradient (no NaN from the norm's 0/0)
      local z = tide.zeros(2, 3):requires_grad_()
      F.normalize(z):sum():backward()
      H.close(z.grad, { { 1e12, 1e12, 1e12 }, { 1e12, 1e12, 1e12 } }, 1e-6)
      gradcheck(function(v) return F.normalize(v) end, { t64({ { 3, -4, 1 }, { 0.5, 0.2, -0.1 } }, true) })
      gradcheck(function(v) return F.normalize(v, { p = 3, dim = 1 }) end, { t64({ { 3, -4, 1 }, { 0.5, 0.2, -0.1 } }, true) })
    end)

    it("cosine_similarity along dim, broadcasting, with eps on each norm", function()
      local a, b = t64({ { 1, 0 }, { 1, 1 }, { 0, 0 } }), t64({ { 1, 0 }, { 0, 2 }, { 1, 1 } })
      H.close(F.cosine_similarity(a, b), { 1, 1 / math.sqrt(2), 0 }, 1e-14)
      H.close(F.cosine_similarity(a, t64({ 3, 4 })), { 0.6, 7 / (5 * math.sqrt(2)), 0 }, 1e-14)
      H.close(F.cosine_similarity(t64({ 1, 2 }), t64({ 2, 4 }), { dim = 1 }), 1, 1e-14)
      H.close(F.cosine_similarity(t64({ 1e-9, 0 }), t64({ 1, 0 }), { dim = 1, eps = 1e-3 }), 1e-6, 1e-12)
      gradcheck(function(x, y) return F.cosine_similarity(x, y) end,
        { t64({ { 1, -2, 0.5 }, { 0.3, 0.2, 2 } }, true), t64({ { 2, 1, -1 }, { 1, 1, 1 } }, true) })
    end)

    it("pairwise_distance along the last dimension, with eps added to the difference", function()
      local a, b = t64({ { 1, 2 }, { 0, 0 } }), t64({ { 4, 6 }, { 0, 0 } })
      H.close(F.pairwise_distance(a, b), { math.sqrt((-3 + 1e-6) ^ 2 + (-4 + 1e-6) ^ 2), math.sqrt(2) * 1e-6 }, 1e-12)
      H.close(F.pairwise_distance(a, b, { p = 1, eps = 0 }), { 7, 0 }, 1e-15)
      H.close(F.pairwise_distance(a, b, { p = math.huge, eps = 0, keepdim = true }), { { 4 }, { 0 } }, 1e-15)
      H.close(F.pairwise_distance(t64({ 1, 2 }), t64({ 1, 0 }), { eps = 0 }), 2, 1e-15)
      gradcheck(function(x, y) return F.pairwise_distance(x, y, { p = 3 }) end,
        { t64({ { 1, -2, 0.5 }, { 0.3, 0.2, 2 } }, true), t64({ { 2, 1, -1 }, { 1, 1, 1 } }, true) })
    end)
  end)

  it("reject bad options and shapes with messages naming them", function()
    local x = t64({ { 1, 2, 3 } })
    assert.has_error(function() F.leaky_relu(x, "a") end, "leaky_relu: negative_slope must be a number, got string")
    assert.has_error(function() nn.LeakyReLU("a") end, "LeakyReLU: negative_slope must be a number, got string")
    assert.has_error(function() F.elu(tide.tensor({ 1 }, "int64")) end,
      "elu: input must be a floating-point tensor, got int64")
    assert.has_error(function() F.selu(3) end, "selu: input must be a tensor, got number")
    assert.has_error(function() F.celu(x, 0) end, "celu: alpha must not be 0")
    assert.has_error(function() nn.CELU(0) end, "CELU: alpha must not be 0")
    assert.has_error(function() nn.Softplus(0) end, "Softplus: beta must not be 0")
    assert.has_error(function() F.hardtanh(x, 1, -1) end, "hardtanh: max_val (-1) must not be less than min_val (1)")
    assert.has_error(function() nn.Hardtanh(2, 1) end, "Hardtanh: max_val (1) must not be less than min_val (2)")
    assert.has_error(function() nn.Threshold(0.5) end, "Threshold: value must be a number, got nil")
    assert.has_error(function() F.glu(x) end, "glu: dimension -1 of input [1,3] must have an even size, got 3")
    assert.has_error(function() F.glu(x, 3) end, "glu: dim 3 is out of range for input of shape [1,3]")
    assert.has_error(function() nn.Softmin() end,
      "Softmin: dim must be a nonzero integer (1-based, negative from the end), got nil")
    assert.has_error(function() F.softmin(x) end, "softmin: a dimension is required")
    assert.has_error(function() F.normalize(x, { p = 0 }) end, "normalize: p must be a positive number or math.huge, got 0")
    assert.has_error(function() F.normalize(t64({ 1, 2 })) end, "normalize: dim 2 is out of range for input of shape [2]")
    assert.has_error(function() F.normalize(x, 2) end, "normalize: options must be a table, got number")
    assert.has_error(function() F.cosine_similarity(x, t64({ 1, 2 })) end,
      "cosine_similarity: x1 of shape [1,3] and x2 of shape [2] do not broadcast")
    assert.has_error(function() F.cosine_similarity(x, x, { dim = 3 }) end,
      "cosine_similarity: dim 3 is out of range for input of shape [1,3]")
    assert.has_error(function() F.pairwise_distance(x, t64({ { 1, 2 } })) end,
      "pairwise_distance: x1 of shape [1,3] and x2 of shape [1,2] do not broadcast")
    assert.has_error(function() nn.PairwiseDistance(-1) end, "PairwiseDistance: p must be a positive number or math.huge, got -1")
  end)
end)

-- -- losses ----------------------------------------------------------------------------------------

local function sum(v) local s = 0 for _, x in ipairs(H.flat(v)) do s = s + x end return s end
local function mean(v) return sum(v) / #H.flat(v) end
local function xlogy(x, y) return x == 0 and 0 or x * log(y) end

-- checks F[name](... , reduction) for the three reductions against per-element references
local function check_reductions(name, args, per, opts)
  for _, r in ipairs { "none", "sum", "mean" } do
    local o = {}
    for k, v in pairs(opts or {}) do o[k] = v end
    o.reduction = r
    local a = { unpack(args) }
    a[#a + 1] = o
    local want = r == "none" and per or r == "sum" and sum(per) or mean(per)
    H.close(F[name](unpack(a)), want, 1e-12, 1e-14, name .. " " .. r)
  end
end

describe("nn losses", function()
  local X = { -100, -2, -0.5, 0, 0.3, 0.75, 3, 100 }
  local T = { -99, 0, 0.5, 1, -1, 0.75, 1.5, 101 }
  local per_d = function(f) return map2(X, T, function(x, t) return f(abs(x - t)) end) end

  it("l1, smooth_l1 and huber against references in every reduction", function()
    local x, t = t64(X), t64(T)
    check_reductions("l1_loss", { x, t }, per_d(function(d) return d end))
    for _, beta in ipairs { 1, 0.4, 0 } do
      check_reductions("smooth_l1_loss", { x, t }, per_d(function(d)
        return d < beta and 0.5 * d * d / beta or d - 0.5 * beta
      end), { beta = beta })
    end
    for _, delta in ipairs { 1, 0.4, 2.5 } do
      check_reductions("huber_loss", { x, t }, per_d(function(d)
        return d < delta and 0.5 * d * d or delta * (d - 0.5 * delta)
      end), { delta = delta })
    end
    H.close(F.smooth_l1_loss(t64({ 0.5, 3 }), t64({ 0, 0 }), "none"), { 0.125, 2.5 }, 1e-15)
    H.close(F.huber_loss(t64({ 0.5, 3 }), t64({ 0, 0 }), { delta = 2, reduction = "none" }), { 0.125, 4 }, 1e-15)
  end)

  it("binary_cross_entropy clamps each log at -100, with weights", function()
    local p = { 0, 1e-50, 0.2, 0.5, 0.9, 1, 1, 0 }
    local y = { 1, 1, 0, 1, 0.3, 1, 0, 0 }
    local clog = function(v) return max(log(v), -100) end
    local per = map2(p, y, function(a, b) return -(b * clog(a) + (1 - b) * clog(1 - a)) end)
    check_reductions("binary_cross_entropy", { t64(p), t64(y) }, per)
    H.close(F.binary_cross_entropy(t64({ 0, 0.5 }), t64({ 1, 1 }), "none"), { 100, log(2) }, 1e-14)
    local w = { 2, 0.5 }
    local pw, yw = t64({ { 0.2, 0.7 }, { 0.4, 0.1 } }), t64({ { 1, 0 }, { 0, 1 } })
    H.close(F.binary_cross_entropy(pw, yw, { weight = t64(w), reduction = "none" }),
      { { -2 * log(0.2), -0.5 * log(0.3) }, { -2 * log(0.6), -0.5 * log(0.1) } }, 1e-14)
    -- no NaN gradient at the clamped ends
    local e = t64({ 0, 1, 0.5 }, true)
    F.binary_cross_entropy(e, t64({ 1, 0, 1 }), "sum"):backward()
    assert.is_true(finite(e.grad))
    H.close(e.grad, { 0, 0, -2 }, 1e-14)
  end)

  it("kl_div: pointwise, batchmean, log_target, 0 where the target is 0", function()
    local inp = { { -1.2, -0.4, -2 }, { -0.1, -3, -0.7 } }
    local tg = { { 0.2, 0.8, 0 }, { 0.5, 0.25, 0.25 } }
    local per = map2(inp, tg, function(x, t) return xlogy(t, t) - t * x end)
    local flat = H.flat(per)
    local x, t = t64(inp), t64(tg)
    H.close(F.kl_div(x, t, "none"), per, 1e-14)
    H.close(F.kl_div(x, t), mean(flat), 1e-14)
    H.close(F.kl_div(x, t, "sum"), sum(flat), 1e-14)
    H.close(F.kl_div(x, t, "batchmean"), sum(flat) / 2, 1e-14)
    local lt = map(tg, function(v) return v == 0 and -5 or log(v) end)
    local per_l = map2(inp, lt, function(a, b) return exp(b) * (b - a) end)
    H.close(F.kl_div(x, t64(lt), { log_target = true, reduction = "none" }), per_l, 1e-14)
    H.close(F.kl_div(x, t64({ 0.2, 0.8, 0 }), "none"), { { per[1][1], per[1][2], 0 }, { 0.2 * (log(0.2) + 0.1),
      0.8 * (log(0.8) + 3), 0 } }, 1e-14)   -- target broadcasts
    local g = t64({ 0.3, 0 }, true)
    F.kl_div(t64({ -1, -1 }), g, "sum"):backward()
    assert.is_true(finite(g.grad))
  end)

  it("margin ranking, hinge embedding and cosine embedding losses", function()
    local x1, x2, y = { 0.5, -1, 2, 0 }, { 1, -2, 2.5, 0 }, { 1, -1, -1, 1 }
    local per = {}
    for i = 1, 4 do per[i] = max(0, -y[i] * (x1[i] - x2[i]) + 0.3) end
    check_reductions("margin_ranking_loss", { t64(x1), t64(x2), t64(y) }, per, { margin = 0.3 })
    H.close(F.margin_ranking_loss(t64(x1), t64(x2), tide.tensor({ 1, -1, -1, 1 }, "int64"), "none"),
      { 0.5, 1, 0, 0 }, 1e-15)

    local d, yh = { 0.3, 2, -0.5, 0.8, 1.5 }, { 1, -1, -1, 1, 0 }
    local ph = {}
    for i = 1, 5 do
      ph[i] = (yh[i] ~= 1 and max(0, 1.2 - d[i]) or 0) + (yh[i] ~= -1 and d[i] or 0)
    end
    check_reductions("hinge_embedding_loss", { t64(d), t64(yh) }, ph, { margin = 1.2 })

    local a = { { 1, 0, 2 }, { 0.5, -1, 1 }, { 0, 0, 0 }, { 1, 2, 3 } }
    local b = { { 2, 1, 0 }, { 1, 1, 1 }, { 1, 0, 0 }, { 1, 2, 3 } }
    local yc = { 1, -1, -1, -1 }
    local pc = {}
    for i = 1, 4 do
      local p, m1, m2 = 0, 1e-12, 1e-12
      for j = 1, 3 do p = p + a[i][j] * b[i][j]; m1 = m1 + a[i][j] ^ 2; m2 = m2 + b[i][j] ^ 2 end
      local c = p / math.sqrt(m1 * m2)
      pc[i] = yc[i] == 1 and 1 - c or max(0, c - 0.1)
    end
    check_reductions("cosine_embedding_loss", { t64(a), t64(b), t64(yc) }, pc, { margin = 0.1 })
    H.close(F.cosine_embedding_loss(t64({ 1, 0 }), t64({ 0, 1 }), t64(1)), 1, 1e-14)
  end)

  it("triplet margin loss, with p, eps and swap", function()
    local a = { { 0, 0 }, { 1, 1 }, { 2, -1 } }
    local p = { { 1, 0 }, { 1, 2 }, { 0, 0 } }
    local n = { { 0, 2 }, { 1, 1.5 }, { 2, 0 } }
    local function dist(u, v, pp, eps)
      local s = 0
      for j = 1, 2 do s = s + abs(u[j] - v[j] + eps) ^ pp end
      return s ^ (1 / pp)
    end
    local function per(pp, eps, swap, margin)
      local r = {}
      for i = 1, 3 do
        local dn = dist(a[i], n[i], pp, eps)
        if swap then dn = min(dn, dist(p[i], n[i], pp, eps)) end
        r[i] = max(0, dist(a[i], p[i], pp, eps) - dn + margin)
      end
      return r
    end
    check_reductions("triplet_margin_loss", { t64(a), t64(p), t64(n) }, per(2, 1e-6, false, 1))
    check_reductions("triplet_margin_loss", { t64(a), t64(p), t64(n) }, per(1, 0.01, true, 0.5),
      { p = 1, eps = 0.01, swap = true, margin = 0.5 })
    H.close(F.triplet_margin_loss(t64({ 0, 0 }), t64({ 3, 4 }), t64({ 0, 1 }), { eps = 0 }), 5, 1e-14)
  end)

  it("poisson and gaussian NLL", function()
    local x, t = { -1, 0, 0.5, 2 }, { 0, 1, 3, 2.5 }
    local function stirling(v) return v > 1 and v * log(v) - v + 0.5 * log(2 * math.pi * v) or 0 end
    check_reductions("poisson_nll_loss", { t64(x), t64(t) }, map2(x, t, function(a, b) return exp(a) - b * a end))
    local full = map2(x, t, function(a, b) return exp(a) - b * a + stirling(b) end)
    check_reductions("poisson_nll_loss", { t64(x), t64(t) }, full, { full = true })
    local rates = { 0.5, 1, 2.5, 0 }
    check_reductions("poisson_nll_loss", { t64(rates), t64(t) },
      map2(rates, t, function(a, b) return a - b * log(a + 0.1) end), { log_input = false, eps = 0.1 })

    local mu, y = { { 1, 2 }, { -1, 0.5 } }, { { 1.5, 1 }, { 0, 0.5 } }
    local var = { { 0.5, 2 }, { 1e-9, 1 } }
    local per = {}
    for i = 1, 2 do
      for j = 1, 2 do
        local v = max(var[i][j], 1e-6)
        per[#per + 1] = 0.5 * (log(v) + (mu[i][j] - y[i][j]) ^ 2 / v)
      end
    end
    check_reductions("gaussian_nll_loss", { t64(mu), t64(y), t64(var) }, { { per[1], per[2] }, { per[3], per[4] } })
    -- one variance per row, [N] or [N, 1]; a number; full
    local rowv = { 0.5, 2 }
    local prow = {}
    for i = 1, 2 do
      prow[i] = {}
      for j = 1, 2 do prow[i][j] = 0.5 * (log(rowv[i]) + (mu[i][j] - y[i][j]) ^ 2 / rowv[i]) end
    end
    H.close(F.gaussian_nll_loss(t64(mu), t64(y), t64(rowv), "none"), prow, 1e-14)
    H.close(F.gaussian_nll_loss(t64(mu), t64(y), t64({ { 0.5 }, { 2 } }), "none"), prow, 1e-14)
    H.close(F.gaussian_nll_loss(t64(mu), t64(y), 2, { full = true, reduction = "none" }),
      map2(mu, y, function(a, b) return 0.5 * (log(2) + (a - b) ^ 2 / 2) + 0.5 * log(2 * math.pi) end), 1e-14)
    -- the clamp keeps var's gradient (as torch's clamp under no_grad)
    local v = t64({ 1e-9, 4 }, true)
    F.gaussian_nll_loss(t64({ 0, 0 }), t64({ 0, 2 }), v, "sum"):backward()
    H.close(v.grad, { 0.5 / 1e-6, 0.5 / 4 - 0.5 * 4 / 16 }, 1e-9)
  end)

  it("modules give the functions' values and print their options", function()
    local x, t = t64({ { 0.2, 0.9 }, { 0.4, 0.6 } }), t64({ { 1, 0 }, { 0.5, 0.5 } })
    local pairs2 = {
      { nn.L1Loss("sum"), F.l1_loss, "sum" },
      { nn.SmoothL1Loss({ beta = 0.5 }), F.smooth_l1_loss, { beta = 0.5 } },
      { nn.HuberLoss({ delta = 0.1, reduction = "none" }), F.huber_loss, { delta = 0.1, reduction = "none" } },
      { nn.BCELoss({ weight = t64({ 1, 3 }) }), F.binary_cross_entropy, { weight = t64({ 1, 3 }) } },
      { nn.KLDivLoss({ reduction = "batchmean" }), F.kl_div, "batchmean" },
      { nn.HingeEmbeddingLoss({ margin = 0.5 }), F.hinge_embedding_loss, { margin = 0.5 } },
      { nn.PoissonNLLLoss({ log_input = false }), F.poisson_nll_loss, { log_input = false } },
    }
    for i, c in ipairs(pairs2) do H.equal(c[1](x, t), c[2](x, t, c[3]), "loss " .. i) end
    local y = t64({ 1, -1 })
    H.equal(nn.MarginRankingLoss({ margin = 0.2 })(x[1], x[2], y), F.margin_ranking_loss(x[1], x[2], y, { margin = 0.2 }))
    H.equal(nn.CosineEmbeddingLoss()(x, t, y), F.cosine_embedding_loss(x, t, y))
    H.equal(nn.TripletMarginLoss({ swap = true })(x, t, -x), F.triplet_margin_loss(x, t, -x, { swap = true }))
    H.equal(nn.GaussianNLLLoss({ full = true })(x, t, t + 1), F.gaussian_nll_loss(x, t, t + 1, { full = true }))
    assert.are.equal("L1Loss()", tostring(nn.L1Loss()))
    assert.are.equal("SmoothL1Loss(beta=0.5, reduction='sum')", tostring(nn.SmoothL1Loss({ beta = 0.5, reduction = "sum" })))
    assert.are.equal("TripletMarginLoss(p=1, swap=true)", tostring(nn.TripletMarginLoss({ p = 1, swap = true })))
    assert.are.equal("KLDivLoss(reduction='batchmean')", tostring(nn.KLDivLoss("batchmean")))
    local bce = nn.BCELoss({ weight = t64({ 1, 3 }) })
    assert.are.same({ "weight" }, (function() local r = {} for k in bce:named_buffers() do r[#r + 1] = k end return r end)())
  end)

  it("gradcheck in float64 away from kinks", function()
    local x = t64({ { -1.3, 0.4, 2.2 }, { 0.7, -0.2, 3.1 } }, true)
    local t = t64({ { 0.5, -0.45, 1 }, { 0.1, 0.9, 0.2 } }, true)
    for _, name in ipairs { "l1_loss", "smooth_l1_loss", "huber_loss" } do
      gradcheck(function(a, b) return F[name](a, b, "none") end, { x, t })
      gradcheck(function(a, b) return F[name](a, b, { beta = 0.5, delta = 0.5 }) end, { x, t })
    end
    local p = t64({ { 0.2, 0.7, 0.95 }, { 0.5, 0.1, 0.6 } }, true)
    local y = t64({ { 1, 0, 0.3 }, { 0, 1, 0.5 } }, true)
    gradcheck(function(a, b) return F.binary_cross_entropy(a, b, { weight = t64({ 1, 2, 0.5 }) }) end, { p, y })
    local logq = t64({ { -1.2, -0.4, -2 }, { -0.1, -3, -0.7 } }, true)
    gradcheck(function(a, b) return F.kl_div(a, b, "batchmean") end, { logq, p })
    gradcheck(function(a, b) return F.kl_div(a, b, { log_target = true }) end, { logq, x })
    local yy = t64({ 1, -1, 1 })
    gradcheck(function(a, b) return F.margin_ranking_loss(a, b, yy, "sum") end,
      { t64({ 0.5, -1, 2 }, true), t64({ 1, -2, 0.5 }, true) })
    gradcheck(function(a) return F.hinge_embedding_loss(a, yy) end, { t64({ 0.3, 0.4, 2 }, true) })
    gradcheck(function(a, b) return F.cosine_embedding_loss(a, b, t64({ 1, -1 }), "none") end, { x, t })
    gradcheck(function(a, b, c) return F.triplet_margin_loss(a, b, c, { margin = 5 }) end, { x, t, p })
    gradcheck(function(a, b) return F.poisson_nll_loss(a, b, { full = true }) end, { x, t64({ { 0, 2, 3 }, { 1, 5, 0.5 } }) })
    gradcheck(function(a) return F.poisson_nll_loss(a, t64({ { 0, 2, 3 }, { 1, 5, 0.5 } }), { log_input = false }) end, { p })
    gradcheck(function(a, b, v) return F.gaussian_nll_loss(a, b, v, { full = true }) end, { x, t, p })
  end)

  it("take non-contiguous inputs and empty batches", function()
    local xv, tv = { { 0.2, -1.5, 3 }, { 0.4, 0.1, -0.2 } }, { { 0.3, 0.5, 0.1 }, { 0.2, 0.25, 0.25 } }
    local hub = map2(xv, tv, function(a, b) local d = abs(a - b) return d < 1 and 0.5 * d * d or d - 0.5 end)
    local kl = map2(xv, tv, function(a, b) return b * (log(b) - a) end)
    local tl = H.layouts(t64(tv))
    for name, x in pairs(H.layouts(t64(xv))) do
      H.close(F.huber_loss(x, tl[name], "none"), hub, 1e-14, 0, name)
      H.close(F.kl_div(x, tl[name], "none"), kl, 1e-14, 0, name)
      H.close(F.cosine_embedding_loss(x, tl[name], t64({ 1, 1 }), "none"),
        F.cosine_embedding_loss(t64(xv), t64(tv), t64({ 1, 1 }), "none"), 1e-14, 0, name)
    end
    local e = tide.zeros(0, 3)
    assert.are.same({ 0, 3 }, F.l1_loss(e, e, "none"):shape())
    H.equal(F.huber_loss(e, e, "sum"), 0)
    assert.are.same({ 0 }, F.triplet_margin_loss(e, e, e, "none"):shape())
    assert.are.same({ 0 }, F.cosine_embedding_loss(e, e, tide.zeros(0), "none"):shape())
  end)

  it("reject bad options and shapes with messages naming the loss and both shapes", function()
    local a, b, c = t64({ 1, 2 }), t64({ 1, 2, 3 }), t64({ { 1, 2 } })
    for _, name in ipairs { "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy" } do
      assert.has_error(function() F[name](a, b) end,
        name .. ": target of shape [3] does not match input of shape [2]")
      assert.has_error(function() F[name](a, a, "avg") end,
        name .. ": reduction must be 'mean', 'sum' or 'none', got avg")
    end
    assert.has_error(function() nn.L1Loss("avg") end, "L1Loss: reduction must be 'mean', 'sum' or 'none', got avg")
    assert.has_error(function() nn.HuberLoss({ delta = 0 }) end, "HuberLoss: delta must be a positive number, got 0")
    assert.has_error(function() F.smooth_l1_loss(a, a, { beta = -1 }) end,
      "smooth_l1_loss: beta must be a non-negative number, got -1")
    assert.has_error(function() F.kl_div(a, a, "avg") end,
      "kl_div: reduction must be 'mean', 'batchmean', 'sum' or 'none', got avg")
    assert.has_error(function() F.l1_loss(a, a, "batchmean") end,
      "l1_loss: reduction must be 'mean', 'sum' or 'none', got batchmean")
    assert.has_error(function() F.kl_div(a, b) end, "kl_div: target of shape [3] does not broadcast with input of shape [2]")
    assert.has_error(function() nn.KLDivLoss({ log_target = 1 }) end, "KLDivLoss: log_target must be a boolean, got 1")
    assert.has_error(function() F.binary_cross_entropy(a, a, { weight = b }) end,
      "binary_cross_entropy: weight of shape [3] does not broadcast to input of shape [2]")
    assert.has_error(function() F.l1_loss(tide.tensor({ 1, 2 }, "int64"), a) end,
      "l1_loss: input must be a floating-point tensor, got int64")
    assert.has_error(function() F.margin_ranking_loss(a, c, a) end,
      "margin_ranking_loss: input1 [2], input2 [1,2] and target [2] must have the same number of dimensions")
    assert.has_error(function() F.margin_ranking_loss(a, b, a) end,
      "margin_ranking_loss: input2 of shape [3] does not broadcast with input1 of shape [2]")
    assert.has_error(function() F.hinge_embedding_loss(a, b) end,
      "hinge_embedding_loss: target of shape [3] does not broadcast with input of shape [2]")
    assert.has_error(function() F.cosine_embedding_loss(a, a, a) end,
      "cosine_embedding_loss: a 1-d target expects 2-d inputs, got input1 of shape [2] and input2 of shape [2]")
    assert.has_error(function() F.cosine_embedding_loss(c, c, t64(1)) end,
      "cosine_embedding_loss: a 0-d target expects 1-d inputs, got input1 of shape [1,2] and input2 of shape [1,2]")
    assert.has_error(function() F.cosine_embedding_loss(c, c, a) end,
      "cosine_embedding_loss: target of shape [2] does not match the 1 rows of input1 [1,2]")
    assert.has_error(function() F.cosine_embedding_loss(c, t64({ { 1, 2, 3 } }), t64({ 1 })) end,
      "cosine_embedding_loss: input2 of shape [1,3] does not match input1 of shape [1,2]")
    assert.has_error(function() F.triplet_margin_loss(c, c, a) end,
      "triplet_margin_loss: anchor [1,2], positive [1,2] and negative [2] must have the same number of dimensions")
    assert.has_error(function() nn.TripletMarginLoss({ p = 0 }) end,
      "TripletMarginLoss: p must be a positive number or math.huge, got 0")
    assert.has_error(function() F.poisson_nll_loss(a, a, { full = "yes" }) end,
      "poisson_nll_loss: full must be a boolean, got yes")
    assert.has_error(function() F.gaussian_nll_loss(c, c, b) end,
      "gaussian_nll_loss: var of shape [3] does not match input of shape [1,2] (input's shape, or it without " ..
      "its last dimension or with 1 there)")
    assert.has_error(function() F.gaussian_nll_loss(c, c, -1) end, "gaussian_nll_loss: var must not be negative, got -1")
    assert.has_error(function() nn.BCELoss({ weight = 2 }) end, "BCELoss: weight must be a tensor, got number")
    assert.has_error(function() F.l1_loss(a, a, 5) end, "l1_loss: options must be a table, got number")
  end)
end)

-- -- utils -------------------------------------------------------------------------------------------

describe("nn.utils", function()
  local U = nn.utils
  local function params_with_grads(g)
    local ps = {}
    for i, v in ipairs(g) do
      ps[i] = tide.zeros(#v):requires_grad_()
      ps[i].grad = tide.tensor(v)
    end
    return ps
  end

  it("clip_grad_norm_ returns the total norm and scales the gradients only above max_norm", function()
    local ps = params_with_grads({ { 3, 4 }, { -12 } })
    ps[3] = tide.zeros(2):requires_grad_()   -- no gradient: skipped
    local n = U.clip_grad_norm_(ps, 6.5)
    assert.are.same({}, n:shape())
    H.close(n, 13, 1e-6)
    local k = 6.5 / (13 + 1e-6)
    H.close(ps[1].grad, { 3 * k, 4 * k }, 1e-6)
    H.close(ps[2].grad, { -12 * k }, 1e-6)
    assert.is_nil(ps[3].grad)
    -- below max_norm: unchanged
    ps = params_with_grads({ { 3, 4 }, { -12 } })
    H.close(U.clip_grad_norm_(ps, 20), 13, 1e-6)
    H.equal(ps[1].grad, { 3, 4 })
    H.equal(ps[2].grad, { -12 })
    -- infinity norm, given as math.huge or "inf"; a single tensor
    ps = params_with_grads({ { 3, -4 }, { 2 } })
    H.close(U.clip_grad_norm_(ps, 2, { norm_type = math.huge }), 4, 1e-6)
    H.close(ps[1].grad, { 1.5, -2 }, 1e-6)
    H.close(ps[2].grad, { 1 }, 1e-6)
    ps = params_with_grads({ { 3, -4 } })
    H.close(U.clip_grad_norm_(ps[1], 8, { norm_type = "inf" }), 4, 1e-6)
    H.equal(ps[1].grad, { 3, -4 })
    -- norm_type 1 and 3
    ps = params_with_grads({ { 3, -4 }, { 1 } })
    H.close(U.clip_grad_norm_(ps, 4, { norm_type = 1 }), 8, 1e-6)
    H.close(ps[1].grad, { 1.5, -2 }, 1e-6)
    ps = params_with_grads({ { 3, -4 }, { 1 } })
    H.close(U.clip_grad_norm_(ps, 100, { norm_type = 3 }), (27 + 64 + 1) ^ (1 / 3), 1e-6)
    -- no gradients at all: 0
    H.equal(U.clip_grad_norm_({ tide.zeros(2):requires_grad_() }, 1), 0)
  end)

  it("clip_grad_norm_ takes model:parameters() and mixed dtypes", function()
    local m = nn.Linear(3, 2)
    local x = tide.randn(4, 3)
    m(x):pow(2):sum():backward()
    local total = 0
    for _, p in ipairs(m:parameters()) do total = total + (p.grad:double() ^ 2):sum():item() end
    local n = U.clip_grad_norm_(m:parameters(), 0.1)
    H.close(n, math.sqrt(total), 1e-5)
    local after = 0
    for _, p in ipairs(m:parameters()) do after = after + (p.grad:double() ^ 2):sum():item() end
    assert.is_true(math.abs(math.sqrt(after) - 0.1) < 1e-5)
    local a = tide.zeros(1, "float64"):requires_grad_()
    a.grad = tide.tensor({ 3 }, "float64")
    local b = tide.zeros(1):requires_grad_()
    b.grad = tide.tensor({ 4 })
    local nn2 = U.clip_grad_norm_({ a, b }, 1)
    assert.are.equal("float64", nn2:dtype())
    H.close(nn2, 5, 1e-12)
    H.close(a.grad, { 3 / (5 + 1e-6) }, 1e-12)
  end)

  it("clip_grad_norm_ reads the norm back only for error_if_nonfinite", function()
    local ps = params_with_grads({ { 1, 0 / 0 } })
    local n = U.clip_grad_norm_(ps, 1)   -- no error: scaled by NaN, as torch's
    assert.is_true(n:item() ~= n:item())
    ps = params_with_grads({ { 1, math.huge } })
    assert.has_error(function() U.clip_grad_norm_(ps, 1, { error_if_nonfinite = true }) end,
      "clip_grad_norm_: the total norm of order 2 of the gradients is non-finite (inf), so it cannot be " ..
      "clipped; to scale the gradients by it anyway, set error_if_nonfinite = false")
    ps = params_with_grads({ { 3, 4 } })
    H.close(U.clip_grad_norm_(ps, 1, { error_if_nonfinite = true, foreach = true }), 5, 1e-6)
    assert.has_error(function() U.clip_grad_norm_(ps, "1") end, "clip_grad_norm_: max_norm must be a number, got 1")
    assert.has_error(function() U.clip_grad_norm_(ps, 1, { norm_type = 0 }) end,
      "clip_grad_norm_: norm_type must be a positive number or math.huge, got 0")
    assert.has_error(function() U.clip_grad_norm_(nn.Linear(1, 1), 1) end,
      "clip_grad_norm_: parameters must be a tensor or a table of tensors (module:parameters()), got a module")
    assert.has_error(function() U.clip_grad_norm_({ ps[1], 3 }, 1) end,
      "clip_grad_norm_: parameter 2 must be a tensor, got number")
  end)

  it("clip_grad_norm_ inside a compiled step gives the eager results", function()
    local function run(compiled)
      tide.manual_seed(3)
      local m = nn.Linear(3, 2)
      local opt = tide.optim.SGD(m:parameters(), { lr = 0.1 })
      local x = tide.randn(4, 3)
      local function step(xb)
        local loss = m(xb):pow(2):sum()
        opt:zero_grad()
        loss:backward()
        local norm = U.clip_grad_norm_(m:parameters(), 0.5)
        opt:step()
        return norm
      end
      local f = compiled and tide.jit.compile(step) or step
      local norms = {}
      for i = 1, 4 do norms[i] = f(x):item() end
      return norms, m.weight:totable(), m.bias:totable()
    end
    local n1, w1, b1 = run(false)
    local n2, w2, b2 = run(true)
    assert.are.same(n1, n2)
    assert.are.same(w1, w2)
    assert.are.same(b1, b2)
    assert.is_true(n1[1] > 0.5)   -- the clipping took place
  end)

  it("clip_grad_value_ clamps each gradient", function()
    local ps = params_with_grads({ { 3, -0.5, -4 }, { 0.25 } })
    ps[3] = tide.zeros(1):requires_grad_()
    assert.is_nil(U.clip_grad_value_(ps, 1))
    H.equal(ps[1].grad, { 1, -0.5, -1 })
    H.equal(ps[2].grad, { 0.25 })
    assert.is_nil(ps[3].grad)
    U.clip_grad_value_(ps[1], 0)
    H.equal(ps[1].grad, { 0, 0, 0 })
    assert.has_error(function() U.clip_grad_value_(ps, -1) end,
      "clip_grad_value_: clip_value must be a non-negative number, got -1")
  end)

  it("parameters_to_vector and vector_to_parameters", function()
    local m = nn.Linear(2, 3)
    local v = U.parameters_to_vector(m:parameters())
    assert.are.same({ 9 }, v:shape())
    H.equal(v:narrow(1, 1, 6), H.flat(m.weight:totable()))
    H.equal(v:narrow(1, 7, 3), m.bias:totable())
    local w = tide.arange(1, 10):float()
    U.vector_to_parameters(w, m:parameters())
    H.equal(m.weight, { { 1, 2 }, { 3, 4 }, { 5, 6 } })
    H.equal(m.bias, { 7, 8, 9 })
    assert.is_true(m.weight.requires_grad and m.weight.is_leaf)
    -- parameters_to_vector is differentiable
    local s = (U.parameters_to_vector(m:parameters()) * tide.arange(1, 10):float()):sum()
    s:backward()
    H.equal(m.bias.grad, { 7, 8, 9 })
    local t = tide.zeros(2, 2):t()   -- non-contiguous
    U.vector_to_parameters(tide.tensor({ 1, 2, 3, 4 }), t)
    H.equal(t, { { 1, 2 }, { 3, 4 } })
    assert.has_error(function() U.vector_to_parameters(tide.zeros(8), m:parameters()) end,
      "vector_to_parameters: vec has 8 elements but the parameters hold 9")
    assert.has_error(function() U.vector_to_parameters(tide.zeros(3, 3), m:parameters()) end,
      "vector_to_parameters: vec must be 1-d, got shape [3,3]")
    assert.has_error(function() U.vector_to_parameters({}, m:parameters()) end,
      "vector_to_parameters: vec must be a tensor, got table")
    assert.has_error(function() U.parameters_to_vector({}) end, "parameters_to_vector: no parameters given")
  end)
end)
