-- nn spatial layers (tide.nn.spatial): conv1d, the transposed convolutions,
-- group and instance norm, pad, interpolate, pixel (un)shuffle and the 1-d
-- pools against plain-Lua float64 references and hand-computed values, on
-- contiguous and non-contiguous inputs and empty batches; gradcheck of each;
-- the modules' parameters, initialisation and printing; the errors.
local tide = require "tide"
local H = require "spec.helpers"
local nn, F = tide.nn, tide.nn.functional
local floor = math.floor

local gradcheck = tide.autograd.gradcheck

-- -- data and references ---------------------------------------------------------------

local rnd = H.random_tensors(7)   -- rnd(shape, lo, hi): a float64 tensor, its flat values
local at, build = H.at, H.build

local function conv1d_ref(x, xs, w, ws, b, s, p, d, g)
  local n, l = xs[1], xs[3]
  local o, cg, k = ws[1], ws[2], ws[3]
  local ol = floor((l + 2 * p - d * (k - 1) - 1) / s) + 1
  local X, W = at(x, xs), at(w, ws)
  return build({ n, o, ol }, function(i)
    local grp = floor((i[2] - 1) / (o / g))
    local acc = b and b[i[2]] or 0
    for c = 1, cg do
      for kk = 1, k do
        local pos = (i[3] - 1) * s - p + (kk - 1) * d
        if pos >= 0 and pos < l then acc = acc + X(i[1], grp * cg + c, pos + 1) * W(i[2], c, kk) end
      end
    end
    return acc
  end)
end

-- s, p, op, d: tables {h, w}
local function convt2d_ref(x, xs, w, ws, b, s, p, op, d, g)
  local n, cin, h, wd = xs[1], xs[2], xs[3], xs[4]
  local cog, kh, kw = ws[2], ws[3], ws[4]
  local oh = (h - 1) * s[1] - 2 * p[1] + d[1] * (kh - 1) + op[1] + 1
  local ow = (wd - 1) * s[2] - 2 * p[2] + d[2] * (kw - 1) + op[2] + 1
  local X, W = at(x, xs), at(w, ws)
  return build({ n, cog * g, oh, ow }, function(i)
    local grp, ol = floor((i[2] - 1) / cog), (i[2] - 1) % cog + 1
    local acc = b and b[i[2]] or 0
    for c = 1, cin / g do
      local cc = grp * (cin / g) + c
      for ky = 0, kh - 1 do
        local ty = i[3] - 1 + p[1] - ky * d[1]
        if ty % s[1] == 0 and ty >= 0 and ty / s[1] < h then
          for kx = 0, kw - 1 do
            local tx = i[4] - 1 + p[2] - kx * d[2]
            if tx % s[2] == 0 and tx >= 0 and tx / s[2] < wd then
              acc = acc + X(i[1], cc, ty / s[1] + 1, tx / s[2] + 1) * W(cc, ol, ky + 1, kx + 1)
            end
          end
        end
      end
    end
    return acc
  end)
end

-- x [N, C, L]: each group of C/g channels normalised over its values, then * w + b
local function group_norm_ref(x, xs, g, w, b, eps)
  local X = at(x, xs)
  local cg = xs[2] / g
  return build(xs, function(i)
    local grp = floor((i[2] - 1) / cg)
    local sum, sq, m = 0, 0, 0
    for c = grp * cg + 1, grp * cg + cg do
      for l = 1, xs[3] do sum = sum + X(i[1], c, l); m = m + 1 end
    end
    local mean = sum / m
    for c = grp * cg + 1, grp * cg + cg do
      for l = 1, xs[3] do sq = sq + (X(i[1], c, l) - mean) ^ 2 end
    end
    local y = (X(i[1], i[2], i[3]) - mean) / math.sqrt(sq / m + eps)
    return y * (w and w[i[2]] or 1) + (b and b[i[2]] or 0)
  end)
end

-- the source index (0-based) that pad mode reads for output j of a dim of size n padded by lo, or nil (constant)
local function pad_src(mode, j, n, lo)
  local t = j - lo
  if mode == "constant" then return (t >= 0 and t < n) and t or nil end
  if mode == "reflect" then
    if t < 0 then t = -t end
    if t >= n then t = 2 * (n - 1) - t end
    return t
  end
  if mode == "replicate" then return math.min(math.max(t, 0), n - 1) end
  return t % n
end

-- pads the last two dims of a [N, C, H, W] x by {left, right, top, bottom}
local function pad2d_ref(x, xs, pad, mode, value)
  local X = at(x, xs)
  local oh, ow = xs[3] + pad[3] + pad[4], xs[4] + pad[1] + pad[2]
  return build({ xs[1], xs[2], oh, ow }, function(i)
    local sy, sx = pad_src(mode, i[3] - 1, xs[3], pad[3]), pad_src(mode, i[4] - 1, xs[4], pad[1])
    if not sy or not sx then return value or 0 end
    return X(i[1], i[2], sy + 1, sx + 1)
  end)
end

local function bilinear_ref(x, xs, oh, ow, sf, align_corners)
  local X = at(x, xs)
  return build({ xs[1], xs[2], oh, ow }, function(i)
    local y0, y1, wy0, wy1 = H.linear_source(i[3] - 1, xs[3], oh, sf and sf[1], align_corners)
    local x0, x1, wx0, wx1 = H.linear_source(i[4] - 1, xs[4], ow, sf and sf[2], align_corners)
    local function v(a, b) return X(i[1], i[2], a + 1, b + 1) end
    return wy0 * (wx0 * v(y0, x0) + wx1 * v(y0, x1)) + wy1 * (wx0 * v(y1, x0) + wx1 * v(y1, x1))
  end)
end

local function nearest_ref(x, xs, oh, ow, sf)
  local X = at(x, xs)
  local sh, sw = sf and 1 / sf[1] or xs[3] / oh, sf and 1 / sf[2] or xs[4] / ow
  return build({ xs[1], xs[2], oh, ow }, function(i)
    local sy = math.min(floor((i[3] - 1) * sh), xs[3] - 1)
    local sx = math.min(floor((i[4] - 1) * sw), xs[4] - 1)
    return X(i[1], i[2], sy + 1, sx + 1)
  end)
end

local each_layout = H.each_layout
local grad_leaf = H.grad_leaf

-- -- specs --------------------------------------------------------------------------------

