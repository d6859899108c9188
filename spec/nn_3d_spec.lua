-- nn 3-d layers (tide.nn.spatial3d): conv3d, conv_transpose3d, the 3-d max,
-- average and adaptive pools, BatchNorm3d, InstanceNorm3d and 5-d
-- interpolation against float64 references computed by their definitions in
-- plain Lua, with stride/padding/dilation/groups combinations, on several
-- layouts, unbatched inputs and empty batches; gradcheck of each; the modules'
-- parameters, state_dict names, initialisation and printing; every error; and
-- a small 3-d CNN training step under tide.jit.compile giving the eager values.
local tide = require "tide"
local H = require "spec.helpers"
local nn, F = tide.nn, tide.nn.functional
local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min

local gradcheck = tide.autograd.gradcheck

-- -- data and references ---------------------------------------------------------------

local rnd = H.random_tensors(11)   -- rnd(shape, lo, hi): a float64 tensor, its flat values
local at, build = H.at, H.build
local grad_leaf = H.grad_leaf
local each_layout = H.each_layout

-- conv3d by its definition; s, d, p (padding before) and q (after, default p): {d, h, w}
local function conv3d_ref(x, xs, w, ws, b, s, p, d, g, q)
  q = q or p
  local o, cg = ws[1], ws[2]
  local k = { ws[3], ws[4], ws[5] }
  local outs = {}
  for i = 1, 3 do outs[i] = floor((xs[2 + i] + p[i] + q[i] - d[i] * (k[i] - 1) - 1) / s[i]) + 1 end
  local X, Wt = at(x, xs), at(w, ws)
  return build({ xs[1], o, outs[1], outs[2], outs[3] }, function(i)
    local grp = floor((i[2] - 1) / (o / g))
    local acc = b and b[i[2]] or 0
    for c = 1, cg do
      for a = 0, k[1] - 1 do
        local z = (i[3] - 1) * s[1] - p[1] + a * d[1]
        if z >= 0 and z < xs[3] then
          for bb = 0, k[2] - 1 do
            local y = (i[4] - 1) * s[2] - p[2] + bb * d[2]
            if y >= 0 and y < xs[4] then
              for cc = 0, k[3] - 1 do
                local xx = (i[5] - 1) * s[3] - p[3] + cc * d[3]
                if xx >= 0 and xx < xs[5] then
                  acc = acc + X(i[1], grp * cg + c, z + 1, y + 1, xx + 1) * Wt(i[2], c, a + 1, bb + 1, cc + 1)
                end
              end
            end
          end
        end
      end
    end
    return acc
  end)
end

