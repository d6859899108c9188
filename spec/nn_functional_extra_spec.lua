-- nn functional extras: the channel and alpha dropouts (train/eval, the
-- fraction zeroed and the scaling, with a fixed seed), rms_norm, the shrinks,
-- rrelu, gumbel_softmax and the classification-margin losses, against
-- hand-computed values and plain-Lua float64 references of PyTorch's
-- formulas, on contiguous and non-contiguous inputs, batched, unbatched and
-- empty; gradcheck of each differentiable one; the modules' parameters and
-- printing; every error.
local tide = require "tide"
local H = require "spec.helpers"
local nn, F = tide.nn, tide.nn.functional
local exp, log, sqrt, abs = math.exp, math.log, math.sqrt, math.abs

local gradcheck = tide.autograd.gradcheck

-- -- data and references ---------------------------------------------------------------

local seed = 11
-- A float64 tensor of shape with deterministic values in [lo, hi), and its flat values.
local function rnd(shape, lo, hi)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local vals = H.values(n, lo or -1, hi or 1, seed)
  seed = seed + 7919
  return tide.tensor(H.nest(vals, shape), "float64"), vals
end

local function each_layout(x, f)
  for name, t in pairs(H.layouts(x)) do f(t, name) end
end

local function leaf(t) return t:clone():requires_grad_() end
local function i64(v) return tide.tensor(v, "int64") end

local function log1p(u)
  if abs(u) < 1e-5 then return u - u * u / 2 + u * u * u / 3 end
  return log(1 + u)
end
local function softplus(z) return z > 0 and z + log1p(exp(-z)) or log1p(exp(z)) end

-- -- specs --------------------------------------------------------------------------------

