-- nn extras, mostly 3-d: the 3-d padding layers (and the 1-d/2-d replication
-- pads), TripletMarginWithDistanceLoss, MaxUnpool3d, LPPool3d, 3-d
-- affine_grid and grid_sample (trilinear and nearest, each padding mode,
-- align_corners) and 2-d bicubic grid_sample, against plain-Lua float64
-- references of PyTorch's formulas written here; gradcheck of each in
-- float64; the samplers under tide.jit.compile; every error message.
local tide = require "tide"
local H = require "spec.helpers"
local GR = require "spec.helpers.grid_ref"
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

local rint, fold, unnorm = GR.rint, GR.fold, GR.unnormalize

-- grid_sample of 5-d input: PyTorch's trilinear and nearest kernels, point by point.
local function grid_sample3d_ref(x, xs, g, gs, mode, pad, ac)
  local X, G = at(x, xs), at(g, gs)
  local d, h, w = xs[3], xs[4], xs[5]
  return build({ xs[1], xs[2], gs[2], gs[3], gs[4] }, function(i)
    local function gv(k) return G(i[1], i[3], i[4], i[5], k) end
    local ix, iy, iz = fold(unnorm(gv(1), w, ac), w, pad, ac), fold(unnorm(gv(2), h, ac), h, pad, ac),
      fold(unnorm(gv(3), d, ac), d, pad, ac)
    local function v(zz, yy, xx)
      if xx < 0 or xx > w - 1 or yy < 0 or yy > h - 1 or zz < 0 or zz > d - 1 then return 0 end
      return X(i[1], i[2], zz + 1, yy + 1, xx + 1)
    end
    if mode == "nearest" then return v(rint(iz), rint(iy), rint(ix)) end
    local x0, y0, z0 = floor(ix), floor(iy), floor(iz)
    local fx, fy, fz = ix - x0, iy - y0, iz - z0
    local r = 0
    for dz = 0, 1 do
      for dy = 0, 1 do
        for dx = 0, 1 do
          local wgt = (dx == 1 and fx or 1 - fx) * (dy == 1 and fy or 1 - fy) * (dz == 1 and fz or 1 - fz)
          r = r + v(z0 + dz, y0 + dy, x0 + dx) * wgt
        end
      end
    end
    return r
  end)
end

-- PyTorch's bicubic grid_sample (4-d), with its cubic convolution (A = -0.75).
local function cubic(t)
  local A = -0.75
  local function c1(x) return ((A + 2) * x - (A + 3)) * x * x + 1 end
  local function c2(x) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A end
  return { c2(t + 1), c1(t), c1(1 - t), c2(2 - t) }
end
local function bicubic_ref(x, xs, g, gs, pad, ac)
  local X, G = at(x, xs), at(g, gs)
  local h, w = xs[3], xs[4]
  return build({ xs[1], xs[2], gs[2], gs[3] }, function(i)
    local ix, iy = unnorm(G(i[1], i[3], i[4], 1), w, ac), unnorm(G(i[1], i[3], i[4], 2), h, ac)
    local x0, y0 = floor(ix), floor(iy)
    local wx, wy = cubic(ix - x0), cubic(iy - y0)
    local function v(yy, xx)
      xx, yy = fold(xx, w, pad, ac), fold(yy, h, pad, ac)
      if xx < 0 or xx > w - 1 or yy < 0 or yy > h - 1 then return 0 end
      return X(i[1], i[2], yy + 1, xx + 1)
    end
    local r = 0
    for b = 1, 4 do
      local row = 0
      for a = 1, 4 do row = row + v(y0 + b - 2, x0 + a - 2) * wx[a] end
      r = r + row * wy[b]
    end
    return r
  end)
end