-- conv_transpose3d by its definition (each input element scattered through the kernel)
local function convt3d_ref(x, xs, w, ws, b, s, p, op, d, g)
  local cin, cog = xs[2], ws[2]
  local k = { ws[3], ws[4], ws[5] }
  local outs = {}
  for i = 1, 3 do outs[i] = (xs[2 + i] - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + op[i] + 1 end
  local X, Wt = at(x, xs), at(w, ws)
  return build({ xs[1], cog * g, outs[1], outs[2], outs[3] }, function(i)
    local grp, ol = floor((i[2] - 1) / cog), (i[2] - 1) % cog + 1
    local acc = b and b[i[2]] or 0
    local src = { i[3], i[4], i[5] }
    for c = 1, cin / g do
      local cc = grp * (cin / g) + c
      for a = 0, k[1] - 1 do
        for bb = 0, k[2] - 1 do
          for e = 0, k[3] - 1 do
            local kk, t, ok = { a, bb, e }, {}, true
            for j = 1, 3 do
              local v = src[j] - 1 + p[j] - kk[j] * d[j]
              if v % s[j] ~= 0 or v < 0 or v / s[j] >= xs[2 + j] then ok = false; break end
              t[j] = v / s[j] + 1
            end
            if ok then acc = acc + X(i[1], cc, t[1], t[2], t[3]) * Wt(cc, ol, a + 1, bb + 1, e + 1) end
          end
        end
      end
    end
    return acc
  end)
end

local function pool_out(n, k, s, p, d, ceil_mode)
  local o = floor((n + 2 * p - d * (k - 1) - 1 + (ceil_mode and s - 1 or 0)) / s) + 1
  if ceil_mode and (o - 1) * s >= n + p then o = o - 1 end
  return o
end

-- max_pool3d by its definition: the first maximum in (d, h, w) order and its
-- 1-based position in the D x H x W volume; -inf and 0 for a window of padding only
local function max_pool3d_ref(x, xs, k, s, p, d, ceil_mode)
  local outs = {}
  for i = 1, 3 do outs[i] = pool_out(xs[2 + i], k[i], s[i], p[i], d[i], ceil_mode) end
  local X = at(x, xs)
  local function window(i)
    local best, where = -math.huge, 0
    for a = 0, k[1] - 1 do
      local z = (i[3] - 1) * s[1] - p[1] + a * d[1]
      for bb = 0, k[2] - 1 do
        local y = (i[4] - 1) * s[2] - p[2] + bb * d[2]
        for c = 0, k[3] - 1 do
          local xx = (i[5] - 1) * s[3] - p[3] + c * d[3]
          if z >= 0 and z < xs[3] and y >= 0 and y < xs[4] and xx >= 0 and xx < xs[5] then
            local v = X(i[1], i[2], z + 1, y + 1, xx + 1)
            if v > best or where == 0 then best, where = v, (z * xs[4] + y) * xs[5] + xx + 1 end
          end
        end
      end
    end
    return best, where
  end
  local shape = { xs[1], xs[2], outs[1], outs[2], outs[3] }
  return build(shape, function(i) return (window(i)) end), build(shape, function(i) return select(2, window(i)) end)
end

-- avg_pool3d as PyTorch's kernel computes it
local function avg_pool3d_ref(x, xs, k, s, p, ceil_mode, include_pad, div)
  local outs = {}
  for i = 1, 3 do outs[i] = pool_out(xs[2 + i], k[i], s[i], p[i], 1, ceil_mode) end
  local X = at(x, xs)
  return build({ xs[1], xs[2], outs[1], outs[2], outs[3] }, function(i)
    local lo, hi, size, inside = {}, {}, 1, 1
    for j = 1, 3 do
      local st = (i[2 + j] - 1) * s[j] - p[j]
      local en = min(st + k[j], xs[2 + j] + p[j])
      size = size * (en - st)
      lo[j], hi[j] = max(st, 0), min(en, xs[2 + j])
      inside = inside * (hi[j] - lo[j])
    end
    local sum = 0
    for z = lo[1], hi[1] - 1 do
      for y = lo[2], hi[2] - 1 do
        for xx = lo[3], hi[3] - 1 do sum = sum + X(i[1], i[2], z + 1, y + 1, xx + 1) end
      end
    end
    return sum / (div or (include_pad and size or inside))
  end)
end

-- the adaptive pools by their definition; f(values) reduces a window
local function adaptive3d_ref(x, xs, o, f)
  local X = at(x, xs)
  return build({ xs[1], xs[2], o[1], o[2], o[3] }, function(i)
    local lo, hi = {}, {}
    for j = 1, 3 do
      local n, m, t = xs[2 + j], o[j], i[2 + j] - 1
      lo[j], hi[j] = floor(t * n / m), ceil((t + 1) * n / m)
    end
    local vals = {}
    for z = lo[1], hi[1] - 1 do
      for y = lo[2], hi[2] - 1 do
        for xx = lo[3], hi[3] - 1 do
          vals[#vals + 1] = { X(i[1], i[2], z + 1, y + 1, xx + 1), (z * xs[4] + y) * xs[5] + xx + 1 }
        end
      end
    end
    return f(vals)
  end)
end
local function mean_of(vals)
  local s = 0
  for _, v in ipairs(vals) do s = s + v[1] end
  return s / #vals
end
local function max_of(vals)
  local b = vals[1]
  for _, v in ipairs(vals) do if v[1] > b[1] then b = v end end
  return b[1]
end
local function argmax_of(vals)
  local b = vals[1]
  for _, v in ipairs(vals) do if v[1] > b[1] then b = v end end
  return b[2]
end

local function trilinear_ref(x, xs, o, sf, align_corners)
  local X = at(x, xs)
  return build({ xs[1], xs[2], o[1], o[2], o[3] }, function(i)
    local idx, wt = {}, {}
    for j = 1, 3 do
      local i0, i1, w0, w1 = H.linear_source(i[2 + j] - 1, xs[2 + j], o[j], sf and sf[j], align_corners)
      idx[j], wt[j] = { i0, i1 }, { w0, w1 }
    end
    local acc = 0
    for a = 1, 2 do
      for b = 1, 2 do
        for c = 1, 2 do
          acc = acc + wt[1][a] * wt[2][b] * wt[3][c] * X(i[1], i[2], idx[1][a] + 1, idx[2][b] + 1, idx[3][c] + 1)
        end
      end
    end
    return acc
  end)
end

local function nearest3d_ref(x, xs, o, sf)
  local X = at(x, xs)
  return build({ xs[1], xs[2], o[1], o[2], o[3] }, function(i)
    local src = {}
    for j = 1, 3 do
      local scale = sf and 1 / sf[j] or xs[2 + j] / o[j]
      src[j] = min(floor((i[2 + j] - 1) * scale), xs[2 + j] - 1) + 1
    end
    return X(i[1], i[2], src[1], src[2], src[3])
  end)
end

-- x [N, C, *] normalised per channel (over N and the rest, by_sample false) or
-- per sample and channel (by_sample), biased variance, then * w + b
local function norm_ref(x, xs, by_sample, w, b, eps)
  local plane = 1
  for j = 3, #xs do plane = plane * xs[j] end
  local function group(n, c)
    local vals = {}
    for nn_ = 1, xs[1] do
      if not by_sample or nn_ == n then
        for j = 1, plane do vals[#vals + 1] = x[((nn_ - 1) * xs[2] + c - 1) * plane + j] end
      end
    end
    local s, q = 0, 0
    for _, v in ipairs(vals) do s = s + v end
    local mean = s / #vals
    for _, v in ipairs(vals) do q = q + (v - mean) ^ 2 end
    return mean, q / #vals, q / (#vals - 1)
  end
  local out = {}
  for n = 1, xs[1] do
    for c = 1, xs[2] do
      local mean, var = group(n, c)
      for j = 1, plane do
        local v = x[((n - 1) * xs[2] + c - 1) * plane + j]
        out[#out + 1] = (v - mean) / math.sqrt(var + eps) * (w and w[c] or 1) + (b and b[c] or 0)
      end
    end
  end
  return H.nest(out, xs), group
end

local function names_of(m)
  local r = {}
  for _, k in ipairs(m:state_dict_keys()) do r[#r + 1] = k end
  return r
end

-- -- specs --------------------------------------------------------------------------------

describe("nn 3-d", function()
  describe("conv3d", function()
    it("matches a float64 reference with stride, padding, dilation and groups, on any layout", function()
      local xs, ws = { 2, 4, 5, 4, 5 }, { 6, 2, 3, 2, 3 }
      local x, xv = rnd(xs)
      local w, wv = rnd(ws)
      local b, bv = rnd({ 6 })
      local opts = { stride = { 2, 1, 2 }, padding = { 1, 1, 2 }, dilation = { 1, 2, 1 }, groups = 2 }
      local want = conv3d_ref(xv, xs, wv, ws, bv, { 2, 1, 2 }, { 1, 1, 2 }, { 1, 2, 1 }, 2)
      each_layout(x, function(t, name) H.close(F.conv3d(t, w, b, opts), want, 1e-12, 1e-12, name) end)
      H.close(F.conv3d(x, w:transpose(2, 5):clone():transpose(2, 5), b, opts), want, 1e-12, 1e-12, "weight")
      for _, c in ipairs {
        { s = { 1, 1, 1 }, p = { 0, 0, 0 }, d = { 1, 1, 1 }, g = 1, ws = { 3, 4, 2, 2, 2 } },
        { s = { 3, 2, 1 }, p = { 2, 0, 1 }, d = { 2, 1, 1 }, g = 4, ws = { 4, 1, 2, 3, 1 } },
        { s = { 1, 2, 2 }, p = { 1, 1, 1 }, d = { 1, 1, 2 }, g = 2, ws = { 2, 2, 1, 3, 3 } },
      } do
        local w1, wv1 = rnd(c.ws)
        H.close(F.conv3d(x, w1, nil, { stride = c.s, padding = c.p, dilation = c.d, groups = c.g }),
          conv3d_ref(xv, xs, wv1, c.ws, nil, c.s, c.p, c.d, c.g), 1e-12, 1e-12)
      end
      -- unbatched, and an empty batch
      H.close(F.conv3d(x[2], w, b, opts), want[2], 1e-12, 1e-12)
      assert.are.same({ 0, 6, 3, 4, 4 }, F.conv3d(tide.zeros({ 0, 4, 5, 4, 5 }, "float64"), w, b, opts):shape())
    end)

    it("pads 'same' (the extra one at the end for an even kernel) and 'valid'", function()
      local xs = { 1, 2, 4, 3, 5 }
      local x, xv = rnd(xs)
      local ws = { 3, 2, 2, 3, 4 }
      local w, wv = rnd(ws)
      local y = F.conv3d(x, w, nil, { padding = "same" })
      assert.are.same({ 1, 3, 4, 3, 5 }, y:shape())
      H.close(y, conv3d_ref(xv, xs, wv, ws, nil, { 1, 1, 1 }, { 0, 1, 1 }, { 1, 1, 1 }, 1, { 1, 1, 2 }), 1e-12, 1e-12)
      H.close(F.conv3d(x, w, nil, { padding = "same", dilation = { 3, 1, 2 } }),
        conv3d_ref(xv, xs, wv, ws, nil, { 1, 1, 1 }, { 1, 1, 3 }, { 3, 1, 2 }, 1, { 2, 1, 3 }), 1e-12, 1e-12)
      H.close(F.conv3d(x, w, nil, { padding = "valid" }),
        conv3d_ref(xv, xs, wv, ws, nil, { 1, 1, 1 }, { 0, 0, 0 }, { 1, 1, 1 }, 1), 1e-12, 1e-12)
    end)

    it("has gradients for input, weight and bias (gradcheck)", function()
      local x, w, b = grad_leaf(rnd({ 1, 4, 3, 3, 4 })), grad_leaf(rnd({ 2, 2, 2, 2, 3 })), grad_leaf(rnd({ 2 }))
      assert.is_true(gradcheck(function(a, ww, bb)
        return F.conv3d(a, ww, bb, { stride = { 1, 2, 1 }, padding = { 1, 0, 1 }, dilation = { 2, 1, 1 }, groups = 2 })
      end, { x, w, b }))
      local x2, w2 = grad_leaf(rnd({ 2, 3, 3, 2 })), rnd({ 2, 2, 2, 2, 3 })   -- unbatched, 'same'
      assert.is_true(gradcheck(function(a) return F.conv3d(a, w2, nil, { padding = "same" }) end, { x2 }))
    end)

    it("nn.Conv3d has PyTorch's parameters, initialisation, padding modes, state_dict and printing", function()
      tide.manual_seed(2)
      local conv = nn.Conv3d(4, 6, { 3, 2, 5 }, { groups = 2, padding = { 1, 0, 2 } })
      assert.are.same({ 6, 2, 3, 2, 5 }, conv.weight:shape())
      assert.are.same({ 6 }, conv.bias:shape())
      local bound = 1 / math.sqrt(2 * 3 * 2 * 5)
      assert.is_true(conv.weight:abs():max():item() <= bound)
      assert.is_true(conv.weight:abs():max():item() > 0.8 * bound)
      assert.is_true(conv.bias:abs():max():item() <= bound)
      assert.are.same({ "weight", "bias" }, names_of(conv))
      assert.are.same({ "weight" }, names_of(nn.Conv3d(1, 2, 3, { bias = false })))
      local x = tide.randn(2, 4, 3, 4, 6)
      H.close(conv(x), F.conv3d(x, conv.weight, conv.bias, { padding = { 1, 0, 2 }, groups = 2 }), 1e-5, 1e-6)
      -- the other padding modes pad the input with F.pad first
      for _, mode in ipairs { "reflect", "replicate", "circular" } do
        local c = nn.Conv3d(4, 2, 3, { padding = { 1, 2, 1 }, padding_mode = mode })
        H.close(c(x), F.conv3d(F.pad(x, { 1, 1, 2, 2, 1, 1 }, mode), c.weight, c.bias), 1e-5, 1e-6, mode)
      end
      local c = nn.Conv3d(1, 1, { 1, 1, 3 }, { padding = { 0, 0, 1 }, padding_mode = "circular", bias = false })
      c.weight = tide.tensor({ { { { { 1, 10, 100 } } } } }):requires_grad_()
      H.close(c(tide.tensor({ { { { { 1, 2, 3 } } } } })), { { { { { 213, 321, 132 } } } } })
      assert.are.equal("Conv3d(16, 33, kernel_size=(3, 3, 3), stride=(2, 2, 2))",
        tostring(nn.Conv3d(16, 33, 3, { stride = 2 })))
      assert.are.equal("Conv3d(4, 8, kernel_size=(3, 5, 2), stride=(1, 1, 1), padding=(4, 2, 0), dilation=(3, 1, 1), groups=2, bias=false, padding_mode=reflect)",
        tostring(nn.Conv3d(4, 8, { 3, 5, 2 }, { padding = { 4, 2, 0 }, dilation = { 3, 1, 1 }, groups = 2,
          bias = false, padding_mode = "reflect" })))
    end)
  end)

  describe("conv_transpose3d", function()
    it("matches a float64 reference with stride, padding, output_padding, dilation and groups, on any layout", function()
      local xs, ws = { 2, 4, 3, 2, 3 }, { 4, 3, 2, 3, 2 }
      local x, xv = rnd(xs)
      local w, wv = rnd(ws)
      local b, bv = rnd({ 6 })
      local opts = { stride = { 2, 1, 3 }, padding = { 1, 1, 0 }, output_padding = { 1, 0, 2 }, dilation = { 1, 2, 1 },
                     groups = 2 }
      local want = convt3d_ref(xv, xs, wv, ws, bv, { 2, 1, 3 }, { 1, 1, 0 }, { 1, 0, 2 }, { 1, 2, 1 }, 2)
      each_layout(x, function(t, name) H.close(F.conv_transpose3d(t, w, b, opts), want, 1e-12, 1e-12, name) end)
      -- padding beyond dilation (k - 1), output_padding below dilation, one depth tap
      local w1, wv1 = rnd({ 4, 1, 1, 2, 2 })
      H.close(F.conv_transpose3d(x, w1, nil, { padding = { 0, 2, 1 }, dilation = 3, output_padding = { 1, 2, 0 } }),
        convt3d_ref(xv, xs, wv1, { 4, 1, 1, 2, 2 }, nil, { 1, 1, 1 }, { 0, 2, 1 }, { 1, 2, 0 }, { 3, 3, 3 }, 1),
        1e-12, 1e-12)
      H.close(F.conv_transpose3d(x[1], w, b, opts), want[1], 1e-12, 1e-12)
      assert.are.same({ 0, 6, 5, 4, 10 }, F.conv_transpose3d(tide.zeros({ 0, 4, 3, 2, 3 }, "float64"), w, b, opts):shape())
    end)

    it("has gradients for input, weight and bias (gradcheck)", function()
      local x, w, b = grad_leaf(rnd({ 1, 2, 2, 2, 3 })), grad_leaf(rnd({ 2, 2, 2, 2, 2 })), grad_leaf(rnd({ 4 }))
      assert.is_true(gradcheck(function(a, ww, bb)
        return F.conv_transpose3d(a, ww, bb,
          { stride = 2, padding = { 1, 0, 1 }, output_padding = { 1, 0, 1 }, groups = 2 })
      end, { x, w, b }))
    end)

    it("nn.ConvTranspose3d has PyTorch's parameters, initialisation, output_size and printing", function()
      tide.manual_seed(4)
      local up = nn.ConvTranspose3d(4, 6, { 2, 3, 2 }, { stride = 2, padding = 1, output_padding = 1, groups = 2 })
      assert.are.same({ 4, 3, 2, 3, 2 }, up.weight:shape())
      assert.are.same({ "weight", "bias" }, names_of(up))
      local bound = 1 / math.sqrt(3 * 2 * 3 * 2)   -- fan_in = out/groups * kD * kH * kW, as PyTorch
      assert.is_true(up.weight:abs():max():item() <= bound)
      assert.is_true(up.weight:abs():max():item() > 0.8 * bound)
      local x = tide.randn(2, 4, 2, 3, 3)
      local y = up(x)
      assert.are.same({ 2, 6, 3, 6, 5 }, y:shape())
      H.close(y, F.conv_transpose3d(x, up.weight, up.bias,
        { stride = 2, padding = 1, output_padding = 1, groups = 2 }), 1e-5, 1e-6)
      local plain = nn.ConvTranspose3d(4, 6, 3, { stride = 2, padding = 1 })
      assert.are.same({ 2, 6, 3, 5, 5 }, plain(x):shape())
      assert.are.same({ 2, 6, 4, 6, 5 }, plain(x, { 4, 6, 5 }):shape())
      H.close(plain(x, { 2, 6, 4, 6, 6 }), F.conv_transpose3d(x, plain.weight, plain.bias,
        { stride = 2, padding = 1, output_padding = { 1, 1, 1 } }), 1e-5, 1e-6)
      assert.has_error(function() plain(x, { 3, 7, 5 }) end,
        "ConvTranspose3d: output_size (3, 7, 5) is not reachable: dimension 2 can be 5 to 6")
      assert.has_error(function() plain(x, { 3, 5 }) end, "ConvTranspose3d: output_size must have 3 sizes, got 2")
      assert.are.equal("ConvTranspose3d(16, 33, kernel_size=(3, 5, 2), stride=(2, 1, 1), padding=(0, 4, 2), output_padding=(1, 0, 0))",
        tostring(nn.ConvTranspose3d(16, 33, { 3, 5, 2 }, { stride = { 2, 1, 1 }, padding = { 0, 4, 2 },
          output_padding = { 1, 0, 0 } })))
      assert.are.equal("ConvTranspose3d(2, 4, kernel_size=(3, 3, 3), stride=(1, 1, 1), bias=false)",
        tostring(nn.ConvTranspose3d(2, 4, 3, { bias = false })))
    end)
  end)

  describe("max_pool3d", function()
    it("matches a float64 reference, indices included, with stride, padding, dilation and ceil_mode", function()
      local xs = { 2, 3, 5, 6, 5 }
      local x, xv = rnd(xs)
      for _, c in ipairs {
        { k = { 2, 2, 2 }, s = { 2, 2, 2 }, p = { 0, 0, 0 }, d = { 1, 1, 1 } },
        { k = { 3, 2, 3 }, s = { 2, 1, 2 }, p = { 1, 1, 1 }, d = { 1, 1, 1 }, ceil = true },
        { k = { 2, 3, 2 }, s = { 1, 2, 3 }, p = { 1, 0, 1 }, d = { 2, 1, 2 } },
        { k = { 3, 3, 3 }, s = { 3, 3, 2 }, p = { 1, 1, 0 }, d = { 1, 1, 1 }, ceil = true },
      } do
        local want, widx = max_pool3d_ref(xv, xs, c.k, c.s, c.p, c.d, c.ceil)
        each_layout(x, function(t, name)
          local y, idx = F.max_pool3d(t, c.k, { stride = c.s, padding = c.p, dilation = c.d, ceil_mode = c.ceil,
            return_indices = true })
          H.equal(y, want, name)
          H.equal(idx, widx, name)
          assert.are.equal("int64", idx:dtype())
        end)
      end
      -- the defaults (stride = kernel), unbatched, an empty batch
      local want = max_pool3d_ref(xv, xs, { 2, 2, 2 }, { 2, 2, 2 }, { 0, 0, 0 }, { 1, 1, 1 })
      H.equal(F.max_pool3d(x, 2), want)
      H.equal(F.max_pool3d(x[2], 2), want[2])
      assert.are.same({ 0, 3, 2, 3, 2 }, F.max_pool3d(tide.zeros({ 0, 3, 5, 6, 5 }, "float64"), 2):shape())
    end)

    it("gives the first maximum of equal ones, and -inf with index 0 for a window of padding only", function()
      local y, idx = F.max_pool3d(tide.ones({ 1, 1, 4, 4, 4 }, "float64"), 2, { return_indices = true })
      H.equal(y, tide.ones({ 1, 1, 2, 2, 2 }, "float64"))
      H.equal(idx, { { { { { 1, 3 }, { 9, 11 } }, { { 33, 35 }, { 41, 43 } } } } })
      -- depth 2, kernel 2 dilated by 3 with padding 1: the window at -1 and 2 reads no slice
      local x, xv = rnd({ 1, 1, 2, 2, 2 })
      local want, widx = max_pool3d_ref(xv, { 1, 1, 2, 2, 2 }, { 2, 1, 1 }, { 1, 1, 1 }, { 1, 0, 0 }, { 3, 1, 1 })
      local got, gidx = F.max_pool3d(x, { 2, 1, 1 }, { stride = 1, padding = { 1, 0, 0 }, dilation = { 3, 1, 1 },
        return_indices = true })
      H.equal(got, want)
      H.equal(gidx, widx)
      assert.are.equal(-math.huge, want[1][1][1][1][1])
    end)

    it("has gradients (gradcheck)", function()
      local x = grad_leaf(rnd({ 1, 2, 4, 3, 4 }))
      assert.is_true(gradcheck(function(a)
        return F.max_pool3d(a, { 3, 2, 2 }, { stride = { 2, 1, 2 }, padding = { 1, 1, 0 }, ceil_mode = true })
      end, { x }))
      assert.is_true(gradcheck(function(a) return F.max_pool3d(a[1], 2, { dilation = { 2, 1, 1 }, stride = 1 }) end,
        { x }))
    end)

    it("nn.MaxPool3d pools with its options and prints like PyTorch", function()
      local x = rnd({ 1, 2, 4, 4, 4 })
      local pool = nn.MaxPool3d(3, { stride = 2, padding = 1, return_indices = true })
      local y, idx = pool(x)
      local wy, widx = F.max_pool3d(x, 3, { stride = 2, padding = 1, return_indices = true })
      H.equal(y, wy)
      H.equal(idx, widx)
      assert.are.same({}, names_of(pool))
      assert.are.equal("MaxPool3d(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=false)", tostring(pool))
      assert.are.equal("MaxPool3d(kernel_size=(2, 3, 3), stride=(2, 3, 3), padding=0, dilation=1, ceil_mode=true)",
        tostring(nn.MaxPool3d({ 2, 3, 3 }, { ceil_mode = true })))
    end)
  end)

  describe("avg_pool3d", function()
    it("matches a float64 reference with padding, ceil_mode, count_include_pad and divisor_override", function()
      local xs = { 2, 3, 5, 6, 7 }
      local x, xv = rnd(xs)
      for _, c in ipairs {
        { k = { 2, 2, 2 }, s = { 2, 2, 2 }, p = { 0, 0, 0 } },
        { k = { 3, 2, 3 }, s = { 2, 1, 2 }, p = { 1, 1, 1 }, ceil = true },
        { k = { 3, 2, 3 }, s = { 2, 1, 2 }, p = { 1, 1, 1 }, ceil = true, exclude = true },
        { k = { 2, 3, 2 }, s = { 3, 2, 3 }, p = { 1, 1, 1 }, exclude = true },
        { k = { 3, 3, 3 }, s = { 2, 2, 2 }, p = { 1, 0, 1 }, ceil = true, div = 5 },
      } do
        local want = avg_pool3d_ref(xv, xs, c.k, c.s, c.p, c.ceil, not c.exclude, c.div)
        each_layout(x, function(t, name)
          H.close(F.avg_pool3d(t, c.k, { stride = c.s, padding = c.p, ceil_mode = c.ceil,
            count_include_pad = not c.exclude, divisor_override = c.div }), want, 1e-12, 1e-14, name)
        end)
      end
      local want = avg_pool3d_ref(xv, xs, { 2, 2, 2 }, { 2, 2, 2 }, { 0, 0, 0 }, false, true)
      H.close(F.avg_pool3d(x[1], 2), want[1], 1e-12, 1e-14)
      assert.are.same({ 0, 3, 2, 3, 3 }, F.avg_pool3d(tide.zeros({ 0, 3, 5, 6, 7 }, "float64"), 2):shape())
    end)

    it("has gradients (gradcheck), and nn.AvgPool3d pools and prints like PyTorch", function()
      local x = grad_leaf(rnd({ 1, 2, 4, 3, 5 }))
      assert.is_true(gradcheck(function(a)
        return F.avg_pool3d(a, { 3, 2, 3 }, { stride = 2, padding = 1, ceil_mode = true, count_include_pad = false })
      end, { x }))
      assert.is_true(gradcheck(function(a) return F.avg_pool3d(a, 2, { divisor_override = 3 }) end, { x }))
      local pool = nn.AvgPool3d({ 2, 1, 2 }, { stride = 1, count_include_pad = false })
      local xs = rnd({ 1, 2, 3, 3, 3 })
      H.close(pool(xs), F.avg_pool3d(xs, { 2, 1, 2 }, { stride = 1 }), 1e-12, 1e-14)
      assert.are.equal("AvgPool3d(kernel_size=(2, 1, 2), stride=1, padding=0)", tostring(pool))
      assert.are.equal("AvgPool3d(kernel_size=3, stride=2, padding=1)", tostring(nn.AvgPool3d(3, { stride = 2, padding = 1 })))
    end)
  end)

  describe("adaptive pools", function()
    it("adaptive_avg_pool3d and adaptive_max_pool3d match float64 references", function()
      local xs = { 2, 3, 5, 7, 4 }
      local x, xv = rnd(xs)
      for _, o in ipairs { { 2, 3, 2 }, { 3, 5, 4 }, { 5, 7, 4 }, { 1, 1, 1 }, { 4, 2, 3 } } do
        local want = adaptive3d_ref(xv, xs, o, mean_of)
        each_layout(x, function(t, name)
          H.close(F.adaptive_avg_pool3d(t, o), want, 1e-12, 1e-14, name)
          local y, idx = F.adaptive_max_pool3d(t, o, true)
          H.equal(y, adaptive3d_ref(xv, xs, o, max_of), name)
          H.equal(idx, adaptive3d_ref(xv, xs, o, argmax_of), name)
        end)
      end
      H.close(F.adaptive_avg_pool3d(x[1], 2), adaptive3d_ref(xv, xs, { 2, 2, 2 }, mean_of)[1], 1e-12, 1e-14)
      H.equal(F.adaptive_max_pool3d(x[2], { 3, 2, 2 }), adaptive3d_ref(xv, xs, { 3, 2, 2 }, max_of)[2])
      assert.are.same({ 0, 3, 2, 2, 2 }, F.adaptive_avg_pool3d(tide.zeros({ 0, 3, 5, 7, 4 }, "float64"), 2):shape())
      assert.are.same({ 0, 3, 2, 2, 2 }, F.adaptive_max_pool3d(tide.zeros({ 0, 3, 5, 7, 4 }, "float64"), 2):shape())
    end)

    it("have gradients (gradcheck), and nn.AdaptiveAvgPool3d/AdaptiveMaxPool3d print like PyTorch", function()
      local x = grad_leaf(rnd({ 1, 2, 5, 3, 4 }))
      assert.is_true(gradcheck(function(a) return F.adaptive_avg_pool3d(a, { 3, 2, 3 }) end, { x }))
      assert.is_true(gradcheck(function(a) return F.adaptive_max_pool3d(a, { 2, 2, 3 }) end, { x }))
      local gap = nn.AdaptiveAvgPool3d(1)
      H.close(gap(x:detach()), x:detach():mean({ 3, 4, 5 }, true), 1e-12, 1e-14)
      local amp = nn.AdaptiveMaxPool3d({ 2, 1, 2 }, true)
      local y, idx = amp(x:detach())
      local wy, widx = F.adaptive_max_pool3d(x:detach(), { 2, 1, 2 }, { return_indices = true })
      H.equal(y, wy)
      H.equal(idx, widx)
      assert.are.equal("AdaptiveAvgPool3d(output_size=1)", tostring(gap))
      assert.are.equal("AdaptiveMaxPool3d(output_size=(2, 1, 2))", tostring(amp))
    end)
  end)

  describe("BatchNorm3d and InstanceNorm3d", function()
    it("nn.BatchNorm3d normalises over N, D, H, W and tracks running statistics", function()
      local xs = { 3, 2, 2, 3, 2 }
      local x, xv = rnd(xs, -2, 3)
      local bn = nn.BatchNorm3d(2, { dtype = "float64" })
      assert.are.same({ "weight", "bias", "running_mean", "running_var", "num_batches_tracked" }, names_of(bn))
      local want, group = norm_ref(xv, xs, false, nil, nil, 1e-5)
      H.close(bn(x), want, 1e-10, 1e-12)
      local m1, _, u1 = group(1, 1)
      local m2, _, u2 = group(1, 2)
      H.close(bn.running_mean, { 0.1 * m1, 0.1 * m2 }, 1e-12, 1e-14)
      H.close(bn.running_var, { 0.9 + 0.1 * u1, 0.9 + 0.1 * u2 }, 1e-12, 1e-14)
      bn:eval()
      H.close(bn(x), F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, false), 1e-12, 1e-14)
      assert.are.equal("BatchNorm3d(2, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)", tostring(bn))
      local xg = grad_leaf(rnd({ 2, 2, 2, 2, 2 }))
      local b2 = nn.BatchNorm3d(2, { dtype = "float64" })
      assert.is_true(gradcheck(function(a) return b2(a) end, { xg }))
    end)

    it("nn.InstanceNorm3d normalises each sample's channels, batched or not", function()
      local xs = { 2, 3, 2, 3, 2 }
      local x, xv = rnd(xs, -2, 3)
      local w, wv = rnd({ 3 })
      local b, bv = rnd({ 3 })
      local n = nn.InstanceNorm3d(3, { affine = true, track_running_stats = true, dtype = "float64" })
      assert.are.same({ "weight", "bias", "running_mean", "running_var", "num_batches_tracked" }, names_of(n))
      assert.are.same({}, names_of(nn.InstanceNorm3d(3)))
      n.weight, n.bias = grad_leaf(w), grad_leaf(b)
      local want = norm_ref(xv, xs, true, wv, bv, 1e-5)
      H.close(n(x), want, 1e-10, 1e-12)
      H.close(n(x[2]), want[2], 1e-10, 1e-12)
      n:eval()
      H.close(n(x), F.instance_norm(x, n.running_mean, n.running_var, n.weight, n.bias, false), 1e-12, 1e-14)
      assert.are.equal("InstanceNorm3d(3, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)", tostring(n))
      assert.are.same({ 0, 3, 2, 3, 2 }, nn.InstanceNorm3d(3)(tide.zeros({ 0, 3, 2, 3, 2 }, "float64")):shape())
      local xg, wg, bg = grad_leaf(rnd({ 2, 2, 2, 2, 3 })), grad_leaf(rnd({ 2 })), grad_leaf(rnd({ 2 }))
      assert.is_true(gradcheck(function(a, ww, bb) return F.instance_norm(a, nil, nil, ww, bb) end, { xg, wg, bg }))
    end)
  end)

  describe("interpolate on 5-d input", function()
    it("trilinear matches a float64 reference, with and without align_corners, by size or scale_factor", function()
      local xs = { 2, 2, 3, 4, 2 }
      local x, xv = rnd(xs)
      for _, ac in ipairs { false, true } do
        each_layout(x, function(t, name)
          H.close(F.interpolate(t, { size = { 5, 3, 4 }, mode = "trilinear", align_corners = ac }),
            trilinear_ref(xv, xs, { 5, 3, 4 }, nil, ac), 1e-12, 1e-12, name)
        end)
        H.close(F.interpolate(x, { scale_factor = { 1.7, 0.6, 2 }, mode = "trilinear", align_corners = ac }),
          trilinear_ref(xv, xs, { 5, 2, 4 }, not ac and { 1.7, 0.6, 2 } or nil, ac), 1e-12, 1e-12)
      end
      H.close(F.interpolate(x, { scale_factor = 1.7, mode = "trilinear", recompute_scale_factor = true }),
        trilinear_ref(xv, xs, { 5, 6, 3 }, nil, false), 1e-12, 1e-12)
      H.close(F.interpolate(x:float(), { size = { 4, 5, 3 }, mode = "trilinear" }),
        trilinear_ref(xv, xs, { 4, 5, 3 }, nil, false), 1e-5, 1e-6)
      assert.are.same({ 0, 2, 6, 8, 4 }, F.interpolate(tide.zeros({ 0, 2, 3, 4, 2 }, "float64"),
        { scale_factor = 2, mode = "trilinear" }):shape())
    end)

    it("nearest and area match references, and nn.Upsample takes 5-d input", function()
      local xs = { 1, 2, 3, 4, 2 }
      local x, xv = rnd(xs)
      each_layout(x, function(t, name)
        H.equal(F.interpolate(t, { size = { 6, 5, 3 } }), nearest3d_ref(xv, xs, { 6, 5, 3 }), name)
        H.equal(F.interpolate(t, { scale_factor = { 2, 1.5, 0.5 } }), nearest3d_ref(xv, xs, { 6, 6, 1 }, { 2, 1.5, 0.5 }),
          name)
      end)
      -- nearest-exact: floor((dst + 0.5) * in / out) along each dim
      local l = tide.tensor({ 10, 20, 30 }, "float64"):view(1, 1, 3, 1, 1)
      H.equal(F.interpolate(l, { size = { 5, 1, 1 }, mode = "nearest-exact" }):view(5), { 10, 10, 20, 30, 30 })
      H.equal(F.interpolate(l, { size = { 5, 1, 1 } }):view(5), { 10, 10, 20, 20, 30 })
      H.close(F.interpolate(x, { size = { 2, 2, 1 }, mode = "area" }), F.adaptive_avg_pool3d(x, { 2, 2, 1 }), 1e-12, 1e-14)
      local up = nn.Upsample({ scale_factor = 2, mode = "trilinear", align_corners = true })
      H.close(up(x), trilinear_ref(xv, xs, { 6, 8, 4 }, nil, true), 1e-12, 1e-12)
      H.equal(nn.Upsample({ size = { 6, 5, 3 } })(x), nearest3d_ref(xv, xs, { 6, 5, 3 }))
      assert.are.equal("Upsample(scale_factor=2, mode='trilinear')", tostring(up))
      assert.are.equal(F.interpolate, F.upsample)
    end)

    it("has gradients (gradcheck)", function()
      local x = grad_leaf(rnd({ 1, 2, 2, 3, 2 }))
      for _, o in ipairs {
        { size = { 3, 4, 3 }, mode = "trilinear" }, { scale_factor = 1.5, mode = "trilinear", align_corners = true },
        { size = { 3, 5, 1 } }, { size = { 1, 2, 1 }, mode = "area" } } do
        assert.is_true(gradcheck(function(a) return F.interpolate(a, o) end, { x }))
      end
    end)
  end)

  describe("errors", function()
    local x = tide.zeros({ 1, 4, 3, 3, 3 })
    local w = tide.zeros({ 2, 4, 2, 2, 2 })
    local function err(f, msg) assert.has_error(f, msg) end

    it("conv3d and Conv3d name the function, the argument and the shapes", function()
      err(function() F.conv3d(nil, w) end, "conv3d: input must be a tensor, got nil")
      err(function() F.conv3d(x, 1) end, "conv3d: weight must be a tensor, got number")
      err(function() F.conv3d(x, tide.zeros(2, 4, 2, 2)) end,
        "conv3d: weight must be 5-d [out_channels, in_channels/groups, kD, kH, kW], got [2,4,2,2]")
      err(function() F.conv3d(tide.zeros(4, 3, 3), w) end,
        "conv3d: expects a 4-d (C, D, H, W) or 5-d (N, C, D, H, W) input, got shape [4,3,3]")
      err(function() F.conv3d(x, tide.zeros(2, 3, 2, 2, 2)) end,
        "conv3d: input [1,4,3,3,3] has 4 channels, but weight [2,3,2,2,2] with groups 1 expects 3")
      err(function() F.conv3d(x, tide.zeros(3, 2, 2, 2, 2), nil, { groups = 2 }) end,
        "conv3d: the 3 output channels of weight [3,2,2,2,2] are not divisible by groups 2")
      err(function() F.conv3d(x, w, tide.zeros(3)) end, "conv3d: bias of shape [3] does not match the 2 output channels")
      err(function() F.conv3d(x, w, 5) end, "conv3d: bias must be a tensor, got number")
      err(function() F.conv3d(x, w:double()) end, "conv3d: weight has dtype float64 but input has dtype float32")
      err(function() F.conv3d(x, w, tide.zeros({ 2 }, "float64")) end,
        "conv3d: bias has dtype float64 but input has dtype float32")
      err(function() F.conv3d(x:long(), w:long()) end, "conv3d: input must be a floating-point tensor, got int64")
      err(function() F.conv3d(x, w, nil, { groups = 0 }) end, "conv3d: groups must be a positive integer, got 0")
      err(function() F.conv3d(x, w, nil, { stride = { 1, 2 } }) end,
        "conv3d: stride must be an integer or a table {d, h, w} of integers, got a table of 2")
      err(function() F.conv3d(x, w, nil, { stride = { 1, 0, 1 } }) end, "conv3d: stride must be positive, got {1, 0, 1}")
      err(function() F.conv3d(x, w, nil, { padding = -1 }) end,
        "conv3d: padding must be non-negative, got {-1, -1, -1}")
      err(function() F.conv3d(x, w, nil, { padding = "same", stride = 2 }) end,
        "conv3d: padding='same' needs stride 1, got {2, 2, 2}")
      err(function() F.conv3d(x, w, nil, { dilation = { 3, 1, 1 } }) end,
        "conv3d: kernel {2, 2, 2} (dilation {3, 1, 1}) is larger than the padded input {3, 3, 3} (input [1,4,3,3,3], padding {0, 0, 0})")
      err(function() F.conv3d(x, w, nil, { pad = 1 }) end, "conv3d: unknown option 'pad'")
      err(function() F.conv3d(x, w, nil, 1) end, "conv3d: options must be a table, got number")
      err(function() nn.Conv3d(4, 6, 3, { groups = 4 }) end,
        "Conv3d: in_channels (4) and out_channels (6) must be divisible by groups (4)")
      err(function() nn.Conv3d(0, 6, 3) end, "Conv3d: in_channels must be a positive integer, got 0")
      err(function() nn.Conv3d(4, 6, { 3, 3 }) end,
        "Conv3d: kernel_size must be an integer or a table {d, h, w} of integers, got a table of 2")
      err(function() nn.Conv3d(4, 6, 3, { padding_mode = "mirror" }) end,
        "Conv3d: padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', got mirror")
      err(function() nn.Conv3d(4, 6, 3, { padding = "same", padding_mode = "reflect" }) end,
        "Conv3d: padding='same' needs padding_mode 'zeros', got 'reflect'")
      err(function() nn.Conv3d(4, 6, 3, 1) end, "Conv3d: options must be a table, got number")
    end)

    it("conv_transpose3d and ConvTranspose3d name the function and the shapes", function()
      local wt = tide.zeros({ 4, 2, 2, 2, 2 })
      err(function() F.conv_transpose3d(x, tide.zeros(4, 2, 2, 2)) end,
        "conv_transpose3d: weight must be 5-d [in_channels, out_channels/groups, kD, kH, kW], got [4,2,2,2]")
      err(function() F.conv_transpose3d(x, tide.zeros(3, 2, 2, 2, 2)) end,
        "conv_transpose3d: input [1,4,3,3,3] has 4 channels, but weight [3,2,2,2,2] with groups 1 expects 3, divisible by groups")
      err(function() F.conv_transpose3d(x, wt:double()) end,
        "conv_transpose3d: weight has dtype float64 but input has dtype float32")
      err(function() F.conv_transpose3d(x, wt, tide.zeros(4)) end,
        "conv_transpose3d: bias of shape [4] does not match the 2 output channels")
      err(function() F.conv_transpose3d(x, wt, nil, { output_padding = { 1, 0, 0 } }) end,
        "conv_transpose3d: output_padding {1, 0, 0} must be below either stride {1, 1, 1} or dilation {1, 1, 1}")
      err(function() F.conv_transpose3d(x, wt, nil, { padding = 3 }) end,
        "conv_transpose3d: input [1,4,3,3,3] with weight [4,2,2,2,2] gives an output of -2x-2x-2")
      err(function() F.conv_transpose3d(tide.zeros(1, 4, 3), wt) end,
        "conv_transpose3d: expects a 4-d (C, D, H, W) or 5-d (N, C, D, H, W) input, got shape [1,4,3]")
      err(function() nn.ConvTranspose3d(4, 2, 3, { padding_mode = "reflect" }) end,
        "ConvTranspose3d: padding_mode must be 'zeros', got reflect")
    end)

    it("the pools name the function, the options and the shapes", function()
      err(function() F.max_pool3d(x, 2, { padding = 2 }) end,
        "max_pool3d: padding {2, 2, 2} must be at most half of kernel_size {2, 2, 2}")
      err(function() F.max_pool3d(x, 4) end,
        "max_pool3d: input [1,4,3,3,3] with kernel_size {4, 4, 4}, stride {4, 4, 4}, padding {0, 0, 0} and dilation {1, 1, 1} gives an empty output")
      err(function() F.max_pool3d(tide.zeros({ 1, 3, 3, 3 }, "int64"), 2) end,
        "max_pool3d: input must be a floating-point tensor, got int64")
      err(function() F.max_pool3d(x, 2, { ceil_mode = 1 }) end, "max_pool3d: ceil_mode must be a boolean, got number")
      err(function() F.max_pool3d(x, 2, { return_indices = "yes" }) end,
        "max_pool3d: return_indices must be a boolean, got string")
      err(function() F.max_pool3d(x, { 2, 2 }) end,
        "max_pool3d: kernel_size must be an integer or a table {d, h, w} of integers, got a table of 2")
      err(function() F.max_pool3d(x, 2, { divisor_override = 2 }) end, "max_pool3d: unknown option 'divisor_override'")
      err(function() F.avg_pool3d(x, 2, { dilation = 2 }) end, "avg_pool3d: unknown option 'dilation'")
      err(function() F.avg_pool3d(x, 2, { divisor_override = 0 }) end,
        "avg_pool3d: divisor_override must be a nonzero integer, got 0")
      err(function() F.avg_pool3d(x, 2, { count_include_pad = 0 }) end,
        "avg_pool3d: count_include_pad must be a boolean, got number")
      err(function() F.avg_pool3d(tide.zeros(3, 3, 3), 2) end,
        "avg_pool3d: expects a 4-d (C, D, H, W) or 5-d (N, C, D, H, W) input, got shape [3,3,3]")
      err(function() F.adaptive_avg_pool3d(tide.zeros(1, 2, 0, 3, 3), 2) end,
        "adaptive_avg_pool3d: input [1,2,0,3,3] has an empty spatial dimension 3")
      err(function() F.adaptive_max_pool3d(x, { 2, 0, 2 }) end, "adaptive_max_pool3d: output_size must be positive, got {2, 0, 2}")
      err(function() F.adaptive_max_pool3d(x, 2, 1) end, "adaptive_max_pool3d: return_indices must be a boolean, got number")
      err(function() nn.AdaptiveAvgPool3d({ 1, 2 }) end,
        "AdaptiveAvgPool3d: output_size must be an integer or a table {d, h, w} of integers, got a table of 2")
      err(function() nn.MaxPool3d(2, { stride = 1, pading = 1 }) end, "MaxPool3d: unknown option 'pading'")
    end)

    it("the norms and interpolate name the function and the shapes", function()
      err(function() nn.BatchNorm3d(4)(tide.zeros(2, 4, 3, 3)) end,
        "BatchNorm3d: expected 5-d input [N, C, D, H, W], got shape [2,4,3,3]")
      err(function() nn.InstanceNorm3d(3)(x) end,
        "InstanceNorm3d: input [1,4,3,3,3] has 4 channels, expected num_features 3")
      err(function() nn.InstanceNorm3d(0) end, "InstanceNorm3d: num_features must be a positive integer, got 0")
      err(function() nn.InstanceNorm3d(2, { momentum = "x" }) end, "InstanceNorm3d: momentum must be a number, got string")
      err(function() nn.InstanceNorm3d(4)(tide.zeros(4, 3, 3)) end,
        "InstanceNorm3d: expects a 4-d (C, D, H, W) or 5-d (N, C, D, H, W) input, got shape [4,3,3]")
      err(function() F.interpolate(tide.zeros(1, 4, 3, 3), { size = 2, mode = "trilinear" }) end,
        "interpolate: mode 'trilinear' needs a 5-d input (N, C, D, H, W), got [1,4,3,3]")
      err(function() F.interpolate(x, { size = 2, mode = "bilinear" }) end,
        "interpolate: mode 'bilinear' needs a 4-d input (N, C, H, W), got [1,4,3,3,3]")
      err(function() F.interpolate(x, { size = 2, mode = "cubic" }) end,
        "interpolate: mode must be 'nearest', 'nearest-exact', 'linear', 'bilinear', 'trilinear' or 'area', got cubic")
      err(function() F.interpolate(x, { size = 2, align_corners = true }) end,
        "interpolate: align_corners can only be set with the linear modes, got mode 'nearest'")
      err(function() F.interpolate(x, { size = 2, mode = "trilinear", align_corners = 1 }) end,
        "interpolate: align_corners must be a boolean, got number")
      err(function() F.interpolate(x, { size = 2, scale_factor = 2 }) end,
        "interpolate: only one of size or scale_factor should be defined")
      err(function() F.interpolate(x, {}) end, "interpolate: either size or scale_factor should be defined")
      err(function() F.interpolate(x, { size = { 2, 2 } }) end, "interpolate: size must have 3 values for input [1,4,3,3,3], got 2")
      err(function() F.interpolate(x, { size = { 2, 0, 2 } }) end, "interpolate: sizes must be positive integers, got 0")
      err(function() F.interpolate(x, { scale_factor = -1 }) end, "interpolate: scale factors must be positive numbers, got -1")
      err(function() F.interpolate(x, { scale_factor = { 1, 0.2, 1 } }) end,
        "interpolate: scale_factor 0.2 makes dimension 4 of input [1,4,3,3,3] empty")
      err(function() F.interpolate(tide.zeros(1, 4, 0, 3, 3), { size = 2 }) end,
        "interpolate: input [1,4,0,3,3] has an empty spatial dimension")
      err(function() F.interpolate(tide.zeros({ 1, 4, 3, 3, 3 }, "int64"), { size = 2 }) end,
        "interpolate: input must be a floating-point tensor, got int64")
      err(function() F.interpolate(x, { size = 2, antialias = true }) end, "interpolate: unknown option 'antialias'")
    end)
  end)

  describe("under tide.jit.compile", function()
    it("a small 3-d CNN training step gives the eager losses and parameters, bit for bit", function()
      local function train(compiled)
        tide.manual_seed(5)
        local m = nn.Sequential(nn.Conv3d(1, 4, 3, { padding = 1 }), nn.BatchNorm3d(4), nn.ReLU(),
          nn.MaxPool3d(2), nn.Conv3d(4, 4, { 1, 3, 3 }, { padding = { 0, 1, 1 }, groups = 2 }),
          nn.InstanceNorm3d(4, { affine = true }), nn.ConvTranspose3d(4, 2, 2, { stride = 2 }),
          nn.AvgPool3d(2, { stride = 2 }), nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(2, 3))
        local opt = tide.optim.SGD(m:parameters(), { lr = 0.1, momentum = 0.9 })
        local function step(x, y)
          local loss = F.cross_entropy(m(x), y)
          opt:zero_grad()
          loss:backward()
          opt:step()
          return loss
        end
        local f = compiled and tide.jit.compile(step) or step
        tide.manual_seed(8)
        local losses = {}
        for i = 1, 4 do losses[i] = f(tide.randn(3, 1, 4, 6, 6), tide.randint(1, 4, { 3 })):item() end
        local params = {}
        for i, p in ipairs(m:parameters()) do params[i] = p:clone() end
        return losses, params, f
      end
      local l1, p1 = train(false)
      local l2, p2, f = train(true)
      assert.are.same(l1, l2)
      for i = 1, #p1 do H.equal(p2[i], p1[i], "parameter " .. i) end
      assert.are.equal(1, f:stats().captures)
      assert.are.equal(2, f:stats().replays)
    end)

    it("each function replays the eager values", function()
      local x = rnd({ 2, 4, 4, 5, 4 })
      local w, wt = rnd({ 4, 2, 2, 3, 2 }), rnd({ 4, 2, 2, 2, 2 })
      local function body(a)
        local m, i = F.max_pool3d(a, 3, { stride = 2, padding = 1, return_indices = true })
        local am, ai = F.adaptive_max_pool3d(a, { 3, 2, 3 }, true)
        return F.conv3d(a, w, nil, { padding = 1, groups = 2, stride = { 2, 1, 1 } }),
          F.conv_transpose3d(a, wt, nil, { stride = 2, groups = 2 }), m, i, am, ai,
          F.avg_pool3d(a, 2, { ceil_mode = true, padding = 1, count_include_pad = false }),
          F.adaptive_avg_pool3d(a, { 3, 4, 3 }), F.interpolate(a, { size = { 5, 3, 7 }, mode = "trilinear" }),
          F.interpolate(a, { scale_factor = 2 })
      end
      local f = tide.jit.compile(body)
      for call = 1, 3 do   -- eager warm-up, capture, replay
        local a = x * call
        local want, got = { body(a) }, { f(a) }
        assert.are.equal(#want, #got)
        for i = 1, #want do H.equal(got[i], want[i], "result " .. i .. ", call " .. call) end
      end
      assert.are.equal(1, f:stats().replays)
    end)
  end)
end)