describe("nn functional extras", function()
  describe("channel and alpha dropouts", function()
    local function frac_zero(t)
      local z, vals = 0, H.flat(t:totable())
      for _, v in ipairs(vals) do if v == 0 then z = z + 1 end end
      return z / #vals, vals
    end

    it("dropout1d/2d/3d zero whole channels with probability p and scale the rest by 1 / (1 - p)", function()
      for _, case in ipairs {
        { F.dropout1d, { 40, 50, 6 }, 2 }, { F.dropout1d, { 2000, 6 }, 1 },   -- unbatched [C, L]
        { F.dropout2d, { 40, 50, 2, 3 }, 2 }, { F.dropout2d, { 40, 50, 6 }, 2 },   -- 3-d: [N, C, L], as PyTorch
        { F.dropout3d, { 40, 50, 1, 2, 3 }, 2 }, { F.dropout3d, { 2000, 1, 2, 3 }, 1 },   -- unbatched [C, D, H, W]
      } do
        local f, shape, lead = case[1], case[2], case[3]
        tide.manual_seed(5)
        local y = f(tide.ones(shape), 0.3)
        local chans = y:reshape(shape[1] * (lead == 2 and shape[2] or 1), -1)
        local lo, hi = chans:min(2), chans:max(2)
        H.equal(lo, hi, "each channel zeroed or kept whole")
        local frac, vals = frac_zero(lo)
        assert.is_true(abs(frac - 0.3) < 0.04, "fraction zeroed " .. frac)
        for _, v in ipairs(vals) do assert.is_true(v == 0 or abs(v - 1 / 0.7) < 1e-6, "value " .. v) end
      end
    end)

    it("dropout2d is the identity in evaluation or for p = 0, and zeroes all for p = 1", function()
      local x = tide.randn(2, 3, 4, 4)
      assert.are.equal(x, F.dropout2d(x, 0.5, false))
      assert.are.equal(x, F.dropout2d(x, 0))
      local x1 = x[1]
      assert.are.equal(x1, F.dropout1d(x1, 0.5, false))
      assert.are.equal(x, F.dropout3d(x, 0.5, false))
      H.equal(F.dropout3d(x[1]:unsqueeze(1), 1), tide.zeros({ 1, 3, 4, 4 }))
      assert.are.same({ 0, 3, 4, 4 }, F.dropout2d(tide.zeros({ 0, 3, 4, 4 }), 0.5):shape())
    end)

    it("draw the same mask for contiguous and non-contiguous inputs, and pass the mask's gradient", function()
      local x = rnd({ 4, 6, 5 })
      each_layout(x, function(t, name)
        tide.manual_seed(9)
        local want = F.dropout1d(x, 0.5)
        tide.manual_seed(9)
        H.equal(F.dropout1d(t, 0.5), want, name)
      end)
      local ones = tide.ones({ 3, 4, 2, 2 }, "float64"):requires_grad_()
      tide.manual_seed(3)
      local y = F.dropout2d(ones, 0.25)
      y:sum():backward()
      H.equal(ones.grad, y:detach())
    end)

    it("alpha_dropout keeps a standard normal input's mean and variance, and sets dropped elements to a' alpha (p - 1)", function()
      local p, alpha = 0.2, 1.7580993408473766
      local a = 1 / sqrt((alpha * alpha * p + 1) * (1 - p))
      tide.manual_seed(1)
      local x = tide.randn(40000, "float64")
      local y = F.alpha_dropout(x, p, true)
      local xs, ys = H.flat(x:totable()), H.flat(y:totable())
      local dropped, sum, sq = 0, 0, 0
      for i = 1, #xs do
        local kept = a * (xs[i] + alpha * p)
        if abs(ys[i] - a * alpha * (p - 1)) < 1e-12 and abs(ys[i] - kept) > 1e-9 then
          dropped = dropped + 1
        else
          assert.is_true(abs(ys[i] - kept) < 1e-12, "element " .. i)
        end
        sum, sq = sum + ys[i], sq + ys[i] * ys[i]
      end
      assert.is_true(abs(dropped / #xs - p) < 0.01, "fraction dropped " .. dropped / #xs)
      local mean = sum / #xs
      assert.is_true(abs(mean) < 0.03, "mean " .. mean)
      assert.is_true(abs(sq / #xs - mean * mean - 1) < 0.03, "variance " .. sq / #xs - mean * mean)
      -- PyTorch's F.alpha_dropout defaults to training = false
      assert.are.equal(x, F.alpha_dropout(x, 0.5))
      local x3 = x:view(4, 10, 1000)
      assert.are.equal(x3, F.feature_alpha_dropout(x3))
      H.equal(F.alpha_dropout(x:narrow(1, 1, 4), 1, true), { 0, 0, 0, 0 })
    end)

    it("feature_alpha_dropout drops whole channels", function()
      tide.manual_seed(4)
      local y = F.feature_alpha_dropout(tide.zeros({ 30, 40, 5 }), 0.5, true)
      local lo, hi = y:min(3), y:max(3)
      H.equal(lo, hi)
      local frac = frac_zero(lo:ne(lo:max()))   -- channels at the dropped value
      assert.is_true(abs(frac - 0.5) < 0.05, "fraction dropped " .. frac)
    end)

    it("nn.Dropout1d/2d/3d, AlphaDropout and FeatureAlphaDropout follow train and eval", function()
      local x = tide.ones({ 8, 16, 4, 4 })
      for _, cls in ipairs { nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout } do
        local m = cls(0.5)
        assert.are.equal(0, #m:parameters())
        assert.are.same({}, m:state_dict_keys())
        tide.manual_seed(2)
        local y = m(x)
        assert.is_true(y:ne(1):any():item(), cls.__name .. " drops in training")
        m:eval()
        assert.are.equal(x, m(x))
      end
      local d1 = nn.Dropout1d(0.25)
      tide.manual_seed(6)
      local y = d1(tide.ones(4, 8, 3))
      tide.manual_seed(6)
      H.equal(y, F.dropout1d(tide.ones(4, 8, 3), 0.25))
      assert.are.equal("Dropout2d(p=0.3)", tostring(nn.Dropout2d(0.3)))
      assert.are.equal("AlphaDropout(p=0.5)", tostring(nn.AlphaDropout()))
      assert.has_error(function() nn.Dropout3d(1.5) end, "Dropout3d: p must be a number between 0 and 1, got 1.5")
    end)

    it("name the function and the shape in their errors", function()
      assert.has_error(function() F.dropout1d(tide.ones(2, 3, 4, 5)) end,
        "dropout1d: expects a 2-d or 3-d input (C, L or N, C, L), got shape [2,3,4,5]")
      assert.has_error(function() F.dropout2d(tide.ones(2, 3)) end,
        "dropout2d: expects a 3-d or 4-d input (N, C, L or N, C, H, W), got shape [2,3]")
      assert.has_error(function() F.dropout3d(tide.ones(2, 3, 4)) end,
        "dropout3d: expects a 4-d or 5-d input (C, D, H, W or N, C, D, H, W), got shape [2,3,4]")
      assert.has_error(function() F.dropout2d(tide.ones(2, 3, 4), 1.2) end,
        "dropout2d: p must be a number between 0 and 1, got 1.2")
      assert.has_error(function() F.dropout1d(i64({ { 1 } })) end,
        "dropout1d: input must be a floating-point tensor, got int64")
      assert.has_error(function() F.alpha_dropout(tide.ones(2), -0.1, true) end,
        "alpha_dropout: p must be a number between 0 and 1, got -0.1")
      assert.has_error(function() F.feature_alpha_dropout(tide.ones(2), 0.5, true) end,
        "feature_alpha_dropout: expects an input of at least 2 dimensions (N, C, ...), got shape [2]")
    end)
  end)

  describe("rms_norm", function()
    local function ref(x, xs, k, w, eps)
      local inner = 1
      for i = #xs - k + 1, #xs do inner = inner * xs[i] end
      local r = {}
      for o = 0, #x / inner - 1 do
        local s = 0
        for j = 1, inner do s = s + x[o * inner + j] ^ 2 end
        local scale = 1 / sqrt(s / inner + eps)
        for j = 1, inner do r[o * inner + j] = x[o * inner + j] * scale * (w and w[j] or 1) end
      end
      return H.nest(r, xs)
    end

    it("matches a float64 reference over one or two trailing dims, with and without weight, on any layout", function()
      local xs = { 3, 4, 5 }
      local x, xv = rnd(xs, -2, 2)
      local w, wv = rnd({ 5 })
      local want = ref(xv, xs, 1, wv, 1e-6)
      each_layout(x, function(t, name) H.close(F.rms_norm(t, 5, w, 1e-6), want, 1e-12, 1e-14, name) end)
      local w2, wv2 = rnd({ 4, 5 })
      H.close(F.rms_norm(x, { 4, 5 }, w2, 0.1), ref(xv, xs, 2, wv2, 0.1), 1e-12, 1e-14)
      H.close(F.rms_norm(x[2], { 4, 5 }), ref(xv, xs, 2, nil, 2^-52)[2], 1e-12, 1e-14)
      assert.are.same({ 0, 4, 5 }, F.rms_norm(tide.zeros({ 0, 4, 5 }), { 5 }):shape())
    end)

    it("defaults eps to the machine epsilon of the input's dtype", function()
      -- x^2 near eps: 1e-4 / sqrt(1e-8 + 2^-23) in float32, 1e-8 / sqrt(1e-16 + 2^-52) in float64
      H.close(F.rms_norm(tide.full({ 2, 3 }, 1e-4), 3), tide.full({ 2, 3 }, 1e-4 / sqrt(1e-8 + 2^-23)), 1e-5)
      H.close(F.rms_norm(tide.full({ 3 }, 1e-8, "float64"), 3), tide.full({ 3 }, 1e-8 / sqrt(1e-16 + 2^-52), "float64"),
        1e-12)
    end)

    it("has gradients (gradcheck)", function()
      local x, w = leaf(rnd({ 2, 3, 4 })), leaf(rnd({ 3, 4 }))
      assert.is_true(gradcheck(function(a, b) return F.rms_norm(a, { 3, 4 }, b, 1e-3) end, { x, w }))
    end)

    it("nn.RMSNorm has PyTorch's weight (ones), options and printing", function()
      local m = nn.RMSNorm({ 3, 4 })
      assert.are.same({ "weight" }, m:state_dict_keys())
      assert.are.same({ 3, 4 }, m.weight:shape())
      H.equal(m.weight, tide.ones(3, 4))
      assert.is_true(m.weight.requires_grad)
      local x = tide.randn(2, 3, 4)
      H.close(m(x), F.rms_norm(x, { 3, 4 }), 1e-6, 1e-7)
      local plain = nn.RMSNorm(4, { eps = 1e-3, elementwise_affine = false, dtype = "float64" })
      assert.are.same({}, plain:state_dict_keys())
      H.close(plain(x:double()), F.rms_norm(x:double(), 4, nil, 1e-3), 1e-12)
      assert.are.equal("RMSNorm({3, 4}, eps=nil, elementwise_affine=true)", tostring(m))
      assert.are.equal("RMSNorm({4}, eps=0.001, elementwise_affine=false)", tostring(plain))
      assert.has_error(function() nn.RMSNorm(4, { eps = -1 }) end,
        "RMSNorm: eps must be a non-negative number or nil, got -1")
    end)

    it("names the shapes in its errors", function()
      assert.has_error(function() F.rms_norm(tide.ones(2, 3), 4) end,
        "rms_norm: input of shape [2,3] does not end with normalized_shape [4]")
      assert.has_error(function() F.rms_norm(tide.ones(2, 3), 3, tide.ones(2)) end,
        "rms_norm: weight of shape [2] does not match normalized_shape [3]")
      assert.has_error(function() F.rms_norm(tide.ones(2, 3), 3, nil, "x") end,
        "rms_norm: eps must be a non-negative number, got x")
    end)
  end)

  describe("activations", function()
    it("hardshrink and softshrink match hand-computed values, with no gradient inside [-lambd, lambd]", function()
      local x = tide.tensor({ -2, -0.5, -0.25, 0, 0.25, 0.5, 0.75 }, "float64")
      H.equal(F.hardshrink(x), { -2, 0, 0, 0, 0, 0, 0.75 })
      H.equal(F.hardshrink(x, 0.2), { -2, -0.5, -0.25, 0, 0.25, 0.5, 0.75 })
      H.equal(F.softshrink(x), { -1.5, 0, 0, 0, 0, 0, 0.25 })
      H.close(F.softshrink(x, 0.2), { -1.8, -0.3, -0.05, 0, 0.05, 0.3, 0.55 }, 1e-14)
      local nc = x:view(1, 7):expand(2, 7):t()
      H.equal(F.softshrink(nc):t(), { { -1.5, 0, 0, 0, 0, 0, 0.25 }, { -1.5, 0, 0, 0, 0, 0, 0.25 } })
      local g = x:clone():requires_grad_()
      F.softshrink(g):sum():backward()
      H.equal(g.grad, { 1, 0, 0, 0, 0, 0, 1 })
      local xg = leaf(tide.tensor({ -1.3, -0.2, 0.1, 0.9 }, "float64"))
      assert.is_true(gradcheck(function(a) return F.hardshrink(a) end, { xg }))
      assert.is_true(gradcheck(function(a) return F.softshrink(a, 0.3) end, { xg }))
      assert.are.equal("Hardshrink(lambd=0.5)", tostring(nn.Hardshrink()))
      assert.are.equal("Softshrink(lambd=0.1)", tostring(nn.Softshrink(0.1)))
      H.equal(nn.Softshrink(0.2)(x), F.softshrink(x, 0.2))
      assert.has_error(function() F.softshrink(x, -1) end, "softshrink: lambd must not be negative, got -1")
      assert.has_error(function() nn.Softshrink(-0.5) end, "Softshrink: lambd must not be negative, got -0.5")
      assert.has_error(function() F.hardshrink(x, "a") end, "hardshrink: lambd must be a number, got string")
    end)

    it("rrelu draws a slope in [lower, upper] per negative element in training, and uses their mean otherwise", function()
      local x = tide.tensor({ -2, -1, 0, 3 }, "float64")
      H.close(F.rrelu(x), { -2 * (1 / 8 + 1 / 3) / 2, -(1 / 8 + 1 / 3) / 2, 0, 3 }, 1e-14)
      H.close(F.rrelu(x, 0.1, 0.3, false), { -0.4, -0.2, 0, 3 }, 1e-14)
      tide.manual_seed(8)
      local neg = -tide.ones(5000, "float64")
      local xg = neg:clone():requires_grad_()
      local y = F.rrelu(xg, 0.1, 0.3, true)
      local slopes = H.flat((-y):detach():totable())
      local lo, hi, sum = 1, 0, 0
      for _, s in ipairs(slopes) do lo, hi, sum = math.min(lo, s), math.max(hi, s), sum + s end
      assert.is_true(lo >= 0.1 and hi <= 0.3 and lo < 0.11 and hi > 0.29, lo .. " " .. hi)
      assert.is_true(abs(sum / #slopes - 0.2) < 0.005)
      y:sum():backward()
      H.equal(xg.grad, (-y):detach())   -- the gradient is each element's slope
      H.equal(F.rrelu(tide.tensor({ 1, 2 }), nil, nil, true), { 1, 2 })
      local m = nn.RReLU(0.1, 0.3)
      tide.manual_seed(8)
      H.equal(m(neg), y:detach())
      m:eval()
      H.close(m(neg), tide.full({ 5000 }, -0.2, "float64"), 1e-14)
      assert.are.equal("RReLU(lower=0.1, upper=0.3)", tostring(m))
      assert.has_error(function() F.rrelu(x, 0.5, 0.2) end, "rrelu: lower (0.5) must not be greater than upper (0.2)")
      assert.has_error(function() nn.RReLU(0.5, 0.2) end, "RReLU: lower (0.5) must not be greater than upper (0.2)")
    end)

    it("gumbel_softmax samples the softmax of logits: soft rows sum to 1, hard ones are one-hot with the soft gradient", function()
      local logits = tide.tensor({ { log(0.5), log(0.3), log(0.2) } }, "float64"):expand(6000, 3):contiguous()
      tide.manual_seed(12)
      local soft = F.gumbel_softmax(logits, { tau = 0.5 })
      H.close(soft:sum(2), tide.ones(6000, "float64"), 1e-12)
      assert.is_true(soft:gt(0):all():item())
      -- the Gumbel-max trick: the argmax is distributed as softmax(logits)
      local counts = F.one_hot(soft:argmax(2), 3):sum(1):totable()
      for j, pj in ipairs { 0.5, 0.3, 0.2 } do
        assert.is_true(abs(counts[j] / 6000 - pj) < 0.025, "class " .. j .. ": " .. counts[j] / 6000)
      end
      local lg = logits:narrow(1, 1, 4):clone():requires_grad_()
      local w = rnd({ 4, 3 })
      tide.manual_seed(13)
      local y = F.gumbel_softmax(lg, { hard = true })
      H.equal(y:sum(2), { 1, 1, 1, 1 })
      assert.is_true(y:eq(0):logical_or(y:eq(1)):all():item())
      tide.manual_seed(13)
      local ys = F.gumbel_softmax(lg)
      H.equal(y:argmax(2), ys:argmax(2))
      local g_hard = tide.autograd.grad((y * w):sum(), { lg })[1]
      local g_soft = tide.autograd.grad((ys * w):sum(), { lg })[1]
      H.close(g_hard, g_soft, 1e-12, 1e-14)
      -- along another dim
      tide.manual_seed(14)
      local yd = F.gumbel_softmax(tide.randn(3, 5), { dim = 1, hard = true })
      H.equal(yd:sum(1), { 1, 1, 1, 1, 1 })
      assert.has_error(function() F.gumbel_softmax(lg, { tau = 0 }) end, "gumbel_softmax: tau must be positive, got 0")
      assert.has_error(function() F.gumbel_softmax(lg, { dim = 3 }) end,
        "gumbel_softmax: dim 3 is out of range for input of shape [4,3]")
      assert.has_error(function() F.gumbel_softmax(lg, 2) end, "gumbel_softmax: options must be a table, got number")
    end)

    it("nn.Softmax2d is the softmax over the channels at each position", function()
      local x = rnd({ 2, 3, 2, 2 })
      local m = nn.Softmax2d()
      H.close(m(x), x:softmax(2), 1e-14)
      H.close(m(x[1]), x[1]:softmax(1), 1e-14)
      assert.has_error(function() m(tide.ones(2, 3)) end,
        "Softmax2d: expects a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape [2,3]")
    end)

    it("F.pdist and F.upsample are tide.pdist and F.interpolate", function()
      assert.are.equal(tide.pdist, F.pdist)
      assert.are.equal(F.interpolate, F.upsample)
      H.close(F.pdist(tide.tensor({ { 0, 0 }, { 3, 4 }, { 0, 1 } }, "float64")), { 5, 1, sqrt(18) }, 1e-14)
    end)
  end)

  describe("classification-margin losses", function()
    it("soft_margin_loss is log(1 + exp(-y x)), stable at large |x|", function()
      local x, xv = rnd({ 3, 4 }, -3, 3)
      local y = tide.tensor({ { 1, -1, 1, -1 }, { -1, -1, 1, 1 }, { 1, 1, -1, 1 } }, "float64")
      local yv = H.flat(y:totable())
      local per = {}
      for i = 1, 12 do per[i] = softplus(-xv[i] * yv[i]) end
      local sum = 0
      for i = 1, 12 do sum = sum + per[i] end
      each_layout(x, function(t, name) H.close(F.soft_margin_loss(t, y), sum / 12, 1e-12, 0, name) end)
      H.close(F.soft_margin_loss(x, y, "sum"), sum, 1e-12)
      H.close(F.soft_margin_loss(x, y, { reduction = "none" }), H.nest(per, { 3, 4 }), 1e-12)
      H.close(F.soft_margin_loss(tide.tensor({ 100, -100, 800 }, "float64"), tide.tensor({ -1, -1, 1 }, "float64"),
        "none"), { 100, exp(-100), 0 }, 1e-12)
      assert.is_true(gradcheck(function(a) return F.soft_margin_loss(a, y) end, { leaf(x) }))
      assert.is_true(F.soft_margin_loss(tide.zeros({ 0 }), tide.zeros({ 0 })):isnan():item())
      assert.has_error(function() F.soft_margin_loss(x, y:narrow(1, 1, 2)) end,
        "soft_margin_loss: target of shape [2,4] does not match input of shape [3,4]")
    end)

    it("multilabel_soft_margin_loss averages the per-class binary cross entropies, with class weights", function()
      local x, xv = rnd({ 3, 4 }, -3, 3)
      local y = tide.tensor({ { 1, 0, 1, 0 }, { 0, 0, 1, 1 }, { 1, 1, 0, 1 } }, "float64")
      local yv = H.flat(y:totable())
      local w, wv = rnd({ 4 }, 0, 2)
      local rows, rows_w = {}, {}
      for n = 1, 3 do
        local s, sw = 0, 0
        for c = 1, 4 do
          local k = (n - 1) * 4 + c
          local l = yv[k] * softplus(-xv[k]) + (1 - yv[k]) * softplus(xv[k])
          s, sw = s + l, sw + l * wv[c]
        end
        rows[n], rows_w[n] = s / 4, sw / 4
      end
      each_layout(x, function(t, name)
        H.close(F.multilabel_soft_margin_loss(t, y, { reduction = "none" }), rows, 1e-12, 0, name)
      end)
      H.close(F.multilabel_soft_margin_loss(x, y), (rows[1] + rows[2] + rows[3]) / 3, 1e-12)
      H.close(F.multilabel_soft_margin_loss(x, y, { weight = w, reduction = "sum" }), rows_w[1] + rows_w[2] + rows_w[3],
        1e-12)
      H.close(F.multilabel_soft_margin_loss(x[2], y[2], "none"), rows[2], 1e-12)   -- unbatched: 0-d
      assert.is_true(gradcheck(function(a, b) return F.multilabel_soft_margin_loss(a, y, { weight = b }) end,
        { leaf(x), leaf(w) }))
      assert.are.same({ 0 }, F.multilabel_soft_margin_loss(tide.zeros({ 0, 4 }), tide.zeros({ 0, 4 }), "none"):shape())
      assert.has_error(function() F.multilabel_soft_margin_loss(x, y, { weight = tide.ones(3, "float64") }) end,
        "multilabel_soft_margin_loss: weight of shape [3] does not broadcast with input of shape [3,4]")
      assert.has_error(function() F.multilabel_soft_margin_loss(x, y, { weight = tide.ones(2, 3, 4, "float64") }) end,
        "multilabel_soft_margin_loss: weight of shape [2,3,4] does not broadcast to input of shape [3,4]")
    end)

    local function multi_margin_ref(xv, n, c, t, p, margin, wv)
      local r = {}
      for i = 1, n do
        local s = 0
        local xy = xv[(i - 1) * c + t[i]]
        for j = 1, c do
          if j ~= t[i] then
            local z = math.max(0, margin - xy + xv[(i - 1) * c + j]) ^ p
            s = s + z * (wv and wv[t[i]] or 1)
          end
        end
        r[i] = s / c
      end
      return r
    end

    it("multi_margin_loss sums max(0, margin - x_y + x_i)^p over the other classes", function()
      local x, xv = rnd({ 4, 5 }, -1, 1)
      local t = { 2, 5, 1, 2 }
      local target = i64(t)
      local w, wv = rnd({ 5 }, 0.5, 2)
      local rows = multi_margin_ref(xv, 4, 5, t, 1, 1)
      each_layout(x, function(tt, name) H.close(F.multi_margin_loss(tt, target, "none"), rows, 1e-12, 0, name) end)
      H.close(F.multi_margin_loss(x, target), (rows[1] + rows[2] + rows[3] + rows[4]) / 4, 1e-12)
      local r2 = multi_margin_ref(xv, 4, 5, t, 2, 0.7, wv)
      H.close(F.multi_margin_loss(x, tide.tensor(t, "int32"), { p = 2, margin = 0.7, weight = w, reduction = "none" }),
        r2, 1e-12)
      -- unbatched: [C] input and a 0-d target give a 0-d loss
      H.close(F.multi_margin_loss(x[3], i64(1), "none"), rows[3], 1e-12)
      assert.are.same({}, F.multi_margin_loss(x[3], i64(1), "none"):shape())
      H.close(F.multi_margin_loss(tide.tensor({ 0.1, 0.2, 0.4, 0.8 }, "float64"), i64(4)), 0.325, 1e-15)   -- (0.3 + 0.4 + 0.6) / 4
      assert.is_true(gradcheck(function(a, b)
        return F.multi_margin_loss(a, target, { p = 2, margin = 0.7, weight = b })
      end, { leaf(x), leaf(w) }))
      assert.are.same({ 0 }, F.multi_margin_loss(tide.zeros({ 0, 5 }), i64({}):view(0), "none"):shape())
      assert.has_error(function() F.multi_margin_loss(x, target, { p = 3 }) end, "multi_margin_loss: p must be 1 or 2, got 3")
      assert.has_error(function() F.multi_margin_loss(x, i64({ 1, 2 })) end,
        "multi_margin_loss: target of shape [2] does not match input of shape [4,5] (expected 4 class indices)")
      assert.has_error(function() F.multi_margin_loss(x, target, { weight = tide.ones(4, "float64") }) end,
        "multi_margin_loss: weight of shape [4] does not match the 5 classes of input [4,5]")
      assert.has_error(function() F.multi_margin_loss(x, tide.tensor({ 1, 2, 3, 4 }, "float64")) end,
        "multi_margin_loss: target must be an int64 or int32 tensor of 1-based class indices, got float64")
      assert.has_error(function() F.multi_margin_loss(x:view(2, 2, 5), target) end,
        "multi_margin_loss: input must be [C] or [N, C], got shape [2,2,5]")
      -- a class index out of range is the gather's error (the check needs the values)
      assert.has_error(H.sync(function() F.multi_margin_loss(x, i64({ 1, 2, 6, 1 })) end),
        "gather: index 6 is out of range for dimension 2 of size 5")
    end)

    it("multilabel_margin_loss takes the targets up to the first index below 1 (PyTorch's example gives 0.85)", function()
      H.close(F.multilabel_margin_loss(tide.tensor({ { 0.1, 0.2, 0.4, 0.8 } }, "float64"), i64({ { 4, 1, -1, 2 } })),
        0.85, 1e-14)
      H.close(F.multilabel_margin_loss(tide.tensor({ 0.1, 0.2, 0.4, 0.8 }, "float64"), i64({ 4, 1, 0, 0 }), "none"),
        0.85, 1e-14)
      local x, xv = rnd({ 3, 5 }, -1, 1)
      local t = { { 3, 1, 0, 5, 2 }, { 5, 4, 3, 2, 1 }, { 0, 2, 3, 4, 5 } }
      local rows = {}
      for n = 1, 3 do
        local is_t, list = {}, {}
        for j = 1, 5 do
          if t[n][j] < 1 then break end
          list[#list + 1] = t[n][j]; is_t[t[n][j]] = true
        end
        local s = 0
        for _, j in ipairs(list) do
          for i = 1, 5 do
            if not is_t[i] then s = s + math.max(0, 1 - (xv[(n - 1) * 5 + j] - xv[(n - 1) * 5 + i])) end
          end
        end
        rows[n] = s / 5
      end
      assert.are.equal(0, rows[2])   -- every class a target
      each_layout(x, function(tt, name)
        H.close(F.multilabel_margin_loss(tt, i64(t), "none"), rows, 1e-12, 1e-15, name)
      end)
      H.close(F.multilabel_margin_loss(x, tide.tensor(t, "int32"), "sum"), rows[1] + rows[2] + rows[3], 1e-12)
      assert.is_true(gradcheck(function(a) return F.multilabel_margin_loss(a, i64(t)) end, { leaf(x) }))
      assert.has_error(function() F.multilabel_margin_loss(x, i64({ 1, 2, 3 })) end,
        "multilabel_margin_loss: target of shape [3] does not match input of shape [3,5]")
    end)

    it("the loss modules keep their options and weight (a buffer), as PyTorch's", function()
      local w = tide.tensor({ 1, 2, 3 }, "float64")
      local m = nn.MultiMarginLoss({ p = 2, margin = 0.5, weight = w })
      assert.are.same({ "weight" }, m:state_dict_keys())
      assert.are.equal(0, #m:parameters())
      local x, t = rnd({ 2, 3 }), i64({ 3, 1 })
      H.close(m(x, t), F.multi_margin_loss(x, t, { p = 2, margin = 0.5, weight = w }), 1e-14)
      assert.are.equal("MultiMarginLoss(p=2, margin=0.5)", tostring(m))
      local ml = nn.MultiLabelSoftMarginLoss({ weight = w, reduction = "sum" })
      assert.are.same({ "weight" }, ml:state_dict_keys())
      local y = tide.tensor({ { 1, 0, 1 }, { 0, 1, 1 } }, "float64")
      H.close(ml(x, y), F.multilabel_soft_margin_loss(x, y, { weight = w, reduction = "sum" }), 1e-14)
      H.close(nn.SoftMarginLoss("sum")(x, y * 2 - 1), F.soft_margin_loss(x, y * 2 - 1, "sum"), 1e-14)
      H.close(nn.MultiLabelMarginLoss()(x, i64({ { 2, 0, 0 }, { 1, 3, -1 } })),
        F.multilabel_margin_loss(x, i64({ { 2, 0, 0 }, { 1, 3, -1 } })), 1e-14)
      assert.are.same({}, nn.SoftMarginLoss():state_dict_keys())
      assert.has_error(function() nn.MultiMarginLoss({ p = 0 }) end, "MultiMarginLoss: p must be 1 or 2, got 0")
      assert.has_error(function() nn.MultiLabelMarginLoss({ reduction = "avg" }) end,
        "MultiLabelMarginLoss: reduction must be 'mean', 'sum' or 'none', got avg")
    end)
  end)
end)
