-- nn functional extras: the channel and alpha dropouts (train/eval, the
-- fraction zeroed and the scaling, with a fixed seed), rms_norm, the shrinks,
-- rrelu, gumbel_softmax, the classification-margin losses, adaptive max
-- pooling, max unpooling, lp pooling, local response norm, channel shuffle,
-- affine_grid and grid_sample, against hand-computed values and plain-Lua
-- float64 references of PyTorch's formulas, on contiguous and non-contiguous
-- inputs, batched, unbatched and empty; gradcheck of each differentiable one;
-- the modules' parameters and printing; every error; and each under
-- tide.jit.compile (which refuses host reads) giving the eager values.
local tide = require "tide"
local H = require "spec.helpers"
local GR = require "spec.helpers.grid_ref"
local nn, F = tide.nn, tide.nn.functional
local floor, ceil, exp, log, sqrt, abs = math.floor, math.ceil, math.exp, math.log, math.sqrt, math.abs

local gradcheck = tide.autograd.gradcheck

-- -- data and references ---------------------------------------------------------------

local rnd = H.random_tensors(11)   -- rnd(shape, lo, hi): a float64 tensor, its flat values
local at, build = H.at, H.build
local each_layout = H.each_layout

local leaf = H.grad_leaf
local function i64(v) return tide.tensor(v, "int64") end

local function log1p(u)
  if abs(u) < 1e-5 then return u - u * u / 2 + u * u * u / 3 end
  return log(1 + u)
end
local function softplus(z) return z > 0 and z + log1p(exp(-z)) or log1p(exp(z)) end

-- PyTorch's adaptive windows of n into m: 1-based first and last positions of window i (1-based).
local function window(i, n, m) return floor((i - 1) * n / m) + 1, ceil(i * n / m) end