describe("nn spatial", function()
  describe("conv1d", function()
    it("matches a float64 reference with stride, padding, dilation and groups, on any layout", function()
      local xs, ws = { 2, 4, 9 }, { 6, 2, 3 }
      local x, xv = rnd(xs)
      local w, wv = rnd(ws)
      local b, bv = rnd({ 6 })
      local opts = { stride = 2, padding = 2, dilation = 2, groups = 2 }
      local want = conv1d_ref(xv, xs, wv, ws, bv, 2, 2, 2, 2)
      each_layout(x, function(t, name) H.close(F.conv1d(t, w, b, opts), want, 1e-12, 1e-12, name) end)
      H.close(F.conv1d(x, w:transpose(2, 3):clone():transpose(2, 3), b, opts), want, 1e-12, 1e-12, "weight")
      H.close(F.conv1d(x, w, nil, { stride = { 3 }, padding = { 1 }, groups = 2 }),
        conv1d_ref(xv, xs, wv, ws, nil, 3, 1, 1, 2), 1e-12, 1e-12)
      -- unbatched, and an empty batch
      H.close(F.conv1d(x[2], w, b, opts), want[2], 1e-12, 1e-12)
      assert.are.same({ 0, 6, 5 }, F.conv1d(tide.zeros({ 0, 4, 9 }, "float64"), w, b, opts):shape())
    end)

    it("pads 'same' (the extra one on the right for an even kernel) and 'valid'", function()
      local x = tide.tensor({ { { 1, 2, 3, 4, 5 } } }, "float64")
      local w = tide.tensor({ { { 1, 10, 100, 1000 } } }, "float64")
      -- padded 0 | 1 2 3 4 5 | 0 0
      H.close(F.conv1d(x, w, nil, { padding = "same" }), { { { 3210, 4321, 5432, 543, 54 } } })
      H.close(F.conv1d(x, w, nil, { padding = "valid" }), { { { 4321, 5432 } } })
      local x5, xv = rnd({ 1, 2, 7 })
      local w3, wv = rnd({ 2, 2, 3 })
      H.close(F.conv1d(x5, w3, nil, { padding = "same", dilation = 3 }),
        conv1d_ref(xv, { 1, 2, 7 }, wv, { 2, 2, 3 }, nil, 1, 3, 3, 1), 1e-12, 1e-12)
    end)

    it("has gradients (gradcheck)", function()
      local x, w, b = grad_leaf(rnd({ 1, 4, 6 })), grad_leaf(rnd({ 2, 2, 3 })), grad_leaf(rnd({ 2 }))
      assert.is_true(gradcheck(function(a, ww, bb)
        return F.conv1d(a, ww, bb, { stride = 2, padding = 1, dilation = 2, groups = 2 })
      end, { x, w, b }))
      local x2 = grad_leaf(rnd({ 1, 1, 5 }))
      assert.is_true(gradcheck(function(a) return F.conv1d(a, w:detach():narrow(2, 1, 1), nil, { padding = "same" }) end,
        { x2 }))
    end)

    it("nn.Conv1d has PyTorch's parameters, initialisation, padding modes and printing", function()
      tide.manual_seed(2)
      local conv = nn.Conv1d(4, 6, 5, { groups = 2, padding = 2 })
      assert.are.same({ 6, 2, 5 }, conv.weight:shape())
      assert.are.same({ 6 }, conv.bias:shape())
      local bound = 1 / math.sqrt(2 * 5)
      assert.is_true(conv.weight:abs():max():item() <= bound)
      assert.is_true(conv.weight:abs():max():item() > 0.8 * bound)
      assert.is_true(conv.bias:abs():max():item() <= bound)
      local names = {}
      for name in conv:named_parameters() do names[#names + 1] = name end
      assert.are.same({ "weight", "bias" }, names)
      assert.are.equal(1, #nn.Conv1d(1, 2, 3, { bias = false }):parameters())
      local x = tide.randn(2, 4, 7)
      H.close(conv(x), F.conv1d(x, conv.weight, conv.bias, { padding = 2, groups = 2 }), 1e-6, 1e-6)
      -- a non-zero padding mode pads the input with F.pad first
      local c = nn.Conv1d(1, 1, 3, { padding = 1, padding_mode = "circular", bias = false })
      c.weight = tide.tensor({ { { 1, 10, 100 } } }):requires_grad_()
      H.close(c(tide.tensor({ { { 1, 2, 3 } } })), { { { 213, 321, 132 } } })
      assert.are.equal("Conv1d(16, 33, kernel_size=(3,), stride=(2,))", tostring(nn.Conv1d(16, 33, 3, { stride = 2 })))
      assert.are.equal("Conv1d(4, 8, kernel_size=(5,), stride=(1,), padding=(2,), dilation=(3,), groups=2, bias=false, padding_mode=reflect)",
        tostring(nn.Conv1d(4, 8, 5, { padding = 2, dilation = 3, groups = 2, bias = false, padding_mode = "reflect" })))
    end)
  end)

  describe("conv_transpose2d", function()
    it("computes a hand-checked transposed convolution", function()
      local x = tide.tensor({ { { { 1, 2 }, { 3, 4 } } } }, "float64")
      local w = tide.ones({ 1, 1, 3, 3 }, "float64")
      -- the full 5x5 result, cut by padding 1 and extended by output_padding 1
      H.close(F.conv_transpose2d(x, w, nil, { stride = 2 }),
        { { { { 1, 1, 3, 2, 2 }, { 1, 1, 3, 2, 2 }, { 4, 4, 10, 6, 6 }, { 3, 3, 7, 4, 4 }, { 3, 3, 7, 4, 4 } } } })
      H.close(F.conv_transpose2d(x, w, tide.tensor({ 0.5 }, "float64"), { stride = 2, padding = 1, output_padding = 1 }),
        { { { { 1.5, 3.5, 2.5, 2.5 }, { 4.5, 10.5, 6.5, 6.5 }, { 3.5, 7.5, 4.5, 4.5 }, { 3.5, 7.5, 4.5, 4.5 } } } })
    end)

    it("matches a float64 reference with stride, padding, output_padding, dilation and groups, on any layout", function()
      local xs, ws = { 2, 4, 3, 2 }, { 4, 3, 2, 3 }
      local x, xv = rnd(xs)
      local w, wv = rnd(ws)
      local b, bv = rnd({ 6 })
      local opts = { stride = { 2, 3 }, padding = { 1, 2 }, output_padding = { 1, 0 }, dilation = { 1, 2 }, groups = 2 }
      local want = convt2d_ref(xv, xs, wv, ws, bv, { 2, 3 }, { 1, 2 }, { 1, 0 }, { 1, 2 }, 2)
      each_layout(x, function(t, name) H.close(F.conv_transpose2d(t, w, b, opts), want, 1e-12, 1e-12, name) end)
      -- padding beyond dilation (k - 1) crops the dilated input; output_padding below dilation
      local w1, wv1 = rnd({ 4, 1, 2, 2 })
      H.close(F.conv_transpose2d(x, w1, nil, { padding = 2, dilation = 3, output_padding = 2 }),
        convt2d_ref(xv, xs, wv1, { 4, 1, 2, 2 }, nil, { 1, 1 }, { 2, 2 }, { 2, 2 }, { 3, 3 }, 1), 1e-12, 1e-12)
      H.close(F.conv_transpose2d(x[1], w, b, opts), want[1], 1e-12, 1e-12)
      assert.are.same({ 0, 6, 5, 4 }, F.conv_transpose2d(tide.zeros({ 0, 4, 3, 2 }, "float64"), w, b, opts):shape())
    end)

    it("has gradients for input, weight and bias (gradcheck)", function()
      local x, w, b = grad_leaf(rnd({ 1, 2, 2, 3 })), grad_leaf(rnd({ 2, 2, 2, 2 })), grad_leaf(rnd({ 4 }))
      assert.is_true(gradcheck(function(a, ww, bb)
        return F.conv_transpose2d(a, ww, bb, { stride = 2, padding = 1, output_padding = 1, groups = 2 })
      end, { x, w, b }))
      assert.is_true(gradcheck(function(a, ww)
        return F.conv_transpose2d(a, ww, nil, { stride = { 1, 2 }, padding = { 1, 2 }, dilation = { 2, 1 } })
      end, { x, w }))
    end)

    it("conv_transpose1d is conv_transpose2d along one axis", function()
      local xs, ws = { 2, 2, 4 }, { 2, 3, 3 }
      local x, xv = rnd(xs)
      local w, wv = rnd(ws)
      local b, bv = rnd({ 3 })
      local want = convt2d_ref(xv, { 2, 2, 1, 4 }, wv, { 2, 3, 1, 3 }, bv, { 1, 2 }, { 0, 1 }, { 0, 1 }, { 1, 2 }, 1)
      for i = 1, 2 do for j = 1, 3 do want[i][j] = want[i][j][1] end end
      local opts = { stride = 2, padding = 1, output_padding = 1, dilation = 2 }
      each_layout(x, function(t, name) H.close(F.conv_transpose1d(t, w, b, opts), want, 1e-12, 1e-12, name) end)
      H.close(F.conv_transpose1d(x[2], w, b, opts), want[2], 1e-12, 1e-12)
      local xg, wg = grad_leaf(rnd({ 1, 2, 3 })), grad_leaf(rnd({ 2, 1, 2 }))
      assert.is_true(gradcheck(function(a, ww) return F.conv_transpose1d(a, ww, nil, { stride = 3, groups = 2 }) end,
        { xg, wg }))
    end)

    it("nn.ConvTranspose1d/2d have PyTorch's parameters, initialisation, output_size and printing", function()
      tide.manual_seed(4)
      local up = nn.ConvTranspose2d(4, 6, { 3, 2 }, { stride = 2, padding = 1, output_padding = 1, groups = 2 })
      assert.are.same({ 4, 3, 3, 2 }, up.weight:shape())
      assert.are.same({ 6 }, up.bias:shape())
      local bound = 1 / math.sqrt(3 * 3 * 2)   -- fan_in = out/groups * kH * kW, as PyTorch
      assert.is_true(up.weight:abs():max():item() <= bound)
      assert.is_true(up.weight:abs():max():item() > 0.8 * bound)
      assert.is_true(up.bias:abs():max():item() <= bound)
      local x = tide.randn(2, 4, 3, 3)
      local y = up(x)
      assert.are.same({ 2, 6, 6, 5 }, y:shape())
      H.close(y, F.conv_transpose2d(x, up.weight, up.bias,
        { stride = 2, padding = 1, output_padding = 1, groups = 2 }), 1e-6, 1e-6)
      local plain = nn.ConvTranspose2d(4, 6, 3, { stride = 2, padding = 1 })
      assert.are.same({ 2, 6, 5, 5 }, plain(x):shape())
      assert.are.same({ 2, 6, 6, 5 }, plain(x, { 6, 5 }):shape())
      H.close(plain(x, { 2, 6, 6, 6 }), F.conv_transpose2d(x, plain.weight, plain.bias,
        { stride = 2, padding = 1, output_padding = 1 }), 1e-6, 1e-6)
      assert.has_error(function() plain(x, { 7, 5 }) end,
        "ConvTranspose2d: output_size (7, 5) is not reachable: dimension 1 can be 5 to 6")
      local up1 = nn.ConvTranspose1d(2, 4, 3, { stride = 2, bias = false })
      assert.are.same({ 2, 4, 3 }, up1.weight:shape())
      assert.are.equal(1, #up1:parameters())
      assert.are.same({ 1, 4, 9 }, up1(tide.randn(1, 2, 4)):shape())
      assert.are.equal("ConvTranspose2d(16, 33, kernel_size=(3, 5), stride=(2, 1), padding=(4, 2), output_padding=(1, 0))",
        tostring(nn.ConvTranspose2d(16, 33, { 3, 5 }, { stride = { 2, 1 }, padding = { 4, 2 }, output_padding = { 1, 0 } })))
      assert.are.equal("ConvTranspose1d(2, 4, kernel_size=(3,), stride=(2,), bias=false)", tostring(up1))
    end)
  end)

  describe("group_norm and instance_norm", function()
    it("group_norm matches a float64 reference, with and without affine, on any layout", function()
      local xs = { 2, 6, 5 }
      local x, xv = rnd(xs, -2, 3)
      local w, wv = rnd({ 6 })
      local b, bv = rnd({ 6 })
      local want = group_norm_ref(xv, xs, 3, wv, bv, 1e-5)
      each_layout(x, function(t, name) H.close(F.group_norm(t, 3, w, b), want, 1e-10, 1e-12, name) end)
      H.close(F.group_norm(x, 2, nil, nil, 0.1), group_norm_ref(xv, xs, 2, nil, nil, 0.1), 1e-10, 1e-12)
      -- 4-d: the same as flattening the spatial dims
      local x4 = x:reshape(2, 6, 5, 1)
      H.close(F.group_norm(x4, 3, w, b):reshape(2, 6, 5), want, 1e-10, 1e-12)
      assert.are.same({ 0, 6, 5 }, F.group_norm(tide.zeros({ 0, 6, 5 }, "float64"), 3, w, b):shape())
    end)

    it("group_norm has gradients (gradcheck)", function()
      local x, w, b = grad_leaf(rnd({ 2, 4, 3 })), grad_leaf(rnd({ 4 })), grad_leaf(rnd({ 4 }))
      assert.is_true(gradcheck(function(a, ww, bb) return F.group_norm(a, 2, ww, bb) end, { x, w, b }))
    end)

    it("nn.GroupNorm has a weight of ones and a bias of zeros, and prints like PyTorch", function()
      local gn = nn.GroupNorm(2, 4)
      assert.are.same({ 4 }, gn.weight:shape())
      H.equal(gn.weight, { 1, 1, 1, 1 })
      H.equal(gn.bias, { 0, 0, 0, 0 })
      assert.are.equal(0, #nn.GroupNorm(2, 4, { affine = false }):parameters())
      local x = tide.randn(3, 4, 2, 2)
      H.close(gn(x), F.group_norm(x, 2), 1e-6, 1e-6)
      assert.are.equal("GroupNorm(2, 4, eps=1e-05, affine=true)", tostring(gn))
    end)

    it("instance_norm normalises each channel of each sample, and tracks running statistics", function()
      -- two channels of 4 values each: means 2.5 and 0, biased variances 1.25 and 4
      local x = tide.tensor({ { { { 1, 2 }, { 3, 4 } }, { { -2, 2 }, { -2, 2 } } } }, "float64")
      local r = 1 / math.sqrt(1.25 + 1e-5)
      local s = 1 / math.sqrt(4 + 1e-5)
      local want = { { { { -1.5 * r, -0.5 * r }, { 0.5 * r, 1.5 * r } }, { { -2 * s, 2 * s }, { -2 * s, 2 * s } } } }
      each_layout(x, function(t, name) H.close(F.instance_norm(t), want, 1e-12, 1e-12, name) end)
      local rm, rv = tide.zeros({ 2 }, "float64"), tide.ones({ 2 }, "float64")
      local w, b = tide.tensor({ 2, 3 }, "float64"), tide.tensor({ 1, -1 }, "float64")
      local y = F.instance_norm(x, rm, rv, w, b, true, 0.5)
      H.close(y[1][1], { { -3 * r + 1, -r + 1 }, { r + 1, 3 * r + 1 } }, 1e-12, 1e-12)
      H.close(rm, { 1.25, 0 }, 1e-12)
      -- unbiased variances 5/3 and 16/3
      H.close(rv, { 0.5 + 0.5 * 5 / 3, 0.5 + 0.5 * 16 / 3 }, 1e-12)
      -- without input statistics: the running ones
      H.close(F.instance_norm(x, rm, rv, nil, nil, false)[1][2][1],
        { -2 / math.sqrt(rv:totable()[2] + 1e-5), 2 / math.sqrt(rv:totable()[2] + 1e-5) }, 1e-12, 1e-12)
      assert.are.same({ 0, 2, 2, 2 }, F.instance_norm(tide.zeros({ 0, 2, 2, 2 }, "float64")):shape())
      local xg, wg, bg = grad_leaf(rnd({ 2, 2, 3 })), grad_leaf(rnd({ 2 })), grad_leaf(rnd({ 2 }))
      assert.is_true(gradcheck(function(a, ww, bb) return F.instance_norm(a, nil, nil, ww, bb) end, { xg, wg, bg }))
    end)

    it("nn.InstanceNorm1d/2d default to no affine and no running statistics, as PyTorch", function()
      local n = nn.InstanceNorm2d(2)
      assert.are.equal(0, #n:parameters())
      assert.is_nil(n.running_mean)
      local x = tide.randn(3, 2, 4, 4)
      H.close(n(x), F.instance_norm(x), 1e-6, 1e-6)
      H.close(n(x[1]), F.instance_norm(x)[1], 1e-5, 1e-6)
      local t = nn.InstanceNorm1d(2, { affine = true, track_running_stats = true })
      local names = {}
      for name in t:named_parameters() do names[#names + 1] = name end
      assert.are.same({ "weight", "bias" }, names)
      names = {}
      for name in t:named_buffers() do names[#names + 1] = name end
      assert.are.same({ "running_mean", "running_var", "num_batches_tracked" }, names)
      local x1 = tide.tensor({ { { 1, 3 }, { 0, 4 } } })
      t(x1)
      H.close(t.running_mean, { 0.2, 0.2 }, 1e-6)
      t:eval()
      H.close(t(x1), F.instance_norm(x1, t.running_mean, t.running_var, t.weight, t.bias, false), 1e-6)
      assert.are.equal("InstanceNorm2d(2, eps=1e-05, momentum=0.1, affine=false, track_running_stats=false)",
        tostring(n))
    end)
  end)

  describe("pad", function()
    it("pads in each mode as a float64 reference, on any layout", function()
      local xs = { 2, 1, 3, 4 }
      local x, xv = rnd(xs)
      for _, mode in ipairs { "constant", "reflect", "replicate", "circular" } do
        for _, pad in ipairs { { 1, 2, 2, 0 }, { 3, 0, 0, 2 }, { 0, 0, 1, 1 } } do
          local want = pad2d_ref(xv, xs, pad, mode, mode == "constant" and 0 or nil)
          each_layout(x, function(t, name)
            H.equal(F.pad(t, pad, mode), want, mode .. " " .. table.concat(pad, ",") .. " " .. name)
          end)
        end
      end
      H.equal(F.pad(x, { 1, 1, 1, 1 }, { value = 2.5 }), pad2d_ref(xv, xs, { 1, 1, 1, 1 }, "constant", 2.5))
    end)

    it("pads by hand-checked amounts, crops with negative pads, and pads any dim in constant mode", function()
      local x = tide.tensor({ { 1, 2, 3, 4 } }, "float64")
      H.equal(F.pad(x, { 2, 3 }, "reflect"), { { 3, 2, 1, 2, 3, 4, 3, 2, 1 } })
      H.equal(F.pad(x, { 2, 1 }, "replicate"), { { 1, 1, 1, 2, 3, 4, 4 } })
      H.equal(F.pad(x, { 4, 2 }, "circular"), { { 1, 2, 3, 4, 1, 2, 3, 4, 1, 2 } })
      H.equal(F.pad(x, { -1, 2, 1, 0 }, { value = 9 }), { { 9, 9, 9, 9, 9 }, { 2, 3, 4, 9, 9 } })
      H.equal(F.pad(x, { -1, -2 }), { { 2 } })
      H.equal(F.pad(x:view(1, 1, 4), { 1, -1, 0, 0, 1, 0 }), { { { 0, 0, 0, 0 } }, { { 0, 1, 2, 3 } } })
      H.equal(F.pad(x, { -1, 1 }, "circular"), { { 2, 3, 4, 1 } })
      H.equal(F.pad(x, { 0, 1 }, "constant", -5), { { 1, 2, 3, 4, -5 } })
      assert.are.same({ 0, 1, 4, 7 }, F.pad(tide.zeros(0, 1, 2, 3), { 2, 2, 1, 1 }, "reflect"):shape())
    end)

    it("has gradients in each mode (gradcheck)", function()
      local x = grad_leaf(rnd({ 1, 1, 2, 3 }))
      for _, mode in ipairs { "constant", "reflect", "replicate", "circular" } do
        assert.is_true(gradcheck(function(a) return F.pad(a, { 2, -1, 1, 1 }, mode) end, { x }), mode)
      end
    end)

    it("has the padding layers", function()
      local x = tide.tensor({ { { { 1, 2 }, { 3, 4 } } } })
      H.equal(nn.ZeroPad2d({ 1, 0, 0, 1 })(x), { { { { 0, 1, 2 }, { 0, 3, 4 }, { 0, 0, 0 } } } })
      H.equal(nn.ConstantPad2d(1, 7)(x)[1][1][1], { 7, 7, 7, 7 })
      H.equal(nn.ReflectionPad2d({ 1, 1, 0, 0 })(x), { { { { 2, 1, 2, 1 }, { 4, 3, 4, 3 } } } })
      H.equal(nn.ReplicationPad2d({ 0, 1, 1, 0 })(x), { { { { 1, 2, 2 }, { 1, 2, 2 }, { 3, 4, 4 } } } })
      H.equal(nn.CircularPad2d({ 1, 0, 0, 0 })(x), { { { { 2, 1, 2 }, { 4, 3, 4 } } } })
      H.equal(nn.ReflectionPad1d(1)(x[1]), { { { 2, 1, 2, 1 }, { 4, 3, 4, 3 } } })
      H.equal(nn.ConstantPad1d({ 0, 1 }, -1)(x[1][1]), { { 1, 2, -1 }, { 3, 4, -1 } })
      assert.are.equal("ZeroPad2d((1, 0, 0, 1))", tostring(nn.ZeroPad2d({ 1, 0, 0, 1 })))
      assert.are.equal("ConstantPad2d(padding=(1, 1, 1, 1), value=3.5)", tostring(nn.ConstantPad2d(1, 3.5)))
      assert.are.equal("ReflectionPad1d((2, 2))", tostring(nn.ReflectionPad1d(2)))
    end)
  end)

  describe("interpolate", function()
    it("nearest matches floor(dst * in / out) or floor(dst / scale_factor), at non-integer scales", function()
      local xs = { 2, 2, 3, 4 }
      local x, xv = rnd(xs)
      each_layout(x, function(t, name)
        H.equal(F.interpolate(t, { size = { 5, 7 } }), nearest_ref(xv, xs, 5, 7), name)
        H.equal(F.interpolate(t, { scale_factor = 1.7 }), nearest_ref(xv, xs, 5, 6, { 1.7, 1.7 }), name)
      end)
      H.equal(F.interpolate(x, { scale_factor = { 0.5, 1.5 } }), nearest_ref(xv, xs, 1, 6, { 0.5, 1.5 }))
      -- hand-checked: 3 -> 5 reads 0 0 1 1 2; scale 2.5 (-> 7) reads floor(dst * 0.4)
      local l = tide.tensor({ { { 10, 20, 30 } } })
      H.equal(F.interpolate(l, { size = 5 }), { { { 10, 10, 20, 20, 30 } } })
      H.equal(F.interpolate(l, { scale_factor = 2.5 }), { { { 10, 10, 10, 20, 20, 30, 30 } } })
      H.equal(F.interpolate(l, { size = 6 }), { { { 10, 10, 20, 20, 30, 30 } } })
      -- nearest-exact: floor((dst + 0.5) * 3 / 5)
      H.equal(F.interpolate(l, { size = 5, mode = "nearest-exact" }), { { { 10, 10, 20, 30, 30 } } })
      -- as PyTorch's CPU kernel: an output of the input's size copies it, one of twice the size halves the index
      local r = tide.arange(0, 10, { dtype = "float64" }):view(1, 1, 10)
      H.equal(F.interpolate(r, { scale_factor = 1.05 }), r)
      H.equal(F.interpolate(r, { scale_factor = 2.05 }), { { { 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9 } } })
      H.equal(F.interpolate(r, { scale_factor = 2.15 }),
        { { { 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 6, 7, 7, 8, 8, 9 } } })
      assert.are.same({ 0, 2, 6, 8 }, F.interpolate(tide.zeros(0, 2, 3, 4), { scale_factor = 2 }):shape())
    end)

    it("bilinear and linear match PyTorch's coordinate mapping, align_corners true and false", function()
      local xs = { 1, 2, 3, 4 }
      local x, xv = rnd(xs)
      for _, ac in ipairs { false, true } do
        each_layout(x, function(t, name)
          H.close(F.interpolate(t, { size = { 5, 7 }, mode = "bilinear", align_corners = ac }),
            bilinear_ref(xv, xs, 5, 7, nil, ac), 1e-12, 1e-12, name)
          H.close(F.interpolate(t, { scale_factor = { 1.7, 0.6 }, mode = "bilinear", align_corners = ac }),
            bilinear_ref(xv, xs, 5, 2, { 1.7, 0.6 }, ac), 1e-12, 1e-12, name)
        end)
      end
      -- recompute_scale_factor maps by in / out instead of 1 / scale_factor
      H.close(F.interpolate(x, { scale_factor = 1.7, mode = "bilinear", recompute_scale_factor = true }),
        bilinear_ref(xv, xs, 5, 6, nil, false), 1e-12, 1e-12)
      -- hand-checked 1-d: 3 -> 5, src = (dst + 0.5) * 0.6 - 0.5 clamped at 0: 0, 0.4, 1, 1.6, 2
      local l = tide.tensor({ { { 0, 10, 30 } } }, "float64")
      H.close(F.interpolate(l, { size = 5, mode = "linear" }), { { { 0, 4, 10, 22, 30 } } }, 1e-12, 1e-12)
      -- align_corners: src = dst * 2 / 4
      H.close(F.interpolate(l, { size = 5, mode = "linear", align_corners = true }), { { { 0, 5, 10, 20, 30 } } },
        1e-12, 1e-12)
      -- float32 input, computed in float32 as PyTorch
      H.close(F.interpolate(l:float(), { size = 5, mode = "linear" }), { { { 0, 4, 10, 22, 30 } } }, 1e-6, 1e-5)
      H.close(F.interpolate(x, { size = { 2, 2 }, mode = "area" }), F.adaptive_avg_pool2d(x, 2), 1e-12, 1e-12)
      assert.are.same({ 0, 2, 5, 3 }, F.interpolate(tide.zeros(0, 2, 3, 4), { size = { 5, 3 }, mode = "bilinear" }):shape())
    end)

    it("has gradients (gradcheck)", function()
      local x = grad_leaf(rnd({ 1, 1, 3, 2 }))
      for _, o in ipairs {
        { size = { 4, 5 }, mode = "bilinear" }, { scale_factor = 1.5, mode = "bilinear", align_corners = true },
        { size = { 5, 3 } } } do
        assert.is_true(gradcheck(function(a) return F.interpolate(a, o) end, { x }))
      end
      local l = grad_leaf(rnd({ 1, 2, 3 }))
      assert.is_true(gradcheck(function(a) return F.interpolate(a, { size = 7, mode = "linear" }) end, { l }))
    end)

    it("nn.Upsample and the Upsampling layers call interpolate", function()
      local x = tide.randn(1, 2, 3, 3)
      H.close(nn.Upsample({ scale_factor = 2, mode = "bilinear" })(x),
        F.interpolate(x, { scale_factor = 2, mode = "bilinear" }), 1e-6, 1e-6)
      H.close(nn.UpsamplingBilinear2d({ size = 5 })(x),
        F.interpolate(x, { size = 5, mode = "bilinear", align_corners = true }), 1e-6, 1e-6)
      H.equal(nn.UpsamplingNearest2d({ scale_factor = 2 })(x), F.interpolate(x, { scale_factor = 2 }))
      assert.are.equal("Upsample(scale_factor=2, mode='nearest')", tostring(nn.Upsample({ scale_factor = 2 })))
      assert.are.equal("Upsample(size=(4, 5), mode='bilinear')",
        tostring(nn.Upsample({ size = { 4, 5 }, mode = "bilinear" })))
    end)
  end)

  describe("pixel_shuffle", function()
    it("rearranges channels into blocks, and pixel_unshuffle undoes it, on any layout", function()
      local xs = { 2, 8, 2, 3 }
      local x, xv = rnd(xs)
      local X = at(xv, xs)
      local want = build({ 2, 2, 4, 6 }, function(i)
        local h, dh = floor((i[3] - 1) / 2), (i[3] - 1) % 2
        local w, dw = floor((i[4] - 1) / 2), (i[4] - 1) % 2
        return X(i[1], (i[2] - 1) * 4 + dh * 2 + dw + 1, h + 1, w + 1)
      end)
      each_layout(x, function(t, name)
        local y = F.pixel_shuffle(t, 2)
        H.equal(y, want, name)
        H.equal(F.pixel_unshuffle(y, 2), x, name)
      end)
      H.equal(nn.PixelShuffle(2)(x[1]), want[1])
      H.equal(nn.PixelUnshuffle(2)(tide.tensor(want, "float64")), x)
      -- more leading dims, and an empty batch
      assert.are.same({ 2, 1, 2, 4, 6 }, F.pixel_shuffle(x:reshape(2, 1, 8, 2, 3), 2):shape())
      assert.are.same({ 0, 18, 1, 1 }, F.pixel_unshuffle(tide.zeros(0, 2, 3, 3), 3):shape())
      local xg = grad_leaf(rnd({ 1, 4, 1, 2 }))
      assert.is_true(gradcheck(function(a) return F.pixel_shuffle(a, 2) end, { xg }))
      assert.is_true(gradcheck(function(a) return F.pixel_unshuffle(a, 2) end, { grad_leaf(rnd({ 1, 1, 2, 4 })) }))
      assert.are.equal("PixelShuffle(upscale_factor=2)", tostring(nn.PixelShuffle(2)))
    end)
  end)

  describe("1-d pooling", function()
    it("pools hand-checked windows, batched or not, with gradients", function()
      local x = tide.tensor({ { { 1, 5, 2, 4, 3, 0, 6 } } }, "float64")
      H.equal(F.max_pool1d(x, 2), { { { 5, 4, 3 } } })
      local y, idx = F.max_pool1d(x, 3, { stride = 2, padding = 1, return_indices = true })
      H.equal(y, { { { 5, 5, 4, 6 } } })
      H.equal(idx, { { { 2, 2, 4, 7 } } })
      H.equal(F.max_pool1d(x, 2, { dilation = 3, ceil_mode = true }), { { { 4, 2, 3 } } })
      H.close(F.avg_pool1d(x, 3, { stride = 2 }), { { { 8 / 3, 3, 3 } } }, 1e-12)
      H.close(F.avg_pool1d(x, 2, { padding = 1, count_include_pad = false }), { { { 1, 3.5, 3.5, 3 } } }, 1e-12)
      H.close(F.adaptive_avg_pool1d(x, 3), { { { 8 / 3, 3, 3 } } }, 1e-12)
      H.equal(nn.MaxPool1d(2)(x[1]), { { 5, 4, 3 } })
      H.close(nn.AvgPool1d(2, { stride = 1 })(x:transpose(1, 2):clone():transpose(1, 2)),
        { { { 3, 3.5, 3, 3.5, 1.5, 3 } } }, 1e-12)
      H.close(nn.AdaptiveAvgPool1d(1)(x), { { { 3 } } }, 1e-12)
      local xg = grad_leaf(rnd({ 1, 2, 5 }))
      assert.is_true(gradcheck(function(a) return F.max_pool1d(a, 2, { stride = 1 }) end, { xg }))
      assert.is_true(gradcheck(function(a) return F.avg_pool1d(a, 3, { padding = 1 }) end, { xg }))
      assert.is_true(gradcheck(function(a) return F.adaptive_avg_pool1d(a, 2) end, { xg }))
      assert.are.equal("MaxPool1d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=false)",
        tostring(nn.MaxPool1d(2)))
      assert.are.equal("AvgPool1d(kernel_size=(3,), stride=(3,), padding=(0,))", tostring(nn.AvgPool1d(3)))
    end)
  end)

  it("runs under tide.jit.compile: nothing reads values back to the host", function()
    local w, w1 = tide.randn(2, 2, 3, 3), tide.randn(2, 2, 3)
    local function f(x)
      local y = F.interpolate(x, { size = { 5, 7 }, mode = "bilinear" })
      y = F.conv_transpose2d(F.pad(y, { 1, 2, 1, 0 }, "reflect"), w, nil, { stride = 2, padding = 1, output_padding = 1 })
      y = F.interpolate(F.group_norm(y, 2), { scale_factor = 1.5 })
      return F.max_pool1d(F.conv1d(y:flatten(3), w1), 2),
        F.pixel_shuffle(F.pixel_unshuffle(y:narrow(3, 1, 4):narrow(4, 1, 4), 2), 2)
    end
    local g = tide.jit.compile(f)
    for _ = 1, 3 do
      local x = tide.randn(1, 2, 3, 4)
      local a1, b1 = g(x)
      local a2, b2 = f(x)
      H.close(a1, a2, 1e-5, 1e-5)
      H.close(b1, b2, 1e-5, 1e-5)
    end
  end)

  it("rejects bad shapes and options with clear errors", function()
    local x3, x4 = tide.zeros(1, 4, 6), tide.zeros(1, 4, 3, 3)
    local function err(f, msg) assert.has_error(f, msg) end
    -- conv1d
    err(function() F.conv1d(x4, tide.zeros(2, 4, 3)) end, "conv1d: expects a 2-d (C, L) or 3-d (N, C, L) input, got 4-d")
    err(function() F.conv1d(x3, tide.zeros(2, 4, 1, 3)) end,
      "conv1d: weight must be 3-d [out_channels, in_channels/groups, kernel_size], got [2,4,1,3]")
    err(function() F.conv1d(x3, tide.zeros(2, 3, 3)) end,
      "conv1d: input [1,4,6] has 4 channels, but weight [2,3,3] with groups 1 expects 3")
    err(function() F.conv1d(x3, tide.zeros(3, 2, 3), nil, { groups = 2 }) end,
      "conv1d: the 3 output channels of weight [3,2,3] are not divisible by groups 2")
    err(function() F.conv1d(x3, tide.zeros(2, 4, 3), tide.zeros(3)) end,
      "conv1d: bias of shape [3] does not match the 2 output channels")
    err(function() F.conv1d(x3, tide.zeros(2, 4, 3), nil, { padding = "same", stride = 2 }) end,
      "conv1d: padding='same' needs stride 1, got 2")
    err(function() F.conv1d(x3, tide.zeros(2, 4, 3), nil, { stride = { 1, 2 } }) end,
      "conv1d: stride must be an integer or a table {n}, got a table of 2")
    err(function() F.conv1d(x3, tide.zeros(2, 4, 3), nil, { strides = 2 }) end, "conv1d: unknown option 'strides'")
    err(function() nn.Conv1d(3, 4, 3, { groups = 2 }) end,
      "Conv1d: in_channels (3) and out_channels (4) must be divisible by groups (2)")
    err(function() nn.Conv1d(3, 4, 0) end, "Conv1d: kernel_size must be a positive integer, got 0")
    err(function() nn.Conv1d(3, 4, 3, { padding_mode = "mirror" }) end,
      "Conv1d: padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', got mirror")
    -- conv_transpose
    err(function() F.conv_transpose2d(x4, tide.zeros(3, 2, 2, 2)) end,
      "conv_transpose2d: input [1,4,3,3] has 4 channels, but weight [3,2,2,2] with groups 1 expects 3, divisible by groups")
    err(function() F.conv_transpose2d(x4, tide.zeros(4, 2, 2)) end,
      "conv_transpose2d: weight must be 4-d [in_channels, out_channels/groups, kH, kW], got [4,2,2]")
    err(function() F.conv_transpose2d(x4, tide.zeros(4, 2, 2, 2), nil, { stride = 2, output_padding = 2 }) end,
      "conv_transpose2d: output_padding {2, 2} must be non-negative and below either stride {2, 2} or dilation {1, 1}")
    err(function() F.conv_transpose2d(tide.zeros(4, 4), tide.zeros(4, 2, 2, 2)) end,
      "conv_transpose2d: expects a 3-d (C, H, W) or 4-d (N, C, H, W) input, got 2-d")
    err(function() F.conv_transpose2d(x4, tide.zeros(4, 2, 2, 2), nil, { padding = 3 }) end,
      "conv_transpose2d: input [1,4,3,3] with weight [4,2,2,2] gives an output of -2x-2")
    err(function() F.conv_transpose1d(x3, tide.zeros(4, 2, 2), nil, { groups = 3 }) end,
      "conv_transpose1d: input [1,4,6] has 4 channels, but weight [4,2,2] with groups 3 expects 4, divisible by groups")
    err(function() F.conv_transpose1d(x3, tide.zeros(4, 2, 2), nil, { stride = 2, output_padding = 2 }) end,
      "conv_transpose1d: output_padding 2 must be non-negative and below either stride 2 or dilation 1")
    err(function() F.conv_transpose1d(x3, tide.zeros(4, 2, 2), nil, { padding = 4 }) end,
      "conv_transpose1d: input [1,4,6] with weight [4,2,2] gives an output of -1")
    err(function() F.conv_transpose2d(x4, tide.zeros(4, 2, 2, 2), tide.zeros(4)) end,
      "conv_transpose2d: bias of shape [4] does not match the 2 output channels")
    err(function() nn.ConvTranspose2d(4, 4, 3, { padding_mode = "reflect" }) end,
      "ConvTranspose2d: padding_mode must be 'zeros', got reflect")
    -- norms
    err(function() nn.GroupNorm(4, 6) end, "GroupNorm: num_channels (6) must be divisible by num_groups (4)")
    err(function() F.group_norm(tide.zeros(2, 6, 4), 4) end,
      "group_norm: the 6 channels of input [2,6,4] are not divisible by num_groups 4")
    err(function() F.group_norm(tide.zeros(2, 4, 4), 2, tide.ones(3)) end,
      "group_norm: weight of shape [3] does not match the 4 channels of input [2,4,4]")
    err(function() F.group_norm(tide.zeros(6), 2) end,
      "group_norm: input must be [N, C, ...] with at least 2 dimensions, got shape [6]")
    err(function() F.instance_norm(tide.zeros(2, 3, 1)) end,
      "instance_norm: expected more than 1 spatial element when training, got input of shape [2,3,1]")
    err(function() F.instance_norm(tide.zeros(2, 3, 4), tide.zeros(3)) end,
      "instance_norm: running_mean and running_var must be given together")
    err(function() F.instance_norm(tide.zeros(2, 3, 4), tide.zeros(3), tide.zeros(2)) end,
      "instance_norm: running_var of shape [2] does not match the 3 channels of input [2,3,4]")
    err(function() F.instance_norm(tide.zeros(2, 3, 4), nil, nil, nil, nil, false) end,
      "instance_norm: running_mean and running_var are required when use_input_stats is false")
    err(function() nn.InstanceNorm2d(3)(x4) end, "InstanceNorm2d: input [1,4,3,3] has 4 channels, expected num_features 3")
    -- pad
    err(function() F.pad(x3, { 6, 0 }, "reflect") end,
      "pad: reflect padding (6, 0) must be below the size 6 of dimension 3 of input [1,4,6]")
    err(function() F.pad(x3, { 0, 7 }, "circular") end,
      "pad: circular padding (0, 7) must be at most the size 6 of dimension 3 of input [1,4,6]")
    err(function() F.pad(x3, { 1, 2, 3 }) end, "pad: pad must be a table of an even number of integers, got a table of 3")
    err(function() F.pad(x3, { 1, 1, 1, 1, 1, 1, 1, 1 }) end,
      "pad: 8 pad values pad 4 dimensions, but the input [1,4,6] has 3")
    err(function() F.pad(x3, { 1, 1, 1, 1, 1, 1 }, "replicate") end,
      "pad: mode 'replicate' pads the last 1, 2 or 3 dims of a ([N,] C, ...) input; 6 pad values need a 4-d or 5-d input, got [1,4,6]")
    err(function() F.pad(x3, { 1, 1 }, "mirror") end,
      "pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got mirror")
    err(function() F.pad(x3, { 1, 1 }, { mode = "reflect", value = 1 }) end, "pad: mode 'reflect' takes no value, got 1")
    err(function() F.pad(x3, { -4, -3 }) end,
      "pad: padding (-4, -3) of dimension 3 (size 6) of input [1,4,6] leaves a negative size")
    err(function() F.pad(x3, { 1.5, 1 }) end, "pad: pad values must be integers, got 1.5")
    -- interpolate
    err(function() F.interpolate(x4, { size = 4, scale_factor = 2 }) end,
      "interpolate: only one of size or scale_factor should be defined")
    err(function() F.interpolate(x4, {}) end, "interpolate: either size or scale_factor should be defined")
    err(function() F.interpolate(x3, { size = 4, mode = "bilinear" }) end,
      "interpolate: mode 'bilinear' needs a 4-d input (N, C, H, W), got [1,4,6]")
    err(function() F.interpolate(x4, { size = 4, mode = "linear" }) end,
      "interpolate: mode 'linear' needs a 3-d input (N, C, L), got [1,4,3,3]")
    err(function() F.interpolate(x4, { size = 4, mode = "cubic" }) end,
      "interpolate: mode must be 'nearest', 'nearest-exact', 'linear', 'bilinear' or 'area', got cubic")
    err(function() F.interpolate(x4, { size = 4, align_corners = true }) end,
      "interpolate: align_corners can only be set with the linear modes, got mode 'nearest'")
    err(function() F.interpolate(x4, { size = { 1, 2, 3 } }) end,
      "interpolate: size must have 2 values for input [1,4,3,3], got 3")
    err(function() F.interpolate(x4, { scale_factor = 0.2 }) end,
      "interpolate: scale_factor 0.2 makes dimension 3 of input [1,4,3,3] empty")
    err(function() F.interpolate(x4, { scale_factor = -1 }) end,
      "interpolate: scale factors must be positive numbers, got -1")
    -- pixel shuffle, pools
    err(function() F.pixel_shuffle(tide.zeros(1, 6, 2, 2), 2) end,
      "pixel_shuffle: the 6 channels of input [1,6,2,2] are not divisible by upscale_factor^2 = 4")
    err(function() F.pixel_unshuffle(tide.zeros(1, 1, 4, 3), 2) end,
      "pixel_unshuffle: the height 4 and width 3 of input [1,1,4,3] must be divisible by downscale_factor 2")
    err(function() nn.PixelShuffle(0) end, "PixelShuffle: upscale_factor must be a positive integer, got 0")
    err(function() F.max_pool1d(x4, 2) end, "max_pool1d: expects a 2-d (C, L) or 3-d (N, C, L) input, got 4-d")
    err(function() F.avg_pool1d(x3, 2, { divisor_override = 2 }) end, "avg_pool1d: unknown option 'divisor_override'")
    err(function() F.max_pool1d(x3, 2, { padding = 2 }) end,
      "max_pool1d: kernel_size 2, stride 2 and dilation 1 must be positive and padding 2 between 0 and half the kernel")
    err(function() F.avg_pool1d(x3, 8) end,
      "avg_pool1d: kernel_size 8 (dilation 1) is larger than the padded input 6 (input [1,4,6], padding 0)")
    err(function() F.conv1d(x3, tide.zeros(2, 4, 4), nil, { dilation = 2 }) end,
      "conv1d: kernel_size 4 (dilation 2) is larger than the padded input 6 (input [1,4,6], padding 0)")
    err(function() F.conv1d(x3, tide.zeros(2, 4, 3), nil, { stride = 0 }) end,
      "conv1d: kernel_size 3, stride 0 and dilation 1 must be positive and padding 0 non-negative")
  end)
end)

describe("unfold and fold", function()
  local F = tide.nn.functional

  it("unfold lays each block out as a column, channel-major, as PyTorch", function()
    local x = tide.arange(1, 17):float():view(1, 1, 4, 4)
    H.equal(F.unfold(x, 2), { { { 1, 2, 3, 5, 6, 7, 9, 10, 11 }, { 2, 3, 4, 6, 7, 8, 10, 11, 12 },
                                { 5, 6, 7, 9, 10, 11, 13, 14, 15 }, { 6, 7, 8, 10, 11, 12, 14, 15, 16 } } })
    H.equal(F.unfold(x, 2, { stride = 2 }), { { { 1, 3, 9, 11 }, { 2, 4, 10, 12 }, { 5, 7, 13, 15 }, { 6, 8, 14, 16 } } })
    -- padding, dilation and two channels: column k of channel c is row (c-1)*kh*kw + k
    local x2 = tide.arange(1, 33):float():view(1, 2, 4, 4)
    local u = F.unfold(x2, { 2, 2 }, { dilation = 2, padding = 1, stride = { 3, 2 } })
    assert.are.same({ 1, 8, 4 }, u:shape())
    -- padded plane 6x6; blocks at rows 0, 3 and cols 0, 2; elements at +0/+2 in each direction
    H.equal(u[1][1], { 0, 0, 0, 10 })            -- channel 1, kernel (1,1): padding but for x[3][2]
    H.equal(u[1][4], { 6, 8, 0, 0 })             -- channel 1, kernel (2,2): x[2][2], x[2][4], then past the end
    H.equal(u[1][8], { 22, 24, 0, 0 })           -- channel 2, kernel (2,2)
    -- elements are copied, not computed: infinities and NaN stay where they are
    local s = tide.tensor({ { { 1, math.huge }, { 0 / 0, -2 } } })
    H.equal(F.unfold(s, 1), { { 1, math.huge, 0 / 0, -2 } })
    -- unbatched, and in every layout
    assert.are.same({ 4, 9 }, F.unfold(x[1], 2):shape())
    for name, t in pairs(H.layouts(tide.arange(1, 17):float():view(4, 4))) do
      H.equal(F.unfold(t:view(1, 1, 4, 4):contiguous(), 2):squeeze(1), F.unfold(t:unsqueeze(1), 2), name)
    end
  end)

  it("fold sums the blocks back and is unfold's adjoint", function()
    local x = tide.arange(1, 17):float():view(1, 1, 4, 4)
    H.equal(F.fold(F.unfold(x, 2), { 4, 4 }, 2), { { { { 1, 4, 6, 4 }, { 10, 24, 28, 16 },
                                                      { 18, 40, 44, 24 }, { 13, 28, 30, 16 } } } })
    local o = { padding = { 1, 0 }, stride = 2, dilation = { 1, 2 } }
    local a = tide.randn(2, 3, 5, 7, { dtype = "float64" })
    local cols = F.unfold(a, { 3, 2 }, o)
    local y = tide.randn(cols:shape(), { dtype = "float64" })
    -- <unfold(a), y> == <a, fold(y)>
    H.close((cols * y):sum(), (a * F.fold(y, { 5, 7 }, { 3, 2 }, o)):sum(), 1e-12)
    local nn = tide.nn
    H.equal(nn.Fold({ 4, 4 }, 2)(nn.Unfold(2)(x)), F.fold(F.unfold(x, 2), { 4, 4 }, 2))
    assert.are.same({ 1, 4, 4 }, F.fold(F.unfold(x, 2):squeeze(1), 4, 2):shape())
  end)

  it("differentiates both", function()
    local a = tide.randn(1, 2, 4, 5, { dtype = "float64" }):requires_grad_()
    assert.is_true(tide.autograd.gradcheck(function(t) return F.unfold(t, 2, { padding = 1, stride = 2 }) end, { a }))
    local c = tide.randn(1, 8, 9, { dtype = "float64" }):requires_grad_()
    assert.is_true(tide.autograd.gradcheck(function(t) return F.fold(t, { 4, 5 }, 2, { padding = 1, stride = 2 }) end,
      { c }))
  end)

  it("rejects bad sizes", function()
    local x = tide.zeros(1, 1, 4, 4)
    assert.has_error(function() F.unfold(x, 5) end,
      "unfold: a 5x5 kernel (dilation 1, 1) does not fit the padded 4x4 input")
    assert.has_error(function() F.unfold(tide.zeros(4, 4), 2) end,
      "unfold: expects a 3-d (C, H, W) or 4-d (N, C, H, W) input, got 2-d")
    assert.has_error(function() F.unfold(x, 2, { step = 1 }) end, "unfold: unknown option 'step'")
    assert.has_error(function() F.fold(tide.zeros(1, 5, 9), 4, 2) end,
      "fold: the input's size 5 in dimension 2 is not divisible by the kernel's 4 elements")
    assert.has_error(function() F.fold(tide.zeros(1, 4, 8), 4, 2) end,
      "fold: the input has 8 blocks but output_size 4x4 with this kernel, padding and stride makes 9")
  end)
end)
