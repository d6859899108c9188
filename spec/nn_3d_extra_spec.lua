-- nn extras, mostly 3-d: the 3-d padding layers (and the 1-d/2-d replication
-- pads), TripletMarginWithDistanceLoss, MaxUnpool3d and LPPool3d, against
-- plain-Lua float64 references of PyTorch's formulas written here; gradcheck
-- of each in float64; every error message.
local tide = require "tide"
local H = require "spec.helpers"
local nn, F = tide.nn, tide.nn.functional
local floor, abs = math.floor, math.abs

local gradcheck = tide.autograd.gradcheck
local rnd = H.random_tensors(23)
local at, build, leaf = H.at, H.build, H.grad_leaf

-- -- references ------------------------------------------------------------------------

-- The 0-based source index of 0-based padded position j of a dim of n with
-- `lo` padding before, per mode (nil: a constant).
local function pad_src(j, n, lo, mode)
  local i = j - lo
  if i >= 0 and i < n then return i end
  if mode == "constant" then return nil end
  if mode == "replicate" then return math.min(n - 1, math.max(0, i)) end
  if mode == "circular" then return i % n end
  -- reflect: mirrored without the edge
  if i < 0 then return -i end
  return 2 * (n - 1) - i
end

-- F.pad of the last k dims of x (values xv, shape xs) by pad {left, right, top, bottom, front, back}.
local function pad_ref(xv, xs, pad, mode, value)
  local X, nd = at(xv, xs), #xs
  local k = #pad / 2
  local out = {}
  for d = 1, nd do out[d] = xs[d] end
  for i = 1, k do out[nd - i + 1] = xs[nd - i + 1] + pad[2 * i - 1] + pad[2 * i] end
  return build(out, function(idx)
    local src = {}
    for d = 1, nd do src[d] = idx[d] end
    for i = 1, k do
      local d = nd - i + 1
      local s = pad_src(idx[d] - 1, xs[d], pad[2 * i - 1], mode)
      if s == nil then return value or 0 end
      src[d] = s + 1
    end
    return X(unpack(src))
  end)
end

-- -- specs --------------------------------------------------------------------------------