local function adaptive_max2d_ref(x, xs, oh, ow)
  local X = at(x, xs)
  local idx = {}
  local vals = build({ xs[1], xs[2], oh, ow }, function(i)
    local r0, r1 = window(i[3], xs[3], oh)
    local c0, c1 = window(i[4], xs[4], ow)
    local best, arg = -math.huge, nil
    for r = r0, r1 do
      for c = c0, c1 do
        local v = X(i[1], i[2], r, c)
        if arg == nil or v > best then best, arg = v, (r - 1) * xs[4] + c end
      end
    end
    idx[#idx + 1] = arg
    return best
  end)
  return vals, H.nest(idx, { xs[1], xs[2], oh, ow })
end

local rint, source = GR.rint, GR.source

local function grid_sample_ref(x, xs, g, gs, mode, pad, ac)
  local X, G = at(x, xs), at(g, gs)
  local h, w = xs[3], xs[4]
  return build({ xs[1], xs[2], gs[2], gs[3] }, function(i)
    local ix = source(G(i[1], i[3], i[4], 1), w, pad, ac)
    local iy = source(G(i[1], i[3], i[4], 2), h, pad, ac)
    local function v(yy, xx)
      if xx < 0 or xx > w - 1 or yy < 0 or yy > h - 1 then return 0 end
      return X(i[1], i[2], yy + 1, xx + 1)
    end
    if mode == "nearest" then return v(rint(iy), rint(ix)) end
    local x0, y0 = floor(ix), floor(iy)
    local fx, fy = ix - x0, iy - y0
    return v(y0, x0) * (1 - fx) * (1 - fy) + v(y0, x0 + 1) * fx * (1 - fy) + v(y0 + 1, x0) * (1 - fx) * fy
      + v(y0 + 1, x0 + 1) * fx * fy
  end)
end

local base = GR.base

local function affine_grid_ref(th, n, h, w, ac)
  local T = at(th, { n, 2, 3 })
  return build({ n, h, w, 2 }, function(i)
    local x, y = base(i[3], w, ac), base(i[2], h, ac)
    return T(i[1], i[4], 1) * x + T(i[1], i[4], 2) * y + T(i[1], i[4], 3)
  end)
end

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

  describe("adaptive max pooling", function()
    it("adaptive_max_pool2d matches PyTorch's windows, with indices into each plane, on any layout", function()
      local xs = { 2, 3, 5, 7 }
      local x, xv = rnd(xs)
      for _, o in ipairs { { 3, 4 }, { 5, 7 }, { 1, 1 }, { 2, 7 }, { 4, 3 } } do
        local want, widx = adaptive_max2d_ref(xv, xs, o[1], o[2])
        each_layout(x, function(t, name)
          local y, idx = F.adaptive_max_pool2d(t, o, true)
          H.equal(y, want, name)
          H.equal(idx, widx, name)
          assert.are.equal("int64", idx:dtype())
        end)
      end
      local want = adaptive_max2d_ref(xv, xs, 3, 3)
      H.equal(F.adaptive_max_pool2d(x, 3), want)
      H.equal(F.adaptive_max_pool2d(x[2], { 3, 3 }), want[2])
      local yu, iu = F.adaptive_max_pool2d(x[2], 3, { return_indices = true })
      assert.are.same({ 3, 3, 3 }, iu:shape())
      H.equal(yu, want[2])
      local ye, ie = F.adaptive_max_pool2d(tide.zeros({ 0, 3, 5, 7 }), { 2, 2 }, true)
      assert.are.same({ 0, 3, 2, 2 }, ye:shape())
      assert.are.same({ 0, 3, 2, 2 }, ie:shape())
    end)

    it("agrees with max_pool2d, indices and ties included, where the windows tile evenly", function()
      local x = tide.tensor({ { { { 1, 3, 3, 0 }, { 3, 2, 0, 0 }, { -1, -2, 5, 5 }, { -2, -1, 5, 5 } } } }, "float64")
      local y, idx = F.adaptive_max_pool2d(x, 2, true)
      local y2, idx2 = F.max_pool2d(x, 2, { return_indices = true })
      H.equal(y, y2)
      H.equal(idx, idx2)
      H.equal(idx, { { { { 2, 3 }, { 9, 11 } } } })   -- the first of equal maxima
    end)

    it("adaptive_max_pool1d pools windows along L", function()
      local x = tide.tensor({ { { 3, 1, 4, 1, 5, 9, 2 }, { 0, -1, -2, -3, -4, -5, -6 } } }, "float64")
      local y, idx = F.adaptive_max_pool1d(x, 3, true)
      -- windows [1, 3], [3, 5], [5, 7]
      H.equal(y, { { { 4, 5, 9 }, { 0, -2, -4 } } })
      H.equal(idx, { { { 3, 5, 6 }, { 1, 3, 5 } } })
      -- windows [1, 2], [2, 4], [4, 6], [6, 7]
      H.equal(F.adaptive_max_pool1d(x[1], { 4 }), { { 3, 4, 9, 9 }, { 0, -1, -3, -5 } })
      assert.are.same({ 0, 2, 3 }, F.adaptive_max_pool1d(tide.zeros({ 0, 2, 7 }), 3):shape())
    end)

    it("has gradients (gradcheck), reaching each window's maximum", function()
      local x = leaf(rnd({ 1, 2, 5, 4 }))
      assert.is_true(gradcheck(function(a) return F.adaptive_max_pool2d(a, { 3, 3 }) end, { x }))
      local x1 = leaf(rnd({ 2, 7 }))
      assert.is_true(gradcheck(function(a) return F.adaptive_max_pool1d(a, 4) end, { x1 }))
    end)

    it("nn.AdaptiveMaxPool1d/2d return the indices on request, and print as PyTorch", function()
      local x = rnd({ 2, 3, 6, 6 })
      local m = nn.AdaptiveMaxPool2d({ 2, 3 }, true)
      local y, idx = m(x)
      local y2, idx2 = F.adaptive_max_pool2d(x, { 2, 3 }, true)
      H.equal(y, y2)
      H.equal(idx, idx2)
      assert.are.equal("AdaptiveMaxPool2d(output_size=(2, 3))", tostring(m))
      assert.are.equal("AdaptiveMaxPool1d(output_size=4)", tostring(nn.AdaptiveMaxPool1d(4)))
      H.equal(nn.AdaptiveMaxPool1d(2)(x[1]), F.adaptive_max_pool1d(x[1], 2))
      assert.are.same({}, m:state_dict_keys())
    end)

    it("names the function and the values in its errors", function()
      assert.has_error(function() F.adaptive_max_pool2d(tide.ones(2, 3, 0, 4), 2) end,
        "adaptive_max_pool2d: input [2,3,0,4] has an empty spatial dimension 3")
      assert.has_error(function() F.adaptive_max_pool2d(tide.ones(2, 4), 2) end,
        "adaptive_max_pool2d: expects a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape [2,4]")
      assert.has_error(function() F.adaptive_max_pool2d(tide.ones(1, 2, 4), { 0, 2 }) end,
        "adaptive_max_pool2d: output_size must be positive integers, got 0")
      assert.has_error(function() F.adaptive_max_pool1d(tide.ones(1, 2, 4), { 1, 2 }) end,
        "adaptive_max_pool1d: output_size must be an integer or a table of 1 integers, got a table of 2")
      assert.has_error(function() F.adaptive_max_pool1d(tide.ones(1, 2, 4), 2, "yes") end,
        "adaptive_max_pool1d: return_indices must be a boolean, got string")
      assert.has_error(function() F.adaptive_max_pool1d(i64({ { 1, 2 } }), 1) end,
        "adaptive_max_pool1d: input must be a floating-point tensor, got int64")
    end)
  end)

  describe("max unpooling", function()
    it("max_unpool2d puts each maximum back at max_pool2d's index, zeros elsewhere, on any layout", function()
      local xs = { 2, 3, 4, 6 }
      local x, xv = rnd(xs)
      local X = at(xv, xs)
      local y, idx = F.max_pool2d(x, 2, { return_indices = true })
      local want = build(xs, function(i)
        local r0, c0 = floor((i[3] - 1) / 2) * 2, floor((i[4] - 1) / 2) * 2
        local best, br, bc = -math.huge, nil, nil
        for r = r0 + 1, r0 + 2 do
          for c = c0 + 1, c0 + 2 do
            if X(i[1], i[2], r, c) > best then best, br, bc = X(i[1], i[2], r, c), r, c end
          end
        end
        return (br == i[3] and bc == i[4]) and best or 0
      end)
      each_layout(y, function(t, name) H.equal(F.max_unpool2d(t, idx, 2), want, name) end)
      H.equal(F.max_unpool2d(y[2], idx[2], { 2, 2 }), want[2])
      -- output_size within a stride of the default ({N, C} may lead), the indices into the bigger plane
      local big = F.max_unpool2d(y, idx, 2, { output_size = { 2, 3, 5, 7 } })
      assert.are.same({ 2, 3, 5, 7 }, big:shape())
      H.equal(big:reshape(2, 3, 35):narrow(3, 1, 24), F.max_unpool2d(y, idx, 2):reshape(2, 3, 24))
      assert.are.same({ 0, 3, 4, 6 }, F.max_unpool2d(tide.zeros({ 0, 3, 2, 3 }), i64({}):view(0, 3, 2, 3), 2):shape())
    end)

    it("follows kernel, stride and padding for the default size, and unpools 1-d", function()
      local x = tide.tensor({ { { { 1, 2 }, { 3, 4 } } } }, "float64")
      local idx = i64({ { { { 1, 5 }, { 11, 25 } } } })
      -- (2 - 1) * 3 - 2 * 1 + 4 = 5
      local y = F.max_unpool2d(x, idx, 4, { stride = 3, padding = 1 })
      assert.are.same({ 1, 1, 5, 5 }, y:shape())
      H.equal(y:reshape(25), { 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4 })
      local x1 = tide.tensor({ { { 5, 7, 9 } } }, "float64")
      local y1, i1 = F.max_pool1d(tide.tensor({ { { 1, 5, 7, 2, 3, 9 } } }, "float64"), 2, { return_indices = true })
      H.equal(y1, x1)
      H.equal(F.max_unpool1d(y1, i1, 2), { { { 0, 5, 7, 0, 0, 9 } } })
      H.equal(F.max_unpool1d(y1[1], i1[1], 2, { output_size = { 7 } }), { { 0, 5, 7, 0, 0, 9, 0 } })
    end)

    it("has gradients (gradcheck)", function()
      local _, idx = F.max_pool2d(rnd({ 1, 2, 4, 4 }), 2, { return_indices = true })
      assert.is_true(gradcheck(function(a) return F.max_unpool2d(a, idx, 2) end, { leaf(rnd({ 1, 2, 2, 2 })) }))
      -- windows apart (overlapping ones may pick one element twice, and only one write stands)
      local _, i1 = F.max_pool1d(rnd({ 2, 6 }), 2, { stride = 3, return_indices = true })
      assert.is_true(gradcheck(function(a) return F.max_unpool1d(a, i1, 2, { stride = 3 }) end, { leaf(rnd({ 2, 2 })) }))
    end)

    it("nn.MaxUnpool1d/2d take indices and an output_size in forward, and print as PyTorch", function()
      local x = rnd({ 1, 2, 4, 4 })
      local y, idx = nn.MaxPool2d(2, { return_indices = true })(x)
      local m = nn.MaxUnpool2d(2)
      H.equal(m(y, idx), F.max_unpool2d(y, idx, 2))
      assert.are.same({ 1, 2, 5, 5 }, m(y, idx, { 5, 5 }):shape())
      assert.are.equal("MaxUnpool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))", tostring(m))
      assert.are.equal("MaxUnpool1d(kernel_size=(3,), stride=(2,), padding=(1,))", tostring(nn.MaxUnpool1d(3, 2, 1)))
      assert.are.same({}, m:state_dict_keys())
    end)

    it("names the function and the values in its errors", function()
      local y, idx = F.max_pool2d(rnd({ 1, 1, 4, 4 }), 2, { return_indices = true })
      assert.has_error(function() F.max_unpool2d(y, idx, 2, { output_size = { 6, 4 } }) end,
        "max_unpool2d: invalid output_size {6, 4} (dim 1 must be between 3 and 5)")
      assert.has_error(function() F.max_unpool2d(y, idx, 2, { output_size = { 4 } }) end,
        "max_unpool2d: output_size must have 2 or 4 elements, got 1")
      assert.has_error(function() F.max_unpool2d(y, idx:narrow(4, 1, 1), 2) end,
        "max_unpool2d: indices of shape [1,1,2,1] do not match input of shape [1,1,2,2]")
      assert.has_error(function() F.max_unpool2d(y, idx:double(), 2) end,
        "max_unpool2d: indices must be an int64 or int32 tensor (max_pool's), got float64")
      assert.has_error(function() F.max_unpool2d(y, idx, 2, { dilation = 2 }) end,
        "max_unpool2d: unknown option 'dilation'")
      assert.has_error(function() F.max_unpool1d(y, idx, 2) end,
        "max_unpool1d: expects a 2-d (C, L) or 3-d (N, C, L) input, got shape [1,1,2,2]")
      assert.has_error(function() F.max_unpool1d(y[1][1], idx[1][1], 0) end,
        "max_unpool1d: kernel_size must be positive integers, got 0")
      assert.has_error(H.sync(function() F.max_unpool2d(y, i64({ { { { 1, 2 }, { 3, 17 } } } }), 2) end),
        "scatter: index 17 is out of range for dimension 3 of size 16")
    end)
  end)

  describe("lp pooling", function()
    local function lp2d_ref(x, xs, p, kh, kw, sh, sw)
      local X = at(x, xs)
      local oh, ow = floor((xs[3] - kh) / sh) + 1, floor((xs[4] - kw) / sw) + 1
      return build({ xs[1], xs[2], oh, ow }, function(i)
        local s = 0
        for r = 1, kh do
          for c = 1, kw do s = s + X(i[1], i[2], (i[3] - 1) * sh + r, (i[4] - 1) * sw + c) ^ p end
        end
        return s ^ (1 / p)
      end)
    end

    it("lp_pool2d is the p-norm of each window, on any layout", function()
      local xs = { 2, 2, 5, 6 }
      local x, xv = rnd(xs, 0.1, 2)
      each_layout(x, function(t, name) H.close(F.lp_pool2d(t, 2, 2), lp2d_ref(xv, xs, 2, 2, 2, 2, 2), 1e-12, 0, name) end)
      H.close(F.lp_pool2d(x, 3, { 2, 3 }, { stride = { 1, 2 } }), lp2d_ref(xv, xs, 3, 2, 3, 1, 2), 1e-12)
      H.close(F.lp_pool2d(x[1], 1.5, 3), lp2d_ref(xv, xs, 1.5, 3, 3, 3, 3)[1], 1e-12)
      assert.are.same({ 0, 2, 2, 3 }, F.lp_pool2d(tide.zeros({ 0, 2, 5, 6 }), 2, 2):shape())
    end)

    it("lp_pool1d pools along L; ceil_mode scales the partial window's average by the kernel size, as PyTorch", function()
      local x = tide.tensor({ { { 1, 2, 3, 4, 5 } } }, "float64")
      H.close(F.lp_pool1d(x, 2, 2), { { { sqrt(5), 5 } } }, 1e-14)
      H.close(F.lp_pool1d(x, 1, 3, { stride = 1 }), { { { 6, 9, 12 } } }, 1e-14)
      H.close(F.lp_pool1d(x[1], 1, 2, { ceil_mode = true }), { { 3, 7, 10 } }, 1e-14)
    end)

    it("has gradients (gradcheck)", function()
      assert.is_true(gradcheck(function(a) return F.lp_pool2d(a, 2, 2, { stride = 1 }) end,
        { leaf(rnd({ 1, 2, 3, 3 }, 0.2, 1)) }))
      assert.is_true(gradcheck(function(a) return F.lp_pool1d(a, 3, 2) end, { leaf(rnd({ 2, 4 }, 0.2, 1)) }))
    end)

    it("nn.LPPool1d/2d and the errors", function()
      local x = rnd({ 1, 2, 4, 4 }, 0.1, 1)
      H.close(nn.LPPool2d(2, 2, 1)(x), F.lp_pool2d(x, 2, 2, { stride = 1 }), 1e-14)
      H.close(nn.LPPool1d(3, 2)(x[1]), F.lp_pool1d(x[1], 3, 2), 1e-14)
      assert.are.equal("LPPool2d(norm_type=2, kernel_size=(3, 2), stride=(3, 2), ceil_mode=false)",
        tostring(nn.LPPool2d(2, { 3, 2 })))
      assert.are.equal("LPPool1d(norm_type=1.5, kernel_size=3, stride=1, ceil_mode=true)",
        tostring(nn.LPPool1d(1.5, 3, 1, true)))
      assert.has_error(function() F.lp_pool2d(x, 0, 2) end, "lp_pool2d: norm_type must be a positive finite number, got 0")
      assert.has_error(function() F.lp_pool2d(x, 2, 5) end,
        "lp_pool2d: kernel_size {5, 5} is larger than the input [1,2,4,4]")
      assert.has_error(function() F.lp_pool1d(x[1], 2, 5) end, "lp_pool1d: kernel_size 5 is larger than the input [2,4,4]")
      assert.has_error(function() F.lp_pool1d(x[1], 2, 2, { padding = 1 }) end, "lp_pool1d: unknown option 'padding'")
      assert.has_error(function() F.lp_pool2d(x, 2, 2, { ceil_mode = 1 }) end, "lp_pool2d: ceil_mode must be a boolean, got number")
      assert.has_error(function() nn.LPPool1d(-1, 2) end, "LPPool1d: norm_type must be a positive finite number, got -1")
    end)
  end)

  describe("local_response_norm and channel_shuffle", function()
    local function lrn_ref(x, xs, size, alpha, beta, k)
      local X = at(x, xs)
      return build(xs, function(i)
        local s = 0
        for c = i[2] - floor(size / 2), i[2] + floor((size - 1) / 2) do
          if c >= 1 and c <= xs[2] then
            local j = { i[1], c }
            for d = 3, #xs do j[d] = i[d] end
            s = s + X(unpack(j)) ^ 2
          end
        end
        local j = {}
        for d = 1, #xs do j[d] = i[d] end
        return X(unpack(j)) / (k + alpha * s / size) ^ beta
      end)
    end

    it("local_response_norm matches PyTorch's formula over 3-d, 4-d and 5-d inputs, on any layout", function()
      local xs = { 2, 5, 3 }
      local x, xv = rnd(xs, -2, 2)
      each_layout(x, function(t, name)
        H.close(F.local_response_norm(t, 3, { alpha = 0.5, beta = 0.75, k = 2 }), lrn_ref(xv, xs, 3, 0.5, 0.75, 2),
          1e-12, 0, name)
      end)
      local x4s = { 2, 4, 2, 3 }
      local x4, xv4 = rnd(x4s, -2, 2)
      H.close(F.local_response_norm(x4, 2, 0.3, 0.5, 1), lrn_ref(xv4, x4s, 2, 0.3, 0.5, 1), 1e-12)
      H.close(F.local_response_norm(x4, 4), lrn_ref(xv4, x4s, 4, 1e-4, 0.75, 1), 1e-12)
      local x5s = { 1, 3, 2, 2, 2 }
      local x5, xv5 = rnd(x5s, -2, 2)
      H.close(F.local_response_norm(x5, 5, 1, 1, 1), lrn_ref(xv5, x5s, 5, 1, 1, 1), 1e-12)
      assert.are.same({ 0, 4, 2, 3 }, F.local_response_norm(tide.zeros({ 0, 4, 2, 3 }), 2):shape())
      assert.is_true(gradcheck(function(a) return F.local_response_norm(a, 3, 0.5, 0.75, 2) end, { leaf(x) }))
      local m = nn.LocalResponseNorm(2, 0.3, 0.5, 1)
      H.close(m(x4), F.local_response_norm(x4, 2, 0.3, 0.5, 1), 1e-14)
      assert.are.equal("LocalResponseNorm(2, alpha=0.3, beta=0.5, k=1)", tostring(m))
      assert.are.equal("LocalResponseNorm(5, alpha=0.0001, beta=0.75, k=1)", tostring(nn.LocalResponseNorm(5)))
      assert.has_error(function() F.local_response_norm(x[1], 2) end,
        "local_response_norm: expects an input of at least 3 dimensions (N, C, ...), got shape [5,3]")
      assert.has_error(function() F.local_response_norm(x, 0) end,
        "local_response_norm: size must be a positive integer, got 0")
      assert.has_error(function() F.local_response_norm(x, 2, { alpha = "a" }) end,
        "local_response_norm: alpha must be a number, got a")
      assert.has_error(function() F.local_response_norm(x, 2, { gamma = 1 }) end,
        "local_response_norm: unknown option 'gamma'")
    end)

    it("channel_shuffle interleaves the groups, as ShuffleNet's", function()
      local x = tide.arange(0, 12, "float64"):view(1, 6, 2)
      H.equal(F.channel_shuffle(x, 2), { { { 0, 1 }, { 6, 7 }, { 2, 3 }, { 8, 9 }, { 4, 5 }, { 10, 11 } } })
      H.equal(F.channel_shuffle(x, 3), { { { 0, 1 }, { 4, 5 }, { 8, 9 }, { 2, 3 }, { 6, 7 }, { 10, 11 } } })
      H.equal(F.channel_shuffle(x:transpose(2, 3):contiguous():transpose(2, 3), 2), F.channel_shuffle(x, 2))
      local x4 = rnd({ 2, 4, 3, 2 })
      H.equal(nn.ChannelShuffle(2)(x4), F.channel_shuffle(x4, 2))
      H.equal(F.channel_shuffle(x4, 2):index_select(2, i64({ 1, 3, 2, 4 })), x4)
      assert.are.same({ 0, 4, 0 }, F.channel_shuffle(tide.zeros({ 0, 4, 0 }), 4):shape())
      assert.are.equal("ChannelShuffle(groups=3)", tostring(nn.ChannelShuffle(3)))
      assert.has_error(function() F.channel_shuffle(x, 4) end,
        "channel_shuffle: the 6 channels of input [1,6,2] are not divisible by groups 4")
      assert.has_error(function() F.channel_shuffle(x[1], 2) end,
        "channel_shuffle: expects an input of at least 3 dimensions (N, C, *), got shape [6,2]")
      assert.has_error(function() nn.ChannelShuffle(0) end, "ChannelShuffle: groups must be a positive integer, got 0")
    end)
  end)

  describe("affine_grid and grid_sample", function()
    it("affine_grid maps the base grid through theta, with and without align_corners", function()
      H.close(F.affine_grid(tide.tensor({ { { 1, 0, 0 }, { 0, 1, 0 } } }, "float64"), { 1, 1, 2, 3 }),
        { { { { -2 / 3, -0.5 }, { 0, -0.5 }, { 2 / 3, -0.5 } }, { { -2 / 3, 0.5 }, { 0, 0.5 }, { 2 / 3, 0.5 } } } }, 1e-14)
      local th, tv = rnd({ 2, 2, 3 })
      for _, ac in ipairs { false, true } do
        local want = affine_grid_ref(tv, 2, 3, 4, ac)
        each_layout(th, function(t, name) H.close(F.affine_grid(t, { 2, 5, 3, 4 }, ac), want, 1e-12, 1e-15, name) end)
      end
      H.close(F.affine_grid(th, { 2, 1, 1, 3 }, true), affine_grid_ref(tv, 2, 1, 3, true), 1e-12, 1e-15)
      assert.are.same({ 0, 3, 4, 2 }, F.affine_grid(tide.zeros({ 0, 2, 3 }), { 0, 1, 3, 4 }):shape())
      assert.is_true(gradcheck(function(a) return F.affine_grid(a, { 2, 1, 3, 2 }) end, { leaf(th) }))
      assert.has_error(function() F.affine_grid(th, { 3, 1, 3, 4 }) end,
        "affine_grid: theta must be a batch of 2-d affine matrices [3, 2, 3] for size {3, 1, 3, 4}, got shape [2,2,3]")
      assert.has_error(function() F.affine_grid(th, { 2, 1, 2, 3, 4 }) end,
        "affine_grid: theta must be a batch of 3-d affine matrices [2, 3, 4] for size {2, 1, 2, 3, 4}, got shape [2,2,3]")
      assert.has_error(function() F.affine_grid(th, { 2, 1, 0, 4 }) end,
        "affine_grid: size must hold positive sizes (N may be 0), got {2, 1, 0, 4}")
      assert.has_error(function() F.affine_grid(th, { 2, 1, 3, 4 }, 1) end,
        "affine_grid: align_corners must be a boolean, got number")
    end)

    it("grid_sample matches PyTorch's sampler for each mode, padding mode and align_corners, on any layout", function()
      local xs, gs = { 2, 3, 4, 5 }, { 2, 3, 4, 2 }
      local x, xv = rnd(xs, -2, 2)
      local g, gv = rnd(gs, -1.6, 1.6)
      -- points on pixel centres and half-way between (nearest rounds half to even)
      g = g:clone()
      g[1][1][1] = tide.tensor({ 0, 0 }, "float64")
      g[1][1][2] = tide.tensor({ -0.2, 0.5 }, "float64")
      g[2][3][4] = tide.tensor({ 1, -1 }, "float64")
      gv = H.flat(g:totable())
      for _, mode in ipairs { "bilinear", "nearest" } do
        for _, pad in ipairs { "zeros", "border", "reflection" } do
          for _, ac in ipairs { false, true } do
            local want = grid_sample_ref(xv, xs, gv, gs, mode, pad, ac)
            local o = { mode = mode, padding_mode = pad, align_corners = ac }
            local label = mode .. "/" .. pad .. "/" .. tostring(ac)
            each_layout(x, function(t, name) H.close(F.grid_sample(t, g, o), want, 1e-12, 1e-14, label .. " " .. name) end)
            H.close(F.grid_sample(x, g:transpose(2, 3):contiguous():transpose(2, 3), o), want, 1e-12, 1e-14, label)
          end
        end
      end
      -- reflection far outside, and a single-pixel axis
      local far = tide.tensor({ { { { 3.7, -2.9 }, { -5.2, 0.3 } } } }, "float64")
      local x1, xv1 = rnd({ 1, 1, 1, 3 })
      for _, ac in ipairs { false, true } do
        H.close(F.grid_sample(x1, far, { padding_mode = "reflection", align_corners = ac }),
          grid_sample_ref(xv1, { 1, 1, 1, 3 }, H.flat(far:totable()), { 1, 1, 2, 2 }, "bilinear", "reflection", ac),
          1e-12, 1e-14)
      end
      assert.are.same({ 0, 3, 2, 2 }, F.grid_sample(tide.zeros({ 0, 3, 4, 5 }), tide.zeros({ 0, 2, 2, 2 })):shape())
      assert.are.same({ 2, 3, 0, 4 }, F.grid_sample(x, tide.zeros({ 2, 0, 4, 2 }, "float64")):shape())
    end)

    it("grid_sample reads hand-computed values at the centre, the corners and outside", function()
      local x = tide.tensor({ { { { 1, 2 }, { 3, 4 } } } }, "float64")
      local g = tide.tensor({ { { { 0, 0 }, { -1, -1 }, { 1, 1 }, { 1.5, -1 } } } }, "float64")
      -- without align_corners, -1 and 1 are the outer edges: half a pixel beyond the corner pixels' centres
      H.equal(F.grid_sample(x, g), { { { { 2.5, 0.25, 1, 0 } } } })
      H.equal(F.grid_sample(x, g, { padding_mode = "border" }), { { { { 2.5, 1, 4, 2 } } } })
      -- x = 1.5 is pixel 2, reflected at the edge (pixel 1.5) to pixel 1
      H.equal(F.grid_sample(x, g, { padding_mode = "reflection" }), { { { { 2.5, 1, 4, 2 } } } })
      -- with align_corners, x = 1.5 is pixel 1.25: a quarter of the way to the zeros beyond
      H.equal(F.grid_sample(x, g, { align_corners = true }), { { { { 2.5, 1, 4, 1.5 } } } })
      -- pixels 0.5 and -0.5 round to even 0, pixel 1.5 to 2 (outside)
      H.equal(F.grid_sample(x, g, { mode = "nearest" }), { { { { 1, 1, 0, 0 } } } })
    end)

    it("grid_sample of the identity affine grid gives the input back; a NaN point leaves the others alone", function()
      local x = rnd({ 2, 2, 3, 4 })
      local id = tide.tensor({ { 1, 0, 0 }, { 0, 1, 0 } }, "float64"):expand(2, 2, 3)
      for _, ac in ipairs { false, true } do
        H.close(F.grid_sample(x, F.affine_grid(id, { 2, 2, 3, 4 }, ac), { align_corners = ac }), x, 1e-12, 1e-14)
        H.close(F.grid_sample(x, F.affine_grid(id, { 2, 2, 3, 4 }, ac), { mode = "nearest", align_corners = ac }), x)
      end
      local g = tide.tensor({ { { { 0 / 0, 0 }, { -0.5, -0.5 } } } }, "float64")
      local x2 = tide.tensor({ { { { 1, 2 }, { 3, 4 } } } }, "float64")
      H.equal(F.grid_sample(x2, g), { { { { 0 / 0, 1 } } } })   -- bilinear: NaN weights, as PyTorch's CPU kernel
      H.equal(F.grid_sample(x2, g, { mode = "nearest" }), { { { { 0, 1 } } } })
    end)

    it("grid_sample has gradients for input and grid (gradcheck), and none for grid in nearest mode", function()
      local x = leaf(rnd({ 1, 2, 3, 4 }))
      local g = leaf(rnd({ 1, 2, 3, 2 }, -1.3, 1.3))
      for _, pad in ipairs { "zeros", "border", "reflection" } do
        for _, ac in ipairs { false, true } do
          assert.is_true(gradcheck(function(a, b)
            return F.grid_sample(a, b, { padding_mode = pad, align_corners = ac })
          end, { x, g }))
        end
      end
      local gn = g:detach():clone():requires_grad_()
      local xn = x:detach():clone():requires_grad_()
      F.grid_sample(xn, gn, { mode = "nearest" }):sum():backward()
      assert.is_true(gn.grad == nil or gn.grad:eq(0):all():item())
      assert.is_true(gradcheck(function(a) return F.grid_sample(a, gn:detach(), { mode = "nearest" }) end, { x }))
      -- a spatial transformer: affine_grid then grid_sample, differentiable in theta
      local th = leaf(tide.tensor({ { { 0.9, 0.1, 0.05 }, { -0.2, 1.1, 0.1 } } }, "float64"))
      assert.is_true(gradcheck(function(t) return F.grid_sample(x:detach(), F.affine_grid(t, { 1, 2, 3, 3 })) end, { th }))
    end)

    it("grid_sample names the function and the values in its errors", function()
      local x, g = tide.zeros({ 1, 2, 3, 3 }), tide.zeros({ 1, 2, 2, 2 })
      assert.has_error(function() F.grid_sample(x, g, { mode = "area" }) end,
        "grid_sample: mode must be 'bilinear', 'nearest' or 'bicubic', got area")
      assert.has_error(function() F.grid_sample(x, g, { padding_mode = "circular" }) end,
        "grid_sample: padding_mode must be 'zeros', 'border' or 'reflection', got circular")
      assert.has_error(function() F.grid_sample(x, g:double()) end,
        "grid_sample: input (float32) and grid (float64) must have the same dtype")
      assert.has_error(function() F.grid_sample(x[1], g) end,
        "grid_sample: expects a 4-d input [N, C, H, W] and grid [N, oH, oW, 2], or a 5-d input [N, C, D, H, W] and " ..
        "grid [N, oD, oH, oW, 3], got [2,3,3] and [1,2,2,2]")
      assert.has_error(function() F.grid_sample(x, tide.zeros({ 2, 2, 2, 2 })) end,
        "grid_sample: grid of shape [2,2,2,2] does not match input of shape [1,2,3,3] (expected [1, oH, oW, 2])")
      assert.has_error(function() F.grid_sample(x, tide.zeros({ 1, 2, 2, 3 })) end,
        "grid_sample: grid of shape [1,2,2,3] does not match input of shape [1,2,3,3] (expected [1, oH, oW, 2])")
      assert.has_error(function() F.grid_sample(tide.zeros({ 1, 2, 0, 3 }), g) end,
        "grid_sample: input [1,2,0,3] has an empty spatial dimension")
      assert.has_error(function() F.grid_sample(x, g, { align_corners = "yes" }) end,
        "grid_sample: align_corners must be a boolean, got string")
      assert.has_error(function() F.grid_sample(x, g, { interpolation = "bilinear" }) end,
        "grid_sample: unknown option 'interpolation'")
    end)
  end)

  describe("under tide.jit.compile", function()
    it("each function captures (no host reads) and replays the eager values", function()
      local x = rnd({ 2, 4, 6, 6 }, 0.1, 1)
      local theta = rnd({ 2, 2, 3 })
      local _, idx = F.max_pool2d(x, 2, { return_indices = true })
      local t = i64({ 2, 4 })
      local lt = i64({ { 1, 3, 0, 0, 0, 0 }, { 2, 0, 0, 0, 0, 0 } })
      local function body(a, th)
        local y, i = F.adaptive_max_pool2d(a, { 4, 3 }, true)
        local g = F.affine_grid(th, { 2, 4, 5, 5 })
        local pooled = F.max_pool2d(a, 2)
        return y, i, F.grid_sample(a, g, { padding_mode = "reflection" }), F.max_unpool2d(pooled, idx, 2),
          F.lp_pool2d(a, 2, 3), F.local_response_norm(a, 3), F.channel_shuffle(a, 2), F.rms_norm(a, 6),
          F.adaptive_max_pool1d(a:select(3, 1), 4), F.softshrink(a, 0.3), F.hardshrink(a, 0.3),
          F.multi_margin_loss(a:select(3, 1):select(3, 1), t), F.multilabel_margin_loss(a:select(2, 1):select(2, 1), lt),
          F.multilabel_soft_margin_loss(a:select(4, 1), a:select(4, 2):gt(0.5):double()),
          F.soft_margin_loss(a, a - 0.5)
      end
      local f = tide.jit.compile(body)
      for call = 1, 3 do   -- eager warm-up, capture, replay
        local a = x * call
        local want, got = { body(a, theta) }, { f(a, theta) }
        assert.are.equal(#want, #got)
        for i = 1, #want do H.close(got[i], want[i], 1e-12, 1e-14, "result " .. i .. ", call " .. call) end
      end
      assert.are.equal(1, f:stats().captures)
      assert.are.equal(1, f:stats().replays)
    end)

    it("the dropouts draw fresh masks on each replay", function()
      local f = tide.jit.compile(function(a)
        return F.dropout2d(a, 0.5), F.alpha_dropout(a, 0.5, true), F.rrelu(-a, 0.1, 0.3, true),
          F.gumbel_softmax(a:view(4, 16), { hard = true })
      end)
      local a = tide.ones(2, 4, 2, 4)
      local seen = {}
      for call = 1, 4 do
        local d2, ad, rr, gs = f(a)
        local lo, hi = d2:reshape(8, 8):min(2), d2:reshape(8, 8):max(2)
        H.equal(lo, hi, "whole channels, call " .. call)
        H.equal(gs:sum(2), { 1, 1, 1, 1 })
        assert.is_true(rr:le(-0.1):all():item() and rr:ge(-0.3):all():item())
        seen[#seen + 1] = table.concat(H.flat(d2:totable()), ",") .. table.concat(H.flat(ad:totable()), ",")
      end
      assert.are_not.equal(seen[3], seen[4])   -- each replay draws anew
      assert.are.equal(2, f:stats().replays)
    end)
  end)
end)
