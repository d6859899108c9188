-- nn.functional: every function against a float64 reference written here in
-- plain Lua (not the implementation), its gradients by finite differences
-- (gradcheck on float64 inputs), and its errors for bad shapes and dtypes.
local tide = require "tide"
local H = require "spec.helpers"
local F = require "tide.nn.functional"

local gradcheck = tide.autograd.gradcheck

-- -- data -------------------------------------------------------------------------------

local seed = 11
local function vals(n, lo, hi)
  local r = H.values(n, lo, hi, seed)
  seed = seed + 7919
  return r
end
local numel = H.numel
-- A float64 tensor of deterministic values in [lo, hi), requiring grad unless grad == false.
local function rnd(shape, lo, hi, grad)
  local t = tide.tensor(H.nest(vals(numel(shape), lo or -2, hi or 2), shape), "float64")
  if grad ~= false then t:requires_grad_() end
  return t
end
local function idx(list) return tide.tensor(list, "int64") end

-- -- plain-Lua references ----------------------------------------------------------------

local function map2(m, f)
  local r = {}
  for i, row in ipairs(m) do r[i] = {} for j, v in ipairs(row) do r[i][j] = f(v, i, j) end end
  return r
end
local function log_softmax_row(row)
  local mx = -math.huge
  for _, v in ipairs(row) do mx = math.max(mx, v) end
  local s = 0
  for _, v in ipairs(row) do s = s + math.exp(v - mx) end
  local r = {}
  for i, v in ipairs(row) do r[i] = v - mx - math.log(s) end
  return r
end
local function softmax_row(row)
  local r = log_softmax_row(row)
  for i, v in ipairs(r) do r[i] = math.exp(v) end
  return r
end
local function sigmoid(x) return 1 / (1 + math.exp(-x)) end
-- erf to ~1e-13 by its Taylor series (|x| < 3 here).
local function erf(x)
  local s, term, n = 0, x, 0
  repeat
    s = s + term / (2 * n + 1)
    n = n + 1
    term = -term * x * x / n
  until math.abs(term) < 1e-17
  return 2 / math.sqrt(math.pi) * s
end
local linalg_ref = require "spec.helpers.linalg_ref"
local matmul, transpose = linalg_ref.mm, linalg_ref.t   -- a [n][k] by b [k][m]; a^T

-- Cross entropy by PyTorch's documented formula over positions: rows[i] are
-- logits, targets[i] class indices (or probability rows when probs).
local function ce_ref(rows, targets, o)
  o = o or {}
  local c = #rows[1]
  local eps, ignore = o.label_smoothing or 0, o.ignore_index or -100
  local w = o.weight or {}
  for k = 1, c do w[k] = w[k] or 1 end
  local losses, total, denom = {}, 0, 0
  for i, row in ipairs(rows) do
    local lp = o.log_probs and row or log_softmax_row(row)
    local l = 0
    if o.probs then
      for k = 1, c do
        local q = targets[i][k] * (1 - eps) + eps / c
        l = l - w[k] * q * lp[k]
      end
      denom = denom + 1
    elseif targets[i] ~= ignore then
      local t = targets[i]
      l = -(1 - eps) * w[t] * lp[t]
      for k = 1, c do l = l - eps / c * w[k] * lp[k] end
      denom = denom + w[t]
    end
    losses[i] = l
    total = total + l
  end
  if o.reduction == "none" then return losses end
  if o.reduction == "sum" then return total end
  return total / denom
end

-- -- specs ------------------------------------------------------------------------------------