describe("nn 3-d extras", function()
  describe("padding layers", function()
    it("ZeroPad3d, ConstantPad3d, ReflectionPad3d, ReplicationPad3d, CircularPad3d and the 1-d/2-d "
      .. "ReplicationPads match the reference", function()
      local x, xv = rnd({ 2, 2, 2, 3, 3 })
      local p3 = { 1, 2, 0, 1, 1, 0 }
      for _, case in ipairs {
        { nn.ZeroPad3d(p3), "constant" }, { nn.ConstantPad3d(p3, 2.5), "constant", 2.5 },
        { nn.ReflectionPad3d(p3), "reflect" }, { nn.ReplicationPad3d(p3), "replicate" },
        { nn.CircularPad3d(p3), "circular" },
      } do
        local m = case[1]
        local want = pad_ref(xv, { 2, 2, 2, 3, 3 }, p3, case[2], case[3])
        H.close(m(x), want, 0, 0, m:class_name())
        H.close(m(x[1]), want[1], 0, 0, m:class_name() .. " unbatched")
      end
      -- an integer pads all six sides
      H.close(nn.ReplicationPad3d(1)(x), pad_ref(xv, { 2, 2, 2, 3, 3 }, { 1, 1, 1, 1, 1, 1 }, "replicate"), 0, 0)
      local y, yv = rnd({ 2, 3, 4 })
      H.close(nn.ReplicationPad1d({ 2, 3 })(y), pad_ref(yv, { 2, 3, 4 }, { 2, 3 }, "replicate"), 0, 0)
      H.close(nn.ReplicationPad2d({ 1, 0, 2, 1 })(y), pad_ref(yv, { 2, 3, 4 }, { 1, 0, 2, 1 }, "replicate"), 0, 0)
      assert.are.equal("ReplicationPad3d((1, 2, 0, 1, 1, 0))", tostring(nn.ReplicationPad3d(p3)))
      assert.are.equal("ConstantPad3d(padding=(1, 1, 1, 1, 1, 1), value=0.5)", tostring(nn.ConstantPad3d(1, 0.5)))
    end)

    it("have gradients (gradcheck) and name the class and the values in errors", function()
      local x = rnd({ 1, 1, 2, 2, 3 })
      for _, m in ipairs { nn.ReflectionPad3d({ 1, 1, 1, 0, 1, 0 }), nn.ReplicationPad3d(2), nn.CircularPad3d(1),
                           nn.ConstantPad3d(1, 3) } do
        assert.is_true(gradcheck(function(a) return m(a) end, { leaf(x) }), m:class_name())
      end
      assert.has_error(function() nn.ReplicationPad3d({ 1, 2 }) end,
        "ReplicationPad3d: padding must be an integer or a table of 6 integers, got a table of 2")
      assert.has_error(function() nn.ZeroPad3d({ 1, 1, 1, 1, 1, 0.5 }) end,
        "ZeroPad3d: padding values must be integers, got 0.5")
      assert.has_error(function() nn.ConstantPad3d(1) end, "ConstantPad3d: value must be a number, got nil")
      assert.has_error(function() nn.ReflectionPad3d(2)(x) end,
        "pad: reflect padding (2, 2) must be below the size 2 of dimension 4 of input [1,1,2,2,3]")
      assert.has_error(function() nn.ReplicationPad3d(1)(tide.zeros({ 2, 3, 4 })) end,
        "pad: mode 'replicate' pads the last 1, 2 or 3 dims of a ([N,] C, ...) input; 6 pad values need a " ..
        "4-d or 5-d input, got [2,3,4]")
    end)
  end)

  describe("TripletMarginWithDistanceLoss", function()
    it("defaults to pairwise_distance, as TripletMarginLoss", function()
      local a, p, n = rnd({ 4, 3 }), rnd({ 4, 3 }), rnd({ 4, 3 })
      H.close(F.triplet_margin_with_distance_loss(a, p, n), F.triplet_margin_loss(a, p, n), 1e-15, 0)
      H.close(nn.TripletMarginWithDistanceLoss({ margin = 0.5, swap = true, reduction = "none" })(a, p, n),
        F.triplet_margin_loss(a, p, n, { margin = 0.5, swap = true, reduction = "none" }), 1e-15, 0)
    end)

    it("takes a distance function or module, swap and the reductions, against the reference", function()
      local a, av = rnd({ 3, 2 })
      local p, pv = rnd({ 3, 2 })
      local n, nv = rnd({ 3, 2 })
      local function l1(x, y) return (x - y):abs():sum(-1) end
      local function dist(u, v, i) return abs(u[2 * i - 1] - v[2 * i - 1]) + abs(u[2 * i] - v[2 * i]) end
      for _, swap in ipairs { false, true } do
        local want, sum = {}, 0
        for i = 1, 3 do
          local dan = dist(av, nv, i)
          if swap then dan = math.min(dan, dist(pv, nv, i)) end
          want[i] = math.max(dist(av, pv, i) - dan + 0.7, 0)
          sum = sum + want[i]
        end
        local o = { distance_function = l1, margin = 0.7, swap = swap }
        o.reduction = "none"
        H.close(F.triplet_margin_with_distance_loss(a, p, n, o), want, 1e-15, 1e-15)
        o.reduction = "sum"
        H.close(F.triplet_margin_with_distance_loss(a, p, n, o), sum, 1e-14, 1e-15)
        o.reduction = nil
        H.close(nn.TripletMarginWithDistanceLoss(o)(a, p, n), sum / 3, 1e-14, 1e-15)
      end
      -- a module as the distance: it becomes a child, as in PyTorch
      local m = nn.TripletMarginWithDistanceLoss({ distance_function = nn.PairwiseDistance(1) })
      H.close(m(a, p, n), F.triplet_margin_loss(a, p, n, { p = 1 }), 1e-14, 1e-15)
      assert.is_true(gradcheck(function(x, y, z) return F.triplet_margin_with_distance_loss(x, y, z,
        { distance_function = l1, margin = 2 }) end, { leaf(a), leaf(p), leaf(n) }))
    end)

    it("rejects bad options and inputs", function()
      local a = rnd({ 2, 3 })
      assert.has_error(function() F.triplet_margin_with_distance_loss(a, a, a, { margin = 0 }) end,
        "triplet_margin_with_distance_loss: margin must be a positive number, got 0")
      assert.has_error(function() F.triplet_margin_with_distance_loss(a, a, a, { distance_function = 3 }) end,
        "triplet_margin_with_distance_loss: distance_function must be a function or a module, got 3")
      assert.has_error(function() nn.TripletMarginWithDistanceLoss({ swap = 1 }) end,
        "TripletMarginWithDistanceLoss: swap must be a boolean, got 1")
      assert.has_error(function() F.triplet_margin_with_distance_loss(a, a[1], a) end,
        "triplet_margin_with_distance_loss: anchor [2,3], positive [3] and negative [2,3] must have the same " ..
        "number of dimensions")
      assert.has_error(function() F.triplet_margin_with_distance_loss(a, a, a, "avg") end,
        "triplet_margin_with_distance_loss: reduction must be 'mean', 'sum' or 'none', got avg")
    end)
  end)

  describe("MaxUnpool3d and LPPool3d", function()
    it("max_unpool3d puts each maximum back where max_pool3d found it", function()
      local x, xv = rnd({ 2, 2, 4, 4, 4 })
      local y, idx = F.max_pool3d(x, 2, { return_indices = true })
      local X = at(xv, { 2, 2, 4, 4, 4 })
      -- the reference: each window's maximum at its place, zeros elsewhere
      local want = build({ 2, 2, 4, 4, 4 }, function(i)
        local v = X(i[1], i[2], i[3], i[4], i[5])
        local z0, y0, x0 = floor((i[3] - 1) / 2) * 2, floor((i[4] - 1) / 2) * 2, floor((i[5] - 1) / 2) * 2
        for a = 1, 2 do for b = 1, 2 do for c = 1, 2 do
          if X(i[1], i[2], z0 + a, y0 + b, x0 + c) > v then return 0 end
        end end end
        return v
      end)
      local unpool = nn.MaxUnpool3d(2)
      H.close(unpool(y, idx), want, 0, 0)
      H.close(F.max_unpool3d(y[1], idx[1], 2), want[1], 0, 0)
      -- output_size one larger: the same values, a zero border
      local big = F.max_unpool3d(y, idx, { 2, 2, 2 }, { output_size = { 5, 5, 5 } })
      assert.are.same({ 2, 2, 5, 5, 5 }, big:shape())
      H.close(big:sum(), tide.tensor(want, "float64"):sum(), 1e-14, 0)
      assert.is_true(gradcheck(function(a) return F.max_unpool3d(a, idx, 2) end, { leaf(y) }))
      assert.are.equal("MaxUnpool3d(kernel_size=(2, 2, 2), stride=(2, 2, 2), padding=(0, 0, 0))", tostring(unpool))
      assert.has_error(function() F.max_unpool3d(y, idx:double(), 2) end,
        "max_unpool3d: indices must be an int64 or int32 tensor (max_pool's), got float64")
      assert.has_error(function() F.max_unpool3d(y, idx, 2, { output_size = { 9, 4, 4 } }) end,
        "max_unpool3d: invalid output_size {9, 4, 4} (dim 1 must be between 3 and 5)")
      assert.has_error(function() F.max_unpool3d(y[1][1], idx[1][1], 2) end,
        "max_unpool3d: expects a 4-d (C, D, H, W) or 5-d (N, C, D, H, W) input, got shape [2,2,2]")
    end)

    it("lp_pool3d is each window's p-norm", function()
      local x, xv = rnd({ 1, 2, 3, 4, 5 }, 0.1, 1)
      local X = at(xv, { 1, 2, 3, 4, 5 })
      for _, case in ipairs { { 2, { 2, 2, 2 }, { 1, 2, 3 } }, { 3, { 3, 1, 2 }, nil } } do
        local p, k, s = case[1], case[2], case[3]
        local st = s or k
        local out = {}
        for i = 1, 3 do out[i] = floor(((({ 3, 4, 5 })[i]) - k[i]) / st[i]) + 1 end
        local want = build({ 1, 2, out[1], out[2], out[3] }, function(i)
          local acc = 0
          for a = 1, k[1] do for b = 1, k[2] do for c = 1, k[3] do
            acc = acc + X(i[1], i[2], (i[3] - 1) * st[1] + a, (i[4] - 1) * st[2] + b, (i[5] - 1) * st[3] + c) ^ p
          end end end
          return acc ^ (1 / p)
        end)
        H.close(F.lp_pool3d(x, p, k, { stride = s }), want, 1e-13, 1e-15)
        H.close(nn.LPPool3d(p, k, s)(x[1]), want[1], 1e-13, 1e-15)
        assert.is_true(gradcheck(function(a) return F.lp_pool3d(a, p, k, { stride = s }) end, { leaf(x) }))
      end
      assert.are.equal("LPPool3d(norm_type=2, kernel_size=(2, 2, 2), stride=(1, 2, 1), ceil_mode=false)",
        tostring(nn.LPPool3d(2, 2, { 1, 2, 1 })))
      assert.has_error(function() F.lp_pool3d(x, 0, 2) end,
        "lp_pool3d: norm_type must be a positive finite number, got 0")
      assert.has_error(function() F.lp_pool3d(x, 2, 4) end,
        "lp_pool3d: kernel_size {4, 4, 4} is larger than the input [1,2,3,4,5]")
      assert.has_error(function() F.lp_pool3d(x, 2, { 2, 2 }) end,
        "lp_pool3d: kernel_size must be an integer or a table of 3 integers, got a table of 2")
    end)
  end)
end)