local base = GR.base

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

  describe("3-d affine_grid and grid_sample, 2-d bicubic", function()
    it("affine_grid of 5-d sizes maps the base grid through theta", function()
      local th, tv = rnd({ 2, 3, 4 })
      local T = at(tv, { 2, 3, 4 })
      for _, ac in ipairs { false, true } do
        local want = build({ 2, 2, 3, 4, 3 }, function(i)
          local x, y, z = base(i[4], 4, ac), base(i[3], 3, ac), base(i[2], 2, ac)
          return T(i[1], i[5], 1) * x + T(i[1], i[5], 2) * y + T(i[1], i[5], 3) * z + T(i[1], i[5], 4)
        end)
        H.close(F.affine_grid(th, { 2, 7, 2, 3, 4 }, ac), want, 1e-14, 1e-15)
      end
      assert.is_true(gradcheck(function(a) return F.affine_grid(a, { 2, 1, 2, 2, 3 }) end, { leaf(th) }))
      assert.has_error(function() F.affine_grid(th, { 2, 1, 3, 4 }) end,
        "affine_grid: theta must be a batch of 2-d affine matrices [2, 2, 3] for size {2, 1, 3, 4}, got shape [2,3,4]")
      assert.has_error(function() F.affine_grid(rnd({ 2, 2, 3 }), { 2, 1, 2, 3, 4 }) end,
        "affine_grid: theta must be a batch of 3-d affine matrices [2, 3, 4] for size {2, 1, 2, 3, 4}, got shape " ..
        "[2,2,3]")
      assert.has_error(function() F.affine_grid(th, { 2, 1, 2, 3, 4, 5 }) end,
        "affine_grid: size must be a table {N, C, H, W} or {N, C, D, H, W}, got a table of 6")
    end)

    it("grid_sample of 5-d input matches the trilinear and nearest kernels", function()
      local xs, gs = { 2, 2, 3, 4, 5 }, { 2, 2, 3, 2, 3 }
      local x, xv = rnd(xs)
      local g, gv = rnd(gs, -1.6, 1.6)
      for _, mode in ipairs { "bilinear", "nearest" } do
        for _, pad in ipairs { "zeros", "border", "reflection" } do
          for _, ac in ipairs { false, true } do
            local label = string.format("%s %s %s", mode, pad, tostring(ac))
            H.close(F.grid_sample(x, g, { mode = mode, padding_mode = pad, align_corners = ac }),
              grid_sample3d_ref(xv, xs, gv, gs, mode, pad, ac), 1e-12, 1e-14, label)
          end
        end
      end
      -- the identity grid gives the input back
      local id = tide.tensor({ { { 1, 0, 0, 0 }, { 0, 1, 0, 0 }, { 0, 0, 1, 0 } } }, "float64"):expand(2, 3, 4)
      for _, ac in ipairs { false, true } do
        H.close(F.grid_sample(x, F.affine_grid(id, xs, ac), { align_corners = ac }), x, 1e-12, 1e-14)
      end
    end)

    it("grid_sample of 5-d input has gradients for input and grid", function()
      local x = rnd({ 1, 2, 2, 3, 3 })
      local g = rnd({ 1, 2, 2, 1, 3 }, -0.9, 0.9)
      for _, pad in ipairs { "zeros", "border", "reflection" } do
        for _, ac in ipairs { false, true } do
          assert.is_true(gradcheck(function(a, b)
            return F.grid_sample(a, b, { padding_mode = pad, align_corners = ac })
          end, { leaf(x), leaf(g) }), pad)
        end
      end
      assert.is_true(gradcheck(function(a) return F.grid_sample(a, g, { mode = "nearest" }) end, { leaf(x) }))
    end)

    it("bicubic grid_sample of 4-d input matches PyTorch's kernel, with gradients", function()
      local xs, gs = { 2, 2, 4, 5 }, { 2, 3, 2, 2 }
      local x, xv = rnd(xs)
      local g, gv = rnd(gs, -1.5, 1.5)
      for _, pad in ipairs { "zeros", "border", "reflection" } do
        for _, ac in ipairs { false, true } do
          H.close(F.grid_sample(x, g, { mode = "bicubic", padding_mode = pad, align_corners = ac }),
            bicubic_ref(xv, xs, gv, gs, pad, ac), 1e-12, 1e-14, pad .. " " .. tostring(ac))
        end
      end
      -- at the pixels' centres bicubic reads the pixels
      local id = tide.tensor({ { { 1, 0, 0 }, { 0, 1, 0 } } }, "float64"):expand(2, 2, 3)
      H.close(F.grid_sample(x, F.affine_grid(id, xs, true), { mode = "bicubic", align_corners = true }), x, 1e-12,
        1e-14)
      local gx = rnd({ 1, 2, 2, 2 }, -0.8, 0.8)
      for _, pad in ipairs { "zeros", "border", "reflection" } do
        assert.is_true(gradcheck(function(a, b)
          return F.grid_sample(a, b, { mode = "bicubic", padding_mode = pad })
        end, { leaf(rnd({ 1, 1, 3, 4 })), leaf(gx) }), pad)
      end
    end)

    it("capture under tide.jit.compile (no host reads) and replay the eager values", function()
      local x5, x4 = rnd({ 1, 2, 2, 4, 4 }), rnd({ 1, 2, 3, 4 })
      local th, g4 = rnd({ 1, 3, 4 }), rnd({ 1, 2, 2, 2 })
      local function body(a5, a4, t, g)
        local pooled, idx = F.max_pool3d(a5, { 1, 2, 2 }, { return_indices = true })
        return F.grid_sample(a5, F.affine_grid(t, { 1, 2, 2, 2, 3 }), { padding_mode = "reflection" }),
          F.grid_sample(a4, g, { mode = "bicubic", padding_mode = "border" }),
          F.max_unpool3d(pooled, idx, { 1, 2, 2 }), F.lp_pool3d(a5, 2, 2)
      end
      local f = tide.jit.compile(body)
      for call = 1, 3 do
        local want, got = { body(x5 * call, x4 * call, th, g4) }, { f(x5 * call, x4 * call, th, g4) }
        for i = 1, #want do H.close(got[i], want[i], 1e-12, 1e-14, "result " .. i .. ", call " .. call) end
      end
      assert.are.equal(1, f:stats().replays)
    end)

    it("grid_sample names the function and the values in its errors", function()
      local x5, g5 = tide.zeros({ 1, 2, 2, 3, 3 }), tide.zeros({ 1, 1, 2, 2, 3 })
      assert.has_error(function() F.grid_sample(x5, g5, { mode = "bicubic" }) end,
        "grid_sample: mode 'bicubic' samples 4-d input only, got input [1,2,2,3,3]")
      assert.has_error(function() F.grid_sample(x5, tide.zeros({ 1, 1, 2, 2, 2 })) end,
        "grid_sample: grid of shape [1,1,2,2,2] does not match input of shape [1,2,2,3,3] (expected [1, oD, oH, oW, 3])")
      assert.has_error(function() F.grid_sample(x5, tide.zeros({ 1, 2, 2, 2 })) end,
        "grid_sample: expects a 4-d input [N, C, H, W] and grid [N, oH, oW, 2], or a 5-d input [N, C, D, H, W] " ..
        "and grid [N, oD, oH, oW, 3], got [1,2,2,3,3] and [1,2,2,2]")
      assert.has_error(function() F.grid_sample(x5, g5, { mode = "trilinear" }) end,
        "grid_sample: mode must be 'bilinear', 'nearest' or 'bicubic', got trilinear")
      assert.has_error(function() F.grid_sample(tide.zeros({ 1, 2, 0, 3, 3 }), g5) end,
        "grid_sample: input [1,2,0,3,3] has an empty spatial dimension")
    end)
  end)
end)