describe("nn.functional", function()
  describe("linear", function()
    it("computes x W^T + b, batched over leading dimensions", function()
      local x, w, b = rnd({ 2, 3 }, -1, 1, false), rnd({ 4, 3 }, -1, 1, false), rnd({ 4 }, -1, 1, false)
      local ref = matmul(x:totable(), transpose(w:totable()))
      local bt = b:totable()
      H.close(F.linear(x, w, b), map2(ref, function(v, _, j) return v + bt[j] end), 1e-12, 1e-12)
      H.close(F.linear(x, w), ref, 1e-12, 1e-12)
      local x3 = tide.stack({ x, x * 2 })
      local y3 = F.linear(x3, w, b)
      assert.are.same({ 2, 2, 4 }, y3:shape())
      H.close(y3[2], map2(ref, function(v, _, j) return 2 * v + bt[j] end), 1e-12, 1e-12)
    end)
    it("has gradients for input, weight and bias", function()
      assert.is_true(gradcheck(F.linear, { rnd { 2, 2, 3 }, rnd { 4, 3 }, rnd { 4 } }))
    end)
    it("names the shapes that do not fit", function()
      assert.has_error(function() F.linear(tide.zeros(2, 3), tide.zeros(4, 5)) end,
        "linear: input of shape [2,3] has 3 features but weight of shape [4,5] expects 5")
      assert.has_error(function() F.linear(tide.zeros(2, 3), tide.zeros(4, 3), tide.zeros(3)) end,
        "linear: bias of shape [3] does not match weight of shape [4,3] (expected [4])")
      assert.has_error(function() F.linear(tide.zeros(2, 3), tide.zeros(3)) end,
        "linear: weight must be 2-d [out_features, in_features], got shape [3]")
      assert.has_error(function() F.linear(tide.zeros(2, 3, "int64"), tide.zeros(4, 3)) end,
        "linear: input must be a floating-point tensor, got int64")
      assert.has_error(function() F.linear({}, tide.zeros(4, 3)) end, "linear: input must be a tensor, got table")
    end)
  end)

  describe("activations", function()
    local x = rnd({ 3, 4 }, -3, 3, false)
    local xs = x:totable()
    local refs = {
      relu = function(v) return math.max(v, 0) end,
      tanh = function(v) return math.tanh(v) end,
      sigmoid = sigmoid,
      silu = function(v) return v * sigmoid(v) end,
      gelu = function(v) return 0.5 * v * (1 + erf(v / math.sqrt(2))) end,
    }
    for name, ref in pairs(refs) do
      it(name .. " matches its formula and has a gradient", function()
        H.close(F[name](x), map2(xs, ref), 1e-6, 1e-9)
        assert.is_true(gradcheck(F[name], { rnd { 3, 4 } }))
      end)
    end
    it("gelu with the tanh approximation", function()
      local ref = map2(xs, function(v)
        return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ^ 3)))
      end)
      H.close(F.gelu(x, "tanh"), ref, 1e-6, 1e-9)
    end)
    it("gelu's float32 gradient, both forms, within 3e-7 of the float64 one", function()
      -- float32 computes in float (vector loops), float64 in double through libm;
      -- the exact form's sum cancels near -0.75, so the bound is absolute
      local xf = tide.linspace(-20, 20, 40001, "float32")
      xf = tide.cat({ xf, tide.tensor({ -0.65, 0.65, 0.6499999, -0.6500001, 1e-30, -0.7518 }) })
      local gy = tide.randn(xf:numel())
      for _, form in ipairs { "none", "tanh" } do
        local a, b = xf:clone():requires_grad_(), xf:double():requires_grad_()
        F.gelu(a, form):backward(gy)
        F.gelu(b, form):backward(gy:double())
        local err = (a.grad:double() - b.grad):abs():max():item()
        assert.is_true(err < 3e-7 * 4, form .. ": " .. err)   -- gy is up to about 4
      end
      local sp = tide.tensor({ 0 / 0, 1 / 0, -1 / 0, 0, -0.0, 30, -30 }):requires_grad_()
      F.gelu(sp):backward(tide.ones(7))
      H.equal(sp.grad, { 0 / 0, 0 / 0, 0 / 0, 0.5, 0.5, 1, 0 })
    end)
    it("softmax and log_softmax along a dimension", function()
      H.close(F.softmax(x, 2), map2(xs, function(_, i, j) return softmax_row(xs[i])[j] end), 1e-12, 1e-14)
      H.close(F.log_softmax(x, -1), map2(xs, function(_, i, j) return log_softmax_row(xs[i])[j] end), 1e-12, 1e-14)
      local cols = transpose(xs)
      H.close(F.softmax(x, 1), map2(xs, function(_, i, j) return softmax_row(cols[j])[i] end), 1e-12, 1e-14)
      assert.is_true(gradcheck(function(a) return { F.softmax(a, 1), F.log_softmax(a, 2) } end, { rnd { 3, 4 } }))
      assert.has_error(function() F.softmax(x) end, "softmax: a dimension is required")
      assert.has_error(function() F.log_softmax(x) end, "log_softmax: a dimension is required")
    end)
  end)

  describe("dropout", function()
    local x = tide.ones(100, 100)
    it("returns its input untouched outside training or with p = 0", function()
      assert.are.equal(x, F.dropout(x, 0.5, false))
      assert.are.equal(x, F.dropout(x, 0, true))
      H.close(F.dropout(x, 1, true), tide.zeros(100, 100))
    end)
    it("zeroes a fraction p and scales the rest by 1 / (1 - p)", function()
      tide.manual_seed(5)
      local y = F.dropout(x, 0.3)
      local zeros = y:eq(0):sum():item()
      assert.is_true(math.abs(zeros / 10000 - 0.3) < 0.02, "zeroed fraction " .. zeros / 10000)
      local kept = y:masked_select(y:ne(0))
      H.close(kept:amax(), 1 / 0.7, 1e-6)
      H.close(kept:amin(), 1 / 0.7, 1e-6)
    end)
    it("is reproducible with tide.manual_seed", function()
      local r = rnd({ 8, 8 }, -1, 1, false)
      tide.manual_seed(42)
      local a = F.dropout(r, 0.5, true)
      tide.manual_seed(42)
      H.equal(F.dropout(r, 0.5, true), a)
    end)
    it("passes the gradient through the kept elements only", function()
      assert.is_true(gradcheck(function(a)
        tide.manual_seed(3)
        return F.dropout(a, 0.4, true)
      end, { rnd { 4, 5 } }))
      local a = tide.ones(50):requires_grad_()
      tide.manual_seed(9)
      local y = F.dropout(a, 0.5, true)
      y:sum():backward()
      H.close(a.grad, (y:detach()))   -- gradient 2 where kept (y = 2), 0 where dropped
    end)
    it("checks p", function()
      assert.has_error(function() F.dropout(x, 1.5) end, "dropout: p must be a number between 0 and 1, got 1.5")
      assert.has_error(function() F.dropout(tide.zeros(2, "int64"), 0.5) end,
        "dropout: input must be a floating-point tensor, got int64")
    end)
  end)

  describe("embedding", function()
    local w = rnd({ 5, 3 }, -1, 1, false)
    local wt = w:totable()
    it("picks rows by 1-based index, for any index shape", function()
      local e = F.embedding(idx { { 1, 5 }, { 3, 3 } }, w)
      assert.are.same({ 2, 2, 3 }, e:shape())
      H.equal(e, { { wt[1], wt[5] }, { wt[3], wt[3] } })
      H.equal(F.embedding(tide.tensor(2, "int64"), w), wt[2])
      H.equal(F.embedding(tide.tensor({ 4 }, "int32"), w), { wt[4] })
    end)
    it("accumulates gradients into the rows used, none for padding_idx", function()
      assert.is_true(gradcheck(function(weight) return F.embedding(idx { 2, 4, 2 }, weight) end, { rnd { 5, 3 } }))
      local wg = rnd { 5, 3 }
      F.embedding(idx { { 1, 2 }, { 2, 5 } }, wg, 2):sum():backward()
      H.equal(wg.grad, { { 1, 1, 1 }, { 0, 0, 0 }, { 0, 0, 0 }, { 0, 0, 0 }, { 1, 1, 1 } })
      local wn = rnd { 5, 3 }
      local e = F.embedding(idx { 5, 1 }, wn, -1)
      H.equal(e:detach(), { wn:totable()[5], wn:totable()[1] })  -- the padding row's values are still read
      e:sum():backward()
      H.equal(wn.grad, { { 1, 1, 1 }, { 0, 0, 0 }, { 0, 0, 0 }, { 0, 0, 0 }, { 0, 0, 0 } })
    end)
    it("checks indices and padding_idx", function()
      assert.has_error(function() F.embedding(tide.tensor { 1, 2 }, w) end,
        "embedding: input must be an int64 or int32 tensor of 1-based indices, got float32")
      assert.has_error(H.sync(function() F.embedding(idx { 1, 6 }, w):totable() end),
        "index_select: index 6 is out of range for dimension 1 of size 5")
      assert.has_error(function() F.embedding(idx { 1 }, w, 6) end,
        "embedding: padding_idx 6 is out of range for 5 embeddings")
      assert.has_error(function() F.embedding(idx { 1 }, tide.zeros(5)) end,
        "embedding: weight must be 2-d [num_embeddings, embedding_dim], got shape [5]")
    end)
  end)

  describe("layer_norm", function()
    it("normalises over the trailing dimensions with the biased variance", function()
      local x, w, b = rnd({ 2, 4 }, -2, 2, false), rnd({ 4 }, 0.5, 1.5, false), rnd({ 4 }, -1, 1, false)
      local wt, bt = w:totable(), b:totable()
      local ref = {}
      for i, row in ipairs(x:totable()) do
        local m, v = 0, 0
        for _, e in ipairs(row) do m = m + e / #row end
        for _, e in ipairs(row) do v = v + (e - m) ^ 2 / #row end
        ref[i] = {}
        for j, e in ipairs(row) do ref[i][j] = (e - m) / math.sqrt(v + 1e-5) * wt[j] + bt[j] end
      end
      H.close(F.layer_norm(x, { 4 }, w, b), ref, 1e-10, 1e-12)
      H.close(F.layer_norm(x, 4, nil, nil, 1e-5), map2(ref, function(v, _, j) return (v - bt[j]) / wt[j] end),
        1e-10, 1e-12)
    end)
    it("normalises over two dimensions at once", function()
      local x = rnd({ 2, 3, 2 }, -2, 2, false)
      local y = F.layer_norm(x, { 3, 2 }, nil, nil, 0):totable()
      for n = 1, 2 do
        local m, s = 0, 0
        for i = 1, 3 do for j = 1, 2 do m = m + y[n][i][j] / 6; s = s + y[n][i][j] ^ 2 / 6 end end
        assert.is_true(math.abs(m) < 1e-12 and math.abs(s - 1) < 1e-10)
      end
    end)
    it("has gradients for input, weight and bias", function()
      assert.is_true(gradcheck(function(x, w, b) return F.layer_norm(x, { 3, 2 }, w, b) end,
        { rnd { 2, 3, 2 }, rnd { 3, 2 }, rnd { 3, 2 } }))
    end)
    it("checks the shapes", function()
      assert.has_error(function() F.layer_norm(tide.zeros(2, 3), { 4 }) end,
        "layer_norm: input of shape [2,3] does not end with normalized_shape [4]")
      assert.has_error(function() F.layer_norm(tide.zeros(2, 3), 3, tide.ones(4)) end,
        "layer_norm: weight of shape [4] does not match normalized_shape [3]")
    end)
  end)

  describe("batch_norm", function()
    local function channel_stats(xt, c)   -- mean and biased variance per channel of [N, C, L]
      local m, v, n = {}, {}, 0
      for k = 1, c do m[k], v[k] = 0, 0 end
      for _, s in ipairs(xt) do for k = 1, c do for _, e in ipairs(s[k]) do m[k] = m[k] + e end end end
      n = #xt * #xt[1][1]
      for k = 1, c do m[k] = m[k] / n end
      for _, s in ipairs(xt) do for k = 1, c do for _, e in ipairs(s[k]) do v[k] = v[k] + (e - m[k]) ^ 2 / n end end end
      return m, v, n
    end
    it("normalises with the batch statistics and updates the running ones in training", function()
      local x = rnd({ 3, 2, 4 }, -2, 2, false)
      local w, b = tide.tensor({ 1.5, 0.5 }, "float64"), tide.tensor({ 0.1, -0.2 }, "float64")
      local rm, rv = tide.tensor({ 0.5, -0.5 }, "float64"), tide.tensor({ 2, 3 }, "float64")
      local m, v, n = channel_stats(x:totable(), 2)
      local y = F.batch_norm(x, rm, rv, w, b, true, 0.2, 1e-5)
      local ref = {}
      for i, s in ipairs(x:totable()) do
        ref[i] = {}
        for k = 1, 2 do
          ref[i][k] = {}
          for j, e in ipairs(s[k]) do
            ref[i][k][j] = (e - m[k]) / math.sqrt(v[k] + 1e-5) * ({ 1.5, 0.5 })[k] + ({ 0.1, -0.2 })[k]
          end
        end
      end
      H.close(y, ref, 1e-10, 1e-12)
      H.close(rm, { 0.8 * 0.5 + 0.2 * m[1], 0.8 * -0.5 + 0.2 * m[2] }, 1e-12)
      H.close(rv, { 0.8 * 2 + 0.2 * v[1] * n / (n - 1), 0.8 * 3 + 0.2 * v[2] * n / (n - 1) }, 1e-12)
    end)
    it("uses the running statistics outside training", function()
      local x = rnd({ 2, 3 }, -2, 2, false)
      local rm, rv = tide.tensor({ 0.5, -0.5, 0 }, "float64"), tide.tensor({ 2, 3, 0.5 }, "float64")
      local ref = map2(x:totable(), function(e, _, k)
        return (e - ({ 0.5, -0.5, 0 })[k]) / math.sqrt(({ 2, 3, 0.5 })[k] + 1e-5)
      end)
      H.close(F.batch_norm(x, rm, rv), ref, 1e-10, 1e-12)
      H.close(rm, { 0.5, -0.5, 0 })
    end)
    it("handles [N, C, H, W]", function()
      local y = F.batch_norm(rnd({ 2, 3, 2, 2 }, -2, 2, false), nil, nil, nil, nil, true, 0.1, 0)
      H.close(y:mean({ 1, 3, 4 }), { 0, 0, 0 }, 0, 1e-12)
      H.close(y:var({ 1, 3, 4 }, false, 0), { 1, 1, 1 }, 1e-10)
    end)
    it("has gradients in training and in evaluation", function()
      assert.is_true(gradcheck(function(x, w, b) return F.batch_norm(x, nil, nil, w, b, true) end,
        { rnd { 3, 2, 2 }, rnd { 2 }, rnd { 2 } }))
      local rm, rv = tide.tensor({ 0.1, 0.2 }, "float64"), tide.tensor({ 1.5, 0.7 }, "float64")
      assert.is_true(gradcheck(function(x, w, b) return F.batch_norm(x, rm, rv, w, b, false) end,
        { rnd { 3, 2 }, rnd { 2 }, rnd { 2 } }))
    end)
    it("checks its arguments", function()
      assert.has_error(function() F.batch_norm(tide.zeros(1, 3), nil, nil, nil, nil, true) end,
        "batch_norm: expected more than 1 value per channel when training, got input of shape [1,3]")
      assert.has_error(function() F.batch_norm(tide.zeros(2, 3), tide.zeros(4), tide.ones(4)) end,
        "batch_norm: running_mean of shape [4] does not match the 3 channels of input [2,3]")
      assert.has_error(function() F.batch_norm(tide.zeros(2, 3)) end,
        "batch_norm: running_mean and running_var are required when training is false")
      assert.has_error(function() F.batch_norm(tide.zeros(3), nil, nil, nil, nil, true) end,
        "batch_norm: input must be [N, C, ...] with at least 2 dimensions, got shape [3]")
    end)
  end)

  describe("cross_entropy", function()
    local logits = rnd({ 4, 5 }, -3, 3, false)
    local rows = logits:totable()
    local target = { 2, 5, 1, 2 }
    it("of class indices matches the formula, for every reduction", function()
      for _, r in ipairs { "mean", "sum", "none" } do
        H.close(F.cross_entropy(logits, idx(target), { reduction = r }), ce_ref(rows, target, { reduction = r }),
          1e-12, 1e-12, r)
      end
      H.close(F.cross_entropy(logits, tide.tensor(target, "int32")), ce_ref(rows, target), 1e-12)
    end)
    it("with class weights, ignore_index and label smoothing", function()
      local w = { 0.5, 2, 1, 1.5, 0.25 }
      local t = { 2, -1, 5, 2 }
      for _, r in ipairs { "mean", "sum", "none" } do
        local o = { weight = tide.tensor(w, "float64"), ignore_index = -1, reduction = r, label_smoothing = 0.2 }
        H.close(F.cross_entropy(logits, idx(t), o),
          ce_ref(rows, t, { weight = w, ignore_index = -1, reduction = r, label_smoothing = 0.2 }), 1e-12, 1e-12, r)
      end
      H.close(F.cross_entropy(logits, idx { 3, -100, 1, 4 }), ce_ref(rows, { 3, -100, 1, 4 }), 1e-12)
      H.close(F.cross_entropy(logits, idx(target), { label_smoothing = 0.1 }),
        ce_ref(rows, target, { label_smoothing = 0.1 }), 1e-12)
    end)
    it("over extra dimensions [N, C, d] and for one unbatched sample [C]", function()
      local x = rnd({ 2, 3, 4 }, -2, 2, false)
      local xt = x:totable()
      local t = { { 1, 3, 2, 2 }, { 3, 3, 1, 2 } }
      local prow, pt = {}, {}
      for n = 1, 2 do
        for j = 1, 4 do
          prow[#prow + 1] = { xt[n][1][j], xt[n][2][j], xt[n][3][j] }
          pt[#pt + 1] = t[n][j]
        end
      end
      H.close(F.cross_entropy(x, idx(t)), ce_ref(prow, pt), 1e-12)
      local none = F.cross_entropy(x, idx(t), { reduction = "none" })
      assert.are.same({ 2, 4 }, none:shape())
      H.close(none:reshape(8), ce_ref(prow, pt, { reduction = "none" }), 1e-12)
      local one = F.cross_entropy(logits[2], tide.tensor(5, "int64"), { reduction = "none" })
      assert.are.same({}, one:shape())
      H.close(one, ce_ref({ rows[2] }, { 5 }, { reduction = "none" })[1], 1e-12)
    end)
    it("of class probabilities, with smoothing and weights", function()
      local p = F.softmax(rnd({ 4, 5 }, -1, 1, false), 2)
      local pt = p:totable()
      local w = { 1, 2, 0.5, 1, 3 }
      for _, r in ipairs { "mean", "sum", "none" } do
        H.close(F.cross_entropy(logits, p, { reduction = r }), ce_ref(rows, pt, { probs = true, reduction = r }),
          1e-12, 1e-12, r)
        H.close(F.cross_entropy(logits, p, { reduction = r, label_smoothing = 0.3, weight = tide.tensor(w, "float64") }),
          ce_ref(rows, pt, { probs = true, reduction = r, label_smoothing = 0.3, weight = w }), 1e-12, 1e-12, r)
      end
    end)
    it("has gradients for every kind of target and option", function()
      local t = idx { 2, 5, -100, 1 }
      local w = rnd({ 5 }, 0.5, 2)
      assert.is_true(gradcheck(function(x) return F.cross_entropy(x, t) end, { rnd { 4, 5 } }))
      assert.is_true(gradcheck(function(x, weight)
        return { F.cross_entropy(x, t, { weight = weight, label_smoothing = 0.15 }),
                 F.cross_entropy(x, t, { weight = weight, reduction = "none" }),
                 F.cross_entropy(x, t, { label_smoothing = 0.3, reduction = "sum" }) }
      end, { rnd { 4, 5 }, w }))
      assert.is_true(gradcheck(function(x) return F.cross_entropy(x, idx { { 1, 3 }, { 2, 2 } }) end,
        { rnd { 2, 3, 2 } }))
      assert.is_true(gradcheck(function(x, p, weight)
        return { F.cross_entropy(x, p), F.cross_entropy(x, p, { weight = weight, label_smoothing = 0.2 }) }
      end, { rnd { 3, 4 }, rnd({ 3, 4 }, 0, 1), rnd({ 4 }, 0.5, 2) }))
    end)
    it("names wrong shapes, dtypes and options", function()
      assert.has_error(function() F.cross_entropy(tide.zeros(4, 10), idx { 1, 2, 3 }) end,
        "cross_entropy: target of shape [3] does not match input of shape [4,10]")
      assert.has_error(function() F.cross_entropy(tide.zeros(4, 10), tide.zeros(4, 9)) end,
        "cross_entropy: target of shape [4,9] does not match input of shape [4,10]")
      assert.has_error(function() F.cross_entropy(tide.zeros(4, 10), tide.zeros(4, "uint8")) end,
        "cross_entropy: target must be an int64 or int32 tensor of 1-based indices, got uint8")
      assert.has_error(H.sync(function() F.cross_entropy(tide.zeros(2, 10), idx { 1, 11 }):item() end),
        "gather: index 11 is out of range for dimension 2 of size 10")
      assert.has_error(function() F.cross_entropy(tide.zeros(2, 3), idx { 1, 2 }, { weight = tide.ones(4) }) end,
        "cross_entropy: weight of shape [4] does not match the 3 classes of input")
      assert.has_error(function() F.cross_entropy(tide.zeros(2, 3), idx { 1, 2 }, { reduction = "avg" }) end,
        "cross_entropy: reduction must be 'mean', 'sum' or 'none', got avg")
      assert.has_error(function() F.cross_entropy(tide.zeros(2, 3), idx { 1, 2 }, { label_smoothing = 2 }) end,
        "cross_entropy: label_smoothing must be a number between 0 and 1, got 2")
      assert.has_error(function() F.cross_entropy(tide.zeros(2, 3), tide.zeros(2, 3), { ignore_index = 1 }) end,
        "cross_entropy: ignore_index applies to class-index targets, not to class probabilities")
      assert.has_error(function() F.cross_entropy(tide.zeros({}), idx { 1 }) end,
        "cross_entropy: input must be [C] or [N, C, ...], got a 0-d tensor")
    end)
  end)

  describe("nll_loss", function()
    it("picks the negated log-probabilities of the targets", function()
      local lp = F.log_softmax(rnd({ 3, 4 }, -2, 2, false), 2)
      local rows = lp:totable()
      local w = { 2, 1, 0.5, 1 }
      for _, r in ipairs { "mean", "sum", "none" } do
        H.close(F.nll_loss(lp, idx { 4, 1, 2 }, { reduction = r, weight = tide.tensor(w, "float64") }),
          ce_ref(rows, { 4, 1, 2 }, { log_probs = true, reduction = r, weight = w }), 1e-12, 1e-12, r)
      end
      H.close(F.nll_loss(lp, idx { 4, 7, 2 }, { ignore_index = 7 }),
        ce_ref(rows, { 4, 7, 2 }, { log_probs = true, ignore_index = 7 }), 1e-12)
      assert.is_true(gradcheck(function(x) return F.nll_loss(x, idx { 4, 1, 2 }, { weight = tide.tensor(w, "float64") })
      end, { rnd { 3, 4 } }))
      assert.has_error(function() F.nll_loss(tide.zeros(3, 4), idx { 1, 2 }) end,
        "nll_loss: target of shape [2] does not match input of shape [3,4]")
    end)
  end)

  describe("mse_loss", function()
    it("averages, sums or keeps the squared differences", function()
      local a, b = tide.tensor({ 1, 2, 3 }, "float64"), tide.tensor({ 0, 4, 3.5 }, "float64")
      H.close(F.mse_loss(a, b), (1 + 4 + 0.25) / 3, 1e-12)
      H.close(F.mse_loss(a, b, "sum"), 5.25, 1e-12)
      H.close(F.mse_loss(a, b, { reduction = "none" }), { 1, 4, 0.25 }, 1e-12)
      assert.is_true(gradcheck(function(x, y) return F.mse_loss(x, y) end, { rnd { 2, 3 }, rnd { 2, 3 } }))
      assert.has_error(function() F.mse_loss(tide.zeros(3), tide.zeros(3, 1)) end,
        "mse_loss: target of shape [3,1] does not match input of shape [3]")
    end)
  end)

  describe("binary_cross_entropy_with_logits", function()
    local function ref(x, t, pw, w)
      local p = sigmoid(x)
      return -((pw or 1) * t * math.log(p) + (1 - t) * math.log(1 - p)) * (w or 1)
    end
    it("matches -[pw t log s(x) + (1 - t) log(1 - s(x))]", function()
      local x, t = rnd({ 2, 3 }, -4, 4, false), rnd({ 2, 3 }, 0, 1, false)
      local xt, tt = x:totable(), t:totable()
      local pw, w = { 2, 0.5, 1 }, { { 1, 2, 3 }, { 0.5, 1, 1 } }
      local plain = map2(xt, function(v, i, j) return ref(v, tt[i][j]) end)
      H.close(F.binary_cross_entropy_with_logits(x, t, "none"), plain, 1e-10)
      local weighted = map2(xt, function(v, i, j) return ref(v, tt[i][j], pw[j], w[i][j]) end)
      local o = { pos_weight = tide.tensor(pw, "float64"), weight = tide.tensor(w, "float64") }
      H.close(F.binary_cross_entropy_with_logits(x, t, { pos_weight = o.pos_weight, weight = o.weight,
        reduction = "none" }), weighted, 1e-10)
      local s = 0
      for _, row in ipairs(weighted) do for _, v in ipairs(row) do s = s + v end end
      H.close(F.binary_cross_entropy_with_logits(x, t, o), s / 6, 1e-10)
      H.close(F.binary_cross_entropy_with_logits(x, t, { pos_weight = o.pos_weight, weight = o.weight,
        reduction = "sum" }), s, 1e-10)
    end)
    it("stays finite for large logits", function()
      local x = tide.tensor({ 100, -100, 800, -800 }, "float64")
      local t = tide.tensor({ 0, 1, 1, 0 }, "float64")
      H.close(F.binary_cross_entropy_with_logits(x, t, "none"), { 100, 100, 0, 0 }, 1e-12)
      H.close(F.binary_cross_entropy_with_logits(x:float(), t:float(), "none"), { 100, 100, 0, 0 }, 1e-6)
    end)
    it("has the gradient sigmoid(x) - t, also at x = 0", function()
      local x = tide.tensor({ 0, 0, 1.5 }, "float64"):requires_grad_()
      local t = tide.tensor({ 0, 1, 0.25 }, "float64")
      F.binary_cross_entropy_with_logits(x, t, "sum"):backward()
      H.close(x.grad, { 0.5, -0.5, sigmoid(1.5) - 0.25 }, 1e-12)
      assert.is_true(gradcheck(function(a, b, pw, w)
        return { F.binary_cross_entropy_with_logits(a, b, { pos_weight = pw }),
                 F.binary_cross_entropy_with_logits(a, b, { weight = w, reduction = "none" }) }
      end, { rnd { 2, 3 }, rnd({ 2, 3 }, 0, 1), rnd({ 3 }, 0.5, 2), rnd({ 2, 1 }, 0.5, 2) }))
    end)
    it("checks shapes", function()
      assert.has_error(function() F.binary_cross_entropy_with_logits(tide.zeros(3), tide.zeros(2)) end,
        "binary_cross_entropy_with_logits: target of shape [2] does not match input of shape [3]")
      assert.has_error(function()
        F.binary_cross_entropy_with_logits(tide.zeros(2, 3), tide.zeros(2, 3), { pos_weight = tide.ones(2) })
      end, "binary_cross_entropy_with_logits: pos_weight of shape [2] does not broadcast to input of shape [2,3]")
    end)
  end)

  describe("scaled_dot_product_attention", function()
    -- softmax(q k^T * scale + mask) v for one [L, E] x [S, E] x [S, Ev] problem.
    local function attn_ref(q, k, v, mask, scale)
      scale = scale or 1 / math.sqrt(#q[1])
      local s = matmul(q, transpose(k))
      for i = 1, #s do
        for j = 1, #s[1] do
          s[i][j] = s[i][j] * scale
          if mask then
            local mv = mask[i][j]
            if type(mv) == "boolean" then s[i][j] = mv and s[i][j] or -math.huge else s[i][j] = s[i][j] + mv end
          end
        end
        s[i] = softmax_row(s[i])
      end
      return matmul(s, v)
    end
    local q, k, v = rnd({ 2, 3, 4 }, -1, 1, false), rnd({ 2, 5, 4 }, -1, 1, false), rnd({ 2, 5, 2 }, -1, 1, false)
    local qt, kt, vt = q:totable(), k:totable(), v:totable()
    it("matches softmax(q k^T / sqrt(E)) v per batch", function()
      local out = F.scaled_dot_product_attention(q, k, v)
      assert.are.same({ 2, 3, 2 }, out:shape())
      for b = 1, 2 do H.close(out[b], attn_ref(qt[b], kt[b], vt[b]), 1e-12, 1e-14) end
      local scaled = F.scaled_dot_product_attention(q, k, v, { scale = 0.3 })
      H.close(scaled[1], attn_ref(qt[1], kt[1], vt[1], nil, 0.3), 1e-12, 1e-14)
    end)
    it("applies boolean (true: attend) and additive masks, and is_causal", function()
      local bm = { { true, false, true, true, false }, { false, true, true, true, true }, { true, true, false, false, true } }
      local out = F.scaled_dot_product_attention(q, k, v, { attn_mask = tide.tensor(bm) })
      for b = 1, 2 do H.close(out[b], attn_ref(qt[b], kt[b], vt[b], bm), 1e-12, 1e-14) end
      local fm = rnd({ 3, 5 }, -1, 1, false)
      local outf = F.scaled_dot_product_attention(q, k, v, { attn_mask = fm })
      for b = 1, 2 do H.close(outf[b], attn_ref(qt[b], kt[b], vt[b], fm:totable()), 1e-12, 1e-14) end
      local causal = {}
      for i = 1, 3 do causal[i] = {} for j = 1, 5 do causal[i][j] = j <= i end end
      local outc = F.scaled_dot_product_attention(q, k, v, { is_causal = true })
      for b = 1, 2 do H.close(outc[b], attn_ref(qt[b], kt[b], vt[b], causal), 1e-12, 1e-14) end
    end)
    it("drops attention weights reproducibly with dropout_p", function()
      tide.manual_seed(8)
      local a = F.scaled_dot_product_attention(q, k, v, { dropout_p = 0.5 })
      tide.manual_seed(8)
      H.equal(F.scaled_dot_product_attention(q, k, v, { dropout_p = 0.5 }), a)
      assert.is_false(pcall(H.close, a, F.scaled_dot_product_attention(q, k, v), 1e-6))
    end)
    it("has gradients for query, key and value", function()
      local mask = tide.tensor({ { true, false, true }, { true, true, false } })
      assert.is_true(gradcheck(function(a, b, c, m)
        return { F.scaled_dot_product_attention(a, b, c, { attn_mask = mask }),
                 F.scaled_dot_product_attention(a, b, c, { is_causal = true }),
                 F.scaled_dot_product_attention(a, b, c, { attn_mask = m, scale = 0.7 }) }
      end, { rnd { 2, 2, 3 }, rnd { 2, 3, 3 }, rnd { 2, 3, 2 }, rnd { 2, 3 } }))
    end)
    it("checks shapes and options", function()
      assert.has_error(function() F.scaled_dot_product_attention(tide.zeros(3, 4), tide.zeros(5, 3), tide.zeros(5, 2)) end,
        "scaled_dot_product_attention: query of shape [3,4] and key of shape [5,3] differ in their last dimension")
      assert.has_error(function() F.scaled_dot_product_attention(tide.zeros(3, 4), tide.zeros(5, 4), tide.zeros(6, 2)) end,
        "scaled_dot_product_attention: key of shape [5,4] and value of shape [6,2] differ in their number of positions")
      assert.has_error(function()
        F.scaled_dot_product_attention(tide.zeros(3, 4), tide.zeros(5, 4), tide.zeros(5, 2),
          { attn_mask = tide.ones(3, 5, "bool"), is_causal = true })
      end, "scaled_dot_product_attention: pass either attn_mask or is_causal, not both")
      assert.has_error(function()
        F.scaled_dot_product_attention(tide.zeros(3, 4), tide.zeros(5, 4), tide.zeros(5, 2),
          { attn_mask = tide.ones(4, 5, "bool") })
      end, "scaled_dot_product_attention: attn_mask of shape [4,5] does not broadcast to the scores' shape [3,5]")
    end)
  end)

  describe("one_hot", function()
    it("encodes 1-based indices", function()
      local r = F.one_hot(idx { { 1, 3 }, { 2, 1 } }, 4)
      assert.are.equal("int64", r:dtype())
      H.equal(r, { { { 1, 0, 0, 0 }, { 0, 0, 1, 0 } }, { { 0, 1, 0, 0 }, { 1, 0, 0, 0 } } })
      H.equal(F.one_hot(idx { 2, 3 }), { { 0, 1, 0 }, { 0, 0, 1 } })
    end)
    it("rejects indices out of range and bad class counts", function()
      assert.has_error(H.sync(function() F.one_hot(idx { 1, 5 }, 4):totable() end),
        "scatter: index 5 is out of range for dimension 2 of size 4")
      assert.has_error(function() F.one_hot(idx { 1 }, 0) end, "one_hot: num_classes must be a positive integer, got 0")
      assert.has_error(function() F.one_hot(tide.tensor { 1 }, 2) end,
        "one_hot: input must be an int64 or int32 tensor of 1-based indices, got float32")
    end)
  end)
end)
